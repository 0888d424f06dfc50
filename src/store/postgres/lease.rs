//! Leases in the PostgreSQL store: the table `<schema>.leases` keeps each session's last
//! lease (holder, epoch, times, released), and outlives the session's row so epochs only
//! grow under an id. Expiry is decided by the server's clock, never a client's: every
//! "now" below is the server's `clock_timestamp()`, so two machines whose clocks disagree
//! still agree on whether a lease is live.
//!
//! A save is one statement, and the server must refuse a fenced one in that same
//! statement. So the session's row carries a copy of what fencing needs
//! (`lease_epoch`, and `lease_until_ns`, `NULL` once released) and each save's
//! compare-and-swap reads those columns of the row it updates: they are re-checked on the
//! row's latest version when the save waits for a concurrent lease change, which a
//! subquery into `leases` would not be under `READ COMMITTED`. Every lease change locks
//! the session's row and updates both in one transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use super::{backend, nanos, nanos_saturating, prepared, to_i64, Inner};
use crate::error::{Error, Result};
use crate::id::{LeaseHolder, SessionId};
use crate::lease::{Lease, LeaseRequest};
use crate::snapshot::SessionSnapshot;
use crate::store::lease_rules::{self, LeaseRecord};

/// The server's clock, in nanoseconds since the epoch (microsecond resolution).
pub(super) const NOW_NS: &str = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

/// The columns of `leases` (as `l`) that [`record_at`] reads, in its order.
pub(super) const LEASE_COLUMNS: &str =
    "l.epoch, l.host, l.pid, l.label, l.acquired_ns, l.expires_ns, l.released";

/// The tables leases add (schema version 4).
pub(super) fn create_tables(schema: &str) -> String {
    format!(
        "ALTER TABLE {schema}.sessions
             ADD COLUMN IF NOT EXISTS lease_epoch bigint NOT NULL DEFAULT 0;
         ALTER TABLE {schema}.sessions
             ADD COLUMN IF NOT EXISTS lease_until_ns bigint;
         CREATE TABLE IF NOT EXISTS {schema}.leases (
             session_id text COLLATE \"C\" PRIMARY KEY,
             epoch bigint NOT NULL CHECK (epoch > 0),
             host text NOT NULL,
             pid bigint NOT NULL,
             label text NOT NULL,
             acquired_ns bigint NOT NULL,
             expires_ns bigint NOT NULL,
             released boolean NOT NULL
         );"
    )
}

/// The condition a save's `UPDATE` of the session's row adds, with the snapshot's epoch as
/// parameter `$param` ([`fence_of`]): under a lease, that lease is the row's and not
/// released (expired is fine until someone takes over); under none, no lease is live.
pub(super) fn row_allows(param: usize) -> String {
    format!(
        "CASE WHEN ${param}::bigint IS NULL
              THEN lease_until_ns IS NULL OR lease_until_ns <= {NOW_NS}
              ELSE lease_epoch = ${param} AND lease_until_ns IS NOT NULL END"
    )
}

/// The same condition on a joined `leases` row `l` (possibly all `NULL`), for the insert of
/// a new session, which has no row to read it from.
pub(super) fn record_allows(param: usize) -> String {
    format!(
        "CASE WHEN ${param}::bigint IS NULL
              THEN l.epoch IS NULL OR l.released OR l.expires_ns <= {NOW_NS}
              ELSE l.epoch = ${param} AND NOT l.released END"
    )
}

/// The epoch a snapshot is saved under, as the save's parameter.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a snapshot marked with another session's lease.
pub(super) fn fence_of(snapshot: &SessionSnapshot) -> Result<Option<i64>> {
    Ok(snapshot.fence()?.map(to_i64))
}

/// The lease record in the [`LEASE_COLUMNS`] of `row` starting at column `first`, if the
/// session has one.
pub(super) fn record_at(row: &Row, first: usize, id: &SessionId) -> Result<Option<LeaseRecord>> {
    let column = |e| backend("read a session's lease", e);
    let Some(epoch) = row.try_get::<_, Option<i64>>(first).map_err(column)? else {
        return Ok(None);
    };
    let pid: i64 = row.try_get(first + 2).map_err(column)?;
    Ok(Some(LeaseRecord {
        lease: Lease {
            session: id.clone(),
            holder: LeaseHolder {
                host: row.try_get(first + 1).map_err(column)?,
                pid: u32::try_from(pid).unwrap_or(u32::MAX),
                label: row.try_get(first + 3).map_err(column)?,
            },
            epoch: u64::try_from(epoch).unwrap_or(0),
            acquired_at: DateTime::from_timestamp_nanos(row.try_get(first + 4).map_err(column)?),
            expires_at: DateTime::from_timestamp_nanos(row.try_get(first + 5).map_err(column)?),
        },
        released: row.try_get(first + 6).map_err(column)?,
    }))
}

/// The server's time in column `at` of `row` (selected as [`NOW_NS`]).
pub(super) fn now_at(row: &Row, at: usize) -> Result<DateTime<Utc>> {
    let now: i64 = row
        .try_get(at)
        .map_err(|e| backend("read the server's clock", e))?;
    Ok(DateTime::from_timestamp_nanos(now))
}

impl Inner {
    /// As [`SessionStore::acquire_lease`](crate::SessionStore::acquire_lease), with
    /// expiry by the server's clock.
    pub(super) async fn acquire(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        let id = id.clone();
        let request = request.clone();
        Box::pin(self.with_lease(id.clone(), true, move |record, now| {
            lease_rules::acquire_at(&id, &request, record.as_ref(), now).map(Some)
        }))
        .await?
        .map(|record| record.lease)
        .ok_or_else(|| Error::inconsistent("a lease was acquired but not recorded"))
    }

    /// As [`SessionStore::renew_lease`](crate::SessionStore::renew_lease).
    pub(super) async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let held = lease.clone();
        Box::pin(
            self.with_lease(lease.session.clone(), false, move |record, now| {
                lease_rules::renew(&held, record.as_ref(), ttl, now).map(Some)
            }),
        )
        .await?
        .map(|record| record.lease)
        .ok_or_else(|| Error::inconsistent("a lease was renewed but not recorded"))
    }

    /// As [`SessionStore::release_lease`](crate::SessionStore::release_lease).
    pub(super) async fn release(&self, lease: &Lease) -> Result<()> {
        let held = lease.clone();
        Box::pin(
            self.with_lease(lease.session.clone(), false, move |record, _| {
                Ok(lease_rules::release(&held, record.as_ref()))
            }),
        )
        .await
        .map(|_| ())
    }

    /// As [`SessionStore::leases`](crate::SessionStore::leases): the live leases of
    /// sessions that exist, by the server's clock.
    pub(super) async fn live_leases(&self) -> Result<Vec<Lease>> {
        self.with_client(move |client, schema| async move {
            let rows = client
                .query(
                    &prepared(
                        &client,
                        &format!(
                            "SELECT l.session_id, {LEASE_COLUMNS}
                             FROM {schema}.leases l
                             JOIN {schema}.sessions s ON s.id = l.session_id
                             WHERE NOT l.released AND l.expires_ns > {NOW_NS}
                             ORDER BY l.session_id"
                        ),
                    )
                    .await?,
                    &[],
                )
                .await
                .map_err(|e| backend("list the leases", e))?;
            let mut leases = Vec::with_capacity(rows.len());
            for row in rows {
                let key: String = row.get(0);
                let Ok(id) = SessionId::parse(&key) else {
                    // A row no id of this crate names: not a session's lease.
                    continue;
                };
                if let Some(record) = record_at(&row, 1, &id)? {
                    leases.push(record.lease);
                }
            }
            Ok(leases)
        })
        .await
    }

    /// Runs one change of session `id`'s lease in a transaction (its future is large: the
    /// callers box it): locks the session's row
    /// (so saves and other lease changes wait), reads the lease record and the server's
    /// clock, asks `change` for the new record (`None`: nothing to write), and writes it to
    /// `leases` and to the row's copy. `must_exist`: a session that does not exist is
    /// [`Error::NotFound`] (a renewal or release works on a lease whose session was
    /// deleted).
    async fn with_lease<F>(
        &self,
        id: SessionId,
        must_exist: bool,
        change: F,
    ) -> Result<Option<LeaseRecord>>
    where
        F: FnOnce(Option<LeaseRecord>, DateTime<Utc>) -> Result<Option<LeaseRecord>>
            + Send
            + 'static,
    {
        self.with_client(move |mut client, schema| async move {
            let tx = client
                .transaction()
                .await
                .map_err(|e| backend("start a lease change", e))?;
            let key = id.as_str();
            let exists = tx
                .query_opt(
                    &format!("SELECT 1 FROM {schema}.sessions WHERE id = $1 FOR UPDATE"),
                    &[&key],
                )
                .await
                .map_err(|e| backend("lock a session's row", e))?
                .is_some();
            if must_exist && !exists {
                return Err(Error::NotFound { id: id.clone() });
            }
            let row = tx
                .query_one(
                    &format!(
                        "SELECT {LEASE_COLUMNS}, {NOW_NS}
                         FROM (SELECT 1) AS one
                         LEFT JOIN (SELECT * FROM {schema}.leases
                                    WHERE session_id = $1 FOR UPDATE) AS l ON true"
                    ),
                    &[&key],
                )
                .await
                .map_err(|e| backend("read a session's lease", e))?;
            let record = record_at(&row, 0, &id)?;
            let now = now_at(&row, 7)?;
            let Some(changed) = change(record, now)? else {
                return Ok(None);
            };
            let lease = &changed.lease;
            let epoch = to_i64(lease.epoch);
            let acquired = nanos(&id, lease.acquired_at)?;
            // A lease asked for centuries ends in 2262, the column's end.
            let expires = nanos_saturating(lease.expires_at);
            tx.execute(
                &format!(
                    "INSERT INTO {schema}.leases
                         (session_id, epoch, host, pid, label, acquired_ns, expires_ns, released)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (session_id) DO UPDATE SET
                         epoch = $2, host = $3, pid = $4, label = $5, acquired_ns = $6,
                         expires_ns = $7, released = $8"
                ),
                &[
                    &key,
                    &epoch,
                    &lease.holder.host,
                    &i64::from(lease.holder.pid),
                    &lease.holder.label,
                    &acquired,
                    &expires,
                    &changed.released,
                ],
            )
            .await
            .map_err(|e| backend("record a session's lease", e))?;
            let until = (!changed.released).then_some(expires);
            tx.execute(
                &format!(
                    "UPDATE {schema}.sessions SET lease_epoch = $2, lease_until_ns = $3
                     WHERE id = $1"
                ),
                &[&key, &epoch, &until],
            )
            .await
            .map_err(|e| backend("record a session's lease", e))?;
            tx.commit()
                .await
                .map_err(|e| backend("commit a lease change", e))?;
            Ok(Some(LeaseRecord {
                lease: Lease {
                    expires_at: DateTime::from_timestamp_nanos(expires),
                    ..changed.lease
                },
                released: changed.released,
            }))
        })
        .await
    }
}
