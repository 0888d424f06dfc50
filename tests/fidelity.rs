//! Recorded provider transcripts come back exactly: the same JSON text, byte for byte once
//! insignificant whitespace is removed (keys in their order, numbers as written, strings
//! unchanged, absent vs `null` vs empty apart, unknown fields and types kept).
//!
//! Reads every JSON file in `../shared/fidelity/` (public SDK test recordings of the OpenAI
//! and Anthropic APIs; see the README there). The files are not part of this repository: if
//! the directory is absent the tests print why and pass without checking anything. Each
//! message's text is read with `RawValue`, so the test itself reorders nothing.
//!
//! Two paths, each through a fresh store instance before the export:
//! - **whole save**: import every message (`Message::from_json`), build a snapshot, save
//!   it, open the store again, load, export (`Message::to_json`);
//! - **journal**: save a prefix of the transcript, open the store again, load, append the
//!   rest (`SessionSnapshot::with_appended`) and save it (an append to the journal), open
//!   the store again, load, export.

mod common;
#[path = "common/fidelity.rs"]
mod fidelity_support;

use std::path::Path;

use agent_session::{
    Codec, FileSessionStore, Message, SessionId, SessionSnapshot, SessionStore, ToolArguments,
};
use common::json_difference;
use fidelity_support::{compact, own_corpus, recordings, Recording};
use serde_json::Value;

/// `message` imported through the codec's `&Value` entry point.
fn from_value(codec: Codec, message: &Value) -> agent_session::Result<Message> {
    match codec {
        Codec::OpenAiChat => Message::from_openai_chat(message),
        Codec::OpenAiResponses => Message::from_responses(message),
        Codec::Anthropic => Message::from_anthropic(message),
        Codec::Gemini => Message::from_gemini(message),
        other => panic!("no Value entry point for {other:?}"),
    }
}

/// The messages of `recording`, imported from their text.
fn import_texts(recording: &Recording) -> Result<Vec<Message>, String> {
    let codec = recording.codec();
    recording
        .texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            Message::from_json(codec, text).map_err(|e| format!("message {i} is refused: {e}"))
        })
        .collect()
}

/// Checks that every message of `loaded` exports to the recorded text.
fn compare(recording: &Recording, loaded: &[Message], stage: &str) -> Result<(), String> {
    if loaded.len() != recording.texts.len() {
        return Err(format!(
            "{stage}: {} messages, recorded {}",
            loaded.len(),
            recording.texts.len()
        ));
    }
    for (i, (message, text)) in loaded.iter().zip(&recording.texts).enumerate() {
        let back = message
            .to_json(recording.codec())
            .map_err(|e| format!("{stage}: message {i} cannot be exported: {e}"))?;
        let expected = compact(text);
        if back != expected {
            let at = back
                .bytes()
                .zip(expected.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(back.len().min(expected.len()));
            return Err(format!(
                "{stage}: message {i} differs from byte {at}:\n expected …{}\n exported …{}",
                &expected[at.saturating_sub(20)..(at + 40).min(expected.len())],
                &back[at.saturating_sub(20)..(at + 40).min(back.len())],
            ));
        }
    }
    Ok(())
}

fn reopen(dir: &Path) -> FileSessionStore {
    FileSessionStore::open(dir).expect("open the store again")
}

fn build(id: &SessionId, messages: Vec<Message>) -> Result<SessionSnapshot, String> {
    SessionSnapshot::builder(id.clone(), "fidelity")
        .transcript(messages)
        .build()
        .map_err(|e| format!("the transcript does not build into a snapshot: {e}"))
}

/// Import → whole save → load in a fresh store instance → export.
fn through_whole_save(recording: &Recording, dir: &Path) -> Result<(), String> {
    let messages = import_texts(recording)?;
    compare(recording, &messages, "import alone")?;
    let id = SessionId::parse(&format!("whole-{}", recording.name)).map_err(|e| e.to_string())?;
    let snapshot = build(&id, messages)?;
    reopen(dir)
        .save(&snapshot)
        .map_err(|e| format!("save: {e}"))?;
    let loaded = reopen(dir).load(&id).map_err(|e| format!("load: {e}"))?;
    if loaded.transcript() != snapshot.transcript() {
        return Err("the loaded transcript differs from the saved one".to_owned());
    }
    compare(recording, loaded.transcript(), "whole save")
}

/// Import → save a prefix → load → append the rest → save (journal) → load in a fresh
/// store instance → export.
fn through_the_journal(recording: &Recording, dir: &Path) -> Result<(), String> {
    let messages = import_texts(recording)?;
    let id = SessionId::parse(&format!("journal-{}", recording.name)).map_err(|e| e.to_string())?;
    // The longest proper prefix that is a valid snapshot (no call left without its result).
    let cut = (1..messages.len())
        .rev()
        .find(|&k| build(&id, messages[..k].to_vec()).is_ok())
        .ok_or("no prefix of the transcript is a valid snapshot")?;
    let rest = messages[cut..].to_vec();
    reopen(dir)
        .save(&build(&id, messages[..cut].to_vec())?)
        .map_err(|e| format!("save the prefix: {e}"))?;
    let loaded = reopen(dir)
        .load(&id)
        .map_err(|e| format!("load the prefix: {e}"))?;
    let extended = loaded
        .with_appended(rest, Vec::new(), chrono::Utc::now())
        .map_err(|e| format!("append: {e}"))?;
    reopen(dir)
        .save(&extended)
        .map_err(|e| format!("save the append: {e}"))?;
    let journal = dir.join(format!("{id}.journal"));
    if !journal.is_file() {
        return Err("the append did not go to the journal".to_owned());
    }
    let loaded = reopen(dir).load(&id).map_err(|e| format!("load: {e}"))?;
    compare(recording, loaded.transcript(), "journal")
}

#[test]
fn recorded_transcripts_come_back_exactly_through_save_and_the_journal() {
    let Some(files) = recordings() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store_dir = dir.path().join("sessions");
    let mut failures = Vec::new();
    let (mut whole, mut journal) = (0, 0);
    for recording in &files {
        match through_whole_save(recording, &store_dir) {
            Ok(()) => whole += 1,
            Err(problem) => failures.push(format!("{} (whole save): {problem}", recording.name)),
        }
        match through_the_journal(recording, &store_dir) {
            Ok(()) => journal += 1,
            Err(problem) => failures.push(format!("{} (journal): {problem}", recording.name)),
        }
    }
    eprintln!(
        "exact: {whole} of {n} recordings through a whole save, {journal} of {n} through the journal",
        n = files.len()
    );
    assert!(failures.is_empty(), "not exact:\n{}", failures.join("\n"));
    let listing = reopen(&store_dir).list().expect("list");
    assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
}

/// The crate's own corpus (`tests/provider_corpus/`, written from the public API
/// references of the OpenAI Responses API, Gemini, Gemini's OpenAI compatibility mode and
/// the OpenAI Chat features the recordings lack) comes back exactly the same ways.
#[test]
fn the_crates_own_corpus_comes_back_exactly_through_save_and_the_journal() {
    let files = own_corpus();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store_dir = dir.path().join("sessions");
    let mut failures = Vec::new();
    for recording in &files {
        if let Err(problem) = through_whole_save(recording, &store_dir) {
            failures.push(format!("{} (whole save): {problem}", recording.name));
        }
        if let Err(problem) = through_the_journal(recording, &store_dir) {
            failures.push(format!("{} (journal): {problem}", recording.name));
        }
    }
    let messages: usize = files.iter().map(|r| r.texts.len()).sum();
    eprintln!(
        "own corpus: {} of {} files ({messages} messages) exact through a whole save and the journal",
        files.len() - failures.len().min(files.len()),
        files.len()
    );
    assert!(failures.is_empty(), "not exact:\n{}", failures.join("\n"));
    // Through the `&Value` entry points, each message comes back equal as a value (key
    // order and number lexemes aside): what a message that lost its text is written from.
    for recording in &files {
        for (i, original) in recording.messages.iter().enumerate() {
            let message = from_value(recording.codec(), original).expect("import the value");
            let back: Value =
                serde_json::from_str(&message.to_json(recording.codec()).expect("export"))
                    .expect("JSON");
            assert_eq!(
                json_difference(original, &back, &format!("messages[{i}]")),
                None,
                "{}",
                recording.name
            );
        }
    }
    // Whole transcripts too: Codec::import and Codec::export give the array back.
    for recording in &files {
        let array = format!("[{}]", recording.texts.join(","));
        let messages = recording
            .codec()
            .import(&array)
            .expect("import the transcript");
        // A Responses group is spliced into the list item by item.
        let spliced: Vec<String> = recording
            .texts
            .iter()
            .map(|text| {
                let text = compact(text);
                match text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                    Some(items) => items.to_owned(),
                    None => text,
                }
            })
            .collect();
        assert_eq!(
            recording
                .codec()
                .export(&messages)
                .expect("export the transcript"),
            format!("[{}]", spliced.join(",")),
            "{}",
            recording.name
        );
    }
}

/// The negative control: the comparison above catches a key moved, a number re-written and
/// whitespace-only differences are not counted. The `&Value` entry points sort keys, so
/// through them the same recordings are not exact (they are equal as values).
#[test]
fn the_exact_comparison_catches_reordered_keys_and_rewritten_numbers() {
    let text = r#"{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}], "x": 1.10}"#;
    let recording = Recording {
        name: "control".to_owned(),
        provider: "openai".to_owned(),
        api: None,
        messages: vec![serde_json::from_str(text).expect("JSON")],
        texts: vec![text.to_owned()],
    };
    let exact = import_texts(&recording).expect("import");
    assert_eq!(compare(&recording, &exact, "control"), Ok(()));
    for changed in [
        text.replace(
            r#""role": "assistant", "content": null"#,
            r#""content": null, "role": "assistant""#,
        ),
        text.replace("1.10", "1.1"),
    ] {
        let other = Message::from_openai_chat_json(&changed).expect("import");
        assert!(
            compare(&recording, &[other], "control").is_err(),
            "{changed} must not pass for {text}"
        );
    }

    let Some(files) = recordings() else {
        return;
    };
    let mut exact_through_values = 0;
    for recording in &files {
        let through_values: Vec<Message> = recording
            .messages
            .iter()
            .map(|m| from_value(recording.codec(), m).expect("the Value entry point imports it"))
            .collect();
        if compare(recording, &through_values, "values").is_ok() {
            exact_through_values += 1;
        }
        // Equal as values all the same.
        for (original, message) in recording.messages.iter().zip(&through_values) {
            let back: Value =
                serde_json::from_str(&message.to_json(recording.codec()).expect("export"))
                    .expect("JSON");
            assert_eq!(
                json_difference(original, &back, "$"),
                None,
                "{}",
                recording.name
            );
        }
    }
    eprintln!(
        "through the &Value entry points: {exact_through_values} of {} recordings exact",
        files.len()
    );
    assert!(
        exact_through_values < files.len(),
        "the comparison cannot tell the exact path from the Value path"
    );
}

/// Tool-call arguments are kept as the provider sent them: OpenAI's `arguments` strings
/// byte for byte, Anthropic's `input` as its value.
#[test]
fn recorded_tool_call_arguments_are_kept() {
    let Some(files) = recordings() else {
        return;
    };
    for recording in &files {
        let messages = import_texts(recording).expect("import");
        for (message, original) in messages.iter().zip(&recording.messages) {
            let calls: Vec<_> = message.tool_calls().collect();
            if recording.provider == "openai" {
                let recorded = original["tool_calls"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                assert_eq!(calls.len(), recorded.len(), "{}", recording.name);
                for (call, wire) in calls.iter().zip(&recorded) {
                    let text = wire["function"]["arguments"].as_str().expect("a string");
                    assert_eq!(call.arguments, ToolArguments::Text(text.to_owned()));
                }
            } else {
                let recorded: Vec<&Value> = original["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "tool_use")
                    .collect();
                assert_eq!(calls.len(), recorded.len(), "{}", recording.name);
                for (call, block) in calls.iter().zip(recorded) {
                    assert_eq!(call.arguments, ToolArguments::Json(block["input"].clone()));
                }
            }
        }
    }
}

#[test]
fn codecs_are_named_as_in_errors() {
    assert_eq!(Codec::OpenAiChat.name(), "openai-chat");
    assert_eq!(Codec::Anthropic.name(), "anthropic");
}
