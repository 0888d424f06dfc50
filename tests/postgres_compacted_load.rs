//! A compacted session in `PostgresSessionStore` loads from its view (the row's
//! `view_state`, `view_revision` and `view_history`): the state its compaction made,
//! written by the compaction's append, so a load reads that and the entries from the
//! compaction on, not the row's snapshot and the history the compaction replaced. A load
//! gives exactly what the whole log gives (`load_at` of the head reads the whole log),
//! whatever happened to the columns; damage to the history before the compaction is the
//! exception: the load does not read it, so `history` reports it. Public API only, against
//! the server `scripts/test` starts; the tests look at (and tamper with) the row through a
//! connection of their own.
#![cfg(feature = "postgres")]

#[path = "common/journal.rs"]
mod journal_support;
#[path = "common/postgres.rs"]
mod pg;

use agent_session::{
    ErrorKind, PostgresSessionStore, Revision, RewindTo, SessionId, SessionSnapshot, SessionStore,
    SessionStoreExt,
};
use journal_support::{appended, built, compact, save_turn_by_turn};
use pg::Schemas;

/// The size of a turn (three messages).
const TURN: usize = 2_700;

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).expect("valid id")
}

/// The view columns of `id`: the view's revision and size, or `None` if it has none.
fn view_of(store: &PostgresSessionStore, id: &SessionId) -> Option<(u64, u64)> {
    let text = pg::query_text(&format!(
        "SELECT coalesce(view_revision::text || ',' || octet_length(view_state)::text, '')
         FROM \"{}\".sessions WHERE id = '{id}'",
        store.schema()
    ));
    let [row] = text.as_slice() else {
        panic!("no row for {id}");
    };
    let (revision, size) = row.split_once(',')?;
    Some((
        revision.parse().expect("a revision"),
        size.parse().expect("a size"),
    ))
}

/// Runs `set` (an SQL `SET` list) on the row of `id`.
fn set_row(store: &PostgresSessionStore, id: &SessionId, set: &str) {
    pg::execute(&format!(
        "UPDATE \"{}\".sessions SET {set} WHERE id = '{id}'",
        store.schema()
    ));
}

/// The view state of `id` as hexadecimal.
fn view_hex(store: &PostgresSessionStore, id: &SessionId) -> String {
    pg::query_text(&format!(
        "SELECT encode(view_state, 'hex') FROM \"{}\".sessions WHERE id = '{id}'",
        store.schema()
    ))
    .pop()
    .expect("a view")
}

/// `turns` more turns saved onto the stored session `id`.
fn more_turns(store: &PostgresSessionStore, id: &SessionId, turns: usize) {
    let mut head = store.load(id).expect("load");
    for i in 0..turns {
        let next = appended(head, 500 + i, TURN);
        let revision = store.save(&next).expect("save a turn");
        head = next.with_revision(revision);
    }
}

/// Loads `id` and checks it is `expected` and what the whole log gives (`load_at` of
/// the head), history counts included.
fn assert_loads(store: &PostgresSessionStore, id: &SessionId, expected: &SessionSnapshot) {
    let loaded = store.load(id).expect("load");
    assert_eq!(&loaded, expected);
    let whole = store.load_at(id, loaded.revision()).expect("the whole log");
    assert_eq!(loaded, whole);
    assert_eq!(loaded.history_stats(), whole.history_stats());
}

#[test]
fn a_compaction_keeps_its_view_and_the_load_equals_the_whole_log() {
    let schemas = Schemas::new();
    let store = schemas.store();
    let id = sid("compacted");
    save_turn_by_turn(&store, &id, 60, TURN);
    assert_eq!(view_of(&store, &id), None, "no view before a compaction");
    let compacted = compact(&store, &id, 3);
    let (revision, size) = view_of(&store, &id).expect("a view");
    assert_eq!(revision, compacted.revision().as_u64());
    // The view holds the 10 messages of the compacted state (and every usage entry).
    assert!(size * 5 < 60 * TURN as u64, "{size} bytes of view");
    assert_loads(&store, &id, &compacted);
    assert_eq!(compacted.history_stats().compactions, 1);
    // A session saved once, then compacted.
    let once = sid("once");
    store.save(&built(&once, 80, TURN)).expect("save");
    let compacted = compact(&store, &once, 2);
    assert!(view_of(&store, &once).is_some());
    assert_loads(&store, &once, &compacted);
}

#[test]
fn the_load_does_not_read_the_history_the_compaction_replaced_but_the_history_does() {
    let schemas = Schemas::new();
    let store = schemas.store();
    let id = sid("compacted");
    save_turn_by_turn(&store, &id, 40, TURN);
    let compacted = compact(&store, &id, 2);
    pg::execute(&format!(
        "UPDATE \"{}\".entries SET record = overlay(record PLACING '\\xff'::bytea FROM 41 FOR 1)
         WHERE session_id = '{id}' AND revision = 2",
        store.schema()
    ));
    assert_eq!(store.load(&id).expect("load"), compacted);
    let err = store.history(&id).expect_err("damaged history");
    assert!(err.is_corrupt(), "{err}");
    // Negative control: without the view, the load reads the whole log and refuses it.
    set_row(
        &store,
        &id,
        "view_state = NULL, view_revision = NULL, view_history = NULL",
    );
    let err = store.load(&id).expect_err("the whole log is damaged");
    assert!(err.is_corrupt(), "{err}");
}

#[test]
fn turns_rewinds_restores_and_a_second_compaction_after_it_load_as_the_whole_log_does() {
    let schemas = Schemas::new();
    let store = schemas.store();
    let id = sid("going-on");
    save_turn_by_turn(&store, &id, 30, TURN);
    let before = store.load(&id).expect("load").revision();
    compact(&store, &id, 2);
    let mut head = store.load(&id).expect("load");
    for i in 100..104 {
        let loaded = store.load(&id).expect("load");
        assert_eq!(loaded, head);
        let next = appended(loaded, i, TURN);
        let revision = store.save(&next).expect("save after a view load");
        head = next.with_revision(revision);
    }
    assert_loads(&store, &id, &head);
    let stale = appended(
        store
            .load_at(&id, Revision::from_u64(head.revision().as_u64() - 1))
            .expect("load_at"),
        200,
        TURN,
    );
    let err = store.save(&stale).expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::Conflict);
    store.rewind(&id, RewindTo::LastTurns(1)).expect("rewind");
    let rewound = store.load(&id).expect("load");
    assert_eq!(rewound.transcript().len(), head.transcript().len() - 3);
    assert_loads(&store, &id, &rewound);
    // A restore of a revision before the compaction: the whole log decides.
    store.restore(&id, before).expect("restore");
    let restored = store.load(&id).expect("load");
    assert_eq!(restored.transcript().len(), 90);
    assert_loads(&store, &id, &restored);
    let second = compact(&store, &id, 1);
    assert_eq!(
        view_of(&store, &id).map(|(revision, _)| revision),
        Some(second.revision().as_u64())
    );
    assert_loads(&store, &id, &second);
    assert_eq!(second.history_stats().compactions, 2);
}

#[test]
fn a_damaged_or_foreign_view_is_passed_over() {
    let schemas = Schemas::new();
    let store = schemas.store();
    let id = sid("views");
    save_turn_by_turn(&store, &id, 20, TURN);
    let compacted = compact(&store, &id, 2);
    let other = sid("other");
    save_turn_by_turn(&store, &other, 20, TURN);
    compact(&store, &other, 1);
    let good = view_hex(&store, &id);
    let (revision, _) = view_of(&store, &id).expect("a view");
    let history = pg::query_text(&format!(
        "SELECT view_history::text FROM \"{}\".sessions WHERE id = '{id}'",
        store.schema()
    ))
    .pop()
    .expect("the view's history counts");
    // Each byte flipped, a few hundred positions apart: the frame's checksum or a check
    // fails, and the whole log is read.
    let bytes: Vec<u8> = (0..good.len() / 2)
        .map(|i| u8::from_str_radix(&good[2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    for at in (0..bytes.len()).step_by(97) {
        let mut bad = bytes.clone();
        bad[at] ^= 0x20;
        let hex = bad.iter().fold(String::new(), |mut hex, b| {
            use std::fmt::Write;
            write!(hex, "{b:02x}").expect("write to a string");
            hex
        });
        set_row(&store, &id, &format!("view_state = decode('{hex}', 'hex')"));
        assert_eq!(store.load(&id).expect("load"), compacted, "byte {at}");
    }
    let restore = format!(
        "view_state = decode('{good}', 'hex'), view_revision = {revision},
         view_history = '{history}'"
    );
    for change in [
        format!(
            "view_state = decode('{}', 'hex')",
            &good[..good.len() / 4 * 2]
        ),
        "view_state = ''::bytea".to_owned(),
        "view_state = NULL".to_owned(),
        "view_history = NULL".to_owned(),
        "view_history = '{1,2}'".to_owned(),
        "view_history = '{1,NULL,1,0}'".to_owned(),
        "view_history = '{{1,0},{1,0}}'".to_owned(),
        "view_history = '{-1,0,-5,0}'".to_owned(),
        format!("view_revision = {}", revision - 1),
        format!("view_revision = {}", revision + 100),
        format!(
            "view_state = (SELECT view_state FROM \"{}\".sessions WHERE id = 'other')",
            store.schema()
        ),
    ] {
        set_row(&store, &id, &change);
        assert_eq!(store.load(&id).expect("load"), compacted, "{change}");
        set_row(&store, &id, &restore);
    }
    assert_loads(&store, &id, &compacted);
}

/// The view columns of `id` as an SQL `SET` list that puts them back.
fn view_columns(store: &PostgresSessionStore, id: &SessionId) -> String {
    pg::query_text(&format!(
        "SELECT format('view_state = decode(%L, ''hex''), view_revision = %s, view_history = %L',
                       encode(view_state, 'hex'), view_revision, view_history::text)
         FROM \"{}\".sessions WHERE id = '{id}'",
        store.schema()
    ))
    .pop()
    .expect("the view columns")
}

#[test]
fn a_view_whose_counts_a_trim_changed_is_passed_over() {
    let schemas = Schemas::new();
    let store = schemas.store();
    let id = sid("trimmed");
    save_turn_by_turn(&store, &id, 20, TURN);
    let rewind = store
        .rewind(&id, RewindTo::LastTurns(1))
        .expect("rewind")
        .revision();
    more_turns(&store, &id, 4);
    let compacted = compact(&store, &id, 2);
    assert_eq!(compacted.history_stats().rewinds, 1);
    let kept = view_columns(&store, &id);
    // A trim that keeps the compaction but not the rewind clears the view; one that left
    // it (a process of a release before views, or an append that waited for the trim and
    // kept the counts it read before) leaves counts of a log that is gone.
    store.trim_history(&id, rewind).expect("trim");
    assert_eq!(view_of(&store, &id), None);
    set_row(&store, &id, &kept);
    assert!(view_of(&store, &id).is_some());
    let loaded = store.load(&id).expect("load");
    assert_eq!(loaded.history_stats().rewinds, 0, "the rewind was trimmed");
    assert_eq!(loaded.history_stats().oldest_revision, rewind);
    assert_loads(&store, &id, &compacted);
}

#[test]
fn stored_bytes_counts_the_view() {
    let schemas = Schemas::new();
    let store = schemas.store();
    let id = sid("counted");
    save_turn_by_turn(&store, &id, 20, TURN);
    compact(&store, &id, 2);
    let (_, view) = view_of(&store, &id).expect("a view");
    let row: u64 = pg::query_text(&format!(
        "SELECT (octet_length(snapshot) + octet_length(summary) + journal_bytes)::text
         FROM \"{}\".sessions WHERE id = '{id}'",
        store.schema()
    ))
    .pop()
    .expect("a row")
    .parse()
    .expect("a size");
    assert_eq!(
        store.stored_bytes(&id).expect("stored bytes"),
        Some(row + view)
    );
}

#[test]
fn a_whole_save_and_a_trim_clear_the_view() {
    let schemas = Schemas::new();
    let store = schemas.store();
    let id = sid("replaced");
    save_turn_by_turn(&store, &id, 20, TURN);
    let compacted = compact(&store, &id, 2);
    store
        .trim_history(&id, compacted.revision())
        .expect("trim to the compaction");
    assert_eq!(view_of(&store, &id), None);
    assert_loads(&store, &id, &compacted);
    // Another session saved over a compacted one (another creation time): written
    // whole, without the old view.
    more_turns(&store, &id, 10);
    compact(&store, &id, 1);
    assert!(view_of(&store, &id).is_some());
    let head = store.load(&id).expect("load").revision();
    let over = built(&id, 2, TURN).with_revision(head);
    let revision = store.save(&over).expect("save over it");
    assert_eq!(view_of(&store, &id), None);
    assert_eq!(store.load(&id).expect("load"), over.with_revision(revision));
    // A delete takes the row, view and all; a new session under the id has none.
    more_turns(&store, &id, 10);
    compact(&store, &id, 1);
    assert!(view_of(&store, &id).is_some());
    store.delete(&id).expect("delete");
    let new = built(&id, 3, TURN);
    let revision = store.save(&new).expect("a new session");
    assert_eq!(view_of(&store, &id), None);
    assert_eq!(store.load(&id).expect("load"), new.with_revision(revision));
}

#[test]
fn tables_of_version_5_load_without_views_and_migrate_adds_them() {
    let schemas = Schemas::new();
    let store = schemas.store();
    let schema = store.schema().to_owned();
    let id = sid("older");
    let head = save_turn_by_turn(&store, &id, 10, TURN);
    // What version 5's migrate made: no view columns.
    pg::execute(&format!(
        "ALTER TABLE \"{schema}\".sessions DROP COLUMN view_state, DROP COLUMN view_revision,
             DROP COLUMN view_history;
         UPDATE \"{schema}\".store_version SET version = 5;"
    ));
    let fresh = pg::connect(&schema);
    assert_eq!(fresh.load(&id).expect("a load on version 5 tables"), head);
    let err = fresh
        .save(&appended(head, 50, TURN))
        .expect_err("a save on version 5 tables");
    assert!(
        err.to_string().contains("PostgresSessionStore::migrate"),
        "{err}"
    );
    fresh.migrate().expect("upgrade");
    assert_eq!(
        pg::query_text(&format!(
            "SELECT version::text FROM \"{schema}\".store_version"
        )),
        ["7"]
    );
    let compacted = compact(&fresh, &id, 2);
    assert!(view_of(&fresh, &id).is_some());
    assert_loads(&fresh, &id, &compacted);
}
