//! `SqliteSessionStore`: sessions in one SQLite database file, for big stores on one
//! machine (feature `sqlite`).
//!
//! One job per module: `files` (the directory and the database file, private before
//! SQLite opens them), `db` (connections, read and write transactions, SQLite's errors
//! as the crate's), `schema` (tables, version, migration), `rows` (the row's columns:
//! summary JSON, times, lengths, cursors), `log` (a session's log read and folded, forks
//! sharing their parent's messages), `view` (a compacted session's state, so its load
//! skips what the compaction replaced), `save`, `listing`, `lifecycle` (delete, archive,
//! measure, trim) and `lease`.

use std::fmt;
use std::path::Path;
use std::time::Duration;

mod db;
mod files;
mod lease;
mod lifecycle;
mod listing;
mod log;
mod rows;
mod save;
mod schema;
mod search;
mod view;

use self::db::Db;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::lease::{Lease, LeaseRequest};
use crate::snapshot::SHARED_DEPTH_BUDGET;
use crate::snapshot::{History, RevisionInfo, SessionSnapshot};
use crate::store::{
    Durability, IndexedMetadata, ListCursor, ListFilter, ListScope, SearchPage, SearchQuery,
    SessionList, SessionPage, SessionStore, SessionSummary, DEFAULT_MAX_SNAPSHOT_BYTES,
};
use crate::telemetry;

/// How long an operation waits by default for another connection's write transaction
/// to end ([`SqliteStoreBuilder::busy_timeout`]).
const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A [`SessionStore`] in one SQLite database file: a row per session in `sessions`
/// (its listing summary, revision and times) with its checkpoint snapshot in
/// `checkpoints`, the changes saved since the checkpoint one row each in `entries`, and
/// leases in `leases`. SQLite is
/// compiled into the crate (no system library is needed). The layout is documented in
/// `docs/FORMAT.md` ("SQLite store layout").
///
/// Choose it over [`FileSessionStore`](crate::FileSessionStore) for big stores on one
/// machine: a page of a listing reads one range of an index whatever the store's size
/// (under a millisecond for 50 sessions of 100,000 in `benches/sqlite.rs`, where the file
/// store, which reads every session's summary file for a page, takes seconds), and each
/// session is a few rows instead of three or four files. For
/// sessions shared by several machines, use `PostgresSessionStore` (feature `postgres`).
///
/// # Behaviour
///
/// The same log model as the PostgreSQL store:
///
/// - [`save`](SessionStore::save) runs in one write transaction (`BEGIN IMMEDIATE`): it
///   reads the session's row and lease, checks the lease and the revision
///   (compare-and-swap), and either *appends* the change as one entry (a snapshot loaded
///   from the store or saved by its `Session`, then extended: a turn costs the turn, not
///   the session) or writes the whole snapshot as the row's checkpoint (a new session,
///   another session under the same id, a history the snapshot replaces). Anything else
///   saved over a stored session is appended as an edit that replaces the whole view, so
///   the history keeps what it replaced. What is written is encoded before the
///   transaction, and stored as a blob, byte for byte.
/// - The entries of a session may total at most the size limit
///   ([`SqliteStoreBuilder::max_snapshot_bytes`]); a save past it fails with
///   [`Error::TooLarge`] (trim the history, [`trim_history`](SessionStore::trim_history),
///   to make room). The log is never folded behind the caller's back: every revision
///   stays loadable until a retention policy drops it.
/// - A snapshot unchanged since it was stored is not written again, and a save retried
///   after its acknowledgement was lost (the row is one revision ahead and holds exactly
///   what the save writes) gets that revision back instead of a conflict.
/// - [`load`](SessionStore::load) reads the row and its entries in one read transaction
///   (a consistent state, never waiting for writers), and decodes and validates them as
///   strictly as the other stores (size limits, schema version, embedded id, the entries'
///   frames, checksums and revisions); damage is a corrupt-kind error naming the row.
///   A compacted session loads from the state its compaction made (its row in `views`,
///   written in the compaction's transaction) and the entries from the compaction on,
///   without reading the history the compaction replaced (the size limit applies to what
///   it reads); [`history`](SessionStore::history),
///   [`load_at`](SessionStore::load_at) and [`revisions`](SessionStore::revisions) read
///   everything, and so are what report damage to that history.
/// - Listings read the summary column only. [`list_page`](SessionStore::list_page) reads
///   one page from the index on `(archived, updated_ns DESC, id DESC)` (keyset
///   pagination); [`list_page_filtered`](SessionStore::list_page_filtered) walks the same
///   index from the cursor until its page is full, matching each summary, which carries
///   the values of the metadata keys declared with
///   [`SqliteStoreBuilder::index_metadata`].
/// - [`search`](SessionStore::search) asks an FTS5 index which sessions hold every word
///   of the query, and reads only their histories (the crate's matching decides, so the
///   results are every store's). The index is written in the transaction of every save
///   and trim, so it never lags the log.
/// - Archive state is a column. [`delete_if_unchanged`](SessionStore::delete_if_unchanged)
///   compares and deletes in one write transaction.
/// - [`trim_history`](SessionStore::trim_history) rewrites the log in one transaction.
/// - Forks ([`fork`](crate::SessionStoreExt::fork)) made from a stored revision of a
///   session in the same database share its first messages instead of copying them: the
///   fork's checkpoint leaves them out and names the parent's revision (`shared_prefix`),
///   and loading the fork reads them from the parent's log. Before the parent's history
///   goes (a delete, a replacement, a trim of the shared revision), every fork sharing it
///   is given its own copy in the same transaction, so no fork ever breaks.
///
/// # Durability
///
/// The database is in WAL mode. [`SqliteStoreBuilder::durability`] sets SQLite's
/// `synchronous`:
///
/// - [`Durability::Sync`] (the default): `synchronous = FULL`. Every commit fsyncs the
///   write-ahead log before it returns, so once `save` returns the session survives a
///   crash of the process, the OS or the machine.
/// - [`Durability::Buffered`]: `synchronous = NORMAL`. Commits are written to the OS but
///   fsynced only when SQLite checkpoints the log into the database: a save survives a
///   crash of the process, but after a power cut or OS crash the last ones may be lost.
///   The database itself stays consistent (unlike `synchronous = OFF`, which skips the
///   checkpoint's fsyncs too and can corrupt the database on a power cut, so no
///   durability maps to it), and unlike the file store's buffered journal it is never
///   refused as corrupt afterwards.
///
/// # Concurrency
///
/// Any number of threads and processes may use the database at once. Reads never wait:
/// each reads one consistent state. Writes (saves, deletes, archiving, trims, lease
/// changes) take SQLite's write lock one at a time; one that finds it held by another
/// connection waits at most [`SqliteStoreBuilder::busy_timeout`] (30 seconds by default),
/// then fails with [`Error::Busy`] having written nothing. A crashed process never holds
/// the lock. The store keeps a few connections open for its threads.
///
/// # Leases
///
/// Leases ([`acquire_lease`](SessionStore::acquire_lease)) live in the `leases` table and
/// end when released or when their time to live has passed by this machine's clock
/// (every process using the database runs on the machine that holds it, so they share
/// that clock). A save reads its session's lease in its own write transaction, so a
/// holder taken over is refused ([`Error::Fenced`]) even at a matching revision. Unlike
/// the file store's, a lease does not end with its holder's process: after a `kill -9`
/// of the holder the next resume is refused until the lease expires (30 s by default),
/// and gets it right after, as with the PostgreSQL store.
///
/// # Security
///
/// - The database's directory is created with mode 0700 (and missing parents too); an
///   existing directory that others can write to, or that belongs to another user, is
///   refused; one that others can only read is made 0700 if it is empty, and refused
///   otherwise, as [`FileSessionStore`](crate::FileSessionStore) does.
/// - The database file is created by the store itself with `O_CREAT | O_EXCL |
///   O_NOFOLLOW` and mode 0600, before SQLite opens it; SQLite gives its `-wal` and
///   `-shm` files the database file's mode, so they are 0600 from creation too, whatever
///   the umask. An existing database or companion file that is a link, not a regular
///   file, hard-linked, another user's, or open to group or others is refused.
/// - SQLite never follows a link to the database (`SQLITE_OPEN_NOFOLLOW`), runs in its
///   defensive mode (no writes to its own schema tables) and trusts no function named by
///   the schema.
///
/// # Examples
///
/// ```
/// use agent_session::{SessionId, SessionSnapshot, SessionStore, SqliteSessionStore};
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteSessionStore::open(dir.path().join("sessions.db"))?;
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s1")?, "model").build()?;
/// let revision = store.save(&snapshot)?;
/// let loaded = store.load(snapshot.id())?;
/// assert_eq!(loaded.revision(), revision);
/// assert_eq!(store.list()?.sessions.len(), 1);
///
/// // A second save from the same stale revision is a conflict, as in every store.
/// let other = SessionSnapshot::builder(SessionId::parse("s1")?, "other").build()?;
/// assert!(store.save(&other).unwrap_err().is_conflict());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SqliteSessionStore {
    db: Db,
    max_snapshot_bytes: u64,
    indexed: IndexedMetadata,
}

impl fmt::Debug for SqliteSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteSessionStore")
            .field("path", &self.db.path)
            .field("max_snapshot_bytes", &self.max_snapshot_bytes)
            .field("busy_timeout", &self.db.busy_timeout)
            .field("indexed", &self.indexed)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`SqliteSessionStore`]: made by [`SqliteSessionStore::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_session::{Durability, SqliteSessionStore};
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteSessionStore::builder()
///     .durability(Durability::Buffered)
///     .busy_timeout(Duration::from_secs(5))
///     .max_snapshot_bytes(64 * 1024 * 1024)
///     .open(dir.path().join("sessions.db"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct SqliteStoreBuilder {
    max_snapshot_bytes: u64,
    durability: Durability,
    busy_timeout: Duration,
    indexed: IndexedMetadata,
}

impl SqliteStoreBuilder {
    /// The largest snapshot the store saves or loads, and the largest total of a
    /// session's entries, in bytes (default [`DEFAULT_MAX_SNAPSHOT_BYTES`]). Larger ones
    /// are refused with [`Error::TooLarge`].
    pub fn max_snapshot_bytes(&mut self, limit: u64) -> &mut Self {
        self.max_snapshot_bytes = limit;
        self
    }

    /// How saves are made durable (default [`Durability::Sync`], SQLite's
    /// `synchronous = FULL`; [`Durability::Buffered`] is `NORMAL`). See the store's
    /// "Durability" docs.
    pub fn durability(&mut self, durability: Durability) -> &mut Self {
        self.durability = durability;
        self
    }

    /// How long an operation waits for another connection's write transaction (in this
    /// process or another) before it fails with [`Error::Busy`] (default 30 seconds).
    /// Reads never wait.
    pub fn busy_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets the metadata keys whose values the rows' summaries carry, so that
    /// [`list_filtered`](SessionStore::list_filtered) matches them without reading
    /// sessions (default: none). A row whose summary was written for other keys is worked
    /// out from its log when it is listed, and its summary written again: declare the
    /// same keys in every process.
    pub fn index_metadata(&mut self, keys: IndexedMetadata) -> &mut Self {
        self.indexed = keys;
        self
    }

    /// Opens (creating if needed) the store in the database file `path`, creating its
    /// tables or checking their version.
    ///
    /// # Errors
    ///
    /// As [`SqliteSessionStore::open`].
    pub fn open(&self, path: impl AsRef<Path>) -> Result<SqliteSessionStore> {
        if self.max_snapshot_bytes == 0 {
            return Err(Error::InvalidArgument {
                reason: "max_snapshot_bytes must be at least 1".to_owned(),
            });
        }
        let durable = self.durability == Durability::Sync;
        let (path, identity) = files::prepare(path.as_ref(), durable)?;
        let db = Db::new(path, identity, self.durability, self.busy_timeout)?;
        schema::migrate(&db)?;
        Ok(SqliteSessionStore {
            db,
            max_snapshot_bytes: self.max_snapshot_bytes,
            indexed: self.indexed.clone(),
        })
    }
}

impl SqliteSessionStore {
    /// Opens (creating if needed) the store in the database file `path`, with default
    /// settings: the directory is created 0700 if missing, the file 0600, the tables if
    /// the database has none.
    ///
    /// # Errors
    ///
    /// - [`Error::Insecure`] if the directory or the file is not private to the user
    ///   running the store (see the type's "Security" docs);
    /// - [`Error::UnsupportedSchemaVersion`] if a newer release made the tables;
    /// - a corrupt-kind error if the file is not a database, or not this store's;
    /// - [`Error::Busy`] if another connection keeps the database locked past the busy
    ///   timeout while the tables are checked;
    /// - [`Error::Io`] or [`Error::Backend`] if the file cannot be created or opened.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::builder().open(path)
    }

    /// The settings of a new store; finish with [`SqliteStoreBuilder::open`].
    pub fn builder() -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            max_snapshot_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
            durability: Durability::default(),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            indexed: IndexedMetadata::default(),
        }
    }

    /// The database file, as resolved when the store was opened. Its `-wal` and `-shm`
    /// files sit beside it: to copy the store by hand, close every store on it first (or
    /// use SQLite's backup), then copy the three files together.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.db.path
    }
}

impl SessionStore for SqliteSessionStore {
    /// Saves in one write transaction if the stored revision is still
    /// `snapshot.revision()`: appends the change as one entry, or writes the snapshot
    /// whole (see the type docs).
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if the revision moved; [`Error::Fenced`] or [`Error::Leased`]
    /// by the session's lease; [`Error::TooLarge`] past the size limit; [`Error::Busy`]
    /// if another connection kept the database locked past the busy timeout. Nothing is
    /// written on error.
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        telemetry::store_op("save", "sqlite", Some(snapshot.id()))
            .run(|| self.save_snapshot(snapshot))
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        telemetry::store_op("load", "sqlite", Some(id)).run(|| {
            self.db.read(|tx| {
                // A compacted session from its view row, when that describes its log.
                if let Some(snapshot) = self.load_from_view(tx, id)? {
                    return Ok(snapshot);
                }
                let mut snapshot =
                    self.with_log(tx, id, SHARED_DEPTH_BUDGET, |log| log.state_at(None))?;
                let revision = snapshot.revision();
                snapshot.mark_stored(revision);
                Ok(snapshot)
            })
        })
    }

    fn list(&self) -> Result<SessionList> {
        telemetry::store_op("list", "sqlite", None).run(|| self.list_in(ListScope::Active))
    }

    /// Reads one page from the listing index (keyset pagination: the cost of a page does
    /// not grow with the store). Rows whose summary cannot be read are reported on the
    /// page they fall in.
    fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        telemetry::store_op("list_page", "sqlite", None).run(|| self.page(limit, after))
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        telemetry::store_op("delete", "sqlite", Some(id)).run(|| self.delete_session(id))
    }

    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        telemetry::store_op("list_scoped", "sqlite", None).run(|| self.list_in(scope))
    }

    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        telemetry::store_op("set_archived", "sqlite", Some(id)).run(|| self.archive(id, archived))
    }

    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        telemetry::store_op("delete_if_unchanged", "sqlite", Some(&listed.id))
            .run(|| self.delete_unchanged(listed))
    }

    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        telemetry::store_op("stored_bytes", "sqlite", Some(id)).run(|| self.bytes_of(id))
    }

    fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        telemetry::store_op("load_at", "sqlite", Some(id)).run(|| {
            self.db.read(|tx| {
                self.with_log(tx, id, SHARED_DEPTH_BUDGET, |log| {
                    log.state_at(Some(revision))
                })
            })
        })
    }

    fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        telemetry::store_op("revisions", "sqlite", Some(id)).run(|| {
            self.db
                .read(|tx| self.with_log(tx, id, SHARED_DEPTH_BUDGET, |log| log.revisions()))
        })
    }

    fn history(&self, id: &SessionId) -> Result<History> {
        telemetry::store_op("history", "sqlite", Some(id)).run(|| {
            self.db.read(|tx| {
                self.with_log(tx, id, SHARED_DEPTH_BUDGET, |log| {
                    log.history().map(|(history, _)| history)
                })
            })
        })
    }

    /// Loads the head and `revision`, and saves the head restored (one more entry),
    /// refused while a lease is live as any save without one is.
    fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        telemetry::store_op("restore", "sqlite", Some(id))
            .run(|| crate::store::restore_by_saving(self, id, revision))
    }

    fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        telemetry::store_op("trim_history", "sqlite", Some(id)).run(|| self.trim(id, oldest))
    }

    fn indexed_metadata(&self) -> IndexedMetadata {
        self.indexed.clone()
    }

    /// Walks the listing index from the cursor, matching each summary (which carries the
    /// indexed metadata keys' values), until the page is full: a page costs the rows it
    /// passes, not the store's size.
    fn list_page_filtered(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        telemetry::store_op("list_page_filtered", "sqlite", None)
            .run(|| self.page_filtered(filter, limit, after))
    }

    /// An FTS5 index, kept in step with every save and trim in the same transaction,
    /// names the sessions that may match; only their histories are read, and the crate's
    /// matching decides (so the results are every store's). A search of metadata values
    /// (not indexed) reads every session it lists.
    fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        telemetry::store_op("search", "sqlite", None)
            .run(|| self.search_indexed(query, filter, limit, after))
    }

    /// Leases expire by this machine's clock; see the type docs ("Leases").
    fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        telemetry::store_op("acquire_lease", "sqlite", Some(id)).run(|| self.acquire(id, request))
    }

    fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        telemetry::store_op("renew_lease", "sqlite", Some(&lease.session))
            .run(|| self.renew(lease, ttl))
    }

    fn release_lease(&self, lease: &Lease) -> Result<()> {
        telemetry::store_op("release_lease", "sqlite", Some(&lease.session))
            .run(|| self.release(lease))
    }

    fn leases(&self) -> Result<Vec<Lease>> {
        telemetry::store_op("leases", "sqlite", None).run(|| self.live_leases())
    }
}
