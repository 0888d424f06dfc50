//! Export bundles: sessions in one self-contained, versioned file that any store imports.
//!
//! The format is JSON Lines: a header line, then one snapshot per line, each in its own
//! compact JSON form (the bytes [`SessionSnapshot::to_json`] writes, which never contain a
//! raw newline). The header counts the lines and holds a CRC-32 of each, so a file cut
//! short or damaged in transit is refused even where the damage would still decode (a
//! digit changed in a message). `docs/FORMAT.md` ("Export bundles") describes it.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::already_exists;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::json::ObjectOnly;
use crate::snapshot::Lineage;
use crate::snapshot::SessionSnapshot;
use crate::store::{AsyncSessionStore, SessionSummary, DEFAULT_MAX_SNAPSHOT_BYTES};

/// The bundle format version this release writes and reads.
pub const BUNDLE_VERSION: u32 = 1;

/// The header line of a bundle.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    agent_session_bundle: u64,
    exported_at: DateTime<Utc>,
    sessions: usize,
    /// The CRC-32 (IEEE) of each session's line, without its newline, as 8 lowercase hex
    /// digits.
    crc32: Vec<String>,
}

/// The checksum a header records for a session's line.
fn line_crc(line: &[u8]) -> String {
    format!("{:08x}", crc32fast::hash(line))
}

/// Just enough of a document to tell a snapshot (of any version) from something else.
#[derive(Deserialize)]
struct SnapshotProbe {
    schema_version: Option<u64>,
}

/// Just enough of a first line to tell a bundle (of any version) from a snapshot.
#[derive(Deserialize)]
struct Probe {
    agent_session_bundle: Option<u64>,
}

/// Sessions exported together: made by [`SessionStoreExt::export`](super::SessionStoreExt::export) (or [`Bundle::new`]),
/// written with [`to_json`](Self::to_json), read back with [`from_json`](Self::from_json)
/// and imported with [`SessionStoreExt::import`](super::SessionStoreExt::import).
///
/// Reading a bundle validates every session in it exactly as a load does (strict decoding,
/// size and depth limits, consistency, older schema versions upgraded), and refuses the
/// bundle as a whole if any session fails, if two share an id, or if the file was cut
/// short. Archive state is not part of a bundle: imported sessions are active.
///
/// # Examples
///
/// ```
/// use agent_session::{Bundle, ImportIds, MemorySessionStore, Message, SessionId, SessionSnapshot,
///     SessionStore, SessionStoreExt};
///
/// let here = MemorySessionStore::new();
/// let id = SessionId::parse("notes")?;
/// here.save(&SessionSnapshot::builder(id.clone(), "m").transcript(vec![Message::user("hi")]).build()?)?;
///
/// let file: Vec<u8> = here.export(&[id.clone()])?.to_json()?;
///
/// let there = MemorySessionStore::new();
/// let imported = there.import(&Bundle::from_json(&file)?, &ImportIds::Keep)?;
/// assert_eq!(imported[0].id, id);
/// assert_eq!(there.load(&id)?.transcript(), here.load(&id)?.transcript());
///
/// // Importing again under the same ids is refused as a whole; fresh ids work.
/// assert!(there.import(&Bundle::from_json(&file)?, &ImportIds::Keep).is_err());
/// let copy = there.import(&Bundle::from_json(&file)?, &ImportIds::Fresh)?;
/// assert_ne!(copy[0].id, id);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    exported_at: DateTime<Utc>,
    sessions: Vec<SessionSnapshot>,
}

impl Bundle {
    /// A bundle of `sessions`, exported now.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if two sessions have the same id.
    pub fn new(sessions: Vec<SessionSnapshot>) -> Result<Self> {
        if let Some(id) = first_duplicate(sessions.iter().map(SessionSnapshot::id)) {
            return Err(Error::InvalidArgument {
                reason: format!("session {id} is given twice; a bundle holds each session once"),
            });
        }
        Ok(Bundle {
            exported_at: Utc::now(),
            sessions,
        })
    }

    /// The sessions, in the order they were exported.
    #[must_use]
    pub fn sessions(&self) -> &[SessionSnapshot] {
        &self.sessions
    }

    /// When the bundle was made.
    #[must_use]
    pub fn exported_at(&self) -> DateTime<Utc> {
        self.exported_at
    }

    /// Encodes the bundle: a header line, then one compact snapshot per line.
    ///
    /// # Errors
    ///
    /// As [`SessionSnapshot::to_json`].
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let lines = self
            .sessions
            .iter()
            .map(SessionSnapshot::to_json)
            .collect::<Result<Vec<_>>>()?;
        let header = Header {
            agent_session_bundle: u64::from(BUNDLE_VERSION),
            exported_at: self.exported_at,
            sessions: lines.len(),
            crc32: lines.iter().map(|line| line_crc(line)).collect(),
        };
        // A header of plain strings and numbers always encodes.
        let mut out = serde_json::to_vec(&header).unwrap_or_default();
        out.push(b'\n');
        for line in lines {
            out.extend_from_slice(&line);
            out.push(b'\n');
        }
        Ok(out)
    }

    /// Decodes and validates a bundle, or a single snapshot file (`<id>.json`, as a
    /// bundle of one). Each session may be at most [`DEFAULT_MAX_SNAPSHOT_BYTES`] long,
    /// whatever limit the exporting store was opened with.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidBundle`], naming the entry at fault, if the header is malformed or
    /// of a newer version, the file holds more or fewer sessions than its header says, a
    /// session fails validation (its error is the source), a session is larger than
    /// [`DEFAULT_MAX_SNAPSHOT_BYTES`], or two sessions share an id.
    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        let (first, rest) = match memchr::memchr(b'\n', bytes) {
            Some(end) => (&bytes[..end], &bytes[end + 1..]),
            None => (bytes, &[][..]),
        };
        let is_bundle = matches!(
            serde_json::from_slice::<Probe>(first),
            Ok(Probe {
                agent_session_bundle: Some(_)
            })
        );
        if !is_bundle {
            return Bundle::of_one_snapshot(bytes);
        }
        let ObjectOnly(header): ObjectOnly<Header> = serde_json::from_slice(first)
            .map_err(|e| refuse(None, format!("its header line is malformed ({e})"), None))?;
        if header.agent_session_bundle != u64::from(BUNDLE_VERSION) {
            return Err(refuse(
                None,
                format!(
                    "it is bundle format version {}, and this release reads version {BUNDLE_VERSION}: {}",
                    header.agent_session_bundle,
                    if header.agent_session_bundle > u64::from(BUNDLE_VERSION) {
                        "upgrade agent-session to import it"
                    } else {
                        "no release of agent-session writes that version, so the file is damaged or was written by another program"
                    }
                ),
                None,
            ));
        }
        let body = rest.strip_suffix(b"\n").unwrap_or(rest);
        let lines: Vec<&[u8]> = if body.is_empty() {
            Vec::new()
        } else {
            body.split(|&b| b == b'\n').collect()
        };
        if lines.len() != header.sessions || header.crc32.len() != header.sessions {
            return Err(refuse(
                None,
                format!(
                    "its header announces {} sessions (with {} checksums) but it holds {} lines after the header (cut short, or edited)",
                    header.sessions,
                    header.crc32.len(),
                    lines.len()
                ),
                None,
            ));
        }
        let sessions = lines
            .into_iter()
            .zip(&header.crc32)
            .enumerate()
            .map(|(entry, (line, crc))| session_line(entry, line, crc))
            .collect::<Result<Vec<_>>>()?;
        if let Some(id) = first_duplicate(sessions.iter().map(SessionSnapshot::id)) {
            return Err(refuse(None, format!("session {id} appears twice"), None));
        }
        Ok(Bundle {
            exported_at: header.exported_at,
            sessions,
        })
    }

    /// A single snapshot file, as a bundle of one.
    fn of_one_snapshot(bytes: &[u8]) -> Result<Self> {
        check_size(None, bytes)?;
        match SessionSnapshot::from_json(bytes) {
            Ok(snapshot) => Bundle::new(vec![snapshot]),
            Err(e) => {
                let looks_like_a_snapshot = matches!(
                    serde_json::from_slice::<SnapshotProbe>(bytes),
                    Ok(SnapshotProbe {
                        schema_version: Some(_)
                    })
                );
                let problem = if looks_like_a_snapshot {
                    "it is a session snapshot, and it cannot be read"
                } else {
                    "it is neither an export bundle (a first line {\"agent_session_bundle\":1,...}) nor a session snapshot"
                };
                Err(refuse(None, problem.to_owned(), Some(e)))
            }
        }
    }
}

/// The refusal of a bundle, for `entry` (a 0-based session index) if the problem is in one
/// session.
fn refuse(entry: Option<usize>, problem: String, source: Option<Error>) -> Error {
    Error::InvalidBundle {
        entry,
        problem,
        source: source.map(|e| Box::new(e) as crate::error::BoxError),
    }
}

/// Refuses a snapshot larger than a load would read.
fn check_size(entry: Option<usize>, bytes: &[u8]) -> Result<()> {
    if bytes.len() as u64 > DEFAULT_MAX_SNAPSHOT_BYTES {
        return Err(refuse(
            entry,
            format!(
                "the session is {} bytes, more than the {DEFAULT_MAX_SNAPSHOT_BYTES}-byte limit of a load",
                bytes.len()
            ),
            None,
        ));
    }
    Ok(())
}

/// The session on the `entry`-th line after the header, checked against its checksum and
/// then validated as a load.
fn session_line(entry: usize, line: &[u8], crc: &str) -> Result<SessionSnapshot> {
    let found = line_crc(line);
    if found != crc {
        let hint = if line.ends_with(b"\r") {
            " (its lines end in CR LF: was it converted to Windows line endings? convert it back)"
        } else {
            ""
        };
        return Err(refuse(
            Some(entry),
            format!(
                "its checksum is {found}, not the {crc} the header records: the file was damaged or edited after export{hint}"
            ),
            None,
        ));
    }
    check_size(Some(entry), line)?;
    SessionSnapshot::from_json(line).map_err(|e| {
        refuse(
            Some(entry),
            "the session is not a valid snapshot".to_owned(),
            Some(e),
        )
    })
}

/// The first id that `ids` yields twice.
fn first_duplicate<'a>(ids: impl Iterator<Item = &'a SessionId>) -> Option<&'a SessionId> {
    let mut seen = HashSet::new();
    ids.into_iter().find(|id| !seen.insert(*id))
}

/// Which ids [`SessionStoreExt::import`](super::SessionStoreExt::import) gives the sessions of a bundle.
///
/// # Examples
///
/// ```
/// use std::collections::HashMap;
/// use agent_session::{ImportIds, SessionId};
///
/// let rename = ImportIds::Map(HashMap::from([(SessionId::parse("old")?, SessionId::parse("new")?)]));
/// assert_eq!(rename.target(&SessionId::parse("old")?).as_str(), "new");
/// assert_eq!(rename.target(&SessionId::parse("other")?).as_str(), "other");
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImportIds {
    /// Keep every session's id (refused if one is taken).
    Keep,
    /// Give every session a newly generated id ([`SessionId::generate`]).
    Fresh,
    /// Rename the sessions the map names; keep the others' ids.
    Map(HashMap<SessionId, SessionId>),
}

impl ImportIds {
    /// The id a session exported as `id` is imported under ([`ImportIds::Fresh`] makes a
    /// new one on every call).
    #[must_use]
    pub fn target(&self, id: &SessionId) -> SessionId {
        match self {
            ImportIds::Keep => id.clone(),
            ImportIds::Fresh => SessionId::generate(),
            ImportIds::Map(map) => map.get(id).unwrap_or(id).clone(),
        }
    }
}

/// Where [`SessionStoreExt::import`](super::SessionStoreExt::import) put one session of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Imported {
    /// Its id in the bundle.
    pub from: SessionId,
    /// Its id in the store.
    pub id: SessionId,
    /// The revision it was stored at (1).
    pub revision: Revision,
    /// Its creation and update times as the bundle had them, if either was later than
    /// this machine's clock allows ([`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE);
    /// the exporting machine's clock was ahead): such a time was set to the time of the
    /// import, so the session does not stay first in every listing.
    pub clamped_from: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

/// [`AsyncSessionStoreExt::import`](super::AsyncSessionStoreExt::import) for any store
/// (and [`SessionStoreExt::import`](super::SessionStoreExt::import) through an inline one).
pub(crate) async fn import<S: AsyncSessionStore + ?Sized>(
    store: &S,
    bundle: &Bundle,
    ids: &ImportIds,
) -> Result<Vec<Imported>> {
    let renames: HashMap<&SessionId, SessionId> = bundle
        .sessions
        .iter()
        .map(|s| (s.id(), ids.target(s.id())))
        .collect();
    if let Some(id) = first_duplicate(bundle.sessions.iter().map(|s| &renames[s.id()])) {
        return Err(Error::InvalidArgument {
            reason: format!("two sessions of the bundle would both be imported as {id}"),
        });
    }
    // Every copy is made and checked, and every target id looked up, before anything is
    // written: a refused import costs nothing.
    let mut copies = Vec::with_capacity(bundle.sessions.len());
    let now = Utc::now();
    for snapshot in &bundle.sessions {
        let target = renames[snapshot.id()].clone();
        // A fork imported with its parent follows the parent to its new id.
        let lineage = snapshot.lineage().map(|l| Lineage {
            parent: renames.get(&l.parent).unwrap_or(&l.parent).clone(),
            ..l.clone()
        });
        if lineage.as_ref().is_some_and(|l| l.parent == target) {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "session {} would be imported as {target}, the id of the session it was forked from; import it under another id",
                    snapshot.id()
                ),
            });
        }
        let mut copy = snapshot.renamed(target.clone(), lineage);
        let clamped_from = copy.clamp_future_times(now);
        copy.validate()?;
        match store.load(&target).await {
            Err(e) if e.is_not_found() => {}
            Ok(_) => return Err(Error::AlreadyExists { id: target }),
            Err(e) => return Err(e),
        }
        copies.push((snapshot.id(), copy, clamped_from));
    }
    let mut imported: Vec<Imported> = Vec::with_capacity(copies.len());
    let mut written: Vec<SessionSummary> = Vec::with_capacity(copies.len());
    for (from, copy, clamped_from) in copies {
        match store.save(&copy).await {
            Ok(revision) => {
                written.push(SessionSummary::of(&copy.clone().with_revision(revision)));
                imported.push(Imported {
                    from: from.clone(),
                    id: copy.id().clone(),
                    revision,
                    clamped_from,
                });
            }
            Err(e) => return Err(take_back(store, &written, already_exists(e)).await),
        }
    }
    Ok(imported)
}

/// Deletes the sessions an import wrote before `error` stopped it, and returns the error
/// to report: `error` itself, or [`Error::ImportIncomplete`] naming the sessions that could
/// not be deleted (a session another writer changed since is left alone).
async fn take_back<S: AsyncSessionStore + ?Sized>(
    store: &S,
    written: &[SessionSummary],
    error: Error,
) -> Error {
    let mut left: Vec<SessionId> = Vec::new();
    for listed in written {
        match store.delete_if_unchanged(listed).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(_) => left.push(listed.id.clone()),
        }
    }
    if left.is_empty() {
        error
    } else {
        Error::ImportIncomplete {
            left,
            source: Box::new(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::Message;

    fn bundle_of(texts: &[&str]) -> Vec<u8> {
        let sessions = texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                SessionSnapshot::builder(SessionId::parse(&format!("s{i}")).unwrap(), "m")
                    .transcript(vec![Message::user(*text)])
                    .build()
                    .unwrap()
            })
            .collect();
        Bundle::new(sessions).unwrap().to_json().unwrap()
    }

    #[test]
    fn a_change_that_still_decodes_is_caught_by_the_line_checksum() {
        let bytes = bundle_of(&["price 100", "other"]);
        assert_eq!(Bundle::from_json(&bytes).unwrap().sessions().len(), 2);
        let text = String::from_utf8(bytes).unwrap();
        let edited = text.replacen("price 100", "price 900", 1);
        let error = Bundle::from_json(edited.as_bytes()).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, Error::InvalidBundle { entry: Some(0), .. }),
            "{error:?}"
        );
        assert!(message.contains("session 1 (line 2)"), "{message}");
        assert!(message.contains("checksum"), "{message}");
    }

    #[test]
    fn the_error_that_refused_a_session_is_its_source_as_an_error_of_this_crate() {
        let text = String::from_utf8(bundle_of(&["a"])).unwrap();
        let bare = text
            .lines()
            .nth(1)
            .unwrap()
            .replace("\"max_turns\":16", "\"max_turns\":0");
        let error = Bundle::from_json(bare.as_bytes()).unwrap_err();
        let source = std::error::Error::source(&error).expect("a source");
        let cause = source
            .downcast_ref::<Error>()
            .expect("an agent_session::Error");
        assert!(cause.to_string().contains("max_turns"), "{cause}");
    }

    #[test]
    fn a_header_whose_checksums_do_not_match_the_count_is_refused() {
        let text = String::from_utf8(bundle_of(&["a", "b"])).unwrap();
        let (header, rest) = text.split_once('\n').unwrap();
        let mut header: serde_json::Value = serde_json::from_str(header).unwrap();
        header["crc32"].as_array_mut().unwrap().pop();
        let edited = format!("{header}\n{rest}");
        assert!(matches!(
            Bundle::from_json(edited.as_bytes()),
            Err(Error::InvalidBundle { entry: None, .. })
        ));
    }
}
