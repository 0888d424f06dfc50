//! A plain typed mirror of the snapshot's JSON form (`docs/FORMAT.md`, schema version 1),
//! derived with serde and nothing else: no unknown-field or duplicate-key checks, no
//! nesting check, no consistency validation, no conversion into the crate's types.
//!
//! Reading a snapshot file and parsing it into [`Snapshot`] is the physical baseline of the
//! load benchmark: the cost of turning the same bytes into Rust values before any of the
//! crate's own work. The derives follow the shape the format has (content blocks tagged by
//! `type`, a tool result's `output` either a string or blocks), as any typed reader of the
//! format would write them.

// The fields exist to be parsed; the benchmark reads only a few of them.
#![allow(dead_code)]

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

#[derive(Deserialize)]
pub struct Snapshot {
    pub schema_version: u32,
    pub id: String,
    pub revision: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub options: Options,
    pub metadata: Map<String, Value>,
    pub transcript: Vec<Message>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub usage: Vec<Usage>,
}

#[derive(Deserialize)]
pub struct Options {
    pub model: String,
    #[serde(default)]
    pub system_prompt: Option<String>,
    pub max_turns: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

#[derive(Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
    #[serde(default)]
    pub extra: Map<String, Value>,
    #[serde(default)]
    pub wire: Option<MessageWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    Blocks,
    String,
    Null,
    Absent,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallsShape {
    Derived,
    Empty,
    Null,
}

#[derive(Deserialize)]
pub struct MessageWire {
    #[serde(default)]
    pub content: Option<Shape>,
    #[serde(default)]
    pub tool_calls: Option<ToolCallsShape>,
    #[serde(default)]
    pub role: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
        #[serde(default)]
        extra: Map<String, Value>,
    },
    ToolCall {
        id: String,
        name: String,
        #[serde(default)]
        input: Option<Value>,
        #[serde(default)]
        arguments: Option<String>,
        #[serde(default)]
        extra: Map<String, Value>,
        #[serde(default)]
        wire: Option<ToolCallWire>,
    },
    ToolResult {
        call_id: String,
        output: Output,
        #[serde(default)]
        is_error: bool,
        #[serde(default)]
        extra: Map<String, Value>,
        #[serde(default)]
        wire: Option<ToolResultWire>,
    },
    Other {
        value: Value,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
pub enum Output {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Deserialize)]
pub struct ToolCallWire {
    #[serde(default)]
    pub type_absent: bool,
    #[serde(default)]
    pub function_extra: Map<String, Value>,
}

#[derive(Deserialize)]
pub struct ToolResultWire {
    #[serde(default)]
    pub output: Option<Shape>,
    #[serde(default)]
    pub is_error_present: bool,
}

#[derive(Deserialize)]
pub struct Position {
    pub message: usize,
    pub block: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Error,
    Interrupted,
}

#[derive(Deserialize)]
pub struct ToolCallRecord {
    pub call_id: String,
    pub tool_name: String,
    pub call_at: Position,
    pub result_at: Position,
    pub status: Status,
}

#[derive(Deserialize)]
pub struct Usage {
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    pub cost_nano_usd: u64,
}
