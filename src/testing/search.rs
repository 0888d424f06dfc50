//! Contract case for search ([`SessionStore::search`]): the same messages found by every
//! store, with where they stand, newest session first, page by page.

use serde_json::json;

use super::support::{at, id};
use crate::{
    ContentBlock, ErrorKind, ListCursor, ListFilter, ListScope, Message, RewindTo, SearchQuery,
    SessionSnapshot, SessionStore, Standing, ToolCall, ToolResult,
};

/// A session a search found: its id, its hits as (position, standing, snippet), and the
/// metadata keys that matched.
type Found = (String, Vec<(usize, Standing, String)>, Vec<String>);

/// Every page of `query` over `filter`, `limit` sessions at a time.
fn walk<S: SessionStore>(
    store: &S,
    query: &SearchQuery,
    filter: &ListFilter,
    limit: usize,
) -> Vec<Found> {
    let mut found = Vec::new();
    let mut after: Option<ListCursor> = None;
    for _ in 0..100 {
        let page = store
            .search(query, filter, limit, after.as_ref())
            .expect("search");
        assert!(page.unreadable.is_empty(), "{:?}", page.unreadable);
        assert!(page.hits.len() <= limit, "a page holds at most its limit");
        for hit in page.hits {
            found.push((
                hit.session.id.to_string(),
                hit.messages
                    .iter()
                    .map(|m| (m.position, m.standing, m.snippet.clone()))
                    .collect(),
                hit.metadata_keys,
            ));
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return found,
        }
    }
    panic!("the search never ended");
}

fn ids(found: &[Found]) -> Vec<&str> {
    found.iter().map(|(id, ..)| id.as_str()).collect()
}

/// Saves the sessions the case searches: `tools` (the words in a tool's output, and in a
/// message later rewound away), `chat` (in two messages of the view) and `other` (only in
/// its metadata, and apart in two messages).
fn save_sessions<S: SessionStore>(store: &S) {
    // The oldest: the words in a tool's output, and in a message later rewound away.
    let tools = SessionSnapshot::builder(id("tools"), "m")
        .transcript(vec![
            Message::user("run the checker"),
            Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                "c1",
                "check",
                json!({"what": "lock bug"}),
            ))]),
            Message::tool_result(ToolResult::new(
                "c1",
                "Bug report: LOCK contention in queue",
            )),
            Message::assistant(vec![ContentBlock::text("done")]),
        ])
        .timestamps(at(0), at(10))
        .build()
        .expect("build");
    store.save(&tools).expect("save");
    let mut rewound = store.load(tools.id()).expect("load");
    rewound = rewound
        .with_appended(
            vec![
                Message::user("is the lock bug back?"),
                Message::assistant(vec![ContentBlock::text("no")]),
            ],
            Vec::new(),
            at(11),
        )
        .expect("a turn");
    let revision = store.save(&rewound).expect("save");
    let mut rewound = rewound.with_revision(revision);
    rewound.rewind(RewindTo::LastTurns(1)).expect("rewind");
    store.save(&rewound).expect("save the rewind");

    // The words in the view, in two messages; case and punctuation do not matter.
    let chat = SessionSnapshot::builder(id("chat"), "m")
        .transcript(vec![
            Message::user("We hit the lock-bug again."),
            Message::assistant(vec![ContentBlock::text("Fixed the Lock; no bug left.")]),
            Message::user("thanks"),
        ])
        .timestamps(at(0), at(20))
        .build()
        .expect("build");
    store.save(&chat).expect("save");
    // The words only in metadata (searched when asked) and apart in two messages.
    let other = SessionSnapshot::builder(id("other"), "m")
        .transcript(vec![
            Message::user("a lock"),
            Message::assistant(vec![ContentBlock::text("a bug")]),
        ])
        .metadata_entry("topic", json!("lock bug triage"))
        .timestamps(at(0), at(30))
        .build()
        .expect("build");
    store.save(&other).expect("save");
}

pub(super) fn search_finds_the_same_messages_in_every_store<S: SessionStore>(store: &S) {
    save_sessions(store);
    let query = SearchQuery::new("lock BUG").expect("query");
    let all = ListFilter::new().scope(ListScope::All);
    let found = walk(store, &query, &all, 10);
    // The rewind made `tools` the newest.
    assert_eq!(
        ids(&found),
        ["tools", "chat"],
        "newest first, only sessions that match"
    );
    let chat_hits: Vec<(usize, Standing)> = found[1].1.iter().map(|(p, s, _)| (*p, *s)).collect();
    assert_eq!(
        chat_hits,
        [
            (0, Standing::InView { index: 0 }),
            (1, Standing::InView { index: 1 })
        ]
    );
    assert!(
        found[1].1[0].2.contains("lock-bug"),
        "{:?}",
        found[1].1[0].2
    );
    let tools_hits: Vec<usize> = found[0].1.iter().map(|(p, ..)| *p).collect();
    assert_eq!(
        tools_hits,
        [2, 4],
        "the tool's output and the rewound message"
    );
    assert_eq!(found[0].1[0].1, Standing::InView { index: 2 });
    assert!(
        matches!(found[0].1[1].1, Standing::Rewound { .. }),
        "{:?}",
        found[0].1[1].1
    );

    // One session a page: the same sessions, page by page.
    assert_eq!(walk(store, &query, &all, 1), found);
    // The view only: the rewound message is not searched.
    let view = walk(store, &query.clone().view_only(true), &all, 10);
    assert_eq!(view[0].1.len(), 1);
    // Metadata when asked.
    let with_metadata = walk(store, &query.clone().in_metadata(true), &all, 10);
    assert_eq!(ids(&with_metadata), ["tools", "other", "chat"]);
    assert_eq!(with_metadata[1].2, ["topic"]);
    assert!(with_metadata[1].1.is_empty());
    // Prefixes, and a filter.
    let prefix = SearchQuery::new("contention* que*").expect("query");
    assert_eq!(ids(&walk(store, &prefix, &all, 10)), ["tools"]);
    assert!(
        walk(
            store,
            &query,
            &ListFilter::new()
                .updated_before(at(15))
                .scope(ListScope::All),
            10
        )
        .is_empty(),
        "the rewind's save made `tools` newer than the filter"
    );
    assert_eq!(
        store
            .search(&query, &all, 0, None)
            .expect_err("a page of nothing")
            .kind(),
        ErrorKind::InvalidInput
    );
}
