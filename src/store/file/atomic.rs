//! Atomic, durable replacement of one file: temp file in the same directory, write, fsync,
//! rename over the target, fsync the directory.

use std::fs::File;
use std::io;
use std::path::Path;

use super::fs::FileSystem;
use crate::error::Error;

/// Why [`replace`] failed.
#[derive(Debug)]
pub(crate) enum ReplaceError {
    /// Before the rename: the temporary file is removed and the target is unchanged.
    Unchanged(Error),
    /// After the rename: the new content is in place, but the directory fsync failed, so
    /// the rename may not survive a power loss.
    NotDurable(io::Error),
}

/// Replaces `target` (in `dir`) with `bytes`; with `durable` false, the directory is not
/// fsynced (the rename is still atomic, and the new file's data is synced before it).
///
/// Before the rename, any failure removes the temporary file and leaves `target` exactly
/// as it was. After the rename the new content is in place; if the directory fsync then
/// fails, the error says so, because the rename may not survive a power loss.
pub(crate) fn replace(
    fs: &dyn FileSystem,
    dir: &Path,
    target: &Path,
    temp_prefix: &str,
    bytes: &[u8],
    durable: bool,
) -> Result<(), ReplaceError> {
    replace_keeping(fs, dir, target, temp_prefix, bytes, durable, |_, _| Ok(())).map(drop)
}

/// [`replace`], with `prepare` run on the new file (open, written and synced, under its
/// temporary path) just before the rename, and the file returned still open: for a file
/// whose lock must be held from the moment its name appears (a lease's).
pub(crate) fn replace_keeping(
    fs: &dyn FileSystem,
    dir: &Path,
    target: &Path,
    temp_prefix: &str,
    bytes: &[u8],
    durable: bool,
    prepare: impl FnOnce(&File, &Path) -> Result<(), Error>,
) -> Result<File, ReplaceError> {
    let (mut file, temp) = fs
        .create_temp(dir, temp_prefix)
        .map_err(|e| ReplaceError::Unchanged(Error::io("create a temporary file in", dir, e)))?;
    let written = fs
        .write_all(&mut file, bytes)
        .map_err(|e| Error::io("write", &temp, e))
        // A failed fsync is never retried: after a failure the kernel may have dropped the
        // dirty pages, so a second fsync could "succeed" without the data.
        // Synced even when not `durable`: renamed unsynced over the only copy, the new
        // file could come back empty after a power cut on some file systems (XFS, ext4
        // with noauto_da_alloc), losing the whole session rather than its last saves.
        .and_then(|()| fs.sync_file(&file).map_err(|e| Error::io("sync", &temp, e)))
        .and_then(|()| prepare(&file, &temp));
    let renamed = written.and_then(|()| {
        fs.rename(&temp, target)
            .map_err(|e| Error::io("rename a temporary file onto", target, e))
    });
    if let Err(err) = renamed {
        // Best effort: a leftover temp file is also removed when the store is next opened.
        let _ = fs.remove_file(&temp);
        return Err(ReplaceError::Unchanged(err));
    }
    if durable {
        fs.sync_dir(dir).map_err(ReplaceError::NotDurable)?;
    }
    Ok(file)
}
