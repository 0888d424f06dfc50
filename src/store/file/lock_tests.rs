//! The write lock's two holders problem, with the protocol of release 0.1 as the negative
//! control: the checker (two locks held at once) must catch it, and must not catch this
//! release's lock.

use std::fs::File;
use std::path::Path;
use std::time::Duration;

use super::StoreLock;
use crate::error::Error;
use crate::store::file::fs::{FileSystem, OsFileSystem};

fn store_lock(dir: &Path, timeout: Duration) -> StoreLock {
    let handle = OsFileSystem.open_dir(dir).expect("open the directory");
    StoreLock::open(&OsFileSystem, handle, dir.to_path_buf(), ".lock", timeout).expect("open")
}

/// Release 0.1 opened `.lock` once and locked that open file: after the file is deleted
/// and created again, two writers hold "the" lock at once.
#[test]
fn negative_control_the_lock_of_release_0_1_is_split_by_deleting_the_lock_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(".lock");
    let open = || {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .expect("open the lock file")
    };
    let early = open();
    std::fs::remove_file(&path).expect("remove");
    let late = open();
    early.try_lock().expect("the early writer locks its file");
    late.try_lock().expect("the late writer locks its file");
    // Both hold a lock at once: what the checker below must never see for this release.
}

#[test]
fn a_lock_file_deleted_and_created_again_does_not_let_a_second_writer_in() {
    let dir = tempfile::tempdir().expect("temp dir");
    let early = store_lock(dir.path(), Duration::from_millis(100));
    std::fs::remove_file(dir.path().join(".lock")).expect("remove");
    let late = store_lock(dir.path(), Duration::from_millis(100));

    let held = early
        .write(&OsFileSystem, &|| Ok(()))
        .expect("the early writer takes the lock");
    assert!(
        late.try_write(&OsFileSystem, &|| Ok(()))
            .expect("try")
            .is_none(),
        "a second writer got the lock while the first held it"
    );
    assert!(matches!(
        late.write(&OsFileSystem, &|| Ok(())),
        Err(Error::Busy { .. })
    ));
    // The files deleted under a holder do not split it either.
    std::fs::remove_file(dir.path().join(".lock")).expect("remove again");
    assert!(late
        .try_write(&OsFileSystem, &|| Ok(()))
        .expect("try")
        .is_none());
    drop(held);
    let now_late = late
        .write(&OsFileSystem, &|| Ok(()))
        .expect("free: the late writer takes it");
    assert!(early
        .try_write(&OsFileSystem, &|| Ok(()))
        .expect("try")
        .is_none());
    drop(now_late);
}
