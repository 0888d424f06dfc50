//! Filtered listings when the indexed metadata keys change between runs (issue 18): a
//! store opened with keys its summaries were not written for still filters right (it
//! works the values out from the sessions) and writes the summaries again, so the next
//! listing reads summaries only. File store, and PostgreSQL with the `postgres` feature.

use agent_session::{
    FileSessionStore, IndexedMetadata, ListFilter, SessionId, SessionSnapshot, SessionStore,
};
use serde_json::json;

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod postgres_support;

fn keys() -> IndexedMetadata {
    IndexedMetadata::new(["project"]).expect("keys")
}

fn save_two(store: &dyn SessionStore) {
    for (id, project) in [("one", "parser"), ("two", "docs")] {
        let snapshot = SessionSnapshot::builder(SessionId::parse(id).expect("id"), "m")
            .metadata_entry("project", json!(project))
            .metadata_entry("big", json!("x".repeat(2000)))
            .build()
            .expect("build");
        store.save(&snapshot).expect("save");
    }
}

fn parser_sessions(store: &dyn SessionStore) -> Vec<String> {
    store
        .list_filtered(&ListFilter::new().metadata_eq("project", json!("parser")))
        .expect("filtered listing")
        .sessions
        .iter()
        .map(|s| s.id.to_string())
        .collect()
}

#[test]
fn a_file_store_opened_with_new_keys_filters_right_and_rewrites_its_summaries() {
    let dir = tempfile::tempdir().expect("temp dir");
    save_two(&FileSessionStore::open(dir.path()).expect("open"));
    let summary = dir.path().join("one.summary");
    let before = std::fs::read(&summary).expect("a summary");

    let indexed = FileSessionStore::builder()
        .index_metadata(keys())
        .open(dir.path())
        .expect("open with keys");
    assert_eq!(parser_sessions(&indexed), ["one"]);
    let after = std::fs::read(&summary).expect("a summary");
    assert_ne!(
        before, after,
        "the summary was written again for the new keys"
    );
    let text = String::from_utf8_lossy(&after);
    assert!(text.contains("\"indexed\":[\"project\"]"), "{text}");
    assert!(
        !text.contains("xxxx"),
        "values over 1 KiB are not carried: {text}"
    );
    // A fresh store object (no cache) reads the rewritten summaries and agrees.
    let again = FileSessionStore::builder()
        .index_metadata(keys())
        .open(dir.path())
        .expect("open again");
    assert_eq!(parser_sessions(&again), ["one"]);
    // A filter on a key the store does not index, or on a value too large to index.
    let plain = FileSessionStore::open(dir.path()).expect("open");
    let refused = plain
        .list_filtered(&ListFilter::new().metadata_eq("project", json!("parser")))
        .expect_err("not indexed");
    assert!(refused.to_string().contains("index_metadata"), "{refused}");
    assert!(again
        .list_filtered(&ListFilter::new().metadata_eq("project", json!("x".repeat(2000))))
        .is_err());
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_store_opened_with_new_keys_filters_right_and_rewrites_its_summaries() {
    let schemas = postgres_support::Schemas::new();
    let plain = schemas.store();
    let schema = plain.schema().to_owned();
    save_two(&plain);
    let indexed = agent_session::PostgresSessionStore::builder()
        .schema(schema.as_str())
        .index_metadata(keys())
        .connect(&postgres_support::url())
        .expect("connect with keys");
    assert_eq!(parser_sessions(&indexed), ["one"]);
    let summaries = postgres_support::query_text(&format!(
        "SELECT summary FROM \"{schema}\".sessions ORDER BY id"
    ));
    assert!(
        summaries
            .iter()
            .all(|s| s.contains("\"indexed\":[\"project\"]")),
        "{summaries:?}"
    );
    assert_eq!(parser_sessions(&indexed), ["one"]);
}
