//! OpenAI Chat Completions messages to and from the neutral model.
//!
//! # Messages from another provider
//!
//! [`encode`] writes OpenAI's own messages back exactly as they came. A message that holds
//! what only Anthropic sends is translated where the translation is exact, and refused with
//! [`Error::Conversion`](crate::Error::Conversion) naming the block otherwise:
//!
//! * `image` blocks become `image_url` parts (in user messages);
//! * a user message holding exactly one tool result becomes a `tool` message;
//! * `citations: null` on text and `caller: {"type": "direct"}` on tool calls are dropped;
//! * the other Anthropic block types ([`anthropic::ONLY_BLOCKS`]), citations, calls made
//!   by a server tool and error results are refused.
//!
//! So that a message from OpenAI is still given back unchanged, [`decode`] refuses exactly
//! what [`encode`] would translate or refuse: OpenAI never sends it.

use serde_json::{Map, Value};

use super::{
    anthropic, block_error, conversion, into_object, json_kind, take_string, ContentBlock,
    ContentShape, ListShape, Message, MessageWire, Role, RoleAlias, TextBlock, ToolArguments,
    ToolCall, ToolCallWire, ToolOutput, ToolResult, ToolResultWire,
};
use crate::error::Result;

const PROVIDER: &str = "openai-chat";

/// Fields of OpenAI Chat Completions messages (request and response) that the neutral
/// model keeps in `extra` and Anthropic messages do not have. On OpenAI messages that
/// cannot carry them (`tool_calls` on a user message) they are kept in `extra` too.
pub(super) const MESSAGE_FIELDS: &[&str] = &[
    "name",
    "refusal",
    "audio",
    "function_call",
    "annotations",
    "tool_calls",
    "tool_call_id",
];

/// Content part types of OpenAI (Chat Completions, and the Responses API items the Chat
/// converter keeps) that Anthropic has no block for, with what each is. `text` and
/// `image_url` are translated instead.
const ONLY_PARTS: &[(&str, &str)] = &[
    ("input_audio", "an audio input"),
    ("file", "a file input"),
    ("refusal", "the model's refusal"),
    ("input_text", "a Responses API input text"),
    ("output_text", "a Responses API output text"),
    ("input_image", "a Responses API input image"),
    ("input_file", "a Responses API input file"),
];

/// What [`ONLY_PARTS`] says `kind` is, if it is one of them.
pub(super) fn only_part(kind: &str) -> Option<&'static str> {
    ONLY_PARTS
        .iter()
        .find(|(name, _)| *name == kind)
        .map(|(_, what)| *what)
}

/// The neutral role of an OpenAI role name, with the alias that gives the name back.
fn decode_role(name: &str) -> Result<(Role, Option<RoleAlias>)> {
    Ok(match name {
        "system" => (Role::System, None),
        "developer" => (Role::System, Some(RoleAlias::Developer)),
        "user" => (Role::User, None),
        "assistant" => (Role::Assistant, None),
        // Gemini's OpenAI compatibility mode names the model's turns as Gemini does.
        "model" => (Role::Assistant, Some(RoleAlias::Model)),
        "tool" => (Role::Tool, None),
        other => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "unknown role {other:?} (expected system, developer, user, assistant, model or tool)"
                ),
            ))
        }
    })
}

pub(super) fn decode(message: Value) -> Result<Message> {
    let mut object = into_object(message, PROVIDER, "a message")?;
    let role_name = take_string(&mut object, "role", PROVIDER)?;
    if role_name == "function" {
        return decode_function_result(object);
    }
    let mut wire = MessageWire::default();
    let (role, alias) = decode_role(&role_name)?;
    wire.role = alias;

    let content_field = object.remove("content");
    let content = if role == Role::Tool {
        let call_id = take_string(&mut object, "tool_call_id", PROVIDER)?;
        let (output, shape) = match content_field {
            Some(Value::String(text)) => (ToolOutput::Text(text), ContentShape::Blocks),
            Some(Value::Array(parts)) => (
                ToolOutput::Blocks(decode_parts(parts)?),
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
                ..ToolResultWire::default()
            },
            ..ToolResult::new(call_id, output)
        })]
    } else {
        let (blocks, shape) = match content_field {
            Some(Value::String(text)) => (vec![ContentBlock::text(text)], ContentShape::String),
            Some(Value::Array(parts)) => (decode_parts(parts)?, ContentShape::Blocks),
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
                content.push(ContentBlock::tool_call(decode_tool_call(call)?));
            }
        }
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!("tool_calls must be a list, found {}", json_kind(&other)),
            ))
        }
    }

    // The legacy form of a call: one `function_call` per assistant message, without an id.
    if role == Role::Assistant {
        if let Some(call) = take_legacy_call(&mut object)? {
            content.push(ContentBlock::tool_call(call));
        }
    }

    Ok(Message {
        role,
        content,
        extra: object,
        wire,
        rare: None,
    })
}

/// The legacy `function_call` object of an assistant message, taken out of `object`.
fn take_legacy_call(object: &mut Map<String, Value>) -> Result<Option<ToolCall>> {
    let Some(Value::Object(call)) = object.get("function_call") else {
        return Ok(None);
    };
    let mut call = call.clone();
    object.remove("function_call");
    let name = take_string(&mut call, "name", PROVIDER)?;
    let arguments = take_string(&mut call, "arguments", PROVIDER)?;
    Ok(Some(ToolCall {
        id: legacy_call_id(&name),
        name,
        arguments: ToolArguments::Text(arguments),
        extra: Map::new(),
        wire: ToolCallWire {
            legacy_function: true,
            id_synthetic: true,
            function_extra: call,
            ..ToolCallWire::default()
        },
    }))
}

/// The id of a legacy `function_call` and of the `function` message answering it: the
/// function's name and rank, as Gemini's id-less calls get (one call per message, so 0).
/// The legacy API answers a call with the next `function` message of that name; pairing
/// by this id does the same, since an id may be used again once its call is answered.
fn legacy_call_id(name: &str) -> String {
    format!("{name}-0")
}

/// A legacy `function` message (`{"role": "function", "name", "content"}`): the result of
/// the latest `function_call` of that name.
fn decode_function_result(mut object: Map<String, Value>) -> Result<Message> {
    let name = take_string(&mut object, "name", PROVIDER)?;
    let (output, shape) = match object.remove("content") {
        Some(Value::String(text)) => (ToolOutput::Text(text), ContentShape::Blocks),
        Some(Value::Null) => (ToolOutput::Text(String::new()), ContentShape::Null),
        None => (ToolOutput::Text(String::new()), ContentShape::Absent),
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "a function message's content must be a string or null, found {}",
                    json_kind(&other)
                ),
            ))
        }
    };
    Ok(Message {
        role: Role::Tool,
        content: vec![ContentBlock::tool_result(ToolResult {
            wire: ToolResultWire {
                output: shape,
                name: Some(name.clone()),
                id_synthetic: true,
                ..ToolResultWire::default()
            },
            ..ToolResult::new(legacy_call_id(&name), output)
        })],
        extra: object,
        wire: MessageWire::default(),
        rare: None,
    })
}

fn decode_parts(parts: Vec<Value>) -> Result<Vec<ContentBlock>> {
    parts
        .into_iter()
        .enumerate()
        .map(|(index, part)| decode_part(index, part))
        .collect()
}

fn decode_part(index: usize, part: Value) -> Result<ContentBlock> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
    // What `encode` translates or refuses, so that it gives back every part accepted here.
    if kind == "image" || anthropic::only_block(kind).is_some() {
        return Err(block_error(
            PROVIDER,
            &format!("content part {index} ({kind})"),
            "this is an Anthropic content block, which OpenAI Chat does not accept; convert the message with Message::from_anthropic",
        ));
    }
    let is_text = kind == "text" && part.get("text").is_some_and(Value::is_string);
    if !is_text {
        return Ok(ContentBlock::Other { value: part });
    }
    if part.get("citations").is_some() {
        return Err(block_error(
            PROVIDER,
            &format!("content part {index} (text)"),
            "`citations` is a field of Anthropic text blocks, not of OpenAI text parts; convert the message with Message::from_anthropic",
        ));
    }
    let Value::Object(mut object) = part else {
        unreachable!("checked to be an object with a type field")
    };
    object.remove("type");
    let Some(Value::String(text)) = object.remove("text") else {
        unreachable!("checked to be a string")
    };
    Ok(ContentBlock::Text(TextBlock {
        text,
        extra: object,
    }))
}

fn decode_tool_call(call: Value) -> Result<ToolCall> {
    let mut object = into_object(call, PROVIDER, "a tool call")?;
    let id = take_string(&mut object, "id", PROVIDER)?;
    if object.contains_key("caller") {
        return Err(conversion(
            PROVIDER,
            format!("tool call {id:?} has `caller`, a field of Anthropic tool_use blocks; convert the message with Message::from_anthropic"),
        ));
    }
    let mut wire = ToolCallWire::default();
    match object.remove("type") {
        None => wire.type_absent = true,
        Some(Value::String(kind)) if kind == "function" => {}
        // A custom tool: free-form text input rather than JSON arguments.
        Some(Value::String(kind)) if kind == "custom" => wire.custom = true,
        Some(other) => {
            return Err(conversion(
                PROVIDER,
                format!(
                    "tool call {id:?} has type {other}; only \"function\" and \"custom\" calls are supported"
                ),
            ))
        }
    }
    let (key, input) = if wire.custom {
        ("custom", "input")
    } else {
        ("function", "arguments")
    };
    let function = object
        .remove(key)
        .ok_or_else(|| conversion(PROVIDER, format!("tool call {id:?} has no `{key}`")))?;
    let mut function = into_object(function, PROVIDER, "a tool call's `function` or `custom`")?;
    let name = take_string(&mut function, "name", PROVIDER)?;
    let arguments = take_string(&mut function, input, PROVIDER)?;
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

    if message.role == Role::Tool {
        return encode_tool_message(object, role, message);
    }

    // Anthropic carries tool results in user messages; OpenAI gives each its own message.
    if let (Role::User, [ContentBlock::ToolResult(result)]) =
        (message.role, message.content.as_slice())
    {
        let at = At::top(0, "tool_result");
        if result.is_error {
            return Err(block_error(
                PROVIDER,
                &at.name(),
                format!(
                    "the result for {:?} is marked as an error, and OpenAI tool messages have no error flag; say so in its text and clear `is_error` before export",
                    result.call_id
                ),
            ));
        }
        object.insert("role".to_owned(), Value::String("tool".to_owned()));
        // Fields of the Anthropic block (`cache_control`), as fields of the message.
        for (key, value) in &result.extra {
            object.insert(key.clone(), value.clone());
        }
        encode_result_into(&mut object, result, &at)?;
        if !object.contains_key("content") {
            // OpenAI requires `content`; an Anthropic result may leave it out.
            object.insert("content".to_owned(), Value::String(String::new()));
        }
        return Ok(Value::Object(object));
    }
    object.insert("role".to_owned(), Value::String(role));

    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut json_arguments = false;
    let mut legacy = None;
    for (index, block) in message.content.iter().enumerate() {
        match block {
            ContentBlock::ToolCall(call) if call.wire.legacy_function => {
                if legacy.is_some() {
                    return Err(block_error(
                        PROVIDER,
                        &At::top(index, "tool call").name(),
                        "a message holds at most one legacy function_call",
                    ));
                }
                legacy = Some(encode_legacy_call(call));
            }
            ContentBlock::ToolCall(call) => {
                json_arguments |= matches!(call.arguments, ToolArguments::Json(_));
                calls.push(encode_tool_call(call, &At::top(index, "tool call"))?);
            }
            ContentBlock::ToolResult(result) => {
                return Err(block_error(
                    PROVIDER,
                    &At::top(index, "tool_result").name(),
                    format!(
                        "OpenAI carries the result for {:?} as its own tool message; put each tool result in a message of its own before export",
                        result.call_id
                    ),
                ))
            }
            other => parts.push((other, encode_part(other, message.role, &At::top(index, ""))?)),
        }
    }
    let content = match (message.wire.content, parts.as_slice()) {
        (ContentShape::String, [(ContentBlock::Text(t), _)]) if t.extra.is_empty() => {
            Some(Value::String(t.text.clone()))
        }
        (ContentShape::Null, []) => Some(Value::Null),
        (ContentShape::Absent, []) => None,
        // Only tool calls, from Anthropic (whose calls have JSON arguments; OpenAI's have
        // text): OpenAI wants `null` content, not an empty list.
        (ContentShape::Blocks, []) if json_arguments => Some(Value::Null),
        _ => Some(Value::Array(
            parts.into_iter().map(|(_, part)| part).collect(),
        )),
    };
    if let Some(content) = content {
        object.insert("content".to_owned(), content);
    }

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
    if let Some(function) = legacy {
        object.insert("function_call".to_owned(), function);
    }
    Ok(Value::Object(object))
}

/// A [`Role::Tool`] message: a `tool` message, or a legacy `function` one.
fn encode_tool_message(
    mut object: Map<String, Value>,
    role: String,
    message: &Message,
) -> Result<Value> {
    let [ContentBlock::ToolResult(result)] = message.content.as_slice() else {
        return Err(conversion(
            PROVIDER,
            "a tool message must hold exactly one tool result",
        ));
    };
    if let (true, Some(name)) = (result.wire.id_synthetic, &result.wire.name) {
        return encode_function_result(object, result, name);
    }
    object.insert("role".to_owned(), Value::String(role));
    encode_result_into(&mut object, result, &At::top(0, "tool_result"))?;
    Ok(Value::Object(object))
}

/// A legacy `function` message: the result of a `function_call`.
fn encode_function_result(
    mut object: Map<String, Value>,
    result: &ToolResult,
    name: &str,
) -> Result<Value> {
    object.insert("role".to_owned(), Value::from("function"));
    object.insert("name".to_owned(), Value::from(name));
    match (&result.output, result.wire.output) {
        (ToolOutput::Text(text), ContentShape::Null) if text.is_empty() => {
            object.insert("content".to_owned(), Value::Null);
        }
        (ToolOutput::Text(text), ContentShape::Absent) if text.is_empty() => {}
        (ToolOutput::Text(text), _) => {
            object.insert("content".to_owned(), Value::String(text.clone()));
        }
        (ToolOutput::Blocks(_), _) => {
            return Err(block_error(
                PROVIDER,
                "content block 0 (tool_result)",
                "a legacy function message takes text content only",
            ))
        }
    }
    Ok(Value::Object(object))
}

/// A legacy `function_call` object.
fn encode_legacy_call(call: &ToolCall) -> Value {
    let mut function = call.wire.function_extra.clone();
    function.insert("name".to_owned(), Value::String(call.name.clone()));
    let arguments = match &call.arguments {
        ToolArguments::Text(text) => text.clone(),
        ToolArguments::Json(value) => value.to_string(),
    };
    function.insert("arguments".to_owned(), Value::String(arguments));
    Value::Object(function)
}

/// Where a block is, for error messages: its index in the message's content and its type,
/// and for a block inside a tool result, the result's too.
struct At<'a> {
    parent: Option<&'a At<'a>>,
    index: usize,
    kind: String,
}

impl<'a> At<'a> {
    fn top(index: usize, kind: &str) -> Self {
        At {
            parent: None,
            index,
            kind: kind.to_owned(),
        }
    }

    fn inner(&'a self, index: usize) -> Self {
        At {
            parent: Some(self),
            index,
            kind: String::new(),
        }
    }

    fn of(&self, kind: &str) -> Self {
        At {
            parent: self.parent,
            index: self.index,
            kind: kind.to_owned(),
        }
    }

    fn name(&self) -> String {
        let own = format!("content block {} ({})", self.index, self.kind);
        match self.parent {
            None => own,
            Some(parent) => format!("{}, its {own}", parent.name()),
        }
    }
}

/// Writes a tool result's `tool_call_id` and `content` into a tool message.
fn encode_result_into(
    object: &mut Map<String, Value>,
    result: &ToolResult,
    at: &At<'_>,
) -> Result<()> {
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
            let parts = blocks
                .iter()
                .enumerate()
                .map(|(index, block)| encode_part(block, Role::Tool, &at.inner(index)))
                .collect::<Result<_>>()?;
            object.insert("content".to_owned(), Value::Array(parts));
        }
    }
    Ok(())
}

/// One content part. `role` is the role of the OpenAI message it goes into.
fn encode_part(block: &ContentBlock, role: Role, at: &At<'_>) -> Result<Value> {
    match block {
        ContentBlock::Text(t) => {
            let mut part = t.extra.clone();
            match part.get("citations") {
                None => {}
                // Anthropic's "no citations".
                Some(Value::Null) => {
                    part.remove("citations");
                }
                Some(Value::Array(list)) if list.is_empty() => {
                    part.remove("citations");
                }
                Some(_) => {
                    return Err(block_error(
                        PROVIDER,
                        &at.of("text").name(),
                        "the text has Anthropic citations, and OpenAI Chat text parts have no place for them; remove `citations` from the block's `extra` before export",
                    ))
                }
            }
            part.insert("type".to_owned(), Value::String("text".to_owned()));
            part.insert("text".to_owned(), Value::String(t.text.clone()));
            Ok(Value::Object(part))
        }
        ContentBlock::Other { value } => encode_other(value, role, at),
        ContentBlock::ToolCall(call) => Err(block_error(
            PROVIDER,
            &at.of("tool call").name(),
            format!("tool call {:?} cannot appear inside content", call.id),
        )),
        ContentBlock::ToolResult(result) => Err(block_error(
            PROVIDER,
            &at.of("tool_result").name(),
            format!(
                "tool result for {:?} must be its own tool message",
                result.call_id
            ),
        )),
    }
}

/// An unmodelled block: an Anthropic block is translated or refused; anything else is the
/// provider's own (or unknown) and given back verbatim.
fn encode_other(value: &Value, role: Role, at: &At<'_>) -> Result<Value> {
    let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
    let at = at.of(kind);
    if kind == "image" {
        if role != Role::User {
            let place = if role == Role::Tool {
                "OpenAI tool messages take text only"
            } else {
                "OpenAI Chat takes images only in user messages"
            };
            return Err(block_error(
                PROVIDER,
                &at.name(),
                format!("{place}; remove the image before export"),
            ));
        }
        return image_from_anthropic(value).map_err(|why| block_error(PROVIDER, &at.name(), why));
    }
    if let Some(what) = anthropic::only_block(kind) {
        return Err(block_error(
            PROVIDER,
            &at.name(),
            format!(
                "this is {what}, an Anthropic block OpenAI Chat has no place for; drop it from the message before export"
            ),
        ));
    }
    Ok(value.clone())
}

/// An OpenAI `image_url` part for an Anthropic `image` block: a base64 source becomes a
/// `data:` URL, a `url` source its URL. `cache_control` is kept.
fn image_from_anthropic(block: &Value) -> std::result::Result<Value, String> {
    let Some(object) = block.as_object() else {
        return Err("the block is not an object".to_owned());
    };
    if let Some(key) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "type" | "source" | "cache_control"))
    {
        return Err(format!(
            "the block has a field `{key}` with no OpenAI counterpart"
        ));
    }
    let Some(source) = object.get("source").and_then(Value::as_object) else {
        return Err("the block has no `source` object".to_owned());
    };
    let text = |key: &str| source.get(key).and_then(Value::as_str);
    let url = match text("type") {
        Some("base64") => {
            let (Some(media_type), Some(data)) = (text("media_type"), text("data")) else {
                return Err(
                    "the base64 source needs string `media_type` and `data` fields".to_owned(),
                );
            };
            format!("data:{media_type};base64,{data}")
        }
        Some("url") => match text("url") {
            Some(url) => url.to_owned(),
            None => return Err("the url source has no string `url`".to_owned()),
        },
        Some(other) => {
            return Err(format!(
                "its source is of type {other:?} (such as an Anthropic Files API file), which OpenAI cannot fetch; only base64 and url sources translate"
            ))
        }
        None => return Err("its source has no `type`".to_owned()),
    };
    let mut image = Map::new();
    image.insert("url".to_owned(), Value::String(url));
    let mut part = Map::new();
    part.insert("type".to_owned(), Value::String("image_url".to_owned()));
    part.insert("image_url".to_owned(), Value::Object(image));
    if let Some(cache) = object.get("cache_control") {
        part.insert("cache_control".to_owned(), cache.clone());
    }
    Ok(Value::Object(part))
}

fn encode_tool_call(call: &ToolCall, at: &At<'_>) -> Result<Value> {
    let mut function = call.wire.function_extra.clone();
    function.insert("name".to_owned(), Value::String(call.name.clone()));
    let arguments = match &call.arguments {
        ToolArguments::Text(text) => text.clone(),
        ToolArguments::Json(value) => value.to_string(),
    };
    let (key, input) = if call.wire.custom {
        ("custom", "input")
    } else {
        ("function", "arguments")
    };
    function.insert(input.to_owned(), Value::String(arguments));
    let mut object: Map<String, Value> = call.extra.clone();
    match object.get("caller") {
        None => {}
        // Anthropic: the model called the tool itself, as every OpenAI call is made.
        Some(caller) if caller.as_object().is_some_and(|c| c.len() == 1 && caller["type"] == "direct") => {
            object.remove("caller");
        }
        Some(caller) => {
            return Err(block_error(
                PROVIDER,
                &at.of(&format!("tool call {:?}", call.id)).name(),
                format!(
                    "the call was made by an Anthropic server tool (caller {caller}), which OpenAI Chat has no place for; drop the call and its result before export"
                ),
            ))
        }
    }
    object.insert("id".to_owned(), Value::String(call.id.clone()));
    if !call.wire.type_absent {
        let kind = if call.wire.custom {
            "custom"
        } else {
            "function"
        };
        object.insert("type".to_owned(), Value::String(kind.to_owned()));
    }
    object.insert(key.to_owned(), Value::Object(function));
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
        // A custom tool's call: free-form input, given back under `custom`.
        let custom = round_trip(
            &json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c9", "type": "custom", "custom": {"name": "run_sql", "input": "select 1;"}},
            {"id": "c8", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
        );
        let ContentBlock::ToolCall(call) = &custom.content[0] else {
            panic!("a tool call: {custom:?}");
        };
        assert_eq!(call.arguments, ToolArguments::Text("select 1;".to_owned()));
        // Gemini's OpenAI compatibility mode: the model's turns, with and without calls.
        round_trip(&json!({"role": "model", "content": "hello"}));
        round_trip(&json!({"role": "model", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}));
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
    fn legacy_function_calls_and_results_survive_and_pair_by_name() {
        let call = round_trip(&json!({"role": "assistant", "content": null,
            "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}));
        let result =
            round_trip(&json!({"role": "function", "name": "get_weather", "content": "sunny"}));
        let call_id = &call.tool_calls().next().unwrap().id;
        assert_eq!(result.tool_results().next().unwrap().call_id, *call_id);
        round_trip(&json!({"role": "function", "name": "f", "content": null}));
        round_trip(&json!({"role": "assistant", "content": "x", "function_call": null}));
        assert!(decode(&json!({"role": "function", "content": "x"})).is_err());
        assert!(decode(&json!({"role": "assistant", "function_call": {"name": "f"}})).is_err());
        // A result made in Rust for the call is a tool message until told it answers a
        // legacy call (Codec::export does).
        let made = Message::tool_result(ToolResult::new(call_id.clone(), "rain"));
        assert_eq!(encode(&made).unwrap()["role"], "tool");
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
        assert!(decode(
            &json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "mcp", "mcp": {}}]})
        )
        .is_err());
        let two = Message::new(
            Role::Tool,
            vec![
                ContentBlock::tool_result(ToolResult::new("a", "1")),
                ContentBlock::tool_result(ToolResult::new("b", "2")),
            ],
        );
        assert!(encode(&two).is_err());
    }

    /// The error of a conversion that must be refused, checked to be a typed
    /// `Error::Conversion` of this provider.
    fn refused(result: Result<Value>) -> String {
        match result {
            Err(crate::Error::Conversion { provider, problem }) => {
                assert_eq!(provider, PROVIDER);
                problem
            }
            other => panic!("expected a conversion error, got {other:?}"),
        }
    }

    #[allow(clippy::needless_pass_by_value)] // callers pass json! literals
    fn from_anthropic(wire: Value) -> Message {
        anthropic::decode(wire).unwrap()
    }

    #[test]
    fn anthropic_only_blocks_are_refused_naming_the_block() {
        for block in [
            json!({"type": "thinking", "thinking": "hmm", "signature": "EqQB"}),
            json!({"type": "redacted_thinking", "data": "c2VjcmV0"}),
            json!({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}),
            json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
            json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}),
            json!({"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_1", "content": {}}),
            json!({"type": "container_upload", "file_id": "f"}),
        ] {
            let kind = block["type"].as_str().unwrap().to_owned();
            let message = from_anthropic(json!({"role": "assistant", "content": [
                {"type": "text", "text": "a"}, block
            ]}));
            let problem = refused(encode(&message));
            assert!(
                problem.starts_with(&format!("content block 1 ({kind}): ")),
                "{problem}"
            );
            assert!(
                problem.contains("OpenAI Chat has no place for"),
                "{problem}"
            );
            assert!(problem.contains("drop it"), "{problem}");
        }
    }

    #[test]
    fn image_blocks_become_image_url_parts() {
        let message = from_anthropic(json!({"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "text", "text": "Compare them."}
        ]}));
        assert_eq!(
            encode(&message).unwrap(),
            json!({"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "Compare them."}
            ]})
        );
    }

    #[test]
    fn images_openai_cannot_take_are_refused_naming_the_block() {
        let file = from_anthropic(json!({"role": "user", "content": [
            {"type": "image", "source": {"type": "file", "file_id": "file_1"}}
        ]}));
        let problem = refused(encode(&file));
        assert!(
            problem.starts_with("content block 0 (image): "),
            "{problem}"
        );
        assert!(problem.contains("\"file\""), "{problem}");
        let in_result = from_anthropic(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "chart:"},
                {"type": "image", "source": {"type": "url", "url": "https://e.com/c.png"}}
            ]}
        ]}));
        let problem = refused(encode(&in_result));
        assert!(
            problem.starts_with("content block 0 (tool_result), its content block 1 (image): "),
            "{problem}"
        );
        assert!(problem.contains("text only"), "{problem}");
    }

    #[test]
    fn a_user_message_with_one_tool_result_becomes_a_tool_message() {
        for (block, content) in [
            (
                json!({"type": "tool_result", "tool_use_id": "t1", "content": "42"}),
                json!("42"),
            ),
            (
                json!({"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "42"}], "is_error": false}),
                json!([{"type": "text", "text": "42"}]),
            ),
            (
                json!({"type": "tool_result", "tool_use_id": "t1"}),
                json!(""),
            ),
        ] {
            let message = from_anthropic(json!({"role": "user", "content": [block]}));
            assert_eq!(
                encode(&message).unwrap(),
                json!({"role": "tool", "tool_call_id": "t1", "content": content})
            );
        }
    }

    #[test]
    fn tool_results_openai_cannot_carry_are_refused_naming_the_block() {
        let error = from_anthropic(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": true}
        ]}));
        let problem = refused(encode(&error));
        assert!(
            problem.starts_with("content block 0 (tool_result): "),
            "{problem}"
        );
        assert!(problem.contains("error flag"), "{problem}");
        let two = from_anthropic(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "1"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "2"}
        ]}));
        let problem = refused(encode(&two));
        assert!(
            problem.starts_with("content block 0 (tool_result): "),
            "{problem}"
        );
        assert!(problem.contains("own tool message"), "{problem}");
        let mixed = from_anthropic(json!({"role": "user", "content": [
            {"type": "text", "text": "here"},
            {"type": "tool_result", "tool_use_id": "t1", "content": "1"}
        ]}));
        assert!(refused(encode(&mixed)).starts_with("content block 1 (tool_result): "));
    }

    #[test]
    fn anthropic_tool_calls_and_text_translate() {
        let message = from_anthropic(json!({"role": "assistant", "content": [
            {"type": "text", "text": "Checking.", "citations": null},
            {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"n": 1.5}, "caller": {"type": "direct"}}
        ]}));
        assert_eq!(
            encode(&message).unwrap(),
            json!({"role": "assistant", "content": [{"type": "text", "text": "Checking."}], "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": "{\"n\":1.5}"}}
            ]})
        );
        let only_calls = from_anthropic(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {}}
        ]}));
        assert_eq!(
            encode(&only_calls).unwrap(),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": "{}"}}
            ]})
        );
        let system = from_anthropic(json!({"role": "system", "content": "Be brief."}));
        assert_eq!(
            encode(&system).unwrap(),
            json!({"role": "system", "content": "Be brief."})
        );
    }

    #[test]
    fn citations_and_server_tool_callers_are_refused_naming_the_block() {
        let cited = from_anthropic(json!({"role": "assistant", "content": [
            {"type": "text", "text": "It is sunny.", "citations": [{"type": "web_search_result_location", "url": "https://e.com"}]}
        ]}));
        let problem = refused(encode(&cited));
        assert!(problem.starts_with("content block 0 (text): "), "{problem}");
        assert!(problem.contains("citations"), "{problem}");
        let programmatic = from_anthropic(json!({"role": "assistant", "content": [
            {"type": "text", "text": "a"},
            {"type": "tool_use", "id": "toolu_2", "name": "get", "input": {},
             "caller": {"type": "code_execution_20260120", "tool_id": "srvtoolu_1"}}
        ]}));
        let problem = refused(encode(&programmatic));
        assert!(
            problem.starts_with("content block 1 (tool call \"toolu_2\"): "),
            "{problem}"
        );
        assert!(problem.contains("server tool"), "{problem}");
    }

    #[test]
    fn unknown_blocks_and_fields_stay_verbatim() {
        let message = from_anthropic(json!({"role": "user", "content": [
            {"type": "hologram", "x": 1}
        ], "future_field": true}));
        assert_eq!(
            encode(&message).unwrap(),
            json!({"role": "user", "content": [{"type": "hologram", "x": 1}], "future_field": true})
        );
    }

    #[test]
    fn refuses_at_import_what_export_would_change() {
        for message in [
            json!({"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}),
            json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "x", "signature": "s"}]}),
            json!({"role": "assistant", "content": [{"type": "text", "text": "x", "citations": null}]}),
            json!({"role": "tool", "tool_call_id": "c", "content": [{"type": "document"}]}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}, "caller": {"type": "direct"}}
            ]}),
        ] {
            assert!(
                matches!(
                    decode(&message),
                    Err(crate::Error::Conversion {
                        provider: PROVIDER,
                        ..
                    })
                ),
                "{message}"
            );
        }
    }
}
