//! Messages imported from a provider's JSON text: how they are stored, what happens when
//! they are changed after import, what is refused, and the session loop run on every
//! codec's messages.

mod common;

use std::sync::Arc;

use agent_session::{
    Codec, ContentBlock, Error, ErrorKind, MemorySessionStore, Message, Session, SessionOptions,
    SessionSnapshot, SessionStore, StopReason, ToolResult,
};
use common::{sid, temp_store, usage, Calculator, ScriptedEngine, MODEL};
use serde_json::Value;

const CHAT: &str = r#"{"role":"assistant","content":null,"tool_calls":[{"type":"function","id":"c1","function":{"name":"calculator","arguments":"{\"expression\": \"2+3\"}"}}],"seed":18446744073709551616,"t":1.10}"#;

fn snapshot_of(messages: Vec<Message>) -> SessionSnapshot {
    SessionSnapshot::builder(sid("exact"), MODEL)
        .transcript(messages)
        .build()
        .expect("build")
}

#[test]
fn a_message_with_its_text_is_stored_as_that_text_under_its_codec() {
    let call = Message::from_openai_chat_json(CHAT).expect("import");
    let result = Message::tool_result(ToolResult::new("c1", "5"));
    let bytes = snapshot_of(vec![call, result]).to_json().expect("encode");
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    assert!(
        text.contains(&format!(r#""transcript":[{{"openai_chat":{CHAT}}},"#)),
        "{text}"
    );
    let back = SessionSnapshot::from_json(&bytes).expect("decode");
    assert_eq!(
        back.transcript()[0].to_openai_chat_json().expect("export"),
        CHAT
    );
}

#[test]
fn a_pretty_printed_stored_text_loads_and_comes_back_compact() {
    let call = Message::from_openai_chat_json(CHAT).expect("import");
    let result = Message::tool_result(ToolResult::new("c1", "5"));
    let bytes = snapshot_of(vec![call, result]).to_json().expect("encode");
    let pretty = String::from_utf8(bytes).expect("UTF-8").replace(
        r#""openai_chat":{"role":"assistant","#,
        "\"openai_chat\" : {\n  \"role\" : \"assistant\" ,\n  ",
    );
    let back = SessionSnapshot::from_json(pretty.as_bytes()).expect("decode");
    assert_eq!(
        back.transcript()[0].to_openai_chat_json().expect("export"),
        CHAT
    );
}

#[test]
fn a_stored_text_that_is_not_a_valid_message_is_a_corrupt_snapshot() {
    let call = Message::from_openai_chat_json(CHAT).expect("import");
    let result = Message::tool_result(ToolResult::new("c1", "5"));
    let text = String::from_utf8(snapshot_of(vec![call, result]).to_json().expect("encode"))
        .expect("UTF-8");
    for (from, to) in [
        (r#""role":"assistant","#, r#""role":"wizard","#),
        (r#""seed":"#, r#""t":1,"seed":"#),
        (r#"{"openai_chat":{"#, r#"{"anthropic":{"#),
        (
            r#"{"openai_chat":{"role""#,
            r#"{"openai_chat":{"x":"\ud800","role""#,
        ),
        (r#""t":1.10}}"#, r#""t":1.10},"role":"user"}"#),
    ] {
        let damaged = text.replacen(from, to, 1);
        assert_ne!(damaged, text, "{from}");
        let err = SessionSnapshot::from_json(damaged.as_bytes()).expect_err(to);
        assert!(matches!(err, Error::Malformed { .. }), "{to}: {err:?}");
        let (_dir, store) = temp_store();
        std::fs::write(store.dir().join("exact.json"), &damaged).expect("write");
        let err = store.load(&sid("exact")).expect_err(to);
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{to}: {err:?}");
    }
}

#[test]
fn a_message_changed_after_import_is_exported_and_stored_as_it_now_is() {
    let mut changed = Message::from_openai_chat_json(CHAT).expect("import");
    changed.extra.insert("seed".to_owned(), Value::from(7));
    // The export checks the text against the fields.
    let exported: Value =
        serde_json::from_str(&changed.to_openai_chat_json().expect("export")).expect("JSON");
    assert_eq!(exported["seed"], 7);
    // The snapshot drops the stale text: the neutral form is stored, with the change.
    let snapshot = snapshot_of(vec![
        changed,
        Message::tool_result(ToolResult::new("c1", "5")),
    ]);
    let text = String::from_utf8(snapshot.to_json().expect("encode")).expect("UTF-8");
    assert!(!text.contains("openai_chat"), "{text}");
    let back = SessionSnapshot::from_json(text.as_bytes()).expect("decode");
    assert_eq!(back.transcript()[0].extra["seed"], 7);
    // The same message unchanged keeps its text through the builder.
    let kept = snapshot_of(vec![
        Message::from_openai_chat_json(CHAT).expect("import"),
        Message::tool_result(ToolResult::new("c1", "5")),
    ]);
    let text = String::from_utf8(kept.to_json().expect("encode")).expect("UTF-8");
    assert!(text.contains("openai_chat"), "{text}");
}

#[test]
fn appended_messages_are_checked_as_they_enter() {
    let store = MemorySessionStore::new();
    store
        .save(&snapshot_of(vec![Message::user("hi")]))
        .expect("save");
    let loaded = store.load(&sid("exact")).expect("load");
    let mut changed =
        Message::from_anthropic_json(r#"{"role":"assistant","content":"hello","z":1}"#)
            .expect("import");
    changed.content.push(ContentBlock::text("more"));
    let appended = loaded
        .with_appended(vec![changed], Vec::new(), chrono::Utc::now())
        .expect("append");
    let text = String::from_utf8(appended.to_json().expect("encode")).expect("UTF-8");
    assert!(!text.contains(r#"{"anthropic":"#), "{text}");
    assert!(text.contains("more"), "{text}");
}

#[test]
fn what_a_stored_session_could_not_hold_is_refused_naming_the_codec() {
    let deep = format!(
        r#"{{"role":"user","content":"x","d":{}1{}}}"#,
        "[".repeat(130),
        "]".repeat(130)
    );
    for (codec, text, why) in [
        (Codec::OpenAiChat, r#"{"role":"user","content":"x""#, "JSON"),
        (
            Codec::OpenAiChat,
            r#"{"role":"user","content":"x","role":"user"}"#,
            "duplicate key",
        ),
        (
            Codec::Anthropic,
            r#"{"role":"user","content":"\ud800"}"#,
            "surrogate",
        ),
        (
            Codec::Gemini,
            r#"{"role":"user","parts":[{"text":"x"}],"n":1e400}"#,
            "neutral",
        ),
        (Codec::OpenAiChat, deep.as_str(), "deeper"),
        (
            Codec::OpenAiResponses,
            r#"{"role":"user","content":"x"} {}"#,
            "follows",
        ),
        (Codec::Gemini, r#"{"role":"system","parts":[]}"#, "role"),
        (Codec::OpenAiChat, "\u{feff}{}", "byte-order mark"),
    ] {
        match Message::from_json(codec, text) {
            Err(Error::Conversion { provider, problem }) => {
                assert_eq!(provider, codec.name());
                assert!(problem.contains(why), "{text}: {problem}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn a_transcript_import_names_the_message_it_refuses() {
    let contents = r#"[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"functionCall":{"args":{}}}]}]"#;
    match Codec::Gemini.import(contents) {
        Err(Error::Conversion { provider, problem }) => {
            assert_eq!(provider, "gemini");
            assert!(
                problem.starts_with("message 1: part 0 (functionCall)"),
                "{problem}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(Codec::Gemini.import(r#"{"role":"user"}"#).is_err());
}

/// An unpaired tool result (a Gemini response to a call the transcript does not have) is
/// refused where the transcript becomes a snapshot, and nothing is stored.
#[test]
fn unpaired_results_are_refused_and_nothing_is_stored() {
    let messages = Codec::Gemini
        .import(r#"[{"role":"user","parts":[{"text":"hi"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]"#)
        .expect("import");
    let err = SessionSnapshot::builder(sid("unpaired"), MODEL)
        .transcript(messages)
        .build()
        .expect_err("a result without its call");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    assert!(
        err.to_string().contains("f-0") || format!("{err:?}").contains("f-0"),
        "{err:?}"
    );
}

/// The loop runs on every codec's messages: the engine's reply imported from the
/// provider's text, the calls run, the results paired; the transcript exported back as
/// the provider's input, with the reply given back exactly.
#[tokio::test]
async fn the_session_loop_runs_on_every_codecs_messages() {
    let replies = [
        (
            Codec::OpenAiChat,
            r#"{"role":"assistant","content":null,"function_call":{"name":"calculator","arguments":"{\"expression\":\"2+3\"}"}}"#,
        ),
        (
            Codec::OpenAiResponses,
            r#"[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"calculator","arguments":"{\"expression\":\"2+3\"}","status":"completed"}]"#,
        ),
        (
            Codec::Anthropic,
            r#"{"role":"assistant","content":[{"type":"thinking","thinking":"add","signature":"EqQB"},{"type":"tool_use","id":"toolu_1","name":"calculator","input":{"expression":"2+3"}}]}"#,
        ),
        (
            Codec::Gemini,
            r#"{"role":"model","parts":[{"functionCall":{"name":"calculator","args":{"expression":"2+3"}},"thoughtSignature":"c2ln"}]}"#,
        ),
    ];
    for (codec, reply) in replies {
        let call = Message::from_json(codec, reply).expect("import the reply");
        let answer = Message::from_json(
            codec,
            match codec {
                Codec::Gemini => r#"{"role":"model","parts":[{"text":"5"}]}"#,
                _ => r#"{"role":"assistant","content":"5"}"#,
            },
        )
        .expect("import the answer");
        let engine = ScriptedEngine::new([
            agent_session::Completion::new(call, usage(10, 5, "0.000001")),
            agent_session::Completion::new(answer, usage(10, 5, "0.000001")),
        ]);
        let calculator = Calculator::shared();
        let options = SessionOptions::new(MODEL).tools(calculator.clone() as Arc<_>);
        let mut session = Session::new(sid("loop"), engine, options).expect("session");
        let outcome = session.send("What is 2+3?").await.expect("send");
        assert_eq!(outcome.stop, StopReason::Finished, "{codec:?}");
        assert_eq!(calculator.calls(), 1, "{codec:?}");
        let exported = codec.export(session.transcript()).expect("export");
        assert!(
            exported.contains(reply.trim_start_matches('[').trim_end_matches(']')),
            "{codec:?}: {exported}"
        );
        let input: Value = serde_json::from_str(&exported).expect("JSON");
        let text = input.to_string();
        match codec {
            Codec::Gemini => assert!(
                text.contains(
                    r#"{"functionResponse":{"name":"calculator","response":{"output":"5"}}}"#
                ),
                "{text}"
            ),
            Codec::OpenAiChat => assert!(
                text.contains(r#"{"content":"5","name":"calculator","role":"function"}"#),
                "{text}"
            ),
            Codec::OpenAiResponses => assert!(
                text.contains(r#"{"call_id":"call_1","output":"5","type":"function_call_output"}"#),
                "{text}"
            ),
            _ => assert!(text.contains(r#""tool_use_id":"toolu_1""#), "{text}"),
        }
        // Saved and loaded, the reply is still the provider's text.
        let store = MemorySessionStore::new();
        store.save(&session.snapshot()).expect("save");
        let loaded = store.load(&sid("loop")).expect("load");
        assert_eq!(codec.export(loaded.transcript()).expect("export"), exported);
    }
}

/// A secret in a message imported from text is redacted in what is stored: the provider's
/// text, which still holds it, is not written.
#[test]
fn redaction_reaches_messages_kept_as_provider_text() {
    let secret = "sk-abcdefghijklmnopqrstuvwxyz012345";
    let texts = [
        (
            Codec::OpenAiChat,
            format!(r#"{{"role":"user","content":"my key is {secret}"}}"#),
        ),
        (
            Codec::Gemini,
            format!(r#"{{"role":"user","parts":[{{"text":"key {secret}"}}]}}"#),
        ),
        (
            Codec::OpenAiResponses,
            format!(
                r#"[{{"type":"message","role":"user","content":"x","note":"{secret}"}},{{"role":"user","content":"y"}}]"#
            ),
        ),
    ];
    for (codec, text) in texts {
        let message = Message::from_json(codec, &text).expect("import");
        let snapshot = snapshot_of(vec![message]);
        let redacted = snapshot.redacted(&agent_session::PatternRedactor::common_secrets());
        let stored = String::from_utf8(redacted.to_json().expect("encode")).expect("UTF-8");
        assert!(!stored.contains(secret), "{codec:?}: {stored}");
        assert!(stored.contains("[REDACTED]"), "{codec:?}: {stored}");
        // Nothing to redact: the text is kept.
        let clean = snapshot_of(vec![Message::from_json(
            codec,
            &text.replace(secret, "none"),
        )
        .expect("import")]);
        let stored = String::from_utf8(
            clean
                .redacted(&agent_session::PatternRedactor::common_secrets())
                .to_json()
                .expect("encode"),
        )
        .expect("UTF-8");
        assert!(stored.contains(codec_key(codec)), "{codec:?}: {stored}");
    }
}

fn codec_key(codec: Codec) -> &'static str {
    match codec {
        Codec::OpenAiChat => r#"{"openai_chat":"#,
        Codec::Gemini => r#"{"gemini":"#,
        _ => r#"{"openai_responses":"#,
    }
}
