//! `MemorySessionStore`: an in-process store for tests and ephemeral sessions.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::{
    check_revision, check_unchanged, ListScope, Revision, SessionList, SessionStore,
    SessionSummary, StoredVersion,
};
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::snapshot::{encode_record_payload, Change, SessionSnapshot};

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
}

/// One stored session.
#[derive(Debug)]
struct Stored {
    snapshot: SessionSnapshot,
    /// The length of its JSON form ([`SessionStore::stored_bytes`]), once measured.
    bytes: Option<u64>,
    archived: bool,
}

/// The change to append for `snapshot`, saved at `revision` over `stored`: `Some` if the
/// snapshot knows it derives from exactly the stored state (the same revision, creation
/// and update times and lengths), so that applying the change to `stored` gives it.
fn appendable(
    snapshot: &SessionSnapshot,
    stored: &SessionSnapshot,
    revision: Revision,
) -> Option<Change> {
    snapshot
        .derives_from(
            stored.revision(),
            stored.created_at(),
            stored.updated_at(),
            stored.counts(),
        )
        .then(|| snapshot.change_since_stored(revision))
        .flatten()
}

impl MemorySessionStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        MemorySessionStore::default()
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<SessionId, Stored>> {
        // A panic while holding the lock cannot leave the map half-updated (every change is
        // one insert or remove), so a poisoned lock is safe to keep using.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl SessionStore for MemorySessionStore {
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        let mut sessions = self.sessions();
        let stored = sessions.get(snapshot.id());
        check_revision(
            snapshot.id(),
            snapshot.revision(),
            stored.map(|s| s.snapshot.revision()),
        )?;
        // Exactly what is stored (loaded, or saved and not changed since): nothing to do.
        if let Some(stored) = stored.filter(|s| {
            snapshot.is_unchanged_since_stored()
                && s.snapshot.created_at() == snapshot.created_at()
                && s.snapshot.updated_at() == snapshot.updated_at()
                && s.snapshot.counts() == snapshot.counts()
                && s.snapshot.options() == snapshot.options()
                && s.snapshot.metadata() == snapshot.metadata()
        }) {
            return Ok(stored.snapshot.revision());
        }
        let archived = stored.is_some_and(|s| s.archived);
        let revision = snapshot.revision().next();
        // A snapshot that derives from exactly the stored state appends what changed, as
        // the file store's journal does: the cost is the turn's, not the session's.
        if let Some(stored) = sessions.get_mut(snapshot.id()) {
            if let Some(change) = appendable(snapshot, &stored.snapshot, revision) {
                // Refuse what the file store would refuse (a record too deep to read back).
                encode_record_payload(snapshot.id(), &change)?;
                stored.snapshot.apply_change(change)?;
                stored.bytes = None;
                return Ok(revision);
            }
        }
        // Refuse what the file store would refuse (a snapshot too deep to read back), so
        // tests against this store do not pass where the file store fails.
        let bytes = snapshot.to_json_with_revision(revision)?.len() as u64;
        sessions.insert(
            snapshot.id().clone(),
            Stored {
                // A copy of its own, so the session that saved it extends its transcript
                // without copying it (a shared one would be copied at its next message).
                snapshot: snapshot.unshared().with_revision(revision),
                bytes: Some(bytes),
                archived,
            },
        );
        Ok(revision)
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        let mut snapshot = self
            .sessions()
            .get(id)
            .map(|s| s.snapshot.clone())
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        let revision = snapshot.revision();
        snapshot.mark_stored(revision);
        Ok(snapshot)
    }

    fn list(&self) -> Result<SessionList> {
        self.list_scoped(ListScope::Active)
    }

    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        let summaries = self
            .sessions()
            .values()
            .filter(|s| scope.includes(s.archived))
            .map(|s| {
                let mut summary = SessionSummary::of(&s.snapshot);
                summary.archived = s.archived;
                summary
            })
            .collect();
        Ok(SessionList::new(summaries, Vec::new()))
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        self.sessions()
            .remove(id)
            .map(drop)
            .ok_or_else(|| Error::NotFound { id: id.clone() })
    }

    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        let mut sessions = self.sessions();
        let stored = sessions
            .get_mut(id)
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        // Measured when asked (a prune with a size limit), not at every append.
        let bytes = match stored.bytes {
            Some(bytes) => bytes,
            None => stored.snapshot.to_json()?.len() as u64,
        };
        stored.bytes = Some(bytes);
        Ok(Some(bytes))
    }

    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        let mut sessions = self.sessions();
        let stored = sessions
            .get_mut(id)
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        stored.archived = archived;
        Ok(())
    }

    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        let mut sessions = self.sessions();
        let stored = sessions.get(&listed.id).map(|s| StoredVersion {
            revision: s.snapshot.revision(),
            created_at: s.snapshot.created_at(),
            archived: s.archived,
        });
        check_unchanged(listed, stored)?;
        sessions.remove(&listed.id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{ContentBlock, Message};
    use crate::usage::Usage;
    use crate::RewindTo;

    /// Appends, rewinds and whole rewrites, each saved over the last: the appends and
    /// rewinds are appended, what a load gives back is exactly what was saved, totals
    /// included, and the size measured when asked is the JSON's.
    #[test]
    fn appended_saves_load_back_exactly_and_measure_their_json() {
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
            // An append leaves the size unmeasured; a whole write measures it.
            let measured = store.sessions()[&id].bytes.is_some();
            assert_eq!(
                measured,
                step % 5 == 4,
                "step {step}: appended or written whole"
            );
            current = current.with_revision(revision);
            let loaded = store.load(&id).expect("load");
            assert_eq!(loaded, current, "step {step}");
            assert_eq!(loaded.totals(), current.totals(), "step {step}");
            let bytes = store.stored_bytes(&id).expect("size").expect("known");
            assert_eq!(bytes, current.to_json().expect("encode").len() as u64);
            current = loaded;
        }
    }
}
