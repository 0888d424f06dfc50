//! `SessionSnapshot`: the persisted state of a session, its JSON form, and its validation.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::clock;
use crate::error::{Error, Location, Result};
use crate::id::SessionId;
use crate::json::{self, strict, Field, ObjectOnly, StrictValue};
use crate::lineage::{self, ForkAt, Lineage};
use crate::migrate;
use crate::redact::{self, Redactor};
use crate::store::Revision;
use crate::transcript::{
    dismantle_message, message_depth, ContentBlock, Message, Role, ToolCall, ToolResult,
};
use crate::usage::{Usage, UsageTotals};

/// The snapshot schema version this release writes. It reads every version from
/// [`OLDEST_SCHEMA_VERSION`] up to this one, upgrading older ones as they are decoded
/// (see `docs/FORMAT.md`, "Version history").
pub const SCHEMA_VERSION: u32 = 2;

/// The oldest snapshot schema version this release still reads.
pub const OLDEST_SCHEMA_VERSION: u32 = 1;

/// The longest title [`SessionSnapshot::title`] derives from the first user message.
const TITLE_MAX_CHARS: usize = 80;

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

/// How many transcript messages, tool-call records and usage entries a state has: the
/// lengths of a snapshot's three growing lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Counts {
    pub(crate) messages: usize,
    pub(crate) tool_calls: usize,
    pub(crate) usage: usize,
}

impl Counts {
    /// Whether every count is at most `other`'s.
    pub(crate) fn within(self, other: Counts) -> bool {
        self.messages <= other.messages
            && self.tool_calls <= other.tool_calls
            && self.usage <= other.usage
    }
}

/// What a snapshot is known to share with a stored revision, so a store can write only
/// what changed.
///
/// Only this crate makes one: a store's `load`, and a [`Session`](crate::Session) after a
/// successful save. Everything that can change a snapshot's leading elements (building,
/// redaction that changes them) drops or narrows it, so the claim "the first `kept`
/// elements are the stored ones" stays true. A store still checks the revision, creation
/// time and stored counts before trusting it, and falls back to a full write otherwise.
#[derive(Clone)]
pub(crate) struct Provenance {
    /// The stored revision this snapshot derives from.
    pub(crate) revision: Revision,
    /// The lengths stored at that revision.
    pub(crate) stored: Counts,
    /// How many leading elements of this snapshot equal the stored ones (at most
    /// `stored`: a session replacing the placeholder results it saved before running its
    /// tools keeps fewer than are stored).
    pub(crate) kept: Counts,
    /// The `updated_at` stored at that revision.
    pub(crate) updated_at: DateTime<Utc>,
    /// The options and metadata stored at that revision, to tell whether they changed.
    pub(crate) options: Arc<PersistedOptions>,
    pub(crate) metadata: Arc<Map<String, Value>>,
    /// The rules the stored copy was redacted with, when known
    /// ([`Redactor::rules_id`]): redacting the kept messages with them again gives the
    /// stored ones.
    pub(crate) redactor: Option<u64>,
}

impl std::fmt::Debug for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provenance")
            .field("revision", &self.revision)
            .field("stored", &self.stored)
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

/// A change from one stored state to the next: keep the first `from` elements, append the
/// rest, and replace options or metadata if given. A journal record holds one.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) revision: Revision,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) from: Counts,
    pub(crate) messages: Vec<Message>,
    pub(crate) tool_calls: Vec<ToolCallRecord>,
    pub(crate) usage: Vec<Usage>,
    pub(crate) options: Option<PersistedOptions>,
    pub(crate) metadata: Option<Map<String, Value>>,
}

/// The decoded JSON form; only [`SessionSnapshot::from_json`] turns it into a snapshot,
/// after validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decoded {
    schema_version: u64,
    id: SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(deserialize_with = "strict::object")]
    options: PersistedOptions,
    #[serde(deserialize_with = "strict::map")]
    metadata: Map<String, Value>,
    /// Absent, `null` or an object: a version 1 document must not have the field at all.
    #[serde(default)]
    lineage: Field<Lineage>,
    #[serde(deserialize_with = "strict::objects")]
    transcript: Vec<Message>,
    #[serde(deserialize_with = "strict::objects")]
    tool_calls: Vec<ToolCallRecord>,
    #[serde(deserialize_with = "strict::objects")]
    usage: Vec<Usage>,
}

/// The encoded JSON form in one piece: what [`SessionSnapshot::to_json_with_revision`]
/// writes part by part, kept to check that it writes the same bytes.
#[cfg(test)]
#[derive(Serialize)]
struct Encoded<'a> {
    schema_version: u32,
    id: &'a SessionId,
    revision: Revision,
    created_at: &'a DateTime<Utc>,
    updated_at: &'a DateTime<Utc>,
    options: &'a PersistedOptions,
    metadata: &'a Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lineage: Option<&'a Lineage>,
    transcript: &'a [Message],
    tool_calls: &'a [ToolCallRecord],
    usage: &'a [Usage],
}

/// The fields of [`Encoded`] before the transcript, in the same order.
#[derive(Serialize)]
struct EncodedHead<'a> {
    schema_version: u32,
    id: &'a SessionId,
    revision: Revision,
    created_at: &'a DateTime<Utc>,
    updated_at: &'a DateTime<Utc>,
    options: &'a PersistedOptions,
    metadata: &'a Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lineage: Option<&'a Lineage>,
}

/// A transcript encoded as a JSON array, in one or more consecutive chunks.
struct EncodedArray {
    /// Each chunk is itself a JSON array of consecutive messages.
    chunks: Vec<Vec<u8>>,
    /// The total length of the chunks.
    bytes: usize,
    /// The deepest nesting in the array, counting the array itself.
    depth: usize,
}

impl EncodedArray {
    /// Writes the chunks as one array.
    fn write_into(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        let mut first = true;
        for chunk in &self.chunks {
            let inner = &chunk[1..chunk.len() - 1];
            if inner.is_empty() {
                continue;
            }
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(inner);
            first = false;
        }
        out.push(b']');
    }
}

/// Transcripts with fewer messages than this are encoded on the calling thread: below it
/// a thread costs more than it saves.
const PARALLEL_MESSAGES: usize = 256;

/// Encodes `messages` as a JSON array, splitting a long transcript between threads (at
/// most 4, and no more than the machine has cores); the bytes are the same as
/// `serde_json::to_vec(messages)`.
fn encode_in_parallel(messages: &[Message]) -> serde_json::Result<EncodedArray> {
    let threads = if messages.len() < PARALLEL_MESSAGES {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
    };
    let encode = |part: &[Message]| -> serde_json::Result<(Vec<u8>, usize)> {
        let mut bytes = Vec::with_capacity(part.len() * 1024);
        let depth = json::write_measuring_depth(&mut bytes, part)?;
        Ok((bytes, depth))
    };
    let parts: Vec<&[Message]> = messages
        .chunks(messages.len().div_ceil(threads).max(1))
        .collect();
    let results: Vec<serde_json::Result<(Vec<u8>, usize)>> = if parts.len() <= 1 {
        vec![encode(messages)]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = parts[1..]
                .iter()
                .map(|part| {
                    std::thread::Builder::new()
                        .spawn_scoped(scope, move || encode(part))
                        .ok()
                })
                .collect();
            let mut results = vec![encode(parts[0])];
            for (part, handle) in parts[1..].iter().zip(handles) {
                // A thread that could not start (or panicked) is done here instead.
                results.push(
                    handle
                        .and_then(|h| h.join().ok())
                        .unwrap_or_else(|| encode(part)),
                );
            }
            results
        })
    };
    let mut array = EncodedArray {
        chunks: Vec::with_capacity(results.len()),
        bytes: 0,
        depth: 1,
    };
    for result in results {
        let (bytes, depth) = result?;
        array.bytes += bytes.len();
        array.depth = array.depth.max(depth);
        array.chunks.push(bytes);
    }
    Ok(array)
}

/// Just enough of a snapshot to tell which schema it claims, read when full decoding fails.
#[derive(Deserialize)]
struct VersionProbe {
    schema_version: Option<u64>,
}

/// The header fields a store needs for a compare-and-swap; the rest is skipped unbuilt.
#[derive(Deserialize)]
struct Header {
    schema_version: u64,
    id: SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
}

/// The header fields of an encoded snapshot: what a store needs to decide a
/// compare-and-swap and to match a journal to its base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SnapshotHeader {
    pub(crate) id: SessionId,
    pub(crate) revision: Revision,
    pub(crate) created_at: DateTime<Utc>,
}

impl SessionSnapshot {
    /// Starts building a snapshot of session `id` talking to `model`, for importing a
    /// conversation or writing a custom store's tests. Sessions make their own snapshots
    /// with [`Session::snapshot`](crate::Session::snapshot).
    pub fn builder(id: SessionId, model: impl Into<String>) -> SnapshotBuilder {
        let now = Utc::now();
        SnapshotBuilder {
            id,
            options: PersistedOptions::new(model, crate::session::DEFAULT_MAX_TURNS),
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

    /// Decodes and validates a snapshot from its JSON form.
    ///
    /// # Errors
    ///
    /// - [`Error::UnsupportedSchemaVersion`] if the snapshot claims another schema version;
    /// - [`Error::Malformed`] for invalid JSON, wrong types, missing or unknown fields,
    ///   duplicate keys, invalid ids, or nesting deeper than 127 levels;
    /// - [`Error::Inconsistent`] if the content contradicts itself (see the type docs).
    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        let mut snapshot = Self::decode_unvalidated(bytes)?;
        snapshot.validate()?;
        Ok(snapshot)
    }

    /// Decodes a snapshot without checking its invariants, for a store that applies
    /// journal records first and validates the result once.
    pub(crate) fn decode_unvalidated(bytes: &[u8]) -> Result<Self> {
        let decoded: Decoded = decode_versioned(
            bytes,
            |d: &Decoded| d.schema_version,
            // What the steps add since version 1 (`lineage`) must be absent, not just null.
            |d: &Decoded| d.lineage.is_absent(),
        )?;
        Ok(SessionSnapshot::from_decoded(
            decoded.id,
            decoded.revision,
            (decoded.created_at, decoded.updated_at),
            decoded.options,
            decoded.metadata,
            decoded.lineage.into_option(),
            (decoded.transcript, decoded.tool_calls, decoded.usage),
        ))
    }

    /// A snapshot of decoded fields, not yet validated.
    pub(crate) fn from_decoded(
        id: SessionId,
        revision: Revision,
        (created_at, updated_at): (DateTime<Utc>, DateTime<Utc>),
        options: PersistedOptions,
        metadata: Map<String, Value>,
        lineage: Option<Lineage>,
        (transcript, tool_calls, usage): (Vec<Message>, Vec<ToolCallRecord>, Vec<Usage>),
    ) -> Self {
        SessionSnapshot {
            id,
            revision,
            created_at,
            updated_at,
            options,
            metadata,
            lineage,
            transcript: Arc::new(transcript),
            tool_calls: Arc::new(tool_calls),
            usage: Arc::new(usage),
            // Summed (and checked) by `validate`, which every decoded snapshot goes through.
            totals: UsageTotals::default(),
            provenance: None,
            redacted_by: None,
            metadata_too_deep: None,
        }
    }

    /// Reads only the header of an encoded snapshot (schema version, id, revision, creation
    /// time), for stores deciding a compare-and-swap. A snapshot this crate wrote starts
    /// with exactly those fields, which are read from its first bytes without scanning the
    /// rest (on a 10 MB snapshot the scan was about as costly as encoding the new one);
    /// anything else is decoded as JSON, skipping the other fields. `Ok(None)` when `bytes`
    /// is only the start of a snapshot whose header is not in canonical form.
    pub(crate) fn peek_header(bytes: &[u8], whole: bool) -> Result<Option<SnapshotHeader>> {
        if let Some((version, header)) = canonical_header(bytes) {
            if !is_supported(version) {
                return Err(unsupported(version));
            }
            return Ok(Some(header));
        }
        if !whole {
            return Ok(None);
        }
        // The header fields are the same in every version.
        let header: Header = decode_versioned(bytes, |h: &Header| h.schema_version, |_| true)?;
        Ok(Some(SnapshotHeader {
            id: header.id,
            revision: header.revision,
            created_at: header.created_at,
        }))
    }

    /// Encodes the snapshot as compact JSON.
    ///
    /// # Errors
    ///
    /// [`Error::TooDeep`] if the snapshot was taken of a session whose metadata nests too
    /// deep to store ([`Session::metadata_mut`](crate::Session::metadata_mut)); every other
    /// way into a snapshot refuses such values where they enter.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        self.to_json_with_revision(self.revision)
    }

    /// Encodes the snapshot as it will be stored at `revision`, without copying it. Custom
    /// stores use this to write `snapshot.revision().next()`.
    ///
    /// # Errors
    ///
    /// As [`to_json`](Self::to_json).
    pub fn to_json_with_revision(&self, revision: Revision) -> Result<Vec<u8>> {
        let failed = |source| Error::Encode {
            id: self.id.clone(),
            source,
        };
        if let Some(depth) = self.metadata_too_deep {
            return Err(self.too_deep("metadata", depth, json::MAX_METADATA_DEPTH));
        }
        // Written part by part (the same bytes as one derived encoding), so the transcript,
        // most of the bytes, can be encoded on several threads.
        let transcript = encode_in_parallel(&self.transcript).map_err(failed)?;
        let mut out = Vec::with_capacity(transcript.bytes + 4096);
        let head = json::write_measuring_depth(
            &mut out,
            &EncodedHead {
                schema_version: SCHEMA_VERSION,
                id: &self.id,
                revision,
                created_at: &self.created_at,
                updated_at: &self.updated_at,
                options: &self.options,
                metadata: &self.metadata,
                lineage: self.lineage.as_ref(),
            },
        )
        .map_err(failed)?;
        out.pop(); // the head's closing brace
        out.extend_from_slice(b",\"transcript\":");
        transcript.write_into(&mut out);
        out.extend_from_slice(b",\"tool_calls\":");
        let tool_calls =
            json::write_measuring_depth(&mut out, &*self.tool_calls).map_err(failed)?;
        out.extend_from_slice(b",\"usage\":");
        let usage = json::write_measuring_depth(&mut out, &*self.usage).map_err(failed)?;
        out.push(b'}');
        // Never write what could not be read back: the decoder has a nesting limit. The
        // lists sit one level inside the top-level object.
        // Every value entering a snapshot is checked, so this holds by construction; the
        // measure is free while encoding, and keeps the promise should a check be missed.
        let depth = head.max(1 + transcript.depth.max(tool_calls).max(usage));
        if depth > json::MAX_JSON_DEPTH {
            return Err(self.too_deep("the snapshot", depth, json::MAX_JSON_DEPTH));
        }
        Ok(out)
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

    /// Sets the revision.
    ///
    /// For a snapshot that derives from a stored state (loaded from a store, or extended
    /// from one with [`with_appended`](Self::with_appended)), call it with the revision
    /// that [`SessionStore::save`](crate::SessionStore::save) returned for it: the snapshot
    /// then knows it is exactly what is stored at that revision, so saving it again,
    /// extended, writes only the new part to stores that can (see
    /// [`FileSessionStore`](crate::FileSessionStore)). Any other use (a snapshot from
    /// [`builder`](Self::builder), or a revision other than the next one) just sets the
    /// number, and the next save writes the whole snapshot.
    #[must_use]
    pub fn with_revision(mut self, revision: Revision) -> Self {
        if revision == self.revision {
            return self;
        }
        let derives_from_stored = self
            .provenance
            .as_ref()
            .is_some_and(|p| p.revision == self.revision);
        if derives_from_stored && revision == self.revision.next() {
            self.mark_stored(revision);
        } else {
            self.revision = revision;
            self.provenance = None;
        }
        self
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

    /// A new session `id` that starts with this one's history up to `at`, recording this
    /// session as its parent ([`Lineage`]). This snapshot is not changed; save the fork
    /// as a new session, or let [`SessionStore::fork`](crate::SessionStore::fork) do both.
    ///
    /// The fork keeps the options, the metadata, the messages before the cut and their
    /// tool-call records. Its usage starts empty: the completions that produced the
    /// shared history were paid for by the parent, so summing the cost of every session
    /// counts each completion once. Its creation and update times are now.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `id` is this session's own id, if `at` lies beyond
    /// the transcript, or if the cut would separate a tool call from its result (the
    /// message names the nearest points that do not).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ForkAt, Message, SessionId, SessionSnapshot};
    ///
    /// let parent = SessionSnapshot::builder(SessionId::parse("p")?, "m")
    ///     .transcript(vec![Message::user("a"), Message::user("b")])
    ///     .build()?;
    /// let fork = parent.fork(SessionId::parse("f")?, ForkAt::Messages(1))?;
    /// assert_eq!(fork.transcript().len(), 1);
    /// assert_eq!(fork.lineage().map(|l| l.parent.as_str()), Some("p"));
    /// assert!(parent.fork(SessionId::parse("p")?, ForkAt::End).is_err());
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn fork(&self, id: SessionId, at: ForkAt) -> Result<SessionSnapshot> {
        if id == self.id {
            return Err(Error::InvalidArgument {
                reason: format!("a fork of session {id} needs an id of its own"),
            });
        }
        let cut = lineage::cut(&self.id, &self.transcript, &self.tool_calls, at)?;
        let now = Utc::now().max(self.created_at);
        let fork = SessionSnapshot {
            id,
            revision: Revision::NEW,
            created_at: now,
            updated_at: now,
            options: self.options.clone(),
            metadata: self.metadata.clone(),
            lineage: Some(Lineage::new(self.id.clone(), self.revision, cut, now)),
            transcript: Arc::new(self.transcript[..cut].to_vec()),
            tool_calls: Arc::new(
                self.tool_calls
                    .iter()
                    .filter(|r| r.result_at.message < cut)
                    .cloned()
                    .collect(),
            ),
            usage: Arc::default(),
            totals: UsageTotals::default(),
            provenance: None,
            redacted_by: None,
            metadata_too_deep: None,
        };
        let mut fork = fork;
        fork.validate()?;
        Ok(fork)
    }

    /// Sets a creation or update time in the future (seen from `now`) to `now`, keeping
    /// the update no earlier than the creation; returns the times as they were if it
    /// changed them. For importing a session from a machine whose clock was ahead.
    pub(crate) fn clamp_future_times(
        &mut self,
        now: DateTime<Utc>,
    ) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let before = (self.created_at, self.updated_at);
        if clock::is_in_the_future(self.created_at, now) {
            self.created_at = now;
        }
        if clock::is_in_the_future(self.updated_at, now) {
            self.updated_at = now;
        }
        self.updated_at = self.updated_at.max(self.created_at);
        (before != (self.created_at, self.updated_at)).then_some(before)
    }

    /// This snapshot as a new, never-saved session `id` (revision [`Revision::NEW`]), with
    /// the lineage given: for importing it under another id.
    pub(crate) fn renamed(&self, id: SessionId, lineage: Option<Lineage>) -> SessionSnapshot {
        SessionSnapshot {
            id,
            revision: Revision::NEW,
            lineage,
            provenance: None,
            redacted_by: None,
            ..self.clone()
        }
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

    /// The lengths of the transcript, tool-call records and usage.
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            messages: self.transcript.len(),
            tool_calls: self.tool_calls.len(),
            usage: self.usage.len(),
        }
    }

    /// What this snapshot is known to share with a stored revision.
    pub(crate) fn provenance(&self) -> Option<&Provenance> {
        self.provenance.as_ref()
    }

    /// Whether this snapshot is known to be exactly what is stored at its revision (loaded,
    /// or saved by a session, and not changed since): saving it would change nothing. A
    /// store still checks that the stored revision, creation and update times are the ones
    /// the snapshot knows before taking this for a no-op.
    pub(crate) fn is_unchanged_since_stored(&self) -> bool {
        self.metadata_too_deep.is_none()
            && self.provenance.as_ref().is_some_and(|p| {
                p.revision == self.revision
                    && p.kept == p.stored
                    && p.stored == self.counts()
                    && p.updated_at == self.updated_at
                    && *p.options == self.options
                    && *p.metadata == self.metadata
            })
    }

    /// Records that this snapshot is exactly what is stored at `revision` (a store calls
    /// this on what it loads).
    pub(crate) fn mark_stored(&mut self, revision: Revision) {
        self.revision = revision;
        self.provenance = Some(self.stored_as(revision, self.counts()));
    }

    /// What a session whose first `kept` elements are this snapshot's knows once this
    /// snapshot is stored at `revision`.
    pub(crate) fn stored_as(&self, revision: Revision, kept: Counts) -> Provenance {
        Provenance {
            revision,
            stored: self.counts(),
            kept,
            updated_at: self.updated_at,
            options: Arc::new(self.options.clone()),
            metadata: Arc::new(self.metadata.clone()),
            redactor: self.redacted_by,
        }
    }

    /// The change from the stored state this snapshot derives from to this snapshot, to be
    /// stored at `revision`: `None` without provenance, or if the snapshot no longer has
    /// the elements it claims to keep.
    pub(crate) fn change_since_stored(&self, revision: Revision) -> Option<Change> {
        // Left out metadata is no change: the whole encoding, which refuses it, decides.
        if self.metadata_too_deep.is_some() {
            return None;
        }
        let provenance = self.provenance.as_ref()?;
        let kept = provenance.kept;
        if !kept.within(provenance.stored) || !kept.within(self.counts()) {
            return None;
        }
        Some(Change {
            revision,
            updated_at: self.updated_at,
            from: kept,
            messages: self.transcript[kept.messages..].to_vec(),
            tool_calls: self.tool_calls[kept.tool_calls..].to_vec(),
            usage: self.usage[kept.usage..].to_vec(),
            options: (*provenance.options != self.options).then(|| self.options.clone()),
            metadata: (*provenance.metadata != self.metadata).then(|| self.metadata.clone()),
        })
    }

    /// Applies a stored change: the caller validates the result once all are applied.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the change keeps more elements than there are, or does
    /// not follow the current revision.
    pub(crate) fn apply_change(&mut self, change: Change) -> Result<()> {
        if change.revision != self.revision.next() || self.revision.as_u64() == u64::MAX {
            return Err(Error::inconsistent(format!(
                "a journal record stores revision {} after revision {}; records must count up by one",
                change.revision, self.revision
            )));
        }
        if !change.from.within(self.counts()) {
            return Err(Error::inconsistent(format!(
                "a journal record for revision {} keeps {:?} of a state that has {:?}",
                change.revision,
                change.from,
                self.counts()
            )));
        }
        let transcript = Arc::make_mut(&mut self.transcript);
        transcript.truncate(change.from.messages);
        transcript.extend(change.messages);
        let tool_calls = Arc::make_mut(&mut self.tool_calls);
        tool_calls.truncate(change.from.tool_calls);
        tool_calls.extend(change.tool_calls);
        let usage = Arc::make_mut(&mut self.usage);
        usage.truncate(change.from.usage);
        usage.extend(change.usage);
        if let Some(options) = change.options {
            self.options = options;
        }
        if let Some(metadata) = change.metadata {
            self.metadata = metadata;
        }
        self.updated_at = change.updated_at;
        self.revision = change.revision;
        Ok(())
    }

    /// This snapshot with `messages` appended and `usage` added for the completions that
    /// produced them, at `updated_at`. Unlike building a new snapshot, it keeps what a
    /// store knows about this one, so saving the result writes only the new part, and it
    /// checks only the new messages (the ones already here are known to be consistent).
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if a new tool call has no result among the new messages, a
    /// new result answers no new call, `updated_at` is before the creation time, or usage
    /// totals would overflow; [`Error::TooDeep`] if a new message nests more than 125
    /// levels deep.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, Message, MemorySessionStore, SessionId, SessionSnapshot,
    ///     SessionStore, Usage};
    ///
    /// let store = MemorySessionStore::new();
    /// let first = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![Message::user("hi")])
    ///     .build()?;
    /// store.save(&first)?;
    /// let loaded = store.load(first.id())?;
    /// let next = loaded.with_appended(
    ///     vec![Message::assistant(vec![ContentBlock::text("hello")])],
    ///     vec![Usage::new("m").with_tokens(3, 1)],
    ///     chrono::Utc::now(),
    /// )?;
    /// assert_eq!(next.transcript().len(), 2);
    /// store.save(&next)?;
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn with_appended(
        mut self,
        messages: Vec<Message>,
        usage: Vec<Usage>,
        updated_at: DateTime<Utc>,
    ) -> Result<Self> {
        let offset = self.transcript.len();
        if let Err(e) = check_depths(&self.id, offset, &messages, None) {
            messages.into_iter().for_each(dismantle_message);
            return Err(e);
        }
        for (i, message) in messages.iter().enumerate() {
            check_role_alias(offset + i, message)?;
            check_block_roles(offset + i, message)?;
        }
        // Every call already here has its result, so new results can only answer new
        // calls: pairing the new messages alone checks them completely.
        let records: Vec<ToolCallRecord> = pair_tool_calls(&messages)
            .map_err(|e| match e {
                Error::Inconsistent { problem, .. } => Error::inconsistent(format!(
                    "in the appended messages (numbered from 0): {problem}"
                )),
                other => other,
            })?
            .into_iter()
            .map(|pair| ToolCallRecord {
                call_id: pair.call.id.clone(),
                tool_name: pair.call.name.clone(),
                call_at: shift(pair.call_at, offset),
                result_at: shift(pair.result_at, offset),
                status: if pair.result.is_error {
                    ToolCallStatus::Error
                } else {
                    ToolCallStatus::Ok
                },
            })
            .collect();
        if updated_at < self.created_at {
            return Err(Error::inconsistent(format!(
                "updated_at {updated_at} is before created_at {}",
                self.created_at
            )));
        }
        check_not_in_the_future(&self.id, "updated_at", updated_at, Utc::now())?;
        let Some(totals) = self.totals.checked_extend(&usage) else {
            return Err(Error::inconsistent(
                "usage totals overflow a 64-bit counter",
            ));
        };
        self.totals = totals;
        Arc::make_mut(&mut self.usage).extend(usage);
        Arc::make_mut(&mut self.transcript).extend(messages);
        Arc::make_mut(&mut self.tool_calls).extend(records);
        self.updated_at = updated_at;
        Ok(self)
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

    /// A copy with `redactor` applied to every string it carries (message text, tool
    /// arguments and results, provider fields, metadata values, the system prompt). Ids,
    /// tool names, roles, the model name and the tool-call records are kept, so the copy is
    /// as consistent as the original.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Message, PatternRedactor, SessionId, SessionSnapshot};
    ///
    /// let snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![Message::user("my key is sk-abcdefghijklmnopqrstuvwxyz")])
    ///     .build()?;
    /// let redacted = snapshot.redacted(&PatternRedactor::common_secrets());
    /// assert_eq!(redacted.transcript()[0].text(), "my key is [REDACTED]");
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn redacted(&self, redactor: &dyn Redactor) -> SessionSnapshot {
        let mut copy = self.clone();
        copy.redact(redactor);
        copy
    }

    /// Applies `redactor` in place (see [`redacted`](Self::redacted)), for callers that
    /// already own a fresh copy.
    pub(crate) fn redact(&mut self, redactor: &dyn Redactor) {
        let id = redactor.rules_id();
        if let Some(prompt) = &mut self.options.system_prompt {
            redact::redact_string(redactor, prompt);
        }
        redact::redact_map(redactor, &mut self.metadata);
        let kept = self.provenance.as_ref().map_or(0, |p| p.kept.messages);
        let mut first_changed = None;
        for (i, message) in Arc::make_mut(&mut self.transcript).iter_mut().enumerate() {
            if redact::redact_message(redactor, message) && first_changed.is_none() {
                first_changed = Some(i);
            }
        }
        // Messages a store already holds changed: they are still the stored ones only if
        // the stored copy was redacted with this same redactor.
        let stored_redacted_alike =
            id.is_some() && self.provenance.as_ref().is_some_and(|p| p.redactor == id);
        if first_changed.is_some_and(|first| first < kept) && !stored_redacted_alike {
            self.provenance = None;
        }
        self.redacted_by = id;
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

    fn too_deep(&self, part: &str, depth: usize, limit: usize) -> Error {
        Error::TooDeep {
            id: self.id.clone(),
            part: part.to_owned(),
            depth,
            limit,
        }
    }

    /// Checks every invariant described on the type, and sums the usage.
    pub(crate) fn validate(&mut self) -> Result<()> {
        if let Some(lineage) = &self.lineage {
            if lineage.parent == self.id {
                return Err(Error::inconsistent(format!(
                    "session {} names itself as the parent it was forked from",
                    self.id
                )));
            }
        }
        if self.options.max_turns == 0 {
            return Err(Error::inconsistent(
                "options.max_turns is 0; it must be at least 1",
            ));
        }
        if self.updated_at < self.created_at {
            return Err(Error::inconsistent(format!(
                "updated_at {} is before created_at {}",
                self.updated_at, self.created_at
            )));
        }
        for (m, message) in self.transcript.iter().enumerate() {
            check_role_alias(m, message)?;
            check_block_roles(m, message)?;
        }
        self.totals = UsageTotals::checked_sum(&self.usage)
            .ok_or_else(|| Error::inconsistent("usage totals overflow a 64-bit counter"))?;
        let pairs = pair_tool_calls(&self.transcript)?;
        if pairs.len() != self.tool_calls.len() {
            return Err(Error::inconsistent(format!(
                "the transcript has {} tool calls but there are {} tool-call records",
                pairs.len(),
                self.tool_calls.len()
            )));
        }
        for (pair, record) in pairs.iter().zip(self.tool_calls.iter()) {
            if record.call_id != pair.call.id
                || record.tool_name != pair.call.name
                || record.call_at != pair.call_at
                || record.result_at != pair.result_at
            {
                return Err(Error::inconsistent(format!(
                    "tool-call record for {:?} disagrees with the transcript, which has call {:?} ({}) at {:?} answered at {:?}",
                    record.call_id, pair.call.id, pair.call.name, pair.call_at, pair.result_at
                )));
            }
            if record.status.is_error() != pair.result.is_error {
                return Err(Error::inconsistent(format!(
                    "tool-call record for {:?} has status {:?} but its result has is_error = {}",
                    record.call_id, record.status, pair.result.is_error
                )));
            }
        }
        Ok(())
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
            metadata_too_deep: parts.metadata_too_deep,
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
}

/// The header as this crate's encoder writes it: `{"schema_version":V,"id":"ID",
/// "revision":R,"created_at":"T",` with no whitespace. `None` for any other form.
fn canonical_header(bytes: &[u8]) -> Option<(u64, SnapshotHeader)> {
    let rest = bytes.strip_prefix(b"{\"schema_version\":")?;
    let (version, rest) = leading_u64(rest)?;
    let rest = rest.strip_prefix(b",\"id\":\"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let id = SessionId::parse(std::str::from_utf8(&rest[..end]).ok()?).ok()?;
    let rest = rest[end..].strip_prefix(b"\",\"revision\":")?;
    let (revision, rest) = leading_u64(rest)?;
    let rest = rest.strip_prefix(b",\"created_at\":\"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let created_at = DateTime::parse_from_rfc3339(std::str::from_utf8(&rest[..end]).ok()?)
        .ok()?
        .with_timezone(&Utc);
    rest[end..].starts_with(b"\",").then_some((
        version,
        SnapshotHeader {
            id,
            revision: Revision::from_u64(revision),
            created_at,
        },
    ))
}

/// A JSON unsigned integer at the start of `bytes` (no leading zeros, fits in 64 bits) and
/// the bytes after it.
fn leading_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || (digits > 1 && bytes[0] == b'0') {
        return None;
    }
    let value = std::str::from_utf8(&bytes[..digits]).ok()?.parse().ok()?;
    Some((value, &bytes[digits..]))
}

/// Decodes `bytes` as `T`, checking the schema version (read by `version`) first: a newer
/// schema may add fields this release does not know, and the right message for it is
/// "upgrade", not "unknown field", also when the rest does not decode.
///
/// An older document that the current decoder read is accepted as it is when every step
/// since its version only adds fields ([`migrate::only_adds_fields_since`]) and
/// `adds_nothing` says none of them is present: that is exactly what upgrading it would
/// give, without parsing it twice more (which made loading a version 1 file 6 times
/// slower). Any other older document is upgraded through the steps.
fn decode_versioned<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    version: impl Fn(&T) -> u64,
    adds_nothing: impl Fn(&T) -> bool,
) -> Result<T> {
    // The error of decoding the bytes directly, kept for an older version: it says where.
    let mut direct_error = None;
    let found = match serde_json::from_slice::<ObjectOnly<T>>(bytes) {
        Ok(ObjectOnly(decoded)) if version(&decoded) == u64::from(SCHEMA_VERSION) => {
            return Ok(decoded)
        }
        Ok(ObjectOnly(decoded)) => {
            let found = version(&decoded);
            if is_supported(found)
                && migrate::only_adds_fields_since(found)
                && adds_nothing(&decoded)
            {
                return Ok(decoded);
            }
            found
        }
        Err(source) => match serde_json::from_slice(bytes) {
            Ok(VersionProbe {
                schema_version: Some(found),
            }) if found != u64::from(SCHEMA_VERSION) => {
                direct_error = Some(source);
                found
            }
            _ => {
                return Err(Error::Malformed {
                    location: Location::Bytes,
                    source,
                })
            }
        },
    };
    if !is_supported(found) {
        return Err(unsupported(found));
    }
    // An older schema: decoded (refusing duplicate keys, as the typed decoder does),
    // upgraded one version at a time, and then decoded as the current one.
    let malformed = |source| Error::Malformed {
        location: Location::Bytes,
        source,
    };
    let ObjectOnly(StrictValue(document)) = serde_json::from_slice(bytes).map_err(malformed)?;
    let upgraded = migrate::upgrade(document, found).map_err(malformed)?;
    T::deserialize(upgraded).map_err(|upgraded_error| {
        // An error found in the upgraded document has no position. If decoding the bytes
        // directly failed the same way (same message, plus "at line L column C"), the
        // problem is in the bytes as written: report it with its position.
        let same = direct_error
            .take()
            .filter(|direct| direct.to_string().starts_with(&upgraded_error.to_string()));
        malformed(same.unwrap_or(upgraded_error))
    })
}

/// Whether this release reads schema version `version`.
fn is_supported(version: u64) -> bool {
    (u64::from(OLDEST_SCHEMA_VERSION)..=u64::from(SCHEMA_VERSION)).contains(&version)
}

fn unsupported(found: u64) -> Error {
    Error::UnsupportedSchemaVersion {
        location: Location::Bytes,
        found,
        oldest: OLDEST_SCHEMA_VERSION,
        supported: SCHEMA_VERSION,
    }
}

/// Refuses a time of session `id` later than this machine's clock allows
/// ([`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE)).
fn check_not_in_the_future(
    id: &SessionId,
    field: &str,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<()> {
    if clock::is_in_the_future(at, now) {
        return Err(Error::InvalidArgument {
            reason: format!(
                "session {id}: {field} {at} is later than this machine's clock ({now}) allows; a time in the future would keep the session first in every listing, so correct it (or the clock)"
            ),
        });
    }
    Ok(())
}

/// Refuses messages (numbered from `first`) or metadata that nest deeper than a stored
/// session can hold ([`Error::TooDeep`]), measured without recursion.
pub(crate) fn check_depths(
    id: &SessionId,
    first: usize,
    messages: &[Message],
    metadata: Option<&Map<String, Value>>,
) -> Result<()> {
    for (i, message) in messages.iter().enumerate() {
        let depth = message_depth(message);
        if depth > json::MAX_MESSAGE_DEPTH {
            return Err(Error::TooDeep {
                id: id.clone(),
                part: format!("message {}", first + i),
                depth,
                limit: json::MAX_MESSAGE_DEPTH,
            });
        }
    }
    if let Some(metadata) = metadata {
        check_metadata_depth(id, metadata)?;
    }
    Ok(())
}

/// Refuses metadata that nests deeper than a stored session can hold.
pub(crate) fn check_metadata_depth(id: &SessionId, metadata: &Map<String, Value>) -> Result<()> {
    let depth = json::map_depth(metadata);
    if depth > json::MAX_METADATA_DEPTH {
        return Err(Error::TooDeep {
            id: id.clone(),
            part: "metadata".to_owned(),
            depth,
            limit: json::MAX_METADATA_DEPTH,
        });
    }
    Ok(())
}

/// Refuses a role alias on message `m` other than the one a codec records ("developer" on
/// a system message): any other would change the role a provider is sent.
fn check_role_alias(m: usize, message: &Message) -> Result<()> {
    match message.wire.role {
        Some(alias) if message.role != Role::System => Err(Error::inconsistent(format!(
            "message {m} has role {:?} with the role alias {:?}; only a system message may carry the alias \"developer\"",
            message.role,
            alias.as_str()
        ))),
        _ => Ok(()),
    }
}

/// Refuses tool blocks in messages of a role that no provider accepts them in: a tool call
/// is made by the model (an assistant message), and a result comes back in a tool message
/// (OpenAI) or a user message (Anthropic). The session loop never makes anything else.
fn check_block_roles(m: usize, message: &Message) -> Result<()> {
    for (b, block) in message.content.iter().enumerate() {
        let refused = match block {
            ContentBlock::ToolCall(call) if message.role != Role::Assistant => {
                Some(("tool call", call.id.as_str(), "assistant"))
            }
            ContentBlock::ToolResult(result)
                if !matches!(message.role, Role::Tool | Role::User) =>
            {
                Some(("tool result", result.call_id.as_str(), "tool or user"))
            }
            _ => None,
        };
        if let Some((what, id, allowed)) = refused {
            return Err(Error::inconsistent(format!(
                "message {m} has role {:?} but block {b} is a {what} ({id:?}), which only {allowed} messages may carry",
                message.role
            )));
        }
    }
    Ok(())
}

/// `text` cut to `max` characters, with an ellipsis if anything was cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

fn shift(at: BlockPosition, messages: usize) -> BlockPosition {
    BlockPosition {
        message: at.message + messages,
        block: at.block,
    }
}

fn block_at(transcript: &[Message], at: BlockPosition) -> Option<&ContentBlock> {
    transcript.get(at.message)?.content.get(at.block)
}

/// A tool call and its result, found by walking the transcript.
struct Pair<'a> {
    call: &'a ToolCall,
    call_at: BlockPosition,
    result: &'a ToolResult,
    result_at: BlockPosition,
}

/// Pairs every tool call with its result, in call order.
///
/// # Errors
///
/// [`Error::Inconsistent`] for a call id reused while an earlier call with that id is
/// unanswered, a result for an unknown or already answered call, a result before its call,
/// or a call without a result.
///
/// Ids may repeat once the earlier call is answered: some OpenAI-compatible servers number
/// calls per step (`call_0`, `call_1`, ...), and a result always answers the latest call
/// with its id.
fn pair_tool_calls(transcript: &[Message]) -> Result<Vec<Pair<'_>>> {
    let mut calls: Vec<(&ToolCall, BlockPosition)> = Vec::new();
    // The latest call with each id.
    let mut index_of: HashMap<&str, usize> = HashMap::new();
    let mut results: Vec<Option<(&ToolResult, BlockPosition)>> = Vec::new();
    for (m, message) in transcript.iter().enumerate() {
        for (b, block) in message.content.iter().enumerate() {
            let at = BlockPosition {
                message: m,
                block: b,
            };
            match block {
                ContentBlock::ToolCall(call) => {
                    if let Some(earlier) = index_of.insert(&call.id, calls.len()) {
                        if results[earlier].is_none() {
                            return Err(Error::inconsistent(format!(
                                "tool call id {:?} is used again at message {m} while the earlier call with that id has no result",
                                call.id
                            )));
                        }
                    }
                    calls.push((call, at));
                    results.push(None);
                }
                ContentBlock::ToolResult(result) => {
                    let Some(&i) = index_of.get(result.call_id.as_str()) else {
                        return Err(Error::inconsistent(format!(
                            "tool result at message {m} answers {:?}, which no earlier tool call has",
                            result.call_id
                        )));
                    };
                    if results[i].is_some() {
                        return Err(Error::inconsistent(format!(
                            "tool call {:?} has a second result at message {m}",
                            result.call_id
                        )));
                    }
                    results[i] = Some((result, at));
                }
                _ => {}
            }
        }
    }
    calls
        .into_iter()
        .zip(results)
        .map(|((call, call_at), result)| match result {
            Some((result, result_at)) => Ok(Pair {
                call,
                call_at,
                result,
                result_at,
            }),
            None => Err(Error::inconsistent(format!(
                "tool call {:?} ({}) at message {} has no result",
                call.id, call.name, call_at.message
            ))),
        })
        .collect()
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
    pub fn build(self) -> Result<SessionSnapshot> {
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
            metadata_too_deep: None,
        };
        let mut snapshot = snapshot;
        snapshot.validate()?;
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{ToolCall, ToolResult};
    use serde_json::json;

    fn id() -> SessionId {
        SessionId::parse("t").unwrap()
    }

    fn call(id: &str) -> Message {
        Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            id,
            "f",
            json!({}),
        ))])
    }

    #[test]
    fn dangling_and_orphan_tool_blocks_are_refused() {
        let dangling = SessionSnapshot::builder(id(), "m")
            .transcript(vec![Message::user("x"), call("c1")])
            .build()
            .unwrap_err();
        assert!(
            dangling
                .to_string()
                .contains("\"c1\" (f) at message 1 has no result"),
            "{dangling}"
        );

        let orphan = SessionSnapshot::builder(id(), "m")
            .transcript(vec![Message::tool_result(ToolResult::new("zz", "1"))])
            .build()
            .unwrap_err();
        assert!(
            orphan.to_string().contains("no earlier tool call"),
            "{orphan}"
        );

        let twice = SessionSnapshot::builder(id(), "m")
            .transcript(vec![
                call("c1"),
                Message::tool_result(ToolResult::new("c1", "1")),
                Message::tool_result(ToolResult::new("c1", "2")),
            ])
            .build()
            .unwrap_err();
        assert!(twice.to_string().contains("second result"), "{twice}");

        let dup = SessionSnapshot::builder(id(), "m")
            .transcript(vec![call("c1"), call("c1")])
            .build()
            .unwrap_err();
        assert!(dup.to_string().contains("used again"), "{dup}");
        let reused_after_answer = SessionSnapshot::builder(id(), "m")
            .transcript(vec![
                call("c1"),
                Message::tool_result(ToolResult::new("c1", "1")),
                call("c1"),
                Message::tool_result(ToolResult::new("c1", "2")),
            ])
            .build()
            .unwrap();
        let records = reused_after_answer.tool_calls();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].call_at.message, 2);
        assert_eq!(records[1].result_at.message, 3);
    }

    #[test]
    fn records_must_agree_with_transcript() {
        let snapshot = SessionSnapshot::builder(id(), "m")
            .transcript(vec![
                call("c1"),
                Message::tool_result(ToolResult::error("c1", "x")),
            ])
            .build()
            .unwrap();
        assert_eq!(snapshot.tool_calls()[0].status, ToolCallStatus::Error);
        let mut value: Value = serde_json::from_slice(&snapshot.to_json().unwrap()).unwrap();
        value["tool_calls"][0]["status"] = json!("ok");
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("has status Ok"), "{err}");

        value["tool_calls"][0]["status"] = json!("error");
        value["tool_calls"][0]["tool_name"] = json!("g");
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("disagrees"), "{err}");

        value["tool_calls"] = json!([]);
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(
            err.to_string().contains("1 tool calls but there are 0"),
            "{err}"
        );
    }

    #[test]
    fn a_role_alias_other_than_developer_on_a_system_message_is_refused() {
        let snapshot = SessionSnapshot::builder(id(), "m")
            .transcript(vec![Message::user("hi")])
            .build()
            .unwrap();
        let mut value: Value = serde_json::from_slice(&snapshot.to_json().unwrap()).unwrap();
        // An alias no codec records is refused as it is decoded (the alias is one byte in
        // memory, so an unknown one cannot be held until validation).
        value["transcript"][0]["wire"] = json!({"role": "system"});
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert!(
            source.is_some_and(|s| s.contains("role alias \"system\"")),
            "{err:?}"
        );
        // "developer" on a message that is not a system message is inconsistent.
        value["transcript"][0]["wire"] = json!({"role": "developer"});
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(
            err.to_string().contains("role alias \"developer\""),
            "{err}"
        );
        value["transcript"][0]["role"] = json!("system");
        SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap();
    }

    #[test]
    fn encoding_in_parts_and_on_threads_writes_the_bytes_of_one_encoding() {
        for n in [0, 1, PARALLEL_MESSAGES - 1, PARALLEL_MESSAGES, 1001] {
            let mut transcript = Vec::new();
            for i in 0..n / 3 {
                transcript.push(Message::user(format!("q{i} \"quoted\" \u{e9}")));
                transcript.push(call(&format!("c{i}")));
                transcript.push(Message::tool_result(ToolResult::new(
                    format!("c{i}"),
                    "{\"ok\":[1,2,{\"x\":null}]}",
                )));
            }
            let snapshot = SessionSnapshot::builder(id(), "m")
                .metadata_entry("nested", json!({"a": [[{"b": 1.5}]]}))
                .transcript(transcript)
                .usage(vec![Usage::new("m").with_tokens(3, 4)])
                .build()
                .unwrap();
            let revision = Revision::from_u64(7);
            let whole = serde_json::to_vec(&Encoded {
                schema_version: SCHEMA_VERSION,
                id: &snapshot.id,
                revision,
                created_at: &snapshot.created_at,
                updated_at: &snapshot.updated_at,
                options: &snapshot.options,
                metadata: &snapshot.metadata,
                lineage: snapshot.lineage.as_ref(),
                transcript: &snapshot.transcript,
                tool_calls: &snapshot.tool_calls,
                usage: &snapshot.usage,
            })
            .unwrap();
            let parts = snapshot.to_json_with_revision(revision).unwrap();
            assert_eq!(
                String::from_utf8(parts).unwrap(),
                String::from_utf8(whole.clone()).unwrap(),
                "{n} messages"
            );
        }
    }

    /// Deep enough that the whole document passes the limit.
    const MAX_JSON_DEPTH_FOR_TEST: usize = json::MAX_JSON_DEPTH;

    #[test]
    fn too_deep_is_found_in_any_chunk_of_a_long_transcript() {
        let mut deep = json!(1);
        for _ in 0..MAX_JSON_DEPTH_FOR_TEST {
            deep = json!([deep]);
        }
        let mut transcript = Vec::new();
        for i in 0..PARALLEL_MESSAGES {
            transcript.push(Message::user(format!("q{i}")));
        }
        let deep_call = Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "deep", "f", deep,
        ))]);
        let answer = Message::tool_result(ToolResult::new("deep", "ok"));
        // The builder refuses it (so no snapshot ever holds it); the encoder's own check,
        // which keeps the promise should an entry check be missed, is tested by putting it
        // in behind the builder's back.
        let mut refused = transcript.clone();
        refused.extend([deep_call.clone(), answer.clone()]);
        assert!(matches!(
            SessionSnapshot::builder(id(), "m")
                .transcript(refused)
                .build(),
            Err(Error::TooDeep { .. })
        ));
        let mut snapshot = SessionSnapshot::builder(id(), "m")
            .transcript(transcript)
            .build()
            .unwrap();
        Arc::make_mut(&mut snapshot.transcript).extend([deep_call, answer]);
        let whole = serde_json::to_vec(&Encoded {
            schema_version: SCHEMA_VERSION,
            id: &snapshot.id,
            revision: Revision::NEW,
            created_at: &snapshot.created_at,
            updated_at: &snapshot.updated_at,
            options: &snapshot.options,
            metadata: &snapshot.metadata,
            lineage: snapshot.lineage.as_ref(),
            transcript: &snapshot.transcript,
            tool_calls: &snapshot.tool_calls,
            usage: &snapshot.usage,
        })
        .unwrap();
        match snapshot.to_json() {
            Err(Error::TooDeep { depth, .. }) => {
                assert_eq!(depth, json::nesting_depth(&whole));
            }
            other => panic!("expected TooDeep, got {other:?}"),
        }
    }

    #[test]
    fn the_canonical_header_is_read_without_decoding_the_rest() {
        let snapshot = SessionSnapshot::builder(id(), "m")
            .build()
            .unwrap()
            .with_revision(Revision::from_u64(41));
        let expected = SnapshotHeader {
            id: id(),
            revision: Revision::from_u64(41),
            created_at: snapshot.created_at(),
        };
        let bytes = snapshot.to_json().unwrap();
        assert_eq!(
            canonical_header(&bytes),
            Some((u64::from(SCHEMA_VERSION), expected.clone()))
        );
        // The head of the file is enough.
        assert_eq!(
            SessionSnapshot::peek_header(&bytes[..120], false).unwrap(),
            Some(expected.clone())
        );
        // The fast path never answers for another form; the JSON path then does, but only
        // for a whole document.
        let pretty =
            serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&bytes).unwrap()).unwrap();
        assert_eq!(canonical_header(&pretty), None);
        assert_eq!(SessionSnapshot::peek_header(&pretty, false).unwrap(), None);
        assert_eq!(
            SessionSnapshot::peek_header(&pretty, true).unwrap(),
            Some(expected)
        );
        for odd in [
            &br#"{"schema_version":01,"id":"t","revision":1,"created_at":"2026-01-01T00:00:00Z","#[..],
            br#"{"schema_version":1,"id":"T","revision":1,"created_at":"2026-01-01T00:00:00Z","#,
            br#"{"schema_version":1,"id":"t","revision":99999999999999999999,"created_at":"2026-01-01T00:00:00Z","#,
            br#"{"schema_version":1,"id":"t","revision":1}"#,
            br#"{"schema_version":1,"id":"t","revision":1,"created_at":"yesterday","#,
            br#"{"schema_version":1,"id":"t","revision":1,"created_at":"2026-01-01T00:00:00Z"}"#,
        ] {
            assert_eq!(
                canonical_header(odd),
                None,
                "{}",
                String::from_utf8_lossy(odd)
            );
        }
        let newer = br#"{"schema_version":3,"id":"t","revision":1,"created_at":"x"}"#;
        assert!(matches!(
            SessionSnapshot::peek_header(newer, true),
            Err(Error::UnsupportedSchemaVersion { found: 3, .. })
        ));
        // An older version's header is read the same way: a store keeps bases written by
        // older releases and appends to them.
        let older =
            br#"{"schema_version":1,"id":"t","revision":1,"created_at":"2026-01-01T00:00:00Z","#;
        assert!(SessionSnapshot::peek_header(older, false)
            .unwrap()
            .is_some());
    }

    #[test]
    fn versions_are_checked_before_fields() {
        let snapshot = SessionSnapshot::builder(id(), "m").build().unwrap();
        let mut value: Value = serde_json::from_slice(&snapshot.to_json().unwrap()).unwrap();
        value["schema_version"] = json!(3);
        value["new_field_of_v3"] = json!(true);
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedSchemaVersion { found: 3, .. }),
            "{err}"
        );

        // An unknown field is refused in the current version and, through the migration
        // path, in an older one.
        for version in [SCHEMA_VERSION, OLDEST_SCHEMA_VERSION] {
            value["schema_version"] = json!(version);
            let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
            assert!(matches!(err, Error::Malformed { .. }), "{version}: {err}");
        }
    }

    #[test]
    fn title_prefers_metadata_then_first_user_line() {
        let long = "x".repeat(200);
        let s = SessionSnapshot::builder(id(), "m")
            .transcript(vec![
                Message::system("sys"),
                Message::user(format!("{long}\nsecond")),
            ])
            .build()
            .unwrap();
        assert_eq!(s.title().unwrap().chars().count(), TITLE_MAX_CHARS + 1);
        let s = SessionSnapshot::builder(id(), "m")
            .metadata_entry("title", json!("Named"))
            .transcript(vec![Message::user("hi")])
            .build()
            .unwrap();
        assert_eq!(s.title().as_deref(), Some("Named"));
        let empty = SessionSnapshot::builder(id(), "m").build().unwrap();
        assert_eq!(empty.title(), None);
    }
}
