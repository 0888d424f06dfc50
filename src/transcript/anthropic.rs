//! Anthropic Messages API messages to and from the neutral model.

use serde_json::{Map, Value};

use super::{
    as_object, conversion, json_kind, take_string, ContentBlock, ContentShape, Message,
    MessageWire, Role, TextBlock, ToolArguments, ToolCall, ToolCallWire, ToolOutput, ToolResult,
    ToolResultWire,
};
use crate::error::Result;

const PROVIDER: &str = "anthropic";

pub(super) fn decode(message: &Value) -> Result<Message> {
    let mut object = as_object(message, PROVIDER, "a message")?;
    let role = match take_string(&mut object, "role", PROVIDER)?.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        other => {
            return Err(conversion(
                PROVIDER,
                format!("unknown role {other:?} (expected user or assistant)"),
            ))
        }
    };
    let mut wire = MessageWire::default();
    let content = match object.remove("content") {
        Some(Value::String(text)) => {
            wire.content = ContentShape::String;
            vec![ContentBlock::text(text)]
        }
        Some(Value::Array(blocks)) => decode_blocks(blocks)?,
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "content must be a string or a list, found {}",
                    json_kind(&other)
                ),
            ))
        }
        None => return Err(conversion(PROVIDER, "`content` is missing")),
    };
    Ok(Message {
        role,
        content,
        extra: object,
        wire,
    })
}

fn decode_blocks(blocks: Vec<Value>) -> Result<Vec<ContentBlock>> {
    blocks.into_iter().map(decode_block).collect()
}

fn decode_block(block: Value) -> Result<ContentBlock> {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" if block.get("text").is_some_and(Value::is_string) => {
            let mut object = as_object(&block, PROVIDER, "a text block")?;
            object.remove("type");
            let text = take_string(&mut object, "text", PROVIDER)?;
            Ok(ContentBlock::Text(TextBlock {
                text,
                extra: object,
            }))
        }
        "tool_use" => {
            let mut object = as_object(&block, PROVIDER, "a tool_use block")?;
            object.remove("type");
            let id = take_string(&mut object, "id", PROVIDER)?;
            let name = take_string(&mut object, "name", PROVIDER)?;
            let input = object
                .remove("input")
                .ok_or_else(|| conversion(PROVIDER, format!("tool_use {id:?} has no `input`")))?;
            Ok(ContentBlock::tool_call(ToolCall {
                id,
                name,
                arguments: ToolArguments::Json(input),
                extra: object,
                wire: ToolCallWire::default(),
            }))
        }
        "tool_result" => {
            let mut object = as_object(&block, PROVIDER, "a tool_result block")?;
            object.remove("type");
            let call_id = take_string(&mut object, "tool_use_id", PROVIDER)?;
            let mut wire = ToolResultWire::default();
            let output = match object.remove("content") {
                Some(Value::String(text)) => ToolOutput::Text(text),
                Some(Value::Array(blocks)) => ToolOutput::Blocks(decode_blocks(blocks)?),
                None => {
                    wire.output = ContentShape::Absent;
                    ToolOutput::Text(String::new())
                }
                Some(other) => {
                    return Err(conversion(
                        PROVIDER,
                        format!(
                            "tool_result for {call_id:?} has content of {}",
                            json_kind(&other)
                        ),
                    ))
                }
            };
            let is_error = match object.remove("is_error") {
                None => false,
                Some(Value::Bool(flag)) => {
                    wire.is_error_present = true;
                    flag
                }
                Some(other) => {
                    return Err(conversion(
                        PROVIDER,
                        format!(
                            "tool_result for {call_id:?} has is_error of {}",
                            json_kind(&other)
                        ),
                    ))
                }
            };
            Ok(ContentBlock::tool_result(ToolResult {
                call_id,
                output,
                is_error,
                extra: object,
                wire,
            }))
        }
        _ => Ok(ContentBlock::Other { value: block }),
    }
}

pub(super) fn encode(message: &Message) -> Result<Value> {
    let mut object = message.extra.clone();
    let role = match message.role {
        Role::User | Role::Tool => "user",
        Role::Assistant => "assistant",
        Role::System => {
            return Err(conversion(
                PROVIDER,
                "system prompts are a request field, not a message, in this API",
            ))
        }
    };
    object.insert("role".to_owned(), Value::String(role.to_owned()));
    let content = match (message.wire.content, message.content.as_slice()) {
        (ContentShape::String, [ContentBlock::Text(t)]) if t.extra.is_empty() => {
            Value::String(t.text.clone())
        }
        (_, blocks) => Value::Array(encode_blocks(blocks)),
    };
    object.insert("content".to_owned(), content);
    Ok(Value::Object(object))
}

fn encode_blocks(blocks: &[ContentBlock]) -> Vec<Value> {
    blocks.iter().map(encode_block).collect()
}

fn encode_block(block: &ContentBlock) -> Value {
    let (kind, mut object): (&str, Map<String, Value>) = match block {
        ContentBlock::Other { value } => return value.clone(),
        ContentBlock::Text(t) => {
            let mut object = t.extra.clone();
            object.insert("text".to_owned(), Value::String(t.text.clone()));
            ("text", object)
        }
        ContentBlock::ToolCall(call) => {
            let mut object = call.extra.clone();
            object.insert("id".to_owned(), Value::String(call.id.clone()));
            object.insert("name".to_owned(), Value::String(call.name.clone()));
            let input = match &call.arguments {
                ToolArguments::Json(value) => value.clone(),
                // Text arguments came from another provider; Anthropic wants a value. Text
                // that is not JSON is passed on as a string rather than dropped.
                ToolArguments::Text(text) => {
                    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
                }
            };
            object.insert("input".to_owned(), input);
            ("tool_use", object)
        }
        ContentBlock::ToolResult(result) => {
            let mut object = result.extra.clone();
            object.insert(
                "tool_use_id".to_owned(),
                Value::String(result.call_id.clone()),
            );
            match &result.output {
                ToolOutput::Text(text)
                    if text.is_empty() && result.wire.output == ContentShape::Absent => {}
                ToolOutput::Text(text) => {
                    object.insert("content".to_owned(), Value::String(text.clone()));
                }
                ToolOutput::Blocks(blocks) => {
                    object.insert("content".to_owned(), Value::Array(encode_blocks(blocks)));
                }
            }
            if result.is_error || result.wire.is_error_present {
                object.insert("is_error".to_owned(), Value::Bool(result.is_error));
            }
            ("tool_result", object)
        }
    };
    object.insert("type".to_owned(), Value::String(kind.to_owned()));
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
    fn blocks_survive() {
        round_trip(&json!({"role": "user", "content": "hi"}));
        round_trip(&json!({"role": "user", "content": []}));
        let message = round_trip(&json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "EqQBCgIYAh"},
            {"type": "text", "text": "Sure", "citations": null},
            {"type": "tool_use", "id": "t1", "name": "get", "input": {"n": 1.0}, "caller": {"type": "direct"}}
        ]}));
        assert_eq!(message.tool_calls().count(), 1);
        round_trip(&json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "bad", "is_error": true},
            {"type": "tool_result", "tool_use_id": "t3", "content": [{"type": "text", "text": "x"}], "is_error": false},
            {"type": "tool_result", "tool_use_id": "t4"}
        ]}));
    }

    #[test]
    fn rejects_what_it_cannot_keep() {
        assert!(decode(&json!({"role": "system", "content": "x"})).is_err());
        assert!(decode(&json!({"role": "user"})).is_err());
        assert!(decode(
            &json!({"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b"}]})
        )
        .is_err());
        assert!(decode(&json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "is_error": "yes"}]})).is_err());
    }
}
