//! Shared fixtures for the integration tests: scripted and tool-calling engines, a failing
//! engine, a calculator tool executor, executors that hang or panic, and a file store in a
//! temporary directory.
//!
//! Every test binary compiles this module on its own and uses only part of it, so items
//! that some binaries leave unused carry `#[allow(dead_code)]`.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use agent_session::{
    BoxError, BoxFuture, Completion, CompletionRequest, ContentBlock, Cost, Engine,
    FileSessionStore, Message, Role, SessionId, SessionSnapshot, ToolCall, ToolDefinition,
    ToolExecutor, ToolOutput, Usage,
};
use serde_json::json;

mod json_diff;
#[allow(unused_imports)] // not every test binary compares JSON
pub use json_diff::json_difference;

/// The model name the fixtures use.
#[allow(dead_code)] // not every test binary names the model
pub const MODEL: &str = "test-model-1";

/// What a completion that requests a tool call costs in [`ToolThenAnswerEngine`].
#[allow(dead_code)] // used by the binaries that run `ToolThenAnswerEngine`
pub const CALL_COST: &str = "0.000123";

/// What a final answer costs in [`ToolThenAnswerEngine`].
#[allow(dead_code)] // used by the binaries that run `ToolThenAnswerEngine`
pub const ANSWER_COST: &str = "0.000000789";

/// Parses a dollar amount that the test itself wrote.
#[allow(dead_code)] // not every test binary prices usage by hand
pub fn usd(amount: &str) -> Cost {
    Cost::parse_usd(amount).expect("test costs are valid decimals")
}

/// A session id that the test itself wrote.
#[allow(dead_code)] // not every test binary names its sessions
pub fn sid(id: &str) -> SessionId {
    SessionId::parse(id).expect("test ids are valid")
}

/// What an engine was asked, copied out of a [`CompletionRequest`].
#[derive(Debug, Clone)]
#[allow(dead_code)] // some binaries read only some of the fields
pub struct SeenRequest {
    pub session_id: SessionId,
    pub model: String,
    pub system_prompt: Option<String>,
    pub transcript: Vec<Message>,
    pub tools: Vec<String>,
}

/// A log of every request an engine received, shared with the test.
pub type RequestLog = Arc<Mutex<Vec<SeenRequest>>>;

fn record(log: &RequestLog, request: &CompletionRequest<'_>) {
    log.lock().expect("request log lock").push(SeenRequest {
        session_id: request.session_id.clone(),
        model: request.model.to_owned(),
        system_prompt: request.system_prompt.map(str::to_owned),
        transcript: request.transcript.to_vec(),
        tools: request.tools.iter().map(|t| t.name.clone()).collect(),
    });
}

/// The requests in `log`, copied.
#[allow(dead_code)] // not every test binary inspects requests
pub fn requests(log: &RequestLog) -> Vec<SeenRequest> {
    log.lock().expect("request log lock").clone()
}

/// Usage with non-trivial token counts and cost.
#[allow(dead_code)] // not every test binary prices usage by hand
pub fn usage(input: u64, output: u64, cost: &str) -> Usage {
    Usage::new(MODEL)
        .with_tokens(input, output)
        .with_cache_tokens(input / 2, output / 3)
        .with_cost(usd(cost))
}

/// A final assistant answer.
#[allow(dead_code)] // not every test binary scripts completions
pub fn reply(text: &str, cost: &str) -> Completion {
    Completion::new(
        Message::assistant(vec![ContentBlock::text(text)]),
        usage(1_000, 50, cost),
    )
}

/// An assistant message calling the `calculator` tool once per `(call id, expression)`.
#[allow(dead_code)] // not every test binary scripts completions
pub fn calculator_calls(calls: &[(&str, &str)], cost: &str) -> Completion {
    let mut content = vec![ContentBlock::text("Let me calculate.")];
    content.extend(calls.iter().map(|(id, expression)| {
        ContentBlock::tool_call(ToolCall::new(
            *id,
            "calculator",
            json!({ "expression": expression }),
        ))
    }));
    Completion::new(Message::assistant(content), usage(1_200, 30, cost))
}

/// An engine that plays back prepared completions (or errors) in order, and logs what it
/// was asked. When the script runs out it fails.
#[derive(Debug)]
pub struct ScriptedEngine {
    script: VecDeque<Result<Completion, String>>,
    log: RequestLog,
}

#[allow(dead_code)] // not every test binary uses every constructor
impl ScriptedEngine {
    /// Plays back `completions`.
    pub fn new(completions: impl IntoIterator<Item = Completion>) -> Self {
        ScriptedEngine::with_steps(completions.into_iter().map(Ok))
    }

    /// Plays back `steps`; an `Err` step makes the engine fail with that message.
    pub fn with_steps(steps: impl IntoIterator<Item = Result<Completion, String>>) -> Self {
        ScriptedEngine {
            script: steps.into_iter().collect(),
            log: RequestLog::default(),
        }
    }

    /// The engine's request log.
    pub fn log(&self) -> RequestLog {
        Arc::clone(&self.log)
    }

    /// Steps not yet played.
    pub fn remaining(&self) -> usize {
        self.script.len()
    }
}

impl Engine for ScriptedEngine {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        record(&self.log, &request);
        match self.script.pop_front() {
            Some(Ok(completion)) => Ok(completion),
            Some(Err(message)) => Err(message.into()),
            None => Err("the engine's script is exhausted".into()),
        }
    }
}

/// An engine that calls the `calculator` tool `calls_per_turn` times per user message and
/// then answers with the last result. It keeps no state of its own (it reads everything
/// from the request), so it behaves the same after a resume; call ids are derived from
/// the transcript length, so they never repeat within a session.
#[derive(Debug)]
pub struct ToolThenAnswerEngine {
    /// Which engine this is, as numbered by whoever built it (for counting fresh engines).
    pub instance: usize,
    calls_per_turn: usize,
    log: RequestLog,
}

#[allow(dead_code)] // not every test binary uses every constructor
impl ToolThenAnswerEngine {
    /// An engine making one tool call per turn.
    pub fn new(log: RequestLog) -> Self {
        ToolThenAnswerEngine::with_calls_per_turn(1, log)
    }

    /// An engine making `calls_per_turn` tool calls per turn before answering.
    pub fn with_calls_per_turn(calls_per_turn: usize, log: RequestLog) -> Self {
        ToolThenAnswerEngine {
            instance: 0,
            calls_per_turn,
            log,
        }
    }

    /// An engine that never stops calling tools.
    pub fn always_calls(log: RequestLog) -> Self {
        ToolThenAnswerEngine::with_calls_per_turn(usize::MAX, log)
    }

    /// Sets the instance number.
    #[must_use]
    pub fn instance(mut self, instance: usize) -> Self {
        self.instance = instance;
        self
    }
}

impl Engine for ToolThenAnswerEngine {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        record(&self.log, &request);
        let transcript = request.transcript;
        let results_this_turn = transcript
            .iter()
            .rev()
            .take_while(|m| m.role != Role::User)
            .filter(|m| m.role == Role::Tool)
            .count();
        let n = transcript.len();
        let usage = Usage::new(request.model)
            .with_tokens(1_000 + n as u64, 20 + n as u64)
            .with_cache_tokens(n as u64, 1);
        if results_this_turn < self.calls_per_turn {
            let call = ToolCall::new(
                format!("call_{n}"),
                "calculator",
                json!({ "expression": format!("{n}*{}", n + 1) }),
            );
            Ok(Completion::new(
                Message::assistant(vec![ContentBlock::tool_call(call)]),
                usage.with_cost(usd(CALL_COST)),
            ))
        } else {
            let last = transcript
                .last()
                .and_then(|m| m.tool_results().next())
                .and_then(|r| r.output.as_text())
                .unwrap_or("nothing")
                .to_owned();
            Ok(Completion::new(
                Message::assistant(vec![ContentBlock::text(format!("The result is {last}."))]),
                usage.with_cost(usd(ANSWER_COST)),
            ))
        }
    }
}

/// An engine whose every completion fails.
#[derive(Debug, Default)]
pub struct FailingEngine;

#[allow(dead_code)] // only the binaries testing engine failures use it
impl FailingEngine {
    /// The error text it fails with.
    pub const MESSAGE: &'static str = "upstream returned 503 Service Unavailable";
}

impl Engine for FailingEngine {
    async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        Err(FailingEngine::MESSAGE.into())
    }
}

/// The `calculator` tool definition.
fn calculator_definition() -> ToolDefinition {
    ToolDefinition::new(
        "calculator",
        "Evaluates `a op b` for integers a, b and op one of + - * /",
        json!({
            "type": "object",
            "properties": { "expression": { "type": "string" } },
            "required": ["expression"]
        }),
    )
}

/// A calculator tool: evaluates `{"expression": "a op b"}` for integers and `+ - * /`.
/// Division by zero and unknown input are tool errors. Counts its calls.
#[derive(Debug, Default)]
pub struct Calculator {
    calls: AtomicUsize,
}

#[allow(dead_code)] // not every test binary counts calls
impl Calculator {
    /// A shared calculator.
    pub fn shared() -> Arc<Calculator> {
        Arc::new(Calculator::default())
    }

    /// How many calls it has run.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Evaluates `expression`.
    pub fn evaluate(expression: &str) -> Result<i64, String> {
        let expression = expression.trim();
        let position = expression
            .char_indices()
            .skip(1)
            .find(|(_, c)| matches!(c, '+' | '-' | '*' | '/'))
            .map(|(i, _)| i)
            .ok_or_else(|| format!("no operator in {expression:?}"))?;
        let (left, rest) = expression.split_at(position);
        let (op, right) = rest.split_at(1);
        let parse = |s: &str| {
            s.trim()
                .parse::<i64>()
                .map_err(|e| format!("bad operand {s:?}: {e}"))
        };
        let (a, b) = (parse(left)?, parse(right)?);
        match op {
            "+" => a.checked_add(b),
            "-" => a.checked_sub(b),
            "*" => a.checked_mul(b),
            _ if b == 0 => return Err("division by zero".to_owned()),
            _ => a.checked_div(b),
        }
        .ok_or_else(|| "overflow".to_owned())
    }
}

impl ToolExecutor for Calculator {
    fn definitions(&self) -> Vec<ToolDefinition> {
        vec![calculator_definition()]
    }

    fn execute<'a>(&'a self, call: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if call.name != "calculator" {
                return Err(format!("unknown tool {:?}", call.name).into());
            }
            let arguments = call.arguments.to_value()?;
            let expression = arguments
                .get("expression")
                .and_then(serde_json::Value::as_str)
                .ok_or("missing `expression`")?;
            let value = Calculator::evaluate(expression)?;
            Ok(ToolOutput::from(value.to_string()))
        })
    }
}

/// A tool executor whose calls never complete (the future stays pending forever), for
/// tests that drop a `send` future while a tool is running. Counts the calls it started.
#[derive(Debug, Default)]
pub struct PendingForever {
    started: AtomicUsize,
}

#[allow(dead_code)] // only the binaries testing cancelled turns use it
impl PendingForever {
    /// A shared executor.
    pub fn shared() -> Arc<PendingForever> {
        Arc::new(PendingForever::default())
    }

    /// How many calls it started.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
}

impl ToolExecutor for PendingForever {
    fn definitions(&self) -> Vec<ToolDefinition> {
        vec![calculator_definition()]
    }

    fn execute<'a>(&'a self, _: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        self.started.fetch_add(1, Ordering::SeqCst);
        Box::pin(std::future::pending())
    }
}

/// A tool executor whose calls panic when polled. Counts the calls it started.
#[derive(Debug, Default)]
pub struct Panicking {
    started: AtomicUsize,
}

#[allow(dead_code)] // only the binaries testing panicking tools use it
impl Panicking {
    /// The panic message.
    pub const MESSAGE: &'static str = "the tool exploded";

    /// A shared executor.
    pub fn shared() -> Arc<Panicking> {
        Arc::new(Panicking::default())
    }

    /// How many calls it started.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }
}

impl ToolExecutor for Panicking {
    fn definitions(&self) -> Vec<ToolDefinition> {
        vec![calculator_definition()]
    }

    fn execute<'a>(&'a self, _: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        self.started.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { panic!("{}", Panicking::MESSAGE) })
    }
}

/// Polls `future` to completion, catching a panic raised while polling it. The future is
/// dropped before this returns, whether it finished or panicked.
#[allow(dead_code)] // only the binaries testing panicking tools use it
pub async fn catch_unwind<F: Future>(future: F) -> std::thread::Result<F::Output> {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(move |cx| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    })
    .await
}

/// A [`FileSessionStore`] in a fresh temporary directory (kept alive by the returned
/// guard).
#[allow(dead_code)] // not every test binary uses a file store
pub fn temp_store() -> (tempfile::TempDir, FileSessionStore) {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let store = FileSessionStore::open(dir.path().join("sessions")).expect("open the store");
    (dir, store)
}

/// Asserts that `snapshot` survives its JSON form unchanged (and so passes validation).
#[allow(dead_code)] // not every test binary checks snapshots
pub fn assert_round_trips(snapshot: &SessionSnapshot) {
    let bytes = snapshot.to_json().expect("encode the snapshot");
    let back = SessionSnapshot::from_json(&bytes).expect("the snapshot validates");
    assert_eq!(
        &back, snapshot,
        "the snapshot changed through its JSON form"
    );
}

/// Asserts that every tool call in `snapshot` has exactly one record, and that each record
/// points at its call and at a later result answering it.
#[allow(dead_code)] // not every test binary checks pairing
pub fn assert_paired(snapshot: &SessionSnapshot) {
    let calls: Vec<&ToolCall> = snapshot
        .transcript()
        .iter()
        .flat_map(Message::tool_calls)
        .collect();
    let results = snapshot
        .transcript()
        .iter()
        .flat_map(Message::tool_results)
        .count();
    assert_eq!(
        calls.len(),
        snapshot.tool_calls().len(),
        "one record per call"
    );
    assert_eq!(calls.len(), results, "one result per call");
    for (call, record) in calls.iter().zip(snapshot.tool_calls()) {
        assert_eq!(call.id, record.call_id);
        let call = snapshot
            .tool_call(record)
            .expect("the record points at its call");
        let result = snapshot
            .tool_result(record)
            .expect("the record points at its result");
        assert_eq!(call.id, record.call_id);
        assert_eq!(result.call_id, record.call_id);
        assert!(record.result_at > record.call_at, "{record:?}");
        assert_eq!(result.is_error, record.status.is_error(), "{record:?}");
    }
}

/// Asserts that `actual` is exactly `expected` (see [`json_difference`]).
#[allow(dead_code)] // only the binaries comparing provider or cross-process JSON use it
pub fn assert_json_identical(expected: &serde_json::Value, actual: &serde_json::Value, what: &str) {
    if let Some(difference) = json_difference(expected, actual, "$") {
        panic!("{what}: {difference}");
    }
    assert_eq!(expected, actual, "{what}");
}
