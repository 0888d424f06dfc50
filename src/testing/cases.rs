//! The core cases of the store contract: round trips, revisions and conflicts, deletes,
//! listing order and pages, concurrent writers, unchanged saves and clocks.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use super::support::{at, id, rebuild, rich_snapshot, simple_snapshot};
use crate::{
    ContentBlock, Cost, Error, ErrorKind, Message, Revision, SessionSnapshot, SessionStore,
    SessionStoreExt, Usage,
};

pub(super) fn save_then_load_round_trips_with_the_stored_revision<S: SessionStore>(store: &S) {
    // A snapshot with every kind of content: tool calls (JSON, raw text, interrupted, failed),
    // provider blocks, provider-converted messages, usage with costs, metadata with floats,
    // awkward text.
    let snapshot = rich_snapshot("round-trip");
    assert_eq!(snapshot.revision(), Revision::NEW);
    let revision = store.save(&snapshot).expect("save");
    assert_eq!(revision, Revision::from_u64(1));
    let loaded = store.load(snapshot.id()).expect("load");
    assert_eq!(loaded.revision(), revision, "load sets the stored revision");
    assert_eq!(loaded, snapshot.clone().with_revision(revision));
    // Derived views agree too.
    assert_eq!(loaded.tool_calls(), snapshot.tool_calls());
    assert_eq!(loaded.totals(), snapshot.totals());
    assert_eq!(loaded.title(), snapshot.title());

    // Default ("now") timestamps with sub-second precision round-trip as well.
    let now = SessionSnapshot::builder(id("round-trip-now"), "m")
        .transcript(vec![Message::user("hi")])
        .build()
        .expect("build");
    let revision = store.save(&now).expect("save");
    assert_eq!(
        store.load(now.id()).expect("load"),
        now.with_revision(revision)
    );
}

/// A save of a snapshot that is exactly what is stored (loaded, not changed) writes
/// nothing and keeps the revision: moving it would give another writer holding that
/// revision a conflict over a change that never happened.
pub(super) fn an_unchanged_snapshot_is_not_saved_again<S: SessionStore>(store: &S) {
    let snapshot = rich_snapshot("unchanged");
    store.save(&snapshot).expect("create");
    let loaded = store.load(snapshot.id()).expect("load");
    let other = store
        .load(snapshot.id())
        .expect("another writer loads it too");
    for _ in 0..3 {
        assert_eq!(
            store.save(&loaded).expect("an unchanged save"),
            loaded.revision(),
            "the revision does not move"
        );
    }
    assert_eq!(
        store.load(snapshot.id()).expect("load").revision(),
        loaded.revision()
    );
    // The other writer's change at that revision goes through.
    let changed = rebuild(&other)
        .metadata_entry("edited", json!(true))
        .build()
        .expect("build")
        .with_revision(other.revision());
    let revision = store.save(&changed).expect("no spurious conflict");
    assert_eq!(revision, other.revision().next());
    // Now the unchanged snapshot is stale: saving it is a conflict, as any stale save is.
    assert!(store.save(&loaded).expect_err("stale").is_conflict());
    assert_eq!(
        store.load(snapshot.id()).expect("load").metadata()["edited"],
        json!(true)
    );
}

/// `Session::mark_saved` after an edit claims the edited state is stored; the next save
/// must still store it. Found in review: with the clock behind the session's creation
/// time (which the tolerance allows), an edit kept the same `updated_at`, and the
/// unchanged-save check took the save for one with nothing to write.
pub(super) fn an_edit_between_a_save_and_mark_saved_is_never_taken_for_no_change<
    S: SessionStore,
>(
    store: &S,
) {
    let tolerance =
        chrono::Duration::from_std(crate::CLOCK_SKEW_TOLERANCE).expect("a small duration");
    let ahead = chrono::Utc::now() + tolerance / 2;
    for (name, created) in [("edited", chrono::Utc::now()), ("edited-ahead", ahead)] {
        let snapshot = SessionSnapshot::builder(id(name), "m")
            .timestamps(created, created)
            .build()
            .expect("build");
        let mut session = crate::Session::restore(snapshot, NoEngine, None).expect("restore");
        let saved = session.snapshot();
        session
            .metadata_mut()
            .insert("edit".to_owned(), json!("kept"));
        let revision = store.save(&saved).expect("save");
        session.mark_saved(revision);
        store.save(&session.snapshot()).expect("save again");
        assert_eq!(
            store.load(&id(name)).expect("load").metadata().get("edit"),
            Some(&json!("kept")),
            "{name}: the edit was stored"
        );
        store.delete(&id(name)).expect("clean up");
    }
}

/// A snapshot as a store might hold it from before the clock rule, or from a machine whose
/// clock was ahead: updated `ahead` after now (the builder refuses that, so it is decoded).
fn updated_ahead(name: &str, ahead: chrono::Duration) -> SessionSnapshot {
    let built = SessionSnapshot::builder(id(name), "m")
        .transcript(vec![Message::user(name)])
        .build()
        .expect("build");
    let mut value: serde_json::Value =
        serde_json::from_slice(&built.to_json().expect("encode")).expect("json");
    value["updated_at"] = json!(chrono::Utc::now() + ahead);
    SessionSnapshot::from_json(value.to_string().as_bytes()).expect("a stored future time loads")
}

/// A session stamped in the future (a clock that ran ahead) must not stay "latest" for as
/// long as the clock error: `--continue` would pick it over the session just used, and
/// `prune --max-count 1` would delete the one just used. The rule (see
/// `CLOCK_SKEW_TOLERANCE`): such sessions are listed last, never pruned, and a change
/// gives them the current time.
pub(super) fn a_session_updated_in_the_future_is_never_latest_and_never_pruned<S: SessionStore>(
    store: &S,
) {
    let day = chrono::Duration::days(1);
    let ahead = updated_ahead("clock-was-ahead", day);
    let older = SessionSnapshot::builder(id("older"), "m")
        .timestamps(at(0), at(10))
        .build()
        .expect("build");
    let just_used = SessionSnapshot::builder(id("just-used"), "m")
        .transcript(vec![Message::user("now")])
        .build()
        .expect("build");
    for snapshot in [&ahead, &older, &just_used] {
        store.save(snapshot).expect("save");
    }
    let names = |sessions: &[crate::SessionSummary]| -> Vec<String> {
        sessions.iter().map(|s| s.id.to_string()).collect()
    };
    let listing = store.list().expect("list");
    assert_eq!(
        names(&listing.sessions),
        ["just-used", "older", "clock-was-ahead"],
        "a session updated in the future comes last"
    );
    assert!(listing.sessions[2].is_updated_in_the_future());
    assert!(!listing.sessions[0].is_updated_in_the_future());
    // Pages walk the same order, through the text form of their cursors.
    let mut walked = Vec::new();
    let mut cursor: Option<crate::ListCursor> = None;
    loop {
        let page = store.list_page(1, cursor.as_ref()).expect("page");
        walked.extend(names(&page.sessions));
        match page.next {
            Some(next) => cursor = Some(next.to_string().parse().expect("cursor parses")),
            None => break,
        }
    }
    assert_eq!(walked, names(&listing.sessions));

    // A session whose time comes within the tolerance while a walk goes on keeps the place
    // the walk's first page gave it (found in review: it sorted before the cursor on the
    // next page and was never shown).
    let tolerance =
        chrono::Duration::from_std(crate::CLOCK_SKEW_TOLERANCE).expect("a small duration");
    let soon = updated_ahead(
        "soon-plausible",
        tolerance + chrono::Duration::milliseconds(300),
    );
    store.save(&soon).expect("save");
    let mut walked = Vec::new();
    let mut cursor: Option<crate::ListCursor> = None;
    loop {
        let page = store.list_page(1, cursor.as_ref()).expect("page");
        walked.extend(names(&page.sessions));
        match page.next {
            Some(next) => cursor = Some(next.to_string().parse().expect("cursor parses")),
            None => break,
        }
        // By the second page, `soon-plausible` is no longer in the future.
        std::thread::sleep(std::time::Duration::from_millis(400));
    }
    assert_eq!(
        walked,
        ["just-used", "older", "clock-was-ahead", "soon-plausible"],
        "every session once, in the first page's order"
    );
    store.delete(soon.id()).expect("clean up");

    // Prune keeps the newest, and cannot date the future one, so it never deletes it.
    let report = store
        .prune(&crate::PrunePolicy::new().max_count(1))
        .expect("prune");
    let pruned: Vec<String> = report
        .pruned
        .iter()
        .map(|p| p.summary.id.to_string())
        .collect();
    assert_eq!(pruned, ["older"]);
    assert_eq!(names(&report.in_the_future), ["clock-was-ahead"]);
    let age = store
        .prune(&crate::PrunePolicy::new().max_age(std::time::Duration::from_secs(1)))
        .expect("prune by age");
    assert!(age
        .pruned
        .iter()
        .all(|p| p.summary.id.as_str() != "clock-was-ahead"));
    store.load(ahead.id()).expect("still there");

    // Changed again, it gets the current time and is listed as any other.
    let loaded = store.load(ahead.id()).expect("load");
    let mut session = crate::Session::restore(loaded, NoEngine, None).expect("restore");
    session
        .metadata_mut()
        .insert("touched".to_owned(), json!(true));
    assert!(session.updated_at() <= chrono::Utc::now());
    store.save(&session.snapshot()).expect("save");
    let first = store.list().expect("list").sessions[0].clone();
    assert_eq!(first.id.as_str(), "clock-was-ahead");
    assert!(!first.is_updated_in_the_future());
    for name in ["clock-was-ahead", "just-used"] {
        let _ = store.delete(&id(name));
    }
}

/// An engine never asked for anything.
pub(super) struct NoEngine;

impl crate::Engine for NoEngine {
    async fn complete(
        &mut self,
        _: crate::CompletionRequest<'_>,
    ) -> crate::Result<crate::Completion, crate::BoxError> {
        Err("not used".into())
    }
}

pub(super) fn first_save_is_revision_one_and_each_save_increments<S: SessionStore>(store: &S) {
    let snapshot = simple_snapshot("counting", 0);
    assert_eq!(
        store.save(&snapshot).expect("first save"),
        Revision::from_u64(1)
    );
    for expected in 2..=6 {
        let loaded = store.load(snapshot.id()).expect("load");
        assert_eq!(loaded.revision().as_u64(), expected - 1);
        let changed = rebuild(&loaded)
            .metadata_entry("step", json!(expected))
            .build()
            .expect("build")
            .with_revision(loaded.revision());
        let revision = store.save(&changed).expect("save");
        assert_eq!(revision, Revision::from_u64(expected));
        assert_eq!(revision, loaded.revision().next());
        let reloaded = store.load(snapshot.id()).expect("reload");
        assert_eq!(reloaded.revision(), revision);
        assert_eq!(reloaded.metadata()["step"], json!(expected));
    }
}

pub(super) fn stale_revision_is_a_conflict_and_keeps_the_winner<S: SessionStore>(store: &S) {
    let base = simple_snapshot("contested", 0);
    store.save(&base).expect("create");
    let seen_by_a = store.load(base.id()).expect("load a");
    let seen_by_b = store.load(base.id()).expect("load b");
    assert_eq!(seen_by_a.revision(), Revision::from_u64(1));

    let from_a = rebuild(&seen_by_a)
        .metadata_entry("writer", json!("a"))
        .transcript(vec![Message::user("a wins")])
        .build()
        .expect("build")
        .with_revision(seen_by_a.revision());
    assert_eq!(store.save(&from_a).expect("a saves"), Revision::from_u64(2));

    let from_b = rebuild(&seen_by_b)
        .metadata_entry("writer", json!("b"))
        .build()
        .expect("build")
        .with_revision(seen_by_b.revision());
    let err = store
        .save(&from_b)
        .expect_err("b saved over a stale revision");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.is_conflict());
    match &err {
        Error::Conflict {
            id: conflict_id,
            expected,
            found,
        } => {
            assert_eq!(conflict_id, base.id());
            assert_eq!(*expected, Revision::from_u64(1));
            assert_eq!(*found, Some(Revision::from_u64(2)));
        }
        other => panic!("expected Error::Conflict, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("expected revision 1") && text.contains("found 2"),
        "{text}"
    );

    // Nothing was overwritten: the winner's data is what is stored.
    let stored = store.load(base.id()).expect("load");
    assert_eq!(stored, from_a.with_revision(Revision::from_u64(2)));
    assert_eq!(stored.metadata()["writer"], json!("a"));

    // A far-future revision is a conflict too.
    let future = from_b.clone().with_revision(Revision::from_u64(99));
    let err = store.save(&future).expect_err("future revision");
    assert!(
        matches!(err, Error::Conflict { expected, found: Some(found), .. }
            if expected == Revision::from_u64(99) && found == Revision::from_u64(2)),
        "{err:?}"
    );
    assert_eq!(
        store.load(base.id()).expect("load").revision(),
        Revision::from_u64(2)
    );
}

pub(super) fn new_snapshot_over_existing_id_is_a_conflict<S: SessionStore>(store: &S) {
    let first = simple_snapshot("taken", 1);
    store.save(&first).expect("create");
    // The same first snapshot again may be recognised as a retry of the first save (its
    // acknowledgement lost): its revision back, nothing stored twice. Or a conflict.
    match store.save(&first) {
        Ok(revision) => assert_eq!(revision, Revision::from_u64(1), "a retried first save"),
        Err(err) => assert!(err.is_conflict(), "{err:?}"),
    }
    {
        let attempt = simple_snapshot("taken", 2);
        assert_eq!(attempt.revision(), Revision::NEW);
        let err = store.save(&attempt).expect_err("NEW over an existing id");
        match err {
            Error::Conflict {
                expected, found, ..
            } => {
                assert_eq!(expected, Revision::NEW);
                assert_eq!(found, Some(Revision::from_u64(1)));
            }
            other => panic!("expected Error::Conflict, got {other:?}"),
        }
    }
    assert_eq!(
        store.load(first.id()).expect("load"),
        first.with_revision(Revision::from_u64(1))
    );
}

pub(super) fn missing_id_is_not_found_for_load_and_delete<S: SessionStore>(store: &S) {
    let missing = id("never-saved");
    let err = store.load(&missing).expect_err("load of a missing id");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.is_not_found());
    assert!(
        matches!(&err, Error::NotFound { id } if *id == missing),
        "{err:?}"
    );
    let err = store.delete(&missing).expect_err("delete of a missing id");
    assert!(
        matches!(&err, Error::NotFound { id } if *id == missing),
        "{err:?}"
    );
    // Saving at a revision for a session that does not exist is a conflict with found None.
    let phantom = simple_snapshot("never-saved", 0).with_revision(Revision::from_u64(3));
    let err = store
        .save(&phantom)
        .expect_err("save at revision 3 of nothing");
    assert!(
        matches!(err, Error::Conflict { found: None, expected, .. } if expected == Revision::from_u64(3)),
        "{err:?}"
    );
    assert!(store
        .load(&missing)
        .expect_err("still missing")
        .is_not_found());
    assert!(store.list().expect("list").sessions.is_empty());
}

pub(super) fn delete_then_save_new_starts_again_at_revision_one<S: SessionStore>(store: &S) {
    let snapshot = simple_snapshot("recycled", 0);
    store.save(&snapshot).expect("create");
    let loaded = store.load(snapshot.id()).expect("load");
    store.save(&loaded).expect("second save");
    store.delete(snapshot.id()).expect("delete");

    assert!(store
        .load(snapshot.id())
        .expect_err("deleted")
        .is_not_found());
    assert!(store
        .delete(snapshot.id())
        .expect_err("deleted twice")
        .is_not_found());
    assert!(store
        .list()
        .expect("list")
        .sessions
        .iter()
        .all(|s| s.id != *snapshot.id()));

    // A writer still holding the old revision is told the session is gone.
    let stale = store.save(&loaded).expect_err("save after delete");
    assert!(
        matches!(stale, Error::Conflict { found: None, .. }),
        "{stale:?}"
    );

    let again = simple_snapshot("recycled", 7);
    assert_eq!(
        store.save(&again).expect("save NEW after delete"),
        Revision::from_u64(1)
    );
    assert_eq!(
        store.load(again.id()).expect("load"),
        again.with_revision(Revision::from_u64(1))
    );
}

/// `list_page` walks the same order as `list`, page by page, each session once; the cursor
/// survives its text form; a session saved during the walk moves to the front and is not
/// seen twice; unreadable entries come with the first page only.
pub(super) fn pages_walk_the_listing_in_order_exactly_once<S: SessionStore>(store: &S) {
    let empty = store.list_page(10, None).expect("empty page");
    assert!(empty.sessions.is_empty() && empty.next.is_none());
    // 23 sessions, with ties on updated_at (three share each second).
    for i in 0..23_i64 {
        let snapshot = SessionSnapshot::builder(id(&format!("p{i:02}")), "m")
            .timestamps(at(0), at(100 + i / 3))
            .build()
            .expect("build");
        store.save(&snapshot).expect("save");
    }
    let all: Vec<String> = store
        .list()
        .expect("list")
        .sessions
        .iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(all.len(), 23);
    for limit in [1, 4, 5, 22, 23, 50] {
        let mut walked = Vec::new();
        let mut cursor: Option<crate::ListCursor> = None;
        loop {
            let page = store.list_page(limit, cursor.as_ref()).expect("page");
            assert!(page.sessions.len() <= limit);
            walked.extend(page.sessions.iter().map(|s| s.id.to_string()));
            match page.next {
                // Through its text form, as a CLI or a web API would carry it.
                Some(next) => cursor = Some(next.to_string().parse().expect("cursor parses")),
                None => break,
            }
        }
        assert_eq!(walked, all, "limit {limit}");
    }
    // A session saved mid-walk moves to the front: the rest of the walk neither repeats
    // nor skips the others.
    let first = store.list_page(5, None).expect("page");
    let moved = store.load(&id("p03")).expect("load");
    let later = moved
        .clone()
        .with_appended(vec![Message::user("again")], Vec::new(), at(1_000))
        .expect("append");
    store.save(&later).expect("save");
    let mut rest = Vec::new();
    let mut cursor = first.next;
    while let Some(after) = cursor {
        let page = store.list_page(5, Some(&after)).expect("page");
        rest.extend(page.sessions.iter().map(|s| s.id.to_string()));
        cursor = page.next;
    }
    let seen: Vec<String> = first
        .sessions
        .iter()
        .map(|s| s.id.to_string())
        .chain(rest)
        .collect();
    let expected: Vec<String> = all.iter().filter(|i| *i != "p03").cloned().collect();
    assert_eq!(
        seen, expected,
        "the moved session is not seen again, nothing is skipped"
    );
    assert!("not a cursor".parse::<crate::ListCursor>().is_err());
    for s in all {
        store.delete(&id(&s)).expect("clean up");
    }
}

pub(super) fn list_is_newest_first_with_ties_by_id_descending<S: SessionStore>(store: &S) {
    assert!(store.list().expect("empty list").sessions.is_empty());

    let cost = |usd: &str| Cost::parse_usd(usd).expect("cost");
    let oldest = SessionSnapshot::builder(id("b-oldest"), "model-one")
        .timestamps(at(0), at(10))
        .transcript(vec![Message::user("First line\nsecond line")])
        .usage(vec![Usage::new("model-one")
            .with_tokens(10, 2)
            .with_cost(cost("0.25"))])
        .build()
        .expect("build");
    let tie_low = SessionSnapshot::builder(id("a-tie"), "model-two")
        .timestamps(at(5), at(30))
        .metadata_entry("title", json!("  Named in metadata  "))
        .transcript(vec![
            Message::system("sys"),
            Message::user("ignored for the title"),
            Message::assistant(vec![ContentBlock::text("ok")]),
        ])
        .usage(vec![
            Usage::new("model-two").with_cost(cost("0.000000001")),
            Usage::new("model-two").with_cost(cost("1.5")),
        ])
        .build()
        .expect("build");
    let tie_high = SessionSnapshot::builder(id("c-tie"), "model-three")
        .timestamps(at(1), at(30))
        .build()
        .expect("build");
    let middle = SessionSnapshot::builder(id("z-middle"), "model-four")
        .timestamps(at(2), at(20))
        .transcript(vec![Message::user("Middle"), Message::user("two")])
        .build()
        .expect("build");
    // Saved in an order that is neither the expected order nor its reverse.
    for snapshot in [&middle, &tie_low, &oldest, &tie_high] {
        store.save(snapshot).expect("save");
    }
    // A second save of one of them must not change its place (updated_at decides, not the
    // time of saving). Rebuilt, so it is written again: the loaded snapshot unchanged would
    // not be.
    let reloaded = store.load(oldest.id()).expect("load");
    let rewritten = rebuild(&reloaded)
        .build()
        .expect("build")
        .with_revision(reloaded.revision());
    store.save(&rewritten).expect("resave");

    let listing = store.list().expect("list");
    assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
    let order: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(order, ["c-tie", "a-tie", "z-middle", "b-oldest"]);

    let by_id = |name: &str| {
        listing
            .sessions
            .iter()
            .find(|s| s.id.as_str() == name)
            .expect("listed")
    };
    let s = by_id("b-oldest");
    assert_eq!(s.message_count, 1);
    assert_eq!(s.title.as_deref(), Some("First line"));
    assert_eq!(s.model, "model-one");
    assert_eq!(s.cost, cost("0.25"));
    assert_eq!(s.revision, Revision::from_u64(2));
    assert_eq!((s.created_at, s.updated_at), (at(0), at(10)));

    let s = by_id("a-tie");
    assert_eq!(s.message_count, 3);
    assert_eq!(s.title.as_deref(), Some("Named in metadata"));
    assert_eq!(s.model, "model-two");
    assert_eq!(s.cost, Cost::from_nano_usd(1_500_000_001));
    assert_eq!(s.revision, Revision::from_u64(1));

    let s = by_id("c-tie");
    assert_eq!(s.message_count, 0);
    assert_eq!(s.title, None);
    assert_eq!(s.model, "model-three");
    assert_eq!(s.cost, Cost::ZERO);

    let s = by_id("z-middle");
    assert_eq!(s.message_count, 2);
    assert_eq!(s.title.as_deref(), Some("Middle"));
    assert_eq!(s.model, "model-four");
    assert_eq!((s.created_at, s.updated_at), (at(2), at(20)));

    store.delete(tie_high.id()).expect("delete");
    let order: Vec<String> = store
        .list()
        .expect("list")
        .sessions
        .into_iter()
        .map(|s| s.id.into_string())
        .collect();
    assert_eq!(order, ["a-tie", "z-middle", "b-oldest"]);
}

/// Decrements its counter when dropped.
struct CountDown<'a>(&'a AtomicU64);

impl Drop for CountDown<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(super) fn concurrent_read_modify_write_loses_no_update<S: SessionStore>(store: &S) {
    const THREADS: usize = 8;
    const READERS: usize = 2;
    const LOOPS: usize = 50;
    // Retries per loop before the test gives up; conflicts must resolve long before this.
    const MAX_ATTEMPTS: usize = 10_000;

    let session = id("shared-counter");
    // The counter holds the number of successful saves, the creating save included.
    let initial = SessionSnapshot::builder(session.clone(), "m")
        .metadata_entry("counter", json!(1))
        .transcript(vec![Message::user("count with me")])
        .build()
        .expect("build");
    store.save(&initial).expect("create");
    let successes = AtomicU64::new(1);
    let conflicts = AtomicU64::new(0);
    let writers_left = AtomicU64::new(THREADS as u64);

    std::thread::scope(|scope| {
        // Readers that only load, all the while: a store that caches what it read must not
        // let a load that began before a save make a later save forget that save. Every
        // state a load returns has its counter equal to its revision.
        for _ in 0..READERS {
            let (session, writers_left) = (&session, &writers_left);
            scope.spawn(move || {
                while writers_left.load(Ordering::SeqCst) > 0 {
                    let current = store.load(session).expect("load");
                    assert_eq!(
                        current.metadata()["counter"],
                        json!(current.revision().as_u64()),
                        "a load returned a state whose counter is not its revision"
                    );
                }
            });
        }
        for thread in 0..THREADS {
            let (session, successes, conflicts, writers_left) =
                (&session, &successes, &conflicts, &writers_left);
            scope.spawn(move || {
                // Counted down however the thread ends, so the readers never wait for ever.
                let _leaving = CountDown(writers_left);
                for _ in 0..LOOPS {
                    let mut attempts = 0;
                    loop {
                        attempts += 1;
                        assert!(attempts < MAX_ATTEMPTS, "thread {thread} starved");
                        let current = store.load(session).expect("load");
                        let counter = current.metadata()["counter"]
                            .as_u64()
                            .expect("counter is an integer");
                        let next = rebuild(&current)
                            .metadata_entry("counter", json!(counter + 1))
                            .metadata_entry("last_writer", json!(thread))
                            .build()
                            .expect("build")
                            .with_revision(current.revision());
                        match store.save(&next) {
                            Ok(revision) => {
                                assert_eq!(revision, current.revision().next());
                                successes.fetch_add(1, Ordering::SeqCst);
                                break;
                            }
                            Err(e) if e.is_conflict() => {
                                conflicts.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("thread {thread}: unexpected error {e:?}"),
                        }
                    }
                }
            });
        }
    });

    let successes = successes.load(Ordering::SeqCst);
    assert_eq!(successes, 1 + (THREADS * LOOPS) as u64);
    let stored = store.load(&session).expect("final load");
    assert_eq!(
        stored.metadata()["counter"],
        json!(successes),
        "lost updates ({} conflicts were retried)",
        conflicts.load(Ordering::Relaxed)
    );
    assert_eq!(stored.revision(), Revision::from_u64(successes));
    assert_eq!(stored.transcript(), initial.transcript());
}
