//! Reading a session's log (its row's checkpoint and its entries, with the parent's
//! messages a sharing fork leaves out) and working out states from it with the crate's
//! log machinery; and forks sharing their parent's first messages: written without them,
//! loaded through the parent, given their own copy before the parent's history goes.

use rusqlite::{Connection, OptionalExtension};

use super::rows::revision_of;
use super::SqliteSessionStore;
use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::{
    decode_head, intact_frame, shared_prefix_of, sharing_checkpoint, split_entry, EntryHead,
    LogSource, SessionSnapshot, SHARED_DEPTH_BUDGET,
};
use crate::store::check_stored_id;
use crate::telemetry;

/// The head and body bytes of the entry stored in the `entries` row of `revision`.
///
/// # Errors
///
/// [`Error::Inconsistent`] if its frame is damaged or followed by other bytes, or it is
/// another revision's; decoding errors of its head.
pub(super) fn entry_of_row(revision: Revision, bytes: &[u8]) -> Result<(EntryHead, &[u8])> {
    let (payload, used) =
        intact_frame(bytes).ok_or_else(|| Error::inconsistent("an entry's frame is damaged"))?;
    if used != bytes.len() {
        return Err(Error::inconsistent("an entry has bytes after its frame"));
    }
    let (head, body) = split_entry(payload)?;
    let head = decode_head(head)?;
    if head.revision != revision {
        return Err(Error::inconsistent(format!(
            "the entry stored as revision {revision} is revision {}",
            head.revision
        )));
    }
    Ok((head, body))
}

/// The parent (id and revision) whose first messages a checkpoint leaves out.
pub(super) type SharedParent = Option<(SessionId, Revision)>;

/// A session's checkpoint and entries as read, one consistent state.
struct StoredLog {
    revision: Revision,
    checkpoint_revision: Revision,
    /// The checkpoint, decoded (not yet checked against the row).
    checkpoint: SessionSnapshot,
    /// Each entry's revision and where its bytes are in `entry_bytes`.
    entries: Vec<(Revision, std::ops::Range<usize>)>,
    /// Every entry's bytes, one after another (one allocation, not one per entry).
    entry_bytes: Vec<u8>,
}

impl SqliteSessionStore {
    /// Where a session's row is, for error messages.
    pub(super) fn row_location(&self, id: &str) -> Location {
        Location::Stored(format!(
            "SQLite database {} table sessions id {id:?}",
            self.db.path.display()
        ))
    }

    /// Where a session's entries are, for error messages.
    pub(super) fn entries_location(&self, id: &SessionId) -> Location {
        Location::Stored(format!(
            "SQLite database {} table entries of session {id}",
            self.db.path.display()
        ))
    }

    /// The checkpoint and entries of `id`, sizes checked before the bytes are read.
    fn read_log(&self, conn: &Connection, id: &SessionId) -> Result<StoredLog> {
        let fail = |e| self.db.fail("load a session", e);
        let row = conn
            .prepare_cached(
                "SELECT s.revision, s.checkpoint_revision, length(c.checkpoint), s.entry_bytes
                 FROM sessions s LEFT JOIN checkpoints c ON c.session_id = s.id
                 WHERE s.id = ?1",
            )
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<i64>>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .optional()
            })
            .map_err(fail)?;
        let (revision, checkpoint_revision, size, entry_bytes) =
            row.ok_or_else(|| Error::NotFound { id: id.clone() })?;
        let Some(size) = size else {
            return Err(Error::inconsistent("the session's row has no checkpoint")
                .at(&self.row_location(id.as_str())));
        };
        let size = u64::try_from(size).unwrap_or(0);
        if size > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                location: self.row_location(id.as_str()),
                size_bytes: size,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        let declared_entry_bytes = u64::try_from(entry_bytes).unwrap_or(0);
        if declared_entry_bytes > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                location: self.entries_location(id),
                size_bytes: declared_entry_bytes,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        // Decoded where SQLite holds it: a checkpoint of megabytes is not copied once more.
        let (checkpoint, checkpoint_bytes) = conn
            .prepare_cached("SELECT checkpoint FROM checkpoints WHERE session_id = ?1")
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| {
                    let bytes = r.get_ref(0)?.as_blob()?;
                    Ok((SessionSnapshot::decode_unvalidated(bytes), bytes.len()))
                })
            })
            .map_err(fail)?;
        let checkpoint = checkpoint.map_err(|e| e.at(&self.row_location(id.as_str())))?;
        let mut entries = Vec::new();
        let mut entry_bytes =
            Vec::with_capacity(usize::try_from(declared_entry_bytes).unwrap_or(0));
        let mut total = 0u64;
        {
            let mut statement = conn
                .prepare_cached(
                    "SELECT revision, entry FROM entries WHERE session_id = ?1 ORDER BY revision",
                )
                .map_err(fail)?;
            let mut rows = statement.query([id.as_str()]).map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                let revision: i64 = row.get(0).map_err(fail)?;
                let bytes = row
                    .get_ref(1)
                    .and_then(|v| Ok(v.as_blob()?))
                    .map_err(fail)?;
                total = total.saturating_add(bytes.len() as u64);
                // The column says how many bytes there are; the rows must agree.
                if total > self.max_snapshot_bytes {
                    return Err(Error::TooLarge {
                        location: self.entries_location(id),
                        size_bytes: total,
                        limit_bytes: self.max_snapshot_bytes,
                    });
                }
                let start = entry_bytes.len();
                entry_bytes.extend_from_slice(bytes);
                entries.push((revision_of(revision), start..entry_bytes.len()));
            }
        }
        telemetry::read((checkpoint_bytes as u64).saturating_add(total));
        Ok(StoredLog {
            revision: revision_of(revision),
            checkpoint_revision: revision_of(checkpoint_revision),
            checkpoint,
            entries,
            entry_bytes,
        })
    }

    /// Works `f` out from the log of `id` (its checkpoint, the parent's messages it shares,
    /// its entries), every entry's body still bytes until a view needs it. Follows at most
    /// `budget` sharing parents.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no session `id`; a corrupt-kind error naming the row
    /// or its entries for anything that does not decode or does not follow.
    pub(super) fn with_log<T>(
        &self,
        conn: &Connection,
        id: &SessionId,
        budget: u32,
        f: impl FnOnce(LogSource<'_>) -> Result<T>,
    ) -> Result<T> {
        let stored = self.read_log(conn, id)?;
        let location = self.row_location(id.as_str());
        let entries_location = self.entries_location(id);
        let base = stored.checkpoint;
        check_stored_id(id, base.id(), &location)?;
        if base.revision() != stored.checkpoint_revision {
            return Err(Error::inconsistent(format!(
                "the checkpoint is revision {} but the row says {}",
                base.revision(),
                stored.checkpoint_revision
            ))
            .at(&location));
        }
        let prefix = self
            .shared_prefix(conn, &base, budget)
            .map_err(|e| e.at(&location))?;
        let mut log = LogSource::new(base);
        if let Some(parent) = prefix {
            log.set_prefix(parent);
        }
        let at_entries = |e: Error| e.at(&entries_location);
        for (revision, range) in &stored.entries {
            let (head, body) =
                entry_of_row(*revision, &stored.entry_bytes[range.clone()]).map_err(at_entries)?;
            log.push_bytes(head, body).map_err(at_entries)?;
        }
        let last = log.last_revision();
        if last != stored.revision {
            return Err(Error::inconsistent(format!(
                "the checkpoint and its {} entries reach revision {last} but the row says {}",
                stored.entries.len(),
                stored.revision
            ))
            .at(&location));
        }
        f(log).map_err(at_entries)
    }

    /// For a checkpoint that shares its first messages with its parent: the parent's
    /// state at the revision the fork was made from (following at most `budget`
    /// parents); `None` for one that holds its own messages.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the parent is missing, is another session now, no
    /// longer keeps that revision or has fewer messages than the fork shares, or the chain
    /// is longer than the store writes.
    fn shared_prefix(
        &self,
        conn: &Connection,
        base: &SessionSnapshot,
        budget: u32,
    ) -> Result<Option<SessionSnapshot>> {
        shared_prefix_of(base, budget, |parent, revision, budget| {
            self.with_log(conn, parent, budget, |log| log.state_at(Some(revision)))
        })
    }

    /// The checkpoint the first save of `snapshot` writes at `revision`: for a fork made
    /// from a stored revision of a session this database holds, with the same first
    /// messages there, the checkpoint without them and the parent it shares (its id and
    /// revision); otherwise the whole snapshot. In the save's transaction, so the parent
    /// cannot go meanwhile.
    pub(super) fn checkpoint_bytes(
        &self,
        conn: &Connection,
        snapshot: &SessionSnapshot,
        revision: Revision,
    ) -> Result<(Vec<u8>, SharedParent)> {
        let shared = sharing_checkpoint(snapshot, revision, |lineage| {
            self.with_log(conn, &lineage.parent, SHARED_DEPTH_BUDGET, |log| {
                log.state_at(Some(lineage.parent_revision))
            })
        })?;
        if let (Some(bytes), Some(lineage)) = (shared, snapshot.lineage()) {
            return Ok((
                bytes,
                Some((lineage.parent.clone(), lineage.parent_revision)),
            ));
        }
        Ok((snapshot.to_json_with_revision(revision)?, None))
    }

    /// Makes every fork that shares its first messages with `parent` (a revision before
    /// `before`, or any with `None`) hold its own copy: its checkpoint is written again
    /// whole, at the same revision, so its entries still follow it. In the transaction
    /// that is about to drop the parent's history (a delete, a replacement, a trim),
    /// before it does. A fork whose state cannot be worked out (its own row is damaged) is
    /// passed over: it does not load either way.
    ///
    /// # Errors
    ///
    /// Database errors; nothing is kept of the transaction then.
    pub(super) fn materialize_forks_of(
        &self,
        conn: &Connection,
        parent: &SessionId,
        before: Option<Revision>,
    ) -> Result<()> {
        let fail = |e| self.db.fail("find the forks sharing a session", e);
        let forks: Vec<String> = {
            let mut statement = conn
                .prepare_cached(
                    "SELECT id FROM sessions WHERE shares_parent = ?1
                       AND (?2 IS NULL OR shares_revision < ?2)",
                )
                .map_err(fail)?;
            let before = before.map(|r| i64::try_from(r.as_u64()).unwrap_or(i64::MAX));
            let rows = statement
                .query_map(rusqlite::params![parent.as_str(), before], |r| r.get(0))
                .map_err(fail)?;
            rows.collect::<rusqlite::Result<_>>().map_err(fail)?
        };
        for key in forks {
            let Ok(fork) = SessionId::parse(&key) else {
                continue;
            };
            let checkpoint: Vec<u8> = conn
                .prepare_cached("SELECT checkpoint FROM checkpoints WHERE session_id = ?1")
                .and_then(|mut s| s.query_row([fork.as_str()], |r| r.get(0)))
                .map_err(fail)?;
            let whole = SessionSnapshot::decode_unvalidated(&checkpoint).and_then(|base| {
                let revision = base.revision();
                let prefix = self.shared_prefix(conn, &base, SHARED_DEPTH_BUDGET)?;
                let mut log = LogSource::new(base);
                if let Some(prefix) = prefix {
                    log.set_prefix(prefix);
                }
                let whole = log.state_at(Some(revision))?;
                whole.to_json_with_revision(revision)
            });
            let bytes = match whole {
                Ok(bytes) => bytes,
                Err(e) if e.is_corrupt() || e.kind() == crate::ErrorKind::InvalidInput => continue,
                Err(e) => return Err(e),
            };
            conn.prepare_cached("UPDATE checkpoints SET checkpoint = ?2 WHERE session_id = ?1")
                .and_then(|mut s| s.execute(rusqlite::params![fork.as_str(), bytes]))
                .and_then(|_| {
                    conn.prepare_cached(
                        "UPDATE sessions SET shares_parent = NULL, shares_revision = NULL
                     WHERE id = ?1",
                    )
                })
                .and_then(|mut s| s.execute([fork.as_str()]))
                .map_err(|e| {
                    self.db
                        .fail("give a fork its own copy of its parent's messages", e)
                })?;
            telemetry::wrote(bytes.len() as u64);
        }
        Ok(())
    }
}
