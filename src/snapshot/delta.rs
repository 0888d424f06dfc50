//! What a snapshot shares with a stored revision, and the one log entry that takes the
//! store from that revision to the snapshot: the lengths a state has ([`Counts`]), what is
//! known to be stored ([`Provenance`]), and how the snapshot's view is made from the
//! stored one ([`Pending`]), kept up to date by every change (a turn, a rewind, a
//! compaction, a restore) so that no store has to infer what changed.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::entry::{EntryBody, EntryHead, EntryKind, LogEntry};
use super::validate::{
    check_block_roles, check_depths, check_not_in_the_future, check_role_alias, pair_tool_calls,
};
use super::{
    BlockPosition, HistoryStats, PersistedOptions, SessionSnapshot, ToolCallRecord, ToolCallStatus,
};
use crate::error::{Error, Result};
use crate::id::Revision;
use crate::transcript::{dismantle_message, Message};
use crate::usage::{Usage, UsageTotals};

/// How many transcript messages, tool-call records and usage entries a state has: the
/// lengths of a snapshot's three lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Counts {
    pub(crate) messages: usize,
    pub(crate) tool_calls: usize,
    pub(crate) usage: usize,
}

impl Counts {
    /// Whether every count is at most `other`'s.
    pub(crate) fn within(self, other: Counts) -> bool {
        self.messages <= other.messages
            && self.tool_calls <= other.tool_calls
            && self.usage <= other.usage
    }
}

/// How a snapshot's state is made from the stored state it derives from: the shape of the
/// log entry its next save appends.
///
/// The transcript is `new[..prepend] ++ base_view[keep.0..keep.1] ++ new[prepend..]`,
/// where the base view is the stored revision's (or, after a restore, the restored
/// revision's) and `new` are messages not stored yet; the first `usage_kept` usage entries
/// are the stored ones, the rest new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pending {
    /// A restore's revision and the length of its view; `None`: the stored revision.
    pub(crate) base: Option<(Revision, usize)>,
    /// The range of the base view the transcript keeps.
    pub(crate) keep: (usize, usize),
    /// How many new messages come before the kept ones (a compaction's summary).
    pub(crate) prepend: usize,
    /// How many of the stored usage entries are kept (all, unless a snapshot replaced them).
    pub(crate) usage_kept: usize,
    /// The strongest kind of change made since the stored revision, if one was declared
    /// (a rewind, a compaction, a restore, or a turn replacing placeholders); otherwise
    /// the entry's kind is told from its shape.
    pub(crate) kind: Option<EntryKind>,
}

impl Pending {
    /// Nothing changed yet since a state with `stored` lengths.
    pub(crate) fn none(stored: Counts) -> Self {
        Pending {
            base: None,
            keep: (0, stored.messages),
            prepend: 0,
            usage_kept: stored.usage,
            kind: None,
        }
    }

    /// How many messages of the base view are kept.
    pub(crate) fn kept_len(&self) -> usize {
        self.keep.1 - self.keep.0
    }

    /// Where the kept messages are in the transcript.
    pub(crate) fn kept_range(&self) -> std::ops::Range<usize> {
        self.prepend..self.prepend + self.kept_len()
    }

    /// Records `kind` as made, unless a stronger one already was.
    pub(crate) fn declare(&mut self, kind: EntryKind) {
        self.kind = Some(self.kind.map_or(kind, |k| k.stronger(kind)));
    }

    /// The transcript was cut to its first `cut` messages.
    pub(crate) fn rewound_to(&mut self, cut: usize) {
        let kept = self.kept_range();
        if cut <= kept.start {
            self.prepend = cut;
            self.keep.1 = self.keep.0;
        } else if cut < kept.end {
            self.keep.1 = self.keep.0 + (cut - kept.start);
        }
        self.declare(EntryKind::Rewind);
    }

    /// The transcript's first `replaced` messages were replaced by `summary` messages.
    pub(crate) fn compacted(&mut self, replaced: usize, summary: usize) {
        let kept = self.kept_range();
        if replaced <= kept.start {
            self.prepend = summary + (kept.start - replaced);
        } else if replaced < kept.end {
            self.keep.0 += replaced - kept.start;
            self.prepend = summary;
        } else {
            self.keep.0 = self.keep.1;
            self.prepend = summary;
        }
        self.declare(EntryKind::Compaction);
    }

    /// The transcript became the whole view of `revision`, `len` messages long.
    pub(crate) fn restored(&mut self, revision: Revision, len: usize) {
        self.base = Some((revision, len));
        self.keep = (0, len);
        self.prepend = 0;
        self.declare(EntryKind::Restore);
    }
}

/// What a snapshot is known to share with a stored revision, so a store can append the
/// change instead of writing everything.
///
/// Only this crate makes one: a store's `load`, and a [`Session`](crate::Session) after a
/// successful save. Everything that can change a snapshot's stored messages in place
/// (building, redaction that changes them) drops it; every change the crate makes (a
/// turn, a rewind, a compaction, a restore) keeps [`Pending`] up to date. A store still
/// checks the revision, creation time and stored lengths before trusting it, and writes
/// the whole snapshot otherwise.
#[derive(Clone)]
pub(crate) struct Provenance {
    /// The stored revision this snapshot derives from.
    pub(crate) revision: Revision,
    /// The lengths stored at that revision.
    pub(crate) stored: Counts,
    /// How this snapshot is made from it.
    pub(crate) pending: Pending,
    /// The `updated_at` stored at that revision.
    pub(crate) updated_at: DateTime<Utc>,
    /// The options and metadata stored at that revision, to tell whether they changed.
    pub(crate) options: Arc<PersistedOptions>,
    pub(crate) metadata: Arc<Map<String, Value>>,
    /// The rules the stored copy was redacted with, when known
    /// ([`Redactor::rules_id`]): redacting the kept messages with them again gives the
    /// stored ones.
    pub(crate) redactor: Option<u64>,
}

impl std::fmt::Debug for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provenance")
            .field("revision", &self.revision)
            .field("stored", &self.stored)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl Provenance {
    /// Whether nothing changed in the view since the stored revision.
    pub(crate) fn keeps_everything(&self) -> bool {
        self.pending == Pending::none(self.stored)
    }
}

impl SessionSnapshot {
    /// Sets the revision.
    ///
    /// For a snapshot that derives from a stored state (loaded from a store, or extended
    /// from one with [`with_appended`](Self::with_appended)), call it with the revision
    /// that [`SessionStore::save`](crate::SessionStore::save) returned for it: the snapshot
    /// then knows it is exactly what is stored at that revision, so saving it again,
    /// extended, writes only the new part to stores that can (see
    /// [`FileSessionStore`](crate::FileSessionStore)). Any other use (a snapshot from
    /// [`builder`](Self::builder), or a revision other than the next one) just sets the
    /// number, and the next save writes the whole snapshot.
    #[must_use]
    pub fn with_revision(mut self, revision: Revision) -> Self {
        if revision == self.revision {
            return self;
        }
        let derives_from_stored = self
            .provenance
            .as_ref()
            .is_some_and(|p| p.revision == self.revision);
        if derives_from_stored && revision == self.revision.next() {
            // What the store's log now holds, as a `Session` records it: the next save's
            // stats (a summary a store writes) start from them.
            self.history = self.stats_once_saved(revision);
            self.mark_stored(revision);
        } else {
            self.revision = revision;
            self.provenance = None;
        }
        self
    }

    /// This snapshot as a store holds it at `revision`: what a store's
    /// [`load`](crate::SessionStore::load) returns for the snapshot it decoded.
    ///
    /// Besides setting the revision, it records that the snapshot is exactly the stored
    /// one, so [`is_unchanged_since_stored`](Self::is_unchanged_since_stored) holds until it
    /// changes, and a [`Session`](crate::Session) resumed from it knows which part is
    /// already stored. Call it only on what the store itself holds at that revision: use
    /// [`with_revision`](Self::with_revision) to set just the number.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Revision, SessionId, SessionSnapshot};
    ///
    /// let bytes = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .build()?
    ///     .to_json_with_revision(Revision::from_u64(3))?;
    /// // In a store's `load`, with the revision the backend keeps for these bytes:
    /// let loaded = SessionSnapshot::from_json(&bytes)?.stored_at(Revision::from_u64(3));
    /// assert_eq!(loaded.revision(), Revision::from_u64(3));
    /// assert!(loaded.is_unchanged_since_stored());
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn stored_at(mut self, revision: Revision) -> Self {
        self.mark_stored(revision);
        self
    }

    /// A copy that shares no list with this snapshot (a clone shares them until one side
    /// changes), for a store that keeps it while its session goes on extending its own.
    pub(crate) fn unshared(&self) -> SessionSnapshot {
        let mut copy = self.clone();
        copy.transcript = Arc::new(self.transcript.as_ref().clone());
        copy.tool_calls = Arc::new(self.tool_calls.as_ref().clone());
        copy.usage = Arc::new(self.usage.as_ref().clone());
        copy
    }

    /// The lengths of the transcript, tool-call records and usage.
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            messages: self.transcript.len(),
            tool_calls: self.tool_calls.len(),
            usage: self.usage.len(),
        }
    }

    /// Whether this snapshot knows it derives from exactly the stored state that has this
    /// revision, creation and update times and lengths: then its
    /// [`change_since_stored`](Self::change_since_stored), applied to that state, gives it,
    /// and a store may append the change instead of writing the whole snapshot.
    pub(crate) fn derives_from(
        &self,
        revision: Revision,
        created_at: DateTime<Utc>,
        updated_at: DateTime<Utc>,
        counts: Counts,
    ) -> bool {
        self.created_at == created_at
            && self.provenance.as_ref().is_some_and(|p| {
                p.revision == revision && p.updated_at == updated_at && p.stored == counts
            })
    }

    /// What this snapshot is known to share with a stored revision (the PostgreSQL store
    /// reads it; the file store works from the log's own state).
    #[cfg(feature = "postgres")]
    pub(crate) fn provenance(&self) -> Option<&Provenance> {
        self.provenance.as_ref()
    }

    /// Whether this snapshot is known to be exactly what a store holds at its revision:
    /// loaded from a store, or saved by a [`Session`](crate::Session), and not changed
    /// since. Saving it would change nothing, and the crate's stores then write nothing and
    /// return its revision (see [`SessionStore`](crate::SessionStore)'s contract).
    ///
    /// A snapshot built anew is never taken for unchanged, even if its content equals the
    /// stored one: only a snapshot that came from a store knows what the store holds.
    /// A custom store that skips unchanged saves still checks that it holds this revision
    /// of this session (the snapshot may come from another store), for example by
    /// comparing the stored bytes with
    /// [`to_json_with_revision`](Self::to_json_with_revision), as
    /// `examples/custom_store.rs` does.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Message, MemorySessionStore, SessionId, SessionSnapshot, SessionStore};
    ///
    /// let store = MemorySessionStore::new();
    /// let built = SessionSnapshot::builder(SessionId::parse("s")?, "m").build()?;
    /// assert!(!built.is_unchanged_since_stored());
    /// let revision = store.save(&built)?;
    ///
    /// let loaded = store.load(built.id())?;
    /// assert!(loaded.is_unchanged_since_stored());
    /// assert_eq!(store.save(&loaded)?, revision); // nothing written
    ///
    /// let extended = loaded.with_appended(vec![Message::user("hi")], vec![], chrono::Utc::now())?;
    /// assert!(!extended.is_unchanged_since_stored());
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn is_unchanged_since_stored(&self) -> bool {
        self.metadata_too_deep.is_none()
            && self.provenance.as_ref().is_some_and(|p| {
                p.revision == self.revision
                    && p.keeps_everything()
                    && p.stored == self.counts()
                    && p.updated_at == self.updated_at
                    && *p.options == self.options
                    && *p.metadata == self.metadata
            })
    }

    /// Records that this snapshot is exactly what is stored at `revision` (a store calls
    /// this on what it loads).
    pub(crate) fn mark_stored(&mut self, revision: Revision) {
        self.revision = revision;
        self.provenance = Some(self.stored_as(revision, self.transcript.len()));
    }

    /// What a session whose first `kept` messages are this snapshot's (and every usage
    /// entry) knows once this snapshot is stored at `revision`: fewer are kept when the
    /// snapshot holds placeholder results the session will replace, which its next save
    /// records as part of the turn.
    pub(crate) fn stored_as(&self, revision: Revision, kept: usize) -> Provenance {
        let stored = self.counts();
        let mut pending = Pending::none(stored);
        if kept < stored.messages {
            pending.keep = (0, kept);
            pending.kind = Some(EntryKind::Turn);
        }
        Provenance {
            revision,
            stored,
            pending,
            updated_at: self.updated_at,
            options: Arc::new(self.options.clone()),
            metadata: Arc::new(self.metadata.clone()),
            redactor: self.redacted_by,
        }
    }

    /// The entry a save of this snapshot appends to the revision it derives from: what
    /// changed since, as one change (one revision), whatever was done in between (turns,
    /// a rewind, a compaction, a restore). `None` if the snapshot does not derive from a
    /// stored revision (built, or redacted differently from the stored copy), or if its
    /// metadata cannot be stored (every save of it fails).
    ///
    /// A custom [`SessionStore`](crate::SessionStore) that keeps a log appends it (its
    /// bytes: [`LogEntry::to_bytes`]) when its stored revision is still
    /// [`revision`](Self::revision) and its stored session was created at
    /// [`created_at`](Self::created_at); otherwise its save stores the whole snapshot or
    /// reports a conflict, as the contract says.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, EntryKind, Message, Revision, RewindTo, SessionId,
    ///     SessionSnapshot};
    ///
    /// let stored = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
    ///     .build()?
    ///     .stored_at(Revision::from_u64(1));
    /// assert!(stored.pending_entry().is_none(), "nothing changed");
    /// let mut rewound = stored.clone();
    /// rewound.rewind(RewindTo::LastTurns(1))?;
    /// let entry = rewound.pending_entry().expect("derives from revision 1");
    /// assert_eq!((entry.revision(), entry.kind()), (Revision::from_u64(2), EntryKind::Rewind));
    /// assert!(entry.messages().is_empty());
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn pending_entry(&self) -> Option<LogEntry> {
        let provenance = self.provenance.as_ref()?;
        if provenance.revision != self.revision || self.is_unchanged_since_stored() {
            return None;
        }
        self.entry_since_stored(provenance.revision.next())
    }

    /// The entry that takes the stored state this snapshot derives from to this snapshot,
    /// stored at `revision`: `None` without provenance, or if the snapshot no longer has
    /// what it claims to keep.
    pub(crate) fn entry_since_stored(&self, revision: Revision) -> Option<LogEntry> {
        // Left out metadata is no change: the whole encoding, which refuses it, decides.
        if self.metadata_too_deep.is_some() {
            return None;
        }
        let provenance = self.provenance.as_ref()?;
        let pending = provenance.pending;
        let kept = pending.kept_range();
        let base_len = pending
            .base
            .map_or(provenance.stored.messages, |(_, len)| len);
        if pending.keep.1 > base_len
            || kept.end > self.transcript.len()
            || pending.usage_kept > provenance.stored.usage
            || pending.usage_kept > self.usage.len()
        {
            return None;
        }
        let mut messages = Vec::with_capacity(self.transcript.len() - kept.len());
        messages.extend_from_slice(&self.transcript[..kept.start]);
        messages.extend_from_slice(&self.transcript[kept.end..]);
        // Records are in call order. Calls among the prepended messages (a summary) are
        // answered there, and a call answered after the kept range is at its end (the
        // step whose placeholder results a session replaces) or after it, so the body's
        // records are a leading run and a trailing run: found without walking the others.
        let records = &self.tool_calls[..];
        let leading = records
            .iter()
            .take_while(|r| r.result_at.message < kept.start)
            .count();
        let trailing = records[leading..]
            .iter()
            .rev()
            .take_while(|r| r.result_at.message >= kept.end)
            .count();
        let mut tool_calls = records[..leading].to_vec();
        tool_calls.extend_from_slice(&records[records.len() - trailing..]);
        let options_changed = *provenance.options != self.options;
        let metadata_changed = *provenance.metadata != self.metadata;
        let restored = pending.base.is_some();
        let kind = self.pending_kind(provenance, messages.len());
        Some(LogEntry {
            head: EntryHead {
                revision,
                updated_at: self.updated_at,
                kind,
                base: pending.base.map(|(r, _)| r),
                keep: (restored || pending.keep != (0, base_len)).then_some(pending.keep),
                prepend: pending.prepend,
                messages: messages.len(),
                usage_kept: (pending.usage_kept != provenance.stored.usage)
                    .then_some(pending.usage_kept),
                usage: self.usage[pending.usage_kept..].to_vec(),
                options: (restored || options_changed).then(|| self.options.clone()),
                metadata: (restored || metadata_changed).then(|| self.metadata.clone()),
                state: self.counts(),
            },
            body: EntryBody {
                messages,
                tool_calls,
            },
        })
    }

    /// The kind of the entry that takes `provenance`'s stored state to this snapshot, which
    /// adds `new_messages` messages: the strongest change declared, or else told from what
    /// changed.
    fn pending_kind(&self, provenance: &Provenance, new_messages: usize) -> EntryKind {
        let pending = provenance.pending;
        let base_len = pending
            .base
            .map_or(provenance.stored.messages, |(_, len)| len);
        let keeps_base = pending.keep == (0, base_len) && pending.prepend == 0;
        pending.kind.unwrap_or(if pending.base.is_some() {
            EntryKind::Restore
        } else if !keeps_base || pending.usage_kept < provenance.stored.usage {
            EntryKind::Edit
        } else if new_messages > 0 || self.usage.len() > pending.usage_kept {
            EntryKind::Turn
        } else if *provenance.options != self.options {
            EntryKind::Options
        } else {
            EntryKind::Metadata
        })
    }

    /// What the store's log holds once this snapshot is saved at `revision`: its history
    /// so far and one more entry, or (a snapshot that derives from no stored revision, so
    /// a new session or one written whole) a log that starts there.
    pub(crate) fn stats_once_saved(&self, revision: Revision) -> HistoryStats {
        if self.replaces_history {
            return HistoryStats {
                oldest_revision: revision,
                ..HistoryStats::default()
            };
        }
        match &self.provenance {
            Some(p) if p.revision.next() == revision => {
                let new = self.transcript.len() - p.pending.kept_len().min(self.transcript.len());
                self.history.after(self.pending_kind(p, new))
            }
            Some(_) => self.history,
            None if self.revision == Revision::NEW => HistoryStats {
                oldest_revision: revision,
                ..HistoryStats::default()
            },
            None => self.history.after(EntryKind::Edit),
        }
    }

    /// The entry that replaces everything of a stored session with this snapshot (saved
    /// over it without deriving from it), stored at `revision`: an edit that keeps no
    /// message and no usage entry of the stored state. History keeps what it replaced.
    ///
    /// # Errors
    ///
    /// [`Error::TooDeep`] if the snapshot's metadata was left out for nesting too deep.
    pub(crate) fn entry_replacing_all(&self, revision: Revision) -> Result<LogEntry> {
        self.check_metadata_kept()?;
        Ok(LogEntry {
            head: EntryHead {
                revision,
                updated_at: self.updated_at,
                kind: EntryKind::Edit,
                base: None,
                keep: Some((0, 0)),
                prepend: 0,
                messages: self.transcript.len(),
                usage_kept: Some(0),
                usage: self.usage.as_ref().clone(),
                options: Some(self.options.clone()),
                metadata: Some(self.metadata.clone()),
                state: self.counts(),
            },
            body: EntryBody {
                messages: self.transcript.as_ref().clone(),
                tool_calls: self.tool_calls.as_ref().clone(),
            },
        })
    }

    /// Applies an entry that starts from this state (any but a restore, which needs the
    /// log), in place: the state a store holds after appending it. The caller made the
    /// entry from a valid snapshot, so only its framing is checked.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the entry does not follow this revision, restores, or
    /// keeps more than there is; nothing is changed then.
    pub(crate) fn apply_entry(&mut self, entry: &LogEntry) -> Result<()> {
        let head = &entry.head;
        let len = self.transcript.len();
        let (start, end) = head.keep.unwrap_or((0, len));
        let usage_kept = head.usage_kept.unwrap_or(self.usage.len());
        if head.revision != self.revision.next()
            || head.base.is_some()
            || start > end
            || end > len
            || head.prepend > entry.body.messages.len()
            || usage_kept > self.usage.len()
        {
            return Err(Error::inconsistent(format!(
                "the log entry of revision {} cannot be applied in place to revision {}",
                head.revision, self.revision
            )));
        }
        let totals = if usage_kept == self.usage.len() {
            self.totals.checked_extend(&head.usage)
        } else {
            UsageTotals::checked_sum(&self.usage[..usage_kept])
                .and_then(|kept| kept.checked_extend(&head.usage))
        }
        .ok_or_else(|| Error::inconsistent("usage totals overflow a 64-bit counter"))?;
        self.totals = totals;
        let usage = Arc::make_mut(&mut self.usage);
        usage.truncate(usage_kept);
        usage.extend_from_slice(&head.usage);
        let (prepended, appended) = entry.body.messages.split_at(head.prepend);
        let transcript = Arc::make_mut(&mut self.transcript);
        let records = Arc::make_mut(&mut self.tool_calls);
        // The records of calls answered in the kept range (their calls are there too).
        records.retain(|r| r.call_at.message >= start && r.result_at.message < end);
        if start == 0 && prepended.is_empty() {
            transcript.truncate(end);
        } else {
            let shift = head.prepend.wrapping_sub(start);
            for record in records.iter_mut() {
                record.call_at.message = record.call_at.message.wrapping_add(shift);
                record.result_at.message = record.result_at.message.wrapping_add(shift);
            }
            let kept: Vec<Message> = transcript.drain(start..end).collect();
            transcript.clear();
            transcript.extend_from_slice(prepended);
            transcript.extend(kept);
        }
        transcript.extend_from_slice(appended);
        let leading = entry
            .body
            .tool_calls
            .iter()
            .take_while(|r| r.result_at.message < head.prepend)
            .count();
        records.splice(0..0, entry.body.tool_calls[..leading].iter().cloned());
        records.extend_from_slice(&entry.body.tool_calls[leading..]);
        if let Some(options) = &head.options {
            self.options = options.clone();
        }
        if let Some(metadata) = &head.metadata {
            self.metadata.clone_from(metadata);
        }
        self.updated_at = head.updated_at;
        self.revision = head.revision;
        self.history = self.history.after(head.kind);
        Ok(())
    }

    /// This snapshot with `messages` appended and `usage` added for the completions that
    /// produced them, at `updated_at`. Unlike building a new snapshot, it keeps what a
    /// store knows about this one, so saving the result writes only the new part, and it
    /// checks only the new messages (the ones already here are known to be consistent).
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if a new tool call has no result among the new messages, a
    /// new result answers no new call, `updated_at` is before the creation time, or usage
    /// totals would overflow; [`Error::TooDeep`] if a new message nests more than 125
    /// levels deep.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, Message, MemorySessionStore, SessionId, SessionSnapshot,
    ///     SessionStore, Usage};
    ///
    /// let store = MemorySessionStore::new();
    /// let first = SessionSnapshot::builder(SessionId::parse("s")?, "m")
    ///     .transcript(vec![Message::user("hi")])
    ///     .build()?;
    /// store.save(&first)?;
    /// let loaded = store.load(first.id())?;
    /// let next = loaded.with_appended(
    ///     vec![Message::assistant(vec![ContentBlock::text("hello")])],
    ///     vec![Usage::new("m").with_tokens(3, 1)],
    ///     chrono::Utc::now(),
    /// )?;
    /// assert_eq!(next.transcript().len(), 2);
    /// store.save(&next)?;
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn with_appended(
        mut self,
        mut messages: Vec<Message>,
        usage: Vec<Usage>,
        updated_at: DateTime<Utc>,
    ) -> Result<Self> {
        crate::transcript::seal(&mut messages);
        let offset = self.transcript.len();
        if let Err(e) = check_depths(&self.id, offset, &messages, None) {
            messages.into_iter().for_each(dismantle_message);
            return Err(e);
        }
        for (i, message) in messages.iter().enumerate() {
            check_role_alias(offset + i, message)?;
            check_block_roles(offset + i, message)?;
        }
        // Every call already here has its result, so new results can only answer new
        // calls: pairing the new messages alone checks them completely.
        let records: Vec<ToolCallRecord> = pair_tool_calls(&messages)
            .map_err(|e| match e {
                Error::Inconsistent { problem, .. } => Error::inconsistent(format!(
                    "in the appended messages (numbered from 0): {problem}"
                )),
                other => other,
            })?
            .into_iter()
            .map(|pair| ToolCallRecord {
                call_id: pair.call.id.clone(),
                tool_name: pair.call.name.clone(),
                call_at: shift(pair.call_at, offset),
                result_at: shift(pair.result_at, offset),
                status: if pair.result.is_error {
                    ToolCallStatus::Error
                } else {
                    ToolCallStatus::Ok
                },
            })
            .collect();
        if updated_at < self.created_at {
            return Err(Error::inconsistent(format!(
                "updated_at {updated_at} is before created_at {}",
                self.created_at
            )));
        }
        check_not_in_the_future(&self.id, "updated_at", updated_at, Utc::now())?;
        let Some(totals) = self.totals.checked_extend(&usage) else {
            return Err(Error::inconsistent(
                "usage totals overflow a 64-bit counter",
            ));
        };
        self.totals = totals;
        Arc::make_mut(&mut self.usage).extend(usage);
        Arc::make_mut(&mut self.transcript).extend(messages);
        Arc::make_mut(&mut self.tool_calls).extend(records);
        self.updated_at = updated_at;
        Ok(self)
    }
}

fn shift(at: BlockPosition, messages: usize) -> BlockPosition {
    BlockPosition {
        message: at.message + messages,
        block: at.block,
    }
}
