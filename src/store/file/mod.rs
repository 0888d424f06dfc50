//! `FileSessionStore`: per session, a JSON snapshot and an append-only journal of the
//! changes since, in a private directory.

mod archive;
mod atomic;
mod fork;
pub(in crate::store) mod fs;
mod journal;
mod lease;
mod lock;
pub(in crate::store) mod private_dir;
mod restore;
mod retention;
mod state;
mod summary;
#[cfg(test)]
mod tests;
mod view;
mod write;

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{
    check_revision, check_unchanged, IndexedMetadata, ListCursor, ListFilter, ListScope, Revision,
    SearchPage, SearchQuery, SessionList, SessionStore, SessionSummary, StoredVersion,
    DEFAULT_MAX_SNAPSHOT_BYTES,
};
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::lease::{Lease, LeaseRequest};
use crate::snapshot::{EntryKind, History, RevisionInfo, SessionSnapshot};
use crate::telemetry;
use fs::{FileSystem, OsFileSystem};
use lock::{StoreLock, WriteLock, DEFAULT_LOCK_TIMEOUT};
use private_dir::open_private_dir;
use state::Known;
use summary::ListedFiles;

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
/// The suffix of the file listing the forks that share a session's first messages.
const FORKS_SUFFIX: &str = ".forks";
/// The suffix of a compacted session's view checkpoint (a cache; see `view.rs`).
const VIEW_SUFFIX: &str = ".view";
/// Suffix of temporary files; their names start with a dot, so they are never sessions.
const TEMP_SUFFIX: &str = ".tmp";
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
/// [`SessionSnapshot::builder`], edited history) appends an entry that replaces the whole
/// view (the history keeps what it replaced); a session's first save writes the whole
/// snapshot. The journal is never folded into the snapshot: only
/// [`trim_history`](SessionStore::trim_history) and retention drop history. Loading
/// applies the journal's entries to the snapshot.
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
/// # Leases
///
/// [`acquire_lease`](SessionStore::acquire_lease) writes `<dir>/<id>.lease` (0600, a new
/// file renamed into place) and holds an exclusive `flock` on it for as long as the
/// lease lasts, so a lease ends when it is released, when its time runs out, or when its
/// holder's process ends, whichever comes first: after a crash of the holder the next
/// writer gets the session at once. Saves read the lease file under the write lock and
/// refuse a save fenced by an older epoch ([`Error::Fenced`]) or made without a lease
/// while one is live ([`Error::Leased`]). The lock belongs to the store object that took
/// or last renewed the lease: dropping it ends the lease. See [`Lease`](crate::Lease).
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
///   the write lock, so [`prune`](crate::SessionStoreExt::prune) never deletes a session that was
///   saved, re-created, archived or restored (by any process) since it was listed.
/// - [`stored_bytes`](SessionStore::stored_bytes) is the size of `<id>.json` plus
///   `<id>.journal`.
/// - A fork ([`fork`](crate::SessionStoreExt::fork)) is an ordinary session holding its own copy of
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
    /// The metadata keys summaries carry.
    indexed: IndexedMetadata,
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
    /// The lengths of every kept revision of the sessions this store restored, so a
    /// restore writes its entry without reading the log; only taken under the write lock.
    revision_index: Mutex<HashMap<SessionId, restore::RevisionIndex>>,
    /// The lease files this store holds locked, one per session it leases: closing one
    /// (release, a new record, the store dropped, the process ended) ends the lease.
    held_leases: Mutex<HashMap<SessionId, std::fs::File>>,
    /// For each session, the lease (epoch and acquisition time) whose record this store
    /// made durable before saving under it; only taken under the write lock.
    durable_leases: Mutex<HashMap<SessionId, lease::DurableLease>>,
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
    indexed: IndexedMetadata,
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

    /// Sets the metadata keys whose values the sessions' summary files carry, so that
    /// [`list_filtered`](SessionStore::list_filtered) can match them without reading a
    /// transcript (default: none). A summary written for other keys is made again from
    /// the session when it is listed: declare the same keys in every process.
    pub fn index_metadata(&mut self, keys: IndexedMetadata) -> &mut Self {
        self.indexed = keys;
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
            indexed: IndexedMetadata::default(),
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
        let (handle, root, meta) = open_private_dir(&*fs, dir)?;
        let lock = StoreLock::open(&*fs, handle, root.clone(), LOCK_FILE, settings.lock_timeout)?;
        let store = FileSessionStore {
            root,
            root_identity: (meta.dev(), meta.ino()),
            owner_uid: rustix::process::geteuid().as_raw(),
            max_snapshot_bytes,
            durability: settings.durability,
            indexed: settings.indexed.clone(),
            fs,
            lock,
            known: Mutex::new(HashMap::new()),
            listed: Mutex::new(HashMap::new()),
            revision_index: Mutex::new(HashMap::new()),
            held_leases: Mutex::new(HashMap::new()),
            durable_leases: Mutex::new(HashMap::new()),
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

    /// The journal of session `id`: `<dir>/<id>.journal`.
    fn journal_path(&self, id: &SessionId) -> PathBuf {
        self.root.join(format!("{id}{JOURNAL_SUFFIX}"))
    }

    /// The list of forks that share session `id`'s first messages: `<dir>/<id>.forks`.
    fn forks_path(&self, id: &SessionId) -> PathBuf {
        self.root.join(format!("{id}{FORKS_SUFFIX}"))
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
        telemetry::store_op("save", "file", Some(snapshot.id())).run(|| {
            let id = snapshot.id();
            if snapshot.is_unchanged_since_stored() {
                if let Some(revision) = self.unchanged(snapshot)? {
                    return Ok(revision);
                }
            }
            let revision = snapshot.revision().next();
            // Encoding does not depend on what is stored, so it happens before taking the lock.
            let derived = match snapshot.entry_since_stored(revision) {
                Some(entry) => Some((entry.to_bytes(id)?, entry.kind())),
                None => None,
            };
            let _lock = self.write_lock()?;
            self.check_root()?;
            // Before the revision: a writer whose lease was taken over is told so, whatever
            // its revision.
            self.check_lease(snapshot)?;
            let stored = self.stored_state(id, true)?;
            if let Err(conflict) =
                check_revision(id, snapshot.revision(), stored.as_ref().map(|s| s.revision))
            {
                // A save retried after its acknowledgement was lost gets its revision back.
                return match stored {
                    Some(stored) if self.holds_save_of(snapshot, &stored)? => {
                        self.make_retry_durable(id, &stored)
                    }
                    _ => Err(conflict),
                };
            }
            let Some(stored) = stored else {
                self.remove_orphan_marker(id)?;
                return self.rewrite(snapshot, revision);
            };
            // Another session deleted and created again under the same id: its log is not
            // this snapshot's, so the snapshot replaces it whole, as a delete and a first
            // save would.
            // A snapshot whose redaction changed messages already stored replaces the history
            // too: the earlier revisions would keep the text the redactor now removes.
            if stored.created_at != snapshot.created_at() || snapshot.replaces_history() {
                // Forks that share this session's first messages get their own copy first.
                self.materialize_forks_of(id)?;
                return self.rewrite(snapshot, revision);
            }
            // Every other save appends one entry: what the snapshot says changed since the
            // stored state it derives from, or else everything (an edit the history keeps).
            let follows_stored = match (stored.verified, stored.counts, stored.updated_at) {
                (true, Some(counts), Some(updated_at)) => {
                    snapshot.derives_from(stored.revision, stored.created_at, updated_at, counts)
                }
                _ => false,
            };
            let (entry, kind) = match derived.filter(|_| follows_stored) {
                Some(entry) => entry,
                None => (
                    snapshot.entry_replacing_all(revision)?.to_bytes(id)?,
                    EntryKind::Edit,
                ),
            };
            // What the stored log holds (a trim since the snapshot was loaded may have dropped
            // some of what the snapshot counted), with the entry.
            let stats = match stored.stats {
                Some(stats) => stats.after(kind),
                None => snapshot.stats_once_saved(revision),
            };
            if stored.verified && stored.journal_version != Some(1) {
                return self.append(
                    &write::After::snapshot(snapshot, kind),
                    &stored,
                    &entry,
                    stats,
                );
            }
            // A journal of an earlier format, or one whose last record may not be durable (its
            // fdatasync failed), is written again whole with the entry added, and made durable
            // as a new file; a state that does not load (damaged past its header) is replaced
            // by the snapshot instead, which repairs it.
            match self.rewrite_journal(snapshot, &stored, &entry, stats) {
                Err(e) if e.is_corrupt() => self.rewrite(snapshot, revision),
                written => written,
            }
        })
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
        telemetry::store_op("load", "file", Some(id)).run(|| {
            self.check_root()?;
            self.read(id)?
                .ok_or_else(|| Error::NotFound { id: id.clone() })
        })
    }

    /// Reads the session's base and journal as [`load`](SessionStore::load) does, and
    /// works out `revision` from them, decoding only the entries whose messages its view
    /// holds.
    fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        telemetry::store_op("load_at", "file", Some(id)).run(|| {
            self.check_root()?;
            self.with_log(id, false, |log| log.state_at(Some(revision)))
        })
    }

    /// Reads the base and the heads of the journal's entries (not their messages).
    fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        telemetry::store_op("revisions", "file", Some(id)).run(|| {
            self.check_root()?;
            self.with_log(id, false, |log| log.revisions())
        })
    }

    /// Reads the base and the whole journal.
    fn history(&self, id: &SessionId) -> Result<History> {
        telemetry::store_op("history", "file", Some(id)).run(|| {
            self.check_root()?;
            self.with_log(id, false, |log| log.history().map(|(history, _)| history))
        })
    }

    /// Writes the log again without the revisions before `oldest`, in three atomic steps
    /// that each leave a log loading the same revisions from `oldest` on (the journal
    /// restarting at a checkpoint entry, the new base, the journal in its usual form;
    /// `docs/FORMAT.md`, "Retention"). Forks sharing a dropped revision get their own copy
    /// first.
    fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        telemetry::store_op("trim_history", "file", Some(id)).run(|| {
            let _lock = self.write_lock()?;
            self.check_root()?;
            self.trim_history_locked(id, oldest)
        })
    }

    /// Appends one restore entry naming `revision` and its lengths, without reading the
    /// session: the store keeps the lengths of every revision of a session it restored
    /// (the first restore of a session in a process reads the entries' heads once to
    /// learn them). The listing summary is left to go stale, so the next listing reads
    /// the session. A session this store does not know as verified, or whose journal is
    /// of an older format, is restored by loading and saving instead.
    fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        telemetry::store_op("restore", "file", Some(id)).run(|| {
            {
                let _lock = self.write_lock()?;
                self.check_root()?;
                // Refused while a lease is live, as the save of the way back below is.
                self.check_unleased_write(id)?;
                if let Some(new) = self.restore_by_appending(id, revision)? {
                    return Ok(new);
                }
            }
            crate::store::restore_by_saving(self, id, revision)
        })
    }

    /// Lists every `<id>.json` in the directory that is not archived, from each session's
    /// summary file when it
    /// matches the session's files (so the cost does not depend on transcript sizes), and
    /// by reading the session otherwise. Files whose names are not valid ids
    /// ([`Error::ForeignFile`]) and sessions that fail verification are reported in
    /// [`SessionList::unreadable`]; other names (journals, summaries, temporary files, the
    /// lock) are not sessions.
    fn list(&self) -> Result<SessionList> {
        telemetry::store_op("list", "file", None).run(|| {
            self.check_root()?;
            self.list_in(ListScope::Active)
        })
    }

    /// As [`list`](SessionStore::list), for the sessions in `scope`: a session is archived
    /// while an empty marker file `<id>.archived` sits beside it, so archived sessions
    /// outside the scope are skipped by name, without reading anything of them.
    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        telemetry::store_op("list_scoped", "file", None).run(|| {
            self.check_root()?;
            self.list_in(scope)
        })
    }

    fn indexed_metadata(&self) -> IndexedMetadata {
        self.indexed.clone()
    }

    /// A scan (see [`SessionStore::search`]): the filtered listing from the summary
    /// files, then each listed session's history, read in full.
    fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        telemetry::store_op("search", "file", None)
            .run(|| super::search::scan(self, query, filter, limit, after))
    }

    /// Deletes the session's files (a symbolic link in their place is removed, not
    /// followed) and fsyncs the directory. The snapshot goes first: a journal left by a
    /// crash halfway is ignored, because it names a base that no longer exists.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such session; [`Error::Io`] otherwise.
    fn delete(&self, id: &SessionId) -> Result<()> {
        telemetry::store_op("delete", "file", Some(id)).run(|| {
            let _lock = self.write_lock()?;
            self.check_root()?;
            self.delete_locked(id)
        })
    }

    /// Writes `<id>.lease` and holds an exclusive `flock` on it while the lease lasts, so
    /// the lease also ends with this process (see [`Lease`](crate::Lease)).
    fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        telemetry::store_op("acquire_lease", "file", Some(id)).run(|| {
            let _lock = self.write_lock()?;
            self.check_root()?;
            self.acquire_lease_locked(id, request)
        })
    }

    fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        telemetry::store_op("renew_lease", "file", Some(&lease.session)).run(|| {
            let _lock = self.write_lock()?;
            self.check_root()?;
            self.renew_lease_locked(lease, ttl)
        })
    }

    fn release_lease(&self, lease: &Lease) -> Result<()> {
        telemetry::store_op("release_lease", "file", Some(&lease.session)).run(|| {
            let _lock = self.write_lock()?;
            self.check_root()?;
            self.release_lease_locked(lease)
        })
    }

    /// Reads every `<id>.lease` of a stored session, and whether its holder's process
    /// still holds it.
    fn leases(&self) -> Result<Vec<Lease>> {
        telemetry::store_op("leases", "file", None).run(|| {
            self.check_root()?;
            self.live_leases()
        })
    }

    /// Archives or restores the session by creating or removing its empty marker file
    /// `<id>.archived` (0600, created with `O_EXCL | O_NOFOLLOW`), then fsyncs the
    /// directory. The snapshot and journal are not touched.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such session; [`Error::Io`] otherwise.
    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        telemetry::store_op("set_archived", "file", Some(id)).run(|| {
            let _lock = self.write_lock()?;
            self.check_root()?;
            self.set_archived_locked(id, archived)
        })
    }

    /// The sizes of the session's snapshot file, journal and view checkpoint, from `lstat`.
    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        telemetry::store_op("stored_bytes", "file", Some(id)).run(|| {
            self.check_root()?;
            let mut bytes = 0;
            for (path, required) in [
                (self.path_of(id), true),
                (self.journal_path(id), false),
                (self.view_path(id), false),
            ] {
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
        })
    }

    /// Deletes the session if it is still as listed (revision, creation time, archive
    /// marker), deciding and deleting under the store's write lock, so no save or archive
    /// change (from this process or another) can land in between.
    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        telemetry::store_op("delete_if_unchanged", "file", Some(&listed.id)).run(|| {
            let _lock = self.write_lock()?;
            self.check_root()?;
            let id = &listed.id;
            let stored = match self.stored_state(id, false)? {
                Some(known) => Some(StoredVersion {
                    revision: known.revision,
                    created_at: known.created_at,
                    archived: self.is_archived(id)?,
                }),
                None => None,
            };
            check_unchanged(listed, stored)?;
            self.delete_locked(id)
        })
    }
}
