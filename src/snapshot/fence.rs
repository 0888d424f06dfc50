//! The lease a snapshot is saved under (see [`Lease`](crate::Lease)).

use super::SessionSnapshot;
use crate::error::{Error, Result};
use crate::lease::Lease;

impl SessionSnapshot {
    /// Marks the snapshot as saved under `lease`: a store that leases refuses to save it
    /// with [`Error::Fenced`] once the session's lease epoch is no longer `lease`'s
    /// (another writer took the session over, or the lease was released), and with
    /// [`Error::InvalidArgument`] if `lease` is another session's. Not part of the
    /// snapshot's value (equality ignores it) and never stored.
    ///
    /// [`Session`](crate::Session)s resumed with
    /// [`Harness::resume_session_leased`](crate::Harness::resume_session_leased) mark
    /// every snapshot they take.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{
    ///     Error, ErrorKind, LeaseHolder, LeaseRequest, MemorySessionStore, SessionId,
    ///     SessionSnapshot, SessionStore,
    /// };
    ///
    /// let store = MemorySessionStore::new();
    /// let id = SessionId::parse("s")?;
    /// store.save(&SessionSnapshot::builder(id.clone(), "m").build()?)?;
    /// let old = store.acquire_lease(&id, &LeaseRequest::new(LeaseHolder::this_process("old")))?;
    /// let loaded = store.load(&id)?;
    ///
    /// // Another writer takes the session over; the old holder's save is fenced off.
    /// let new = LeaseRequest::new(LeaseHolder::this_process("new")).take_over(true);
    /// store.acquire_lease(&id, &new)?;
    /// let err = store.save(&loaded.with_lease(&old)).unwrap_err();
    /// assert!(matches!(err, Error::Fenced { .. }));
    /// assert_eq!(err.kind(), ErrorKind::Leased);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn with_lease(mut self, lease: &Lease) -> Self {
        self.fence = Some((lease.session.clone(), lease.epoch));
        self
    }

    /// [`with_lease`](Self::with_lease) for a lease that may be absent.
    pub(crate) fn with_lease_of(self, lease: Option<&Lease>) -> Self {
        match lease {
            Some(lease) => self.with_lease(lease),
            None => self,
        }
    }

    /// The epoch of the lease the snapshot is saved under, if any
    /// ([`with_lease`](Self::with_lease)). A custom store that leases compares it with
    /// the session's epoch before it writes.
    #[must_use]
    pub fn lease_epoch(&self) -> Option<u64> {
        self.fence.as_ref().map(|(_, epoch)| *epoch)
    }

    /// The epoch the snapshot is fenced by, checked to be its own session's lease.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for another session's lease.
    pub(crate) fn fence(&self) -> Result<Option<u64>> {
        match &self.fence {
            None => Ok(None),
            Some((session, epoch)) if *session == self.id => Ok(Some(*epoch)),
            Some((session, _)) => Err(Error::InvalidArgument {
                reason: format!(
                    "the snapshot of session {} is marked as saved under a lease on session {session}",
                    self.id
                ),
            }),
        }
    }
}
