//! Writing a session: appending one log entry to its journal (every save of a stored
//! session), rewriting a journal of an older format with the entry added, or writing the
//! whole session as a new base (its first save, or a save that repairs a damaged one).

use std::fs::File;
use std::io::{self};
use std::path::Path;

use super::atomic::{self, ReplaceError};
use super::journal;
use super::state::Known;
use super::summary::Stamp;
use super::view::Appended;
use super::FileSessionStore;
use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::{Counts, EntryKind, HistoryStats, SessionSnapshot};

use chrono::{DateTime, Utc};

/// The state an appended entry makes, as far as the store's own records need it.
pub(super) struct After<'a> {
    pub(super) id: &'a SessionId,
    pub(super) updated_at: DateTime<Utc>,
    pub(super) counts: Counts,
    /// The whole state, when the caller has it: the listing summary is written from it.
    /// Without it (a restore written from the log's heads alone) the summary is left to
    /// go stale, and the next listing reads the session instead.
    pub(super) snapshot: Option<&'a SessionSnapshot>,
    /// What the entry is: a compaction's state is also written as the view checkpoint.
    pub(super) kind: EntryKind,
}

impl<'a> After<'a> {
    /// What saving `snapshot` as an entry of `kind` makes.
    pub(super) fn snapshot(snapshot: &'a SessionSnapshot, kind: EntryKind) -> Self {
        After {
            id: snapshot.id(),
            updated_at: snapshot.updated_at(),
            counts: snapshot.counts(),
            snapshot: Some(snapshot),
            kind,
        }
    }
}

impl FileSessionStore {
    /// Appends `entry` (the bytes of the log entry that takes the stored state to
    /// `snapshot`) to the journal, and returns the new revision. The stored state was read
    /// and verified (or written by this store), so the entry follows a state that loads.
    pub(super) fn append(
        &self,
        after: &After<'_>,
        stored: &Known,
        entry: &[u8],
        stats: HistoryStats,
    ) -> Result<Revision> {
        let id = after.id;
        let revision = stored.revision.next();
        let mut stored = stored.clone();
        if !stored.base_private {
            // A base loosened by another program (say 0644) is replaced by a private copy
            // of itself before anything is added to the session.
            stored.base = self.reprivatize_base(id)?;
            stored.base_private = true;
        }
        let counts = stored.counts.ok_or_else(|| {
            Error::inconsistent("the stored lengths of a verified session are unknown")
        })?;
        // A live journal is appended to; otherwise a new one starts with a header naming
        // the base it follows (which is then the stored state itself).
        let (offset, header) = match stored.journal_end {
            Some(end) => (end, Vec::new()),
            None => (
                0,
                journal::encode_header(&journal::header_for(
                    id,
                    stored.revision,
                    stored.created_at,
                    counts,
                ))?,
            ),
        };
        let path = self.journal_path(id);
        let new_end = offset + (header.len() + entry.len()) as u64;
        if new_end > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                location: Location::File(path),
                size_bytes: new_end,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        if self.durable() && !stored.dir_synced {
            // The base or the journal may have been named by a save whose directory fsync
            // failed or never ran: an append acknowledged now must not rest on names a
            // power loss could still undo.
            self.fs.sync_dir(&self.root).map_err(|e| {
                Error::io(
                    "sync the store directory before appending in",
                    &self.root,
                    e,
                )
            })?;
        }
        let (file, created) = self.open_journal_at(id, &path, offset)?;
        let header_len = header.len();
        let mut bytes = header;
        bytes.extend_from_slice(entry);
        // What the log holds with the entry: also what a failed fsync that leaves the
        // entry in place remembers.
        stored.stats = Some(stats);
        self.write_record(after, &stored, &file, offset, &bytes, created)?;
        let journal_stamp = file.metadata().ok().map(|meta| Stamp::of(&meta));
        match journal_stamp {
            Some(stamp) => self.remember(
                id,
                Known {
                    base: stored.base,
                    journal: Some(stamp),
                    revision,
                    created_at: stored.created_at,
                    updated_at: Some(after.updated_at),
                    counts: Some(after.counts),
                    journal_end: Some(new_end),
                    base_private: true,
                    base_revision: stored.base_revision,
                    verified: true,
                    dir_synced: stored.dir_synced || self.durable(),
                    journal_version: Some(journal::JOURNAL_VERSION),
                    stats: Some(stats),
                },
            ),
            None => self.forget(id),
        }
        self.extend_index(id, stored.revision, revision, after.counts);
        if let Some(snapshot) = after.snapshot {
            self.write_summary(snapshot, revision, stats, stored.base, journal_stamp);
            if after.kind == EntryKind::Compaction {
                self.write_view(&Appended {
                    stored: &stored,
                    journal: &file,
                    offset,
                    written: &bytes,
                    header_len,
                    snapshot,
                    revision,
                    stats,
                });
            }
        }
        Ok(revision)
    }

    /// The journal of `id` at `path`, open for an append at `offset` (emptied first when
    /// the append starts it again at 0), and whether it was created.
    fn open_journal_at(&self, id: &SessionId, path: &Path, offset: u64) -> Result<(File, bool)> {
        Ok(match self.open_checked(path, true)? {
            Some((file, meta)) => {
                if offset == 0 {
                    // An older base's entries: gone for good before new ones are written,
                    // and a view checkpoint of that base with them (a rewrite whose rename
                    // was not durable left both).
                    self.empty_journal(&file, meta.len())
                        .map_err(|e| Error::io("empty the journal", path, e))?;
                    let _ = self.fs.remove_file(&self.view_path(id));
                }
                (file, false)
            }
            // Gone since it was read (removed by hand): entries after `offset` would follow
            // a hole, so the save fails rather than write them there.
            None if offset > 0 => {
                self.forget(id);
                return Err(Error::inconsistent(format!(
                    "the journal {} disappeared while session {id} was saved; load the session again",
                    path.display()
                ))
                .at(&Location::file(path)));
            }
            None => match self.fs.create_private(path) {
                Ok(file) => (file, true),
                Err(e) => return Err(Error::io("create the journal", path, e)),
            },
        })
    }

    /// Replaces the base of `id` with a private copy of its own bytes, and returns the new
    /// file's stamp. Under the write lock.
    fn reprivatize_base(&self, id: &SessionId) -> Result<Stamp> {
        let path = self.path_of(id);
        let (bytes, _) = self
            .read_checked(&path, self.max_snapshot_bytes, false)?
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        self.replace_file(id, &path, &bytes)?;
        let meta = self
            .fs
            .symlink_metadata(&path)
            .map_err(|e| Error::io("inspect", &path, e))?;
        Ok(Stamp::of(&meta))
    }

    /// Replaces `path` (a file of session `id`) with `bytes`, atomically and, with
    /// [`Durability::Sync`](super::Durability::Sync), durably.
    pub(super) fn replace_file(
        &self,
        id: &SessionId,
        path: &std::path::Path,
        bytes: &[u8],
    ) -> Result<()> {
        match atomic::replace(
            &*self.fs,
            &self.root,
            path,
            &format!(".{id}."),
            bytes,
            self.durable(),
        ) {
            Ok(()) => Ok(()),
            Err(ReplaceError::Unchanged(err)) => Err(err),
            Err(ReplaceError::NotDurable(source)) => {
                self.forget(id);
                Err(Error::NotDurable {
                    id: id.clone(),
                    revision: Revision::NEW,
                    dir: self.root.clone(),
                    source,
                })
            }
        }
    }

    /// Writes the journal again whole, in the current format, with `entry` added: every
    /// entry read back (a journal of format 1, written by an earlier release, has its
    /// records turned into log entries), verified, into a new file that is synced and
    /// renamed over the old one. One atomic replacement, so a crash leaves the old journal
    /// or the new one, whole; and nothing in the new file depends on an fdatasync that
    /// failed before. The base is not touched (the new journal follows it as the old one
    /// did).
    ///
    /// # Errors
    ///
    /// A corrupt-kind error if the stored state does not load (the caller repairs it);
    /// [`Error::Conflict`] if what loads is not the revision the save was checked against
    /// (a record whose fdatasync failed did not keep its pages); I/O errors otherwise.
    pub(super) fn rewrite_journal(
        &self,
        snapshot: &SessionSnapshot,
        stored: &Known,
        entry: &[u8],
        stats: HistoryStats,
    ) -> Result<Revision> {
        let id = snapshot.id();
        let revision = stored.revision.next();
        let journal_path = self.journal_path(id);
        let (base, counts, entries) = self.with_log(id, true, |log| {
            let last = log.last_revision();
            if last != stored.revision {
                return Err(Error::conflict(id, snapshot.revision(), Some(last)));
            }
            // Every entry decoded and the state they make checked, before anything is
            // written: a damaged state is repaired instead.
            log.into_checked_entries()
        })?;
        let mut bytes = if base.revision() == stored.base_revision {
            journal::encode_journal(&base, counts, &entries)?
        } else {
            // The log starts from a checkpoint entry (a retention that did not get to write
            // it as the base): it stays the journal's first entry, after a header for the
            // base as it is.
            journal::encode_restarted_journal(stored.base_revision, &base, &entries)?
        };
        let end = bytes.len() + entry.len();
        bytes.extend_from_slice(entry);
        if end as u64 > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                location: Location::File(journal_path),
                size_bytes: end as u64,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        self.forget(id);
        self.check_journal_slot(id)?;
        match self.replace_file(id, &journal_path, &bytes) {
            Ok(()) => {}
            Err(Error::NotDurable { source, .. }) => {
                return Err(Error::NotDurable {
                    id: id.clone(),
                    revision,
                    dir: self.root.clone(),
                    source,
                })
            }
            Err(err) => return Err(err),
        }
        if let Ok(meta) = self.fs.symlink_metadata(&journal_path) {
            let journal = Stamp::of(&meta);
            self.remember(
                id,
                Known {
                    journal: Some(journal),
                    revision,
                    updated_at: Some(snapshot.updated_at()),
                    counts: Some(snapshot.counts()),
                    journal_end: Some(end as u64),
                    verified: true,
                    dir_synced: self.durable(),
                    journal_version: Some(journal::JOURNAL_VERSION),
                    stats: Some(stats),
                    ..stored.clone()
                },
            );
            self.write_summary(snapshot, revision, stats, stored.base, Some(journal));
        }
        Ok(revision)
    }

    /// Writes `bytes` (an entry, after a header for a new journal) at `offset` of the
    /// journal of `snapshot`'s session and makes them durable. On failure the bytes are
    /// taken back off where possible, so nothing changed; see the type docs otherwise.
    pub(super) fn write_record(
        &self,
        after: &After<'_>,
        stored: &Known,
        file: &File,
        offset: u64,
        bytes: &[u8],
        created: bool,
    ) -> Result<()> {
        let id = after.id;
        let path = self.journal_path(id);
        let revision = stored.revision.next();
        // Cut a torn tail (or an older base's records) first, so the new record can never
        // be read as part of damaged bytes before it.
        let written = self
            .fs
            .set_len(file, offset)
            .and_then(|()| self.fs.write_all_at(file, bytes, offset))
            .map_err(|e| Error::io("append to", &path, e));
        if let Err(err) = written {
            self.forget(id);
            // Best effort: a partial record is a torn tail, cut by the next save anyway.
            let _ = self.fs.set_len(file, offset);
            return Err(err);
        }
        if self.durable() {
            // A failed fsync is never retried (the kernel may have dropped the pages); the
            // record is taken back off instead, so nothing changed.
            if let Err(e) = self.fs.sync_data(file) {
                self.forget(id);
                // Taken back off, and the cut synced (the failed pages are gone with it),
                // so a power loss cannot bring back a save reported as failed.
                if self
                    .fs
                    .set_len(file, offset)
                    .and_then(|()| self.fs.sync_data(file))
                    .is_ok()
                {
                    return Err(Error::io("sync the journal", &path, e));
                }
                // The record stays, maybe without its pages: a later fdatasync could
                // "succeed" without them and leave a hole before later records. So the
                // next save of this session writes a whole new snapshot instead.
                if let Ok(meta) = file.metadata() {
                    self.remember(
                        id,
                        Known {
                            journal: Some(Stamp::of(&meta)),
                            revision,
                            updated_at: Some(after.updated_at),
                            counts: Some(after.counts),
                            journal_end: Some(meta.len()),
                            verified: false,
                            ..stored.clone()
                        },
                    );
                }
                return Err(Error::NotDurable {
                    id: id.clone(),
                    revision,
                    dir: self.root.clone(),
                    source: e,
                });
            }
            if created {
                if let Err(source) = self.fs.sync_dir(&self.root) {
                    self.forget(id);
                    return Err(Error::NotDurable {
                        id: id.clone(),
                        revision,
                        dir: self.root.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether the last change `stored` holds is the save of `snapshot` (made at the
    /// revision before it): the journal's last entry, or the base for a save written
    /// whole, is exactly what saving `snapshot` writes. Under the write lock; reads the
    /// journal (or the base) only when the revision, times and lengths say it may be.
    pub(super) fn holds_save_of(&self, snapshot: &SessionSnapshot, stored: &Known) -> Result<bool> {
        let id = snapshot.id();
        // What the store knows of its head decides most cases without reading anything: a
        // competing change differs in its time or lengths (both are in what it wrote).
        if stored.revision != snapshot.revision().next()
            || stored.created_at != snapshot.created_at()
            || stored.updated_at != Some(snapshot.updated_at())
            || stored.counts != Some(snapshot.counts())
            || !stored.verified
        {
            return Ok(false);
        }
        if stored.base_revision == stored.revision {
            let Some((base, _)) =
                self.read_checked(&self.path_of(id), self.max_snapshot_bytes, false)?
            else {
                return Ok(false);
            };
            return Ok(base == self.checkpoint_bytes(snapshot, stored.revision)?);
        }
        let Some(end) = stored.journal_end.and_then(|end| usize::try_from(end).ok()) else {
            return Ok(false);
        };
        let Some((journal, _)) =
            self.read_checked(&self.journal_path(id), self.max_snapshot_bytes, false)?
        else {
            return Ok(false);
        };
        let Some(intact) = journal.get(..end) else {
            return Ok(false);
        };
        let frames = journal::split(intact)?;
        // The header, then at least the entry at the stored revision.
        match frames.frames.last() {
            Some(&(at, _)) if frames.frames.len() >= 2 => {
                snapshot.is_stored_as_entry(&intact[at..])
            }
            _ => Ok(false),
        }
    }

    /// Acknowledges a retried save that [`holds_save_of`](Self::holds_save_of) found
    /// stored: first makes it durable (the first attempt may have failed at its fsync, or
    /// been written by a process that crashed before it), so the retry never acknowledges
    /// what a power loss could take back. Under the write lock.
    ///
    /// # Errors
    ///
    /// [`Error::NotDurable`] if an fsync fails: the change is stored, as before.
    pub(super) fn make_retry_durable(&self, id: &SessionId, stored: &Known) -> Result<Revision> {
        if self.durable() {
            let not_durable = |source| Error::NotDurable {
                id: id.clone(),
                revision: stored.revision,
                dir: self.root.clone(),
                source,
            };
            let path = if stored.base_revision == stored.revision {
                self.path_of(id)
            } else {
                self.journal_path(id)
            };
            if let Some((file, _)) = self.open_checked(&path, false)? {
                self.fs.sync_data(&file).map_err(not_durable)?;
            }
            self.fs.sync_dir(&self.root).map_err(not_durable)?;
            self.remember(
                id,
                Known {
                    dir_synced: true,
                    ..stored.clone()
                },
            );
        }
        Ok(stored.revision)
    }

    /// Writes `snapshot` as a new base at `revision` and empties the journal: the first
    /// save of a session, or one that replaces a stored state that does not load (whose
    /// history is lost with it). The log then starts at `revision`.
    pub(super) fn rewrite(
        &self,
        snapshot: &SessionSnapshot,
        revision: Revision,
    ) -> Result<Revision> {
        let stats = HistoryStats {
            oldest_revision: revision,
            ..HistoryStats::default()
        };
        let id = snapshot.id();
        let path = self.path_of(id);
        self.check_journal_slot(id)?;
        let bytes = self.checkpoint_bytes(snapshot, revision)?;
        if bytes.len() as u64 > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                location: Location::File(path),
                size_bytes: bytes.len() as u64,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        self.forget(id);
        let replaced = atomic::replace(
            &*self.fs,
            &self.root,
            &path,
            &format!(".{id}."),
            &bytes,
            self.durable(),
        );
        let not_durable = match replaced {
            Ok(()) => None,
            Err(ReplaceError::Unchanged(err)) => return Err(err),
            Err(ReplaceError::NotDurable(source)) => Some(source),
        };
        // A view checkpoint names the old base, so no load uses it again; it still holds
        // the old messages (unredacted ones, for a save that redacts), so it goes with the
        // journal's records: once the rename is durable (a power cut could bring the old
        // base back, which the view describes), and best effort, as emptying the journal.
        if not_durable.is_none() {
            let _ = self.fs.remove_file(&self.view_path(id));
        }
        // The journal's records are in the new base now, and its header names an older
        // revision, so it is ignored even if this truncation is lost in a crash.
        let journal_path = self.journal_path(id);
        let journal = match self.open_checked(&journal_path, true) {
            // The rename may not survive a power loss: the old base would come back, and
            // needs its journal. The next append empties it, after syncing the directory.
            Ok(Some((file, _))) if not_durable.is_some() => {
                file.metadata().ok().map(|meta| Stamp::of(&meta))
            }
            Ok(Some((file, meta))) => match self.empty_journal(&file, meta.len()) {
                Ok(()) => file.metadata().ok().map(|meta| Stamp::of(&meta)),
                Err(_) => None,
            },
            _ => None,
        };
        if let Ok(base) = self.fs.symlink_metadata(&path) {
            let base = Stamp::of(&base);
            let journal_exists = self.fs.symlink_metadata(&journal_path).is_ok();
            if journal.is_some() || !journal_exists {
                self.remember(
                    id,
                    Known {
                        base,
                        journal,
                        revision,
                        created_at: snapshot.created_at(),
                        updated_at: Some(snapshot.updated_at()),
                        counts: Some(snapshot.counts()),
                        journal_end: None,
                        base_private: true,
                        base_revision: revision,
                        verified: true,
                        dir_synced: not_durable.is_none() && self.durable(),
                        journal_version: None,
                        stats: Some(stats),
                    },
                );
                self.write_summary(snapshot, revision, stats, base, journal);
            }
        }
        match not_durable {
            None => Ok(revision),
            Some(source) => Err(Error::NotDurable {
                id: id.clone(),
                revision,
                dir: self.root.clone(),
                source,
            }),
        }
    }

    /// Refuses to write a base beside a journal path that a load would refuse: a load reads
    /// whatever `<id>.journal` is, and a symbolic link, a directory, a FIFO, a hard-linked
    /// file or a file of another user there makes the session unloadable. A save that
    /// wrote the base anyway would acknowledge a session that never loads.
    pub(super) fn check_journal_slot(&self, id: &SessionId) -> Result<()> {
        let path = self.journal_path(id);
        match self.fs.symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => Err(Error::Insecure {
                path,
                reason: "the journal path is a symbolic link, which is never followed, so the session could not be loaded; remove it and save again",
            }),
            Ok(meta) if !meta.is_file() => Err(Error::Insecure {
                path,
                reason: "the journal path is not a regular file (a directory, FIFO, socket or device), so the session could not be loaded; remove it and save again",
            }),
            Ok(meta) => self.check_file(&path, &meta),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("inspect", &path, e)),
        }
    }

    /// Truncates a journal of `len` bytes to nothing, durably: a new journal is later
    /// written from offset 0, and if a crash kept those bytes but lost an unsynced
    /// truncation, they would land over old records still on disk.
    pub(super) fn empty_journal(&self, file: &File, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.fs.set_len(file, 0)?;
        if self.durable() {
            self.fs.sync_data(file)?;
        }
        Ok(())
    }
}
