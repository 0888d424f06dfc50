//! Deleting, archiving, measuring and trimming sessions, each one transaction.

use chrono::DateTime;
use rusqlite::{Connection, OptionalExtension};

use super::rows::{revision_column, revision_of, summary_json, to_i64};
use super::search::words_of;
use super::SqliteSessionStore;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::SHARED_DEPTH_BUDGET;
use crate::store::{check_unchanged, SessionSummary, StoredVersion};
use crate::telemetry;

impl SqliteSessionStore {
    /// As [`SessionStore::delete`](crate::SessionStore::delete): the row and its entries;
    /// forks sharing its messages get their own copy first, in the same transaction. The
    /// session's lease record stays, so epochs only grow under its id.
    pub(super) fn delete_session(&self, id: &SessionId) -> Result<()> {
        self.db.write(|tx| {
            if !self.exists(tx, id)? {
                return Err(Error::NotFound { id: id.clone() });
            }
            self.remove(tx, id)
        })
    }

    fn exists(&self, conn: &Connection, id: &SessionId) -> Result<bool> {
        conn.prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")
            .and_then(|mut s| s.exists([id.as_str()]))
            .map_err(|e| self.db.fail("read a session's row", e))
    }

    fn remove(&self, conn: &Connection, id: &SessionId) -> Result<()> {
        self.materialize_forks_of(conn, id, None)?;
        self.forget_words(conn, id)?;
        self.drop_view(conn, id)?;
        let fail = |e| self.db.fail("delete a session", e);
        conn.prepare_cached("DELETE FROM entries WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(fail)?;
        conn.prepare_cached("DELETE FROM checkpoints WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(fail)?;
        conn.prepare_cached("DELETE FROM sessions WHERE id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(fail)?;
        Ok(())
    }

    /// As [`SessionStore::set_archived`](crate::SessionStore::set_archived): a column of
    /// the row, apart from the snapshot.
    pub(super) fn archive(&self, id: &SessionId, archived: bool) -> Result<()> {
        let changed = self.db.write(|tx| {
            tx.prepare_cached("UPDATE sessions SET archived = ?2 WHERE id = ?1")
                .and_then(|mut s| s.execute(rusqlite::params![id.as_str(), i64::from(archived)]))
                .map_err(|e| self.db.fail("archive a session", e))
        })?;
        if changed == 0 {
            return Err(Error::NotFound { id: id.clone() });
        }
        Ok(())
    }

    /// As [`SessionStore::delete_if_unchanged`](crate::SessionStore::delete_if_unchanged):
    /// compared and deleted in one write transaction.
    pub(super) fn delete_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        let id = &listed.id;
        self.db.write(|tx| {
            let stored = tx
                .prepare_cached("SELECT revision, created_ns, archived FROM sessions WHERE id = ?1")
                .and_then(|mut s| {
                    s.query_row([id.as_str()], |r| {
                        Ok(StoredVersion {
                            revision: revision_of(r.get(0)?),
                            created_at: DateTime::from_timestamp_nanos(r.get(1)?),
                            archived: r.get::<_, i64>(2)? != 0,
                        })
                    })
                    .optional()
                })
                .map_err(|e| self.db.fail("read a session's revision", e))?;
            check_unchanged(listed, stored)?;
            self.remove(tx, id)
        })
    }

    /// As [`SessionStore::stored_bytes`](crate::SessionStore::stored_bytes): the row's
    /// checkpoint, summary and entries.
    pub(super) fn bytes_of(&self, id: &SessionId) -> Result<Option<u64>> {
        let size: Option<i64> = self.db.read(|tx| {
            tx.prepare_cached(
                "SELECT coalesce(length(c.checkpoint), 0) + length(s.summary) + s.entry_bytes
                        + coalesce((SELECT length(view) FROM views WHERE session_id = s.id), 0)
                 FROM sessions s LEFT JOIN checkpoints c ON c.session_id = s.id WHERE s.id = ?1",
            )
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .map_err(|e| self.db.fail("measure a session", e))
        })?;
        let size = size.ok_or_else(|| Error::NotFound { id: id.clone() })?;
        Ok(Some(u64::try_from(size).unwrap_or(0)))
    }

    /// As [`SessionStore::trim_history`](crate::SessionStore::trim_history): the log cut
    /// and written back in one write transaction (the state at `oldest` the new
    /// checkpoint, the later entries written again, the summary counting what is kept);
    /// forks sharing a dropped revision get their own copy first.
    pub(super) fn trim(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        self.db.write(|tx| {
            let cut = self.with_log(tx, id, SHARED_DEPTH_BUDGET, |log| {
                if oldest == log.checkpoint.revision() {
                    return Ok(None);
                }
                let trimmed = log.trimmed(oldest)?;
                let head = trimmed.head()?;
                Ok(Some((trimmed, head)))
            })?;
            let Some((trimmed, head)) = cut else {
                return Ok(0);
            };
            self.materialize_forks_of(tx, id, Some(oldest))?;
            // The summary is worked out from the head as the log now holds it.
            let summary = summary_json(&self.indexed.summary_of(&head), &self.indexed)?;
            let checkpoint = trimmed.checkpoint.to_json_with_revision(oldest)?;
            let mut entries = Vec::with_capacity(trimmed.entries.len());
            for entry in &trimmed.entries {
                entries.push((entry.revision(), entry.to_bytes(id)?));
            }
            let entry_bytes: u64 = entries.iter().map(|(_, e)| e.len() as u64).sum();
            let fail = |e| self.db.fail("trim a session's history", e);
            tx.prepare_cached(
                "UPDATE sessions SET checkpoint_revision = ?2, entry_bytes = ?3,
                        summary = ?4, shares_parent = NULL, shares_revision = NULL
                 WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.execute(rusqlite::params![
                    id.as_str(),
                    revision_column(id, oldest).unwrap_or(i64::MAX),
                    to_i64(entry_bytes),
                    summary,
                ])
            })
            .map_err(fail)?;
            tx.prepare_cached("UPDATE checkpoints SET checkpoint = ?2 WHERE session_id = ?1")
                .and_then(|mut s| s.execute(rusqlite::params![id.as_str(), checkpoint]))
                .map_err(fail)?;
            tx.prepare_cached("DELETE FROM entries WHERE session_id = ?1")
                .and_then(|mut s| s.execute([id.as_str()]))
                .map_err(fail)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO entries (session_id, revision, entry) VALUES (?1, ?2, ?3)",
                )
                .map_err(fail)?;
            for (revision, entry) in &entries {
                insert
                    .execute(rusqlite::params![
                        id.as_str(),
                        revision_column(id, *revision)?,
                        entry
                    ])
                    .map_err(fail)?;
            }
            self.trim_view(
                tx,
                id,
                oldest,
                trimmed.entries.iter().map(|e| (e.revision(), e.kind())),
            )?;
            // The index follows the log: the new checkpoint's words and the kept entries'.
            self.forget_words(tx, id)?;
            let checkpoint_words = words_of(trimmed.checkpoint.transcript());
            self.index_words(tx, id, oldest, &checkpoint_words)?;
            for entry in &trimmed.entries {
                self.index_words(tx, id, entry.revision(), &words_of(entry.messages()))?;
            }
            telemetry::wrote((checkpoint.len() as u64).saturating_add(entry_bytes));
            Ok(trimmed.dropped)
        })
    }
}
