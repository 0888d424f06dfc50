//! Where sessions are kept: the [`SessionStore`] trait (a small core that every store
//! implements), what listings show ([`listing`]), the checks a store makes ([`checks`]),
//! and the crate's stores: [`FileSessionStore`] (`file/`), [`MemorySessionStore`] and,
//! with the `postgres` feature, `PostgresSessionStore`.

mod async_store;
mod checks;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod columns;
mod file;
mod filter;
mod head_only;
pub(crate) mod lease_rules;
mod listing;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod search;
#[cfg(feature = "sqlite")]
mod sqlite;

// For the links in the docs: the defaults' errors come from `head_only`.
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::id::{Revision, SessionId};
use crate::lease::{Lease, LeaseRequest};
#[cfg(doc)]
use crate::snapshot::EntryKind;
use crate::snapshot::{History, RevisionInfo, SessionSnapshot};

pub(crate) use async_store::{ready, InlineStore};
pub use async_store::{AsyncSessionStore, BlockingStore};
pub use checks::{
    check_page_limit, check_revision, check_stored_id, check_unchanged, StoredVersion,
};
pub use file::{Durability, FileSessionStore, FileStoreBuilder};
pub use filter::{IndexedMetadata, ListFilter, MAX_INDEXED_KEYS, MAX_INDEXED_VALUE_BYTES};
pub use listing::{ListCursor, ListScope, SessionList, SessionPage, SessionSummary};
pub use memory::MemorySessionStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresSessionStore, PostgresStoreBuilder, DEFAULT_POSTGRES_SCHEMA};
pub use search::{
    searchable_text, MessageHit, SearchPage, SearchQuery, SessionHit, MAX_QUERY_WORDS,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteSessionStore, SqliteStoreBuilder};

/// The default largest snapshot a store reads or writes: 256 MiB (for the file store, the
/// size of a snapshot file; for the PostgreSQL store, of a row's snapshot).
pub const DEFAULT_MAX_SNAPSHOT_BYTES: u64 = 256 * 1024 * 1024;

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
/// - [`load`](Self::load) returns the snapshot with its stored revision set, marked as
///   the stored one ([`SessionSnapshot::stored_at`]).
/// - A failed call changes nothing that is stored, with exceptions a store must say in
///   its error: [`Error::NotDurable`], for a save whose new revision is in place but may
///   not survive a power loss; a delete that removed the session, or an archive change
///   that was made, but could not be made durable; and an import that failed midway and
///   could not take back what it wrote ([`Error::ImportIncomplete`]).
///
/// # Implementing a store
///
/// Four methods are required: [`save`](Self::save), [`load`](Self::load),
/// [`list`](Self::list) and [`delete`](Self::delete). The others are the storage
/// primitives the session workflows ([`SessionStoreExt`](crate::SessionStoreExt): fork,
/// rewind, prune, export, import) and time travel are built on; each has a default that
/// is correct for a store without the feature, and a store that can do better overrides
/// it:
///
/// | method | default | override when |
/// |---|---|---|
/// | [`list_page`](Self::list_page) | pages a whole [`list`](Self::list) | the backend can page (an index, a cursor) |
/// | [`list_scoped`](Self::list_scoped) | no archived sessions: `All` and `Active` are [`list`](Self::list) | it implements `set_archived` (it must then show archived sessions in `Archived` and `All`) |
/// | [`set_archived`](Self::set_archived) | [`Error::Unsupported`] | it can keep an archive state |
/// | [`delete_if_unchanged`](Self::delete_if_unchanged) | load, compare, delete: two steps, so a save landing between them is lost | it has a lock, a transaction or a conditional delete |
/// | [`stored_bytes`](Self::stored_bytes) | `None` (prune measures the JSON form) | it knows the stored size |
/// | [`load_at`](Self::load_at), [`revisions`](Self::revisions), [`history`](Self::history) | only the head is kept | it keeps a log (a checkpoint and [`LogEntry`](crate::LogEntry) bytes, folded with [`SessionLog`](crate::SessionLog)) |
/// | [`restore`](Self::restore) | `load`, `load_at`, `restore_from`, `save` | it can append the restore without reading the session |
/// | [`trim_history`](Self::trim_history) | nothing before the head to drop | it keeps a log ([`SessionLog::trim`](crate::SessionLog::trim)) |
///
/// Make the checks as the crate's stores do, with [`check_revision`] (the
/// compare-and-swap of a save), [`check_unchanged`] (the conditional delete),
/// [`check_page_limit`] and [`check_stored_id`], and tag decoding errors with
/// [`Error::at`] so they name the row or key. Then run the crate's store contract suite
/// on it: `agent_session::testing::contract` (the `testing` feature), as
/// `examples/custom_store.rs` does.
///
/// # Writing a wrapper
///
/// A store that wraps another (adding metrics, caching, encryption, tracing) must forward
/// **every** method, the five provided ones included: a provided method it leaves out is
/// not the inner store's but the default above, so archived sessions drop out of
/// `list_scoped(All)`, `set_archived` fails as unsupported, `delete_if_unchanged` loses
/// the inner store's atomicity (prune could then delete a session saved after it was
/// listed), every page costs a whole listing, and the history shrinks to the head. The
/// workflows of [`SessionStoreExt`](crate::SessionStoreExt) need no forwarding: they come
/// with every `SessionStore`. `impl SessionStore for Arc<S>` is such a wrapper,
/// forwarding every method.
/// The contract suite catches a wrapper that forgets `list_scoped` or `set_archived`.
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
/// // Another snapshot made at the same (now stale) revision is a conflict.
/// let other = SessionSnapshot::builder(SessionId::parse("s1")?, "other-model").build()?;
/// assert!(store.save(&other).unwrap_err().is_conflict());
/// assert_eq!(store.load(snapshot.id())?.revision(), revision);
///
/// // The same snapshot again is a retry (its first acknowledgement may have been lost):
/// // it gets its revision back, and nothing is stored twice.
/// assert_eq!(store.save(&snapshot)?, revision);
/// # Ok::<(), agent_session::Error>(())
/// ```
pub trait SessionStore: Send + Sync {
    /// Saves `snapshot` if the stored revision is still `snapshot.revision()`, and returns
    /// the new revision.
    ///
    /// A store may recognise a save retried after its acknowledgement was lost (its last
    /// change is exactly what `snapshot` writes) and return the revision it was stored at
    /// instead of a conflict, as [`MemorySessionStore`] and [`FileSessionStore`] do; a
    /// store that does not answers [`Error::Conflict`], and the caller reloads and
    /// compares.
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

    /// The metadata keys whose values this store's summaries carry
    /// ([`SessionSummary::metadata`]), declared when it was opened; none by default.
    fn indexed_metadata(&self) -> IndexedMetadata {
        IndexedMetadata::default()
    }

    /// The sessions `filter` selects, newest first, with the sessions that could not be
    /// read: by scope, model, time of the last change, parent, and values of the metadata
    /// keys the store indexes ([`indexed_metadata`](Self::indexed_metadata)).
    ///
    /// The default implementation filters [`list_scoped`](Self::list_scoped): it reads
    /// what a listing reads (for [`FileSessionStore`], summaries, never transcripts), and
    /// suits every store whose summaries carry [`SessionSummary::metadata`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a metadata key the store does not index (or a value
    /// too large to index); otherwise as [`list_scoped`](Self::list_scoped).
    fn list_filtered(&self, filter: &ListFilter) -> Result<SessionList> {
        filter.check(&self.indexed_metadata())?;
        let mut listing = self.list_scoped(filter.list_scope())?;
        listing.sessions.retain(|s| filter.matches(s));
        Ok(listing)
    }

    /// One page of [`list_filtered`](Self::list_filtered), as
    /// [`list_page`](Self::list_page) pages [`list`](Self::list).
    ///
    /// The default implementation pages [`list_filtered`](Self::list_filtered).
    ///
    /// # Errors
    ///
    /// As [`list_page`](Self::list_page) and [`list_filtered`](Self::list_filtered).
    fn list_page_filtered(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        check_page_limit(limit)?;
        Ok(SessionPage::of(self.list_filtered(filter)?, limit, after))
    }

    /// Searches the sessions `filter` lists for messages holding every word of `query`
    /// (user and assistant text, tool output; metadata values only if the query asks),
    /// in their whole history unless the query asks for the view only. Returns at most
    /// `limit` sessions, newest first, each with the messages that matched and where they
    /// stand; follow [`SearchPage::next`] for more.
    ///
    /// Every store finds the same messages (the matching is the crate's, see
    /// [`SearchQuery`]). The default implementation scans: it pages the filtered listing
    /// and reads each session's [`history`](Self::history), so a search costs a listing
    /// plus a history read per session it passes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `limit` is 0 or the filter names a metadata key the
    /// store does not index; otherwise as [`list_page`](Self::list_page). A session that
    /// cannot be read is reported in [`SearchPage::unreadable`].
    fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        search::scan(self, query, filter, limit, after)
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
        Err(head_only::cannot_archive::<Self>())
    }

    /// Deletes the session `listed` describes only if it is still as listed: the same
    /// revision, the same creation time (a session deleted and saved again starts over at
    /// revision one) and the same archive state. [`prune`](crate::SessionStoreExt::prune) deletes through
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
        head_only::check_still_listed(listed, &self.load(&listed.id)?)?;
        self.delete(&listed.id)
    }

    /// How many bytes the store uses for session `id`, if it can tell: for
    /// [`FileSessionStore`], its snapshot file plus its journal; for
    /// [`MemorySessionStore`], the length of its JSON form. [`prune`](crate::SessionStoreExt::prune) uses it
    /// for [`PrunePolicy::max_total_bytes`](crate::PrunePolicy::max_total_bytes).
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

    /// The session exactly as it was at `revision`: its view, tool-call records, usage,
    /// options and metadata then. Not marked as stored (saving it would conflict with the
    /// head); to make it the head again, [`restore`](Self::restore) it.
    ///
    /// The stores of this crate keep every revision since the session was created (or
    /// since the oldest one a history retention policy kept). The default implementation
    /// suits a store that keeps only the head: it returns the head for its own revision.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no session `id`; [`Error::RevisionNotFound`] (a
    /// not-found kind) if the store does not keep `revision`; a corrupt-kind error if what
    /// is stored cannot be trusted.
    fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        head_only::at(self.load(id)?, revision)
    }

    /// The revisions the store keeps of session `id`, oldest first: each one's time, kind
    /// of change ([`EntryKind::Checkpoint`] for the oldest kept) and view length.
    ///
    /// The default implementation suits a store that keeps only the head: one revision.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load).
    fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        Ok(head_only::revisions(&self.load(id)?))
    }

    /// Everything the store keeps of session `id`'s history: every message its revisions'
    /// views held, with where each stands at the head (in the view, rewound, compacted
    /// or replaced).
    ///
    /// The default implementation suits a store that keeps only the head: the view.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load).
    fn history(&self, id: &SessionId) -> Result<History> {
        Ok(head_only::history(&self.load(id)?))
    }

    /// Makes revision `revision` of session `id` the head again, as a new revision (its
    /// view, options and metadata; usage stays counted), and returns the new revision.
    /// Undoes a rewind, or goes back anywhere the store keeps; the revisions in between
    /// stay in the history.
    ///
    /// The default implementation loads the head and `revision`
    /// ([`load_at`](Self::load_at)) and saves the head restored
    /// ([`SessionSnapshot::restore_from`]). [`FileSessionStore`] appends the restore
    /// without reading the session (after its first restore of a session in a process,
    /// which reads the log's entry heads once).
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no session `id`; [`Error::RevisionNotFound`] if
    /// the store does not keep `revision`; [`Error::Conflict`] if another writer saved the
    /// session meanwhile; storage errors otherwise. Nothing is written on error.
    fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        restore_by_saving(self, id, revision)
    }

    /// Drops the revisions of session `id` before `oldest`: `oldest` becomes the first
    /// revision the store keeps (its state the log's new checkpoint), and what only the
    /// dropped revisions held (messages rewound, compacted or replaced before it) is gone.
    /// The head and every revision from `oldest` on load exactly as before; the revision
    /// does not move, so a session loaded before still saves. Returns how many revisions
    /// were dropped (0 if `oldest` is already the oldest kept). A retention policy calls
    /// it: [`PrunePolicy::history`](crate::PrunePolicy::history).
    ///
    /// A restore of a dropped revision keeps the view it restored (written out in its
    /// entry). A fork that shares the messages of a dropped revision (file store) gets its
    /// own copy first, so no fork breaks.
    ///
    /// The default implementation suits a store that keeps only the head: there is nothing
    /// before it to drop.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no session `id`; [`Error::RevisionNotFound`] if
    /// the store does not keep `oldest` (dropped already, or later than the head); a
    /// corrupt-kind error if the stored log does not load (nothing is dropped from a
    /// damaged log); storage errors otherwise. Nothing is changed on error, and a crash
    /// leaves the log before or after, whole.
    fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        head_only::trim(&self.load(id)?, oldest)
    }

    /// Takes a lease on session `id` for writing (see [`Lease`](crate::Lease)): one writer per
    /// session, and saves fenced by the lease's epoch
    /// ([`SessionSnapshot::with_lease`]). Read-only loads never need one.
    ///
    /// A store that leases keeps the lease apart from the snapshot (the revision does not
    /// change), raises the epoch on every acquisition, refuses a save under an older epoch
    /// ([`Error::Fenced`]) and a save under none while a lease is live
    /// ([`Error::Leased`]), and keeps the epoch when the session is deleted (so a writer
    /// fenced off stays fenced off when the id is used again). Leases fence saves; a
    /// [`restore`](Self::restore) is refused while a lease is live; the other lifecycle
    /// operations (delete, archive, trim) are not fenced. [`FileSessionStore`] makes a
    /// lease's record durable before the first save under it, so after a power cut every
    /// new epoch is above every one the session's data was saved under; a lease no save
    /// was made under may have its epoch handed out again (its holder ended with the
    /// power).
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if there is no such session; [`Error::Leased`], naming the
    /// holder, if another lease is live and `request` does not take over;
    /// [`Error::InvalidArgument`] for a time to live under
    /// [`MIN_LEASE_TTL`](crate::MIN_LEASE_TTL);
    /// [`Error::Unsupported`] from the default implementation, for stores that protect
    /// sessions by compare-and-swap only; storage errors otherwise.
    fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        let _ = (id, request);
        Err(head_only::cannot_lease::<Self>())
    }

    /// Extends `lease` to `ttl` from now: the heartbeat of a holder that keeps the
    /// session open. Returns the renewed lease (same epoch).
    ///
    /// # Errors
    ///
    /// [`Error::Fenced`] if the lease is no longer the session's (taken over or
    /// released); [`Error::Unsupported`] from the default implementation; storage errors
    /// otherwise.
    fn renew_lease(&self, lease: &Lease, ttl: std::time::Duration) -> Result<Lease> {
        let _ = (lease, ttl);
        Err(head_only::cannot_lease::<Self>())
    }

    /// Ends `lease`, so another writer can take the session at once. Releasing a lease
    /// that was taken over or released already does nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] from the default implementation; storage errors otherwise.
    fn release_lease(&self, lease: &Lease) -> Result<()> {
        let _ = lease;
        Err(head_only::cannot_lease::<Self>())
    }

    /// The live leases of the store's sessions (who has which session open for writing,
    /// since when), in session id order. Empty from the default implementation: a store
    /// that cannot lease has none.
    ///
    /// # Errors
    ///
    /// Storage errors.
    fn leases(&self) -> Result<Vec<Lease>> {
        Ok(Vec::new())
    }

    /// This store for async code: every operation as a future ([`AsyncSessionStore`]),
    /// on the same stored sessions. [`Harness`](crate::Harness) calls it once, for its
    /// async entry points and for autosave from [`Harness::send`](crate::Harness::send).
    ///
    /// The default implementation runs each call on tokio's blocking pool
    /// ([`BlockingStore`]), which suits any store that does I/O (the file store, and custom
    /// stores). [`MemorySessionStore`] runs its calls on the caller's task; a store with
    /// an async client of its own (the PostgreSQL store) returns itself.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_session::{AsyncSessionStore, MemorySessionStore, SessionStore};
    ///
    /// let store = Arc::new(MemorySessionStore::new());
    /// let for_async = Arc::clone(&store).into_async();
    /// # let _ = for_async;
    /// ```
    fn into_async(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn AsyncSessionStore>
    where
        Self: Sized + 'static,
    {
        std::sync::Arc::new(BlockingStore::from_arc(self))
    }
}

/// [`SessionStore::restore`] through the store's own `load`, `load_at` and `save`: the
/// default, and the way back of a store whose faster restore does not apply.
pub(crate) fn restore_by_saving<S: SessionStore + ?Sized>(
    store: &S,
    id: &SessionId,
    revision: Revision,
) -> Result<Revision> {
    let mut head = store.load(id)?;
    let past = store.load_at(id, revision)?;
    head.restore_from(&past)?;
    store.save(&head)
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

    fn indexed_metadata(&self) -> IndexedMetadata {
        (**self).indexed_metadata()
    }

    fn list_filtered(&self, filter: &ListFilter) -> Result<SessionList> {
        (**self).list_filtered(filter)
    }

    fn list_page_filtered(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        (**self).list_page_filtered(filter, limit, after)
    }

    fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        (**self).search(query, filter, limit, after)
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

    fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        (**self).load_at(id, revision)
    }

    fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        (**self).revisions(id)
    }

    fn history(&self, id: &SessionId) -> Result<History> {
        (**self).history(id)
    }

    fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        (**self).restore(id, revision)
    }

    fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        (**self).trim_history(id, oldest)
    }

    fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        (**self).acquire_lease(id, request)
    }

    fn renew_lease(&self, lease: &Lease, ttl: std::time::Duration) -> Result<Lease> {
        (**self).renew_lease(lease, ttl)
    }

    fn release_lease(&self, lease: &Lease) -> Result<()> {
        (**self).release_lease(lease)
    }

    fn leases(&self) -> Result<Vec<Lease>> {
        (**self).leases()
    }
}
