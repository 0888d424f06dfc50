//! The golden snapshots: cases built with the public API (fixed ids and timestamps), and
//! the fixture files under `tests/fixtures/v<N>/` that releases wrote from them, one
//! directory per schema version. A release writes the files of its own version once
//! (`write_missing_golden_fixtures` in `tests/snapshot_decoding.rs`) and never touches
//! them again; every later release must still read every directory.
//!
//! Adding schema version N: add its cases to [`cases`] (every case of N − 1 and whatever
//! the new version can express), describe what the upgrade step changes in
//! [`upgraded_json`], and run the writer to create `tests/fixtures/vN/`.
//!
//! Each test binary that includes this file uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use agent_session::{
    Codec, ContentBlock, Cost, Lineage, Message, Revision, SessionId, SessionSnapshot, ToolCall,
    ToolOutput, ToolResult, Usage, OLDEST_SCHEMA_VERSION, SCHEMA_VERSION,
};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{json, Value};

/// The interrupted-call output of release 0.1, spelled out so the golden case does not
/// follow later changes of `INTERRUPTED_OUTPUT`.
pub const INTERRUPTED_TEXT: &str = "interrupted: the turn was cancelled before this tool call returned a result; it was not run again";

/// `tests/fixtures`.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The fixture directory of schema version `version`: `tests/fixtures/v<version>`.
pub fn dir(version: u32) -> PathBuf {
    root().join(format!("v{version}"))
}

/// The bytes of fixture `name` of schema version `version`.
pub fn read(version: u32, name: &str) -> Vec<u8> {
    let path = dir(version).join(format!("{name}.json"));
    fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The schema versions that have a fixture directory, ascending. Every entry of
/// `tests/fixtures` whose name starts with `v` must be a directory named `v<integer>`, so
/// a misnamed one fails the tests instead of going unread.
pub fn versions_on_disk() -> Vec<u32> {
    let mut versions = Vec::new();
    for entry in fs::read_dir(root()).expect("tests/fixtures exists") {
        let entry = entry.expect("a directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(number) = name.strip_prefix('v') else {
            continue;
        };
        let version: u32 = number.parse().unwrap_or_else(|_| {
            panic!("tests/fixtures/{name} is not named v<schema version>, so no test reads it")
        });
        assert!(
            entry.path().is_dir(),
            "tests/fixtures/{name} is not a directory"
        );
        versions.push(version);
    }
    versions.sort_unstable();
    versions
}

/// Checks that `versions` (the fixture directories found) are exactly the schema versions
/// this release reads, `OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION`: a directory of a newer
/// version than this release writes (or an older one than it reads) is an error, and so is
/// a supported version without fixtures.
pub fn check_versions(versions: &[u32]) -> Result<(), String> {
    let supported: Vec<u32> = (OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).collect();
    if let Some(outside) = versions.iter().find(|v| !supported.contains(v)) {
        return Err(format!(
            "tests/fixtures/v{outside} is for schema version {outside}, but this release reads versions {OLDEST_SCHEMA_VERSION} to {SCHEMA_VERSION}"
        ));
    }
    if let Some(missing) = supported.iter().find(|v| !versions.contains(v)) {
        return Err(format!(
            "schema version {missing} is supported but has no fixture directory tests/fixtures/v{missing}"
        ));
    }
    Ok(())
}

/// The file names the fixture directory of `version` must hold, sorted.
pub fn file_names(version: u32) -> Vec<String> {
    let mut names: Vec<String> = cases(version)
        .into_iter()
        .map(|(name, _)| format!("{name}.json"))
        .collect();
    names.sort();
    names
}

/// What an older version's fixture becomes, as a JSON value, once upgraded to the current
/// version and written again: the documented difference of each version step
/// (`docs/FORMAT.md`, "Version history").
pub fn upgraded_json(version: u32, mut value: Value) -> Value {
    for step in version..SCHEMA_VERSION {
        match step {
            // Version 2 added `lineage`, which version 1 files lack (and a fork is never
            // written at version 1): only the version number changes.
            1 => value["schema_version"] = json!(2),
            // Version 3 added messages kept as provider JSON text and more wire hints,
            // which version 2 files lack: only the version number changes.
            2 => value["schema_version"] = json!(3),
            other => panic!("no upgrade from schema version {other} is described here"),
        }
    }
    value
}

/// The golden cases of schema version `version`, as (file name without `.json`, the
/// snapshot it holds).
///
/// # Panics
///
/// For a version without cases.
pub fn cases(version: u32) -> Vec<(&'static str, SessionSnapshot)> {
    let mut cases = vec![
        ("minimal", minimal()),
        ("tool_calls_with_interrupted", tool_calls_with_interrupted()),
        ("tool_call_errors", tool_call_errors()),
        ("usage_with_costs", usage_with_costs()),
        ("metadata_with_floats", metadata_with_floats()),
        ("openai_chat_transcript", openai_chat_transcript()),
        ("anthropic_transcript", anthropic_transcript()),
    ];
    match version {
        1 => {}
        2 => cases.extend([
            (
                "fork_of_openai_chat_transcript",
                fork_of_openai_chat_transcript(),
            ),
            ("fork_of_usage_with_costs", fork_of_usage_with_costs()),
        ]),
        3 => cases.extend([
            (
                "fork_of_openai_chat_transcript",
                fork_of_openai_chat_transcript(),
            ),
            ("fork_of_usage_with_costs", fork_of_usage_with_costs()),
            ("exact_provider_messages", exact_provider_messages()),
            ("provider_wire_hints", provider_wire_hints()),
        ]),
        other => panic!("no golden cases for schema version {other}"),
    }
    cases
}

/// The case `name` of schema version `version`.
pub fn case(version: u32, name: &str) -> SessionSnapshot {
    cases(version)
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or_else(
            || panic!("no golden case {name} at schema version {version}"),
            |(_, snapshot)| snapshot,
        )
}

pub fn created() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5)
        .single()
        .expect("date")
        + chrono::Duration::nanoseconds(123_456_789)
}

pub fn updated() -> DateTime<Utc> {
    created() + chrono::Duration::seconds(90)
}

/// When the fork cases were forked.
pub fn forked() -> DateTime<Utc> {
    updated() + chrono::Duration::seconds(30)
}

fn id(name: &str) -> SessionId {
    SessionId::parse(&format!("golden-{}", name.replace('_', "-"))).expect("id")
}

fn minimal() -> SessionSnapshot {
    SessionSnapshot::builder(id("minimal"), "gpt-4o-mini")
        .max_turns(16)
        .timestamps(created(), created())
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(1))
}

fn tool_calls_with_interrupted() -> SessionSnapshot {
    SessionSnapshot::builder(id("tool_calls_with_interrupted"), "gpt-4o")
        .system_prompt("You may use tools.")
        .max_turns(6)
        .timestamps(created(), updated())
        .transcript(vec![
            Message::user("List the files, then read the big one."),
            Message::assistant(vec![
                ContentBlock::text("Listing first."),
                ContentBlock::tool_call(ToolCall::new(
                    "call_list",
                    "list_dir",
                    json!({"path": ".", "hidden": false}),
                )),
            ]),
            Message::tool_result(ToolResult::new("call_list", "a.txt\nbig.bin")),
            Message::assistant(vec![ContentBlock::tool_call(ToolCall::with_raw_arguments(
                "call_read",
                "read_file",
                "{\"path\":  \"big.bin\"}",
            ))]),
            Message::tool_result(ToolResult::error("call_read", INTERRUPTED_TEXT)),
        ])
        .interrupted("call_read")
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(3))
}

fn tool_call_errors() -> SessionSnapshot {
    SessionSnapshot::builder(id("tool_call_errors"), "gpt-4o")
        .max_turns(8)
        .timestamps(created(), updated())
        .transcript(vec![
            Message::user("Clean up and report."),
            Message::assistant(vec![
                ContentBlock::tool_call(ToolCall::new("call_rm", "rm", json!({"path": "/"}))),
                ContentBlock::tool_call(ToolCall::new("call_df", "df", json!(null))),
                ContentBlock::tool_call(ToolCall::new(
                    "call_net",
                    "http_get",
                    json!({"url": "https://example.invalid"}),
                )),
            ]),
            // Answered out of order, with text and block outputs.
            Message::tool_result(ToolResult::error(
                "call_net",
                ToolOutput::Blocks(vec![
                    ContentBlock::text("dns lookup failed"),
                    ContentBlock::Other {
                        value: json!({"type": "diagnostic", "code": -3008}),
                    },
                ]),
            )),
            Message::tool_result(ToolResult::new("call_df", "/dev/sda1 42%")),
            Message::tool_result(ToolResult::error("call_rm", "permission denied")),
            Message::assistant(vec![ContentBlock::text(
                "Two of three tools failed; disk is 42% full.",
            )]),
        ])
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(2))
}

pub fn usage_total_cost() -> Cost {
    usage_records().iter().map(|u| u.cost).sum()
}

fn usage_records() -> Vec<Usage> {
    let price_in = Cost::parse_usd("3").expect("price");
    let price_out = Cost::parse_usd("15").expect("price");
    vec![
        Usage::new("claude-sonnet-4-5")
            .with_tokens(1_234, 321)
            .with_cost(
                Cost::per_million_tokens(price_in, 1_234)
                    + Cost::per_million_tokens(price_out, 321),
            ),
        Usage::new("claude-sonnet-4-5")
            .with_tokens(50_000, 2_000)
            .with_cache_tokens(40_000, 10_000)
            .with_cost(Cost::parse_usd("0.1875").expect("cost")),
        Usage::new("claude-haiku-4-5")
            .with_tokens(7, 1)
            .with_cost(Cost::from_nano_usd(1)),
    ]
}

fn usage_with_costs() -> SessionSnapshot {
    SessionSnapshot::builder(id("usage_with_costs"), "claude-sonnet-4-5")
        .max_turns(4)
        .timestamps(created(), updated())
        .transcript(vec![
            Message::user("Summarise the report."),
            Message::assistant(vec![ContentBlock::text("It says costs went down.")]),
            Message::user("And in one word?"),
            Message::assistant(vec![ContentBlock::text("Down.")]),
            Message::user("Thanks"),
            Message::assistant(vec![ContentBlock::text("You're welcome.")]),
        ])
        .usage(usage_records())
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(4))
}

pub fn float_metadata() -> Vec<(&'static str, f64)> {
    vec![
        ("pi", std::f64::consts::PI),
        ("tenth", 0.1),
        ("sum", 0.1 + 0.2),
        ("money", 228.03),
        ("one", 1.0),
        ("neg_zero", -0.0),
        ("tiny", 5e-324),
        ("small", 1e-7),
        ("max", f64::MAX),
        ("min_positive", f64::MIN_POSITIVE),
        ("negative", -2.5e-8),
    ]
}

fn metadata_with_floats() -> SessionSnapshot {
    let mut builder = SessionSnapshot::builder(id("metadata_with_floats"), "gpt-4o-mini")
        .max_turns(2)
        .timestamps(created(), updated())
        .metadata_entry("title", json!("Floats in metadata"))
        .metadata_entry("u64_max", json!(u64::MAX))
        .metadata_entry("i64_min", json!(i64::MIN))
        .metadata_entry(
            "nested",
            json!({"weights": [0.25, 1e21, -1.5e-300], "flag": true, "none": null}),
        );
    for (key, value) in float_metadata() {
        builder = builder.metadata_entry(key, json!(value));
    }
    builder
        .transcript(vec![Message::user("Keep these numbers exact.")])
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(5))
}

pub fn openai_wire() -> Vec<Value> {
    vec![
        json!({"role": "developer", "content": "Answer tersely.", "name": "policy"}),
        json!({"role": "user", "name": "ada", "content": [
            {"type": "text", "text": "What's the weather in Paris, and the time?",
             "cache_control": {"type": "ephemeral"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/paris.png", "detail": "low"}}
        ]}),
        json!({"role": "assistant", "content": null, "refusal": null, "annotations": [],
        "tool_calls": [
            {"id": "call_wx", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\":\"c\"}"}},
            {"id": "call_tm", "function": {"name": "get_time", "arguments": "{}", "strict": true}, "index": 1}
        ]}),
        json!({"role": "tool", "tool_call_id": "call_wx", "content": "{\"temp\": 18.5}"}),
        json!({"role": "tool", "tool_call_id": "call_tm", "content": [{"type": "text", "text": "14:05"}]}),
        json!({"role": "assistant", "content": "18.5 °C at 14:05.", "tool_calls": []}),
    ]
}

fn openai_chat_transcript() -> SessionSnapshot {
    let transcript = openai_wire()
        .iter()
        .map(|m| Message::from_openai_chat(m).expect("OpenAI message"))
        .collect();
    SessionSnapshot::builder(id("openai_chat_transcript"), "gpt-4o")
        .max_turns(8)
        .timestamps(created(), updated())
        .transcript(transcript)
        .usage(vec![Usage::new("gpt-4o-2024-08-06")
            .with_tokens(412, 37)
            .with_cost(Cost::parse_usd("0.00140").expect("cost"))])
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(6))
}

pub fn anthropic_wire() -> Vec<Value> {
    vec![
        json!({"role": "user", "content": "Read config.toml and summarise it."}),
        json!({"role": "assistant", "id": "msg_01", "model": "claude-sonnet-4-5",
        "stop_reason": "tool_use", "content": [
            {"type": "thinking", "thinking": "I should read the file.", "signature": "EqQBCgIYAhIM"},
            {"type": "text", "text": "Reading it now.", "citations": null},
            {"type": "tool_use", "id": "toolu_01", "name": "read_file",
             "input": {"path": "config.toml", "max_bytes": 4096},
             "caller": {"type": "direct"}}
        ]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01",
             "content": [{"type": "text", "text": "[server]\nport = 8080"}],
             "is_error": false, "cache_control": {"type": "ephemeral"}}
        ]}),
        json!({"role": "assistant", "content": [
            {"type": "redacted_thinking", "data": "c2VjcmV0"},
            {"type": "text", "text": "It sets the server port to 8080."}
        ]}),
    ]
}

fn anthropic_transcript() -> SessionSnapshot {
    let transcript = anthropic_wire()
        .iter()
        .map(|m| Message::from_anthropic(m).expect("Anthropic message"))
        .collect();
    SessionSnapshot::builder(id("anthropic_transcript"), "claude-sonnet-4-5")
        .max_turns(8)
        .system_prompt("You are a careful reader.")
        .timestamps(created(), updated())
        .metadata_entry("import", json!({"provider": "anthropic", "batch": 17}))
        .transcript(transcript)
        .usage(vec![Usage::new("claude-sonnet-4-5")
            .with_tokens(900, 120)
            .with_cache_tokens(0, 900)
            .with_cost(Cost::parse_usd("0.006075").expect("cost"))])
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(7))
}

/// The OpenAI transcript forked after its first (and only) turn, at revision 6, and
/// continued with a turn of its own: what `fork(.., ForkAt::Turns(1))` and one more
/// exchange make, with fixed times.
fn fork_of_openai_chat_transcript() -> SessionSnapshot {
    let parent = openai_chat_transcript();
    let mut transcript = parent.transcript().to_vec();
    transcript.extend(fork_of_openai_continuation());
    SessionSnapshot::builder(id("fork_of_openai_chat_transcript"), "gpt-4o")
        .max_turns(8)
        .timestamps(forked(), forked() + chrono::Duration::seconds(45))
        .lineage(Lineage::new(
            parent.id().clone(),
            parent.revision(),
            parent.transcript().len(),
            forked(),
        ))
        .transcript(transcript)
        .usage(fork_of_openai_usage())
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(2))
}

/// The messages the OpenAI fork added after the cut.
pub fn fork_of_openai_continuation() -> Vec<Message> {
    vec![
        Message::user("And tomorrow?"),
        Message::assistant(vec![ContentBlock::text("Rain, 12 °C.")]),
    ]
}

/// The usage of the OpenAI fork: only its own completion (a fork starts with none).
pub fn fork_of_openai_usage() -> Vec<Usage> {
    vec![Usage::new("gpt-4o-2024-08-06")
        .with_tokens(455, 9)
        .with_cost(Cost::parse_usd("0.0012275").expect("cost"))]
}

/// `usage_with_costs` forked after its second turn (4 of 6 messages) and saved once: no
/// usage of its own.
fn fork_of_usage_with_costs() -> SessionSnapshot {
    let parent = usage_with_costs();
    SessionSnapshot::builder(id("fork_of_usage_with_costs"), "claude-sonnet-4-5")
        .max_turns(4)
        .timestamps(forked(), forked())
        .lineage(Lineage::new(
            parent.id().clone(),
            parent.revision(),
            4,
            forked(),
        ))
        .transcript(parent.transcript()[..4].to_vec())
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(1))
}

/// The provider messages of `exact_provider_messages`, as (codec, JSON text): imported
/// with [`Message::from_json`] and given back byte for byte, key order and numbers no
/// float holds included.
pub fn exact_wire() -> Vec<(Codec, &'static str)> {
    vec![
        (
            Codec::OpenAiChat,
            r#"{"role":"user","content":"Weather in Paris, Rome, and read a.txt?","name":"ada"}"#,
        ),
        (
            Codec::OpenAiChat,
            r#"{"role":"assistant","content":null,"tool_calls":[{"type":"function","id":"call_1","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}],"seed":18446744073709551616,"t":1.10}"#,
        ),
        (
            Codec::OpenAiChat,
            r#"{"role":"tool","tool_call_id":"call_1","content":"{\"temp_c\": 18.50}"}"#,
        ),
        (
            Codec::Anthropic,
            r#"{"role":"assistant","content":[{"type":"thinking","thinking":"Now the file.","signature":"EqQBCgIYAhIM"},{"type":"tool_use","id":"toolu_9","name":"read_file","input":{"path":"a.txt","offset":12345678901234567890}}]}"#,
        ),
        (
            Codec::Anthropic,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"hello"}]}"#,
        ),
        (
            Codec::OpenAiResponses,
            r#"[{"type":"reasoning","id":"rs_1","summary":[]},{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Rome\"}","call_id":"call_r1","name":"get_weather"}]"#,
        ),
        (
            Codec::OpenAiResponses,
            r#"{"type":"function_call_output","call_id":"call_r1","output":"{\"temp_c\": 21.00}"}"#,
        ),
        (
            Codec::Gemini,
            r#"{"role":"model","parts":[{"text":"Both are mild: 18.50 and 21.00 °C.","thoughtSignature":"CtgBAVSo"}]}"#,
        ),
    ]
}

/// A session whose messages were imported as provider JSON text (schema version 3).
fn exact_provider_messages() -> SessionSnapshot {
    let transcript = exact_wire()
        .into_iter()
        .map(|(codec, text)| Message::from_json(codec, text).expect("a provider message"))
        .collect();
    SessionSnapshot::builder(id("exact_provider_messages"), "gpt-4.1")
        .max_turns(8)
        .timestamps(created(), updated())
        .transcript(transcript)
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(3))
}

/// The provider messages of `provider_wire_hints`, as (codec, JSON value): imported with
/// the `&Value` entry points, each kept in the neutral form with the hints (schema
/// version 3) that give the same JSON value back.
pub fn hinted_wire() -> Vec<(Codec, Value)> {
    vec![
        (
            Codec::OpenAiChat,
            json!({"role": "user", "content": "Weather in Paris?"}),
        ),
        (
            Codec::OpenAiChat,
            json!({"role": "assistant", "content": null,
                "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}),
        ),
        (
            Codec::OpenAiChat,
            json!({"role": "function", "name": "get_weather", "content": "{\"temp_c\": 18.5}"}),
        ),
        (
            Codec::OpenAiResponses,
            json!({"type": "custom_tool_call", "call_id": "call_c", "name": "python",
                "input": "print(2**70)"}),
        ),
        (
            Codec::OpenAiResponses,
            json!({"type": "custom_tool_call_output", "call_id": "call_c",
                "output": "1180591620717411303424"}),
        ),
        (
            Codec::Gemini,
            json!({"role": "model", "parts": [{"function_call": {"name": "run", "args": {}}}]}),
        ),
        (
            Codec::Gemini,
            json!({"role": "user", "parts": [{"function_response": {"name": "run",
                "response": {"output": "ok"}}}]}),
        ),
    ]
}

/// Decodes `message` with `codec`'s `&Value` entry point.
pub fn from_wire(codec: Codec, message: &Value) -> agent_session::Result<Message> {
    match codec {
        Codec::OpenAiChat => Message::from_openai_chat(message),
        Codec::OpenAiResponses => Message::from_responses(message),
        Codec::Anthropic => Message::from_anthropic(message),
        Codec::Gemini => Message::from_gemini(message),
        other => panic!("no entry point for {other:?}"),
    }
}

/// Encodes `message` with `codec`'s `&Value` entry point.
pub fn to_wire(codec: Codec, message: &Message) -> agent_session::Result<Value> {
    match codec {
        Codec::OpenAiChat => message.to_openai_chat(),
        Codec::OpenAiResponses => message.to_responses(),
        Codec::Anthropic => message.to_anthropic(),
        Codec::Gemini => message.to_gemini(),
        other => panic!("no entry point for {other:?}"),
    }
}

/// A session of messages in the neutral form whose wire hints (schema version 3) give
/// their providers' JSON back: a legacy OpenAI function call and its `function` result,
/// a Responses custom tool call, Gemini calls in snake case without ids.
fn provider_wire_hints() -> SessionSnapshot {
    let transcript = hinted_wire()
        .iter()
        .map(|(codec, message)| from_wire(*codec, message).expect("a provider message"))
        .collect();
    SessionSnapshot::builder(id("provider_wire_hints"), "gpt-4.1")
        .max_turns(8)
        .timestamps(created(), updated())
        .transcript(transcript)
        .build()
        .expect("build")
        .with_revision(Revision::from_u64(2))
}

/// Pretty-prints compact JSON (as `to_json` writes it) with two-space indents, keeping
/// the key order. Strings are copied untouched.
pub fn pretty(compact: &[u8]) -> String {
    let text = std::str::from_utf8(compact).expect("utf-8");
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    for (i, &c) in chars.iter().enumerate() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                let empty = matches!((c, chars.get(i + 1)), ('{', Some('}')) | ('[', Some(']')));
                if !empty {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                let empty = matches!((chars[i - 1], c), ('{', '}') | ('[', ']'));
                if !empty {
                    depth -= 1;
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            _ => out.push(c),
        }
    }
    out
}
