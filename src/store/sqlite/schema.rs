//! The database's tables (`docs/FORMAT.md`, "SQLite store layout"), their version, and
//! the migration made at every open.

use rusqlite::{OptionalExtension, Transaction};

use super::db::Db;
use super::search;
use super::view;
use crate::error::{Error, Result};

/// The version of the tables this release makes and reads, recorded in `store_version`:
/// 1 the sessions, their logs and leases; 2 adds search (`search_rows`, `search_words`,
/// `unindexed`); 3 adds `search_pending` (words batched into the index); 4 adds `views`
/// (compacted sessions' view checkpoints).
pub(super) const TABLES_VERSION: i64 = 4;

/// The tables of version 1. Every table is `STRICT`, so a value of the wrong type is
/// refused when written rather than met when read. The checkpoint's bytes have a table
/// of their own: SQLite rewrites a whole row when any column changes, so an append (which
/// updates the session's row) must not rewrite a checkpoint of megabytes, and a listing
/// reads small rows.
const CREATE_TABLES: &str = "
CREATE TABLE IF NOT EXISTS store_version (
    version INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT NOT NULL PRIMARY KEY,
    revision INTEGER NOT NULL CHECK (revision > 0),
    created_ns INTEGER NOT NULL,
    updated_ns INTEGER NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1)),
    state_counts TEXT NOT NULL,
    checkpoint_revision INTEGER NOT NULL CHECK (checkpoint_revision > 0),
    entry_bytes INTEGER NOT NULL DEFAULT 0,
    shares_parent TEXT,
    shares_revision INTEGER,
    summary TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS checkpoints (
    session_id TEXT NOT NULL PRIMARY KEY,
    checkpoint BLOB NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS sessions_listing
    ON sessions (archived, updated_ns DESC, id DESC);
CREATE INDEX IF NOT EXISTS sessions_sharing
    ON sessions (shares_parent) WHERE shares_parent IS NOT NULL;
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    entry BLOB NOT NULL,
    PRIMARY KEY (session_id, revision)
) STRICT;
CREATE TABLE IF NOT EXISTS leases (
    session_id TEXT NOT NULL PRIMARY KEY,
    epoch INTEGER NOT NULL CHECK (epoch > 0),
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    label TEXT NOT NULL,
    acquired_ns INTEGER NOT NULL,
    expires_ns INTEGER NOT NULL,
    released INTEGER NOT NULL CHECK (released IN (0, 1))
) STRICT;
";

/// Creates the tables if the database has none, brings tables of an older version up to
/// this one, and refuses tables a newer release made. One write transaction, so stores
/// opened at once take turns.
///
/// # Errors
///
/// [`Error::UnsupportedSchemaVersion`] for tables of a newer version; a corrupt-kind
/// error for a file that is not a database; [`Error::Busy`] if another connection keeps
/// the database locked past the busy timeout.
pub(super) fn migrate(db: &Db) -> Result<()> {
    db.write(|tx| {
        let from = match stored_version(db, tx)? {
            Some(version) if version == TABLES_VERSION => return Ok(()),
            Some(version) if !(1..=TABLES_VERSION).contains(&version) => {
                return Err(Error::UnsupportedSchemaVersion {
                    location: db.location(),
                    found: u64::try_from(version).unwrap_or(0),
                    oldest: 1,
                    supported: u32::try_from(TABLES_VERSION).unwrap_or(0),
                });
            }
            Some(version) => version,
            None => {
                tx.execute_batch(CREATE_TABLES)
                    .map_err(|e| db.fail("create the store's tables", e))?;
                0
            }
        };
        if from < 2 {
            // Version 2: search. The sessions already stored have no words recorded:
            // they are listed as unindexed (always read by a search) until their log is
            // written whole again, so the upgrade reads no session.
            tx.execute_batch(search::CREATE_TABLES)
                .map_err(|e| db.fail("create the search tables", e))?;
            tx.execute_batch("INSERT INTO unindexed (session_id) SELECT id FROM sessions")
                .map_err(|e| db.fail("list the sessions saved before search", e))?;
        }
        if from < 3 {
            // Version 3: words wait in `search_pending` before they are indexed. Rows of
            // version 2 are all in the index already.
            tx.execute_batch(search::CREATE_PENDING_TABLE)
                .map_err(|e| db.fail("create the table of pending words", e))?;
        }
        if from < 4 {
            // Version 4: view checkpoints. Sessions compacted before have none until their
            // next compaction; they load from the whole log as before.
            tx.execute_batch(view::CREATE_TABLE)
                .map_err(|e| db.fail("create the table of view checkpoints", e))?;
        }
        tx.execute(
            "INSERT INTO store_version (version) VALUES (?1)",
            [TABLES_VERSION],
        )
        .map_err(|e| db.fail("record the store's version", e))?;
        Ok(())
    })
}

/// The version in `store_version`; `None` for a database without the store's tables.
fn stored_version(db: &Db, tx: &Transaction<'_>) -> Result<Option<i64>> {
    let has_table: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'store_version')",
            [],
            |row| row.get(0),
        )
        .map_err(|e| db.fail("read the store's version", e))?;
    if !has_table {
        let other_tables: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'sessions')",
                [],
                |row| row.get(0),
            )
            .map_err(|e| db.fail("read the database's tables", e))?;
        if other_tables {
            return Err(Error::inconsistent(
                "the database has a `sessions` table but no `store_version`: it was not made by SqliteSessionStore; give the store a database of its own",
            )
            .at(&db.location()));
        }
        return Ok(None);
    }
    tx.query_row("SELECT max(version) FROM store_version", [], |row| {
        row.get::<_, Option<i64>>(0)
    })
    .optional()
    .map(Option::flatten)
    .map_err(|e| db.fail("read the store's version", e))
}
