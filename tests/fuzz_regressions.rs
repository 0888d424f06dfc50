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
fn saved_journal_reader_inputs_pass() {
    replay_regressions("journal_reader");
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

/// The golden snapshots of every schema version, as (`v<N>/<file name>`, bytes): every
/// `tests/fixtures/v<N>/` directory, which must be exactly the versions this release reads.
fn golden_fixtures() -> Vec<(String, Vec<u8>)> {
    let root = repo().join("tests/fixtures");
    let mut versions: Vec<u32> =
        std::fs::read_dir(&root)
            .unwrap_or_else(|e| panic!("read {}: {e}", root.display()))
            .filter_map(|entry| {
                let name = entry.expect("a directory entry").file_name();
                let name = name.to_string_lossy();
                let number = name.strip_prefix('v')?;
                Some(number.parse().unwrap_or_else(|_| {
                    panic!("tests/fixtures/{name} is not named v<schema version>")
                }))
            })
            .collect();
    versions.sort_unstable();
    assert_eq!(
        versions,
        (agent_session::OLDEST_SCHEMA_VERSION..=agent_session::SCHEMA_VERSION)
            .collect::<Vec<u32>>(),
        "a golden fixture directory per schema version this release reads"
    );
    let mut fixtures: Vec<(String, Vec<u8>)> = Vec::new();
    for version in versions {
        let files: Vec<PathBuf> = files_in(&root.join(format!("v{version}")))
            .into_iter()
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .collect();
        assert!(
            files.len() >= 5,
            "the golden fixtures of schema version {version} are missing"
        );
        for path in files {
            let name = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            let bytes = std::fs::read(&path).expect("read a golden fixture");
            fixtures.push((format!("v{version}/{name}"), bytes));
        }
    }
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

/// The turn contents of the `journal_reader` inputs below: three turns, the first two with a
/// tool round (the second failing), the third reloaded from the store first.
const TURNS: &[u8] = b"\x01hello\x03world\x08again";

/// A `journal_reader` input in its history mode (see `checks::journal_reader`): `turns`
/// incremental saves of `contents`, the journal cut at `cut`, then `tail` of kind `kind`.
fn history_input(turns: u8, cut: u16, kind: u8, contents: &[u8], tail: &[u8]) -> Vec<u8> {
    let [low, high] = cut.to_le_bytes();
    let len = u8::try_from(contents.len()).expect("short turn contents");
    let mut input = vec![0, turns, low, high, kind, len];
    input.extend_from_slice(contents);
    input.extend_from_slice(tail);
    input
}

/// What `journal_reader` did with `input`, which must pass the check.
fn journal_outcome(input: &[u8]) -> checks::JournalOutcome {
    checks::journal_reader_outcome(input).unwrap_or_else(|v| panic!("{v}"))
}

/// Where each frame of a journal made of whole frames ends.
fn frame_ends(journal: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at < journal.len() {
        let len = std::str::from_utf8(&journal[at + 1..at + 9])
            .ok()
            .and_then(|hex| usize::from_str_radix(hex, 16).ok())
            .expect("a frame header");
        at += 19 + len + 1;
        ends.push(at);
    }
    assert_eq!(at, journal.len(), "the journal ends with a whole frame");
    ends
}

/// The journal of the three turns, whole, and where its frames end.
fn three_records() -> (checks::JournalOutcome, Vec<usize>) {
    let outcome = journal_outcome(&history_input(3, 0, 0, TURNS, &[]));
    let ends = frame_ends(&outcome.written);
    assert_eq!(ends.len(), 4, "a header and three records");
    assert_eq!(outcome.saved.len(), 4, "the base and three saves");
    (outcome, ends)
}

fn cut_at(at: usize) -> u16 {
    u16::try_from(at).expect("a journal shorter than 64 KiB")
}

#[test]
fn every_cut_of_a_journal_loads_the_state_of_the_last_record_wholly_before_it() {
    let (whole, ends) = three_records();
    let len = whole.written.len();
    // Every byte around each frame's end, and every 16th byte in between.
    let mut cuts: Vec<usize> = (0..=len).step_by(16).collect();
    for &end in &ends {
        cuts.extend(end.saturating_sub(20)..=(end + 2).min(len));
    }
    cuts.sort_unstable();
    cuts.dedup();
    for cut in cuts {
        let outcome = journal_outcome(&history_input(3, cut_at(cut), 0, TURNS, &[]));
        assert_eq!(outcome.read, whole.written[..cut], "cut at {cut}");
        let records = ends[1..].iter().filter(|&&end| end <= cut).count();
        let loaded = outcome
            .loaded
            .unwrap_or_else(|e| panic!("the journal cut at {cut} was refused: {e}"));
        assert_eq!(loaded, whole.saved[records], "cut at {cut}");
        assert_eq!(loaded.revision().as_u64(), 1 + records as u64);
    }
}

#[test]
fn zero_filled_and_garbage_tails_after_a_cut_are_torn_not_corrupt() {
    let (whole, ends) = three_records();
    let inside_the_last = ends[3] - 100;
    let tails: [(u8, &[u8]); 3] = [
        (1, &[64]),                                     // 256 zero bytes
        (0, b"\x00garbage\n@0000 junk\n@zzzzzzzz 0\n"), // no frame header parses
        (0, b"\n@00000002 00000000\n{}\n"),             // a frame whose checksum fails
    ];
    for (kind, tail) in tails {
        for cut in [ends[0], ends[2], inside_the_last] {
            let outcome = journal_outcome(&history_input(3, cut_at(cut), kind, TURNS, tail));
            let records = ends[1..].iter().filter(|&&end| end <= cut).count();
            let loaded = outcome.loaded.unwrap_or_else(|e| {
                panic!("cut at {cut}, tail {tail:?} of kind {kind}: refused: {e}")
            });
            assert_eq!(loaded, whole.saved[records], "cut at {cut}, tail {tail:?}");
        }
    }
}

#[test]
fn a_duplicated_frame_or_damage_before_an_intact_line_is_refused_as_corrupt() {
    let (whole, ends) = three_records();
    let len = cut_at(whole.written.len());
    let inputs = [
        // Each frame copied after the whole journal.
        history_input(3, len, 3, TURNS, &[0]),
        history_input(3, len, 3, TURNS, &[1]),
        history_input(3, len, 3, TURNS, &[3]),
        // The first record twice, then the third after the first.
        history_input(3, cut_at(ends[1]), 3, TURNS, &[1]),
        history_input(3, cut_at(ends[1]), 3, TURNS, &[3]),
        // A byte replaced inside the second record, and one deleted from the header.
        history_input(3, cut_at(ends[1] + 100), 2, TURNS, b"\x01X"),
        history_input(3, cut_at(ends[0] - 30), 2, TURNS, &[1]),
    ];
    for input in inputs {
        let outcome = journal_outcome(&input);
        let err = outcome
            .loaded
            .expect_err("a journal that no crash leaves loaded");
        assert!(err.contains("fuzz.journal"), "{err}");
    }
}

#[test]
fn the_tail_written_again_after_a_cut_loads_the_whole_journal() {
    let (whole, ends) = three_records();
    for cut in [5, ends[0], ends[1] + 37, ends[3] - 1] {
        let outcome = journal_outcome(&history_input(3, cut_at(cut), 2, TURNS, &[0]));
        assert_eq!(outcome.read, whole.written, "cut at {cut}");
        assert_eq!(outcome.loaded.as_ref().ok(), whole.saved.last());
    }
}

#[test]
fn the_records_of_a_history_framed_by_the_check_load_to_its_last_state() {
    let (whole, ends) = three_records();
    // The framed mode frames each line itself: the payloads alone give the same journal.
    let mut input = vec![3];
    let mut start = 0;
    for (i, &end) in ends.iter().enumerate() {
        if i > 0 {
            input.push(b'\n');
        }
        input.extend_from_slice(&whole.written[start + 19..end - 1]);
        start = end;
    }
    let outcome = journal_outcome(&input);
    assert_eq!(outcome.read, whole.written);
    assert_eq!(outcome.loaded.as_ref().ok(), whole.saved.last());
    // The same records after a header for another base revision are ignored.
    let header = String::from_utf8(whole.written[19..ends[0] - 1].to_vec()).expect("UTF-8");
    let stale = header.replace("\"base_revision\":1", "\"base_revision\":2");
    assert_ne!(stale, header);
    let mut input = vec![3];
    input.extend_from_slice(stale.as_bytes());
    input.push(b'\n');
    input.extend_from_slice(&whole.written[ends[0] + 19..ends[1] - 1]);
    let outcome = journal_outcome(&input);
    assert_eq!(outcome.loaded.as_ref().ok(), whole.saved.first());
}

#[test]
fn the_journal_check_never_passes_a_load_that_drops_intact_records() {
    // The negative control of the journal check, whose expectations come from the frames,
    // not from the reader: damage to the newline before the last record, or a byte inserted
    // there, leaves that record intact. The check passes only if loading refuses the
    // journal; a reader that drops the record (the open issue in `checks::KNOWN_ISSUES`)
    // fails it with that issue's message.
    let (whole, ends) = three_records();
    for input in [
        history_input(3, cut_at(ends[2] - 1), 2, TURNS, b"\x01x"),
        history_input(3, cut_at(ends[2]), 2, TURNS, b"\x00x"),
    ] {
        match checks::journal_reader_outcome(&input) {
            Ok(outcome) => {
                assert!(
                    outcome.loaded.is_err(),
                    "the check passed a load that dropped the last record"
                );
            }
            Err(violation) => {
                assert!(
                    violation.starts_with(checks::DROPS_MID_LINE_FRAMES),
                    "{violation}"
                );
            }
        }
    }
    // The same places torn (cut, then zeros) or followed by a copy of a frame at the start
    // of a line: the check passes the reader's answers (the state before, a refusal).
    for input in [
        history_input(3, cut_at(ends[2] - 1), 1, TURNS, &[8]),
        history_input(3, cut_at(whole.written.len()), 3, TURNS, &[2]),
    ] {
        checks::journal_reader(&input).unwrap_or_else(|v| panic!("{v}"));
        assert!(checks::known_issue("journal_reader", &input).is_none());
    }
}
