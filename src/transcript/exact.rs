//! Provider messages kept exactly: imported from JSON text, held as that text, given back
//! as that text.
//!
//! A message imported with one of the `from_*_json` entry points keeps the provider's JSON
//! text (made compact: insignificant whitespace removed, nothing else changed) beside its
//! neutral fields, which are decoded from the text as the `&Value` entry points decode
//! them. Exporting it to the same codec gives that text back; exporting it elsewhere
//! translates the neutral fields. The fields are public, so the text can go stale: a
//! message whose fields no longer decode from its text loses the text where it enters a
//! snapshot or a session ([`seal`]), and an export checks the same before it uses the text.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::{conversion, lexer, ContentBlock, Message, ToolResult};
use crate::error::Result;
use crate::json;

/// A provider message format: one of the codecs [`Message`] converts to and from.
///
/// # Exporting to another codec
///
/// A message exported to the codec it came from is given back as it came. Exported to
/// another codec, it is translated into valid input for that codec or refused with
/// [`Error::Conversion`](crate::Error::Conversion) naming the block (its index in `content`
/// and its type) or field and why; never silently invalid. Between OpenAI Chat and
/// Anthropic see [`Message::to_openai_chat`] and [`Message::to_anthropic`]. Where the
/// Responses API or Gemini is one side, a message is reduced to what every codec has:
///
/// * text, tool calls (their id, name and arguments) and tool results with text output
///   (a Gemini `response` object as its JSON text) translate;
/// * dropped, because they mean nothing to another provider: a Responses item's `id` and
///   `status` and a message item's `type`; Gemini thought signatures (`thoughtSignature`
///   / `thought_signature`) and the compatibility mode's `extra_content`; OpenAI Chat
///   fields that are `null` or empty (`refusal`, `annotations`, ...) and a streamed call's
///   `index`; Anthropic `citations: null` or `[]` and `caller: {"type": "direct"}`;
/// * refused: every other block (reasoning and compaction items, hosted tool calls,
///   thinking, images, files, audio, Gemini thoughts and data parts, unknown blocks), every
///   other provider field, custom tool calls (except between the two OpenAI APIs), system
///   messages to Gemini (which takes them apart from the contents), and error results
///   outside a [`Role::Tool`](crate::Role::Tool) message to the Responses API.
///
/// # Examples
///
/// ```
/// use agent_session::{Codec, Message};
///
/// let text = r#"{"role":"user","content":"hi","name":"ada"}"#;
/// let message = Message::from_json(Codec::OpenAiChat, text)?;
/// assert_eq!(message.to_json(Codec::OpenAiChat)?, text);
/// assert_eq!(Codec::OpenAiChat.name(), "openai-chat");
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Codec {
    /// OpenAI Chat Completions messages ([`Message::from_openai_chat`]), also used by
    /// Gemini's OpenAI compatibility mode.
    #[serde(rename = "openai_chat")]
    OpenAiChat,
    /// OpenAI Responses API items ([`Message::from_responses`]): one item, or a group of
    /// items (a JSON array).
    #[serde(rename = "openai_responses")]
    OpenAiResponses,
    /// Anthropic Messages API messages ([`Message::from_anthropic`]).
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Gemini `generateContent` contents ([`Message::from_gemini`]).
    #[serde(rename = "gemini")]
    Gemini,
}

impl Codec {
    /// Every codec, in a fixed order.
    pub const ALL: [Codec; 4] = [
        Codec::OpenAiChat,
        Codec::OpenAiResponses,
        Codec::Anthropic,
        Codec::Gemini,
    ];

    /// The codec's name in errors ([`Error::Conversion`](crate::Error::Conversion)'s
    /// `provider`): `"openai-chat"`, `"openai-responses"`, `"anthropic"`, `"gemini"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Codec::OpenAiChat => "openai-chat",
            Codec::OpenAiResponses => "openai-responses",
            Codec::Anthropic => "anthropic",
            Codec::Gemini => "gemini",
        }
    }

    /// The key a message kept as this codec's JSON text is stored under (and the codec's
    /// name in a message's `wire.codec`).
    pub(crate) fn stored_key(self) -> &'static str {
        match self {
            Codec::OpenAiChat => "openai_chat",
            Codec::OpenAiResponses => "openai_responses",
            Codec::Anthropic => "anthropic",
            Codec::Gemini => "gemini",
        }
    }

    pub(crate) fn from_stored_key(key: &str) -> Option<Codec> {
        Codec::ALL
            .into_iter()
            .find(|codec| codec.stored_key() == key)
    }

    /// Decodes a provider message given as a JSON value (checked text: within the depth
    /// limits, so no wire depth check is needed before the decoders take it apart).
    fn decode(self, message: Value) -> Result<Message> {
        let (name, decoded) = match self {
            Codec::OpenAiChat => ("openai-chat", super::openai::decode(message)),
            Codec::OpenAiResponses => ("openai-responses", super::responses::decode(message)),
            Codec::Anthropic => ("anthropic", super::anthropic::decode(message)),
            Codec::Gemini => ("gemini", super::gemini::decode(message)),
        };
        super::checked_depth(name, decoded?)
    }

    /// Encodes the neutral fields of `message` as a JSON value.
    fn encode(self, message: &Message) -> Result<Value> {
        match self {
            Codec::OpenAiChat => message.to_openai_chat(),
            Codec::OpenAiResponses => message.to_responses(),
            Codec::Anthropic => message.to_anthropic(),
            Codec::Gemini => message.to_gemini(),
        }
    }

    /// Imports a whole transcript: `messages` is a JSON array of this codec's messages
    /// (Gemini's `contents`, a Responses input list with one message per item, ...). Each
    /// element is imported as by [`Message::from_json`], keeping its text exactly; an error
    /// names the index of the message it is about.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Codec;
    ///
    /// let contents = concat!(
    ///     r#"[{"role":"user","parts":[{"text":"Weather in Paris?"}]},"#,
    ///     r#"{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]},"#,
    ///     r#"{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"temp":21}}}]}]"#,
    /// );
    /// let messages = Codec::Gemini.import(contents)?;
    /// assert_eq!(messages[2].tool_results().next().map(|r| r.call_id.as_str()), Some("get_weather-0"));
    /// assert_eq!(Codec::Gemini.export(&messages)?, contents);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`](crate::Error::Conversion) if `messages` is not a JSON array, or
    /// as [`Message::from_json`] for an element (the problem then starts with `message <i>:`).
    pub fn import(self, messages: &str) -> Result<Vec<Message>> {
        let elements: Vec<&RawValue> = serde_json::from_str(messages).map_err(|e| {
            conversion(
                self.name(),
                format!("the transcript is not a JSON array of messages: {e}"),
            )
        })?;
        elements
            .iter()
            .enumerate()
            .map(|(index, element)| import(self, element.get()).map_err(|e| at_message(index, e)))
            .collect()
    }

    /// Exports a whole transcript as a JSON array of this codec's messages, each written as
    /// by [`Message::to_json`] (so messages imported from this codec's text come back as
    /// that text), with what one message alone cannot say looked up at the tool call a
    /// result answers: a Gemini `functionResponse` names its function, a result of an
    /// OpenAI legacy `function_call` is a `function` message, and a Responses output of a
    /// custom tool's call is a `custom_tool_call_output`. A Responses group is spliced into
    /// the list item by item.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Codec, ContentBlock, Message, ToolCall, ToolResult};
    /// use serde_json::json;
    ///
    /// let call = Message::from_gemini_json(r#"{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{}}}]}"#)?;
    /// let id = call.tool_calls().next().map(|c| c.id.clone()).unwrap_or_default();
    /// let result = Message::tool_result(ToolResult::new(id, "sunny"));
    /// let contents = Codec::Gemini.export(&[call, result])?;
    /// assert!(contents.ends_with(r#"{"parts":[{"functionResponse":{"name":"get_weather","response":{"output":"sunny"}}}],"role":"user"}]"#));
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Message::to_json`], with the problem starting with `message <i>:`.
    pub fn export(self, messages: &[Message]) -> Result<String> {
        let mut calls: HashMap<String, CallFacts> = HashMap::new();
        let mut out = String::from("[");
        for (index, message) in messages.iter().enumerate() {
            let filled = fill_results(self, message, &calls);
            let message = filled.as_ref().unwrap_or(message);
            let text = message.to_json(self).map_err(|e| at_message(index, e))?;
            let inner = match text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                Some(items) => items,
                None => &text,
            };
            if !inner.is_empty() {
                if out.len() > 1 {
                    out.push(',');
                }
                out.push_str(inner);
            }
            for call in message.tool_calls() {
                calls.insert(
                    call.id.clone(),
                    CallFacts {
                        name: call.name.clone(),
                        id_synthetic: call.wire.id_synthetic,
                        legacy_function: call.wire.legacy_function,
                        custom: call.wire.custom,
                    },
                );
            }
        }
        out.push(']');
        Ok(out)
    }
}

/// What a transcript export needs to know of a call to write its result.
struct CallFacts {
    name: String,
    id_synthetic: bool,
    legacy_function: bool,
    custom: bool,
}

/// A copy of `message` whose tool results say what the codec needs of their calls, if any
/// lacks it.
fn fill_results(
    codec: Codec,
    message: &Message,
    calls: &HashMap<String, CallFacts>,
) -> Option<Message> {
    let needs = |result: &ToolResult| {
        let Some(call) = calls.get(&result.call_id) else {
            return false;
        };
        match codec {
            Codec::Gemini => result.wire.name.is_none(),
            Codec::OpenAiChat => call.legacy_function && !result.wire.id_synthetic,
            Codec::OpenAiResponses => call.custom && !result.wire.custom,
            Codec::Anthropic => false,
        }
    };
    if !message.tool_results().any(needs) {
        return None;
    }
    let mut filled = message.clone();
    filled.set_raw(None);
    for block in &mut filled.content {
        if let ContentBlock::ToolResult(result) = block {
            if let Some(call) = calls.get(&result.call_id).filter(|_| needs(result)) {
                match codec {
                    Codec::Gemini | Codec::OpenAiChat => {
                        result.wire.name = Some(call.name.clone());
                        result.wire.id_synthetic = call.id_synthetic;
                    }
                    Codec::OpenAiResponses => result.wire.custom = true,
                    Codec::Anthropic => {}
                }
            }
        }
    }
    Some(filled)
}

/// `error` about the message at `index` of a transcript.
fn at_message(index: usize, error: crate::Error) -> crate::Error {
    match error {
        crate::Error::Conversion { provider, problem } => crate::Error::Conversion {
            provider,
            problem: format!("message {index}: {problem}"),
        },
        other => other,
    }
}

/// A provider's JSON text for a message: compact, checked, in `codec`'s form.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    pub(crate) codec: Codec,
    pub(crate) text: Box<RawValue>,
    /// How deep the text nests (1 for a flat object).
    pub(crate) depth: usize,
}

impl PartialEq for Raw {
    fn eq(&self, other: &Self) -> bool {
        self.codec == other.codec && self.text.get() == other.text.get()
    }
}

/// How deep a provider's text may nest: it is stored one level inside the message's own
/// object (`{"openai_chat": ...}`), which may nest [`json::MAX_MESSAGE_DEPTH`] levels.
const MAX_TEXT_DEPTH: usize = json::MAX_MESSAGE_DEPTH - 1;

impl Raw {
    /// The message `text` holds, with `text` kept: how a stored message is read.
    ///
    /// # Errors
    ///
    /// A description of what is wrong, for the decoder's error.
    pub(crate) fn decode(
        codec: Codec,
        text: Box<RawValue>,
    ) -> std::result::Result<Message, String> {
        import_keeping(codec, text).map_err(|e| {
            format!(
                "the message stored as {} provider JSON does not decode: {e}",
                codec.stored_key()
            )
        })
    }
}

/// Imports `text` with `codec`, keeping the text.
fn import(codec: Codec, text: &str) -> Result<Message> {
    let minified = minify(codec, text)?;
    let mut message = decode_text(codec, &minified.text)?;
    let depth = minified.depth;
    let text = RawValue::from_string(minified.text.into_owned()).map_err(|e| {
        conversion(
            codec.name(),
            format!("the message is not JSON a stored session can hold: {e}"),
        )
    })?;
    message.set_raw(Some(Raw { codec, text, depth }));
    Ok(message)
}

/// [`import`] for text already held as a `RawValue` (a stored message): the box is kept
/// as it is when the text is already compact, saving a copy and `serde_json`'s second look.
fn import_keeping(codec: Codec, text: Box<RawValue>) -> Result<Message> {
    let minified = minify(codec, text.get())?;
    let depth = minified.depth;
    match minified.text {
        Cow::Borrowed(_) => {
            let mut message = decode_text(codec, text.get())?;
            message.set_raw(Some(Raw { codec, text, depth }));
            Ok(message)
        }
        Cow::Owned(_) => import(codec, text.get()),
    }
}

fn minify(codec: Codec, text: &str) -> Result<lexer::Minified<'_>> {
    lexer::minify(text, MAX_TEXT_DEPTH).map_err(|e| {
        conversion(
            codec.name(),
            format!("the message is not JSON a stored session can hold: {e}"),
        )
    })
}

/// The neutral fields of checked, compact text.
fn decode_text(codec: Codec, text: &str) -> Result<Message> {
    // Duplicate keys were refused by the lexer, so the plain (faster) decoder reads the same.
    let value: Value = serde_json::from_str(text).map_err(|e| {
        // The text is valid JSON (checked), so only a number out of the float range gets
        // here: the neutral fields could not hold it.
        conversion(
            codec.name(),
            format!("the message cannot be read into the neutral fields: {e}"),
        )
    })?;
    codec.decode(value)
}

impl Message {
    /// Converts a provider message given as JSON text with `codec`, keeping the text: the
    /// message is given back exactly as it came (keys in their order, numbers as written,
    /// strings byte for byte) by [`to_json`](Self::to_json) with the same codec, and is
    /// saved and loaded as that text. Only insignificant whitespace is removed.
    ///
    /// The neutral fields are decoded as the codec's `&Value` entry point decodes them
    /// ([`from_openai_chat`](Self::from_openai_chat), [`from_anthropic`](Self::from_anthropic)).
    /// If they are changed afterwards, the text no longer describes the message: a snapshot
    /// or session the message enters, and [`to_json`](Self::to_json), then use the fields,
    /// as for a message imported from a `&Value`.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Codec, Message};
    ///
    /// // Key order, a 20-digit integer and `1.10` survive; the `&Value` entry points
    /// // would sort the keys and turn both numbers into floats.
    /// let text = r#"{"role": "assistant", "content": null, "tool_calls": [{"type": "function",
    ///     "id": "call_1", "function": {"name": "f", "arguments": "{}"}}], "seed": 18446744073709551616, "t": 1.10}"#;
    /// let message = Message::from_json(Codec::OpenAiChat, text)?;
    /// assert_eq!(message.tool_calls().count(), 1);
    /// assert!(message.to_json(Codec::OpenAiChat)?.ends_with(r#""seed":18446744073709551616,"t":1.10}"#));
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`](crate::Error::Conversion) if `text` is not one JSON value
    /// (RFC 8259), has duplicate object keys or an unpaired UTF-16 surrogate escape
    /// (`"\ud800"`), nests deeper than a stored session can hold, has a number beyond the
    /// float range (`1e400`, which the neutral fields cannot hold), or is not a valid
    /// message for the codec (the errors of the codec's `&Value` entry point).
    pub fn from_json(codec: Codec, text: &str) -> Result<Self> {
        import(codec, text)
    }

    /// Converts to `codec`'s form as compact JSON text. A message imported from text with
    /// the same codec ([`from_json`](Self::from_json)) and not changed since comes back as
    /// that text; any other message is encoded from its neutral fields, as the codec's
    /// `&Value` entry point ([`to_openai_chat`](Self::to_openai_chat),
    /// [`to_anthropic`](Self::to_anthropic)) encodes it, translated or refused when it came
    /// from another provider.
    ///
    /// Whether the text still describes the message is checked by decoding it again: about
    /// as costly as the import was.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Codec, Message};
    ///
    /// assert_eq!(Message::user("hi").to_json(Codec::Anthropic)?, r#"{"content":[{"text":"hi","type":"text"}],"role":"user"}"#);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`](crate::Error::Conversion) as the codec's `&Value` entry point.
    pub fn to_json(&self, codec: Codec) -> Result<String> {
        if let Some(raw) = self.raw() {
            if raw.codec == codec && raw_is_current(self, raw) {
                return Ok(raw.text.get().to_owned());
            }
        }
        let value = codec.encode(self)?;
        let text =
            serde_json::to_string(&value).map_err(|e| conversion(codec.name(), e.to_string()));
        json::dismantle(value);
        text
    }

    /// [`from_json`](Self::from_json) with [`Codec::OpenAiChat`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    ///
    /// let text = r#"{"role":"user","content":"hi"}"#;
    /// assert_eq!(Message::from_openai_chat_json(text)?.to_openai_chat_json()?, text);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_json`](Self::from_json).
    pub fn from_openai_chat_json(text: &str) -> Result<Self> {
        import(Codec::OpenAiChat, text)
    }

    /// [`to_json`](Self::to_json) with [`Codec::OpenAiChat`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    ///
    /// let text = Message::user("hi").to_openai_chat_json()?;
    /// assert_eq!(text, r#"{"content":[{"text":"hi","type":"text"}],"role":"user"}"#);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`to_json`](Self::to_json).
    pub fn to_openai_chat_json(&self) -> Result<String> {
        self.to_json(Codec::OpenAiChat)
    }

    /// [`from_json`](Self::from_json) with [`Codec::Anthropic`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    ///
    /// let text = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"b":1,"a":2}}]}"#;
    /// assert_eq!(Message::from_anthropic_json(text)?.to_anthropic_json()?, text);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_json`](Self::from_json).
    pub fn from_anthropic_json(text: &str) -> Result<Self> {
        import(Codec::Anthropic, text)
    }

    /// [`to_json`](Self::to_json) with [`Codec::Anthropic`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    ///
    /// let text = Message::from_openai_chat_json(r#"{"role":"user","content":"hi"}"#)?.to_anthropic_json()?;
    /// assert_eq!(text, r#"{"content":"hi","role":"user"}"#);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`to_json`](Self::to_json).
    pub fn to_anthropic_json(&self) -> Result<String> {
        self.to_json(Codec::Anthropic)
    }
}

impl Message {
    /// [`from_json`](Self::from_json) with [`Codec::OpenAiResponses`]: one item (a JSON
    /// object) or a group of items (a JSON array, such as a response's `output`).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    ///
    /// let output = r#"[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAA"},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{}","status":"completed"}]"#;
    /// let message = Message::from_responses_json(output)?;
    /// assert_eq!(message.tool_calls().next().map(|c| c.id.as_str()), Some("call_1"));
    /// assert_eq!(message.to_responses_json()?, output);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_json`](Self::from_json).
    pub fn from_responses_json(text: &str) -> Result<Self> {
        import(Codec::OpenAiResponses, text)
    }

    /// [`to_json`](Self::to_json) with [`Codec::OpenAiResponses`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    ///
    /// assert_eq!(Message::user("hi").to_responses_json()?, r#"{"content":[{"text":"hi","type":"input_text"}],"role":"user"}"#);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`to_json`](Self::to_json).
    pub fn to_responses_json(&self) -> Result<String> {
        self.to_json(Codec::OpenAiResponses)
    }

    /// [`from_json`](Self::from_json) with [`Codec::Gemini`]: one `Content`.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    ///
    /// let text = r#"{"role":"model","parts":[{"text":"Hi","thoughtSignature":"c2ln"}]}"#;
    /// assert_eq!(Message::from_gemini_json(text)?.to_gemini_json()?, text);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_json`](Self::from_json).
    pub fn from_gemini_json(text: &str) -> Result<Self> {
        import(Codec::Gemini, text)
    }

    /// [`to_json`](Self::to_json) with [`Codec::Gemini`].
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    ///
    /// assert_eq!(Message::user("hi").to_gemini_json()?, r#"{"parts":[{"text":"hi"}],"role":"user"}"#);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`to_json`](Self::to_json).
    pub fn to_gemini_json(&self) -> Result<String> {
        self.to_json(Codec::Gemini)
    }
}

/// Whether `raw` still decodes to exactly the neutral fields of `message`.
fn raw_is_current(message: &Message, raw: &Raw) -> bool {
    let Ok(decoded) = decode_text(raw.codec, raw.text.get()) else {
        return false;
    };
    let current = decoded.role == message.role
        && decoded.content == message.content
        && decoded.extra == message.extra
        && decoded.has_same_hints(message);
    super::dismantle_message(decoded);
    current
}

/// Drops the provider text of every message whose neutral fields no longer decode from it,
/// so that what is stored and exported is the message as it now is. Called where messages
/// enter a snapshot or a session, after which they cannot be changed.
pub(crate) fn seal(messages: &mut [Message]) {
    for message in messages {
        seal_one(message);
    }
}

/// [`seal`] for one message.
pub(crate) fn seal_one(message: &mut Message) {
    if let Some(raw) = message.raw() {
        if !raw_is_current(message, raw) {
            message.set_raw(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_no_larger_for_what_it_rarely_has() {
        // Vec + Map + role and shape hints + one pointer for the rest: a million short
        // messages load in about three times their bytes on disk (tests/load_memory.rs).
        assert!(
            std::mem::size_of::<Message>() <= 64,
            "{}",
            std::mem::size_of::<Message>()
        );
    }
}
