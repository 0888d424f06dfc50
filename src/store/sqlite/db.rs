//! Connections to the database and the two kinds of transaction every operation runs
//! in: a read (a consistent snapshot of the database, never waiting for writers, as WAL
//! allows) and a write (`BEGIN IMMEDIATE`: the database's one write lock, taken before
//! anything is read, so the compare-and-swap and what it writes are one step). Also the
//! mapping of SQLite's errors to the crate's: a busy database is [`Error::Busy`] after
//! the busy timeout, damage is a corrupt-kind error naming the database.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior};

use super::files;
use crate::error::{Error, Location, Result};
use crate::store::Durability;

/// How many idle connections the store keeps for the next calls.
const IDLE_CONNECTIONS: usize = 8;

/// The database: where it is, how it is opened, and the idle connections.
#[derive(Debug)]
pub(super) struct Db {
    pub(super) path: PathBuf,
    /// Device and inode of the database file checked at open: a connection opened later
    /// must open that same file.
    identity: (u64, u64),
    durability: Durability,
    pub(super) busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
}

impl Db {
    /// The database at `path` (prepared by [`files::prepare`]), with one connection
    /// opened to check that it is one.
    pub(super) fn new(
        path: PathBuf,
        identity: (u64, u64),
        durability: Durability,
        busy_timeout: Duration,
    ) -> Result<Db> {
        let db = Db {
            path,
            identity,
            durability,
            busy_timeout,
            idle: Mutex::new(Vec::new()),
        };
        let first = db.connect()?;
        db.idle_connections().push(first);
        Ok(db)
    }

    /// Where the database is, for error messages.
    pub(super) fn location(&self) -> Location {
        Location::Stored(format!("SQLite database {}", self.path.display()))
    }

    fn idle_connections(&self) -> MutexGuard<'_, Vec<Connection>> {
        // A connection list is valid whatever a panicking thread did to it.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new connection, configured: WAL, `synchronous` from the durability, the busy
    /// timeout, and SQLite's defensive mode (no writes to its own schema tables, no
    /// trusted functions in the schema).
    fn connect(&self) -> Result<Connection> {
        // The database file was made by the store (or checked at open); the name must
        // still be that file, not a link or another file put in its place.
        if files::identity(&self.path)? != self.identity {
            return Err(Error::Insecure {
                path: self.path.clone(),
                reason:
                    "the database file was replaced after the store was opened; reopen the store",
            });
        }
        // No CREATE: the file exists, made 0600 by the store. NOFOLLOW: never a link.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW
            | OpenFlags::SQLITE_OPEN_EXRESCODE;
        let conn = Connection::open_with_flags(&self.path, flags)
            .map_err(|e| self.fail("open the database", e))?;
        conn.busy_timeout(self.busy_timeout)
            .map_err(|e| self.fail("set the busy timeout", e))?;
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)
            .map_err(|e| self.fail("configure the connection", e))?;
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA,
            false,
        )
        .map_err(|e| self.fail("configure the connection", e))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(|e| self.fail("switch the database to WAL mode", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Backend {
                operation: format!(
                    "switch the SQLite database {} to WAL mode",
                    self.path.display()
                ),
                source: format!("SQLite kept journal mode {mode:?}").into(),
            });
        }
        // See the type docs of SqliteSessionStore ("Durability") for the mapping.
        let synchronous = match self.durability {
            Durability::Buffered => "NORMAL",
            _ => "FULL",
        };
        conn.pragma_update(None, "synchronous", synchronous)
            .map_err(|e| self.fail("set the database's synchronous mode", e))?;
        Ok(conn)
    }

    /// Runs `work` with a connection of the store's (an idle one, or a new one), and
    /// keeps the connection for later unless `work` panicked.
    fn with_connection<T>(&self, work: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let idle = self.idle_connections().pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => self.connect()?,
        };
        let outcome = work(&mut conn);
        // A connection left inside a transaction (a failed rollback) is not reused.
        if conn.is_autocommit() {
            let mut idle = self.idle_connections();
            if idle.len() < IDLE_CONNECTIONS {
                idle.push(conn);
            }
        }
        outcome
    }

    /// Runs `work` in a read transaction: everything it reads is one consistent state of
    /// the database, and it never waits for a writer.
    pub(super) fn read<T>(&self, work: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        self.with_connection(|conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Deferred)
                .map_err(|e| self.fail("start reading", e))?;
            let value = work(&tx)?;
            tx.finish().map_err(|e| self.fail("finish reading", e))?;
            Ok(value)
        })
    }

    /// Runs `work` in a write transaction (`BEGIN IMMEDIATE`: the database's write lock,
    /// waited for at most the busy timeout) and commits what it wrote if it returns `Ok`;
    /// on an error nothing it wrote is kept.
    pub(super) fn write<T>(&self, work: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        self.with_connection(|conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.fail("start writing", e))?;
            let value = work(&tx)?;
            tx.commit().map_err(|e| self.fail("commit", e))?;
            Ok(value)
        })
    }

    /// The crate's error for SQLite's error `e`, met doing `operation`.
    pub(super) fn fail(&self, operation: &str, e: rusqlite::Error) -> Error {
        sql_error(&self.path, self.busy_timeout, operation, e)
    }
}

/// The crate's error for SQLite's error `e`: [`Error::Busy`] for a database another
/// connection kept locked past the busy timeout, a corrupt-kind error for a damaged
/// file or one that is no database, [`Error::Backend`] naming the database otherwise.
pub(super) fn sql_error(
    path: &Path,
    busy_timeout: Duration,
    operation: &str,
    e: rusqlite::Error,
) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Busy {
            location: Location::Stored(format!(
                "SQLite database {} (its write lock, held by another connection)",
                path.display()
            )),
            waited: busy_timeout,
        },
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => Error::inconsistent(
            format!(
                "SQLite could not {operation}: {e}; the file is damaged or is not a database of this store (restore it from a backup, or move it away to start afresh)"
            ),
        )
        .at(&Location::Stored(format!("SQLite database {}", path.display()))),
        _ => Error::Backend {
            operation: format!("{operation} in the SQLite database {}", path.display()),
            source: Box::new(e),
        },
    }
}
