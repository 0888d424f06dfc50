//! What the database stores (PostgreSQL, SQLite) keep in a session's row beside its log,
//! in the columns' own types: the listing summary as JSON, times as nanoseconds,
//! revisions and byte counts as 64-bit integers, a state's lengths as text. One
//! encoding, so both stores write and read the same summary bytes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::json::ObjectOnly;
use crate::snapshot::{Counts, HistoryStats, Lineage};
use crate::store::{IndexedMetadata, SessionSummary};
use crate::usage::Cost;

/// The listing fields of a session, stored as JSON in its row so that listings never
/// read a snapshot.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredSummary {
    id: SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    message_count: usize,
    model: String,
    cost: Cost,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lineage: Option<Lineage>,
    /// Absent in PostgreSQL rows written before tables version 3.
    #[serde(default)]
    history: Option<StoredStats>,
    /// The metadata keys the summary was made for (the store's indexed keys then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    indexed: Vec<String>,
    /// Their values, those the session has.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    metadata: BTreeMap<String, serde_json::Value>,
}

/// [`HistoryStats`] as a summary holds them.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredStats {
    oldest_revision: Revision,
    rewinds: u64,
    compactions: u64,
    restores: u64,
}

/// The summary column for `summary`, made for the `indexed` metadata keys.
///
/// # Errors
///
/// [`Error::Encode`] if it cannot be encoded.
pub(crate) fn summary_json(summary: &SessionSummary, indexed: &IndexedMetadata) -> Result<String> {
    let stored = StoredSummary {
        id: summary.id.clone(),
        revision: summary.revision,
        created_at: summary.created_at,
        updated_at: summary.updated_at,
        title: summary.title.clone(),
        message_count: summary.message_count,
        model: summary.model.clone(),
        cost: summary.cost,
        lineage: summary.lineage.clone(),
        history: Some(StoredStats {
            oldest_revision: summary.history.oldest_revision,
            rewinds: summary.history.rewinds,
            compactions: summary.history.compactions,
            restores: summary.history.restores,
        }),
        indexed: indexed.keys().to_vec(),
        metadata: summary.metadata.clone(),
    };
    serde_json::to_string(&stored).map_err(|source| Error::Encode {
        id: summary.id.clone(),
        source,
    })
}

/// The summary of the row stored under `key`, from its summary column, and whether it
/// was made for the `indexed` metadata keys (if not, its `metadata` is not to be
/// trusted). `location` names the row, made only for an error.
///
/// # Errors
///
/// A corrupt-kind error naming the row if the JSON does not decode or names another
/// session.
pub(crate) fn summary_of(
    key: &str,
    json: &str,
    archived: bool,
    indexed: &IndexedMetadata,
    location: impl Fn() -> Location,
) -> Result<(SessionSummary, bool)> {
    let ObjectOnly(stored): ObjectOnly<StoredSummary> =
        serde_json::from_str(json).map_err(|source| Error::Malformed {
            location: location(),
            source,
        })?;
    if stored.id.as_str() != key {
        return Err(Error::inconsistent(format!(
            "the summary names session {} but is stored under {key}",
            stored.id
        ))
        .at(&location()));
    }
    let current = stored.indexed == indexed.keys();
    let summary = SessionSummary {
        id: stored.id,
        revision: stored.revision,
        created_at: stored.created_at,
        updated_at: stored.updated_at,
        title: stored.title,
        message_count: stored.message_count,
        model: stored.model,
        cost: stored.cost,
        lineage: stored.lineage,
        archived,
        history: stored
            .history
            .map_or_else(HistoryStats::default, |h| HistoryStats {
                oldest_revision: h.oldest_revision,
                rewinds: h.rewinds,
                compactions: h.compactions,
                restores: h.restores,
            }),
        metadata: stored.metadata,
    };
    Ok((summary, current))
}

/// A time as nanoseconds since the epoch: exact (unlike PostgreSQL's `timestamptz`), so
/// listings order and page exactly as the snapshots' own times.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a time outside the years 1677 to 2262.
pub(crate) fn nanos(id: &SessionId, at: DateTime<Utc>) -> Result<i64> {
    at.timestamp_nanos_opt().ok_or_else(|| Error::InvalidArgument {
        reason: format!(
            "session {id} has a time ({at}) outside the years 1677 to 2262 that the database stores can order"
        ),
    })
}

/// [`nanos`] for a bound of a query rather than a session's time: times beyond the range
/// the column holds are the range's ends.
pub(crate) fn nanos_saturating(at: DateTime<Utc>) -> i64 {
    at.timestamp_nanos_opt().unwrap_or(if at.timestamp() < 0 {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// A revision as a 64-bit integer column holds it.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a revision past `i64::MAX`.
pub(crate) fn revision_column(id: &SessionId, revision: Revision) -> Result<i64> {
    i64::try_from(revision.as_u64()).map_err(|_| Error::InvalidArgument {
        reason: format!(
            "session {id} is at revision {revision}, beyond the largest the database stores hold ({})",
            i64::MAX
        ),
    })
}

/// A byte count as a column holds it.
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A state's lengths as the `state_counts` column holds them: `messages,tool_calls,usage`.
pub(crate) fn state_counts(counts: Counts) -> String {
    format!("{},{},{}", counts.messages, counts.tool_calls, counts.usage)
}

/// A revision read from a column (a negative one, written by hand, is revision 0, which
/// no session has).
pub(crate) fn revision_of(column: i64) -> Revision {
    Revision::from_u64(u64::try_from(column).unwrap_or(0))
}
