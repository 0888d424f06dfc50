//! Power loss: what a power cut at any point of a store's writes (journal appends
//! included) can leave, and what the store reads back from it.
//!
//! `kill -9` cannot catch a missing fsync: the page cache survives the process. So
//! [`CrashFs`] wraps the real file system behind the store's [`FileSystem`] seam and keeps a
//! model of what a power cut would leave: for each file, the bytes (and the size) its last
//! `sync_file` or `sync_data` made durable, the bytes only written (`write_all`, or
//! `write_all_at` at any offset), and whether a `set_len` (`ftruncate`) changed its size
//! since; for the store directory, the entries its last `sync_dir` made durable and the
//! creates, renames and unlinks done since. After every call of a run the model is cut: the
//! post-crash directory is built in a fresh place from the durable entries plus each prefix
//! of the pending directory operations (metadata journals keep their order), with every
//! file's unsynced bytes damaged in each way a crash can (dropped, zeroed, garbage,
//! partially persisted, torn, fully persisted) and, where a journal write is unsynced, cut
//! after every one of its bytes. A store opened there must load exactly the old or the new
//! state (never a mix, never unreadable) and, once a call returned `Ok`, the new one; then
//! an append on what it loaded (which must cut any torn tail first) and a full rewrite must
//! each load back exactly. The model also tracks the store directory itself when `open`
//! creates it: its entry in its parent is durable only after a `sync_dir` of that parent.
//!
//! Runs: saves of built snapshots (full rewrites) and a delete; and the journal's life: a
//! first append that creates it, appends, an append after a rewrite emptied it, a fill to
//! near its bound and a compaction, an append after that, a delete of a session with a
//! journal and a summary, and a new journal for a new session of the same id. A separate
//! run starts a new journal over a stale one (an older base's records, planted back as a
//! crash that lost the rewrite's emptying would leave them).
//!
//! Lease runs, with two store objects over the directory (as two processes would hold
//! leases): a first acquisition, appends under the lease (an append syncs no directory, and
//! a lease record is renamed into place without a directory fsync), a renewal, a take-over
//! by the other store, an append and a new base under its lease, a release, an acquisition
//! released with no save under it, and an append without a lease; the long run adds an
//! acquisition with appends under it, a delete (the lease file outlives it), a new session
//! of the id and a lease on it. At each of their crash points, besides the old or new state
//! (saves under a lease acknowledged before the cut included), the lease file a crash
//! leaves must be absent or one of the records the store wrote, never damaged; a new
//! process must find no lease live (a power loss ends every holder), take one without
//! taking over, save under it and release it; and that lease's epoch must be higher than
//! the epoch of every save the recovery found. An epoch no surviving save was made under
//! may be handed out again (its holder died in the power loss): the figures count those.
//! Outside the long run, lease runs cut journal writes at a sample of their bytes; in it,
//! they try every subset of the pending directory operations only while there are at most
//! six (lease records pile up unsynced), and each prefix beyond.
//!
//! A size change is metadata, journaled apart from data: a crash may keep it and lose the
//! data written after it, or lose it and keep that data ([`Fate`]). The main checks keep
//! size changes ordered before later data (what ext4 and XFS give for a truncation to 0,
//! whose freed blocks are not reused before it commits); a separate test loses them.
//!
//! Negative controls: copies of `atomic::replace` without the file fsync and without the
//! directory fsync are driven through the same harness and must fail it. For leases, the
//! model leaves out an fsync the store makes ([`LeaseFault`]): a lease file renamed over
//! unsynced data must be caught as a damaged lease file (which the store must still treat
//! as documented: the session loads, a lease is refused as corrupt), and a save under a
//! lease that does not first make the lease's record durable (the store before the fix
//! in `FileSessionStore::check_lease`) must be caught handing out an epoch again.
//!
//! Where the tests run as root, a real cut is also made on a loop-mounted ext4 image: the
//! `EXT4_IOC_SHUTDOWN` ioctl with `EXT4_GOING_FLAGS_NOLOGFLUSH` (the cut xfstests uses)
//! aborts the journal and drops every dirty page at a chosen call, and the remount replays
//! the journal: a save, a first append and an append, each cut before every call and after
//! it returned. It is skipped, with the reason printed, elsewhere.
//!
//! Run: `cargo test --lib store::file::tests::crash_model -- --nocapture` (the figures are printed);
//! `AGENT_SESSION_LONG=1` for the exhaustive run.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::io::{self, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::fault_injection::{
    appended, durable_replace, encoded, long_run, saved, scratch_dir, snapshot_on, temp_files,
    Mounted, ReplaceFn,
};
use crate::compactor::Compaction;
use crate::error::{Error, ErrorKind};
use crate::id::{LeaseHolder, Revision, SessionId};
use crate::lease::{Lease, LeaseRequest};
use crate::snapshot::{RewindTo, SessionSnapshot};
use crate::store::file::atomic::ReplaceError;
use crate::store::file::fs::{FileSystem, OsFileSystem};
use crate::store::file::FileSessionStore;
use crate::store::DEFAULT_MAX_SNAPSHOT_BYTES;
use crate::store::{ListScope, SessionStore};
use crate::transcript::Message;
use crate::usage::Usage;

// ---------------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------------

type InodeId = usize;

/// A directory operation not yet made durable by `sync_dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DirOp {
    Link { name: String, inode: InodeId },
    Rename { from: String, to: String },
    Unlink { name: String },
}

impl DirOp {
    fn apply(&self, dir: &mut BTreeMap<String, InodeId>) {
        match self {
            DirOp::Link { name, inode } => {
                dir.insert(name.clone(), *inode);
            }
            DirOp::Rename { from, to } => {
                if let Some(inode) = dir.remove(from) {
                    dir.insert(to.clone(), inode);
                }
            }
            DirOp::Unlink { name } => {
                dir.remove(name);
            }
        }
    }
}

/// A file's content: what its last fsync (`sync_file` or `sync_data`: both make the data
/// and the size durable) left on disk, and what is written now.
#[derive(Debug, Clone, Default)]
struct Inode {
    durable: Arc<Vec<u8>>,
    live: Arc<Vec<u8>>,
    /// The shortest length a `set_len` (`ftruncate`) gave the file since its last fsync,
    /// if any. A size change is metadata: a crash may keep it or lose it independently of
    /// the data written after it (see [`Fate`]).
    cut: Option<usize>,
}

/// What the store directory holds, durably and live.
#[derive(Debug, Clone, Default)]
struct Disk {
    inodes: Vec<Inode>,
    durable_dir: BTreeMap<String, InodeId>,
    live_dir: BTreeMap<String, InodeId>,
    pending: Vec<DirOp>,
    /// Directories `create_dir_private` made (the store directory and any missing parent)
    /// whose entries no `sync_dir` of their parent has made durable yet: while one is left,
    /// a crash may lose the whole store directory.
    undurable_dirs: BTreeSet<PathBuf>,
}

impl Disk {
    /// The directories a crash can leave: the durable entries plus each prefix of the
    /// pending operations (every subset, in the long run), without duplicates; `None` for
    /// a store directory that did not survive.
    fn crash_directories(&self, subsets: bool) -> Vec<Option<BTreeMap<String, InodeId>>> {
        let n = self.pending.len();
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        if !self.undurable_dirs.is_empty() {
            out.push(None);
        }
        let mut push = |dir: BTreeMap<String, InodeId>| {
            if seen.insert(dir.clone()) {
                out.push(Some(dir));
            }
        };
        if subsets && n <= 12 {
            for mask in 0..(1_u32 << n) {
                let mut dir = self.durable_dir.clone();
                for (i, op) in self.pending.iter().enumerate() {
                    if mask & (1 << i) != 0 {
                        op.apply(&mut dir);
                    }
                }
                push(dir);
            }
        } else {
            let mut dir = self.durable_dir.clone();
            push(dir.clone());
            for op in &self.pending {
                op.apply(&mut dir);
                push(dir.clone());
            }
        }
        out
    }
}

/// How a crash treats the bytes written since a file's last fsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// All lost: the file is as its last fsync left it.
    Dropped,
    /// The size reached the disk, the data did not: unsynced bytes read as zeros.
    Zeroed,
    /// The size reached the disk over stale blocks: unsynced bytes are garbage.
    Garbage(u64),
    /// Only the first `num/den` of the unsynced bytes reached the disk (at least one byte,
    /// at most all but one), the rest is cut off.
    Partial(usize, usize),
    /// Exactly the first `n` unsynced bytes reached the disk (all of them if there are
    /// fewer), the rest is cut off: a crash at every byte of a write.
    Bytes(usize),
    /// Unsynced 512-byte sectors reached the disk out of order: every other one is zeros.
    Torn,
    /// Every unsynced byte happened to reach the disk.
    Persisted,
}

/// Whether a crash kept the `set_len` calls made since a file's last fsync. `ftruncate` is
/// a metadata change, journaled apart from the data: a crash can keep the new size and
/// lose the data written after it, or lose the size change and keep (some of) that data,
/// in which case the bytes past the written ones are the old ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// The size changes reached the disk before any data written after them.
    Kept,
    /// The size changes were lost; whatever data reached the disk lies over the old
    /// content, which keeps its old length.
    Lost,
}

impl Fate {
    /// The fates to try for a file: both for one cut since its last fsync, otherwise one.
    fn variants(inode: &Inode) -> &'static [Fate] {
        if inode.cut.is_some() {
            &[Fate::Kept, Fate::Lost]
        } else {
            &[Fate::Kept]
        }
    }
}

impl Damage {
    fn variants() -> Vec<Damage> {
        let mut all = vec![
            Damage::Dropped,
            Damage::Zeroed,
            Damage::Garbage(1),
            Damage::Partial(0, 1),
            Damage::Partial(1, 2),
            Damage::Partial(1, 1),
            Damage::Torn,
            Damage::Persisted,
        ];
        if long_run() {
            all.extend((1..8).map(|num| Damage::Partial(num, 8)));
            all.extend((2..6).map(Damage::Garbage));
        }
        all
    }

    /// The content a crash leaves of `inode`, its size changes kept.
    fn apply(self, inode: &Inode) -> Vec<u8> {
        self.apply_with(inode, Fate::Kept)
    }

    /// The content a crash leaves of `inode`, with `fate` for its size changes.
    fn apply_with(self, inode: &Inode, fate: Fate) -> Vec<u8> {
        let durable = &*inode.durable;
        let base: &[u8] = match (fate, inode.cut) {
            (Fate::Kept, Some(cut)) => &durable[..cut.min(durable.len())],
            _ => durable,
        };
        let mut out = self.overlay(base, &inode.live);
        if fate == Fate::Lost && out.len() < durable.len() {
            out.extend_from_slice(&durable[out.len()..]);
        }
        out
    }

    /// `live` written over `base`, damaged: the bytes that differ are the unsynced ones.
    fn overlay(self, base: &[u8], live: &[u8]) -> Vec<u8> {
        let unsynced: Vec<usize> = (0..live.len())
            .filter(|&i| base.get(i) != Some(&live[i]))
            .collect();
        if unsynced.is_empty() && live.len() == base.len() {
            return base.to_vec();
        }
        let overwrite = |value: &dyn Fn(usize) -> u8| {
            let mut out = live.to_vec();
            for &i in &unsynced {
                out[i] = value(i);
            }
            out
        };
        let prefix = |keep: usize| {
            let mut out = base.to_vec();
            for &i in &unsynced[..keep] {
                if i >= out.len() {
                    out.resize(i + 1, 0);
                }
                out[i] = live[i];
            }
            out
        };
        match self {
            Damage::Dropped => base.to_vec(),
            Damage::Persisted => live.to_vec(),
            Damage::Zeroed => overwrite(&|_| 0),
            Damage::Garbage(seed) => overwrite(&|i| garbage(seed, i)),
            Damage::Torn => overwrite(&|i| if (i / 512) % 2 == 1 { 0 } else { live[i] }),
            Damage::Partial(num, den) => {
                let n = unsynced.len();
                prefix(if n <= 1 {
                    n
                } else {
                    (n * num / den).clamp(1, n - 1)
                })
            }
            Damage::Bytes(n) => prefix(n.min(unsynced.len())),
        }
    }

    /// How many of `inode`'s bytes are unsynced with its size changes kept: the bytes a
    /// crash can cut a write of its at.
    fn unsynced_bytes(inode: &Inode) -> usize {
        let durable = &*inode.durable;
        let base = &durable[..inode.cut.map_or(durable.len(), |c| c.min(durable.len()))];
        (0..inode.live.len())
            .filter(|&i| base.get(i) != Some(&inode.live[i]))
            .count()
    }
}

/// A deterministic garbage byte (never what a JSON snapshot needs to parse).
fn garbage(seed: u64, i: usize) -> u8 {
    let mut x = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i as u64)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 31;
    x.to_le_bytes()[0]
}

// ---------------------------------------------------------------------------------------
// The crash-model file system.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct CrashState {
    disk: Disk,
    /// Open files by (device, inode), which stays right when an fd number is reused.
    by_inode: HashMap<(u64, u64), InodeId>,
    /// The disk after each call since the last `take_log`, with the call's name.
    log: Vec<(&'static str, Disk)>,
    /// Whether the last call was a successful `symlink_metadata` of a lease file: the
    /// last call of a lease read (see [`LeaseFault::RecordNotDurable`]).
    after_lease_probe: bool,
    /// The fsyncs a [`LeaseFault`] left out of the model.
    faulted: usize,
}

/// A deliberate mistake in how lease records reach the disk, for the negative controls:
/// the model treats one kind of fsync as never made (the real call still runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseFault {
    /// No mistake: the store as it is.
    None,
    /// A lease file's data is not synced before its rename: a `sync_file` of a
    /// `.<id>.lease.<random>.tmp` file is not modelled.
    DataUnsynced,
    /// A save under a lease does not make the lease's record durable before it writes:
    /// a `sync_dir` that comes right after a lease read is not modelled (the store's
    /// first save under each lease makes that fsync, see `FileSessionStore::check_lease`).
    RecordNotDurable,
}

/// The real file system, plus a model of what is durable in the one directory it serves.
#[derive(Debug)]
struct CrashFs {
    inner: OsFileSystem,
    root: PathBuf,
    state: Mutex<CrashState>,
    fault: LeaseFault,
}

impl CrashFs {
    /// Models `root`, an existing empty directory whose own entry is durable.
    fn new(root: PathBuf) -> Self {
        Self::with_fault(root, LeaseFault::None)
    }

    /// [`CrashFs::new`], with the lease mistake `fault` made.
    fn with_fault(root: PathBuf, fault: LeaseFault) -> Self {
        CrashFs {
            inner: OsFileSystem,
            root,
            state: Mutex::new(CrashState::default()),
            fault,
        }
    }

    /// How many fsyncs the [`LeaseFault`] left out so far.
    fn faulted(&self) -> usize {
        self.state().faulted
    }

    fn state(&self) -> MutexGuard<'_, CrashState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn disk(&self) -> Disk {
        self.state().disk.clone()
    }

    fn take_log(&self) -> Vec<(&'static str, Disk)> {
        std::mem::take(&mut self.state().log)
    }

    /// The name of `path` in the modelled directory.
    fn name(&self, path: &Path) -> String {
        assert_eq!(
            path.parent(),
            Some(self.root.as_path()),
            "the crash model covers only {}",
            self.root.display()
        );
        path.file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 name")
            .to_owned()
    }

    /// Applies the model change of a call that succeeded, and logs the resulting disk.
    fn step<T>(
        &self,
        call: &'static str,
        result: io::Result<T>,
        change: impl FnOnce(&T, &mut CrashState),
    ) -> io::Result<T> {
        let mut state = self.state();
        state.after_lease_probe = false;
        if let Ok(value) = &result {
            change(value, &mut state);
        }
        let disk = state.disk.clone();
        state.log.push((call, disk));
        result
    }

    /// The model's inode for an open file.
    fn known(state: &CrashState, key: Option<(u64, u64)>) -> InodeId {
        key.and_then(|k| state.by_inode.get(&k).copied())
            .expect("a call on a file the model knows")
    }

    fn link_new(state: &mut CrashState, name: String, key: Option<(u64, u64)>) {
        let inode = state.disk.inodes.len();
        state.disk.inodes.push(Inode::default());
        if let Some(key) = key {
            state.by_inode.insert(key, inode);
        }
        state.disk.live_dir.insert(name.clone(), inode);
        state.disk.pending.push(DirOp::Link { name, inode });
    }
}

/// The levels of `path` that do not exist yet.
fn key_of(file: &File) -> Option<(u64, u64)> {
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

impl FileSystem for CrashFs {
    fn symlink_metadata(&self, path: &Path) -> io::Result<Metadata> {
        let lease = path.extension().is_some_and(|e| e == "lease");
        self.step(
            "symlink_metadata",
            self.inner.symlink_metadata(path),
            |_, state| state.after_lease_probe = lease,
        )
    }

    fn create_dir_private(&self, path: &Path) -> io::Result<()> {
        assert!(
            self.root.starts_with(path),
            "the crash model covers only the store directory and its parents"
        );
        let created = path.to_path_buf();
        self.step(
            "create_dir_private",
            self.inner.create_dir_private(path),
            |(), state| {
                state.disk.undurable_dirs.insert(created);
            },
        )
    }

    fn open_dir(&self, path: &Path) -> io::Result<File> {
        self.step("open_dir", self.inner.open_dir(path), |_, _| {})
    }

    fn set_dir_private(&self, dir: &File) -> io::Result<()> {
        self.step(
            "set_dir_private",
            self.inner.set_dir_private(dir),
            |(), _| {},
        )
    }

    fn create_temp(&self, dir: &Path, prefix: &str) -> io::Result<(File, PathBuf)> {
        let result = self.inner.create_temp(dir, prefix);
        let name = result.as_ref().ok().map(|(_, path)| self.name(path));
        self.step("create_temp", result, |(file, _), state| {
            Self::link_new(state, name.unwrap_or_default(), key_of(file));
        })
    }

    fn write_all(&self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        let offset = usize::try_from(file.stream_position()?).expect("small offset");
        let result = self.inner.write_all(file, bytes);
        let key = key_of(file);
        self.step("write_all", result, |(), state| {
            let inode = key
                .and_then(|k| state.by_inode.get(&k).copied())
                .expect("a write to a file the model knows");
            let live = Arc::make_mut(&mut state.disk.inodes[inode].live);
            if live.len() < offset + bytes.len() {
                live.resize(offset + bytes.len(), 0);
            }
            live[offset..offset + bytes.len()].copy_from_slice(bytes);
        })
    }

    fn sync_file(&self, file: &File) -> io::Result<()> {
        let key = key_of(file);
        let fault = self.fault;
        self.step("sync_file", self.inner.sync_file(file), |(), state| {
            let inode = key
                .and_then(|k| state.by_inode.get(&k).copied())
                .expect("an fsync of a file the model knows");
            let lease_temp = state
                .disk
                .live_dir
                .iter()
                .any(|(name, &i)| i == inode && name.starts_with(&format!(".{ID}.lease.")));
            if fault == LeaseFault::DataUnsynced && lease_temp {
                state.faulted += 1;
                return;
            }
            let node = &mut state.disk.inodes[inode];
            node.durable = Arc::clone(&node.live);
            node.cut = None;
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from_name, to_name) = (self.name(from), self.name(to));
        self.step("rename", self.inner.rename(from, to), |(), state| {
            let op = DirOp::Rename {
                from: from_name,
                to: to_name,
            };
            op.apply(&mut state.disk.live_dir);
            state.disk.pending.push(op);
        })
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        assert!(
            self.root.starts_with(dir),
            "the crash model covers only {}",
            self.root.display()
        );
        let is_root = dir == self.root;
        let skip = self.fault == LeaseFault::RecordNotDurable && self.state().after_lease_probe;
        self.step("sync_dir", self.inner.sync_dir(dir), |(), state| {
            if skip {
                state.faulted += 1;
                return;
            }
            // A directory's fsync makes the entries in it durable, including those of
            // directories created in it.
            state
                .disk
                .undurable_dirs
                .retain(|d| d.parent() != Some(dir));
            if is_root {
                state.disk.durable_dir = state.disk.live_dir.clone();
                state.disk.pending.clear();
            }
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let name = self.name(path);
        self.step("remove_file", self.inner.remove_file(path), |(), state| {
            let op = DirOp::Unlink { name };
            op.apply(&mut state.disk.live_dir);
            state.disk.pending.push(op);
        })
    }

    fn open_read(&self, path: &Path) -> io::Result<File> {
        self.step("open_read", self.inner.open_read(path), |_, _| {})
    }

    fn open_lock(&self, path: &Path) -> io::Result<File> {
        let name = self.name(path);
        let existed = self.state().disk.live_dir.contains_key(&name);
        self.step("open_lock", self.inner.open_lock(path), |file, state| {
            if !existed {
                Self::link_new(state, name, key_of(file));
            }
        })
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.step("read_dir", self.inner.read_dir(dir), |_, _| {})
    }

    fn open_write(&self, path: &Path) -> io::Result<File> {
        let result = self.inner.open_write(path);
        if let Ok(file) = &result {
            assert!(
                key_of(file).is_some_and(|k| self.state().by_inode.contains_key(&k)),
                "{} was not written through the model",
                path.display()
            );
        }
        self.step("open_write", result, |_, _| {})
    }

    fn create_private(&self, path: &Path) -> io::Result<File> {
        let name = self.name(path);
        self.step(
            "create_private",
            self.inner.create_private(path),
            |file, state| Self::link_new(state, name, key_of(file)),
        )
    }

    fn write_all_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        let offset = usize::try_from(offset).expect("small offset");
        let key = key_of(file);
        self.step(
            "write_all_at",
            self.inner.write_all_at(file, bytes, offset as u64),
            |(), state| {
                let inode = Self::known(state, key);
                let live = Arc::make_mut(&mut state.disk.inodes[inode].live);
                if live.len() < offset + bytes.len() {
                    live.resize(offset + bytes.len(), 0);
                }
                live[offset..offset + bytes.len()].copy_from_slice(bytes);
            },
        )
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).expect("small length");
        let key = key_of(file);
        self.step(
            "set_len",
            self.inner.set_len(file, len as u64),
            |(), state| {
                let inode = Self::known(state, key);
                let node = &mut state.disk.inodes[inode];
                Arc::make_mut(&mut node.live).resize(len, 0);
                node.cut = Some(node.cut.map_or(len, |cut| cut.min(len)));
            },
        )
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        let key = key_of(file);
        // `fdatasync` makes the data and the size durable (what reading the data needs),
        // not the directory entry of a new file: that takes a `sync_dir`.
        self.step("sync_data", self.inner.sync_data(file), |(), state| {
            let inode = Self::known(state, key);
            let node = &mut state.disk.inodes[inode];
            node.durable = Arc::clone(&node.live);
            node.cut = None;
        })
    }

    fn set_file_private(&self, file: &File) -> io::Result<()> {
        // Modes are not modelled: every file a recovery builds is 0600.
        self.step(
            "set_file_private",
            self.inner.set_file_private(file),
            |(), _| {},
        )
    }
}

// ---------------------------------------------------------------------------------------
// Writers: the store, and copies of atomic::replace with a step removed.
// ---------------------------------------------------------------------------------------

/// A copy of [`atomic::replace`] in which the file fsync and the directory fsync can be
/// left out.
fn replace_copy(
    file_fsync: bool,
    dir_fsync: bool,
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
            if file_fsync {
                fs.sync_file(&file).map_err(|e| Error::io("sync", &temp, e))
            } else {
                Ok(())
            }
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
    if dir_fsync {
        fs.sync_dir(dir).map_err(ReplaceError::NotDurable)
    } else {
        Ok(())
    }
}

/// Control: no fsync of the new file before the rename.
fn replace_without_file_fsync(
    fs: &dyn FileSystem,
    dir: &Path,
    target: &Path,
    prefix: &str,
    bytes: &[u8],
) -> Result<(), ReplaceError> {
    replace_copy(false, true, fs, dir, target, prefix, bytes)
}

/// Control: no fsync of the directory after the rename.
fn replace_without_dir_fsync(
    fs: &dyn FileSystem,
    dir: &Path,
    target: &Path,
    prefix: &str,
    bytes: &[u8],
) -> Result<(), ReplaceError> {
    replace_copy(true, false, fs, dir, target, prefix, bytes)
}

/// The copy with nothing removed: it must pass, so the controls fail for the removed step.
fn replace_copy_unbroken(
    fs: &dyn FileSystem,
    dir: &Path,
    target: &Path,
    prefix: &str,
    bytes: &[u8],
) -> Result<(), ReplaceError> {
    replace_copy(true, true, fs, dir, target, prefix, bytes)
}

#[derive(Clone, Copy)]
enum Writer {
    /// `FileSessionStore` (opened on the crash model, then saving and deleting).
    Store,
    /// A replace function called on the seam directly, saves only.
    Replace(ReplaceFn),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Saves a snapshot built anew (no provenance, its own creation time) at the stored
    /// revision: the first save of a session, or one that replaces another session under
    /// the same id, written as a new base.
    Save,
    /// Loads the session and saves it with a turn of about this many bytes appended: an
    /// entry appended to the journal.
    Append(usize),
    /// Saves a snapshot built anew with the stored creation time at the stored revision: an
    /// entry that replaces the whole view, appended.
    Edit,
    /// Loads the session and rewinds its last turn ([`RewindTo::LastTurns`]): an entry
    /// that keeps fewer messages and adds none.
    Rewind,
    /// Loads the session and compacts all but its last message into a summary: an entry
    /// holding the summary.
    Compact,
    /// Loads the session and restores the revision this many before the head
    /// ([`SessionSnapshot::restore_from`]): an entry naming it.
    Restore(u64),
    /// Restores the revision this many before the head through
    /// [`SessionStore::restore`]: an entry written from the revisions' lengths the store
    /// keeps, without loading the session (the first one reads its log once).
    StoreRestore(u64),
    /// Drops the revisions before the one this many before the head
    /// ([`SessionStore::trim_history`]): the journal, the base and the journal again
    /// replaced, each atomically.
    Trim(u64),
    Delete,
    /// Archives the session (`true`) or restores it.
    Archive(bool),
    /// Not an operation under test: writes back, durably and through the model, the
    /// journal a rewrite emptied (its records, for the older base): what a crash leaves
    /// when it loses that emptying, or an older store version that did not sync it. The
    /// next append must start a new journal over it.
    PlantStale,
}

const ID: &str = "s";

/// What a load finds: the base snapshot's bytes, and the snapshot with the journal
/// applied. `None`: no session.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    base: Vec<u8>,
    snapshot: SessionSnapshot,
    /// Whether the session is archived (its marker file present).
    archived: bool,
}

type State = Option<Stored>;

/// One operation of a run, with the disk after each of its calls.
struct OpRecord {
    label: String,
    /// What a load gave before it (the last acknowledged state) and should give after it.
    before: State,
    after: State,
    acknowledged: bool,
    /// `steps[0]` is the disk before its first call; `steps[j]` after call `j`.
    steps: Vec<(&'static str, Disk)>,
    /// In a lease run, what the lease checks expect of a crash during the operation.
    lease: Option<LeaseExpect>,
}

/// What a crash during an operation of a lease run may leave of the session's lease.
#[derive(Debug, Clone)]
struct LeaseExpect {
    /// The highest epoch a save acknowledged before the operation was made under (0 for
    /// none): every lease taken after the crash must have a higher one.
    floor: u64,
    /// The epoch of the lease the operation saves under, if it is a save under one: once
    /// its state is what a recovery finds, the next lease must have a higher epoch.
    saves_under: Option<u64>,
    /// The highest epoch handed out before the operation, and once it returned.
    issued_before: u64,
    issued_after: u64,
    /// Every content `<id>.lease` had up to the end of the operation, oldest first: a
    /// crash may leave any of them, or none, and nothing else.
    records: Vec<Vec<u8>>,
}

/// The size of the snapshot saved as revision `n`: lengths differ between revisions and
/// span several 512-byte sectors.
fn size_of_revision(n: u64) -> usize {
    let n = usize::try_from(n).expect("small revision");
    if long_run() && n % 3 == 0 {
        150_000 + n * 1_000
    } else {
        3_000 + n * 1_500
    }
}

/// Where a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// The store directory exists, durably, before the run.
    Existing,
    /// `open` creates the store directory; its parent exists.
    Missing,
    /// `open` creates the store directory and its parent.
    MissingParent,
}

/// The state stored under `base` bytes: the snapshot they decode to.
fn stored_from_bytes(base: Vec<u8>) -> Stored {
    let snapshot = SessionSnapshot::from_json(&base).expect("decode a test snapshot");
    Stored {
        base,
        snapshot,
        archived: false,
    }
}

/// Runs `plan` with `writer` on a fresh directory under the crash model, recording the disk
/// after every call.
#[allow(clippy::too_many_lines)]
fn record_run(writer: Writer, plan: &[Action], start: Start) -> Vec<OpRecord> {
    let (_scratch, base) = scratch_dir();
    let root = match start {
        Start::Existing => {
            let root = base.join("store");
            DirBuilder::new()
                .mode(0o700)
                .create(&root)
                .expect("store directory");
            root
        }
        Start::Missing => base.join("store"),
        Start::MissingParent => base.join("new").join("store"),
    };
    let fs = Arc::new(CrashFs::new(root.clone()));
    let id = SessionId::parse(ID).expect("valid id");
    let target = root.join(format!("{ID}.json"));
    let journal = root.join(format!("{ID}.journal"));
    let mut records = Vec::new();
    let mut disk = fs.disk();
    let mut finish = |label: String, before, after, acknowledged: bool, disk: &mut Disk| {
        let mut steps = vec![("(start)", disk.clone())];
        steps.extend(fs.take_log());
        *disk = fs.disk();
        records.push(OpRecord {
            label,
            before,
            after,
            acknowledged,
            steps,
            lease: None,
        });
    };
    let store = match writer {
        Writer::Store => {
            let shared: Arc<dyn FileSystem> = fs.clone();
            let store = FileSessionStore::open_with(&root, DEFAULT_MAX_SNAPSHOT_BYTES, shared)
                .expect("open on the crash model");
            finish("open".into(), None, None, true, &mut disk);
            Some(store)
        }
        Writer::Replace(_) => None,
    };
    let mut revision = 0_u64;
    let mut current: State = None;
    // The records of the last journal a rewrite emptied, and whether they were just
    // planted back.
    let mut emptied: Option<Vec<u8>> = None;
    let mut planted = false;
    for action in plan {
        if *action == Action::Save {
            emptied = std::fs::read(&journal)
                .ok()
                .filter(|j| !j.is_empty())
                .or(emptied);
        }
        if *action == Action::PlantStale {
            let bytes = emptied
                .clone()
                .expect("a rewrite emptied a journal with records");
            let file = fs.open_write(&journal).expect("open the journal");
            fs.write_all_at(&file, &bytes, 0)
                .expect("plant the records");
            fs.sync_data(&file).expect("sync the planted records");
            // Setup, not a crash point.
            fs.take_log();
            disk = fs.disk();
            planted = true;
            continue;
        }
        let over_stale = std::mem::take(&mut planted);
        let (label, result, after) = match *action {
            Action::Save => {
                let snapshot = snapshot_on(&id, revision, "crash", size_of_revision(revision + 1));
                let bytes = encoded(&snapshot);
                let result = match (&store, writer) {
                    (Some(store), _) => {
                        store.save(&snapshot).map(|_| ()).map_err(|e| e.to_string())
                    }
                    (None, Writer::Replace(replace)) => {
                        replace(&*fs, &root, &target, &format!(".{ID}."), &bytes)
                            .map_err(|e| format!("{e:?}"))
                    }
                    (None, Writer::Store) => unreachable!(),
                };
                let mut after = stored_from_bytes(bytes);
                // A save keeps an existing session's archive state.
                after.archived = current.as_ref().is_some_and(|c| c.archived);
                (
                    format!("save of revision {}", revision + 1),
                    result,
                    Some(after),
                )
            }
            Action::Append(_)
            | Action::Edit
            | Action::Rewind
            | Action::Compact
            | Action::Restore(_) => {
                let store = store.as_ref().expect("appends go through the store");
                let loaded = store.load(&id).expect("load before an append");
                let next = match *action {
                    Action::Rewind => {
                        let mut rewound = loaded;
                        rewound
                            .rewind(RewindTo::LastTurns(1))
                            .expect("rewind the last turn");
                        rewound
                    }
                    Action::Compact => {
                        let mut compacted = loaded;
                        let replaced = compacted.transcript().len() - 1;
                        compacted
                            .compact(
                                Compaction::new(replaced, vec![Message::user("crash summary")])
                                    .with_usage(Usage::new("test-model").with_tokens(9, 1)),
                            )
                            .expect("compact");
                        compacted
                    }
                    Action::Restore(back) => {
                        let past = store
                            .load_at(&id, Revision::from_u64(revision - back))
                            .expect("load an earlier revision");
                        let mut restored = loaded;
                        restored.restore_from(&past).expect("restore");
                        restored
                    }
                    Action::Edit => {
                        let size = size_of_revision(revision + 1);
                        let filler: String = "edit ".chars().cycle().take(size).collect();
                        SessionSnapshot::builder(id.clone(), "test-model")
                            .transcript(vec![Message::user("edited"), Message::user(filler)])
                            .timestamps(loaded.created_at(), loaded.updated_at())
                            .build()
                            .expect("build an edit")
                            .with_revision(loaded.revision())
                    }
                    Action::Append(size) => appended(&loaded, "crash turn", size),
                    _ => unreachable!(),
                };
                // The loads changed nothing on disk: their calls are no crash points.
                fs.take_log();
                let journal_len = std::fs::metadata(&journal).map_or(0, |m| m.len());
                let base_before = std::fs::read(&target).expect("read the base");
                let result = store.save(&next).map(|_| ()).map_err(|e| e.to_string());
                let base_after = std::fs::read(&target).expect("read the base");
                assert_eq!(
                    base_after, base_before,
                    "an entry is appended, never a new base"
                );
                let what = match *action {
                    Action::Rewind => "rewind",
                    Action::Compact => "compaction",
                    Action::Restore(_) => "restore",
                    Action::Edit => "edit",
                    _ if over_stale => "append over a stale journal",
                    _ if journal_len == 0 => "append (the journal started)",
                    _ => "append",
                };
                (
                    format!("{what} of revision {}", revision + 1),
                    result,
                    Some(Stored {
                        base: base_after,
                        snapshot: saved(&next),
                        archived: current.as_ref().is_some_and(|c| c.archived),
                    }),
                )
            }
            Action::StoreRestore(back) => {
                let store = store.as_ref().expect("restores go through the store");
                let base_before = std::fs::read(&target).expect("read the base");
                let result = store
                    .restore(&id, Revision::from_u64(revision - back))
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                let base_after = std::fs::read(&target).expect("read the base");
                assert_eq!(
                    base_after, base_before,
                    "an entry is appended, never a new base"
                );
                // What it stored (its time comes from the clock): read back through a store
                // that did not write it.
                let restored = FileSessionStore::open(&root)
                    .and_then(|s| s.load(&id))
                    .expect("load the restore");
                (
                    format!("store restore of revision {}", revision + 1),
                    result,
                    Some(Stored {
                        base: base_after,
                        snapshot: restored,
                        archived: current.as_ref().is_some_and(|c| c.archived),
                    }),
                )
            }
            Action::Trim(back) => {
                let store = store.as_ref().expect("trims go through the store");
                let head = current
                    .as_ref()
                    .expect("a session to trim")
                    .snapshot
                    .clone();
                let result = store
                    .trim_history(&id, Revision::from_u64(revision - back))
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                let base_after = std::fs::read(&target).expect("read the base");
                (
                    format!("trim of revision {revision}"),
                    result,
                    Some(Stored {
                        base: base_after,
                        snapshot: head,
                        archived: current.as_ref().is_some_and(|c| c.archived),
                    }),
                )
            }
            Action::PlantStale => unreachable!("handled above"),
            Action::Delete => {
                let store = store.as_ref().expect("deletes go through the store");
                let archived = current.as_ref().is_some_and(|c| c.archived);
                (
                    format!(
                        "delete of revision {revision}{}",
                        if archived { " (archived)" } else { "" }
                    ),
                    store.delete(&id).map_err(|e| e.to_string()),
                    None,
                )
            }
            Action::Archive(archived) => {
                let store = store.as_ref().expect("archiving goes through the store");
                let mut after = current.clone().expect("a session to archive");
                after.archived = archived;
                (
                    format!(
                        "{} of revision {revision}",
                        if archived { "archive" } else { "restore" }
                    ),
                    store.set_archived(&id, archived).map_err(|e| e.to_string()),
                    Some(after),
                )
            }
        };
        result.unwrap_or_else(|e| panic!("{label} failed without a crash: {e}"));
        assert_eq!(
            std::fs::read(&target).ok(),
            after.as_ref().map(|a| a.base.clone()),
            "{label}: live content"
        );
        if matches!(writer, Writer::Store) {
            // What a store reading the live files loads is the state expected after it.
            let live = FileSessionStore::open(&root)
                .expect("open on the live files")
                .load(&id);
            match (&live, &after) {
                (Ok(loaded), Some(after)) => {
                    assert_eq!(*loaded, after.snapshot, "{label}: live state");
                    assert_eq!(
                        archived_on(&root),
                        after.archived,
                        "{label}: live archive state"
                    );
                }
                (Err(e), None) => assert!(e.is_not_found(), "{label}: {e}"),
                _ => panic!("{label}: live load {live:?}"),
            }
        }
        revision = match action {
            Action::Delete => 0,
            Action::Archive(_) | Action::Trim(_) => revision,
            _ => revision + 1,
        };
        let before = std::mem::replace(&mut current, after.clone());
        finish(label, before, after, true, &mut disk);
    }
    records
}

// ---------------------------------------------------------------------------------------
// Recovery and the check.
// ---------------------------------------------------------------------------------------

/// The files a crash leaves: `None` for a lost store directory, else each name and content.
type CrashFiles = Option<Vec<(String, Vec<u8>)>>;

/// The files of `entries` after a crash that damages unsynced bytes by `damage` and treats
/// size changes by `fate`.
fn crash_files(
    disk: &Disk,
    entries: Option<&BTreeMap<String, InodeId>>,
    damage: Damage,
    fate: Fate,
) -> CrashFiles {
    entries.map(|entries| {
        entries
            .iter()
            .map(|(name, &inode)| (name.clone(), damage.apply_with(&disk.inodes[inode], fate)))
            .collect()
    })
}

/// Where a crash can cut a journal write of `n` unsynced bytes: after every byte. Outside
/// the long run, a write over 4 KiB (the one that fills the journal before a compaction)
/// is cut after every byte of its first and last 512, and every 251st between.
fn byte_cuts(n: usize) -> Vec<usize> {
    if long_run() || n <= 4096 {
        (0..=n).collect()
    } else {
        (0..=512)
            .chain((513..n - 512).step_by(251))
            .chain(n - 512..=n)
            .collect()
    }
}

/// Builds the post-crash directory at `at` from `files` and opens a store on it; returns
/// what a load gives, or why recovery failed. Then checks the recovered store keeps
/// working: an append on what it loaded (which must cut any torn tail first, so the new
/// record is not swallowed by it) loads back exactly, and so does a full rewrite after it.
fn recover(files: &CrashFiles, at: &Path) -> Result<State, String> {
    build_dir(files, at)?;
    let store = FileSessionStore::open(at).map_err(|e| format!("open failed: {e}"))?;
    let left = temp_files(at);
    if !left.is_empty() {
        return Err(format!("temporary files left after open: {left:?}"));
    }
    let id = SessionId::parse(ID).expect("valid id");
    let raw = std::fs::read(store.path_of(&id)).ok();
    let found = match (store.load(&id), raw) {
        (Ok(snapshot), Some(base)) => Some(Stored {
            base,
            snapshot,
            archived: archived_on(at),
        }),
        (Err(e), None) if e.is_not_found() => None,
        (Err(e), _) => return Err(format!("load failed: {e}")),
        (Ok(_), None) => return Err("loaded a snapshot that is not there".into()),
    };
    let listing = store
        .list_scoped(ListScope::All)
        .map_err(|e| format!("list failed: {e}"))?;
    let listed: Vec<u64> = listing
        .sessions
        .iter()
        .map(|s| s.revision.as_u64())
        .collect();
    let expected: Vec<u64> = found
        .iter()
        .map(|f| f.snapshot.revision().as_u64())
        .collect();
    if !listing.unreadable.is_empty() || listed != expected {
        return Err(format!(
            "list shows revisions {listed:?} (a load finds {expected:?}) and unreadable {:?}",
            listing.unreadable
        ));
    }
    let reload = |what: &str| {
        FileSessionStore::open(at)
            .and_then(|s| s.load(&id))
            .map_err(|e| format!("load after {what} failed: {e}"))
    };
    let revision = match &found {
        Some(stored) => {
            let next = appended(&stored.snapshot, "after recovery", 100);
            store
                .save(&next)
                .map_err(|e| format!("append after recovery failed: {e}"))?;
            if std::fs::read(store.path_of(&id)).ok().as_ref() != Some(&stored.base) {
                return Err("the append after recovery rewrote the base instead".into());
            }
            let loaded = reload("the append after recovery")?;
            if loaded != saved(&next) {
                return Err(format!(
                    "the append after recovery loads back as revision {} with {} messages, \
                     not revision {} with {}",
                    loaded.revision(),
                    loaded.transcript().len(),
                    next.revision().next(),
                    next.transcript().len()
                ));
            }
            loaded.revision().as_u64()
        }
        None => 0,
    };
    // A full rewrite on top of it works too.
    let rewrite = snapshot_on(&id, revision, "after recovery", 50);
    store
        .save(&rewrite)
        .map_err(|e| format!("save after recovery failed: {e}"))?;
    if reload("the save after recovery")? != saved(&rewrite) {
        return Err("the save after recovery does not load back".into());
    }
    // The saves keep an archived session archived, and a new session (after a delete)
    // starts active, whatever marker a crash left.
    let archived_now = archived_on(at);
    if archived_now != found.as_ref().is_some_and(|f| f.archived) {
        return Err(format!(
            "after the saves that follow recovery the session is {}archived, it was {}",
            if archived_now { "" } else { "not " },
            if found.as_ref().is_some_and(|f| f.archived) {
                "archived"
            } else {
                "active or gone"
            }
        ));
    }
    Ok(found)
}

/// Writes the post-crash directory `files` at `at` (nothing for a lost store directory:
/// opening a store creates it anew).
fn build_dir(files: &CrashFiles, at: &Path) -> Result<(), String> {
    if let Some(files) = files {
        DirBuilder::new()
            .mode(0o700)
            .create(at)
            .map_err(|e| e.to_string())?;
        for (name, bytes) in files {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(at.join(name))
                .and_then(|mut f| f.write_all(bytes))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Whether the listing of the store in `dir` shows session [`ID`] as archived.
fn archived_on(dir: &Path) -> bool {
    FileSessionStore::open(dir)
        .and_then(|store| store.list_scoped(ListScope::Archived))
        .is_ok_and(|listing| listing.sessions.iter().any(|s| s.id.as_str() == ID))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Recovery failed: open, load or list errored (a torn or empty file), or a temporary
    /// file survived the open, or the store could not save on what it recovered.
    Unrecoverable,
    /// A call had returned `Ok`, yet recovery gave another (older) readable state.
    AcknowledgedLost,
    /// Recovery gave a readable state that is neither the old nor the new one.
    Neither,
    /// A lease run: the lease file a crash left is neither absent nor one of the records
    /// the store wrote (damaged).
    LeaseFile,
    /// A lease run: after recovery a new process could not take a lease without taking
    /// over, save under it and release it (or a lease was still live), or the store did
    /// not treat a damaged lease file as documented.
    Unleasable,
    /// A lease run: a lease taken after the crash has an epoch no higher than one a
    /// save that survived the crash was made under.
    Epoch,
}

#[derive(Debug)]
struct Violation {
    kind: Kind,
    what: String,
}

#[derive(Debug, Default)]
struct Figures {
    crash_points: usize,
    after_acknowledgement: usize,
    directory_states: usize,
    recoveries: usize,
    damage_variants: usize,
    /// Recoveries with a journal write cut after a given byte ([`Damage::Bytes`]).
    byte_cuts: usize,
    /// Recoveries with size changes (`set_len`) lost while data after them persisted.
    truncations_lost: usize,
    /// Lease runs: recoveries after which a new process took a lease (and saved under it).
    leases_taken: usize,
    /// Lease runs: recoveries by the lease file the crash left: none, a record older than
    /// the newest the run had written by the end of the operation, the newest, damaged.
    lease_absent: usize,
    lease_earlier: usize,
    lease_newest: usize,
    lease_damaged: usize,
    /// Lease runs: leases taken after a crash with an epoch handed out before it (allowed
    /// when no save that survived was made under it: its holder died in the power loss).
    epochs_again: usize,
}

impl Figures {
    fn add(&mut self, other: &Figures) {
        self.crash_points += other.crash_points;
        self.after_acknowledgement += other.after_acknowledgement;
        self.directory_states += other.directory_states;
        self.recoveries += other.recoveries;
        self.byte_cuts += other.byte_cuts;
        self.truncations_lost += other.truncations_lost;
        self.leases_taken += other.leases_taken;
        self.lease_absent += other.lease_absent;
        self.lease_earlier += other.lease_earlier;
        self.lease_newest += other.lease_newest;
        self.lease_damaged += other.lease_damaged;
        self.epochs_again += other.epochs_again;
    }
}

/// Which fates of unsynced size changes [`check`] tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fates {
    /// Size changes reach the disk before the data written after them ([`Fate::Kept`]).
    Ordered,
    /// Only the crashes that lose a size change ([`Fate::Lost`]), where one was made.
    LostOnly,
}

/// Cuts power at every recorded step of every operation, in every crash directory, with
/// every damage variant (and a cut at every byte of an unsynced journal write) and the
/// `fates` of unsynced size changes, and checks recovery. Crash outcomes that leave the
/// same files are recovered once per step. The steps are shared among the available cores.
fn check(records: &[OpRecord], fates: Fates) -> (Figures, Vec<Violation>) {
    let points: Vec<(usize, usize)> = records
        .iter()
        .enumerate()
        .flat_map(|(r, record)| (0..record.steps.len()).map(move |j| (r, j)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let mut figures = Figures {
        damage_variants: Damage::variants().len(),
        ..Figures::default()
    };
    let mut violations: Vec<(usize, Violation)> = Vec::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let (_scratch, base) = scratch_dir();
                    let mut figures = Figures::default();
                    let mut found = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(r, j)) = points.get(i) else { break };
                        for violation in check_point(&records[r], j, fates, &base, &mut figures) {
                            found.push((i, violation));
                        }
                    }
                    (figures, found)
                })
            })
            .collect();
        for handle in handles {
            let (part, found) = handle.join().expect("a checking thread panicked");
            figures.add(&part);
            violations.extend(found);
        }
    });
    violations.sort_by_key(|(i, _)| *i);
    (figures, violations.into_iter().map(|(_, v)| v).collect())
}

/// Checks the crashes at step `j` of `record`, recovering under `base`.
fn check_point(
    record: &OpRecord,
    j: usize,
    fates: Fates,
    base: &Path,
    figures: &mut Figures,
) -> Vec<Violation> {
    let journal = format!("{ID}.journal");
    let (call, disk) = &record.steps[j];
    let acknowledged = record.acknowledged && j + 1 == record.steps.len();
    figures.crash_points += 1;
    figures.after_acknowledgement += usize::from(acknowledged);
    let mut violations = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // Every subset of the pending directory operations in the long run; in a lease run,
    // whose lease records pile up unsynced, only while they are few (else the prefixes).
    let subsets = long_run() && (record.lease.is_none() || disk.pending.len() <= 6);
    for entries in disk.crash_directories(subsets) {
        figures.directory_states += 1;
        let mut tried = Damage::variants();
        let mut tried_fates = match fates {
            Fates::Ordered => vec![Fate::Kept],
            Fates::LostOnly => Vec::new(),
        };
        if let Some(entries) = &entries {
            if let Some(&inode) = entries.get(&journal) {
                let n = Damage::unsynced_bytes(&disk.inodes[inode]);
                if n > 0 {
                    let cuts = if record.lease.is_some() {
                        lease_run_byte_cuts(n)
                    } else {
                        byte_cuts(n)
                    };
                    tried.extend(cuts.into_iter().map(Damage::Bytes));
                }
            }
            let lost_differs = entries.values().any(|&i| {
                let inode = &disk.inodes[i];
                Fate::variants(inode).contains(&Fate::Lost)
                    && inode.cut.is_some_and(|cut| cut < inode.durable.len())
            });
            if fates == Fates::LostOnly && lost_differs {
                tried_fates.push(Fate::Lost);
            }
        }
        for &fate in &tried_fates {
            for &damage in &tried {
                let files = crash_files(disk, entries.as_ref(), damage, fate);
                if !seen.insert(files.clone()) {
                    continue;
                }
                figures.recoveries += 1;
                figures.byte_cuts += usize::from(matches!(damage, Damage::Bytes(_)));
                figures.truncations_lost += usize::from(fate == Fate::Lost);
                let at = base.join(format!("r{}", figures.recoveries));
                let context = format!(
                    "{}: cut after call {j} ({call}){}, directory {}, {damage:?}, size changes {fate:?}",
                    record.label,
                    if acknowledged { ", acknowledged" } else { "" },
                    entries.as_ref().map_or_else(
                        || "lost".to_owned(),
                        |e| format!("{:?}", e.keys().collect::<Vec<_>>())
                    ),
                );
                let damaged_at = base.join(format!("d{}", figures.recoveries));
                let found = judge(record, acknowledged, files, &at, &damaged_at, figures);
                violations.extend(found.into_iter().map(|(kind, why)| Violation {
                    kind,
                    what: format!("{context}: {why}"),
                }));
            }
        }
    }
    violations
}

/// Recovers from `files` (a crash during `record`) in `at` and judges what it finds: the
/// old or the new state, the new one once the operation was `acknowledged`; in a lease
/// run, also the lease file the crash left (a damaged one checked in `damaged_at`, then
/// removed, as the store's error says, so the other checks still run) and the epoch of a
/// new lease. Returns the problems found.
fn judge(
    record: &OpRecord,
    acknowledged: bool,
    files: CrashFiles,
    at: &Path,
    damaged_at: &Path,
    figures: &mut Figures,
) -> Vec<(Kind, String)> {
    let (files, mut problems) = match &record.lease {
        Some(expect) => inspect_lease_file(files, expect, record, damaged_at, figures),
        None => (files, Vec::new()),
    };
    let outcome = recover(&files, at);
    if let (Some(expect), Ok(found)) = (&record.lease, &outcome) {
        problems.extend(check_epoch(
            record,
            expect,
            found,
            acknowledged,
            at,
            figures,
        ));
    }
    let _ = std::fs::remove_dir_all(at);
    let kind = match &outcome {
        Err(_) => Some(Kind::Unrecoverable),
        Ok(found) if *found == record.after => None,
        Ok(found) if !acknowledged && *found == record.before => None,
        Ok(_) if acknowledged => Some(Kind::AcknowledgedLost),
        Ok(_) => Some(Kind::Neither),
    };
    if let Some(kind) = kind {
        let why = match &outcome {
            Err(why) => why.clone(),
            Ok(None) => "recovered: no snapshot".into(),
            Ok(Some(found)) => format!(
                "recovered revision {} ({}-byte base) that is not the expected one",
                found.snapshot.revision(),
                found.base.len()
            ),
        };
        problems.insert(0, (kind, why));
    }
    problems
}

fn report(name: &str, figures: &Figures, violations: &[Violation]) {
    eprintln!(
        "crash model, {name}: {} crash points ({} after an acknowledged call), {} post-crash \
         directory states, {} damage variants, {} distinct recoveries checked ({} with a \
         journal write cut at a given byte, {} with unsynced size changes lost), {} violations",
        figures.crash_points,
        figures.after_acknowledgement,
        figures.directory_states,
        figures.damage_variants,
        figures.recoveries,
        figures.byte_cuts,
        figures.truncations_lost,
        violations.len()
    );
}

fn store_plan() -> Vec<Action> {
    use Action::{Delete, Save};
    if long_run() {
        let mut plan = vec![Save; 10];
        plan.extend([Delete, Save, Save, Delete]);
        plan
    } else {
        vec![Save, Save, Save, Delete, Save]
    }
}

/// The journal's life: created by a first append, appended to, emptied by a rewrite and
/// started again at offset 0, filled close to its bound and compacted (its view checkpoint
/// written beside it), restored to a state before the compaction, trimmed, deleted with
/// the session, and started once more for a new session of that id.
fn journal_plan() -> Vec<Action> {
    use Action::{Append, Compact, Delete, Edit, Restore, Rewind, Save, StoreRestore, Trim};
    vec![
        Save,
        Append(150),
        Append(150),
        Rewind,
        Append(150),
        Restore(2),
        Save,
        Append(150),
        Edit,
        Append(4_000),
        Append(4_000),
        Append(4_000),
        Append(150),
        // Its view is a small part of the log: the view checkpoint is written (unsynced).
        Compact,
        Append(150),
        StoreRestore(2),
        Append(150),
        StoreRestore(1),
        Restore(1),
        Trim(3),
        Append(150),
        Delete,
        Save,
        Append(150),
    ]
}

/// A journal of three records for the first base, emptied by a rewrite, then found again
/// by the next append (planted back: the emptying lost), which starts a new journal over
/// it; one more append follows.
fn stale_journal_plan() -> Vec<Action> {
    use Action::{Append, PlantStale, Save};
    vec![
        Save,
        Append(150),
        Append(150),
        Append(150),
        Save,
        PlantStale,
        Append(150),
        Append(150),
    ]
}

/// An archived session saved (whole and appended) and restored, archived again, deleted
/// while archived, then a new session under its id (which must start active, whatever
/// marker a crash left), archived and restored.
fn archive_plan() -> Vec<Action> {
    use Action::{Append, Archive, Delete, Save};
    vec![
        Save,
        Archive(true),
        Append(150),
        Save,
        Archive(false),
        Archive(true),
        Delete,
        Save,
        Archive(true),
        Archive(false),
    ]
}

const CONTROL_PLAN: [Action; 3] = [Action::Save, Action::Save, Action::Save];

// ---------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------

#[test]
fn damage_variants_each_change_the_unsynced_bytes_their_own_way() {
    let inode = Inode {
        durable: Arc::new(b"AB".to_vec()),
        cut: None,
        live: Arc::new(
            (0..1200)
                .map(|i| b'a' + u8::try_from(i % 26).unwrap())
                .collect(),
        ),
    };
    let live = inode.live.as_slice();
    assert_eq!(Damage::Dropped.apply(&inode), b"AB");
    assert_eq!(Damage::Persisted.apply(&inode), live);
    let zeroed = Damage::Zeroed.apply(&inode);
    assert_eq!(zeroed.len(), 1200);
    assert!(
        zeroed.iter().all(|&b| b == 0),
        "a and b differ from A and B too"
    );
    let garbage = Damage::Garbage(1).apply(&inode);
    assert_eq!(garbage.len(), 1200);
    assert!(garbage.iter().zip(live).filter(|(g, l)| g != l).count() > 1000);
    let first = Damage::Partial(0, 1).apply(&inode);
    assert_eq!(
        first, b"aB",
        "one unsynced byte persisted, the rest cut off"
    );
    let half = Damage::Partial(1, 2).apply(&inode);
    assert_eq!(half, &live[..600]);
    let all_but_one = Damage::Partial(1, 1).apply(&inode);
    assert_eq!(all_but_one, &live[..1199]);
    let torn = Damage::Torn.apply(&inode);
    assert_eq!(&torn[..512], &live[..512]);
    assert!(torn[512..1024].iter().all(|&b| b == 0));
    assert_eq!(&torn[1024..], &live[1024..]);
    // A file with nothing unsynced is never damaged.
    let synced = Inode {
        durable: Arc::clone(&inode.live),
        cut: None,
        live: Arc::clone(&inode.live),
    };
    for damage in Damage::variants() {
        assert_eq!(damage.apply(&synced), live, "{damage:?}");
    }
}

#[test]
fn crash_model_tracks_durable_bytes_and_directory_entries() {
    let (_scratch, base) = scratch_dir();
    let root = base.join("d");
    DirBuilder::new().mode(0o700).create(&root).expect("dir");
    let fs = CrashFs::new(root.clone());
    let (mut file, temp) = fs.create_temp(&root, ".x.").expect("temp");
    fs.write_all(&mut file, b"hello").expect("write");
    let disk = fs.disk();
    assert!(disk.durable_dir.is_empty());
    assert_eq!(disk.pending.len(), 1);
    assert_eq!(*disk.inodes[0].durable, b"");
    assert_eq!(*disk.inodes[0].live, b"hello");
    fs.sync_file(&file).expect("sync");
    assert_eq!(*fs.disk().inodes[0].durable, b"hello");
    fs.rename(&temp, &root.join("x.json")).expect("rename");
    let disk = fs.disk();
    assert_eq!(
        disk.crash_directories(false).len(),
        3,
        "none, the create, both"
    );
    fs.sync_dir(&root).expect("sync dir");
    let disk = fs.disk();
    assert!(disk.pending.is_empty());
    assert_eq!(disk.durable_dir.keys().collect::<Vec<_>>(), ["x.json"]);
    fs.remove_file(&root.join("x.json")).expect("unlink");
    assert_eq!(fs.disk().crash_directories(false).len(), 2);
    assert_eq!(fs.take_log().len(), 6);
}

#[test]
fn crash_model_keeps_or_loses_unsynced_truncations_and_positioned_writes() {
    let (_scratch, base) = scratch_dir();
    let root = base.join("d");
    DirBuilder::new().mode(0o700).create(&root).expect("dir");
    let fs = CrashFs::new(root.clone());
    let file = fs.create_private(&root.join("j")).expect("create");
    // A synced journal whose last 8 bytes are a torn tail ...
    fs.write_all_at(&file, b"HEADREC1TORNTAIL", 0)
        .expect("write");
    fs.sync_data(&file).expect("sync");
    // ... cut off, and a new record written in its place, not synced yet.
    fs.set_len(&file, 8).expect("cut");
    fs.write_all_at(&file, b"REC2!", 8).expect("write");
    let disk = fs.disk();
    let inode = &disk.inodes[0];
    assert_eq!(*inode.live, b"HEADREC1REC2!");
    assert_eq!(inode.cut, Some(8));
    assert_eq!(Damage::unsynced_bytes(inode), 5);
    let crash = |damage: Damage, fate| String::from_utf8(damage.apply_with(inode, fate)).unwrap();
    // The cut kept: the old tail is gone, whatever part of the record reached the disk.
    assert_eq!(crash(Damage::Dropped, Fate::Kept), "HEADREC1");
    assert_eq!(crash(Damage::Bytes(2), Fate::Kept), "HEADREC1RE");
    assert_eq!(crash(Damage::Persisted, Fate::Kept), "HEADREC1REC2!");
    // The cut lost: the record's bytes that reached the disk lie over the old tail.
    assert_eq!(crash(Damage::Dropped, Fate::Lost), "HEADREC1TORNTAIL");
    assert_eq!(crash(Damage::Bytes(2), Fate::Lost), "HEADREC1RERNTAIL");
    assert_eq!(crash(Damage::Persisted, Fate::Lost), "HEADREC1REC2!AIL");
    assert_eq!(Fate::variants(inode), [Fate::Kept, Fate::Lost]);
    // `sync_data` makes the data and the size durable: nothing left to lose.
    fs.sync_data(&file).expect("sync");
    let disk = fs.disk();
    let inode = &disk.inodes[0];
    assert_eq!(inode.cut, None);
    for damage in Damage::variants() {
        assert_eq!(damage.apply(inode), b"HEADREC1REC2!", "{damage:?}");
    }
    // The file's entry is still not durable: only a `sync_dir` makes it so.
    assert!(disk.durable_dir.is_empty());
    assert_eq!(
        disk.pending,
        [DirOp::Link {
            name: "j".into(),
            inode: 0
        }]
    );
}

#[test]
fn every_crash_point_of_saves_and_a_delete_recovers_the_old_or_the_new_snapshot() {
    let records = record_run(Writer::Store, &store_plan(), Start::Existing);
    let (figures, violations) = check(&records, Fates::Ordered);
    report(
        "FileSessionStore (open, saves, delete)",
        &figures,
        &violations,
    );
    assert!(
        violations.is_empty(),
        "{} violations, first ones:\n{}",
        violations.len(),
        violations
            .iter()
            .take(10)
            .map(|v| format!("{:?}: {}", v.kind, v.what))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Each save and the delete was cut at every step.
    assert!(records.iter().all(|r| r.acknowledged));
    let saves = records
        .iter()
        .filter(|r| r.label.starts_with("save"))
        .count();
    assert!(saves >= 4);
    // A first save makes 19 calls (it also checks for a leftover archive marker), a save
    // over a file this store saved 21 (it checks the base's header first, and the list of
    // forks sharing the session it replaces); both check the lock file's identity, read
    // the session's lease and check the journal's path: see fault_injection's clean
    // sequences (the rewrite, the view checkpoint's removal, then the journal and the
    // summary). Each is cut before its first call and after every call.
    assert!(
        records
            .iter()
            .filter(|r| r.label.starts_with("save"))
            .all(|r| matches!(r.steps.len(), 20 | 22)),
        "{:?}",
        records
            .iter()
            .map(|r| (&r.label, r.steps.len()))
            .collect::<Vec<_>>()
    );
    assert!(figures.recoveries > 0);
}

#[test]
fn every_crash_point_and_every_byte_of_journal_writes_recovers_the_old_or_the_new_state() {
    let records = record_run(Writer::Store, &journal_plan(), Start::Existing);
    // The run is the one described: the journal started three times (a first append, an
    // append after a new session's base replaced the first, and once more after the
    // delete), appended to, rewound (an entry that keeps fewer messages and adds none),
    // restored twice from a loaded snapshot and twice through the store (the first
    // reading the log, the second from the lengths the store kept), edited whole and
    // compacted (with a view checkpoint), each an entry appended.
    let labels: Vec<&str> = records.iter().map(|r| r.label.as_str()).collect();
    let count = |prefix: &str| labels.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("append (the journal started)"), 3, "{labels:?}");
    assert_eq!(count("append of"), 9, "{labels:?}");
    assert_eq!(count("rewind of"), 1, "{labels:?}");
    assert_eq!(count("restore of"), 2, "{labels:?}");
    assert_eq!(count("store restore of"), 2, "{labels:?}");
    assert_eq!(count("trim of"), 1, "{labels:?}");
    assert_eq!(count("edit of"), 1, "{labels:?}");
    assert_eq!(count("compaction of"), 1, "{labels:?}");
    assert_eq!(count("delete"), 1, "{labels:?}");
    // The compaction wrote its view checkpoint, so crashes during that write (and the
    // loads after every later crash point until the trim removes it) are checked too.
    let compaction = records
        .iter()
        .find(|r| r.label.starts_with("compaction of"))
        .expect("a compaction");
    let (_, after_compaction) = compaction.steps.last().expect("its calls");
    assert!(
        after_compaction
            .live_dir
            .keys()
            .any(|name| *name == format!("{ID}.view")),
        "{:?}",
        after_compaction.live_dir.keys()
    );
    let (figures, violations) = check(&records, Fates::Ordered);
    report(
        "FileSessionStore with its journal (appends, rewind, restore, edit, compaction, rewrite, delete)",
        &figures,
        &violations,
    );
    assert!(figures.byte_cuts > 0, "{figures:?}");
    assert_no_violations(&violations);
}

#[test]
fn every_crash_point_of_archiving_restoring_and_deleting_an_archived_session_recovers() {
    let records = record_run(Writer::Store, &archive_plan(), Start::Existing);
    let labels: Vec<&str> = records.iter().map(|r| r.label.as_str()).collect();
    let count = |prefix: &str| labels.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("archive of"), 3, "{labels:?}");
    assert_eq!(count("restore of"), 2, "{labels:?}");
    assert!(
        labels.iter().any(|l| l.ends_with("(archived)")),
        "{labels:?}"
    );
    let (figures, violations) = check(&records, Fates::Ordered);
    report(
        "FileSessionStore archiving, restoring, and deleting an archived session",
        &figures,
        &violations,
    );
    assert_no_violations(&violations);
}

/// Fails with a digest of `violations`, if there are any.
fn assert_no_violations(violations: &[Violation]) {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for v in violations {
        *kinds
            .entry(format!(
                "{:?} in {}",
                v.kind,
                v.what.split(':').next().unwrap_or("")
            ))
            .or_default() += 1;
    }
    assert!(
        violations.is_empty(),
        "{} violations ({kinds:?}), first ones:\n{}",
        violations.len(),
        violations
            .iter()
            .take(12)
            .map(|v| format!("{:?}: {}", v.kind, v.what))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn a_lost_truncation_of_the_journal_never_lets_a_new_record_land_over_stale_records() {
    // `ftruncate` is a metadata change: until an fsync, a crash may lose it while data
    // written after it reaches the disk. A rewrite (or compaction) empties the journal;
    // the next append writes the new journal's header and record at offset 0. Were the
    // emptying an unsynced `set_len(0)`, a crash keeping (part of) those bytes but losing
    // the truncation would leave them over the old records, which follow them intact: the
    // load reports corruption, and the session cannot be loaded at all. (A torn tail cut
    // at the end of the live records is safe: what follows a new record there is a
    // fragment of one frame, never an intact one.) So the store syncs the emptying
    // (`set_len(0)` then `sync_data`) before the journal is written again.
    let records = record_run(Writer::Store, &journal_plan(), Start::Existing);
    let (figures, violations) = check(&records, Fates::LostOnly);
    report(
        "FileSessionStore with its journal, unsynced size changes lost",
        &figures,
        &violations,
    );
    assert!(figures.truncations_lost > 0, "{figures:?}");
    assert_no_violations(&violations);
}

#[test]
fn an_append_over_a_stale_journal_empties_it_durably_before_writing_the_new_journal() {
    // A journal holding an older base's records (three of them, longer than the new
    // journal's header and first record) is found by the next append, which starts a new
    // journal at offset 0. Were it only cut with an unsynced `set_len(0)` before the new
    // bytes are written, a crash that loses that cut but keeps (part of) the new bytes
    // would leave the new header and record over the stale records' remainder, intact
    // frames among it: a session that no longer loads. So the store empties the stale
    // journal durably first. Every crash point of that append, with size changes kept in
    // order and with them lost, must recover the old or the new state.
    let records = record_run(Writer::Store, &stale_journal_plan(), Start::Existing);
    let labels: Vec<&str> = records.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(
        labels
            .iter()
            .filter(|l| l.starts_with("append over a stale journal"))
            .count(),
        1,
        "{labels:?}"
    );
    let (figures, mut violations) = check(&records, Fates::Ordered);
    report(
        "FileSessionStore appending over a stale journal",
        &figures,
        &violations,
    );
    assert!(figures.byte_cuts > 0, "{figures:?}");
    let (lost, found) = check(&records, Fates::LostOnly);
    report(
        "FileSessionStore appending over a stale journal, unsynced size changes lost",
        &lost,
        &found,
    );
    assert!(lost.truncations_lost > 0, "{lost:?}");
    violations.extend(found);
    assert_no_violations(&violations);
}

#[test]
fn the_unbroken_copy_and_atomic_replace_pass_the_crash_model() {
    for (name, writer) in [
        ("atomic::replace", Writer::Replace(durable_replace)),
        ("the unbroken copy", Writer::Replace(replace_copy_unbroken)),
    ] {
        let records = record_run(writer, &CONTROL_PLAN, Start::Existing);
        let (figures, violations) = check(&records, Fates::Ordered);
        report(name, &figures, &violations);
        assert!(violations.is_empty(), "{name}: {violations:?}");
        let calls: Vec<_> = records[0].steps[1..].iter().map(|(c, _)| *c).collect();
        assert_eq!(
            calls,
            [
                "create_temp",
                "write_all",
                "sync_file",
                "rename",
                "sync_dir"
            ],
            "{name}"
        );
    }
}

#[test]
fn the_crash_model_catches_a_writer_without_the_file_fsync() {
    let records = record_run(
        Writer::Replace(replace_without_file_fsync),
        &CONTROL_PLAN,
        Start::Existing,
    );
    let (figures, violations) = check(&records, Fates::Ordered);
    report("control without the file fsync", &figures, &violations);
    let caught = violations
        .iter()
        .filter(|v| v.kind == Kind::Unrecoverable && v.what.contains("acknowledged"))
        .count();
    assert!(
        caught > 0,
        "a writer that renames unsynced data over the snapshot was not caught: {violations:?}"
    );
    let example = violations
        .iter()
        .find(|v| v.kind == Kind::Unrecoverable && v.what.contains("acknowledged"))
        .map_or("", |v| v.what.as_str());
    eprintln!(
        "crash model, control without the file fsync: caught, {caught} recoveries after an \
         acknowledged save found an unreadable snapshot; e.g. {example}"
    );
}

#[test]
fn the_crash_model_catches_a_writer_without_the_directory_fsync() {
    let records = record_run(
        Writer::Replace(replace_without_dir_fsync),
        &CONTROL_PLAN,
        Start::Existing,
    );
    let (figures, violations) = check(&records, Fates::Ordered);
    report("control without the directory fsync", &figures, &violations);
    let lost: Vec<_> = violations
        .iter()
        .filter(|v| v.kind == Kind::AcknowledgedLost)
        .collect();
    assert!(
        !lost.is_empty(),
        "a writer that does not sync the rename was not caught: {violations:?}"
    );
    eprintln!(
        "crash model, control without the directory fsync: caught, {} recoveries lost an \
         acknowledged save; e.g. {}",
        lost.len(),
        lost[0].what
    );
}

#[test]
fn a_power_cut_after_the_first_save_into_a_new_store_directory_keeps_the_save() {
    // `open` creates `<base>/store` and fsyncs `<base>`, so the directory entry is durable
    // before any save is acknowledged.
    let records = record_run(Writer::Store, &[Action::Save, Action::Save], Start::Missing);
    let (figures, violations) = check(&records, Fates::Ordered);
    report(
        "FileSessionStore creating its directory",
        &figures,
        &violations,
    );
    assert!(violations.is_empty(), "{violations:?}");
    assert!(records[0]
        .steps
        .iter()
        .any(|(call, _)| *call == "create_dir_private"));
}

#[test]
fn a_power_cut_after_the_first_save_into_new_nested_directories_keeps_the_save() {
    // `open` on `<base>/new/store` must create `new` and `store` and fsync each entry into
    // its parent (`<base>`, then `<base>/new`): otherwise, by fsync(2)'s rules, the entry of
    // `new` may not survive a power cut, and with it the store directory and every
    // snapshot acknowledged in it. (Found by this test: the first version fsynced only
    // `<base>/new`.)
    let records = record_run(
        Writer::Store,
        &[Action::Save, Action::Save],
        Start::MissingParent,
    );
    let (figures, violations) = check(&records, Fates::Ordered);
    report(
        "FileSessionStore creating its directory and its parent",
        &figures,
        &violations,
    );
    assert!(
        violations.is_empty(),
        "a directory created by open is not fsynced into its parent, so an acknowledged \
         save into a store whose parent did not exist can vanish in a power cut. \
         {} violations, e.g. {}",
        violations.len(),
        violations[0].what
    );
}

// ---------------------------------------------------------------------------------------
// Leases: taking, taking over, renewing and releasing, with saves under them.
// ---------------------------------------------------------------------------------------

/// A step of a lease run. Two store objects over the directory (as two processes would
/// be) hold the leases: each holds its own `flock` on the lease file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseStep {
    /// `acquire_lease` on store `by` (0 or 1), taking over a live lease if `take_over`.
    Acquire { by: usize, take_over: bool },
    /// The holder renews its lease, on its store.
    Renew,
    /// The holder releases its lease, on its store.
    Release,
    /// A write on store 0 without a lease: [`Action::Save`], [`Action::Append`] or
    /// [`Action::Delete`].
    Unleased(Action),
    /// A save on the holder's store under its lease
    /// ([`SessionSnapshot::with_lease`]): [`Action::Save`] (a new base) or
    /// [`Action::Append`] (an entry appended to the journal, which syncs no directory).
    Leased(Action),
}

/// A request for a lease for an hour (no lease of a run expires while it runs).
fn lease_request(label: &str, take_over: bool) -> LeaseRequest {
    LeaseRequest::new(LeaseHolder::this_process(label))
        .ttl(std::time::Duration::from_secs(3600))
        .take_over(take_over)
}

/// Runs `plan` on a fresh directory under the crash model with the lease mistake `fault`,
/// recording the disk after every call; also returns how many fsyncs the fault left out.
#[allow(clippy::too_many_lines)]
fn record_lease_run(plan: &[LeaseStep], fault: LeaseFault) -> (Vec<OpRecord>, usize) {
    let (_scratch, base) = scratch_dir();
    let root = base.join("store");
    DirBuilder::new()
        .mode(0o700)
        .create(&root)
        .expect("store directory");
    let fs = Arc::new(CrashFs::with_fault(root.clone(), fault));
    let id = SessionId::parse(ID).expect("valid id");
    let target = root.join(format!("{ID}.json"));
    let lease_file = root.join(format!("{ID}.lease"));
    let mut records = Vec::new();
    let mut disk = fs.disk();
    let mut finish = |label: String, before, after, expect: LeaseExpect, disk: &mut Disk| {
        let mut steps = vec![("(start)", disk.clone())];
        steps.extend(fs.take_log());
        *disk = fs.disk();
        records.push(OpRecord {
            label,
            before,
            after,
            acknowledged: true,
            steps,
            lease: Some(expect),
        });
    };
    let open = || {
        let shared: Arc<dyn FileSystem> = fs.clone();
        FileSessionStore::open_with(&root, DEFAULT_MAX_SNAPSHOT_BYTES, shared)
            .expect("open on the crash model")
    };
    let stores = [open(), open()];
    let none = LeaseExpect {
        floor: 0,
        saves_under: None,
        issued_before: 0,
        issued_after: 0,
        records: Vec::new(),
    };
    finish("open of two stores".into(), None, None, none, &mut disk);
    let mut revision = 0_u64;
    let mut current: State = None;
    // The lease and the store holding it; the highest epoch a save acknowledged was made
    // under; the highest handed out; every content the lease file had.
    let mut holder: Option<(usize, Lease)> = None;
    let mut floor = 0_u64;
    let mut issued = 0_u64;
    let mut written: Vec<Vec<u8>> = Vec::new();
    for step in plan {
        let issued_before = issued;
        let mut saves_under = None;
        let mut taken_from = None;
        let unchanged = current.clone();
        let (label, result, after): (String, Result<(), String>, State) = match *step {
            LeaseStep::Acquire { by, take_over } => {
                let what = match (take_over, issued) {
                    (true, _) => "take-over",
                    (false, 0) => "first acquisition",
                    (false, _) => "acquisition",
                };
                let result = stores[by]
                    .acquire_lease(&id, &lease_request(&format!("store {by}"), take_over))
                    .map_err(|e| e.to_string());
                let label = match &result {
                    Ok(lease) => format!("{what} of epoch {} by store {by}", lease.epoch),
                    Err(_) => format!("{what} by store {by}"),
                };
                let result = result.map(|lease| {
                    issued = issued.max(lease.epoch);
                    taken_from = holder.replace((by, lease)).filter(|(from, _)| *from != by);
                });
                (label, result, unchanged)
            }
            LeaseStep::Renew => {
                let (by, lease) = holder.as_mut().expect("a lease to renew");
                let result = stores[*by]
                    .renew_lease(lease, std::time::Duration::from_secs(7200))
                    .map(|renewed| *lease = renewed)
                    .map_err(|e| e.to_string());
                (
                    format!("renewal of epoch {}", lease.epoch),
                    result,
                    unchanged,
                )
            }
            LeaseStep::Release => {
                let (by, lease) = holder.take().expect("a lease to release");
                let result = stores[by].release_lease(&lease).map_err(|e| e.to_string());
                (
                    format!("release of epoch {}", lease.epoch),
                    result,
                    unchanged,
                )
            }
            LeaseStep::Unleased(Action::Delete) => (
                format!("delete of revision {revision}"),
                stores[0].delete(&id).map_err(|e| e.to_string()),
                None,
            ),
            LeaseStep::Unleased(action) | LeaseStep::Leased(action) => {
                let leased = matches!(step, LeaseStep::Leased(_));
                let (by, lease) = match (&holder, leased) {
                    (Some((by, lease)), true) => (*by, Some(lease)),
                    (_, true) => panic!("no lease to save under"),
                    (_, false) => (0, None),
                };
                let store = &stores[by];
                let under = lease.map_or_else(String::new, |l| format!(" under epoch {}", l.epoch));
                saves_under = lease.map(|l| l.epoch);
                match action {
                    Action::Save => {
                        let snapshot =
                            snapshot_on(&id, revision, "leased", size_of_revision(revision + 1));
                        let bytes = encoded(&snapshot);
                        let result = store
                            .save(&snapshot.with_lease_of(lease))
                            .map(drop)
                            .map_err(|e| e.to_string());
                        (
                            format!("save{under} of revision {}", revision + 1),
                            result,
                            Some(stored_from_bytes(bytes)),
                        )
                    }
                    Action::Append(size) => {
                        let loaded = store.load(&id).expect("load before an append");
                        // The load changed nothing on disk: its calls are no crash points.
                        fs.take_log();
                        let next = appended(&loaded, "leased turn", size);
                        let base_before = std::fs::read(&target).expect("read the base");
                        let result = store
                            .save(&next.clone().with_lease_of(lease))
                            .map(drop)
                            .map_err(|e| e.to_string());
                        let base_after = std::fs::read(&target).expect("read the base");
                        assert_eq!(base_after, base_before, "an entry is appended");
                        (
                            format!("append{under} of revision {}", revision + 1),
                            result,
                            Some(Stored {
                                base: base_after,
                                snapshot: saved(&next),
                                archived: false,
                            }),
                        )
                    }
                    other => panic!("no lease run step writes {other:?}"),
                }
            }
        };
        result.unwrap_or_else(|e| panic!("{label} failed without a crash: {e}"));
        // What a store reading the live files loads is the state expected after it.
        let live = FileSessionStore::open(&root)
            .expect("open on the live files")
            .load(&id);
        match (&live, &after) {
            (Ok(loaded), Some(after)) => assert_eq!(*loaded, after.snapshot, "{label}"),
            (Err(e), None) => assert!(e.is_not_found(), "{label}: {e}"),
            _ => panic!("{label}: live load {live:?}"),
        }
        if let Ok(bytes) = std::fs::read(&lease_file) {
            if written.last() != Some(&bytes) {
                written.push(bytes);
            }
        }
        revision = match step {
            LeaseStep::Unleased(Action::Delete) => 0,
            LeaseStep::Unleased(_) | LeaseStep::Leased(_) => revision + 1,
            _ => revision,
        };
        let expect = LeaseExpect {
            floor,
            saves_under,
            issued_before,
            issued_after: issued,
            records: written.clone(),
        };
        floor = floor.max(saves_under.unwrap_or(0));
        let before = std::mem::replace(&mut current, after.clone());
        finish(label.clone(), before, after, expect, &mut disk);
        // The holder taken over is fenced off (reads only: no crash points).
        if let Some((from, old)) = taken_from {
            let loaded = stores[from].load(&id).expect("load");
            let refused = stores[from].save(&appended(&loaded, "fenced", 10).with_lease(&old));
            assert!(
                matches!(refused, Err(Error::Fenced { .. })),
                "{label}: the holder taken over saved: {refused:?}"
            );
            fs.take_log();
        }
    }
    let faulted = fs.faulted();
    (records, faulted)
}

/// The lease's life on a session with a journal: a first acquisition and appends under
/// it (appends sync no directory, and a lease record is written without a directory
/// fsync), a renewal, a take-over by the second store with an append and a new base
/// under its lease, a release, an acquisition released with no save under it, and an
/// append without a lease. The long run adds an acquisition with appends under it, a
/// delete (the lease file outlives it), a new session of the id, and a lease on it.
fn lease_plan() -> Vec<LeaseStep> {
    use Action::{Append, Delete, Save};
    use LeaseStep::{Acquire, Leased, Release, Renew, Unleased};
    let mut plan = vec![
        Unleased(Save),
        Unleased(Append(150)),
        Acquire {
            by: 0,
            take_over: false,
        },
        Leased(Append(150)),
        Renew,
        Leased(Append(150)),
        Acquire {
            by: 1,
            take_over: true,
        },
        Leased(Append(150)),
        Leased(Save),
        Release,
        Acquire {
            by: 0,
            take_over: false,
        },
        Release,
        Unleased(Append(150)),
    ];
    if long_run() {
        plan.extend([
            Acquire {
                by: 1,
                take_over: false,
            },
            Leased(Append(150)),
            Leased(Append(150)),
            Release,
            Unleased(Delete),
            Unleased(Save),
            Unleased(Append(150)),
            Acquire {
                by: 0,
                take_over: false,
            },
            Leased(Append(150)),
            Renew,
            Leased(Append(150)),
            Release,
        ]);
    }
    plan
}

/// Where a lease run cuts an unsynced journal write: outside the long run, after every
/// one of its first and last 8 bytes and every 32nd between (every byte of a journal
/// write is the journal run's subject; here it is the lease around it).
fn lease_run_byte_cuts(n: usize) -> Vec<usize> {
    if long_run() {
        byte_cuts(n)
    } else {
        (0..=n)
            .filter(|&b| b < 8 || b + 8 > n || b % 32 == 0)
            .collect()
    }
}

/// In a lease run, checks the lease file in `files`: none, or one of the records the run
/// wrote (counted by which). Anything else is a damaged lease file: a violation, and the
/// store must then treat it as documented (checked in `at`): the session loads and lists,
/// no lease is live, and a new lease is refused as corrupt, naming the file and saying to
/// remove it (its epoch is unknown: a guess could let a fenced writer in). The files
/// returned have it removed, as that error says, so the recovery checks still run.
fn inspect_lease_file(
    files: CrashFiles,
    expect: &LeaseExpect,
    record: &OpRecord,
    at: &Path,
    figures: &mut Figures,
) -> (CrashFiles, Vec<(Kind, String)>) {
    let name = format!("{ID}.lease");
    let Some(bytes) = files
        .iter()
        .flatten()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| b.clone())
    else {
        figures.lease_absent += 1;
        return (files, Vec::new());
    };
    match expect.records.iter().rposition(|r| *r == bytes) {
        Some(i) if i + 1 == expect.records.len() => {
            figures.lease_newest += 1;
            return (files, Vec::new());
        }
        Some(_) => {
            figures.lease_earlier += 1;
            return (files, Vec::new());
        }
        None => figures.lease_damaged += 1,
    }
    let mut problems = vec![(
        Kind::LeaseFile,
        format!(
            "the lease file is not a record the store wrote: {} bytes, {:?}",
            bytes.len(),
            String::from_utf8_lossy(&bytes[..bytes.len().min(60)])
        ),
    )];
    if let Err(why) = damaged_lease_handling(&files, record, at) {
        problems.push((Kind::Unleasable, why));
    }
    let _ = std::fs::remove_dir_all(at);
    let kept = files.map(|f| f.into_iter().filter(|(n, _)| *n != name).collect());
    (kept, problems)
}

/// How a store opened on `files` (whose lease file is damaged) treats the session: see
/// [`inspect_lease_file`].
fn damaged_lease_handling(files: &CrashFiles, record: &OpRecord, at: &Path) -> Result<(), String> {
    build_dir(files, at)?;
    let store = FileSessionStore::open(at).map_err(|e| format!("open failed: {e}"))?;
    let id = SessionId::parse(ID).expect("valid id");
    let stored = match store.load(&id) {
        Ok(loaded) => Some(loaded),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(format!("a damaged lease file failed the load: {e}")),
    };
    let states = [&record.before, &record.after];
    if !states
        .iter()
        .any(|s| s.as_ref().map(|s| &s.snapshot) == stored.as_ref())
    {
        return Err("with a damaged lease file the load gives neither state".into());
    }
    store
        .list_scoped(ListScope::All)
        .map_err(|e| format!("a damaged lease file failed the listing: {e}"))?;
    let live = store
        .leases()
        .map_err(|e| format!("a damaged lease file failed the listing of leases: {e}"))?;
    if !live.is_empty() {
        return Err(format!("a damaged lease file is listed live: {live:?}"));
    }
    if stored.is_some() {
        match store.acquire_lease(&id, &lease_request("over damage", false)) {
            Ok(lease) => {
                return Err(format!(
                    "a lease (epoch {}) was taken over a lease file whose epoch is unknown",
                    lease.epoch
                ))
            }
            Err(e)
                if e.kind() == ErrorKind::Corrupt
                    && e.to_string().contains("remove the lease file")
                    && e.to_string().contains(&format!("{ID}.lease")) => {}
            Err(e) => return Err(format!("a lease over a damaged lease file: {e}")),
        }
    }
    Ok(())
}

/// After a recovery in a lease run (`found` recovered, then appended to and rewritten
/// without a lease by [`recover`] in `at`): no lease is live (the power loss ended every
/// holder), a new process takes a lease without taking over, saves under it (read back
/// by another store) and releases it; its epoch must be higher than every epoch a save
/// that survived the crash was made under. Counts the leases whose epoch had been handed
/// out before the crash.
fn check_epoch(
    record: &OpRecord,
    expect: &LeaseExpect,
    found: &State,
    acknowledged: bool,
    at: &Path,
    figures: &mut Figures,
) -> Vec<(Kind, String)> {
    figures.leases_taken += 1;
    let epoch = match lease_after_recovery(at) {
        Ok(epoch) => epoch,
        Err(why) => return vec![(Kind::Unleasable, why)],
    };
    // The operation's save survived if its state is what the recovery found.
    let floor = match expect.saves_under {
        Some(epoch) if *found == record.after => expect.floor.max(epoch),
        _ => expect.floor,
    };
    let issued = if acknowledged {
        expect.issued_after
    } else {
        expect.issued_before
    };
    figures.epochs_again += usize::from(epoch <= issued);
    if epoch <= floor {
        return vec![(
            Kind::Epoch,
            format!(
                "the lease taken after recovery has epoch {epoch}, and a save made under \
                 epoch {floor} survived the crash"
            ),
        )];
    }
    Vec::new()
}

/// See [`check_epoch`]: the epoch of the lease a new process takes in `at`.
fn lease_after_recovery(at: &Path) -> Result<u64, String> {
    let id = SessionId::parse(ID).expect("valid id");
    let store = FileSessionStore::open(at).map_err(|e| format!("open failed: {e}"))?;
    let live = store
        .leases()
        .map_err(|e| format!("listing the leases after recovery failed: {e}"))?;
    if !live.is_empty() {
        return Err(format!("a lease is live after the power loss: {live:?}"));
    }
    let lease = store
        .acquire_lease(&id, &lease_request("after recovery", false))
        .map_err(|e| format!("a new lease after recovery (no take-over) failed: {e}"))?;
    let loaded = store
        .load(&id)
        .map_err(|e| format!("load after recovery failed: {e}"))?;
    let next = appended(&loaded, "under a lease after recovery", 50);
    store
        .save(&next.clone().with_lease(&lease))
        .map_err(|e| format!("a save under the lease after recovery failed: {e}"))?;
    let back = FileSessionStore::open(at)
        .and_then(|s| s.load(&id))
        .map_err(|e| format!("load after the leased save failed: {e}"))?;
    if back != saved(&next) {
        return Err("the save under the lease after recovery does not load back".into());
    }
    store
        .release_lease(&lease)
        .map_err(|e| format!("the release after recovery failed: {e}"))?;
    Ok(lease.epoch)
}

fn report_leases(name: &str, figures: &Figures) {
    eprintln!(
        "crash model, {name}, leases: {} recoveries followed by a new lease (taken without \
         take-over, saved under, released); the lease file the crash left was absent in {}, \
         an earlier record in {}, the newest record in {}, damaged in {}; {} new leases got \
         an epoch handed out before the crash (no save under it survived)",
        figures.leases_taken,
        figures.lease_absent,
        figures.lease_earlier,
        figures.lease_newest,
        figures.lease_damaged,
        figures.epochs_again
    );
}

#[test]
fn every_crash_point_of_taking_renewing_releasing_and_taking_over_a_lease_keeps_saves_and_epochs() {
    let (records, _) = record_lease_run(&lease_plan(), LeaseFault::None);
    let labels: Vec<&str> = records.iter().map(|r| r.label.as_str()).collect();
    let count = |part: &str| labels.iter().filter(|l| l.contains(part)).count();
    assert_eq!(count("first acquisition of epoch 1"), 1, "{labels:?}");
    assert_eq!(count("take-over of epoch 2 by store 1"), 1, "{labels:?}");
    assert!(count("renewal of epoch") >= 1, "{labels:?}");
    assert!(count("release of epoch") >= 2, "{labels:?}");
    assert!(count("append under epoch") >= 3, "{labels:?}");
    assert!(count("save under epoch") >= 1, "{labels:?}");
    let (figures, violations) = check(&records, Fates::Ordered);
    report(
        "FileSessionStore leases (first acquisition, renewal, take-over, release, saves under them)",
        &figures,
        &violations,
    );
    report_leases("FileSessionStore", &figures);
    assert_no_violations(&violations);
    // The runs reached what they are about: crashes that took a lease record back, and
    // crashes after which no lease file was left.
    assert!(
        figures.lease_earlier > 0 && figures.lease_absent > 0,
        "{figures:?}"
    );
    assert_eq!(figures.lease_damaged, 0, "{figures:?}");
    assert!(figures.byte_cuts > 0, "{figures:?}");
}

#[test]
fn the_crash_model_catches_a_lease_record_renamed_before_its_data_is_synced() {
    // A realistic mistake: the lease file is "only a lock", so its data is not synced
    // before the rename. A power cut that keeps the rename then leaves an empty, zeroed or
    // torn lease file: every save of the session fails as corrupt until it is removed.
    use LeaseStep::{Acquire, Release, Renew, Unleased};
    let plan = [
        Unleased(Action::Save),
        Acquire {
            by: 0,
            take_over: false,
        },
        Renew,
        Release,
    ];
    let (records, faulted) = record_lease_run(&plan, LeaseFault::DataUnsynced);
    assert!(faulted > 0, "the control left no fsync out");
    let (figures, violations) = check(&records, Fates::Ordered);
    report("control: lease data not synced", &figures, &violations);
    report_leases("control: lease data not synced", &figures);
    let caught: Vec<_> = violations
        .iter()
        .filter(|v| v.kind == Kind::LeaseFile && v.what.contains("acknowledged"))
        .collect();
    assert!(
        !caught.is_empty(),
        "a lease file renamed over unsynced data was not caught: {violations:?}"
    );
    // The damaged files are handled as documented (the session loads and lists, a lease
    // is refused as corrupt), and the session's data is the old or the new state. Only
    // the epochs suffer: removing the damaged file, as the error says, starts them again.
    let mishandled: Vec<_> = violations
        .iter()
        .filter(|v| !matches!(v.kind, Kind::LeaseFile | Kind::Epoch))
        .collect();
    assert!(mishandled.is_empty(), "{mishandled:?}");
    eprintln!(
        "crash model, control: lease data not synced: caught, {} recoveries after an \
         acknowledged call found a damaged lease file; e.g. {}",
        caught.len(),
        caught[0].what
    );
}

#[test]
fn the_crash_model_catches_a_save_under_a_lease_whose_record_is_not_durable() {
    // The store as it was before the first save under a lease synced the directory: the
    // lease record's rename is not durable, an append syncs no directory, and a power cut
    // after the append was acknowledged can take the record back while the append
    // survives; the next lease then gets the epoch the append was saved under again.
    use LeaseStep::{Acquire, Leased, Unleased};
    let plan = [
        Unleased(Action::Save),
        Unleased(Action::Append(150)),
        Acquire {
            by: 0,
            take_over: false,
        },
        Leased(Action::Append(150)),
    ];
    let (records, faulted) = record_lease_run(&plan, LeaseFault::RecordNotDurable);
    assert!(faulted > 0, "the control left no directory fsync out");
    let (figures, violations) = check(&records, Fates::Ordered);
    report("control: lease record not durable", &figures, &violations);
    report_leases("control: lease record not durable", &figures);
    let caught: Vec<_> = violations
        .iter()
        .filter(|v| v.kind == Kind::Epoch && v.what.contains("acknowledged"))
        .collect();
    assert!(
        !caught.is_empty(),
        "a save under a lease whose record a crash can take back was not caught: {violations:?}"
    );
    assert!(
        violations.iter().all(|v| v.kind == Kind::Epoch),
        "{violations:?}"
    );
    eprintln!(
        "crash model, control: lease record not durable: caught, {} recoveries after an \
         acknowledged call gave a new lease an epoch a surviving save was made under; e.g. {}",
        caught.len(),
        caught[0].what
    );
}

// ---------------------------------------------------------------------------------------
// A real cut on a loop-mounted ext4 image.
// ---------------------------------------------------------------------------------------

/// How the shutdown ioctl is issued: Rust code here may not use `unsafe`, so a small
/// external program makes the call.
#[derive(Debug, Clone, Copy)]
enum ShutdownTool {
    XfsIo,
    Perl,
    Python,
}

// EXT4_IOC_SHUTDOWN = _IOR('X', 125, __u32) = 0x8004587D; EXT4_GOING_FLAGS_NOLOGFLUSH = 2:
// abort the journal without committing it and drop every dirty page.
const PERL_SHUTDOWN: &str = r#"open(my $fh, "<", $ARGV[0]) or die "open: $!"; my $flags = pack("L", 2); ioctl($fh, 0x8004587D, $flags) or die "ioctl: $!";"#;
const PYTHON_SHUTDOWN: &str = "import fcntl, os, struct, sys; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.ioctl(fd, 0x8004587D, struct.pack('I', 2))";

impl ShutdownTool {
    fn find() -> Option<ShutdownTool> {
        let works = |program: &str, arg: &str| {
            Command::new(program)
                .arg(arg)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if works("xfs_io", "-V") {
            Some(ShutdownTool::XfsIo)
        } else if works("perl", "-v") {
            Some(ShutdownTool::Perl)
        } else if works("python3", "--version") {
            Some(ShutdownTool::Python)
        } else {
            None
        }
    }

    /// Cuts the file system mounted at `point`.
    fn cut(self, point: &Path) -> Result<(), String> {
        let mut command = match self {
            ShutdownTool::XfsIo => {
                let mut c = Command::new("xfs_io");
                c.args(["-x", "-c", "shutdown"]);
                c
            }
            ShutdownTool::Perl => {
                let mut c = Command::new("perl");
                c.args(["-e", PERL_SHUTDOWN]);
                c
            }
            ShutdownTool::Python => {
                let mut c = Command::new("python3");
                c.args(["-c", PYTHON_SHUTDOWN]);
                c
            }
        };
        let out = command
            .arg(point)
            .output()
            .map_err(|e| format!("{self:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{self:?} shutdown failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// The real file system, cut (shut down) just before call `cut_after + 1` after `arm`.
#[derive(Debug)]
struct CutFs {
    inner: OsFileSystem,
    point: PathBuf,
    tool: ShutdownTool,
    state: Mutex<(Option<usize>, usize, bool)>,
}

impl CutFs {
    fn arm(&self, cut_after: usize) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = (Some(cut_after), 0, false);
    }

    /// Counts a call, cutting first if it is the one.
    fn before_call(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let (Some(cut_after), count, false) = *state {
            if count == cut_after {
                self.tool
                    .cut(&self.point)
                    .expect("shut down the ext4 image");
                state.2 = true;
            }
            state.1 += 1;
        }
    }

    /// Cuts now if no call did; returns how many calls were made before the cut, and
    /// whether it came before one of them (rather than after the operation returned).
    fn cut_if_not_yet(&self) -> (usize, bool) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let during = state.2;
        if !state.2 {
            self.tool
                .cut(&self.point)
                .expect("shut down the ext4 image");
            state.2 = true;
            state.0 = Some(state.1);
        }
        (state.0.unwrap_or(0), during)
    }
}

impl FileSystem for CutFs {
    fn symlink_metadata(&self, path: &Path) -> io::Result<Metadata> {
        self.before_call();
        self.inner.symlink_metadata(path)
    }
    fn create_dir_private(&self, path: &Path) -> io::Result<()> {
        self.before_call();
        self.inner.create_dir_private(path)
    }
    fn open_dir(&self, path: &Path) -> io::Result<File> {
        self.before_call();
        self.inner.open_dir(path)
    }
    fn set_dir_private(&self, dir: &File) -> io::Result<()> {
        self.before_call();
        self.inner.set_dir_private(dir)
    }
    fn create_temp(&self, dir: &Path, prefix: &str) -> io::Result<(File, PathBuf)> {
        self.before_call();
        self.inner.create_temp(dir, prefix)
    }
    fn write_all(&self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        self.before_call();
        self.inner.write_all(file, bytes)
    }
    fn sync_file(&self, file: &File) -> io::Result<()> {
        self.before_call();
        self.inner.sync_file(file)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.before_call();
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.before_call();
        self.inner.sync_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.before_call();
        self.inner.remove_file(path)
    }
    fn open_read(&self, path: &Path) -> io::Result<File> {
        self.before_call();
        self.inner.open_read(path)
    }
    fn open_lock(&self, path: &Path) -> io::Result<File> {
        self.before_call();
        self.inner.open_lock(path)
    }
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        self.before_call();
        self.inner.read_dir(dir)
    }
    fn open_write(&self, path: &Path) -> io::Result<File> {
        self.before_call();
        self.inner.open_write(path)
    }
    fn create_private(&self, path: &Path) -> io::Result<File> {
        self.before_call();
        self.inner.create_private(path)
    }
    fn write_all_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.before_call();
        self.inner.write_all_at(file, bytes, offset)
    }
    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        self.before_call();
        self.inner.set_len(file, len)
    }
    fn sync_data(&self, file: &File) -> io::Result<()> {
        self.before_call();
        self.inner.sync_data(file)
    }
    fn set_file_private(&self, file: &File) -> io::Result<()> {
        self.before_call();
        self.inner.set_file_private(file)
    }
}

/// ext4 options: `noauto_da_alloc` turns off the heuristic that flushes a file's data when
/// it is renamed over another (other file systems have no such rescue, so the store must
/// not rely on it); `commit=60` keeps the periodic journal commit out of the few
/// milliseconds of a trial, so an unsynced change is reliably lost (it only ever makes
/// more durable, so it cannot hide a bug in the store).
const EXT4_OPTIONS: &str = "loop,noauto_da_alloc,commit=60";

/// Copies an image, keeping it sparse (it may live on a small tmpfs).
fn copy_image(from: &Path, to: &Path) {
    let copied = Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .status()
        .is_ok_and(|s| s.success());
    assert!(copied, "copy the ext4 image");
}

struct Ext4Lab {
    _scratch: tempfile::TempDir,
    base: PathBuf,
    template: PathBuf,
    tool: ShutdownTool,
    trials: usize,
}

impl Ext4Lab {
    fn new() -> Option<Ext4Lab> {
        let skip = |why: &str| {
            eprintln!("SKIPPED the real power cut on ext4: {why}");
            None
        };
        let Some(tool) = ShutdownTool::find() else {
            return skip("no xfs_io, perl or python3 to issue the EXT4_IOC_SHUTDOWN ioctl");
        };
        let (scratch, base) = scratch_dir();
        let template = base.join("template.img");
        File::create(&template)
            .and_then(|f| f.set_len(32 * 1024 * 1024))
            .expect("image file");
        match Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "nodiscard"])
            .arg(&template)
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return skip(&format!(
                    "mkfs.ext4 failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
            Err(e) => return skip(&format!("cannot run mkfs.ext4: {e}")),
        }
        // Probe: the image mounts, and the shutdown ioctl works on it.
        let point = base.join("probe");
        std::fs::create_dir(&point).expect("mount point");
        let probe = base.join("probe.img");
        copy_image(&template, &probe);
        let options = ["-o", EXT4_OPTIONS, probe.to_str().expect("UTF-8 path")];
        let mounted = Mounted::mount("the real power cut on ext4", &options, &point)?;
        if let Err(why) = tool.cut(&point) {
            return skip(&why);
        }
        drop(mounted);
        let _ = std::fs::remove_file(&probe);
        Some(Ext4Lab {
            _scratch: scratch,
            base,
            template,
            tool,
            trials: 0,
        })
    }
}

#[derive(Debug)]
struct Trial {
    writer: Writer,
    /// Revisions saved (durably, by the store) before the operation: built snapshots
    /// (full writes), then `setup_appends` of them appended to the journal.
    setup_revisions: u64,
    setup_appends: u64,
    action: Action,
    /// The cut comes after this many calls of the operation (`usize::MAX`: after it
    /// returned).
    cut_after: usize,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Writer::Store => f.write_str("Store"),
            Writer::Replace(_) => f.write_str("Replace"),
        }
    }
}

/// What one real cut showed.
#[derive(Debug)]
struct TrialOutcome {
    calls_before_cut: usize,
    /// Whether the cut came before a call of the operation (not after it returned).
    cut_during: bool,
    acknowledged: bool,
    /// "old", "new", or what else recovery gave.
    recovered: &'static str,
    violation: Option<(Kind, String)>,
}

/// What a store on the live files in `dir` loads.
fn live_state(dir: &Path, id: &SessionId) -> State {
    let store = FileSessionStore::open(dir).expect("open");
    let base = std::fs::read(store.path_of(id)).ok()?;
    let snapshot = store.load(id).expect("load the setup");
    Some(Stored {
        base,
        snapshot,
        archived: false,
    })
}

/// Runs one trial on a fresh copy of the image; `None` if mounting failed (a skip).
fn ext4_trial(lab: &mut Ext4Lab, trial: &Trial) -> Option<TrialOutcome> {
    lab.trials += 1;
    let image = lab.base.join(format!("t{}.img", lab.trials));
    copy_image(&lab.template, &image);
    let point = lab.base.join(format!("m{}", lab.trials));
    std::fs::create_dir(&point).expect("mount point");
    let options = ["-o", EXT4_OPTIONS, image.to_str().expect("UTF-8 path")];
    let id = SessionId::parse(ID).expect("valid id");
    let dir = point.join("store");
    let target = dir.join(format!("{ID}.json"));

    // The old state, the operation, and the cut.
    let mounted = Mounted::mount("the real power cut on ext4", &options, &point)?;
    let setup = FileSessionStore::open(&dir).expect("open on ext4");
    let built = trial.setup_revisions - trial.setup_appends;
    for n in 0..trial.setup_revisions {
        let snapshot = if n < built {
            snapshot_on(&id, n, "ext4", size_of_revision(n + 1))
        } else {
            appended(&setup.load(&id).expect("load"), "ext4 turn", 300)
        };
        setup.save(&snapshot).expect("setup save");
    }
    drop(setup);
    let before = live_state(&dir, &id);
    let fs = Arc::new(CutFs {
        inner: OsFileSystem,
        point: point.clone(),
        tool: lab.tool,
        state: Mutex::new((None, 0, false)),
    });
    let shared: Arc<dyn FileSystem> = fs.clone();
    let store = FileSessionStore::open_with(&dir, DEFAULT_MAX_SNAPSHOT_BYTES, shared)
        .expect("open on ext4");
    let root = store.dir().to_path_buf();
    let revision = trial.setup_revisions;
    // The snapshot an append extends, loaded before the cut is armed.
    let loaded = matches!(trial.action, Action::Append(_))
        .then(|| store.load(&id).expect("load before the append"));
    fs.arm(trial.cut_after);
    let (result, after) = match (trial.action, trial.writer) {
        (Action::Save, writer) => {
            let snapshot = snapshot_on(&id, revision, "ext4 new", size_of_revision(revision + 1));
            let bytes = encoded(&snapshot);
            let result = match writer {
                Writer::Store => store.save(&snapshot).map(|_| ()).map_err(|e| e.to_string()),
                Writer::Replace(replace) => {
                    replace(&*fs, &root, &target, &format!(".{ID}."), &bytes)
                        .map_err(|e| format!("{e:?}"))
                }
            };
            (result, Some(stored_from_bytes(bytes)))
        }
        (Action::Append(size), Writer::Store) => {
            let next = appended(&loaded.expect("a stored session"), "ext4 new turn", size);
            let result = store.save(&next).map(|_| ()).map_err(|e| e.to_string());
            let after = before.as_ref().map(|b| Stored {
                base: b.base.clone(),
                snapshot: saved(&next),
                archived: false,
            });
            (result, after)
        }
        (Action::Delete, _) => (store.delete(&id).map_err(|e| e.to_string()), None),
        (action, writer) => panic!("no ext4 trial for {action:?} by {writer:?}"),
    };
    let acknowledged = result.is_ok();
    let (calls_before_cut, cut_during) = fs.cut_if_not_yet();
    drop(store);
    drop(mounted);

    // Recovery: remount (the kernel replays the journal) and open a store.
    let mounted = Mounted::mount("the real power cut on ext4", &options, &point)?;
    let outcome = ext4_recover(&dir, &id);
    drop(mounted);
    let _ = std::fs::remove_file(&image);
    let recovered = match &outcome {
        Ok(found) if *found == after => "new",
        Ok(found) if *found == before => "old",
        Ok(_) => "other",
        Err(_) => "unreadable",
    };
    let violation = match outcome {
        Err(why) => Some((Kind::Unrecoverable, why)),
        Ok(found) if found == after => None,
        Ok(found) if !acknowledged && found == before => None,
        Ok(found) if acknowledged && found == before => Some((
            Kind::AcknowledgedLost,
            "an acknowledged save was lost: the old snapshot came back".into(),
        )),
        Ok(_) => Some((Kind::Neither, "neither the old nor the new snapshot".into())),
    };
    Some(TrialOutcome {
        calls_before_cut,
        cut_during,
        acknowledged,
        recovered,
        violation,
    })
}

/// Opens a store on the remounted image and loads the session (`None` if there is none),
/// or says why recovery failed.
fn ext4_recover(dir: &Path, id: &SessionId) -> Result<State, String> {
    let store = FileSessionStore::open(dir).map_err(|e| format!("open: {e}"))?;
    let left = temp_files(dir);
    if !left.is_empty() {
        return Err(format!("temporary files left: {left:?}"));
    }
    let raw = std::fs::read(store.path_of(id)).ok();
    match (store.load(id), raw) {
        (Ok(snapshot), Some(base)) => Ok(Some(Stored {
            base,
            snapshot,
            archived: false,
        })),
        (Err(e), None) if e.is_not_found() => Ok(None),
        (Ok(_), None) => Err("loaded a missing snapshot".into()),
        (Err(e), raw) => Err(format!(
            "load failed: {e} ({} bytes on disk)",
            raw.map_or(0, |r| r.len())
        )),
    }
}

#[test]
fn real_power_cut_on_a_loop_mounted_ext4_image() {
    let Some(mut lab) = Ext4Lab::new() else {
        return;
    };
    // The store, cut before each call of an operation and after it returned: a save
    // replacing revision 1 (read from the files by a new store instance), the first append
    // (the journal created) and an append to a journal with a record; the long run adds
    // the first save, a third save and a delete of a session with a journal.
    let mut operations = vec![
        (1, 0, Action::Save),
        (1, 0, Action::Append(300)),
        (2, 1, Action::Append(300)),
    ];
    if long_run() {
        operations.extend([
            (0, 0, Action::Save),
            (2, 0, Action::Save),
            (2, 1, Action::Delete),
        ]);
    }
    let mut store_cuts = 0;
    let mut acknowledged = 0;
    let mut seen = Vec::new();
    for (setup_revisions, setup_appends, action) in operations {
        for cut_after in 0.. {
            let trial = Trial {
                writer: Writer::Store,
                setup_revisions,
                setup_appends,
                action,
                cut_after,
            };
            let Some(outcome) = ext4_trial(&mut lab, &trial) else {
                return;
            };
            store_cuts += 1;
            acknowledged += usize::from(outcome.acknowledged);
            seen.push(format!(
                "{action:?} over revision {setup_revisions} ({setup_appends} appended) cut after {} calls{}: {}",
                outcome.calls_before_cut,
                if outcome.acknowledged {
                    " (acknowledged)"
                } else {
                    ""
                },
                outcome.recovered
            ));
            assert!(
                outcome.violation.is_none(),
                "{trial:?} (cut after {} calls): {:?}",
                outcome.calls_before_cut,
                outcome.violation
            );
            if !outcome.cut_during {
                // The operation returned before the cut: every call has been cut before.
                break;
            }
        }
    }
    // The controls, cut right after they returned Ok, must lose or break the save.
    let mut caught = Vec::new();
    for (name, replace, expected) in [
        (
            "without the file fsync",
            replace_without_file_fsync as ReplaceFn,
            Kind::Unrecoverable,
        ),
        (
            "without the directory fsync",
            replace_without_dir_fsync as ReplaceFn,
            Kind::AcknowledgedLost,
        ),
    ] {
        let trial = Trial {
            writer: Writer::Replace(replace),
            setup_revisions: 1,
            setup_appends: 0,
            action: Action::Save,
            cut_after: usize::MAX,
        };
        let Some(outcome) = ext4_trial(&mut lab, &trial) else {
            return;
        };
        assert!(outcome.acknowledged, "{name}");
        let Some((kind, why)) = outcome.violation else {
            panic!("the real cut did not catch the writer {name}");
        };
        assert_eq!(kind, expected, "{name}: {why}");
        caught.push(format!("{name}: {why}"));
    }
    eprintln!(
        "real power cut on ext4 ({EXT4_OPTIONS}, EXT4_IOC_SHUTDOWN NOLOGFLUSH via {:?}): \
         {store_cuts} cuts of the store ({acknowledged} after an acknowledged call), all \
         recovered the old or the new snapshot [{}]; both controls caught: {}",
        lab.tool,
        seen.join(", "),
        caught.join("; ")
    );
}
