//! What a snapshot shares with a stored revision, so that a store writes only what changed:
//! the lengths a state has ([`Counts`]), what is known to be stored ([`Provenance`]), and
//! the change from one stored state to the next ([`Change`]) that a journal record holds.
//! A snapshot extended with [`SessionSnapshot::with_appended`] keeps what it shares.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::validate::{
    check_block_roles, check_depths, check_not_in_the_future, check_role_alias, pair_tool_calls,
};
use super::{BlockPosition, PersistedOptions, SessionSnapshot, ToolCallRecord, ToolCallStatus};
use crate::error::{Error, Result};
use crate::id::Revision;
use crate::transcript::{dismantle_message, Message};
use crate::usage::{Usage, UsageTotals};

/// How many transcript messages, tool-call records and usage entries a state has: the
/// lengths of a snapshot's three growing lists.
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

/// What a snapshot is known to share with a stored revision, so a store can write only
/// what changed.
///
/// Only this crate makes one: a store's `load`, and a [`Session`](crate::Session) after a
/// successful save. Everything that can change a snapshot's leading elements (building,
/// redaction that changes them) drops or narrows it, so the claim "the first `kept`
/// elements are the stored ones" stays true. A store still checks the revision, creation
/// time and stored counts before trusting it, and falls back to a full write otherwise.
#[derive(Clone)]
pub(crate) struct Provenance {
    /// The stored revision this snapshot derives from.
    pub(crate) revision: Revision,
    /// The lengths stored at that revision.
    pub(crate) stored: Counts,
    /// How many leading elements of this snapshot equal the stored ones (at most
    /// `stored`: a session replacing the placeholder results it saved before running its
    /// tools keeps fewer than are stored).
    pub(crate) kept: Counts,
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
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

/// A change from one stored state to the next: keep the first `from` elements, append the
/// rest, and replace options or metadata if given. A journal record holds one.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) revision: Revision,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) from: Counts,
    pub(crate) messages: Vec<Message>,
    pub(crate) tool_calls: Vec<ToolCallRecord>,
    pub(crate) usage: Vec<Usage>,
    pub(crate) options: Option<PersistedOptions>,
    pub(crate) metadata: Option<Map<String, Value>>,
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

    /// What this snapshot is known to share with a stored revision.
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
                    && p.kept == p.stored
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
        self.provenance = Some(self.stored_as(revision, self.counts()));
    }

    /// What a session whose first `kept` elements are this snapshot's knows once this
    /// snapshot is stored at `revision`.
    pub(crate) fn stored_as(&self, revision: Revision, kept: Counts) -> Provenance {
        Provenance {
            revision,
            stored: self.counts(),
            kept,
            updated_at: self.updated_at,
            options: Arc::new(self.options.clone()),
            metadata: Arc::new(self.metadata.clone()),
            redactor: self.redacted_by,
        }
    }

    /// The change from the stored state this snapshot derives from to this snapshot, to be
    /// stored at `revision`: `None` without provenance, or if the snapshot no longer has
    /// the elements it claims to keep.
    pub(crate) fn change_since_stored(&self, revision: Revision) -> Option<Change> {
        // Left out metadata is no change: the whole encoding, which refuses it, decides.
        if self.metadata_too_deep.is_some() {
            return None;
        }
        let provenance = self.provenance.as_ref()?;
        let kept = provenance.kept;
        if !kept.within(provenance.stored) || !kept.within(self.counts()) {
            return None;
        }
        Some(Change {
            revision,
            updated_at: self.updated_at,
            from: kept,
            messages: self.transcript[kept.messages..].to_vec(),
            tool_calls: self.tool_calls[kept.tool_calls..].to_vec(),
            usage: self.usage[kept.usage..].to_vec(),
            options: (*provenance.options != self.options).then(|| self.options.clone()),
            metadata: (*provenance.metadata != self.metadata).then(|| self.metadata.clone()),
        })
    }

    /// Applies a stored change: the caller validates the result once all are applied.
    ///
    /// # Errors
    ///
    /// [`Error::Inconsistent`] if the change keeps more elements than there are, or does
    /// not follow the current revision.
    pub(crate) fn apply_change(&mut self, change: Change) -> Result<()> {
        if change.revision != self.revision.next() || self.revision.as_u64() == u64::MAX {
            return Err(Error::inconsistent(format!(
                "a journal record stores revision {} after revision {}; records must count up by one",
                change.revision, self.revision
            )));
        }
        if !change.from.within(self.counts()) {
            return Err(Error::inconsistent(format!(
                "a journal record for revision {} keeps {:?} of a state that has {:?}",
                change.revision,
                change.from,
                self.counts()
            )));
        }
        // The totals first, so an overflow changes nothing: extended from the current ones
        // when the change keeps every usage entry (a turn), summed again otherwise.
        let totals = if change.from.usage == self.usage.len() {
            self.totals.checked_extend(&change.usage)
        } else {
            UsageTotals::checked_sum(&self.usage[..change.from.usage])
                .and_then(|kept| kept.checked_extend(&change.usage))
        }
        .ok_or_else(|| Error::inconsistent("usage totals overflow a 64-bit counter"))?;
        self.totals = totals;
        let transcript = Arc::make_mut(&mut self.transcript);
        transcript.truncate(change.from.messages);
        transcript.extend(change.messages);
        let tool_calls = Arc::make_mut(&mut self.tool_calls);
        tool_calls.truncate(change.from.tool_calls);
        tool_calls.extend(change.tool_calls);
        let usage = Arc::make_mut(&mut self.usage);
        usage.truncate(change.from.usage);
        usage.extend(change.usage);
        if let Some(options) = change.options {
            self.options = options;
        }
        if let Some(metadata) = change.metadata {
            self.metadata = metadata;
        }
        self.updated_at = change.updated_at;
        self.revision = change.revision;
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
