//! `SqliteSessionStore` beyond the store contract (`tests/store_contract.rs` runs that):
//! the private files, a busy database, the schema version, damage in a row, appends and
//! forks as rows, the async face, and leases across two stores on one database.
#![cfg(all(unix, feature = "sqlite"))]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_session::testing::rich_snapshot;
use agent_session::{
    ContentBlock, Durability, Error, ErrorKind, ForkAt, LeaseHolder, LeaseRequest, ListFilter,
    ListScope, Message, Revision, SessionId, SessionSnapshot, SessionStore, SessionStoreExt,
    SqliteSessionStore, Usage,
};

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).expect("valid id")
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

fn companion(db: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// A raw connection to the store's database, as another program (or a second store)
/// would have.
fn raw(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(db).expect("open the database directly")
}

/// Session `id` with `turns` user/assistant turns, saved turn by turn (so each is an
/// appended entry), and the last snapshot saved.
fn session_with_turns(store: &SqliteSessionStore, id: &str, turns: usize) -> SessionSnapshot {
    let first = SessionSnapshot::builder(sid(id), "m")
        .transcript(vec![Message::user("turn 0")])
        .build()
        .expect("build");
    let revision = store.save(&first).expect("first save");
    let mut snapshot = first.stored_at(revision);
    for turn in 1..turns {
        let next = snapshot
            .with_appended(
                vec![
                    Message::assistant(vec![ContentBlock::text(format!("reply {turn}"))]),
                    Message::user(format!("turn {turn}")),
                ],
                vec![Usage::new("m").with_tokens(10, 2)],
                chrono::Utc::now(),
            )
            .expect("append");
        let revision = store.save(&next).expect("save a turn");
        snapshot = next.stored_at(revision);
    }
    snapshot
}

#[test]
fn the_database_and_its_wal_and_shm_are_private_in_a_private_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("nested").join("deeper").join("sessions.db");
    let store = SqliteSessionStore::open(&db).expect("open");
    store.save(&rich_snapshot("private")).expect("save");
    assert_eq!(mode(db.parent().expect("dir")), 0o700);
    assert_eq!(mode(db.parent().unwrap().parent().unwrap()), 0o700);
    assert_eq!(mode(&db), 0o600);
    // WAL mode: both companions exist while the store is open.
    for suffix in ["-wal", "-shm"] {
        let file = companion(&db, suffix);
        assert!(file.exists(), "{suffix} exists");
        assert_eq!(mode(&file), 0o600, "{suffix}");
    }
}

#[test]
fn a_directory_others_can_write_to_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let open = dir.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let error = SqliteSessionStore::open(open.join("sessions.db")).unwrap_err();
    assert!(matches!(error, Error::Insecure { .. }), "{error:?}");
    assert!(
        error.to_string().contains("writable by other users"),
        "{error}"
    );
    assert!(!open.join("sessions.db").exists(), "nothing was created");
}

#[test]
fn a_readable_directory_is_made_private_when_empty_and_refused_when_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    SqliteSessionStore::open(empty.join("s.db")).expect("open in an empty readable dir");
    assert_eq!(mode(&empty), 0o700);

    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::write(shared.join("other-file"), b"x").expect("write");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let error = SqliteSessionStore::open(shared.join("s.db")).unwrap_err();
    assert!(matches!(error, Error::Insecure { .. }), "{error:?}");
}

#[test]
fn a_database_file_others_can_read_or_a_link_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    drop(SqliteSessionStore::open(&db).expect("open"));
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let error = SqliteSessionStore::open(&db).unwrap_err();
    assert!(matches!(error, Error::Insecure { .. }), "{error:?}");
    assert!(error.to_string().contains("chmod 600"), "{error}");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&db, &link).expect("symlink");
    let error = SqliteSessionStore::open(&link).unwrap_err();
    assert!(matches!(error, Error::Insecure { .. }), "{error:?}");

    // A -wal planted with loose permissions is refused too.
    let wal = companion(&db, "-wal");
    std::fs::write(&wal, b"").expect("plant");
    std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let error = SqliteSessionStore::open(&db).unwrap_err();
    assert!(matches!(error, Error::Insecure { .. }), "{error:?}");
}

#[test]
fn a_file_that_is_not_a_database_is_a_corrupt_kind_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let private = dir.path().join("private");
    std::fs::create_dir(&private).expect("mkdir");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let db = private.join("s.db");
    std::fs::write(&db, vec![0x42u8; 8192]).expect("write");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let error = SqliteSessionStore::open(&db).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error:?}");
    assert!(error.to_string().contains("s.db"), "{error}");
}

/// A second connection holds the write lock: a save waits the busy timeout, then fails
/// with a typed `Busy` (no panic, nothing written); once the lock is free the same save
/// succeeds, and loads never waited meanwhile.
#[test]
fn a_busy_database_waits_the_timeout_then_fails_with_busy_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = SqliteSessionStore::builder()
        .busy_timeout(Duration::from_millis(300))
        .open(&db)
        .expect("open");
    let first = rich_snapshot("busy");
    let revision = store.save(&first).expect("save");
    let loaded = store.load(first.id()).expect("load");
    let next = loaded
        .clone()
        .with_appended(vec![Message::user("more")], vec![], chrono::Utc::now())
        .expect("append");

    let other = raw(&db);
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    let started = Instant::now();
    let error = store.save(&next).unwrap_err();
    let waited = started.elapsed();
    assert_eq!(error.kind(), ErrorKind::Busy, "{error:?}");
    assert!(matches!(error, Error::Busy { .. }), "{error:?}");
    assert!(waited >= Duration::from_millis(250), "waited {waited:?}");
    assert!(error.to_string().contains("s.db"), "{error}");
    // Readers are not blocked by a writer.
    let reading = Instant::now();
    assert_eq!(
        store
            .load(first.id())
            .expect("load while locked")
            .revision(),
        revision
    );
    assert!(reading.elapsed() < Duration::from_millis(250));
    other.execute_batch("COMMIT").expect("release");

    let saved = store
        .save(&next)
        .expect("the same save, now the lock is free");
    assert_eq!(saved, revision.next());
    let reloaded = store.load(first.id()).expect("load");
    assert_eq!(reloaded.transcript().len(), loaded.transcript().len() + 1);
}

/// Two threads saving the same session through two stores while a third connection
/// keeps taking the lock for a while: every save ends in `Ok`, a conflict or `Busy`,
/// and every `Ok` is in the history.
#[test]
fn concurrent_writers_never_lose_an_acknowledged_save() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let make = || {
        Arc::new(
            SqliteSessionStore::builder()
                .busy_timeout(Duration::from_secs(10))
                .open(&db)
                .expect("open"),
        )
    };
    let seed = make();
    seed.save(
        &SessionSnapshot::builder(sid("shared"), "m")
            .build()
            .expect("build"),
    )
    .expect("save");
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let store = make();
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                for i in 0..25 {
                    loop {
                        let loaded = store.load(&sid("shared")).expect("load");
                        let next = loaded
                            .with_appended(
                                vec![Message::user(format!("w{w} i{i}"))],
                                vec![],
                                chrono::Utc::now(),
                            )
                            .expect("append");
                        match store.save(&next) {
                            Ok(revision) => {
                                acknowledged.push((revision, format!("w{w} i{i}")));
                                break;
                            }
                            Err(e) if e.is_conflict() => {}
                            Err(e) => panic!("unexpected {e:?}"),
                        }
                    }
                }
                acknowledged
            })
        })
        .collect();
    let mut all: Vec<(Revision, String)> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker"))
        .collect();
    all.sort();
    let head = seed.load(&sid("shared")).expect("load");
    assert_eq!(head.revision().as_u64(), 101);
    let texts: Vec<String> = head.transcript().iter().map(Message::text).collect();
    for (i, (revision, text)) in all.iter().enumerate() {
        assert_eq!(revision.as_u64(), i as u64 + 2);
        assert_eq!(&texts[i], text, "revision {revision}");
    }
}

#[test]
fn tables_of_a_newer_version_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    drop(SqliteSessionStore::open(&db).expect("open"));
    raw(&db)
        .execute("UPDATE store_version SET version = 99", [])
        .expect("bump the version");
    let error = SqliteSessionStore::open(&db).unwrap_err();
    assert!(
        matches!(error, Error::UnsupportedSchemaVersion { found: 99, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("s.db"), "{error}");
}

#[test]
fn a_turn_is_one_entry_row_and_the_checkpoint_stays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = SqliteSessionStore::open(&db).expect("open");
    let snapshot = session_with_turns(&store, "turns", 5);
    let conn = raw(&db);
    let (entries, checkpoint_revision): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM entries WHERE session_id = 'turns'), checkpoint_revision
             FROM sessions WHERE id = 'turns'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("query");
    assert_eq!((entries, checkpoint_revision), (4, 1));
    let loaded = store.load(snapshot.id()).expect("load");
    assert_eq!(loaded.transcript(), snapshot.transcript());
    assert_eq!(store.revisions(snapshot.id()).expect("revisions").len(), 5);
    let first = store
        .load_at(snapshot.id(), Revision::from_u64(1))
        .expect("load_at");
    assert_eq!(first.transcript().len(), 1);
}

#[test]
fn a_damaged_entry_is_a_corrupt_error_naming_the_row_and_nothing_panics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = SqliteSessionStore::open(&db).expect("open");
    let snapshot = session_with_turns(&store, "damaged", 3);
    let conn = raw(&db);
    // Flip one byte inside the last entry: its checksum no longer matches.
    conn.execute(
        "UPDATE entries SET entry = CAST(substr(entry, 1, 20) || x'FF' || substr(entry, 22) AS BLOB)
         WHERE session_id = 'damaged' AND revision = 3",
        [],
    )
    .expect("damage");
    let error = store.load(snapshot.id()).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error:?}");
    assert!(error.to_string().contains("damaged"), "{error}");
    assert!(error.to_string().contains("s.db"), "{error}");
    // A row whose checkpoint is not JSON, and one with an entry missing.
    let other = session_with_turns(&store, "missing", 3);
    conn.execute(
        "DELETE FROM entries WHERE session_id = 'missing' AND revision = 2",
        [],
    )
    .expect("delete");
    assert_eq!(
        store.load(other.id()).unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    conn.execute(
        "UPDATE checkpoints SET checkpoint = x'00' WHERE session_id = 'missing'",
        [],
    )
    .expect("damage");
    assert_eq!(
        store.load(other.id()).unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    // The listing still works, and a broken summary is reported, not fatal.
    conn.execute("UPDATE sessions SET summary = '{' WHERE id = 'missing'", [])
        .expect("damage");
    let listing = store.list().expect("list");
    assert_eq!(listing.unreadable.len(), 1);
    assert_eq!(listing.sessions.len(), 1);
}

/// A fork saved from a stored revision keeps only its own messages; deleting the parent
/// gives it its own copy first (in the same transaction), so it still loads.
#[test]
fn a_fork_shares_its_parents_messages_until_the_parent_goes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = SqliteSessionStore::open(&db).expect("open");
    let parent = session_with_turns(&store, "parent", 20);
    let fork = store
        .fork(parent.id(), ForkAt::End, sid("fork"))
        .expect("fork");
    let conn = raw(&db);
    let shares = |id: &str| -> (Option<String>, Vec<u8>) {
        conn.query_row(
            "SELECT s.shares_parent, c.checkpoint FROM sessions s
             JOIN checkpoints c ON c.session_id = s.id WHERE s.id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("query")
    };
    let (shared_with, checkpoint) = shares("fork");
    assert_eq!(shared_with.as_deref(), Some("parent"));
    // The parent's messages are not in the fork's row.
    let text = String::from_utf8(checkpoint).expect("JSON");
    assert!(!text.contains("reply 10"), "{text}");
    assert!(text.contains("shared_prefix"), "{text}");
    let loaded = store.load(fork.id()).expect("load the fork");
    assert_eq!(loaded.transcript(), parent.transcript());

    // A turn on the fork appends to the fork only.
    let next = loaded
        .with_appended(vec![Message::user("fork turn")], vec![], chrono::Utc::now())
        .expect("append");
    store.save(&next).expect("save the fork");

    store.delete(parent.id()).expect("delete the parent");
    let (shared_with, _) = shares("fork");
    assert_eq!(shared_with, None, "the fork has its own copy now");
    let after = store.load(fork.id()).expect("the fork still loads");
    assert_eq!(after.transcript(), next.transcript());
    assert_eq!(after.transcript().len(), parent.transcript().len() + 1);
}

#[test]
fn trimming_the_parent_past_a_shared_revision_gives_the_fork_its_copy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = SqliteSessionStore::open(&db).expect("open");
    let parent = session_with_turns(&store, "parent", 4);
    let early = store
        .load_at(parent.id(), Revision::from_u64(2))
        .expect("load_at")
        .stored_at(Revision::from_u64(2));
    let fork = early.fork(sid("fork"), ForkAt::End).expect("fork");
    store.save(&fork).expect("save the fork");
    let expected = store.load(fork.id()).expect("load").transcript().to_vec();
    assert_eq!(
        store
            .trim_history(parent.id(), Revision::from_u64(3))
            .expect("trim"),
        2
    );
    assert_eq!(
        store.load(fork.id()).expect("load").transcript(),
        &expected[..]
    );
}

#[test]
fn the_async_face_runs_on_the_blocking_pool() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(SqliteSessionStore::open(dir.path().join("s.db")).expect("open"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let for_async = Arc::clone(&store).into_async();
    runtime.block_on(async {
        let snapshot = rich_snapshot("async");
        let revision = for_async.save(&snapshot).await.expect("save");
        assert_eq!(
            for_async
                .load(snapshot.id())
                .await
                .expect("load")
                .revision(),
            revision
        );
        assert_eq!(for_async.list().await.expect("list").sessions.len(), 1);
    });
}

/// Two stores on one database (two processes, as far as SQLite is concerned): a lease
/// taken through one is seen and enforced by the other.
#[test]
fn a_lease_taken_through_one_store_holds_for_another_on_the_same_database() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let one = SqliteSessionStore::open(&db).expect("open");
    let two = SqliteSessionStore::open(&db).expect("open again");
    let snapshot = rich_snapshot("leased");
    one.save(&snapshot).expect("save");
    let request = LeaseRequest::new(LeaseHolder::this_process("first"));
    let lease = one.acquire_lease(snapshot.id(), &request).expect("acquire");
    let error = two
        .acquire_lease(
            snapshot.id(),
            &LeaseRequest::new(LeaseHolder::this_process("second")),
        )
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Leased, "{error:?}");
    let loaded = two.load(snapshot.id()).expect("loads need no lease");
    let unleased = loaded
        .clone()
        .with_appended(vec![Message::user("x")], vec![], chrono::Utc::now())
        .expect("append");
    assert_eq!(two.save(&unleased).unwrap_err().kind(), ErrorKind::Leased);
    assert_eq!(two.leases().expect("leases"), vec![lease.clone()]);
    one.release_lease(&lease).expect("release");
    two.save(&unleased).expect("saves once released");
}

#[test]
fn buffered_durability_opens_and_saves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteSessionStore::builder()
        .durability(Durability::Buffered)
        .open(dir.path().join("s.db"))
        .expect("open");
    let snapshot = session_with_turns(&store, "buffered", 3);
    assert_eq!(
        store.load(snapshot.id()).expect("load").transcript(),
        snapshot.transcript()
    );
}

/// Pages of both scopes (archived and not) come from one page of each, merged: they list
/// the same sessions in the same order as the whole listing, archived ones among the
/// others where their times put them.
#[test]
fn pages_of_both_scopes_merge_archived_and_active_sessions_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteSessionStore::builder()
        .durability(Durability::Buffered)
        .open(dir.path().join("s.db"))
        .expect("open");
    for i in 0..14 {
        let id = format!("s{i:02}");
        session_with_turns(&store, &id, 1);
        if i % 3 == 0 {
            store.set_archived(&sid(&id), true).expect("archive");
        }
    }
    let all = ListFilter::new().scope(ListScope::All);
    let whole: Vec<SessionId> = store
        .list_filtered(&all)
        .expect("list")
        .sessions
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(whole.len(), 14);
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_page_filtered(&all, 4, after.as_ref())
            .expect("page");
        assert!(page.sessions.len() <= 4);
        paged.extend(page.sessions.into_iter().map(|s| s.id));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, whole);
    // The first page holds both kinds (the newest, s13, is active; s12 archived).
    let first = store.list_page_filtered(&all, 4, None).expect("page");
    assert!(first.sessions.iter().any(|s| s.archived));
    assert!(first.sessions.iter().any(|s| !s.archived));
}
