//! Exporting a message to a codec other than the one it came from, where the OpenAI
//! Responses API or Gemini is one of the two.
//!
//! [`plain`] reduces a message to what every codec has: text, tool calls and tool results
//! whose output is text, with no provider fields. What only identifies or annotates the
//! message for its own provider is dropped (listed below); everything else that has no
//! place in the plain form is refused with [`Error::Conversion`](crate::Error::Conversion)
//! naming the block or field and why. The target codec then writes the plain message as it
//! writes a message built in Rust.
//!
//! Dropped, because they mean nothing to another provider:
//! - OpenAI Responses: a `message` item's `type`, `id` and `status`; a call's or output's
//!   item `id` and `status`;
//! - Gemini: `thoughtSignature` / `thought_signature` on a part (a signature only Gemini
//!   checks), and Gemini's OpenAI compatibility mode's `extra_content` on a tool call;
//! - OpenAI Chat: the message fields `refusal`, `annotations`, `audio`, `function_call`,
//!   `tool_calls`, `name` when `null` or empty, a streamed call's `index`;
//! - Anthropic: `citations: null` or `[]` on text, `caller: {"type": "direct"}` on a call.

use serde_json::{Map, Value};

use super::{
    block_error, conversion, Codec, ContentBlock, Message, MessageWire, Role, RoleAlias, TextBlock,
    ToolCall, ToolCallWire, ToolOutput, ToolResult, ToolResultWire,
};
use crate::error::Result;

/// `null`, `[]` or `{}`.
fn is_nothing(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// Whether `key: value` on a message, from a message of `origin`, is dropped.
fn drops_message_field(origin: Option<Codec>, key: &str, value: &Value) -> bool {
    match origin {
        Some(Codec::OpenAiResponses) => {
            matches!(key, "id" | "status") || (key == "type" && value == "message")
        }
        _ => super::openai::MESSAGE_FIELDS.contains(&key) && is_nothing(value),
    }
}

/// Whether `key: value` on a text block, a tool call or a tool result is dropped.
fn drops_block_field(origin: Option<Codec>, key: &str, value: &Value) -> bool {
    match key {
        "thoughtSignature" | "thought_signature" => origin == Some(Codec::Gemini),
        "id" | "status" => origin == Some(Codec::OpenAiResponses),
        "citations" | "annotations" | "logprobs" => is_nothing(value),
        "caller" => *value == serde_json::json!({"type": "direct"}),
        "index" => value.is_u64(),
        "extra_content" => true,
        _ => false,
    }
}

/// The fields of `extra` that are not dropped; refused if there are any.
fn check_fields(
    extra: &Map<String, Value>,
    origin: Option<Codec>,
    target: &'static str,
    at: &str,
) -> Result<()> {
    if let Some((key, _)) = extra
        .iter()
        .find(|(key, value)| !drops_block_field(origin, key, value))
    {
        return Err(block_error(
            target,
            at,
            format!("its provider field `{key}` has no place in {target}; remove it before export"),
        ));
    }
    Ok(())
}

/// What [`plain`] makes of a block that is neither text nor a tool call or result.
fn describe_other(value: &Value) -> String {
    match value.get("type").and_then(Value::as_str) {
        Some(kind) => kind.to_owned(),
        None => value
            .as_object()
            .and_then(|object| object.keys().find(|k| !k.starts_with("thought")).cloned())
            .map_or_else(|| "a part".to_owned(), |key| format!("a {key} part")),
    }
}

/// `message` reduced to text, tool calls and tool results with text output, for `target`
/// (the codec's name, for errors), or refused.
pub(super) fn plain(message: &Message, target: &'static str, to: Codec) -> Result<Message> {
    let origin = message.wire.codec;
    for (key, value) in &message.extra {
        if !drops_message_field(origin, key, value) {
            return Err(conversion(
                target,
                format!("the message has the provider field `{key}`, which has no place in {target}; remove it from `extra` before export"),
            ));
        }
    }
    let mut content = Vec::with_capacity(message.content.len());
    for (index, block) in message.content.iter().enumerate() {
        content.push(plain_block(block, origin, target, to, index)?);
    }
    let role = match message.wire.role {
        Some(RoleAlias::Developer) => Some(RoleAlias::Developer),
        _ => None,
    };
    Ok(Message {
        role: message.role,
        content,
        extra: Map::new(),
        wire: MessageWire {
            role,
            ..MessageWire::default()
        },
        rare: None,
    })
}

fn plain_block(
    block: &ContentBlock,
    origin: Option<Codec>,
    target: &'static str,
    to: Codec,
    index: usize,
) -> Result<ContentBlock> {
    Ok(match block {
        ContentBlock::Text(text) => {
            check_fields(
                &text.extra,
                origin,
                target,
                &format!("content block {index} (text)"),
            )?;
            ContentBlock::Text(TextBlock::new(text.text.clone()))
        }
        ContentBlock::ToolCall(call) => {
            let at = format!("content block {index} (tool call {:?})", call.id);
            check_fields(&call.extra, origin, target, &at)?;
            if let Some(key) = call.wire.function_extra.keys().next() {
                return Err(block_error(
                    target,
                    &at,
                    format!("the call has the provider field `{key}`, which has no place in {target}; remove it before export"),
                ));
            }
            if to == Codec::Anthropic
                && !call
                    .id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                // A Gemini id made from a function name with `.` or `:` in it.
                return Err(block_error(
                    target,
                    &at,
                    "Anthropic tool_use ids take only letters, digits, `_` and `-`; give the call (and its result) such an id before export",
                ));
            }
            if call.wire.custom && to != Codec::OpenAiChat && to != Codec::OpenAiResponses {
                return Err(block_error(
                    target,
                    &at,
                    "it is a call of an OpenAI custom tool (free-form text input), which other providers' tools cannot take; drop the call and its result before export",
                ));
            }
            ContentBlock::tool_call(ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                extra: Map::new(),
                wire: ToolCallWire {
                    custom: call.wire.custom,
                    id_synthetic: call.wire.id_synthetic && to == Codec::Gemini,
                    ..ToolCallWire::default()
                },
            })
        }
        ContentBlock::ToolResult(result) => {
            let at = format!(
                "content block {index} (tool_result for {:?})",
                result.call_id
            );
            check_fields(&result.extra, origin, target, &at)?;
            if let Some(key) = result.wire.function_extra.keys().next() {
                return Err(block_error(
                    target,
                    &at,
                    format!("the result has the provider field `{key}`, which has no place in {target}; remove it before export"),
                ));
            }
            let output = plain_output(&result.output, origin, target, &at)?;
            ContentBlock::tool_result(ToolResult {
                call_id: result.call_id.clone(),
                output,
                is_error: result.is_error,
                extra: Map::new(),
                wire: ToolResultWire {
                    custom: result.wire.custom,
                    name: result.wire.name.clone(),
                    // A made-up id stays unsent to Gemini, which pairs by name; to the
                    // others it is the id the call and its result share.
                    id_synthetic: result.wire.id_synthetic && to == Codec::Gemini,
                    ..ToolResultWire::default()
                },
            })
        }
        ContentBlock::Other { value } => {
            let kind = describe_other(value);
            let from = match origin {
                Some(codec) => codec.name(),
                None => "another provider",
            };
            return Err(block_error(
                target,
                &format!("content block {index} ({kind})"),
                format!("this {from} block has no place in {target}; drop it from the message before export"),
            ));
        }
    })
}

/// A tool result's output reduced to text and text blocks, or refused.
fn plain_output(
    output: &ToolOutput,
    origin: Option<Codec>,
    target: &'static str,
    at: &str,
) -> Result<ToolOutput> {
    Ok(match output {
        ToolOutput::Text(text) => ToolOutput::Text(text.clone()),
        ToolOutput::Blocks(blocks) => ToolOutput::Blocks(
            blocks
                .iter()
                .enumerate()
                .map(|(inner, block)| match block {
                    ContentBlock::Text(text) => {
                        check_fields(
                            &text.extra,
                            origin,
                            target,
                            &format!("{at}, its content block {inner} (text)"),
                        )?;
                        Ok(ContentBlock::Text(TextBlock::new(text.text.clone())))
                    }
                    ContentBlock::Other { value } => Err(block_error(
                        target,
                        &format!("{at}, its content block {inner} ({})", describe_other(value)),
                        format!("{target} takes text tool results from another provider only; drop the block before export"),
                    )),
                    _ => Err(block_error(
                        target,
                        &format!("{at}, its content block {inner}"),
                        "a tool call or result inside a tool result",
                    )),
                })
                .collect::<Result<_>>()?,
        ),
    })
}

/// Whether `role` can be given to `to` at all (Gemini contents have no system role).
pub(super) fn check_role(role: Role, target: &'static str, to: Codec) -> Result<()> {
    if role == Role::System && to == Codec::Gemini {
        return Err(conversion(
            target,
            "Gemini contents have no system role: give system instructions as the request's `systemInstruction` instead",
        ));
    }
    Ok(())
}
