//! OpenAI Responses API items to and from the neutral model.
//!
//! A message is one input or output item (a JSON object), or a *group* of items (a JSON
//! array), such as a response's whole `output`: an engine returns one assistant message
//! per completion, and one response may hold reasoning, text and several tool calls. All
//! items of a group have the same neutral role.
//!
//! | item | neutral |
//! |---|---|
//! | `message` (also without `type`: an easy input message) | its role (`developer`: [`Role::System`] with the alias); `input_text` / `output_text` parts with a string `text` (the part type of the role: `output_text` for the assistant, `input_text` otherwise) are [`ContentBlock::Text`], other parts [`ContentBlock::Other`]; the item's other fields (`id`, `status`, `type`, ...) `extra` |
//! | `function_call`, `custom_tool_call` | an assistant [`ToolCall`] (`call_id` as its id; the item's `id`, `status`, ... in its `extra`) |
//! | `function_call_output`, `custom_tool_call_output` | a [`Role::Tool`] [`ToolResult`] (a string output, or parts) |
//! | other `*_output` items, `mcp_approval_response` | a [`Role::Tool`] message with the item as an `other` block |
//! | every other item (`reasoning`, `compaction`, `item_reference`, hosted tool calls, unknown types) | an assistant message with the item as an `other` block |
//!
//! In a group, each item's blocks follow each other, and the layout (how many blocks each
//! item holds, and a `message` item's fields but `content`) is kept in the message's wire
//! hints. Hosted and client-side tool calls other than function and custom tools
//! (`computer_call`, `local_shell_call`, `shell_call`, `apply_patch_call`, MCP) are kept
//! verbatim as `other` blocks: a `Session` does not run them.

use serde_json::{Map, Value};

use super::{
    conversion, foreign, into_object, json_kind, take_string, Codec, ContentBlock, ContentShape,
    ItemShape, Message, MessageWire, Role, RoleAlias, TextBlock, ToolArguments, ToolCall,
    ToolCallWire, ToolOutput, ToolResult, ToolResultWire,
};
use crate::error::Result;

const PROVIDER: &str = "openai-responses";

/// One item, decoded.
struct Item {
    role: Role,
    alias: Option<RoleAlias>,
    blocks: Vec<ContentBlock>,
    /// A `message` item's fields but `role` and `content`, and its content's shape.
    message: Option<(Map<String, Value>, ContentShape)>,
}

pub(super) fn decode(value: Value) -> Result<Message> {
    let mut wire = MessageWire {
        codec: Some(Codec::OpenAiResponses),
        ..MessageWire::default()
    };
    match value {
        Value::Array(items) => {
            let mut role = None;
            let mut content = Vec::new();
            let mut layout = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                let at = format!("item {index}");
                let decoded = decode_item(item, &at)?;
                match role {
                    None => role = Some(decoded.role),
                    Some(first) if first != decoded.role => {
                        return Err(conversion(
                            PROVIDER,
                            format!(
                                "{at} is a {:?} item and item 0 a {first:?} one: the items of a group must have one role",
                                decoded.role
                            ),
                        ))
                    }
                    Some(_) => {}
                }
                layout.push(ItemShape {
                    blocks: decoded.blocks.len(),
                    message: decoded.message.as_ref().map(|(fields, _)| {
                        let mut fields = fields.clone();
                        if let Some(alias) = decoded.alias {
                            fields.insert("role".to_owned(), Value::from(alias.as_str()));
                        } else {
                            fields.insert("role".to_owned(), Value::from(role_name(decoded.role)));
                        }
                        fields
                    }),
                    content: decoded
                        .message
                        .as_ref()
                        .map_or(ContentShape::Blocks, |(_, shape)| *shape),
                });
                content.extend(decoded.blocks);
            }
            let Some(role) = role else {
                return Err(conversion(
                    PROVIDER,
                    "a group of items (a JSON array) needs at least one item",
                ));
            };
            let mut message = Message {
                role,
                content,
                extra: Map::new(),
                wire,
                rare: None,
            };
            message.set_items(Some(layout));
            Ok(message)
        }
        value @ Value::Object(_) => {
            let item = decode_item(value, "the item")?;
            wire.role = item.alias;
            let extra = match item.message {
                Some((fields, shape)) => {
                    wire.content = shape;
                    fields
                }
                None => Map::new(),
            };
            Ok(Message {
                role: item.role,
                content: item.blocks,
                extra,
                wire,
                rare: None,
            })
        }
        other => Err(conversion(
            PROVIDER,
            format!(
                "an item must be a JSON object (or a group of items, a JSON array), found {}",
                json_kind(&other)
            ),
        )),
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The item's type: its `type`, or for an item without one, `message` when it has a
/// `role` (an easy input message) and `item_reference` otherwise.
fn item_type<'a>(object: &'a Map<String, Value>, at: &str) -> Result<&'a str> {
    match object.get("type") {
        Some(Value::String(kind)) => Ok(kind),
        Some(other) => Err(conversion(
            PROVIDER,
            format!("{at}: `type` must be a string, found {}", json_kind(other)),
        )),
        None if object.contains_key("role") => Ok("message"),
        None if object.contains_key("id") => Ok("item_reference"),
        None => Err(conversion(
            PROVIDER,
            format!("{at} has no `type`, and is neither a message (no `role`) nor an item reference (no `id`)"),
        )),
    }
}

/// Item types whose items a client sends as a tool's result.
fn is_output_type(kind: &str) -> bool {
    kind.ends_with("_output") || kind == "mcp_approval_response"
}

fn decode_item(item: Value, at: &str) -> Result<Item> {
    let mut object = into_object(item, PROVIDER, at)?;
    let kind = item_type(&object, at)?.to_owned();
    let at = format!("{at} ({kind})");
    match kind.as_str() {
        "message" => decode_message_item(object, &at),
        "function_call" | "custom_tool_call" => {
            let custom = kind == "custom_tool_call";
            object.remove("type");
            let id = take_string(&mut object, "call_id", PROVIDER).map_err(|e| in_item(&at, e))?;
            let name = take_string(&mut object, "name", PROVIDER).map_err(|e| in_item(&at, e))?;
            let input = if custom { "input" } else { "arguments" };
            let arguments =
                take_string(&mut object, input, PROVIDER).map_err(|e| in_item(&at, e))?;
            Ok(Item {
                role: Role::Assistant,
                alias: None,
                blocks: vec![ContentBlock::tool_call(ToolCall {
                    id,
                    name,
                    arguments: ToolArguments::Text(arguments),
                    extra: object,
                    wire: ToolCallWire {
                        custom,
                        ..ToolCallWire::default()
                    },
                })],
                message: None,
            })
        }
        "function_call_output" | "custom_tool_call_output" => {
            let custom = kind == "custom_tool_call_output";
            object.remove("type");
            let call_id =
                take_string(&mut object, "call_id", PROVIDER).map_err(|e| in_item(&at, e))?;
            let output = match object.remove("output") {
                Some(Value::String(text)) => ToolOutput::Text(text),
                Some(Value::Array(parts)) => {
                    ToolOutput::Blocks(decode_parts(parts, Role::Tool, &at)?)
                }
                Some(other) => {
                    return Err(conversion(
                        PROVIDER,
                        format!(
                            "{at}: `output` must be a string or a list, found {}",
                            json_kind(&other)
                        ),
                    ))
                }
                None => return Err(conversion(PROVIDER, format!("{at}: `output` is missing"))),
            };
            Ok(Item {
                role: Role::Tool,
                alias: None,
                blocks: vec![ContentBlock::tool_result(ToolResult {
                    call_id,
                    output,
                    is_error: false,
                    extra: object,
                    wire: ToolResultWire {
                        custom,
                        ..ToolResultWire::default()
                    },
                })],
                message: None,
            })
        }
        other => Ok(Item {
            role: if is_output_type(other) {
                Role::Tool
            } else {
                Role::Assistant
            },
            alias: None,
            blocks: vec![ContentBlock::Other {
                value: Value::Object(object),
            }],
            message: None,
        }),
    }
}

fn decode_message_item(mut object: Map<String, Value>, at: &str) -> Result<Item> {
    let role_name = take_string(&mut object, "role", PROVIDER).map_err(|e| in_item(at, e))?;
    let (role, alias) = match role_name.as_str() {
        "user" => (Role::User, None),
        "system" => (Role::System, None),
        "developer" => (Role::System, Some(RoleAlias::Developer)),
        "assistant" => (Role::Assistant, None),
        other => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "{at}: unknown role {other:?} (expected user, system, developer or assistant)"
                ),
            ))
        }
    };
    let (blocks, shape) = match object.remove("content") {
        Some(Value::String(text)) => (vec![ContentBlock::text(text)], ContentShape::String),
        Some(Value::Array(parts)) => (decode_parts(parts, role, at)?, ContentShape::Blocks),
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "{at}: `content` must be a string or a list, found {}",
                    json_kind(&other)
                ),
            ))
        }
        None => return Err(conversion(PROVIDER, format!("{at}: `content` is missing"))),
    };
    Ok(Item {
        role,
        alias,
        blocks,
        message: Some((object, shape)),
    })
}

fn in_item(at: &str, error: crate::Error) -> crate::Error {
    match error {
        crate::Error::Conversion { problem, .. } => {
            conversion(PROVIDER, format!("{at}: {problem}"))
        }
        other => other,
    }
}

/// The part type text has in a message of `role`.
fn text_part_type(role: Role) -> &'static str {
    if role == Role::Assistant {
        "output_text"
    } else {
        "input_text"
    }
}

fn decode_parts(parts: Vec<Value>, role: Role, at: &str) -> Result<Vec<ContentBlock>> {
    let text_type = text_part_type(role);
    parts
        .into_iter()
        .enumerate()
        .map(|(index, part)| {
            let Value::Object(mut object) = part else {
                return Err(conversion(
                    PROVIDER,
                    format!(
                        "{at}: content part {index} must be a JSON object, found {}",
                        json_kind(&part)
                    ),
                ));
            };
            let is_text = object.get("type").and_then(Value::as_str) == Some(text_type)
                && object.get("text").is_some_and(Value::is_string);
            if !is_text {
                return Ok(ContentBlock::Other {
                    value: Value::Object(object),
                });
            }
            object.remove("type");
            let Some(Value::String(text)) = object.remove("text") else {
                return Err(conversion(
                    PROVIDER,
                    format!("{at}: content part {index} has no text"),
                ));
            };
            Ok(ContentBlock::Text(TextBlock {
                text,
                extra: object,
            }))
        })
        .collect()
}

pub(super) fn encode(message: &Message) -> Result<Value> {
    if message.wire.codec != Some(Codec::OpenAiResponses) {
        let plain = foreign::plain(message, PROVIDER, Codec::OpenAiResponses)?;
        return encode_plain(&plain);
    }
    if let Some(layout) = message.items() {
        if layout.iter().map(|item| item.blocks).sum::<usize>() == message.content.len() {
            let mut items = Vec::with_capacity(layout.len());
            let mut blocks = message.content.as_slice();
            for item in layout {
                let (own, rest) = blocks.split_at(item.blocks);
                blocks = rest;
                match &item.message {
                    Some(fields) => {
                        let role = fields.get("role").and_then(Value::as_str).map_or(
                            message.role,
                            |name| match name {
                                "assistant" => Role::Assistant,
                                "system" | "developer" => Role::System,
                                _ => Role::User,
                            },
                        );
                        let mut object = fields.clone();
                        object.insert(
                            "content".to_owned(),
                            encode_content(own, role, item.content)?,
                        );
                        items.push(Value::Object(object));
                    }
                    None => items.extend(encode_blocks(own, message.role)?),
                }
            }
            return Ok(Value::Array(items));
        }
    }
    let has_message_fields =
        !message.extra.is_empty() || message.wire.content != ContentShape::Blocks;
    if has_message_fields || message.content.iter().all(is_part) {
        // One `message` item.
        let mut object = message.extra.clone();
        let role = match message.wire.role {
            Some(alias) => alias.as_str(),
            None => role_name(message.role),
        };
        object.insert("role".to_owned(), Value::from(role));
        object.insert(
            "content".to_owned(),
            encode_content(&message.content, message.role, message.wire.content)?,
        );
        return Ok(Value::Object(object));
    }
    let mut items = encode_blocks(&message.content, message.role)?;
    if items.len() == 1 {
        return Ok(items.remove(0));
    }
    Ok(Value::Array(items))
}

/// Whether `block` goes into a `message` item's content (text, or an `other` block that
/// is a content part).
fn is_part(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Text(_) => true,
        ContentBlock::Other { value } => value
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|kind| PART_TYPES.contains(&kind)),
        ContentBlock::ToolCall(_) | ContentBlock::ToolResult(_) => false,
    }
}

/// Content part types of Responses messages (input and output).
const PART_TYPES: &[&str] = &[
    "input_text",
    "output_text",
    "refusal",
    "input_image",
    "input_file",
    "input_audio",
    "summary_text",
    "reasoning_text",
];

/// A `message` item's content: a string, or parts.
fn encode_content(blocks: &[ContentBlock], role: Role, shape: ContentShape) -> Result<Value> {
    if let (ContentShape::String, [ContentBlock::Text(text)]) = (shape, blocks) {
        if text.extra.is_empty() {
            return Ok(Value::String(text.text.clone()));
        }
    }
    blocks
        .iter()
        .enumerate()
        .map(|(index, block)| encode_part(block, role, index))
        .collect::<Result<Vec<_>>>()
        .map(Value::Array)
}

fn encode_part(block: &ContentBlock, role: Role, index: usize) -> Result<Value> {
    match block {
        ContentBlock::Text(text) => {
            let mut object = Map::new();
            object.insert("type".to_owned(), Value::from(text_part_type(role)));
            object.extend(text.extra.clone());
            object.insert("text".to_owned(), Value::String(text.text.clone()));
            Ok(Value::Object(object))
        }
        ContentBlock::Other { value } => Ok(value.clone()),
        ContentBlock::ToolCall(call) => Err(conversion(
            PROVIDER,
            format!(
                "content block {index} (tool call {:?}) cannot be a content part",
                call.id
            ),
        )),
        ContentBlock::ToolResult(result) => Err(conversion(
            PROVIDER,
            format!(
                "content block {index} (tool_result for {:?}) cannot be a content part",
                result.call_id
            ),
        )),
    }
}

/// One item per block (text as assistant or user messages of its own), for a message that
/// is not one `message` item.
fn encode_blocks(blocks: &[ContentBlock], role: Role) -> Result<Vec<Value>> {
    blocks
        .iter()
        .enumerate()
        .map(|(index, block)| match block {
            ContentBlock::ToolCall(call) => Ok(encode_call(call)),
            ContentBlock::ToolResult(result) => encode_result(result, role, index),
            ContentBlock::Other { value } if !is_part(block) => Ok(value.clone()),
            part => {
                let mut object = Map::new();
                object.insert("role".to_owned(), Value::from(role_name(role)));
                let content = match part {
                    ContentBlock::Text(text) if text.extra.is_empty() => {
                        Value::String(text.text.clone())
                    }
                    other => Value::Array(vec![encode_part(other, role, index)?]),
                };
                object.insert("content".to_owned(), content);
                Ok(Value::Object(object))
            }
        })
        .collect()
}

fn encode_call(call: &ToolCall) -> Value {
    let mut object = call.extra.clone();
    let (kind, input) = if call.wire.custom {
        ("custom_tool_call", "input")
    } else {
        ("function_call", "arguments")
    };
    object.insert("type".to_owned(), Value::from(kind));
    object.insert("call_id".to_owned(), Value::String(call.id.clone()));
    object.insert("name".to_owned(), Value::String(call.name.clone()));
    let arguments = match &call.arguments {
        ToolArguments::Text(text) => text.clone(),
        ToolArguments::Json(value) => value.to_string(),
    };
    object.insert(input.to_owned(), Value::String(arguments));
    Value::Object(object)
}

fn encode_result(result: &ToolResult, role: Role, index: usize) -> Result<Value> {
    if result.is_error && role != Role::Tool {
        return Err(conversion(
            PROVIDER,
            format!(
                "content block {index} (tool_result for {:?}): the result is marked as an error, and Responses tool outputs have no error flag; say so in its text and clear `is_error` before export",
                result.call_id
            ),
        ));
    }
    let mut object = result.extra.clone();
    let kind = if result.wire.custom {
        "custom_tool_call_output"
    } else {
        "function_call_output"
    };
    object.insert("type".to_owned(), Value::from(kind));
    object.insert("call_id".to_owned(), Value::String(result.call_id.clone()));
    let output = match &result.output {
        ToolOutput::Text(text) => Value::String(text.clone()),
        ToolOutput::Blocks(blocks) => Value::Array(
            blocks
                .iter()
                .enumerate()
                .map(|(i, block)| encode_part(block, Role::Tool, i))
                .collect::<Result<_>>()?,
        ),
    };
    object.insert("output".to_owned(), output);
    Ok(Value::Object(object))
}

/// A message holding only what every codec has (see [`foreign::plain`]), as items.
fn encode_plain(message: &Message) -> Result<Value> {
    let mut items = Vec::new();
    let mut parts: Vec<&ContentBlock> = Vec::new();
    let role = match message.wire.role {
        Some(RoleAlias::Developer) => "developer",
        _ => role_name(message.role),
    };
    let flush = |parts: &mut Vec<&ContentBlock>, items: &mut Vec<Value>| -> Result<()> {
        if parts.is_empty() {
            return Ok(());
        }
        if message.role == Role::Assistant {
            // An easy input message per text: string content is what every assistant item
            // without an id may hold.
            for part in parts.drain(..) {
                if let ContentBlock::Text(text) = part {
                    let mut object = Map::new();
                    object.insert("role".to_owned(), Value::from("assistant"));
                    object.insert("content".to_owned(), Value::String(text.text.clone()));
                    items.push(Value::Object(object));
                }
            }
            return Ok(());
        }
        let content = parts
            .drain(..)
            .enumerate()
            .map(|(i, part)| encode_part(part, message.role, i))
            .collect::<Result<Vec<_>>>()?;
        let mut object = Map::new();
        object.insert("role".to_owned(), Value::from(role));
        object.insert("content".to_owned(), Value::Array(content));
        items.push(Value::Object(object));
        Ok(())
    };
    for (index, block) in message.content.iter().enumerate() {
        match block {
            ContentBlock::Text(_) => parts.push(block),
            ContentBlock::ToolCall(call) => {
                flush(&mut parts, &mut items)?;
                items.push(encode_call(call));
            }
            ContentBlock::ToolResult(result) => {
                flush(&mut parts, &mut items)?;
                items.push(encode_result(result, message.role, index)?);
            }
            ContentBlock::Other { .. } => {
                return Err(conversion(
                    PROVIDER,
                    format!("content block {index}: a block the plain form does not have"),
                ))
            }
        }
    }
    flush(&mut parts, &mut items)?;
    if items.len() == 1 {
        return Ok(items.remove(0));
    }
    Ok(Value::Array(items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The decoder, on a borrowed value (the tests keep theirs to compare).
    fn decode(message: &Value) -> Result<Message> {
        super::decode(message.clone())
    }

    fn round_trip(wire: &Value) -> Message {
        super::super::tests::assert_round_trip(decode, encode, wire)
    }

    #[test]
    fn items_survive() {
        round_trip(&json!({"role": "user", "content": "What's the weather like in SF?"}));
        round_trip(
            &json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]}),
        );
        let reply = round_trip(
            &json!({"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []},
                        {"type": "refusal", "refusal": "no"}]}),
        );
        assert_eq!(reply.text(), "Hi");
        let call = round_trip(
            &json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{\"a\": 1}", "status": "completed"}),
        );
        assert_eq!(
            call.tool_calls().next().map(|c| c.id.as_str()),
            Some("call_1")
        );
        let output = round_trip(
            &json!({"type": "function_call_output", "call_id": "call_1", "output": "42"}),
        );
        assert_eq!(output.role, Role::Tool);
        round_trip(
            &json!({"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "https://e.com/a.png", "detail": "auto"}]}),
        );
        round_trip(
            &json!({"type": "custom_tool_call", "call_id": "c2", "name": "sql", "input": "select 1"}),
        );
        round_trip(&json!({"type": "custom_tool_call_output", "call_id": "c2", "output": "1"}));
        round_trip(
            &json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "x"}], "encrypted_content": "gAAA"}),
        );
        round_trip(&json!({"type": "item_reference", "id": "msg_0"}));
        round_trip(&json!({"id": "msg_0"}));
        round_trip(&json!({"type": "hologram", "beam": 3}));
        let computer = round_trip(
            &json!({"type": "computer_call_output", "call_id": "cu_1", "output": {"type": "computer_screenshot", "image_url": "data:x"}}),
        );
        assert_eq!(computer.role, Role::Tool);
    }

    #[test]
    fn groups_survive_with_their_layout() {
        let group = round_trip(&json!([
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [
                {"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": "{}"}
        ]));
        assert_eq!(group.role, Role::Assistant);
        assert_eq!(group.tool_calls().count(), 2);
        assert_eq!(group.text(), "Checking.");
        round_trip(&json!([{"role": "user", "content": "a"},
            {"role": "user", "content": [{"type": "input_text", "text": "b"}]}]));
        round_trip(
            &json!([{"role": "system", "content": "a"}, {"role": "developer", "content": "b"}]),
        );
        assert!(decode(
            &json!([{"role": "user", "content": "a"}, {"role": "developer", "content": "b"}])
        )
        .is_err());
        assert!(decode(&json!([{"role": "user", "content": "a"}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": ""}])).is_err());
        assert!(decode(&json!([])).is_err());
    }

    #[test]
    fn refuses_items_of_the_wrong_shape() {
        for item in [
            json!("text"),
            json!({"role": "wizard", "content": "x"}),
            json!({"role": "user"}),
            json!({"type": "function_call", "name": "f", "arguments": "{}"}),
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}),
            json!({"type": "function_call_output", "call_id": "c", "output": 1}),
            json!({"type": 5}),
            json!({"status": "completed"}),
            json!({"role": "user", "content": ["x"]}),
        ] {
            assert!(decode(&item).is_err(), "{item}");
        }
    }
}
