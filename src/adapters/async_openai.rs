//! Conversions between [`Message`] and [async-openai](https://docs.rs/async-openai/0.43)
//! 0.43's Chat Completions message types (feature `async-openai-0_43`).
//!
//! | from | to | with |
//! |---|---|---|
//! | [`ChatCompletionRequestMessage`] | [`Message`] | [`from_request_message`], `Message::try_from` |
//! | [`ChatCompletionResponseMessage`] (a model's reply) | [`Message`] | [`from_response_message`], `Message::try_from` |
//! | [`Message`] | [`ChatCompletionRequestMessage`] | [`to_request_message`], `ChatCompletionRequestMessage::try_from` |
//! | `&[ChatCompletionRequestMessage]` | `Vec<Message>` | [`from_request_messages`] |
//! | `&[Message]` (a session's transcript) | `Vec<ChatCompletionRequestMessage>` | [`to_request_messages`] |
//!
//! Every conversion goes through the crate's OpenAI Chat codec ([`Codec::OpenAiChat`]):
//! the async-openai value is serialized with `serde_json` and imported from that text, and a
//! [`Message`] is exported by the codec and deserialized into the async-openai type. So the
//! mapping is the codec's, with its guarantees: a message that came from async-openai goes
//! back equal, and is stored as the JSON async-openai writes for it; a message from another
//! provider (Anthropic, say) is translated where the translation is exact, or refused.
//!
//! async-openai's types name only the fields of OpenAI's published schema, and its
//! `Deserialize` drops any other field silently. [`to_request_message`] does not: if the
//! message holds something the async-openai type cannot carry (a provider field such as
//! `reasoning_content`, an unknown content part), it returns [`Error::Conversion`]
//! naming it, rather than a request without it. The only fields it leaves out are those a
//! reply has and a request has no place for: an assistant message's `annotations` and, of
//! its `audio`, everything but the `id` (OpenAI takes a previous audio reply back by id).
//!
//! The module is written against async-openai 0.43, where these types are in
//! `async_openai::types::chat` with the `chat-completion-types` feature (no HTTP client).
//! Use the same version in your own `Cargo.toml`: a type from another release of
//! async-openai is a different type.
//!
//! # Examples
//!
//! A tool loop with async-openai's types, its transcript kept as a session's:
//!
//! ```
//! # use async_openai_0_43 as async_openai; // the dependency's name in this crate's tests
//! use agent_session::adapters::async_openai::{from_response_message, to_request_messages};
//! use agent_session::{Message, ToolResult};
//! use async_openai::types::chat::{
//!     ChatCompletionRequestMessage, ChatCompletionRequestUserMessageArgs,
//!     ChatCompletionResponseMessage, CreateChatCompletionRequestArgs,
//! };
//!
//! let prompt: ChatCompletionRequestMessage = ChatCompletionRequestUserMessageArgs::default()
//!     .content("What is the weather in Paris?")
//!     .build()?
//!     .into();
//! let mut transcript = vec![Message::try_from(&prompt)?];
//!
//! // The model's reply, as async-openai deserialized it from the HTTP response.
//! let reply: ChatCompletionResponseMessage = serde_json::from_str(
//!     r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
//!        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}"#,
//! )?;
//! let reply = from_response_message(&reply)?;
//! let call = reply.tool_calls().next().expect("the reply calls a tool").clone();
//! transcript.push(reply);
//! transcript.push(Message::tool_result(ToolResult::new(call.id, "21°C, sunny")));
//!
//! // The next request, as async-openai's own request type.
//! let request = CreateChatCompletionRequestArgs::default()
//!     .model("gpt-4.1")
//!     .messages(to_request_messages(&transcript)?)
//!     .build()?;
//! assert_eq!(request.messages.len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use async_openai_0_43::types::chat::{ChatCompletionRequestMessage, ChatCompletionResponseMessage};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::transcript::{Codec, Message};

/// The `provider` of this module's [`Error::Conversion`]s.
const PROVIDER: &str = "async-openai";

/// A request message (system, developer, user, assistant, tool or legacy function) as a
/// [`Message`], through [`Codec::OpenAiChat`]: the message is kept as the JSON text
/// async-openai serializes it to, so [`to_request_message`] gives back an equal value.
///
/// # Errors
///
/// [`Error::Conversion`] if the codec refuses the message (as [`Message::from_json`] says),
/// for instance one nested deeper than a stored session can hold.
pub fn from_request_message(message: &ChatCompletionRequestMessage) -> Result<Message> {
    Message::from_json(Codec::OpenAiChat, &serialize(message)?)
}

/// A model's reply (`choices[i].message` of a chat completion) as an assistant
/// [`Message`], through [`Codec::OpenAiChat`]. Its tool calls become
/// [`ToolCall`](crate::ToolCall)s with their ids and argument strings exactly as sent;
/// `refusal`, `annotations` and `audio` are kept as provider fields.
///
/// # Errors
///
/// [`Error::Conversion`] if the codec refuses the message (as [`Message::from_json`] says).
pub fn from_response_message(message: &ChatCompletionResponseMessage) -> Result<Message> {
    Message::from_json(Codec::OpenAiChat, &serialize(message)?)
}

/// Request messages as [`Message`]s, through [`Codec::import`] with [`Codec::OpenAiChat`]
/// (a `function` message's result is paired with the latest call of that function, as the
/// legacy API pairs them).
///
/// # Errors
///
/// As [`from_request_message`], the problem starting with `message <i>:`.
pub fn from_request_messages(messages: &[ChatCompletionRequestMessage]) -> Result<Vec<Message>> {
    Codec::OpenAiChat.import(&serialize(messages)?)
}

/// A [`Message`] as an async-openai request message, through [`Codec::OpenAiChat`]
/// ([`Message::to_json`]).
///
/// # Errors
///
/// [`Error::Conversion`] if the codec cannot express the message in OpenAI Chat form (see
/// [`Message::to_openai_chat`]), if async-openai's type does not accept what the codec
/// wrote, or if the type would drop part of it (a field or content part OpenAI's published
/// schema does not have): the problem names the first such field.
pub fn to_request_message(message: &Message) -> Result<ChatCompletionRequestMessage> {
    request_message(&message.to_json(Codec::OpenAiChat)?).map_err(conversion)
}

/// A transcript (for instance [`Session::transcript`](crate::Session::transcript)) as the
/// `messages` of an async-openai
/// [`CreateChatCompletionRequest`](async_openai_0_43::types::chat::CreateChatCompletionRequest),
/// through [`Codec::export`] with [`Codec::OpenAiChat`], which also looks up what one
/// message alone cannot say (the result of a legacy `function_call` is a `function`
/// message).
///
/// # Errors
///
/// As [`to_request_message`], the problem starting with `message <i>:`.
pub fn to_request_messages(messages: &[Message]) -> Result<Vec<ChatCompletionRequestMessage>> {
    let text = Codec::OpenAiChat.export(messages)?;
    let elements: Vec<&RawValue> = serde_json::from_str(&text)
        .map_err(|e| conversion(format!("the exported transcript is not a JSON array: {e}")))?;
    elements
        .iter()
        .enumerate()
        .map(|(index, element)| {
            request_message(element.get())
                .map_err(|problem| conversion(format!("message {index}: {problem}")))
        })
        .collect()
}

impl TryFrom<&ChatCompletionRequestMessage> for Message {
    type Error = Error;

    /// As [`from_request_message`].
    fn try_from(message: &ChatCompletionRequestMessage) -> Result<Self> {
        from_request_message(message)
    }
}

impl TryFrom<ChatCompletionRequestMessage> for Message {
    type Error = Error;

    /// As [`from_request_message`].
    fn try_from(message: ChatCompletionRequestMessage) -> Result<Self> {
        from_request_message(&message)
    }
}

impl TryFrom<&ChatCompletionResponseMessage> for Message {
    type Error = Error;

    /// As [`from_response_message`].
    fn try_from(message: &ChatCompletionResponseMessage) -> Result<Self> {
        from_response_message(message)
    }
}

impl TryFrom<ChatCompletionResponseMessage> for Message {
    type Error = Error;

    /// As [`from_response_message`].
    fn try_from(message: ChatCompletionResponseMessage) -> Result<Self> {
        from_response_message(&message)
    }
}

impl TryFrom<&Message> for ChatCompletionRequestMessage {
    type Error = Error;

    /// As [`to_request_message`].
    fn try_from(message: &Message) -> Result<Self> {
        to_request_message(message)
    }
}

impl TryFrom<Message> for ChatCompletionRequestMessage {
    type Error = Error;

    /// As [`to_request_message`].
    fn try_from(message: Message) -> Result<Self> {
        to_request_message(&message)
    }
}

fn conversion(problem: String) -> Error {
    Error::Conversion {
        provider: PROVIDER,
        problem,
    }
}

fn serialize<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|e| conversion(format!("async-openai's message did not serialize: {e}")))
}

/// Deserializes one exported OpenAI Chat message into async-openai's type, and checks that
/// the type kept all of it.
fn request_message(text: &str) -> std::result::Result<ChatCompletionRequestMessage, String> {
    let typed: ChatCompletionRequestMessage = serde_json::from_str(text)
        .map_err(|e| format!("async-openai does not accept the message: {e}"))?;
    let mut exported: Value =
        serde_json::from_str(text).map_err(|e| format!("the exported message is not JSON: {e}"))?;
    let kept = serde_json::to_value(&typed)
        .map_err(|e| format!("async-openai's message did not serialize: {e}"))?;
    drop_reply_only_fields(&mut exported);
    match first_loss(&exported, &kept, "") {
        Some(path) => Err(format!(
            "async-openai's request message has no place for `{path}`; \
             remove it from the message and convert again"
        )),
        None => Ok(typed),
    }
}

/// Removes what a reply has and a request message has no place for.
fn drop_reply_only_fields(message: &mut Value) {
    let Some(object) = message.as_object_mut() else {
        return;
    };
    if object.get("role").and_then(Value::as_str) != Some("assistant") {
        return;
    }
    object.remove("annotations");
    if let Some(Value::Object(audio)) = object.get_mut("audio") {
        audio.retain(|key, _| key == "id");
    }
}

/// The path of the first part of `exported` that `kept` lacks or holds differently
/// (a `null` member counts as absent: async-openai writes `None` as nothing).
fn first_loss(exported: &Value, kept: &Value, path: &str) -> Option<String> {
    match (exported, kept) {
        (Value::Object(exported), Value::Object(kept)) => {
            exported.iter().find_map(|(key, value)| {
                let here = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match kept.get(key) {
                    None if value.is_null() => None,
                    None => Some(here),
                    Some(other) => first_loss(value, other, &here),
                }
            })
        }
        (Value::Array(exported), Value::Array(kept)) if exported.len() == kept.len() => exported
            .iter()
            .zip(kept)
            .enumerate()
            .find_map(|(i, (a, b))| first_loss(a, b, &format!("{path}[{i}]"))),
        _ if exported == kept => None,
        _ => Some(if path.is_empty() {
            "the message".to_owned()
        } else {
            path.to_owned()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_null_member_is_not_a_loss_but_a_missing_one_is() {
        let kept = json!({"role": "assistant", "tool_calls": [{"id": "c"}]});
        assert_eq!(
            first_loss(
                &json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]}),
                &kept,
                ""
            ),
            None
        );
        assert_eq!(
            first_loss(
                &json!({"role": "assistant", "tool_calls": [{"id": "c", "x": 1}]}),
                &kept,
                ""
            )
            .as_deref(),
            Some("tool_calls[0].x")
        );
    }
}
