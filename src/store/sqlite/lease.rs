//! Leases in the SQLite store: the table `leases` keeps each session's last lease
//! (holder, epoch, times, released), and outlives the session's row so epochs only grow
//! under an id. A lease ends when released or when its time runs out by this machine's
//! clock (every process using the database runs on the machine that holds the file, so
//! they share that clock). Every lease change and every save runs in a write transaction,
//! which SQLite runs one at a time: a save reads the lease in the transaction that writes
//! it, so a holder taken over is refused even at a matching revision.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension};

use super::rows::{nanos, nanos_saturating, to_i64};
use super::SqliteSessionStore;
use crate::error::{Error, Result};
use crate::id::{LeaseHolder, SessionId};
use crate::lease::{Lease, LeaseRequest};
use crate::store::lease_rules::{self, LeaseRecord};

/// The lease record of session `id`, if it has one.
pub(super) fn record(
    store: &SqliteSessionStore,
    conn: &Connection,
    id: &SessionId,
) -> Result<Option<LeaseRecord>> {
    conn.prepare_cached(
        "SELECT epoch, host, pid, label, acquired_ns, expires_ns, released
         FROM leases WHERE session_id = ?1",
    )
    .and_then(|mut s| {
        s.query_row([id.as_str()], |r| record_of(id, r, 0))
            .optional()
    })
    .map_err(|e| store.db.fail("read a session's lease", e))
}

/// The lease record in the seven lease columns of `r` starting at column `first`.
fn record_of(id: &SessionId, r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<LeaseRecord> {
    let epoch: i64 = r.get(first)?;
    let pid: i64 = r.get(first + 2)?;
    Ok(LeaseRecord {
        lease: Lease {
            session: id.clone(),
            holder: LeaseHolder {
                host: r.get(first + 1)?,
                pid: u32::try_from(pid).unwrap_or(u32::MAX),
                label: r.get(first + 3)?,
            },
            epoch: u64::try_from(epoch).unwrap_or(0),
            acquired_at: DateTime::from_timestamp_nanos(r.get(first + 4)?),
            expires_at: DateTime::from_timestamp_nanos(r.get(first + 5)?),
        },
        released: r.get::<_, i64>(first + 6)? != 0,
    })
}

impl SqliteSessionStore {
    /// As [`SessionStore::acquire_lease`](crate::SessionStore::acquire_lease).
    pub(super) fn acquire(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        self.change_lease(id, true, |record, now| {
            lease_rules::acquire_at(id, request, record.as_ref(), now).map(Some)
        })?
        .map(|record| record.lease)
        .ok_or_else(|| Error::inconsistent("a lease was acquired but not recorded"))
    }

    /// As [`SessionStore::renew_lease`](crate::SessionStore::renew_lease).
    pub(super) fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.change_lease(&lease.session, false, |record, now| {
            lease_rules::renew(lease, record.as_ref(), ttl, now).map(Some)
        })?
        .map(|record| record.lease)
        .ok_or_else(|| Error::inconsistent("a lease was renewed but not recorded"))
    }

    /// As [`SessionStore::release_lease`](crate::SessionStore::release_lease).
    pub(super) fn release(&self, lease: &Lease) -> Result<()> {
        self.change_lease(&lease.session, false, |record, _| {
            Ok(lease_rules::release(lease, record.as_ref()))
        })
        .map(|_| ())
    }

    /// As [`SessionStore::leases`](crate::SessionStore::leases): the live leases of
    /// sessions that exist.
    pub(super) fn live_leases(&self) -> Result<Vec<Lease>> {
        let now = nanos_saturating(Utc::now());
        self.db.read(|tx| {
            let fail = |e| self.db.fail("list the leases", e);
            let mut statement = tx
                .prepare_cached(
                    "SELECT l.session_id, l.epoch, l.host, l.pid, l.label, l.acquired_ns,
                            l.expires_ns, l.released
                     FROM leases l JOIN sessions s ON s.id = l.session_id
                     WHERE l.released = 0 AND l.expires_ns > ?1
                     ORDER BY l.session_id",
                )
                .map_err(fail)?;
            let mut rows = statement.query([now]).map_err(fail)?;
            let mut leases = Vec::new();
            while let Some(row) = rows.next().map_err(fail)? {
                let key: String = row.get(0).map_err(fail)?;
                // A row no id of this crate names (written by hand): not a session's lease.
                let Ok(id) = SessionId::parse(&key) else {
                    continue;
                };
                let record = record_of(&id, row, 1).map_err(fail)?;
                leases.push(record.lease);
            }
            Ok(leases)
        })
    }

    /// Runs one change of session `id`'s lease in a write transaction: reads the record
    /// and the clock, asks `change` for the new record (`None`: nothing to write), and
    /// writes it. `must_exist`: a session that does not exist is [`Error::NotFound`] (a
    /// renewal or release works on a lease whose session was deleted).
    fn change_lease(
        &self,
        id: &SessionId,
        must_exist: bool,
        change: impl FnOnce(Option<LeaseRecord>, DateTime<Utc>) -> Result<Option<LeaseRecord>>,
    ) -> Result<Option<LeaseRecord>> {
        self.db.write(|tx| {
            if must_exist {
                let exists = tx
                    .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")
                    .and_then(|mut s| s.exists([id.as_str()]))
                    .map_err(|e| self.db.fail("read a session's row", e))?;
                if !exists {
                    return Err(Error::NotFound { id: id.clone() });
                }
            }
            let current = record(self, tx, id)?;
            let Some(changed) = change(current, Utc::now())? else {
                return Ok(None);
            };
            let lease = &changed.lease;
            // A lease asked for centuries ends in 2262, the column's end.
            let expires = nanos_saturating(lease.expires_at);
            tx.prepare_cached(
                "INSERT INTO leases (session_id, epoch, host, pid, label, acquired_ns,
                                     expires_ns, released)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (session_id) DO UPDATE SET
                     epoch = excluded.epoch, host = excluded.host, pid = excluded.pid,
                     label = excluded.label, acquired_ns = excluded.acquired_ns,
                     expires_ns = excluded.expires_ns, released = excluded.released",
            )
            .and_then(|mut s| {
                s.execute(rusqlite::params![
                    id.as_str(),
                    to_i64(lease.epoch),
                    lease.holder.host,
                    i64::from(lease.holder.pid),
                    lease.holder.label,
                    nanos(id, lease.acquired_at).unwrap_or(i64::MAX),
                    expires,
                    i64::from(changed.released),
                ])
            })
            .map_err(|e| self.db.fail("record a session's lease", e))?;
            Ok(Some(LeaseRecord {
                lease: Lease {
                    expires_at: DateTime::from_timestamp_nanos(expires),
                    ..changed.lease
                },
                released: changed.released,
            }))
        })
    }
}
