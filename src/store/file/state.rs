//! What is stored for a session, as a save needs to know it: reading and verifying a
//! session's base and journal, and the per-session memory ([`Known`]) that spares a save
//! re-reading files this store wrote itself.

use std::collections::HashMap;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::MutexGuard;

use chrono::{DateTime, Utc};

use super::journal;
use super::private_dir::{is_private, read_bytes, HEAD_BYTES, NAME_KEPT_CHANGING};
use super::summary::Stamp;
use super::{FileSessionStore, KNOWN_SESSIONS};
use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::window;
use crate::snapshot::{
    counts_after, decode_any_head, decode_head, decode_record, split_entry, Counts, EntryKind,
    HistoryStats, LogSource, SessionSnapshot, SHARED_DEPTH_BUDGET,
};
use crate::store::{check_revision, check_stored_id};

/// Base snapshots up to this size are read whole before they are decoded; larger ones a
/// window at a time (`window.rs`), so a load's peak memory is the session it builds plus a
/// window, not plus the file.
pub(super) const WHOLE_READ_BYTES: u64 = 256 * 1024;

/// The stored state of a session, as far as a save needs it.
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub(super) base: Stamp,
    pub(super) journal: Option<Stamp>,
    /// The stored revision: the last journal record's, or the base's.
    pub(super) revision: Revision,
    pub(super) created_at: DateTime<Utc>,
    /// The stored `updated_at`, when known (always, if `verified`): a snapshot claiming to
    /// derive from the stored state must agree on it too, so one merely labelled with the
    /// stored revision is written whole rather than appended to something else.
    pub(super) updated_at: Option<DateTime<Utc>>,
    /// The stored lengths, when known (always, if the journal holds records).
    pub(super) counts: Option<Counts>,
    /// Where the journal's intact records end, if it holds records for this base; `None`
    /// when there is no journal or it belongs to an older base.
    pub(super) journal_end: Option<u64>,
    /// Whether the base is private (mode 0600); a save rewrites one that is not.
    pub(super) base_private: bool,
    /// The base's own revision (the journal's records come after it).
    pub(super) base_revision: Revision,
    /// Whether the whole state was read and verified (or written by this store), so a
    /// record may be appended to it.
    pub(super) verified: bool,
    /// Whether this store has fsynced the directory since the session's files were named
    /// (so their names survive a power loss). A journal found on disk may have been
    /// created by a save that crashed or failed before its directory fsync.
    pub(super) dir_synced: bool,
    /// The journal's format, when it holds entries for this base: a save appends only to
    /// one of the current format, and rewrites one of format 1 first.
    pub(super) journal_version: Option<u32>,
    /// What the log holds beyond the stored state, when known (always, if `verified`).
    pub(super) stats: Option<HistoryStats>,
}

/// Keeps on `known` (a state just read) the marks this store set on the same files: a
/// save that could not make its record durable marked the state so the next save
/// rewrites it, and a directory fsync already made need not be made again.
fn keep_marks(before: &Known, known: &mut Known) {
    if before.base == known.base && before.journal == known.journal {
        known.verified &= before.verified;
        known.dir_synced |= before.dir_synced;
    }
}

/// Inserts `known` for `id`, emptying the map first when it is full.
fn insert_known(sessions: &mut HashMap<SessionId, Known>, id: &SessionId, known: Known) {
    if sessions.len() >= KNOWN_SESSIONS && !sessions.contains_key(id) {
        sessions.clear();
    }
    sessions.insert(id.clone(), known);
}

/// Why one attempt to read a session did not give it.
enum Moved {
    /// A fork's base was replaced while it was read: read it again.
    Again,
    Failed(Error),
}

impl From<Error> for Moved {
    fn from(error: Error) -> Self {
        Moved::Failed(error)
    }
}

fn kept_changing(path: std::path::PathBuf) -> Error {
    Error::Insecure {
        path,
        reason: "the session kept changing while it was read; if another program writes the store, retry",
    }
}

/// A session's base and journal as read together.
struct StoredFiles {
    /// The base, decoded but not validated.
    base: SessionSnapshot,
    base_meta: Metadata,
    /// The journal's bytes and metadata, if there is one.
    journal: Option<(Vec<u8>, Metadata)>,
    /// Whether the journal did not grow while it was read.
    unchanged: bool,
}

impl FileSessionStore {
    /// Reads and decodes the base snapshot at `path` (not yet validated) a window at a time,
    /// so a load never holds the file's bytes and the session they make at once; a file not
    /// in the shape this crate writes is read whole by the ordinary decoder instead.
    pub(super) fn read_base(&self, path: &Path) -> Result<Option<(SessionSnapshot, Metadata)>> {
        let limit = self.max_snapshot_bytes;
        self.read_checked_with(path, limit, |file, meta| {
            // A small file is read whole, which is quicker (measured: a 10-message session
            // loaded in 30 us through windows, 20 us whole), and holds little.
            let decoded = if meta.len() <= WHOLE_READ_BYTES {
                read_bytes(file, meta, path, limit, false)
                    .and_then(|bytes| SessionSnapshot::decode_unvalidated(&bytes))
            } else {
                match window::decode(file, meta.len(), limit) {
                    Ok(Some(snapshot)) => {
                        crate::telemetry::read(meta.len());
                        return Ok(snapshot);
                    }
                    Ok(None) => {
                        let bytes = read_bytes(file, meta, path, limit, false)?;
                        SessionSnapshot::decode_unvalidated(&bytes)
                    }
                    Err(window::Failure::TooLarge) => Err(Error::TooLarge {
                        location: Location::File(path.to_path_buf()),
                        size_bytes: limit.saturating_add(1),
                        limit_bytes: limit,
                    }),
                    Err(window::Failure::Io(e)) => Err(Error::io("read", path, e)),
                }
            };
            decoded.map_err(|e| e.at(&Location::file(path)))
        })
    }

    /// Reads and verifies the state of `id` (its base snapshot and the records of its
    /// journal); `Ok(None)` if there is none. Remembers what it read for later saves.
    pub(super) fn read(&self, id: &SessionId) -> Result<Option<SessionSnapshot>> {
        // A compacted session loads from its view checkpoint when that still describes
        // the stored files, without reading the history the compaction replaced.
        let read = match self.read_from_view(id) {
            Some(read) => Some(read),
            None => self.read_state(id, false)?,
        };
        Ok(read.map(|(snapshot, known)| {
            if let Some(known) = known {
                self.remember_unlocked_read(id, known);
            }
            snapshot
        }))
    }

    /// Remembers a state read from the files under the write lock, which is what is
    /// stored then, and returns what a save may rely on: `known`, with the marks this
    /// store set on the same files kept. (A save that could not make its record durable
    /// marked the state so the next save rewrites it; reading the same files does not
    /// lift that.)
    pub(super) fn remember_locked_read(&self, id: &SessionId, mut known: Known) -> Known {
        let mut sessions = self.known_sessions();
        if let Some(before) = sessions.get(id) {
            keep_marks(before, &mut known);
        }
        insert_known(&mut sessions, id, known.clone());
        known
    }

    /// Remembers a state read without the write lock (a load or a listing). A save may
    /// have stored a later revision since that read began, and what it remembered must
    /// not be replaced by the older state: a later save would take its files again
    /// (the stamps differ) and read them whole for nothing.
    pub(super) fn remember_unlocked_read(&self, id: &SessionId, mut known: Known) {
        let mut sessions = self.known_sessions();
        if let Some(before) = sessions.get(id) {
            if before.created_at == known.created_at && before.revision > known.revision {
                return;
            }
            keep_marks(before, &mut known);
        }
        insert_known(&mut sessions, id, known);
    }

    /// [`read`](Self::read), also returning what a save needs to know of the state read,
    /// when the files did not change while they were read.
    ///
    /// Reads take no lock, so a save replacing the base meanwhile makes them read again.
    /// After a few such attempts (savers rewriting the session back to back can outpace a
    /// reader) the last one is made under the write lock, unless the caller holds it
    /// (`locked`), so a busy session is read late rather than reported unreadable.
    pub(super) fn read_state(
        &self,
        id: &SessionId,
        locked: bool,
    ) -> Result<Option<(SessionSnapshot, Option<Known>)>> {
        let mut attempts = 0;
        loop {
            match self.read_state_once(id, locked) {
                Err(Moved::Again) if attempts < 2 => attempts += 1,
                Err(Moved::Again) => return Err(kept_changing(self.path_of(id))),
                Err(Moved::Failed(e)) => return Err(e),
                Ok(read) => return Ok(read),
            }
        }
    }

    /// One attempt of [`read_state`](Self::read_state).
    fn read_state_once(
        &self,
        id: &SessionId,
        locked: bool,
    ) -> std::result::Result<Option<(SessionSnapshot, Option<Known>)>, Moved> {
        let Some(files) = self.read_files(id, locked)? else {
            return Ok(None);
        };
        let path = self.path_of(id);
        let journal_path = self.journal_path(id);
        let base_revision = files.base.revision();
        let shares = files.base.share().is_some();
        let journal = files.journal.as_ref().map(|(bytes, _)| bytes.as_slice());
        let (log, read) = self
            .log_of(id, files.base, journal, locked, SHARED_DEPTH_BUDGET)
            .map_err(|e| self.moved_or(e, shares, &path, &files.base_meta))?;
        let mut snapshot = log
            .state_at(None)
            .map_err(|e| {
                let at = if read.is_some() { &journal_path } else { &path };
                e.at(&Location::file(at))
            })
            .map_err(|e| self.moved_or(e, shares, &path, &files.base_meta))?;
        let revision = snapshot.revision();
        snapshot.mark_stored(revision);
        let known = files.unchanged.then(|| Known {
            base: Stamp::of(&files.base_meta),
            journal: files.journal.as_ref().map(|(_, meta)| Stamp::of(meta)),
            base_revision,
            revision,
            created_at: snapshot.created_at(),
            updated_at: Some(snapshot.updated_at()),
            counts: Some(snapshot.counts()),
            journal_end: read.as_ref().map(|r| r.end as u64),
            base_private: is_private(files.base_meta.permissions().mode()),
            verified: true,
            dir_synced: false,
            journal_version: read.as_ref().map(|r| r.version),
            stats: Some(snapshot.history_stats()),
        });
        Ok(Some((snapshot, known)))
    }

    /// The log of session `id` as stored (its base and journal, read as
    /// [`read_state`](Self::read_state) reads them), for what is worked out from it:
    /// `f` gets it with the journal's entries added. `locked`: the caller holds the write
    /// lock.
    pub(super) fn with_log<T>(
        &self,
        id: &SessionId,
        locked: bool,
        f: impl Fn(LogSource<'_>) -> Result<T>,
    ) -> Result<T> {
        self.with_log_within(id, locked, SHARED_DEPTH_BUDGET, f)
    }

    /// [`with_log`](Self::with_log), following at most `budget` parents of forks that
    /// share their first messages.
    pub(super) fn with_log_within<T>(
        &self,
        id: &SessionId,
        locked: bool,
        budget: u32,
        f: impl Fn(LogSource<'_>) -> Result<T>,
    ) -> Result<T> {
        let path = self.path_of(id);
        let journal_path = self.journal_path(id);
        let mut attempts = 0;
        loop {
            let files = self
                .read_files(id, locked)?
                .ok_or_else(|| Error::NotFound { id: id.clone() })?;
            let shares = files.base.share().is_some();
            let journal = files.journal.as_ref().map(|(bytes, _)| bytes.as_slice());
            let outcome = self
                .log_of(id, files.base, journal, locked, budget)
                .and_then(|(log, _)| f(log).map_err(|e| e.at(&Location::file(&journal_path))));
            match outcome.map_err(|e| self.moved_or(e, shares, &path, &files.base_meta)) {
                Err(Moved::Again) if attempts < 2 => attempts += 1,
                Err(Moved::Again) => return Err(kept_changing(path)),
                Err(Moved::Failed(e)) => return Err(e),
                Ok(value) => return Ok(value),
            }
        }
    }

    /// `error`, met reading a base that shares its parent's messages (`shares`), as
    /// [`Moved::Again`] if that base was replaced meanwhile: a fork whose parent went
    /// while it was read holds its own copy by then, in a new base, so it is read again.
    fn moved_or(&self, error: Error, shares: bool, path: &Path, read: &Metadata) -> Moved {
        let moved = shares
            && error.is_corrupt()
            && self
                .fs
                .symlink_metadata(path)
                .is_ok_and(|now| (now.dev(), now.ino()) != (read.dev(), read.ino()));
        if moved {
            Moved::Again
        } else {
            Moved::Failed(error)
        }
    }

    /// The log of `base` and its `journal`: the parent's state a fork shares attached (see
    /// [`shared_prefix`](Self::shared_prefix)), and the journal's entries added if it
    /// follows the base.
    fn log_of<'a>(
        &self,
        id: &SessionId,
        base: SessionSnapshot,
        journal: Option<&'a [u8]>,
        locked: bool,
        budget: u32,
    ) -> Result<(LogSource<'a>, Option<journal::ReadJournal>)> {
        let path = self.path_of(id);
        let journal_path = self.journal_path(id);
        let shares = base.share().is_some();
        let mut log = LogSource::new(base);
        let read = match journal {
            Some(bytes) => journal::read_into(&mut log, bytes)
                .map_err(|e| e.at(&Location::file(&journal_path)))?,
            None => None,
        };
        // A journal that starts with a checkpoint entry holds the whole state: the base's
        // shared messages are not needed then.
        if shares && !read.as_ref().is_some_and(|r| r.restarted) {
            let prefix = self
                .shared_prefix(&log.checkpoint, locked, budget)
                .map_err(|e| e.at(&Location::file(&path)))?;
            if let Some(parent) = prefix {
                log.set_prefix(parent);
            }
        }
        if let Some(base_counts) = read.as_ref().and_then(|r| r.base_counts) {
            let start = log.start_counts();
            if base_counts != start {
                return Err(Error::inconsistent(format!(
                    "the journal's header says its base has {base_counts:?}, but the base has {start:?}"
                ))
                .at(&Location::file(&journal_path)));
            }
        }
        Ok((log, read))
    }

    /// Reads the base (decoded, not validated) and the journal bytes of `id`, one
    /// consistent pair; `Ok(None)` if there is no session.
    ///
    /// Reads take no lock, so a save replacing the base meanwhile makes them read again.
    /// After a few such attempts (savers rewriting the session back to back can outpace a
    /// reader) the last one is made under the write lock, unless the caller holds it
    /// (`locked`), so a busy session is read late rather than reported unreadable.
    fn read_files(&self, id: &SessionId, locked: bool) -> Result<Option<StoredFiles>> {
        const ATTEMPTS: usize = 3;
        let path = self.path_of(id);
        let journal_path = self.journal_path(id);
        let mut lock = None;
        for attempt in 0..=ATTEMPTS {
            if attempt == ATTEMPTS {
                if locked {
                    break;
                }
                lock = Some(self.lock.read(&*self.fs, &|| self.check_root())?);
            }
            // Until the attempt under the lock, a base replaced at every look is a reason
            // to read again, not yet an error.
            let retry_on_change = !locked && lock.is_none();
            let Some((base, base_meta)) = (match self.read_base(&path) {
                Err(Error::Insecure { reason, .. })
                    if retry_on_change && reason == NAME_KEPT_CHANGING =>
                {
                    continue
                }
                read => read?,
            }) else {
                return Ok(None);
            };
            check_stored_id(id, base.id(), &Location::file(&path))?;
            let journal = self.read_checked(&journal_path, self.max_snapshot_bytes, false)?;
            // The stamp is from before the read: if the journal grew meanwhile, what was
            // read is not what the stamp names.
            let unchanged = journal
                .as_ref()
                .is_none_or(|(bytes, meta)| bytes.len() as u64 == meta.len());
            // A rewrite may have replaced the base (and emptied the journal) while we
            // read: the journal read belongs to the new base then, so read both again.
            match self.fs.symlink_metadata(&path) {
                Ok(now) if (now.dev(), now.ino()) == (base_meta.dev(), base_meta.ino()) => {}
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::io("inspect", &path, e)),
            }
            drop(lock);
            return Ok(Some(StoredFiles {
                base,
                base_meta,
                journal,
                unchanged,
            }));
        }
        Err(Error::Insecure {
            path,
            reason: "the session kept changing while it was read; if another program writes the store, retry",
        })
    }

    /// The stored state of `id`, for a save. Called under the write lock.
    ///
    /// From memory if the files are the ones this store last saw (same inode, size and
    /// times, no torn tail, and the base's header still says the same revision). Otherwise,
    /// with `verify` (the save may append), by reading and verifying the whole state, so a
    /// record is only ever appended to a state that loads; without it, or if the state
    /// does not load, from the base's header and the journal's records, which is enough
    /// to decide the compare-and-swap of a full rewrite (and lets a save repair a base
    /// damaged past its header).
    pub(super) fn stored_state(&self, id: &SessionId, verify: bool) -> Result<Option<Known>> {
        let path = self.path_of(id);
        let journal_path = self.journal_path(id);
        let base_meta = match self.fs.symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("inspect", &path, e)),
        };
        let journal_meta = match self.fs.symlink_metadata(&journal_path) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("inspect", &journal_path, e)),
        };
        let cached = self.known_sessions().get(id).cloned();
        if let Some(known) = cached {
            let same_files = known.base == Stamp::of(&base_meta)
                && known.journal == journal_meta.as_ref().map(Stamp::of)
                && self.is_plain(&base_meta)
                && journal_meta.as_ref().is_none_or(|m| {
                    // Anything past the intact records (a torn tail, an old base's records)
                    // could have been replaced by as many new bytes: read it again.
                    self.is_plain(m) && m.len() == known.journal_end.unwrap_or(0)
                });
            if same_files && self.base_header_is(id, &known)? {
                return Ok(Some(known));
            }
        }
        if verify {
            match self.read_state(id, true) {
                // What was just read under the lock, never the map's entry read back: a
                // load running without the lock may have replaced that meanwhile.
                Ok(Some((_, Some(known)))) => {
                    return Ok(Some(self.remember_locked_read(id, known)))
                }
                // A state that does not load is described from its headers below, for a
                // save that repairs it. Any other failure (an I/O error) fails the save:
                // taking a readable session for a damaged one would replace its history.
                Err(e) if !e.is_corrupt() => return Err(e),
                _ => {}
            }
        }
        self.forget(id);
        let mut known = self.read_stored_state(id)?;
        if let Some(known) = &mut known {
            // A base loosened by another program (say 0644) must not be kept: the save
            // writes a new, private one instead of appending.
            known.base_private = is_private(base_meta.permissions().mode());
        }
        Ok(known)
    }

    /// Whether the base of `id` still starts with the revision and creation time `known`
    /// has for it: inode numbers are reused and timestamps can be coarse, so equal stamps
    /// alone could name a base written since by another process.
    pub(super) fn base_header_is(&self, id: &SessionId, known: &Known) -> Result<bool> {
        let path = self.path_of(id);
        let Some((head, _)) = self.read_checked(&path, self.max_snapshot_bytes, true)? else {
            return Ok(false);
        };
        Ok(matches!(
            SessionSnapshot::peek_header(&head, head.len() < HEAD_BYTES),
            Ok(Some(header)) if header.id == *id
                && header.revision == known.base_revision
                && header.created_at == known.created_at
        ))
    }

    /// [`stored_state`](Self::stored_state) read from the files.
    pub(super) fn read_stored_state(&self, id: &SessionId) -> Result<Option<Known>> {
        let path = self.path_of(id);
        let Some((head, base)) = self.read_checked(&path, self.max_snapshot_bytes, true)? else {
            return Ok(None);
        };
        let header = match SessionSnapshot::peek_header(&head, head.len() < HEAD_BYTES) {
            Ok(Some(header)) => header,
            // Not in the form this crate writes: decode the header from the whole file.
            Ok(None) => {
                let Some((bytes, _)) = self.read_checked(&path, self.max_snapshot_bytes, false)?
                else {
                    return Ok(None);
                };
                SessionSnapshot::peek_header(&bytes, true)
                    .map_err(|e| e.at(&Location::file(&path)))?
                    .ok_or_else(|| Error::inconsistent("the snapshot has no header"))?
            }
            Err(e) => return Err(e.at(&Location::file(&path))),
        };
        check_stored_id(id, &header.id, &Location::file(&path))?;
        let mut known = Known {
            base: Stamp::of(&base),
            journal: None,
            revision: header.revision,
            created_at: header.created_at,
            updated_at: None,
            counts: None,
            journal_end: None,
            base_private: true,
            base_revision: header.revision,
            // Only the header and the entries' heads were read: enough for a
            // compare-and-swap, not to append to.
            verified: false,
            dir_synced: false,
            journal_version: None,
            stats: None,
        };
        let journal_path = self.journal_path(id);
        let Some((bytes, meta)) =
            self.read_checked(&journal_path, self.max_snapshot_bytes, false)?
        else {
            return Ok(Some(known));
        };
        known.journal = Some(Stamp::of(&meta));
        let at_journal = |e: Error| e.at(&Location::file(&journal_path));
        if let Some(tail) =
            journal_tail(&bytes, id, header.revision, header.created_at).map_err(at_journal)?
        {
            known.journal_version = Some(tail.version);
            known.revision = tail.revision;
            known.counts = Some(tail.counts);
            known.journal_end = Some(tail.end as u64);
        }
        Ok(Some(known))
    }

    pub(super) fn known_sessions(&self) -> MutexGuard<'_, HashMap<SessionId, Known>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn remember(&self, id: &SessionId, known: Known) {
        insert_known(&mut self.known_sessions(), id, known);
    }

    pub(super) fn forget(&self, id: &SessionId) {
        self.known_sessions().remove(id);
    }

    /// For a snapshot known to be what is stored at its revision: its revision, if the
    /// store still holds exactly that state (same revision, creation and update times) in
    /// files that need no repair, so saving it writes nothing; `Ok(None)` to save it as
    /// usual; [`Error::Conflict`] if another writer moved the revision.
    pub(super) fn unchanged(&self, snapshot: &SessionSnapshot) -> Result<Option<Revision>> {
        let id = snapshot.id();
        let _lock = self.write_lock()?;
        self.check_root()?;
        self.check_lease(snapshot)?;
        // Verified (read whole if this store does not know it), so the update time is known.
        let stored = self.stored_state(id, true)?;
        check_revision(id, snapshot.revision(), stored.as_ref().map(|s| s.revision))?;
        Ok(stored
            .filter(|s| {
                s.verified
                    && s.created_at == snapshot.created_at()
                    && s.updated_at == Some(snapshot.updated_at())
                    && s.counts == Some(snapshot.counts())
                    // A base loosened by another program is rewritten private all the same.
                    && s.base_private
            })
            .map(|s| s.revision))
    }
}

/// Where a journal's entries for a base end, as its heads say (no body is read).
struct JournalTail {
    version: u32,
    revision: Revision,
    counts: Counts,
    end: usize,
}

/// The last revision, lengths and end of the entries `journal` holds for the base of
/// session `id` stored at `revision`, created at `created_at`, from their heads alone;
/// `None` if it holds none for that base.
///
/// # Errors
///
/// Corruption if the journal is damaged before its end, or an entry does not follow
/// the one before it; decoding errors of the heads.
fn journal_tail(
    journal: &[u8],
    id: &SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
) -> Result<Option<JournalTail>> {
    let frames = journal::split(journal)?;
    let Some(((_, first), records)) = frames.frames.split_first() else {
        return Ok(None);
    };
    let journal_header = journal::decode_header(first)?;
    // A journal that starts with a checkpoint entry (a retention's) counts from it.
    let restart = match (journal_header.journal, records.first()) {
        (1, _) | (_, None) => None,
        (_, Some((_, payload))) => {
            let (head, _) = split_entry(payload)?;
            Some(decode_any_head(head)?)
        }
    }
    .filter(|head| head.kind == EntryKind::Checkpoint);
    if !journal::journal_follows_base(
        &journal_header,
        restart.as_ref().map(|head| head.revision),
        id,
        revision,
        created_at,
    ) {
        return Ok(None);
    }
    let mut counts = journal_header.base;
    let mut revision = revision;
    let mut records = records;
    if let Some(head) = restart {
        counts = head.state;
        revision = head.revision;
        records = &records[1..];
    }
    if journal_header.journal == 1 {
        for (_, payload) in records {
            let change = decode_record(payload)?;
            if change.revision != revision.next() || !change.from.within(counts) {
                return Err(Error::inconsistent(format!(
                    "the record of revision {} does not follow revision {revision} with {counts:?}",
                    change.revision
                )));
            }
            counts = counts_after(&change);
            revision = change.revision;
        }
    } else {
        for (_, payload) in records {
            let (head, _) = split_entry(payload)?;
            let head = decode_head(head)?;
            if head.revision != revision.next() {
                return Err(Error::inconsistent(format!(
                    "the log entry of revision {} does not follow revision {revision}",
                    head.revision
                )));
            }
            counts = head.state;
            revision = head.revision;
        }
    }
    Ok(Some(JournalTail {
        version: u32::try_from(journal_header.journal).unwrap_or(0),
        revision,
        counts,
        end: frames.valid_end,
    }))
}
