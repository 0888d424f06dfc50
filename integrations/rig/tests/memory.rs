//! The rig adapter (issue 16) against the real rig-core 0.44: its `ConversationMemory`
//! over this crate's stores, and the message conversions.

use std::sync::Arc;

use agent_session::{
    ContentBlock, ErrorKind, FileSessionStore, MemorySessionStore, Message, Role, SessionId,
    SessionSnapshot, SessionStore, ToolCall, ToolResult,
};
use agent_session_rig::{from_rig, to_rig, SessionMemory};
use rig_core::completion::message::{
    AssistantContent, AssistantMessage, CallId, Reasoning, StopReason, ToolFunction, ToolName,
    ToolResultContent, UserContent,
};
use rig_core::completion::Message as RigMessage;
use rig_core::id::ConversationId;
use rig_core::memory::{ConversationMemory, InMemoryConversationMemory};
use serde_json::json;

fn name(n: &str) -> ToolName {
    ToolName::new(n).unwrap()
}

/// A turn as rig's agent appends it: prompt, a call, its result, the answer; with
/// reasoning, a rig-issued call id and a structured result, which only rig has.
fn turn() -> Vec<RigMessage> {
    let call = rig_core::completion::message::ToolCall::from_wire(
        "call_1",
        ToolFunction::new(name("get_weather"), json!({"city": "Paris"})),
    );
    let local = rig_core::completion::message::ToolCall::from_wire(
        "",
        ToolFunction::new(name("clock"), json!({})),
    );
    assert!(local.id.is_local());
    vec![
        RigMessage::system("Be brief."),
        RigMessage::user("Weather in Paris, and the time?"),
        RigMessage::Assistant(AssistantMessage::new(vec![
            AssistantContent::Reasoning(Reasoning::new("Two tools.")),
            AssistantContent::text("Checking."),
            AssistantContent::ToolCall(call.clone()),
            AssistantContent::ToolCall(local.clone()),
        ])),
        RigMessage::tool_results(vec![
            call.result(vec![ToolResultContent::text("21°C")]),
            local.error_result(vec![ToolResultContent::Json {
                value: json!({"error": "no clock", "code": 7}),
            }]),
        ]),
        RigMessage::assistant("21°C; the clock failed."),
    ]
}

fn conversation(id: &str) -> ConversationId {
    ConversationId::new(id)
}

#[tokio::test]
async fn history_survives_dropping_everything() {
    let dir = tempfile::tempdir().unwrap();
    let thread = conversation("thread-1");
    let first = turn();
    {
        let store = Arc::new(FileSessionStore::open(dir.path()).unwrap()).into_async();
        let memory = SessionMemory::new(store, "gpt-4.1");
        memory.append(&thread, first.clone()).await.unwrap();
        memory
            .append(
                &thread,
                vec![
                    RigMessage::user("Thanks"),
                    RigMessage::assistant("Any time."),
                ],
            )
            .await
            .unwrap();
    } // store, memory: all dropped.

    let store = Arc::new(FileSessionStore::open(dir.path()).unwrap()).into_async();
    let memory = SessionMemory::new(store, "gpt-4.1");
    let mut expected = first.clone();
    expected.extend([
        RigMessage::user("Thanks"),
        RigMessage::assistant("Any time."),
    ]);
    assert_eq!(memory.load(&thread).await.unwrap(), expected);

    // The same history as rig's own in-memory implementation gives.
    let reference = InMemoryConversationMemory::new();
    reference.append(&thread, first).await.unwrap();
    reference
        .append(
            &thread,
            vec![
                RigMessage::user("Thanks"),
                RigMessage::assistant("Any time."),
            ],
        )
        .await
        .unwrap();
    assert_eq!(reference.load(&thread).await.unwrap(), expected);

    // And it is an ordinary session of the crate: tool calls paired, metadata readable.
    let sync = FileSessionStore::open(dir.path()).unwrap();
    let snapshot = sync.load(&SessionId::parse("thread-1").unwrap()).unwrap();
    assert_eq!(snapshot.options().model, "gpt-4.1");
    assert_eq!(snapshot.transcript().len(), 7);
    assert_eq!(snapshot.tool_calls().len(), 2);
    assert!(snapshot.tool_calls()[1].status.is_error());
    assert_eq!(snapshot.transcript()[2].text(), "Checking.");
}

#[tokio::test]
async fn an_unknown_conversation_is_empty_and_clear_deletes() {
    let memory = SessionMemory::new(Arc::new(MemorySessionStore::new()).into_async(), "m");
    let thread = conversation("t");
    assert!(memory.load(&thread).await.unwrap().is_empty());
    memory.clear(&thread).await.unwrap();
    memory
        .append(&thread, vec![RigMessage::user("hi")])
        .await
        .unwrap();
    assert_eq!(memory.load(&thread).await.unwrap().len(), 1);
    memory.clear(&thread).await.unwrap();
    assert!(memory.load(&thread).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_conversation_id_that_is_no_session_id_is_refused() {
    let memory = SessionMemory::new(Arc::new(MemorySessionStore::new()).into_async(), "m");
    let err = memory
        .append(&conversation("../etc"), vec![RigMessage::user("hi")])
        .await
        .unwrap_err();
    let source = std::error::Error::source(&err)
        .and_then(|e| e.downcast_ref::<agent_session::Error>())
        .unwrap();
    assert_eq!(source.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn concurrent_appends_are_all_kept() {
    let store = Arc::new(MemorySessionStore::new()).into_async();
    let thread = conversation("busy");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let memory = SessionMemory::new(Arc::clone(&store), "m");
            let thread = thread.clone();
            tokio::spawn(async move {
                memory
                    .append(&thread, vec![RigMessage::user(format!("m{i}"))])
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let history = SessionMemory::new(store, "m").load(&thread).await.unwrap();
    assert_eq!(history.len(), 8);
}

#[test]
fn the_neutral_blocks_say_what_the_crate_understands() {
    let turn = turn();
    let messages = from_rig(&turn).unwrap();
    assert_eq!(messages[0].role, Role::System);
    assert_eq!(messages[1].text(), "Weather in Paris, and the time?");
    let calls: Vec<&ToolCall> = messages[2].tool_calls().collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id, "call_1");
    assert_eq!(
        calls[0].arguments.to_value().unwrap(),
        json!({"city": "Paris"})
    );
    assert!(
        matches!(&messages[2].content[0], ContentBlock::Other { value } if value["type"] == "rig")
    );
    let results: Vec<&ToolResult> = messages[3].tool_results().collect();
    assert_eq!(results[0].output.as_text(), Some("21°C"));
    assert!(results[1].is_error);
    assert_eq!(to_rig(&messages).unwrap(), turn);
}

#[test]
fn a_failed_turns_calls_are_kept_without_results() {
    let call = rig_core::completion::message::ToolCall::from_wire(
        "call_x",
        ToolFunction::new(name("f"), json!({})),
    );
    let aborted = RigMessage::Assistant(
        AssistantMessage::new(vec![AssistantContent::ToolCall(call)])
            .with_stop(StopReason::Aborted("timeout".into())),
    );
    let messages = from_rig(&[RigMessage::user("go"), aborted.clone()]).unwrap();
    assert_eq!(messages[1].tool_calls().count(), 0);
    // A snapshot accepts it (no call without a result), and it comes back as it was.
    let snapshot = SessionSnapshot::builder(SessionId::parse("s").unwrap(), "m")
        .transcript(messages.clone())
        .build()
        .unwrap();
    assert_eq!(to_rig(snapshot.transcript()).unwrap()[1], aborted);
}

#[test]
fn messages_not_from_rig_are_converted_from_their_blocks() {
    let transcript = vec![
        Message::system("sys"),
        Message::user("hi"),
        Message::assistant(vec![
            ContentBlock::text("Looking."),
            ContentBlock::tool_call(ToolCall::new("c1", "search", json!({"q": "x"}))),
        ]),
        Message::tool_result(ToolResult::new("c1", "found")),
    ];
    let rig = to_rig(&transcript).unwrap();
    assert_eq!(rig[0], RigMessage::system("sys"));
    assert_eq!(rig[1], RigMessage::user("hi"));
    let RigMessage::Assistant(turn) = &rig[2] else {
        panic!("{:?}", rig[2]);
    };
    let call = turn.tool_calls().next().unwrap();
    assert_eq!(call.id, CallId::from_wire("c1"));
    assert_eq!(call.function.arguments_value(), json!({"q": "x"}));
    let RigMessage::User { content } = &rig[3] else {
        panic!("{:?}", rig[3]);
    };
    let UserContent::ToolResult(result) = &content[0] else {
        panic!("{content:?}");
    };
    assert_eq!(result.name, "search");
    assert_eq!(result.content[0].as_text(), Some("found"));

    // An edited message is converted from its blocks, not given back stale.
    let mut messages = from_rig(&[RigMessage::user("old")]).unwrap();
    messages[0].content = vec![ContentBlock::text("new")];
    assert_eq!(to_rig(&messages).unwrap(), vec![RigMessage::user("new")]);
}

#[test]
fn what_rig_cannot_hold_is_an_error() {
    let anthropic = Message::from_anthropic(&json!({
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}]
    }))
    .unwrap();
    let err = to_rig(&[Message::user("a"), anthropic]).unwrap_err();
    assert!(matches!(
        err,
        agent_session::Error::Conversion {
            provider: "rig",
            ..
        }
    ));
    assert!(err.to_string().contains("message 1"), "{err}");

    let orphan = Message::tool_result(ToolResult::new("nope", "x"));
    assert!(to_rig(&[orphan]).is_err());
}
