//! Leases: one writer per session, with fencing (documented on [`Lease`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::id::{LeaseHolder, SessionId};

/// How long a lease lasts unless renewed, if the request does not say.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The shortest time to live a lease may be asked for: a shorter one would end before a
/// heartbeat could renew it (stores refuse it with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument)).
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(100);

/// What a writer asks for when it takes a lease.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_session::{LeaseHolder, LeaseRequest};
///
/// let request = LeaseRequest::new(LeaseHolder::this_process("worker-7"))
///    .ttl(Duration::from_secs(10))
///    .take_over(true);
/// assert!(request.take_over);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRequest {
    /// Who asks.
    pub holder: LeaseHolder,
    /// How long the lease lasts unless renewed ([`DEFAULT_LEASE_TTL`] unless set; at least
    /// [`MIN_LEASE_TTL`]).
    pub ttl: Duration,
    /// Take the lease even if another holder's is live: that holder's later saves are
    /// fenced off. For a holder that is known to be gone or hung.
    pub take_over: bool,
}

impl LeaseRequest {
    /// A request by `holder`, for [`DEFAULT_LEASE_TTL`], not taking over.
    #[must_use]
    pub fn new(holder: LeaseHolder) -> Self {
        LeaseRequest {
            holder,
            ttl: DEFAULT_LEASE_TTL,
            take_over: false,
        }
    }

    /// Sets how long the lease lasts unless renewed.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets whether to take the lease from a live holder.
    #[must_use]
    pub fn take_over(mut self, take_over: bool) -> Self {
        self.take_over = take_over;
        self
    }
}

/// A lease on one session: who holds it, since when, until when, and its epoch.
///
/// Two processes that resume the same session would otherwise both run turns until the
/// second save meets [`Error::Conflict`](crate::Error::Conflict), after the turn was paid
/// for. A writer that takes a [`Lease`] first learns at once that someone else holds the
/// session ([`Error::Leased`](crate::Error::Leased), naming the holder and since when),
/// and can take it over when that holder is gone or hung.
///
/// Each lease has an **epoch**, stored with the session and raised by every acquisition.
/// A snapshot saved under a lease ([`SessionSnapshot::with_lease`](crate::SessionSnapshot::with_lease))
/// carries the epoch, and the store refuses it with
/// [`Error::Fenced`](crate::Error::Fenced) once the session's epoch moved on, even if its
/// revision still matches: a paused process that wakes up after a takeover can never
/// write over the new holder. A save without a lease is refused while another holder's
/// lease is live, so the lease is a lock on writing, not advice.
///
/// Which stores lease, and how a lease ends:
///
/// | store | a live lease is | ends when |
/// |---|---|---|
/// | [`MemorySessionStore`](crate::MemorySessionStore) | not released, not expired | released, or its time runs out |
/// | [`FileSessionStore`](crate::FileSessionStore) | not released, not expired, and its holder's store object alive | released, its time runs out, or the store object or its process ends (a `flock` on `<id>.lease`) |
/// | `PostgresSessionStore` (feature `postgres`) | not released, not expired by the server's clock | released, or its time runs out on the server's clock (a killed holder's lease lasts until then) |
///
/// A store that cannot lease (a custom store that does not implement the lease methods)
/// answers
/// [`acquire_lease`](crate::SessionStore::acquire_lease) with
/// [`Error::Unsupported`](crate::Error::Unsupported): it protects sessions by the
/// compare-and-swap on revisions only.
///
/// A lease lasts its time to live ([`LeaseRequest::ttl`]) unless renewed
/// ([`SessionStore::renew_lease`](crate::SessionStore::renew_lease));
/// [`Harness::resume_session_leased`](crate::Harness::resume_session_leased) keeps it
/// renewed from a thread while the session is open and releases it when the session is
/// dropped.
///
/// Leases fence saves. A store-level [`restore`](crate::SessionStore::restore) (a write
/// made without a lease) is refused while a lease is live, like a save without one: a
/// holder restores through its session
/// ([`Harness::restore_session`](crate::Harness::restore_session)). The other lifecycle
/// operations (delete, archive, trim, prune) are not fenced.
///
/// In the file store a lease is held by the store object that took it (or last renewed
/// it): dropping that `FileSessionStore` ends the lease, as the end of its process does.
/// Keep the store that leases for as long as the session is open (a
/// [`Harness`](crate::Harness) does). A session's last lease outlives its deletion: while it is live nobody
/// else saves a session under the id, and the epochs keep growing when the id is used
/// again.
///
/// # Using one
///
/// Made by [`SessionStore::acquire_lease`](crate::SessionStore::acquire_lease); give it to
/// [`SessionSnapshot::with_lease`](crate::SessionSnapshot::with_lease) so that saves are
/// fenced, renew it before [`expires_at`](Self::expires_at), release it when done.
///
/// # Examples
///
/// ```
/// use agent_session::{
///    ErrorKind, LeaseHolder, LeaseRequest, MemorySessionStore, SessionId, SessionSnapshot,
///    SessionStore,
/// };
///
/// let store = MemorySessionStore::new();
/// let id = SessionId::parse("shared")?;
/// store.save(&SessionSnapshot::builder(id.clone(), "m").build()?)?;
///
/// let lease = store.acquire_lease(&id, &LeaseRequest::new(LeaseHolder::this_process("a")))?;
/// // A second writer is refused, and told who holds the session.
/// let refused = store
///    .acquire_lease(&id, &LeaseRequest::new(LeaseHolder::this_process("b")))
///    .unwrap_err();
/// assert_eq!(refused.kind(), ErrorKind::Leased);
///
/// // Saves under the lease carry its epoch.
/// let loaded = store.load(&id)?.with_lease(&lease);
/// store.save(&loaded)?;
/// store.release_lease(&lease)?;
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The session.
    pub session: SessionId,
    /// Who holds it.
    pub holder: LeaseHolder,
    /// Raised by every acquisition of a lease on the session; saves made under an older
    /// epoch are refused.
    pub epoch: u64,
    /// When this epoch's lease was acquired.
    pub acquired_at: DateTime<Utc>,
    /// When it ends unless renewed.
    pub expires_at: DateTime<Utc>,
}

impl Lease {
    /// Whether the lease's time has run out at `now` (a store may also end it earlier).
    #[must_use]
    pub fn is_expired_at(&self, now: DateTime<Utc>) -> bool {
        now >= self.expires_at
    }
}

/// `now` plus `ttl`, saturating at the latest time representable.
pub(crate) fn expiry(now: DateTime<Utc>, ttl: Duration) -> DateTime<Utc> {
    chrono::TimeDelta::from_std(ttl)
        .ok()
        .and_then(|ttl| now.checked_add_signed(ttl))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
