//! The store's files on disk, before SQLite sees them: the directory (created 0700, and
//! refused if others can write to it), the database file (created by the store itself
//! with `O_CREAT | O_EXCL` and mode 0600, so SQLite, which gives its `-wal` and `-shm`
//! files the database file's mode, makes them 0600 too), and the checks an existing
//! database and its companion files must pass (regular files of the store's own user,
//! one link, no access for group or others).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::store::file::fs::OsFileSystem;
use crate::store::file::private_dir::open_private_dir;

/// The files SQLite keeps beside the database: its write-ahead log, the log's shared
/// index, and the rollback journal (only while the database is not yet in WAL mode).
pub(super) const COMPANION_SUFFIXES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The database file `path`, ready for SQLite: its directory exists and is private, the
/// file exists (created 0600 here if it did not) and is the store's own. Returns the
/// resolved path and the file's identity (device, inode).
///
/// # Errors
///
/// [`Error::Insecure`] for a directory others can write to (or, holding other files,
/// read), owned by another user, or a link; for a database or companion file that is a
/// link, not a regular file, hard-linked, another user's, or open to group or others.
/// [`Error::Io`] if something cannot be created or inspected.
pub(super) fn prepare(path: &Path, durable: bool) -> Result<(PathBuf, (u64, u64))> {
    // `a/b.db` and `a//b.db` name the same file; a trailing slash is not a file name.
    let path: PathBuf = path.components().collect();
    let name = path.file_name().ok_or_else(|| Error::InvalidArgument {
        reason: format!(
            "{} names no database file: give the path of a file, such as sessions.db",
            path.display()
        ),
    })?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // The file store's rules and checks for its directory (created 0700, parents synced;
    // refused if others may write to it, or read it while it holds files), resolved.
    let (_, dir, _) = open_private_dir(&OsFileSystem, &dir)?;
    let path = dir.join(name);
    let file = match std::fs::symlink_metadata(&path) {
        Ok(meta) => {
            check_file(&path, &meta)?;
            meta
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => create_database(&path, &dir, durable)?,
        Err(e) => return Err(Error::io("inspect the database file", &path, e)),
    };
    for suffix in COMPANION_SUFFIXES {
        let companion = companion(&path, suffix);
        match std::fs::symlink_metadata(&companion) {
            Ok(meta) => check_file(&companion, &meta)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("inspect a file of the database", &companion, e)),
        }
    }
    Ok((path, (file.dev(), file.ino())))
}

/// `<path><suffix>`: the name SQLite gives a companion file of the database `path`.
pub(super) fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The identity (device, inode) of the file `path` names now, not following a link.
pub(super) fn identity(path: &Path) -> Result<(u64, u64)> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| Error::io("inspect the database file", path, e))?;
    check_file(path, &meta)?;
    Ok((meta.dev(), meta.ino()))
}

/// Creates the empty database file 0600 (never a `chmod` afterwards), refusing to follow
/// or replace anything at its name, and makes its name durable.
fn create_database(path: &Path, dir: &Path, durable: bool) -> Result<std::fs::Metadata> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io("create the database file", path, e))?;
    if durable {
        file.sync_all()
            .map_err(|e| Error::io("sync the new database file", path, e))?;
        sync_dir(dir)?;
    }
    file.metadata()
        .map_err(|e| Error::io("inspect the database file", path, e))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync the directory", dir, e))
}

/// A database file or companion must be a plain private file of the store's user.
fn check_file(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    let insecure = |reason| Error::Insecure {
        path: path.to_path_buf(),
        reason,
    };
    if meta.file_type().is_symlink() {
        return Err(insecure(
            "it is a symbolic link, which the store never follows; open the real database file instead",
        ));
    }
    if !meta.is_file() {
        return Err(insecure("it is not a regular file"));
    }
    if meta.nlink() > 1 {
        return Err(insecure(
            "it has more than one hard link, so another name could change it behind the store; copy it to a file of its own",
        ));
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(insecure(
            "it belongs to another user than the one running this store; use a database of your own",
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(insecure(
            "other users may read or write it (the store keeps its database 0600); run `chmod 600` on it and on its -wal and -shm files",
        ));
    }
    Ok(())
}
