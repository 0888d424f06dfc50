//! The `SessionStore` trait, revisions, and listings.

mod atomic;
#[cfg(test)]
mod crash_model;
#[cfg(test)]
mod fault_injection;
mod file;
mod fs;
mod journal;
mod lock;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
mod prune;
mod summary;

use std::fmt;

use chrono::{DateTime, Utc};

use crate::bundle::{self, Bundle, ImportIds, Imported};
use crate::clock;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::{ForkAt, Lineage};
use crate::snapshot::SessionSnapshot;
use crate::usage::Cost;

pub use file::{Durability, FileSessionStore, FileStoreBuilder, DEFAULT_MAX_SNAPSHOT_BYTES};
pub use memory::MemorySessionStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresSessionStore, PostgresStoreBuilder, DEFAULT_POSTGRES_SCHEMA};
pub use prune::{PrunePolicy, PruneReason, PruneReport, PruneScope, Pruned};

/// The longest model name a summary holds, in characters.
const MAX_SUMMARY_MODEL_CHARS: usize = 256;

/// What a listing shows of a stored session.
///
/// # Examples
///
/// ```
/// use agent_session::{Message, SessionId, SessionSnapshot, SessionSummary};
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m")
///     .transcript(vec![Message::user("Fix the parser")])
///     .build()?;
/// let summary = SessionSummary::of(&snapshot);
/// assert_eq!(summary.title.as_deref(), Some("Fix the parser"));
/// assert_eq!(summary.message_count, 1);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSummary {
    /// The session's id.
    pub id: SessionId,
    /// The stored revision.
    pub revision: Revision,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// See [`SessionSnapshot::title`].
    pub title: Option<String>,
    /// How many messages its transcript has.
    pub message_count: usize,
    /// The model it talks to (cut to 256 characters and an ellipsis, as the title is cut
    /// to 80: what a summary holds never depends on the session's content).
    pub model: String,
    /// What it has cost so far.
    pub cost: Cost,
    /// Where it was forked from, if it is a fork.
    pub lineage: Option<Lineage>,
    /// Whether it is archived: left out of [`SessionStore::list`], shown by
    /// [`SessionStore::list_scoped`] with [`ListScope::Archived`] or [`ListScope::All`].
    /// ([`SessionSummary::of`] says `false`: archiving is the store's state, not the
    /// snapshot's.)
    pub archived: bool,
}

impl SessionSummary {
    /// Whether the session was last updated later than this machine's clock allows
    /// ([`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE)): saved while a clock was
    /// ahead, or imported before the crate clamped such times. Listings put such sessions
    /// after every other, and prune never deletes them (their age is unknown); saving the
    /// session again gives it the current time.
    #[must_use]
    pub fn is_updated_in_the_future(&self) -> bool {
        clock::is_in_the_future(self.updated_at, Utc::now())
    }

    /// The summary of `snapshot`.
    #[must_use]
    pub fn of(snapshot: &SessionSnapshot) -> Self {
        SessionSummary {
            id: snapshot.id().clone(),
            revision: snapshot.revision(),
            created_at: snapshot.created_at(),
            updated_at: snapshot.updated_at(),
            title: snapshot.title(),
            message_count: snapshot.transcript().len(),
            model: crate::snapshot::cut(&snapshot.options().model, MAX_SUMMARY_MODEL_CHARS),
            cost: snapshot.totals().cost,
            lineage: snapshot.lineage().cloned(),
            archived: false,
        }
    }
}

/// Which sessions a listing shows: see [`SessionStore::list_scoped`].
///
/// # Examples
///
/// ```
/// use agent_session::{ListScope, MemorySessionStore, SessionStore};
///
/// let store = MemorySessionStore::new();
/// assert!(store.list_scoped(ListScope::All)?.sessions.is_empty());
/// assert_eq!(ListScope::default(), ListScope::Active);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListScope {
    /// Sessions that are not archived: what [`SessionStore::list`] shows.
    #[default]
    Active,
    /// Only archived sessions.
    Archived,
    /// Every session.
    All,
}

impl ListScope {
    /// Whether a session that is `archived` or not belongs in this scope.
    #[must_use]
    pub fn includes(self, archived: bool) -> bool {
        match self {
            ListScope::Active => !archived,
            ListScope::Archived => archived,
            ListScope::All => true,
        }
    }
}

/// A session's place in listings, which run from the greatest place to the least: first
/// whether its update time is plausible (sessions updated in the future come after all
/// others), then the time, then the id.
fn place(
    updated_at: DateTime<Utc>,
    id: &SessionId,
    horizon: DateTime<Utc>,
) -> (bool, DateTime<Utc>, &SessionId) {
    (updated_at <= horizon, updated_at, id)
}

/// The result of [`SessionStore::list`]: the sessions that could be read, newest first, and
/// an error for each stored entry that could not.
///
/// One damaged file never hides the others: it shows up in `unreadable` instead.
///
/// # Examples
///
/// ```
/// use agent_session::{MemorySessionStore, SessionStore};
///
/// let listing = MemorySessionStore::new().list()?;
/// assert!(listing.sessions.is_empty() && listing.unreadable.is_empty());
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SessionList {
    /// Readable sessions, most recently updated first (ties broken by id, descending),
    /// except that sessions updated in the future
    /// ([`SessionSummary::is_updated_in_the_future`]) come after all the others.
    pub sessions: Vec<SessionSummary>,
    /// Why each unreadable entry could not be read.
    pub unreadable: Vec<Error>,
}

impl SessionList {
    /// A listing of `sessions`, sorted newest first (most recently updated, then id
    /// descending, sessions updated in the future last), and the errors of the entries that
    /// could not be read. For custom [`SessionStore`]s.
    #[must_use]
    pub fn new(mut sessions: Vec<SessionSummary>, unreadable: Vec<Error>) -> Self {
        let horizon = clock::horizon(Utc::now());
        sessions.sort_by(|a, b| {
            place(b.updated_at, &b.id, horizon).cmp(&place(a.updated_at, &a.id, horizon))
        });
        SessionList {
            sessions,
            unreadable,
        }
    }
}

/// Where a page of a listing starts: just after the session it names, in the listing's
/// order (most recently updated first, then id descending; sessions updated in the future
/// last). Made by [`SessionStore::list_page`]; its text form (`Display` / `FromStr`)
/// survives a round trip through a command line or a URL, whatever the time.
///
/// A cursor also carries the latest plausible time of the walk it belongs to
/// ([`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE) after the clock when the walk
/// began), so that a session whose time was in the future when the walk began stays where
/// the walk's first page put it, at the end, even if the clock catches up with it midway.
///
/// # Examples
///
/// ```
/// use agent_session::ListCursor;
///
/// let text = "2026-11-29T10:00:00Z/abc/2026-12-01T09:05:00Z";
/// let cursor: ListCursor = text.parse()?;
/// assert_eq!(cursor.to_string(), text);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    updated_at: DateTime<Utc>,
    id: SessionId,
    /// The latest plausible time of the walk: later times are in the listing's last part.
    horizon: DateTime<Utc>,
}

impl ListCursor {
    /// The cursor just after `summary`, for a walk that begins now.
    #[must_use]
    pub fn after(summary: &SessionSummary) -> Self {
        ListCursor::after_in(summary, clock::horizon(Utc::now()))
    }

    /// The cursor just after `summary`, in a walk whose latest plausible time is `horizon`.
    fn after_in(summary: &SessionSummary, horizon: DateTime<Utc>) -> Self {
        ListCursor {
            updated_at: summary.updated_at,
            id: summary.id.clone(),
            horizon,
        }
    }

    /// The time and id of the session the cursor names, and the walk's latest plausible
    /// time, for stores paging from an index.
    #[cfg(feature = "postgres")]
    pub(crate) fn position(&self) -> (DateTime<Utc>, &SessionId, DateTime<Utc>) {
        (self.updated_at, &self.id, self.horizon)
    }

    /// A cursor at the session updated at `updated_at` named `id`, in a walk whose latest
    /// plausible time is `horizon`.
    #[cfg(feature = "postgres")]
    pub(crate) fn at(updated_at: DateTime<Utc>, id: SessionId, horizon: DateTime<Utc>) -> Self {
        ListCursor {
            updated_at,
            id,
            horizon,
        }
    }

    /// Whether `summary` comes after this cursor in the walk's order.
    fn precedes(&self, summary: &SessionSummary) -> bool {
        place(summary.updated_at, &summary.id, self.horizon)
            < place(self.updated_at, &self.id, self.horizon)
    }
}

/// The text form of a cursor's time: RFC 3339 in years 0 to 9999, the years it can
/// write and read back, otherwise `@` and the seconds (and nanoseconds) since 1970.
fn cursor_time(at: DateTime<Utc>) -> String {
    use chrono::Datelike;
    if (0..=9999).contains(&at.year()) {
        at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
    } else {
        format!("@{}.{:09}", at.timestamp(), at.timestamp_subsec_nanos())
    }
}

fn parse_cursor_time(text: &str) -> Option<DateTime<Utc>> {
    if let Some(epoch) = text.strip_prefix('@') {
        let (seconds, nanos) = epoch.split_once('.')?;
        if nanos.len() != 9 || !nanos.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        return DateTime::from_timestamp(seconds.parse().ok()?, nanos.parse().ok()?);
    }
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

impl fmt::Display for ListCursor {
    /// `TIME/ID/HORIZON`: the session's update time and id, then the walk's latest
    /// plausible time.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            cursor_time(self.updated_at),
            self.id,
            cursor_time(self.horizon)
        )
    }
}

impl std::str::FromStr for ListCursor {
    type Err = Error;

    /// Parses `TIME/ID/HORIZON`, or `TIME/ID` (as release 0.1 printed it: the walk then
    /// goes on as if it began now).
    fn from_str(text: &str) -> Result<Self> {
        let invalid = || Error::InvalidArgument {
            reason: format!(
                "{text:?} is not a listing cursor (TIME/ID/HORIZON, as printed with a page)"
            ),
        };
        let mut parts = text.split('/');
        let (Some(time), Some(id)) = (parts.next(), parts.next()) else {
            return Err(invalid());
        };
        let horizon = match (parts.next(), parts.next()) {
            (None, _) => clock::horizon(Utc::now()),
            (Some(horizon), None) => parse_cursor_time(horizon).ok_or_else(invalid)?,
            (Some(_), Some(_)) => return Err(invalid()),
        };
        Ok(ListCursor {
            updated_at: parse_cursor_time(time).ok_or_else(invalid)?,
            id: SessionId::parse(id).map_err(|_| invalid())?,
            horizon,
        })
    }
}

/// One page of a listing: made by [`SessionStore::list_page`].
///
/// # Examples
///
/// ```
/// use agent_session::{MemorySessionStore, SessionStore};
///
/// let page = MemorySessionStore::new().list_page(50, None)?;
/// assert!(page.sessions.is_empty() && page.next.is_none());
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SessionPage {
    /// At most `limit` sessions, in the listing's order.
    pub sessions: Vec<SessionSummary>,
    /// The entries that could not be read. With the default [`SessionStore::list_page`],
    /// all of them on the first page (no cursor) and none on the others; a store that
    /// pages from an index (such as `PostgresSessionStore`) reports each on the page it
    /// falls in.
    pub unreadable: Vec<Error>,
    /// Where the next page starts, if there are more sessions.
    pub next: Option<ListCursor>,
}

impl SessionPage {
    /// The page of `listing` that starts after `after` and holds at most `limit` sessions.
    /// For custom stores implementing [`SessionStore::list_page`] over their own listing.
    #[must_use]
    pub fn of(listing: SessionList, limit: usize, after: Option<&ListCursor>) -> Self {
        let first_page = after.is_none();
        // The walk's order, fixed when it began: a session's place may have moved since the
        // listing was sorted (its time was in the future then, and is not now).
        let horizon = after.map_or_else(|| clock::horizon(Utc::now()), |cursor| cursor.horizon);
        let mut all = listing.sessions;
        all.sort_by(|a, b| {
            place(b.updated_at, &b.id, horizon).cmp(&place(a.updated_at, &a.id, horizon))
        });
        let mut sessions = all
            .into_iter()
            .skip_while(|s| after.is_some_and(|cursor| !cursor.precedes(s)));
        let page: Vec<SessionSummary> = sessions.by_ref().take(limit).collect();
        let more = sessions.next().is_some();
        SessionPage {
            next: if more {
                page.last().map(|last| ListCursor::after_in(last, horizon))
            } else {
                None
            },
            sessions: page,
            unreadable: if first_page {
                listing.unreadable
            } else {
                Vec::new()
            },
        }
    }
}

/// Where sessions are kept.
///
/// The trait is synchronous and object-safe: `Arc<dyn SessionStore>` works, and stores are
/// `Send + Sync` so one store serves many threads. File I/O is blocking by nature; a network
/// store wraps its own client. From async code, call it through your runtime's
/// blocking-task facility if saves may be slow.
///
/// # Contract
///
/// - [`save`](Self::save) is compare-and-swap: it stores `snapshot` at
///   `snapshot.revision().next()` only if the stored revision is still
///   `snapshot.revision()` (or, for [`Revision::NEW`], if nothing is stored under that id),
///   and fails with [`Error::Conflict`] otherwise, changing nothing. The stores of this
///   crate write nothing for a snapshot that is exactly what is stored at its revision
///   (loaded, or saved by a [`Session`](crate::Session), and unchanged since): they return
///   that revision, so other writers holding it meet no conflict over a change that never
///   happened.
/// - [`load`](Self::load) returns the snapshot with its stored revision set
///   ([`SessionSnapshot::with_revision`]).
/// - A failed call changes nothing that is stored, with exceptions a store must say in
///   its error: [`Error::NotDurable`], for a save whose new revision is in place but may
///   not survive a power loss; a delete that removed the session, or an archive change
///   that was made, but could not be made durable; and an import that failed midway and
///   could not take back what it wrote ([`Error::ImportIncomplete`]).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_session::{MemorySessionStore, Revision, SessionId, SessionSnapshot, SessionStore};
///
/// let store: Arc<dyn SessionStore> = Arc::new(MemorySessionStore::new());
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s1")?, "m").build()?;
/// let revision = store.save(&snapshot)?;
/// assert_eq!(revision, Revision::from_u64(1));
///
/// // Saving the same (now stale) snapshot again is a conflict.
/// assert!(store.save(&snapshot).unwrap_err().is_conflict());
/// assert_eq!(store.load(snapshot.id())?.revision(), revision);
/// # Ok::<(), agent_session::Error>(())
/// ```
pub trait SessionStore: Send + Sync {
    /// Saves `snapshot` if the stored revision is still `snapshot.revision()`, and returns
    /// the new revision.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if another writer moved the revision (or created the session
    /// first); storage errors otherwise. Nothing is changed on error, except after
    /// [`Error::NotDurable`] (see the contract above).
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision>;

    /// Loads the stored snapshot of `id`.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is none; a corrupt-kind error if what is stored cannot
    /// be trusted.
    fn load(&self, id: &SessionId) -> Result<SessionSnapshot>;

    /// Lists stored sessions, newest first.
    ///
    /// # Errors
    ///
    /// Only if the store as a whole cannot be read; a single unreadable session is reported
    /// in [`SessionList::unreadable`].
    fn list(&self) -> Result<SessionList>;

    /// One page of [`list`](Self::list): at most `limit` sessions, starting just after
    /// `after` (from the newest with `None`). Follow [`SessionPage::next`] to walk a
    /// store of any size page by page; a session saved meanwhile moves to the front, so a
    /// walk sees each session at most once, at the place it had when the walk reached it.
    ///
    /// The default implementation pages [`list`](Self::list), so it costs a whole listing
    /// per page (for [`FileSessionStore`], a small summary file per session, whatever the
    /// transcripts' sizes).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `limit` is 0 (a page that can hold nothing would end
    /// any walk); otherwise as [`list`](Self::list).
    fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        check_page_limit(limit)?;
        Ok(SessionPage::of(self.list()?, limit, after))
    }

    /// Deletes the stored session `id`.
    ///
    /// A session saved again under the same id starts over at revision 1, so a writer
    /// still holding a revision of the deleted session can collide with the new one once
    /// it reaches that revision; delete sessions only when nobody is working on them.
    /// Forks of the session keep their own copy of its history and stay loadable.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is none; storage errors otherwise.
    fn delete(&self, id: &SessionId) -> Result<()>;

    /// Lists the sessions in `scope`, newest first: [`ListScope::Active`] is
    /// [`list`](Self::list); archived sessions ([`set_archived`](Self::set_archived)) are
    /// shown only by the other scopes.
    ///
    /// The default implementation suits a store that cannot archive: every session is
    /// active, so `Active` and `All` are [`list`](Self::list) and `Archived` is empty.
    ///
    /// # Errors
    ///
    /// As [`list`](Self::list).
    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        match scope {
            ListScope::Archived => Ok(SessionList::default()),
            ListScope::Active | ListScope::All => self.list(),
        }
    }

    /// Archives session `id` (`true`), taking it out of [`list`](Self::list) without
    /// rewriting or changing it, or brings it back (`false`). An archived session still
    /// loads, saves and forks as before, and stays archived across saves. Archiving an
    /// archived session, or restoring an active one, does nothing.
    ///
    /// A custom store that implements it keeps the state apart from the snapshot (the
    /// revision does not change) and must also leave archived sessions out of
    /// [`list`](Self::list), show them in [`list_scoped`](Self::list_scoped) with
    /// [`SessionSummary::archived`] set, and forget the state when the session is deleted,
    /// so that a new session under the same id starts active.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such session; [`Error::Unsupported`] from the
    /// default implementation, for stores that cannot archive; storage errors otherwise
    /// (for [`FileSessionStore`], a failed directory fsync after the marker changed: the
    /// change is made but may not survive a power loss).
    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        let _ = (id, archived);
        Err(Error::Unsupported {
            store: std::any::type_name::<Self>(),
            operation: "archive sessions",
        })
    }

    /// Deletes the session `listed` describes only if it is still as listed: the same
    /// revision, the same creation time (a session deleted and saved again starts over at
    /// revision one) and the same archive state. [`prune`](Self::prune) deletes through
    /// it, so a session saved, re-created, archived or restored after it was chosen is
    /// kept.
    ///
    /// The default implementation compares the revision and creation time, then deletes,
    /// in two steps (a save landing in between is lost) and without the archive state;
    /// stores with a lock or transactions do it all at once, as [`FileSessionStore`] and
    /// [`MemorySessionStore`] do.
    ///
    /// # Errors
    ///
    /// [`Error::Changed`] if the session is no longer as listed (nothing is deleted);
    /// [`Error::NotFound`] if there is no such session; storage errors otherwise.
    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        let stored = self.load(&listed.id)?;
        check_unchanged(
            listed,
            Some((stored.revision(), stored.created_at(), listed.archived)),
        )?;
        self.delete(&listed.id)
    }

    /// How many bytes the store uses for session `id`, if it can tell: for
    /// [`FileSessionStore`], its snapshot file plus its journal; for
    /// [`MemorySessionStore`], the length of its JSON form. [`prune`](Self::prune) uses it
    /// for [`PrunePolicy::max_total_bytes`].
    ///
    /// The default implementation returns `Ok(None)`; `prune` then measures a session's
    /// JSON form by loading it, and only when a size limit is set.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such session (stores that can tell); storage
    /// errors otherwise.
    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        let _ = id;
        Ok(None)
    }

    /// Forks session `id` at `at` into a new session `new_id`, saved at revision 1, and
    /// returns the fork as stored. The parent is read, never changed; the fork records it
    /// ([`SessionSnapshot::lineage`]) and shows it in listings
    /// ([`SessionSummary::lineage`]). See [`SessionSnapshot::fork`] for what the fork
    /// keeps.
    ///
    /// The default implementation loads the parent and saves the fork: the fork holds its
    /// own copy of the shared history (so deleting the parent never affects it), and both
    /// stores in this crate keep it that way.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no session `id`; [`Error::AlreadyExists`] if
    /// `new_id` is taken; [`Error::InvalidArgument`] for a fork point the parent does not
    /// have (see [`SessionSnapshot::fork`]); storage errors otherwise.
    fn fork(&self, id: &SessionId, at: ForkAt, new_id: SessionId) -> Result<SessionSnapshot> {
        let mut fork = self.load(id)?.fork(new_id, at)?;
        let revision = self.save(&fork).map_err(already_exists)?;
        // Exactly what was just stored, so a session resumed from it appends its next save.
        fork.mark_stored(revision);
        Ok(fork)
    }

    /// Deletes what `policy` says should go, oldest first, or with
    /// [`PrunePolicy::dry_run`] only reports it. Each session is deleted through
    /// [`delete_if_unchanged`](Self::delete_if_unchanged) at the revision the listing
    /// showed, so one saved meanwhile is kept (and reported in
    /// [`PruneReport::skipped`]). Unreadable entries are never deleted.
    ///
    /// # Errors
    ///
    /// If the store cannot be listed; a session that cannot be deleted is reported in
    /// [`PruneReport::skipped`] instead.
    fn prune(&self, policy: &PrunePolicy) -> Result<PruneReport> {
        prune::prune(self, policy)
    }

    /// Exports the sessions `ids` as a [`Bundle`]: one self-contained, versioned file
    /// that [`import`](Self::import) reads into any store, on any machine.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load), for the first session that cannot be loaded;
    /// [`Error::InvalidArgument`] if an id is given twice.
    fn export(&self, ids: &[SessionId]) -> Result<Bundle> {
        let sessions = ids.iter().map(|id| self.load(id)).collect::<Result<_>>()?;
        Bundle::new(sessions)
    }

    /// Imports every session of `bundle` as a new session (revision 1), under the ids
    /// `ids` chooses, and returns where each went. All or nothing: if any target id is
    /// taken nothing is written, and if a save fails midway the sessions already
    /// imported are deleted again. (That holds against errors and concurrent writers; a
    /// crash midway leaves the sessions saved before it.) A fork whose parent is imported
    /// with it points at the parent's new id. The bundle's snapshots were validated like a
    /// load when it was decoded ([`Bundle::from_json`]).
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`] if a target id is stored; [`Error::InvalidArgument`] if
    /// `ids` maps two sessions to one id or a fork onto its parent's id; storage errors
    /// otherwise, or [`Error::ImportIncomplete`] if some sessions written before the error
    /// could not be deleted again.
    fn import(&self, bundle: &Bundle, ids: &ImportIds) -> Result<Vec<Imported>> {
        bundle::import(self, bundle, ids)
    }
}

impl<S: SessionStore + ?Sized> SessionStore for std::sync::Arc<S> {
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        (**self).save(snapshot)
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        (**self).load(id)
    }

    fn list(&self) -> Result<SessionList> {
        (**self).list()
    }

    fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        (**self).list_page(limit, after)
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        (**self).delete(id)
    }

    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        (**self).list_scoped(scope)
    }

    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        (**self).set_archived(id, archived)
    }

    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        (**self).delete_if_unchanged(listed)
    }

    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        (**self).stored_bytes(id)
    }

    fn fork(&self, id: &SessionId, at: ForkAt, new_id: SessionId) -> Result<SessionSnapshot> {
        (**self).fork(id, at, new_id)
    }

    fn prune(&self, policy: &PrunePolicy) -> Result<PruneReport> {
        (**self).prune(policy)
    }

    fn export(&self, ids: &[SessionId]) -> Result<Bundle> {
        (**self).export(ids)
    }

    fn import(&self, bundle: &Bundle, ids: &ImportIds) -> Result<Vec<Imported>> {
        (**self).import(bundle, ids)
    }
}

/// Decides a conditional delete: `stored` is the revision, creation time and archive
/// state the store holds now for the session `listed` describes.
pub(crate) fn check_unchanged(
    listed: &SessionSummary,
    stored: Option<(Revision, DateTime<Utc>, bool)>,
) -> Result<()> {
    let id = &listed.id;
    let Some((revision, created_at, archived)) = stored else {
        return Err(Error::NotFound { id: id.clone() });
    };
    let change = if created_at != listed.created_at {
        format!(
            "it was deleted and created again at {created_at}, after the listed one of {}",
            listed.created_at
        )
    } else if revision != listed.revision {
        format!(
            "it was saved at revision {revision} after the listed revision {}",
            listed.revision
        )
    } else if archived != listed.archived {
        if archived {
            "it was archived"
        } else {
            "it was restored from the archive"
        }
        .to_owned()
    } else {
        return Ok(());
    };
    Err(Error::Changed {
        id: id.clone(),
        change,
    })
}

/// A save of a new session that found its id taken reports it as such, not as a lost
/// update.
pub(crate) fn already_exists(error: Error) -> Error {
    match error {
        Error::Conflict {
            id,
            expected,
            found: Some(_),
        } if expected == Revision::NEW => Error::AlreadyExists { id },
        other => other,
    }
}

/// Refuses a page size of 0, for [`SessionStore::list_page`] implementations.
pub(crate) fn check_page_limit(limit: usize) -> Result<()> {
    if limit == 0 {
        return Err(Error::InvalidArgument {
            reason: "a page of sessions must hold at least one (limit 0)".to_owned(),
        });
    }
    Ok(())
}

/// Decides a compare-and-swap: `stored` is what the store holds now.
pub(crate) fn check_revision(
    id: &SessionId,
    expected: Revision,
    stored: Option<Revision>,
) -> Result<()> {
    let ok = match stored {
        None => expected == Revision::NEW,
        Some(found) => found == expected,
    };
    if !ok {
        return Err(Error::Conflict {
            id: id.clone(),
            expected,
            found: stored,
        });
    }
    if expected.as_u64() == u64::MAX {
        // `next()` saturates; saving again at the same revision would defeat the
        // compare-and-swap for every later writer.
        return Err(Error::InvalidArgument {
            reason: format!("session {id} is at the largest revision and cannot be saved again"),
        });
    }
    Ok(())
}
