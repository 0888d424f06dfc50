//! `FileSessionStore`: one JSON file per session in a private directory.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::atomic::{self, ReplaceError};
use super::fs::{FileSystem, OsFileSystem};
use super::{check_revision, Revision, SessionList, SessionStore, SessionSummary};
use crate::error::{Error, Location, Result};
use crate::id::SessionId;
use crate::snapshot::SessionSnapshot;

/// The default largest snapshot file the store reads or writes: 256 MiB.
pub const DEFAULT_MAX_SNAPSHOT_BYTES: u64 = 256 * 1024 * 1024;

/// The store-wide lock file. Ids never start with a dot, so it cannot name a session.
const LOCK_FILE: &str = ".lock";
/// Suffix of snapshot files.
const SNAPSHOT_SUFFIX: &str = ".json";
/// Suffix of temporary files; their names start with a dot, so they are never sessions.
const TEMP_SUFFIX: &str = ".tmp";

/// A [`SessionStore`] that keeps each session in one JSON file, `<dir>/<id>.json`.
///
/// # Durability
///
/// [`save`](SessionStore::save) returns only after the new snapshot is durable: it is
/// written to a temporary file in the same directory, fsynced, renamed over the old file,
/// and the directory is fsynced. A crash at any point leaves either the old or the new
/// snapshot, never a mix; leftover temporary files are never listed as sessions and are
/// removed the next time a store is opened on the directory.
///
/// If the directory fsync fails after the rename, the new snapshot is in place but may not
/// survive a power loss: `save` then returns [`Error::NotDurable`] with the stored
/// revision, and the next successful save makes it durable. A delete whose directory fsync
/// fails returns [`Error::Io`] saying so, with the file already removed.
///
/// Saves and deletes take an exclusive lock on `<dir>/.lock`, so compare-and-swap holds
/// between threads and between processes on the same machine. Loads take no lock: they
/// always see a whole snapshot because files are only ever replaced by rename.
///
/// # Security
///
/// - The directory is created with mode 0700 and files with mode 0600, set atomically at
///   creation (`O_CREAT | O_EXCL` with the mode, never a `chmod` afterwards), so a
///   snapshot is never readable by others, whatever the umask. A file left 0644 by another
///   program becomes 0600 on its next save, because saves always write a new file.
/// - An existing directory that others can write to is refused; one that others can only
///   read is made private (mode 0700) if it is empty, and refused otherwise (it holds
///   someone else's files). The checks and the `chmod` go through an open handle of the
///   directory, and the resolved path must name that same directory.
/// - Paths are built only from validated [`SessionId`]s, so they cannot leave the
///   directory. Symbolic links (for the directory, a snapshot or the lock file) are never
///   followed; a snapshot with more than one hard link, or owned by another user than the
///   one running the store, is refused; after reading, the name must still point at the file read.
///   (A process of the store's own user that races links into the directory can still,
///   rarely, get a file of that same user read; it could write a snapshot anyway.)
/// - Every operation first checks that the directory's path still names the directory
///   checked at open. Operations are path-based (std has no `openat`), so a process that
///   can rename entries in the store's *parent* directory could still swap the store
///   between that check and the operation; keep the store under a directory only you can
///   write.
/// - A file whose embedded id differs from its name (a renamed or copied snapshot) is
///   refused, and so is a file over the size limit ([`DEFAULT_MAX_SNAPSHOT_BYTES`]).
///
/// # Examples
///
/// ```
/// use agent_session::{FileSessionStore, SessionId, SessionSnapshot, SessionStore};
///
/// let dir = tempfile::tempdir()?;
/// let store = FileSessionStore::open(dir.path().join("sessions"))?;
/// let snapshot = SessionSnapshot::builder(SessionId::parse("demo")?, "m").build()?;
/// store.save(&snapshot)?;
/// assert_eq!(store.load(snapshot.id())?.revision().as_u64(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FileSessionStore {
    root: PathBuf,
    /// Device and inode of the directory checked at open: every operation makes sure the
    /// path still names it.
    root_identity: (u64, u64),
    /// The user running the store (effective uid): every snapshot must belong to it, as
    /// every file this store writes does.
    owner_uid: u32,
    max_snapshot_bytes: u64,
    fs: Arc<dyn FileSystem>,
    /// The lock file, opened once. `flock` locks belong to an open file description, so the
    /// mutex keeps two threads of this process from both "holding" it at once.
    lock_file: Mutex<File>,
}

/// Configures a [`FileSessionStore`]. Made by [`FileSessionStore::builder`].
///
/// # Examples
///
/// ```
/// use agent_session::FileSessionStore;
///
/// let dir = tempfile::tempdir()?;
/// let store = FileSessionStore::builder()
///     .max_snapshot_bytes(16 * 1024 * 1024)
///     .open(dir.path())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FileStoreBuilder {
    max_snapshot_bytes: u64,
}

impl FileStoreBuilder {
    /// Sets the largest snapshot file the store reads or writes (default
    /// [`DEFAULT_MAX_SNAPSHOT_BYTES`]). Larger files are refused with [`Error::TooLarge`].
    pub fn max_snapshot_bytes(&mut self, limit: u64) -> &mut Self {
        self.max_snapshot_bytes = limit;
        self
    }

    /// Opens (creating if needed) the store in `dir`.
    ///
    /// # Errors
    ///
    /// As [`FileSessionStore::open`].
    pub fn open(&self, dir: impl AsRef<Path>) -> Result<FileSessionStore> {
        FileSessionStore::open_with(
            dir.as_ref(),
            self.max_snapshot_bytes,
            Arc::new(OsFileSystem),
        )
    }
}

/// Holds the store-wide write lock until dropped.
struct WriteLock<'a> {
    file: MutexGuard<'a, File>,
}

impl Drop for WriteLock<'_> {
    fn drop(&mut self) {
        // Closing would release it too, but the file stays open for the next writer.
        let _ = self.file.unlock();
    }
}

impl FileSessionStore {
    /// Opens (creating if needed) the store in `dir`, with default settings.
    ///
    /// Missing directories are created with mode 0700 (and the new directory's entry is
    /// fsynced into its parent); an existing empty directory that others can read (but not
    /// write) is changed to 0700. Temporary files left by a crashed save are removed.
    ///
    /// # Errors
    ///
    /// - [`Error::Insecure`] if `dir` is a symbolic link, not a directory, writable by
    ///   other users, or readable by them and not empty (fix with `chmod 700`);
    /// - [`Error::InvalidArgument`] if the size limit is 0;
    /// - [`Error::Io`] if it cannot be created or read.
    ///
    /// # Security
    ///
    /// See the type-level docs.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        FileSessionStore::builder().open(dir)
    }

    /// A builder for a store with non-default settings.
    #[must_use]
    pub fn builder() -> FileStoreBuilder {
        FileStoreBuilder {
            max_snapshot_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
        }
    }

    /// The store's directory, as resolved when it was opened.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// The file that holds session `id`. The path is always directly inside
    /// [`dir`](Self::dir).
    #[must_use]
    pub fn path_of(&self, id: &SessionId) -> PathBuf {
        self.root.join(format!("{id}{SNAPSHOT_SUFFIX}"))
    }

    pub(super) fn open_with(
        dir: &Path,
        max_snapshot_bytes: u64,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Self> {
        if max_snapshot_bytes == 0 {
            return Err(Error::InvalidArgument {
                reason: "max_snapshot_bytes must be at least 1".to_owned(),
            });
        }
        // `a/b/` and `a/b` name the same directory, but a trailing slash makes open(2)
        // follow a symbolic link even with O_NOFOLLOW.
        let dir: PathBuf = dir.components().collect();
        let created = ensure_dir(&*fs, &dir)?;
        // Check the directory through an open handle, so the checks (and a chmod) apply to
        // the directory itself, not to whatever the path names a moment later.
        let handle = fs.open_dir(&dir).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Error::Insecure {
                path: dir.clone(),
                reason: "the store directory is a symbolic link; open the real directory instead",
            },
            Some(libc::ENOTDIR) => Error::Insecure {
                path: dir.clone(),
                reason: "the store path is not a directory",
            },
            _ => Error::io("open the store directory", &dir, e),
        })?;
        let meta = handle
            .metadata()
            .map_err(|e| Error::io("inspect the store directory", &dir, e))?;
        check_store_dir(&*fs, &dir, &handle, &meta, created)?;
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
        let lock_path = root.join(LOCK_FILE);
        let lock_file = fs.open_lock(&lock_path).map_err(|e| {
            if is_symlink_error(&e) {
                Error::Insecure {
                    path: lock_path.clone(),
                    reason: "the lock file is a symbolic link; remove it",
                }
            } else {
                Error::io("open the lock file", &lock_path, e)
            }
        })?;
        let store = FileSessionStore {
            root,
            root_identity: (meta.dev(), meta.ino()),
            owner_uid: rustix::process::geteuid().as_raw(),
            max_snapshot_bytes,
            fs,
            lock_file: Mutex::new(lock_file),
        };
        store.remove_leftover_temp_files()?;
        Ok(store)
    }

    fn write_lock(&self) -> Result<WriteLock<'_>> {
        let file = self
            .lock_file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.lock()
            .map_err(|e| Error::io("lock", &self.root.join(LOCK_FILE), e))?;
        Ok(WriteLock { file })
    }

    /// Removes temporary files left by saves that crashed. Runs under the write lock, so it
    /// never removes the temporary file of a save in progress. Best effort: a leftover that
    /// cannot be removed is harmless, because it is never listed as a session.
    fn remove_leftover_temp_files(&self) -> Result<()> {
        let _lock = self.write_lock()?;
        for name in self.names()? {
            let Some(name) = name.to_str() else { continue };
            if !(name.starts_with('.') && name.ends_with(TEMP_SUFFIX)) {
                continue;
            }
            let path = self.root.join(name);
            let is_dir = self
                .fs
                .symlink_metadata(&path)
                .map_or(true, |meta| meta.is_dir());
            if !is_dir {
                let _ = self.fs.remove_file(&path);
            }
        }
        Ok(())
    }

    fn names(&self) -> Result<Vec<std::ffi::OsString>> {
        self.fs
            .read_dir(&self.root)
            .map_err(|e| Error::io("read the store directory", &self.root, e))
    }

    /// Makes sure the store's path still names the directory checked at open, so a
    /// directory swapped for a link (or another directory) afterwards is refused rather
    /// than written through. Operations are path-based, so this narrows the window to the
    /// time between this check and the operation; see the type docs.
    fn check_root(&self) -> Result<()> {
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
        Ok(())
    }

    /// Reads the file of `id` after checking it is a plain, singly linked regular file
    /// within the size limit, and that the path still names that file once it has been
    /// read; `Ok(None)` if there is none.
    ///
    /// The last check closes a race: a hard link to an outside file, planted as `<id>.json`
    /// and removed again between our open and our `fstat`, would otherwise pass the
    /// link-count check. A file replaced by a concurrent save while it is read is simply
    /// read again.
    fn read_bytes(&self, id: &SessionId) -> Result<Option<(PathBuf, Vec<u8>)>> {
        const ATTEMPTS: usize = 3;
        let path = self.path_of(id);
        for _ in 0..ATTEMPTS {
            let Some((bytes, file)) = self.read_file(&path)? else {
                return Ok(None);
            };
            let opened = file
                .metadata()
                .map_err(|e| Error::io("inspect", &path, e))?;
            match self.fs.symlink_metadata(&path) {
                // The link count is read again through the open file: a path lookup can
                // see a link count that an unlink racing with it has already lowered.
                Ok(now)
                    if (now.dev(), now.ino()) == (opened.dev(), opened.ino())
                        && now.is_file()
                        && now.nlink() == 1
                        && file
                            .metadata()
                            .map_err(|e| Error::io("inspect", &path, e))?
                            .nlink()
                            == 1 =>
                {
                    return Ok(Some((path, bytes)));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("inspect", &path, e)),
            }
        }
        Err(Error::Insecure {
            path,
            reason: "the snapshot's name kept pointing at another file while it was read; if another program writes the store, retry, otherwise look for planted links",
        })
    }

    /// One read of `path`: its bytes and the open file they came from.
    fn read_file(&self, path: &Path) -> Result<Option<(Vec<u8>, File)>> {
        let path = path.to_path_buf();
        let mut file = match self.fs.open_read(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if is_symlink_error(&e) => {
                return Err(Error::Insecure {
                    path,
                    reason: "the snapshot is a symbolic link, which is never followed; remove it",
                })
            }
            Err(e) => return Err(Error::io("open", &path, e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::io("inspect", &path, e))?;
        if !meta.is_file() {
            return Err(Error::Insecure {
                path,
                reason: "it is not a regular file",
            });
        }
        if meta.nlink() > 1 {
            return Err(Error::Insecure {
                path,
                reason: "the snapshot has more than one hard link, so another name could alias it; remove the other links",
            });
        }
        // Checked on the open file, so no race can swap it: a file of another user (a hard
        // link to it, planted as a snapshot) is never read on that user's behalf.
        if meta.uid() != self.owner_uid {
            return Err(Error::Insecure {
                path,
                reason: "the snapshot belongs to another user than the one running this store, so this store did not write it",
            });
        }
        let too_large = |size_bytes| Error::TooLarge {
            path: path.clone(),
            size_bytes,
            limit_bytes: self.max_snapshot_bytes,
        };
        if meta.len() > self.max_snapshot_bytes {
            return Err(too_large(meta.len()));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        // The file may grow between fstat and read; never read more than the limit.
        (&mut file)
            .take(self.max_snapshot_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("read", &path, e))?;
        let read = bytes.len() as u64;
        if read > self.max_snapshot_bytes {
            return Err(too_large(read));
        }
        Ok(Some((bytes, file)))
    }

    /// Reads and verifies the snapshot of `id`; `Ok(None)` if there is none.
    fn read(&self, id: &SessionId) -> Result<Option<SessionSnapshot>> {
        let Some((path, bytes)) = self.read_bytes(id)? else {
            return Ok(None);
        };
        let snapshot =
            SessionSnapshot::from_json(&bytes).map_err(|e| e.at(&Location::file(&path)))?;
        check_embedded_id(&path, id, snapshot.id())?;
        Ok(Some(snapshot))
    }

    /// The revision of the stored snapshot of `id`, for a compare-and-swap. Checks the
    /// file as `read` does, but decodes only the header (schema version, id, revision);
    /// the rest is not verified.
    fn stored_revision(&self, id: &SessionId) -> Result<Option<Revision>> {
        let Some((path, bytes)) = self.read_bytes(id)? else {
            return Ok(None);
        };
        let (found, revision) =
            SessionSnapshot::peek_revision(&bytes).map_err(|e| e.at(&Location::file(&path)))?;
        check_embedded_id(&path, id, &found)?;
        Ok(Some(revision))
    }
}

fn check_embedded_id(path: &Path, expected: &SessionId, found: &SessionId) -> Result<()> {
    if found == expected {
        Ok(())
    } else {
        Err(Error::IdMismatch {
            path: path.to_path_buf(),
            expected: expected.clone(),
            found: found.to_string(),
        })
    }
}

impl SessionStore for FileSessionStore {
    /// Saves atomically and durably if the stored revision is still `snapshot.revision()`.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if the revision moved; [`Error::TooLarge`] or
    /// [`Error::TooDeep`] if the encoded snapshot could not be read back; a corrupt-kind
    /// error if the stored file's header (schema version, id, revision) cannot be trusted
    /// or it is a link, not a regular file, or over the size limit (delete it first to
    /// replace it); [`Error::Io`] naming the step and path that failed. Before the final
    /// rename nothing stored is changed; see the type docs for the directory-fsync case.
    ///
    /// Only the stored file's header is decoded to decide the compare-and-swap, so a file
    /// damaged elsewhere (which [`load`](SessionStore::load) refuses) is replaced by a save
    /// made at its own revision, which repairs it.
    ///
    /// # Security
    ///
    /// The new file is created 0600 with `O_EXCL | O_NOFOLLOW` under an unpredictable
    /// name and renamed over the old one, so nothing is written through a planted link.
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        let id = snapshot.id();
        let revision = snapshot.revision().next();
        // Encoding does not depend on what is stored, so it happens before taking the lock.
        let bytes = snapshot.to_json_with_revision(revision)?;
        let path = self.path_of(id);
        if bytes.len() as u64 > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                path,
                size_bytes: bytes.len() as u64,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        let _lock = self.write_lock()?;
        self.check_root()?;
        let stored = self.stored_revision(id)?;
        check_revision(id, snapshot.revision(), stored)?;
        match atomic::replace(&*self.fs, &self.root, &path, &format!(".{id}."), &bytes) {
            Ok(()) => Ok(revision),
            Err(ReplaceError::Unchanged(err)) => Err(err),
            Err(ReplaceError::NotDurable(source)) => Err(Error::NotDurable {
                id: id.clone(),
                revision,
                dir: self.root.clone(),
                source,
            }),
        }
    }

    /// Loads and verifies the snapshot of `id`.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], or a corrupt-kind error: [`Error::Malformed`],
    /// [`Error::UnsupportedSchemaVersion`], [`Error::Inconsistent`],
    /// [`Error::IdMismatch`], [`Error::TooLarge`], [`Error::Insecure`].
    ///
    /// # Security
    ///
    /// Opens with `O_NOFOLLOW`, refuses non-regular files and hard-linked files, and reads
    /// at most the size limit.
    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        self.check_root()?;
        self.read(id)?
            .ok_or_else(|| Error::NotFound { id: id.clone() })
    }

    /// Lists every `<id>.json` in the directory. Files whose names are not valid ids
    /// ([`Error::ForeignFile`]) and files that fail verification are reported in
    /// [`SessionList::unreadable`]; other names (temporary files, the lock) are ignored.
    fn list(&self) -> Result<SessionList> {
        self.check_root()?;
        let mut sessions = Vec::new();
        let mut unreadable = Vec::new();
        for name in self.names()? {
            let Some(name) = name.to_str() else {
                let lossy = name.to_string_lossy();
                if lossy.ends_with(SNAPSHOT_SUFFIX) && !lossy.starts_with('.') {
                    unreadable.push(Error::ForeignFile {
                        path: self.root.join(&name),
                        reason: "its name is not valid UTF-8",
                    });
                }
                continue;
            };
            let Some(stem) = name.strip_suffix(SNAPSHOT_SUFFIX) else {
                continue;
            };
            if stem.starts_with('.') {
                continue;
            }
            let Ok(id) = SessionId::parse(stem) else {
                unreadable.push(Error::ForeignFile {
                    path: self.root.join(name),
                    reason: "its name is not <session id>.json (ids are lowercase a-z, 0-9, '-' and '_')",
                });
                continue;
            };
            match self.read(&id) {
                Ok(Some(snapshot)) => sessions.push(SessionSummary::of(&snapshot)),
                // Deleted between readdir and open: not an error, just gone.
                Ok(None) => {}
                Err(e) => unreadable.push(e),
            }
        }
        Ok(SessionList::new(sessions, unreadable))
    }

    /// Deletes the session's file (a symbolic link in its place is removed, not followed)
    /// and fsyncs the directory.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such file; [`Error::Io`] otherwise.
    fn delete(&self, id: &SessionId) -> Result<()> {
        let _lock = self.write_lock()?;
        self.check_root()?;
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
        self.fs
            .remove_file(&path)
            .map_err(|e| Error::io("remove", &path, e))?;
        self.fs
            .sync_dir(&self.root)
            .map_err(|e| Error::io("sync the directory after a delete in", &self.root, e))
    }
}

/// Makes sure `dir` exists, creating it and any missing parents with mode 0700, one level
/// at a time from the top, and fsyncing each new entry into its parent: a save that
/// returns Ok is durable only if every directory above it that this call created is too.
/// Returns whether this call created `dir`.
fn ensure_dir(fs: &dyn FileSystem, dir: &Path) -> Result<bool> {
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
fn check_store_dir(
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

fn is_symlink_error(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}
