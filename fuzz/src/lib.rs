//! The checks behind the fuzz targets, written once and shared.
//!
//! Each fuzz target in `fuzz/fuzz_targets/` panics when its check returns `Err`, and
//! `tests/fuzz_regressions.rs` includes this file (`#[path]`) to replay every saved crash
//! input through the very same check under `cargo test`. A check returns `Err` with a
//! description of the violated property; a panic inside the library is a finding too.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

use agent_session::{
    Compaction, ContentBlock, Durability, EntryKind, Error, ErrorKind, FileSessionStore, Location,
    LogEntry, Message, Revision, RewindTo, SessionId, SessionLog, SessionSnapshot, SessionStore,
    SessionSummary, ToolCall, ToolResult, Usage, MAX_ID_LEN,
};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

#[path = "../../tests/common/json_diff.rs"]
mod json_diff;
pub use json_diff::json_difference;

/// A fuzz check: `Ok` when the input upholds every property, `Err` naming the one it broke.
pub type Check = fn(&[u8]) -> Result<(), String>;

/// Every fuzz target, by name (the name of its binary and of its regression directory).
pub const TARGETS: &[(&str, Check)] = &[
    ("decode_snapshot", decode_snapshot),
    ("parse_id", parse_id),
    ("provider_messages", provider_messages),
    ("journal_reader", journal_reader),
    ("log_entry", log_entry),
];

/// An open bug the fuzz targets step over: `(target, hits(input), description)`.
pub type KnownIssue = (&'static str, fn(&[u8]) -> bool, &'static str);

/// Open bugs that the fuzz targets step over, so that a long run keeps looking for new ones
/// instead of stopping at the first known crash. Each must have a saved input in
/// `tests/fuzz_regressions/<target>/`, which `cargo test` replays *without* this filter, so
/// it fails until the bug is fixed; then delete the entry. Empty: no bug found so far is
/// open (see `fuzz/README.md` for the history).
pub const KNOWN_ISSUES: &[KnownIssue] = &[];

/// The description of the open bug `data` hits in `target`, if any (see [`KNOWN_ISSUES`]).
#[must_use]
pub fn known_issue(target: &str, data: &[u8]) -> Option<&'static str> {
    KNOWN_ISSUES
        .iter()
        .find(|(t, hits, _)| *t == target && hits(data))
        .map(|(_, _, description)| *description)
}

/// The deepest nesting of arrays and objects `serde_json` reads back.
const MAX_JSON_DEPTH: usize = 127;

/// Names refused as ids because some file systems treat them as devices (see `SessionId`).
const RESERVED_NAMES: &[&str] = &[
    "con", "prn", "aux", "nul", "com0", "com1", "com2", "com3", "com4", "com5", "com6", "com7",
    "com8", "com9", "lpt0", "lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

/// `SessionSnapshot::from_json` on arbitrary bytes.
///
/// A refusal must be one of the three decoding errors, located at "bytes", classified as
/// corrupt (or invalid input for an inconsistent snapshot), and corrupt once located in a
/// file. An accepted snapshot must encode again, decode back to an equal snapshot, encode
/// to the same bytes a second time (so no number, string or field changes on the way), keep
/// its revision through `to_json_with_revision`, and have every tool-call record point at
/// its call and result.
///
/// # Errors
///
/// The first property the input breaks.
pub fn decode_snapshot(data: &[u8]) -> Result<(), String> {
    let snapshot = match SessionSnapshot::from_json(data) {
        Ok(snapshot) => snapshot,
        Err(err) => return check_decode_error(err),
    };
    let bytes = snapshot
        .to_json()
        .map_err(|e| format!("a decoded snapshot cannot be encoded again: {e}"))?;
    let again = SessionSnapshot::from_json(&bytes).map_err(|e| {
        format!(
            "the re-encoded snapshot does not decode: {e}\n{}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    if again != snapshot {
        return Err(format!(
            "the snapshot changed through encode and decode:\nbefore {snapshot:?}\nafter  {again:?}"
        ));
    }
    let bytes_again = again
        .to_json()
        .map_err(|e| format!("a snapshot decoded from our own encoding cannot be encoded: {e}"))?;
    if bytes_again != bytes {
        return Err(format!(
            "encoding is not stable:\nfirst  {}\nsecond {}",
            String::from_utf8_lossy(&bytes),
            String::from_utf8_lossy(&bytes_again)
        ));
    }

    let next = snapshot.revision().next();
    let stored = snapshot
        .to_json_with_revision(next)
        .map_err(|e| format!("cannot encode at the next revision {next}: {e}"))?;
    let loaded = SessionSnapshot::from_json(&stored)
        .map_err(|e| format!("the snapshot encoded at revision {next} does not decode: {e}"))?;
    if loaded.revision() != next || loaded != snapshot.clone().with_revision(next) {
        return Err(format!(
            "encoding at revision {next} gave back revision {} or other changes",
            loaded.revision()
        ));
    }

    for record in snapshot.tool_calls() {
        let call = snapshot.tool_call(record);
        let result = snapshot.tool_result(record);
        match (call, result) {
            (Some(call), Some(result)) => {
                if call.name != record.tool_name || result.is_error != record.status.is_error() {
                    return Err(format!("record {record:?} disagrees with its blocks"));
                }
            }
            _ => {
                return Err(format!(
                "record {record:?} of a validated snapshot does not point at its call and result"
            ))
            }
        }
    }
    let summary = SessionSummary::of(&snapshot);
    if summary.id != *snapshot.id() || summary.message_count != snapshot.transcript().len() {
        return Err(format!(
            "the summary {summary:?} does not describe its snapshot"
        ));
    }
    Ok(())
}

fn check_decode_error(err: Error) -> Result<(), String> {
    let expected_kind = match &err {
        Error::Malformed {
            location: Location::Bytes,
            ..
        }
        | Error::UnsupportedSchemaVersion {
            location: Location::Bytes,
            ..
        } => ErrorKind::Corrupt,
        Error::Inconsistent {
            location: Location::Bytes,
            ..
        } => ErrorKind::InvalidInput,
        other => {
            return Err(format!(
                "decoding failed with an unexpected error: {other:?}"
            ))
        }
    };
    if err.kind() != expected_kind {
        return Err(format!(
            "decoding error {err:?} is classified {:?}",
            err.kind()
        ));
    }
    if err.to_string().is_empty() {
        return Err(format!("decoding error {err:?} displays as nothing"));
    }
    let located = err.at(&Location::File("/store/session.json".into()));
    if located.kind() != ErrorKind::Corrupt || !located.to_string().contains("/store/session.json")
    {
        return Err(format!(
            "a decoding error located in a file is {:?}: {located}",
            located.kind()
        ));
    }
    Ok(())
}

/// `SessionId::parse` on arbitrary text (invalid UTF-8 is replaced with U+FFFD).
///
/// An id is accepted exactly when it follows the documented rules (1 to 128 characters
/// from `a-z 0-9 - _`, starting with a letter or digit, not a device name). An accepted id
/// displays, serializes and parses back as itself through every constructor, and
/// `<id>.json` is one plain file name. A refused input is `Error::InvalidId` carrying the
/// input, of kind invalid input, and every other constructor refuses it too.
///
/// # Errors
///
/// The first property the input breaks.
pub fn parse_id(data: &[u8]) -> Result<(), String> {
    let input = String::from_utf8_lossy(data);
    let input: &str = &input;
    let follows_rules = follows_id_rules(input);
    let as_json =
        serde_json::to_string(input).map_err(|e| format!("cannot quote {input:?}: {e}"))?;
    match SessionId::parse(input) {
        Ok(id) => {
            if !follows_rules {
                return Err(format!("{input:?} was accepted but breaks the id rules"));
            }
            if id.as_str() != input || id.to_string() != input || id.as_ref() != input {
                return Err(format!("{input:?} was accepted as {id:?}"));
            }
            let displayed = id.to_string();
            let reparsed = SessionId::parse(&displayed)
                .map_err(|e| format!("the display of {id:?} does not parse: {e}"))?;
            let from_str: SessionId = input
                .parse()
                .map_err(|e| format!("FromStr refused {input:?}: {e}"))?;
            let from_string = SessionId::try_from(input.to_owned())
                .map_err(|e| format!("TryFrom<String> refused {input:?}: {e}"))?;
            let serialized =
                serde_json::to_string(&id).map_err(|e| format!("cannot serialize {id:?}: {e}"))?;
            let deserialized: SessionId = serde_json::from_str(&serialized)
                .map_err(|e| format!("cannot deserialize {serialized}: {e}"))?;
            if reparsed != id || from_str != id || from_string != id || deserialized != id {
                return Err(format!(
                    "{input:?} does not round-trip through every constructor"
                ));
            }
            if serialized != as_json {
                return Err(format!("{id:?} serializes as {serialized}, not {as_json}"));
            }
            let file_name = format!("{id}.json");
            let components: Vec<Component<'_>> = Path::new(&file_name).components().collect();
            let plain = matches!(components.as_slice(), [Component::Normal(name)] if name.to_str() == Some(file_name.as_str()))
                && !file_name.starts_with('.');
            if !plain {
                return Err(format!("{file_name:?} is not one plain file name"));
            }
            Ok(())
        }
        Err(err) => {
            if follows_rules {
                return Err(format!(
                    "{input:?} follows the id rules but was refused: {err}"
                ));
            }
            match &err {
                Error::InvalidId { id, reason } if id == input && !reason.is_empty() => {}
                other => return Err(format!("{input:?} was refused with {other:?}")),
            }
            if err.kind() != ErrorKind::InvalidInput {
                return Err(format!("refusing {input:?} is classified {:?}", err.kind()));
            }
            if input.parse::<SessionId>().is_ok()
                || SessionId::try_from(input).is_ok()
                || SessionId::try_from(input.to_owned()).is_ok()
                || serde_json::from_str::<SessionId>(&as_json).is_ok()
            {
                return Err(format!("another constructor accepted {input:?}"));
            }
            Ok(())
        }
    }
}

/// The documented id rules, written independently of the crate's regular expression.
#[must_use]
pub fn follows_id_rules(input: &str) -> bool {
    let bytes = input.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_';
    match bytes.first() {
        Some(first) if first.is_ascii_lowercase() || first.is_ascii_digit() => {}
        _ => return false,
    }
    bytes.len() <= MAX_ID_LEN && bytes.iter().all(allowed) && !RESERVED_NAMES.contains(&input)
}

/// The provider formats a message can be converted from and back to.
#[derive(Debug, Clone, Copy)]
enum Provider {
    OpenAiChat,
    Anthropic,
}

impl Provider {
    const ALL: [Provider; 2] = [Provider::OpenAiChat, Provider::Anthropic];

    fn name(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "openai-chat",
            Provider::Anthropic => "anthropic",
        }
    }

    fn decode(self, wire: &Value) -> agent_session::Result<Message> {
        match self {
            Provider::OpenAiChat => Message::from_openai_chat(wire),
            Provider::Anthropic => Message::from_anthropic(wire),
        }
    }

    fn encode(self, message: &Message) -> agent_session::Result<Value> {
        match self {
            Provider::OpenAiChat => message.to_openai_chat(),
            Provider::Anthropic => message.to_anthropic(),
        }
    }
}

/// `Message::from_openai_chat` and `Message::from_anthropic` on arbitrary JSON (bytes that
/// are not JSON are skipped). If the input is an array, each element is also tried as a
/// message, so a whole recorded transcript is a useful seed.
///
/// A refusal must be `Error::Conversion` naming the provider. An accepted message must
/// convert back to exactly the input (integers stay integers, floats keep their sign and
/// bits, strings byte for byte, `null` and absent apart), and must survive the crate's own
/// serde form: serialized and deserialized, it is equal and converts back to the input too.
/// Converting to the other provider may fail but must not panic.
///
/// # Errors
///
/// The first property the input breaks.
pub fn provider_messages(data: &[u8]) -> Result<(), String> {
    let Ok(wire) = serde_json::from_slice::<Value>(data) else {
        return Ok(());
    };
    check_message(&wire)?;
    if let Value::Array(items) = &wire {
        for item in items {
            check_message(item)?;
        }
    }
    Ok(())
}

fn check_message(wire: &Value) -> Result<(), String> {
    for provider in Provider::ALL {
        check_provider_message(provider, wire)?;
    }
    Ok(())
}

fn check_provider_message(provider: Provider, wire: &Value) -> Result<(), String> {
    let name = provider.name();
    let message = match provider.decode(wire) {
        Ok(message) => message,
        Err(Error::Conversion { provider: p, .. }) if p == name => return Ok(()),
        Err(other) => {
            return Err(format!(
                "{name}: refused with an unexpected error {other:?}"
            ))
        }
    };
    let back = provider
        .encode(&message)
        .map_err(|e| format!("{name}: {wire} was accepted but cannot be converted back: {e}"))?;
    if let Some(difference) = json_difference(wire, &back, "$") {
        return Err(format!(
            "{name}: converting back changed the message at {difference}\ninput {wire}\noutput {back}"
        ));
    }

    let native =
        serde_json::to_string(&message).map_err(|e| format!("{name}: cannot serialize: {e}"))?;
    match serde_json::from_str::<Message>(&native) {
        Ok(stored) => {
            if stored != message {
                return Err(format!(
                    "{name}: the native serde form changed the message\nbefore {message:?}\nafter  {stored:?}"
                ));
            }
            let back = provider.encode(&stored).map_err(|e| {
                format!("{name}: after the native form, cannot be converted back: {e}")
            })?;
            if let Some(difference) = json_difference(wire, &back, "$") {
                return Err(format!(
                    "{name}: after the native form, converting back changed {difference}\ninput {wire}\nnative {native}"
                ));
            }
        }
        // The native form wraps some provider fields one level deeper (`extra`, `wire`),
        // so a message nested at the parser's limit cannot be read back from it. A snapshot
        // holding it is refused with `Error::TooDeep` when encoded, so nothing unreadable is
        // ever written; anything else is a finding.
        Err(e) if nesting_depth(native.as_bytes()) > MAX_JSON_DEPTH => {
            if !e.to_string().contains("recursion limit") {
                return Err(format!("{name}: deep native form failed with {e}"));
            }
        }
        Err(e) => {
            return Err(format!(
                "{name}: the native serde form does not read back: {e}\nnative {native}"
            ))
        }
    }

    // Converting to the other provider may be refused, but never panics.
    let _ = message.to_openai_chat();
    let _ = message.to_anthropic();
    Ok(())
}

/// The deepest nesting of arrays and objects in JSON text (brackets in strings not counted).
#[must_use]
pub fn nesting_depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in json {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

// ----------------------------------------------------------------------------------------
// journal_reader

/// The session every `journal_reader` input stores.
pub const JOURNAL_SESSION: &str = "fuzz";
/// The model of that session.
const JOURNAL_MODEL: &str = "fuzz-model";
/// The most incremental saves one `journal_reader` input makes after its base.
pub const MAX_JOURNAL_TURNS: usize = 8;
/// When the base of every `journal_reader` session was created: 2025-01-01T00:00:00Z.
const JOURNAL_EPOCH: i64 = 1_735_689_600;
/// `@`, 8 hex digits, a space, 8 hex digits, a newline: the start of every journal frame.
const FRAME_HEADER_LEN: usize = 19;
/// Where the framed modes of `journal_reader` and `log_entry` split their input into
/// frame payloads: the ASCII record separator, which compact JSON never holds unescaped,
/// so a payload of two JSON lines (a log entry's head and body) is one piece.
pub const PIECE_SEPARATOR: u8 = 0x1e;

/// What one `journal_reader` input did, so the tests can check that the check ran.
#[derive(Debug, Clone)]
pub struct JournalOutcome {
    /// Every state the input saved, oldest first: the base, then one per incremental save
    /// (only the base in the raw and framed modes).
    pub saved: Vec<SessionSnapshot>,
    /// The kind of change each saved state's revision is, as its store must list it
    /// ([`EntryKind::Checkpoint`] for the base).
    pub kinds: Vec<EntryKind>,
    /// The journal as the saves left it (empty in the raw and framed modes).
    pub written: Vec<u8>,
    /// The journal the store was then given to read.
    pub read: Vec<u8>,
    /// What loading returned: the state, or the refusal (of kind corrupt) as text.
    pub loaded: Result<SessionSnapshot, String>,
}

/// The file store's journal reader on damaged journals.
///
/// Byte 0 of the input picks the mode (`& 3`):
///
/// * 0 or 1, **history**: byte 1 (mod 9) is the number `k` of incremental saves made after
///   a base (each changes the last state, saves it and marks it with
///   [`SessionSnapshot::with_revision`], so each appends one log entry); bytes 2–3
///   (little-endian) the cut; byte 4 (mod 4) the tail; byte 5 the length of the save
///   contents that follow, split evenly among the `k` saves. A save's first byte holds its
///   flags, the rest is its text. Bits 4–6 of the flags pick what the save does
///   ([`JournalOp`]): 0 and 5–7 a turn ([`SessionSnapshot::with_appended`]), 1 a rewind of
///   the last turn, 2 a compaction of every turn but the last into a summary, 3 a restore
///   of saved state number `text length mod saves so far`, 4 an edit (a snapshot built
///   anew, with metadata, saved over the stored one). The low bits: 1 the turn (or the
///   summary) has a tool round, 2 its tool fails, 4 no usage entry, 8 reload from the
///   store first. Every save is stamped at a fixed time, so an input writes the same
///   journal on every run. The journal the saves wrote is cut at the cut (mod its length
///   \+ 1) and the tail is appended, built from the input's remaining bytes: 0 those bytes;
///   1 zeros, 4 × the first byte of them; 2 the bytes after the first, then the written
///   journal resumed `first` bytes after the cut (an insertion, deletion or replacement in
///   the middle of the journal); 3 a copy of written frame number `first` (mod their
///   count), then the bytes after the first.
/// * 2, **raw**: bytes 1.. are the whole journal beside a base.
/// * 3, **framed**: bytes 1.. split at [`PIECE_SEPARATOR`] (0x1e, not a newline: a log
///   entry's payload is two lines, its head and its body); each piece becomes one frame
///   with its correct length and checksum, except a piece starting with 0xff, which goes
///   in as it is (without the 0xff). So mutated JSON reaches the header, head and body
///   decoders (and the format-1 record decoder, for a header of journal format 1).
///
/// In the raw and framed modes the base is stored at revision 1, or at 2^64 − 2 if byte 0
/// has bit 2 set.
///
/// Which frames are intact is worked out independently of the crate. Then loading (by a
/// store opened afresh) must give:
///
/// * if an intact frame follows the first damaged byte anywhere (damage a crash cannot
///   leave), a refusal of kind corrupt;
/// * in the history mode otherwise, exactly the state saved by the last intact frame (the
///   base if the header is not intact): a torn tail never yields an entry that was not
///   written, nor drops an intact one. If an intact frame is not the one the saves wrote
///   there (a duplicated frame), a refusal of kind corrupt. Every earlier revision then
///   loads ([`SessionStore::load_at`]) exactly as it was saved, the next one is
///   `RevisionNotFound`, [`SessionStore::revisions`] lists each with the kind of its save
///   and its view's length, and the loaded state's history counts its rewinds,
///   compactions and restores;
/// * in the raw and framed modes otherwise, the base if no frame is intact, else the base
///   (a journal for another base is ignored) or the state after every intact entry, or a
///   refusal of kind corrupt. An accepted state lists one revision per intact entry, and
///   each of them loads or is refused as corrupt (an entry's body is decoded only when a
///   view needs it).
///
/// A refusal may also come from the reader's bound on checksum work (twice the journal's
/// size, past which it reports damage it could not rule out). Every refusal is of kind
/// corrupt, and `list` reports the session as unreadable. An accepted state encodes and
/// decodes back equal, is listed exactly as loaded, and one more turn appended to it
/// saves (at the next revision; refused only at revision 2^64 − 1), loads back equal and
/// leaves a journal of intact frames only: the torn tail was cut, not swallowed.
///
/// # Errors
///
/// The first property the input breaks.
pub fn journal_reader(data: &[u8]) -> Result<(), String> {
    journal_reader_outcome(data).map(|_| ())
}

/// [`journal_reader`], returning what the input did.
///
/// # Errors
///
/// The first property the input breaks.
pub fn journal_reader_outcome(data: &[u8]) -> Result<JournalOutcome, String> {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let id = SessionId::parse(JOURNAL_SESSION).map_err(|e| e.to_string())?;
    let journal_path = dir.path().join(format!("{id}.journal"));
    let store = open_store(dir.path())?;

    let mut kinds = vec![EntryKind::Checkpoint];
    let (saved, written, journal, expect) = if byte(0) & 2 == 0 {
        let turns = usize::from(byte(1)) % (MAX_JOURNAL_TURNS + 1);
        let cut = usize::from(u16::from_le_bytes([byte(2), byte(3)]));
        let body = data.get(6..).unwrap_or_default();
        let (contents, rest) = body.split_at(usize::from(byte(5)).min(body.len()));
        let saved = save_history(&store, &id, contents, turns, &mut kinds)?;
        let written = read_or_empty(&journal_path)?;
        let written_scan = scan_frames(&written);
        let whole = written_scan.valid_end == written.len()
            && written_scan.frames.len() == if turns == 0 { 0 } else { turns + 1 };
        if !whole {
            return Err(format!(
                "{turns} incremental saves left a journal of {} bytes with {} intact frames (intact up to byte {}), not a header and one record per save",
                written.len(),
                written_scan.frames.len(),
                written_scan.valid_end
            ));
        }
        let cut = cut % (written.len() + 1);
        let first = usize::from(rest.first().copied().unwrap_or(0));
        let after = rest.get(1..).unwrap_or_default();
        let mut journal = written[..cut].to_vec();
        match byte(4) % 4 {
            0 => journal.extend_from_slice(rest),
            1 => journal.resize(cut + 4 * first, 0),
            2 => {
                journal.extend_from_slice(after);
                journal.extend_from_slice(written.get(cut + first..).unwrap_or_default());
            }
            _ => {
                let frames = &written_scan.frames;
                if !frames.is_empty() {
                    let (start, end) = frames[first % frames.len()];
                    journal.extend_from_slice(&written[start..end]);
                }
                journal.extend_from_slice(after);
            }
        }
        if !journal.is_empty() || !written.is_empty() {
            write_journal(&journal_path, &journal)
                .map_err(|e| format!("cannot write {}: {e}", journal_path.display()))?;
        }
        let expect = expect_history(&journal, &written, &saved);
        (saved, written, journal, expect)
    } else {
        let revision = if byte(0) & 4 == 0 { 1 } else { u64::MAX - 1 };
        let base = journal_base(&id)?.with_revision(Revision::from_u64(revision));
        let body = data.get(1..).unwrap_or_default();
        let journal = if byte(0) & 1 == 0 {
            body.to_vec()
        } else {
            framed_journal(body)
        };
        let base_bytes = base
            .to_json()
            .map_err(|e| format!("the base does not encode: {e}"))?;
        let base_path = store.path_of(&id);
        write_journal(&base_path, &base_bytes)
            .and_then(|()| write_journal(&journal_path, &journal))
            .map_err(|e| format!("cannot write the session: {e}"))?;
        let expect = expect_journal(&journal, &base);
        (vec![base], Vec::new(), journal, expect)
    };
    drop(store);

    // A store opened afresh, so nothing it remembers from the saves can stand in for the
    // files.
    let store = open_store(dir.path())?;
    let context = describe(&journal);
    let loaded = store.load(&id);
    check_loaded(&loaded, &expect).map_err(|v| format!("{v}\n{context}"))?;
    check_listed(&store, &loaded).map_err(|v| format!("{v}\n{context}"))?;
    if let Ok(snapshot) = &loaded {
        check_revisions(&store, snapshot, &expect, &saved, &kinds)
            .map_err(|v| format!("{v}\n{context}"))?;
    }
    if let Ok(snapshot) = &loaded {
        check_continued(&store, snapshot, &journal_path).map_err(|v| format!("{v}\n{context}"))?;
    }
    Ok(JournalOutcome {
        saved,
        kinds,
        written,
        read: journal,
        loaded: loaded.map_err(|e| e.to_string()),
    })
}

fn open_store(dir: &Path) -> Result<FileSessionStore, String> {
    FileSessionStore::builder()
        .durability(Durability::Buffered)
        .open(dir)
        .map_err(|e| format!("cannot open a store in {}: {e}", dir.display()))
}

/// A time `minute` minutes after the base's creation.
fn at_minute(minute: usize) -> Result<DateTime<Utc>, String> {
    i64::try_from(minute)
        .ok()
        .and_then(|m| m.checked_mul(60))
        .and_then(|s| s.checked_add(JOURNAL_EPOCH))
        .and_then(|s| DateTime::from_timestamp(s, 0))
        .ok_or_else(|| format!("no time {minute} minutes after the epoch"))
}

/// The base every `journal_reader` session starts from.
fn journal_base(id: &SessionId) -> Result<SessionSnapshot, String> {
    let created = at_minute(0)?;
    SessionSnapshot::builder(id.clone(), JOURNAL_MODEL)
        .transcript(vec![Message::user("base")])
        .usage(vec![Usage::new(JOURNAL_MODEL).with_tokens(3, 1)])
        .timestamps(created, created)
        .build()
        .map_err(|e| format!("the base does not build: {e}"))
}

/// The messages and usage of turn `i` (see [`journal_reader`] for the flags).
fn journal_turn(i: usize, flags: u8, text: &str) -> (Vec<Message>, Vec<Usage>) {
    let mut messages = vec![Message::user(format!("{i} {text}"))];
    if flags & 1 != 0 {
        let call = format!("call_{i}");
        messages.push(Message::assistant(vec![
            ContentBlock::text(text),
            ContentBlock::tool_call(ToolCall::new(
                call.clone(),
                "lookup",
                json!({ "query": text, "turn": i }),
            )),
        ]));
        let output = format!("found {text}");
        messages.push(Message::tool_result(if flags & 2 == 0 {
            ToolResult::new(call, output)
        } else {
            ToolResult::error(call, output)
        }));
    }
    messages.push(Message::assistant(vec![ContentBlock::text(format!(
        "reply {i}: {text}"
    ))]));
    let usage = if flags & 4 == 0 {
        let len = u64::try_from(text.len()).unwrap_or(u64::MAX);
        vec![Usage::new(JOURNAL_MODEL).with_tokens(u64::from(flags), len)]
    } else {
        Vec::new()
    };
    (messages, usage)
}

/// What one incremental save of `journal_reader`'s history mode does (bits 4–6 of its
/// flags; see [`journal_reader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalOp {
    /// A turn appended.
    Turn,
    /// The last turn rewound (a turn instead when the view holds none).
    Rewind,
    /// Every turn but the last replaced by a summary.
    Compaction,
    /// An earlier saved state restored.
    Restore,
    /// A snapshot built anew (the view, the turn and metadata) saved over the stored one.
    Edit,
}

impl JournalOp {
    /// The operation bits 4–6 of `flags` pick.
    #[must_use]
    pub fn of(flags: u8) -> Self {
        match (flags >> 4) & 7 {
            1 => JournalOp::Rewind,
            2 => JournalOp::Compaction,
            3 => JournalOp::Restore,
            4 => JournalOp::Edit,
            _ => JournalOp::Turn,
        }
    }
}

/// The summary of compaction `i`: a user message, and a tool round if `flags & 1`.
fn journal_summary(i: usize, flags: u8, text: &str) -> Vec<Message> {
    let mut summary = vec![Message::user(format!("summary {i}: {text}"))];
    if flags & 1 != 0 {
        let call = format!("summary_call_{i}");
        summary.push(Message::assistant(vec![ContentBlock::tool_call(
            ToolCall::new(call.clone(), "recall", json!({ "summary": i })),
        )]));
        summary.push(Message::tool_result(if flags & 2 == 0 {
            ToolResult::new(call, text)
        } else {
            ToolResult::error(call, text)
        }));
    }
    summary
}

/// `current` after incremental save `i` (flags `flags`, text `text`) has done its
/// operation, stamped `at`, and the kind of entry its save appends. `saved` are the states
/// saved so far (a restore goes back to one of them).
fn journal_step(
    current: &SessionSnapshot,
    saved: &[SessionSnapshot],
    (i, flags, text): (usize, u8, &str),
    at: DateTime<Utc>,
) -> Result<(SessionSnapshot, EntryKind), String> {
    let (messages, usage) = journal_turn(i, flags, text);
    let refused = |e: Error| format!("save {i} (flags {flags:#x}, text {text:?}) was refused: {e}");
    let stamped = |s: SessionSnapshot| s.with_appended(Vec::new(), Vec::new(), at).map_err(refused);
    let turn = || {
        current
            .clone()
            .with_appended(messages.clone(), usage.clone(), at)
            .map(|s| (s, EntryKind::Turn))
            .map_err(refused)
    };
    match JournalOp::of(flags) {
        JournalOp::Turn => turn(),
        JournalOp::Rewind => {
            let mut next = current.clone();
            match next.rewind(RewindTo::LastTurns(1)) {
                Ok(dropped) if dropped > 0 => Ok((stamped(next)?, EntryKind::Rewind)),
                // A view without a turn: nothing to rewind.
                _ => turn(),
            }
        }
        JournalOp::Compaction => {
            let point = current
                .transcript()
                .iter()
                .rposition(Message::is_prompt)
                .unwrap_or(0);
            let mut compaction = Compaction::new(point, journal_summary(i, flags, text));
            if let Some(usage) = usage.first() {
                compaction = compaction.with_usage(usage.clone());
            }
            let mut next = current.clone();
            next.compact(compaction).map_err(refused)?;
            Ok((stamped(next)?, EntryKind::Compaction))
        }
        JournalOp::Restore => {
            let past = &saved[text.len() % saved.len()];
            let mut next = current.clone();
            next.restore_from(past).map_err(refused)?;
            Ok((stamped(next)?, EntryKind::Restore))
        }
        JournalOp::Edit => {
            let mut transcript = current.transcript().to_vec();
            transcript.extend(messages);
            let mut all_usage = current.usage().to_vec();
            all_usage.extend(usage);
            let edited = SessionSnapshot::builder(current.id().clone(), JOURNAL_MODEL)
                .metadata_entry("edit", json!(i))
                .transcript(transcript)
                .usage(all_usage)
                .timestamps(current.created_at(), at)
                .build()
                .map_err(refused)?
                .with_revision(current.revision());
            Ok((edited, EntryKind::Edit))
        }
    }
}

/// Saves the base, then `turns` incremental saves (see [`journal_reader`]); every state
/// saved, and in `kinds` the kind of each save's entry.
fn save_history(
    store: &FileSessionStore,
    id: &SessionId,
    contents: &[u8],
    turns: usize,
    kinds: &mut Vec<EntryKind>,
) -> Result<Vec<SessionSnapshot>, String> {
    let base = journal_base(id)?;
    let revision = store
        .save(&base)
        .map_err(|e| format!("saving the base failed: {e}"))?;
    let mut saved = vec![base.with_revision(revision)];
    let mut current = store
        .load(id)
        .map_err(|e| format!("loading the base failed: {e}"))?;
    if current != saved[0] {
        return Err(format!(
            "the base loaded back different:\nsaved  {:?}\nloaded {current:?}",
            saved[0]
        ));
    }
    for i in 0..turns {
        let chunk = &contents[i * contents.len() / turns..(i + 1) * contents.len() / turns];
        let flags = chunk.first().copied().unwrap_or(0);
        let text = String::from_utf8_lossy(chunk.get(1..).unwrap_or_default()).into_owned();
        let last = saved.last().cloned().ok_or("no saved state")?;
        if flags & 8 != 0 {
            current = reload(store, &last)?;
        }
        let (next, kind) = journal_step(&current, &saved, (i, flags, &text), at_minute(i + 1)?)?;
        let revision = store
            .save(&next)
            .map_err(|e| format!("saving {kind} {i} failed: {e}"))?;
        if revision != last.revision().next() {
            return Err(format!(
                "saving {kind} {i} after revision {} stored revision {revision}",
                last.revision()
            ));
        }
        current = next.with_revision(revision);
        saved.push(current.clone());
        kinds.push(kind);
        if kind == EntryKind::Edit {
            // A snapshot built anew knows nothing of the store: the next save would be
            // another edit. Loaded, it derives from the revision stored.
            current = reload(store, &current)?;
        }
    }
    Ok(saved)
}

/// Loads the session `last` is the last saved state of, which must be `last`.
fn reload(store: &FileSessionStore, last: &SessionSnapshot) -> Result<SessionSnapshot, String> {
    let loaded = store
        .load(last.id())
        .map_err(|e| format!("loading revision {} failed: {e}", last.revision()))?;
    if loaded != *last {
        return Err(format!(
            "revision {} loaded back different:\nsaved  {last:?}\nloaded {loaded:?}",
            last.revision()
        ));
    }
    Ok(loaded)
}

/// Checks the history of the state that loaded: in the history mode, every revision up to
/// it loads exactly as saved, the next does not exist, the revisions are listed with the
/// kind of each save, and the state counts its rewinds, compactions and restores; in the
/// raw and framed modes, a revision is listed for every entry and each loads or is
/// refused as corrupt.
fn check_revisions(
    store: &FileSessionStore,
    snapshot: &SessionSnapshot,
    expect: &Expect,
    saved: &[SessionSnapshot],
    kinds: &[EntryKind],
) -> Result<(), String> {
    let id = snapshot.id();
    let revisions = store
        .revisions(id)
        .map_err(|e| format!("the session loads but its revisions are refused: {e}"))?;
    let first = revisions
        .first()
        .ok_or("the session loads but lists no revision")?;
    let last = revisions.last().ok_or("no last revision")?;
    if last.revision != snapshot.revision() || last.messages != snapshot.transcript().len() {
        return Err(format!(
            "the last revision listed is {} with {} messages, but revision {} with {} loads",
            last.revision,
            last.messages,
            snapshot.revision(),
            snapshot.transcript().len()
        ));
    }
    let counted = |kind: EntryKind| revisions.iter().filter(|r| r.kind == kind).count() as u64;
    let stats = snapshot.history_stats();
    if (stats.rewinds, stats.compactions, stats.restores)
        != (
            counted(EntryKind::Rewind),
            counted(EntryKind::Compaction),
            counted(EntryKind::Restore),
        )
        || stats.oldest_revision != first.revision
    {
        return Err(format!(
            "the loaded state's history {stats:?} does not count its revisions {revisions:?}"
        ));
    }
    match expect {
        Expect::State { .. } => {
            let expected: Vec<(Revision, EntryKind, usize)> = saved
                .iter()
                .zip(kinds)
                .take_while(|(s, _)| s.revision() <= snapshot.revision())
                .map(|(s, kind)| (s.revision(), *kind, s.transcript().len()))
                .collect();
            let listed: Vec<(Revision, EntryKind, usize)> = revisions
                .iter()
                .map(|r| (r.revision, r.kind, r.messages))
                .collect();
            if listed != expected {
                return Err(format!(
                    "the revisions listed are {listed:?}, not the saves' {expected:?}"
                ));
            }
            for state in saved.iter().filter(|s| s.revision() <= snapshot.revision()) {
                let at = store
                    .load_at(id, state.revision())
                    .map_err(|e| format!("revision {} does not load: {e}", state.revision()))?;
                if at != *state {
                    return Err(format!(
                        "revision {} loads different:\nsaved  {state:?}\nloaded {at:?}",
                        state.revision()
                    ));
                }
            }
        }
        _ => {
            for info in &revisions {
                match store.load_at(id, info.revision) {
                    Ok(at) => {
                        check_round_trip(&at)?;
                        if at.transcript().len() != info.messages {
                            return Err(format!(
                                "revision {} is listed with {} messages but loads with {}",
                                info.revision,
                                info.messages,
                                at.transcript().len()
                            ));
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Corrupt => {}
                    Err(e) => {
                        return Err(format!(
                            "revision {} is listed but refused with {e:?}, of kind {:?}",
                            info.revision,
                            e.kind()
                        ))
                    }
                }
            }
        }
    }
    if let Some(next) = snapshot.revision().as_u64().checked_add(1) {
        match store.load_at(id, Revision::from_u64(next)) {
            Err(Error::RevisionNotFound { .. }) => {}
            other => {
                return Err(format!(
                    "revision {next}, after the last, loads as {:?}",
                    other.map(|s| s.revision())
                ))
            }
        }
    }
    Ok(())
}

/// Checks that `snapshot` encodes and decodes back equal.
fn check_round_trip(snapshot: &SessionSnapshot) -> Result<(), String> {
    let bytes = snapshot
        .to_json()
        .map_err(|e| format!("revision {} does not encode: {e}", snapshot.revision()))?;
    let decoded = SessionSnapshot::from_json(&bytes).map_err(|e| {
        format!(
            "revision {}, encoded, does not decode: {e}",
            snapshot.revision()
        )
    })?;
    if decoded != *snapshot {
        return Err(format!(
            "revision {} changed through encode and decode:\nloaded  {snapshot:?}\ndecoded {decoded:?}",
            snapshot.revision()
        ));
    }
    Ok(())
}

/// Each piece of `body` between [`PIECE_SEPARATOR`]s framed with its length and checksum,
/// except a piece starting with 0xff, taken as it is (without the 0xff).
fn framed_journal(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.split(|&b| b == PIECE_SEPARATOR) {
        match piece.split_first() {
            Some((0xff, raw)) => out.extend_from_slice(raw),
            _ => out.extend_from_slice(&frame(piece)),
        }
    }
    out
}

/// `payload` framed as the journal format says: `@LLLLLLLL CCCCCCCC\n<payload>\n`.
#[must_use]
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("@{:08x} {:08x}\n", payload.len(), crc32fast::hash(payload)).into_bytes();
    out.extend_from_slice(payload);
    out.push(b'\n');
    out
}

/// The bytes of `path`, or none if there is no such file.
fn read_or_empty(path: &Path) -> Result<Vec<u8>, String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Writes `bytes` to `path` in place, as a private file if it has to be created (what a
/// crash, a disk error or a hand edit leaves), and dates it at the epoch, so no stamp of
/// the store's (size and modification time) can mistake it for what the store wrote.
fn write_journal(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1))
}

/// The frame header at `at`: its payload length and checksum, if well formed (lowercase
/// hexadecimal digits only).
fn frame_header(bytes: &[u8], at: usize) -> Option<(usize, u32)> {
    let header = bytes.get(at..at.checked_add(FRAME_HEADER_LEN)?)?;
    if header[0] != b'@' || header[9] != b' ' || header[18] != b'\n' {
        return None;
    }
    let hex = |digits: &[u8]| {
        digits.iter().try_fold(0u32, |n, &d| {
            let digit = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                _ => return None,
            };
            Some(n << 4 | u32::from(digit))
        })
    };
    let len = usize::try_from(hex(&header[1..9])?).ok()?;
    Some((len, hex(&header[10..18])?))
}

/// The end (one past its closing newline) of the intact frame at `at`, if there is one.
fn intact_frame_end(bytes: &[u8], at: usize) -> Option<usize> {
    let (len, crc) = frame_header(bytes, at)?;
    let start = at + FRAME_HEADER_LEN;
    let end = start.checked_add(len)?;
    let payload = bytes.get(start..end)?;
    (bytes.get(end) == Some(&b'\n') && crc32fast::hash(payload) == crc).then_some(end + 1)
}

/// A journal's frames, worked out independently of the crate.
#[derive(Debug)]
struct FrameScan {
    /// The intact frames from the start, as (start, end) byte ranges.
    frames: Vec<(usize, usize)>,
    /// Where they end: the first damaged byte, or the journal's length.
    valid_end: usize,
    /// Where intact frames start after the damage, if anywhere.
    intact_after: Vec<usize>,
    /// Whether the reader's checksum work on the frame headers after the damage (the
    /// lengths they claim, for those that fit in the journal) passes its bound, twice the
    /// journal's size, so that it reports damage it could not rule out.
    budget_exhausted: bool,
}

fn scan_frames(bytes: &[u8]) -> FrameScan {
    let mut frames = Vec::new();
    let mut at = 0;
    while let Some(end) = intact_frame_end(bytes, at) {
        frames.push((at, end));
        at = end;
    }
    let mut intact_after = Vec::new();
    let mut checked = 0usize;
    let mut budget_exhausted = false;
    for p in at + 1..bytes.len() {
        if bytes[p] != b'@' {
            continue;
        }
        if intact_frame_end(bytes, p).is_some() {
            intact_after.push(p);
        }
        if let Some((len, _)) = frame_header(bytes, p) {
            if p + FRAME_HEADER_LEN + len < bytes.len() {
                checked = checked.saturating_add(len);
                budget_exhausted |= checked > bytes.len().saturating_mul(2);
            }
        }
    }
    FrameScan {
        frames,
        valid_end: at,
        intact_after,
        budget_exhausted,
    }
}

/// A journal's frames, for a violation's message.
fn describe(journal: &[u8]) -> String {
    let scan = scan_frames(journal);
    format!(
        "journal of {} bytes: intact frames {:?}, then damage from byte {} with intact frames at {:?}{}; {:?}",
        journal.len(),
        scan.frames,
        scan.valid_end,
        scan.intact_after,
        if scan.budget_exhausted {
            " (past the checksum budget)"
        } else {
            ""
        },
        String::from_utf8_lossy(&journal[..journal.len().min(2048)])
    )
}

/// What loading must give.
#[derive(Debug)]
enum Expect {
    /// Exactly this state; a refusal (of kind corrupt) only if `may_refuse`.
    State {
        state: SessionSnapshot,
        may_refuse: bool,
    },
    /// A refusal of kind corrupt. `unseen` if the intact frames after the damage all start
    /// in the middle of a line, where a reader looking only at line starts misses them.
    Refused { why: String, unseen: bool },
    /// `base`, a state made from it by exactly `records` records, or a refusal.
    Valid {
        base: SessionSnapshot,
        records: usize,
    },
}

/// The refusal `scan` of `journal` calls for: damage followed by an intact frame.
fn damage_before_intact(journal: &[u8], scan: &FrameScan) -> Option<Expect> {
    let &first = scan.intact_after.first()?;
    let mid_line = |p: &usize| journal[p - 1] != b'\n';
    Some(Expect::Refused {
        why: format!(
            "the frame at byte {} is damaged but an intact frame follows at byte {first}",
            scan.valid_end
        ),
        unseen: !scan.budget_exhausted && scan.intact_after.iter().all(mid_line),
    })
}

fn expect_history(journal: &[u8], written: &[u8], saved: &[SessionSnapshot]) -> Expect {
    let scan = scan_frames(journal);
    if let Some(refused) = damage_before_intact(journal, &scan) {
        return refused;
    }
    let written_frames = scan_frames(written).frames;
    for (i, &(start, end)) in scan.frames.iter().enumerate() {
        match written_frames.get(i) {
            Some(&(s, e)) if journal[start..end] == written[s..e] => {}
            _ => {
                return Expect::Refused {
                    why: format!(
                        "frame {i} (bytes {start}..{end}) is intact but not the frame the saves wrote there"
                    ),
                    unseen: false,
                }
            }
        }
    }
    let state = saved[scan.frames.len().saturating_sub(1).min(saved.len() - 1)].clone();
    Expect::State {
        state,
        may_refuse: scan.budget_exhausted,
    }
}

fn expect_journal(journal: &[u8], base: &SessionSnapshot) -> Expect {
    let scan = scan_frames(journal);
    if let Some(refused) = damage_before_intact(journal, &scan) {
        return refused;
    }
    if scan.frames.is_empty() {
        return Expect::State {
            state: base.clone(),
            may_refuse: scan.budget_exhausted,
        };
    }
    Expect::Valid {
        base: base.clone(),
        records: scan.frames.len() - 1,
    }
}

/// Violations that start with this are the reader dropping the intact frames after damage
/// that all start in the middle of a line (a reader that looks for them only at line
/// starts: the bug `journal_reader` found first, see `fuzz/README.md`).
pub const DROPS_MID_LINE_FRAMES: &str =
    "loading dropped intact records after damage (no intact frame after it starts a line)";

/// Checks what loading gave against what it must give.
fn check_loaded(
    loaded: &agent_session::Result<SessionSnapshot>,
    expect: &Expect,
) -> Result<(), String> {
    let snapshot = match loaded {
        Err(err) => {
            if err.kind() != ErrorKind::Corrupt {
                return Err(format!(
                    "loading failed with {err:?}, of kind {:?}, not corrupt",
                    err.kind()
                ));
            }
            if err.to_string().is_empty() {
                return Err(format!("the load error {err:?} displays as nothing"));
            }
            return match expect {
                Expect::State {
                    state,
                    may_refuse: false,
                } => Err(format!(
                    "loading refused a journal whose intact frames end in a torn tail, instead of giving revision {}: {err}",
                    state.revision()
                )),
                _ => Ok(()),
            };
        }
        Ok(snapshot) => snapshot,
    };
    match expect {
        Expect::State { state, .. } => {
            if snapshot != state {
                return Err(format!(
                    "loading gave revision {} with {} messages, {} tool calls and {} usage entries, not the saved revision {} with {}, {} and {}:\nloaded {snapshot:?}\nsaved  {state:?}",
                    snapshot.revision(),
                    snapshot.transcript().len(),
                    snapshot.tool_calls().len(),
                    snapshot.usage().len(),
                    state.revision(),
                    state.transcript().len(),
                    state.tool_calls().len(),
                    state.usage().len()
                ));
            }
        }
        Expect::Refused { why, unseen } => {
            let prefix = if *unseen {
                DROPS_MID_LINE_FRAMES
            } else {
                "loading accepted a journal it must refuse"
            };
            return Err(format!(
                "{prefix}: {why}; it gave revision {}",
                snapshot.revision()
            ));
        }
        Expect::Valid { base, records } => {
            if snapshot.id() != base.id() || snapshot.created_at() != base.created_at() {
                return Err(format!(
                    "loading gave session {} created at {}, not the base's {} created at {}",
                    snapshot.id(),
                    snapshot.created_at(),
                    base.id(),
                    base.created_at()
                ));
            }
            if snapshot.revision() == base.revision() {
                if snapshot != base {
                    return Err(format!(
                        "loading gave the base's revision with other contents:\nloaded {snapshot:?}\nbase   {base:?}"
                    ));
                }
            } else {
                let all = u64::try_from(*records)
                    .ok()
                    .and_then(|n| base.revision().as_u64().checked_add(n));
                if Some(snapshot.revision().as_u64()) != all {
                    return Err(format!(
                        "loading gave revision {} from a base at {} and {records} intact records: not all of them, nor none",
                        snapshot.revision(),
                        base.revision()
                    ));
                }
            }
        }
    }
    let bytes = snapshot
        .to_json()
        .map_err(|e| format!("the loaded snapshot does not encode: {e}"))?;
    let decoded = SessionSnapshot::from_json(&bytes)
        .map_err(|e| format!("the loaded snapshot, encoded, does not decode: {e}"))?;
    if decoded != *snapshot {
        return Err(format!(
            "the loaded snapshot changed through encode and decode:\nloaded  {snapshot:?}\ndecoded {decoded:?}"
        ));
    }
    Ok(())
}

/// Checks that listing the store agrees with loading.
fn check_listed(
    store: &FileSessionStore,
    loaded: &agent_session::Result<SessionSnapshot>,
) -> Result<(), String> {
    let listing = store
        .list()
        .map_err(|e| format!("listing the store failed: {e}"))?;
    let agrees = match loaded {
        Ok(snapshot) => {
            listing.sessions == [SessionSummary::of(snapshot)] && listing.unreadable.is_empty()
        }
        Err(_) => {
            listing.sessions.is_empty()
                && listing.unreadable.len() == 1
                && listing.unreadable[0].kind() == ErrorKind::Corrupt
        }
    };
    if agrees {
        Ok(())
    } else {
        Err(format!(
            "listing disagrees with loading:\nloaded  {:?}\nlisted  {:?}\nunreadable {:?}",
            loaded.as_ref().map(SessionSummary::of),
            listing.sessions,
            listing.unreadable
        ))
    }
}

/// Saves one more turn after the loaded `snapshot` and checks that it loads back, with a
/// journal of intact frames only.
fn check_continued(
    store: &FileSessionStore,
    snapshot: &SessionSnapshot,
    journal_path: &Path,
) -> Result<(), String> {
    let next = match snapshot.clone().with_appended(
        vec![
            Message::user("one more"),
            Message::assistant(vec![ContentBlock::text("done")]),
        ],
        vec![Usage::new(JOURNAL_MODEL).with_tokens(1, 1)],
        snapshot.updated_at().max(snapshot.created_at()),
    ) {
        Ok(next) => next,
        // Usage totals that would overflow: nothing to save.
        Err(e) if e.kind() == ErrorKind::InvalidInput => return Ok(()),
        Err(e) => {
            return Err(format!(
                "appending a turn to the loaded state failed: {e:?}"
            ))
        }
    };
    let saved = store.save(&next);
    if snapshot.revision().as_u64() == u64::MAX {
        return match saved {
            Err(e) if e.kind() == ErrorKind::InvalidInput => Ok(()),
            other => Err(format!(
                "saving after the largest revision gave {other:?}, not a refusal"
            )),
        };
    }
    let revision = saved.map_err(|e| {
        format!(
            "saving one more turn after the loaded revision {} failed: {e}",
            snapshot.revision()
        )
    })?;
    if revision != snapshot.revision().next() {
        return Err(format!(
            "saving one more turn after revision {} stored revision {revision}",
            snapshot.revision()
        ));
    }
    let expected = next.with_revision(revision);
    let reloaded = store
        .load(expected.id())
        .map_err(|e| format!("the state saved after the loaded one does not load: {e}"))?;
    if reloaded != expected {
        return Err(format!(
            "the state saved after the loaded one loads back different:\nsaved  {expected:?}\nloaded {reloaded:?}"
        ));
    }
    let journal = read_or_empty(journal_path)?;
    let scan = scan_frames(&journal);
    if scan.valid_end != journal.len() {
        return Err(format!(
            "after a save the journal still holds damaged bytes: {}",
            describe(&journal)
        ));
    }
    check_listed(store, &Ok(reloaded)).map_err(|v| format!("after one more save, {v}"))
}

// ----------------------------------------------------------------------------------------
// log_entry

/// The session of every `log_entry` log.
pub const LOG_SESSION: &str = "fuzz-log";

/// The checkpoint every `log_entry` log starts from, at revision 1: two turns, the first
/// with a tool round, two usage entries and metadata (`with_tools` false: one plain turn).
///
/// # Errors
///
/// If it does not build (a bug of the check).
pub fn log_checkpoint(with_tools: bool) -> Result<SessionSnapshot, String> {
    let id = SessionId::parse(LOG_SESSION).map_err(|e| e.to_string())?;
    let created = at_minute(0)?;
    let mut transcript = vec![Message::user("first")];
    if with_tools {
        transcript.push(Message::assistant(vec![ContentBlock::tool_call(
            ToolCall::new("c0", "lookup", json!({ "q": "first" })),
        )]));
        transcript.push(Message::tool_result(ToolResult::new("c0", "found")));
    }
    transcript.push(Message::assistant(vec![ContentBlock::text("one")]));
    transcript.push(Message::user("second"));
    transcript.push(Message::assistant(vec![ContentBlock::text("two")]));
    Ok(SessionSnapshot::builder(id, JOURNAL_MODEL)
        .metadata_entry("checkpoint", json!(true))
        .transcript(transcript)
        .usage(vec![
            Usage::new(JOURNAL_MODEL).with_tokens(3, 1),
            Usage::new(JOURNAL_MODEL).with_tokens(5, 2),
        ])
        .timestamps(created, created)
        .build()
        .map_err(|e| format!("the log checkpoint does not build: {e}"))?
        .stored_at(Revision::from_u64(1)))
}

/// The stored form of a log entry whose frame payload is `payload`: a frame with its
/// correct length and checksum.
#[must_use]
pub fn entry_frame(payload: &[u8]) -> Vec<u8> {
    frame(payload)
}

/// A log entry's decoder ([`LogEntry::from_bytes`]) and the fold of decoded entries
/// ([`SessionLog`]) on arbitrary bytes.
///
/// Byte 0 of the input picks the mode (`& 3`):
///
/// * 0, **entry**: bytes 1.. are an entry's frame payload (its head and body lines),
///   framed by the check with the right length and checksum, so mutated JSON reaches the
///   head and body decoders;
/// * 1, **raw**: bytes 1.. are the entry's whole stored form, frame header included;
/// * 2 or 3, **log**: bytes 1.. split at [`PIECE_SEPARATOR`] into entries, each framed
///   as in the entry mode (or taken as they are if they start with 0xff), and each one
///   decoded is pushed onto a [`SessionLog`] that starts at [`log_checkpoint`] (with a
///   tool round if bit 2 of byte 0 is clear).
///
/// Properties: never a panic. A refused entry is a typed decoding error
/// ([`Error::Malformed`] of kind corrupt, or [`Error::Inconsistent`] of kind invalid input,
/// at [`Location::Bytes`], corrupt once located in a file). An accepted entry is not a
/// checkpoint, restores only an earlier revision, holds as many messages as its head says,
/// and encodes ([`LogEntry::to_bytes`]) to bytes that decode back to an equal entry and
/// encode to the same bytes again (an entry the crate wrote re-encodes to exactly its own
/// bytes: see `tests/fuzz_regressions.rs`). In the log mode, pushing an entry that is not
/// the next revision is refused as inconsistent; then every revision of the log
/// ([`SessionLog::at`]), its head, its revisions and its history are worked out or refused
/// with a typed error (inconsistent, too deep, or for revisions it does not hold
/// `RevisionNotFound`, of kind not found), and when the head is worked out: it is the
/// state at the last revision; every state worked out validates (it encodes and decodes
/// back equal), has the revision asked for and the view length the revisions list for it;
/// the revisions list one per entry, of its kind, after the checkpoint; the head counts
/// the rewinds, compactions and restores among them; and the history's view is the
/// head's transcript.
///
/// # Errors
///
/// The first property the input breaks.
pub fn log_entry(data: &[u8]) -> Result<(), String> {
    let mode = data.first().copied().unwrap_or(0);
    let body = data.get(1..).unwrap_or_default();
    match mode & 3 {
        0 => decode_entry(&frame(body)).map(drop),
        1 => decode_entry(body).map(drop),
        _ => {
            let checkpoint = log_checkpoint(mode & 4 == 0)?;
            let mut log = SessionLog::new(checkpoint.clone());
            let mut kinds = vec![EntryKind::Checkpoint];
            for piece in body.split(|&b| b == PIECE_SEPARATOR) {
                let bytes = match piece.split_first() {
                    Some((0xff, raw)) => raw.to_vec(),
                    _ => frame(piece),
                };
                let Some(entry) = decode_entry(&bytes)? else {
                    continue;
                };
                let kind = entry.kind();
                let follows = entry.revision() == log.revision().next();
                match log.push(entry) {
                    Ok(()) if follows => kinds.push(kind),
                    Err(Error::Inconsistent { .. }) if !follows => {}
                    other => {
                        return Err(format!(
                            "pushing an entry {} the last revision {} gave {other:?}",
                            if follows {
                                "right after"
                            } else {
                                "not right after"
                            },
                            log.revision()
                        ))
                    }
                }
            }
            check_log(&log, &kinds)
        }
    }
}

/// Decodes one entry and checks the decoder's properties; the entry if it was accepted.
fn decode_entry(bytes: &[u8]) -> Result<Option<LogEntry>, String> {
    let entry = match LogEntry::from_bytes(bytes) {
        Ok(entry) => entry,
        Err(err) => return check_decode_error(err).map(|()| None),
    };
    if entry.kind() == EntryKind::Checkpoint {
        return Err(format!(
            "an entry of kind checkpoint was accepted: {entry:?}"
        ));
    }
    if entry
        .restored_revision()
        .is_some_and(|base| base >= entry.revision())
    {
        return Err(format!(
            "an entry of revision {} restoring revision {:?} was accepted",
            entry.revision(),
            entry.restored_revision()
        ));
    }
    let id = SessionId::parse(LOG_SESSION).map_err(|e| e.to_string())?;
    let encoded = match entry.to_bytes(&id) {
        Ok(encoded) => encoded,
        // Metadata nested at the reader's limit in the input is one level deeper inside
        // the entry's own encoding check; nothing unreadable is written.
        Err(Error::TooDeep { .. }) if nesting_depth(bytes) >= MAX_JSON_DEPTH - 2 => {
            return Ok(Some(entry))
        }
        Err(e) => return Err(format!("an accepted entry does not encode: {e:?}")),
    };
    let again = LogEntry::from_bytes(&encoded).map_err(|e| {
        format!(
            "an accepted entry, encoded, does not decode: {e}\n{}",
            String::from_utf8_lossy(&encoded)
        )
    })?;
    if again != entry {
        return Err(format!(
            "the entry changed through encode and decode:\nbefore {entry:?}\nafter  {again:?}"
        ));
    }
    let encoded_again = again
        .to_bytes(&id)
        .map_err(|e| format!("a re-decoded entry does not encode: {e}"))?;
    if encoded_again != encoded {
        return Err(format!(
            "the entry's encoding is not stable:\nfirst  {}\nsecond {}",
            String::from_utf8_lossy(&encoded),
            String::from_utf8_lossy(&encoded_again)
        ));
    }
    Ok(Some(entry))
}

/// Whether `err` is one a fold of untrusted entries may give.
fn is_fold_error(err: &Error) -> bool {
    matches!(err, Error::Inconsistent { .. } | Error::TooDeep { .. })
        && err.kind() == ErrorKind::InvalidInput
}

/// Checks the states `log` works out (see [`log_entry`]); `kinds` are the kinds of its
/// revisions, the checkpoint's first.
#[allow(clippy::too_many_lines)] // one property after another
fn check_log(log: &SessionLog, kinds: &[EntryKind]) -> Result<(), String> {
    let first = Revision::from_u64(1);
    let last = log.revision();
    for outside in [
        Revision::NEW,
        Revision::from_u64(last.as_u64().saturating_add(1)),
    ] {
        if outside == last {
            continue;
        }
        match log.at(outside) {
            Err(err @ Error::RevisionNotFound { .. }) if err.kind() == ErrorKind::NotFound => {}
            other => {
                return Err(format!(
                    "revision {outside}, outside the log's {first}..={last}, gave {:?}",
                    other.map(|s| s.revision())
                ))
            }
        }
    }
    let head = match log.head() {
        Ok(head) => head,
        Err(err) if is_fold_error(&err) => {
            // A log that does not make a valid head may still make valid earlier states;
            // whatever they are, they are worked out or refused, never a panic.
            for r in 1..=last.as_u64() {
                if let Err(err) = log.at(Revision::from_u64(r)) {
                    if !is_fold_error(&err) {
                        return Err(format!("revision {r} was refused with {err:?}"));
                    }
                }
            }
            let _ = log.revisions();
            let _ = log.history();
            return Ok(());
        }
        Err(err) => return Err(format!("the log's head was refused with {err:?}")),
    };
    if head.revision() != last {
        return Err(format!(
            "the head is revision {}, the log's last is {last}",
            head.revision()
        ));
    }
    check_round_trip(&head)?;
    let revisions = log
        .revisions()
        .map_err(|e| format!("the head is worked out but the revisions are not: {e:?}"))?;
    let listed: Vec<EntryKind> = revisions.iter().map(|r| r.kind).collect();
    if listed != kinds
        || revisions
            .iter()
            .enumerate()
            .any(|(k, r)| r.revision.as_u64() != k as u64 + 1)
    {
        return Err(format!(
            "the revisions listed {revisions:?} are not one per entry of kinds {kinds:?}"
        ));
    }
    let count = |kind: EntryKind| kinds.iter().filter(|&&k| k == kind).count() as u64;
    let counted = head.history_stats();
    if (counted.rewinds, counted.compactions, counted.restores)
        != (
            count(EntryKind::Rewind),
            count(EntryKind::Compaction),
            count(EntryKind::Restore),
        )
        || counted.oldest_revision != first
    {
        return Err(format!(
            "the head's history {counted:?} does not count the entries {kinds:?}"
        ));
    }
    for info in &revisions {
        match log.at(info.revision) {
            Ok(state) => {
                check_round_trip(&state)?;
                if state.revision() != info.revision || state.transcript().len() != info.messages {
                    return Err(format!(
                        "revision {} is listed with {} messages, but the state worked out is revision {} with {}",
                        info.revision,
                        info.messages,
                        state.revision(),
                        state.transcript().len()
                    ));
                }
                if info.revision == last && state != head {
                    return Err(format!(
                        "the state at the last revision is not the head:\nat   {state:?}\nhead {head:?}"
                    ));
                }
            }
            Err(err) if is_fold_error(&err) && info.revision != last => {}
            Err(err) => {
                return Err(format!(
                    "revision {} was refused with {err:?}",
                    info.revision
                ))
            }
        }
    }
    match log.history() {
        Ok(history) => {
            let view: Vec<&Message> = history.view().collect();
            let expected: Vec<&Message> = head.transcript().iter().collect();
            if view != expected || history.revision != last {
                return Err(format!(
                    "the history's view at revision {} is not the head's transcript",
                    history.revision
                ));
            }
        }
        Err(err) if is_fold_error(&err) => {}
        Err(err) => return Err(format!("the history was refused with {err:?}")),
    }
    Ok(())
}
