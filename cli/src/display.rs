//! Listings and transcripts, as printed by `sessions list`, `sessions show` and `/sessions`,
//! and the escaping of everything else the agent prints that it did not write itself.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::Path;

use agent_session::{
    BlockPosition, ContentBlock, Role, SessionList, SessionSnapshot, ToolArguments, ToolCallStatus,
    ToolOutput,
};

/// Longest title shown in a listing, in characters.
const TITLE_WIDTH: usize = 50;

/// The table of readable sessions, newest first (the order the store gives). After the
/// title: `[archived]` for an archived session, `[updated in the future: …]` for one whose
/// time is later than the clock allows (listed last), `[fork of PARENT@N]` for a fork that
/// started with the first N messages of PARENT.
pub fn session_table(list: &SessionList) -> String {
    let id_width = list
        .sessions
        .iter()
        .map(|s| s.id.as_str().len())
        .max()
        .unwrap_or(0)
        .max(2);
    let mut out = format!(
        "{:<id_width$}  {:<19}  {:>5}  {:>12}  TITLE\n",
        "ID", "UPDATED (UTC)", "MSGS", "COST"
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
        let _ = writeln!(
            out,
            "{:<id_width$}  {:<19}  {:>5}  {:>12}  {shown}",
            s.id.as_str(),
            s.updated_at.format("%Y-%m-%d %H:%M:%S"),
            s.message_count,
            s.cost.to_string(),
        );
    }
    out
}

/// A whole session: a header, then the transcript with each tool call followed directly by
/// its result.
pub fn transcript(snapshot: &SessionSnapshot) -> String {
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
