//! Times that lie in the future (issue 12, items 3 and 11), beyond what the store contract
//! checks on every store (listed last, never pruned, a change gives the current time): the
//! builder and `with_appended` refuse them, an import sets them to the import time and says
//! so, `Harness::resume_latest` never picks such a session over the one just used, and a
//! listing cursor at any time (past year 9999 too) parses back from the text it prints.

mod common;

use agent_session::{
    BoxError, Bundle, Completion, CompletionRequest, Engine, ErrorKind, Harness, ImportIds,
    ListCursor, MemorySessionStore, Message, SessionSnapshot, SessionStore, SessionStoreExt,
    CLOCK_SKEW_TOLERANCE,
};
use chrono::{DateTime, TimeZone, Utc};
use common::sid;
use serde_json::json;

struct NoEngine;

impl Engine for NoEngine {
    async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        Err("not used".into())
    }
}

/// A day ahead: well past the tolerance.
fn a_day_ahead() -> DateTime<Utc> {
    Utc::now() + chrono::Duration::days(1)
}

/// `snapshot` as its JSON says, but created and updated at `created` and `updated` (the
/// builder would refuse times in the future; a stored file can hold them).
fn retimed(
    snapshot: &SessionSnapshot,
    created: DateTime<Utc>,
    updated: DateTime<Utc>,
) -> SessionSnapshot {
    let mut value: serde_json::Value =
        serde_json::from_slice(&snapshot.to_json().expect("encode")).expect("json");
    value["created_at"] = json!(created);
    value["updated_at"] = json!(updated);
    SessionSnapshot::from_json(value.to_string().as_bytes()).expect("decodes")
}

#[test]
fn the_builder_and_with_appended_refuse_times_in_the_future() {
    for (created, updated) in [(Utc::now(), a_day_ahead()), (a_day_ahead(), a_day_ahead())] {
        let err = SessionSnapshot::builder(sid("ahead"), "m")
            .timestamps(created, updated)
            .build()
            .expect_err("a time in the future");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(
            err.to_string().contains("later than this machine's clock"),
            "{err}"
        );
    }
    // Within the tolerance (clocks of machines sharing a store differ a little) is fine.
    let slightly = Utc::now() + chrono::Duration::from_std(CLOCK_SKEW_TOLERANCE / 2).expect("fits");
    let snapshot = SessionSnapshot::builder(sid("slightly-ahead"), "m")
        .timestamps(Utc::now(), slightly)
        .build()
        .expect("within the tolerance");
    let err = snapshot
        .with_appended(vec![Message::user("x")], Vec::new(), a_day_ahead())
        .expect_err("a time in the future");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
}

#[test]
fn an_import_sets_times_in_the_future_to_the_import_time_and_says_so() {
    let built = SessionSnapshot::builder(sid("from-a-fast-clock"), "m")
        .transcript(vec![Message::user("hi")])
        .build()
        .expect("build");
    let (created, updated) = (a_day_ahead(), a_day_ahead() + chrono::Duration::hours(1));
    let fast = retimed(&built, created, updated);
    let plain = SessionSnapshot::builder(sid("plain"), "m")
        .build()
        .expect("build");
    let file = Bundle::new(vec![fast, plain.clone()])
        .expect("bundle")
        .to_json()
        .expect("encode");
    let store = MemorySessionStore::new();
    let before = Utc::now();
    let imported = store
        .import(&Bundle::from_json(&file).expect("decode"), &ImportIds::Keep)
        .expect("import");
    let after = Utc::now();
    assert_eq!(imported[0].clamped_from, Some((created, updated)));
    assert_eq!(imported[1].clamped_from, None, "plausible times are kept");
    let stored = store.load(&sid("from-a-fast-clock")).expect("load");
    for at in [stored.created_at(), stored.updated_at()] {
        assert!(before <= at && at <= after, "{at} is the import time");
    }
    assert_eq!(
        store.load(plain.id()).expect("load").updated_at(),
        plain.updated_at()
    );
    // So the session just used is the latest, not the imported one.
    let listing = store.list().expect("list");
    assert!(listing
        .sessions
        .iter()
        .all(|s| !s.is_updated_in_the_future()));
}

#[test]
fn resume_latest_picks_the_session_just_used_over_one_updated_in_the_future() {
    let store = MemorySessionStore::new();
    let built = SessionSnapshot::builder(sid("stuck-ahead"), "m")
        .transcript(vec![Message::user("old")])
        .build()
        .expect("build");
    store
        .save(&retimed(&built, Utc::now(), a_day_ahead()))
        .expect("save");
    let harness = Harness::builder(store, || NoEngine).build();
    let mut used = harness
        .new_session(agent_session::SessionOptions::new("m"))
        .expect("new");
    harness.save_session(&mut used).expect("save");
    assert_eq!(
        harness.resume_latest(None).expect("resume").id(),
        used.id(),
        "the session just used, not the one stamped a day ahead"
    );

    // Alone, the one updated in the future still resumes: nothing is hidden.
    let store = MemorySessionStore::new();
    store
        .save(&retimed(&built, Utc::now(), a_day_ahead()))
        .expect("save");
    let harness = Harness::builder(store, || NoEngine).build();
    assert_eq!(
        harness.resume_latest(None).expect("resume").id().as_str(),
        "stuck-ahead"
    );
}

#[test]
fn a_change_gives_a_session_the_current_time_even_after_a_stamp_in_the_future() {
    let built = SessionSnapshot::builder(sid("stamp"), "m")
        .build()
        .expect("build");
    let ahead = retimed(
        &built,
        Utc::now() - chrono::Duration::hours(1),
        a_day_ahead(),
    );
    let mut session = agent_session::Session::restore(ahead, NoEngine, None).expect("restore");
    session.metadata_mut().insert("x".to_owned(), json!(1));
    let now = Utc::now();
    assert!(
        session.updated_at() <= now,
        "{} > {now}",
        session.updated_at()
    );
}

/// Issue 12, item 11: the CLI printed a cursor (`+10000-…`) that it then refused.
#[test]
fn a_cursor_at_any_time_parses_back_from_its_text() {
    let store = MemorySessionStore::new();
    let times = [
        Utc.with_ymd_and_hms(1970, 1, 1, 0, 0, 0).single(),
        Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).single(),
        Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).single(),
        Utc.with_ymd_and_hms(-5, 6, 7, 8, 9, 10).single(),
        Some(DateTime::<Utc>::MAX_UTC),
        Some(DateTime::<Utc>::MIN_UTC),
        DateTime::from_timestamp(1_700_000_039, 1_500_000_000), // a leap second (:59)
    ];
    for (i, at) in times.into_iter().enumerate() {
        let at = at.expect("a valid time");
        let built = SessionSnapshot::builder(sid(&format!("t{i}")), "m")
            .build()
            .expect("build");
        // Created no later than updated.
        let snapshot = retimed(&built, at.min(Utc::now()), at);
        store.save(&snapshot).expect("save");
        let summary = store
            .list()
            .expect("list")
            .sessions
            .into_iter()
            .find(|s| s.id == *snapshot.id())
            .expect("listed");
        let cursor = ListCursor::after(&summary);
        let text = cursor.to_string();
        let back: ListCursor = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(back, cursor, "{text}");
    }
    // Walking every page through the text form sees each session once.
    let mut walked = 0;
    let mut cursor: Option<ListCursor> = None;
    loop {
        let page = store.list_page(1, cursor.as_ref()).expect("page");
        walked += page.sessions.len();
        match page.next {
            Some(next) => cursor = Some(next.to_string().parse().expect("parses")),
            None => break,
        }
    }
    assert_eq!(walked, 7);
    for bad in [
        "@1.5/x",
        "@x.000000000/x",
        "future:/x",
        "2026-01-01T00:00:00Z",
    ] {
        assert!(bad.parse::<ListCursor>().is_err(), "{bad}");
    }
}
