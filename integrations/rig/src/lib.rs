//! Durable conversation memory for [rig](https://docs.rs/rig-core/0.44) 0.44 agents, on
//! [`agent_session`]'s stores, and conversions between rig's messages and [`Message`].
//!
//! rig-core 0.44 has a storage trait for chat history,
//! [`ConversationMemory`](rig_core::memory::ConversationMemory): rig's agent runtime
//! (the `rig-agent` crate) calls its `load` before sending a prompt and its `append` after
//! a successful turn, with the prompt, the reply and the tool calls and results in between.
//! rig ships an in-process implementation, `InMemoryConversationMemory`, which forgets
//! everything when the process ends. [`SessionMemory`] implements the trait over any
//! [`AsyncSessionStore`], one stored session per rig conversation id, so replacing
//! `InMemoryConversationMemory::new()` with `SessionMemory::new(store, model)` makes an
//! agent's history durable: each `append` is a compare-and-swap save, which with
//! [`FileSessionStore`](agent_session::FileSessionStore) is on disk (fsynced) when it returns.
//!
//! # How a rig message is stored
//!
//! [`from_rig`] makes each rig message a [`Message`] whose blocks say what the crate
//! understands (text, tool calls, tool results, so the session's tool-call records, title
//! and provider exports work), with rig's own content (reasoning, images, provider items)
//! as [`ContentBlock::Other`] blocks `{"type": "rig", "item": …}`. The whole rig message,
//! as rig serializes it, is also kept in the message's `extra` under `"rig"`, and
//! [`to_rig`] gives it back as it was while the blocks still say the same; a message that
//! was edited since, or that never came from rig, is converted from its blocks instead.
//! A tool call whose result is not among the messages converted with it (rig keeps the
//! calls of a failed turn, which never ran) is kept as rig content, not as a
//! [`ToolCall`](agent_session::ToolCall), since a stored session pairs every call with a result.
//!
//! The `"rig"` field is a provider field like any other: exporting such a message with a
//! [`Codec`](agent_session::Codec) writes it out. Export a rig conversation through rig.
//!
//! # Build notes
//!
//! rig-core 0.44 needs Rust 1.95 (newer releases need 1.97), and it turns on `serde_json`'s
//! `preserve_order` feature, which applies to the whole build of whatever depends on it:
//! [`serde_json::Value`] objects then keep their keys in insertion order rather than
//! sorted, so a message imported from a `Value` gives back its keys in the `Value`'s order
//! (messages imported from JSON text are unaffected: they keep the text). That is why this
//! adapter is a crate of its own, outside `agent-session`'s workspace: `agent-session`
//! itself, and every build that does not use rig, keeps `serde_json` as it is.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use agent_session_rig::SessionMemory;
//! use agent_session::{FileSessionStore, SessionStore};
//! use rig_core::completion::Message;
//! use rig_core::memory::ConversationMemory;
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! # let dir = tempfile::tempdir()?;
//! // For a rig-agent agent, the one line is `.memory(SessionMemory::new(store, "gpt-4.1"))`
//! // (in place of `.memory(InMemoryConversationMemory::new())`) on its `AgentBuilder`,
//! // beside `.conversation("thread-1")`. Here the trait is called as the agent calls it.
//! let store = Arc::new(FileSessionStore::open(dir.path())?).into_async();
//! let memory = SessionMemory::new(store, "gpt-4.1");
//! let thread = "thread-1".into();
//! memory
//!     .append(&thread, vec![Message::user("My name is Alice."), Message::assistant("Hello, Alice!")])
//!     .await?;
//!
//! // A new process: a new store over the same directory has the same history.
//! let store = Arc::new(FileSessionStore::open(dir.path())?).into_async();
//! let history = SessionMemory::new(store, "gpt-4.1").load(&thread).await?;
//! assert_eq!(history, vec![Message::user("My name is Alice."), Message::assistant("Hello, Alice!")]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rig_core::completion::message::{
    AssistantContent, AssistantMessage, CallId, Text, ToolCall as RigToolCall, ToolFunction,
    ToolName, ToolResult as RigToolResult, ToolResultContent, UserContent,
};
use rig_core::completion::Message as RigMessage;
use rig_core::id::ConversationId;
use rig_core::memory::{ConversationMemory, MemoryError};
use rig_core::wasm_compat::WasmBoxedFuture;
use serde_json::{json, Value};

use agent_session::{
    AsyncSessionStore, ContentBlock, Error, Message, Result, Role, SessionId, SessionSnapshot,
    ToolCall, ToolOutput, ToolResult,
};

/// The `provider` of this module's [`Error::Conversion`]s.
const PROVIDER: &str = "rig";
/// The key of `Message::extra` that holds the rig message, and the `type` of rig content
/// kept as a [`ContentBlock::Other`].
const RIG: &str = "rig";
/// How many times [`SessionMemory`]'s `append` reloads and retries a save that lost a
/// compare-and-swap race, before it reports the conflict.
const APPEND_ATTEMPTS: usize = 8;

/// rig's [`ConversationMemory`] over an [`AsyncSessionStore`]: each rig conversation is a
/// stored session whose id is the conversation id.
///
/// * `load` returns the session's transcript as rig messages ([`to_rig`]), or nothing if
///   the session does not exist.
/// * `append` adds the messages to the session ([`from_rig`],
///   [`SessionSnapshot::with_appended`]) and saves it with a compare-and-swap, creating
///   the session (with the model given to [`SessionMemory::new`]) on its first append. If
///   another writer saved in between, it reloads and appends again, so concurrent appends
///   to one conversation are all kept.
/// * `clear` deletes the session.
///
/// A conversation id must be a valid [`SessionId`] (letters, digits, `-`, `_`, `.`, at
/// most [`MAX_ID_LEN`](agent_session::MAX_ID_LEN) bytes); any other is refused with
/// [`MemoryError::Backend`] holding [`Error::InvalidId`]. Errors from the store come back
/// as [`MemoryError::Backend`] holding the [`Error`], so
/// `err.source().and_then(|e| e.downcast_ref::<agent_session::Error>())` finds it.
///
/// Sessions written this way are ordinary sessions: list, fork, export, prune or resume
/// them with the rest of the crate.
#[derive(Clone)]
pub struct SessionMemory {
    store: Arc<dyn AsyncSessionStore>,
    model: String,
}

impl std::fmt::Debug for SessionMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionMemory")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl SessionMemory {
    /// Memory kept in `store` (any store's [`SessionStore::into_async`](agent_session::SessionStore::into_async)),
    /// whose new sessions record `model` as the model they talk to.
    #[must_use]
    pub fn new(store: Arc<dyn AsyncSessionStore>, model: impl Into<String>) -> Self {
        SessionMemory {
            store,
            model: model.into(),
        }
    }

    /// The store the history is kept in.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn AsyncSessionStore> {
        &self.store
    }

    /// The conversation's history, as [`ConversationMemory::load`] returns it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a conversation id that is not a session id; the store's
    /// errors (other than [`Error::NotFound`], which is an empty history); and
    /// [`Error::Conversion`] if a stored message cannot be given to rig ([`to_rig`]).
    pub async fn history(&self, conversation: &ConversationId) -> Result<Vec<RigMessage>> {
        let id = SessionId::parse(conversation.as_str())?;
        match self.store.load(&id).await {
            Ok(snapshot) => to_rig(snapshot.transcript()),
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Appends `messages` to the conversation and saves it, as
    /// [`ConversationMemory::append`] does; returns the saved snapshot.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a conversation id that is not a session id;
    /// [`Error::Conversion`] as [`from_rig`]; [`Error::Inconsistent`] if a tool result
    /// answers no call among `messages`; [`Error::Conflict`] if other writers kept winning
    /// the race for this session; and the store's errors.
    pub async fn append_messages(
        &self,
        conversation: &ConversationId,
        messages: &[RigMessage],
    ) -> Result<SessionSnapshot> {
        let id = SessionId::parse(conversation.as_str())?;
        let messages = from_rig(messages)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let next = match self.store.load(&id).await {
                Ok(current) => current.with_appended(messages.clone(), Vec::new(), now())?,
                Err(e) if e.is_not_found() => SessionSnapshot::builder(id.clone(), &self.model)
                    .transcript(messages.clone())
                    .build()?,
                Err(e) => return Err(e),
            };
            match self.store.save(&next).await {
                Ok(revision) => return Ok(next.with_revision(revision)),
                Err(e) if e.is_conflict() && attempt < APPEND_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes the conversation's session, as [`ConversationMemory::clear`] does. Clearing
    /// a conversation that has none is not an error.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for a conversation id that is not a session id, and the
    /// store's errors.
    pub async fn clear_conversation(&self, conversation: &ConversationId) -> Result<()> {
        let id = SessionId::parse(conversation.as_str())?;
        match self.store.delete(&id).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }
}

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

impl ConversationMemory for SessionMemory {
    fn load<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> WasmBoxedFuture<'a, std::result::Result<Vec<RigMessage>, MemoryError>> {
        Box::pin(async move {
            self.history(conversation_id)
                .await
                .map_err(MemoryError::backend)
        })
    }

    fn append<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
        messages: Vec<RigMessage>,
    ) -> WasmBoxedFuture<'a, std::result::Result<(), MemoryError>> {
        Box::pin(async move {
            self.append_messages(conversation_id, &messages)
                .await
                .map(drop)
                .map_err(MemoryError::backend)
        })
    }

    fn clear<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> WasmBoxedFuture<'a, std::result::Result<(), MemoryError>> {
        Box::pin(async move {
            self.clear_conversation(conversation_id)
                .await
                .map_err(MemoryError::backend)
        })
    }
}

/// rig messages as [`Message`]s (see the [module docs](self) for the mapping). A tool
/// call is a [`ToolCall`] only if its result is among `messages`; one without is kept as
/// rig content.
///
/// # Errors
///
/// [`Error::Conversion`] if a rig message does not serialize to JSON (it always does with
/// rig's types as they are).
pub fn from_rig(messages: &[RigMessage]) -> Result<Vec<Message>> {
    let answered: HashSet<String> = messages
        .iter()
        .filter_map(|message| match message {
            RigMessage::User { content } => Some(content),
            _ => None,
        })
        .flatten()
        .filter_map(|content| match content {
            UserContent::ToolResult(result) => Some(result.call.wire().into_owned()),
            _ => None,
        })
        .collect();
    messages
        .iter()
        .map(|message| convert_from_rig(message, &answered))
        .collect()
}

/// One rig message as a [`Message`], every tool call of it a [`ToolCall`]. To store a
/// turn, use [`from_rig`], which keeps calls without a result as rig content.
///
/// # Errors
///
/// As [`from_rig`].
pub fn from_rig_message(message: &RigMessage) -> Result<Message> {
    let answered = match message {
        RigMessage::Assistant(turn) => turn
            .tool_calls()
            .map(|call| call.id.wire().into_owned())
            .collect(),
        _ => HashSet::new(),
    };
    convert_from_rig(message, &answered)
}

/// [`Message`]s as rig messages: each one made by [`from_rig`] and unchanged since is
/// given back exactly; any other is converted from its blocks (text, tool calls, tool
/// results, rig content). A tool result takes its tool's name from the call it answers,
/// which must be among `messages`.
///
/// # Errors
///
/// [`Error::Conversion`] naming the message if it holds what rig's messages have no place
/// for: a block of another provider (kept as [`ContentBlock::Other`]), a tool result
/// whose call is not among `messages` or whose output is not text, a tool call in a user
/// message, or a system message with anything but text.
pub fn to_rig(messages: &[Message]) -> Result<Vec<RigMessage>> {
    let mut names: HashMap<String, String> = HashMap::new();
    messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            for call in message.tool_calls() {
                names.insert(call.id.clone(), call.name.clone());
            }
            convert_to_rig(message, &names).map_err(|problem| Error::Conversion {
                provider: PROVIDER,
                problem: format!("message {index}: {problem}"),
            })
        })
        .collect()
}

fn conversion(problem: impl Into<String>) -> Error {
    Error::Conversion {
        provider: PROVIDER,
        problem: problem.into(),
    }
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value> {
    serde_json::to_value(value)
        .map_err(|e| conversion(format!("a rig message did not serialize: {e}")))
}

/// Rig content the neutral model has no block for.
fn rig_block<T: serde::Serialize>(item: &T) -> Result<ContentBlock> {
    Ok(ContentBlock::Other {
        value: json!({"type": RIG, "item": to_value(item)?}),
    })
}

/// The neutral form of `message`, without the copy of it in `extra`.
fn project(message: &RigMessage, answered: &HashSet<String>) -> Result<Message> {
    Ok(match message {
        RigMessage::System { content } => Message::system(content.clone()),
        RigMessage::User { content } => {
            let blocks = content
                .iter()
                .map(|part| match part {
                    UserContent::Text(text) if is_plain(text)? => {
                        Ok(ContentBlock::text(text.text.clone()))
                    }
                    UserContent::ToolResult(result) => project_result(result),
                    other => rig_block(other),
                })
                .collect::<Result<_>>()?;
            Message::new(Role::User, blocks)
        }
        RigMessage::Assistant(turn) => {
            let blocks = turn
                .content
                .iter()
                .map(|part| match part {
                    AssistantContent::Text(text) if is_plain(text)? => {
                        Ok(ContentBlock::text(text.text.clone()))
                    }
                    AssistantContent::ToolCall(call)
                        if call.native.is_none()
                            && call.function.invalid_arguments.is_none()
                            && answered.contains(call.id.wire().as_ref()) =>
                    {
                        Ok(ContentBlock::tool_call(ToolCall::new(
                            call.id.wire(),
                            call.function.name.as_str(),
                            call.function.arguments_value(),
                        )))
                    }
                    other => rig_block(other),
                })
                .collect::<Result<_>>()?;
            Message::assistant(blocks)
        }
    })
}

/// Whether rig's text is only its text (no citations or provider item), so a text block
/// says all of it.
fn is_plain(text: &Text) -> Result<bool> {
    Ok(to_value(text)?.as_object().is_some_and(|o| o.len() == 1))
}

fn project_result(result: &RigToolResult) -> Result<ContentBlock> {
    let output = match result.content.as_slice() {
        [ToolResultContent::Text(text)] if is_plain(text)? => ToolOutput::Text(text.text.clone()),
        parts => ToolOutput::Blocks(
            parts
                .iter()
                .map(|part| match part {
                    ToolResultContent::Text(text) if is_plain(text)? => {
                        Ok(ContentBlock::text(text.text.clone()))
                    }
                    other => rig_block(other),
                })
                .collect::<Result<_>>()?,
        ),
    };
    let mut converted = ToolResult::new(result.call.wire(), output);
    converted.is_error = result.is_error;
    Ok(ContentBlock::tool_result(converted))
}

fn convert_from_rig(message: &RigMessage, answered: &HashSet<String>) -> Result<Message> {
    let mut converted = project(message, answered)?;
    converted.extra.insert(RIG.to_owned(), to_value(message)?);
    Ok(converted)
}

fn convert_to_rig(
    message: &Message,
    names: &HashMap<String, String>,
) -> std::result::Result<RigMessage, String> {
    if let Some(kept) = message.extra.get(RIG) {
        if let Ok(original) = serde_json::from_value::<RigMessage>(kept.clone()) {
            let answered = message
                .tool_calls()
                .map(|call| call.id.clone())
                .collect::<HashSet<_>>();
            if let Ok(projected) = project(&original, &answered) {
                if projected.role == message.role && projected.content == message.content {
                    return Ok(original);
                }
            }
        }
    }
    match message.role {
        Role::System => {
            if message
                .content
                .iter()
                .all(|block| matches!(block, ContentBlock::Text(_)))
            {
                Ok(RigMessage::system(message.text()))
            } else {
                Err("a rig system message holds text only".to_owned())
            }
        }
        Role::User | Role::Tool => {
            let content = message
                .content
                .iter()
                .enumerate()
                .map(|(b, block)| user_content(block, names).map_err(|p| format!("block {b}: {p}")))
                .collect::<std::result::Result<_, _>>()?;
            Ok(RigMessage::User { content })
        }
        Role::Assistant => {
            let content = message
                .content
                .iter()
                .enumerate()
                .map(|(b, block)| assistant_content(block).map_err(|p| format!("block {b}: {p}")))
                .collect::<std::result::Result<_, _>>()?;
            Ok(RigMessage::Assistant(AssistantMessage::new(content)))
        }
    }
}

fn rig_item<T: serde::de::DeserializeOwned>(value: &Value) -> std::result::Result<T, String> {
    match value.get("type").and_then(Value::as_str) {
        Some(RIG) => {}
        Some(other) => return Err(format!("rig has no place for a {other:?} block")),
        None => return Err("rig has no place for a block without a type".to_owned()),
    }
    let item = value.get("item").cloned().unwrap_or(Value::Null);
    serde_json::from_value(item).map_err(|e| format!("not rig content of this role: {e}"))
}

fn user_content(
    block: &ContentBlock,
    names: &HashMap<String, String>,
) -> std::result::Result<UserContent, String> {
    match block {
        ContentBlock::Text(text) => Ok(UserContent::text(text.text.clone())),
        ContentBlock::ToolResult(result) => {
            let name = names.get(&result.call_id).ok_or_else(|| {
                format!("tool result {:?} answers no call before it", result.call_id)
            })?;
            let name = ToolName::new(name.clone()).map_err(|e| e.to_string())?;
            let content = match &result.output {
                ToolOutput::Text(text) => vec![ToolResultContent::text(text.clone())],
                ToolOutput::Blocks(blocks) => blocks
                    .iter()
                    .map(|block| match block {
                        ContentBlock::Text(text) => Ok(ToolResultContent::text(text.text.clone())),
                        ContentBlock::Other { value } => rig_item(value),
                        _ => Err("a tool result's output holds a tool call or result".to_owned()),
                    })
                    .collect::<std::result::Result<_, _>>()?,
            };
            Ok(UserContent::ToolResult(RigToolResult {
                call: CallId::from_wire(result.call_id.clone()),
                name,
                content,
                is_error: result.is_error,
            }))
        }
        ContentBlock::ToolCall(call) => Err(format!(
            "tool call {:?} is in a user message; rig has calls only in assistant messages",
            call.id
        )),
        ContentBlock::Other { value } => rig_item(value),
        // ContentBlock is non-exhaustive: a kind added later is not rig's.
        _ => Err("a content block rig has no place for".to_owned()),
    }
}

fn assistant_content(block: &ContentBlock) -> std::result::Result<AssistantContent, String> {
    match block {
        ContentBlock::Text(text) => Ok(AssistantContent::text(text.text.clone())),
        ContentBlock::ToolCall(call) => {
            let arguments = call.arguments.to_value().map_err(|e| {
                format!(
                    "tool call {:?} has arguments that are not JSON: {e}",
                    call.id
                )
            })?;
            let name = ToolName::new(call.name.clone()).map_err(|e| e.to_string())?;
            Ok(AssistantContent::ToolCall(RigToolCall::from_wire(
                call.id.clone(),
                ToolFunction::new(name, arguments),
            )))
        }
        ContentBlock::ToolResult(result) => Err(format!(
            "tool result {:?} is in an assistant message",
            result.call_id
        )),
        ContentBlock::Other { value } => rig_item(value),
        // ContentBlock is non-exhaustive: a kind added later is not rig's.
        _ => Err("a content block rig has no place for".to_owned()),
    }
}
