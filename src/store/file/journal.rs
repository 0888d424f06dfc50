//! The journal beside a base snapshot: an append-only file of framed, checksummed log
//! entries, each one revision after the base (`docs/FORMAT.md`, "Journal").
//!
//! ```text
//! frame   := "@" LEN " " CRC "\n" PAYLOAD "\n"
//! LEN     := 8 lowercase hex digits: the payload's length in bytes
//! CRC     := 8 lowercase hex digits: the CRC-32 (IEEE) of the payload
//! PAYLOAD := one compact JSON object
//! journal := header-frame entry-frame*     (journal format 2: entry = head "\n" body)
//!          | header-frame record-frame*    (journal format 1, read only)
//! ```
//!
//! Compact JSON has no raw newlines, so a journal reads as text: every frame is one `@...`
//! line followed by one JSON line.
//!
//! A journal is only appended to, so damage from a crash can only be at its end: a frame
//! cut short, or one whose bytes never all reached the disk. Such a *torn tail* is ignored when reading and cut off before the next
//! append. Damage followed by an intact frame cannot come from a crash; it is reported as
//! corruption instead of silently dropping the entries after it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::json::{strict, ObjectOnly};
pub(crate) use crate::snapshot::intact_frame;
use crate::snapshot::{
    counts_after, decode_any_head, decode_body, decode_head, decode_record, entry_of_record,
    parse_frame_header, push_frame, split_entry, Counts, EntryKind, LogEntry, LogSource,
    SessionSnapshot, FRAME_HEADER_LEN,
};

/// The journal format version this release writes: format 2, log entries in a head and a
/// body frame. Format 1 (records of changes, written by earlier releases) is still read.
pub(crate) const JOURNAL_VERSION: u32 = 2;
/// The oldest journal format this release reads.
pub(crate) const OLDEST_JOURNAL_VERSION: u32 = 1;

/// The first frame of a journal: which base snapshot its entries follow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JournalHeader {
    /// The journal format: [`JOURNAL_VERSION`], or 1 in journals of earlier releases.
    pub(crate) journal: u64,
    pub(crate) id: SessionId,
    /// The revision of the base snapshot the entries follow.
    pub(crate) base_revision: Revision,
    /// The base's creation time: with the revision, it tells a journal left by a deleted
    /// session from one of a new session under the same id.
    pub(crate) base_created_at: DateTime<Utc>,
    /// The base's lengths, so a save can check an entry's starting point without reading
    /// the base.
    #[serde(deserialize_with = "strict::object")]
    pub(crate) base: Counts,
}

/// Frames `payload`.
pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + FRAME_HEADER_LEN + 1);
    out.extend_from_slice(
        format!("@{:08x} {:08x}\n", payload.len(), crc32fast::hash(payload)).as_bytes(),
    );
    out.extend_from_slice(payload);
    out.push(b'\n');
    out
}

/// The framed header of a new journal.
pub(crate) fn encode_header(header: &JournalHeader) -> Result<Vec<u8>> {
    let payload = serde_json::to_vec(header).map_err(|source| Error::Encode {
        id: header.id.clone(),
        source,
    })?;
    let mut out = Vec::new();
    push_frame(&mut out, &header.id, &payload)?;
    Ok(out)
}

/// The header of a new journal of the current format following the base of session `id`
/// stored at `revision`, created at `created_at`, with `counts`.
pub(crate) fn header_for(
    id: &SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
    counts: Counts,
) -> JournalHeader {
    JournalHeader {
        journal: u64::from(JOURNAL_VERSION),
        id: id.clone(),
        base_revision: revision,
        base_created_at: created_at,
        base: counts,
    }
}

/// The frames of a journal, up to its torn tail.
#[derive(Debug)]
pub(crate) struct Frames<'a> {
    /// Each intact frame's offset and payload, in order.
    pub(crate) frames: Vec<(usize, &'a [u8])>,
    /// Where the intact frames end: everything after is a torn tail.
    pub(crate) valid_end: usize,
}

/// Whether an intact frame starts anywhere after `from`. The
/// checksums it computes are bounded by twice the journal's size; past that it answers
/// yes, so damage it could not rule out is reported rather than dropped.
fn intact_frame_after(bytes: &[u8], from: usize) -> bool {
    let mut budget = bytes.len().saturating_mul(2);
    // Every '@', not only those starting a line: the damage may be the newline itself.
    for p in memchr::memchr_iter(b'@', &bytes[from + 1..]).map(|i| i + from + 1) {
        let Some((len, _)) = parse_frame_header(&bytes[p..]) else {
            continue;
        };
        if p.saturating_add(FRAME_HEADER_LEN).saturating_add(len) >= bytes.len() {
            continue;
        }
        if len > budget {
            return true;
        }
        budget -= len;
        if intact_frame(&bytes[p..]).is_some() {
            return true;
        }
    }
    false
}

/// Splits a journal into its intact frames, stopping at a torn tail.
///
/// # Errors
///
/// Corruption ([`Error::Inconsistent`]) if a damaged frame is followed by an intact one:
/// that is not what a crash leaves.
pub(crate) fn split(bytes: &[u8]) -> Result<Frames<'_>> {
    let mut frames = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if let Some((payload, len)) = intact_frame(&bytes[at..]) {
            frames.push((at, payload));
            at += len;
            continue;
        }
        if intact_frame_after(bytes, at) {
            return Err(Error::inconsistent(format!(
                "the journal frame at byte {at} is damaged (bad frame or checksum) but intact frames follow it; a crash cannot cause that, so the entries after it cannot be trusted"
            )));
        }
        break;
    }
    Ok(Frames {
        frames,
        valid_end: at,
    })
}

fn malformed(source: serde_json::Error) -> Error {
    Error::Malformed {
        location: Location::Bytes,
        source,
    }
}

/// Decodes a journal's header payload.
///
/// # Errors
///
/// [`Error::UnsupportedSchemaVersion`] for a journal format this release does not read,
/// [`Error::Malformed`] otherwise.
pub(crate) fn decode_header(payload: &[u8]) -> Result<JournalHeader> {
    #[derive(Deserialize)]
    struct Probe {
        journal: Option<u64>,
    }
    let supported =
        |v: u64| (u64::from(OLDEST_JOURNAL_VERSION)..=u64::from(JOURNAL_VERSION)).contains(&v);
    match serde_json::from_slice::<ObjectOnly<JournalHeader>>(payload) {
        Ok(ObjectOnly(header)) if supported(header.journal) => Ok(header),
        Ok(ObjectOnly(header)) => Err(unsupported(header.journal)),
        Err(source) => match serde_json::from_slice::<Probe>(payload) {
            Ok(Probe {
                journal: Some(found),
            }) if !supported(found) => Err(unsupported(found)),
            _ => Err(malformed(source)),
        },
    }
}

fn unsupported(found: u64) -> Error {
    Error::UnsupportedSchemaVersion {
        location: Location::Bytes,
        found,
        oldest: OLDEST_JOURNAL_VERSION,
        supported: JOURNAL_VERSION,
    }
}

/// Whether a journal with `header` holds entries for the base of session `id` stored at
/// `revision`, created at `created_at` (rather than for an older base, or for a deleted
/// session of the same id).
pub(super) fn journal_follows(
    header: &JournalHeader,
    id: &SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
) -> bool {
    header.id == *id && header.base_revision == revision && header.base_created_at == created_at
}

/// What a journal holds for a base, read up to its torn tail.
#[derive(Debug)]
pub(crate) struct ReadJournal {
    /// The journal format.
    pub(crate) version: u32,
    /// Where its intact entries end.
    pub(crate) end: usize,
    /// The lengths the header says the base has, to be checked against the base (with a
    /// fork's shared messages); `None` when the journal starts with a checkpoint entry,
    /// which holds the state the log starts from in place of the base.
    pub(crate) base_counts: Option<Counts>,
    /// Whether the log starts from a checkpoint entry rather than the base.
    pub(crate) restarted: bool,
}

/// Whether a journal with `header`, whose first entry is a checkpoint entry at
/// `restart` (if it is one), holds entries for the base of session `id` stored at
/// `revision`, created at `created_at`: its header names that base, or (a retention that
/// wrote the checkpoint entry's state as the new base, and crashed before writing the
/// journal again) its checkpoint entry is at that revision of that session.
pub(super) fn journal_follows_base(
    header: &JournalHeader,
    restart: Option<Revision>,
    id: &SessionId,
    revision: Revision,
    created_at: DateTime<Utc>,
) -> bool {
    journal_follows(header, id, revision, created_at)
        || (header.id == *id && header.base_created_at == created_at && restart == Some(revision))
}

/// The first entry of a format 2 journal, if it is a checkpoint entry: its head and body
/// bytes.
fn checkpoint_entry<'a>(
    header: &JournalHeader,
    entries: &[(usize, &'a [u8])],
) -> Result<Option<(crate::snapshot::EntryHead, &'a [u8])>> {
    if header.journal == 1 {
        return Ok(None);
    }
    let Some((_, payload)) = entries.first() else {
        return Ok(None);
    };
    let (head, body) = split_entry(payload)?;
    let head = decode_any_head(head)?;
    Ok((head.kind == EntryKind::Checkpoint).then_some((head, body)))
}

/// The log of a base snapshot (decoded, not validated) and its journal: `journal`'s
/// entries added to `log` when the journal follows the base, and what was read of it;
/// `None` if it holds nothing for this base (empty, torn before its header, or left by an
/// older base, which is ignored). A journal that starts with a checkpoint entry replaces
/// the log's checkpoint with the state it holds (`log` must have no shared prefix
/// attached: the caller attaches one only if the journal did not restart the log, and then
/// checks [`ReadJournal::base_counts`]).
///
/// # Errors
///
/// Corruption if the journal is damaged before its end, names another session, or holds
/// a checkpoint entry that does not start the log; decoding errors of its heads (format
/// 2) or records (format 1, decoded whole).
pub(super) fn read_into<'a>(
    log: &mut LogSource<'a>,
    journal: &'a [u8],
) -> Result<Option<ReadJournal>> {
    let frames = split(journal)?;
    let Some(((_, first), records)) = frames.frames.split_first() else {
        return Ok(None);
    };
    let header = decode_header(first)?;
    let base = &log.checkpoint;
    if header.id != *base.id() {
        return Err(Error::inconsistent(format!(
            "the journal belongs to session {}, not {}",
            header.id,
            base.id()
        )));
    }
    let restart = checkpoint_entry(&header, records)?;
    let (revision, created_at) = (base.revision(), base.created_at());
    if !journal_follows_base(
        &header,
        restart.as_ref().map(|(head, _)| head.revision),
        base.id(),
        revision,
        created_at,
    ) {
        return Ok(None);
    }
    if header.journal == 1 {
        let mut before = header.base;
        for (_, payload) in records {
            let change = decode_record(payload)?;
            let after = counts_after(&change);
            log.push(entry_of_record(change, before));
            before = after;
        }
        return Ok(Some(ReadJournal {
            version: 1,
            end: frames.valid_end,
            base_counts: Some(header.base),
            restarted: false,
        }));
    }
    let mut entries = records;
    let restarted = restart.is_some();
    if let Some((head, body)) = restart {
        if head.revision < revision {
            return Err(Error::inconsistent(format!(
                "the journal starts the log at revision {}, before its base's revision {revision}",
                head.revision
            )));
        }
        let entry = LogEntry {
            head,
            body: decode_body(body)?,
        };
        log.checkpoint = SessionSnapshot::from_checkpoint_entry(&log.checkpoint, entry)?;
        entries = &records[1..];
    }
    for (_, payload) in entries {
        let (head, body) = split_entry(payload)?;
        log.push_bytes(decode_head(head)?, body)?;
    }
    Ok(Some(ReadJournal {
        version: JOURNAL_VERSION,
        end: frames.valid_end,
        base_counts: (!restarted).then_some(header.base),
        restarted,
    }))
}

/// The journal bytes of `entries` after a new header for `base` (the checkpoint of a
/// rewritten journal), whose state has `counts` (its shared prefix included).
pub(super) fn encode_journal(
    base: &SessionSnapshot,
    counts: Counts,
    entries: &[LogEntry],
) -> Result<Vec<u8>> {
    let id = base.id();
    let mut bytes = encode_header(&header_for(id, base.revision(), base.created_at(), counts))?;
    for entry in entries {
        bytes.extend(entry.to_bytes(id)?);
    }
    Ok(bytes)
}

/// The journal bytes of a log that starts from `checkpoint` (a checkpoint entry) but
/// follows the base stored at `base_revision`: a header for that base (its lengths are
/// not checked when a checkpoint entry follows, so the checkpoint's are written), the
/// checkpoint entry, then `entries`.
pub(super) fn encode_restarted_journal(
    base_revision: Revision,
    checkpoint: &SessionSnapshot,
    entries: &[LogEntry],
) -> Result<Vec<u8>> {
    let id = checkpoint.id();
    let mut bytes = encode_header(&header_for(
        id,
        base_revision,
        checkpoint.created_at(),
        checkpoint.counts(),
    ))?;
    bytes.extend(LogEntry::checkpoint_of(checkpoint).to_bytes(id)?);
    for entry in entries {
        bytes.extend(entry.to_bytes(id)?);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(payloads: &[&[u8]]) -> Vec<u8> {
        payloads.iter().flat_map(|p| frame(p)).collect()
    }

    #[test]
    fn frames_round_trip_and_read_as_text() {
        let bytes = journal(&[b"{\"a\":1}", b"{}"]);
        assert!(bytes.starts_with(b"@00000007 "));
        let frames = split(&bytes).unwrap();
        assert_eq!(frames.valid_end, bytes.len());
        let payloads: Vec<&[u8]> = frames.frames.iter().map(|(_, p)| *p).collect();
        assert_eq!(payloads, [&b"{\"a\":1}"[..], b"{}"]);
    }

    #[test]
    fn a_cut_at_every_byte_keeps_exactly_the_whole_frames_before_it() {
        let bytes = journal(&[b"{\"a\":1}", b"{\"bb\":22}", b"{}"]);
        let ends: Vec<usize> = {
            let frames = split(&bytes).unwrap();
            frames
                .frames
                .iter()
                .map(|(at, p)| at + p.len() + FRAME_HEADER_LEN + 1)
                .collect()
        };
        for cut in 0..=bytes.len() {
            let frames = split(&bytes[..cut]).unwrap();
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(frames.frames.len(), whole, "cut at {cut}");
            assert_eq!(
                frames.valid_end,
                if whole == 0 { 0 } else { ends[whole - 1] }
            );
        }
    }

    #[test]
    fn a_zero_filled_or_garbled_tail_is_torn_but_damage_before_an_intact_frame_is_not() {
        let mut bytes = journal(&[b"{\"a\":1}"]);
        let good = bytes.len();
        bytes.extend_from_slice(&[0; 40]);
        assert_eq!(split(&bytes).unwrap().valid_end, good);

        let mut flipped = journal(&[b"{\"a\":1}", b"{\"b\":2}"]);
        flipped[FRAME_HEADER_LEN + 2] ^= 0x01;
        let err = split(&flipped).unwrap_err();
        assert!(err.to_string().contains("intact frames follow"), "{err}");

        let mut last_flipped = journal(&[b"{\"a\":1}", b"{\"b\":2}"]);
        let at = last_flipped.len() - 3;
        last_flipped[at] ^= 0x01;
        assert_eq!(split(&last_flipped).unwrap().frames.len(), 1);
    }

    #[test]
    fn headers_of_other_versions_say_so() {
        let err = decode_header(br#"{"journal":3,"id":"s"}"#).unwrap_err();
        assert!(matches!(
            err,
            Error::UnsupportedSchemaVersion { found: 3, .. }
        ));
        assert!(matches!(
            decode_header(b"{}").unwrap_err(),
            Error::Malformed { .. }
        ));
    }
}
