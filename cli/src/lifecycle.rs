//! `sessions fork|rewind|archive|unarchive|prune|export|import`: what happens to sessions
//! after their turns: branching, undoing, hiding, retention and moving them between stores
//! (going back in a session's history is `history.rs`).

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Duration;

use agent_session::{
    Bundle, Error, ForkAt, ImportIds, Message, PrunePolicy, RewindTo, SessionId, SessionStore,
    SessionStoreExt, TrimmedHistory,
};

use crate::display::{escape_controls, Keep};
use crate::store::{Store, StoreAt, StoreSpec};
use crate::{chain, display, Failure};

/// Shown in the help of `sessions prune`.
pub const PRUNE_HELP: &str = "\
Limits (at least one, of these or the history limits below; with none a prune would
delete nothing):
  --max-age DURATION  a number and a unit: s, m, h or d (45s, 90m, 12h, 30d)
  --max-count N       keeps the N most recently updated sessions
  --max-bytes SIZE    bytes on disk (snapshot + journal; in PostgreSQL, the row's
                      snapshot, summary and entries); a number, optionally with
                      K, M or G, binary multiples: 1K = 1024 bytes, 1M = 1024K,
                      1G = 1024M (500, 10K, 20M, 1G)

History limits, for the sessions that stay (every save is a revision a session keeps):
  --keep-revisions N          keeps each session's N newest revisions, the head
                              included (at least 1: the head always stays)
  --history-max-age DURATION  drops the revisions saved longer ago than DURATION
                              (same units as --max-age); the head stays, however old

Count and size keep the most recently updated sessions. Archived sessions count like the
others unless --archived-only is given. A session saved while the prune runs is kept
(reported on stderr). Forks never depend on their parent: deleting a parent leaves its
forks whole.

A dropped revision is gone for good: `sessions show ID --at REV` and `sessions restore ID
REV` no longer find it, and the messages only it held (rewound, compacted away or
replaced before the oldest revision kept) go with it. Every revision kept loads as
before, and so do forks of the session. --dry-run lists what would be dropped.

Examples:
  agent-session sessions prune --max-age 30d --dry-run        what would go, nothing deleted
  agent-session sessions prune --max-count 100                keep the 100 newest
  agent-session sessions prune --archived-only --max-age 7d
  agent-session sessions prune --keep-revisions 50 --dry-run  what history would be dropped
  agent-session sessions prune --max-age 90d --history-max-age 30d";

/// Shown in the help of `sessions fork`.
pub const FORK_HELP: &str = "\
The new session starts with the messages before the cut (its usage and cost start at
zero) and records where it came from; `sessions list` shows it as `fork of PARENT@N`.
The parent is not changed. A cut between a tool call and its result is refused.

The new id is printed on stdout, alone on its line:
  new=$(agent-session sessions fork 0190c3e2-... --at turn:2)
  agent-session run --resume \"$new\" \"try the other approach\"";

/// Shown in the help of `sessions rewind`.
pub const REWIND_HELP: &str = "\
With neither option it drops the last turn (--turns 1). A turn starts at a prompt (a
user message) and runs to the next one: the model's replies and tool calls with it.
--to-message I keeps messages 0 to I-1, as `sessions fork --at message:I` would copy
them. The next turn's model sees only what is kept, and tool calls dropped are never run
again; the usage of the dropped turns stays counted (they were paid for).

A point between a tool call and its result is refused, naming the nearest points that
are allowed, and so is one before the start or past the end: nothing is changed then.

A rewind erases nothing, and it can be undone: it is a new revision of the session, and
the dropped messages stay in its history (`sessions history ID --messages` lists them).
`sessions restore ID REV` with the revision before the rewind (the command says which)
makes them the head again:
  agent-session sessions rewind 0190c3e2-... --turns 2     now revision 9
  agent-session sessions restore 0190c3e2-... 8            the two turns are back
To get rid of a secret, delete the session: a rewind keeps it in the store.

In `chat`, /undo [N] does the same to the session being chatted in, and /restore REV
undoes it.";

/// `--turns`: a whole number of turns, at least 1 (0 would drop nothing).
pub fn parse_turns(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("0 turns would drop nothing: give at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a number of turns")),
    }
}

/// `--keep-revisions`: a whole number of revisions, at least 1 (the head always stays).
pub fn parse_keep_revisions(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err(
            "a session always keeps its head revision, so 0 cannot be kept: use 1 to keep only the head"
                .to_owned(),
        ),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a number of revisions")),
    }
}

/// `--at`: `message:N`, `turn:N` or `end`.
pub fn parse_fork_at(text: &str) -> Result<ForkAt, String> {
    text.parse::<ForkAt>().map_err(|e| match e {
        Error::InvalidArgument { reason } => reason,
        other => other.to_string(),
    })
}

/// The point of `sessions rewind --turns N | --to-message I`: the last turn without either.
pub fn rewind_to(turns: Option<usize>, to_message: Option<usize>) -> RewindTo {
    match to_message {
        Some(kept) => RewindTo::Message(kept),
        None => RewindTo::LastTurns(turns.unwrap_or(1)),
    }
}

/// `--max-age` and `--history-max-age`: a whole number and a unit, `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || {
        format!("{text:?} is not a duration: use a number and a unit, s, m, h or d (45s, 90m, 12h, 30d)")
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(invalid)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let seconds: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 24 * 3600,
        _ => return Err(invalid()),
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long a duration"))
}

/// `--max-bytes`: a whole number of bytes, optionally with `K`, `M` or `G` (or `KiB`,
/// `MiB`, `GiB`, any case): binary multiples, 1K = 1024.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let invalid = || {
        format!(
            "{text:?} is not a size: use a number of bytes, optionally with K, M or G (1K = 1024 bytes): 500, 10K, 20M, 1G"
        )
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => return Err(invalid()),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large a size"))
}

/// `sessions fork`: the new id on stdout, what was kept on stderr.
pub fn fork(
    store: &dyn SessionStore,
    id: &SessionId,
    at: ForkAt,
    new_id: Option<SessionId>,
) -> Result<(), Failure> {
    let new_id = new_id.unwrap_or_else(SessionId::generate);
    let fork = store
        .fork(id, at, new_id)
        .map_err(|e| with_hint(e, "--as ID gives the fork another id"))?;
    let kept = fork.transcript().len();
    let revision = fork.lineage().map_or_else(String::new, |l| {
        format!(" (revision {})", l.parent_revision)
    });
    println!("{}", fork.id());
    eprintln!(
        "forked {id}{revision} at message {kept} ({at}) into {}: it starts with the first {kept} messages; continue it with --resume {}",
        fork.id(),
        fork.id()
    );
    Ok(())
}

/// How many prompts of a rewind's dropped turns are quoted, and how much of each.
const PROMPTS_SHOWN: usize = 3;
const PROMPT_WIDTH: usize = 40;

/// What a rewind took away and what is left, for `sessions rewind` and `/undo`:
/// `dropped 4 messages (1 turn: "calc 2*3"), 4 messages remain`.
pub fn rewind_summary(dropped: &[Message], kept: usize) -> String {
    let prompts: Vec<String> = dropped
        .iter()
        .filter(|m| m.is_prompt())
        .map(|m| {
            let text = m.text();
            let mut shown: String = text.chars().take(PROMPT_WIDTH).collect();
            if text.chars().count() > PROMPT_WIDTH {
                shown.push('…');
            }
            format!("\"{}\"", escape_controls(&shown, Keep::Nothing))
        })
        .collect();
    let mut out = format!("dropped {}", counted(dropped.len(), "message"));
    if !prompts.is_empty() {
        let _ = write!(
            out,
            " ({}: {}",
            counted(prompts.len(), "turn"),
            prompts[..prompts.len().min(PROMPTS_SHOWN)].join(", ")
        );
        if prompts.len() > PROMPTS_SHOWN {
            let _ = write!(out, " and {} more", prompts.len() - PROMPTS_SHOWN);
        }
        out.push(')');
    }
    let remain = if kept == 1 { "remains" } else { "remain" };
    let _ = write!(out, ", {} {remain}", counted(kept, "message"));
    out
}

/// `1 message`, `2 messages`.
fn counted(n: usize, noun: &str) -> String {
    counted_u64(n as u64, noun)
}

/// [`counted`] for a `u64`.
fn counted_u64(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `sessions rewind`: what was dropped and what remains on stdout. The session is loaded
/// once first, only to say what the rewind dropped; the rewind itself loads and saves it
/// again, compare-and-swap, so a save by someone else in between is never lost.
pub fn rewind(store: &dyn SessionStore, id: &SessionId, to: RewindTo) -> Result<(), Failure> {
    let before = store.load(id)?;
    let rewound = store.rewind(id, to).map_err(|e| rewind_failure(e, id))?;
    let kept = rewound.transcript().len();
    let revision = rewound.revision();
    if revision == before.revision() {
        println!(
            "session {id} already ends at message {kept} ({to}): nothing to rewind; revision {revision} is unchanged"
        );
        return Ok(());
    }
    // This rewind's own save, of the state loaded above: the revision after it, and a
    // transcript that is what was loaded, shortened. (Another process's save in between,
    // followed by a rewind that dropped nothing, also moves the revision by one.)
    let own_save = revision == before.revision().next()
        && kept < before.transcript().len()
        && before.transcript()[..kept] == *rewound.transcript();
    let mut undo = String::new();
    if own_save {
        let dropped = before.transcript().get(kept..).unwrap_or_default();
        println!(
            "rewound session {id} ({to}), now revision {revision}: {}",
            rewind_summary(dropped, kept)
        );
        undo = format!(
            "; `sessions restore {id} {}` undoes the rewind",
            before.revision()
        );
    } else {
        // Saved by someone else between the two loads: the rewind applied to their
        // version, whose length this process did not see.
        println!(
            "rewound session {id} ({to}), now revision {revision}: {} {} (it was saved meanwhile, so how many were dropped is not known)",
            counted(kept, "message"),
            if kept == 1 { "remains" } else { "remain" }
        );
    }
    eprintln!(
        "the usage of the dropped messages stays counted, and they stay in the session's history{undo}; continue the session with --resume {id}"
    );
    Ok(())
}

/// A refused or conflicting rewind changed nothing, and says so.
fn rewind_failure(error: Error, id: &SessionId) -> Failure {
    let refused = matches!(error, Error::InvalidArgument { .. });
    let conflict = matches!(error, Error::Conflict { .. });
    let mut failure = Failure::from(error);
    if let Failure::Error(message) = &mut failure {
        if conflict {
            let _ = write!(
                message,
                "\nhint: another process saved session {id} while it was being rewound; run the command again to rewind it as it is now"
            );
        }
        if refused || conflict {
            message.push_str("\nnothing was rewound");
        }
    }
    failure
}

/// `sessions archive` and `sessions unarchive`.
pub fn set_archived(
    store: &dyn SessionStore,
    id: &SessionId,
    archived: bool,
) -> Result<(), Failure> {
    store.set_archived(id, archived)?;
    if archived {
        println!("archived session {id}");
        eprintln!(
            "it is left out of `sessions list` and --continue, and still resumes with --resume {id}; `sessions unarchive {id}` brings it back"
        );
    } else {
        println!("unarchived session {id}");
    }
    Ok(())
}

/// `sessions prune`: one line per session deleted (or that would be), one per session
/// whose history was trimmed (or would be), then a total. A session saved meanwhile is
/// kept and named on stderr; a session that could not be deleted or trimmed makes the
/// command fail once the rest is done.
pub fn prune(store: Option<&Store>, at: &StoreAt, policy: &PrunePolicy) -> Result<(), Failure> {
    let Some(store) = store else {
        println!("no saved sessions in {}: nothing to prune", at.shown());
        return Ok(());
    };
    let report = store.sessions().prune(policy)?;
    let verb = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for pruned in &report.pruned {
        println!(
            "{verb} {}: {}, {} bytes, updated {}",
            pruned.summary.id,
            pruned.reason,
            pruned.bytes,
            pruned.summary.updated_at.format("%Y-%m-%d %H:%M:%S UTC"),
        );
    }
    for trimmed in &report.trimmed {
        println!("{}", trimmed_line(trimmed, report.dry_run));
    }
    // The report does not say which step an error came from: with history limits, it
    // may be the deletion of one session or the trim of another.
    let trimming = policy.history.is_some();
    let could_not = if trimming { "delete or trim" } else { "delete" };
    let mut failed = 0usize;
    for e in &report.skipped {
        if let Error::Changed { id, change } = e {
            eprintln!("kept {id}: {change} while the prune ran");
        } else if let Error::RevisionNotFound { id, .. } = e {
            // Another process trimmed or replaced the session between the two steps.
            eprintln!(
                "not trimmed {id}: its history changed while the prune ran ({})",
                chain(e)
            );
        } else if e.is_not_found() {
            eprintln!("already gone: {}", chain(e));
        } else {
            failed += 1;
            eprintln!("could not {could_not}: {}", chain(e));
        }
    }
    for e in &report.unreadable {
        eprintln!("unreadable (left alone): {}", chain(e));
    }
    for summary in &report.in_the_future {
        eprintln!(
            "kept {}: updated {}, later than this machine's clock allows, so its age is unknown (save it again to give it the current time)",
            summary.id,
            summary.updated_at.format("%Y-%m-%d %H:%M:%S UTC"),
        );
    }
    let count = report.pruned.len();
    let trimmed = report.trimmed.len();
    let dropped = report
        .trimmed
        .iter()
        .fold(0u64, |total, t| total.saturating_add(t.dropped));
    if report.dry_run {
        let mut total = format!(
            "would delete {count} session(s), {} bytes; would keep {}",
            report.bytes(),
            report.kept
        );
        if trimming {
            let _ = write!(
                total,
                "; would trim {trimmed} session(s), {} (dry run: nothing was deleted or dropped)",
                counted_u64(dropped, "revision")
            );
        } else {
            total.push_str(" (dry run: nothing was deleted)");
        }
        println!("{total}");
    } else {
        let mut total = format!(
            "deleted {count} session(s), {} bytes freed; kept {}",
            report.bytes(),
            report.kept
        );
        if trimming {
            let _ = write!(
                total,
                "; trimmed {trimmed} session(s), {} dropped",
                counted_u64(dropped, "revision")
            );
        }
        println!("{total}");
    }
    if failed > 0 {
        let what = if trimming {
            "deleted or trimmed"
        } else {
            "deleted"
        };
        return Err(format!("{failed} session(s) could not be {what} (see above)").into());
    }
    Ok(())
}

/// The line of `sessions prune` for a session whose history was trimmed (or would be):
/// `trimmed ID: revisions 1..4 dropped (4 revisions), 5120 -> 2048 bytes`.
fn trimmed_line(trimmed: &TrimmedHistory, dry_run: bool) -> String {
    let first = trimmed.oldest_before.as_u64();
    let last = trimmed.oldest_after.as_u64().saturating_sub(1);
    let range = if first == last {
        format!("revision {first}")
    } else {
        format!("revisions {first}..{last}")
    };
    let count = counted_u64(trimmed.dropped, "revision");
    let id = &trimmed.id;
    if dry_run {
        let mut line = format!("would trim {id}: would drop {range} ({count})");
        if let Some(bytes) = trimmed.bytes_before {
            let _ = write!(line, ", {bytes} bytes now");
        }
        return line;
    }
    let mut line = format!("trimmed {id}: {range} dropped ({count})");
    match (trimmed.bytes_before, trimmed.bytes_after) {
        (Some(before), Some(after)) => {
            let _ = write!(line, ", {before} -> {after} bytes");
        }
        (Some(before), None) => {
            let _ = write!(line, ", {before} bytes before");
        }
        (None, Some(after)) => {
            let _ = write!(line, ", {after} bytes now");
        }
        (None, None) => {}
    }
    line
}

/// `sessions export`: the bundle to `output` (a new private file) or to stdout.
pub fn export(
    store: &dyn SessionStore,
    ids: &[SessionId],
    output: Option<&Path>,
    force: bool,
) -> Result<(), Failure> {
    if let Some(path) = output {
        // Checked again when the file is put in place; checking first saves reading the
        // sessions for nothing.
        if force {
            replaceable(path)?;
        } else if fs::symlink_metadata(path).is_ok() {
            return Err(exists(path));
        }
    }
    let bytes = store.export(ids)?.to_json()?;
    if let Some(path) = output {
        write_private(path, &bytes, force)?;
        eprintln!(
            "exported {} session(s) to {} ({} bytes)",
            ids.len(),
            display::path(path),
            bytes.len()
        );
    } else {
        let mut stdout = io::stdout().lock();
        stdout
            .write_all(&bytes)
            .and_then(|()| stdout.flush())
            .map_err(|e| format!("could not write the bundle to stdout: {e}"))?;
    }
    Ok(())
}

/// With `--force`: `path` names nothing, or a regular file. A symbolic link (even to a
/// regular file), a FIFO, a socket, a directory or a device node is refused: replacing
/// `/dev/stdout` or `/dev/null`, say, would break the system for everyone, and replacing a
/// link is not what `-o LINK` reads as. Looked at with lstat, so nothing is followed or
/// opened (opening a FIFO would wait for a writer).
fn replaceable(path: &Path) -> Result<(), Failure> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(format!(
                "could not check what {} is before replacing it: {e}",
                path.display()
            )
            .into())
        }
    };
    if meta.is_file() {
        return Ok(());
    }
    let mut what = display::file_kind(meta.file_type()).to_owned();
    if let Ok(target) = fs::read_link(path) {
        what = format!("{what} (to {})", target.display());
    }
    Err(format!(
        "refused to replace {}: it is {what}, and --force replaces only a regular file; remove it yourself if it should go, or choose another file (without -o the bundle goes to stdout)",
        path.display()
    )
    .into())
}

fn exists(path: &Path) -> Failure {
    format!(
        "{} already exists: choose another file, or add --force to replace it",
        path.display()
    )
    .into()
}

/// Writes `bytes` to a new file at `path`, readable by its owner only (0600): to a
/// temporary file beside it first, then linked into place, so `path` never holds part of
/// a bundle. Without `force`, an existing `path` is left alone; with it, only a regular
/// file is replaced.
fn write_private(path: &Path, bytes: &[u8], force: bool) -> Result<(), Failure> {
    if path.file_name().is_none() {
        return Err(format!("{} is not a file name", path.display()).into());
    }
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let could_not = |e: io::Error| format!("could not write the bundle {}: {e}", path.display());
    // tempfile creates its files 0600 whatever the umask.
    let mut temp = tempfile::Builder::new()
        .prefix(".agent-export-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(could_not)?;
    temp.write_all(bytes)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(could_not)?;
    let placed = if force {
        // Checked again right before the rename, which narrows the window but does not
        // close it: rename(2) has no "only over a regular file" flag, and renameat2's
        // RENAME_EXCHANGE (swap, look at what came back, swap back) needs unsafe code or a
        // dependency feature this crate does not have. What remains is benign: only
        // someone who can write to the directory can swap the entry in that instant, the
        // rename replaces the name only (it never writes through a link or into a device),
        // and in a sticky directory such as /tmp they can swap only entries of their own.
        replaceable(path)?;
        temp.persist(path)
    } else {
        temp.persist_noclobber(path)
    };
    match placed {
        Ok(_) => {}
        Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => return Err(exists(path)),
        Err(e) => return Err(could_not(e.error).into()),
    }
    // The new name is durable once its directory is; a failure here loses nothing now.
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        eprintln!(
            "warning: could not sync {} after writing the bundle: {e}",
            display::path(dir)
        );
    }
    Ok(())
}

/// `sessions import`: reads and validates the whole bundle before opening the store, then
/// imports all of it or nothing.
pub fn import(spec: &StoreSpec, file: &Path, new_ids: bool) -> Result<(), Failure> {
    let bytes = if file == Path::new("-") {
        let mut bytes = Vec::new();
        io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map_err(|e| format!("could not read the bundle from stdin: {e}"))?;
        bytes
    } else {
        fs::read(file).map_err(|e| format!("could not read the bundle {}: {e}", file.display()))?
    };
    let bundle =
        Bundle::from_json(&bytes).map_err(|e| format!("{}: {}", file.display(), chain(&e)))?;
    let store = spec.open()?;
    let ids = if new_ids {
        ImportIds::Fresh
    } else {
        ImportIds::Keep
    };
    let imported = store.sessions().import(&bundle, &ids).map_err(|e| {
        // An incomplete import says itself which sessions it left behind.
        let complete_refusal = !matches!(e, agent_session::Error::ImportIncomplete { .. });
        let mut failure = with_hint(e, "--new-ids imports the sessions under new ids");
        if let Failure::Error(message) = &mut failure {
            if complete_refusal {
                message.push_str("\nnothing was imported");
            }
        }
        failure
    })?;
    for session in &imported {
        println!("imported {} as {}", session.from, session.id);
        if let Some((created, updated)) = session.clamped_from {
            eprintln!(
                "note: {} was created or updated later than this machine's clock allows ({}, {}); those times were set to now",
                session.id,
                created.format("%Y-%m-%d %H:%M:%S UTC"),
                updated.format("%Y-%m-%d %H:%M:%S UTC"),
            );
        }
    }
    eprintln!(
        "imported {} session(s) into {}",
        imported.len(),
        store.at().shown()
    );
    Ok(())
}

/// The failure for `error`, with `hint` on a line of its own if the error is a taken id.
fn with_hint(error: Error, hint: &str) -> Failure {
    let taken = matches!(error, Error::AlreadyExists { .. });
    let mut failure = Failure::from(error);
    if let (true, Failure::Error(message)) = (taken, &mut failure) {
        message.push_str("\nhint: ");
        message.push_str(hint);
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_session::{ContentBlock, ToolResult};

    #[test]
    fn rewind_summary_counts_and_quotes_the_dropped_turns() {
        let turn = |prompt: &str| {
            [
                Message::user(prompt),
                Message::assistant(vec![ContentBlock::text("ok")]),
            ]
        };
        let one: Vec<Message> = turn("calc 2*3").into();
        assert_eq!(
            rewind_summary(&one, 1),
            "dropped 2 messages (1 turn: \"calc 2*3\"), 1 message remains"
        );
        // Tool results are not prompts; a cut inside a turn drops no prompt.
        let tail = [
            Message::tool_result(ToolResult::new("c", "42")),
            Message::assistant(vec![ContentBlock::text("42")]),
        ];
        assert_eq!(
            rewind_summary(&tail, 2),
            "dropped 2 messages, 2 messages remain"
        );
        assert_eq!(
            rewind_summary(&tail[..1], 0),
            "dropped 1 message, 0 messages remain"
        );

        let long = "x".repeat(PROMPT_WIDTH + 5);
        let many: Vec<Message> = ["a\u{1b}[2J", long.as_str(), "c", "d", "e"]
            .into_iter()
            .flat_map(turn)
            .collect();
        let summary = rewind_summary(&many, 0);
        assert_eq!(
            summary,
            format!(
                "dropped 10 messages (5 turns: \"a\\u{{1b}}[2J\", \"{}…\", \"c\" and 2 more), 0 messages remain",
                "x".repeat(PROMPT_WIDTH)
            )
        );
    }

    #[test]
    fn turns_are_at_least_one_and_the_default_point_is_the_last_turn() {
        assert_eq!(parse_turns("2"), Ok(2));
        assert!(parse_turns("0").is_err_and(|e| e.contains("drop nothing")));
        assert!(parse_turns("-1").is_err());
        assert_eq!(rewind_to(None, None), RewindTo::LastTurns(1));
        assert_eq!(rewind_to(Some(3), None), RewindTo::LastTurns(3));
        assert_eq!(rewind_to(None, Some(4)), RewindTo::Message(4));
    }

    #[test]
    fn keep_revisions_is_at_least_one_since_the_head_always_stays() {
        assert_eq!(parse_keep_revisions("1"), Ok(1));
        assert_eq!(parse_keep_revisions("50"), Ok(50));
        assert!(parse_keep_revisions("0").is_err_and(|e| e.contains("use 1")));
        assert!(parse_keep_revisions("-1").is_err_and(|e| e.contains("not a number")));
    }
}
