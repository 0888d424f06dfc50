//! Journal records of journal format 1, written before the log (`docs/FORMAT.md`,
//! "Journal format 1"): each keeps the first `from` elements of the previous state and
//! appends. This release reads them (as log entries, [`entry_of_record`](super::entry))
//! and never writes them.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Counts, PersistedOptions, ToolCallRecord};
use crate::error::{Error, Location, Result};
use crate::id::Revision;
use crate::json::{strict, ObjectOnly};
use crate::transcript::Message;
use crate::usage::Usage;

/// A change from one stored state to the next: keep the first `from` elements, append the
/// rest, and replace options or metadata if given. A journal record of format 1 holds one.
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

/// A record as read, with the same strictness as a snapshot.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodedRecord {
    revision: Revision,
    updated_at: DateTime<Utc>,
    #[serde(deserialize_with = "strict::object")]
    from: Counts,
    #[serde(deserialize_with = "strict::objects")]
    messages: Vec<Message>,
    #[serde(deserialize_with = "strict::objects")]
    tool_calls: Vec<ToolCallRecord>,
    #[serde(deserialize_with = "strict::objects")]
    usage: Vec<Usage>,
    #[serde(default, deserialize_with = "optional_object")]
    options: Option<PersistedOptions>,
    #[serde(default, deserialize_with = "optional_map")]
    metadata: Option<Map<String, Value>>,
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

/// Decodes a record into the change it stores.
///
/// # Errors
///
/// [`Error::Malformed`] for anything but a well-formed record.
pub(crate) fn decode_record(payload: &[u8]) -> Result<Change> {
    let ObjectOnly(record): ObjectOnly<DecodedRecord> =
        serde_json::from_slice(payload).map_err(|source| Error::Malformed {
            location: Location::Bytes,
            source,
        })?;
    Ok(Change {
        revision: record.revision,
        updated_at: record.updated_at,
        from: record.from,
        messages: record.messages,
        tool_calls: record.tool_calls,
        usage: record.usage,
        options: record.options,
        metadata: record.metadata,
    })
}

/// The lengths after a change is applied to a state that has `from` of them kept.
pub(crate) fn counts_after(change: &Change) -> Counts {
    Counts {
        messages: change.from.messages + change.messages.len(),
        tool_calls: change.from.tool_calls + change.tool_calls.len(),
        usage: change.from.usage + change.usage.len(),
    }
}
