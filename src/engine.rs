//! The model client (`Engine`) and the tool executor (`ToolExecutor`), both supplied by
//! the user.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::error::BoxError;
use crate::id::SessionId;
use crate::transcript::{Message, ToolCall, ToolOutput};
use crate::usage::Usage;

/// A boxed, `Send` future, as returned by [`ToolExecutor::execute`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the session asks the engine for: the next assistant message given the whole
/// conversation so far.
///
/// # Examples
///
/// ```
/// use agent_session::{CompletionRequest, Message};
///
/// fn last_user_text(request: &CompletionRequest<'_>) -> String {
///     request.transcript.iter().rev()
///         .find(|m| m.role == agent_session::Role::User)
///         .map(Message::text)
///         .unwrap_or_default()
/// }
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CompletionRequest<'a> {
    /// The session being served.
    pub session_id: &'a SessionId,
    /// The model to use.
    pub model: &'a str,
    /// The system prompt, if any. It is not part of the transcript.
    pub system_prompt: Option<&'a str>,
    /// The conversation so far, oldest first.
    pub transcript: &'a [Message],
    /// The tools the model may call.
    pub tools: &'a [ToolDefinition],
}

impl<'a> CompletionRequest<'a> {
    /// A request for `model` to continue `transcript`, with no system prompt and no
    /// tools: what an engine's own tests, or a harness calling an engine outside a
    /// [`Session`](crate::Session), build (the session builds its requests itself).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{CompletionRequest, Message, SessionId};
    ///
    /// let id = SessionId::parse("s-1").unwrap();
    /// let transcript = [Message::user("hello")];
    /// let request = CompletionRequest::new(&id, "claude-sonnet-4", &transcript)
    ///     .with_system_prompt("Be brief.");
    /// assert_eq!(request.system_prompt, Some("Be brief."));
    /// assert!(request.tools.is_empty());
    /// ```
    #[must_use]
    pub fn new(session_id: &'a SessionId, model: &'a str, transcript: &'a [Message]) -> Self {
        CompletionRequest {
            session_id,
            model,
            system_prompt: None,
            transcript,
            tools: &[],
        }
    }

    /// The same request with `system_prompt`.
    #[must_use]
    pub fn with_system_prompt(self, system_prompt: &'a str) -> Self {
        CompletionRequest {
            system_prompt: Some(system_prompt),
            ..self
        }
    }

    /// The same request offering `tools`.
    #[must_use]
    pub fn with_tools(self, tools: &'a [ToolDefinition]) -> Self {
        CompletionRequest { tools, ..self }
    }
}

/// The engine's answer: one assistant message and what it cost.
///
/// # Examples
///
/// ```
/// use agent_session::{Completion, Message, Usage};
///
/// let done = Completion::new(Message::assistant(vec![]), Usage::new("m"));
/// assert!(done.message.tool_calls().next().is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Completion {
    /// The assistant message. If it contains tool calls, the session runs them and asks
    /// again; otherwise the turn ends.
    pub message: Message,
    /// Tokens and cost of this completion.
    pub usage: Usage,
}

impl Completion {
    /// A completion.
    #[must_use]
    pub fn new(message: Message, usage: Usage) -> Self {
        Completion { message, usage }
    }
}

/// A model client: turns a conversation into the next assistant message.
///
/// Engines are async because model clients are HTTP clients; the crate does not require a
/// particular runtime. A [`Harness`](crate::Harness) builds a fresh engine for every new or
/// resumed session from its factory, so an engine needs no persistent state of its own:
/// everything the model should see is in the request.
///
/// # Examples
///
/// ```
/// use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine, Message, Usage};
///
/// /// Repeats the last user message.
/// struct Echo;
///
/// impl Engine for Echo {
///     async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
///         let last = request.transcript.last().map(Message::text).unwrap_or_default();
///         Ok(Completion::new(
///             Message::assistant(vec![ContentBlock::text(format!("you said: {last}"))]),
///             Usage::new(request.model).with_tokens(1, 1),
///         ))
///     }
/// }
/// ```
pub trait Engine: Send {
    /// Produces the next assistant message for `request`.
    ///
    /// # Errors
    ///
    /// Any error of the client; the session reports it as
    /// [`Error::Engine`](crate::Error::Engine) and stays consistent.
    fn complete(
        &mut self,
        request: CompletionRequest<'_>,
    ) -> impl Future<Output = Result<Completion, BoxError>> + Send;
}

/// A tool the model may call, as advertised to it.
///
/// # Examples
///
/// ```
/// use agent_session::ToolDefinition;
/// use serde_json::json;
///
/// let calc = ToolDefinition::new(
///     "calculator",
///     "Evaluates an arithmetic expression",
///     json!({"type": "object", "properties": {"expression": {"type": "string"}}}),
/// );
/// assert_eq!(calc.name, "calculator");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// The name the model uses to call it.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

impl ToolDefinition {
    /// A tool definition.
    #[must_use]
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// Runs the tools a model asks for.
///
/// The executor is not saved with a session (code cannot be serialized): pass it in
/// [`SessionOptions::tools`](crate::SessionOptions) or set it once on the
/// [`Harness`](crate::Harness). It is shared (`Arc<dyn ToolExecutor>`), so it takes
/// `&self`.
///
/// # Examples
///
/// ```
/// use agent_session::{BoxError, BoxFuture, ToolCall, ToolDefinition, ToolExecutor, ToolOutput};
/// use serde_json::json;
///
/// struct Clock;
///
/// impl ToolExecutor for Clock {
///     fn definitions(&self) -> Vec<ToolDefinition> {
///         vec![ToolDefinition::new("now", "The current UTC time", json!({"type": "object"}))]
///     }
///
///     fn execute<'a>(&'a self, call: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
///         Box::pin(async move {
///             match call.name.as_str() {
///                 "now" => Ok(ToolOutput::from("2026-01-01T00:00:00Z")),
///                 other => Err(format!("unknown tool {other}").into()),
///             }
///         })
///     }
/// }
/// ```
pub trait ToolExecutor: Send + Sync {
    /// The tools offered to the model (default: none).
    fn definitions(&self) -> Vec<ToolDefinition> {
        Vec::new()
    }

    /// Runs one call. An `Err` becomes an error result the model sees (its `Display` text
    /// is the output); it does not end the turn.
    fn execute<'a>(&'a self, call: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>>;
}
