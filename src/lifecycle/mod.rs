//! What a session goes through beyond save and load: forking it, pruning old sessions,
//! and moving sessions between stores as a [`Bundle`]. Each is a workflow built on the
//! core store methods, written once as async code over an [`AsyncSessionStore`]: every
//! async store gets them from one blanket implementation of [`AsyncSessionStoreExt`], and
//! every synchronous store from one of [`SessionStoreExt`], which runs the same workflow
//! over the store's own calls on the caller's thread.

mod bundle;
mod copy;
mod prune;

use crate::error::Error;
use crate::error::Result;
use crate::id::Revision;
use crate::id::SessionId;
use crate::snapshot::{ForkAt, RewindTo, SessionSnapshot};
use crate::store::{ready, AsyncSessionStore, InlineStore, SessionStore};

pub use bundle::{Bundle, ImportIds, Imported, BUNDLE_VERSION};
pub use copy::{
    copy_sessions, copy_sessions_async, CopyOptions, CopyOutcome, CopyReport, ExistingSessions,
    SessionCopy,
};
pub use prune::{
    HistoryRetention, PrunePolicy, PruneReason, PruneReport, PruneScope, Pruned, TrimmedHistory,
};

/// The session workflows every [`SessionStore`] has: [`fork`](Self::fork),
/// [`rewind`](Self::rewind), [`prune`](Self::prune), [`export`](Self::export) and
/// [`import`](Self::import).
///
/// They are built only on the store's own methods (`load`, `save`, `list_scoped`,
/// `delete_if_unchanged`, `stored_bytes`, `delete`), so a store gets them right by getting
/// those right: it implements [`SessionStore`] and adds `use agent_session::SessionStoreExt;`
/// where it calls them. They work through `Arc<S>`, `&S` and `dyn SessionStore` alike.
///
/// # Examples
///
/// ```
/// use agent_session::{ContentBlock, ForkAt, MemorySessionStore, Message, SessionId,
///     SessionSnapshot, SessionStore, SessionStoreExt};
///
/// let store = MemorySessionStore::new();
/// let parent = SessionSnapshot::builder(SessionId::parse("parent")?, "m")
///     .transcript(vec![Message::user("hi"), Message::assistant(vec![ContentBlock::text("hello")])])
///     .build()?;
/// store.save(&parent)?;
///
/// let fork = store.fork(parent.id(), ForkAt::Messages(1), SessionId::parse("branch")?)?;
/// assert_eq!(fork.transcript().len(), 1);
/// assert_eq!(store.list()?.sessions.len(), 2);
/// # Ok::<(), agent_session::Error>(())
/// ```
pub trait SessionStoreExt: SessionStore {
    /// Forks session `id` at `at` into a new session `new_id`, saved at revision 1, and
    /// returns the fork as stored. The parent is read, never changed; the fork records it
    /// ([`SessionSnapshot::lineage`]) and shows it in listings
    /// ([`SessionSummary::lineage`](crate::SessionSummary::lineage)). See
    /// [`SessionSnapshot::fork`] for what the fork keeps.
    ///
    /// The fork holds its own copy of the shared history (so deleting the parent never
    /// affects it).
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`](crate::Error::NotFound) if there is no session `id`;
    /// [`Error::AlreadyExists`](crate::Error::AlreadyExists) if `new_id` is taken;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a fork point the
    /// parent does not have (see [`SessionSnapshot::fork`]); storage errors otherwise.
    fn fork(&self, id: &SessionId, at: ForkAt, new_id: SessionId) -> Result<SessionSnapshot> {
        ready(fork(&InlineStore(self), id, at, new_id))
    }

    /// Takes stored session `id` back to `to` and saves it: the `/undo` of an agent, for a
    /// session no live [`Session`](crate::Session) holds (for one that does, use
    /// [`Session::rewind`](crate::Session::rewind)). Returns the session as stored. See
    /// [`SessionSnapshot::rewind`] for what it keeps; the save appends one small record
    /// to stores that append.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`](crate::Error::NotFound) if there is no session `id`;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a point the session
    /// does not have or one that splits a tool call from its result (nothing is written);
    /// [`Error::Conflict`](crate::Error::Conflict) if another writer saved it between the
    /// load and the save; storage errors otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, MemorySessionStore, Message, RewindTo, SessionId,
    ///     SessionSnapshot, SessionStore, SessionStoreExt};
    ///
    /// let store = MemorySessionStore::new();
    /// let id = SessionId::parse("s")?;
    /// store.save(&SessionSnapshot::builder(id.clone(), "m")
    ///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
    ///     .build()?)?;
    /// let rewound = store.rewind(&id, RewindTo::LastTurns(1))?;
    /// assert!(rewound.transcript().is_empty());
    /// assert_eq!(store.load(&id)?.revision(), rewound.revision());
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    fn rewind(&self, id: &SessionId, to: RewindTo) -> Result<SessionSnapshot> {
        ready(rewind(&InlineStore(self), id, to))
    }

    /// Deletes what `policy` says should go, oldest first, or with
    /// [`PrunePolicy::dry_run`] only reports it. Each session is deleted through
    /// [`delete_if_unchanged`](SessionStore::delete_if_unchanged) at the revision the
    /// listing showed, so one saved meanwhile is kept (and reported in
    /// [`PruneReport::skipped`]). Unreadable entries are never deleted.
    ///
    /// # Errors
    ///
    /// If the store cannot be listed; a session that cannot be deleted is reported in
    /// [`PruneReport::skipped`] instead.
    fn prune(&self, policy: &PrunePolicy) -> Result<PruneReport> {
        ready(prune::prune(&InlineStore(self), policy))
    }

    /// Exports the sessions `ids` as a [`Bundle`]: one self-contained, versioned file
    /// that [`import`](Self::import) reads into any store, on any machine.
    ///
    /// # Errors
    ///
    /// As [`load`](SessionStore::load), for the first session that cannot be loaded;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if an id is given twice.
    fn export(&self, ids: &[SessionId]) -> Result<Bundle> {
        ready(export(&InlineStore(self), ids))
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
    /// [`Error::AlreadyExists`](crate::Error::AlreadyExists) if a target id is stored;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `ids` maps two
    /// sessions to one id or a fork onto its parent's id; storage errors otherwise, or
    /// [`Error::ImportIncomplete`](crate::Error::ImportIncomplete) if some sessions
    /// written before the error could not be deleted again.
    fn import(&self, bundle: &Bundle, ids: &ImportIds) -> Result<Vec<Imported>> {
        ready(bundle::import(&InlineStore(self), bundle, ids))
    }
}

impl<S: SessionStore + ?Sized> SessionStoreExt for S {}

/// The session workflows of [`SessionStoreExt`] for async code, on every
/// [`AsyncSessionStore`]: the same workflows (one implementation), each call to the store
/// awaited.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_session::{AsyncSessionStore, AsyncSessionStoreExt, ContentBlock, ForkAt,
///     MemorySessionStore, Message, SessionId, SessionSnapshot, SessionStore};
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let store = Arc::new(MemorySessionStore::new()).into_async();
/// let parent = SessionSnapshot::builder(SessionId::parse("parent")?, "m")
///     .transcript(vec![Message::user("hi"), Message::assistant(vec![ContentBlock::text("hello")])])
///     .build()?;
/// store.save(&parent).await?;
/// let fork = store.fork(parent.id(), ForkAt::Messages(1), SessionId::parse("branch")?).await?;
/// assert_eq!(fork.transcript().len(), 1);
/// assert_eq!(store.list().await?.sessions.len(), 2);
/// # Ok::<(), agent_session::Error>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[async_trait::async_trait]
pub trait AsyncSessionStoreExt: AsyncSessionStore {
    /// As [`SessionStoreExt::fork`].
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::fork`].
    async fn fork(&self, id: &SessionId, at: ForkAt, new_id: SessionId) -> Result<SessionSnapshot> {
        fork(self, id, at, new_id).await
    }

    /// As [`SessionStoreExt::rewind`].
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::rewind`].
    async fn rewind(&self, id: &SessionId, to: RewindTo) -> Result<SessionSnapshot> {
        rewind(self, id, to).await
    }

    /// As [`SessionStoreExt::prune`].
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::prune`].
    async fn prune(&self, policy: &PrunePolicy) -> Result<PruneReport> {
        prune::prune(self, policy).await
    }

    /// As [`SessionStoreExt::export`].
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::export`].
    async fn export(&self, ids: &[SessionId]) -> Result<Bundle> {
        export(self, ids).await
    }

    /// As [`SessionStoreExt::import`].
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::import`].
    async fn import(&self, bundle: &Bundle, ids: &ImportIds) -> Result<Vec<Imported>> {
        bundle::import(self, bundle, ids).await
    }
}

impl<S: AsyncSessionStore + ?Sized> AsyncSessionStoreExt for S {}

/// The fork workflow: load, fork, save as a new session.
async fn fork<S: AsyncSessionStore + ?Sized>(
    store: &S,
    id: &SessionId,
    at: ForkAt,
    new_id: SessionId,
) -> Result<SessionSnapshot> {
    let mut fork = store.load(id).await?.fork(new_id, at)?;
    let revision = store.save(&fork).await.map_err(already_exists)?;
    // Exactly what was just stored, so a session resumed from it appends its next save.
    fork.mark_stored(revision);
    Ok(fork)
}

/// The rewind workflow: load, rewind, save.
async fn rewind<S: AsyncSessionStore + ?Sized>(
    store: &S,
    id: &SessionId,
    to: RewindTo,
) -> Result<SessionSnapshot> {
    let mut rewound = store.load(id).await?;
    rewound.rewind(to)?;
    let revision = store.save(&rewound).await?;
    Ok(rewound.with_revision(revision))
}

/// The export workflow: every session loaded, in order, into one bundle.
async fn export<S: AsyncSessionStore + ?Sized>(store: &S, ids: &[SessionId]) -> Result<Bundle> {
    let mut sessions = Vec::with_capacity(ids.len());
    for id in ids {
        sessions.push(store.load(id).await?);
    }
    Bundle::new(sessions)
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
