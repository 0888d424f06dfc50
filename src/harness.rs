//! `Harness`: a store plus an engine factory, creating, saving and resuming sessions.

mod lease_keeper;

use std::fmt;
use std::sync::Arc;

use crate::compactor::{CompactionPolicy, CompactionRequest, Compactor};
use crate::engine::BoxFuture;
use crate::engine::{Engine, ToolExecutor};
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::lease::{Lease, LeaseRequest};
use crate::lifecycle::{AsyncSessionStoreExt, PrunePolicy, PruneReport, SessionStoreExt};
use crate::redact::Redactor;
use crate::session::{AsyncCheckpoint, HeldLease, Session, SessionOptions, TurnOutcome};
use crate::snapshot::SessionSnapshot;
use crate::snapshot::{ForkAt, RewindTo};
use crate::store::{AsyncSessionStore, ListCursor, SessionList, SessionPage, SessionStore};
use crate::telemetry;
use crate::transcript::Message;
use lease_keeper::LeaseKeeper;

/// Redacts `snapshot` (a fresh copy, so in place) if there is a redactor.
fn redact(redactor: Option<&dyn Redactor>, snapshot: &mut SessionSnapshot) {
    if let Some(redactor) = redactor {
        snapshot.redact(redactor);
    }
}

/// Records in `session` what a save of `snapshot` (taken from it, maybe redacted since)
/// returned, and passes the outcome on.
fn record_save<E>(
    session: &mut Session<E>,
    snapshot: &SessionSnapshot,
    saved: Result<Revision>,
) -> Result<Revision> {
    match saved {
        Ok(revision) => {
            session.record_saved(snapshot, revision);
            Ok(revision)
        }
        // Stored, but maybe not durable: the session is at the new revision either way.
        Err(err @ Error::NotDurable { revision, .. }) => {
            session.record_saved(snapshot, revision);
            Err(err)
        }
        Err(err) => Err(err),
    }
}

/// The step checkpoints of [`Autosave::EveryStep`], saved through the async store.
struct StepSaver<'h> {
    store: &'h dyn AsyncSessionStore,
    redactor: Option<&'h dyn Redactor>,
}

impl AsyncCheckpoint for StepSaver<'_> {
    fn save<'a>(
        &'a mut self,
        snapshot: &'a mut SessionSnapshot,
    ) -> BoxFuture<'a, Result<Revision>> {
        redact(self.redactor, snapshot);
        self.store.save(snapshot)
    }
}

/// When [`Harness::send`] and [`Harness::send_message`] save a session by themselves.
/// Sending through the session directly ([`Session::send`]) never saves.
///
/// # Examples
///
/// ```
/// # use agent_session::{BoxError, Completion, CompletionRequest, Engine};
/// # struct MyEngine;
/// # impl Engine for MyEngine {
/// #     async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> { unimplemented!() }
/// # }
/// use agent_session::{Autosave, FileSessionStore, Harness};
///
/// let dir = tempfile::tempdir()?;
/// // Save before each step's tools run and after each step: a crash loses at most the
/// // step in flight.
/// let harness = Harness::builder(FileSessionStore::open(dir.path())?, || MyEngine)
///     .autosave(Autosave::EveryStep)
///     .build();
/// assert_eq!(Autosave::default(), Autosave::Off);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Autosave {
    /// Never: call [`Harness::save_session`] when you want the session stored. The
    /// default.
    #[default]
    Off,
    /// After every turn that [`Harness::send`] completes without error. If that save
    /// fails, `send` returns its error (the turn's outcome is in the session's transcript,
    /// and the next save stores it).
    EveryTurn,
    /// At every step of a turn, as [`Session::send_message_with`] describes: a crash loses
    /// at most the step in flight, and tool calls that were running are closed as
    /// interrupted, never run again silently. With a
    /// [`FileSessionStore`](crate::FileSessionStore), each save appends only the step.
    EveryStep,
}

/// Creates, saves and resumes sessions: a [`SessionStore`], a factory that builds a fresh
/// [`Engine`] for every session, and an optional default [`ToolExecutor`].
///
/// # Examples
///
/// ```
/// use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine,
///     FileSessionStore, Harness, Message, SessionOptions, Usage};
///
/// #[derive(Default)]
/// struct Echo;
/// impl Engine for Echo {
///     async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
///         let last = r.transcript.last().map(Message::text).unwrap_or_default();
///         Ok(Completion::new(Message::assistant(vec![ContentBlock::text(last)]), Usage::new(r.model)))
///     }
/// }
///
/// # let dir = tempfile::tempdir()?;
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let harness = Harness::builder(FileSessionStore::open(dir.path())?, Echo::default).build();
///
/// let mut session = harness.new_session(SessionOptions::new("echo-1").system_prompt("Echo."))?;
/// session.send("remember me").await?;
/// harness.save_session(&mut session)?;
///
/// // Later, perhaps in another process: options come back from the snapshot.
/// let resumed = harness.resume_session(session.id(), None)?;
/// assert_eq!(resumed.transcript(), session.transcript());
/// assert_eq!(resumed.options().system_prompt.as_deref(), Some("Echo."));
/// # Ok::<(), agent_session::Error>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Harness<F> {
    store: Arc<dyn SessionStore>,
    /// The same store for async code ([`SessionStore::into_async`]).
    async_store: Arc<dyn AsyncSessionStore>,
    engine_factory: F,
    tools: Option<Arc<dyn ToolExecutor>>,
    redactor: Option<Arc<dyn Redactor>>,
    autosave: Autosave,
    compaction: Option<(Arc<dyn Compactor>, CompactionPolicy)>,
}

impl<F> fmt::Debug for Harness<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("tools", &self.tools.as_ref().map(|_| "<executor>"))
            .field("redactor", &self.redactor.as_ref().map(|_| "<redactor>"))
            .field("autosave", &self.autosave)
            .field("compaction", &self.compaction.as_ref().map(|(_, p)| p))
            .finish_non_exhaustive()
    }
}

/// Configures a [`Harness`]. Made by [`Harness::builder`].
///
/// # Examples
///
/// ```
/// # use agent_session::{BoxError, Completion, CompletionRequest, Engine};
/// # struct MyEngine;
/// # impl Engine for MyEngine {
/// #     async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> { unimplemented!() }
/// # }
/// use agent_session::{Harness, MemorySessionStore};
///
/// let harness = Harness::builder(MemorySessionStore::new(), || MyEngine).build();
/// ```
#[must_use]
pub struct HarnessBuilder<F> {
    store: Arc<dyn SessionStore>,
    async_store: Arc<dyn AsyncSessionStore>,
    engine_factory: F,
    tools: Option<Arc<dyn ToolExecutor>>,
    redactor: Option<Arc<dyn Redactor>>,
    autosave: Autosave,
    compaction: Option<(Arc<dyn Compactor>, CompactionPolicy)>,
}

impl<F> HarnessBuilder<F> {
    /// Sets the tool executor given to every session whose options have none (default:
    /// none).
    pub fn tools(mut self, tools: Arc<dyn ToolExecutor>) -> Self {
        self.tools = Some(tools);
        self
    }

    /// Sets a redactor applied to every snapshot before it is saved (default: none), for
    /// example [`PatternRedactor::common_secrets`](crate::PatternRedactor::common_secrets).
    /// Only the stored copy is redacted; see [`Redactor`].
    pub fn redactor(mut self, redactor: Arc<dyn Redactor>) -> Self {
        self.redactor = Some(redactor);
        self
    }

    /// Sets when [`Harness::send`] saves by itself (default [`Autosave::Off`]).
    pub fn autosave(mut self, autosave: Autosave) -> Self {
        self.autosave = autosave;
        self
    }

    /// Sets the compactor [`Harness::compact_session`] runs, and the policy by which
    /// [`Harness::send`] runs it between turns (default: none; a policy with no limit
    /// never compacts by itself). After a turn that leaves the view past a limit, `send`
    /// asks the compactor for a summary of everything but the policy's last turns, puts
    /// it in place, and saves it when the harness autosaves.
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, Engine};
    /// # struct MyEngine;
    /// # impl Engine for MyEngine {
    /// #     async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> { unimplemented!() }
    /// # }
    /// use std::sync::Arc;
    /// use agent_session::{BoxFuture, Compaction, CompactionPolicy, CompactionRequest,
    ///     Compactor, Harness, MemorySessionStore, Message};
    ///
    /// struct Note;
    /// impl Compactor for Note {
    ///     fn compact<'a>(&'a self, r: CompactionRequest<'a>) -> BoxFuture<'a, Result<Compaction, BoxError>> {
    ///         Box::pin(async move { Ok(Compaction::new(r.replace, vec![Message::user("(summary)")])) })
    ///     }
    /// }
    ///
    /// let harness = Harness::builder(MemorySessionStore::new(), || MyEngine)
    ///     .compaction(Arc::new(Note), CompactionPolicy::default().max_messages(400))
    ///     .build();
    /// ```
    pub fn compaction(mut self, compactor: Arc<dyn Compactor>, policy: CompactionPolicy) -> Self {
        self.compaction = Some((compactor, policy));
        self
    }

    /// Builds the harness.
    pub fn build(self) -> Harness<F> {
        Harness {
            store: self.store,
            async_store: self.async_store,
            engine_factory: self.engine_factory,
            tools: self.tools,
            redactor: self.redactor,
            autosave: self.autosave,
            compaction: self.compaction,
        }
    }
}

impl<F, E> Harness<F>
where
    F: Fn() -> E,
    E: Engine,
{
    /// Starts configuring a harness over `store`, calling `engine_factory` for a fresh
    /// engine every time a session is created or resumed.
    ///
    /// The harness's async entry points (`*_async`, and the saves of [`send`](Self::send))
    /// reach the store through [`SessionStore::into_async`]: on tokio's blocking pool for
    /// the file store, natively for the PostgreSQL store.
    pub fn builder<S: SessionStore + 'static>(store: S, engine_factory: F) -> HarnessBuilder<F> {
        let store = Arc::new(store);
        HarnessBuilder {
            async_store: Arc::clone(&store).into_async(),
            store,
            engine_factory,
            tools: None,
            redactor: None,
            autosave: Autosave::Off,
            compaction: None,
        }
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &dyn SessionStore {
        &*self.store
    }

    /// The store, for async code (see [`SessionStore::into_async`]).
    #[must_use]
    pub fn async_store(&self) -> &dyn AsyncSessionStore {
        &*self.async_store
    }

    /// A new session with a fresh generated id. It is not stored until
    /// [`save_session`](Self::save_session).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `options.max_turns` is 0.
    pub fn new_session(&self, options: SessionOptions) -> Result<Session<E>> {
        Session::new(
            SessionId::generate(),
            (self.engine_factory)(),
            self.with_default_tools(options),
        )
    }

    /// Saves the session (compare-and-swap on its revision) and records the new revision
    /// in it. With a [redactor](HarnessBuilder::redactor), the stored copy is redacted. A
    /// session with nothing new since it was loaded or saved is not written again by the
    /// stores of this crate: its revision is returned (see [`SessionStore`]'s contract).
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if another writer saved this session since it was loaded or
    /// last saved; storage errors otherwise. The session is unchanged on error, except
    /// after [`Error::NotDurable`], when it records the revision that is now stored.
    pub fn save_session(&self, session: &mut Session<E>) -> Result<Revision> {
        let mut snapshot = session.snapshot();
        redact(self.redactor.as_deref(), &mut snapshot);
        let span = telemetry::harness_op("save_session", session.id());
        let saved = span.run(|| self.store.save(&snapshot));
        record_save(session, &snapshot, saved)
    }

    /// [`save_session`](Self::save_session) for async code: the save is awaited, never
    /// blocking the executor (see [`SessionStore::into_async`]).
    ///
    /// # Errors
    ///
    /// As [`save_session`](Self::save_session).
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, Engine};
    /// # struct MyEngine;
    /// # impl Engine for MyEngine {
    /// #     async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> { unimplemented!() }
    /// # }
    /// use agent_session::{FileSessionStore, Harness, SessionOptions};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let harness = Harness::builder(FileSessionStore::open(dir.path())?, || MyEngine).build();
    /// let mut session = harness.new_session(SessionOptions::new("model"))?;
    /// harness.save_session_async(&mut session).await?;
    /// let resumed = harness.resume_session_async(session.id(), None).await?;
    /// assert_eq!(resumed.revision(), session.revision());
    /// assert_eq!(harness.list_sessions_async().await?.sessions.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn save_session_async(&self, session: &mut Session<E>) -> Result<Revision> {
        let mut snapshot = session.snapshot();
        redact(self.redactor.as_deref(), &mut snapshot);
        let span = telemetry::harness_op("save_session", session.id());
        let saved = span.run_async(self.async_store.save(&snapshot)).await;
        record_save(session, &snapshot, saved)
    }

    /// Takes `session` back to `to` ([`Session::rewind`]) and saves it: the `/undo` of an
    /// agent, durable when it returns. Returns the revision stored. The save appends one
    /// small record to stores that append, however long the session.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a point the session does not have or one that
    /// splits a tool call from its result (the session is not changed, nothing is
    /// written); as [`save_session`](Self::save_session) for the save, after which the
    /// session stays rewound in memory and a later save stores it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine,
    /// #     Message, Usage};
    /// # struct Echo;
    /// # impl Engine for Echo {
    /// #     async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
    /// #         let last = r.transcript.last().map(Message::text).unwrap_or_default();
    /// #         Ok(Completion::new(Message::assistant(vec![ContentBlock::text(last)]), Usage::new(r.model)))
    /// #     }
    /// # }
    /// use agent_session::{Harness, MemorySessionStore, RewindTo, SessionOptions};
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let harness = Harness::builder(MemorySessionStore::new(), || Echo).build();
    /// let mut session = harness.new_session(SessionOptions::new("m"))?;
    /// harness.send(&mut session, "first").await?;
    /// harness.send(&mut session, "a mistake").await?;
    /// harness.rewind_session(&mut session, RewindTo::LastTurns(1))?;
    ///
    /// let resumed = harness.resume_session(session.id(), None)?;
    /// assert_eq!(resumed.transcript().len(), 2);
    /// # Ok::<(), agent_session::Error>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rewind_session(&self, session: &mut Session<E>, to: RewindTo) -> Result<Revision> {
        session.rewind(to)?;
        self.save_session(session)
    }

    /// [`rewind_session`](Self::rewind_session) for async code.
    ///
    /// # Errors
    ///
    /// As [`rewind_session`](Self::rewind_session).
    pub async fn rewind_session_async(
        &self,
        session: &mut Session<E>,
        to: RewindTo,
    ) -> Result<Revision> {
        session.rewind(to)?;
        self.save_session_async(session).await
    }

    /// Sends a user message to `session` (see [`Session::send`]) and saves it as the
    /// harness's [`Autosave`] policy says.
    ///
    /// # Errors
    ///
    /// As [`Session::send`], and as [`save_session`](Self::save_session) for the saves.
    pub async fn send(
        &self,
        session: &mut Session<E>,
        text: impl Into<String>,
    ) -> Result<TurnOutcome> {
        self.send_message(session, Message::user(text)).await
    }

    /// [`send`](Self::send) with a message built by the caller (see
    /// [`Session::send_message`]).
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send).
    pub async fn send_message(
        &self,
        session: &mut Session<E>,
        message: Message,
    ) -> Result<TurnOutcome> {
        let outcome = match self.autosave {
            Autosave::Off => session.send_message(message).await?,
            Autosave::EveryTurn => {
                let outcome = session.send_message(message).await?;
                self.save_session_async(session).await?;
                outcome
            }
            Autosave::EveryStep => {
                // Borrows only the store and redactor, which are `Sync`, so the turn's
                // future stays `Send` whatever the engine factory is.
                let mut saver = StepSaver {
                    store: &*self.async_store,
                    redactor: self.redactor.as_deref(),
                };
                session.send_message_with_async(message, &mut saver).await?
            }
        };
        if let Some((compactor, policy)) = &self.compaction {
            if policy.is_due(session.transcript(), session.usage().last())
                && self.run_compaction(session, &**compactor, policy).await?
                && self.autosave != Autosave::Off
            {
                self.save_session_async(session).await?;
            }
        }
        Ok(outcome)
    }

    /// Asks `compactor` for a summary of everything but the policy's last turns and puts
    /// it in place; `false` if there is nothing before those turns.
    async fn run_compaction(
        &self,
        session: &mut Session<E>,
        compactor: &dyn Compactor,
        policy: &CompactionPolicy,
    ) -> Result<bool> {
        let Some(replace) = session.compaction_point(policy.keep_last_turns) else {
            return Ok(false);
        };
        let options = session.options();
        let request = CompactionRequest {
            system_prompt: options.system_prompt.as_deref(),
            ..CompactionRequest::new(session.id(), &options.model, session.transcript(), replace)
        };
        let compaction = compactor
            .compact(request)
            .await
            .map_err(|source| Error::Engine {
                id: session.id().clone(),
                source,
            })?;
        session.compact(compaction)?;
        Ok(true)
    }

    /// Runs the harness's [`Compactor`] on `session` now, whatever the policy's limits:
    /// everything but the policy's last turns is replaced by the compactor's summary, and
    /// the session is saved. The replaced messages stay in the stored history. Returns the
    /// revision saved, or `None` if there was nothing before those turns to compact.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] if the harness has no compactor
    /// ([`HarnessBuilder::compaction`]); [`Error::Engine`] if the compactor fails (the
    /// session is not changed); as [`Session::compact`] for a compaction it cannot apply;
    /// as [`save_session`](Self::save_session) for the save.
    pub async fn compact_session(&self, session: &mut Session<E>) -> Result<Option<Revision>> {
        let Some((compactor, policy)) = &self.compaction else {
            return Err(Error::Unsupported {
                store: "Harness",
                operation:
                    "compact sessions without a compactor (set one with HarnessBuilder::compaction)",
            });
        };
        if !self.run_compaction(session, &**compactor, policy).await? {
            return Ok(None);
        }
        self.save_session_async(session).await.map(Some)
    }

    /// Makes revision `revision` of `session` its state again ([`Session::restore_from`],
    /// with the revision loaded by [`SessionStore::load_at`]) and saves it as a new
    /// revision: undoes a rewind or a compaction, or goes back anywhere the store keeps.
    /// Returns the revision saved.
    ///
    /// # Errors
    ///
    /// [`Error::RevisionNotFound`] if the store does not keep `revision` (the session is
    /// not changed); as [`save_session`](Self::save_session) for the save.
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, ContentBlock, Engine,
    /// #     Message, Usage};
    /// # struct Echo;
    /// # impl Engine for Echo {
    /// #     async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
    /// #         let last = r.transcript.last().map(Message::text).unwrap_or_default();
    /// #         Ok(Completion::new(Message::assistant(vec![ContentBlock::text(last)]), Usage::new(r.model)))
    /// #     }
    /// # }
    /// use agent_session::{Harness, MemorySessionStore, RewindTo, SessionOptions};
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let harness = Harness::builder(MemorySessionStore::new(), || Echo).build();
    /// let mut session = harness.new_session(SessionOptions::new("m"))?;
    /// harness.send(&mut session, "keep").await?;
    /// let before = harness.save_session(&mut session)?;
    /// harness.rewind_session(&mut session, RewindTo::LastTurns(1))?;
    /// assert!(session.transcript().is_empty());
    ///
    /// harness.restore_session(&mut session, before)?; // undo the rewind
    /// assert_eq!(session.transcript().len(), 2);
    /// # Ok::<(), agent_session::Error>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn restore_session(
        &self,
        session: &mut Session<E>,
        revision: Revision,
    ) -> Result<Revision> {
        let past = self.store.load_at(session.id(), revision)?;
        session.restore_from(&past)?;
        self.save_session(session)
    }

    /// [`restore_session`](Self::restore_session) for async code.
    ///
    /// # Errors
    ///
    /// As [`restore_session`](Self::restore_session).
    pub async fn restore_session_async(
        &self,
        session: &mut Session<E>,
        revision: Revision,
    ) -> Result<Revision> {
        let past = self.async_store.load_at(session.id(), revision).await?;
        session.restore_from(&past)?;
        self.save_session_async(session).await
    }

    /// Loads session `id` and binds it to a fresh engine from the factory.
    ///
    /// With `options` `None`, the model, system prompt, `max_turns` and metadata come from
    /// the snapshot. With `Some`, the caller's options are used as given (metadata
    /// included; start from [`SessionOptions::from_snapshot`] to change a few fields).
    /// Either way, `tools` is never stored: it is the caller's executor if given, else the
    /// harness's default.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], a corrupt-kind error if the stored snapshot cannot be trusted,
    /// or [`Error::InvalidArgument`] for invalid options.
    pub fn resume_session(
        &self,
        id: &SessionId,
        options: Option<SessionOptions>,
    ) -> Result<Session<E>> {
        self.resume_session_with(id, |saved| options.unwrap_or(saved))
    }

    /// [`resume_session`](Self::resume_session) for async code: the load is awaited.
    ///
    /// # Errors
    ///
    /// As [`resume_session`](Self::resume_session).
    pub async fn resume_session_async(
        &self,
        id: &SessionId,
        options: Option<SessionOptions>,
    ) -> Result<Session<E>> {
        self.resume_session_with_async(id, |saved| options.unwrap_or(saved))
            .await
    }

    /// Loads session `id`, lets `adjust` change the options saved with it, and binds it to
    /// a fresh engine from the factory. Use it to change a few options on resume (a
    /// different model, a larger `max_turns`) while keeping the rest, metadata included.
    ///
    /// If the adjusted options have no `tools`, the harness's default executor is used.
    ///
    /// # Errors
    ///
    /// As [`resume_session`](Self::resume_session).
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, Engine, Harness,
    /// #     MemorySessionStore, SessionOptions};
    /// # struct MyEngine;
    /// # impl Engine for MyEngine {
    /// #     async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> { unimplemented!() }
    /// # }
    /// let harness = Harness::builder(MemorySessionStore::new(), || MyEngine).build();
    /// let mut session = harness.new_session(SessionOptions::new("small-model").max_turns(4))?;
    /// harness.save_session(&mut session)?;
    ///
    /// let resumed = harness.resume_session_with(session.id(), |mut saved| {
    ///     saved.model = "large-model".into();
    ///     saved
    /// })?;
    /// assert_eq!(resumed.options().model, "large-model");
    /// assert_eq!(resumed.options().max_turns, 4);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn resume_session_with(
        &self,
        id: &SessionId,
        adjust: impl FnOnce(SessionOptions) -> SessionOptions,
    ) -> Result<Session<E>> {
        self.bind(self.store.load(id)?, adjust)
    }

    /// [`resume_session_with`](Self::resume_session_with) for async code: the load is
    /// awaited.
    ///
    /// # Errors
    ///
    /// As [`resume_session`](Self::resume_session).
    pub async fn resume_session_with_async(
        &self,
        id: &SessionId,
        adjust: impl FnOnce(SessionOptions) -> SessionOptions,
    ) -> Result<Session<E>> {
        self.bind(self.async_store.load(id).await?, adjust)
    }

    /// Binds a loaded `snapshot` to a fresh engine, with its options as `adjust` makes
    /// them.
    fn bind(
        &self,
        snapshot: SessionSnapshot,
        adjust: impl FnOnce(SessionOptions) -> SessionOptions,
    ) -> Result<Session<E>> {
        let options = adjust(SessionOptions::from_snapshot(&snapshot));
        Session::restore(
            snapshot,
            (self.engine_factory)(),
            Some(self.with_default_tools(options)),
        )
    }

    /// Resumes session `id` for writing under a lease (see [`Lease`](crate::Lease)): the lease is
    /// taken first, then the session loaded, so what it holds is the latest state. While
    /// the session is open a thread renews the lease every third of its time to live;
    /// every save of the session is fenced by it; dropping the session releases it.
    ///
    /// A second resume for writing, in this process or another, is refused with
    /// [`Error::Leased`] naming the holder and since when, until the session is dropped,
    /// its process ends (file store) or its lease runs out; `request.take_over` takes it
    /// anyway, and the holder's later saves fail with [`Error::Fenced`]. Plain
    /// [`resume_session`](Self::resume_session) stays for read-only use: a save from a
    /// session resumed that way is refused with [`Error::Leased`] while a lease is live.
    ///
    /// # Errors
    ///
    /// [`Error::Leased`]; [`Error::Unsupported`] for a store that cannot lease; as
    /// [`resume_session`](Self::resume_session) otherwise (the lease is released then).
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, Engine};
    /// # struct MyEngine;
    /// # impl Engine for MyEngine {
    /// #     async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> { unimplemented!() }
    /// # }
    /// use agent_session::{
    ///     ErrorKind, FileSessionStore, Harness, LeaseHolder, LeaseRequest, SessionOptions,
    /// };
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let harness = Harness::builder(FileSessionStore::open(dir.path())?, || MyEngine).build();
    /// let mut session = harness.new_session(SessionOptions::new("model"))?;
    /// harness.save_session(&mut session)?;
    /// let id = session.id().clone();
    ///
    /// let request = LeaseRequest::new(LeaseHolder::this_process("chat"));
    /// let mut open = harness.resume_session_leased(&id, None, &request)?;
    /// harness.save_session(&mut open)?;
    ///
    /// // A second writer is told who has the session open.
    /// let refused = harness.resume_session_leased(&id, None, &request).unwrap_err();
    /// assert_eq!(refused.kind(), ErrorKind::Leased);
    ///
    /// drop(open); // releases the lease
    /// let again = harness.resume_session_leased(&id, None, &request)?;
    /// # drop(again);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resume_session_leased(
        &self,
        id: &SessionId,
        options: Option<SessionOptions>,
        request: &LeaseRequest,
    ) -> Result<Session<E>> {
        self.resume_session_leased_with(id, request, |saved| options.unwrap_or(saved))
    }

    /// [`resume_session_leased`](Self::resume_session_leased), with the saved options
    /// changed by `adjust` as [`resume_session_with`](Self::resume_session_with) does.
    ///
    /// # Errors
    ///
    /// As [`resume_session_leased`](Self::resume_session_leased).
    pub fn resume_session_leased_with(
        &self,
        id: &SessionId,
        request: &LeaseRequest,
        adjust: impl FnOnce(SessionOptions) -> SessionOptions,
    ) -> Result<Session<E>> {
        let lease = self.store.acquire_lease(id, request)?;
        let keeper = LeaseKeeper::start(Arc::clone(&self.store), lease.clone(), request.ttl);
        // On failure the keeper is dropped here, which releases the lease.
        let mut session = self.resume_session_with(id, adjust)?;
        session.hold_lease(HeldLease {
            lease,
            _keeper: Box::new(keeper),
        });
        Ok(session)
    }

    /// [`resume_session_leased`](Self::resume_session_leased) for async code: the lease
    /// and the load are awaited (the renewals run on their own thread).
    ///
    /// # Errors
    ///
    /// As [`resume_session_leased`](Self::resume_session_leased).
    pub async fn resume_session_leased_async(
        &self,
        id: &SessionId,
        options: Option<SessionOptions>,
        request: &LeaseRequest,
    ) -> Result<Session<E>> {
        let lease = self.async_store.acquire_lease(id, request).await?;
        let keeper = LeaseKeeper::start(Arc::clone(&self.store), lease.clone(), request.ttl);
        let mut session = self.resume_session_async(id, options).await?;
        session.hold_lease(HeldLease {
            lease,
            _keeper: Box::new(keeper),
        });
        Ok(session)
    }

    /// Takes a lease on `session` (saved at least once) as
    /// [`resume_session_leased`](Self::resume_session_leased) does, for a session this
    /// process created: its later saves are fenced, and another writer is refused until
    /// it is dropped. Returns the lease.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if the session was never saved; otherwise as
    /// [`resume_session_leased`](Self::resume_session_leased).
    pub fn lease_session(&self, session: &mut Session<E>, request: &LeaseRequest) -> Result<Lease> {
        let lease = self.store.acquire_lease(session.id(), request)?;
        let keeper = LeaseKeeper::start(Arc::clone(&self.store), lease.clone(), request.ttl);
        session.hold_lease(HeldLease {
            lease: lease.clone(),
            _keeper: Box::new(keeper),
        });
        Ok(lease)
    }

    /// Resumes the most recently updated readable session.
    ///
    /// # Errors
    ///
    /// [`Error::NoSessions`] if the store holds no readable session; otherwise as
    /// [`resume_session`](Self::resume_session).
    pub fn resume_latest(&self, options: Option<SessionOptions>) -> Result<Session<E>> {
        let latest = latest(self.store.list()?)?;
        self.resume_session(&latest, options)
    }

    /// [`resume_latest`](Self::resume_latest) for async code.
    ///
    /// # Errors
    ///
    /// As [`resume_latest`](Self::resume_latest).
    pub async fn resume_latest_async(&self, options: Option<SessionOptions>) -> Result<Session<E>> {
        let latest = latest(self.async_store.list().await?)?;
        self.resume_session_async(&latest, options).await
    }

    /// Lists stored sessions, newest first.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list`].
    pub fn list_sessions(&self) -> Result<SessionList> {
        self.store.list()
    }

    /// [`list_sessions`](Self::list_sessions) for async code.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list`].
    pub async fn list_sessions_async(&self) -> Result<SessionList> {
        self.async_store.list().await
    }

    /// One page of the stored sessions; see [`SessionStore::list_page`].
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list_page`].
    pub fn list_sessions_page(
        &self,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        self.store.list_page(limit, after)
    }

    /// [`list_sessions_page`](Self::list_sessions_page) for async code.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::list_page`].
    pub async fn list_sessions_page_async(
        &self,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SessionPage> {
        self.async_store.list_page(limit, after).await
    }

    /// Deletes stored session `id`.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::delete`].
    pub fn delete_session(&self, id: &SessionId) -> Result<()> {
        self.store.delete(id)
    }

    /// [`delete_session`](Self::delete_session) for async code.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::delete`].
    pub async fn delete_session_async(&self, id: &SessionId) -> Result<()> {
        self.async_store.delete(id).await
    }

    /// Forks session `id` at `at` into a new session with a generated id, saves the fork,
    /// and resumes it with a fresh engine and the options saved with the parent. The
    /// parent is not changed. See [`SessionStoreExt::fork`](crate::SessionStoreExt::fork).
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::fork`](crate::SessionStoreExt::fork).
    ///
    /// # Examples
    ///
    /// ```
    /// # use agent_session::{BoxError, Completion, CompletionRequest, Engine, Harness,
    /// #     MemorySessionStore, SessionOptions, ForkAt};
    /// # struct MyEngine;
    /// # impl Engine for MyEngine {
    /// #     async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> { unimplemented!() }
    /// # }
    /// let harness = Harness::builder(MemorySessionStore::new(), || MyEngine).build();
    /// let mut session = harness.new_session(SessionOptions::new("model"))?;
    /// harness.save_session(&mut session)?;
    ///
    /// let fork = harness.fork_session(session.id(), ForkAt::End)?;
    /// assert_eq!(fork.lineage().map(|l| &l.parent), Some(session.id()));
    /// assert_eq!(harness.list_sessions()?.sessions.len(), 2);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn fork_session(&self, id: &SessionId, at: ForkAt) -> Result<Session<E>> {
        let fork = SessionStoreExt::fork(&*self.store, id, at, SessionId::generate())?;
        self.bind(fork, |saved| saved)
    }

    /// [`fork_session`](Self::fork_session) for async code.
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::fork`](crate::SessionStoreExt::fork).
    pub async fn fork_session_async(&self, id: &SessionId, at: ForkAt) -> Result<Session<E>> {
        let fork =
            AsyncSessionStoreExt::fork(&*self.async_store, id, at, SessionId::generate()).await?;
        self.bind(fork, |saved| saved)
    }

    /// Archives session `id`: it leaves [`list_sessions`](Self::list_sessions) but still
    /// resumes. See [`SessionStore::set_archived`].
    ///
    /// # Errors
    ///
    /// As [`SessionStore::set_archived`].
    pub fn archive_session(&self, id: &SessionId) -> Result<()> {
        self.store.set_archived(id, true)
    }

    /// Brings archived session `id` back into [`list_sessions`](Self::list_sessions).
    ///
    /// # Errors
    ///
    /// As [`SessionStore::set_archived`].
    pub fn unarchive_session(&self, id: &SessionId) -> Result<()> {
        self.store.set_archived(id, false)
    }

    /// [`archive_session`](Self::archive_session) for async code.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::set_archived`].
    pub async fn archive_session_async(&self, id: &SessionId) -> Result<()> {
        self.async_store.set_archived(id, true).await
    }

    /// [`unarchive_session`](Self::unarchive_session) for async code.
    ///
    /// # Errors
    ///
    /// As [`SessionStore::set_archived`].
    pub async fn unarchive_session_async(&self, id: &SessionId) -> Result<()> {
        self.async_store.set_archived(id, false).await
    }

    /// Deletes (or with a dry run, lists) what `policy` says should go; see
    /// [`SessionStoreExt::prune`](crate::SessionStoreExt::prune).
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::prune`](crate::SessionStoreExt::prune).
    pub fn prune_sessions(&self, policy: &PrunePolicy) -> Result<PruneReport> {
        SessionStoreExt::prune(&*self.store, policy)
    }

    /// [`prune_sessions`](Self::prune_sessions) for async code.
    ///
    /// # Errors
    ///
    /// As [`SessionStoreExt::prune`](crate::SessionStoreExt::prune).
    pub async fn prune_sessions_async(&self, policy: &PrunePolicy) -> Result<PruneReport> {
        AsyncSessionStoreExt::prune(&*self.async_store, policy).await
    }

    fn with_default_tools(&self, mut options: SessionOptions) -> SessionOptions {
        if options.tools.is_none() {
            options.tools.clone_from(&self.tools);
        }
        options
    }
}

/// The id of the first (most recently updated) session of `listing`.
fn latest(listing: SessionList) -> Result<SessionId> {
    listing
        .sessions
        .into_iter()
        .next()
        .map(|summary| summary.id)
        .ok_or(Error::NoSessions)
}
