//! The two ways a session leaves the listings: archiving (an empty marker file beside it)
//! and deleting (its files removed, the snapshot first).

use std::io::{self};
use std::path::PathBuf;

use super::FileSessionStore;
use crate::error::{Error, Result};
use crate::id::SessionId;

impl FileSessionStore {
    /// [`SessionStore::set_archived`](crate::SessionStore::set_archived), under the write
    /// lock: creates or removes the empty marker `<id>.archived`, then fsyncs the directory.
    pub(super) fn set_archived_locked(&self, id: &SessionId, archived: bool) -> Result<()> {
        let path = self.path_of(id);
        match self.fs.symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                return Err(Error::Insecure {
                    path,
                    reason: "it is a directory, not a snapshot",
                })
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotFound { id: id.clone() })
            }
            Err(e) => return Err(Error::io("inspect", &path, e)),
        }
        let marker = self.archived_path(id);
        if self.is_archived(id)? == archived {
            return Ok(());
        }

        if archived {
            self.fs
                .create_private(&marker)
                .map_err(|e| Error::io("create the archive marker", &marker, e))?;
        } else {
            self.fs
                .remove_file(&marker)
                .map_err(|e| Error::io("remove the archive marker", &marker, e))?;
        }
        if self.durable() {
            self.fs
                .sync_dir(&self.root)
                .map_err(|e| Error::io("sync the directory after archiving in", &self.root, e))?;
        }
        Ok(())
    }

    /// Whether session `id`'s archive marker is there. A directory in its place is not a
    /// marker this store wrote and cannot be removed by it: an error, not a state.
    pub(super) fn is_archived(&self, id: &SessionId) -> Result<bool> {
        let marker = self.archived_path(id);
        match self.fs.symlink_metadata(&marker) {
            Ok(meta) if meta.is_dir() => Err(not_a_marker(marker)),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("inspect", &marker, e)),
        }
    }

    /// Removes an archive marker left without its session (by a delete that a crash cut
    /// short, or by the snapshot removed by hand), so a new session under the same id
    /// starts active. Under the write lock; the new snapshot's directory fsync makes the
    /// removal durable with it.
    pub(super) fn remove_orphan_marker(&self, id: &SessionId) -> Result<()> {
        let marker = self.archived_path(id);
        match self.fs.symlink_metadata(&marker) {
            // Listings go by the name, so the new session would start archived.
            Ok(meta) if meta.is_dir() => Err(not_a_marker(marker)),
            Ok(_) => self
                .fs
                .remove_file(&marker)
                .map_err(|e| Error::io("remove the leftover archive marker", &marker, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("inspect", &marker, e)),
        }
    }

    /// [`SessionStore::delete`], under the write lock.
    pub(super) fn delete_locked(&self, id: &SessionId) -> Result<()> {
        let path = self.path_of(id);
        // Forks that share this session's first messages get their own copy first, so a
        // delete never breaks one (and fails, deleting nothing, if that cannot be done).
        self.materialize_forks_of(id)?;
        let found = match self.fs.symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {
                return Err(Error::Insecure {
                    path,
                    reason: "it is a directory, not a snapshot",
                })
            }
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io("inspect", &path, e)),
        };
        self.forget(id);
        self.listed_sessions().remove(id);
        let sync_dir = || {
            self.fs
                .sync_dir(&self.root)
                .map_err(|e| Error::io("sync the directory after a delete in", &self.root, e))
        };
        if found {
            self.fs
                .remove_file(&path)
                .map_err(|e| Error::io("remove", &path, e))?;
            // The snapshot's removal is made durable before the journal's: the other
            // order could, after a crash, bring the snapshot back without its journal,
            // at an older revision.
            sync_dir()?;
        }
        // Without its snapshot a journal, summary, view or archive marker is never read;
        // they are removed all the same (also those a delete cut short left behind). The
        // marker goes last, so a failed delete leaves an archived session archived; one
        // that a crash leaves behind is removed by the next first save under the id.
        let mut removed_extra = false;
        for extra in [
            self.journal_path(id),
            self.summary_path(id),
            self.view_path(id),
            self.archived_path(id),
        ] {
            match self.fs.symlink_metadata(&extra) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    self.fs
                        .remove_file(&extra)
                        .map_err(|e| Error::io("remove", &extra, e))?;
                    removed_extra = true;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("inspect", &extra, e)),
            }
        }
        if removed_extra {
            sync_dir()?;
        }
        if found {
            Ok(())
        } else {
            Err(Error::NotFound { id: id.clone() })
        }
    }
}

/// A directory where a session's archive marker goes: this store never makes one, and
/// cannot remove it.
pub(super) fn not_a_marker(path: PathBuf) -> Error {
    Error::Insecure {
        path,
        reason: "it is a directory, not the empty archive marker this store writes, and it makes listings show the session as archived; remove it",
    }
}
