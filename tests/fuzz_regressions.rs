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

use agent_session::{
    Compaction, ContentBlock, EntryKind, LogEntry, Message, Revision, RewindTo, SessionId,
    SessionLog, SessionSnapshot, ToolCall, ToolResult, Usage,
};
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
fn saved_log_entry_inputs_pass() {
    replay_regressions("log_entry");
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
    // The framed mode frames each piece itself: the payloads alone, each an entry's head
    // and body lines, give the same journal.
    let mut input = vec![3];
    let mut start = 0;
    for (i, &end) in ends.iter().enumerate() {
        if i > 0 {
            input.push(checks::PIECE_SEPARATOR);
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
    input.push(checks::PIECE_SEPARATOR);
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

/// Save contents of equal length (the history mode splits them evenly), one save of each
/// kind `checks::JournalOp` has: a turn with a tool round, a rewind of it, a turn, a
/// restore of saved state 1 (revision 2, from before the rewind: 5 text bytes mod 4 saved
/// states), a compaction whose summary has a failing tool round, an edit, a turn with a
/// tool round reloaded from the store first, and a restore of saved state 5 (the
/// compaction's revision 6).
const EVERY_KIND: &[u8] =
    b"\x01hello\x10-----\x00again\x30back!\x23summa\x40edits\x09after\x30again";

/// The kinds of the revisions [`EVERY_KIND`] saves, the base's first.
const EVERY_KIND_KINDS: [EntryKind; 9] = [
    EntryKind::Checkpoint,
    EntryKind::Turn,
    EntryKind::Rewind,
    EntryKind::Turn,
    EntryKind::Restore,
    EntryKind::Compaction,
    EntryKind::Edit,
    EntryKind::Turn,
    EntryKind::Restore,
];

/// The journal of [`EVERY_KIND`]'s eight saves, whole, and where its frames end.
fn every_kind() -> (checks::JournalOutcome, Vec<usize>) {
    let written = journal_outcome(&history_input(8, 0, 0, EVERY_KIND, &[])).written;
    let outcome = journal_outcome(&history_input(8, cut_at(written.len()), 0, EVERY_KIND, &[]));
    assert_eq!(outcome.read, written, "the whole journal, read");
    let ends = frame_ends(&outcome.written);
    assert_eq!(outcome.kinds, EVERY_KIND_KINDS);
    assert_eq!(ends.len(), 9, "a header and eight entries");
    (outcome, ends)
}

/// The payloads of a journal made of whole frames.
fn payloads(journal: &[u8]) -> Vec<Vec<u8>> {
    let mut start = 0;
    frame_ends(journal)
        .into_iter()
        .map(|end| {
            let payload = journal[start + 19..end - 1].to_vec();
            start = end;
            payload
        })
        .collect()
}

/// Payloads joined as the framed modes of both targets split them.
fn joined(payloads: &[Vec<u8>]) -> Vec<u8> {
    payloads.join(&checks::PIECE_SEPARATOR)
}

#[test]
fn a_history_of_every_kind_of_entry_loads_every_revision_as_saved() {
    let (whole, _) = every_kind();
    let loaded = whole.loaded.as_ref().expect("the whole journal loads");
    assert_eq!(Some(loaded), whole.saved.last());
    let stats = loaded.history_stats();
    assert_eq!(
        (stats.rewinds, stats.compactions, stats.restores),
        (1, 1, 2)
    );
    // The saves did what they say: the rewind dropped turn 0, the first restore brought it
    // back, the compaction put its summary first, the edit set metadata, the last restore
    // went back to the compaction's view (and its metadata, without the edit's).
    let texts =
        |s: &SessionSnapshot| -> Vec<String> { s.transcript().iter().map(Message::text).collect() };
    assert_eq!(texts(&whole.saved[2]), ["base"]);
    assert_eq!(texts(&whole.saved[4]), texts(&whole.saved[1]));
    assert!(texts(&whole.saved[5])[0].starts_with("summary 4"));
    assert_eq!(whole.saved[6].metadata()["edit"], json!(5));
    assert_eq!(texts(&whole.saved[8]), texts(&whole.saved[5]));
    assert!(whole.saved[8].metadata().is_empty());
    assert!(whole.saved[8].usage().len() > whole.saved[5].usage().len());
    // In the framed mode the same entries, framed by the check, load the same head.
    let outcome = journal_outcome(&[&[3][..], &joined(&payloads(&whole.written))].concat());
    assert_eq!(outcome.read, whole.written);
    assert_eq!(outcome.loaded.as_ref().ok(), whole.saved.last());
}

#[test]
fn every_cut_of_a_history_of_every_kind_loads_the_state_of_the_last_whole_entry() {
    let (whole, ends) = every_kind();
    let len = whole.written.len();
    let mut cuts: Vec<usize> = (0..=len).step_by(97).collect();
    for &end in &ends {
        cuts.extend(end.saturating_sub(2)..=(end + 2).min(len));
    }
    cuts.sort_unstable();
    cuts.dedup();
    for cut in cuts {
        let outcome = journal_outcome(&history_input(8, cut_at(cut), 0, EVERY_KIND, &[]));
        let entries = ends[1..].iter().filter(|&&end| end <= cut).count();
        let loaded = outcome
            .loaded
            .unwrap_or_else(|e| panic!("the journal cut at {cut} was refused: {e}"));
        assert_eq!(loaded, whole.saved[entries], "cut at {cut}");
    }
}

#[test]
fn a_duplicated_or_damaged_entry_of_any_kind_is_refused_as_corrupt() {
    let (whole, ends) = every_kind();
    let len = cut_at(whole.written.len());
    for frame in 1..9u8 {
        let outcome = journal_outcome(&history_input(8, len, 3, EVERY_KIND, &[frame]));
        outcome.loaded.expect_err("a duplicated entry");
    }
    for at in [ends[1] + 30, ends[4] + 25, ends[7] - 40] {
        let outcome = journal_outcome(&history_input(8, cut_at(at), 2, EVERY_KIND, b"\x01X"));
        outcome
            .loaded
            .expect_err("a byte replaced before an intact frame");
    }
}

// ---------------------------------------------------------------------------------------
// log_entry

/// A fixed time `minute` minutes after the checkpoint of `checks::log_checkpoint`.
fn minute(minute: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_735_689_600 + 60 * minute, 0).expect("a valid time")
}

/// Entries as the crate writes them, one of each kind a snapshot's own operations make
/// (a turn with a tool round, a rewind, a compaction whose summary has a tool round, a
/// restore of a revision from before the rewind, a turn), after `checks::log_checkpoint`,
/// with the state each one makes.
fn crate_entries() -> Vec<(LogEntry, SessionSnapshot)> {
    let checkpoint = checks::log_checkpoint(true).expect("the checkpoint");
    let mut log = SessionLog::new(checkpoint.clone());
    let mut current = checkpoint;
    let mut out = Vec::new();
    let save = |next: SessionSnapshot, log: &mut SessionLog, out: &mut Vec<_>| {
        let entry = next
            .pending_entry()
            .expect("derives from the stored revision");
        log.push(entry.clone()).expect("the next revision");
        let stored = next.with_revision(entry.revision());
        assert_eq!(log.head().expect("the head"), stored);
        out.push((entry, stored.clone()));
        stored
    };
    let turn = vec![
        Message::user("third"),
        Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "c1",
            "lookup",
            json!({"q": 3}),
        ))]),
        Message::tool_result(ToolResult::error("c1", "nothing")),
        Message::assistant(vec![ContentBlock::text("three")]),
    ];
    current = save(
        current
            .with_appended(turn, vec![Usage::new("m").with_tokens(7, 3)], minute(1))
            .expect("a turn"),
        &mut log,
        &mut out,
    );
    let mut next = current.clone();
    next.rewind(RewindTo::LastTurns(2)).expect("a rewind");
    current = save(
        next.with_appended(Vec::new(), Vec::new(), minute(2))
            .expect("stamped"),
        &mut log,
        &mut out,
    );
    let mut next = current.clone();
    let summary = vec![
        Message::user("summary: first"),
        Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "s1",
            "recall",
            json!({}),
        ))]),
        Message::tool_result(ToolResult::new("s1", "recalled")),
    ];
    next.compact(Compaction::new(4, summary).with_usage(Usage::new("m").with_tokens(9, 1)))
        .expect("a compaction");
    current = save(
        next.with_appended(Vec::new(), Vec::new(), minute(3))
            .expect("stamped"),
        &mut log,
        &mut out,
    );
    let mut next = current.clone();
    next.restore_from(&log.at(Revision::from_u64(2)).expect("revision 2"))
        .expect("a restore");
    current = save(
        next.with_appended(Vec::new(), Vec::new(), minute(4))
            .expect("stamped"),
        &mut log,
        &mut out,
    );
    save(
        current
            .with_appended(
                vec![
                    Message::user("fourth"),
                    Message::assistant(vec![ContentBlock::text("four")]),
                ],
                Vec::new(),
                minute(5),
            )
            .expect("a turn"),
        &mut log,
        &mut out,
    );
    let kinds: Vec<EntryKind> = out.iter().map(|(e, _)| e.kind()).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::Turn,
            EntryKind::Rewind,
            EntryKind::Compaction,
            EntryKind::Restore,
            EntryKind::Turn
        ]
    );
    out
}

fn log_id() -> SessionId {
    SessionId::parse(checks::LOG_SESSION).expect("id")
}

/// The frame payload of an entry's stored form.
fn payload_of(entry: &LogEntry) -> Vec<u8> {
    let bytes = entry.to_bytes(&log_id()).expect("encode");
    bytes[19..bytes.len() - 1].to_vec()
}

/// `entry`'s payload with its head and body changed by `edit` (as JSON values).
fn edited(entry: &LogEntry, edit: impl FnOnce(&mut Value, &mut Value)) -> Vec<u8> {
    let payload = payload_of(entry);
    let newline = payload.iter().position(|&b| b == b'\n').expect("two lines");
    let mut head: Value = serde_json::from_slice(&payload[..newline]).expect("the head");
    let mut body: Value = serde_json::from_slice(&payload[newline + 1..]).expect("the body");
    edit(&mut head, &mut body);
    let mut out = serde_json::to_vec(&head).expect("encode");
    out.push(b'\n');
    out.extend(serde_json::to_vec(&body).expect("encode"));
    out
}

#[test]
fn entries_the_crate_writes_pass_the_entry_check_and_re_encode_to_their_own_bytes() {
    let entries = crate_entries();
    for (entry, _) in &entries {
        let bytes = entry.to_bytes(&log_id()).expect("encode");
        let decoded = LogEntry::from_bytes(&bytes).expect("decode");
        assert_eq!(&decoded, entry);
        assert_eq!(decoded.to_bytes(&log_id()).expect("encode"), bytes);
        run(checks::log_entry, &[&[1][..], &bytes].concat()).unwrap_or_else(|v| panic!("{v}"));
        run(checks::log_entry, &[&[0][..], &payload_of(entry)].concat())
            .unwrap_or_else(|v| panic!("{v}"));
    }
    // The whole log, in the log mode: the check works out every state, and the head is
    // the last state the snapshots made.
    let all: Vec<Vec<u8>> = entries.iter().map(|(e, _)| payload_of(e)).collect();
    run(checks::log_entry, &[&[2][..], &joined(&all)].concat()).unwrap_or_else(|v| panic!("{v}"));
    // Cut after every entry, and with each entry left out (the rest then do not follow).
    for n in 0..all.len() {
        run(checks::log_entry, &[&[2][..], &joined(&all[..n])].concat())
            .unwrap_or_else(|v| panic!("first {n}: {v}"));
        let mut without = all.clone();
        without.remove(n);
        run(checks::log_entry, &[&[2][..], &joined(&without)].concat())
            .unwrap_or_else(|v| panic!("without {n}: {v}"));
    }
}

#[test]
fn damaged_or_contradictory_entries_are_typed_errors_in_the_entry_check() {
    let entries = crate_entries();
    let (compaction, _) = &entries[2];
    let bytes = compaction.to_bytes(&log_id()).expect("encode");
    for cut in (0..bytes.len()).step_by(7) {
        assert!(LogEntry::from_bytes(&bytes[..cut]).is_err());
        run(checks::log_entry, &[&[1][..], &bytes[..cut]].concat())
            .unwrap_or_else(|v| panic!("cut at {cut}: {v}"));
    }
    for at in (0..bytes.len()).step_by(11) {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x20;
        run(checks::log_entry, &[&[1][..], &flipped].concat())
            .unwrap_or_else(|v| panic!("flipped at {at}: {v}"));
    }
    for input in hand_written_log_entry_inputs() {
        run(checks::log_entry, &input.1).unwrap_or_else(|v| panic!("{}: {v}", input.0));
    }
}

/// The check's negative control: it fails an entry decoder that accepts what it should
/// not, or a fold that panics, as the checks in `checks::log_entry` claim.
#[test]
fn the_entry_check_tells_a_refusal_from_an_acceptance_and_a_panic() {
    // An entry whose head counts more messages than its body holds is refused by the
    // crate; the check passes that refusal (a typed error)...
    let (turn, _) = &crate_entries()[0];
    let lying = edited(turn, |head, _| head["messages"] = json!(9));
    assert!(LogEntry::from_bytes(&checks::entry_frame(&lying)).is_err());
    run(checks::log_entry, &[&[0][..], &lying].concat()).expect("a typed refusal passes");
    // ...and `run` reports a panic in a check as a violation, not a pass.
    let panicking: checks::Check = |_| panic!("a panic inside the library");
    let violation = run(panicking, b"").expect_err("a panic is a finding");
    assert!(violation.contains("panicked"), "{violation}");
}

/// Hand-written `log_entry` inputs: (file name, bytes).
fn hand_written_log_entry_inputs() -> Vec<(String, Vec<u8>)> {
    let entries = crate_entries();
    let payload = |k: usize| payload_of(&entries[k].0);
    let all: Vec<Vec<u8>> = (0..entries.len()).map(payload).collect();
    let mut inputs = vec![
        (
            "log-every-kind-of-entry.bin",
            [&[2][..], &joined(&all)].concat(),
        ),
        (
            "entry-compaction-with-a-tool-round-in-its-summary.bin",
            [&[0][..], &payload(2)].concat(),
        ),
        (
            "entry-stored-form-of-a-restore.bin",
            [&[1][..], &entries[3].0.to_bytes(&log_id()).expect("encode")].concat(),
        ),
    ];
    let (restore, compaction, rewind) = (&entries[3].0, &entries[2].0, &entries[1].0);
    let later = edited(restore, |head, _| head["base"] = json!(5));
    inputs.push((
        "entry-restore-of-a-later-revision.bin",
        [&[0][..], &later].concat(),
    ));
    let before = edited(restore, |head, _| head["base"] = json!(0));
    let mut log = all[..3].to_vec();
    log.push(before);
    inputs.push((
        "log-restore-of-a-revision-before-the-checkpoint.bin",
        [&[2][..], &joined(&log)].concat(),
    ));
    let unanswered = edited(compaction, |head, body| {
        // The summary's tool result taken out: its call is left unanswered.
        let messages = body["messages"].as_array_mut().expect("messages");
        messages.remove(2);
        head["messages"] = json!(messages.len());
        body["tool_calls"] = json!([]);
        head["prepend"] = json!(2);
        let state = head["state"]["messages"].as_u64().expect("a count");
        head["state"]["messages"] = json!(state - 1);
        head["state"]["tool_calls"] = json!(0);
    });
    let mut log = all[..2].to_vec();
    log.push(unanswered);
    inputs.push((
        "log-compaction-summary-with-an-unanswered-call.bin",
        [&[2][..], &joined(&log)].concat(),
    ));
    let too_much = edited(rewind, |head, _| head["keep"] = json!([0, 99]));
    let mut log = all[..1].to_vec();
    log.push(too_much);
    inputs.push((
        "log-rewind-keeping-more-than-its-base.bin",
        [&[2][..], &joined(&log)].concat(),
    ));
    let mut skipping = all.clone();
    skipping.remove(1);
    inputs.push((
        "log-entries-skipping-a-revision.bin",
        [&[2][..], &joined(&skipping)].concat(),
    ));
    let metadata = format!(
        "{{\"revision\":2,\"updated_at\":\"{}\",\"kind\":\"metadata\",\"messages\":0,\"usage\":[],\"metadata\":{{\"k\":[1,2.5,null]}},\"state\":{{\"messages\":6,\"tool_calls\":1,\"usage\":2}}}}\n{{\"messages\":[],\"tool_calls\":[]}}",
        minute(1).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
    );
    inputs.push((
        "log-metadata-change.bin",
        [&[2][..], metadata.as_bytes()].concat(),
    ));
    let lying = edited(&entries[0].0, |head, _| head["messages"] = json!(9));
    inputs.push((
        "entry-head-counting-more-messages-than-its-body.bin",
        [&[0][..], &lying].concat(),
    ));
    inputs
        .into_iter()
        .map(|(name, bytes)| (name.to_owned(), bytes))
        .collect()
}

/// Hand-written `journal_reader` inputs: (file name, bytes). The history inputs name
/// places in the journal the saves write (frame ends), so they keep their meaning when the
/// journal's bytes change.
#[allow(clippy::too_many_lines)] // one input after another
fn hand_written_journal_inputs() -> Vec<(String, Vec<u8>)> {
    let (whole, ends) = three_records();
    let len = whole.written.len();
    let (every, every_ends) = every_kind();
    let every_payloads = payloads(&every.written);
    let mut inputs: Vec<(&str, Vec<u8>)> = vec![
        (
            "history-byte-inserted-before-the-last-record.bin",
            history_input(3, cut_at(ends[2]), 2, TURNS, b"\x00x"),
        ),
        (
            "history-byte-replaced-inside-the-second-record.bin",
            history_input(3, cut_at(ends[1] + 100), 2, TURNS, b"\x01X"),
        ),
        (
            "history-cut-after-the-second-record-then-garbage.bin",
            history_input(
                3,
                cut_at(ends[2]),
                0,
                TURNS,
                b"\x00garbage\n@0000 junk\n@zzzzzzzz 00000000\n",
            ),
        ),
        (
            "history-cut-inside-the-header.bin",
            history_input(3, 10, 0, TURNS, b""),
        ),
        (
            "history-cut-inside-the-last-record-then-zeros.bin",
            history_input(3, cut_at(ends[3] - 100), 1, TURNS, b"@"),
        ),
        (
            "history-cut-mid-record-then-the-rest-written-again.bin",
            history_input(3, cut_at(ends[2] - 50), 2, TURNS, b"\x00"),
        ),
        (
            "history-header-duplicated-after-the-first-record.bin",
            history_input(3, cut_at(ends[1]), 3, TURNS, b"\x00"),
        ),
        (
            "history-last-record-duplicated.bin",
            history_input(3, cut_at(len), 3, TURNS, b"\x03"),
        ),
        (
            "history-newline-before-the-last-record-replaced.bin",
            history_input(3, cut_at(ends[2] - 1), 2, TURNS, b"\x01x"),
        ),
        (
            "history-every-kind-cut-inside-the-last-restore.bin",
            history_input(8, cut_at(every_ends[8] - 10), 0, EVERY_KIND, b""),
        ),
        (
            "history-every-kind-compaction-entry-duplicated.bin",
            history_input(8, cut_at(every.written.len()), 3, EVERY_KIND, &[5]),
        ),
        (
            "history-every-kind-byte-replaced-inside-the-rewind.bin",
            history_input(8, cut_at(every_ends[1] + 30), 2, EVERY_KIND, b"\x01X"),
        ),
        (
            "history-every-kind-zeros-after-the-edit.bin",
            history_input(8, cut_at(every_ends[6]), 1, EVERY_KIND, &[16]),
        ),
        (
            "framed-every-kind-of-entry.bin",
            [&[3][..], &joined(&every_payloads)].concat(),
        ),
    ];
    // The same entries with one made to contradict the log.
    let mut edit_payload = |name: &'static str, k: usize, edit: &dyn Fn(&mut Value, &mut Value)| {
        let payload = &every_payloads[k];
        let newline = payload.iter().position(|&b| b == b'\n').expect("two lines");
        let mut head: Value = serde_json::from_slice(&payload[..newline]).expect("head");
        let mut body: Value = serde_json::from_slice(&payload[newline + 1..]).expect("body");
        edit(&mut head, &mut body);
        let mut changed = every_payloads.clone();
        changed[k] = [
            serde_json::to_vec(&head).expect("encode"),
            b"\n".to_vec(),
            serde_json::to_vec(&body).expect("encode"),
        ]
        .concat();
        inputs.push((name, [&[3][..], &joined(&changed)].concat()));
    };
    // Frame 4 is the restore of revision 2, frame 2 the rewind, frame 5 the compaction.
    edit_payload(
        "framed-restore-of-a-revision-the-log-does-not-hold.bin",
        4,
        &|head, _| head["base"] = json!(0),
    );
    edit_payload(
        "framed-rewind-keeping-more-than-its-base.bin",
        2,
        &|head, _| head["keep"] = json!([0, 99]),
    );
    edit_payload(
        "framed-compaction-summary-with-an-unanswered-call.bin",
        5,
        &|head, body| {
            let messages = body["messages"].as_array_mut().expect("messages");
            messages.remove(2);
            head["messages"] = json!(messages.len());
            head["prepend"] = json!(2);
            let state = head["state"]["messages"].as_u64().expect("a count");
            head["state"]["messages"] = json!(state - 1);
            body["tool_calls"] = json!([]);
            let calls = head["state"]["tool_calls"].as_u64().expect("a count");
            head["state"]["tool_calls"] = json!(calls - 1);
        },
    );
    inputs
        .into_iter()
        .map(|(name, bytes)| (name.to_owned(), bytes))
        .collect()
}

/// Set to `1` to write the hand-written inputs into `tests/fuzz_regressions/` (after a
/// change of the stored format moves the places they name).
const BLESS_ENV: &str = "AGENT_SESSION_BLESS";

#[test]
fn hand_written_regression_inputs_are_what_their_names_say() {
    let bless = std::env::var(BLESS_ENV).is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for (target, inputs) in [
        ("journal_reader", hand_written_journal_inputs()),
        ("log_entry", hand_written_log_entry_inputs()),
    ] {
        let dir = repo().join("tests/fuzz_regressions").join(target);
        for (name, bytes) in inputs {
            let path = dir.join(&name);
            if bless {
                std::fs::create_dir_all(&dir).expect("create the directory");
                std::fs::write(&path, &bytes).expect("write a regression input");
            } else if std::fs::read(&path).ok() != Some(bytes) {
                stale.push(path.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "these saved inputs no longer are what their names say (run with {BLESS_ENV}=1 to write them again): {stale:?}"
    );
}

#[test]
fn hand_written_contradictions_are_refused_and_their_sound_versions_accepted() {
    // The inputs that make one entry contradict the log are refused whole...
    for (name, input) in hand_written_journal_inputs() {
        let outcome = journal_outcome(&input);
        let refused = outcome.loaded.is_err();
        let contradicts = ["unanswered", "does-not-hold", "keeping-more", "duplicated"]
            .iter()
            .any(|what| name.contains(what))
            || name.contains("byte-replaced")
            || name.contains("byte-inserted")
            || name.contains("newline-before");
        assert_eq!(refused, contradicts, "{name}: {:?}", outcome.loaded.err());
    }
    // ...and so are the logs of the entry target that do, while the sound ones fold.
    let checkpoint = checks::log_checkpoint(true).expect("the checkpoint");
    for (name, input) in hand_written_log_entry_inputs() {
        let mode = input[0] % 4;
        if mode < 2 {
            let decoded = LogEntry::from_bytes(&if mode == 0 {
                checks::entry_frame(&input[1..])
            } else {
                input[1..].to_vec()
            });
            assert_eq!(
                decoded.is_err(),
                name.contains("later") || name.contains("counting"),
                "{name}"
            );
            continue;
        }
        let mut log = SessionLog::new(checkpoint.clone());
        let mut pushed = true;
        for piece in input[1..].split(|&b| b == checks::PIECE_SEPARATOR) {
            let entry = LogEntry::from_bytes(&checks::entry_frame(piece)).expect(&name);
            pushed &= log.push(entry).is_ok();
        }
        let sound = log.head().is_ok() && pushed;
        assert_eq!(
            sound,
            name == "log-every-kind-of-entry.bin" || name == "log-metadata-change.bin",
            "{name}"
        );
    }
}
