//! Retention: dropping the revisions of a log before a point. The state at that point
//! becomes the new checkpoint, and what only the dropped revisions held (messages rewound,
//! compacted or replaced before it) is gone; every later revision loads as before.
//!
//! One kind of entry needs more than the cut: a restore of a dropped revision names a
//! state the log no longer holds, so it is written out as the view it restored (its own
//! messages, options and metadata); its usage part stays as it was.
//!
//! A store that cannot replace its checkpoint and its entries in one step (the file store:
//! two files) first writes the entries after a *checkpoint entry* holding the new
//! checkpoint's state ([`LogEntry::checkpoint_of`]), which a log may start with: then
//! either checkpoint, the old or the new, reads the same.

use super::entry::{EntryBody, EntryHead};
use super::log::LogSource;
use super::{EntryKind, HistoryStats, LogEntry, SessionLog, SessionSnapshot};
use crate::error::{Error, Result};
use crate::id::Revision;

/// A log cut at a revision: the state there, and the entries after it.
#[derive(Debug)]
pub(crate) struct Trimmed {
    /// The state at the revision cut at: a whole snapshot (a fork's shared messages copied
    /// in), with its history starting there.
    pub(crate) checkpoint: SessionSnapshot,
    /// The entries after it, restores of dropped revisions written out.
    pub(crate) entries: Vec<LogEntry>,
    /// How many revisions were dropped.
    pub(crate) dropped: u64,
}

impl Trimmed {
    /// The head state of the cut log: its checkpoint with its entries folded.
    ///
    /// # Errors
    ///
    /// The errors of folding the entries.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) fn head(&self) -> Result<SessionSnapshot> {
        let mut head = LogSource::new(self.checkpoint.clone());
        for entry in &self.entries {
            head.push(entry.clone());
        }
        head.state_at(None)
    }
}

impl LogSource<'_> {
    /// The log without its revisions before `oldest`.
    ///
    /// # Errors
    ///
    /// [`Error::RevisionNotFound`] if the log does not hold `oldest`; the errors of
    /// decoding and folding the log (it is checked whole first: a damaged log is not cut).
    pub(crate) fn trimmed(self, oldest: Revision) -> Result<Trimmed> {
        let first = self.checkpoint.revision;
        let last = self.last_revision();
        if oldest < first || oldest > last {
            return Err(Error::RevisionNotFound {
                id: self.checkpoint.id.clone(),
                revision: oldest,
                oldest: first,
                newest: last,
            });
        }
        let prefix = self.prefix.clone();
        let (checkpoint, _, entries) = self.into_checked_entries()?;
        let state_at = |revision: Revision| {
            let mut source = LogSource::new(checkpoint.clone());
            source.prefix.clone_from(&prefix);
            for entry in entries.iter().take_while(|e| e.head.revision <= revision) {
                source.push(entry.clone());
            }
            source.state_at(Some(revision))
        };
        let mut new_checkpoint = state_at(oldest)?.unshared();
        new_checkpoint.share = None;
        new_checkpoint.history = HistoryStats {
            oldest_revision: oldest,
            ..HistoryStats::default()
        };
        let mut kept = Vec::with_capacity(entries.len());
        for entry in &entries {
            if entry.head.revision <= oldest {
                continue;
            }
            if entry.head.base.is_some_and(|base| base < oldest) {
                kept.push(written_out(entry, &state_at(entry.head.revision)?));
            } else {
                kept.push(entry.clone());
            }
        }
        Ok(Trimmed {
            checkpoint: new_checkpoint,
            entries: kept,
            dropped: oldest.as_u64() - first.as_u64(),
        })
    }
}

/// `entry`, a restore of a revision that is being dropped, with the view it made
/// (`state`'s) written out in place of the revision it named. Its usage part is kept.
fn written_out(entry: &LogEntry, state: &SessionSnapshot) -> LogEntry {
    LogEntry {
        head: EntryHead {
            base: None,
            keep: Some((0, 0)),
            prepend: 0,
            messages: state.transcript.len(),
            options: Some(state.options.clone()),
            metadata: Some(state.metadata.clone()),
            ..entry.head.clone()
        },
        body: EntryBody {
            messages: state.transcript.as_ref().clone(),
            tool_calls: state.tool_calls.as_ref().clone(),
        },
    }
}

impl LogEntry {
    /// The checkpoint entry holding `state` whole, at its revision: what a log may start
    /// with in place of its checkpoint (`docs/FORMAT.md`, "Journal").
    pub(crate) fn checkpoint_of(state: &SessionSnapshot) -> LogEntry {
        LogEntry {
            head: EntryHead {
                revision: state.revision,
                updated_at: state.updated_at,
                kind: EntryKind::Checkpoint,
                base: None,
                keep: Some((0, 0)),
                prepend: 0,
                messages: state.transcript.len(),
                usage_kept: Some(0),
                usage: state.usage.as_ref().clone(),
                options: Some(state.options.clone()),
                metadata: Some(state.metadata.clone()),
                state: state.counts(),
            },
            body: EntryBody {
                messages: state.transcript.as_ref().clone(),
                tool_calls: state.tool_calls.as_ref().clone(),
            },
        }
    }
}

impl SessionSnapshot {
    /// The state a checkpoint entry holds, of the session `base` is a checkpoint of (its
    /// id, creation time and lineage; what it holds otherwise is not used). Not validated:
    /// the fold validates what it makes.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the entry is not a checkpoint entry or its lengths
    /// disagree with what it holds.
    pub(crate) fn from_checkpoint_entry(base: &SessionSnapshot, entry: LogEntry) -> Result<Self> {
        let LogEntry { head, body } = entry;
        let (Some(options), Some(metadata)) = (head.options, head.metadata) else {
            return Err(Error::inconsistent(format!(
                "the checkpoint entry of revision {} has no options or metadata",
                head.revision
            )));
        };
        if head.kind != EntryKind::Checkpoint
            || head.base.is_some()
            || head.keep != Some((0, 0))
            || head.prepend != 0
            || head.usage_kept != Some(0)
            || head.state.messages != body.messages.len()
            || head.state.tool_calls != body.tool_calls.len()
            || head.state.usage != head.usage.len()
        {
            return Err(Error::inconsistent(format!(
                "the log entry of revision {} starts the log but is not a whole checkpoint",
                head.revision
            )));
        }
        Ok(SessionSnapshot::from_decoded(
            base.id.clone(),
            head.revision,
            (base.created_at, head.updated_at),
            options,
            metadata,
            base.lineage.clone(),
            (body.messages, body.tool_calls, head.usage),
        ))
    }
}

impl SessionLog {
    /// Drops every revision before `oldest`, whose state becomes the checkpoint: what only
    /// the dropped revisions held (messages rewound, compacted or replaced before it) is
    /// gone, and every revision from `oldest` on loads exactly as before. Returns how many
    /// revisions were dropped (0 if `oldest` is already the checkpoint). For a store's
    /// retention policy (`SessionStore::trim_history`).
    ///
    /// # Errors
    ///
    /// [`Error::RevisionNotFound`] if the log does not hold `oldest`;
    /// [`Error::Inconsistent`] if the entries do not make a valid session. The log is
    /// unchanged on error.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, Message, Revision, RewindTo, SessionId, SessionLog,
    ///     SessionSnapshot};
    ///
    /// let first = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
    ///     .build()?
    ///     .stored_at(Revision::from_u64(1));
    /// let mut log = SessionLog::new(first.clone());
    /// let mut rewound = first.clone();
    /// rewound.rewind(RewindTo::LastTurns(1))?;
    /// log.push(rewound.pending_entry().expect("derives from revision 1"))?;
    ///
    /// assert_eq!(log.trim(Revision::from_u64(2))?, 1);
    /// assert!(log.at(Revision::from_u64(1)).unwrap_err().is_not_found());
    /// assert_eq!(log.head()?.transcript(), rewound.transcript());
    /// assert!(log.history()?.messages.is_empty()); // the rewound turn is gone
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn trim(&mut self, oldest: Revision) -> Result<u64> {
        if oldest == self.checkpoint.revision {
            return Ok(0);
        }
        let trimmed = self.source().trimmed(oldest)?;
        self.checkpoint = trimmed.checkpoint;
        self.entries = trimmed.entries;
        Ok(trimmed.dropped)
    }

    /// The checkpoint the log starts from.
    #[must_use]
    pub fn checkpoint(&self) -> &SessionSnapshot {
        &self.checkpoint
    }

    /// The entries after the checkpoint, oldest first.
    #[must_use]
    pub fn entries(&self) -> &[LogEntry] {
        &self.entries
    }
}
