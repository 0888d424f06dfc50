//! The offline engine: deterministic replies, real tool calls, made-up but stable usage.
//!
//! It understands a few kinds of prompt (case does not matter):
//!
//! | prompt | what it does |
//! |---|---|
//! | `calc 2*(3+4)`, `what is 6*7?`, or a bare expression | calls `calculator` |
//! | `read notes.txt` | calls `read_file` (confined to the workspace) |
//! | `wait 5` | calls `wait` (a slow tool, to try Ctrl-C on) |
//! | `what did I ask before?` | lists the earlier prompts of the session, from its transcript |
//! | anything else | says what it heard and how long the session is |

use std::fmt::Write as _;

use agent_session::{
    BoxError, Completion, CompletionRequest, ContentBlock, Cost, Engine, Message, Role, ToolCall,
    ToolOutput, Usage,
};
use serde_json::{json, Value};

/// The model name the scripted engine reports.
pub const MODEL: &str = "scripted";

/// Made-up prices, so the cost column has something to add up: $0.50 and $1.50 per million
/// input and output tokens.
const INPUT_PRICE_NANO_USD: u64 = 500_000_000;
const OUTPUT_PRICE_NANO_USD: u64 = 1_500_000_000;

/// A stand-in for a model: the reply depends only on the transcript.
pub struct ScriptedEngine;

impl Engine for ScriptedEngine {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        let message = respond(&request);
        let input: usize = request.system_prompt.map_or(0, str::len)
            + request.transcript.iter().map(message_chars).sum::<usize>();
        let input = approx_tokens(input);
        let output = approx_tokens(message_chars(&message));
        let cost = Cost::per_million_tokens(Cost::from_nano_usd(INPUT_PRICE_NANO_USD), input)
            + Cost::per_million_tokens(Cost::from_nano_usd(OUTPUT_PRICE_NANO_USD), output);
        let usage = Usage::new(request.model)
            .with_tokens(input, output)
            .with_cost(cost);
        Ok(Completion::new(message, usage))
    }
}

fn respond(request: &CompletionRequest<'_>) -> Message {
    match request.transcript.last() {
        Some(last) if last.role == Role::Tool => after_tool(request.transcript, last),
        Some(last) if last.role == Role::User => answer(request, &last.text()),
        _ => say("Hello! Ask me something."),
    }
}

fn say(text: impl Into<String>) -> Message {
    Message::assistant(vec![ContentBlock::text(text)])
}

/// Answers a user prompt, possibly with a tool call.
fn answer(request: &CompletionRequest<'_>, prompt: &str) -> Message {
    let prompt = prompt.trim();
    let bare = prompt.trim_end_matches(['?', '.', '!']).trim();
    let lower = bare.to_lowercase();

    if let Some(path) = strip_word(prompt, &["read", "cat", "open"]) {
        return call_tool(request, "read_file", json!({ "path": path }));
    }
    if let Some(rest) = strip_word(bare, &["wait", "sleep"]) {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return match digits.parse::<u64>() {
            Ok(seconds) => call_tool(request, "wait", json!({ "seconds": seconds })),
            Err(_) => say("How long? Try `wait 5`."),
        };
    }
    let expression = strip_word(bare, &["calc", "calculate", "compute", "what is", "what's"])
        .filter(|e| looks_arithmetic(e))
        .or_else(|| looks_arithmetic(bare).then_some(bare));
    if let Some(expression) = expression {
        return call_tool(request, "calculator", json!({ "expression": expression }));
    }
    if lower.contains("before") || lower.contains("earlier") || lower.contains("history") {
        return say(recall(request.transcript));
    }
    if lower == "help" {
        return say(HELP);
    }
    let turn = request
        .transcript
        .iter()
        .filter(|m| m.role == Role::User)
        .count();
    say(format!(
        "You said {prompt:?} (prompt {turn} of this session). {HELP}"
    ))
}

const HELP: &str = "Offline engine: try `calc 2*(3+4)`, `read FILE`, `wait 5` or \
                    `what did I ask before?`.";

/// The earlier user prompts of the session: proof that a resumed session remembers.
fn recall(transcript: &[Message]) -> String {
    let prompts: Vec<String> = transcript
        .iter()
        .filter(|m| m.role == Role::User)
        .map(Message::text)
        .collect();
    let earlier = &prompts[..prompts.len().saturating_sub(1)];
    if earlier.is_empty() {
        return "You have not asked anything before this in this session.".to_owned();
    }
    let mut text = String::from("Before this, you asked:");
    for (n, prompt) in earlier.iter().enumerate() {
        let _ = write!(text, "\n{}. {prompt}", n + 1);
    }
    text
}

/// A message calling `name`, or an apology if the session offers no such tool.
fn call_tool(request: &CompletionRequest<'_>, name: &str, arguments: Value) -> Message {
    if !request.tools.iter().any(|t| t.name == name) {
        return say(format!(
            "I would use the {name} tool, but this session has no such tool."
        ));
    }
    // Ids must be unique within the session: take the first unused `scripted_N`. Of these
    // len + 1 candidates at most len are taken.
    let used: Vec<&str> = request
        .transcript
        .iter()
        .flat_map(Message::tool_calls)
        .map(|c| c.id.as_str())
        .collect();
    let id = (used.len() + 1..=2 * used.len() + 1)
        .map(|n| format!("scripted_{n}"))
        .find(|id| !used.contains(&id.as_str()))
        .unwrap_or_else(|| "scripted_0".to_owned());
    Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
        id, name, arguments,
    ))])
}

/// Answers with the result of the tool call that the last message answers.
fn after_tool(transcript: &[Message], last: &Message) -> Message {
    let Some(result) = last.tool_results().next() else {
        return say("I expected a tool result here.");
    };
    let call = transcript
        .iter()
        .rev()
        .flat_map(Message::tool_calls)
        .find(|c| c.id == result.call_id);
    let output = match &result.output {
        ToolOutput::Text(text) => text.trim_end().to_owned(),
        ToolOutput::Blocks(blocks) => format!("{} content blocks", blocks.len()),
    };
    let Some(call) = call else {
        return say(format!("A tool answered: {output}"));
    };
    if result.is_error {
        return say(format!("The {} tool failed: {output}", call.name));
    }
    let argument = |key: &str| {
        call.arguments
            .to_value()
            .ok()
            .and_then(|v| v.get(key).and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default()
    };
    say(match call.name.as_str() {
        "calculator" => format!("{} = {output}", argument("expression")),
        "read_file" => format!("{}:\n{output}", argument("path")),
        "wait" => format!("Done: {output}."),
        other => format!("The {other} tool says: {output}"),
    })
}

/// `text` without its first word if that word (or phrase) is one of `words`, any case.
fn strip_word<'t>(text: &'t str, words: &[&str]) -> Option<&'t str> {
    words.iter().find_map(|word| {
        let head = text.get(..word.len())?;
        let rest = &text[word.len()..];
        (head.eq_ignore_ascii_case(word) && rest.starts_with(char::is_whitespace))
            .then(|| rest.trim())
            .filter(|rest| !rest.is_empty())
    })
}

/// True for text made only of numbers, operators and parentheses, with a digit and an
/// operator.
fn looks_arithmetic(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_ascii_digit() || " .+-*/()".contains(c))
        && text.chars().any(|c| c.is_ascii_digit())
        && text.chars().any(|c| "+-*/".contains(c))
}

/// Characters in a message, for the made-up token counts.
fn message_chars(message: &Message) -> usize {
    message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.len(),
            ContentBlock::ToolCall(c) => {
                c.name.len() + c.arguments.to_value().map_or(0, |v| v.to_string().len())
            }
            ContentBlock::ToolResult(r) => r.output.as_text().map_or(0, str::len),
            _ => 0,
        })
        .sum()
}

/// About four characters per token.
fn approx_tokens(chars: usize) -> u64 {
    u64::try_from(chars.div_ceil(4).max(1)).unwrap_or(u64::MAX)
}
