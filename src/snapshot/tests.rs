//! Unit tests of the snapshot: validation, encoding and decoding, titles.

use super::codec::{canonical_header, SnapshotHeader, PARALLEL_MESSAGES};
use super::*;
use crate::json;
use crate::transcript::{ToolCall, ToolResult};
use serde_json::json;

fn id() -> SessionId {
    SessionId::parse("t").unwrap()
}

fn call(id: &str) -> Message {
    Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
        id,
        "f",
        json!({}),
    ))])
}

#[test]
fn dangling_and_orphan_tool_blocks_are_refused() {
    let dangling = SessionSnapshot::builder(id(), "m")
        .transcript(vec![Message::user("x"), call("c1")])
        .build()
        .unwrap_err();
    assert!(
        dangling
            .to_string()
            .contains("\"c1\" (f) at message 1 has no result"),
        "{dangling}"
    );

    let orphan = SessionSnapshot::builder(id(), "m")
        .transcript(vec![Message::tool_result(ToolResult::new("zz", "1"))])
        .build()
        .unwrap_err();
    assert!(
        orphan.to_string().contains("no earlier tool call"),
        "{orphan}"
    );

    let twice = SessionSnapshot::builder(id(), "m")
        .transcript(vec![
            call("c1"),
            Message::tool_result(ToolResult::new("c1", "1")),
            Message::tool_result(ToolResult::new("c1", "2")),
        ])
        .build()
        .unwrap_err();
    assert!(twice.to_string().contains("second result"), "{twice}");

    let dup = SessionSnapshot::builder(id(), "m")
        .transcript(vec![call("c1"), call("c1")])
        .build()
        .unwrap_err();
    assert!(dup.to_string().contains("used again"), "{dup}");
    let reused_after_answer = SessionSnapshot::builder(id(), "m")
        .transcript(vec![
            call("c1"),
            Message::tool_result(ToolResult::new("c1", "1")),
            call("c1"),
            Message::tool_result(ToolResult::new("c1", "2")),
        ])
        .build()
        .unwrap();
    let records = reused_after_answer.tool_calls();
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].call_at.message, 2);
    assert_eq!(records[1].result_at.message, 3);
}

#[test]
fn records_must_agree_with_transcript() {
    let snapshot = SessionSnapshot::builder(id(), "m")
        .transcript(vec![
            call("c1"),
            Message::tool_result(ToolResult::error("c1", "x")),
        ])
        .build()
        .unwrap();
    assert_eq!(snapshot.tool_calls()[0].status, ToolCallStatus::Error);
    let mut value: Value = serde_json::from_slice(&snapshot.to_json().unwrap()).unwrap();
    value["tool_calls"][0]["status"] = json!("ok");
    let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("has status Ok"), "{err}");

    value["tool_calls"][0]["status"] = json!("error");
    value["tool_calls"][0]["tool_name"] = json!("g");
    let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("disagrees"), "{err}");

    value["tool_calls"] = json!([]);
    let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("1 tool calls but there are 0"),
        "{err}"
    );
}

#[test]
fn a_role_alias_other_than_developer_on_a_system_message_is_refused() {
    let snapshot = SessionSnapshot::builder(id(), "m")
        .transcript(vec![Message::user("hi")])
        .build()
        .unwrap();
    let mut value: Value = serde_json::from_slice(&snapshot.to_json().unwrap()).unwrap();
    // An alias no codec records is refused as it is decoded (the alias is one byte in
    // memory, so an unknown one cannot be held until validation).
    value["transcript"][0]["wire"] = json!({"role": "system"});
    let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        source.is_some_and(|s| s.contains("role alias \"system\"")),
        "{err:?}"
    );
    // "developer" on a message that is not a system message is inconsistent.
    value["transcript"][0]["wire"] = json!({"role": "developer"});
    let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("role alias \"developer\""),
        "{err}"
    );
    value["transcript"][0]["role"] = json!("system");
    SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap();
    // "model" belongs to assistant messages only.
    value["transcript"][0]["wire"] = json!({"role": "model"});
    let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("role alias \"model\""), "{err}");
    value["transcript"][0]["role"] = json!("assistant");
    SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap();
}

#[test]
fn encoding_in_parts_and_on_threads_writes_the_bytes_of_one_encoding() {
    for n in [0, 1, PARALLEL_MESSAGES - 1, PARALLEL_MESSAGES, 1001] {
        let mut transcript = Vec::new();
        for i in 0..n / 3 {
            transcript.push(Message::user(format!("q{i} \"quoted\" \u{e9}")));
            transcript.push(call(&format!("c{i}")));
            transcript.push(Message::tool_result(ToolResult::new(
                format!("c{i}"),
                "{\"ok\":[1,2,{\"x\":null}]}",
            )));
        }
        let snapshot = SessionSnapshot::builder(id(), "m")
            .metadata_entry("nested", json!({"a": [[{"b": 1.5}]]}))
            .transcript(transcript)
            .usage(vec![Usage::new("m").with_tokens(3, 4)])
            .build()
            .unwrap();
        let revision = Revision::from_u64(7);
        let whole = serde_json::to_vec(&Encoded {
            schema_version: SCHEMA_VERSION,
            id: &snapshot.id,
            revision,
            created_at: &snapshot.created_at,
            updated_at: &snapshot.updated_at,
            options: &snapshot.options,
            metadata: &snapshot.metadata,
            lineage: snapshot.lineage.as_ref(),
            transcript: &snapshot.transcript,
            tool_calls: &snapshot.tool_calls,
            usage: &snapshot.usage,
        })
        .unwrap();
        let parts = snapshot.to_json_with_revision(revision).unwrap();
        assert_eq!(
            String::from_utf8(parts).unwrap(),
            String::from_utf8(whole.clone()).unwrap(),
            "{n} messages"
        );
    }
}

/// Deep enough that the whole document passes the limit.
const MAX_JSON_DEPTH_FOR_TEST: usize = json::MAX_JSON_DEPTH;

#[test]
fn too_deep_is_found_in_any_chunk_of_a_long_transcript() {
    let mut deep = json!(1);
    for _ in 0..MAX_JSON_DEPTH_FOR_TEST {
        deep = json!([deep]);
    }
    let mut transcript = Vec::new();
    for i in 0..PARALLEL_MESSAGES {
        transcript.push(Message::user(format!("q{i}")));
    }
    let deep_call = Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
        "deep", "f", deep,
    ))]);
    let answer = Message::tool_result(ToolResult::new("deep", "ok"));
    // The builder refuses it (so no snapshot ever holds it); the encoder's own check,
    // which keeps the promise should an entry check be missed, is tested by putting it
    // in behind the builder's back.
    let mut refused = transcript.clone();
    refused.extend([deep_call.clone(), answer.clone()]);
    assert!(matches!(
        SessionSnapshot::builder(id(), "m")
            .transcript(refused)
            .build(),
        Err(Error::TooDeep { .. })
    ));
    let mut snapshot = SessionSnapshot::builder(id(), "m")
        .transcript(transcript)
        .build()
        .unwrap();
    Arc::make_mut(&mut snapshot.transcript).extend([deep_call, answer]);
    let whole = serde_json::to_vec(&Encoded {
        schema_version: SCHEMA_VERSION,
        id: &snapshot.id,
        revision: Revision::NEW,
        created_at: &snapshot.created_at,
        updated_at: &snapshot.updated_at,
        options: &snapshot.options,
        metadata: &snapshot.metadata,
        lineage: snapshot.lineage.as_ref(),
        transcript: &snapshot.transcript,
        tool_calls: &snapshot.tool_calls,
        usage: &snapshot.usage,
    })
    .unwrap();
    match snapshot.to_json() {
        Err(Error::TooDeep { depth, .. }) => {
            assert_eq!(depth, json::tests::nesting_depth(&whole));
        }
        other => panic!("expected TooDeep, got {other:?}"),
    }
}

#[test]
fn the_canonical_header_is_read_without_decoding_the_rest() {
    let snapshot = SessionSnapshot::builder(id(), "m")
        .build()
        .unwrap()
        .with_revision(Revision::from_u64(41));
    let expected = SnapshotHeader {
        id: id(),
        revision: Revision::from_u64(41),
        created_at: snapshot.created_at(),
    };
    let bytes = snapshot.to_json().unwrap();
    assert_eq!(
        canonical_header(&bytes),
        Some((u64::from(SCHEMA_VERSION), expected.clone()))
    );
    // The head of the file is enough.
    assert_eq!(
        SessionSnapshot::peek_header(&bytes[..120], false).unwrap(),
        Some(expected.clone())
    );
    // The fast path never answers for another form; the JSON path then does, but only
    // for a whole document.
    let pretty =
        serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&bytes).unwrap()).unwrap();
    assert_eq!(canonical_header(&pretty), None);
    assert_eq!(SessionSnapshot::peek_header(&pretty, false).unwrap(), None);
    assert_eq!(
        SessionSnapshot::peek_header(&pretty, true).unwrap(),
        Some(expected)
    );
    for odd in [
        &br#"{"schema_version":01,"id":"t","revision":1,"created_at":"2026-01-01T00:00:00Z","#[..],
        br#"{"schema_version":1,"id":"T","revision":1,"created_at":"2026-01-01T00:00:00Z","#,
        br#"{"schema_version":1,"id":"t","revision":99999999999999999999,"created_at":"2026-01-01T00:00:00Z","#,
        br#"{"schema_version":1,"id":"t","revision":1}"#,
        br#"{"schema_version":1,"id":"t","revision":1,"created_at":"yesterday","#,
        br#"{"schema_version":1,"id":"t","revision":1,"created_at":"2026-01-01T00:00:00Z"}"#,
    ] {
        assert_eq!(
            canonical_header(odd),
            None,
            "{}",
            String::from_utf8_lossy(odd)
        );
    }
    let newer = format!(
        r#"{{"schema_version":{},"id":"t","revision":1,"created_at":"x"}}"#,
        SCHEMA_VERSION + 1
    );
    assert!(matches!(
        SessionSnapshot::peek_header(newer.as_bytes(), true),
        Err(Error::UnsupportedSchemaVersion { found, .. }) if found == u64::from(SCHEMA_VERSION) + 1
    ));
    // An older version's header is read the same way: a store keeps bases written by
    // older releases and appends to them.
    let older =
        br#"{"schema_version":1,"id":"t","revision":1,"created_at":"2026-01-01T00:00:00Z","#;
    assert!(SessionSnapshot::peek_header(older, false)
        .unwrap()
        .is_some());
}

#[test]
fn versions_are_checked_before_fields() {
    let snapshot = SessionSnapshot::builder(id(), "m").build().unwrap();
    let mut value: Value = serde_json::from_slice(&snapshot.to_json().unwrap()).unwrap();
    value["schema_version"] = json!(SCHEMA_VERSION + 1);
    value["new_field_of_a_later_version"] = json!(true);
    let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedSchemaVersion { found, .. } if found == u64::from(SCHEMA_VERSION) + 1),
        "{err}"
    );

    // An unknown field is refused in the current version and, through the migration
    // path, in an older one.
    for version in [SCHEMA_VERSION, OLDEST_SCHEMA_VERSION] {
        value["schema_version"] = json!(version);
        let err = SessionSnapshot::from_json(value.to_string().as_bytes()).unwrap_err();
        assert!(matches!(err, Error::Malformed { .. }), "{version}: {err}");
    }
}

#[test]
fn title_prefers_metadata_then_first_user_line() {
    let long = "x".repeat(200);
    let s = SessionSnapshot::builder(id(), "m")
        .transcript(vec![
            Message::system("sys"),
            Message::user(format!("{long}\nsecond")),
        ])
        .build()
        .unwrap();
    assert_eq!(s.title().unwrap().chars().count(), TITLE_MAX_CHARS + 1);
    let s = SessionSnapshot::builder(id(), "m")
        .metadata_entry("title", json!("Named"))
        .transcript(vec![Message::user("hi")])
        .build()
        .unwrap();
    assert_eq!(s.title().as_deref(), Some("Named"));
    let empty = SessionSnapshot::builder(id(), "m").build().unwrap();
    assert_eq!(empty.title(), None);
}

/// The encoded JSON form in one piece: what [`SessionSnapshot::to_json_with_revision`]
/// writes part by part, kept to check that it writes the same bytes.
#[derive(Serialize)]
struct Encoded<'a> {
    schema_version: u32,
    id: &'a SessionId,
    revision: Revision,
    created_at: &'a DateTime<Utc>,
    updated_at: &'a DateTime<Utc>,
    options: &'a PersistedOptions,
    metadata: &'a Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lineage: Option<&'a Lineage>,
    transcript: &'a [Message],
    tool_calls: &'a [ToolCallRecord],
    usage: &'a [Usage],
}
