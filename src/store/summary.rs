//! The per-session summary file, `<id>.summary`: what a listing shows, kept beside the
//! session by every save so `list` never reads transcripts.
//!
//! It is a cache, not a source of truth: it is written without fsync, and it records the
//! identity (inode, size, modification time) of the base snapshot and journal it describes.
//! A listing uses it only if both still match and its checksum holds; otherwise it reads
//! the session itself. A crash between a save and its summary update therefore costs
//! slower listings until the next save, not a wrong one (with `Durability::Sync`; with
//! `Buffered`, a power cut can keep a file's stamps while losing its last writes).

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::journal;
use super::{Revision, SessionSummary};
use crate::id::SessionId;
use crate::json::ObjectOnly;
use crate::snapshot::Lineage;
use crate::snapshot::SessionSnapshot;
use crate::usage::Cost;

/// The summary format version this release writes and reads. Version 2 added `lineage`;
/// a summary of another version is ignored like a stale one (and rewritten by the next
/// listing or save).
const SUMMARY_VERSION: u64 = 2;

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

    pub(crate) fn size(self) -> u64 {
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
    base: Stamp,
    journal: Option<Stamp>,
}

/// The framed summary of `snapshot`, stored at `revision` as `base` plus `journal`.
pub(crate) fn encode(
    snapshot: &SessionSnapshot,
    revision: Revision,
    base: Stamp,
    journal: Option<Stamp>,
) -> Vec<u8> {
    // What every listing shows of a snapshot, so the file store's summaries say the same
    // as the other stores' (titles and model names cut alike).
    let listed = SessionSummary::of(snapshot);
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
        base,
        journal,
    };
    // Only plain strings and numbers: encoding cannot fail.
    let payload = serde_json::to_vec(&encoded).unwrap_or_default();
    journal::frame(&payload)
}

/// The summary in `bytes` if it is intact, names session `id`, and describes exactly the
/// files whose metadata is given; `None` otherwise (the caller reads the session instead).
pub(crate) fn decode(
    bytes: &[u8],
    id: &SessionId,
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
    })
}
