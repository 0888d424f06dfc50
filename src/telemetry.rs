//! Spans for store operations, turns and harness saves (feature `tracing`).
//!
//! With the feature, every [`SessionStore`](crate::SessionStore) operation of the file,
//! memory and PostgreSQL stores (the last without byte counts), every turn ([`Session::send`](crate::Session::send) and its variants)
//! and every harness save opens a [`tracing`] span at level `INFO`. Without it the helpers
//! below are zero-sized types and empty `#[inline]` functions: the call sites compile to
//! nothing and the `tracing` crate is not built.
//!
//! # Spans and fields
//!
//! Field names follow the OpenTelemetry semantic conventions where they have one (the
//! `GenAI` conventions for the conversation and model, `error.type` and `otel.status_code`
//! for the outcome, which `tracing-opentelemetry` maps to the span status), and are
//! prefixed `agent_session.` otherwise.
//!
//! | span | field | value |
//! |---|---|---|
//! | `agent_session.store` | `gen_ai.conversation.id` | the session id (absent for listings) |
//! | | `agent_session.store` | `file`, `memory` (and `postgres`, once the PostgreSQL store calls [`store_op`]) |
//! | | `agent_session.operation` | `save`, `load`, `load_at`, `list`, `list_scoped`, `delete`, `delete_if_unchanged`, `set_archived`, `stored_bytes`, `revisions`, `history`, `restore`, `trim_history` (and `list_page` for stores that override it) |
//! | | `agent_session.revision` | the revision saved, loaded, asked for or restored to |
//! | | `agent_session.bytes_written` | bytes the operation wrote (file store: every file written; memory store: the stored form); absent when nothing was written |
//! | | `agent_session.bytes_read` | bytes the operation read from files; absent when nothing was read |
//! | | `agent_session.sessions` | sessions listed (a listing, or a page of one) |
//! | `agent_session.turn` | `gen_ai.operation.name` | `invoke_agent` |
//! | | `gen_ai.conversation.id` | the session id |
//! | | `gen_ai.request.model` | the model of the session's options |
//! | | `agent_session.completions` | model completions in the turn |
//! | | `agent_session.tool_calls` | tool calls run in the turn |
//! | | `agent_session.stop_reason` | `finished` or `max_turns` |
//! | `agent_session.harness` | `gen_ai.conversation.id`, `agent_session.operation` (`save_session`), `agent_session.revision` | as above |
//! | every span | `agent_session.outcome` | `ok`, or the error's kind ([`ErrorKind`]): `not_found`, `conflict`, `invalid_input`, `corrupt`, `io`, `busy`, `engine` |
//! | | `otel.status_code` | `OK` or `ERROR` |
//! | | `error.type` | on failure only: the error's kind, as `agent_session.outcome` |
//!
//! A store operation that another one runs (a restore that loads and saves) is a child
//! span of it, and counts its bytes in its parent's too. Store operations run from a turn
//! (checkpoints) or a harness save are children of that span, also through
//! [`BlockingStore`](crate::BlockingStore)'s blocking pool.
//!
//! Nothing else is recorded: never message text, tool names, arguments or results, the
//! system prompt, metadata (keys or values) or error messages (which may quote stored
//! data); only ids, the model name, revisions, sizes, counts and kinds.
//!
//! # Calling it
//!
//! ```ignore
//! fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
//!     telemetry::store_op("load", "file", Some(id)).run(|| {
//!         // ...; telemetry::read(n) for each n bytes read on this thread
//!     })
//! }
//! ```
//!
//! [`OpSpan::run`] enters the span for the closure and records its outcome and what the
//! result tells ([`Traced`]: the revision of a save or load, the count of a listing).
//! Async code uses [`OpSpan::run_async`], which never holds the span entered across an
//! `.await`, and records sizes with [`OpSpan::record_bytes_read`] and
//! [`OpSpan::record_bytes_written`] (the thread-local counters behind [`read`] and
//! [`wrote`] only see synchronous code).

// Without the feature every helper is an empty shell: its `self` and most of its
// helpers go unused by design.
#![cfg_attr(not(feature = "tracing"), allow(dead_code, clippy::unused_self))]

use std::future::Future;

use crate::error::{ErrorKind, Result};
use crate::id::{Revision, SessionId};

/// The name of `kind` in the `agent_session.outcome` and `error.type` fields.
pub(crate) fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => "not_found",
        ErrorKind::Conflict => "conflict",
        ErrorKind::InvalidInput => "invalid_input",
        ErrorKind::Corrupt => "corrupt",
        ErrorKind::Io => "io",
        ErrorKind::Busy => "busy",
        ErrorKind::Leased => "leased",
        ErrorKind::Engine => "engine",
    }
}

/// What an operation's successful result adds to its span. Only sizes, counts and
/// revisions: an implementation must never record content. The types of the layers
/// above implement it beside their definitions (this module sits below them).
pub(crate) trait Traced {
    /// Records what `self` tells on `span`.
    #[inline]
    fn trace(&self, span: &OpSpan) {
        let _ = span;
    }
}

impl Traced for () {}
impl Traced for u64 {}
impl Traced for Option<u64> {}
impl<T> Traced for Vec<T> {}

impl Traced for Revision {
    #[inline]
    fn trace(&self, span: &OpSpan) {
        span.record_revision(*self);
    }
}

#[cfg(feature = "tracing")]
mod enabled {
    use std::cell::Cell;

    thread_local! {
        /// Bytes (read, written) by the innermost store operation running on this thread,
        /// `None` outside any.
        pub(super) static IO: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
    }

    /// Puts back the enclosing operation's counters when an operation ends (a panic
    /// included), adding this one's bytes to them.
    pub(super) struct IoScope {
        outer: Option<(u64, u64)>,
    }

    impl IoScope {
        pub(super) fn start() -> Self {
            IoScope {
                outer: IO.with(|io| io.replace(Some((0, 0)))),
            }
        }

        /// The running operation's (read, written) so far.
        pub(super) fn counted() -> (u64, u64) {
            IO.with(Cell::get).unwrap_or_default()
        }

        /// Ends the scope without adding its bytes to the enclosing operation's.
        pub(super) fn discard(mut self) {
            let outer = self.outer.take();
            IO.with(|io| io.set(outer));
            std::mem::forget(self);
        }
    }

    impl Drop for IoScope {
        fn drop(&mut self) {
            let (read, written) = IoScope::counted();
            let outer = self
                .outer
                .map(|(r, w)| (r.saturating_add(read), w.saturating_add(written)));
            IO.with(|io| io.set(outer));
        }
    }

    pub(super) fn add(read: u64, written: u64) {
        IO.with(|io| {
            if let Some((r, w)) = io.get() {
                io.set(Some((r.saturating_add(read), w.saturating_add(written))));
            }
        });
    }
}

/// Counts `n` bytes read by the store operation running on this thread (nothing outside
/// one, or without the feature).
#[inline]
pub(crate) fn read(n: u64) {
    #[cfg(feature = "tracing")]
    enabled::add(n, 0);
    #[cfg(not(feature = "tracing"))]
    let _ = n;
}

/// Counts `n` bytes written by the store operation running on this thread (nothing outside
/// one, or without the feature).
#[inline]
pub(crate) fn wrote(n: u64) {
    #[cfg(feature = "tracing")]
    enabled::add(0, n);
    #[cfg(not(feature = "tracing"))]
    let _ = n;
}

/// Bytes (read, written) that a future moved, counted by [`counting`] on whatever
/// threads polled it. Empty without the feature.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Io {
    #[cfg(feature = "tracing")]
    read: u64,
    #[cfg(feature = "tracing")]
    written: u64,
}

impl Io {
    /// Adds these bytes to the store operation running on this thread (as [`read`] and
    /// [`wrote`] do): for work done on another thread or runtime on its behalf.
    #[inline]
    // Only the PostgreSQL store works on another runtime's threads.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn hand_over(self) {
        #[cfg(feature = "tracing")]
        enabled::add(self.read, self.written);
    }
}

/// `future`, with the bytes it reports through [`read`] and [`wrote`] counted at each
/// poll, whichever thread polls it: the thread-local count of [`OpSpan::run`] follows an
/// async operation that way, across await points and worker threads. Without the
/// feature, `future`'s output and nothing counted.
pub(crate) async fn counting<F: Future>(future: F) -> (F::Output, Io) {
    #[cfg(feature = "tracing")]
    {
        let mut future = std::pin::pin!(future);
        let mut io = Io::default();
        let output = std::future::poll_fn(|cx| {
            let scope = enabled::IoScope::start();
            let polled = future.as_mut().poll(cx);
            let (read, written) = enabled::IoScope::counted();
            io.read = io.read.saturating_add(read);
            io.written = io.written.saturating_add(written);
            // Restores the thread's own count (which does not get these bytes: this
            // future's owner hands them over).
            scope.discard();
            polled
        })
        .await;
        (output, io)
    }
    #[cfg(not(feature = "tracing"))]
    {
        (future.await, Io::default())
    }
}

/// The span of one operation: a store call, a turn or a harness save. Zero-sized without
/// the feature.
#[derive(Debug, Clone)]
pub(crate) struct OpSpan {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
    /// Whether [`run`](Self::run) counts the bytes of [`read`] and [`wrote`] (store
    /// operations only).
    #[cfg(feature = "tracing")]
    counts_io: bool,
}

/// The span of store operation `operation` (`save`, `load`, …) of store `store` (`file`,
/// `memory`, `postgres`), on session `id` if it has one.
#[inline]
#[must_use]
pub(crate) fn store_op(
    operation: &'static str,
    store: &'static str,
    id: Option<&SessionId>,
) -> OpSpan {
    #[cfg(feature = "tracing")]
    {
        let span = tracing::info_span!(
            "agent_session.store",
            gen_ai.conversation.id = id.map(SessionId::as_str),
            agent_session.store = store,
            agent_session.operation = operation,
            agent_session.revision = tracing::field::Empty,
            agent_session.bytes_read = tracing::field::Empty,
            agent_session.bytes_written = tracing::field::Empty,
            agent_session.sessions = tracing::field::Empty,
            agent_session.outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
        );
        OpSpan {
            span,
            counts_io: true,
        }
    }
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (operation, store, id);
        OpSpan {}
    }
}

/// The span of one turn of session `id` with `model`.
#[inline]
#[must_use]
pub(crate) fn turn(id: &SessionId, model: &str) -> OpSpan {
    #[cfg(feature = "tracing")]
    {
        let span = tracing::info_span!(
            "agent_session.turn",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.conversation.id = id.as_str(),
            gen_ai.request.model = model,
            agent_session.completions = tracing::field::Empty,
            agent_session.tool_calls = tracing::field::Empty,
            agent_session.stop_reason = tracing::field::Empty,
            agent_session.outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
        );
        OpSpan {
            span,
            counts_io: false,
        }
    }
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (id, model);
        OpSpan {}
    }
}

/// The span of harness operation `operation` (`save_session`) on session `id`.
#[inline]
#[must_use]
pub(crate) fn harness_op(operation: &'static str, id: &SessionId) -> OpSpan {
    #[cfg(feature = "tracing")]
    {
        let span = tracing::info_span!(
            "agent_session.harness",
            gen_ai.conversation.id = id.as_str(),
            agent_session.operation = operation,
            agent_session.revision = tracing::field::Empty,
            agent_session.outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
        );
        OpSpan {
            span,
            counts_io: false,
        }
    }
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (operation, id);
        OpSpan {}
    }
}

/// Runs `call` inside the span current when this is called (on another thread, say).
/// Without the feature, `call` itself.
#[inline]
pub(crate) fn in_current_span<T>(call: impl FnOnce() -> T) -> impl FnOnce() -> T {
    #[cfg(feature = "tracing")]
    {
        let span = tracing::Span::current();
        move || span.in_scope(call)
    }
    #[cfg(not(feature = "tracing"))]
    call
}

impl OpSpan {
    /// Runs `call` inside the span, counting the bytes it reports through [`read`] and
    /// [`wrote`] (store spans), and records its outcome.
    #[inline]
    pub(crate) fn run<T: Traced>(&self, call: impl FnOnce() -> Result<T>) -> Result<T> {
        #[cfg(feature = "tracing")]
        {
            let io = self.counts_io.then(enabled::IoScope::start);
            let result = self.span.in_scope(call);
            if io.is_some() {
                let (read, written) = enabled::IoScope::counted();
                self.record_bytes_read(read);
                self.record_bytes_written(written);
            }
            drop(io);
            self.finish(&result);
            result
        }
        #[cfg(not(feature = "tracing"))]
        call()
    }

    /// Awaits `future` inside the span (entered only while it is polled) and records its
    /// outcome. Without the feature, `future` itself.
    #[cfg(feature = "tracing")]
    pub(crate) fn run_async<'a, T: Traced + 'a>(
        &'a self,
        future: impl Future<Output = Result<T>> + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        use tracing::Instrument;
        let instrumented = counting(future).instrument(self.span.clone());
        async move {
            let (result, io) = instrumented.await;
            if self.counts_io {
                self.record_bytes_read(io.read);
                self.record_bytes_written(io.written);
            }
            self.finish(&result);
            result
        }
    }

    /// Awaits `future` inside the span (entered only while it is polled) and records its
    /// outcome. Without the feature, `future` itself.
    #[cfg(not(feature = "tracing"))]
    #[inline]
    pub(crate) fn run_async<'a, T: Traced + 'a>(
        &'a self,
        future: impl Future<Output = Result<T>> + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        future
    }

    /// Records the outcome of `result`: `ok`, or the error's kind (`error.type`), and
    /// what a successful result tells ([`Traced`]).
    #[inline]
    pub(crate) fn finish<T: Traced>(&self, result: &Result<T>) {
        #[cfg(feature = "tracing")]
        match result {
            Ok(value) => {
                value.trace(self);
                self.span.record("agent_session.outcome", "ok");
                self.span.record("otel.status_code", "OK");
            }
            Err(error) => {
                let kind = kind_name(error.kind());
                self.span.record("agent_session.outcome", kind);
                self.span.record("otel.status_code", "ERROR");
                self.span.record("error.type", kind);
            }
        }
        #[cfg(not(feature = "tracing"))]
        let _ = result;
    }

    /// Records `revision` (`agent_session.revision`).
    #[inline]
    pub(crate) fn record_revision(&self, revision: Revision) {
        #[cfg(feature = "tracing")]
        self.span
            .record("agent_session.revision", revision.as_u64());
        #[cfg(not(feature = "tracing"))]
        let _ = revision;
    }

    /// Records `n` bytes read (`agent_session.bytes_read`), unless 0.
    #[inline]
    pub(crate) fn record_bytes_read(&self, n: u64) {
        #[cfg(feature = "tracing")]
        if n > 0 {
            self.span.record("agent_session.bytes_read", n);
        }
        #[cfg(not(feature = "tracing"))]
        let _ = n;
    }

    /// Records `n` bytes written (`agent_session.bytes_written`), unless 0.
    #[inline]
    pub(crate) fn record_bytes_written(&self, n: u64) {
        #[cfg(feature = "tracing")]
        if n > 0 {
            self.span.record("agent_session.bytes_written", n);
        }
        #[cfg(not(feature = "tracing"))]
        let _ = n;
    }

    /// Records a count in `field`, one of the span's declared fields.
    #[inline]
    pub(crate) fn record_count(&self, field: &'static str, n: impl TryInto<u64>) {
        #[cfg(feature = "tracing")]
        if let Ok(n) = n.try_into() {
            self.span.record(field, n);
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (field, n);
    }

    /// Records a fixed name (never data) in `field`, one of the span's declared fields.
    #[inline]
    pub(crate) fn record_str(&self, field: &'static str, value: &'static str) {
        #[cfg(feature = "tracing")]
        self.span.record(field, value);
        #[cfg(not(feature = "tracing"))]
        let _ = (field, value);
    }
}

#[cfg(all(test, not(feature = "tracing")))]
mod tests {
    #[test]
    fn without_the_feature_a_span_is_zero_sized() {
        assert_eq!(std::mem::size_of::<super::OpSpan>(), 0);
    }
}
