//! A session saved in one process and resumed in another.
//!
//! The parent test runs a session (tool calls that succeed, fail and are interrupted,
//! provider fields, metadata with awkward numbers, a system prompt, a turn limit, usage with
//! costs), saves it with a `FileSessionStore`, and starts this same test binary again to run
//! only [`child_resumes_session`]. The child resumes the session through a `Harness` with no
//! options, checks it against the parent's description of what it saved, prints its own
//! description (JSON between markers), sends one more turn and saves. The parent then
//! compares the child's view with what it saved, and the child's save with the child's view.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use agent_session::{
    BoxError, BoxFuture, ContentBlock, Cost, FileSessionStore, Harness, Message, Revision, Session,
    SessionId, SessionOptions, SessionSnapshot, StopReason, ToolArguments, ToolCall,
    ToolCallStatus, ToolDefinition, ToolExecutor, ToolOutput, INTERRUPTED_OUTPUT,
};
use common::{
    assert_json_identical, assert_paired, calculator_calls, reply, requests, usage, usd,
    Calculator, PendingForever, RequestLog, ScriptedEngine, ToolThenAnswerEngine, ANSWER_COST,
    CALL_COST, MODEL,
};
use serde_json::{json, Map, Value};

const STORE_VAR: &str = "AGENT_SESSION_TEST_CHILD_STORE";
const ID_VAR: &str = "AGENT_SESSION_TEST_CHILD_ID";
const EXPECTED_VAR: &str = "AGENT_SESSION_TEST_CHILD_EXPECTED";
const BEGIN: &str = "=====BEGIN CHILD JSON=====";
const END: &str = "=====END CHILD JSON=====";

const SYSTEM_PROMPT: &str =
    "You are a careful calculator.\nUse the tools. Ünïcödé ✓ «quoted» \"escaped\"";
const MAX_TURNS: u32 = 7;
const CHILD_PROMPT: &str = "One more from the child process: 5*6?";
/// The raw arguments of call `c3`, with spacing a re-encoder would change.
const RAW_ARGUMENTS: &str = "{\"expression\":  \"2+2\" ,\"precision\": 1.0}";

fn metadata() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "title": "Cross-process ✓",
        "tenth": 0.1,
        "tiny": 1e-7,
        "price": 228.03,
        "not_quite": 0.300_000_000_000_000_04,
        "one_float": 1.0,
        "one_int": 1,
        "max_u64": u64::MAX,
        "min_i64": i64::MIN,
        "negative": -42,
        "nothing": null,
        "unicode": "emoji 😀, a NUL \u{0} and \"quotes\"",
        "nested": {
            "list": [0.1, 0.2, null, true, "x", {"deep": [[]]}],
            "empty_object": {},
            "empty_list": [],
        },
    }) else {
        unreachable!("a JSON object literal")
    };
    map
}

/// Everything observable about a snapshot, as JSON: every field and accessor, the raw JSON
/// form, each tool call paired with its result, and the usage totals.
fn describe(snapshot: &SessionSnapshot) -> Value {
    let pairs: Vec<Value> = snapshot
        .tool_calls()
        .iter()
        .map(|record| {
            json!({
                "record": record,
                "call": snapshot.tool_call(record).expect("record points at its call"),
                "result": snapshot.tool_result(record).expect("record points at its result"),
            })
        })
        .collect();
    let raw: Value =
        serde_json::from_slice(&snapshot.to_json().expect("encode")).expect("snapshot JSON");
    json!({
        "id": snapshot.id().as_str(),
        "revision": snapshot.revision().as_u64(),
        "schema_version": snapshot.schema_version(),
        "created_at": snapshot.created_at(),
        "updated_at": snapshot.updated_at(),
        "model": snapshot.options().model,
        "system_prompt": snapshot.options().system_prompt,
        "max_turns": snapshot.options().max_turns,
        "metadata": snapshot.metadata(),
        "title": snapshot.title(),
        "transcript": snapshot.transcript(),
        "tool_calls": snapshot.tool_calls(),
        "pairs": pairs,
        "usage": snapshot.usage(),
        "totals": totals(snapshot.totals()),
        "raw": raw,
    })
}

fn totals(totals: agent_session::UsageTotals) -> Value {
    json!({
        "completions": totals.completions,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cache_read_tokens": totals.cache_read_tokens,
        "cache_write_tokens": totals.cache_write_tokens,
        "cost_nano_usd": totals.cost.as_nano_usd(),
        "cost": totals.cost.to_string(),
    })
}

/// Everything observable about a live session through its own accessors.
fn describe_session<E>(session: &Session<E>) -> Value {
    let options = session.options();
    json!({
        "id": session.id().as_str(),
        "revision": session.revision().as_u64(),
        "created_at": session.created_at(),
        "updated_at": session.updated_at(),
        "model": options.model,
        "system_prompt": options.system_prompt,
        "max_turns": options.max_turns,
        "metadata": session.metadata(),
        "options_metadata": options.metadata,
        "transcript": session.transcript(),
        "tool_calls": session.tool_calls(),
        "usage": session.usage(),
        "totals": totals(session.totals()),
        "turn_count": session.turn_count(),
        "snapshot": describe(&session.snapshot()),
    })
}

/// The parent's tools: the calculator, plus a `wait` tool that never returns.
struct ParentTools {
    calculator: Calculator,
    hang: PendingForever,
}

impl ToolExecutor for ParentTools {
    fn definitions(&self) -> Vec<ToolDefinition> {
        let mut definitions = self.calculator.definitions();
        definitions.push(ToolDefinition::new(
            "wait",
            "Waits forever",
            json!({"type": "object"}),
        ));
        definitions
    }

    fn execute<'a>(&'a self, call: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        if call.name == "wait" {
            self.hang.execute(call)
        } else {
            self.calculator.execute(call)
        }
    }
}

/// The parent's scripted model: three turns, the last one cut short.
fn parent_script() -> Vec<agent_session::Completion> {
    let mut raw_call = ToolCall::with_raw_arguments("c3", "calculator", RAW_ARGUMENTS);
    raw_call
        .extra
        .insert("caller".to_owned(), json!({"type": "direct"}));
    let mut cited = agent_session::TextBlock::new("Adding up.");
    cited.extra.insert(
        "citations".to_owned(),
        json!([{"cited_text": "2+2", "start": 0}]),
    );
    let second_turn = Message::assistant(vec![
        ContentBlock::Other {
            value: json!({"type": "thinking", "thinking": "2+2…", "signature": "EqQBCgIYAh=="}),
        },
        ContentBlock::Text(cited),
        ContentBlock::tool_call(raw_call),
    ]);
    let mut wait = Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
        "c4",
        "wait",
        json!({}),
    ))]);
    wait.extra
        .insert("id".to_owned(), json!("msg_0123456789abcdef"));
    vec![
        calculator_calls(&[("c1", "6*7"), ("c2", "1/0")], "0.000123"),
        reply("6*7 is 42; 1/0 is undefined.", "0.0000456"),
        agent_session::Completion::new(second_turn, usage(2_000, 77, "0.000000001")),
        reply("2+2 is 4.", "0.25"),
        agent_session::Completion::new(
            wait,
            agent_session::Usage::new("test-model-1-2026-01-01")
                .with_tokens(u64::from(u32::MAX), 1)
                .with_cache_tokens(12_345, 678)
                .with_cost(usd("0.000777")),
        ),
    ]
}

/// A user message in OpenAI Chat form with a provider field and provider parts.
fn provider_message() -> Value {
    json!({
        "role": "user",
        "name": "ada",
        "content": [
            {"type": "text", "text": "And 2+2?", "cache_control": {"type": "ephemeral"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        ]
    })
}

#[tokio::test]
async fn session_survives_a_process_boundary() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store_dir = dir.path().join("sessions");
    let tools = Arc::new(ParentTools {
        calculator: Calculator::default(),
        hang: PendingForever::default(),
    });
    let script = parent_script();
    let harness = Harness::builder(
        FileSessionStore::open(&store_dir).expect("open store"),
        move || ScriptedEngine::new(script.clone()),
    )
    .tools(tools)
    .build();

    let options = SessionOptions::new(MODEL)
        .system_prompt(SYSTEM_PROMPT)
        .max_turns(MAX_TURNS)
        .metadata(metadata());
    let mut session = harness.new_session(options).expect("new session");
    session.send("What is 6*7, and 1/0?").await.expect("turn 1");
    let provider_message =
        Message::from_openai_chat(&provider_message()).expect("provider message");
    session
        .send_message(provider_message)
        .await
        .expect("turn 2");
    let cut_short =
        tokio::time::timeout(Duration::from_millis(100), session.send("Now wait.")).await;
    assert!(cut_short.is_err(), "the wait tool never returns");
    session
        .metadata_mut()
        .insert("edited_after_turns".to_owned(), json!(true));
    let revision = harness.save_session(&mut session).expect("save");
    assert_eq!(revision, Revision::from_u64(1));

    let saved = session.snapshot();
    let statuses: Vec<ToolCallStatus> = saved.tool_calls().iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            ToolCallStatus::Ok,
            ToolCallStatus::Error,
            ToolCallStatus::Ok,
            ToolCallStatus::Interrupted
        ]
    );
    assert_eq!(saved.usage().len(), 5);
    assert_paired(&saved);
    assert_eq!(
        harness.store().load(session.id()).expect("load"),
        saved,
        "the store gives back what was saved"
    );

    let expected = describe_session(&session);
    let expected_path = dir.path().join("expected.json");
    std::fs::write(
        &expected_path,
        serde_json::to_vec(&expected).expect("encode"),
    )
    .expect("write the expected description");

    let child = run_child(&store_dir, session.id(), &expected_path);

    // Parent → child: the child saw exactly what the parent saved.
    assert_json_identical(&expected, &child["resumed"], "the resumed session");

    // Child → parent: the parent reads exactly what the child saved.
    let after = harness
        .store()
        .load(session.id())
        .expect("load the child's save");
    assert_json_identical(&child["after"], &describe(&after), "the child's save");
    assert_child_added_one_turn(&saved, &after);
}

/// Runs [`child_resumes_session`] in a new process of this test binary and returns the JSON
/// it printed.
fn run_child(store_dir: &Path, id: &SessionId, expected_path: &Path) -> Value {
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "child_resumes_session",
            "--nocapture",
            "--include-ignored",
        ])
        .env(STORE_VAR, store_dir)
        .env(ID_VAR, id.as_str())
        .env(EXPECTED_VAR, expected_path)
        .output()
        .expect("run the child process");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the child failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("1 passed"),
        "the child test did not run:\n{stdout}"
    );
    let json_text = stdout
        .split_once(BEGIN)
        .and_then(|(_, rest)| rest.split_once(END))
        .map_or_else(
            || panic!("no child JSON in its output:\n{stdout}\n{stderr}"),
            |(json, _)| json.trim(),
        );
    serde_json::from_str(json_text).expect("the child's JSON")
}

/// Checks that `after` is `saved` plus the one turn the child added.
fn assert_child_added_one_turn(saved: &SessionSnapshot, after: &SessionSnapshot) {
    assert_eq!(after.revision(), Revision::from_u64(2));
    let before = saved.transcript();
    assert_eq!(&after.transcript()[..before.len()], before);
    let added = &after.transcript()[before.len()..];
    assert_eq!(added.len(), 4, "user, call, result, answer: {added:#?}");
    assert_eq!(added[0], Message::user(CHILD_PROMPT));
    assert_eq!(after.tool_calls()[..4], *saved.tool_calls());
    assert_eq!(after.tool_calls()[4].status, ToolCallStatus::Ok);
    assert_eq!(after.usage()[..5], *saved.usage());
    assert_eq!(after.usage().len(), 7);
    assert_eq!(
        after.totals().cost,
        saved.totals().cost + usd(CALL_COST) + usd(ANSWER_COST)
    );
    assert_eq!(after.options(), saved.options());
    assert_eq!(after.metadata(), saved.metadata());
    assert_eq!(after.created_at(), saved.created_at());
    assert!(after.updated_at() > saved.updated_at());
    assert_paired(after);

    // Spot checks of the values most likely to be lost.
    assert_eq!(after.metadata()["max_u64"].as_u64(), Some(u64::MAX));
    assert_eq!(after.metadata()["min_i64"].as_i64(), Some(i64::MIN));
    assert_eq!(after.metadata()["tiny"].as_f64(), Some(1e-7));
    assert_eq!(after.metadata()["price"].as_f64(), Some(228.03));
    assert!(after.metadata()["one_float"].is_f64());
    assert!(after.metadata()["one_int"].is_u64());
    let raw = after
        .transcript()
        .iter()
        .flat_map(Message::tool_calls)
        .find(|c| c.id == "c3")
        .expect("call c3");
    assert_eq!(raw.arguments, ToolArguments::Text(RAW_ARGUMENTS.to_owned()));
    assert_eq!(raw.extra["caller"], json!({"type": "direct"}));
    let from_provider = after
        .transcript()
        .iter()
        .find(|m| m.extra.get("name") == Some(&json!("ada")))
        .expect("the provider message");
    assert_json_identical(
        &provider_message(),
        &from_provider.to_openai_chat().expect("convert back"),
        "the provider message after two processes",
    );
    assert_eq!(
        after.usage()[4].input_tokens,
        u64::from(u32::MAX),
        "usage of the interrupted turn's completion is kept"
    );
}

/// Runs in the child process started by [`session_survives_a_process_boundary`]; returns at
/// once when run any other way.
#[tokio::test]
#[ignore = "the child half of session_survives_a_process_boundary; a no-op when run directly"]
async fn child_resumes_session() {
    let (Ok(store_dir), Ok(id), Ok(expected_path)) = (
        std::env::var(STORE_VAR),
        std::env::var(ID_VAR),
        std::env::var(EXPECTED_VAR),
    ) else {
        return;
    };
    let id = SessionId::parse(&id).expect("the parent's session id");
    let expected: Value =
        serde_json::from_slice(&std::fs::read(expected_path).expect("read expected"))
            .expect("expected JSON");

    let log = RequestLog::default();
    let harness = Harness::builder(FileSessionStore::open(&store_dir).expect("open store"), {
        let log = Arc::clone(&log);
        move || ToolThenAnswerEngine::new(Arc::clone(&log))
    })
    .tools(Calculator::shared())
    .build();
    let mut session = harness.resume_session(&id, None).expect("resume");
    let resumed = describe_session(&session);

    assert_json_identical(&expected, &resumed, "the session as the child resumed it");
    assert_eq!(session.options().model, MODEL);
    assert_eq!(
        session.options().system_prompt.as_deref(),
        Some(SYSTEM_PROMPT)
    );
    assert_eq!(session.options().max_turns, MAX_TURNS);
    assert!(
        session.options().tools.is_some(),
        "the child's harness supplies tools"
    );
    let mut expected_metadata = metadata();
    expected_metadata.insert("edited_after_turns".to_owned(), json!(true));
    assert_eq!(session.metadata(), &expected_metadata);
    assert_eq!(session.revision(), Revision::from_u64(1));
    assert_eq!(session.turn_count(), 5);
    assert_eq!(
        session.totals().cost,
        Cost::from_nano_usd(123_000 + 45_600 + 1 + 250_000_000 + 777_000)
    );
    let statuses: Vec<ToolCallStatus> = session.tool_calls().iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            ToolCallStatus::Ok,
            ToolCallStatus::Error,
            ToolCallStatus::Ok,
            ToolCallStatus::Interrupted
        ]
    );
    assert_paired(&session.snapshot());

    let outcome = session.send(CHILD_PROMPT).await.expect("the child's turn");
    assert_eq!(outcome.stop, StopReason::Finished);
    let seen = requests(&log);
    assert_eq!(seen[0].model, MODEL);
    assert_eq!(seen[0].system_prompt.as_deref(), Some(SYSTEM_PROMPT));
    let interrupted = seen[0]
        .transcript
        .iter()
        .flat_map(Message::tool_results)
        .find(|r| r.call_id == "c4")
        .expect("the model sees the interrupted call's result");
    assert!(interrupted.is_error);
    assert_eq!(interrupted.output.as_text(), Some(INTERRUPTED_OUTPUT));
    let revision = harness.save_session(&mut session).expect("save");
    assert_eq!(revision, Revision::from_u64(2));
    let after = harness.store().load(&id).expect("reload");

    let report = json!({"resumed": resumed, "after": describe(&after)});
    println!("{BEGIN}\n{report}\n{END}");
}
