//! Retention: [`PrunePolicy`] says which sessions go, [`SessionStoreExt::prune`](crate::SessionStoreExt::prune) deletes them.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::RevisionInfo;
use crate::store::{ListScope, SessionStore, SessionSummary};

/// Which sessions [`SessionStoreExt::prune`](crate::SessionStoreExt::prune) deletes: those older than a maximum age, those
/// beyond a maximum count, and the oldest until the rest fit in a maximum total size.
/// Limits left unset do not apply; a policy with none deletes nothing. Sessions updated in
/// the future ([`SessionSummary::is_updated_in_the_future`]) have no known age: no limit
/// applies to them, and they are reported in [`PruneReport::in_the_future`].
///
/// Age is measured from a session's last update. Count and size keep the most recently
/// updated sessions and delete the oldest: walking from the newest, a session goes once
/// the ones kept before it already reach the count, or once it would take the total past
/// the size, and so does every session older than it (even one small enough to fit), so
/// what is left is always the newest sessions. A newest session larger than the size
/// limit goes too: preview with [`dry_run`](Self::dry_run).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_session::{MemorySessionStore, PrunePolicy, SessionId, SessionSnapshot, SessionStore,
///     SessionStoreExt};
///
/// let store = MemorySessionStore::new();
/// for id in ["a", "b", "c"] {
///     store.save(&SessionSnapshot::builder(SessionId::parse(id)?, "m").build()?)?;
/// }
/// let policy = PrunePolicy::new()
///     .max_age(Duration::from_secs(30 * 24 * 3600))
///     .max_count(2);
/// let preview = store.prune(&policy.clone().dry_run(true))?;
/// assert_eq!(preview.pruned.len(), 1);
/// assert_eq!(store.list()?.sessions.len(), 3); // a dry run deletes nothing
///
/// let report = store.prune(&policy)?;
/// assert_eq!(report.pruned.len(), 1);
/// assert_eq!(store.list()?.sessions.len(), 2);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrunePolicy {
    /// Delete sessions not updated for longer than this.
    pub max_age: Option<Duration>,
    /// Keep at most this many sessions (the most recently updated).
    pub max_count: Option<usize>,
    /// Keep at most this many bytes of sessions (the most recently updated).
    pub max_total_bytes: Option<u64>,
    /// Which sessions the policy applies to (default: all of them, archived or not).
    pub scope: PruneScope,
    /// Only report what would be deleted.
    pub dry_run: bool,
    /// The time ages are measured at (default: when `prune` runs).
    pub now: Option<DateTime<Utc>>,
    /// How much history the sessions that stay keep (default: all of it).
    pub history: Option<HistoryRetention>,
}

/// How much of each session's history [`SessionStoreExt::prune`](crate::SessionStoreExt::prune)
/// keeps ([`PrunePolicy::history`]): the revisions beyond a number, or older than an age,
/// are dropped ([`SessionStore::trim_history`]), with what only they held (messages
/// rewound, compacted away or replaced before the oldest revision kept). The head is
/// always kept, and so is every revision after the oldest one kept. Limits left unset do
/// not apply; with both, a revision goes if either says so.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use agent_session::{ContentBlock, HistoryRetention, MemorySessionStore, Message, PrunePolicy,
///     RewindTo, SessionId, SessionSnapshot, SessionStore, SessionStoreExt};
///
/// let store = MemorySessionStore::new();
/// let id = SessionId::parse("s")?;
/// store.save(&SessionSnapshot::builder(id.clone(), "m")
///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
///     .build()?)?;
/// store.rewind(&id, RewindTo::LastTurns(1))?; // revision 2: the turn is history only
///
/// let policy = PrunePolicy::new().history(HistoryRetention::new().max_revisions(1));
/// let report = store.prune(&policy)?;
/// assert_eq!(report.trimmed[0].dropped, 1);
/// assert_eq!(store.revisions(&id)?.len(), 1);
/// assert!(store.history(&id)?.messages.is_empty()); // the rewound turn is gone
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryRetention {
    /// Keep at most this many revisions of each session, the head included (0 counts
    /// as 1).
    pub max_revisions: Option<usize>,
    /// Drop the revisions saved longer ago than this (the head stays, however old).
    pub max_age: Option<Duration>,
}

impl HistoryRetention {
    /// A retention that drops nothing until limits are set.
    #[must_use]
    pub fn new() -> Self {
        HistoryRetention::default()
    }

    /// Keeps at most `count` revisions of each session, the head included.
    #[must_use]
    pub fn max_revisions(mut self, count: usize) -> Self {
        self.max_revisions = Some(count);
        self
    }

    /// Drops the revisions saved longer ago than `age`.
    #[must_use]
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// The oldest revision to keep of a session with `revisions` (oldest first, as
    /// [`SessionStore::revisions`] lists them), at `now`.
    fn oldest_kept(&self, revisions: &[RevisionInfo], now: DateTime<Utc>) -> Option<Revision> {
        let last = revisions.len().checked_sub(1)?;
        let mut keep_from = 0;
        if let Some(count) = self.max_revisions {
            keep_from = keep_from.max(revisions.len().saturating_sub(count.max(1)));
        }
        let limit = self
            .max_age
            .and_then(|age| chrono::Duration::from_std(age).ok())
            .and_then(|age| now.checked_sub_signed(age));
        if let Some(limit) = limit {
            let young = revisions
                .iter()
                .position(|r| r.updated_at >= limit)
                .unwrap_or(last);
            keep_from = keep_from.max(young);
        }
        Some(revisions[keep_from.min(last)].revision)
    }
}

/// The history [`SessionStoreExt::prune`](crate::SessionStoreExt::prune) dropped of a
/// session that stays (or, in a dry run, would drop).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrimmedHistory {
    /// The session.
    pub id: SessionId,
    /// The oldest revision it kept before.
    pub oldest_before: Revision,
    /// The oldest revision it keeps now.
    pub oldest_after: Revision,
    /// How many revisions were dropped.
    pub dropped: u64,
    /// The bytes it used before and after (`None` if the store cannot tell, or after, in
    /// a dry run).
    pub bytes_before: Option<u64>,
    /// See [`bytes_before`](Self::bytes_before).
    pub bytes_after: Option<u64>,
}

/// Which sessions a [`PrunePolicy`] applies to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PruneScope {
    /// Every session, archived or not.
    #[default]
    All,
    /// Only archived sessions; active ones are neither counted nor deleted.
    Archived,
}

impl PrunePolicy {
    /// A policy that deletes nothing until limits are set.
    #[must_use]
    pub fn new() -> Self {
        PrunePolicy::default()
    }

    /// Deletes sessions not updated for longer than `age`.
    #[must_use]
    pub fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// Keeps at most `count` sessions.
    #[must_use]
    pub fn max_count(mut self, count: usize) -> Self {
        self.max_count = Some(count);
        self
    }

    /// Keeps at most `bytes` bytes of stored sessions.
    #[must_use]
    pub fn max_total_bytes(mut self, bytes: u64) -> Self {
        self.max_total_bytes = Some(bytes);
        self
    }

    /// Applies the policy to archived sessions only.
    #[must_use]
    pub fn archived_only(mut self) -> Self {
        self.scope = PruneScope::Archived;
        self
    }

    /// Only reports what would be deleted (`true`), or deletes it (`false`, the default).
    #[must_use]
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Measures ages at `now` rather than when `prune` runs.
    #[must_use]
    pub fn now(mut self, now: DateTime<Utc>) -> Self {
        self.now = Some(now);
        self
    }

    /// Drops the history `retention` does not keep from every session that stays.
    #[must_use]
    pub fn history(mut self, retention: HistoryRetention) -> Self {
        self.history = Some(retention);
        self
    }

    /// Chooses, from `sessions` (newest first, each with its size), the ones to delete
    /// and why, oldest first.
    fn choose(&self, sessions: Vec<(SessionSummary, u64)>) -> Vec<Pruned> {
        let now = self.now.unwrap_or_else(Utc::now);
        let oldest_kept = self
            .max_age
            .and_then(|age| chrono::Duration::from_std(age).ok())
            .and_then(|age| now.checked_sub_signed(age));
        let (mut kept, mut kept_bytes) = (0usize, 0u64);
        // Once a session does not fit, no older one is kept for its size.
        let mut full = false;
        let mut pruned = Vec::new();
        for (summary, bytes) in sessions {
            full = full
                || self
                    .max_total_bytes
                    .is_some_and(|max| kept_bytes.saturating_add(bytes) > max);
            let reason = if oldest_kept.is_some_and(|limit| summary.updated_at < limit) {
                Some(PruneReason::Age)
            } else if self.max_count.is_some_and(|max| kept >= max) {
                Some(PruneReason::Count)
            } else if full {
                Some(PruneReason::Size)
            } else {
                None
            };
            if let Some(reason) = reason {
                pruned.push(Pruned {
                    summary,
                    bytes,
                    reason,
                });
            } else {
                kept += 1;
                kept_bytes = kept_bytes.saturating_add(bytes);
            }
        }
        pruned.reverse();
        pruned
    }
}

/// Why a session was pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PruneReason {
    /// It was not updated within [`PrunePolicy::max_age`].
    Age,
    /// Newer sessions already filled [`PrunePolicy::max_count`].
    Count,
    /// Keeping it would pass [`PrunePolicy::max_total_bytes`].
    Size,
}

impl std::fmt::Display for PruneReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PruneReason::Age => "older than the maximum age",
            PruneReason::Count => "beyond the maximum count",
            PruneReason::Size => "beyond the maximum total size",
        })
    }
}

/// A session [`SessionStoreExt::prune`](crate::SessionStoreExt::prune) deleted (or, in a dry run, would delete).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pruned {
    /// The session as the listing showed it.
    pub summary: SessionSummary,
    /// The bytes it used (0 if the store could not tell).
    pub bytes: u64,
    /// Which limit it broke.
    pub reason: PruneReason,
}

/// What [`SessionStoreExt::prune`](crate::SessionStoreExt::prune) did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct PruneReport {
    /// Whether this was a dry run (nothing was deleted).
    pub dry_run: bool,
    /// The sessions deleted (or that would be, in a dry run), oldest first.
    pub pruned: Vec<Pruned>,
    /// Sessions the policy chose that were not deleted: changed since they were listed
    /// ([`Error::Changed`]: saved, re-created, archived or restored), gone already
    /// ([`Error::NotFound`]), or failing to delete.
    pub skipped: Vec<Error>,
    /// How many sessions the policy looked at and kept (those in
    /// [`in_the_future`](Self::in_the_future) included).
    pub kept: usize,
    /// Entries the listing could not read; never deleted.
    pub unreadable: Vec<Error>,
    /// The sessions that stay whose history [`PrunePolicy::history`] dropped (or would
    /// drop, in a dry run), in listing order.
    pub trimmed: Vec<TrimmedHistory>,
    /// Sessions updated later than this machine's clock allows
    /// ([`SessionSummary::is_updated_in_the_future`]): their age is unknown, so no limit
    /// applies to them and they are never deleted, nor counted against
    /// [`PrunePolicy::max_count`] or [`PrunePolicy::max_total_bytes`]. Saving one again
    /// gives it the current time.
    pub in_the_future: Vec<SessionSummary>,
}

impl PruneReport {
    /// The bytes the pruned sessions used (freed, unless this was a dry run).
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.pruned
            .iter()
            .fold(0, |total, p| total.saturating_add(p.bytes))
    }
}

/// [`SessionStoreExt::prune`](crate::SessionStoreExt::prune) for any store.
pub(super) fn prune<S: SessionStore + ?Sized>(
    store: &S,
    policy: &PrunePolicy,
) -> Result<PruneReport> {
    let listing = store.list_scoped(match policy.scope {
        PruneScope::All => ListScope::All,
        PruneScope::Archived => ListScope::Archived,
    })?;
    let mut unreadable = listing.unreadable;
    let (in_the_future, sessions): (Vec<_>, Vec<_>) = listing
        .sessions
        .into_iter()
        .partition(SessionSummary::is_updated_in_the_future);
    let mut sized = Vec::with_capacity(sessions.len());
    for summary in sessions {
        let measured = match store.stored_bytes(&summary.id) {
            // Only a store that does not know its sizes pays for measuring them, and only
            // when a size limit needs them.
            Ok(None) if policy.max_total_bytes.is_some() => store
                .load(&summary.id)
                .and_then(|s| s.to_json())
                .map(|json| json.len() as u64),
            Ok(bytes) => Ok(bytes.unwrap_or(0)),
            Err(e) => Err(e),
        };
        match measured {
            Ok(bytes) => sized.push((summary, bytes)),
            // Deleted since the listing: nothing left to prune.
            Err(e) if e.is_not_found() => {}
            Err(e) => unreadable.push(e),
        }
    }
    let considered = sized.len();
    // The sessions and their sizes, kept for the history retention below.
    let listed: Vec<(SessionId, u64)> = sized.iter().map(|(s, b)| (s.id.clone(), *b)).collect();
    let chosen = policy.choose(sized);
    let mut report = PruneReport {
        dry_run: policy.dry_run,
        kept: considered - chosen.len() + in_the_future.len(),
        unreadable,
        in_the_future,
        ..PruneReport::default()
    };
    let deleted: Vec<SessionId> = chosen.iter().map(|v| v.summary.id.clone()).collect();
    for victim in chosen {
        if policy.dry_run {
            report.pruned.push(victim);
            continue;
        }
        match store.delete_if_unchanged(&victim.summary) {
            Ok(()) => report.pruned.push(victim),
            Err(e) => {
                if matches!(e, Error::Changed { .. }) {
                    report.kept += 1;
                }
                report.skipped.push(e);
            }
        }
    }
    if let Some(retention) = &policy.history {
        let now = policy.now.unwrap_or_else(Utc::now);
        let staying = listed.iter().filter(|(id, _)| !deleted.contains(id));
        for (id, bytes) in staying {
            match trim(store, id, retention, now, policy.dry_run, *bytes) {
                Ok(Some(trimmed)) => report.trimmed.push(trimmed),
                Ok(None) => {}
                // Deleted since the listing: nothing left to trim.
                Err(e) if e.is_not_found() && !matches!(e, Error::RevisionNotFound { .. }) => {}
                Err(e) => report.skipped.push(e),
            }
        }
    }
    Ok(report)
}

/// Drops the history `retention` does not keep of session `id` (only says what it would
/// drop, in a dry run); `None` if it keeps all of it. `bytes` is its size as listed.
fn trim<S: SessionStore + ?Sized>(
    store: &S,
    id: &SessionId,
    retention: &HistoryRetention,
    now: DateTime<Utc>,
    dry_run: bool,
    bytes: u64,
) -> Result<Option<TrimmedHistory>> {
    let revisions = store.revisions(id)?;
    let (Some(first), Some(keep)) = (revisions.first(), retention.oldest_kept(&revisions, now))
    else {
        return Ok(None);
    };
    if keep <= first.revision {
        return Ok(None);
    }
    let known = |bytes: u64| (bytes > 0).then_some(bytes);
    let mut trimmed = TrimmedHistory {
        id: id.clone(),
        oldest_before: first.revision,
        oldest_after: keep,
        dropped: keep.as_u64() - first.revision.as_u64(),
        bytes_before: known(bytes),
        bytes_after: None,
    };
    if !dry_run {
        trimmed.dropped = store.trim_history(id, keep)?;
        trimmed.bytes_after = store.stored_bytes(id)?;
    }
    Ok(Some(trimmed))
}
