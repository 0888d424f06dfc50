//! The journal beside a base snapshot: an append-only file of framed, checksummed records,
//! each one change from the previous stored state (`docs/FORMAT.md`, "Journal").
//!
//! ```text
//! frame   := "@" LEN " " CRC "\n" PAYLOAD "\n"
//! LEN     := 8 lowercase hex digits: the payload's length in bytes
//! CRC     := 8 lowercase hex digits: the CRC-32 (IEEE) of the payload
//! PAYLOAD := one compact JSON object (a header first, then records)
//! ```
//!
//! Compact JSON has no raw newlines, so a journal reads as text: every record is one
//! `@...` line followed by one JSON line.
//!
//! A journal is only appended to, so damage from a crash can only be at its end: a frame
//! cut short, or one whose bytes never all reached the disk. Such a *torn tail* is ignored
//! when reading and cut off before the next append. Damage followed by an intact frame
//! cannot come from a crash; it is reported as corruption instead of silently dropping the
//! records after it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::json::{strict, ObjectOnly};
pub(crate) use crate::snapshot::{counts_after, decode_record};
use crate::snapshot::{encode_record_payload, Change, Counts, SessionSnapshot};

/// The journal format version this release writes and reads.
pub(crate) const JOURNAL_VERSION: u32 = 1;

/// `@` + 8 hex + space + 8 hex + newline.
const HEADER_LEN: usize = 19;
/// The frame header and the newline after the payload.
pub(crate) const FRAME_OVERHEAD: usize = HEADER_LEN + 1;

/// The first record of a journal: which base snapshot its records apply to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JournalHeader {
    /// Always [`JOURNAL_VERSION`].
    pub(crate) journal: u64,
    pub(crate) id: SessionId,
    /// The revision of the base snapshot the records follow.
    pub(crate) base_revision: Revision,
    /// The base's creation time: with the revision, it tells a journal left by a deleted
    /// session from one of a new session under the same id.
    pub(crate) base_created_at: DateTime<Utc>,
    /// The base's lengths, so a save can check a record's starting point without reading
    /// the base.
    #[serde(deserialize_with = "strict::object")]
    pub(crate) base: Counts,
}

/// Frames `payload`.
pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + FRAME_OVERHEAD);
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
    Ok(frame(&payload))
}

/// The framed record of `change` to session `id`.
///
/// # Errors
///
/// As [`encode_record_payload`]; an [`Error::InvalidArgument`] if it is larger than a
/// frame can say (4 GiB).
pub(crate) fn encode_record(id: &SessionId, change: &Change) -> Result<Vec<u8>> {
    let payload = encode_record_payload(id, change)?;
    if u32::try_from(payload.len()).is_err() {
        return Err(Error::InvalidArgument {
            reason: format!(
                "a change to session {id} is {} bytes, more than a journal record can hold",
                payload.len()
            ),
        });
    }
    Ok(frame(&payload))
}

/// The frames of a journal, up to its torn tail.
#[derive(Debug)]
pub(crate) struct Frames<'a> {
    /// Each intact frame's offset and payload, in order.
    pub(crate) frames: Vec<(usize, &'a [u8])>,
    /// Where the intact frames end: everything after is a torn tail.
    pub(crate) valid_end: usize,
}

/// Parses the frame header at the start of `bytes`: the payload length and checksum.
fn parse_header(bytes: &[u8]) -> Option<(usize, u32)> {
    let header = bytes.get(..HEADER_LEN)?;
    if header[0] != b'@' || header[9] != b' ' || header[18] != b'\n' {
        return None;
    }
    let hex = |digits: &[u8]| -> Option<u32> {
        if !digits
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let len = hex(&header[1..9])?;
    let crc = hex(&header[10..18])?;
    Some((usize::try_from(len).ok()?, crc))
}

/// The intact frame at the start of `bytes`: its payload and total length.
pub(crate) fn intact_frame(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let (len, crc) = parse_header(bytes)?;
    let end = HEADER_LEN.checked_add(len)?;
    let payload = bytes.get(HEADER_LEN..end)?;
    if bytes.get(end) != Some(&b'\n') || crc32fast::hash(payload) != crc {
        return None;
    }
    Some((payload, end + 1))
}

/// Whether an intact frame starts anywhere after `from`. The
/// checksums it computes are bounded by twice the journal's size; past that it answers
/// yes, so damage it could not rule out is reported rather than dropped.
fn intact_frame_after(bytes: &[u8], from: usize) -> bool {
    let mut budget = bytes.len().saturating_mul(2);
    // Every '@', not only those starting a line: the damage may be the newline itself.
    for p in memchr::memchr_iter(b'@', &bytes[from + 1..]).map(|i| i + from + 1) {
        let Some((len, _)) = parse_header(&bytes[p..]) else {
            continue;
        };
        if p.saturating_add(HEADER_LEN).saturating_add(len) >= bytes.len() {
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
/// [`Error::Malformed`]-kind corruption (as [`Error::Inconsistent`]) if a damaged frame is
/// followed by an intact one: that is not what a crash leaves.
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
                "the journal record at byte {at} is damaged (bad frame or checksum) but intact records follow it; a crash cannot cause that, so the records after it cannot be trusted"
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
/// [`Error::UnsupportedSchemaVersion`] for another journal version, [`Error::Malformed`]
/// otherwise.
pub(crate) fn decode_header(payload: &[u8]) -> Result<JournalHeader> {
    #[derive(Deserialize)]
    struct Probe {
        journal: Option<u64>,
    }
    match serde_json::from_slice::<ObjectOnly<JournalHeader>>(payload) {
        Ok(ObjectOnly(header)) if header.journal == u64::from(JOURNAL_VERSION) => Ok(header),
        Ok(ObjectOnly(header)) => Err(unsupported(header.journal)),
        Err(source) => match serde_json::from_slice::<Probe>(payload) {
            Ok(Probe {
                journal: Some(found),
            }) if found != u64::from(JOURNAL_VERSION) => Err(unsupported(found)),
            _ => Err(malformed(source)),
        },
    }
}

fn unsupported(found: u64) -> Error {
    Error::UnsupportedSchemaVersion {
        location: Location::Bytes,
        found,
        oldest: JOURNAL_VERSION,
        supported: JOURNAL_VERSION,
    }
}

/// Whether a journal with `header` holds records for the base of session `id` stored at
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

/// Applies the records of `journal` to its base `snapshot` (decoded, not yet validated),
/// and returns where its intact records end; `None` if it holds no records for this base
/// (empty, torn before its header, or left by an older base, which is ignored).
pub(super) fn apply_journal(
    snapshot: &mut SessionSnapshot,
    journal: &[u8],
) -> Result<Option<usize>> {
    let frames = split(journal)?;
    let Some(((_, first), records)) = frames.frames.split_first() else {
        return Ok(None);
    };
    let header = decode_header(first)?;
    if header.id != *snapshot.id() {
        return Err(Error::inconsistent(format!(
            "the journal belongs to session {}, not {}",
            header.id,
            snapshot.id()
        )));
    }
    if !journal_follows(
        &header,
        snapshot.id(),
        snapshot.revision(),
        snapshot.created_at(),
    ) {
        return Ok(None);
    }
    if header.base != snapshot.counts() {
        return Err(Error::inconsistent(format!(
            "the journal's header says its base has {:?}, but the base has {:?}",
            header.base,
            snapshot.counts()
        )));
    }
    for (_, payload) in records {
        snapshot.apply_change(decode_record(payload)?)?;
    }
    Ok(Some(frames.valid_end))
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
                .map(|(at, p)| at + p.len() + FRAME_OVERHEAD)
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
        flipped[HEADER_LEN + 2] ^= 0x01;
        let err = split(&flipped).unwrap_err();
        assert!(err.to_string().contains("intact records follow"), "{err}");

        let mut last_flipped = journal(&[b"{\"a\":1}", b"{\"b\":2}"]);
        let at = last_flipped.len() - 3;
        last_flipped[at] ^= 0x01;
        assert_eq!(split(&last_flipped).unwrap().frames.len(), 1);
    }

    #[test]
    fn headers_of_other_versions_say_so() {
        let err = decode_header(br#"{"journal":2,"id":"s"}"#).unwrap_err();
        assert!(matches!(
            err,
            Error::UnsupportedSchemaVersion { found: 2, .. }
        ));
        assert!(matches!(
            decode_header(b"{}").unwrap_err(),
            Error::Malformed { .. }
        ));
    }
}
