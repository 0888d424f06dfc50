//! Messages the crate exports validate against the official provider SDKs' own request
//! types (Python `openai` and `anthropic`, their pydantic models, undeclared fields
//! refused), not only against the crate's understanding of the APIs.
//!
//! Three sets, each exported with `to_openai_chat` / `to_anthropic` and checked by
//! `scripts/provider_sdk_check.py`:
//! - the recorded transcripts of `../shared/fidelity/` (when present), given back to their
//!   own provider;
//! - the same messages exported to the *other* provider, where the export succeeds (the
//!   ones it refuses are counted, not checked);
//! - messages built with the crate's own constructors: prompts, replies, tool calls with
//!   JSON and text arguments, tool results (ok, error, blocks), system messages.
//!
//! Feature `provider-sdk-tests` (on under `scripts/test`, which installs the SDKs into a
//! virtual environment with `scripts/provider-sdks.sh` and sets `AGENT_SESSION_SDK_PYTHON`).
//! With the feature on and no such Python, the test fails saying how to get one; without
//! the feature it prints why nothing ran.

#[cfg(not(feature = "provider-sdk-tests"))]
#[test]
fn the_provider_sdk_check_needs_its_feature() {
    eprintln!(
        "skipped: the provider SDK check needs the `provider-sdk-tests` feature and the SDKs; \
         run scripts/test (it installs them and passes --all-features)"
    );
}

#[cfg(feature = "provider-sdk-tests")]
#[path = "common/fidelity.rs"]
mod fidelity_support;

#[cfg(feature = "provider-sdk-tests")]
mod check {
    use std::io::Write;
    use std::path::{Path, PathBuf};

    use super::fidelity_support::{export, import, other, own_corpus, recordings, Recording};
    use std::process::Command;

    use agent_session::{Codec, ContentBlock, Message, Role, TextBlock, ToolCall, ToolResult};
    use serde_json::{json, Value};

    /// One message to check: which request type, what it is, and its JSON.
    struct Case {
        api: &'static str,
        label: String,
        message: Value,
    }

    fn python() -> PathBuf {
        match std::env::var_os("AGENT_SESSION_SDK_PYTHON") {
            Some(path) => PathBuf::from(path),
            None => panic!(
                "AGENT_SESSION_SDK_PYTHON is not set: run scripts/test, which installs the \
                 provider SDKs (scripts/provider-sdks.sh) and sets it, or point it at a \
                 Python with the pinned openai, anthropic and pydantic packages"
            ),
        }
    }

    /// The request type a recording's messages are checked against.
    fn api_of(provider: &str, api: Option<&str>) -> &'static str {
        match (provider, api) {
            ("anthropic", _) => "anthropic",
            (_, Some(api)) if api.contains("responses") => "openai-responses",
            _ => "openai-chat",
        }
    }

    /// Messages built with the crate's constructors, as an application builds them.
    fn built() -> Vec<(&'static str, Message)> {
        let call = |id: &str| ToolCall::new(id, "read_file", json!({"path": "src/lib.rs"}));
        vec![
            ("a prompt", Message::user("What does this crate do?")),
            ("a system prompt", Message::system("Be brief.")),
            (
                "a reply",
                Message::assistant(vec![ContentBlock::text("It saves sessions.")]),
            ),
            (
                "a reply of two text blocks",
                Message::assistant(vec![
                    ContentBlock::Text(TextBlock::new("One.")),
                    ContentBlock::text("Two."),
                ]),
            ),
            (
                "a tool call with JSON arguments",
                Message::assistant(vec![ContentBlock::tool_call(call("c1"))]),
            ),
            (
                "a tool call with text arguments",
                Message::assistant(vec![ContentBlock::tool_call(ToolCall::with_raw_arguments(
                    "c2",
                    "grep",
                    "{\"pattern\": \"fn main\"}",
                ))]),
            ),
            (
                "text and two tool calls",
                Message::assistant(vec![
                    ContentBlock::text("Reading both."),
                    ContentBlock::tool_call(call("c3")),
                    ContentBlock::tool_call(call("c4")),
                ]),
            ),
            (
                "a tool result",
                Message::tool_result(ToolResult::new("c1", "pub mod store;")),
            ),
            (
                "a failed tool result",
                Message::tool_result(ToolResult::error("c2", "no such file")),
            ),
            (
                "a user message holding a tool result",
                Message::new(
                    Role::User,
                    vec![ContentBlock::tool_result(ToolResult::new("c5", "ok"))],
                ),
            ),
        ]
    }

    /// Runs the check on `cases`; returns its exit status and output.
    fn run_check(cases: &[Case]) -> (std::process::ExitStatus, String, String) {
        let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
        for case in cases {
            let line = json!({"api": case.api, "label": case.label, "message": case.message});
            writeln!(file, "{line}").expect("write a case");
        }
        file.flush().expect("flush");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/provider_sdk_check.py");
        let output = Command::new(python())
            .arg(&script)
            .arg(file.path())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        (
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// The negative control: what the exports were before they were checked (Anthropic
    /// `input: ""`, a thinking block in OpenAI content, an OpenAI field on an Anthropic
    /// message, an `image_url` part sent to Anthropic), and invalid Gemini and Responses
    /// messages, are refused by the check, each one.
    #[test]
    fn the_check_refuses_the_invalid_exports_it_is_there_to_catch() {
        let invalid = [
            (
                "anthropic",
                json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": "c", "name": "f", "input": ""}]}),
            ),
            (
                "openai-chat",
                json!({"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"}]}),
            ),
            (
                "anthropic",
                json!({"role": "assistant", "content": "x", "refusal": "no"}),
            ),
            (
                "anthropic",
                json!({"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}),
            ),
            // An Anthropic field on a Gemini part, and a Responses group one of whose items
            // lacks its call id.
            (
                "gemini",
                json!({"role": "model", "parts": [
                    {"functionCall": {"name": "f", "args": {}}, "caller": {"type": "direct"}}]}),
            ),
            (
                "openai-responses",
                json!([{"role": "assistant", "content": "ok"},
                    {"type": "function_call", "name": "f", "arguments": "{}"}]),
            ),
        ];
        let cases: Vec<Case> = invalid
            .iter()
            .enumerate()
            .map(|(i, (api, message))| Case {
                api,
                label: format!("invalid {i}"),
                message: message.clone(),
            })
            .collect();
        let (status, stdout, stderr) = run_check(&cases);
        assert_eq!(status.code(), Some(1), "{stdout}\n{stderr}");
        let last: Value = stdout
            .lines()
            .last()
            .and_then(|line| serde_json::from_str(line).ok())
            .expect("a summary line");
        assert_eq!(last["invalid"], json!(invalid.len()), "{stdout}");
    }

    /// Every message of the recordings and of the crate's own corpus, exported.
    fn corpus_cases(recordings: &[Recording], cases: &mut Vec<Case>, refused: &mut Vec<String>) {
        // Every message of the recordings and of the crate's own corpus (Responses, Gemini,
        // Gemini's OpenAI compatibility mode, legacy Chat), imported from its text, exported
        // to every other codec where the export succeeds; and the own corpus's Responses
        // and Gemini messages back to their own codec (but the deliberately unknown item
        // type, which no SDK declares).
        let mut corpus = own_corpus();
        corpus.extend(recordings.iter().cloned());
        for recording in &corpus {
            let from = recording.codec();
            for (i, text) in recording.texts.iter().enumerate() {
                let message = Message::from_json(from, text)
                    .unwrap_or_else(|e| panic!("{} message {i}: {e}", recording.name));
                for to in Codec::ALL {
                    let own = to == from;
                    if own
                        && (!matches!(from, Codec::OpenAiResponses | Codec::Gemini)
                            || text.contains("hologram"))
                    {
                        continue;
                    }
                    match message.to_json(to) {
                        Ok(exported) => cases.push(Case {
                            api: to.name(),
                            label: format!(
                                "{} message {i}, exported to {}",
                                recording.name,
                                to.name()
                            ),
                            message: serde_json::from_str(&exported).expect("JSON"),
                        }),
                        Err(e) if !own => {
                            refused.push(format!(
                                "{} message {i} to {}: {e}",
                                recording.name,
                                to.name()
                            ));
                        }
                        Err(e) => panic!("{} message {i}: {e}", recording.name),
                    }
                }
            }
        }
    }

    /// A transcript built with the crate's constructors, exported to the new codecs.
    fn built_transcript_cases(cases: &mut Vec<Case>) {
        // What the crate's own constructors build, as a session's transcript, exports to
        // the new codecs (Gemini needs the transcript to name a result's function).
        let transcript = vec![
            Message::user("Read both files."),
            Message::assistant(vec![
                ContentBlock::text("Reading."),
                ContentBlock::tool_call(ToolCall::new("c1", "read_file", json!({"path": "a.rs"}))),
                ContentBlock::tool_call(ToolCall::with_raw_arguments(
                    "c2",
                    "read_file",
                    "{\"path\": \"b.rs\"}",
                )),
            ]),
            Message::tool_result(ToolResult::new("c1", "fn a() {}")),
            Message::tool_result(ToolResult::error("c2", "no such file")),
            Message::assistant(vec![ContentBlock::text("One of them is missing.")]),
        ];
        for to in [Codec::OpenAiResponses, Codec::Gemini] {
            let exported: Vec<Value> =
                serde_json::from_str(&to.export(&transcript).expect("export")).expect("JSON");
            for (i, message) in exported.into_iter().enumerate() {
                cases.push(Case {
                    api: to.name(),
                    label: format!("a built transcript's item {i}, exported to {}", to.name()),
                    message,
                });
            }
        }
    }

    #[test]
    fn exported_messages_validate_against_the_official_sdk_types() {
        let mut cases = Vec::new();
        let mut refused = Vec::new();
        let recordings = recordings().unwrap_or_default();
        for Recording {
            name,
            provider,
            api,
            messages,
            ..
        } in &recordings
        {
            for (i, wire) in messages.iter().enumerate() {
                let message =
                    import(provider, wire).unwrap_or_else(|e| panic!("{name} message {i}: {e}"));
                cases.push(Case {
                    api: api_of(provider, api.as_deref()),
                    label: format!("{name} message {i}, back to {provider}"),
                    message: export(provider, &message)
                        .unwrap_or_else(|e| panic!("{name} message {i}: {e}")),
                });
                let to = other(provider);
                match export(to, &message) {
                    Ok(exported) => cases.push(Case {
                        api: api_of(to, None),
                        label: format!("{name} message {i}, exported to {to}"),
                        message: exported,
                    }),
                    Err(e) => refused.push(format!("{name} message {i} to {to}: {e}")),
                }
            }
        }
        // OpenAI forms with no Anthropic equivalent, given back to OpenAI: a custom tool's
        // call. (Gemini's `model` role is not OpenAI's API, so the OpenAI types refuse
        // it: it is given back for Gemini's compatibility mode, not checked here.)
        let custom = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
            "type": "custom", "custom": {"name": "run_sql", "input": "select 1;"}}]});
        cases.push(Case {
            api: "openai-chat",
            label: "a custom tool call, back to openai".to_owned(),
            message: Message::from_openai_chat(&custom)
                .and_then(|m| m.to_openai_chat())
                .expect("a custom call round-trips"),
        });
        corpus_cases(&recordings, &mut cases, &mut refused);
        built_transcript_cases(&mut cases);
        // What the crate's own constructors build exports to both providers.
        let built = built();
        for (what, message) in &built {
            for to in ["openai", "anthropic"] {
                cases.push(Case {
                    api: api_of(to, None),
                    label: format!("{what}, exported to {to}"),
                    message: export(to, message)
                        .unwrap_or_else(|e| panic!("{what} does not export to {to}: {e}")),
                });
            }
        }

        let (status, stdout, stderr) = run_check(&cases);
        println!("{stdout}");
        println!(
            "{} messages refused on export (not checked):\n  {}",
            refused.len(),
            refused.join("\n  ")
        );
        assert!(
            status.success(),
            "messages the crate exports do not validate against the SDK types \
             (status {status}):\n{stdout}\n{stderr}"
        );
        let last: Value = stdout
            .lines()
            .last()
            .and_then(|line| serde_json::from_str(line).ok())
            .expect("a summary line");
        assert_eq!(last["checked"], json!(cases.len()), "{stdout}");
        assert!(
            cases.len() >= 2 * built.len(),
            "{} messages checked",
            cases.len()
        );
    }
}
