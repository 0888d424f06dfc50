//! I/O errors at every step of a save (journal appends included), a delete and an open.
//!
//! [`FaultyFileSystem`] wraps the real file system behind the store's [`FileSystem`] seam and
//! fails the k-th call, once or from then on, with `EIO`, `ENOSPC` or a short write (at
//! `write_all` and `write_all_at`). For every k over a save, a delete and an open, the
//! suites check that the call either succeeds or returns an [`ErrorKind::Io`] error naming a
//! path in the store, that the old snapshot is byte-identical whenever the error came before
//! the rename, that no temporary file is left (also after reopening), and that a failed
//! fsync (`sync_file` or `sync_data`) is never retried on the same file without the bytes it
//! was for cut off first. Only best-effort bookkeeping (the listing summary, and once the
//! new base is renamed into place, emptying the stale journal) may fail under a save that
//! succeeds. Two deliberately broken writers (one retries a failed fsync, one leaves its
//! temporary file) must be caught by the same checks. One real full disk (a 256 KiB tmpfs)
//! closes the suite.
//!
//! The journal: for the first append (the journal created), an append to a journal with
//! records, an append after a full rewrite emptied the journal (started again at offset 0),
//! an append over a stale journal (an older base's records, read by a new store instance),
//! a compaction (a journal past its bound: full rewrite, journal emptied) and a delete of a
//! session with a journal and a summary, every call is failed in every way: what a fresh
//! store loads must be exactly the old revision (the new one after success or
//! [`Error::NotDurable`]), the listing must agree with it, and the same store must then
//! save the failed snapshot again and append one more turn, each loading back exactly.
//! Across those operations, a directory change (a rename over the base, the journal's
//! creation) whose directory fsync failed or never came must be made durable before any
//! later save is acknowledged, and the old base's journal must not be cut or rewritten
//! while the rename over that base may still be undone by a power cut.
//!
//! Run: `cargo test --lib store::file::tests::fault_injection -- --nocapture` (the figures are printed);
//! `AGENT_SESSION_LONG=1` adds large snapshots.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::journal_in_format_1;
use crate::compactor::Compaction;
use crate::error::{Error, ErrorKind, Result};
use crate::id::SessionId;
use crate::snapshot::{ForkAt, RewindTo, SessionSnapshot};
use crate::store::file::atomic::{self, ReplaceError};
use crate::store::file::fs::{FileSystem, OsFileSystem};
use crate::store::file::FileSessionStore;
use crate::store::DEFAULT_MAX_SNAPSHOT_BYTES;
use crate::store::{Revision, SessionStore};
use crate::transcript::{ContentBlock, Message};
use crate::usage::Usage;
use crate::SessionStoreExt;

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

/// `snapshot` with a turn appended: a user message saying `tag`, padded to about `size`
/// bytes, an assistant reply and its usage. It keeps what `snapshot` knows about the stored
/// state (a snapshot loaded from a store knows it), so saving it appends to the journal.
pub(super) fn appended(snapshot: &SessionSnapshot, tag: &str, size: usize) -> SessionSnapshot {
    let filler: String = format!("{tag} ").chars().cycle().take(size).collect();
    let updated_at = snapshot.updated_at() + chrono::TimeDelta::milliseconds(1);
    snapshot
        .clone()
        .with_appended(
            vec![
                Message::user(filler),
                Message::assistant(vec![ContentBlock::text(format!("reply to {tag}"))]),
            ],
            vec![Usage::new("test-model").with_tokens(3, 1)],
            updated_at,
        )
        .expect("append a turn")
}

/// What a load gives once `snapshot` is saved on top of its revision: the same snapshot at
/// the next revision.
pub(super) fn saved(snapshot: &SessionSnapshot) -> SessionSnapshot {
    snapshot.clone().with_revision(snapshot.revision().next())
}

/// The files of session `id` (`.json`, `.journal`, `.summary`, `.view`, `.archived`) present in
/// `dir`.
pub(super) fn session_files(dir: &Path, id: &SessionId) -> Vec<String> {
    ["json", "journal", "summary", "view", "archived"]
        .iter()
        .map(|suffix| format!("{id}.{suffix}"))
        .filter(|name| std::fs::symlink_metadata(dir.join(name)).is_ok())
        .collect()
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
    OpenWrite,
    CreatePrivate,
    WriteAllAt,
    SetLen,
    SyncData,
    SetFilePrivate,
}

/// What the failing call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Fails with `EIO` without doing anything.
    Eio,
    /// Fails with `ENOSPC` without doing anything.
    Enospc,
    /// `write_all` (or `write_all_at`) writes the first half of the buffer, then fails with
    /// `ENOSPC`, as a write that fills the disk does. Used only at the writes.
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
    /// The path it acted on (for `create_temp`, the temporary file it created; for a call
    /// on an open file, the path that file was opened or created under).
    path: Option<PathBuf>,
    /// For calls on an open file: its (device, inode), which outlives fd reuse.
    inode: Option<(u64, u64)>,
    /// For `write_all_at`, the offset; for `set_len`, the length.
    at: Option<u64>,
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
    /// The path each file opened or created through the seam was opened under, by inode:
    /// calls on an open file are recorded with it. Kept across `arm` and `disarm`.
    paths: HashMap<(u64, u64), PathBuf>,
    /// How many more times a snapshot (`.json`) opened for reading is replaced by a copy
    /// (a new inode) right after it is opened: a writer rewriting the session under a
    /// reader.
    rewrites_under_reads: usize,
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
        state.armed = Some((k, fault, persistence));
        state.count = 0;
        state.calls.clear();
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
            at: None,
            errno: result
                .as_ref()
                .err()
                .map(|e| e.raw_os_error().unwrap_or(-1)),
            injected: fault.is_some(),
        });
    }

    /// Notes the offset or length of the call just recorded.
    fn note_at(&self, at: u64) {
        if let Some(call) = self.state().calls.last_mut() {
            call.at = Some(at);
        }
    }

    /// The path `file` was opened under, if it was opened through the seam.
    fn path_of(&self, file: &File) -> (Option<PathBuf>, Option<(u64, u64)>) {
        let inode = inode_of(file);
        let path = inode.and_then(|i| self.state().paths.get(&i).cloned());
        (path, inode)
    }

    /// Remembers the path an opened file was opened under.
    fn opened(&self, path: &Path, file: &File) {
        if let Some(inode) = inode_of(file) {
            self.state().paths.insert(inode, path.to_path_buf());
        }
    }

    /// Runs a call on an open file, or fails it.
    fn call_on<T>(
        &self,
        op: Op,
        file: &File,
        run: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let fault = self.next_fault();
        let result = match fault {
            Some(fault) => Err(io::Error::from_raw_os_error(fault.errno())),
            None => run(),
        };
        let (path, inode) = self.path_of(file);
        self.record(op, path.as_deref(), inode, fault, &result);
        result
    }

    /// Runs a path-based call that opens a file, or fails it.
    fn call_open(
        &self,
        op: Op,
        path: &Path,
        run: impl FnOnce() -> io::Result<File>,
    ) -> io::Result<File> {
        let result = self.call(op, path, run);
        if let Ok(file) = &result {
            self.opened(path, file);
        }
        result
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
        self.call_on(Op::SetDirPrivate, dir, || self.inner.set_dir_private(dir))
    }

    fn create_temp(&self, dir: &Path, prefix: &str) -> io::Result<(File, PathBuf)> {
        let fault = self.next_fault();
        let result = match fault {
            Some(fault) => Err(io::Error::from_raw_os_error(fault.errno())),
            None => self.inner.create_temp(dir, prefix),
        };
        let (path, inode) = match &result {
            Ok((file, path)) => {
                self.opened(path, file);
                (path.as_path(), inode_of(file))
            }
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
        let (path, inode) = self.path_of(file);
        self.record(Op::WriteAll, path.as_deref(), inode, fault, &result);
        result
    }

    fn sync_file(&self, file: &File) -> io::Result<()> {
        self.call_on(Op::SyncFile, file, || self.inner.sync_file(file))
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
        let file = self.call_open(Op::OpenRead, path, || self.inner.open_read(path))?;
        let rewrite = {
            let mut state = self.state();
            let due =
                state.rewrites_under_reads > 0 && path.extension().is_some_and(|e| e == "json");
            if due {
                state.rewrites_under_reads -= 1;
            }
            due
        };
        if rewrite {
            let copy = path.with_extension("rewritten");
            std::fs::copy(path, &copy)?;
            std::fs::rename(&copy, path)?;
        }
        Ok(file)
    }

    fn open_lock(&self, path: &Path) -> io::Result<File> {
        self.call_open(Op::OpenLock, path, || self.inner.open_lock(path))
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.call(Op::ReadDir, dir, || self.inner.read_dir(dir))
    }

    fn open_write(&self, path: &Path) -> io::Result<File> {
        self.call_open(Op::OpenWrite, path, || self.inner.open_write(path))
    }

    fn create_private(&self, path: &Path) -> io::Result<File> {
        self.call_open(Op::CreatePrivate, path, || self.inner.create_private(path))
    }

    fn write_all_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        let fault = self.next_fault();
        let result = match fault {
            Some(Fault::ShortWrite) => self
                .inner
                .write_all_at(file, &bytes[..bytes.len() / 2], offset)
                .and_then(|()| Err(io::Error::from_raw_os_error(libc::ENOSPC))),
            Some(fault) => Err(io::Error::from_raw_os_error(fault.errno())),
            None => self.inner.write_all_at(file, bytes, offset),
        };
        let (path, inode) = self.path_of(file);
        self.record(Op::WriteAllAt, path.as_deref(), inode, fault, &result);
        self.note_at(offset);
        result
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        let result = self.call_on(Op::SetLen, file, || self.inner.set_len(file, len));
        self.note_at(len);
        result
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        self.call_on(Op::SyncData, file, || self.inner.sync_data(file))
    }

    fn set_file_private(&self, file: &File) -> io::Result<()> {
        self.call_on(Op::SetFilePrivate, file, || {
            self.inner.set_file_private(file)
        })
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

/// After a failed `sync_file` or `sync_data` on a file, no later sync of the same file
/// unless the bytes that sync was for were cut off first (a successful `set_len` to at most
/// where they began): after a failed fsync the kernel may have dropped the dirty pages, so
/// a later fsync could "succeed" without them. (The journal takes a failed record back off
/// that way, and writes it anew on the next save.)
fn check_no_fsync_retry(calls: &[Call]) -> Result<(), String> {
    // Per inode: where the bytes written since its last successful sync begin, and where
    // the bytes of a failed sync began.
    let mut dirty_from: HashMap<(u64, u64), u64> = HashMap::new();
    let mut failed: HashMap<(u64, u64), u64> = HashMap::new();
    for (i, call) in calls.iter().enumerate() {
        let Some(inode) = call.inode else {
            ensure!(
                !matches!(call.op, Op::SyncFile | Op::SyncData),
                "a sync of a file with no inode"
            );
            continue;
        };
        match call.op {
            Op::WriteAll | Op::WriteAllAt => {
                let from = if call.op == Op::WriteAll {
                    0
                } else {
                    call.at.unwrap_or(0)
                };
                let entry = dirty_from.entry(inode).or_insert(from);
                *entry = (*entry).min(from);
            }
            Op::SetLen if call.errno.is_none() => {
                let len = call.at.unwrap_or(u64::MAX);
                if failed.get(&inode).is_some_and(|&from| len <= from) {
                    failed.remove(&inode);
                }
            }
            Op::SyncFile | Op::SyncData => {
                ensure!(
                    !failed.contains_key(&inode),
                    "call {} retries {:?} on inode {inode:?} ({:?}) after a sync of it failed, \
                     without cutting off the bytes that sync was for",
                    i + 1,
                    call.op,
                    call.path
                );
                let from = dirty_from.remove(&inode).unwrap_or(0);
                if call.errno.is_some() {
                    failed.insert(inode, from);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// [`atomic::replace`], or a copy of it with a deliberate bug, for the negative controls.
pub(super) type ReplaceFn =
    fn(&dyn FileSystem, &Path, &Path, &str, &[u8]) -> Result<(), ReplaceError>;

/// [`atomic::replace`] as the store calls it with [`Durability::Sync`](super::Durability):
/// every fsync made.
pub(super) fn durable_replace(
    fs: &dyn FileSystem,
    dir: &Path,
    target: &Path,
    temp_prefix: &str,
    bytes: &[u8],
) -> Result<(), ReplaceError> {
    atomic::replace(fs, dir, target, temp_prefix, bytes, true)
}

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

/// What is stored before the save under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Existing {
    /// Nothing: a first save.
    Nothing,
    /// An older snapshot saved by the same store, which remembers the stored state (so the
    /// save reads no file to find it).
    Remembered,
    /// An older snapshot saved by another store instance: the save reads the stored state
    /// from the files (the base's header, the journal).
    FromFiles,
}

impl Existing {
    fn label(self) -> &'static str {
        match self {
            Existing::Nothing => "first",
            Existing::Remembered => "replacing an old",
            Existing::FromFiles => "replacing an old, written by another store instance,",
        }
    }
}

/// Whether `call` is bookkeeping whose failure a save may swallow (`before` are the calls
/// that preceded it): anything on the listing summary (a cache, ignored when it does not
/// match the files); writing the view checkpoint after a compaction's entry; once the new
/// base is renamed into place, noting the new files' identities; and once that rename is
/// durable (a directory fsync succeeded after it), emptying the now-stale journal,
/// `set_len(0)` then `sync_data` (its header names the old base, so it is ignored whether
/// or not the emptying reaches the disk), and removing the view checkpoint (which names
/// the old base's stamp, so it is not used whether or not it goes).
///
/// Emptying the journal before the rename is durable is not bookkeeping: a power cut could
/// bring the old base back, and it needs that journal's records (see
/// [`check_directory_durable_first`]). The previous version of this predicate allowed the
/// `set_len` as soon as the rename was done; that was too lenient.
fn is_bookkeeping(call: &Call, before: &[Call]) -> bool {
    kind(call) == "summary"
        || (kind(call) == "view" && call.op != Op::RemoveFile)
        || (renamed_in(before)
            && matches!(
                call.op,
                Op::OpenWrite | Op::SymlinkMetadata | Op::SetFilePrivate
            )
            && matches!(kind(call), "journal" | "base"))
        || (rename_durable_in(before)
            && matches!(call.op, Op::SetLen | Op::SyncData)
            && kind(call) == "journal")
        || (rename_durable_in(before) && call.op == Op::RemoveFile && kind(call) == "view")
        || (call.op == Op::RemoveFile && kind(call) == "view" && !renamed_in(before))
}

/// Whether `call` reads the stored state before the save changed anything (`before` are
/// the calls that preceded it): a save that is to append first reads and verifies the
/// whole state, and when that read fails it falls back to the header and a full rewrite
/// of the snapshot it holds, so such a failure may be swallowed (and the fallback's reads
/// may follow it).
fn is_verifying_read(call: &Call, before: &[Call]) -> bool {
    let is_read = |c: &Call| matches!(c.op, Op::OpenRead | Op::SymlinkMetadata);
    is_read(call) && matches!(kind(call), "base" | "journal") && before.iter().all(is_read)
}

/// Whether a rename succeeded among `calls`.
fn renamed_in(calls: &[Call]) -> bool {
    calls
        .iter()
        .any(|c| c.op == Op::Rename && c.errno.is_none())
}

/// Whether a rename succeeded among `calls` and a directory fsync succeeded after the last
/// one.
fn rename_durable_in(calls: &[Call]) -> bool {
    calls
        .iter()
        .rposition(|c| c.op == Op::Rename && c.errno.is_none())
        .is_some_and(|r| {
            calls[r + 1..]
                .iter()
                .any(|c| c.op == Op::SyncDir && c.errno.is_none())
        })
}

/// The calls of consecutive operations on one store, each marked with whether it was a
/// save that returned `Ok` (acknowledged).
type History = Vec<(Vec<Call>, bool)>;

/// A directory change a session depends on (a rename over the base, the creation of the
/// journal) is durable only once a `sync_dir` of its directory succeeds after it. While
/// one is not (its fsync failed, and the save said [`Error::NotDurable`], or the save
/// failed before its fsync and left the entry behind):
///
/// 1. no later save may be acknowledged: it builds on an entry a power cut may take back
///    (an append acknowledged into a journal whose name may vanish, or that follows a base
///    the old one may replace again), so an acknowledged revision would be lost;
/// 2. the journal's bytes must not be cut or overwritten after a rename over the base:
///    those are the records of the old base, which a power cut may bring back, and they
///    were acknowledged (the rewrite that emptied the journal after its directory fsync
///    failed, or an append that restarts the journal at offset 0, would lose them).
///
/// The crash model cannot see this: it injects no failure, so every `sync_dir` there
/// succeeds.
fn check_directory_durable_first(history: &[(Vec<Call>, bool)]) -> Result<(), String> {
    // Pending changes: (what, its directory, where in the history).
    let mut pending: Vec<(String, PathBuf, String)> = Vec::new();
    for (n, (calls, acknowledged)) in history.iter().enumerate() {
        for (i, call) in calls.iter().enumerate() {
            let at = format!("call {} of operation {}", i + 1, n + 1);
            let Some(path) = &call.path else { continue };
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            match (call.op, kind(call), call.errno) {
                (Op::SyncDir, _, None) => pending.retain(|(_, d, _)| d != path),
                (Op::Rename, _, None) => {
                    pending.push(("the rename over the base".to_owned(), dir, at));
                }
                (Op::CreatePrivate, "journal", None) => {
                    pending.push(("the creation of the journal".to_owned(), dir, at));
                }
                (Op::SetLen | Op::WriteAllAt, "journal", None) => {
                    if let Some((what, _, when)) = pending
                        .iter()
                        .find(|(what, _, _)| what.starts_with("the rename"))
                    {
                        return Err(format!(
                            "{at} ({:?} on the journal, to {:?}) changes the journal while \
                             {what} ({when}) is not durable (no directory fsync succeeded \
                             since): a power cut could bring back the old \
                             base without the acknowledged records that journal holds for it",
                            call.op, call.at
                        ));
                    }
                }
                _ => {}
            }
        }
        if *acknowledged {
            if let Some((what, _, when)) = pending.first() {
                return Err(format!(
                    "operation {} was acknowledged while {what} ({when}) is not durable \
                     (no directory fsync succeeded since): a power cut \
                     could lose that entry and with it this acknowledged revision",
                    n + 1
                ));
            }
        }
    }
    Ok(())
}

/// Opens a store in `dir` through `fs`.
fn open_faulty(dir: &Path, fs: &Arc<FaultyFileSystem>) -> Result<FileSessionStore, String> {
    let shared: Arc<dyn FileSystem> = fs.clone();
    FileSessionStore::open_with(dir, DEFAULT_MAX_SNAPSHOT_BYTES, shared)
        .map_err(|e| format!("open: {e}"))
}

/// Saves a snapshot with call `k` of the save failing, then checks every promise. `existing`
/// says what is stored first.
fn save_with_fault(
    saver: Saver,
    existing: Existing,
    fault: Fault,
    persistence: Persistence,
    k: usize,
    size: usize,
) -> Result<Facts, String> {
    let (_scratch, base) = scratch_dir();
    let dir = base.join("store");
    let fs = Arc::new(FaultyFileSystem::default());
    let mut store = open_faulty(&dir, &fs)?;
    let root = store.dir().to_path_buf();
    let id = SessionId::parse(ID).expect("valid id");
    let target = store.path_of(&id);
    let mut stored = 0;
    if existing != Existing::Nothing {
        stored = saver
            .save(&store, &fs, &snapshot_on(&id, 0, "old", size))
            .map_err(|e| format!("setup save: {e}"))?
            .as_u64();
    }
    if existing == Existing::FromFiles {
        store = open_faulty(&dir, &fs)?;
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
        .any(|c| c.op == Op::RemoveFile && kind(c) == "temp" && c.errno.is_some());
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
    if matches!(saver, Saver::Store) {
        // The listing (from the summary, when it matches the files) agrees with a load.
        check_listing(&reopened, &id, (stored > 0).then_some(stored))?;
        check_listing(&store, &id, (stored > 0).then_some(stored))?;
    }

    // The same store works once the fault clears, and never syncs a failed file again.
    let follow_up = snapshot_on(&id, stored, "follow-up", 100);
    let follow_up_revision = saver
        .save(&store, &fs, &follow_up)
        .map_err(|e| format!("save after the fault cleared: {e}"))?;
    let later = fs.disarm();
    let history: History = vec![(calls, result.is_ok()), (later, true)];
    check_directory_durable_first(&history)?;
    let all_calls: Vec<Call> = history.into_iter().flat_map(|(calls, _)| calls).collect();
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

/// `store` lists session `id` at `revision` (or not at all for `None`), with nothing
/// unreadable, as a load finds it.
fn check_listing(
    store: &FileSessionStore,
    id: &SessionId,
    revision: Option<u64>,
) -> Result<(), String> {
    // Every scope: an archived session must be listed too.
    let listing = store
        .list_scoped(crate::store::ListScope::All)
        .map_err(|e| format!("list: {e}"))?;
    ensure!(
        listing.unreadable.is_empty(),
        "unreadable: {:?}",
        listing.unreadable
    );
    let listed: Vec<(String, u64)> = listing
        .sessions
        .iter()
        .map(|s| (s.id.to_string(), s.revision.as_u64()))
        .collect();
    let expected: Vec<(String, u64)> = revision.map(|r| (id.to_string(), r)).into_iter().collect();
    ensure!(
        listed == expected,
        "the listing shows {listed:?}, a load finds {expected:?}"
    );
    Ok(())
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
            // Only best-effort bookkeeping may fail under a save that succeeds.
            for (j, call) in calls.iter().enumerate().filter(|(_, c)| c.injected) {
                ensure!(
                    is_bookkeeping(call, &calls[..j]),
                    "the save succeeded although call {} ({:?} on {:?}) failed",
                    j + 1,
                    call.op,
                    call.path
                );
            }
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
    // After the failed call, only the removal of the temporary file may follow, or, once
    // the new snapshot is in place, the bookkeeping that does not depend on the fsync.
    let temp = calls
        .iter()
        .find(|c| c.op == Op::CreateTemp && c.errno.is_none())
        .and_then(|c| c.path.clone());
    for (j, later) in calls.iter().enumerate().skip(i + 1) {
        ensure!(
            (later.op == Op::RemoveFile && later.path == temp)
                || is_bookkeeping(later, &calls[..j]),
            "after the failed call {} ({:?}) came {:?} on {:?}",
            i + 1,
            calls[i].op,
            later.op,
            later.path
        );
    }
    let renamed = renamed_in(calls);
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

/// Which of the store's files a call acted on, to pin call sequences: `base` (`<id>.json`),
/// `journal`, `summary`, `view` (the view checkpoint), `archived` (the archive marker),
/// `temp` (a temporary file),
/// `lock`, or `dir` (a directory, or no path known).
fn kind(call: &Call) -> &'static str {
    let Some(path) = &call.path else {
        return "dir";
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => "base",
        Some("journal") => "journal",
        Some("summary") => "summary",
        Some("view") => "view",
        Some("archived") => "archived",
        Some("forks") => "forks",
        Some("lease") => "lease",
        Some("tmp") => "temp",
        _ if path.file_name().is_some_and(|n| n == ".lock") => "lock",
        _ => "dir",
    }
}

/// Each call's operation and the file it acted on.
fn steps(calls: &[Call]) -> Vec<(Op, &'static str)> {
    calls.iter().map(|c| (c.op, kind(c))).collect()
}

/// The calls of a clean save: the k range to enumerate.
fn clean_save_calls(saver: Saver, existing: Existing) -> Vec<(Op, &'static str)> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let mut store = open_faulty(&dir, &fs).expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    let mut revision = 0;
    if existing != Existing::Nothing {
        revision = saver
            .save(&store, &fs, &snapshot_on(&id, 0, "old", 10))
            .expect("save")
            .as_u64();
    }
    if existing == Existing::FromFiles {
        store = open_faulty(&dir, &fs).expect("open");
    }
    fs.disarm();
    saver
        .save(&store, &fs, &snapshot_on(&id, revision, "new", 10))
        .expect("save");
    steps(&fs.disarm())
}

/// Runs `save_with_fault` for every call, fault and persistence; returns the failures.
fn sweep_saves(saver: Saver, figures: &mut SaveFigures) -> Vec<String> {
    let sizes: &[usize] = if long_run() { &[300, 70_000] } else { &[300] };
    let cases: &[Existing] = match saver {
        Saver::Store => &[Existing::Remembered, Existing::FromFiles, Existing::Nothing],
        Saver::Replace(..) => &[Existing::Remembered, Existing::Nothing],
    };
    let mut failures = Vec::new();
    for &existing in cases {
        let ops = clean_save_calls(saver, existing);
        // k = ops.len() + 1 fails nothing: the save must simply succeed.
        for k in 1..=ops.len() + 1 {
            for &fault in faults_for(ops.get(k - 1).map(|(op, _)| op)) {
                for persistence in [Persistence::Once, Persistence::Persistent] {
                    for &size in sizes {
                        let label = format!(
                            "{} ({} snapshot), {fault:?} {persistence:?} at call {k} of {:?}",
                            saver.name(),
                            existing.label(),
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

/// The faults tried at a call: short writes only where data is written.
fn faults_for(op: Option<&Op>) -> &'static [Fault] {
    match op {
        Some(Op::WriteAll | Op::WriteAllAt) => &[Fault::Eio, Fault::Enospc, Fault::ShortWrite],
        _ => &[Fault::Eio, Fault::Enospc],
    }
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
#[allow(clippy::too_many_lines)] // one scenario, checked step by step
fn clean_calls_of_save_delete_and_open_are_in_the_durable_order() {
    use Op::{
        CreateDirPrivate, CreatePrivate, CreateTemp, OpenDir, OpenLock, OpenRead, OpenWrite,
        ReadDir, RemoveFile, Rename, SetDirPrivate, SetLen, SymlinkMetadata, SyncDir, SyncFile,
        WriteAll, WriteAllAt,
    };
    // A save of a snapshot with no provenance (built, not loaded) checks that its
    // directory is still the one it opened and finds the stored state: from memory when
    // this store saved it last (the base and the journal are only inspected, to see they
    // are unchanged), otherwise from the base's header and the journal. Then it replaces
    // the base, empties the journal if there is one (there is none here), notes the new
    // files' identities and rewrites the listing summary.
    let replacing = [
        (CreateTemp, "temp"),
        (WriteAll, "temp"),
        (SyncFile, "temp"),
        (Rename, "temp"),
        (SyncDir, "dir"),
    ];
    // Once the new base is in place, a view checkpoint of the old one goes.
    let after = [
        (RemoveFile, "view"),
        (OpenWrite, "journal"),
        (SymlinkMetadata, "base"),
        (SymlinkMetadata, "journal"),
        (OpenWrite, "summary"),
    ];
    let summary = [(WriteAllAt, "summary"), (SetLen, "summary")];
    // Every writer first checks that the lock it took is on the file `.lock` names; a
    // save then reads the session's lease (there is none here).
    let inspect = [
        (SymlinkMetadata, "lock"),
        (SymlinkMetadata, "dir"),
        (OpenRead, "lease"),
        (SymlinkMetadata, "base"),
        (SymlinkMetadata, "journal"),
    ];
    // What this store remembers is trusted only while the base's header still names the
    // same revision (inode numbers are reused, timestamps can be coarse).
    let header = [(OpenRead, "base"), (SymlinkMetadata, "base")];
    // The snapshot is another session than the stored one (another creation time), so
    // the stored history goes: forks that share its first messages, listed in
    // `<id>.forks` (there is none here), would get their own copy first.
    let forks = [(OpenRead, "forks")];
    // A new base is written only if the journal's path is free or a plain journal, which
    // a load can read.
    let slot = [(SymlinkMetadata, "journal")];
    let remembered = [
        inspect.as_slice(),
        &header,
        &forks,
        &slot,
        &replacing,
        &after,
        &summary,
    ]
    .concat();
    // A store that remembers nothing reads the stored state whole (the base, the journal,
    // then the base's name again, to see it was not replaced meanwhile): had the snapshot
    // the stored creation time, its save would append to that state.
    let from_files = [
        inspect.as_slice(),
        &[
            (OpenRead, "base"),
            (SymlinkMetadata, "base"),
            (OpenRead, "journal"),
            (SymlinkMetadata, "base"),
        ],
        &forks,
        &slot,
        &replacing,
        &after,
        &summary,
    ]
    .concat();
    // A first save also makes sure no archive marker is left from an earlier session of
    // that id.
    let first = [
        [
            (SymlinkMetadata, "lock"),
            (SymlinkMetadata, "dir"),
            (OpenRead, "lease"),
            (SymlinkMetadata, "base"),
            (SymlinkMetadata, "archived"),
        ]
        .as_slice(),
        &slot,
        &replacing,
        &after,
        &[(CreatePrivate, "summary")],
        &summary,
    ]
    .concat();
    assert_eq!(
        clean_save_calls(Saver::Store, Existing::Remembered),
        remembered
    );
    assert_eq!(
        clean_save_calls(Saver::Store, Existing::FromFiles),
        from_files
    );
    assert_eq!(clean_save_calls(Saver::Store, Existing::Nothing), first);
    // The real replace and the controls make the same calls when nothing fails.
    let replace = Saver::Replace("atomic::replace", durable_replace);
    assert_eq!(clean_save_calls(replace, Existing::Remembered), replacing);
    for control in [
        Saver::Replace("retrying", replace_retrying_fsync),
        Saver::Replace("leaving", replace_leaving_temp),
    ] {
        assert_eq!(clean_save_calls(control, Existing::Remembered), replacing);
    }
    // A delete of a session with no journal: the list of forks sharing its messages
    // (none here: each would get its own copy first), the base, its removal made durable,
    // then the summary and an archive marker, if any, and the directory synced again.
    // (The base's unlink is synced before any other file goes, so a crash never keeps a
    // base whose journal is gone.)
    assert_eq!(
        clean_delete_calls(),
        [
            (SymlinkMetadata, "lock"),
            (SymlinkMetadata, "dir"),
            (OpenRead, "forks"),
            (SymlinkMetadata, "base"),
            (RemoveFile, "base"),
            (SyncDir, "dir"),
            (SymlinkMetadata, "journal"),
            (SymlinkMetadata, "summary"),
            (RemoveFile, "summary"),
            (SymlinkMetadata, "view"),
            (SymlinkMetadata, "archived"),
            (SyncDir, "dir"),
        ]
    );
    assert_eq!(
        clean_open_calls(OpenCase::WithLeftover),
        [
            SymlinkMetadata,
            OpenDir,
            SymlinkMetadata,
            OpenLock,
            SymlinkMetadata,
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
            SymlinkMetadata,
            ReadDir
        ]
    );
    let tail = [OpenDir, SymlinkMetadata, OpenLock, SymlinkMetadata, ReadDir];
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
         succeeded: no fault reached, or only best-effort bookkeeping failed); injected per call: {:?}; short writes: {}; \
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
        Saver::Replace("atomic::replace", durable_replace),
        &mut figures,
    );
    assert!(real.is_empty(), "{}", real.join("\n"));

    let retrying = sweep_saves(
        Saver::Replace("control: retries a failed fsync", replace_retrying_fsync),
        &mut SaveFigures::default(),
    );
    assert!(
        retrying.iter().any(|f| f.contains("retries SyncFile")),
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
    // The directory fsync, after the rename, in a save over an existing file.
    let sync_dir = clean_save_calls(Saver::Store, Existing::Remembered)
        .iter()
        .position(|&step| step == (Op::SyncDir, "dir"))
        .expect("a save syncs the directory");
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store =
        FileSessionStore::open_with(&base.join("store"), DEFAULT_MAX_SNAPSHOT_BYTES, fs.clone())
            .expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    let first = snapshot_on(&id, 0, "old", 100);
    store.save(&first).expect("save");
    let second = snapshot_on(&id, 1, "new", 100);
    fs.arm(sync_dir + 1, Fault::Eio, Persistence::Once);
    let err = store.save(&second).expect_err("the directory fsync fails");
    let calls = fs.disarm();
    assert_eq!(calls[sync_dir].op, Op::SyncDir);
    assert!(calls[sync_dir].injected);
    assert!(calls[..sync_dir]
        .iter()
        .any(|c| c.op == Op::Rename && c.errno.is_none()));
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
    // ... so retrying the same save is recognised: it gets revision 2 back, once the base
    // and the directory are synced (the retry acknowledges nothing a power loss could
    // take back) ...
    assert_eq!(store.save(&second).expect("a retry"), Revision::from_u64(2));
    let calls = fs.disarm();
    let synced: Vec<_> = calls
        .iter()
        .filter(|c| matches!(c.op, Op::SyncData | Op::SyncDir))
        .map(|c| (c.op, kind(c), c.errno))
        .collect();
    assert_eq!(
        synced,
        [(Op::SyncData, "base", None), (Op::SyncDir, "dir", None)]
    );
    // ... and saving again on top of the revision the error names goes on from there.
    let Error::NotDurable { revision, .. } = err else {
        unreachable!()
    };
    let third = snapshot_on(&id, revision.as_u64(), "again", 100);
    assert_eq!(
        store.save(&third).expect("save again"),
        Revision::from_u64(3)
    );
    let calls = fs.disarm();
    let synced: Vec<_> = calls
        .iter()
        .filter(|c| matches!(c.op, Op::Rename | Op::SyncDir))
        .map(|c| (c.op, c.errno))
        .collect();
    assert_eq!(synced, [(Op::Rename, None), (Op::SyncDir, None)]);
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
        // Call 9 of a first save is the file fsync (after the lock, the lease and the
        // session's files are looked at, and the temporary file is created and written).
        fs.arm(9, Fault::Eio, persistence);
        let err = store
            .save(&snapshot_on(&id, 0, "new", 100))
            .expect_err("fsync fails");
        let mut calls = fs.disarm();
        assert_eq!(calls[8].op, Op::SyncFile);
        let failed_inode = calls[8].inode.expect("inode");
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

fn clean_delete_calls() -> Vec<(Op, &'static str)> {
    clean_delete_calls_of(false)
}

/// A session set up to be deleted: with a journal (revision 2 appended), archived (its
/// marker file present), or both.
#[derive(Debug, Clone, Copy)]
struct DeleteCase {
    journal: bool,
    archived: bool,
}

impl From<bool> for DeleteCase {
    fn from(journal: bool) -> Self {
        DeleteCase {
            journal,
            archived: false,
        }
    }
}

/// Stores revision 1 of session `id` through `store` and, with a journal, revision 2
/// appended to its journal, and archives it if asked; returns the stored snapshot as
/// loaded.
fn stored_for_delete(
    store: &FileSessionStore,
    id: &SessionId,
    case: impl Into<DeleteCase>,
) -> Result<SessionSnapshot, String> {
    let DeleteCase {
        journal: with_journal,
        archived,
    } = case.into();
    if archived {
        let stored = stored_for_delete(store, id, with_journal)?;
        store
            .set_archived(id, true)
            .map_err(|e| format!("setup archive: {e}"))?;
        ensure!(
            session_files(store.dir(), id).contains(&format!("{id}.archived")),
            "setup: no marker"
        );
        return Ok(stored);
    }
    store
        .save(&snapshot_on(id, 0, "old", 300))
        .map_err(|e| format!("setup save: {e}"))?;
    let mut stored = store.load(id).map_err(|e| format!("setup load: {e}"))?;
    if with_journal {
        store
            .save(&appended(&stored, "journaled", 200))
            .map_err(|e| format!("setup append: {e}"))?;
        stored = store.load(id).map_err(|e| format!("setup load: {e}"))?;
        ensure!(
            session_files(store.dir(), id).len() == 3,
            "setup: {:?}",
            session_files(store.dir(), id)
        );
    }
    Ok(stored)
}

fn clean_delete_calls_of(case: impl Into<DeleteCase>) -> Vec<(Op, &'static str)> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store = open_faulty(&base.join("store"), &fs).expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    stored_for_delete(&store, &id, case).expect("setup");
    fs.disarm();
    store.delete(&id).expect("delete");
    steps(&fs.disarm())
}

/// Deletes a stored session (with a journal, `with_journal`) with call `k` failing, then
/// checks every promise; returns whether the delete failed.
#[allow(clippy::too_many_lines)] // one scenario, checked step by step
fn delete_with_fault(
    case: DeleteCase,
    fault: Fault,
    persistence: Persistence,
    k: usize,
) -> Result<bool, String> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store = open_faulty(&base.join("store"), &fs)?;
    let root = store.dir().to_path_buf();
    let id = SessionId::parse(ID).expect("valid id");
    let target = store.path_of(&id);
    let stored = stored_for_delete(&store, &id, case)?;
    let old = std::fs::read(&target).map_err(|e| e.to_string())?;
    fs.arm(k, fault, persistence);
    let result = store.delete(&id);
    let calls = fs.disarm();
    let injected = calls.iter().position(|c| c.injected);
    let removed = calls
        .iter()
        .any(|c| c.op == Op::RemoveFile && kind(c) == "base" && c.errno.is_none());
    let now = std::fs::read(&target).ok();
    match &result {
        Ok(()) => {
            if let Some(i) = injected {
                return Err(format!(
                    "delete succeeded although call {} ({:?} on {:?}) failed; left: {:?}",
                    i + 1,
                    calls[i].op,
                    calls[i].path,
                    session_files(&root, &id)
                ));
            }
            let left = session_files(&root, &id);
            ensure!(left.is_empty(), "an acknowledged delete left {left:?}");
        }
        Err(err) => {
            let i = injected.ok_or_else(|| format!("failed with no fault: {err}"))?;
            check_io_error(err, &root, fault.errno())?;
            // A failing call ends the delete, with its own error.
            ensure!(
                calls.len() == i + 1,
                "calls after the failed call {} ({:?} on {:?}): {:?}",
                i + 1,
                calls[i].op,
                calls[i].path,
                &calls[i + 1..]
            );
            if removed {
                // The session is gone; the error says which inspection or removal of the
                // journal or summary, or which directory fsync, failed. (Failing to inspect
                // them is an error too: silently skipping one would leave transcript data
                // on disk under an acknowledged delete.)
                ensure!(
                    matches!(
                        (calls[i].op, kind(&calls[i])),
                        (
                            Op::SymlinkMetadata | Op::RemoveFile,
                            "journal" | "summary" | "view" | "archived"
                        ) | (Op::SyncDir, "dir")
                    ),
                    "failure after the unlink of the base: {:?} on {:?}",
                    calls[i].op,
                    calls[i].path
                );
                ensure!(now.is_none(), "unlinked but still there");
                if calls[i].op == Op::SyncDir {
                    ensure!(
                        err.to_string()
                            .contains("sync the directory after a delete"),
                        "{err}"
                    );
                }
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
                now.is_some() && snapshot == stored,
                "loaded revision {} after the failed delete, not the stored {}",
                snapshot.revision(),
                stored.revision()
            );
            check_listing(&reopened, &id, Some(stored.revision().as_u64()))?;
        }
        Err(e) => {
            ensure!(e.is_not_found() && now.is_none(), "load: {e}");
            check_listing(&reopened, &id, None)?;
        }
    }
    // Retrying the delete once the fault is gone finishes it: no file of the session is
    // left (a journal or summary left behind would keep transcript data on disk).
    match reopened.delete(&id) {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(format!("delete retried after the fault: {e}")),
    }
    let left = session_files(&root, &id);
    ensure!(
        left.is_empty(),
        "after the delete was retried (fault gone), {left:?} of the session remain"
    );
    // A new session under the same id starts clean: saved, then appended to, it loads back.
    let reborn = snapshot_on(&id, 0, "reborn", 200);
    store
        .save(&reborn)
        .map_err(|e| format!("save after the delete: {e}"))?;
    let next = appended(
        &store.load(&id).map_err(|e| format!("load: {e}"))?,
        "reborn turn",
        100,
    );
    store
        .save(&next)
        .map_err(|e| format!("append after the delete: {e}"))?;
    let loaded = FileSessionStore::open(&root)
        .and_then(|s| s.load(&id))
        .map_err(|e| format!("load after the delete: {e}"))?;
    ensure!(
        loaded == saved(&next),
        "the new session loads as revision {}, not what was saved",
        loaded.revision()
    );
    Ok(result.is_err())
}

/// Runs `delete_with_fault` at every call; returns the number of runs, of failed deletes,
/// the clean calls, and the failures.
fn sweep_deletes(
    case: impl Into<DeleteCase>,
) -> (usize, usize, Vec<(Op, &'static str)>, Vec<String>) {
    let case = case.into();
    let calls = clean_delete_calls_of(case);
    let (mut runs, mut failed) = (0, 0);
    let mut failures = Vec::new();
    for k in 1..=calls.len() + 1 {
        for fault in [Fault::Eio, Fault::Enospc] {
            for persistence in [Persistence::Once, Persistence::Persistent] {
                runs += 1;
                match delete_with_fault(case, fault, persistence, k) {
                    Ok(err) => failed += usize::from(err),
                    Err(why) => failures.push(format!(
                        "{fault:?} {persistence:?} at call {k} ({:?}): {why}",
                        calls.get(k - 1)
                    )),
                }
            }
        }
    }
    (runs, failed, calls, failures)
}

#[test]
fn every_failing_call_of_a_delete_gives_a_typed_error_and_keeps_or_removes_the_snapshot() {
    let (runs, failed, calls, failures) = sweep_deletes(false);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("fault injection, delete: {runs} faulted deletes over calls {calls:?}, {failed} failed with a typed Io error");
}

#[test]
fn every_failing_call_of_a_delete_with_a_journal_and_a_summary_keeps_or_removes_the_whole_session()
{
    let (runs, failed, calls, failures) = sweep_deletes(true);
    assert!(
        failures.is_empty(),
        "{} of {runs} faulted deletes broke a promise:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("fault injection, delete with a journal and a summary: {runs} faulted deletes over calls {calls:?}, {failed} failed with a typed Io error");
}

#[test]
fn every_failing_call_of_a_delete_of_an_archived_session_keeps_or_removes_the_whole_session() {
    use Op::{OpenRead, RemoveFile, SymlinkMetadata, SyncDir};
    let case = DeleteCase {
        journal: true,
        archived: true,
    };
    // After the list of sharing forks (none), the base goes first, durably, then the
    // journal, the summary and last the archive marker (so a delete that fails keeps an
    // archived session archived).
    assert_eq!(
        clean_delete_calls_of(case),
        [
            (SymlinkMetadata, "lock"),
            (SymlinkMetadata, "dir"),
            (OpenRead, "forks"),
            (SymlinkMetadata, "base"),
            (RemoveFile, "base"),
            (SyncDir, "dir"),
            (SymlinkMetadata, "journal"),
            (RemoveFile, "journal"),
            (SymlinkMetadata, "summary"),
            (RemoveFile, "summary"),
            (SymlinkMetadata, "view"),
            (SymlinkMetadata, "archived"),
            (RemoveFile, "archived"),
            (SyncDir, "dir"),
        ]
    );
    let (runs, failed, _, failures) = sweep_deletes(case);
    assert!(
        failures.is_empty(),
        "{} of {runs} faulted deletes broke a promise:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("fault injection, delete of an archived session: {runs} faulted deletes, {failed} failed with a typed Io error");
}

/// The calls of archiving (`archive`) or restoring a stored session with a journal.
fn clean_archive_calls(archive: bool) -> Vec<(Op, &'static str)> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store = open_faulty(&base.join("store"), &fs).expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    let case = DeleteCase {
        journal: true,
        archived: !archive,
    };
    stored_for_delete(&store, &id, case).expect("setup");
    fs.disarm();
    store.set_archived(&id, archive).expect("set_archived");
    steps(&fs.disarm())
}

/// Archives (`archive`) or restores a stored session with call `k` failing, then checks:
/// the snapshot and journal are never touched, the session loads and lists whatever the
/// outcome, an `Ok` means the marker is in the asked state, and a retry once the fault is
/// gone succeeds. Returns whether the call failed.
fn archive_with_fault(
    archive: bool,
    fault: Fault,
    persistence: Persistence,
    k: usize,
) -> Result<bool, String> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store = open_faulty(&base.join("store"), &fs)?;
    let root = store.dir().to_path_buf();
    let id = SessionId::parse(ID).expect("valid id");
    let case = DeleteCase {
        journal: true,
        archived: !archive,
    };
    let stored = stored_for_delete(&store, &id, case)?;
    let files = |name: &str| std::fs::read(root.join(format!("{id}.{name}"))).ok();
    let (old_base, old_journal) = (files("json"), files("journal"));
    let marked = || session_files(&root, &id).contains(&format!("{id}.archived"));
    fs.arm(k, fault, persistence);
    let result = store.set_archived(&id, archive);
    let calls = fs.disarm();
    let injected = calls.iter().position(|c| c.injected);
    match &result {
        Ok(()) => {
            ensure!(injected.is_none(), "succeeded although a call failed");
            ensure!(
                marked() == archive,
                "Ok, but the marker is not in the asked state"
            );
        }
        Err(err) => {
            ensure!(injected.is_some(), "failed with no fault: {err}");
            check_io_error(err, &root, fault.errno())?;
        }
    }
    ensure!(
        files("json") == old_base && files("journal") == old_journal,
        "archiving touched the snapshot or its journal"
    );
    let reopened = FileSessionStore::open(&root).map_err(|e| format!("reopen: {e}"))?;
    let loaded = reopened.load(&id).map_err(|e| format!("load: {e}"))?;
    ensure!(loaded == stored, "the session changed");
    check_listing(&reopened, &id, Some(stored.revision().as_u64()))?;
    reopened
        .set_archived(&id, archive)
        .map_err(|e| format!("retried once the fault is gone: {e}"))?;
    ensure!(
        marked() == archive,
        "the retry left the marker in the wrong state"
    );
    let listed = reopened
        .list()
        .map_err(|e| format!("list: {e}"))?
        .sessions
        .iter()
        .any(|s| s.id == id);
    ensure!(
        listed != archive,
        "the default listing disagrees with the marker"
    );
    Ok(result.is_err())
}

#[test]
fn every_failing_call_of_archiving_leaves_the_session_whole_and_a_retry_finishes_it() {
    use Op::{CreatePrivate, RemoveFile, SymlinkMetadata, SyncDir};
    // Archiving only creates or removes the marker (then syncs the directory): the
    // snapshot and journal are never opened for writing.
    assert_eq!(
        clean_archive_calls(true),
        [
            (SymlinkMetadata, "lock"),
            (SymlinkMetadata, "dir"),
            (SymlinkMetadata, "base"),
            (SymlinkMetadata, "archived"),
            (CreatePrivate, "archived"),
            (SyncDir, "dir"),
        ]
    );
    assert_eq!(
        clean_archive_calls(false),
        [
            (SymlinkMetadata, "lock"),
            (SymlinkMetadata, "dir"),
            (SymlinkMetadata, "base"),
            (SymlinkMetadata, "archived"),
            (RemoveFile, "archived"),
            (SyncDir, "dir"),
        ]
    );
    let (mut runs, mut failed) = (0, 0);
    let mut failures = Vec::new();
    for archive in [true, false] {
        for k in 1..=clean_archive_calls(archive).len() + 1 {
            for fault in [Fault::Eio, Fault::Enospc] {
                for persistence in [Persistence::Once, Persistence::Persistent] {
                    runs += 1;
                    match archive_with_fault(archive, fault, persistence, k) {
                        Ok(err) => failed += usize::from(err),
                        Err(why) => failures.push(format!(
                            "archive {archive}, {fault:?} {persistence:?} at call {k}: {why}"
                        )),
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("fault injection, archive and restore: {runs} faulted calls, {failed} failed with a typed Io error");
}

#[test]
fn a_load_that_keeps_losing_to_rewrites_reads_under_the_lock_instead_of_failing() {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store = open_faulty(&base.join("store"), &fs).expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    let snapshot = snapshot_on(&id, 0, "busy", 300);
    store.save(&snapshot).expect("save");
    // Each read of the snapshot checks that its name still names the file it read, 3
    // times over, and a load makes 3 such reads without a lock: 9 rewrites defeat them
    // all. The read made under the write lock, where no save can run, then succeeds.
    fs.state().rewrites_under_reads = 9;
    let loaded = store.load(&id);
    assert_eq!(fs.state().rewrites_under_reads, 0, "the rewrites happened");
    assert_eq!(loaded.expect("the load succeeds"), saved(&snapshot));
    // Rewrites that outlast the read under the lock too (no writer using the lock could
    // make them; another program could) are still an error, never a wrong answer.
    fs.state().rewrites_under_reads = 12;
    let err = store.load(&id).expect_err("the name kept changing");
    assert!(
        err.to_string().contains("kept pointing at another file"),
        "{err}"
    );
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

// ---------------------------------------------------------------------------------------
// The journal: appends, the rewrite that empties it, compaction.
// ---------------------------------------------------------------------------------------

/// A save that involves the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JournalCase {
    /// The first append of a session: the journal is created, its header written.
    FirstAppend,
    /// An append to a journal that holds records.
    Append,
    /// An append after a full rewrite emptied the journal: it starts again at offset 0.
    AfterRewrite,
    /// An append over a stale journal (records for an older base: what a crash leaves
    /// when a rewrite's truncation of the journal is lost), by a store that reads the
    /// state from the files: the journal is cut to 0 and started again.
    OverStaleJournal,
    /// A new session (another creation time) saved over one whose journal holds entries:
    /// a whole new base, and the old session's journal emptied once it is in place.
    Replace,
    /// A rewind of the last turn, to a journal that holds entries: an entry that keeps
    /// fewer messages and adds none.
    Rewind,
    /// A snapshot built anew with the stored creation time, saved over the stored one: an
    /// entry that replaces the whole view (the history keeps the old one).
    Edit,
    /// A compaction of all but the last message of four long turns into a summary: an
    /// entry holding it, and the view checkpoint of the state it makes.
    Compact,
    /// A restore of the revision before the last: an entry naming it.
    Restore,
    /// An append to a journal of format 1 (an earlier release's): the journal written
    /// again whole in the current format with the entry added, and renamed over the old.
    Upgrade,
}

const JOURNAL_CASES: [JournalCase; 10] = [
    JournalCase::FirstAppend,
    JournalCase::Append,
    JournalCase::AfterRewrite,
    JournalCase::OverStaleJournal,
    JournalCase::Replace,
    JournalCase::Rewind,
    JournalCase::Edit,
    JournalCase::Compact,
    JournalCase::Restore,
    JournalCase::Upgrade,
];

/// Prepares `case` in `dir` through `fs` (no fault armed): returns the store to save with,
/// the stored snapshot as loaded, and the snapshot whose save is under test.
fn prepare_journal_case(
    dir: &Path,
    fs: &Arc<FaultyFileSystem>,
    case: JournalCase,
) -> Result<(FileSessionStore, SessionSnapshot, SessionSnapshot), String> {
    let setup = |what: &str, e: Error| format!("setup {what}: {e}");
    let mut store = open_faulty(dir, fs)?;
    let id = SessionId::parse(ID).expect("valid id");
    let journal = dir.join(format!("{ID}.journal"));
    store
        .save(&snapshot_on(&id, 0, "base", 300))
        .map_err(|e| setup("save", e))?;
    let load = |store: &FileSessionStore| store.load(&id).map_err(|e| setup("load", e));
    let append = |store: &FileSessionStore, tag: &str, size: usize| {
        store
            .save(&appended(&load(store)?, tag, size))
            .map_err(|e| setup("append", e))
    };
    match case {
        JournalCase::FirstAppend => {}
        JournalCase::Append | JournalCase::Rewind | JournalCase::Replace | JournalCase::Edit => {
            append(&store, "first turn", 200)?;
        }
        // Long enough that the compacted view is less than half the log: its view
        // checkpoint is written.
        JournalCase::Compact => {
            for turn in ["first turn", "second turn", "third turn", "fourth turn"] {
                append(&store, turn, 2_000)?;
            }
        }
        JournalCase::Restore => {
            append(&store, "first turn", 200)?;
            append(&store, "second turn", 200)?;
        }
        JournalCase::Upgrade => {
            append(&store, "first turn", 200)?;
            append(&store, "second turn", 200)?;
            // What an earlier release wrote: the same records in journal format 1, read by
            // a new store instance.
            let current = std::fs::read(&journal).map_err(|e| e.to_string())?;
            std::fs::write(&journal, journal_in_format_1(&current)).map_err(|e| e.to_string())?;
            store = open_faulty(dir, fs)?;
        }
        JournalCase::AfterRewrite | JournalCase::OverStaleJournal => {
            append(&store, "first turn", 200)?;
            let records = std::fs::read(&journal).map_err(|e| e.to_string())?;
            // A snapshot built rather than loaded has no provenance: a full rewrite.
            store
                .save(&snapshot_on(&id, 2, "rewritten", 400))
                .map_err(|e| setup("rewrite", e))?;
            ensure!(
                std::fs::metadata(&journal)
                    .map_err(|e| e.to_string())?
                    .len()
                    == 0,
                "setup: the rewrite did not empty the journal"
            );
            if case == JournalCase::OverStaleJournal {
                // The rewrite's truncation "lost": the old records are back, and a new
                // store instance finds them.
                std::fs::write(&journal, &records).map_err(|e| e.to_string())?;
                store = open_faulty(dir, fs)?;
            }
        }
    }
    let old = load(&store)?;
    let next = match case {
        JournalCase::Rewind => {
            let mut rewound = old.clone();
            rewound
                .rewind(RewindTo::LastTurns(1))
                .map_err(|e| setup("rewind", e))?;
            rewound
        }
        // Built anew, with its own creation time: another session.
        JournalCase::Replace => snapshot_on(&id, old.revision().as_u64(), "replacing", 400),
        JournalCase::Edit => SessionSnapshot::builder(id.clone(), "test-model")
            .transcript(vec![Message::user("edited whole")])
            .timestamps(old.created_at(), old.updated_at())
            .build()
            .map_err(|e| setup("edit", e))?
            .with_revision(old.revision()),
        JournalCase::Compact => {
            let mut compacted = old.clone();
            let replaced = compacted.transcript().len() - 1;
            compacted
                .compact(Compaction::new(replaced, vec![Message::user("summary")]))
                .map_err(|e| setup("compact", e))?;
            compacted
        }
        JournalCase::Restore => {
            let past = store
                .load_at(&id, Revision::from_u64(old.revision().as_u64() - 1))
                .map_err(|e| setup("load_at", e))?;
            let mut restored = old.clone();
            restored
                .restore_from(&past)
                .map_err(|e| setup("restore", e))?;
            restored
        }
        _ => appended(&old, "new turn", 150),
    };
    fs.disarm();
    Ok((store, old, next))
}

/// The calls of a clean save of `case`, and whether it rewrote the base (rather than
/// appending to the journal).
fn clean_journal_calls(case: JournalCase) -> (Vec<(Op, &'static str)>, bool) {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let (store, old, next) = prepare_journal_case(&dir, &fs, case).expect("prepare");
    let id = old.id().clone();
    let base_before = std::fs::read(store.path_of(&id)).expect("read the base");
    store.save(&next).expect("save");
    let calls = steps(&fs.disarm());
    let rewrote = std::fs::read(store.path_of(&id)).expect("read the base") != base_before;
    let loaded = FileSessionStore::open(&dir)
        .and_then(|s| s.load(&id))
        .expect("load");
    assert_eq!(loaded, saved(&next), "{case:?}");
    (calls, rewrote)
}

/// What a faulted journal save showed, for the figures.
#[derive(Debug, Default)]
struct JournalFigures {
    runs: usize,
    failed: usize,
    not_durable: usize,
    /// Failures of best-effort calls (bookkeeping, or the verifying read before an
    /// append, which falls back to a full rewrite) under a save that succeeded.
    swallowed: usize,
    by_op: std::collections::BTreeMap<String, usize>,
}

/// Saves `case`'s snapshot with call `k` failing, then checks: the call either succeeds or
/// fails with a typed error; what a fresh store loads is exactly the old revision (the new
/// one after success or [`Error::NotDurable`]); the listing agrees; no temporary file is
/// left; no failed fsync is retried; and the same store then saves the failed snapshot
/// again and appends one more turn, both loading back exactly.
#[allow(clippy::too_many_lines)] // one scenario, checked step by step
fn journal_save_with_fault(
    case: JournalCase,
    fault: Fault,
    persistence: Persistence,
    k: usize,
    figures: &mut JournalFigures,
) -> Result<(), String> {
    let (_scratch, base) = scratch_dir();
    let dir = base.join("store");
    let fs = Arc::new(FaultyFileSystem::default());
    let (store, old, next) = prepare_journal_case(&dir, &fs, case)?;
    let root = store.dir().to_path_buf();
    let id = old.id().clone();
    let new = saved(&next);

    fs.arm(k, fault, persistence);
    let result = store.save(&next);
    let calls = fs.disarm();
    check_no_fsync_retry(&calls)?;
    check_directory_durable_first(&[(calls.clone(), result.is_ok())])?;
    let first_injected = calls.iter().position(|c| c.injected);
    figures.runs += 1;
    if let Some(i) = first_injected {
        *figures
            .by_op
            .entry(format!("{:?} {}", calls[i].op, kind(&calls[i])))
            .or_default() += 1;
    }

    // No temporary file left, unless removing it failed too (a persistent fault).
    let cleanup_failed = calls
        .iter()
        .any(|c| c.op == Op::RemoveFile && kind(c) == "temp" && c.errno.is_some());
    let temps = temp_files(&root);
    ensure!(
        temps.len() == usize::from(cleanup_failed),
        "temporary files left: {temps:?}"
    );

    let fresh = FileSessionStore::open(&root).map_err(|e| format!("reopen: {e}"))?;
    let loaded = fresh
        .load(&id)
        .map_err(|e| format!("the session cannot be loaded after the fault: {e}"))?;
    let through_same = store
        .load(&id)
        .map_err(|e| format!("load through the faulted store: {e}"))?;
    ensure!(
        through_same == loaded,
        "the faulted store loads revision {}, a fresh one {}",
        through_same.revision(),
        loaded.revision()
    );
    let is_new = match &result {
        Ok(revision) => {
            for (j, call) in calls.iter().enumerate().filter(|(_, c)| c.injected) {
                ensure!(
                    is_bookkeeping(call, &calls[..j]) || is_verifying_read(call, &calls[..j]),
                    "the save succeeded although call {} ({:?} on {:?}) failed",
                    j + 1,
                    call.op,
                    call.path
                );
                figures.swallowed += 1;
            }
            ensure!(*revision == new.revision(), "returned revision {revision}");
            ensure!(
                loaded == new,
                "an acknowledged save is not what loads (revision {})",
                loaded.revision()
            );
            true
        }
        Err(err) => {
            figures.failed += 1;
            let i = first_injected.ok_or_else(|| format!("failed with no fault: {err}"))?;
            // After the failed call: the removal of a temporary file, the record taken
            // back off the journal (an append: no new base) and that cut synced (the
            // failed pages go with it, so this is no retry), or (once a new base is in
            // place) bookkeeping.
            let temp = calls
                .iter()
                .find(|c| c.op == Op::CreateTemp && c.errno.is_none())
                .and_then(|c| c.path.clone());
            let read_failed = is_verifying_read(&calls[i], &calls[..i]);
            for (j, later) in calls.iter().enumerate().skip(i + 1) {
                ensure!(
                    (later.op == Op::RemoveFile && later.path == temp)
                        || (later.op == Op::SetLen
                            && kind(later) == "journal"
                            && !renamed_in(&calls[..j]))
                        || (later.op == Op::SyncData
                            && kind(later) == "journal"
                            && !renamed_in(&calls[..j])
                            && calls[j - 1].op == Op::SetLen
                            && kind(&calls[j - 1]) == "journal")
                        || is_bookkeeping(later, &calls[..j])
                        || (read_failed && is_verifying_read(later, &calls[..j])),
                    "after the failed call {} ({:?} on {:?}) came {:?} on {:?}",
                    i + 1,
                    calls[i].op,
                    calls[i].path,
                    later.op,
                    later.path
                );
            }
            if matches!(err, Error::NotDurable { .. }) {
                figures.not_durable += 1;
                check_not_durable(err, &root, fault.errno(), new.revision().as_u64())?;
                ensure!(
                    loaded == new,
                    "NotDurable, but revision {} loads",
                    loaded.revision()
                );
                true
            } else {
                check_io_error(err, &root, fault.errno())?;
                ensure!(
                    loaded == old,
                    "a failed save left revision {} loadable, not exactly the old {}",
                    loaded.revision(),
                    old.revision()
                );
                false
            }
        }
    };

    let reopened = FileSessionStore::open(&root).map_err(|e| format!("reopen: {e}"))?;
    ensure!(
        temp_files(&root).is_empty(),
        "temporary files survive a reopen"
    );
    check_listing(&reopened, &id, Some(loaded.revision().as_u64()))?;
    check_listing(&store, &id, Some(loaded.revision().as_u64()))?;

    // The next saves work on the same store: the failed one again, then one more turn.
    let reload = |what: &str| {
        FileSessionStore::open(&root)
            .and_then(|s| s.load(&id))
            .map_err(|e| format!("load after {what}: {e}"))
    };
    // Each operation's calls, for the checks that span them.
    let mut history: History = vec![(calls, result.is_ok())];
    if !is_new {
        history.push((fs.disarm(), false));
        store
            .save(&next)
            .map_err(|e| format!("the failed save, retried: {e}"))?;
        history.push((fs.disarm(), true));
        let again = reload("the retried save")?;
        ensure!(
            again == new,
            "the retried save loads as revision {}",
            again.revision()
        );
    }
    let current = store.load(&id).map_err(|e| format!("load: {e}"))?;
    let follow_up = appended(&current, "follow-up", 120);
    history.push((fs.disarm(), false));
    store
        .save(&follow_up)
        .map_err(|e| format!("the next append: {e}"))?;
    history.push((fs.disarm(), true));
    check_directory_durable_first(&history)?;
    let all_calls: Vec<Call> = history.into_iter().flat_map(|(calls, _)| calls).collect();
    check_no_fsync_retry(&all_calls)?;
    let last = reload("the next append")?;
    ensure!(
        last == saved(&follow_up),
        "the next append loads as revision {} with {} messages, not revision {} with {}",
        last.revision(),
        last.transcript().len(),
        saved(&follow_up).revision(),
        follow_up.transcript().len()
    );
    Ok(())
}

#[test]
#[allow(clippy::too_many_lines)] // one pinned sequence per case, read top to bottom
fn clean_calls_of_journal_saves_and_of_a_delete_with_a_journal_are_in_the_durable_order() {
    use Op::{
        CreatePrivate, CreateTemp, OpenRead, OpenWrite, RemoveFile, Rename, SetLen,
        SymlinkMetadata, SyncData, SyncDir, SyncFile, WriteAll, WriteAllAt,
    };
    let inspect = [
        (SymlinkMetadata, "lock"),
        (SymlinkMetadata, "dir"),
        (OpenRead, "lease"),
        (SymlinkMetadata, "base"),
        (SymlinkMetadata, "journal"),
    ];
    // The state this store remembers is trusted only while the base's header still says
    // so.
    let remembered = [
        inspect.as_slice(),
        &[(OpenRead, "base"), (SymlinkMetadata, "base")],
    ]
    .concat();
    let summary = [
        (OpenWrite, "summary"),
        (WriteAllAt, "summary"),
        (SetLen, "summary"),
    ];
    // An append cuts the journal to where its intact records end (a torn tail, or an older
    // base's records, goes), writes the record there, and syncs its data; a journal it
    // created also needs the directory synced.
    let appending = [
        (OpenWrite, "journal"),
        (SetLen, "journal"),
        (WriteAllAt, "journal"),
        (SyncData, "journal"),
    ];
    let first = [
        remembered.as_slice(),
        &[
            (OpenWrite, "journal"),
            (CreatePrivate, "journal"),
            (SetLen, "journal"),
            (WriteAllAt, "journal"),
            (SyncData, "journal"),
            (SyncDir, "dir"),
        ],
        &summary,
    ]
    .concat();
    let append = [remembered.as_slice(), &appending, &summary].concat();
    // An append that starts the journal again at offset 0 over an older base's (emptied)
    // journal also removes a view checkpoint that base may have left.
    let after_rewrite = [
        remembered.as_slice(),
        &[(OpenWrite, "journal"), (RemoveFile, "view")],
        &appending[1..],
        &summary,
    ]
    .concat();
    // A store that remembers nothing reads and verifies the whole state before it
    // appends (the base, the journal, then the base's name again). The journal it finds
    // holds an older base's records, so the new journal starts at offset 0. Files this
    // store did not name itself may not be in the directory durably yet (a save that
    // crashed before its directory fsync), so the directory is fsynced first. The stale
    // journal is then emptied durably (`set_len(0)`, `sync_data`), or a crash that lost the
    // truncation could keep the new header and record over stale records, and a view
    // checkpoint of the older base is removed; then the usual cut (to 0 again, a no-op),
    // write and sync.
    let from_files = [
        inspect.as_slice(),
        &[
            (OpenRead, "base"),
            (SymlinkMetadata, "base"),
            (OpenRead, "journal"),
            (SymlinkMetadata, "journal"),
            (SymlinkMetadata, "base"),
            (SyncDir, "dir"),
            (OpenWrite, "journal"),
            (SetLen, "journal"),
            (SyncData, "journal"),
            (RemoveFile, "view"),
        ],
        &appending[1..],
        &summary,
    ]
    .concat();
    // A new session saved over one with a journal replaces the base (after the forks that
    // share the old session's messages, none here, get their own copy); once that is
    // durable it empties the journal, durably too, so no later journal started at offset
    // 0 lands over its old entries.
    let replace = [
        remembered.as_slice(),
        &[
            (OpenRead, "forks"),
            (SymlinkMetadata, "journal"),
            (CreateTemp, "temp"),
            (WriteAll, "temp"),
            (SyncFile, "temp"),
            (Rename, "temp"),
            (SyncDir, "dir"),
            (RemoveFile, "view"),
            (OpenWrite, "journal"),
            (SetLen, "journal"),
            (SyncData, "journal"),
            (SymlinkMetadata, "base"),
            (SymlinkMetadata, "journal"),
        ],
        &summary,
    ]
    .concat();
    // A compaction appends as a turn does, then writes its view checkpoint in place
    // (created the first time), without fsync, after the summary.
    let compact = [
        append.as_slice(),
        &[
            (OpenWrite, "view"),
            (CreatePrivate, "view"),
            (WriteAllAt, "view"),
            (SetLen, "view"),
        ],
    ]
    .concat();
    // A journal of format 1 is read back whole (the base, the journal, the base's name
    // again) and written again in the current format with the entry added: a new file,
    // synced, renamed over the old one, and the directory synced. The base stays.
    let upgrade = [
        remembered.as_slice(),
        &[
            (OpenRead, "base"),
            (SymlinkMetadata, "base"),
            (OpenRead, "journal"),
            (SymlinkMetadata, "journal"),
            (SymlinkMetadata, "base"),
            (SymlinkMetadata, "journal"),
            (CreateTemp, "temp"),
            (WriteAll, "temp"),
            (SyncFile, "temp"),
            (Rename, "temp"),
            (SyncDir, "dir"),
            (SymlinkMetadata, "journal"),
        ],
        &summary,
    ]
    .concat();
    for (case, calls, rewrites) in [
        (JournalCase::FirstAppend, &first, false),
        (JournalCase::Append, &append, false),
        (JournalCase::AfterRewrite, &after_rewrite, false),
        (JournalCase::OverStaleJournal, &from_files, false),
        (JournalCase::Replace, &replace, true),
        (JournalCase::Rewind, &append, false),
        (JournalCase::Edit, &append, false),
        (JournalCase::Compact, &compact, false),
        (JournalCase::Restore, &append, false),
        (JournalCase::Upgrade, &upgrade, false),
    ] {
        assert_eq!(
            clean_journal_calls(case),
            (calls.clone(), rewrites),
            "{case:?}"
        );
    }
    // A delete with a journal: the list of sharing forks (none), then the base's unlink
    // is made durable before the journal goes (the other order could bring the base back
    // without its records, at an older revision), then the journal and the summary, and
    // the directory synced again.
    assert_eq!(
        clean_delete_calls_of(true),
        [
            (SymlinkMetadata, "lock"),
            (SymlinkMetadata, "dir"),
            (OpenRead, "forks"),
            (SymlinkMetadata, "base"),
            (RemoveFile, "base"),
            (SyncDir, "dir"),
            (SymlinkMetadata, "journal"),
            (RemoveFile, "journal"),
            (SymlinkMetadata, "summary"),
            (RemoveFile, "summary"),
            (SymlinkMetadata, "view"),
            (SymlinkMetadata, "archived"),
            (SyncDir, "dir"),
        ]
    );
}

/// A compacted session (with its view checkpoint) in `dir`, through `fs`.
fn compacted_with_view(dir: &Path, fs: &Arc<FaultyFileSystem>) -> FileSessionStore {
    let store = open_faulty(dir, fs).expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    store.save(&snapshot_on(&id, 0, "base", 300)).expect("save");
    for turn in ["first", "second", "third", "fourth"] {
        let loaded = store.load(&id).expect("load");
        store.save(&appended(&loaded, turn, 2_000)).expect("append");
    }
    let mut compacted = store.load(&id).expect("load");
    let replaced = compacted.transcript().len() - 1;
    compacted
        .compact(Compaction::new(replaced, vec![Message::user("summary")]))
        .expect("compact");
    store.save(&compacted).expect("save the compaction");
    assert!(dir.join(format!("{ID}.view")).exists(), "setup: a view");
    fs.disarm();
    store
}

/// A store in a fresh scratch directory through its own faulty file system, holding a
/// session saved and given two turns, and that session rewound by one turn (not saved).
fn with_a_rewind() -> (
    tempfile::TempDir,
    Arc<FaultyFileSystem>,
    FileSessionStore,
    SessionSnapshot,
) {
    let (scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let store = open_faulty(&base.join("store"), &fs).expect("open");
    let id = SessionId::parse(ID).expect("valid id");
    store.save(&snapshot_on(&id, 0, "base", 300)).expect("save");
    for turn in ["first", "second"] {
        let loaded = store.load(&id).expect("load");
        store.save(&appended(&loaded, turn, 200)).expect("append");
    }
    let mut rewound = store.load(&id).expect("load");
    rewound.rewind(RewindTo::LastTurns(1)).expect("rewind");
    fs.disarm();
    (scratch, fs, store, rewound)
}

/// A rewind whose `fdatasync` failed stays in the journal (its save says it may not be
/// durable); the next save writes the journal again with it, and what that save records
/// of the history (the listing summary's counts) counts the rewind.
#[test]
fn a_rewind_whose_fsync_failed_is_counted_by_the_next_save() {
    use crate::store::SessionStore as _;
    // Where the rewind's `fdatasync` is, from a clean run (calls are counted from 1).
    let k = {
        let (_scratch, fs, store, rewound) = with_a_rewind();
        store.save(&rewound).expect("clean rewind");
        fs.disarm()
            .iter()
            .position(|c| c.op == Op::SyncData)
            .expect("an fdatasync")
            + 1
    };
    let (_scratch, fs, store, rewound) = with_a_rewind();
    let id = rewound.id().clone();
    fs.arm(k, Fault::Eio, Persistence::Persistent);
    let err = store.save(&rewound).expect_err("the fdatasync failed");
    fs.disarm();
    assert!(matches!(err, Error::NotDurable { .. }), "{err}");
    // The caller goes on from what it saved (the entry is in the journal).
    let next = appended(&rewound.with_revision(Revision::from_u64(4)), "third", 200);
    store.save(&next).expect("the next save");
    let listed = store.list().expect("list");
    assert_eq!(listed.sessions.len(), 1);
    assert_eq!(listed.sessions[0].history.rewinds, 1, "{listed:?}");
    assert_eq!(store.load(&id).expect("load").history_stats().rewinds, 1);
}

/// A view checkpoint holds messages: one a rewrite could not remove (its rename not yet
/// durable, so the old base may come back and the view with it) goes with the next
/// append, which empties the old base's journal too.
#[test]
fn a_view_left_by_a_rewrite_whose_rename_was_not_durable_goes_with_the_next_append() {
    let id = SessionId::parse(ID).expect("valid id");
    // Where the rewrite's directory fsync after its rename is, from a clean run.
    let k = {
        let (_scratch, base) = scratch_dir();
        let fs = Arc::new(FaultyFileSystem::default());
        let store = compacted_with_view(&base.join("store"), &fs);
        let stored = store.load(&id).expect("load").revision().as_u64();
        fs.disarm();
        store
            .save(&snapshot_on(&id, stored, "another session", 400))
            .expect("clean rewrite");
        let calls = fs.disarm();
        let renamed = calls
            .iter()
            .position(|c| c.op == Op::Rename)
            .expect("a rename");
        // Calls are counted from 1.
        renamed
            + 2
            + calls[renamed + 1..]
                .iter()
                .position(|c| c.op == Op::SyncDir)
                .expect("a directory fsync after it")
    };
    let (_scratch, base) = scratch_dir();
    let dir = base.join("store");
    let fs = Arc::new(FaultyFileSystem::default());
    let store = compacted_with_view(&dir, &fs);
    let view = dir.join(format!("{ID}.view"));
    let stored = store.load(&id).expect("load").revision().as_u64();
    fs.arm(k, Fault::Eio, Persistence::Once);
    let err = store
        .save(&snapshot_on(&id, stored, "another session", 400))
        .expect_err("the directory fsync failed");
    fs.disarm();
    assert!(matches!(err, Error::NotDurable { .. }), "{err}");
    assert!(view.exists(), "kept while the old base may come back");
    let loaded = store.load(&id).expect("load the new session");
    store
        .save(&appended(&loaded, "next", 100))
        .expect("the next append");
    assert!(!view.exists(), "the old base's view outlived its journal");
}

#[test]
fn every_failing_call_of_a_journal_save_leaves_the_old_or_the_new_state_and_the_next_save_works() {
    let mut figures = JournalFigures::default();
    let mut failures = Vec::new();
    let mut calls_per_case = Vec::new();
    for case in JOURNAL_CASES {
        let (ops, _) = clean_journal_calls(case);
        calls_per_case.push(format!("{case:?}: {}", ops.len()));
        for k in 1..=ops.len() + 1 {
            for &fault in faults_for(ops.get(k - 1).map(|(op, _)| op)) {
                for persistence in [Persistence::Once, Persistence::Persistent] {
                    if let Err(why) =
                        journal_save_with_fault(case, fault, persistence, k, &mut figures)
                    {
                        failures.push(format!(
                            "{case:?}, {fault:?} {persistence:?} at call {k} ({:?}): {why}",
                            ops.get(k - 1)
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} faulted journal saves broke a promise:\n{}",
        failures.len(),
        figures.runs,
        failures.join("\n")
    );
    // Every kind of call of an append was failed.
    for op in [
        "OpenWrite journal",
        "CreatePrivate journal",
        "SetLen journal",
        "WriteAllAt journal",
        "SyncData journal",
        "SyncDir dir",
        "OpenRead journal",
        "WriteAll temp",
        "Rename temp",
    ] {
        assert!(figures.by_op.contains_key(op), "{op} was never failed");
    }
    eprintln!(
        "fault injection, journal saves ({}): {} faulted saves, {} failed with an Io-kind \
         error ({} of them NotDurable with the new revision loadable), the rest succeeded \
         ({} failures of best-effort bookkeeping or of the verifying read swallowed); injected per call: {:?}",
        calls_per_case.join(", "),
        figures.runs,
        figures.failed,
        figures.not_durable,
        figures.swallowed,
        figures.by_op
    );
}

#[test]
fn a_journal_record_whose_fdatasync_failed_is_never_made_durable_by_a_later_fdatasync() {
    // The append's fdatasync fails and so does every call after it (the disk is going):
    // the record cannot be taken back off, so the save reports NotDurable with the new
    // revision in place. The kernel may already have dropped that record's dirty pages, so
    // the next save must not treat it as written: a later fdatasync of the same journal
    // that has not first cut the record off (or a save that does not rewrite the base from
    // the snapshot in memory) "succeeds" without it, and a power cut then leaves a damaged
    // record followed by an intact one: a session that no longer loads at all.
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let (store, old, next) = prepare_journal_case(&dir, &fs, JournalCase::Append).expect("prepare");
    let sync_data = clean_journal_calls(JournalCase::Append)
        .0
        .iter()
        .position(|&(op, _)| op == Op::SyncData)
        .expect("an append syncs the journal")
        + 1;
    fs.arm(sync_data, Fault::Eio, Persistence::Persistent);
    let err = store.save(&next).expect_err("the fdatasync fails");
    let mut calls = fs.disarm();
    check_not_durable(&err, store.dir(), libc::EIO, old.revision().as_u64() + 1)
        .expect("NotDurable: the record could not be taken back");
    // The session is loaded through the same store between the two saves (what a harness
    // resuming it does): that load reads the record back from the page cache, and must not
    // make the store forget that the record may not be on disk.
    let current = store.load(&old.id().clone()).expect("load");
    assert_eq!(current, saved(&next));
    store
        .save(&appended(&current, "next turn", 100))
        .expect("the next save");
    calls.extend(fs.disarm());
    check_no_fsync_retry(&calls).expect("no fsync retried on the journal");
}

#[test]
fn after_a_journal_fdatasync_failed_the_next_save_of_the_same_store_writes_the_journal_again_whole()
{
    // As above, but the next snapshot comes from another store instance's load, so the
    // faulted store reads nothing between the two saves: it remembers that the record may
    // be lost, so it does not append after it. It reads the journal back, verifies it, and
    // writes it again whole with the new entry into a new file that it syncs and renames
    // over the old one: nothing of the new journal rests on the failed fdatasync, and the
    // history is kept. The base is not touched.
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let (store, old, next) = prepare_journal_case(&dir, &fs, JournalCase::Append).expect("prepare");
    let id = old.id().clone();
    let base_before = std::fs::read(store.path_of(&id)).expect("read the base");
    let sync_data = clean_journal_calls(JournalCase::Append)
        .0
        .iter()
        .position(|&(op, _)| op == Op::SyncData)
        .expect("an append syncs the journal")
        + 1;
    fs.arm(sync_data, Fault::Eio, Persistence::Persistent);
    let err = store.save(&next).expect_err("the fdatasync fails");
    let failed = fs.disarm();
    check_not_durable(&err, store.dir(), libc::EIO, old.revision().as_u64() + 1)
        .expect("NotDurable: the record could not be taken back");
    let current = FileSessionStore::open(store.dir())
        .and_then(|other| other.load(&id))
        .expect("load through another store");
    assert_eq!(current, saved(&next));
    let turn = appended(&current, "next turn", 100);
    let revision = store.save(&turn).expect("the next save");
    assert_eq!(revision, saved(&turn).revision());
    let next_calls = fs.disarm();
    assert!(
        !next_calls
            .iter()
            .any(|c| kind(c) == "journal"
                && matches!(c.op, Op::SetLen | Op::WriteAllAt | Op::SyncData)),
        "the journal whose fdatasync failed was written to: {:?}",
        steps(&next_calls)
    );
    let rename = next_calls
        .iter()
        .position(|c| c.op == Op::Rename && c.errno.is_none())
        .expect("the next save renames a new journal into place");
    assert!(
        next_calls[..rename]
            .iter()
            .any(|c| c.op == Op::SyncFile && kind(c) == "temp"),
        "the new journal was not synced before its rename: {:?}",
        steps(&next_calls)
    );
    check_directory_durable_first(&[(failed.clone(), false), (next_calls.clone(), true)])
        .expect("directory changes durable first");
    let all: Vec<Call> = failed.into_iter().chain(next_calls).collect();
    check_no_fsync_retry(&all).expect("no fsync retried on the journal");
    let other = FileSessionStore::open(store.dir()).expect("open");
    assert_eq!(other.load(&id).expect("load"), saved(&turn));
    assert_eq!(
        std::fs::read(store.path_of(&id)).expect("read the base"),
        base_before,
        "the base is not touched"
    );
    // Every revision is still in the history.
    let revisions: Vec<u64> = other
        .revisions(&id)
        .expect("revisions")
        .iter()
        .map(|r| r.revision.as_u64())
        .collect();
    assert_eq!(
        revisions,
        (1..=saved(&turn).revision().as_u64()).collect::<Vec<_>>()
    );
}

/// A save whose directory fsync failed: see [`save_with_failed_dir_sync`].
struct FailedDirSync {
    store: FileSessionStore,
    /// The snapshot saved.
    next: SessionSnapshot,
    /// The journal's bytes before the save, if there was one.
    journal_before: Option<Vec<u8>>,
    /// The calls of the save.
    calls: Vec<Call>,
}

/// Prepares `case`, then saves its snapshot with the first directory fsync of the save
/// failing once: the save must say [`Error::NotDurable`].
fn save_with_failed_dir_sync(
    dir: &Path,
    fs: &Arc<FaultyFileSystem>,
    case: JournalCase,
) -> FailedDirSync {
    let (store, old, next) = prepare_journal_case(dir, fs, case).expect("prepare");
    let sync_dir = clean_journal_calls(case)
        .0
        .iter()
        .position(|&step| step == (Op::SyncDir, "dir"))
        .expect("the save syncs the directory")
        + 1;
    let journal_before = std::fs::read(dir.join(format!("{ID}.journal"))).ok();
    fs.arm(sync_dir, Fault::Eio, Persistence::Once);
    let err = store.save(&next).expect_err("the directory fsync fails");
    let calls = fs.disarm();
    check_not_durable(&err, store.dir(), libc::EIO, old.revision().as_u64() + 1)
        .expect("NotDurable");
    FailedDirSync {
        store,
        next,
        journal_before,
        calls,
    }
}

#[test]
fn a_new_base_whose_directory_fsync_failed_keeps_the_old_bases_journal_until_the_rename_is_durable()
{
    // A new session saved over one with a journal renames the new base over the old one,
    // and its directory fsync fails:
    // the rename may not survive a power cut, and the old base that would then come back
    // needs its journal's records, which were acknowledged. So the journal must not be
    // emptied (nor restarted by the next append) before a directory fsync succeeds; its
    // header names the old base, so the new base ignores it meanwhile.
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let FailedDirSync {
        store,
        next,
        journal_before,
        calls: failed,
    } = save_with_failed_dir_sync(&dir, &fs, JournalCase::Replace);
    let journal = dir.join(format!("{ID}.journal"));
    assert!(journal_before.as_ref().is_some_and(|j| !j.is_empty()));
    let journal_after = std::fs::read(&journal).ok();
    // The next append, on the state loaded by another store instance.
    let current = FileSessionStore::open(&dir)
        .and_then(|other| other.load(next.id()))
        .expect("load");
    assert_eq!(current, saved(&next));
    let turn = appended(&current, "next turn", 100);
    store.save(&turn).expect("the next save");
    let next_calls = fs.disarm();
    let history = [(failed, false), (next_calls, true)];
    let loaded = FileSessionStore::open(&dir)
        .and_then(|other| other.load(turn.id()))
        .expect("load");
    assert_eq!(loaded, saved(&turn));
    assert_eq!(
        journal_after, journal_before,
        "the new base's save changed the old base's journal although its rename may not be durable"
    );
    check_directory_durable_first(&history).expect("the rename made durable first");
}

#[test]
fn a_journal_whose_creation_was_not_made_durable_is_synced_into_the_directory_before_an_append_is_acknowledged(
) {
    // The first append creates the journal and its directory fsync fails: the journal's
    // name may not survive a power cut. A later append to that journal (this store does
    // not create it again) must make the name durable before it is acknowledged, or a
    // power cut could drop the journal and with it that acknowledged revision.
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let FailedDirSync {
        store,
        next,
        calls: failed,
        ..
    } = save_with_failed_dir_sync(&dir, &fs, JournalCase::FirstAppend);
    assert!(failed
        .iter()
        .any(|c| c.op == Op::CreatePrivate && kind(c) == "journal" && c.errno.is_none()));
    let current = FileSessionStore::open(&dir)
        .and_then(|other| other.load(next.id()))
        .expect("load");
    assert_eq!(current, saved(&next));
    let turn = appended(&current, "next turn", 100);
    store.save(&turn).expect("the next save");
    let next_calls = fs.disarm();
    let loaded = FileSessionStore::open(&dir)
        .and_then(|other| other.load(turn.id()))
        .expect("load");
    assert_eq!(loaded, saved(&turn));
    check_directory_durable_first(&[(failed, false), (next_calls, true)])
        .expect("the journal's creation made durable first");
}

#[test]
fn a_journal_left_by_a_failed_first_append_is_synced_into_the_directory_before_an_append_is_acknowledged(
) {
    // The first append creates the journal and then its write fails: the save reports an
    // Io error and the empty journal stays, its name never synced. Retrying the save
    // appends to that journal; it must make its name durable before acknowledging.
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let (store, old, next) =
        prepare_journal_case(&dir, &fs, JournalCase::FirstAppend).expect("prepare");
    let write = clean_journal_calls(JournalCase::FirstAppend)
        .0
        .iter()
        .position(|&step| step == (Op::WriteAllAt, "journal"))
        .expect("the first append writes the journal")
        + 1;
    fs.arm(write, Fault::Eio, Persistence::Once);
    let err = store.save(&next).expect_err("the write fails");
    let failed = fs.disarm();
    check_io_error(&err, store.dir(), libc::EIO).expect("Io error");
    assert!(!matches!(err, Error::NotDurable { .. }));
    assert!(failed
        .iter()
        .any(|c| c.op == Op::CreatePrivate && kind(c) == "journal" && c.errno.is_none()));
    assert_eq!(store.load(old.id()).expect("load"), old);
    store.save(&next).expect("the retried save");
    let retried = fs.disarm();
    let loaded = FileSessionStore::open(&dir)
        .and_then(|other| other.load(next.id()))
        .expect("load");
    assert_eq!(loaded, saved(&next));
    check_directory_durable_first(&[(failed, false), (retried, true)])
        .expect("the journal's creation made durable first");
}

// ---------------------------------------------------------------------------------------
// SessionStore::restore: one entry appended from what the store knows of the revisions.
// ---------------------------------------------------------------------------------------

/// A session at revision 3 (a base and two turns), in a store that, when `hot`, restored
/// it once before (so it keeps every revision's lengths) and saved a turn after; otherwise
/// in a store opened anew, which knows nothing of it. Returns the store, the head, and
/// what restoring revision 1 makes (times aside).
fn prepare_restore(
    dir: &Path,
    fs: &Arc<FaultyFileSystem>,
    hot: bool,
) -> Result<(FileSessionStore, SessionSnapshot, SessionSnapshot), String> {
    let setup = |what: &str, e: Error| format!("setup {what}: {e}");
    let store = open_faulty(dir, fs)?;
    let id = SessionId::parse(ID).expect("valid id");
    store
        .save(&snapshot_on(&id, 0, "base", 300))
        .map_err(|e| setup("save", e))?;
    let mut tags = vec!["first turn", "second turn"];
    if hot {
        tags.push("third turn");
    }
    for (i, tag) in tags.into_iter().enumerate() {
        if hot && i == 2 {
            store
                .restore(&id, Revision::from_u64(2))
                .map_err(|e| setup("restore", e))?;
        }
        let head = store.load(&id).map_err(|e| setup("load", e))?;
        store
            .save(&appended(&head, tag, 200))
            .map_err(|e| setup("append", e))?;
    }
    let store = if hot { store } else { open_faulty(dir, fs)? };
    let old = FileSessionStore::open(dir)
        .and_then(|s| s.load(&id))
        .map_err(|e| setup("load the head", e))?;
    let mut expected = old.clone();
    let first = FileSessionStore::open(dir)
        .and_then(|s| s.load_at(&id, Revision::from_u64(1)))
        .map_err(|e| setup("load revision 1", e))?;
    expected
        .restore_from(&first)
        .map_err(|e| setup("restore_from", e))?;
    Ok((store, old, expected))
}

/// Whether `loaded` is the restore `expected` describes, stored at `revision`.
fn is_restored(loaded: &SessionSnapshot, expected: &SessionSnapshot, revision: Revision) -> bool {
    loaded.revision() == revision
        && loaded.transcript() == expected.transcript()
        && loaded.tool_calls() == expected.tool_calls()
        && loaded.usage() == expected.usage()
        && loaded.options() == expected.options()
        && loaded.metadata() == expected.metadata()
}

/// Runs `faulted` with each call `k` of `calls` (and one past them) failing, with EIO and
/// ENOSPC, once and persistently: how many runs, how many failed (as `faulted` says), and
/// the promises broken, each naming its fault and call.
fn sweep_calls(
    calls: &[(Op, &'static str)],
    faulted: impl Fn(Fault, Persistence, usize) -> Result<bool, String>,
) -> (usize, usize, Vec<String>) {
    let (mut runs, mut failed) = (0, 0);
    let mut failures = Vec::new();
    for k in 1..=calls.len() + 1 {
        for fault in [Fault::Eio, Fault::Enospc] {
            for persistence in [Persistence::Once, Persistence::Persistent] {
                runs += 1;
                match faulted(fault, persistence, k) {
                    Ok(f) => failed += usize::from(f),
                    Err(why) => failures.push(format!(
                        "{fault:?} {persistence:?} at call {k} ({:?}): {why}",
                        calls.get(k - 1)
                    )),
                }
            }
        }
    }
    (runs, failed, failures)
}

/// The calls of a clean `restore` of revision 1.
fn clean_restore_calls(hot: bool) -> Vec<(Op, &'static str)> {
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let (store, old, expected) = prepare_restore(&dir, &fs, hot).expect("prepare");
    fs.disarm();
    let revision = store
        .restore(old.id(), Revision::from_u64(1))
        .expect("restore");
    let calls = steps(&fs.disarm());
    let loaded = FileSessionStore::open(&dir)
        .and_then(|s| s.load(old.id()))
        .expect("load");
    assert!(is_restored(&loaded, &expected, revision), "hot: {hot}");
    calls
}

#[test]
fn a_restore_in_a_store_that_knows_the_revisions_reads_nothing_but_the_base_header() {
    use Op::{OpenRead, OpenWrite, SetLen, SymlinkMetadata, SyncData, WriteAllAt};
    // It checks the lock, that no lease is live, the files' identities and the base's
    // header, and appends the entry: no read of the journal, whatever its length, and no
    // summary (the next listing reads the session).
    assert_eq!(
        clean_restore_calls(true),
        [
            (SymlinkMetadata, "lock"),
            (SymlinkMetadata, "dir"),
            (OpenRead, "lease"),
            (SymlinkMetadata, "base"),
            (SymlinkMetadata, "journal"),
            (OpenRead, "base"),
            (SymlinkMetadata, "base"),
            (OpenWrite, "journal"),
            (SetLen, "journal"),
            (WriteAllAt, "journal"),
            (SyncData, "journal"),
        ]
    );
    // A store that never read the session reads it whole once, to verify it and learn
    // its revisions, then appends the same way.
    let cold = clean_restore_calls(false);
    assert!(
        cold.iter().filter(|c| **c == (OpenRead, "journal")).count() >= 1,
        "{cold:?}"
    );
    assert_eq!(
        &cold[cold.len() - 4..],
        [
            (OpenWrite, "journal"),
            (SetLen, "journal"),
            (WriteAllAt, "journal"),
            (SyncData, "journal"),
        ]
    );
}

/// Restores revision 1 with call `k` failing, then checks: a typed error or success; what
/// a fresh store loads is the old head exactly, or (after success or
/// [`Error::NotDurable`]) the restore; no temporary file; no fsync retried; and once the
/// fault is gone the same store restores and loads it. Returns whether the call failed.
fn restore_with_fault(
    hot: bool,
    fault: Fault,
    persistence: Persistence,
    k: usize,
) -> Result<bool, String> {
    let (_scratch, base) = scratch_dir();
    let dir = base.join("store");
    let fs = Arc::new(FaultyFileSystem::default());
    let (store, old, expected) = prepare_restore(&dir, &fs, hot)?;
    let root = store.dir().to_path_buf();
    let id = old.id().clone();
    let new_revision = old.revision().next();
    fs.arm(k, fault, persistence);
    let result = store.restore(&id, Revision::from_u64(1));
    let calls = fs.disarm();
    check_no_fsync_retry(&calls)?;
    ensure!(temp_files(&root).is_empty(), "temporary files left");
    let loaded = FileSessionStore::open(&root)
        .and_then(|s| s.load(&id))
        .map_err(|e| format!("the session cannot be loaded after the fault: {e}"))?;
    let failed = match &result {
        Ok(revision) => {
            ensure!(
                *revision == new_revision && is_restored(&loaded, &expected, new_revision),
                "an acknowledged restore is not what loads (revision {})",
                loaded.revision()
            );
            false
        }
        Err(err @ Error::NotDurable { .. }) => {
            check_not_durable(err, &root, fault.errno(), new_revision.as_u64())?;
            ensure!(
                loaded == old || is_restored(&loaded, &expected, new_revision),
                "NotDurable, but revision {} loads, neither the old head nor the restore",
                loaded.revision()
            );
            true
        }
        Err(err) => {
            check_io_error(err, &root, fault.errno())?;
            ensure!(
                loaded == old,
                "a failed restore left revision {} loadable, not exactly the old {}",
                loaded.revision(),
                old.revision()
            );
            true
        }
    };
    if loaded == old {
        let revision = store
            .restore(&id, Revision::from_u64(1))
            .map_err(|e| format!("the restore again, without the fault: {e}"))?;
        let again = FileSessionStore::open(&root)
            .and_then(|s| s.load(&id))
            .map_err(|e| format!("load after the retry: {e}"))?;
        ensure!(
            revision == new_revision && is_restored(&again, &expected, new_revision),
            "the retried restore does not load"
        );
    }
    Ok(failed)
}

#[test]
fn every_failing_call_of_a_restore_keeps_the_old_head_or_stores_the_restore() {
    for hot in [true, false] {
        let calls = clean_restore_calls(hot);
        let (runs, failed, failures) = sweep_calls(&calls, |fault, persistence, k| {
            restore_with_fault(hot, fault, persistence, k)
        });
        assert!(
            failures.is_empty(),
            "{} of {runs} faulted restores broke a promise:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert!(failed > 0, "hot {hot}: no fault made a restore fail");
        eprintln!("fault injection, restore (hot {hot}): {runs} faulted restores, {failed} failed with a typed error");
    }
}

// ---------------------------------------------------------------------------------------
// SessionStore::trim_history: three atomic replacements, each leaving a log that loads.
// ---------------------------------------------------------------------------------------

/// A session at revision 6 (a base, four turns, a rewind), in a store that knows it;
/// every revision as it loads, oldest first.
fn prepare_trim(
    dir: &Path,
    fs: &Arc<FaultyFileSystem>,
) -> Result<(FileSessionStore, SessionId, Vec<SessionSnapshot>), String> {
    let setup = |what: &str, e: Error| format!("setup {what}: {e}");
    let store = open_faulty(dir, fs)?;
    let id = SessionId::parse(ID).expect("valid id");
    store
        .save(&snapshot_on(&id, 0, "base", 300))
        .map_err(|e| setup("save", e))?;
    for tag in ["one", "two", "three", "four"] {
        let head = store.load(&id).map_err(|e| setup("load", e))?;
        store
            .save(&appended(&head, tag, 200))
            .map_err(|e| setup("append", e))?;
    }
    let mut head = store.load(&id).map_err(|e| setup("load", e))?;
    head.rewind(RewindTo::LastTurns(1))
        .map_err(|e| setup("rewind", e))?;
    store.save(&head).map_err(|e| setup("rewind", e))?;
    let revisions = (1..=6)
        .map(|r| store.load_at(&id, Revision::from_u64(r)))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| setup("load_at", e))?;
    Ok((store, id, revisions))
}

/// Which revisions a fresh store keeps of `id`, checking each loads as `expected` says.
fn kept_revisions(
    root: &Path,
    id: &SessionId,
    expected: &[SessionSnapshot],
) -> Result<Vec<u64>, String> {
    let fresh = FileSessionStore::open(root).map_err(|e| format!("reopen: {e}"))?;
    let head = fresh.load(id).map_err(|e| format!("load: {e}"))?;
    ensure!(
        Some(&head) == expected.last(),
        "the head changed: revision {}",
        head.revision()
    );
    let mut kept = Vec::new();
    for (i, before) in expected.iter().enumerate() {
        match fresh.load_at(id, before.revision()) {
            Ok(loaded) => {
                ensure!(&loaded == before, "revision {} loads otherwise", i + 1);
                kept.push(before.revision().as_u64());
            }
            Err(Error::RevisionNotFound { .. }) => {}
            Err(e) => return Err(format!("load_at {}: {e}", i + 1)),
        }
    }
    let listed: Vec<u64> = fresh
        .revisions(id)
        .map_err(|e| format!("revisions: {e}"))?
        .iter()
        .map(|r| r.revision.as_u64())
        .collect();
    ensure!(
        listed == kept,
        "revisions() lists {listed:?}, {kept:?} load"
    );
    Ok(kept)
}

#[test]
fn a_clean_trim_is_three_atomic_replacements() {
    use Op::{CreateTemp, Rename, SyncDir, SyncFile, WriteAll};
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let (store, id, revisions) = prepare_trim(&dir, &fs).expect("prepare");
    fs.disarm();
    assert_eq!(
        store
            .trim_history(&id, Revision::from_u64(4))
            .expect("trim"),
        3
    );
    let calls = steps(&fs.disarm());
    let replace = |file| {
        [
            (CreateTemp, "temp"),
            (WriteAll, "temp"),
            (SyncFile, "temp"),
            (Rename, file),
            (SyncDir, "dir"),
        ]
    };
    let writes: Vec<(Op, &str)> = calls
        .iter()
        .copied()
        .filter(|(op, _)| matches!(op, CreateTemp | WriteAll | SyncFile | Rename | SyncDir))
        .collect();
    let renamed: Vec<(Op, &str)> = [replace("temp"), replace("temp"), replace("temp")].concat();
    assert_eq!(writes, renamed, "{calls:?}");
    assert_eq!(
        kept_revisions(&dir, &id, &revisions).expect("after"),
        [4, 5, 6]
    );
}

/// Trims revisions 1 to 3 with call `k` failing, then checks: a typed error or success;
/// the head loads unchanged; the revisions kept are all six (nothing done) or 4 to 6, each
/// loading as before; `Ok` means 4 to 6; no temporary file; no fsync retried; and the
/// trim once the fault is gone leaves 4 to 6. Returns whether the call failed.
fn trim_with_fault(fault: Fault, persistence: Persistence, k: usize) -> Result<bool, String> {
    let (_scratch, base) = scratch_dir();
    let dir = base.join("store");
    let fs = Arc::new(FaultyFileSystem::default());
    let (store, id, revisions) = prepare_trim(&dir, &fs)?;
    let root = store.dir().to_path_buf();
    fs.arm(k, fault, persistence);
    let result = store.trim_history(&id, Revision::from_u64(4));
    let calls = fs.disarm();
    check_no_fsync_retry(&calls)?;
    let cleanup_failed = calls
        .iter()
        .any(|c| c.op == Op::RemoveFile && kind(c) == "temp" && c.errno.is_some());
    ensure!(
        temp_files(&root).len() == usize::from(cleanup_failed),
        "temporary files left"
    );
    let kept = kept_revisions(&root, &id, &revisions)?;
    ensure!(
        kept == [1, 2, 3, 4, 5, 6] || kept == [4, 5, 6],
        "revisions {kept:?} kept"
    );
    let failed = match &result {
        Ok(dropped) => {
            ensure!(*dropped == 3 && kept == [4, 5, 6], "Ok, but {kept:?} kept");
            false
        }
        Err(err @ Error::NotDurable { .. }) => {
            check_not_durable(err, &root, fault.errno(), 6)?;
            true
        }
        Err(err) => {
            check_io_error(err, &root, fault.errno())?;
            true
        }
    };
    let dropped = store
        .trim_history(&id, Revision::from_u64(4))
        .map_err(|e| format!("the trim again, without the fault: {e}"))?;
    ensure!(
        dropped == if kept.len() == 6 { 3 } else { 0 },
        "the retry dropped {dropped}"
    );
    let after = kept_revisions(&root, &id, &revisions)?;
    ensure!(after == [4, 5, 6], "after the retry {after:?} kept");
    // The base and the journal are in the usual form again: a fresh store appends.
    let fresh = FileSessionStore::open(&root).map_err(|e| format!("reopen: {e}"))?;
    let head = fresh.load(&id).map_err(|e| format!("load: {e}"))?;
    let next = appended(&head, "after the trim", 100);
    let revision = fresh
        .save(&next)
        .map_err(|e| format!("save after the trim: {e}"))?;
    ensure!(
        fresh.load(&id).map_err(|e| e.to_string())? == next.with_revision(revision),
        "the save after the trim does not load"
    );
    Ok(failed)
}

#[test]
fn every_failing_call_of_a_trim_keeps_the_history_or_drops_exactly_the_revisions_asked() {
    let calls = {
        let (_scratch, base) = scratch_dir();
        let fs = Arc::new(FaultyFileSystem::default());
        let dir = base.join("store");
        let (store, id, _) = prepare_trim(&dir, &fs).expect("prepare");
        fs.disarm();
        store
            .trim_history(&id, Revision::from_u64(4))
            .expect("trim");
        steps(&fs.disarm())
    };
    let (runs, failed, failures) = sweep_calls(&calls, trim_with_fault);
    assert!(
        failures.is_empty(),
        "{} of {runs} faulted trims broke a promise:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(failed > 0);
    eprintln!("fault injection, trim: {runs} faulted trims over {} calls, {failed} failed with a typed error", calls.len());
}

// ---------------------------------------------------------------------------------------
// Forks that share their parent's messages: made, and given their own copy when the
// parent is deleted, with every call failing.
// ---------------------------------------------------------------------------------------

/// A parent at revision 2 (a base and a turn) in a store that knows it, as it loads.
fn prepare_parent(
    dir: &Path,
    fs: &Arc<FaultyFileSystem>,
) -> Result<(FileSessionStore, SessionSnapshot), String> {
    let setup = |what: &str, e: Error| format!("setup {what}: {e}");
    let store = open_faulty(dir, fs)?;
    let id = SessionId::parse(ID).expect("valid id");
    store
        .save(&snapshot_on(&id, 0, "parent", 300))
        .map_err(|e| setup("save", e))?;
    let head = store.load(&id).map_err(|e| setup("load", e))?;
    store
        .save(&appended(&head, "a turn", 200))
        .map_err(|e| setup("append", e))?;
    let head = store.load(&id).map_err(|e| setup("load", e))?;
    Ok((store, head))
}

/// Whether the fork's base shares its parent's messages (holds `shared_prefix`).
fn shares(root: &Path, fork: &SessionId) -> bool {
    std::fs::read(root.join(format!("{fork}.json")))
        .is_ok_and(|bytes| bytes.windows(15).any(|w| w == b"\"shared_prefix\""))
}

/// What a fresh store loads of `id`: `None` if there is no such session.
fn fresh_load(root: &Path, id: &SessionId) -> Result<Option<SessionSnapshot>, String> {
    let fresh = FileSessionStore::open(root).map_err(|e| format!("reopen: {e}"))?;
    match fresh.load(id) {
        Ok(loaded) => Ok(Some(loaded)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(format!("load {id}: {e}")),
    }
}

/// Saves a fork of the parent's head (made from the loaded head, so it may share) with
/// call `k` failing, then checks: the parent loads unchanged; the fork loads as made (and
/// shares) after success, is absent after a typed error (or either, after `NotDurable`);
/// no fsync retried, no temporary file; the save again without the fault stores it; and
/// the parent's delete then gives it its own copy, whatever the fault left in the list of
/// forks. Returns whether the call failed.
fn fork_with_fault(fault: Fault, persistence: Persistence, k: usize) -> Result<bool, String> {
    let (_scratch, base) = scratch_dir();
    let dir = base.join("store");
    let fs = Arc::new(FaultyFileSystem::default());
    let (store, head) = prepare_parent(&dir, &fs)?;
    let root = store.dir().to_path_buf();
    let fork_id = SessionId::parse("fork").expect("valid id");
    let made = head
        .fork(fork_id.clone(), ForkAt::End)
        .map_err(|e| e.to_string())?;
    fs.arm(k, fault, persistence);
    let result = store.save(&made);
    let calls = fs.disarm();
    check_no_fsync_retry(&calls)?;
    let cleanup_failed = calls
        .iter()
        .any(|c| c.op == Op::RemoveFile && kind(c) == "temp" && c.errno.is_some());
    ensure!(
        temp_files(&root).len() == usize::from(cleanup_failed),
        "temporary files left"
    );
    ensure!(
        fresh_load(&root, head.id())?.as_ref() == Some(&head),
        "the parent changed"
    );
    let stored = fresh_load(&root, &fork_id)?;
    let saved = made.clone().with_revision(Revision::from_u64(1));
    let failed = match &result {
        Ok(_) => {
            ensure!(
                stored.as_ref() == Some(&saved),
                "an acknowledged fork does not load"
            );
            // A parent that could not be read is not shared: the fork is written whole.
            ensure!(
                shares(&root, &fork_id) || calls.iter().any(|c| c.injected),
                "the fork was written whole"
            );
            false
        }
        Err(err @ Error::NotDurable { .. }) => {
            check_not_durable(err, &root, fault.errno(), 1)?;
            ensure!(
                stored.is_none() || stored.as_ref() == Some(&saved),
                "NotDurable, and the fork loads otherwise"
            );
            true
        }
        Err(err) => {
            check_io_error(err, &root, fault.errno())?;
            ensure!(stored.is_none(), "a failed fork left a session");
            true
        }
    };
    if stored.is_none() {
        store
            .save(&made)
            .map_err(|e| format!("the fork again, without the fault: {e}"))?;
    }
    store
        .delete(head.id())
        .map_err(|e| format!("delete the parent: {e}"))?;
    ensure!(
        fresh_load(&root, &fork_id)?.as_ref() == Some(&saved),
        "the fork does not load after its parent's delete"
    );
    ensure!(
        !shares(&root, &fork_id),
        "the fork still shares a deleted parent"
    );
    Ok(failed)
}

/// Deletes a parent whose fork shares its messages with call `k` failing, then checks:
/// the fork loads as made whatever happened; the parent is whole or gone; an `Ok` means
/// gone, and the fork holds its own copy; the delete again without the fault succeeds.
/// Returns whether the call failed.
fn delete_parent_with_fault(
    fault: Fault,
    persistence: Persistence,
    k: usize,
) -> Result<bool, String> {
    let (_scratch, base) = scratch_dir();
    let dir = base.join("store");
    let fs = Arc::new(FaultyFileSystem::default());
    let (store, head) = prepare_parent(&dir, &fs)?;
    let root = store.dir().to_path_buf();
    let fork_id = SessionId::parse("fork").expect("valid id");
    let fork = store
        .fork(head.id(), ForkAt::End, fork_id.clone())
        .map_err(|e| format!("setup fork: {e}"))?;
    ensure!(shares(&root, &fork_id), "setup: the fork does not share");
    fs.arm(k, fault, persistence);
    let result = store.delete(head.id());
    let calls = fs.disarm();
    check_no_fsync_retry(&calls)?;
    ensure!(
        fresh_load(&root, &fork_id)?.as_ref() == Some(&fork),
        "the fork does not load as made"
    );
    let parent = fresh_load(&root, head.id())?;
    ensure!(
        parent.is_none() || parent.as_ref() == Some(&head),
        "the parent is neither whole nor gone"
    );
    let failed = match &result {
        Ok(()) => {
            ensure!(parent.is_none(), "an acknowledged delete left the parent");
            ensure!(!shares(&root, &fork_id), "the fork still shares");
            false
        }
        Err(err) => {
            if !matches!(err, Error::NotDurable { .. }) {
                check_io_error(err, &root, fault.errno())?;
            }
            true
        }
    };
    if parent.is_some() {
        store
            .delete(head.id())
            .map_err(|e| format!("the delete again, without the fault: {e}"))?;
    }
    ensure!(
        fresh_load(&root, &fork_id)?.as_ref() == Some(&fork),
        "the fork does not load after the parent's delete"
    );
    Ok(failed)
}

#[test]
fn every_failing_call_of_a_sharing_fork_and_of_its_parents_delete_keeps_the_fork_loadable() {
    let fork_calls = {
        let (_scratch, base) = scratch_dir();
        let fs = Arc::new(FaultyFileSystem::default());
        let (store, head) = prepare_parent(&base.join("store"), &fs).expect("prepare");
        let made = head
            .fork(SessionId::parse("fork").expect("id"), ForkAt::End)
            .expect("fork");
        fs.disarm();
        store.save(&made).expect("save the fork");
        steps(&fs.disarm())
    };
    // The fork is recorded in the parent's list, durably, before its base is written.
    let listed = fork_calls
        .iter()
        .position(|c| c.1 == "forks" && matches!(c.0, Op::WriteAllAt))
        .expect("the fork is listed");
    let written = fork_calls
        .iter()
        .position(|c| c.0 == Op::Rename)
        .expect("the fork's base is written");
    assert!(listed < written, "{fork_calls:?}");
    let (runs, failed, failures) = sweep_calls(&fork_calls, fork_with_fault);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(failed > 0);
    eprintln!(
        "fault injection, sharing fork: {runs} faulted forks, {failed} failed with a typed error"
    );

    let delete_calls = {
        let (_scratch, base) = scratch_dir();
        let fs = Arc::new(FaultyFileSystem::default());
        let (store, head) = prepare_parent(&base.join("store"), &fs).expect("prepare");
        store
            .fork(
                head.id(),
                ForkAt::End,
                SessionId::parse("fork").expect("id"),
            )
            .expect("fork");
        fs.disarm();
        store.delete(head.id()).expect("delete");
        steps(&fs.disarm())
    };
    let (runs, failed, failures) = sweep_calls(&delete_calls, delete_parent_with_fault);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(failed > 0);
    eprintln!("fault injection, delete of a parent with a sharing fork: {runs} faulted deletes over {} calls, {failed} failed with a typed error", delete_calls.len());
}

// ---------------------------------------------------------------------------------------
// Leases: taking, taking over, renewing and releasing, each call failed in turn.
// ---------------------------------------------------------------------------------------

/// A lease operation the sweep fails.
#[derive(Debug, Clone, Copy)]
enum LeaseOp {
    Acquire,
    TakeOver,
    Renew,
    Release,
}

/// Runs `op` on a stored session with call `k` failing, then checks: an `Ok` put the new
/// lease in effect (a save under it succeeds, another writer is refused or let in as the
/// operation means); an error is a typed `Io` error naming a path in the store and left
/// the lease as it was (the holder before still saves; a failed first acquisition leaves
/// the session free for the next writer); either way the session loads as stored and no
/// temporary file outlives the next opening of the store. Returns whether the operation
/// failed.
fn lease_with_fault(
    op: LeaseOp,
    fault: Fault,
    persistence: Persistence,
    k: usize,
) -> Result<bool, String> {
    lease_run(op, fault, persistence, k).map(|(failed, _)| failed)
}

/// [`lease_with_fault`], also returning the calls the operation made.
fn lease_run(
    op: LeaseOp,
    fault: Fault,
    persistence: Persistence,
    k: usize,
) -> Result<(bool, Vec<Call>), String> {
    use crate::id::LeaseHolder;
    use crate::lease::LeaseRequest;
    let (_scratch, base) = scratch_dir();
    let fs = Arc::new(FaultyFileSystem::default());
    let dir = base.join("store");
    let store = open_faulty(&dir, &fs)?;
    let root = store.dir().to_path_buf();
    // Another holder: a second store on the directory (its own lock on the lease file).
    let other = FileSessionStore::open(&root).map_err(|e| format!("open: {e}"))?;
    let id = SessionId::parse(ID).expect("valid id");
    let stored = snapshot_on(&id, 0, "leased", 64);
    store
        .save(&stored)
        .map_err(|e| format!("setup save: {e}"))?;
    let stored = saved(&stored);
    let request = |label: &str| {
        LeaseRequest::new(LeaseHolder::this_process(label))
            .ttl(std::time::Duration::from_secs(3600))
    };
    // What holds the session before the operation, and on which store.
    let before = match op {
        LeaseOp::Acquire => None,
        LeaseOp::TakeOver => Some((&other, other.acquire_lease(&id, &request("before")))),
        LeaseOp::Renew | LeaseOp::Release => {
            Some((&store, store.acquire_lease(&id, &request("before"))))
        }
    };
    let before = match before {
        Some((holder, lease)) => Some((holder, lease.map_err(|e| format!("setup lease: {e}"))?)),
        None => None,
    };
    fs.arm(k, fault, persistence);
    let result = match (op, &before) {
        (LeaseOp::Acquire, _) => store.acquire_lease(&id, &request("new")).map(Some),
        (LeaseOp::TakeOver, _) => store
            .acquire_lease(&id, &request("new").take_over(true))
            .map(Some),
        (LeaseOp::Renew, Some((_, lease))) => store
            .renew_lease(lease, std::time::Duration::from_secs(7200))
            .map(Some),
        (LeaseOp::Release, Some((_, lease))) => store.release_lease(lease).map(|()| None),
        _ => unreachable!("every operation but Acquire has a lease before it"),
    };
    let calls = fs.disarm();
    let injected = calls.iter().any(|c| c.injected);
    let loaded = store.load(&id).map_err(|e| format!("load: {e}"))?;
    ensure!(loaded == stored, "the lease operation changed the session");
    // A temporary file the failed call's clean-up could not remove (the fault persists)
    // is removed when the store is next opened, as a save's is.
    drop(FileSessionStore::open(&root).map_err(|e| format!("reopen: {e}"))?);
    ensure!(
        temp_files(&root).is_empty(),
        "temporary files left: {:?}",
        temp_files(&root)
    );
    let fenced_save = |lease: &crate::lease::Lease, on: &FileSessionStore| {
        on.save(&appended(&loaded, "probe", 8).with_lease(lease))
    };
    match (&result, &before) {
        (Ok(Some(lease)), _) => {
            ensure!(!injected, "succeeded although a call failed");
            // The new (or renewed) lease is the session's: its holder saves, and nobody
            // else gets in without taking over.
            fenced_save(lease, &store).map_err(|e| format!("a save under the new lease: {e}"))?;
            ensure!(
                other.acquire_lease(&id, &request("third")).is_err(),
                "another writer got in past the new lease"
            );
            if let (LeaseOp::TakeOver, Some((_, old))) = (op, &before) {
                ensure!(
                    matches!(fenced_save(old, &other), Err(Error::Fenced { .. })),
                    "the holder taken over still saves"
                );
            }
        }
        (Ok(None), _) => {
            ensure!(!injected, "released although a call failed");
            other
                .acquire_lease(&id, &request("third"))
                .map_err(|e| format!("the released session is not free: {e}"))?;
        }
        (Err(err), before) => {
            ensure!(injected, "failed with no fault: {err}");
            check_io_error(err, &root, fault.errno())?;
            match before {
                // Nothing was taken: the session is free.
                None => {
                    let free = other.acquire_lease(&id, &request("third"));
                    ensure!(free.is_ok(), "a failed acquisition left a lease: {free:?}");
                }
                // The holder before still holds it, and saves.
                Some((holder, lease)) => {
                    fenced_save(lease, holder)
                        .map_err(|e| format!("the holder before lost the lease: {e}"))?;
                }
            }
            return Ok((true, calls));
        }
    }
    Ok((false, calls))
}

/// The calls of `op` on a stored session, with nothing failing.
fn clean_lease_calls(op: LeaseOp) -> Vec<(Op, &'static str)> {
    // Call `usize::MAX` never comes: the operation runs clean.
    match lease_run(op, Fault::Eio, Persistence::Once, usize::MAX) {
        Ok((false, calls)) => steps(&calls),
        Ok((true, _)) => panic!("a clean {op:?} failed"),
        Err(why) => panic!("a clean {op:?}: {why}"),
    }
}

#[test]
fn every_failing_call_of_a_lease_operation_keeps_the_lease_as_it_was_or_makes_the_change() {
    let (mut runs, mut failed) = (0, 0);
    let mut failures = Vec::new();
    for op in [
        LeaseOp::Acquire,
        LeaseOp::TakeOver,
        LeaseOp::Renew,
        LeaseOp::Release,
    ] {
        let calls = clean_lease_calls(op);
        let (r, f, broken) = sweep_calls(&calls, |fault, persistence, k| {
            lease_with_fault(op, fault, persistence, k)
        });
        runs += r;
        failed += f;
        failures.extend(broken.into_iter().map(|why| format!("{op:?}, {why}")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        failed > 0,
        "no fault was ever reached: the sweep tests nothing"
    );
    eprintln!(
        "fault injection, leases: {runs} faulted runs, {failed} failed with a typed Io error"
    );
}
