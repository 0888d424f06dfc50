//! Forks that share their first messages with their parent. A fork made from a stored
//! revision of a session in the same store is written as a checkpoint without those
//! messages, naming the parent's revision they are (`shared_prefix` in `docs/FORMAT.md`);
//! loading it loads that revision of the parent first. The parent's `<id>.forks` file
//! lists its sharing forks (written durably before a fork's base). Before a parent's
//! history goes (it is deleted, or replaced by another session under its id), every fork
//! it lists that still shares it is made to hold its own copy, so no fork ever breaks.

use std::io;

use super::FileSessionStore;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::{
    shared_prefix_of, sharing_checkpoint, LogSource, SessionSnapshot, SHARED_DEPTH_BUDGET,
};

/// The largest `<id>.forks` file read: one id (at most 128 bytes) and a newline a fork.
const MAX_FORKS_BYTES: u64 = 16 * 1024 * 1024;

impl FileSessionStore {
    /// For a base that shares its first messages with its parent: the parent's state at
    /// the revision the fork was made from (loaded through this store, following at most
    /// `budget` parents); `None` for a base that holds its own messages.
    ///
    /// # Errors
    ///
    /// As [`shared_prefix_of`]: [`Error::Inconsistent`] if the parent is missing, is
    /// another session now, no longer keeps that revision, has fewer messages than the
    /// fork shares, or the chain of sharing forks is longer than a store writes; errors of
    /// reading the parent otherwise.
    pub(super) fn shared_prefix(
        &self,
        base: &SessionSnapshot,
        locked: bool,
        budget: u32,
    ) -> Result<Option<SessionSnapshot>> {
        shared_prefix_of(base, budget, |parent, revision, budget| {
            self.with_log_within(parent, locked, budget, |log| log.state_at(Some(revision)))
        })
    }

    /// What the first save of `snapshot` writes as its base at `revision`: for a fork made
    /// from a stored revision of a session this store holds, with the same first messages
    /// there, the checkpoint without them; otherwise the whole snapshot. Under the write
    /// lock, so the parent cannot go meanwhile (a delete makes its forks hold their own
    /// copy first).
    pub(super) fn checkpoint_bytes(
        &self,
        snapshot: &SessionSnapshot,
        revision: Revision,
    ) -> Result<Vec<u8>> {
        let shared = sharing_checkpoint(snapshot, revision, |lineage| {
            self.with_log(&lineage.parent, true, |log| {
                log.state_at(Some(lineage.parent_revision))
            })
        })?;
        if let (Some(bytes), Some(lineage)) = (shared, snapshot.lineage()) {
            self.record_fork(&lineage.parent, snapshot.id())?;
            return Ok(bytes);
        }
        snapshot.to_json_with_revision(revision)
    }

    /// Adds `fork` to the `<parent>.forks` file, durably (the file's data, and the
    /// directory if the file is new): before the fork's base names its parent, so that a
    /// delete of the parent always finds it. A fork whose base is never written is an
    /// entry that later finds nothing to do.
    fn record_fork(&self, parent: &SessionId, fork: &SessionId) -> Result<()> {
        let path = self.forks_path(parent);
        let (file, created, len) = match self.open_checked(&path, true)? {
            Some((file, meta)) => (file, false, meta.len()),
            None => match self.fs.create_private(&path) {
                Ok(file) => (file, true, 0),
                Err(e) => return Err(Error::io("create the list of forks", &path, e)),
            },
        };
        let line = format!("{fork}\n");
        self.fs
            .write_all_at(&file, line.as_bytes(), len)
            .map_err(|e| Error::io("add a fork to", &path, e))?;
        if self.durable() {
            self.fs
                .sync_data(&file)
                .map_err(|e| Error::io("sync the list of forks", &path, e))?;
            if created {
                self.fs
                    .sync_dir(&self.root)
                    .map_err(|e| Error::io("sync the directory after creating", &path, e))?;
            }
        }
        Ok(())
    }

    /// The forks `<parent>.forks` lists (each once, in order); `None` if there is no such
    /// file. Lines that are not session ids (a write cut short by a crash) are skipped.
    fn listed_forks(&self, parent: &SessionId) -> Result<Option<Vec<SessionId>>> {
        let path = self.forks_path(parent);
        let Some((bytes, _)) = self.read_checked(&path, MAX_FORKS_BYTES, false)? else {
            return Ok(None);
        };
        let mut forks: Vec<SessionId> = Vec::new();
        for line in bytes.split(|&b| b == b'\n') {
            let Ok(fork) = std::str::from_utf8(line)
                .map_err(|_| ())
                .and_then(|l| SessionId::parse(l).map_err(|_| ()))
            else {
                continue;
            };
            if !forks.contains(&fork) {
                forks.push(fork);
            }
        }
        Ok(Some(forks))
    }

    /// Makes every fork that shares its first messages with session `parent` hold its own
    /// copy of them: its base is written again whole, at the same revision and creation
    /// time (so its journal still follows it), atomically; then `<parent>.forks` goes.
    /// Under the write lock, before the parent's history goes. A listed fork that no
    /// longer shares this parent's messages (deleted, given its own copy, another session
    /// now) is passed over, and so is one whose state cannot be worked out (its own files
    /// are damaged): it does not load either way.
    ///
    /// # Errors
    ///
    /// I/O errors of reading the list or of writing a fork's base; nothing of the parent
    /// is touched then.
    pub(super) fn materialize_forks_of(&self, parent: &SessionId) -> Result<()> {
        if !self.materialize_forks_sharing(parent, None)? {
            return Ok(());
        }
        let forks = self.forks_path(parent);
        match self.fs.remove_file(&forks) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove the list of forks", &forks, e)),
        }
    }

    /// [`materialize_forks_of`](Self::materialize_forks_of) for the forks that share a
    /// revision of `parent` before `before` (every revision, with `None`): before a
    /// retention drops those revisions. The list of forks stays (the forks given their own
    /// copy are passed over the next time). Returns whether there is a list.
    ///
    /// # Errors
    ///
    /// As [`materialize_forks_of`](Self::materialize_forks_of).
    pub(super) fn materialize_forks_sharing(
        &self,
        parent: &SessionId,
        before: Option<Revision>,
    ) -> Result<bool> {
        let Some(forks) = self.listed_forks(parent)? else {
            return Ok(false);
        };
        for fork in forks {
            let path = self.path_of(&fork);
            let base = match self.read_base(&path) {
                Ok(Some((base, _))) => base,
                Ok(None) => continue,
                Err(e) if e.is_corrupt() => continue,
                Err(e) => return Err(e),
            };
            let shares_this = base.share().is_some()
                && base.lineage().is_some_and(|lineage| {
                    lineage.parent == *parent
                        && before.is_none_or(|before| lineage.parent_revision < before)
                });
            if !shares_this {
                continue;
            }
            let revision = base.revision();
            let whole = self
                .shared_prefix(&base, true, SHARED_DEPTH_BUDGET)
                .and_then(|prefix| {
                    let mut log = LogSource::new(base);
                    if let Some(prefix) = prefix {
                        log.set_prefix(prefix);
                    }
                    log.state_at(Some(revision))
                });
            let whole = match whole {
                Ok(whole) => whole,
                Err(e) if e.is_corrupt() || e.kind() == crate::ErrorKind::InvalidInput => continue,
                Err(e) => return Err(e),
            };
            let bytes = whole.to_json_with_revision(revision)?;
            self.forget(&fork);
            self.replace_file(&fork, &path, &bytes)?;
        }
        Ok(true)
    }
}
