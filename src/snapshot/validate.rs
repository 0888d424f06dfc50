//! The invariants every snapshot keeps, checked on every load and build: tool calls
//! paired with their results (and the records agreeing), roles that carry the blocks a
//! provider accepts, usage that sums, times in order and not in the future, and JSON no
//! deeper than a stored session can be read back with.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{BlockPosition, SessionSnapshot};
use crate::clock;
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::json;
use crate::transcript::{message_depth, ContentBlock, Message, Role, ToolCall, ToolResult};
use crate::usage::UsageTotals;

impl SessionSnapshot {
    /// Checks every invariant described on the type, and sums the usage.
    pub(crate) fn validate(&mut self) -> Result<()> {
        if let Some(lineage) = &self.lineage {
            if lineage.parent == self.id {
                return Err(Error::inconsistent(format!(
                    "session {} names itself as the parent it was forked from",
                    self.id
                )));
            }
        }
        if self.options.max_turns == 0 {
            return Err(Error::inconsistent(
                "options.max_turns is 0; it must be at least 1",
            ));
        }
        if self.updated_at < self.created_at {
            return Err(Error::inconsistent(format!(
                "updated_at {} is before created_at {}",
                self.updated_at, self.created_at
            )));
        }
        for (m, message) in self.transcript.iter().enumerate() {
            check_role_alias(m, message)?;
            check_block_roles(m, message)?;
        }
        self.totals = UsageTotals::checked_sum(&self.usage)
            .ok_or_else(|| Error::inconsistent("usage totals overflow a 64-bit counter"))?;
        let pairs = pair_tool_calls(&self.transcript)?;
        if pairs.len() != self.tool_calls.len() {
            return Err(Error::inconsistent(format!(
                "the transcript has {} tool calls but there are {} tool-call records",
                pairs.len(),
                self.tool_calls.len()
            )));
        }
        for (pair, record) in pairs.iter().zip(self.tool_calls.iter()) {
            if record.call_id != pair.call.id
                || record.tool_name != pair.call.name
                || record.call_at != pair.call_at
                || record.result_at != pair.result_at
            {
                return Err(Error::inconsistent(format!(
                    "tool-call record for {:?} disagrees with the transcript, which has call {:?} ({}) at {:?} answered at {:?}",
                    record.call_id, pair.call.id, pair.call.name, pair.call_at, pair.result_at
                )));
            }
            if record.status.is_error() != pair.result.is_error {
                return Err(Error::inconsistent(format!(
                    "tool-call record for {:?} has status {:?} but its result has is_error = {}",
                    record.call_id, record.status, pair.result.is_error
                )));
            }
        }
        Ok(())
    }
}

/// Refuses a time of session `id` later than this machine's clock allows
/// ([`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE)).
pub(super) fn check_not_in_the_future(
    id: &SessionId,
    field: &str,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<()> {
    if clock::is_in_the_future(at, now) {
        return Err(Error::InvalidArgument {
            reason: format!(
                "session {id}: {field} {at} is later than this machine's clock ({now}) allows; a time in the future would keep the session first in every listing, so correct it (or the clock)"
            ),
        });
    }
    Ok(())
}

/// Refuses messages (numbered from `first`) or metadata that nest deeper than a stored
/// session can hold ([`Error::TooDeep`]), measured without recursion.
pub(super) fn check_depths(
    id: &SessionId,
    first: usize,
    messages: &[Message],
    metadata: Option<&Map<String, Value>>,
) -> Result<()> {
    for (i, message) in messages.iter().enumerate() {
        let depth = message_depth(message);
        if depth > json::MAX_MESSAGE_DEPTH {
            return Err(Error::TooDeep {
                id: id.clone(),
                part: format!("message {}", first + i),
                depth,
                limit: json::MAX_MESSAGE_DEPTH,
            });
        }
    }
    if let Some(metadata) = metadata {
        check_metadata_depth(id, metadata)?;
    }
    Ok(())
}

/// Refuses metadata that nests deeper than a stored session can hold.
pub(crate) fn check_metadata_depth(id: &SessionId, metadata: &Map<String, Value>) -> Result<()> {
    let depth = json::map_depth(metadata);
    if depth > json::MAX_METADATA_DEPTH {
        return Err(Error::TooDeep {
            id: id.clone(),
            part: "metadata".to_owned(),
            depth,
            limit: json::MAX_METADATA_DEPTH,
        });
    }
    Ok(())
}

/// Refuses a role alias on message `m` other than the one a codec records ("developer" on
/// a system message): any other would change the role a provider is sent.
pub(super) fn check_role_alias(m: usize, message: &Message) -> Result<()> {
    match message.wire.role {
        Some(alias) if message.role != alias.role() => Err(Error::inconsistent(format!(
            "message {m} has role {:?} with the role alias {:?}, which is for {:?} messages (\"developer\" for system, \"model\" for assistant)",
            message.role,
            alias.as_str(),
            alias.role()
        ))),
        _ => Ok(()),
    }
}

/// Refuses tool blocks in messages of a role that no provider accepts them in: a tool call
/// is made by the model (an assistant message), and a result comes back in a tool message
/// (OpenAI) or a user message (Anthropic). The session loop never makes anything else.
pub(super) fn check_block_roles(m: usize, message: &Message) -> Result<()> {
    for (b, block) in message.content.iter().enumerate() {
        let refused = match block {
            ContentBlock::ToolCall(call) if message.role != Role::Assistant => {
                Some(("tool call", call.id.as_str(), "assistant"))
            }
            ContentBlock::ToolResult(result)
                if !matches!(message.role, Role::Tool | Role::User) =>
            {
                Some(("tool result", result.call_id.as_str(), "tool or user"))
            }
            _ => None,
        };
        if let Some((what, id, allowed)) = refused {
            return Err(Error::inconsistent(format!(
                "message {m} has role {:?} but block {b} is a {what} ({id:?}), which only {allowed} messages may carry",
                message.role
            )));
        }
    }
    Ok(())
}

/// A tool call and its result, found by walking the transcript.
pub(super) struct Pair<'a> {
    pub(super) call: &'a ToolCall,
    pub(super) call_at: BlockPosition,
    pub(super) result: &'a ToolResult,
    pub(super) result_at: BlockPosition,
}

/// Pairs every tool call with its result, in call order.
///
/// # Errors
///
/// [`Error::Inconsistent`] for a call id reused while an earlier call with that id is
/// unanswered, a result for an unknown or already answered call, a result before its call,
/// or a call without a result.
///
/// Ids may repeat once the earlier call is answered: some OpenAI-compatible servers number
/// calls per step (`call_0`, `call_1`, ...), and a result always answers the latest call
/// with its id.
pub(super) fn pair_tool_calls(transcript: &[Message]) -> Result<Vec<Pair<'_>>> {
    let mut calls: Vec<(&ToolCall, BlockPosition)> = Vec::new();
    // The latest call with each id.
    let mut index_of: HashMap<&str, usize> = HashMap::new();
    let mut results: Vec<Option<(&ToolResult, BlockPosition)>> = Vec::new();
    for (m, message) in transcript.iter().enumerate() {
        for (b, block) in message.content.iter().enumerate() {
            let at = BlockPosition {
                message: m,
                block: b,
            };
            match block {
                ContentBlock::ToolCall(call) => {
                    if let Some(earlier) = index_of.insert(&call.id, calls.len()) {
                        if results[earlier].is_none() {
                            return Err(Error::inconsistent(format!(
                                "tool call id {:?} is used again at message {m} while the earlier call with that id has no result",
                                call.id
                            )));
                        }
                    }
                    calls.push((call, at));
                    results.push(None);
                }
                ContentBlock::ToolResult(result) => {
                    let Some(&i) = index_of.get(result.call_id.as_str()) else {
                        return Err(Error::inconsistent(format!(
                            "tool result at message {m} answers {:?}, which no earlier tool call has",
                            result.call_id
                        )));
                    };
                    if results[i].is_some() {
                        return Err(Error::inconsistent(format!(
                            "tool call {:?} has a second result at message {m}",
                            result.call_id
                        )));
                    }
                    results[i] = Some((result, at));
                }
                _ => {}
            }
        }
    }
    calls
        .into_iter()
        .zip(results)
        .map(|((call, call_at), result)| match result {
            Some((result, result_at)) => Ok(Pair {
                call,
                call_at,
                result,
                result_at,
            }),
            None => Err(Error::inconsistent(format!(
                "tool call {:?} ({}) at message {} has no result",
                call.id, call.name, call_at.message
            ))),
        })
        .collect()
}
