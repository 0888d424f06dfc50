//! Peak memory while loading: at most 3 × the session's size on disk, for the benchmark
//! workload's large messages (issue 5) and for a million small ones (issue 12, item 17:
//! they peaked at 12 ×, from serde's room for four blocks in every message's content, the
//! size of the largest kind of block, and the file's bytes held while its session was
//! built).
//!
//! The parent saves a session (10,000 messages of the benchmark workload, about 11 MB; or a
//! million short messages, about 60 MB), then
//! runs this test binary again as a child that only opens the store and loads it, reading
//! its resident set before the load (`VmRSS`) and its peak afterwards (`VmHWM`) from
//! `/proc/self/status`. Measuring in a fresh process keeps the parent's own allocations
//! (generating the workload) out of the peak. Memory is a count of bytes, not a time, so
//! it is asserted.

#[path = "../benches/support/workload.rs"]
#[allow(dead_code)] // the benches use more of the workload than this test
mod workload;

use std::path::Path;
use std::process::Command;

use agent_session::{
    Compaction, Durability, FileSessionStore, Message, Role, SessionId, SessionSnapshot,
    SessionStore, Usage,
};

/// `peak / size` for printing, in hundredths (exact integer arithmetic).
fn times(peak: u64, size: u64) -> String {
    let hundredths = peak * 100 / size.max(1);
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

const CHILD_ENV: &str = "AGENT_SESSION_LOAD_MEMORY_CHILD";
const MESSAGES: usize = 10_000;

/// Kibibytes of a `/proc/self/status` line such as `VmHWM:   12345 kB`.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

fn messages(wire: &[serde_json::Value]) -> Vec<Message> {
    wire.iter()
        .map(|m| Message::from_openai_chat(m).expect("workload messages are valid"))
        .collect()
}

fn usage_of(transcript: &[Message]) -> Vec<Usage> {
    transcript
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|_| Usage::new("m").with_tokens(12_000, 300))
        .collect()
}

fn bytes_on_disk(dir: &Path, id: &str) -> u64 {
    ["json", "journal"]
        .iter()
        .filter_map(|ext| std::fs::metadata(dir.join(format!("{id}.{ext}"))).ok())
        .map(|m| m.len())
        .sum()
}

/// Runs the child on `dir` and returns (peak growth during the load, bytes on disk).
fn peak_of_load(dir: &Path, id: &str) -> (u64, u64) {
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "child_loads_once",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{}\n{id}", dir.display()))
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let growth_kib: u64 = stdout
        .lines()
        .find_map(|l| l.split("peak-growth-kib=").nth(1))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("child printed no measurement: {stdout}"));
    (growth_kib * 1024, bytes_on_disk(dir, id))
}

#[test]
fn loading_a_10_000_message_session_peaks_below_three_times_its_size() {
    if status_kib("VmHWM:").is_none() {
        eprintln!("skipped: /proc/self/status has no VmHWM on this platform");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path()).expect("open");
    let transcript = messages(&workload::transcript(MESSAGES));
    let snapshot = SessionSnapshot::builder(SessionId::parse("big").expect("id"), "m")
        .usage(usage_of(&transcript))
        .transcript(transcript)
        .build()
        .expect("build");
    store.save(&snapshot).expect("save");

    let (peak, size) = peak_of_load(dir.path(), "big");
    eprintln!(
        "base only: {size} bytes on disk, load peak growth {peak} bytes ({} x)",
        times(peak, size)
    );
    assert!(peak <= 3 * size, "peak {peak} > 3 x {size}");

    // With a journal: 50 more turns appended after the base.
    let mut current = store.load(snapshot.id()).expect("load");
    for _ in 0..50 {
        let turn = messages(&workload::append_turn());
        let usage = usage_of(&turn);
        current = current
            .with_appended(turn, usage, chrono::Utc::now())
            .expect("append");
        let revision = store.save(&current).expect("save a turn");
        current = current.with_revision(revision);
    }
    assert!(
        dir.path()
            .join("big.journal")
            .metadata()
            .expect("journal")
            .len()
            > 0,
        "the turns went to the journal"
    );
    let (peak, size) = peak_of_load(dir.path(), "big");
    eprintln!(
        "base + journal: {size} bytes on disk, load peak growth {peak} bytes ({} x)",
        times(peak, size)
    );
    assert!(peak <= 3 * size, "peak {peak} > 3 x {size}");
}

/// A session as an agent leaves it, saved after every turn: a base of the first turn and a
/// journal entry for each of the others, all read at once before the entries needed are
/// decoded; then the same session compacted to a view of its last turns.
#[test]
fn loading_a_10_000_message_session_saved_turn_by_turn_peaks_below_three_times_its_size() {
    if status_kib("VmHWM:").is_none() {
        eprintln!("skipped: /proc/self/status has no VmHWM on this platform");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    // Buffered: the same files as Sync, without 3,000 fsyncs.
    let store = FileSessionStore::builder()
        .durability(Durability::Buffered)
        .open(dir.path())
        .expect("open");
    let mut turns: Vec<Vec<Message>> = Vec::new();
    for message in messages(&workload::transcript(MESSAGES)) {
        match turns.last_mut() {
            Some(turn) if message.role != Role::User => turn.push(message),
            _ => turns.push(vec![message]),
        }
    }
    let mut turns = turns.into_iter();
    let first = turns.next().expect("a first turn");
    let snapshot = SessionSnapshot::builder(SessionId::parse("turns").expect("id"), "m")
        .usage(usage_of(&first))
        .transcript(first)
        .build()
        .expect("build");
    store.save(&snapshot).expect("save");
    let mut current = store.load(snapshot.id()).expect("load");
    for turn in turns {
        let usage = usage_of(&turn);
        let later =
            (current.updated_at() + chrono::TimeDelta::microseconds(1)).max(chrono::Utc::now());
        current = current.with_appended(turn, usage, later).expect("append");
        let revision = store.save(&current).expect("save a turn");
        current = current.with_revision(revision);
    }
    assert_eq!(current.transcript().len(), MESSAGES);
    let (peak, size) = peak_of_load(dir.path(), "turns");
    eprintln!(
        "saved turn by turn: {size} bytes on disk, load peak growth {peak} bytes ({} x)",
        times(peak, size)
    );
    assert!(peak <= 3 * size, "peak {peak} > 3 x {size}");

    // Compacted to its last turns: the journal is read whole, its other entries are not
    // decoded.
    let view = current.transcript();
    let point = (0..view.len() - 199)
        .rev()
        .find(|&i| view[i].role == Role::User)
        .expect("a turn starts early enough");
    current
        .compact(Compaction::new(point, vec![Message::user("Summary.")]))
        .expect("compact");
    store.save(&current).expect("save the compaction");
    let (peak, size) = peak_of_load(dir.path(), "turns");
    eprintln!(
        "compacted to {} messages: {size} bytes on disk, load peak growth {peak} bytes ({} x)",
        current.transcript().len(),
        times(peak, size)
    );
    assert!(peak <= 3 * size, "peak {peak} > 3 x {size}");
}

/// Short messages are where per-message overhead shows: the file holds about 60 bytes of
/// each.
#[test]
fn loading_a_million_small_messages_peaks_below_three_times_their_size() {
    if status_kib("VmHWM:").is_none() {
        eprintln!("skipped: /proc/self/status has no VmHWM on this platform");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path()).expect("open");
    let transcript: Vec<Message> = (0..1_000_000)
        .map(|i| {
            if i % 2 == 0 {
                Message::user(format!("q{}", i % 1000))
            } else {
                Message::assistant(vec![agent_session::ContentBlock::text(format!(
                    "a{}",
                    i % 1000
                ))])
            }
        })
        .collect();
    let snapshot = SessionSnapshot::builder(SessionId::parse("small").expect("id"), "m")
        .transcript(transcript)
        .build()
        .expect("build");
    store.save(&snapshot).expect("save");
    drop(snapshot);
    let (peak, size) = peak_of_load(dir.path(), "small");
    eprintln!(
        "1,000,000 small messages: {size} bytes on disk, load peak growth {peak} bytes ({} x)",
        times(peak, size)
    );
    assert!(peak <= 3 * size, "peak {peak} > 3 x {size}");
}

/// The child half: does nothing unless run by the test above.
#[test]
fn child_loads_once() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (dir, id) = spec.split_once('\n').expect("dir and id");
    let store = FileSessionStore::open(dir).expect("open");
    let id = SessionId::parse(id).expect("id");
    let before = status_kib("VmRSS:").expect("VmRSS");
    let snapshot = store.load(&id).expect("load");
    let peak = status_kib("VmHWM:").expect("VmHWM");
    assert!(!snapshot.transcript().is_empty());
    println!("peak-growth-kib={}", peak.saturating_sub(before));
}
