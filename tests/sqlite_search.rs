//! `SqliteSessionStore`'s search index and filtered listings beyond the store contract
//! (issue 18): the FTS5 index names the sessions a search reads and follows every change
//! of a log (appends, whole writes, trims, deletes, forks whose parent goes), both while
//! the words wait in `search_pending` and once a later save has moved them into the
//! index; databases of tables versions 1 (no index) and 2 (no pending rows) are brought
//! up with their sessions still found; filtered pages walk the listing index across its
//! chunks, each unreadable row reported once; new indexed metadata keys rewrite the
//! summaries.
#![cfg(all(unix, feature = "sqlite"))]

use std::path::Path;

use agent_session::{
    ContentBlock, ForkAt, IndexedMetadata, ListFilter, ListScope, Message, Revision, SearchPage,
    SearchQuery, SessionId, SessionSnapshot, SessionStore, SessionStoreExt, SqliteSessionStore,
    Usage,
};
use serde_json::json;

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).expect("valid id")
}

fn raw(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(db).expect("open the database directly")
}

/// Session `id` whose first message is `first`, then `turns` more turns, each saved as an
/// appended entry with the words `word{turn}`.
fn session(store: &SqliteSessionStore, id: &str, first: &str, turns: usize) -> SessionSnapshot {
    let snapshot = SessionSnapshot::builder(sid(id), "m")
        .transcript(vec![Message::user(first)])
        .build()
        .expect("build");
    let revision = store.save(&snapshot).expect("first save");
    let mut snapshot = snapshot.stored_at(revision);
    for turn in 1..=turns {
        let next = snapshot
            .with_appended(
                vec![
                    Message::assistant(vec![ContentBlock::text(format!("reply{turn}"))]),
                    Message::user(format!("word{turn} of {id}")),
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

fn search(store: &SqliteSessionStore, words: &str) -> SearchPage {
    store
        .search(
            &SearchQuery::new(words).expect("query"),
            &ListFilter::new().scope(ListScope::All),
            100,
            None,
        )
        .expect("search")
}

fn found(page: &SearchPage) -> Vec<String> {
    let mut ids: Vec<String> = page.hits.iter().map(|h| h.session.id.to_string()).collect();
    ids.sort();
    ids
}

/// Rows in `table`.
fn count(db: &Path, table: &str) -> i64 {
    raw(db)
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .expect("count")
}

/// Saves turns of a session `padding` (whose only word is `padding`) until the store has
/// moved every pending row's words into the FTS5 index, so the rows saved before are
/// searched through the index, not matched as pending rows.
fn index_pending(store: &SqliteSessionStore, db: &Path) {
    let mut snapshot = match store.load(&sid("padding")) {
        Ok(snapshot) => snapshot,
        Err(e) if e.is_not_found() => {
            let first = SessionSnapshot::builder(sid("padding"), "m")
                .transcript(vec![Message::user("padding")])
                .build()
                .expect("build");
            let revision = store.save(&first).expect("save");
            first.stored_at(revision)
        }
        Err(e) => panic!("load the padding session: {e}"),
    };
    for _ in 0..1_000 {
        if count(db, "search_pending") == 0 {
            return;
        }
        let next = snapshot
            .with_appended(vec![Message::user("padding")], vec![], chrono::Utc::now())
            .expect("append");
        let revision = store.save(&next).expect("save");
        snapshot = next.stored_at(revision);
    }
    panic!("1,000 saves never moved the pending words into the index");
}

/// Damages the checkpoint of `id` so that reading its log fails.
fn damage(db: &Path, id: &str) {
    raw(db)
        .execute(
            "UPDATE checkpoints SET checkpoint = x'7b' WHERE session_id = ?1",
            [id],
        )
        .expect("damage a checkpoint");
}

#[test]
fn a_search_reads_only_the_sessions_the_index_names() {
    search_reads_only_the_sessions_the_index_names(false);
}

#[test]
fn a_search_reads_only_the_sessions_the_index_names_once_indexed() {
    search_reads_only_the_sessions_the_index_names(true);
}

/// With `indexed`, the sessions' words are moved into FTS5 before searching; without,
/// they are still pending.
fn search_reads_only_the_sessions_the_index_names(indexed: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = SqliteSessionStore::open(&db).expect("open");
    session(&store, "a", "the lock bug", 2);
    session(&store, "b", "nothing here", 2);
    session(&store, "c", "a damaged session", 2);
    if indexed {
        index_pending(&store, &db);
        assert!(
            count(&db, "search_rows") >= 9,
            "a, b and c are in the index"
        );
    } else {
        assert_eq!(count(&db, "search_rows"), 0, "nothing indexed yet");
        assert_eq!(count(&db, "search_pending"), 9);
    }
    damage(&db, "c");

    // `lock` is in `a` only: `c` is never read, so it is not reported unreadable.
    let page = search(&store, "lock");
    assert_eq!(found(&page), ["a"]);
    assert!(page.unreadable.is_empty(), "{:?}", page.unreadable);
    // Words of an appended entry, and prefixes, are indexed too (every word of a query
    // in one message).
    assert_eq!(found(&search(&store, "word2 of a")), ["a"]);
    assert_eq!(found(&search(&store, "repl*")), ["a", "b"]);
    // Control: a word `c` holds makes the search read it, and its damage is reported;
    // so does a search of metadata (not indexed), which reads every session.
    assert_eq!(search(&store, "damaged").unreadable.len(), 1);
    let every = store
        .search(
            &SearchQuery::new("lock").expect("query").in_metadata(true),
            &ListFilter::new(),
            100,
            None,
        )
        .expect("search");
    assert_eq!(
        every.unreadable.len(),
        1,
        "a metadata search reads every session"
    );
}

#[test]
fn the_index_follows_whole_writes_trims_deletes_and_forks_whose_parent_goes() {
    index_follows_every_change(false);
}

#[test]
fn the_index_follows_every_change_once_the_words_are_indexed() {
    index_follows_every_change(true);
}

/// With `indexed`, the words are moved into FTS5 after each change; without, the
/// changes' words stay pending (the first few saves of a store).
fn index_follows_every_change(indexed: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = SqliteSessionStore::open(&db).expect("open");
    let settle = || {
        if indexed {
            index_pending(&store, &db);
        }
    };
    let parent = session(&store, "parent", "kestrel", 4);
    settle();

    // A trim makes the state at revision 3 the checkpoint: its messages (the first one
    // too) must still be found, and the kept entries' words.
    assert_eq!(
        store
            .trim_history(parent.id(), Revision::from_u64(3))
            .expect("trim"),
        2
    );
    settle();
    assert_eq!(found(&search(&store, "kestrel")), ["parent"]);
    assert_eq!(found(&search(&store, "word4")), ["parent"]);

    // A fork sharing the parent's messages is found by them, before and after the parent
    // is deleted (it gets its own copy then).
    let fork = store
        .fork(parent.id(), ForkAt::End, sid("fork"))
        .expect("fork");
    settle();
    assert_eq!(found(&search(&store, "kestrel")), ["fork", "parent"]);
    store.delete(parent.id()).expect("delete the parent");
    settle();
    assert_eq!(found(&search(&store, "kestrel")), ["fork"]);

    // A snapshot saved whole over the session (another session under its id) replaces
    // its words.
    store.delete(fork.id()).expect("delete the fork");
    let other = SessionSnapshot::builder(sid("fork"), "m")
        .transcript(vec![Message::user("osprey")])
        .build()
        .expect("build");
    store.save(&other).expect("save");
    settle();
    assert_eq!(found(&search(&store, "osprey")), ["fork"]);
    assert!(found(&search(&store, "kestrel")).is_empty());
    let rows: i64 = raw(&db)
        .query_row(
            "SELECT count(*) FROM (SELECT session_id FROM search_rows
                                   UNION ALL SELECT session_id FROM search_pending)
             WHERE session_id != 'padding'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(rows, 1, "the deleted sessions' words went with them");
}

/// A database of tables version 1 (made by an earlier build of this release, before
/// search): the store's tables without the search tables.
fn downgrade_to_version_1(db: &Path) {
    raw(db)
        .execute_batch(
            "DROP TABLE search_words; DROP TABLE search_rows; DROP TABLE unindexed;
             DROP TABLE search_pending; DROP TABLE views;
             DELETE FROM store_version; INSERT INTO store_version (version) VALUES (1);",
        )
        .expect("make a version 1 database");
}

#[test]
fn a_version_1_database_is_brought_up_and_its_sessions_are_still_found() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    {
        let store = SqliteSessionStore::open(&db).expect("open");
        session(&store, "old", "heron", 2);
        session(&store, "gone", "heron", 1);
    }
    downgrade_to_version_1(&db);
    let store = SqliteSessionStore::open(&db).expect("open brings the tables up");
    let version: i64 = raw(&db)
        .query_row("SELECT max(version) FROM store_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 4);
    // Saved before the index: always read, so still found.
    assert_eq!(found(&search(&store, "heron")), ["gone", "old"]);
    // A new turn is indexed; a delete forgets the session's mark.
    let old = store.load(&sid("old")).expect("load");
    let next = old
        .with_appended(vec![Message::user("egret")], vec![], chrono::Utc::now())
        .expect("append");
    store.save(&next).expect("save");
    assert_eq!(found(&search(&store, "egret")), ["old"]);
    store.delete(&sid("gone")).expect("delete");
    let marked: i64 = raw(&db)
        .query_row("SELECT count(*) FROM unindexed", [], |r| r.get(0))
        .expect("count");
    assert_eq!(marked, 1);
    // Opening again changes nothing.
    drop(store);
    let store = SqliteSessionStore::open(&db).expect("open again");
    assert_eq!(found(&search(&store, "heron")), ["old"]);
}

#[test]
fn a_version_2_database_is_brought_up_with_its_index_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    {
        let store = SqliteSessionStore::open(&db).expect("open");
        session(&store, "old", "heron", 2);
        index_pending(&store, &db);
    }
    // Version 2 wrote every row's words into FTS5 at once: no pending table.
    raw(&db)
        .execute_batch(
            "DROP TABLE search_pending; DROP TABLE views;
             DELETE FROM store_version; INSERT INTO store_version (version) VALUES (2);",
        )
        .expect("make a version 2 database");
    let store = SqliteSessionStore::open(&db).expect("open brings the tables up");
    let version: i64 = raw(&db)
        .query_row("SELECT max(version) FROM store_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, 4);
    assert_eq!(count(&db, "unindexed"), 0, "version 2 rows are all indexed");
    assert_eq!(found(&search(&store, "heron")), ["old"]);
    let old = store.load(&sid("old")).expect("load");
    let next = old
        .with_appended(vec![Message::user("egret")], vec![], chrono::Utc::now())
        .expect("append");
    store.save(&next).expect("save");
    assert_eq!(count(&db, "search_pending"), 1);
    assert_eq!(found(&search(&store, "egret")), ["old"]);
    assert_eq!(found(&search(&store, "heron egret")), Vec::<String>::new());
}

#[test]
fn filtered_pages_walk_the_listing_index_across_its_chunks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = SqliteSessionStore::builder()
        .durability(agent_session::Durability::Buffered)
        .index_metadata(IndexedMetadata::new(["team"]).expect("keys"))
        .open(&db)
        .expect("open");
    // More sessions than one chunk of the walk holds, a third of them on team "red".
    for n in 0..650 {
        let team = if n % 3 == 0 { "red" } else { "blue" };
        let snapshot = SessionSnapshot::builder(sid(&format!("s{n:04}")), "m")
            .metadata_entry("team", json!(team))
            .timestamps(
                chrono::DateTime::from_timestamp(1_700_000_000 + n, 0).expect("time"),
                chrono::DateTime::from_timestamp(1_700_000_000 + n, 0).expect("time"),
            )
            .build()
            .expect("build");
        store.save(&snapshot).expect("save");
    }
    // Two unreadable rows: a blue one, and a red one (not listed then).
    for id in ["s0301", "s0450"] {
        raw(&db)
            .execute("UPDATE sessions SET summary = '{' WHERE id = ?1", [id])
            .expect("damage a summary");
    }
    let filter = ListFilter::new().metadata_eq("team", json!("red"));
    let listing = store.list_filtered(&filter).expect("list");
    assert_eq!(listing.unreadable.len(), 2);
    let whole: Vec<SessionId> = listing.sessions.into_iter().map(|s| s.id).collect();
    assert_eq!(whole.len(), 216);
    for limit in [1, 7, 199, 200, 215, 216, 500] {
        let mut paged = Vec::new();
        let mut unreadable = 0;
        let mut after = None;
        loop {
            let page = store
                .list_page_filtered(&filter, limit, after.as_ref())
                .expect("page");
            assert!(page.sessions.len() <= limit);
            unreadable += page.unreadable.len();
            paged.extend(page.sessions.into_iter().map(|s| s.id));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(paged, whole, "pages of {limit}");
        assert_eq!(unreadable, 2, "each unreadable row once, pages of {limit}");
    }
}

#[test]
fn a_store_opened_with_new_keys_filters_right_and_rewrites_its_summaries() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let plain = SqliteSessionStore::open(&db).expect("open");
    for (id, project) in [("one", "parser"), ("two", "docs")] {
        let snapshot = SessionSnapshot::builder(sid(id), "m")
            .metadata_entry("project", json!(project))
            .build()
            .expect("build");
        plain.save(&snapshot).expect("save");
    }
    let filter = ListFilter::new().metadata_eq("project", json!("parser"));
    assert!(plain.list_filtered(&filter).is_err(), "not indexed");
    drop(plain);

    let keys = IndexedMetadata::new(["project"]).expect("keys");
    let indexed = SqliteSessionStore::builder()
        .index_metadata(keys.clone())
        .open(&db)
        .expect("open with keys");
    let ids = |store: &SqliteSessionStore| -> Vec<String> {
        store
            .list_filtered(&filter)
            .expect("filtered")
            .sessions
            .iter()
            .map(|s| s.id.to_string())
            .collect()
    };
    assert_eq!(ids(&indexed), ["one"]);
    let summaries: Vec<String> = {
        let conn = raw(&db);
        let mut statement = conn
            .prepare("SELECT summary FROM sessions ORDER BY id")
            .expect("prepare");
        statement
            .query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    };
    assert!(
        summaries
            .iter()
            .all(|s| s.contains("\"indexed\":[\"project\"]")),
        "{summaries:?}"
    );
    let again = SqliteSessionStore::builder()
        .index_metadata(keys)
        .open(&db)
        .expect("open again");
    assert_eq!(ids(&again), ["one"]);
    assert_eq!(
        again
            .list_page_filtered(&filter, 1, None)
            .expect("page")
            .sessions[0]
            .id,
        sid("one")
    );
}
