//! The view checkpoint: `<id>.view`, the state a compaction left, so that loading a
//! compacted session reads neither the base nor the journal's entries before it (the
//! history the compaction replaced), only this file and the journal's entries after it.
//!
//! It is a cache, like the listing summary: written without fsync after the compaction's
//! entry (made durable first with `Durability::Sync`), never needed to load, and trusted
//! only while it describes the stored files: the base it was made beside (its `lstat`
//! stamp), the journal's header frame and the compaction's frame at the offset it names.
//! Anything else (missing, damaged, stale, unreadable) and the load reads the whole log
//! instead, which is what decides. So a crash or a power loss at any point costs a slower
//! load, never a different state.

use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, PermissionsExt};

use serde::{Deserialize, Serialize};

use super::journal::{self, JOURNAL_VERSION};
use super::private_dir::is_private;
use super::state::Known;
use super::summary::{EncodedStats, Stamp};
use super::FileSessionStore;
use crate::id::{Revision, SessionId};
use crate::json::ObjectOnly;
use crate::snapshot::{
    decode_head, intact_frame, parse_frame_header, push_frame, split_entry, EntryHead,
    HistoryStats, LogSource, SessionSnapshot, FRAME_HEADER_LEN,
};

/// The view file's format version.
const VIEW_VERSION: u64 = 1;

/// The first frame of a view file: what the state in the second frame is, and the files
/// it was made beside.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewHeader {
    /// [`VIEW_VERSION`].
    view: u64,
    id: SessionId,
    /// The revision of the state: the compaction's.
    revision: Revision,
    /// The base's `lstat` stamp when the view was written.
    base: Stamp,
    /// The base's revision (what the journal's entries follow).
    base_revision: Revision,
    /// The journal's first frame header line (`@LLLLLLLL CCCCCCCC`): its header's length
    /// and checksum.
    journal_header: String,
    /// Where the compaction's frame starts in the journal, and its header line.
    entry_at: u64,
    entry_frame: String,
    /// What the log holds beyond the state at `revision` (as the summary's `history`).
    history: EncodedStats,
}

/// The frame header line at the start of `bytes` (without its newline), if it is one.
fn header_line(bytes: &[u8]) -> Option<String> {
    let line = bytes.get(..FRAME_HEADER_LEN)?;
    parse_frame_header(line)?;
    String::from_utf8(line[..FRAME_HEADER_LEN - 1].to_vec()).ok()
}

/// Where a compaction's entry was appended, for [`FileSessionStore::write_view`].
pub(super) struct Appended<'a> {
    /// The stored state the entry was appended to.
    pub(super) stored: &'a Known,
    /// The journal, open.
    pub(super) journal: &'a File,
    /// The bytes written at `offset`: a new journal's header frame (if it was started),
    /// then the entry's frame.
    pub(super) offset: u64,
    pub(super) written: &'a [u8],
    pub(super) header_len: usize,
    /// The state the entry made, at `revision`.
    pub(super) snapshot: &'a SessionSnapshot,
    pub(super) revision: Revision,
    pub(super) stats: HistoryStats,
}

impl FileSessionStore {
    /// Writes the view checkpoint of a session whose compaction was just appended, if the
    /// view is at most half of what a load reads without it. Otherwise a view of an
    /// earlier compaction stays: it still names frames that are there, and the journal's
    /// entries after it (this compaction's among them) are folded onto it. Best effort: a
    /// view file that is not written is a slower load, never a different one.
    ///
    /// A fork whose checkpoint shares its parent's messages gets none: its load reads the
    /// parent's state (and checks that the parent still keeps it), and what it knows of
    /// the sharing (how deep the chain of forks is) comes from its base, which a view
    /// does not hold.
    pub(super) fn write_view(&self, appended: &Appended<'_>) {
        if appended.snapshot.share().is_some() {
            return;
        }
        let path = self.view_path(appended.snapshot.id());
        let written = encode_view(appended).and_then(|bytes| {
            let log_bytes = appended
                .stored
                .base
                .size()
                .saturating_add(appended.offset + appended.written.len() as u64);
            ((bytes.len() as u64).saturating_mul(2) <= log_bytes).then_some(bytes)
        });
        if let Some(bytes) = written {
            self.overwrite_cache(&path, &bytes);
        }
    }

    /// The session `id` from its view checkpoint and the journal's entries after it, and
    /// what a save needs to know of it; `None` if there is no view file or it does not
    /// describe the stored files (the caller then reads the whole log).
    pub(super) fn read_from_view(
        &self,
        id: &SessionId,
    ) -> Option<(SessionSnapshot, Option<Known>)> {
        let limit = self.max_snapshot_bytes;
        let (bytes, _) = self
            .read_checked(&self.view_path(id), limit, false)
            .ok()??;
        let (header, state_bytes) = decode_view(&bytes)?;
        if header.id != *id {
            return None;
        }
        let base_meta = self.fs.symlink_metadata(&self.path_of(id)).ok()?;
        if Stamp::of(&base_meta) != header.base || !base_meta.file_type().is_file() {
            return None;
        }
        let journal_path = self.journal_path(id);
        let (tail, journal_meta) = self
            .read_checked_with(&journal_path, limit, |file, meta| {
                Ok(read_after_view(file, meta, &header))
            })
            .ok()??;
        let (tail, grown) = tail?;
        let checkpoint = SessionSnapshot::decode_unvalidated(state_bytes).ok()?;
        if checkpoint.id() != id || checkpoint.revision() != header.revision {
            return None;
        }
        let frames = journal::split(&tail.bytes).ok()?;
        // The compaction's own body is not read: the view is the state it made.
        let compaction = (tail.entry, &[][..]);
        let entries = std::iter::once(Ok(compaction))
            .chain(frames.frames.iter().map(|(_, payload)| {
                let (head, body) = split_entry(payload)?;
                Ok((decode_head(head)?, body))
            }))
            .collect::<crate::Result<Vec<_>>>()
            .ok()?;
        // A state other than the compaction's, a restore of a revision before the view, or
        // anything else the state at the view does not account for fails here: the whole
        // log decides then.
        let snapshot =
            LogSource::state_after_view(checkpoint, header.history.into(), entries).ok()?;
        let (counts, stats, revision) = (
            snapshot.counts(),
            snapshot.history_stats(),
            snapshot.revision(),
        );
        let known = (!grown).then(|| Known {
            base: header.base,
            journal: Some(Stamp::of(&journal_meta)),
            base_revision: header.base_revision,
            revision,
            created_at: snapshot.created_at(),
            updated_at: Some(snapshot.updated_at()),
            counts: Some(counts),
            journal_end: Some(tail.start + frames.valid_end as u64),
            base_private: is_private(base_meta.permissions().mode()),
            verified: true,
            dir_synced: false,
            journal_version: Some(JOURNAL_VERSION),
            stats: Some(stats),
        });
        Some((snapshot, known))
    }
}

/// The view file of the state `appended` made: its two frames.
fn encode_view(appended: &Appended<'_>) -> Option<Vec<u8>> {
    let journal_header = if appended.header_len > 0 {
        header_line(appended.written)?
    } else {
        let mut first = [0u8; FRAME_HEADER_LEN];
        appended.journal.read_exact_at(&mut first, 0).ok()?;
        header_line(&first)?
    };
    let entry_frame = header_line(appended.written.get(appended.header_len..)?)?;
    let header = ViewHeader {
        view: VIEW_VERSION,
        id: appended.snapshot.id().clone(),
        revision: appended.revision,
        base: appended.stored.base,
        base_revision: appended.stored.base_revision,
        journal_header,
        entry_at: appended.offset + appended.header_len as u64,
        entry_frame,
        history: appended.stats.into(),
    };
    let id = appended.snapshot.id();
    let mut bytes = Vec::new();
    push_frame(&mut bytes, id, &serde_json::to_vec(&header).ok()?).ok()?;
    let state = appended
        .snapshot
        .to_json_with_revision(appended.revision)
        .ok()?;
    push_frame(&mut bytes, id, &state).ok()?;
    Some(bytes)
}

/// A view file's header and the bytes of its state, if it is whole and of this format.
fn decode_view(bytes: &[u8]) -> Option<(ViewHeader, &[u8])> {
    let frames = journal::split(bytes).ok()?;
    let [(_, header), (_, state)] = frames.frames.as_slice() else {
        return None;
    };
    if frames.valid_end != bytes.len() {
        return None;
    }
    let ObjectOnly(header): ObjectOnly<ViewHeader> = serde_json::from_slice(header).ok()?;
    (header.view == VIEW_VERSION).then_some((header, *state))
}

/// The journal's entries after a view's compaction entry.
struct Tail {
    /// Where they start in the journal.
    start: u64,
    bytes: Vec<u8>,
    /// The compaction's head.
    entry: EntryHead,
}

/// Reads from the open journal what follows the view's compaction entry, once its header
/// frame and that entry are the ones the view names; also whether the journal grew while
/// it was read. `None` if it is not the journal the view was made beside.
fn read_after_view(file: &mut File, meta: &Metadata, view: &ViewHeader) -> Option<(Tail, bool)> {
    let mut first = [0u8; FRAME_HEADER_LEN];
    file.read_exact_at(&mut first, 0).ok()?;
    if header_line(&first)? != view.journal_header {
        return None;
    }
    let mut line = [0u8; FRAME_HEADER_LEN];
    file.read_exact_at(&mut line, view.entry_at).ok()?;
    if header_line(&line)? != view.entry_frame {
        return None;
    }
    let (len, _) = parse_frame_header(&line)?;
    let frame_len = FRAME_HEADER_LEN.checked_add(len)?.checked_add(1)?;
    // Within the file (a damaged header must not make this allocate gigabytes).
    if view.entry_at.checked_add(frame_len as u64)? > meta.len() {
        return None;
    }
    let mut frame = vec![0u8; frame_len];
    file.read_exact_at(&mut frame, view.entry_at).ok()?;
    let (payload, _) = intact_frame(&frame)?;
    let (head, _) = split_entry(payload).ok()?;
    let head = decode_head(head).ok()?;
    if head.revision != view.revision {
        return None;
    }
    let start = view.entry_at.checked_add(frame_len as u64)?;
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.take(meta.len().saturating_sub(start).saturating_add(1))
        .read_to_end(&mut bytes)
        .ok()?;
    crate::telemetry::read((FRAME_HEADER_LEN + frame_len + bytes.len()) as u64);
    let grown = start + bytes.len() as u64 != meta.len();
    Some((
        Tail {
            start,
            bytes,
            entry: head,
        },
        grown,
    ))
}

impl FileSessionStore {
    /// The view checkpoint of session `id`: `<dir>/<id>.view`.
    pub(super) fn view_path(&self, id: &SessionId) -> std::path::PathBuf {
        self.root.join(format!("{id}{}", super::VIEW_SUFFIX))
    }
}
