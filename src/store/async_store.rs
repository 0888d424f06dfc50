//! The asynchronous face of a store: [`AsyncSessionStore`], every [`SessionStore`]
//! operation as a future, and the adapters that give it to the synchronous stores
//! ([`BlockingStore`] for stores that do I/O, `InlineStore` for stores that never block).

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::lease::{Lease, LeaseRequest};
use crate::snapshot::{History, RevisionInfo, SessionSnapshot};
use crate::store::{
    check_page_limit, head_only, IndexedMetadata, ListCursor, ListFilter, ListScope, SearchPage,
    SearchQuery, SessionList, SessionPage, SessionStore, SessionSummary,
};
use crate::telemetry;

/// Where sessions are kept, for async code: the operations of [`SessionStore`], each a
/// future, with the same contract (revisions, conflicts, durability, errors). Every store
/// of this crate has one: [`SessionStore::into_async`] gives it.
///
/// | store | how its async calls run |
/// |---|---|
#[cfg_attr(
    feature = "postgres",
    doc = "| [`PostgresSessionStore`](crate::PostgresSessionStore) (feature `postgres`) | natively, awaiting its connection pool: on the caller's task for a store made by [`PostgresStoreBuilder::connect_async`](crate::PostgresStoreBuilder::connect_async) (no runtime or threads of its own), on the store's own runtime (awaited without blocking the caller's executor) for one made by [`PostgresStoreBuilder::connect`](crate::PostgresStoreBuilder::connect) |"
)]
#[cfg_attr(
    not(feature = "postgres"),
    doc = "| `PostgresSessionStore` (feature `postgres`) | natively, awaiting its connection pool: on the caller's task for a store made by `PostgresStoreBuilder::connect_async` (no runtime or threads of its own), on the store's own runtime (awaited without blocking the caller's executor) for one made by `PostgresStoreBuilder::connect` |"
)]
/// | [`FileSessionStore`](crate::FileSessionStore) and any synchronous store | on tokio's blocking pool ([`BlockingStore`]): the caller's executor thread is never blocked by file I/O |
/// | [`MemorySessionStore`](crate::MemorySessionStore) | on the caller's task: its calls never wait for I/O |
///
/// Runtime: tokio, multi-thread or current-thread. [`BlockingStore`] called outside any
/// tokio runtime runs the call on the caller's thread, as the synchronous API would.
///
/// The trait is object-safe (through the [`async_trait`](mod@async_trait) crate): `Arc<dyn AsyncSessionStore>`
/// works, and every future is `Send`, so it can be awaited in a spawned task. Dropping a
/// future does not undo what it started: a save whose future is dropped may still land,
/// as a save whose acknowledgement is lost may; the next save's compare-and-swap tells.
///
/// A custom store implements [`save`](Self::save), [`load`](Self::load),
/// [`list`](Self::list) and [`delete`](Self::delete); the other methods have the same
/// defaults as [`SessionStore`]'s (see its table). A synchronous custom store needs
/// nothing more: [`SessionStore::into_async`] runs it on the blocking pool.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_session::{AsyncSessionStore, FileSessionStore, SessionId, SessionSnapshot,
///     SessionStore};
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// # let dir = tempfile::tempdir()?;
/// let store = Arc::new(FileSessionStore::open(dir.path())?).into_async();
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s1")?, "model").build()?;
/// let revision = store.save(&snapshot).await?;
/// assert_eq!(store.load(snapshot.id()).await?.revision(), revision);
/// assert_eq!(store.list().await?.sessions.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[async_trait]
pub trait AsyncSessionStore: Send + Sync {
    /// As [`SessionStore::save`].
    ///
    /// # Errors
    ///
    /// As [`SessionStore::save`].
    async fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision>;

    /// As [`SessionStore::load`].
    ///
    /// # Errors
    ///
    /// As [`SessionStore::load`].
    async fn load(&self, id: &SessionId) -> Result<SessionSnapshot>;

    /// As [`SessionStore::list`].
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list`].
    async fn list(&self) -> Result<SessionList>;

    /// As [`SessionStore::list_page`]; the default implementation pages
    /// [`list`](Self::list).
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list_page`].
    async fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        check_page_limit(limit)?;
        Ok(SessionPage::of(self.list().await?, limit, after))
    }

    /// As [`SessionStore::delete`].
    ///
    /// # Errors
    ///
    /// As [`SessionStore::delete`].
    async fn delete(&self, id: &SessionId) -> Result<()>;

    /// As [`SessionStore::list_scoped`]; the default implementation suits a store that
    /// cannot archive.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list_scoped`].
    async fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        match scope {
            ListScope::Archived => Ok(SessionList::default()),
            ListScope::Active | ListScope::All => self.list().await,
        }
    }

    /// As [`SessionStore::indexed_metadata`]; none by default.
    fn indexed_metadata(&self) -> IndexedMetadata {
        IndexedMetadata::default()
    }

    /// As [`SessionStore::list_filtered`]; the default implementation filters
    /// [`list_scoped`](Self::list_scoped).
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list_filtered`].
    async fn list_filtered(&self, filter: &ListFilter) -> Result<SessionList> {
        filter.check(&self.indexed_metadata())?;
        let mut listing = self.list_scoped(filter.list_scope()).await?;
        listing.sessions.retain(|s| filter.matches(s));
        Ok(listing)
    }

    /// As [`SessionStore::list_page_filtered`]; the default implementation pages
    /// [`list_filtered`](Self::list_filtered).
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list_page_filtered`].
    async fn list_page_filtered(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        check_page_limit(limit)?;
        Ok(SessionPage::of(
            self.list_filtered(filter).await?,
            limit,
            after,
        ))
    }

    /// As [`SessionStore::search`]; the default implementation scans the filtered
    /// listing, reading each session's history.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::search`].
    async fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        super::search::scan_async(self, query, filter, limit, after).await
    }

    /// As [`SessionStore::set_archived`]; the default implementation returns
    /// [`Error::Unsupported`].
    ///
    /// # Errors
    ///
    /// As [`SessionStore::set_archived`].
    async fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        let _ = (id, archived);
        Err(head_only::cannot_archive::<Self>())
    }

    /// As [`SessionStore::delete_if_unchanged`]; the default implementation compares,
    /// then deletes, in two steps.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::delete_if_unchanged`].
    async fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        head_only::check_still_listed(listed, &self.load(&listed.id).await?)?;
        self.delete(&listed.id).await
    }

    /// As [`SessionStore::stored_bytes`]; the default implementation returns `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::stored_bytes`].
    async fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        let _ = id;
        Ok(None)
    }

    /// As [`SessionStore::load_at`]; the default implementation suits a store that keeps
    /// only the head.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::load_at`].
    async fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        head_only::at(self.load(id).await?, revision)
    }

    /// As [`SessionStore::revisions`]; the default implementation suits a store that
    /// keeps only the head.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::revisions`].
    async fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        Ok(head_only::revisions(&self.load(id).await?))
    }

    /// As [`SessionStore::history`]; the default implementation suits a store that keeps
    /// only the head.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::history`].
    async fn history(&self, id: &SessionId) -> Result<History> {
        Ok(head_only::history(&self.load(id).await?))
    }

    /// As [`SessionStore::restore`]; the default implementation loads the head and
    /// `revision` and saves the head restored.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::restore`].
    async fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        let mut head = self.load(id).await?;
        let past = self.load_at(id, revision).await?;
        head.restore_from(&past)?;
        self.save(&head).await
    }

    /// As [`SessionStore::trim_history`]; the default implementation suits a store that
    /// keeps only the head.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::trim_history`].
    async fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        head_only::trim(&self.load(id).await?, oldest)
    }

    /// As [`SessionStore::acquire_lease`]; the default implementation cannot lease.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::acquire_lease`].
    async fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        let _ = (id, request);
        Err(head_only::cannot_lease::<Self>())
    }

    /// As [`SessionStore::renew_lease`]; the default implementation cannot lease.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::renew_lease`].
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let _ = (lease, ttl);
        Err(head_only::cannot_lease::<Self>())
    }

    /// As [`SessionStore::release_lease`]; the default implementation cannot lease.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::release_lease`].
    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let _ = lease;
        Err(head_only::cannot_lease::<Self>())
    }

    /// As [`SessionStore::leases`]; empty from the default implementation.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::leases`].
    async fn leases(&self) -> Result<Vec<Lease>> {
        Ok(Vec::new())
    }
}

/// Forwards every call, so `Arc<S>` is a store wherever `S` is.
#[async_trait]
impl<S: AsyncSessionStore + ?Sized> AsyncSessionStore for Arc<S> {
    async fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        (**self).save(snapshot).await
    }
    async fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        (**self).load(id).await
    }
    async fn list(&self) -> Result<SessionList> {
        (**self).list().await
    }
    async fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        (**self).list_page(limit, after).await
    }
    async fn delete(&self, id: &SessionId) -> Result<()> {
        (**self).delete(id).await
    }
    async fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        (**self).list_scoped(scope).await
    }
    fn indexed_metadata(&self) -> IndexedMetadata {
        (**self).indexed_metadata()
    }
    async fn list_filtered(&self, filter: &ListFilter) -> Result<SessionList> {
        (**self).list_filtered(filter).await
    }
    async fn list_page_filtered(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        (**self).list_page_filtered(filter, limit, after).await
    }
    async fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        (**self).search(query, filter, limit, after).await
    }
    async fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        (**self).set_archived(id, archived).await
    }
    async fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        (**self).delete_if_unchanged(listed).await
    }
    async fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        (**self).stored_bytes(id).await
    }
    async fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        (**self).load_at(id, revision).await
    }
    async fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        (**self).revisions(id).await
    }
    async fn history(&self, id: &SessionId) -> Result<History> {
        (**self).history(id).await
    }
    async fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        (**self).restore(id, revision).await
    }
    async fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        (**self).trim_history(id, oldest).await
    }
    async fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        (**self).acquire_lease(id, request).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        (**self).renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        (**self).release_lease(lease).await
    }
    async fn leases(&self) -> Result<Vec<Lease>> {
        (**self).leases().await
    }
}

/// A synchronous store driven from async code: each call runs on tokio's blocking pool
/// ([`tokio::task::spawn_blocking`]), so file I/O and fsync never block an executor
/// thread. [`SessionStore::into_async`] makes one for every store that has no async
/// implementation of its own ([`FileSessionStore`](crate::FileSessionStore) and custom
/// stores).
///
/// Outside any tokio runtime a call runs on the caller's thread instead. A call whose
/// future is dropped still runs to its end on the pool (a save lands or fails as a whole).
/// A store that panics panics the awaiting task, as the synchronous call would.
///
/// The arguments are cloned into the pool's thread: cheap, as a snapshot shares its
/// transcript, tool-call records and usage (`Arc`) with its clones.
///
/// # Examples
///
/// ```
/// use agent_session::{AsyncSessionStore, BlockingStore, FileSessionStore, SessionId,
///     SessionSnapshot, SessionStore};
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// # let dir = tempfile::tempdir()?;
/// let store = BlockingStore::new(FileSessionStore::open(dir.path())?);
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s1")?, "model").build()?;
/// store.save(&snapshot).await?;
/// // The synchronous store is still there, for code that is not async.
/// assert!(SessionStore::load(&**store.store(), snapshot.id()).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct BlockingStore<S: ?Sized> {
    store: Arc<S>,
}

impl<S> BlockingStore<S> {
    /// Drives `store` from async code.
    pub fn new(store: S) -> Self {
        BlockingStore {
            store: Arc::new(store),
        }
    }
}

impl<S: ?Sized> BlockingStore<S> {
    /// Drives the store `store` points to from async code (it stays usable through the
    /// other pointers, synchronously).
    pub fn from_arc(store: Arc<S>) -> Self {
        BlockingStore { store }
    }

    /// The synchronous store.
    #[must_use]
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }
}

impl<S: SessionStore + ?Sized + 'static> BlockingStore<S> {
    /// Runs `call` on the blocking pool (on this thread outside a tokio runtime).
    async fn run<T, F>(&self, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&S) -> Result<T> + Send + 'static,
    {
        let store = Arc::clone(&self.store);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return call(&store);
        };
        // The store's spans are children of the caller's (a turn's, a harness save's).
        let call = telemetry::in_current_span(move || call(&store));
        match runtime.spawn_blocking(call).await {
            Ok(outcome) => outcome,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(Error::Backend {
                operation:
                    "run a store call on tokio's blocking pool (the runtime is shutting down)"
                        .to_owned(),
                source: Box::new(e),
            }),
        }
    }
}

#[async_trait]
impl<S: SessionStore + ?Sized + 'static> AsyncSessionStore for BlockingStore<S> {
    async fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        let snapshot = snapshot.clone();
        self.run(move |s| s.save(&snapshot)).await
    }
    async fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        let id = id.clone();
        self.run(move |s| s.load(&id)).await
    }
    async fn list(&self) -> Result<SessionList> {
        self.run(SessionStore::list).await
    }
    async fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        let after = after.cloned();
        self.run(move |s| s.list_page(limit, after.as_ref())).await
    }
    async fn delete(&self, id: &SessionId) -> Result<()> {
        let id = id.clone();
        self.run(move |s| s.delete(&id)).await
    }
    async fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        self.run(move |s| s.list_scoped(scope)).await
    }
    fn indexed_metadata(&self) -> IndexedMetadata {
        self.store.indexed_metadata()
    }
    async fn list_filtered(&self, filter: &ListFilter) -> Result<SessionList> {
        let filter = filter.clone();
        self.run(move |s| s.list_filtered(&filter)).await
    }
    async fn list_page_filtered(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        let filter = filter.clone();
        let after = after.cloned();
        self.run(move |s| s.list_page_filtered(&filter, limit, after.as_ref()))
            .await
    }
    async fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        let (query, filter, after) = (query.clone(), filter.clone(), after.cloned());
        self.run(move |s| s.search(&query, &filter, limit, after.as_ref()))
            .await
    }
    async fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        let id = id.clone();
        self.run(move |s| s.set_archived(&id, archived)).await
    }
    async fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        let listed = listed.clone();
        self.run(move |s| s.delete_if_unchanged(&listed)).await
    }
    async fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        let id = id.clone();
        self.run(move |s| s.stored_bytes(&id)).await
    }
    async fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        let id = id.clone();
        self.run(move |s| s.load_at(&id, revision)).await
    }
    async fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        let id = id.clone();
        self.run(move |s| s.revisions(&id)).await
    }
    async fn history(&self, id: &SessionId) -> Result<History> {
        let id = id.clone();
        self.run(move |s| s.history(&id)).await
    }
    async fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        let id = id.clone();
        self.run(move |s| s.restore(&id, revision)).await
    }
    async fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        let id = id.clone();
        self.run(move |s| s.trim_history(&id, oldest)).await
    }
    async fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        let (id, request) = (id.clone(), request.clone());
        self.run(move |s| s.acquire_lease(&id, &request)).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let lease = lease.clone();
        self.run(move |s| s.renew_lease(&lease, ttl)).await
    }
    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.run(move |s| s.release_lease(&lease)).await
    }
    async fn leases(&self) -> Result<Vec<Lease>> {
        self.run(SessionStore::leases).await
    }
}

/// A synchronous store whose calls never wait for I/O, driven from async code on the
/// caller's task: [`MemorySessionStore`](crate::MemorySessionStore)'s async face, and how
/// the synchronous lifecycle workflows run the async ones (see [`ready`]).
#[derive(Debug)]
pub(crate) struct InlineStore<P>(pub(crate) P);

#[async_trait]
impl<P, S> AsyncSessionStore for InlineStore<P>
where
    P: Deref<Target = S> + Send + Sync,
    S: SessionStore + ?Sized,
{
    async fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        self.0.save(snapshot)
    }
    async fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        self.0.load(id)
    }
    async fn list(&self) -> Result<SessionList> {
        self.0.list()
    }
    async fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
        self.0.list_page(limit, after)
    }
    async fn delete(&self, id: &SessionId) -> Result<()> {
        self.0.delete(id)
    }
    async fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        self.0.list_scoped(scope)
    }
    fn indexed_metadata(&self) -> IndexedMetadata {
        self.0.indexed_metadata()
    }
    async fn list_filtered(&self, filter: &ListFilter) -> Result<SessionList> {
        self.0.list_filtered(filter)
    }
    async fn list_page_filtered(
        &self,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        self.0.list_page_filtered(filter, limit, after)
    }
    async fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        self.0.search(query, filter, limit, after)
    }
    async fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        self.0.set_archived(id, archived)
    }
    async fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        self.0.delete_if_unchanged(listed)
    }
    async fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        self.0.stored_bytes(id)
    }
    async fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        self.0.load_at(id, revision)
    }
    async fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        self.0.revisions(id)
    }
    async fn history(&self, id: &SessionId) -> Result<History> {
        self.0.history(id)
    }
    async fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        self.0.restore(id, revision)
    }
    async fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        self.0.trim_history(id, oldest)
    }
    async fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        self.0.acquire_lease(id, request)
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.0.renew_lease(lease, ttl)
    }
    async fn release_lease(&self, lease: &Lease) -> Result<()> {
        self.0.release_lease(lease)
    }
    async fn leases(&self) -> Result<Vec<Lease>> {
        self.0.leases()
    }
}

/// The output of `future`, polled on this thread until it is ready: how a synchronous
/// entry point runs a workflow written once as async code over an [`InlineStore`], whose
/// futures are ready at their first poll. (Should one ever wait, this thread yields and
/// polls again: nothing here needs waking.)
pub(crate) fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::yield_now();
    }
}
