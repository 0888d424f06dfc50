//! Rewinding: taking a session back to an earlier point of its transcript ([`RewindTo`]),
//! the `/undo` of an agent. The messages after the point leave the transcript the model is
//! sent; the usage they cost stays counted.
//!
//! A rewind keeps a prefix of the transcript, so a store that appends (the file store's
//! journal) saves it as one small record, whatever the session's length.

use std::sync::Arc;

use super::fork::check_cut;
use super::{Provenance, SessionSnapshot, ToolCallRecord};
use crate::clock;
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::transcript::{dismantle_message, Message};

/// Where to take a session back to: the transcript keeps the messages before that point.
///
/// A point must not separate a tool call from its result (the model would see a call
/// without its answer); such a point is refused, naming the nearest valid ones. Tool calls
/// rewound away are never run again: they are no longer in the transcript.
///
/// # Examples
///
/// ```
/// use agent_session::RewindTo;
///
/// assert_eq!("turns:1".parse::<RewindTo>()?, RewindTo::LastTurns(1));
/// assert_eq!("message:4".parse::<RewindTo>()?, RewindTo::Message(4));
/// assert_eq!(RewindTo::LastTurns(2).to_string(), "turns:2");
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RewindTo {
    /// Drop the last `n` turns: everything from the `n`-th last user prompt on (a user
    /// message that is not only tool results). `LastTurns(0)` changes nothing.
    LastTurns(usize),
    /// Keep the first `n` messages.
    Message(usize),
}

impl std::fmt::Display for RewindTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RewindTo::LastTurns(n) => write!(f, "turns:{n}"),
            RewindTo::Message(n) => write!(f, "message:{n}"),
        }
    }
}

impl std::str::FromStr for RewindTo {
    type Err = Error;

    /// Parses `turns:N` (drop the last N turns) or `message:N` (keep the first N
    /// messages).
    fn from_str(text: &str) -> Result<Self> {
        let invalid = || {
            Error::InvalidArgument {
            reason: format!(
                "{text:?} is not a rewind point: use turns:N (drop the last N turns) or message:N (keep the first N messages)"
            ),
        }
        };
        let (kind, n) = text.split_once(':').ok_or_else(invalid)?;
        let n: usize = n.parse().map_err(|_| invalid())?;
        match kind {
            "turn" | "turns" => Ok(RewindTo::LastTurns(n)),
            "message" | "messages" => Ok(RewindTo::Message(n)),
            _ => Err(invalid()),
        }
    }
}

/// What a rewind keeps: the number of leading messages, checked to split no tool call
/// from its result.
fn rewind_cut(
    id: &SessionId,
    transcript: &[Message],
    records: &[ToolCallRecord],
    to: RewindTo,
) -> Result<usize> {
    let cut = match to {
        RewindTo::Message(n) if n <= transcript.len() => n,
        RewindTo::Message(n) => {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "cannot rewind session {id} to message {n}: it has only {} messages",
                    transcript.len()
                ),
            })
        }
        RewindTo::LastTurns(0) => transcript.len(),
        // From the end: the cost is that of the turns dropped, not of the session (the
        // whole transcript is read only to count its turns for the error).
        RewindTo::LastTurns(n) => match transcript
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, m)| m.is_prompt())
            .nth(n - 1)
        {
            Some((at, _)) => at,
            None => {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "cannot rewind session {id} by {n} turns: it has only {} turns",
                        transcript.iter().filter(|m| m.is_prompt()).count()
                    ),
                })
            }
        },
    };
    check_cut(records, cut, |call, call_at, result_at, before, after| {
        format!(
            "cannot rewind session {id} to message {cut}: tool call {call:?} is made in message {call_at} and answered in message {result_at}; rewind to message {before} or {after} instead"
        )
    })?;
    Ok(cut)
}

/// Rewinds a session's or a snapshot's parts to `to` and returns how many messages it
/// dropped (the caller stamps the change when there are any): the transcript and records
/// keep what lies before the cut, and what is known to be stored narrows to the kept
/// prefix, so the next save appends. Nothing changes on error.
pub(crate) fn rewind_parts(
    id: &SessionId,
    transcript: &mut Arc<Vec<Message>>,
    records: &mut Arc<Vec<ToolCallRecord>>,
    provenance: &mut Option<Provenance>,
    to: RewindTo,
) -> Result<usize> {
    let cut = rewind_cut(id, transcript, records, to)?;
    let dropped = transcript.len() - cut;
    if dropped == 0 {
        return Ok(0);
    }
    Arc::make_mut(transcript)
        .drain(cut..)
        .for_each(dismantle_message);
    keep_records_before(Arc::make_mut(records), cut);
    if let Some(provenance) = provenance {
        provenance.pending.rewound_to(cut);
    }
    Ok(dropped)
}

/// Keeps the records of calls before message `cut` (with `cut` checked by
/// [`rewind_cut`], their results are before it too), and returns how many leading records
/// are unchanged.
fn keep_records_before(records: &mut Vec<ToolCallRecord>, cut: usize) -> usize {
    // Records are in call order (`SessionSnapshot::tool_calls`): those before the cut are
    // a prefix, found by bisection.
    let kept = records.partition_point(|r| r.call_at.message < cut);
    records.truncate(kept);
    kept
}

impl SessionSnapshot {
    /// Takes this snapshot back to `to`, in place, and returns how many messages it
    /// dropped: the transcript keeps the messages before that point, with their tool-call
    /// records; usage, options and metadata stay as they are (the completions that
    /// produced the dropped messages were paid for). The update time is now.
    ///
    /// A snapshot loaded from a store stays one that derives from it, so saving it is an
    /// append of one small record to stores that append
    /// ([`FileSessionStore`](crate::FileSessionStore)). Rewinding to the end changes
    /// nothing. The cost is that of the turns dropped (plus a copy of the transcript if a
    /// clone of this snapshot shares it), not of the session's length. To rewind a stored
    /// session in one call, use [`SessionStoreExt::rewind`](crate::SessionStoreExt::rewind);
    /// a live session, [`Session::rewind`](crate::Session::rewind).
    ///
    /// The dropped messages leave the transcript (the view the model is sent), not the
    /// session's history: a store keeps them,
    /// [`SessionStore::history`](crate::SessionStore::history) lists them as rewound,
    /// and [`SessionStore::restore`](crate::SessionStore::restore) makes the revision
    /// before the rewind the head again, until a retention policy drops them
    /// ([`HistoryRetention`](crate::HistoryRetention)). So a rewind is not a way to erase
    /// something: redact before saving
    /// ([`HarnessBuilder::redactor`](crate::HarnessBuilder::redactor)), or delete the
    /// session.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `to` lies before the start (more turns than the
    /// session has) or beyond the transcript, or would separate a tool call from its
    /// result (the message names the nearest valid points); the snapshot is not changed.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, Message, RewindTo, SessionId, SessionSnapshot};
    ///
    /// let mut snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![
    ///         Message::user("one"),
    ///         Message::assistant(vec![ContentBlock::text("1")]),
    ///         Message::user("two"),
    ///         Message::assistant(vec![ContentBlock::text("2")]),
    ///     ])
    ///     .build()?;
    /// assert!(snapshot.rewind(RewindTo::LastTurns(3)).is_err());
    /// assert_eq!(snapshot.rewind(RewindTo::LastTurns(1))?, 2);
    /// assert_eq!(snapshot.transcript().len(), 2);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn rewind(&mut self, to: RewindTo) -> Result<usize> {
        let dropped = rewind_parts(
            &self.id,
            &mut self.transcript,
            &mut self.tool_calls,
            &mut self.provenance,
            to,
        )?;
        if dropped > 0 {
            self.updated_at = clock::next_stamp(self.updated_at, self.created_at);
        }
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{ContentBlock, ToolCall, ToolResult};
    use serde_json::json;

    fn id() -> SessionId {
        SessionId::parse("r").expect("id")
    }

    /// prompt, call, result, answer, prompt, answer
    fn session() -> SessionSnapshot {
        SessionSnapshot::builder(id(), "m")
            .transcript(vec![
                Message::user("one"),
                Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                    "c1",
                    "f",
                    json!({}),
                ))]),
                Message::tool_result(ToolResult::new("c1", "done")),
                Message::assistant(vec![ContentBlock::text("1")]),
                Message::user("two"),
                Message::assistant(vec![ContentBlock::text("2")]),
            ])
            .build()
            .expect("build")
    }

    #[test]
    fn last_turns_cut_at_the_nth_last_prompt() {
        let s = session();
        let cut = |to| rewind_cut(&id(), s.transcript(), s.tool_calls(), to);
        assert_eq!(cut(RewindTo::LastTurns(0)).expect("0"), 6);
        assert_eq!(cut(RewindTo::LastTurns(1)).expect("1"), 4);
        assert_eq!(cut(RewindTo::LastTurns(2)).expect("2"), 0);
        let err = cut(RewindTo::LastTurns(3)).expect_err("3");
        assert!(err.to_string().contains("only 2 turns"), "{err}");
    }

    #[test]
    fn a_point_inside_a_tool_call_names_the_valid_ones() {
        let s = session();
        let err = rewind_cut(&id(), s.transcript(), s.tool_calls(), RewindTo::Message(2))
            .expect_err("splits c1");
        let text = err.to_string();
        assert!(
            text.contains("cannot rewind session r to message 2")
                && text.contains("\"c1\"")
                && text.contains("rewind to message 1 or 3 instead"),
            "{text}"
        );
        let err = rewind_cut(&id(), s.transcript(), s.tool_calls(), RewindTo::Message(7))
            .expect_err("past the end");
        assert!(err.to_string().contains("only 6 messages"), "{err}");
    }

    #[test]
    fn rewound_keeps_usage_and_drops_later_records() {
        let s = session();
        let mut back = s.clone();
        assert_eq!(back.rewind(RewindTo::Message(1)).expect("rewind"), 5);
        assert_eq!(back.transcript().len(), 1);
        assert!(back.tool_calls().is_empty());
        assert_eq!(back.usage(), s.usage());
        assert!(back.updated_at() > s.updated_at());
        back.validate().expect("consistent");
        let mut kept = s.clone();
        kept.rewind(RewindTo::Message(3)).expect("after the result");
        assert_eq!(kept.tool_calls(), s.tool_calls());
        let mut refused = s.clone();
        refused.rewind(RewindTo::Message(2)).expect_err("splits c1");
        assert_eq!(refused, s, "a refused rewind changed the snapshot");
        assert_eq!(refused.updated_at(), s.updated_at());
    }

    #[test]
    fn keep_records_before_counts_the_unchanged_prefix() {
        let s = session();
        let mut records = s.tool_calls().to_vec();
        assert_eq!(keep_records_before(&mut records, 6), 1);
        assert_eq!(keep_records_before(&mut records, 1), 0);
        assert!(records.is_empty());
    }
}
