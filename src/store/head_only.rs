//! What a store that keeps only the head answers for the history operations: the pure
//! half of the default implementations of [`SessionStore`](super::SessionStore) and
//! [`AsyncSessionStore`](super::AsyncSessionStore), which differ only in how they load.

use crate::error::{Error, Result};
use crate::id::Revision;
use crate::snapshot::{
    EntryKind, History, HistoryMessage, RevisionInfo, SessionSnapshot, Standing,
};
use crate::store::{check_unchanged, SessionSummary, StoredVersion};

/// The head, if it is at `revision`; the only revision such a store has.
pub(super) fn at(head: SessionSnapshot, revision: Revision) -> Result<SessionSnapshot> {
    if head.revision() == revision {
        return Ok(head);
    }
    Err(not_kept(&head, revision))
}

/// The one revision such a store keeps.
pub(super) fn revisions(head: &SessionSnapshot) -> Vec<RevisionInfo> {
    vec![RevisionInfo {
        revision: head.revision(),
        updated_at: head.updated_at(),
        kind: EntryKind::Checkpoint,
        messages: head.transcript().len(),
        restored_from: None,
    }]
}

/// The history such a store keeps: the view.
pub(super) fn history(head: &SessionSnapshot) -> History {
    History {
        id: head.id().clone(),
        revision: head.revision(),
        oldest_revision: head.revision(),
        messages: head
            .transcript()
            .iter()
            .enumerate()
            .map(|(index, message)| HistoryMessage {
                message: message.clone(),
                added_at: head.revision(),
                standing: Standing::InView { index },
            })
            .collect(),
    }
}

/// A trim to `oldest`: nothing to drop if it is the head, otherwise a revision not kept.
pub(super) fn trim(head: &SessionSnapshot, oldest: Revision) -> Result<u64> {
    if oldest == head.revision() {
        Ok(0)
    } else {
        Err(not_kept(head, oldest))
    }
}

/// Whether `stored` is still the session `listed` describes (the archive state is not
/// known to such a store, so it is taken as listed).
pub(super) fn check_still_listed(listed: &SessionSummary, stored: &SessionSnapshot) -> Result<()> {
    check_unchanged(
        listed,
        Some(StoredVersion {
            revision: stored.revision(),
            created_at: stored.created_at(),
            archived: listed.archived,
        }),
    )
}

/// The error of a store that cannot archive.
pub(super) fn cannot_archive<S: ?Sized>() -> Error {
    Error::Unsupported {
        store: std::any::type_name::<S>(),
        operation: "archive sessions",
    }
}

pub(super) fn cannot_lease<S: ?Sized>() -> Error {
    Error::Unsupported {
        store: std::any::type_name::<S>(),
        operation: "lease sessions (it protects them by compare-and-swap on revisions only)",
    }
}

fn not_kept(head: &SessionSnapshot, revision: Revision) -> Error {
    Error::RevisionNotFound {
        id: head.id().clone(),
        revision,
        oldest: head.revision(),
        newest: head.revision(),
    }
}
