//! Step-level autosave: `Harness::send` with `Autosave::EveryStep` (through
//! `Session::send_message_with`) stores every step of a turn as it goes, so a crash while a
//! tool runs resumes with that call closed as interrupted and never run again; with a
//! `FileSessionStore` the checkpoints are appended to the journal. Also `EveryTurn`, `Off`,
//! and checkpoints that fail.

mod common;
#[path = "common/journal.rs"]
mod journal_support;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_session::{
    Autosave, BoxError, BoxFuture, Completion, CompletionRequest, Engine, FileSessionStore,
    Harness, Message, PatternRedactor, Revision, Role, SessionId, SessionOptions, SessionSnapshot,
    SessionStore, SessionSummary, StopReason, ToolCall, ToolCallStatus, ToolDefinition,
    ToolExecutor, ToolOutput, INTERRUPTED_OUTPUT,
};
use common::{
    calculator_calls, reply, requests, Calculator, RequestLog, ScriptedEngine,
    ToolThenAnswerEngine, CALL_COST,
};
use journal_support::{files, frames, inode, is_injected, Recorder};

/// A store directory in a fresh temporary directory (kept alive by the guard).
fn store_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("create a temporary directory");
    let dir = tmp.path().join("sessions");
    (tmp, dir)
}

fn open(dir: &Path) -> FileSessionStore {
    FileSessionStore::open(dir).expect("open the store")
}

/// A recording store over a file store in `dir`.
fn recorder(dir: &Path) -> Arc<Recorder<FileSessionStore>> {
    Arc::new(Recorder::new(open(dir)))
}

/// What a tool saw when it ran: its call id and the session as stored at that moment.
type Sightings = Arc<Mutex<Vec<(String, Option<SessionSnapshot>)>>>;

/// The `calculator` tool, recording each call it runs (and, with a store to watch, what
/// that store held for the only session in it when the call started). Calls whose ids
/// are in `hang` never complete.
struct Tools {
    executed: Mutex<Vec<String>>,
    hang: HashSet<String>,
    watch: Option<Arc<dyn SessionStore>>,
    seen: Sightings,
}

impl Tools {
    fn new() -> Arc<Self> {
        Tools::build(&[], None)
    }

    fn hanging_on(ids: &[&str]) -> Arc<Self> {
        Tools::build(ids, None)
    }

    fn watching(store: Arc<dyn SessionStore>) -> Arc<Self> {
        Tools::build(&[], Some(store))
    }

    fn build(hang: &[&str], watch: Option<Arc<dyn SessionStore>>) -> Arc<Self> {
        Arc::new(Tools {
            executed: Mutex::new(Vec::new()),
            hang: hang.iter().map(|s| (*s).to_owned()).collect(),
            watch,
            seen: Sightings::default(),
        })
    }

    fn executed(&self) -> Vec<String> {
        self.executed.lock().expect("lock").clone()
    }

    fn seen(&self) -> Vec<(String, Option<SessionSnapshot>)> {
        self.seen.lock().expect("lock").clone()
    }
}

impl ToolExecutor for Tools {
    fn definitions(&self) -> Vec<ToolDefinition> {
        Calculator::default().definitions()
    }

    fn execute<'a>(&'a self, call: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        self.executed.lock().expect("lock").push(call.id.clone());
        if let Some(store) = &self.watch {
            let stored = store
                .list()
                .ok()
                .and_then(|list| list.sessions.into_iter().next())
                .and_then(|summary| store.load(&summary.id).ok());
            self.seen
                .lock()
                .expect("lock")
                .push((call.id.clone(), stored));
        }
        if self.hang.contains(&call.id) {
            return Box::pin(std::future::pending());
        }
        Box::pin(async move {
            let arguments = call.arguments.to_value()?;
            let expression = arguments
                .get("expression")
                .and_then(serde_json::Value::as_str)
                .ok_or("missing `expression`")?;
            Ok(ToolOutput::from(
                Calculator::evaluate(expression)?.to_string(),
            ))
        })
    }
}

/// What the engine was asked and what the store held at that moment.
type Requests = Arc<Mutex<Vec<(Vec<Message>, Option<SessionSnapshot>)>>>;

/// [`ToolThenAnswerEngine`] that also loads the session from a store at every completion.
struct Watching {
    inner: ToolThenAnswerEngine,
    store: Arc<dyn SessionStore>,
    seen: Requests,
}

impl Engine for Watching {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        let stored = self.store.load(request.session_id).ok();
        self.seen
            .lock()
            .expect("lock")
            .push((request.transcript.to_vec(), stored));
        self.inner.complete(request).await
    }
}

/// A harness over `store` whose engines call the calculator `calls_per_turn` times per
/// turn, with `tools` and `autosave`.
fn harness<S: SessionStore + 'static>(
    store: S,
    calls_per_turn: usize,
    tools: Arc<Tools>,
    autosave: Autosave,
) -> Harness<impl Fn() -> ToolThenAnswerEngine> {
    harness_builder(store, calls_per_turn, tools)
        .autosave(autosave)
        .build()
}

/// The text of the tool result in `message`, and whether it is an error.
fn result_of(message: &Message) -> (String, bool) {
    let result = message
        .tool_results()
        .next()
        .unwrap_or_else(|| panic!("a tool result: {message:?}"));
    (
        result.output.as_text().unwrap_or_default().to_owned(),
        result.is_error,
    )
}

/// Checks that `snapshot` ends with `call_id` closed as interrupted.
fn assert_ends_interrupted(snapshot: &SessionSnapshot, call_id: &str) {
    let last = snapshot.transcript().last().expect("a message");
    assert_eq!(last.role, Role::Tool);
    assert_eq!(result_of(last), (INTERRUPTED_OUTPUT.to_owned(), true));
    let record = snapshot.tool_calls().last().expect("a record");
    assert_eq!(record.call_id, call_id);
    assert_eq!(record.status, ToolCallStatus::Interrupted);
}

fn statuses(snapshot: &SessionSnapshot) -> Vec<(String, ToolCallStatus)> {
    snapshot
        .tool_calls()
        .iter()
        .map(|r| (r.call_id.clone(), r.status))
        .collect()
}

// ---------------------------------------------------------------------------------------
// EveryStep
// ---------------------------------------------------------------------------------------

/// Checks the five saves of a turn with two tool steps that ended in `transcript`: before
/// each step's tools, its request with the calls closed as interrupted; after each step,
/// the real results; each save at the revision the one before it stored.
fn check_step_saves(saves: &[(SessionSnapshot, Result<Revision, String>)], transcript: &[Message]) {
    assert_eq!(
        saves.len(),
        5,
        "before and after each tool step, and at the end"
    );
    for (n, (snapshot, result)) in saves.iter().enumerate() {
        assert_eq!(
            snapshot.revision(),
            Revision::from_u64(n as u64),
            "save {n}"
        );
        assert_eq!(
            result.as_ref().ok(),
            Some(&Revision::from_u64(n as u64 + 1))
        );
    }
    // Before each step's tools: the step's request with its calls closed as interrupted.
    for (n, call, kept) in [(0, "call_1", 2), (2, "call_3", 4)] {
        let snapshot = &saves[n].0;
        assert_eq!(
            &snapshot.transcript()[..kept],
            &transcript[..kept],
            "save {n}"
        );
        assert_eq!(snapshot.transcript().len(), kept + 1, "save {n}");
        assert_ends_interrupted(snapshot, call);
    }
    // After each step: the real results.
    for (n, len) in [(1, 3), (3, 5), (4, 6)] {
        assert_eq!(saves[n].0.transcript(), &transcript[..len], "save {n}");
        assert!(saves[n]
            .0
            .tool_calls()
            .iter()
            .all(|r| r.status == ToolCallStatus::Ok));
    }
}

#[tokio::test]
async fn every_step_stores_each_step_before_the_next_begins() {
    let (_tmp, dir) = store_dir();
    let recorder = recorder(&dir);
    let watched: Arc<dyn SessionStore> = recorder.clone();
    let tools = Tools::watching(Arc::clone(&watched));
    let requests = Requests::default();
    let harness = {
        let (store, requests) = (Arc::clone(&watched), Arc::clone(&requests));
        Harness::builder(Arc::clone(&recorder), move || Watching {
            inner: ToolThenAnswerEngine::with_calls_per_turn(2, RequestLog::default()),
            store: Arc::clone(&store),
            seen: Arc::clone(&requests),
        })
        .tools(tools.clone())
        .autosave(Autosave::EveryStep)
        .build()
    };
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    let outcome = harness.send(&mut session, "go").await.expect("turn");
    assert_eq!(outcome.stop, StopReason::Finished);
    assert_eq!((outcome.completions, outcome.tool_calls), (3, 2));

    // user, assistant(call_1), result, assistant(call_3), result, answer
    let transcript = session.transcript().to_vec();
    assert_eq!(transcript.len(), 6);
    let saves = recorder.saves();
    check_step_saves(&saves, &transcript);
    // What the store held when each tool ran, and when each completion was asked for.
    let seen = tools.seen();
    assert_eq!(seen.len(), 2);
    for ((call, stored), n) in seen.iter().zip([0, 2]) {
        let stored = stored.as_ref().expect("stored before the tool ran");
        assert_eq!(
            stored,
            &saves[n]
                .0
                .clone()
                .with_revision(Revision::from_u64(n as u64 + 1))
        );
        assert_ends_interrupted(stored, call);
    }
    let asked = requests.lock().expect("lock").clone();
    assert_eq!(asked.len(), 3);
    assert!(
        asked[0].1.is_none(),
        "nothing is stored before the first step"
    );
    for (request, stored) in &asked[1..] {
        let stored = stored.as_ref().expect("the previous step is stored");
        assert_eq!(stored.transcript(), request.as_slice());
    }
    assert_eq!(
        harness.store().load(session.id()).expect("load"),
        session.snapshot()
    );
    assert_eq!(session.revision(), Revision::from_u64(5));

    // A second turn continues from the stored state the same way.
    harness.send(&mut session, "again").await.expect("turn");
    assert_eq!(recorder.save_count(), 10);
    let asked = requests.lock().expect("lock").clone();
    let (request, stored) = &asked[3];
    assert_eq!(
        stored.as_ref().expect("stored").transcript(),
        &request[..request.len() - 1],
        "the first completion of a turn sees the previous turn stored"
    );
    assert_eq!(
        harness.store().load(session.id()).expect("load"),
        session.snapshot()
    );
    assert_eq!(tools.executed(), ["call_1", "call_3", "call_7", "call_9"]);
}

#[tokio::test]
async fn crash_while_a_tool_runs_resumes_with_the_call_interrupted_and_never_reruns_it() {
    let (_tmp, dir) = store_dir();
    let hanging = Tools::hanging_on(&["call_1"]);
    let id = {
        let harness = harness(open(&dir), 1, hanging.clone(), Autosave::EveryStep);
        let mut session = harness
            .new_session(SessionOptions::new("m"))
            .expect("new session");
        let sent = tokio::time::timeout(
            Duration::from_millis(200),
            harness.send(&mut session, "What is 1*2?"),
        )
        .await;
        assert!(sent.is_err(), "the tool never returns");
        // The process dies here: nothing after the checkpoint is saved.
        session.id().clone()
    };
    assert_eq!(hanging.executed(), ["call_1"]);

    let tools = Tools::new();
    let log = RequestLog::default();
    let harness = {
        let log = Arc::clone(&log);
        Harness::builder(open(&dir), move || {
            ToolThenAnswerEngine::with_calls_per_turn(0, Arc::clone(&log))
        })
        .tools(tools.clone())
        .autosave(Autosave::EveryStep)
        .build()
    };
    let mut resumed = harness.resume_session(&id, None).expect("resume");
    let interrupted: Vec<_> = resumed
        .interrupted_tool_calls()
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0].call_id, "call_1");
    assert_eq!(interrupted[0].tool_name, "calculator");
    assert_eq!(interrupted[0].status, ToolCallStatus::Interrupted);
    let snapshot = resumed.snapshot();
    let result = snapshot.tool_result(&interrupted[0]).expect("its result");
    assert_eq!(result.output.as_text(), Some(INTERRUPTED_OUTPUT));
    assert!(result.is_error);
    assert_eq!(
        resumed.transcript().len(),
        3,
        "user, assistant(call_1), result"
    );
    assert!(tools.executed().is_empty(), "resuming runs nothing");

    let outcome = harness.send(&mut resumed, "Go on").await.expect("turn");
    assert_eq!(outcome.stop, StopReason::Finished);
    assert!(
        tools.executed().is_empty(),
        "the interrupted call was run again"
    );
    assert_eq!(hanging.executed(), ["call_1"], "executed exactly once");
    let asked = requests(&log);
    assert_eq!(asked.len(), 1);
    assert_eq!(
        result_of(&asked[0].transcript[2]),
        (INTERRUPTED_OUTPUT.to_owned(), true)
    );
    let stored = open(&dir).load(&id).expect("load");
    assert_eq!(stored, resumed.snapshot());
    assert_eq!(
        statuses(&stored),
        [("call_1".to_owned(), ToolCallStatus::Interrupted)]
    );
}

#[tokio::test]
async fn crash_after_one_of_two_calls_returned_reports_the_whole_step_interrupted() {
    let (_tmp, dir) = store_dir();
    let hanging = Tools::hanging_on(&["c2"]);
    let harness = Harness::builder(open(&dir), || {
        ScriptedEngine::new([calculator_calls(&[("c1", "1+1"), ("c2", "2+2")], CALL_COST)])
    })
    .tools(hanging.clone())
    .autosave(Autosave::EveryStep)
    .build();
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    let sent =
        tokio::time::timeout(Duration::from_millis(200), harness.send(&mut session, "go")).await;
    assert!(sent.is_err());
    let id = session.id().clone();
    drop(session);
    assert_eq!(hanging.executed(), ["c1", "c2"]);

    let tools = Tools::new();
    let harness = Harness::builder(open(&dir), || {
        ScriptedEngine::new([reply("Both were cut short.", "0.00001")])
    })
    .tools(tools.clone())
    .autosave(Autosave::EveryStep)
    .build();
    let mut resumed = harness.resume_session(&id, None).expect("resume");
    // The step in flight is lost as a whole: c1's result was never stored.
    let ids: Vec<&str> = resumed
        .interrupted_tool_calls()
        .iter()
        .map(|r| r.call_id.as_str())
        .collect();
    assert_eq!(ids, ["c1", "c2"]);
    harness.send(&mut resumed, "And now?").await.expect("turn");
    assert!(tools.executed().is_empty());
    assert_eq!(
        hanging.executed(),
        ["c1", "c2"],
        "each started exactly once"
    );
    assert_eq!(open(&dir).load(&id).expect("load"), resumed.snapshot());
}

#[tokio::test]
async fn cancelled_send_then_continuing_the_same_session_keeps_store_and_memory_equal() {
    let (_tmp, dir) = store_dir();
    let tools = Tools::hanging_on(&["call_1"]);
    let harness = harness(open(&dir), 1, tools.clone(), Autosave::EveryStep);
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    let sent =
        tokio::time::timeout(Duration::from_millis(200), harness.send(&mut session, "go")).await;
    assert!(sent.is_err());
    // Closing the call in memory touched `updated_at` only; the rest is what is stored.
    let stored = harness.store().load(session.id()).expect("load");
    assert_eq!(stored.transcript(), session.transcript());
    assert_eq!(stored.tool_calls(), session.tool_calls());
    assert_eq!(stored.usage(), session.usage());

    let outcome = harness.send(&mut session, "try again").await.expect("turn");
    assert_eq!(outcome.stop, StopReason::Finished);
    assert_eq!(tools.executed(), ["call_1", "call_4"]);
    let stored = harness.store().load(session.id()).expect("load");
    assert_eq!(stored, session.snapshot());
    assert_eq!(
        statuses(&stored),
        [
            ("call_1".to_owned(), ToolCallStatus::Interrupted),
            ("call_4".to_owned(), ToolCallStatus::Ok)
        ]
    );
}

#[tokio::test]
async fn every_step_checkpoints_append_to_the_journal_without_rewriting_the_base() {
    let (_tmp, dir) = store_dir();
    let recorder = recorder(&dir);
    let harness = harness(Arc::clone(&recorder), 2, Tools::new(), Autosave::EveryStep);
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    harness.send(&mut session, "first").await.expect("turn");
    let f = files(&dir, session.id());
    let base = std::fs::read(&f.base).expect("base");
    let base_inode = inode(&f.base);
    // Only the first checkpoint (a new session) wrote the base.
    assert_eq!(
        SessionSnapshot::from_json(&base).expect("decode"),
        recorder.saves()[0]
            .0
            .clone()
            .with_revision(Revision::from_u64(1))
    );

    harness.send(&mut session, "second").await.expect("turn");
    harness.send(&mut session, "third").await.expect("turn");
    assert_eq!(recorder.save_count(), 15);
    assert_eq!(
        std::fs::read(&f.base).expect("base"),
        base,
        "the base was rewritten"
    );
    assert_eq!(inode(&f.base), base_inode, "the base was replaced");
    let journal = frames(&std::fs::read(&f.journal).expect("journal"));
    let revisions: Vec<u64> = journal[1..]
        .iter()
        .map(|frame| frame.json()["revision"].as_u64().expect("a revision"))
        .collect();
    assert_eq!(revisions, (2..=15).collect::<Vec<u64>>());

    let stored = open(&dir).load(session.id()).expect("load");
    assert_eq!(stored, session.snapshot());
    assert!(stored
        .tool_calls()
        .iter()
        .all(|r| r.status == ToolCallStatus::Ok));
    let fresh = harness_over(&dir);
    let resumed = fresh.resume_session(session.id(), None).expect("resume");
    assert_eq!(resumed.snapshot(), session.snapshot());
    assert!(resumed.interrupted_tool_calls().is_empty());
    let listed = open(&dir).list().expect("list").sessions;
    assert_eq!(listed, [SessionSummary::of(&stored)]);
}

/// A plain harness over a fresh store instance on `dir`.
fn harness_over(dir: &Path) -> Harness<impl Fn() -> ToolThenAnswerEngine> {
    harness(open(dir), 1, Tools::new(), Autosave::Off)
}

// ---------------------------------------------------------------------------------------
// EveryTurn and Off
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn every_turn_saves_once_per_completed_turn() {
    let (_tmp, dir) = store_dir();
    let recorder = recorder(&dir);
    let tools = Tools::new();
    let harness = harness(Arc::clone(&recorder), 2, tools.clone(), Autosave::EveryTurn);
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    for (turn, text) in ["one", "two", "three"].into_iter().enumerate() {
        harness.send(&mut session, text).await.expect("turn");
        assert_eq!(recorder.save_count(), turn + 1);
        let (saved, result) = recorder.saves().pop().expect("a save");
        assert_eq!(
            result.as_ref().ok(),
            Some(&Revision::from_u64(turn as u64 + 1))
        );
        assert_eq!(saved.with_revision(session.revision()), session.snapshot());
        assert_eq!(
            harness.store().load(session.id()).expect("load"),
            session.snapshot()
        );
    }
    assert_eq!(tools.executed().len(), 6);
    assert!(recorder.saves().iter().all(|(s, _)| s
        .tool_calls()
        .iter()
        .all(|r| r.status == ToolCallStatus::Ok)));
}

#[tokio::test]
async fn every_turn_does_not_save_a_turn_that_failed() {
    let (_tmp, dir) = store_dir();
    let recorder = recorder(&dir);
    let harness = Harness::builder(Arc::clone(&recorder), || common::FailingEngine)
        .autosave(Autosave::EveryTurn)
        .build();
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    harness
        .send(&mut session, "hello")
        .await
        .expect_err("the engine fails");
    assert_eq!(recorder.save_count(), 0);
}

#[tokio::test]
async fn autosave_off_never_saves() {
    let (_tmp, dir) = store_dir();
    let recorder = recorder(&dir);
    let tools = Tools::new();
    let harness = harness(Arc::clone(&recorder), 2, tools.clone(), Autosave::Off);
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    harness.send(&mut session, "one").await.expect("turn");
    harness.send(&mut session, "two").await.expect("turn");
    assert_eq!(tools.executed().len(), 4);
    assert_eq!(recorder.save_count(), 0);
    assert_eq!(session.revision(), Revision::NEW);
    assert!(harness.list_sessions().expect("list").sessions.is_empty());
    assert!(harness
        .store()
        .load(session.id())
        .expect_err("never saved")
        .is_not_found());
}

// ---------------------------------------------------------------------------------------
// Checkpoints that fail
// ---------------------------------------------------------------------------------------

/// A session of a harness whose store fails save number `failing`, after one turn.
async fn turn_with_failing_save(
    failing: usize,
) -> (
    tempfile::TempDir,
    Arc<Recorder<FileSessionStore>>,
    Arc<Tools>,
    Harness<impl Fn() -> ToolThenAnswerEngine>,
    agent_session::Session<ToolThenAnswerEngine>,
    agent_session::Error,
) {
    let (tmp, dir) = store_dir();
    let recorder = recorder(&dir);
    recorder.fail_save(failing);
    let tools = Tools::new();
    let harness = harness(Arc::clone(&recorder), 2, tools.clone(), Autosave::EveryStep);
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    let err = harness
        .send(&mut session, "go")
        .await
        .expect_err("the checkpoint fails");
    (tmp, recorder, tools, harness, session, err)
}

#[tokio::test]
async fn failed_checkpoint_before_the_tools_ends_the_turn_without_running_them() {
    let (_tmp, recorder, tools, harness, mut session, err) = turn_with_failing_save(1).await;
    assert!(
        is_injected(&err),
        "the turn ends with the store's error: {err:?}"
    );
    assert!(
        tools.executed().is_empty(),
        "the tools ran without a checkpoint"
    );
    assert_eq!(recorder.save_count(), 1);
    assert!(harness
        .store()
        .load(session.id())
        .expect_err("nothing stored")
        .is_not_found());
    let ids: Vec<&str> = session
        .interrupted_tool_calls()
        .iter()
        .map(|r| r.call_id.as_str())
        .collect();
    assert_eq!(ids, ["call_1"]);
    assert_eq!(session.revision(), Revision::NEW);

    harness.save_session(&mut session).expect("save");
    assert_eq!(
        harness.store().load(session.id()).expect("load"),
        session.snapshot()
    );
    assert!(tools.executed().is_empty());
}

#[tokio::test]
async fn failed_checkpoint_of_the_second_step_runs_only_the_first_steps_tools() {
    let (_tmp, recorder, tools, harness, mut session, err) = turn_with_failing_save(3).await;
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(tools.executed(), ["call_1"]);
    assert_eq!(recorder.save_count(), 3);
    let stored = harness.store().load(session.id()).expect("load");
    assert_eq!(stored.revision(), Revision::from_u64(2));
    assert_eq!(stored.transcript(), &session.transcript()[..3]);
    assert_eq!(
        statuses(&session.snapshot()),
        [
            ("call_1".to_owned(), ToolCallStatus::Ok),
            ("call_3".to_owned(), ToolCallStatus::Interrupted)
        ]
    );

    harness.save_session(&mut session).expect("save");
    assert_eq!(
        harness.store().load(session.id()).expect("load"),
        session.snapshot()
    );
    assert_eq!(tools.executed(), ["call_1"]);
}

#[tokio::test]
async fn failed_checkpoint_after_a_step_keeps_the_step_for_the_next_save() {
    let (tmp, recorder, tools, harness, mut session, err) = turn_with_failing_save(2).await;
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(tools.executed(), ["call_1"], "the step's tool ran once");
    assert_eq!(recorder.save_count(), 2);
    // In memory: the real result. Stored: the placeholder of the checkpoint before it.
    assert_eq!(session.transcript().len(), 3);
    assert_eq!(result_of(&session.transcript()[2]), ("2".to_owned(), false));
    let stored = harness.store().load(session.id()).expect("load");
    assert_ends_interrupted(&stored, "call_1");
    let f = files(&tmp.path().join("sessions"), session.id());
    let base = std::fs::read(&f.base).expect("base");

    // The next save stores the real result in place of the placeholder, by appending.
    assert_eq!(
        harness.save_session(&mut session).expect("save"),
        Revision::from_u64(2)
    );
    let stored = open(&tmp.path().join("sessions"))
        .load(session.id())
        .expect("load");
    assert_eq!(stored, session.snapshot());
    assert_eq!(
        statuses(&stored),
        [("call_1".to_owned(), ToolCallStatus::Ok)]
    );
    assert_eq!(std::fs::read(&f.base).expect("base"), base);

    // And the conversation goes on from there.
    harness.send(&mut session, "more").await.expect("turn");
    assert_eq!(tools.executed(), ["call_1", "call_4", "call_6"]);
    assert_eq!(
        harness.store().load(session.id()).expect("load"),
        session.snapshot()
    );
}

/// Issue 12, item 16: a tool whose result could not be saved (the save after its step
/// failed) was reported on resume as "cancelled before it returned", although it ran. The
/// stored placeholder now says what is known: no result was kept, and it may have run.
#[tokio::test]
async fn a_tool_whose_result_could_not_be_saved_is_reported_as_maybe_run() {
    let (tmp, _recorder, tools, _harness, session, err) = turn_with_failing_save(2).await;
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(tools.executed(), ["call_1"], "the tool ran");
    let id = session.id().clone();
    drop(session);
    // Another process resumes what was stored.
    let resumed = open(&tmp.path().join("sessions")).load(&id).expect("load");
    let record = resumed
        .tool_calls()
        .iter()
        .find(|r| r.status == ToolCallStatus::Interrupted)
        .expect("the call is reported interrupted");
    let result = resumed.tool_result(record).expect("its result");
    let text = result.output.as_text().expect("text");
    assert!(text.contains("may have run"), "{text}");
    assert!(text.contains("saving the result failed"), "{text}");
    assert!(!text.contains("before this tool call returned"), "{text}");
}

#[tokio::test]
async fn every_step_over_a_store_that_always_fails_loses_nothing_in_memory() {
    let (_tmp, dir) = store_dir();
    let recorder = recorder(&dir);
    recorder.fail_all();
    let tools = Tools::new();
    let harness = harness(Arc::clone(&recorder), 0, tools.clone(), Autosave::EveryStep);
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    // A turn without tools fails at its only checkpoint, after the answer.
    let err = harness
        .send(&mut session, "hi")
        .await
        .expect_err("the checkpoint fails");
    assert!(is_injected(&err), "{err:?}");
    assert_eq!(
        session.transcript().len(),
        2,
        "the answer is kept in memory"
    );
    assert_eq!(session.transcript()[1].role, Role::Assistant);
    assert_eq!(recorder.save_count(), 1);
    let id: SessionId = session.id().clone();
    assert!(harness
        .store()
        .load(&id)
        .expect_err("nothing stored")
        .is_not_found());
}

#[tokio::test]
async fn a_redacted_secret_early_in_the_history_does_not_make_every_checkpoint_rewrite_the_base() {
    let (_tmp, dir) = store_dir();
    let redactor = PatternRedactor::common_secrets();
    let harness = harness_builder(open(&dir), 1, Tools::new())
        .redactor(Arc::new(redactor.clone()))
        .autosave(Autosave::EveryStep)
        .build();
    let mut session = harness
        .new_session(SessionOptions::new("m"))
        .expect("new session");
    let secret = "sk-abcdefghijklmnopqrstuvwxyz";
    harness
        .send(&mut session, format!("My key is {secret}. What is 1*2?"))
        .await
        .expect("turn");
    let stored = open(&dir).load(session.id()).expect("load");
    assert_eq!(stored, session.snapshot().redacted(&redactor));
    assert!(!stored.transcript()[0].text().contains(secret));
    assert!(
        session.transcript()[0].text().contains(secret),
        "memory keeps it"
    );

    // Later steps only add messages: they should be appended, as without a redactor.
    let f = files(&dir, session.id());
    let base_inode = inode(&f.base);
    let base = std::fs::read(&f.base).expect("base");
    harness.send(&mut session, "And 3*4?").await.expect("turn");
    harness.send(&mut session, "And 5*6?").await.expect("turn");
    assert_eq!(
        open(&dir).load(session.id()).expect("load"),
        session.snapshot().redacted(&redactor)
    );
    assert!(
        inode(&f.base) == base_inode && std::fs::read(&f.base).expect("base") == base,
        "every checkpoint after the secret rewrote the whole base instead of appending"
    );
}

/// A harness builder over `store` whose engines call the calculator `calls_per_turn` times
/// per turn, with `tools`.
fn harness_builder<S: SessionStore + 'static>(
    store: S,
    calls_per_turn: usize,
    tools: Arc<Tools>,
) -> agent_session::HarnessBuilder<impl Fn() -> ToolThenAnswerEngine> {
    let log = RequestLog::default();
    Harness::builder(store, move || {
        ToolThenAnswerEngine::with_calls_per_turn(calls_per_turn, Arc::clone(&log))
    })
    .tools(tools)
}
