//! The async-openai adapter (issue 16) against the real async-openai 0.43 types; also
//! issue 15's check that exported transcripts are accepted by async-openai's request types.
#![cfg(feature = "async-openai-0_43")]

use agent_session::adapters::async_openai::{
    from_request_message, from_request_messages, from_response_message, to_request_message,
    to_request_messages,
};
use agent_session::{
    Codec, ContentBlock, ErrorKind, Harness, MemorySessionStore, Message, Role, SessionOptions,
    ToolCall, ToolResult,
};
use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessageArgs, ChatCompletionRequestDeveloperMessageArgs,
    ChatCompletionRequestMessage, ChatCompletionRequestMessageContentPartTextArgs,
    ChatCompletionRequestSystemMessageArgs, ChatCompletionRequestToolMessageArgs,
    ChatCompletionRequestUserMessageArgs, ChatCompletionRequestUserMessageContentPart,
    ChatCompletionResponseMessage, CreateChatCompletionRequest, CreateChatCompletionRequestArgs,
    FunctionCall,
};
use async_openai_0_43 as async_openai;
use serde_json::json;

fn tool_call(id: &str, name: &str, arguments: &str) -> ChatCompletionMessageToolCalls {
    ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
        id: id.into(),
        function: FunctionCall {
            name: name.into(),
            arguments: arguments.into(),
        },
    })
}

/// One of each kind, built with async-openai's builders.
fn conversation() -> Vec<ChatCompletionRequestMessage> {
    vec![
        ChatCompletionRequestSystemMessageArgs::default()
            .content("You are terse.")
            .build()
            .unwrap()
            .into(),
        ChatCompletionRequestDeveloperMessageArgs::default()
            .content("Prefer metric units.")
            .build()
            .unwrap()
            .into(),
        ChatCompletionRequestUserMessageArgs::default()
            .content("Weather in Paris and Rome?")
            .name("ada")
            .build()
            .unwrap()
            .into(),
        ChatCompletionRequestUserMessageArgs::default()
            .content(vec![ChatCompletionRequestUserMessageContentPart::Text(
                ChatCompletionRequestMessageContentPartTextArgs::default()
                    .text("(in °C, please)")
                    .build()
                    .unwrap(),
            )])
            .build()
            .unwrap()
            .into(),
        ChatCompletionRequestAssistantMessageArgs::default()
            .tool_calls(vec![
                // Argument strings are kept byte for byte: spacing, key order, 1.10.
                tool_call("call_1", "get_weather", r#"{"city": "Paris", "t": 1.10}"#),
                tool_call("call_2", "get_weather", r#"{"city":"Rome"}"#),
            ])
            .build()
            .unwrap()
            .into(),
        ChatCompletionRequestToolMessageArgs::default()
            .tool_call_id("call_1")
            .content("21")
            .build()
            .unwrap()
            .into(),
        ChatCompletionRequestToolMessageArgs::default()
            .tool_call_id("call_2")
            .content("24")
            .build()
            .unwrap()
            .into(),
        ChatCompletionRequestAssistantMessageArgs::default()
            .content("Paris 21°C, Rome 24°C.")
            .build()
            .unwrap()
            .into(),
    ]
}

#[test]
fn each_request_message_round_trips() {
    for original in conversation() {
        let message = Message::try_from(&original).unwrap();
        let back = ChatCompletionRequestMessage::try_from(&message).unwrap();
        assert_eq!(back, original);
        // The codec's own text entry point gives the same message: the mapping is the codec's.
        let text = serde_json::to_string(&original).unwrap();
        assert_eq!(
            Message::from_json(Codec::OpenAiChat, &text).unwrap(),
            message
        );
        assert_eq!(message.to_json(Codec::OpenAiChat).unwrap(), text);
    }
}

#[test]
fn the_neutral_fields_are_the_codecs() {
    let messages = from_request_messages(&conversation()).unwrap();
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::System,
            Role::User,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(messages[2].extra["name"], "ada");
    let calls: Vec<&ToolCall> = messages[4].tool_calls().collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].id, "call_1");
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(
        calls[0].arguments.to_value().unwrap(),
        json!({"city": "Paris", "t": 1.1})
    );
    let result = messages[5].tool_results().next().unwrap();
    assert_eq!(result.call_id, "call_1");
    assert_eq!(result.output.as_text(), Some("21"));
}

#[test]
fn a_whole_transcript_round_trips_and_builds_a_request() {
    let original = conversation();
    let messages = from_request_messages(&original).unwrap();
    let back = to_request_messages(&messages).unwrap();
    assert_eq!(back, original);
    let request: CreateChatCompletionRequest = CreateChatCompletionRequestArgs::default()
        .model("gpt-4.1")
        .messages(back)
        .build()
        .unwrap();
    // And async-openai reads back the JSON it would send.
    let wire = serde_json::to_string(&request).unwrap();
    let reread: CreateChatCompletionRequest = serde_json::from_str(&wire).unwrap();
    assert_eq!(reread.messages, original);
}

/// A session's transcript, built with the crate's own constructors and saved, is accepted
/// by async-openai's request types (issue 15).
#[tokio::test]
async fn a_session_transcript_exports_to_async_openai_request_messages() {
    struct Scripted(Vec<Message>);
    impl agent_session::Engine for Scripted {
        async fn complete(
            &mut self,
            request: agent_session::CompletionRequest<'_>,
        ) -> Result<agent_session::Completion, agent_session::BoxError> {
            Ok(agent_session::Completion::new(
                self.0.remove(0),
                agent_session::Usage::new(request.model).with_tokens(10, 5),
            ))
        }
    }
    struct Weather;
    impl agent_session::ToolExecutor for Weather {
        fn execute<'a>(
            &'a self,
            _call: &'a ToolCall,
        ) -> agent_session::BoxFuture<'a, Result<agent_session::ToolOutput, agent_session::BoxError>>
        {
            Box::pin(async move { Ok(agent_session::ToolOutput::from("sunny")) })
        }
    }
    let harness = Harness::builder(MemorySessionStore::new(), || {
        Scripted(vec![
            Message::assistant(vec![
                ContentBlock::text("Checking."),
                ContentBlock::tool_call(ToolCall::new(
                    "call_9",
                    "get_weather",
                    json!({"city": "Oslo"}),
                )),
            ]),
            Message::assistant(vec![ContentBlock::text("Sunny in Oslo.")]),
        ])
    })
    .tools(std::sync::Arc::new(Weather))
    .build();
    let mut session = harness
        .new_session(SessionOptions::new("gpt-4.1").system_prompt("Be brief."))
        .unwrap();
    session.send("Weather in Oslo?").await.unwrap();
    harness.save_session(&mut session).unwrap();
    let resumed = harness.resume_session(session.id(), None).unwrap();

    let messages = to_request_messages(resumed.transcript()).unwrap();
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-4.1")
        .messages(messages.clone())
        .build()
        .unwrap();
    assert_eq!(request.messages.len(), resumed.transcript().len());
    assert!(matches!(
        &messages[messages.len() - 2],
        ChatCompletionRequestMessage::Tool(tool) if tool.tool_call_id == "call_9"
    ));
    // Back again: the same transcript (arguments now as OpenAI's JSON string).
    let again = from_request_messages(&messages).unwrap();
    for (a, b) in again.iter().zip(resumed.transcript()) {
        assert_eq!(a.role, b.role);
        assert_eq!(a.text(), b.text());
        let calls = |m: &Message| -> Vec<(String, String, serde_json::Value)> {
            m.tool_calls()
                .map(|c| {
                    (
                        c.id.clone(),
                        c.name.clone(),
                        c.arguments.to_value().unwrap(),
                    )
                })
                .collect()
        };
        assert_eq!(calls(a), calls(b));
        assert_eq!(a.tool_results().count(), b.tool_results().count());
    }
}

#[test]
fn a_response_message_feeds_the_tool_loop() {
    let reply: ChatCompletionResponseMessage = serde_json::from_str(
        r#"{"role":"assistant","content":null,"refusal":null,"annotations":[],
            "tool_calls":[{"id":"call_7","type":"function",
            "function":{"name":"lookup","arguments":"{\"q\":\"rust\"}"}}]}"#,
    )
    .unwrap();
    let message = from_response_message(&reply).unwrap();
    assert_eq!(message.role, Role::Assistant);
    let call = message.tool_calls().next().unwrap().clone();
    assert_eq!(call.id, "call_7");
    assert_eq!(call.arguments.to_value().unwrap(), json!({"q": "rust"}));

    // Pair it with a result and send both back: a request async-openai accepts, the call
    // and its result paired by id.
    let transcript = vec![
        Message::user("Find rust"),
        message,
        Message::tool_result(ToolResult::new(call.id.clone(), "found")),
    ];
    let request = to_request_messages(&transcript).unwrap();
    let ChatCompletionRequestMessage::Assistant(assistant) = &request[1] else {
        panic!("{:?}", request[1]);
    };
    let calls = assistant.tool_calls.as_ref().unwrap();
    assert_eq!(
        calls,
        &vec![tool_call("call_7", "lookup", r#"{"q":"rust"}"#)]
    );
    let ChatCompletionRequestMessage::Tool(result) = &request[2] else {
        panic!("{:?}", request[2]);
    };
    assert_eq!(result.tool_call_id, "call_7");

    // And a snapshot accepts the pairing.
    agent_session::SessionSnapshot::builder(agent_session::SessionId::parse("s").unwrap(), "m")
        .transcript(transcript)
        .build()
        .unwrap();
}

#[test]
fn a_field_async_openai_would_drop_is_an_error() {
    let message = Message::from_openai_chat(
        &json!({"role": "assistant", "content": "x", "reasoning_content": "hmm"}),
    )
    .unwrap();
    let err = to_request_message(&message).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("reasoning_content"), "{err}");

    let err = to_request_messages(&[Message::user("hi"), message]).unwrap_err();
    assert!(err.to_string().contains("message 1"), "{err}");
}

#[test]
fn a_message_the_codec_cannot_express_is_an_error() {
    // Two tool results in one message: OpenAI Chat has one per `tool` message.
    let message = Message::new(
        Role::Tool,
        vec![
            ContentBlock::tool_result(ToolResult::new("a", "1")),
            ContentBlock::tool_result(ToolResult::new("b", "2")),
        ],
    );
    let err = to_request_message(&message).unwrap_err();
    assert!(
        matches!(err, agent_session::Error::Conversion { .. }),
        "{err}"
    );
}

#[test]
fn an_anthropic_message_is_translated_by_the_codec() {
    let message = Message::from_anthropic(&json!({
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]
    }))
    .unwrap();
    let ChatCompletionRequestMessage::Assistant(assistant) = to_request_message(&message).unwrap()
    else {
        panic!("not an assistant message");
    };
    assert_eq!(
        assistant.tool_calls.unwrap(),
        vec![tool_call("toolu_1", "f", r#"{"a":1}"#)]
    );
    assert!(
        from_request_message(&ChatCompletionRequestMessage::Assistant(
            ChatCompletionRequestAssistantMessageArgs::default()
                .content("ok")
                .build()
                .unwrap()
        ))
        .is_ok()
    );
}
