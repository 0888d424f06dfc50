//! The checks every store makes the same way, public so a custom [`SessionStore`]
//! makes them exactly as the crate's stores do: the compare-and-swap of a save, the
//! conditional delete, the page size, and the id inside a stored snapshot.

use chrono::{DateTime, Utc};

#[cfg(doc)]
use super::SessionStore;
use super::SessionSummary;
use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};

/// The compare-and-swap check of [`SessionStore::save`]: `Ok` if a snapshot of session
/// `id` read at revision `expected` may be stored now that the store holds `stored`
/// (`None`: nothing under that id).
///
/// A save may go ahead only if the stored revision is still `expected`, or, for
/// [`Revision::NEW`], if nothing is stored. Call it where the store decides, under its
/// lock or inside its transaction, so no other writer lands between the check and the
/// write.
///
/// # Errors
///
/// [`Error::Conflict`] if the revision moved (or the session was created or deleted
/// meanwhile); [`Error::InvalidArgument`] if `expected` is the largest revision, which
/// [`Revision::next`] cannot move past (saving again would defeat the check for every
/// later writer).
///
/// # Examples
///
/// ```
/// use agent_session::{check_revision, Revision, SessionId};
///
/// let id = SessionId::parse("s")?;
/// let one = Revision::from_u64(1);
/// assert!(check_revision(&id, Revision::NEW, None).is_ok());
/// assert!(check_revision(&id, one, Some(one)).is_ok());
/// let err = check_revision(&id, one, Some(Revision::from_u64(2))).unwrap_err();
/// assert!(err.is_conflict());
/// # Ok::<(), agent_session::Error>(())
/// ```
pub fn check_revision(id: &SessionId, expected: Revision, stored: Option<Revision>) -> Result<()> {
    let ok = match stored {
        None => expected == Revision::NEW,
        Some(found) => found == expected,
    };
    if !ok {
        return Err(Error::conflict(id, expected, stored));
    }
    if expected.as_u64() == u64::MAX {
        // `next()` saturates; saving again at the same revision would defeat the
        // compare-and-swap for every later writer.
        return Err(Error::InvalidArgument {
            reason: format!("session {id} is at the largest revision and cannot be saved again"),
        });
    }
    Ok(())
}

/// What a store holds now for a session, as far as
/// [`SessionStore::delete_if_unchanged`] compares it with a listing: [`check_unchanged`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredVersion {
    /// The stored revision.
    pub revision: Revision,
    /// When the stored session was created (a session deleted and saved again under the
    /// same id starts over at revision one, so the revision alone cannot tell them apart).
    pub created_at: DateTime<Utc>,
    /// Whether it is archived (always `false` for a store that cannot archive).
    pub archived: bool,
}

impl From<&SessionSummary> for StoredVersion {
    fn from(summary: &SessionSummary) -> Self {
        StoredVersion {
            revision: summary.revision,
            created_at: summary.created_at,
            archived: summary.archived,
        }
    }
}

/// The check of [`SessionStore::delete_if_unchanged`]: `Ok` if the session `listed`
/// describes is still as listed, now that the store holds `stored` for it (`None`: no
/// such session). Call it where the store decides, under its lock or inside its
/// transaction, and delete only if it passes.
///
/// # Errors
///
/// [`Error::NotFound`] if nothing is stored; [`Error::Changed`] saying what changed (the
/// session was re-created, saved, archived or restored since it was listed).
///
/// # Examples
///
/// ```
/// use agent_session::{check_unchanged, Revision, SessionId, SessionSnapshot, SessionSummary,
///     StoredVersion};
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m").build()?;
/// let listed = SessionSummary::of(&snapshot);
/// assert!(check_unchanged(&listed, Some(StoredVersion::from(&listed))).is_ok());
///
/// let saved_since = StoredVersion { revision: Revision::from_u64(7), ..StoredVersion::from(&listed) };
/// assert!(check_unchanged(&listed, Some(saved_since)).unwrap_err().is_conflict());
/// # Ok::<(), agent_session::Error>(())
/// ```
pub fn check_unchanged(listed: &SessionSummary, stored: Option<StoredVersion>) -> Result<()> {
    let id = &listed.id;
    let Some(StoredVersion {
        revision,
        created_at,
        archived,
    }) = stored
    else {
        return Err(Error::NotFound { id: id.clone() });
    };
    let change = if created_at != listed.created_at {
        format!(
            "it was deleted and created again at {created_at}, after the listed one of {}",
            listed.created_at
        )
    } else if revision != listed.revision {
        format!(
            "it was saved at revision {revision} after the listed revision {}",
            listed.revision
        )
    } else if archived != listed.archived {
        if archived {
            "it was archived"
        } else {
            "it was restored from the archive"
        }
        .to_owned()
    } else {
        return Ok(());
    };
    Err(Error::Changed {
        id: id.clone(),
        change,
    })
}

/// The check of [`SessionStore::list_page`]: refuses a page size of 0, since a page that
/// can hold nothing would end any walk.
///
/// # Errors
///
/// [`Error::InvalidArgument`] if `limit` is 0.
///
/// # Examples
///
/// ```
/// use agent_session::check_page_limit;
///
/// assert!(check_page_limit(50).is_ok());
/// assert!(check_page_limit(0).is_err());
/// ```
pub fn check_page_limit(limit: usize) -> Result<()> {
    if limit == 0 {
        return Err(Error::InvalidArgument {
            reason: "a page of sessions must hold at least one (limit 0)".to_owned(),
        });
    }
    Ok(())
}

/// The check of [`SessionStore::load`] on what it read: `Ok` if the snapshot stored for
/// session `expected` (at `location`, for the error) names that session, `found`. A
/// snapshot renamed, copied or filed under another id is refused, so one session cannot
/// pose as another.
///
/// # Errors
///
/// [`Error::IdMismatch`] naming `location`.
///
/// # Examples
///
/// ```
/// use agent_session::{check_stored_id, Location, SessionId};
///
/// let key = SessionId::parse("alpha")?;
/// let inside = SessionId::parse("bravo")?;
/// let err = check_stored_id(&key, &inside, &Location::Stored("kv sessions/alpha".into()))
///     .unwrap_err();
/// assert!(err.is_corrupt());
/// assert!(err.to_string().contains("kv sessions/alpha"));
/// # Ok::<(), agent_session::Error>(())
/// ```
pub fn check_stored_id(expected: &SessionId, found: &SessionId, location: &Location) -> Result<()> {
    if found == expected {
        Ok(())
    } else {
        Err(Error::IdMismatch {
            location: location.clone(),
            expected: expected.clone(),
            found: found.to_string(),
        })
    }
}
