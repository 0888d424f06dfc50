//! One entry of a session's log: the change one save made, as every store appends it
//! (`docs/FORMAT.md`, "Log entries").
//!
//! An entry is two parts, each its own JSON object on its own line of one checksummed
//! frame: a small *head* (the revision, the kind of change, how the new view is made from
//! an earlier one, the usage added, new options or metadata, and the lengths after it)
//! and a *body* (the new messages and the tool-call records of the results among them).
//! A reader works out any revision's view from the heads alone, and decodes only the
//! bodies whose messages that view holds: a compacted session loads without parsing what
//! was compacted away. One frame, so an entry cut short by a crash is one torn frame.
//!
//! The view an entry makes, from the view of its *base* (the previous revision, or for a
//! restore the revision it goes back to):
//!
//! ```text
//! body.messages[..prepend]  ++  base_view[keep.0 .. keep.1]  ++  body.messages[prepend..]
//! ```
//!
//! A turn keeps the whole base view and appends; a rewind keeps a prefix and appends
//! nothing; a compaction prepends its summary and keeps a suffix; a restore names a base.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::record::Change;
use super::{Counts, PersistedOptions, ToolCallRecord};
use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::json::{self, strict, ObjectOnly};
use crate::transcript::Message;
use crate::usage::Usage;

/// What one revision of a session did: the kind of an entry of its log, as
/// [`RevisionInfo::kind`](crate::RevisionInfo::kind) reports it.
///
/// # Examples
///
/// ```
/// use agent_session::EntryKind;
///
/// assert_eq!(EntryKind::Rewind.as_str(), "rewind");
/// assert_eq!("compaction".parse::<EntryKind>()?, EntryKind::Compaction);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryKind {
    /// The oldest state the store keeps: the session's first save, or where a history
    /// retention policy cut its log (or where a release before the log started it). Not a
    /// change; never the kind of a stored entry.
    Checkpoint,
    /// A turn or a step: messages appended to the view, with the usage of the completions
    /// that produced them.
    Turn,
    /// The transcript changed otherwise: a snapshot saved over the stored session rather
    /// than extended from it.
    Edit,
    /// The view went back to an earlier point ([`RewindTo`](crate::RewindTo)); what was
    /// dropped stays in the history.
    Rewind,
    /// A prefix of the view was replaced by summary messages; what was replaced stays in
    /// the history.
    Compaction,
    /// The view, options and metadata of an earlier revision became the head again.
    Restore,
    /// Only the options changed.
    Options,
    /// Only the metadata changed.
    Metadata,
}

impl EntryKind {
    /// The name used in the stored form and in listings: `"turn"`, `"rewind"`, ...
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Checkpoint => "checkpoint",
            EntryKind::Turn => "turn",
            EntryKind::Edit => "edit",
            EntryKind::Rewind => "rewind",
            EntryKind::Compaction => "compaction",
            EntryKind::Restore => "restore",
            EntryKind::Options => "options",
            EntryKind::Metadata => "metadata",
        }
    }

    /// How strongly a kind describes a save that did several things: a save that rewound
    /// and then ran a turn is a rewind, one that compacted and then ran a turn a
    /// compaction.
    pub(crate) fn precedence(self) -> u8 {
        match self {
            EntryKind::Options | EntryKind::Metadata | EntryKind::Checkpoint => 0,
            EntryKind::Turn => 1,
            EntryKind::Edit => 2,
            EntryKind::Rewind => 3,
            EntryKind::Compaction => 4,
            EntryKind::Restore => 5,
        }
    }

    /// The stronger of two kinds ([`precedence`](Self::precedence)).
    pub(crate) fn stronger(self, other: EntryKind) -> EntryKind {
        if other.precedence() > self.precedence() {
            other
        } else {
            self
        }
    }
}

impl std::fmt::Display for EntryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EntryKind {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        serde_json::from_value(Value::String(text.to_owned())).map_err(|_| {
            Error::InvalidArgument {
                reason: format!(
                    "{text:?} is not a kind of change: checkpoint, turn, edit, rewind, compaction, restore, options or metadata"
                ),
            }
        })
    }
}

/// The head of an entry: everything but the new messages.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EntryHead {
    /// The revision the entry stores: the previous one plus one.
    pub(crate) revision: Revision,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) kind: EntryKind,
    /// The revision whose view, options and metadata the entry starts from; `None` for the
    /// previous revision.
    pub(crate) base: Option<Revision>,
    /// The range of the base view kept; `None` for all of it.
    pub(crate) keep: Option<(usize, usize)>,
    /// How many of the body's messages go before the kept range.
    pub(crate) prepend: usize,
    /// How many messages the body holds.
    pub(crate) messages: usize,
    /// How many usage entries of the previous revision are kept; `None` for all of them.
    pub(crate) usage_kept: Option<usize>,
    /// Usage entries appended.
    pub(crate) usage: Vec<Usage>,
    pub(crate) options: Option<PersistedOptions>,
    pub(crate) metadata: Option<Map<String, Value>>,
    /// The lengths after the entry: view, tool-call records and usage.
    pub(crate) state: Counts,
}

/// The body of an entry: its new messages, and the records of the tool calls whose
/// results are among them (positions in the view the entry makes).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct EntryBody {
    pub(crate) messages: Vec<Message>,
    pub(crate) tool_calls: Vec<ToolCallRecord>,
}

/// One change to a session's history, as a store appends it: its revision, what kind of
/// change it was, and everything needed to work out the session's state after it from
/// the states before it.
///
/// Stores of this crate write entries themselves. A custom
/// [`SessionStore`](crate::SessionStore) that keeps a log gets the entry a save adds from
/// [`SessionSnapshot::pending_entry`](crate::SessionSnapshot::pending_entry), keeps its
/// bytes ([`to_bytes`](Self::to_bytes)), and rebuilds any revision from a checkpoint and
/// the entries after it with [`SessionLog`](crate::SessionLog).
///
/// # Examples
///
/// ```
/// use agent_session::{ContentBlock, EntryKind, LogEntry, MemorySessionStore, Message,
///     SessionId, SessionSnapshot, SessionStore, Usage};
///
/// let store = MemorySessionStore::new();
/// let first = SessionSnapshot::builder(SessionId::parse("s")?, "m").build()?;
/// store.save(&first)?;
/// let next = store.load(first.id())?.with_appended(
///     vec![Message::user("hi"), Message::assistant(vec![ContentBlock::text("hello")])],
///     vec![Usage::new("m").with_tokens(3, 1)],
///     chrono::Utc::now(),
/// )?;
/// let entry = next.pending_entry().expect("extended from a stored revision");
/// assert_eq!(entry.kind(), EntryKind::Turn);
/// assert_eq!(entry.revision().as_u64(), 2);
/// assert_eq!(entry.messages().len(), 2);
/// let bytes = entry.to_bytes(next.id())?;
/// assert_eq!(LogEntry::from_bytes(&bytes)?, entry);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    pub(crate) head: EntryHead,
    pub(crate) body: EntryBody,
}

impl LogEntry {
    /// The revision this entry stores.
    #[must_use]
    pub fn revision(&self) -> Revision {
        self.head.revision
    }

    /// What kind of change it is.
    #[must_use]
    pub fn kind(&self) -> EntryKind {
        self.head.kind
    }

    /// When it was made: the session's `updated_at` at this revision.
    #[must_use]
    pub fn updated_at(&self) -> DateTime<Utc> {
        self.head.updated_at
    }

    /// The messages it adds (a turn's messages, a compaction's summary, ...).
    #[must_use]
    pub fn messages(&self) -> &[Message] {
        &self.body.messages
    }

    /// The usage it adds (the completions of a turn, a compaction's model call).
    #[must_use]
    pub fn usage(&self) -> &[Usage] {
        &self.head.usage
    }

    /// For a restore, the revision it goes back to.
    #[must_use]
    pub fn restored_revision(&self) -> Option<Revision> {
        self.head.base
    }

    /// The entry's stored form: one checksummed frame holding its head and its body, each
    /// a compact JSON object on a line of its own, exactly as the file store appends it to
    /// a journal (`docs/FORMAT.md`, "Log entries").
    ///
    /// # Errors
    ///
    /// [`Error::TooDeep`] if a part nests deeper than a reader accepts;
    /// [`Error::InvalidArgument`] if it is larger than a frame can say (4 GiB).
    pub fn to_bytes(&self, id: &SessionId) -> Result<Vec<u8>> {
        let mut payload = encode_head(id, &self.head)?;
        payload.push(b'\n');
        payload.extend(encode_body(id, &self.body)?);
        let mut out = Vec::with_capacity(payload.len() + FRAME_OVERHEAD);
        push_frame(&mut out, id, &payload)?;
        Ok(out)
    }

    /// Reads an entry from its stored form ([`to_bytes`](Self::to_bytes)).
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] or [`Error::Inconsistent`] if the bytes are not exactly one
    /// intact frame holding a head and a body, or a part does not decode with the
    /// strictness of a snapshot.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (payload, used) = intact_frame(bytes)
            .ok_or_else(|| Error::inconsistent("the entry's frame is damaged or cut short"))?;
        if used != bytes.len() {
            return Err(Error::inconsistent(
                "bytes follow the entry's frame; an entry is exactly one frame",
            ));
        }
        let (head, body) = split_entry(payload)?;
        let head = decode_head(head)?;
        let body = decode_body(body)?;
        check_body(&head, &body)?;
        Ok(LogEntry { head, body })
    }
}

/// The head and body lines of an entry's frame payload.
///
/// # Errors
///
/// [`Error::Inconsistent`] if the payload is not two lines.
pub(crate) fn split_entry(payload: &[u8]) -> Result<(&[u8], &[u8])> {
    let Some(newline) = memchr::memchr(b'\n', payload) else {
        return Err(Error::inconsistent(
            "a log entry is a head and a body on two lines, but this one has one line",
        ));
    };
    Ok((&payload[..newline], &payload[newline + 1..]))
}

/// `@` + 8 hex + space + 8 hex + newline.
pub(crate) const FRAME_HEADER_LEN: usize = 19;
/// The frame header and the newline after the payload.
pub(crate) const FRAME_OVERHEAD: usize = FRAME_HEADER_LEN + 1;

/// Appends `payload` to `out` as one frame: `@LLLLLLLL CCCCCCCC\n`, the payload, `\n`.
///
/// # Errors
///
/// [`Error::InvalidArgument`] if the payload is longer than a frame can say (4 GiB).
pub(crate) fn push_frame(out: &mut Vec<u8>, id: &SessionId, payload: &[u8]) -> Result<()> {
    let Ok(len) = u32::try_from(payload.len()) else {
        return Err(Error::InvalidArgument {
            reason: format!(
                "a change to session {id} is {} bytes, more than a journal frame can hold",
                payload.len()
            ),
        });
    };
    out.extend_from_slice(format!("@{len:08x} {:08x}\n", crc32fast::hash(payload)).as_bytes());
    out.extend_from_slice(payload);
    out.push(b'\n');
    Ok(())
}

/// Parses the frame header at the start of `bytes`: the payload length and checksum.
pub(crate) fn parse_frame_header(bytes: &[u8]) -> Option<(usize, u32)> {
    let header = bytes.get(..FRAME_HEADER_LEN)?;
    if header[0] != b'@' || header[9] != b' ' || header[18] != b'\n' {
        return None;
    }
    let hex = |digits: &[u8]| -> Option<u32> {
        if !digits
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let len = hex(&header[1..9])?;
    let crc = hex(&header[10..18])?;
    Some((usize::try_from(len).ok()?, crc))
}

/// The intact frame at the start of `bytes`: its payload and total length.
pub(crate) fn intact_frame(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let (len, crc) = parse_frame_header(bytes)?;
    let end = FRAME_HEADER_LEN.checked_add(len)?;
    let payload = bytes.get(FRAME_HEADER_LEN..end)?;
    if bytes.get(end) != Some(&b'\n') || crc32fast::hash(payload) != crc {
        return None;
    }
    Some((payload, end + 1))
}

/// A head as written: borrows the entry's parts, and leaves out what has its default.
#[derive(Serialize)]
struct EncodedHead<'a> {
    revision: Revision,
    updated_at: &'a DateTime<Utc>,
    kind: EntryKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    base: Option<Revision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep: Option<[usize; 2]>,
    #[serde(skip_serializing_if = "is_zero")]
    prepend: usize,
    messages: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage_kept: Option<usize>,
    usage: &'a [Usage],
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<&'a PersistedOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a Map<String, Value>>,
    state: &'a Counts,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A head as read, with the strictness of a snapshot.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodedHead {
    revision: Revision,
    updated_at: DateTime<Utc>,
    kind: EntryKind,
    #[serde(default)]
    base: Option<Revision>,
    #[serde(default)]
    keep: Option<[usize; 2]>,
    #[serde(default)]
    prepend: usize,
    messages: usize,
    #[serde(default)]
    usage_kept: Option<usize>,
    #[serde(deserialize_with = "strict::objects")]
    usage: Vec<Usage>,
    #[serde(default, deserialize_with = "optional_object")]
    options: Option<PersistedOptions>,
    #[serde(default, deserialize_with = "optional_map")]
    metadata: Option<Map<String, Value>>,
    #[serde(deserialize_with = "strict::object")]
    state: Counts,
}

fn optional_object<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<PersistedOptions>, D::Error> {
    strict::object(d).map(Some)
}

fn optional_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Map<String, Value>>, D::Error> {
    strict::map(d).map(Some)
}

#[derive(Serialize)]
struct EncodedBody<'a> {
    messages: &'a [Message],
    tool_calls: &'a [ToolCallRecord],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodedBody {
    #[serde(deserialize_with = "strict::objects")]
    messages: Vec<Message>,
    #[serde(deserialize_with = "strict::objects")]
    tool_calls: Vec<ToolCallRecord>,
}

fn encode_checked<T: Serialize>(id: &SessionId, part: &str, value: &T) -> Result<Vec<u8>> {
    let mut payload = Vec::new();
    let depth =
        json::write_measuring_depth(&mut payload, value).map_err(|source| Error::Encode {
            id: id.clone(),
            source,
        })?;
    if depth > json::MAX_JSON_DEPTH {
        return Err(Error::TooDeep {
            id: id.clone(),
            part: part.to_owned(),
            depth,
            limit: json::MAX_JSON_DEPTH,
        });
    }
    Ok(payload)
}

/// The head's JSON payload.
///
/// # Errors
///
/// [`Error::TooDeep`] if it could not be read back (metadata nested too deep).
pub(crate) fn encode_head(id: &SessionId, head: &EntryHead) -> Result<Vec<u8>> {
    encode_checked(
        id,
        "the log entry's head",
        &EncodedHead {
            revision: head.revision,
            updated_at: &head.updated_at,
            kind: head.kind,
            base: head.base,
            keep: head.keep.map(|(start, end)| [start, end]),
            prepend: head.prepend,
            messages: head.messages,
            usage_kept: head.usage_kept,
            usage: &head.usage,
            options: head.options.as_ref(),
            metadata: head.metadata.as_ref(),
            state: &head.state,
        },
    )
}

/// The body's JSON payload.
///
/// # Errors
///
/// [`Error::TooDeep`] if it could not be read back.
pub(crate) fn encode_body(id: &SessionId, body: &EntryBody) -> Result<Vec<u8>> {
    encode_checked(
        id,
        "the log entry's messages",
        &EncodedBody {
            messages: &body.messages,
            tool_calls: &body.tool_calls,
        },
    )
}

fn malformed(source: serde_json::Error) -> Error {
    Error::Malformed {
        location: Location::Bytes,
        source,
    }
}

/// Decodes a head payload, checking what can be checked without the views.
///
/// # Errors
///
/// [`Error::Malformed`] for anything but a well-formed head; [`Error::Inconsistent`] for
/// a head that contradicts itself.
pub(crate) fn decode_head(payload: &[u8]) -> Result<EntryHead> {
    let head = decode_any_head(payload)?;
    if head.kind == EntryKind::Checkpoint {
        return Err(Error::inconsistent(format!(
            "the log entry of revision {} says its kind is \"checkpoint\", which only the first entry of a journal may be",
            head.revision
        )));
    }
    Ok(head)
}

/// [`decode_head`], also of a checkpoint entry (`kind: "checkpoint"`): what the first
/// entry of a journal may be, holding the whole state the log starts from.
///
/// # Errors
///
/// As [`decode_head`].
pub(crate) fn decode_any_head(payload: &[u8]) -> Result<EntryHead> {
    let ObjectOnly(head): ObjectOnly<DecodedHead> =
        serde_json::from_slice(payload).map_err(malformed)?;
    let head = EntryHead {
        revision: head.revision,
        updated_at: head.updated_at,
        kind: head.kind,
        base: head.base,
        keep: head.keep.map(|[start, end]| (start, end)),
        prepend: head.prepend,
        messages: head.messages,
        usage_kept: head.usage_kept,
        usage: head.usage,
        options: head.options,
        metadata: head.metadata,
        state: head.state,
    };
    if head.prepend > head.messages {
        return Err(Error::inconsistent(format!(
            "the log entry of revision {} puts {} messages before the kept ones but has only {}",
            head.revision, head.prepend, head.messages
        )));
    }
    if let Some((start, end)) = head.keep {
        if start > end {
            return Err(Error::inconsistent(format!(
                "the log entry of revision {} keeps messages {start} to {end}, an empty range written backwards",
                head.revision
            )));
        }
    }
    if head.base.is_some_and(|base| base >= head.revision) {
        return Err(Error::inconsistent(format!(
            "the log entry of revision {} starts from a revision that is not earlier",
            head.revision
        )));
    }
    Ok(head)
}

/// Decodes a body payload.
///
/// # Errors
///
/// [`Error::Malformed`] for anything but a well-formed body.
pub(crate) fn decode_body(payload: &[u8]) -> Result<EntryBody> {
    let ObjectOnly(body): ObjectOnly<DecodedBody> =
        serde_json::from_slice(payload).map_err(malformed)?;
    Ok(EntryBody {
        messages: body.messages,
        tool_calls: body.tool_calls,
    })
}

/// Checks that a body is the one its head describes.
///
/// # Errors
///
/// [`Error::Inconsistent`] if the number of messages differs.
pub(crate) fn check_body(head: &EntryHead, body: &EntryBody) -> Result<()> {
    if body.messages.len() != head.messages {
        return Err(Error::inconsistent(format!(
            "the log entry of revision {} says it holds {} messages but its body has {}",
            head.revision,
            head.messages,
            body.messages.len()
        )));
    }
    Ok(())
}

/// The entry a journal record of journal format 1 (written before the log) stores: it
/// keeps the first `from` elements of the previous state (`before`) and appends. Its kind
/// is a turn when it keeps everything, a rewind when it appends nothing, an edit
/// otherwise (or an options or metadata change when that is all it does).
pub(crate) fn entry_of_record(change: Change, before: Counts) -> LogEntry {
    let appended_nothing =
        change.messages.is_empty() && change.tool_calls.is_empty() && change.usage.is_empty();
    let keeps_all = change.from == before;
    let kind = if keeps_all && appended_nothing {
        if change.options.is_some() {
            EntryKind::Options
        } else {
            EntryKind::Metadata
        }
    } else if keeps_all {
        EntryKind::Turn
    } else if change.messages.is_empty() && change.from.usage == before.usage {
        EntryKind::Rewind
    } else {
        EntryKind::Edit
    };
    let state = Counts {
        messages: change.from.messages + change.messages.len(),
        tool_calls: change.from.tool_calls + change.tool_calls.len(),
        usage: change.from.usage + change.usage.len(),
    };
    LogEntry {
        head: EntryHead {
            revision: change.revision,
            updated_at: change.updated_at,
            kind,
            base: None,
            keep: (change.from.messages != before.messages).then_some((0, change.from.messages)),
            prepend: 0,
            messages: change.messages.len(),
            usage_kept: (change.from.usage != before.usage).then_some(change.from.usage),
            usage: change.usage,
            options: change.options,
            metadata: change.metadata,
            state,
        },
        body: EntryBody {
            messages: change.messages,
            tool_calls: change.tool_calls,
        },
    }
}

impl LogEntry {
    /// The entry that makes revision `to`'s view, options and metadata the state again,
    /// appended to a head at `head` (its revision, last update, creation time and
    /// lengths): the next revision, stamped after the head, whose lengths are `to`'s view
    /// and records (`restored`) with the usage so far, which is never taken back. Written
    /// from the log's heads alone, so it costs the same however long the history.
    pub(crate) fn restoring(
        head: (Revision, DateTime<Utc>, DateTime<Utc>),
        current: Counts,
        to: Revision,
        restored: Counts,
    ) -> Self {
        let (revision, updated_at, created_at) = head;
        let state = Counts {
            messages: restored.messages,
            tool_calls: restored.tool_calls,
            usage: current.usage,
        };
        LogEntry {
            head: EntryHead {
                revision: revision.next(),
                updated_at: crate::clock::next_stamp(updated_at, created_at),
                kind: EntryKind::Restore,
                base: Some(to),
                keep: None,
                prepend: 0,
                messages: 0,
                usage_kept: None,
                usage: Vec::new(),
                options: None,
                metadata: None,
                state,
            },
            body: EntryBody::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{ContentBlock, Message};

    fn entry() -> LogEntry {
        LogEntry {
            head: EntryHead {
                revision: Revision::from_u64(4),
                updated_at: "2026-12-01T10:00:00Z".parse().unwrap(),
                kind: EntryKind::Compaction,
                base: None,
                keep: Some((6, 9)),
                prepend: 1,
                messages: 2,
                usage_kept: None,
                usage: vec![Usage::new("m").with_tokens(10, 2)],
                options: None,
                metadata: Some(Map::new()),
                state: Counts {
                    messages: 5,
                    tool_calls: 0,
                    usage: 3,
                },
            },
            body: EntryBody {
                messages: vec![
                    Message::user("summary"),
                    Message::assistant(vec![ContentBlock::text("next")]),
                ],
                tool_calls: Vec::new(),
            },
        }
    }

    #[test]
    fn an_entry_round_trips_through_its_two_frames() {
        let id = SessionId::parse("s").unwrap();
        let bytes = entry().to_bytes(&id).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.contains(r#""keep":[6,9],"prepend":1,"messages":2"#),
            "{text}"
        );
        assert!(
            !text.contains("usage_kept"),
            "defaults are left out: {text}"
        );
        assert_eq!(LogEntry::from_bytes(&bytes).unwrap(), entry());
    }

    #[test]
    fn damaged_or_inconsistent_entries_are_refused() {
        let id = SessionId::parse("s").unwrap();
        let bytes = entry().to_bytes(&id).unwrap();
        for cut in [0, 10, bytes.len() - 1] {
            assert!(LogEntry::from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[25] ^= 1;
        assert!(LogEntry::from_bytes(&flipped).is_err());
        let mut wrong = entry();
        wrong.head.messages = 3;
        let err = LogEntry::from_bytes(&wrong.to_bytes(&id).unwrap()).unwrap_err();
        assert!(err.to_string().contains("holds 3 messages"), "{err}");
        for (field, value) in [
            ("kind", "\"checkpoint\""),
            ("prepend", "7"),
            ("keep", "[3,2]"),
            ("base", "4"),
        ] {
            let head = String::from_utf8(encode_head(&id, &entry().head).unwrap()).unwrap();
            let mut value_of: serde_json::Map<String, Value> = serde_json::from_str(&head).unwrap();
            value_of.insert(field.into(), serde_json::from_str(value).unwrap());
            let payload = serde_json::to_vec(&value_of).unwrap();
            assert!(decode_head(&payload).is_err(), "{field} = {value}");
        }
        let unknown = br#"{"revision":1,"updated_at":"2026-12-01T10:00:00Z","kind":"turn","messages":0,"usage":[],"state":{"messages":0,"tool_calls":0,"usage":0},"colour":1}"#;
        assert!(decode_head(unknown).is_err());
    }

    #[test]
    fn kinds_parse_and_rank() {
        for kind in [
            EntryKind::Checkpoint,
            EntryKind::Turn,
            EntryKind::Edit,
            EntryKind::Rewind,
            EntryKind::Compaction,
            EntryKind::Restore,
            EntryKind::Options,
            EntryKind::Metadata,
        ] {
            assert_eq!(kind.as_str().parse::<EntryKind>().unwrap(), kind);
        }
        assert!("undo".parse::<EntryKind>().is_err());
        assert_eq!(
            EntryKind::Turn.stronger(EntryKind::Rewind),
            EntryKind::Rewind
        );
        assert_eq!(
            EntryKind::Restore.stronger(EntryKind::Turn),
            EntryKind::Restore
        );
    }
}
