//! Durable save and resume for LLM agent sessions.
//!
//! An agent session is a conversation with a model plus everything around it: the
//! transcript, the tool calls and their results, token usage and cost, the options it ran
//! with and JSON metadata. `agent-session` makes that state durable: save it when the
//! session is idle, and bring it back in a fresh process, bound to a fresh engine, with
//! nothing lost or altered.
//!
//! # Which type to reach for
//!
//! | you want to… | use |
//! |---|---|
//! | create, save, resume, list and delete sessions | [`Harness`] |
//! | run the agent loop (model ↔ tools) | [`Session`], with your [`Engine`] and [`ToolExecutor`] |
//! | keep sessions on disk, private and crash-safe | [`FileSessionStore`] |
//! | keep sessions in memory (tests) | [`MemorySessionStore`] |
//! | store sessions somewhere else | implement [`SessionStore`] |
//! | read or build the persisted state | [`SessionSnapshot`] |
//! | convert OpenAI or Anthropic messages losslessly, or from one provider to the other | [`Message::from_openai_chat`], [`Message::from_anthropic`], [`Message::to_openai_chat`], [`Message::to_anthropic`] |
//! | keep a provider's message byte for byte (OpenAI Chat, Responses, Anthropic, Gemini) | [`Message::from_json`] and [`Message::to_json`] with a [`Codec`] |
//! | undo turns, compact long sessions, go back to an earlier revision | [`Harness::rewind_session`], [`HarnessBuilder::compaction`] with a [`Compactor`], [`Harness::restore_session`] |
//! | read a session as it was, or everything it ever held | [`SessionStore::load_at`], [`SessionStore::revisions`], [`SessionStore::history`] |
//! | bound the history a store keeps | [`SessionStore::trim_history`], [`PrunePolicy::history`] with a [`HistoryRetention`] |
//! | keep API keys and tokens out of stored snapshots | [`PatternRedactor`] with [`HarnessBuilder::redactor`] |
//! | branch a session, archive it, prune old ones | [`SessionStoreExt::fork`], [`SessionStore::set_archived`], [`SessionStoreExt::prune`] with a [`PrunePolicy`] |
//! | move sessions to another machine or store | [`SessionStoreExt::export`] to a [`Bundle`], [`SessionStoreExt::import`] |
//! | list sessions by model, time, parent or your own metadata keys; find the one where something was said | [`SessionStore::list_filtered`] with a [`ListFilter`] (keys declared with [`IndexedMetadata`]), [`SessionStore::search`] with a [`SearchQuery`] |
//! | copy every session to another store (file, PostgreSQL), history included | [`copy_sessions`] with [`CopyOptions`] |
//!
//! # Quick start
//!
//! ```
//! use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine,
//!     FileSessionStore, Harness, Message, SessionOptions, Usage};
//!
//! /// A stand-in for a real model client.
//! struct Parrot;
//! impl Engine for Parrot {
//!     async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
//!         let heard = r.transcript.last().map(Message::text).unwrap_or_default();
//!         Ok(Completion::new(
//!             Message::assistant(vec![ContentBlock::text(format!("Squawk! {heard}"))]),
//!             Usage::new(r.model).with_tokens(12, 4),
//!         ))
//!     }
//! }
//!
//! # let dir = tempfile::tempdir()?;
//! # let dir = dir.path();
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let harness = Harness::builder(FileSessionStore::open(dir)?, || Parrot).build();
//!
//! let mut session = harness.new_session(SessionOptions::new("parrot-1").max_turns(4))?;
//! session.send("Polly wants a cracker").await?;
//! harness.save_session(&mut session)?;
//! let id = session.id().clone();
//!
//! // In a new process: everything but the tool executor comes back from the snapshot.
//! let mut resumed = harness.resume_session(&id, None)?;
//! assert_eq!(resumed.transcript().len(), 2);
//! assert_eq!(resumed.options().max_turns, 4);
//! resumed.send("again").await?;
//! harness.save_session(&mut resumed)?;
//! # Ok::<(), agent_session::Error>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What is durable, and when
//!
//! Nothing is written until you save: [`Harness::save_session`] (or
//! [`SessionStore::save`]). With [`FileSessionStore`], a save that returns `Ok` is on disk:
//! the snapshot was written to a temporary file, fsynced, renamed into place, and the
//! directory fsynced. A crash before that leaves the previous snapshot, whole. Save after
//! each [`Session::send`] to lose at most the turn in flight.
//!
//! Saves are compare-and-swap on the session's [`Revision`]: if two processes resume the
//! same session, the second one to save gets [`Error::Conflict`] instead of silently
//! overwriting the first. To refuse the second one before it runs a turn, resume for writing under a
//! [`Lease`] ([`Harness::resume_session_leased`]): one writer per session, with saves
//! fenced by the lease's epoch.
//!
//! # Privacy
//!
//! Snapshots hold whole transcripts, so the file store is private by construction: the
//! directory is 0700 and files are 0600 from the moment they are created; session ids
//! come from a strict allowlist and cannot name a path outside the store; symbolic links
//! are never followed; and every file is verified when read (schema version, size limit,
//! strict JSON, embedded id equal to the file name, tool calls paired with results). See
//! [`FileSessionStore`] for the details.
//!
//! # Turns that are cut short
//!
//! A snapshot never contains a half-finished turn: [`Session::snapshot`] needs the session
//! idle, which the borrow checker enforces. If a `send` future is dropped (a timeout, a
//! Ctrl-C handler) or a tool panics, each tool call left without a result is closed with an
//! explicit "interrupted" error result ([`INTERRUPTED_OUTPUT`]); it is never dropped and
//! never silently run again, and the model sees it when the conversation continues.
//!
//! # Pitfalls
//!
//! - The tool executor is code and is not saved: give it to [`HarnessBuilder::tools`] (or
//!   in [`SessionOptions::tools`]) every time the process starts.
//! - Passing `Some(options)` to [`Harness::resume_session`] replaces the saved options,
//!   metadata included; start from [`SessionOptions::from_snapshot`] to change one field.
//! - Numbers inside metadata and tool arguments round-trip exactly as 64-bit integers or
//!   floats; integers beyond the 64-bit range become floats. Keep such values as strings.
//!
//! # Features
//!
//! - `postgres`: `PostgresSessionStore`, for sessions shared by several machines
//!   (async-native with `PostgresStoreBuilder::connect_async`; TLS through rustls,
//!   certificates always verified).
//! - `sqlite`: `SqliteSessionStore`, sessions in one SQLite database file for big stores
//!   on one machine (SQLite compiled in: no system library needed; pages of a listing read
//!   an index, whatever the store's size).
//! - `async-openai-0_43`: `adapters::async_openai`, conversions between async-openai's
//!   chat message types and [`Message`], through the OpenAI Chat codec.
//! - `testing`: `agent_session::testing`, the store contract suite for custom stores.
//! - `tracing`: [`tracing`](https://docs.rs/tracing) spans, at level `INFO`, with
//!   OpenTelemetry field names. Without the feature they cost nothing.
//!   - `agent_session.store`, one per operation of [`FileSessionStore`],
//!     [`MemorySessionStore`], `PostgresSessionStore` and `SqliteSessionStore`: `gen_ai.conversation.id` (the session id),
//!     `agent_session.store` (`file`, `memory`, `postgres`, `sqlite`), `agent_session.operation` (`save`,
//!     `load`, `list`, `restore`, …, the method's name), `agent_session.revision`,
//!     `agent_session.bytes_read` and `agent_session.bytes_written` (when any; for
//!     PostgreSQL, the bytes of the rows fetched and of the snapshots and entries sent),
//!     `agent_session.sessions` (listings);
//!   - `agent_session.turn`, one per [`Session::send`] (and its variants):
//!     `gen_ai.operation.name` (`invoke_agent`), `gen_ai.conversation.id`,
//!     `gen_ai.request.model`, `agent_session.completions`, `agent_session.tool_calls`,
//!     `agent_session.stop_reason` (`finished`, `max_turns`);
//!   - `agent_session.harness`, one per [`Harness::save_session`] (and every harness
//!     save): `gen_ai.conversation.id`, `agent_session.operation` (`save_session`),
//!     `agent_session.revision`;
//!   - on every span, the outcome: `agent_session.outcome` (`ok` or the
//!     [`ErrorKind`]: `not_found`, `conflict`, `invalid_input`, `corrupt`, `io`, `busy`,
//!     `engine`, `leased`), `otel.status_code` (`OK`, `ERROR`) and, on failure, `error.type` (the
//!     kind).
//!
//!   Store operations run by a turn, a harness save or another store operation are its
//!   child spans, also on [`BlockingStore`]'s blocking pool. Message text, tool
//!   arguments and results, the system prompt, metadata and error messages are never
//!   recorded: ids, the model name, revisions, sizes, counts and kinds only.
//!
//! The JSON format of a snapshot is documented field by field in
//! [`docs/FORMAT.md`](https://docs.rs/crate/agent-session/latest/source/docs/FORMAT.md).

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(unix))]
compile_error!("agent-session supports Unix platforms (Linux and macOS): the file store relies on Unix permissions and O_NOFOLLOW");

#[cfg(feature = "async-openai-0_43")]
#[cfg_attr(docsrs, doc(cfg(feature = "async-openai-0_43")))]
pub mod adapters;
mod clock;
mod compactor;
mod engine;
mod error;
mod harness;
mod id;
mod json;
mod lease;
mod lifecycle;
mod redact;
mod session;
mod snapshot;
mod store;
mod telemetry;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod transcript;
mod usage;

pub use clock::CLOCK_SKEW_TOLERANCE;
pub use compactor::{Compaction, CompactionPolicy, CompactionRequest, Compactor};
pub use engine::{BoxFuture, Completion, CompletionRequest, Engine, ToolDefinition, ToolExecutor};
pub use error::{BoxError, Error, ErrorKind, Location, Result};
pub use harness::{Autosave, Harness, HarnessBuilder};
pub use id::{LeaseHolder, Revision, SessionId, MAX_ID_LEN};
pub use lease::{Lease, LeaseRequest, DEFAULT_LEASE_TTL, MIN_LEASE_TTL};
pub use lifecycle::{
    copy_sessions, copy_sessions_async, CopyOptions, CopyOutcome, CopyReport, ExistingSessions,
    SessionCopy,
};
pub use lifecycle::{
    AsyncSessionStoreExt, Bundle, HistoryRetention, ImportIds, Imported, PrunePolicy, PruneReason,
    PruneReport, PruneScope, Pruned, SessionStoreExt, TrimmedHistory, BUNDLE_VERSION,
};
pub use redact::{PatternRedactor, Redactor, REDACTED};
pub use session::{
    AsyncCheckpoint, Checkpoint, Session, SessionOptions, StopReason, TurnOutcome,
    INTERRUPTED_OUTPUT,
};
pub use snapshot::{
    BlockPosition, EntryKind, ForkAt, History, HistoryMessage, HistoryStats, Lineage, LogEntry,
    PersistedOptions, RevisionInfo, RewindTo, SessionLog, SessionSnapshot, SnapshotBuilder,
    Standing, ToolCallRecord, ToolCallStatus, DEFAULT_MAX_TURNS, OLDEST_SCHEMA_VERSION,
    SCHEMA_VERSION,
};
pub use store::{
    check_page_limit, check_revision, check_stored_id, check_unchanged, searchable_text,
    AsyncSessionStore, BlockingStore, Durability, FileSessionStore, FileStoreBuilder,
    IndexedMetadata, ListCursor, ListFilter, ListScope, MemorySessionStore, MessageHit, SearchPage,
    SearchQuery, SessionHit, SessionList, SessionPage, SessionStore, SessionSummary, StoredVersion,
    DEFAULT_MAX_SNAPSHOT_BYTES, MAX_INDEXED_KEYS, MAX_INDEXED_VALUE_BYTES, MAX_QUERY_WORDS,
};
pub use transcript::{
    Codec, ContentBlock, Message, Role, TextBlock, ToolArguments, ToolCall, ToolOutput, ToolResult,
};
pub use usage::{Cost, Usage, UsageTotals};

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::{PostgresSessionStore, PostgresStoreBuilder, DEFAULT_POSTGRES_SCHEMA};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use store::{SqliteSessionStore, SqliteStoreBuilder};

/// The README's examples, compiled and run as doc tests so they cannot drift.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[cfg(test)]
mod send_sync {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn public_types_are_thread_safe() {
        assert_send_sync::<Error>();
        assert_send_sync::<FileSessionStore>();
        assert_send_sync::<MemorySessionStore>();
        assert_send_sync::<std::sync::Arc<dyn SessionStore>>();
        assert_send_sync::<SessionSnapshot>();
        assert_send_sync::<SessionOptions>();
    }

    #[test]
    fn session_is_send_with_a_send_engine() {
        struct E;
        impl Engine for E {
            async fn complete(
                &mut self,
                _: CompletionRequest<'_>,
            ) -> std::result::Result<Completion, BoxError> {
                Err("unused".into())
            }
        }
        assert_send::<Session<E>>();
    }
}
