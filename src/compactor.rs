//! Compaction: the application's [`Compactor`] writes a summary of a long conversation's
//! beginning ([`Compaction`]), and the crate puts it in place of what it summarises,
//! keeping everything it replaced in the session's history.

use std::fmt;

use crate::engine::BoxFuture;
use crate::error::BoxError;
use crate::id::SessionId;
use crate::transcript::Message;
use crate::usage::Usage;

/// What a [`Compactor`] is asked to summarise.
///
/// # Examples
///
/// ```
/// use agent_session::{CompactionRequest, Message, SessionId};
///
/// let id = SessionId::parse("s")?;
/// let transcript = [Message::user("a"), Message::user("b")];
/// let request = CompactionRequest::new(&id, "model", &transcript, 1);
/// assert_eq!(request.replace, 1);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CompactionRequest<'a> {
    /// The session being compacted.
    pub session_id: &'a SessionId,
    /// The model the session talks to.
    pub model: &'a str,
    /// The session's system prompt, if any.
    pub system_prompt: Option<&'a str>,
    /// The view: what the model is sent now.
    pub transcript: &'a [Message],
    /// How many leading messages the harness suggests replacing: everything before the
    /// turns its policy keeps verbatim, at a point that splits no tool call from its
    /// result. A compactor may replace fewer (or more, at such a point).
    pub replace: usize,
}

impl<'a> CompactionRequest<'a> {
    /// A request to summarise the first `replace` messages of `transcript`, with no
    /// system prompt.
    #[must_use]
    pub fn new(
        session_id: &'a SessionId,
        model: &'a str,
        transcript: &'a [Message],
        replace: usize,
    ) -> Self {
        CompactionRequest {
            session_id,
            model,
            system_prompt: None,
            transcript,
            replace,
        }
    }
}

/// A compaction: summary messages that take the place of the first `replaced` messages
/// of a session's view. What they replace stays in the session's history
/// ([`SessionStore::history`](crate::SessionStore::history)); the model sees the summary.
///
/// The summary is any messages the next model call should start from: a user message
/// with a written summary, or a provider's own compaction item kept verbatim (OpenAI's
/// `compaction` item, Anthropic's `compaction` block, as [`ContentBlock::Other`](crate::ContentBlock::Other)
/// blocks, converted with the provider codecs). It may not hold a tool call without its
/// result.
///
/// # Examples
///
/// ```
/// use agent_session::{Compaction, Message, Usage};
///
/// let compaction = Compaction::new(8, vec![Message::user("Summary: we fixed the parser.")])
///     .with_usage(Usage::new("summariser").with_tokens(900, 40));
/// assert_eq!(compaction.replaced, 8);
/// assert_eq!(compaction.usage.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Compaction {
    /// How many leading messages of the view the summary replaces.
    pub replaced: usize,
    /// The messages that take their place.
    pub summary: Vec<Message>,
    /// The usage of the model calls that wrote the summary (counted like any
    /// completion's).
    pub usage: Vec<Usage>,
}

impl Compaction {
    /// Replaces the first `replaced` messages with `summary`.
    #[must_use]
    pub fn new(replaced: usize, summary: Vec<Message>) -> Self {
        Compaction {
            replaced,
            summary,
            usage: Vec::new(),
        }
    }

    /// Adds the usage of a model call that wrote the summary.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage.push(usage);
        self
    }
}

/// Writes compactions: supplied by the application, like [`Engine`](crate::Engine) (the
/// crate calls no model itself). A [`Harness`](crate::Harness) with a compactor and a
/// [`CompactionPolicy`] runs it between turns; [`Session::compact`](crate::Session::compact)
/// applies one by hand.
///
/// # Examples
///
/// ```
/// use agent_session::{BoxError, BoxFuture, Compaction, CompactionRequest, Compactor, Message};
///
/// /// Keeps only a note of how much was dropped (a real one asks a model).
/// struct Note;
/// impl Compactor for Note {
///     fn compact<'a>(&'a self, r: CompactionRequest<'a>) -> BoxFuture<'a, Result<Compaction, BoxError>> {
///         Box::pin(async move {
///             let note = format!("({} earlier messages summarised)", r.replace);
///             Ok(Compaction::new(r.replace, vec![Message::user(note)]))
///         })
///     }
/// }
/// ```
pub trait Compactor: Send + Sync {
    /// Summarises the beginning of `request.transcript`.
    ///
    /// # Errors
    ///
    /// Whatever stops the summary (a failed model call): the session is left as it was.
    fn compact<'a>(
        &'a self,
        request: CompactionRequest<'a>,
    ) -> BoxFuture<'a, Result<Compaction, BoxError>>;
}

/// When a [`Harness`](crate::Harness) compacts a session between turns: once its view
/// passes any limit set, the compactor is asked to replace everything but the last
/// `keep_last_turns` turns. No limit is set by default (never compact).
///
/// # Examples
///
/// ```
/// use agent_session::CompactionPolicy;
///
/// let policy = CompactionPolicy::default().max_messages(200).keep_last_turns(3);
/// assert_eq!(policy.max_messages, Some(200));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionPolicy {
    /// Compact once the view holds more than this many messages.
    pub max_messages: Option<usize>,
    /// Compact once the view's messages take more than this many bytes as JSON.
    pub max_bytes: Option<u64>,
    /// Compact once the last completion's prompt took more than this many input tokens
    /// (normal, cache-read and cache-write tokens together).
    pub max_input_tokens: Option<u64>,
    /// How many of the last turns stay verbatim after the summary (default 2).
    pub keep_last_turns: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            max_messages: None,
            max_bytes: None,
            max_input_tokens: None,
            keep_last_turns: 2,
        }
    }
}

impl CompactionPolicy {
    /// Sets [`max_messages`](Self::max_messages).
    #[must_use]
    pub fn max_messages(mut self, limit: usize) -> Self {
        self.max_messages = Some(limit);
        self
    }

    /// Sets [`max_bytes`](Self::max_bytes).
    #[must_use]
    pub fn max_bytes(mut self, limit: u64) -> Self {
        self.max_bytes = Some(limit);
        self
    }

    /// Sets [`max_input_tokens`](Self::max_input_tokens).
    #[must_use]
    pub fn max_input_tokens(mut self, limit: u64) -> Self {
        self.max_input_tokens = Some(limit);
        self
    }

    /// Sets [`keep_last_turns`](Self::keep_last_turns).
    #[must_use]
    pub fn keep_last_turns(mut self, turns: usize) -> Self {
        self.keep_last_turns = turns;
        self
    }

    /// Whether a view of `transcript`, whose last completion used `last` usage, passes a
    /// limit. The byte count is measured only when the other limits did not decide.
    pub(crate) fn is_due(&self, transcript: &[Message], last: Option<&Usage>) -> bool {
        if self
            .max_messages
            .is_some_and(|limit| transcript.len() > limit)
        {
            return true;
        }
        if let (Some(limit), Some(last)) = (self.max_input_tokens, last) {
            let input = last
                .input_tokens
                .saturating_add(last.cache_read_tokens)
                .saturating_add(last.cache_write_tokens);
            if input > limit {
                return true;
            }
        }
        self.max_bytes.is_some_and(|limit| {
            let mut counter = ByteCounter(0);
            serde_json::to_writer(&mut counter, transcript).is_ok() && counter.0 > limit
        })
    }
}

/// Counts the bytes written to it.
struct ByteCounter(u64);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl fmt::Debug for dyn Compactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<compactor>")
    }
}
