//! History retention: `SessionStore::trim_history` and `PrunePolicy::history`. Every
//! revision from the cut on loads exactly as before (the head, `load_at`, the revision
//! list), the revisions before it are a `RevisionNotFound` naming the new oldest one, what
//! only they held leaves `history()`, the bytes shrink, a restore of a dropped revision
//! keeps its view, a session loaded before the trim still saves, bad input changes
//! nothing, and forks sharing a dropped revision of their parent keep loading. On the
//! memory, file and (with the feature) PostgreSQL stores.

mod common;

use std::path::Path;
use std::time::Duration;

use agent_session::{
    Compaction, ContentBlock, Error, FileSessionStore, ForkAt, HistoryRetention,
    MemorySessionStore, Message, PrunePolicy, Revision, RewindTo, SessionId, SessionSnapshot,
    SessionStore, SessionStoreExt, Standing, Usage,
};
use common::sid;

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod postgres_support;

const MODEL: &str = "test-model";

/// Saves `id` with one turn more than it has.
fn turn<S: SessionStore + ?Sized>(store: &S, id: &SessionId, text: &str) -> Revision {
    let loaded = store.load(id).expect("load");
    let updated = loaded.updated_at() + chrono::TimeDelta::milliseconds(1);
    let next = loaded
        .with_appended(
            vec![
                Message::user(format!("{text} {}", "x".repeat(400))),
                Message::assistant(vec![ContentBlock::text(format!("reply to {text}"))]),
            ],
            vec![Usage::new(MODEL).with_tokens(10, 2)],
            updated,
        )
        .expect("append");
    store.save(&next).expect("save a turn")
}

/// A session with a history of every kind: turns, a rewind, a compaction, a restore of
/// revision 2 (which the trim below drops), more turns. Returns every revision as it
/// loads, oldest first (index 0 is revision 1).
fn rich_history<S: SessionStore + ?Sized>(store: &S, id: &SessionId) -> Vec<SessionSnapshot> {
    store
        .save(
            &SessionSnapshot::builder(id.clone(), MODEL)
                .transcript(vec![
                    Message::user("first"),
                    Message::assistant(vec![ContentBlock::text("one")]),
                ])
                .build()
                .expect("build"),
        )
        .expect("first save");
    for i in 0..4 {
        turn(store, id, &format!("turn {i}"));
    }
    store.rewind(id, RewindTo::LastTurns(1)).expect("rewind"); // 6
    let mut compacted = store.load(id).expect("load");
    let point = compacted.compaction_point(2).expect("a point");
    compacted
        .compact(Compaction::new(
            point,
            vec![Message::user("summary of the start")],
        ))
        .expect("compact");
    store.save(&compacted).expect("save the compaction"); // 7
    turn(store, id, "after the compaction"); // 8
    store.restore(id, Revision::from_u64(2)).expect("restore"); // 9
    turn(store, id, "after the restore"); // 10
    turn(store, id, "last"); // 11
    let last = store.load(id).expect("load").revision().as_u64();
    assert_eq!(last, 11);
    (1..=last)
        .map(|r| store.load_at(id, Revision::from_u64(r)).expect("load_at"))
        .collect()
}

/// How `store`'s listing shows session `id`.
fn summary_of<S: SessionStore + ?Sized>(
    store: &S,
    id: &SessionId,
) -> agent_session::SessionSummary {
    store
        .list()
        .expect("list")
        .sessions
        .into_iter()
        .find(|s| s.id == *id)
        .expect("listed")
}

/// Checks one store: the trim at revision 7 and everything the module says.
#[allow(clippy::too_many_lines)] // one scenario, checked step by step
fn trims_and_keeps_every_later_revision<S: SessionStore + ?Sized>(store: &S, what: &str) {
    let id = sid("trimmed");
    let before = rich_history(store, &id);
    let head = store.load(&id).expect("load");
    let history_before = store.history(&id).expect("history");
    let bytes_before = store.stored_bytes(&id).expect("bytes");
    // A session loaded before the trim, saved after it.
    let stale = store.load(&id).expect("load");

    let cut = Revision::from_u64(7);
    assert_eq!(store.trim_history(&id, cut).expect("trim"), 6, "{what}");
    assert_eq!(store.load(&id).expect("load"), head, "{what}: the head");
    for (i, expected) in before.iter().enumerate() {
        let revision = Revision::from_u64(i as u64 + 1);
        match store.load_at(&id, revision) {
            Ok(loaded) => {
                assert!(revision >= cut, "{what}: revision {revision} still loads");
                assert_eq!(&loaded, expected, "{what}: revision {revision}");
            }
            Err(Error::RevisionNotFound { oldest, newest, .. }) => {
                assert!(revision < cut, "{what}: revision {revision} is gone");
                assert_eq!((oldest, newest), (cut, head.revision()), "{what}");
            }
            Err(e) => panic!("{what}: revision {revision}: {e}"),
        }
    }
    let revisions = store.revisions(&id).expect("revisions");
    assert_eq!(revisions.first().map(|r| r.revision), Some(cut), "{what}");
    assert_eq!(revisions.len(), 5, "{what}");
    // The restore of revision 2 (now dropped) still says what view it made.
    assert_eq!(
        revisions[2].messages,
        before[8].transcript().len(),
        "{what}: the restore's view"
    );
    // What only the dropped revisions held is gone from the history; nothing else is.
    let history = store.history(&id).expect("history");
    assert_eq!(history.oldest_revision, cut, "{what}");
    assert!(
        history.messages.len() < history_before.messages.len(),
        "{what}: the history did not shrink"
    );
    let view: Vec<&Message> = history.view().collect();
    let expected: Vec<&Message> = head.transcript().iter().collect();
    assert_eq!(view, expected, "{what}");
    for message in &history.messages {
        if let Standing::Rewound { revision } | Standing::Compacted { revision } = message.standing
        {
            assert!(revision > cut, "{what}: {revision} was dropped");
        }
    }
    if let (Some(before), Some(after)) = (bytes_before, store.stored_bytes(&id).expect("bytes")) {
        assert!(
            after < before,
            "{what}: {after} bytes after, {before} before"
        );
    }
    let listed = summary_of(store, &id);
    assert_eq!(listed.history.oldest_revision, cut, "{what}");
    assert_eq!(listed.revision, head.revision(), "{what}");

    // Nothing more to drop; a revision not kept is refused and changes nothing.
    assert_eq!(store.trim_history(&id, cut).expect("again"), 0, "{what}");
    for wrong in [Revision::from_u64(3), Revision::from_u64(12)] {
        let err = store.trim_history(&id, wrong).expect_err("not kept");
        assert!(
            matches!(err, Error::RevisionNotFound { revision, .. } if revision == wrong),
            "{what}: {err:?}"
        );
        let err = store.restore(&id, wrong).expect_err("not kept");
        assert!(err.is_not_found(), "{what}: {err:?}");
    }
    assert_eq!(store.load(&id).expect("load"), head, "{what}");
    assert!(store
        .trim_history(&sid("missing"), cut)
        .expect_err("no session")
        .is_not_found());

    // The session loaded before the trim still saves, and the history counts what the log
    // holds.
    let next = stale
        .with_appended(
            vec![Message::user("from before the trim")],
            vec![],
            head.updated_at() + chrono::TimeDelta::milliseconds(5),
        )
        .expect("append");
    let saved = store.save(&next).expect("a stale session saves");
    let loaded = store.load(&id).expect("load");
    assert_eq!(loaded, next.with_revision(saved), "{what}");
    let listed = summary_of(store, &id);
    assert_eq!(listed.history, loaded.history_stats(), "{what}");
    assert_eq!(listed.history.oldest_revision, cut, "{what}");
    // Trimmed to the head: one revision left, the view only.
    store.trim_history(&id, saved).expect("trim to the head");
    assert_eq!(store.revisions(&id).expect("revisions").len(), 1, "{what}");
    assert_eq!(store.load(&id).expect("load"), loaded, "{what}");
    assert!(
        store
            .history(&id)
            .expect("history")
            .messages
            .iter()
            .all(|m| m.standing.is_in_view()),
        "{what}"
    );
}

#[test]
fn the_memory_store_trims_and_keeps_every_later_revision() {
    trims_and_keeps_every_later_revision(&MemorySessionStore::new(), "memory");
}

#[test]
fn the_file_store_trims_and_keeps_every_later_revision() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path()).expect("open");
    trims_and_keeps_every_later_revision(&store, "file");
    // And a fresh process reads the same.
    let head = store.load(&sid("trimmed")).expect("load");
    let fresh = FileSessionStore::open(dir.path()).expect("open again");
    assert_eq!(fresh.load(&sid("trimmed")).expect("load"), head);
    assert_eq!(
        fresh.revisions(&sid("trimmed")).expect("revisions").len(),
        1
    );
}

#[cfg(feature = "postgres")]
#[test]
fn the_postgres_store_trims_and_keeps_every_later_revision() {
    let schemas = postgres_support::Schemas::new();
    trims_and_keeps_every_later_revision(&schemas.store(), "postgres");
}

/// A fork of revision 3 of a file-store session shares its messages; trimming the parent
/// past revision 3 gives the fork its own copy first, so it loads the same, also after the
/// parent is deleted. A fork of the head (kept) keeps sharing.
#[test]
fn forks_sharing_a_dropped_revision_keep_loading() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path()).expect("open");
    let parent = sid("parent");
    rich_history(&store, &parent);
    let old = store
        .load_at(&parent, Revision::from_u64(3))
        .expect("revision 3");
    // A fork of a loaded head shares; one made from revision 3 as the head does too
    // (through a session restored there).
    store
        .restore(&parent, Revision::from_u64(3))
        .expect("restore 3");
    let early = store
        .fork(&parent, ForkAt::End, sid("early-fork"))
        .expect("fork");
    assert_eq!(early.transcript(), old.transcript());
    let early_bytes = bytes_of(dir.path(), "early-fork");
    turn(&store, &parent, "more");
    let late = store
        .fork(&parent, ForkAt::End, sid("late-fork"))
        .expect("fork the head");
    let late_bytes = bytes_of(dir.path(), "late-fork");

    let head = store.load(&parent).expect("load").revision();
    store.trim_history(&parent, head).expect("trim to the head");
    for (fork, expected) in [("early-fork", &early), ("late-fork", &late)] {
        let fresh = FileSessionStore::open(dir.path()).expect("open");
        assert_eq!(&fresh.load(&sid(fork)).expect("load the fork"), expected);
    }
    // The early fork holds its own copy now; the late one (the head, kept) still shares.
    assert!(bytes_of(dir.path(), "early-fork") > early_bytes);
    assert_eq!(bytes_of(dir.path(), "late-fork"), late_bytes);
    // A fork of a dropped revision cannot be made: the revision is not there.
    let err = store
        .load_at(&parent, Revision::from_u64(3))
        .and_then(|old| old.fork(sid("too-late"), ForkAt::End))
        .expect_err("revision 3 was dropped");
    assert!(matches!(err, Error::RevisionNotFound { .. }), "{err:?}");
    store.delete(&parent).expect("delete the parent");
    for (fork, expected) in [("early-fork", &early), ("late-fork", &late)] {
        let fresh = FileSessionStore::open(dir.path()).expect("open");
        assert_eq!(&fresh.load(&sid(fork)).expect("load the fork"), expected);
    }
}

fn bytes_of(dir: &Path, id: &str) -> u64 {
    std::fs::metadata(dir.join(format!("{id}.json")))
        .map(|m| m.len())
        .expect("the fork's base")
}

/// `PrunePolicy::history`: a maximum number of revisions and a maximum age, previewed with
/// a dry run that changes nothing, then applied; sessions without that much history, and
/// sessions the policy deletes, are not trimmed.
#[test]
fn prune_trims_the_history_of_the_sessions_that_stay() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (what, store) in [
        (
            "memory",
            Box::new(MemorySessionStore::new()) as Box<dyn SessionStore>,
        ),
        (
            "file",
            Box::new(FileSessionStore::open(dir.path()).expect("open")) as Box<dyn SessionStore>,
        ),
    ] {
        let long = sid("long");
        let short = sid("short");
        rich_history(&*store, &long);
        store
            .save(
                &SessionSnapshot::builder(short.clone(), MODEL)
                    .build()
                    .expect("build"),
            )
            .expect("save");
        let head = store.load(&long).expect("load");

        let policy = PrunePolicy::new().history(HistoryRetention::new().max_revisions(3));
        let preview = store.prune(&policy.clone().dry_run(true)).expect("dry run");
        assert_eq!(preview.trimmed.len(), 1, "{what}");
        let planned = &preview.trimmed[0];
        assert_eq!(planned.id, long, "{what}");
        assert_eq!(
            (planned.oldest_before, planned.oldest_after, planned.dropped),
            (Revision::from_u64(1), Revision::from_u64(9), 8),
            "{what}"
        );
        assert_eq!(planned.bytes_after, None, "{what}");
        assert_eq!(
            store.revisions(&long).expect("revisions").len(),
            11,
            "{what}"
        );

        let report = store.prune(&policy).expect("prune");
        assert_eq!(report.trimmed.len(), 1, "{what}");
        assert_eq!(report.trimmed[0].dropped, 8, "{what}");
        assert!(
            report.pruned.is_empty() && report.skipped.is_empty(),
            "{what}"
        );
        if let (Some(before), Some(after)) = (
            report.trimmed[0].bytes_before,
            report.trimmed[0].bytes_after,
        ) {
            assert!(after < before, "{what}");
        }
        assert_eq!(
            store.revisions(&long).expect("revisions").len(),
            3,
            "{what}"
        );
        assert_eq!(store.load(&long).expect("load"), head, "{what}");

        // By age: every revision is older than an hour from a `now` two hours on, so only
        // the head stays.
        let later = chrono::Utc::now() + chrono::TimeDelta::hours(2);
        let by_age = PrunePolicy::new()
            .now(later)
            .history(HistoryRetention::new().max_age(Duration::from_secs(3600)));
        let report = store.prune(&by_age).expect("prune by age");
        assert_eq!(report.trimmed.len(), 1, "{what}: {:?}", report.trimmed);
        assert_eq!(
            store.revisions(&long).expect("revisions").len(),
            1,
            "{what}"
        );
        assert_eq!(store.load(&long).expect("load"), head, "{what}");
        // Nothing left to drop.
        assert!(
            store.prune(&by_age).expect("again").trimmed.is_empty(),
            "{what}"
        );
        // A session the policy deletes is not trimmed first.
        let report = store
            .prune(
                &PrunePolicy::new()
                    .max_count(1)
                    .history(HistoryRetention::new().max_revisions(1)),
            )
            .expect("prune");
        assert_eq!(report.pruned.len(), 1, "{what}");
        assert!(report.trimmed.is_empty(), "{what}");
    }
}
