//! `MemorySessionStore`: an in-process store for tests and ephemeral sessions.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::{check_revision, Revision, SessionList, SessionStore, SessionSummary};
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
    sessions: Mutex<HashMap<SessionId, SessionSnapshot>>,
}

impl MemorySessionStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        MemorySessionStore::default()
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<SessionId, SessionSnapshot>> {
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
        let stored = sessions.get(snapshot.id()).map(SessionSnapshot::revision);
        check_revision(snapshot.id(), snapshot.revision(), stored)?;
        let revision = snapshot.revision().next();
        // Refuse what the file store would refuse (a snapshot too deep to read back), so
        // tests against this store do not pass where the file store fails.
        snapshot.to_json_with_revision(revision)?;
        sessions.insert(
            snapshot.id().clone(),
            snapshot.clone().with_revision(revision),
        );
        Ok(revision)
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        let mut snapshot = self
            .sessions()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        let revision = snapshot.revision();
        snapshot.mark_stored(revision);
        Ok(snapshot)
    }

    fn list(&self) -> Result<SessionList> {
        let summaries = self.sessions().values().map(SessionSummary::of).collect();
        Ok(SessionList::new(summaries, Vec::new()))
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        self.sessions()
            .remove(id)
            .map(drop)
            .ok_or_else(|| Error::NotFound { id: id.clone() })
    }
}
