//! The message model of the SQLite kill and power-loss suites: each message's text is
//! derived from its session and its position (from 1), so a loaded state can be checked
//! message by message; a compaction puts a summary naming the last position it replaced
//! in place of the messages before the ones it keeps.
//!
//! Included by `tests/sqlite_kill.rs`, `tests/sqlite_power_loss.rs` (which has messages
//! of its own sizes) and `tests/kill_lifecycle.rs` with `#[path]`.
#![allow(dead_code)] // each test binary uses part of it

use agent_session::{Compaction, Message, Revision, SessionId, SessionSnapshot};

/// The text of message `position` (from 1) of session `id` in the kill suites: 0.5-8 KB,
/// derived from both, so a message in the wrong place or session is caught.
pub fn message(id: &SessionId, position: usize) -> String {
    let len = 500 + (position * 7_919) % 7_500;
    let unit = format!("{id}:{position}|");
    let mut text = unit.repeat(len / unit.len() + 1);
    text.truncate(len);
    text
}

/// What [`next_state`] made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// One more message.
    Turn,
    /// All but the last two messages compacted into a summary.
    Compaction,
    /// A new session under the same id, saved over the revision the old one had (so
    /// revisions only grow), written whole by the store.
    StartOver,
}

impl Next {
    /// The word the kill suites' children print for it.
    pub fn word(self) -> &'static str {
        match self {
            Next::Turn => "turn",
            Next::Compaction => "compaction",
            Next::StartOver => "start-over",
        }
    }
}

/// The next state of session `id`, stored as `loaded`: every seventh revision (once it
/// has 8 messages) a compaction of all but its last two messages, whose state a store
/// keeps as a view checkpoint that later loads start from; a new session (one message)
/// once its last message is at `max_position`, or if there is none; else one more
/// [`message`].
pub fn next_state(
    id: &SessionId,
    loaded: Option<SessionSnapshot>,
    max_position: usize,
) -> (SessionSnapshot, Next) {
    match loaded {
        Some(loaded)
            if loaded.transcript().len() >= 8 && loaded.revision().as_u64().is_multiple_of(7) =>
        {
            (compacted(loaded, 2), Next::Compaction)
        }
        Some(loaded) if last_position(&loaded) < max_position => {
            let last = last_position(&loaded);
            let next = loaded
                .with_appended(
                    vec![Message::user(message(id, last + 1))],
                    vec![],
                    chrono::Utc::now(),
                )
                .expect("append");
            (next, Next::Turn)
        }
        other => {
            let revision = other.map_or(Revision::NEW, |s| s.revision());
            let fresh = SessionSnapshot::builder(id.clone(), "kill-test")
                .transcript(vec![Message::user(message(id, 1))])
                .build()
                .expect("build")
                .with_revision(revision);
            (fresh, Next::StartOver)
        }
    }
}

/// The summary a compaction puts in place of messages `1..=replaced` of session `id`.
pub fn summary_text(id: &SessionId, replaced: usize) -> String {
    format!("{id}:summary:{replaced}")
}

/// The position of the last message of `snapshot`'s view: a compaction's summary first
/// stands for the messages it replaced, and every other message is one position more.
pub fn last_position(snapshot: &SessionSnapshot) -> usize {
    last_position_as(snapshot, snapshot.id())
}

/// [`last_position`] of a snapshot holding session `id`'s messages (a fork holds its
/// parent's).
pub fn last_position_as(snapshot: &SessionSnapshot, id: &SessionId) -> usize {
    let prefix = format!("{id}:summary:");
    let view = snapshot.transcript();
    match view
        .first()
        .and_then(|m| m.text().strip_prefix(&prefix)?.parse::<usize>().ok())
    {
        Some(replaced) => replaced + view.len() - 1,
        None => view.len(),
    }
}

/// Checks that `snapshot` holds messages in order from position 1, or a compaction's
/// summary and the messages after those it replaced, each `message(id, position)`;
/// returns how many messages it holds.
pub fn check_positions(
    snapshot: &SessionSnapshot,
    message: impl Fn(&SessionId, usize) -> String,
) -> Result<usize, String> {
    check_positions_as(snapshot, snapshot.id(), message)
}

/// [`check_positions`] of a snapshot holding session `id`'s messages (a fork of `id`).
pub fn check_positions_as(
    snapshot: &SessionSnapshot,
    id: &SessionId,
    message: impl Fn(&SessionId, usize) -> String,
) -> Result<usize, String> {
    let n = snapshot.transcript().len();
    if n == 0 {
        return Err(format!("{}: no messages", snapshot.id()));
    }
    let first = last_position_as(snapshot, id) + 1 - n;
    for (i, m) in snapshot.transcript().iter().enumerate() {
        let expected = if first > 1 && i == 0 {
            summary_text(id, first)
        } else {
            message(id, first + i)
        };
        if m.text() != expected {
            return Err(format!(
                "{}: message {} is not that state's",
                snapshot.id(),
                i + 1
            ));
        }
    }
    Ok(n)
}

/// `snapshot` compacted to a summary and its last `keep` messages (at least two
/// messages replaced, so the summary names a position past 1).
pub fn compacted(mut snapshot: SessionSnapshot, keep: usize) -> SessionSnapshot {
    let n = snapshot.transcript().len();
    let point = n - keep;
    assert!(point >= 2, "a compaction replaces at least two messages");
    let replaced = last_position(&snapshot) - keep;
    let summary = summary_text(snapshot.id(), replaced);
    snapshot
        .compact(Compaction::new(point, vec![Message::user(summary)]))
        .expect("compact");
    snapshot
}

/// Whether the `SqliteSessionStore` database at `db` holds a view checkpoint (a row of
/// `views`, tables version 4).
#[cfg(feature = "sqlite")]
pub fn has_a_view(db: &std::path::Path) -> bool {
    rusqlite::Connection::open(db)
        .and_then(|c| c.query_row("SELECT count(*) FROM views", [], |r| r.get::<_, i64>(0)))
        .is_ok_and(|views| views > 0)
}
