//! `FileSessionStore` benchmarks (issue 5): full save, load, one more turn and list, each
//! beside its physical baseline measured in the same run on the same bytes.
//!
//! # Commands
//!
//! ```text
//! cargo bench --bench store                   # the whole matrix (about 3 minutes on 2 cores)
//! python3 benches/support/ratios.py           # that run's medians and ratios, as Markdown
//!
//! cargo bench --bench store -- append_turn    # one group: save, load, append_turn, rewind, list or durability
//! AGENT_SESSION_BENCH_TRANSCRIPT=t.json cargo bench --bench store  # a make_transcript.py file
//! AGENT_SESSION_BENCH_TURN=turn.json cargo bench --bench store     # ... --append-turn output
//! AGENT_SESSION_BENCH_LIST=1000x10,100x10000 cargo bench --bench store -- list
//! ```
//!
//! `ratios.py` reads `target/criterion/` (or the directory given as its argument), so run it
//! after the benchmark, and read its "measured between" line: a group run later on its own
//! replaces only that group's results.
//!
//! # The workload
//!
//! `support/workload.rs` is a port of `shared/bench/make_transcript.py` that prints the same
//! messages for the same N (about 1 KB each: `make_transcript.py 1000` prints 979,349
//! bytes). Each transcript is converted with `Message::from_openai_chat` into a
//! snapshot with one usage entry per assistant message (one completion each). With
//! `AGENT_SESSION_BENCH_TRANSCRIPT` set, save, load and one-more-turn measure that file's
//! transcript only (N = its message count); list always uses the generated workload.
//!
//! # What is measured (group / function / parameter)
//!
//! - `save/file_store/N`: `FileSessionStore::save` of a snapshot of N messages over its
//!   previous revision, written whole: it is built, not loaded, so the store cannot know
//!   what is already stored (the compare-and-swap still reads the stored header).
//!   `save/baseline_atomic_write/N`: the same number of bytes written to a temp file,
//!   `fsync`, `rename` over the target, `fsync` of the directory.
//! - `load/file_store/N`: `FileSessionStore::load` (read, decode, validate).
//!   `load/baseline_read_typed/N`: `std::fs::read` of the same file + `serde_json` parse into
//!   a plain typed mirror of the format (`support/mirror.rs`: serde derives, no checks).
//!   `load/baseline_read_value/N`: the same read + parse into `serde_json::Value`.
//! - `append_turn/file_store/N`: save of the session of N messages plus one turn (user
//!   message, assistant tool call, tool result: `make_transcript.py 0 --append-turn`) over
//!   the stored revision: the snapshot is loaded from the store and extended with
//!   `SessionSnapshot::with_appended`, so the store appends the turn to the journal. Every
//!   16 turns, untimed, the stored session is put back to N messages with a full save
//!   (which empties the journal), so every measured save adds one turn to N to N + 45
//!   messages (see `TurnFeeder`). `append_turn/baseline_append_fdatasync`: the turn's bytes (its 3 messages
//!   as the snapshot encodes them) appended to an open file + `fdatasync`; it does not
//!   depend on N, so it is measured once. `append_turn/memory_store/N`: the same saves
//!   into a `MemorySessionStore`, which appends the turn to the state it holds (put back
//!   to N messages every 1,024 turns instead of 16).
//! - `list/file_store/SxM`: `FileSessionStore::list` of S stored sessions of M messages,
//!   repeated on one store (which reuses the summaries it decoded while their files are
//!   unchanged). `list/file_store_fresh/SxM`: the same on a store opened for each listing,
//!   which reads every summary file.
//!   `list/baseline_readdir_stat/SxM`: `readdir` + `stat` of every entry of the directory.
//!   Default: 1000x10, 1000x1000 and 100x10000 (1,000 sessions of 10,000 messages would be
//!   about 11 GB of snapshots, more than these machines' disk and time budget).
//!
//! - `rewind/file_store/N`: the undo of the last turn, as a harness does it: the session
//!   of N messages plus a turn, as stored (untimed: the turn appended and saved, through
//!   the same `TurnFeeder`), rewound in place (`SessionSnapshot::rewind`, one turn) and
//!   saved, which appends one small journal record. `rewind/baseline_append_fdatasync`: a
//!   record-sized append (`REWIND_RECORD_BYTES`) to an open file + `fdatasync`.
//! - `durability/{save,append_turn}/{sync,buffered}/1000`: a full save and one more turn
//!   onto 1,000 messages with `Durability::Sync` (the default) and `Durability::Buffered`.
//!
//! N = 10, 100, 1,000 and 10,000. Every file is in the page cache when it is read; writes
//! go to the file system under the system temporary directory (`TMPDIR`), which should be
//! the disk being measured, not a tmpfs.
//!
//! # PostgreSQL (feature `postgres`)
//!
//! With `--features postgres` and `AGENT_SESSION_POSTGRES_URL` set, the groups
//! `postgres_save`, `postgres_load`, `postgres_turn`, `postgres_list` and
//! `postgres_list_page` measure `PostgresSessionStore` beside `FileSessionStore` (measured
//! again in the same group) and beside a floor for the database: the store's own statement,
//! prepared, on one `tokio_postgres` connection. See `support/postgres.rs`. Without the
//! variable they are skipped, with a message.
//!
//! ```text
//! scripts/bench-postgres postgres             # a throw-away server; those groups only
//! python3 benches/support/ratios.py           # includes the PostgreSQL / file table
//! ```
//!
//! # Timing
//!
//! The machines are shared, noisy 2-core VMs: 10 samples, short windows, flat sampling (a
//! few iterations a sample) for work of tens of milliseconds or more; criterion's "Unable to
//! complete 10 samples in 1.0s" warnings for those are expected. `ratios.py` reports
//! medians (criterion's own summary line shows the mean or slope). Compare ratios within
//! one run, never absolute times across runs.

#![allow(missing_docs)] // criterion's macros generate undocumented items.

#[path = "support/mirror.rs"]
mod mirror;
#[cfg(feature = "postgres")]
#[path = "support/postgres.rs"]
mod postgres;
#[path = "support/workload.rs"]
mod workload;

use std::cell::{Cell, OnceCell, RefCell};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use agent_session::{
    Durability, FileSessionStore, MemorySessionStore, Message, Revision, RewindTo, Role, SessionId,
    SessionSnapshot, SessionStore, Usage,
};
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use serde_json::Value;

/// Message counts of the save, load and one-more-turn benchmarks.
const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];

/// `(sessions, messages per session)` of the list benchmark.
const LIST_DEFAULT: [(usize, usize); 3] = [(1_000, 10), (1_000, 1_000), (100, 10_000)];

const MODEL: &str = "bench-model";

/// Work at least this large (messages, or messages listed) is sampled flat.
const HEAVY_MESSAGES: usize = 10_000;

fn file_transcript() -> Option<&'static [Value]> {
    static FILE: OnceLock<Option<Vec<Value>>> = OnceLock::new();
    FILE.get_or_init(workload::from_env).as_deref()
}

/// The message counts to measure: [`SIZES`], or the one of the transcript file.
fn sizes() -> Vec<usize> {
    file_transcript().map_or_else(|| SIZES.to_vec(), |file| vec![file.len()])
}

/// The OpenAI-form transcript of `n` messages: the file's, or the generated workload.
fn wire_transcript(n: usize) -> Vec<Value> {
    match file_transcript() {
        Some(file) if file.len() == n => file.to_vec(),
        _ => workload::transcript(n),
    }
}

fn wire_turn() -> Vec<Value> {
    workload::turn_from_env().unwrap_or_else(workload::append_turn)
}

fn list_configs() -> Vec<(usize, usize)> {
    let Some(spec) = std::env::var_os("AGENT_SESSION_BENCH_LIST") else {
        return LIST_DEFAULT.to_vec();
    };
    let spec = spec.to_string_lossy();
    spec.split(',')
        .map(|item| {
            let parsed = item
                .trim()
                .split_once('x')
                .and_then(|(s, m)| Some((s.trim().parse().ok()?, m.trim().parse().ok()?)));
            parsed.unwrap_or_else(|| {
                panic!("AGENT_SESSION_BENCH_LIST: {item:?} is not SESSIONSxMESSAGES")
            })
        })
        .collect()
}

fn to_messages(wire: &[Value]) -> Vec<Message> {
    wire.iter()
        .map(|m| Message::from_openai_chat(m).expect("workload messages are valid OpenAI chat"))
        .collect()
}

/// One usage entry per assistant message: each is one completion.
fn usage_of(transcript: &[Message]) -> Vec<Usage> {
    transcript
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|_| Usage::new(MODEL).with_tokens(12_000, 300))
        .collect()
}

fn snapshot(id: &str, transcript: Vec<Message>) -> SessionSnapshot {
    let usage = usage_of(&transcript);
    SessionSnapshot::builder(SessionId::parse(id).expect("valid id"), MODEL)
        .transcript(transcript)
        .usage(usage)
        .build()
        .expect("workload transcripts pair every tool call")
}

/// Flat sampling and a short window for heavy work, so 10 samples cost about 10
/// iterations instead of the 55 of linear sampling.
fn pace(group: &mut BenchmarkGroup<'_, WallTime>, heavy: bool) {
    if heavy {
        group
            .sampling_mode(SamplingMode::Flat)
            .measurement_time(Duration::from_secs(1));
    } else {
        group
            .sampling_mode(SamplingMode::Auto)
            .measurement_time(Duration::from_secs(3));
    }
}

/// Flushes everything the file systems hold (`sync(1)`) and waits a moment, so a measured
/// save does not also pay for what the untimed set-up left pending: resetting the session
/// to N messages writes (and frees) a base of N messages, which the file system's journal
/// is still committing and checkpointing for a while after it was fsynced.
fn settle() {
    let status = std::process::Command::new("sync")
        .status()
        .expect("run sync(1)");
    assert!(status.success(), "sync(1) failed");
    // The file system's own journal keeps writing back for a moment after sync returns.
    std::thread::sleep(Duration::from_millis(200));
}

/// The physical floor of an atomic, durable replace.
fn raw_atomic_write(dir: &Path, bytes: &[u8]) {
    let temp = dir.join(".baseline.tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)
        .expect("create temp");
    file.write_all(bytes).expect("write");
    file.sync_all().expect("fsync");
    drop(file);
    std::fs::rename(&temp, dir.join("baseline.json")).expect("rename");
    File::open(dir)
        .expect("open dir")
        .sync_all()
        .expect("fsync dir");
}

fn save(c: &mut Criterion) {
    let mut group = c.benchmark_group("save");
    for n in sizes() {
        pace(&mut group, n >= HEAVY_MESSAGES);
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileSessionStore::open(dir.path().join("store")).expect("open store");
        let first = snapshot("bench", to_messages(&wire_transcript(n)));
        let bytes = first
            .to_json_with_revision(Revision::from_u64(1))
            .expect("encode");
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        let mut current = Some(first);
        group.bench_with_input(BenchmarkId::new("file_store", n), &n, |b, _| {
            b.iter(|| {
                let snapshot = current.take().expect("put back every iteration");
                let revision = store.save(&snapshot).expect("save");
                current = Some(snapshot.with_revision(revision));
            });
        });
        let raw_dir = dir.path().join("raw");
        std::fs::create_dir(&raw_dir).expect("mkdir");
        group.bench_with_input(BenchmarkId::new("baseline_atomic_write", n), &n, |b, _| {
            b.iter(|| raw_atomic_write(&raw_dir, &bytes));
        });
    }
    group.finish();
}

fn load(c: &mut Criterion) {
    let mut group = c.benchmark_group("load");
    for n in sizes() {
        pace(&mut group, n >= HEAVY_MESSAGES);
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileSessionStore::open(dir.path()).expect("open store");
        let snapshot = snapshot("bench", to_messages(&wire_transcript(n)));
        store.save(&snapshot).expect("save");
        let path = store.path_of(snapshot.id());
        let bytes = std::fs::read(&path).expect("read");
        // The baseline must do the whole work: the mirror reads every message.
        let typed: mirror::Snapshot = serde_json::from_slice(&bytes).expect("typed parse");
        assert_eq!(typed.transcript.len(), n);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("file_store", n), &n, |b, _| {
            b.iter(|| store.load(snapshot.id()).expect("load"));
        });
        group.bench_with_input(BenchmarkId::new("baseline_read_typed", n), &n, |b, _| {
            b.iter(|| {
                let bytes = std::fs::read(&path).expect("read");
                serde_json::from_slice::<mirror::Snapshot>(&bytes).expect("parse")
            });
        });
        group.bench_with_input(BenchmarkId::new("baseline_read_value", n), &n, |b, _| {
            b.iter(|| {
                let bytes = std::fs::read(&path).expect("read");
                serde_json::from_slice::<Value>(&bytes).expect("parse")
            });
        });
    }
    group.finish();
}

fn append_turn(c: &mut Criterion) {
    let turn = to_messages(&wire_turn());
    let turn_bytes = serde_json::to_vec(&turn).expect("encode the turn");
    let mut group = c.benchmark_group("append_turn");
    group.throughput(Throughput::Bytes(turn_bytes.len() as u64));

    pace(&mut group, false);
    let dir = tempfile::tempdir().expect("tempdir");
    baseline_append_fdatasync(&mut group, dir.path(), &turn_bytes);

    for n in sizes() {
        pace(&mut group, n >= HEAVY_MESSAGES);
        let store = FileSessionStore::open(dir.path().join(format!("store{n}"))).expect("open");
        let feeder = TurnFeeder::new(
            &store,
            snapshot("bench", to_messages(&wire_transcript(n))),
            turn.clone(),
        );
        save_turns(&mut group, BenchmarkId::new("file_store", n), &feeder);
        // Put back far less often: there is no journal to empty, and the first append
        // after a whole save grows the store's list once (a copy of N messages), which a
        // session saving after every turn pays once, not every 16 turns.
        let memory = MemorySessionStore::new();
        let feeder = TurnFeeder::rebasing_every(
            &memory,
            snapshot("bench", to_messages(&wire_transcript(n))),
            turn.clone(),
            MEMORY_REBASE_TURNS,
        );
        save_turns(&mut group, BenchmarkId::new("memory_store", n), &feeder);
    }
    group.finish();
}

/// `baseline_append_fdatasync`: `bytes` appended to an open file in `dir`, then
/// `fdatasync`.
fn baseline_append_fdatasync(group: &mut BenchmarkGroup<'_, WallTime>, dir: &Path, bytes: &[u8]) {
    let mut journal = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("journal"))
        .expect("open journal");
    group.bench_function("baseline_append_fdatasync", |b| {
        b.iter(|| {
            journal.write_all(bytes).expect("append");
            journal.sync_data().expect("fdatasync");
        });
    });
}

/// One more turn per iteration, saved through `feeder`'s store.
fn save_turns(group: &mut BenchmarkGroup<'_, WallTime>, id: BenchmarkId, feeder: &TurnFeeder<'_>) {
    group.bench_function(id, |b| {
        b.iter_batched_ref(
            || feeder.next(),
            |next| feeder.save(next),
            BatchSize::PerIteration,
        );
    });
}

/// About the size of the journal record a rewind of one turn appends (a frame header, the
/// revision, the time and the kept counts).
const REWIND_RECORD_BYTES: usize = 180;

fn rewind(c: &mut Criterion) {
    let turn = to_messages(&wire_turn());
    let mut group = c.benchmark_group("rewind");
    pace(&mut group, false);
    let dir = tempfile::tempdir().expect("tempdir");
    baseline_append_fdatasync(&mut group, dir.path(), &[b'r'; REWIND_RECORD_BYTES]);
    for n in sizes() {
        pace(&mut group, n >= HEAVY_MESSAGES);
        let store = FileSessionStore::open(dir.path().join(format!("store{n}"))).expect("open");
        let feeder = TurnFeeder::new(
            &store,
            snapshot("bench", to_messages(&wire_transcript(n))),
            turn.clone(),
        );
        group.bench_function(BenchmarkId::new("file_store", n), |b| {
            b.iter_batched_ref(
                || {
                    let mut next = feeder.next();
                    feeder.save(&mut next);
                    feeder.take_current()
                },
                |stored| {
                    stored.rewind(RewindTo::LastTurns(1)).expect("rewind");
                    feeder.save(stored);
                },
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// Turns a `MemorySessionStore` appends before the session is put back to N messages.
const MEMORY_REBASE_TURNS: usize = 1_024;

/// Turns to append before the session is put back to its N messages.
const REBASE_TURNS: usize = 16;

/// Feeds "one more turn" saves: the session of N messages, loaded from the store and
/// extended by one turn per iteration, as an agent saving after each turn does. Every
/// [`REBASE_TURNS`] turns, untimed, it is put back to N messages with a full save (which
/// also empties the journal) and loaded again, so each measured save adds a turn to N to
/// N + 45 messages. (Putting it back before every save would measure a save right after
/// reading N messages, whose caches that read has just flushed, not the save.)
struct TurnFeeder<'a> {
    store: &'a dyn SessionStore,
    base: SessionSnapshot,
    turn: Vec<Message>,
    current: RefCell<Option<SessionSnapshot>>,
    turns: Cell<usize>,
    stored: Cell<Revision>,
    /// Turns between rebases ([`REBASE_TURNS`] unless set).
    rebase: usize,
}

impl<'a> TurnFeeder<'a> {
    fn new(store: &'a dyn SessionStore, base: SessionSnapshot, turn: Vec<Message>) -> Self {
        Self::rebasing_every(store, base, turn, REBASE_TURNS)
    }

    /// A feeder that puts the session back to N messages every `rebase` turns.
    fn rebasing_every(
        store: &'a dyn SessionStore,
        base: SessionSnapshot,
        turn: Vec<Message>,
        rebase: usize,
    ) -> Self {
        TurnFeeder {
            store,
            base,
            turn,
            current: RefCell::new(None),
            turns: Cell::new(0),
            stored: Cell::new(Revision::NEW),
            rebase,
        }
    }

    /// Untimed: the next snapshot to save, one turn longer than the stored one.
    fn next(&self) -> SessionSnapshot {
        let current = self.current.borrow_mut().take();
        let current = match current {
            Some(current) if self.turns.get() < self.rebase => current,
            _ => {
                let reset = self.base.clone().with_revision(self.stored.get());
                self.stored
                    .set(self.store.save(&reset).expect("save N messages"));
                self.turns.set(0);
                let loaded = self.store.load(self.base.id()).expect("load N messages");
                settle();
                loaded
            }
        };
        self.turns.set(self.turns.get() + 1);
        let later = current.updated_at() + chrono::TimeDelta::milliseconds(1);
        current
            .with_appended(self.turn.clone(), usage_of(&self.turn), later)
            .expect("the turn pairs its tool call")
    }

    /// Timed: the save, and keeping the saved snapshot for the next turn.
    fn save(&self, next: &mut SessionSnapshot) {
        let revision = self.store.save(next).expect("save one more turn");
        self.stored.set(revision);
        *self.current.borrow_mut() = Some(next.clone().with_revision(revision));
    }

    /// Untimed: the snapshot just saved, as stored (for a benchmark that changes it and
    /// saves it again through [`save`](Self::save)).
    fn take_current(&self) -> SessionSnapshot {
        self.current
            .borrow_mut()
            .take()
            .expect("a snapshot was saved")
    }
}

/// Full save and one more turn onto 1,000 messages with each [`Durability`] level.
fn durability(c: &mut Criterion) {
    const N: usize = 1_000;
    let turn = to_messages(&wire_turn());
    let mut group = c.benchmark_group("durability");
    pace(&mut group, false);
    for (label, level) in [
        ("sync", Durability::Sync),
        ("buffered", Durability::Buffered),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileSessionStore::builder()
            .durability(level)
            .open(dir.path())
            .expect("open");
        let base = snapshot("bench", to_messages(&workload::transcript(N)));
        let stored = Cell::new(store.save(&base).expect("save"));
        group.bench_function(BenchmarkId::new(format!("save/{label}"), N), |b| {
            b.iter(|| {
                let again = base.clone().with_revision(stored.get());
                stored.set(store.save(&again).expect("save"));
            });
        });
        // Its own session: the full-save benchmark above keeps "bench" at its revisions.
        let feeder = TurnFeeder::new(
            &store,
            snapshot("turns", base.transcript().to_vec()),
            turn.clone(),
        );
        group.bench_function(BenchmarkId::new(format!("append_turn/{label}"), N), |b| {
            b.iter_batched_ref(
                || feeder.next(),
                |next| feeder.save(next),
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// A store of `sessions` sessions of `messages` messages each, built through the store.
fn build_list_store(dir: &Path, sessions: usize, messages: usize) -> FileSessionStore {
    let started = Instant::now();
    let store = FileSessionStore::open(dir).expect("open store");
    let template = to_messages(&workload::transcript(messages));
    for i in 0..sessions {
        store
            .save(&snapshot(&format!("s{i:05}"), template.clone()))
            .expect("save");
    }
    let on_disk: u64 = std::fs::read_dir(dir)
        .expect("readdir")
        .map(|e| e.expect("entry").metadata().expect("stat").len())
        .sum();
    eprintln!(
        "list {sessions}x{messages}: built {sessions} sessions of {messages} messages, \
         {on_disk} bytes on disk, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    store
}

fn list(c: &mut Criterion) {
    let mut group = c.benchmark_group("list");
    for (sessions, messages) in list_configs() {
        pace(&mut group, sessions * messages >= 100 * HEAVY_MESSAGES);
        let label = format!("{sessions}x{messages}");
        let dir = tempfile::tempdir().expect("tempdir");
        // Built on first use, so a run filtered to other groups does not pay for it.
        let built = OnceCell::new();
        let store = || built.get_or_init(|| build_list_store(dir.path(), sessions, messages));
        group.throughput(Throughput::Elements(sessions as u64));
        group.bench_function(BenchmarkId::new("file_store", &label), |b| {
            let store = store();
            b.iter(|| {
                let listing = store.list().expect("list");
                assert_eq!(listing.sessions.len(), sessions);
                listing
            });
        });
        // A store opened for each listing (a CLI's one-shot `sessions list`): every summary
        // file is read and decoded, where a long-lived store reuses what it read before.
        group.bench_function(BenchmarkId::new("file_store_fresh", &label), |b| {
            store();
            b.iter(|| {
                let listing = FileSessionStore::open(dir.path())
                    .expect("open")
                    .list()
                    .expect("list");
                assert_eq!(listing.sessions.len(), sessions);
                listing
            });
        });
        group.bench_function(BenchmarkId::new("baseline_readdir_stat", &label), |b| {
            store();
            b.iter(|| {
                std::fs::read_dir(dir.path())
                    .expect("readdir")
                    .map(|e| e.expect("entry").metadata().expect("stat").len())
                    .sum::<u64>()
            });
        });
    }
    group.finish();
}

fn config() -> Criterion {
    // Shared, noisy 2-core machines: few samples, short windows; compare ratios within a
    // run, never absolute times across runs.
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = save, load, append_turn, rewind, list, durability
}

// PostgresSessionStore beside FileSessionStore (support/postgres.rs).
#[cfg(feature = "postgres")]
criterion_group! {
    name = postgres_benches;
    config = config();
    targets = postgres::save, postgres::load, postgres::append_turn, postgres::list
}

fn main() {
    let transcript = match std::env::var_os("AGENT_SESSION_BENCH_TRANSCRIPT") {
        Some(path) => format!("the transcript of {}", path.display()),
        None => "make_transcript.py's workload, generated in Rust".to_owned(),
    };
    let turn = match std::env::var_os("AGENT_SESSION_BENCH_TURN") {
        Some(path) => format!("the turn of {}", path.display()),
        None => "make_transcript.py --append-turn, generated in Rust".to_owned(),
    };
    eprintln!(
        "workload: {transcript}, N = {:?}; turn: {turn}; list (sessions x messages): {:?}",
        sizes(),
        list_configs()
    );
    #[cfg(feature = "postgres")]
    postgres::announce();
    benches();
    #[cfg(feature = "postgres")]
    {
        postgres_benches();
        postgres::drop_schemas();
    }
    Criterion::default().configure_from_args().final_summary();
}
