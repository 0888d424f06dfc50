//! The lease rules the crate's leasing stores apply (see [`Lease`](crate::Lease)), on what each
//! keeps of a session's lease. A store decides only whether a lease is live beyond its
//! record (the file store also asks whether the holder's process still holds its `flock`).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::lease::{expiry, Lease, LeaseRequest, MIN_LEASE_TTL};
use crate::snapshot::SessionSnapshot;

/// What a store keeps of a session's lease: the last one taken, and whether it was
/// released. Kept after release, so the next lease's epoch is higher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseRecord {
    pub(crate) lease: Lease,
    pub(crate) released: bool,
}

impl LeaseRecord {
    /// Whether the record itself says the lease is live at `now`: not released, not
    /// expired.
    pub(crate) fn is_live_at(&self, now: DateTime<Utc>) -> bool {
        !self.released && !self.lease.is_expired_at(now)
    }

    /// The [`Error::Leased`] naming this record's holder.
    pub(crate) fn leased(&self) -> Error {
        Error::Leased {
            id: self.lease.session.clone(),
            holder: self.lease.holder.clone(),
            since: self.lease.acquired_at,
            expires_at: self.lease.expires_at,
        }
    }
}

/// Whether `snapshot` may be saved, given the session's lease `record` and whether it is
/// `live`: a save under a lease needs that lease to be the session's, unreleased; a
/// save under none needs no live lease.
///
/// # Errors
///
/// [`Error::Fenced`], [`Error::Leased`], or [`Error::InvalidArgument`] for a snapshot
/// marked with another session's lease.
pub(crate) fn check_save(
    snapshot: &SessionSnapshot,
    record: Option<&LeaseRecord>,
    live: bool,
) -> Result<()> {
    match (snapshot.fence()?, record) {
        (Some(epoch), Some(record)) if record.lease.epoch == epoch && !record.released => Ok(()),
        (Some(epoch), record) => Err(fenced(snapshot.id(), epoch, record)),
        (None, record) => check_unleased_write(record, live),
    }
}

/// [`check_save`] for a store whose lease is live by its record alone (not released, not
/// expired at `now`).
///
/// # Errors
///
/// As [`check_save`].
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn check_save_at(
    snapshot: &SessionSnapshot,
    record: Option<&LeaseRecord>,
    now: DateTime<Utc>,
) -> Result<()> {
    check_save(snapshot, record, record.is_some_and(|r| r.is_live_at(now)))
}

/// Whether a write made without a lease (a save without one, a store-level
/// [`restore`](crate::SessionStore::restore)) may go ahead: only while no lease is live.
///
/// # Errors
///
/// [`Error::Leased`] naming the holder.
pub(crate) fn check_unleased_write(record: Option<&LeaseRecord>, live: bool) -> Result<()> {
    match record {
        Some(record) if live => Err(record.leased()),
        _ => Ok(()),
    }
}

/// The record of a lease taken on `id` by `request` at `now`, over the session's
/// `record` (live or not, as `live` says).
///
/// # Errors
///
/// [`Error::Leased`] if the lease is live and the request does not take over.
pub(crate) fn acquire(
    id: &SessionId,
    request: &LeaseRequest,
    record: Option<&LeaseRecord>,
    live: bool,
    now: DateTime<Utc>,
) -> Result<LeaseRecord> {
    check_ttl(request.ttl)?;
    if let Some(record) = record.filter(|_| live && !request.take_over) {
        return Err(record.leased());
    }
    let epoch = record
        .map_or(0, |r| r.lease.epoch)
        .checked_add(1)
        .ok_or_else(|| Error::InvalidArgument {
            reason: format!("session {id} has used up its lease epochs"),
        })?;
    Ok(LeaseRecord {
        lease: Lease {
            session: id.clone(),
            holder: request.holder.clone(),
            epoch,
            acquired_at: now,
            expires_at: expiry(now, request.ttl),
        },
        released: false,
    })
}

/// [`acquire`] for a store whose lease is live by its record alone.
///
/// # Errors
///
/// As [`acquire`].
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn acquire_at(
    id: &SessionId,
    request: &LeaseRequest,
    record: Option<&LeaseRecord>,
    now: DateTime<Utc>,
) -> Result<LeaseRecord> {
    acquire(
        id,
        request,
        record,
        record.is_some_and(|r| r.is_live_at(now)),
        now,
    )
}

/// The record of `lease` renewed at `now` for `ttl`.
///
/// # Errors
///
/// [`Error::Fenced`] if `lease` is no longer the session's (taken over, or released).
pub(crate) fn renew(
    lease: &Lease,
    record: Option<&LeaseRecord>,
    ttl: Duration,
    now: DateTime<Utc>,
) -> Result<LeaseRecord> {
    check_ttl(ttl)?;
    match record {
        Some(record) if record.lease.epoch == lease.epoch && !record.released => Ok(LeaseRecord {
            lease: Lease {
                expires_at: expiry(now, ttl),
                ..record.lease.clone()
            },
            released: false,
        }),
        record => Err(fenced(&lease.session, lease.epoch, record)),
    }
}

/// The record after releasing `lease`, or `None` if there is nothing to release (the
/// lease was taken over or released already).
pub(crate) fn release(lease: &Lease, record: Option<&LeaseRecord>) -> Option<LeaseRecord> {
    record
        .filter(|r| r.lease.epoch == lease.epoch && !r.released)
        .map(|r| LeaseRecord {
            lease: r.lease.clone(),
            released: true,
        })
}

/// A lease shorter than [`MIN_LEASE_TTL`] would end before a heartbeat could renew it.
fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_LEASE_TTL {
        return Err(Error::InvalidArgument {
            reason: format!(
                "a lease's time to live must be at least {} ms (asked for {} ms): a shorter one ends before it can be renewed",
                MIN_LEASE_TTL.as_millis(),
                ttl.as_millis()
            ),
        });
    }
    Ok(())
}

fn fenced(id: &SessionId, epoch: u64, record: Option<&LeaseRecord>) -> Error {
    Error::Fenced {
        id: id.clone(),
        epoch,
        current: record.map_or(0, |r| r.lease.epoch),
    }
}

/// Nothing of a lease goes into a span: its holder's label and host are the
/// application's, not the store's.
impl crate::telemetry::Traced for Lease {}
