//! A compacted session loads from its view checkpoint (`<id>.view`): the state its
//! compaction left, beside the base and the journal, so a load reads that and the journal's
//! entries after the compaction, not the history the compaction replaced. The view is a
//! cache: a load gives exactly what the whole log gives, whatever happened to the view file
//! or to the files it names since it was written (damage to the history before the
//! compaction is the exception: the view does not read it, so `history` reports it).
//! Public API only; the tests look at (and tamper with) the files in the store directory.

mod common;
#[path = "common/journal.rs"]
mod journal_support;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use agent_session::{
    Durability, FileSessionStore, Revision, RewindTo, SessionId, SessionSnapshot, SessionStore,
    SessionStoreExt,
};
use journal_support::{
    appended, built, compact, files, frames, open, save_turn_by_turn, store_dir,
};

/// The size of a turn (three messages).
const TURN: usize = 2_700;

fn view_path(dir: &Path, id: &SessionId) -> PathBuf {
    dir.join(format!("{id}.view"))
}

/// Session `id` saved turn by turn (`turns` turns, after a first save of one turn).
fn saved_turn_by_turn(dir: &Path, id: &SessionId, turns: usize) -> SessionSnapshot {
    let store = FileSessionStore::builder()
        .durability(Durability::Buffered)
        .open(dir)
        .expect("open");
    save_turn_by_turn(&store, id, turns, TURN)
}

/// What the whole log gives: a load from a fresh store with the view file set aside (and
/// put back after).
fn load_without_view(dir: &Path, id: &SessionId) -> SessionSnapshot {
    let view = view_path(dir, id);
    let aside = dir.with_extension("view-aside");
    let had = fs::rename(&view, &aside).is_ok();
    let loaded = open(dir).load(id);
    if had {
        fs::rename(&aside, &view).expect("put the view back");
    }
    loaded.expect("load the whole log")
}

/// Loads `id` from a fresh store and checks it is `expected` and what the whole log gives.
fn assert_loads(dir: &Path, id: &SessionId, expected: &SessionSnapshot) {
    let loaded = open(dir).load(id).expect("load");
    assert_eq!(&loaded, expected);
    let whole = load_without_view(dir, id);
    assert_eq!(loaded, whole);
    assert_eq!(loaded.history_stats(), whole.history_stats());
}

/// Flips one byte of the first journal entry's body (a turn long compacted away), keeping
/// the file's length.
fn damage_first_entry(dir: &Path, id: &SessionId) {
    let journal = files(dir, id).journal;
    let mut bytes = fs::read(&journal).expect("read the journal");
    let entries = frames(&bytes);
    let first = &entries[1];
    let at = first.end - 40;
    bytes[at] ^= 0x01;
    fs::write(&journal, &bytes).expect("write the journal");
}

#[test]
fn a_compaction_writes_a_private_view_and_the_load_equals_the_whole_log() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("compacted").expect("id");
    saved_turn_by_turn(&dir, &id, 60);
    let store = open(&dir);
    assert!(
        !view_path(&dir, &id).exists(),
        "no view before a compaction"
    );
    let compacted = compact(&store, &id, 3);
    let view = fs::symlink_metadata(view_path(&dir, &id)).expect("the view file");
    assert!(view.is_file());
    assert_eq!(view.permissions().mode() & 0o777, 0o600);
    // The view holds the 10 messages of the compacted state, not 60 turns.
    assert!(
        view.len() * 10 < files(&dir, &id).journal.metadata().expect("journal").len(),
        "{} bytes of view",
        view.len()
    );
    assert_loads(&dir, &id, &compacted);
    assert_eq!(compacted.history_stats().compactions, 1);
}

#[test]
fn the_load_does_not_read_the_history_the_compaction_replaced_but_the_history_does() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("compacted").expect("id");
    saved_turn_by_turn(&dir, &id, 40);
    let compacted = compact(&open(&dir), &id, 2);
    damage_first_entry(&dir, &id);
    // The load reads the view and what follows the compaction only.
    assert_eq!(open(&dir).load(&id).expect("load"), compacted);
    // The history reads everything, and finds the damage.
    let err = open(&dir).history(&id).expect_err("damaged history");
    assert!(err.is_corrupt(), "{err}");
    // Negative control: without the view, the load reads the whole log and refuses it.
    fs::remove_file(view_path(&dir, &id)).expect("remove the view");
    let err = open(&dir).load(&id).expect_err("the whole log is damaged");
    assert!(err.is_corrupt(), "{err}");
}

#[test]
fn a_session_saved_once_then_compacted_loads_from_its_view() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("once").expect("id");
    let store = open(&dir);
    store.save(&built(&id, 80, TURN)).expect("save");
    let compacted = compact(&store, &id, 2);
    assert!(view_path(&dir, &id).exists());
    assert_loads(&dir, &id, &compacted);
}

#[test]
fn turns_after_the_compaction_are_read_from_the_journal_and_saves_go_on_from_a_view_load() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("going-on").expect("id");
    saved_turn_by_turn(&dir, &id, 30);
    compact(&open(&dir), &id, 2);
    let mut head = open(&dir).load(&id).expect("load");
    for i in 100..105 {
        // A fresh store each time, as a CLI run is: the load it saves after is the view's.
        let store = open(&dir);
        let loaded = store.load(&id).expect("load");
        assert_eq!(loaded, head);
        let next = appended(loaded, i, TURN);
        let revision = store.save(&next).expect("save after a view load");
        head = next.with_revision(revision);
    }
    assert_loads(&dir, &id, &head);
    let history = open(&dir).history(&id).expect("history");
    assert_eq!(history.revision, head.revision());
    assert_eq!(
        open(&dir).revisions(&id).expect("revisions").len() as u64,
        head.revision().as_u64()
    );
    // A stale save is still refused after a view load.
    let stale = appended(
        open(&dir)
            .load_at(&id, Revision::from_u64(head.revision().as_u64() - 1))
            .expect("load_at"),
        200,
        TURN,
    );
    let err = open(&dir).save(&stale).expect_err("stale");
    assert_eq!(err.kind(), agent_session::ErrorKind::Conflict);
}

#[test]
fn rewinds_restores_and_a_second_compaction_after_it_load_as_the_whole_log_does() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("edited").expect("id");
    saved_turn_by_turn(&dir, &id, 30);
    let before = open(&dir).load(&id).expect("load").revision();
    compact(&open(&dir), &id, 3);
    // A rewind after the compaction: the view plus the rewind entry.
    let store = open(&dir);
    store.rewind(&id, RewindTo::LastTurns(1)).expect("rewind");
    let rewound = load_without_view(&dir, &id);
    assert_loads(&dir, &id, &rewound);
    // A restore of a revision before the compaction: the state is not the view's, and the
    // whole log decides.
    store.restore(&id, before).expect("restore");
    let restored = load_without_view(&dir, &id);
    assert_eq!(restored.transcript().len(), 90);
    assert_loads(&dir, &id, &restored);
    // A second compaction replaces the view.
    let second = compact(&open(&dir), &id, 1);
    assert_loads(&dir, &id, &second);
    assert_eq!(second.history_stats().compactions, 2);
}

#[test]
fn a_damaged_missing_or_foreign_view_file_is_passed_over() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("views").expect("id");
    saved_turn_by_turn(&dir, &id, 20);
    let compacted = compact(&open(&dir), &id, 2);
    let view = view_path(&dir, &id);
    let good = fs::read(&view).expect("read the view");
    // Each byte flipped, a few hundred positions apart: a checksum or a check fails, and
    // the whole log is read.
    for at in (0..good.len()).step_by(97) {
        let mut bad = good.clone();
        bad[at] ^= 0x20;
        fs::write(&view, &bad).expect("write");
        assert_eq!(open(&dir).load(&id).expect("load"), compacted, "byte {at}");
    }
    // Cut short, empty, a directory, a symbolic link to a good copy elsewhere.
    fs::write(&view, &good[..good.len() / 2]).expect("write");
    assert_eq!(open(&dir).load(&id).expect("load"), compacted);
    fs::write(&view, b"").expect("write");
    assert_eq!(open(&dir).load(&id).expect("load"), compacted);
    fs::remove_file(&view).expect("remove");
    fs::create_dir(&view).expect("mkdir");
    assert_eq!(open(&dir).load(&id).expect("load"), compacted);
    fs::remove_dir(&view).expect("rmdir");
    let elsewhere = dir.parent().expect("parent").join("elsewhere.view");
    fs::write(&elsewhere, &good).expect("write");
    symlink(&elsewhere, &view).expect("symlink");
    assert_eq!(open(&dir).load(&id).expect("load"), compacted);
    fs::remove_file(&view).expect("remove the link");
    // Another session's view under this name.
    let other = SessionId::parse("other").expect("id");
    saved_turn_by_turn(&dir, &other, 20);
    compact(&open(&dir), &other, 1);
    fs::copy(view_path(&dir, &other), &view).expect("copy");
    assert_eq!(open(&dir).load(&id).expect("load"), compacted);
}

#[test]
fn a_view_never_outlives_the_base_it_was_made_beside() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("replaced").expect("id");
    saved_turn_by_turn(&dir, &id, 20);
    compact(&open(&dir), &id, 2);
    let view = view_path(&dir, &id);
    let kept = fs::read(&view).expect("read the view");
    // Trimming the history rewrites the base and the journal: the view goes with them.
    let store = open(&dir);
    let head = store.load(&id).expect("load").revision();
    store.trim_history(&id, head).expect("trim");
    assert!(!view.exists());
    let trimmed = load_without_view(&dir, &id);
    // An old view put back is stale (it names the old base), so it is not used.
    fs::write(&view, &kept).expect("put back the old view");
    assert_loads(&dir, &id, &trimmed);
    // Deleting the session removes it; a new session under the id is not its state.
    store.delete(&id).expect("delete");
    assert!(!view.exists());
    let new = built(&id, 3, TURN);
    let revision = store.save(&new).expect("a new session");
    fs::write(&view, &kept).expect("plant the old view");
    assert_eq!(
        open(&dir).load(&id).expect("load"),
        new.with_revision(revision)
    );
}

#[test]
fn a_view_and_journal_left_behind_by_a_rewrite_are_not_taken_for_the_new_base() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("rewritten").expect("id");
    saved_turn_by_turn(&dir, &id, 20);
    let compacted = compact(&open(&dir), &id, 2);
    let f = files(&dir, &id);
    let (journal, view) = (
        fs::read(&f.journal).expect("journal"),
        fs::read(view_path(&dir, &id)).expect("view"),
    );
    // Another session saved under the id (another creation time): a new base, the journal
    // emptied and the view removed.
    let new = built(&id, 2, TURN).with_revision(compacted.revision());
    let revision = open(&dir).save(&new).expect("save over it");
    assert!(!view_path(&dir, &id).exists());
    // What a crash that lost the emptying and the removal leaves: the old journal (its
    // header names the old base, so it is ignored) and the old view, which names that
    // journal's frames but the old base's stamp.
    fs::write(&f.journal, &journal).expect("put the old journal back");
    fs::write(view_path(&dir, &id), &view).expect("put the old view back");
    assert_eq!(
        open(&dir).load(&id).expect("load"),
        new.with_revision(revision)
    );
}

#[test]
fn a_view_whose_compaction_a_power_cut_took_back_is_not_used() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("taken-back").expect("id");
    saved_turn_by_turn(&dir, &id, 20);
    let f = files(&dir, &id);
    let before = fs::read(&f.journal).expect("journal");
    compact(&open(&dir), &id, 2);
    let view = fs::read(view_path(&dir, &id)).expect("view");
    // With `Durability::Buffered` a power cut may keep the view file and lose the
    // compaction's entry; the next save appends another entry at the same offset and
    // revision.
    fs::write(&f.journal, &before).expect("the journal before the compaction");
    fs::remove_file(view_path(&dir, &id)).expect("remove the view");
    let store = open(&dir);
    let next = appended(store.load(&id).expect("load"), 50, TURN);
    let revision = store.save(&next).expect("save a turn instead");
    fs::write(view_path(&dir, &id), &view).expect("the view the power cut kept");
    assert_eq!(
        open(&dir).load(&id).expect("load"),
        next.with_revision(revision)
    );
}

#[test]
fn forks_that_share_their_parents_messages_get_no_view_and_chains_of_them_still_load() {
    let (_tmp, dir) = store_dir();
    let root = SessionId::parse("root").expect("id");
    saved_turn_by_turn(&dir, &root, 20);
    // A chain of forks, each made from the last one after that one was compacted and
    // saved, and loaded again (as a resumed session is) before it is forked: the depth of
    // the chain of sharing forks must survive the loads, so every fork keeps loading.
    let mut parent = root;
    for i in 0..12 {
        let id = SessionId::parse(&format!("fork-{i}")).expect("id");
        let store = open(&dir);
        store
            .fork(&parent, agent_session::ForkAt::End, id.clone())
            .expect("fork");
        let mut head = store.load(&id).expect("load the fork");
        for turn in 0..4 {
            head = appended(head, 1_000 + i * 10 + turn, TURN);
            let revision = store.save(&head).expect("a turn of the fork");
            head = head.with_revision(revision);
        }
        compact(&store, &id, 1);
        assert!(
            !view_path(&dir, &id).exists() || i >= 8,
            "fork {i} shares its parent's messages: no view"
        );
        for earlier in 0..=i {
            let earlier = SessionId::parse(&format!("fork-{earlier}")).expect("id");
            open(&dir)
                .load(&earlier)
                .expect("every fork of the chain loads");
        }
        parent = id;
    }
}

#[test]
fn stored_bytes_counts_the_view() {
    let (_tmp, dir) = store_dir();
    let id = SessionId::parse("counted").expect("id");
    saved_turn_by_turn(&dir, &id, 20);
    compact(&open(&dir), &id, 2);
    let f = files(&dir, &id);
    let on_disk: u64 = [f.base, f.journal, view_path(&dir, &id)]
        .iter()
        .map(|p| fs::metadata(p).expect("stat").len())
        .sum();
    assert_eq!(
        open(&dir).stored_bytes(&id).expect("stored bytes"),
        Some(on_disk)
    );
}
