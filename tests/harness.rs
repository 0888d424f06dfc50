//! `Harness`: creating, saving, resuming, listing and deleting sessions over a file store,
//! with a fresh engine from the factory for every session.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_session::{
    Cost, Error, ErrorKind, Harness, Message, Revision, SessionOptions, ToolCallStatus,
    ToolExecutor,
};
use common::{
    assert_paired, assert_round_trips, requests, temp_store, usd, Calculator, RequestLog,
    ToolThenAnswerEngine, ANSWER_COST, CALL_COST, MODEL,
};
use serde_json::{json, Map, Value};

/// A harness over a fresh file store whose factory numbers the engines it builds.
struct Fixture<F> {
    dir: tempfile::TempDir,
    harness: Harness<F>,
    factory_calls: Arc<AtomicUsize>,
    log: RequestLog,
}

impl<F> Fixture<F> {
    fn factory_calls(&self) -> usize {
        self.factory_calls.load(Ordering::SeqCst)
    }

    /// The store's directory (see `common::temp_store`).
    fn store_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("sessions")
    }
}

/// A fixture with `tools` as the harness's default executor.
fn fixture(tools: Option<Arc<dyn ToolExecutor>>) -> Fixture<impl Fn() -> ToolThenAnswerEngine> {
    let (dir, store) = temp_store();
    let factory_calls = Arc::new(AtomicUsize::new(0));
    let log = RequestLog::default();
    let factory = {
        let factory_calls = Arc::clone(&factory_calls);
        let log = Arc::clone(&log);
        move || {
            let instance = factory_calls.fetch_add(1, Ordering::SeqCst) + 1;
            ToolThenAnswerEngine::new(Arc::clone(&log)).instance(instance)
        }
    };
    let mut builder = Harness::builder(store, factory);
    if let Some(tools) = tools {
        builder = builder.tools(tools);
    }
    Fixture {
        dir,
        harness: builder.build(),
        factory_calls,
        log,
    }
}

fn metadata() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "title": "Harness test",
        "project": {"name": "parser", "tags": ["a", "b"]},
        "ratio": 0.1,
        "count": 3,
        "flag": null,
    }) else {
        unreachable!("a JSON object literal")
    };
    map
}

const SYSTEM_PROMPT: &str = "You are a calculator.\nBe exact.";

fn full_options() -> SessionOptions {
    SessionOptions::new(MODEL)
        .system_prompt(SYSTEM_PROMPT)
        .max_turns(5)
        .metadata(metadata())
}

/// Lets the clock move so `updated_at` values differ.
async fn tick() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}

#[tokio::test]
async fn resume_without_options_rebuilds_them_from_the_snapshot() {
    let calculator = Calculator::shared();
    let f = fixture(Some(calculator.clone()));
    let mut session = f.harness.new_session(full_options()).expect("new session");
    session.send("What is 1*2?").await.expect("send");
    let revision = f.harness.save_session(&mut session).expect("save");
    assert_eq!(revision, Revision::from_u64(1));
    assert_eq!(session.revision(), revision);

    let mut resumed = f
        .harness
        .resume_session(session.id(), None)
        .expect("resume");

    let options = resumed.options();
    assert_eq!(options.model, MODEL);
    assert_eq!(options.system_prompt.as_deref(), Some(SYSTEM_PROMPT));
    assert_eq!(options.max_turns, 5);
    assert_eq!(options.metadata, metadata());
    assert_eq!(resumed.metadata(), &metadata());
    assert!(
        options.tools.is_some(),
        "tools come from the harness default"
    );
    assert_eq!(resumed.id(), session.id());
    assert_eq!(resumed.revision(), revision);
    assert_eq!(resumed.created_at(), session.created_at());
    assert_eq!(resumed.updated_at(), session.updated_at());
    assert_eq!(resumed.transcript(), session.transcript());
    assert_eq!(resumed.tool_calls(), session.tool_calls());
    assert_eq!(resumed.usage(), session.usage());
    assert_eq!(resumed.turn_count(), 2);

    // The restored options reach the engine.
    resumed.send("And 3*4?").await.expect("send after resume");
    let seen = requests(&f.log);
    let last = seen.last().expect("the engine was asked");
    assert_eq!(last.model, MODEL);
    assert_eq!(last.system_prompt.as_deref(), Some(SYSTEM_PROMPT));
    assert_eq!(last.session_id, *session.id());
    assert_eq!(last.tools, ["calculator"]);
    assert_eq!(calculator.calls(), 2);
}

#[tokio::test]
async fn resume_with_options_uses_the_callers_options() {
    let f = fixture(Some(Calculator::shared()));
    let mut session = f.harness.new_session(full_options()).expect("new session");
    session.send("1*2?").await.expect("send");
    f.harness.save_session(&mut session).expect("save");

    let mut resumed = f
        .harness
        .resume_session(
            session.id(),
            Some(SessionOptions::new("other-model").max_turns(2)),
        )
        .expect("resume");

    let options = resumed.options();
    assert_eq!(options.model, "other-model");
    assert_eq!(options.system_prompt, None);
    assert_eq!(options.max_turns, 2);
    assert!(
        options.metadata.is_empty(),
        "Some(options) replaces metadata too"
    );
    assert_eq!(
        resumed.transcript(),
        session.transcript(),
        "the transcript is kept"
    );

    resumed.send("3*4?").await.expect("send");
    let seen = requests(&f.log);
    let last = seen.last().expect("asked");
    assert_eq!(last.model, "other-model");
    assert_eq!(last.system_prompt, None);

    // Saving stores the caller's options.
    f.harness.save_session(&mut resumed).expect("save");
    let stored = f.harness.store().load(session.id()).expect("load");
    assert_eq!(stored.options().model, "other-model");
    assert_eq!(stored.options().max_turns, 2);
    assert!(stored.metadata().is_empty());

    // from_snapshot keeps everything but the field changed.
    let mut options = SessionOptions::from_snapshot(&stored);
    options.max_turns = 9;
    let changed = f
        .harness
        .resume_session(session.id(), Some(options))
        .expect("resume");
    assert_eq!(changed.options().model, "other-model");
    assert_eq!(changed.options().max_turns, 9);
}

#[tokio::test]
async fn harness_default_tools_are_used_when_options_have_none() {
    let default_tools = Calculator::shared();
    let f = fixture(Some(default_tools.clone()));
    let mut session = f
        .harness
        .new_session(SessionOptions::new(MODEL))
        .expect("new session");
    assert!(session.options().tools.is_some());
    session.send("1*2?").await.expect("send");
    assert_eq!(default_tools.calls(), 1);
    assert_eq!(session.tool_calls()[0].status, ToolCallStatus::Ok);
    f.harness.save_session(&mut session).expect("save");

    let mut resumed = f
        .harness
        .resume_session(session.id(), None)
        .expect("resume");
    resumed.send("again").await.expect("send");
    assert_eq!(default_tools.calls(), 2);

    let mut with_options = f
        .harness
        .resume_session(session.id(), Some(SessionOptions::new(MODEL)))
        .expect("resume");
    with_options.send("and again").await.expect("send");
    assert_eq!(default_tools.calls(), 3);
    assert!(with_options
        .tool_calls()
        .iter()
        .all(|r| r.status == ToolCallStatus::Ok));
}

#[tokio::test]
async fn session_tools_take_precedence_over_the_harness_default() {
    let default_tools = Calculator::shared();
    let own_tools = Calculator::shared();
    let f = fixture(Some(default_tools.clone()));
    let mut session = f
        .harness
        .new_session(SessionOptions::new(MODEL).tools(own_tools.clone()))
        .expect("new session");
    session.send("1*2?").await.expect("send");
    f.harness.save_session(&mut session).expect("save");

    let mut resumed = f
        .harness
        .resume_session(
            session.id(),
            Some(SessionOptions::new(MODEL).tools(own_tools.clone())),
        )
        .expect("resume");
    resumed.send("again").await.expect("send");

    assert_eq!(own_tools.calls(), 2);
    assert_eq!(default_tools.calls(), 0);
}

#[tokio::test]
async fn tools_are_never_stored_so_a_harness_without_them_gives_error_results() {
    let f = fixture(Some(Calculator::shared()));
    let mut session = f.harness.new_session(full_options()).expect("new session");
    session.send("1*2?").await.expect("send");
    f.harness.save_session(&mut session).expect("save");

    // Another harness over the same store, with no default executor.
    let bare = Harness::builder(
        agent_session::FileSessionStore::open(f.store_dir()).expect("reopen"),
        || ToolThenAnswerEngine::new(RequestLog::default()),
    )
    .build();
    let mut resumed = bare.resume_session(session.id(), None).expect("resume");
    assert!(resumed.options().tools.is_none());
    resumed.send("3*4?").await.expect("send");
    let last = resumed.tool_calls().last().expect("a call was made");
    assert_eq!(last.status, ToolCallStatus::Error);
    assert_paired(&resumed.snapshot());
}

#[tokio::test]
async fn every_new_or_resumed_session_gets_a_fresh_engine_from_the_factory() {
    let f = fixture(Some(Calculator::shared()));
    assert_eq!(f.factory_calls(), 0);

    let mut session = f.harness.new_session(full_options()).expect("new session");
    assert_eq!(f.factory_calls(), 1);
    assert_eq!(session.engine().instance, 1);
    session.send("1*2?").await.expect("send");
    f.harness.save_session(&mut session).expect("save");
    assert_eq!(f.factory_calls(), 1, "saving builds no engine");

    let first = f
        .harness
        .resume_session(session.id(), None)
        .expect("resume");
    assert_eq!(f.factory_calls(), 2);
    assert_eq!(first.engine().instance, 2);

    let second = f
        .harness
        .resume_session(session.id(), Some(full_options()))
        .expect("resume");
    assert_eq!(f.factory_calls(), 3);
    assert_eq!(second.engine().instance, 3);

    let latest = f.harness.resume_latest(None).expect("resume latest");
    assert_eq!(f.factory_calls(), 4);
    assert_eq!(latest.engine().instance, 4);
}

#[tokio::test]
async fn resume_latest_picks_the_most_recently_updated_session() {
    let f = fixture(Some(Calculator::shared()));
    let mut older = f.harness.new_session(full_options()).expect("new");
    older.send("first").await.expect("send");
    f.harness.save_session(&mut older).expect("save");
    tick().await;
    let mut newer = f.harness.new_session(full_options()).expect("new");
    newer.send("second").await.expect("send");
    f.harness.save_session(&mut newer).expect("save");

    let latest = f.harness.resume_latest(None).expect("resume latest");
    assert_eq!(latest.id(), newer.id());
    assert_eq!(latest.transcript(), newer.transcript());

    // Updating the older session makes it the latest.
    tick().await;
    older.send("update").await.expect("send");
    f.harness.save_session(&mut older).expect("save");
    let latest = f.harness.resume_latest(None).expect("resume latest");
    assert_eq!(latest.id(), older.id());
    assert_eq!(latest.options().metadata, metadata());
}

#[tokio::test]
async fn resume_latest_on_an_empty_store_is_no_sessions() {
    let f = fixture(None);
    let err = f
        .harness
        .resume_latest(None)
        .expect_err("nothing to resume");
    assert!(matches!(err, Error::NoSessions), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.is_not_found());
    assert_eq!(f.factory_calls(), 0);
}

#[tokio::test]
async fn list_sessions_is_newest_first_with_summaries() {
    let f = fixture(Some(Calculator::shared()));
    let mut ids = Vec::new();
    for title in ["one", "two", "three"] {
        let mut session = f
            .harness
            .new_session(full_options().metadata_entry("title", json!(title)))
            .expect("new");
        session
            .send(format!("turn of {title}"))
            .await
            .expect("send");
        f.harness.save_session(&mut session).expect("save");
        ids.push(session.id().clone());
        tick().await;
    }

    let listing = f.harness.list_sessions().expect("list");
    assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
    let listed: Vec<_> = listing.sessions.iter().map(|s| s.id.clone()).collect();
    assert_eq!(listed, [ids[2].clone(), ids[1].clone(), ids[0].clone()]);
    let newest = &listing.sessions[0];
    assert_eq!(newest.title.as_deref(), Some("three"));
    assert_eq!(newest.revision, Revision::from_u64(1));
    assert_eq!(newest.model, MODEL);
    assert_eq!(newest.message_count, 4, "user, call, result, answer");
    assert_eq!(newest.cost, usd(CALL_COST) + usd(ANSWER_COST));
    assert!(listing
        .sessions
        .windows(2)
        .all(|w| w[0].updated_at >= w[1].updated_at));
}

#[tokio::test]
async fn deleted_session_cannot_be_resumed() {
    let f = fixture(Some(Calculator::shared()));
    let mut session = f.harness.new_session(full_options()).expect("new");
    session.send("1*2?").await.expect("send");
    f.harness.save_session(&mut session).expect("save");

    f.harness.delete_session(session.id()).expect("delete");

    let err = f
        .harness
        .resume_session(session.id(), None)
        .expect_err("deleted");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        matches!(&err, Error::NotFound { id } if id == session.id()),
        "{err:?}"
    );
    assert!(f.harness.list_sessions().expect("list").sessions.is_empty());
    let again = f
        .harness
        .delete_session(session.id())
        .expect_err("already deleted");
    assert!(again.is_not_found());
}

#[tokio::test]
async fn stale_revision_save_is_a_conflict_and_the_first_save_is_kept() {
    let f = fixture(Some(Calculator::shared()));
    let mut session = f.harness.new_session(full_options()).expect("new");
    session.send("1*2?").await.expect("send");
    f.harness.save_session(&mut session).expect("save");
    let id = session.id().clone();

    let mut first = f.harness.resume_session(&id, None).expect("resume");
    let mut second = f.harness.resume_session(&id, None).expect("resume");
    first.send("from the first writer").await.expect("send");
    second.send("from the second writer").await.expect("send");

    assert_eq!(
        f.harness.save_session(&mut first).expect("first save wins"),
        Revision::from_u64(2)
    );
    let err = f
        .harness
        .save_session(&mut second)
        .expect_err("stale revision");

    assert!(err.is_conflict());
    assert_eq!(err.kind(), ErrorKind::Conflict);
    match &err {
        Error::Conflict {
            id: conflicting,
            expected,
            found,
        } => {
            assert_eq!(conflicting, &id);
            assert_eq!(*expected, Revision::from_u64(1));
            assert_eq!(*found, Some(Revision::from_u64(2)));
        }
        other => panic!("expected Error::Conflict, got {other:?}"),
    }
    assert_eq!(
        second.revision(),
        Revision::from_u64(1),
        "a failed save leaves the session unchanged"
    );

    let stored = f.harness.store().load(&id).expect("load");
    assert_eq!(stored.revision(), Revision::from_u64(2));
    assert_eq!(stored.transcript(), first.transcript());
    assert!(stored
        .transcript()
        .contains(&Message::user("from the first writer")));
    assert!(!stored
        .transcript()
        .contains(&Message::user("from the second writer")));
}

#[tokio::test]
async fn fifty_save_resume_cycles_keep_cost_exact() {
    const CYCLES: u64 = 50;
    let f = fixture(Some(Calculator::shared()));
    let mut session = f.harness.new_session(full_options()).expect("new");
    f.harness.save_session(&mut session).expect("save");
    let id = session.id().clone();
    let per_cycle = usd(CALL_COST) + usd(ANSWER_COST);

    for cycle in 1..=CYCLES {
        let mut resumed = f.harness.resume_session(&id, None).expect("resume");
        let expected_so_far = Cost::from_nano_usd(per_cycle.as_nano_usd() * (cycle - 1));
        assert_eq!(
            resumed.totals().cost,
            expected_so_far,
            "before cycle {cycle}"
        );
        resumed.send(format!("cycle {cycle}")).await.expect("send");
        let revision = f.harness.save_session(&mut resumed).expect("save");
        assert_eq!(revision, Revision::from_u64(cycle + 1));
    }

    let stored = f.harness.store().load(&id).expect("load");
    assert_eq!(stored.usage().len(), 100);
    let totals = stored.totals();
    assert_eq!(totals.completions, 100);
    // 50 × (123 000 + 789) nano-dollars, with no drift.
    assert_eq!(totals.cost, Cost::from_nano_usd(6_189_450));
    assert_eq!(totals.cost.to_string(), "$0.00618945");
    assert_eq!(
        stored.usage().iter().map(|u| u.cost).sum::<Cost>(),
        totals.cost
    );
    assert_eq!(stored.metadata(), &metadata());
    assert_paired(&stored);
    assert_round_trips(&stored);
    assert_eq!(f.factory_calls(), 51);
}

#[tokio::test]
async fn zero_max_turns_is_refused_on_new_and_resume() {
    let f = fixture(None);
    let err = f
        .harness
        .new_session(SessionOptions::new(MODEL).max_turns(0))
        .expect_err("zero turns");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");

    let mut session = f.harness.new_session(full_options()).expect("new");
    f.harness.save_session(&mut session).expect("save");
    let err = f
        .harness
        .resume_session(session.id(), Some(SessionOptions::new(MODEL).max_turns(0)))
        .expect_err("zero turns");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}
