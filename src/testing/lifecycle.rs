//! The lifecycle cases of the store contract: fork, archive, the conditional delete,
//! prune, and export and import through bundles.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::{
    Bundle, ContentBlock, Cost, Error, ErrorKind, ForkAt, ImportIds, ListScope, Message,
    PrunePolicy, PruneReason, PruneReport, Result, Revision, RewindTo, SessionId, SessionList,
    SessionSnapshot, SessionStore, SessionStoreExt, SessionSummary,
};
use chrono::Utc;
use serde_json::{json, Value};

use super::support::{at, id, rebuild, rich_snapshot, simple_snapshot};

// -----------------------------------------------------------------------------------
// Helpers.
// -----------------------------------------------------------------------------------

/// `rich_snapshot` with two more turns: 14 messages; prompts (turn starts) at 1, 10 and
/// 12; tool calls made in message 2 (answered in 3, 4 and 5), 6 (answered in 7) and 8
/// (answered in 9).
fn multi_turn(name: &str) -> SessionSnapshot {
    let rich = rich_snapshot(name);
    let mut transcript = rich.transcript().to_vec();
    transcript.extend([
        Message::user("second question"),
        Message::assistant(vec![ContentBlock::text("second answer")]),
        Message::user("third question"),
        Message::assistant(vec![ContentBlock::text("third answer")]),
    ]);
    rebuild(&rich)
        .transcript(transcript)
        .build()
        .expect("build")
}

/// Saves `snapshot`, then saves it again with one metadata change, and returns it as
/// stored (revision 2).
fn save_twice<S: SessionStore>(store: &S, snapshot: &SessionSnapshot) -> SessionSnapshot {
    store.save(snapshot).expect("first save");
    let loaded = store.load(snapshot.id()).expect("load");
    let changed = rebuild(&loaded)
        .metadata_entry("saved", json!(2))
        .build()
        .expect("build")
        .with_revision(loaded.revision());
    assert_eq!(
        store.save(&changed).expect("second save"),
        Revision::from_u64(2)
    );
    store.load(snapshot.id()).expect("reload")
}

/// Saves a one-message session `name` last updated at `at(updated)`, whose message is
/// `text_len` characters long.
fn save_aged<S: SessionStore>(store: &S, name: &str, updated: i64, text_len: usize) {
    let snapshot = SessionSnapshot::builder(id(name), "prune-model")
        .timestamps(at(updated - 1_000), at(updated))
        .transcript(vec![Message::user("x".repeat(text_len.max(1)))])
        .build()
        .expect("build");
    store.save(&snapshot).expect("save");
}

/// The bytes `store` says session `name` uses (its JSON length if it cannot tell, as
/// `prune` measures it).
fn bytes_of<S: SessionStore>(store: &S, name: &str) -> u64 {
    match store.stored_bytes(&id(name)).expect("stored bytes") {
        Some(bytes) => bytes,
        None => store
            .load(&id(name))
            .and_then(|s| s.to_json())
            .map(|json| json.len() as u64)
            .expect("measure"),
    }
}

/// The listing of `scope`, asserting nothing is unreadable.
fn listing<S: SessionStore>(store: &S, scope: ListScope) -> Vec<SessionSummary> {
    let SessionList {
        sessions,
        unreadable,
        ..
    } = store.list_scoped(scope).expect("list");
    assert!(unreadable.is_empty(), "{unreadable:?}");
    sessions
}

/// The ids listed in `scope`, in the listing's order.
fn names<S: SessionStore>(store: &S, scope: ListScope) -> Vec<String> {
    listing(store, scope)
        .into_iter()
        .map(|s| s.id.into_string())
        .collect()
}

/// The summary of `name` in `scope`, if listed.
fn summary_in<S: SessionStore>(store: &S, scope: ListScope, name: &str) -> Option<SessionSummary> {
    listing(store, scope)
        .into_iter()
        .find(|s| s.id.as_str() == name)
}

/// Every id `list_page` walks to, two at a time.
fn paged_names<S: SessionStore>(store: &S) -> Vec<String> {
    let mut walked = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list_page(2, cursor.as_ref()).expect("page");
        walked.extend(page.sessions.iter().map(|s| s.id.to_string()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => return walked,
        }
    }
}

/// The pruned sessions of `report`, in its order, with their reasons.
fn pruned(report: &PruneReport) -> Vec<(String, PruneReason)> {
    report
        .pruned
        .iter()
        .map(|p| (p.summary.id.to_string(), p.reason))
        .collect()
}

fn expect_pruned(expected: &[(&str, PruneReason)]) -> Vec<(String, PruneReason)> {
    expected
        .iter()
        .map(|(name, reason)| ((*name).to_owned(), *reason))
        .collect()
}

/// Asserts `report` pruned what the listing `before` showed (same summaries), each with
/// the size measured before in `sizes`, and that `bytes()` is their sum; and that every
/// pruned session is gone from `store` unless it was a dry run.
fn check_report<S: SessionStore>(
    store: &S,
    report: &PruneReport,
    before: &[SessionSummary],
    sizes: &HashMap<String, u64>,
) {
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    assert!(report.unreadable.is_empty(), "{:?}", report.unreadable);
    let mut total = 0;
    for p in &report.pruned {
        let name = p.summary.id.as_str();
        let listed = before
            .iter()
            .find(|s| s.id == p.summary.id)
            .expect("pruned sessions were listed");
        assert_eq!(&p.summary, listed, "the report shows the listing's summary");
        // A store that cannot tell its sizes has them measured only when a size limit
        // needs them, and reported as 0 otherwise (see `Pruned::bytes`).
        let cannot_tell = matches!(store.stored_bytes(&p.summary.id), Ok(None));
        if !(cannot_tell && p.bytes == 0) {
            assert_eq!(p.bytes, sizes[name], "{name}: the size measured before");
        }
        total += p.bytes;
        let gone = store.load(&p.summary.id);
        if report.dry_run {
            assert!(gone.is_ok(), "{name}: a dry run deleted it");
        } else {
            assert!(
                gone.expect_err("pruned").is_not_found(),
                "{name}: not deleted"
            );
        }
    }
    assert_eq!(report.bytes(), total);
    // Oldest first.
    for pair in report.pruned.windows(2) {
        let (a, b) = (&pair[0].summary, &pair[1].summary);
        assert!(
            (a.updated_at, &a.id) < (b.updated_at, &b.id),
            "not oldest first: {} then {}",
            a.id,
            b.id
        );
    }
}

/// The sizes of every session listed in `scope`.
fn sizes<S: SessionStore>(store: &S) -> HashMap<String, u64> {
    names(store, ListScope::All)
        .into_iter()
        .map(|name| {
            let bytes = bytes_of(store, &name);
            (name, bytes)
        })
        .collect()
}

/// Asserts two snapshots hold the same session content, ids, revisions and lineage
/// aside.
fn assert_same_content(actual: &SessionSnapshot, expected: &SessionSnapshot) {
    let what = format!("{} as {}", expected.id(), actual.id());
    assert_eq!(actual.created_at(), expected.created_at(), "{what}");
    assert_eq!(actual.updated_at(), expected.updated_at(), "{what}");
    assert_eq!(actual.options(), expected.options(), "{what}");
    assert_eq!(actual.metadata(), expected.metadata(), "{what}");
    assert_eq!(actual.transcript(), expected.transcript(), "{what}");
    assert_eq!(actual.tool_calls(), expected.tool_calls(), "{what}");
    assert_eq!(actual.usage(), expected.usage(), "{what}");
}

// -----------------------------------------------------------------------------------
// Fork.
// -----------------------------------------------------------------------------------

pub(super) fn fork_at_message_turn_and_end_copies_the_prefix_and_records_lineage<
    S: SessionStore,
>(
    store: &S,
) {
    let parent = save_twice(store, &multi_turn("fork-parent"));
    assert_eq!(parent.revision(), Revision::from_u64(2));
    assert_eq!(parent.transcript().len(), 14);
    assert_eq!(parent.tool_calls().len(), 5);
    assert!(!parent.usage().is_empty());
    // (name, fork point, messages kept, tool-call records kept)
    let cases = [
        ("fork-m0", ForkAt::Messages(0), 0, 0),
        ("fork-m6", ForkAt::Messages(6), 6, 3),
        ("fork-m8", ForkAt::Messages(8), 8, 4),
        ("fork-m11", ForkAt::Messages(11), 11, 5),
        ("fork-t0", ForkAt::Turns(0), 1, 0),
        ("fork-t1", ForkAt::Turns(1), 10, 5),
        ("fork-t2", ForkAt::Turns(2), 12, 5),
        ("fork-t3", ForkAt::Turns(3), 14, 5),
        ("fork-end", ForkAt::End, 14, 5),
    ];
    for (name, point, cut, records) in cases {
        let what = format!("{name} ({point})");
        let before = Utc::now();
        let fork = store.fork(parent.id(), point, id(name)).expect(&what);
        let after = Utc::now();
        assert_eq!(fork.id().as_str(), name);
        assert_eq!(fork.revision(), Revision::from_u64(1), "{what}");
        let lineage = fork.lineage().expect("a fork records its parent");
        assert_eq!(lineage.parent, *parent.id(), "{what}");
        assert_eq!(lineage.parent_revision, parent.revision(), "{what}");
        assert_eq!(lineage.fork_point, cut, "{what}");
        assert!(
            before <= lineage.forked_at && lineage.forked_at <= after,
            "{what}: forked at {}",
            lineage.forked_at
        );
        assert_eq!(fork.transcript(), &parent.transcript()[..cut], "{what}");
        let kept: Vec<_> = parent
            .tool_calls()
            .iter()
            .filter(|r| r.result_at.message < cut)
            .cloned()
            .collect();
        assert_eq!(fork.tool_calls(), kept.as_slice(), "{what}");
        assert_eq!(fork.tool_calls().len(), records, "{what}");
        assert!(
            fork.usage().is_empty(),
            "{what}: a fork starts with no usage"
        );
        assert_eq!(fork.options(), parent.options(), "{what}");
        assert_eq!(fork.metadata(), parent.metadata(), "{what}");
        // What fork returns is what is stored.
        assert_eq!(
            store.load(fork.id()).expect("load the fork"),
            fork,
            "{what}"
        );
        // The listing shows the lineage.
        let summary = summary_in(store, ListScope::Active, name).expect("listed");
        assert_eq!(summary.lineage.as_ref(), Some(lineage), "{what}");
        assert_eq!(summary.revision, Revision::from_u64(1));
        assert_eq!(summary.message_count, cut);
        assert_eq!(summary.cost, Cost::ZERO);
        assert!(!summary.archived);
    }
    assert_eq!(
        store.load(parent.id()).expect("reload the parent"),
        parent,
        "forking never changes the parent"
    );
    let parent_summary = summary_in(store, ListScope::Active, "fork-parent").expect("listed");
    assert_eq!(parent_summary.lineage, None);
    assert_eq!(parent_summary.revision, Revision::from_u64(2));
}

/// A rewind keeps a prefix of the transcript with its tool-call records and all the
/// usage, and is a save like any other (the revision moves by one, a fresh load sees it);
/// a point that splits a tool call from its result, lies before the start or past the end
/// is refused with the stored session unchanged.
pub(super) fn rewind_keeps_a_prefix_and_the_usage_and_refuses_what_it_cannot_cut<
    S: SessionStore,
>(
    store: &S,
) {
    let stored = save_twice(store, &multi_turn("rewind"));
    for point in [
        RewindTo::Message(3),
        RewindTo::Message(5),
        RewindTo::Message(9),
        RewindTo::Message(15),
        RewindTo::LastTurns(4),
    ] {
        let err = store
            .rewind(stored.id(), point)
            .expect_err("a point the session cannot be rewound to");
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{point}: {err:?}"
        );
        assert_eq!(
            store.load(stored.id()).expect("load"),
            stored,
            "{point}: a refused rewind changed the stored session"
        );
    }
    let err = store
        .rewind(&id("rewind-missing"), RewindTo::LastTurns(1))
        .expect_err("a missing session");
    assert!(err.is_not_found(), "{err:?}");

    let rewound = store
        .rewind(stored.id(), RewindTo::LastTurns(2))
        .expect("rewind two turns");
    assert_eq!(rewound.revision(), Revision::from_u64(3));
    assert_eq!(rewound.transcript(), &stored.transcript()[..10]);
    assert_eq!(rewound.tool_calls(), stored.tool_calls());
    assert_eq!(rewound.usage(), stored.usage());
    assert_eq!(rewound.options(), stored.options());
    assert_eq!(rewound.metadata(), stored.metadata());
    assert_eq!(store.load(stored.id()).expect("reload"), rewound);

    let before_tools = store
        .rewind(stored.id(), RewindTo::Message(2))
        .expect("rewind before the first tool call");
    assert_eq!(before_tools.transcript(), &stored.transcript()[..2]);
    assert!(before_tools.tool_calls().is_empty());
    assert_eq!(before_tools.usage(), stored.usage());
    assert_eq!(
        store.load(stored.id()).expect("reload").revision(),
        Revision::from_u64(4)
    );
}

pub(super) fn fork_refuses_taken_ids_missing_parents_and_split_tool_calls<S: SessionStore>(
    store: &S,
) {
    let parent = save_twice(store, &multi_turn("refuse-parent"));
    store
        .save(&simple_snapshot("refuse-taken", 3))
        .expect("save");
    let taken = store.load(&id("refuse-taken")).expect("load");
    let all_before = listing(store, ListScope::All);

    let err = store
        .fork(parent.id(), ForkAt::End, taken.id().clone())
        .expect_err("fork into a taken id");
    assert!(
        matches!(&err, Error::AlreadyExists { id } if id == taken.id()),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let err = store
        .fork(parent.id(), ForkAt::End, parent.id().clone())
        .expect_err("fork onto the parent itself");
    assert!(
        matches!(
            err,
            Error::AlreadyExists { .. } | Error::InvalidArgument { .. }
        ),
        "{err:?}"
    );

    let err = store
        .fork(&id("refuse-missing"), ForkAt::End, id("refuse-new"))
        .expect_err("fork of a missing session");
    assert!(
        matches!(&err, Error::NotFound { id } if id.as_str() == "refuse-missing"),
        "{err:?}"
    );

    // Cuts between a call (message 2, 6 or 8) and its result (3-5, 7, 9), and cuts past
    // the end.
    for point in [
        ForkAt::Messages(3),
        ForkAt::Messages(4),
        ForkAt::Messages(5),
        ForkAt::Messages(7),
        ForkAt::Messages(9),
        ForkAt::Messages(15),
        ForkAt::Turns(4),
    ] {
        let err = store
            .fork(parent.id(), point, id("refuse-new"))
            .expect_err("a fork point the parent cannot be cut at");
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{point}: {err:?}"
        );
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }

    assert!(store
        .load(&id("refuse-new"))
        .expect_err("no fork was stored")
        .is_not_found());
    assert_eq!(store.load(parent.id()).expect("parent"), parent);
    assert_eq!(store.load(taken.id()).expect("taken"), taken);
    assert_eq!(listing(store, ListScope::All), all_before);
}

pub(super) fn fork_of_a_fork_records_its_immediate_parent<S: SessionStore>(store: &S) {
    let root = save_twice(store, &multi_turn("gen-root"));
    let child = store
        .fork(root.id(), ForkAt::Turns(2), id("gen-child"))
        .expect("fork the root");
    // The child moves on before it is forked in turn.
    let moved = child
        .clone()
        .with_appended(
            vec![Message::user("only in the child")],
            Vec::new(),
            child.updated_at(),
        )
        .expect("append");
    assert_eq!(store.save(&moved).expect("save"), Revision::from_u64(2));
    let child = store.load(child.id()).expect("load the child");

    let grandchild = store
        .fork(child.id(), ForkAt::End, id("gen-grandchild"))
        .expect("fork the fork");
    let lineage = grandchild.lineage().expect("lineage");
    assert_eq!(lineage.parent.as_str(), "gen-child");
    assert_eq!(lineage.parent_revision, Revision::from_u64(2));
    assert_eq!(lineage.fork_point, 13);
    assert_eq!(grandchild.transcript(), child.transcript());
    assert_eq!(
        child.lineage().map(|l| l.parent.as_str()),
        Some("gen-root"),
        "the child keeps its own lineage across saves"
    );
    let summary = summary_in(store, ListScope::Active, "gen-grandchild").expect("listed");
    assert_eq!(summary.lineage.as_ref(), Some(lineage));
    let summary = summary_in(store, ListScope::Active, "gen-child").expect("listed");
    assert_eq!(summary.lineage.as_ref(), child.lineage());
}

pub(super) fn deleting_a_parent_leaves_its_forks_loadable_and_unchanged<S: SessionStore>(
    store: &S,
) {
    let parent = save_twice(store, &multi_turn("doomed-parent"));
    store
        .fork(parent.id(), ForkAt::Turns(1), id("orphan-a"))
        .expect("fork a");
    let b = store
        .fork(parent.id(), ForkAt::End, id("orphan-b"))
        .expect("fork b");
    // One fork moves on before the parent goes.
    let moved = b
        .clone()
        .with_appended(
            vec![
                Message::user("fork only"),
                Message::assistant(vec![ContentBlock::text("ok")]),
            ],
            Vec::new(),
            b.updated_at(),
        )
        .expect("append");
    store.save(&moved).expect("save");
    let forks: Vec<SessionSnapshot> = ["orphan-a", "orphan-b"]
        .iter()
        .map(|name| store.load(&id(name)).expect("load"))
        .collect();

    store.delete(parent.id()).expect("delete the parent");

    assert!(store.load(parent.id()).expect_err("deleted").is_not_found());
    for fork in &forks {
        assert_eq!(
            &store.load(fork.id()).expect("a fork outlives its parent"),
            fork
        );
        let summary = summary_in(store, ListScope::Active, fork.id().as_str()).expect("listed");
        assert_eq!(
            summary.lineage.as_ref().map(|l| l.parent.as_str()),
            Some("doomed-parent"),
            "the record of the parent stays"
        );
    }
    // An orphan still forks and saves.
    let grandchild = store
        .fork(&id("orphan-a"), ForkAt::End, id("orphan-a-child"))
        .expect("fork an orphan");
    assert_eq!(grandchild.transcript(), forks[0].transcript());
}

// -----------------------------------------------------------------------------------
// Archive.
// -----------------------------------------------------------------------------------

pub(super) fn archive_hides_from_list_but_keeps_loading_saving_and_forking<S: SessionStore>(
    store: &S,
) {
    for i in 0..4 {
        store
            .save(&simple_snapshot(&format!("arch-{i}"), i))
            .expect("save");
    }
    let target = id("arch-1");
    let before = store.load(&target).expect("load");
    let summary_before = summary_in(store, ListScope::Active, "arch-1").expect("listed");

    store.set_archived(&target, true).expect("archive");

    assert_eq!(
        names(store, ListScope::Active),
        ["arch-3", "arch-2", "arch-0"]
    );
    assert_eq!(
        store
            .list()
            .expect("list")
            .sessions
            .iter()
            .map(|s| s.id.to_string())
            .collect::<Vec<_>>(),
        ["arch-3", "arch-2", "arch-0"]
    );
    assert_eq!(paged_names(store), ["arch-3", "arch-2", "arch-0"]);
    let archived = listing(store, ListScope::Archived);
    assert_eq!(archived.len(), 1);
    assert!(archived[0].archived);
    let mut expected = summary_before.clone();
    expected.archived = true;
    assert_eq!(
        archived[0], expected,
        "archiving changes nothing but the flag"
    );
    let all = listing(store, ListScope::All);
    assert_eq!(
        all.iter()
            .map(|s| (s.id.as_str(), s.archived))
            .collect::<Vec<_>>(),
        [
            ("arch-3", false),
            ("arch-2", false),
            ("arch-1", true),
            ("arch-0", false)
        ]
    );
    assert_eq!(
        store.load(&target).expect("an archived session loads"),
        before
    );

    // A save that appends keeps it archived...
    let appended = before
        .clone()
        .with_appended(vec![Message::user("while archived")], Vec::new(), at(50))
        .expect("append");
    assert_eq!(store.save(&appended).expect("save"), Revision::from_u64(2));
    let summary = summary_in(store, ListScope::Archived, "arch-1").expect("still archived");
    assert_eq!(summary.revision, Revision::from_u64(2));
    assert!(summary.archived);
    // ...and so does one that replaces the whole snapshot.
    let replaced = rebuild(&store.load(&target).expect("load"))
        .metadata_entry("replaced", json!(true))
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(2));
    assert_eq!(store.save(&replaced).expect("save"), Revision::from_u64(3));
    assert_eq!(names(store, ListScope::Archived), ["arch-1"]);
    assert!(!names(store, ListScope::Active).contains(&"arch-1".to_owned()));

    // It forks; the fork is active.
    let fork = store
        .fork(&target, ForkAt::End, id("arch-fork"))
        .expect("fork an archived session");
    assert_eq!(fork.transcript().len(), 3);
    let fork_summary = summary_in(store, ListScope::Active, "arch-fork").expect("listed");
    assert!(!fork_summary.archived);

    // Unarchiving brings it back, as last saved.
    store.set_archived(&target, false).expect("unarchive");
    let back = summary_in(store, ListScope::Active, "arch-1").expect("listed again");
    assert!(!back.archived);
    assert_eq!(back.revision, Revision::from_u64(3));
    assert_eq!(back.updated_at, at(50));
    assert!(listing(store, ListScope::Archived).is_empty());
    assert_eq!(
        names(store, ListScope::Active),
        ["arch-fork", "arch-1", "arch-3", "arch-2", "arch-0"]
    );
    assert_eq!(paged_names(store), names(store, ListScope::Active));
}

pub(super) fn archive_is_idempotent_and_missing_ids_are_not_found<S: SessionStore>(store: &S) {
    store.save(&simple_snapshot("idem", 1)).expect("save");
    let target = id("idem");
    let stored = store.load(&target).expect("load");
    store
        .set_archived(&target, false)
        .expect("restore an active session");
    assert_eq!(names(store, ListScope::Active), ["idem"]);
    for _ in 0..2 {
        store.set_archived(&target, true).expect("archive");
        assert_eq!(names(store, ListScope::Archived), ["idem"]);
        assert!(names(store, ListScope::Active).is_empty());
        assert_eq!(names(store, ListScope::All), ["idem"]);
    }
    for _ in 0..2 {
        store.set_archived(&target, false).expect("unarchive");
        assert_eq!(names(store, ListScope::Active), ["idem"]);
        assert!(names(store, ListScope::Archived).is_empty());
    }
    assert_eq!(store.load(&target).expect("load"), stored);

    for archived in [true, false] {
        let err = store
            .set_archived(&id("idem-missing"), archived)
            .expect_err("archive of a missing session");
        assert!(
            matches!(&err, Error::NotFound { id } if id.as_str() == "idem-missing"),
            "{err:?}"
        );
    }
    assert_eq!(names(store, ListScope::All), ["idem"]);
    assert!(store
        .load(&id("idem-missing"))
        .expect_err("still missing")
        .is_not_found());
}

pub(super) fn deleting_an_archived_session_clears_its_archive_state<S: SessionStore>(store: &S) {
    let target = id("gone");
    store.save(&simple_snapshot("gone", 1)).expect("save");
    store.set_archived(&target, true).expect("archive");
    store.delete(&target).expect("delete an archived session");
    assert!(store.load(&target).expect_err("deleted").is_not_found());
    for scope in [ListScope::Active, ListScope::Archived, ListScope::All] {
        assert!(names(store, scope).is_empty(), "{scope:?}");
    }
    assert!(store
        .set_archived(&target, false)
        .expect_err("nothing left to restore")
        .is_not_found());

    // A new session under the same id starts active.
    store.save(&simple_snapshot("gone", 2)).expect("save again");
    assert_eq!(names(store, ListScope::Active), ["gone"]);
    assert!(names(store, ListScope::Archived).is_empty());
    assert!(
        !summary_in(store, ListScope::All, "gone")
            .expect("listed")
            .archived
    );

    // The same after a conditional delete (of the session as listed: archived).
    store.set_archived(&target, true).expect("archive");
    let listed = summary_in(store, ListScope::Archived, "gone").expect("listed");
    assert!(listed.archived);
    store.delete_if_unchanged(&listed).expect("delete");
    assert!(store.load(&target).expect_err("deleted").is_not_found());
    store.save(&simple_snapshot("gone", 3)).expect("save again");
    assert_eq!(names(store, ListScope::Active), ["gone"]);
    assert!(names(store, ListScope::Archived).is_empty());
}

// -----------------------------------------------------------------------------------
// Conditional delete.
// -----------------------------------------------------------------------------------

/// Asserts `err` is the [`Error::Changed`] of a conditional delete of `name`, and that
/// what it says changed mentions `what`.
fn assert_changed(err: &Error, name: &str, what: &str) {
    assert!(
        matches!(err, Error::Changed { id, change } if id.as_str() == name && change.contains(what)),
        "expected Error::Changed of {name} ({what}), got {err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.is_conflict());
    assert!(err.to_string().contains(name), "{err}");
}

/// Loads `name`, changes one metadata entry and saves it; returns it as stored.
fn save_again<S: SessionStore>(store: &S, name: &str) -> SessionSnapshot {
    let loaded = store.load(&id(name)).expect("load");
    let changed = rebuild(&loaded)
        .metadata_entry("saved", json!(loaded.revision().as_u64() + 1))
        .build()
        .expect("build")
        .with_revision(loaded.revision());
    store.save(&changed).expect("save again");
    store.load(&id(name)).expect("reload")
}

pub(super) fn delete_if_unchanged_deletes_only_the_revision_listed<S: SessionStore>(store: &S) {
    // Saved again since it was listed (or listed at a revision never stored): nothing
    // is deleted.
    let target = id("cas-delete");
    store.save(&simple_snapshot("cas-delete", 1)).expect("save");
    let at_one = summary_in(store, ListScope::All, "cas-delete").expect("listed");
    assert_eq!(at_one.revision, Revision::from_u64(1));
    let stored = save_again(store, "cas-delete");
    assert_eq!(stored.revision(), Revision::from_u64(2));
    let at_two = summary_in(store, ListScope::All, "cas-delete").expect("listed");
    let mut ahead = at_two.clone();
    ahead.revision = Revision::from_u64(3);
    for stale in [&at_one, &ahead] {
        let err = store
            .delete_if_unchanged(stale)
            .expect_err("a delete of another revision");
        assert_changed(&err, "cas-delete", "revision");
        assert_eq!(store.load(&target).expect("nothing was deleted"), stored);
    }
    // As listed: deleted, once.
    store
        .delete_if_unchanged(&at_two)
        .expect("delete the session as listed");
    assert!(store.load(&target).expect_err("deleted").is_not_found());
    assert!(summary_in(store, ListScope::All, "cas-delete").is_none());
    let err = store
        .delete_if_unchanged(&at_two)
        .expect_err("deleted twice");
    assert!(
        matches!(&err, Error::NotFound { id } if *id == target),
        "{err:?}"
    );
    let mut never = at_two.clone();
    never.id = id("cas-missing");
    let err = store.delete_if_unchanged(&never).expect_err("never saved");
    assert!(
        matches!(&err, Error::NotFound { id } if id.as_str() == "cas-missing"),
        "{err:?}"
    );
}

pub(super) fn delete_if_unchanged_keeps_a_session_re_created_archived_or_restored_since<
    S: SessionStore,
>(
    store: &S,
) {
    // Deleted and created again since it was listed: the new session starts over at
    // revision 1, so only its creation time tells it from the listed one (the update
    // time, archive state and message count are the same).
    let reborn = id("cas-reborn");
    let life = |created: i64, text: &str| {
        SessionSnapshot::builder(reborn.clone(), "test-model")
            .timestamps(at(created), at(300))
            .transcript(vec![Message::user(text)])
            .build()
            .expect("build")
    };
    store.save(&life(100, "first life")).expect("save");
    let old = summary_in(store, ListScope::All, "cas-reborn").expect("listed");
    store.delete(&reborn).expect("delete");
    let second = life(200, "second life");
    assert_eq!(store.save(&second).expect("save"), Revision::from_u64(1));
    let new = summary_in(store, ListScope::All, "cas-reborn").expect("listed");
    assert_eq!(
        (
            new.revision,
            new.updated_at,
            new.archived,
            new.message_count
        ),
        (
            old.revision,
            old.updated_at,
            old.archived,
            old.message_count
        )
    );
    assert_ne!(new.created_at, old.created_at);
    let err = store
        .delete_if_unchanged(&old)
        .expect_err("a delete of the session that was deleted");
    assert_changed(&err, "cas-reborn", "created");
    assert_eq!(
        store.load(&reborn).expect("the new session is intact"),
        second.clone().with_revision(Revision::from_u64(1))
    );
    store
        .delete_if_unchanged(&new)
        .expect("the new session as listed");
    assert!(store.load(&reborn).expect_err("deleted").is_not_found());

    // Archived since it was listed.
    let archived = id("cas-archived");
    store
        .save(&simple_snapshot("cas-archived", 2))
        .expect("save");
    let active = summary_in(store, ListScope::All, "cas-archived").expect("listed");
    assert!(!active.archived);
    let stored = store.load(&archived).expect("load");
    store.set_archived(&archived, true).expect("archive");
    let err = store
        .delete_if_unchanged(&active)
        .expect_err("a delete of an active session, archived since");
    assert_changed(&err, "cas-archived", "archived");
    assert_eq!(store.load(&archived).expect("not deleted"), stored);
    assert!(
        summary_in(store, ListScope::Archived, "cas-archived").is_some(),
        "still archived"
    );

    // Restored from the archive since it was listed.
    store.set_archived(&archived, false).expect("restore");
    store.set_archived(&archived, true).expect("archive");
    let listed = summary_in(store, ListScope::Archived, "cas-archived").expect("listed");
    assert!(listed.archived);
    store.set_archived(&archived, false).expect("restore");
    let err = store
        .delete_if_unchanged(&listed)
        .expect_err("a delete of an archived session, restored since");
    assert_changed(&err, "cas-archived", "restored");
    assert_eq!(store.load(&archived).expect("not deleted"), stored);
    assert!(
        summary_in(store, ListScope::Active, "cas-archived").is_some(),
        "still active"
    );

    // As listed now: deleted.
    let now = summary_in(store, ListScope::All, "cas-archived").expect("listed");
    store.delete_if_unchanged(&now).expect("delete as listed");
    assert!(store.load(&archived).expect_err("deleted").is_not_found());
    assert!(names(store, ListScope::All).is_empty());
}

// -----------------------------------------------------------------------------------
// Prune.
// -----------------------------------------------------------------------------------

pub(super) fn prune_by_age_deletes_sessions_older_than_the_limit<S: SessionStore>(store: &S) {
    for (name, updated) in [
        ("age-0", 0),
        ("age-1", 100),
        ("age-2", 150),
        ("age-3", 200),
        ("age-4", 300),
    ] {
        save_aged(store, name, updated, 20);
    }
    let before = listing(store, ListScope::All);
    let sizes = sizes(store);
    let policy = PrunePolicy::new()
        .max_age(Duration::from_secs(100))
        .now(at(250));
    let report = store.prune(&policy).expect("prune");
    assert!(!report.dry_run);
    // Updated before at(150); age-2, exactly at the limit, is not older than it.
    assert_eq!(
        pruned(&report),
        expect_pruned(&[("age-0", PruneReason::Age), ("age-1", PruneReason::Age)])
    );
    assert_eq!(report.kept, 3);
    check_report(store, &report, &before, &sizes);
    assert_eq!(names(store, ListScope::All), ["age-4", "age-3", "age-2"]);

    // Ages are measured at `now`: a later one prunes more.
    let before = listing(store, ListScope::All);
    let report = store.prune(&policy.clone().now(at(301))).expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[("age-2", PruneReason::Age), ("age-3", PruneReason::Age)])
    );
    check_report(store, &report, &before, &sizes);

    // Without `now`, ages are measured from the present: a session updated just now
    // stays, one from long ago goes.
    let fresh = SessionSnapshot::builder(id("age-now"), "m")
        .build()
        .expect("build");
    store.save(&fresh).expect("save");
    let report = store
        .prune(&PrunePolicy::new().max_age(Duration::from_secs(24 * 3600)))
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[("age-4", PruneReason::Age)])
    );
    assert_eq!(names(store, ListScope::All), ["age-now"]);
}

pub(super) fn prune_by_count_keeps_the_newest<S: SessionStore>(store: &S) {
    // Saved out of order; cnt-a and cnt-b tie on updated_at (the listing puts cnt-b first).
    for (name, updated) in [
        ("cnt-c", 20),
        ("cnt-e", 50),
        ("cnt-a", 30),
        ("cnt-f", 10),
        ("cnt-d", 40),
        ("cnt-b", 30),
    ] {
        save_aged(store, name, updated, 10);
    }
    store.set_archived(&id("cnt-d"), true).expect("archive");
    let before = listing(store, ListScope::All);
    let sizes = sizes(store);
    let report = store
        .prune(&PrunePolicy::new().max_count(3))
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[
            ("cnt-f", PruneReason::Count),
            ("cnt-c", PruneReason::Count),
            ("cnt-a", PruneReason::Count),
        ])
    );
    assert_eq!(report.kept, 3);
    check_report(store, &report, &before, &sizes);
    assert_eq!(names(store, ListScope::All), ["cnt-e", "cnt-d", "cnt-b"]);

    let report = store
        .prune(&PrunePolicy::new().max_count(3))
        .expect("prune again");
    assert!(report.pruned.is_empty());
    assert_eq!(report.kept, 3);

    let before = listing(store, ListScope::All);
    let report = store
        .prune(&PrunePolicy::new().max_count(0))
        .expect("prune all");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[
            ("cnt-b", PruneReason::Count),
            ("cnt-d", PruneReason::Count),
            ("cnt-e", PruneReason::Count),
        ])
    );
    assert_eq!(report.kept, 0);
    check_report(store, &report, &before, &sizes);
    assert!(names(store, ListScope::All).is_empty());
}

pub(super) fn prune_by_size_keeps_the_newest_that_fit_and_deletes_every_older_one<
    S: SessionStore,
>(
    store: &S,
) {
    // Newest first: big, small, big, small, big.
    for (name, updated, text) in [
        ("size-0", 500, 2_000),
        ("size-1", 400, 10),
        ("size-2", 300, 2_000),
        ("size-3", 200, 10),
        ("size-4", 100, 2_000),
    ] {
        save_aged(store, name, updated, text);
    }
    let sizes = sizes(store);
    let b = |name: &str| sizes[name];
    assert!(b("size-2") > b("size-3") && b("size-0") > b("size-1") + b("size-3"));
    let before = listing(store, ListScope::All);
    let dry_run = |limit: u64| {
        let report = store
            .prune(&PrunePolicy::new().max_total_bytes(limit).dry_run(true))
            .expect("dry run");
        check_report(store, &report, &before, &sizes);
        assert_eq!(report.kept + report.pruned.len(), 5);
        pruned(&report)
    };

    // Exactly the three newest: the rest go.
    let three = b("size-0") + b("size-1") + b("size-2");
    assert_eq!(
        dry_run(three),
        expect_pruned(&[("size-4", PruneReason::Size), ("size-3", PruneReason::Size)])
    );
    // One byte less: size-2 no longer fits, and size-3, small enough for the room
    // left, goes with every session older than size-2 all the same.
    assert_eq!(
        dry_run(three - 1),
        expect_pruned(&[
            ("size-4", PruneReason::Size),
            ("size-3", PruneReason::Size),
            ("size-2", PruneReason::Size),
        ])
    );
    // Room for size-3 beside the two newest: still not kept once size-2 did not fit.
    let with_room = b("size-0") + b("size-1") + b("size-3");
    assert!(with_room < three);
    assert_eq!(
        dry_run(with_room),
        expect_pruned(&[
            ("size-4", PruneReason::Size),
            ("size-3", PruneReason::Size),
            ("size-2", PruneReason::Size),
        ])
    );
    // Exactly the newest: size-1 would pass the limit, so it and every older one go.
    assert_eq!(
        dry_run(b("size-0")),
        expect_pruned(&[
            ("size-4", PruneReason::Size),
            ("size-3", PruneReason::Size),
            ("size-2", PruneReason::Size),
            ("size-1", PruneReason::Size),
        ])
    );
    // Less than the newest alone: the newest goes, and so do the older ones, small
    // ones included.
    assert!(b("size-1") < b("size-0") - 1);
    assert_eq!(
        dry_run(b("size-0") - 1),
        expect_pruned(&[
            ("size-4", PruneReason::Size),
            ("size-3", PruneReason::Size),
            ("size-2", PruneReason::Size),
            ("size-1", PruneReason::Size),
            ("size-0", PruneReason::Size),
        ])
    );
    assert_eq!(
        listing(store, ListScope::All),
        before,
        "dry runs delete nothing"
    );

    let report = store
        .prune(&PrunePolicy::new().max_total_bytes(with_room))
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[
            ("size-4", PruneReason::Size),
            ("size-3", PruneReason::Size),
            ("size-2", PruneReason::Size),
        ])
    );
    assert_eq!(report.kept, 2);
    check_report(store, &report, &before, &sizes);
    let left = names(store, ListScope::All);
    assert_eq!(left, ["size-0", "size-1"]);
    assert!(left.iter().map(|name| bytes_of(store, name)).sum::<u64>() <= with_room);

    let report = store
        .prune(&PrunePolicy::new().max_total_bytes(0))
        .expect("prune all");
    assert_eq!(report.pruned.len(), 2);
    assert_eq!(report.kept, 0);
    assert!(names(store, ListScope::All).is_empty());
}

pub(super) fn prune_reports_the_first_limit_broken_oldest_first<S: SessionStore>(store: &S) {
    for (name, updated, text) in [
        ("mix-0", 0, 10),
        ("mix-1", 100, 10),
        ("mix-2", 200, 10),
        ("mix-3", 260, 10),
        ("mix-4", 300, 10),
        ("mix-5", 400, 3_000),
        ("mix-6", 500, 10),
        ("mix-7", 600, 10),
    ] {
        save_aged(store, name, updated, text);
    }
    let sizes = sizes(store);
    let before = listing(store, ListScope::All);
    // Every session older than at(250) goes for its age, which is checked first.
    let policy = PrunePolicy::new()
        .now(at(650))
        .max_age(Duration::from_secs(400));

    // Walking from the newest: mix-7 and mix-6 fit; mix-5 would pass the size while
    // two sessions are kept, under the count of 3, so it goes for its size; so do
    // mix-4 and mix-3 after it, although mix-4 would fit and the count is not reached.
    let size_first = policy
        .clone()
        .max_count(3)
        .max_total_bytes(sizes["mix-7"] + sizes["mix-6"] + sizes["mix-4"]);
    let report = store.prune(&size_first.dry_run(true)).expect("dry run");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[
            ("mix-0", PruneReason::Age),
            ("mix-1", PruneReason::Age),
            ("mix-2", PruneReason::Age),
            ("mix-3", PruneReason::Size),
            ("mix-4", PruneReason::Size),
            ("mix-5", PruneReason::Size),
        ])
    );
    assert_eq!(report.kept, 2);
    check_report(store, &report, &before, &sizes);

    // With a count of 2, mix-5 breaks the count and the size at once: the count is
    // reported, and every later one goes for the count too.
    let count_first = policy
        .max_count(2)
        .max_total_bytes(sizes["mix-7"] + sizes["mix-6"] + sizes["mix-4"]);
    let report = store.prune(&count_first).expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[
            ("mix-0", PruneReason::Age),
            ("mix-1", PruneReason::Age),
            ("mix-2", PruneReason::Age),
            ("mix-3", PruneReason::Count),
            ("mix-4", PruneReason::Count),
            ("mix-5", PruneReason::Count),
        ])
    );
    assert_eq!(report.kept, 2);
    check_report(store, &report, &before, &sizes);
    assert_eq!(names(store, ListScope::All), ["mix-7", "mix-6"]);
    for reason in [PruneReason::Age, PruneReason::Count, PruneReason::Size] {
        assert!(!reason.to_string().is_empty());
    }
}

pub(super) fn prune_dry_run_deletes_nothing_and_reports_what_the_real_run_deletes<
    S: SessionStore,
>(
    store: &S,
) {
    for (i, text) in [(0, 300), (1, 250), (2, 200), (3, 150), (4, 100), (5, 50)] {
        save_aged(store, &format!("dry-{i}"), 100 * i, text);
    }
    store.set_archived(&id("dry-1"), true).expect("archive");
    let stored: Vec<SessionSnapshot> = (0..6)
        .map(|i| store.load(&id(&format!("dry-{i}"))).expect("load"))
        .collect();
    let before = listing(store, ListScope::All);
    let sizes = sizes(store);
    let policy = PrunePolicy::new()
        .now(at(450))
        .max_age(Duration::from_secs(400))
        .max_count(3)
        .max_total_bytes(sizes["dry-5"] + sizes["dry-4"]);

    let dry = store.prune(&policy.clone().dry_run(true)).expect("dry run");
    assert!(dry.dry_run);
    assert!(dry.pruned.len() >= 3, "{:?}", pruned(&dry));
    check_report(store, &dry, &before, &sizes);
    assert_eq!(
        listing(store, ListScope::All),
        before,
        "a dry run deletes nothing"
    );
    for snapshot in &stored {
        assert_eq!(&store.load(snapshot.id()).expect("still there"), snapshot);
    }
    assert_eq!(names(store, ListScope::Archived), ["dry-1"]);

    let real = store.prune(&policy).expect("prune");
    assert!(!real.dry_run);
    assert_eq!(
        real.pruned, dry.pruned,
        "the real run deletes what the dry run showed"
    );
    assert_eq!(real.kept, dry.kept);
    assert_eq!(real.bytes(), dry.bytes());
    check_report(store, &real, &before, &sizes);
    let gone: HashSet<&str> = real.pruned.iter().map(|p| p.summary.id.as_str()).collect();
    let expected: Vec<&str> = before
        .iter()
        .map(|s| s.id.as_str())
        .filter(|name| !gone.contains(name))
        .collect();
    assert_eq!(names(store, ListScope::All), expected);
}

pub(super) fn prune_archived_only_leaves_active_sessions_alone<S: SessionStore>(store: &S) {
    // The active ones are the oldest and the newest.
    save_aged(store, "only-active-old", -100, 10);
    save_aged(store, "only-archived-old", 0, 10);
    save_aged(store, "only-archived-new", 100, 10);
    save_aged(store, "only-active-new", 500, 10);
    for name in ["only-archived-old", "only-archived-new"] {
        store.set_archived(&id(name), true).expect("archive");
    }
    let before = listing(store, ListScope::All);
    let sizes = sizes(store);
    // Active sessions are not counted: the newest archived one is kept.
    let report = store
        .prune(&PrunePolicy::new().max_count(1).archived_only())
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[("only-archived-old", PruneReason::Count)])
    );
    assert_eq!(report.kept, 1);
    check_report(store, &report, &before, &sizes);
    assert_eq!(
        names(store, ListScope::Active),
        ["only-active-new", "only-active-old"]
    );
    assert_eq!(names(store, ListScope::Archived), ["only-archived-new"]);

    // Nor aged out.
    let report = store
        .prune(
            &PrunePolicy::new()
                .max_age(Duration::from_secs(1))
                .now(at(10_000))
                .archived_only(),
        )
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[("only-archived-new", PruneReason::Age)])
    );
    assert_eq!(
        names(store, ListScope::All),
        ["only-active-new", "only-active-old"]
    );

    // The default scope is every session.
    save_aged(store, "only-archived-newest", 900, 10);
    store
        .set_archived(&id("only-archived-newest"), true)
        .expect("archive");
    let report = store
        .prune(&PrunePolicy::new().max_count(1))
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[
            ("only-active-old", PruneReason::Count),
            ("only-active-new", PruneReason::Count),
        ])
    );
    assert_eq!(names(store, ListScope::All), ["only-archived-newest"]);
}

pub(super) fn prune_with_no_limits_deletes_nothing<S: SessionStore>(store: &S) {
    for i in 0..4 {
        save_aged(store, &format!("keep-{i}"), i * 10, 10);
    }
    store.set_archived(&id("keep-2"), true).expect("archive");
    let before = listing(store, ListScope::All);
    for policy in [
        PrunePolicy::new(),
        PrunePolicy::default(),
        PrunePolicy::new().now(at(1_000_000)),
        PrunePolicy::new().archived_only(),
        PrunePolicy::new().dry_run(true),
    ] {
        let report = store.prune(&policy).expect("prune");
        assert!(report.pruned.is_empty(), "{policy:?}");
        assert_eq!(report.bytes(), 0);
        assert!(report.skipped.is_empty() && report.unreadable.is_empty());
        let considered = if policy.scope == crate::PruneScope::Archived {
            1
        } else {
            4
        };
        assert_eq!(report.kept, considered, "{policy:?}");
        assert_eq!(listing(store, ListScope::All), before);
    }
}

/// A store that, the first time it is listed, runs `meanwhile` on the store behind
/// the listing's back: what a concurrent writer does to a running prune.
struct ChangesAfterListing<'a, S, F> {
    inner: &'a S,
    meanwhile: F,
    fired: AtomicBool,
}

impl<'a, S: SessionStore, F: Fn(&S) -> Result<()> + Send + Sync> ChangesAfterListing<'a, S, F> {
    fn new(inner: &'a S, meanwhile: F) -> Self {
        ChangesAfterListing {
            inner,
            meanwhile,
            fired: AtomicBool::new(false),
        }
    }
}

impl<S: SessionStore, F: Fn(&S) -> Result<()> + Send + Sync> SessionStore
    for ChangesAfterListing<'_, S, F>
{
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        self.inner.save(snapshot)
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        self.inner.load(id)
    }

    fn list(&self) -> Result<SessionList> {
        self.list_scoped(ListScope::Active)
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        self.inner.delete(id)
    }

    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        let listing = self.inner.list_scoped(scope)?;
        if !self.fired.swap(true, Ordering::SeqCst) {
            (self.meanwhile)(self.inner)?;
        }
        Ok(listing)
    }

    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        self.inner.set_archived(id, archived)
    }

    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        self.inner.delete_if_unchanged(listed)
    }

    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        self.inner.stored_bytes(id)
    }
}

/// Asserts `report` skipped exactly `name`, as changed since the listing (with
/// `what` in what changed), and counted it as kept.
fn assert_skipped_as_changed(report: &PruneReport, name: &str, what: &str) {
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert_changed(&report.skipped[0], name, what);
    assert!(
        report.pruned.iter().all(|p| p.summary.id.as_str() != name),
        "{name} is reported pruned"
    );
}

pub(super) fn prune_keeps_a_session_saved_after_the_listing<S: SessionStore>(store: &S) {
    for (name, updated) in [("race-a", 0), ("race-b", 100), ("race-c", 200)] {
        save_aged(store, name, updated, 10);
    }
    let racing = ChangesAfterListing::new(store, |inner: &S| {
        let current = inner.load(&id("race-a"))?;
        let updated = current.updated_at();
        let next =
            current.with_appended(vec![Message::user("saved meanwhile")], Vec::new(), updated)?;
        inner.save(&next).map(|_| ())
    });
    let report = racing
        .prune(&PrunePolicy::new().max_count(0))
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[
            ("race-b", PruneReason::Count),
            ("race-c", PruneReason::Count)
        ])
    );
    assert_skipped_as_changed(&report, "race-a", "revision 2");
    assert_eq!(report.kept, 1, "the session saved meanwhile counts as kept");
    let survivor = store.load(&id("race-a")).expect("the later save survives");
    assert_eq!(survivor.revision(), Revision::from_u64(2));
    assert_eq!(survivor.transcript().len(), 2);
    assert_eq!(names(store, ListScope::All), ["race-a"]);
}

pub(super) fn prune_keeps_a_session_archived_restored_or_re_created_after_the_listing<
    S: SessionStore,
>(
    store: &S,
) {
    // Pruning archived sessions only, one restored meanwhile (it left the scope the
    // prune applies to) is kept.
    for (name, updated) in [("arch-old", 0), ("arch-new", 100), ("plain", 200)] {
        save_aged(store, name, updated, 10);
    }
    for name in ["arch-old", "arch-new"] {
        store.set_archived(&id(name), true).expect("archive");
    }
    let restored = store.load(&id("arch-old")).expect("load");
    let racing = ChangesAfterListing::new(store, |inner: &S| {
        inner.set_archived(&id("arch-old"), false)
    });
    let report = racing
        .prune(&PrunePolicy::new().max_count(0).archived_only())
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[("arch-new", PruneReason::Count)])
    );
    assert_skipped_as_changed(&report, "arch-old", "restored");
    assert_eq!(report.kept, 1);
    assert_eq!(store.load(&id("arch-old")).expect("kept"), restored);
    assert_eq!(names(store, ListScope::Active), ["plain", "arch-old"]);
    assert!(names(store, ListScope::Archived).is_empty());

    // Archived meanwhile: kept too.
    let archived = store.load(&id("plain")).expect("load");
    let racing =
        ChangesAfterListing::new(store, |inner: &S| inner.set_archived(&id("plain"), true));
    let report = racing
        .prune(&PrunePolicy::new().max_count(0))
        .expect("prune");
    assert_eq!(
        pruned(&report),
        expect_pruned(&[("arch-old", PruneReason::Count)])
    );
    assert_skipped_as_changed(&report, "plain", "archived");
    assert_eq!(report.kept, 1);
    assert_eq!(store.load(&id("plain")).expect("kept"), archived);
    assert_eq!(names(store, ListScope::Archived), ["plain"]);

    // Deleted and created again meanwhile, at the revision the listing showed: the
    // new session is kept whole.
    let reborn = SessionSnapshot::builder(id("plain"), "prune-model")
        .timestamps(at(150), at(200))
        .transcript(vec![Message::user("reborn")])
        .build()
        .expect("build");
    let racing = ChangesAfterListing::new(store, |inner: &S| {
        inner.delete(&id("plain"))?;
        inner.save(&reborn).map(|_| ())
    });
    let report = racing
        .prune(&PrunePolicy::new().max_count(0))
        .expect("prune");
    assert!(report.pruned.is_empty(), "{:?}", pruned(&report));
    assert_skipped_as_changed(&report, "plain", "created");
    assert_eq!(report.kept, 1);
    assert_eq!(
        store.load(&id("plain")).expect("the new session"),
        reborn.clone().with_revision(Revision::from_u64(1))
    );
    assert_eq!(names(store, ListScope::Active), ["plain"]);
}

// -----------------------------------------------------------------------------------
// Export and import.
// -----------------------------------------------------------------------------------

/// Stores a parent (at revision 2), an archived session (if the store archives), and a fork of the parent
/// after its first turn; returns their ids in that order.
fn exportable<S: SessionStore>(store: &S) -> Vec<SessionId> {
    let parent = save_twice(store, &multi_turn("exp-parent"));
    store.save(&simple_snapshot("exp-plain", 4)).expect("save");
    // A store that cannot archive exports it active, as it holds it.
    match store.set_archived(&id("exp-plain"), true) {
        Ok(()) | Err(Error::Unsupported { .. }) => {}
        Err(e) => panic!("archive: {e}"),
    }
    store
        .fork(parent.id(), ForkAt::Turns(1), id("exp-fork"))
        .expect("fork");
    vec![id("exp-parent"), id("exp-plain"), id("exp-fork")]
}

pub(super) fn export_then_import_keep_stores_equal_sessions_at_revision_one<S: SessionStore>(
    make: &impl Fn() -> S,
) {
    let source = make();
    let ids = exportable(&source);
    let originals: Vec<SessionSnapshot> =
        ids.iter().map(|i| source.load(i).expect("load")).collect();
    let source_listing = listing(&source, ListScope::All);
    let bundle = source.export(&ids).expect("export");
    assert_eq!(
        bundle.sessions(),
        originals.as_slice(),
        "in the order asked"
    );
    assert_eq!(
        listing(&source, ListScope::All),
        source_listing,
        "export changes nothing"
    );

    for via_json in [false, true] {
        let bundle = if via_json {
            Bundle::from_json(&bundle.to_json().expect("encode")).expect("decode")
        } else {
            bundle.clone()
        };
        let target = make();
        // A session already there under another id stays.
        target.save(&simple_snapshot("bystander", 1)).expect("save");
        let imported = target.import(&bundle, &ImportIds::Keep).expect("import");
        assert_eq!(imported.len(), 3);
        for (entry, original) in imported.iter().zip(&originals) {
            assert_eq!(&entry.from, original.id());
            assert_eq!(&entry.id, original.id());
            assert_eq!(entry.revision, Revision::from_u64(1));
            assert_eq!(
                target.load(original.id()).expect("imported"),
                original.clone().with_revision(Revision::from_u64(1)),
                "{}",
                original.id()
            );
        }
        // Archive state is not exported; lineage is.
        let all = listing(&target, ListScope::All);
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|s| !s.archived));
        let fork = summary_in(&target, ListScope::Active, "exp-fork").expect("listed");
        assert_eq!(fork.lineage.as_ref(), originals[2].lineage());
        assert!(target.load(&id("bystander")).is_ok());
    }
}

pub(super) fn import_fresh_gives_new_ids_and_repoints_forks_at_their_parents<S: SessionStore>(
    make: &impl Fn() -> S,
) {
    let source = make();
    let ids = exportable(&source);
    let bundle = source.export(&ids).expect("export");
    let target = make();
    let imported = target.import(&bundle, &ImportIds::Fresh).expect("import");
    assert_eq!(imported.len(), 3);
    let new_ids: HashSet<&SessionId> = imported.iter().map(|i| &i.id).collect();
    assert_eq!(new_ids.len(), 3, "distinct ids");
    for (entry, old) in imported.iter().zip(&ids) {
        assert_eq!(&entry.from, old);
        assert_ne!(&entry.id, old);
        assert_eq!(entry.revision, Revision::from_u64(1));
        assert!(target
            .load(old)
            .expect_err("not under the old id")
            .is_not_found());
        let copy = target.load(&entry.id).expect("imported");
        let original = source.load(old).expect("original");
        assert_eq!(copy.revision(), Revision::from_u64(1));
        assert_same_content(&copy, &original);
    }
    let parent_copy = &imported[0].id;
    let fork_copy = target.load(&imported[2].id).expect("fork copy");
    let original_lineage = source
        .load(&ids[2])
        .expect("fork")
        .lineage()
        .cloned()
        .expect("lineage");
    let lineage = fork_copy.lineage().expect("the copy is still a fork");
    assert_eq!(
        &lineage.parent, parent_copy,
        "it points at its parent's copy"
    );
    assert_eq!(lineage.parent_revision, original_lineage.parent_revision);
    assert_eq!(lineage.fork_point, original_lineage.fork_point);
    assert_eq!(lineage.forked_at, original_lineage.forked_at);
    assert_eq!(
        target.load(parent_copy).expect("parent copy").lineage(),
        None
    );
    let summary = summary_in(&target, ListScope::Active, imported[2].id.as_str()).expect("listed");
    assert_eq!(summary.lineage.as_ref(), Some(lineage));

    // Again: another full copy.
    let again = target
        .import(&bundle, &ImportIds::Fresh)
        .expect("import again");
    assert!(again.iter().all(|i| !new_ids.contains(&i.id)));
    assert_eq!(listing(&target, ListScope::All).len(), 6);

    // A fork imported without its parent keeps naming the original parent.
    let lone = source.export(&ids[2..]).expect("export the fork alone");
    let elsewhere = make();
    let imported = elsewhere.import(&lone, &ImportIds::Fresh).expect("import");
    assert_eq!(
        elsewhere
            .load(&imported[0].id)
            .expect("load")
            .lineage()
            .map(|l| l.parent.as_str()),
        Some("exp-parent")
    );
}

pub(super) fn import_map_renames_only_the_mapped_sessions<S: SessionStore>(make: &impl Fn() -> S) {
    let source = make();
    let ids = exportable(&source);
    let bundle = source.export(&ids).expect("export");
    let target = make();
    let map = ImportIds::Map(HashMap::from([(id("exp-parent"), id("renamed-parent"))]));
    let imported = target.import(&bundle, &map).expect("import");
    let targets: Vec<&str> = imported.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(targets, ["renamed-parent", "exp-plain", "exp-fork"]);
    assert!(target
        .load(&id("exp-parent"))
        .expect_err("not under its old id")
        .is_not_found());
    assert_same_content(
        &target.load(&id("renamed-parent")).expect("renamed"),
        &source.load(&id("exp-parent")).expect("original"),
    );
    assert_eq!(
        target
            .load(&id("exp-fork"))
            .expect("fork")
            .lineage()
            .map(|l| l.parent.as_str()),
        Some("renamed-parent")
    );
    assert_eq!(
        target.load(&id("exp-plain")).expect("kept"),
        source
            .load(&id("exp-plain"))
            .expect("original")
            .with_revision(Revision::from_u64(1))
    );

    // A map sending two sessions to one id is refused before anything is written.
    let clash = ImportIds::Map(HashMap::from([(id("exp-plain"), id("exp-fork"))]));
    let empty = make();
    let err = empty
        .import(&bundle, &clash)
        .expect_err("two sessions, one id");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(names(&empty, ListScope::All).is_empty());
}

pub(super) fn import_into_a_taken_id_writes_nothing<S: SessionStore>(make: &impl Fn() -> S) {
    let source = make();
    let ids = exportable(&source);
    let bundle = source.export(&ids).expect("export");
    for (taken, archived) in [("exp-fork", false), ("exp-parent", true)] {
        let target = make();
        let occupant = SessionSnapshot::builder(id(taken), "someone-else")
            .transcript(vec![Message::user("mine")])
            .build()
            .expect("build");
        target.save(&occupant).expect("save");
        target.set_archived(&id(taken), archived).expect("archive");
        let occupant = target.load(&id(taken)).expect("load");
        let err = target
            .import(&bundle, &ImportIds::Keep)
            .expect_err("a target id is taken");
        assert!(
            matches!(&err, Error::AlreadyExists { id } if id.as_str() == taken),
            "{err:?}"
        );
        assert_eq!(err.kind(), ErrorKind::Conflict);
        // The library's message names the id and no command-line flag (a CLI adds
        // its own).
        let message = err.to_string();
        assert!(
            message.contains(taken) && message.contains("already exists"),
            "{message}"
        );
        assert!(!message.contains("--"), "{message}");
        for other in &ids {
            if other.as_str() != taken {
                assert!(
                    target
                        .load(other)
                        .expect_err("nothing written")
                        .is_not_found(),
                    "{other} was imported"
                );
            }
        }
        assert_eq!(names(&target, ListScope::All), [taken]);
        assert_eq!(target.load(&id(taken)).expect("occupant"), occupant);
        // Renaming the taken one around it works.
        let around = ImportIds::Map(HashMap::from([(id(taken), id("moved-aside"))]));
        assert_eq!(target.import(&bundle, &around).expect("import").len(), 3);
        assert_eq!(listing(&target, ListScope::All).len(), 4);
    }
    // Importing a bundle into the store it came from, under the same ids, is refused.
    let err = source
        .import(&bundle, &ImportIds::Keep)
        .expect_err("every id is taken");
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err:?}");
    assert_eq!(listing(&source, ListScope::All).len(), 3);
}

/// A store that imports through `on_save` (given the inner store, the snapshot and
/// the 1-based number of the save) and takes back through `on_delete` (given the inner
/// store and the session as written), recording both.
struct ImportTarget<'a, S, W, D> {
    inner: &'a S,
    on_save: W,
    on_delete: D,
    saves: AtomicUsize,
    deletes: Mutex<Vec<String>>,
}

impl<'a, S, W, D> ImportTarget<'a, S, W, D>
where
    S: SessionStore,
    W: Fn(&S, &SessionSnapshot, usize) -> Result<Revision> + Send + Sync,
    D: Fn(&S, &SessionSummary) -> Result<()> + Send + Sync,
{
    fn new(inner: &'a S, on_save: W, on_delete: D) -> Self {
        ImportTarget {
            inner,
            on_save,
            on_delete,
            saves: AtomicUsize::new(0),
            deletes: Mutex::new(Vec::new()),
        }
    }

    fn saves(&self) -> usize {
        self.saves.load(Ordering::SeqCst)
    }

    fn deletes(&self) -> Vec<String> {
        self.deletes.lock().expect("deletes").clone()
    }
}

impl<S, W, D> SessionStore for ImportTarget<'_, S, W, D>
where
    S: SessionStore,
    W: Fn(&S, &SessionSnapshot, usize) -> Result<Revision> + Send + Sync,
    D: Fn(&S, &SessionSummary) -> Result<()> + Send + Sync,
{
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        let call = self.saves.fetch_add(1, Ordering::SeqCst) + 1;
        (self.on_save)(self.inner, snapshot, call)
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        self.inner.load(id)
    }

    fn list(&self) -> Result<SessionList> {
        self.inner.list()
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        self.inner.delete(id)
    }

    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        self.inner.list_scoped(scope)
    }

    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        self.inner.set_archived(id, archived)
    }

    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        self.deletes
            .lock()
            .expect("deletes")
            .push(listed.id.to_string());
        (self.on_delete)(self.inner, listed)
    }

    fn stored_bytes(&self, id: &SessionId) -> Result<Option<u64>> {
        self.inner.stored_bytes(id)
    }
}

/// An error this test makes up, for `what` ("save", "delete").
fn injected(what: &str) -> Error {
    Error::Io {
        operation: "inject a failure",
        path: PathBuf::from(what),
        source: io::Error::other(format!("injected {what} failure")),
    }
}

/// Whether `err` is the error [`injected`] made for `what`.
fn is_injected(err: &Error, what: &str) -> bool {
    matches!(err, Error::Io { operation: "inject a failure", path, .. } if path.as_path() == Path::new(what))
}

/// A save that passes through to the inner store.
fn pass_save<S: SessionStore>(inner: &S, snapshot: &SessionSnapshot, _: usize) -> Result<Revision> {
    inner.save(snapshot)
}

/// A conditional delete that passes through to the inner store.
fn pass_delete<S: SessionStore>(inner: &S, listed: &SessionSummary) -> Result<()> {
    inner.delete_if_unchanged(listed)
}

pub(super) fn import_refuses_a_fork_mapped_onto_its_parents_id<S: SessionStore>(
    make: &impl Fn() -> S,
) {
    let source = make();
    let ids = exportable(&source);
    let onto_parent = ImportIds::Map(HashMap::from([(id("exp-fork"), id("exp-parent"))]));
    // The fork alone, into a store without its parent, under its parent's id; and
    // the same after a session imported first. Nothing is saved at all.
    for exported in [vec![id("exp-fork")], vec![id("exp-plain"), id("exp-fork")]] {
        let bundle = source.export(&exported).expect("export");
        let target = make();
        let counting = ImportTarget::new(&target, pass_save, pass_delete);
        let err = counting
            .import(&bundle, &onto_parent)
            .expect_err("a fork under its parent's id");
        assert!(
            matches!(&err, Error::InvalidArgument { reason } if reason.contains("exp-parent")),
            "{err:?}"
        );
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(counting.saves(), 0, "refused after a save");
        assert!(counting.deletes().is_empty());
        assert!(names(&target, ListScope::All).is_empty());

        // Under another id it imports, still naming its parent.
        let aside = ImportIds::Map(HashMap::from([(id("exp-fork"), id("exp-fork-copy"))]));
        target.import(&bundle, &aside).expect("import aside");
        assert_eq!(
            target
                .load(&id("exp-fork-copy"))
                .expect("load")
                .lineage()
                .map(|l| l.parent.as_str()),
            Some("exp-parent")
        );
    }
    // With its parent in the bundle, moved to another id, the fork may take the
    // parent's old id: its lineage follows the parent.
    let whole = source.export(&ids).expect("export");
    let swap = ImportIds::Map(HashMap::from([
        (id("exp-parent"), id("exp-fork")),
        (id("exp-fork"), id("exp-parent")),
    ]));
    let target = make();
    target.import(&whole, &swap).expect("import swapped");
    assert_eq!(
        target
            .load(&id("exp-parent"))
            .expect("the fork")
            .lineage()
            .map(|l| l.parent.as_str()),
        Some("exp-fork")
    );
    assert_eq!(
        target.load(&id("exp-fork")).expect("the parent").lineage(),
        None
    );
}

pub(super) fn import_failing_midway_deletes_what_it_wrote<S: SessionStore>(make: &impl Fn() -> S) {
    let source = make();
    let ids = exportable(&source);
    let bundle = source.export(&ids).expect("export");
    let map = ImportIds::Map(HashMap::from([(id("exp-parent"), id("moved-parent"))]));
    let targets = ["moved-parent", "exp-plain", "exp-fork"];
    for fail_at in 1..=3 {
        let target = make();
        target.save(&simple_snapshot("bystander", 1)).expect("save");
        let before = listing(&target, ListScope::All);
        let flaky = ImportTarget::new(
            &target,
            |inner: &S, snapshot: &SessionSnapshot, call: usize| {
                if call == fail_at {
                    Err(injected("save"))
                } else {
                    inner.save(snapshot)
                }
            },
            pass_delete,
        );
        let err = flaky.import(&bundle, &map).expect_err("a save fails");
        assert!(
            is_injected(&err, "save"),
            "save {fail_at}: not the save's own error: {err:?}"
        );
        assert_eq!(flaky.saves(), fail_at);
        assert_eq!(
            flaky.deletes(),
            targets[..fail_at - 1],
            "save {fail_at}: what was taken back"
        );
        assert_eq!(
            listing(&target, ListScope::All),
            before,
            "save {fail_at}: sessions left behind"
        );
        // The import runs again once the store works.
        assert_eq!(target.import(&bundle, &map).expect("import").len(), 3);
    }

    // Another writer takes the third id between the import's check and its save: the
    // import fails as if the id had been taken from the start, takes back its own
    // two sessions, and leaves the other writer's alone.
    let target = make();
    let occupant = SessionSnapshot::builder(id("exp-fork"), "someone-else")
        .transcript(vec![Message::user("mine")])
        .build()
        .expect("build");
    let racing = ImportTarget::new(
        &target,
        |inner: &S, snapshot: &SessionSnapshot, call: usize| {
            if call == 3 {
                inner.save(&occupant)?;
            }
            inner.save(snapshot)
        },
        pass_delete,
    );
    let err = racing.import(&bundle, &map).expect_err("the id was taken");
    assert!(
        matches!(&err, Error::AlreadyExists { id } if id.as_str() == "exp-fork"),
        "{err:?}"
    );
    assert_eq!(racing.deletes(), targets[..2]);
    assert_eq!(names(&target, ListScope::All), ["exp-fork"]);
    assert_eq!(
        target.load(&id("exp-fork")).expect("the occupant"),
        occupant.with_revision(Revision::from_u64(1))
    );
}

pub(super) fn import_that_cannot_delete_what_it_wrote_names_what_is_left<S: SessionStore>(
    make: &impl Fn() -> S,
) {
    let source = make();
    let ids = exportable(&source);
    let bundle = source.export(&ids).expect("export");
    let map = ImportIds::Map(HashMap::from([(id("exp-parent"), id("moved-parent"))]));
    let fail_third = |inner: &S, snapshot: &SessionSnapshot, call: usize| {
        if call == 3 {
            Err(injected("save"))
        } else {
            inner.save(snapshot)
        }
    };
    // Returns the sessions `err` says were left, checking it is `ImportIncomplete`
    // with the save's error as its source.
    let left_by = |err: &Error| -> Vec<String> {
        let Error::ImportIncomplete { left, source } = err else {
            panic!("expected Error::ImportIncomplete, got {err:?}");
        };
        let cause = source
            .downcast_ref::<Error>()
            .expect("the source is the crate's error");
        assert!(is_injected(cause, "save"), "{cause:?}");
        assert!(std::error::Error::source(err).is_some());
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(!err.is_conflict() && !err.is_not_found());
        for name in left {
            assert!(err.to_string().contains(name.as_str()), "{err}");
        }
        left.iter().map(ToString::to_string).collect()
    };

    // No delete works: both sessions written are left, named, and stored as imported.
    let target = make();
    let stuck = ImportTarget::new(&target, fail_third, |_: &S, _: &SessionSummary| {
        Err(injected("delete"))
    });
    let err = stuck.import(&bundle, &map).expect_err("a save fails");
    assert_eq!(left_by(&err), ["moved-parent", "exp-plain"]);
    assert_eq!(stuck.deletes(), ["moved-parent", "exp-plain"]);
    assert_eq!(
        names(&target, ListScope::All),
        ["exp-plain", "moved-parent"]
    );
    assert_same_content(
        &target.load(&id("moved-parent")).expect("left"),
        &source.load(&id("exp-parent")).expect("original"),
    );

    // One delete fails: only that session is named; the other is deleted.
    let target = make();
    let one_stuck = ImportTarget::new(&target, fail_third, |inner: &S, listed: &SessionSummary| {
        if listed.id.as_str() == "exp-plain" {
            Err(injected("delete"))
        } else {
            inner.delete_if_unchanged(listed)
        }
    });
    let err = one_stuck.import(&bundle, &map).expect_err("a save fails");
    assert_eq!(left_by(&err), ["exp-plain"]);
    assert_eq!(names(&target, ListScope::All), ["exp-plain"]);

    // Another writer saved one of them meanwhile: it is left alone, and named; one
    // another writer deleted meanwhile is not.
    let target = make();
    let raced = ImportTarget::new(&target, fail_third, |inner: &S, listed: &SessionSummary| {
        match listed.id.as_str() {
            "moved-parent" => {
                save_again(inner, "moved-parent");
            }
            _ => inner.delete(&listed.id)?,
        }
        inner.delete_if_unchanged(listed)
    });
    let err = raced.import(&bundle, &map).expect_err("a save fails");
    assert_eq!(left_by(&err), ["moved-parent"]);
    assert_eq!(names(&target, ListScope::All), ["moved-parent"]);
    assert_eq!(
        target.load(&id("moved-parent")).expect("kept").revision(),
        Revision::from_u64(2)
    );
}

pub(super) fn export_refuses_missing_and_repeated_ids<S: SessionStore>(store: &S) {
    store.save(&simple_snapshot("ex-a", 1)).expect("save");
    let err = store
        .export(&[id("ex-a"), id("ex-missing")])
        .expect_err("a missing session");
    assert!(
        matches!(&err, Error::NotFound { id } if id.as_str() == "ex-missing"),
        "{err:?}"
    );
    let err = store
        .export(&[id("ex-a"), id("ex-a")])
        .expect_err("an id given twice");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    let empty = store.export(&[]).expect("export nothing");
    assert!(empty.sessions().is_empty());
    let back = Bundle::from_json(&empty.to_json().expect("encode")).expect("decode");
    assert_eq!(back, empty);
    assert!(store
        .import(&back, &ImportIds::Keep)
        .expect("import nothing")
        .is_empty());
    assert_eq!(names(store, ListScope::All), ["ex-a"]);
}

pub(super) fn bundle_json_round_trips_byte_for_byte<S: SessionStore>(store: &S) {
    let ids = exportable(store);
    let bundle = store.export(&ids).expect("export");
    let bytes = bundle.to_json().expect("encode");
    let back = Bundle::from_json(&bytes).expect("decode");
    assert_eq!(back, bundle);
    assert_eq!(back.exported_at(), bundle.exported_at());
    assert_eq!(back.to_json().expect("encode again"), bytes);
    // JSON Lines: a header, then each session's own compact JSON form.
    assert_eq!(bytes.last(), Some(&b'\n'));
    let lines: Vec<&[u8]> = bytes[..bytes.len() - 1].split(|&b| b == b'\n').collect();
    assert_eq!(lines.len(), 4);
    let header: Value = serde_json::from_slice(lines[0]).expect("header");
    assert_eq!(header["agent_session_bundle"], json!(crate::BUNDLE_VERSION));
    assert_eq!(header["sessions"], json!(3));
    for (line, snapshot) in lines[1..].iter().zip(bundle.sessions()) {
        assert_eq!(*line, snapshot.to_json().expect("encode").as_slice());
    }
}
