//! Sessions of the benchmark workload, as every bench builds them: the workload's OpenAI
//! chat messages, one usage entry per completion, turns appended the way a harness does.

use agent_session::{Compaction, Message, Role, SessionId, SessionSnapshot, SessionStore, Usage};
use chrono::Utc;
use serde_json::Value;

/// The model every benchmark session runs with.
pub const MODEL: &str = "bench-model";

/// The workload's OpenAI chat messages as the crate's.
pub fn to_messages(wire: &[Value]) -> Vec<Message> {
    wire.iter()
        .map(|m| Message::from_openai_chat(m).expect("workload messages are valid OpenAI chat"))
        .collect()
}

/// One usage entry per assistant message: each is one completion.
pub fn usage_of(transcript: &[Message]) -> Vec<Usage> {
    transcript
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|_| Usage::new(MODEL).with_tokens(12_000, 300))
        .collect()
}

/// A new session `id` holding `transcript`, with its usage.
pub fn snapshot(id: &str, transcript: Vec<Message>) -> SessionSnapshot {
    let usage = usage_of(&transcript);
    SessionSnapshot::builder(SessionId::parse(id).expect("valid id"), MODEL)
        .transcript(transcript)
        .usage(usage)
        .build()
        .expect("workload transcripts pair every tool call")
}

/// `snapshot` with `turn` appended (one usage entry per assistant message), updated now.
pub fn with_turn(snapshot: SessionSnapshot, turn: Vec<Message>) -> SessionSnapshot {
    // Later than the last update even if the clock has not moved since.
    let later = (snapshot.updated_at() + chrono::TimeDelta::microseconds(1)).max(Utc::now());
    let usage = usage_of(&turn);
    snapshot
        .with_appended(turn, usage, later)
        .expect("a turn pairs its tool calls")
}

/// `transcript` cut into turns, each starting at a user message (the first also holds
/// whatever comes before its first user message).
pub fn turns_of(transcript: Vec<Message>) -> Vec<Vec<Message>> {
    let mut turns: Vec<Vec<Message>> = Vec::new();
    for message in transcript {
        match turns.last_mut() {
            Some(turn) if message.role != Role::User => turn.push(message),
            _ => turns.push(vec![message]),
        }
    }
    turns
}

/// Messages in the view of the compacted sessions: a summary, then the last turns.
pub const COMPACTED_VIEW: usize = 200;

/// Compacts stored session `id` so that its view holds about [`COMPACTED_VIEW`] messages
/// (one summary message, then every turn from the last one that leaves at least that
/// many), saves it, and returns the view's length.
pub fn compact_stored(store: &dyn SessionStore, id: &str) -> usize {
    let id = SessionId::parse(id).expect("id");
    let mut head = store.load(&id).expect("load");
    let view = head.transcript();
    let point = (0..=view.len() - (COMPACTED_VIEW - 1))
        .rev()
        .find(|&i| view[i].role == Role::User)
        .expect("a turn starts early enough");
    let summary = Message::user(format!(
        "Summary of the first {point} messages: {}",
        "the agent read, searched and changed the crate's files; ".repeat(16)
    ));
    head.compact(Compaction::new(point, vec![summary]))
        .expect("compact at a turn's start");
    let revision = store.save(&head).expect("save the compaction");
    let compacted = head.with_revision(revision);
    compacted.transcript().len()
}

/// Saves session `id` into `store` turn by turn, as an agent does; returns it as stored.
pub fn save_turn_by_turn(
    store: &dyn SessionStore,
    id: &str,
    transcript: Vec<Message>,
) -> SessionSnapshot {
    let mut turns = turns_of(transcript).into_iter();
    let first = snapshot(id, turns.next().unwrap_or_default());
    store.save(&first).expect("save the first turn");
    // Loaded, as a harness resumes it: a built snapshot does not know what is stored, so
    // saving it again would append it whole.
    let mut current = store.load(first.id()).expect("load the first turn");
    for turn in turns {
        current = with_turn(current, turn);
        let revision = store.save(&current).expect("save a turn");
        current = current.stored_at(revision);
    }
    current
}
