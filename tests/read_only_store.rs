//! A store that can only be read (issue 12, item 9): a read-only mount, or a directory
//! without write permission. Reads take no lock, so listing, loading and exporting must
//! work there; saves, deletes and archive changes fail with a clear error and change
//! nothing.
//!
//! As root (who may write any directory whatever its mode), the store is made read-only
//! with a read-only bind mount; otherwise with `chmod 0500`. When neither is possible the
//! test is skipped with a printed reason.
#![cfg(unix)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent_session::{
    ErrorKind, FileSessionStore, Message, SessionId, SessionSnapshot, SessionStore, SessionStoreExt,
};
use common::sid;

/// A read-only view of a store directory, undone when dropped.
enum ReadOnly {
    /// A read-only bind mount of the directory at `.0`.
    Mount(PathBuf),
    /// The directory itself, with its mode lowered to 0500.
    Mode(PathBuf),
}

impl ReadOnly {
    fn path(&self) -> &Path {
        match self {
            ReadOnly::Mount(path) | ReadOnly::Mode(path) => path,
        }
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        match self {
            ReadOnly::Mount(path) => {
                let _ = Command::new("umount").arg(&*path).status();
            }
            ReadOnly::Mode(path) => {
                let _ = std::fs::set_permissions(&*path, std::fs::Permissions::from_mode(0o700));
            }
        }
    }
}

fn read_only_view(store: &Path, mount_point: &Path) -> Result<ReadOnly, String> {
    if running_as_root() {
        std::fs::create_dir(mount_point).map_err(|e| format!("mkdir: {e}"))?;
        let bind = Command::new("mount")
            .arg("--bind")
            .arg(store)
            .arg(mount_point)
            .status()
            .map_err(|e| format!("no mount command: {e}"))?;
        if !bind.success() {
            return Err("mount --bind failed (no privilege to mount here?)".to_owned());
        }
        let view = ReadOnly::Mount(mount_point.to_path_buf());
        let remount = Command::new("mount")
            .args(["-o", "remount,ro,bind"])
            .arg(mount_point)
            .status()
            .map_err(|e| format!("remount: {e}"))?;
        if !remount.success() {
            return Err("remounting the bind mount read-only failed".to_owned());
        }
        Ok(view)
    } else {
        std::fs::set_permissions(store, std::fs::Permissions::from_mode(0o500))
            .map_err(|e| format!("chmod: {e}"))?;
        Ok(ReadOnly::Mode(store.to_path_buf()))
    }
}

fn running_as_root() -> bool {
    // The uid of this process, from /proc, without unsafe code: the Uid: line's effective id.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn snapshot(id: &SessionId, text: &str) -> SessionSnapshot {
    SessionSnapshot::builder(id.clone(), "m")
        .transcript(vec![Message::user(text)])
        .build()
        .expect("a valid snapshot")
}

/// Every file in `dir` with its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read the directory")
        .map(|entry| {
            let entry = entry.expect("an entry");
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_read_only_store_lists_loads_and_exports_and_refuses_writes_clearly() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("sessions");
    let ids = [sid("first"), sid("second")];
    {
        let store = FileSessionStore::open(&dir).expect("open to write");
        for id in &ids {
            store.save(&snapshot(id, id.as_str())).expect("save");
        }
        // One with a journal, so a load applies records too.
        let loaded = store.load(&ids[0]).expect("load");
        let next = loaded
            .with_appended(
                vec![Message::user("appended")],
                Vec::new(),
                chrono::Utc::now(),
            )
            .expect("append");
        store.save(&next).expect("append a turn");
        store.set_archived(&ids[1], true).expect("archive");
    }
    let view = match read_only_view(&dir, &tmp.path().join("read-only")) {
        Ok(view) => view,
        Err(reason) => {
            eprintln!("skipped: cannot make a read-only store here: {reason}");
            return;
        }
    };
    let before = contents(view.path());

    let store = FileSessionStore::open(view.path()).expect("a read-only store opens");
    assert_eq!(store.list().expect("list").sessions.len(), 1);
    assert_eq!(
        store
            .list_scoped(agent_session::ListScope::All)
            .expect("list all")
            .sessions
            .len(),
        2
    );
    assert_eq!(store.list_page(1, None).expect("a page").sessions.len(), 1);
    let loaded = store.load(&ids[0]).expect("load");
    assert_eq!(loaded.transcript().len(), 2, "the journal's record applied");
    store.export(&ids).expect("export");

    let refused = [
        (
            "save",
            store.save(&snapshot(&ids[0], "x").with_revision(loaded.revision())),
        ),
        ("delete", store.delete(&ids[0]).map(|()| loaded.revision())),
        (
            "archive",
            store
                .set_archived(&ids[0], true)
                .map(|()| loaded.revision()),
        ),
    ];
    for (what, result) in refused {
        let err = result.expect_err(what);
        assert_eq!(err.kind(), ErrorKind::Io, "{what}: {err}");
        assert!(
            err.to_string().contains("read-only"),
            "{what}: the error says why: {err}"
        );
    }
    assert_eq!(contents(view.path()), before, "nothing changed");
}
