//! The per-session summary file, `<id>.summary`: what a listing shows, kept beside the
//! session by every save so `list` never reads transcripts.
//!
//! It is a cache, not a source of truth: it is written without fsync, and it records the
//! identity (inode, size, modification time) of the base snapshot and journal it describes.
//! A listing uses it only if both still match and its checksum holds; otherwise it reads
//! the session itself. A crash between a save and its summary update therefore costs
//! slower listings until the next save, not a wrong one (with `Durability::Sync`; with
//! `Buffered`, a power cut can keep a file's stamps while losing its last writes).
//!
//! A listing goes by file names (an archived session is skipped by its marker's name) and
//! reads each summary that describes the current files; the summaries it decoded are kept
//! in memory with the stamps of the files they came from, so listing again costs a few
//! `lstat`s per session.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::MutexGuard;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::journal;
use super::private_dir::read_bytes;
use super::{
    FileSessionStore, ARCHIVED_SUFFIX, JOURNAL_SUFFIX, KNOWN_SESSIONS, SNAPSHOT_SUFFIX,
    SUMMARY_SUFFIX,
};
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::json::ObjectOnly;
use crate::snapshot::{HistoryStats, Lineage, SessionSnapshot};
use crate::store::{IndexedMetadata, ListScope, SessionList, SessionSummary};
use crate::usage::Cost;

/// The summary format version this release writes and reads. Version 2 added `lineage`,
/// version 3 `history`, version 4 `indexed` and `metadata`; a summary of another version
/// is ignored like a stale one (and rewritten by the next listing or save).
const SUMMARY_VERSION: u64 = 4;

/// The largest summary file read; summaries are a few hundred bytes.
pub(crate) const MAX_SUMMARY_BYTES: u64 = 64 * 1024;

/// Which version of a file a summary describes: any change to the file (data, size,
/// mode, name) changes its modification or status-change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
    ctime: i64,
    ctime_nsec: i64,
}

impl Stamp {
    pub(crate) fn of(meta: &Metadata) -> Self {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
            ctime: meta.ctime(),
            ctime_nsec: meta.ctime_nsec(),
        }
    }

    /// The file's size when it was stamped.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Encoded {
    summary: u64,
    id: SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    message_count: usize,
    model: String,
    cost: Cost,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lineage: Option<Lineage>,
    history: EncodedStats,
    /// The metadata keys the summary was made for (the store's indexed keys then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    indexed: Vec<String>,
    /// Their values, those the session has (and small enough).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    metadata: BTreeMap<String, Value>,
    base: Stamp,
    journal: Option<Stamp>,
}

/// [`HistoryStats`] as a summary (and a view checkpoint) holds them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EncodedStats {
    oldest_revision: Revision,
    rewinds: u64,
    compactions: u64,
    restores: u64,
}

impl From<HistoryStats> for EncodedStats {
    fn from(stats: HistoryStats) -> Self {
        EncodedStats {
            oldest_revision: stats.oldest_revision,
            rewinds: stats.rewinds,
            compactions: stats.compactions,
            restores: stats.restores,
        }
    }
}

impl From<EncodedStats> for HistoryStats {
    fn from(encoded: EncodedStats) -> Self {
        HistoryStats {
            oldest_revision: encoded.oldest_revision,
            rewinds: encoded.rewinds,
            compactions: encoded.compactions,
            restores: encoded.restores,
        }
    }
}

/// The framed summary of `snapshot`, stored at `revision` as `base` plus `journal`, whose
/// log holds `stats`, carrying the values of the `indexed` metadata keys.
pub(crate) fn encode(
    snapshot: &SessionSnapshot,
    revision: Revision,
    stats: HistoryStats,
    indexed: &IndexedMetadata,
    files: (Stamp, Option<Stamp>),
) -> Vec<u8> {
    let (base, journal) = files;
    // What every listing shows of a snapshot, so the file store's summaries say the same
    // as the other stores' (titles and model names cut alike).
    let listed = indexed.summary_of(snapshot);
    let encoded = Encoded {
        summary: SUMMARY_VERSION,
        id: listed.id,
        revision,
        created_at: listed.created_at,
        updated_at: listed.updated_at,
        title: listed.title,
        message_count: listed.message_count,
        model: listed.model,
        cost: listed.cost,
        lineage: listed.lineage,
        history: stats.into(),
        indexed: indexed.keys().to_vec(),
        metadata: listed.metadata,
        base,
        journal,
    };
    // Only plain strings and numbers: encoding cannot fail.
    let payload = serde_json::to_vec(&encoded).unwrap_or_default();
    journal::frame(&payload)
}

/// The summary in `bytes` if it is intact, names session `id`, was made for the
/// `indexed` keys, and describes exactly the files whose metadata is given; `None`
/// otherwise (the caller reads the session instead).
pub(crate) fn decode(
    bytes: &[u8],
    id: &SessionId,
    indexed: &IndexedMetadata,
    base: &Metadata,
    journal: Option<&Metadata>,
) -> Option<SessionSummary> {
    let (payload, len) = journal::intact_frame(bytes)?;
    if len != bytes.len() {
        return None;
    }
    let ObjectOnly(encoded): ObjectOnly<Encoded> = serde_json::from_slice(payload).ok()?;
    let current = (Stamp::of(base), journal.map(Stamp::of));
    if encoded.summary != SUMMARY_VERSION
        || encoded.id != *id
        || encoded.indexed != indexed.keys()
        || (encoded.base, encoded.journal) != current
    {
        return None;
    }
    Some(SessionSummary {
        id: encoded.id,
        revision: encoded.revision,
        created_at: encoded.created_at,
        updated_at: encoded.updated_at,
        title: encoded.title,
        message_count: encoded.message_count,
        model: encoded.model,
        cost: encoded.cost,
        lineage: encoded.lineage,
        archived: false,
        history: encoded.history.into(),
        metadata: encoded.metadata,
    })
}

impl FileSessionStore {
    /// Updates the listing summary of `snapshot`, now stored at `revision` as `base` and
    /// `journal`. Best effort and never fsynced: a summary that does not match the files
    /// is ignored by `list`, which then reads the session.
    pub(super) fn write_summary(
        &self,
        snapshot: &SessionSnapshot,
        revision: Revision,
        stats: HistoryStats,
        base: Stamp,
        journal: Option<Stamp>,
    ) {
        let path = self.summary_path(snapshot.id());
        let bytes = encode(snapshot, revision, stats, &self.indexed, (base, journal));
        self.overwrite_cache(&path, &bytes);
    }

    /// Writes `bytes` over the cache file at `path` (the summary, a view checkpoint) in
    /// place, creating it (0600) if there is none. Best effort and never fsynced: a cache
    /// names the files it describes, so one left half written or stale is not used.
    pub(super) fn overwrite_cache(&self, path: &Path, bytes: &[u8]) {
        let file = match self.open_checked(path, true) {
            Ok(Some((file, _))) => file,
            Ok(None) => match self.fs.create_private(path) {
                Ok(file) => file,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let _ = self
            .fs
            .write_all_at(&file, bytes, 0)
            .and_then(|()| self.fs.set_len(&file, bytes.len() as u64));
    }

    /// The summary of `id` for a listing: from its summary file if that describes the
    /// current files, otherwise by reading the session (and writing its summary again).
    /// `Ok(None)` if it was deleted meanwhile.
    pub(super) fn summarize(
        &self,
        id: &SessionId,
        names: &HashSet<OsString>,
    ) -> Result<Option<SessionSummary>> {
        if names.contains(&OsString::from(format!("{id}{SUMMARY_SUFFIX}"))) {
            if let Some(found) = self.read_summary(id, names) {
                return Ok(Some(found));
            }
        }
        let Some((snapshot, known)) = self.read_state(id, false)? else {
            return Ok(None);
        };
        if let Some(known) = known {
            // Repaired for the next listing (best effort, no lock needed: a summary names
            // the files it describes, so one that a concurrent save outdates is ignored).
            let stats = snapshot.history_stats();
            self.write_summary(
                &snapshot,
                snapshot.revision(),
                stats,
                known.base,
                known.journal,
            );
            self.remember_unlocked_read(id, known);
        }
        Ok(Some(self.indexed.summary_of(&snapshot)))
    }

    /// The summary file of `id`, if it describes the session's current files and those
    /// would pass a load's checks on links, owner and size.
    pub(super) fn read_summary(
        &self,
        id: &SessionId,
        names: &HashSet<OsString>,
    ) -> Option<SessionSummary> {
        let readable = |meta: Metadata| {
            (self.is_plain(&meta) && meta.len() <= self.max_snapshot_bytes).then_some(meta)
        };
        let base = readable(self.fs.symlink_metadata(&self.path_of(id)).ok()?)?;
        let journal = if names.contains(&OsString::from(format!("{id}{JOURNAL_SUFFIX}"))) {
            Some(readable(
                self.fs.symlink_metadata(&self.journal_path(id)).ok()?,
            )?)
        } else {
            None
        };
        let summary_path = self.summary_path(id);
        let files = (
            Stamp::of(&base),
            journal.as_ref().map(Stamp::of),
            self.fs
                .symlink_metadata(&summary_path)
                .ok()
                .filter(|meta| self.is_plain(meta))
                .map(|meta| Stamp::of(&meta))?,
        );
        // A summary decoded before from these very files is not read again: a listing
        // then costs a few `lstat`s per session.
        if let Some((seen, summary)) = self.listed_sessions().get(id) {
            if *seen == files {
                return Some(summary.clone());
            }
        }
        let (mut file, meta) = self.open_checked(&summary_path, false).ok()??;
        let bytes = read_bytes(&mut file, &meta, &summary_path, MAX_SUMMARY_BYTES, false).ok()?;
        let summary = decode(&bytes, id, &self.indexed, &base, journal.as_ref())?;
        // Remembered only if what was read is the version stamped above.
        let read = file.metadata().ok().map(|m| Stamp::of(&m));
        if read == Some(files.2) {
            let mut listed = self.listed_sessions();
            if listed.len() >= KNOWN_SESSIONS * 64 && !listed.contains_key(id) {
                listed.clear();
            }
            listed.insert(id.clone(), (files, summary.clone()));
        }
        Some(summary)
    }

    pub(super) fn listed_sessions(
        &self,
    ) -> MutexGuard<'_, HashMap<SessionId, (ListedFiles, SessionSummary)>> {
        self.listed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The stamps of a session's base, journal and summary files when its summary was read.
pub(super) type ListedFiles = (Stamp, Option<Stamp>, Stamp);

impl FileSessionStore {
    /// The sessions in `scope`, from their summaries where those are current (see
    /// [`SessionStore::list_scoped`]).
    pub(super) fn list_in(&self, scope: ListScope) -> Result<SessionList> {
        let mut sessions = Vec::new();
        let mut unreadable = Vec::new();
        let names: HashSet<OsString> = self.names()?.into_iter().collect();
        for name in &names {
            let Some(name) = name.to_str() else {
                let lossy = name.to_string_lossy();
                if lossy.ends_with(SNAPSHOT_SUFFIX) && !lossy.starts_with('.') {
                    unreadable.push(Error::ForeignFile {
                        path: self.root.join(name),
                        reason: "its name is not valid UTF-8",
                    });
                }
                continue;
            };
            let Some(stem) = name.strip_suffix(SNAPSHOT_SUFFIX) else {
                continue;
            };
            if stem.starts_with('.') {
                continue;
            }
            let Ok(id) = SessionId::parse(stem) else {
                unreadable.push(Error::ForeignFile {
                    path: self.root.join(name),
                    reason: "its name is not <session id>.json (ids are lowercase a-z, 0-9, '-' and '_')",
                });
                continue;
            };
            let archived = names.contains(&OsString::from(format!("{id}{ARCHIVED_SUFFIX}")));
            if !scope.includes(archived) {
                continue;
            }
            match self.summarize(&id, &names) {
                Ok(Some(mut summary)) => {
                    summary.archived = archived;
                    sessions.push(summary);
                }
                // Deleted between readdir and open: not an error, just gone.
                Ok(None) => {}
                Err(e) => unreadable.push(e),
            }
        }
        Ok(SessionList::new(sessions, unreadable))
    }
}
