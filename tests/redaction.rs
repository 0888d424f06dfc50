//! The redaction hook: secrets never reach the store, and nothing else changes.

mod common;

use std::sync::Arc;

use agent_session::{
    Completion, ContentBlock, Harness, Message, PatternRedactor, SessionOptions, SessionStore,
    ToolCall, REDACTED,
};
use common::{reply, temp_store, usage, Calculator, ScriptedEngine};
use serde_json::json;

const SECRET: &str = "sk-proj-0123456789abcdefghijklmnop";

/// A turn in which the secret appears in the user's text, the system prompt, the metadata,
/// raw tool arguments (as OpenAI sends them), a tool's output and the final reply.
fn leaky_script() -> Vec<Completion> {
    let call = ToolCall::with_raw_arguments(
        "c1",
        "calculator",
        format!(r#"{{"expression": "1+1", "note": "{SECRET}"}}"#),
    );
    vec![
        Completion::new(
            Message::assistant(vec![ContentBlock::tool_call(call)]),
            usage(10, 5, "0.00001"),
        ),
        reply(&format!("Your key {SECRET} is now in my reply."), "0.00001"),
    ]
}

fn leaky_options() -> SessionOptions {
    SessionOptions::new("m")
        .system_prompt(format!("The deploy key is {SECRET}."))
        .metadata_entry("env", json!({"OPENAI_API_KEY": SECRET, "port": 8080}))
}

#[tokio::test]
async fn redactor_keeps_secrets_out_of_the_stored_file_but_not_out_of_the_live_session() {
    let (_dir, store) = temp_store();
    let store = Arc::new(store);
    let script = leaky_script();
    let harness = Harness::builder(Arc::clone(&store), move || {
        ScriptedEngine::new(script.clone())
    })
    .tools(Calculator::shared())
    .redactor(Arc::new(PatternRedactor::common_secrets()))
    .build();

    let mut session = harness.new_session(leaky_options()).expect("new");
    session
        .send(format!("Use my key {SECRET} please"))
        .await
        .expect("turn");
    harness.save_session(&mut session).expect("save");

    let bytes = std::fs::read(store.path_of(session.id())).expect("read the stored file");
    let stored = String::from_utf8(bytes).expect("utf-8");
    assert!(
        !stored.contains(SECRET),
        "the secret reached the disk: {stored}"
    );
    assert!(stored.contains(REDACTED));

    // The live session still has the original text: only the stored copy is redacted.
    assert!(session.transcript()[0].text().contains(SECRET));

    let resumed = harness.resume_session(session.id(), None).expect("resume");
    assert_eq!(
        resumed.transcript()[0].text(),
        format!("Use my key {REDACTED} please")
    );
    assert_eq!(
        resumed.options().system_prompt.as_deref(),
        Some(format!("The deploy key is {REDACTED}.").as_str())
    );
    assert_eq!(
        resumed.metadata()["env"],
        json!({"OPENAI_API_KEY": REDACTED, "port": 8080}),
        "numbers and keys are kept, string values redacted"
    );
    // Structure is intact: the tool call is still paired with its result, same ids.
    assert_eq!(resumed.tool_calls(), session.tool_calls());
    assert_eq!(resumed.transcript().len(), session.transcript().len());
    assert_eq!(resumed.usage(), session.usage());
}

#[tokio::test]
async fn without_a_redactor_the_transcript_is_stored_verbatim() {
    let (_dir, store) = temp_store();
    let store = Arc::new(store);
    let script = leaky_script();
    let harness = Harness::builder(Arc::clone(&store), move || {
        ScriptedEngine::new(script.clone())
    })
    .tools(Calculator::shared())
    .build();
    let mut session = harness.new_session(leaky_options()).expect("new");
    session.send(format!("key {SECRET}")).await.expect("turn");
    harness.save_session(&mut session).expect("save");
    let loaded = store.load(session.id()).expect("load");
    assert_eq!(loaded.transcript(), session.transcript());
}

/// A redactor whose rules grow while it is in use, and which (rightly) does not claim its
/// rules never change.
#[derive(Default)]
struct GrowingRedactor {
    words: std::sync::RwLock<Vec<String>>,
}

impl agent_session::Redactor for GrowingRedactor {
    fn redact<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let words = self.words.read().expect("lock");
        if words.iter().any(|w| text.contains(w.as_str())) {
            let mut out = text.to_owned();
            for w in words.iter() {
                out = out.replace(w.as_str(), REDACTED);
            }
            std::borrow::Cow::Owned(out)
        } else {
            std::borrow::Cow::Borrowed(text)
        }
    }
}

#[tokio::test]
async fn history_already_stored_is_redacted_again_when_rules_of_unknown_identity_change() {
    let (_dir, store) = temp_store();
    let store = Arc::new(store);
    let redactor = Arc::new(GrowingRedactor::default());
    let harness = Harness::builder(Arc::clone(&store), || {
        ScriptedEngine::new(vec![reply("one", "0"), reply("two", "0")])
    })
    .redactor(Arc::clone(&redactor) as Arc<dyn agent_session::Redactor>)
    .build();
    let mut session = harness.new_session(SessionOptions::new("m")).expect("new");
    session
        .send("the codename is bluebird")
        .await
        .expect("turn");
    harness.save_session(&mut session).expect("save");
    // A new rule: the stored history must not keep the word because it was stored before
    // the rule existed.
    redactor
        .words
        .write()
        .expect("lock")
        .push("bluebird".to_owned());
    session.send("anything else?").await.expect("turn");
    harness.save_session(&mut session).expect("save again");
    let loaded = store.load(session.id()).expect("load");
    assert_eq!(
        loaded.transcript()[0].text(),
        format!("the codename is {REDACTED}")
    );
    let on_disk: Vec<u8> = ["json", "journal"]
        .iter()
        .filter_map(|ext| std::fs::read(store.dir().join(format!("{}.{ext}", session.id()))).ok())
        .flatten()
        .collect();
    assert!(
        !String::from_utf8_lossy(&on_disk).contains("bluebird"),
        "the old text is still stored"
    );
}
