//! `MemorySessionStore`: an in-process store for tests and ephemeral sessions.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::{
    check_revision, check_unchanged, ListScope, Revision, SessionList, SessionStore,
    SessionSummary, StoredVersion,
};
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::snapshot::SessionSnapshot;

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
    /// The length of its JSON form, the size a listing reports.
    bytes: u64,
    archived: bool,
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
        // Refuse what the file store would refuse (a snapshot too deep to read back), so
        // tests against this store do not pass where the file store fails.
        let bytes = snapshot.to_json_with_revision(revision)?.len() as u64;
        sessions.insert(
            snapshot.id().clone(),
            Stored {
                snapshot: snapshot.clone().with_revision(revision),
                bytes,
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
        self.sessions()
            .get(id)
            .map(|s| Some(s.bytes))
            .ok_or_else(|| Error::NotFound { id: id.clone() })
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
