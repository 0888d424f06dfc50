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
//!   never unreadable; nothing is listed as unreadable, every listed summary is that of
//!   the state that loads, and no temporary file survives;
//! - no counter ever goes backwards across kills;
//! - no acknowledged save is lost: the stored counter is at least the last one the child
//!   acknowledged before it died.
//!
//! `cargo test` runs 500 kills (250 in journal mode, below); `AGENT_SESSION_LONG=1` runs
//! 5,000 (2,500). `AGENT_SESSION_SEED=<n>` replays a run's kill delays (the seed is printed
//! with the figures).
//!
//! Negative control: in `torn` mode the child writes each snapshot in place, non-atomically
//! (truncate, first half, a short sleep, second half); the same checker must report a torn
//! or unreadable state within the same kill budget.
//!
//! # Journal mode (incremental saves of every entry kind)
//!
//! The snapshots above are made with the builder, so the store writes each one as a full
//! rewrite (temporary file and rename). In `journal` mode the savers change sessions the
//! way a harness does: state `n` of a session is revision `n`, made from state `n - 1` by
//! the operation [`op_of`]`(n)` picks, so the store appends it to `<id>.journal` as one log
//! entry (the journal is never folded into a new base: every revision stays in the
//! history). Each saver keeps the snapshot it last saved of its own session
//! (`.with_revision(saved)`) and changes it; the shared session is loaded before each save
//! and reloaded on conflict.
//!
//! Turn `i` is a user message with a 1-20 KB payload derived from `i`, an assistant reply
//! with an end marker for `i`, and a usage entry derived from `i`. To keep sessions (and
//! so the run) bounded, state `n` holds only what its *epoch* made, from `first_turn(n)`
//! to `n` (epochs are [`TURNS_PER_EPOCH`] states long); the first state of an epoch is
//! made with the builder (a new session under the same id, so a full rewrite that starts
//! the log again), with metadata `{"first_turn": n}` that the later states keep. Within an
//! epoch, the `k`-th state (`k = n - first_turn(n) + 1`) is, by `k mod 6`: 4 a rewind of
//! the last turn ([`SessionSnapshot::rewind`]), 5 a restore of state `n - 2` (loaded with
//! `load_at`; so a rewind is undone right after it), 0 a compaction of everything but the
//! last turn into one summary message with a usage entry of its own, and otherwise a turn
//! ([`SessionSnapshot::with_appended`]). [`expected_state`] works out any state's view and
//! usage from `n` alone (usage is never taken back), and a loaded session must be exactly
//! that state: every message, the usage and the metadata are checked, so an entry applied
//! to the wrong base, a torn entry or a mix of two states is caught. So are the kinds of
//! the revisions the store lists and a random earlier revision loaded with `load_at`. (The
//! counter is the revision and the transcript rather than a metadata entry because
//! `with_appended` cannot change metadata.) The store's files are only looked at, never
//! trusted: the kind of each save (append or rewrite) is read from the base's `revision`
//! header after it, and the journal's frames are parsed to find torn tails.
//!
//! Kills land 0-60 ms after the start (an epoch's first save, a whole new base, takes long
//! enough that with 0-20 ms the children would hardly ever finish one). After each kill, besides the checks above,
//! the parent makes a recovery save through a fresh store: it appends the next
//! turn to every session whose journal ends in a torn tail and to one session in turn, to
//! whose journal it first adds a torn tail itself (a random prefix of the next record's
//! frame: what a kill in the middle of that append leaves). The save must succeed at the
//! next revision and load back as exactly the next state, with no torn bytes left: a torn
//! tail is cut, never read as part of the record after it.
//!
//! Negative control: in `journal-torn` mode the child appends its own sessions' turns to
//! their journals by hand, with a valid frame, but acknowledges the save after writing
//! half of the entry (a writer that claims success before the entry is whole); the checker
//! must report the lost acknowledged save once a kill lands in between.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agent_session::{
    Compaction, ContentBlock, Durability, EntryKind, FileSessionStore, Message,
    Result as StoreResult, Revision, RewindTo, Role, SessionId, SessionSnapshot, SessionStore,
    SessionSummary, Usage,
};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

/// Tells the child test where the store is; without it the child returns at once.
const DIR_ENV: &str = "AGENT_SESSION_KILL_CHILD_DIR";
/// Tells the child how to write: one of the `*_MODE` values below.
const MODE_ENV: &str = "AGENT_SESSION_KILL_CHILD_MODE";
/// Builder snapshots saved with the store (full rewrites).
const ATOMIC_MODE: &str = "atomic";
/// Builder snapshots written in place by the broken writer.
const TORN_MODE: &str = "torn";
/// Turns appended with `with_appended` and saved with the store (journal records).
const JOURNAL_MODE: &str = "journal";
/// As [`JOURNAL_MODE`], but own sessions' records are appended by hand and acknowledged
/// halfway through.
const JOURNAL_TORN_MODE: &str = "journal-torn";
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
/// Kills of the journal mode: fewer, because each one also loads, extends and saves again.
const DEFAULT_JOURNAL_KILLS: usize = 250;
const LONG_JOURNAL_KILLS: usize = 2_500;
/// Turns per epoch in journal mode (see the module docs): sessions stay under about
/// 24 * 11 KB, and the journal (bounded by 64 KiB below a 512 KiB base) is compacted
/// every six appends or so, three times an epoch.
const TURNS_PER_EPOCH: u64 = 24;
/// The control must be caught within this many kills.
const CONTROL_BUDGET: usize = 500;
/// Kills land a uniformly random 0..=20 ms after the child reports it started.
const MAX_DELAY_MICROS: u64 = 20_000;
/// In journal mode, 0..=60 ms: an epoch's start (a full rewrite with two fsyncs, after a
/// few appends) takes long enough that most children would be killed before any
/// completed, and the checker's recovery saves would do nearly all of them.
const MAX_JOURNAL_DELAY_MICROS: u64 = 60_000;
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
    let mode = std::env::var(MODE_ENV).expect("the parent sets the mode");
    let store = FileSessionStore::open(&dir).expect("the child opens the store");
    let deadline = Instant::now() + CHILD_LIFETIME;
    match mode.as_str() {
        ATOMIC_MODE | TORN_MODE => save_snapshots(&store, mode == TORN_MODE, deadline),
        JOURNAL_MODE | JOURNAL_TORN_MODE => {
            append_turns(&store, mode == JOURNAL_TORN_MODE, deadline);
        }
        other => panic!("unknown child mode {other:?}"),
    }
}

/// The savers of the snapshot modes: builder snapshots, saved with the store or (`torn`)
/// with the broken writer.
fn save_snapshots(store: &FileSessionStore, torn: bool, deadline: Instant) {
    // STARTED goes out once every saver has loaded its state and is about to save, so the
    // kill delays measure from the first save.
    let ready = std::sync::Barrier::new(SAVERS + 1);
    std::thread::scope(|scope| {
        for own in session_ids().into_iter().take(SAVERS) {
            let ready = &ready;
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
// Journal mode: the states, the child's savers, and the journal's frames.
// ---------------------------------------------------------------------------------------

/// The first turn of the epoch of state `n` (`n >= 1`): state `n` holds turns
/// `first_turn(n)..=n`.
fn first_turn(n: u64) -> u64 {
    (n - 1) / TURNS_PER_EPOCH * TURNS_PER_EPOCH + 1
}

/// The user message of turn `i`: 1 KB to 20 KB, every byte determined by `i`.
fn turn_payload(i: u64) -> String {
    let len = 1_000 + usize::try_from(i.wrapping_mul(7_919) % 19_001).expect("fits");
    let unit = format!("turn {i:x}|");
    unit.repeat(len / unit.len() + 1)[..len].to_owned()
}

fn turn_end(i: u64) -> String {
    format!("end of turn {i}")
}

fn turn_messages(i: u64) -> Vec<Message> {
    vec![
        Message::user(turn_payload(i)),
        Message::assistant(vec![ContentBlock::text(turn_end(i))]),
    ]
}

fn turn_usage(i: u64) -> Usage {
    Usage::new(MODEL).with_tokens(i, 2 * i + 1)
}

/// The metadata of every state of the epoch that starts at turn `first`.
fn epoch_metadata(first: u64) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("first_turn".to_owned(), json!(first));
    metadata
}

/// What state `n` is made by, from state `n - 1` (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// The first state of an epoch, built anew.
    EpochStart,
    Turn,
    /// The last turn rewound.
    Rewind,
    /// State `n - 2` restored.
    Restore,
    /// Everything but the last turn replaced by a summary.
    Compaction,
}

impl Op {
    const ALL: [Op; 5] = [
        Op::EpochStart,
        Op::Turn,
        Op::Rewind,
        Op::Restore,
        Op::Compaction,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::EpochStart => "epoch",
            Op::Turn => "turn",
            Op::Rewind => "rewind",
            Op::Restore => "restore",
            Op::Compaction => "compaction",
        }
    }

    /// The kind of log entry it appends (an epoch's start starts a new log).
    fn kind(self) -> EntryKind {
        match self {
            Op::EpochStart => EntryKind::Checkpoint,
            Op::Turn => EntryKind::Turn,
            Op::Rewind => EntryKind::Rewind,
            Op::Restore => EntryKind::Restore,
            Op::Compaction => EntryKind::Compaction,
        }
    }
}

/// The operation that makes state `n` (`n >= 1`).
fn op_of(n: u64) -> Op {
    let k = n - first_turn(n) + 1;
    match k % 6 {
        _ if k == 1 => Op::EpochStart,
        4 => Op::Rewind,
        5 => Op::Restore,
        0 => Op::Compaction,
        _ => Op::Turn,
    }
}

/// The text of the summary message of the compaction that makes state `n`.
fn summary_text(n: u64) -> String {
    format!("summary made at state {n}")
}

/// The usage of the model call that wrote the summary of state `n`.
fn summary_usage(n: u64) -> Usage {
    Usage::new(MODEL).with_tokens(1_000 + n, 7)
}

/// One part of a view: a turn's two messages, or a summary message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Turn(u64),
    Summary(u64),
}

/// State `n` worked out from `n` alone: its view, its usage, and the kind of each
/// revision of its epoch's log (from the epoch's first state).
struct Expected {
    view: Vec<Part>,
    usage: Vec<Usage>,
    kinds: Vec<EntryKind>,
}

fn expected_state(n: u64) -> Expected {
    let first = first_turn(n);
    let mut views: Vec<Vec<Part>> = Vec::new();
    let mut expected = Expected {
        view: Vec::new(),
        usage: Vec::new(),
        kinds: Vec::new(),
    };
    for m in first..=n {
        let op = op_of(m);
        let view = &mut expected.view;
        match op {
            Op::EpochStart | Op::Turn => {
                view.push(Part::Turn(m));
                expected.usage.push(turn_usage(m));
            }
            Op::Rewind => {
                let last = view.pop();
                assert!(
                    matches!(last, Some(Part::Turn(_))),
                    "state {m} rewinds a turn"
                );
            }
            Op::Restore => view.clone_from(&views[usize::try_from(m - 2 - first).expect("fits")]),
            Op::Compaction => {
                let last = *view.last().expect("a view to compact");
                assert!(matches!(last, Part::Turn(_)), "state {m} keeps a turn");
                *view = vec![Part::Summary(m), last];
                expected.usage.push(summary_usage(m));
            }
        }
        views.push(view.clone());
        expected.kinds.push(op.kind());
    }
    expected
}

/// The messages of `parts`.
fn messages_of(parts: &[Part]) -> usize {
    parts
        .iter()
        .map(|p| match p {
            Part::Turn(_) => 2,
            Part::Summary(_) => 1,
        })
        .sum()
}

/// State `n` of `id` made from state `n - 1` (`None` for `n = 1`) by [`op_of`]`(n)`, ready
/// to save over revision `n - 1`, and that operation. A restore loads the state it goes
/// back to from `store` (`None` if the store no longer has it: another writer started a
/// new epoch meanwhile, so the save would conflict anyway).
fn next_turn_state(
    store: &FileSessionStore,
    id: &SessionId,
    previous: Option<SessionSnapshot>,
) -> Option<(SessionSnapshot, Op)> {
    let n = previous.as_ref().map_or(0, |s| s.revision().as_u64()) + 1;
    let op = op_of(n);
    let Some(mut next) = previous.filter(|_| op != Op::EpochStart) else {
        let first = SessionSnapshot::builder(id.clone(), MODEL)
            .metadata(epoch_metadata(n))
            .transcript(turn_messages(n))
            .usage(vec![turn_usage(n)])
            .build()
            .expect("build the first state of an epoch")
            .with_revision(Revision::from_u64(n - 1));
        return Some((first, Op::EpochStart));
    };
    let len = next.transcript().len();
    match op {
        Op::EpochStart => unreachable!("handled above"),
        Op::Turn => {
            let now = Utc::now().max(next.updated_at());
            next = next
                .with_appended(turn_messages(n), vec![turn_usage(n)], now)
                .expect("append a turn");
        }
        Op::Rewind => {
            next.rewind(RewindTo::Message(len - 2))
                .expect("rewind the last turn");
        }
        Op::Restore => {
            let past = store.load_at(id, Revision::from_u64(n - 2)).ok()?;
            next.restore_from(&past).expect("restore state n - 2");
        }
        Op::Compaction => {
            next.compact(
                Compaction::new(len - 2, vec![Message::user(summary_text(n))])
                    .with_usage(summary_usage(n)),
            )
            .expect("compact all but the last turn");
        }
    }
    Some((next, op))
}

/// The state number of a loaded journal-mode session, after checking it is exactly that
/// state ([`expected_state`]): every message of its view, in order, its usage (never
/// taken back) and the epoch's metadata, and the history counts of its epoch's log.
fn verify_turns(snapshot: &SessionSnapshot) -> Result<u64, String> {
    let id = snapshot.id();
    let n = snapshot.revision().as_u64();
    if n == 0 {
        return Err(format!("{id}: loaded at revision 0"));
    }
    let first = first_turn(n);
    if *snapshot.metadata() != epoch_metadata(first) {
        return Err(format!(
            "{id}: state {n} has metadata {:?}, expected first_turn {first}",
            snapshot.metadata()
        ));
    }
    let expected = expected_state(n);
    let (transcript, usage) = (snapshot.transcript(), snapshot.usage());
    if transcript.len() != messages_of(&expected.view) || usage != expected.usage.as_slice() {
        return Err(format!(
            "{id}: state {n} has {} messages and {} usage entries, expected {} ({:?}) and {} (usage is never taken back)",
            transcript.len(),
            usage.len(),
            messages_of(&expected.view),
            expected.view,
            expected.usage.len()
        ));
    }
    let mut at = 0;
    for part in &expected.view {
        match *part {
            Part::Turn(i) => {
                let (user, reply) = (&transcript[at], &transcript[at + 1]);
                if user.role != Role::User || user.text() != turn_payload(i) {
                    return Err(format!(
                        "{id}: state {n}, message {at}: not the user message of turn {i} ({:?}, {} bytes)",
                        user.role,
                        user.text().len()
                    ));
                }
                if reply.role != Role::Assistant || reply.text() != turn_end(i) {
                    return Err(format!(
                        "{id}: state {n}, message {}: {:?} is not the reply of turn {i}",
                        at + 1,
                        reply.text()
                    ));
                }
                at += 2;
            }
            Part::Summary(m) => {
                let summary = &transcript[at];
                if summary.role != Role::User || summary.text() != summary_text(m) {
                    return Err(format!(
                        "{id}: state {n}, message {at}: {:?} is not the summary of state {m}",
                        summary.text()
                    ));
                }
                at += 1;
            }
        }
    }
    if !snapshot.tool_calls().is_empty() {
        return Err(format!("{id}: state {n} has tool calls"));
    }
    let stats = snapshot.history_stats();
    let count = |kind| expected.kinds.iter().filter(|&&k| k == kind).count() as u64;
    if (
        stats.oldest_revision.as_u64(),
        stats.rewinds,
        stats.compactions,
        stats.restores,
    ) != (
        first,
        count(EntryKind::Rewind),
        count(EntryKind::Compaction),
        count(EntryKind::Restore),
    ) {
        return Err(format!(
            "{id}: state {n} says its history is {stats:?}, expected from {first} with the kinds {:?}",
            expected.kinds
        ));
    }
    Ok(n)
}

/// Checks the history the store keeps of `snapshot`'s session (state `n`): the revisions
/// of its epoch, with their kinds and view lengths, and the earlier state `r` (picked by
/// the caller) loaded with `load_at`.
fn verify_history(
    store: &FileSessionStore,
    snapshot: &SessionSnapshot,
    r: u64,
) -> Result<(), String> {
    let id = snapshot.id();
    let n = snapshot.revision().as_u64();
    let first = first_turn(n);
    let listed: Vec<(u64, EntryKind, usize)> = store
        .revisions(id)
        .map_err(|e| format!("{id}: revisions: {e:?}"))?
        .iter()
        .map(|info| (info.revision.as_u64(), info.kind, info.messages))
        .collect();
    let expected: Vec<(u64, EntryKind, usize)> = (first..=n)
        .zip(expected_state(n).kinds)
        .map(|(m, kind)| (m, kind, messages_of(&expected_state(m).view)))
        .collect();
    if listed != expected {
        return Err(format!(
            "{id}: state {n} lists the revisions {listed:?}, expected {expected:?}"
        ));
    }
    let earlier = store
        .load_at(id, Revision::from_u64(r))
        .map_err(|e| format!("{id}: load_at({r}) of state {n}: {e:?}"))?;
    match verify_turns(&earlier) {
        Ok(m) if m == r => Ok(()),
        Ok(m) => Err(format!("{id}: load_at({r}) gave state {m}")),
        Err(e) => Err(format!("{id}: load_at({r}): {e}")),
    }
}

/// The savers of the journal modes: each saves the next state of its own session, keeping
/// the snapshot it last saved, and (in turn) of the shared one, loaded before each save.
fn append_turns(store: &FileSessionStore, torn: bool, deadline: Instant) {
    let ready = std::sync::Barrier::new(SAVERS + 1);
    std::thread::scope(|scope| {
        for own in session_ids().into_iter().take(SAVERS) {
            let ready = &ready;
            scope.spawn(move || {
                let shared = sid(SHARED);
                let mut last = load_turns(store, &own);
                ready.wait();
                let mut shared_turn = random_bit();
                while Instant::now() < deadline {
                    if shared_turn {
                        append_shared(store, &shared);
                    } else {
                        last = Some(append_own(store, &own, last, torn));
                    }
                    shared_turn = !shared_turn;
                }
            });
        }
        ready.wait();
        announce(STARTED);
    });
}

/// The stored state of `id`, checked (`None` if there is none).
fn load_turns(store: &FileSessionStore, id: &SessionId) -> Option<SessionSnapshot> {
    match store.load(id) {
        Ok(snapshot) => {
            verify_turns(&snapshot)
                .unwrap_or_else(|e| panic!("the child loaded an inconsistent state: {e}"));
            Some(snapshot)
        }
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("the child could not load {id}: {e:?}"),
    }
}

/// Saves the state after `last` of `id`, which only this thread writes, acknowledges it,
/// and returns it as stored (with what the store knows about it, so the next save appends).
fn append_own(
    store: &FileSessionStore,
    id: &SessionId,
    last: Option<SessionSnapshot>,
    torn: bool,
) -> SessionSnapshot {
    let (next, op) = next_turn_state(store, id, last).expect("only this thread writes it");
    let n = next.revision().as_u64() + 1;
    let journal = journal_path(store.dir(), id);
    if torn && op == Op::Turn && fs::metadata(&journal).is_ok_and(|meta| meta.len() > 0) {
        append_by_hand_and_ack_early(&journal, &next);
        return next.with_revision(Revision::from_u64(n));
    }
    let saved = store
        .save(&next)
        .unwrap_or_else(|e| panic!("the child could not save {id}: {e:?}"));
    assert_eq!(saved.as_u64(), n, "{id}: saved at the wrong revision");
    acknowledge(store, id, n, op);
    if op == Op::EpochStart {
        // A built snapshot knows nothing of the store: load it back to append to it.
        load_turns(store, id).expect("the state just saved loads")
    } else {
        next.with_revision(saved)
    }
}

/// Loads `id`, saves the state after it, retrying on conflict, and acknowledges the save.
fn append_shared(store: &FileSessionStore, id: &SessionId) {
    loop {
        // A restore whose state was replaced meanwhile by another saver's new epoch: that
        // saver moved the revision, so try again from the new state.
        let Some((next, op)) = next_turn_state(store, id, load_turns(store, id)) else {
            continue;
        };
        let n = next.revision().as_u64() + 1;
        match store.save(&next) {
            Ok(saved) => {
                assert_eq!(saved.as_u64(), n, "{id}: saved at the wrong revision");
                acknowledge(store, id, n, op);
                return;
            }
            Err(e) if e.is_conflict() => {}
            Err(e) => panic!("the child could not save {id}: {e:?}"),
        }
    }
}

/// Acknowledges the save of state `n` of `id`, with how it was written: `rewrite` if the
/// base now holds revision `n` (this save wrote a new base), `append` if it holds an older
/// one, `later` if another thread rewrote it meanwhile (only for the shared session); and
/// the operation that made the state.
fn acknowledge(store: &FileSessionStore, id: &SessionId, n: u64, op: Op) {
    let kind = save_kind(&store.path_of(id), n);
    announce(&format!("saved {id} {n} {kind} {}", op.name()));
}

/// See [`acknowledge`].
fn save_kind(base: &Path, n: u64) -> &'static str {
    match base_revision(base) {
        Some(revision) if revision == n => "rewrite",
        Some(revision) if revision < n => "append",
        Some(_) => "later",
        None => "unknown",
    }
}

/// The `revision` field of the base snapshot `<id>.json`, from its first bytes (the store
/// writes `schema_version`, `id` and `revision` first, compactly).
fn base_revision(base: &Path) -> Option<u64> {
    let mut head = Vec::new();
    fs::File::open(base)
        .ok()?
        .take(512)
        .read_to_end(&mut head)
        .ok()?;
    let key = b"\"revision\":";
    let at = head.windows(key.len()).position(|w| w == key)? + key.len();
    let digits: String = head[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .map(|&b| char::from(b))
        .collect();
    digits.parse().ok()
}

/// The journal of `id` in the store directory `dir`.
fn journal_path(dir: &Path, id: &SessionId) -> PathBuf {
    dir.join(format!("{id}.journal"))
}

/// The journal frame of the log entry that appends turn `n` of `id` to a state with `from`
/// messages and usage entries, at `updated_at`, as the store writes it (`docs/FORMAT.md`:
/// `@<len> <crc32>\n<head>\n<body>\n`); the messages and usage are encoded by the crate
/// itself.
fn record_frame(
    id: &SessionId,
    n: u64,
    (from_messages, from_usage): (usize, usize),
    updated_at: DateTime<Utc>,
) -> Vec<u8> {
    let turn = SessionSnapshot::builder(id.clone(), MODEL)
        .transcript(turn_messages(n))
        .usage(vec![turn_usage(n)])
        .timestamps(updated_at, updated_at)
        .build()
        .expect("build a turn");
    let turn: Value = serde_json::from_slice(&turn.to_json().expect("encode")).expect("decode");
    let messages = turn["transcript"].as_array().map_or(0, Vec::len);
    let head = json!({
        "revision": n,
        "updated_at": turn["updated_at"],
        "kind": "turn",
        "messages": messages,
        "usage": turn["usage"],
        "state": {
            "messages": from_messages + messages,
            "tool_calls": 0,
            "usage": from_usage + 1,
        },
    });
    let body = json!({ "messages": turn["transcript"], "tool_calls": [] });
    let mut payload = serde_json::to_vec(&head).expect("encode the head");
    payload.push(b'\n');
    payload.extend(serde_json::to_vec(&body).expect("encode the body"));
    let mut frame =
        format!("@{:08x} {:08x}\n", payload.len(), crc32fast::hash(&payload)).into_bytes();
    frame.extend_from_slice(&payload);
    frame.push(b'\n');
    frame
}

/// The deliberately broken appender of the journal control: appends `next`'s record to
/// the journal by hand (a valid frame, after the journal's intact records), but
/// acknowledges the save when half of it is written.
fn append_by_hand_and_ack_early(journal: &Path, next: &SessionSnapshot) {
    let frame = record_frame(
        next.id(),
        next.revision().as_u64() + 1,
        (next.transcript().len() - 2, next.usage().len() - 1),
        next.updated_at(),
    );
    let (first, second) = frame.split_at(frame.len() / 2);
    let mut file = OpenOptions::new()
        .append(true)
        .open(journal)
        .expect("the broken appender opens the journal");
    file.write_all(first).expect("write the first half");
    announce(&format!(
        "saved {} {} append turn",
        next.id(),
        next.revision().as_u64() + 1
    ));
    std::thread::sleep(Duration::from_millis(2));
    file.write_all(second).expect("write the second half");
}

/// A journal's frames as found on disk, read independently of the store: where the
/// intact frames (right length, newline, CRC-32) end, and how long the file is.
struct JournalScan {
    len: usize,
    valid_end: usize,
}

impl JournalScan {
    fn of(path: &Path) -> Self {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("read {}: {e}", path.display()),
        };
        let mut at = 0;
        while let Some(len) = intact_frame_len(&bytes[at..]) {
            at += len;
        }
        JournalScan {
            len: bytes.len(),
            valid_end: at,
        }
    }

    /// Bytes after the last intact frame: a torn tail.
    fn torn_bytes(&self) -> usize {
        self.len - self.valid_end
    }
}

/// The length of the intact frame at the start of `bytes`, if there is one.
fn intact_frame_len(bytes: &[u8]) -> Option<usize> {
    let header = bytes.get(..19)?;
    if header[0] != b'@' || header[9] != b' ' || header[18] != b'\n' {
        return None;
    }
    let hex = |digits: &[u8]| {
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| u32::from_str_radix(d, 16).ok())
    };
    let len = usize::try_from(hex(&header[1..9])?).ok()?;
    let crc = hex(&header[10..18])?;
    let payload = bytes.get(19..19 + len)?;
    (bytes.get(19 + len) == Some(&b'\n') && crc32fast::hash(payload) == crc).then_some(len + 20)
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
    /// Journal mode: what kind of write the acknowledged saves were.
    kinds: SaveKinds,
}

/// How the acknowledged saves of journal mode were written.
#[derive(Default, Debug, Clone, Copy)]
struct SaveKinds {
    /// Records appended to the journal.
    appends: u64,
    /// Appended states the store wrote as a new base instead (none is expected: the log is
    /// never folded).
    rewritten_appends: u64,
    /// First states of an epoch (builder snapshots): full rewrites by design.
    epoch_starts: u64,
    /// Shared-session saves whose base another saver replaced before the kind was read.
    unknown: u64,
    /// The acknowledged saves by the operation that made the state, in [`Op::ALL`]'s
    /// order.
    ops: [u64; 5],
}

impl SaveKinds {
    fn count(&mut self, n: u64, kind: &str, op: Option<&str>) {
        if let Some(k) = Op::ALL.iter().position(|o| Some(o.name()) == op) {
            self.ops[k] += 1;
        }
        match kind {
            "append" => self.appends += 1,
            "rewrite" if first_turn(n) == n => self.epoch_starts += 1,
            "rewrite" => self.rewritten_appends += 1,
            _ => self.unknown += 1,
        }
    }

    fn add(&mut self, other: SaveKinds) {
        self.appends += other.appends;
        self.rewritten_appends += other.rewritten_appends;
        self.epoch_starts += other.epoch_starts;
        self.unknown += other.unknown;
        for (mine, theirs) in self.ops.iter_mut().zip(other.ops) {
            *mine += theirs;
        }
    }

    /// The acknowledged saves of operation `op`.
    fn of(&self, op: Op) -> u64 {
        self.ops[Op::ALL.iter().position(|&o| o == op).expect("every op")]
    }
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
        let max_delay = if mode == JOURNAL_MODE || mode == JOURNAL_TORN_MODE {
            MAX_JOURNAL_DELAY_MICROS
        } else {
            MAX_DELAY_MICROS
        };
        std::thread::sleep(Duration::from_micros(rng.below_or_equal(max_delay)));
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
    let mut kinds = SaveKinds::default();
    for line in &said {
        let words: Vec<&str> = line.split(' ').collect();
        // `saved <id> <counter>`, and in journal mode the kind of write and the
        // operation.
        let (id, counter, kind, op) = match words.as_slice() {
            ["saved", id, counter] => (id, counter, None, None),
            ["saved", id, counter, kind] => (id, counter, Some(*kind), None),
            ["saved", id, counter, kind, op] => (id, counter, Some(*kind), Some(*op)),
            _ => continue,
        };
        // A line cut short by the kill could only read as a smaller counter, which
        // weakens nothing (or as an unknown kind, which is not counted as either).
        let Ok(counter) = counter.parse::<u64>() else {
            continue;
        };
        saves += 1;
        if let Some(kind) = kind {
            kinds.count(counter, kind, op);
        }
        let last = acked.entry((*id).to_owned()).or_insert(0);
        *last = (*last).max(counter);
    }
    Killed {
        acked,
        saves,
        kinds,
    }
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
    /// The listing disagrees with the sessions as loaded.
    Listing,
    /// Journal mode: the save after a kill failed, or did not load back as the next state.
    Unrecoverable,
}

/// Which states the child writes, and so how the checker verifies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    /// Builder snapshots of two messages ([`verify_state`]).
    #[default]
    Snapshots,
    /// Turns appended to a journal ([`verify_turns`]), with a recovery save after each
    /// kill.
    Journal,
}

/// Checks the store after each kill and keeps the figures.
#[derive(Default)]
struct Checker {
    mode: Mode,
    /// The highest counter seen stored so far, per session id.
    seen: BTreeMap<String, u64>,
    kills: usize,
    sessions_checked: usize,
    acknowledged_saves: u64,
    /// Temporary files found after a kill (a kill that landed mid-save), before the store
    /// removed them.
    temp_files_left: usize,
    kills_leaving_temp_files: usize,
    /// Journal mode: the kinds of the acknowledged saves.
    kinds: SaveKinds,
    /// Journal mode: earlier states loaded with `load_at` and checked.
    earlier_states_checked: usize,
    /// Journal mode: journals a kill left with a torn tail (bytes after the last intact
    /// frame).
    torn_tails_left: usize,
    /// Journal mode: torn tails the checker added before a recovery save.
    torn_tails_made: usize,
    /// Journal mode: recovery saves, those among them that appended to a journal that had
    /// a torn tail (so cut it), and those that rewrote the base.
    recoveries: usize,
    /// Journal mode: the recovery saves by operation, in [`Op::ALL`]'s order.
    recovery_ops: [usize; 5],
    tails_cut_by_append: usize,
    recovery_rewrites: usize,
}

impl Checker {
    fn new(mode: Mode) -> Self {
        Checker {
            mode,
            ..Checker::default()
        }
    }

    /// Checks the store in `dir` after a kill whose child acknowledged `killed`; in
    /// journal mode, then makes the recovery saves (see the module docs).
    #[allow(clippy::too_many_lines)] // one check after another, in the order they run
    fn check(
        &mut self,
        dir: &Path,
        killed: &Killed,
        rng: &mut Rng,
    ) -> Result<(), (Violation, String)> {
        self.kills += 1;
        self.acknowledged_saves += killed.saves;
        self.kinds.add(killed.kinds);
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
        let mut loaded = Vec::new();
        for (index, id) in session_ids().into_iter().enumerate() {
            let key = id.as_str().to_owned();
            let acked = killed.acked.get(&key).copied();
            let seen = self.seen.get(&key).copied();
            let snapshot = match store.load(&id) {
                Ok(snapshot) => snapshot,
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
            let counter = match self.mode {
                Mode::Snapshots => verify_state(&snapshot),
                Mode::Journal => verify_turns(&snapshot).and_then(|n| {
                    let first = first_turn(n);
                    let r = first + rng.below_or_equal(n - first);
                    verify_history(&store, &snapshot, r)?;
                    self.earlier_states_checked += 1;
                    Ok(n)
                }),
            }
            .map_err(|e| (Violation::Mixed, e))?;
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
            loaded.push((index, snapshot));
        }
        if listing.sessions.len() != loaded.len() {
            return Err((
                Violation::Unreadable,
                format!(
                    "{} sessions listed, {} loaded",
                    listing.sessions.len(),
                    loaded.len()
                ),
            ));
        }
        // The listing (from the summary files when they match) must describe exactly the
        // states that load.
        for summary in &listing.sessions {
            let Some((_, snapshot)) = loaded.iter().find(|(_, s)| s.id() == &summary.id) else {
                return Err((
                    Violation::Listing,
                    format!("{} is listed but was not loaded", summary.id),
                ));
            };
            let expected = SessionSummary::of(snapshot);
            if *summary != expected {
                return Err((
                    Violation::Listing,
                    format!("listed as {summary:?}, loads as {expected:?}"),
                ));
            }
        }
        if self.mode == Mode::Journal {
            self.recover(dir, loaded, rng)?;
        }
        Ok(())
    }

    /// Journal mode: saves the next state of every session whose journal has a torn tail,
    /// and of one session in turn after giving its journal a torn tail, through a new
    /// store; each save must succeed, load back exactly, and leave no torn bytes.
    fn recover(
        &mut self,
        dir: &Path,
        loaded: Vec<(usize, SessionSnapshot)>,
        rng: &mut Rng,
    ) -> Result<(), (Violation, String)> {
        // The parent is never killed, so its saves need not be fsynced; they take the
        // same path through the journal otherwise.
        let store = FileSessionStore::builder()
            .durability(Durability::Buffered)
            .open(dir)
            .map_err(|e| (Violation::Unrecoverable, format!("open: {e:?}")))?;
        let in_turn = self.kills % (SAVERS + 1);
        for (index, snapshot) in loaded {
            let id = snapshot.id().clone();
            let journal = journal_path(dir, &id);
            let torn = JournalScan::of(&journal).torn_bytes() > 0;
            if torn {
                self.torn_tails_left += 1;
            } else if index == in_turn {
                // What a kill halfway through appending the next turn would leave (even
                // when the next state starts an epoch, and so will be a rewrite).
                let frame = record_frame(
                    &id,
                    snapshot.revision().as_u64() + 1,
                    (snapshot.transcript().len(), snapshot.usage().len()),
                    Utc::now(),
                );
                let cut =
                    1 + usize::try_from(rng.below_or_equal(frame.len() as u64 - 2)).expect("fits");
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(&journal)
                    .and_then(|mut file| file.write_all(&frame[..cut]))
                    .expect("add a torn tail to the journal");
                self.torn_tails_made += 1;
            } else {
                continue;
            }
            let torn_before = JournalScan::of(&journal).torn_bytes();
            let n = snapshot.revision().as_u64();
            let (next, op) =
                next_turn_state(&store, &id, Some(snapshot)).expect("the parent alone writes now");
            let unrecoverable = |what: String| (Violation::Unrecoverable, format!("{id}: {what}"));
            let saved = store.save(&next).map_err(|e| {
                unrecoverable(format!("saving state {} after the kill: {e:?}", n + 1))
            })?;
            if saved.as_u64() != n + 1 {
                return Err(unrecoverable(format!(
                    "state {} saved at revision {saved}",
                    n + 1
                )));
            }
            let rewrote = save_kind(&store.path_of(&id), n + 1) == "rewrite";
            let back = store
                .load(&id)
                .map_err(|e| unrecoverable(format!("state {} does not load: {e:?}", n + 1)))?;
            let counter = verify_turns(&back).map_err(&unrecoverable)?;
            if counter != n + 1 || back != next.with_revision(saved) {
                return Err(unrecoverable(format!(
                    "saved state {}, loaded back state {counter} (or other timestamps)",
                    n + 1
                )));
            }
            let left = JournalScan::of(&journal).torn_bytes();
            if left > 0 {
                return Err(unrecoverable(format!(
                    "{left} torn bytes left in the journal after the save"
                )));
            }
            self.recoveries += 1;
            self.recovery_ops[Op::ALL.iter().position(|&o| o == op).expect("every op")] += 1;
            if rewrote {
                self.recovery_rewrites += 1;
            } else if torn_before > 0 {
                self.tails_cut_by_append += 1;
            }
            self.seen.insert(id.as_str().to_owned(), n + 1);
        }
        Ok(())
    }

    fn max_counter(&self) -> u64 {
        self.seen.values().copied().max().unwrap_or(0)
    }

    fn figures(&self) -> String {
        let mut line = format!(
            "kills {}, sessions checked {}, acknowledged saves {}, max counter {}, \
             kills that left temp files {} ({} files)",
            self.kills,
            self.sessions_checked,
            self.acknowledged_saves,
            self.max_counter(),
            self.kills_leaving_temp_files,
            self.temp_files_left,
        );
        if self.mode == Mode::Journal {
            let kinds = self.kinds;
            let _ = write!(
                line,
                ", acknowledged appends {}, appends written as a new base {}, epoch starts {}, unclassified {}, \
                 acknowledged by operation: {}, \
                 earlier states checked with load_at {}, \
                 torn tails left by kills {}, torn tails added {}, recovery saves {} \
                 ({} cut a torn tail by appending, {} rewrote the base; by operation: {})",
                kinds.appends,
                kinds.rewritten_appends,
                kinds.epoch_starts,
                kinds.unknown,
                Op::ALL
                    .iter()
                    .map(|&op| format!("{} {}", op.name(), kinds.of(op)))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.earlier_states_checked,
                self.torn_tails_left,
                self.torn_tails_made,
                self.recoveries,
                self.tails_cut_by_append,
                self.recovery_rewrites,
                Op::ALL
                    .iter()
                    .zip(self.recovery_ops)
                    .map(|(op, n)| format!("{} {n}", op.name()))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        line.push_str(", per session:");
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

fn long_run() -> bool {
    std::env::var(LONG_ENV).is_ok_and(|v| v == "1")
}

fn kill_budget() -> usize {
    if long_run() {
        LONG_KILLS
    } else {
        DEFAULT_KILLS
    }
}

fn journal_kill_budget() -> usize {
    if long_run() {
        LONG_JOURNAL_KILLS
    } else {
        DEFAULT_JOURNAL_KILLS
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
    let mut checker = Checker::new(Mode::Snapshots);
    for round in 1..=kills {
        let killed = run_and_kill(&dir, ATOMIC_MODE, &mut rng);
        if let Err((kind, violation)) = checker.check(&dir, &killed, &mut rng) {
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
    let mut checker = Checker::new(Mode::Snapshots);
    let mut caught = None;
    for round in 1..=CONTROL_BUDGET {
        let killed = run_and_kill(&dir, TORN_MODE, &mut rng);
        if let Err((kind, violation)) = checker.check(&dir, &killed, &mut rng) {
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

#[test]
fn sigkill_during_concurrent_journal_appends_and_new_bases_loses_nothing_and_recovers() {
    let kills = journal_kill_budget();
    let mut rng = Rng::from_env_or_clock();
    let seed = rng.0;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("store");
    FileSessionStore::open(&dir).expect("create the store");
    let started = Instant::now();
    let mut checker = Checker::new(Mode::Journal);
    for round in 1..=kills {
        let killed = run_and_kill(&dir, JOURNAL_MODE, &mut rng);
        if let Err((kind, violation)) = checker.check(&dir, &killed, &mut rng) {
            panic!(
                "after kill {round} of {kills} (seed {seed}): {kind:?}: {violation}\n{}",
                checker.figures()
            );
        }
    }
    eprintln!(
        "kill_during_save journal: {} in {:.1} s (seed {seed})",
        checker.figures(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(checker.kills, kills);
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
    // The children's saves took both paths: entries appended to journals, and new bases
    // at the start of each epoch; an append is never written as a new base (the log is
    // never folded).
    assert!(
        checker.kinds.appends > 0
            && checker.kinds.epoch_starts > 0
            && checker.kinds.rewritten_appends == 0,
        "the children's saves did not append and start epochs only: {}",
        checker.figures()
    );
    // Every kind of entry was acknowledged by some child, or saved by a recovery save.
    for op in Op::ALL {
        let recovered = checker.recovery_ops[Op::ALL.iter().position(|&o| o == op).expect("op")];
        assert!(
            checker.kinds.of(op) + recovered as u64 > 0,
            "no {} was saved: {}",
            op.name(),
            checker.figures()
        );
    }
    // Some kills landed in the middle of a rewrite (an epoch's start).
    assert!(
        checker.kills_leaving_temp_files > 0,
        "no kill interrupted a rewrite: {}",
        checker.figures()
    );
    // Every kill was followed by a save that had to cut a torn tail (one the checker
    // added, if the kill left none) and most of those appended right after it.
    assert_eq!(
        checker.torn_tails_left + checker.torn_tails_made,
        checker.recoveries
    );
    assert!(
        checker.tails_cut_by_append > 0,
        "no recovery save appended over a torn tail: {}",
        checker.figures()
    );
}

#[test]
fn negative_control_journal_record_acknowledged_before_it_is_whole_is_caught() {
    let mut rng = Rng::from_env_or_clock();
    let seed = rng.0;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("store");
    FileSessionStore::open(&dir).expect("create the store");
    let mut checker = Checker::new(Mode::Journal);
    let mut caught = None;
    for round in 1..=CONTROL_BUDGET {
        let killed = run_and_kill(&dir, JOURNAL_TORN_MODE, &mut rng);
        if let Err((kind, violation)) = checker.check(&dir, &killed, &mut rng) {
            caught = Some((round, kind, violation));
            break;
        }
    }
    let Some((round, kind, violation)) = caught else {
        panic!(
            "the checker missed an early-acknowledging appender in {CONTROL_BUDGET} kills \
             (seed {seed}): {}",
            checker.figures()
        );
    };
    eprintln!(
        "kill_during_save journal control: early-acknowledging appender caught after kill \
         {round} (seed {seed}): {kind:?}: {violation}"
    );
    // The half-written record is a torn tail, which loading ignores: the acknowledged
    // state is not there. (A hand-written record that did not load would be reported as
    // unreadable instead, and fail this.)
    assert_eq!(kind, Violation::Lost, "{violation}");
}

/// The journal control and the checker's torn tails are written by hand, from the format
/// (`record_frame`): a whole hand-written record must load exactly like one the store
/// appends, and a prefix of it must be ignored as a torn tail and cut by the next save, so
/// that the control is caught for losing a record, not for writing a malformed one.
#[test]
fn hand_written_journal_record_loads_like_the_stores_own_and_its_prefix_is_a_torn_tail() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    let id = sid("own-0");
    let journal = journal_path(store.dir(), &id);
    // States 1 (built) and 2 (appended: the journal now holds a header and a record).
    let (first, _) = next_turn_state(&store, &id, None).expect("state 1");
    store.save(&first).expect("save state 1");
    let (second, op) = next_turn_state(&store, &id, store.load(&id).ok()).expect("state 2");
    assert_eq!(op, Op::Turn);
    store.save(&second).expect("save state 2");
    let stored = store.load(&id).expect("load state 2");
    assert_eq!(verify_turns(&stored), Ok(2));
    let before = fs::read(&journal).expect("the journal exists");

    // State 3, appended by hand.
    let (third, _) = next_turn_state(&store, &id, Some(stored.clone())).expect("state 3");
    let frame = record_frame(
        &id,
        3,
        (stored.transcript().len(), stored.usage().len()),
        third.updated_at(),
    );
    let mut file = OpenOptions::new()
        .append(true)
        .open(&journal)
        .expect("open");
    file.write_all(&frame).expect("append");
    let loaded = store.load(&id).expect("load state 3");
    assert_eq!(verify_turns(&loaded), Ok(3));
    assert_eq!(loaded, third.with_revision(Revision::from_u64(3)));

    // Without its last byte (or any later part), the same record is a torn tail: state 2
    // loads, and the next save cuts it.
    fs::write(&journal, &before).expect("restore");
    for cut in [1, frame.len() / 2, frame.len() - 1] {
        let mut torn = before.clone();
        torn.extend_from_slice(&frame[..cut]);
        fs::write(&journal, &torn).expect("write a torn tail");
        assert_eq!(
            store.load(&id).map(|s| verify_turns(&s)).expect("load"),
            Ok(2)
        );
        assert_eq!(JournalScan::of(&journal).torn_bytes(), cut);
    }
    let (third, op) = next_turn_state(&store, &id, Some(stored)).expect("state 3");
    assert_eq!(op, Op::Turn);
    store.save(&third).expect("save state 3 over the torn tail");
    assert_eq!(JournalScan::of(&journal).torn_bytes(), 0);
    assert_eq!(
        store.load(&id).map(|s| verify_turns(&s)).expect("load"),
        Ok(3)
    );
}
