//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::id::{LeaseHolder, Revision, SessionId};

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The boxed cause an [`Engine`](crate::Engine) returns when a completion fails.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while saving, loading or running a session.
///
/// Each variant carries the data needed to act on it (the session id, the path, the expected
/// and found revision or schema version); the underlying cause, if any, is in
/// [`source()`](std::error::Error::source). To branch on what a caller can do about it, use
/// [`Error::kind`] or the `is_*` helpers rather than matching every variant.
///
/// A failed save or a failed load never modifies anything that is stored.
///
/// # Examples
///
/// ```
/// use agent_session::{ErrorKind, SessionId};
///
/// let err = SessionId::parse("../etc/passwd").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert!(err.to_string().contains("../etc/passwd"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A session id failed validation.
    #[error("invalid session id {id:?}: {reason}")]
    InvalidId {
        /// The rejected input, as given (escaped when displayed).
        id: String,
        /// Which rule it broke.
        reason: &'static str,
    },

    /// No session with this id is stored.
    #[error("session {id} not found")]
    NotFound {
        /// The id that was looked up.
        id: SessionId,
    },

    /// The session exists, but the revision asked for is not one its store keeps: newer
    /// than its head, or older than the oldest revision its history keeps (dropped by a
    /// history retention policy, or saved before the store kept history).
    #[error(
        "session {id} has no revision {revision}: its store keeps revisions {oldest} to {newest}{}",
        if revision < oldest { "; older ones were not kept (a history retention policy dropped them, or they were saved before the store kept history)" } else { "" }
    )]
    RevisionNotFound {
        /// The session.
        id: SessionId,
        /// The revision asked for.
        revision: Revision,
        /// The oldest revision kept.
        oldest: Revision,
        /// The head revision.
        newest: Revision,
    },

    /// A compare-and-swap save found a different revision than the caller last saw.
    #[error(
        "session {id} was changed by another writer (expected revision {expected}, found {}): \
         load it again, reapply your change and save",
        found.map_or_else(|| "none".to_owned(), |r| r.to_string())
    )]
    Conflict {
        /// The session being saved.
        id: SessionId,
        /// The revision the caller based its change on.
        expected: Revision,
        /// The revision in the store, or `None` if the session no longer exists.
        found: Option<Revision>,
    },

    /// Another holder has leased the session for writing: a second
    /// [`acquire_lease`](crate::SessionStore::acquire_lease) without
    /// [`take_over`](crate::LeaseRequest::take_over), or a save made without a lease while
    /// that lease is live.
    #[error(
        "session {id} is open for writing by {holder} since {since} (its lease runs until \
         {expires_at} unless renewed): wait for it to be closed, or take it over \
         (LeaseRequest::take_over, `--take-over` in the CLI) if that process is gone or hung"
    )]
    Leased {
        /// The session.
        id: SessionId,
        /// Who holds it.
        holder: LeaseHolder,
        /// Since when.
        since: DateTime<Utc>,
        /// When the lease ends unless its holder renews it.
        expires_at: DateTime<Utc>,
    },

    /// A save, or a lease renewal, made under a lease that is no longer the session's:
    /// another writer took the session over (or the lease was released). Nothing was
    /// written. Unlike a [`Conflict`](Self::Conflict), loading again and retrying would
    /// write over the new holder: stop writing the session.
    #[error(
        "session {id} is no longer leased to this writer (its lease has epoch {epoch}, the \
         session is at epoch {current}): nothing was written; another writer took the \
         session over or the lease was released, so stop writing it here and load it again \
         to see the current holder's changes"
    )]
    Fenced {
        /// The session.
        id: SessionId,
        /// The epoch of the lease the save was made under.
        epoch: u64,
        /// The session's epoch now (0: no lease was ever taken on it in this store).
        current: u64,
    },

    /// A stored snapshot (or a file store's journal) uses a format version this release
    /// cannot read: a newer one (upgrade the crate), or one no release ever wrote (the
    /// data is damaged or foreign).
    #[error(
        "{} uses format version {found}, but this release reads {}: {}",
        DisplayLocation(location),
        if oldest == supported {
            format!("version {supported} only")
        } else {
            format!("versions {oldest} to {supported}")
        },
        if *found > u64::from(*supported) {
            "upgrade agent-session to read it"
        } else {
            "no release of agent-session writes that version, so it is damaged or was written by another program"
        }
    )]
    UnsupportedSchemaVersion {
        /// Where the snapshot came from.
        location: Location,
        /// The version found in the snapshot.
        found: u64,
        /// The oldest version this release reads (for snapshots,
        /// [`OLDEST_SCHEMA_VERSION`](crate::OLDEST_SCHEMA_VERSION)).
        oldest: u32,
        /// The newest version this release reads (for snapshots,
        /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION)); it reads every version from `oldest`
        /// up to this one.
        supported: u32,
    },

    /// Stored bytes are not a well-formed snapshot (bad JSON, wrong types, unknown fields).
    #[error(
        "{} could not be decoded: it may be damaged or written by another program; \
         restore it from a backup or delete it",
        DisplayLocation(location)
    )]
    Malformed {
        /// Where the snapshot came from.
        location: Location,
        /// The decoder's description of what is wrong, with line and column.
        #[source]
        source: serde_json::Error,
    },

    /// A snapshot is well-formed but its content is inconsistent (for example a tool call
    /// without a result, or a tool-call record that disagrees with the transcript).
    #[error("{} is inconsistent: {problem}", DisplayLocation(location))]
    Inconsistent {
        /// Where the snapshot came from.
        location: Location,
        /// What is inconsistent.
        problem: String,
    },

    /// A stored snapshot names a different session than where it is stored does (a
    /// renamed or copied file, a row or key filed under another id).
    #[error(
        "{} holds session {found:?}, not {expected}: it was renamed or copied; \
         it is refused so one session cannot pose as another",
        DisplayLocation(location)
    )]
    IdMismatch {
        /// Where it was read: [`Location::File`] for a file, [`Location::Stored`] for a
        /// row or key.
        location: Location,
        /// The id its name implies.
        expected: SessionId,
        /// The id written inside it.
        found: String,
    },

    /// A snapshot (stored, or about to be) is larger than the store's limit.
    #[error(
        "{} is {size_bytes} bytes, over the store's limit of {limit_bytes} bytes: \
         raise the store's max_snapshot_bytes setting (on its builder) if it is genuine",
        DisplayLocation(location)
    )]
    TooLarge {
        /// What was refused: [`Location::File`] for a file, [`Location::Stored`] for a row
        /// or key.
        location: Location,
        /// Its size.
        size_bytes: u64,
        /// The configured limit.
        limit_bytes: u64,
    },

    /// A path in the store is not what the store created: a symbolic link, a hard link, a
    /// non-regular file, or a directory that others can read.
    #[error("refusing to use {}: {reason}", path.display())]
    Insecure {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it and what to do.
        reason: &'static str,
    },

    /// A save replaced the stored snapshot, but the directory could not be synced
    /// afterwards, so the new revision is in place yet may not survive a power loss. The
    /// session is at `revision` now ([`Harness::save_session`](crate::Harness::save_session)
    /// records it); saving again makes it durable.
    #[error(
        "session {id} was saved as revision {revision}, but syncing the directory {} failed, \
         so the save may not survive a power loss: save again to make it durable",
        dir.display()
    )]
    NotDurable {
        /// The session saved.
        id: SessionId,
        /// The revision now stored.
        revision: Revision,
        /// The store directory whose fsync failed.
        dir: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// A file in the store directory is not a snapshot this store wrote: its name is not
    /// `<valid id>.json`.
    #[error("{} is not a session snapshot: {reason}; move it out of the store directory", path.display())]
    ForeignFile {
        /// The file.
        path: PathBuf,
        /// Why its name is not a snapshot's.
        reason: &'static str,
    },

    /// A lock (the file store's write lock) was held by another writer for longer than the
    /// store waits for it ([`FileStoreBuilder::lock_timeout`](crate::FileStoreBuilder::lock_timeout)),
    /// so nothing was done. Retrying later may work; a writer that keeps the lock that long
    /// is usually a hung process.
    #[error(
        "{} was held by another writer for {:.1} s, longer than this store waits: nothing was done; \
         retry later, and if it persists look for a hung process of this store (a crashed one \
         never holds it)",
        DisplayLocation(location),
        waited.as_secs_f64()
    )]
    Busy {
        /// The lock that was busy.
        location: Location,
        /// How long the store waited.
        waited: std::time::Duration,
    },

    /// An operating-system I/O call failed.
    #[error(
        "could not {operation} {}{}",
        path.display(),
        if matches!(
            source.kind(),
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
        ) {
            ": the store is read-only here (a read-only mount, or files this user may not write); saves, deletes and archiving need to write to it"
        } else {
            ""
        }
    )]
    Io {
        /// What the store was doing.
        operation: &'static str,
        /// The path it was doing it to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// JSON values (in metadata, tool arguments, tool output or provider blocks) nest
    /// deeper than a stored session can be read back with. Such a value is refused where it
    /// enters a session or snapshot (and never written), so the session stays as it was and
    /// can still be saved.
    #[error(
        "session {id}: {part} nests JSON {depth} levels deep, more than the {limit} a stored \
         session can read back, so it was refused: flatten it (for example, keep deeply \
         nested data as a JSON string)"
    )]
    TooDeep {
        /// The session it was meant for.
        id: SessionId,
        /// What nests too deep: `"metadata"`, `"message 12"`, `"the engine's message"`,
        /// `"the snapshot"`.
        part: String,
        /// How deep it nests (its own object or array counting as 1).
        depth: usize,
        /// The deepest it may nest.
        limit: usize,
    },

    /// A snapshot could not be encoded as JSON.
    #[error("could not encode session {id} as JSON")]
    Encode {
        /// The session being encoded.
        id: SessionId,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },

    /// An argument was rejected (for example `max_turns` of zero, or a cost that is not a
    /// decimal number).
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What is wrong.
        reason: String,
    },

    /// A conditional delete ([`SessionStore::delete_if_unchanged`](crate::SessionStore::delete_if_unchanged),
    /// and so [`prune`](crate::SessionStoreExt::prune)) found the session changed since it
    /// was listed, and deleted nothing.
    #[error("session {id} was not deleted: {change} since it was listed; list the sessions again to decide")]
    Changed {
        /// The session that was to be deleted.
        id: SessionId,
        /// What changed.
        change: String,
    },

    /// A session to create (a fork, an import) would take an id that is already stored.
    #[error(
        "session {id} already exists in this store: choose another id for the new session, \
         or delete the stored one first"
    )]
    AlreadyExists {
        /// The id that is taken.
        id: SessionId,
    },

    /// The store does not implement an optional operation of
    /// [`SessionStore`](crate::SessionStore) (such as archiving).
    #[error("{store} cannot {operation}: implement it for this store, or use a store that can")]
    Unsupported {
        /// The store's type.
        store: &'static str,
        /// What it was asked to do.
        operation: &'static str,
    },

    /// An export bundle was refused: one of its sessions (or the bundle itself) failed
    /// validation, so nothing in it was imported.
    #[error(
        "the export bundle is refused as a whole, so none of its sessions can be imported: {}{problem}",
        entry.map_or_else(String::new, |i| format!("session {} (line {}): ", i + 1, i + 2))
    )]
    InvalidBundle {
        /// The 0-based index of the offending session in the bundle, if the problem is in
        /// one session (displayed 1-based, with its line number in the file).
        entry: Option<usize>,
        /// What is wrong.
        problem: String,
        /// The error that refused the session, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// An import failed partway, and some of the sessions it had written could not be
    /// deleted again (a storage error, or another writer changed them meanwhile).
    #[error(
        "the import failed, and {} session(s) it had written are still stored ({}): delete them by hand, or keep them and import the rest under other ids",
        left.len(),
        left.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    ImportIncomplete {
        /// The sessions left in the store.
        left: Vec<SessionId>,
        /// Why the import failed.
        #[source]
        source: BoxError,
    },

    /// A store's database (for example PostgreSQL) failed or could not be reached;
    /// retrying may help.
    #[error("could not {operation}")]
    Backend {
        /// What the store was doing.
        operation: String,
        /// The database client's error.
        #[source]
        source: BoxError,
    },

    /// [`Harness::resume_latest`](crate::Harness::resume_latest) found no readable session.
    #[error("there is no saved session to resume")]
    NoSessions,

    /// A provider message could not be converted to or from the neutral transcript model.
    #[error("cannot convert {provider} message: {problem}")]
    Conversion {
        /// The provider format (`"openai-chat"`, `"anthropic"`).
        provider: &'static str,
        /// What is wrong with the message.
        problem: String,
    },

    /// The engine (the model client) failed during a turn. The session stays consistent:
    /// see [`Session::send`](crate::Session::send).
    #[error("the engine failed during a turn of session {id}")]
    Engine {
        /// The session whose turn failed.
        id: SessionId,
        /// The engine's error.
        #[source]
        source: BoxError,
    },
}

/// Where a snapshot being decoded came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A file on disk.
    File(PathBuf),
    /// A snapshot in a store that is not file-backed, described by the store (a database
    /// key, a URL).
    Stored(String),
    /// Bytes with no known origin, such as those given to
    /// [`SessionSnapshot::from_json`](crate::SessionSnapshot::from_json).
    Bytes,
}

impl Location {
    pub(crate) fn file(path: &Path) -> Self {
        Location::File(path.to_path_buf())
    }
}

struct DisplayLocation<'a>(&'a Location);

impl fmt::Display for DisplayLocation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Location::File(path) => {
                let kind = match path.extension().and_then(|e| e.to_str()) {
                    Some("journal") => "journal file",
                    _ if path.file_name().is_some_and(|n| n == ".lock") => "the store's write lock",
                    _ => "snapshot file",
                };
                write!(f, "{kind} {}", path.display())
            }
            Location::Stored(description) => write!(f, "stored snapshot {description}"),
            Location::Bytes => f.write_str("the snapshot data"),
        }
    }
}

/// A coarse classification of [`Error`], for deciding what to do about one.
///
/// # Examples
///
/// ```
/// use agent_session::{ErrorKind, MemorySessionStore, SessionId, SessionStore};
///
/// let store = MemorySessionStore::new();
/// let err = store.load(&SessionId::parse("missing")?).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::NotFound);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The session does not exist.
    NotFound,
    /// Another writer got there first: for a save, reload and retry
    /// ([`Error::Conflict`]); see also [`Error::Changed`] and [`Error::AlreadyExists`].
    Conflict,
    /// The caller's input was rejected (an id, options, a snapshot built in memory).
    InvalidInput,
    /// Stored data is damaged, foreign, from a newer release, or unsafe to use.
    Corrupt,
    /// The operating system failed an I/O call; retrying may help.
    Io,
    /// Another writer held a lock for too long ([`Error::Busy`]); retry later.
    Busy,
    /// Another holder has the session for writing ([`Error::Leased`]), or took it over
    /// from this writer ([`Error::Fenced`]): do not retry blindly.
    Leased,
    /// The model client failed.
    Engine,
}

impl Error {
    /// Classifies this error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } | Error::RevisionNotFound { .. } | Error::NoSessions => {
                ErrorKind::NotFound
            }
            Error::Conflict { .. } | Error::AlreadyExists { .. } | Error::Changed { .. } => {
                ErrorKind::Conflict
            }
            Error::InvalidId { .. }
            | Error::InvalidArgument { .. }
            | Error::Encode { .. }
            | Error::TooDeep { .. }
            | Error::Conversion { .. }
            | Error::Unsupported { .. }
            | Error::InvalidBundle { .. } => ErrorKind::InvalidInput,
            Error::Inconsistent { location, .. } => match location {
                Location::Bytes => ErrorKind::InvalidInput,
                Location::File(_) | Location::Stored(_) => ErrorKind::Corrupt,
            },
            Error::UnsupportedSchemaVersion { .. }
            | Error::Malformed { .. }
            | Error::IdMismatch { .. }
            | Error::ForeignFile { .. }
            | Error::TooLarge { .. }
            | Error::Insecure { .. } => ErrorKind::Corrupt,
            Error::Io { .. }
            | Error::NotDurable { .. }
            | Error::ImportIncomplete { .. }
            | Error::Backend { .. } => ErrorKind::Io,
            Error::Engine { .. } => ErrorKind::Engine,
            Error::Busy { .. } => ErrorKind::Busy,
            Error::Leased { .. } | Error::Fenced { .. } => ErrorKind::Leased,
        }
    }

    /// True if the session does not exist.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }

    /// True if another writer got there first: a compare-and-swap save lost
    /// ([`Error::Conflict`]), a conditional delete found the session changed
    /// ([`Error::Changed`]), or a new session's id is taken ([`Error::AlreadyExists`]).
    /// Only the first calls for reloading and saving again.
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        self.kind() == ErrorKind::Conflict
    }

    /// True if stored data is damaged, foreign, from a newer release or unsafe to use.
    #[must_use]
    pub fn is_corrupt(&self) -> bool {
        self.kind() == ErrorKind::Corrupt
    }

    /// The [`Error::Conflict`] of a compare-and-swap save of session `id`, made from the
    /// revision `expected` but refused because the store holds `found` (`None`: nothing).
    /// For custom [`SessionStore`](crate::SessionStore)s whose backend refuses the
    /// conditional write itself; one that decides in its own code calls
    /// [`check_revision`](crate::check_revision) instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{Error, Revision, SessionId};
    ///
    /// let err = Error::conflict(&SessionId::parse("s")?, Revision::from_u64(3), None);
    /// assert!(err.is_conflict());
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    #[must_use]
    pub fn conflict(id: &SessionId, expected: Revision, found: Option<Revision>) -> Self {
        Error::Conflict {
            id: id.clone(),
            expected,
            found,
        }
    }

    pub(crate) fn io(operation: &'static str, path: &Path, source: io::Error) -> Self {
        Error::Io {
            operation,
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn inconsistent(problem: impl Into<String>) -> Self {
        Error::Inconsistent {
            location: Location::Bytes,
            problem: problem.into(),
        }
    }

    /// Names where a snapshot came from in an error raised while decoding it (one whose
    /// location is [`Location::Bytes`]), so the message says which stored snapshot is bad
    /// and [`kind`](Self::kind) says corrupt rather than invalid input. Other errors are
    /// returned unchanged. For custom [`SessionStore`](crate::SessionStore)s.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ErrorKind, Location, SessionSnapshot};
    ///
    /// let err = SessionSnapshot::from_json(b"{}").unwrap_err()
    ///     .at(&Location::Stored("kv://sessions/abc".into()));
    /// assert_eq!(err.kind(), ErrorKind::Corrupt);
    /// assert!(err.to_string().contains("kv://sessions/abc"));
    /// ```
    #[must_use]
    pub fn at(self, location: &Location) -> Self {
        match self {
            Error::Inconsistent {
                location: Location::Bytes,
                problem,
            } => Error::Inconsistent {
                location: location.clone(),
                problem,
            },
            Error::Malformed {
                location: Location::Bytes,
                source,
            } => Error::Malformed {
                location: location.clone(),
                source,
            },
            Error::UnsupportedSchemaVersion {
                location: Location::Bytes,
                found,
                oldest,
                supported,
            } => Error::UnsupportedSchemaVersion {
                location: location.clone(),
                found,
                oldest,
                supported,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12, item 16: advice must fit the store the caller uses.
    #[test]
    fn messages_name_no_store_the_caller_is_not_using() {
        let errors = [
            Error::Unsupported {
                store: "my_app::KvStore",
                operation: "archive sessions",
            },
            Error::TooLarge {
                location: Location::Stored("sessions/row-7".into()),
                size_bytes: 10,
                limit_bytes: 1,
            },
        ];
        for err in errors {
            let text = err.to_string();
            for store in [
                "FileSessionStore",
                "MemorySessionStore",
                "PostgresSessionStore",
            ] {
                assert!(!text.contains(store), "{text}");
            }
        }
    }

    #[test]
    fn messages_are_lowercase_without_trailing_period() {
        let errors = [
            Error::InvalidId {
                id: "a/b".into(),
                reason: "contains '/'",
            },
            Error::io("read", Path::new("/x/y.json"), io::Error::other("boom")),
            Error::inconsistent("tool call c1 has no result"),
        ];
        for err in errors {
            let text = err.to_string();
            assert!(text.chars().next().unwrap().is_lowercase(), "{text}");
            assert!(!text.ends_with('.'), "{text}");
        }
    }

    /// Found in review: a store in a directory its user may only read said "could not
    /// create a temporary file", not why.
    #[test]
    fn an_io_error_for_want_of_write_permission_says_the_store_is_read_only() {
        for kind in [
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::ReadOnlyFilesystem,
        ] {
            let err = Error::io("create a temporary file in", Path::new("/s"), kind.into());
            assert!(err.to_string().contains("read-only"), "{err}");
        }
        let err = Error::io("read", Path::new("/s/a.json"), io::ErrorKind::Other.into());
        assert!(!err.to_string().contains("read-only"), "{err}");
    }

    #[test]
    fn io_error_names_path_and_keeps_cause_in_source() {
        let err = Error::io("read", Path::new("/x/y.json"), io::Error::other("boom"));
        assert!(err.to_string().contains("/x/y.json"));
        assert!(!err.to_string().contains("boom"));
        let source = std::error::Error::source(&err).unwrap();
        assert_eq!(source.to_string(), "boom");
    }

    #[test]
    fn errors_in_a_journal_name_the_journal_file() {
        let err = Error::inconsistent("x").at(&Location::File("/s/a.journal".into()));
        assert!(
            err.to_string().contains("journal file /s/a.journal"),
            "{err}"
        );
        let err = Error::inconsistent("x").at(&Location::File("/s/a.json".into()));
        assert!(err.to_string().contains("snapshot file /s/a.json"), "{err}");
    }

    #[test]
    fn inconsistent_bytes_are_invalid_input_but_stored_ones_are_corrupt() {
        let err = Error::inconsistent("x");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        let err = err.at(&Location::File("/s/a.json".into()));
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert!(err.to_string().contains("/s/a.json"));
    }
}
