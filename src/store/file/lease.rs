//! Leases in the file store: `<dir>/<id>.lease`, a small JSON record of the session's last
//! lease, and an exclusive `flock` on that file held by the holder's store for as long as
//! the lease lasts. The lock ends with the holder's process, so a crashed holder's lease
//! ends at once, not after its time to live.
//!
//! Every change writes a new file (temporary name, data synced, locked by the new holder
//! before the rename) under the store's write lock, which saves also hold while they
//! check the lease: a takeover and a save never interleave. The record is not made
//! durable by a directory fsync: a power loss ends every process, and so every lease,
//! with it, so a record that a power loss takes back leaves no live holder behind.
//!
//! Its epoch is another matter: a record taken back lowers the session's epoch, and the
//! next acquisition hands that epoch out again. So the first save under a lease (in each
//! store object, with [`Durability::Sync`](super::Durability::Sync)) syncs the directory
//! before it writes: a save's own writes may sync no directory (an append), and without
//! that fsync a power loss could keep the save and take back the record it was made
//! under. Then a power loss takes back only records no save was made under, and every
//! lease taken after it has an epoch higher than every one the session's data was saved
//! under (the crash model, `tests/crash_model.rs` beside this file, checks it).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::{MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::atomic::{self, ReplaceError};
use super::private_dir::read_bytes;
use super::FileSessionStore;
use crate::error::{Error, Location, Result};
use crate::id::{LeaseHolder, SessionId};
use crate::lease::{Lease, LeaseRequest};
use crate::snapshot::SessionSnapshot;
use crate::store::lease_rules::{self, LeaseRecord};

/// Suffix of lease files.
pub(super) const LEASE_SUFFIX: &str = ".lease";
/// The format of a lease file.
const LEASE_FORMAT: u32 = 1;
/// Lease files are a few hundred bytes; anything larger is not one.
const MAX_LEASE_BYTES: u64 = 64 * 1024;

/// A lease file's contents (`docs/FORMAT.md`, "Lease files").
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseFile {
    /// The format, [`LEASE_FORMAT`].
    lease: u32,
    session: SessionId,
    holder: LeaseHolder,
    epoch: u64,
    acquired_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    released: bool,
}

impl LeaseFile {
    fn of(record: &LeaseRecord) -> Self {
        let lease = &record.lease;
        LeaseFile {
            lease: LEASE_FORMAT,
            session: lease.session.clone(),
            holder: lease.holder.clone(),
            epoch: lease.epoch,
            acquired_at: lease.acquired_at,
            expires_at: lease.expires_at,
            released: record.released,
        }
    }

    fn into_record(self) -> LeaseRecord {
        LeaseRecord {
            lease: Lease {
                session: self.session,
                holder: self.holder,
                epoch: self.epoch,
                acquired_at: self.acquired_at,
                expires_at: self.expires_at,
            },
            released: self.released,
        }
    }
}

/// A lease whose record a store made durable before saving under it: its epoch and
/// when it was acquired (a lease file removed by hand starts the epochs again).
pub(super) type DurableLease = (u64, DateTime<Utc>);

/// A session's lease as the files say: the record, and whether its holder's process
/// still holds the file's lock.
struct Found {
    record: LeaseRecord,
    locked: bool,
}

impl Found {
    fn is_live(&self) -> bool {
        self.locked && self.record.is_live_at(Utc::now())
    }
}

impl FileSessionStore {
    /// The lease file of session `id`: `<dir>/<id>.lease`.
    pub(super) fn lease_path(&self, id: &SessionId) -> PathBuf {
        self.root.join(format!("{id}{LEASE_SUFFIX}"))
    }

    fn held(&self) -> MutexGuard<'_, HashMap<SessionId, File>> {
        // Every change is one insert or remove: a poisoned lock is safe to keep using.
        self.held_leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the lease of `id`, if it has a lease file.
    ///
    /// # Errors
    ///
    /// Corruption if the file is not a lease record of this session (it is never
    /// guessed at: remove it to end the lease); I/O errors.
    fn read_lease(&self, id: &SessionId) -> Result<Option<Found>> {
        let path = self.lease_path(id);
        // The file read is the file probed: its bytes, and whether its holder still holds
        // its lock (a shared lock is refused while any exclusive one is held, this
        // process's own included).
        let read = self.read_checked_with(&path, MAX_LEASE_BYTES, |file, meta| {
            let bytes = read_bytes(file, meta, &path, MAX_LEASE_BYTES, false)?;
            let locked = match file.try_lock_shared() {
                Ok(()) => false,
                Err(std::fs::TryLockError::WouldBlock) => true,
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::io("check the lock of", &path, e))
                }
            };
            Ok((bytes, locked))
        })?;
        let Some(((bytes, locked), _)) = read else {
            return Ok(None);
        };
        let damaged = |reason: String| {
            Error::inconsistent(format!(
                "{reason}; if no process holds this session, remove the lease file"
            ))
            .at(&Location::file(&path))
        };
        let file: LeaseFile = serde_json::from_slice(&bytes)
            .map_err(|e| damaged(format!("the lease file does not parse: {e}")))?;
        if file.lease != LEASE_FORMAT {
            return Err(damaged(format!(
                "the lease file has format {}, this release reads {LEASE_FORMAT}",
                file.lease
            )));
        }
        if file.session != *id {
            return Err(damaged(format!(
                "the lease file names session {}",
                file.session
            )));
        }
        Ok(Some(Found {
            record: file.into_record(),
            locked,
        }))
    }

    /// Writes `record` as the lease of `id`, locked by this store when `hold` (the lock
    /// kept until the lease is released, replaced or the store dropped).
    fn write_lease(&self, id: &SessionId, record: &LeaseRecord, hold: bool) -> Result<()> {
        let path = self.lease_path(id);
        let bytes = serde_json::to_vec(&LeaseFile::of(record)).map_err(|e| Error::Encode {
            id: id.clone(),
            source: e,
        })?;
        // Not made durable by a directory fsync: see the module docs.
        let file = atomic::replace_keeping(
            &*self.fs,
            &self.root,
            &path,
            &format!(".{id}{LEASE_SUFFIX}."),
            &bytes,
            false,
            |file, temp| {
                if hold {
                    // A new file no one else has opened: the lock is free.
                    file.try_lock()
                        .map_err(|e| Error::io("lock", temp, io::Error::other(e.to_string())))?;
                }
                Ok(())
            },
        )
        .map_err(|e| match e {
            ReplaceError::Unchanged(e) => e,
            // Not durable is never asked for.
            ReplaceError::NotDurable(e) => Error::io("sync", &self.root, e),
        })?;
        let mut locks = self.held();
        if hold {
            locks.insert(id.clone(), file);
        } else {
            locks.remove(id);
        }
        Ok(())
    }

    /// The session's lease record, if it has one, and whether it is live.
    fn current_lease(&self, id: &SessionId) -> Result<(Option<LeaseRecord>, bool)> {
        Ok(match self.read_lease(id)? {
            Some(found) => {
                let live = found.is_live();
                (Some(found.record), live)
            }
            None => (None, false),
        })
    }

    /// Whether `snapshot` may be saved as far as the session's lease goes; for a save
    /// under a lease, also makes the lease's record durable first (see the module docs).
    /// Under the write lock.
    pub(super) fn check_lease(&self, snapshot: &SessionSnapshot) -> Result<()> {
        let id = snapshot.id();
        let (record, live) = self.current_lease(id)?;
        lease_rules::check_save(snapshot, record.as_ref(), live)?;
        match record {
            Some(record) if snapshot.fence()?.is_some() && self.durable() => {
                self.make_lease_durable(id, &record.lease)
            }
            _ => Ok(()),
        }
    }

    /// Syncs the store directory, unless this store did for `lease` already: its record's
    /// rename then survives a power loss, and so does its epoch.
    fn make_lease_durable(&self, id: &SessionId, lease: &Lease) -> Result<()> {
        let key = (lease.epoch, lease.acquired_at);
        let mut durable = self
            .durable_leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if durable.get(id) == Some(&key) {
            return Ok(());
        }
        // Nothing is written yet: a failure leaves the session as it was.
        self.fs.sync_dir(&self.root).map_err(|e| {
            Error::io(
                "sync the store directory (the lease record) before saving in",
                &self.root,
                e,
            )
        })?;
        durable.insert(id.clone(), key);
        Ok(())
    }

    /// Whether a write made without a lease (a restore) may go ahead. Under the write
    /// lock.
    pub(super) fn check_unleased_write(&self, id: &SessionId) -> Result<()> {
        let (record, live) = self.current_lease(id)?;
        lease_rules::check_unleased_write(record.as_ref(), live)
    }

    pub(super) fn acquire_lease_locked(
        &self,
        id: &SessionId,
        request: &LeaseRequest,
    ) -> Result<Lease> {
        match self.fs.symlink_metadata(&self.path_of(id)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotFound { id: id.clone() })
            }
            Err(e) => return Err(Error::io("inspect", &self.path_of(id), e)),
        }
        let (record, live) = self.current_lease(id)?;
        let record = lease_rules::acquire(id, request, record.as_ref(), live, Utc::now())?;
        self.write_lease(id, &record, true)?;
        Ok(record.lease)
    }

    pub(super) fn renew_lease_locked(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let (record, _) = self.current_lease(&lease.session)?;
        let record = lease_rules::renew(lease, record.as_ref(), ttl, Utc::now())?;
        self.write_lease(&lease.session, &record, true)?;
        Ok(record.lease)
    }

    pub(super) fn release_lease_locked(&self, lease: &Lease) -> Result<()> {
        let (record, _) = self.current_lease(&lease.session)?;
        let released = match lease_rules::release(lease, record.as_ref()) {
            Some(released) => self.write_lease(&lease.session, &released, false),
            None => Ok(()),
        };
        // Whatever the record says, this store lets go of the lock if it holds this
        // lease's file: a release whose record could not be written still ends the lease
        // (the lock was what kept it live).
        if released.is_err() && record.is_some_and(|r| r.lease.epoch == lease.epoch) {
            self.held().remove(&lease.session);
        }
        released
    }

    /// The live leases, from every readable `<id>.lease` of a session that exists. Without
    /// the write lock: a lease changing meanwhile is shown before or after the change.
    pub(super) fn live_leases(&self) -> Result<Vec<Lease>> {
        let mut leases = Vec::new();
        for name in self.names()? {
            let Some(id) = name
                .to_str()
                .and_then(|name| name.strip_suffix(LEASE_SUFFIX))
                .and_then(|id| SessionId::parse(id).ok())
            else {
                continue;
            };
            if self.fs.symlink_metadata(&self.path_of(&id)).is_err() {
                continue;
            }
            // A lease file removed between the listing and the read reads as none; one
            // that cannot be read (damaged, planted) is left out of the listing, which
            // must not fail for it: the session's saves report it.
            if let Ok((Some(record), true)) = self.current_lease(&id) {
                leases.push(record.lease);
            }
        }
        leases.sort_by(|a, b| a.session.cmp(&b.session));
        Ok(leases)
    }
}
