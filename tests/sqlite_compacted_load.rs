//! A compacted session in `SqliteSessionStore` loads from its view row (`views`): the
//! state its compaction made, written in the compaction's save transaction, so a load
//! reads that row and the entries from the compaction on, not the history the compaction
//! replaced. A load gives exactly what the whole log gives (`load_at` of the head reads
//! the whole log), whatever happened to the row; damage to the history before the
//! compaction is the exception: the load does not read it, so `history` reports it.
//! Public API only; the tests look at (and tamper with) the database through a
//! connection of their own.
#![cfg(all(unix, feature = "sqlite"))]

mod common;
#[path = "common/journal.rs"]
mod journal_support;

use std::path::Path;

use agent_session::{
    Durability, ErrorKind, ForkAt, Revision, RewindTo, SessionId, SessionSnapshot, SessionStore,
    SessionStoreExt, SqliteSessionStore,
};
use journal_support::{appended, built, compact, save_turn_by_turn};
use rusqlite::OptionalExtension;

/// The size of a turn (three messages).
const TURN: usize = 2_700;

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).expect("valid id")
}

fn open(db: &Path) -> SqliteSessionStore {
    SqliteSessionStore::builder()
        .durability(Durability::Buffered)
        .open(db)
        .expect("open the store")
}

/// A connection of the test's own, as another program would have.
fn raw(db: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(db).expect("open the database directly")
}

/// Session `id` saved turn by turn (`turns` turns, after a first save of one turn).
fn saved_turn_by_turn(store: &SqliteSessionStore, id: &SessionId, turns: usize) {
    save_turn_by_turn(store, id, turns, TURN);
}

/// The view row of `id`: its revision and checkpoint revision, and the view's size.
fn view_row(db: &Path, id: &SessionId) -> Option<(u64, u64, u64)> {
    let row: Option<(i64, i64, i64)> = raw(db)
        .query_row(
            "SELECT revision, checkpoint_revision, length(view) FROM views WHERE session_id = ?1",
            [id.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .expect("query the view row");
    let unsigned = |n: i64| u64::try_from(n).expect("not negative");
    row.map(|(a, b, c)| (unsigned(a), unsigned(b), unsigned(c)))
}

/// Loads `id` from a fresh store and checks it is `expected` and what the whole log
/// gives (`load_at` of the head), history counts included.
fn assert_loads(db: &Path, id: &SessionId, expected: &SessionSnapshot) {
    let store = open(db);
    let loaded = store.load(id).expect("load");
    assert_eq!(&loaded, expected);
    let whole = store.load_at(id, loaded.revision()).expect("the whole log");
    assert_eq!(loaded, whole);
    assert_eq!(loaded.history_stats(), whole.history_stats());
    let listed = store
        .list()
        .expect("list")
        .sessions
        .into_iter()
        .find(|s| s.id == *id)
        .expect("listed");
    assert_eq!(listed.history, loaded.history_stats());
}

/// Flips a byte inside the entry of revision 2, so a read of it fails its checksum.
fn damage_an_early_entry(db: &Path, id: &SessionId) {
    raw(db)
        .execute(
            "UPDATE entries SET entry = CAST(substr(entry, 1, 40) || x'FF' || substr(entry, 42) AS BLOB)
             WHERE session_id = ?1 AND revision = 2",
            [id.as_str()],
        )
        .expect("damage");
}

#[test]
fn a_compaction_writes_a_view_row_and_the_load_equals_the_whole_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let id = sid("compacted");
    let store = open(&db);
    saved_turn_by_turn(&store, &id, 60);
    assert_eq!(view_row(&db, &id), None, "no view before a compaction");
    let compacted = compact(&store, &id, 3);
    let (revision, checkpoint_revision, size) = view_row(&db, &id).expect("a view row");
    assert_eq!(revision, compacted.revision().as_u64());
    assert_eq!(checkpoint_revision, 1);
    // The view holds the 10 messages of the compacted state (and every usage entry), not
    // 60 turns.
    assert!(size * 5 < 60 * TURN as u64, "{size} bytes of view");
    assert_loads(&db, &id, &compacted);
    assert_eq!(compacted.history_stats().compactions, 1);
}

#[test]
fn the_load_does_not_read_the_history_the_compaction_replaced_but_the_history_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let id = sid("compacted");
    saved_turn_by_turn(&open(&db), &id, 40);
    let compacted = compact(&open(&db), &id, 2);
    damage_an_early_entry(&db, &id);
    // The load reads the view row and the entries from the compaction on.
    assert_eq!(open(&db).load(&id).expect("load"), compacted);
    // The history reads everything, and finds the damage.
    let err = open(&db).history(&id).expect_err("damaged history");
    assert!(err.is_corrupt(), "{err}");
    // Negative control: without the view row, the load reads the whole log and refuses it.
    raw(&db)
        .execute("DELETE FROM views", [])
        .expect("remove the view row");
    let err = open(&db).load(&id).expect_err("the whole log is damaged");
    assert!(err.is_corrupt(), "{err}");
}

#[test]
fn a_session_saved_once_then_compacted_loads_from_its_view() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let id = sid("once");
    let store = open(&db);
    store.save(&built(&id, 80, TURN)).expect("save");
    let compacted = compact(&store, &id, 2);
    assert!(view_row(&db, &id).is_some());
    assert_loads(&db, &id, &compacted);
}

#[test]
fn turns_rewinds_restores_and_a_second_compaction_after_it_load_as_the_whole_log_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let id = sid("going-on");
    saved_turn_by_turn(&open(&db), &id, 30);
    let before = open(&db).load(&id).expect("load").revision();
    compact(&open(&db), &id, 2);
    // Turns saved from view loads, each in a fresh store, as a CLI run is.
    let mut head = open(&db).load(&id).expect("load");
    for i in 100..104 {
        let store = open(&db);
        let loaded = store.load(&id).expect("load");
        assert_eq!(loaded, head);
        let next = appended(loaded, i, TURN);
        let revision = store.save(&next).expect("save after a view load");
        head = next.with_revision(revision);
    }
    assert_loads(&db, &id, &head);
    // A stale save is still refused.
    let stale = appended(
        open(&db)
            .load_at(&id, Revision::from_u64(head.revision().as_u64() - 1))
            .expect("load_at"),
        200,
        TURN,
    );
    let err = open(&db).save(&stale).expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    // A rewind: the view plus the entries after it.
    let store = open(&db);
    store.rewind(&id, RewindTo::LastTurns(1)).expect("rewind");
    let rewound = store.load(&id).expect("load");
    assert_eq!(rewound.transcript().len(), head.transcript().len() - 3);
    assert_loads(&db, &id, &rewound);
    // A restore of a revision before the compaction: the view cannot make that state,
    // and the whole log decides.
    store.restore(&id, before).expect("restore");
    let restored = store.load(&id).expect("load");
    assert_eq!(restored.transcript().len(), 90);
    assert_loads(&db, &id, &restored);
    // A second compaction replaces the view row.
    let second = compact(&open(&db), &id, 1);
    let (revision, _, _) = view_row(&db, &id).expect("a view row");
    assert_eq!(revision, second.revision().as_u64());
    assert_loads(&db, &id, &second);
    assert_eq!(second.history_stats().compactions, 2);
}

#[test]
fn a_damaged_or_foreign_view_row_is_passed_over() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let id = sid("views");
    saved_turn_by_turn(&open(&db), &id, 20);
    let compacted = compact(&open(&db), &id, 2);
    let other = sid("other");
    saved_turn_by_turn(&open(&db), &other, 20);
    compact(&open(&db), &other, 1);
    let conn = raw(&db);
    let good: Vec<u8> = conn
        .query_row(
            "SELECT view FROM views WHERE session_id = 'views'",
            [],
            |r| r.get(0),
        )
        .expect("the view");
    let set_view = |bytes: &[u8]| {
        conn.execute(
            "UPDATE views SET view = ?1 WHERE session_id = 'views'",
            [bytes],
        )
        .expect("write the view");
    };
    // Each byte flipped, a few hundred positions apart: the frame's checksum or a check
    // fails, and the whole log is read.
    for at in (0..good.len()).step_by(97) {
        let mut bad = good.clone();
        bad[at] ^= 0x20;
        set_view(&bad);
        assert_eq!(open(&db).load(&id).expect("load"), compacted, "byte {at}");
    }
    // Cut short, empty, not a view at all.
    for bad in [&good[..good.len() / 2], &b""[..], &b"\x00"[..]] {
        set_view(bad);
        assert_eq!(open(&db).load(&id).expect("load"), compacted);
    }
    // Another session's view.
    conn.execute(
        "UPDATE views SET view = (SELECT view FROM views WHERE session_id = 'other')
         WHERE session_id = 'views'",
        [],
    )
    .expect("copy");
    assert_eq!(open(&db).load(&id).expect("load"), compacted);
    // The good view at another revision, or beside another checkpoint.
    set_view(&good);
    for change in [
        "UPDATE views SET revision = revision - 1 WHERE session_id = 'views'",
        "UPDATE views SET revision = revision + 100 WHERE session_id = 'views'",
        "UPDATE views SET checkpoint_revision = 7 WHERE session_id = 'views'",
    ] {
        let undo = change.replace("- 1", "+ 1").replace("+ 100", "- 100");
        conn.execute(change, []).expect("change the row");
        assert_eq!(open(&db).load(&id).expect("load"), compacted, "{change}");
        if change.contains("checkpoint_revision") {
            conn.execute(
                "UPDATE views SET checkpoint_revision = 1 WHERE session_id = 'views'",
                [],
            )
            .expect("undo");
        } else {
            conn.execute(&undo, []).expect("undo");
        }
    }
    assert_loads(&db, &id, &compacted);
}

#[test]
fn a_whole_save_a_trim_and_a_delete_keep_the_view_row_only_while_it_describes_the_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let id = sid("replaced");
    let store = open(&db);
    saved_turn_by_turn(&store, &id, 20);
    let rewind = store
        .rewind(&id, RewindTo::LastTurns(1))
        .expect("rewind")
        .revision();
    let compacted = compact(&store, &id, 2);
    assert_eq!(compacted.history_stats().rewinds, 1);
    // A turn, then a trim that keeps the compaction but not the rewind: the view row
    // stays, beside the new checkpoint, counting what the kept history holds.
    let next = appended(store.load(&id).expect("load"), 50, TURN);
    let revision = store.save(&next).expect("a turn");
    let next = next.with_revision(revision);
    store
        .trim_history(&id, rewind)
        .expect("trim before the compaction");
    let (_, checkpoint_revision, _) = view_row(&db, &id).expect("the view row stays");
    assert_eq!(checkpoint_revision, rewind.as_u64());
    assert_loads(&db, &id, &next);
    assert_eq!(
        open(&db).load(&id).expect("load").history_stats().rewinds,
        0,
        "the rewind was trimmed away"
    );
    // A trim to the compaction or past it: the checkpoint is that state now.
    store
        .trim_history(&id, compacted.revision())
        .expect("trim to the compaction");
    assert_eq!(view_row(&db, &id), None);
    assert_loads(&db, &id, &next);
    // A delete removes it; a new session under the id has none.
    compact(&store, &id, 1);
    assert!(view_row(&db, &id).is_some());
    store.delete(&id).expect("delete");
    assert_eq!(view_row(&db, &id), None);
    let new = built(&id, 3, TURN);
    let revision = store.save(&new).expect("a new session");
    assert_eq!(view_row(&db, &id), None);
    assert_eq!(
        open(&db).load(&id).expect("load"),
        new.with_revision(revision)
    );
    // Another session saved over a compacted one (another creation time): written whole,
    // without the old view row.
    compact(&store, &id, 1);
    assert!(view_row(&db, &id).is_some());
    let head = store.load(&id).expect("load").revision();
    let over = built(&id, 2, TURN).with_revision(head);
    let revision = store.save(&over).expect("save over it");
    assert_eq!(view_row(&db, &id), None);
    assert_eq!(
        open(&db).load(&id).expect("load"),
        over.with_revision(revision)
    );
}

#[test]
fn forks_that_share_their_parents_messages_get_no_view_row_and_still_load() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let store = open(&db);
    let mut parent = sid("root");
    saved_turn_by_turn(&store, &parent, 20);
    for i in 0..6 {
        let id = sid(&format!("fork-{i}"));
        store.fork(&parent, ForkAt::End, id.clone()).expect("fork");
        let mut head = store.load(&id).expect("load the fork");
        for turn in 0..4 {
            head = appended(head, 1_000 + i * 10 + turn, TURN);
            let revision = store.save(&head).expect("a turn of the fork");
            head = head.with_revision(revision);
        }
        let compacted = compact(&store, &id, 1);
        let shares: Option<String> = raw(&db)
            .query_row(
                "SELECT shares_parent FROM sessions WHERE id = ?1",
                [id.as_str()],
                |r| r.get(0),
            )
            .expect("query");
        if shares.is_some() {
            assert_eq!(view_row(&db, &id), None, "fork {i} shares: no view row");
        }
        assert_loads(&db, &id, &compacted);
        for earlier in 0..=i {
            open(&db)
                .load(&sid(&format!("fork-{earlier}")))
                .expect("every fork of the chain loads");
        }
        parent = id;
    }
}

#[test]
fn stored_bytes_counts_the_view_row() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("s.db");
    let id = sid("counted");
    let store = open(&db);
    saved_turn_by_turn(&store, &id, 20);
    compact(&store, &id, 2);
    let (_, _, view) = view_row(&db, &id).expect("a view row");
    let rows: i64 = raw(&db)
        .query_row(
            "SELECT (SELECT length(checkpoint) FROM checkpoints WHERE session_id = ?1)
                  + (SELECT length(summary) FROM sessions WHERE id = ?1)
                  + (SELECT sum(length(entry)) FROM entries WHERE session_id = ?1)",
            [id.as_str()],
            |r| r.get(0),
        )
        .expect("query");
    assert_eq!(
        store.stored_bytes(&id).expect("stored bytes"),
        Some(u64::try_from(rows).expect("a size") + view)
    );
}
