//! Saving: one write transaction that checks the session's lease and revision
//! (compare-and-swap) and appends the change as one entry, or writes the session whole;
//! and the two ways a save writes nothing: a snapshot unchanged since it was stored, and
//! a save retried after its acknowledgement was lost.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension};

use super::rows::{
    nanos, parse_counts, revision_column, revision_of, state_counts, summary_json, summary_of,
    to_i64,
};
use super::search::words_of;
use super::view::Compacted;
use super::{lease, SqliteSessionStore};
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::SHARED_DEPTH_BUDGET;
use crate::snapshot::{EntryKind, HistoryStats, LogEntry, SessionSnapshot};
use crate::store::check_revision;
use crate::store::lease_rules;
use crate::telemetry;

/// A save's revision and times as the columns hold them (the session's row, its entry's
/// row, and the comparisons with what is stored): worked out (and checked to fit) once,
/// before anything is written.
#[derive(Debug, Clone, Copy)]
struct Stamp {
    /// The revision the save makes.
    revision: i64,
    created_ns: i64,
    updated_ns: i64,
}

/// The columns of a session's row a save decides by.
pub(super) struct Head {
    pub(super) revision: Revision,
    pub(super) created_ns: i64,
    pub(super) updated_ns: i64,
    state_counts: String,
    checkpoint_revision: Revision,
    entry_bytes: i64,
    summary: String,
    shares_parent: Option<String>,
}

/// The row of `id`, without its checkpoint's bytes; `None` if there is none.
pub(super) fn read_head(
    store: &SqliteSessionStore,
    conn: &Connection,
    id: &SessionId,
) -> Result<Option<Head>> {
    conn.prepare_cached(
        "SELECT revision, created_ns, updated_ns, state_counts, checkpoint_revision,
                entry_bytes, summary, shares_parent
         FROM sessions WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.query_row([id.as_str()], |r| {
            Ok(Head {
                revision: revision_of(r.get(0)?),
                created_ns: r.get(1)?,
                updated_ns: r.get(2)?,
                state_counts: r.get(3)?,
                checkpoint_revision: revision_of(r.get(4)?),
                entry_bytes: r.get(5)?,
                summary: r.get(6)?,
                shares_parent: r.get(7)?,
            })
        })
        .optional()
    })
    .map_err(|e| store.db.fail("read a session's row", e))
}

impl SqliteSessionStore {
    /// As [`SessionStore::save`](crate::SessionStore::save).
    pub(super) fn save_snapshot(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        let id = snapshot.id();
        let expected = snapshot.revision();
        let revision = expected.next();
        // The expected revision and the new one both fit the column (this also refuses
        // u64::MAX, which `next()` cannot pass).
        revision_column(id, expected)?;
        let stamp = Stamp {
            revision: revision_column(id, revision)?,
            created_ns: nanos(id, snapshot.created_at())?,
            updated_ns: nanos(id, snapshot.updated_at())?,
        };
        snapshot.fence()?;
        if snapshot.is_unchanged_since_stored() {
            if let Some(revision) = self.unchanged(snapshot, stamp)? {
                return Ok(revision);
            }
        }
        // Encoded before the write lock is taken: what the save appends if the snapshot
        // derives from the stored state.
        let derived = match snapshot.entry_since_stored(revision) {
            Some(entry) => Some(stored_form(&entry, id)?),
            None => None,
        };
        self.db.write(|tx| {
            let stored = read_head(self, tx, id)?;
            // Before the revision: a writer whose lease was taken over is told so,
            // whatever its revision.
            let record = lease::record(self, tx, id)?;
            lease_rules::check_save_at(snapshot, record.as_ref(), Utc::now())?;
            let Some(stored) = stored else {
                check_revision(id, expected, None)?;
                let stats = snapshot.stats_once_saved(revision);
                return self.write_whole(tx, snapshot, stamp, None, stats);
            };
            if stored.revision != expected {
                // A save retried after its acknowledgement was lost gets its revision back.
                if self.holds_save_of(tx, snapshot, &stored, stamp)? {
                    return Ok(revision);
                }
                return Err(Error::Conflict {
                    id: id.clone(),
                    expected,
                    found: Some(stored.revision),
                });
            }
            // Another session deleted and created again under the same id: its log is not
            // this snapshot's, so the snapshot replaces it whole.
            if stored.created_ns != stamp.created_ns {
                let stats = HistoryStats {
                    oldest_revision: revision,
                    ..HistoryStats::default()
                };
                return self.write_whole(tx, snapshot, stamp, Some(&stored), stats);
            }
            // Redaction changed messages already stored: the earlier revisions would keep
            // the text the redactor now removes.
            if snapshot.replaces_history() {
                let stats = snapshot.stats_once_saved(revision);
                return self.write_whole(tx, snapshot, stamp, Some(&stored), stats);
            }
            // Every other save appends one entry: what the snapshot says changed since the
            // stored state it derives from, or else everything (an edit the history keeps).
            let follows = parse_counts(&stored.state_counts).is_some_and(|counts| {
                snapshot.derives_from(
                    stored.revision,
                    DateTime::from_timestamp_nanos(stored.created_ns),
                    DateTime::from_timestamp_nanos(stored.updated_ns),
                    counts,
                )
            });
            let entry = match derived.filter(|_| follows) {
                Some(derived) => derived,
                None => stored_form(&snapshot.entry_replacing_all(revision)?, id)?,
            };
            let stats = self.stored_stats(tx, id, &stored)?.after(entry.kind);
            self.append(tx, snapshot, stamp, &stored, &entry, stats)
        })
    }

    /// Appends `entry` as the session's next revision, with its words, in the save's
    /// transaction.
    fn append(
        &self,
        conn: &Connection,
        snapshot: &SessionSnapshot,
        stamp: Stamp,
        stored: &Head,
        entry: &StoredEntry,
        stats: HistoryStats,
    ) -> Result<Revision> {
        let id = snapshot.id();
        let (words, kind, entry) = (&entry.words, entry.kind, &entry.bytes);
        let revision = stored.revision.next();
        let total = u64::try_from(stored.entry_bytes)
            .unwrap_or(0)
            .saturating_add(entry.len() as u64);
        if total > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                location: self.entries_location(id),
                size_bytes: total,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        let summary = self.summary_for(snapshot, revision, stats)?;
        let fail = |e| self.db.fail("append to a session", e);
        conn.prepare_cached(
            "UPDATE sessions SET revision = ?2, updated_ns = ?3, summary = ?4,
                    entry_bytes = entry_bytes + ?5, state_counts = ?6
             WHERE id = ?1",
        )
        .and_then(|mut s| {
            s.execute(rusqlite::params![
                id.as_str(),
                stamp.revision,
                stamp.updated_ns,
                summary,
                to_i64(entry.len() as u64),
                state_counts(snapshot.counts()),
            ])
        })
        .map_err(fail)?;
        conn.prepare_cached(
            "INSERT INTO entries (session_id, revision, entry) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut s| s.execute(rusqlite::params![id.as_str(), stamp.revision, entry]))
        .map_err(fail)?;
        self.index_words(conn, id, revision, words)?;
        telemetry::wrote((entry.len() + summary.len()) as u64);
        if kind == EntryKind::Compaction
            && stored.shares_parent.is_none()
            && snapshot.share().is_none()
        {
            self.write_view(
                conn,
                &Compacted {
                    snapshot,
                    revision,
                    checkpoint_revision: stored.checkpoint_revision,
                    entry_bytes: total,
                    stats,
                },
            )?;
        }
        Ok(revision)
    }

    /// Writes the whole snapshot as the session's checkpoint at its revision plus one: a
    /// new session's row, or over the row `replaced` (another session under the same id,
    /// or a history the snapshot replaces), whose entries go with it. Forks that share the
    /// replaced history get their own copy first. In the save's transaction.
    fn write_whole(
        &self,
        conn: &Connection,
        snapshot: &SessionSnapshot,
        stamp: Stamp,
        replaced: Option<&Head>,
        stats: HistoryStats,
    ) -> Result<Revision> {
        let id = snapshot.id();
        let revision = snapshot.revision().next();
        if replaced.is_some() {
            self.materialize_forks_of(conn, id, None)?;
        }
        let (bytes, shares) = if replaced.is_none() {
            self.checkpoint_bytes(conn, snapshot, revision)?
        } else {
            (snapshot.to_json_with_revision(revision)?, None)
        };
        if bytes.len() as u64 > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                location: self.row_location(id.as_str()),
                size_bytes: bytes.len() as u64,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        let summary = self.summary_for(snapshot, revision, stats)?;
        let (shares_parent, shares_revision) = match &shares {
            Some((parent, at)) => (Some(parent.as_str()), Some(revision_column(parent, *at)?)),
            None => (None, None),
        };
        let fail = |e| self.db.fail("save a session", e);
        conn.prepare_cached("DELETE FROM entries WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(fail)?;
        self.drop_view(conn, id)?;
        // The checkpoint holds every message of the history now (a shared prefix too: a
        // fork's search finds what it shares).
        self.forget_words(conn, id)?;
        self.index_words(conn, id, revision, &words_of(snapshot.transcript()))?;
        // The archive state of a replaced row stays, as with any other save.
        conn.prepare_cached(
            "INSERT INTO sessions (id, revision, created_ns, updated_ns, archived, state_counts,
                                   checkpoint_revision, entry_bytes, shares_parent,
                                   shares_revision, summary)
             VALUES (?1, ?2, ?3, ?4, 0, ?5, ?2, 0, ?6, ?7, ?8)
             ON CONFLICT (id) DO UPDATE SET
                 revision = excluded.revision, created_ns = excluded.created_ns,
                 updated_ns = excluded.updated_ns, state_counts = excluded.state_counts,
                 checkpoint_revision = excluded.checkpoint_revision, entry_bytes = 0,
                 shares_parent = excluded.shares_parent,
                 shares_revision = excluded.shares_revision,
                 summary = excluded.summary",
        )
        .and_then(|mut s| {
            s.execute(rusqlite::params![
                id.as_str(),
                stamp.revision,
                stamp.created_ns,
                stamp.updated_ns,
                state_counts(snapshot.counts()),
                shares_parent,
                shares_revision,
                summary,
            ])
        })
        .map_err(fail)?;
        conn.prepare_cached(
            "INSERT INTO checkpoints (session_id, checkpoint) VALUES (?1, ?2)
             ON CONFLICT (session_id) DO UPDATE SET checkpoint = excluded.checkpoint",
        )
        .and_then(|mut s| s.execute(rusqlite::params![id.as_str(), bytes]))
        .map_err(fail)?;
        telemetry::wrote((bytes.len() + summary.len()) as u64);
        Ok(revision)
    }

    /// The history stats of the stored log of `id`: from its summary, or worked out from
    /// the log if the summary does not decode (it is a cache of the log).
    fn stored_stats(
        &self,
        conn: &Connection,
        id: &SessionId,
        stored: &Head,
    ) -> Result<HistoryStats> {
        match summary_of(id.as_str(), &stored.summary, false, &self.indexed, || {
            self.row_location(id.as_str())
        }) {
            Ok((summary, _)) => Ok(summary.history),
            Err(_) => self
                .with_log(conn, id, SHARED_DEPTH_BUDGET, |log| log.state_at(None))
                .map(|s| s.history_stats()),
        }
    }

    /// Whether the stored state one revision ahead of `snapshot` is `snapshot` saved:
    /// the same times and lengths, and the stored entry (or checkpoint) byte for byte
    /// what this save writes. A save retried after its acknowledgement was lost.
    fn holds_save_of(
        &self,
        conn: &Connection,
        snapshot: &SessionSnapshot,
        stored: &Head,
        stamp: Stamp,
    ) -> Result<bool> {
        let id = snapshot.id();
        let revision = snapshot.revision().next();
        if stored.revision != revision
            || stored.created_ns != stamp.created_ns
            || stored.updated_ns != stamp.updated_ns
            || stored.state_counts != state_counts(snapshot.counts())
        {
            return Ok(false);
        }
        let fail = |e| self.db.fail("read a session's last change", e);
        if stored.checkpoint_revision == revision {
            let checkpoint: Vec<u8> = conn
                .prepare_cached("SELECT checkpoint FROM checkpoints WHERE session_id = ?1")
                .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)))
                .map_err(fail)?;
            if stored.shares_parent.is_some() {
                return Ok(snapshot
                    .share()
                    .map(|share| snapshot.to_sharing_checkpoint(revision, share))
                    .transpose()?
                    .is_some_and(|bytes| bytes == checkpoint));
            }
            return snapshot.is_stored_as_checkpoint(&checkpoint);
        }
        let entry: Option<Vec<u8>> = conn
            .prepare_cached("SELECT entry FROM entries WHERE session_id = ?1 AND revision = ?2")
            .and_then(|mut s| {
                s.query_row(rusqlite::params![id.as_str(), stamp.revision], |r| r.get(0))
                    .optional()
            })
            .map_err(fail)?;
        match entry {
            Some(entry) => snapshot.is_stored_as_entry(&entry),
            None => Ok(false),
        }
    }

    /// For a snapshot known to be what is stored at its revision: its revision if the row
    /// still holds exactly that state, so saving it writes nothing; `Ok(None)` to save it
    /// as usual; [`Error::Conflict`] if another writer moved the revision (or deleted the
    /// session); a lease refusal for a fenced writer, as a write would get.
    fn unchanged(&self, snapshot: &SessionSnapshot, stamp: Stamp) -> Result<Option<Revision>> {
        let id = snapshot.id();
        self.db.read(|tx| {
            let stored = read_head(self, tx, id)?;
            let record = lease::record(self, tx, id)?;
            lease_rules::check_save_at(snapshot, record.as_ref(), Utc::now())?;
            check_revision(id, snapshot.revision(), stored.as_ref().map(|s| s.revision))?;
            Ok(stored
                .filter(|s| s.created_ns == stamp.created_ns && s.updated_ns == stamp.updated_ns)
                .map(|s| s.revision))
        })
    }
}

/// An entry as a save writes it: its bytes, its kind, and the words of the messages it
/// adds (for the search index).
struct StoredEntry {
    bytes: Vec<u8>,
    kind: EntryKind,
    words: String,
}

/// What the entries row and the search index hold of `entry`.
fn stored_form(entry: &LogEntry, id: &SessionId) -> Result<StoredEntry> {
    Ok(StoredEntry {
        bytes: entry.to_bytes(id)?,
        kind: entry.kind(),
        words: words_of(entry.messages()),
    })
}

impl SqliteSessionStore {
    /// The summary column of `snapshot` saved at `revision` with history `stats`, with
    /// the values of the store's indexed metadata keys.
    fn summary_for(
        &self,
        snapshot: &SessionSnapshot,
        revision: Revision,
        stats: HistoryStats,
    ) -> Result<String> {
        let mut listed = self.indexed.summary_of(snapshot);
        listed.revision = revision;
        listed.history = stats;
        summary_json(&listed, &self.indexed)
    }
}
