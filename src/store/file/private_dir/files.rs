//! Guarded file access inside the store directory: every snapshot, journal, summary and
//! marker the store opens goes through here.

use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::is_private;
use super::is_symlink_error;
use crate::error::{Error, Location, Result};
use crate::store::file::FileSessionStore;

/// Why [`FileSessionStore::read_checked`] gave up: the file under the name changed at
/// every attempt (saves replacing it back to back, or links being planted).
pub(in crate::store::file) const NAME_KEPT_CHANGING: &str = "the name kept pointing at another file while it was read; if another program writes the store, retry, otherwise look for planted links";
/// How much of a base snapshot a save reads to find its header.
pub(in crate::store::file) const HEAD_BYTES: usize = 4096;

impl FileSessionStore {
    /// Reads `path` (all of it, or with `head` only its first bytes) after checking it is
    /// a plain, singly linked regular file of ours within `limit`, and that the path still
    /// names that file once it has been read; `Ok(None)` if there is none. Returns the
    /// bytes and the metadata of the file read.
    ///
    /// The last check closes a race: a hard link to an outside file, planted under our
    /// name and removed again between our open and our `fstat`, would otherwise pass the
    /// link-count check. A file replaced by a concurrent save while it is read is simply
    /// read again.
    pub(in crate::store::file) fn read_checked(
        &self,
        path: &Path,
        limit: u64,
        head: bool,
    ) -> Result<Option<(Vec<u8>, Metadata)>> {
        self.read_checked_with(path, limit, |file, meta| {
            read_bytes(file, meta, path, limit, head)
        })
    }

    /// [`read_checked`](Self::read_checked), with `read` reading the open file (checked,
    /// and within `limit`) into whatever it makes of it. If the name no longer leads to
    /// the file read (a save replaced it meanwhile), it is opened and read again, whatever
    /// `read` answered.
    pub(in crate::store::file) fn read_checked_with<T>(
        &self,
        path: &Path,
        limit: u64,
        mut read: impl FnMut(&mut File, &Metadata) -> Result<T>,
    ) -> Result<Option<(T, Metadata)>> {
        const ATTEMPTS: usize = 3;
        for _ in 0..ATTEMPTS {
            let Some((mut file, meta)) = self.open_checked(path, false)? else {
                return Ok(None);
            };
            if meta.len() > limit {
                return Err(Error::TooLarge {
                    location: Location::File(path.to_path_buf()),
                    size_bytes: meta.len(),
                    limit_bytes: limit,
                });
            }
            let value = read(&mut file, &meta);
            let opened = file.metadata().map_err(|e| Error::io("inspect", path, e))?;
            match self.fs.symlink_metadata(path) {
                // The link count is read again through the open file: a path lookup can
                // see a link count that an unlink racing with it has already lowered.
                Ok(now)
                    if (now.dev(), now.ino()) == (opened.dev(), opened.ino())
                        && now.is_file()
                        && now.nlink() == 1
                        && file
                            .metadata()
                            .map_err(|e| Error::io("inspect", path, e))?
                            .nlink()
                            == 1 =>
                {
                    return value.map(|value| Some((value, opened)));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("inspect", path, e)),
            }
        }
        Err(Error::Insecure {
            path: path.to_path_buf(),
            reason: NAME_KEPT_CHANGING,
        })
    }

    /// Opens `path` for reading or writing and checks, on the open file, that it is a
    /// regular file of ours with one link; `Ok(None)` if there is none.
    pub(in crate::store::file) fn open_checked(
        &self,
        path: &Path,
        write: bool,
    ) -> Result<Option<(File, Metadata)>> {
        let opened = if write {
            self.fs.open_write(path)
        } else {
            self.fs.open_read(path)
        };
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if is_symlink_error(&e) => {
                return Err(Error::Insecure {
                    path: path.to_path_buf(),
                    reason: "it is a symbolic link, which is never followed; remove it",
                })
            }
            Err(e) => return Err(Error::io("open", path, e)),
        };
        let meta = file.metadata().map_err(|e| Error::io("inspect", path, e))?;
        self.check_file(path, &meta)?;
        // A file loosened by another program is made private again before it is written.
        if write && !is_private(meta.permissions().mode()) {
            self.fs
                .set_file_private(&file)
                .map_err(|e| Error::io("make private (chmod 600)", path, e))?;
        }
        Ok(Some((file, meta)))
    }

    /// Whether `meta` (from `lstat`) is a regular, singly linked, private file of ours: what
    /// the store wrote, unchanged in those respects.
    pub(in crate::store::file) fn is_plain(&self, meta: &Metadata) -> bool {
        meta.is_file()
            && meta.nlink() == 1
            && meta.uid() == self.owner_uid
            && is_private(meta.permissions().mode())
    }

    /// The checks every file the store reads must pass.
    pub(in crate::store::file) fn check_file(&self, path: &Path, meta: &Metadata) -> Result<()> {
        let insecure = |reason| {
            Err(Error::Insecure {
                path: path.to_path_buf(),
                reason,
            })
        };
        if !meta.is_file() {
            return insecure("it is not a regular file");
        }
        if meta.nlink() > 1 {
            return insecure("it has more than one hard link, so another name could alias it; remove the other links");
        }
        // Checked on the open file, so no race can swap it: a file of another user (a hard
        // link to it, planted in the store) is never read on that user's behalf.
        if meta.uid() != self.owner_uid {
            return insecure("it belongs to another user than the one running this store, so this store did not write it");
        }
        Ok(())
    }
}

/// Reads the open `file` at `path` (checked, `meta` its metadata): its first
/// [`HEAD_BYTES`] with `head`, otherwise all of it, refusing more than `limit` bytes.
pub(in crate::store::file) fn read_bytes(
    file: &mut File,
    meta: &Metadata,
    path: &Path,
    limit: u64,
    head: bool,
) -> Result<Vec<u8>> {
    let cap = if head {
        HEAD_BYTES as u64
    } else {
        // The file may grow between fstat and read; never read more than the limit.
        limit.saturating_add(1)
    };
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(cap)).unwrap_or(0));
    file.take(cap)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    let read = bytes.len() as u64;
    crate::telemetry::read(read);
    if !head && read > limit {
        return Err(Error::TooLarge {
            location: Location::File(path.to_path_buf()),
            size_bytes: read,
            limit_bytes: limit,
        });
    }
    Ok(bytes)
}
