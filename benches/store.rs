//! `FileSessionStore` benchmarks (issues 5 and 14): full save, load, one more turn, rewind,
//! restore, the load of a compacted session, and list, each beside its physical baseline
//! (or the work it is a fraction of) measured in the same run on the same bytes.
//!
//! # Commands
//!
//! ```text
//! cargo bench --bench store                   # the whole matrix (about 5 minutes on 2 cores)
//! python3 benches/support/ratios.py           # that run's medians, ratios and targets
//!
//! cargo bench --bench store -- append_turn    # one group: save, load, append_turn, rewind,
//!                                             # restore, compacted_load, list or durability
//! AGENT_SESSION_BENCH_TRANSCRIPT=t.json cargo bench --bench store  # a make_transcript.py file
//! AGENT_SESSION_BENCH_TURN=turn.json cargo bench --bench store     # ... --append-turn output
//! AGENT_SESSION_BENCH_LIST=1000x10,100x10000 cargo bench --bench store -- list
//! ```
//!
//! A filter picks the benchmarks measured, but every group still builds what it measures
//! (except `list`, which builds its stores on first use), so a filtered run spends a minute
//! or so saving sessions before its first measurement.
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
//! `AGENT_SESSION_BENCH_TRANSCRIPT` set, save, load, one more turn, rewind, restore and
//! the compacted load measure that file's transcript only (N = its message count); list
//! always uses the generated workload.
//!
//! Every save of a stored session appends one entry to its journal, which is never folded
//! back into the base: the history is the log. So nothing here puts a session back to N
//! messages by saving them again (that would append them all); a session that must stay
//! near N messages is deleted and saved anew instead, untimed.
//!
//! # What is measured (group / function / parameter)
//!
//! - `save/file_store/N`: `FileSessionStore::save` of a snapshot of N messages as a new
//!   session (the session deleted before each save, untimed): the whole snapshot written
//!   as the session's base, which is what a full save is now (a session's first save, or
//!   one replacing the history). `save/baseline_atomic_write/N`: the same number of bytes
//!   written to a temp file, `fsync`, `rename` over the target, `fsync` of the directory.
//!   `save/file_store_edit/N`: the same snapshot, built rather than loaded, saved over the
//!   stored session: the store cannot know what it shares with the stored state, so it
//!   appends one entry holding all N messages (every 8 saves, untimed, the session starts
//!   over, to keep the journal short).
//! - `load/file_store/N`: `FileSessionStore::load` (read, decode, validate) of a session
//!   saved once (a base, no journal). `load/baseline_read_typed/N`: `std::fs::read` of the
//!   same file + `serde_json` parse into a plain typed mirror of the format
//!   (`support/mirror.rs`: serde derives, no checks).
//!   `load/baseline_read_value/N`: the same read + parse into `serde_json::Value`.
//!   `load/file_store_appended/N`: the load of the same messages saved turn by turn, as an
//!   agent leaves them (a base of the first turn, then one journal entry per turn); its
//!   baseline is the same `baseline_read_typed/N`, the typed parse of those messages as one
//!   whole snapshot.
//! - `append_turn/file_store/N`: save of the session of N messages plus one turn (user
//!   message, assistant tool call, tool result: `make_transcript.py 0 --append-turn`) over
//!   the stored revision, as a harness does it: the session is loaded once, then extended
//!   with `SessionSnapshot::with_appended` and saved, turn after turn, and each save appends
//!   the turn to the journal. Every 16 turns, untimed, the session is rewound to its N
//!   messages (one small entry), and every 1,024 turns it starts over (deleted, saved anew
//!   with its N messages, loaded, and given one turn), so every measured save adds one
//!   turn to a view of N to N + 45 messages (see `TurnFeeder`).
//!   `append_turn/baseline_append_fdatasync`: the turn's bytes (its 3 messages as the
//!   snapshot encodes them) appended to an open file + `fdatasync`; it does not depend on
//!   N, so it is measured once. `append_turn/memory_store/N`: the same saves into a
//!   `MemorySessionStore`, which appends the turn to the state it holds.
//! - `rewind/file_store/N`: the undo of the last turn, as a harness does it: the session
//!   of N messages plus a turn, as stored (untimed: the turn appended and saved, through
//!   the same `TurnFeeder`), rewound in place (`SessionSnapshot::rewind`, one turn) and
//!   saved, which appends one small entry. `rewind/baseline_append_fdatasync`: an append of
//!   that entry's size (measured before the group, from the journal's growth) to an open
//!   file + `fdatasync`.
//! - `restore/file_store/N`: `SessionStore::restore(id, revision)` on a session of N
//!   messages saved and then given one turn, going back to its first and its second
//!   revision in turn, so every iteration appends one restore entry (the store's first
//!   restore of the session, which reads the log once, is made before, untimed).
//!   `restore/memory_store/N`: the same on a `MemorySessionStore`.
//!   `restore/file_store_restore_from/N`: what `Session::restore_from` and a save do, on a
//!   snapshot: the two revisions loaded once with `load_at` (untimed), then the head set
//!   back to one of them (`SessionSnapshot::restore_from`) and saved, in turn.
//!   `restore/baseline_append_fdatasync`: an append of the restore entry's size to an open
//!   file + `fdatasync`.
//! - `compacted_load/*/N` (the largest N only): the load of a session of N messages
//!   compacted to a view of about 200 (`SessionSnapshot::compact`: one summary message in
//!   place of every turn but the last ones, saved as one compaction entry), saved once
//!   before it was compacted (`file_store`: a base of N messages) or turn by turn
//!   (`file_store_appended`: a journal of N / 3 entries); `file_store_full`: the load of
//!   the same N messages, not compacted, which the target compares them with;
//!   `file_store_history`: `SessionStore::history` of the compacted session saved once,
//!   everything read as asked.
//! - `list/file_store/SxM`: `FileSessionStore::list` of S stored sessions of M messages,
//!   repeated on one store (which reuses the summaries it decoded while their files are
//!   unchanged). `list/file_store_fresh/SxM`: the same on a store opened for each listing,
//!   which reads every summary file.
//!   `list/baseline_readdir_stat/SxM`: `readdir` + `stat` of every entry of the directory.
//!   Default: 1000x10, 1000x1000 and 100x10000 (1,000 sessions of 10,000 messages would be
//!   about 11 GB of snapshots, more than these machines' disk and time budget).
//! - `async_api/{save,load}_{sync,async}/N` (N = 10 and 1,000): the file store's full
//!   save (of a new session, as `save/file_store`) and load through the synchronous API,
//!   and through the async API (`SessionStore::into_async`: a `BlockingStore` on tokio's
//!   blocking pool) awaited with `Runtime::block_on` on a 2-worker runtime. A load's
//!   time is the call's: the snapshot it returns is dropped after the timing.
//!   `async_api/blocking_pool_hop`: `block_on` of a `spawn_blocking` that does nothing,
//!   the floor of one hop. The target (issue 16): async ≤ 1.1 × (sync + hop).
//!   `async_api/load_async_dropped/N`: the async load with its snapshot dropped in the
//!   timing, on the caller's thread: freeing there what a pool thread built costs more
//!   than the same free on the thread that built it (the memory was last written on
//!   another core; about 0.3 ms for 1,000 messages), a cost of any load made on another
//!   thread.
//! - `durability/{save,append_turn}/{sync,buffered}/1000`: a full save (of a new session,
//!   as `save/file_store`) and one more turn onto 1,000 messages with `Durability::Sync`
//!   (the default) and `Durability::Buffered`.
//!
//! N = 10, 100, 1,000 and 10,000. Every file is in the page cache when it is read; writes
//! go to the file system under the system temporary directory (`TMPDIR`), which should be
//! the disk being measured, not a tmpfs. Sessions built turn by turn for a benchmark are
//! saved with `Durability::Buffered`, which writes the same files faster.
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
//! scripts/bench-postgres postgres_turn        # one of them
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
#[path = "support/sessions.rs"]
#[allow(dead_code)] // each bench uses some of the helpers
mod sessions;
#[path = "support/workload.rs"]
mod workload;

use sessions::{
    compact_stored, save_turn_by_turn, snapshot, to_messages, with_turn, COMPACTED_VIEW,
};

use std::cell::{Cell, OnceCell, RefCell};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use agent_session::{
    AsyncSessionStore, Durability, FileSessionStore, MemorySessionStore, Message, Revision,
    RewindTo, SessionId, SessionSnapshot, SessionStore,
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

/// Saves session `id` of `transcript` into the store in `dir` as an agent does: its first
/// turn saved new (the base), then every later turn appended and saved (the journal).
/// Buffered, to build it quickly: the files are the same as with `Durability::Sync`.
fn save_turn_by_turn_in(dir: &Path, id: &str, transcript: Vec<Message>) -> SessionSnapshot {
    let store = FileSessionStore::builder()
        .durability(Durability::Buffered)
        .open(dir)
        .expect("open store");
    save_turn_by_turn(&store, id, transcript)
}

/// How many bytes the store holds of session `id` (for the file store, `<id>.json` +
/// `<id>.journal`).
fn stored_bytes(store: &dyn SessionStore, id: &SessionId) -> u64 {
    store
        .stored_bytes(id)
        .expect("stored bytes")
        .expect("the store measures its sessions")
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

/// Deletes session `id` if the store holds it.
fn delete_if_stored(store: &dyn SessionStore, id: &SessionId) {
    match store.delete(id) {
        Err(e) if !e.is_not_found() => panic!("delete session {id}: {e}"),
        _ => {}
    }
}

/// Timed: `snapshot` saved as a new session, which writes it whole (as a new base in the
/// file store). Untimed before each save, the session is deleted.
fn first_saves(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    store: &dyn SessionStore,
    snapshot: &SessionSnapshot,
) {
    group.bench_function(id, |b| {
        b.iter_batched(
            || delete_if_stored(store, snapshot.id()),
            |()| store.save(snapshot).expect("save"),
            BatchSize::PerIteration,
        );
    });
}

/// Edit saves between starts over (see `save/file_store_edit`).
const EDIT_RESTART_SAVES: usize = 8;

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
        first_saves(
            &mut group,
            BenchmarkId::new("file_store", n),
            &store,
            &first,
        );
        let raw_dir = dir.path().join("raw");
        std::fs::create_dir(&raw_dir).expect("mkdir");
        group.bench_with_input(BenchmarkId::new("baseline_atomic_write", n), &n, |b, _| {
            b.iter(|| raw_atomic_write(&raw_dir, &bytes));
        });
        // The same snapshot saved over the stored session it was not loaded from: one
        // entry holding every message, appended to the journal. Every few saves, untimed,
        // the session starts over (deleted and saved new), to keep the journal short.
        let stored = Cell::new(Revision::NEW);
        let saves = Cell::new(0_usize);
        group.bench_with_input(BenchmarkId::new("file_store_edit", n), &n, |b, _| {
            b.iter_batched(
                || {
                    if saves.get().is_multiple_of(EDIT_RESTART_SAVES) {
                        delete_if_stored(&store, first.id());
                        stored.set(store.save(&first).expect("save new"));
                    }
                    saves.set(saves.get() + 1);
                    first.clone().with_revision(stored.get())
                },
                |edit| stored.set(store.save(&edit).expect("save an edit")),
                BatchSize::PerIteration,
            );
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
        // The same messages saved turn by turn, as an agent leaves them: a base of the
        // first turn and a journal entry for every later one.
        let appended = save_turn_by_turn_in(dir.path(), "appended", snapshot.transcript().to_vec());
        assert_eq!(appended.transcript(), snapshot.transcript());
        group.throughput(Throughput::Bytes(stored_bytes(&store, appended.id())));
        settle();
        group.bench_with_input(BenchmarkId::new("file_store_appended", n), &n, |b, _| {
            b.iter(|| store.load(appended.id()).expect("load"));
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
        let memory = MemorySessionStore::new();
        let feeder = TurnFeeder::in_memory(
            &memory,
            snapshot("bench", to_messages(&wire_transcript(n))),
            turn.clone(),
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

/// The bytes `change` makes the file store add to session `bench` of 10 messages and a
/// turn: the size of the journal entry it appends, for its baseline.
fn entry_bytes(dir: &Path, turn: &[Message], change: impl FnOnce(&FileSessionStore)) -> usize {
    let store = FileSessionStore::open(dir).expect("open");
    let first = snapshot("bench", to_messages(&workload::transcript(10)));
    two_revisions(&store, &first, turn);
    let before = stored_bytes(&store, first.id());
    change(&store);
    let after = stored_bytes(&store, first.id());
    usize::try_from(after - before).expect("an entry's size fits in memory")
}

fn rewind(c: &mut Criterion) {
    let turn = to_messages(&wire_turn());
    let mut group = c.benchmark_group("rewind");
    pace(&mut group, false);
    let dir = tempfile::tempdir().expect("tempdir");
    let record = entry_bytes(&dir.path().join("size"), &turn, |store| {
        let id = SessionId::parse("bench").expect("id");
        let mut head = store.load(&id).expect("load");
        head.rewind(RewindTo::LastTurns(1)).expect("rewind");
        store.save(&head).expect("save the rewind");
    });
    group.throughput(Throughput::Bytes(record as u64));
    baseline_append_fdatasync(&mut group, dir.path(), &vec![b'r'; record]);
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

/// Turns appended before the session is rewound to its N messages.
const REWIND_TURNS: usize = 16;

/// Turns appended before the session starts over (deleted and saved anew), which bounds
/// its journal: 1,024 turns and 64 rewinds add about 3 MB.
const RESTART_TURNS: usize = 1_024;

/// Feeds "one more turn" saves: the session of N messages, loaded from the store and
/// extended by one turn per iteration, as an agent saving after each turn does.
///
/// Every save of a stored session appends an entry (the journal is never folded), so the
/// session cannot be put back to N messages by saving them again: that would append them
/// all to its history. Instead, every [`REWIND_TURNS`] turns, untimed, it is rewound to its
/// N messages and saved (one small entry, as a harness's `/undo` appends), so every
/// measured save adds one turn to a view of N to N + 45 messages. Every [`RESTART_TURNS`]
/// turns it starts over ([`start_over`](Self::start_over)): deleted, saved anew with its N
/// messages, loaded again, and given one turn (whose save creates the journal and syncs
/// the directory, which a session pays once), and the file systems are flushed.
///
/// Starting over every 16 turns instead (as this did until 2026-12) measured the file
/// system more than the save: writing and freeing a base of N messages (10 MB at 10,000)
/// left the file system's journal busy for the next few turns' `fdatasync`s even after a
/// `sync(1)` and a pause, so those turns took 2 to 4 times as long, and more so the larger
/// N was (measured with a probe timing each turn after a restart: about 900 µs for turns
/// 1 to 7 after a restart at 10,000 messages, 250 to 300 µs after them). A rewind writes a
/// few hundred bytes. (Starting over before every save would measure a save right after
/// reading N messages, whose caches that read has just flushed, not the save.)
struct TurnFeeder<'a> {
    store: &'a dyn SessionStore,
    base: SessionSnapshot,
    turn: Vec<Message>,
    current: RefCell<Option<SessionSnapshot>>,
    turns: Cell<usize>,
    /// Turns between rewinds to N messages ([`REWIND_TURNS`]).
    rewind: usize,
    /// Turns between starts over ([`RESTART_TURNS`]).
    restart: usize,
    /// Whether the store writes files: then the file systems are flushed after starting
    /// over ([`settle`]).
    on_disk: bool,
}

impl<'a> TurnFeeder<'a> {
    /// A feeder for a store that writes files.
    fn new(store: &'a dyn SessionStore, base: SessionSnapshot, turn: Vec<Message>) -> Self {
        TurnFeeder {
            store,
            base,
            turn,
            current: RefCell::new(None),
            turns: Cell::new(0),
            rewind: REWIND_TURNS,
            restart: RESTART_TURNS,
            on_disk: true,
        }
    }

    /// A feeder for a store in memory (nothing to flush when it starts over).
    fn in_memory(store: &'a dyn SessionStore, base: SessionSnapshot, turn: Vec<Message>) -> Self {
        TurnFeeder {
            on_disk: false,
            ..TurnFeeder::new(store, base, turn)
        }
    }

    /// `snapshot` one turn longer.
    fn extended(&self, snapshot: SessionSnapshot) -> SessionSnapshot {
        with_turn(snapshot, self.turn.clone())
    }

    /// Untimed: the session deleted, saved anew with its N messages, loaded as a harness
    /// resumes it, and one turn saved onto it.
    fn start_over(&self) -> SessionSnapshot {
        let id = self.base.id();
        delete_if_stored(self.store, id);
        self.store.save(&self.base).expect("save N messages");
        let loaded = self.store.load(id).expect("load N messages");
        let mut first = self.extended(loaded);
        self.save(&mut first);
        if self.on_disk {
            settle();
        }
        self.current
            .borrow_mut()
            .take()
            .expect("the first turn was saved")
    }

    /// Untimed: the next snapshot to save, one turn longer than the stored one.
    fn next(&self) -> SessionSnapshot {
        let current = self.current.borrow_mut().take();
        let turns = self.turns.get();
        let mut current = match current {
            Some(current) if turns < self.restart => current,
            _ => {
                self.turns.set(0);
                self.start_over()
            }
        };
        let turns = self.turns.get();
        let n = self.base.transcript().len();
        let due = turns > 0 && turns.is_multiple_of(self.rewind);
        if due && current.transcript().len() > n {
            current
                .rewind(RewindTo::Message(n))
                .expect("rewind to N messages");
            let revision = self.store.save(&current).expect("save the rewind");
            current = current.with_revision(revision);
        }
        self.turns.set(turns + 1);
        self.extended(current)
    }

    /// Timed: the save, and keeping the saved snapshot for the next turn (as a session
    /// does: the snapshot shares its messages, so this copies none).
    fn save(&self, next: &mut SessionSnapshot) {
        let revision = self.store.save(next).expect("save one more turn");
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

/// Session `snapshot` (N messages) saved new, then with one more turn: its two revisions.
fn two_revisions(
    store: &dyn SessionStore,
    snapshot: &SessionSnapshot,
    turn: &[Message],
) -> [Revision; 2] {
    let first = store.save(snapshot).expect("save N messages");
    let loaded = store.load(snapshot.id()).expect("load N messages");
    let second = store
        .save(&with_turn(loaded, turn.to_vec()))
        .expect("save a turn");
    [first, second]
}

/// `store.restore` of session `bench`, going back to each of `revisions` in turn: every
/// iteration appends one restore entry. One restore first, untimed: the file store's
/// first restore of a session in a process reads the log once.
fn restore_alternating(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    store: &dyn SessionStore,
    revisions: [Revision; 2],
) {
    let session = SessionId::parse("bench").expect("id");
    store.restore(&session, revisions[0]).expect("restore");
    let next = Cell::new(1);
    group.bench_function(id, |b| {
        b.iter(|| {
            let i = next.get();
            next.set(i + 1);
            store.restore(&session, revisions[i % 2]).expect("restore")
        });
    });
}

fn restore(c: &mut Criterion) {
    let turn = to_messages(&wire_turn());
    let mut group = c.benchmark_group("restore");
    pace(&mut group, false);
    let dir = tempfile::tempdir().expect("tempdir");
    let entry = entry_bytes(&dir.path().join("size"), &turn, |store| {
        let id = SessionId::parse("bench").expect("id");
        store.restore(&id, Revision::from_u64(1)).expect("restore");
    });
    group.throughput(Throughput::Bytes(entry as u64));
    baseline_append_fdatasync(&mut group, dir.path(), &vec![b'r'; entry]);
    for n in sizes() {
        pace(&mut group, n >= HEAVY_MESSAGES);
        let messages = to_messages(&wire_transcript(n));
        let store = FileSessionStore::open(dir.path().join(format!("store{n}"))).expect("open");
        let revisions = two_revisions(&store, &snapshot("bench", messages.clone()), &turn);
        settle();
        restore_alternating(
            &mut group,
            BenchmarkId::new("file_store", n),
            &store,
            revisions,
        );

        let memory = MemorySessionStore::new();
        let revisions = two_revisions(&memory, &snapshot("bench", messages.clone()), &turn);
        restore_alternating(
            &mut group,
            BenchmarkId::new("memory_store", n),
            &memory,
            revisions,
        );

        // What `Session::restore_from` and a save do: the revision loaded once (untimed),
        // then the head set back to it and saved.
        let revisions = two_revisions(&store, &snapshot("restore_from", messages), &turn);
        let id = SessionId::parse("restore_from").expect("id");
        let pasts = revisions.map(|revision| store.load_at(&id, revision).expect("load_at"));
        let head = RefCell::new(Some(store.load(&id).expect("load")));
        let next = Cell::new(0);
        settle();
        group.bench_function(BenchmarkId::new("file_store_restore_from", n), |b| {
            b.iter(|| {
                let i = next.get();
                next.set(i + 1);
                let mut restored = head.borrow_mut().take().expect("put back every iteration");
                restored.restore_from(&pasts[i % 2]).expect("restore_from");
                let revision = store.save(&restored).expect("save the restore");
                *head.borrow_mut() = Some(restored.with_revision(revision));
            });
        });
    }
    group.finish();
}

fn compacted_load(c: &mut Criterion) {
    let mut group = c.benchmark_group("compacted_load");
    // The largest size only (10,000 messages, or the transcript file's if it is long enough).
    let Some(n) = sizes()
        .into_iter()
        .max()
        .filter(|&n| n >= 2 * COMPACTED_VIEW)
    else {
        return;
    };
    pace(&mut group, true);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FileSessionStore::open(dir.path()).expect("open store");
    let messages = to_messages(&wire_transcript(n));
    let full = snapshot("full", messages.clone());
    store.save(&full).expect("save");
    store
        .save(&snapshot("compacted", messages.clone()))
        .expect("save");
    let view = compact_stored(&store, "compacted");
    save_turn_by_turn_in(dir.path(), "compacted_turns", messages);
    assert_eq!(compact_stored(&store, "compacted_turns"), view);
    eprintln!("compacted_load/{n}: views of {view} messages");
    settle();
    for (function, id) in [
        ("file_store_full", "full"),
        ("file_store", "compacted"),
        ("file_store_appended", "compacted_turns"),
    ] {
        let id = SessionId::parse(id).expect("id");
        group.throughput(Throughput::Bytes(stored_bytes(&store, &id)));
        group.bench_function(BenchmarkId::new(function, n), |b| {
            b.iter(|| store.load(&id).expect("load"));
        });
    }
    let id = SessionId::parse("compacted").expect("id");
    group.throughput(Throughput::Bytes(stored_bytes(&store, &id)));
    group.bench_function(BenchmarkId::new("file_store_history", n), |b| {
        b.iter(|| store.history(&id).expect("history"));
    });
    group.finish();
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
        first_saves(
            &mut group,
            BenchmarkId::new(format!("save/{label}"), N),
            &store,
            &base,
        );
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

/// The message counts of the async API benchmarks.
const ASYNC_SIZES: [usize; 2] = [10, 1_000];

fn async_api(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("async_api");
    pace(&mut group, false);
    group.bench_function("blocking_pool_hop", |b| {
        b.iter(|| {
            runtime
                .block_on(async { tokio::task::spawn_blocking(|| ()).await })
                .expect("hop");
        });
    });
    for n in ASYNC_SIZES {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(FileSessionStore::open(dir.path()).expect("open store"));
        let async_store = Arc::clone(&store).into_async();
        let snapshot = snapshot("bench", to_messages(&wire_transcript(n)));
        first_saves(
            &mut group,
            BenchmarkId::new("save_sync", n),
            &*store,
            &snapshot,
        );
        group.bench_function(BenchmarkId::new("save_async", n), |b| {
            b.iter_batched(
                || delete_if_stored(&*store, snapshot.id()),
                |()| runtime.block_on(async_store.save(&snapshot)).expect("save"),
                BatchSize::PerIteration,
            );
        });
        delete_if_stored(&*store, snapshot.id());
        store.save(&snapshot).expect("save");
        // The calls, without dropping what they return (after the timing): the
        // snapshot an async load returns was built on a pool thread, and freeing it on the
        // caller's thread costs more than freeing it where it was built (its memory was
        // last written on another core), which `load_async_dropped` measures on its own.
        group.bench_function(BenchmarkId::new("load_sync", n), |b| {
            b.iter_with_large_drop(|| store.load(snapshot.id()).expect("load"));
        });
        let load_async = || {
            runtime
                .block_on(async_store.load(snapshot.id()))
                .expect("load")
        };
        group.bench_function(BenchmarkId::new("load_async", n), |b| {
            b.iter_with_large_drop(load_async);
        });
        group.bench_function(BenchmarkId::new("load_async_dropped", n), |b| {
            b.iter(|| drop(load_async()));
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
    targets = save, load, append_turn, rewind, restore, compacted_load, list, durability, async_api
}

// PostgresSessionStore beside FileSessionStore (support/postgres.rs).
#[cfg(feature = "postgres")]
criterion_group! {
    name = postgres_benches;
    config = config();
    targets = postgres::save, postgres::load, postgres::append_turn, postgres::compacted_load,
        postgres::list
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
