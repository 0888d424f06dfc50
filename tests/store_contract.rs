//! The `SessionStore` contract, checked the same way against every store the crate ships:
//! `MemorySessionStore`, `FileSessionStore`, and both again behind `Arc<dyn SessionStore>`.
//!
//! A custom store can be checked by copying `contract` and calling it with its constructor.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use agent_session::{
    ContentBlock, Cost, Error, ErrorKind, FileSessionStore, MemorySessionStore, Message, Revision,
    SessionSnapshot, SessionStore, ToolCall, ToolCallStatus, Usage,
};
use serde_json::json;

use support::{at, id, rebuild, rich_snapshot, simple_snapshot};

/// Runs every case of the contract, each on a fresh store from `make`.
fn contract<S: SessionStore>(make: impl Fn() -> S) {
    save_then_load_round_trips_with_the_stored_revision(&make());
    first_save_is_revision_one_and_each_save_increments(&make());
    stale_revision_is_a_conflict_and_keeps_the_winner(&make());
    new_snapshot_over_existing_id_is_a_conflict(&make());
    missing_id_is_not_found_for_load_and_delete(&make());
    delete_then_save_new_starts_again_at_revision_one(&make());
    list_is_newest_first_with_ties_by_id_descending(&make());
    pages_walk_the_listing_in_order_exactly_once(&make());
    concurrent_read_modify_write_loses_no_update(&make());
}

#[test]
fn memory_store_meets_the_contract() {
    contract(MemorySessionStore::new);
}

#[test]
fn file_store_meets_the_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = AtomicUsize::new(0);
    contract(|| {
        let sub = dir
            .path()
            .join(format!("store-{}", n.fetch_add(1, Ordering::Relaxed)));
        FileSessionStore::open(sub).expect("open file store")
    });
}

#[test]
fn arc_dyn_memory_store_meets_the_contract() {
    contract(|| -> Arc<dyn SessionStore> { Arc::new(MemorySessionStore::new()) });
}

#[test]
fn arc_dyn_file_store_meets_the_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = AtomicUsize::new(0);
    contract(|| -> Arc<dyn SessionStore> {
        let sub = dir
            .path()
            .join(format!("store-{}", n.fetch_add(1, Ordering::Relaxed)));
        Arc::new(FileSessionStore::open(sub).expect("open file store"))
    });
}

#[test]
fn file_store_round_trip_survives_reopening_the_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let snapshot = rich_snapshot("durable");
    let revision = FileSessionStore::open(dir.path())
        .expect("open")
        .save(&snapshot)
        .expect("save");
    let reopened = FileSessionStore::open(dir.path()).expect("reopen");
    let loaded = reopened.load(snapshot.id()).expect("load");
    assert_eq!(loaded, snapshot.with_revision(revision));
}

// ---------------------------------------------------------------------------------------
// The cases.
// ---------------------------------------------------------------------------------------

fn save_then_load_round_trips_with_the_stored_revision<S: SessionStore>(store: &S) {
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

fn first_save_is_revision_one_and_each_save_increments<S: SessionStore>(store: &S) {
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

fn stale_revision_is_a_conflict_and_keeps_the_winner<S: SessionStore>(store: &S) {
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

fn new_snapshot_over_existing_id_is_a_conflict<S: SessionStore>(store: &S) {
    let first = simple_snapshot("taken", 1);
    store.save(&first).expect("create");
    for attempt in [first.clone(), simple_snapshot("taken", 2)] {
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

fn missing_id_is_not_found_for_load_and_delete<S: SessionStore>(store: &S) {
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

fn delete_then_save_new_starts_again_at_revision_one<S: SessionStore>(store: &S) {
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
fn pages_walk_the_listing_in_order_exactly_once<S: SessionStore>(store: &S) {
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
        let mut cursor: Option<agent_session::ListCursor> = None;
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
    assert!("not a cursor".parse::<agent_session::ListCursor>().is_err());
    for s in all {
        store.delete(&id(&s)).expect("clean up");
    }
}

fn list_is_newest_first_with_ties_by_id_descending<S: SessionStore>(store: &S) {
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
    // time of saving).
    let reloaded = store.load(oldest.id()).expect("load");
    store.save(&reloaded).expect("resave");

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

fn concurrent_read_modify_write_loses_no_update<S: SessionStore>(store: &S) {
    const THREADS: usize = 8;
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

    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (session, successes, conflicts) = (&session, &successes, &conflicts);
            scope.spawn(move || {
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

#[test]
fn rich_snapshot_helper_exercises_every_block_kind() {
    // Guards the round-trip case above against a helper that quietly stops covering things.
    let snapshot = rich_snapshot("coverage");
    let blocks: Vec<&ContentBlock> = snapshot
        .transcript()
        .iter()
        .flat_map(|m| &m.content)
        .collect();
    assert!(blocks.iter().any(|b| matches!(b, ContentBlock::Text(_))));
    assert!(blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::Other { .. })));
    assert!(blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall(_))));
    assert!(blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult(_))));
    let statuses: Vec<_> = snapshot.tool_calls().iter().map(|r| r.status).collect();
    assert!(statuses.contains(&ToolCallStatus::Ok));
    assert!(statuses.contains(&ToolCallStatus::Error));
    assert!(statuses.contains(&ToolCallStatus::Interrupted));
    assert!(snapshot.totals().cost > Cost::ZERO);
    // And a call whose result is missing is refused by the builder, so the helper cannot
    // produce a snapshot the stores would have to reject.
    assert!(SessionSnapshot::builder(id("x"), "m")
        .transcript(vec![Message::assistant(vec![ContentBlock::ToolCall(
            ToolCall::new("c", "f", json!({}))
        )])])
        .build()
        .is_err());
}

mod support {
    use agent_session::{
        ContentBlock, Cost, Message, SessionId, SessionSnapshot, SnapshotBuilder, TextBlock,
        ToolCall, ToolCallStatus, ToolResult, Usage, INTERRUPTED_OUTPUT,
    };
    use chrono::{DateTime, TimeZone, Utc};
    use serde_json::json;

    pub fn id(s: &str) -> SessionId {
        SessionId::parse(s).expect("valid test id")
    }

    /// A fixed instant plus `secs` seconds (with a sub-second part, to catch truncation).
    pub fn at(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 4, 5, 6, 7)
            .single()
            .expect("valid date")
            + chrono::Duration::seconds(secs)
            + chrono::Duration::nanoseconds(123_456_789)
    }

    /// A small snapshot whose content depends on `variant`.
    pub fn simple_snapshot(name: &str, variant: u32) -> SessionSnapshot {
        SessionSnapshot::builder(id(name), "test-model")
            .metadata_entry("variant", json!(variant))
            .transcript(vec![
                Message::user(format!("hello {variant}")),
                Message::assistant(vec![ContentBlock::text("hi")]),
            ])
            .timestamps(at(0), at(i64::from(variant)))
            .build()
            .expect("build")
    }

    /// A snapshot with every kind of content the format has.
    pub fn rich_snapshot(name: &str) -> SessionSnapshot {
        let mut cited = TextBlock::new("See the docs.");
        cited
            .extra
            .insert("citations".into(), json!([{"url": "https://example.com"}]));
        let openai = Message::from_openai_chat(&json!({
            "role": "assistant",
            "content": null,
            "refusal": null,
            "tool_calls": [{
                "id": "call_oa",
                "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":  \"Paris\"}"}
            }]
        }))
        .expect("openai message");
        let openai_result = Message::from_openai_chat(&json!({
            "role": "tool", "tool_call_id": "call_oa", "content": "{\"temp\": 18.5}"
        }))
        .expect("openai tool message");
        let anthropic = Message::from_anthropic(&json!({
            "role": "assistant",
            "id": "msg_1",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "EqQBCgIYAh"},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"n": 1.0}}
            ]
        }))
        .expect("anthropic message");
        let anthropic_result = Message::from_anthropic(&json!({
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": false}]
        }))
        .expect("anthropic tool result");

        SessionSnapshot::builder(id(name), "gpt-test")
            .system_prompt("Be exact.")
            .max_turns(7)
            .timestamps(at(-3600), at(0))
            .metadata_entry("project", json!("parser"))
            .metadata_entry("ratio", json!(0.1))
            .metadata_entry("precise", json!(228.03))
            .metadata_entry("one", json!(1.0))
            .metadata_entry("big", json!(u64::MAX))
            .metadata_entry("nested", json!({"list": [1, -2, 3.5e-7, null, true, "x"]}))
            .transcript(vec![
                Message::system("You are a test."),
                Message::user("Line one\nline\ttwo \u{0} nul \u{202e} bidi 🦀 \"quoted\" \\"),
                Message::assistant(vec![
                    ContentBlock::Text(cited),
                    ContentBlock::ToolCall(ToolCall::new("c1", "calc", json!({"expr": "2+2"}))),
                    ContentBlock::ToolCall(ToolCall::with_raw_arguments(
                        "c2",
                        "shell",
                        "{\"cmd\":   \"ls\" }",
                    )),
                    ContentBlock::ToolCall(ToolCall::new("c3", "slow", json!(null))),
                    ContentBlock::Other {
                        value: json!({"type": "image", "source": {"data": "AAAA"}}),
                    },
                ]),
                Message::tool_result(ToolResult::new("c1", "4")),
                Message::tool_result(ToolResult::error("c2", "permission denied")),
                Message::tool_result(ToolResult::error("c3", INTERRUPTED_OUTPUT)),
                openai,
                openai_result,
                anthropic,
                anthropic_result,
            ])
            .interrupted("c3")
            .usage(vec![
                Usage::new("gpt-test")
                    .with_tokens(1_200, 300)
                    .with_cache_tokens(800, 16)
                    .with_cost(Cost::parse_usd("0.00042").expect("cost")),
                Usage::new("gpt-test-mini")
                    .with_tokens(5, 1)
                    .with_cost(Cost::from_nano_usd(1)),
            ])
            .build()
            .expect("rich snapshot builds")
    }

    /// A builder holding everything `snapshot` holds (its revision aside).
    pub fn rebuild(snapshot: &SessionSnapshot) -> SnapshotBuilder {
        let options = snapshot.options();
        let mut builder = SessionSnapshot::builder(snapshot.id().clone(), options.model.clone())
            .max_turns(options.max_turns)
            .metadata(snapshot.metadata().clone())
            .transcript(snapshot.transcript().to_vec())
            .usage(snapshot.usage().to_vec())
            .timestamps(snapshot.created_at(), snapshot.updated_at());
        if let Some(prompt) = &options.system_prompt {
            builder = builder.system_prompt(prompt.clone());
        }
        for record in snapshot.tool_calls() {
            if record.status == ToolCallStatus::Interrupted {
                builder = builder.interrupted(record.call_id.clone());
            }
        }
        builder
    }
}
