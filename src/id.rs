//! Identities: [`SessionId`], a validated name that can always be used as a file name;
//! [`Revision`], the version of a stored session that compare-and-swap saves compare; and
//! [`LeaseHolder`], who holds a session's lease (see [`Lease`](crate::Lease)).

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// The longest id accepted, in bytes (ids are ASCII, so also in characters).
pub const MAX_ID_LEN: usize = 128;

/// Names that some file systems treat as devices, refused so a store can move between systems.
const RESERVED_NAMES: &[&str] = &[
    "con", "prn", "aux", "nul", "com0", "com1", "com2", "com3", "com4", "com5", "com6", "com7",
    "com8", "com9", "lpt0", "lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

fn allowlist() -> &'static Regex {
    static ALLOWLIST: OnceLock<Regex> = OnceLock::new();
    // Lowercase only: two ids can never differ by case alone, so they cannot collide on a
    // case-insensitive file system. No dots: an id plus ".json" is always one plain file name,
    // and store-private files (temp files, the lock) all start with a dot.
    ALLOWLIST.get_or_init(|| {
        Regex::new(r"^[a-z0-9][a-z0-9_-]*$").expect("the id allowlist is a valid regex")
    })
}

/// The id of a session: 1 to 128 characters from `a-z`, `0-9`, `-` and `_`, starting with a
/// letter or digit.
///
/// The rules make every id a safe, portable file name: no separators, dots, control
/// characters or Unicode look-alikes can get through, ids differ by more than letter case
/// (so they never collide on case-insensitive file systems), and device names such as `con`
/// are refused. Validation happens in [`SessionId::parse`], so a `SessionId` value is always
/// valid.
///
/// [`SessionId::generate`] returns a fresh [UUIDv7](https://www.rfc-editor.org/rfc/rfc9562)
/// in lowercase hex, which sorts by creation time.
///
/// # Examples
///
/// ```
/// use agent_session::SessionId;
///
/// let id = SessionId::parse("refactor-parser_2")?;
/// assert_eq!(id.as_str(), "refactor-parser_2");
///
/// assert!(SessionId::parse("../secrets").is_err());
/// assert!(SessionId::parse("Upper").is_err());
///
/// let a = SessionId::generate();
/// let b = SessionId::generate();
/// assert!(a < b, "generated ids sort by creation time");
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// Validates `input` as a session id.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] naming the rule `input` breaks: empty, longer than
    /// [`MAX_ID_LEN`], uppercase letters, a leading `-` or `_`, a character outside
    /// `a-z 0-9 - _`, or a reserved device name.
    pub fn parse(input: &str) -> Result<Self> {
        validate(input).map_err(|reason| Error::InvalidId {
            id: input.to_owned(),
            reason,
        })?;
        Ok(SessionId(input.to_owned()))
    }

    /// A fresh id: a UUIDv7 (48-bit millisecond timestamp, then random bits) in lowercase
    /// hyphenated hex. Ids generated later sort after ids generated earlier, also within the
    /// same millisecond in one process.
    #[must_use]
    pub fn generate() -> Self {
        SessionId(uuid::Uuid::now_v7().hyphenated().to_string())
    }

    /// The id as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned string.
    #[must_use]
    pub fn into_string(self) -> String {
        self.0
    }
}

fn validate(input: &str) -> std::result::Result<(), &'static str> {
    if input.is_empty() {
        return Err("it is empty");
    }
    if input.len() > MAX_ID_LEN {
        return Err("it is longer than 128 characters");
    }
    if allowlist().is_match(input) {
        if RESERVED_NAMES.contains(&input) {
            return Err("it is a reserved device name on some file systems");
        }
        return Ok(());
    }
    // Explain the most helpful rule the input breaks.
    if input.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("uppercase letters are not allowed: ids are lowercase so they cannot collide on case-insensitive file systems");
    }
    if input.starts_with(['-', '_', '.']) {
        return Err("it must start with a letter or a digit");
    }
    if input.contains(['/', '\\']) {
        return Err("path separators are not allowed");
    }
    if input.chars().any(char::is_control) {
        return Err("control characters are not allowed");
    }
    Err("only a-z, 0-9, '-' and '_' are allowed")
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for SessionId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        SessionId::parse(s)
    }
}

impl TryFrom<&str> for SessionId {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self> {
        SessionId::parse(s)
    }
}

impl TryFrom<String> for SessionId {
    type Error = Error;

    fn try_from(s: String) -> Result<Self> {
        validate(&s).map_err(|reason| Error::InvalidId {
            id: s.clone(),
            reason,
        })?;
        Ok(SessionId(s))
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        SessionId::try_from(raw).map_err(serde::de::Error::custom)
    }
}

/// The version of a stored session, for compare-and-swap saves.
///
/// A session that was never saved is at [`Revision::NEW`]; each successful save stores the
/// next revision and returns it.
///
/// # Examples
///
/// ```
/// use agent_session::Revision;
///
/// assert_eq!(Revision::NEW.next(), Revision::from_u64(1));
/// assert_eq!(Revision::from_u64(7).to_string(), "7");
/// ```
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Revision(u64);

impl Revision {
    /// The revision of a session that has never been saved.
    pub const NEW: Revision = Revision(0);

    /// A revision from its number.
    #[must_use]
    pub const fn from_u64(n: u64) -> Self {
        Revision(n)
    }

    /// The revision's number.
    #[must_use]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The revision a save stores after this one.
    #[must_use]
    pub const fn next(self) -> Self {
        Revision(self.0.saturating_add(1))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_ids() {
        for ok in ["a", "0", "session-1", "a_b-c", &"x".repeat(MAX_ID_LEN)] {
            assert!(SessionId::parse(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn rejects_paths_and_odd_characters() {
        let bad = [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "/abs",
            "a\0b",
            "a\nb",
            "-lead",
            "_lead",
            ".hidden",
            "a.json",
            "Caps",
            "caf\u{e9}",
            "a\u{2215}b",
            "\u{ff0e}\u{ff0e}",
            "a b",
            "con",
            "nul",
            "lpt1",
            "%2e%2e%2f",
        ];
        for input in bad {
            let err = SessionId::parse(input).unwrap_err();
            assert!(matches!(err, Error::InvalidId { .. }), "{input:?}");
        }
        assert!(SessionId::parse(&"x".repeat(MAX_ID_LEN + 1)).is_err());
    }

    #[test]
    fn generated_ids_are_valid_unique_and_sorted() {
        let ids: Vec<SessionId> = (0..1000).map(|_| SessionId::generate()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} !< {}", pair[0], pair[1]);
        }
        for id in &ids {
            SessionId::parse(id.as_str()).unwrap();
        }
    }

    #[test]
    fn deserializing_validates() {
        let err = serde_json::from_str::<SessionId>("\"../x\"").unwrap_err();
        assert!(err.to_string().contains("invalid session id"));
    }
}

/// Who holds a lease: the machine, the process and a label the application chooses.
///
/// # Examples
///
/// ```
/// use agent_session::LeaseHolder;
///
/// let holder = LeaseHolder::this_process("chat-cli");
/// assert_eq!(holder.pid, std::process::id());
/// assert!(holder.to_string().starts_with("chat-cli (pid "));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseHolder {
    /// The host name of the holder's machine.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// What the application calls the holder (a program name, a user, a worker id).
    pub label: String,
}

impl LeaseHolder {
    /// The process running this code, on this machine, under `label`.
    #[must_use]
    pub fn this_process(label: impl Into<String>) -> Self {
        LeaseHolder {
            host: host_name(),
            pid: std::process::id(),
            label: label.into(),
        }
    }
}

impl fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (pid {} on {})", self.label, self.pid, self.host)
    }
}

/// The host name of this machine (Linux's `/proc/sys/kernel/hostname`, else `$HOSTNAME`),
/// or `"unknown-host"`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}
