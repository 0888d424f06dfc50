//! Paging through a large file store: every session exactly once, in the listing's order,
//! with memory bounded by the page size on the caller's side.
//!
//! The default run uses 3,000 sessions; `AGENT_SESSION_LONG=1` uses the 100,000 of issue 5
//! (about a minute and 1.2 GB of small files). Times are printed, never asserted.

use std::collections::HashSet;
use std::time::Instant;

use agent_session::{
    Durability, FileSessionStore, ListCursor, Message, SessionId, SessionSnapshot, SessionStore,
};
use chrono::{TimeZone, Utc};

fn sessions_to_store() -> usize {
    if std::env::var_os("AGENT_SESSION_LONG").is_some() {
        100_000
    } else {
        3_000
    }
}

#[test]
fn pages_of_a_large_file_store_list_every_session_once_in_order() {
    let count = sessions_to_store();
    let dir = tempfile::tempdir().expect("temp dir");
    // Buffered: the test is about listing, and fsyncing 100,000 saves would take minutes.
    let store = FileSessionStore::builder()
        .durability(Durability::Buffered)
        .open(dir.path())
        .expect("open");
    let started = Instant::now();
    for i in 0..count {
        // Many sessions share an update time, so the id decides their order.
        let at = Utc
            .timestamp_opt(1_700_000_000 + i64::try_from(i / 7).expect("fits"), 0)
            .single()
            .expect("a valid time");
        let snapshot =
            SessionSnapshot::builder(SessionId::parse(&format!("s{i:06}")).expect("id"), "m")
                .timestamps(at, at)
                .transcript(vec![Message::user(format!("session {i}"))])
                .build()
                .expect("build");
        store.save(&snapshot).expect("save");
    }
    eprintln!(
        "pagination: stored {count} sessions in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let walked = Instant::now();
    let mut seen = HashSet::with_capacity(count);
    let mut previous: Option<(chrono::DateTime<Utc>, SessionId)> = None;
    let mut cursor: Option<ListCursor> = None;
    let mut pages = 0;
    loop {
        let page = store.list_page(500, cursor.as_ref()).expect("page");
        assert!(page.unreadable.is_empty(), "{:?}", page.unreadable);
        assert!(page.sessions.len() <= 500);
        pages += 1;
        for summary in &page.sessions {
            let key = (summary.updated_at, summary.id.clone());
            if let Some(before) = &previous {
                assert!(key < *before, "{key:?} after {before:?}: not newest first");
            }
            assert!(
                seen.insert(summary.id.clone()),
                "{} listed twice",
                summary.id
            );
            assert_eq!(summary.message_count, 1);
            previous = Some(key);
        }
        match page.next {
            Some(next) => cursor = Some(next.to_string().parse().expect("cursor round trip")),
            None => break,
        }
    }
    assert_eq!(seen.len(), count, "every session listed");
    assert_eq!(pages, count.div_ceil(500));
    eprintln!(
        "pagination: walked {count} sessions in {pages} pages of 500 in {:.2} s ({:.1} ms a page)",
        walked.elapsed().as_secs_f64(),
        walked.elapsed().as_secs_f64() * 1e3 / f64::from(u32::try_from(pages).expect("fits"))
    );
}
