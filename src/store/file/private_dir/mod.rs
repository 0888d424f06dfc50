//! The store's security boundary, in one place: the private directory (created 0700,
//! checked at open and on every operation) and every file opened in it ([`files`]:
//! no links followed, regular single-link files of the store's own user, size-limited
//! reads that re-check the name after reading).

mod files;

use std::fs::{File, Metadata};
use std::io::{self};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::fs::FileSystem;
use super::FileSessionStore;
use crate::error::{Error, Result};

pub(super) use files::{read_bytes, HEAD_BYTES, NAME_KEPT_CHANGING};

impl FileSessionStore {
    /// Makes sure the store's path still names the directory checked at open, so a
    /// directory swapped for a link (or another directory) afterwards is refused rather
    /// than written through. Operations are path-based, so this narrows the window to the
    /// time between this check and the operation; see the type docs.
    pub(super) fn check_root(&self) -> Result<()> {
        let meta = self
            .fs
            .symlink_metadata(&self.root)
            .map_err(|e| Error::io("inspect the store directory", &self.root, e))?;
        if meta.file_type().is_symlink()
            || !meta.is_dir()
            || (meta.dev(), meta.ino()) != self.root_identity
        {
            return Err(Error::Insecure {
                path: self.root.clone(),
                reason: "the store directory was replaced (by a link or another directory) after the store was opened; reopen it",
            });
        }
        // Checked as the identity is, on every operation: a fresh open would refuse a
        // directory that others can read or write, or that another user owns, so a store
        // that is already open must not go on using one either.
        if meta.uid() != self.owner_uid {
            return Err(Error::Insecure {
                path: self.root.clone(),
                reason: "the store directory now belongs to another user than the one running this store, who could replace its sessions; give it back (chown) or use a directory of your own",
            });
        }
        if !is_private(meta.permissions().mode()) {
            return Err(Error::Insecure {
                path: self.root.clone(),
                reason: "the store directory's permissions were loosened after the store was opened, so other users may read or plant files; run `chmod 700` on it",
            });
        }
        Ok(())
    }
}

/// Opens the store directory `dir` (creating it and missing parents 0700), checks it
/// through an open handle (owner, permissions, not a link), and resolves its path once.
/// Returns the handle, the resolved path and the directory's metadata.
pub(in crate::store) fn open_private_dir(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<(File, PathBuf, Metadata)> {
    // `a/b/` and `a/b` name the same directory, but a trailing slash makes open(2)
    // follow a symbolic link even with O_NOFOLLOW.
    let dir: PathBuf = dir.components().collect();
    let created = ensure_dir(fs, &dir)?;
    // Check the directory through an open handle, so the checks (and a chmod) apply to
    // the directory itself, not to whatever the path names a moment later.
    let symlink = || {
        Error::Insecure {
            path: dir.clone(),
            reason: "the store path is a symbolic link, which is never followed; open the real directory instead",
        }
    };
    let handle = fs.open_dir(&dir).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => symlink(),
        // `O_DIRECTORY | O_NOFOLLOW` on a link to a directory says "not a directory".
        Some(libc::ENOTDIR)
            if fs
                .symlink_metadata(&dir)
                .is_ok_and(|meta| meta.file_type().is_symlink()) =>
        {
            symlink()
        }
        Some(libc::ENOTDIR) => Error::Insecure {
            path: dir.clone(),
            reason: "the store path is not a directory",
        },
        _ => Error::io("open the store directory", &dir, e),
    })?;
    let meta = handle
        .metadata()
        .map_err(|e| Error::io("inspect the store directory", &dir, e))?;
    check_store_dir(fs, &dir, &handle, &meta, created)?;
    // Resolve once, so a later change of working directory cannot move the store, and
    // make sure the resolved path is the directory just checked.
    let root = std::fs::canonicalize(&dir)
        .map_err(|e| Error::io("resolve the store directory", &dir, e))?;
    let resolved = fs
        .symlink_metadata(&root)
        .map_err(|e| Error::io("inspect the store directory", &root, e))?;
    if (resolved.dev(), resolved.ino()) != (meta.dev(), meta.ino()) {
        return Err(Error::Insecure {
            path: dir,
            reason: "the store directory was replaced while it was being opened",
        });
    }
    Ok((handle, root, meta))
}

/// Makes sure `dir` exists, creating it and any missing parents with mode 0700, one level
/// at a time from the top, and fsyncing each new entry into its parent: a save that
/// returns Ok is durable only if every directory above it that this call created is too.
/// Returns whether this call created `dir`.
pub(super) fn ensure_dir(fs: &dyn FileSystem, dir: &Path) -> Result<bool> {
    let mut missing = Vec::new();
    for level in dir.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        match fs.symlink_metadata(level) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(level),
            Err(e) => return Err(Error::io("inspect the store directory", level, e)),
        }
    }
    let mut created = false;
    for level in missing.into_iter().rev() {
        match fs.create_dir_private(level) {
            Ok(()) => created = true,
            // Created by someone else meanwhile: checked below like any existing directory.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                created = false;
                continue;
            }
            Err(e) => return Err(Error::io("create the store directory", level, e)),
        }
        let parent = level
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs.sync_dir(parent)
            .map_err(|e| Error::io("sync the parent of a new directory", parent, e))?;
    }
    Ok(created)
}

/// Checks the store directory's permissions through its open handle. A directory that
/// others can write to is refused. One that others can only read is made 0700 if this
/// store created it or it is empty (it is then the store's own); otherwise it is refused
/// rather than changed, because it holds someone else's files.
pub(super) fn check_store_dir(
    fs: &dyn FileSystem,
    dir: &Path,
    handle: &File,
    meta: &std::fs::Metadata,
    created: bool,
) -> Result<()> {
    let insecure = |reason| Error::Insecure {
        path: dir.to_path_buf(),
        reason,
    };
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(insecure(
            "the store directory belongs to another user than the one running this store, who could delete or replace its sessions; use a directory of your own",
        ));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(insecure(
            "the store directory is writable by other users, who could plant files or links in it; use a private directory or run `chmod 700` on it",
        ));
    }
    let group_and_other = mode & 0o077;
    if group_and_other == 0 {
        return Ok(());
    }
    let empty = created
        || fs
            .read_dir(dir)
            .map_err(|e| Error::io("read the store directory", dir, e))?
            .is_empty();
    if !empty {
        return Err(insecure(
            "the store directory is readable by other users and holds other files; run `chmod 700` on it or give the store a directory of its own",
        ));
    }
    fs.set_dir_private(handle)
        .map_err(|e| Error::io("make the store directory private (chmod 700)", dir, e))
}

/// Whether a file mode gives group and others no access at all.
#[allow(clippy::verbose_bit_mask)] // the mask reads as the permission bits it tests
pub(super) fn is_private(mode: u32) -> bool {
    mode & 0o077 == 0
}

pub(super) fn is_symlink_error(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}
