//! `FileSessionStore`'s incremental saves: the append-only `<id>.journal` of log entries
//! beside the base snapshot `<id>.json` (never folded, so every revision stays loadable),
//! crash and corruption handling, hostile files in its place, and the `<id>.summary`
//! listing cache. Everything goes through the public API; the
//! tests only look at (and tamper with) the files in the store directory.

mod common;
#[path = "common/journal.rs"]
mod journal_support;

use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use agent_session::{
    BoxError, BoxFuture, Completion, CompletionRequest, Durability, Engine, Error, ErrorKind,
    FileSessionStore, Harness, Message, Revision, SessionId, SessionOptions, SessionSnapshot,
    SessionStore, SessionSummary, ToolCall, ToolDefinition, ToolExecutor, ToolOutput,
};
use common::{sid, Calculator, RequestLog, ToolThenAnswerEngine};
use journal_support::{
    appended, built, bytes_or_empty, files, filler, frame, frames, inode, len_or_zero, open,
    store_dir, turn, turn_usage, write_private, Frame, MODEL,
};
use serde_json::{json, Value};

/// The size of a typical turn: a user message, an assistant tool call and its result.
const TURN: usize = 2_700;
/// A small turn, for tests that loop over every byte of a journal.
const SMALL: usize = 450;
/// What a record adds to the JSON of its messages: revision, time, counts, the tool-call
/// record, the usage entry and the frame.
const RECORD_OVERHEAD: u64 = 1_024;
/// What the header frame of a new journal takes.
const HEADER_ALLOWANCE: u64 = 512;

fn open_buffered(dir: &Path) -> FileSessionStore {
    FileSessionStore::builder()
        .durability(Durability::Buffered)
        .open(dir)
        .expect("open the store")
}

/// The JSON size of `messages`.
fn json_len(messages: &[Message]) -> u64 {
    serde_json::to_vec(messages).expect("encode").len() as u64
}

/// Saves `snapshot`, checks that a load gives exactly it at the next revision, and returns
/// the loaded copy (which, unlike `snapshot`, knows what is stored, so extending it
/// appends).
fn save(store: &FileSessionStore, snapshot: SessionSnapshot) -> SessionSnapshot {
    let expected_revision = snapshot.revision().next();
    let revision = store.save(&snapshot).expect("save");
    assert_eq!(revision, expected_revision);
    let loaded = store.load(snapshot.id()).expect("load what was saved");
    assert_eq!(loaded, snapshot.with_revision(revision));
    loaded
}

/// Loads `id`, appends turn `i` and saves it; returns the loaded result.
fn append_turn(store: &FileSessionStore, id: &SessionId, i: usize, size: usize) -> SessionSnapshot {
    let loaded = store.load(id).expect("load");
    save(store, appended(loaded, i, size))
}

/// The bytes of every file in `dir`, by name.
fn dir_contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .expect("read the store directory")
        .map(|entry| {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = fs::symlink_metadata(entry.path()).expect("stat");
            let bytes = if meta.is_file() {
                fs::read(entry.path()).expect("read")
            } else {
                Vec::new()
            };
            (name, bytes)
        })
        .collect();
    out.sort();
    out
}

fn assert_conflict(err: &Error, expected: Revision, found: Option<Revision>) {
    match err {
        Error::Conflict {
            expected: e,
            found: f,
            ..
        } => assert_eq!((*e, *f), (expected, found), "{err}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

fn assert_insecure(err: &Error, path: &Path) {
    match err {
        Error::Insecure { path: p, .. } => assert_eq!(p, path, "{err}"),
        other => panic!("expected Insecure for {}, got {other:?}", path.display()),
    }
}

/// The listing's summary of `id`.
fn listed(store: &FileSessionStore, id: &SessionId) -> SessionSummary {
    let list = store.list().expect("list");
    assert!(list.unreadable.is_empty(), "{:?}", list.unreadable);
    list.sessions
        .into_iter()
        .find(|s| &s.id == id)
        .unwrap_or_else(|| panic!("{id} is listed"))
}

// ---------------------------------------------------------------------------------------
// Appending
// ---------------------------------------------------------------------------------------

#[test]
fn append_of_a_loaded_snapshot_leaves_the_base_untouched_and_grows_the_journal_by_the_turn() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("appends");
    save(&store, built(&id, 40, TURN));
    let f = files(&dir, &id);
    let base = fs::read(&f.base).expect("base");
    let base_inode = inode(&f.base);
    assert_eq!(len_or_zero(&f.journal), 0, "a first save writes no journal");

    let mut journal_len = 0;
    for i in 40..46 {
        let loaded = store.load(&id).expect("load");
        let next = appended(loaded, i, TURN);
        let new_part = json_len(&next.transcript()[next.transcript().len() - 3..]);
        let expected = save(&store, next);

        assert_eq!(fs::read(&f.base).expect("base"), base, "turn {i}");
        assert_eq!(inode(&f.base), base_inode, "the base was replaced");
        let now = len_or_zero(&f.journal);
        let grew = now - journal_len;
        let allowance = RECORD_OVERHEAD + if i == 40 { HEADER_ALLOWANCE } else { 0 };
        assert!(
            (new_part..=new_part + allowance).contains(&grew),
            "turn {i}: the journal grew by {grew} bytes for {new_part} bytes of messages"
        );
        assert!(
            grew * 10 < base.len() as u64,
            "turn {i}: grew by {grew}, the history is {}",
            base.len()
        );
        assert_eq!(store.load(&id).expect("load"), expected, "turn {i}");
        assert_eq!(open(&dir).load(&id).expect("load"), expected, "turn {i}");
        journal_len = now;
    }
    let records = frames(&fs::read(&f.journal).expect("journal"));
    assert_eq!(records.len(), 1 + 6, "a header and one record per save");
}

#[tokio::test]
async fn session_saves_through_the_harness_append_turn_after_turn() {
    let (_tmp, dir) = store_dir();
    let calculator = Calculator::shared();
    let log = RequestLog::default();
    let harness = Harness::builder(open(&dir), move || {
        ToolThenAnswerEngine::new(Arc::clone(&log))
    })
    .tools(calculator.clone())
    .build();
    let mut session = harness
        .new_session(SessionOptions::new(MODEL))
        .expect("new session");
    session.send("What is 1*2?").await.expect("turn");
    harness.save_session(&mut session).expect("first save");
    let f = files(&dir, session.id());
    let base = fs::read(&f.base).expect("base");
    let base_inode = inode(&f.base);

    let mut journal_len = len_or_zero(&f.journal);
    for turn in 1..=6 {
        let before = session.transcript().len();
        session
            .send(format!("Turn {turn}: one more calculation"))
            .await
            .expect("turn");
        let new_part = json_len(&session.transcript()[before..]);
        let revision = harness.save_session(&mut session).expect("save");
        assert_eq!(revision, Revision::from_u64(turn + 1));

        assert_eq!(fs::read(&f.base).expect("base"), base, "turn {turn}");
        assert_eq!(inode(&f.base), base_inode, "turn {turn}");
        let now = len_or_zero(&f.journal);
        let grew = now - journal_len;
        let allowance = 2 * RECORD_OVERHEAD + if turn == 1 { HEADER_ALLOWANCE } else { 0 };
        assert!(
            (new_part..=new_part + allowance).contains(&grew),
            "turn {turn}: the journal grew by {grew} bytes for {new_part} bytes of messages"
        );
        assert_eq!(
            harness.store().load(session.id()).expect("load"),
            session.snapshot(),
            "turn {turn}"
        );
        journal_len = now;
    }
    assert_eq!(calculator.calls(), 7);
    let resumed = harness.resume_session(session.id(), None).expect("resume");
    assert_eq!(resumed.snapshot(), session.snapshot());
}

#[test]
fn a_fresh_store_instance_reads_the_journal_and_appends_after_it() {
    let (_tmp, dir) = store_dir();
    let id = sid("fresh");
    let first = open(&dir);
    save(&first, built(&id, 3, TURN));
    let e2 = append_turn(&first, &id, 3, TURN);
    let f = files(&dir, &id);
    let base = fs::read(&f.base).expect("base");

    let second = open(&dir);
    assert_eq!(second.load(&id).expect("load"), e2);
    let e3 = append_turn(&second, &id, 4, TURN);
    assert_eq!(fs::read(&f.base).expect("base"), base);
    assert_eq!(frames(&fs::read(&f.journal).expect("journal")).len(), 3);
    assert_eq!(first.load(&id).expect("load"), e3);
    assert_eq!(second.load(&id).expect("load"), e3);
    // And the first instance appends after the second one's record, not over it.
    let e4 = append_turn(&first, &id, 5, TURN);
    assert_eq!(second.load(&id).expect("load"), e4);
    assert_eq!(open(&dir).load(&id).expect("load"), e4);
    assert_eq!(frames(&fs::read(&f.journal).expect("journal")).len(), 4);
}

#[test]
fn two_store_instances_interleaving_saves_each_see_the_others_appends() {
    let (_tmp, dir) = store_dir();
    let id = sid("interleaved");
    let a = open(&dir);
    let b = open(&dir);
    save(&a, built(&id, 2, TURN));
    let f = files(&dir, &id);
    let base = fs::read(&f.base).expect("base");

    for k in 0..12 {
        let (writer, other) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
        // Sometimes the writer saves twice in a row, so its memory of the files is fresh
        // for one save and stale for the next.
        let repeats = if k % 3 == 0 { 2 } else { 1 };
        for r in 0..repeats {
            let expected = append_turn(writer, &id, 10 + 2 * k + r, TURN);
            assert_eq!(other.load(&id).expect("load"), expected, "step {k}.{r}");
            assert_eq!(writer.load(&id).expect("load"), expected, "step {k}.{r}");
            assert_eq!(
                open(&dir).load(&id).expect("load"),
                expected,
                "step {k}.{r}"
            );
        }
        assert_eq!(fs::read(&f.base).expect("base"), base, "step {k}");
    }
    let journal = frames(&fs::read(&f.journal).expect("journal"));
    let revisions: Vec<u64> = journal[1..]
        .iter()
        .map(|frame| frame.json()["revision"].as_u64().expect("a revision"))
        .collect();
    assert_eq!(revisions, (2..=17).collect::<Vec<u64>>());
}

#[test]
fn rapid_rewrites_by_another_instance_never_make_a_stale_save_pass() {
    // Instance `a` remembers the files it last wrote (inode, size, modification time).
    // Instance `b` then replaces the base twice in quick succession with snapshots of the
    // same size: the second new file may get the first one's inode back and the same
    // timestamp. A save by `a` based on what it wrote must still be a conflict.
    let (_tmp, dir) = store_dir();
    let id = sid("aba");
    let a = open_buffered(&dir);
    let b = open_buffered(&dir);
    let at = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("a time")
        .with_timezone(&chrono::Utc);
    let fixed = |revision: u64| {
        SessionSnapshot::builder(id.clone(), MODEL)
            .timestamps(at, at)
            .transcript(vec![Message::user("same size every time")])
            .build()
            .expect("build")
            .with_revision(Revision::from_u64(revision))
    };
    let mut revision = 0;
    let mut lost = Vec::new();
    for round in 0..300 {
        let stale = fixed(revision);
        assert_eq!(a.save(&stale).expect("a saves").as_u64(), revision + 1);
        revision += 1;
        for _ in 0..2 {
            assert_eq!(
                b.save(&fixed(revision)).expect("b saves").as_u64(),
                revision + 1
            );
            revision += 1;
        }
        // `a` saves again from the revision it wrote: two revisions behind.
        match a.save(&fixed(revision - 2)) {
            Err(err) if err.is_conflict() => {}
            Ok(r) => {
                lost.push(round);
                revision = r.as_u64();
            }
            Err(other) => panic!("round {round}: {other}"),
        }
    }
    assert!(
        lost.is_empty(),
        "a stale save passed the compare-and-swap (lost updates) in rounds {lost:?}"
    );
}

#[test]
fn a_replaced_base_with_the_old_inode_size_and_time_still_fails_a_stale_save() {
    // What the rapid test above hopes for, made certain: on a file system that reuses
    // inode numbers (ext4 does, almost every time here), two rewrites by `b` give the base
    // back the inode `a` last saw, with the same size. On a kernel with coarse file
    // timestamps they also share `a`'s modification time (a tick is milliseconds); here the
    // time is set back by hand to stand for that. The stored revision moved on all the
    // same, so `a`'s save from the revision it wrote must be a conflict.
    let (_tmp, dir) = store_dir();
    let id = sid("stamp");
    let base_path = files(&dir, &id).base;
    let a = open_buffered(&dir);
    let b = open_buffered(&dir);
    let at = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("a time")
        .with_timezone(&chrono::Utc);
    let fixed = |revision: u64| {
        SessionSnapshot::builder(id.clone(), MODEL)
            .timestamps(at, at)
            .transcript(vec![Message::user("same size every time")])
            .build()
            .expect("build")
            .with_revision(Revision::from_u64(revision))
    };
    let mut revision = 0;
    let mut collisions = 0;
    for _ in 0..50 {
        revision = a.save(&fixed(revision)).expect("a saves").as_u64();
        let seen = fs::symlink_metadata(&base_path).expect("stat");
        for _ in 0..2 {
            revision = b.save(&fixed(revision)).expect("b saves").as_u64();
        }
        let now = fs::symlink_metadata(&base_path).expect("stat");
        if (now.ino(), now.len()) != (seen.ino(), seen.len()) {
            continue;
        }
        collisions += 1;
        fs::File::options()
            .write(true)
            .open(&base_path)
            .expect("open")
            .set_modified(seen.modified().expect("mtime"))
            .expect("set the time back");
        match a.save(&fixed(revision - 2)) {
            Err(err) if err.is_conflict() => {}
            Ok(r) => panic!(
                "a stale save from revision {} passed and stored revision {r}, losing revisions {} and {revision}",
                revision - 2,
                revision - 1
            ),
            Err(other) => panic!("{other}"),
        }
    }
    if collisions == 0 {
        eprintln!("skipped: this file system never gave the base its old inode back");
    }
}

#[test]
fn stale_snapshot_is_a_conflict_whether_the_stored_revision_is_in_the_journal_or_the_base() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("cas");
    save(&store, built(&id, 2, TURN));
    let f = files(&dir, &id);

    // Stored revision in the base: a new snapshot of the same id conflicts.
    let err = store.save(&built(&id, 2, TURN)).expect_err("stale");
    assert_conflict(&err, Revision::NEW, Some(Revision::from_u64(1)));

    // Stored revision in the journal: a snapshot loaded at the base's revision conflicts,
    // although the base still says revision 1.
    let first = store.load(&id).expect("load");
    let second = store.load(&id).expect("load");
    save(&store, appended(first, 2, TURN));
    let before = dir_contents(&dir);
    for (name, store) in [("same store", &store), ("fresh store", &open(&dir))] {
        let err = store
            .save(&appended(second.clone(), 3, TURN))
            .expect_err(name);
        assert_conflict(&err, Revision::from_u64(1), Some(Revision::from_u64(2)));
        let err = store.save(&second).expect_err(name);
        assert_conflict(&err, Revision::from_u64(1), Some(Revision::from_u64(2)));
    }
    assert_eq!(dir_contents(&dir), before, "a failed save changed files");

    // Back in the base after a full rewrite: a snapshot loaded from the journal conflicts.
    let from_journal = store.load(&id).expect("load");
    let rewritten = built(&id, 1, TURN).with_revision(Revision::from_u64(2));
    save(&store, rewritten);
    assert_eq!(len_or_zero(&f.journal), 0);
    let before = dir_contents(&dir);
    let err = store
        .save(&appended(from_journal, 4, TURN))
        .expect_err("stale");
    assert_conflict(&err, Revision::from_u64(2), Some(Revision::from_u64(3)));
    assert_eq!(dir_contents(&dir), before, "a failed save changed files");
}

#[test]
fn edited_history_at_the_stored_revision_is_appended_and_the_history_keeps_the_old() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("edited");
    save(&store, built(&id, 3, SMALL));
    append_turn(&store, &id, 3, SMALL);
    let stored = append_turn(&store, &id, 4, SMALL);
    let f = files(&dir, &id);
    let old_base = fs::read(&f.base).expect("base");
    let journal_len = len_or_zero(&f.journal);
    assert!(journal_len > 0);

    // Same id, revision, creation time and lengths; one message's text differs.
    let mut transcript = stored.transcript().to_vec();
    transcript[0] = Message::user(filler(999, stored.transcript()[0].text().len()));
    let edited = SessionSnapshot::builder(id.clone(), MODEL)
        .timestamps(stored.created_at(), stored.updated_at())
        .transcript(transcript)
        .usage(stored.usage().to_vec())
        .build()
        .expect("build")
        .with_revision(stored.revision());
    let expected = save(&store, edited);

    // Appended as one entry that replaces the whole view: the base is untouched.
    assert_eq!(fs::read(&f.base).expect("base"), old_base);
    let journal = frames(&fs::read(&f.journal).expect("journal"));
    let last = journal.last().expect("an entry");
    assert_eq!(last.json()["kind"], json!("edit"));
    assert_eq!(last.json()["keep"], json!([0, 0]));
    assert!(len_or_zero(&f.journal) > journal_len);
    assert_eq!(store.load(&id).expect("load"), expected);
    assert_eq!(open(&dir).load(&id).expect("load"), expected);
    assert_eq!(listed(&store, &id), SessionSummary::of(&expected));
    // The revision before the edit still loads as it was, and the history holds the
    // replaced messages.
    assert_eq!(
        open(&dir).load_at(&id, stored.revision()).expect("load_at"),
        stored.clone().with_revision(stored.revision())
    );
    let history = open(&dir).history(&id).expect("history");
    assert!(history
        .messages
        .iter()
        .any(|m| m.message == stored.transcript()[0]
            && m.standing
                == agent_session::Standing::Replaced {
                    revision: expected.revision()
                }));

    let next = append_turn(&store, &id, 5, SMALL);
    assert_eq!(open(&dir).load(&id).expect("load"), next);
}

// ---------------------------------------------------------------------------------------
// The log: never folded
// ---------------------------------------------------------------------------------------

/// Regression: a history whose head view holds the first save's messages, all of them in
/// order, listed none of them (the checkpoint's messages were taken out whole, and then
/// counted as none).
#[test]
fn the_history_of_a_session_saved_once_lists_its_messages() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("saved-once");
    let stored = save(&store, built(&id, 2, TURN));
    for history in [
        store.history(&id).expect("history"),
        open(&dir).history(&id).expect("history in a fresh store"),
    ] {
        let listed: Vec<&Message> = history.messages.iter().map(|m| &m.message).collect();
        let expected: Vec<&Message> = stored.transcript().iter().collect();
        assert_eq!(listed, expected);
        for (index, message) in history.messages.iter().enumerate() {
            assert_eq!(message.standing, agent_session::Standing::InView { index });
            assert_eq!(message.added_at, stored.revision());
        }
    }
    let memory = agent_session::MemorySessionStore::new();
    let saved = built(&id, 2, TURN);
    memory.save(&saved).expect("save to memory");
    assert_eq!(
        memory.history(&id).expect("history").messages.len(),
        saved.transcript().len()
    );
}

#[test]
fn every_save_appends_and_every_revision_stays_loadable() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("log");
    let first = save(&store, built(&id, 1, TURN));
    let f = files(&dir, &id);
    let base = fs::read(&f.base).expect("base");
    let mut saved = vec![first];
    let mut journal_len = 0;
    for i in 1..=80 {
        let expected = append_turn(&store, &id, i, TURN);
        let turn_len = json_len(&expected.transcript()[expected.transcript().len() - 3..]);
        let grown = len_or_zero(&f.journal) - journal_len;
        assert!(
            grown > turn_len && grown < turn_len + RECORD_OVERHEAD + HEADER_ALLOWANCE,
            "turn {i}: the journal grew by {grown} bytes for a turn of {turn_len}"
        );
        journal_len += grown;
        assert_eq!(
            fs::read(&f.base).expect("base"),
            base,
            "turn {i}: the base changed"
        );
        saved.push(expected);
    }
    // 80 turns of 2.7 KB, about 216 KB: the journal holds them all, never folded.
    assert!(journal_len > 80 * TURN as u64, "{journal_len}");
    let reader = open(&dir);
    for expected in &saved {
        assert_eq!(
            reader.load_at(&id, expected.revision()).expect("load_at"),
            expected.clone().with_revision(expected.revision()),
            "revision {}",
            expected.revision()
        );
    }
    let revisions = reader.revisions(&id).expect("revisions");
    assert_eq!(revisions.len(), 81);
    assert_eq!(revisions[0].kind, agent_session::EntryKind::Checkpoint);
    assert!(revisions[1..]
        .iter()
        .all(|r| r.kind == agent_session::EntryKind::Turn));
    assert_eq!(reader.load(&id).expect("load"), saved[80]);
}

/// An engine that plays turn `n` of [`turn`]: its assistant message calling `write_file`,
/// read from the transcript length, so every turn is the same shape and size.
struct TurnEngine;

impl Engine for TurnEngine {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        let i = request.transcript.len() / 3;
        let mut messages = turn(i, TURN);
        Ok(Completion::new(messages.swap_remove(1), turn_usage(i)))
    }
}

/// The `write_file` tool of [`turn`]: answers call `call_<i>` with turn `i`'s result.
struct TurnTool;

impl ToolExecutor for TurnTool {
    fn definitions(&self) -> Vec<ToolDefinition> {
        vec![ToolDefinition::new(
            "write_file",
            "Writes a file",
            json!({"type": "object"}),
        )]
    }

    fn execute<'a>(&'a self, call: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        Box::pin(async move {
            let i: usize = call
                .id
                .strip_prefix("call_")
                .and_then(|n| n.parse().ok())
                .ok_or("unexpected call id")?;
            let result = turn(i, TURN).swap_remove(2);
            let output = result
                .tool_results()
                .next()
                .and_then(|r| r.output.as_text())
                .ok_or("no result")?
                .to_owned();
            Ok(ToolOutput::from(output))
        })
    }
}

#[tokio::test]
async fn a_thousand_turns_with_rewinds_and_compactions_stay_within_1_3_times_the_history_on_disk() {
    let (_tmp, dir) = store_dir();
    // Buffered: the same files and the same appends as Sync, without a thousand fsyncs,
    // to keep the test fast.
    let harness = Harness::builder(open_buffered(&dir), || TurnEngine)
        .tools(Arc::new(TurnTool))
        .build();
    let mut session = harness
        .new_session(SessionOptions::new(MODEL).max_turns(1))
        .expect("new session");
    let f = files(&dir, session.id());
    let (mut rewinds, mut compactions) = (0, 0);
    for i in 0..1_000 {
        let message = turn(i, TURN).swap_remove(0);
        session.send_message(message).await.expect("turn");
        harness.save_session(&mut session).expect("save");
        if i % 50 == 49 {
            harness
                .rewind_session(&mut session, agent_session::RewindTo::LastTurns(1))
                .expect("rewind");
            rewinds += 1;
        }
        if i % 300 == 299 {
            let point = session.compaction_point(2).expect("a point to compact");
            session
                .compact(agent_session::Compaction::new(
                    point,
                    vec![Message::user(format!("Summary of {point} messages."))],
                ))
                .expect("compact");
            harness
                .save_session(&mut session)
                .expect("save the compaction");
            compactions += 1;
        }
    }
    assert_eq!((rewinds, compactions), (20, 3));
    let store = open(&dir);
    let history = store.history(session.id()).expect("history");
    let said: Vec<Message> = history.messages.iter().map(|m| m.message.clone()).collect();
    let history_len = json_len(&said);
    // The view checkpoint of the last compaction is on disk too.
    let view = dir.join(format!("{}.view", session.id()));
    assert!(view.exists(), "the last compaction's view checkpoint");
    let on_disk = len_or_zero(&f.base) + len_or_zero(&f.journal) + len_or_zero(&view);
    // The figure the README quotes (run with `-- --nocapture`).
    eprintln!(
        "1,000 turns, {rewinds} rewinds, {compactions} compactions: {on_disk} bytes on disk \
         (base {} + journal {} + view {}) for a history of {} messages, {history_len} bytes of JSON: {}.{:03} x",
        len_or_zero(&f.base),
        len_or_zero(&f.journal),
        len_or_zero(&view),
        said.len(),
        on_disk / history_len,
        on_disk % history_len * 1000 / history_len
    );
    assert!(
        on_disk * 10 <= history_len * 13,
        "the session takes {on_disk} bytes on disk for a history of {history_len} bytes"
    );
    let summary = store
        .list()
        .expect("list")
        .sessions
        .into_iter()
        .next()
        .expect("listed");
    assert_eq!(summary.history.rewinds, 20);
    assert_eq!(summary.history.compactions, 3);
    let expected = session.snapshot();
    assert_eq!(harness.store().load(session.id()).expect("load"), expected);
    assert_eq!(store.load(session.id()).expect("load"), expected);
    assert_eq!(summary, SessionSummary::of(&expected));
}

// ---------------------------------------------------------------------------------------
// Crashes and corruption
// ---------------------------------------------------------------------------------------

/// A session saved at revision 1 (base) and appended `records` times, with small turns:
/// what a load gave after each revision (index 0 = revision 1) and the journal's bytes.
fn small_session(dir: &Path, id: &SessionId, records: usize) -> (Vec<SessionSnapshot>, Vec<u8>) {
    let store = open(dir);
    let mut revisions = vec![save(&store, built(id, 1, SMALL))];
    for i in 0..records {
        revisions.push(append_turn(&store, id, 1 + i, SMALL));
    }
    let journal = fs::read(files(dir, id).journal).expect("journal");
    assert_eq!(frames(&journal).len(), records + 1);
    (revisions, journal)
}

/// After a torn tail was left in the journal: a load gives `expected`, and a save based on
/// it succeeds, cuts the tail (the journal is `kept` followed by one new frame, or a new
/// journal if `kept` holds no header) and loads back exactly.
fn check_torn(dir: &Path, id: &SessionId, expected: &SessionSnapshot, kept: &[u8], what: &str) {
    let store = open(dir);
    let loaded = store
        .load(id)
        .unwrap_or_else(|e| panic!("{what}: load: {e}"));
    assert_eq!(&loaded, expected, "{what}");
    let next = appended(loaded, 50, SMALL);
    let revision = store
        .save(&next)
        .unwrap_or_else(|e| panic!("{what}: save: {e}"));
    assert_eq!(revision, expected.revision().next(), "{what}");
    let next = next.with_revision(revision);
    assert_eq!(store.load(id).expect("load"), next, "{what}");
    assert_eq!(open(dir).load(id).expect("load"), next, "{what}");
    let journal = fs::read(files(dir, id).journal).expect("journal");
    let parsed = frames(&journal);
    let kept_frames = frames(kept).len();
    if kept_frames == 0 {
        assert_eq!(parsed.len(), 2, "{what}: a new header and the record");
    } else {
        assert_eq!(
            &journal[..kept.len()],
            kept,
            "{what}: the intact records changed"
        );
        assert_eq!(
            parsed.len(),
            kept_frames + 1,
            "{what}: the tail was not cut"
        );
    }
}

#[test]
fn journal_cut_at_every_byte_loads_the_last_whole_record_and_the_next_save_cuts_the_tail() {
    let (_tmp, dir) = store_dir();
    let id = sid("torn");
    let (revisions, full) = small_session(&dir, &id, 2);
    let parsed = frames(&full);
    let journal_path = files(&dir, &id).journal;
    for cut in 0..=full.len() {
        write_private(&journal_path, &full[..cut]);
        let whole: Vec<&Frame> = parsed.iter().filter(|f| f.end <= cut).collect();
        let kept_end = whole.last().map_or(0, |f| f.end);
        let expected = &revisions[whole.len().saturating_sub(1)];
        check_torn(
            &dir,
            &id,
            expected,
            &full[..kept_end],
            &format!("cut at {cut}"),
        );
    }
}

/// Bytes a crash or a disk can leave after the last whole record.
fn garbage_tails(last_record: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut flipped = last_record.to_vec();
    flipped[30] ^= 0x20;
    let mut noise = Vec::new();
    let mut x: u32 = 0x1234_5678;
    for _ in 0..600 {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        noise.push(x.to_be_bytes()[0]);
    }
    vec![
        ("one zero byte", vec![0]),
        ("a frame header of zeros", vec![0; 19]),
        ("a record's worth of zeros", vec![0; last_record.len()]),
        ("a page of zeros", vec![0; 4096]),
        ("an '@'", b"@".to_vec()),
        ("half a frame header", b"@0000".to_vec()),
        ("a frame header alone", last_record[..19].to_vec()),
        (
            "a record missing its newline",
            last_record[..last_record.len() - 1].to_vec(),
        ),
        ("a record with a flipped byte", flipped),
        (
            "a header claiming 4 GiB",
            b"@ffffffff 00000000\n{\"revision\":".to_vec(),
        ),
        ("newlines", b"\n\n\n".to_vec()),
        ("noise", noise),
    ]
}

#[test]
fn garbage_or_zeros_after_the_last_whole_record_are_a_torn_tail() {
    let (_tmp, dir) = store_dir();
    let id = sid("garbage");
    let (revisions, full) = small_session(&dir, &id, 2);
    let parsed = frames(&full);
    let last = &parsed[2];
    let journal_path = files(&dir, &id).journal;
    for (what, tail) in garbage_tails(&full[last.offset..]) {
        // In place of the last record: the revision before it.
        let mut bytes = full[..last.offset].to_vec();
        bytes.extend_from_slice(&tail);
        write_private(&journal_path, &bytes);
        check_torn(&dir, &id, &revisions[1], &full[..last.offset], what);
        // After the last record: the last revision.
        let mut bytes = full.clone();
        bytes.extend_from_slice(&tail);
        write_private(&journal_path, &bytes);
        check_torn(&dir, &id, &revisions[2], &full, &format!("{what} after it"));
    }
}

#[test]
fn damage_before_an_intact_record_is_corruption_naming_the_journal() {
    let (_tmp, dir) = store_dir();
    let id = sid("damaged");
    let (_, full) = small_session(&dir, &id, 3);
    let parsed = frames(&full);
    let f = files(&dir, &id);
    // Every byte of the header and of the first two records: an intact record follows.
    let mut wrong = Vec::new();
    for at in 0..parsed[3].offset {
        let mut bytes = full.clone();
        bytes[at] ^= 0x01;
        write_private(&f.journal, &bytes);
        let before = dir_contents(&dir);
        let result = open(&dir).load(&id);
        assert_eq!(
            dir_contents(&dir),
            before,
            "byte {at}: a failed load changed files"
        );
        match result {
            Err(err)
                if err.kind() == ErrorKind::Corrupt
                    && err.to_string().contains(&f.journal.display().to_string()) => {}
            Err(err) => wrong.push(format!("byte {at} ({:?}): {err}", full[at] as char)),
            Ok(loaded) => wrong.push(format!(
                "byte {at} ({:?}): loaded revision {} as if the rest were a torn tail",
                full[at] as char,
                loaded.revision()
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "damage followed by an intact record was not reported as corruption of {}:\n{}",
        f.journal.display(),
        wrong.join("\n")
    );
}

#[test]
fn a_damaged_newline_before_the_last_record_does_not_let_a_save_cut_intact_records() {
    let (_tmp, dir) = store_dir();
    let id = sid("newline");
    let (_, full) = small_session(&dir, &id, 3);
    let parsed = frames(&full);
    let f = files(&dir, &id);
    // The newline that ends the second record, just before the intact last one.
    let mut bytes = full.clone();
    bytes[parsed[3].offset - 1] = b' ';
    write_private(&f.journal, &bytes);

    let store = open(&dir);
    let loaded = store.load(&id);
    if let Ok(loaded) = &loaded {
        // A writer working from what the load gave would save over the two records.
        let _ = store.save(&appended(loaded.clone(), 9, SMALL));
    }
    let journal = fs::read(&f.journal).expect("journal");
    assert!(
        journal
            .windows(parsed[3].payload.len())
            .any(|w| w == parsed[3].payload.as_slice()),
        "the intact last record (revision 4) was cut from the journal"
    );
    let err = loaded.expect_err("damage followed by an intact record must not load");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
}

#[test]
fn a_save_on_a_corrupt_journal_fails_and_changes_nothing() {
    let (_tmp, dir) = store_dir();
    let id = sid("corrupt-save");
    let (revisions, full) = small_session(&dir, &id, 3);
    let parsed = frames(&full);
    let f = files(&dir, &id);
    let mut bytes = full.clone();
    bytes[parsed[2].offset + 25] ^= 0x01;
    write_private(&f.journal, &bytes);
    let before = dir_contents(&dir);
    let err = open(&dir)
        .save(&appended(revisions[3].clone(), 9, SMALL))
        .expect_err("a journal that cannot be trusted");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(
        err.to_string().contains(&f.journal.display().to_string()),
        "{err}"
    );
    assert_eq!(dir_contents(&dir), before, "a failed save changed files");
}

/// The journal `full` with frame `index` (0 = the header, 1 = the first entry) replaced
/// by `edit` of its JSON, framed with a valid checksum: bytes no crash can leave. An
/// entry is edited as `{"head": ..., "body": ...}`.
fn forged(full: &[u8], index: usize, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let parsed = frames(full);
    let payload = if index == 0 {
        let mut value = parsed[index].json();
        edit(&mut value);
        value.to_string().into_bytes()
    } else {
        let mut value = json!({"head": parsed[index].json(), "body": parsed[index].body()});
        edit(&mut value);
        journal_support::entry_payload(&value["head"], &value["body"])
    };
    let mut out = full[..parsed[index].offset].to_vec();
    out.extend_from_slice(&frame(&payload));
    out.extend_from_slice(&full[parsed[index].end..]);
    out
}

#[test]
fn well_framed_records_that_do_not_follow_are_corruption() {
    let (_tmp, dir) = store_dir();
    let id = sid("forged");
    let (revisions, full) = small_session(&dir, &id, 3);
    let f = files(&dir, &id);
    let base = fs::read(&f.base).expect("base");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a skipped revision",
            forged(&full, 2, |v| v["head"]["revision"] = json!(9)),
        ),
        (
            "a repeated revision",
            forged(&full, 2, |v| v["head"]["revision"] = json!(2)),
        ),
        (
            "keeping more messages than there are",
            forged(&full, 2, |v| v["head"]["keep"] = json!([0, 999])),
        ),
        (
            "restoring a revision the log does not hold",
            forged(&full, 2, |v| v["head"]["base"] = json!(0)),
        ),
        (
            "a body of another length than its head says",
            forged(&full, 2, |v| v["head"]["messages"] = json!(1)),
        ),
        (
            "a tool call without its result",
            forged(&full, 3, |v| {
                v["body"]["messages"]
                    .as_array_mut()
                    .expect("messages")
                    .pop();
                let messages = v["head"]["messages"].as_u64().expect("a count");
                v["head"]["messages"] = json!(messages - 1);
                let state = v["head"]["state"]["messages"].as_u64().expect("a count");
                v["head"]["state"]["messages"] = json!(state - 1);
            }),
        ),
        (
            "an unknown field",
            forged(&full, 1, |v| v["head"]["extra_field"] = json!(true)),
        ),
    ];
    for (what, bytes) in cases {
        write_private(&f.journal, &bytes);
        let before = dir_contents(&dir);
        let err = open(&dir).load(&id).expect_err(what);
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}: {err}");
        assert_eq!(
            dir_contents(&dir),
            before,
            "{what}: a failed load changed files"
        );
        // A save from the last good state either refuses, changing nothing, or stores a
        // whole snapshot (repairing the session, as for a damaged base); never one that
        // builds on records it cannot trust.
        let next = appended(revisions[3].clone(), 9, SMALL);
        match open(&dir).save(&next) {
            Ok(revision) => assert_eq!(
                open(&dir).load(&id).map_err(|e| e.to_string()),
                Ok(next.with_revision(revision)),
                "{what}: the save returned Ok but did not store what it was given"
            ),
            Err(err) => {
                assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}: {err}");
                assert_eq!(
                    dir_contents(&dir),
                    before,
                    "{what}: a failed save changed files"
                );
            }
        }
        write_private(&f.base, &base);
        write_private(&f.journal, &full);
    }
    assert_eq!(open(&dir).load(&id).expect("load"), revisions[3]);
}

#[test]
fn a_journal_header_contradicting_its_base_is_not_appended_to() {
    // The header names this base (id, revision, creation time) but claims other lengths:
    // load refuses the journal, so a save must not report success by appending to it.
    let (_tmp, dir) = store_dir();
    let id = sid("bad-header");
    let (revisions, full) = small_session(&dir, &id, 3);
    let f = files(&dir, &id);
    write_private(
        &f.journal,
        &forged(&full, 0, |v| v["base"]["messages"] = json!(7)),
    );
    let err = open(&dir)
        .load(&id)
        .expect_err("the header contradicts the base");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");

    let before = dir_contents(&dir);
    let next = appended(revisions[3].clone(), 9, SMALL);
    match open(&dir).save(&next) {
        Ok(revision) => assert_eq!(
            open(&dir).load(&id).map_err(|e| e.to_string()),
            Ok(next.with_revision(revision)),
            "the save returned Ok but what it stored does not load"
        ),
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
            assert_eq!(dir_contents(&dir), before, "a failed save changed files");
        }
    }
}

#[test]
fn loosened_base_is_rewritten_private_before_it_is_appended_to() {
    use std::os::unix::fs::PermissionsExt;
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("loosened");
    small_session(&dir, &id, 2);
    let f = files(&dir, &id);
    let loaded = store.load(&id).expect("load");
    fs::set_permissions(&f.base, fs::Permissions::from_mode(0o644)).expect("chmod");
    let base_inode = inode(&f.base);

    let base_bytes = fs::read(&f.base).expect("base");
    let journal_len = len_or_zero(&f.journal);

    let expected = save(&store, appended(loaded, 5, SMALL));
    assert_ne!(
        inode(&f.base),
        base_inode,
        "appended beside a loosened base"
    );
    let mode = fs::metadata(&f.base).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // The same base, private now, and the turn appended after the journal's entries.
    assert_eq!(fs::read(&f.base).expect("base"), base_bytes);
    assert!(len_or_zero(&f.journal) > journal_len);
    assert_eq!(open(&dir).load(&id).expect("load"), expected);
    assert_eq!(open(&dir).revisions(&id).expect("revisions").len(), 4);
}

#[test]
fn stale_journal_put_back_after_a_full_rewrite_is_ignored() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("stale");
    let (_, old_journal) = small_session(&dir, &id, 3);
    let f = files(&dir, &id);

    // A full rewrite at the stored revision, then the old journal put back by hand.
    let rewritten = save(
        &store,
        built(&id, 2, SMALL).with_revision(Revision::from_u64(4)),
    );
    write_private(&f.journal, &old_journal);
    assert_eq!(store.load(&id).expect("load"), rewritten);
    assert_eq!(open(&dir).load(&id).expect("load"), rewritten);
    assert_eq!(listed(&open(&dir), &id), SessionSummary::of(&rewritten));
    let next = append_turn(&open(&dir), &id, 7, SMALL);
    assert_eq!(open(&dir).load(&id).expect("load"), next);
    let journal = frames(&fs::read(&f.journal).expect("journal"));
    assert_eq!(journal.len(), 2, "the stale records were not cut");
    assert_eq!(journal[0].json()["base_revision"], json!(5));

    // A deleted session's journal, put back beside a new session of the same id at the
    // same revision and with the same lengths: only the creation time tells them apart.
    store.delete(&id).expect("delete");
    let (_, old_journal) = small_session(&dir, &id, 2);
    store.delete(&id).expect("delete");
    std::thread::sleep(Duration::from_millis(2));
    let fresh = save(&store, built(&id, 1, SMALL));
    write_private(&f.journal, &old_journal);
    assert_eq!(open(&dir).load(&id).expect("load"), fresh);
    let next = append_turn(&open(&dir), &id, 3, SMALL);
    assert_eq!(open(&dir).load(&id).expect("load"), next);
}

#[test]
fn journal_copied_from_another_session_is_never_applied() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let alpha = sid("alpha");
    let beta = sid("beta");
    let (alpha_revisions, alpha_journal) = small_session(&dir, &alpha, 2);
    let beta_stored = save(&store, built(&beta, 1, SMALL));
    let beta_files = files(&dir, &beta);
    // `beta_stored` was loaded before the copy: extending it appends.
    write_private(&beta_files.journal, &alpha_journal);

    for store in [&store, &open(&dir)] {
        match store.load(&beta) {
            Ok(loaded) => assert_eq!(loaded, beta_stored, "alpha's records applied to beta"),
            Err(err) => assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}"),
        }
    }
    let before = dir_contents(&dir);
    match open(&dir).save(&appended(beta_stored.clone(), 5, SMALL)) {
        Ok(revision) => {
            assert_eq!(revision, Revision::from_u64(2));
            let loaded = open(&dir).load(&beta).expect("load");
            assert_eq!(
                loaded.transcript().len(),
                beta_stored.transcript().len() + 3
            );
            assert_eq!(&loaded.transcript()[..3], beta_stored.transcript());
        }
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
            assert_eq!(dir_contents(&dir), before);
        }
    }
    assert_eq!(open(&dir).load(&alpha).expect("load"), alpha_revisions[2]);
}

#[test]
fn orphan_journal_without_its_base_resurrects_nothing() {
    let (_tmp, dir) = store_dir();
    let id = sid("orphan");
    let (revisions, journal) = small_session(&dir, &id, 2);
    let f = files(&dir, &id);
    fs::remove_file(&f.base).expect("remove the base by hand");

    let store = open(&dir);
    assert!(store.load(&id).expect_err("no base").is_not_found());
    let list = store.list().expect("list");
    assert!(
        list.sessions.is_empty() && list.unreadable.is_empty(),
        "{list:?}"
    );

    // A new session under the same id, even one created at the same instant with the same
    // first message, starts clean.
    let fresh = SessionSnapshot::builder(id.clone(), MODEL)
        .timestamps(revisions[0].created_at(), revisions[0].updated_at())
        .transcript(revisions[0].transcript().to_vec())
        .usage(revisions[0].usage().to_vec())
        .build()
        .expect("build");
    let fresh = save(&store, fresh);
    assert_eq!(fresh.revision(), Revision::from_u64(1));
    assert_eq!(store.load(&id).expect("load"), fresh);
    assert_eq!(open(&dir).load(&id).expect("load"), fresh);
    assert_ne!(bytes_or_empty(&f.journal), journal);
    assert_eq!(listed(&store, &id), SessionSummary::of(&fresh));
}

// ---------------------------------------------------------------------------------------
// Hostile files in the journal's place
// ---------------------------------------------------------------------------------------

/// A session at revision 2 (the base and one record) and a snapshot loaded from it.
fn session_with_journal(dir: &Path, id: &SessionId) -> SessionSnapshot {
    let store = open(dir);
    save(&store, built(id, 1, SMALL));
    append_turn(&store, id, 1, SMALL);
    store.load(id).expect("load")
}

#[test]
fn symlinked_journal_is_refused_and_never_followed() {
    let (tmp, dir) = store_dir();
    let id = sid("linked");
    let loaded = session_with_journal(&dir, &id);
    let f = files(&dir, &id);
    let outside = tmp.path().join("outside.journal");
    fs::rename(&f.journal, &outside).expect("move the journal out");
    symlink(&outside, &f.journal).expect("symlink");
    let outside_bytes = fs::read(&outside).expect("outside");

    let store = open(&dir);
    assert_insecure(&store.load(&id).expect_err("a link"), &f.journal);
    assert_insecure(
        &store
            .save(&appended(loaded.clone(), 2, SMALL))
            .expect_err("a link"),
        &f.journal,
    );
    assert_insecure(
        &store
            .save(&built(&id, 1, SMALL).with_revision(loaded.revision()))
            .expect_err("a link"),
        &f.journal,
    );
    assert_eq!(fs::read(&outside).expect("outside"), outside_bytes);
    assert!(fs::symlink_metadata(&f.journal).expect("stat").is_symlink());

    // A dangling link beside a session that does not exist yet: never created through.
    let new_id = sid("linked-new");
    let target = tmp.path().join("planted.journal");
    symlink(&target, files(&dir, &new_id).journal).expect("symlink");
    // The save is refused (issue 12, item 4: it could not be loaded), so nothing is stored.
    let saved = store.save(&built(&new_id, 1, SMALL));
    assert_insecure(
        &saved.expect_err("a save beside a linked journal"),
        &files(&dir, &new_id).journal,
    );
    assert!(!target.exists(), "a file was created through the link");
    match store.load(&new_id) {
        Err(err) => assert!(err.is_not_found(), "{err:?}"),
        Ok(loaded) => panic!("a session with a linked journal loaded: {loaded:?}"),
    }
}

#[test]
fn hard_linked_journal_is_refused_and_the_other_name_is_untouched() {
    let (tmp, dir) = store_dir();
    let id = sid("hardlinked");
    let loaded = session_with_journal(&dir, &id);
    let f = files(&dir, &id);
    let outside = tmp.path().join("watcher.journal");
    fs::hard_link(&f.journal, &outside).expect("hard link");
    let outside_bytes = fs::read(&outside).expect("outside");

    let store = open(&dir);
    assert_insecure(&store.load(&id).expect_err("two links"), &f.journal);
    assert_insecure(
        &store
            .save(&appended(loaded, 2, SMALL))
            .expect_err("two links"),
        &f.journal,
    );
    assert_eq!(fs::read(&outside).expect("outside"), outside_bytes);
    assert_eq!(fs::read(&f.journal).expect("journal"), outside_bytes);
}

#[test]
fn fifo_journal_is_refused_without_hanging() {
    let (_tmp, dir) = store_dir();
    let id = sid("piped");
    let loaded = session_with_journal(&dir, &id);
    let f = files(&dir, &id);
    fs::remove_file(&f.journal).expect("remove the journal");
    match Command::new("mkfifo").arg(&f.journal).status() {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("mkfifo exited with {status}"),
        Err(e) => {
            eprintln!("skipped: mkfifo is not available ({e})");
            return;
        }
    }
    let (tx, rx) = mpsc::channel();
    let (dir_in, id_in) = (dir.clone(), id.clone());
    std::thread::spawn(move || {
        let store = open(&dir_in);
        let load = store.load(&id_in).map(|_| ());
        let save = store.save(&appended(loaded, 2, SMALL)).map(|_| ());
        let _ = tx.send((load, save));
    });
    let (load, save) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a load or save hung on a FIFO");
    assert_insecure(&load.expect_err("a FIFO"), &f.journal);
    assert_insecure(&save.expect_err("a FIFO"), &f.journal);
    assert!(fs::symlink_metadata(&f.journal)
        .expect("stat")
        .file_type()
        .is_fifo());
}

/// Issue 12, item 13: an unchanged save appended an empty journal record and moved the
/// revision; now it writes nothing at all, through the store or a harness.
#[test]
fn an_unchanged_save_writes_nothing() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("unchanged");
    save(&store, built(&id, 1, SMALL));
    append_turn(&store, &id, 1, SMALL);
    let before = dir_contents(&dir);
    let loaded = store.load(&id).expect("load");
    assert_eq!(store.save(&loaded).expect("save"), loaded.revision());
    assert_eq!(open(&dir).save(&loaded).expect("save"), loaded.revision());
    assert_eq!(dir_contents(&dir), before, "nothing was written");

    let harness = Harness::builder(open(&dir), || {
        ToolThenAnswerEngine::new(RequestLog::default())
    })
    .build();
    let mut session = harness.resume_session(&id, None).expect("resume");
    assert!(!session.has_unsaved_changes());
    assert_eq!(
        harness.save_session(&mut session).expect("save"),
        loaded.revision()
    );
    assert_eq!(dir_contents(&dir), before, "nothing was written");
}

/// Puts something in place of a journal path.
type Planter = Box<dyn Fn(&Path)>;

/// Issue 12, item 4: a load reads whatever `<id>.journal` is and refuses a link, a
/// directory, a FIFO or a hard-linked file there, so a save that wrote a new session's
/// snapshot beside one would acknowledge a session that never loads. It must fail instead,
/// writing nothing; so must a whole rewrite of an existing session.
#[test]
fn a_save_beside_an_unusable_journal_path_fails_and_acknowledges_nothing() {
    let (tmp, dir) = store_dir();
    let store = open(&dir);
    let plant: Vec<(&str, Planter)> = vec![
        (
            "a directory",
            Box::new(|path: &Path| fs::create_dir(path).expect("mkdir")),
        ),
        (
            "a FIFO",
            Box::new(|path: &Path| {
                let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
                assert!(status.success(), "mkfifo");
            }),
        ),
        (
            "a dangling symbolic link",
            Box::new(|path: &Path| symlink("/nonexistent/agent-session", path).expect("symlink")),
        ),
        (
            "a symbolic link to a file",
            Box::new({
                let outside = tmp.path().join("outside.journal");
                fs::write(&outside, b"").expect("outside file");
                move |path: &Path| symlink(&outside, path).expect("symlink")
            }),
        ),
        (
            "a hard-linked file",
            Box::new({
                let outside = tmp.path().to_path_buf();
                move |path: &Path| {
                    fs::write(path, b"").expect("journal file");
                    let name = path.file_name().expect("a file name");
                    fs::hard_link(path, outside.join(name)).expect("hard link");
                }
            }),
        ),
    ];
    for (i, (what, plant)) in plant.iter().enumerate() {
        // A new session.
        let id = sid(&format!("unusable-{i}"));
        let f = files(&dir, &id);
        plant(&f.journal);
        let err = store
            .save(&built(&id, 1, SMALL))
            .expect_err(&format!("a new session beside {what}"));
        assert_insecure(&err, &f.journal);
        assert!(
            fs::symlink_metadata(&f.base).is_err(),
            "{what}: a snapshot was written"
        );
        assert!(store.load(&id).expect_err(what).is_not_found(), "{what}");

        // An existing session written whole (a builder snapshot at its revision).
        let id = sid(&format!("unusable-existing-{i}"));
        let f = files(&dir, &id);
        let first = save(&store, built(&id, 1, SMALL));
        let base = fs::read(&f.base).expect("base");
        plant(&f.journal);
        let err = store
            .save(&built(&id, 2, SMALL).with_revision(first.revision()))
            .expect_err(&format!("a rewrite beside {what}"));
        assert_insecure(&err, &f.journal);
        assert_eq!(
            fs::read(&f.base).expect("base"),
            base,
            "{what}: base changed"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Listing from summaries
// ---------------------------------------------------------------------------------------

/// Two sessions: `alpha` (with a title in its metadata) appended three times after `beta`
/// was saved. Returns what a load of each gives.
fn two_sessions(store: &FileSessionStore) -> (SessionSnapshot, SessionSnapshot) {
    let alpha = SessionSnapshot::builder(sid("alpha"), MODEL)
        .metadata_entry("title", json!("Alpha: the parser"))
        .transcript((0..2).flat_map(|i| turn(i, SMALL)).collect())
        .usage((0..2).map(turn_usage).collect())
        .build()
        .expect("build");
    let mut alpha = save(store, alpha);
    std::thread::sleep(Duration::from_millis(2));
    let beta = save(store, built(&sid("beta"), 1, SMALL));
    let order: Vec<String> = store
        .list()
        .expect("list")
        .sessions
        .iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(order, ["beta", "alpha"]);
    for i in 2..5 {
        std::thread::sleep(Duration::from_millis(2));
        alpha = append_turn(store, alpha.id(), i, SMALL);
    }
    (alpha, beta)
}

#[test]
fn list_reads_the_summary_and_reflects_every_append() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let (alpha, beta) = two_sessions(&store);

    let list = store.list().expect("list");
    assert!(list.unreadable.is_empty(), "{:?}", list.unreadable);
    assert_eq!(
        list.sessions,
        [SessionSummary::of(&alpha), SessionSummary::of(&beta)]
    );
    let summary = &list.sessions[0];
    assert_eq!(summary.revision, Revision::from_u64(4));
    assert_eq!(summary.message_count, 15);
    assert_eq!(summary.title.as_deref(), Some("Alpha: the parser"));
    assert_eq!(summary.updated_at, alpha.updated_at());
    assert_eq!(summary.created_at, alpha.created_at());
    assert_eq!(summary.model, MODEL);
    assert_eq!(summary.cost, alpha.totals().cost);
    assert_eq!(summary.cost.as_nano_usd(), 15_000);

    // The summary file describes the stored revision.
    let f = files(&dir, alpha.id());
    let bytes = fs::read(&f.summary).expect("summary");
    let parsed = frames(&bytes);
    assert_eq!(parsed.len(), 1);
    let mut value = parsed[0].json();
    assert_eq!(value["revision"], json!(4));
    assert_eq!(value["message_count"], json!(15));

    // The listing comes from it: a summary that says otherwise (with a valid checksum, for
    // the same files) is what the listing shows.
    value["title"] = json!("Forged title");
    write_private(&f.summary, &frame(value.to_string().as_bytes()));
    assert_eq!(
        listed(&store, alpha.id()).title.as_deref(),
        Some("Forged title")
    );
    // The next save writes a new summary.
    let alpha = append_turn(&store, alpha.id(), 9, SMALL);
    assert_eq!(listed(&store, alpha.id()), SessionSummary::of(&alpha));
}

/// Issue 12, item 10: a 100 KiB metadata title made every summary larger than a summary
/// may be, so every listing read the whole transcript (and rewrote a 100 KB summary). A
/// summary holds at most 80 characters of title and 256 of model name.
#[test]
fn a_long_title_or_model_is_cut_so_listings_still_come_from_the_summary() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("long-title");
    let snapshot = SessionSnapshot::builder(id.clone(), "m".repeat(100 * 1024))
        .metadata_entry("title", json!("t".repeat(100 * 1024)))
        .transcript(vec![Message::user("hello")])
        .build()
        .expect("build");
    save(&store, snapshot);
    let f = files(&dir, &id);
    let bytes = fs::read(&f.summary).expect("summary");
    assert!(bytes.len() < 2048, "a summary of {} bytes", bytes.len());
    let summary = listed(&store, &id);
    assert_eq!(
        summary.title.as_deref().map(|t| t.chars().count()),
        Some(81)
    );
    assert_eq!(summary.model.chars().count(), 257);
    // The listing comes from the summary file (a forged one shows).
    let mut value = frames(&bytes)[0].json();
    value["title"] = json!("Forged title");
    write_private(&f.summary, &frame(value.to_string().as_bytes()));
    assert_eq!(listed(&store, &id).title.as_deref(), Some("Forged title"));
}

#[test]
fn missing_garbled_or_stale_summary_falls_back_to_reading_the_session() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let (alpha, beta) = two_sessions(&store);
    let f = files(&dir, alpha.id());
    let good = fs::read(&f.summary).expect("summary");
    let previous_summary = {
        // A summary of the revision before the last one.
        let mut value = frames(&good)[0].json();
        value["revision"] = json!(3);
        value
    };
    let alpha = append_turn(&store, alpha.id(), 7, SMALL);
    let stale = good.clone();
    let mut flipped = fs::read(&f.summary).expect("summary");
    flipped[40] ^= 0x01;
    let current = fs::read(&f.summary).expect("summary");
    let cases: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("deleted", None),
        ("a flipped byte", Some(flipped)),
        ("cut in half", Some(current[..current.len() / 2].to_vec())),
        ("empty", Some(Vec::new())),
        ("the previous revision's", Some(stale)),
        (
            "re-framed for old files",
            Some(frame(previous_summary.to_string().as_bytes())),
        ),
        (
            "beta's",
            Some(fs::read(files(&dir, beta.id()).summary).expect("summary")),
        ),
        (
            "two frames",
            Some([current.clone(), current.clone()].concat()),
        ),
    ];
    for (what, bytes) in cases {
        match &bytes {
            None => fs::remove_file(&f.summary).expect("remove"),
            Some(bytes) => write_private(&f.summary, bytes),
        }
        for store in [&store, &open(&dir)] {
            let list = store.list().expect("list");
            assert!(list.unreadable.is_empty(), "{what}: {:?}", list.unreadable);
            assert_eq!(
                list.sessions,
                [SessionSummary::of(&alpha), SessionSummary::of(&beta)],
                "{what}"
            );
        }
    }
}

#[test]
fn a_listing_that_had_to_read_a_session_writes_its_summary_again() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let (alpha, beta) = two_sessions(&store);
    let f = files(&dir, alpha.id());
    let good = fs::read(&f.summary).expect("summary");
    let mut flipped = good.clone();
    flipped[40] ^= 0x01;
    write_private(&f.summary, &flipped);
    let expected = [SessionSummary::of(&alpha), SessionSummary::of(&beta)];
    assert_eq!(open(&dir).list().expect("list").sessions, expected);
    // The damaged summary was replaced by an intact one describing the same files, so
    // the next listing (by any store) reads it instead of the session.
    assert_eq!(fs::read(&f.summary).expect("summary"), good);
    assert_eq!(open(&dir).list().expect("list").sessions, expected);
}

#[test]
fn summary_symlink_is_never_written_through() {
    let (tmp, dir) = store_dir();
    let store = open(&dir);
    let (alpha, _) = two_sessions(&store);
    let f = files(&dir, alpha.id());
    let outside = tmp.path().join("outside.summary");
    fs::write(&outside, b"not yours").expect("write");
    fs::remove_file(&f.summary).expect("remove");
    symlink(&outside, &f.summary).expect("symlink");

    let alpha = append_turn(&store, alpha.id(), 8, SMALL);
    assert_eq!(fs::read(&outside).expect("outside"), b"not yours");
    assert!(fs::symlink_metadata(&f.summary).expect("stat").is_symlink());
    assert_eq!(listed(&store, alpha.id()), SessionSummary::of(&alpha));
}

#[test]
fn delete_removes_base_journal_and_summary() {
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let (alpha, beta) = two_sessions(&store);
    let f = files(&dir, alpha.id());
    for path in [&f.base, &f.journal, &f.summary] {
        assert!(path.exists(), "{} before the delete", path.display());
    }
    store.delete(alpha.id()).expect("delete");
    for path in [&f.base, &f.journal, &f.summary] {
        assert!(
            fs::symlink_metadata(path).is_err(),
            "{} is left after the delete",
            path.display()
        );
    }
    assert!(store.load(alpha.id()).expect_err("deleted").is_not_found());
    assert_eq!(
        store.list().expect("list").sessions,
        [SessionSummary::of(&beta)]
    );
    // The id starts over cleanly.
    let fresh = save(&store, built(alpha.id(), 1, SMALL));
    assert_eq!(open(&dir).load(alpha.id()).expect("load"), fresh);
}

// ---------------------------------------------------------------------------------------
// Durability, options and metadata
// ---------------------------------------------------------------------------------------

#[test]
fn buffered_durability_appends_and_loads_the_same_way() {
    let (_tmp, dir) = store_dir();
    let buffered = open_buffered(&dir);
    let id = sid("buffered");
    save(&buffered, built(&id, 5, TURN));
    let f = files(&dir, &id);
    let base = fs::read(&f.base).expect("base");
    let mut expected = None;
    for i in 5..10 {
        let next = append_turn(&buffered, &id, i, TURN);
        assert_eq!(fs::read(&f.base).expect("base"), base);
        assert_eq!(buffered.load(&id).expect("load"), next);
        expected = Some(next);
    }
    let expected = expected.expect("appended");
    assert_eq!(frames(&fs::read(&f.journal).expect("journal")).len(), 6);

    // A synchronous store reads and continues it, and the other way round.
    let synced = open(&dir);
    assert_eq!(synced.load(&id).expect("load"), expected);
    let next = append_turn(&synced, &id, 10, TURN);
    assert_eq!(buffered.load(&id).expect("load"), next);
    let next = append_turn(&buffered, &id, 11, TURN);
    assert_eq!(synced.load(&id).expect("load"), next);
    assert_eq!(listed(&synced, &id), SessionSummary::of(&next));
    assert_eq!(fs::read(&f.base).expect("base"), base);
}

#[tokio::test]
async fn metadata_and_options_changes_are_appended_and_listed() {
    let (_tmp, dir) = store_dir();
    let log = RequestLog::default();
    let harness = Harness::builder(open(&dir), move || {
        ToolThenAnswerEngine::new(Arc::clone(&log))
    })
    .tools(Calculator::shared())
    .build();
    let mut session = harness
        .new_session(SessionOptions::new(MODEL))
        .expect("new session");
    session.send("What is 2*3?").await.expect("turn");
    harness.save_session(&mut session).expect("save");
    let f = files(&dir, session.id());
    let base = fs::read(&f.base).expect("base");

    session
        .metadata_mut()
        .insert("title".to_owned(), json!("Renamed"));
    harness.save_session(&mut session).expect("save");
    let mut resumed = harness
        .resume_session_with(session.id(), |mut options| {
            options.model = "other-model".to_owned();
            options.max_turns = 3;
            options
        })
        .expect("resume");
    resumed.send("And 3*4?").await.expect("turn");
    harness.save_session(&mut resumed).expect("save");
    resumed.send("And 4*5?").await.expect("turn");
    harness.save_session(&mut resumed).expect("save");

    assert_eq!(
        fs::read(&f.base).expect("base"),
        base,
        "the base was rewritten"
    );
    let records: Vec<Value> = frames(&fs::read(&f.journal).expect("journal"))[1..]
        .iter()
        .map(Frame::json)
        .collect();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["metadata"], json!({"title": "Renamed"}));
    assert!(records[0].get("options").is_none(), "{}", records[0]);
    assert_eq!(records[1]["options"]["model"], json!("other-model"));
    assert_eq!(records[1]["options"]["max_turns"], json!(3));
    assert!(records[1].get("metadata").is_none(), "{}", records[1]);
    assert!(
        records[2].get("options").is_none() && records[2].get("metadata").is_none(),
        "{}",
        records[2]
    );

    let loaded = open(&dir).load(session.id()).expect("load");
    assert_eq!(loaded, resumed.snapshot());
    assert_eq!(loaded.options().model, "other-model");
    assert_eq!(loaded.metadata()["title"], json!("Renamed"));
    let summary = listed(&open(&dir), session.id());
    assert_eq!(summary, SessionSummary::of(&loaded));
    assert_eq!(summary.title.as_deref(), Some("Renamed"));
    assert_eq!(summary.model, "other-model");
}

// ---------------------------------------------------------------------------------------
// Claims of being stored that are not true (found in review)
// ---------------------------------------------------------------------------------------

#[test]
fn a_snapshot_merely_labelled_with_the_stored_revision_is_written_whole() {
    // Two writers extend revision 1; the second, refused, forces its snapshot over the
    // winner by labelling it with the stored revision. The store must store that
    // snapshot, not append its "new" part to the winner's history.
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("forced");
    save(&store, built(&id, 1, SMALL));
    let loaded = store.load(&id).expect("load");
    let a = appended(loaded.clone(), 10, SMALL);
    let b = appended(loaded, 20, SMALL);
    let stored = store.save(&a).expect("the first writer wins");
    assert!(store.save(&b).expect_err("stale").is_conflict());
    let forced = b.clone().with_revision(stored);
    let revision = store.save(&forced).expect("a forced save succeeds");
    assert_eq!(
        store.load(&id).expect("load"),
        b.with_revision(revision),
        "the forced snapshot is what is stored"
    );
}

#[test]
fn marking_a_session_saved_after_an_edit_does_not_lose_the_edit() {
    // A session's snapshot is saved by hand, then its metadata edited, then it is marked
    // saved at the returned revision: the edit is not stored yet and must reach the store
    // with the next save.
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let harness = Harness::builder(open(&dir), || {
        ToolThenAnswerEngine::new(RequestLog::default())
    })
    .tools(Calculator::shared())
    .build();
    let mut session = harness
        .new_session(SessionOptions::new(MODEL))
        .expect("session");
    let snapshot = session.snapshot();
    session
        .metadata_mut()
        .insert("title".to_owned(), json!("Edited"));
    let revision = store.save(&snapshot).expect("save");
    // A misuse (mark_saved says the current state is stored): the store must not believe
    // it, since the stored update time is the snapshot's, not the edited session's.
    session.mark_saved(revision);
    harness.save_session(&mut session).expect("save again");
    assert_eq!(
        store
            .load(session.id())
            .expect("load")
            .metadata()
            .get("title"),
        Some(&json!("Edited"))
    );
}

#[test]
fn a_journal_removed_by_hand_takes_its_revisions_with_it_and_saves_go_on() {
    // The store remembers where the journal ended; removed by hand, the journal takes its
    // revisions with it, and the store must notice rather than append after a hole.
    let (_tmp, dir) = store_dir();
    let store = open(&dir);
    let id = sid("removed-journal");
    save(&store, built(&id, 1, SMALL));
    let mut current = save(&store, appended(store.load(&id).expect("load"), 1, SMALL));
    assert!(len_or_zero(&files(&dir, &id).journal) > 0);
    fs::remove_file(files(&dir, &id).journal).expect("remove the journal");
    // The base alone is now at an older revision: the stale snapshot is a conflict...
    assert!(store
        .save(&appended(current.clone(), 2, SMALL))
        .expect_err("the journal's revision is gone")
        .is_conflict());
    // ...and a snapshot at the base's revision is stored whole and loads back.
    current = store.load(&id).expect("load the base");
    let next = appended(current, 2, SMALL);
    let revision = store.save(&next).expect("save");
    assert_eq!(store.load(&id).expect("load"), next.with_revision(revision));
}

#[test]
fn a_page_of_no_sessions_is_refused() {
    let (_tmp, dir) = store_dir();
    let err = open(&dir).list_page(0, None).expect_err("limit 0");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}
