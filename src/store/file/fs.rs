//! The file-system seam: every system call the file store makes goes through
//! [`FileSystem`], so tests can inject faults and crashes at any step.

use std::ffi::OsString;
use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Owner read and write only: snapshots hold whole transcripts.
pub(crate) const FILE_MODE: u32 = 0o600;
/// Owner only.
pub(crate) const DIR_MODE: u32 = 0o700;

/// The operations the file store needs, each one system call (or as close as the platform
/// allows).
pub(crate) trait FileSystem: Send + Sync + std::fmt::Debug {
    /// `lstat`.
    fn symlink_metadata(&self, path: &Path) -> io::Result<Metadata>;
    /// Creates the directory `path` (not its parents) with mode 0700; fails if it exists.
    fn create_dir_private(&self, path: &Path) -> io::Result<()>;
    /// Opens a directory without following a symbolic link in its last component.
    fn open_dir(&self, path: &Path) -> io::Result<File>;
    /// Sets the mode of an open directory to 0700 (`fchmod`, so no path is re-resolved).
    fn set_dir_private(&self, dir: &File) -> io::Result<()>;
    /// Creates a new file `dir/<prefix><random>.tmp` with `O_EXCL | O_NOFOLLOW` and mode
    /// 0600 set at creation, retrying on name collisions.
    fn create_temp(&self, dir: &Path, prefix: &str) -> io::Result<(File, PathBuf)>;
    /// Writes all of `bytes`.
    fn write_all(&self, file: &mut File, bytes: &[u8]) -> io::Result<()>;
    /// `fsync` on a file.
    fn sync_file(&self, file: &File) -> io::Result<()>;
    /// `rename`, replacing `to` atomically.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// `fsync` on a directory, making renames and unlinks in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// `unlink`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Opens an existing file for reading without following a symbolic link in its last
    /// component, and without blocking on a FIFO.
    fn open_read(&self, path: &Path) -> io::Result<File>;
    /// Opens (creating with mode 0600 if needed) the store's lock file, not following links.
    fn open_lock(&self, path: &Path) -> io::Result<File>;
    /// The names in a directory.
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// Opens an existing file for reading and writing, not following a symbolic link in
    /// its last component and not blocking on a FIFO.
    fn open_write(&self, path: &Path) -> io::Result<File>;
    /// Creates a new file for reading and writing with `O_EXCL | O_NOFOLLOW` and mode 0600
    /// set at creation.
    fn create_private(&self, path: &Path) -> io::Result<File>;
    /// Writes all of `bytes` at `offset` (`pwrite`).
    fn write_all_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// `ftruncate`.
    fn set_len(&self, file: &File, len: u64) -> io::Result<()>;
    /// `fdatasync`: the file's data and size, not its other metadata.
    fn sync_data(&self, file: &File) -> io::Result<()>;
    /// Sets the mode of an open file to 0600 (`fchmod`).
    fn set_file_private(&self, file: &File) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default)]
pub(crate) struct OsFileSystem;

impl FileSystem for OsFileSystem {
    fn symlink_metadata(&self, path: &Path) -> io::Result<Metadata> {
        std::fs::symlink_metadata(path)
    }

    fn create_dir_private(&self, path: &Path) -> io::Result<()> {
        DirBuilder::new().mode(DIR_MODE).create(path)
    }

    fn open_dir(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    }

    fn set_dir_private(&self, dir: &File) -> io::Result<()> {
        dir.set_permissions(std::fs::Permissions::from_mode(DIR_MODE))
    }

    fn create_temp(&self, dir: &Path, prefix: &str) -> io::Result<(File, PathBuf)> {
        let named = tempfile::Builder::new()
            .prefix(prefix)
            .suffix(".tmp")
            .rand_bytes(16)
            .make_in(dir, |path| {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(FILE_MODE)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(path)
            })?;
        // The store removes the file itself on failure; tempfile's drop-time cleanup would
        // race with the rename.
        named.keep().map_err(|e| e.error)
    }

    fn write_all(&self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        file.write_all(bytes)?;
        crate::telemetry::wrote(bytes.len() as u64);
        Ok(())
    }

    fn sync_file(&self, file: &File) -> io::Result<()> {
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        // No O_NOFOLLOW: this also syncs the parent of a new store directory, which may be
        // reached through a link; the store directory itself is resolved when opened.
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?
            .sync_all()
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn open_read(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
    }

    fn open_lock(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(dir)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect()
    }

    fn open_write(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
    }

    fn create_private(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
    }

    fn write_all_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(bytes, offset)?;
        crate::telemetry::wrote(bytes.len() as u64);
        Ok(())
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    fn set_file_private(&self, file: &File) -> io::Result<()> {
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
    }
}
