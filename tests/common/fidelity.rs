//! The recorded provider transcripts of `../shared/fidelity/` (public SDK test recordings of
//! the OpenAI and Anthropic APIs; see the README there), for the tests that read them. The
//! files are not part of this repository: when the directory is absent, [`recordings`]
//! says so and returns `None`, and the tests check what they can without them.
//!
//! Included with `#[path = "common/fidelity.rs"] mod fidelity_support;`.

use std::path::Path;

use agent_session::Message;
use serde_json::Value;

/// One recording: its file name (without `.json`), provider, API and messages.
#[derive(Debug, Clone)]
#[allow(dead_code)] // not every test binary reads every field
pub struct Recording {
    pub name: String,
    /// `"openai"` or `"anthropic"`.
    pub provider: String,
    /// `"chat"`, `"responses"`, ..., as the file says.
    pub api: Option<String>,
    /// The transcript exactly as the API takes it back.
    pub messages: Vec<Value>,
}

/// Every recording, by file name; `None` (with the reason printed) if the directory is
/// absent. Panics on a directory without recordings or a file that is not one.
pub fn recordings() -> Option<Vec<Recording>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fidelity");
    if !dir.is_dir() {
        eprintln!(
            "skipping the recordings: {} does not exist (the recorded provider transcripts \
             are not part of this repository)",
            dir.display()
        );
        return None;
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("read the fidelity directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "{} exists but holds no JSON recordings",
        dir.display()
    );
    Some(files.iter().map(|path| read(path)).collect())
}

fn read(path: &Path) -> Recording {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a UTF-8 file name")
        .to_owned();
    let value: Value =
        serde_json::from_slice(&std::fs::read(path).expect("read the recording")).expect("JSON");
    let provider = value["provider"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: no `provider` string"))
        .to_owned();
    assert!(
        matches!(provider.as_str(), "openai" | "anthropic"),
        "{name}: provider {provider:?}"
    );
    Recording {
        api: value["api"].as_str().map(str::to_owned),
        messages: value["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no `messages` list"))
            .clone(),
        name,
        provider,
    }
}

/// `message` converted with the codec of `provider` (`"openai"`: Chat Completions).
#[allow(dead_code)] // not every test binary imports
pub fn import(provider: &str, message: &Value) -> agent_session::Result<Message> {
    match provider {
        "openai" => Message::from_openai_chat(message),
        "anthropic" => Message::from_anthropic(message),
        other => panic!("unknown provider {other:?}"),
    }
}

/// `message` exported with the codec of `provider`.
#[allow(dead_code)] // not every test binary exports
pub fn export(provider: &str, message: &Message) -> agent_session::Result<Value> {
    match provider {
        "openai" => message.to_openai_chat(),
        "anthropic" => message.to_anthropic(),
        other => panic!("unknown provider {other:?}"),
    }
}

/// The provider other than `provider`.
#[allow(dead_code)] // not every test binary crosses providers
pub fn other(provider: &str) -> &'static str {
    if provider == "anthropic" {
        "openai"
    } else {
        "anthropic"
    }
}
