//! Session lifecycle beyond the store contract (`tests/store_contract.rs` checks fork,
//! archive, compare-and-delete, prune, export and import on every store):
//!
//! - the file store's archive is a marker file and rewrites nothing, and `stored_bytes`
//!   is what the files take;
//! - prune racing saves (threads with their own store instances, and other processes)
//!   never deletes a session newer than the one it listed, and never leaves half of one;
//! - hostile export bundles are refused as a whole, and any bundle `from_json` accepts
//!   imports all or nothing;
//! - what a fork costs on disk (it copies the shared history);
//! - the `Harness` lifecycle calls, end to end.

mod common;
#[path = "common/lifecycle.rs"]
mod lifecycle_support;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use agent_session::{
    Bundle, ContentBlock, Durability, Error, ErrorKind, FileSessionStore, ForkAt, Harness,
    ImportIds, ListScope, MemorySessionStore, Message, PrunePolicy, PruneReason, Revision,
    SessionId, SessionOptions, SessionSnapshot, SessionStore, SessionStoreExt, ToolCall,
    ToolResult, Usage, DEFAULT_MAX_SNAPSHOT_BYTES,
};
use chrono::Utc;
use common::{sid, temp_store, Calculator, RequestLog, ToolThenAnswerEngine, MODEL};
use lifecycle_support::{
    dir_names, files_of, join, len_or_zero, line_crc, lines, reseal, session_disk_bytes, stamp,
    with_json_line, with_line,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// File store specifics.
// ---------------------------------------------------------------------------------------

/// A session stored as a base snapshot plus a journal (saved, loaded, appended to, saved).
fn session_with_journal(store: &FileSessionStore, name: &str) -> SessionSnapshot {
    let first = SessionSnapshot::builder(sid(name), MODEL)
        .transcript(vec![Message::user("first")])
        .build()
        .expect("build");
    store.save(&first).expect("save");
    let loaded = store.load(first.id()).expect("load");
    let next = loaded
        .with_appended(
            vec![Message::assistant(vec![ContentBlock::text("appended")])],
            vec![Usage::new(MODEL).with_tokens(10, 2)],
            Utc::now(),
        )
        .expect("append");
    store.save(&next).expect("append save");
    store.load(first.id()).expect("reload")
}

#[test]
fn file_store_archive_is_a_private_marker_and_rewrites_nothing() {
    let (dir, store) = temp_store();
    let root = dir.path().join("sessions");
    let snapshot = session_with_journal(&store, "archived-in-place");
    let id = snapshot.id();
    let base = root.join(format!("{id}.json"));
    let journal = root.join(format!("{id}.journal"));
    let marker = root.join(format!("{id}.archived"));
    assert!(len_or_zero(&journal) > 0, "the second save appended");
    let before = (stamp(&base), stamp(&journal));

    store.set_archived(id, true).expect("archive");
    let meta = std::fs::symlink_metadata(&marker).expect("the marker exists");
    assert!(meta.file_type().is_file());
    assert_eq!(meta.len(), 0, "the marker is empty");
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "the marker is private"
    );
    assert_eq!(
        (stamp(&base), stamp(&journal)),
        before,
        "archiving rewrote or touched the session's files"
    );
    // Again (idempotent): the marker is not recreated either.
    let marker_stamp = stamp(&marker);
    store.set_archived(id, true).expect("archive again");
    assert_eq!(stamp(&marker), marker_stamp);

    // Listing and loading an archived session touch nothing either.
    assert_eq!(
        store
            .list_scoped(ListScope::All)
            .expect("list")
            .sessions
            .len(),
        1
    );
    assert_eq!(store.load(id).expect("load"), snapshot);
    assert_eq!((stamp(&base), stamp(&journal)), before);

    store.set_archived(id, false).expect("unarchive");
    assert!(!marker.exists(), "unarchiving removes the marker");
    assert_eq!(
        (stamp(&base), stamp(&journal)),
        before,
        "unarchiving rewrote or touched the session's files"
    );

    // Deleting an archived session removes the marker with the rest.
    store.set_archived(id, true).expect("archive");
    store.delete(id).expect("delete");
    assert_eq!(files_of(&root, id.as_str()), Vec::<String>::new());
}

/// An archive marker whose snapshot is gone: `<id>.archived` beside no `<id>.json`.
/// A delete removes the marker last, so a delete cut short after the snapshot went leaves
/// one (see `file_store_delete_cut_short_keeps_the_marker_until_a_new_session_is_saved`),
/// and so does removing `<id>.json` by hand. The session is gone (nothing loads or
/// lists), so a new session saved under its id is a new session and must start active,
/// as after a delete that finished (the contract) and as imported sessions are documented
/// to be; the first save removes the marker. Journals and summaries are likewise ignored
/// unless they match the snapshot beside them.
#[test]
fn file_store_orphan_archive_marker_does_not_archive_a_new_session() {
    let (dir, store) = temp_store();
    let root = dir.path().join("sessions");
    let old = session_with_journal(&store, "reborn");
    store.set_archived(old.id(), true).expect("archive");
    store
        .list_scoped(ListScope::All)
        .expect("list (writes the summary)");
    // The snapshot and the rest removed by hand, the marker left.
    for file in ["reborn.json", "reborn.journal", "reborn.summary"] {
        std::fs::remove_file(root.join(file)).expect("remove");
    }
    assert_eq!(files_of(&root, "reborn"), ["reborn.archived"]);
    assert!(store.load(old.id()).expect_err("gone").is_not_found());
    assert!(store
        .list_scoped(ListScope::All)
        .expect("list")
        .sessions
        .is_empty());

    let new = SessionSnapshot::builder(sid("reborn"), MODEL)
        .transcript(vec![Message::user("a new session")])
        .build()
        .expect("build");
    assert_eq!(store.save(&new).expect("save"), Revision::from_u64(1));
    let listed: Vec<(String, bool)> = store
        .list_scoped(ListScope::All)
        .expect("list")
        .sessions
        .into_iter()
        .map(|s| (s.id.into_string(), s.archived))
        .collect();
    assert_eq!(
        listed,
        [("reborn".to_owned(), false)],
        "a new session inherited the archive marker of a deleted one"
    );
    assert!(
        !files_of(&root, "reborn").contains(&"reborn.archived".to_owned()),
        "the first save left the orphan marker: {:?}",
        files_of(&root, "reborn")
    );
    // Archiving and restoring the new session work as for any other.
    store.set_archived(new.id(), true).expect("archive");
    assert!(root.join("reborn.archived").exists());
    store.set_archived(new.id(), false).expect("restore");
    assert!(!root.join("reborn.archived").exists());
}

/// Marks `path` immutable (`chattr +i`) until dropped, so not even root can remove it;
/// `None` if this system cannot (no `chattr`, a file system without the flag, or no
/// `CAP_LINUX_IMMUTABLE`).
struct Immutable<'a>(&'a Path);

impl<'a> Immutable<'a> {
    fn set(path: &'a Path) -> Option<Self> {
        let status = Command::new("chattr")
            .arg("+i")
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !status.success() {
            return None;
        }
        let guard = Immutable(path);
        // Check the flag holds: a hard link to the file is refused.
        let probe = path.with_extension("probe-link");
        match std::fs::hard_link(path, &probe) {
            Ok(()) => {
                let _ = std::fs::remove_file(&probe);
                None
            }
            Err(_) => Some(guard),
        }
    }
}

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(self.0).status();
    }
}

/// Makes `path` impossible to remove, or says why the test cannot run here.
fn pin(path: &Path) -> Option<Immutable<'_>> {
    let pinned = Immutable::set(path);
    if pinned.is_none() {
        eprintln!(
            "SKIPPED: cannot make {} immutable here (chattr +i needs root or CAP_LINUX_IMMUTABLE on ext2/3/4, xfs or btrfs)",
            path.display()
        );
    }
    pinned
}

/// A delete of an archived session that fails before the snapshot is gone leaves the
/// session whole and still archived: the marker is removed last, not first.
#[test]
fn file_store_failed_delete_of_an_archived_session_leaves_it_archived() {
    let (dir, store) = temp_store();
    let root = dir.path().join("sessions");
    let snapshot = session_with_journal(&store, "stays-archived");
    let id = snapshot.id();
    store.set_archived(id, true).expect("archive");
    let listed = store
        .list_scoped(ListScope::Archived)
        .expect("list")
        .sessions;
    assert_eq!(listed.len(), 1);
    let files = files_of(&root, id.as_str());
    assert!(
        files.contains(&"stays-archived.archived".to_owned()),
        "{files:?}"
    );
    let base = root.join("stays-archived.json");
    let Some(pinned) = pin(&base) else {
        return;
    };

    let attempts: [(&str, &dyn Fn() -> agent_session::Result<()>); 2] = [
        ("delete", &|| store.delete(id)),
        ("delete_if_unchanged", &|| {
            store.delete_if_unchanged(&listed[0])
        }),
    ];
    for (how, attempt) in attempts {
        let err = attempt().expect_err("the snapshot cannot be removed");
        assert_eq!(err.kind(), ErrorKind::Io, "{how}: {err:?}");
        assert_eq!(files_of(&root, id.as_str()), files, "{how}: files removed");
        assert_eq!(store.load(id).expect("still loads"), snapshot, "{how}");
        let reopened = FileSessionStore::open(&root).expect("reopen");
        for store in [&store, &reopened] {
            let archived = store
                .list_scoped(ListScope::Archived)
                .expect("list")
                .sessions;
            assert_eq!(archived, listed, "{how}: no longer listed as archived");
            assert!(
                store.list().expect("list").sessions.is_empty(),
                "{how}: listed as active"
            );
        }
    }
    // A prune reports it and keeps it archived.
    let report = store
        .prune(&PrunePolicy::new().max_count(0).archived_only())
        .expect("prune");
    assert!(report.pruned.is_empty());
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    assert_eq!(report.skipped[0].kind(), ErrorKind::Io);
    assert_eq!(
        store
            .list_scoped(ListScope::Archived)
            .expect("list")
            .sessions,
        listed
    );

    drop(pinned);
    store.delete(id).expect("delete once the snapshot can go");
    assert_eq!(files_of(&root, id.as_str()), Vec::<String>::new());
}

/// A delete cut short after the snapshot went (its journal, or its summary, cannot be
/// removed) leaves the archive marker, which goes last; the session is gone all the same,
/// and the first save of a new session under the id removes the marker and ignores the
/// old journal and summary.
#[test]
fn file_store_delete_cut_short_keeps_the_marker_until_a_new_session_is_saved() {
    // The file that cannot be removed, and what the delete leaves.
    for (stuck, left) in [
        (
            "journal",
            &[
                "cut-short.archived",
                "cut-short.journal",
                "cut-short.summary",
            ][..],
        ),
        ("summary", &["cut-short.archived", "cut-short.summary"][..]),
    ] {
        let (dir, store) = temp_store();
        let root = dir.path().join("sessions");
        let old = session_with_journal(&store, "cut-short");
        let id = old.id();
        store.set_archived(id, true).expect("archive");
        store
            .list_scoped(ListScope::All)
            .expect("list (writes the summary)");
        assert_eq!(
            files_of(&root, id.as_str()),
            [
                "cut-short.archived",
                "cut-short.journal",
                "cut-short.json",
                "cut-short.summary"
            ]
        );
        let file = root.join(format!("cut-short.{stuck}"));
        let Some(pinned) = pin(&file) else {
            return;
        };
        let err = store
            .delete(id)
            .expect_err("a file of the session cannot be removed");
        assert_eq!(err.kind(), ErrorKind::Io, "{stuck}: {err:?}");
        assert_eq!(
            files_of(&root, id.as_str()),
            left,
            "{stuck}: the snapshot goes first, then the journal, the summary and last the marker"
        );
        assert!(store.load(id).expect_err("gone").is_not_found());
        let reopened = FileSessionStore::open(&root).expect("reopen");
        for scope in [ListScope::Active, ListScope::Archived, ListScope::All] {
            for store in [&store, &reopened] {
                assert!(
                    store.list_scoped(scope).expect("list").sessions.is_empty(),
                    "{stuck}: {scope:?}"
                );
            }
        }
        drop(pinned);

        let new = SessionSnapshot::builder(sid("cut-short"), MODEL)
            .transcript(vec![Message::user("a new session")])
            .build()
            .expect("build");
        assert_eq!(store.save(&new).expect("save"), Revision::from_u64(1));
        assert!(
            !root.join("cut-short.archived").exists(),
            "{stuck}: the first save left the marker"
        );
        for store in [&store, &reopened] {
            let listed = store.list_scoped(ListScope::All).expect("list").sessions;
            assert_eq!(listed.len(), 1, "{stuck}");
            assert!(!listed[0].archived, "{stuck}: the new session is archived");
            assert_eq!(
                store.load(id).expect("load"),
                new.clone().with_revision(Revision::from_u64(1)),
                "{stuck}: the old journal was applied to the new session"
            );
        }
    }
}

#[test]
fn file_store_stored_bytes_are_the_snapshot_plus_journal_sizes() {
    let (dir, store) = temp_store();
    let root = dir.path().join("sessions");
    let plain = SessionSnapshot::builder(sid("only-base"), MODEL)
        .transcript(vec![Message::user("hello")])
        .build()
        .expect("build");
    store.save(&plain).expect("save");
    let base = len_or_zero(&root.join("only-base.json"));
    assert!(base > 0);
    assert_eq!(len_or_zero(&root.join("only-base.journal")), 0);
    assert_eq!(store.stored_bytes(plain.id()).expect("bytes"), Some(base));

    let journaled = session_with_journal(&store, "with-journal");
    let (on_disk, _) = session_disk_bytes(&root, journaled.id());
    let journal = len_or_zero(&root.join("with-journal.journal"));
    assert!(journal > 0);
    assert_eq!(
        on_disk,
        len_or_zero(&root.join("with-journal.json")) + journal
    );
    assert_eq!(
        store.stored_bytes(journaled.id()).expect("bytes"),
        Some(on_disk)
    );
    // The summary and the archive marker are not counted.
    store.set_archived(journaled.id(), true).expect("archive");
    store.list().expect("list (writes summaries)");
    assert_eq!(
        store.stored_bytes(journaled.id()).expect("bytes"),
        Some(on_disk)
    );
    // Prune reports the same sizes.
    let report = store
        .prune(&PrunePolicy::new().max_count(0).dry_run(true))
        .expect("dry run");
    let reported: HashMap<&str, u64> = report
        .pruned
        .iter()
        .map(|p| (p.summary.id.as_str(), p.bytes))
        .collect();
    assert_eq!(
        reported,
        HashMap::from([("only-base", base), ("with-journal", on_disk)])
    );

    store.delete(plain.id()).expect("delete");
    assert!(store
        .stored_bytes(plain.id())
        .expect_err("deleted")
        .is_not_found());
}

// ---------------------------------------------------------------------------------------
// Prune racing saves.
// ---------------------------------------------------------------------------------------

/// What a writer saw of one session: the revision and message count of each save that
/// returned `Ok`, in order, and whether archiving it returned `Ok`. The writer stops on
/// the first sign that the session was pruned (a load that finds nothing, a save that
/// finds nothing stored, an archive that finds nothing).
#[derive(Debug)]
struct Written {
    id: String,
    saves: Vec<(u64, usize)>,
    archived: bool,
}

/// How many sessions each writer creates, and how many times it saves each.
const SESSIONS: usize = 12;
const SAVES: usize = 6;
/// The session at which a writer tells the pruner to stop (after its current round), so
/// the sessions after it survive and the end state has both pruned and kept sessions.
const STOP_PRUNING_AT: usize = SESSIONS - 4;

/// Creates sessions `<prefix>-0`, `<prefix>-1`, ... one after the other, each saved up to
/// [`SAVES`] times (load, append, save), and archives every third one along the way.
/// Calls `stop_pruning` when it starts session [`STOP_PRUNING_AT`]. Only this writer
/// saves these ids and it never creates one twice, so a load shows exactly its last
/// successful save, or nothing once a prune deleted the session.
fn write_sessions(store: &FileSessionStore, prefix: &str, stop_pruning: &dyn Fn()) -> Vec<Written> {
    let mut log = Vec::new();
    for k in 0..SESSIONS {
        if k == STOP_PRUNING_AT {
            // On a loaded machine the pruner may not have had a round yet: wait (a few
            // seconds at most) until it deleted one of this writer's sessions, so the end
            // state has pruned sessions as well as the kept ones after this point.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline
                && (0..k).all(|j| store.load(&sid(&format!("{prefix}-{j}"))).is_ok())
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop_pruning();
        }
        let name = format!("{prefix}-{k}");
        let id = sid(&name);
        let first = SessionSnapshot::builder(id.clone(), MODEL)
            .transcript(vec![Message::user("start")])
            .build()
            .expect("build");
        let revision = store.save(&first).expect("the first save of a new id");
        let mut done = vec![(revision.as_u64(), 1)];
        let mut archived = false;
        while done.len() < SAVES {
            let current = match store.load(&id) {
                Ok(current) => current,
                Err(e) if e.is_not_found() => break,
                Err(e) => panic!("{name}: load failed while a prune ran: {e:?}"),
            };
            let (last_revision, last_len) = *done.last().expect("one save");
            assert_eq!(
                (current.revision().as_u64(), current.transcript().len()),
                (last_revision, last_len),
                "{name}: a load must show the last successful save"
            );
            if done.len() == 2 && k % 3 == 0 {
                match store.set_archived(&id, true) {
                    Ok(()) => archived = true,
                    Err(e) if e.is_not_found() => break,
                    Err(e) => panic!("{name}: archive failed: {e:?}"),
                }
            }
            let next = current
                .with_appended(
                    vec![
                        Message::user(format!("step {}", done.len())),
                        Message::assistant(vec![ContentBlock::text("ok")]),
                    ],
                    Vec::new(),
                    Utc::now(),
                )
                .expect("append");
            let len = next.transcript().len();
            match store.save(&next) {
                Ok(revision) => {
                    assert_eq!(revision.as_u64(), last_revision + 1);
                    done.push((revision.as_u64(), len));
                }
                // Pruned since the load: nothing is stored any more.
                Err(Error::Conflict { found: None, .. }) => break,
                Err(e) => panic!("{name}: save failed while a prune ran: {e:?}"),
            }
        }
        log.push(Written {
            id: name,
            saves: done,
            archived,
        });
    }
    log
}

/// What the pruner did: every session it reports deleted, with the revision and archive
/// state it deleted.
#[derive(Debug, Default)]
struct Pruning {
    rounds: usize,
    deleted: Vec<(String, u64, bool)>,
    skipped: usize,
}

/// Prunes `store` with policies that delete everything, round after round, until
/// `finished` says the writers are done.
fn prune_until(store: &FileSessionStore, mut finished: impl FnMut() -> bool) -> Pruning {
    let mut pruning = Pruning::default();
    while !finished() {
        let policy = match pruning.rounds % 4 {
            0 => PrunePolicy::new().max_count(0),
            1 => PrunePolicy::new().max_age(Duration::ZERO),
            2 => PrunePolicy::new().max_total_bytes(0),
            _ => PrunePolicy::new().max_count(0).archived_only(),
        };
        let report = store.prune(&policy).expect("prune");
        assert!(
            report.unreadable.is_empty(),
            "a session was seen half-written or half-deleted: {:?}",
            report.unreadable
        );
        for e in &report.skipped {
            // Saved, archived or deleted by a writer since the listing; nothing else.
            assert!(
                matches!(e, Error::Changed { .. }) || e.is_not_found(),
                "a prune failed to delete: {e:?}"
            );
        }
        pruning.skipped += report.skipped.len();
        pruning.deleted.extend(report.pruned.iter().map(|p| {
            (
                p.summary.id.to_string(),
                p.summary.revision.as_u64(),
                p.summary.archived,
            )
        }));
        pruning.rounds += 1;
    }
    pruning
}

/// Checks the end state of a prune-versus-save race: each session is either wholly gone
/// (deleted once, at the revision of its last successful save and in its last archive
/// state, with no file left) or stored exactly as last saved and archived; and nothing
/// else is in the directory.
///
/// A writer archives a session at most once and never restores it; an archive that
/// returned `Ok` means the session was stored then, so a prune that deleted it afterwards
/// must have listed it archived: one that listed it active before the archive and deleted
/// it after would have deleted a session changed since it was listed.
fn check_race_outcome(root: &Path, written: &[Written], pruning: &Pruning) -> (usize, usize) {
    let store = FileSessionStore::open(root).expect("reopen");
    let mut deleted: HashMap<&str, Vec<(u64, bool)>> = HashMap::new();
    for (name, revision, archived) in &pruning.deleted {
        deleted
            .entry(name.as_str())
            .or_default()
            .push((*revision, *archived));
    }
    let known: std::collections::HashSet<&str> = written.iter().map(|w| w.id.as_str()).collect();
    for name in deleted.keys() {
        assert!(known.contains(name), "pruned {name}, which nobody wrote");
    }
    let (mut gone, mut kept) = (0, 0);
    for w in written {
        let (last_revision, last_len) = *w.saves.last().expect("the first save");
        let id = sid(&w.id);
        if let Some(revisions) = deleted.get(w.id.as_str()) {
            gone += 1;
            assert_eq!(
                revisions.len(),
                1,
                "{}: deleted more than once: {revisions:?}",
                w.id
            );
            assert_eq!(
                revisions[0].0, last_revision,
                "{}: a prune deleted revision {} although a save had returned revision {} (saves {:?})",
                w.id, revisions[0].0, last_revision, w.saves
            );
            assert_eq!(
                revisions[0].1, w.archived,
                "{}: a prune deleted it as listed archived={}, although archiving it returned {}",
                w.id, revisions[0].1, w.archived
            );
            assert!(
                store.load(&id).expect_err("pruned").is_not_found(),
                "{}: reported pruned but still loads",
                w.id
            );
            assert_eq!(
                files_of(root, &w.id),
                Vec::<String>::new(),
                "{}: files left behind by a prune",
                w.id
            );
        } else {
            kept += 1;
            let stored = store
                .load(&id)
                .unwrap_or_else(|e| panic!("{}: not pruned, yet it does not load: {e:?}", w.id));
            assert_eq!(
                (stored.revision().as_u64(), stored.transcript().len()),
                (last_revision, last_len),
                "{}: not stored as last saved",
                w.id
            );
            let summary = store
                .list_scoped(ListScope::All)
                .expect("list")
                .sessions
                .into_iter()
                .find(|s| s.id == id)
                .unwrap_or_else(|| panic!("{} is not listed", w.id));
            assert_eq!(summary.revision.as_u64(), last_revision);
            assert_eq!(summary.archived, w.archived, "{}: archive state", w.id);
        }
    }
    // Nothing but the lock and the surviving sessions' files.
    for name in dir_names(root) {
        if name == ".lock" {
            continue;
        }
        let stem = name.split('.').next().unwrap_or_default();
        assert!(
            !name.starts_with('.') && known.contains(stem) && !deleted.contains_key(stem),
            "unexpected file left in the store: {name}"
        );
    }
    (gone, kept)
}

#[test]
fn concurrent_prune_never_deletes_a_newer_save_nor_leaves_half_a_session() {
    const WRITERS: usize = 3;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("sessions");
    let pruner = FileSessionStore::open(&root).expect("open");
    let stopped = AtomicUsize::new(0);
    let start = Barrier::new(WRITERS + 1);
    let (written, pruning) = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (root, stopped, start) = (&root, &stopped, &start);
                scope.spawn(move || {
                    // Each writer has its own store instance, as separate processes would.
                    let store = FileSessionStore::open(root).expect("open");
                    start.wait();
                    write_sessions(&store, &format!("w{w}"), &|| {
                        stopped.fetch_add(1, Ordering::SeqCst);
                    })
                })
            })
            .collect();
        start.wait();
        let pruning = prune_until(&pruner, || stopped.load(Ordering::SeqCst) == WRITERS);
        let written: Vec<Written> = writers
            .into_iter()
            .flat_map(|h| h.join().expect("a writer panicked"))
            .collect();
        (written, pruning)
    });
    let (gone, kept) = check_race_outcome(&root, &written, &pruning);
    eprintln!(
        "prune vs save (threads): {} prune rounds, {gone} sessions pruned, {kept} kept, {} deletes skipped as changed or gone meanwhile",
        pruning.rounds, pruning.skipped
    );
    assert_eq!(gone + kept, WRITERS * SESSIONS);
    assert!(gone > 0 && kept > 0, "the race ended with one outcome only");
}

const CHILD_STORE_VAR: &str = "AGENT_SESSION_LIFECYCLE_CHILD_STORE";
const CHILD_PREFIX_VAR: &str = "AGENT_SESSION_LIFECYCLE_CHILD_PREFIX";
const CHILD_PROGRESS_VAR: &str = "AGENT_SESSION_LIFECYCLE_CHILD_PROGRESS";
const BEGIN: &str = "=====BEGIN WRITER LOG=====";
const END: &str = "=====END WRITER LOG=====";

#[test]
fn prune_racing_saves_of_other_processes_never_deletes_a_newer_save() {
    const CHILDREN: usize = 2;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("sessions");
    let progress = dir.path().join("progress");
    std::fs::create_dir(&progress).expect("progress dir");
    let pruner = FileSessionStore::open(&root).expect("open");
    let mut children: Vec<_> = (0..CHILDREN)
        .map(|c| {
            Command::new(std::env::current_exe().expect("the test binary"))
                .args([
                    "--exact",
                    "child_writes_sessions",
                    "--nocapture",
                    "--include-ignored",
                    "--test-threads=1",
                ])
                .env(CHILD_STORE_VAR, &root)
                .env(CHILD_PREFIX_VAR, format!("p{c}"))
                .env(CHILD_PROGRESS_VAR, &progress)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start a child")
        })
        .collect();
    // Until every child asked to stop (or every child exited, if one failed early).
    let pruning = prune_until(&pruner, || {
        let asked = std::fs::read_dir(&progress).expect("progress").count() == CHILDREN;
        asked
            || children
                .iter_mut()
                .all(|c| c.try_wait().expect("poll a child").is_some())
    });
    let mut written = Vec::new();
    for child in children {
        let output = child.wait_with_output().expect("child output");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "a child failed:\n{stdout}");
        let Some((log, _)) = stdout
            .split_once(BEGIN)
            .and_then(|(_, rest)| rest.split_once(END))
        else {
            panic!("no log in the child's output:\n{stdout}");
        };
        let log = log.trim();
        let log: Value = serde_json::from_str(log).expect("the child's log is JSON");
        for entry in log.as_array().expect("a list") {
            written.push(Written {
                id: entry["id"].as_str().expect("id").to_owned(),
                saves: entry["saves"]
                    .as_array()
                    .expect("saves")
                    .iter()
                    .map(|s| {
                        let n = |i: usize| s[i].as_u64().expect("a number");
                        (n(0), usize::try_from(n(1)).expect("a count"))
                    })
                    .collect(),
                archived: entry["archived"].as_bool().expect("archived"),
            });
        }
    }
    let (gone, kept) = check_race_outcome(&root, &written, &pruning);
    eprintln!(
        "prune vs save (processes): {} prune rounds, {gone} sessions pruned, {kept} kept, {} deletes skipped as changed or gone meanwhile",
        pruning.rounds, pruning.skipped
    );
    assert_eq!(gone + kept, CHILDREN * SESSIONS);
    assert!(gone > 0 && kept > 0, "the race ended with one outcome only");
}

#[test]
#[ignore = "the child half of prune_racing_saves_of_other_processes_never_deletes_a_newer_save; a no-op when run directly"]
fn child_writes_sessions() {
    let (Ok(root), Ok(prefix), Ok(progress)) = (
        std::env::var(CHILD_STORE_VAR),
        std::env::var(CHILD_PREFIX_VAR),
        std::env::var(CHILD_PROGRESS_VAR),
    ) else {
        return;
    };
    let store = FileSessionStore::open(&root).expect("open");
    let stop = || std::fs::write(Path::new(&progress).join(&prefix), b"").expect("progress");
    let log: Vec<Value> = write_sessions(&store, &prefix, &stop)
        .into_iter()
        .map(|w| json!({"id": w.id, "saves": w.saves, "archived": w.archived}))
        .collect();
    println!("{BEGIN}\n{}\n{END}", Value::Array(log));
}

// ---------------------------------------------------------------------------------------
// Hostile bundles.
// ---------------------------------------------------------------------------------------

/// A valid bundle of three sessions (the second with a tool call), and the sessions.
fn three_session_bundle() -> (Vec<u8>, Vec<SessionSnapshot>) {
    let store = MemorySessionStore::new();
    let sessions = [
        SessionSnapshot::builder(sid("hostile-a"), MODEL)
            .transcript(vec![Message::user("first session")])
            .build(),
        SessionSnapshot::builder(sid("hostile-b"), MODEL)
            .system_prompt("Use the calculator.")
            .metadata_entry("ratio", json!(0.1))
            .transcript(vec![
                Message::user("What is 2+2?"),
                Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                    "c1",
                    "calculator",
                    json!({"expression": "2+2"}),
                ))]),
                Message::tool_result(ToolResult::new("c1", "4")),
                Message::assistant(vec![ContentBlock::text("4")]),
            ])
            .usage(vec![Usage::new(MODEL).with_tokens(12, 3)])
            .build(),
        SessionSnapshot::builder(sid("hostile-c"), MODEL)
            .transcript(vec![
                Message::user("third"),
                Message::assistant(vec![ContentBlock::text("ok")]),
            ])
            .build(),
    ];
    let mut ids = Vec::new();
    for snapshot in sessions {
        let snapshot = snapshot.expect("build");
        store.save(&snapshot).expect("save");
        ids.push(snapshot.id().clone());
    }
    let bundle = store.export(&ids).expect("export");
    let bytes = bundle.to_json().expect("encode");
    (bytes, bundle.sessions().to_vec())
}

/// Asserts `bytes` is refused as a bundle, as a whole, blaming `entry`, and returns the
/// error: decoding it and importing it into a store (the way a user would) fails, and the
/// store stays empty.
fn assert_refused(case: &str, bytes: &[u8], entry: Option<usize>) -> Error {
    let target = MemorySessionStore::new();
    let err = Bundle::from_json(bytes)
        .and_then(|bundle| target.import(&bundle, &ImportIds::Keep))
        .expect_err(case);
    assert!(
        target
            .list_scoped(ListScope::All)
            .expect("list")
            .sessions
            .is_empty(),
        "{case}: something was imported"
    );
    match &err {
        Error::InvalidBundle {
            entry: blamed,
            problem,
            ..
        } => {
            assert_eq!(*blamed, entry, "{case}: {problem}");
        }
        other => panic!("{case}: expected Error::InvalidBundle, got {other:?}"),
    }
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{case}");
    assert!(
        err.to_string().contains("refused as a whole"),
        "{case}: {err}"
    );
    err
}

/// Asserts the session's own validation refused it: the error names the entry and has
/// the snapshot's error as its source. Returns the refusal.
fn assert_refused_by_validation(case: &str, bytes: &[u8], entry: usize) -> Error {
    let err = assert_refused(case, bytes, Some(entry));
    let _ = session_error(case, &err);
    err
}

/// The snapshot's own error behind a bundle's refusal.
fn session_error<'a>(case: &str, err: &'a Error) -> &'a Error {
    match err {
        Error::InvalidBundle {
            source: Some(source),
            ..
        } => source
            .downcast_ref::<Error>()
            .unwrap_or_else(|| panic!("{case}: the source is not an agent_session::Error")),
        other => panic!("{case}: refused by its checksum, not by validation: {other}"),
    }
}

#[test]
fn hostile_session_lines_are_refused_as_a_whole() {
    let (valid, sessions) = three_session_bundle();
    // The valid bundle decodes, so every refusal below is the edit's doing.
    let decoded = Bundle::from_json(&valid).expect("the valid bundle decodes");
    assert_eq!(decoded.sessions(), sessions.as_slice());
    assert_eq!(lines(&valid).len(), 4);
    assert_eq!(
        Bundle::from_json(&reseal(&valid)).expect("resealed"),
        decoded,
        "resealing an intact bundle changes nothing"
    );

    // A changed byte making a snapshot line invalid JSON: the checksum catches it, and a
    // forger who fixes the checksum is stopped by the decoder.
    let broken = with_line(&valid, 2, |line| {
        let colon = line.iter().position(|&b| b == b':').expect("a colon");
        line[colon] = b',';
    });
    assert_refused("a snapshot line that is not JSON", &broken, Some(1));
    let case = "a snapshot line that is not JSON, checksum fixed";
    let err = assert_refused_by_validation(case, &reseal(&broken), 1);
    let source = session_error(case, &err);
    assert!(matches!(source, Error::Malformed { .. }), "{source:?}");
    // A changed digit that still decodes is caught by the checksum alone.
    let edited = with_line(&valid, 2, |line| {
        let text = String::from_utf8(line.clone()).expect("UTF-8");
        *line = text.replacen("2+2", "2+3", 1).into_bytes();
    });
    assert!(edited != valid, "the digit was changed");
    assert!(
        Bundle::from_json(&reseal(&edited)).is_ok(),
        "still a valid session"
    );
    let err = assert_refused("a changed digit", &edited, Some(1));
    assert!(std::error::Error::source(&err).is_none());
    assert!(err.to_string().contains("checksum"), "{err}");
    // A header checksum that is not one.
    let bad_crc = with_json_line(&valid, 0, |header| header["crc32"][2] = json!("not-hex"));
    assert_refused("a malformed checksum", &bad_crc, Some(2));

    // A snapshot with a dangling tool call: its result message (and record) removed.
    let dangling = reseal(&with_json_line(&valid, 2, |snapshot| {
        let transcript = snapshot["transcript"].as_array_mut().expect("transcript");
        transcript.remove(2);
        snapshot["tool_calls"] = json!([]);
    }));
    assert_refused_by_validation("a dangling tool call", &dangling, 1);
    // Or with the record kept, pointing at a message that is not a result.
    let dangling = reseal(&with_json_line(&valid, 2, |snapshot| {
        snapshot["transcript"]
            .as_array_mut()
            .expect("transcript")
            .remove(2);
    }));
    assert_refused_by_validation("a record of a result that is gone", &dangling, 1);

    // A snapshot of a schema this release does not know.
    let newer = u64::from(agent_session::SCHEMA_VERSION) + 1;
    let unknown = reseal(&with_json_line(&valid, 2, |snapshot| {
        snapshot["schema_version"] = json!(newer);
    }));
    let case = "a snapshot of a later schema version";
    let err = assert_refused_by_validation(case, &unknown, 1);
    let source = session_error(case, &err);
    assert!(
        matches!(source, Error::UnsupportedSchemaVersion { found, .. } if *found == newer),
        "{source:?}"
    );

    // Duplicate ids: the same line twice, or another session renamed.
    let mut twice = lines(&valid);
    twice[3] = twice[2].clone();
    assert_refused("the same session twice", &reseal(&join(&twice)), None);
    let renamed = reseal(&with_json_line(&valid, 3, |snapshot| {
        snapshot["id"] = json!("hostile-a");
    }));
    assert_refused("two sessions with one id", &renamed, None);
}

#[test]
fn bundles_with_a_hostile_header_or_framing_are_refused_as_a_whole() {
    let (valid, _) = three_session_bundle();
    assert!(Bundle::from_json(&valid).is_ok());

    // The header's count does not match the lines.
    let too_high = with_json_line(&valid, 0, |header| header["sessions"] = json!(4));
    assert_refused("a header count too high", &too_high, None);
    let too_low = with_json_line(&valid, 0, |header| header["sessions"] = json!(2));
    assert_refused("a header count too low", &too_low, None);
    for removed in [1, 3] {
        let mut cut = lines(&valid);
        cut.remove(removed);
        assert_refused("a session line removed", &join(&cut), None);
        assert_refused(
            "a session line removed, checksums fixed",
            &reseal(&join(&cut)),
            None,
        );
    }
    let mut cut = valid.clone();
    cut.truncate(valid.len() - 10);
    assert_refused("the file cut short mid-line", &cut, Some(2));

    // Header problems.
    let unknown = with_json_line(&valid, 0, |header| header["note"] = json!("hi"));
    assert_refused("a header with an unknown field", &unknown, None);
    let v2 = with_json_line(&valid, 0, |header| {
        header["agent_session_bundle"] = json!(2);
    });
    let err = assert_refused("bundle format version 2", &v2, None);
    assert!(err.to_string().contains("version 2"), "{err}");
    let v0 = with_json_line(&valid, 0, |header| {
        header["agent_session_bundle"] = json!(0);
    });
    assert_refused("bundle format version 0", &v0, None);
    for field in ["exported_at", "sessions", "crc32"] {
        let missing = with_json_line(&valid, 0, |header| {
            header.as_object_mut().expect("object").remove(field);
        });
        assert_refused(&format!("a header without {field}"), &missing, None);
    }
    let negative = with_json_line(&valid, 0, |header| header["sessions"] = json!(-1));
    assert_refused("a negative count", &negative, None);
    let text = with_json_line(&valid, 0, |header| header["sessions"] = json!("3"));
    assert_refused("a count that is a string", &text, None);

    // Trailing garbage.
    for (case, tail) in [
        ("a trailing garbage line", &b"garbage\n"[..]),
        ("a trailing object without a newline", b"{}"),
        ("a trailing empty line", b"\n"),
    ] {
        let mut garbage = valid.clone();
        garbage.extend_from_slice(tail);
        assert_refused(case, &garbage, None);
        assert_refused(case, &reseal(&garbage), None);
    }

    // Not a bundle at all.
    assert_refused("nothing", b"", None);
    assert_refused("a JSON array", b"[1,2,3]\n", None);
    assert_refused("text", b"hello\nworld\n", None);
}

#[test]
fn bundle_line_over_the_load_limit_is_refused() {
    let (valid, _) = three_session_bundle();
    let limit = usize::try_from(DEFAULT_MAX_SNAPSHOT_BYTES).expect("fits");
    // Zeroed memory comes from fresh pages: this costs address space, not RAM.
    let line = vec![0u8; limit + 1];
    let crc = line_crc(&line);
    let header = with_json_line(&valid, 0, |header| {
        header["sessions"] = json!(1);
        header["crc32"] = json!([crc]);
    });
    let header = &lines(&header)[0];
    let mut bytes = vec![0u8; header.len() + 1 + limit + 1];
    bytes[..header.len()].copy_from_slice(header);
    bytes[header.len()] = b'\n';
    let err = assert_refused("a line over the limit", &bytes, Some(0));
    assert!(
        std::error::Error::source(&err).is_none(),
        "not parsed: {err:?}"
    );
    assert!(err.to_string().contains("limit"), "{err}");
    // A bare snapshot file over the limit too.
    drop(bytes);
    let err = assert_refused("a bare snapshot over the limit", &line, None);
    assert!(
        std::error::Error::source(&err).is_none(),
        "not parsed: {err:?}"
    );
    assert!(err.to_string().contains("limit"), "{err}");
}

#[test]
fn bare_snapshot_files_are_bundles_of_one() {
    let (dir, store) = temp_store();
    let root = dir.path().join("sessions");
    let (_, sessions) = three_session_bundle();
    let original = sessions[1].clone().with_revision(Revision::NEW);
    store.save(&original).expect("save");
    // The file as the store wrote it.
    let file = std::fs::read(root.join("hostile-b.json")).expect("read the snapshot file");
    let bundle = Bundle::from_json(&file).expect("a bare snapshot is a bundle of one");
    assert_eq!(bundle.sessions().len(), 1);
    assert_eq!(
        bundle.sessions()[0],
        store.load(original.id()).expect("load")
    );
    let target = MemorySessionStore::new();
    let imported = target.import(&bundle, &ImportIds::Keep).expect("import");
    assert_eq!(imported.len(), 1);
    assert_eq!(
        target.load(original.id()).expect("load"),
        original.with_revision(Revision::from_u64(1))
    );

    // Its compact form too, and a damaged one is refused naming no entry.
    let compact = sessions[0].to_json().expect("encode");
    assert_eq!(
        Bundle::from_json(&compact).expect("compact").sessions(),
        &sessions[..1]
    );
    let mut damaged = file.clone();
    damaged.truncate(file.len() / 2);
    assert_refused("half a snapshot file", &damaged, None);
}

#[test]
fn older_schema_snapshots_in_a_bundle_are_upgraded_on_import() {
    let fixture = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1/tool_call_errors.json"),
    )
    .expect("the v1 fixture");
    let value: Value = serde_json::from_slice(&fixture).expect("JSON");
    assert_eq!(value["schema_version"], json!(1));
    let line = serde_json::to_vec(&value).expect("compact");
    let header = json!({
        "agent_session_bundle": 1,
        "exported_at": "2026-01-02T03:04:05Z",
        "sessions": 1,
        "crc32": [line_crc(&line)],
    });
    let bytes = join(&[serde_json::to_vec(&header).expect("header"), line]);
    let bundle = Bundle::from_json(&bytes).expect("a v1 session in a bundle");
    let bare = Bundle::from_json(&fixture).expect("a bare v1 snapshot file");
    assert_eq!(bundle.sessions(), bare.sessions());
    let target = MemorySessionStore::new();
    let imported = target.import(&bundle, &ImportIds::Keep).expect("import");
    let stored = target.load(&imported[0].id).expect("load");
    assert_eq!(
        stored,
        bundle.sessions()[0]
            .clone()
            .with_revision(Revision::from_u64(1))
    );
    assert_eq!(stored.id().as_str(), "golden-tool-call-errors");
}

/// Imports `bundle` into `store`, which holds one session under `hostile-c` (an id of
/// the unflipped bundle), and checks it is all or nothing.
fn check_all_or_nothing(store: &dyn SessionStore, bundle: &Bundle) {
    let occupant = SessionSnapshot::builder(sid("hostile-c"), "occupant")
        .build()
        .expect("build");
    store.save(&occupant).expect("save");
    let ids = |store: &dyn SessionStore| -> Vec<SessionId> {
        let mut ids: Vec<SessionId> = store
            .list_scoped(ListScope::All)
            .expect("list")
            .sessions
            .into_iter()
            .map(|s| s.id)
            .collect();
        ids.sort();
        ids
    };
    let before = ids(store);
    match store.import(bundle, &ImportIds::Keep) {
        Ok(imported) => {
            assert_eq!(imported.len(), bundle.sessions().len());
            for (entry, snapshot) in imported.iter().zip(bundle.sessions()) {
                assert_eq!(
                    store.load(&entry.id).expect("imported"),
                    snapshot.clone().with_revision(Revision::from_u64(1))
                );
            }
            assert_eq!(ids(store).len(), before.len() + imported.len());
        }
        Err(e) => {
            assert_eq!(
                ids(store),
                before,
                "a failed import left sessions behind: {e:?}"
            );
            assert_eq!(
                store.load(occupant.id()).expect("occupant").transcript(),
                occupant.transcript()
            );
        }
    }
}

#[test]
fn flipped_bytes_are_refused_or_decode_to_valid_sessions_imported_all_or_nothing() {
    let (valid, _) = three_session_bundle();
    let len = valid.len();
    // Most flips land in the sessions' message text, where a changed letter still
    // decodes; the others anywhere.
    let text: Vec<usize> = [
        "first session",
        "What is 2+2?",
        "Use the calculator.",
        "third",
    ]
    .iter()
    .flat_map(|needle| {
        let at = valid
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .expect("the text is in the bundle");
        at..at + needle.len()
    })
    .collect();
    let position = prop_oneof![3 => prop::sample::select(text), 1 => 0..len];
    // Half the cases fix the header's checksums after flipping, as a forger would, so
    // the flips reach the sessions' own validation.
    // Masks of one low bit keep most bytes printable ASCII (a letter of a message
    // becomes another letter), so some flipped bundles still decode.
    let mask = prop_oneof![1u8..=255, (0u32..6).prop_map(|bit| 1u8 << bit)];
    let flips = (prop::collection::vec((position, mask), 1..4), any::<bool>());
    let accepted = AtomicUsize::new(0);
    let config = Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    };
    // A fixed seed: the count of decoded bundles asserted below does not depend on luck.
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    TestRunner::new_with_rng(config, rng)
        .run(&flips, |(flips, resealed)| {
            let mut bytes = valid.clone();
            for (at, mask) in flips {
                bytes[at] ^= mask;
            }
            if resealed {
                bytes = reseal(&bytes);
            }
            match Bundle::from_json(&bytes) {
                Err(e) => {
                    prop_assert!(matches!(e, Error::InvalidBundle { .. }), "{e:?}");
                }
                Ok(bundle) => {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    for snapshot in bundle.sessions() {
                        let again =
                            SessionSnapshot::from_json(&snapshot.to_json().expect("encode"))
                                .expect("an accepted session validates again");
                        prop_assert_eq!(&again, snapshot);
                    }
                    check_all_or_nothing(&MemorySessionStore::new(), &bundle);
                    let dir = tempfile::tempdir().expect("temp dir");
                    let files = FileSessionStore::builder()
                        .durability(Durability::Buffered)
                        .open(dir.path().join("sessions"))
                        .expect("open");
                    check_all_or_nothing(&files, &bundle);
                }
            }
            Ok(())
        })
        .expect("no flip is half-accepted");
    let accepted = accepted.load(Ordering::Relaxed);
    eprintln!("flipped bundles: {accepted} of 64 still decoded");
    assert!(
        accepted > 0,
        "no flipped bundle decoded: the all-or-nothing import was never exercised"
    );
}

// ---------------------------------------------------------------------------------------
// What a fork costs on disk.
// ---------------------------------------------------------------------------------------

/// A transcript of `turns` turns of four messages: a question, a tool call, its result
/// and an answer.
fn long_transcript(turns: usize) -> Vec<Message> {
    let mut transcript = Vec::with_capacity(turns * 4);
    for t in 0..turns {
        transcript.extend([
            Message::user(format!(
                "Question {t}: what is {t} times {}? Please show your work.",
                t + 1
            )),
            Message::assistant(vec![
                ContentBlock::text("Let me calculate that."),
                ContentBlock::tool_call(ToolCall::new(
                    format!("call_{t}"),
                    "calculator",
                    json!({"expression": format!("{t}*{}", t + 1)}),
                )),
            ]),
            Message::tool_result(ToolResult::new(
                format!("call_{t}"),
                (t * (t + 1)).to_string(),
            )),
            Message::assistant(vec![ContentBlock::text(format!(
                "{t} times {} is {}.",
                t + 1,
                t * (t + 1)
            ))]),
        ]);
    }
    transcript
}

#[test]
fn fork_at_the_end_copies_the_parent_history_and_costs_one_copy_on_disk() {
    let (dir, store) = temp_store();
    let root = dir.path().join("sessions");
    let transcript = long_transcript(250);
    assert_eq!(transcript.len(), 1_000);

    // Without usage (the fork then holds exactly the parent's history), with usage (which
    // a fork does not take), written in one save (a base snapshot only) and grown by
    // appends (base plus journal).
    let plain = SessionSnapshot::builder(sid("parent-plain"), MODEL)
        .transcript(transcript.clone())
        .build()
        .expect("build");
    store.save(&plain).expect("save");
    let whole = SessionSnapshot::builder(sid("parent-whole"), MODEL)
        .transcript(transcript.clone())
        .usage(vec![Usage::new(MODEL).with_tokens(1_000, 50); 500])
        .build()
        .expect("build");
    store.save(&whole).expect("save");
    let grown = SessionSnapshot::builder(sid("parent-grown"), MODEL)
        .build()
        .expect("build");
    store.save(&grown).expect("save");
    for chunk in transcript.chunks(40) {
        let current = store.load(grown.id()).expect("load");
        let next = current
            .with_appended(
                chunk.to_vec(),
                vec![Usage::new(MODEL).with_tokens(1_000, 50); 20],
                Utc::now(),
            )
            .expect("append");
        store.save(&next).expect("append save");
    }

    for parent in [
        sid("parent-plain"),
        sid("parent-whole"),
        sid("parent-grown"),
    ] {
        let fork_id = sid(&format!("{parent}-fork"));
        let fork = store
            .fork(&parent, ForkAt::End, fork_id.clone())
            .expect("fork");
        assert_eq!(fork.transcript().len(), 1_000);
        let (parent_bytes, parent_blocks) = session_disk_bytes(&root, &parent);
        let (fork_bytes, fork_blocks) = session_disk_bytes(&root, &fork_id);
        assert_eq!(
            store.stored_bytes(&parent).expect("bytes"),
            Some(parent_bytes)
        );
        assert_eq!(
            store.stored_bytes(&fork_id).expect("bytes"),
            Some(fork_bytes)
        );
        #[allow(clippy::cast_precision_loss)] // sizes far below 2^52
        let ratio = fork_bytes as f64 / parent_bytes as f64;
        eprintln!(
            "fork storage, {parent} (1,000 messages): parent {parent_bytes} bytes ({parent_blocks} allocated), fork at the end {fork_bytes} bytes ({fork_blocks} allocated), fork/parent = {ratio:.3}"
        );
        assert!(
            fork_bytes * 10 <= parent_bytes * 12,
            "a fork at the end should cost about one copy of the parent's history: {fork_bytes} > 1.2 x {parent_bytes}"
        );
        // It is a copy: the fork does not depend on the parent's files.
        store.delete(&parent).expect("delete the parent");
        assert_eq!(store.load(&fork_id).expect("the fork stays"), fork);
    }
}

// ---------------------------------------------------------------------------------------
// The Harness lifecycle calls.
// ---------------------------------------------------------------------------------------

/// A harness over a fresh file store, with the calculator as its tools; counts the
/// engines its factory builds.
fn harness() -> (
    tempfile::TempDir,
    Harness<impl Fn() -> ToolThenAnswerEngine>,
    Arc<AtomicUsize>,
) {
    let (dir, store) = temp_store();
    let engines = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&engines);
    let factory = move || {
        counter.fetch_add(1, Ordering::SeqCst);
        ToolThenAnswerEngine::new(RequestLog::default())
    };
    let harness = Harness::builder(store, factory)
        .tools(Calculator::shared())
        .build();
    (dir, harness, engines)
}

#[tokio::test]
async fn harness_fork_session_resumes_a_saved_fork_with_a_fresh_engine() {
    let (_dir, harness, engines) = harness();
    let mut parent = harness
        .new_session(SessionOptions::new(MODEL).system_prompt("Be exact."))
        .expect("new session");
    parent.send("What is 2*3?").await.expect("turn 1");
    parent.send("And 4*5?").await.expect("turn 2");
    harness.save_session(&mut parent).expect("save");
    let parent_stored = harness.store().load(parent.id()).expect("load");
    let engines_before = engines.load(Ordering::SeqCst);

    let mut fork = harness
        .fork_session(parent.id(), ForkAt::Turns(1))
        .expect("fork");
    assert_eq!(
        engines.load(Ordering::SeqCst),
        engines_before + 1,
        "a fresh engine"
    );
    assert_ne!(fork.id(), parent.id());
    let lineage = fork.lineage().expect("lineage").clone();
    assert_eq!(&lineage.parent, parent.id());
    assert_eq!(lineage.parent_revision, parent_stored.revision());
    let second_prompt = parent
        .transcript()
        .iter()
        .skip(1)
        .position(|m| m.role == agent_session::Role::User && m.tool_results().next().is_none())
        .map(|i| i + 1)
        .expect("a second prompt");
    assert_eq!(lineage.fork_point, second_prompt);
    assert_eq!(fork.transcript(), &parent.transcript()[..second_prompt]);
    assert!(fork.usage().is_empty());
    assert_eq!(fork.revision(), Revision::from_u64(1), "the fork is saved");
    assert_eq!(fork.options().system_prompt.as_deref(), Some("Be exact."));

    // The fork goes its own way.
    fork.send("What is 7*8?").await.expect("a turn on the fork");
    assert_eq!(
        harness.save_session(&mut fork).expect("save"),
        Revision::from_u64(2)
    );
    let stored = harness.store().load(fork.id()).expect("load the fork");
    assert_eq!(stored.lineage(), Some(&lineage));
    assert!(stored.transcript().len() > second_prompt);
    assert_eq!(
        harness.store().load(parent.id()).expect("parent"),
        parent_stored,
        "the parent is untouched"
    );
    let listed = harness.list_sessions().expect("list");
    assert_eq!(listed.sessions.len(), 2);
    assert!(matches!(
        harness.fork_session(&sid("no-such-session"), ForkAt::End),
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn harness_archive_and_unarchive_session_hide_and_restore_it() {
    let (_dir, harness, _) = harness();
    let mut older = harness
        .new_session(SessionOptions::new(MODEL))
        .expect("new");
    older.send("What is 1*1?").await.expect("turn");
    harness.save_session(&mut older).expect("save");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut newer = harness
        .new_session(SessionOptions::new(MODEL))
        .expect("new");
    newer.send("What is 2*2?").await.expect("turn");
    harness.save_session(&mut newer).expect("save");

    harness.archive_session(newer.id()).expect("archive");
    let listed: Vec<SessionId> = harness
        .list_sessions()
        .expect("list")
        .sessions
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, [older.id().clone()]);
    // resume_latest picks from the listing: the archived one is skipped...
    assert_eq!(
        harness.resume_latest(None).expect("latest").id(),
        older.id()
    );
    // ...but it still resumes by id, and its saves keep it archived.
    let mut resumed = harness.resume_session(newer.id(), None).expect("resume");
    resumed.send("And 3*3?").await.expect("turn");
    harness.save_session(&mut resumed).expect("save");
    let archived = harness
        .store()
        .list_scoped(ListScope::Archived)
        .expect("archived")
        .sessions;
    assert_eq!(archived.len(), 1);
    assert_eq!(&archived[0].id, newer.id());
    assert_eq!(archived[0].revision, Revision::from_u64(2));

    harness.unarchive_session(newer.id()).expect("unarchive");
    assert_eq!(harness.list_sessions().expect("list").sessions.len(), 2);
    assert_eq!(
        harness.resume_latest(None).expect("latest").id(),
        newer.id()
    );
    for result in [
        harness.archive_session(&sid("missing")),
        harness.unarchive_session(&sid("missing")),
    ] {
        assert!(result.expect_err("missing").is_not_found());
    }
}

#[tokio::test]
async fn harness_prune_sessions_applies_the_policy() {
    let (_dir, harness, _) = harness();
    let mut ids = Vec::new();
    for prompt in ["What is 1*2?", "What is 3*4?", "What is 5*6?"] {
        let mut session = harness
            .new_session(SessionOptions::new(MODEL))
            .expect("new");
        session.send(prompt).await.expect("turn");
        harness.save_session(&mut session).expect("save");
        ids.push(session.id().clone());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let policy = PrunePolicy::new().max_count(1);
    let preview = harness
        .prune_sessions(&policy.clone().dry_run(true))
        .expect("dry run");
    assert_eq!(preview.pruned.len(), 2);
    assert_eq!(harness.list_sessions().expect("list").sessions.len(), 3);

    let report = harness.prune_sessions(&policy).expect("prune");
    let pruned: Vec<(SessionId, PruneReason)> = report
        .pruned
        .iter()
        .map(|p| (p.summary.id.clone(), p.reason))
        .collect();
    assert_eq!(
        pruned,
        [
            (ids[0].clone(), PruneReason::Count),
            (ids[1].clone(), PruneReason::Count)
        ]
    );
    assert!(report.bytes() > 0);
    let left: Vec<SessionId> = harness
        .list_sessions()
        .expect("list")
        .sessions
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(left, [ids[2].clone()]);
    assert!(matches!(
        harness.resume_session(&ids[0], None),
        Err(Error::NotFound { .. })
    ));
}
