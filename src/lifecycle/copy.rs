//! Copying sessions from one store to another, history included: every revision the
//! source keeps is written to the target as the same change (a turn, a rewind, a
//! compaction, a restore, an edit, an options or metadata change), so the target answers
//! `load`, `load_at`, `revisions` and `history` exactly as the source does.
//!
//! The source's log entries are not part of the [`SessionStore`] trait, so each one is
//! worked out from what the trait gives: the revision list (kind, view length, the
//! revision a restore went back to), the history (every message with the revision that
//! saved it) and the state at each revision. The change is then handed to the target as a
//! snapshot that derives from what the target holds, shaped like the source's entry (the
//! kept range of the earlier view, the messages put before it, the kind), so the target
//! appends that one entry: the cost of a revision is its change, not the session's size.
//!
//! Each session is written, then checked against the source, and deleted again if
//! anything failed: a copy stopped by an error leaves every session either complete on
//! the target or absent.
//!
//! [`SessionStore`]: crate::SessionStore

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Location, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::{EntryKind, History, Pending, RevisionInfo, SessionSnapshot};
use crate::store::{
    ready, AsyncSessionStore, InlineStore, ListScope, SessionStore, SessionSummary,
};
use crate::transcript::Message;
use crate::usage::Usage;

use super::already_exists;

/// What [`copy_sessions`] copies, and what it does about sessions the target already has.
///
/// # Examples
///
/// ```
/// use agent_session::{CopyOptions, ExistingSessions, SessionId};
///
/// let options = CopyOptions::new()
///     .only(vec![SessionId::parse("s1")?])
///     .existing(ExistingSessions::Skip)
///     .dry_run(true);
/// assert!(options.dry_run);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CopyOptions {
    /// Copy only these sessions (default: every session of the source, archived ones
    /// included).
    pub only: Option<Vec<SessionId>>,
    /// What to do about a session the target already holds (default:
    /// [`ExistingSessions::Refuse`]).
    pub existing: ExistingSessions,
    /// Only report what would be copied; nothing is written (default: `false`).
    pub dry_run: bool,
}

impl CopyOptions {
    /// Every session, refusing to copy if the target holds any of them.
    #[must_use]
    pub fn new() -> Self {
        CopyOptions::default()
    }

    /// Copies only the sessions `ids` (each once, in any order: parents still go before
    /// their forks).
    #[must_use]
    pub fn only(mut self, ids: Vec<SessionId>) -> Self {
        self.only = Some(ids);
        self
    }

    /// What to do about sessions the target already holds.
    #[must_use]
    pub fn existing(mut self, existing: ExistingSessions) -> Self {
        self.existing = existing;
        self
    }

    /// Only reports what would be copied.
    #[must_use]
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }
}

/// What [`copy_sessions`] does about a session whose id the target already holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExistingSessions {
    /// Refuse the whole copy with [`Error::AlreadyExists`] naming the first such
    /// session, before anything is written (in a dry run, each is reported as refused).
    #[default]
    Refuse,
    /// Leave it as it is. One whose revisions are those of the source (a session copied
    /// before, by an earlier run that was stopped) is reported as
    /// [`CopyOutcome::Skipped`]; one that differs (another session under the same id, or
    /// a copy cut short by a crash) as [`CopyOutcome::Failed`] with
    /// [`Error::AlreadyExists`], and is not written.
    Skip,
}

/// What [`copy_sessions`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct CopyReport {
    /// Whether this was a dry run (nothing was written).
    pub dry_run: bool,
    /// Every session chosen, in the order they were copied: parents before their forks,
    /// otherwise oldest first.
    pub sessions: Vec<SessionCopy>,
    /// Entries of the source's listing that could not be read (not copied).
    pub unreadable: Vec<Error>,
}

impl CopyReport {
    /// The sessions copied (or, in a dry run, that would be).
    pub fn copied(&self) -> impl Iterator<Item = &SessionCopy> {
        self.sessions
            .iter()
            .filter(|s| matches!(s.outcome, CopyOutcome::Copied | CopyOutcome::WouldCopy))
    }

    /// The sessions that could not be copied.
    pub fn failed(&self) -> impl Iterator<Item = &SessionCopy> {
        self.sessions
            .iter()
            .filter(|s| matches!(s.outcome, CopyOutcome::Failed { .. }))
    }

    /// Whether every session of the source is on the target (copied now, or already
    /// there): nothing failed and nothing was unreadable. Always `false` after a dry run
    /// that found a session the copy would refuse.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.unreadable.is_empty() && self.failed().next().is_none()
    }
}

/// One session of a [`CopyReport`]: which one, how much history the source keeps of it,
/// and what became of it.
#[derive(Debug)]
#[non_exhaustive]
pub struct SessionCopy {
    /// The session (under the same id in both stores).
    pub id: SessionId,
    /// The oldest revision the source keeps (1, unless its history was trimmed).
    pub oldest: Revision,
    /// The source's head revision.
    pub head: Revision,
    /// Whether it is archived in the source (and so, once copied, in the target).
    pub archived: bool,
    /// Where it was forked from, if it is a fork.
    pub parent: Option<SessionId>,
    /// What became of it.
    pub outcome: CopyOutcome,
}

impl SessionCopy {
    /// How many revisions the source keeps, all copied: `head - oldest + 1`.
    #[must_use]
    pub fn revisions(&self) -> u64 {
        self.head.as_u64() - self.oldest.as_u64() + 1
    }
}

/// What became of one session in [`copy_sessions`].
#[derive(Debug)]
#[non_exhaustive]
pub enum CopyOutcome {
    /// Written and checked: the target answers `load`, `load_at` of every kept revision,
    /// `revisions` and `history` exactly as the source did when it was read.
    Copied,
    /// Would be copied (a dry run).
    WouldCopy,
    /// The target already holds it with the source's revisions
    /// ([`ExistingSessions::Skip`]); left as it was.
    Skipped,
    /// Not copied.
    Failed {
        /// Why: the target refused it ([`Error::AlreadyExists`], a size limit, a
        /// lease, a storage error), the source could not be read, or the copy did not
        /// read back as the source ([`Error::Inconsistent`]).
        error: Error,
        /// Whether some of it is still in the target: written before the error, and not
        /// deleted again (a storage error, or another writer changed it meanwhile).
        /// `false`: the target holds nothing of it (or what it held before, for
        /// [`Error::AlreadyExists`]).
        left_on_target: bool,
    },
}

/// Copies sessions from the store `from` to the store `to`, each with every revision
/// `from` keeps, and reports what became of each.
///
/// After the copy, the target answers as the source did for each copied session:
/// [`load`](SessionStore::load), [`load_at`](SessionStore::load_at) of every revision
/// the source keeps, [`revisions`](SessionStore::revisions) (times, kinds of change, view
/// lengths, what each restore went back to) and [`history`](SessionStore::history) (every
/// message with the revision that saved it and where it stands). Revision numbers are
/// kept, so a session resumed from either store is at the same revision, and a fork's
/// [`lineage`](SessionSnapshot::lineage) still names the right revision of its parent
/// (parents are copied before their forks). Archived sessions stay archived.
///
/// - **Cost.** Each revision is written to the target as the one change it was, so
///   writing a session costs its history's size, not its size times its revisions. Each
///   revision is read once from the source ([`load_at`](SessionStore::load_at); a
///   restore's base once more) and once from the target (to check it): reading costs
///   the sum of the views of the revisions.
///   A session whose history the source trimmed (oldest kept revision *n* > 1) starts on
///   the target with *n* − 1 empty revisions, dropped again with
///   [`trim_history`](SessionStore::trim_history) so the numbers line up; they cost a
///   small append each.
/// - **What is not kept.** Forks that share their parent's messages in a
///   [`FileSessionStore`](crate::FileSessionStore) hold their own copy in the target.
///   What the source no longer keeps (revisions trimmed away) is not copied. Leases
///   are not copied: the copy reads the source without one, and the target's sessions
///   start with none.
/// - **Failures.** A session the target refuses (a size limit, a lease on its id, a
///   storage error), or that does not read back as the source, is reported in
///   [`CopyReport::sessions`] and deleted from the target again; the other sessions are
///   still copied. Run the copy again with [`ExistingSessions::Skip`] to copy what is
///   missing. A crash (rather than an error) may leave one session partly written: the
///   next run reports it as differing ([`Error::AlreadyExists`]); delete it from the
///   target and run again.
/// - **Concurrent writers.** A session saved in the source while it is copied fails
///   its check (it no longer reads as it did) and is taken back; copy it again.
///
/// # Errors
///
/// If the source cannot be listed; [`Error::NotFound`] if a session of
/// [`CopyOptions::only`] is not in the source; [`Error::AlreadyExists`] naming the first
/// session the target holds, with [`ExistingSessions::Refuse`] (nothing is written).
/// Anything that concerns one session is in the report instead.
///
/// # Examples
///
/// ```
/// use agent_session::{copy_sessions, ContentBlock, CopyOptions, EntryKind, FileSessionStore,
///     MemorySessionStore, Message, RewindTo, SessionId, SessionSnapshot, SessionStore,
///     SessionStoreExt};
///
/// let source = MemorySessionStore::new();
/// let id = SessionId::parse("notes")?;
/// source.save(&SessionSnapshot::builder(id.clone(), "m")
///     .transcript(vec![Message::user("a"), Message::assistant(vec![ContentBlock::text("b")])])
///     .build()?)?;
/// source.rewind(&id, RewindTo::LastTurns(1))?; // revision 2: the turn is history only
///
/// # let dir = tempfile::tempdir()?;
/// let target = FileSessionStore::open(dir.path())?;
/// let report = copy_sessions(&source, &target, &CopyOptions::new())?;
/// assert!(report.is_complete());
/// assert_eq!(report.sessions[0].revisions(), 2);
///
/// assert_eq!(target.revisions(&id)?, source.revisions(&id)?);
/// assert_eq!(target.revisions(&id)?[1].kind, EntryKind::Rewind);
/// assert_eq!(target.history(&id)?, source.history(&id)?);
/// assert_eq!(target.load(&id)?, source.load(&id)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn copy_sessions<F, T>(from: &F, to: &T, options: &CopyOptions) -> Result<CopyReport>
where
    F: SessionStore + ?Sized,
    T: SessionStore + ?Sized,
{
    ready(copy(&InlineStore(from), &InlineStore(to), options))
}

/// [`copy_sessions`] for async code, between two [`AsyncSessionStore`]s (a PostgreSQL
/// store made with `connect_async`, or any store's
/// [`into_async`](SessionStore::into_async)): the same copy, each call awaited.
///
/// # Errors
///
/// As [`copy_sessions`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use agent_session::{copy_sessions_async, CopyOptions, MemorySessionStore, Message, SessionId,
///     SessionSnapshot, SessionStore};
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let source = Arc::new(MemorySessionStore::new());
/// source.save(&SessionSnapshot::builder(SessionId::parse("s")?, "m")
///     .transcript(vec![Message::user("hi")])
///     .build()?)?;
/// let target = Arc::new(MemorySessionStore::new());
/// let report = copy_sessions_async(
///     &*Arc::clone(&source).into_async(),
///     &*Arc::clone(&target).into_async(),
///     &CopyOptions::new(),
/// ).await?;
/// assert!(report.is_complete());
/// assert_eq!(target.load(&SessionId::parse("s")?)?, source.load(&SessionId::parse("s")?)?);
/// # Ok::<(), agent_session::Error>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn copy_sessions_async<F, T>(
    from: &F,
    to: &T,
    options: &CopyOptions,
) -> Result<CopyReport>
where
    F: AsyncSessionStore + ?Sized,
    T: AsyncSessionStore + ?Sized,
{
    copy(from, to, options).await
}

/// The copy workflow: choose, order, check the target, then copy each session.
async fn copy<F, T>(from: &F, to: &T, options: &CopyOptions) -> Result<CopyReport>
where
    F: AsyncSessionStore + ?Sized,
    T: AsyncSessionStore + ?Sized,
{
    let listed = from.list_scoped(ListScope::All).await?;
    let mut chosen = match &options.only {
        None => listed.sessions,
        Some(ids) => {
            let mut by_id: HashMap<SessionId, SessionSummary> = listed
                .sessions
                .into_iter()
                .map(|s| (s.id.clone(), s))
                .collect();
            let mut chosen = Vec::with_capacity(ids.len());
            for id in ids {
                match by_id.remove(id) {
                    Some(summary) => chosen.push(summary),
                    // Given twice: copied once.
                    None if chosen.iter().any(|s: &SessionSummary| &s.id == id) => {}
                    None => return Err(Error::NotFound { id: id.clone() }),
                }
            }
            chosen
        }
    };
    let unreadable = if options.only.is_some() {
        Vec::new()
    } else {
        listed.unreadable
    };
    order_parents_first(&mut chosen);

    // Which sessions the target holds already, before anything is written (a target
    // that cannot say fails the copy, as an import fails).
    let mut existing: HashMap<SessionId, Vec<RevisionInfo>> = HashMap::new();
    for summary in &chosen {
        match to.revisions(&summary.id).await {
            Err(e) if e.is_not_found() => {}
            Ok(found) => {
                existing.insert(summary.id.clone(), found);
            }
            Err(e) => return Err(e),
        }
    }
    if options.existing == ExistingSessions::Refuse && !options.dry_run {
        if let Some(first) = chosen.iter().find(|s| existing.contains_key(&s.id)) {
            return Err(Error::AlreadyExists {
                id: first.id.clone(),
            });
        }
    }

    let mut report = CopyReport {
        dry_run: options.dry_run,
        sessions: Vec::with_capacity(chosen.len()),
        unreadable,
    };
    for summary in chosen {
        let outcome = match (existing.remove(&summary.id), options.existing) {
            (Some(_), ExistingSessions::Refuse) => refused(&summary.id),
            (Some(target_revisions), ExistingSessions::Skip) => {
                match from.revisions(&summary.id).await {
                    Ok(source_revisions) if source_revisions == target_revisions => {
                        CopyOutcome::Skipped
                    }
                    Ok(_) => refused(&summary.id),
                    Err(error) => CopyOutcome::Failed {
                        error,
                        left_on_target: false,
                    },
                }
            }
            (None, _) if options.dry_run => CopyOutcome::WouldCopy,
            (None, _) => copy_one(from, to, &summary).await,
        };
        report.sessions.push(SessionCopy {
            oldest: summary.history.oldest_revision,
            head: summary.revision,
            archived: summary.archived,
            parent: summary.lineage.as_ref().map(|l| l.parent.clone()),
            id: summary.id,
            outcome,
        });
    }
    Ok(report)
}

fn refused(id: &SessionId) -> CopyOutcome {
    CopyOutcome::Failed {
        error: Error::AlreadyExists { id: id.clone() },
        left_on_target: false,
    }
}

/// Sorts `sessions` oldest first (by creation, then id), then moves every fork after its
/// parent when both are there.
fn order_parents_first(sessions: &mut Vec<SessionSummary>) {
    sessions.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let position: HashMap<SessionId, usize> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();
    let mut placed = HashSet::with_capacity(sessions.len());
    let mut order = Vec::with_capacity(sessions.len());
    for start in 0..sessions.len() {
        // The chain of parents not placed yet, nearest first; a lineage that loops (ids
        // used again) stops where it meets itself.
        let mut chain = Vec::new();
        let mut at = Some(start);
        while let Some(i) = at {
            if placed.contains(&i) || chain.contains(&i) {
                break;
            }
            chain.push(i);
            at = sessions[i]
                .lineage
                .as_ref()
                .and_then(|l| position.get(&l.parent).copied());
        }
        for i in chain.into_iter().rev() {
            placed.insert(i);
            order.push(i);
        }
    }
    let mut taken: Vec<Option<SessionSummary>> =
        std::mem::take(sessions).into_iter().map(Some).collect();
    sessions.extend(order.into_iter().filter_map(|i| taken[i].take()));
}

/// Copies one session: writes it, checks it, and takes back what it wrote on failure.
async fn copy_one<F, T>(from: &F, to: &T, summary: &SessionSummary) -> CopyOutcome
where
    F: AsyncSessionStore + ?Sized,
    T: AsyncSessionStore + ?Sized,
{
    let mut written = None;
    match write_session(from, to, summary, &mut written).await {
        Ok(()) => CopyOutcome::Copied,
        Err(error) => {
            let left_on_target = match written {
                Some(created_at) => !take_back(to, &summary.id, created_at).await,
                None => false,
            };
            CopyOutcome::Failed {
                error,
                left_on_target,
            }
        }
    }
}

/// Writes every revision of session `summary` that `from` keeps to `to`, checks each,
/// and archives it if it is archived in `from`. `written` is set to the session's
/// creation time once anything may have been written.
async fn write_session<F, T>(
    from: &F,
    to: &T,
    summary: &SessionSummary,
    written: &mut Option<chrono::DateTime<chrono::Utc>>,
) -> Result<()>
where
    F: AsyncSessionStore + ?Sized,
    T: AsyncSessionStore + ?Sized,
{
    let id = &summary.id;
    // The history first, then the revisions: a save in between shows as a history
    // that ends before the last revision, and the session is read again.
    let (history, revisions) = read_consistent(from, id).await?;
    let Some(first) = revisions.first() else {
        return Err(mismatch(id, "the source lists no revision of it"));
    };
    let mut bodies = bodies_by_revision(&history);

    // The oldest revision kept: the session's first save on the target.
    let mut state = from.load_at(id, first.revision).await?;
    *written = Some(state.created_at());
    let mut stored = write_checkpoint(to, &state).await?;
    check_state(id, &stored, &state)?;

    for info in &revisions[1..] {
        let next = from.load_at(id, info.revision).await?;
        let body = bodies.remove(&info.revision).unwrap_or_default();
        let base = match info.restored_from {
            Some(base) if info.kind == EntryKind::Restore => Some(base),
            _ => None,
        };
        let base_state = match base {
            Some(base) => Some(from.load_at(id, base).await?),
            None => None,
        };
        let base_view = base_state
            .as_ref()
            .map_or(state.transcript(), SessionSnapshot::transcript);
        let base = base.map(|b| (b, base_view.len()));
        let Some(pending) = pending_of(info.kind, base, base_view, state.usage(), &body, &next)
        else {
            return Err(mismatch(
                id,
                &format!(
                    "revision {} ({}) cannot be told as one change of revision {}",
                    info.revision,
                    info.kind,
                    base.map_or(state.revision(), |(b, _)| b)
                ),
            ));
        };
        let change = change_of(stored, next.clone(), pending);
        let revision = to.save(&change).await?;
        if revision != info.revision {
            return Err(mismatch(
                id,
                &format!(
                    "the target stored revision {} as revision {revision}",
                    info.revision
                ),
            ));
        }
        stored = to.load(id).await?;
        check_state(id, &stored, &next)?;
        state = next;
    }

    if to.revisions(id).await? != revisions {
        return Err(mismatch(id, "its revisions differ from the source's"));
    }
    if to.history(id).await? != history {
        return Err(mismatch(id, "its history differs from the source's"));
    }
    if summary.archived {
        to.set_archived(id, true).await?;
    }
    Ok(())
}

/// The history and revisions of `id` as of one revision: read again if the session was
/// saved between the two reads.
async fn read_consistent<F: AsyncSessionStore + ?Sized>(
    from: &F,
    id: &SessionId,
) -> Result<(History, Vec<RevisionInfo>)> {
    for _ in 0..3 {
        let history = from.history(id).await?;
        let revisions = from.revisions(id).await?;
        let agree = revisions.first().map(|r| r.revision) == Some(history.oldest_revision)
            && revisions.last().map(|r| r.revision) == Some(history.revision);
        if agree {
            return Ok((history, revisions));
        }
    }
    Err(mismatch(
        id,
        "the source changed it while it was read (three times); copy it again when it is idle",
    ))
}

/// The messages each revision saved, in order, from the history.
fn bodies_by_revision(history: &History) -> HashMap<Revision, Vec<Message>> {
    let mut bodies: HashMap<Revision, Vec<Message>> = HashMap::new();
    for message in &history.messages {
        bodies
            .entry(message.added_at)
            .or_default()
            .push(message.message.clone());
    }
    bodies
}

/// Writes `state`, the oldest revision the source keeps, as a new session at the same
/// revision, and returns it as the target loads it. A revision after 1 (the source's
/// history was trimmed) is reached through empty revisions, then trimmed to it.
async fn write_checkpoint<T: AsyncSessionStore + ?Sized>(
    to: &T,
    state: &SessionSnapshot,
) -> Result<SessionSnapshot> {
    let id = state.id();
    let mut parts = state.clone().into_parts();
    parts.revision = Revision::NEW;
    parts.provenance = None;
    parts.history = crate::snapshot::HistoryStats::default();
    // Built anew (no provenance, nothing shared with a parent): saved whole.
    let fresh = SessionSnapshot::from_session_parts(parts);
    to.save(&fresh).await.map_err(already_exists)?;
    let mut stored = to.load(id).await?;
    let oldest = state.revision();
    if stored.revision() < oldest {
        while stored.revision() < oldest {
            let expected = stored.revision().next();
            let mut unchanged = Pending::none(stored.counts());
            unchanged.kind = Some(EntryKind::Metadata);
            let filler = change_of(stored.clone(), stored.clone(), unchanged);
            let revision = to.save(&filler).await?;
            if revision != expected {
                return Err(mismatch(
                    id,
                    &format!("the target stored revision {expected} as revision {revision}"),
                ));
            }
            // Exactly what the target now holds: the next filler appends to it.
            stored = filler;
            stored.mark_stored(revision);
        }
        to.trim_history(id, oldest).await?;
        stored = to.load(id).await?;
    }
    Ok(stored)
}

/// Checks that the target's `stored` state is the source's `expected`.
fn check_state(id: &SessionId, stored: &SessionSnapshot, expected: &SessionSnapshot) -> Result<()> {
    if stored == expected {
        Ok(())
    } else {
        Err(mismatch(
            id,
            &format!(
                "revision {} loads differently from the source's",
                expected.revision()
            ),
        ))
    }
}

fn mismatch(id: &SessionId, problem: &str) -> Error {
    Error::Inconsistent {
        location: Location::Stored(format!("the copy of session {id}")),
        problem: problem.to_owned(),
    }
}

/// Deletes what a failed copy wrote of session `id` (created at `created_at`), unless it
/// is another session now. Returns whether the target holds nothing of it.
async fn take_back<T: AsyncSessionStore + ?Sized>(
    to: &T,
    id: &SessionId,
    created_at: chrono::DateTime<chrono::Utc>,
) -> bool {
    let head = match to.load(id).await {
        Ok(head) => head,
        Err(e) if e.is_not_found() => return true,
        Err(_) => return false,
    };
    if head.created_at() != created_at {
        // Another writer's session under the id (made after the copy's failed first
        // save): not the copy's to delete.
        return false;
    }
    let mut listed = SessionSummary::of(&head);
    for archived in [false, true] {
        listed.archived = archived;
        match to.delete_if_unchanged(&listed).await {
            Ok(()) => return true,
            Err(e) if e.is_not_found() => return true,
            Err(_) => {}
        }
    }
    false
}

/// How one revision's state is made from the one before (or, for a restore, from `base`:
/// the revision it went back to and its view's length): the shape of its log entry, with
/// the messages `body` (those the revision saved, from the history) as the new ones, and
/// the previous usage `previous_usage`; `None` if there is none. Where several fit
/// (equal messages), the one the crate makes for that kind is chosen: a compaction's
/// summary before the kept messages, which run to the end of the view if they can; any
/// other change keeps a range that starts at the first message, and puts nothing before
/// it.
fn pending_of(
    kind: EntryKind,
    base: Option<(Revision, usize)>,
    base_view: &[Message],
    previous_usage: &[Usage],
    body: &[Message],
    next: &SessionSnapshot,
) -> Option<Pending> {
    let view = next.transcript();
    let kept = view.len().checked_sub(body.len())?;
    if kept > base_view.len() {
        return None;
    }
    // suffix[p]: the view's messages after the kept range are body[p..].
    let mut suffix = vec![false; body.len() + 1];
    suffix[body.len()] = true;
    for p in (0..body.len()).rev() {
        suffix[p] = suffix[p + 1] && view[p + kept] == body[p];
    }
    // prefix[p]: the view's first p messages are body[..p].
    let mut prefix = Vec::with_capacity(body.len() + 1);
    prefix.push(true);
    for p in 0..body.len() {
        prefix.push(prefix[p] && view[p] == body[p]);
    }
    let compaction = kind == EntryKind::Compaction;
    let prepends: Box<dyn Iterator<Item = usize>> = if compaction {
        Box::new((0..=body.len()).rev())
    } else {
        Box::new(0..=body.len())
    };
    for prepend in prepends {
        if !(prefix[prepend] && suffix[prepend]) {
            continue;
        }
        let wanted = &view[prepend..prepend + kept];
        let last = base_view.len() - kept;
        let preferred = if compaction { last } else { 0 };
        let Some(start) = std::iter::once(preferred)
            .chain((0..=last).filter(|&s| s != preferred))
            .find(|&s| base_view[s..s + kept] == *wanted)
        else {
            continue;
        };
        let keep = (start, start + kept);
        let replaced_all = keep.1 == keep.0 && prepend == 0;
        let usage_kept = if kind == EntryKind::Edit && replaced_all {
            // A snapshot saved whole over the session replaces its usage too.
            0
        } else {
            previous_usage
                .iter()
                .zip(next.usage())
                .take_while(|(a, b)| a == b)
                .count()
        };
        return Some(Pending {
            base,
            keep,
            prepend,
            usage_kept,
            kind: Some(kind),
        });
    }
    None
}

/// `next` as a change of `stored` (what the target holds, as it loaded it) made as
/// `pending` says: a snapshot whose save appends exactly that one entry.
fn change_of(stored: SessionSnapshot, next: SessionSnapshot, pending: Pending) -> SessionSnapshot {
    let stored = stored.into_parts();
    let mut parts = next.into_parts();
    parts.revision = stored.revision;
    parts.history = stored.history;
    parts.provenance = stored.provenance.map(|mut provenance| {
        provenance.pending = pending;
        provenance
    });
    SessionSnapshot::from_session_parts(parts)
}
