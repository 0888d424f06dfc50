//! Many sessions at once through the async API, against a real PostgreSQL server (issue
//! 16): 200 concurrent sessions × 20 turns, each turn saved through
//! `Harness::save_session_async`, on a multi-thread runtime and on a current-thread
//! runtime. Afterwards, through a fresh store: every acknowledged turn is there (0 lost),
//! in order, and each session's revision is its number of turns.
//!
//! "The store never blocks the executor" is checked without timing anything: a save that
//! waits for the server must give the executor back (its future returns `Pending`) while
//! it waits; one that blocked its thread would finish in a single poll. Every save is
//! polled through a counter, and the negative control shows the counter catching a store
//! that blocks.
//!
//! Throughput and p50/p99 save latency are printed (`--nocapture`), never asserted: the
//! machines are shared.
//!
//! The server is the one `AGENT_SESSION_POSTGRES_URL` names (`scripts/test` starts one).

#[cfg(not(feature = "postgres"))]
#[test]
fn async_load_tests_need_the_postgres_feature() {
    eprintln!("skipped: the async load test needs the `postgres` feature; run scripts/test");
}

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod pg;

#[cfg(feature = "postgres")]
mod load {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::{Duration, Instant};

    use agent_session::{
        AsyncSessionStore, BoxError, Completion, CompletionRequest, ContentBlock, Engine, Error,
        Harness, Message, PostgresSessionStore, Role, SessionId, SessionOptions, SessionStore,
        Usage,
    };

    use super::pg::Schemas;

    const SESSIONS: usize = 200;
    const TURNS: usize = 20;

    /// Answers every message with its text.
    struct Echo;

    impl Engine for Echo {
        async fn complete(
            &mut self,
            request: CompletionRequest<'_>,
        ) -> Result<Completion, BoxError> {
            let said = request
                .transcript
                .last()
                .map(Message::text)
                .unwrap_or_default();
            Ok(Completion::new(
                Message::assistant(vec![ContentBlock::text(format!("echo: {said}"))]),
                Usage::new(request.model),
            ))
        }
    }

    type LoadHarness = Harness<fn() -> Echo>;

    fn harness(store: PostgresSessionStore) -> Arc<LoadHarness> {
        Arc::new(Harness::builder(store, (|| Echo) as fn() -> Echo).build())
    }

    /// A future polled through a count of the times it was not ready.
    struct CountPending<'c, F> {
        future: Pin<Box<F>>,
        pending: &'c AtomicUsize,
    }

    impl<F: Future> Future for CountPending<'_, F> {
        type Output = F::Output;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            let poll = self.future.as_mut().poll(cx);
            if poll.is_pending() {
                self.pending.fetch_add(1, Ordering::Relaxed);
            }
            poll
        }
    }

    /// How many times `future` was not ready before it finished, and its output.
    async fn count_pending<F: Future>(future: F) -> (usize, F::Output) {
        let pending = AtomicUsize::new(0);
        let output = CountPending {
            future: Box::pin(future),
            pending: &pending,
        }
        .await;
        (pending.load(Ordering::Relaxed), output)
    }

    /// What one session's task saw: its id, the text of each acknowledged turn with the
    /// revision it was saved at, each save's latency, and how many saves finished in one
    /// poll (without giving the executor back).
    struct Driven {
        id: SessionId,
        acknowledged: Vec<(u64, String)>,
        latencies: Vec<Duration>,
        saves_never_pending: usize,
    }

    async fn drive_one(harness: Arc<LoadHarness>, n: usize) -> Result<Driven, Error> {
        let mut session = harness.new_session(SessionOptions::new("echo-1"))?;
        let mut driven = Driven {
            id: session.id().clone(),
            acknowledged: Vec::with_capacity(TURNS),
            latencies: Vec::with_capacity(TURNS),
            saves_never_pending: 0,
        };
        for turn in 0..TURNS {
            let text = format!("session {n} turn {turn}");
            session.send(text.clone()).await?;
            let started = Instant::now();
            let (pending, saved) = count_pending(harness.save_session_async(&mut session)).await;
            driven.latencies.push(started.elapsed());
            if pending == 0 {
                driven.saves_never_pending += 1;
            }
            driven.acknowledged.push((saved?.as_u64(), text));
        }
        Ok(driven)
    }

    /// Runs every session at once on the current runtime; returns what each saw and how
    /// long it all took.
    async fn drive_all(harness: Arc<LoadHarness>) -> (Vec<Driven>, Duration) {
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..SESSIONS {
            tasks.spawn(drive_one(Arc::clone(&harness), n));
        }
        let mut all = Vec::with_capacity(SESSIONS);
        while let Some(joined) = tasks.join_next().await {
            all.push(
                joined
                    .expect("a session task panicked")
                    .expect("a turn failed"),
            );
        }
        (all, started.elapsed())
    }

    /// Every acknowledged turn is stored, in order, and each revision is its turn count,
    /// as a fresh store instance reads them. Prints throughput and latencies.
    fn check_and_report(
        what: &str,
        store: &PostgresSessionStore,
        driven: &[Driven],
        took: Duration,
    ) {
        assert_eq!(driven.len(), SESSIONS);
        let mut lost = 0;
        for session in driven {
            let stored =
                SessionStore::load(store, &session.id).expect("an acknowledged session loads");
            assert_eq!(stored.revision().as_u64(), TURNS as u64, "{}", session.id);
            let said: Vec<String> = stored
                .transcript()
                .iter()
                .filter(|m| m.role == Role::User)
                .map(Message::text)
                .collect();
            for (turn, (revision, text)) in session.acknowledged.iter().enumerate() {
                assert_eq!(*revision, turn as u64 + 1, "{} turn {turn}", session.id);
                if said.get(turn) != Some(text) {
                    lost += 1;
                }
            }
            assert_eq!(said.len(), TURNS, "{}", session.id);
            assert_eq!(stored.transcript().len(), 2 * TURNS, "{}", session.id);
        }
        assert_eq!(lost, 0, "acknowledged turns missing from the store");
        let mut latencies: Vec<Duration> = driven
            .iter()
            .flat_map(|d| d.latencies.iter().copied())
            .collect();
        latencies.sort();
        // The latency at `percent` of the sorted list (nearest rank).
        let at = |percent: usize| latencies[(latencies.len() - 1) * percent / 100];
        let turns = SESSIONS * TURNS;
        eprintln!(
            "{what}: {SESSIONS} sessions x {TURNS} turns = {turns} saves in {:.2} s: {:.0} turns/s; save latency p50 {:.2} ms, p99 {:.2} ms; 0 lost",
            took.as_secs_f64(),
            f64::from(u32::try_from(turns).expect("a few thousand turns")) / took.as_secs_f64(),
            at(50).as_secs_f64() * 1e3,
            at(99).as_secs_f64() * 1e3,
        );
    }

    fn saves_that_blocked(driven: &[Driven]) -> usize {
        driven.iter().map(|d| d.saves_never_pending).sum()
    }

    /// On a multi-thread runtime, with a store made by `connect` (its own runtime, its
    /// futures awaited from the caller's).
    #[test]
    fn two_hundred_sessions_on_a_multi_thread_runtime_lose_nothing() {
        let schemas = Schemas::new();
        let schema = schemas.name();
        let settings = PostgresSessionStore::builder()
            .schema(schema.clone())
            .clone();
        let store = settings.connect(&super::pg::url()).expect("connect");
        store.migrate().expect("migrate");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (driven, took) = runtime.block_on(drive_all(harness(store)));
        assert_eq!(saves_that_blocked(&driven), 0, "saves that never yielded");
        let fresh = super::pg::connect(&schema);
        check_and_report("multi-thread runtime", &fresh, &driven, took);
    }

    /// On one thread, with a store made on that runtime (`connect_async`): no thread of
    /// the store's own, so every save's waiting must give the only thread back.
    #[test]
    fn two_hundred_sessions_on_a_current_thread_runtime_make_progress() {
        let schemas = Schemas::new();
        let schema = schemas.name();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (driven, took) = runtime.block_on(async {
            let store = PostgresSessionStore::builder()
                .schema(schema.clone())
                .connect_async(&super::pg::url())
                .expect("connect on this runtime");
            store.migrate_async().await.expect("migrate");
            drive_all(harness(store)).await
        });
        assert_eq!(saves_that_blocked(&driven), 0, "saves that never yielded");
        let fresh = super::pg::connect(&schema);
        check_and_report("current-thread runtime", &fresh, &driven, took);
    }

    /// A store whose async calls block their thread on the synchronous store: what the
    /// yield check must catch.
    struct BlocksTheExecutor(PostgresSessionStore);

    #[async_trait::async_trait]
    impl AsyncSessionStore for BlocksTheExecutor {
        async fn save(
            &self,
            snapshot: &agent_session::SessionSnapshot,
        ) -> agent_session::Result<agent_session::Revision> {
            SessionStore::save(&self.0, snapshot)
        }
        async fn load(
            &self,
            id: &SessionId,
        ) -> agent_session::Result<agent_session::SessionSnapshot> {
            SessionStore::load(&self.0, id)
        }
        async fn list(&self) -> agent_session::Result<agent_session::SessionList> {
            SessionStore::list(&self.0)
        }
        async fn delete(&self, id: &SessionId) -> agent_session::Result<()> {
            SessionStore::delete(&self.0, id)
        }
    }

    #[test]
    fn negative_control_the_yield_check_catches_a_store_that_blocks() {
        let schemas = Schemas::new();
        let store = BlocksTheExecutor(schemas.store());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let blocked = runtime.block_on(async {
            let mut blocked = 0;
            for n in 0..5 {
                let snapshot = agent_session::SessionSnapshot::builder(
                    SessionId::parse(&format!("blocking-{n}")).expect("id"),
                    "m",
                )
                .build()
                .expect("snapshot");
                let (pending, saved) = count_pending(store.save(&snapshot)).await;
                saved.expect("save");
                if pending == 0 {
                    blocked += 1;
                }
            }
            blocked
        });
        assert_eq!(blocked, 5, "every blocking save finished in one poll");
    }
}
