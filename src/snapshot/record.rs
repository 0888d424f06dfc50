//! The JSON form of a [`Change`]: one record of the journal that follows a base snapshot
//! (`docs/FORMAT.md`, "Journal"). Every store that appends changes instead of rewriting a
//! session stores these bytes: the file store framed in `<id>.journal`, the PostgreSQL
//! store one per row of its entries table.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Change, Counts, PersistedOptions, ToolCallRecord};
use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::json::{self, strict, ObjectOnly};
use crate::transcript::Message;
use crate::usage::Usage;

/// A record as written: borrows the change's parts.
#[derive(Serialize)]
struct EncodedRecord<'a> {
    revision: Revision,
    updated_at: &'a DateTime<Utc>,
    from: &'a Counts,
    messages: &'a [Message],
    tool_calls: &'a [ToolCallRecord],
    usage: &'a [Usage],
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<&'a PersistedOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a Map<String, Value>>,
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

/// The record of `change` to session `id`: one compact JSON object.
///
/// # Errors
///
/// [`Error::TooDeep`] if the record could not be read back, as for a snapshot.
pub(crate) fn encode_record_payload(id: &SessionId, change: &Change) -> Result<Vec<u8>> {
    let record = EncodedRecord {
        revision: change.revision,
        updated_at: &change.updated_at,
        from: &change.from,
        messages: &change.messages,
        tool_calls: &change.tool_calls,
        usage: &change.usage,
        options: change.options.as_ref(),
        metadata: change.metadata.as_ref(),
    };
    let mut payload = Vec::new();
    let depth =
        json::write_measuring_depth(&mut payload, &record).map_err(|source| Error::Encode {
            id: id.clone(),
            source,
        })?;
    if depth > json::MAX_JSON_DEPTH {
        return Err(Error::TooDeep {
            id: id.clone(),
            part: "the journal record".to_owned(),
            depth,
            limit: json::MAX_JSON_DEPTH,
        });
    }
    Ok(payload)
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
