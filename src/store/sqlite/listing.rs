//! Listings: the summary column of each row, never a snapshot, in the listing's order
//! (newest first, sessions updated in the future last), read from the index on
//! `(archived, updated_ns DESC, id DESC)`; a page is one range of that index after the
//! cursor (keyset pagination), whatever the store's size.

use chrono::{DateTime, Utc};

use super::rows::{nanos, nanos_saturating, summary_of};
use super::SqliteSessionStore;
use crate::clock;
use crate::error::Result;
use crate::id::SessionId;
use crate::store::{
    check_page_limit, ListCursor, ListScope, SessionList, SessionPage, SessionSummary,
};

/// A listed row: its place in the order (update time and id, from the indexed columns,
/// so a page can end on a row whose summary is unreadable) and its summary.
type Listed = (Option<(DateTime<Utc>, SessionId)>, Result<SessionSummary>);

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
        self.db.read(|tx| {
            let mut listed = Vec::new();
            if !after_future {
                listed = self.select_range(tx, scope, false, after.as_ref(), limit, horizon)?;
            }
            let wanted = limit.map(|limit| limit.saturating_sub(listed.len()));
            if wanted != Some(0) {
                let after = after.as_ref().filter(|_| after_future);
                listed.extend(self.select_range(tx, scope, true, after, wanted, horizon)?);
            }
            Ok((horizon, listed))
        })
    }

    /// One range of [`select_summaries`](Self::select_summaries): the rows updated at
    /// `horizon` or earlier, or (`future`) those updated later.
    fn select_range(
        &self,
        conn: &rusqlite::Connection,
        scope: ListScope,
        future: bool,
        after: Option<&(DateTime<Utc>, SessionId, DateTime<Utc>)>,
        limit: Option<usize>,
        horizon: DateTime<Utc>,
    ) -> Result<Vec<Listed>> {
        let in_scope = match scope {
            ListScope::Active => "archived = 0",
            ListScope::Archived => "archived = 1",
            ListScope::All => "archived IN (0, 1)",
        };
        // After a cursor in the plausible range every row it passes is plausible: the
        // horizon bound is left out there, so SQLite seeks the index by the cursor
        // alone (with both bounds it chose the horizon's and scanned to the cursor).
        let in_range = match (future, after.is_some()) {
            (true, _) => "updated_ns > ?1",
            (false, false) => "updated_ns <= ?1",
            (false, true) => "?1 IS NOT NULL",
        };
        let after_sql = if after.is_some() {
            "AND (updated_ns, id) < (?2, ?3)"
        } else {
            "AND ?2 IS NULL AND ?3 IS NULL"
        };
        let sql = format!(
            "SELECT id, summary, archived, updated_ns FROM sessions
             WHERE {in_scope} AND {in_range} {after_sql}
             ORDER BY updated_ns DESC, id DESC LIMIT ?4"
        );
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
            match SessionId::parse(&key) {
                Ok(id) => {
                    let summary = summary_of(&key, &json, archived != 0, location);
                    let place = (DateTime::from_timestamp_nanos(updated_ns), id);
                    listed.push((Some(place), summary));
                }
                Err(e) => listed.push((None, Err(e.at(&location())))),
            }
        }
        crate::telemetry::read(read);
        Ok(listed)
    }
}
