//! Listings and transcripts, as printed by `sessions list`, `sessions show` and `/sessions`.

use std::fmt::Write as _;

use agent_session::{
    ContentBlock, Role, SessionList, SessionSnapshot, ToolArguments, ToolCallStatus, ToolOutput,
};

/// Longest title shown in a listing, in characters.
const TITLE_WIDTH: usize = 50;

/// The table of readable sessions, newest first (the order the store gives). After the
/// title: `[archived]` for an archived session, `[fork of PARENT@N]` for a fork that
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
        let mut shown: String = title.chars().take(TITLE_WIDTH).collect();
        if title.chars().count() > TITLE_WIDTH {
            shown.push('…');
        }
        if s.archived {
            shown.push_str("  [archived]");
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
        options.model,
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
    for message in snapshot.transcript() {
        let who = match message.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            // Every result is printed under its call, below.
            Role::Tool => continue,
        };
        for block in &message.content {
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
                        &format!("[tool call {}] {} {arguments}", call.id, call.name),
                    );
                    let paired = snapshot
                        .tool_calls()
                        .iter()
                        .find(|r| r.call_id == call.id)
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

/// `who> text`, with continuation lines indented under the text.
fn push_block(out: &mut String, who: &str, text: &str) {
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
