//! A `PostgresSessionStore` made by `connect_async` starts no threads (feature `postgres`,
//! against the server in `AGENT_SESSION_POSTGRES_URL`): made and used on a current-thread
//! runtime, it leaves the process with exactly the threads it had, so its connections and
//! queries run on the caller's thread and on no blocking pool.
//!
//! The only test of its binary, so that no other test's threads come and go meanwhile.

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod pg;

/// The threads of this process now (Linux: the entries of `/proc/self/task`).
#[cfg(all(feature = "postgres", target_os = "linux"))]
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("read /proc/self/task")
        .count()
}

#[cfg(all(feature = "postgres", target_os = "linux"))]
#[test]
fn a_connect_async_store_runs_on_the_callers_thread_and_starts_none() {
    use agent_session::{
        AsyncSessionStore, Message, PostgresSessionStore, Revision, SessionId, SessionSnapshot,
    };

    let schemas = pg::Schemas::new();
    let schema = schemas.name();
    let url = pg::url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("start a runtime");
    let before = threads();
    let during = runtime.block_on(async {
        let store = PostgresSessionStore::builder()
            .schema(schema)
            .connect_async(&url)
            .expect("connect_async");
        store.migrate_async().await.expect("migrate");
        let id = SessionId::parse("no-threads").expect("id");
        let mut revision = Revision::NEW;
        // Twenty calls: ten saves, then loads, listings and the history.
        for save in 1..=10 {
            let snapshot = SessionSnapshot::builder(id.clone(), "pg-model")
                .transcript(
                    (0..save)
                        .map(|turn| Message::user(format!("turn {turn}")))
                        .collect(),
                )
                .timestamps(
                    chrono::DateTime::UNIX_EPOCH,
                    chrono::DateTime::UNIX_EPOCH + chrono::Duration::seconds(save),
                )
                .build()
                .expect("build")
                .with_revision(revision);
            revision = store.save(&snapshot).await.expect("save");
        }
        for _ in 0..3 {
            assert_eq!(store.load(&id).await.expect("load").revision(), revision);
            assert_eq!(store.list().await.expect("list").sessions.len(), 1);
            assert_eq!(store.revisions(&id).await.expect("revisions").len(), 10);
        }
        assert!(store.stored_bytes(&id).await.expect("size").is_some());
        let during = threads();
        drop(store);
        during
    });
    let after = threads();
    assert_eq!(
        (before, during, after),
        (before, before, before),
        "threads before the store, while it ran 20 calls, after it was dropped"
    );
    // The schema is dropped through a connection of a thread of its own: after counting.
    drop(schemas);
}

#[cfg(not(all(feature = "postgres", target_os = "linux")))]
#[test]
fn thread_count_test_needs_the_postgres_feature_on_linux() {
    eprintln!("skipped: needs the `postgres` feature and /proc/self/task (Linux)");
}
