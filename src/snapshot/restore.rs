//! Restoring: making an earlier revision's state (its view, options and metadata) the
//! current one again, as a new revision. The undo of a rewind, and time travel's way back.
//!
//! A restore is one small log entry naming the revision it goes back to: a store that
//! appends writes no message, whatever the session's length.

use std::sync::Arc;

use super::{PersistedOptions, Provenance, SessionSnapshot, ToolCallRecord};
use crate::clock;
use crate::error::{Error, Result};
use crate::transcript::Message;

/// What a restore replaces in a session's or a snapshot's parts.
pub(crate) struct RestoreTarget<'a> {
    pub(crate) transcript: &'a mut Arc<Vec<Message>>,
    pub(crate) records: &'a mut Arc<Vec<ToolCallRecord>>,
    pub(crate) provenance: &'a mut Option<Provenance>,
}

/// Checks that `past` is an earlier state of the session `current` is (the same id and
/// creation, a revision no later than the stored one), and gives back its options and
/// metadata for the caller to set; sets the transcript, records and pending entry.
///
/// # Errors
///
/// [`Error::InvalidArgument`] if `past` is of another session, or later than what is
/// stored; nothing is changed then.
pub(crate) fn restore_parts(
    current: &SessionSnapshot,
    past: &SessionSnapshot,
    target: RestoreTarget<'_>,
) -> Result<(PersistedOptions, serde_json::Map<String, serde_json::Value>)> {
    let RestoreTarget {
        transcript,
        records,
        provenance,
    } = target;
    if past.id != current.id || past.created_at != current.created_at {
        return Err(Error::InvalidArgument {
            reason: format!(
                "cannot restore session {} from a revision of {}: restore a revision loaded from the same session (SessionStore::load_at)",
                current.id, past.id
            ),
        });
    }
    let stored = provenance.as_ref().map_or(current.revision, |p| p.revision);
    if past.revision > stored {
        return Err(Error::InvalidArgument {
            reason: format!(
                "cannot restore session {} to revision {}: the session is stored at revision {stored}, so there is nothing later to go back from",
                current.id, past.revision
            ),
        });
    }
    *transcript = Arc::clone(&past.transcript);
    *records = Arc::clone(&past.tool_calls);
    if let Some(provenance) = provenance {
        provenance
            .pending
            .restored(past.revision, past.transcript.len());
    }
    Ok((past.options.clone(), past.metadata.clone()))
}

impl SessionSnapshot {
    /// Makes `past`, an earlier revision of this session ([`SessionStore::load_at`]),
    /// the current state again: its transcript, tool-call records, options and metadata.
    /// Usage stays as it is (the completions since were paid for), and the update time is
    /// now. Saving it stores a new revision, so the revisions between stay in the history
    /// and a restore can itself be undone.
    ///
    /// A snapshot loaded from a store stays one that derives from it, so its save appends
    /// one small entry naming `past`'s revision. To restore a stored session in one call,
    /// use [`SessionStore::restore`]; a live session, [`Session::restore_from`].
    ///
    /// [`SessionStore::load_at`]: crate::SessionStore::load_at
    /// [`SessionStore::restore`]: crate::SessionStore::restore
    /// [`Session::restore_from`]: crate::Session::restore_from
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `past` is of another session (or of an earlier
    /// session under the same id), or of a revision later than this snapshot's; nothing
    /// is changed then.
    ///
    /// # Examples
    ///
    /// ```
    /// use agent_session::{ContentBlock, MemorySessionStore, Message, Revision, RewindTo,
    ///     SessionId, SessionSnapshot, SessionStore, SessionStoreExt};
    ///
    /// let store = MemorySessionStore::new();
    /// let id = SessionId::parse("s")?;
    /// let first = store.save(&SessionSnapshot::builder(id.clone(), "m")
    ///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
    ///     .build()?)?;
    /// store.rewind(&id, RewindTo::LastTurns(1))?;
    ///
    /// let mut head = store.load(&id)?;
    /// head.restore_from(&store.load_at(&id, first)?)?;
    /// store.save(&head)?;
    /// assert_eq!(store.load(&id)?.transcript().len(), 2);
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn restore_from(&mut self, past: &SessionSnapshot) -> Result<()> {
        let mut transcript = Arc::clone(&self.transcript);
        let mut records = Arc::clone(&self.tool_calls);
        let mut provenance = self.provenance.clone();
        let (options, metadata) = restore_parts(
            self,
            past,
            RestoreTarget {
                transcript: &mut transcript,
                records: &mut records,
                provenance: &mut provenance,
            },
        )?;
        self.transcript = transcript;
        self.tool_calls = records;
        self.provenance = provenance;
        self.options = options;
        self.metadata = metadata;
        self.metadata_too_deep = None;
        self.updated_at = clock::next_stamp(self.updated_at, self.created_at);
        Ok(())
    }
}
