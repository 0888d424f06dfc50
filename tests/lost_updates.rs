//! Lost updates (issue 4, item 5): read-modify-write saves of one session from two
//! processes, and from four threads (each with its own `FileSessionStore` on the same
//! directory, and all sharing one), must lose no update.
//!
//! Every writer loops: load, increment the `counter` metadata entry, save; on
//! `Error::Conflict` it starts again from the load. Each writer reports its attempts,
//! successes and conflicts, and the revision each success returned. The accounting then
//! requires, exactly:
//! - attempts = successes + conflicts, for every writer;
//! - the stored counter = the stored revision = all successes (the creating save included);
//! - the revisions the successes returned are 2, 3, ... that total, each exactly once.
//!
//! Negative control: a broken writer that, on a conflict, retries the save with the
//! revision the conflict reported instead of redoing the read-modify-write (so it bypasses
//! the compare-and-swap) must be caught by the same accounting as lost updates.
//!
//! `cargo test` runs 2 processes × 10,000 and 4 threads × 2,500 per variant;
//! `AGENT_SESSION_LONG=1` runs ten times as many.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use agent_session::{
    Error, FileSessionStore, Message, Revision, SessionId, SessionSnapshot, SessionStore,
};
use serde_json::json;

/// Tells the child test where the store is; without it the child returns at once.
const DIR_ENV: &str = "AGENT_SESSION_LOST_UPDATES_DIR";
/// How many increments the child makes.
const COUNT_ENV: &str = "AGENT_SESSION_LOST_UPDATES_COUNT";
/// `cas` (correct) or `stale-retry` (the broken writer of the negative control).
const MODE_ENV: &str = "AGENT_SESSION_LOST_UPDATES_MODE";
/// If set, the child opens a fresh store every this many increments (as separate runs of
/// a CLI do), so stores opened after the lock file was deleted meet stores opened before.
const REOPEN_ENV: &str = "AGENT_SESSION_LOST_UPDATES_REOPEN";
/// Set to `1` for the long run.
const LONG_ENV: &str = "AGENT_SESSION_LONG";
/// The child test's name, as libtest knows it.
const CHILD_TEST: &str = "lost_updates_child_increments";
const READY: &str = "child-ready";
const TALLY: &str = "tally";
const REVISIONS: &str = "revisions";

const SESSION: &str = "contended";
const MODEL: &str = "lost-updates-model";

const PROCESSES: usize = 2;
const PER_PROCESS: u64 = 10_000;
const THREADS: usize = 4;
const PER_THREAD: u64 = 2_500;
/// Each writer of the negative control makes this many increments.
const CONTROL_PER_WRITER: u64 = 1_000;
/// A writer that needs this many attempts for one increment is starved: a bug too.
const MAX_ATTEMPTS_PER_INCREMENT: u64 = 100_000;

fn long_run() -> bool {
    std::env::var(LONG_ENV).is_ok_and(|v| v == "1")
}

fn scaled(n: u64) -> u64 {
    if long_run() {
        n * 10
    } else {
        n
    }
}

fn session() -> SessionId {
    SessionId::parse(SESSION).expect("valid test id")
}

/// How a writer redoes a save that conflicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Correctly: load again and redo the increment.
    Cas,
    /// Deliberately broken: save the same increment again at the revision the conflict
    /// reported, overwriting whatever the other writer saved.
    StaleRetry,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Cas => "cas",
            Mode::StaleRetry => "stale-retry",
        }
    }
}

/// What one writer did.
#[derive(Debug, Default, Clone)]
struct Tally {
    attempts: u64,
    successes: u64,
    conflicts: u64,
    /// The revision each successful save returned.
    revisions: Vec<u64>,
}

/// The state with `counter`, saved by `writer`, ready to save over `revision`.
fn state(counter: u64, writer: &str, revision: Revision) -> SessionSnapshot {
    SessionSnapshot::builder(session(), MODEL)
        .metadata_entry("counter", json!(counter))
        .metadata_entry("last_writer", json!(writer))
        .transcript(vec![Message::user("count with me")])
        .build()
        .expect("build a state")
        .with_revision(revision)
}

fn counter_of(snapshot: &SessionSnapshot) -> u64 {
    snapshot.metadata()["counter"]
        .as_u64()
        .expect("the counter is an integer")
}

/// Creates the session with counter 1: the creating save is the first success.
fn create(store: &impl SessionStore) {
    store
        .save(&state(1, "creator", Revision::NEW))
        .expect("create the session");
}

/// Makes `increments` read-modify-write increments of the counter through `store`.
fn increment(store: &impl SessionStore, increments: u64, mode: Mode, writer: &str) -> Tally {
    let id = session();
    let mut tally = Tally::default();
    for _ in 0..increments {
        let mut current = store.load(&id).expect("load");
        let mut next = state(counter_of(&current) + 1, writer, current.revision());
        let first_attempt = tally.attempts;
        loop {
            assert!(
                tally.attempts - first_attempt < MAX_ATTEMPTS_PER_INCREMENT,
                "{writer} starved"
            );
            tally.attempts += 1;
            match store.save(&next) {
                Ok(revision) => {
                    assert_eq!(revision, next.revision().next(), "{writer}");
                    tally.successes += 1;
                    tally.revisions.push(revision.as_u64());
                    break;
                }
                Err(Error::Conflict { found, .. }) => {
                    tally.conflicts += 1;
                    match mode {
                        Mode::Cas => {
                            current = store.load(&id).expect("load");
                            next = state(counter_of(&current) + 1, writer, current.revision());
                        }
                        Mode::StaleRetry => {
                            let found = found.expect("the session exists");
                            next = next.with_revision(found);
                        }
                    }
                }
                Err(e) => panic!("{writer}: unexpected error {e:?}"),
            }
        }
    }
    tally
}

/// The accounting, shared by the real runs and the negative controls. `Ok` holds the
/// figures; `Err` says what does not add up.
fn account(store: &impl SessionStore, tallies: &[Tally]) -> Result<String, String> {
    for (i, t) in tallies.iter().enumerate() {
        if t.attempts != t.successes + t.conflicts {
            return Err(format!(
                "writer {i}: {} attempts but {} successes + {} conflicts",
                t.attempts, t.successes, t.conflicts
            ));
        }
        if t.revisions.len() as u64 != t.successes {
            return Err(format!("writer {i}: successes and revisions disagree"));
        }
    }
    // The creating save is a success too.
    let successes = 1 + tallies.iter().map(|t| t.successes).sum::<u64>();
    let conflicts: u64 = tallies.iter().map(|t| t.conflicts).sum();
    let attempts: u64 = tallies.iter().map(|t| t.attempts).sum();
    let stored = store.load(&session()).map_err(|e| format!("load: {e:?}"))?;
    let counter = counter_of(&stored);
    if counter != successes {
        return Err(format!(
            "lost updates: counter {counter} after {successes} successful saves \
             ({} increments lost; {conflicts} conflicts)",
            successes.saturating_sub(counter)
        ));
    }
    if stored.revision().as_u64() != successes {
        return Err(format!(
            "revision {} after {successes} successful saves",
            stored.revision()
        ));
    }
    let mut revisions: Vec<u64> = tallies.iter().flat_map(|t| t.revisions.clone()).collect();
    revisions.sort_unstable();
    if revisions != (2..=successes).collect::<Vec<u64>>() {
        return Err("the successes did not return revisions 2..=total, each once".to_owned());
    }
    Ok(format!(
        "writers {}, attempts {attempts}, successes {successes} (creation included), \
         conflicts {conflicts}, counter {counter}, revision {}",
        tallies.len(),
        stored.revision()
    ))
}

// ---------------------------------------------------------------------------------------
// Processes.
// ---------------------------------------------------------------------------------------

/// Runs in a child process started by the process tests; without [`DIR_ENV`] it returns at
/// once. Opens the store, says it is ready, waits for a line on stdin, increments, and
/// prints its tally.
#[test]
#[ignore = "run in a child process by the process tests in this file"]
fn lost_updates_child_increments() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let increments: u64 = std::env::var(COUNT_ENV)
        .expect("count")
        .parse()
        .expect("count is a number");
    let mode = match std::env::var(MODE_ENV).expect("mode").as_str() {
        "cas" => Mode::Cas,
        "stale-retry" => Mode::StaleRetry,
        other => panic!("unknown mode {other}"),
    };
    let reopen_every: Option<u64> = std::env::var(REOPEN_ENV)
        .ok()
        .map(|n| n.parse().expect("reopen is a number"));
    let store = FileSessionStore::open(&dir).expect("the child opens the store");
    let writer = format!("process-{}", std::process::id());
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY}").expect("write");
    out.flush().expect("flush");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("wait for go");
    let tally = match reopen_every {
        None => increment(&store, increments, mode, &writer),
        Some(every) => {
            drop(store);
            let mut tally = Tally::default();
            let mut left = increments;
            while left > 0 {
                let batch = left.min(every);
                let store = FileSessionStore::open(&dir).expect("the child opens the store");
                let part = increment(&store, batch, mode, &writer);
                tally.attempts += part.attempts;
                tally.successes += part.successes;
                tally.conflicts += part.conflicts;
                tally.revisions.extend(part.revisions);
                left -= batch;
            }
            tally
        }
    };
    let revisions: Vec<String> = tally.revisions.iter().map(u64::to_string).collect();
    writeln!(out, "{REVISIONS} {}", revisions.join(" ")).expect("write");
    writeln!(
        out,
        "{TALLY} {} {} {}",
        tally.attempts, tally.successes, tally.conflicts
    )
    .expect("write");
    out.flush().expect("flush");
}

/// A running child: its stdin, and its stdout lines as they arrive.
struct Running {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    reader: JoinHandle<()>,
    stderr: JoinHandle<String>,
}

fn start_child(dir: &Path, increments: u64, mode: Mode, reopen_every: Option<u64>) -> Running {
    let exe = std::env::current_exe().expect("current test binary");
    let mut command = Command::new(exe);
    if let Some(every) = reopen_every {
        command.env(REOPEN_ENV, every.to_string());
    }
    let mut child = command
        .args([
            CHILD_TEST,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .env(COUNT_ENV, increments.to_string())
        .env(MODE_ENV, mode.name())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the child");
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let (tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    Running {
        child,
        stdin,
        lines,
        reader,
        stderr,
    }
}

/// Starts `PROCESSES` children together (each waits until all are ready) and returns
/// their tallies.
fn run_processes(dir: &Path, increments: u64, mode: Mode) -> Vec<Tally> {
    run_processes_reopening(dir, increments, mode, None)
}

/// [`run_processes`], each child opening a fresh store every `reopen_every` increments.
fn run_processes_reopening(
    dir: &Path,
    increments: u64,
    mode: Mode,
    reopen_every: Option<u64>,
) -> Vec<Tally> {
    let mut children: Vec<Running> = (0..PROCESSES)
        .map(|_| start_child(dir, increments, mode, reopen_every))
        .collect();
    for running in &children {
        let ready = running.lines.iter().any(|line| line.ends_with(READY));
        assert!(ready, "a child ended before it was ready");
    }
    for running in &mut children {
        writeln!(running.stdin, "go").expect("tell the child to go");
        running.stdin.flush().expect("flush");
    }
    children
        .into_iter()
        .map(|mut running| {
            let status = running.child.wait().expect("wait for the child");
            running.reader.join().expect("stdout reader");
            let stderr = running.stderr.join().expect("stderr reader");
            let lines: Vec<String> = running.lines.try_iter().collect();
            assert!(
                status.success(),
                "the child failed ({status})\nstdout:\n{}\nstderr:\n{stderr}",
                lines.join("\n")
            );
            parse_tally(&lines)
        })
        .collect()
}

fn parse_tally(lines: &[String]) -> Tally {
    let mut tally = None;
    let mut revisions = None;
    for line in lines {
        let mut words = line.split(' ');
        match words.next() {
            Some(TALLY) => {
                let numbers: Vec<u64> = words.map(|w| w.parse().expect("a number")).collect();
                tally = Some((numbers[0], numbers[1], numbers[2]));
            }
            Some(REVISIONS) => {
                revisions = Some(
                    words
                        .filter(|w| !w.is_empty())
                        .map(|w| w.parse().expect("a revision"))
                        .collect::<Vec<u64>>(),
                );
            }
            _ => {}
        }
    }
    let (attempts, successes, conflicts) = tally.expect("the child printed its tally");
    Tally {
        attempts,
        successes,
        conflicts,
        revisions: revisions.expect("the child printed its revisions"),
    }
}

#[test]
fn two_processes_read_modify_write_one_session_and_lose_no_update() {
    let increments = scaled(PER_PROCESS);
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    create(&store);
    let started = Instant::now();
    let tallies = run_processes(store.dir(), increments, Mode::Cas);
    let elapsed = started.elapsed();
    for tally in &tallies {
        assert_eq!(tally.successes, increments, "{tally:?}");
    }
    let figures = account(&store, &tallies).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "lost_updates processes: {PROCESSES} x {increments}: {figures}, per process \
         (attempts/successes/conflicts) {:?}, in {:.1} s",
        tallies
            .iter()
            .map(|t| (t.attempts, t.successes, t.conflicts))
            .collect::<Vec<_>>(),
        elapsed.as_secs_f64()
    );
    assert!(
        tallies.iter().map(|t| t.conflicts).sum::<u64>() > 0,
        "the processes never contended, so nothing was tested"
    );
}

/// Issue 12, item 1: deleting `.lock` while the writers run (a user cleaning a "stale" lock,
/// a tmp cleaner) must not let two writers hold the lock at once. The test deletes the lock
/// file every millisecond while two processes increment, each opening a fresh store every
/// 25 increments (as separate runs of a CLI do), so stores that opened the deleted file
/// meet stores that created a new one. The negative control of the lock itself is in
/// `src/store/lock_tests.rs`.
#[test]
fn two_processes_lose_no_update_while_the_lock_file_is_deleted_again_and_again() {
    let increments = scaled(PER_PROCESS / 4);
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    create(&store);
    let lock = tmp.path().join(".lock");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (tallies, deletions) = std::thread::scope(|scope| {
        let deleter = scope.spawn(|| {
            let mut deletions = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if std::fs::remove_file(&lock).is_ok() {
                    deletions += 1;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            deletions
        });
        let tallies = run_processes_reopening(store.dir(), increments, Mode::Cas, Some(25));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (tallies, deleter.join().expect("the deleting thread"))
    });
    let figures = account(&store, &tallies).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "lost_updates processes with the lock file deleted {deletions} times: \
         {PROCESSES} x {increments}: {figures}"
    );
    assert!(
        deletions > 10,
        "the lock file was hardly deleted, so nothing was tested"
    );
    assert!(
        tallies.iter().map(|t| t.conflicts).sum::<u64>() > 0,
        "the processes never contended, so nothing was tested"
    );
}

#[test]
fn negative_control_stale_retry_across_processes_is_caught_as_lost_updates() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    create(&store);
    let tallies = run_processes(store.dir(), CONTROL_PER_WRITER, Mode::StaleRetry);
    let conflicts: u64 = tallies.iter().map(|t| t.conflicts).sum();
    let verdict = account(&store, &tallies);
    eprintln!("lost_updates process control ({conflicts} conflicts): {verdict:?}");
    let err = verdict.expect_err("the accounting missed a writer that bypasses the CAS");
    assert!(err.starts_with("lost updates"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Threads.
// ---------------------------------------------------------------------------------------

/// Runs `THREADS` writers on `dir`: each with its own store instance, or all sharing one.
fn run_threads(dir: &Path, increments: u64, mode: Mode, shared: bool) -> Vec<Tally> {
    let common = FileSessionStore::open(dir).expect("open");
    let barrier = std::sync::Barrier::new(THREADS);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (common, barrier) = (&common, &barrier);
                scope.spawn(move || {
                    let writer = format!("thread-{t}");
                    if shared {
                        barrier.wait();
                        increment(common, increments, mode, &writer)
                    } else {
                        let own = FileSessionStore::open(dir).expect("open");
                        barrier.wait();
                        increment(&own, increments, mode, &writer)
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect()
    })
}

fn threads_lose_no_update(shared: bool) {
    let increments = scaled(PER_THREAD);
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    create(&store);
    let started = Instant::now();
    let tallies = run_threads(store.dir(), increments, Mode::Cas, shared);
    let elapsed = started.elapsed();
    for tally in &tallies {
        assert_eq!(tally.successes, increments, "{tally:?}");
    }
    let figures = account(&store, &tallies).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "lost_updates threads ({}): {THREADS} x {increments}: {figures}, in {:.1} s",
        if shared {
            "one shared store"
        } else {
            "a store each"
        },
        elapsed.as_secs_f64()
    );
    assert!(
        tallies.iter().map(|t| t.conflicts).sum::<u64>() > 0,
        "the threads never contended, so nothing was tested"
    );
}

#[test]
fn threads_with_a_store_each_read_modify_write_one_session_and_lose_no_update() {
    threads_lose_no_update(false);
}

#[test]
fn threads_sharing_one_store_read_modify_write_one_session_and_lose_no_update() {
    threads_lose_no_update(true);
}

#[test]
fn negative_control_stale_retry_across_threads_is_caught_as_lost_updates() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    create(&store);
    let tallies = run_threads(store.dir(), CONTROL_PER_WRITER / 4, Mode::StaleRetry, false);
    let conflicts: u64 = tallies.iter().map(|t| t.conflicts).sum();
    let verdict = account(&store, &tallies);
    eprintln!("lost_updates thread control ({conflicts} conflicts): {verdict:?}");
    let err = verdict.expect_err("the accounting missed a writer that bypasses the CAS");
    assert!(err.starts_with("lost updates"), "{err}");
}

/// The accounting itself: a clean run adds up, and each kind of discrepancy is named.
#[test]
fn accounting_rejects_each_kind_of_discrepancy() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    create(&store);
    let good = increment(&store, 3, Mode::Cas, "solo");
    assert_eq!((good.attempts, good.successes, good.conflicts), (3, 3, 0));
    account(&store, std::slice::from_ref(&good)).expect("a clean run adds up");

    let mut miscounted = good.clone();
    miscounted.attempts += 1;
    assert!(account(&store, &[miscounted])
        .expect_err("attempts")
        .contains("attempts"));
    // A success the store does not show: an update lost.
    let mut phantom = good.clone();
    phantom.successes += 1;
    phantom.revisions.push(5);
    phantom.attempts += 1;
    assert!(account(&store, &[phantom])
        .expect_err("phantom")
        .starts_with("lost updates"));
    // Two successes claiming one revision.
    let mut duplicate = good;
    duplicate.revisions[2] = 3;
    assert!(account(&store, &[duplicate])
        .expect_err("duplicate")
        .contains("each once"));
}

/// A load never gives up on a session that writers keep rewriting: reads take no lock and
/// start again when a save replaces the snapshot under them, and after a few such
/// attempts the store reads under its write lock instead of reporting the session as
/// unreadable. (Before, two processes rewriting one session back to back made a load fail
/// now and then with "the session kept changing while it was read".) This is the
/// real-threads companion of the deterministic
/// `store::file::tests::fault_injection::a_load_that_keeps_losing_to_rewrites_reads_under_the_lock_instead_of_failing`,
/// which forces every lock-free attempt to lose.
#[test]
fn loads_racing_back_to_back_rewrites_always_succeed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let writer_store = agent_session::FileSessionStore::builder()
        .durability(agent_session::Durability::Buffered)
        .open(dir.path())
        .expect("open");
    let reader_store = FileSessionStore::open(dir.path()).expect("open");
    writer_store
        .save(&state(0, "w", Revision::NEW))
        .expect("first save");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (loads, rewrites) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut revision = Revision::from_u64(1);
            let mut rewrites = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A builder snapshot is always written whole: the base is replaced.
                revision = writer_store
                    .save(&state(revision.as_u64(), "w", revision))
                    .expect("rewrite");
                rewrites += 1;
            }
            rewrites
        });
        let mut loads = 0u64;
        let started = Instant::now();
        while loads < 2_000 || started.elapsed().as_millis() < 200 {
            let loaded = reader_store.load(&session());
            assert!(loaded.is_ok(), "load {loads} failed: {loaded:?}");
            loads += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (loads, writer.join().expect("writer"))
    });
    assert!(rewrites > 0, "the writer never ran");
    eprintln!("{loads} loads while {rewrites} rewrites replaced the snapshot: all succeeded");
}
