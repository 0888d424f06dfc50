//! The file store's write lock (`<dir>/.lock`) from outside, as other processes and careless
//! users treat it: held by a process that hangs, deleted while stores have it open (a user
//! cleaning a "stale" lock, a tmp cleaner), and absent on a read-only store.
//!
//! A process holding the lock is played by the test itself: it takes an exclusive `flock`
//! on the store directory and on `.lock`, exactly as a store in another process does
//! ([`hold_lock`]), or on `.lock` alone, as a process of release 0.1 does
//! ([`hold_lock_file`]).
#![cfg(unix)]

mod common;

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_session::{
    Error, ErrorKind, FileSessionStore, Message, SessionId, SessionSnapshot, SessionStore,
};
use common::sid;

/// The store's write lock held the way another process's store holds it: the directory,
/// then `.lock`.
fn hold_lock(dir: &Path) -> (File, File) {
    let directory = File::open(dir).expect("open the store directory");
    directory.try_lock().expect("the directory lock is free");
    (directory, hold_lock_file(dir))
}

/// `<dir>/.lock` alone held, as a process of release 0.1 holds it.
fn hold_lock_file(dir: &Path) -> File {
    let file = File::options()
        .read(true)
        .write(true)
        .open(dir.join(".lock"))
        .expect("open the lock file");
    file.try_lock().expect("the lock file is free");
    file
}

fn snapshot(id: &SessionId, text: &str) -> SessionSnapshot {
    SessionSnapshot::builder(id.clone(), "m")
        .transcript(vec![Message::user(text)])
        .build()
        .expect("a valid snapshot")
}

fn store_with_timeout(dir: &Path, timeout: Duration) -> FileSessionStore {
    FileSessionStore::builder()
        .lock_timeout(timeout)
        .open(dir)
        .expect("open the store")
}

#[test]
fn a_save_waits_for_the_lock_at_most_the_timeout_then_fails_naming_the_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_with_timeout(dir.path(), Duration::from_millis(300));
    let id = sid("held");
    store.save(&snapshot(&id, "before")).expect("first save");
    let before = std::fs::read(store.path_of(&id)).expect("read the snapshot");

    let holder = hold_lock(dir.path());
    let started = Instant::now();
    let loaded = store.load(&id).expect("loads need no lock");
    let err = store
        .save(&snapshot(&id, "after").with_revision(loaded.revision()))
        .expect_err("the lock is held by another process");
    let waited = started.elapsed();
    assert!(matches!(err, Error::Busy { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::Busy);
    let text = err.to_string();
    assert!(text.contains(".lock"), "the error names the lock: {text}");
    assert!(text.contains("retry"), "the error says what to do: {text}");
    // Never a time assertion on a busy machine beyond "it did wait, and it did stop".
    assert!(
        waited >= Duration::from_millis(300),
        "waited only {waited:?}"
    );
    assert_eq!(
        std::fs::read(store.path_of(&id)).expect("read the snapshot"),
        before,
        "a busy save changes nothing"
    );
    for (what, result) in [
        ("delete", store.delete(&id)),
        ("archive", store.set_archived(&id, true)),
    ] {
        assert_eq!(
            result.expect_err(what).kind(),
            ErrorKind::Busy,
            "{what} waits and fails the same way"
        );
    }

    drop(holder);
    let revision = store
        .save(&snapshot(&id, "after").with_revision(loaded.revision()))
        .expect("the lock is free again");
    assert_eq!(revision.as_u64(), 2);
}

#[test]
fn a_save_waits_for_a_lock_released_before_the_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_with_timeout(dir.path(), Duration::from_secs(60));
    let id = sid("waits");
    let holder = hold_lock(dir.path());
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(holder);
    });
    store
        .save(&snapshot(&id, "x"))
        .expect("the save waits for the holder instead of failing");
    release.join().expect("the releasing thread");
}

#[test]
fn threads_of_one_store_wait_for_each_other_within_the_same_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = std::sync::Arc::new(store_with_timeout(dir.path(), Duration::from_millis(200)));
    let id = sid("threads");
    store.save(&snapshot(&id, "x")).expect("first save");
    // Another process holds the lock: every thread of this store gives up after its own
    // wait, none blocks forever behind a thread that waits for the lock.
    let holder = hold_lock(dir.path());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let store = std::sync::Arc::clone(&store);
            let id = id.clone();
            std::thread::spawn(move || store.delete(&id).map_err(|e| e.kind()))
        })
        .collect();
    for thread in threads {
        assert_eq!(
            thread.join().expect("a deleting thread"),
            Err(ErrorKind::Busy)
        );
    }
    // (Each gave up: none was left waiting behind another that held the store's slot.)
    drop(holder);
    store.load(&id).expect("nothing was deleted");
}

#[test]
fn a_process_of_release_0_1_holding_the_lock_file_blocks_a_save() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_with_timeout(dir.path(), Duration::from_millis(200));
    let holder = hold_lock_file(dir.path());
    assert_eq!(
        store
            .save(&snapshot(&sid("old-writer"), "x"))
            .expect_err("the old lock is held")
            .kind(),
        ErrorKind::Busy
    );
    drop(holder);
    store
        .save(&snapshot(&sid("old-writer"), "x"))
        .expect("free again");
}

/// Issue 12, item 1: a store that opened `.lock` before it was deleted must not take a
/// lock on the deleted file while another writer holds the lock on the new one (here a
/// process of release 0.1, which locks `.lock` alone; writers of this release also lock
/// the directory, which no deletion can split).
#[test]
fn a_deleted_lock_file_cannot_split_the_lock_in_two() {
    let dir = tempfile::tempdir().expect("temp dir");
    let early = store_with_timeout(dir.path(), Duration::from_millis(300));
    let id = sid("split");
    early.save(&snapshot(&id, "v1")).expect("first save");

    // A user removes the "stale" lock; the next store (or process) creates a new one, and
    // another process holds it.
    std::fs::remove_file(dir.path().join(".lock")).expect("remove the lock file");
    let late = FileSessionStore::open(dir.path()).expect("a later store");
    let holder = hold_lock_file(dir.path());

    // The early store must wait for that holder: it may not lock its own, deleted, file.
    let loaded = early.load(&id).expect("load");
    let err = early
        .save(&snapshot(&id, "v2").with_revision(loaded.revision()))
        .expect_err("another process holds the lock the path names");
    assert_eq!(err.kind(), ErrorKind::Busy, "{err}");
    drop(holder);

    // Released: both stores write in turn, compare-and-swap intact.
    let revision = early
        .save(&snapshot(&id, "v2").with_revision(loaded.revision()))
        .expect("the lock is free");
    let stale = late.save(&snapshot(&id, "v2 elsewhere").with_revision(loaded.revision()));
    assert!(
        stale.expect_err("revision moved").is_conflict(),
        "the other store sees the new revision"
    );
    assert_eq!(late.load(&id).expect("load").revision(), revision);
}

#[test]
fn a_lock_file_deleted_while_no_one_holds_it_is_created_again_by_the_next_save() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path()).expect("open");
    let id = sid("recreated");
    store.save(&snapshot(&id, "v1")).expect("first save");
    std::fs::remove_file(dir.path().join(".lock")).expect("remove the lock file");
    let loaded = store.load(&id).expect("load");
    store
        .save(&snapshot(&id, "v2").with_revision(loaded.revision()))
        .expect("save after the lock file was removed");
    let meta = std::fs::symlink_metadata(dir.path().join(".lock")).expect("a new lock file");
    assert!(meta.is_file());
    // And it is the one saves lock: a holder of the new file blocks a save.
    let holder = hold_lock(dir.path());
    let other = store_with_timeout(dir.path(), Duration::from_millis(100));
    assert_eq!(
        other
            .save(&snapshot(&sid("another"), "x"))
            .expect_err("the lock is held")
            .kind(),
        ErrorKind::Busy
    );
    drop(holder);
}

#[test]
fn a_store_opens_and_reads_while_another_writer_holds_the_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let id = sid("readable");
    FileSessionStore::open(dir.path())
        .expect("open")
        .save(&snapshot(&id, "x"))
        .expect("save");
    let _holder = hold_lock(dir.path());
    // Opening cleans up after crashed saves only if the lock is free at once: it never
    // waits, so a hung writer does not keep readers out. With a lock timeout too long to
    // wait out, a wait would never end.
    let store = store_with_timeout(dir.path(), Duration::MAX);
    assert_eq!(store.load(&id).expect("load").transcript().len(), 1);
    assert_eq!(store.list().expect("list").sessions.len(), 1);
}

/// Found in review: `lock_timeout(Duration::MAX)` (wait for ever) overflowed the deadline.
#[test]
fn a_lock_timeout_of_duration_max_waits_without_overflowing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_with_timeout(dir.path(), Duration::MAX);
    store.save(&snapshot(&sid("forever"), "x")).expect("save");
    let holder = hold_lock(dir.path());
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(holder);
    });
    store
        .delete(&sid("forever"))
        .expect("waits for the holder, however long");
    release.join().expect("the releasing thread");
}

/// Found in review: a FIFO planted as `.lock` opens and locks like a file, never names
/// the file locked, and made opening the store and every save spin for ever.
#[test]
fn a_lock_file_that_is_not_a_regular_file_is_refused_instead_of_spun_on() {
    for plant_before_open in [true, false] {
        let dir = tempfile::tempdir().expect("temp dir");
        let lock = dir.path().join(".lock");
        let plant = || {
            let _ = std::fs::remove_file(&lock);
            let status = std::process::Command::new("mkfifo")
                .arg(&lock)
                .status()
                .expect("mkfifo");
            assert!(status.success());
        };
        let store = if plant_before_open {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
                .expect("chmod");
            plant();
            match FileSessionStore::builder()
                .lock_timeout(Duration::from_millis(200))
                .open(dir.path())
            {
                Err(err) => {
                    assert!(matches!(err, Error::Insecure { .. }), "{err:?}");
                    continue;
                }
                Ok(store) => store,
            }
        } else {
            let store = store_with_timeout(dir.path(), Duration::from_millis(200));
            plant();
            store
        };
        let err = store
            .save(&snapshot(&sid("fifo"), "x"))
            .expect_err("the lock file is a FIFO");
        assert!(matches!(err, Error::Insecure { .. }), "{err:?}");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
