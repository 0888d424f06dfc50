//! [`SessionStore::restore`](crate::SessionStore::restore) without reading the session: a
//! restore entry names the revision it goes back to and that revision's lengths, which
//! the store keeps for each session it restored (the *revision index*), so a restore
//! appends a few dozen bytes however long the history. The first restore of a session in
//! a process reads its log once to build the index; appends keep it up to date.

use std::collections::HashMap;
use std::sync::MutexGuard;

use super::write::After;
use super::FileSessionStore;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::{Counts, EntryKind, LogEntry};

/// The lengths of a session's state at every revision its log keeps, oldest first:
/// `counts[i]` is revision `oldest + i`'s. Valid for the stored state it ends at (the same
/// base, creation time and last revision).
#[derive(Debug)]
pub(super) struct RevisionIndex {
    created_at: chrono::DateTime<chrono::Utc>,
    base_revision: Revision,
    oldest: Revision,
    counts: Vec<Counts>,
}

impl RevisionIndex {
    /// The index of a log that starts at `oldest` with the given lengths, one a revision.
    pub(super) fn new(
        created_at: chrono::DateTime<chrono::Utc>,
        base_revision: Revision,
        oldest: Revision,
        counts: Vec<Counts>,
    ) -> Self {
        RevisionIndex {
            created_at,
            base_revision,
            oldest,
            counts,
        }
    }

    /// The last revision indexed.
    fn newest(&self) -> Revision {
        Revision::from_u64(self.oldest.as_u64() + self.counts.len() as u64 - 1)
    }

    fn at(&self, revision: Revision) -> Option<Counts> {
        let offset = revision.as_u64().checked_sub(self.oldest.as_u64())?;
        self.counts.get(usize::try_from(offset).ok()?).copied()
    }
}

/// How many sessions' indexes are kept at most (the store forgets them all past that, as
/// it does its other per-session knowledge).
const INDEXED_SESSIONS: usize = 1024;

impl FileSessionStore {
    fn indexes(&self) -> MutexGuard<'_, HashMap<SessionId, RevisionIndex>> {
        self.revision_index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that an append took the stored state of `id` from revision `from` to
    /// `revision`, with `counts`: the index grows by one if it ended at `from`, and is
    /// dropped otherwise (the next restore builds it again).
    pub(super) fn extend_index(
        &self,
        id: &SessionId,
        from: Revision,
        revision: Revision,
        counts: Counts,
    ) {
        let mut indexes = self.indexes();
        if let Some(index) = indexes.get_mut(id) {
            if index.newest() == from && from.next() == revision {
                index.counts.push(counts);
            } else {
                indexes.remove(id);
            }
        }
    }

    /// [`SessionStore::restore`](crate::SessionStore::restore) as one appended entry, when
    /// this store knows the stored state (read and verified, or written by it) and it is
    /// in the current format; `Ok(None)` otherwise, for the caller to restore by loading
    /// and saving instead. Under the write lock.
    pub(super) fn restore_by_appending(
        &self,
        id: &SessionId,
        revision: Revision,
    ) -> Result<Option<Revision>> {
        let stored = self
            .stored_state(id, true)?
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        let (Some(current), Some(updated_at), Some(stats)) =
            (stored.counts, stored.updated_at, stored.stats)
        else {
            return Ok(None);
        };
        if !stored.verified || stored.journal_version == Some(1) {
            return Ok(None);
        }
        let usable = |index: &RevisionIndex| {
            index.created_at == stored.created_at
                && index.base_revision == stored.base_revision
                && index.newest() == stored.revision
        };
        if !self.indexes().get(id).is_some_and(usable) {
            let index = self.with_log(id, true, |log| Ok(log.revision_index()))?;
            let index =
                RevisionIndex::new(stored.created_at, stored.base_revision, index.0, index.1);
            if !usable(&index) {
                // The log moved under the lock: only another program writing the store
                // without it can do that.
                return Ok(None);
            }
            let mut indexes = self.indexes();
            if indexes.len() >= INDEXED_SESSIONS && !indexes.contains_key(id) {
                indexes.clear();
            }
            indexes.insert(id.clone(), index);
        }
        let (restored, oldest) = {
            let indexes = self.indexes();
            let index = indexes.get(id).filter(|index| usable(index));
            match index {
                Some(index) => (index.at(revision), index.oldest),
                None => return Ok(None),
            }
        };
        let Some(restored) = restored else {
            return Err(Error::RevisionNotFound {
                id: id.clone(),
                revision,
                oldest,
                newest: stored.revision,
            });
        };
        let entry = LogEntry::restoring(
            (stored.revision, updated_at, stored.created_at),
            current,
            revision,
            restored,
        );
        let bytes = entry.to_bytes(id)?;
        let after = After {
            id,
            updated_at: entry.head.updated_at,
            counts: entry.head.state,
            snapshot: None,
            kind: EntryKind::Restore,
        };
        self.append(&after, &stored, &bytes, stats.after(EntryKind::Restore))
            .map(Some)
    }
}
