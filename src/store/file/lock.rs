//! The file store's store-wide write lock, held by at most one writer of any process at a
//! time, and waited for up to a bounded time.
//!
//! It is two `flock`s, taken in this order and held together:
//!
//! - **The store directory itself** (an exclusive `flock` on an open handle of the
//!   directory). This is the lock that decides. A directory cannot be deleted while it
//!   holds sessions, and a directory replaced after the store opened it is refused by
//!   every operation anyway, so nothing that happens to a path can split this lock.
//! - **`<dir>/.lock`**, which release 0.1 locked alone, so that a store of this release
//!   and a 0.1 process never write at once. `flock` locks an open file, not a name: if
//!   `.lock` is deleted (someone cleaning a "stale" lock after a crash, a tmp cleaner), a
//!   later process creates a new one, and a store still holding the deleted file would
//!   lock that instead. So after taking it, the writer checks that the path still names
//!   the inode it locked, and if not, reopens the path and locks again. (A 0.1 process
//!   whose `.lock` is deleted while it holds it is beyond help: do not remove the lock
//!   file while stores are open.)
//!
//! A writer waits at most the store's lock timeout for both together, then fails with
//! [`Error::Busy`]: a process that hangs holding the lock (a crashed one never holds it; the
//! lock ends with its process) would otherwise block every writer forever. `flock` has no
//! timeout, so the wait polls a non-blocking attempt with a growing pause; the threads of one
//! store wait for each other on a condition variable, with the same deadline.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::fs::FileSystem;
use crate::error::{Error, Location, Result};

/// How long a writer waits for the lock unless the store is told otherwise.
pub(crate) const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// The first pause between two attempts at a lock another process holds; it doubles up to
/// [`MAX_POLL`]. Saves hold the lock for well under a millisecond to a few milliseconds,
/// so short pauses keep a waiting writer close to the holder's release.
const FIRST_POLL: Duration = Duration::from_micros(50);
/// The longest pause between two attempts.
const MAX_POLL: Duration = Duration::from_millis(5);
/// How many times a writer follows `.lock` to a new file before it gives up.
const MAX_REOPENS: usize = 100;

/// The write lock of one store, shared by its threads.
#[derive(Debug)]
pub(crate) struct StoreLock {
    /// An open handle of the store directory: the lock that decides.
    dir: File,
    dir_path: PathBuf,
    /// `<dir>/.lock`.
    path: PathBuf,
    timeout: Duration,
    /// The open lock file (`None` until it could be opened: a read-only store has none),
    /// and whether a thread of this store holds the lock.
    slot: Mutex<Slot>,
    released: Condvar,
}

#[derive(Debug, Default)]
struct Slot {
    file: Option<File>,
    held: bool,
}

/// The store-wide write lock, held until dropped.
#[derive(Debug)]
pub(crate) struct WriteLock<'a> {
    lock: &'a StoreLock,
    /// The locked `.lock` file; always `Some` until dropped, except on a read-only store.
    file: Option<File>,
}

impl Drop for WriteLock<'_> {
    fn drop(&mut self) {
        let file = self.file.take();
        if let Some(file) = &file {
            // Closing would release it too, but the file stays open for the next writer.
            let _ = file.unlock();
        }
        let _ = self.lock.dir.unlock();
        self.lock.give_back(file);
    }
}

/// What taking the lock found.
enum Acquired<'a> {
    Locked(WriteLock<'a>),
    /// The directory is locked, but `.lock` cannot be created or opened for writing: the
    /// store is read-only.
    ReadOnly(WriteLock<'a>, io::Error),
}

impl StoreLock {
    /// The lock of the store in `dir_path` (open as `dir`), on `dir` itself and on
    /// `<dir>/.lock`, opened now if it can be. A lock file that cannot be opened because
    /// the store is read-only (a read-only mount, a directory without write permission)
    /// is not an error here: reads need no lock, and a writer reports it.
    pub(crate) fn open(
        fs: &dyn FileSystem,
        dir: File,
        dir_path: PathBuf,
        lock_file: &str,
        timeout: Duration,
    ) -> Result<Self> {
        let path = dir_path.join(lock_file);
        let file = match open_lock_file(fs, &path) {
            Ok(file) => Some(file),
            Err(Opened::ReadOnly(_)) => None,
            Err(Opened::Failed(e)) => return Err(e),
        };
        Ok(StoreLock {
            dir,
            dir_path,
            path,
            timeout,
            slot: Mutex::new(Slot { file, held: false }),
            released: Condvar::new(),
        })
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        // Every change to the slot is a single assignment: a panic cannot leave it half
        // updated, so a poisoned mutex is safe to keep using.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the lock, waiting at most the store's lock timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] if another writer held it for the whole timeout; [`Error::Io`] if
    /// the lock file cannot be opened (a read-only store) or inspected.
    pub(crate) fn write(&self, fs: &dyn FileSystem, dir_ok: DirCheck<'_>) -> Result<WriteLock<'_>> {
        match self.acquire(fs, dir_ok, self.timeout)? {
            Acquired::Locked(lock) => Ok(lock),
            Acquired::ReadOnly(lock, e) => {
                drop(lock);
                Err(Error::io("open the lock file", &self.path, e))
            }
        }
    }

    /// Takes the lock for a read that wants to exclude writers. On a read-only store only
    /// the directory is locked (no writer of this release can run without that lock).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write), but for a read-only store.
    pub(crate) fn read(&self, fs: &dyn FileSystem, dir_ok: DirCheck<'_>) -> Result<WriteLock<'_>> {
        match self.acquire(fs, dir_ok, self.timeout)? {
            Acquired::Locked(lock) | Acquired::ReadOnly(lock, _) => Ok(lock),
        }
    }

    /// Takes the lock if it is free at once, for work that can be left to a later time
    /// (cleaning up after a crash): `Ok(None)` if it is held, or the store is read-only.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write), but for a busy lock or a read-only store.
    pub(crate) fn try_write(
        &self,
        fs: &dyn FileSystem,
        dir_ok: DirCheck<'_>,
    ) -> Result<Option<WriteLock<'_>>> {
        match self.acquire(fs, dir_ok, Duration::ZERO) {
            Ok(Acquired::Locked(lock)) => Ok(Some(lock)),
            Ok(Acquired::ReadOnly(..)) | Err(Error::Busy { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn acquire(
        &self,
        fs: &dyn FileSystem,
        dir_ok: DirCheck<'_>,
        timeout: Duration,
    ) -> Result<Acquired<'_>> {
        let started = Instant::now();
        // No deadline at all for a timeout too long to add (`Duration::MAX`: wait for ever).
        let deadline = started.checked_add(timeout);
        // Named after `.lock` whichever of the two is busy: the store's write lock, as a
        // user sees it in the directory.
        let busy = || Error::Busy {
            location: Location::File(self.path.clone()),
            waited: started.elapsed(),
        };
        // First the other threads of this store.
        let mut slot = self.slot();
        while slot.held {
            slot = match deadline {
                None => self
                    .released
                    .wait(slot)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(busy());
                    }
                    self.released
                        .wait_timeout(slot, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        slot.held = true;
        let file = slot.file.take();
        drop(slot);
        // From here the slot is ours: every early return gives it back.
        let mut lock = WriteLock { lock: self, file };
        // Then the other processes: first the directory. A file system that cannot lock a
        // directory opened for reading (the Linux NFS client emulates `flock` with POSIX
        // locks, which need a file open for writing) has only the lock file below.
        match poll(deadline, || self.dir.try_lock()) {
            Ok(()) => {}
            Err(Polled::TimedOut) => return Err(busy()),
            Err(Polled::Failed(e)) if cannot_lock_directories(&e) => {}
            Err(Polled::Failed(e)) => {
                return Err(Error::io("lock the store directory", &self.dir_path, e))
            }
        }
        // Then the lock file of release 0.1, on the file the path names. The name can move
        // to another file only by a deletion and re-creation, each of which this loop
        // follows; should it keep moving, the store stops trying rather than spin.
        for _ in 0..MAX_REOPENS {
            let file = if let Some(file) = lock.file.take() {
                file
            } else {
                // Opened by path: first make sure the path still leads into the store
                // directory, so a directory swapped for a link gets no lock file planted
                // through it.
                dir_ok()?;
                match open_lock_file(fs, &self.path) {
                    Ok(file) => file,
                    Err(Opened::ReadOnly(e)) => return Ok(Acquired::ReadOnly(lock, e)),
                    Err(Opened::Failed(e)) => return Err(e),
                }
            };
            match poll(deadline, || file.try_lock()) {
                Ok(()) => {}
                Err(Polled::TimedOut) => {
                    lock.file = Some(file);
                    return Err(busy());
                }
                Err(Polled::Failed(e)) => {
                    lock.file = Some(file);
                    return Err(Error::io("lock", &self.path, e));
                }
            }
            match self.names(fs, &file) {
                Ok(true) => {
                    lock.file = Some(file);
                    return Ok(Acquired::Locked(lock));
                }
                // A stale inode: whoever locks the file the path names now is the
                // writer. Let go of this one and lock that one.
                Ok(false) => {
                    let _ = file.unlock();
                }
                Err(e) => {
                    let _ = file.unlock();
                    lock.file = Some(file);
                    return Err(e);
                }
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(busy());
            }
        }
        Err(Error::Insecure {
            path: self.path.clone(),
            reason: "the lock file was replaced again and again while the store tried to lock it; look for a program deleting or recreating it",
        })
    }

    /// Marks the lock free for this store's other threads, keeping `file` open if given.
    fn give_back(&self, file: Option<File>) {
        let mut slot = self.slot();
        slot.file = file;
        slot.held = false;
        self.released.notify_one();
    }

    /// Whether the lock path still names the open `file` (the same device and inode).
    ///
    /// # Errors
    ///
    /// [`Error::Insecure`] if what is open, or what the path names, is not a regular file
    /// (a FIFO, a device, a directory planted as `.lock`): no writer could ever lock it
    /// usefully.
    fn names(&self, fs: &dyn FileSystem, file: &File) -> Result<bool> {
        let not_a_file = || {
            Error::Insecure {
            path: self.path.clone(),
            reason: "the lock file is not a regular file (a FIFO, a device or a directory); remove it, and the next writer creates it again",
        }
        };
        let locked = file
            .metadata()
            .map_err(|e| Error::io("inspect the lock file", &self.path, e))?;
        if !locked.is_file() {
            return Err(not_a_file());
        }
        match fs.symlink_metadata(&self.path) {
            Ok(named) if !named.is_file() => Err(not_a_file()),
            Ok(named) => Ok((named.dev(), named.ino()) == (locked.dev(), locked.ino())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("inspect the lock file", &self.path, e)),
        }
    }
}

/// Checks that the store directory's path still names the directory the store opened.
pub(crate) type DirCheck<'a> = &'a dyn Fn() -> Result<()>;

enum Polled {
    TimedOut,
    Failed(io::Error),
}

/// Calls `attempt` (a non-blocking `flock`) until it succeeds or `deadline` passes (never,
/// without one), pausing between attempts.
fn poll(
    deadline: Option<Instant>,
    attempt: impl Fn() -> std::result::Result<(), std::fs::TryLockError>,
) -> std::result::Result<(), Polled> {
    let mut pause = FIRST_POLL;
    loop {
        match attempt() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(Polled::Failed(e)),
        }
        let sleep = match deadline {
            None => pause,
            Some(deadline) => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(Polled::TimedOut);
                }
                pause.min(deadline - now)
            }
        };
        std::thread::sleep(sleep);
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// Whether `e`, from locking the store directory, says the file system cannot lock a
/// directory at all (rather than that something went wrong).
fn cannot_lock_directories(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::ENOLCK | libc::EOPNOTSUPP | libc::EINVAL)
    )
}

enum Opened {
    ReadOnly(io::Error),
    Failed(Error),
}

/// Opens (creating if needed) the lock file, not following a link.
fn open_lock_file(fs: &dyn FileSystem, path: &Path) -> std::result::Result<File, Opened> {
    fs.open_lock(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => Opened::Failed(Error::Insecure {
            path: path.to_path_buf(),
            reason: "the lock file is a symbolic link; remove it",
        }),
        Some(libc::EROFS | libc::EACCES | libc::EPERM) => Opened::ReadOnly(e),
        _ => Opened::Failed(Error::io("open the lock file", path, e)),
    })
}

#[cfg(test)]
#[path = "lock_tests.rs"]
mod tests;
