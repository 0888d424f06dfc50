//! The store's files on disk, before SQLite sees them: the directory (created 0700, and
//! refused if others can write to it), the database file (created by the store itself
//! with `O_CREAT | O_EXCL` and mode 0600, so SQLite, which gives its `-wal` and `-shm`
//! files the database file's mode, makes them 0600 too), and the checks an existing
//! database and its companion files must pass (regular files of the store's own user,
//! one link, no access for group or others).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

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
    let created_dir = ensure_dir(&dir)?;
    check_dir(&dir, created_dir)?;
    let dir = std::fs::canonicalize(&dir)
        .map_err(|e| Error::io("resolve the database's directory", &dir, e))?;
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

/// Makes sure `dir` exists, creating it and missing parents with mode 0700 and syncing
/// each new entry into its parent. Returns whether this call created `dir`.
fn ensure_dir(dir: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(dir) {
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("inspect the database's directory", dir, e)),
    }
    let mut missing = Vec::new();
    for level in dir.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(level) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(level),
            Err(e) => return Err(Error::io("inspect the database's directory", level, e)),
        }
    }
    for level in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(0o700).create(level) {
            Ok(()) => {}
            // Made by someone else meanwhile: checked like any existing directory.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(Error::io("create the database's directory", level, e)),
        }
        let parent = level
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(true)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync the directory", dir, e))
}

/// The directory rules of [`FileSessionStore`](crate::FileSessionStore): the store's
/// user owns it, nobody else may write to it, and one others may read is made 0700 if it
/// is new or empty, refused otherwise. Checked through an open handle, not followed if a
/// link.
fn check_dir(dir: &Path, created: bool) -> Result<()> {
    let insecure = |reason| Error::Insecure {
        path: dir.to_path_buf(),
        reason,
    };
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => insecure(
                "the database's directory is a symbolic link or not a directory; give the store a real directory of its own",
            ),
            _ => Error::io("open the database's directory", dir, e),
        })?;
    let meta = handle
        .metadata()
        .map_err(|e| Error::io("inspect the database's directory", dir, e))?;
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(insecure(
            "the database's directory belongs to another user than the one running this store, who could replace the database; use a directory of your own",
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(insecure(
            "the database's directory is writable by other users, who could replace the database or plant its -wal file; use a private directory or run `chmod 700` on it",
        ));
    }
    #[allow(clippy::verbose_bit_mask)] // the mask reads as the permission bits it tests
    let private = mode & 0o077 == 0;
    if private {
        return Ok(());
    }
    let empty = created
        || std::fs::read_dir(dir)
            .map_err(|e| Error::io("read the database's directory", dir, e))?
            .next()
            .is_none();
    if !empty {
        return Err(insecure(
            "the database's directory is readable by other users and holds other files; run `chmod 700` on it or give the store a directory of its own",
        ));
    }
    handle
        .set_permissions(std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::io("make the database's directory private (chmod 700)", dir, e))
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
