//! Gemini `generateContent` contents to and from the neutral model.
//!
//! A message is one `Content`: `{"role": "user" | "model", "parts": [...]}`. `model` is
//! [`Role::Assistant`]; `user` (and a content without `role`) [`Role::User`]. Parts:
//!
//! | part | neutral |
//! |---|---|
//! | `text` (not marked `thought`) | [`ContentBlock::Text`], the part's other fields (`thoughtSignature`, ...) in its `extra` |
//! | `functionCall` | a [`ToolCall`] with JSON arguments (`args`; `{}` when absent) |
//! | `functionResponse` | a [`ToolResult`] whose output is the JSON text of `response` |
//! | anything else (`thought` text, `inlineData`, `fileData`, `executableCode`, `codeExecutionResult`, unknown parts) | [`ContentBlock::Other`], verbatim |
//!
//! Keys are read in both spellings the API accepts (`functionCall` and `function_call`,
//! `thoughtSignature` and `thought_signature`) and given back as they came.
//!
//! **Calls and results without ids.** Gemini's `functionCall` and `functionResponse` have an
//! optional `id`, which the API often leaves out; results then answer calls by name, in
//! order. A call or result without an id gets `<name>-<k>`, where `k` counts the earlier
//! calls (or results) of that name in the same content, from 0: the `k`-th response to a
//! function answers its `k`-th call, as Gemini pairs them when a model content's calls are
//! answered in one user content. The made-up id is marked and never sent back. A result
//! that a `Session` made for such a call carries no `name`; [`Codec::export`](super::Codec)
//! finds it at the call.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{
    block_error, conversion, foreign, into_object, json_kind, take_string, Codec, ContentBlock,
    ContentShape, Message, MessageWire, Role, TextBlock, ToolArguments, ToolCall, ToolCallWire,
    ToolOutput, ToolResult, ToolResultWire,
};
use crate::error::Result;

const PROVIDER: &str = "gemini";

/// The two spellings of a key: the REST API's camel case and the proto field name.
fn spelled<'a>(
    object: &'a Map<String, Value>,
    camel: &str,
    snake: &str,
) -> Option<(&'a Value, bool)> {
    match (object.get(camel), object.get(snake)) {
        (Some(value), None) => Some((value, false)),
        (None, Some(value)) => Some((value, true)),
        _ => None,
    }
}

pub(super) fn decode(content: Value) -> Result<Message> {
    let mut object = into_object(content, PROVIDER, "a content")?;
    let mut wire = MessageWire {
        codec: Some(Codec::Gemini),
        ..MessageWire::default()
    };
    let role = match object.remove("role") {
        None => {
            wire.role_absent = true;
            Role::User
        }
        Some(Value::String(role)) if role == "user" => Role::User,
        Some(Value::String(role)) if role == "model" => Role::Assistant,
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!("`role` must be \"user\" or \"model\", found {other}"),
            ))
        }
    };
    let parts = match object.remove("parts") {
        Some(Value::Array(parts)) => parts,
        None => {
            wire.content = ContentShape::Absent;
            Vec::new()
        }
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!("`parts` must be a list, found {}", json_kind(&other)),
            ))
        }
    };
    let mut calls_of: HashMap<String, usize> = HashMap::new();
    let mut results_of: HashMap<String, usize> = HashMap::new();
    let mut blocks = Vec::with_capacity(parts.len());
    for (index, part) in parts.into_iter().enumerate() {
        blocks.push(decode_part(index, part, &mut calls_of, &mut results_of)?);
    }
    Ok(Message {
        role,
        content: blocks,
        extra: object,
        wire,
        rare: None,
    })
}

/// `<name>-<k>` for the `k`-th id-less call (or result) of `name` in a content.
fn synthetic_id(name: &str, seen: &mut HashMap<String, usize>) -> String {
    let k = seen.entry(name.to_owned()).or_insert(0);
    let id = format!("{name}-{k}");
    *k += 1;
    id
}

fn decode_part(
    index: usize,
    part: Value,
    calls_of: &mut HashMap<String, usize>,
    results_of: &mut HashMap<String, usize>,
) -> Result<ContentBlock> {
    let Value::Object(mut object) = part else {
        return Err(conversion(
            PROVIDER,
            format!(
                "part {index} must be a JSON object, found {}",
                json_kind(&part)
            ),
        ));
    };
    let thought = object.get("thought").and_then(Value::as_bool) == Some(true);
    if let (Some(Value::String(_)), false) = (object.get("text"), thought) {
        let Some(Value::String(text)) = object.remove("text") else {
            unreachable!("checked to be a string")
        };
        return Ok(ContentBlock::Text(TextBlock {
            text,
            extra: object,
        }));
    }
    if let Some((_, snake_case)) = spelled(&object, "functionCall", "function_call") {
        return decode_call(index, object, snake_case, calls_of);
    }
    if let Some((_, snake_case)) = spelled(&object, "functionResponse", "function_response") {
        return decode_response(index, object, snake_case, results_of);
    }
    Ok(ContentBlock::Other {
        value: Value::Object(object),
    })
}

fn decode_call(
    index: usize,
    mut object: Map<String, Value>,
    snake_case: bool,
    calls_of: &mut HashMap<String, usize>,
) -> Result<ContentBlock> {
    let key = if snake_case {
        "function_call"
    } else {
        "functionCall"
    };
    let at = format!("part {index} ({key})");
    let Some(Value::Object(mut call)) = object.remove(key) else {
        return Err(conversion(PROVIDER, format!("{at} must be a JSON object")));
    };
    let name = take_string(&mut call, "name", PROVIDER).map_err(|e| within(&at, e))?;
    let (id, id_synthetic) = match call.remove("id") {
        Some(Value::String(id)) => (id, false),
        None => (synthetic_id(&name, calls_of), true),
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!("{at}: `id` must be a string, found {}", json_kind(&other)),
            ))
        }
    };
    let (arguments, arguments_absent) = match call.remove("args") {
        Some(args @ Value::Object(_)) => (args, false),
        None => (Value::Object(Map::new()), true),
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "{at}: `args` must be a JSON object, found {}",
                    json_kind(&other)
                ),
            ))
        }
    };
    Ok(ContentBlock::tool_call(ToolCall {
        id,
        name,
        arguments: ToolArguments::Json(arguments),
        extra: object,
        wire: ToolCallWire {
            id_synthetic,
            snake_case,
            arguments_absent,
            function_extra: call,
            ..ToolCallWire::default()
        },
    }))
}

fn decode_response(
    index: usize,
    mut object: Map<String, Value>,
    snake_case: bool,
    results_of: &mut HashMap<String, usize>,
) -> Result<ContentBlock> {
    let key = if snake_case {
        "function_response"
    } else {
        "functionResponse"
    };
    let at = format!("part {index} ({key})");
    let Some(Value::Object(mut response)) = object.remove(key) else {
        return Err(conversion(PROVIDER, format!("{at} must be a JSON object")));
    };
    let name = take_string(&mut response, "name", PROVIDER).map_err(|e| within(&at, e))?;
    let (call_id, id_synthetic) = match response.remove("id") {
        Some(Value::String(id)) => (id, false),
        None => (synthetic_id(&name, results_of), true),
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!("{at}: `id` must be a string, found {}", json_kind(&other)),
            ))
        }
    };
    let output = match response.remove("response") {
        Some(value @ Value::Object(_)) => value.to_string(),
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "{at}: `response` must be a JSON object, found {}",
                    json_kind(&other)
                ),
            ))
        }
        None => return Err(conversion(PROVIDER, format!("{at}: `response` is missing"))),
    };
    Ok(ContentBlock::tool_result(ToolResult {
        call_id,
        output: ToolOutput::Text(output),
        is_error: false,
        extra: object,
        wire: ToolResultWire {
            name: Some(name),
            id_synthetic,
            response_json: true,
            snake_case,
            function_extra: response,
            ..ToolResultWire::default()
        },
    }))
}

fn within(at: &str, error: crate::Error) -> crate::Error {
    match error {
        crate::Error::Conversion { problem, .. } => {
            conversion(PROVIDER, format!("{at}: {problem}"))
        }
        other => other,
    }
}

/// Encodes `message`; `names` gives the tool's name for results that do not carry it (by
/// call id, from the calls before them in a transcript).
pub(super) fn encode(
    message: &Message,
    names: Option<&HashMap<String, (String, bool)>>,
) -> Result<Value> {
    foreign::check_role(message.role, PROVIDER, Codec::Gemini)?;
    let plain;
    let message = if message.wire.codec == Some(Codec::Gemini) {
        message
    } else {
        plain = foreign::plain(message, PROVIDER, Codec::Gemini)?;
        &plain
    };
    let mut object = message.extra.clone();
    if !message.wire.role_absent || message.role != Role::User {
        let role = if message.role == Role::Assistant {
            "model"
        } else {
            "user"
        };
        object.insert("role".to_owned(), Value::from(role));
    }
    let parts = message
        .content
        .iter()
        .enumerate()
        .map(|(index, block)| encode_part(index, block, message.role, names))
        .collect::<Result<Vec<_>>>()?;
    if !(parts.is_empty() && message.wire.content == ContentShape::Absent) {
        object.insert("parts".to_owned(), Value::Array(parts));
    }
    Ok(Value::Object(object))
}

fn encode_part(
    index: usize,
    block: &ContentBlock,
    role: Role,
    names: Option<&HashMap<String, (String, bool)>>,
) -> Result<Value> {
    Ok(match block {
        ContentBlock::Text(text) => {
            let mut object = text.extra.clone();
            object.insert("text".to_owned(), Value::String(text.text.clone()));
            Value::Object(object)
        }
        ContentBlock::Other { value } => value.clone(),
        ContentBlock::ToolCall(call) => encode_call(index, call, role)?,
        ContentBlock::ToolResult(result) => encode_result(index, result, names)?,
    })
}

fn encode_call(index: usize, call: &ToolCall, role: Role) -> Result<Value> {
    let at = format!("content block {index} (tool call {:?})", call.id);
    if role != Role::Assistant {
        return Err(block_error(
            PROVIDER,
            &at,
            "Gemini takes function calls only in model contents",
        ));
    }
    let mut inner = call.wire.function_extra.clone();
    if !call.wire.id_synthetic {
        inner.insert("id".to_owned(), Value::String(call.id.clone()));
    }
    inner.insert("name".to_owned(), Value::String(call.name.clone()));
    let args = match &call.arguments {
        ToolArguments::Json(value @ Value::Object(_)) => Some(value.clone()),
        ToolArguments::Json(other) => {
            return Err(block_error(PROVIDER, &at, format!("Gemini requires `args` to be a JSON object, but the arguments are {}", json_kind(other))))
        }
        ToolArguments::Text(text) if text.trim().is_empty() => Some(Value::Object(Map::new())),
        ToolArguments::Text(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => Some(value),
            Ok(other) => return Err(block_error(PROVIDER, &at, format!("Gemini requires `args` to be a JSON object, but the arguments are JSON text holding {}", json_kind(&other)))),
            Err(e) => return Err(block_error(PROVIDER, &at, format!("Gemini requires `args` to be a JSON object, but the arguments are text that is not JSON ({e})"))),
        },
    };
    let empty = args
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty);
    if let Some(args) = args.filter(|_| !(call.wire.arguments_absent && empty)) {
        inner.insert("args".to_owned(), args);
    }
    let mut object = call.extra.clone();
    let key = if call.wire.snake_case {
        "function_call"
    } else {
        "functionCall"
    };
    object.insert(key.to_owned(), Value::Object(inner));
    Ok(Value::Object(object))
}

fn encode_result(
    index: usize,
    result: &ToolResult,
    names: Option<&HashMap<String, (String, bool)>>,
) -> Result<Value> {
    let at = format!(
        "content block {index} (tool_result for {:?})",
        result.call_id
    );
    let found = names.and_then(|names| names.get(&result.call_id));
    let Some(name) = result
        .wire
        .name
        .clone()
        .or_else(|| found.map(|(name, _)| name.clone()))
    else {
        return Err(block_error(
            PROVIDER,
            &at,
            "a Gemini function response names its function, and this result does not say which tool it answers; export the whole transcript with Codec::Gemini.export, which finds the name at the call",
        ));
    };
    let id_synthetic = result.wire.id_synthetic || found.is_some_and(|(_, synthetic)| *synthetic);
    let mut inner = result.wire.function_extra.clone();
    if !id_synthetic {
        inner.insert("id".to_owned(), Value::String(result.call_id.clone()));
    }
    inner.insert("name".to_owned(), Value::String(name));
    let response = match &result.output {
        ToolOutput::Text(text) if result.wire.response_json => {
            match serde_json::from_str::<Value>(text) {
                Ok(value @ Value::Object(_)) => value,
                _ => {
                    return Err(block_error(
                        PROVIDER,
                        &at,
                        "the output is no longer the JSON object Gemini's response was",
                    ))
                }
            }
        }
        ToolOutput::Text(text) => {
            let key = if result.is_error { "error" } else { "output" };
            let mut response = Map::new();
            response.insert(key.to_owned(), Value::String(text.clone()));
            Value::Object(response)
        }
        ToolOutput::Blocks(blocks) => {
            let mut text = String::new();
            for (inner_index, block) in blocks.iter().enumerate() {
                let ContentBlock::Text(part) = block else {
                    return Err(block_error(
                        PROVIDER,
                        &format!("{at}, its content block {inner_index}"),
                        "Gemini function responses take text here; drop the block before export",
                    ));
                };
                text.push_str(&part.text);
            }
            let key = if result.is_error { "error" } else { "output" };
            let mut response = Map::new();
            response.insert(key.to_owned(), Value::String(text));
            Value::Object(response)
        }
    };
    inner.insert("response".to_owned(), response);
    let mut object = result.extra.clone();
    let key = if result.wire.snake_case {
        "function_response"
    } else {
        "functionResponse"
    };
    object.insert(key.to_owned(), Value::Object(inner));
    Ok(Value::Object(object))
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
        super::super::tests::assert_round_trip(decode, |m| encode(m, None), wire)
    }

    #[test]
    fn contents_survive() {
        round_trip(&json!({"role": "user", "parts": [{"text": "What's the weather in Paris?"}]}));
        round_trip(&json!({"parts": [{"text": "no role"}]}));
        round_trip(&json!({"role": "model"}));
        let call = round_trip(&json!({"role": "model", "parts": [
            {"text": "Let me check.", "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
            {"function_call": {"id": "fc_9", "name": "get_time"}, "thought_signature": "AAA"}
        ]}));
        let ids: Vec<&str> = call.tool_calls().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["get_weather-0", "get_weather-1", "fc_9"]);
        let results = round_trip(&json!({"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"temp": 21, "unit": "C"}}},
            {"functionResponse": {"name": "get_weather", "response": {"temp": 18}}},
            {"function_response": {"id": "fc_9", "name": "get_time", "response": {"output": "12:00"}, "willContinue": false}}
        ]}));
        let ids: Vec<&str> = results.tool_results().map(|r| r.call_id.as_str()).collect();
        assert_eq!(ids, ["get_weather-0", "get_weather-1", "fc_9"]);
        round_trip(&json!({"role": "model", "parts": [
            {"text": "thinking...", "thought": true},
            {"inlineData": {"mimeType": "image/png", "data": "iVBOR"}},
            {"file_data": {"mime_type": "application/pdf", "file_uri": "gs://b/a.pdf"}},
            {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
            {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1\n"}},
            {"hologram": {}}
        ]}));
    }

    #[test]
    fn refuses_contents_of_the_wrong_shape() {
        for content in [
            json!([]),
            json!({"role": "system", "parts": []}),
            json!({"role": "user", "parts": {}}),
            json!({"role": "user", "parts": ["x"]}),
            json!({"role": "model", "parts": [{"functionCall": {"args": {}}}]}),
            json!({"role": "model", "parts": [{"functionCall": {"name": "f", "args": []}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "f", "response": "x"}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "f"}}]}),
        ] {
            assert!(decode(&content).is_err(), "{content}");
        }
    }

    #[test]
    fn ids_anthropic_cannot_take_are_refused_there() {
        let call = decode(&json!({"role": "model", "parts": [
            {"functionCall": {"name": "tools.get_weather", "args": {}}}]}))
        .unwrap();
        let err = call.to_anthropic().unwrap_err().to_string();
        assert!(err.contains("tool_use ids"), "{err}");
        assert!(call.to_openai_chat().is_ok());
    }

    #[test]
    fn results_made_in_rust_need_their_tool_name() {
        let made = Message::tool_result(ToolResult::new("get_weather-0", "sunny"));
        assert!(encode(&made, None).is_err());
        let names: HashMap<String, (String, bool)> =
            [("get_weather-0".to_owned(), ("get_weather".to_owned(), true))].into();
        assert_eq!(
            encode(&made, Some(&names)).unwrap(),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}}]})
        );
    }
}
