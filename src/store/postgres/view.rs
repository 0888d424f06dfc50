//! The view checkpoint of a compacted session: the state its compaction made, kept in the
//! session's row (`view_state`, `view_revision`, `view_history`, tables version 6) by the
//! compaction's append, so that a load reads it and the entries from the compaction on,
//! not the row's snapshot and the entries before it (the history the compaction
//! replaced).
//!
//! The columns are written by the append's own statement, so they never describe a log
//! that was not stored; a whole write and a trim clear them in theirs (a delete takes the
//! row). A load still takes them as a cache, as the file store takes its `<id>.view`:
//! only while the state is intact and the one the compaction's entry says it made, and
//! the entries after it fold onto it. Anything else (damage, a restore of a revision
//! before the compaction) and the load reads the whole log, which decides.

use tokio_postgres::error::SqlState;

use super::{backend, Inner, StoredRows, ENTRY_FORMAT};
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::{
    decode_head, intact_frame, push_frame, split_entry, EntryHead, HistoryStats, LogSource,
    SessionSnapshot, FRAME_OVERHEAD,
};
use crate::store::columns::{revision_column, revision_of, to_i64};
use crate::telemetry;

/// The columns tables version 6 adds to `sessions`.
pub(super) fn add_columns(schema: &str) -> String {
    format!(
        "ALTER TABLE {schema}.sessions
             ADD COLUMN IF NOT EXISTS view_state bytea,
             ADD COLUMN IF NOT EXISTS view_revision bigint,
             ADD COLUMN IF NOT EXISTS view_history bigint[];"
    )
}

/// The `SET` clauses of an append that keep the view of the compaction it appends
/// (`$state` and `$history`, both `NULL` for any other entry) when the view is at most
/// half of what a load reads without it: the snapshot and every entry, the appended one
/// (`$entry_len` bytes) included. Otherwise the columns keep an earlier compaction's view,
/// still valid: its entry is still there, and those after it fold onto it.
pub(super) fn set_on_append(state: &str, history: &str, revision: &str, entry_len: &str) -> String {
    let fits = format!(
        "{state}::bytea IS NOT NULL AND 2 * octet_length({state}::bytea)
             <= octet_length(snapshot) + journal_bytes + {entry_len}::bigint"
    );
    format!(
        "view_state = CASE WHEN {fits} THEN {state}::bytea ELSE view_state END,
         view_revision = CASE WHEN {fits} THEN {revision}::bigint ELSE view_revision END,
         view_history = CASE WHEN {fits} THEN {history}::bigint[] ELSE view_history END"
    )
}

/// The `SET` clause of a write that replaces the log (a whole save, a trim).
pub(super) const CLEAR: &str = "view_state = NULL, view_revision = NULL, view_history = NULL";

/// A compaction's view as an append writes it: the state, framed as an entry is (with a
/// checksum), and the log's history counts at it.
pub(super) struct EncodedView {
    pub(super) state: Vec<u8>,
    pub(super) history: Vec<i64>,
}

/// The view of `snapshot`, the state a compaction makes at `revision` with history
/// `stats`; `None` for a fork that shares its parent's messages (what it knows of the
/// sharing is in its snapshot, which a view does not hold) or a state that does not
/// encode (no view, not a failed save).
pub(super) fn encode(
    snapshot: &SessionSnapshot,
    revision: Revision,
    stats: HistoryStats,
) -> Option<EncodedView> {
    if snapshot.share().is_some() {
        return None;
    }
    let json = snapshot.to_json_with_revision(revision).ok()?;
    let mut framed = Vec::with_capacity(json.len() + FRAME_OVERHEAD);
    push_frame(&mut framed, snapshot.id(), &json).ok()?;
    Some(EncodedView {
        state: framed,
        history: vec![
            revision_column(snapshot.id(), stats.oldest_revision).ok()?,
            to_i64(stats.rewinds),
            to_i64(stats.compactions),
            to_i64(stats.restores),
        ],
    })
}

/// What a load's statement read: the whole log, or a view and the entries from its
/// compaction on.
enum Read {
    Whole(StoredRows),
    View(StoredView),
    /// Tables older than version 6, without the view columns: read with the statement
    /// every version serves.
    OlderTables,
}

/// A view and the entries from its compaction on, as read.
struct StoredView {
    /// The row's revision.
    revision: Revision,
    /// The oldest revision the log keeps (the first entry's minus one, or the row's),
    /// which the view's counts must start from: a trim the view does not account for (a
    /// release without views trims without clearing them, and an append that waited for a
    /// trim keeps the counts it read before) leaves another.
    oldest: Option<Revision>,
    view_revision: Revision,
    history: Option<Vec<i64>>,
    /// `None` past the size limit (then so are `records`).
    state: Option<Vec<u8>>,
    records: Option<Vec<Vec<u8>>>,
    formats: Vec<i16>,
}

impl Inner {
    /// As [`AsyncSessionStore::load`](crate::AsyncSessionStore::load): one statement that
    /// reads the row's snapshot and entries, or, for a compacted session, its view and
    /// the entries from the compaction on.
    pub(super) async fn load_head(&self, id: &SessionId) -> Result<SessionSnapshot> {
        let view = match self.read_for_load(id).await? {
            Read::Whole(rows) => {
                let mut snapshot = self.fold_rows(id, &rows, |log| log.state_at(None))?;
                let revision = snapshot.revision();
                snapshot.mark_stored(revision);
                return Ok(snapshot);
            }
            Read::View(view) => view,
            Read::OlderTables => return self.load_whole(id).await,
        };
        match state_of(id, view) {
            Some(snapshot) => Ok(snapshot),
            None => self.load_whole(id).await,
        }
    }

    /// The head of `id` from its whole log.
    async fn load_whole(&self, id: &SessionId) -> Result<SessionSnapshot> {
        let mut snapshot = self.with_log(id, |log| log.state_at(None)).await?;
        let revision = snapshot.revision();
        snapshot.mark_stored(revision);
        Ok(snapshot)
    }

    /// The row of `id` as a load needs it, sizes checked before the bytes are fetched.
    async fn read_for_load(&self, id: &SessionId) -> Result<Read> {
        let key = id.to_string();
        let limit = to_i64(self.max_snapshot_bytes);
        let query = self.with_client(move |client, schema| async move {
            let statement = client
                .prepare_cached(&format!(
                    "SELECT s.revision, octet_length(s.snapshot),
                        CASE WHEN s.view_revision IS NULL
                                  AND octet_length(s.snapshot) <= $2::bigint
                             THEN s.snapshot END,
                        s.journal_bytes,
                        CASE WHEN s.journal_bytes <= $2::bigint THEN ARRAY(
                            SELECT e.record FROM {schema}.entries e
                            WHERE e.session_id = $1
                              AND e.revision >= COALESCE(s.view_revision, 0)
                            ORDER BY e.revision) END,
                        ARRAY(SELECT e.format FROM {schema}.entries e
                            WHERE e.session_id = $1
                              AND e.revision >= COALESCE(s.view_revision, 0)
                            ORDER BY e.revision),
                        s.view_revision, s.view_history,
                        CASE WHEN octet_length(s.view_state) <= $2::bigint THEN s.view_state END,
                        CASE WHEN s.view_revision IS NOT NULL THEN COALESCE(
                            (SELECT min(e.revision) FROM {schema}.entries e
                             WHERE e.session_id = $1) - 1,
                            s.revision) END
                     FROM {schema}.sessions s WHERE s.id = $1"
                ))
                .await;
            let statement = match statement {
                Ok(statement) => statement,
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_COLUMN) => {
                    return Ok(None);
                }
                Err(e) => return Err(backend("prepare a statement", e)),
            };
            client
                .query_opt(&statement, &[&key, &limit])
                .await
                .map(Some)
                .map_err(|e| backend("load a session", e))
        });
        let Some(row) = query.await? else {
            return Ok(Read::OlderTables);
        };
        let row = row.ok_or_else(|| Error::NotFound { id: id.clone() })?;
        let column = |e| {
            backend(
                "read a session's row (is the table the one migrate made?)",
                e,
            )
        };
        let view_revision: Option<i64> = row.try_get(6).map_err(column)?;
        let Some(view_revision) = view_revision else {
            return self.stored_rows(id, &row).map(Read::Whole);
        };
        let state: Option<Vec<u8>> = row.try_get(8).map_err(column)?;
        let records: Option<Vec<Vec<u8>>> = row.try_get(4).map_err(column)?;
        telemetry::read(
            records
                .iter()
                .flatten()
                .chain(state.iter())
                .fold(0u64, |sum, bytes| sum.saturating_add(bytes.len() as u64)),
        );
        // Counts that do not read as four numbers (a `NULL` among them, written by hand)
        // are no view, not a failed load.
        let history = row
            .try_get::<_, Option<Vec<Option<i64>>>>(7)
            .ok()
            .flatten()
            .and_then(|counts| counts.into_iter().collect());
        let oldest: Option<i64> = row.try_get(9).map_err(column)?;
        Ok(Read::View(StoredView {
            revision: revision_of(row.try_get(0).map_err(column)?),
            oldest: oldest.map(revision_of),
            view_revision: revision_of(view_revision),
            history,
            state,
            records,
            formats: row.try_get(5).map_err(column)?,
        }))
    }
}

/// The head state from a view and the entries after its compaction's, marked as stored;
/// `None` if they do not make it (the whole log decides then).
fn state_of(id: &SessionId, view: StoredView) -> Option<SessionSnapshot> {
    let StoredView {
        revision,
        oldest,
        view_revision,
        history,
        state,
        records,
        formats,
    } = view;
    let count = |n: &i64| u64::try_from(*n).ok();
    let stats = match history.as_deref()? {
        [oldest, rewinds, compactions, restores] => HistoryStats {
            oldest_revision: revision_of(*oldest),
            rewinds: count(rewinds)?,
            compactions: count(compactions)?,
            restores: count(restores)?,
        },
        _ => return None,
    };
    if oldest != Some(stats.oldest_revision) {
        return None;
    }
    let framed = state?;
    let (json, used) = intact_frame(&framed)?;
    if used != framed.len() {
        return None;
    }
    let view = SessionSnapshot::decode_unvalidated(json).ok()?;
    if view.id() != id || view.revision() != view_revision {
        return None;
    }
    let records = records?;
    if formats.len() != records.len() || formats.iter().any(|&f| f != ENTRY_FORMAT) {
        return None;
    }
    let mut entries: Vec<(EntryHead, &[u8])> = Vec::with_capacity(records.len());
    for bytes in &records {
        let (payload, used) = intact_frame(bytes)?;
        if used != bytes.len() {
            return None;
        }
        let (head, body) = split_entry(payload).ok()?;
        entries.push((decode_head(head).ok()?, body));
    }
    LogSource::state_after_view(view, stats, entries)
        .ok()
        .filter(|s| s.revision() == revision)
}
