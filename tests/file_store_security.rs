//! Security properties of `FileSessionStore`: private modes whatever the umask, strict ids,
//! no following of links, no aliasing of one session by another, size limits, and a store
//! that keeps working around files it did not write.
#![cfg(unix)]

use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use agent_session::{
    Error, ErrorKind, FileSessionStore, Location, Revision, SessionId, SessionSnapshot,
    SessionStore,
};
use serde_json::json;

use support::{dir_names, id, mode, set_mode, snapshot, snapshot_with_text, write_private};

// ---------------------------------------------------------------------------------------
// Modes.
// ---------------------------------------------------------------------------------------

#[test]
fn new_store_dir_is_0700_and_snapshot_and_lock_files_are_0600() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("nested/parents/sessions");
    check_private_store_in(&dir);
    // Missing parents are created private as well.
    assert_eq!(mode(&tmp.path().join("nested")), 0o700);
    assert_eq!(mode(&tmp.path().join("nested/parents")), 0o700);
}

/// The environment variable that tells the child test which umask it runs under.
const UMASK_ENV: &str = "AGENT_SESSION_TEST_UMASK";
/// The environment variable that tells the child test where to create its store.
const DIR_ENV: &str = "AGENT_SESSION_TEST_DIR";
/// The child test's name, as libtest knows it.
const CHILD_TEST: &str = "umask_child_creates_private_store";

#[test]
fn files_are_private_under_umask_000() {
    run_under_umask("000", 0o666);
}

#[test]
fn files_are_private_under_umask_022() {
    run_under_umask("022", 0o644);
}

/// Re-runs this test binary's [`CHILD_TEST`] under `umask`, through `sh` (umask is
/// process-wide, so it cannot be changed inside this multi-threaded test process), then
/// checks what it created from the outside.
fn run_under_umask(umask: &str, plain_file_mode: u32) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("store");
    let exe = std::env::current_exe().expect("current test binary");
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
        .arg(&exe)
        .args([
            CHILD_TEST,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(UMASK_ENV, umask)
        .env(DIR_ENV, &dir)
        .output()
        .expect("run sh (needed to set the umask of a child process)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "child failed under umask {umask}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "the child test did not run\nstdout:\n{stdout}"
    );
    // The child's umask really applied to files created without an explicit mode...
    assert_eq!(mode(&dir.join("plain-probe")), plain_file_mode);
    // ...and not to the store's files.
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("umask-probe.json")), 0o600);
    assert_eq!(mode(&dir.join(".lock")), 0o600);
}

/// Runs in a child process started by [`run_under_umask`]; on its own it checks the modes
/// under whatever umask it inherited.
#[test]
#[ignore = "run in a child process with a chosen umask by files_are_private_under_umask_*"]
fn umask_child_creates_private_store() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = std::env::var_os(DIR_ENV).map_or_else(|| tmp.path().join("store"), Into::into);
    check_private_store_in(&dir);
    let probe = dir.join("plain-probe");
    fs::write(&probe, b"x").expect("write probe");
    if let Ok(umask) = std::env::var(UMASK_ENV) {
        let umask = u32::from_str_radix(&umask, 8).expect("octal umask");
        assert_eq!(
            mode(&probe),
            0o666 & !umask,
            "the umask was not applied to the child"
        );
    }
}

/// Creates a store in `dir` (which must not exist), saves and re-saves a session, and checks
/// every mode the store promises.
fn check_private_store_in(dir: &Path) {
    assert!(!dir.exists());
    let store = FileSessionStore::open(dir).expect("open");
    assert_eq!(mode(dir), 0o700, "store directory");
    assert_eq!(mode(&dir.join(".lock")), 0o600, "lock file");
    let first = snapshot("umask-probe");
    store.save(&first).expect("save");
    let path = store.path_of(first.id());
    assert_eq!(path, store.dir().join("umask-probe.json"));
    assert_eq!(mode(&path), 0o600, "new snapshot");
    let loaded = store.load(first.id()).expect("load");
    store.save(&loaded).expect("re-save");
    assert_eq!(mode(&path), 0o600, "replaced snapshot");
    assert_eq!(mode(dir), 0o700, "store directory after saves");
}

#[test]
fn a_0644_snapshot_becomes_0600_on_next_save() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    let first = snapshot("loosened");
    store.save(&first).expect("save");
    let path = store.path_of(first.id());
    set_mode(&path, 0o644);
    assert_eq!(mode(&path), 0o644);
    // Loading does not care about the mode, and does not change it.
    let loaded = store.load(first.id()).expect("load");
    assert_eq!(mode(&path), 0o644);
    store.save(&loaded).expect("save again");
    assert_eq!(mode(&path), 0o600);
    assert_eq!(
        store.load(first.id()).expect("load").revision(),
        Revision::from_u64(2)
    );
}

#[test]
fn store_dir_writable_by_others_is_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (name, bad_mode) in [
        ("world", 0o777),
        ("other-write", 0o703),
        ("group-write", 0o770),
    ] {
        let dir = tmp.path().join(name);
        fs::create_dir(&dir).expect("mkdir");
        set_mode(&dir, bad_mode);
        let err = FileSessionStore::open(&dir).expect_err("open a dir others can write");
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{name}: {err:?}");
        assert!(err.is_corrupt());
        match &err {
            Error::Insecure { path, reason } => {
                assert_eq!(path, &dir);
                assert!(reason.contains("writable by other users"), "{reason}");
            }
            other => panic!("{name}: expected Error::Insecure, got {other:?}"),
        }
        assert!(err.to_string().contains(&dir.display().to_string()));
        // Refused without touching it: same mode, nothing created.
        assert_eq!(mode(&dir), bad_mode, "{name}");
        assert!(dir_names(&dir).is_empty(), "{name}: {:?}", dir_names(&dir));
    }
}

#[test]
fn store_dir_readable_by_others_and_holding_other_files_is_refused_unchanged() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("project");
    fs::create_dir(&dir).expect("mkdir");
    fs::write(dir.join("README.md"), b"not a session").expect("write");
    set_mode(&dir, 0o755);
    let err = FileSessionStore::open(&dir).expect_err("a shared, non-empty directory");
    match &err {
        Error::Insecure { reason, .. } => {
            assert!(reason.contains("readable by other users"), "{reason}");
        }
        other => panic!("expected Error::Insecure, got {other:?}"),
    }
    assert_eq!(mode(&dir), 0o755, "refused without a chmod");
}

#[test]
fn empty_store_dir_readable_by_others_is_made_0700() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (name, loose_mode) in [("world-read", 0o755), ("group-read", 0o750), ("x", 0o711)] {
        let dir = tmp.path().join(name);
        fs::create_dir(&dir).expect("mkdir");
        set_mode(&dir, loose_mode);
        let store = FileSessionStore::open(&dir).expect("open a readable dir");
        assert_eq!(mode(&dir), 0o700, "{name}");
        store.save(&snapshot("inside")).expect("save");
        assert_eq!(mode(&dir.join("inside.json")), 0o600);
    }
}

// ---------------------------------------------------------------------------------------
// Ids.
// ---------------------------------------------------------------------------------------

#[test]
fn malicious_ids_are_refused_and_create_nothing() {
    let overlong = "a".repeat(129);
    let malicious: Vec<&str> = vec![
        // Traversal and separators.
        "..",
        ".",
        "../x",
        "../../etc/passwd",
        "a/../../b",
        "a/b",
        "/abs",
        "a\\b",
        "..\\..\\windows",
        "%2e%2e%2f",
        "%2e%2e%5cx",
        // NUL and control characters.
        "a\0b",
        "\0",
        "abc\0.json",
        "a\nb",
        "a\rb",
        "a\tb",
        "a\u{1b}[31m",
        "a\u{7f}",
        "a\u{85}b",
        // Unicode tricks: bidi override, look-alike slash and dot, zero-width, Cyrillic,
        // byte-order mark, accents.
        "\u{202e}nosj.exe",
        "abc\u{202e}",
        "a\u{2215}b",
        "\u{ff0e}\u{ff0e}",
        "\u{ff0e}\u{ff0e}\u{2215}etc",
        "\u{200b}abc",
        "\u{430}bc",
        "\u{feff}abc",
        "caf\u{e9}",
        // Leading dot or dash, and the store's own private names.
        ".hidden",
        "-rf",
        "--help",
        "_under",
        ".lock",
        ".x.tmp",
        ".abc.0123456789abcdef.tmp",
        // Reserved device names.
        "con",
        "prn",
        "aux",
        "nul",
        "com1",
        "lpt1",
        "lpt9",
        // Case: ids are lowercase only.
        "CON",
        "Session",
        "ABC",
        // Length and emptiness.
        &overlong,
        "",
        // Whitespace.
        " ",
        "a b",
        " abc",
        "abc ",
        "\t",
        // Other punctuation a shell or a file system may treat specially.
        "a.json",
        "a.b",
        "a:b",
        "a*b",
        "a?b",
        "~",
        "~root",
        "$HOME",
        "a|b",
    ];
    assert!(malicious.len() >= 25);

    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    let before = dir_names(store.dir());
    let valid_json = support::json_value(&snapshot("placeholder"));

    for input in &malicious {
        let err = SessionId::parse(input).expect_err(&format!("{input:?} was accepted"));
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{input:?}");
        match &err {
            Error::InvalidId { id, reason } => {
                assert_eq!(id, input);
                assert!(!reason.is_empty());
            }
            other => panic!("{input:?}: expected Error::InvalidId, got {other:?}"),
        }
        // Every other way of making an id validates the same way.
        assert!(input.parse::<SessionId>().is_err(), "{input:?}");
        assert!(SessionId::try_from(*input).is_err(), "{input:?}");
        assert!(
            SessionId::try_from((*input).to_owned()).is_err(),
            "{input:?}"
        );
        assert!(
            serde_json::from_value::<SessionId>(json!(input)).is_err(),
            "{input:?}"
        );
        // A snapshot claiming the id is refused when decoded.
        let mut value = valid_json.clone();
        value["id"] = json!(input);
        let bytes = serde_json::to_vec(&value).expect("encode");
        let err = SessionSnapshot::from_json(&bytes).expect_err(&format!("snapshot id {input:?}"));
        assert!(matches!(err, Error::Malformed { .. }), "{input:?}: {err:?}");
    }

    assert_eq!(dir_names(store.dir()), before, "something was created");
    let listing = store.list().expect("list");
    assert!(listing.sessions.is_empty() && listing.unreadable.is_empty());
}

#[test]
fn boundary_ids_are_accepted() {
    for ok in ["a", "0", "a-b_c", "con1", "nul-session", &"z".repeat(128)] {
        let parsed = SessionId::parse(ok).expect(ok);
        assert_eq!(parsed.as_str(), ok);
    }
}

// ---------------------------------------------------------------------------------------
// Aliasing: renamed or copied files, links.
// ---------------------------------------------------------------------------------------

#[test]
fn renamed_or_copied_snapshot_is_refused_with_id_mismatch() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    let alpha = snapshot("alpha");
    let bravo = snapshot("bravo");
    store.save(&alpha).expect("save alpha");
    store.save(&bravo).expect("save bravo");

    // A copy of alpha under another id's name.
    fs::copy(store.path_of(alpha.id()), store.dir().join("charlie.json")).expect("copy");
    // bravo renamed to another id's name.
    fs::rename(store.path_of(bravo.id()), store.dir().join("delta.json")).expect("rename");

    for (name, inner) in [("charlie", "alpha"), ("delta", "bravo")] {
        let path = store.dir().join(format!("{name}.json"));
        let before = fs::read(&path).expect("read");
        let err = store.load(&id(name)).expect_err(name);
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        match &err {
            Error::IdMismatch {
                location: Location::File(err_path),
                expected,
                found,
            } => {
                assert_eq!(err_path, &path);
                assert_eq!(expected.as_str(), name);
                assert_eq!(found, inner);
            }
            other => panic!("{name}: expected Error::IdMismatch, got {other:?}"),
        }
        // A save under the alias is refused too and leaves the file alone.
        let err = store.save(&snapshot(name)).expect_err("save over alias");
        assert!(matches!(err, Error::IdMismatch { .. }), "{err:?}");
        assert_eq!(fs::read(&path).expect("read"), before);
    }

    // The original still loads; the renamed one is simply gone.
    assert_eq!(
        store.load(alpha.id()).expect("alpha"),
        alpha.with_revision(Revision::from_u64(1))
    );
    assert!(store.load(bravo.id()).expect_err("bravo").is_not_found());

    let listing = store.list().expect("list");
    let ids: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["alpha"]);
    assert_eq!(listing.unreadable.len(), 2, "{:?}", listing.unreadable);
    assert!(listing
        .unreadable
        .iter()
        .all(|e| matches!(e, Error::IdMismatch { .. })));
}

#[test]
fn symlink_in_place_of_snapshot_is_refused_on_load_and_save() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    let victim = snapshot("victim");
    // The target is a valid snapshot of the same id, so following the link would "work".
    let target = tmp.path().join("outside.json");
    fs::write(
        &target,
        victim
            .clone()
            .with_revision(Revision::from_u64(1))
            .to_json()
            .expect("json"),
    )
    .expect("write target");
    let target_before = fs::read(&target).expect("read");
    let link = store.path_of(victim.id());
    symlink(&target, &link).expect("symlink");

    let err = store.load(victim.id()).expect_err("load through a link");
    assert_insecure(&err, &link);

    for attempt in [
        victim.clone(),
        victim.clone().with_revision(Revision::from_u64(1)),
    ] {
        let err = store.save(&attempt).expect_err("save through a link");
        assert_insecure(&err, &link);
    }
    assert_eq!(fs::read(&target).expect("read"), target_before);
    assert!(fs::symlink_metadata(&link)
        .expect("lstat")
        .file_type()
        .is_symlink());

    let listing = store.list().expect("list");
    assert!(listing.sessions.is_empty());
    assert_eq!(listing.unreadable.len(), 1);
    assert_insecure(&listing.unreadable[0], &link);

    // Delete removes the link itself, never the target.
    store.delete(victim.id()).expect("delete the link");
    assert!(fs::symlink_metadata(&link).is_err());
    assert_eq!(fs::read(&target).expect("read"), target_before);
    // And the id is usable again.
    store.save(&victim).expect("save after removing the link");
    assert_eq!(mode(&link), 0o600);
}

#[test]
fn dangling_symlink_in_place_of_snapshot_is_refused_and_not_created() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    let victim = snapshot("victim");
    let target = tmp.path().join("would-be-created.json");
    let link = store.path_of(victim.id());
    symlink(&target, &link).expect("symlink");
    assert_insecure(&store.load(victim.id()).expect_err("load"), &link);
    assert_insecure(&store.save(&victim).expect_err("save"), &link);
    assert!(!target.exists(), "the save wrote through a dangling link");
}

#[test]
fn symlinked_store_dir_is_refused_on_open() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let real = tmp.path().join("real");
    FileSessionStore::open(&real).expect("create the real store");
    let link = tmp.path().join("link");
    symlink(&real, &link).expect("symlink");
    let err = FileSessionStore::open(&link).expect_err("open through a link");
    assert_insecure(&err, &link);
    // A link to a directory that does not exist is not followed to create it.
    let dangling = tmp.path().join("dangling");
    symlink(tmp.path().join("nowhere"), &dangling).expect("symlink");
    assert_insecure(
        &FileSessionStore::open(&dangling).expect_err("open a dangling link"),
        &dangling,
    );
    assert!(!tmp.path().join("nowhere").exists());
}

#[test]
fn symlinked_lock_file_is_refused_on_open() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("s");
    fs::create_dir(&dir).expect("mkdir");
    set_mode(&dir, 0o700);
    let target = tmp.path().join("lock-target");
    symlink(&target, dir.join(".lock")).expect("symlink");
    let err = FileSessionStore::open(&dir).expect_err("open with a linked lock");
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err:?}");
    assert!(matches!(err, Error::Insecure { .. }), "{err:?}");
    assert!(!target.exists(), "the lock was created through the link");
}

#[test]
fn hard_linked_snapshot_is_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    let alpha = snapshot("alpha");
    store.save(&alpha).expect("save");
    let path = store.path_of(alpha.id());
    let before = fs::read(&path).expect("read");

    // A second name outside the store...
    let outside = tmp.path().join("alias");
    fs::hard_link(&path, &outside).expect("hard link");
    assert_insecure(&store.load(alpha.id()).expect_err("load"), &path);
    let loaded_rev = alpha.clone().with_revision(Revision::from_u64(1));
    assert_insecure(&store.save(&loaded_rev).expect_err("save"), &path);
    assert_eq!(fs::read(&path).expect("read"), before);
    fs::remove_file(&outside).expect("unlink alias");

    // ...or inside it, under another id's name.
    let inside = store.dir().join("bravo.json");
    fs::hard_link(&path, &inside).expect("hard link");
    assert_insecure(&store.load(alpha.id()).expect_err("load"), &path);
    assert_insecure(&store.load(&id("bravo")).expect_err("load alias"), &inside);
    let listing = store.list().expect("list");
    assert!(listing.sessions.is_empty());
    assert_eq!(listing.unreadable.len(), 2);
    fs::remove_file(&inside).expect("unlink alias");

    // With the extra names gone, the session is readable again.
    assert_eq!(store.load(alpha.id()).expect("load"), loaded_rev);
}

// ---------------------------------------------------------------------------------------
// Size limits.
// ---------------------------------------------------------------------------------------

#[test]
fn snapshot_file_over_the_size_limit_is_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let big = snapshot_with_text("big", &"x".repeat(20_000));
    FileSessionStore::open(tmp.path())
        .expect("open")
        .save(&big)
        .expect("save with the default limit");
    let path = tmp.path().join("big.json");
    let size = fs::metadata(&path).expect("stat").len();
    assert!(size > 20_000);

    let limited = FileSessionStore::builder()
        .max_snapshot_bytes(4096)
        .open(tmp.path())
        .expect("open limited");
    let err = limited.load(big.id()).expect_err("over the limit");
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    match &err {
        Error::TooLarge {
            location: Location::File(err_path),
            size_bytes,
            limit_bytes,
        } => {
            assert_eq!(err_path, &path);
            assert_eq!(*size_bytes, size);
            assert_eq!(*limit_bytes, 4096);
        }
        other => panic!("expected Error::TooLarge, got {other:?}"),
    }
    let listing = limited.list().expect("list");
    assert!(listing.sessions.is_empty());
    assert!(matches!(listing.unreadable[..], [Error::TooLarge { .. }]));

    // The limit is inclusive.
    let exact = FileSessionStore::builder()
        .max_snapshot_bytes(size)
        .open(tmp.path())
        .expect("open");
    assert_eq!(
        exact.load(big.id()).expect("load at the limit").id(),
        big.id()
    );
    let one_less = FileSessionStore::builder()
        .max_snapshot_bytes(size - 1)
        .open(tmp.path())
        .expect("open");
    assert!(matches!(
        one_less.load(big.id()),
        Err(Error::TooLarge { .. })
    ));
}

#[test]
fn save_over_the_size_limit_is_refused_and_leaves_the_old_file() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::builder()
        .max_snapshot_bytes(4096)
        .open(tmp.path())
        .expect("open");
    let small = snapshot_with_text("grows", "short");
    store.save(&small).expect("save small");
    let path = store.path_of(small.id());
    let before = fs::read(&path).expect("read");
    let names_before = dir_names(store.dir());

    let grown =
        snapshot_with_text("grows", &"y".repeat(10_000)).with_revision(Revision::from_u64(1));
    let err = store.save(&grown).expect_err("save over the limit");
    // The save of a stored session appends to its journal, which would pass the limit.
    let journal = tmp.path().join("grows.journal");
    match &err {
        Error::TooLarge {
            location: Location::File(err_path),
            size_bytes,
            limit_bytes,
        } => {
            assert_eq!(err_path, &journal);
            assert!(*size_bytes > 10_000);
            assert_eq!(*limit_bytes, 4096);
        }
        other => panic!("expected Error::TooLarge, got {other:?}"),
    }
    assert_eq!(fs::read(&path).expect("read"), before, "old file changed");
    assert_eq!(dir_names(store.dir()), names_before, "a temp file was left");
    assert_eq!(
        store.load(small.id()).expect("load").revision(),
        Revision::from_u64(1)
    );

    // A new session over the limit is not created at all.
    let err = store
        .save(&snapshot_with_text("huge", &"z".repeat(10_000)))
        .expect_err("new session over the limit");
    assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
    assert!(!store.dir().join("huge.json").exists());

    // The limit applies to the encoded size, inclusively.
    let fits = snapshot_with_text("fits", &"w".repeat(1000));
    let encoded = fits
        .clone()
        .with_revision(Revision::from_u64(1))
        .to_json()
        .expect("json")
        .len() as u64;
    let sub = tmp.path().join("exact");
    let exact = FileSessionStore::builder()
        .max_snapshot_bytes(encoded)
        .open(&sub)
        .expect("open");
    exact.save(&fits).expect("save exactly at the limit");
    let tight = FileSessionStore::builder()
        .max_snapshot_bytes(encoded - 1)
        .open(tmp.path().join("tight"))
        .expect("open");
    assert!(matches!(tight.save(&fits), Err(Error::TooLarge { .. })));
}

// ---------------------------------------------------------------------------------------
// Files the store did not write.
// ---------------------------------------------------------------------------------------

#[test]
fn fifo_named_like_a_snapshot_does_not_hang_load() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    store.save(&snapshot("fine")).expect("save");
    let fifo = store.dir().join("piped.json");
    match Command::new("mkfifo").arg(&fifo).status() {
        Ok(status) if status.success() => {}
        Ok(status) => {
            eprintln!("skipped: mkfifo exited with {status}");
            return;
        }
        Err(e) => {
            eprintln!("skipped: mkfifo is not available ({e})");
            return;
        }
    }
    let (tx, rx) = mpsc::channel();
    let dir = store.dir().to_path_buf();
    std::thread::spawn(move || {
        let store = FileSessionStore::open(&dir).expect("open");
        let loaded = store.load(&id("piped"));
        let listed = store.list();
        let _ = tx.send((loaded, listed));
    });
    let (loaded, listed) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("load or list hung on a FIFO");
    let err = loaded.expect_err("a FIFO is not a snapshot");
    assert_insecure(&err, &fifo);
    let listing = listed.expect("list");
    let ids: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["fine"]);
    assert_eq!(listing.unreadable.len(), 1);
    assert!(fs::symlink_metadata(&fifo)
        .expect("lstat")
        .file_type()
        .is_fifo());
}

#[test]
fn directory_named_like_a_snapshot_is_refused() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    let path = store.dir().join("folder.json");
    fs::create_dir(&path).expect("mkdir");
    assert_insecure(&store.load(&id("folder")).expect_err("load"), &path);
    let err = store.delete(&id("folder")).expect_err("delete a directory");
    assert_insecure(&err, &path);
    assert!(path.is_dir());
}

#[test]
fn leftover_temp_file_is_never_listed_and_is_removed_on_next_open() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("s");
    let store = FileSessionStore::open(&dir).expect("open");
    let alpha = snapshot("alpha");
    store.save(&alpha).expect("save");
    // What a crash mid-save leaves: a complete or partial temp file.
    let whole = dir.join(".alpha.Zx81Qw0123456789ab.tmp");
    let partial = dir.join(".beta.0000000000000000.tmp");
    write_private(
        &whole,
        &alpha
            .clone()
            .with_revision(Revision::from_u64(2))
            .to_json()
            .expect("json"),
    );
    write_private(&partial, b"{\"schema_version\":1,\"id\":\"be");

    let listing = store.list().expect("list");
    let ids: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["alpha"]);
    assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
    assert_eq!(
        store.load(alpha.id()).expect("load").revision(),
        Revision::from_u64(1),
        "the temp file must not be read as the session"
    );
    drop(store);

    let reopened = FileSessionStore::open(&dir).expect("reopen");
    assert!(!whole.exists(), "leftover temp file kept");
    assert!(!partial.exists(), "leftover temp file kept");
    assert_eq!(dir_names(&dir), [".lock", "alpha.json", "alpha.summary"]);
    assert_eq!(
        reopened.load(alpha.id()).expect("load").revision(),
        Revision::from_u64(1)
    );
}

#[test]
fn non_id_json_file_is_reported_unreadable_while_sessions_still_list() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    store.save(&snapshot("alpha")).expect("save");
    store.save(&snapshot("bravo")).expect("save");
    let bad = store.dir().join("Bad Name.json");
    write_private(&bad, &snapshot("alpha").to_json().expect("json"));
    // Not a `.json` file: not a session, not worth reporting.
    write_private(&store.dir().join("notes.txt"), b"hello");

    let listing = store.list().expect("list");
    let mut ids: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["alpha", "bravo"]);
    assert_eq!(listing.unreadable.len(), 1, "{:?}", listing.unreadable);
    match &listing.unreadable[0] {
        Error::ForeignFile { path, .. } => assert_eq!(path, &bad),
        other => panic!("expected Error::ForeignFile, got {other:?}"),
    }
    assert_eq!(listing.unreadable[0].kind(), ErrorKind::Corrupt);
    assert!(listing.unreadable[0]
        .to_string()
        .contains(&bad.display().to_string()));
    assert!(bad.exists(), "listing must not remove foreign files");
}

#[test]
fn corrupt_snapshot_is_unreadable_while_other_sessions_still_list() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    store.save(&snapshot("alpha")).expect("save");
    store.save(&snapshot("bravo")).expect("save");
    let corrupt = store.dir().join("charlie.json");
    write_private(&corrupt, b"{\"schema_version\":1,\"id\":\"charlie\",");

    let listing = store.list().expect("list");
    let mut ids: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["alpha", "bravo"]);
    assert_eq!(listing.unreadable.len(), 1);
    let err = &listing.unreadable[0];
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    match err {
        Error::Malformed { location, .. } => {
            assert_eq!(location, &Location::File(corrupt.clone()));
        }
        other => panic!("expected Error::Malformed, got {other:?}"),
    }
    assert!(err.to_string().contains(&corrupt.display().to_string()));
    // The corrupt file is left for the user to inspect; delete clears it.
    assert!(corrupt.exists());
    store.delete(&id("charlie")).expect("delete corrupt");
    assert!(store.list().expect("list").unreadable.is_empty());
}

/// Checks `err` is [`Error::Insecure`] about `path`.
fn assert_insecure(err: &Error, path: &Path) {
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err:?}");
    match err {
        Error::Insecure { path: p, reason } => {
            assert_eq!(p, path, "{reason}");
            assert!(!reason.is_empty());
        }
        other => panic!(
            "expected Error::Insecure for {}, got {other:?}",
            path.display()
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Limits and leftovers found in review.
// ---------------------------------------------------------------------------------------

#[test]
fn size_limit_at_the_extremes() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let err = FileSessionStore::builder()
        .max_snapshot_bytes(0)
        .open(tmp.path().join("zero"))
        .expect_err("a zero limit could store nothing");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");

    // u64::MAX means "no practical limit": it must not overflow into refusing everything.
    let store = FileSessionStore::builder()
        .max_snapshot_bytes(u64::MAX)
        .open(tmp.path().join("max"))
        .expect("open");
    let first = snapshot("unbounded");
    let revision = store.save(&first).expect("save");
    let again = store
        .save(&first.with_revision(revision))
        .expect("save again");
    assert_eq!(
        store.load(&id("unbounded")).expect("load").revision(),
        again
    );
}

#[test]
fn a_directory_named_like_a_temp_file_does_not_stop_the_store_from_opening() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("s");
    FileSessionStore::open(&dir).expect("create");
    fs::create_dir(dir.join(".x.tmp")).expect("mkdir");
    let store = FileSessionStore::open(&dir).expect("reopen despite the odd directory");
    store.save(&snapshot("fine")).expect("save");
    assert!(
        dir.join(".x.tmp").is_dir(),
        "directories are not removed as temp files"
    );
}

#[test]
fn a_session_at_the_largest_revision_cannot_be_saved_again() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    let path = store.path_of(&id("last"));
    let at_max = snapshot("last").with_revision(Revision::from_u64(u64::MAX));
    write_private(&path, &at_max.to_json().expect("json"));
    let before = fs::read(&path).expect("read");

    let loaded = store.load(&id("last")).expect("load");
    assert_eq!(loaded.revision(), Revision::from_u64(u64::MAX));
    let err = store.save(&loaded).expect_err("the revision cannot grow");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    assert!(err.to_string().contains("largest revision"), "{err}");
    assert_eq!(fs::read(&path).expect("read"), before, "nothing written");
}

// ---------------------------------------------------------------------------------------
// Issue 12: the directory's owner and mode after open, links named as links, planted
// archive markers.
// ---------------------------------------------------------------------------------------

/// Whether this process runs as root (uid 0), read from /proc without unsafe code.
fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Issue 12, item 5: a private directory that another user owns can be emptied or changed
/// by that user, whatever its mode.
#[test]
fn store_dir_owned_by_another_user_is_refused() {
    if !running_as_root() {
        eprintln!("skipped: only root can give a directory to another user");
        return;
    }
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("theirs");
    FileSessionStore::open(&dir)
        .expect("create")
        .save(&snapshot("kept"))
        .expect("save");
    // 65534 is `nobody` on Debian and most other systems.
    let status = Command::new("chown")
        .args(["65534:65534"])
        .arg(&dir)
        .status()
        .expect("chown");
    assert!(status.success());
    let before = dir_names(&dir);
    let err = FileSessionStore::open(&dir).expect_err("a directory of another user");
    assert_insecure(&err, &dir);
    assert!(err.to_string().contains("another user"), "{err}");
    assert_eq!(dir_names(&dir), before, "nothing was written");
}

/// A change to the store directory, or its undoing.
type Step<'a> = Box<dyn Fn() + 'a>;

/// Issue 12, item 16: a store already open stops using its directory once it is loosened
/// or given away, as a fresh open would refuse it; put back, it works again.
#[test]
fn a_store_dir_loosened_or_given_away_after_open_is_refused_by_every_operation() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("s");
    let store = FileSessionStore::open(&dir).expect("open");
    let kept = snapshot("kept");
    store.save(&kept).expect("save");
    let mut changes: Vec<(&str, Step, Step)> = vec![(
        "mode 0755",
        Box::new(|| set_mode(&dir, 0o755)),
        Box::new(|| set_mode(&dir, 0o700)),
    )];
    if running_as_root() {
        changes.push((
            "owner nobody",
            Box::new(|| {
                assert!(Command::new("chown")
                    .arg("65534")
                    .arg(&dir)
                    .status()
                    .expect("chown")
                    .success());
            }),
            Box::new(|| {
                assert!(Command::new("chown")
                    .arg("0")
                    .arg(&dir)
                    .status()
                    .expect("chown")
                    .success());
            }),
        ));
    } else {
        eprintln!("not root: the owner change is not tried");
    }
    for (what, change, undo) in &changes {
        change();
        let fresh = snapshot("new-one");
        let results = [
            ("save", store.save(&fresh).map(|_| ())),
            ("load", store.load(kept.id()).map(|_| ())),
            ("list", store.list().map(|_| ())),
            ("delete", store.delete(kept.id())),
            ("archive", store.set_archived(kept.id(), true)),
        ];
        for (op, result) in results {
            let err = result.expect_err(&format!("{op} after {what}"));
            assert_insecure(&err, store.dir());
        }
        assert!(!store.path_of(fresh.id()).exists(), "{what}: saved anyway");
        undo();
        store.load(kept.id()).expect("works again once put back");
    }
}

/// Issue 12, item 16: `--store` naming a link said "not a directory"; it is a link.
#[test]
fn a_link_to_a_store_dir_is_named_a_symbolic_link() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let real = tmp.path().join("real");
    FileSessionStore::open(&real).expect("create");
    let link = tmp.path().join("link");
    symlink(&real, &link).expect("symlink");
    let err = FileSessionStore::open(&link).expect_err("a link");
    assert_insecure(&err, &link);
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(!err.to_string().contains("not a directory"), "{err}");
}

/// Issue 12, item 16: a directory planted at `<id>.archived` made a new session under that
/// id start archived (listings go by the name) and made unarchiving fail obscurely.
#[test]
fn a_directory_planted_as_an_archive_marker_is_refused_clearly() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("s");
    let store = FileSessionStore::open(&dir).expect("open");

    let planted = dir.join("fresh.archived");
    fs::create_dir(&planted).expect("plant");
    let err = store
        .save(&snapshot("fresh"))
        .expect_err("a new session would start archived");
    assert_insecure(&err, &planted);
    assert!(!store.path_of(&id("fresh")).exists(), "nothing saved");

    let existing = snapshot("existing");
    store.save(&existing).expect("save");
    store.set_archived(existing.id(), true).expect("archive");
    let marker = dir.join("existing.archived");
    fs::remove_file(&marker).expect("remove the marker");
    fs::create_dir(&marker).expect("plant a directory instead");
    let err = store
        .set_archived(existing.id(), false)
        .expect_err("unarchive through a directory");
    assert_insecure(&err, &marker);
    assert!(marker.is_dir(), "the planted directory is left alone");
}

mod support {
    use std::fs;
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    use std::path::Path;

    use agent_session::{ContentBlock, Message, SessionId, SessionSnapshot};
    use chrono::{TimeZone, Utc};
    use serde_json::Value;

    pub fn id(s: &str) -> SessionId {
        SessionId::parse(s).expect("valid test id")
    }

    pub fn snapshot(name: &str) -> SessionSnapshot {
        snapshot_with_text(name, &format!("hello from {name}"))
    }

    pub fn snapshot_with_text(name: &str, text: &str) -> SessionSnapshot {
        let when = Utc
            .with_ymd_and_hms(2025, 1, 2, 3, 4, 5)
            .single()
            .expect("date");
        SessionSnapshot::builder(id(name), "test-model")
            .timestamps(when, when)
            .transcript(vec![
                Message::user(text),
                Message::assistant(vec![ContentBlock::text("ok")]),
            ])
            .build()
            .expect("build")
    }

    pub fn json_value(snapshot: &SessionSnapshot) -> Value {
        serde_json::from_slice(&snapshot.to_json().expect("json")).expect("valid json")
    }

    /// The permission bits of `path` (not following a final link).
    pub fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path)
            .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o7777
    }

    pub fn set_mode(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
    }

    /// The sorted names in `dir`.
    pub fn dir_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Writes a new 0600 file, as a careful foreign program would.
    pub fn write_private(path: &Path, bytes: &[u8]) {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .expect("create");
        file.write_all(bytes).expect("write");
    }
}
