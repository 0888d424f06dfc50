//! The recorded provider transcripts of `../shared/fidelity/` (public SDK test recordings of
//! the OpenAI and Anthropic APIs; see the README there), for the tests that read them. The
//! files are not part of this repository: when the directory is absent, [`recordings`]
//! says so and returns `None`, and the tests check what they can without them.
//!
//! Included with `#[path = "common/fidelity.rs"] mod fidelity_support;`.

use std::path::Path;

use agent_session::{Codec, Message};
use serde_json::value::RawValue;
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
    /// Each message's JSON text exactly as the file has it (read with `RawValue`, so
    /// nothing is reordered or re-formatted), whitespace included.
    pub texts: Vec<String>,
}

impl Recording {
    /// The codec the recording's messages are in.
    #[allow(dead_code)] // not every test binary asks
    pub fn codec(&self) -> Codec {
        match (self.provider.as_str(), self.api.as_deref()) {
            ("anthropic", _) => Codec::Anthropic,
            ("gemini", Some(api)) if api.contains("openai") => Codec::OpenAiChat,
            ("gemini", _) => Codec::Gemini,
            (_, Some(api)) if api.contains("responses") => Codec::OpenAiResponses,
            _ => Codec::OpenAiChat,
        }
    }
}

/// `text` without the whitespace outside strings: the compact form the crate keeps. A
/// reference written apart from the crate's own lexer.
#[allow(dead_code)] // not every test binary compares texts
pub fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if !matches!(c, ' ' | '\n' | '\r' | '\t') {
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
    }
    out
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

/// A recording's messages as texts, reordering nothing.
#[derive(serde::Deserialize)]
struct Texts<'a> {
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
}

/// The crate's own corpus, `tests/provider_corpus/`: transcripts written from the
/// providers' public API references (OpenAI Responses, Gemini, the OpenAI Chat features
/// the recordings lack), in the same form as the recordings.
#[allow(dead_code)] // not every test binary reads it
pub fn own_corpus() -> Vec<Recording> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/provider_corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("read tests/provider_corpus")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no transcripts", dir.display());
    files.iter().map(|path| read(path)).collect()
}

fn read(path: &Path) -> Recording {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a UTF-8 file name")
        .to_owned();
    let bytes = std::fs::read(path).expect("read the recording");
    let value: Value = serde_json::from_slice(&bytes).expect("JSON");
    let texts: Texts<'_> = serde_json::from_slice(&bytes).expect("JSON");
    let texts = texts.messages.iter().map(|m| m.get().to_owned()).collect();
    let provider = value["provider"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: no `provider` string"))
        .to_owned();
    assert!(
        matches!(provider.as_str(), "openai" | "anthropic" | "gemini"),
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
        texts,
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
