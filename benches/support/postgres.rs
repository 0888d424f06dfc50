//! `PostgresSessionStore` benchmarks (issue 7, feature `postgres`): save, load, one more
//! turn, list and `list_page(50)`, each beside the same operation on `FileSessionStore`
//! measured in the same run, and beside a floor for the database: the same statement the
//! store sends, prepared once, on one `tokio_postgres` connection, with bytes encoded
//! before the run (what the store cannot beat: no encoding, decoding, pool or runtime hop,
//! one round trip).
//!
//! The server is the one `AGENT_SESSION_POSTGRES_URL` names (`scripts/bench-postgres`
//! starts a throw-away one and sets it). Without it the groups print nothing and measure
//! nothing: `main` says once that they were skipped. Each group's cases use a fresh schema
//! named after the run (`asbench_<unix time>_<pid>_<case>`), created with
//! [`PostgresSessionStore::migrate`] when its first case runs and dropped when the run ends.
//!
//! # What is measured (group / function / parameter)
//!
//! - `postgres_save/{file_store,postgres_store}/N`: a full save: a snapshot of N messages
//!   saved as a new session (the session deleted before each save, untimed), as
//!   `save/file_store/N`. `postgres_save/postgres_floor/N`: the store's `INSERT … ON
//!   CONFLICT DO NOTHING` with the same snapshot bytes and summary, prepared, into a copy
//!   of the store's table (same columns, indexes and TOAST compression), the row deleted
//!   before each insert, untimed.
//! - `postgres_load/{file_store,postgres_store}/N`: load (read, decode, validate).
//!   `postgres_load/postgres_floor/N`: `SELECT revision, snapshot` of that row, prepared,
//!   and a `serde_json` parse into the typed mirror (`support/mirror.rs`), as
//!   `load/baseline_read_typed/N` is for files.
//! - `postgres_turn/{file_store,postgres_store}/N`: save of the loaded session of N
//!   messages extended by one turn (`TurnFeeder`: every 16 turns the session is rewound
//!   to its N messages, and every 1,024 it starts over, deleted and saved anew with its N
//!   messages, then `sync(1)` and a pause, untimed, for both stores). Both stores append
//!   the turn: the file store to its journal, PostgreSQL one row of `entries`, in the statement that moves the session row's revision.
//!   `postgres_turn/postgres_floor/N`: that statement (`WITH moved AS (UPDATE sessions …
//!   RETURNING id) INSERT INTO entries …`), prepared, on copies of the two tables, with
//!   the bytes of the entry the store wrote for the same turn.
//! - `postgres_list/{file_store,file_store_fresh,postgres_store}/SxM`: `list()` of S
//!   sessions of M messages (`file_store_fresh`: a file store opened for each listing).
//!   `postgres_list/postgres_floor/SxM`: the listing's rows (`id, summary, archived`,
//!   newest first from the listing index), prepared, without decoding the summaries.
//! - `postgres_list_page/{file_store,postgres_store,postgres_floor}/SxM`: the first page
//!   of 50 (`list_page(50, None)`; the floor: the same query with `LIMIT 51`).
//!
//! N = 10, 1,000 and 10,000 (or the message count of `AGENT_SESSION_BENCH_TRANSCRIPT`);
//! S x M = 100x10 and 1000x10. About 2 minutes on 2 cores, all groups.

use std::cell::{Cell, OnceCell};
use std::future::Future;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent_session::{FileSessionStore, PostgresSessionStore, Revision, SessionStore};
use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use tokio_postgres::{Client, NoTls, Statement};

use super::{
    build_list_store, compact_stored, delete_if_stored, file_transcript, first_saves,
    save_turn_by_turn, snapshot, to_messages, wire_transcript, wire_turn, with_turn, TurnFeeder,
    COMPACTED_VIEW, HEAVY_MESSAGES,
};

/// The variable naming the server: a libpq key-value string or a `postgresql://` URL.
pub const URL_VAR: &str = "AGENT_SESSION_POSTGRES_URL";

/// Message counts of save, load and one more turn.
const SIZES: [usize; 3] = [10, 1_000, 10_000];

/// `(sessions, messages per session)` of the listings.
const LISTS: [(usize, usize); 2] = [(100, 10), (1_000, 10)];

/// Sessions on the page `list_page` reads.
const PAGE: usize = 50;

/// The server named by [`URL_VAR`], if any.
pub fn url() -> Option<String> {
    std::env::var(URL_VAR)
        .ok()
        .filter(|url| !url.trim().is_empty())
}

/// Said once, before the benchmarks run.
pub fn announce() {
    if url().is_none() {
        eprintln!(
            "postgres_* benchmarks skipped: {URL_VAR} is not set \
             (scripts/bench-postgres starts a throw-away server and sets it)"
        );
    }
}

fn sizes() -> Vec<usize> {
    file_transcript().map_or_else(|| SIZES.to_vec(), |file| vec![file.len()])
}

/// A shorter window than the file store's own groups, to keep these about 2 minutes.
fn pace(group: &mut BenchmarkGroup<'_, WallTime>, heavy: bool) {
    if heavy {
        group
            .sampling_mode(SamplingMode::Flat)
            .measurement_time(Duration::from_secs(1));
    } else {
        group
            .sampling_mode(SamplingMode::Auto)
            .measurement_time(Duration::from_secs(2));
    }
}

/// The run's connection for the floors, and the schemas it made.
struct Server {
    url: String,
    run: String,
    runtime: tokio::runtime::Runtime,
    client: Client,
    schemas: Mutex<Vec<String>>,
}

static SERVER: OnceLock<Server> = OnceLock::new();

/// Connects on first use, so a run filtered to other groups never does.
fn server() -> &'static Server {
    SERVER.get_or_init(|| {
        let url = url().unwrap_or_else(|| panic!("{URL_VAR} is not set"));
        // A current-thread runtime: the connection task runs on the bench thread while it
        // waits for a query, with no hand-off between threads.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("start a tokio runtime");
        let (client, connection) = runtime
            .block_on(tokio_postgres::connect(&url, NoTls))
            .unwrap_or_else(|e| panic!("{URL_VAR}={url:?}: cannot connect: {e}"));
        runtime.spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("postgres benchmarks: the floor's connection failed: {e}");
            }
        });
        let version: String = runtime
            .block_on(client.query_one("SHOW server_version", &[]))
            .expect("ask the server's version")
            .get(0);
        let settings: Vec<String> = runtime
            .block_on(client.query(
                "SELECT name || '=' || setting FROM pg_settings
                 WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers') ORDER BY name",
                &[],
            ))
            .expect("read the server's settings")
            .iter()
            .map(|row| row.get(0))
            .collect();
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the clock is after 1970")
            .as_secs();
        let run = format!("asbench_{since_epoch}_{}", std::process::id());
        eprintln!(
            "postgres benchmarks: PostgreSQL {version} ({}), schemas {run}_*",
            settings.join(", ")
        );
        Server {
            url,
            run,
            runtime,
            client,
            schemas: Mutex::new(Vec::new()),
        }
    })
}

impl Server {
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    fn prepare(&self, sql: &str) -> Statement {
        self.block_on(self.client.prepare(sql))
            .unwrap_or_else(|e| panic!("prepare {sql}: {e}"))
    }

    /// A store in a fresh schema `<run>_<case>`, migrated, with an empty copy of its
    /// sessions table (`floor`) for the floor's rows.
    fn store(&'static self, case: &str) -> PgCase {
        let schema = format!("{}_{case}", self.run);
        self.schemas
            .lock()
            .expect("schema list")
            .push(schema.clone());
        let store = PostgresSessionStore::builder()
            .schema(schema.as_str())
            .connect(&self.url)
            .expect("make the PostgreSQL store");
        store.migrate().expect("migrate a fresh schema");
        self.block_on(self.client.batch_execute(&format!(
            "CREATE TABLE {schema}.floor (LIKE {schema}.sessions INCLUDING ALL)"
        )))
        .expect("create the floor's table");
        PgCase {
            server: self,
            store,
            schema,
        }
    }
}

/// Drops the schemas this run made (the server may not be a throw-away one).
pub fn drop_schemas() {
    let Some(server) = SERVER.get() else {
        return;
    };
    let schemas = std::mem::take(&mut *server.schemas.lock().expect("schema list"));
    for schema in schemas {
        let dropped = server.block_on(
            server
                .client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")),
        );
        if let Err(e) = dropped {
            eprintln!("postgres benchmarks: could not drop schema {schema}: {e}");
        }
    }
}

/// A store in its own schema.
struct PgCase {
    server: &'static Server,
    store: PostgresSessionStore,
    schema: String,
}

impl PgCase {
    /// Moves the row of session `floor` (the store's own bytes and summary) from the
    /// store's table into the floor's, and returns its columns `revision`, `created_ns`,
    /// `updated_ns`, `summary` and `state_counts`. Its entries, if any, go with the store's
    /// row.
    fn move_floor_row(&self) -> tokio_postgres::Row {
        let schema = &self.schema;
        self.server
            .block_on(self.server.client.query_one(
                &format!(
                    "WITH moved AS (DELETE FROM {schema}.sessions WHERE id = 'floor' RETURNING *)
                     INSERT INTO {schema}.floor SELECT * FROM moved
                     RETURNING revision, created_ns, updated_ns, summary, state_counts"
                ),
                &[],
            ))
            .expect("move the row into the floor's table")
    }

    /// Saves `snapshot` through the store as session `floor`, then moves its row into the
    /// floor's table.
    fn floor_row(&self, snapshot: &agent_session::SessionSnapshot) -> FloorRow {
        assert_eq!(snapshot.id().as_str(), "floor");
        let first = snapshot.clone().with_revision(Revision::NEW);
        self.store.save(&first).expect("save the floor's session");
        let row = self.move_floor_row();
        let schema = &self.schema;
        FloorRow {
            server: self.server,
            insert: self.server.prepare(&format!(
                "INSERT INTO {schema}.floor
                 (id, revision, created_ns, updated_ns, summary, snapshot, journal_bytes,
                  state_counts)
                 VALUES ($1, $2, $3, $4, $5, $6, 0, $7)
                 ON CONFLICT (id) DO NOTHING"
            )),
            delete: self
                .server
                .prepare(&format!("DELETE FROM {schema}.floor WHERE id = $1")),
            select: self.server.prepare(&format!(
                "SELECT revision, snapshot FROM {schema}.floor WHERE id = $1"
            )),
            created_ns: row.get(1),
            updated_ns: row.get(2),
            summary: row.get(3),
            state_counts: row.get(4),
        }
    }

    /// Saves `snapshot` through the store as session `floor` and then one more `turn`,
    /// takes the entry the store appended for it, and moves the session's row into the
    /// floor's table, beside an empty copy of the entries table for the floor's appends.
    fn floor_append(
        &self,
        snapshot: &agent_session::SessionSnapshot,
        turn: &[agent_session::Message],
    ) -> FloorAppend {
        assert_eq!(snapshot.id().as_str(), "floor");
        self.store
            .save(&snapshot.clone().with_revision(Revision::NEW))
            .expect("save the floor's session");
        let loaded = self
            .store
            .load(snapshot.id())
            .expect("load the floor's session");
        let revision = self
            .store
            .save(&with_turn(loaded, turn.to_vec()))
            .expect("save a turn onto the floor's session");
        let schema = &self.schema;
        let entry = self
            .server
            .block_on(self.server.client.query_one(
                &format!(
                    "SELECT record, format FROM {schema}.entries
                     WHERE session_id = 'floor' AND revision = $1"
                ),
                &[&i64::try_from(revision.as_u64()).expect("a bigint revision")],
            ))
            .expect("read the turn's entry");
        self.server
            .block_on(self.server.client.batch_execute(&format!(
                "CREATE TABLE {schema}.floor_entries (
                     LIKE {schema}.entries INCLUDING ALL,
                     FOREIGN KEY (session_id) REFERENCES {schema}.floor (id) ON DELETE CASCADE
                 )"
            )))
            .expect("create the floor's entries table");
        let row = self.move_floor_row();
        FloorAppend {
            server: self.server,
            append: self.server.prepare(&format!(
                "WITH moved AS (
                    UPDATE {schema}.floor
                       SET revision = $2, updated_ns = $3, summary = $4,
                           journal_bytes = journal_bytes + $5::bigint,
                           state_counts = $10
                     WHERE id = $1 AND revision = $6 AND created_ns = $7
                       AND ($8::bigint IS NULL OR updated_ns = $8)
                       AND ($11::text IS NULL OR state_counts = $11)
                       AND journal_bytes + $5::bigint <= $9::bigint
                    RETURNING id)
                 INSERT INTO {schema}.floor_entries (session_id, revision, record, format)
                 SELECT id, $2, $12, $13 FROM moved"
            )),
            revision: Cell::new(row.get(0)),
            created_ns: row.get(1),
            updated_ns: row.get(2),
            summary: row.get(3),
            state_counts: row.get(4),
            record: entry.get(0),
            format: entry.get(1),
        }
    }

    /// `count` sessions of `template`'s messages, saved through the store.
    fn fill(&self, count: usize, template: &[agent_session::Message]) {
        let started = Instant::now();
        for i in 0..count {
            self.store
                .save(&snapshot(&format!("s{i:05}"), template.to_vec()))
                .expect("save");
        }
        eprintln!(
            "postgres list {count}x{}: saved {count} sessions in {:.1} s",
            template.len(),
            started.elapsed().as_secs_f64()
        );
    }
}

/// One row of the floor's table and the store's statements on it, prepared.
struct FloorRow {
    server: &'static Server,
    insert: Statement,
    delete: Statement,
    select: Statement,
    created_ns: i64,
    updated_ns: i64,
    summary: String,
    state_counts: String,
}

impl FloorRow {
    /// The store's `INSERT` of a new session, with `bytes` as the snapshot.
    fn insert(&self, bytes: &[u8]) {
        let written = self
            .server
            .block_on(self.server.client.execute(
                &self.insert,
                &[
                    &"floor",
                    &1_i64,
                    &self.created_ns,
                    &self.updated_ns,
                    &self.summary,
                    &bytes,
                    &self.state_counts,
                ],
            ))
            .expect("insert the floor's row");
        assert_eq!(written, 1, "the floor's row was deleted before");
    }

    /// Deletes the row, if it is there.
    fn delete(&self) {
        self.server
            .block_on(self.server.client.execute(&self.delete, &[&"floor"]))
            .expect("delete the floor's row");
    }

    /// The row's revision and snapshot bytes, parsed into the typed mirror.
    fn load(&self) -> crate::mirror::Snapshot {
        let row = self
            .server
            .block_on(self.server.client.query_one(&self.select, &[&"floor"]))
            .expect("select the floor's row");
        let _revision: i64 = row.get(0);
        serde_json::from_slice(row.get::<_, &[u8]>(1)).expect("parse the floor's snapshot")
    }
}

/// The floor's session row and the store's append statement on it, prepared, with the
/// bytes of one turn's entry as the store wrote them.
struct FloorAppend {
    server: &'static Server,
    append: Statement,
    revision: Cell<i64>,
    created_ns: i64,
    updated_ns: i64,
    summary: String,
    state_counts: String,
    record: Vec<u8>,
    format: i16,
}

impl FloorAppend {
    /// The store's compare-and-swap append: the row moved to the next revision and the
    /// entry inserted, in one statement.
    fn append(&self) {
        let (old, new) = (self.revision.get(), self.revision.get() + 1);
        let entry_len = i64::try_from(self.record.len()).expect("a bigint length");
        let written = self
            .server
            .block_on(self.server.client.execute(
                &self.append,
                &[
                    &"floor",
                    &new,
                    &self.updated_ns,
                    &self.summary,
                    &entry_len,
                    &old,
                    &self.created_ns,
                    &Some(self.updated_ns),
                    &i64::MAX,
                    &self.state_counts,
                    &Some(self.state_counts.as_str()),
                    &self.record,
                    &self.format,
                ],
            ))
            .expect("append to the floor's session");
        assert_eq!(written, 1, "the floor's compare-and-swap");
        self.revision.set(new);
    }
}

pub fn save(c: &mut Criterion) {
    if url().is_none() {
        return;
    }
    let mut group = c.benchmark_group("postgres_save");
    for n in sizes() {
        pace(&mut group, n >= HEAVY_MESSAGES);
        let messages = to_messages(&wire_transcript(n));
        let first = snapshot("bench", messages.clone());
        let bytes = first
            .to_json_with_revision(Revision::from_u64(1))
            .expect("encode");
        group.throughput(Throughput::Bytes(bytes.len() as u64));

        let dir = tempfile::tempdir().expect("tempdir");
        let file = FileSessionStore::open(dir.path()).expect("open store");
        first_saves(&mut group, BenchmarkId::new("file_store", n), &file, &first);

        let case = OnceCell::new();
        let case = || case.get_or_init(|| server().store(&format!("save{n}")));
        group.bench_with_input(BenchmarkId::new("postgres_store", n), &n, |b, _| {
            let store = &case().store;
            b.iter_batched(
                || delete_if_stored(store, first.id()),
                |()| store.save(&first).expect("save"),
                BatchSize::PerIteration,
            );
        });
        let floor = OnceCell::new();
        group.bench_with_input(BenchmarkId::new("postgres_floor", n), &n, |b, _| {
            let floor =
                floor.get_or_init(|| case().floor_row(&snapshot("floor", messages.clone())));
            b.iter_batched(
                || floor.delete(),
                |()| floor.insert(&bytes),
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

pub fn load(c: &mut Criterion) {
    if url().is_none() {
        return;
    }
    let mut group = c.benchmark_group("postgres_load");
    for n in sizes() {
        pace(&mut group, n >= HEAVY_MESSAGES);
        let messages = to_messages(&wire_transcript(n));
        let stored = snapshot("bench", messages.clone());
        let dir = tempfile::tempdir().expect("tempdir");
        let file = FileSessionStore::open(dir.path()).expect("open store");
        file.save(&stored).expect("save");
        let bytes = std::fs::metadata(file.path_of(stored.id()))
            .expect("stat")
            .len();
        group.throughput(Throughput::Bytes(bytes));

        group.bench_with_input(BenchmarkId::new("file_store", n), &n, |b, _| {
            b.iter(|| file.load(stored.id()).expect("load"));
        });

        let case = OnceCell::new();
        let case = || {
            case.get_or_init(|| {
                let case = server().store(&format!("load{n}"));
                case.store.save(&stored).expect("save");
                case
            })
        };
        group.bench_with_input(BenchmarkId::new("postgres_store", n), &n, |b, _| {
            let store = &case().store;
            b.iter(|| store.load(stored.id()).expect("load"));
        });
        let floor = OnceCell::new();
        group.bench_with_input(BenchmarkId::new("postgres_floor", n), &n, |b, _| {
            let floor = floor.get_or_init(|| {
                let floor = case().floor_row(&snapshot("floor", messages.clone()));
                // The floor must do the whole work: the mirror reads every message.
                assert_eq!(floor.load().transcript.len(), n);
                floor
            });
            b.iter(|| floor.load());
        });
    }
    group.finish();
}

/// `postgres_compacted_load/<store>_full/10000`: the load of 10,000 messages saved turn by
/// turn; `…_compacted/10000`: the same, compacted to a view of about 200 messages, loaded
/// from its view (issue 14: ≤ 10 % of the full load).
pub fn compacted_load(c: &mut Criterion) {
    let Some(n) = sizes()
        .into_iter()
        .max()
        .filter(|&n| n >= 2 * COMPACTED_VIEW)
    else {
        return;
    };
    if url().is_none() {
        return;
    }
    let mut group = c.benchmark_group("postgres_compacted_load");
    pace(&mut group, true);
    let messages = to_messages(&wire_transcript(n));
    let case = server().store("compacted");
    let store: &dyn SessionStore = &case.store;
    save_turn_by_turn(store, "full", messages.clone());
    save_turn_by_turn(store, "compacted", messages);
    let view = compact_stored(store, "compacted");
    eprintln!("postgres_compacted_load/{n}: a view of {view} messages");
    for (function, id) in [
        ("postgres_store_full", "full"),
        ("postgres_store_compacted", "compacted"),
    ] {
        let id = agent_session::SessionId::parse(id).expect("id");
        group.bench_function(BenchmarkId::new(function, n), |b| {
            b.iter(|| store.load(&id).expect("load"));
        });
    }
    group.finish();
}

pub fn append_turn(c: &mut Criterion) {
    if url().is_none() {
        return;
    }
    let turn = to_messages(&wire_turn());
    let mut group = c.benchmark_group("postgres_turn");
    for n in sizes() {
        pace(&mut group, n >= HEAVY_MESSAGES);
        let base = snapshot("bench", to_messages(&wire_transcript(n)));

        let dir = tempfile::tempdir().expect("tempdir");
        let file = FileSessionStore::open(dir.path()).expect("open store");
        let feeder = TurnFeeder::new(&file, base.clone(), turn.clone());
        group.bench_function(BenchmarkId::new("file_store", n), |b| {
            b.iter_batched_ref(
                || feeder.next(),
                |next| feeder.save(next),
                BatchSize::PerIteration,
            );
        });

        let case = OnceCell::new();
        let case = || case.get_or_init(|| server().store(&format!("turn{n}")));
        let feeder = OnceCell::new();
        group.bench_function(BenchmarkId::new("postgres_store", n), |b| {
            let feeder =
                feeder.get_or_init(|| TurnFeeder::new(&case().store, base.clone(), turn.clone()));
            b.iter_batched_ref(
                || feeder.next(),
                |next| feeder.save(next),
                BatchSize::PerIteration,
            );
        });

        let floor = OnceCell::new();
        group.bench_function(BenchmarkId::new("postgres_floor", n), |b| {
            let floor = floor.get_or_init(|| {
                case().floor_append(&snapshot("floor", base.transcript().to_vec()), &turn)
            });
            b.iter(|| floor.append());
        });
    }
    group.finish();
}

/// The two stores of one listing configuration, built on first use.
struct Listing {
    sessions: usize,
    messages: usize,
    dir: tempfile::TempDir,
    file: OnceCell<FileSessionStore>,
    pg: OnceCell<PgCase>,
    list: OnceCell<Statement>,
    page: OnceCell<Statement>,
}

impl Listing {
    fn new(sessions: usize, messages: usize) -> Self {
        Listing {
            sessions,
            messages,
            dir: tempfile::tempdir().expect("tempdir"),
            file: OnceCell::new(),
            pg: OnceCell::new(),
            list: OnceCell::new(),
            page: OnceCell::new(),
        }
    }

    fn label(&self) -> String {
        format!("{}x{}", self.sessions, self.messages)
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn file(&self) -> &FileSessionStore {
        self.file
            .get_or_init(|| build_list_store(self.dir(), self.sessions, self.messages))
    }

    fn pg(&self) -> &PgCase {
        self.pg.get_or_init(|| {
            let case = server().store(&format!("list{}x{}", self.sessions, self.messages));
            case.fill(
                self.sessions,
                &to_messages(&crate::workload::transcript(self.messages)),
            );
            case
        })
    }

    /// The listing's query, as the store runs it for `list()` or a first page, prepared.
    fn floor_statement(&self, limit: Option<usize>) -> &Statement {
        let (cell, limit) = match limit {
            None => (&self.list, String::new()),
            Some(n) => (&self.page, format!(" LIMIT {n}")),
        };
        cell.get_or_init(|| {
            let case = self.pg();
            case.server.prepare(&format!(
                "SELECT id, summary, archived FROM {}.sessions WHERE archived = false
                 ORDER BY updated_ns DESC, id DESC{limit}",
                case.schema
            ))
        })
    }

    /// The listing's rows, fetched into Rust strings and not decoded.
    fn floor(&self, limit: Option<usize>) -> Vec<(String, String, bool)> {
        let statement = self.floor_statement(limit);
        let server = self.pg().server;
        server
            .block_on(server.client.query(statement, &[]))
            .expect("list the floor")
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect()
    }
}

pub fn list(c: &mut Criterion) {
    if url().is_none() {
        return;
    }
    let listings: Vec<Listing> = LISTS.iter().map(|&(s, m)| Listing::new(s, m)).collect();

    let mut group = c.benchmark_group("postgres_list");
    pace(&mut group, false);
    for listing in &listings {
        let (label, sessions) = (listing.label(), listing.sessions);
        group.throughput(Throughput::Elements(sessions as u64));
        group.bench_function(BenchmarkId::new("file_store", &label), |b| {
            let store = listing.file();
            b.iter(|| {
                let listed = store.list().expect("list");
                assert_eq!(listed.sessions.len(), sessions);
                listed
            });
        });
        group.bench_function(BenchmarkId::new("file_store_fresh", &label), |b| {
            listing.file();
            b.iter(|| {
                let listed = FileSessionStore::open(listing.dir())
                    .expect("open")
                    .list()
                    .expect("list");
                assert_eq!(listed.sessions.len(), sessions);
                listed
            });
        });
        group.bench_function(BenchmarkId::new("postgres_store", &label), |b| {
            let store = &listing.pg().store;
            b.iter(|| {
                let listed = store.list().expect("list");
                assert_eq!(listed.sessions.len(), sessions);
                listed
            });
        });
        group.bench_function(BenchmarkId::new("postgres_floor", &label), |b| {
            listing.floor_statement(None);
            b.iter(|| {
                let rows = listing.floor(None);
                assert_eq!(rows.len(), sessions);
                rows
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("postgres_list_page");
    pace(&mut group, false);
    group.throughput(Throughput::Elements(PAGE as u64));
    for listing in &listings {
        let label = listing.label();
        group.bench_function(BenchmarkId::new("file_store", &label), |b| {
            let store = listing.file();
            b.iter(|| {
                let page = store.list_page(PAGE, None).expect("list a page");
                assert_eq!(page.sessions.len(), PAGE);
                page
            });
        });
        group.bench_function(BenchmarkId::new("postgres_store", &label), |b| {
            let store = &listing.pg().store;
            b.iter(|| {
                let page = store.list_page(PAGE, None).expect("list a page");
                assert_eq!(page.sessions.len(), PAGE);
                assert!(page.next.is_some());
                page
            });
        });
        group.bench_function(BenchmarkId::new("postgres_floor", &label), |b| {
            // The store asks for one more row than the page, to know whether more follow.
            listing.floor_statement(Some(PAGE + 1));
            b.iter(|| {
                let rows = listing.floor(Some(PAGE + 1));
                assert_eq!(rows.len(), PAGE + 1);
                rows
            });
        });
    }
    group.finish();
}
