//! The compactors of `sessions compact` (the library calls no model itself: the
//! application hands it a [`Compactor`]): with the OpenAI-compatible engine configured, a
//! model writes the summary ([`ModelCompactor`]); offline, a deterministic local summary
//! is made from the first line of each prompt and answer ([`LocalCompactor`]).

use std::fmt::Write as _;

use agent_session::{
    BoxError, BoxFuture, Compaction, CompactionRequest, Compactor, CompletionRequest, ContentBlock,
    Message, Role, ToolArguments, ToolOutput,
};

use crate::http::HttpEngine;

/// How many characters of a line the local summary keeps.
const LOCAL_LINE_WIDTH: usize = 100;

/// The instructions of the model that writes a summary.
const SUMMARY_PROMPT: &str = "You compact the beginning of a conversation between a user \
    and an AI assistant that uses tools. Write a summary that will replace it: the assistant \
    continues the conversation from your summary alone. Keep every fact, result, decision, \
    file name, number and open question it needs; drop pleasantries. Write brief notes, \
    in the conversation's language. Reply with the summary only.";

/// Which compactor wrote a summary, for the command's output.
pub enum Writer {
    /// [`LocalCompactor`].
    Local,
    /// [`ModelCompactor`], with the model asked.
    Model(String),
}

/// The summary without a model: a line for each prompt and each answer of the replaced
/// messages (their first line, cut), so the run is offline and deterministic.
pub struct LocalCompactor;

impl Compactor for LocalCompactor {
    fn compact<'a>(
        &'a self,
        request: CompactionRequest<'a>,
    ) -> BoxFuture<'a, Result<Compaction, BoxError>> {
        Box::pin(async move {
            let replaced = request
                .transcript
                .get(..request.replace)
                .unwrap_or(request.transcript);
            Ok(Compaction::new(
                replaced.len(),
                vec![Message::user(local_summary(replaced))],
            ))
        })
    }
}

/// `Summary of the 8 earlier messages (...):` and a `- user: ...` or `- assistant: ...`
/// line for each message with text from the user or the assistant.
pub fn local_summary(replaced: &[Message]) -> String {
    let mut out = format!(
        "Summary of the {} earlier messages (made offline, without a model: the first line of each prompt and answer):",
        replaced.len()
    );
    let mut lines = 0usize;
    for message in replaced {
        let who = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            _ => continue,
        };
        let text = message.text();
        let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
            continue;
        };
        let _ = write!(out, "\n- {who}: {}", cut(first, LOCAL_LINE_WIDTH));
        lines += 1;
    }
    if lines == 0 {
        out.push_str("\n- (no prompt or answer with text: only tool calls and their results)");
    }
    out
}

/// `text`'s first `width` characters, with `…` if there were more.
pub fn cut(text: &str, width: usize) -> String {
    let mut shown: String = text.chars().take(width).collect();
    if text.chars().count() > width {
        shown.push('…');
    }
    shown
}

/// The summary written by a model through the OpenAI-compatible engine: the replaced
/// messages are sent as one text (so no provider has to accept tool calls without their
/// tools), with instructions to summarise them; the call's usage is recorded.
pub struct ModelCompactor {
    engine: HttpEngine,
}

impl ModelCompactor {
    /// A compactor asking through `engine`.
    pub fn new(engine: HttpEngine) -> Self {
        ModelCompactor { engine }
    }
}

impl Compactor for ModelCompactor {
    fn compact<'a>(
        &'a self,
        request: CompactionRequest<'a>,
    ) -> BoxFuture<'a, Result<Compaction, BoxError>> {
        Box::pin(async move {
            let replaced = request
                .transcript
                .get(..request.replace)
                .unwrap_or(request.transcript);
            let model = crate::model_for(Some(&self.engine), Some(request.model));
            let ask = Message::from_openai_chat(&serde_json::json!({
                "role": "user",
                "content": format!(
                    "Summarise this conversation:\n\n{}",
                    conversation_text(replaced)
                ),
            }))?;
            let completion = self
                .engine
                .ask(
                    CompletionRequest::new(request.session_id, &model, std::slice::from_ref(&ask))
                        .with_system_prompt(SUMMARY_PROMPT),
                )
                .await?;
            let text = completion.message.text();
            let text = text.trim();
            if text.is_empty() {
                return Err(format!("the model {model} answered with no summary text").into());
            }
            let summary = Message::from_openai_chat(&serde_json::json!({
                "role": "user",
                "content": format!(
                    "Summary of the {} earlier messages (written by {model}):\n{text}",
                    replaced.len()
                ),
            }))?;
            Ok(Compaction::new(replaced.len(), vec![summary]).with_usage(completion.usage))
        })
    }
}

/// The model the [`ModelCompactor`] of `engine` asks for a session saved with `model`.
pub fn writer(engine: Option<&HttpEngine>, model: &str) -> Writer {
    match engine {
        None => Writer::Local,
        Some(engine) => Writer::Model(crate::model_for(Some(engine), Some(model))),
    }
}

/// The messages as plain text, `user: ...` and so on, tool calls and results inline.
fn conversation_text(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        let who = match message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let mut parts = Vec::new();
        for block in &message.content {
            parts.push(match block {
                ContentBlock::Text(text) => text.text.clone(),
                ContentBlock::ToolCall(call) => {
                    let arguments = match &call.arguments {
                        ToolArguments::Text(text) => text.clone(),
                        ToolArguments::Json(value) => value.to_string(),
                    };
                    format!("[calls the tool {} with {arguments}]", call.name)
                }
                ContentBlock::ToolResult(result) => {
                    let output = match &result.output {
                        ToolOutput::Text(text) => text.clone(),
                        ToolOutput::Blocks(blocks) => format!("({} content blocks)", blocks.len()),
                    };
                    let failed = if result.is_error { " (an error)" } else { "" };
                    format!("[tool result{failed}: {output}]")
                }
                _ => "[a provider-specific block]".to_owned(),
            });
        }
        let _ = write!(out, "{who}: {}\n\n", parts.join("\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_session::{ToolCall, ToolResult};

    #[test]
    fn the_local_summary_keeps_the_first_line_of_each_prompt_and_answer() {
        let long = "y".repeat(LOCAL_LINE_WIDTH + 3);
        let messages = [
            Message::user("calc 1+1\nand more"),
            Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                "c",
                "calculator",
                serde_json::json!({"expression": "1+1"}),
            ))]),
            Message::tool_result(ToolResult::new("c", "2")),
            Message::assistant(vec![ContentBlock::text(format!("\n{long}"))]),
        ];
        assert_eq!(
            local_summary(&messages),
            format!(
                "Summary of the 4 earlier messages (made offline, without a model: the first line of each prompt and answer):\n- user: calc 1+1\n- assistant: {}…",
                "y".repeat(LOCAL_LINE_WIDTH)
            )
        );
        assert!(local_summary(&messages[1..3]).ends_with("only tool calls and their results)"));
    }

    #[test]
    fn the_model_is_sent_the_conversation_as_text() {
        let messages = [
            Message::user("calc 1+1"),
            Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                "c",
                "calculator",
                serde_json::json!({"expression": "1+1"}),
            ))]),
            Message::tool_result(ToolResult::error("c", "boom")),
        ];
        assert_eq!(
            conversation_text(&messages),
            "user: calc 1+1\n\nassistant: [calls the tool calculator with {\"expression\":\"1+1\"}]\n\ntool: [tool result (an error): boom]\n\n"
        );
    }
}
