//! The view checkpoint of a compacted session: the state its compaction made, one row of
//! `views` (tables version 4) written in the compaction's save transaction, so that a
//! load reads that row and the entries from the compaction on, not the checkpoint and the
//! entries before it (the history the compaction replaced).
//!
//! The row is written with the entry in one transaction, so it never describes a log that
//! was not stored; the writes that replace the log (a whole save, a trim past it, a
//! delete) remove it in theirs. A load still takes it as a cache, as the file store takes
//! its `<id>.view`: only while it is the state the compaction's entry says it made, beside
//! the checkpoint the session's row names, and the entries after it fold onto it. Anything
//! else (a row damaged by hand, a restore of a revision before the compaction) and the
//! load reads the whole log, which decides.

use rusqlite::{Connection, OptionalExtension};

use super::log::entry_of_row;
use super::rows::{revision_column, revision_of, to_i64};
use super::SqliteSessionStore;
use crate::error::Result;
use crate::id::{Revision, SessionId};
use crate::snapshot::{
    intact_frame, push_frame, EntryKind, HistoryStats, LogSource, SessionSnapshot, FRAME_OVERHEAD,
};
use crate::telemetry;

/// The table tables version 4 adds.
pub(super) const CREATE_TABLE: &str = "
CREATE TABLE IF NOT EXISTS views (
    session_id TEXT NOT NULL PRIMARY KEY,
    revision INTEGER NOT NULL,
    checkpoint_revision INTEGER NOT NULL,
    oldest_revision INTEGER NOT NULL,
    rewinds INTEGER NOT NULL,
    compactions INTEGER NOT NULL,
    restores INTEGER NOT NULL,
    view BLOB NOT NULL
) STRICT;
";

/// Entry rows as read: each one's revision and where its bytes are in the buffer that
/// holds them all (one allocation, not one per entry), and that buffer.
type EntryRows = (Vec<(Revision, std::ops::Range<usize>)>, Vec<u8>);

/// What a save knows of the log it appended a compaction to, for
/// [`SqliteSessionStore::write_view`].
pub(super) struct Compacted<'a> {
    /// The state the compaction made, saved at `revision`.
    pub(super) snapshot: &'a SessionSnapshot,
    pub(super) revision: Revision,
    /// The row's checkpoint revision, and the size of its entries (the compaction's too).
    pub(super) checkpoint_revision: Revision,
    pub(super) entry_bytes: u64,
    /// The log's history counts with the compaction.
    pub(super) stats: HistoryStats,
}

impl SqliteSessionStore {
    /// Writes the view row of a session whose compaction was just appended (in the save's
    /// transaction), if the view is at most half of what a load reads without it.
    /// Otherwise the row of an earlier compaction stays: its entry is still there, and the
    /// entries after it (this compaction's among them) fold onto it.
    ///
    /// A fork whose checkpoint shares its parent's messages gets none: its load reads the
    /// parent's state (and checks the parent still keeps it), and what it knows of the
    /// sharing comes from its checkpoint, which a view does not hold.
    pub(super) fn write_view(&self, conn: &Connection, compacted: &Compacted<'_>) -> Result<()> {
        let id = compacted.snapshot.id();
        let fail = |e| self.db.fail("write a compacted session's view", e);
        let checkpoint_bytes: Option<i64> = conn
            .prepare_cached("SELECT length(checkpoint) FROM checkpoints WHERE session_id = ?1")
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .map_err(fail)?;
        let log_bytes = u64::try_from(checkpoint_bytes.unwrap_or(0))
            .unwrap_or(0)
            .saturating_add(compacted.entry_bytes);
        // Framed as an entry is (with a checksum): damage is a slower load, never a state
        // the log did not make. A state that does not encode (the entry did) is no view,
        // not a failed save.
        let Ok(state) = compacted.snapshot.to_json_with_revision(compacted.revision) else {
            return Ok(());
        };
        let mut view = Vec::with_capacity(state.len() + FRAME_OVERHEAD);
        if push_frame(&mut view, id, &state).is_err()
            || (view.len() as u64).saturating_mul(2) > log_bytes
        {
            return Ok(());
        }
        let counts = compacted.stats;
        conn.prepare_cached(
            "INSERT INTO views (session_id, revision, checkpoint_revision, oldest_revision,
                                rewinds, compactions, restores, view)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (session_id) DO UPDATE SET
                 revision = excluded.revision,
                 checkpoint_revision = excluded.checkpoint_revision,
                 oldest_revision = excluded.oldest_revision, rewinds = excluded.rewinds,
                 compactions = excluded.compactions, restores = excluded.restores,
                 view = excluded.view",
        )
        .and_then(|mut s| {
            s.execute(rusqlite::params![
                id.as_str(),
                revision_column(id, compacted.revision).unwrap_or(i64::MAX),
                revision_column(id, compacted.checkpoint_revision).unwrap_or(i64::MAX),
                revision_column(id, counts.oldest_revision).unwrap_or(i64::MAX),
                to_i64(counts.rewinds),
                to_i64(counts.compactions),
                to_i64(counts.restores),
                view,
            ])
        })
        .map_err(fail)?;
        telemetry::wrote(view.len() as u64);
        Ok(())
    }

    /// Removes the view row of `id`, in the transaction of a write that replaces its log
    /// (a whole save, a delete).
    pub(super) fn drop_view(&self, conn: &Connection, id: &SessionId) -> Result<()> {
        conn.prepare_cached("DELETE FROM views WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(|e| self.db.fail("remove a session's view", e))?;
        Ok(())
    }

    /// In the transaction of a trim that keeps the log of `id` from `oldest` on (`kept`:
    /// the revision and kind of each entry kept, in order): a view row of a later
    /// revision stays (its entry and those after it are kept), beside the new checkpoint
    /// and with the history counts of the kept log at it; one of `oldest` or before goes
    /// (the checkpoint is that state, or a later one, now).
    pub(super) fn trim_view(
        &self,
        conn: &Connection,
        id: &SessionId,
        oldest: Revision,
        kept: impl IntoIterator<Item = (Revision, EntryKind)>,
    ) -> Result<()> {
        let fail = |e| self.db.fail("keep a session's view across a trim", e);
        let oldest_column = revision_column(id, oldest)?;
        let revision: Option<i64> = conn
            .prepare_cached("SELECT revision FROM views WHERE session_id = ?1")
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .map_err(fail)?;
        let Some(revision) = revision.map(revision_of).filter(|&r| r > oldest) else {
            return self.drop_view(conn, id);
        };
        let stats = kept.into_iter().take_while(|&(r, _)| r <= revision).fold(
            HistoryStats {
                oldest_revision: oldest,
                ..HistoryStats::default()
            },
            |stats, (_, kind)| stats.after(kind),
        );
        conn.prepare_cached(
            "UPDATE views SET checkpoint_revision = ?2, oldest_revision = ?2, rewinds = ?3,
                    compactions = ?4, restores = ?5
             WHERE session_id = ?1",
        )
        .and_then(|mut s| {
            s.execute(rusqlite::params![
                id.as_str(),
                oldest_column,
                to_i64(stats.rewinds),
                to_i64(stats.compactions),
                to_i64(stats.restores),
            ])
        })
        .map_err(fail)?;
        Ok(())
    }

    /// Session `id` from its view row and the entries from its compaction on, marked as
    /// stored; `Ok(None)` if it has no view row or the row does not describe its log (the
    /// caller then reads the whole log).
    ///
    /// # Errors
    ///
    /// Database errors only: anything wrong with what is stored is `Ok(None)`.
    pub(super) fn load_from_view(
        &self,
        conn: &Connection,
        id: &SessionId,
    ) -> Result<Option<SessionSnapshot>> {
        let fail = |e| self.db.fail("load a compacted session", e);
        let found = conn
            .prepare_cached(
                "SELECT s.revision, v.revision, v.oldest_revision, v.rewinds, v.compactions,
                        v.restores, length(v.view)
                 FROM views v JOIN sessions s ON s.id = v.session_id
                 WHERE v.session_id = ?1 AND v.checkpoint_revision = s.checkpoint_revision
                   AND s.shares_parent IS NULL AND v.revision <= s.revision",
            )
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| {
                    let count = |i| r.get::<_, i64>(i).map(|n| u64::try_from(n).unwrap_or(0));
                    Ok((
                        revision_of(r.get(0)?),
                        revision_of(r.get(1)?),
                        HistoryStats {
                            oldest_revision: revision_of(r.get(2)?),
                            rewinds: count(3)?,
                            compactions: count(4)?,
                            restores: count(5)?,
                        },
                        count(6)?,
                    ))
                })
                .optional()
            })
            .map_err(fail)?;
        let Some((head_revision, revision, stats, view_bytes)) = found else {
            return Ok(None);
        };
        if view_bytes > self.max_snapshot_bytes {
            return Ok(None);
        }
        // Decoded where SQLite holds it, as the checkpoint is.
        let view = conn
            .prepare_cached("SELECT view FROM views WHERE session_id = ?1")
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| {
                    let framed = r.get_ref(0)?.as_blob()?;
                    Ok(intact_frame(framed)
                        .filter(|&(_, used)| used == framed.len())
                        .and_then(|(state, _)| SessionSnapshot::decode_unvalidated(state).ok()))
                })
            })
            .map_err(fail)?;
        let Some(view) = view.filter(|v| v.id() == id && v.revision() == revision) else {
            return Ok(None);
        };
        let Some((revisions, bytes)) = self.entries_from(conn, id, revision)? else {
            return Ok(None);
        };
        telemetry::read(view_bytes.saturating_add(bytes.len() as u64));
        let mut entries = Vec::with_capacity(revisions.len());
        for (revision, range) in revisions {
            match entry_of_row(revision, &bytes[range]) {
                Ok(entry) => entries.push(entry),
                Err(_) => return Ok(None),
            }
        }
        Ok(LogSource::state_after_view(view, stats, entries)
            .ok()
            .filter(|s| s.revision() == head_revision))
    }

    /// The entries of `id` from revision `from` on; `None` past the store's size limit.
    fn entries_from(
        &self,
        conn: &Connection,
        id: &SessionId,
        from: Revision,
    ) -> Result<Option<EntryRows>> {
        let fail = |e| self.db.fail("load a compacted session", e);
        let mut statement = conn
            .prepare_cached(
                "SELECT revision, entry FROM entries WHERE session_id = ?1 AND revision >= ?2
                 ORDER BY revision",
            )
            .map_err(fail)?;
        let mut rows = statement
            .query(rusqlite::params![id.as_str(), revision_column(id, from)?])
            .map_err(fail)?;
        let (mut revisions, mut bytes) = (Vec::new(), Vec::new());
        while let Some(row) = rows.next().map_err(fail)? {
            let revision = revision_of(row.get(0).map_err(fail)?);
            let Ok(entry) = row.get_ref(1).map_err(fail)?.as_blob() else {
                return Ok(None);
            };
            if (bytes.len() + entry.len()) as u64 > self.max_snapshot_bytes {
                return Ok(None);
            }
            let start = bytes.len();
            bytes.extend_from_slice(entry);
            revisions.push((revision, start..bytes.len()));
        }
        Ok(Some((revisions, bytes)))
    }
}
