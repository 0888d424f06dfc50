//! A snapshot's JSON form: encoding (the transcript split over threads when it is long),
//! decoding with the schema version checked first and older versions upgraded, and the
//! header fields a store reads without decoding the rest.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::upgrade;
use super::{
    HistoryStats, Lineage, PersistedOptions, SessionSnapshot, SharedPrefix, ToolCallRecord,
    OLDEST_SCHEMA_VERSION, SCHEMA_VERSION,
};
use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::json::{self, strict, Field, ObjectOnly, StrictValue};
use crate::transcript::Message;
use crate::usage::{Usage, UsageTotals};

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
    /// Only in a store's checkpoint of a fork that shares its parent's first messages.
    #[serde(default, deserialize_with = "optional_shared_prefix")]
    shared_prefix: Option<SharedPrefix>,
    #[serde(deserialize_with = "strict::objects")]
    transcript: Vec<Message>,
    #[serde(deserialize_with = "strict::objects")]
    tool_calls: Vec<ToolCallRecord>,
    #[serde(deserialize_with = "super::usage_list::usage_list")]
    usage: Vec<Usage>,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_prefix: Option<&'a SharedPrefix>,
}

fn optional_shared_prefix<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<SharedPrefix>, D::Error> {
    strict::object(d).map(Some)
}

/// Transcripts with fewer messages than this are encoded on the calling thread: below it
/// a thread costs more than it saves.
pub(super) const PARALLEL_MESSAGES: usize = 256;

/// Appends `messages` to `out` as a JSON array (the bytes of
/// `serde_json::to_vec(messages)`) and returns the deepest nesting in it, counting the
/// array itself. A long transcript is split between threads (at most 4, and no more than
/// the machine has cores): the first part is encoded on the calling thread straight into
/// `out`, the others into buffers of their own that are then appended, so most of the
/// bytes are written once.
fn encode_transcript_into(out: &mut Vec<u8>, messages: &[Message]) -> serde_json::Result<usize> {
    let threads = if messages.len() < PARALLEL_MESSAGES {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
    };
    if threads == 1 {
        return json::write_measuring_depth(out, messages);
    }
    let encode = |part: &[Message]| -> serde_json::Result<(Vec<u8>, usize)> {
        let mut bytes = Vec::with_capacity(part.len() * 1024);
        let depth = json::write_measuring_depth(&mut bytes, part)?;
        Ok((bytes, depth))
    };
    let parts: Vec<&[Message]> = messages.chunks(messages.len().div_ceil(threads)).collect();
    let (first, rest) = std::thread::scope(|scope| {
        let handles: Vec<_> = parts[1..]
            .iter()
            .map(|part| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || encode(part))
                    .ok()
            })
            .collect();
        let first = json::write_measuring_depth(out, parts[0]);
        let rest: Vec<serde_json::Result<(Vec<u8>, usize)>> = parts[1..]
            .iter()
            .zip(handles)
            .map(|(part, handle)| {
                // A thread that could not start (or panicked) is done here instead.
                handle
                    .and_then(|h| h.join().ok())
                    .unwrap_or_else(|| encode(part))
            })
            .collect();
        (first, rest)
    });
    let mut depth = first?;
    // Each part is an array of consecutive messages: their items continue the first's.
    out.pop(); // the first part's closing bracket
    for part in rest {
        let (bytes, part_depth) = part?;
        depth = depth.max(part_depth);
        out.push(b',');
        out.extend_from_slice(&bytes[1..bytes.len() - 1]);
    }
    out.push(b']');
    Ok(depth)
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
    /// Decodes and validates a snapshot from its JSON form.
    ///
    /// # Errors
    ///
    /// - [`Error::UnsupportedSchemaVersion`] if the snapshot claims another schema version;
    /// - [`Error::Malformed`] for invalid JSON, wrong types, missing or unknown fields,
    ///   duplicate keys, invalid ids, or nesting deeper than 127 levels;
    /// - [`Error::Inconsistent`] if the content contradicts itself (see the type docs), or
    ///   if it is a store's checkpoint of a fork that shares its first messages with its
    ///   parent (`shared_prefix`), which holds only part of the session: load that session
    ///   through its store.
    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        let mut snapshot = Self::decode_unvalidated(bytes)?;
        if snapshot.share.is_some() {
            return Err(Error::inconsistent(format!(
                "session {} is a store's checkpoint that shares its first messages with its parent session {}, so it does not hold the whole session; load it through its store",
                snapshot.id,
                snapshot
                    .lineage
                    .as_ref()
                    .map_or_else(|| "(none named)".to_owned(), |l| l.parent.to_string())
            )));
        }
        snapshot.validate()?;
        Ok(snapshot)
    }

    /// Decodes a snapshot without checking its invariants, for a store that applies
    /// journal records first and validates the result once.
    pub(crate) fn decode_unvalidated(bytes: &[u8]) -> Result<Self> {
        let decoded: Decoded = decode_versioned(
            bytes,
            |d: &Decoded| d.schema_version,
            // What the steps add since the document's version must be absent (`lineage`
            // not even null), so that decoding it directly gives what upgrading would.
            |d: &Decoded| {
                let since_2 =
                    d.shared_prefix.is_none() && !d.transcript.iter().any(Message::uses_schema_3);
                let since_1 =
                    d.lineage.is_absent() && !d.transcript.iter().any(Message::uses_schema_2);
                match d.schema_version {
                    2 => since_2,
                    _ => since_2 && since_1,
                }
            },
        )?;
        let lineage = decoded.lineage.into_option();
        if decoded.shared_prefix.is_some() && lineage.is_none() {
            return Err(Error::inconsistent(
                "the snapshot says it shares its first messages with its parent (`shared_prefix`) but names no parent (`lineage`)",
            ));
        }
        let mut snapshot = SessionSnapshot::from_decoded(
            decoded.id,
            decoded.revision,
            (decoded.created_at, decoded.updated_at),
            decoded.options,
            decoded.metadata,
            lineage,
            (decoded.transcript, decoded.tool_calls, decoded.usage),
        );
        snapshot.share = decoded.shared_prefix;
        Ok(snapshot)
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
            fence: None,
            metadata_too_deep: None,
            history: HistoryStats::default(),
            replaces_history: false,
            share: None,
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
        self.encode(revision, None)
    }

    /// The checkpoint a store writes for this snapshot, a fork whose first
    /// `lineage.fork_point` messages are its parent's history `shared`: the snapshot with
    /// those messages (and their tool-call records) left out and `shared_prefix` saying
    /// whose they are. Only a store that keeps the parent may write it.
    pub(crate) fn to_sharing_checkpoint(
        &self,
        revision: Revision,
        shared: SharedPrefix,
    ) -> Result<Vec<u8>> {
        let cut = self.lineage.as_ref().map_or(0, |l| l.fork_point);
        let mut own = self.clone();
        own.transcript = Arc::new(self.transcript.get(cut..).unwrap_or_default().to_vec());
        own.tool_calls = Arc::new(
            self.tool_calls
                .iter()
                .filter(|r| r.call_at.message >= cut)
                .cloned()
                .collect(),
        );
        own.encode(revision, Some(shared))
    }

    fn encode(&self, revision: Revision, shared_prefix: Option<SharedPrefix>) -> Result<Vec<u8>> {
        let failed = |source| Error::Encode {
            id: self.id.clone(),
            source,
        };
        self.check_metadata_kept()?;
        // Written part by part (the same bytes as one derived encoding), so the transcript,
        // most of the bytes, can be encoded on several threads. Room for about a kilobyte a
        // message: a longer transcript grows the buffer (which for a large one copies
        // nothing on Linux, where glibc's allocator remaps the pages instead).
        let mut out = Vec::with_capacity(4096 + self.transcript.len() * 1024);
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
                shared_prefix: shared_prefix.as_ref(),
            },
        )
        .map_err(failed)?;
        out.pop(); // the head's closing brace
        out.extend_from_slice(b",\"transcript\":");
        let transcript = encode_transcript_into(&mut out, &self.transcript).map_err(failed)?;
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
        let depth = head.max(1 + transcript.max(tool_calls).max(usage));
        if depth > json::MAX_JSON_DEPTH {
            return Err(self.too_deep("the snapshot", depth, json::MAX_JSON_DEPTH));
        }
        Ok(out)
    }

    /// Refuses a snapshot whose metadata was left out for nesting too deep (see the
    /// field's docs): none of its encodings may be stored.
    pub(crate) fn check_metadata_kept(&self) -> Result<()> {
        match self.metadata_too_deep {
            Some(depth) => Err(self.too_deep("metadata", depth, json::MAX_METADATA_DEPTH)),
            None => Ok(()),
        }
    }

    fn too_deep(&self, part: &str, depth: usize, limit: usize) -> Error {
        Error::TooDeep {
            id: self.id.clone(),
            part: part.to_owned(),
            depth,
            limit,
        }
    }
}

/// The header as this crate's encoder writes it: `{"schema_version":V,"id":"ID",
/// "revision":R,"created_at":"T",` with no whitespace. `None` for any other form.
pub(super) fn canonical_header(bytes: &[u8]) -> Option<(u64, SnapshotHeader)> {
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
/// since its version only adds fields ([`upgrade::only_adds_fields_since`]) and
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
                && upgrade::only_adds_fields_since(found)
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
    let upgraded = upgrade::upgrade(document, found).map_err(malformed)?;
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
