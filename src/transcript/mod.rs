//! The provider-neutral transcript: messages made of content blocks.
//!
//! A [`Message`] has a [`Role`] and a list of [`ContentBlock`]s: text, a tool call, a tool
//! result, or any other provider block kept verbatim. Fields a provider sends that the model
//! does not name are kept in `extra` maps, and the codecs ([`Codec`]: OpenAI Chat, OpenAI
//! Responses, Anthropic, Gemini) record the few shape details (a string `content` versus a
//! list, `null` versus absent) needed to give the provider back what it sent. A message
//! imported from JSON text ([`Message::from_json`]) also keeps that text, and is given back
//! and stored as it (`exact`, `stored`).

mod anthropic;
mod depth;
mod exact;
mod foreign;
mod gemini;
mod lexer;
mod openai;
mod responses;
mod stored;

pub(crate) use depth::{blocks_depth, dismantle_message, dismantle_output, message_depth};
pub use exact::Codec;
pub(crate) use exact::{seal, seal_one};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::json::{self, strict};

/// Who wrote a message.
///
/// # Examples
///
/// ```
/// use agent_session::{Message, Role};
///
/// assert_eq!(Message::user("hi").role, Role::User);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions from the application (OpenAI's `system` and `developer`, Anthropic's
    /// mid-conversation `system` messages).
    System,
    /// The person using the agent (and, in Anthropic's API, tool results).
    User,
    /// The model.
    Assistant,
    /// A tool's result (OpenAI's `tool` role).
    Tool,
}

/// One message of a transcript.
///
/// Build messages with [`Message::user`], [`Message::assistant`], [`Message::system`] and
/// [`Message::tool_result`], or convert a provider's message with
/// [`Message::from_openai_chat`] or [`Message::from_anthropic`], which give back exactly the
/// JSON they were given through [`Message::to_openai_chat`] and [`Message::to_anthropic`].
///
/// # Examples
///
/// ```
/// use agent_session::{ContentBlock, Message, ToolCall};
/// use serde_json::json;
///
/// let reply = Message::assistant(vec![
///     ContentBlock::text("Let me look."),
///     ContentBlock::tool_call(ToolCall::new("call_1", "read_file", json!({"path": "a.rs"}))),
/// ]);
/// assert_eq!(reply.text(), "Let me look.");
/// assert_eq!(reply.tool_calls().count(), 1);
///
/// let wire = json!({"role": "user", "content": "hi", "name": "ada"});
/// let message = Message::from_openai_chat(&wire)?;
/// assert_eq!(message.to_openai_chat()?, wire);
/// # Ok::<(), agent_session::Error>(())
/// ```
///
/// # Exactly, or equal as a value
///
/// There are two ways in for each codec, and they keep different things:
///
/// * **From JSON text** ([`Message::from_json`], [`Message::from_openai_chat_json`],
///   [`from_responses_json`](Message::from_responses_json),
///   [`from_anthropic_json`](Message::from_anthropic_json),
///   [`from_gemini_json`](Message::from_gemini_json), [`Codec::import`]): the provider's text
///   is kept and given back byte for byte by the same codec's `to_*_json` (only
///   insignificant whitespace is removed): object keys in their order, every number as
///   written (integers beyond 64 bits, long decimals, `-0.0`, `1.0` apart from `1`, `1E3`),
///   strings, unknown fields and types. It is also what a snapshot stores.
/// * **From a [`serde_json::Value`]** ([`Message::from_openai_chat`],
///   [`from_responses`](Message::from_responses), [`from_anthropic`](Message::from_anthropic),
///   [`from_gemini`](Message::from_gemini)): what the `Value` has already lost is lost.
///   Without `serde_json`'s `preserve_order` feature (which this crate does not turn on) its
///   objects are sorted by key; without `arbitrary_precision`, an integer outside the 64-bit
///   range or any number with a fraction or exponent is an `f64`, so
///   `18446744073709551616` comes back as `1.8446744073709552e19`, `1.10` as `1.1`, `1E3` as
///   `1000.0` and `-0` as `-0.0`, and decimals beyond 17 significant digits are rounded. The
///   message is given back *equal as a value* to the input (the `to_*` methods), strings,
///   `null` versus absent versus empty, and unknown fields kept; it is stored in the neutral
///   form.
///
/// A message imported from text whose public fields are changed afterwards no longer
/// matches its text: it is then exported from its fields, and stored in the neutral form,
/// like one imported from a value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// What it says, in order.
    pub content: Vec<ContentBlock>,
    /// Provider fields the neutral model does not name (`name`, `refusal`, `id`, ...), kept
    /// verbatim.
    pub extra: Map<String, Value>,
    /// Shape hints; serialized by `stored`.
    pub(crate) wire: MessageWire,
    /// What few messages have: the provider's JSON text of a message imported from text
    /// (see [`exact`]), a Responses group's layout. Behind one pointer, and beside `wire`
    /// rather than in it, so that a message is no larger for it: a transcript of a million
    /// short messages is mostly these structs.
    pub(crate) rare: Option<Box<RareWire>>,
}

impl Message {
    /// A message with `role` and `content` and nothing else.
    #[must_use]
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Message {
            role,
            content,
            extra: Map::new(),
            wire: MessageWire::default(),
            rare: None,
        }
    }

    /// A user message with one text block.
    #[must_use]
    pub fn user(text: impl Into<String>) -> Self {
        Message::new(Role::User, vec![ContentBlock::text(text)])
    }

    /// A system message with one text block.
    #[must_use]
    pub fn system(text: impl Into<String>) -> Self {
        Message::new(Role::System, vec![ContentBlock::text(text)])
    }

    /// An assistant message with the given blocks.
    #[must_use]
    pub fn assistant(content: Vec<ContentBlock>) -> Self {
        Message::new(Role::Assistant, content)
    }

    /// A [`Role::Tool`] message carrying one tool result.
    #[must_use]
    pub fn tool_result(result: ToolResult) -> Self {
        Message::new(Role::Tool, vec![ContentBlock::tool_result(result)])
    }

    /// Whether this message starts a turn: a user message with something besides tool
    /// results (a prompt). Turns are what [`ForkAt::Turns`](crate::ForkAt::Turns) and
    /// [`RewindTo::LastTurns`](crate::RewindTo::LastTurns) count.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, Message, Role, ToolResult};
    ///
    /// assert!(Message::user("hello").is_prompt());
    /// assert!(!Message::assistant(vec![ContentBlock::text("hi")]).is_prompt());
    /// let results_only = Message::new(
    ///     Role::User,
    ///     vec![ContentBlock::tool_result(ToolResult::new("c1", "done"))],
    /// );
    /// assert!(!results_only.is_prompt());
    /// ```
    #[must_use]
    pub fn is_prompt(&self) -> bool {
        self.role == Role::User
            && self
                .content
                .iter()
                .any(|block| !matches!(block, ContentBlock::ToolResult(_)))
    }

    /// The message's text blocks joined with newlines.
    #[must_use]
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text(t) = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&t.text);
            }
        }
        out
    }

    /// The tool calls this message makes, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall(call) => Some(&**call),
            _ => None,
        })
    }

    /// The tool results this message carries, in order.
    pub fn tool_results(&self) -> impl Iterator<Item = &ToolResult> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolResult(result) => Some(&**result),
            _ => None,
        })
    }

    /// Converts a message in OpenAI Chat Completions form (`role`, `content` as a string,
    /// `null` or a list of parts, `tool_calls`, `tool_call_id`, and any other field).
    ///
    /// `developer` becomes [`Role::System`], and `model` (the role Gemini's OpenAI
    /// compatibility mode gives the model's turns) [`Role::Assistant`], each given back
    /// under its own name; a `tool` message becomes one
    /// [`ContentBlock::ToolResult`]; text parts become [`ContentBlock::Text`]; every other
    /// part and field is kept verbatim. Tool-call `arguments` strings are kept byte for byte.
    ///
    /// The legacy forms are read too: an assistant message's `function_call` object becomes
    /// a tool call, and a `function` message (`{"role": "function", "name", "content"}`) a
    /// [`Role::Tool`] result. Neither has an id, so both get `<name>-0`: the result answers
    /// the latest unanswered call of that function, as the legacy API pairs them. The id is
    /// never sent back, and each is given back in its legacy form.
    ///
    /// What the `Value` has already lost (key order, numbers beyond 64 bits or written with
    /// more digits than an `f64` holds) cannot be given back: see [`Message`] for the text
    /// entry points that keep it.
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`] if `message` is not an object, has an unknown role, has
    /// `tool_calls` / `tool_call_id` of the wrong shape, or nests deeper than a stored
    /// session can hold (125 levels for the message as stored). Also if it holds what only
    /// Anthropic sends, which OpenAI does not accept and [`to_openai_chat`](Self::to_openai_chat)
    /// would translate or refuse: a part of an Anthropic block type (`image`, `thinking`,
    /// `server_tool_use`, ...), `citations` on a text part, or `caller` on a tool call. Import
    /// such a message with [`Message::from_anthropic`].
    pub fn from_openai_chat(message: &Value) -> Result<Self> {
        check_wire_depth("openai-chat", message)?;
        checked_depth("openai-chat", openai::decode(message.clone())?)
    }

    /// Converts to OpenAI Chat Completions form. A message that came from
    /// [`Message::from_openai_chat`] and was not modified comes back equal to the input.
    ///
    /// A message from Anthropic ([`Message::from_anthropic`]) is translated where the
    /// translation is exact:
    ///
    /// * an `image` block with a `base64` source becomes an `image_url` part with a
    ///   `data:<media_type>;base64,<data>` URL, one with a `url` source an `image_url` part
    ///   with that URL (in user messages only);
    /// * a user message holding exactly one tool result becomes a `tool` message;
    /// * an assistant message holding only tool calls gets `"content": null`;
    /// * `citations: null` (or `[]`) on text and `caller: {"type": "direct"}` on a tool call
    ///   are dropped; a `system` message stays a `system` message.
    ///
    /// Block types and fields that are neither provider's known ones are given back
    /// verbatim and not checked. A message from the Responses API or Gemini is translated
    /// or refused as [`Codec`] says.
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`] if the message cannot be expressed in that form: a
    /// [`Role::Tool`] message without exactly one tool result, or a tool result elsewhere
    /// than alone in a user message; or if it nests deeper than a stored session can hold.
    /// Also, naming the block (its index in `content` and its type) and why, for what OpenAI
    /// Chat has no place for: Anthropic-only blocks (`thinking`, `redacted_thinking`,
    /// `document`, `search_result`, `server_tool_use`, `web_search_tool_result`,
    /// `code_execution_tool_result` and the other server-tool results, `container_upload`,
    /// `mid_conv_system`, ...), images outside user messages or with another source
    /// (a Files API `file`), a tool result marked as an error, text with citations, and
    /// tool calls made by a server tool (`caller` of another type). Drop or rewrite the
    /// block and convert again.
    pub fn to_openai_chat(&self) -> Result<Value> {
        checked_depth("openai-chat", self)?;
        if matches!(
            self.wire.codec,
            Some(Codec::OpenAiResponses | Codec::Gemini)
        ) {
            return openai::encode(&foreign::plain(self, "openai-chat", Codec::OpenAiChat)?);
        }
        openai::encode(self)
    }

    /// Converts a message in Anthropic Messages form (`role`, `content` as a string or a
    /// list of blocks). `tool_use` becomes [`ContentBlock::ToolCall`], `tool_result` becomes
    /// [`ContentBlock::ToolResult`], `text` becomes [`ContentBlock::Text`], and every other
    /// block (thinking with its signature, server tools, images) is kept verbatim.
    ///
    /// `role: "system"` becomes [`Role::System`]. These are Anthropic's mid-conversation
    /// system messages (`MessageParam.role` includes `"system"` since anthropic-sdk-python
    /// 0.105, and the API documents them for Claude Opus 4.8): their content is a string or
    /// text blocks (the API refuses images, documents, tool blocks and citations there), and
    /// the message may carry `cache_control`. The API also has placement rules (not first,
    /// right after a user turn, never two in a row), which a single message cannot be checked
    /// against. They are kept as they came and given back unchanged.
    ///
    /// What the `Value` has already lost (key order, numbers beyond 64 bits or written with
    /// more digits than an `f64` holds) cannot be given back: see [`Message`] for the text
    /// entry points that keep it.
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`] if `message` is not an object, has a role other than `user`,
    /// `assistant` or `system`, has a `tool_use` / `tool_result` block of the wrong shape
    /// (including a `tool_use` whose `input` is not a JSON object), or nests deeper than a
    /// stored session can hold (125 levels for the message as stored). Also if it holds what
    /// only OpenAI sends, which Anthropic does not accept and [`to_anthropic`](Self::to_anthropic)
    /// would translate or refuse: an OpenAI message field (`name`, `refusal`, `audio`,
    /// `function_call`, `annotations`, `tool_calls`, `tool_call_id`), an OpenAI part type
    /// (`image_url`, `input_audio`, `file`, `refusal`, and the Responses API's `input_text`,
    /// `output_text`, `input_image`, `input_file`), or `index` on a `tool_use`. Import such
    /// a message with [`Message::from_openai_chat`].
    pub fn from_anthropic(message: &Value) -> Result<Self> {
        check_wire_depth("anthropic", message)?;
        checked_depth("anthropic", anthropic::decode(message.clone())?)
    }

    /// Converts to Anthropic Messages form. A message that came from
    /// [`Message::from_anthropic`] and was not modified comes back equal to the input.
    ///
    /// A [`Role::System`] message is written with `role: "system"` (a mid-conversation
    /// system message; see [`Message::from_anthropic`] for what the API accepts there and
    /// where); a [`Role::Tool`] message becomes a user message with a `tool_result`.
    ///
    /// A message from OpenAI ([`Message::from_openai_chat`]) is translated where the
    /// translation is exact:
    ///
    /// * tool-call arguments kept as text become the `input` object they spell; empty or
    ///   blank text becomes `{}` (OpenAI sends `""` for a call without arguments);
    /// * an `image_url` part becomes an `image` block: a `data:<media_type>;base64,<data>`
    ///   URL a `base64` source (jpeg, png, gif or webp), an http(s) URL a `url` source; its
    ///   `detail` hint is dropped;
    /// * the OpenAI fields `name`, `refusal`, `audio`, `function_call`, `annotations`,
    ///   `tool_calls` and `tool_call_id` are dropped when `null` or empty, and a streamed
    ///   call's `index` is dropped.
    ///
    /// Block types and fields that are neither provider's known ones are given back
    /// verbatim and not checked. A message from the Responses API or Gemini is translated
    /// or refused as [`Codec`] says.
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`] if the message nests deeper than a stored session can hold;
    /// and, naming the block (its index in `content` and its type, and the call id for a tool
    /// call) or the field, and why:
    ///
    /// * tool-call arguments that are not a JSON object (text that is not JSON, or JSON that
    ///   is an array, string, number, boolean or `null`), as text or as a value;
    /// * images in system or assistant messages, or that Anthropic cannot take (another
    ///   media type, a `data:` URL not in base64, another URL scheme);
    /// * OpenAI-only parts: `input_audio`, `file`, `refusal`, and the Responses API's
    ///   `input_text`, `output_text`, `input_image`, `input_file`;
    /// * any of the OpenAI fields above with a value.
    pub fn to_anthropic(&self) -> Result<Value> {
        checked_depth("anthropic", self)?;
        if matches!(
            self.wire.codec,
            Some(Codec::OpenAiResponses | Codec::Gemini)
        ) {
            return anthropic::encode(&foreign::plain(self, "anthropic", Codec::Anthropic)?);
        }
        anthropic::encode(self)
    }

    /// Converts an OpenAI Responses API item (a JSON object), or a group of items (a JSON
    /// array, such as a response's `output`: reasoning, text and tool calls of one turn),
    /// into one message. See the table below for what each item becomes.
    ///
    /// | item | message |
    /// |---|---|
    /// | `message` (with or without `type`) | its role (`developer`: [`Role::System`], given back as `developer`); `input_text` parts of user and system messages and `output_text` parts of assistant messages with a string `text` become [`ContentBlock::Text`] (the part's other fields, such as `annotations`, in its `extra`), other parts (`refusal`, images, files) [`ContentBlock::Other`]; the item's other fields (`type`, `id`, `status`, ...) go to `extra` |
    /// | `function_call`, `custom_tool_call` | an assistant message with a [`ToolCall`]: `call_id` is its id, `arguments` (or a custom tool's `input`) its text arguments; the item's `id`, `status` and other fields go to the call's `extra` |
    /// | `function_call_output`, `custom_tool_call_output` | a [`Role::Tool`] message with a [`ToolResult`] for `call_id`: a string `output` as text, a list as blocks |
    /// | other `*_output` items, `mcp_approval_response` | a [`Role::Tool`] message holding the item as a [`ContentBlock::Other`] |
    /// | any other item: `reasoning` (with `summary` and `encrypted_content`), `compaction`, `item_reference` (also without `type`), hosted tool calls (`web_search_call`, `file_search_call`, `code_interpreter_call`, `image_generation_call`, `computer_call`, `local_shell_call`, `shell_call`, `apply_patch_call`, `mcp_call`, ...), unknown types | an assistant message holding the item as a [`ContentBlock::Other`] |
    ///
    /// Every item of a group must have the same neutral role. Fields and part or item types
    /// the table does not name are kept verbatim.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Message, Role};
    /// use serde_json::json;
    ///
    /// let item = json!({"type": "function_call_output", "call_id": "call_1", "output": "42"});
    /// let message = Message::from_responses(&item)?;
    /// assert_eq!(message.role, Role::Tool);
    /// assert_eq!(message.to_responses()?, item);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`] if `item` is not an object or a non-empty array of objects, if
    /// a group mixes roles, if an item lacks what its type requires (a message's `role` and
    /// `content`, a call's `call_id`, `name` and `arguments` / `input` as strings, an
    /// output's `call_id` and `output`), has an unknown message role, or if the message
    /// nests deeper than a stored session can hold.
    pub fn from_responses(item: &Value) -> Result<Self> {
        check_wire_depth("openai-responses", item)?;
        checked_depth("openai-responses", responses::decode(item.clone())?)
    }

    /// Converts to OpenAI Responses items: an object for one item, an array for several
    /// ([`Codec::export`] splices them into one input list). A message that came from
    /// [`Message::from_responses`] and was not modified comes back equal to the input.
    ///
    /// A message from another provider, or built in Rust, is translated: text becomes
    /// `message` items (an assistant's each its own, with string content), tool calls
    /// `function_call` (or `custom_tool_call`) items with text arguments, tool results
    /// `function_call_output` (or `custom_tool_call_output`) items; see the codec notes on
    /// what is dropped and what is refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, Message, ToolCall};
    /// use serde_json::json;
    ///
    /// let reply = Message::assistant(vec![
    ///     ContentBlock::text("Checking."),
    ///     ContentBlock::tool_call(ToolCall::new("call_1", "f", json!({"a": 1}))),
    /// ]);
    /// assert_eq!(reply.to_responses()?, json!([
    ///     {"role": "assistant", "content": "Checking."},
    ///     {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{\"a\":1}"}
    /// ]));
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`], naming the block and why, for what the Responses API has no
    /// place for: another provider's blocks (images, thinking, server tools, Gemini parts),
    /// provider fields on a message, text, call or result (other than those dropped: see
    /// [`Codec`]), a tool result marked as an error outside a [`Role::Tool`] message, tool
    /// results with other than text blocks; or if the message nests too deep.
    pub fn to_responses(&self) -> Result<Value> {
        checked_depth("openai-responses", self)?;
        responses::encode(self)
    }

    /// Converts a Gemini `generateContent` `Content` (`{"role": "user" | "model", "parts":
    /// [...]}`) into a message: `text` parts become text, `functionCall` parts tool calls
    /// with JSON arguments, `functionResponse` parts tool results whose output is the JSON
    /// text of `response`; every other part (thoughts, inline and file data, code
    /// execution) is kept verbatim. Keys are read in both spellings (`functionCall` or
    /// `function_call`, `thoughtSignature` or `thought_signature`) and given back as they
    /// came.
    ///
    /// Gemini's calls and responses often have no `id`: then a call gets the id
    /// `<name>-<k>` (its rank among the content's calls of that name, from 0), and so does a
    /// response, among the content's responses of that name, so that the `k`-th response to
    /// a function answers its `k`-th call. Such ids are never sent back to Gemini.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::Message;
    /// use serde_json::json;
    ///
    /// let content = json!({"role": "model", "parts": [
    ///     {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"}
    /// ]});
    /// let message = Message::from_gemini(&content)?;
    /// assert_eq!(message.tool_calls().next().map(|c| c.id.as_str()), Some("get_weather-0"));
    /// assert_eq!(message.to_gemini()?, content);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`] if `content` is not an object, has a role other than `user` or
    /// `model`, `parts` that is not a list of objects, a `functionCall` without a string
    /// `name` or with `args` that is not an object, a `functionResponse` without a string
    /// `name` or an object `response`, or nests deeper than a stored session can hold.
    pub fn from_gemini(content: &Value) -> Result<Self> {
        check_wire_depth("gemini", content)?;
        checked_depth("gemini", gemini::decode(content.clone())?)
    }

    /// Converts to a Gemini `Content`. A message that came from [`Message::from_gemini`] and
    /// was not modified comes back equal to the input.
    ///
    /// A message from another provider, or built in Rust, is translated: text becomes
    /// `text` parts, tool calls `functionCall` parts (text arguments parsed into `args`),
    /// tool results `functionResponse` parts with `{"output": <text>}` (or `{"error":
    /// <text>}` for an error) as `response`. A result needs its tool's name there, which a
    /// result made in Rust does not carry: export the transcript with
    /// [`Codec::export`], which finds it at the call.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, Message};
    /// use serde_json::json;
    ///
    /// let reply = Message::assistant(vec![ContentBlock::text("Hello")]);
    /// assert_eq!(reply.to_gemini()?, json!({"role": "model", "parts": [{"text": "Hello"}]}));
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Conversion`], naming the block and why: a system message (Gemini takes
    /// system instructions apart from the contents), a tool result whose tool name is
    /// unknown, arguments that are not a JSON object, another provider's blocks or provider
    /// fields (other than those dropped: see [`Codec`]); or if the message nests too deep.
    pub fn to_gemini(&self) -> Result<Value> {
        checked_depth("gemini", self)?;
        gemini::encode(self, None)
    }
}

/// One piece of a message.
///
/// # Examples
///
/// ```
/// use agent_session::ContentBlock;
///
/// let block = ContentBlock::text("hello");
/// assert!(matches!(block, ContentBlock::Text(ref t) if t.text == "hello"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum ContentBlock {
    /// Text.
    Text(TextBlock),
    /// The model asks for a tool to be run. Boxed, like [`ToolResult`](Self::ToolResult),
    /// so that a block is not as large as its largest kind: most blocks are text, and a
    /// transcript of short messages would otherwise be mostly unused room. Make one with
    /// [`ContentBlock::tool_call`] or `ToolCall::into()`.
    ToolCall(Box<ToolCall>),
    /// The result of running a tool ([`ContentBlock::tool_result`], or `ToolResult::into()`).
    ToolResult(Box<ToolResult>),
    /// Any other provider block (images, thinking with its signature, refusals, server-side
    /// tool blocks), kept verbatim.
    Other {
        /// The block exactly as the provider sent it.
        #[serde(deserialize_with = "strict::value")]
        value: Value,
    },
}

impl ContentBlock {
    /// A text block.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextBlock::new(text))
    }

    /// A tool-call block.
    #[must_use]
    pub fn tool_call(call: ToolCall) -> Self {
        ContentBlock::ToolCall(Box::new(call))
    }

    /// A tool-result block.
    #[must_use]
    pub fn tool_result(result: ToolResult) -> Self {
        ContentBlock::ToolResult(Box::new(result))
    }
}

impl From<TextBlock> for ContentBlock {
    fn from(text: TextBlock) -> Self {
        ContentBlock::Text(text)
    }
}

impl From<ToolCall> for ContentBlock {
    fn from(call: ToolCall) -> Self {
        ContentBlock::tool_call(call)
    }
}

impl From<ToolResult> for ContentBlock {
    fn from(result: ToolResult) -> Self {
        ContentBlock::tool_result(result)
    }
}

/// A text block.
///
/// # Examples
///
/// ```
/// use agent_session::TextBlock;
///
/// assert_eq!(TextBlock::new("hi").text, "hi");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// Provider fields such as `citations` or `annotations`, kept verbatim.
    #[serde(
        default,
        skip_serializing_if = "Map::is_empty",
        deserialize_with = "strict::map"
    )]
    pub extra: Map<String, Value>,
}

impl TextBlock {
    /// A text block with no provider fields.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        TextBlock {
            text: text.into(),
            extra: Map::new(),
        }
    }
}

/// The arguments of a tool call, as the provider gave them.
///
/// OpenAI sends arguments as a string of JSON text, which is kept byte for byte (never
/// re-parsed and re-formatted); Anthropic sends a JSON value.
///
/// # Examples
///
/// ```
/// use agent_session::ToolArguments;
/// use serde_json::json;
///
/// let raw = ToolArguments::Text(r#"{"a": 1}"#.into());
/// assert_eq!(raw.to_value()?, json!({"a": 1}));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ToolArguments {
    /// A JSON value (Anthropic `input`).
    Json(Value),
    /// JSON text, kept exactly as received (OpenAI `arguments`).
    Text(String),
}

impl ToolArguments {
    /// The arguments as a JSON value, parsing them if they are text.
    ///
    /// # Errors
    ///
    /// The parser's error if the text is not valid JSON (models do produce that).
    pub fn to_value(&self) -> serde_json::Result<Value> {
        match self {
            ToolArguments::Json(value) => Ok(value.clone()),
            ToolArguments::Text(text) => serde_json::from_str(text),
        }
    }
}

/// A request from the model to run a tool.
///
/// In a snapshot every tool call has exactly one [`ToolResult`] later in the transcript.
///
/// # Examples
///
/// ```
/// use agent_session::ToolCall;
/// use serde_json::json;
///
/// let call = ToolCall::new("call_1", "calculator", json!({"expression": "2+2"}));
/// assert_eq!(call.arguments.to_value()?["expression"], "2+2");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ToolCallRepr", into = "ToolCallRepr")]
#[non_exhaustive]
pub struct ToolCall {
    /// The provider's id for this call; results refer to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub arguments: ToolArguments,
    /// Provider fields such as Anthropic's `caller`, kept verbatim.
    pub extra: Map<String, Value>,
    pub(crate) wire: ToolCallWire,
}

impl ToolCall {
    /// A tool call with JSON arguments.
    #[must_use]
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: ToolArguments::Json(arguments),
            extra: Map::new(),
            wire: ToolCallWire::default(),
        }
    }

    /// A tool call whose arguments are JSON text, kept exactly as given.
    #[must_use]
    pub fn with_raw_arguments(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            arguments: ToolArguments::Text(arguments.into()),
            ..ToolCall::new(id, name, Value::Null)
        }
    }
}

/// The serialized form of [`ToolCall`]: exactly one of `input` (JSON) or `arguments`
/// (text).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallRepr {
    id: String,
    name: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_value"
    )]
    input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Map::is_empty",
        deserialize_with = "strict::map"
    )]
    extra: Map<String, Value>,
    #[serde(
        default,
        skip_serializing_if = "ToolCallWire::is_default",
        deserialize_with = "strict::object"
    )]
    wire: ToolCallWire,
}

/// Deserializes a field that is present (even as `null`) as `Some`.
fn present_value<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Value>, D::Error> {
    strict::value(d).map(Some)
}

impl TryFrom<ToolCallRepr> for ToolCall {
    type Error = String;

    fn try_from(r: ToolCallRepr) -> std::result::Result<Self, String> {
        let arguments = match (r.input, r.arguments) {
            (Some(value), None) => ToolArguments::Json(value),
            (None, Some(text)) => ToolArguments::Text(text),
            _ => {
                return Err(format!(
                    "tool call {:?} must have exactly one of `input` or `arguments`",
                    r.id
                ))
            }
        };
        Ok(ToolCall {
            id: r.id,
            name: r.name,
            arguments,
            extra: r.extra,
            wire: r.wire,
        })
    }
}

impl From<ToolCall> for ToolCallRepr {
    fn from(c: ToolCall) -> Self {
        let (input, arguments) = match c.arguments {
            ToolArguments::Json(value) => (Some(value), None),
            ToolArguments::Text(text) => (None, Some(text)),
        };
        ToolCallRepr {
            id: c.id,
            name: c.name,
            input,
            arguments,
            extra: c.extra,
            wire: c.wire,
        }
    }
}

/// What a tool returned.
///
/// # Examples
///
/// ```
/// use agent_session::ToolOutput;
///
/// assert_eq!(ToolOutput::from("42").as_text(), Some("42"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolOutput {
    /// Plain text (often JSON text).
    Text(String),
    /// Content blocks (text and images, for providers that accept them).
    Blocks(#[serde(deserialize_with = "strict::objects")] Vec<ContentBlock>),
}

impl ToolOutput {
    /// The output if it is plain text.
    #[must_use]
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ToolOutput::Text(text) => Some(text),
            ToolOutput::Blocks(_) => None,
        }
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        ToolOutput::Text(text.to_owned())
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::Text(text)
    }
}

/// The result of a tool call, matched to it by `call_id`.
///
/// # Examples
///
/// ```
/// use agent_session::ToolResult;
///
/// let ok = ToolResult::new("call_1", "4");
/// let failed = ToolResult::error("call_2", "division by zero");
/// assert!(!ok.is_error && failed.is_error);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolResult {
    /// The id of the [`ToolCall`] this answers.
    pub call_id: String,
    /// What the tool returned.
    pub output: ToolOutput,
    /// True if the tool failed and `output` describes the failure.
    #[serde(default)]
    pub is_error: bool,
    /// Provider fields, kept verbatim.
    #[serde(
        default,
        skip_serializing_if = "Map::is_empty",
        deserialize_with = "strict::map"
    )]
    pub extra: Map<String, Value>,
    #[serde(
        default,
        skip_serializing_if = "ToolResultWire::is_default",
        deserialize_with = "strict::object"
    )]
    pub(crate) wire: ToolResultWire,
}

impl ToolResult {
    /// A successful result.
    #[must_use]
    pub fn new(call_id: impl Into<String>, output: impl Into<ToolOutput>) -> Self {
        ToolResult {
            call_id: call_id.into(),
            output: output.into(),
            is_error: false,
            extra: Map::new(),
            wire: ToolResultWire::default(),
        }
    }

    /// A failed result; `output` says what went wrong.
    #[must_use]
    pub fn error(call_id: impl Into<String>, output: impl Into<ToolOutput>) -> Self {
        ToolResult {
            is_error: true,
            ..ToolResult::new(call_id, output)
        }
    }
}

/// How a provider shaped a message's `content`, so it can be given back unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ContentShape {
    /// A list of blocks (the neutral form).
    #[default]
    Blocks,
    /// One string.
    String,
    /// `null`.
    Null,
    /// No `content` field.
    Absent,
}

impl ContentShape {
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
    fn is_blocks(&self) -> bool {
        *self == ContentShape::Blocks
    }
}

/// How a provider shaped a list field that the neutral model derives (OpenAI `tool_calls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ListShape {
    /// Present exactly when non-empty.
    #[default]
    Derived,
    /// Present as an empty list.
    Empty,
    /// Present as `null`.
    Null,
}

impl ListShape {
    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
    fn is_derived(&self) -> bool {
        *self == ListShape::Derived
    }
}

/// Shape hints for [`Message`]; empty for messages built in Rust.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct MessageWire {
    pub(crate) content: ContentShape,
    pub(crate) tool_calls: ListShape,
    /// The provider's role name when it differs from the neutral one (`developer`).
    pub(crate) role: Option<RoleAlias>,
    /// The codec that decoded the message, for the codecs whose blocks the others cannot
    /// tell by their type (OpenAI Responses, Gemini); `None` otherwise.
    pub(crate) codec: Option<Codec>,
    /// Gemini: the content had no `role` (it is then a user message).
    pub(crate) role_absent: bool,
}

/// What few messages have (see [`Message`]'s `rare`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RareWire {
    /// The provider's JSON text, for a message imported from text and not changed since;
    /// never part of the neutral form (a message with it is stored as that text).
    pub(crate) raw: Option<exact::Raw>,
    /// OpenAI Responses: the message is a group of items (a JSON array), laid out so.
    pub(crate) items: Option<Vec<ItemShape>>,
}

/// One item of an OpenAI Responses group: how many of the message's blocks it holds, and
/// for a `message` item, its other fields and the shape of its `content`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ItemShape {
    pub(crate) blocks: usize,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_map"
    )]
    pub(crate) message: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "ContentShape::is_blocks")]
    pub(crate) content: ContentShape,
}

fn optional_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Map<String, Value>>, D::Error> {
    strict::map(d).map(Some)
}

/// A message's `wire` object as stored: [`MessageWire`] and a Responses group's layout.
#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct WireRepr {
    #[serde(default, skip_serializing_if = "ContentShape::is_blocks")]
    pub(crate) content: ContentShape,
    #[serde(default, skip_serializing_if = "ListShape::is_derived")]
    pub(crate) tool_calls: ListShape,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) role: Option<RoleAlias>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) codec: Option<Codec>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) role_absent: bool,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_items"
    )]
    pub(crate) items: Option<Vec<ItemShape>>,
}

fn optional_items<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Vec<ItemShape>>, D::Error> {
    strict::objects(d).map(Some)
}

/// A provider's name for a role that differs from the neutral one. One byte rather than a
/// string: every message carries the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoleAlias {
    /// OpenAI's `developer`, for a system message.
    Developer,
    /// `model`, for an assistant message: the role Gemini's OpenAI compatibility mode
    /// gives the model's turns (its native `generateContent` role).
    Model,
}

impl RoleAlias {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RoleAlias::Developer => "developer",
            RoleAlias::Model => "model",
        }
    }

    /// The neutral role a message with this alias has.
    pub(crate) fn role(self) -> Role {
        match self {
            RoleAlias::Developer => Role::System,
            RoleAlias::Model => Role::Assistant,
        }
    }
}

impl Serialize for RoleAlias {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RoleAlias {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let alias = String::deserialize(d)?;
        match alias.as_str() {
            "developer" => Ok(RoleAlias::Developer),
            "model" => Ok(RoleAlias::Model),
            other => Err(serde::de::Error::custom(format!(
                "the role alias {other:?} is not one a codec records: a system message may carry \"developer\" and an assistant message \"model\""
            ))),
        }
    }
}

impl Message {
    /// The provider's text, if the message keeps it.
    pub(crate) fn raw(&self) -> Option<&exact::Raw> {
        self.rare.as_ref()?.raw.as_ref()
    }

    pub(crate) fn set_raw(&mut self, raw: Option<exact::Raw>) {
        let items = self.rare.take().and_then(|rare| rare.items);
        self.rare = RareWire::boxed(raw, items);
    }

    /// A Responses group's layout.
    pub(crate) fn items(&self) -> Option<&[ItemShape]> {
        self.rare.as_ref()?.items.as_deref()
    }

    pub(crate) fn set_items(&mut self, items: Option<Vec<ItemShape>>) {
        let raw = self.rare.take().and_then(|rare| rare.raw);
        self.rare = RareWire::boxed(raw, items);
    }

    /// Whether the message has the same shape hints as `other` (the provider text aside).
    pub(crate) fn has_same_hints(&self, other: &Message) -> bool {
        self.wire == other.wire && self.items() == other.items()
    }

    /// Whether the message has no shape hints (the provider text aside).
    pub(crate) fn has_no_hints(&self) -> bool {
        self.wire == MessageWire::default() && self.items().is_none()
    }

    /// Whether the message uses anything schema version 3 added: the provider form (its
    /// provider's text), or a shape hint of the codecs added with it. A document of an
    /// earlier version cannot hold such a message.
    pub(crate) fn uses_schema_3(&self) -> bool {
        self.raw().is_some()
            || self.items().is_some()
            || self.wire.codec.is_some()
            || self.wire.role_absent
            || self.content.iter().any(|block| match block {
                ContentBlock::ToolCall(call) => {
                    call.wire.legacy_function
                        || call.wire.id_synthetic
                        || call.wire.snake_case
                        || call.wire.arguments_absent
                }
                ContentBlock::ToolResult(result) => {
                    result.wire.custom
                        || result.wire.name.is_some()
                        || result.wire.id_synthetic
                        || result.wire.response_json
                        || result.wire.snake_case
                        || !result.wire.function_extra.is_empty()
                }
                _ => false,
            })
    }

    /// Whether the message uses anything schema version 2 added: the role alias `model`
    /// or a custom tool call.
    pub(crate) fn uses_schema_2(&self) -> bool {
        self.wire.role == Some(RoleAlias::Model)
            || self
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolCall(call) if call.wire.custom))
    }
}

impl RareWire {
    fn boxed(raw: Option<exact::Raw>, items: Option<Vec<ItemShape>>) -> Option<Box<RareWire>> {
        (raw.is_some() || items.is_some()).then(|| Box::new(RareWire { raw, items }))
    }
}

/// Shape hints for [`ToolCall`].
// Independent flags, each written as a JSON boolean; an enum would not say more.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolCallWire {
    /// OpenAI: the call had no `"type": "function"`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) type_absent: bool,
    /// OpenAI: a custom tool's call (`"type": "custom"`, `{"custom": {"name", "input"}}`),
    /// whose free-form `input` is the call's text arguments.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) custom: bool,
    /// OpenAI Chat: a legacy `function_call` of an assistant message (one per message,
    /// no id of its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) legacy_function: bool,
    /// The provider gave the call no id (OpenAI's legacy `function_call`, Gemini's
    /// `functionCall` without `id`): `id` was made from the tool's name and the call's rank
    /// among the message's calls of that name (`get_weather-0`), and is not given back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) id_synthetic: bool,
    /// Gemini: the part spelled its key in snake case (`function_call`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) snake_case: bool,
    /// Gemini: the call had no `args` (the arguments are then `{}`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) arguments_absent: bool,
    /// OpenAI: fields inside `function` (or `custom`) other than `name` and `arguments`
    /// (or `input`); Gemini: fields of `functionCall` other than `id`, `name` and `args`.
    #[serde(
        default,
        skip_serializing_if = "Map::is_empty",
        deserialize_with = "strict::map"
    )]
    pub(crate) function_extra: Map<String, Value>,
}

impl ToolCallWire {
    fn is_default(&self) -> bool {
        *self == ToolCallWire::default()
    }
}

/// Shape hints for [`ToolResult`].
// Independent flags, each written as a JSON boolean; an enum would not say more.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolResultWire {
    /// The output field was `null` or absent (the neutral output is then empty text).
    #[serde(default, skip_serializing_if = "ContentShape::is_blocks")]
    pub(crate) output: ContentShape,
    /// Anthropic: `is_error` was present (as `false` or `true`) rather than absent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) is_error_present: bool,
    /// OpenAI Responses: the output of a custom tool's call (`custom_tool_call_output`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) custom: bool,
    /// The tool's name, for the providers whose results carry it (OpenAI's legacy
    /// `function` messages, Gemini's `functionResponse`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// The provider gave the result no call id; `call_id` was made as for its call (see
    /// the tool call's `id_synthetic`), and is not given back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) id_synthetic: bool,
    /// Gemini: `output` is the JSON text of the `response` object.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) response_json: bool,
    /// Gemini: the part spelled its key in snake case (`function_response`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) snake_case: bool,
    /// Gemini: fields of `functionResponse` other than `id`, `name` and `response`.
    #[serde(
        default,
        skip_serializing_if = "Map::is_empty",
        deserialize_with = "strict::map"
    )]
    pub(crate) function_extra: Map<String, Value>,
}

impl ToolResultWire {
    fn is_default(&self) -> bool {
        *self == ToolResultWire::default()
    }
}

/// How much deeper than the message it becomes a provider's message may nest: provider
/// shapes wrap blocks a level or two differently. A value deeper than this could not be
/// stored anyway, and converting it (which copies it recursively) could overflow the stack.
const WIRE_DEPTH_SLACK: usize = 8;

/// Refuses a provider message nested far beyond what a stored session can hold, before
/// anything copies it.
fn check_wire_depth(provider: &'static str, message: &Value) -> Result<()> {
    let depth = json::value_depth(message);
    if depth > json::MAX_MESSAGE_DEPTH + WIRE_DEPTH_SLACK {
        return Err(conversion(
            provider,
            format!(
                "the message nests JSON {depth} levels deep, more than a stored session can read back ({} levels for a message)",
                json::MAX_MESSAGE_DEPTH
            ),
        ));
    }
    Ok(())
}

/// `message` if it nests no deeper than a stored session can hold.
fn checked_depth<M: std::borrow::Borrow<Message>>(provider: &'static str, message: M) -> Result<M> {
    let depth = message_depth(message.borrow());
    if depth > json::MAX_MESSAGE_DEPTH {
        return Err(conversion(
            provider,
            format!(
                "the message nests JSON {depth} levels deep as stored, more than the {} a stored session can read back",
                json::MAX_MESSAGE_DEPTH
            ),
        ));
    }
    Ok(message)
}

/// Takes a required string field out of a provider object.
fn take_string(
    object: &mut Map<String, Value>,
    key: &str,
    provider: &'static str,
) -> Result<String> {
    match object.remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(conversion(
            provider,
            format!("`{key}` must be a string, found {}", json_kind(&other)),
        )),
        None => Err(conversion(provider, format!("`{key}` is missing"))),
    }
}

/// A conversion error about one block: `at` names it (its index in the message's content
/// and its type), `why` says what is wrong.
fn block_error(provider: &'static str, at: &str, why: impl std::fmt::Display) -> Error {
    conversion(provider, format!("{at}: {why}"))
}

fn conversion(provider: &'static str, problem: impl Into<String>) -> Error {
    Error::Conversion {
        provider,
        problem: problem.into(),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `value`'s object, moved out (the decoders own what they decode: copying each level as
/// they went down made decoding a nested message quadratic in its depth).
fn into_object(value: Value, provider: &'static str, what: &str) -> Result<Map<String, Value>> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(conversion(
            provider,
            format!("{what} must be a JSON object, found {}", json_kind(&other)),
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// Checks that `decode` then `encode` gives `wire` back, directly and after a trip
    /// through the native (stored) form; returns the decoded message.
    pub(crate) fn assert_round_trip(
        decode: fn(&Value) -> Result<Message>,
        encode: fn(&Message) -> Result<Value>,
        wire: &Value,
    ) -> Message {
        let message = decode(wire).unwrap();
        assert_eq!(&encode(&message).unwrap(), wire, "direct");
        let stored: Message =
            serde_json::from_str(&serde_json::to_string(&message).unwrap()).unwrap();
        assert_eq!(&encode(&stored).unwrap(), wire, "through the native form");
        message
    }

    #[test]
    fn native_form_round_trips() {
        let message = Message::assistant(vec![
            ContentBlock::text("a"),
            ContentBlock::tool_call(ToolCall::new("c1", "t", json!({"x": 1.5}))),
            ContentBlock::tool_call(ToolCall::with_raw_arguments("c2", "t", "{\"y\":  2}")),
            ContentBlock::Other {
                value: json!({"type": "thinking", "signature": "abc"}),
            },
        ]);
        let text = serde_json::to_string(&message).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        assert_eq!(back, message);
        let result = Message::tool_result(ToolResult::error("c1", "boom"));
        let back: Message = serde_json::from_str(&serde_json::to_string(&result).unwrap()).unwrap();
        assert_eq!(back, result);
    }

    #[test]
    fn native_form_is_strict() {
        let unknown = r#"{"role":"user","content":[],"colour":"red"}"#;
        assert!(serde_json::from_str::<Message>(unknown).is_err());
        let unknown_block = r#"{"role":"user","content":[{"type":"text","text":"a","x":1}]}"#;
        assert!(serde_json::from_str::<Message>(unknown_block).is_err());
        let both = r#"{"role":"assistant","content":[{"type":"tool_call","id":"a","name":"n","input":{},"arguments":"{}"}]}"#;
        assert!(serde_json::from_str::<Message>(both).is_err());
        let neither =
            r#"{"role":"assistant","content":[{"type":"tool_call","id":"a","name":"n"}]}"#;
        assert!(serde_json::from_str::<Message>(neither).is_err());
        let dup = r#"{"role":"user","content":[],"extra":{"a":1,"a":2}}"#;
        assert!(serde_json::from_str::<Message>(dup).is_err());
    }

    #[test]
    fn null_input_is_kept_apart_from_absent() {
        let call = ToolCall::new("c", "t", Value::Null);
        let text = serde_json::to_string(&ContentBlock::tool_call(call.clone())).unwrap();
        assert!(text.contains("\"input\":null"), "{text}");
        let back: ContentBlock = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ContentBlock::tool_call(call));
    }
}
