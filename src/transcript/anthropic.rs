//! Anthropic Messages API messages to and from the neutral model.
//!
//! # Messages from another provider
//!
//! [`encode`] writes Anthropic's own messages back exactly as they came. A message that
//! holds what only OpenAI Chat Completions sends is translated where the translation is
//! exact, and refused with [`Error::Conversion`](crate::Error::Conversion) naming the block or
//! field otherwise:
//!
//! * tool-call arguments kept as text (OpenAI's form) become a JSON object; empty text
//!   becomes `{}`; anything else that is not a JSON object is refused;
//! * `image_url` parts become `image` blocks;
//! * the other OpenAI part types and OpenAI message fields are refused (`null` or empty
//!   values of those fields are dropped).
//!
//! So that a message from Anthropic is still given back unchanged, [`decode`] refuses
//! exactly what [`encode`] would translate or refuse: Anthropic never sends it.

use serde_json::{Map, Value};

use super::{
    block_error, conversion, into_object, json_kind, openai, take_string, ContentBlock,
    ContentShape, Message, MessageWire, Role, TextBlock, ToolArguments, ToolCall, ToolCallWire,
    ToolOutput, ToolResult, ToolResultWire,
};
use crate::error::Result;

const PROVIDER: &str = "anthropic";

/// Block types of the Anthropic Messages API that OpenAI Chat Completions has no part
/// for, with what each is. From the request `ContentBlockParam` union of the Anthropic
/// API (anthropic-sdk-python 0.105, including beta blocks); `text`, `image`, `tool_use` and
/// `tool_result` are translated instead.
pub(super) const ONLY_BLOCKS: &[(&str, &str)] = &[
    (
        "thinking",
        "the model's extended thinking, with its signature",
    ),
    (
        "redacted_thinking",
        "the model's encrypted extended thinking",
    ),
    ("document", "a document (PDF or text) given to the model"),
    ("search_result", "a search result given to the model"),
    (
        "server_tool_use",
        "a call of a tool Anthropic runs on its servers",
    ),
    (
        "web_search_tool_result",
        "the result of Anthropic's web search tool",
    ),
    (
        "web_fetch_tool_result",
        "the result of Anthropic's web fetch tool",
    ),
    (
        "code_execution_tool_result",
        "the result of Anthropic's code execution tool",
    ),
    (
        "bash_code_execution_tool_result",
        "the result of Anthropic's bash code execution tool",
    ),
    (
        "text_editor_code_execution_tool_result",
        "the result of Anthropic's text editor code execution tool",
    ),
    (
        "tool_search_tool_result",
        "the result of Anthropic's tool search tool",
    ),
    (
        "container_upload",
        "a file uploaded to Anthropic's code execution container",
    ),
    (
        "mid_conv_system",
        "system instructions given mid-conversation",
    ),
    ("tool_addition", "a tool added mid-conversation"),
    ("tool_removal", "a tool removed mid-conversation"),
    ("tool_reference", "a reference to a tool definition"),
    (
        "mcp_tool_use",
        "a call of a tool on an MCP server Anthropic connects to",
    ),
    (
        "mcp_tool_result",
        "the result of a tool on an MCP server Anthropic connects to",
    ),
    ("compaction", "a summary Anthropic wrote of earlier context"),
    (
        "advisor_tool_result",
        "the result of Anthropic's advisor tool",
    ),
];

/// What [`ONLY_BLOCKS`] says `kind` is, if it is one of them.
pub(super) fn only_block(kind: &str) -> Option<&'static str> {
    ONLY_BLOCKS
        .iter()
        .find(|(name, _)| *name == kind)
        .map(|(_, what)| *what)
}

/// The media types an Anthropic `image` block accepts.
pub(super) const IMAGE_MEDIA_TYPES: &[&str] =
    &["image/jpeg", "image/png", "image/gif", "image/webp"];

pub(super) fn decode(message: Value) -> Result<Message> {
    let mut object = into_object(message, PROVIDER, "a message")?;
    let role = match take_string(&mut object, "role", PROVIDER)?.as_str() {
        // Mid-conversation system messages (the `system` role of `MessageParam`).
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        other => {
            return Err(conversion(
                PROVIDER,
                format!("unknown role {other:?} (expected user, assistant or system)"),
            ))
        }
    };
    if let Some(field) = object
        .keys()
        .find(|k| openai::MESSAGE_FIELDS.contains(&k.as_str()))
    {
        return Err(conversion(
            PROVIDER,
            format!(
                "`{field}` is a field of OpenAI Chat messages, not of Anthropic ones; convert the message with Message::from_openai_chat"
            ),
        ));
    }
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
        rare: None,
    })
}

fn decode_blocks(blocks: Vec<Value>) -> Result<Vec<ContentBlock>> {
    blocks
        .into_iter()
        .enumerate()
        .map(|(index, block)| decode_block(index, block))
        .collect()
}

fn decode_block(index: usize, block: Value) -> Result<ContentBlock> {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let kind = kind.as_str();
    if kind == "image_url" || openai::only_part(kind).is_some() {
        return Err(block_error(
            PROVIDER,
            &format!("content block {index} ({kind})"),
            "this is an OpenAI Chat content part, which the Anthropic API does not accept; convert the message with Message::from_openai_chat",
        ));
    }
    match kind {
        "text" if block.get("text").is_some_and(Value::is_string) => {
            let mut object = into_object(block, PROVIDER, "a text block")?;
            object.remove("type");
            let text = take_string(&mut object, "text", PROVIDER)?;
            Ok(ContentBlock::Text(TextBlock {
                text,
                extra: object,
            }))
        }
        "tool_use" => decode_tool_use(index, block),
        "tool_result" => {
            let mut object = into_object(block, PROVIDER, "a tool_result block")?;
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

fn decode_tool_use(index: usize, block: Value) -> Result<ContentBlock> {
    let mut object = into_object(block, PROVIDER, "a tool_use block")?;
    object.remove("type");
    let id = take_string(&mut object, "id", PROVIDER)?;
    let name = take_string(&mut object, "name", PROVIDER)?;
    let input = object
        .remove("input")
        .ok_or_else(|| conversion(PROVIDER, format!("tool_use {id:?} has no `input`")))?;
    // What `encode` refuses or drops, so that it gives back every block accepted here.
    if !input.is_object() {
        return Err(block_error(
            PROVIDER,
            &format!("content block {index} (tool_use {id:?})"),
            format!("`input` must be a JSON object, found {}", json_kind(&input)),
        ));
    }
    if let Some((key, whose)) = [
        ("index", "OpenAI streamed tool calls"),
        (
            "extra_content",
            "tool calls in Gemini's OpenAI compatibility mode",
        ),
    ]
    .into_iter()
    .find(|(key, _)| object.contains_key(*key))
    {
        return Err(block_error(
            PROVIDER,
            &format!("content block {index} (tool_use {id:?})"),
            format!("`{key}` is a field of {whose}, not of Anthropic tool_use blocks"),
        ));
    }
    Ok(ContentBlock::tool_call(ToolCall {
        id,
        name,
        arguments: ToolArguments::Json(input),
        extra: object,
        wire: ToolCallWire::default(),
    }))
}

pub(super) fn encode(message: &Message) -> Result<Value> {
    let mut object = Map::new();
    for (key, value) in &message.extra {
        if openai::MESSAGE_FIELDS.contains(&key.as_str()) {
            if is_nothing(value) {
                // `"refusal": null`, `"annotations": []`: OpenAI's way of saying there is
                // none, which Anthropic says by leaving the field out.
                continue;
            }
            return Err(conversion(
                PROVIDER,
                format!(
                    "the message has the OpenAI Chat field `{key}` ({}), and Anthropic messages have no such field; remove it from `extra` before export",
                    json_kind(value)
                ),
            ));
        }
        object.insert(key.clone(), value.clone());
    }
    let role = match message.role {
        Role::User | Role::Tool => "user",
        Role::Assistant => "assistant",
        // A mid-conversation system message; its placement in the conversation is the
        // caller's to get right.
        Role::System => "system",
    };
    object.insert("role".to_owned(), Value::String(role.to_owned()));
    let content = match (message.wire.content, message.content.as_slice()) {
        (ContentShape::String, [ContentBlock::Text(t)]) if t.extra.is_empty() => {
            Value::String(t.text.clone())
        }
        (_, blocks) => Value::Array(encode_blocks(blocks, message.role, None)?),
    };
    object.insert("content".to_owned(), content);
    Ok(Value::Object(object))
}

/// `null`, an empty list or an empty object.
fn is_nothing(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// `parent` names the `tool_result` block whose content `blocks` are.
fn encode_blocks(blocks: &[ContentBlock], role: Role, parent: Option<&str>) -> Result<Vec<Value>> {
    blocks
        .iter()
        .enumerate()
        .map(|(index, block)| encode_block(block, role, &At { parent, index }))
        .collect()
}

/// Where a block is, for error messages.
struct At<'a> {
    parent: Option<&'a str>,
    index: usize,
}

impl At<'_> {
    fn name(&self, kind: &str) -> String {
        match self.parent {
            None => format!("content block {} ({kind})", self.index),
            Some(parent) => format!("{parent}, its content block {} ({kind})", self.index),
        }
    }
}

fn encode_block(block: &ContentBlock, role: Role, at: &At<'_>) -> Result<Value> {
    let (kind, mut object): (&str, Map<String, Value>) = match block {
        ContentBlock::Other { value } => return encode_other(value, role, at),
        ContentBlock::Text(t) => {
            let mut object = t.extra.clone();
            object.insert("text".to_owned(), Value::String(t.text.clone()));
            ("text", object)
        }
        ContentBlock::ToolCall(call) if call.wire.custom => {
            return Err(block_error(
                PROVIDER,
                &at.name(&format!("tool call {:?}", call.id)),
                "it is a call of an OpenAI custom tool (free-form text input), which Anthropic tools cannot take; drop the call and its result before export".to_owned(),
            ))
        }
        ContentBlock::ToolCall(call) => {
            let mut object = call.extra.clone();
            // The position of a streamed OpenAI tool call, and the thought signature Gemini's
            // OpenAI compatibility mode puts on its calls: nothing to Anthropic.
            object.remove("index");
            object.remove("extra_content");
            object.insert("id".to_owned(), Value::String(call.id.clone()));
            object.insert("name".to_owned(), Value::String(call.name.clone()));
            object.insert("input".to_owned(), tool_input(call, at)?);
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
                    let parent = at.name(&format!("tool_result for {:?}", result.call_id));
                    object.insert(
                        "content".to_owned(),
                        Value::Array(encode_blocks(blocks, Role::Tool, Some(&parent))?),
                    );
                }
            }
            if result.is_error || result.wire.is_error_present {
                object.insert("is_error".to_owned(), Value::Bool(result.is_error));
            }
            ("tool_result", object)
        }
    };
    object.insert("type".to_owned(), Value::String(kind.to_owned()));
    Ok(Value::Object(object))
}

/// A tool call's `input`, which Anthropic requires to be a JSON object.
fn tool_input(call: &ToolCall, at: &At<'_>) -> Result<Value> {
    let refuse = |what: String| {
        block_error(
            PROVIDER,
            &at.name(&format!("tool call {:?}", call.id)),
            format!("Anthropic requires tool_use `input` to be a JSON object, but the arguments are {what}"),
        )
    };
    match &call.arguments {
        ToolArguments::Json(value @ Value::Object(_)) => Ok(value.clone()),
        ToolArguments::Json(other) => Err(refuse(json_kind(other).to_owned())),
        // OpenAI's form: JSON text. OpenAI sends "" for a call without arguments.
        ToolArguments::Text(text) if text.trim().is_empty() => Ok(Value::Object(Map::new())),
        ToolArguments::Text(text) => match serde_json::from_str::<Value>(text) {
            Ok(value @ Value::Object(_)) => Ok(value),
            Ok(other) => Err(refuse(format!("JSON text holding {}", json_kind(&other)))),
            Err(e) => Err(refuse(format!("text that is not JSON ({e})"))),
        },
    }
}

/// An unmodelled block: an OpenAI part is translated or refused; anything else is the
/// provider's own (or unknown) and given back verbatim.
fn encode_other(value: &Value, role: Role, at: &At<'_>) -> Result<Value> {
    let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
    if kind == "image_url" {
        if matches!(role, Role::System | Role::Assistant) {
            return Err(block_error(
                PROVIDER,
                &at.name(kind),
                "Anthropic accepts images only in user messages and tool results",
            ));
        }
        return image_from_openai(value).map_err(|why| block_error(PROVIDER, &at.name(kind), why));
    }
    if let Some(what) = openai::only_part(kind) {
        return Err(block_error(
            PROVIDER,
            &at.name(kind),
            format!("this is {what}, an OpenAI content part the Anthropic API has no block for; remove it before export"),
        ));
    }
    Ok(value.clone())
}

/// An Anthropic `image` block for an OpenAI `image_url` part: a `data:` URL becomes a
/// base64 source, an http(s) URL a `url` source. The part's `detail` (a resolution hint
/// Anthropic has no field for) is dropped; `cache_control` is kept.
fn image_from_openai(part: &Value) -> std::result::Result<Value, String> {
    let Some(object) = part.as_object() else {
        return Err("the part is not an object".to_owned());
    };
    if let Some(key) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "type" | "image_url" | "cache_control"))
    {
        return Err(format!(
            "the part has a field `{key}` with no Anthropic counterpart"
        ));
    }
    let Some(image) = object.get("image_url").and_then(Value::as_object) else {
        return Err("the part has no `image_url` object".to_owned());
    };
    if let Some(key) = image
        .keys()
        .find(|k| !matches!(k.as_str(), "url" | "detail"))
    {
        return Err(format!(
            "`image_url` has a field `{key}` with no Anthropic counterpart"
        ));
    }
    let Some(url) = image.get("url").and_then(Value::as_str) else {
        return Err("`image_url.url` is not a string".to_owned());
    };
    let mut source = Map::new();
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((header, data)) = rest.split_once(',') else {
            return Err("the data: URL has no `,` before its data".to_owned());
        };
        let Some(media_type) = header.strip_suffix(";base64") else {
            return Err(
                "the data: URL is not base64-encoded (Anthropic takes base64 image data only)"
                    .to_owned(),
            );
        };
        if !IMAGE_MEDIA_TYPES.contains(&media_type) {
            return Err(format!(
                "the image's media type {media_type:?} is not one Anthropic accepts ({})",
                IMAGE_MEDIA_TYPES.join(", ")
            ));
        }
        source.insert("type".to_owned(), Value::String("base64".to_owned()));
        source.insert(
            "media_type".to_owned(),
            Value::String(media_type.to_owned()),
        );
        source.insert("data".to_owned(), Value::String(data.to_owned()));
    } else if url.starts_with("https://") || url.starts_with("http://") {
        source.insert("type".to_owned(), Value::String("url".to_owned()));
        source.insert("url".to_owned(), Value::String(url.to_owned()));
    } else {
        return Err("the image URL is neither a data: URL nor an http(s) URL".to_owned());
    }
    let mut block = Map::new();
    block.insert("type".to_owned(), Value::String("image".to_owned()));
    block.insert("source".to_owned(), Value::Object(source));
    if let Some(cache) = object.get("cache_control") {
        block.insert("cache_control".to_owned(), cache.clone());
    }
    Ok(Value::Object(block))
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
        assert!(decode(&json!({"role": "tool", "content": "x"})).is_err());
        assert!(decode(&json!({"role": "user"})).is_err());
        assert!(decode(
            &json!({"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b"}]})
        )
        .is_err());
        assert!(decode(&json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "is_error": "yes"}]})).is_err());
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
    fn from_openai(wire: Value) -> Message {
        super::super::openai::decode(wire).unwrap()
    }

    #[test]
    fn system_messages_round_trip() {
        round_trip(&json!({"role": "system", "content": "Answer in French from now on."}));
        let message = round_trip(&json!({"role": "system", "content": [
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
        ], "cache_control": {"type": "ephemeral"}}));
        assert_eq!(message.role, Role::System);
        round_trip(&json!({"role": "system", "content": [
            {"type": "mid_conv_system", "content": [{"type": "text", "text": "x"}]}
        ]}));
    }

    #[test]
    fn openai_system_and_developer_messages_become_system_messages() {
        for role in ["system", "developer"] {
            let message = from_openai(json!({"role": role, "content": "be brief"}));
            assert_eq!(
                encode(&message).unwrap(),
                json!({"role": "system", "content": "be brief"})
            );
        }
        let message =
            from_openai(json!({"role": "system", "content": [{"type": "text", "text": "a"}]}));
        assert_eq!(
            encode(&message).unwrap(),
            json!({"role": "system", "content": [{"type": "text", "text": "a"}]})
        );
    }

    fn openai_call(arguments: &str) -> Message {
        from_openai(
            json!({"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}
            ]}),
        )
    }

    #[test]
    fn text_arguments_become_an_input_object() {
        for (arguments, input) in [
            ("", json!({})),
            ("  \n", json!({})),
            (
                "{\"a\": 1.50, \"b\": [true]}",
                json!({"a": 1.50, "b": [true]}),
            ),
        ] {
            assert_eq!(
                encode(&openai_call(arguments)).unwrap(),
                json!({"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "call_1", "name": "f", "input": input}
                ]}),
                "{arguments:?}"
            );
        }
    }

    #[test]
    fn arguments_that_are_not_an_object_are_refused_naming_the_call() {
        for arguments in ["not json", "[1, 2]", "\"text\"", "7", "null", "{\"a\": "] {
            let problem = refused(encode(&openai_call(arguments)));
            assert!(
                problem.starts_with("content block 1 (tool call \"call_1\"): "),
                "{problem}"
            );
            assert!(problem.contains("JSON object"), "{problem}");
        }
        for input in [json!("x"), json!([1]), json!(null), json!(3)] {
            let message = Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                "c9", "f", input,
            ))]);
            let problem = refused(encode(&message));
            assert!(
                problem.starts_with("content block 0 (tool call \"c9\"): "),
                "{problem}"
            );
        }
    }

    #[test]
    fn a_streamed_call_index_is_dropped() {
        let message = from_openai(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": "{}", "strict": true}, "index": 0}
        ]}));
        assert_eq!(
            encode(&message).unwrap(),
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "c", "name": "f", "input": {}}
            ]})
        );
    }

    #[test]
    fn image_url_parts_become_image_blocks() {
        let message = from_openai(json!({"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg", "detail": "low"}}
        ]}));
        assert_eq!(
            encode(&message).unwrap(),
            json!({"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}
            ]})
        );
        let tool = from_openai(json!({"role": "tool", "tool_call_id": "c", "content": [
            {"type": "image_url", "image_url": {"url": "http://example.com/b.gif"}}
        ]}));
        assert_eq!(
            encode(&tool).unwrap(),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": [
                {"type": "image", "source": {"type": "url", "url": "http://example.com/b.gif"}}
            ]}]})
        );
    }

    #[test]
    fn images_anthropic_cannot_take_are_refused_naming_the_part() {
        for (url, why) in [
            ("data:image/tiff;base64,AAAA", "media type"),
            ("data:image/png,rawbytes", "base64"),
            ("data:image/png;base64", "`,`"),
            ("ftp://example.com/a.png", "neither"),
        ] {
            let message = from_openai(json!({"role": "user", "content": [
                {"type": "text", "text": "a"},
                {"type": "image_url", "image_url": {"url": url}}
            ]}));
            let problem = refused(encode(&message));
            assert!(
                problem.starts_with("content block 1 (image_url): "),
                "{problem}"
            );
            assert!(problem.contains(why), "{url}: {problem}");
        }
        let system = Message::new(
            Role::System,
            vec![ContentBlock::Other {
                value: json!({"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}),
            }],
        );
        assert!(refused(encode(&system)).contains("only in user messages"));
        let tool = from_openai(json!({"role": "tool", "tool_call_id": "c", "content": [
            {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}
        ]}));
        let problem = refused(encode(&tool));
        assert!(
            problem.starts_with(
                "content block 0 (tool_result for \"c\"), its content block 1 (image_url): "
            ),
            "{problem}"
        );
    }

    #[test]
    fn openai_only_parts_are_refused_naming_the_part() {
        for (part, what) in [
            (
                json!({"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}),
                "audio",
            ),
            (
                json!({"type": "file", "file": {"file_id": "file-1"}}),
                "file",
            ),
            (json!({"type": "refusal", "refusal": "no"}), "refusal"),
            (
                json!({"type": "output_text", "text": "x", "annotations": []}),
                "Responses",
            ),
        ] {
            let kind = part["type"].as_str().unwrap().to_owned();
            let message = from_openai(json!({"role": "user", "content": [
                {"type": "text", "text": "a"}, part
            ]}));
            let problem = refused(encode(&message));
            assert!(
                problem.starts_with(&format!("content block 1 ({kind}): ")),
                "{problem}"
            );
            assert!(problem.contains(what), "{problem}");
        }
    }

    #[test]
    fn openai_message_fields_are_refused_or_dropped_when_empty() {
        let message = from_openai(json!({"role": "user", "content": "hi", "name": "ada"}));
        let problem = refused(encode(&message));
        assert!(problem.contains("`name`"), "{problem}");
        let message =
            from_openai(json!({"role": "assistant", "content": null, "refusal": "I can't."}));
        assert!(refused(encode(&message)).contains("`refusal`"));
        let message = from_openai(
            json!({"role": "assistant", "content": "ok", "refusal": null,
            "annotations": [], "audio": null, "function_call": null, "future_field": 1}),
        );
        assert_eq!(
            encode(&message).unwrap(),
            json!({"role": "assistant", "content": "ok", "future_field": 1}),
            "unknown fields stay verbatim"
        );
        let message =
            from_openai(json!({"role": "user", "content": "x", "tool_calls": [{"id": "c"}]}));
        assert!(refused(encode(&message)).contains("`tool_calls`"));
    }

    #[test]
    fn unknown_block_types_stay_verbatim() {
        let part = json!({"type": "hologram", "data": 1});
        let message = from_openai(json!({"role": "user", "content": [part.clone()]}));
        assert_eq!(
            encode(&message).unwrap(),
            json!({"role": "user", "content": [part]})
        );
    }

    #[test]
    fn refuses_at_import_what_export_would_change() {
        for message in [
            json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}),
            json!({"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}),
            json!({"role": "assistant", "content": "x", "refusal": null}),
            json!({"role": "user", "content": "x", "name": "ada"}),
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": "x"}]}),
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}, "index": 0}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
                {"type": "input_audio", "input_audio": {}}
            ]}]}),
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
