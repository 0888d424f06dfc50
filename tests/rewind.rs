//! Rewinding a session (`/undo`): `Session::rewind`, `Harness::rewind_session` and
//! `SessionStoreExt::rewind`. A rewound session resumes in a fresh store exactly as
//! rewound, its usage still counted; the model never sees the rewound turns and their
//! tool calls never run again; the save is one small journal append however long the
//! session; and a refused point (splitting a tool call, before the start, past the end)
//! changes no stored byte.

mod common;

use std::path::Path;

use agent_session::{
    ContentBlock, Error, FileSessionStore, Harness, MemorySessionStore, Message, Revision,
    RewindTo, SessionId, SessionOptions, SessionSnapshot, SessionStore, SessionStoreExt, ToolCall,
    ToolResult,
};
use common::{requests, sid, Calculator, RequestLog, ToolThenAnswerEngine, MODEL};
use serde_json::json;

/// Every file of the store directory and its bytes, to show a refused rewind wrote
/// nothing.
fn store_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read the store")
        .map(|entry| {
            let path = entry.expect("an entry").path();
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&path).unwrap_or_default())
        })
        .collect();
    files.sort();
    files
}

/// A session of `turns` prompts and answers, `2 * turns` messages.
fn conversation(id: &str, turns: usize) -> SessionSnapshot {
    let transcript = (0..turns)
        .flat_map(|i| {
            [
                Message::user(format!("question {i}")),
                Message::assistant(vec![ContentBlock::text(format!("answer {i}"))]),
            ]
        })
        .collect();
    SessionSnapshot::builder(sid(id), MODEL)
        .transcript(transcript)
        .build()
        .expect("build")
}

/// A harness over the file store at `root` (opened anew, as a new process would), whose
/// engines call the calculator once a turn and log what they were sent to `log`.
fn file_harness(
    root: &Path,
    log: &RequestLog,
) -> Harness<impl Fn() -> ToolThenAnswerEngine + Send + Sync + 'static> {
    let log = log.clone();
    Harness::builder(FileSessionStore::open(root).expect("open"), move || {
        ToolThenAnswerEngine::new(log.clone())
    })
    .build()
}

#[tokio::test]
async fn a_rewound_session_resumes_in_a_fresh_store_exactly_as_rewound() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("sessions");
    let log = RequestLog::default();
    let calculator = Calculator::shared();
    let harness = file_harness(&root, &log);
    let mut session = harness
        .new_session(SessionOptions::new(MODEL).tools(calculator.clone()))
        .expect("new");
    for prompt in ["one", "two", "three"] {
        harness.send(&mut session, prompt).await.expect("send");
        harness.save_session(&mut session).expect("save");
    }
    let before = session.snapshot();
    assert_eq!(before.transcript().len(), 12, "4 messages a turn");
    assert_eq!(before.tool_calls().len(), 3);

    let revision = harness
        .rewind_session(&mut session, RewindTo::LastTurns(1))
        .expect("rewind");
    assert_eq!(revision, before.revision().next());
    assert_eq!(session.transcript(), &before.transcript()[..8]);

    // A fresh store instance, as a new process would open it.
    let reopened = FileSessionStore::open(&root).expect("reopen");
    let loaded = reopened.load(session.id()).expect("load");
    assert_eq!(loaded.revision(), revision);
    assert_eq!(loaded.transcript(), &before.transcript()[..8]);
    assert_eq!(loaded.tool_calls(), &before.tool_calls()[..2]);
    assert_eq!(
        loaded.usage(),
        before.usage(),
        "the rewound turn's completions stay counted"
    );
    assert_eq!(loaded.totals(), before.totals());
    assert_eq!(loaded.options(), before.options());
    assert!(loaded.updated_at() > before.updated_at());
}

#[tokio::test]
async fn the_model_never_sees_and_the_loop_never_reruns_rewound_tool_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("sessions");
    let log = RequestLog::default();
    let calculator = Calculator::shared();
    let harness = file_harness(&root, &log);
    let mut session = harness
        .new_session(SessionOptions::new(MODEL).tools(calculator.clone()))
        .expect("new");
    harness.send(&mut session, "keep").await.expect("send");
    harness.send(&mut session, "undo me").await.expect("send");
    harness.save_session(&mut session).expect("save");
    assert_eq!(calculator.calls(), 2);
    let rewound_call = session.tool_calls()[1].call_id.clone();
    harness
        .rewind_session(&mut session, RewindTo::LastTurns(1))
        .expect("rewind");
    let id = session.id().clone();
    drop(session);

    let resumed_harness = file_harness(&root, &log);
    let mut resumed = resumed_harness
        .resume_session(
            &id,
            Some(SessionOptions::new(MODEL).tools(calculator.clone())),
        )
        .expect("resume");
    let seen_before = requests(&log).len();
    resumed_harness
        .send(&mut resumed, "instead")
        .await
        .expect("send");

    assert_eq!(calculator.calls(), 3, "only the new turn's call ran");
    for request in &requests(&log)[seen_before..] {
        assert!(
            !request
                .transcript
                .iter()
                .any(|m| m.text().contains("undo me")),
            "the model was sent the rewound prompt"
        );
        let stale_result = request
            .transcript
            .iter()
            .flat_map(Message::tool_results)
            .filter(|r| r.call_id == rewound_call)
            .count();
        // The new turn reuses the id (this engine numbers calls by transcript length),
        // so at most the new call's own result carries it: the rewound one is gone.
        assert!(stale_result <= 1, "the rewound result was sent again");
    }
    assert_eq!(resumed.transcript()[4].text(), "instead");
}

#[test]
fn a_rewind_is_saved_as_one_small_append_however_long_the_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path().join("sessions")).expect("open");
    let mut grew = Vec::new();
    for (name, turns) in [("short", 5), ("long", 500)] {
        let snapshot = conversation(name, turns);
        store.save(&snapshot).expect("save");
        let base = std::fs::read(store.path_of(snapshot.id())).expect("base");
        let before = store
            .stored_bytes(snapshot.id())
            .expect("size")
            .expect("known");
        let rewound = store
            .rewind(snapshot.id(), RewindTo::LastTurns(1))
            .expect("rewind");
        assert_eq!(rewound.transcript().len(), 2 * turns - 2);
        let after = store
            .stored_bytes(snapshot.id())
            .expect("size")
            .expect("known");
        assert_eq!(
            std::fs::read(store.path_of(snapshot.id())).expect("base"),
            base,
            "{name}: the base snapshot is not rewritten"
        );
        assert_eq!(
            store.load(snapshot.id()).expect("load").transcript(),
            rewound.transcript()
        );
        grew.push(after - before);
    }
    let (short, long) = (grew[0], grew[1]);
    println!("a rewind stored {short} bytes onto 10 messages, {long} onto 1,000");
    assert!(
        long < 1_024,
        "a rewind of a 1,000-message session wrote {long} bytes"
    );
    // The same record but for the counts' digits and the journal header's.
    assert!(
        long <= short + 64,
        "onto 1,000 messages {long} bytes, onto 10 {short}: not independent of the length"
    );
}

#[test]
fn refused_points_change_no_stored_byte_and_name_the_valid_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("sessions");
    let store = FileSessionStore::open(&root).expect("open");
    let snapshot = SessionSnapshot::builder(sid("tools"), MODEL)
        .transcript(vec![
            Message::user("look it up"),
            Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                "c1",
                "search",
                json!({"q": "x"}),
            ))]),
            Message::tool_result(ToolResult::new("c1", "found")),
            Message::assistant(vec![ContentBlock::text("here it is")]),
        ])
        .build()
        .expect("build");
    store.save(&snapshot).expect("save");
    let bytes = store_bytes(&root);

    let split = store
        .rewind(snapshot.id(), RewindTo::Message(2))
        .expect_err("splits c1 from its result");
    assert!(matches!(split, Error::InvalidArgument { .. }), "{split:?}");
    let text = split.to_string();
    assert!(
        text.contains("cannot rewind session tools to message 2")
            && text.contains("\"c1\"")
            && text.contains("rewind to message 1 or 3 instead"),
        "{text}"
    );
    let before_start = store
        .rewind(snapshot.id(), RewindTo::LastTurns(2))
        .expect_err("only one turn");
    assert!(
        before_start.to_string().contains("it has only 1 turns"),
        "{before_start}"
    );
    let past_end = store
        .rewind(snapshot.id(), RewindTo::Message(5))
        .expect_err("only 4 messages");
    assert!(
        past_end.to_string().contains("only 4 messages"),
        "{past_end}"
    );
    let missing = store
        .rewind(&sid("missing"), RewindTo::LastTurns(1))
        .expect_err("no such session");
    assert!(missing.is_not_found());

    assert_eq!(
        store_bytes(&root),
        bytes,
        "a refused rewind wrote something"
    );
    assert_eq!(
        store.load(snapshot.id()).expect("load"),
        snapshot.with_revision(Revision::from_u64(1))
    );
}

#[test]
fn rewinding_to_the_end_changes_nothing_and_writes_nothing() {
    let store = MemorySessionStore::new();
    let snapshot = conversation("whole", 2);
    let revision = store.save(&snapshot).expect("save");
    for to in [RewindTo::LastTurns(0), RewindTo::Message(4)] {
        let same = store.rewind(snapshot.id(), to).expect("rewind");
        assert_eq!(
            same.revision(),
            revision,
            "{to}: a no-op moved the revision"
        );
        assert_eq!(same.transcript(), snapshot.transcript());
    }
}

#[tokio::test]
async fn a_stale_session_that_rewinds_meets_a_conflict_and_the_winner_is_kept() {
    let store = MemorySessionStore::new();
    let snapshot = conversation("shared", 3);
    store.save(&snapshot).expect("save");
    let log = RequestLog::default();
    let harness = Harness::builder(store, || ToolThenAnswerEngine::new(log.clone())).build();
    let mut a = harness.resume_session(snapshot.id(), None).expect("a");
    let mut b = harness.resume_session(snapshot.id(), None).expect("b");

    harness.send(&mut a, "a's turn").await.expect("send");
    harness.save_session(&mut a).expect("a saves");
    let err = harness
        .rewind_session(&mut b, RewindTo::LastTurns(1))
        .expect_err("b is stale");
    assert!(err.is_conflict(), "{err:?}");
    let stored = harness.store().load(snapshot.id()).expect("load");
    assert_eq!(stored.transcript(), a.transcript());
    // b stays rewound in memory: its caller decides (reload and rewind again).
    assert_eq!(b.transcript().len(), 4);
}

#[test]
fn rewind_through_the_store_keeps_usage_and_records_and_counts_the_revision() {
    let store = MemorySessionStore::new();
    let id = SessionId::parse("counted").expect("id");
    let snapshot = SessionSnapshot::builder(id.clone(), MODEL)
        .transcript(conversation("counted", 3).transcript().to_vec())
        .usage(vec![
            common::usage(10, 2, "0.001"),
            common::usage(20, 3, "0.002"),
            common::usage(30, 4, "0.003"),
        ])
        .build()
        .expect("build");
    store.save(&snapshot).expect("save");
    let rewound = store.rewind(&id, RewindTo::Message(2)).expect("rewind");
    assert_eq!(rewound.revision(), Revision::from_u64(2));
    assert_eq!(rewound.transcript(), &snapshot.transcript()[..2]);
    assert_eq!(rewound.usage(), snapshot.usage());
    assert_eq!(rewound.totals(), snapshot.totals());
    assert_eq!(store.load(&id).expect("load"), rewound);
    // A second rewind from the rewound state.
    let empty = store.rewind(&id, RewindTo::LastTurns(1)).expect("again");
    assert!(empty.transcript().is_empty());
    assert_eq!(empty.revision(), Revision::from_u64(3));
}

/// `FileSessionStore::restore` appends one entry naming the revision, the same few bytes
/// whatever the session's length, without touching the base; the restored state loads in
/// a fresh store and lists right; a revision the store does not keep is refused with every
/// byte unchanged. Restores in a store that never read the session (a fresh process) and
/// in one that just restored it (the lengths it keeps) store the same.
#[test]
fn a_restore_is_one_small_append_however_long_the_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("sessions");
    let store = FileSessionStore::open(&root).expect("open");
    let mut grew = Vec::new();
    for (name, turns) in [("short", 5), ("long", 500)] {
        let snapshot = conversation(name, turns);
        let id = snapshot.id().clone();
        let first = store.save(&snapshot).expect("save");
        store.rewind(&id, RewindTo::LastTurns(2)).expect("rewind");
        let base = std::fs::read(store.path_of(&id)).expect("base");
        let size =
            |store: &FileSessionStore| store.stored_bytes(&id).expect("size").expect("known");

        // In a fresh store (which reads the entries' heads once), then in the same one.
        let fresh = FileSessionStore::open(&root).expect("open again");
        let before = size(&fresh);
        let restored = fresh.restore(&id, first).expect("restore in a fresh store");
        assert_eq!(restored, Revision::from_u64(3));
        let cold = size(&fresh) - before;
        let rewound = fresh.rewind(&id, RewindTo::LastTurns(1)).expect("rewind");
        let before = size(&fresh);
        let again = fresh.restore(&id, first).expect("restore again");
        assert_eq!(again, rewound.revision().next());
        let hot = size(&fresh) - before;
        assert_eq!(cold, hot, "{name}: the same entry, cold or hot");
        assert_eq!(
            std::fs::read(store.path_of(&id)).expect("base"),
            base,
            "{name}: the base is not rewritten"
        );
        grew.push(hot);

        // What loads is the first revision's view, usage kept, at the new revision.
        let loaded = open_fresh(&root).load(&id).expect("load");
        assert_eq!(loaded.revision(), again);
        assert_eq!(loaded.transcript(), snapshot.transcript());
        assert_eq!(loaded.usage(), snapshot.usage());
        let listed = open_fresh(&root)
            .list()
            .expect("list")
            .sessions
            .into_iter()
            .find(|s| s.id == id)
            .expect("listed");
        assert_eq!(listed.revision, again);
        assert_eq!(listed.message_count, 2 * turns);
        assert_eq!(listed.history.restores, 2);
        let revisions = open_fresh(&root).revisions(&id).expect("revisions");
        let last = revisions.last().expect("a revision");
        assert_eq!(last.restored_from, Some(first));
        assert_eq!(last.messages, 2 * turns);

        // A revision the store does not keep: refused, nothing written.
        let bytes = store_bytes(&root);
        for (store, what) in [
            (&fresh, "this store"),
            (&open_fresh(&root), "a fresh store"),
        ] {
            let err = store
                .restore(&id, Revision::from_u64(99))
                .expect_err("no revision 99");
            assert!(
                matches!(&err, Error::RevisionNotFound { revision, newest, .. }
                    if *revision == Revision::from_u64(99) && *newest == again),
                "{what}: {err:?}"
            );
            assert!(err.is_not_found(), "{what}");
        }
        assert_eq!(store_bytes(&root), bytes, "{name}: a refused restore wrote");
        let missing = fresh
            .restore(&sid("missing"), first)
            .expect_err("no such session");
        assert!(missing.is_not_found());
    }
    let (short, long) = (grew[0], grew[1]);
    println!("a restore stored {short} bytes onto 10 messages, {long} onto 1,000");
    assert!(
        long <= short + 32,
        "onto 1,000 messages {long} bytes, onto 10 {short}: not independent of the length"
    );
}

/// A store opened anew on `root`, as another process would.
fn open_fresh(root: &Path) -> FileSessionStore {
    FileSessionStore::open(root).expect("open")
}
