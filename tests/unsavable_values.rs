//! Values a store could save but a load would refuse, refused where they enter instead
//! (issue 12, items 2 and 8): usage whose totals overflow 64 bits, and JSON nested deeper
//! than a stored session can be read back with (tool arguments, tool output, provider
//! blocks, metadata), up to nesting deep enough that any recursive walk, `serde_json`'s own
//! `Drop` included, would overflow a test thread's stack and abort the process.
//!
//! Each case checks the refusal is a typed error, that the session is left as it was and
//! can still be saved, and that what was saved loads again, in each store.

mod common;
#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod postgres_support;

use std::collections::VecDeque;
use std::sync::Arc;

use agent_session::{
    BoxError, BoxFuture, Completion, CompletionRequest, ContentBlock, Engine, Error, ErrorKind,
    FileSessionStore, MemorySessionStore, Message, Role, Session, SessionOptions, SessionSnapshot,
    SessionStore, ToolCall, ToolDefinition, ToolExecutor, ToolOutput, Usage,
};
use common::sid;
use serde_json::{json, Value};

/// Deep enough that any recursive walk on a test thread's 2 MiB stack aborts.
const FAR_TOO_DEEP: usize = 200_000;
/// Just past what a stored session can read back, for the cases that must not abort either.
const JUST_TOO_DEEP: usize = 130;

/// An array nested `levels` deep around `1`.
fn nested(levels: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..levels {
        value = Value::Array(vec![value]);
    }
    value
}

/// Lets go of a value built by [`nested`] one level at a time (dropping it whole would
/// recurse through every level).
fn unnest(mut value: Value) {
    while let Value::Array(mut items) = value {
        value = items.pop().unwrap_or(Value::Null);
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(future)
}

/// Plays back completions; each built when asked, so a deep one is made on the thread
/// that uses it.
struct Scripted(VecDeque<Box<dyn FnOnce() -> Completion + Send>>);

impl Scripted {
    fn new(steps: Vec<Box<dyn FnOnce() -> Completion + Send>>) -> Self {
        Scripted(steps.into())
    }
}

impl Engine for Scripted {
    async fn complete(&mut self, _: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        self.0
            .pop_front()
            .map(|make| make())
            .ok_or_else(|| "the script is exhausted".into())
    }
}

fn answer(text: &str) -> Completion {
    Completion::new(
        Message::assistant(vec![ContentBlock::text(text)]),
        Usage::new("m").with_tokens(10, 2),
    )
}

fn calls(arguments: Value) -> Completion {
    Completion::new(
        Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "c1", "echo", arguments,
        ))]),
        Usage::new("m").with_tokens(10, 2),
    )
}

/// What keeps a store's backing alive while a case runs.
enum Backing {
    None,
    Dir(#[allow(dead_code)] tempfile::TempDir),
    #[cfg(feature = "postgres")]
    Schemas(#[allow(dead_code)] postgres_support::Schemas),
}

/// The stores every case runs against, each fresh: memory, file and (with the `postgres`
/// feature, against the server `scripts/test` starts) PostgreSQL.
fn stores() -> Vec<(&'static str, Box<dyn SessionStore>, Backing)> {
    let dir = tempfile::tempdir().expect("temp dir");
    #[allow(unused_mut)] // only the postgres feature adds one
    let mut stores: Vec<(&'static str, Box<dyn SessionStore>, Backing)> = vec![
        ("memory", Box::new(MemorySessionStore::new()), Backing::None),
        (
            "file",
            Box::new(FileSessionStore::open(dir.path()).expect("open")),
            Backing::Dir(dir),
        ),
    ];
    #[cfg(feature = "postgres")]
    {
        let schemas = postgres_support::Schemas::new();
        stores.push((
            "postgres",
            Box::new(schemas.store()),
            Backing::Schemas(schemas),
        ));
    }
    stores
}

/// Saves `session` into `store` and checks that what was stored loads as the session is.
fn save_and_reload<E>(store: &dyn SessionStore, session: &mut Session<E>, what: &str) {
    let snapshot = session.snapshot();
    let revision = store
        .save(&snapshot)
        .unwrap_or_else(|e| panic!("{what}: the session stays savable: {e}"));
    session.mark_saved(revision);
    let loaded = store
        .load(session.id())
        .unwrap_or_else(|e| panic!("{what}: what was saved loads: {e}"));
    assert_eq!(loaded.transcript(), session.transcript(), "{what}");
    assert_eq!(loaded.totals(), session.totals(), "{what}");
}

// ---------------------------------------------------------------------------------------
// Usage (item 2).
// ---------------------------------------------------------------------------------------

/// An engine that reports `u64::MAX` tokens twice: the first fits, the second would make
/// the totals overflow. Before, the save was acknowledged and every later load failed with
/// "usage totals overflow"; a debug build panicked and lost the turn.
#[test]
fn usage_that_would_overflow_the_totals_is_refused_and_the_session_stays_savable() {
    for (name, store, _dir) in stores() {
        let huge = || Usage::new("m").with_tokens(u64::MAX, 1);
        let engine = Scripted::new(vec![
            Box::new(move || {
                Completion::new(Message::assistant(vec![ContentBlock::text("a")]), huge())
            }),
            Box::new(move || {
                Completion::new(Message::assistant(vec![ContentBlock::text("b")]), huge())
            }),
            Box::new(|| answer("fine")),
        ]);
        let mut session =
            Session::new(sid("overflow"), engine, SessionOptions::new("m")).expect("a session");
        block_on(session.send("one")).expect("the first completion fits");
        save_and_reload(&*store, &mut session, name);

        let err = block_on(session.send("two")).expect_err("the totals would overflow");
        assert_eq!(err.kind(), ErrorKind::Engine, "{name}: {err}");
        let text = format!(
            "{err} {}",
            std::error::Error::source(&err)
                .map(ToString::to_string)
                .unwrap_or_default()
        );
        assert!(text.contains("overflow"), "{name}: {text}");
        assert_eq!(
            session.turn_count(),
            1,
            "{name}: the refused completion was not kept"
        );
        assert_eq!(session.totals().input_tokens, u64::MAX);
        save_and_reload(&*store, &mut session, name);

        // The session goes on.
        block_on(session.send("three")).expect_err("still too much: u64::MAX + 10");
        assert_eq!(session.turn_count(), 1);
        save_and_reload(&*store, &mut session, name);
    }
}

#[test]
fn snapshots_with_usage_that_overflows_cannot_be_built_or_extended() {
    let max = Usage::new("m").with_tokens(u64::MAX, 0);
    let err = SessionSnapshot::builder(sid("built"), "m")
        .usage(vec![max.clone(), max.clone()])
        .build()
        .expect_err("the builder refuses it");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let one = SessionSnapshot::builder(sid("built"), "m")
        .usage(vec![max.clone()])
        .build()
        .expect("one fits");
    let err = one
        .clone()
        .with_appended(Vec::new(), vec![max], chrono::Utc::now())
        .expect_err("with_appended refuses it");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(one.totals().input_tokens, u64::MAX);
}

// ---------------------------------------------------------------------------------------
// Nesting (item 8).
// ---------------------------------------------------------------------------------------

/// Tool arguments too deep to save: before, the session accepted them and every later save
/// failed with `TooDeep` (the transcript cannot be edited), and at 100,000 levels encoding
/// overflowed the stack. Now the completion is refused as invalid engine output.
#[test]
fn tool_arguments_too_deep_are_refused_when_the_engine_returns_them() {
    for levels in [JUST_TOO_DEEP, FAR_TOO_DEEP] {
        for (name, store, _dir) in stores() {
            let engine = Scripted::new(vec![
                Box::new(|| answer("hello")),
                Box::new(move || calls(nested(levels))),
                Box::new(|| answer("after")),
            ]);
            let mut session =
                Session::new(sid("deep-args"), engine, SessionOptions::new("m")).expect("new");
            block_on(session.send("first")).expect("a plain turn");
            let err = block_on(session.send("go deep")).expect_err("too deep to keep");
            assert_eq!(err.kind(), ErrorKind::Engine, "{name} {levels}: {err}");
            let cause = std::error::Error::source(&err)
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(cause.contains("levels deep"), "{name} {levels}: {cause}");
            assert!(
                session
                    .transcript()
                    .iter()
                    .all(|m| m.tool_calls().next().is_none()),
                "{name} {levels}: the call was not kept"
            );
            save_and_reload(&*store, &mut session, name);
            block_on(session.send("more")).expect("the session goes on");
            save_and_reload(&*store, &mut session, name);
        }
    }
}

/// A tool's output too deep to save: the model gets an error result saying so (the
/// conversation goes on), and nothing of the output is kept.
#[test]
fn tool_output_too_deep_becomes_an_error_result() {
    struct DeepTool(usize);
    impl ToolExecutor for DeepTool {
        fn definitions(&self) -> Vec<ToolDefinition> {
            vec![ToolDefinition::new(
                "echo",
                "returns deep blocks",
                json!({"type": "object"}),
            )]
        }
        fn execute<'a>(&'a self, _: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
            let levels = self.0;
            Box::pin(async move {
                Ok(ToolOutput::Blocks(vec![ContentBlock::Other {
                    value: nested(levels),
                }]))
            })
        }
    }
    for levels in [JUST_TOO_DEEP, FAR_TOO_DEEP] {
        for (name, store, _dir) in stores() {
            let engine = Scripted::new(vec![
                Box::new(|| calls(json!({}))),
                Box::new(|| answer("done")),
            ]);
            let options = SessionOptions::new("m").tools(Arc::new(DeepTool(levels)));
            let mut session = Session::new(sid("deep-output"), engine, options).expect("new");
            block_on(session.send("call it")).expect("the turn completes");
            let record = &session.tool_calls()[0];
            assert!(record.status.is_error(), "{name} {levels}");
            let result = session
                .snapshot()
                .tool_result(record)
                .cloned()
                .expect("a result");
            let text = result.output.as_text().unwrap_or_default().to_owned();
            assert!(text.contains("levels deep"), "{name} {levels}: {text}");
            save_and_reload(&*store, &mut session, name);
        }
    }
}

#[test]
fn a_message_sent_too_deep_is_refused_and_the_session_is_unchanged() {
    for levels in [JUST_TOO_DEEP, FAR_TOO_DEEP] {
        let engine = Scripted::new(vec![Box::new(|| answer("hi"))]);
        let mut session =
            Session::new(sid("deep-send"), engine, SessionOptions::new("m")).expect("new");
        let message = Message::new(
            Role::User,
            vec![
                ContentBlock::text("x"),
                ContentBlock::Other {
                    value: nested(levels),
                },
            ],
        );
        let err = block_on(session.send_message(message)).expect_err("too deep");
        assert!(matches!(err, Error::TooDeep { .. }), "{levels}: {err:?}");
        assert!(
            session.transcript().is_empty(),
            "{levels}: nothing was appended"
        );
    }
}

#[test]
fn metadata_too_deep_is_refused_when_a_session_is_made_and_at_every_save_after_an_edit() {
    for levels in [JUST_TOO_DEEP, FAR_TOO_DEEP] {
        let options = SessionOptions::new("m").metadata_entry("deep", nested(levels));
        let engine = Scripted::new(Vec::new());
        let err = Session::new(sid("deep-meta"), engine, options).expect_err("too deep");
        assert!(
            matches!(&err, Error::TooDeep { part, .. } if part == "metadata"),
            "{levels}: {err:?}"
        );
    }
    for levels in [JUST_TOO_DEEP, FAR_TOO_DEEP] {
        for (name, store, _dir) in stores() {
            let engine = Scripted::new(Vec::new());
            let mut session =
                Session::new(sid("deep-edit"), engine, SessionOptions::new("m")).expect("new");
            save_and_reload(&*store, &mut session, name);
            session
                .metadata_mut()
                .insert("deep".to_owned(), nested(levels));
            assert!(session.has_unsaved_changes());
            let err = store
                .save(&session.snapshot())
                .expect_err("the snapshot cannot be encoded");
            assert!(
                matches!(&err, Error::TooDeep { part, .. } if part == "metadata"),
                "{name} {levels}: {err:?}"
            );
            // Fixed, the session saves again.
            let deep = session.metadata_mut().remove("deep").expect("the value");
            unnest(deep);
            session
                .metadata_mut()
                .insert("flat".to_owned(), json!(levels.to_string()));
            save_and_reload(&*store, &mut session, name);
        }
    }
}

#[test]
fn the_builder_and_with_appended_refuse_values_too_deep() {
    for levels in [JUST_TOO_DEEP, FAR_TOO_DEEP] {
        let err = SessionSnapshot::builder(sid("deep-built"), "m")
            .transcript(vec![Message::assistant(vec![ContentBlock::Other {
                value: nested(levels),
            }])])
            .build()
            .expect_err("too deep");
        assert!(
            matches!(&err, Error::TooDeep { part, .. } if part == "message 0"),
            "{levels}: {err:?}"
        );
        let err = SessionSnapshot::builder(sid("deep-built"), "m")
            .metadata_entry("k", nested(levels))
            .build()
            .expect_err("too deep");
        assert!(
            matches!(&err, Error::TooDeep { part, .. } if part == "metadata"),
            "{err:?}"
        );

        let base = SessionSnapshot::builder(sid("deep-appended"), "m")
            .transcript(vec![Message::user("a")])
            .build()
            .expect("build");
        let err = base
            .with_appended(
                vec![Message::assistant(vec![ContentBlock::Other {
                    value: nested(levels),
                }])],
                Vec::new(),
                chrono::Utc::now(),
            )
            .expect_err("too deep");
        assert!(
            matches!(&err, Error::TooDeep { part, .. } if part == "message 1"),
            "{levels}: {err:?}"
        );
    }
}

#[test]
fn provider_codecs_refuse_messages_too_deep_without_copying_them() {
    for levels in [JUST_TOO_DEEP, FAR_TOO_DEEP] {
        let openai = json!({"role": "user", "content": [{"type": "x", "deep": Value::Null}]});
        let mut openai = openai;
        openai["content"][0]["deep"] = nested(levels);
        let err = Message::from_openai_chat(&openai).expect_err("too deep");
        assert!(matches!(err, Error::Conversion { .. }), "{levels}: {err:?}");
        let deep = openai["content"][0]["deep"].take();
        unnest(deep);

        let mut anthropic = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "n", "input": Value::Null}
        ]});
        anthropic["content"][0]["input"] = nested(levels);
        let err = Message::from_anthropic(&anthropic).expect_err("too deep");
        assert!(matches!(err, Error::Conversion { .. }), "{levels}: {err:?}");
        unnest(anthropic["content"][0]["input"].take());

        let built = Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "t",
            "n",
            nested(levels),
        ))]);
        assert!(matches!(
            built.to_anthropic(),
            Err(Error::Conversion { .. })
        ));
        assert!(matches!(
            built.to_openai_chat(),
            Err(Error::Conversion { .. })
        ));
        let mut built = built;
        if let Some(ContentBlock::ToolCall(call)) = built.content.first_mut() {
            if let agent_session::ToolArguments::Json(value) = &mut call.arguments {
                unnest(value.take());
            }
        }
    }
}

/// Deep values one level inside the limit are kept and round-trip: the limits refuse only
/// what could not be read back.
#[test]
fn values_at_the_limits_are_kept_and_load_again() {
    // A message's object, its content and the block hold the arguments: 125 - 3.
    let limit_args = 122;
    let engine = Scripted::new(vec![
        Box::new(move || calls(nested(limit_args))),
        Box::new(|| answer("ok")),
    ]);
    let options = SessionOptions::new("m").metadata_entry("deep", nested(125));
    let mut session =
        Session::new(sid("at-limit"), engine, options).expect("metadata at the limit");
    block_on(session.send("go")).expect("arguments at the limit");
    for (name, store, _dir) in stores() {
        let mut copy =
            Session::restore(session.snapshot(), Scripted::new(Vec::new()), None).expect("restore");
        save_and_reload(&*store, &mut copy, name);
    }
}
