//! The agent loop of `Session::send`: tool calls and their results, the turn limit, usage
//! and cost, turns cut short (a dropped future, a panicking tool, a failing engine), and the
//! messages the loop refuses.

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_session::{
    ContentBlock, Cost, Error, ErrorKind, Message, Role, Session, SessionOptions, SessionSnapshot,
    SessionStore, StopReason, ToolCall, ToolCallStatus, ToolExecutor, ToolResult, Usage,
    INTERRUPTED_OUTPUT,
};
use common::{
    assert_paired, assert_round_trips, calculator_calls, catch_unwind, reply, requests, sid,
    temp_store, usage, usd, Calculator, FailingEngine, Panicking, PendingForever, ScriptedEngine,
    ToolThenAnswerEngine, CALL_COST, MODEL,
};
use serde_json::json;

fn options_with(tools: Arc<dyn ToolExecutor>) -> SessionOptions {
    SessionOptions::new(MODEL).tools(tools)
}

/// The tool result carried by message `index`, which must be a tool message.
fn result_at(transcript: &[Message], index: usize) -> &ToolResult {
    let message = &transcript[index];
    assert_eq!(message.role, Role::Tool, "message {index}: {message:?}");
    message
        .tool_results()
        .next()
        .unwrap_or_else(|| panic!("message {index} has no tool result: {message:?}"))
}

/// Asserts that the call `call_id` was closed as interrupted by the message at `index`.
fn assert_interrupted_result(transcript: &[Message], index: usize, call_id: &str) {
    let result = result_at(transcript, index);
    assert_eq!(result.call_id, call_id);
    assert!(result.is_error, "an interrupted call is an error result");
    assert_eq!(result.output.as_text(), Some(INTERRUPTED_OUTPUT));
}

#[tokio::test]
async fn tool_calls_run_and_each_result_follows_its_call() {
    let calculator = Calculator::shared();
    let engine = ScriptedEngine::new([
        calculator_calls(&[("c1", "2+3"), ("c2", "4*5")], "0.000123"),
        reply("2+3 is 5 and 4*5 is 20.", "0.000045"),
    ]);
    let log = engine.log();
    let mut session =
        Session::new(sid("loop"), engine, options_with(calculator.clone())).expect("new session");

    let outcome = session.send("Compute 2+3 and 4*5").await.expect("send");

    assert_eq!(outcome.stop, StopReason::Finished);
    assert_eq!(outcome.reply.as_deref(), Some("2+3 is 5 and 4*5 is 20."));
    assert_eq!(outcome.completions, 2);
    assert_eq!(outcome.tool_calls, 2);
    assert_eq!(calculator.calls(), 2);

    let transcript = session.transcript();
    let roles: Vec<Role> = transcript.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Assistant
        ]
    );
    let first = result_at(transcript, 2);
    assert_eq!(
        (
            first.call_id.as_str(),
            first.output.as_text(),
            first.is_error
        ),
        ("c1", Some("5"), false)
    );
    let second = result_at(transcript, 3);
    assert_eq!(
        (
            second.call_id.as_str(),
            second.output.as_text(),
            second.is_error
        ),
        ("c2", Some("20"), false)
    );

    let records: Vec<_> = session
        .tool_calls()
        .iter()
        .map(|r| {
            (
                r.call_id.as_str(),
                r.tool_name.as_str(),
                (r.call_at.message, r.call_at.block),
                (r.result_at.message, r.result_at.block),
                r.status,
            )
        })
        .collect();
    assert_eq!(
        records,
        [
            ("c1", "calculator", (1, 1), (2, 0), ToolCallStatus::Ok),
            ("c2", "calculator", (1, 2), (3, 0), ToolCallStatus::Ok),
        ]
    );

    let seen = requests(&log);
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].tools,
        ["calculator"],
        "the model is offered the tools"
    );
    assert_eq!(seen[0].transcript, transcript[..1]);
    assert_eq!(
        seen[1].transcript,
        transcript[..4],
        "the model sees both results"
    );

    let snapshot = session.snapshot();
    assert_paired(&snapshot);
    assert_round_trips(&snapshot);
}

#[tokio::test]
async fn tool_failure_becomes_an_error_result_and_the_turn_continues() {
    let calculator = Calculator::shared();
    let engine = ScriptedEngine::new([
        calculator_calls(&[("c1", "1/0")], "0.00001"),
        reply("Division by zero is undefined.", "0.00001"),
    ]);
    let mut session =
        Session::new(sid("tool-error"), engine, options_with(calculator)).expect("new session");

    let outcome = session.send("What is 1/0?").await.expect("send");

    assert_eq!(outcome.stop, StopReason::Finished);
    let result = result_at(session.transcript(), 2);
    assert!(result.is_error);
    assert_eq!(result.output.as_text(), Some("division by zero"));
    assert_eq!(session.tool_calls()[0].status, ToolCallStatus::Error);
    assert_round_trips(&session.snapshot());
}

#[tokio::test]
async fn tool_call_without_an_executor_gets_an_error_result() {
    let engine = ScriptedEngine::new([
        calculator_calls(&[("c1", "1+1")], "0.00001"),
        reply("I have no tools.", "0.00001"),
    ]);
    let mut session =
        Session::new(sid("no-tools"), engine, SessionOptions::new(MODEL)).expect("new session");

    session.send("1+1?").await.expect("send");

    let result = result_at(session.transcript(), 2);
    assert!(result.is_error);
    assert!(
        result
            .output
            .as_text()
            .is_some_and(|t| t.contains("no tool executor")),
        "{result:?}"
    );
    assert_eq!(session.tool_calls()[0].status, ToolCallStatus::Error);
    assert_paired(&session.snapshot());
}

#[tokio::test]
async fn max_turns_stops_the_loop_with_every_call_answered() {
    let calculator = Calculator::shared();
    let engine = ToolThenAnswerEngine::always_calls(common::RequestLog::default());
    let mut session = Session::new(
        sid("max-turns"),
        engine,
        options_with(calculator.clone()).max_turns(3),
    )
    .expect("new session");

    let outcome = session.send("keep going").await.expect("send");

    assert_eq!(outcome.stop, StopReason::MaxTurns);
    assert_eq!(outcome.reply, None);
    assert_eq!(outcome.completions, 3);
    assert_eq!(outcome.tool_calls, 3);
    assert_eq!(calculator.calls(), 3);
    // user + 3 × (call, result)
    assert_eq!(session.transcript().len(), 7);
    assert_eq!(
        session.transcript().last().map(|m| m.role),
        Some(Role::Tool),
        "the last call was answered before stopping"
    );
    assert!(session
        .tool_calls()
        .iter()
        .all(|r| r.status == ToolCallStatus::Ok));
    let snapshot = session.snapshot();
    assert_paired(&snapshot);
    assert_round_trips(&snapshot);

    // Sending again continues with a fresh turn budget.
    let again = session.send("more").await.expect("second send");
    assert_eq!(again.stop, StopReason::MaxTurns);
    assert_eq!(again.completions, 3);
    assert_eq!(session.turn_count(), 6);
    assert_paired(&session.snapshot());
}

#[tokio::test]
async fn usage_has_one_record_per_completion_and_cost_totals_are_exact() {
    let calculator = Calculator::shared();
    let first_call = calculator_calls(&[("c1", "6*7")], "0.000123");
    let first_answer = reply("42", "0.000000007");
    let second_answer = reply("Still 42.", "1.5");
    let expected_usage: Vec<Usage> = [&first_call, &first_answer, &second_answer]
        .iter()
        .map(|c| c.usage.clone())
        .collect();
    let engine = ScriptedEngine::new([first_call, first_answer, second_answer]);
    let mut session =
        Session::new(sid("usage"), engine, options_with(calculator)).expect("new session");

    session.send("6*7?").await.expect("first send");
    assert_eq!(session.usage(), &expected_usage[..2]);
    session.send("Sure?").await.expect("second send");

    assert_eq!(session.usage(), expected_usage.as_slice());
    assert_eq!(session.turn_count(), 3);
    let totals = session.totals();
    assert_eq!(totals.completions, 3);
    assert_eq!(
        totals.input_tokens,
        expected_usage.iter().map(|u| u.input_tokens).sum::<u64>()
    );
    assert_eq!(
        totals.output_tokens,
        expected_usage.iter().map(|u| u.output_tokens).sum::<u64>()
    );
    assert_eq!(
        totals.cache_read_tokens,
        expected_usage
            .iter()
            .map(|u| u.cache_read_tokens)
            .sum::<u64>()
    );
    assert_eq!(
        totals.cache_write_tokens,
        expected_usage
            .iter()
            .map(|u| u.cache_write_tokens)
            .sum::<u64>()
    );
    assert_eq!(
        totals.cost,
        Cost::from_nano_usd(123_000 + 7 + 1_500_000_000)
    );
    assert_eq!(totals.cost.to_string(), "$1.500123007");

    let stored =
        SessionSnapshot::from_json(&session.snapshot().to_json().expect("encode")).expect("decode");
    assert_eq!(stored.usage(), expected_usage.as_slice());
    assert_eq!(stored.totals(), totals);
}

#[tokio::test]
async fn dropped_send_closes_the_running_tool_call_as_interrupted() {
    let hanging = PendingForever::shared();
    let engine = ScriptedEngine::new([
        calculator_calls(&[("c1", "1+1"), ("c2", "2+2")], CALL_COST),
        reply("Both calculations were interrupted.", "0.00002"),
    ]);
    let log = engine.log();
    let mut session =
        Session::new(sid("dropped"), engine, options_with(hanging.clone())).expect("new session");

    let timed_out = tokio::time::timeout(Duration::from_millis(100), session.send("go")).await;
    assert!(
        timed_out.is_err(),
        "the send must still be waiting on the tool"
    );
    assert_eq!(hanging.started(), 1, "c1 was running, c2 never started");

    // user, assistant(c1, c2), result(c1), result(c2)
    let transcript = session.transcript();
    assert_eq!(transcript.len(), 4, "{transcript:#?}");
    assert_interrupted_result(transcript, 2, "c1");
    assert_interrupted_result(transcript, 3, "c2");
    let statuses: Vec<_> = session.tool_calls().iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [ToolCallStatus::Interrupted, ToolCallStatus::Interrupted]
    );
    let snapshot = session.snapshot();
    assert_paired(&snapshot);
    assert_round_trips(&snapshot);

    // The conversation continues: the model sees the interruption, and nothing is rerun.
    let outcome = session.send("What happened?").await.expect("next send");
    assert_eq!(outcome.stop, StopReason::Finished);
    assert_eq!(outcome.tool_calls, 0);
    assert_eq!(
        hanging.started(),
        1,
        "an interrupted call is never run again"
    );
    let seen = requests(&log);
    let last = seen.last().expect("the engine was asked again");
    let interrupted: Vec<&ToolResult> = last
        .transcript
        .iter()
        .flat_map(Message::tool_results)
        .filter(|r| r.is_error && r.output.as_text() == Some(INTERRUPTED_OUTPUT))
        .collect();
    assert_eq!(
        interrupted
            .iter()
            .map(|r| r.call_id.as_str())
            .collect::<Vec<_>>(),
        ["c1", "c2"]
    );
    assert_paired(&session.snapshot());
}

/// An engine that never answers.
struct SilentEngine;

impl agent_session::Engine for SilentEngine {
    async fn complete(
        &mut self,
        _: agent_session::CompletionRequest<'_>,
    ) -> Result<agent_session::Completion, agent_session::BoxError> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn dropped_send_while_the_engine_is_thinking_keeps_a_consistent_session() {
    let mut session =
        Session::new(sid("thinking"), SilentEngine, SessionOptions::new(MODEL)).expect("new");

    let timed_out = tokio::time::timeout(Duration::from_millis(50), session.send("hello")).await;

    assert!(timed_out.is_err());
    assert_eq!(session.transcript(), [Message::user("hello")]);
    assert!(session.tool_calls().is_empty());
    assert!(session.usage().is_empty());
    assert_round_trips(&session.snapshot());
}

#[tokio::test]
async fn interrupted_call_survives_the_store_and_is_not_rerun_after_restore() {
    let (_dir, store) = temp_store();
    let hanging = PendingForever::shared();
    let engine = ScriptedEngine::new([calculator_calls(&[("c1", "3*3")], CALL_COST)]);
    let mut session =
        Session::new(sid("restored"), engine, options_with(hanging)).expect("new session");
    let timed_out = tokio::time::timeout(Duration::from_millis(50), session.send("go")).await;
    assert!(timed_out.is_err());
    let revision = store.save(&session.snapshot()).expect("save");
    session.mark_saved(revision);

    let loaded = store.load(session.id()).expect("load");
    assert_eq!(loaded.tool_calls()[0].status, ToolCallStatus::Interrupted);
    assert_eq!(loaded.transcript(), session.transcript());

    let calculator = Calculator::shared();
    let engine = ScriptedEngine::new([reply("Sorry, that was cut short.", "0.00001")]);
    let log = engine.log();
    let mut restored =
        Session::restore(loaded, engine, Some(options_with(calculator.clone()))).expect("restore");
    let outcome = restored.send("Try to continue").await.expect("send");

    assert_eq!(outcome.stop, StopReason::Finished);
    assert_eq!(
        calculator.calls(),
        0,
        "the interrupted call is not run again"
    );
    let seen = requests(&log);
    assert_interrupted_result(&seen[0].transcript, 2, "c1");
    assert_eq!(restored.tool_calls()[0].status, ToolCallStatus::Interrupted);
    assert_round_trips(&restored.snapshot());
}

/// Checks a session whose only turn was cut short by a panic in the tool running `c1`, with
/// `c2` requested in the same message and never started.
fn assert_closed_after_panic(session: &Session<ScriptedEngine>) {
    let transcript = session.transcript();
    assert_eq!(transcript.len(), 4, "{transcript:#?}");
    assert_interrupted_result(transcript, 2, "c1");
    assert_interrupted_result(transcript, 3, "c2");
    assert!(session
        .tool_calls()
        .iter()
        .all(|r| r.status == ToolCallStatus::Interrupted));
    let snapshot = session.snapshot();
    assert_paired(&snapshot);
    assert_round_trips(&snapshot);
}

fn panicking_session(id: &str, tools: Arc<Panicking>) -> Session<ScriptedEngine> {
    let engine = ScriptedEngine::new([
        calculator_calls(&[("c1", "1+1"), ("c2", "2+2")], CALL_COST),
        reply("The tool crashed.", "0.00002"),
    ]);
    Session::new(sid(id), engine, options_with(tools)).expect("new session")
}

#[tokio::test]
async fn tool_panic_in_a_spawned_task_leaves_the_session_consistent() {
    let panicking = Panicking::shared();
    let session = Arc::new(tokio::sync::Mutex::new(panicking_session(
        "panic-task",
        panicking.clone(),
    )));

    let task = {
        let session = Arc::clone(&session);
        tokio::spawn(async move { session.lock().await.send("go").await })
    };
    let join_error = task.await.expect_err("the task panicked");
    assert!(join_error.is_panic());
    let payload = join_error.into_panic();
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    assert_eq!(message, Some(Panicking::MESSAGE));

    let mut session = session.lock().await;
    assert_eq!(panicking.started(), 1);
    assert_closed_after_panic(&session);

    let log = session.engine().log();
    let outcome = session.send("What happened?").await.expect("next send");
    assert_eq!(outcome.stop, StopReason::Finished);
    assert_eq!(panicking.started(), 1, "the panicked call is not run again");
    let seen = requests(&log);
    assert_interrupted_result(&seen.last().expect("asked again").transcript, 2, "c1");
}

#[tokio::test]
async fn tool_panic_caught_in_place_leaves_the_session_consistent() {
    let panicking = Panicking::shared();
    let mut session = panicking_session("panic-caught", panicking.clone());

    let caught = catch_unwind(session.send("go")).await;
    assert!(caught.is_err(), "the tool's panic propagates out of send");

    assert_eq!(panicking.started(), 1);
    assert_closed_after_panic(&session);
    let outcome = session.send("What happened?").await.expect("next send");
    assert_eq!(outcome.stop, StopReason::Finished);
    assert_eq!(panicking.started(), 1);
}

#[tokio::test]
async fn engine_error_names_the_session_and_keeps_it_consistent() {
    let mut session = Session::new(
        sid("engine-down"),
        FailingEngine,
        SessionOptions::new(MODEL),
    )
    .expect("new");

    let err = session.send("hello").await.expect_err("the engine fails");

    assert_eq!(err.kind(), ErrorKind::Engine);
    match &err {
        Error::Engine { id, source } => {
            assert_eq!(id, session.id());
            assert_eq!(source.to_string(), FailingEngine::MESSAGE);
        }
        other => panic!("expected Error::Engine, got {other:?}"),
    }
    assert!(err.to_string().contains("engine-down"), "{err}");
    assert_eq!(session.transcript(), [Message::user("hello")]);
    assert!(session.usage().is_empty());
    assert_round_trips(&session.snapshot());
}

#[tokio::test]
async fn engine_error_mid_turn_keeps_completed_steps() {
    let engine = ScriptedEngine::with_steps([
        Ok(calculator_calls(&[("c1", "2*21")], "0.0001")),
        Err("rate limited".to_owned()),
        Ok(reply("It is 42.", "0.0002")),
    ]);
    let mut session =
        Session::new(sid("mid-turn"), engine, options_with(Calculator::shared())).expect("new");

    let err = session
        .send("2*21?")
        .await
        .expect_err("second completion fails");
    assert!(matches!(&err, Error::Engine { id, .. } if id.as_str() == "mid-turn"));
    let transcript = session.transcript();
    assert_eq!(transcript.len(), 3, "user, call, result are kept");
    assert_eq!(result_at(transcript, 2).output.as_text(), Some("42"));
    assert_eq!(session.usage().len(), 1);
    assert_eq!(session.totals().cost, usd("0.0001"));
    let snapshot = session.snapshot();
    assert_paired(&snapshot);
    assert_round_trips(&snapshot);

    let outcome = session
        .send("Try again")
        .await
        .expect("the engine recovered");
    assert_eq!(outcome.reply.as_deref(), Some("It is 42."));
    assert_eq!(session.totals().cost, usd("0.0003"));
}

/// Asserts that `err` is the engine error for an invalid engine message mentioning `needle`.
fn assert_refused(err: &Error, needle: &str) {
    assert_eq!(err.kind(), ErrorKind::Engine, "{err:?}");
    let Error::Engine { source, .. } = err else {
        panic!("expected Error::Engine, got {err:?}");
    };
    let text = source.to_string();
    assert!(text.contains("invalid message"), "{text}");
    assert!(text.contains(needle), "{text} should mention {needle}");
}

/// Some OpenAI-compatible servers number tool calls per step (`call_0` every time). An id
/// whose earlier call is answered may come again; its result answers the new call.
#[tokio::test]
async fn engine_message_reusing_an_answered_tool_call_id_is_accepted() {
    let engine = ScriptedEngine::new([
        calculator_calls(&[("c1", "1+1")], "0.00001"),
        reply("2", "0.00001"),
        calculator_calls(&[("c1", "9*9")], "0.00001"),
        reply("81", "0.00001"),
    ]);
    let calculator = Calculator::shared();
    let mut session =
        Session::new(sid("reused-id"), engine, options_with(calculator.clone())).expect("new");
    session.send("1+1?").await.expect("first turn");
    let outcome = session.send("9*9?").await.expect("the reused id is fine");

    assert_eq!(outcome.reply.as_deref(), Some("81"));
    assert_eq!(calculator.calls(), 2, "both calls ran");
    let records = session.tool_calls();
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.call_id == "c1"));
    let snapshot = session.snapshot();
    let second = snapshot.tool_result(&records[1]).expect("paired");
    assert_eq!(second.output.as_text(), Some("81"));
    assert_paired(&snapshot);
    assert_round_trips(&snapshot);
}

#[tokio::test]
async fn engine_message_repeating_a_tool_call_id_within_itself_is_refused() {
    let engine = ScriptedEngine::new([calculator_calls(&[("d1", "1+1"), ("d1", "2+2")], "0")]);
    let calculator = Calculator::shared();
    let mut session =
        Session::new(sid("dup-id"), engine, options_with(calculator.clone())).expect("new");

    let err = session.send("go").await.expect_err("duplicate id");

    assert_refused(&err, "\"d1\"");
    assert_eq!(calculator.calls(), 0);
    assert_eq!(session.transcript(), [Message::user("go")]);
    assert_round_trips(&session.snapshot());
}

#[tokio::test]
async fn engine_message_with_a_non_assistant_role_is_refused() {
    for (name, message) in [
        ("user", Message::user("I am not the model")),
        ("system", Message::system("Nor am I")),
        (
            "tool",
            Message::tool_result(ToolResult::new("ghost", "boo")),
        ),
    ] {
        let engine =
            ScriptedEngine::new([agent_session::Completion::new(message, usage(1, 1, "0"))]);
        let mut session = Session::new(sid("wrong-role"), engine, SessionOptions::new(MODEL))
            .expect("new session");

        let err = session.send("hi").await.expect_err(name);

        assert_refused(&err, "role");
        assert_eq!(session.transcript(), [Message::user("hi")], "{name}");
        assert_round_trips(&session.snapshot());
    }
}

#[tokio::test]
async fn engine_assistant_message_carrying_a_tool_result_is_refused() {
    let message = Message::assistant(vec![
        ContentBlock::text("here is a result I made up"),
        ContentBlock::tool_result(ToolResult::new("made-up", "1")),
    ]);
    let engine = ScriptedEngine::new([agent_session::Completion::new(message, usage(1, 1, "0"))]);
    let mut session =
        Session::new(sid("fake-result"), engine, SessionOptions::new(MODEL)).expect("new");

    let err = session
        .send("hi")
        .await
        .expect_err("tool result from the engine");

    assert_refused(&err, "made-up");
    assert_eq!(session.transcript(), [Message::user("hi")]);
    assert_round_trips(&session.snapshot());
}

#[tokio::test]
async fn send_message_with_tool_blocks_is_an_invalid_argument() {
    let engine = ScriptedEngine::new([reply("unused", "0")]);
    let log = engine.log();
    let mut session =
        Session::new(sid("bad-input"), engine, SessionOptions::new(MODEL)).expect("new");

    let with_result = Message::new(
        Role::User,
        vec![
            ContentBlock::text("here is a result"),
            ContentBlock::tool_result(ToolResult::new("x1", "42")),
        ],
    );
    let err = session
        .send_message(with_result)
        .await
        .expect_err("tool result");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);

    let with_call = Message::new(
        Role::User,
        vec![ContentBlock::tool_call(ToolCall::new(
            "x2",
            "calculator",
            json!({}),
        ))],
    );
    let err = session
        .send_message(with_call)
        .await
        .expect_err("tool call");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");

    assert!(session.transcript().is_empty(), "nothing was appended");
    assert!(requests(&log).is_empty(), "the engine was not asked");
    assert_eq!(session.engine().remaining(), 1);
}
