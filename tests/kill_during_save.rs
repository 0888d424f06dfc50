//! SIGKILL during saves (issue 4, item 2).
//!
//! The parent test starts this same test binary again to run only
//! [`kill_child_saves_until_killed`], which opens a `FileSessionStore` and runs several saver
//! threads: each saves its own session and, in turn, one session shared by all of them
//! (read-modify-write, retried on conflict). Every snapshot carries a counter (in its
//! metadata, equal to its revision) and a 10-200 KB payload derived from the counter, so a
//! mix of two states is detectable. After each `Ok` save the child prints
//! `saved <id> <counter>` (an acknowledgement).
//!
//! The parent kills the child with SIGKILL a random 0-20 ms after it reports that it started,
//! reusing one store directory across kills so states accumulate, and after every kill
//! opens the store (which removes leftover temporary files) and checks that:
//! - every session loads, and is internally consistent (payload and end marker derived
//!   from the counter, counter equal to revision): the old or the new state, never a mix,
//!   never unreadable; nothing is listed as unreadable and no temporary file survives;
//! - no counter ever goes backwards across kills;
//! - no acknowledged save is lost: the stored counter is at least the last one the child
//!   acknowledged before it died.
//!
//! `cargo test` runs 500 kills; `AGENT_SESSION_LONG=1` runs 5,000. `AGENT_SESSION_SEED=<n>`
//! replays a run's kill delays (the seed is printed with the figures).
//!
//! Negative control: in `torn` mode the child writes each snapshot in place, non-atomically
//! (truncate, first half, a short sleep, second half); the same checker must report a torn
//! or unreadable state within the same kill budget.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agent_session::{
    ContentBlock, FileSessionStore, Message, Result as StoreResult, Revision, SessionId,
    SessionSnapshot, SessionStore,
};
use serde_json::json;

/// Tells the child test where the store is; without it the child returns at once.
const DIR_ENV: &str = "AGENT_SESSION_KILL_CHILD_DIR";
/// Tells the child how to write: `atomic` (the store's save) or `torn` (the broken writer).
const MODE_ENV: &str = "AGENT_SESSION_KILL_CHILD_MODE";
/// Set to `1` for the long run.
const LONG_ENV: &str = "AGENT_SESSION_LONG";
/// Replays a run's random kill delays.
const SEED_ENV: &str = "AGENT_SESSION_SEED";
/// The child test's name, as libtest knows it.
const CHILD_TEST: &str = "kill_child_saves_until_killed";
/// What the child prints once its savers are about to start.
const STARTED: &str = "child-started";

/// Saver threads in the child; thread `t` owns session `own-t`.
const SAVERS: usize = 3;
/// The session every saver also writes.
const SHARED: &str = "shared";
const MODEL: &str = "kill-test-model";

const DEFAULT_KILLS: usize = 500;
const LONG_KILLS: usize = 5_000;
/// The control must be caught within this many kills.
const CONTROL_BUDGET: usize = 500;
/// Kills land a uniformly random 0..=20 ms after the child reports it started.
const MAX_DELAY_MICROS: u64 = 20_000;
/// A child still running this long after it started was never killed: it exits by itself.
const CHILD_LIFETIME: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------
// The state a save writes: everything derived from the counter.
// ---------------------------------------------------------------------------------------

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).expect("test ids are valid")
}

/// Every session the child writes.
fn session_ids() -> Vec<SessionId> {
    let mut ids: Vec<SessionId> = (0..SAVERS).map(|t| sid(&format!("own-{t}"))).collect();
    ids.push(sid(SHARED));
    ids
}

/// The payload of state `counter`: 10 KB to 200 KB, every byte determined by the counter.
fn payload(counter: u64) -> String {
    let len = 10_000 + usize::try_from(counter.wrapping_mul(7_919) % 190_000).expect("fits");
    let unit = format!("{counter:016x}|");
    unit.repeat(len / unit.len() + 1)[..len].to_owned()
}

fn end_marker(counter: u64) -> String {
    format!("end of state {counter}")
}

/// State `counter` of session `id`, ready to save over `revision`.
fn state(id: &SessionId, counter: u64, revision: Revision) -> SessionSnapshot {
    SessionSnapshot::builder(id.clone(), MODEL)
        .metadata_entry("counter", json!(counter))
        .transcript(vec![
            Message::user(payload(counter)),
            Message::assistant(vec![ContentBlock::text(end_marker(counter))]),
        ])
        .build()
        .expect("build a state")
        .with_revision(revision)
}

/// The counter of a loaded state, after checking the state is exactly state `counter`
/// (so a mix of two states, or anything else, is an error).
fn verify_state(snapshot: &SessionSnapshot) -> Result<u64, String> {
    let id = snapshot.id();
    let counter = snapshot
        .metadata()
        .get("counter")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("{id}: no integer counter in {:?}", snapshot.metadata()))?;
    if snapshot.revision().as_u64() != counter {
        return Err(format!(
            "{id}: counter {counter} but revision {}",
            snapshot.revision()
        ));
    }
    let texts: Vec<String> = snapshot.transcript().iter().map(Message::text).collect();
    if texts.len() != 2 {
        return Err(format!("{id}: {} messages, expected 2", texts.len()));
    }
    if texts[0] != payload(counter) {
        return Err(format!(
            "{id}: the payload ({} bytes) is not the payload of state {counter}",
            texts[0].len()
        ));
    }
    if texts[1] != end_marker(counter) {
        return Err(format!(
            "{id}: end marker {:?} does not match state {counter}",
            texts[1]
        ));
    }
    Ok(counter)
}

// ---------------------------------------------------------------------------------------
// The child.
// ---------------------------------------------------------------------------------------

/// Runs in a child process started by the tests below; without [`DIR_ENV`] it returns at
/// once. Saves until killed (or, if nobody kills it, for [`CHILD_LIFETIME`]).
#[test]
#[ignore = "run in a child process, killed with SIGKILL, by the tests in this file"]
fn kill_child_saves_until_killed() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let torn = std::env::var(MODE_ENV).is_ok_and(|mode| mode == "torn");
    let store = FileSessionStore::open(&dir).expect("the child opens the store");
    let deadline = Instant::now() + CHILD_LIFETIME;
    // STARTED goes out once every saver has loaded its state and is about to save, so the
    // kill delays measure from the first save.
    let ready = std::sync::Barrier::new(SAVERS + 1);
    std::thread::scope(|scope| {
        for own in session_ids().into_iter().take(SAVERS) {
            let (store, ready) = (&store, &ready);
            scope.spawn(move || {
                let shared = sid(SHARED);
                // Only this thread writes `own`: load it once, then count on.
                let mut own_state = load_state(store, &own, torn);
                ready.wait();
                // Saves queue on the store's lock and a child lives about one save, so
                // each saver starts with its own or the shared session at random: every
                // session gets written early in some children's lives.
                let mut shared_turn = random_bit();
                while Instant::now() < deadline {
                    if shared_turn {
                        save_next(store, &shared, torn);
                    } else {
                        own_state = save_own(store, &own, own_state, torn);
                    }
                    shared_turn = !shared_turn;
                }
            });
        }
        ready.wait();
        announce(STARTED);
    });
}

/// A random bit, different in each call and each process (std's hash keys are random).
fn random_bit() -> bool {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        & 1
        == 1
}

/// Prints one line and flushes it, so the parent has it before any later kill.
fn announce(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("write to the parent");
    out.flush().expect("flush to the parent");
}

/// The counter and revision stored for `id` (0 and NEW if there is none).
fn load_state(store: &FileSessionStore, id: &SessionId, torn: bool) -> (u64, Revision) {
    loop {
        match store.load(id) {
            Ok(current) => {
                let counter = verify_state(&current).expect("the child loads a consistent state");
                return (counter, current.revision());
            }
            Err(e) if e.is_not_found() => return (0, Revision::NEW),
            // The broken writer's files are read half-written by its other threads.
            Err(_) if torn => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("the child could not load {id}: {e:?}"),
        }
    }
}

/// Saves the state after `(counter, revision)` of `id`, which only this thread writes, and
/// acknowledges it. Returns the new counter and revision.
fn save_own(
    store: &FileSessionStore,
    id: &SessionId,
    (counter, revision): (u64, Revision),
    torn: bool,
) -> (u64, Revision) {
    let saved = write(store, &state(id, counter + 1, revision), torn)
        .unwrap_or_else(|e| panic!("the child could not save {id}: {e:?}"));
    announce(&format!("saved {id} {}", counter + 1));
    (counter + 1, saved)
}

/// Loads `id`, saves the next state, retrying on conflict, and acknowledges the save.
fn save_next(store: &FileSessionStore, id: &SessionId, torn: bool) {
    loop {
        let (counter, revision) = load_state(store, id, torn);
        match write(store, &state(id, counter + 1, revision), torn) {
            Ok(_) => {
                announce(&format!("saved {id} {}", counter + 1));
                return;
            }
            Err(e) if e.is_conflict() => {}
            Err(e) => panic!("the child could not save {id}: {e:?}"),
        }
    }
}

/// Saves with the store, or with the broken writer in `torn` mode.
fn write(
    store: &FileSessionStore,
    snapshot: &SessionSnapshot,
    torn: bool,
) -> StoreResult<Revision> {
    if torn {
        save_torn(store, snapshot)
    } else {
        store.save(snapshot)
    }
}

/// The deliberately broken writer of the negative control: overwrites `<id>.json` in
/// place, in two halves with a pause between them, without a lock or a revision check.
fn save_torn(store: &FileSessionStore, snapshot: &SessionSnapshot) -> StoreResult<Revision> {
    let revision = snapshot.revision().next();
    let bytes = snapshot.to_json_with_revision(revision)?;
    let (first, second) = bytes.split_at(bytes.len() / 2);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(store.path_of(snapshot.id()))
        .expect("the broken writer opens the snapshot in place");
    file.write_all(first).expect("write the first half");
    std::thread::sleep(Duration::from_millis(2));
    file.write_all(second).expect("write the second half");
    Ok(revision)
}

// ---------------------------------------------------------------------------------------
// The parent: start, kill, check.
// ---------------------------------------------------------------------------------------

/// splitmix64: enough randomness for kill delays, and replayable from a printed seed.
struct Rng(u64);

impl Rng {
    fn from_env_or_clock() -> Self {
        let seed = std::env::var(SEED_ENV).ok().map_or_else(
            || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0x5eed, |d| {
                        u64::try_from(d.as_nanos() % u128::from(u64::MAX)).expect("fits")
                    })
            },
            |s| s.parse().expect("AGENT_SESSION_SEED is a u64"),
        );
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below_or_equal(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }
}

/// What one child said before it was killed.
struct Killed {
    /// The last counter the child acknowledged, per session id.
    acked: BTreeMap<String, u64>,
    /// How many saves it acknowledged.
    saves: u64,
}

/// Starts the child on `dir` in `mode`, kills it with SIGKILL after a random delay, and
/// returns its acknowledgements.
fn run_and_kill(dir: &Path, mode: &str, rng: &mut Rng) -> Killed {
    let exe = std::env::current_exe().expect("current test binary");
    let mut child = Command::new(exe)
        .args([
            CHILD_TEST,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .env(MODE_ENV, mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let (lines_tx, lines) = mpsc::channel();
    let reader: JoinHandle<()> = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });

    let mut early = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            // libtest may print "test <name> ... " on the same line first.
            Ok(line) if line.ends_with(STARTED) => break true,
            Ok(line) => early.push(line),
            Err(_) => break false,
        }
    };
    if started {
        std::thread::sleep(Duration::from_micros(rng.below_or_equal(MAX_DELAY_MICROS)));
    }
    child.kill().expect("kill the child");
    let status = child.wait().expect("reap the child");
    reader.join().expect("stdout reader");
    let stderr = errors.join().expect("stderr reader");
    let said: Vec<String> = early.into_iter().chain(lines.try_iter()).collect();
    assert!(
        started && status.signal() == Some(libc::SIGKILL),
        "the child did not run until killed (started: {started}, status: {status})\n\
         stdout:\n{}\nstderr:\n{stderr}",
        said.join("\n")
    );

    let mut acked = BTreeMap::new();
    let mut saves = 0;
    for line in &said {
        let mut words = line.split(' ');
        if let (Some("saved"), Some(id), Some(counter), None) =
            (words.next(), words.next(), words.next(), words.next())
        {
            // A line cut short by the kill could only read as a smaller counter, which
            // weakens nothing.
            let Ok(counter) = counter.parse::<u64>() else {
                continue;
            };
            saves += 1;
            let last = acked.entry(id.to_owned()).or_insert(0);
            *last = (*last).max(counter);
        }
    }
    Killed { acked, saves }
}

/// What the checker found wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Violation {
    /// A session (or the store) could not be read.
    Unreadable,
    /// A session loaded but is not exactly one state: a mix of two.
    Mixed,
    /// A counter went back, or an acknowledged save is gone.
    Lost,
}

/// Checks the store after each kill and keeps the figures.
#[derive(Default)]
struct Checker {
    /// The highest counter seen stored so far, per session id.
    seen: BTreeMap<String, u64>,
    kills: usize,
    sessions_checked: usize,
    acknowledged_saves: u64,
    /// Temporary files found after a kill (a kill that landed mid-save), before the store
    /// removed them.
    temp_files_left: usize,
    kills_leaving_temp_files: usize,
}

impl Checker {
    /// Checks the store in `dir` after a kill whose child acknowledged `killed`.
    fn check(&mut self, dir: &Path, killed: &Killed) -> Result<(), (Violation, String)> {
        self.kills += 1;
        self.acknowledged_saves += killed.saves;
        let temps = temp_files(dir);
        self.temp_files_left += temps.len();
        if !temps.is_empty() {
            self.kills_leaving_temp_files += 1;
        }
        let store = FileSessionStore::open(dir)
            .map_err(|e| (Violation::Unreadable, format!("open: {e:?}")))?;
        let still = temp_files(dir);
        if !still.is_empty() {
            return Err((
                Violation::Unreadable,
                format!("temporary files survive opening: {still:?}"),
            ));
        }
        let listing = store
            .list()
            .map_err(|e| (Violation::Unreadable, format!("list: {e:?}")))?;
        if !listing.unreadable.is_empty() {
            return Err((
                Violation::Unreadable,
                format!("unreadable entries: {:?}", listing.unreadable),
            ));
        }
        let mut found = 0;
        for id in session_ids() {
            let key = id.as_str().to_owned();
            let acked = killed.acked.get(&key).copied();
            let seen = self.seen.get(&key).copied();
            let counter = match store.load(&id) {
                Ok(snapshot) => verify_state(&snapshot).map_err(|e| (Violation::Mixed, e))?,
                Err(e) if e.is_not_found() => {
                    if acked.is_some() || seen.is_some() {
                        return Err((
                            Violation::Lost,
                            format!("{id} is gone (acknowledged {acked:?}, seen before {seen:?})"),
                        ));
                    }
                    continue;
                }
                Err(e) => {
                    return Err((Violation::Unreadable, format!("{id} does not load: {e:?}")))
                }
            };
            found += 1;
            if let Some(seen) = seen {
                if counter < seen {
                    return Err((
                        Violation::Lost,
                        format!("{id} went back from state {seen} to state {counter}"),
                    ));
                }
            }
            if let Some(acked) = acked {
                if counter < acked {
                    return Err((
                        Violation::Lost,
                        format!("{id}: acknowledged save {acked} lost, state {counter} stored"),
                    ));
                }
            }
            self.seen.insert(key, counter);
            self.sessions_checked += 1;
        }
        if listing.sessions.len() != found {
            return Err((
                Violation::Unreadable,
                format!("{} sessions listed, {found} loaded", listing.sessions.len()),
            ));
        }
        Ok(())
    }

    fn max_counter(&self) -> u64 {
        self.seen.values().copied().max().unwrap_or(0)
    }

    fn figures(&self) -> String {
        let mut line = format!(
            "kills {}, sessions checked {}, acknowledged saves {}, max counter {}, \
             kills that left temp files {} ({} files), per session:",
            self.kills,
            self.sessions_checked,
            self.acknowledged_saves,
            self.max_counter(),
            self.kills_leaving_temp_files,
            self.temp_files_left,
        );
        for (id, counter) in &self.seen {
            let _ = write!(line, " {id}={counter}");
        }
        line
    }
}

/// Names of temporary files (`.<id>.<random>.tmp`) in `dir`.
fn temp_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .expect("read the store directory")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| {
            name.starts_with('.') && Path::new(name).extension() == Some(OsStr::new("tmp"))
        })
        .collect()
}

fn kill_budget() -> usize {
    if std::env::var(LONG_ENV).is_ok_and(|v| v == "1") {
        LONG_KILLS
    } else {
        DEFAULT_KILLS
    }
}

#[test]
fn sigkill_during_concurrent_saves_leaves_old_or_new_state_and_loses_no_acknowledged_save() {
    let kills = kill_budget();
    let mut rng = Rng::from_env_or_clock();
    let seed = rng.0;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("store");
    FileSessionStore::open(&dir).expect("create the store");
    let started = Instant::now();
    let mut checker = Checker::default();
    for round in 1..=kills {
        let killed = run_and_kill(&dir, "atomic", &mut rng);
        if let Err((kind, violation)) = checker.check(&dir, &killed) {
            panic!("after kill {round} of {kills} (seed {seed}): {kind:?}: {violation}");
        }
    }
    eprintln!(
        "kill_during_save: {} in {:.1} s (seed {seed})",
        checker.figures(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(checker.kills, kills);
    // The kills hit a store that was really being written...
    assert_eq!(
        checker.seen.len(),
        SAVERS + 1,
        "not every session was ever saved"
    );
    assert!(
        checker.acknowledged_saves >= (kills / 50) as u64,
        "too few saves between kills: {}",
        checker.figures()
    );
    // ...and some of them landed in the middle of a save.
    assert!(
        checker.kills_leaving_temp_files > 0,
        "no kill interrupted a save: {}",
        checker.figures()
    );
}

#[test]
fn negative_control_torn_in_place_writer_is_caught_by_the_same_checker() {
    let mut rng = Rng::from_env_or_clock();
    let seed = rng.0;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("store");
    FileSessionStore::open(&dir).expect("create the store");
    let mut checker = Checker::default();
    let mut caught = None;
    for round in 1..=CONTROL_BUDGET {
        let killed = run_and_kill(&dir, "torn", &mut rng);
        if let Err((kind, violation)) = checker.check(&dir, &killed) {
            caught = Some((round, kind, violation));
            break;
        }
    }
    let Some((round, kind, violation)) = caught else {
        panic!(
            "the checker missed a non-atomic writer in {CONTROL_BUDGET} kills (seed {seed}): {}",
            checker.figures()
        );
    };
    eprintln!(
        "kill_during_save control: torn writer caught after kill {round} \
         (seed {seed}): {kind:?}: {violation}"
    );
    // A torn write shows up as a state that cannot be read or is not one whole state.
    assert!(
        matches!(kind, Violation::Unreadable | Violation::Mixed),
        "{kind:?}: {violation}"
    );
}
