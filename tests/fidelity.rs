//! Recorded provider transcripts survive conversion, save and load unchanged.
//!
//! Reads every JSON file in `../shared/fidelity/` (public SDK test recordings of the OpenAI
//! and Anthropic APIs; see the README there). The files are not part of this repository: if
//! the directory is absent the tests print why and pass without checking anything.
//!
//! For each file, each message is converted to the neutral model, the transcript is built
//! into a snapshot, saved to a `FileSessionStore`, loaded back, converted back to the
//! provider form, and compared with the recording exactly: integers stay integers, floats
//! stay floats, strings are byte for byte equal, `null` and absent fields stay apart.

mod common;
#[path = "common/fidelity.rs"]
mod fidelity_support;

use agent_session::{
    ContentBlock, FileSessionStore, Message, Role, SessionId, SessionSnapshot, SessionStore,
    ToolArguments,
};
use common::{json_difference, temp_store};
use fidelity_support::{export as to_provider, import as from_provider, recordings, Recording};
use serde_json::Value;

/// The arguments of every tool call in a recording, as the provider sent them: OpenAI's
/// `arguments` strings and Anthropic's `tool_use` `input` values, in order.
fn recorded_arguments(provider: &str, messages: &[Value]) -> Vec<(String, ToolArguments)> {
    let mut found = Vec::new();
    for message in messages {
        if provider == "openai" {
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                let arguments = call["function"]["arguments"]
                    .as_str()
                    .expect("OpenAI arguments are a string");
                found.push((
                    call["id"].as_str().expect("a call id").to_owned(),
                    ToolArguments::Text(arguments.to_owned()),
                ));
            }
        } else {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_use" {
                    found.push((
                        block["id"].as_str().expect("a tool_use id").to_owned(),
                        ToolArguments::Json(block["input"].clone()),
                    ));
                }
            }
        }
    }
    found
}

/// Checks one recording end to end; returns what went wrong, if anything.
fn check(recording: &Recording, store: &FileSessionStore) -> Result<(), String> {
    let Recording {
        name,
        provider,
        messages,
        ..
    } = recording;

    let mut transcript = Vec::with_capacity(messages.len());
    for (i, original) in messages.iter().enumerate() {
        let message = from_provider(provider, original)
            .map_err(|e| format!("message {i} cannot be converted: {e}"))?;
        let direct = to_provider(provider, &message)
            .map_err(|e| format!("message {i} cannot be converted back: {e}"))?;
        if let Some(difference) = json_difference(original, &direct, &format!("messages[{i}]")) {
            return Err(format!(
                "conversion alone changes the message: {difference}"
            ));
        }
        transcript.push(message);
    }

    let id = SessionId::parse(name).map_err(|e| format!("file name is not an id: {e}"))?;
    let snapshot = SessionSnapshot::builder(id.clone(), "fidelity")
        .transcript(transcript)
        .build()
        .map_err(|e| {
            format!(
                "the recorded transcript cannot be saved as a snapshot (a session requires \
                 every tool call to have a result): {e}"
            )
        })?;
    store
        .save(&snapshot)
        .map_err(|e| format!("save failed: {e}"))?;
    let loaded = store.load(&id).map_err(|e| format!("load failed: {e}"))?;
    if loaded.transcript() != snapshot.transcript() {
        return Err("the loaded transcript differs from the saved one".to_owned());
    }

    for (i, original) in messages.iter().enumerate() {
        let back = to_provider(provider, &loaded.transcript()[i])
            .map_err(|e| format!("loaded message {i} cannot be converted back: {e}"))?;
        if let Some(difference) = json_difference(original, &back, &format!("messages[{i}]")) {
            return Err(format!("save and load change the message: {difference}"));
        }
        if *original != back {
            return Err(format!("message {i} differs after save and load"));
        }
    }

    let recorded = recorded_arguments(provider, messages);
    let stored: Vec<(String, ToolArguments)> = loaded
        .transcript()
        .iter()
        .flat_map(Message::tool_calls)
        .map(|call| (call.id.clone(), call.arguments.clone()))
        .collect();
    if recorded != stored {
        return Err(format!(
            "tool-call arguments changed:\n recorded {recorded:?}\n stored   {stored:?}"
        ));
    }
    if provider == "openai" {
        // Byte for byte: the stored text is the recorded text, not a re-encoding of it.
        for ((_, recorded), (id, stored)) in recorded.iter().zip(&stored) {
            let (ToolArguments::Text(recorded), ToolArguments::Text(stored)) = (recorded, stored)
            else {
                return Err(format!("arguments of {id} are not kept as text"));
            };
            if recorded.as_bytes() != stored.as_bytes() {
                return Err(format!("arguments of {id} changed bytes"));
            }
        }
    }
    if loaded.tool_calls().len() != stored.len() {
        return Err("not every tool call has a record".to_owned());
    }
    Ok(())
}

#[test]
fn recorded_transcripts_survive_save_and_load_unchanged() {
    let Some(files) = recordings() else {
        return;
    };
    let (_dir, store) = temp_store();
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for recording in &files {
        match check(recording, &store) {
            Ok(()) => checked.push(format!(
                "{} ({} {}, {} messages)",
                recording.name,
                recording.provider,
                recording.api.as_deref().unwrap_or("?"),
                recording.messages.len()
            )),
            Err(problem) => failures.push(format!("{}: {problem}", recording.name)),
        }
    }
    eprintln!("checked unchanged:\n  {}", checked.join("\n  "));
    assert!(
        failures.is_empty(),
        "{} of {} recordings did not survive unchanged:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    let listing = store.list().expect("list");
    assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
    assert_eq!(listing.sessions.len(), files.len());
}

/// `openai-responses-live-basic.json` holds Responses API items, not Chat Completions
/// messages. The Chat converter keeps them anyway: `id`, `type` and `status` go to `extra`
/// and the `output_text` parts (with `annotations` and `logprobs`) to `ContentBlock::Other`.
#[test]
fn responses_api_items_round_trip_through_the_chat_converter() {
    let Some(files) = recordings() else {
        return;
    };
    let Some(recording) = files
        .iter()
        .find(|r| r.name == "openai-responses-live-basic")
    else {
        eprintln!("skipping: openai-responses-live-basic.json is not among the recordings");
        return;
    };
    assert_eq!(recording.api.as_deref(), Some("responses"));
    let item = recording
        .messages
        .iter()
        .find(|m| m["type"] == "message")
        .expect("a Responses `message` item");

    let message = Message::from_openai_chat(item).expect("convert the item");

    assert_eq!(message.role, Role::Assistant);
    for key in ["id", "type", "status"] {
        assert_eq!(
            message.extra.get(key),
            item.get(key),
            "{key} is kept in extra"
        );
    }
    assert!(
        message
            .content
            .iter()
            .all(|b| matches!(b, ContentBlock::Other { value } if value["type"] == "output_text")),
        "output_text parts are kept verbatim: {:?}",
        message.content
    );
    assert_eq!(
        message.content.len(),
        item["content"].as_array().map_or(0, Vec::len)
    );
    let back = message.to_openai_chat().expect("convert back");
    assert_eq!(json_difference(item, &back, "$"), None);

    let (_dir, store) = temp_store();
    check(recording, &store).expect("the recording survives save and load");
}

/// The comparison used above is exact: it must not hide the differences it is meant to
/// catch.
#[test]
fn exact_comparison_tells_integers_floats_null_and_absent_apart() {
    use serde_json::json;
    let pairs = [
        (json!({"n": 1}), json!({"n": 1.0})),
        (
            json!({"n": 0.1}),
            json!({"n": f64::from_bits(0.1_f64.to_bits() + 1)}),
        ),
        (json!({"a": null}), json!({})),
        (json!({"a": []}), json!({"a": null})),
        (json!({"s": "é"}), json!({"s": "e\u{301}"})),
        (json!([1, 2]), json!([2, 1])),
    ];
    for (expected, actual) in pairs {
        assert!(
            json_difference(&expected, &actual, "$").is_some(),
            "{expected} and {actual} must differ"
        );
        assert!(json_difference(&actual, &expected, "$").is_some());
    }
    let same = json!({"n": 1, "f": 1.0, "big": u64::MAX, "neg": i64::MIN, "x": [null, {}]});
    assert_eq!(json_difference(&same, &same.clone(), "$"), None);
}
