//! Recognising a save retried after its acknowledgement was lost.

use super::SessionSnapshot;
use crate::error::Result;

impl SessionSnapshot {
    /// Whether `stored` (the stored form of the log entry at this snapshot's next
    /// revision) is what saving this snapshot writes: then the store holds this save
    /// already, and a retry of it (its acknowledgement lost to a timeout or a dropped
    /// connection) gets that revision back instead of a conflict. An entry is a pure
    /// function of the snapshot (its times included), so a different change never
    /// matches; two writers making byte-identical changes want the same state anyway.
    pub(crate) fn is_stored_as_entry(&self, stored: &[u8]) -> Result<bool> {
        let revision = self.revision().next();
        if let Some(entry) = self.entry_since_stored(revision) {
            if entry.to_bytes(self.id())? == stored {
                return Ok(true);
            }
        }
        Ok(self.entry_replacing_all(revision)?.to_bytes(self.id())? == stored)
    }

    /// Whether `stored` (a stored checkpoint: a session's first save, or one that
    /// replaced its history) is this snapshot saved whole at its next revision.
    pub(crate) fn is_stored_as_checkpoint(&self, stored: &[u8]) -> Result<bool> {
        Ok(self.to_json_with_revision(self.revision().next())? == stored)
    }
}
