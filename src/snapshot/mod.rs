//! The persisted state of an idle session: [`SessionSnapshot`], what it holds (options,
//! tool-call records, block positions), its builder, and its accessors.
//!
//! Its other sides each have a module: its JSON form ([`codec`], and [`window`] for a
//! stored file read a window at a time), the invariants every snapshot keeps
//! ([`validate`]), what it shares with a stored revision so a save writes only what is new
//! ([`delta`]), making a new session from it ([`fork`]), redaction of the stored copy
//! ([`redaction`]), and reading older schema versions ([`upgrade`]).

mod codec;
mod compact;
mod delta;
mod entry;
mod fence;
mod fold;
mod fork;
mod log;
mod record;
mod redaction;
mod restore;
mod retry;
mod rewind;
mod trim;
mod upgrade;
mod usage_list;
mod validate;
pub(crate) mod window;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::json::{self, strict};
use crate::transcript::{dismantle_message, ContentBlock, Message, Role, ToolCall, ToolResult};
use crate::usage::{Usage, UsageTotals};

pub(crate) use compact::{compact_parts, compaction_point, CompactTarget};
pub(crate) use delta::{Counts, Pending, Provenance};
pub(crate) use entry::{
    decode_any_head, decode_body, decode_head, entry_of_record, intact_frame, parse_frame_header,
    push_frame, split_entry, EntryHead, FRAME_HEADER_LEN,
};
// Only the database stores frame a view checkpoint of their own.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use entry::FRAME_OVERHEAD;
pub use entry::{EntryKind, LogEntry};
pub(crate) use fork::{shared_prefix_of, sharing_checkpoint, SharedPrefix, SHARED_DEPTH_BUDGET};
pub use fork::{ForkAt, Lineage};
pub(crate) use log::LogSource;
pub use log::{History, HistoryMessage, HistoryStats, RevisionInfo, SessionLog, Standing};
pub(crate) use record::{counts_after, decode_record};
pub(crate) use restore::{restore_parts, RestoreTarget};
pub(crate) use rewind::rewind_parts;
pub use rewind::RewindTo;
pub(crate) use validate::check_metadata_depth;
use validate::{check_depths, check_not_in_the_future, pair_tool_calls};

/// The snapshot schema version this release writes. It reads every version from
/// [`OLDEST_SCHEMA_VERSION`] up to this one, upgrading older ones as they are decoded
/// (see `docs/FORMAT.md`, "Version history").
pub const SCHEMA_VERSION: u32 = 3;

/// The oldest snapshot schema version this release still reads.
pub const OLDEST_SCHEMA_VERSION: u32 = 1;

/// The longest title [`SessionSnapshot::title`] derives from the first user message.
const TITLE_MAX_CHARS: usize = 80;

/// The turn limit used when none is given: model completions per
/// [`Session::send`](crate::Session::send).
pub const DEFAULT_MAX_TURNS: u32 = 16;

/// The options of a session that are saved with it: everything needed to rebuild
/// [`SessionOptions`](crate::SessionOptions) except the tool executor.
///
/// # Examples
///
/// ```
/// use agent_session::PersistedOptions;
///
/// let options = PersistedOptions::new("gpt-4o-mini", 8);
/// assert_eq!(options.max_turns, 8);
/// assert!(options.system_prompt.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PersistedOptions {
    /// The model the session talks to.
    pub model: String,
    /// The system prompt, if any.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// The effective limit on model completions per [`Session::send`](crate::Session::send).
    pub max_turns: u32,
}

impl PersistedOptions {
    /// Options with `model`, `max_turns` and no system prompt.
    #[must_use]
    pub fn new(model: impl Into<String>, max_turns: u32) -> Self {
        PersistedOptions {
            model: model.into(),
            system_prompt: None,
            max_turns,
        }
    }
}

/// Where a content block sits in the transcript.
///
/// # Examples
///
/// ```
/// use agent_session::BlockPosition;
///
/// let at = BlockPosition { message: 2, block: 0 };
/// assert!(at < BlockPosition { message: 3, block: 0 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockPosition {
    /// Index of the message in the transcript.
    pub message: usize,
    /// Index of the block within the message's content.
    pub block: usize,
}

/// How a tool call ended.
///
/// # Examples
///
/// ```
/// use agent_session::ToolCallStatus;
///
/// assert!(ToolCallStatus::Interrupted.is_error());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// The tool returned a result.
    Ok,
    /// The tool returned an error result.
    Error,
    /// The turn was cancelled before the tool returned; the call was closed with an error
    /// result saying so and was not run again.
    Interrupted,
}

impl ToolCallStatus {
    /// True for results whose `is_error` flag is set: errors and interruptions.
    #[must_use]
    pub fn is_error(self) -> bool {
        self != ToolCallStatus::Ok
    }
}

/// A tool call paired with its result: where each sits in the transcript, and how it ended.
///
/// The call's arguments and the result's output are read from the transcript (see
/// [`SessionSnapshot::tool_call`] and [`SessionSnapshot::tool_result`]), so they are never
/// stored twice.
///
/// # Examples
///
/// ```
/// use agent_session::{ContentBlock, Message, SessionId, SessionSnapshot, ToolCall, ToolResult};
/// use serde_json::json;
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("demo")?, "model")
///     .transcript(vec![
///         Message::user("2+2?"),
///         Message::assistant(vec![ContentBlock::tool_call(ToolCall::new("c1", "calc", json!("2+2")))]),
///         Message::tool_result(ToolResult::new("c1", "4")),
///     ])
///     .build()?;
/// let record = &snapshot.tool_calls()[0];
/// assert_eq!(record.tool_name, "calc");
/// let result = snapshot.tool_result(record).expect("records point into their snapshot");
/// assert_eq!(result.output.as_text(), Some("4"));
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolCallRecord {
    /// The provider's id for the call.
    pub call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// Where the [`ToolCall`] block is.
    #[serde(deserialize_with = "strict::object")]
    pub call_at: BlockPosition,
    /// Where its [`ToolResult`] block is.
    #[serde(deserialize_with = "strict::object")]
    pub result_at: BlockPosition,
    /// How the call ended.
    pub status: ToolCallStatus,
}

/// The complete, persisted state of an idle session.
///
/// A snapshot is always consistent: every tool call in the transcript has exactly one
/// result after it, the tool-call records agree with the transcript, and the usage totals
/// do not overflow. [`SessionSnapshot::from_json`] checks all of that on every load, so a
/// damaged or hand-edited file is an error, never a half-valid session.
///
/// Its JSON form is documented field by field in `docs/FORMAT.md`.
///
/// # Examples
///
/// ```
/// use agent_session::{Message, SessionId, SessionSnapshot};
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("demo")?, "gpt-4o-mini")
///     .system_prompt("Be brief.")
///     .transcript(vec![Message::user("Hello there")])
///     .build()?;
/// let bytes = snapshot.to_json()?;
/// let back = SessionSnapshot::from_json(&bytes)?;
/// assert_eq!(back, snapshot);
/// assert_eq!(back.title().as_deref(), Some("Hello there"));
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SessionSnapshot {
    id: SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    options: PersistedOptions,
    metadata: Map<String, Value>,
    /// Where the session was forked from, if it is a fork.
    lineage: Option<Lineage>,
    // Shared with the session that made the snapshot (and with clones), so taking a
    // snapshot to save it does not copy the history; copied on write.
    transcript: Arc<Vec<Message>>,
    tool_calls: Arc<Vec<ToolCallRecord>>,
    usage: Arc<Vec<Usage>>,
    /// `usage` summed, checked not to overflow whenever usage is added: so summaries and
    /// listings never sum the whole history, and no snapshot a store is given can hold
    /// usage that a load would refuse. Derived from `usage`, so equality ignores it.
    totals: UsageTotals,
    /// What this snapshot is known to share with a stored revision; not part of its value
    /// (equality ignores it) and never serialized.
    provenance: Option<Provenance>,
    /// The rules of the redactor last applied to this snapshot, if they are known
    /// ([`Redactor::rules_id`]).
    redacted_by: Option<u64>,
    /// How deep the session's metadata nested when a snapshot was taken of it, if deeper
    /// than a stored session can hold: the metadata is then left out (never copied) and
    /// every encoding of the snapshot fails with [`Error::TooDeep`], so no store saves it
    /// and nothing recurses through it.
    metadata_too_deep: Option<usize>,
    /// What the store's log holds beyond this state; not part of its value.
    history: HistoryStats,
    /// Whether saving this snapshot must replace the stored session's history rather than
    /// add to it: set when redaction changed messages the store already holds (the
    /// stored history would keep the text the redactor now removes).
    replaces_history: bool,
    /// For a fork made from a stored revision, or one loaded from a checkpoint that shares
    /// its parent's messages: the parent's history its first messages are. Not part of its
    /// value.
    share: Option<SharedPrefix>,
    /// The lease the snapshot is saved under ([`with_lease`](Self::with_lease)): its
    /// session and epoch. Not part of its value and never serialized.
    fence: Option<(SessionId, u64)>,
}

impl PartialEq for SessionSnapshot {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.revision == other.revision
            && self.created_at == other.created_at
            && self.updated_at == other.updated_at
            && self.options == other.options
            && self.metadata == other.metadata
            && self.lineage == other.lineage
            && self.transcript == other.transcript
            && self.tool_calls == other.tool_calls
            && self.usage == other.usage
            && self.metadata_too_deep == other.metadata_too_deep
    }
}

impl SessionSnapshot {
    /// Starts building a snapshot of session `id` talking to `model`, for importing a
    /// conversation or writing a custom store's tests. Sessions make their own snapshots
    /// with [`Session::snapshot`](crate::Session::snapshot).
    pub fn builder(id: SessionId, model: impl Into<String>) -> SnapshotBuilder {
        let now = Utc::now();
        SnapshotBuilder {
            id,
            options: PersistedOptions::new(model, DEFAULT_MAX_TURNS),
            created_at: now,
            updated_at: now,
            metadata: Map::new(),
            lineage: None,
            transcript: Vec::new(),
            statuses: HashMap::new(),
            interrupted_at: HashSet::new(),
            usage: Vec::new(),
        }
    }

    /// The schema version of this snapshot's JSON form.
    #[must_use]
    pub fn schema_version(&self) -> u32 {
        SCHEMA_VERSION
    }

    /// The session's id.
    #[must_use]
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// The revision this snapshot was loaded at or derived from ([`Revision::NEW`] if it
    /// was never saved). A store saves it only if this is still the stored revision.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// When the session was created.
    #[must_use]
    pub fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }

    /// When the session last changed (a turn, or a metadata edit).
    #[must_use]
    pub fn updated_at(&self) -> DateTime<Utc> {
        self.updated_at
    }

    /// The persisted options.
    #[must_use]
    pub fn options(&self) -> &PersistedOptions {
        &self.options
    }

    /// The session's JSON metadata.
    #[must_use]
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.metadata
    }

    /// Where the session was forked from, if it is a fork ([`fork`](Self::fork)).
    #[must_use]
    pub fn lineage(&self) -> Option<&Lineage> {
        self.lineage.as_ref()
    }

    /// The transcript, oldest message first.
    #[must_use]
    pub fn transcript(&self) -> &[Message] {
        &self.transcript
    }

    /// One record per tool call, in transcript order.
    #[must_use]
    pub fn tool_calls(&self) -> &[ToolCallRecord] {
        &self.tool_calls
    }

    /// Usage of each completion, oldest first.
    #[must_use]
    pub fn usage(&self) -> &[Usage] {
        &self.usage
    }

    /// Whether saving this snapshot must replace the stored session's history instead of
    /// adding to it: its redaction changed messages the store holds, and the history would
    /// keep their unredacted text.
    pub(crate) fn replaces_history(&self) -> bool {
        self.replaces_history
    }

    /// The parent's history this snapshot's first messages are, if known (see the field).
    pub(crate) fn share(&self) -> Option<SharedPrefix> {
        self.share
    }

    /// Sets what the store's log holds beyond this state (a store, for what it loads).
    pub(crate) fn set_history_stats(&mut self, stats: HistoryStats) {
        self.history = stats;
    }

    /// What the store's log holds beyond this state: where the kept history starts and how
    /// often it was rewound, compacted or restored (all zero for a snapshot not loaded
    /// from a store).
    #[must_use]
    pub fn history_stats(&self) -> HistoryStats {
        self.history
    }

    /// Usage summed over all completions (kept as usage is added, so this costs nothing).
    #[must_use]
    pub fn totals(&self) -> UsageTotals {
        self.totals
    }

    /// The tool call a record refers to; `None` only for a record from another snapshot.
    #[must_use]
    pub fn tool_call(&self, record: &ToolCallRecord) -> Option<&ToolCall> {
        match block_at(&self.transcript, record.call_at) {
            Some(ContentBlock::ToolCall(call)) if call.id == record.call_id => Some(call),
            _ => None,
        }
    }

    /// The tool result a record refers to; `None` only for a record from another snapshot.
    #[must_use]
    pub fn tool_result(&self, record: &ToolCallRecord) -> Option<&ToolResult> {
        match block_at(&self.transcript, record.result_at) {
            Some(ContentBlock::ToolResult(result)) if result.call_id == record.call_id => {
                Some(result)
            }
            _ => None,
        }
    }

    /// A short title: the metadata's `"title"` string if set, otherwise the first line of
    /// the first user message, otherwise `None`; either cut to 80 characters and an
    /// ellipsis, so what listings hold of a session never depends on the size of its
    /// content.
    #[must_use]
    pub fn title(&self) -> Option<String> {
        if let Some(Value::String(title)) = self.metadata.get("title") {
            if !title.trim().is_empty() {
                return Some(cut(title.trim(), TITLE_MAX_CHARS));
            }
        }
        let first_user = self
            .transcript
            .iter()
            .filter(|m| m.role == Role::User)
            .map(Message::text)
            .find(|t| !t.trim().is_empty())?;
        let line = first_user.trim().lines().next().unwrap_or_default().trim();
        Some(cut(line, TITLE_MAX_CHARS))
    }

    /// Assembles a snapshot from a session's parts. The parts come from a session whose
    /// every mutation kept them consistent, so this only checks in debug builds.
    pub(crate) fn from_session_parts(parts: SnapshotParts) -> Self {
        let snapshot = SessionSnapshot {
            id: parts.id,
            revision: parts.revision,
            created_at: parts.created_at,
            updated_at: parts.updated_at,
            options: parts.options,
            metadata: parts.metadata,
            lineage: parts.lineage,
            transcript: parts.transcript,
            tool_calls: parts.tool_calls,
            usage: parts.usage,
            totals: parts.totals,
            provenance: parts.provenance,
            redacted_by: None,
            fence: None,
            metadata_too_deep: parts.metadata_too_deep,
            history: parts.history,
            replaces_history: false,
            share: None,
        };
        #[cfg(debug_assertions)]
        if snapshot.metadata_too_deep.is_none() {
            let mut checked = snapshot.clone();
            let valid = checked.validate();
            assert!(
                valid.is_ok() && checked.totals == snapshot.totals,
                "an idle session produced an inconsistent snapshot: {valid:?}"
            );
        }
        snapshot
    }

    /// Splits the snapshot into the parts a session is made of.
    pub(crate) fn into_parts(self) -> SnapshotParts {
        SnapshotParts {
            id: self.id,
            revision: self.revision,
            created_at: self.created_at,
            updated_at: self.updated_at,
            options: self.options,
            metadata: self.metadata,
            lineage: self.lineage,
            transcript: self.transcript,
            tool_calls: self.tool_calls,
            usage: self.usage,
            totals: self.totals,
            provenance: self.provenance,
            metadata_too_deep: None,
            history: self.history,
        }
    }
}

/// The fields of a snapshot, moved between it and a [`Session`](crate::Session).
pub(crate) struct SnapshotParts {
    pub(crate) id: SessionId,
    pub(crate) revision: Revision,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) options: PersistedOptions,
    pub(crate) metadata: Map<String, Value>,
    pub(crate) lineage: Option<Lineage>,
    pub(crate) transcript: Arc<Vec<Message>>,
    pub(crate) tool_calls: Arc<Vec<ToolCallRecord>>,
    pub(crate) usage: Arc<Vec<Usage>>,
    pub(crate) totals: UsageTotals,
    pub(crate) provenance: Option<Provenance>,
    /// See [`SessionSnapshot`]'s field of the same name; always `None` from a snapshot.
    pub(crate) metadata_too_deep: Option<usize>,
    pub(crate) history: HistoryStats,
}

/// `text` cut to `max` characters, with an ellipsis if anything was cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

fn block_at(transcript: &[Message], at: BlockPosition) -> Option<&ContentBlock> {
    transcript.get(at.message)?.content.get(at.block)
}

/// Builds a [`SessionSnapshot`] from parts, deriving the tool-call records from the
/// transcript. Made by [`SessionSnapshot::builder`].
///
/// # Examples
///
/// ```
/// use agent_session::{Message, SessionId, SessionSnapshot, Usage};
/// use serde_json::json;
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("imported")?, "claude-sonnet-4-5")
///     .max_turns(4)
///     .metadata_entry("project", json!("parser"))
///     .transcript(vec![Message::user("hi")])
///     .usage(vec![Usage::new("claude-sonnet-4-5").with_tokens(3, 9)])
///     .build()?;
/// assert_eq!(snapshot.options().max_turns, 4);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct SnapshotBuilder {
    id: SessionId,
    options: PersistedOptions,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    metadata: Map<String, Value>,
    lineage: Option<Lineage>,
    transcript: Vec<Message>,
    statuses: HashMap<String, ToolCallStatus>,
    interrupted_at: HashSet<BlockPosition>,
    usage: Vec<Usage>,
}

impl SnapshotBuilder {
    /// Sets the system prompt (default: none).
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.options.system_prompt = Some(prompt.into());
        self
    }

    /// Sets the turn limit (default: [`DEFAULT_MAX_TURNS`](crate::DEFAULT_MAX_TURNS)).
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.options.max_turns = max_turns;
        self
    }

    /// Replaces the metadata (default: empty).
    pub fn metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }

    /// Sets one metadata entry.
    pub fn metadata_entry(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// Records the session as a fork ([`Lineage`]; default: none), for importers that
    /// rebuild forks made elsewhere. [`SessionSnapshot::fork`] sets it for you.
    pub fn lineage(mut self, lineage: Lineage) -> Self {
        self.lineage = Some(lineage);
        self
    }

    /// Sets the transcript (default: empty).
    pub fn transcript(mut self, transcript: Vec<Message>) -> Self {
        self.transcript = transcript;
        self
    }

    /// Marks every call with `call_id` as interrupted rather than failed. Their results
    /// must have `is_error` set. Ids may repeat once the earlier call is answered (some
    /// servers number calls per step): to name one call among several with the same id,
    /// use [`interrupted_at`](Self::interrupted_at).
    pub fn interrupted(mut self, call_id: impl Into<String>) -> Self {
        self.statuses
            .insert(call_id.into(), ToolCallStatus::Interrupted);
        self
    }

    /// Marks the call whose [`ToolCall`] block is at `call_at` as interrupted rather than
    /// failed (see [`ToolCallRecord::call_at`]). Its result must have `is_error` set.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{BlockPosition, ContentBlock, Message, SessionId, SessionSnapshot,
    ///     ToolCall, ToolCallStatus, ToolResult};
    /// use serde_json::json;
    ///
    /// let call = || Message::assistant(vec![ContentBlock::tool_call(ToolCall::new("call_0", "f", json!({})))]);
    /// let snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![
    ///         call(), Message::tool_result(ToolResult::error("call_0", "failed")),
    ///         call(), Message::tool_result(ToolResult::error("call_0", "cut short")),
    ///     ])
    ///     .interrupted_at(BlockPosition { message: 2, block: 0 })
    ///     .build()?;
    /// let statuses: Vec<_> = snapshot.tool_calls().iter().map(|r| r.status).collect();
    /// assert_eq!(statuses, [ToolCallStatus::Error, ToolCallStatus::Interrupted]);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn interrupted_at(mut self, call_at: BlockPosition) -> Self {
        self.interrupted_at.insert(call_at);
        self
    }

    /// Sets the per-completion usage (default: none).
    pub fn usage(mut self, usage: Vec<Usage>) -> Self {
        self.usage = usage;
        self
    }

    /// Sets both timestamps (default: now).
    pub fn timestamps(mut self, created_at: DateTime<Utc>, updated_at: DateTime<Utc>) -> Self {
        self.created_at = created_at;
        self.updated_at = updated_at;
        self
    }

    /// Derives the tool-call records and validates the snapshot.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if a tool call has no result (or two), a result answers no
    /// call, `max_turns` is zero, or timestamps or usage totals are out of range;
    /// [`Error::TooDeep`] if a message nests more than 125 levels deep or the metadata more
    /// than 126 (a stored session could not be read back); [`Error::InvalidArgument`] if a
    /// time lies in the future ([`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE)), or
    /// [`interrupted`](Self::interrupted) or [`interrupted_at`](Self::interrupted_at) names
    /// a call the transcript does not have.
    pub fn build(mut self) -> Result<SessionSnapshot> {
        crate::transcript::seal(&mut self.transcript);
        let now = Utc::now();
        for (field, at) in [
            ("created_at", self.created_at),
            ("updated_at", self.updated_at),
        ] {
            check_not_in_the_future(&self.id, field, at, now)?;
        }
        if let Err(e) = check_depths(&self.id, 0, &self.transcript, Some(&self.metadata)) {
            self.transcript.into_iter().for_each(dismantle_message);
            json::dismantle_map(self.metadata);
            return Err(e);
        }
        let pairs = pair_tool_calls(&self.transcript)?;
        // A call named for interruption that is not there is a mistake to report, not to
        // ignore (its status would silently stay an error).
        if let Some(at) = self
            .interrupted_at
            .iter()
            .find(|at| !pairs.iter().any(|pair| pair.call_at == **at))
        {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "interrupted_at names message {} block {}, where there is no tool call",
                    at.message, at.block
                ),
            });
        }
        if let Some(id) = self
            .statuses
            .keys()
            .find(|id| !pairs.iter().any(|pair| pair.call.id == **id))
        {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "interrupted names tool call {id:?}, which the transcript does not have"
                ),
            });
        }
        let tool_calls = pairs
            .into_iter()
            .map(|pair| {
                let status = if self.interrupted_at.contains(&pair.call_at) {
                    ToolCallStatus::Interrupted
                } else {
                    match self.statuses.get(&pair.call.id) {
                        Some(status) => *status,
                        None if pair.result.is_error => ToolCallStatus::Error,
                        None => ToolCallStatus::Ok,
                    }
                };
                ToolCallRecord {
                    call_id: pair.call.id.clone(),
                    tool_name: pair.call.name.clone(),
                    call_at: pair.call_at,
                    result_at: pair.result_at,
                    status,
                }
            })
            .collect();
        let snapshot = SessionSnapshot {
            id: self.id,
            revision: Revision::NEW,
            created_at: self.created_at,
            updated_at: self.updated_at,
            options: self.options,
            metadata: self.metadata,
            lineage: self.lineage,
            transcript: Arc::new(self.transcript),
            tool_calls: Arc::new(tool_calls),
            usage: Arc::new(self.usage),
            totals: UsageTotals::default(),
            provenance: None,
            redacted_by: None,
            fence: None,
            metadata_too_deep: None,
            history: HistoryStats::default(),
            replaces_history: false,
            share: None,
        };
        let mut snapshot = snapshot;
        snapshot.validate()?;
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests;

impl crate::telemetry::Traced for SessionSnapshot {
    #[inline]
    fn trace(&self, span: &crate::telemetry::OpSpan) {
        span.record_revision(self.revision());
    }
}

impl crate::telemetry::Traced for History {}
