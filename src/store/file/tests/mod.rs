//! Test machinery for the file store: a fault-injecting file system that fails any one
//! system call ([`fault_injection`]), and a crash model that replays every prefix of a
//! store's writes as a power loss could leave it ([`crash_model`]).

mod crash_model;
mod fault_injection;

use std::path::Path;
use std::sync::Arc;

use super::fs::FileSystem;
use super::FileSessionStore;
use crate::error::Result;

impl FileSessionStore {
    /// Opens with default settings but the given size limit, through `fs`: the seam through
    /// which both suites put their file system under the store.
    pub(super) fn open_with(
        dir: &Path,
        max_snapshot_bytes: u64,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Self> {
        let mut settings = FileSessionStore::builder();
        settings.max_snapshot_bytes(max_snapshot_bytes);
        FileSessionStore::open_configured(dir, &settings, fs)
    }
}
