//! Forks that share their prefix: in the file store a fork made from a stored revision
//! keeps none of the messages it shares with its parent, loads exactly as the fork it is,
//! and never breaks, whatever happens to the parent (turns, rewinds, a compaction, a
//! delete, a prune, another session under its id). A fork whose parent's stored state is
//! not what it holds (a fork of an unsaved state; of another store's session of the same
//! id, creation time and revision) keeps its own messages, in the file and SQLite stores.
//! Everything through the public API; the files are only measured and, for one negative
//! case, removed by hand.

mod common;

use agent_session::{
    Compaction, ContentBlock, ErrorKind, FileSessionStore, ForkAt, MemorySessionStore, Message,
    PrunePolicy, RewindTo, SessionId, SessionSnapshot, SessionStore, SessionStoreExt, ToolCall,
    ToolResult, Usage,
};
use common::sid;
use serde_json::json;

/// A session of `turns` turns of four messages (prompt, tool call, result, answer), about
/// 250 bytes a message, saved turn by turn as a harness does.
fn grown(store: &dyn SessionStore, id: &SessionId, turns: usize) -> SessionSnapshot {
    store
        .save(
            &SessionSnapshot::builder(id.clone(), "m")
                .build()
                .expect("build"),
        )
        .expect("create");
    let mut current = store.load(id).expect("load");
    for turn in 0..turns {
        let call = format!("call_{turn}");
        current = current
            .with_appended(
                vec![
                    Message::user(format!("{turn}: {}", "please look ".repeat(18))),
                    Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                        call.clone(),
                        "read",
                        json!({"path": format!("src/{turn}.rs")}),
                    ))]),
                    Message::tool_result(ToolResult::new(call, "x".repeat(200))),
                    Message::assistant(vec![ContentBlock::text("done ".repeat(40))]),
                ],
                vec![Usage::new("m").with_tokens(100, 20)],
                chrono::Utc::now(),
            )
            .expect("extend");
        let revision = store.save(&current).expect("save a turn");
        current = current.with_revision(revision);
    }
    current
}

fn file_store() -> (tempfile::TempDir, FileSessionStore) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path().join("store")).expect("open");
    (dir, store)
}

fn bytes(store: &FileSessionStore, id: &SessionId) -> u64 {
    store.stored_bytes(id).expect("size").expect("known")
}

#[test]
fn a_fork_at_the_end_of_a_thousand_messages_takes_a_few_hundred_bytes() {
    let (_dir, store) = file_store();
    let parent = grown(&store, &sid("parent"), 250);
    assert_eq!(parent.transcript().len(), 1_000);
    let fork = store
        .fork(parent.id(), ForkAt::End, sid("fork"))
        .expect("fork");
    let (parent_bytes, fork_bytes) = (bytes(&store, parent.id()), bytes(&store, fork.id()));
    eprintln!(
        "fork at the end of 1,000 messages: {fork_bytes} bytes, the parent {parent_bytes}: 0.{:04} x",
        fork_bytes * 10_000 / parent_bytes
    );
    assert!(
        fork_bytes * 20 <= parent_bytes,
        "the fork takes {fork_bytes} bytes, the parent {parent_bytes}"
    );
    // It is the fork it was made as, through a fresh store too.
    assert_eq!(store.load(fork.id()).expect("load"), fork);
    let reopened = FileSessionStore::open(store.dir()).expect("reopen");
    assert_eq!(reopened.load(fork.id()).expect("load"), fork);
    assert_eq!(
        reopened.load(fork.id()).expect("load").transcript(),
        parent.transcript()
    );
    // Listed with its lineage, as a fork holding its own copy would be.
    let listed = reopened.list().expect("list");
    let summary = listed
        .sessions
        .iter()
        .find(|s| s.id == *fork.id())
        .expect("listed");
    assert_eq!(summary.message_count, 1_000);
    assert_eq!(
        summary.lineage.as_ref().map(|l| &l.parent),
        Some(parent.id())
    );
}

#[test]
fn a_shared_prefix_survives_whatever_the_parent_does_next() {
    let (_dir, store) = file_store();
    let parent = grown(&store, &sid("p"), 6);
    let fork = store
        .fork(parent.id(), ForkAt::Turns(4), sid("f"))
        .expect("fork");
    assert_eq!(fork.transcript(), &parent.transcript()[..16]);
    // The fork goes on by itself.
    let fork_next = fork
        .clone()
        .with_appended(
            vec![
                Message::user("fork's own"),
                Message::assistant(vec![ContentBlock::text("ok")]),
            ],
            vec![],
            chrono::Utc::now(),
        )
        .expect("extend the fork");
    let revision = store.save(&fork_next).expect("save the fork");
    let fork_next = fork_next.with_revision(revision);
    // The parent rewinds, compacts and goes on.
    store
        .rewind(parent.id(), RewindTo::LastTurns(3))
        .expect("rewind");
    let mut compacted = store.load(parent.id()).expect("load");
    compacted
        .compact(Compaction::new(8, vec![Message::user("summary")]))
        .expect("compact");
    store.save(&compacted).expect("save the compaction");
    grown_more(&store, parent.id());
    for reader in [
        &store,
        &FileSessionStore::open(store.dir()).expect("reopen"),
    ] {
        assert_eq!(reader.load(fork.id()).expect("load"), fork_next);
        assert_eq!(
            reader.load_at(fork.id(), fork.revision()).expect("load_at"),
            fork.clone()
        );
        assert_eq!(reader.revisions(fork.id()).expect("revisions").len(), 2);
    }
}

fn grown_more(store: &dyn SessionStore, id: &SessionId) {
    let current = store.load(id).expect("load");
    let next = current
        .with_appended(
            vec![
                Message::user("more"),
                Message::assistant(vec![ContentBlock::text("yes")]),
            ],
            vec![],
            chrono::Utc::now(),
        )
        .expect("extend");
    store.save(&next).expect("save");
}

#[test]
fn deleting_or_replacing_the_parent_gives_each_fork_its_own_copy_first() {
    let (_dir, store) = file_store();
    let parent = grown(&store, &sid("parent"), 5);
    let a = store
        .fork(parent.id(), ForkAt::End, sid("fork-a"))
        .expect("fork a");
    let b = store
        .fork(parent.id(), ForkAt::Turns(2), sid("fork-b"))
        .expect("fork b");
    let small = bytes(&store, a.id());
    store.delete(parent.id()).expect("delete the parent");
    for fork in [&a, &b] {
        assert_eq!(store.load(fork.id()).expect("load"), *fork);
        let reopened = FileSessionStore::open(store.dir()).expect("reopen");
        assert_eq!(reopened.load(fork.id()).expect("load"), *fork);
    }
    assert!(
        bytes(&store, a.id()) > small * 10,
        "the fork holds its own copy now"
    );

    // Another session under a parent's id replaces its history: its forks first get theirs.
    let parent = grown(&store, &sid("parent-2"), 3);
    let c = store
        .fork(parent.id(), ForkAt::End, sid("fork-c"))
        .expect("fork c");
    let other = SessionSnapshot::builder(parent.id().clone(), "m")
        .transcript(vec![Message::user("someone else")])
        .build()
        .expect("build")
        .with_revision(parent.revision());
    store.save(&other).expect("replace the parent");
    assert_eq!(store.load(c.id()).expect("load"), c);

    // A prune that deletes a parent keeps its forks whole.
    let parent = grown(&store, &sid("parent-3"), 2);
    let d = store
        .fork(parent.id(), ForkAt::End, sid("fork-d"))
        .expect("fork d");
    let report = store
        .prune(&PrunePolicy::default().max_count(1))
        .expect("prune");
    assert!(
        report.pruned.iter().any(|p| p.summary.id == *parent.id()),
        "{report:?}"
    );
    assert!(report.skipped.is_empty(), "{report:?}");
    // The newest session, the fork, is the one kept.
    assert_eq!(store.list().expect("list").sessions.len(), 1);
    assert_eq!(store.load(d.id()).expect("load"), d);
}

#[test]
fn forks_of_forks_share_up_to_a_depth_and_a_middle_one_can_go() {
    let (_dir, store) = file_store();
    let root = grown(&store, &sid("f0"), 3);
    let mut chain = vec![root.clone()];
    for depth in 1..=10 {
        let parent = chain.last().expect("a parent").id().clone();
        let fork = store
            .fork(&parent, ForkAt::End, sid(&format!("f{depth}")))
            .expect("fork");
        chain.push(fork);
    }
    let sizes: Vec<u64> = chain.iter().map(|s| bytes(&store, s.id())).collect();
    // The first 8 forks share; the 9th is written whole, and the 10th shares with it.
    assert!(sizes[1..=8].iter().all(|&b| b * 5 < sizes[0]), "{sizes:?}");
    assert!(sizes[9] * 2 > sizes[0], "{sizes:?}");
    assert!(sizes[10] * 5 < sizes[0], "{sizes:?}");
    let reopened = FileSessionStore::open(store.dir()).expect("reopen");
    for fork in &chain {
        assert_eq!(reopened.load(fork.id()).expect("load"), *fork);
    }
    // The middle of the chain goes: the one after it takes its own copy, the rest follow.
    reopened.delete(chain[4].id()).expect("delete");
    for (i, fork) in chain.iter().enumerate().filter(|(i, _)| *i != 4) {
        assert_eq!(reopened.load(fork.id()).expect("load"), *fork, "f{i}");
    }
}

#[test]
fn a_fork_whose_parent_vanished_by_hand_is_refused_not_shortened() {
    let (_dir, store) = file_store();
    let parent = grown(&store, &sid("parent"), 3);
    let fork = store
        .fork(parent.id(), ForkAt::End, sid("fork"))
        .expect("fork");
    for suffix in ["json", "journal", "summary"] {
        let _ = std::fs::remove_file(store.dir().join(format!("parent.{suffix}")));
    }
    let reopened = FileSessionStore::open(store.dir()).expect("reopen");
    let err = reopened
        .load(fork.id())
        .expect_err("the shared messages are gone");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("parent"), "{err}");
    // A snapshot file that shares its prefix is not a whole session for from_json either.
    let base = std::fs::read(store.path_of(fork.id())).expect("read");
    assert!(SessionSnapshot::from_json(&base).is_err());
}

#[test]
fn forks_of_what_is_not_stored_or_into_another_store_hold_their_own_copy() {
    let (_dir, store) = file_store();
    let parent = grown(&store, &sid("parent"), 4);
    // A fork of a changed snapshot (not what the store holds) is written whole.
    let changed = parent
        .clone()
        .with_appended(vec![Message::user("unsaved")], vec![], chrono::Utc::now())
        .expect("extend");
    let fork = changed.fork(sid("of-unsaved"), ForkAt::End).expect("fork");
    store.save(&fork).expect("save");
    assert!(bytes(&store, fork.id()) * 2 > bytes(&store, parent.id()));
    assert_eq!(
        store.load(fork.id()).expect("load").transcript(),
        changed.transcript()
    );
    // A fork of another store's session is written whole too.
    let (_other_dir, other) = file_store();
    let elsewhere = grown(&other, &sid("parent"), 2);
    let fork = other
        .load(elsewhere.id())
        .expect("load")
        .fork(sid("from-elsewhere"), ForkAt::End)
        .expect("fork");
    store.save(&fork).expect("save");
    assert_eq!(
        store.load(fork.id()).expect("load"),
        fork.with_revision(agent_session::Revision::from_u64(1),)
    );
    // The memory store keeps a copy, and loads the same fork.
    let memory = MemorySessionStore::new();
    let parent = grown(&memory, &sid("parent"), 3);
    let fork = memory
        .fork(parent.id(), ForkAt::Turns(1), sid("fork"))
        .expect("fork");
    assert_eq!(memory.load(fork.id()).expect("load"), fork);
}

/// Every store that shares a fork's prefix with its parent (the file store, and SQLite
/// with its feature), each in a temporary directory of its own.
fn sharing_stores() -> (Vec<tempfile::TempDir>, Vec<Box<dyn SessionStore>>) {
    let (dir, file) = file_store();
    #[cfg_attr(not(feature = "sqlite"), allow(unused_mut))]
    let (mut dirs, mut stores): (_, Vec<Box<dyn SessionStore>>) = (vec![dir], vec![Box::new(file)]);
    #[cfg(feature = "sqlite")]
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("db").join("s.db");
        stores.push(Box::new(
            agent_session::SqliteSessionStore::open(db).expect("open"),
        ));
        dirs.push(dir);
    }
    (dirs, stores)
}

/// A fork of a parent's unsaved state (the last turn rewound and another in its place,
/// in memory) names the parent's stored revision but does not hold its messages: saving
/// it must keep its own, not refer to the stored ones, in every store that shares
/// prefixes.
#[test]
fn a_fork_of_an_unsaved_state_keeps_its_own_messages() {
    let (_dirs, stores) = sharing_stores();
    for store in stores.iter().map(Box::as_ref) {
        let parent = grown(store, &sid("p"), 3);
        let mut edited = parent.clone();
        edited.rewind(RewindTo::LastTurns(1)).expect("rewind");
        let edited = edited
            .with_appended(
                vec![
                    Message::user("another last question"),
                    Message::assistant(vec![ContentBlock::text("another answer")]),
                ],
                vec![],
                chrono::Utc::now(),
            )
            .expect("extend");
        let fork = edited.fork(sid("f"), ForkAt::End).expect("fork");
        assert_eq!(
            fork.lineage().map(|l| l.parent_revision),
            Some(parent.revision()),
            "the fork names the parent's stored revision"
        );
        let revision = store.save(&fork).expect("save the fork");
        let loaded = store.load(fork.id()).expect("load the fork");
        assert_eq!(loaded.transcript(), edited.transcript());
        assert_eq!(loaded.revision(), revision);
        // Unchanged when the parent goes on.
        grown_more(store, parent.id());
        assert_eq!(
            store.load(fork.id()).expect("load").transcript(),
            edited.transcript()
        );
    }
}

/// A fork loaded from one store and saved into another that holds a session of the same
/// id, creation time and revision, but other messages (two stores that imported the same
/// session and went on differently): the store must not take its own parent's messages
/// for the fork's.
#[test]
fn a_fork_of_another_stores_parent_keeps_its_own_messages() {
    let (_dir, elsewhere) = file_store();
    let (_dirs, stores) = sharing_stores();
    let first = SessionSnapshot::builder(sid("p"), "m")
        .transcript(vec![Message::user("the same start")])
        .build()
        .expect("build");
    let with_turn = |store: &dyn SessionStore, text: &str| {
        let loaded = store.load(first.id()).expect("load");
        let next = loaded
            .with_appended(
                vec![
                    Message::user(text),
                    Message::assistant(vec![ContentBlock::text(format!("{text}, answered"))]),
                ],
                vec![],
                chrono::Utc::now(),
            )
            .expect("extend");
        store.save(&next).expect("save a turn");
    };
    elsewhere.save(&first).expect("save");
    with_turn(&elsewhere, "asked elsewhere");
    let parent = elsewhere.load(first.id()).expect("load");
    for store in stores.iter().map(Box::as_ref) {
        store.save(&first).expect("save");
        with_turn(store, "asked here");
        let here = store.load(first.id()).expect("load");
        assert_eq!(
            (here.created_at(), here.revision()),
            (parent.created_at(), parent.revision()),
            "the same session, as far as ids, creation times and revisions tell"
        );
        assert_ne!(here.transcript(), parent.transcript());
        let fork = parent.fork(sid("f"), ForkAt::End).expect("fork");
        store.save(&fork).expect("save the fork");
        assert_eq!(
            store.load(fork.id()).expect("load").transcript(),
            parent.transcript()
        );
    }
}
