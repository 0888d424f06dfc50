//! `SessionSnapshot`: the persisted state of a session, its JSON form, and its validation.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Location, Result};
use crate::id::SessionId;
use crate::json::{self, strict, ObjectOnly};
use crate::redact::{self, Redactor};
use crate::store::Revision;
use crate::transcript::{ContentBlock, Message, Role, ToolCall, ToolResult};
use crate::usage::{Usage, UsageTotals};

/// The snapshot schema version this release writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

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
///         Message::assistant(vec![ContentBlock::ToolCall(ToolCall::new("c1", "calc", json!("2+2")))]),
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
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSnapshot {
    id: SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    options: PersistedOptions,
    metadata: Map<String, Value>,
    transcript: Vec<Message>,
    tool_calls: Vec<ToolCallRecord>,
    usage: Vec<Usage>,
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
    #[serde(deserialize_with = "strict::objects")]
    transcript: Vec<Message>,
    #[serde(deserialize_with = "strict::objects")]
    tool_calls: Vec<ToolCallRecord>,
    #[serde(deserialize_with = "strict::objects")]
    usage: Vec<Usage>,
}

/// The encoded JSON form, borrowing from a snapshot so a store can write it under a new
/// revision without copying the transcript.
#[derive(Serialize)]
struct Encoded<'a> {
    schema_version: u32,
    id: &'a SessionId,
    revision: Revision,
    created_at: &'a DateTime<Utc>,
    updated_at: &'a DateTime<Utc>,
    options: &'a PersistedOptions,
    metadata: &'a Map<String, Value>,
    transcript: &'a [Message],
    tool_calls: &'a [ToolCallRecord],
    usage: &'a [Usage],
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
            transcript: Vec::new(),
            statuses: HashMap::new(),
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
        let decoded: Decoded = match serde_json::from_slice(bytes) {
            Ok(ObjectOnly(decoded)) => decoded,
            Err(source) => {
                // A newer schema may add fields this release does not know; say "upgrade"
                // rather than "unknown field" when the version tells us that is the cause.
                if let Ok(VersionProbe {
                    schema_version: Some(found),
                }) = serde_json::from_slice(bytes)
                {
                    if found != u64::from(SCHEMA_VERSION) {
                        return Err(unsupported(found));
                    }
                }
                return Err(Error::Malformed {
                    location: Location::Bytes,
                    source,
                });
            }
        };
        if decoded.schema_version != u64::from(SCHEMA_VERSION) {
            return Err(unsupported(decoded.schema_version));
        }
        let snapshot = SessionSnapshot {
            id: decoded.id,
            revision: decoded.revision,
            created_at: decoded.created_at,
            updated_at: decoded.updated_at,
            options: decoded.options,
            metadata: decoded.metadata,
            transcript: decoded.transcript,
            tool_calls: decoded.tool_calls,
            usage: decoded.usage,
        };
        snapshot.validate()?;
        Ok(snapshot)
    }

    /// Reads only the schema version, id and revision of an encoded snapshot, for stores
    /// deciding a compare-and-swap. A snapshot this crate wrote starts with exactly those
    /// fields, which are read from its first bytes without scanning the rest (on a 10 MB
    /// snapshot the scan was about as costly as encoding the new one); anything else is
    /// decoded as JSON, skipping the other fields.
    pub(crate) fn peek_revision(bytes: &[u8]) -> Result<(SessionId, Revision)> {
        if let Some((version, id, revision)) = canonical_header(bytes) {
            if version != u64::from(SCHEMA_VERSION) {
                return Err(unsupported(version));
            }
            return Ok((id, revision));
        }
        let ObjectOnly(header): ObjectOnly<Header> =
            serde_json::from_slice(bytes).map_err(|source| Error::Malformed {
                location: Location::Bytes,
                source,
            })?;
        if header.schema_version != u64::from(SCHEMA_VERSION) {
            return Err(unsupported(header.schema_version));
        }
        Ok((header.id, header.revision))
    }

    /// Encodes the snapshot as compact JSON.
    ///
    /// # Errors
    ///
    /// [`Error::TooDeep`] if metadata, tool arguments or provider blocks nest so deeply
    /// that the snapshot could not be decoded again (more than 127 levels in all).
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
        let encoded = Encoded {
            schema_version: SCHEMA_VERSION,
            id: &self.id,
            revision,
            created_at: &self.created_at,
            updated_at: &self.updated_at,
            options: &self.options,
            metadata: &self.metadata,
            transcript: &self.transcript,
            tool_calls: &self.tool_calls,
            usage: &self.usage,
        };
        let bytes = serde_json::to_vec(&encoded).map_err(|source| Error::Encode {
            id: self.id.clone(),
            source,
        })?;
        // Never write what could not be read back: the decoder has a nesting limit.
        let depth = json::nesting_depth(&bytes);
        if depth > json::MAX_JSON_DEPTH {
            return Err(Error::TooDeep {
                id: self.id.clone(),
                depth,
                limit: json::MAX_JSON_DEPTH,
            });
        }
        Ok(bytes)
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

    /// Sets the revision. Stores call this on the snapshots they return; see
    /// [`SessionStore`](crate::SessionStore).
    #[must_use]
    pub fn with_revision(mut self, revision: Revision) -> Self {
        self.revision = revision;
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

    /// Usage summed over all completions.
    #[must_use]
    pub fn totals(&self) -> UsageTotals {
        UsageTotals::sum(&self.usage)
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
        if let Some(prompt) = &mut self.options.system_prompt {
            redact::redact_string(redactor, prompt);
        }
        redact::redact_map(redactor, &mut self.metadata);
        for message in &mut self.transcript {
            redact::redact_message(redactor, message);
        }
    }

    /// A short title: the metadata's `"title"` string if set, otherwise the first line of
    /// the first user message (cut to 80 characters and an ellipsis), otherwise `None`.
    #[must_use]
    pub fn title(&self) -> Option<String> {
        if let Some(Value::String(title)) = self.metadata.get("title") {
            if !title.trim().is_empty() {
                return Some(title.trim().to_owned());
            }
        }
        let first_user = self
            .transcript
            .iter()
            .filter(|m| m.role == Role::User)
            .map(Message::text)
            .find(|t| !t.trim().is_empty())?;
        let line = first_user.trim().lines().next().unwrap_or_default().trim();
        let mut title: String = line.chars().take(TITLE_MAX_CHARS).collect();
        if line.chars().count() > TITLE_MAX_CHARS {
            title.push('…');
        }
        Some(title)
    }

    /// Checks every invariant described on the type.
    fn validate(&self) -> Result<()> {
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
            if let Some(alias) = &message.wire.role {
                // The only role alias a codec records; any other would change the role a
                // provider is sent.
                if alias != "developer" || message.role != Role::System {
                    return Err(Error::inconsistent(format!(
                        "message {m} has role {:?} with the role alias {alias:?}; only a system message may carry the alias \"developer\"",
                        message.role
                    )));
                }
            }
        }
        if UsageTotals::checked_sum(&self.usage).is_none() {
            return Err(Error::inconsistent(
                "usage totals overflow a 64-bit counter",
            ));
        }
        let pairs = pair_tool_calls(&self.transcript)?;
        if pairs.len() != self.tool_calls.len() {
            return Err(Error::inconsistent(format!(
                "the transcript has {} tool calls but there are {} tool-call records",
                pairs.len(),
                self.tool_calls.len()
            )));
        }
        for (pair, record) in pairs.iter().zip(&self.tool_calls) {
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
            transcript: parts.transcript,
            tool_calls: parts.tool_calls,
            usage: parts.usage,
        };
        debug_assert!(
            snapshot.validate().is_ok(),
            "an idle session produced an inconsistent snapshot: {:?}",
            snapshot.validate()
        );
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
            transcript: self.transcript,
            tool_calls: self.tool_calls,
            usage: self.usage,
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
    pub(crate) transcript: Vec<Message>,
    pub(crate) tool_calls: Vec<ToolCallRecord>,
    pub(crate) usage: Vec<Usage>,
}

/// The header as this crate's encoder writes it: `{"schema_version":V,"id":"ID",
/// "revision":R,"created_at":` with no whitespace. `None` for any other form.
fn canonical_header(bytes: &[u8]) -> Option<(u64, SessionId, Revision)> {
    let rest = bytes.strip_prefix(b"{\"schema_version\":")?;
    let (version, rest) = leading_u64(rest)?;
    let rest = rest.strip_prefix(b",\"id\":\"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let id = SessionId::parse(std::str::from_utf8(&rest[..end]).ok()?).ok()?;
    let rest = rest[end..].strip_prefix(b"\",\"revision\":")?;
    let (revision, rest) = leading_u64(rest)?;
    rest.starts_with(b",\"created_at\":")
        .then_some((version, id, Revision::from_u64(revision)))
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

fn unsupported(found: u64) -> Error {
    Error::UnsupportedSchemaVersion {
        location: Location::Bytes,
        found,
        supported: SCHEMA_VERSION,
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
    transcript: Vec<Message>,
    statuses: HashMap<String, ToolCallStatus>,
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

    /// Sets the transcript (default: empty).
    pub fn transcript(mut self, transcript: Vec<Message>) -> Self {
        self.transcript = transcript;
        self
    }

    /// Marks the call with `call_id` as interrupted rather than failed. Its result must
    /// have `is_error` set.
    pub fn interrupted(mut self, call_id: impl Into<String>) -> Self {
        self.statuses
            .insert(call_id.into(), ToolCallStatus::Interrupted);
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
    /// call, `max_turns` is zero, or timestamps or usage totals are out of range.
    pub fn build(self) -> Result<SessionSnapshot> {
        let tool_calls = pair_tool_calls(&self.transcript)?
            .into_iter()
            .map(|pair| {
                let status = match self.statuses.get(&pair.call.id) {
                    Some(status) => *status,
                    None if pair.result.is_error => ToolCallStatus::Error,
                    None => ToolCallStatus::Ok,
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
            transcript: self.transcript,
            tool_calls,
            usage: self.usage,
        };
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
        Message::assistant(vec![ContentBlock::ToolCall(ToolCall::new(
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
        value["transcript"][0]["wire"] = json!({"role": "system"});
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("role alias \"system\""), "{err}");
        value["transcript"][0]["role"] = json!("system");
        value["transcript"][0]["wire"] = json!({"role": "developer"});
        SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap();
    }

    #[test]
    fn the_canonical_header_is_read_without_decoding_the_rest() {
        let snapshot = SessionSnapshot::builder(id(), "m")
            .build()
            .unwrap()
            .with_revision(Revision::from_u64(41));
        let bytes = snapshot.to_json().unwrap();
        assert_eq!(
            canonical_header(&bytes),
            Some((1, id(), Revision::from_u64(41)))
        );
        assert_eq!(
            SessionSnapshot::peek_revision(&bytes).unwrap(),
            (id(), Revision::from_u64(41))
        );
        // The fast path never answers for another form; the JSON path then does.
        let pretty =
            serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&bytes).unwrap()).unwrap();
        assert_eq!(canonical_header(&pretty), None);
        assert_eq!(
            SessionSnapshot::peek_revision(&pretty).unwrap(),
            (id(), Revision::from_u64(41))
        );
        for odd in [
            &br#"{"schema_version":01,"id":"t","revision":1,"created_at":"#[..],
            br#"{"schema_version":1,"id":"T","revision":1,"created_at":"#,
            br#"{"schema_version":1,"id":"t","revision":99999999999999999999,"created_at":"#,
            br#"{"schema_version":1,"id":"t","revision":1}"#,
        ] {
            assert_eq!(
                canonical_header(odd),
                None,
                "{}",
                String::from_utf8_lossy(odd)
            );
        }
        let newer = br#"{"schema_version":2,"id":"t","revision":1,"created_at":"x"}"#;
        assert!(matches!(
            SessionSnapshot::peek_revision(newer),
            Err(Error::UnsupportedSchemaVersion { found: 2, .. })
        ));
    }

    #[test]
    fn versions_are_checked_before_fields() {
        let snapshot = SessionSnapshot::builder(id(), "m").build().unwrap();
        let mut value: Value = serde_json::from_slice(&snapshot.to_json().unwrap()).unwrap();
        value["schema_version"] = json!(2);
        value["new_field_of_v2"] = json!(true);
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedSchemaVersion { found: 2, .. }),
            "{err}"
        );

        value["schema_version"] = json!(1);
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{err}");
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
