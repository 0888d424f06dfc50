//! `sessions list --where/--model/--forks-of` and `sessions search`, run as a process on a
//! folder store filled through the library.

#[path = "common/process.rs"]
mod process;

use agent_session::{
    FileSessionStore, ForkAt, Message, RewindTo, SessionId, SessionSnapshot, SessionStore,
    SessionStoreExt,
};
use serde_json::json;

use process::run;

fn save(store: &FileSessionStore, id: &str, model: &str, project: &str, text: &str) {
    let snapshot = SessionSnapshot::builder(SessionId::parse(id).expect("id"), model)
        .metadata_entry("project", json!(project))
        .transcript(vec![Message::user(text)])
        .build()
        .expect("build");
    store.save(&snapshot).expect("save");
}

#[test]
fn sessions_are_found_by_metadata_model_parent_and_words() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path()).expect("open");
    save(
        &store,
        "parser-1",
        "model-a",
        "parser",
        "the lock bug in the parser",
    );
    save(&store, "docs-1", "model-b", "docs", "write the docs");
    store
        .fork(
            &SessionId::parse("parser-1").expect("id"),
            ForkAt::End,
            SessionId::parse("parser-2").expect("id"),
        )
        .expect("fork");
    // A message rewound away is still found, and said so.
    let id = SessionId::parse("docs-1").expect("id");
    let mut docs = store
        .load(&id)
        .expect("load")
        .with_appended(
            vec![Message::user("a lock bug?")],
            Vec::new(),
            chrono::Utc::now(),
        )
        .expect("append");
    docs = docs.clone().with_revision(store.save(&docs).expect("save"));
    docs.rewind(RewindTo::Message(1)).expect("rewind");
    store.save(&docs).expect("save the rewind");
    let at = dir.path().to_str().expect("a UTF-8 path");

    let (code, out, err) = run(&[
        "--store",
        at,
        "sessions",
        "list",
        "--where",
        "project=parser",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("parser-1") && out.contains("parser-2"),
        "{out}"
    );
    assert!(!out.contains("docs-1"), "{out}");

    let (_, out, _) = run(&["--store", at, "sessions", "list", "--model", "model-b"]);
    assert!(out.contains("docs-1") && !out.contains("parser-1"), "{out}");
    let (_, out, _) = run(&["--store", at, "sessions", "list", "--forks-of", "parser-1"]);
    assert!(out.contains("parser-2") && !out.contains("docs-1"), "{out}");
    let (code, _, err) = run(&["--store", at, "sessions", "list", "--where", "project"]);
    assert_eq!(code, Some(2), "a usage error: {err}");
    assert!(err.contains("KEY=VALUE"), "{err}");

    let (code, out, err) = run(&["--store", at, "sessions", "search", "Lock BUG"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("parser-1") && out.contains("docs-1"), "{out}");
    assert!(out.contains("rewound at revision"), "{out}");
    assert!(out.contains("the lock bug in the parser"), "{out}");
    let (_, out, _) = run(&[
        "--store",
        at,
        "sessions",
        "search",
        "lock bug",
        "--view-only",
    ]);
    assert!(!out.contains("docs-1"), "{out}");
    let (_, out, err) = run(&["--store", at, "sessions", "search", "lock", "--limit", "1"]);
    assert!(
        err.contains("more: repeat the command with --after"),
        "{out}{err}"
    );
    let (_, out, _) = run(&["--store", at, "sessions", "search", "nowhere"]);
    assert!(out.contains("nothing matches"), "{out}");
}
