//! Contract case for filtered listings ([`SessionStore::list_filtered`]).

use serde_json::json;

use super::support::{at, id};
use crate::{
    ErrorKind, ForkAt, ListFilter, ListScope, Message, SessionSnapshot, SessionStore,
    SessionStoreExt,
};

/// The key the case filters on: a store made with it indexed
/// ([`IndexedMetadata`](crate::IndexedMetadata)) is checked on it, any other store is
/// checked to refuse it.
pub const FILTER_KEY: &str = "project";

fn session(name: &str, model: &str, project: Option<&str>, updated: i64) -> SessionSnapshot {
    let mut builder = SessionSnapshot::builder(id(name), model)
        .transcript(vec![Message::user(format!("about {name}"))])
        .timestamps(at(0), at(updated));
    if let Some(project) = project {
        builder = builder.metadata_entry(FILTER_KEY, json!(project));
    }
    builder.build().expect("build")
}

/// The ids `filter` lists, sorted (after checking that the listing is newest first and
/// that its pages hold the same sessions in the same order).
fn ids<S: SessionStore>(store: &S, filter: &ListFilter) -> Vec<String> {
    let listing = store.list_filtered(filter).expect("a filtered listing");
    assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
    assert!(
        listing
            .sessions
            .windows(2)
            .all(|w| w[0].updated_at >= w[1].updated_at),
        "newest first"
    );
    let found: Vec<String> = listing.sessions.iter().map(|s| s.id.to_string()).collect();
    // Paged, the same sessions in the same order.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_page_filtered(filter, 2, after.as_ref())
            .expect("a filtered page");
        paged.extend(page.sessions.iter().map(|s| s.id.to_string()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, found, "pages of {filter:?}");
    let mut sorted = found;
    sorted.sort();
    sorted
}

pub(super) fn filtered_listings_select_by_model_time_parent_archive_and_metadata<
    S: SessionStore,
>(
    store: &S,
) {
    for snapshot in [
        session("alpha", "model-a", Some("parser"), 10),
        session("beta", "model-b", Some("docs"), 20),
        session("gamma", "model-a", None, 30),
        session("delta", "model-b", Some("parser"), 40),
    ] {
        store.save(&snapshot).expect("save");
    }
    store
        .fork(&id("alpha"), ForkAt::End, id("alpha-fork"))
        .expect("fork");
    let archiving = store.set_archived(&id("beta"), true).is_ok();
    // The fork is listed by its own time of change (when it was made).
    let fork_time = store.load(&id("alpha-fork")).expect("load").updated_at();
    let with_fork = |ids: &[&str], since: i64, before: i64| -> Vec<String> {
        let mut ids: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
        if fork_time >= at(since) && fork_time < at(before) {
            ids.push("alpha-fork".to_owned());
        }
        ids.sort_unstable();
        ids
    };

    assert_eq!(
        ids(store, &ListFilter::new().scope(ListScope::All)).len(),
        5
    );
    assert_eq!(
        ids(
            store,
            &ListFilter::new().model("model-a").scope(ListScope::All)
        ),
        with_fork(&["alpha", "gamma"], -1_000_000_000, 1_000_000_000),
        "by model"
    );
    assert_eq!(
        ids(
            store,
            &ListFilter::new()
                .updated_since(at(20))
                .updated_before(at(40))
                .scope(ListScope::All)
        ),
        with_fork(&["beta", "gamma"], 20, 40),
        "by time: since is inclusive, before exclusive"
    );
    assert_eq!(
        ids(store, &ListFilter::new().forks_of(id("alpha"))),
        ["alpha-fork"],
        "forks of a session"
    );
    assert!(ids(store, &ListFilter::new().forks_of(id("gamma"))).is_empty());
    if archiving {
        assert_eq!(
            ids(store, &ListFilter::new().scope(ListScope::Archived)),
            ["beta"]
        );
        assert!(!ids(store, &ListFilter::new()).contains(&"beta".to_owned()));
    }

    check_metadata_filters(store);
}

/// The metadata part of the case: filters on the indexed key, or their refusal by a store
/// that does not index it.
fn check_metadata_filters<S: SessionStore>(store: &S) {
    let parser = ListFilter::new().metadata_eq(FILTER_KEY, json!("parser"));
    if store
        .indexed_metadata()
        .keys()
        .iter()
        .any(|k| k == FILTER_KEY)
    {
        assert_eq!(
            ids(store, &parser),
            ["alpha", "alpha-fork", "delta"],
            "by indexed metadata (a fork keeps its parent's metadata)"
        );
        assert_eq!(
            ids(
                store,
                &ListFilter::new()
                    .metadata_eq(FILTER_KEY, json!("parser"))
                    .model("model-b")
            ),
            ["delta"],
            "every condition holds"
        );
        assert!(
            ids(store, &ListFilter::new().metadata_eq(FILTER_KEY, json!(1))).is_empty(),
            "JSON equality: a number is not a string"
        );
        // A save that changes the value moves the session between listings.
        let mut delta = store.load(&id("delta")).expect("load");
        delta = delta
            .with_appended(vec![Message::user("more")], Vec::new(), at(50))
            .expect("append");
        let changed = SessionSnapshot::builder(id("delta"), "model-b")
            .transcript(delta.transcript().to_vec())
            .metadata_entry(FILTER_KEY, json!("docs"))
            .timestamps(delta.created_at(), at(60))
            .build()
            .expect("build")
            .with_revision(delta.revision());
        store.save(&changed).expect("save the change");
        assert_eq!(
            ids(store, &parser),
            ["alpha", "alpha-fork"],
            "after the change"
        );
    } else {
        assert_eq!(
            store
                .list_filtered(&parser)
                .expect_err("a key the store does not index")
                .kind(),
            ErrorKind::InvalidInput
        );
    }
}
