//! What a listing of stored sessions shows: [`SessionSummary`] per session,
//! [`ListScope`] for archived ones, a whole [`SessionList`] or one [`SessionPage`], and
//! the [`ListCursor`] that walks a store page by page in one fixed order.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde_json::Value;

#[cfg(doc)]
use super::SessionStore;
use crate::clock;
use crate::error::{Error, Result};
use crate::id::{Revision, SessionId};
use crate::snapshot::{HistoryStats, Lineage, SessionSnapshot};
use crate::usage::Cost;

/// The longest model name a summary holds, in characters.
const MAX_SUMMARY_MODEL_CHARS: usize = 256;

/// What a listing shows of a stored session.
///
/// # Examples
///
/// ```
/// use agent_session::{Message, SessionId, SessionSnapshot, SessionSummary};
///
/// let snapshot = SessionSnapshot::builder(SessionId::parse("s")?, "m")
///     .transcript(vec![Message::user("Fix the parser")])
///     .build()?;
/// let summary = SessionSummary::of(&snapshot);
/// assert_eq!(summary.title.as_deref(), Some("Fix the parser"));
/// assert_eq!(summary.message_count, 1);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSummary {
    /// The session's id.
    pub id: SessionId,
    /// The stored revision.
    pub revision: Revision,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// See [`SessionSnapshot::title`].
    pub title: Option<String>,
    /// How many messages its transcript has.
    pub message_count: usize,
    /// The model it talks to (cut to 256 characters and an ellipsis, as the title is cut
    /// to 80: what a summary holds never depends on the session's content).
    pub model: String,
    /// What it has cost so far.
    pub cost: Cost,
    /// Where it was forked from, if it is a fork.
    pub lineage: Option<Lineage>,
    /// Whether it is archived: left out of [`SessionStore::list`], shown by
    /// [`SessionStore::list_scoped`] with [`ListScope::Archived`] or [`ListScope::All`].
    /// ([`SessionSummary::of`] says `false`: archiving is the store's state, not the
    /// snapshot's.)
    pub archived: bool,
    /// What its stored history holds beyond the view: whether it was rewound, compacted
    /// or restored, and where the kept history starts.
    pub history: HistoryStats,
    /// The values of the metadata keys the store indexes
    /// ([`IndexedMetadata`](crate::IndexedMetadata)), for filtered listings; empty for a
    /// store that indexes none (and from [`SessionSummary::of`]).
    pub metadata: BTreeMap<String, Value>,
}

impl SessionSummary {
    /// Whether the session was last updated later than this machine's clock allows
    /// ([`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE)): saved while a clock was
    /// ahead, or imported before the crate clamped such times. Listings put such sessions
    /// after every other, and prune never deletes them (their age is unknown); saving the
    /// session again gives it the current time.
    #[must_use]
    pub fn is_updated_in_the_future(&self) -> bool {
        clock::is_in_the_future(self.updated_at, Utc::now())
    }

    /// The summary of `snapshot`.
    #[must_use]
    pub fn of(snapshot: &SessionSnapshot) -> Self {
        SessionSummary {
            id: snapshot.id().clone(),
            revision: snapshot.revision(),
            created_at: snapshot.created_at(),
            updated_at: snapshot.updated_at(),
            title: snapshot.title(),
            message_count: snapshot.transcript().len(),
            model: crate::snapshot::cut(&snapshot.options().model, MAX_SUMMARY_MODEL_CHARS),
            cost: snapshot.totals().cost,
            lineage: snapshot.lineage().cloned(),
            archived: false,
            history: snapshot.history_stats(),
            metadata: BTreeMap::new(),
        }
    }
}

/// Which sessions a listing shows: see [`SessionStore::list_scoped`].
///
/// # Examples
///
/// ```
/// use agent_session::{ListScope, MemorySessionStore, SessionStore};
///
/// let store = MemorySessionStore::new();
/// assert!(store.list_scoped(ListScope::All)?.sessions.is_empty());
/// assert_eq!(ListScope::default(), ListScope::Active);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListScope {
    /// Sessions that are not archived: what [`SessionStore::list`] shows.
    #[default]
    Active,
    /// Only archived sessions.
    Archived,
    /// Every session.
    All,
}

impl ListScope {
    /// Whether a session that is `archived` or not belongs in this scope.
    #[must_use]
    pub fn includes(self, archived: bool) -> bool {
        match self {
            ListScope::Active => !archived,
            ListScope::Archived => archived,
            ListScope::All => true,
        }
    }
}

/// A session's place in listings, which run from the greatest place to the least: first
/// whether its update time is plausible (sessions updated in the future come after all
/// others), then the time, then the id.
fn place(
    updated_at: DateTime<Utc>,
    id: &SessionId,
    horizon: DateTime<Utc>,
) -> (bool, DateTime<Utc>, &SessionId) {
    (updated_at <= horizon, updated_at, id)
}

/// The result of [`SessionStore::list`]: the sessions that could be read, newest first, and
/// an error for each stored entry that could not.
///
/// One damaged file never hides the others: it shows up in `unreadable` instead.
///
/// # Examples
///
/// ```
/// use agent_session::{MemorySessionStore, SessionStore};
///
/// let listing = MemorySessionStore::new().list()?;
/// assert!(listing.sessions.is_empty() && listing.unreadable.is_empty());
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SessionList {
    /// Readable sessions, most recently updated first (ties broken by id, descending),
    /// except that sessions updated in the future
    /// ([`SessionSummary::is_updated_in_the_future`]) come after all the others.
    pub sessions: Vec<SessionSummary>,
    /// Why each unreadable entry could not be read.
    pub unreadable: Vec<Error>,
}

impl SessionList {
    /// A listing of `sessions`, sorted newest first (most recently updated, then id
    /// descending, sessions updated in the future last), and the errors of the entries that
    /// could not be read. For custom [`SessionStore`]s.
    #[must_use]
    pub fn new(mut sessions: Vec<SessionSummary>, unreadable: Vec<Error>) -> Self {
        let horizon = clock::horizon(Utc::now());
        sessions.sort_by(|a, b| {
            place(b.updated_at, &b.id, horizon).cmp(&place(a.updated_at, &a.id, horizon))
        });
        SessionList {
            sessions,
            unreadable,
        }
    }
}

/// Where a page of a listing starts: just after the session it names, in the listing's
/// order (most recently updated first, then id descending; sessions updated in the future
/// last). Made by [`SessionStore::list_page`]; its text form (`Display` / `FromStr`)
/// survives a round trip through a command line or a URL, whatever the time.
///
/// A cursor also carries the latest plausible time of the walk it belongs to
/// ([`CLOCK_SKEW_TOLERANCE`](crate::CLOCK_SKEW_TOLERANCE) after the clock when the walk
/// began), so that a session whose time was in the future when the walk began stays where
/// the walk's first page put it, at the end, even if the clock catches up with it midway.
///
/// # Examples
///
/// ```
/// use agent_session::ListCursor;
///
/// let text = "2026-11-29T10:00:00Z/abc/2026-12-01T09:05:00Z";
/// let cursor: ListCursor = text.parse()?;
/// assert_eq!(cursor.to_string(), text);
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    updated_at: DateTime<Utc>,
    id: SessionId,
    /// The latest plausible time of the walk: later times are in the listing's last part.
    horizon: DateTime<Utc>,
}

impl ListCursor {
    /// The cursor just after `summary`, for a walk that begins now.
    #[must_use]
    pub fn after(summary: &SessionSummary) -> Self {
        ListCursor::after_in(summary, clock::horizon(Utc::now()))
    }

    /// The cursor just after `summary`, in a walk whose latest plausible time is `horizon`.
    pub(crate) fn after_in(summary: &SessionSummary, horizon: DateTime<Utc>) -> Self {
        ListCursor {
            updated_at: summary.updated_at,
            id: summary.id.clone(),
            horizon,
        }
    }

    /// The time and id of the session the cursor names, and the walk's latest plausible
    /// time, for stores paging from an index.
    pub(crate) fn position(&self) -> (DateTime<Utc>, &SessionId, DateTime<Utc>) {
        (self.updated_at, &self.id, self.horizon)
    }

    /// A cursor at the session updated at `updated_at` named `id`, in a walk whose latest
    /// plausible time is `horizon`.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) fn at(updated_at: DateTime<Utc>, id: SessionId, horizon: DateTime<Utc>) -> Self {
        ListCursor {
            updated_at,
            id,
            horizon,
        }
    }

    /// Whether `summary` comes after this cursor in the walk's order.
    fn precedes(&self, summary: &SessionSummary) -> bool {
        place(summary.updated_at, &summary.id, self.horizon)
            < place(self.updated_at, &self.id, self.horizon)
    }
}

/// The text form of a cursor's time: RFC 3339 in years 0 to 9999, the years it can
/// write and read back, otherwise `@` and the seconds (and nanoseconds) since 1970.
fn cursor_time(at: DateTime<Utc>) -> String {
    use chrono::Datelike;
    if (0..=9999).contains(&at.year()) {
        at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
    } else {
        format!("@{}.{:09}", at.timestamp(), at.timestamp_subsec_nanos())
    }
}

fn parse_cursor_time(text: &str) -> Option<DateTime<Utc>> {
    if let Some(epoch) = text.strip_prefix('@') {
        let (seconds, nanos) = epoch.split_once('.')?;
        if nanos.len() != 9 || !nanos.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        return DateTime::from_timestamp(seconds.parse().ok()?, nanos.parse().ok()?);
    }
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

impl fmt::Display for ListCursor {
    /// `TIME/ID/HORIZON`: the session's update time and id, then the walk's latest
    /// plausible time.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            cursor_time(self.updated_at),
            self.id,
            cursor_time(self.horizon)
        )
    }
}

impl std::str::FromStr for ListCursor {
    type Err = Error;

    /// Parses `TIME/ID/HORIZON`, or `TIME/ID` (as release 0.1 printed it: the walk then
    /// goes on as if it began now).
    fn from_str(text: &str) -> Result<Self> {
        let invalid = || Error::InvalidArgument {
            reason: format!(
                "{text:?} is not a listing cursor (TIME/ID/HORIZON, as printed with a page)"
            ),
        };
        let mut parts = text.split('/');
        let (Some(time), Some(id)) = (parts.next(), parts.next()) else {
            return Err(invalid());
        };
        let horizon = match (parts.next(), parts.next()) {
            (None, _) => clock::horizon(Utc::now()),
            (Some(horizon), None) => parse_cursor_time(horizon).ok_or_else(invalid)?,
            (Some(_), Some(_)) => return Err(invalid()),
        };
        Ok(ListCursor {
            updated_at: parse_cursor_time(time).ok_or_else(invalid)?,
            id: SessionId::parse(id).map_err(|_| invalid())?,
            horizon,
        })
    }
}

/// One page of a listing: made by [`SessionStore::list_page`].
///
/// # Examples
///
/// ```
/// use agent_session::{MemorySessionStore, SessionStore};
///
/// let page = MemorySessionStore::new().list_page(50, None)?;
/// assert!(page.sessions.is_empty() && page.next.is_none());
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SessionPage {
    /// At most `limit` sessions, in the listing's order.
    pub sessions: Vec<SessionSummary>,
    /// The entries that could not be read. With the default [`SessionStore::list_page`],
    /// all of them on the first page (no cursor) and none on the others; a store that
    /// pages from an index (such as `PostgresSessionStore`) reports each on the page it
    /// falls in.
    pub unreadable: Vec<Error>,
    /// Where the next page starts, if there are more sessions.
    pub next: Option<ListCursor>,
}

impl SessionPage {
    /// The page of `listing` that starts after `after` and holds at most `limit` sessions.
    /// For custom stores implementing [`SessionStore::list_page`] over their own listing.
    #[must_use]
    pub fn of(listing: SessionList, limit: usize, after: Option<&ListCursor>) -> Self {
        let first_page = after.is_none();
        // The walk's order, fixed when it began: a session's place may have moved since the
        // listing was sorted (its time was in the future then, and is not now).
        let horizon = after.map_or_else(|| clock::horizon(Utc::now()), |cursor| cursor.horizon);
        let mut all = listing.sessions;
        all.sort_by(|a, b| {
            place(b.updated_at, &b.id, horizon).cmp(&place(a.updated_at, &a.id, horizon))
        });
        let mut sessions = all
            .into_iter()
            .skip_while(|s| after.is_some_and(|cursor| !cursor.precedes(s)));
        let page: Vec<SessionSummary> = sessions.by_ref().take(limit).collect();
        let more = sessions.next().is_some();
        SessionPage {
            next: if more {
                page.last().map(|last| ListCursor::after_in(last, horizon))
            } else {
                None
            },
            sessions: page,
            unreadable: if first_page {
                listing.unreadable
            } else {
                Vec::new()
            },
        }
    }
}

impl crate::telemetry::Traced for SessionList {
    #[inline]
    fn trace(&self, span: &crate::telemetry::OpSpan) {
        span.record_count("agent_session.sessions", self.sessions.len());
    }
}

impl crate::telemetry::Traced for SessionPage {
    #[inline]
    fn trace(&self, span: &crate::telemetry::OpSpan) {
        span.record_count("agent_session.sessions", self.sessions.len());
    }
}
