//! Listings, transcripts and histories, as printed by `sessions list`, `sessions show`,
//! `sessions history` and `/sessions`, and the escaping of everything else the agent
//! prints that it did not write itself.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::Path;

use agent_session::{
    BlockPosition, ContentBlock, HistoryStats, Lease, Message, Revision, RevisionInfo, Role,
    SessionList, SessionSnapshot, Standing, ToolArguments, ToolCallStatus, ToolOutput,
};

/// Longest title shown in a listing, in characters.
const TITLE_WIDTH: usize = 50;

/// Longest message shown in a line of `sessions history --messages`, in characters.
const PREVIEW_WIDTH: usize = 72;

/// The HIST column of a listing: what the session's kept history holds beyond its view,
/// one letter each: `R` rewound, `C` compacted, `S` an earlier revision restored; empty
/// for a session whose view is all that was said.
pub fn history_marker(stats: &HistoryStats) -> String {
    let mut marker = String::new();
    for (count, letter) in [
        (stats.rewinds, 'R'),
        (stats.compactions, 'C'),
        (stats.restores, 'S'),
    ] {
        if count > 0 {
            marker.push(letter);
        }
    }
    marker
}

/// The table of readable sessions, newest first (the order the store gives). HIST marks
/// a session whose history holds more than its view ([`history_marker`]). After the
/// title: `[archived]` for an archived session, `[updated in the future: …]` for one whose
/// time is later than the clock allows (listed last), `[fork of PARENT@N]` for a fork that
/// started with the first N messages of PARENT.
pub fn session_table(list: &SessionList, leases: &[Lease]) -> String {
    let id_width = list
        .sessions
        .iter()
        .map(|s| s.id.as_str().len())
        .max()
        .unwrap_or(0)
        .max(2);
    let mut out = format!(
        "{:<id_width$}  {:<19}  {:>5}  {:>12}  {:<4}  TITLE\n",
        "ID", "UPDATED (UTC)", "MSGS", "COST", "HIST"
    );
    for s in &list.sessions {
        let title = s.title.as_deref().unwrap_or("(untitled)");
        let mut shown = escape_controls(
            &title.chars().take(TITLE_WIDTH).collect::<String>(),
            Keep::Nothing,
        )
        .into_owned();
        if title.chars().count() > TITLE_WIDTH {
            shown.push('…');
        }
        if s.archived {
            shown.push_str("  [archived]");
        }
        if s.is_updated_in_the_future() {
            // Listed last, whatever its time says; see CLOCK_SKEW_TOLERANCE.
            shown.push_str("  [updated in the future: a clock was ahead]");
        }
        if let Some(lineage) = &s.lineage {
            let _ = write!(
                shown,
                "  [fork of {}@{}]",
                lineage.parent, lineage.fork_point
            );
        }
        if let Some(lease) = leases.iter().find(|l| l.session == s.id) {
            let _ = write!(
                shown,
                "  [open by {} since {}]",
                escape_controls(&lease.holder.to_string(), Keep::Nothing),
                lease.acquired_at.format("%Y-%m-%d %H:%M:%S")
            );
        }
        let _ = writeln!(
            out,
            "{:<id_width$}  {:<19}  {:>5}  {:>12}  {:<4}  {shown}",
            s.id.as_str(),
            s.updated_at.format("%Y-%m-%d %H:%M:%S"),
            s.message_count,
            s.cost.to_string(),
            history_marker(&s.history),
        );
    }
    out
}

/// Which state of a session [`transcript`] prints.
#[derive(Clone, Copy)]
pub enum Shown {
    /// The head (`sessions show ID`): the header says what its history holds beyond it.
    Head,
    /// An earlier revision (`sessions show ID --at REV`), with the head's revision.
    Past {
        /// The session's head revision.
        head: Revision,
    },
}

/// A whole session: a header, then the transcript with each tool call followed directly by
/// its result.
pub fn transcript(snapshot: &SessionSnapshot, shown: Shown) -> String {
    let totals = snapshot.totals();
    let options = snapshot.options();
    let mut out = String::new();
    let _ = writeln!(out, "session {}", snapshot.id());
    let _ = writeln!(
        out,
        "  model {}, revision {}, created {}, updated {}",
        escape_controls(&options.model, Keep::Nothing),
        snapshot.revision(),
        snapshot.created_at().format("%Y-%m-%d %H:%M:%S UTC"),
        snapshot.updated_at().format("%Y-%m-%d %H:%M:%S UTC"),
    );
    let _ = writeln!(
        out,
        "  {} messages, {} completions, {} input + {} output tokens, cost {}",
        snapshot.transcript().len(),
        totals.completions,
        totals.input_tokens,
        totals.output_tokens,
        totals.cost
    );
    if let Some(lineage) = snapshot.lineage() {
        let _ = writeln!(
            out,
            "  forked from {} at message {} (its revision {}), {}",
            lineage.parent,
            lineage.fork_point,
            lineage.parent_revision,
            lineage.forked_at.format("%Y-%m-%d %H:%M:%S UTC"),
        );
    }
    push_state(&mut out, snapshot, shown);
    if let Some(system) = &options.system_prompt {
        push_block(&mut out, "system", system);
    }
    for (message_at, message) in snapshot.transcript().iter().enumerate() {
        let who = match message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            // Every result is printed under its call, below.
            Role::Tool => continue,
        };
        for (block_at, block) in message.content.iter().enumerate() {
            match block {
                ContentBlock::Text(text) => push_block(&mut out, who, &text.text),
                ContentBlock::ToolCall(call) => {
                    let arguments = match &call.arguments {
                        ToolArguments::Text(text) => text.clone(),
                        ToolArguments::Json(value) => value.to_string(),
                    };
                    push_block(
                        &mut out,
                        who,
                        &format!(
                            "[tool call {}] {} {arguments}",
                            escape_controls(&call.id, Keep::Nothing),
                            escape_controls(&call.name, Keep::Nothing)
                        ),
                    );
                    // By position, not by id: some servers number calls per response,
                    // so the same id comes back in later steps.
                    let at = BlockPosition {
                        message: message_at,
                        block: block_at,
                    };
                    let paired = snapshot
                        .tool_calls()
                        .iter()
                        .find(|r| r.call_at == at)
                        .and_then(|record| Some((record, snapshot.tool_result(record)?)));
                    let Some((record, result)) = paired else {
                        push_block(&mut out, "", "[no result recorded]");
                        continue;
                    };
                    let status = match record.status {
                        ToolCallStatus::Ok => "ok",
                        ToolCallStatus::Error => "error",
                        ToolCallStatus::Interrupted => "interrupted",
                    };
                    let output = match &result.output {
                        ToolOutput::Text(text) => text.clone(),
                        ToolOutput::Blocks(blocks) => format!("({} content blocks)", blocks.len()),
                    };
                    push_block(&mut out, "", &format!("[result {status}] {output}"));
                }
                // Already printed under its call (a valid snapshot pairs every result).
                ContentBlock::ToolResult(_) => {}
                _ => push_block(&mut out, who, "[a provider-specific block]"),
            }
        }
    }
    out
}

/// The header line saying which state [`transcript`] prints: an earlier revision (and
/// how to make it the head again), or for the head what its history holds beyond it.
fn push_state(out: &mut String, snapshot: &SessionSnapshot, shown: Shown) {
    match shown {
        Shown::Past { head } if head != snapshot.revision() => {
            let _ = writeln!(
                out,
                "  as it was at revision {}; the head is revision {head} (`sessions restore {} {}` makes this state the head again)",
                snapshot.revision(),
                snapshot.id(),
                snapshot.revision(),
            );
        }
        Shown::Past { .. } => {
            let _ = writeln!(out, "  revision {} is the head", snapshot.revision());
        }
        Shown::Head => {
            let stats = snapshot.history_stats();
            if stats.was_edited() {
                let edits: Vec<String> = [
                    (stats.rewinds, "rewound"),
                    (stats.compactions, "compacted"),
                    (stats.restores, "restored"),
                ]
                .into_iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| times(n, what))
                .collect();
                let _ = writeln!(
                    out,
                    "  history: {} (`sessions history {}` lists its revisions)",
                    edits.join(", "),
                    snapshot.id()
                );
            }
        }
    }
}

/// `rewound 2 times`, `compacted once`.
fn times(n: u64, what: &str) -> String {
    match n {
        1 => format!("{what} once"),
        n => format!("{what} {n} times"),
    }
}

/// The revisions of `sessions history`, oldest first: each one's number, time, kind of
/// change and view length, and for a restore the revision it went back to.
pub fn revision_table(revisions: &[RevisionInfo]) -> String {
    let head = revisions.last().map(|r| r.revision);
    let width = head.map_or(0, |r| r.to_string().len()).max(3);
    let mut out = format!(
        "{:>width$}  {:<19}  {:<10}  {:>5}  NOTE\n",
        "REV", "SAVED (UTC)", "KIND", "MSGS"
    );
    for info in revisions {
        let mut notes = Vec::new();
        if let Some(from) = info.restored_from {
            notes.push(format!("restored revision {from}"));
        }
        if Some(info.revision) == head {
            notes.push("the head".to_owned());
        }
        let line = format!(
            "{:>width$}  {:<19}  {:<10}  {:>5}  {}",
            info.revision.as_u64(),
            info.updated_at.format("%Y-%m-%d %H:%M:%S"),
            info.kind.as_str(),
            info.messages,
            notes.join(", ")
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A message of a session's history as `sessions history --messages` lists it.
pub struct HistoryRow {
    /// The message.
    pub message: Message,
    /// The revision that saved it.
    pub added_at: Revision,
    /// Where it stands at the head.
    pub standing: Standing,
}

/// Every message of a session's kept history, oldest first, one line each: the revision
/// that saved it, where it stands now, its role and the start of its text. `head` is the
/// head revision (for the column's width).
pub fn history_messages(rows: &[HistoryRow], head: Revision) -> String {
    let width = head.to_string().len().max(5);
    let mut out = format!(
        "{:>width$}  {:<16}  {:<9}  MESSAGE\n",
        "SAVED", "STANDING", "ROLE"
    );
    for entry in rows {
        let standing = match entry.standing {
            Standing::InView { index } => format!("in view #{index}"),
            Standing::Rewound { revision } => format!("rewound at {revision}"),
            Standing::Compacted { revision } => format!("compacted at {revision}"),
            Standing::Replaced { revision } => format!("replaced at {revision}"),
            other => other
                .removed_at()
                .map_or_else(|| "in view".to_owned(), |r| format!("removed at {r}")),
        };
        let role = match entry.message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let _ = writeln!(
            out,
            "{:>width$}  {standing:<16}  {role:<9}  {}",
            entry.added_at.as_u64(),
            preview(&entry.message)
        );
    }
    out
}

/// A message on one line: its text's first line, tool calls and results in brackets, cut
/// to [`PREVIEW_WIDTH`] characters, control characters escaped.
fn preview(message: &Message) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut more = false;
    for block in &message.content {
        let (part, rest) = match block {
            ContentBlock::Text(text) => first_line(&text.text),
            ContentBlock::ToolCall(call) => {
                let arguments = match &call.arguments {
                    ToolArguments::Text(text) => text.clone(),
                    ToolArguments::Json(value) => value.to_string(),
                };
                first_line(&format!(
                    "[tool call {}] {} {arguments}",
                    call.id, call.name
                ))
            }
            ContentBlock::ToolResult(result) => {
                let output = match &result.output {
                    ToolOutput::Text(text) => text.clone(),
                    ToolOutput::Blocks(blocks) => format!("({} content blocks)", blocks.len()),
                };
                let status = if result.is_error { " error" } else { "" };
                first_line(&format!("[result{status} {}] {output}", result.call_id))
            }
            _ => ("[a provider-specific block]".to_owned(), false),
        };
        more |= rest;
        parts.push(part);
    }
    let joined = parts.join(" ");
    let mut shown: String = joined.chars().take(PREVIEW_WIDTH).collect();
    if more || joined.chars().count() > PREVIEW_WIDTH {
        shown.push('…');
    }
    escape_controls(&shown, Keep::Nothing).into_owned()
}

/// The first non-empty line of `text`, and whether there is more after it.
fn first_line(text: &str) -> (String, bool) {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default().to_owned();
    (first, lines.next().is_some())
}

/// `who> text`, with continuation lines indented under the text, and control characters
/// escaped.
fn push_block(out: &mut String, who: &str, text: &str) {
    let text = escape_controls(text, Keep::LinesAndTabs);
    let label = if who.is_empty() {
        String::new()
    } else {
        format!("{who}> ")
    };
    let indent = " ".repeat("assistant> ".len());
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let _ = writeln!(out, "{label:<width$}{first}", width = indent.len());
    for line in lines {
        let _ = writeln!(out, "{indent}{line}");
    }
}

/// Which layout characters [`escape_controls`] leaves as they are.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// None: for text that must stay on one line (a title in a table, a model name, a tool
    /// name), where a newline could forge a line of output.
    Nothing,
    /// Newline and tab, for text printed over several lines on purpose (a transcript, a
    /// reply, an error with its hint).
    LinesAndTabs,
}

/// `text` with every character that would act on the terminal instead of being shown
/// replaced by its Rust escape, `\u{HEX}` in lowercase hex (ESC shows as `\u{1b}`, BEL as
/// `\u{7}`).
///
/// Titles, transcripts, tool output, model names and file names come from prompts, models,
/// imported bundles and files in the workspace; printed raw, an escape sequence in one of
/// them could retitle the terminal window (`ESC ] 0 ; … BEL`), recolour or clear the screen,
/// or, on some terminals, answer back with input. Escaped are: the C0 controls (but newline
/// and tab with [`Keep::LinesAndTabs`]), carriage return among them (it lets text overwrite
/// its own line), DEL, the C1 controls U+0080 to U+009F (U+009B is a one-character CSI on
/// some terminals), and the bidirectional marks, embeddings, overrides and isolates (U+061C,
/// U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which reorder the text shown around
/// them. A backslash is left alone, so text that already reads `\u{1b}` looks the same as an
/// escaped ESC: the output is for reading, and `sessions export` gives the exact bytes.
pub fn escape_controls(text: &str, keep: Keep) -> Cow<'_, str> {
    let acts = |c: char| {
        let kept = keep == Keep::LinesAndTabs && matches!(c, '\n' | '\t');
        !kept && (c.is_control() || is_bidi_control(c))
    };
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if acts(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The characters that change the direction of the text around them (Unicode's
/// `Bidi_Control` property).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// What kind of file `file_type` is, for messages: "a FIFO", "a symbolic link", ….
pub fn file_kind(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_file() {
        "a regular file"
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// A path for a status line, escaped like any other text the agent did not write.
pub fn path(path: &Path) -> String {
    escape_controls(&path.display().to_string(), Keep::Nothing).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_controls_shows_what_would_act_on_a_terminal() {
        let hostile = "a\u{1b}]0;t\u{7}b\r\u{7f}\u{85}\u{9b}\u{202e}\u{2066}\u{200f}\tc\nd";
        assert_eq!(
            escape_controls(hostile, Keep::LinesAndTabs),
            "a\\u{1b}]0;t\\u{7}b\\u{d}\\u{7f}\\u{85}\\u{9b}\\u{202e}\\u{2066}\\u{200f}\tc\nd"
        );
        assert_eq!(escape_controls("x\ty\nz", Keep::Nothing), "x\\u{9}y\\u{a}z");
        assert!(matches!(
            escape_controls("plain, with é and ✓", Keep::Nothing),
            Cow::Borrowed(_)
        ));
    }
}
