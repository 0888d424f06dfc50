//! Replays every input saved from a fuzzing run through the same checks the fuzz targets
//! run (`fuzz/src/lib.rs`, included below), so a crash once found stays fixed.
//!
//! Inputs live in `tests/fuzz_regressions/<target>/`, one file per finding, named after what
//! it exercises. A directory may be empty or absent; the golden fixtures, recorded provider
//! messages (when `../shared/fidelity/` exists) and hand-written samples are replayed as
//! well, so these tests check something even then. The fuzzing itself is documented in
//! `fuzz/README.md`.

#[path = "../fuzz/src/lib.rs"]
mod checks;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use agent_session::{Message, SessionId, SessionSnapshot};
use serde_json::{json, Value};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The check of fuzz target `target`.
fn check_of(target: &str) -> checks::Check {
    checks::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map_or_else(
            || panic!("no fuzz target named {target}"),
            |(_, check)| *check,
        )
}

/// Runs `check` on `data`, turning a panic inside the library into a violation.
fn run(check: checks::Check, data: &[u8]) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| check(data)))
        .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(&*panic))))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a non-string panic".to_owned())
}

/// The files in `dir`, sorted by name; none if it does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    if !dir.is_dir() {
        return Vec::new();
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Replays every saved input of `target` and fails listing each one that breaks its check.
fn replay_regressions(target: &str) {
    let check = check_of(target);
    let dir = repo().join("tests/fuzz_regressions").join(target);
    let failures: Vec<String> = files_in(&dir)
        .iter()
        .filter_map(|path| {
            let data = std::fs::read(path).expect("read a regression input");
            run(check, &data)
                .err()
                .map(|violation| format!("{}:\n  {violation}", path.display()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of the saved {target} inputs fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn saved_decode_snapshot_inputs_pass() {
    replay_regressions("decode_snapshot");
}

#[test]
fn saved_parse_id_inputs_pass() {
    replay_regressions("parse_id");
}

#[test]
fn saved_provider_messages_inputs_pass() {
    replay_regressions("provider_messages");
}

#[test]
fn every_regression_directory_belongs_to_a_fuzz_target() {
    let root = repo().join("tests/fuzz_regressions");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            entry.path().is_dir() && checks::TARGETS.iter().any(|(t, _)| *t == name),
            "{} is not a directory named after a fuzz target ({:?}): its inputs would never be replayed",
            entry.path().display(),
            checks::TARGETS.iter().map(|(t, _)| *t).collect::<Vec<_>>()
        );
    }
}

/// The golden snapshots, as (file name, bytes).
fn golden_fixtures() -> Vec<(String, Vec<u8>)> {
    let fixtures: Vec<(String, Vec<u8>)> = files_in(&repo().join("tests/fixtures/v1"))
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let name = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&path).expect("read a golden fixture"))
        })
        .collect();
    assert!(fixtures.len() >= 5, "the golden fixtures are missing");
    fixtures
}

#[test]
fn golden_snapshots_pass_the_decode_check_on_its_accepting_path() {
    for (name, bytes) in golden_fixtures() {
        // The check must have run its round-trip properties, not just classified an error.
        let snapshot = SessionSnapshot::from_json(&bytes)
            .unwrap_or_else(|e| panic!("{name} no longer decodes: {e}"));
        run(checks::decode_snapshot, &bytes).unwrap_or_else(|v| panic!("{name}: {v}"));
        run(
            checks::decode_snapshot,
            &snapshot.to_json().expect("encode"),
        )
        .unwrap_or_else(|v| panic!("{name} re-encoded: {v}"));
        run(checks::parse_id, snapshot.id().as_str().as_bytes())
            .unwrap_or_else(|v| panic!("{name}'s id: {v}"));
    }
}

#[test]
fn damaged_golden_snapshots_pass_the_decode_check_on_its_refusing_path() {
    for (name, bytes) in golden_fixtures() {
        // Cut inside the document (its closing brace is the last non-blank byte).
        let cuts = [bytes.len() / 2, bytes.trim_ascii_end().len() - 1, 1];
        for cut in cuts {
            let truncated = &bytes[..cut];
            assert!(
                SessionSnapshot::from_json(truncated).is_err(),
                "{name}[..{cut}]"
            );
            run(checks::decode_snapshot, truncated)
                .unwrap_or_else(|v| panic!("{name} cut at {cut}: {v}"));
        }
        let mut value: Value = serde_json::from_slice(&bytes).expect("golden JSON");
        value["options"]["max_turns"] = json!(0);
        let inconsistent = value.to_string();
        assert!(SessionSnapshot::from_json(inconsistent.as_bytes()).is_err());
        run(checks::decode_snapshot, inconsistent.as_bytes())
            .unwrap_or_else(|v| panic!("{name} with max_turns 0: {v}"));
        value["schema_version"] = json!(2);
        run(checks::decode_snapshot, value.to_string().as_bytes())
            .unwrap_or_else(|v| panic!("{name} at schema 2: {v}"));
    }
}

#[test]
fn sample_ids_pass_the_id_check_both_ways() {
    let accepted = [
        "a",
        "0",
        "session-1",
        "a_b-c",
        "con1",
        "lpt10",
        "019a2b3c-4d5e-7f00-8a9b-0c1d2e3f4a5b",
    ];
    let longest = "x".repeat(agent_session::MAX_ID_LEN);
    let too_long = "x".repeat(agent_session::MAX_ID_LEN + 1);
    let refused = [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "a\\b",
        "a\0b",
        "-lead",
        "_lead",
        ".hidden",
        "a.json",
        "Caps",
        "caf\u{e9}",
        "a\u{2215}b",
        "\u{ff0e}\u{ff0e}",
        "a\u{202e}b",
        "con",
        "lpt9",
        "%2e%2e%2f",
        &too_long,
    ];
    for id in accepted.iter().chain([&longest.as_str()]) {
        assert!(SessionId::parse(id).is_ok(), "{id:?}");
        assert!(checks::follows_id_rules(id), "{id:?}");
        run(checks::parse_id, id.as_bytes()).unwrap_or_else(|v| panic!("{v}"));
    }
    for id in refused {
        assert!(SessionId::parse(id).is_err(), "{id:?}");
        assert!(!checks::follows_id_rules(id), "{id:?}");
        run(checks::parse_id, id.as_bytes()).unwrap_or_else(|v| panic!("{v}"));
    }
    // Invalid UTF-8 is checked as its lossy replacement, which is refused.
    run(checks::parse_id, b"a\xffb").expect("invalid UTF-8");
}

/// Provider messages each provider must accept, written here so the check's accepting path
/// runs even without the recordings.
fn sample_messages() -> Vec<(&'static str, Value)> {
    vec![
        (
            "openai",
            json!({"role": "user", "content": "hi", "name": "ada"}),
        ),
        (
            "openai",
            json!({"role": "developer", "content": [{"type": "text", "text": "Be brief."}]}),
        ),
        (
            "openai",
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":  1}"}}
            ]}),
        ),
        (
            "openai",
            json!({"role": "tool", "tool_call_id": "c1", "content": "42"}),
        ),
        (
            "anthropic",
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "EqQB"},
                {"type": "text", "text": "Sure", "citations": null},
                {"type": "tool_use", "id": "t1", "name": "get", "input": {"n": 1.0, "z": -0.0}}
            ]}),
        ),
        (
            "anthropic",
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "x"}], "is_error": false},
                {"type": "tool_result", "tool_use_id": "t2"}
            ]}),
        ),
    ]
}

fn accepts(provider: &str, message: &Value) -> bool {
    match provider {
        "openai" => Message::from_openai_chat(message).is_ok(),
        _ => Message::from_anthropic(message).is_ok(),
    }
}

#[test]
fn sample_provider_messages_pass_the_provider_check() {
    for (provider, message) in sample_messages() {
        assert!(accepts(provider, &message), "{provider} refused {message}");
        run(checks::provider_messages, message.to_string().as_bytes())
            .unwrap_or_else(|v| panic!("{v}"));
    }
}

#[test]
fn recorded_provider_messages_pass_the_provider_check() {
    let dir = repo().join("../shared/fidelity");
    let recordings: Vec<PathBuf> = files_in(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    if recordings.is_empty() {
        eprintln!(
            "skipping: {} holds no recordings (they are not part of this repository)",
            dir.display()
        );
        return;
    }
    let mut accepted = 0;
    for path in recordings {
        let recording: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read a recording"))
                .expect("a JSON recording");
        let provider = if recording["provider"] == "anthropic" {
            "anthropic"
        } else {
            "openai"
        };
        let messages = recording["messages"].as_array().expect("a messages list");
        for message in messages {
            if recording["api"] != "responses" {
                assert!(accepts(provider, message), "{}: {message}", path.display());
                accepted += 1;
            }
            run(checks::provider_messages, message.to_string().as_bytes())
                .unwrap_or_else(|v| panic!("{}: {v}", path.display()));
        }
        run(
            checks::provider_messages,
            Value::Array(messages.clone()).to_string().as_bytes(),
        )
        .unwrap_or_else(|v| panic!("{} as a list: {v}", path.display()));
    }
    assert!(accepted > 0, "no recorded message was accepted");
}

#[test]
fn exact_comparison_tells_apart_what_value_equality_does_not() {
    // The negative control for the provider check: each pair is `==` or nearly so as
    // `serde_json::Value`, but a lossless conversion must keep them apart.
    let pairs = [
        (json!(-0.0), json!(0.0)),
        (json!(1), json!(1.0)),
        (json!({"a": null}), json!({})),
        (json!([1, 2]), json!([1])),
        (json!("e\u{301}"), json!("\u{e9}")),
        (
            json!({"n": 18_446_744_073_709_551_615_u64}),
            json!({"n": 1.844_674_407_370_955_2e19}),
        ),
    ];
    for (expected, actual) in pairs {
        assert!(
            checks::json_difference(&expected, &actual, "$").is_some(),
            "{expected} vs {actual}"
        );
        assert!(checks::json_difference(&expected, &expected, "$").is_none());
    }
    assert_eq!(checks::nesting_depth(br#"{"a":"[[[{","b":[{}]}"#), 3);
}

#[test]
fn every_bug_the_fuzz_targets_step_over_is_replayed_here_and_nothing_else_is_skipped() {
    // The fuzz targets skip inputs that hit a known open bug (`checks::KNOWN_ISSUES`) so a
    // long run keeps searching; this file must then replay such an input, or the bug could
    // hide from `cargo test`.
    for (target, hits, description) in checks::KNOWN_ISSUES {
        let saved = files_in(&repo().join("tests/fuzz_regressions").join(target));
        assert!(
            saved
                .iter()
                .any(|path| hits(&std::fs::read(path).expect("read a regression input"))),
            "{target} skips \"{description}\" but no saved input replays it"
        );
    }
    for (_, message) in sample_messages() {
        assert!(
            checks::known_issue("provider_messages", message.to_string().as_bytes()).is_none(),
            "the filter must not skip ordinary messages: {message}"
        );
    }
    for (name, bytes) in golden_fixtures() {
        for (target, _) in checks::TARGETS {
            assert!(
                checks::known_issue(target, &bytes).is_none(),
                "{target} skips {name}"
            );
        }
    }
}
