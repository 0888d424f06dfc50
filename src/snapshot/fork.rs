//! Forks: where a session branched from another ([`Lineage`]) and where to cut a parent's
//! history to start one ([`ForkAt`]).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{HistoryStats, SessionSnapshot, ToolCallRecord};
use crate::clock;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::transcript::Message;
use crate::usage::UsageTotals;

/// Where a forked session came from: its parent, the parent's revision it was forked
/// from, and how many of the parent's messages it started with.
///
/// Recorded once, when the fork is made ([`SessionSnapshot::fork`](crate::SessionSnapshot::fork)),
/// saved with the fork, and shown in listings ([`SessionSummary::lineage`](crate::SessionSummary::lineage)).
/// It is a record, not a link: the fork holds its own copy of the shared messages, so it
/// stays loadable when the parent changes or is deleted.
///
/// # Examples
///
/// ```
/// use agent_session::{ContentBlock, ForkAt, Message, SessionId, SessionSnapshot};
///
/// let parent = SessionSnapshot::builder(SessionId::parse("parent")?, "m")
///     .transcript(vec![
///         Message::user("one"),
///         Message::assistant(vec![ContentBlock::text("1")]),
///         Message::user("two"),
///     ])
///     .build()?;
/// let fork = parent.fork(SessionId::parse("branch")?, ForkAt::Turns(1))?;
/// let lineage = fork.lineage().expect("a fork records its parent");
/// assert_eq!(lineage.parent.as_str(), "parent");
/// assert_eq!(lineage.fork_point, 2);
/// assert_eq!(fork.transcript(), &parent.transcript()[..2]);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Lineage {
    /// The session this one was forked from.
    pub parent: SessionId,
    /// The parent's revision at the fork ([`Revision::NEW`] if the parent was never saved).
    pub parent_revision: Revision,
    /// How many of the parent's messages the fork started with: when it was made, its
    /// first `fork_point` messages were the parent's first `fork_point` messages at
    /// `parent_revision` (when the fork is made from a stored parent, as
    /// [`SessionStoreExt::fork`](crate::SessionStoreExt::fork) does; a fork of a session's
    /// unsaved snapshot may hold messages the parent's stored revision does not). A record
    /// of the fork's start, not a promise about its transcript now: a fork rewound below
    /// this point ([`SessionSnapshot::rewind`](crate::SessionSnapshot::rewind)) keeps its
    /// lineage unchanged.
    pub fork_point: usize,
    /// When the fork was made.
    pub forked_at: DateTime<Utc>,
}

impl Lineage {
    /// A lineage record, for custom stores and importers that rebuild forks.
    #[must_use]
    pub fn new(
        parent: SessionId,
        parent_revision: Revision,
        fork_point: usize,
        forked_at: DateTime<Utc>,
    ) -> Self {
        Lineage {
            parent,
            parent_revision,
            fork_point,
            forked_at,
        }
    }
}

/// What a checkpoint that shares its first messages with its parent records of it
/// (`shared_prefix` in `docs/FORMAT.md`): the parent's creation time (with the lineage's
/// parent id and revision, which session's history the prefix is) and how many forks up
/// the chain share one (1 for a fork of a session that holds its own messages), which
/// bounds how far a load follows parents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SharedPrefix {
    pub(crate) parent_created_at: DateTime<Utc>,
    pub(crate) depth: u32,
}

/// The longest chain of forks that share their prefixes: a fork of a fork this deep
/// holds its own copy, so a load follows at most this many parents.
pub(crate) const MAX_SHARED_DEPTH: u32 = 8;

/// How many sessions a load reads at most: the deepest chain of sharing forks a store
/// writes, and the session itself.
pub(crate) const SHARED_DEPTH_BUDGET: u32 = MAX_SHARED_DEPTH + 1;

/// For the first save of `fork` at `revision`: the checkpoint that leaves out the
/// messages it shares with its parent, if it is a fork made from a stored revision and
/// `load_parent(lineage)` (the store's own read of the parent's state at that revision)
/// gives a state holding them: the same session (creation time), the same first
/// `fork_point` messages and the same tool-call records among them. `None` otherwise (no
/// such parent in this store: another store's, gone or unreadable), and the store writes
/// the fork whole. One check for every store that shares prefixes.
///
/// # Errors
///
/// Encoding errors of the checkpoint; `load_parent`'s errors only mean `None`.
pub(crate) fn sharing_checkpoint(
    fork: &SessionSnapshot,
    revision: Revision,
    load_parent: impl FnOnce(&Lineage) -> Result<SessionSnapshot>,
) -> Result<Option<Vec<u8>>> {
    let (Some(share), Some(lineage)) = (fork.share(), fork.lineage()) else {
        return Ok(None);
    };
    let Ok(parent) = load_parent(lineage) else {
        return Ok(None);
    };
    let cut = lineage.fork_point;
    let records = |s: &SessionSnapshot| {
        s.tool_calls()
            .iter()
            .take_while(|r| r.call_at.message < cut)
            .cloned()
            .collect::<Vec<_>>()
    };
    if parent.created_at() == share.parent_created_at
        && parent.transcript().get(..cut) == fork.transcript().get(..cut)
        && records(&parent) == records(fork)
    {
        return fork.to_sharing_checkpoint(revision, share).map(Some);
    }
    Ok(None)
}

/// For a stored base (checkpoint) that shares its first messages with its parent: the
/// parent's state at the revision the fork was made from, read with `load_parent(parent,
/// revision, budget)` (the store's own read, following at most `budget` more parents) and
/// checked to be the session and the messages the fork shares; `None` for a base that
/// holds its own messages. One check for every store that shares prefixes.
///
/// # Errors
///
/// [`Error::Inconsistent`] if the base names no parent, the chain of sharing forks is
/// longer than a store writes (or than `budget`), or the parent is missing, is another
/// session now (another creation time), no longer keeps that revision or has fewer
/// messages than the fork shares; `load_parent`'s other errors as they are.
pub(crate) fn shared_prefix_of(
    base: &SessionSnapshot,
    budget: u32,
    load_parent: impl FnOnce(&SessionId, Revision, u32) -> Result<SessionSnapshot>,
) -> Result<Option<SessionSnapshot>> {
    let Some(share) = base.share() else {
        return Ok(None);
    };
    let id = base.id();
    let Some(lineage) = base.lineage() else {
        return Err(Error::inconsistent(format!(
            "session {id} says it shares its first messages with its parent but names none"
        )));
    };
    if budget == 0 || share.depth > MAX_SHARED_DEPTH {
        return Err(Error::inconsistent(format!(
            "session {id} shares its first messages through a chain of forks longer than the {MAX_SHARED_DEPTH} a store writes"
        )));
    }
    let gone = |why: String| {
        Error::inconsistent(format!(
            "session {id} shares its first {} messages with revision {} of session {}, but {why}; the fork cannot be loaded without them",
            lineage.fork_point, lineage.parent_revision, lineage.parent
        ))
    };
    let parent = match load_parent(&lineage.parent, lineage.parent_revision, budget - 1) {
        Ok(parent) => parent,
        Err(e) if e.is_not_found() => return Err(gone(e.to_string())),
        Err(e) => return Err(e),
    };
    if parent.created_at() != share.parent_created_at {
        return Err(gone(format!(
            "that session is now another one (created at {}, not {})",
            parent.created_at(),
            share.parent_created_at
        )));
    }
    if lineage.fork_point > parent.transcript().len() {
        return Err(gone(format!(
            "that revision has only {} messages",
            parent.transcript().len()
        )));
    }
    Ok(Some(parent))
}

/// Where to cut the parent's history when forking: the fork starts with the messages
/// before the cut.
///
/// A cut must not separate a tool call from its result (the fork would start mid-turn);
/// [`SessionSnapshot::fork`](crate::SessionSnapshot::fork) refuses such a point and names
/// the nearest valid ones.
///
/// # Examples
///
/// ```
/// use agent_session::ForkAt;
///
/// let at: ForkAt = "turn:2".parse()?;
/// assert_eq!(at, ForkAt::Turns(2));
/// assert_eq!("message:5".parse::<ForkAt>()?, ForkAt::Messages(5));
/// assert_eq!("end".parse::<ForkAt>()?, ForkAt::End);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForkAt {
    /// Keep the first `n` messages.
    Messages(usize),
    /// Keep the first `n` turns: everything before the `n + 1`-th user prompt (a user
    /// message that is not only tool results). `Turns(0)` keeps only what precedes the
    /// first prompt, such as system messages.
    Turns(usize),
    /// Keep the whole transcript.
    End,
}

impl std::fmt::Display for ForkAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForkAt::Messages(n) => write!(f, "message:{n}"),
            ForkAt::Turns(n) => write!(f, "turn:{n}"),
            ForkAt::End => f.write_str("end"),
        }
    }
}

impl std::str::FromStr for ForkAt {
    type Err = Error;

    /// Parses `message:N`, `turn:N` or `end`.
    fn from_str(text: &str) -> Result<Self> {
        let invalid = || {
            Error::InvalidArgument {
            reason: format!(
                "{text:?} is not a fork point: use message:N (keep the first N messages), turn:N (keep the first N turns) or end"
            ),
        }
        };
        if text == "end" {
            return Ok(ForkAt::End);
        }
        let (kind, n) = text.split_once(':').ok_or_else(invalid)?;
        let n: usize = n.parse().map_err(|_| invalid())?;
        match kind {
            "message" | "messages" => Ok(ForkAt::Messages(n)),
            "turn" | "turns" => Ok(ForkAt::Turns(n)),
            _ => Err(invalid()),
        }
    }
}

/// The number of leading messages of `transcript` that `at` keeps, checked not to split
/// a tool call (from `records`) from its result.
pub(crate) fn cut(
    id: &SessionId,
    transcript: &[Message],
    records: &[ToolCallRecord],
    at: ForkAt,
) -> Result<usize> {
    let cut = match at {
        ForkAt::End => transcript.len(),
        ForkAt::Messages(n) if n <= transcript.len() => n,
        ForkAt::Messages(n) => {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "cannot fork session {id} at message {n}: it has only {} messages",
                    transcript.len()
                ),
            })
        }
        ForkAt::Turns(n) => {
            let mut prompts = transcript
                .iter()
                .enumerate()
                .filter(|(_, m)| m.is_prompt())
                .map(|(i, _)| i);
            let turns = transcript.iter().filter(|m| m.is_prompt()).count();
            if n > turns {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "cannot fork session {id} after turn {n}: it has only {turns} turns"
                    ),
                });
            }
            prompts.nth(n).unwrap_or(transcript.len())
        }
    };
    check_cut(records, cut, |call, call_at, result_at, before, after| {
        format!(
            "cannot fork session {id} at message {cut}: tool call {call:?} is made in message {call_at} and answered in message {result_at}; fork at message {before} or {after} instead"
        )
    })?;
    Ok(cut)
}

/// `Ok` if a cut before message `cut` splits no tool call from its result; otherwise an
/// [`Error::InvalidArgument`] whose reason `explain` writes from the splitting call's id,
/// the messages of its call and result, and the nearest valid cuts before and after.
pub(super) fn check_cut(
    records: &[ToolCallRecord],
    cut: usize,
    explain: impl FnOnce(&str, usize, usize, usize, usize) -> String,
) -> Result<()> {
    match splitting(records, cut) {
        None => Ok(()),
        Some(split) => Err(Error::InvalidArgument {
            reason: explain(
                &split.call_id,
                split.call_at.message,
                split.result_at.message,
                valid_point(records, cut, |r| r.call_at.message),
                valid_point(records, cut, |r| r.result_at.message + 1),
            ),
        }),
    }
}

/// A tool call that a cut before message `cut` separates from its result.
fn splitting(records: &[ToolCallRecord], cut: usize) -> Option<&ToolCallRecord> {
    records
        .iter()
        .find(|r| r.call_at.message < cut && r.result_at.message >= cut)
}

/// The nearest cut from `cut` that splits no tool call, moving each time to where
/// `toward` says the splitting call allows (its call's message, or past its result):
/// with several calls in flight, the first point past one call can split another.
fn valid_point(
    records: &[ToolCallRecord],
    mut cut: usize,
    toward: impl Fn(&ToolCallRecord) -> usize,
) -> usize {
    while let Some(split) = splitting(records, cut) {
        cut = toward(split);
    }
    cut
}

impl SessionSnapshot {
    /// A new session `id` that starts with this one's history up to `at`, recording this
    /// session as its parent ([`Lineage`]). This snapshot is not changed; save the fork
    /// as a new session, or let [`SessionStoreExt::fork`](crate::SessionStoreExt::fork) do both.
    ///
    /// The fork keeps the options, the metadata, the messages before the cut and their
    /// tool-call records. Its usage starts empty: the completions that produced the
    /// shared history were paid for by the parent, so summing the cost of every session
    /// counts each completion once. Its creation and update times are now.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `id` is this session's own id, if `at` lies beyond
    /// the transcript, or if the cut would separate a tool call from its result (the
    /// message names the nearest points that do not).
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ForkAt, Message, SessionId, SessionSnapshot};
    ///
    /// let parent = SessionSnapshot::builder(SessionId::parse("p")?, "m")
    ///     .transcript(vec![Message::user("a"), Message::user("b")])
    ///     .build()?;
    /// let fork = parent.fork(SessionId::parse("f")?, ForkAt::Messages(1))?;
    /// assert_eq!(fork.transcript().len(), 1);
    /// assert_eq!(fork.lineage().map(|l| l.parent.as_str()), Some("p"));
    /// assert!(parent.fork(SessionId::parse("p")?, ForkAt::End).is_err());
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn fork(&self, id: SessionId, at: ForkAt) -> Result<SessionSnapshot> {
        if id == self.id {
            return Err(Error::InvalidArgument {
                reason: format!("a fork of session {id} needs an id of its own"),
            });
        }
        let cut = cut(&self.id, &self.transcript, &self.tool_calls, at)?;
        let now = Utc::now().max(self.created_at);
        // Only what a store holds at this revision can be shared with it (a store that
        // can then keeps the fork without a copy of the prefix).
        let share = self
            .is_unchanged_since_stored()
            .then(|| SharedPrefix {
                parent_created_at: self.created_at,
                depth: self.share.map_or(0, |s| s.depth) + 1,
            })
            .filter(|s| s.depth <= MAX_SHARED_DEPTH);
        let fork = SessionSnapshot {
            id,
            revision: Revision::NEW,
            created_at: now,
            updated_at: now,
            options: self.options.clone(),
            metadata: self.metadata.clone(),
            lineage: Some(Lineage::new(self.id.clone(), self.revision, cut, now)),
            transcript: Arc::new(self.transcript[..cut].to_vec()),
            tool_calls: Arc::new(
                self.tool_calls
                    .iter()
                    .filter(|r| r.result_at.message < cut)
                    .cloned()
                    .collect(),
            ),
            usage: Arc::default(),
            totals: UsageTotals::default(),
            provenance: None,
            redacted_by: None,
            fence: None,
            metadata_too_deep: None,
            history: HistoryStats::default(),
            replaces_history: false,
            share,
        };
        let mut fork = fork;
        fork.validate()?;
        Ok(fork)
    }

    /// Sets a creation or update time in the future (seen from `now`) to `now`, keeping
    /// the update no earlier than the creation; returns the times as they were if it
    /// changed them. For importing a session from a machine whose clock was ahead.
    pub(crate) fn clamp_future_times(
        &mut self,
        now: DateTime<Utc>,
    ) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let before = (self.created_at, self.updated_at);
        if clock::is_in_the_future(self.created_at, now) {
            self.created_at = now;
        }
        if clock::is_in_the_future(self.updated_at, now) {
            self.updated_at = now;
        }
        self.updated_at = self.updated_at.max(self.created_at);
        (before != (self.created_at, self.updated_at)).then_some(before)
    }

    /// This snapshot as a new, never-saved session `id` (revision [`Revision::NEW`]), with
    /// the lineage given: for importing it under another id.
    pub(crate) fn renamed(&self, id: SessionId, lineage: Option<Lineage>) -> SessionSnapshot {
        SessionSnapshot {
            id,
            revision: Revision::NEW,
            lineage,
            provenance: None,
            redacted_by: None,
            fence: None,
            history: HistoryStats::default(),
            share: None,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{BlockPosition, ToolCallStatus};

    fn record(call: usize, result: usize) -> ToolCallRecord {
        ToolCallRecord {
            call_id: format!("c{call}-{result}"),
            tool_name: "t".to_owned(),
            call_at: BlockPosition {
                message: call,
                block: 0,
            },
            result_at: BlockPosition {
                message: result,
                block: 0,
            },
            status: ToolCallStatus::Ok,
        }
    }

    #[test]
    fn the_points_a_refused_cut_suggests_split_no_call_themselves() {
        // Message 2 makes two calls, answered in messages 3 and 4; message 5 makes one
        // answered in 6. A cut at 3 splits the first call, and just past its result (4)
        // still splits the second: the nearest valid points are 2 and 5.
        let records = [record(2, 3), record(2, 4), record(5, 6)];
        let id = SessionId::parse("s").unwrap();
        let transcript: Vec<Message> = (0..8).map(|i| Message::user(format!("{i}"))).collect();
        for (cut, before, after) in [(3, 2, 5), (4, 2, 5), (6, 5, 7)] {
            let error = super::cut(&id, &transcript, &records, ForkAt::Messages(cut)).unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains(&format!("fork at message {before} or {after} instead")),
                "cut {cut}: {text}"
            );
            for point in [before, after] {
                assert!(splitting(&records, point).is_none(), "{point} is not valid");
            }
        }
    }
}
