//! The checks behind the fuzz targets, written once and shared.
//!
//! Each fuzz target in `fuzz/fuzz_targets/` panics when its check returns `Err`, and
//! `tests/fuzz_regressions.rs` includes this file (`#[path]`) to replay every saved crash
//! input through the very same check under `cargo test`. A check returns `Err` with a
//! description of the violated property; a panic inside the library is a finding too.

use std::path::{Component, Path};

use agent_session::{
    Error, ErrorKind, Location, Message, SessionId, SessionSnapshot, SessionSummary, MAX_ID_LEN,
};
use serde_json::Value;

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
