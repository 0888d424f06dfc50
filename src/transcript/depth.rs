//! How deep a message nests as JSON, and letting go of one that nests too deep, both
//! without recursion: tool arguments, provider blocks and tool outputs can nest without
//! bound, and a value nested deeply enough overflows the stack of any recursive walk
//! (`serde_json`'s own `Drop` included).

use serde_json::{Map, Value};

use super::{ContentBlock, Message, ToolArguments, ToolOutput};
use crate::json;

/// A part of a message's JSON form, at the nesting level its opening bracket sits at.
enum Node<'a> {
    Value(&'a Value),
    Map(&'a Map<String, Value>),
    Blocks(&'a [ContentBlock]),
    Block(&'a ContentBlock),
}

/// How deep `message` nests in its JSON form (the one a snapshot stores), counting the
/// message's own object as 1: exactly what scanning `serde_json::to_vec(message)` finds.
pub(crate) fn message_depth(message: &Message) -> usize {
    // Stored as `{"<codec>": <the provider's text>}`.
    if let Some(raw) = message.raw() {
        return 1 + raw.depth;
    }
    let mut stack = vec![(Node::Blocks(&message.content), 2)];
    if !message.extra.is_empty() {
        stack.push((Node::Map(&message.extra), 2));
    }
    // The wire object holds only scalars, but for a Responses group's layout: a list of
    // objects (level 4), whose `message` objects sit at level 5.
    let floor = match message.items() {
        _ if message.has_no_hints() => 1,
        None => 2,
        Some(items) => {
            for item in items {
                if let Some(envelope) = &item.message {
                    stack.push((Node::Map(envelope), 5));
                }
            }
            if items.is_empty() {
                3
            } else {
                4
            }
        }
    };
    deepest(stack, floor)
}

/// How deep `blocks` nest as a JSON array (1 when empty or all plain text), as a tool
/// result's `output` does.
pub(crate) fn blocks_depth(blocks: &[ContentBlock]) -> usize {
    deepest(vec![(Node::Blocks(blocks), 1)], 1)
}

/// The deepest level reached from `stack`, or `floor`.
fn deepest(mut stack: Vec<(Node<'_>, usize)>, floor: usize) -> usize {
    let mut deepest = floor;
    while let Some((node, level)) = stack.pop() {
        match node {
            Node::Value(value) => {
                let depth = json::value_depth(value);
                if depth > 0 {
                    deepest = deepest.max(level + depth - 1);
                }
            }
            Node::Map(map) => {
                deepest = deepest.max(level);
                stack.extend(map.values().map(|value| (Node::Value(value), level + 1)));
            }
            Node::Blocks(blocks) => {
                deepest = deepest.max(level);
                stack.extend(blocks.iter().map(|block| (Node::Block(block), level + 1)));
            }
            Node::Block(block) => {
                deepest = deepest.max(level);
                let inner = level + 1;
                match block {
                    ContentBlock::Text(text) => {
                        if !text.extra.is_empty() {
                            stack.push((Node::Map(&text.extra), inner));
                        }
                    }
                    ContentBlock::ToolCall(call) => {
                        if let ToolArguments::Json(value) = &call.arguments {
                            stack.push((Node::Value(value), inner));
                        }
                        if !call.extra.is_empty() {
                            stack.push((Node::Map(&call.extra), inner));
                        }
                        if !call.wire.is_default() {
                            deepest = deepest.max(inner);
                            if !call.wire.function_extra.is_empty() {
                                stack.push((Node::Map(&call.wire.function_extra), inner + 1));
                            }
                        }
                    }
                    ContentBlock::ToolResult(result) => {
                        if let ToolOutput::Blocks(blocks) = &result.output {
                            stack.push((Node::Blocks(blocks), inner));
                        }
                        if !result.extra.is_empty() {
                            stack.push((Node::Map(&result.extra), inner));
                        }
                        if !result.wire.is_default() {
                            deepest = deepest.max(inner);
                            if !result.wire.function_extra.is_empty() {
                                stack.push((Node::Map(&result.wire.function_extra), inner + 1));
                            }
                        }
                    }
                    ContentBlock::Other { value } => stack.push((Node::Value(value), inner)),
                }
            }
        }
    }
    deepest
}

/// Drops `message` without recursing into what it holds.
pub(crate) fn dismantle_message(mut message: Message) {
    json::dismantle_map(message.extra);
    if let Some(items) = message.rare.take().and_then(|rare| rare.items) {
        for item in items {
            if let Some(envelope) = item.message {
                json::dismantle_map(envelope);
            }
        }
    }
    dismantle_blocks(message.content);
}

/// [`dismantle_message`] for a tool's output.
pub(crate) fn dismantle_output(output: ToolOutput) {
    if let ToolOutput::Blocks(blocks) = output {
        dismantle_blocks(blocks);
    }
}

fn dismantle_blocks(mut blocks: Vec<ContentBlock>) {
    while let Some(block) = blocks.pop() {
        match block {
            ContentBlock::Text(text) => json::dismantle_map(text.extra),
            ContentBlock::ToolCall(call) => {
                if let ToolArguments::Json(value) = call.arguments {
                    json::dismantle(value);
                }
                json::dismantle_map(call.extra);
                json::dismantle_map(call.wire.function_extra);
            }
            ContentBlock::ToolResult(result) => {
                if let ToolOutput::Blocks(inner) = result.output {
                    blocks.extend(inner);
                }
                json::dismantle_map(result.extra);
                json::dismantle_map(result.wire.function_extra);
            }
            ContentBlock::Other { value } => json::dismantle(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{TextBlock, ToolCall, ToolResult};
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut value = json!(1);
        for i in 0..levels {
            value = if i % 2 == 0 {
                json!([value])
            } else {
                json!({ "k": value })
            };
        }
        value
    }

    fn scanned(message: &Message) -> usize {
        json::tests::nesting_depth(&serde_json::to_vec(message).expect("encode"))
    }

    #[test]
    fn the_depth_is_what_scanning_the_encoded_message_finds() {
        let mut with_wire = ToolCall::new("c", "t", nested(3));
        with_wire.wire.type_absent = true;
        let mut with_function_extra = ToolCall::with_raw_arguments("d", "t", "{}");
        with_function_extra
            .wire
            .function_extra
            .insert("x".into(), nested(4));
        let mut result = ToolResult::new(
            "c",
            ToolOutput::Blocks(vec![
                ContentBlock::text("a"),
                ContentBlock::tool_result(ToolResult::new(
                    "inner",
                    ToolOutput::Blocks(vec![ContentBlock::Other { value: nested(5) }]),
                )),
            ]),
        );
        result.wire.is_error_present = true;
        let mut text = TextBlock::new("t");
        text.extra.insert("citations".into(), nested(2));
        let mut messages = vec![
            Message::user("plain"),
            Message::new(super::super::Role::User, Vec::new()),
            Message::assistant(vec![ContentBlock::tool_call(with_wire)]),
            Message::assistant(vec![ContentBlock::tool_call(with_function_extra)]),
            Message::tool_result(result),
            Message::assistant(vec![ContentBlock::Text(text)]),
            Message::assistant(vec![ContentBlock::Other { value: json!(null) }]),
            Message::assistant(vec![ContentBlock::Other { value: json!([]) }]),
            Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                "e",
                "t",
                nested(20),
            ))]),
        ];
        let mut with_extra = Message::user("x");
        with_extra.extra.insert("name".into(), nested(6));
        messages.push(with_extra);
        let mut with_role = Message::system("x");
        with_role.wire.role = Some(super::super::RoleAlias::Developer);
        messages.push(with_role);
        // The provider form, a Responses group's layout, a Gemini result's fields.
        messages.push(
            Message::from_openai_chat_json(r#"{"role":"user","content":"x","d":[[{"a":[1]}]]}"#)
                .expect("import"),
        );
        let mut group = Message::from_responses(&json!([
            {"type": "message", "role": "assistant", "id": "m", "content": "a", "x": {"y": [nested(3)]}},
            {"type": "reasoning", "summary": []}
        ]))
        .expect("import");
        messages.push(group.clone());
        group.set_items(Some(Vec::new()));
        messages.push(group);
        let mut gemini = Message::from_gemini(&json!({"role": "user", "parts": [
            {"functionResponse": {"name": "f", "response": {}, "parts": [{"k": nested(4)}]}}
        ]}))
        .expect("import");
        messages.push(gemini.clone());
        gemini.wire.codec = None;
        messages.push(gemini);
        for message in &messages {
            assert_eq!(message_depth(message), scanned(message), "{message:?}");
        }
    }

    #[test]
    fn a_message_far_too_deep_is_measured_and_let_go_of_without_overflowing() {
        // Deep enough that any recursive walk on a test thread's stack would abort.
        let mut value = json!(1);
        for _ in 0..200_000 {
            value = Value::Array(vec![value]);
        }
        let message = Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "c", "t", value,
        ))]);
        assert_eq!(message_depth(&message), 3 + 200_000);
        dismantle_message(message);
    }
}
