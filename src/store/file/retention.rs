//! [`SessionStore::trim_history`](crate::SessionStore::trim_history) for the file store:
//! a session's revisions before a point dropped, in three atomic steps that each leave a
//! log that loads to the same revisions from that point on.
//!
//! 1. The journal is written again (a new file renamed over it) as a header for the base
//!    as it is, a *checkpoint entry* holding the state at the new oldest revision, and the
//!    entries after it: the base's content is no longer read.
//! 2. That state is written as the new base (renamed over it): the journal still follows
//!    it, through its checkpoint entry at the base's revision.
//! 3. The journal is written again in the usual form: a header for the new base and the
//!    entries after it.
//!
//! A crash between two steps leaves a log that loads the same; the next save appends to
//! it, and the next trim finishes the form.

use super::journal;
use super::FileSessionStore;
use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::LogEntry;

impl FileSessionStore {
    /// [`SessionStore::trim_history`](crate::SessionStore::trim_history), under the write
    /// lock.
    pub(super) fn trim_history_locked(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        let stored = self
            .stored_state(id, true)?
            .ok_or_else(|| Error::NotFound { id: id.clone() })?;
        if !stored.verified {
            return Err(Error::inconsistent(format!(
                "session {id} does not load, so its history is not trimmed; load it to see why"
            ))
            .at(&Location::file(&self.path_of(id))));
        }
        let trimmed = self.with_log(id, true, |log| {
            // Nothing before `oldest`, and the log in its usual form (not left half
            // trimmed by a crash, starting from a checkpoint entry).
            if oldest == log.checkpoint.revision() && oldest == stored.base_revision {
                return Ok(None);
            }
            let counts = log.start_counts();
            log.trimmed(oldest).map(|trimmed| Some((counts, trimmed)))
        })?;
        let Some((base_counts, trimmed)) = trimmed else {
            return Ok(0);
        };
        let path = self.path_of(id);
        let journal_path = self.journal_path(id);
        let checkpoint = &trimmed.checkpoint;
        let mut restarted = journal::encode_header(&journal::header_for(
            id,
            stored.base_revision,
            stored.created_at,
            base_counts,
        ))?;
        restarted.extend(LogEntry::checkpoint_of(checkpoint).to_bytes(id)?);
        for entry in &trimmed.entries {
            restarted.extend(entry.to_bytes(id)?);
        }
        let base = checkpoint.to_json_with_revision(oldest)?;
        let settled = journal::encode_journal(checkpoint, checkpoint.counts(), &trimmed.entries)?;
        for (bytes, at) in [(&restarted, &journal_path), (&base, &path)] {
            if bytes.len() as u64 > self.max_snapshot_bytes {
                return Err(Error::TooLarge {
                    location: Location::File(at.clone()),
                    size_bytes: bytes.len() as u64,
                    limit_bytes: self.max_snapshot_bytes,
                });
            }
        }
        // Forks that share a revision about to go get their own copy first.
        self.materialize_forks_sharing(id, Some(oldest))?;
        self.forget(id);
        self.check_journal_slot(id)?;
        // A step whose rename may not be durable stops the trim there: the next step's
        // rename could reach the disk without it.
        let not_durable = |e: Error| match e {
            Error::NotDurable { dir, source, .. } => Error::NotDurable {
                id: id.clone(),
                revision: stored.revision,
                dir,
                source,
            },
            other => other,
        };
        // The view checkpoint may hold a state of a revision the trim drops, and names the
        // base it replaces: it goes first (a trim that cannot remove it trims nothing).
        let view = self.view_path(id);
        match self.fs.remove_file(&view) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove the view checkpoint", &view, e)),
        }
        self.replace_file(id, &journal_path, &restarted)
            .map_err(not_durable)?;
        self.replace_file(id, &path, &base).map_err(not_durable)?;
        self.replace_file(id, &journal_path, &settled)
            .map_err(not_durable)?;
        Ok(trimmed.dropped)
    }
}
