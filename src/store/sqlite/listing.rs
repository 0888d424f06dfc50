//! Listings: the summary column of each row, never a snapshot, in the listing's order
//! (newest first, sessions updated in the future last), read from the index on
//! `(archived, updated_ns DESC, id DESC)`; a page is one range of that index after the
//! cursor (keyset pagination), whatever the store's size.

use chrono::{DateTime, Utc};

use super::rows::{nanos, nanos_saturating, summary_json, summary_of, to_i64};
use super::SqliteSessionStore;
use crate::clock;
use crate::error::Result;
use crate::id::{Revision, SessionId};
use crate::snapshot::SHARED_DEPTH_BUDGET;
use crate::store::{
    check_page_limit, ListCursor, ListFilter, ListScope, SessionList, SessionPage, SessionSummary,
};

/// How many rows a filtered listing reads at a time (more if the page is larger).
const FILTER_CHUNK: usize = 200;

/// A listed row: its place in the order (update time and id, from the indexed columns,
/// so a page can end on a row whose summary is unreadable) and its summary.
type Listed = (Option<(DateTime<Utc>, SessionId)>, Result<SessionSummary>);

/// A row as read: its place, and its summary with whether it was made for the store's
/// indexed metadata keys.
type Row = (
    Option<(DateTime<Utc>, SessionId)>,
    Result<(SessionSummary, bool)>,
);

/// A summary to write back to its row: the session, the revision it was worked out at,
/// and the summary column.
type Rewrite = (SessionId, Revision, String);

impl SqliteSessionStore {
    /// As [`SessionStore::list_scoped`](crate::SessionStore::list_scoped).
    pub(super) fn list_in(&self, scope: ListScope) -> Result<SessionList> {
        let (sessions, unreadable): (Vec<_>, Vec<_>) = self
            .select_summaries(scope, None, None)?
            .1
            .into_iter()
            .map(|(_, summary)| summary)
            .partition(Result::is_ok);
        Ok(SessionList::new(
            sessions.into_iter().filter_map(Result::ok).collect(),
            unreadable.into_iter().filter_map(Result::err).collect(),
        ))
    }

    /// As [`SessionStore::list_page`](crate::SessionStore::list_page), from the index.
    pub(super) fn page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        check_page_limit(limit)?;
        let (horizon, mut rows) =
            self.select_summaries(ListScope::Active, after, Some(limit.saturating_add(1)))?;
        // Whether there is more is decided by rows, readable or not: an unreadable one
        // still takes its place in the page.
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            // Only the page's last place becomes a cursor.
            rows.iter()
                .rev()
                .find_map(|(place, _)| place.as_ref())
                .map(|(updated_at, id)| ListCursor::at(*updated_at, id.clone(), horizon))
        } else {
            None
        };
        let (mut sessions, mut unreadable) = (Vec::new(), Vec::new());
        for (_, summary) in rows {
            match summary {
                Ok(summary) => sessions.push(summary),
                Err(e) => unreadable.push(e),
            }
        }
        Ok(SessionPage {
            sessions,
            unreadable,
            next,
        })
    }

    /// As [`SessionStore::list_page_filtered`](crate::SessionStore::list_page_filtered):
    /// the listing index walked from the cursor a chunk of rows at a time, each summary
    /// matched against `filter`, until the page is full and one more session matches
    /// (or the listing ends). A page costs the rows it passes, not the store's size.
    /// An unreadable row is reported on the page whose range holds it: before the page's
    /// last session, or anywhere once the listing ends.
    pub(super) fn page_filtered(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        check_page_limit(limit)?;
        filter.check(&self.indexed)?;
        let scope = filter.list_scope();
        let chunk = limit.saturating_add(1).max(FILTER_CHUNK);
        let mut page = SessionPage::default();
        let mut after = after.cloned();
        // Unreadable rows the walk has passed, not yet before a session of the page.
        let mut passed = Vec::new();
        loop {
            let (horizon, rows) = self.select_summaries(scope, after.as_ref(), Some(chunk))?;
            let exhausted = rows.len() < chunk;
            // Unreadable rows after the chunk's last place (ids that are not session ids
            // have none): the next chunk starts at that place and reads them again.
            let mut loose = Vec::new();
            let mut advanced = false;
            for (place, summary) in rows {
                // A row with a place covers the rows before it.
                if place.is_some() {
                    passed.append(&mut loose);
                }
                match summary {
                    Ok(summary) if filter.matches(&summary) => {
                        if page.sessions.len() == limit {
                            // One more matches: the page ends before it, and the next
                            // page reads what lies between.
                            page.next = page
                                .sessions
                                .last()
                                .map(|last| ListCursor::after_in(last, horizon));
                            return Ok(page);
                        }
                        page.unreadable.append(&mut passed);
                        page.sessions.push(summary);
                    }
                    Ok(_) => {}
                    Err(e) if place.is_some() => passed.push(e),
                    Err(e) => loose.push(e),
                }
                if let Some((updated_at, id)) = place {
                    after = Some(ListCursor::at(updated_at, id, horizon));
                    advanced = true;
                }
            }
            // A whole chunk without a place cannot move the walk on: it ends there.
            if exhausted || !advanced {
                page.unreadable.append(&mut passed);
                page.unreadable.append(&mut loose);
                return Ok(page);
            }
        }
    }

    /// The listing of `scope`, at most `limit` rows after `after`. Sessions updated in
    /// the future come after all others, so the listing is read as two ranges of the
    /// index: plausible times (up to the walk's horizon), then later ones. One read
    /// transaction, so both ranges are one state. Returns the walk's horizon with the
    /// rows.
    fn select_summaries(
        &self,
        scope: ListScope,
        after: Option<&ListCursor>,
        limit: Option<usize>,
    ) -> Result<(DateTime<Utc>, Vec<Listed>)> {
        let after = after.map(|cursor| {
            let (updated_at, id, horizon) = cursor.position();
            (updated_at, id.clone(), horizon)
        });
        // The walk's latest plausible time, fixed on its first page (see ListCursor).
        let horizon = after
            .as_ref()
            .map_or_else(|| clock::horizon(Utc::now()), |(_, _, horizon)| *horizon);
        let after_future = after
            .as_ref()
            .is_some_and(|(updated_at, _, horizon)| updated_at > horizon);
        let mut stale = Vec::new();
        let listed = self.db.read(|tx| {
            let mut rows = Vec::new();
            if !after_future {
                rows = self.select_range(tx, scope, false, after.as_ref(), limit, horizon)?;
            }
            let wanted = limit.map(|limit| limit.saturating_sub(rows.len()));
            if wanted != Some(0) {
                let after = after.as_ref().filter(|_| after_future);
                rows.extend(self.select_range(tx, scope, true, after, wanted, horizon)?);
            }
            let listed = rows.into_iter().map(|(place, summary)| {
                let summary = match summary {
                    Ok((summary, true)) => Ok(summary),
                    // Made for other metadata keys: worked out from the log.
                    Ok((summary, false)) => self.summary_from_log(tx, summary, &mut stale),
                    Err(e) => Err(e),
                };
                (place, summary)
            });
            Ok(listed.collect::<Vec<Listed>>())
        })?;
        self.rewrite_summaries(&stale);
        Ok((horizon, listed))
    }

    /// `listed` (a row's summary made for other metadata keys) with the values of the
    /// store's keys, from the session's log, in the listing's read transaction. The
    /// summary to write back is added to `stale`.
    fn summary_from_log(
        &self,
        conn: &rusqlite::Connection,
        listed: SessionSummary,
        stale: &mut Vec<Rewrite>,
    ) -> Result<SessionSummary> {
        let snapshot = self.with_log(conn, &listed.id, SHARED_DEPTH_BUDGET, |log| {
            log.state_at(None)
        })?;
        let summary = SessionSummary {
            metadata: self.indexed.values_in(&snapshot),
            ..listed
        };
        if snapshot.revision() == summary.revision {
            if let Ok(json) = summary_json(&summary, &self.indexed) {
                stale.push((summary.id.clone(), summary.revision, json));
            }
        }
        Ok(summary)
    }

    /// Writes the summaries `stale` holds back to their rows, each only while its row is
    /// at the revision it was worked out from, so the next listing reads only the
    /// summary. Best effort: a failure leaves the old summaries, which are worked out
    /// again next time.
    fn rewrite_summaries(&self, stale: &[Rewrite]) {
        if stale.is_empty() {
            return;
        }
        let _ = self.db.write(|tx| {
            let mut statement = tx
                .prepare_cached("UPDATE sessions SET summary = ?3 WHERE id = ?1 AND revision = ?2")
                .map_err(|e| self.db.fail("write a session's summary", e))?;
            for (id, revision, json) in stale {
                statement
                    .execute(rusqlite::params![
                        id.as_str(),
                        to_i64(revision.as_u64()),
                        json
                    ])
                    .map_err(|e| self.db.fail("write a session's summary", e))?;
            }
            Ok(())
        });
    }

    /// One range of [`select_summaries`](Self::select_summaries): the rows updated at
    /// `horizon` or earlier, or (`future`) those updated later.
    ///
    /// A page of both scopes is read as a page of each, merged: `archived IN (0, 1)` is two
    /// ranges of the listing index, which SQLite merges by sorting every row after the
    /// cursor, so a page would cost more as the store grows.
    fn select_range(
        &self,
        conn: &rusqlite::Connection,
        scope: ListScope,
        future: bool,
        after: Option<&(DateTime<Utc>, SessionId, DateTime<Utc>)>,
        limit: Option<usize>,
        horizon: DateTime<Utc>,
    ) -> Result<Vec<Row>> {
        let range = |scope| self.query_range(conn, scope, future, after, limit, horizon);
        let rows = match (scope, limit) {
            (ListScope::All, Some(limit)) => {
                let mut rows = range(ListScope::Active)?;
                rows.extend(range(ListScope::Archived)?);
                // The query's order: newest first, then the greater id (bytes).
                rows.sort_by(|(a_ns, a_key, _), (b_ns, b_key, _)| {
                    (b_ns, b_key).cmp(&(a_ns, a_key))
                });
                rows.truncate(limit);
                rows
            }
            _ => range(scope)?,
        };
        Ok(rows.into_iter().map(|(_, _, row)| row).collect())
    }

    /// The rows of [`range_sql`], each with its `updated_ns` and key (its place in the
    /// query's order).
    fn query_range(
        &self,
        conn: &rusqlite::Connection,
        scope: ListScope,
        future: bool,
        after: Option<&(DateTime<Utc>, SessionId, DateTime<Utc>)>,
        limit: Option<usize>,
        horizon: DateTime<Utc>,
    ) -> Result<Vec<(i64, String, Row)>> {
        let sql = range_sql(scope, future, after.is_some());
        let (after_ns, after_id) = match after {
            Some((updated_at, id, _)) => (Some(nanos(id, *updated_at)?), Some(id.as_str())),
            None => (None, None),
        };
        let limit = limit.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let fail = |e| self.db.fail("list sessions", e);
        let mut statement = conn.prepare_cached(&sql).map_err(fail)?;
        let mut rows = statement
            .query(rusqlite::params![
                nanos_saturating(horizon),
                after_ns,
                after_id,
                limit
            ])
            .map_err(fail)?;
        let mut listed = Vec::new();
        let mut read = 0u64;
        while let Some(row) = rows.next().map_err(fail)? {
            let key: String = row.get(0).map_err(fail)?;
            let json: String = row.get(1).map_err(fail)?;
            let archived: i64 = row.get(2).map_err(fail)?;
            let updated_ns: i64 = row.get(3).map_err(fail)?;
            read = read.saturating_add(json.len() as u64);
            // Where the row is, made only for an error.
            let location = || self.row_location(&key);
            // A row under a key that is not a session id (written by hand) is reported,
            // not fatal to the listing; it cannot mark a page's end.
            let row = match SessionId::parse(&key) {
                Ok(id) => {
                    let summary = summary_of(&key, &json, archived != 0, &self.indexed, location);
                    let place = (DateTime::from_timestamp_nanos(updated_ns), id);
                    (Some(place), summary)
                }
                Err(e) => (None, Err(e.at(&location()))),
            };
            listed.push((updated_ns, key, row));
        }
        crate::telemetry::read(read);
        Ok(listed)
    }
}

/// The query of [`SqliteSessionStore::select_range`]'s rows: those of `scope`, updated
/// after the horizon (`?1`) or (`future`) at or before it, after the cursor
/// `(?2, ?3)` if there is one (`after`), newest first, at most `?4` (-1: all).
fn range_sql(scope: ListScope, future: bool, after: bool) -> String {
    let in_scope = match scope {
        ListScope::Active => "archived = 0",
        ListScope::Archived => "archived = 1",
        ListScope::All => "archived IN (0, 1)",
    };
    // After a cursor in the plausible range every row it passes is plausible: the
    // horizon bound is left out there, so SQLite seeks the index by the cursor alone
    // (with both bounds it chose the horizon's and scanned to the cursor).
    let in_range = match (future, after) {
        (true, _) => "updated_ns > ?1",
        (false, false) => "updated_ns <= ?1",
        (false, true) => "?1 IS NOT NULL",
    };
    let after_sql = if after {
        "AND (updated_ns, id) < (?2, ?3)"
    } else {
        "AND ?2 IS NULL AND ?3 IS NULL"
    };
    format!(
        "SELECT id, summary, archived, updated_ns FROM sessions
         WHERE {in_scope} AND {in_range} {after_sql}
         ORDER BY updated_ns DESC, id DESC LIMIT ?4"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's plan for `sql` on the store's tables in `db`, one line.
    fn plan(db: &std::path::Path, sql: &str) -> String {
        let conn = rusqlite::Connection::open(db).expect("open the database");
        let mut statement = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("prepare");
        let lines: Vec<String> = statement
            .query_map([1i64, 1, 1, 1], |r| r.get::<_, String>(3))
            .expect("plan")
            .collect::<rusqlite::Result<_>>()
            .expect("plan rows");
        lines.join("; ")
    }

    /// A page is one range of the listing index, whatever the store's size: SQLite's plan
    /// for the store's own query (first page or after a cursor, either side of the
    /// horizon) searches `sessions_listing`, with no scan of the table and no sort. A page
    /// of both scopes is one page of each, merged by the store: the query of both
    /// (`archived IN (0, 1)`, kept for whole listings) sorts the rows after the cursor,
    /// which the negative control below shows the check sees.
    #[test]
    fn every_page_query_of_one_scope_searches_the_listing_index() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("s.db");
        drop(SqliteSessionStore::open(&db).expect("open"));
        let all = plan(&db, &range_sql(ListScope::All, false, true));
        assert!(all.contains("TEMP B-TREE"), "the check sees a sort: {all}");
        for scope in [ListScope::Active, ListScope::Archived] {
            for (future, after) in [(false, false), (false, true), (true, false), (true, true)] {
                let plan = plan(&db, &range_sql(scope, future, after));
                assert!(
                    plan.contains("USING INDEX sessions_listing")
                        || plan.contains("USING COVERING INDEX sessions_listing"),
                    "{scope:?} future {future} after {after}: {plan}"
                );
                assert!(
                    !plan.contains("TEMP B-TREE"),
                    "{scope:?} future {future} after {after}: {plan}"
                );
            }
        }
    }
}
