//! Snapshots the contract's cases save: a small one, and one with every kind of content
//! the format has.

use crate::{
    ContentBlock, Cost, Message, SessionId, SessionSnapshot, SnapshotBuilder, TextBlock, ToolCall,
    ToolCallStatus, ToolResult, Usage, INTERRUPTED_OUTPUT,
};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;

pub(super) fn id(s: &str) -> SessionId {
    SessionId::parse(s).expect("valid test id")
}

/// A fixed instant plus `secs` seconds (with a sub-second part, to catch truncation).
pub(super) fn at(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 4, 5, 6, 7)
        .single()
        .expect("valid date")
        + chrono::Duration::seconds(secs)
        + chrono::Duration::nanoseconds(123_456_789)
}

/// A small snapshot whose content depends on `variant`.
pub(super) fn simple_snapshot(name: &str, variant: u32) -> SessionSnapshot {
    SessionSnapshot::builder(id(name), "test-model")
        .metadata_entry("variant", json!(variant))
        .transcript(vec![
            Message::user(format!("hello {variant}")),
            Message::assistant(vec![ContentBlock::text("hi")]),
        ])
        .timestamps(at(0), at(i64::from(variant)))
        .build()
        .expect("build")
}

/// A snapshot of session `name` with every kind of content the format has: text with
/// provider fields, tool calls with JSON and raw-text arguments (answered, failed and
/// interrupted), an unknown provider block, messages converted from the OpenAI and
/// Anthropic formats, usage with costs and cache tokens, and metadata with floats, the
/// largest 64-bit integer and nesting. A store must load it back equal, byte for byte in
/// its JSON form.
///
/// # Panics
///
/// If `name` is not a valid [`SessionId`].
///
/// # Examples
///
/// ```
/// use agent_session::{testing, MemorySessionStore, SessionStore};
///
/// let store = MemorySessionStore::new();
/// let snapshot = testing::rich_snapshot("every-kind");
/// let revision = store.save(&snapshot)?;
/// assert_eq!(store.load(snapshot.id())?, snapshot.with_revision(revision));
/// # Ok::<(), agent_session::Error>(())
/// ```
#[must_use]
pub fn rich_snapshot(name: &str) -> SessionSnapshot {
    let mut cited = TextBlock::new("See the docs.");
    cited
        .extra
        .insert("citations".into(), json!([{"url": "https://example.com"}]));
    let openai = Message::from_openai_chat(&json!({
        "role": "assistant",
        "content": null,
        "refusal": null,
        "tool_calls": [{
            "id": "call_oa",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":  \"Paris\"}"}
        }]
    }))
    .expect("openai message");
    let openai_result = Message::from_openai_chat(&json!({
        "role": "tool", "tool_call_id": "call_oa", "content": "{\"temp\": 18.5}"
    }))
    .expect("openai tool message");
    let anthropic = Message::from_anthropic(&json!({
        "role": "assistant",
        "id": "msg_1",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "EqQBCgIYAh"},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"n": 1.0}}
        ]
    }))
    .expect("anthropic message");
    let anthropic_result = Message::from_anthropic(&json!({
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": false}]
    }))
    .expect("anthropic tool result");

    SessionSnapshot::builder(id(name), "gpt-test")
        .system_prompt("Be exact.")
        .max_turns(7)
        .timestamps(at(-3600), at(0))
        .metadata_entry("project", json!("parser"))
        .metadata_entry("ratio", json!(0.1))
        .metadata_entry("precise", json!(228.03))
        .metadata_entry("one", json!(1.0))
        .metadata_entry("big", json!(u64::MAX))
        .metadata_entry("nested", json!({"list": [1, -2, 3.5e-7, null, true, "x"]}))
        .transcript(vec![
            Message::system("You are a test."),
            Message::user("Line one\nline\ttwo \u{0} nul \u{202e} bidi 🦀 \"quoted\" \\"),
            Message::assistant(vec![
                ContentBlock::Text(cited),
                ContentBlock::tool_call(ToolCall::new("c1", "calc", json!({"expr": "2+2"}))),
                ContentBlock::tool_call(ToolCall::with_raw_arguments(
                    "c2",
                    "shell",
                    "{\"cmd\":   \"ls\" }",
                )),
                ContentBlock::tool_call(ToolCall::new("c3", "slow", json!(null))),
                ContentBlock::Other {
                    value: json!({"type": "image", "source": {"data": "AAAA"}}),
                },
            ]),
            Message::tool_result(ToolResult::new("c1", "4")),
            Message::tool_result(ToolResult::error("c2", "permission denied")),
            Message::tool_result(ToolResult::error("c3", INTERRUPTED_OUTPUT)),
            openai,
            openai_result,
            anthropic,
            anthropic_result,
        ])
        .interrupted("c3")
        .usage(vec![
            Usage::new("gpt-test")
                .with_tokens(1_200, 300)
                .with_cache_tokens(800, 16)
                .with_cost(Cost::parse_usd("0.00042").expect("cost")),
            Usage::new("gpt-test-mini")
                .with_tokens(5, 1)
                .with_cost(Cost::from_nano_usd(1)),
        ])
        .build()
        .expect("rich snapshot builds")
}

/// A builder holding everything `snapshot` holds (its revision aside).
pub(super) fn rebuild(snapshot: &SessionSnapshot) -> SnapshotBuilder {
    let options = snapshot.options();
    let mut builder = SessionSnapshot::builder(snapshot.id().clone(), options.model.clone())
        .max_turns(options.max_turns)
        .metadata(snapshot.metadata().clone())
        .transcript(snapshot.transcript().to_vec())
        .usage(snapshot.usage().to_vec())
        .timestamps(snapshot.created_at(), snapshot.updated_at());
    if let Some(prompt) = &options.system_prompt {
        builder = builder.system_prompt(prompt.clone());
    }
    if let Some(lineage) = snapshot.lineage() {
        builder = builder.lineage(lineage.clone());
    }
    for record in snapshot.tool_calls() {
        if record.status == ToolCallStatus::Interrupted {
            builder = builder.interrupted(record.call_id.clone());
        }
    }
    builder
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{id, rich_snapshot};
    use crate::{ContentBlock, Cost, Message, SessionSnapshot, ToolCall, ToolCallStatus};

    #[test]
    fn rich_snapshot_helper_exercises_every_block_kind() {
        // Guards the round-trip case against a helper that quietly stops covering things.
        let snapshot = rich_snapshot("coverage");
        let blocks: Vec<&ContentBlock> = snapshot
            .transcript()
            .iter()
            .flat_map(|m| &m.content)
            .collect();
        assert!(blocks.iter().any(|b| matches!(b, ContentBlock::Text(_))));
        assert!(blocks
            .iter()
            .any(|b| matches!(b, ContentBlock::Other { .. })));
        assert!(blocks
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolCall(_))));
        assert!(blocks
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_))));
        let statuses: Vec<_> = snapshot.tool_calls().iter().map(|r| r.status).collect();
        assert!(statuses.contains(&ToolCallStatus::Ok));
        assert!(statuses.contains(&ToolCallStatus::Error));
        assert!(statuses.contains(&ToolCallStatus::Interrupted));
        assert!(snapshot.totals().cost > Cost::ZERO);
        // And a call whose result is missing is refused by the builder, so the helper cannot
        // produce a snapshot the stores would have to reject.
        assert!(SessionSnapshot::builder(id("x"), "m")
            .transcript(vec![Message::assistant(vec![ContentBlock::tool_call(
                ToolCall::new("c", "f", json!({}))
            )])])
            .build()
            .is_err());
    }
}
