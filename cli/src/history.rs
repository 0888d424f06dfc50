//! `sessions history|show --at|restore|compact`: a session's history as the library keeps
//! it (an append-only log, one revision per save), a look at any kept revision, going back
//! to one, and compaction that keeps what it replaces.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

use agent_session::{
    CompactionPolicy, Compactor, Error, Harness, History, Revision, SessionId, SessionStore,
    Standing,
};

use crate::compaction::{self, LocalCompactor, ModelCompactor, Writer};
use crate::display::{self, escape_controls, Keep, Shown};
use crate::http::HttpEngine;
use crate::scripted::ScriptedEngine;
use crate::store::Store;
use crate::{chain, Failure};

/// Shown in the help of `sessions history`.
pub const HISTORY_HELP: &str = "\
Every save of a session is a revision, and the store keeps them all: a turn (or a step
of one), a rewind, a compaction, a restore. The table lists them oldest first: KIND is
what the revision changed (checkpoint: the oldest revision kept), MSGS how many messages
the view (what the model is sent) held after it. A rewind or a compaction takes messages
out of the view, not out of the history: --messages lists every message the session's
views ever held, with where each stands now (in view, rewound, compacted or replaced,
and at which revision).

  agent-session sessions show ID --at REV    the session as it was at a revision
  agent-session sessions restore ID REV      make that state the head again";

/// Shown in the help of `sessions restore`.
pub const RESTORE_HELP: &str = "\
The state of revision REV (its messages, options and metadata) becomes the head again,
as a new revision: the revisions in between stay in the history, so a restore can
itself be undone by restoring the revision before it. Usage stays counted (it was paid
for). This is how a rewind (`sessions rewind`, /undo) or a compaction is undone.
`sessions history ID` lists the revisions; a revision the store does not keep is
refused, naming those it keeps.

In `chat`, /restore REV does the same to the session being chatted in.";

/// Shown in the help of `sessions compact`.
pub const COMPACT_HELP: &str = "\
The beginning of the session's view is replaced by a summary, so the model is sent less
from then on; the last --keep-turns turns stay as they are (a turn starts at a prompt).
What the summary replaces stays in the history (`sessions history ID --messages`), and
`sessions restore ID REV` with the revision before the compaction undoes it.

Who writes the summary: with the OpenAI-compatible engine (OPENAI_API_KEY set, or
--engine openai) the model does, and the call's usage and cost are added to the
session's; offline (the scripted engine) it is made locally, without a model: the first
line of each prompt and answer. The output says which.

A session with nothing before its last --keep-turns turns is refused, and nothing is
written.";

/// A revision number: a whole number, at least 1 (revision 0 is a session never saved).
pub fn parse_revision(text: &str) -> Result<Revision, String> {
    match text.parse::<u64>() {
        Ok(0) => Err(
            "revision 0 is a session before its first save, which is never stored: revisions start at 1"
                .to_owned(),
        ),
        Ok(n) => Ok(Revision::from_u64(n)),
        Err(_) => Err(format!(
            "{text:?} is not a revision: give its number, as `sessions history ID` lists them"
        )),
    }
}

/// The failure for a typed error of a history command: with a hint to list the revisions
/// when one is not kept, or to run again after a conflict, and, for a command that changes
/// the session (`nothing` names the change), a line saying nothing was changed (the
/// library writes nothing on error, but for a save that may not be durable).
fn failure(error: Error, id: &SessionId, nothing: Option<&str>) -> Failure {
    let revision_not_kept = matches!(error, Error::RevisionNotFound { .. });
    let conflict = matches!(error, Error::Conflict { .. });
    let written = matches!(error, Error::NotDurable { .. });
    let mut failure = match error {
        // The compactor's own error: the library words it as a failed turn.
        Error::Engine { source, .. } => Failure::Error(format!(
            "could not write a summary for session {id}: {}",
            chain(&*source)
        )),
        error => Failure::from(error),
    };
    if let Failure::Error(message) = &mut failure {
        if revision_not_kept {
            let _ = write!(
                message,
                "\nhint: `agent-session sessions history {id}` lists the revisions it keeps"
            );
        }
        if conflict {
            let _ = write!(
                message,
                "\nhint: another process saved session {id} meanwhile; run the command again"
            );
        }
        if let (false, Some(what)) = (written, nothing) {
            let _ = write!(message, "\nnothing was {what}");
        }
    }
    failure
}

/// `sessions history`: the revision table, and with `messages` every message of the
/// history with where it stands.
pub fn history(store: &dyn SessionStore, id: &SessionId, messages: bool) -> Result<(), Failure> {
    let revisions = store.revisions(id).map_err(|e| failure(e, id, None))?;
    let (Some(oldest), Some(head)) = (revisions.first(), revisions.last()) else {
        return Err(format!("the store lists no revision of session {id}").into());
    };
    println!(
        "session {id}: {} kept, {} to {}; the head is revision {}",
        counted(revisions.len(), "revision"),
        oldest.revision,
        head.revision,
        head.revision
    );
    print!("{}", display::revision_table(&revisions));
    if messages {
        let history = store.history(id).map_err(|e| failure(e, id, None))?;
        let rows = history_rows(store, id, &history)?;
        let in_view = rows.iter().filter(|row| row.standing.is_in_view()).count();
        println!();
        println!(
            "{} in the history since revision {}, {in_view} in the view:",
            counted(rows.len(), "message"),
            history.oldest_revision
        );
        print!("{}", display::history_messages(&rows, history.revision));
    }
    Ok(())
}

/// The messages of `history`, with the view's messages it leaves out put back.
///
/// Workaround for the library (b467cb4): `SessionStore::history` leaves out the messages
/// of the oldest kept revision (the checkpoint) whenever the view starts with all of them
/// (its fold hands the checkpoint's messages to the view in one piece, and the history
/// then finds none to list): a session that only ever grew lists only what was added
/// after its first save. Those are the first messages of the view, saved at the oldest
/// revision; they are taken from the head. Does nothing once the library lists them.
fn history_rows(
    store: &dyn SessionStore,
    id: &SessionId,
    history: &History,
) -> Result<Vec<display::HistoryRow>, Failure> {
    let listed: HashSet<usize> = history
        .messages
        .iter()
        .filter_map(|m| match m.standing {
            Standing::InView { index } => Some(index),
            _ => None,
        })
        .collect();
    let mut rows = Vec::with_capacity(history.messages.len());
    let head = store.load(id).map_err(|e| failure(e, id, None))?;
    if head.revision() == history.revision && listed.len() < head.transcript().len() {
        for (index, message) in head.transcript().iter().enumerate() {
            if !listed.contains(&index) {
                rows.push(display::HistoryRow {
                    message: message.clone(),
                    added_at: history.oldest_revision,
                    standing: Standing::InView { index },
                });
            }
        }
    }
    rows.extend(history.messages.iter().map(|m| display::HistoryRow {
        message: m.message.clone(),
        added_at: m.added_at,
        standing: m.standing,
    }));
    Ok(rows)
}

/// `sessions show ID --at REV`: the session exactly as it was at that revision.
pub fn show_at(
    store: &dyn SessionStore,
    id: &SessionId,
    revision: Revision,
) -> Result<(), Failure> {
    let past = store
        .load_at(id, revision)
        .map_err(|e| failure(e, id, None))?;
    let head = store
        .revisions(id)
        .map_err(|e| failure(e, id, None))?
        .last()
        .map_or(past.revision(), |r| r.revision);
    print!("{}", display::transcript(&past, Shown::Past { head }));
    Ok(())
}

/// `sessions restore ID REV`: the new revision, and the view's length before and after.
pub fn restore(
    store: &dyn SessionStore,
    id: &SessionId,
    revision: Revision,
) -> Result<(), Failure> {
    let revisions = store.revisions(id).map_err(|e| failure(e, id, None))?;
    let head = revisions.last().map(|r| r.revision);
    if head == Some(revision) {
        println!(
            "session {id} is at revision {revision} already: nothing to restore; revision {revision} is unchanged"
        );
        return Ok(());
    }
    let restored = store
        .restore(id, revision)
        .map_err(|e| failure(e, id, Some("restored")))?;
    // The view before and after this restore's own revision, as the store keeps them (so
    // they are exact even if another process saved the session just before).
    let after_list = match store.revisions(id) {
        Ok(list) => list,
        Err(e) => {
            println!(
                "restored session {id} to revision {revision}, now revision {restored} (its revisions could not be read back: {})",
                chain(&e)
            );
            return Ok(());
        }
    };
    let length = |at: Revision| {
        after_list
            .iter()
            .find(|r| r.revision == at)
            .map(|r| r.messages)
    };
    let before = length(Revision::from_u64(restored.as_u64().saturating_sub(1)));
    let after = length(restored);
    let change = match (before, after) {
        (Some(before), Some(after)) => format!(
            "the view went from {} to {after}",
            counted(before, "message")
        ),
        (_, Some(after)) => format!("the view holds {}", counted(after, "message")),
        _ => "it was changed again meanwhile".to_owned(),
    };
    println!("restored session {id} to revision {revision}, now revision {restored}: {change}");
    eprintln!(
        "the revisions in between stay in its history (`sessions history {id}`), and usage stays counted; continue the session with --resume {id}"
    );
    Ok(())
}

/// `sessions compact`: the harness runs the compactor (a model through the HTTP engine,
/// else the local one) on everything before the last `keep_turns` turns and saves.
pub async fn compact(
    store: &Store,
    id: &SessionId,
    keep_turns: usize,
    engine: Option<HttpEngine>,
) -> Result<(), Failure> {
    let compactor: Arc<dyn Compactor> = match engine.clone() {
        Some(engine) => Arc::new(ModelCompactor::new(engine)),
        None => Arc::new(LocalCompactor),
    };
    // The session's engine is never called: only the compactor is.
    let harness = Harness::builder(store.shared(), || ScriptedEngine)
        .compaction(
            compactor,
            CompactionPolicy::default().keep_last_turns(keep_turns),
        )
        .build();
    let mut session = harness
        .resume_session(id, None)
        .map_err(|e| failure(e, id, None))?;
    let before = session.transcript().len();
    let usage_before = session.usage().len();
    let Some(replaced) = session.compaction_point(keep_turns) else {
        let turns = session
            .transcript()
            .iter()
            .filter(|m| m.is_prompt())
            .count();
        let mut message = format!(
            "session {id} has nothing to compact: its view holds {} in {}, and the last {} stay as they are (--keep-turns {keep_turns}), with nothing before them",
            counted(before, "message"),
            counted(turns, "turn"),
            counted(keep_turns, "turn"),
        );
        if turns > 0 && keep_turns > 0 {
            let fewer = (keep_turns - 1).min(turns - 1);
            let _ = write!(message, "\nhint: --keep-turns {fewer} compacts more of it");
        }
        message.push_str("\nnothing was compacted");
        return Err(message.into());
    };
    // Listings title a session by its first prompt unless its metadata names a title;
    // the summary would take the first prompt's place, so the title is kept in metadata
    // (saved with the compaction).
    let has_title = matches!(
        session.metadata().get("title"),
        Some(serde_json::Value::String(title)) if !title.trim().is_empty()
    );
    if !has_title {
        if let Some(title) = session.snapshot().title() {
            session
                .metadata_mut()
                .insert("title".to_owned(), serde_json::Value::String(title));
        }
    }
    let writer = compaction::writer(engine.as_ref(), &session.options().model);
    let Some(revision) = harness
        .compact_session(&mut session)
        .await
        .map_err(|e| failure(e, id, Some("compacted")))?
    else {
        return Err(format!("session {id} has nothing to compact\nnothing was compacted").into());
    };
    let after = session.transcript().len();
    let added = (after + replaced).saturating_sub(before);
    println!(
        "compacted session {id}, now revision {revision}: its first {} became a summary of {}; the view went from {before} to {}",
        counted(replaced, "message"),
        counted(added, "message"),
        counted(after, "message"),
    );
    match writer {
        Writer::Local => println!(
            "the summary was made offline, without a model (the scripted engine): the first line of each prompt and answer"
        ),
        Writer::Model(model) => {
            let mut line = format!(
                "the summary was written by the model {}",
                escape_controls(&model, Keep::Nothing)
            );
            for usage in session.usage().get(usage_before..).unwrap_or_default() {
                let _ = write!(
                    line,
                    " ({} input + {} output tokens, cost {}, counted in the session's usage)",
                    usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
                    usage.output_tokens,
                    usage.cost
                );
            }
            println!("{line}");
        }
    }
    for message in session.transcript().get(..added).unwrap_or_default() {
        for line in message.text().lines() {
            println!("  {}", escape_controls(line, Keep::Nothing));
        }
    }
    eprintln!(
        "the replaced messages stay in its history (`sessions history {id} --messages`); `sessions restore {id} {}` undoes the compaction",
        revision.as_u64().saturating_sub(1)
    );
    Ok(())
}

/// `1 message`, `2 messages`.
fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_are_whole_numbers_from_one() {
        assert_eq!(parse_revision("7"), Ok(Revision::from_u64(7)));
        assert!(parse_revision("0").is_err_and(|e| e.contains("revisions start at 1")));
        assert!(parse_revision("x").is_err_and(|e| e.contains("not a revision")));
        assert!(parse_revision("-1").is_err());
        assert!(parse_revision("99999999999999999999").is_err());
    }
}
