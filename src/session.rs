//! `Session`: drives the agent loop and produces snapshots when idle.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::clock;
use crate::compactor::Compaction;
use crate::engine::{
    BoxFuture, Completion, CompletionRequest, Engine, ToolDefinition, ToolExecutor,
};
use crate::error::{BoxError, Error, Result};
use crate::id::{Revision, SessionId};
use crate::json;
use crate::lease::Lease;
use crate::snapshot::check_metadata_depth;
use crate::snapshot::Lineage;
use crate::snapshot::{
    compact_parts, compaction_point, restore_parts, rewind_parts, BlockPosition, CompactTarget,
    Counts, HistoryStats, PersistedOptions, Provenance, RestoreTarget, RewindTo, SessionSnapshot,
    SnapshotParts, ToolCallRecord, ToolCallStatus, DEFAULT_MAX_TURNS,
};
use crate::telemetry;
use crate::transcript::{
    blocks_depth, dismantle_message, dismantle_output, message_depth, ContentBlock, Message, Role,
    ToolCall, ToolOutput, ToolResult,
};
use crate::usage::{Usage, UsageTotals};

/// The output of the error result that closes a tool call whose result was never kept:
/// its turn was cancelled (the `send` future dropped, a tool panicked), or the process
/// stopped or the save of its result failed while a turn saved step by step
/// ([`Session::send_message_with`]), whose placeholder this is. Nobody can tell whether
/// the tool ran, so it says so.
pub const INTERRUPTED_OUTPUT: &str = "interrupted: no result of this tool call was kept (the turn was cancelled, the process stopped, or saving the result failed, after the call was made); it may have run, and it was not run again";

/// How a session runs.
///
/// `model`, `system_prompt`, `max_turns` and `metadata` are saved with the session and
/// restored by [`Harness::resume_session`](crate::Harness::resume_session) when no options
/// are passed. `tools` is never saved (code cannot be serialized): it must be supplied
/// every time, here or as the harness's default executor.
///
/// # Examples
///
/// ```
/// use agent_session::SessionOptions;
/// use serde_json::json;
///
/// let options = SessionOptions::new("gpt-4o-mini")
///     .system_prompt("You are terse.")
///     .max_turns(8)
///     .metadata_entry("project", json!("parser"));
/// assert_eq!(options.max_turns, 8);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct SessionOptions {
    /// The model to use. Saved.
    pub model: String,
    /// The system prompt. Saved. Default: none.
    pub system_prompt: Option<String>,
    /// Most model completions per [`Session::send`]; at least 1. Saved. Default:
    /// [`DEFAULT_MAX_TURNS`].
    pub max_turns: u32,
    /// Free-form JSON metadata (a `"title"` string names the session in listings). Saved.
    /// Default: empty.
    pub metadata: Map<String, Value>,
    /// Runs the tools the model calls. **Not saved.** Default: none, in which case a
    /// [`Harness`](crate::Harness) supplies its own; without any executor, every tool call
    /// gets an error result.
    pub tools: Option<Arc<dyn ToolExecutor>>,
}

impl fmt::Debug for SessionOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionOptions")
            .field("model", &self.model)
            .field("system_prompt", &self.system_prompt)
            .field("max_turns", &self.max_turns)
            .field("metadata", &self.metadata)
            .field("tools", &self.tools.as_ref().map(|_| "<executor>"))
            .finish()
    }
}

impl SessionOptions {
    /// Options for `model`, with every other field at its default.
    #[must_use]
    pub fn new(model: impl Into<String>) -> Self {
        SessionOptions {
            model: model.into(),
            system_prompt: None,
            max_turns: DEFAULT_MAX_TURNS,
            metadata: Map::new(),
            tools: None,
        }
    }

    /// The saved options of `snapshot` (everything but `tools`).
    #[must_use]
    pub fn from_snapshot(snapshot: &SessionSnapshot) -> Self {
        let persisted = snapshot.options();
        SessionOptions {
            model: persisted.model.clone(),
            system_prompt: persisted.system_prompt.clone(),
            max_turns: persisted.max_turns,
            metadata: snapshot.metadata().clone(),
            tools: None,
        }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Sets the turn limit (checked to be at least 1 when the session is created).
    #[must_use]
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = max_turns;
        self
    }

    /// Replaces the metadata.
    #[must_use]
    pub fn metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }

    /// Sets one metadata entry.
    #[must_use]
    pub fn metadata_entry(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// Sets the tool executor.
    #[must_use]
    pub fn tools(mut self, tools: Arc<dyn ToolExecutor>) -> Self {
        self.tools = Some(tools);
        self
    }

    /// Checks the options a session `id` is made with. Refused options are taken apart
    /// here, so metadata nested too deep to save is never dropped recursively.
    fn validate(mut self, id: &SessionId) -> Result<Self> {
        if self.max_turns == 0 {
            return Err(Error::InvalidArgument {
                reason: "max_turns must be at least 1".to_owned(),
            });
        }
        if let Err(e) = check_metadata_depth(id, &self.metadata) {
            json::dismantle_map(std::mem::take(&mut self.metadata));
            return Err(e);
        }
        Ok(self)
    }

    fn persisted(&self) -> PersistedOptions {
        PersistedOptions {
            model: self.model.clone(),
            system_prompt: self.system_prompt.clone(),
            max_turns: self.max_turns,
        }
    }
}

/// Why a [`Session::send`] returned.
///
/// # Examples
///
/// ```
/// use agent_session::StopReason;
///
/// assert_ne!(StopReason::Finished, StopReason::MaxTurns);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The model answered without calling a tool.
    Finished,
    /// The turn limit was reached; every tool call made so far has its result. Sending
    /// again continues the conversation.
    MaxTurns,
}

/// What one [`Session::send`] did.
///
/// # Examples
///
/// ```
/// # use agent_session::{StopReason, TurnOutcome};
/// fn describe(outcome: &TurnOutcome) -> String {
///     match outcome.stop {
///         StopReason::Finished => outcome.reply.clone().unwrap_or_default(),
///         _ => format!("stopped after {} completions", outcome.completions),
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnOutcome {
    /// Why the turn ended.
    pub stop: StopReason,
    /// The text of the model's final answer, when it finished.
    pub reply: Option<String>,
    /// Model completions made in this turn.
    pub completions: u32,
    /// Tool calls run in this turn.
    pub tool_calls: u32,
}

/// A conversation with a model, bound to an [`Engine`].
///
/// [`send`](Self::send) drives the agent loop: it appends the user's message, asks the
/// engine for an assistant message, runs the tool calls it contains through the
/// [`ToolExecutor`], appends their results, and repeats until the model answers without
/// tools or `max_turns` completions were made.
///
/// # Snapshots are taken only when idle
///
/// [`snapshot`](Self::snapshot) borrows the session, and `send` borrows it mutably for
/// the whole turn, so a snapshot can never observe a turn in progress. If a turn is cut
/// short (the `send` future is dropped, a tool panics, or the engine fails), the session
/// is left consistent: every step completed so far is kept, and each tool call whose
/// result never arrived is closed with an error result ([`INTERRUPTED_OUTPUT`]) and a
/// record with [`ToolCallStatus::Interrupted`]. The call is not run again; the model sees
/// the interruption in the transcript when the conversation continues.
///
/// # Examples
///
/// ```
/// use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine, Message,
///     Session, SessionId, SessionOptions, StopReason, Usage};
///
/// struct Echo;
/// impl Engine for Echo {
///     async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
///         let last = r.transcript.last().map(Message::text).unwrap_or_default();
///         Ok(Completion::new(Message::assistant(vec![ContentBlock::text(last)]), Usage::new(r.model)))
///     }
/// }
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut session = Session::new(SessionId::generate(), Echo, SessionOptions::new("echo-1"))?;
/// let outcome = session.send("hello").await?;
/// assert_eq!(outcome.stop, StopReason::Finished);
/// assert_eq!(outcome.reply.as_deref(), Some("hello"));
///
/// let snapshot = session.snapshot();
/// assert_eq!(snapshot.transcript().len(), 2);
/// # Ok::<(), agent_session::Error>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Session<E> {
    id: SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    options: SessionOptions,
    /// Where the session was forked from; kept so every snapshot of a fork says so.
    lineage: Option<Lineage>,
    // Shared with the snapshots taken of the session (copied on write only while one is
    // alive), so a snapshot to save costs nothing per message.
    transcript: Arc<Vec<Message>>,
    records: Arc<Vec<ToolCallRecord>>,
    usage: Arc<Vec<Usage>>,
    /// `usage` summed; a completion whose usage would overflow it is refused, so every
    /// snapshot of the session can be saved and loaded.
    totals: UsageTotals,
    /// What the store holds of this session, so a save writes only what is new.
    provenance: Option<Provenance>,
    /// What the store's log holds beyond the session's state.
    history: HistoryStats,
    /// The lease the session's snapshots are saved under, if it was leased
    /// ([`Harness::resume_session_leased`](crate::Harness::resume_session_leased)), with
    /// what keeps it renewed; dropped with the session, which releases it.
    lease: Option<HeldLease>,
    engine: E,
}

/// A lease a session holds, and the guard that keeps it renewed and releases it when
/// dropped (the harness's, opaque here).
pub(crate) struct HeldLease {
    pub(crate) lease: Lease,
    /// Held for its `Drop`, which stops the renewals and releases the lease.
    pub(crate) _keeper: Box<dyn std::any::Any + Send + Sync>,
}

/// Persists a turn in progress: [`Session::send_message_with`] calls it with a snapshot at
/// each point where the turn should be saved, and it returns the revision it stored
/// (usually by redacting the snapshot if needed and calling
/// [`SessionStore::save`](crate::SessionStore::save)).
pub type Checkpoint<'a> = dyn FnMut(&mut SessionSnapshot) -> Result<Revision> + Send + 'a;

/// Persists a turn in progress from async code: the [`Checkpoint`] of
/// [`Session::send_message_with_async`], whose save is awaited (an
/// [`AsyncSessionStore`](crate::AsyncSessionStore) save, which never blocks the executor).
/// [`Harness::send`](crate::Harness::send) with
/// [`Autosave::EveryStep`](crate::Autosave::EveryStep) uses one over the harness's store.
///
/// # Examples
///
/// ```
/// use agent_session::{AsyncCheckpoint, AsyncSessionStore, BoxFuture, Result, Revision,
///     SessionSnapshot};
///
/// /// Saves every checkpoint to a store.
/// struct SaveTo<'s>(&'s dyn AsyncSessionStore);
///
/// impl AsyncCheckpoint for SaveTo<'_> {
///     fn save<'a>(&'a mut self, snapshot: &'a mut SessionSnapshot) -> BoxFuture<'a, Result<Revision>> {
///         self.0.save(snapshot)
///     }
/// }
/// ```
pub trait AsyncCheckpoint: Send {
    /// Saves `snapshot` (redacting it first if the stored copy must be: the session
    /// records what it was saved as) and returns the revision stored.
    ///
    /// # Errors
    ///
    /// Whatever the save returns; see [`Session::send_message_with`] for what an error does
    /// to the turn.
    fn save<'a>(&'a mut self, snapshot: &'a mut SessionSnapshot)
        -> BoxFuture<'a, Result<Revision>>;
}

/// Where a turn saves its checkpoints: a synchronous closure or an async saver.
enum Saver<'c, 'a> {
    Blocking(&'c mut Checkpoint<'a>),
    Async(&'c mut dyn AsyncCheckpoint),
}

impl Saver<'_, '_> {
    async fn save(&mut self, snapshot: &mut SessionSnapshot) -> Result<Revision> {
        match self {
            Saver::Blocking(checkpoint) => checkpoint(snapshot),
            Saver::Async(checkpoint) => checkpoint.save(snapshot).await,
        }
    }
}

impl<E> fmt::Debug for Session<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("revision", &self.revision)
            .field("options", &self.options)
            .field("messages", &self.transcript.len())
            .finish_non_exhaustive()
    }
}

impl<E: Engine> Session<E> {
    /// A new, empty session.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `options.max_turns` is 0; [`Error::TooDeep`] if its
    /// metadata nests more than 126 levels deep, which no stored session can hold.
    pub fn new(id: SessionId, engine: E, options: SessionOptions) -> Result<Self> {
        let options = options.validate(&id)?;
        let now = Utc::now();
        Ok(Session {
            id,
            revision: Revision::NEW,
            created_at: now,
            updated_at: now,
            options,
            transcript: Arc::default(),
            records: Arc::default(),
            usage: Arc::default(),
            totals: UsageTotals::default(),
            provenance: None,
            history: HistoryStats::default(),
            lineage: None,
            lease: None,
            engine,
        })
    }

    /// Continues a saved session with `engine`: its transcript, tool-call records, usage
    /// (so its turn count) and revision carry on.
    ///
    /// With `options` `None`, the saved options are used ([`SessionOptions::from_snapshot`])
    /// and there is no tool executor. With `Some`, the given options are used as they are,
    /// metadata included: start from [`SessionOptions::from_snapshot`] to change only some
    /// fields.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), for the options used.
    pub fn restore(
        snapshot: SessionSnapshot,
        engine: E,
        options: Option<SessionOptions>,
    ) -> Result<Self> {
        let options = options
            .unwrap_or_else(|| SessionOptions::from_snapshot(&snapshot))
            .validate(snapshot.id())?;
        let parts = snapshot.into_parts();
        Ok(Session {
            id: parts.id,
            revision: parts.revision,
            created_at: parts.created_at,
            updated_at: parts.updated_at,
            options,
            lineage: parts.lineage,
            transcript: parts.transcript,
            records: parts.tool_calls,
            usage: parts.usage,
            totals: parts.totals,
            provenance: parts.provenance,
            history: parts.history,
            lease: None,
            engine,
        })
    }

    /// Sends a user message and runs the agent loop until the model answers without
    /// calling a tool or `max_turns` completions were made.
    ///
    /// # Errors
    ///
    /// [`Error::Engine`] if the engine fails or returns a message that would make the
    /// transcript inconsistent (not an assistant message, a tool result, or one tool-call
    /// id twice) or could not be stored (JSON in tool arguments or provider blocks nested
    /// more than 125 levels deep); a refused message is not appended, but its usage is
    /// kept, because the provider charged for it. A completion whose usage would overflow
    /// the session's 64-bit totals is refused whole (usage too), so the session stays
    /// savable. Steps completed before the failure are kept. Tool failures are not errors:
    /// they become error results the model sees (so does a tool output nested too deep to
    /// store).
    pub async fn send(&mut self, text: impl Into<String>) -> Result<TurnOutcome> {
        self.send_message(Message::user(text)).await
    }

    /// Like [`send`](Self::send), with a message built by the caller (for example with
    /// images or provider fields).
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send); also [`Error::InvalidArgument`] if `message` has
    /// [`Role::Tool`] or contains a tool call or tool result (the loop adds those itself),
    /// and [`Error::TooDeep`] if it nests more than 125 levels deep.
    /// Any other role is accepted (a user message, a mid-conversation system message, an
    /// assistant prefill); not every provider accepts every sequence of roles.
    pub async fn send_message(&mut self, message: Message) -> Result<TurnOutcome> {
        self.run_turn(message, None).await
    }

    /// Like [`send_message`](Self::send_message), saving the turn as it goes through
    /// `checkpoint`, so a crash loses at most the step in flight:
    ///
    /// - before the tools of a step run, with the assistant message that requested them
    ///   and each call closed as interrupted ([`INTERRUPTED_OUTPUT`],
    ///   [`ToolCallStatus::Interrupted`]): if the process dies while a tool runs, or the
    ///   save of its result fails, the session resumes with that call reported as
    ///   interrupted ([`interrupted_tool_calls`](Self::interrupted_tool_calls)), maybe run,
    ///   never run again silently;
    /// - after every completed step (an assistant message and all its tool results), which
    ///   replaces the placeholders with the real results.
    ///
    /// With a [`FileSessionStore`](crate::FileSessionStore), each checkpoint appends only
    /// what changed since the last one. [`Harness::send`](crate::Harness::send) with
    /// [`Autosave::EveryStep`](crate::Autosave::EveryStep) does this with the harness's
    /// store and redactor.
    ///
    /// # Errors
    ///
    /// As [`send_message`](Self::send_message), and any error of `checkpoint`, which ends
    /// the turn: before the tools run, they are not run (and are closed as interrupted);
    /// after a step, the step is kept in memory and the next save stores it.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine,
    ///     MemorySessionStore, Message, Session, SessionId, SessionOptions, SessionStore, Usage};
    ///
    /// struct Echo;
    /// impl Engine for Echo {
    ///     async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
    ///         Ok(Completion::new(Message::assistant(vec![ContentBlock::text("hi")]), Usage::new(r.model)))
    ///     }
    /// }
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let store = MemorySessionStore::new();
    /// let mut session = Session::new(SessionId::generate(), Echo, SessionOptions::new("echo-1"))?;
    /// session
    ///     .send_message_with(Message::user("hello"), &mut |snapshot| store.save(snapshot))
    ///     .await?;
    /// assert_eq!(store.load(session.id())?.transcript().len(), 2);
    /// # Ok::<(), agent_session::Error>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn send_message_with(
        &mut self,
        message: Message,
        checkpoint: &mut Checkpoint<'_>,
    ) -> Result<TurnOutcome> {
        self.run_turn(message, Some(Saver::Blocking(checkpoint)))
            .await
    }

    /// [`send_message_with`](Self::send_message_with) whose checkpoints are saved by async
    /// code: each save is awaited, so an [`AsyncSessionStore`](crate::AsyncSessionStore)
    /// saves without blocking the executor. The same points, the same guarantees.
    ///
    /// # Errors
    ///
    /// As [`send_message_with`](Self::send_message_with).
    pub async fn send_message_with_async(
        &mut self,
        message: Message,
        checkpoint: &mut dyn AsyncCheckpoint,
    ) -> Result<TurnOutcome> {
        self.run_turn(message, Some(Saver::Async(checkpoint))).await
    }

    async fn run_turn(
        &mut self,
        message: Message,
        checkpoint: Option<Saver<'_, '_>>,
    ) -> Result<TurnOutcome> {
        let span = telemetry::turn(&self.id, &self.options.model);
        span.run_async(self.run_turn_steps(message, checkpoint))
            .await
    }

    async fn run_turn_steps(
        &mut self,
        message: Message,
        mut checkpoint: Option<Saver<'_, '_>>,
    ) -> Result<TurnOutcome> {
        let message = self.check_sent(message)?;
        let tools = self.options.tools.clone();
        let definitions: Vec<ToolDefinition> =
            tools.as_ref().map(|t| t.definitions()).unwrap_or_default();
        let mut turn = Turn {
            session: self,
            pending: Vec::new(),
        };
        turn.session.push(message);
        let mut outcome = TurnOutcome {
            stop: StopReason::MaxTurns,
            reply: None,
            completions: 0,
            tool_calls: 0,
        };
        while outcome.completions < turn.session.options.max_turns {
            let s = &mut *turn.session;
            let request = CompletionRequest {
                session_id: &s.id,
                model: &s.options.model,
                system_prompt: s.options.system_prompt.as_deref(),
                transcript: &s.transcript,
                tools: &definitions,
            };
            let completion = s
                .engine
                .complete(request)
                .await
                .map_err(|source| Error::Engine {
                    id: s.id.clone(),
                    source,
                })?;
            let message = s.accept(completion)?;
            outcome.completions += 1;
            let message_index = s.transcript.len();
            turn.pending = message
                .content
                .iter()
                .enumerate()
                .filter_map(|(block, b)| match b {
                    ContentBlock::ToolCall(call) => Some(PendingCall {
                        call: (**call).clone(),
                        at: BlockPosition {
                            message: message_index,
                            block,
                        },
                    }),
                    _ => None,
                })
                .collect();
            let text = message.text();
            turn.session.push(message);
            if turn.pending.is_empty() {
                outcome.stop = StopReason::Finished;
                outcome.reply = Some(text);
                if let Some(checkpoint) = checkpoint.as_mut() {
                    turn.session.checkpoint(checkpoint, &[]).await?;
                }
                break;
            }
            if let Some(checkpoint) = checkpoint.as_mut() {
                // Record the calls before running them, closed as interrupted: what a
                // crash while they run must leave.
                turn.session.checkpoint(checkpoint, &turn.pending).await?;
            }
            outcome.tool_calls += turn.run_pending(tools.as_deref()).await;
            if let Some(checkpoint) = checkpoint.as_mut() {
                turn.session.checkpoint(checkpoint, &[]).await?;
            }
        }
        Ok(outcome)
    }
}

impl<E> Session<E> {
    /// A consistent snapshot of the session, with its current revision.
    ///
    /// A session is always idle when this can be called (see the type docs), so the
    /// snapshot never holds a half-finished turn.
    #[must_use]
    pub fn snapshot(&self) -> SessionSnapshot {
        let metadata_too_deep = Some(json::map_depth(&self.options.metadata))
            .filter(|&depth| depth > json::MAX_METADATA_DEPTH);
        SessionSnapshot::from_session_parts(SnapshotParts {
            id: self.id.clone(),
            revision: self.revision,
            created_at: self.created_at,
            updated_at: self.updated_at,
            options: self.options.persisted(),
            // Metadata set through `metadata_mut` is checked here, before anything copies
            // or walks it recursively: too deep, it is left out and the snapshot refuses
            // to be encoded (so every save says so, and the session can be fixed).
            metadata: if metadata_too_deep.is_some() {
                Map::new()
            } else {
                self.options.metadata.clone()
            },
            metadata_too_deep,
            lineage: self.lineage.clone(),
            transcript: Arc::clone(&self.transcript),
            tool_calls: Arc::clone(&self.records),
            usage: Arc::clone(&self.usage),
            totals: self.totals,
            provenance: self.provenance.clone(),
            history: self.history,
        })
        .with_lease_of(self.lease.as_ref().map(|held| &held.lease))
    }

    /// The lease this session's saves are made under, as it was acquired (renewals keep
    /// its epoch and move its expiry in the store), if it has one.
    #[must_use]
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref().map(|held| &held.lease)
    }

    /// Attaches `held`: every later snapshot is fenced by its lease. Replaces (and so
    /// releases) any lease held before.
    pub(crate) fn hold_lease(&mut self, held: HeldLease) {
        self.lease = Some(held);
    }

    /// Saves through `checkpoint` a snapshot of the session with `pending` calls closed as
    /// interrupted, and records what is now stored: the placeholders are stored but not
    /// kept, so the next save replaces them.
    async fn checkpoint(
        &mut self,
        checkpoint: &mut Saver<'_, '_>,
        pending: &[PendingCall],
    ) -> Result<()> {
        let kept = self.counts();
        let updated_at = self.updated_at;
        // The placeholders go into the session itself for the moment of the snapshot, so
        // the snapshot shares the session's history instead of copying it.
        for call in pending {
            let result = ToolResult::error(&call.call.id, INTERRUPTED_OUTPUT);
            self.push_result(result, call, ToolCallStatus::Interrupted);
        }
        let mut snapshot = self.snapshot();
        let saved = checkpoint.save(&mut snapshot).await;
        // Stored also after `NotDurable`: the new revision is in place.
        let stored = match &saved {
            Ok(revision) | Err(Error::NotDurable { revision, .. }) => Some((
                snapshot.stored_as(*revision, kept.messages),
                snapshot.stats_once_saved(*revision),
            )),
            Err(_) => None,
        };
        // The snapshot lets go of the shared history first, so taking the placeholders
        // back out copies nothing.
        drop(snapshot);
        if !pending.is_empty() {
            Arc::make_mut(&mut self.transcript).truncate(kept.messages);
            Arc::make_mut(&mut self.records).truncate(kept.tool_calls);
            self.updated_at = updated_at;
        }
        if let Some((stored, history)) = stored {
            self.revision = stored.revision;
            self.provenance = Some(stored);
            self.history = history;
        }
        saved.map(|_| ())
    }

    /// Records that `snapshot`, taken from this session and maybe redacted since, is now
    /// stored at `revision`.
    pub(crate) fn record_saved(&mut self, snapshot: &SessionSnapshot, revision: Revision) {
        self.record_stored(snapshot, revision);
    }

    fn counts(&self) -> Counts {
        Counts {
            messages: self.transcript.len(),
            tool_calls: self.records.len(),
            usage: self.usage.len(),
        }
    }

    /// Records that `stored` (a snapshot of this session as it is now, maybe redacted) is
    /// now stored at `revision`.
    fn record_stored(&mut self, stored: &SessionSnapshot, revision: Revision) {
        self.history = stored.stats_once_saved(revision);
        self.revision = revision;
        self.provenance = Some(stored.stored_as(revision, stored.transcript().len()));
    }

    /// Whether the session has changed since it was last saved or loaded (or was never
    /// saved): what a program checks before exiting to decide whether to save.
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, Engine};
    /// # struct MyEngine;
    /// # impl Engine for MyEngine {
    /// #     async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> { unimplemented!() }
    /// # }
    /// use agent_session::{Harness, MemorySessionStore, SessionOptions};
    ///
    /// let harness = Harness::builder(MemorySessionStore::new(), || MyEngine).build();
    /// let mut session = harness.new_session(SessionOptions::new("m"))?;
    /// assert!(session.has_unsaved_changes());
    /// harness.save_session(&mut session)?;
    /// assert!(!session.has_unsaved_changes());
    /// session.metadata_mut().insert("project".into(), "parser".into());
    /// assert!(session.has_unsaved_changes());
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn has_unsaved_changes(&self) -> bool {
        let Some(stored) = &self.provenance else {
            return true;
        };
        // Every message and metadata edit moves `updated_at`; options given on resume do
        // not, so they are compared (a redacted system prompt compares unequal, which only
        // costs a save).
        stored.revision != self.revision
            || !stored.keeps_everything()
            || stored.stored != self.counts()
            || stored.updated_at != self.updated_at
            || *stored.options != self.options.persisted()
            // Compared only once known to be shallow: comparing recurses.
            || json::map_depth(&self.options.metadata) > json::MAX_METADATA_DEPTH
            || *stored.metadata != self.options.metadata
    }

    /// Every tool call in the history that was cut short and closed as interrupted
    /// ([`ToolCallStatus::Interrupted`]), in transcript order. After a crash during a turn
    /// saved with [`send_message_with`](Self::send_message_with), the calls that were
    /// running are the last of them (filter by [`ToolCallRecord::call_at`] to keep the last
    /// turn's). They were not run again; the model sees the interruption when the
    /// conversation continues.
    #[must_use]
    pub fn interrupted_tool_calls(&self) -> Vec<&ToolCallRecord> {
        self.records
            .iter()
            .filter(|r| r.status == ToolCallStatus::Interrupted)
            .collect()
    }

    /// Records that the session, as it is now, was stored at `revision`: the revision the
    /// next save is compared against, and what that save may append to.
    /// [`Harness::save_session`](crate::Harness::save_session) does this for you; when
    /// saving through a store directly, call it right after saving
    /// [`snapshot`](Self::snapshot), with no change to the session in between. (If there
    /// was one, a store that checks, like [`FileSessionStore`](crate::FileSessionStore),
    /// writes the next save whole, so nothing is lost, but
    /// [`has_unsaved_changes`](Self::has_unsaved_changes) believes the claim.)
    pub fn mark_saved(&mut self, revision: Revision) {
        let snapshot = self.snapshot();
        self.record_stored(&snapshot, revision);
    }

    /// The session's id.
    #[must_use]
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The revision last saved or loaded ([`Revision::NEW`] if never saved).
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// When the session was created.
    #[must_use]
    pub fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }

    /// When the session last changed.
    #[must_use]
    pub fn updated_at(&self) -> DateTime<Utc> {
        self.updated_at
    }

    /// The options in force.
    #[must_use]
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The session's metadata.
    #[must_use]
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.options.metadata
    }

    /// Mutable access to the metadata; marks the session as updated.
    ///
    /// Metadata nested more than 126 levels deep (counting the metadata object) cannot be
    /// stored: snapshots then leave it out, and every save fails with [`Error::TooDeep`]
    /// until it is made shallower again.
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        self.touch();
        &mut self.options.metadata
    }

    /// The transcript, oldest message first.
    #[must_use]
    pub fn transcript(&self) -> &[Message] {
        &self.transcript
    }

    /// One record per tool call, in transcript order.
    #[must_use]
    pub fn tool_calls(&self) -> &[ToolCallRecord] {
        &self.records
    }

    /// Where the session was forked from, if it is a fork.
    #[must_use]
    pub fn lineage(&self) -> Option<&Lineage> {
        self.lineage.as_ref()
    }

    /// Usage of each completion, oldest first.
    #[must_use]
    pub fn usage(&self) -> &[Usage] {
        &self.usage
    }

    /// Usage summed over all completions (kept as completions are added).
    #[must_use]
    pub fn totals(&self) -> UsageTotals {
        self.totals
    }

    /// Takes the session back to `to`, the `/undo` of an agent: the transcript keeps the
    /// messages before that point and their tool-call records, and returns how many
    /// messages it dropped. The next turn's model sees the shorter transcript; tool calls
    /// rewound away are never run again. Usage, options and metadata stay (the dropped
    /// turns were paid for: [`usage`](Self::usage) and [`totals`](Self::totals) still
    /// count them).
    ///
    /// The change is in memory until the session is saved
    /// ([`Harness::rewind_session`](crate::Harness::rewind_session) does both). The next
    /// save keeps what the store already holds of the kept messages, so the file store
    /// appends one small journal record, however long the session. The dropped messages
    /// stay in the store's earlier bytes until the session is next written whole (see
    /// [`SessionSnapshot::rewind`]): a rewind does not erase them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `to` lies before the start or beyond the transcript,
    /// or would separate a tool call from its result (the message names the nearest
    /// valid points); the session is not changed.
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine,
    /// #     Message, Usage};
    /// # struct Echo;
    /// # impl Engine for Echo {
    /// #     async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
    /// #         let last = r.transcript.last().map(Message::text).unwrap_or_default();
    /// #         Ok(Completion::new(Message::assistant(vec![ContentBlock::text(last)]), Usage::new(r.model)))
    /// #     }
    /// # }
    /// use agent_session::{RewindTo, Session, SessionId, SessionOptions};
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut session = Session::new(SessionId::generate(), Echo, SessionOptions::new("m"))?;
    /// session.send("keep this").await?;
    /// session.send("undo this").await?;
    /// assert_eq!(session.rewind(RewindTo::LastTurns(1))?, 2);
    /// assert_eq!(session.transcript().len(), 2);
    /// assert_eq!(session.turn_count(), 2); // both completions still counted
    /// # Ok::<(), agent_session::Error>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rewind(&mut self, to: RewindTo) -> Result<usize> {
        let dropped = rewind_parts(
            &self.id,
            &mut self.transcript,
            &mut self.records,
            &mut self.provenance,
            to,
        )?;
        if dropped > 0 {
            self.touch();
        }
        Ok(dropped)
    }

    /// Puts `compaction`'s summary in place of the first [`Compaction::replaced`]
    /// messages of the transcript, and counts its usage: the next turn's model sees the
    /// shorter view. What it replaced stays in the session's stored history (see
    /// [`SessionSnapshot::compact`]). The change is in memory until the session is saved;
    /// [`Harness::compact_session`](crate::Harness::compact_session) runs the harness's
    /// [`Compactor`](crate::Compactor) and saves.
    ///
    /// # Errors
    ///
    /// As [`SessionSnapshot::compact`]; the session is not changed on error.
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine,
    /// #     Message, Usage};
    /// # struct Echo;
    /// # impl Engine for Echo {
    /// #     async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
    /// #         let last = r.transcript.last().map(Message::text).unwrap_or_default();
    /// #         Ok(Completion::new(Message::assistant(vec![ContentBlock::text(last)]), Usage::new(r.model)))
    /// #     }
    /// # }
    /// use agent_session::{Compaction, Session, SessionId, SessionOptions};
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut session = Session::new(SessionId::generate(), Echo, SessionOptions::new("m"))?;
    /// session.send("one").await?;
    /// session.send("two").await?;
    /// session.compact(Compaction::new(2, vec![Message::user("We said one.")]))?;
    /// assert_eq!(session.transcript().len(), 3);
    /// # Ok::<(), agent_session::Error>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compact(&mut self, compaction: Compaction) -> Result<()> {
        compact_parts(
            &self.id,
            compaction,
            CompactTarget {
                transcript: &mut self.transcript,
                records: &mut self.records,
                usage: &mut self.usage,
                totals: &mut self.totals,
                provenance: &mut self.provenance,
            },
        )?;
        self.touch();
        Ok(())
    }

    /// Where a compaction that keeps the last `keep_last_turns` turns verbatim would cut:
    /// how many leading messages it replaces (never splitting a tool call from its
    /// result), or `None` if there is nothing before those turns.
    #[must_use]
    pub fn compaction_point(&self, keep_last_turns: usize) -> Option<usize> {
        compaction_point(&self.transcript, &self.records, keep_last_turns)
    }

    /// Makes `past`, an earlier revision of this session
    /// ([`SessionStore::load_at`](crate::SessionStore::load_at)), the session's state
    /// again: its transcript, tool-call records, model, system prompt, turn limit and
    /// metadata (the tool executor stays). Usage stays counted. The next save stores it
    /// as a new revision, one small entry naming `past`'s revision, so the revisions in
    /// between stay in the history. [`Harness::restore_session`](crate::Harness::restore_session)
    /// loads the revision and saves.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `past` is of another session or later than the
    /// session's stored revision; the session is not changed.
    pub fn restore_from(&mut self, past: &SessionSnapshot) -> Result<()> {
        let current = self.snapshot();
        let (options, metadata) = restore_parts(
            &current,
            past,
            RestoreTarget {
                transcript: &mut self.transcript,
                records: &mut self.records,
                provenance: &mut self.provenance,
            },
        )?;
        drop(current);
        self.options.model = options.model;
        self.options.system_prompt = options.system_prompt;
        self.options.max_turns = options.max_turns;
        self.options.metadata = metadata;
        self.touch();
        Ok(())
    }

    /// Model completions over the session's whole life, across resumes.
    #[must_use]
    pub fn turn_count(&self) -> usize {
        self.usage.len()
    }

    /// The engine.
    #[must_use]
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// The engine, mutably.
    pub fn engine_mut(&mut self) -> &mut E {
        &mut self.engine
    }

    fn push(&mut self, message: Message) {
        Arc::make_mut(&mut self.transcript).push(message);
        self.touch();
    }

    /// Records a change now ([`clock::next_stamp`]): the time of the change, never before
    /// the creation time, and always a different stamp than before (see
    /// [`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE)).
    fn touch(&mut self) {
        self.updated_at = clock::next_stamp(self.updated_at, self.created_at);
    }

    fn push_result(&mut self, result: ToolResult, pending: &PendingCall, status: ToolCallStatus) {
        let result_at = BlockPosition {
            message: self.transcript.len(),
            block: 0,
        };
        Arc::make_mut(&mut self.records).push(ToolCallRecord {
            call_id: pending.call.id.clone(),
            tool_name: pending.call.name.clone(),
            call_at: pending.at,
            result_at,
            status,
        });
        self.push(Message::tool_result(result));
    }

    /// Refuses a message the caller sends that the loop must add itself (tool messages,
    /// calls and results) or that nests too deep to store.
    fn check_sent(&self, mut message: Message) -> Result<Message> {
        crate::transcript::seal_one(&mut message);
        if message.role == Role::Tool
            || message
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolCall(_) | ContentBlock::ToolResult(_)))
        {
            return Err(Error::InvalidArgument {
                reason: "a message sent to a session cannot be a tool message or contain tool calls or tool results: the loop adds those itself"
                    .to_owned(),
            });
        }
        let depth = message_depth(&message);
        if depth > json::MAX_MESSAGE_DEPTH {
            dismantle_message(message);
            return Err(Error::TooDeep {
                id: self.id.clone(),
                part: "the message sent".to_owned(),
                depth,
                limit: json::MAX_MESSAGE_DEPTH,
            });
        }
        Ok(message)
    }

    /// Records a completion's usage and returns its message, if the session can take
    /// them: usage a session could not sum (it would make every later save store what no
    /// load accepts) refuses the whole completion, and a message the transcript cannot hold
    /// is refused (its usage is kept: the provider charged for it, and cost must never be
    /// under-reported).
    fn accept(&mut self, mut completion: Completion) -> Result<Message> {
        crate::transcript::seal_one(&mut completion.message);
        let Some(totals) = self.totals.checked_add(&completion.usage) else {
            let usage = &completion.usage;
            let source = format!(
                "the engine reported usage ({} input and {} output tokens, {} nano-USD) that \
                 would overflow the session's 64-bit totals; the completion was refused and \
                 nothing of it was kept",
                usage.input_tokens,
                usage.output_tokens,
                usage.cost.as_nano_usd()
            );
            dismantle_message(completion.message);
            return Err(Error::Engine {
                id: self.id.clone(),
                source: source.into(),
            });
        };
        Arc::make_mut(&mut self.usage).push(completion.usage);
        self.totals = totals;
        if let Err(e) = self.check_completion(&completion.message) {
            dismantle_message(completion.message);
            return Err(e);
        }
        Ok(completion.message)
    }

    /// Refuses an engine message that would make the transcript inconsistent.
    fn check_completion(&self, message: &Message) -> Result<()> {
        let invalid = |problem: String| Error::Engine {
            id: self.id.clone(),
            source: format!("the engine returned an invalid message: {problem}").into(),
        };
        if message.role != Role::Assistant {
            return Err(invalid(format!(
                "its role is {:?}, not Assistant",
                message.role
            )));
        }
        let depth = message_depth(message);
        if depth > json::MAX_MESSAGE_DEPTH {
            return Err(invalid(format!(
                "it nests JSON {depth} levels deep (in tool arguments or provider blocks), more than the {} a stored session can read back",
                json::MAX_MESSAGE_DEPTH
            )));
        }
        let mut seen = HashSet::new();
        for block in &message.content {
            match block {
                ContentBlock::ToolResult(r) => {
                    return Err(invalid(format!(
                        "it contains a tool result for {:?}",
                        r.call_id
                    )))
                }
                // Every earlier call is answered by now, so an id may repeat across steps
                // (some servers number calls per step), but not within one message.
                ContentBlock::ToolCall(call) if !seen.insert(&call.id) => {
                    return Err(invalid(format!(
                        "tool-call id {:?} appears twice in one message",
                        call.id
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The deepest a tool's output may nest: it is stored inside a tool-result block of a
/// tool message (the message, its content, the block), so three levels less than a message.
const MAX_OUTPUT_DEPTH: usize = json::MAX_MESSAGE_DEPTH - 3;

/// How deep `output` nests as JSON: 0 for text, otherwise its array of blocks and what
/// they hold (measured without recursion).
fn output_depth(output: &ToolOutput) -> usize {
    match output {
        ToolOutput::Text(_) => 0,
        ToolOutput::Blocks(blocks) => blocks_depth(blocks),
    }
}

/// A tool call that was requested but has no result yet.
struct PendingCall {
    call: ToolCall,
    at: BlockPosition,
}

/// A turn in progress. If it is dropped before every requested tool call has a result
/// (the `send` future was dropped, or a tool panicked), the remaining calls are closed as
/// interrupted, so the session stays consistent.
struct Turn<'s, E> {
    session: &'s mut Session<E>,
    pending: Vec<PendingCall>,
}

impl<E> Turn<'_, E> {
    /// Runs the pending tool calls in order, appending each result as it arrives; returns
    /// how many ran.
    async fn run_pending(&mut self, tools: Option<&dyn ToolExecutor>) -> u32 {
        let mut ran = 0;
        while let Some(pending) = self.pending.first() {
            let result = match tools {
                Some(tools) => tools.execute(&pending.call).await,
                None => Err(BoxError::from(
                    "no tool executor is configured for this session",
                )),
            };
            let (result, status) = match result {
                Ok(output) if output_depth(&output) > MAX_OUTPUT_DEPTH => {
                    let depth = output_depth(&output);
                    dismantle_output(output);
                    (
                        ToolResult::error(
                            &pending.call.id,
                            format!(
                                "the tool's output nests JSON {depth} levels deep, more than the {MAX_OUTPUT_DEPTH} a stored session can read back, so it was not kept"
                            ),
                        ),
                        ToolCallStatus::Error,
                    )
                }
                Ok(output) => (
                    ToolResult::new(&pending.call.id, output),
                    ToolCallStatus::Ok,
                ),
                Err(e) => (
                    ToolResult::error(&pending.call.id, e.to_string()),
                    ToolCallStatus::Error,
                ),
            };
            let pending = self.pending.remove(0);
            self.session.push_result(result, &pending, status);
            ran += 1;
        }
        ran
    }
}

impl<E> Drop for Turn<'_, E> {
    fn drop(&mut self) {
        for pending in std::mem::take(&mut self.pending) {
            let result = ToolResult::error(&pending.call.id, INTERRUPTED_OUTPUT);
            self.session
                .push_result(result, &pending, ToolCallStatus::Interrupted);
        }
    }
}

impl crate::telemetry::Traced for TurnOutcome {
    #[inline]
    fn trace(&self, span: &crate::telemetry::OpSpan) {
        span.record_count("agent_session.completions", self.completions);
        span.record_count("agent_session.tool_calls", self.tool_calls);
        span.record_str(
            "agent_session.stop_reason",
            match self.stop {
                StopReason::Finished => "finished",
                StopReason::MaxTurns => "max_turns",
            },
        );
    }
}
