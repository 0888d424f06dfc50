//! Helpers for the tests of `PostgresSessionStore` (feature `postgres`): the server from
//! `AGENT_SESSION_POSTGRES_URL`, a fresh schema per store so that test runs never see each
//! other's sessions, and direct SQL for what the store's API cannot do (dropping the
//! schemas afterwards, damaging a row, reading the stored bytes, asking the planner).
//!
//! Direct SQL goes through `tokio-postgres`, the client the store itself depends on under
//! the feature (no dependency of its own), each call on a connection of its own in a thread
//! of its own, so it works from plain tests and from inside a tokio runtime alike.
//!
//! Included by `tests/store_contract.rs` and `tests/postgres.rs` with `#[path]`.

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use agent_session::{PostgresSessionStore, PostgresStoreBuilder};

/// The environment variable naming the test server (a libpq `key=value` string).
pub const URL_ENV: &str = "AGENT_SESSION_POSTGRES_URL";

/// Why a PostgreSQL test cannot run without [`URL_ENV`]: the message the tests fail with.
pub const NO_SERVER: &str =
    "the PostgreSQL store tests need a server: run scripts/test, which starts a server, \
     or set AGENT_SESSION_POSTGRES_URL to a libpq connection string \
     (for example \"host=127.0.0.1 port=5432 user=postgres dbname=postgres\")";

/// The test server's connection string, from [`URL_ENV`]. With the `postgres` feature on,
/// a missing server is a failure, not a skip: panics with [`NO_SERVER`].
pub fn url() -> String {
    match std::env::var(URL_ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!("{NO_SERVER}"),
    }
}

/// A schema name no other test, test binary or earlier run uses:
/// `t_<pid>_<seconds since the epoch at the first call>_<counter>`.
pub fn unique_schema() -> String {
    static STARTED: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let started = *STARTED.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    });
    format!(
        "t_{}_{started}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The fresh schemas one test made; dropped (with everything in them) when this is
/// dropped, unless the test is failing, so that what it left can be looked at.
#[derive(Debug, Default)]
pub struct Schemas {
    names: Mutex<Vec<String>>,
}

impl Schemas {
    pub fn new() -> Self {
        Self::default()
    }

    /// A new schema name, recorded for dropping. Nothing is created.
    pub fn name(&self) -> String {
        let name = unique_schema();
        self.names.lock().expect("names").push(name.clone());
        name
    }

    /// A store on a fresh schema, migrated, with the default settings.
    pub fn store(&self) -> PostgresSessionStore {
        self.store_with(&PostgresSessionStore::builder())
    }

    /// A store on a fresh schema, migrated, with `settings` (whose schema is replaced).
    pub fn store_with(&self, settings: &PostgresStoreBuilder) -> PostgresSessionStore {
        let store = settings
            .clone()
            .schema(self.name())
            .connect(&url())
            .expect("connect to the test server");
        store.migrate().expect("migrate a fresh schema");
        store
    }
}

/// A store on schema `schema` with the default settings, not migrated.
pub fn connect(schema: &str) -> PostgresSessionStore {
    PostgresSessionStore::builder()
        .schema(schema)
        .connect(&url())
        .expect("connect to the test server")
}

impl Drop for Schemas {
    fn drop(&mut self) {
        let names = std::mem::take(
            &mut *self
                .names
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if names.is_empty() {
            return;
        }
        if std::thread::panicking() {
            eprintln!("kept the schemas of the failing test: {}", names.join(", "));
            return;
        }
        for chunk in names.chunks(50) {
            let quoted: Vec<String> = chunk.iter().map(|name| format!("\"{name}\"")).collect();
            let statement = format!("DROP SCHEMA IF EXISTS {} CASCADE", quoted.join(", "));
            if let Err(e) = try_execute(&statement) {
                eprintln!("could not drop the test schemas ({e}): {statement}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Direct SQL.
// ---------------------------------------------------------------------------------------

type ClientFuture<'c, T> =
    Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + Send + 'c>>;

/// Runs `work` on a new connection to the test server, in a thread of its own with a
/// runtime of its own (so it may be called from inside another runtime).
fn with_client<T, F>(work: F) -> Result<T, String>
where
    T: Send,
    F: for<'c> FnOnce(&'c tokio_postgres::Client) -> ClientFuture<'c, T> + Send,
{
    let url = url();
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("start a runtime: {e}"))?;
                runtime.block_on(async move {
                    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                        .await
                        .map_err(|e| format!("connect to {url:?}: {e}"))?;
                    let driver = tokio::spawn(connection);
                    let result = work(&client).await.map_err(|e| match e.as_db_error() {
                        Some(db) => format!("{e}: {}", db.message()),
                        None => e.to_string(),
                    });
                    drop(client);
                    let _ = driver.await;
                    result
                })
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Runs `statements` (one or more, separated by `;`), reporting failure.
pub fn try_execute(statements: &str) -> Result<(), String> {
    let statements = statements.to_owned();
    with_client(move |client| Box::pin(async move { client.batch_execute(&statements).await }))
}

/// Runs `statements` (one or more, separated by `;`).
pub fn execute(statements: &str) {
    try_execute(statements).unwrap_or_else(|e| panic!("{statements}: {e}"));
}

/// Runs `statement` with text parameters and returns how many rows it changed.
pub fn execute_with(statement: &str, params: &[&str]) -> u64 {
    let owned: Vec<String> = params.iter().map(|p| (*p).to_owned()).collect();
    let text = statement.to_owned();
    with_client(move |client| {
        Box::pin(async move {
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = owned
                .iter()
                .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            client.execute(&text, &params).await
        })
    })
    .unwrap_or_else(|e| panic!("{statement}: {e}"))
}

/// The first column of every row `query` returns, as text (`query` must give a text
/// column: cast it with `::text` if needed).
pub fn query_text(query: &str) -> Vec<String> {
    query_text_after("", query)
}

/// [`query_text`], on a connection that first ran `setup` (for example `SET` commands).
pub fn query_text_after(setup: &str, query: &str) -> Vec<String> {
    let (setup, text) = (setup.to_owned(), query.to_owned());
    with_client(move |client| {
        Box::pin(async move {
            if !setup.is_empty() {
                client.batch_execute(&setup).await?;
            }
            let rows = client.query(&text, &[]).await?;
            Ok(rows.iter().map(|row| row.get::<_, String>(0)).collect())
        })
    })
    .unwrap_or_else(|e| panic!("{query}: {e}"))
}

/// The `snapshot` column of session `id` in `schema`, byte for byte.
pub fn stored_snapshot(schema: &str, id: &str) -> Option<Vec<u8>> {
    let text = format!("SELECT snapshot FROM {schema}.sessions WHERE id = $1");
    let key = id.to_owned();
    with_client(move |client| {
        Box::pin(async move {
            let row = client.query_opt(&text, &[&key]).await?;
            Ok(row.map(|row| row.get::<_, Vec<u8>>(0)))
        })
    })
    .unwrap_or_else(|e| panic!("read the stored snapshot of {id}: {e}"))
}

/// Overwrites the `snapshot` column of session `id` in `schema` with `bytes`, as damage
/// or a foreign writer would. Panics unless exactly one row changed.
pub fn overwrite_snapshot(schema: &str, id: &str, bytes: &[u8]) {
    let text = format!("UPDATE {schema}.sessions SET snapshot = $2 WHERE id = $1");
    let (key, bytes) = (id.to_owned(), bytes.to_vec());
    let changed = with_client(move |client| {
        Box::pin(async move { client.execute(&text, &[&key, &bytes]).await })
    })
    .unwrap_or_else(|e| panic!("overwrite the snapshot of {id}: {e}"));
    assert_eq!(changed, 1, "no row for session {id} in {schema}");
}

/// Overwrites the `summary` column (the listing's fields) of session `id` in `schema`.
pub fn overwrite_summary(schema: &str, id: &str, summary: &str) {
    let changed = execute_with(
        &format!("UPDATE {schema}.sessions SET summary = $2 WHERE id = $1"),
        &[id, summary],
    );
    assert_eq!(changed, 1, "no row for session {id} in {schema}");
}

/// Whether schema `name` exists on the test server.
pub fn schema_exists(name: &str) -> bool {
    let found = query_text(&format!(
        "SELECT nspname::text FROM pg_namespace WHERE nspname = '{name}'"
    ));
    !found.is_empty()
}
