//! `MemorySessionStore`: an in-process store for tests and ephemeral sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::lease_rules::{self, LeaseRecord};
use super::{
    check_revision, check_unchanged, AsyncSessionStore, IndexedMetadata, InlineStore, ListCursor,
    ListFilter, ListScope, Revision, SearchPage, SearchQuery, SessionList, SessionStore,
    SessionSummary, StoredVersion,
};
use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::lease::{Lease, LeaseRequest};
use crate::snapshot::{
    Counts, History, HistoryStats, LogEntry, LogSource, RevisionInfo, SessionSnapshot,
};
use crate::telemetry;

/// A [`SessionStore`] that keeps snapshots in memory, with the same compare-and-swap
/// semantics as the file store. Nothing survives the process.
///
/// # Examples
///
/// ```
/// use agent_session::{MemorySessionStore, SessionId, SessionSnapshot, SessionStore};
///
/// let store = MemorySessionStore::new();
/// let snapshot = SessionSnapshot::builder(SessionId::parse("a")?, "m").build()?;
/// store.save(&snapshot)?;
/// assert_eq!(store.list()?.sessions.len(), 1);
/// store.delete(snapshot.id())?;
/// assert!(store.load(snapshot.id()).unwrap_err().is_not_found());
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct MemorySessionStore {
    sessions: Mutex<HashMap<SessionId, Stored>>,
    /// Each session's last lease, kept after release and deletion so epochs only grow;
    /// locked after `sessions` when both are.
    leases: Mutex<HashMap<SessionId, LeaseRecord>>,
    /// The metadata keys listings carry.
    indexed: IndexedMetadata,
}

/// One stored session: its log (the checkpoint it was first saved as, or last written
/// whole as, and the entries saved since), and its head state.
#[derive(Debug)]
struct Stored {
    checkpoint: SessionSnapshot,
    entries: Vec<LogEntry>,
    /// The head state, kept up to date by applying each entry in place; `None` after a
    /// restore, until the next load works it out from the log.
    head: Option<SessionSnapshot>,
    /// The head's revision, creation time and lengths (known even when `head` is not).
    revision: Revision,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    counts: Counts,
    /// The length of the log's JSON form ([`SessionStore::stored_bytes`]), once measured.
    bytes: Option<u64>,
    /// The lengths of the state at every revision kept, oldest first (the oldest's
    /// revision, then one entry a revision), so a restore appends its entry without
    /// reading the log; worked out from the log when it is not known (after a trim).
    index: Option<(Revision, Vec<Counts>)>,
    archived: bool,
}

/// The session's lease record in `leases`, if it has one, and whether it is live now.
fn current_lease<'a>(
    leases: &'a HashMap<SessionId, LeaseRecord>,
    id: &SessionId,
) -> (Option<&'a LeaseRecord>, bool) {
    let record = leases.get(id);
    (record, record.is_some_and(|r| r.is_live_at(Utc::now())))
}

impl Stored {
    fn new(snapshot: &SessionSnapshot, revision: Revision, archived: bool) -> Self {
        // Copies of their own, so the session that saved it extends its transcript without
        // copying it (a shared one would be copied at its next message).
        let mut checkpoint = snapshot.unshared();
        checkpoint.mark_stored(revision);
        checkpoint.set_history_stats(HistoryStats {
            oldest_revision: revision,
            ..HistoryStats::default()
        });
        let head = checkpoint.unshared();
        Stored {
            revision,
            created_at: head.created_at(),
            updated_at: head.updated_at(),
            counts: head.counts(),
            checkpoint,
            entries: Vec::new(),
            index: Some((revision, vec![head.counts()])),
            head: Some(head),
            bytes: None,
            archived,
        }
    }

    /// Whether the last change stored is the save of `snapshot` (made at the revision
    /// before it): the same entry, or the same checkpoint for a save written whole.
    fn holds_save_of(&self, snapshot: &SessionSnapshot) -> Result<bool> {
        // A competing change differs in its time or lengths: no encoding needed then.
        if self.revision != snapshot.revision().next()
            || self.created_at != snapshot.created_at()
            || self.updated_at != snapshot.updated_at()
            || self.counts != snapshot.counts()
        {
            return Ok(false);
        }
        match self.entries.last() {
            Some(entry) if entry.revision() == self.revision => {
                snapshot.is_stored_as_entry(&entry.to_bytes(snapshot.id())?)
            }
            Some(_) => Ok(false),
            None => snapshot.is_stored_as_checkpoint(&self.checkpoint.to_json()?),
        }
    }

    fn log(&self) -> LogSource<'static> {
        let mut log = LogSource::new(self.checkpoint.unshared());
        for entry in &self.entries {
            log.push(entry.clone());
        }
        log
    }

    /// The head state, worked out from the log if it is not kept.
    fn head(&mut self) -> Result<&SessionSnapshot> {
        if self.head.is_none() {
            let mut head = self.log().state_at(None)?;
            head.mark_stored(self.revision);
            self.head = Some(head);
        }
        self.head
            .as_ref()
            .ok_or_else(|| Error::inconsistent("the memory store lost a session's head"))
    }

    /// Appends `entry`, which takes the head to `snapshot` (already checked).
    fn append(&mut self, entry: LogEntry, snapshot: &SessionSnapshot) {
        let applied = match (entry.head.base, self.head.as_mut()) {
            (None, Some(head)) => head.apply_entry(&entry).is_ok(),
            _ => false,
        };
        if !applied {
            self.head = None;
        }
        self.revision = entry.revision();
        self.updated_at = snapshot.updated_at();
        self.counts = snapshot.counts();
        self.bytes = None;
        if let Some((_, counts)) = &mut self.index {
            counts.push(self.counts);
        }
        self.entries.push(entry);
    }

    /// [`SessionStore::restore`] of this session to `to`: one appended entry naming the
    /// revision and its lengths, as the file store writes it; the head is worked out at the
    /// next load.
    fn restore(&mut self, id: &SessionId, to: Revision) -> Result<Revision> {
        let (oldest, counts) = match &self.index {
            Some(index) => index,
            None => self.index.insert(self.log().revision_index()),
        };
        let restored = to
            .as_u64()
            .checked_sub(oldest.as_u64())
            .and_then(|offset| usize::try_from(offset).ok())
            .and_then(|offset| counts.get(offset).copied())
            .ok_or_else(|| Error::RevisionNotFound {
                id: id.clone(),
                revision: to,
                oldest: *oldest,
                newest: self.revision,
            })?;
        let entry = LogEntry::restoring(
            (self.revision, self.updated_at, self.created_at),
            self.counts,
            to,
            restored,
        );
        self.head = None;
        self.revision = entry.head.revision;
        self.updated_at = entry.head.updated_at;
        self.counts = entry.head.state;
        self.bytes = None;
        if let Some((_, kept)) = &mut self.index {
            kept.push(self.counts);
        }
        self.entries.push(entry);
        Ok(self.revision)
    }
}

impl MemorySessionStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        MemorySessionStore::default()
    }

    /// The store, with summaries that carry the values of the metadata keys `keys`, for
    /// [`list_filtered`](SessionStore::list_filtered).
    #[must_use]
    pub fn with_indexed_metadata(keys: IndexedMetadata) -> Self {
        MemorySessionStore {
            indexed: keys,
            ..MemorySessionStore::default()
        }
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<SessionId, Stored>> {
        // A panic while holding the lock cannot leave the map half-updated (every change is
        // one insert or remove), so a poisoned lock is safe to keep using.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn leases_held(&self) -> MutexGuard<'_, HashMap<SessionId, LeaseRecord>> {
        // Every change is one insert: a poisoned lock is safe to keep using.
        self.leases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with_stored<T>(
        &self,
        id: &SessionId,
        f: impl FnOnce(&mut Stored) -> Result<T>,
    ) -> Result<T> {
        let mut sessions = self.sessions();
        let stored = sessions
            .get_mut(id)
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        f(stored)
    }
}

impl SessionStore for MemorySessionStore {
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        telemetry::store_op("save", "memory", Some(snapshot.id())).run(|| {
            let mut sessions = self.sessions();
            let stored = sessions.get_mut(snapshot.id());
            // Before the revision: a writer whose lease was taken over is told so, whatever
            // its revision.
            let leases = self.leases_held();
            let (lease, live) = current_lease(&leases, snapshot.id());
            lease_rules::check_save(snapshot, lease, live)?;
            drop(leases);
            if let Err(conflict) = check_revision(
                snapshot.id(),
                snapshot.revision(),
                stored.as_ref().map(|s| s.revision),
            ) {
                // A save retried after its acknowledgement was lost gets its revision back.
                return match stored {
                    Some(stored) if stored.holds_save_of(snapshot)? => Ok(stored.revision),
                    _ => Err(conflict),
                };
            }
            let revision = snapshot.revision().next();
            let Some(stored) = stored else {
                // Refuse what the file store would refuse (a snapshot too deep to read back), so
                // tests against this store do not pass where the file store fails.
                let bytes = snapshot.to_json_with_revision(revision)?.len() as u64;
                telemetry::wrote(bytes);
                let mut stored = Stored::new(snapshot, revision, false);
                stored.bytes = Some(bytes);
                sessions.insert(snapshot.id().clone(), stored);
                return Ok(revision);
            };
            let derives = snapshot.derives_from(
                stored.revision,
                stored.created_at,
                stored.updated_at,
                stored.counts,
            );
            // Exactly what is stored (loaded, or saved and not changed since): nothing to do.
            if derives && snapshot.is_unchanged_since_stored() {
                return Ok(stored.revision);
            }
            if stored.created_at != snapshot.created_at() || snapshot.replaces_history() {
                // Another session under the same id (deleted and created again): replaced whole,
                // as the file store's journal ignores an older session's records.
                let bytes = snapshot.to_json_with_revision(revision)?.len() as u64;
                telemetry::wrote(bytes);
                let archived = stored.archived;
                *stored = Stored::new(snapshot, revision, archived);
                stored.bytes = Some(bytes);
                return Ok(revision);
            }
            // Every other save appends one entry, as the file store's journal does: the cost is
            // the change's, and history keeps what a rewind, a compaction or a whole save
            // replaced.
            let entry = match snapshot.entry_since_stored(revision).filter(|_| derives) {
                Some(entry) => entry,
                None => snapshot.entry_replacing_all(revision)?,
            };
            // Refuse what the file store would refuse (an entry too deep to read back).
            telemetry::wrote(entry.to_bytes(snapshot.id())?.len() as u64);
            stored.append(entry, snapshot);
            Ok(revision)
        })
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        telemetry::store_op("load", "memory", Some(id)).run(|| {
            self.with_stored(id, |stored| {
                let mut snapshot = stored.head()?.clone();
                let revision = snapshot.revision();
                snapshot.mark_stored(revision);
                Ok(snapshot)
            })
        })
    }

    fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        telemetry::store_op("load_at", "memory", Some(id)).run(|| {
            let log = self.with_stored(id, |stored| Ok(stored.log()))?;
            log.state_at(Some(revision))
        })
    }

    fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        telemetry::store_op("revisions", "memory", Some(id)).run(|| {
            let log = self.with_stored(id, |stored| Ok(stored.log()))?;
            log.revisions()
        })
    }

    fn history(&self, id: &SessionId) -> Result<History> {
        telemetry::store_op("history", "memory", Some(id)).run(|| {
            let log = self.with_stored(id, |stored| Ok(stored.log()))?;
            log.history().map(|(history, _)| history)
        })
    }

    fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        telemetry::store_op("trim_history", "memory", Some(id)).run(|| {
            self.with_stored(id, |stored| {
                let trimmed = stored.log().trimmed(oldest)?;
                let mut checkpoint = trimmed.checkpoint;
                checkpoint.mark_stored(oldest);
                stored.checkpoint = checkpoint;
                stored.entries = trimmed.entries;
                // Worked out again at the next load, with the history it now keeps.
                stored.head = None;
                stored.bytes = None;
                stored.index = None;
                Ok(trimmed.dropped)
            })
        })
    }

    /// Refused while a lease is live: a holder restores through its session.
    fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        telemetry::store_op("restore", "memory", Some(id)).run(|| {
            self.with_stored(id, |stored| {
                let leases = self.leases_held();
                let (lease, live) = current_lease(&leases, id);
                lease_rules::check_unleased_write(lease, live)?;
                drop(leases);
                stored.restore(id, revision)
            })
        })
    }

    /// Its calls never wait for I/O (only for the store's lock, held for the call), so
    /// async code runs them on its own task, without a blocking pool.
    fn into_async(self: Arc<Self>) -> Arc<dyn AsyncSessionStore> {
        Arc::new(InlineStore(self))
    }

    fn list(&self) -> Result<SessionList> {
        // Its span holds the span of the `list_scoped` it runs.
        telemetry::store_op("list", "memory", None).run(|| self.list_scoped(ListScope::Active))
    }

    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        telemetry::store_op("list_scoped", "memory", None).run(|| {
            let summaries = self
                .sessions()
                .values_mut()
                .filter(|s| scope.includes(s.archived))
                .map(|s| {
                    let mut summary = self.indexed.summary_of(s.head()?);
                    summary.archived = s.archived;
                    Ok(summary)
                })
                .collect::<Result<_>>()?;
            Ok(SessionList::new(summaries, Vec::new()))
        })
    }

    fn indexed_metadata(&self) -> IndexedMetadata {
        self.indexed.clone()
    }

    /// A scan (see [`SessionStore::search`]) of the sessions' histories.
    fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        telemetry::store_op("search", "memory", None)
            .run(|| super::search::scan(self, query, filter, limit, after))
    }

    /// Leases live until released or expired (this store lives in one process, so its
    /// holders' processes are never gone while it is there). A session's lease outlives
    /// its deletion, so epochs only grow under an id.
    fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        telemetry::store_op("acquire_lease", "memory", Some(id)).run(|| {
            let sessions = self.sessions();
            if !sessions.contains_key(id) {
                return Err(Error::NotFound { id: id.clone() });
            }
            let mut leases = self.leases_held();
            let (record, live) = current_lease(&leases, id);
            let record = lease_rules::acquire(id, request, record, live, Utc::now())?;
            let lease = record.lease.clone();
            leases.insert(id.clone(), record);
            Ok(lease)
        })
    }

    fn renew_lease(&self, lease: &Lease, ttl: std::time::Duration) -> Result<Lease> {
        telemetry::store_op("renew_lease", "memory", Some(&lease.session)).run(|| {
            let mut leases = self.leases_held();
            let record = lease_rules::renew(lease, leases.get(&lease.session), ttl, Utc::now())?;
            let renewed = record.lease.clone();
            leases.insert(lease.session.clone(), record);
            Ok(renewed)
        })
    }

    fn release_lease(&self, lease: &Lease) -> Result<()> {
        telemetry::store_op("release_lease", "memory", Some(&lease.session)).run(|| {
            let mut leases = self.leases_held();
            if let Some(released) = lease_rules::release(lease, leases.get(&lease.session)) {
                leases.insert(lease.session.clone(), released);
            }
            Ok(())
        })
    }

    fn leases(&self) -> Result<Vec<Lease>> {
        telemetry::store_op("leases", "memory", None).run(|| {
            let now = Utc::now();
            let sessions = self.sessions();
            let mut leases: Vec<Lease> = self
                .leases_held()
                .values()
                .filter(|r| r.is_live_at(now) && sessions.contains_key(&r.lease.session))
                .map(|r| r.lease.clone())
                .collect();
            leases.sort_by(|a, b| a.session.cmp(&b.session));
            Ok(leases)
        })
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        telemetry::store_op("delete", "memory", Some(id)).run(|| {
            self.sessions()
                .remove(id)
                .map(drop)
                .ok_or_else(|| Error::NotFound { id: id.clone() })
        })
    }

    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        telemetry::store_op("stored_bytes", "memory", Some(id)).run(|| {
            self.with_stored(id, |stored| {
                // Measured when asked (a prune with a size limit), not at every append: the
                // checkpoint's JSON and every entry's stored form, as the file store keeps them.
                let bytes = if let Some(bytes) = stored.bytes {
                    bytes
                } else {
                    let mut bytes = stored.checkpoint.to_json()?.len() as u64;
                    for entry in &stored.entries {
                        bytes += entry.to_bytes(id)?.len() as u64;
                    }
                    bytes
                };
                stored.bytes = Some(bytes);
                Ok(Some(bytes))
            })
        })
    }

    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        telemetry::store_op("set_archived", "memory", Some(id)).run(|| {
            self.with_stored(id, |stored| {
                stored.archived = archived;
                Ok(())
            })
        })
    }

    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        telemetry::store_op("delete_if_unchanged", "memory", Some(&listed.id)).run(|| {
            let mut sessions = self.sessions();
            let stored = sessions.get(&listed.id).map(|s| StoredVersion {
                revision: s.revision,
                created_at: s.created_at,
                archived: s.archived,
            });
            check_unchanged(listed, stored)?;
            sessions.remove(&listed.id);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{ContentBlock, Message};
    use crate::usage::Usage;
    use crate::RewindTo;

    /// Appends, rewinds and snapshots built anew, each saved over the last: every save
    /// after the first appends one entry (the head applied in place but for restores),
    /// what a load gives back is exactly what was saved, totals included, and the size
    /// measured when asked is that of the checkpoint and the entries as stored.
    #[test]
    fn every_save_appends_an_entry_and_loads_back_exactly() {
        let store = MemorySessionStore::new();
        let id = SessionId::parse("appends").expect("id");
        let first = SessionSnapshot::builder(id.clone(), "m")
            .build()
            .expect("build");
        store.save(&first).expect("create");
        let mut current = store.load(&id).expect("load");
        for step in 0..40_u64 {
            let later = current.updated_at() + chrono::TimeDelta::seconds(1);
            current = match step % 5 {
                3 => {
                    let mut rewound = current;
                    rewound.rewind(RewindTo::LastTurns(1)).expect("rewind");
                    rewound
                }
                // Built anew: written whole, between the appends.
                4 => SessionSnapshot::builder(id.clone(), "m")
                    .metadata_entry("step", step.into())
                    .transcript(current.transcript().to_vec())
                    .usage(current.usage().to_vec())
                    .timestamps(current.created_at(), later)
                    .build()
                    .expect("rebuild")
                    .with_revision(current.revision()),
                _ => current
                    .with_appended(
                        vec![
                            Message::user(format!("q{step}")),
                            Message::assistant(vec![ContentBlock::text(format!("a{step}"))]),
                        ],
                        vec![Usage::new("m").with_tokens(step, 1)],
                        later,
                    )
                    .expect("extend"),
            };
            let revision = store.save(&current).expect("save");
            {
                let sessions = store.sessions();
                let stored = &sessions[&id];
                assert_eq!(stored.entries.len(), usize::try_from(step + 1).unwrap());
                assert!(stored.head.is_some(), "step {step}: applied in place");
            }
            current = current.with_revision(revision);
            let loaded = store.load(&id).expect("load");
            assert_eq!(loaded, current, "step {step}");
            assert_eq!(loaded.totals(), current.totals(), "step {step}");
            let bytes = store.stored_bytes(&id).expect("size").expect("known");
            let sessions = store.sessions();
            let stored = &sessions[&id];
            let expected = stored.checkpoint.to_json().expect("encode").len()
                + stored
                    .entries
                    .iter()
                    .map(|e| e.to_bytes(&id).expect("encode").len())
                    .sum::<usize>();
            assert_eq!(bytes, expected as u64);
            drop(sessions);
            current = loaded;
        }
        assert_eq!(store.revisions(&id).expect("revisions").len(), 41);
    }
}
