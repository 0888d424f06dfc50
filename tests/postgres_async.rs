//! `PostgresSessionStore`'s async face (feature `postgres`, against the server in
//! `AGENT_SESSION_POSTGRES_URL`, as `tests/postgres.rs`): the whole store contract run
//! through `AsyncSessionStore` for a store made by `connect_async` (on the test's runtime)
//! and one made by `connect` (on its private runtime); many sessions saved concurrently
//! on a current-thread runtime, which only works if the store's async calls never block
//! that one thread; and the typed errors of `connect_async` outside a runtime and of a
//! synchronous call that would deadlock. `tests/postgres_async_threads.rs` checks that
//! such a store starts no threads.

#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_async_tests_need_the_postgres_feature() {
    eprintln!(
        "skipped: the PostgresSessionStore async tests need the `postgres` feature; run \
         scripts/test (cargo test --all-features against a throw-away server it starts)"
    );
}

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod pg;

#[cfg(feature = "postgres")]
mod postgres_async {
    use std::sync::Arc;

    use agent_session::testing;
    use agent_session::{
        AsyncSessionStore, Error, History, Lease, LeaseRequest, ListCursor, ListScope, Message,
        PostgresSessionStore, Result, Revision, RevisionInfo, SessionId, SessionList, SessionPage,
        SessionSnapshot, SessionStore, SessionSummary,
    };
    use chrono::{Duration, Utc};
    use tokio::task::JoinSet;

    use super::pg::{self, Schemas};

    /// A synchronous store that runs every call through an async one,
    /// `handle.block_on(store.op(..)).` The contract suite calls it from plain threads,
    /// so what it checks is the async implementation.
    struct BlockOn {
        store: Arc<dyn AsyncSessionStore>,
        handle: tokio::runtime::Handle,
    }

    impl SessionStore for BlockOn {
        fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
            self.handle.block_on(self.store.save(snapshot))
        }
        fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
            self.handle.block_on(self.store.load(id))
        }
        fn list(&self) -> Result<SessionList> {
            self.handle.block_on(self.store.list())
        }
        fn list_page(&self, limit: usize, after: Option<&ListCursor>) -> Result<SessionPage> {
            self.handle.block_on(self.store.list_page(limit, after))
        }
        fn delete(&self, id: &SessionId) -> Result<()> {
            self.handle.block_on(self.store.delete(id))
        }
        fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
            self.handle.block_on(self.store.list_scoped(scope))
        }
        fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
            self.handle.block_on(self.store.set_archived(id, archived))
        }
        fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
            self.handle.block_on(self.store.delete_if_unchanged(listed))
        }
        fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
            self.handle.block_on(self.store.stored_bytes(id))
        }
        fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
            self.handle.block_on(self.store.load_at(id, revision))
        }
        fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
            self.handle.block_on(self.store.revisions(id))
        }
        fn history(&self, id: &SessionId) -> Result<History> {
            self.handle.block_on(self.store.history(id))
        }
        fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
            self.handle.block_on(self.store.restore(id, revision))
        }
        fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
            self.handle.block_on(self.store.trim_history(id, oldest))
        }
        fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
            self.handle.block_on(self.store.acquire_lease(id, request))
        }
        fn renew_lease(&self, lease: &Lease, ttl: std::time::Duration) -> Result<Lease> {
            self.handle.block_on(self.store.renew_lease(lease, ttl))
        }
        fn release_lease(&self, lease: &Lease) -> Result<()> {
            self.handle.block_on(self.store.release_lease(lease))
        }
        fn leases(&self) -> Result<Vec<Lease>> {
            self.handle.block_on(self.store.leases())
        }
    }

    fn multi_thread_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("start a runtime")
    }

    fn contract(make: impl Fn() -> BlockOn) {
        let report = testing::contract(make);
        println!("{report}");
        report.assert_complete();
    }

    /// Every case on a fresh schema, through the async calls of a store on the test's own
    /// runtime: no private runtime, every query awaited on the runtime's tasks.
    #[test]
    fn a_connect_async_store_meets_the_contract_through_its_async_calls() {
        let runtime = multi_thread_runtime();
        let schemas = Schemas::new();
        contract(|| {
            let store = {
                let _entered = runtime.enter();
                PostgresSessionStore::builder()
                    .schema(schemas.name())
                    .connect_async(&pg::url())
                    .expect("connect_async inside a runtime")
            };
            runtime
                .block_on(store.migrate_async())
                .expect("migrate a fresh schema");
            BlockOn {
                store: Arc::new(store).into_async(),
                handle: runtime.handle().clone(),
            }
        });
    }

    /// The same through a store on its private runtime: its async calls are spawned
    /// there and awaited from the test's runtime.
    #[test]
    fn a_connect_store_meets_the_contract_through_its_async_calls() {
        let runtime = multi_thread_runtime();
        let schemas = Schemas::new();
        contract(|| {
            let store = PostgresSessionStore::builder()
                .schema(schemas.name())
                .connect(&pg::url())
                .expect("connect");
            runtime
                .block_on(store.migrate_async())
                .expect("migrate a fresh schema");
            BlockOn {
                store: Arc::new(store).into_async(),
                handle: runtime.handle().clone(),
            }
        });
    }

    fn id(name: &str) -> SessionId {
        SessionId::parse(name).expect("valid test id")
    }

    /// `turns` user messages, `turn 0` to `turn {turns - 1}`.
    fn turns(turns: usize) -> Vec<Message> {
        (0..turns)
            .map(|turn| Message::user(format!("turn {turn}")))
            .collect()
    }

    const SESSIONS: usize = 50;
    const SAVES: usize = 5;

    /// 50 sessions, each saved 5 times (one more turn each time), all at once as tasks of
    /// one current-thread runtime, with no thread of the store's own. Afterwards every
    /// session has every revision and every turn.
    #[test]
    fn many_sessions_save_concurrently_on_a_current_thread_runtime() {
        let schemas = Schemas::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("start a runtime");
        runtime.block_on(async {
            let store = Arc::new(
                PostgresSessionStore::builder()
                    .schema(schemas.name())
                    .pool_size(8)
                    .connect_async(&pg::url())
                    .expect("connect_async"),
            );
            store.migrate_async().await.expect("migrate");
            let mut tasks = JoinSet::new();
            for n in 0..SESSIONS {
                let store = Arc::clone(&store);
                tasks.spawn(async move {
                    let name = id(&format!("concurrent-{n}"));
                    let created = Utc::now();
                    let mut updated = created;
                    let mut revision = Revision::NEW;
                    for save in 1..=SAVES {
                        updated += Duration::seconds(1);
                        let snapshot = SessionSnapshot::builder(name.clone(), "pg-model")
                            .transcript(turns(save))
                            .timestamps(created, updated)
                            .build()
                            .expect("build")
                            .with_revision(revision);
                        revision = AsyncSessionStore::save(&*store, &snapshot)
                            .await
                            .expect("save");
                        // Let the other sessions' saves interleave with this one's.
                        tokio::task::yield_now().await;
                    }
                    revision
                });
            }
            while let Some(done) = tasks.join_next().await {
                let revision = done.expect("a session's task");
                assert_eq!(revision, Revision::from_u64(SAVES as u64));
            }
            let listed = AsyncSessionStore::list(&*store).await.expect("list");
            assert_eq!(listed.sessions.len(), SESSIONS);
            assert!(listed.unreadable.is_empty(), "{:?}", listed.unreadable);
            for n in 0..SESSIONS {
                let name = id(&format!("concurrent-{n}"));
                let loaded = AsyncSessionStore::load(&*store, &name).await.expect("load");
                assert_eq!(loaded.revision(), Revision::from_u64(SAVES as u64));
                assert_eq!(loaded.transcript(), turns(SAVES).as_slice(), "{name}");
                let revisions = AsyncSessionStore::revisions(&*store, &name)
                    .await
                    .expect("revisions");
                let numbers: Vec<u64> = revisions.iter().map(|r| r.revision.as_u64()).collect();
                assert_eq!(numbers, (1..=SAVES as u64).collect::<Vec<_>>(), "{name}");
                for save in 1..=SAVES {
                    let past =
                        AsyncSessionStore::load_at(&*store, &name, Revision::from_u64(save as u64))
                            .await
                            .expect("load_at");
                    assert_eq!(past.transcript(), turns(save).as_slice(), "{name}@{save}");
                }
            }
        });
    }

    #[test]
    fn connect_async_outside_a_runtime_is_an_invalid_argument() {
        let error = PostgresSessionStore::builder()
            .connect_async(&pg::url())
            .expect_err("no runtime to run on");
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
        assert!(error.to_string().contains("connect_async"), "{error}");
        // Decided before any connection is tried: a server that is not there changes
        // nothing.
        let error = PostgresSessionStore::builder()
            .connect_async("host=127.0.0.1 port=1 user=x dbname=x")
            .expect_err("no runtime to run on");
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
    }

    /// A synchronous call on the thread of the current-thread runtime the store runs on
    /// would wait for a task only that thread can run: it is refused. From a plain thread
    /// it works while the runtime runs.
    #[test]
    fn sync_calls_of_a_current_thread_store_are_refused_on_its_thread_and_work_elsewhere() {
        let schemas = Schemas::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("start a runtime");
        runtime.block_on(async {
            let store = Arc::new(
                PostgresSessionStore::builder()
                    .schema(schemas.name())
                    .connect_async(&pg::url())
                    .expect("connect_async"),
            );
            store.migrate_async().await.expect("migrate");
            let error = SessionStore::list(&*store).expect_err("would deadlock");
            assert!(matches!(error, Error::Unsupported { .. }), "{error:?}");
            let error = store.migrate().expect_err("would deadlock");
            assert!(matches!(error, Error::Unsupported { .. }), "{error:?}");

            // A plain thread's synchronous calls run on this runtime while it awaits.
            let from_thread = Arc::clone(&store);
            let (sender, receiver) = tokio::sync::oneshot::channel();
            std::thread::spawn(move || {
                let snapshot = SessionSnapshot::builder(id("from-a-thread"), "pg-model")
                    .transcript(turns(1))
                    .build()
                    .expect("build");
                let saved = SessionStore::save(&*from_thread, &snapshot);
                let _ = sender.send(saved);
            });
            let saved = receiver.await.expect("the thread's result");
            assert_eq!(saved.expect("save"), Revision::from_u64(1));
            let loaded = AsyncSessionStore::load(&*store, &id("from-a-thread"))
                .await
                .expect("load");
            assert_eq!(loaded.transcript(), turns(1).as_slice());
        });
    }

    /// `into_async` of the store is the store itself, not a blocking-pool wrapper: an
    /// async save through it runs on a current-thread runtime without a blocking pool
    /// thread (the save would still work through one, so this checks the type's name).
    #[test]
    fn into_async_returns_the_store_itself() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("start a runtime");
        let store = {
            let _entered = runtime.enter();
            PostgresSessionStore::builder()
                .connect_async(&pg::url())
                .expect("connect_async")
        };
        let store = Arc::new(store);
        let as_async = Arc::clone(&store).into_async();
        let same = std::ptr::addr_eq(Arc::as_ptr(&store), Arc::as_ptr(&as_async));
        assert!(same, "into_async wrapped the store");
    }
}
