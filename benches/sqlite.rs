//! `SqliteSessionStore` benchmarks (issue 18), each beside what it is compared with in
//! the same run, through the public API as a harness uses it.
//!
//! ```text
//! cargo bench --bench sqlite --features sqlite             # everything (builds 2 x 100,000 sessions)
//! cargo bench --bench sqlite --features sqlite -- --quick  # criterion's quick mode
//! cargo bench --bench sqlite --features sqlite -- load     # one group: list_page, append_turn or load
//! AGENT_SESSION_BENCH_SESSIONS=10000 cargo bench --bench sqlite --features sqlite -- list_page
//! ```
//!
//! - `list_page/sqlite/first` and `…/deep`: `list_page(50)` at 100,000 sessions (of two
//!   messages each), the first page and a page from a cursor halfway down; target ≤ 2 ms.
//!   `list_page/file_store/first`: the same page of a `FileSessionStore` holding the same
//!   sessions (which reads every session's summary file for a page). Both stores are
//!   built once per run in a temporary directory (with `Durability::Buffered`, to build
//!   them quickly; a listing reads the same files either way).
//! - `append_turn/sqlite/10000`: one more turn (user, tool call, tool result:
//!   `make_transcript.py 0 --append-turn`) onto a session of 10,000 messages, loaded once
//!   and then extended and saved turn after turn (`Durability::Sync`: WAL, synchronous =
//!   FULL); every 16 turns, untimed, it is rewound to its 10,000 messages (one small
//!   entry), so the view stays at 10,000 to 10,045 messages while the history grows.
//!   `append_turn/baseline_append_fdatasync`: the turn's bytes (its log entry, what
//!   the store writes) appended to an open file + `fdatasync`. Target ≤ 2×. Every call
//!   is also timed on its own, and the distribution of both (mean, p50, p90, p99, max,
//!   and what the calls over 1 ms add to the mean) is printed after the group: every
//!   call criterion made, its warm-up's too, so more calls than its samples hold.
//! - `load/sqlite/10000` and `load/file_store/10000`: the load of 10,000 messages saved
//!   turn by turn, as an agent leaves them (a checkpoint of the first turn and one entry
//!   per turn in both stores); `…_whole/10000`: the same messages saved at once (one
//!   checkpoint). Target ≤ 1.2× the file store. `…_compacted/10000`: the session saved
//!   turn by turn, then compacted to a view of about 200 messages (a summary and the last
//!   turns): loaded from its view (issue 14's target, ≤ 10 % of the full load, there
//!   measured on the file store).
//!
//! Shared, noisy machines: compare the ratios within a run, not times across runs.

use std::cell::{OnceCell, RefCell};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_session::{
    Durability, FileSessionStore, ListCursor, RewindTo, SessionId, SessionStore, SqliteSessionStore,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};

#[path = "support/sessions.rs"]
#[allow(dead_code)] // each bench uses some of the helpers
mod sessions;
#[path = "support/workload.rs"]
#[allow(dead_code)] // the file-transcript helpers are for the other bench
mod workload;

use sessions::{compact_stored, save_turn_by_turn, snapshot, to_messages, with_turn};

const MESSAGES: usize = 10_000;
const PAGE: usize = 50;
/// Turns appended before the session is rewound to its [`MESSAGES`] (untimed).
const REWIND_TURNS: usize = 16;
const LIST_SESSIONS: usize = 100_000;

fn list_sessions() -> usize {
    std::env::var("AGENT_SESSION_BENCH_SESSIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(LIST_SESSIONS)
}

fn private_dir(root: &Path, name: &str) -> std::path::PathBuf {
    let dir = root.join(name);
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&dir)
        .expect("mkdir");
    dir
}

fn list_page(c: &mut Criterion) {
    let sessions = list_sessions();
    let root = tempfile::tempdir().expect("tempdir");
    let template = to_messages(&workload::transcript(2));
    let built: OnceCell<(SqliteSessionStore, FileSessionStore)> = OnceCell::new();
    let stores = || {
        built.get_or_init(|| {
            let started = Instant::now();
            let sqlite = SqliteSessionStore::builder()
                .durability(Durability::Buffered)
                .open(root.path().join("db").join("sessions.db"))
                .expect("open");
            let file = FileSessionStore::builder()
                .durability(Durability::Buffered)
                .open(private_dir(root.path(), "files"))
                .expect("open");
            for i in 0..sessions {
                sqlite
                    .save(&snapshot(&format!("s{i:06}"), template.clone()))
                    .expect("save");
            }
            eprintln!(
                "list_page: {sessions} SQLite sessions built in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            let started = Instant::now();
            for i in 0..sessions {
                file.save(&snapshot(&format!("s{i:06}"), template.clone()))
                    .expect("save");
            }
            eprintln!(
                "list_page: {sessions} file-store sessions built in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            (sqlite, file)
        })
    };
    let mut group = c.benchmark_group("list_page");
    group.bench_function(BenchmarkId::new("sqlite", "first"), |b| {
        let (sqlite, _) = stores();
        b.iter(|| {
            let page = sqlite.list_page(PAGE, None).expect("page");
            assert_eq!(page.sessions.len(), PAGE);
            page
        });
    });
    group.bench_function(BenchmarkId::new("sqlite", "deep"), |b| {
        let (sqlite, _) = stores();
        // A cursor halfway down the listing.
        let mut cursor: Option<ListCursor> = None;
        let middle = sqlite.list_page(sessions / 2, None).expect("page");
        if let Some(last) = middle.sessions.last() {
            cursor = Some(ListCursor::after(last));
        }
        b.iter(|| {
            let page = sqlite.list_page(PAGE, cursor.as_ref()).expect("page");
            assert_eq!(page.sessions.len(), PAGE);
            page
        });
    });
    group
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(5));
    group.bench_function(BenchmarkId::new("file_store", "first"), |b| {
        let (_, file) = stores();
        b.iter(|| {
            let page = file.list_page(PAGE, None).expect("page");
            assert_eq!(page.sessions.len(), PAGE);
            page
        });
    });
    group.finish();
}

fn append_turn(c: &mut Criterion) {
    let root = tempfile::tempdir().expect("tempdir");
    let store = SqliteSessionStore::open(root.path().join("db").join("sessions.db")).expect("open");
    let base = snapshot("bench", to_messages(&workload::transcript(MESSAGES)));
    store.save(&base).expect("save");
    let turn = to_messages(&workload::append_turn());
    let loaded = store.load(base.id()).expect("load");
    let entry_bytes = with_turn(loaded.clone(), turn.clone())
        .pending_entry()
        .expect("a turn is an entry")
        .to_bytes(base.id())
        .expect("encode");
    // Owned, never cloned: a clone shares the transcript, and extending it would copy
    // all 10,000 messages (what a harness, which extends its own session, never does).
    // (In a cell: the untimed rewind and the timed save both take it.)
    let current = RefCell::new(Some(loaded));
    let mut group = c.benchmark_group("append_turn");
    // Each iteration timed on its own as well, for the distribution: the mean criterion
    // reports is set by a tail (checkpoints, index moves) that the median does not see.
    let mut saves = Vec::new();
    let mut turns = 0_usize;
    group.bench_function(BenchmarkId::new("sqlite", MESSAGES), |b| {
        b.iter_custom(|iterations| {
            timed_each(
                iterations,
                &mut saves,
                || {
                    // Untimed, every 16 turns: back to 10,000 messages (one small entry),
                    // so every turn is measured onto 10,000 to 10,045 messages.
                    turns += 1;
                    if turns.is_multiple_of(REWIND_TURNS) {
                        let mut session = current.take().expect("the session");
                        session
                            .rewind(RewindTo::Message(MESSAGES))
                            .expect("rewind to 10,000 messages");
                        let revision = store.save(&session).expect("save the rewind");
                        current.replace(Some(session.with_revision(revision)));
                    }
                },
                || {
                    let next = with_turn(current.take().expect("the session"), turn.clone());
                    let revision = store.save(&next).expect("save a turn");
                    current.replace(Some(next.stored_at(revision)));
                },
            )
        });
    });
    let mut journal = OpenOptions::new()
        .create(true)
        .append(true)
        .open(private_dir(root.path(), "raw").join("journal"))
        .expect("open journal");
    let mut appends = Vec::new();
    group.bench_function("baseline_append_fdatasync", |b| {
        b.iter_custom(|iterations| {
            timed_each(
                iterations,
                &mut appends,
                || {},
                || {
                    journal.write_all(&entry_bytes).expect("append");
                    journal.sync_data().expect("fdatasync");
                },
            )
        });
    });
    group.finish();
    eprintln!(
        "append_turn: the turn's entry is {} bytes; the session's view ended at {} messages",
        entry_bytes.len(),
        current
            .borrow()
            .as_ref()
            .map_or(0, |s| s.transcript().len())
    );
    eprintln!("append_turn/sqlite/{MESSAGES}: {}", distribution(saves));
    eprintln!(
        "append_turn/baseline_append_fdatasync: {}",
        distribution(appends)
    );
}

/// Runs `work` `iterations` times, each after an untimed `prepare` and timed on its own
/// into `times`; the total.
fn timed_each(
    iterations: u64,
    times: &mut Vec<Duration>,
    mut prepare: impl FnMut(),
    mut work: impl FnMut(),
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iterations {
        prepare();
        let start = Instant::now();
        work();
        let took = start.elapsed();
        times.push(took);
        total += took;
    }
    total
}

/// The mean, median, 90th and 99th percentiles and the maximum of `times`, and how much
/// of the mean the calls over 1 ms make.
fn distribution(mut times: Vec<Duration>) -> String {
    if times.is_empty() {
        return "no calls".to_owned();
    }
    times.sort_unstable();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let total: Duration = times.iter().sum();
    let over: Duration = times
        .iter()
        .filter(|t| **t > Duration::from_millis(1))
        .sum();
    let calls = u32::try_from(times.len()).unwrap_or(u32::MAX);
    let at = |percent: usize| micros(times[(times.len() - 1) * percent / 100]);
    format!(
        "{} calls: mean {:.0} µs, p50 {:.0}, p90 {:.0}, p99 {:.0}, max {:.0}; calls over 1 ms add {:.0} µs to the mean",
        times.len(),
        micros(total / calls),
        at(50),
        at(90),
        at(99),
        at(100),
        micros(over / calls)
    )
}

fn load(c: &mut Criterion) {
    let root = tempfile::tempdir().expect("tempdir");
    let sqlite = SqliteSessionStore::builder()
        .durability(Durability::Buffered)
        .open(root.path().join("db").join("sessions.db"))
        .expect("open");
    let file = FileSessionStore::builder()
        .durability(Durability::Buffered)
        .open(private_dir(root.path(), "files"))
        .expect("open");
    let transcript = to_messages(&workload::transcript(MESSAGES));
    let id = SessionId::parse("bench").expect("id");
    let whole = SessionId::parse("whole").expect("id");
    let compacted = SessionId::parse("compacted").expect("id");
    for store in [&sqlite as &dyn SessionStore, &file] {
        save_turn_by_turn(store, "bench", transcript.clone());
        store
            .save(&snapshot("whole", transcript.clone()))
            .expect("save");
        save_turn_by_turn(store, "compacted", transcript.clone());
        let view = compact_stored(store, "compacted");
        eprintln!("load/…_compacted/{MESSAGES}: a view of {view} messages");
    }
    let mut group = c.benchmark_group("load");
    group
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(3));
    group.bench_function(BenchmarkId::new("sqlite", MESSAGES), |b| {
        b.iter(|| sqlite.load(&id).expect("load"));
    });
    group.bench_function(BenchmarkId::new("file_store", MESSAGES), |b| {
        b.iter(|| file.load(&id).expect("load"));
    });
    group.bench_function(BenchmarkId::new("sqlite_whole", MESSAGES), |b| {
        b.iter(|| sqlite.load(&whole).expect("load"));
    });
    group.bench_function(BenchmarkId::new("file_store_whole", MESSAGES), |b| {
        b.iter(|| file.load(&whole).expect("load"));
    });
    group.bench_function(BenchmarkId::new("sqlite_compacted", MESSAGES), |b| {
        b.iter(|| sqlite.load(&compacted).expect("load"));
    });
    group.bench_function(BenchmarkId::new("file_store_compacted", MESSAGES), |b| {
        b.iter(|| file.load(&compacted).expect("load"));
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = list_page, append_turn, load
}
criterion_main!(benches);
