//! A message imported from one provider and exported to the other is either valid input
//! for that provider or refused with a typed `Error::Conversion`: never silently invalid.
//!
//! The recorded transcripts in `../shared/fidelity/` (see `tests/fidelity.rs`; skipped with
//! a printed reason when the directory is absent) are imported with their own codec, put
//! through the crate's stored form, and exported to the other provider. Every result must
//! be a conversion error of the target provider or pass the structural check below for
//! that provider's request message schema. Hand-written cases cover each reported problem.

#[path = "common/fidelity.rs"]
mod fidelity_support;

use std::collections::BTreeMap;

use agent_session::{Error, Message, Role};
use fidelity_support::{export, import, other, recordings};
use serde_json::{json, Map, Value};

// ---------------------------------------------------------------------------------------
// Structural checks of request messages

/// Anthropic block types a request message may hold (the `ContentBlockParam` union),
/// besides the ones checked field by field below.
const ANTHROPIC_OTHER_BLOCKS: &[&str] = &[
    "document",
    "search_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "container_upload",
    "mid_conv_system",
];

const ANTHROPIC_MEDIA_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{what} is not an object: {value}"))
}

fn only_keys(object: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), String> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!(
            "{what} has a field `{key}` the schema does not allow"
        )),
        None => Ok(()),
    }
}

fn string<'a>(object: &'a Map<String, Value>, key: &str, what: &str) -> Result<&'a str, String> {
    object
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{what} needs a string `{key}`"))
}

/// Checks an Anthropic Messages request message.
fn check_anthropic(message: &Value) -> Result<(), String> {
    let message = object(message, "the message")?;
    let role = string(message, "role", "the message")?;
    let allowed_keys: &[&str] = if role == "system" {
        &["role", "content", "cache_control"]
    } else {
        &["role", "content"]
    };
    only_keys(message, allowed_keys, "the message")?;
    if !matches!(role, "user" | "assistant" | "system") {
        return Err(format!("role {role:?}"));
    }
    match message.get("content") {
        Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => {
            for (i, block) in blocks.iter().enumerate() {
                check_anthropic_block(block, role, false)
                    .map_err(|e| format!("content block {i}: {e}"))?;
            }
            Ok(())
        }
        other => Err(format!(
            "content must be a string or a list, found {other:?}"
        )),
    }
}

fn check_anthropic_block(block: &Value, role: &str, in_result: bool) -> Result<(), String> {
    let block = object(block, "a block")?;
    let kind = string(block, "type", "a block")?;
    if role == "system" && kind != "text" {
        return Err(format!(
            "a system message holds text blocks only, found {kind}"
        ));
    }
    if in_result && !matches!(kind, "text" | "image" | "document" | "search_result") {
        return Err(format!("a tool_result may not hold a {kind} block"));
    }
    match kind {
        "text" => {
            only_keys(
                block,
                &["type", "text", "citations", "cache_control"],
                "text",
            )?;
            string(block, "text", "text").map(drop)
        }
        "image" => {
            if role == "assistant" {
                return Err("an image in an assistant message".to_owned());
            }
            only_keys(block, &["type", "source", "cache_control"], "image")?;
            let source = object(block.get("source").unwrap_or(&Value::Null), "image source")?;
            match string(source, "type", "image source")? {
                "base64" => {
                    only_keys(source, &["type", "media_type", "data"], "base64 source")?;
                    let media = string(source, "media_type", "base64 source")?;
                    if !ANTHROPIC_MEDIA_TYPES.contains(&media) {
                        return Err(format!("media type {media:?}"));
                    }
                    string(source, "data", "base64 source").map(drop)
                }
                "url" => {
                    only_keys(source, &["type", "url"], "url source")?;
                    let url = string(source, "url", "url source")?;
                    if url.starts_with("https://") || url.starts_with("http://") {
                        Ok(())
                    } else {
                        Err(format!("image url {url:?}"))
                    }
                }
                other => Err(format!("image source type {other:?}")),
            }
        }
        "tool_use" => {
            if role != "assistant" {
                return Err("tool_use outside an assistant message".to_owned());
            }
            only_keys(
                block,
                &["type", "id", "name", "input", "cache_control", "caller"],
                "tool_use",
            )?;
            string(block, "id", "tool_use")?;
            string(block, "name", "tool_use")?;
            match block.get("input") {
                Some(Value::Object(_)) => Ok(()),
                other => Err(format!("tool_use input must be an object, found {other:?}")),
            }
        }
        "tool_result" => {
            if role != "user" {
                return Err("tool_result outside a user message".to_owned());
            }
            only_keys(
                block,
                &[
                    "type",
                    "tool_use_id",
                    "content",
                    "is_error",
                    "cache_control",
                ],
                "tool_result",
            )?;
            string(block, "tool_use_id", "tool_result")?;
            if block.get("is_error").is_some_and(|e| !e.is_boolean()) {
                return Err("is_error is not a boolean".to_owned());
            }
            match block.get("content") {
                None | Some(Value::String(_)) => Ok(()),
                Some(Value::Array(inner)) => {
                    for (j, b) in inner.iter().enumerate() {
                        check_anthropic_block(b, role, true)
                            .map_err(|e| format!("tool_result content block {j}: {e}"))?;
                    }
                    Ok(())
                }
                Some(other) => Err(format!("tool_result content {other}")),
            }
        }
        other if ANTHROPIC_OTHER_BLOCKS.contains(&other) => Ok(()),
        other => Err(format!("block type {other:?} is not an Anthropic block")),
    }
}

/// Checks an OpenAI Chat Completions request message.
fn check_openai(message: &Value) -> Result<(), String> {
    let message = object(message, "the message")?;
    let role = string(message, "role", "the message")?;
    let (keys, parts): (&[&str], &[&str]) = match role {
        "system" | "developer" => (&["role", "content", "name"], &["text"]),
        "user" => (
            &["role", "content", "name"],
            &["text", "image_url", "input_audio", "file"],
        ),
        "assistant" => (
            &[
                "role",
                "content",
                "name",
                "refusal",
                "audio",
                "tool_calls",
                "function_call",
            ],
            &["text", "refusal"],
        ),
        "tool" => (&["role", "content", "tool_call_id"], &["text"]),
        other => return Err(format!("role {other:?}")),
    };
    only_keys(message, keys, "the message")?;
    if role == "tool" {
        string(message, "tool_call_id", "a tool message")?;
    }
    match message.get("content") {
        Some(Value::String(_)) => {}
        None | Some(Value::Null) if role == "assistant" => {
            let has_calls = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|calls| !calls.is_empty());
            if !has_calls && message.get("refusal").is_none_or(Value::is_null) {
                return Err("an assistant message without content, tool calls or refusal".into());
            }
        }
        Some(Value::Array(list)) => {
            if list.is_empty() {
                return Err("content is an empty list".to_owned());
            }
            for (i, part) in list.iter().enumerate() {
                check_openai_part(part, parts).map_err(|e| format!("content part {i}: {e}"))?;
            }
        }
        other => return Err(format!("content {other:?} for role {role}")),
    }
    if let Some(calls) = message.get("tool_calls") {
        let calls = calls.as_array().ok_or("tool_calls is not a list")?;
        for (i, call) in calls.iter().enumerate() {
            let call = object(call, "a tool call")?;
            only_keys(call, &["id", "type", "function"], "a tool call")
                .map_err(|e| format!("tool call {i}: {e}"))?;
            string(call, "id", "a tool call")?;
            if string(call, "type", "a tool call")? != "function" {
                return Err(format!("tool call {i} is not a function call"));
            }
            let function = object(call.get("function").unwrap_or(&Value::Null), "function")?;
            only_keys(function, &["name", "arguments"], "function")?;
            string(function, "name", "function")?;
            string(function, "arguments", "function")?;
        }
    }
    Ok(())
}

fn check_openai_part(part: &Value, allowed: &[&str]) -> Result<(), String> {
    let part = object(part, "a part")?;
    let kind = string(part, "type", "a part")?;
    if !allowed.contains(&kind) {
        return Err(format!("part type {kind:?} is not allowed here"));
    }
    match kind {
        "text" => {
            only_keys(part, &["type", "text"], "text part")?;
            string(part, "text", "text part").map(drop)
        }
        "image_url" => {
            only_keys(part, &["type", "image_url"], "image_url part")?;
            let image = object(part.get("image_url").unwrap_or(&Value::Null), "image_url")?;
            only_keys(image, &["url", "detail"], "image_url")?;
            let url = string(image, "url", "image_url")?;
            let ok = url.starts_with("https://")
                || url.starts_with("http://")
                || url
                    .strip_prefix("data:")
                    .and_then(|rest| rest.split_once(','))
                    .is_some_and(|(header, _)| header.ends_with(";base64"));
            if ok {
                Ok(())
            } else {
                Err(format!("image url {url:?}"))
            }
        }
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// The recorded corpus

/// Exports to the provider other than `from`; returns the target's error name and result.
fn export_to_other(from: &str, message: &Message) -> (&'static str, agent_session::Result<Value>) {
    let to = other(from);
    let target = if to == "openai" { "openai-chat" } else { to };
    (target, export(to, message))
}

fn check_for(target: &str, wire: &Value) -> Result<(), String> {
    match target {
        "anthropic" => check_anthropic(wire),
        _ => check_openai(wire),
    }
}

#[test]
fn recorded_messages_export_to_the_other_provider_validly_or_are_refused() {
    let Some(recordings) = recordings() else {
        return;
    };
    let mut translated = 0;
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    let mut invalid = Vec::new();
    for recording in &recordings {
        let (name, provider) = (&recording.name, recording.provider.as_str());
        for (i, original) in recording.messages.iter().enumerate() {
            let imported = import(provider, original).expect("a recording imports");
            // Through the stored form, as a saved session is exported.
            let stored: Message =
                serde_json::from_str(&serde_json::to_string(&imported).expect("serialize"))
                    .expect("deserialize");
            let (target, result) = export_to_other(provider, &stored);
            match result {
                Ok(wire) => match check_for(target, &wire) {
                    Ok(()) => translated += 1,
                    Err(problem) => {
                        invalid.push(format!("{name}[{i}] -> {target}: {problem}\n  {wire}"));
                    }
                },
                Err(Error::Conversion {
                    provider: p,
                    problem,
                }) => {
                    assert_eq!(p, target, "{name}[{i}]: the error names the target");
                    // Group by the reason, without the block's position or ids.
                    let reason = problem
                        .split_once("): ")
                        .map_or(problem.as_str(), |(_, why)| why)
                        .split(';')
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    eprintln!("{name}[{i}] -> {target} refused: {problem}");
                    *refusals.entry(format!("{target}: {reason}")).or_default() += 1;
                }
                Err(other) => panic!("{name}[{i}]: an untyped refusal {other:?}"),
            }
        }
    }
    let refused: usize = refusals.values().sum();
    eprintln!("translated into valid messages: {translated}; refused: {refused}");
    for (reason, count) in &refusals {
        eprintln!("  {count} x {reason}");
    }
    assert!(
        invalid.is_empty(),
        "invalid exports:\n{}",
        invalid.join("\n")
    );
    assert!(translated > 0, "nothing translated");
}

// ---------------------------------------------------------------------------------------
// The reported problems, one by one

fn conversion(result: agent_session::Result<Value>, provider: &str) -> String {
    match result {
        Err(Error::Conversion {
            provider: p,
            problem,
        }) => {
            assert_eq!(p, provider);
            problem
        }
        other => panic!("expected a conversion error, got {other:?}"),
    }
}

#[test]
fn openai_calls_without_arguments_get_an_empty_input_object() {
    let message = Message::from_openai_chat(&json!({"role": "assistant", "content": null,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "now", "arguments": ""}}]}))
    .expect("import");
    let wire = message.to_anthropic().expect("export");
    assert_eq!(
        wire,
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "now", "input": {}}]})
    );
    check_anthropic(&wire).expect("valid");

    let bad = Message::from_openai_chat(&json!({"role": "assistant", "content": null,
        "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}))
    .expect("import");
    let problem = conversion(bad.to_anthropic(), "anthropic");
    assert!(problem.contains("content block 0"), "{problem}");
    assert!(problem.contains("call_2"), "{problem}");
}

#[test]
fn anthropic_thinking_is_refused_for_openai() {
    for block in [
        json!({"type": "thinking", "thinking": "Let me see.", "signature": "EqQBCgIYAh"}),
        json!({"type": "redacted_thinking", "data": "c2VjcmV0"}),
    ] {
        let kind = block["type"].as_str().expect("a type").to_owned();
        let message = Message::from_anthropic(&json!({"role": "assistant", "content": [
            block, {"type": "text", "text": "Done."}
        ]}))
        .expect("import");
        let problem = conversion(message.to_openai_chat(), "openai-chat");
        assert!(
            problem.starts_with(&format!("content block 0 ({kind}): ")),
            "{problem}"
        );
        assert!(problem.contains("drop it"), "{problem}");

        // Dropping the block, as the error suggests, gives a valid message.
        let mut message = message;
        message.content.remove(0);
        check_openai(&message.to_openai_chat().expect("export")).expect("valid");
    }
}

#[test]
fn openai_image_urls_become_anthropic_image_blocks() {
    let message = Message::from_openai_chat(&json!({"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/webp;base64,UklGRg==", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    ]}))
    .expect("import");
    let wire = message.to_anthropic().expect("export");
    assert_eq!(
        wire["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": "UklGRg=="}})
    );
    assert_eq!(
        wire["content"][2],
        json!({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}})
    );
    check_anthropic(&wire).expect("valid");

    // And back: the images become image_url parts again.
    let back = Message::from_anthropic(&wire).expect("import the export");
    let wire = back.to_openai_chat().expect("export");
    assert_eq!(
        wire["content"][1],
        json!({"type": "image_url", "image_url": {"url": "data:image/webp;base64,UklGRg=="}})
    );
    check_openai(&wire).expect("valid");
}

#[test]
fn anthropic_system_messages_are_accepted_and_round_trip() {
    for wire in [
        json!({"role": "system", "content": "From now on, answer in French."}),
        json!({"role": "system", "content": [{"type": "text", "text": "Be brief."}]}),
    ] {
        let message = Message::from_anthropic(&wire).expect("import");
        assert_eq!(message.role, Role::System);
        assert_eq!(message.to_anthropic().expect("export"), wire);
        let stored: Message =
            serde_json::from_str(&serde_json::to_string(&message).expect("serialize"))
                .expect("deserialize");
        assert_eq!(stored.to_anthropic().expect("export"), wire);
        let openai = message.to_openai_chat().expect("to OpenAI");
        assert_eq!(openai["role"], "system");
        check_openai(&openai).expect("valid");
    }
    let built = Message::system("Be exact.").to_anthropic().expect("export");
    assert_eq!(
        built,
        json!({"role": "system", "content": [{"type": "text", "text": "Be exact."}]})
    );
}

/// The checks above must catch what they are meant to.
#[test]
fn the_structural_checks_refuse_invalid_messages() {
    for bad in [
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": ""}]}),
        json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}]}),
        json!({"role": "user", "content": "x", "name": "ada"}),
        json!({"role": "tool", "content": "x"}),
        json!({"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": ""}}]}),
    ] {
        assert!(check_anthropic(&bad).is_err(), "{bad}");
    }
    for bad in [
        json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}),
        json!({"role": "user", "content": [{"type": "image", "source": {}}]}),
        json!({"role": "assistant", "content": []}),
        json!({"role": "user", "content": [{"type": "text", "text": "x", "citations": null}]}),
        json!({"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": {"url": "https://e.com"}}]}),
    ] {
        assert!(check_openai(&bad).is_err(), "{bad}");
    }
}

/// Gemini's OpenAI compatibility mode names the model's turns `model`: they import as
/// assistant messages (so the session loop pairs their tool calls), survive the store, come
/// back as `model`, and export to Anthropic as `assistant`.
#[test]
fn gemini_compatibility_mode_model_turns_round_trip_and_export_as_assistant() {
    let turns = [
        json!({"role": "user", "content": "What is 2 + 2?"}),
        json!({"role": "model", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":2,\"b\":2}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "4"}),
        json!({"role": "model", "content": "4."}),
    ];
    let messages: Vec<Message> = turns
        .iter()
        .map(|m| Message::from_openai_chat(m).expect("import"))
        .collect();
    assert_eq!(messages[1].role, Role::Assistant);
    assert_eq!(messages[3].role, Role::Assistant);
    let snapshot = agent_session::SessionSnapshot::builder(
        agent_session::SessionId::parse("gemini").expect("id"),
        "gemini-2.5-flash",
    )
    .transcript(messages)
    .build()
    .expect("the call pairs with its result");
    assert_eq!(snapshot.tool_calls().len(), 1);
    let loaded = agent_session::SessionSnapshot::from_json(&snapshot.to_json().expect("encode"))
        .expect("decode");
    for (message, original) in loaded.transcript().iter().zip(&turns) {
        assert_eq!(&message.to_openai_chat().expect("export"), original);
    }
    let to_anthropic = loaded.transcript()[3].to_anthropic().expect("export");
    assert_eq!(to_anthropic["role"], json!("assistant"));
}

/// An OpenAI custom tool's call (free-form text input) pairs with its result like any
/// call, survives the stored form, comes back under `custom`, and is refused, naming the
/// call, on export to Anthropic, whose tools take JSON objects only.
#[test]
fn custom_tool_calls_round_trip_and_are_refused_for_anthropic() {
    let turns = [
        json!({"role": "user", "content": "How many sessions?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "custom", "custom": {"name": "run_sql", "input": "select count(*) from sessions;"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "42"}),
    ];
    let messages: Vec<Message> = turns
        .iter()
        .map(|m| Message::from_openai_chat(m).expect("import"))
        .collect();
    let snapshot = agent_session::SessionSnapshot::builder(
        agent_session::SessionId::parse("custom").expect("id"),
        "gpt-5",
    )
    .transcript(messages)
    .build()
    .expect("the custom call pairs with its result");
    assert_eq!(snapshot.tool_calls().len(), 1);
    assert_eq!(snapshot.tool_calls()[0].tool_name, "run_sql");
    let loaded = agent_session::SessionSnapshot::from_json(&snapshot.to_json().expect("encode"))
        .expect("decode");
    for (message, original) in loaded.transcript().iter().zip(&turns) {
        assert_eq!(&message.to_openai_chat().expect("export"), original);
    }
    let err = loaded.transcript()[1]
        .to_anthropic()
        .expect_err("Anthropic has no custom tools");
    assert!(matches!(err, Error::Conversion { .. }), "{err:?}");
    assert!(
        err.to_string().contains("call_1") && err.to_string().contains("custom"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// Every codec to every other, the new ones included

/// Responses item types a request may hold that are not checked field by field.
const RESPONSES_OTHER_ITEMS: &[&str] = &[
    "reasoning",
    "compaction",
    "item_reference",
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "computer_call",
    "computer_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
];

/// A Responses input item (or a group of them, an array).
fn check_responses(wire: &Value) -> Result<(), String> {
    let items = match wire {
        Value::Array(items) => items.iter().collect(),
        item => vec![item],
    };
    for item in items {
        let item = object(item, "an item")?;
        let kind = match item.get("type") {
            None => "message",
            Some(kind) => kind.as_str().ok_or("`type` is not a string")?,
        };
        match kind {
            "message" => {
                only_keys(
                    item,
                    &["type", "role", "content", "id", "status"],
                    "a message item",
                )?;
                let role = string(item, "role", "a message item")?;
                let parts: &[&str] = match role {
                    "assistant" => &["output_text", "refusal"],
                    "user" | "system" | "developer" => &["input_text", "input_image", "input_file"],
                    other => return Err(format!("message role {other:?}")),
                };
                match item.get("content") {
                    Some(Value::String(_)) => {}
                    Some(Value::Array(list)) => {
                        for part in list {
                            let part = object(part, "a part")?;
                            let kind = string(part, "type", "a part")?;
                            if !parts.contains(&kind) {
                                return Err(format!("part type {kind:?} in a {role} message"));
                            }
                        }
                    }
                    _ => return Err("a message item needs string or list content".to_owned()),
                }
            }
            "function_call" | "custom_tool_call" => {
                let input = if kind == "function_call" {
                    "arguments"
                } else {
                    "input"
                };
                only_keys(
                    item,
                    &[
                        "type",
                        "id",
                        "call_id",
                        "name",
                        input,
                        "status",
                        "namespace",
                    ],
                    kind,
                )?;
                for key in ["call_id", "name", input] {
                    string(item, key, kind)?;
                }
            }
            "function_call_output" | "custom_tool_call_output" => {
                only_keys(item, &["type", "id", "call_id", "output", "status"], kind)?;
                string(item, "call_id", kind)?;
                match item.get("output") {
                    Some(Value::String(_)) => {}
                    Some(Value::Array(parts)) => {
                        for part in parts {
                            let part = object(part, "an output part")?;
                            let kind = string(part, "type", "an output part")?;
                            if !["input_text", "input_image", "input_file"].contains(&kind) {
                                return Err(format!("output part type {kind:?}"));
                            }
                        }
                    }
                    _ => return Err(format!("{kind} needs a string or list `output`")),
                }
            }
            other if RESPONSES_OTHER_ITEMS.contains(&other) => {}
            other => return Err(format!("item type {other:?}")),
        }
    }
    Ok(())
}

/// Gemini part keys holding data (exactly one per part), and metadata keys.
const GEMINI_DATA: &[&str] = &[
    "text",
    "inlineData",
    "inline_data",
    "fileData",
    "file_data",
    "functionCall",
    "function_call",
    "functionResponse",
    "function_response",
    "executableCode",
    "executable_code",
    "codeExecutionResult",
    "code_execution_result",
];
const GEMINI_METADATA: &[&str] = &[
    "thought",
    "thoughtSignature",
    "thought_signature",
    "partMetadata",
    "part_metadata",
    "videoMetadata",
    "video_metadata",
    "mediaResolution",
    "media_resolution",
];

/// A Gemini `Content`.
fn check_gemini(wire: &Value) -> Result<(), String> {
    let content = object(wire, "a content")?;
    only_keys(content, &["role", "parts"], "a content")?;
    if let Some(role) = content.get("role") {
        if role != "user" && role != "model" {
            return Err(format!("role {role}"));
        }
    }
    for part in content
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let part = object(part, "a part")?;
        let data: Vec<&String> = part
            .keys()
            .filter(|k| GEMINI_DATA.contains(&k.as_str()))
            .collect();
        if data.len() != 1 {
            return Err(format!("a part needs one data field, found {data:?}"));
        }
        if let Some(key) = part
            .keys()
            .find(|k| !GEMINI_DATA.contains(&k.as_str()) && !GEMINI_METADATA.contains(&k.as_str()))
        {
            return Err(format!("part field `{key}`"));
        }
        match data[0].as_str() {
            "text" => {
                part["text"].as_str().ok_or("text is not a string")?;
            }
            "functionCall" | "function_call" => {
                let call = object(&part[data[0].as_str()], "a function call")?;
                string(call, "name", "a function call")?;
                if call.get("args").is_some_and(|a| !a.is_object()) {
                    return Err("args is not an object".to_owned());
                }
            }
            "functionResponse" | "function_response" => {
                let response = object(&part[data[0].as_str()], "a function response")?;
                string(response, "name", "a function response")?;
                object(&response["response"], "a function response's response")?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_codec(codec: agent_session::Codec, text: &str) -> Result<(), String> {
    let wire: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    match codec {
        agent_session::Codec::OpenAiChat => check_openai(&wire),
        agent_session::Codec::Anthropic => check_anthropic(&wire),
        agent_session::Codec::OpenAiResponses => check_responses(&wire),
        _ => check_gemini(&wire),
    }
}

/// Every message of the recordings and of the crate's own corpus (Responses, Gemini, ...),
/// imported from its text and put through the stored form, exported to every other codec:
/// the result is valid for that codec or a conversion error naming it. To its own codec it
/// is never refused.
#[test]
fn every_message_exports_to_every_codec_validly_or_is_refused() {
    use agent_session::Codec;
    let mut corpus = fidelity_support::own_corpus();
    corpus.extend(recordings().unwrap_or_default());
    let mut counts: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    let mut invalid = Vec::new();
    for recording in &corpus {
        for (i, text) in recording.texts.iter().enumerate() {
            let imported = Message::from_json(recording.codec(), text).expect("imports");
            let stored: Message =
                serde_json::from_str(&serde_json::to_string(&imported).expect("serialize"))
                    .expect("deserialize");
            for target in Codec::ALL {
                let entry = counts
                    .entry((
                        recording.codec().name().to_owned(),
                        target.name().to_owned(),
                    ))
                    .or_default();
                match stored.to_json(target) {
                    // Given back to its own provider exactly as it came (tests/fidelity.rs).
                    Ok(_) if target == recording.codec() => entry.0 += 1,
                    Ok(wire) => match check_codec(target, &wire) {
                        Ok(()) => entry.0 += 1,
                        Err(problem) => invalid.push(format!(
                            "{}[{i}] -> {}: {problem}\n  {wire}",
                            recording.name,
                            target.name()
                        )),
                    },
                    Err(Error::Conversion { provider, .. }) => {
                        assert_eq!(provider, target.name(), "{}[{i}]", recording.name);
                        entry.1 += 1;
                    }
                    Err(other) => panic!("{}[{i}]: an untyped refusal {other:?}", recording.name),
                }
            }
        }
    }
    for ((from, to), (valid, refused)) in &counts {
        eprintln!("{from} -> {to}: {valid} valid, {refused} refused");
    }
    assert!(
        invalid.is_empty(),
        "invalid exports:\n{}",
        invalid.join("\n")
    );
    // Each pair of codecs translates something.
    for ((from, to), (valid, _)) in &counts {
        assert!(*valid > 0, "{from} -> {to}: nothing translated");
    }
}
