//! I/O errors at every step (issue 4, item 4).
//!
//! [`FaultyFileSystem`] wraps the real file system behind the store's [`FileSystem`] seam and
//! fails the k-th call, once or from then on, with `EIO`, `ENOSPC` or a short write. For every
//! k over a save, a delete and an open, the suites check that the call either succeeds or
//! returns an [`ErrorKind::Io`] error naming a path in the store, that the old snapshot is
//! byte-identical whenever the error came before the rename, that no temporary file is left
//! (also after reopening), and that a failed fsync is never retried on the same file. Two
//! deliberately broken writers (one retries a failed fsync, one leaves its temporary file)
//! must be caught by the same checks. One real full disk (a 256 KiB tmpfs) closes the suite.
//!
//! Run: `cargo test --lib store::fault_injection -- --nocapture` (the figures are printed);
//! `AGENT_SESSION_LONG=1` adds large snapshots.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::atomic::{self, ReplaceError};
use super::file::{FileSessionStore, DEFAULT_MAX_SNAPSHOT_BYTES};
use super::fs::{FileSystem, OsFileSystem};
use super::{Revision, SessionStore};
use crate::error::{Error, ErrorKind, Result};
use crate::id::SessionId;
use crate::snapshot::SessionSnapshot;
use crate::transcript::Message;

/// Fails the surrounding check with a message when `$cond` is false.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

// ---------------------------------------------------------------------------------------
// Helpers shared with the crash model.
// ---------------------------------------------------------------------------------------

/// True when `AGENT_SESSION_LONG=1`: run the exhaustive versions.
pub(super) fn long_run() -> bool {
    std::env::var_os("AGENT_SESSION_LONG").is_some_and(|v| v == "1")
}

/// A scratch directory, on tmpfs where there is one: these suites fsync thousands of times
/// and what they check is the store's logic, not the disk. The path is canonical, so it
/// compares equal to the store's resolved directory.
pub(super) fn scratch_dir() -> (tempfile::TempDir, PathBuf) {
    let shm = Path::new("/dev/shm");
    let dir = tempfile::Builder::new()
        .prefix("agent-session-test-")
        .tempdir_in(shm)
        .or_else(|_| tempfile::tempdir())
        .expect("create a scratch directory");
    let path = dir
        .path()
        .canonicalize()
        .expect("resolve the scratch directory");
    (dir, path)
}

/// The snapshot to save on top of `revision`: its transcript says `tag` and is padded to
/// about `size` bytes, so different revisions have different bytes and lengths.
pub(super) fn snapshot_on(
    id: &SessionId,
    revision: u64,
    tag: &str,
    size: usize,
) -> SessionSnapshot {
    let filler: String = format!("{tag} ").chars().cycle().take(size).collect();
    SessionSnapshot::builder(id.clone(), "test-model")
        .transcript(vec![
            Message::user(format!("revision after {revision}: {tag}")),
            Message::user(filler),
        ])
        .build()
        .expect("build a test snapshot")
        .with_revision(Revision::from_u64(revision))
}

/// The bytes the store writes for `snapshot` saved on top of its revision.
pub(super) fn encoded(snapshot: &SessionSnapshot) -> Vec<u8> {
    snapshot
        .to_json_with_revision(snapshot.revision().next())
        .expect("encode a test snapshot")
}

/// Names of temporary files (`.<id>.<random>.tmp`) in `dir`.
pub(super) fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list the store directory")
        .map(|entry| entry.expect("read a directory entry").file_name())
        .filter_map(|name| name.into_string().ok())
        .filter(|name| name.starts_with('.') && name.strip_suffix(".tmp").is_some())
        .collect()
}

/// A mounted file system, unmounted when dropped (also when a test panics).
#[derive(Debug)]
pub(super) struct Mounted {
    point: PathBuf,
}

impl Mounted {
    /// Runs `mount <args> <point>`; on failure prints why the caller skips and returns
    /// `None`.
    pub(super) fn mount(what: &str, args: &[&str], point: &Path) -> Option<Mounted> {
        match Command::new("mount").args(args).arg(point).output() {
            Ok(out) if out.status.success() => Some(Mounted {
                point: point.to_path_buf(),
            }),
            Ok(out) => {
                eprintln!(
                    "SKIPPED {what}: `mount {}` failed (needs root and loop/tmpfs support): {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED {what}: cannot run `mount`: {e}");
                None
            }
        }
    }

    /// Where it is mounted.
    pub(super) fn point(&self) -> &Path {
        &self.point
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.point)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Busy (a panic left a file open): detach it so nothing stays mounted.
            let _ = Command::new("umount").arg("-l").arg(&self.point).status();
        }
    }
}

// ---------------------------------------------------------------------------------------
// The faulty file system.
// ---------------------------------------------------------------------------------------

/// A call of the [`FileSystem`] seam.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    SymlinkMetadata,
    CreateDirPrivate,
    OpenDir,
    SetDirPrivate,
    CreateTemp,
    WriteAll,
    SyncFile,
    Rename,
    SyncDir,
    RemoveFile,
    OpenRead,
    OpenLock,
    ReadDir,
}

/// What the failing call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Fails with `EIO` without doing anything.
    Eio,
    /// Fails with `ENOSPC` without doing anything.
    Enospc,
    /// `write_all` writes the first half of the buffer, then fails with `ENOSPC`, as a write
    /// that fills the disk does. Used only at the write.
    ShortWrite,
}

impl Fault {
    fn errno(self) -> i32 {
        match self {
            Fault::Eio => libc::EIO,
            Fault::Enospc | Fault::ShortWrite => libc::ENOSPC,
        }
    }
}

/// Whether only the k-th call fails, or every call from the k-th on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Persistence {
    Once,
    Persistent,
}

/// One recorded call.
#[derive(Debug, Clone)]
struct Call {
    op: Op,
    /// The path it acted on (for `create_temp`, the temporary file it created).
    path: Option<PathBuf>,
    /// For calls on an open file: its (device, inode), which outlives fd reuse.
    inode: Option<(u64, u64)>,
    /// The errno it failed with, injected or real.
    errno: Option<i32>,
    /// Whether the failure was injected.
    injected: bool,
}

#[derive(Debug, Default)]
struct FaultState {
    armed: Option<(usize, Fault, Persistence)>,
    count: usize,
    calls: Vec<Call>,
}

/// The real file system, failing the k-th call (1-based, counted from [`arm`]) on demand and
/// recording every call.
///
/// [`arm`]: FaultyFileSystem::arm
#[derive(Debug, Default)]
struct FaultyFileSystem {
    inner: OsFileSystem,
    state: Mutex<FaultState>,
}

fn inode_of(file: &File) -> Option<(u64, u64)> {
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

impl FaultyFileSystem {
    fn state(&self) -> MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fails call `k` (counted from now) with `fault`, and with `Persistent` every later
    /// call too. Clears the record.
    fn arm(&self, k: usize, fault: Fault, persistence: Persistence) {
        let mut state = self.state();
        *state = FaultState {
            armed: Some((k, fault, persistence)),
            ..FaultState::default()
        };
    }

    /// Stops failing calls; returns the calls recorded since the last `arm` or `disarm`.
    fn disarm(&self) -> Vec<Call> {
        let mut state = self.state();
        state.armed = None;
        state.count = 0;
        std::mem::take(&mut state.calls)
    }

    /// Counts a call; returns the fault to inject into it, if any.
    fn next_fault(&self) -> Option<Fault> {
        let mut state = self.state();
        state.count += 1;
        match state.armed {
            Some((k, fault, Persistence::Once)) if state.count == k => Some(fault),
            Some((k, fault, Persistence::Persistent)) if state.count >= k => Some(fault),
            _ => None,
        }
    }

    fn record<T>(
        &self,
        op: Op,
        path: Option<&Path>,
        inode: Option<(u64, u64)>,
        fault: Option<Fault>,
        result: &io::Result<T>,
    ) {
        self.state().calls.push(Call {
            op,
            path: path.map(Path::to_path_buf),
            inode,
            errno: result
                .as_ref()
                .err()
                .map(|e| e.raw_os_error().unwrap_or(-1)),
            injected: fault.is_some(),
        });
    }

    /// Runs a path-based call, or fails it.
    fn call<T>(&self, op: Op, path: &Path, run: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let fault = self.next_fault();
        let result = match fault {
            Some(fault) => Err(io::Error::from_raw_os_error(fault.errno())),
            None => run(),
        };
        self.record(op, Some(path), None, fault, &result);
        result
    }
}

impl FileSystem for FaultyFileSystem {
    fn symlink_metadata(&self, path: &Path) -> io::Result<Metadata> {
        self.call(Op::SymlinkMetadata, path, || {
            self.inner.symlink_metadata(path)
        })
    }

    fn create_dir_private(&self, path: &Path) -> io::Result<()> {
        self.call(Op::CreateDirPrivate, path, || {
            self.inner.create_dir_private(path)
        })
    }

    fn open_dir(&self, path: &Path) -> io::Result<File> {
        self.call(Op::OpenDir, path, || self.inner.open_dir(path))
    }

    fn set_dir_private(&self, dir: &File) -> io::Result<()> {
        let fault = self.next_fault();
        let result = match fault {
            Some(fault) => Err(io::Error::from_raw_os_error(fault.errno())),
            None => self.inner.set_dir_private(dir),
        };
        self.record(Op::SetDirPrivate, None, inode_of(dir), fault, &result);
        result
    }

    fn create_temp(&self, dir: &Path, prefix: &str) -> io::Result<(File, PathBuf)> {
        let fault = self.next_fault();
        let result = match fault {
            Some(fault) => Err(io::Error::from_raw_os_error(fault.errno())),
            None => self.inner.create_temp(dir, prefix),
        };
        let (path, inode) = match &result {
            Ok((file, path)) => (path.as_path(), inode_of(file)),
            Err(_) => (dir, None),
        };
        self.record(Op::CreateTemp, Some(path), inode, fault, &result);
        result
    }

    fn write_all(&self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        let fault = self.next_fault();
        let result = match fault {
            Some(Fault::ShortWrite) => self
                .inner
                .write_all(file, &bytes[..bytes.len() / 2])
                .and_then(|()| Err(io::Error::from_raw_os_error(libc::ENOSPC))),
            Some(fault) => Err(io::Error::from_raw_os_error(fault.errno())),
            None => self.inner.write_all(file, bytes),
        };
        self.record(Op::WriteAll, None, inode_of(file), fault, &result);
        result
    }

    fn sync_file(&self, file: &File) -> io::Result<()> {
        let fault = self.next_fault();
        let result = match fault {
            Some(fault) => Err(io::Error::from_raw_os_error(fault.errno())),
            None => self.inner.sync_file(file),
        };
        self.record(Op::SyncFile, None, inode_of(file), fault, &result);
        result
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.call(Op::Rename, from, || self.inner.rename(from, to))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.call(Op::SyncDir, dir, || self.inner.sync_dir(dir))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.call(Op::RemoveFile, path, || self.inner.remove_file(path))
    }

    fn open_read(&self, path: &Path) -> io::Result<File> {
        self.call(Op::OpenRead, path, || self.inner.open_read(path))
    }

    fn open_lock(&self, path: &Path) -> io::Result<File> {
        self.call(Op::OpenLock, path, || self.inner.open_lock(path))
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.call(Op::ReadDir, dir, || self.inner.read_dir(dir))
    }
}

// ---------------------------------------------------------------------------------------
// Checks.
// ---------------------------------------------------------------------------------------

/// `err` is an [`ErrorKind::Io`] error carrying `errno` and naming `dir`, a path directly in
/// it, or one of its ancestors (opening a store inspects and fsyncs the directories above
/// it that it creates).
fn check_io_error(err: &Error, dir: &Path, errno: i32) -> Result<(), String> {
    ensure!(err.kind() == ErrorKind::Io, "not an Io-kind error: {err:?}");
    let Error::Io { path, source, .. } = err else {
        return Err(format!("not Error::Io: {err:?}"));
    };
    ensure!(
        source.raw_os_error() == Some(errno),
        "the cause is {source:?}, not errno {errno}"
    );
    ensure!(
        path == dir || path.parent() == Some(dir) || dir.starts_with(path),
        "the error names {}, outside the store {}",
        path.display(),
        dir.display()
    );
    ensure!(
        err.to_string().contains(&path.display().to_string()),
        "the message does not name the path: {err}"
    );
    Ok(())
}

/// `err` is [`Error::NotDurable`] (kind [`ErrorKind::Io`]) for revision `revision` of the
/// store in `dir`, carrying `errno` and saying that the save may not survive a power loss.
fn check_not_durable(err: &Error, dir: &Path, errno: i32, revision: u64) -> Result<(), String> {
    ensure!(err.kind() == ErrorKind::Io, "not an Io-kind error: {err:?}");
    let Error::NotDurable {
        revision: stored,
        dir: named,
        source,
        ..
    } = err
    else {
        return Err(format!("not Error::NotDurable: {err:?}"));
    };
    ensure!(
        stored.as_u64() == revision,
        "NotDurable names revision {stored}"
    );
    ensure!(named == dir, "NotDurable names {}", named.display());
    ensure!(
        source.raw_os_error() == Some(errno),
        "the cause is {source:?}, not errno {errno}"
    );
    let message = err.to_string();
    ensure!(
        message.contains(&dir.display().to_string())
            && message.contains("may not survive a power loss"),
        "the message does not name the directory and the risk: {message}"
    );
    Ok(())
}

/// After a failed `sync_file` on a file, no later `sync_file` on the same file.
fn check_no_fsync_retry(calls: &[Call]) -> Result<(), String> {
    let mut failed = HashSet::new();
    for (i, call) in calls.iter().enumerate() {
        if call.op != Op::SyncFile {
            continue;
        }
        let inode = call.inode.ok_or("sync_file on a file with no inode")?;
        ensure!(
            !failed.contains(&inode),
            "call {} retries sync_file on inode {inode:?} after it failed",
            i + 1
        );
        if call.errno.is_some() {
            failed.insert(inode);
        }
    }
    Ok(())
}

/// [`atomic::replace`], or a copy of it with a deliberate bug, for the negative controls.
type ReplaceFn = fn(&dyn FileSystem, &Path, &Path, &str, &[u8]) -> Result<(), ReplaceError>;

/// Control: `atomic::replace`, but a failed fsync is retried once, and a retry that
/// "succeeds" is taken as success, although the kernel may have dropped the data.
fn replace_retrying_fsync(
    fs: &dyn FileSystem,
    dir: &Path,
    target: &Path,
    temp_prefix: &str,
    bytes: &[u8],
) -> Result<(), ReplaceError> {
    let (mut file, temp) = fs
        .create_temp(dir, temp_prefix)
        .map_err(|e| ReplaceError::Unchanged(Error::io("create a temporary file in", dir, e)))?;
    let written = fs
        .write_all(&mut file, bytes)
        .map_err(|e| Error::io("write", &temp, e))
        .and_then(|()| {
            fs.sync_file(&file)
                .or_else(|_| fs.sync_file(&file)) // BROKEN: retried fsync
                .map_err(|e| Error::io("sync", &temp, e))
        });
    drop(file);
    let renamed = written.and_then(|()| {
        fs.rename(&temp, target)
            .map_err(|e| Error::io("rename a temporary file onto", target, e))
    });
    if let Err(err) = renamed {
        let _ = fs.remove_file(&temp);
        return Err(ReplaceError::Unchanged(err));
    }
    fs.sync_dir(dir).map_err(ReplaceError::NotDurable)
}

/// Control: `atomic::replace`, but a failure before the rename leaves the temporary file.
fn replace_leaving_temp(
    fs: &dyn FileSystem,
    dir: &Path,
    target: &Path,
    temp_prefix: &str,
    bytes: &[u8],
) -> Result<(), ReplaceError> {
    let (mut file, temp) = fs
        .create_temp(dir, temp_prefix)
        .map_err(|e| ReplaceError::Unchanged(Error::io("create a temporary file in", dir, e)))?;
    let written = fs
        .write_all(&mut file, bytes)
        .map_err(|e| Error::io("write", &temp, e))
        .and_then(|()| fs.sync_file(&file).map_err(|e| Error::io("sync", &temp, e)));
    drop(file);
    // BROKEN: no removal of the temporary file when this fails.
    written
        .and_then(|()| {
            fs.rename(&temp, target)
                .map_err(|e| Error::io("rename a temporary file onto", target, e))
        })
        .map_err(ReplaceError::Unchanged)?;
    fs.sync_dir(dir).map_err(ReplaceError::NotDurable)
}

/// Who performs the save under test.
#[derive(Clone, Copy)]
enum Saver {
    /// `FileSessionStore::save`.
    Store,
    /// A replace function called directly on the seam (the controls, or `atomic::replace`).
    Replace(&'static str, ReplaceFn),
}

impl Saver {
    fn name(self) -> &'static str {
        match self {
            Saver::Store => "FileSessionStore::save",
            Saver::Replace(name, _) => name,
        }
    }

    fn save(
        self,
        store: &FileSessionStore,
        fs: &FaultyFileSystem,
        snapshot: &SessionSnapshot,
    ) -> Result<Revision> {
        match self {
            Saver::Store => store.save(snapshot),
            Saver::Replace(_, replace) => {
                // As FileSessionStore::save turns the outcome of atomic::replace into errors.
                let id = snapshot.id();
                let target = store.path_of(id);
                let revision = snapshot.revision().next();
                let prefix = format!(".{id}.");
                match replace(fs, store.dir(), &target, &prefix, &encoded(snapshot)) {
                    Ok(()) => Ok(revision),
                    Err(ReplaceError::Unchanged(err)) => Err(err),
                    Err(ReplaceError::NotDurable(source)) => Err(Error::NotDurable {
                        id: id.clone(),
                        revision,
                        dir: store.dir().to_path_buf(),
                        source,
                    }),
                }
            }
        }
    }
}

/// What one faulted save showed, for the figures.
#[derive(Debug, Default, Clone, Copy)]
struct Facts {
    injected_into: Option<Op>,
    failed: bool,
    renamed_then_failed: bool,
    temp_left_until_reopen: bool,
}

const ID: &str = "s";

/// Saves a snapshot with call `k` of the save failing, then checks every promise. `existing`
/// says whether an older snapshot is stored first.
fn save_with_fault(
    saver: Saver,
    existing: bool,
    fault: Fault,
    persistence: Persistence,
    k: usize,
    size: usize,
) -> Result<Facts, String> {
    let (_scratch, base) = scratch_dir();
    let dir = base.join("store");
    let fs = Arc::new(FaultyFileSystem::default());
    let store = FileSessionStore::open_with(&dir, DEFAULT_MAX_SNAPSHOT_BYTES, fs.clone())
        .map_err(|e| format!("open: {e}"))?;
    let root = store.dir().to_path_buf();
    let id = SessionId::parse(ID).expect("valid id");
    let target = store.path_of(&id);
    let mut stored = 0;
    if existing {
        stored = saver
            .save(&store, &fs, &snapshot_on(&id, 0, "old", size))
            .map_err(|e| format!("setup save: {e}"))?
            .as_u64();
    }
    let old = std::fs::read(&target).ok();
    let snapshot = snapshot_on(&id, stored, "new", size / 2 + 7);
    let new = encoded(&snapshot);

    fs.arm(k, fault, persistence);
    let result = saver.save(&store, &fs, &snapshot);
    let calls = fs.disarm();
    check_no_fsync_retry(&calls)?;

    let now = std::fs::read(&target).ok();
    let mut facts = Facts::default();
    let expected = Expected {
        root: &root,
        stored,
        old: old.as_ref(),
        new: &new,
        now: now.as_ref(),
    };
    if check_save_result(&result, &calls, fault, &expected, &mut facts)? {
        stored += 1;
    }

    // No temporary file left, unless removing it failed too (a persistent fault).
    let cleanup_failed = calls
        .iter()
        .any(|c| c.op == Op::RemoveFile && c.errno.is_some());
    let temps = temp_files(&root);
    if cleanup_failed {
        ensure!(
            persistence == Persistence::Persistent,
            "the temporary file could not be removed under a one-off fault"
        );
        ensure!(temps.len() == 1, "temporary files left: {temps:?}");
        facts.temp_left_until_reopen = true;
    } else {
        ensure!(temps.is_empty(), "temporary files left: {temps:?}");
    }

    // Reopening (the fault gone) removes leftovers and changes no snapshot.
    let reopened = FileSessionStore::open(&root).map_err(|e| format!("reopen: {e}"))?;
    let leftover = temp_files(&root);
    ensure!(
        leftover.is_empty(),
        "temporary files left after reopening: {leftover:?}"
    );
    ensure!(
        std::fs::read(&target).ok() == now,
        "reopening changed the stored snapshot"
    );

    // The same store works once the fault clears, and never syncs a failed file again.
    let follow_up = snapshot_on(&id, stored, "follow-up", 100);
    let follow_up_revision = saver
        .save(&store, &fs, &follow_up)
        .map_err(|e| format!("save after the fault cleared: {e}"))?;
    let mut all_calls = calls;
    all_calls.extend(fs.disarm());
    check_no_fsync_retry(&all_calls)?;
    let loaded = reopened
        .load(&id)
        .map_err(|e| format!("load after the fault cleared: {e}"))?;
    ensure!(
        loaded.revision() == follow_up_revision,
        "loaded revision {}",
        loaded.revision()
    );
    Ok(facts)
}

/// What a faulted save is checked against.
struct Expected<'a> {
    /// The store's directory.
    root: &'a Path,
    /// The stored revision before the save.
    stored: u64,
    /// The snapshot file before and after a successful save, and now.
    old: Option<&'a Vec<u8>>,
    new: &'a Vec<u8>,
    now: Option<&'a Vec<u8>>,
}

/// Checks the result of a faulted save and the calls it made; returns whether the new
/// snapshot is now stored.
fn check_save_result(
    result: &Result<Revision>,
    calls: &[Call],
    fault: Fault,
    expected: &Expected<'_>,
    facts: &mut Facts,
) -> Result<bool, String> {
    let first_injected = calls.iter().position(|c| c.injected);
    facts.injected_into = first_injected.map(|i| calls[i].op);
    let err = match result {
        Ok(revision) => {
            ensure!(
                first_injected.is_none(),
                "the save succeeded although call {} ({:?}) failed",
                first_injected.unwrap_or(0) + 1,
                facts.injected_into
            );
            ensure!(
                revision.as_u64() == expected.stored + 1,
                "returned revision {revision}"
            );
            ensure!(
                expected.now == Some(expected.new),
                "an acknowledged save is not in place"
            );
            return Ok(true);
        }
        Err(err) => err,
    };
    facts.failed = true;
    let i = first_injected.ok_or_else(|| format!("failed with no fault injected: {err}"))?;
    // After the failed call, only the removal of the temporary file may follow.
    let temp = calls
        .iter()
        .find(|c| c.op == Op::CreateTemp && c.errno.is_none())
        .and_then(|c| c.path.clone());
    for later in &calls[i + 1..] {
        ensure!(
            later.op == Op::RemoveFile && later.path == temp,
            "after the failed call {} ({:?}) came {:?} on {:?}",
            i + 1,
            calls[i].op,
            later.op,
            later.path
        );
    }
    let renamed = calls
        .iter()
        .any(|c| c.op == Op::Rename && c.errno.is_none());
    if !renamed {
        check_io_error(err, expected.root, fault.errno())?;
        ensure!(
            expected.now == expected.old,
            "an error before the rename changed the stored snapshot"
        );
        return Ok(false);
    }
    // Documented (Error::NotDurable, atomic::replace): after the rename the new snapshot
    // is in place, and the error says it may not survive a power loss.
    facts.renamed_then_failed = true;
    ensure!(
        calls[i].op == Op::SyncDir,
        "a failure after the rename was not the directory fsync"
    );
    check_not_durable(err, expected.root, fault.errno(), expected.stored + 1)?;
    ensure!(
        expected.now == Some(expected.new),
        "the rename happened but the new snapshot is not in place"
    );
    Ok(true)
}

/// The calls of a clean save: the k range to enumerate.
fn clean_save_calls(saver: Saver, existing: bool) -> Vec<Op> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store =
        FileSessionStore::open_with(&base.join("store"), DEFAULT_MAX_SNAPSHOT_BYTES, fs.clone())
            .expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    let mut revision = 0;
    if existing {
        revision = saver
            .save(&store, &fs, &snapshot_on(&id, 0, "old", 10))
            .expect("save")
            .as_u64();
    }
    fs.disarm();
    saver
        .save(&store, &fs, &snapshot_on(&id, revision, "new", 10))
        .expect("save");
    fs.disarm().iter().map(|c| c.op).collect()
}

/// Runs `save_with_fault` for every call, fault and persistence; returns the failures.
fn sweep_saves(saver: Saver, figures: &mut SaveFigures) -> Vec<String> {
    let sizes: &[usize] = if long_run() { &[300, 70_000] } else { &[300] };
    let mut failures = Vec::new();
    for &existing in &[true, false] {
        let ops = clean_save_calls(saver, existing);
        // k = ops.len() + 1 fails nothing: the save must simply succeed.
        for k in 1..=ops.len() + 1 {
            let faults: &[Fault] = match ops.get(k - 1) {
                Some(Op::WriteAll) => &[Fault::Eio, Fault::Enospc, Fault::ShortWrite],
                _ => &[Fault::Eio, Fault::Enospc],
            };
            for &fault in faults {
                for persistence in [Persistence::Once, Persistence::Persistent] {
                    for &size in sizes {
                        let label = format!(
                            "{} ({} snapshot), {fault:?} {persistence:?} at call {k} of {:?}",
                            saver.name(),
                            if existing {
                                "replacing an old"
                            } else {
                                "first"
                            },
                            ops
                        );
                        match save_with_fault(saver, existing, fault, persistence, k, size) {
                            Ok(facts) => figures.add(facts, fault),
                            Err(why) => failures.push(format!("{label}: {why}")),
                        }
                    }
                }
            }
        }
    }
    failures
}

#[derive(Debug, Default)]
struct SaveFigures {
    runs: usize,
    failed_saves: usize,
    by_op: std::collections::BTreeMap<String, usize>,
    short_writes: usize,
    after_rename: usize,
    temp_left_until_reopen: usize,
}

impl SaveFigures {
    fn add(&mut self, facts: Facts, fault: Fault) {
        self.runs += 1;
        if facts.failed {
            self.failed_saves += 1;
        }
        if let Some(op) = facts.injected_into {
            *self.by_op.entry(format!("{op:?}")).or_default() += 1;
            if fault == Fault::ShortWrite {
                self.short_writes += 1;
            }
        }
        if facts.renamed_then_failed {
            self.after_rename += 1;
        }
        if facts.temp_left_until_reopen {
            self.temp_left_until_reopen += 1;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------

#[test]
fn clean_calls_of_save_delete_and_open_are_in_the_durable_order() {
    use Op::{
        CreateDirPrivate, CreateTemp, OpenDir, OpenLock, OpenRead, ReadDir, RemoveFile, Rename,
        SetDirPrivate, SymlinkMetadata, SyncDir, SyncFile, WriteAll,
    };
    // The store checks that its directory is still the one it opened, reads the stored
    // revision (and, when there is a file, checks its name still points at it), then
    // replaces the file.
    let replacing = [CreateTemp, WriteAll, SyncFile, Rename, SyncDir];
    let over_existing = [
        [SymlinkMetadata, OpenRead, SymlinkMetadata].as_slice(),
        &replacing,
    ]
    .concat();
    let first = [[SymlinkMetadata, OpenRead].as_slice(), &replacing].concat();
    assert_eq!(clean_save_calls(Saver::Store, true), over_existing);
    assert_eq!(clean_save_calls(Saver::Store, false), first);
    let expected = [[OpenRead].as_slice(), &replacing].concat();
    // The real replace and the controls make the same calls when nothing fails.
    let replace = Saver::Replace("atomic::replace", atomic::replace);
    assert_eq!(clean_save_calls(replace, true), expected[1..]);
    for control in [
        Saver::Replace("retrying", replace_retrying_fsync),
        Saver::Replace("leaving", replace_leaving_temp),
    ] {
        assert_eq!(clean_save_calls(control, true), expected[1..]);
    }
    assert_eq!(
        clean_delete_calls(),
        [SymlinkMetadata, SymlinkMetadata, RemoveFile, SyncDir]
    );
    assert_eq!(
        clean_open_calls(OpenCase::WithLeftover),
        [
            SymlinkMetadata,
            OpenDir,
            SymlinkMetadata,
            OpenLock,
            ReadDir,
            SymlinkMetadata,
            RemoveFile
        ]
    );
    assert_eq!(
        clean_open_calls(OpenCase::EmptyReadable),
        [
            SymlinkMetadata,
            OpenDir,
            ReadDir,
            SetDirPrivate,
            SymlinkMetadata,
            OpenLock,
            ReadDir
        ]
    );
    let tail = [OpenDir, SymlinkMetadata, OpenLock, ReadDir];
    let creating = [
        [SymlinkMetadata, SymlinkMetadata, CreateDirPrivate, SyncDir].as_slice(),
        &tail,
    ]
    .concat();
    assert_eq!(clean_open_calls(OpenCase::Missing), creating);
    let creating_parent_too = [
        [
            SymlinkMetadata,
            SymlinkMetadata,
            SymlinkMetadata,
            CreateDirPrivate,
            SyncDir,
            CreateDirPrivate,
            SyncDir,
        ]
        .as_slice(),
        &tail,
    ]
    .concat();
    assert_eq!(
        clean_open_calls(OpenCase::MissingParent),
        creating_parent_too
    );
}

#[test]
fn every_failing_call_of_a_save_gives_a_typed_error_and_keeps_the_old_snapshot() {
    let mut figures = SaveFigures::default();
    let failures = sweep_saves(Saver::Store, &mut figures);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The sweep really failed every step: each call of a save was hit.
    for op in [
        "OpenRead",
        "CreateTemp",
        "WriteAll",
        "SyncFile",
        "Rename",
        "SyncDir",
    ] {
        assert!(
            figures.by_op.get(op).copied().unwrap_or(0) > 0,
            "{op} was never failed"
        );
    }
    assert!(figures.short_writes > 0 && figures.after_rename > 0);
    eprintln!(
        "fault injection, save: {} faulted saves ({} failed with an Io-kind error, the rest \
         succeeded with no fault reached); injected per call: {:?}; short writes: {}; \
         failures after the rename (directory fsync: Error::NotDurable, new snapshot in \
         place): {}; temporary file left only because its removal failed too, removed on \
         reopen: {}",
        figures.runs,
        figures.failed_saves,
        figures.by_op,
        figures.short_writes,
        figures.after_rename,
        figures.temp_left_until_reopen
    );
}

#[test]
fn the_real_replace_passes_and_both_broken_writers_are_caught_by_the_fault_sweep() {
    let mut figures = SaveFigures::default();
    let real = sweep_saves(
        Saver::Replace("atomic::replace", atomic::replace),
        &mut figures,
    );
    assert!(real.is_empty(), "{}", real.join("\n"));

    let retrying = sweep_saves(
        Saver::Replace("control: retries a failed fsync", replace_retrying_fsync),
        &mut SaveFigures::default(),
    );
    assert!(
        retrying.iter().any(|f| f.contains("retries sync_file")),
        "the fsync-retrying writer was not caught: {retrying:?}"
    );
    let leaving = sweep_saves(
        Saver::Replace("control: leaves its temporary file", replace_leaving_temp),
        &mut SaveFigures::default(),
    );
    assert!(
        leaving.iter().any(|f| f.contains("temporary files left")),
        "the temp-leaving writer was not caught: {leaving:?}"
    );
    eprintln!(
        "fault injection, negative controls: the fsync-retrying writer failed {} of the \
         faulted saves, the temp-leaving writer {}; the real atomic::replace 0 of {}",
        retrying.len(),
        leaving.len(),
        figures.runs
    );
}

#[test]
fn a_failed_directory_fsync_after_the_rename_reports_that_the_new_snapshot_may_not_be_durable() {
    // The eighth call of a save over an existing file is the directory fsync, after the
    // rename.
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store =
        FileSessionStore::open_with(&base.join("store"), DEFAULT_MAX_SNAPSHOT_BYTES, fs.clone())
            .expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    let first = snapshot_on(&id, 0, "old", 100);
    store.save(&first).expect("save");
    let second = snapshot_on(&id, 1, "new", 100);
    fs.arm(8, Fault::Eio, Persistence::Once);
    let err = store.save(&second).expect_err("the directory fsync fails");
    let calls = fs.disarm();
    assert_eq!(calls[7].op, Op::SyncDir);
    assert!(calls[7].injected);
    check_not_durable(&err, store.dir(), libc::EIO, 2).expect("Error::NotDurable");
    // The new snapshot is in place (the rename is done) ...
    assert_eq!(
        std::fs::read(store.path_of(&id)).expect("read"),
        encoded(&second)
    );
    assert_eq!(
        store.load(&id).expect("load").revision(),
        Revision::from_u64(2)
    );
    // ... so retrying the same save is a conflict; saving again on top of the revision
    // the error names makes it durable, as the error says.
    assert!(store.save(&second).expect_err("stale").is_conflict());
    let Error::NotDurable { revision, .. } = err else {
        unreachable!()
    };
    let third = snapshot_on(&id, revision.as_u64(), "again", 100);
    assert_eq!(
        store.save(&third).expect("save again"),
        Revision::from_u64(3)
    );
    let calls = fs.disarm();
    assert_eq!(
        calls.last().map(|c| (c.op, c.errno)),
        Some((Op::SyncDir, None))
    );
    assert!(temp_files(store.dir()).is_empty());
}

#[test]
fn a_failed_fsync_is_never_retried_on_the_same_file() {
    for persistence in [Persistence::Once, Persistence::Persistent] {
        let (_scratch, base) = scratch_dir();
        let fs = Arc::new(FaultyFileSystem::default());
        let store = FileSessionStore::open_with(
            &base.join("store"),
            DEFAULT_MAX_SNAPSHOT_BYTES,
            fs.clone(),
        )
        .expect("open");
        let id = SessionId::parse(ID).expect("valid id");
        // Call 5 of a first save is the file fsync.
        fs.arm(5, Fault::Eio, persistence);
        let err = store
            .save(&snapshot_on(&id, 0, "new", 100))
            .expect_err("fsync fails");
        let mut calls = fs.disarm();
        assert_eq!(calls[4].op, Op::SyncFile);
        let failed_inode = calls[4].inode.expect("inode");
        assert!(err.to_string().contains("could not sync"), "{err}");
        // Nothing syncs the failed file again: not this save, not the next one.
        store
            .save(&snapshot_on(&id, 0, "again", 100))
            .expect("the next save works");
        calls.extend(fs.disarm());
        let syncs: Vec<_> = calls.iter().filter(|c| c.op == Op::SyncFile).collect();
        assert_eq!(syncs.len(), 2, "{calls:?}");
        assert_eq!(
            syncs
                .iter()
                .filter(|c| c.inode == Some(failed_inode))
                .count(),
            1
        );
        check_no_fsync_retry(&calls).expect("no retry");
    }
}

fn clean_delete_calls() -> Vec<Op> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store =
        FileSessionStore::open_with(&base.join("store"), DEFAULT_MAX_SNAPSHOT_BYTES, fs.clone())
            .expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    store.save(&snapshot_on(&id, 0, "old", 10)).expect("save");
    fs.disarm();
    store.delete(&id).expect("delete");
    fs.disarm().iter().map(|c| c.op).collect()
}

fn delete_with_fault(fault: Fault, persistence: Persistence, k: usize) -> Result<bool, String> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store =
        FileSessionStore::open_with(&base.join("store"), DEFAULT_MAX_SNAPSHOT_BYTES, fs.clone())
            .map_err(|e| format!("open: {e}"))?;
    let root = store.dir().to_path_buf();
    let id = SessionId::parse(ID).expect("valid id");
    let target = store.path_of(&id);
    store
        .save(&snapshot_on(&id, 0, "old", 300))
        .map_err(|e| format!("setup: {e}"))?;
    let old = std::fs::read(&target).map_err(|e| e.to_string())?;
    fs.arm(k, fault, persistence);
    let result = store.delete(&id);
    let calls = fs.disarm();
    let injected = calls.iter().position(|c| c.injected);
    let removed = calls
        .iter()
        .any(|c| c.op == Op::RemoveFile && c.errno.is_none());
    let now = std::fs::read(&target).ok();
    match &result {
        Ok(()) => {
            ensure!(injected.is_none(), "delete succeeded despite a failed call");
            ensure!(now.is_none(), "deleted but still there");
        }
        Err(err) => {
            let i = injected.ok_or_else(|| format!("failed with no fault: {err}"))?;
            check_io_error(err, &root, fault.errno())?;
            ensure!(calls.len() == i + 1, "calls after the failure: {calls:?}");
            if removed {
                // The file is gone; the error says the directory was not synced.
                ensure!(
                    calls[i].op == Op::SyncDir,
                    "failure after the unlink: {:?}",
                    calls[i].op
                );
                ensure!(now.is_none(), "unlinked but still there");
                ensure!(
                    err.to_string()
                        .contains("sync the directory after a delete"),
                    "{err}"
                );
            } else {
                ensure!(
                    now.as_ref() == Some(&old),
                    "a failed delete changed the snapshot"
                );
            }
        }
    }
    ensure!(temp_files(&root).is_empty(), "temporary file left");
    let reopened = FileSessionStore::open(&root).map_err(|e| format!("reopen: {e}"))?;
    match reopened.load(&id) {
        Ok(snapshot) => {
            ensure!(
                now.is_some() && snapshot.revision().as_u64() == 1,
                "loaded {snapshot:?}"
            );
            reopened
                .delete(&id)
                .map_err(|e| format!("delete after the fault: {e}"))?;
        }
        Err(e) => ensure!(e.is_not_found() && now.is_none(), "load: {e}"),
    }
    Ok(result.is_err())
}

#[test]
fn every_failing_call_of_a_delete_gives_a_typed_error_and_keeps_or_removes_the_snapshot() {
    let calls = clean_delete_calls();
    let (mut runs, mut failed) = (0, 0);
    let mut failures = Vec::new();
    for k in 1..=calls.len() + 1 {
        for fault in [Fault::Eio, Fault::Enospc] {
            for persistence in [Persistence::Once, Persistence::Persistent] {
                match delete_with_fault(fault, persistence, k) {
                    Ok(err) => {
                        runs += 1;
                        failed += usize::from(err);
                    }
                    Err(why) => {
                        failures.push(format!("{fault:?} {persistence:?} at call {k}: {why}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("fault injection, delete: {runs} faulted deletes over calls {calls:?}, {failed} failed with a typed Io error");
}

/// The directories an open is tried on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenCase {
    /// A private store holding one snapshot and a temporary file left by a crashed save.
    WithLeftover,
    /// An existing empty directory that others can read: opening makes it 0700.
    EmptyReadable,
    /// No directory yet (its parent exists): opening creates it.
    Missing,
    /// Neither the directory nor its parent exists.
    MissingParent,
}

const OPEN_CASES: [OpenCase; 4] = [
    OpenCase::WithLeftover,
    OpenCase::EmptyReadable,
    OpenCase::Missing,
    OpenCase::MissingParent,
];

/// Prepares the directory of `case`; returns it and the snapshot file's bytes, if any.
fn prepare_open(base: &Path, case: OpenCase) -> (PathBuf, Option<Vec<u8>>) {
    let dir = base.join("store");
    match case {
        OpenCase::WithLeftover => {
            let store = FileSessionStore::open(&dir).expect("open");
            let id = SessionId::parse(ID).expect("valid id");
            store.save(&snapshot_on(&id, 0, "old", 300)).expect("save");
            let bytes = std::fs::read(store.path_of(&id)).expect("read");
            std::fs::write(dir.join(".s.leftover0123456789.tmp"), b"half a snapsh")
                .expect("plant a leftover");
            (dir, Some(bytes))
        }
        OpenCase::EmptyReadable => {
            std::fs::create_dir(&dir).expect("create");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).expect("chmod");
            (dir, None)
        }
        OpenCase::Missing => (dir, None),
        OpenCase::MissingParent => (base.join("parent").join("store"), None),
    }
}

fn clean_open_calls(case: OpenCase) -> Vec<Op> {
    let (_scratch, base) = scratch_dir();
    let (dir, _) = prepare_open(&base, case);
    let fs = Arc::new(FaultyFileSystem::default());
    FileSessionStore::open_with(&dir, DEFAULT_MAX_SNAPSHOT_BYTES, fs.clone()).expect("open");
    fs.disarm().iter().map(|c| c.op).collect()
}

/// Whether `call` belongs to the best-effort removal of leftover temporary files.
fn is_leftover_cleanup(call: &Call) -> bool {
    matches!(call.op, Op::SymlinkMetadata | Op::RemoveFile)
        && call
            .path
            .as_ref()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.') && n.strip_suffix(".tmp").is_some())
}

/// Opens the directory of `case` with call `k` failing; returns whether open failed.
fn open_with_fault(
    case: OpenCase,
    fault: Fault,
    persistence: Persistence,
    k: usize,
) -> Result<bool, String> {
    let (_scratch, base) = scratch_dir();
    let (dir, old) = prepare_open(&base, case);
    let fs = Arc::new(FaultyFileSystem::default());
    fs.arm(k, fault, persistence);
    let result = FileSessionStore::open_with(&dir, DEFAULT_MAX_SNAPSHOT_BYTES, fs.clone());
    let calls = fs.disarm();
    let injected = calls.iter().position(|c| c.injected);
    match &result {
        Ok(_) => {
            // Only the removal of leftovers is best effort; any other failure must surface.
            if let Some(call) = calls.iter().find(|c| c.injected && !is_leftover_cleanup(c)) {
                return Err(format!("open succeeded although {:?} failed", call.op));
            }
            let mode = std::fs::metadata(&dir).map_err(|e| e.to_string())?.mode();
            ensure!(
                mode & 0o777 == 0o700,
                "opened, but the directory is {mode:o}"
            );
        }
        Err(err) => {
            let i = injected.ok_or_else(|| format!("failed with no fault: {err}"))?;
            // The error names the directory, its parent, or the lock file in it.
            let named = |d: &Path| check_io_error(err, d, fault.errno());
            named(&dir)
                .or_else(|_| named(dir.parent().unwrap_or(&dir)))
                .map_err(|e| format!("{e} ({err})"))?;
            ensure!(calls.len() == i + 1, "calls after the failure: {calls:?}");
        }
    }
    let failed = result.is_err();
    drop(result);
    let target = dir.join(format!("{ID}.json"));
    ensure!(
        std::fs::read(&target).ok() == old,
        "opening changed the snapshot"
    );
    let reopened = FileSessionStore::open(&dir).map_err(|e| format!("reopen: {e}"))?;
    ensure!(
        temp_files(&dir).is_empty(),
        "temporary file left after reopening"
    );
    ensure!(
        std::fs::read(&target).ok() == old,
        "reopening changed the snapshot"
    );
    if old.is_some() {
        let id = SessionId::parse(ID).expect("valid id");
        reopened.load(&id).map_err(|e| format!("load: {e}"))?;
    }
    Ok(failed)
}

#[test]
fn every_failing_call_of_an_open_gives_a_typed_error_and_changes_no_snapshot() {
    let (mut runs, mut failed) = (0, 0);
    let mut failures = Vec::new();
    for case in OPEN_CASES {
        let calls = clean_open_calls(case);
        for k in 1..=calls.len() + 1 {
            for fault in [Fault::Eio, Fault::Enospc] {
                for persistence in [Persistence::Once, Persistence::Persistent] {
                    match open_with_fault(case, fault, persistence, k) {
                        Ok(err) => {
                            runs += 1;
                            failed += usize::from(err);
                        }
                        Err(why) => failures.push(format!(
                            "{case:?}, {fault:?} {persistence:?} at call {k} of {calls:?}: {why}"
                        )),
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "fault injection, open: {runs} faulted opens over {} directory cases, {failed} failed \
         with a typed Io error, the rest succeeded (no fault reached, or only the best-effort \
         removal of a leftover temporary file failed; a healthy reopen removed it)",
        OPEN_CASES.len()
    );
}

#[test]
fn a_real_full_disk_fails_saves_with_enospc_and_keeps_the_old_snapshot() {
    let (_scratch, base) = scratch_dir();
    let point = base.join("tmpfs");
    std::fs::create_dir(&point).expect("mount point");
    let Some(mounted) = Mounted::mount(
        "the real full-disk test",
        &["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"],
        &point,
    ) else {
        return;
    };
    let dir = mounted.point().join("store");
    let store = FileSessionStore::open(&dir).expect("open on tmpfs");
    let root = store.dir().to_path_buf();
    let id = SessionId::parse(ID).expect("valid id");
    let target = store.path_of(&id);
    let first = snapshot_on(&id, 0, "old", 2_000);
    store.save(&first).expect("a small save fits");
    let old = std::fs::read(&target).expect("read");

    // 1. A snapshot larger than the whole disk: the write runs out of space part-way.
    let huge = snapshot_on(&id, 1, "huge", 400 * 1024);
    let err = store.save(&huge).expect_err("the disk is full");
    check_io_error(&err, &root, libc::ENOSPC).expect("typed ENOSPC error");
    assert!(
        err.to_string().contains(".tmp"),
        "names the temporary file: {err}"
    );
    assert_eq!(
        std::fs::read(&target).expect("read"),
        old,
        "old snapshot intact"
    );
    assert!(temp_files(&root).is_empty(), "{:?}", temp_files(&root));

    // 2. A disk filled by someone else: even a small save fails, cleanly.
    let filler = mounted.point().join("filler");
    let chunk = vec![0x5a_u8; 4096];
    {
        use std::io::Write;
        let mut file = File::create(&filler).expect("filler");
        while file.write_all(&chunk).is_ok() {}
    }
    let small = snapshot_on(&id, 1, "small", 3_000);
    let err = store.save(&small).expect_err("no space left");
    check_io_error(&err, &root, libc::ENOSPC).expect("typed ENOSPC error");
    assert_eq!(
        std::fs::read(&target).expect("read"),
        old,
        "old snapshot intact"
    );
    assert!(temp_files(&root).is_empty(), "{:?}", temp_files(&root));
    assert_eq!(
        store.load(&id).expect("load").revision(),
        Revision::from_u64(1)
    );

    // 3. Space freed: the same save now succeeds, and a reopened store sees it.
    std::fs::remove_file(&filler).expect("free space");
    assert_eq!(store.save(&small).expect("fits now"), Revision::from_u64(2));
    drop(store);
    let reopened = FileSessionStore::open(&root).expect("reopen");
    assert!(temp_files(&root).is_empty());
    assert_eq!(
        reopened.load(&id).expect("load").revision(),
        Revision::from_u64(2)
    );
    drop(reopened);
    drop(mounted);
    eprintln!("fault injection, real full disk (256 KiB tmpfs): 2 saves hit ENOSPC, both typed Io errors with the old snapshot intact and no temporary file left");
}
