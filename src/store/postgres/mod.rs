//! `PostgresSessionStore`: sessions in a PostgreSQL table, for services that run on many
//! machines (feature `postgres`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;

mod lease;
mod search;
mod tls;
mod view;

use self::lease::{LEASE_COLUMNS, NOW_NS};
use self::tls::TlsSettings;
use crate::clock;
use crate::error::{BoxError, Error, Location, Result};
use crate::id::SessionId;
use crate::lease::{Lease, LeaseRequest};
use crate::snapshot::{
    counts_after, decode_head, decode_record, entry_of_record, intact_frame, split_entry,
    EntryKind, History, HistoryStats, LogSource, RevisionInfo, SessionSnapshot,
};
use crate::store::columns::{self, nanos, nanos_saturating, revision_column, state_counts, to_i64};
use crate::store::lease_rules::{self, LeaseRecord};
use crate::store::AsyncSessionStore;
use crate::store::{
    check_page_limit, check_revision, check_stored_id, check_unchanged, IndexedMetadata,
    ListCursor, ListFilter, ListScope, Revision, SearchPage, SearchQuery, SessionList, SessionPage,
    SessionStore, SessionSummary, StoredVersion, DEFAULT_MAX_SNAPSHOT_BYTES,
};
use crate::telemetry;

/// The schema the store uses when none is set.
pub const DEFAULT_POSTGRES_SCHEMA: &str = "agent_session";

/// The version of the tables [`PostgresSessionStore::migrate`] creates.
const TABLES_VERSION: i32 = 7;

/// The `format` of an entry row holding a log entry (its head and body frames); rows of
/// tables before version 3 hold journal records of format 1.
const ENTRY_FORMAT: i16 = 2;

/// How long opening a connection may take by default
/// ([`PostgresStoreBuilder::connect_timeout`]).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long one call may take by default ([`PostgresStoreBuilder::query_timeout`]).
const QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a call waits for a free connection when all are busy.
const POOL_WAIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A key for `pg_advisory_xact_lock`, so that processes migrating at once take turns.
const MIGRATION_LOCK: i64 = 0x6167_656e_745f_7365; // "agent_se"

/// A [`SessionStore`] in PostgreSQL: one row per session in `<schema>.sessions`, holding
/// a snapshot's exact bytes, the listing's fields, and the revision that makes every save
/// a compare-and-swap decided by the server, plus the changes saved since that snapshot,
/// one row each in `<schema>.entries`.
///
/// Choose it over [`FileSessionStore`](crate::FileSessionStore) when sessions must be
/// resumed by any of several machines: every worker sees the same sessions, and two
/// workers saving the same session never overwrite each other (the second gets
/// [`Error::Conflict`]). A local file store is faster for a single machine.
///
/// # Behaviour
///
/// - [`save`](SessionStore::save) of a snapshot loaded from the store and extended since
///   (a turn, a step, a rewind) *appends*: one statement moves the row's revision where it
///   is still the loaded one and inserts the change as one entry, so a turn costs the
///   turn, not the session. Entries are kept (the history), until their total would pass
///   the size limit ([`Error::TooLarge`]; [`trim_history`](SessionStore::trim_history)
///   and retention drop older ones). Any other save writes the whole
///   snapshot (`INSERT … ON CONFLICT DO NOTHING` for a new session, `UPDATE … WHERE
///   revision = expected` otherwise, and the entries are dropped in the same
///   transaction). Either way the server decides the compare-and-swap; what is written
///   is encoded before any query and stored as `bytea`, byte for byte.
/// - [`load`](SessionStore::load) reads the row and its entries in one statement, and
///   decodes and validates what it reads as strictly as the file store does (size limits,
///   schema version, embedded id, the entries' revisions); damage is a corrupt-kind error
///   naming the rows. A compacted session loads from the state its compaction made (kept
///   in its row by the compaction's append) and the entries from the compaction on,
///   without reading the history the compaction replaced (the size limit applies to what
///   it reads);
///   [`history`](SessionStore::history), [`load_at`](SessionStore::load_at) and
///   [`revisions`](SessionStore::revisions) read everything, and so are what report damage
///   to that history.
/// - Listings read the summary columns only, never snapshots.
///   [`list_page`](SessionStore::list_page) reads one page from an index on
///   `(archived, updated, id)` (keyset pagination), whatever the store's size; a whole
///   listing lets the server choose (it reads the table and sorts it when that is
///   cheaper).
/// - Archive state is a column; [`delete_if_unchanged`](SessionStore::delete_if_unchanged)
///   is one `DELETE … WHERE` on revision, creation time and archive state.
/// - Leases ([`acquire_lease`](SessionStore::acquire_lease)) live in `<schema>.leases`
///   and expire by the server's clock. A save checks its lease in the same statement as
///   its revision, so a holder taken over is refused ([`Error::Fenced`]) even at a
///   matching revision, and a save retried after its reply was lost (a timeout, a dropped
///   connection) gets the revision it was stored at back instead of a conflict.
///
/// # Connections and threads
///
/// The store keeps a pool of connections ([`deadpool_postgres`]) (a connection must open
/// within 10 seconds unless the connection string sets `connect_timeout`, and a call waits
/// at most 30 seconds for a free one). Every operation is written once, as async code
/// awaiting the pool; the store implements both [`SessionStore`] and
/// [`AsyncSessionStore`] (and [`into_async`](SessionStore::into_async) returns the store
/// itself). Where the futures run depends on how the store was made:
///
/// - [`PostgresStoreBuilder::connect`]: on a small private tokio runtime (two threads).
///   The synchronous methods work from plain threads and from inside any tokio runtime (a
///   call blocks its thread until the query returns, as file I/O does); the async ones are
///   spawned onto the private runtime and awaited without blocking the caller's executor.
/// - [`PostgresStoreBuilder::connect_async`]: on the caller's tokio runtime, with no
///   runtime or threads of its own. The async methods run on the caller's task (on a
///   current-thread runtime too); the synchronous ones are spawned onto the runtime and
///   waited for, so they must not be called from the thread that drives a current-thread
///   runtime (they fail with [`Error::Unsupported`] there rather than hang).
///
/// With both traits in scope, a method call names its trait:
/// `SessionStore::load(&store, id)` or `AsyncSessionStore::load(&store, id).await`.
///
/// # TLS
///
/// The connection string's `sslmode` decides whether connections use TLS (rustls):
///
/// - `require`: always TLS; a server that does not offer it is refused. Use it for any
///   server reached over a network you do not control.
/// - `prefer` (the default, as in libpq): TLS whenever the server offers it, verified just
///   as with `require`; clear text only with a server that offers no TLS at all (such as a
///   Unix socket). A server that offers TLS with a certificate that is not trusted is
///   refused, never used in clear text instead. `prefer` does not stop an attacker on the
///   path who makes the server look as if it had no TLS: that takes `require`.
/// - `disable`: clear text, for a trusted network, a Unix socket or a TLS tunnel.
///
/// Whenever TLS is used the server's certificate is verified in full, as libpq's
/// `sslmode=verify-full` does (tokio-postgres names neither `verify-ca` nor `verify-full`:
/// write `require`): it must chain to a trusted root and name the host that `host=` gives
/// (a DNS name, or an IP address). The trusted roots are the Mozilla roots compiled into
/// the `webpki-roots` crate, unless the builder is given others
/// ([`PostgresStoreBuilder::tls_root_certificates_file`],
/// [`PostgresStoreBuilder::tls_root_certificates_pem`]), as a server with a private or
/// self-signed CA needs. There is no setting that accepts an untrusted certificate. A
/// refused certificate is an [`Error::Backend`] whose message says so and what to do.
///
/// # Examples
///
/// ```no_run
/// use agent_session::{PostgresSessionStore, SessionId, SessionSnapshot, SessionStore};
///
/// let store = PostgresSessionStore::builder()
///     .schema("my_app_sessions")
///     .connect("host=127.0.0.1 user=app dbname=app")?;
/// store.migrate()?; // once per deployment; safe to run from every process
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s1")?, "model").build()?;
/// let revision = store.save(&snapshot)?;
/// assert_eq!(store.load(snapshot.id())?.revision(), revision);
/// # Ok::<(), agent_session::Error>(())
/// ```
///
/// From async code, on the caller's runtime:
///
/// ```no_run
/// use agent_session::{AsyncSessionStore, PostgresSessionStore, SessionId, SessionSnapshot};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_session::Result<()> {
/// let store = PostgresSessionStore::builder()
///     .schema("my_app_sessions")
///     .connect_async("host=127.0.0.1 user=app dbname=app")?;
/// store.migrate_async().await?;
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s1")?, "model").build()?;
/// let revision = store.save(&snapshot).await?;
/// assert_eq!(store.load(snapshot.id()).await?.revision(), revision);
/// # Ok(())
/// # }
/// ```
pub struct PostgresSessionStore {
    /// The pool, settings and every operation (async, `&self`): shared with the futures
    /// the store spawns, which must own what they use.
    inner: Arc<Inner>,
    /// Where the operations' futures run.
    exec: Executor,
}

/// What every operation of the store works with; its methods are the one implementation
/// of each operation, async, run by [`PostgresSessionStore`] where its [`Executor`] says.
struct Inner {
    pool: Pool,
    schema: String,
    /// The schema as an SQL identifier, quoted: names that are keywords (`user`, `order`)
    /// work too, and the name's characters were checked, so nothing can escape the quotes.
    sql_schema: String,
    max_snapshot_bytes: u64,
    query_timeout: std::time::Duration,
    /// The metadata keys summaries carry.
    indexed: IndexedMetadata,
}

/// Where a store's futures run.
enum Executor {
    /// The store's own runtime ([`PostgresStoreBuilder::connect`]); taken out on drop to
    /// shut it down without blocking.
    Private(Option<tokio::runtime::Runtime>),
    /// The runtime that made the store ([`PostgresStoreBuilder::connect_async`]): async
    /// calls run on the caller's task, synchronous ones are spawned onto it.
    Caller(tokio::runtime::Handle),
}

impl fmt::Debug for PostgresSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSessionStore")
            .field("schema", &self.inner.schema)
            .field("max_snapshot_bytes", &self.inner.max_snapshot_bytes)
            .field("pool", &self.inner.pool.status())
            .field(
                "runtime",
                &match self.exec {
                    Executor::Private(_) => "private",
                    Executor::Caller(_) => "caller's",
                },
            )
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresSessionStore {
    fn drop(&mut self) {
        // Dropping a runtime blocks until its tasks end, which panics inside another
        // runtime; nothing of ours is left running once a call has returned.
        if let Executor::Private(runtime) = &mut self.exec {
            if let Some(runtime) = runtime.take() {
                runtime.shutdown_background();
            }
        }
    }
}

/// Settings for a [`PostgresSessionStore`]: made by [`PostgresSessionStore::builder`].
///
/// # Examples
///
/// ```no_run
/// use agent_session::PostgresSessionStore;
///
/// let store = PostgresSessionStore::builder()
///     .schema("tenant_42")
///     .pool_size(4)
///     .max_snapshot_bytes(64 * 1024 * 1024)
///     .connect("postgresql://app@db.internal/app")?;
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct PostgresStoreBuilder {
    schema: String,
    max_snapshot_bytes: u64,
    pool_size: usize,
    connect_timeout: std::time::Duration,
    query_timeout: std::time::Duration,
    /// The TLS trust roots (`tls.rs`, with their builder methods).
    tls: TlsSettings,
    indexed: IndexedMetadata,
}

impl PostgresStoreBuilder {
    /// The schema holding the store's tables (default [`DEFAULT_POSTGRES_SCHEMA`]): one
    /// per application or tenant. Lowercase ASCII letters, digits and `_`, starting with a
    /// letter or `_`, at most 63 bytes.
    pub fn schema(&mut self, schema: impl Into<String>) -> &mut Self {
        self.schema = schema.into();
        self
    }

    /// The largest snapshot the store saves or loads, in bytes (default
    /// [`DEFAULT_MAX_SNAPSHOT_BYTES`]).
    pub fn max_snapshot_bytes(&mut self, limit: u64) -> &mut Self {
        self.max_snapshot_bytes = limit;
        self
    }

    /// Sets the metadata keys whose values the rows' summaries carry, so that
    /// [`list_filtered`](SessionStore::list_filtered) matches them without reading
    /// snapshots (default: none). A row whose summary was written for other keys is read
    /// whole when it is listed: declare the same keys in every process.
    pub fn index_metadata(&mut self, keys: IndexedMetadata) -> &mut Self {
        self.indexed = keys;
        self
    }

    /// How many connections the pool keeps at most (default 8).
    pub fn pool_size(&mut self, size: usize) -> &mut Self {
        self.pool_size = size;
        self
    }

    /// How long one call may take in all, waiting for a connection included, before it
    /// fails with [`Error::Backend`] (default 60 seconds). Unless the connection string
    /// sets `options` of its own, the server is also asked to cancel any statement (or
    /// lock wait) that runs that long, so a stuck call does not keep holding a connection.
    pub fn query_timeout(&mut self, timeout: std::time::Duration) -> &mut Self {
        self.query_timeout = timeout;
        self
    }

    /// How long opening a connection (and its start-up exchange) may take before the call
    /// fails with [`Error::Backend`] (default 10 seconds; a `connect_timeout` in the
    /// connection string takes precedence for the socket connection).
    pub fn connect_timeout(&mut self, timeout: std::time::Duration) -> &mut Self {
        self.connect_timeout = timeout;
        self
    }

    /// Makes the store for the server `config` names, as a libpq key-value string
    /// (`host=… port=… user=… dbname=…`) or a `postgresql://` URL. Connections are opened
    /// when first needed, so this succeeds without a reachable server; the first call
    /// reports one that is not. Call [`PostgresSessionStore::migrate`] before using a
    /// schema for the first time.
    ///
    /// The store runs its connections on a small runtime of its own (two threads), so it
    /// works from plain threads and from inside any runtime; its async calls
    /// ([`AsyncSessionStore`]) are spawned onto that runtime and awaited without blocking
    /// the caller's executor. A tokio service that wants no extra threads uses
    /// [`connect_async`](Self::connect_async) instead.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed `config`, an invalid schema name, a
    /// pool size of 0, or TLS root certificates that cannot be read or used (unless
    /// `sslmode=disable`); [`Error::Backend`] if the store's runtime cannot start.
    pub fn connect(&self, config: &str) -> Result<PostgresSessionStore> {
        self.check()?;
        let manager = self.manager(config)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("agent-session-postgres")
            .enable_all()
            .build()
            .map_err(|e| Error::Backend {
                operation: "start the PostgreSQL store's runtime".to_owned(),
                source: Box::new(e),
            })?;
        let pool = {
            // The pool binds its timers to the runtime it is built in.
            let _entered = runtime.enter();
            self.pool(manager)?
        };
        Ok(self.store(pool, Executor::Private(Some(runtime))))
    }

    /// Makes the store for the server `config` names (as [`connect`](Self::connect)) on
    /// the tokio runtime this is called in, with no runtime or threads of its own: its
    /// async calls ([`AsyncSessionStore`], [`PostgresSessionStore::migrate_async`]) run
    /// on the caller's tasks, and its connections are driven by tasks spawned on the
    /// runtime, on the current-thread runtime too. Not itself async: call it from async
    /// code, or from a thread that entered the runtime
    /// ([`Handle::enter`](tokio::runtime::Handle::enter)).
    ///
    /// The runtime needs its I/O and time drivers (`enable_all`), and must outlive the
    /// store's use: use the store on the runtime that made it. A host name (rather than an
    /// IP address or a Unix socket) is resolved on that runtime's blocking pool, as tokio
    /// resolves every name.
    ///
    /// The synchronous calls ([`SessionStore`]) still work: each is spawned onto the
    /// runtime and waited for, from a plain thread while the runtime runs, or from a
    /// multi-thread runtime (blocking one of its workers meanwhile). Do not make them
    /// from the thread that drives a current-thread runtime (in its `block_on` or its
    /// tasks): that thread would wait for a task only it can run. The store cannot tell
    /// that thread from the runtime's `spawn_blocking` threads, so when the store's
    /// runtime is a current-thread one, a synchronous call made anywhere inside a
    /// current-thread runtime fails with [`Error::Unsupported`] instead of hanging.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use agent_session::{AsyncSessionStore, PostgresSessionStore, SessionId,
    ///     SessionSnapshot};
    ///
    /// # async fn run() -> agent_session::Result<()> {
    /// let store = PostgresSessionStore::builder()
    ///     .schema("my_app_sessions")
    ///     .connect_async("host=127.0.0.1 user=app dbname=app")?;
    /// store.migrate_async().await?;
    ///
    /// let snapshot = SessionSnapshot::builder(SessionId::parse("s1")?, "model").build()?;
    /// let revision = store.save(&snapshot).await?;
    /// assert_eq!(store.load(snapshot.id()).await?.revision(), revision);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when called outside a tokio runtime, and as
    /// [`connect`](Self::connect) for a malformed `config`, an invalid schema name or a
    /// pool size of 0.
    pub fn connect_async(&self, config: &str) -> Result<PostgresSessionStore> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| Error::InvalidArgument {
            reason: format!(
                "PostgresStoreBuilder::connect_async must be called inside a tokio runtime ({e}); use PostgresStoreBuilder::connect outside one"
            ),
        })?;
        self.check()?;
        let manager = self.manager(config)?;
        let pool = self.pool(manager)?;
        Ok(self.store(pool, Executor::Caller(runtime)))
    }

    /// Refuses settings no store can work with.
    fn check(&self) -> Result<()> {
        check_schema_name(&self.schema)?;
        if self.max_snapshot_bytes == 0 {
            return Err(Error::InvalidArgument {
                reason: "max_snapshot_bytes must be at least 1".to_owned(),
            });
        }
        if self.pool_size == 0 {
            return Err(Error::InvalidArgument {
                reason: "a PostgreSQL pool needs at least one connection (pool_size 0)".to_owned(),
            });
        }
        Ok(())
    }

    /// How the pool opens a connection: `config` parsed, with the builder's timeouts.
    fn manager(&self, config: &str) -> Result<Manager> {
        let mut pg_config: tokio_postgres::Config =
            config.parse().map_err(|e| Error::InvalidArgument {
                // Not the string itself: it may hold a password.
                reason: format!(
                    "the PostgreSQL connection string is malformed ({e}): use \"host=… user=… dbname=…\" or postgresql://user@host/db"
                ),
            })?;
        // A server that does not answer must not hang a save forever.
        if pg_config.get_connect_timeout().is_none() {
            pg_config.connect_timeout(self.connect_timeout);
        }
        if pg_config.get_options().is_none() {
            let millis = self.query_timeout.as_millis().max(1);
            pg_config.options(format!(
                "-c statement_timeout={millis} -c lock_timeout={millis}"
            ));
        }
        // Clear text for sslmode=disable, verified TLS otherwise (tls.rs).
        tls::manager(
            pg_config,
            &self.tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        )
    }

    /// The connection pool, built in the runtime context its timers bind to.
    fn pool(&self, manager: Manager) -> Result<Pool> {
        Pool::builder(manager)
            .max_size(self.pool_size)
            .wait_timeout(Some(POOL_WAIT_TIMEOUT))
            .create_timeout(Some(self.connect_timeout))
            .recycle_timeout(Some(self.connect_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| Error::Backend {
                operation: "build the PostgreSQL connection pool".to_owned(),
                source: Box::new(e),
            })
    }

    fn store(&self, pool: Pool, exec: Executor) -> PostgresSessionStore {
        PostgresSessionStore {
            inner: Arc::new(Inner {
                pool,
                schema: self.schema.clone(),
                sql_schema: format!("\"{}\"", self.schema),
                max_snapshot_bytes: self.max_snapshot_bytes,
                query_timeout: self.query_timeout,
                indexed: self.indexed.clone(),
            }),
            exec,
        }
    }
}

/// Refuses a schema name that would need quoting or could inject SQL.
fn check_schema_name(schema: &str) -> Result<()> {
    let valid = !schema.is_empty()
        && schema.len() <= 63
        && schema
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit()
        && !schema.starts_with("pg_");
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            reason: format!(
                "{schema:?} is not a usable schema name: use lowercase ASCII letters, digits and '_', starting with a letter or '_', at most 63 bytes, not starting with \"pg_\""
            ),
        })
    }
}

/// What an append found.
#[derive(Debug, Clone, Copy)]
enum Appended {
    /// Stored at this revision.
    Done(Revision),
    /// The row is at another revision (or gone).
    Conflict(Option<Revision>),
    /// The row holds another session created under the same id.
    OtherSession,
    /// The entries would pass the size limit (their total size then).
    TooLarge(u64),
    /// The row is at the revision, but not in the state a derived entry follows.
    NotDerived,
    /// The row is at the revision and state, but its history was trimmed since the
    /// snapshot was loaded: the summary's history counts must be the stored log's.
    Trimmed,
}

/// What a write that may have missed its compare-and-swap found: the outcome by the row,
/// the session's lease and the server's time, and the stored form of the state one
/// revision ahead where it may be this very write, retried.
struct Missed {
    outcome: Appended,
    lease: Option<LeaseRecord>,
    now: DateTime<Utc>,
    retried: Option<Vec<u8>>,
}

impl Missed {
    /// A write that did not miss.
    fn none(outcome: Appended) -> Self {
        Missed {
            outcome,
            lease: None,
            now: DateTime::<Utc>::MIN_UTC,
            retried: None,
        }
    }

    /// The outcome for `snapshot`: a refusal by its lease first (a fenced writer is told
    /// so whatever its revision, as the other stores do), then its own write found one
    /// revision ahead (`is_mine` on the stored form: the retry gets that revision back),
    /// then what the row said.
    fn decide(
        self,
        snapshot: &SessionSnapshot,
        is_mine: impl FnOnce(&[u8]) -> Result<bool>,
    ) -> Result<Appended> {
        if let Appended::Done(_) = self.outcome {
            return Ok(self.outcome);
        }
        lease_rules::check_save_at(snapshot, self.lease.as_ref(), self.now)?;
        if let Some(stored) = &self.retried {
            if is_mine(stored)? {
                return Ok(Appended::Done(snapshot.revision().next()));
            }
        }
        Ok(self.outcome)
    }
}

/// What an entry row holds of `entry`: its bytes, and the words of the messages it adds.
fn stored_form(entry: &crate::snapshot::LogEntry, id: &SessionId) -> Result<(Vec<u8>, String)> {
    Ok((entry.to_bytes(id)?, search::words_of(entry.messages())))
}

/// The columns of the entry rows of `entries`: revisions, bytes, words.
type EntryRows = (Vec<i64>, Vec<Vec<u8>>, Vec<String>);

/// The entry rows that hold `entries`.
fn entry_rows(entries: &[crate::snapshot::LogEntry], id: &SessionId) -> Result<EntryRows> {
    let mut rows: EntryRows = (
        Vec::with_capacity(entries.len()),
        Vec::with_capacity(entries.len()),
        Vec::with_capacity(entries.len()),
    );
    for entry in entries {
        let (bytes, words) = stored_form(entry, id)?;
        rows.0.push(revision_column(id, entry.revision())?);
        rows.1.push(bytes);
        rows.2.push(words);
    }
    Ok(rows)
}

/// A row and its entries as read.
struct StoredRows {
    revision: Revision,
    snapshot: Vec<u8>,
    entries: Vec<(i16, Vec<u8>)>,
}

/// The two ranges of the listing's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Range {
    /// Updated no later than this machine's clock allows.
    Plausible,
    /// Updated in the future: listed after all others.
    Future,
}

/// The statement `sql` prepared on `client`, from the connection's cache after the first
/// time: a query then takes one round trip, not two.
async fn prepared(
    client: &deadpool_postgres::Client,
    sql: &str,
) -> Result<tokio_postgres::Statement> {
    client
        .prepare_cached(sql)
        .await
        .map_err(|e| backend("prepare a statement", e))
}

/// An error of the database, with what the store was doing and a hint where one helps.
fn backend(operation: &str, error: impl Into<BoxError>) -> Error {
    let error: BoxError = error.into();
    let code = error
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code);
    let missing_tables = code.is_some_and(|code| {
        *code == SqlState::UNDEFINED_TABLE || *code == SqlState::INVALID_SCHEMA_NAME
    });
    let older_tables = code.is_some_and(|code| *code == SqlState::UNDEFINED_COLUMN);
    let unreachable = error.is::<deadpool_postgres::PoolError>();
    let operation = if let Some(hint) = tls::certificate_hint(&*error) {
        format!("{operation}: {hint}")
    } else if missing_tables {
        format!("{operation}: the store's tables do not exist; call PostgresSessionStore::migrate first")
    } else if older_tables {
        format!("{operation}: the store's tables were made by an older release; call PostgresSessionStore::migrate to bring them up to date")
    } else if unreachable {
        format!(
            "{operation}: check that the server is reachable and the connection settings are right"
        )
    } else {
        operation.to_owned()
    };
    Error::Backend {
        operation,
        source: error,
    }
}

/// The version recorded in `<schema>.store_version`, or `None` if there is none yet.
async fn stored_version(
    tx: &deadpool_postgres::Transaction<'_>,
    schema: &str,
) -> Result<Option<i32>> {
    let read = |e| backend("read the store's version", e);
    let exists: bool = tx
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!("{schema}.store_version")],
        )
        .await
        .map_err(read)?
        .try_get(0)
        .map_err(read)?;
    if !exists {
        return Ok(None);
    }
    tx.query_one(
        &format!("SELECT max(version) FROM {schema}.store_version"),
        &[],
    )
    .await
    .map_err(read)?
    .try_get(0)
    .map_err(read)
}

/// Creates what is missing of the store's schema and tables.
async fn create_tables(tx: &mut deadpool_postgres::Transaction<'_>, schema: &str) -> Result<()> {
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.store_version (
             version integer NOT NULL
         );
         CREATE TABLE IF NOT EXISTS {schema}.sessions (
             id text COLLATE \"C\" PRIMARY KEY,
             revision bigint NOT NULL CHECK (revision > 0),
             created_ns bigint NOT NULL,
             updated_ns bigint NOT NULL,
             archived boolean NOT NULL DEFAULT false,
             summary text NOT NULL,
             snapshot bytea NOT NULL,
             journal_bytes bigint NOT NULL DEFAULT 0,
             state_counts text NOT NULL DEFAULT ''
         );
         CREATE INDEX IF NOT EXISTS sessions_listing
             ON {schema}.sessions (archived, updated_ns DESC, id DESC);
         ALTER TABLE {schema}.sessions
             ADD COLUMN IF NOT EXISTS journal_bytes bigint NOT NULL DEFAULT 0;
         ALTER TABLE {schema}.sessions
             ADD COLUMN IF NOT EXISTS state_counts text NOT NULL DEFAULT '';
         CREATE TABLE IF NOT EXISTS {schema}.entries (
             session_id text COLLATE \"C\" NOT NULL
                 REFERENCES {schema}.sessions (id) ON DELETE CASCADE,
             revision bigint NOT NULL,
             record bytea NOT NULL,
             format smallint NOT NULL DEFAULT 1,
             PRIMARY KEY (session_id, revision)
         );
         ALTER TABLE {schema}.entries
             ADD COLUMN IF NOT EXISTS format smallint NOT NULL DEFAULT 1;
         {leases}
         {search}
         {views}",
        leases = lease::create_tables(schema),
        search = search::create_tables(schema),
        views = view::add_columns(schema)
    ))
    .await
    .map_err(|e| backend("create the store's tables", e))?;
    // Snapshots are compressed by the server; lz4 (PostgreSQL 14 and later, when built
    // with it) made a 1 MB save 5 times faster than the default pglz, for 20% more bytes.
    // A server without it keeps the default.
    let lz4 = tx
        .savepoint("lz4")
        .await
        .map_err(|e| backend("start the migration", e))?;
    let set = lz4
        .batch_execute(&format!(
            "ALTER TABLE {schema}.sessions ALTER COLUMN snapshot SET COMPRESSION lz4"
        ))
        .await;
    match set {
        Ok(()) => lz4.commit().await,
        Err(_) => lz4.rollback().await,
    }
    .map_err(|e| backend("set the snapshot column's compression", e))
}

impl PostgresSessionStore {
    /// The settings of a new store; finish with [`PostgresStoreBuilder::connect`].
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            schema: DEFAULT_POSTGRES_SCHEMA.to_owned(),
            max_snapshot_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
            pool_size: 8,
            connect_timeout: CONNECT_TIMEOUT,
            query_timeout: QUERY_TIMEOUT,
            tls: TlsSettings::default(),
            indexed: IndexedMetadata::default(),
        }
    }

    /// A store with the default settings for the server `config` names; see
    /// [`PostgresStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`].
    pub fn connect(config: &str) -> Result<Self> {
        Self::builder().connect(config)
    }

    /// The schema holding the store's tables.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Creates the store's schema and tables if they do not exist, or brings older ones up
    /// to date. Safe to run at every start, from any number of processes at once (they
    /// take turns on an advisory lock).
    ///
    /// Creates `<schema>.sessions` (one row per session) with its listing index,
    /// `<schema>.entries` (the changes saved since a row's snapshot, one per revision),
    /// and `<schema>.store_version`, which records the tables' version. Tables of version
    /// 1 (release 0.1) gain `entries` and the `journal_bytes` and `state_counts` columns;
    /// their sessions load as before.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedSchemaVersion`] if a newer release made the tables;
    /// [`Error::Backend`] if the server cannot be reached or refuses (for example, the
    /// user may not create schemas).
    pub fn migrate(&self) -> Result<()> {
        self.run(|inner| async move { inner.migrate().await })
    }

    /// [`migrate`](Self::migrate), as a future: on the caller's task for a store made by
    /// [`PostgresStoreBuilder::connect_async`], on the store's own runtime (awaited
    /// without blocking) for one made by [`PostgresStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`migrate`](Self::migrate).
    pub async fn migrate_async(&self) -> Result<()> {
        self.call(|inner| async move { inner.migrate().await })
            .await
    }

    /// Runs the operation `work` starts as a future: on the caller's task for a store on
    /// the caller's runtime; otherwise spawned onto the store's runtime and awaited (the
    /// caller's executor is not blocked, and a future dropped early leaves the call to
    /// finish there).
    async fn call<T, F, Fut>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let future = work(Arc::clone(&self.inner));
        let runtime = match &self.exec {
            Executor::Caller(_) => return future.await,
            Executor::Private(runtime) => runtime.as_ref().ok_or_else(stopped)?,
        };
        // The bytes the task moves are counted on the runtime's threads, and handed to the
        // caller's operation here.
        match runtime.spawn(telemetry::counting(future)).await {
            Ok((outcome, io)) => {
                io.hand_over();
                outcome
            }
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(stopped()),
        }
    }

    /// Runs the operation `work` starts on the store's runtime and waits for it, from any
    /// thread (inside another runtime too: the caller's thread only waits).
    fn run<T, F, Fut>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let runtime = match &self.exec {
            Executor::Private(runtime) => runtime.as_ref().ok_or_else(stopped)?.handle(),
            Executor::Caller(runtime) => {
                let on_current_thread_runtime =
                    tokio::runtime::Handle::try_current().is_ok_and(|current| {
                        current.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
                    });
                if on_current_thread_runtime
                    && runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
                {
                    return Err(Error::Unsupported {
                        store: "PostgresSessionStore (made by connect_async on a current-thread runtime)",
                        operation: "run a synchronous call on the thread that drives its runtime (it would wait for a task only that thread can run): await its AsyncSessionStore calls instead, make the call from another thread, or use a store made by PostgresStoreBuilder::connect",
                    });
                }
                runtime
            }
        };
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let future = telemetry::counting(work(Arc::clone(&self.inner)));
        runtime.spawn(async move {
            let _ = sender.send(future.await);
        });
        let (outcome, io) = receiver.recv().map_err(|_| stopped())?;
        // Counted on the runtime's threads; this thread's operation reports them.
        io.hand_over();
        outcome
    }
}

/// The error of a call whose runtime has shut down (or dropped the call's task).
fn stopped() -> Error {
    Error::Backend {
        operation: "run a query".to_owned(),
        source: "the PostgreSQL store's runtime has stopped".into(),
    }
}

/// `future`, failed with [`Error::Backend`] if it takes longer than `limit`
/// ([`PostgresStoreBuilder::query_timeout`]).
async fn timed<T>(
    limit: std::time::Duration,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, future).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Error::Backend {
            operation: format!(
                "finish a call within {} s (PostgresStoreBuilder::query_timeout): check that the server is reachable and not overloaded",
                limit.as_secs_f64()
            ),
            source: "timed out".into(),
        }),
    }
}

impl Inner {
    /// Runs `work` with a connection from the pool and the schema as an SQL identifier,
    /// within the query timeout.
    async fn with_client<T, F, Fut>(&self, work: F) -> Result<T>
    where
        F: FnOnce(deadpool_postgres::Client, String) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        timed(self.query_timeout, async {
            let client = self
                .pool
                .get()
                .await
                .map_err(|e| backend("connect to PostgreSQL", e))?;
            work(client, self.sql_schema.clone()).await
        })
        .await
    }

    /// As [`PostgresSessionStore::migrate`].
    async fn migrate(&self) -> Result<()> {
        self.with_client(move |mut client, schema| async move {
            let mut tx = client
                .transaction()
                .await
                .map_err(|e| backend("start the migration", e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(|e| backend("lock the migration", e))?;
            let found = stored_version(&tx, &schema).await?;
            match found {
                // Up to date: nothing to create, no table lock taken and no CREATE right
                // needed (processes run this at every start, while others save).
                Some(version) if version == TABLES_VERSION => {
                    return tx
                        .commit()
                        .await
                        .map_err(|e| backend("commit the migration", e));
                }
                Some(version) if version > TABLES_VERSION => {
                    return Err(Error::UnsupportedSchemaVersion {
                        location: Location::Stored(format!("PostgreSQL schema {schema}")),
                        found: u64::try_from(version).unwrap_or(0),
                        oldest: 1,
                        supported: u32::try_from(TABLES_VERSION).unwrap_or(0),
                    });
                }
                _ => {}
            }
            create_tables(&mut tx, &schema).await?;
            let record = if found.is_none() {
                format!("INSERT INTO {schema}.store_version (version) VALUES ($1)")
            } else {
                format!("UPDATE {schema}.store_version SET version = $1")
            };
            tx.execute(&record, &[&TABLES_VERSION])
                .await
                .map_err(|e| backend("record the store's version", e))?;
            tx.commit()
                .await
                .map_err(|e| backend("commit the migration", e))
        })
        .await
    }

    /// Where a row is, for error messages.
    fn location(&self, id: &SessionId) -> Location {
        Location::Stored(format!("PostgreSQL row {}.sessions id {id}", self.schema))
    }

    /// Decodes the summary column of a row, and says whether it was made for the store's
    /// indexed metadata keys (if not, its `metadata` is not to be trusted).
    fn summary_of(&self, id: &str, json: &str, archived: bool) -> Result<(SessionSummary, bool)> {
        columns::summary_of(id, json, archived, &self.indexed, || {
            Location::Stored(format!(
                "PostgreSQL row {}.sessions id {id} (summary)",
                self.schema
            ))
        })
    }

    /// The listing of `scope`, in the listing's order, at most `limit` rows after `after`:
    /// each row's place in the order (from the indexed columns, so a page can end on a row
    /// whose summary is unreadable) and its summary. Sessions updated in the future come
    /// after all others, so the listing is read as two ranges of the index: plausible
    /// times, then the future ones.
    async fn select_summaries(
        &self,
        scope: ListScope,
        after: Option<&ListCursor>,
        limit: Option<usize>,
    ) -> Result<Vec<(Option<ListCursor>, Result<SessionSummary>)>> {
        // The walk's latest plausible time, fixed on its first page (see ListCursor).
        let horizon = after.map_or_else(|| clock::horizon(Utc::now()), |c| c.position().2);
        let after_future = after.is_some_and(|c| {
            let (updated_at, _, horizon) = c.position();
            updated_at > horizon
        });
        let mut listed = Vec::new();
        if !after_future {
            listed = self
                .select_range(scope, Range::Plausible, after, limit, horizon)
                .await?;
        }
        let wanted = limit.map(|limit| limit.saturating_sub(listed.len()));
        if wanted != Some(0) {
            let after = after.filter(|_| after_future);
            listed.extend(
                self.select_range(scope, Range::Future, after, wanted, horizon)
                    .await?,
            );
        }
        Ok(listed)
    }

    /// One range of [`select_summaries`](Self::select_summaries): the rows updated at
    /// `horizon` or earlier, or those updated later.
    async fn select_range(
        &self,
        scope: ListScope,
        range: Range,
        after: Option<&ListCursor>,
        limit: Option<usize>,
        horizon: DateTime<Utc>,
    ) -> Result<Vec<(Option<ListCursor>, Result<SessionSummary>)>> {
        let horizon_ns = nanos_saturating(horizon);
        let archived: Option<bool> = match scope {
            ListScope::Active => Some(false),
            ListScope::Archived => Some(true),
            ListScope::All => None,
        };
        let after = match after {
            Some(cursor) => {
                let (updated_at, id, _) = cursor.position();
                Some((nanos(id, updated_at)?, id.to_string()))
            }
            None => None,
        };
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let future = range == Range::Future;
        let in_range = if future {
            "updated_ns > $5"
        } else {
            "updated_ns <= $5"
        };
        let query = self.with_client(move |client, schema| async move {
            let (after_ns, after_id) = match &after {
                Some((ns, id)) => (Some(*ns), Some(id.as_str())),
                None => (None, None),
            };
            client
                .query(
                    &prepared(
                        &client,
                        &format!(
                            "SELECT id, summary, archived, updated_ns FROM {schema}.sessions
                         WHERE ($1::boolean IS NULL OR archived = $1)
                           AND {in_range}
                           AND ($2::bigint IS NULL OR (updated_ns, id) < ($2, $3::text))
                         ORDER BY updated_ns DESC, id DESC
                         LIMIT $4"
                        ),
                    )
                    .await?,
                    &[&archived, &after_ns, &after_id, &limit, &horizon_ns],
                )
                .await
                .map_err(|e| backend("list sessions", e))
        });
        let rows = query.await?;
        let mut listed = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.get(0);
            let json: String = row.get(1);
            // A row under a key that is not a session id (written by hand) is reported,
            // not fatal to the listing; it cannot mark a page's end.
            let place = match SessionId::parse(&id) {
                Ok(session) => Some(ListCursor::at(
                    DateTime::from_timestamp_nanos(row.get(3)),
                    session,
                    horizon,
                )),
                Err(e) => {
                    listed.push((None, Err(e.at(&self.location_of_key(&id)))));
                    continue;
                }
            };
            let summary = match self.summary_of(&id, &json, row.get(2)) {
                Ok((summary, true)) => Ok(summary),
                // Made for other metadata keys: worked out from the log.
                Ok((summary, false)) => self.summary_from_log(summary).await,
                Err(e) => Err(e),
            };
            listed.push((place, summary));
        }
        Ok(listed)
    }

    /// `listed` (a row's summary made for other metadata keys) with the values of the
    /// store's keys, from the session's log; the row's summary is written again with them
    /// (best effort, and only while the row is at the revision read), so the next listing
    /// reads only the summary.
    async fn summary_from_log(&self, listed: SessionSummary) -> Result<SessionSummary> {
        let snapshot = self.with_log(&listed.id, |log| log.state_at(None)).await?;
        let summary = SessionSummary {
            metadata: self.indexed.values_in(&snapshot),
            ..listed
        };
        if snapshot.revision() == summary.revision {
            if let Ok(json) = columns::summary_json(&summary, &self.indexed) {
                let key = summary.id.to_string();
                let revision = to_i64(summary.revision.as_u64());
                let _ = self
                    .with_client(move |client, schema| async move {
                        client
                            .execute(
                                &format!(
                                    "UPDATE {schema}.sessions SET summary = $3
                                     WHERE id = $1 AND revision = $2"
                                ),
                                &[&key, &revision, &json],
                            )
                            .await
                            .map_err(|e| backend("write a session's summary", e))
                    })
                    .await;
            }
        }
        Ok(summary)
    }

    /// For a snapshot known to be what is stored at its revision: its revision, if the
    /// row still holds exactly that state (same revision, creation and update times), so
    /// saving it writes nothing; `Ok(None)` to save it as usual; [`Error::Conflict`] if
    /// another writer moved the revision (or deleted the session).
    async fn unchanged(&self, snapshot: &SessionSnapshot) -> Result<Option<Revision>> {
        let id = snapshot.id().clone();
        let created = nanos(&id, snapshot.created_at())?;
        let updated = nanos(&id, snapshot.updated_at())?;
        let query = self.with_client(move |client, schema| async move {
            client
                .query_opt(
                    &prepared(
                        &client,
                        &format!(
                            "SELECT s.revision, s.created_ns, s.updated_ns,
                                    {LEASE_COLUMNS}, {NOW_NS}
                             FROM {schema}.sessions s
                             LEFT JOIN {schema}.leases l ON l.session_id = s.id
                             WHERE s.id = $1"
                        ),
                    )
                    .await?,
                    &[&id.as_str()],
                )
                .await
                .map_err(|e| backend("read a session's revision", e))?
                .map(|row| -> Result<_> {
                    let column = |e| backend("read a session's row", e);
                    Ok((
                        row.try_get::<_, i64>(0).map_err(column)?,
                        row.try_get::<_, i64>(1).map_err(column)?,
                        row.try_get::<_, i64>(2).map_err(column)?,
                        lease::record_at(&row, 3, &id)?,
                        lease::now_at(&row, 10)?,
                    ))
                })
                .transpose()
        });
        let row = query.await?;
        // Nothing is written, but a fenced writer is told so all the same.
        if let Some((.., record, now)) = &row {
            lease_rules::check_save_at(snapshot, record.as_ref(), *now)?;
        }
        let stored = row
            .map(|(revision, created_ns, updated_ns, ..)| {
                let revision = u64::try_from(revision).map_err(|_| {
                    Error::inconsistent(format!("the row holds revision {revision}"))
                        .at(&self.location(snapshot.id()))
                })?;
                Ok::<_, Error>((Revision::from_u64(revision), created_ns, updated_ns))
            })
            .transpose()?;
        check_revision(
            snapshot.id(),
            snapshot.revision(),
            stored.map(|(revision, ..)| revision),
        )?;
        Ok(stored
            .filter(|&(_, created_ns, updated_ns)| created_ns == created && updated_ns == updated)
            .map(|(revision, ..)| revision))
    }

    /// Where a session's entries are, for error messages.
    fn entries_location(&self, id: &SessionId) -> Location {
        Location::Stored(format!(
            "PostgreSQL rows {}.entries of session {id}",
            self.schema
        ))
    }

    /// Appends the log entry that takes the stored state to `snapshot`, if the row still
    /// holds the revision, creation time (and, for an entry derived from the stored state,
    /// the update time and lengths) the snapshot was loaded at: one statement, so the server
    /// decides the compare-and-swap and the entry lands with the revision or not at all.
    /// On a miss, says why ([`Appended`]).
    // One statement with its fourteen parameters, then why it missed: splitting it would
    // only scatter the compare-and-swap's conditions.
    #[allow(clippy::too_many_lines)]
    async fn try_append(
        &self,
        snapshot: &SessionSnapshot,
        entry: (&[u8], &str),
        derived: bool,
        oldest: Option<Revision>,
        summary: &str,
        view: Option<&view::EncodedView>,
    ) -> Result<Appended> {
        // The entry's bytes, and the words of the messages it adds (search.rs).
        let (entry, words) = (entry.0, entry.1.to_owned());
        // A compaction's view (view.rs), kept with the entry if it is small enough.
        let (view_state, view_history) = match view {
            Some(view) => (Some(view.state.clone()), Some(view.history.clone())),
            None => (None, None),
        };
        let expected = snapshot.revision();
        let revision = expected.next();
        let id = snapshot.id().clone();
        let new = revision_column(&id, revision)?;
        let old = revision_column(&id, expected)?;
        let created = nanos(&id, snapshot.created_at())?;
        let updated = nanos(&id, snapshot.updated_at())?;
        // The state a derived entry follows, as the snapshot knows it: a claim about
        // another store's session (or another state at the same revision) never appends.
        let (stored_updated, counts_before) = match snapshot.provenance().filter(|_| derived) {
            Some(p) => (
                Some(nanos(&id, p.updated_at)?),
                Some(state_counts(p.stored)),
            ),
            None => (None, None),
        };
        let counts_after = state_counts(snapshot.counts());
        let fence = lease::fence_of(snapshot)?;
        // The oldest revision the log keeps, which `summary` counts from (a trim moves
        // it): the first entry's revision minus one, or the row's revision without entries
        // (found through the primary key's index, whatever the history's length).
        let oldest = oldest.map(|r| revision_column(&id, r)).transpose()?;
        let entry_len = to_i64(entry.len() as u64);
        let sent = (entry.len() + summary.len()) as u64;
        let limit = to_i64(self.max_snapshot_bytes);
        let summary = summary.to_owned();
        let entry = entry.to_vec();
        let missed = self
            .with_client(move |client, schema| async move {
                let appended = client
                    .execute(
                        &prepared(
                            &client,
                            &format!(
                                "WITH moved AS (
                                UPDATE {schema}.sessions
                                   SET revision = $2, updated_ns = $3, summary = $4,
                                       journal_bytes = journal_bytes + $5::bigint,
                                       state_counts = $10, {keep_view}
                                 WHERE id = $1 AND revision = $6 AND created_ns = $7
                                   AND ($8::bigint IS NULL OR updated_ns = $8)
                                   AND ($11::text IS NULL OR state_counts = $11)
                                   AND journal_bytes + $5::bigint <= $9::bigint
                                   AND ($14::bigint IS NULL OR $14 = COALESCE(
                                       (SELECT min(e.revision) - 1 FROM {schema}.entries e
                                        WHERE e.session_id = $1), revision))
                                   AND {fenced}
                                RETURNING id)
                             INSERT INTO {schema}.entries
                                 (session_id, revision, record, format, words)
                             SELECT id, $2, $12, $13, $16 FROM moved",
                                fenced = lease::row_allows(15),
                                keep_view = view::set_on_append("$17", "$18", "$2", "$5")
                            ),
                        )
                        .await?,
                        &[
                            &id.as_str(),
                            &new,
                            &updated,
                            &summary,
                            &entry_len,
                            &old,
                            &created,
                            &stored_updated,
                            &limit,
                            &counts_after,
                            &counts_before,
                            &entry,
                            &ENTRY_FORMAT,
                            &oldest,
                            &fence,
                            &words,
                            &view_state,
                            &view_history,
                        ],
                    )
                    .await
                    .map_err(|e| backend("append to a session", e))?;
                if appended == 1 {
                    telemetry::wrote(sent);
                    return Ok(Missed::none(Appended::Done(revision)));
                }
                // Say why, from the row and the lease as they are now.
                let row = client
                    .query_one(
                        &prepared(
                            &client,
                            &format!(
                                "SELECT s.revision, s.created_ns, s.journal_bytes,
                                COALESCE((SELECT min(e.revision) - 1 FROM {schema}.entries e
                                          WHERE e.session_id = $1), s.revision),
                                s.updated_ns, s.state_counts, {LEASE_COLUMNS}, {NOW_NS}
                             FROM (SELECT 1) AS one
                             LEFT JOIN {schema}.sessions s ON s.id = $1
                             LEFT JOIN {schema}.leases l ON l.session_id = $1"
                            ),
                        )
                        .await?,
                        &[&id.as_str()],
                    )
                    .await
                    .map_err(|e| backend("read a session's revision", e))?;
                let lease = lease::record_at(&row, 6, &id)?;
                let now = lease::now_at(&row, 13)?;
                let found: Option<i64> = row.get(0);
                let Some(found) = found else {
                    return Ok(Missed {
                        outcome: Appended::Conflict(None),
                        lease,
                        now,
                        retried: None,
                    });
                };
                let (found_created, bytes, found_oldest, found_updated, found_counts): (
                    i64,
                    i64,
                    i64,
                    i64,
                    String,
                ) = (row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
                let found = Revision::from_u64(u64::try_from(found).unwrap_or(0));
                // One revision ahead, with this save's time and lengths: perhaps this very
                // save, retried after its acknowledgement was lost. Its entry says.
                let retried = if found == revision
                    && found_created == created
                    && found_updated == updated
                    && found_counts == counts_after
                {
                    client
                        .query_opt(
                            &prepared(
                                &client,
                                &format!(
                                    "SELECT record FROM {schema}.entries
                                 WHERE session_id = $1 AND revision = $2 AND format = $3"
                                ),
                            )
                            .await?,
                            &[&id.as_str(), &new, &ENTRY_FORMAT],
                        )
                        .await
                        .map_err(|e| backend("read a session's last entry", e))?
                        .map(|row| row.get::<_, Vec<u8>>(0))
                } else {
                    None
                };
                let outcome = if found != expected {
                    Appended::Conflict(Some(found))
                } else if found_created != created {
                    Appended::OtherSession
                } else if bytes.saturating_add(entry_len) > limit {
                    Appended::TooLarge(u64::try_from(bytes.saturating_add(entry_len)).unwrap_or(0))
                } else if oldest.is_some_and(|oldest| oldest != found_oldest) {
                    Appended::Trimmed
                } else {
                    Appended::NotDerived
                };
                Ok(Missed {
                    outcome,
                    lease,
                    now,
                    retried,
                })
            })
            .await?;
        missed.decide(snapshot, |stored| snapshot.is_stored_as_entry(stored))
    }

    /// The history stats in the stored summary of `id` (for a save that replaces the whole
    /// view, which counts as one more edit of the stored history).
    async fn stored_stats(&self, id: &SessionId) -> Result<HistoryStats> {
        let key = id.to_string();
        let query = self.with_client(move |client, schema| async move {
            Ok(client
                .query_opt(
                    &prepared(
                        &client,
                        &format!("SELECT summary FROM {schema}.sessions WHERE id = $1"),
                    )
                    .await?,
                    &[&key],
                )
                .await
                .map_err(|e| backend("read a session's summary", e))?
                .map(|row| row.get(0)))
        });
        let json: Option<String> = query.await?;
        // The summary is a cache: one that does not decode is worked out from the log.
        match json.map(|json| self.summary_of(id.as_str(), &json, false)) {
            Some(Ok((summary, _))) => Ok(summary.history),
            Some(Err(_)) => self
                .with_log(id, |log| log.state_at(None))
                .await
                .map(|s| s.history_stats()),
            None => Ok(HistoryStats::default()),
        }
    }

    /// The row of `id` and its entries, one consistent state read by one statement:
    /// the snapshot's bytes, each entry's format and bytes, and the row's revision.
    async fn read_rows(&self, id: &SessionId) -> Result<StoredRows> {
        let key = id.to_string();
        let limit = to_i64(self.max_snapshot_bytes);
        let query = self.with_client(move |client, schema| async move {
            // The sizes are checked before the bytes are fetched.
            client
                .query_opt(
                    &prepared(
                        &client,
                        &format!(
                            "SELECT revision, octet_length(snapshot),
                                CASE WHEN octet_length(snapshot) <= $2::bigint THEN snapshot END,
                                journal_bytes,
                                CASE WHEN journal_bytes <= $2::bigint THEN ARRAY(
                                    SELECT record FROM {schema}.entries
                                    WHERE session_id = $1 ORDER BY revision) END,
                                ARRAY(SELECT format FROM {schema}.entries
                                    WHERE session_id = $1 ORDER BY revision)
                         FROM {schema}.sessions WHERE id = $1"
                        ),
                    )
                    .await?,
                    &[&key, &limit],
                )
                .await
                .map_err(|e| backend("load a session", e))
        });
        let row = query.await?;
        let row = row.ok_or_else(|| Error::NotFound { id: id.clone() })?;
        self.stored_rows(id, &row)
    }

    /// The snapshot and entries of `id` from the first six columns of `row`: its
    /// revision, the snapshot's size and bytes (`NULL` past the size limit), the entries'
    /// size and bytes (the same) and their formats.
    fn stored_rows(&self, id: &SessionId, row: &tokio_postgres::Row) -> Result<StoredRows> {
        // The types are those `migrate` gives the columns; a table made otherwise is an
        // error, never a panic.
        let column = |e| {
            backend(
                "read a session's row (is the table the one migrate made?)",
                e,
            )
        };
        let revision: i64 = row.try_get(0).map_err(column)?;
        let size: i32 = row.try_get(1).map_err(column)?;
        let Some(snapshot) = row.try_get::<_, Option<Vec<u8>>>(2).map_err(column)? else {
            return Err(Error::TooLarge {
                location: self.location(id),
                size_bytes: u64::try_from(size).unwrap_or(0),
                limit_bytes: self.max_snapshot_bytes,
            });
        };
        let entry_bytes: i64 = row.try_get(3).map_err(column)?;
        let Some(entries) = row.try_get::<_, Option<Vec<Vec<u8>>>>(4).map_err(column)? else {
            return Err(Error::TooLarge {
                location: self.entries_location(id),
                size_bytes: u64::try_from(entry_bytes).unwrap_or(0),
                limit_bytes: self.max_snapshot_bytes,
            });
        };
        let formats: Vec<i16> = row.try_get(5).map_err(column)?;
        telemetry::read(entries.iter().fold(snapshot.len() as u64, |sum, e| {
            sum.saturating_add(e.len() as u64)
        }));
        Ok(StoredRows {
            revision: Revision::from_u64(u64::try_from(revision).unwrap_or(0)),
            snapshot,
            entries: formats.into_iter().zip(entries).collect(),
        })
    }

    /// Works `f` out from the log of `id` (its row's snapshot and entries), with every
    /// entry's body still bytes until a view needs it.
    async fn with_log<T>(
        &self,
        id: &SessionId,
        f: impl FnOnce(LogSource<'_>) -> Result<T>,
    ) -> Result<T> {
        let rows = self.read_rows(id).await?;
        self.fold_rows(id, &rows, f)
    }

    /// Works `f` out from the log in `rows`, the snapshot and entries of `id`.
    fn fold_rows<T>(
        &self,
        id: &SessionId,
        rows: &StoredRows,
        f: impl FnOnce(LogSource<'_>) -> Result<T>,
    ) -> Result<T> {
        let location = self.location(id);
        let entries_location = self.entries_location(id);
        let base =
            SessionSnapshot::decode_unvalidated(&rows.snapshot).map_err(|e| e.at(&location))?;
        check_stored_id(id, base.id(), &location)?;
        let mut before = base.counts();
        let mut log = LogSource::new(base);
        let at_entries = |e: Error| e.at(&entries_location);
        for (format, bytes) in &rows.entries {
            if *format == ENTRY_FORMAT {
                let (payload, used) = intact_frame(bytes).ok_or_else(|| {
                    at_entries(Error::inconsistent("an entry's frame is damaged"))
                })?;
                if used != bytes.len() {
                    return Err(at_entries(Error::inconsistent(
                        "an entry has bytes after its frame",
                    )));
                }
                let (head, body) = split_entry(payload).map_err(at_entries)?;
                let head = decode_head(head).map_err(at_entries)?;
                before = head.state;
                log.push_bytes(head, body).map_err(at_entries)?;
            } else {
                let change = decode_record(bytes).map_err(at_entries)?;
                let after = counts_after(&change);
                log.push(entry_of_record(change, before));
                before = after;
            }
        }
        let last = log.last_revision();
        if last != rows.revision {
            return Err(Error::inconsistent(format!(
                "the snapshot and its {} entries reach revision {last} but the row says {}",
                rows.entries.len(),
                rows.revision
            ))
            .at(&location));
        }
        f(log).map_err(at_entries)
    }

    /// Writes the whole snapshot at its revision plus one (compare-and-swap on the row's
    /// revision), as the new session's first state, or over the row of another session
    /// that had the same id (deleted and created again), whose entries go with it. One
    /// transaction.
    // Two ways to write, one transaction, and the conflict's report, as one sequence.
    #[allow(clippy::too_many_lines)]
    async fn write_whole(&self, snapshot: &SessionSnapshot, summary: String) -> Result<Revision> {
        let id = snapshot.id().clone();
        let expected = snapshot.revision();
        let revision = expected.next();
        let new = revision_column(&id, revision)?;
        let old = revision_column(&id, expected)?;
        let bytes = snapshot.to_json_with_revision(revision)?;
        if bytes.len() as u64 > self.max_snapshot_bytes {
            // As the file store refuses it.
            return Err(Error::TooLarge {
                location: self.location(&id),
                size_bytes: bytes.len() as u64,
                limit_bytes: self.max_snapshot_bytes,
            });
        }
        let created = nanos(&id, snapshot.created_at())?;
        let updated = nanos(&id, snapshot.updated_at())?;
        let counts = state_counts(snapshot.counts());
        let fence = lease::fence_of(snapshot)?;
        let words = search::words_of(snapshot.transcript());
        let sent = (bytes.len() + summary.len()) as u64;
        let query = self.with_client(move |mut client, schema| async move {
            let key = id.as_str();
            let written = if expected == Revision::NEW {
                client
                    .execute(
                        &prepared(
                            &client,
                            &format!(
                                "WITH created AS (
                                 INSERT INTO {schema}.sessions
                                 (id, revision, created_ns, updated_ns, summary, snapshot,
                                  journal_bytes, state_counts, lease_epoch, lease_until_ns)
                             SELECT $1, $2, $3, $4, $5, $6, 0, $7, COALESCE(l.epoch, 0),
                                    CASE WHEN l.released THEN NULL ELSE l.expires_ns END
                             FROM (SELECT 1) AS one
                             LEFT JOIN {schema}.leases l ON l.session_id = $1
                             WHERE {allowed}
                             ON CONFLICT (id) DO NOTHING
                             RETURNING id)
                             INSERT INTO {schema}.checkpoint_words (session_id, words)
                             SELECT id, $9 FROM created",
                                allowed = lease::record_allows(8)
                            ),
                        )
                        .await?,
                        &[
                            &key, &new, &created, &updated, &summary, &bytes, &counts, &fence,
                            &words,
                        ],
                    )
                    .await
                    .map_err(|e| backend("save a session", e))?
            } else {
                let update = prepared(
                    &client,
                    &format!(
                        "UPDATE {schema}.sessions
                         SET revision = $2, created_ns = $3, updated_ns = $4,
                             summary = $5, snapshot = $6, journal_bytes = 0,
                             state_counts = $8, {clear_view}
                         WHERE id = $1 AND revision = $7 AND {allowed}",
                        allowed = lease::row_allows(9),
                        clear_view = view::CLEAR
                    ),
                )
                .await?;
                let replaced = prepared(
                    &client,
                    &format!("DELETE FROM {schema}.entries WHERE session_id = $1"),
                )
                .await?;
                let set_words = prepared(&client, &search::set_checkpoint_words(&schema)).await?;
                let tx = client
                    .transaction()
                    .await
                    .map_err(|e| backend("start a save", e))?;
                let written = tx
                    .execute(
                        &update,
                        &[
                            &key, &new, &created, &updated, &summary, &bytes, &old, &counts, &fence,
                        ],
                    )
                    .await
                    .map_err(|e| backend("save a session", e))?;
                if written == 1 {
                    tx.execute(&replaced, &[&key])
                        .await
                        .map_err(|e| backend("drop the replaced session's entries", e))?;
                    tx.execute(&set_words, &[&key, &words])
                        .await
                        .map_err(|e| backend("record the checkpoint's words", e))?;
                }
                tx.commit().await.map_err(|e| backend("commit a save", e))?;
                written
            };
            if written == 1 {
                telemetry::wrote(sent);
                return Ok(Missed::none(Appended::Done(revision)));
            }
            // Missed: say why, from the row and the lease as they are now, with the row's
            // snapshot where it may be this very save, retried.
            let row = client
                .query_one(
                    &prepared(
                        &client,
                        &format!(
                            "SELECT s.revision,
                                CASE WHEN s.revision = $2 AND s.created_ns = $3
                                      AND s.updated_ns = $4 THEN s.snapshot END,
                                {LEASE_COLUMNS}, {NOW_NS}
                             FROM (SELECT 1) AS one
                             LEFT JOIN {schema}.sessions s ON s.id = $1
                             LEFT JOIN {schema}.leases l ON l.session_id = $1"
                        ),
                    )
                    .await?,
                    &[&key, &new, &created, &updated],
                )
                .await
                .map_err(|e| backend("read a session's revision", e))?;
            let found: Option<i64> = row.get(0);
            Ok(Missed {
                outcome: Appended::Conflict(
                    found.map(|r| Revision::from_u64(u64::try_from(r).unwrap_or(0))),
                ),
                retried: row.get(1),
                lease: lease::record_at(&row, 2, &id)?,
                now: lease::now_at(&row, 9)?,
            })
        });
        let missed = query.await?;
        match missed.decide(snapshot, |stored| snapshot.is_stored_as_checkpoint(stored))? {
            Appended::Done(revision) => Ok(revision),
            outcome => Err(Error::Conflict {
                id: snapshot.id().clone(),
                expected,
                found: match outcome {
                    Appended::Conflict(found) => found,
                    _ => Some(expected),
                },
            }),
        }
    }

    /// What a save does after [`try_append`](Self::try_append) said `outcome`.
    async fn appended(
        &self,
        snapshot: &SessionSnapshot,
        outcome: Appended,
        summary: impl Fn(HistoryStats) -> Result<String>,
    ) -> Result<Revision> {
        let id = snapshot.id();
        match outcome {
            Appended::Done(revision) => Ok(revision),
            Appended::Conflict(found) => Err(Error::Conflict {
                id: id.clone(),
                expected: snapshot.revision(),
                found,
            }),
            // Another session under the same id (deleted and created again): replaced
            // whole, as the file store's journal ignores an older session's entries.
            Appended::OtherSession => {
                let stats = HistoryStats {
                    oldest_revision: snapshot.revision().next(),
                    ..HistoryStats::default()
                };
                self.write_whole(snapshot, summary(stats)?).await
            }
            Appended::TooLarge(size_bytes) => Err(Error::TooLarge {
                location: self.entries_location(id),
                size_bytes,
                limit_bytes: self.max_snapshot_bytes,
            }),
            // The row matched everything a moment after the append missed it: something
            // changed while the save ran (the session's lease, or a trim of its history).
            // A conflict: load the session and save again.
            Appended::NotDerived | Appended::Trimmed => Err(Error::Conflict {
                id: id.clone(),
                expected: snapshot.revision(),
                found: Some(snapshot.revision()),
            }),
        }
    }

    /// Where a row is, by its raw key.
    fn location_of_key(&self, key: &str) -> Location {
        Location::Stored(format!(
            "PostgreSQL row {}.sessions id {key:?}",
            self.schema
        ))
    }
}

#[async_trait]
impl AsyncSessionStore for Inner {
    async fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        if snapshot.is_unchanged_since_stored() {
            if let Some(revision) = self.unchanged(snapshot).await? {
                return Ok(revision);
            }
        }
        let id = snapshot.id();
        let expected = snapshot.revision();
        let revision = expected.next();
        // Both fit the bigint column (this also refuses u64::MAX, which `next()` cannot
        // move past), checked before the snapshot is encoded.
        revision_column(id, revision)?;
        revision_column(id, expected)?;
        let summary = |stats: HistoryStats| {
            let mut listed = self.indexed.summary_of(snapshot);
            listed.revision = revision;
            listed.history = stats;
            columns::summary_json(&listed, &self.indexed)
        };
        // A new session, or one whose redaction changed messages already stored (the
        // history would keep the text the redactor now removes): written whole.
        if expected == Revision::NEW || snapshot.replaces_history() {
            return self
                .write_whole(snapshot, summary(snapshot.stats_once_saved(revision))?)
                .await;
        }
        // Every save of a stored session appends one entry: what the snapshot says changed
        // since the state it derives from, or else everything (an edit the history keeps).
        let derived = snapshot
            .provenance()
            .filter(|p| p.revision == expected)
            .and_then(|_| snapshot.entry_since_stored(revision));
        if let Some(entry) = derived {
            let kind = entry.kind();
            let (bytes, words) = stored_form(&entry, id)?;
            let stats = snapshot.stats_once_saved(revision);
            let oldest = snapshot.history_stats().oldest_revision;
            // A compaction keeps the state it makes beside its entry (view.rs).
            let compacted = |stats| {
                (kind == EntryKind::Compaction)
                    .then(|| view::encode(snapshot, revision, stats))
                    .flatten()
            };
            match self
                .try_append(
                    snapshot,
                    (&bytes, &words),
                    true,
                    Some(oldest),
                    &summary(stats)?,
                    compacted(stats).as_ref(),
                )
                .await?
            {
                Appended::NotDerived => {}
                // The history was trimmed since the snapshot was loaded: the summary counts
                // what the stored log holds.
                Appended::Trimmed => {
                    let stats = self.stored_stats(id).await?;
                    let outcome = self
                        .try_append(
                            snapshot,
                            (&bytes, &words),
                            true,
                            Some(stats.oldest_revision),
                            &summary(stats.after(kind))?,
                            compacted(stats.after(kind)).as_ref(),
                        )
                        .await?;
                    return self.appended(snapshot, outcome, summary).await;
                }
                outcome => return self.appended(snapshot, outcome, summary).await,
            }
        }
        let stats = self.stored_stats(id).await?.after(EntryKind::Edit);
        let (entry, words) = stored_form(&snapshot.entry_replacing_all(revision)?, id)?;
        let outcome = self
            .try_append(
                snapshot,
                (&entry, &words),
                false,
                None,
                &summary(stats)?,
                None,
            )
            .await?;
        self.appended(snapshot, outcome, summary).await
    }

    async fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        self.load_head(id).await
    }

    async fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        self.with_log(id, |log| log.state_at(Some(revision))).await
    }

    async fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        self.with_log(id, |log| log.revisions()).await
    }

    async fn history(&self, id: &SessionId) -> Result<History> {
        self.with_log(id, |log| log.history().map(|(history, _)| history))
            .await
    }

    async fn list(&self) -> Result<SessionList> {
        self.list_scoped(ListScope::Active).await
    }

    fn indexed_metadata(&self) -> IndexedMetadata {
        self.indexed.clone()
    }

    async fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        let (sessions, unreadable) = self
            .select_summaries(scope, None, None)
            .await?
            .into_iter()
            .map(|(_, summary)| summary)
            .partition::<Vec<_>, _>(Result::is_ok);
        Ok(SessionList::new(
            sessions.into_iter().filter_map(Result::ok).collect(),
            unreadable.into_iter().filter_map(Result::err).collect(),
        ))
    }

    /// Reads one page from the listing index (keyset pagination: the cost of a page does
    /// not grow with the store). Rows whose summary cannot be read are reported on the
    /// page they fall in.
    async fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        check_page_limit(limit)?;
        let mut rows = self
            .select_summaries(ListScope::Active, after, Some(limit.saturating_add(1)))
            .await?;
        // Whether there is more is decided by rows, readable or not: an unreadable one
        // still takes its place in the page.
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.iter().rev().find_map(|(place, _)| place.clone())
        } else {
            None
        };
        let (mut sessions, mut unreadable) = (Vec::new(), Vec::new());
        for (_, summary) in rows {
            match summary {
                Ok(summary) => sessions.push(summary),
                Err(e) => unreadable.push(e),
            }
        }
        Ok(SessionPage {
            sessions,
            unreadable,
            next,
        })
    }

    async fn delete(&self, id: &SessionId) -> Result<()> {
        let key = id.to_string();
        let query = self.with_client(move |client, schema| async move {
            client
                .execute(
                    &prepared(
                        &client,
                        &format!("DELETE FROM {schema}.sessions WHERE id = $1"),
                    )
                    .await?,
                    &[&key],
                )
                .await
                .map_err(|e| backend("delete a session", e))
        });
        let deleted = query.await?;
        if deleted == 0 {
            return Err(Error::NotFound { id: id.clone() });
        }
        Ok(())
    }

    async fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        let key = id.to_string();
        let query = self.with_client(move |client, schema| async move {
            client
                .execute(
                    &prepared(
                        &client,
                        &format!("UPDATE {schema}.sessions SET archived = $2 WHERE id = $1"),
                    )
                    .await?,
                    &[&key, &archived],
                )
                .await
                .map_err(|e| backend("archive a session", e))
        });
        let updated = query.await?;
        if updated == 0 {
            return Err(Error::NotFound { id: id.clone() });
        }
        Ok(())
    }

    async fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        let key = listed.id.to_string();
        let revision = revision_column(&listed.id, listed.revision)?;
        let created = nanos(&listed.id, listed.created_at)?;
        let archived = listed.archived;
        let query = self.with_client(move |client, schema| async move {
            let deleted = client
                .execute(
                    &prepared(
                        &client,
                        &format!(
                            "DELETE FROM {schema}.sessions
                         WHERE id = $1 AND revision = $2 AND created_ns = $3 AND archived = $4"
                        ),
                    )
                    .await?,
                    &[&key, &revision, &created, &archived],
                )
                .await
                .map_err(|e| backend("delete a session", e))?;
            if deleted == 1 {
                return Ok(None);
            }
            let row = client
                .query_opt(
                    &prepared(
                        &client,
                        &format!(
                        "SELECT revision, created_ns, archived FROM {schema}.sessions WHERE id = $1"
                    ),
                    )
                    .await?,
                    &[&key],
                )
                .await
                .map_err(|e| backend("read a session's revision", e))?;
            Ok(Some(row.map(|row| {
                (
                    row.get::<_, i64>(0),
                    row.get::<_, i64>(1),
                    row.get::<_, bool>(2),
                )
            })))
        });
        let outcome = query.await?;
        let Some(stored) = outcome else {
            return Ok(());
        };
        let stored = stored.map(|(revision, created_ns, archived)| StoredVersion {
            revision: Revision::from_u64(u64::try_from(revision).unwrap_or(0)),
            created_at: DateTime::from_timestamp_nanos(created_ns),
            archived,
        });
        check_unchanged(listed, stored)?;
        // It changed and changed back between the two statements.
        Err(Error::Changed {
            id: listed.id.clone(),
            change: "it was changed by another writer while it was being deleted".to_owned(),
        })
    }

    /// Cuts the log client side, then writes it back in one transaction: the row's
    /// snapshot becomes the new checkpoint (its revision unchanged), the entries are
    /// written again (restores of dropped revisions written out, records of tables'
    /// version 2 as entries), and the summary counts what the log now holds. The
    /// transaction holds only while the row is still at the revision read; a save landing
    /// meanwhile makes it read again.
    // Read, cut, then one transaction of three statements with their parameters, retried
    // as a whole: splitting it would scatter one compare-and-swap.
    #[allow(clippy::too_many_lines)]
    async fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        for _ in 0..3 {
            let cut = self
                .with_log(id, |log| {
                    let read = log.last_revision();
                    if oldest == log.checkpoint.revision() {
                        return Ok(None);
                    }
                    let trimmed = log.trimmed(oldest)?;
                    let head = trimmed.head()?;
                    Ok(Some((read, trimmed, head)))
                })
                .await?;
            let Some((read, trimmed, head)) = cut else {
                return Ok(0);
            };
            let summary = columns::summary_json(&self.indexed.summary_of(&head), &self.indexed)?;
            let snapshot = trimmed.checkpoint.to_json_with_revision(oldest)?;
            let checkpoint_words = search::words_of(trimmed.checkpoint.transcript());
            let (revisions, records, words) = entry_rows(&trimmed.entries, id)?;
            let journal_bytes = to_i64(records.iter().map(|r| r.len() as u64).sum());
            let read = revision_column(id, read)?;
            let key = id.to_string();
            let query = self.with_client(move |mut client, schema| async move {
                let update = prepared(
                    &client,
                    &format!(
                        "UPDATE {schema}.sessions
                         SET snapshot = $2, journal_bytes = $3, summary = $4, {clear_view}
                         WHERE id = $1 AND revision = $5",
                        clear_view = view::CLEAR
                    ),
                )
                .await?;
                let clear = prepared(
                    &client,
                    &format!("DELETE FROM {schema}.entries WHERE session_id = $1"),
                )
                .await?;
                let insert = prepared(
                    &client,
                    &format!(
                        "INSERT INTO {schema}.entries (session_id, revision, record, format, words)
                         SELECT $1, r, e, $4, w
                         FROM unnest($2::bigint[], $3::bytea[], $5::text[]) AS t (r, e, w)"
                    ),
                )
                .await?;
                let set_words = prepared(&client, &search::set_checkpoint_words(&schema)).await?;
                let tx = client
                    .transaction()
                    .await
                    .map_err(|e| backend("start a trim", e))?;
                let moved = tx
                    .execute(&update, &[&key, &snapshot, &journal_bytes, &summary, &read])
                    .await
                    .map_err(|e| backend("trim a session's history", e))?;
                if moved != 1 {
                    tx.rollback()
                        .await
                        .map_err(|e| backend("roll back a trim", e))?;
                    return Ok(false);
                }
                tx.execute(&clear, &[&key])
                    .await
                    .map_err(|e| backend("drop a session's entries", e))?;
                tx.execute(&set_words, &[&key, &checkpoint_words])
                    .await
                    .map_err(|e| backend("record the checkpoint's words", e))?;
                tx.execute(
                    &insert,
                    &[&key, &revisions, &records, &ENTRY_FORMAT, &words],
                )
                .await
                .map_err(|e| backend("write a session's entries", e))?;
                tx.commit().await.map_err(|e| backend("commit a trim", e))?;
                Ok(true)
            });
            let written = query.await?;
            if written {
                return Ok(trimmed.dropped);
            }
        }
        Err(Error::Backend {
            operation: "trim a session's history".to_owned(),
            source: format!(
                "session {id} kept being saved while its history was trimmed; try again"
            )
            .into(),
        })
    }

    async fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        let key = id.to_string();
        let query = self.with_client(move |client, schema| async move {
            client
                .query_opt(
                    &prepared(
                        &client,
                        &format!(
                            "SELECT octet_length(snapshot)::bigint + octet_length(summary)::bigint
                                + journal_bytes + COALESCE(octet_length(view_state), 0)::bigint
                         FROM {schema}.sessions WHERE id = $1"
                        ),
                    )
                    .await?,
                    &[&key],
                )
                .await
                .map_err(|e| backend("measure a session", e))
        });
        let size = query.await?;
        let row = size.ok_or_else(|| Error::NotFound { id: id.clone() })?;
        Ok(Some(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)))
    }

    async fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        self.acquire(id, request).await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.renew(lease, ttl).await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.release(lease).await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        self.live_leases().await
    }

    async fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        self.search_indexed(query, filter, limit, after).await
    }
}

/// The synchronous face: each call is the async operation, spawned onto the store's
/// runtime (its own, or the one [`PostgresStoreBuilder::connect_async`] was called in) and
/// waited for.
impl SessionStore for PostgresSessionStore {
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        let snapshot = snapshot.clone();
        telemetry::store_op("save", "postgres", Some(snapshot.id()))
            .run(|| self.run(|s| async move { s.save(&snapshot).await }))
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        let id = id.clone();
        telemetry::store_op("load", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.load(&id).await }))
    }

    fn list(&self) -> Result<SessionList> {
        telemetry::store_op("list", "postgres", None)
            .run(|| self.run(|s| async move { s.list().await }))
    }

    /// Reads one page from the listing index (keyset pagination: the cost of a page does
    /// not grow with the store). Rows whose summary cannot be read are reported on the
    /// page they fall in.
    fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        let after = after.cloned();
        telemetry::store_op("list_page", "postgres", None)
            .run(|| self.run(|s| async move { s.list_page(limit, after.as_ref()).await }))
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        let id = id.clone();
        telemetry::store_op("delete", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.delete(&id).await }))
    }

    fn indexed_metadata(&self) -> IndexedMetadata {
        self.inner.indexed.clone()
    }

    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        telemetry::store_op("list_scoped", "postgres", None)
            .run(|| self.run(|s| async move { s.list_scoped(scope).await }))
    }

    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        let id = id.clone();
        telemetry::store_op("set_archived", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.set_archived(&id, archived).await }))
    }

    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        let listed = listed.clone();
        telemetry::store_op("delete_if_unchanged", "postgres", Some(&listed.id))
            .run(|| self.run(|s| async move { s.delete_if_unchanged(&listed).await }))
    }

    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        let id = id.clone();
        telemetry::store_op("stored_bytes", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.stored_bytes(&id).await }))
    }

    fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        let id = id.clone();
        telemetry::store_op("load_at", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.load_at(&id, revision).await }))
    }

    fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        let id = id.clone();
        telemetry::store_op("revisions", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.revisions(&id).await }))
    }

    fn history(&self, id: &SessionId) -> Result<History> {
        let id = id.clone();
        telemetry::store_op("history", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.history(&id).await }))
    }

    fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        let id = id.clone();
        telemetry::store_op("restore", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.restore(&id, revision).await }))
    }

    fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        let id = id.clone();
        telemetry::store_op("trim_history", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.trim_history(&id, oldest).await }))
    }

    /// Leases expire by the server's clock (`clock_timestamp()`), never a client's: a
    /// killed holder's lease ends when its time to live has passed on the server, so a
    /// holder should renew well before (the harness's keeper renews every third of it).
    /// Every lease change locks the session's row, and a save checks the lease in the
    /// same statement as its revision.
    fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        let id = id.clone();
        let request = request.clone();
        telemetry::store_op("acquire_lease", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.acquire(&id, &request).await }))
    }

    fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let id = lease.session.clone();
        let lease = lease.clone();
        telemetry::store_op("renew_lease", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.renew(&lease, ttl).await }))
    }

    fn release_lease(&self, lease: &Lease) -> Result<()> {
        let id = lease.session.clone();
        let lease = lease.clone();
        telemetry::store_op("release_lease", "postgres", Some(&id))
            .run(|| self.run(|s| async move { s.release(&lease).await }))
    }

    fn leases(&self) -> Result<Vec<Lease>> {
        telemetry::store_op("leases", "postgres", None)
            .run(|| self.run(|s| async move { s.live_leases().await }))
    }

    /// A full-text index (GIN, `to_tsvector('simple', …)` over each row's words) names
    /// the sessions that may match; only their histories are read. A search of metadata
    /// values reads every session's.
    fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        let (query, filter, after) = (query.clone(), filter.clone(), after.cloned());
        telemetry::store_op("search", "postgres", None).run(|| {
            self.run(|s| async move {
                Box::pin(s.search_indexed(&query, &filter, limit, after.as_ref())).await
            })
        })
    }

    /// The store itself: its async calls await the pool directly (see
    /// [`PostgresStoreBuilder::connect_async`]).
    fn into_async(self: Arc<Self>) -> Arc<dyn AsyncSessionStore> {
        self
    }
}

/// The async face: the same operations, on the caller's task for a store made by
/// [`PostgresStoreBuilder::connect_async`], spawned onto the store's runtime and awaited
/// for one made by [`PostgresStoreBuilder::connect`].
#[async_trait]
impl AsyncSessionStore for PostgresSessionStore {
    async fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        let snapshot = snapshot.clone();
        telemetry::store_op("save", "postgres", Some(snapshot.id()))
            .run_async(self.call(|s| async move { s.save(&snapshot).await }))
            .await
    }

    async fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        let id = id.clone();
        telemetry::store_op("load", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.load(&id).await }))
            .await
    }

    async fn list(&self) -> Result<SessionList> {
        telemetry::store_op("list", "postgres", None)
            .run_async(self.call(|s| async move { s.list().await }))
            .await
    }

    async fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        let after = after.cloned();
        telemetry::store_op("list_page", "postgres", None)
            .run_async(self.call(|s| async move { s.list_page(limit, after.as_ref()).await }))
            .await
    }

    async fn delete(&self, id: &SessionId) -> Result<()> {
        let id = id.clone();
        telemetry::store_op("delete", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.delete(&id).await }))
            .await
    }

    fn indexed_metadata(&self) -> IndexedMetadata {
        self.inner.indexed.clone()
    }

    async fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        telemetry::store_op("list_scoped", "postgres", None)
            .run_async(self.call(|s| async move { s.list_scoped(scope).await }))
            .await
    }

    async fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        let id = id.clone();
        telemetry::store_op("set_archived", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.set_archived(&id, archived).await }))
            .await
    }

    async fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        let listed = listed.clone();
        telemetry::store_op("delete_if_unchanged", "postgres", Some(&listed.id))
            .run_async(self.call(|s| async move { s.delete_if_unchanged(&listed).await }))
            .await
    }

    async fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        let id = id.clone();
        telemetry::store_op("stored_bytes", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.stored_bytes(&id).await }))
            .await
    }

    async fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        let id = id.clone();
        telemetry::store_op("load_at", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.load_at(&id, revision).await }))
            .await
    }

    async fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        let id = id.clone();
        telemetry::store_op("revisions", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.revisions(&id).await }))
            .await
    }

    async fn history(&self, id: &SessionId) -> Result<History> {
        let id = id.clone();
        telemetry::store_op("history", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.history(&id).await }))
            .await
    }

    async fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        let id = id.clone();
        telemetry::store_op("restore", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.restore(&id, revision).await }))
            .await
    }

    async fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        let id = id.clone();
        telemetry::store_op("trim_history", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.trim_history(&id, oldest).await }))
            .await
    }

    async fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        let id = id.clone();
        let request = request.clone();
        telemetry::store_op("acquire_lease", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.acquire(&id, &request).await }))
            .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let id = lease.session.clone();
        let lease = lease.clone();
        telemetry::store_op("renew_lease", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.renew(&lease, ttl).await }))
            .await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let id = lease.session.clone();
        let lease = lease.clone();
        telemetry::store_op("release_lease", "postgres", Some(&id))
            .run_async(self.call(|s| async move { s.release(&lease).await }))
            .await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        telemetry::store_op("leases", "postgres", None)
            .run_async(self.call(|s| async move { s.live_leases().await }))
            .await
    }

    async fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        let (query, filter, after) = (query.clone(), filter.clone(), after.cloned());
        telemetry::store_op("search", "postgres", None)
            .run_async(self.call(|s| async move {
                Box::pin(s.search_indexed(&query, &filter, limit, after.as_ref())).await
            }))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_that_need_quoting_or_could_inject_are_refused() {
        for good in ["agent_session", "_x", "tenant_42", &"a".repeat(63)] {
            assert!(check_schema_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1abc",
            "Tenant",
            "a-b",
            "a;drop table x",
            "pg_catalog",
            "a b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(check_schema_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_malformed_connection_string_is_an_invalid_argument() {
        let error = PostgresSessionStore::connect("host=127.0.0.1 port=notaport").unwrap_err();
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
    }

    #[test]
    fn a_server_that_accepts_but_never_answers_fails_the_call_after_the_timeout() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let store = PostgresSessionStore::builder()
            .connect_timeout(std::time::Duration::from_millis(300))
            .connect(&format!("host=127.0.0.1 port={port} user=x dbname=x"))
            .unwrap();
        // Before the timeouts, this call never returned.
        let error = SessionStore::list(&store).unwrap_err();
        assert!(matches!(error, Error::Backend { .. }), "{error:?}");
        assert!(error.to_string().contains("reachable"), "{error}");
        drop(silent);
    }

    #[test]
    fn nanosecond_times_survive_the_round_trip_through_the_columns() {
        let id = SessionId::parse("t").unwrap();
        let at = DateTime::parse_from_rfc3339("2026-11-29T10:00:00.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(DateTime::from_timestamp_nanos(nanos(&id, at).unwrap()), at);
    }
}
