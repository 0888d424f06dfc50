//! OpenAI Chat Completions messages to and from the neutral model.

use serde_json::{Map, Value};

use super::{
    as_object, conversion, json_kind, take_string, ContentBlock, ContentShape, ListShape, Message,
    MessageWire, Role, RoleAlias, TextBlock, ToolArguments, ToolCall, ToolCallWire, ToolOutput,
    ToolResult, ToolResultWire,
};
use crate::error::Result;

const PROVIDER: &str = "openai-chat";

pub(super) fn decode(message: &Value) -> Result<Message> {
    let mut object = as_object(message, PROVIDER, "a message")?;
    let role_name = take_string(&mut object, "role", PROVIDER)?;
    let mut wire = MessageWire::default();
    let role = match role_name.as_str() {
        "system" => Role::System,
        "developer" => {
            wire.role = Some(RoleAlias::Developer);
            Role::System
        }
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "unknown role {other:?} (expected system, developer, user, assistant or tool)"
                ),
            ))
        }
    };

    let content_field = object.remove("content");
    let content = if role == Role::Tool {
        let call_id = take_string(&mut object, "tool_call_id", PROVIDER)?;
        let (output, shape) = match content_field {
            Some(Value::String(text)) => (ToolOutput::Text(text), ContentShape::Blocks),
            Some(Value::Array(parts)) => (
                ToolOutput::Blocks(decode_parts(parts)),
                ContentShape::Blocks,
            ),
            Some(Value::Null) => (ToolOutput::Text(String::new()), ContentShape::Null),
            None => (ToolOutput::Text(String::new()), ContentShape::Absent),
            Some(other) => {
                return Err(conversion(
                    PROVIDER,
                    format!(
                        "tool message content must be a string or a list, found {}",
                        json_kind(&other)
                    ),
                ))
            }
        };
        vec![ContentBlock::tool_result(ToolResult {
            wire: ToolResultWire {
                output: shape,
                is_error_present: false,
            },
            ..ToolResult::new(call_id, output)
        })]
    } else {
        let (blocks, shape) = match content_field {
            Some(Value::String(text)) => (vec![ContentBlock::text(text)], ContentShape::String),
            Some(Value::Array(parts)) => (decode_parts(parts), ContentShape::Blocks),
            Some(Value::Null) => (Vec::new(), ContentShape::Null),
            None => (Vec::new(), ContentShape::Absent),
            Some(other) => {
                return Err(conversion(
                    PROVIDER,
                    format!(
                        "content must be a string, a list or null, found {}",
                        json_kind(&other)
                    ),
                ))
            }
        };
        wire.content = shape;
        blocks
    };

    let mut content = content;
    // Only assistant messages carry tool calls; on any other role the field stays in
    // `extra`, verbatim.
    let tool_calls = if role == Role::Assistant {
        object.remove("tool_calls")
    } else {
        None
    };
    match tool_calls {
        None => {}
        Some(Value::Null) => wire.tool_calls = ListShape::Null,
        Some(Value::Array(calls)) => {
            if calls.is_empty() {
                wire.tool_calls = ListShape::Empty;
            }
            for call in calls {
                content.push(ContentBlock::tool_call(decode_tool_call(&call)?));
            }
        }
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!("tool_calls must be a list, found {}", json_kind(&other)),
            ))
        }
    }

    Ok(Message {
        role,
        content,
        extra: object,
        wire,
    })
}

fn decode_parts(parts: Vec<Value>) -> Vec<ContentBlock> {
    parts.into_iter().map(decode_part).collect()
}

fn decode_part(part: Value) -> ContentBlock {
    let is_text = part.get("type").and_then(Value::as_str) == Some("text")
        && part.get("text").is_some_and(Value::is_string);
    if !is_text {
        return ContentBlock::Other { value: part };
    }
    let Value::Object(mut object) = part else {
        unreachable!("checked to be an object with a type field")
    };
    object.remove("type");
    let Some(Value::String(text)) = object.remove("text") else {
        unreachable!("checked to be a string")
    };
    ContentBlock::Text(TextBlock {
        text,
        extra: object,
    })
}

fn decode_tool_call(call: &Value) -> Result<ToolCall> {
    let mut object = as_object(call, PROVIDER, "a tool call")?;
    let id = take_string(&mut object, "id", PROVIDER)?;
    let mut wire = ToolCallWire::default();
    match object.remove("type") {
        None => wire.type_absent = true,
        Some(Value::String(kind)) if kind == "function" => {}
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!("tool call {id:?} has type {other}; only \"function\" calls are supported"),
            ))
        }
    }
    let function = object
        .remove("function")
        .ok_or_else(|| conversion(PROVIDER, format!("tool call {id:?} has no `function`")))?;
    let mut function = as_object(&function, PROVIDER, "a tool call's `function`")?;
    let name = take_string(&mut function, "name", PROVIDER)?;
    let arguments = take_string(&mut function, "arguments", PROVIDER)?;
    wire.function_extra = function;
    Ok(ToolCall {
        id,
        name,
        arguments: ToolArguments::Text(arguments),
        extra: object,
        wire,
    })
}

pub(super) fn encode(message: &Message) -> Result<Value> {
    let mut object = message.extra.clone();
    let role = match (message.role, &message.wire.role) {
        (_, Some(alias)) => alias.as_str().to_owned(),
        (Role::System, None) => "system".to_owned(),
        (Role::User, None) => "user".to_owned(),
        (Role::Assistant, None) => "assistant".to_owned(),
        (Role::Tool, None) => "tool".to_owned(),
    };
    object.insert("role".to_owned(), Value::String(role));

    if message.role == Role::Tool {
        let [ContentBlock::ToolResult(result)] = message.content.as_slice() else {
            return Err(conversion(
                PROVIDER,
                "a tool message must hold exactly one tool result",
            ));
        };
        object.insert(
            "tool_call_id".to_owned(),
            Value::String(result.call_id.clone()),
        );
        match (&result.output, result.wire.output) {
            (ToolOutput::Text(text), ContentShape::Null) if text.is_empty() => {
                object.insert("content".to_owned(), Value::Null);
            }
            (ToolOutput::Text(text), ContentShape::Absent) if text.is_empty() => {}
            (ToolOutput::Text(text), _) => {
                object.insert("content".to_owned(), Value::String(text.clone()));
            }
            (ToolOutput::Blocks(blocks), _) => {
                object.insert("content".to_owned(), Value::Array(encode_parts(blocks)?));
            }
        }
        return Ok(Value::Object(object));
    }

    let (calls, parts): (Vec<&ContentBlock>, Vec<&ContentBlock>) = message
        .content
        .iter()
        .partition(|b| matches!(b, ContentBlock::ToolCall(_)));
    let parts: Vec<ContentBlock> = parts.into_iter().cloned().collect();
    let content = match (message.wire.content, parts.as_slice()) {
        (ContentShape::String, [ContentBlock::Text(t)]) if t.extra.is_empty() => {
            Some(Value::String(t.text.clone()))
        }
        (ContentShape::Null, []) => Some(Value::Null),
        (ContentShape::Absent, []) => None,
        _ => Some(Value::Array(encode_parts(&parts)?)),
    };
    if let Some(content) = content {
        object.insert("content".to_owned(), content);
    }

    let calls: Vec<Value> = calls
        .into_iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall(call) => Some(encode_tool_call(call)),
            _ => None,
        })
        .collect();
    match (message.wire.tool_calls, calls.is_empty()) {
        (_, false) => {
            object.insert("tool_calls".to_owned(), Value::Array(calls));
        }
        (ListShape::Empty, true) => {
            object.insert("tool_calls".to_owned(), Value::Array(Vec::new()));
        }
        (ListShape::Null, true) => {
            object.insert("tool_calls".to_owned(), Value::Null);
        }
        (ListShape::Derived, true) => {}
    }
    Ok(Value::Object(object))
}

fn encode_parts(blocks: &[ContentBlock]) -> Result<Vec<Value>> {
    blocks
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => {
                let mut part = t.extra.clone();
                part.insert("type".to_owned(), Value::String("text".to_owned()));
                part.insert("text".to_owned(), Value::String(t.text.clone()));
                Ok(Value::Object(part))
            }
            ContentBlock::Other { value } => Ok(value.clone()),
            ContentBlock::ToolCall(call) => Err(conversion(
                PROVIDER,
                format!("tool call {:?} cannot appear inside content", call.id),
            )),
            ContentBlock::ToolResult(result) => Err(conversion(
                PROVIDER,
                format!(
                    "tool result for {:?} must be its own tool message",
                    result.call_id
                ),
            )),
        })
        .collect()
}

fn encode_tool_call(call: &ToolCall) -> Value {
    let mut function = call.wire.function_extra.clone();
    function.insert("name".to_owned(), Value::String(call.name.clone()));
    let arguments = match &call.arguments {
        ToolArguments::Text(text) => text.clone(),
        ToolArguments::Json(value) => value.to_string(),
    };
    function.insert("arguments".to_owned(), Value::String(arguments));
    let mut object: Map<String, Value> = call.extra.clone();
    object.insert("id".to_owned(), Value::String(call.id.clone()));
    if !call.wire.type_absent {
        object.insert("type".to_owned(), Value::String("function".to_owned()));
    }
    object.insert("function".to_owned(), Value::Object(function));
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(wire: &Value) -> Message {
        super::super::tests::assert_round_trip(decode, encode, wire)
    }

    #[test]
    fn shapes_survive() {
        round_trip(&json!({"role": "user", "content": "hi"}));
        round_trip(&json!({"role": "user", "content": [{"type": "text", "text": "hi"}]}));
        round_trip(&json!({"role": "assistant", "content": null, "refusal": "no"}));
        round_trip(&json!({"role": "assistant"}));
        round_trip(&json!({"role": "assistant", "content": "x", "tool_calls": []}));
        round_trip(&json!({"role": "assistant", "content": "x", "tool_calls": null}));
        round_trip(&json!({"role": "developer", "content": "be brief"}));
        round_trip(&json!({"role": "tool", "tool_call_id": "c", "content": null}));
        round_trip(&json!({"role": "tool", "tool_call_id": "c"}));
        round_trip(&json!({"role": "tool", "tool_call_id": "c", "content": "x", "tool_calls": []}));
        round_trip(&json!({"role": "user", "content": "x", "tool_calls": null}));
        round_trip(&json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:x"}},
            {"type": "text", "text": "what is this", "cache": 1.0}
        ]}));
    }

    #[test]
    fn tool_calls_keep_argument_bytes() {
        let wire = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":  1.10}"}},
            {"id": "c2", "function": {"name": "g", "arguments": "not json", "strict": true}, "index": 0}
        ]});
        let message = round_trip(&wire);
        let calls: Vec<&ToolCall> = message.tool_calls().collect();
        assert_eq!(
            calls[0].arguments,
            ToolArguments::Text("{\"a\":  1.10}".into())
        );
        assert_eq!(calls[1].name, "g");
    }

    #[test]
    fn rejects_what_it_cannot_keep() {
        assert!(decode(&json!("text")).is_err());
        assert!(decode(&json!({"role": "wizard", "content": "x"})).is_err());
        assert!(decode(&json!({"role": "tool", "content": "x"})).is_err());
        assert!(decode(&json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]})).is_err());
        let two = Message::new(
            Role::Tool,
            vec![
                ContentBlock::tool_result(ToolResult::new("a", "1")),
                ContentBlock::tool_result(ToolResult::new("b", "2")),
            ],
        );
        assert!(encode(&two).is_err());
    }
}
