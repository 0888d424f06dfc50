//! Quick start: an agent session that survives its process.
//!
//! ```sh
//! cargo run --example quickstart                             # in a fresh temporary directory
//! cargo run --example quickstart -- .agent-session/sessions  # in a directory you choose
//! ```
//!
//! No API key and no network: the "model" is [`ScriptedEngine`], an offline stand-in that
//! answers arithmetic questions by calling a `calculator` tool. Everything else is the real
//! thing: a [`Harness`] over a [`FileSessionStore`], a real tool executor, and a session
//! that is saved, then resumed **in a fresh process** (this program runs itself again with
//! `resume <store-dir> <id>`), continued, and saved again.
//!
//! To use a real model, replace `ScriptedEngine` with a client for your provider: the
//! [`Engine`] trait is one async method from the conversation so far to the next assistant
//! message.

use std::error::Error;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use agent_session::{
    BlockPosition, BoxError, BoxFuture, Completion, CompletionRequest, ContentBlock, Cost, Engine,
    FileSessionStore, Harness, Message, Role, Session, SessionId, SessionOptions, ToolArguments,
    ToolCall, ToolCallStatus, ToolDefinition, ToolExecutor, ToolOutput, Usage,
};
use serde_json::{json, Value};

const MODEL: &str = "scripted-calculator-1";
const SYSTEM_PROMPT: &str = "You are a careful assistant. Use the calculator for arithmetic.";
const FIRST_QUESTION: &str = "What is (12 + 30) * 2.5?";
/// The follow-up only makes sense with the earlier context: "that" is the earlier result.
const FOLLOW_UP: &str = "And what is that / 4?";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // Errors returned from `main` are printed with `Debug`; `Report` makes that readable.
    run()
        .await
        .map_err(|err| Box::new(Report(err)) as Box<dyn Error>)
}

async fn run() -> Result<(), Box<dyn Error>> {
    // `args_os`, not `args`: a path that is not UTF-8 must not panic.
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match args.as_slice() {
        [] => first_process(None).await,
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            Ok(())
        }
        [dir] => first_process(Some(PathBuf::from(dir))).await,
        [command, dir, id] if command == "resume" => {
            let id = id
                .to_str()
                .ok_or("the session id given to `resume` is not valid UTF-8")?;
            second_process(Path::new(dir), id).await
        }
        _ => Err(format!("unexpected arguments\n{USAGE}").into()),
    }
}

/// An error shown as its message and its causes, one per line.
struct Report(Box<dyn Error>);

impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, "\n  caused by: {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for Report {}

const USAGE: &str = "usage: quickstart [STORE_DIR]
       quickstart resume STORE_DIR SESSION_ID";

/// The same harness in both processes: the store, an engine factory, and the tool executor.
/// The executor is code, so it is never saved: it is handed to the harness on every start.
fn open_harness(dir: &Path) -> agent_session::Result<Harness<impl Fn() -> ScriptedEngine>> {
    let store = FileSessionStore::open(dir)?;
    Ok(Harness::builder(store, || ScriptedEngine)
        .tools(Arc::new(Calculator))
        .build())
}

/// Creates a session, runs a turn with a tool call, saves it, and has a fresh process
/// resume it.
async fn first_process(dir: Option<PathBuf>) -> Result<(), Box<dyn Error>> {
    println!("agent-session quickstart");
    println!("========================");
    let temporary = dir.is_none();
    let dir = dir.unwrap_or_else(|| {
        // A new, unguessable name; the store creates it with mode 0700.
        std::env::temp_dir().join(format!(
            "agent-session-quickstart-{}",
            SessionId::generate()
        ))
    });
    println!("Store directory: {}", dir.display());
    if temporary {
        println!(
            "  (a fresh temporary directory; pass a directory as the first argument to choose one)"
        );
    }
    let harness = open_harness(&dir)?;

    heading("1. A new session");
    let options = SessionOptions::new(MODEL)
        .system_prompt(SYSTEM_PROMPT)
        .max_turns(4)
        .metadata_entry("title", json!("Quickstart: calculator"))
        .metadata_entry("user", json!("ada"));
    let mut session = harness.new_session(options)?;
    println!("Session id: {}", session.id());
    println!();
    converse(&mut session, FIRST_QUESTION).await?;
    let revision = harness.save_session(&mut session)?;
    let file = dir.join(format!("{}.json", session.id()));
    println!();
    println!("Saved revision {revision} to {}", file.display());

    heading("2. Resuming in a fresh process");
    println!(
        "Process {} runs this program again as `quickstart resume <store-dir> <id>`:",
        std::process::id()
    );
    let status = Command::new(std::env::current_exe()?)
        .arg("resume")
        .arg(&dir)
        .arg(session.id().as_str())
        .status()?;
    if !status.success() {
        return Err(format!("the resumed process failed ({status})").into());
    }

    heading("3. Back in the first process");
    // This process still holds revision 1. Saves are compare-and-swap, so saving it now is
    // refused instead of overwriting the turn the other process added.
    match harness.save_session(&mut session) {
        Err(err) if err.is_conflict() => {
            println!("Saving the stale copy held here is refused, so nothing is lost:");
            println!("  {err}");
        }
        Err(err) => return Err(err.into()),
        Ok(revision) => {
            return Err(format!("a stale save was accepted at revision {revision}").into())
        }
    }
    println!();
    println!("Sessions in the store, newest first:");
    let listing = harness.list_sessions()?;
    for summary in &listing.sessions {
        println!(
            "  {}  revision {}, {} messages, {}  \"{}\"",
            summary.id,
            summary.revision,
            summary.message_count,
            summary.cost,
            summary.title.as_deref().unwrap_or("untitled"),
        );
    }
    for problem in &listing.unreadable {
        println!("  unreadable: {problem}");
    }
    println!();
    println!(
        "The session is plain JSON (format: docs/FORMAT.md): {}",
        file.display()
    );
    if temporary {
        println!(
            "The store is kept so you can look at it; remove it with: rm -r {}",
            dir.display()
        );
    }
    Ok(())
}

/// Runs in the child process: resumes the session from disk alone, shows what came back,
/// and continues the conversation.
async fn second_process(dir: &Path, id: &str) -> Result<(), Box<dyn Error>> {
    let id = SessionId::parse(id)?;
    let harness = open_harness(dir)?;
    // `None`: model, system prompt, max_turns and metadata come back from the snapshot.
    let mut session = harness.resume_session(&id, None)?;

    println!();
    println!("  [process {}] Restored session {id}", std::process::id());
    let options = session.options();
    let totals = session.totals();
    let transcript = session.transcript();
    println!("    messages:      {}", transcript.len());
    // Each record says where its call and its result sit in the transcript.
    for record in session.tool_calls() {
        let call = block_at(transcript, record.call_at);
        let result = block_at(transcript, record.result_at);
        if let (Some(ContentBlock::ToolCall(call)), Some(ContentBlock::ToolResult(result))) =
            (call, result)
        {
            println!(
                "    tool call:     {}({}) -> {} ({})",
                call.name,
                arguments_text(&call.arguments),
                output_text(&result.output),
                match record.status {
                    ToolCallStatus::Ok => "ok",
                    ToolCallStatus::Error => "error",
                    ToolCallStatus::Interrupted => "interrupted",
                },
            );
        }
    }
    println!("    model:         {}", options.model);
    println!(
        "    system prompt: {}",
        options.system_prompt.as_deref().unwrap_or("(none)")
    );
    println!("    max turns:     {}", options.max_turns);
    println!(
        "    metadata:      {}",
        Value::Object(options.metadata.clone())
    );
    println!(
        "    cost so far:   {} for {} completions ({} input + {} output tokens)",
        totals.cost, totals.completions, totals.input_tokens, totals.output_tokens
    );
    println!();
    converse(&mut session, FOLLOW_UP).await?;
    let revision = harness.save_session(&mut session)?;
    println!();
    println!(
        "  [process {}] Saved revision {revision}; total cost now {}",
        std::process::id(),
        session.totals().cost
    );
    Ok(())
}

/// Sends one user message and prints the messages the turn added.
async fn converse<E: Engine>(
    session: &mut Session<E>,
    text: &str,
) -> Result<(), agent_session::Error> {
    let before = session.transcript().len();
    session.send(text).await?;
    for message in session.transcript().get(before..).unwrap_or_default() {
        print_message(message);
    }
    Ok(())
}

fn print_message(message: &Message) {
    for block in &message.content {
        let (who, what) = match (message.role, block) {
            (Role::User, ContentBlock::Text(t)) => ("you", t.text.clone()),
            (_, ContentBlock::Text(t)) => ("assistant", t.text.clone()),
            (_, ContentBlock::ToolCall(call)) => (
                "assistant",
                format!("(calls {}({}))", call.name, arguments_text(&call.arguments)),
            ),
            (_, ContentBlock::ToolResult(result)) => (
                if result.is_error {
                    "tool error"
                } else {
                    "tool"
                },
                output_text(&result.output),
            ),
            (_, _) => ("provider", "(a provider-specific block)".to_owned()),
        };
        println!("    {:<11}{what}", format!("{who}:"));
    }
}

fn arguments_text(arguments: &ToolArguments) -> String {
    match arguments {
        ToolArguments::Json(value) => value.to_string(),
        ToolArguments::Text(text) => text.clone(),
    }
}

fn output_text(output: &ToolOutput) -> String {
    match output {
        ToolOutput::Text(text) => text.clone(),
        ToolOutput::Blocks(blocks) => format!("({} content blocks)", blocks.len()),
    }
}

fn block_at(transcript: &[Message], at: BlockPosition) -> Option<&ContentBlock> {
    transcript.get(at.message)?.content.get(at.block)
}

fn heading(title: &str) {
    println!();
    println!("{title}");
    println!("{}", "-".repeat(title.chars().count()));
}

// ---------------------------------------------------------------------------------------
// The offline "model".
// ---------------------------------------------------------------------------------------

/// A deterministic stand-in for a model client.
///
/// - A user message with arithmetic in it gets a `calculator` tool call; the word "that"
///   stands for the latest calculator result in the transcript (so a resumed session can
///   only answer it if its context came back).
/// - A tool result gets an answer stating it.
/// - Anything else gets a canned reply.
///
/// It keeps no state of its own: like a real model, it sees only the request.
struct ScriptedEngine;

/// Prices of the pretend model, per million tokens.
const INPUT_PRICE: Cost = Cost::from_nano_usd(3_000_000_000); // $3.00
const OUTPUT_PRICE: Cost = Cost::from_nano_usd(15_000_000_000); // $15.00

impl Engine for ScriptedEngine {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        let reply = script(request.transcript);
        // Rough token counts, about four characters a token, as a real provider reports.
        let prompt_chars = request.system_prompt.map_or(0, str::len)
            + request.transcript.iter().map(message_chars).sum::<usize>();
        let input_tokens = 60 + tokens(prompt_chars); // plus the tool definitions
        let output_tokens = 5 + tokens(message_chars(&reply));
        let usage = Usage::new(request.model)
            .with_tokens(input_tokens, output_tokens)
            .with_cost(
                Cost::per_million_tokens(INPUT_PRICE, input_tokens)
                    + Cost::per_million_tokens(OUTPUT_PRICE, output_tokens),
            );
        Ok(Completion::new(reply, usage))
    }
}

fn tokens(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

fn message_chars(message: &Message) -> usize {
    message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.len(),
            ContentBlock::ToolCall(call) => call.name.len() + arguments_text(&call.arguments).len(),
            ContentBlock::ToolResult(result) => output_text(&result.output).len(),
            _ => 0,
        })
        .sum()
}

/// The script: the next assistant message for `transcript`.
fn script(transcript: &[Message]) -> Message {
    let say = |text: String| Message::assistant(vec![ContentBlock::text(text)]);
    let Some(last) = transcript.last() else {
        return say("Hello! Ask me an arithmetic question.".to_owned());
    };
    match last.role {
        Role::Tool => match last.tool_results().next() {
            Some(result) => {
                let expression = transcript
                    .iter()
                    .flat_map(Message::tool_calls)
                    .find(|call| call.id == result.call_id)
                    .and_then(|call| call.arguments.to_value().ok())
                    .and_then(|args| args.get("expression")?.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "that".to_owned());
                let output = output_text(&result.output);
                if result.is_error {
                    say(format!(
                        "The calculator could not evaluate {expression}: {output}."
                    ))
                } else {
                    say(format!("{expression} = {output}"))
                }
            }
            None => say("The tool returned nothing.".to_owned()),
        },
        Role::User => {
            let mut text = last.text();
            if contains_word(&text, "that") {
                match latest_result(transcript) {
                    Some(previous) => text = replace_word(&text, "that", &previous),
                    None => {
                        return say("I have no earlier result for \"that\" to refer to.".to_owned())
                    }
                }
            }
            match find_expression(&text) {
                Some(expression) => {
                    let calls_so_far = transcript.iter().flat_map(Message::tool_calls).count();
                    let call = ToolCall::new(
                        format!("call_{}", calls_so_far + 1),
                        "calculator",
                        json!({ "expression": expression }),
                    );
                    Message::assistant(vec![ContentBlock::tool_call(call)])
                }
                None => say(
                    "I am an offline scripted model: ask me something like \"What is 6 * 7?\""
                        .to_owned(),
                ),
            }
        }
        Role::System | Role::Assistant => say("Go on.".to_owned()),
    }
}

/// The latest successful calculator result in the transcript.
fn latest_result(transcript: &[Message]) -> Option<String> {
    transcript
        .iter()
        .rev()
        .flat_map(|m| m.tool_results().collect::<Vec<_>>().into_iter().rev())
        .find(|r| !r.is_error)
        .and_then(|r| r.output.as_text().map(str::to_owned))
}

/// The longest run of arithmetic characters that has a digit and an operator in it.
fn find_expression(text: &str) -> Option<String> {
    let is_arithmetic = |c: char| c.is_ascii_digit() || " .+-*/()".contains(c);
    text.split(|c: char| !is_arithmetic(c))
        .map(str::trim)
        .filter(|run| run.chars().any(|c| c.is_ascii_digit()))
        .filter(|run| run.chars().any(|c| "+-*/".contains(c)))
        .max_by_key(|run| run.len())
        .map(str::to_owned)
}

fn contains_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !c.is_alphanumeric())
        .any(|w| w.eq_ignore_ascii_case(word))
}

/// Replaces whole-word occurrences of `word` (ignoring ASCII case).
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let mut out = String::new();
    let mut current = String::new();
    for c in text.chars() {
        if c.is_alphanumeric() {
            current.push(c);
        } else {
            out.push_str(if current.eq_ignore_ascii_case(word) {
                with
            } else {
                &current
            });
            current.clear();
            out.push(c);
        }
    }
    out.push_str(if current.eq_ignore_ascii_case(word) {
        with
    } else {
        &current
    });
    out
}

// ---------------------------------------------------------------------------------------
// The tool.
// ---------------------------------------------------------------------------------------

/// A `calculator` tool: `+ - * /`, unary minus and parentheses on decimal numbers.
struct Calculator;

impl ToolExecutor for Calculator {
    fn definitions(&self) -> Vec<ToolDefinition> {
        vec![ToolDefinition::new(
            "calculator",
            "Evaluates an arithmetic expression with + - * / and parentheses",
            json!({
                "type": "object",
                "properties": { "expression": { "type": "string" } },
                "required": ["expression"]
            }),
        )]
    }

    fn execute<'a>(&'a self, call: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        Box::pin(async move {
            if call.name != "calculator" {
                return Err(format!("unknown tool {:?}", call.name).into());
            }
            // An `Err` becomes an error result the model sees; the turn goes on.
            let arguments = call.arguments.to_value()?;
            let expression = arguments
                .get("expression")
                .and_then(Value::as_str)
                .ok_or("the arguments need an \"expression\" string")?;
            let value = calc::evaluate(expression)?;
            Ok(ToolOutput::from(calc::format(value)))
        })
    }
}

/// A small recursive-descent evaluator. Every failure is an `Err`, never a panic.
mod calc {
    /// Parentheses nested deeper than this are refused, so input cannot exhaust the stack.
    const MAX_DEPTH: usize = 64;

    /// Evaluates `input`.
    ///
    /// ```text
    /// expr   = term   { ("+" | "-") term }
    /// term   = factor { ("*" | "/") factor }
    /// factor = { "+" | "-" } ( number | "(" expr ")" )
    /// ```
    pub fn evaluate(input: &str) -> Result<f64, String> {
        let mut parser = Parser {
            chars: input.chars().collect(),
            pos: 0,
            depth: 0,
        };
        let value = parser.expr()?;
        parser.skip_spaces();
        match parser.peek() {
            None => Ok(value),
            Some(c) => Err(parser.unexpected(c)),
        }
    }

    /// Formats a result: integers without a decimal point, other values in the shortest
    /// form that reads back exactly.
    pub fn format(value: f64) -> String {
        if value.fract() == 0.0 && value.abs() < 1e15 {
            // `+ 0.0` turns -0 into 0.
            format!("{:.0}", value + 0.0)
        } else if value.abs() >= 1e15 {
            format!("{value:e}")
        } else {
            format!("{value}")
        }
    }

    struct Parser {
        chars: Vec<char>,
        pos: usize,
        depth: usize,
    }

    impl Parser {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.pos).copied()
        }

        fn skip_spaces(&mut self) {
            while self.peek().is_some_and(char::is_whitespace) {
                self.pos += 1;
            }
        }

        fn unexpected(&self, c: char) -> String {
            format!("unexpected {c:?} at position {}", self.pos + 1)
        }

        fn expr(&mut self) -> Result<f64, String> {
            let mut value = self.term()?;
            loop {
                self.skip_spaces();
                match self.peek() {
                    Some('+') => {
                        self.pos += 1;
                        value = finite(value + self.term()?)?;
                    }
                    Some('-') => {
                        self.pos += 1;
                        value = finite(value - self.term()?)?;
                    }
                    _ => return Ok(value),
                }
            }
        }

        fn term(&mut self) -> Result<f64, String> {
            let mut value = self.factor()?;
            loop {
                self.skip_spaces();
                match self.peek() {
                    Some('*') => {
                        self.pos += 1;
                        value = finite(value * self.factor()?)?;
                    }
                    Some('/') => {
                        self.pos += 1;
                        let divisor = self.factor()?;
                        if divisor == 0.0 {
                            return Err("division by zero".to_owned());
                        }
                        value = finite(value / divisor)?;
                    }
                    _ => return Ok(value),
                }
            }
        }

        fn factor(&mut self) -> Result<f64, String> {
            // Signs are counted in a loop rather than by recursion.
            let mut negative = false;
            loop {
                self.skip_spaces();
                match self.peek() {
                    Some('-') => negative = !negative,
                    Some('+') => {}
                    _ => break,
                }
                self.pos += 1;
            }
            let value = match self.peek() {
                Some('(') => {
                    if self.depth == MAX_DEPTH {
                        return Err(format!("parentheses nested deeper than {MAX_DEPTH}"));
                    }
                    self.pos += 1;
                    self.depth += 1;
                    let value = self.expr()?;
                    self.depth -= 1;
                    self.skip_spaces();
                    match self.peek() {
                        Some(')') => self.pos += 1,
                        Some(c) => return Err(self.unexpected(c)),
                        None => return Err("missing ')' at the end".to_owned()),
                    }
                    value
                }
                Some(c) if c.is_ascii_digit() || c == '.' => self.number()?,
                Some(c) => return Err(self.unexpected(c)),
                None => return Err("the expression ends too early".to_owned()),
            };
            Ok(if negative { -value } else { value })
        }

        fn number(&mut self) -> Result<f64, String> {
            let start = self.pos;
            while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
                self.pos += 1;
            }
            let text: String = self.chars[start..self.pos].iter().collect();
            let value: f64 = text
                .parse()
                .map_err(|_| format!("{text:?} at position {} is not a number", start + 1))?;
            finite(value)
        }
    }

    fn finite(value: f64) -> Result<f64, String> {
        if value.is_finite() {
            Ok(value)
        } else {
            Err("the result is too large".to_owned())
        }
    }

    #[cfg(test)]
    mod tests {
        use super::{evaluate, format};

        #[test]
        fn evaluates_with_precedence_and_parentheses() {
            assert_eq!(evaluate("(12 + 30) * 2.5"), Ok(105.0));
            assert_eq!(evaluate("1 + 2 * 3 - 4 / 2"), Ok(5.0));
            assert_eq!(evaluate("-(2 + 3) * --2"), Ok(-10.0));
            assert_eq!(evaluate(".5 + 1."), Ok(1.5));
            assert_eq!(format(105.0 / 4.0), "26.25");
            assert_eq!(format(-0.0), "0");
        }

        #[test]
        fn bad_input_is_an_error_not_a_panic() {
            for bad in [
                "", "1 +", "(1", "1)", "1 / 0", "1..2", "abc", "2 ^ 3", "1e999", "é",
            ] {
                assert!(evaluate(bad).is_err(), "{bad:?}");
            }
            assert!(evaluate(&"(".repeat(100_000)).is_err());
            assert!(evaluate(&"-".repeat(100_000)).is_err());
            assert!(evaluate(&"9".repeat(400)).is_err());
        }
    }
}
