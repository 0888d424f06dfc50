//! `FileSessionStore`: per session, a JSON snapshot and an append-only journal of the
//! changes since, in a private directory.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::atomic::{self, ReplaceError};
use super::fs::{FileSystem, OsFileSystem};
use super::journal::{self, JournalHeader, JOURNAL_VERSION};
use super::lock::{StoreLock, WriteLock, DEFAULT_LOCK_TIMEOUT};
use super::summary::{self, Stamp, MAX_SUMMARY_BYTES};
use super::{
    check_revision, check_unchanged, ListScope, Revision, SessionList, SessionStore, SessionSummary,
};
use crate::error::{Error, Location, Result};
use crate::id::SessionId;
use crate::snapshot::{Counts, SessionSnapshot};
use crate::snapshot::window;

/// The default largest snapshot file the store reads or writes: 256 MiB.
pub const DEFAULT_MAX_SNAPSHOT_BYTES: u64 = 256 * 1024 * 1024;

/// The store-wide lock file. Ids never start with a dot, so it cannot name a session.
const LOCK_FILE: &str = ".lock";
/// Suffix of snapshot files.
const SNAPSHOT_SUFFIX: &str = ".json";
/// Suffix of journal files.
const JOURNAL_SUFFIX: &str = ".journal";
/// Suffix of summary files.
const SUMMARY_SUFFIX: &str = ".summary";
/// The suffix of an archived session's marker file (empty; its presence is the state).
const ARCHIVED_SUFFIX: &str = ".archived";
/// Suffix of temporary files; their names start with a dot, so they are never sessions.
const TEMP_SUFFIX: &str = ".tmp";
/// Why [`FileSessionStore::read_checked`] gave up: the file under the name changed at
/// every attempt (saves replacing it back to back, or links being planted).
const NAME_KEPT_CHANGING: &str = "the name kept pointing at another file while it was read; if another program writes the store, retry, otherwise look for planted links";
/// Base snapshots up to this size are read whole before they are decoded; larger ones a
/// window at a time (`window.rs`), so a load's peak memory is the session it builds plus a
/// window, not plus the file.
const WHOLE_READ_BYTES: u64 = 256 * 1024;
/// How much of a base snapshot a save reads to find its header.
const HEAD_BYTES: usize = 4096;
/// A journal is folded into a new base snapshot once it would grow past the larger of
/// this and an eighth of the base, so a session never takes more than about 1.125 times
/// its snapshot's size on disk, and compaction rewrites the history once per eighth of
/// growth rather than once per record.
const MIN_JOURNAL_BYTES: u64 = 64 * 1024;
/// See [`MIN_JOURNAL_BYTES`].
const JOURNAL_FRACTION: u64 = 8;
/// Sessions whose stored state a store remembers between saves; past this the memory is
/// dropped and rebuilt from the files as needed.
const KNOWN_SESSIONS: usize = 4096;

/// How hard a [`FileSessionStore`] works to make each save survive a power loss.
///
/// # Examples
///
/// ```
/// use agent_session::{Durability, FileSessionStore};
///
/// let dir = tempfile::tempdir()?;
/// let store = FileSessionStore::builder()
///     .durability(Durability::Buffered)
///     .open(dir.path())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Every save is fsynced (the file, and the directory when an entry changes) before
    /// it returns: once `save` returns, the session survives a crash of the process, the
    /// OS or the machine. The default.
    #[default]
    Sync,
    /// Saves write to the OS and return without fsync (except the new snapshot file of a
    /// whole rewrite, which is synced before it replaces the old one): they survive a crash
    /// of the process (the OS still has them), but not necessarily a power cut or an OS
    /// crash.
    /// Then the last few seconds of saves may be lost, and because the OS may write a
    /// journal's pages out of order, a session's journal may even come back with a hole
    /// in it, which loading refuses as corrupt (removing `<id>.journal` goes back to the
    /// last full snapshot). Use it when saves are frequent and that is acceptable; see the
    /// README's "Performance" section for what it saves.
    Buffered,
}

/// A [`SessionStore`] that keeps each session in a JSON snapshot, `<dir>/<id>.json`, plus
/// an append-only journal of the changes saved since, `<dir>/<id>.journal`.
///
/// # Incremental saves
///
/// Saving a snapshot that derives from the stored state (loaded from this store, or made
/// by a [`Session`](crate::Session) after it saved here, then extended) appends only what
/// changed, as one checksummed record, to the journal: saving one more turn costs about
/// the same whatever the length of the history. Anything else (a snapshot made with
/// [`SessionSnapshot::builder`], edited history) rewrites the whole snapshot, and so does
/// the save that would grow the journal past the larger of 64 KiB and an eighth of the
/// snapshot: the journal is then emptied, so a session never takes much more than its
/// snapshot's size on disk. Loading applies the journal's records to the snapshot.
/// Revisions and conflicts work the same either way. The layout is documented in
/// `docs/FORMAT.md`.
///
/// # Durability
///
/// With [`Durability::Sync`] (the default), [`save`](SessionStore::save) returns only
/// after the new state is durable. An append writes the record after the journal's last
/// intact record (cutting off any torn tail a crash left) and `fdatasync`s it; a full save
/// writes a temporary file in the same directory, fsyncs it, renames it over the old
/// snapshot and fsyncs the directory. A crash at any point leaves either the old or the new
/// state, never a mix: a partly written record is a torn tail, ignored when loading and cut
/// before the next append; leftover temporary files are never listed as sessions and are
/// removed the next time a store is opened on the directory.
///
/// If the directory fsync fails after the rename (or after a new journal file is
/// created), the new state is in place but may not survive a power loss: `save` then
/// returns [`Error::NotDurable`] with the stored revision, and the next successful save
/// makes it durable. A delete whose directory fsync fails returns [`Error::Io`] saying so,
/// with the files already removed. With [`Durability::Buffered`] saves fsync nothing but
/// the new snapshot file of a whole rewrite (rare, and renaming it unsynced over the only
/// copy could lose the session); deletes still fsync the directory.
///
/// # Locking
///
/// Saves, deletes and archive changes take the store's write lock, so compare-and-swap
/// holds between threads and between processes on the same machine: an exclusive `flock`
/// on the store directory itself, which nothing done to a file in it can split, and one on
/// `<dir>/.lock`, which release 0.1 locked alone (so the two never write at once). A
/// writer that finds the lock held waits for it at most
/// [`FileStoreBuilder::lock_timeout`] (30 seconds by default), then fails with
/// [`Error::Busy`] naming the lock; a process that crashed never holds it (the lock ends
/// with its process), so waiting that long means a writer hung. Do not remove `.lock`
/// while stores are open: this release re-creates it and locks the new file, but a
/// process of release 0.1 would keep holding the deleted one. On a file system that cannot
/// `flock` a directory (the Linux NFS client, which emulates `flock` with POSIX locks that
/// need a file open for writing), only `.lock` is locked, as in release 0.1: there, too,
/// never delete it while stores are open.
///
/// Loads and listings take no lock: they read the snapshot and then the journal, and read
/// both again if a concurrent save replaced the snapshot meanwhile. So a store on a
/// read-only mount, or in a directory its user may only read, opens, lists, loads and
/// exports as usual; its saves, deletes and archive changes fail with [`Error::Io`]
/// saying the store may be read-only.
///
/// # Listing
///
/// Every save also rewrites `<dir>/<id>.summary`, a small file with what
/// [`list`](SessionStore::list) shows, so listing reads a few hundred bytes per session
/// whatever the transcripts' sizes. It is a cache (written without fsync) that names the
/// exact files it describes; a listing reads the session itself when the summary is
/// missing, damaged or out of date.
///
/// # Lifecycle
///
/// - Archiving ([`set_archived`](SessionStore::set_archived)) creates an empty 0600 file
///   `<dir>/<id>.archived` (and fsyncs the directory); restoring removes it. The snapshot,
///   journal and summary are not touched, and listings skip archived sessions by name.
///   A delete removes the marker last; a marker left without its session (by a crash, or
///   by hand) is removed by the first save of a new session under that id, so it never
///   archives a new session.
/// - [`delete_if_unchanged`](SessionStore::delete_if_unchanged) decides and deletes under
///   the write lock, so [`prune`](SessionStore::prune) never deletes a session that was
///   saved, re-created, archived or restored (by any process) since it was listed.
/// - [`stored_bytes`](SessionStore::stored_bytes) is the size of `<id>.json` plus
///   `<id>.journal`.
/// - A fork ([`fork`](SessionStore::fork)) is an ordinary session holding its own copy of
///   the history it shares with its parent: nothing links the two files.
///
/// # Security
///
/// - The directory is created with mode 0700 and files with mode 0600, set atomically at
///   creation (`O_CREAT | O_EXCL` with the mode, never a `chmod` afterwards), so a
///   snapshot is never readable by others, whatever the umask. A snapshot left 0644 by
///   another program is replaced by a new 0600 one on the next save (which then writes the
///   whole snapshot rather than append); a journal or summary file is made 0600 (`fchmod`
///   on the open file) before it is written again.
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
    durability: Durability,
    fs: Arc<dyn FileSystem>,
    /// The store-wide write lock on `<dir>/.lock`.
    lock: StoreLock,
    /// What this store last saw stored for each session it saved, valid while the files'
    /// identities (inode, size, modification time) are unchanged. It spares a save reading
    /// the journal to find where it ends; only taken under the write lock.
    known: Mutex<HashMap<SessionId, Known>>,
    /// The summaries the last listings read, with the files they were read from; a listing
    /// reuses one while none of those files changed.
    listed: Mutex<HashMap<SessionId, (ListedFiles, SessionSummary)>>,
}

/// The stored state of a session, as far as a save needs it.
#[derive(Debug, Clone)]
struct Known {
    base: Stamp,
    journal: Option<Stamp>,
    /// The stored revision: the last journal record's, or the base's.
    revision: Revision,
    created_at: DateTime<Utc>,
    /// The stored `updated_at`, when known (always, if `verified`): a snapshot claiming to
    /// derive from the stored state must agree on it too, so one merely labelled with the
    /// stored revision is written whole rather than appended to something else.
    updated_at: Option<DateTime<Utc>>,
    /// The stored lengths, when known (always, if the journal holds records).
    counts: Option<Counts>,
    /// Where the journal's intact records end, if it holds records for this base; `None`
    /// when there is no journal or it belongs to an older base.
    journal_end: Option<u64>,
    /// Whether the base is private (mode 0600); a save rewrites one that is not.
    base_private: bool,
    /// The base's own revision (the journal's records come after it).
    base_revision: Revision,
    /// Whether the whole state was read and verified (or written by this store), so a
    /// record may be appended to it.
    verified: bool,
    /// Whether this store has fsynced the directory since the session's files were named
    /// (so their names survive a power loss). A journal found on disk may have been
    /// created by a save that crashed or failed before its directory fsync.
    dir_synced: bool,
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
    durability: Durability,
    lock_timeout: Duration,
}

impl FileStoreBuilder {
    /// Sets the largest snapshot file the store reads or writes (default
    /// [`DEFAULT_MAX_SNAPSHOT_BYTES`]). Larger files are refused with [`Error::TooLarge`].
    pub fn max_snapshot_bytes(&mut self, limit: u64) -> &mut Self {
        self.max_snapshot_bytes = limit;
        self
    }

    /// Sets how saves are flushed to disk (default [`Durability::Sync`]).
    pub fn durability(&mut self, durability: Durability) -> &mut Self {
        self.durability = durability;
        self
    }

    /// Sets how long a save, delete or archive change waits for the store's write lock
    /// while another writer (a thread, or another process) holds it, before it fails with
    /// [`Error::Busy`] (default 30 seconds; `Duration::MAX` waits for ever). A writer that
    /// crashed never holds the lock (it ends with its process); one that hangs would
    /// otherwise block every writer forever.
    pub fn lock_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.lock_timeout = timeout;
        self
    }

    /// Opens (creating if needed) the store in `dir`.
    ///
    /// # Errors
    ///
    /// As [`FileSessionStore::open`].
    pub fn open(&self, dir: impl AsRef<Path>) -> Result<FileSessionStore> {
        FileSessionStore::open_configured(dir.as_ref(), self, Arc::new(OsFileSystem))
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
            durability: Durability::default(),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// The store's directory, as resolved when it was opened.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// The snapshot file of session `id`. Its journal and listing summary sit beside it as
    /// `<id>.journal` and `<id>.summary`: to copy a session by hand, copy the snapshot and
    /// the journal together. The path is always directly inside [`dir`](Self::dir).
    #[must_use]
    pub fn path_of(&self, id: &SessionId) -> PathBuf {
        self.root.join(format!("{id}{SNAPSHOT_SUFFIX}"))
    }

    /// Opens with default settings but the given size limit, through `fs` (for tests that
    /// inject faults).
    #[cfg(test)]
    pub(super) fn open_with(
        dir: &Path,
        max_snapshot_bytes: u64,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Self> {
        let mut settings = FileSessionStore::builder();
        settings.max_snapshot_bytes(max_snapshot_bytes);
        FileSessionStore::open_configured(dir, &settings, fs)
    }

    pub(super) fn open_configured(
        dir: &Path,
        settings: &FileStoreBuilder,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Self> {
        let max_snapshot_bytes = settings.max_snapshot_bytes;
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
        let lock = StoreLock::open(&*fs, handle, root.clone(), LOCK_FILE, settings.lock_timeout)?;
        let store = FileSessionStore {
            root,
            root_identity: (meta.dev(), meta.ino()),
            owner_uid: rustix::process::geteuid().as_raw(),
            max_snapshot_bytes,
            durability: settings.durability,
            fs,
            lock,
            known: Mutex::new(HashMap::new()),
            listed: Mutex::new(HashMap::new()),
        };
        store.remove_leftover_temp_files()?;
        Ok(store)
    }

    fn write_lock(&self) -> Result<WriteLock<'_>> {
        self.lock.write(&*self.fs, &|| self.check_root())
    }

    /// Removes temporary files left by saves that crashed. Runs under the write lock, so it
    /// never removes the temporary file of a save in progress. Best effort: a leftover that
    /// cannot be removed is harmless, because it is never listed as a session. Only if the
    /// lock is free at once: a writer at work (or hung) holding it must not keep a store
    /// from opening to read, and a read-only store has none to remove.
    fn remove_leftover_temp_files(&self) -> Result<()> {
        let Some(_lock) = self.lock.try_write(&*self.fs, &|| self.check_root())? else {
            return Ok(());
        };
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

    /// The journal of session `id`: `<dir>/<id>.journal`.
    fn journal_path(&self, id: &SessionId) -> PathBuf {
        self.root.join(format!("{id}{JOURNAL_SUFFIX}"))
    }

    /// The marker of archived session `id`: `<dir>/<id>.archived`.
    fn archived_path(&self, id: &SessionId) -> PathBuf {
        self.root.join(format!("{id}{ARCHIVED_SUFFIX}"))
    }

    /// The listing summary of session `id`: `<dir>/<id>.summary`.
    fn summary_path(&self, id: &SessionId) -> PathBuf {
        self.root.join(format!("{id}{SUMMARY_SUFFIX}"))
    }

    fn durable(&self) -> bool {
        self.durability == Durability::Sync
    }

    /// Reads `path` (all of it, or with `head` only its first bytes) after checking it is
    /// a plain, singly linked regular file of ours within `limit`, and that the path still
    /// names that file once it has been read; `Ok(None)` if there is none. Returns the
    /// bytes and the metadata of the file read.
    ///
    /// The last check closes a race: a hard link to an outside file, planted under our
    /// name and removed again between our open and our `fstat`, would otherwise pass the
    /// link-count check. A file replaced by a concurrent save while it is read is simply
    /// read again.
    fn read_checked(
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
    fn read_checked_with<T>(
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
                    path: path.to_path_buf(),
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

    /// Reads and decodes the base snapshot at `path` (not yet validated) a window at a time,
    /// so a load never holds the file's bytes and the session they make at once; a file not
    /// in the shape this crate writes is read whole by the ordinary decoder instead.
    fn read_base(&self, path: &Path) -> Result<Option<(SessionSnapshot, Metadata)>> {
        let limit = self.max_snapshot_bytes;
        self.read_checked_with(path, limit, |file, meta| {
            // A small file is read whole, which is quicker (measured: a 10-message session
            // loaded in 30 us through windows, 20 us whole), and holds little.
            let decoded = if meta.len() <= WHOLE_READ_BYTES {
                read_bytes(file, meta, path, limit, false)
                    .and_then(|bytes| SessionSnapshot::decode_unvalidated(&bytes))
            } else {
                match window::decode(file, meta.len(), limit) {
                    Ok(Some(snapshot)) => return Ok(snapshot),
                    Ok(None) => {
                        let bytes = read_bytes(file, meta, path, limit, false)?;
                        SessionSnapshot::decode_unvalidated(&bytes)
                    }
                    Err(window::Failure::TooLarge) => Err(Error::TooLarge {
                        path: path.to_path_buf(),
                        size_bytes: limit.saturating_add(1),
                        limit_bytes: limit,
                    }),
                    Err(window::Failure::Io(e)) => Err(Error::io("read", path, e)),
                }
            };
            decoded.map_err(|e| e.at(&Location::file(path)))
        })
    }

    /// Opens `path` for reading or writing and checks, on the open file, that it is a
    /// regular file of ours with one link; `Ok(None)` if there is none.
    fn open_checked(&self, path: &Path, write: bool) -> Result<Option<(File, Metadata)>> {
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
    fn is_plain(&self, meta: &Metadata) -> bool {
        meta.is_file()
            && meta.nlink() == 1
            && meta.uid() == self.owner_uid
            && is_private(meta.permissions().mode())
    }

    /// The checks every file the store reads must pass.
    fn check_file(&self, path: &Path, meta: &Metadata) -> Result<()> {
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

    /// Reads and verifies the state of `id` (its base snapshot and the records of its
    /// journal); `Ok(None)` if there is none. Remembers what it read for later saves.
    fn read(&self, id: &SessionId) -> Result<Option<SessionSnapshot>> {
        Ok(self.read_state(id, false)?.map(|(snapshot, known)| {
            if let Some(known) = known {
                self.remember_read(id, known);
            }
            snapshot
        }))
    }

    /// Remembers a state read from the files. A save that could not make its record
    /// durable marked the state so the next save rewrites it; reading the same files does
    /// not lift that.
    fn remember_read(&self, id: &SessionId, mut known: Known) {
        if let Some(before) = self.known_sessions().get(id) {
            if before.base == known.base && before.journal == known.journal {
                known.verified &= before.verified;
                known.dir_synced |= before.dir_synced;
            }
        }
        self.remember(id, known);
    }

    /// [`read`](Self::read), also returning what a save needs to know of the state read,
    /// when the files did not change while they were read.
    ///
    /// Reads take no lock, so a save replacing the base meanwhile makes them read again.
    /// After a few such attempts (savers rewriting the session back to back can outpace a
    /// reader) the last one is made under the write lock, unless the caller holds it
    /// (`locked`), so a busy session is read late rather than reported unreadable.
    fn read_state(
        &self,
        id: &SessionId,
        locked: bool,
    ) -> Result<Option<(SessionSnapshot, Option<Known>)>> {
        const ATTEMPTS: usize = 3;
        let path = self.path_of(id);
        let journal_path = self.journal_path(id);
        let mut lock = None;
        for attempt in 0..=ATTEMPTS {
            if attempt == ATTEMPTS {
                if locked {
                    break;
                }
                lock = Some(self.lock.read(&*self.fs, &|| self.check_root())?);
            }
            // Until the attempt under the lock, a base replaced at every look is a reason
            // to read again, not yet an error.
            let retry_on_change = !locked && lock.is_none();
            let Some((mut snapshot, base)) = (match self.read_base(&path) {
                Err(Error::Insecure { reason, .. })
                    if retry_on_change && reason == NAME_KEPT_CHANGING =>
                {
                    continue
                }
                read => read?,
            }) else {
                return Ok(None);
            };
            check_embedded_id(&path, id, snapshot.id())?;
            let base_revision = snapshot.revision();
            let mut journal_stamp = None;
            let mut journal_end = None;
            let mut unchanged = true;
            if let Some((journal, meta)) =
                self.read_checked(&journal_path, self.max_snapshot_bytes, false)?
            {
                journal_end = apply_journal(&mut snapshot, &journal)
                    .map_err(|e| e.at(&Location::file(&journal_path)))?;
                // The stamp is from before the read: if the journal grew meanwhile, what
                // was read is not what the stamp names.
                unchanged = journal.len() as u64 == meta.len();
                journal_stamp = Some(Stamp::of(&meta));
            }
            // A compaction may have replaced the base (and emptied the journal) while we
            // read: the journal read belongs to the new base then, so read both again.
            match self.fs.symlink_metadata(&path) {
                Ok(now) if (now.dev(), now.ino()) == (base.dev(), base.ino()) => {}
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::io("inspect", &path, e)),
            }
            snapshot
                .validate()
                .map_err(|e| e.at(&Location::file(&path)))?;
            drop(lock);
            let revision = snapshot.revision();
            snapshot.mark_stored(revision);
            let known = unchanged.then(|| Known {
                base: Stamp::of(&base),
                journal: journal_stamp,
                base_revision,
                revision,
                created_at: snapshot.created_at(),
                updated_at: Some(snapshot.updated_at()),
                counts: Some(snapshot.counts()),
                journal_end: journal_end.map(|end| end as u64),
                base_private: is_private(base.permissions().mode()),
                verified: true,
                dir_synced: false,
            });
            return Ok(Some((snapshot, known)));
        }
        Err(Error::Insecure {
            path,
            reason: "the session kept changing while it was read; if another program writes the store, retry",
        })
    }

    /// The stored state of `id`, for a save. Called under the write lock.
    ///
    /// From memory if the files are the ones this store last saw (same inode, size and
    /// times, no torn tail, and the base's header still says the same revision). Otherwise,
    /// with `verify` (the save may append), by reading and verifying the whole state, so a
    /// record is only ever appended to a state that loads; without it, or if the state
    /// does not load, from the base's header and the journal's records, which is enough
    /// to decide the compare-and-swap of a full rewrite (and lets a save repair a base
    /// damaged past its header).
    fn stored_state(&self, id: &SessionId, verify: bool) -> Result<Option<Known>> {
        let path = self.path_of(id);
        let journal_path = self.journal_path(id);
        let base_meta = match self.fs.symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("inspect", &path, e)),
        };
        let journal_meta = match self.fs.symlink_metadata(&journal_path) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("inspect", &journal_path, e)),
        };
        let cached = self.known_sessions().get(id).cloned();
        if let Some(known) = cached {
            let same_files = known.base == Stamp::of(&base_meta)
                && known.journal == journal_meta.as_ref().map(Stamp::of)
                && self.is_plain(&base_meta)
                && journal_meta.as_ref().is_none_or(|m| {
                    // Anything past the intact records (a torn tail, an old base's records)
                    // could have been replaced by as many new bytes: read it again.
                    self.is_plain(m) && m.len() == known.journal_end.unwrap_or(0)
                });
            if same_files && self.base_header_is(id, &known)? {
                return Ok(Some(known));
            }
        }
        if verify {
            if let Ok(Some((_, Some(known)))) = self.read_state(id, true) {
                self.remember_read(id, known);
                return Ok(self.known_sessions().get(id).cloned());
            }
        }
        self.forget(id);
        let mut known = self.read_stored_state(id)?;
        if let Some(known) = &mut known {
            // A base loosened by another program (say 0644) must not be kept: the save
            // writes a new, private one instead of appending.
            known.base_private = is_private(base_meta.permissions().mode());
        }
        Ok(known)
    }

    /// Whether the base of `id` still starts with the revision and creation time `known`
    /// has for it: inode numbers are reused and timestamps can be coarse, so equal stamps
    /// alone could name a base written since by another process.
    fn base_header_is(&self, id: &SessionId, known: &Known) -> Result<bool> {
        let path = self.path_of(id);
        let Some((head, _)) = self.read_checked(&path, self.max_snapshot_bytes, true)? else {
            return Ok(false);
        };
        Ok(matches!(
            SessionSnapshot::peek_header(&head, head.len() < HEAD_BYTES),
            Ok(Some(header)) if header.id == *id
                && header.revision == known.base_revision
                && header.created_at == known.created_at
        ))
    }

    /// [`stored_state`](Self::stored_state) read from the files.
    fn read_stored_state(&self, id: &SessionId) -> Result<Option<Known>> {
        let path = self.path_of(id);
        let Some((head, base)) = self.read_checked(&path, self.max_snapshot_bytes, true)? else {
            return Ok(None);
        };
        let header = match SessionSnapshot::peek_header(&head, head.len() < HEAD_BYTES) {
            Ok(Some(header)) => header,
            // Not in the form this crate writes: decode the header from the whole file.
            Ok(None) => {
                let Some((bytes, _)) = self.read_checked(&path, self.max_snapshot_bytes, false)?
                else {
                    return Ok(None);
                };
                SessionSnapshot::peek_header(&bytes, true)
                    .map_err(|e| e.at(&Location::file(&path)))?
                    .ok_or_else(|| Error::inconsistent("the snapshot has no header"))?
            }
            Err(e) => return Err(e.at(&Location::file(&path))),
        };
        check_embedded_id(&path, id, &header.id)?;
        let mut known = Known {
            base: Stamp::of(&base),
            journal: None,
            revision: header.revision,
            created_at: header.created_at,
            updated_at: None,
            counts: None,
            journal_end: None,
            base_private: true,
            base_revision: header.revision,
            // Only the header and the records' framing were read: enough for a
            // compare-and-swap, not to append to.
            verified: false,
            dir_synced: false,
        };
        let journal_path = self.journal_path(id);
        let Some((bytes, meta)) =
            self.read_checked(&journal_path, self.max_snapshot_bytes, false)?
        else {
            return Ok(Some(known));
        };
        known.journal = Some(Stamp::of(&meta));
        let at_journal = |e: Error| e.at(&Location::file(&journal_path));
        let frames = journal::split(&bytes).map_err(at_journal)?;
        let Some(((_, first), records)) = frames.frames.split_first() else {
            return Ok(Some(known));
        };
        let journal_header = journal::decode_header(first).map_err(at_journal)?;
        if !journal_follows(&journal_header, id, header.revision, header.created_at) {
            return Ok(Some(known));
        }
        let mut counts = journal_header.base;
        let mut revision = header.revision;
        for (_, payload) in records {
            let change = journal::decode_record(payload).map_err(at_journal)?;
            if change.revision != revision.next() || !change.from.within(counts) {
                return Err(at_journal(Error::inconsistent(format!(
                    "the record of revision {} does not follow revision {revision} with {counts:?}",
                    change.revision
                ))));
            }
            counts = journal::counts_after(&change);
            revision = change.revision;
        }
        known.revision = revision;
        known.counts = Some(counts);
        known.journal_end = Some(frames.valid_end as u64);
        Ok(Some(known))
    }

    fn known_sessions(&self) -> MutexGuard<'_, HashMap<SessionId, Known>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn remember(&self, id: &SessionId, known: Known) {
        let mut sessions = self.known_sessions();
        if sessions.len() >= KNOWN_SESSIONS && !sessions.contains_key(id) {
            sessions.clear();
        }
        sessions.insert(id.clone(), known);
    }

    fn forget(&self, id: &SessionId) {
        self.known_sessions().remove(id);
    }

    /// Appends `snapshot`'s change since what is stored to the journal, if the snapshot
    /// knows it derives from exactly the stored state and the journal stays within its
    /// bound; `Ok(None)` if a full write is needed instead.
    fn try_append(
        &self,
        snapshot: &SessionSnapshot,
        stored: &Known,
        record: &[u8],
    ) -> Result<Option<Revision>> {
        let id = snapshot.id();
        let revision = stored.revision.next();
        let Some(provenance) = snapshot.provenance() else {
            return Ok(None);
        };
        if !stored.verified
            || !stored.base_private
            || provenance.revision != stored.revision
            || snapshot.created_at() != stored.created_at
            || stored.updated_at != Some(provenance.updated_at)
            || stored.counts != Some(provenance.stored)
        {
            return Ok(None);
        }
        // A live journal is appended to; otherwise a new one starts with a header naming
        // the base it follows (which is then the stored state itself).
        let (offset, header) = match stored.journal_end {
            Some(end) => (end, Vec::new()),
            None => (
                0,
                journal::encode_header(&JournalHeader {
                    journal: u64::from(JOURNAL_VERSION),
                    id: id.clone(),
                    base_revision: stored.revision,
                    base_created_at: stored.created_at,
                    base: provenance.stored,
                })?,
            ),
        };
        let new_end = offset + (header.len() + record.len()) as u64;
        let bound = MIN_JOURNAL_BYTES
            .max(stored.base.size() / JOURNAL_FRACTION)
            .min(self.max_snapshot_bytes);
        if new_end > bound {
            return Ok(None);
        }
        let path = self.journal_path(id);
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
        let (file, created) = match self.open_checked(&path, true)? {
            Some((file, meta)) => {
                if offset == 0 {
                    // An older base's records: gone for good before new ones are written.
                    self.empty_journal(&file, meta.len())
                        .map_err(|e| Error::io("empty the journal", &path, e))?;
                }
                (file, false)
            }
            // Gone since it was read (removed by hand): records after `offset` would follow
            // a hole, so the save writes a whole snapshot instead.
            None if offset > 0 => {
                self.forget(id);
                return Ok(None);
            }
            None => match self.fs.create_private(&path) {
                Ok(file) => (file, true),
                Err(e) => return Err(Error::io("create the journal", &path, e)),
            },
        };
        let mut bytes = header;
        bytes.extend_from_slice(record);
        self.write_record(snapshot, stored, &file, offset, &bytes, created)?;
        let journal_stamp = file.metadata().ok().map(|meta| Stamp::of(&meta));
        let counts = snapshot.counts();
        match journal_stamp {
            Some(stamp) => self.remember(
                id,
                Known {
                    base: stored.base,
                    journal: Some(stamp),
                    revision,
                    created_at: stored.created_at,
                    updated_at: Some(snapshot.updated_at()),
                    counts: Some(counts),
                    journal_end: Some(new_end),
                    base_private: true,
                    base_revision: stored.base_revision,
                    verified: true,
                    dir_synced: stored.dir_synced || self.durable(),
                },
            ),
            None => self.forget(id),
        }
        self.write_summary(snapshot, revision, stored.base, journal_stamp);
        Ok(Some(revision))
    }

    /// Writes `bytes` (a record, after a header for a new journal) at `offset` of the
    /// journal of `snapshot`'s session and makes them durable. On failure the bytes are
    /// taken back off where possible, so nothing changed; see the type docs otherwise.
    fn write_record(
        &self,
        snapshot: &SessionSnapshot,
        stored: &Known,
        file: &File,
        offset: u64,
        bytes: &[u8],
        created: bool,
    ) -> Result<()> {
        let id = snapshot.id();
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
                            updated_at: Some(snapshot.updated_at()),
                            counts: Some(snapshot.counts()),
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

    /// Writes `snapshot` as a new base at `revision` and empties the journal.
    fn rewrite(&self, snapshot: &SessionSnapshot, revision: Revision) -> Result<Revision> {
        let id = snapshot.id();
        let path = self.path_of(id);
        self.check_journal_slot(id)?;
        let bytes = snapshot.to_json_with_revision(revision)?;
        if bytes.len() as u64 > self.max_snapshot_bytes {
            return Err(Error::TooLarge {
                path,
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
                    },
                );
                self.write_summary(snapshot, revision, base, journal);
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
    fn check_journal_slot(&self, id: &SessionId) -> Result<()> {
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
    fn empty_journal(&self, file: &File, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.fs.set_len(file, 0)?;
        if self.durable() {
            self.fs.sync_data(file)?;
        }
        Ok(())
    }

    /// Updates the listing summary of `snapshot`, now stored at `revision` as `base` and
    /// `journal`. Best effort and never fsynced: a summary that does not match the files
    /// is ignored by `list`, which then reads the session.
    fn write_summary(
        &self,
        snapshot: &SessionSnapshot,
        revision: Revision,
        base: Stamp,
        journal: Option<Stamp>,
    ) {
        let path = self.summary_path(snapshot.id());
        let bytes = summary::encode(snapshot, revision, base, journal);
        let file = match self.open_checked(&path, true) {
            Ok(Some((file, _))) => file,
            Ok(None) => match self.fs.create_private(&path) {
                Ok(file) => file,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let _ = self
            .fs
            .write_all_at(&file, &bytes, 0)
            .and_then(|()| self.fs.set_len(&file, bytes.len() as u64));
    }

    /// The summary of `id` for a listing: from its summary file if that describes the
    /// current files, otherwise by reading the session (and writing its summary again).
    /// `Ok(None)` if it was deleted meanwhile.
    fn summarize(
        &self,
        id: &SessionId,
        names: &HashSet<OsString>,
    ) -> Result<Option<SessionSummary>> {
        if names.contains(&OsString::from(format!("{id}{SUMMARY_SUFFIX}"))) {
            if let Some(found) = self.read_summary(id, names) {
                return Ok(Some(found));
            }
        }
        let Some((snapshot, known)) = self.read_state(id, false)? else {
            return Ok(None);
        };
        if let Some(known) = known {
            // Repaired for the next listing (best effort, no lock needed: a summary names
            // the files it describes, so one that a concurrent save outdates is ignored).
            self.write_summary(&snapshot, snapshot.revision(), known.base, known.journal);
            self.remember_read(id, known);
        }
        Ok(Some(SessionSummary::of(&snapshot)))
    }

    /// The summary file of `id`, if it describes the session's current files and those
    /// would pass a load's checks on links, owner and size.
    fn read_summary(&self, id: &SessionId, names: &HashSet<OsString>) -> Option<SessionSummary> {
        let readable = |meta: Metadata| {
            (self.is_plain(&meta) && meta.len() <= self.max_snapshot_bytes).then_some(meta)
        };
        let base = readable(self.fs.symlink_metadata(&self.path_of(id)).ok()?)?;
        let journal = if names.contains(&OsString::from(format!("{id}{JOURNAL_SUFFIX}"))) {
            Some(readable(
                self.fs.symlink_metadata(&self.journal_path(id)).ok()?,
            )?)
        } else {
            None
        };
        let summary_path = self.summary_path(id);
        let files = (
            Stamp::of(&base),
            journal.as_ref().map(Stamp::of),
            self.fs
                .symlink_metadata(&summary_path)
                .ok()
                .filter(|meta| self.is_plain(meta))
                .map(|meta| Stamp::of(&meta))?,
        );
        // A summary decoded before from these very files is not read again: a listing
        // then costs a few `lstat`s per session.
        if let Some((seen, summary)) = self.listed_sessions().get(id) {
            if *seen == files {
                return Some(summary.clone());
            }
        }
        let (mut file, meta) = self.open_checked(&summary_path, false).ok()??;
        let bytes = read_bytes(&mut file, &meta, &summary_path, MAX_SUMMARY_BYTES, false).ok()?;
        let summary = summary::decode(&bytes, id, &base, journal.as_ref())?;
        // Remembered only if what was read is the version stamped above.
        let read = file.metadata().ok().map(|m| Stamp::of(&m));
        if read == Some(files.2) {
            let mut listed = self.listed_sessions();
            if listed.len() >= KNOWN_SESSIONS * 64 && !listed.contains_key(id) {
                listed.clear();
            }
            listed.insert(id.clone(), (files, summary.clone()));
        }
        Some(summary)
    }

    fn listed_sessions(&self) -> MutexGuard<'_, HashMap<SessionId, (ListedFiles, SessionSummary)>> {
        self.listed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The stamps of a session's base, journal and summary files when its summary was read.
type ListedFiles = (Stamp, Option<Stamp>, Stamp);

/// Whether a journal with `header` holds records for the base of session `id` stored at
/// `revision`, created at `created_at` (rather than for an older base, or for a deleted
/// session of the same id).
fn journal_follows(
    header: &JournalHeader,
    id: &SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
) -> bool {
    header.id == *id && header.base_revision == revision && header.base_created_at == created_at
}

/// Applies the records of `journal` to its base `snapshot` (decoded, not yet validated),
/// and returns where its intact records end; `None` if it holds no records for this base
/// (empty, torn before its header, or left by an older base, which is ignored).
fn apply_journal(snapshot: &mut SessionSnapshot, journal: &[u8]) -> Result<Option<usize>> {
    let frames = journal::split(journal)?;
    let Some(((_, first), records)) = frames.frames.split_first() else {
        return Ok(None);
    };
    let header = journal::decode_header(first)?;
    if header.id != *snapshot.id() {
        return Err(Error::inconsistent(format!(
            "the journal belongs to session {}, not {}",
            header.id,
            snapshot.id()
        )));
    }
    if !journal_follows(
        &header,
        snapshot.id(),
        snapshot.revision(),
        snapshot.created_at(),
    ) {
        return Ok(None);
    }
    if header.base != snapshot.counts() {
        return Err(Error::inconsistent(format!(
            "the journal's header says its base has {:?}, but the base has {:?}",
            header.base,
            snapshot.counts()
        )));
    }
    for (_, payload) in records {
        snapshot.apply_change(journal::decode_record(payload)?)?;
    }
    Ok(Some(frames.valid_end))
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
    /// A snapshot that derives from the stored state (one loaded from this store, or made
    /// by a [`Session`](crate::Session) after it saved here) has only its new part
    /// appended to the session's journal; anything else, and a save that would grow the
    /// journal past the larger of 64 KiB and an eighth of the snapshot, is written as a
    /// whole new snapshot. See the type docs.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if the revision moved; [`Error::TooLarge`] or
    /// [`Error::TooDeep`] if the encoded snapshot could not be read back; a corrupt-kind
    /// error if the stored file's header (schema version, id, revision) or the journal's
    /// records cannot be trusted, or a file is a link, not a regular file, or over the size
    /// limit (delete the session first to replace it); [`Error::Io`] naming the step and
    /// path that failed. Nothing stored is changed on error, except after
    /// [`Error::NotDurable`] (see the type docs).
    ///
    /// Only the stored file's header is decoded to decide the compare-and-swap, so a base
    /// damaged elsewhere (which [`load`](SessionStore::load) refuses) is replaced by a save
    /// made at its own revision, which repairs it.
    ///
    /// # Security
    ///
    /// The new file is created 0600 with `O_EXCL | O_NOFOLLOW` under an unpredictable
    /// name and renamed over the old one, so nothing is written through a planted link;
    /// the journal is opened with `O_NOFOLLOW` and checked like a snapshot.
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        let id = snapshot.id();
        if snapshot.is_unchanged_since_stored() {
            if let Some(revision) = self.unchanged(snapshot)? {
                return Ok(revision);
            }
        }
        let revision = snapshot.revision().next();
        // Encoding does not depend on what is stored, so it happens before taking the lock.
        let record = match snapshot.change_since_stored(revision) {
            Some(change) => Some(journal::encode_record(id, &change)?),
            None => None,
        };
        let _lock = self.write_lock()?;
        self.check_root()?;
        let stored = self.stored_state(id, record.is_some())?;
        check_revision(id, snapshot.revision(), stored.as_ref().map(|s| s.revision))?;
        if stored.is_none() {
            self.remove_orphan_marker(id)?;
        }
        if let (Some(record), Some(stored)) = (&record, &stored) {
            if let Some(revision) = self.try_append(snapshot, stored, record)? {
                return Ok(revision);
            }
        }
        self.rewrite(snapshot, revision)
    }

    /// Loads and verifies the snapshot of `id`, with its journal's records applied.
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

    /// Lists every `<id>.json` in the directory that is not archived, from each session's
    /// summary file when it
    /// matches the session's files (so the cost does not depend on transcript sizes), and
    /// by reading the session otherwise. Files whose names are not valid ids
    /// ([`Error::ForeignFile`]) and sessions that fail verification are reported in
    /// [`SessionList::unreadable`]; other names (journals, summaries, temporary files, the
    /// lock) are not sessions.
    fn list(&self) -> Result<SessionList> {
        self.list_scoped(ListScope::Active)
    }

    /// As [`list`](SessionStore::list), for the sessions in `scope`: a session is archived
    /// while an empty marker file `<id>.archived` sits beside it, so archived sessions
    /// outside the scope are skipped by name, without reading anything of them.
    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        self.check_root()?;
        let mut sessions = Vec::new();
        let mut unreadable = Vec::new();
        let names: HashSet<OsString> = self.names()?.into_iter().collect();
        for name in &names {
            let Some(name) = name.to_str() else {
                let lossy = name.to_string_lossy();
                if lossy.ends_with(SNAPSHOT_SUFFIX) && !lossy.starts_with('.') {
                    unreadable.push(Error::ForeignFile {
                        path: self.root.join(name),
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
            let archived = names.contains(&OsString::from(format!("{id}{ARCHIVED_SUFFIX}")));
            if !scope.includes(archived) {
                continue;
            }
            match self.summarize(&id, &names) {
                Ok(Some(mut summary)) => {
                    summary.archived = archived;
                    sessions.push(summary);
                }
                // Deleted between readdir and open: not an error, just gone.
                Ok(None) => {}
                Err(e) => unreadable.push(e),
            }
        }
        Ok(SessionList::new(sessions, unreadable))
    }

    /// Deletes the session's files (a symbolic link in their place is removed, not
    /// followed) and fsyncs the directory. The snapshot goes first: a journal left by a
    /// crash halfway is ignored, because it names a base that no longer exists.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such session; [`Error::Io`] otherwise.
    fn delete(&self, id: &SessionId) -> Result<()> {
        let _lock = self.write_lock()?;
        self.check_root()?;
        self.delete_locked(id)
    }

    /// Archives or restores the session by creating or removing its empty marker file
    /// `<id>.archived` (0600, created with `O_EXCL | O_NOFOLLOW`), then fsyncs the
    /// directory. The snapshot and journal are not touched.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such session; [`Error::Io`] otherwise.
    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
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

    /// The sizes of the session's snapshot file and journal, from `lstat`.
    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        self.check_root()?;
        let mut bytes = 0;
        for (path, required) in [(self.path_of(id), true), (self.journal_path(id), false)] {
            match self.fs.symlink_metadata(&path) {
                Ok(meta) => bytes += meta.len(),
                Err(e) if e.kind() == io::ErrorKind::NotFound && required => {
                    return Err(Error::NotFound { id: id.clone() })
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("inspect", &path, e)),
            }
        }
        Ok(Some(bytes))
    }

    /// Deletes the session if it is still as listed (revision, creation time, archive
    /// marker), deciding and deleting under the store's write lock, so no save or archive
    /// change (from this process or another) can land in between.
    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        let _lock = self.write_lock()?;
        self.check_root()?;
        let id = &listed.id;
        let stored = match self.stored_state(id, false)? {
            Some(known) => Some((known.revision, known.created_at, self.is_archived(id)?)),
            None => None,
        };
        check_unchanged(listed, stored)?;
        self.delete_locked(id)
    }
}

impl FileSessionStore {
    /// For a snapshot known to be what is stored at its revision: its revision, if the
    /// store still holds exactly that state (same revision, creation and update times) in
    /// files that need no repair, so saving it writes nothing; `Ok(None)` to save it as
    /// usual; [`Error::Conflict`] if another writer moved the revision.
    fn unchanged(&self, snapshot: &SessionSnapshot) -> Result<Option<Revision>> {
        let id = snapshot.id();
        let _lock = self.write_lock()?;
        self.check_root()?;
        // Verified (read whole if this store does not know it), so the update time is known.
        let stored = self.stored_state(id, true)?;
        check_revision(id, snapshot.revision(), stored.as_ref().map(|s| s.revision))?;
        Ok(stored
            .filter(|s| {
                s.verified
                    && s.created_at == snapshot.created_at()
                    && s.updated_at == Some(snapshot.updated_at())
                    && s.counts == Some(snapshot.counts())
                    // A base loosened by another program is rewritten private all the same.
                    && s.base_private
            })
            .map(|s| s.revision))
    }

    /// Whether session `id`'s archive marker is there. A directory in its place is not a
    /// marker this store wrote and cannot be removed by it: an error, not a state.
    fn is_archived(&self, id: &SessionId) -> Result<bool> {
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
    fn remove_orphan_marker(&self, id: &SessionId) -> Result<()> {
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
    fn delete_locked(&self, id: &SessionId) -> Result<()> {
        let path = self.path_of(id);
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
        // Without its snapshot a journal, summary or archive marker is never read; they are
        // removed all the same (also those a delete cut short left behind). The marker
        // goes last, so a failed delete leaves an archived session archived; one that a
        // crash leaves behind is removed by the next first save under the id.
        let mut removed_extra = false;
        for extra in [
            self.journal_path(id),
            self.summary_path(id),
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

/// A directory where a session's archive marker goes: this store never makes one, and
/// cannot remove it.
fn not_a_marker(path: PathBuf) -> Error {
    Error::Insecure {
        path,
        reason: "it is a directory, not the empty archive marker this store writes, and it makes listings show the session as archived; remove it",
    }
}

/// Reads the open `file` at `path` (checked, `meta` its metadata): its first
/// [`HEAD_BYTES`] with `head`, otherwise all of it, refusing more than `limit` bytes.
fn read_bytes(
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
    if !head && read > limit {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
            size_bytes: read,
            limit_bytes: limit,
        });
    }
    Ok(bytes)
}

/// Whether a file mode gives group and others no access at all.
#[allow(clippy::verbose_bit_mask)] // the mask reads as the permission bits it tests
fn is_private(mode: u32) -> bool {
    mode & 0o077 == 0
}

fn is_symlink_error(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}
