//! Compacting: putting a [`Compaction`]'s summary in place of the first messages of a
//! session's view. What it replaces leaves the view, not the history; the usage of the
//! call that wrote the summary is counted.
//!
//! A compaction is one log entry holding the summary: a store that appends writes the
//! summary, whatever the session's length.

use std::sync::Arc;

use super::fork::check_cut;
use super::validate::{check_block_roles, check_depths, check_role_alias, pair_tool_calls};
use super::{BlockPosition, Provenance, SessionSnapshot, ToolCallRecord, ToolCallStatus};
use crate::clock;
use crate::compactor::Compaction;
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::transcript::{dismantle_message, Message};
use crate::usage::{Usage, UsageTotals};

/// What a compaction changes in a session's or a snapshot's parts.
pub(crate) struct CompactTarget<'a> {
    pub(crate) transcript: &'a mut Arc<Vec<Message>>,
    pub(crate) records: &'a mut Arc<Vec<ToolCallRecord>>,
    pub(crate) usage: &'a mut Arc<Vec<Usage>>,
    pub(crate) totals: &'a mut UsageTotals,
    pub(crate) provenance: &'a mut Option<Provenance>,
}

/// Checks `compaction` against the view and applies it: the summary replaces the first
/// `replaced` messages, the records follow, the usage is added. Nothing changes on error.
///
/// # Errors
///
/// [`Error::InvalidArgument`] if `replaced` is beyond the view or splits a tool call from
/// its result (naming the nearest valid points), or the summary holds a tool call without
/// its result, a result without its call, a block its role cannot carry, or JSON nested
/// too deep to store; [`Error::Inconsistent`] if the usage would overflow the totals.
pub(crate) fn compact_parts(
    id: &SessionId,
    compaction: Compaction,
    target: CompactTarget<'_>,
) -> Result<()> {
    let Compaction {
        replaced,
        summary,
        usage,
    } = compaction;
    let CompactTarget {
        transcript,
        records,
        usage: stored_usage,
        totals,
        provenance,
    } = target;
    let refuse = |reason: String, summary: Vec<Message>| {
        summary.into_iter().for_each(dismantle_message);
        Err(Error::InvalidArgument { reason })
    };
    let len = transcript.len();
    if replaced > len {
        return refuse(
            format!(
                "cannot compact the first {replaced} messages of session {id}: it has only {len}"
            ),
            summary,
        );
    }
    if let Err(e) = check_cut(
        records,
        replaced,
        |call, call_at, result_at, before, after| {
            format!(
            "cannot compact the first {replaced} messages of session {id}: tool call {call:?} is made in message {call_at} and answered in message {result_at}; compact {before} or {after} messages instead"
        )
        },
    ) {
        summary.into_iter().for_each(dismantle_message);
        return Err(e);
    }
    if let Err(e) = check_depths(id, 0, &summary, None) {
        summary.into_iter().for_each(dismantle_message);
        return Err(e);
    }
    let checked = summary.iter().enumerate().try_for_each(|(m, message)| {
        check_role_alias(m, message)?;
        check_block_roles(m, message)
    });
    let pairs = checked.and_then(|()| pair_tool_calls(&summary));
    let summary_records: Vec<ToolCallRecord> = match pairs {
        Ok(pairs) => pairs
            .into_iter()
            .map(|pair| ToolCallRecord {
                call_id: pair.call.id.clone(),
                tool_name: pair.call.name.clone(),
                call_at: pair.call_at,
                result_at: pair.result_at,
                status: if pair.result.is_error {
                    ToolCallStatus::Error
                } else {
                    ToolCallStatus::Ok
                },
            })
            .collect(),
        Err(Error::Inconsistent { problem, .. }) => {
            return refuse(
                format!("the compaction summary for session {id} is not a valid start of a conversation: {problem}"),
                summary,
            )
        }
        Err(e) => {
            summary.into_iter().for_each(dismantle_message);
            return Err(e);
        }
    };
    let Some(new_totals) = totals.checked_extend(&usage) else {
        summary.into_iter().for_each(dismantle_message);
        return Err(Error::inconsistent(
            "the compaction's usage would overflow the session's 64-bit usage totals",
        ));
    };
    *totals = new_totals;
    Arc::make_mut(stored_usage).extend(usage);
    let added = summary.len();
    Arc::make_mut(transcript)
        .splice(0..replaced, summary)
        .for_each(dismantle_message);
    let records = Arc::make_mut(records);
    records.retain(|r| r.call_at.message >= replaced);
    for record in records.iter_mut() {
        record.call_at = moved(record.call_at, replaced, added);
        record.result_at = moved(record.result_at, replaced, added);
    }
    records.splice(0..0, summary_records);
    if let Some(provenance) = provenance {
        provenance.pending.compacted(replaced, added);
    }
    Ok(())
}

/// A position after the first `replaced` messages, once `added` took their place.
fn moved(at: BlockPosition, replaced: usize, added: usize) -> BlockPosition {
    BlockPosition {
        message: at.message - replaced + added,
        block: at.block,
    }
}

impl SessionSnapshot {
    /// Puts `compaction`'s summary in place of the first [`Compaction::replaced`]
    /// messages, in place, and counts its usage. The model is sent the shorter view from
    /// now on; the replaced messages stay in the session's history
    /// ([`SessionStore::history`](crate::SessionStore::history)). The update time is now.
    ///
    /// A snapshot loaded from a store stays one that derives from it, so its save appends
    /// one entry holding the summary. For a live session use
    /// [`Session::compact`](crate::Session::compact).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if the point is beyond the view or splits a tool call
    /// from its result (naming the nearest valid points), or the summary holds a tool call
    /// without its result (or a result without its call), a block its role cannot carry,
    /// or JSON nested too deep to store; [`Error::Inconsistent`] if the usage would
    /// overflow the totals. The snapshot is not changed on error.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Compaction, ContentBlock, Message, SessionId, SessionSnapshot};
    ///
    /// let mut snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![
    ///         Message::user("one"),
    ///         Message::assistant(vec![ContentBlock::text("1")]),
    ///         Message::user("two"),
    ///     ])
    ///     .build()?;
    /// snapshot.compact(Compaction::new(2, vec![Message::user("Earlier: one, 1.")]))?;
    /// assert_eq!(snapshot.transcript().len(), 2);
    /// assert_eq!(snapshot.transcript()[0].text(), "Earlier: one, 1.");
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn compact(&mut self, compaction: Compaction) -> Result<()> {
        compact_parts(
            &self.id,
            compaction,
            CompactTarget {
                transcript: &mut self.transcript,
                records: &mut self.tool_calls,
                usage: &mut self.usage,
                totals: &mut self.totals,
                provenance: &mut self.provenance,
            },
        )?;
        self.updated_at = clock::next_stamp(self.updated_at, self.created_at);
        Ok(())
    }

    /// Where a compaction that keeps the last `keep_last_turns` turns verbatim would cut:
    /// how many leading messages it replaces (never splitting a tool call from its
    /// result), or `None` if there is nothing before those turns. As
    /// [`Session::compaction_point`](crate::Session::compaction_point).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, Message, SessionId, SessionSnapshot};
    ///
    /// let snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![
    ///         Message::user("one"),
    ///         Message::assistant(vec![ContentBlock::text("1")]),
    ///         Message::user("two"),
    ///         Message::assistant(vec![ContentBlock::text("2")]),
    ///     ])
    ///     .build()?;
    /// assert_eq!(snapshot.compaction_point(1), Some(2));
    /// assert_eq!(snapshot.compaction_point(2), None);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn compaction_point(&self, keep_last_turns: usize) -> Option<usize> {
        compaction_point(&self.transcript, &self.tool_calls, keep_last_turns)
    }
}

/// How many leading messages to replace so that the last `keep_last_turns` turns stay:
/// the start of the `keep_last_turns`-th last turn, moved back to a point that splits
/// no tool call. `None` if there is nothing before it to replace.
pub(crate) fn compaction_point(
    transcript: &[Message],
    records: &[ToolCallRecord],
    keep_last_turns: usize,
) -> Option<usize> {
    let prompts: Vec<usize> = transcript
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_prompt())
        .map(|(i, _)| i)
        .collect();
    let mut point = if keep_last_turns == 0 {
        transcript.len()
    } else {
        *prompts.get(prompts.len().checked_sub(keep_last_turns)?)?
    };
    while let Some(split) = records
        .iter()
        .find(|r| r.call_at.message < point && r.result_at.message >= point)
    {
        point = split.call_at.message;
    }
    (point > 0).then_some(point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{ContentBlock, ToolCall, ToolResult};
    use serde_json::json;

    fn session() -> SessionSnapshot {
        SessionSnapshot::builder(SessionId::parse("c").unwrap(), "m")
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
                Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                    "c2",
                    "f",
                    json!({}),
                ))]),
                Message::tool_result(ToolResult::error("c2", "no")),
                Message::assistant(vec![ContentBlock::text("2")]),
            ])
            .build()
            .unwrap()
    }

    #[test]
    fn the_summary_takes_the_place_of_the_prefix_and_records_follow() {
        let mut s = session();
        s.compact(
            Compaction::new(4, vec![Message::user("summary")])
                .with_usage(crate::usage::Usage::new("m").with_tokens(5, 1)),
        )
        .unwrap();
        assert_eq!(s.transcript().len(), 5);
        assert_eq!(s.transcript()[0].text(), "summary");
        assert_eq!(s.tool_calls().len(), 1);
        assert_eq!(s.tool_calls()[0].call_id, "c2");
        assert_eq!(s.tool_calls()[0].call_at.message, 2);
        assert_eq!(s.tool_calls()[0].status, ToolCallStatus::Error);
        assert_eq!(s.usage().len(), 1);
        s.validate().unwrap();
    }

    #[test]
    fn bad_compactions_are_refused_and_change_nothing() {
        let s = session();
        let refused = |c: Compaction| {
            let mut copy = s.clone();
            let err = copy.compact(c).unwrap_err();
            assert_eq!(copy, s);
            err.to_string()
        };
        assert!(refused(Compaction::new(2, vec![])).contains("compact 1 or 3 messages instead"));
        assert!(refused(Compaction::new(9, vec![])).contains("only 8"));
        let unanswered = Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "x",
            "f",
            json!({}),
        ))]);
        assert!(refused(Compaction::new(4, vec![unanswered])).contains("no result"));
        let orphan = Message::tool_result(ToolResult::new("zz", "?"));
        assert!(refused(Compaction::new(4, vec![orphan])).contains("not a valid start"));
    }

    #[test]
    fn the_compaction_point_keeps_the_last_turns_whole() {
        let s = session();
        let point = |keep| compaction_point(s.transcript(), s.tool_calls(), keep);
        assert_eq!(point(1), Some(4));
        assert_eq!(point(2), None, "nothing before the first turn");
        assert_eq!(point(0), Some(8));
    }
}
