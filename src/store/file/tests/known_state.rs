//! What the store remembers of a session between saves (`Known`), under concurrent loads.
//!
//! A load takes no lock, so a save may store a later revision while a load is still
//! reading the earlier one; the load must not make the store forget the later one, and a
//! save must decide its compare-and-swap on what it read under the lock.

use serde_json::json;

use crate::store::file::FileSessionStore;
use crate::{Message, SessionId, SessionSnapshot, SessionStore};

/// The session with its counter at `value`; `after` is the state it follows, if any.
fn counter(id: &SessionId, value: u64, after: Option<&SessionSnapshot>) -> SessionSnapshot {
    let mut builder = SessionSnapshot::builder(id.clone(), "m");
    if let Some(after) = after {
        builder = builder.timestamps(after.created_at(), after.updated_at());
    }
    let snapshot = builder
        .metadata_entry("counter", json!(value))
        .transcript(vec![Message::user("count with me")])
        .build()
        .expect("build");
    match after {
        Some(after) => snapshot.with_revision(after.revision()),
        None => snapshot,
    }
}

#[test]
fn a_load_that_read_an_earlier_revision_does_not_replace_what_a_save_stored_since() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path()).expect("open");
    let id = SessionId::parse("shared").expect("id");
    store.save(&counter(&id, 1, None)).expect("create");
    // A load reads revision 1 (without the lock) ...
    let (_, stale) = store.read_state(&id, false).expect("read").expect("stored");
    let stale = stale.expect("the files did not change while they were read");
    // ... a save stores revision 2 meanwhile ...
    let loaded = store.load(&id).expect("load");
    let revision = store.save(&counter(&id, 2, Some(&loaded))).expect("save");
    // ... and only then does the load remember what it read.
    store.remember_unlocked_read(&id, stale);
    let known = store
        .known_sessions()
        .get(&id)
        .cloned()
        .expect("remembered");
    assert_eq!(
        known.revision, revision,
        "the later revision stays remembered"
    );

    // A save at the revision the load saw is refused, and one at the stored one appends.
    let stale_save = counter(&id, 3, Some(&loaded));
    assert!(store.save(&stale_save).expect_err("stale").is_conflict());
    let current = store.load(&id).expect("load");
    assert_eq!(current.metadata()["counter"], json!(2));
    let after = store
        .save(&counter(&id, 3, Some(&current)))
        .expect("save at the stored revision");
    assert_eq!(after, revision.next());
}
