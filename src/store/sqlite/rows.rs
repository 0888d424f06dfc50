//! What the `sessions` row holds beside the log, in the columns' own types: the listing
//! summary (JSON), times as nanoseconds, revisions as integers, a state's lengths as
//! text, and the listing cursor's position.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::json::ObjectOnly;
use crate::snapshot::{Counts, HistoryStats, Lineage};
use crate::store::SessionSummary;
use crate::usage::Cost;

/// The listing fields of a session, stored as JSON in its row so that listings never
/// read a snapshot (the same fields as the PostgreSQL store's summary column).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoredSummary {
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
    history: StoredStats,
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

/// The summary column for `summary`.
pub(super) fn summary_json(summary: &SessionSummary) -> Result<String> {
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
        history: StoredStats {
            oldest_revision: summary.history.oldest_revision,
            rewinds: summary.history.rewinds,
            compactions: summary.history.compactions,
            restores: summary.history.restores,
        },
    };
    serde_json::to_string(&stored).map_err(|source| Error::Encode {
        id: summary.id.clone(),
        source,
    })
}

/// The summary of the row stored under `key`, from its summary column.
///
/// # Errors
///
/// A corrupt-kind error naming the row if the JSON does not decode or names another
/// session.
pub(super) fn summary_of(
    key: &str,
    json: &str,
    archived: bool,
    location: impl Fn() -> Location,
) -> Result<SessionSummary> {
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
    Ok(SessionSummary {
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
        history: HistoryStats {
            oldest_revision: stored.history.oldest_revision,
            rewinds: stored.history.rewinds,
            compactions: stored.history.compactions,
            restores: stored.history.restores,
        },
        metadata: BTreeMap::new(),
    })
}

/// A time as nanoseconds since the epoch: exact, so listings order and page exactly as
/// the snapshots' own times.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a time outside the years 1677 to 2262.
pub(super) fn nanos(id: &SessionId, at: DateTime<Utc>) -> Result<i64> {
    at.timestamp_nanos_opt().ok_or_else(|| Error::InvalidArgument {
        reason: format!(
            "session {id} has a time ({at}) outside the years 1677 to 2262 that the SQLite store can order"
        ),
    })
}

/// [`nanos`] for a bound rather than a session's time: beyond the range, the range's end.
pub(super) fn nanos_saturating(at: DateTime<Utc>) -> i64 {
    at.timestamp_nanos_opt().unwrap_or(if at.timestamp() < 0 {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// A revision as the `INTEGER` column holds it.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a revision past `i64::MAX`.
pub(super) fn revision_column(id: &SessionId, revision: Revision) -> Result<i64> {
    i64::try_from(revision.as_u64()).map_err(|_| Error::InvalidArgument {
        reason: format!(
            "session {id} is at revision {revision}, beyond the largest the SQLite store holds ({})",
            i64::MAX
        ),
    })
}

/// A revision read from a column (a negative one, written by hand, is revision 0, which
/// no session has).
pub(super) fn revision_of(column: i64) -> Revision {
    Revision::from_u64(u64::try_from(column).unwrap_or(0))
}

/// A byte count as a column holds it.
pub(super) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A state's lengths as the `state_counts` column holds them: `messages,tool_calls,usage`.
pub(super) fn state_counts(counts: Counts) -> String {
    format!("{},{},{}", counts.messages, counts.tool_calls, counts.usage)
}

/// The lengths in a `state_counts` column; `None` if it does not hold three numbers.
pub(super) fn parse_counts(text: &str) -> Option<Counts> {
    let mut parts = text.split(',').map(str::parse::<usize>);
    let counts = Counts {
        messages: parts.next()?.ok()?,
        tool_calls: parts.next()?.ok()?,
        usage: parts.next()?.ok()?,
    };
    parts.next().is_none().then_some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_counts_round_trip_and_refuse_damage() {
        let counts = Counts {
            messages: 3,
            tool_calls: 1,
            usage: 2,
        };
        assert_eq!(parse_counts(&state_counts(counts)), Some(counts));
        for bad in ["", "1,2", "1,2,3,4", "a,b,c", "-1,0,0"] {
            assert_eq!(parse_counts(bad), None, "{bad:?}");
        }
    }
}
