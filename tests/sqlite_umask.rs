//! The SQLite store's files are 0600 (and its directory 0700) even under a umask that
//! lets everyone read and write (`umask 000`): modes are set at creation, and SQLite
//! gives the `-wal` and `-shm` files the database file's mode. A test binary of its own,
//! since the umask is the whole process's.
#![cfg(all(unix, feature = "sqlite"))]

use std::os::unix::fs::PermissionsExt;

use agent_session::testing::rich_snapshot;
use agent_session::{SessionStore, SqliteSessionStore};

#[test]
fn files_are_private_under_a_permissive_umask() {
    let dir = tempfile::tempdir().expect("temp dir");
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let db = dir.path().join("made-here").join("sessions.db");
    let opened = SqliteSessionStore::open(&db);
    rustix::process::umask(old);
    let store = opened.expect("open");
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let saved = store.save(&rich_snapshot("umask"));
    rustix::process::umask(old);
    saved.expect("save");
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(db.parent().expect("dir")), 0o700);
    assert_eq!(mode(&db), 0o600);
    for suffix in ["-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        assert_eq!(mode(std::path::Path::new(&name)), 0o600, "{suffix}");
    }
}
