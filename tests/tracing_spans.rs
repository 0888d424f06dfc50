//! The spans of the `tracing` feature: one per store operation, per turn and per harness
//! save, with the session id, revision, bytes and outcome, and never any content.
//!
//! A subscriber of the test's own records every span (name, fields, parent) and event.
//! Every piece of content the test hands the crate (messages, tool names, arguments and
//! results, tool call ids, the system prompt, metadata keys and values) carries a marker,
//! and every recorded name and value is scanned for it.

#![cfg(feature = "tracing")]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use agent_session::{
    Autosave, BoxError, BoxFuture, Completion, CompletionRequest, ContentBlock, Engine,
    FileSessionStore, Harness, MemorySessionStore, Message, Revision, RewindTo, Role, SessionId,
    SessionOptions, SessionSnapshot, SessionStore, StopReason, ToolCall, ToolDefinition,
    ToolExecutor, ToolOutput, Usage,
};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_core::span::Current;

/// Every marker starts with this; a recorded value containing it is a leak.
const MARKER: &str = "SECRET-MARKER";
const MODEL: &str = "model-under-test";

// ---------------------------------------------------------------------------------------
// The recording subscriber.

/// One recorded span.
#[derive(Debug, Clone)]
struct SpanRecord {
    id: u64,
    name: &'static str,
    metadata: &'static Metadata<'static>,
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
}

impl SpanRecord {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    fn number(&self, name: &str) -> Option<u64> {
        self.field(name).and_then(|v| v.parse().ok())
    }
}

#[derive(Debug, Default)]
struct Recorded {
    spans: Vec<SpanRecord>,
    /// Each event's fields (its message included, as `message`).
    events: Vec<BTreeMap<String, String>>,
}

impl Recorded {
    /// Every recorded name and value that contains `marker`, described.
    fn leaks(&self, marker: &str) -> Vec<String> {
        let spans = self.spans.iter().flat_map(|span| {
            std::iter::once((span.name.to_owned(), String::new()))
                .chain(span.fields.iter().map(|(k, v)| (k.clone(), v.clone())))
                .map(move |(k, v)| (format!("span {} ({})", span.name, span.id), k, v))
        });
        let events = self.events.iter().enumerate().flat_map(|(i, fields)| {
            fields
                .iter()
                .map(move |(k, v)| (format!("event {i}"), k.clone(), v.clone()))
        });
        spans
            .chain(events)
            .filter(|(_, k, v)| k.contains(marker) || v.contains(marker))
            .map(|(at, k, v)| format!("{at}: {k} = {v}"))
            .collect()
    }
}

/// Writes every field as text: strings as they are, everything else as `Debug`.
struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

thread_local! {
    /// The spans entered on this thread, innermost last.
    static ENTERED: RefCell<Vec<(u64, &'static Metadata<'static>)>> = const { RefCell::new(Vec::new()) };
}

/// Records every span and event, with each span's parent (explicit, or the span entered
/// on the thread that made it).
#[derive(Clone, Default)]
struct Recorder {
    recorded: Arc<Mutex<Recorded>>,
    next: Arc<AtomicU64>,
}

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn spans(&self) -> Vec<SpanRecord> {
        self.lock().spans.clone()
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let parent = if let Some(parent) = attrs.parent() {
            Some(parent.into_u64())
        } else if attrs.is_contextual() {
            ENTERED.with(|e| e.borrow().last().map(|(id, _)| *id))
        } else {
            None
        };
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.lock().spans.push(SpanRecord {
            id,
            name: attrs.metadata().name(),
            metadata: attrs.metadata(),
            parent,
            fields,
        });
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut recorded = self.lock();
        if let Some(span) = recorded.spans.iter_mut().find(|s| s.id == span.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.lock().events.push(fields);
    }

    fn enter(&self, span: &Id) {
        let id = span.into_u64();
        let metadata = self
            .lock()
            .spans
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.metadata);
        if let Some(metadata) = metadata {
            ENTERED.with(|e| e.borrow_mut().push((id, metadata)));
        }
    }

    fn exit(&self, span: &Id) {
        let id = span.into_u64();
        ENTERED.with(|e| {
            let mut entered = e.borrow_mut();
            if let Some(at) = entered.iter().rposition(|(s, _)| *s == id) {
                entered.remove(at);
            }
        });
    }

    fn current_span(&self) -> Current {
        ENTERED.with(|e| match e.borrow().last() {
            Some((id, metadata)) => Current::new(Id::from_u64(*id), metadata),
            None => Current::none(),
        })
    }
}

/// The recorder every thread of this test binary reports to (the store's blocking pool
/// included), installed once.
fn global() -> &'static Recorder {
    static RECORDER: OnceLock<Recorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = Recorder::default();
        tracing::subscriber::set_global_default(recorder.clone())
            .unwrap_or_else(|e| panic!("install the recording subscriber: {e}"));
        recorder
    })
}

// ---------------------------------------------------------------------------------------
// An engine and a tool, with markers in everything they say.

/// Calls the marked tool once, then answers with marked text.
struct ToolThenAnswer;

impl Engine for ToolThenAnswer {
    async fn complete(&mut self, r: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        let after_tool = r.transcript.last().is_some_and(|m| m.role == Role::Tool);
        let message = if after_tool {
            Message::assistant(vec![ContentBlock::text(format!(
                "{MARKER}-reply: the tool said so"
            ))])
        } else {
            Message::assistant(vec![
                ContentBlock::text(format!("{MARKER}-thinking")),
                ContentBlock::tool_call(ToolCall::new(
                    format!("{MARKER}-call-id"),
                    format!("{MARKER}-tool"),
                    json!({ "query": format!("{MARKER}-arguments") }),
                )),
            ])
        };
        Ok(Completion::new(
            message,
            Usage::new(r.model).with_tokens(10, 5),
        ))
    }
}

struct MarkedTool;

impl ToolExecutor for MarkedTool {
    fn definitions(&self) -> Vec<ToolDefinition> {
        vec![ToolDefinition::new(
            format!("{MARKER}-tool"),
            format!("{MARKER}-tool-description"),
            json!({ "type": "object" }),
        )]
    }

    fn execute<'a>(&'a self, _: &'a ToolCall) -> BoxFuture<'a, Result<ToolOutput, BoxError>> {
        Box::pin(async { Ok(ToolOutput::from(format!("{MARKER}-tool-result"))) })
    }
}

fn marked_options() -> SessionOptions {
    SessionOptions::new(MODEL)
        .system_prompt(format!("{MARKER}-system-prompt"))
        .metadata_entry(
            format!("{MARKER}-metadata-key"),
            json!(format!("{MARKER}-metadata-value")),
        )
        .tools(Arc::new(MarkedTool))
}

/// The spans named `name` of session `id`.
fn spans_of<'a>(
    spans: &'a [SpanRecord],
    name: &'a str,
    id: &'a SessionId,
) -> impl Iterator<Item = &'a SpanRecord> + 'a {
    spans
        .iter()
        .filter(move |s| s.name == name && s.field("gen_ai.conversation.id") == Some(id.as_str()))
}

fn store_spans<'a>(
    spans: &'a [SpanRecord],
    operation: &'a str,
    id: &'a SessionId,
) -> Vec<&'a SpanRecord> {
    spans_of(spans, "agent_session.store", id)
        .filter(|s| s.field("agent_session.operation") == Some(operation))
        .collect()
}

fn assert_ok(span: &SpanRecord) {
    assert_eq!(span.field("agent_session.outcome"), Some("ok"), "{span:?}");
    assert_eq!(span.field("otel.status_code"), Some("OK"), "{span:?}");
    assert_eq!(span.field("error.type"), None, "{span:?}");
}

// ---------------------------------------------------------------------------------------

/// What the test did, to find in the spans.
struct Driven {
    id: SessionId,
    missing: SessionId,
    saved: Revision,
    saved_async: Revision,
    rewound: Revision,
    restored: Revision,
    restored_in_store: Revision,
}

/// A turn with a tool call (checkpointed at every step, through the blocking pool), harness
/// saves (sync and async), a rewind, a resume, a listing, restores, and a failing load.
async fn drive() -> Driven {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(dir.path()).expect("open store");
    let harness = Harness::builder(store, || ToolThenAnswer)
        .autosave(Autosave::EveryStep)
        .build();

    let mut session = harness.new_session(marked_options()).expect("new session");
    let id = session.id().clone();
    let outcome = harness
        .send(&mut session, format!("{MARKER}-user-message"))
        .await
        .expect("send");
    assert_eq!(outcome.stop, StopReason::Finished);
    let saved = harness.save_session(&mut session).expect("save");
    session.metadata_mut().insert(
        format!("{MARKER}-key-2"),
        json!(format!("{MARKER}-value-2")),
    );
    let saved_async = harness
        .save_session_async(&mut session)
        .await
        .expect("save async");
    let rewound = harness
        .rewind_session(&mut session, RewindTo::LastTurns(1))
        .expect("rewind");
    let resumed = harness.resume_session(&id, None).expect("resume");
    assert_eq!(resumed.revision(), rewound);
    let listed = harness.list_sessions().expect("list");
    assert_eq!(listed.sessions.len(), 1);
    let restored = harness
        .restore_session(&mut session, saved_async)
        .expect("restore");
    let restored_in_store = harness.store().restore(&id, saved).expect("store restore");
    let missing = SessionId::parse("no-such-session").expect("id");
    assert!(harness.store().load(&missing).is_err());
    Driven {
        id,
        missing,
        saved,
        saved_async,
        rewound,
        restored,
        restored_in_store,
    }
}

/// The turn's span, and its checkpoints: file store saves, children of the turn although
/// they ran on the blocking pool, each with its revision and the bytes it wrote.
fn check_turn(spans: &[SpanRecord], id: &SessionId) {
    let turns: Vec<_> = spans_of(spans, "agent_session.turn", id).collect();
    assert_eq!(turns.len(), 1, "{turns:?}");
    let turn = turns[0];
    assert_eq!(turn.field("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(turn.field("gen_ai.request.model"), Some(MODEL));
    assert_eq!(turn.number("agent_session.completions"), Some(2));
    assert_eq!(turn.number("agent_session.tool_calls"), Some(1));
    assert_eq!(turn.field("agent_session.stop_reason"), Some("finished"));
    assert_ok(turn);

    let in_turn: Vec<_> = store_spans(spans, "save", id)
        .into_iter()
        .filter(|s| s.parent == Some(turn.id))
        .collect();
    assert!(
        in_turn.len() >= 2,
        "checkpoint saves in the turn: {in_turn:?}"
    );
    for save in &in_turn {
        assert_eq!(save.field("agent_session.store"), Some("file"));
        assert_ok(save);
        assert!(save.number("agent_session.revision").is_some(), "{save:?}");
        assert!(
            save.number("agent_session.bytes_written")
                .is_some_and(|n| n > 0),
            "{save:?}"
        );
    }
}

/// The harness saves, each holding its store save, and the bytes of those that changed
/// something.
fn check_saves(spans: &[SpanRecord], driven: &Driven) {
    let store_saves = store_spans(spans, "save", &driven.id);
    for save in &store_saves {
        assert_ok(save);
    }
    let harness_saves: Vec<_> = spans_of(spans, "agent_session.harness", &driven.id).collect();
    let revisions: Vec<u64> = harness_saves
        .iter()
        .filter_map(|s| s.number("agent_session.revision"))
        .collect();
    for revision in [
        driven.saved,
        driven.saved_async,
        driven.rewound,
        driven.restored,
    ] {
        assert!(
            revisions.contains(&revision.as_u64()),
            "{revision}: {harness_saves:?}"
        );
    }
    for harness_save in &harness_saves {
        assert_eq!(
            harness_save.field("agent_session.operation"),
            Some("save_session")
        );
        assert_ok(harness_save);
        let inner: Vec<_> = store_saves
            .iter()
            .filter(|s| s.parent == Some(harness_save.id))
            .collect();
        assert_eq!(inner.len(), 1, "{harness_save:?}: {store_saves:?}");
        assert_eq!(
            inner[0].field("agent_session.revision"),
            harness_save.field("agent_session.revision")
        );
    }
    // A save that changed something wrote bytes (the metadata change, the rewind).
    for revision in [driven.saved_async, driven.rewound] {
        let save = store_saves
            .iter()
            .find(|s| s.number("agent_session.revision") == Some(revision.as_u64()))
            .unwrap_or_else(|| panic!("no save span at {revision}: {store_saves:?}"));
        assert!(
            save.number("agent_session.bytes_written")
                .is_some_and(|n| n > 0),
            "{save:?}"
        );
    }
}

/// The load of the resume, the listing, the load of the old revision by the harness's
/// restore, and the store's own restore.
fn check_reads_and_restores(spans: &[SpanRecord], driven: &Driven) {
    let loads = store_spans(spans, "load", &driven.id);
    let load = loads
        .iter()
        .find(|s| s.number("agent_session.revision") == Some(driven.rewound.as_u64()))
        .unwrap_or_else(|| panic!("no load at {}: {loads:?}", driven.rewound));
    assert_ok(load);
    assert!(
        load.number("agent_session.bytes_read")
            .is_some_and(|n| n > 0),
        "{load:?}"
    );

    assert!(
        spans.iter().any(|s| s.name == "agent_session.store"
            && s.field("agent_session.operation") == Some("list")
            && s.field("gen_ai.conversation.id").is_none()
            && s.number("agent_session.sessions") == Some(1)
            && s.field("agent_session.outcome") == Some("ok")),
        "no list span"
    );

    let loads_at = store_spans(spans, "load_at", &driven.id);
    assert!(
        loads_at
            .iter()
            .any(|s| s.number("agent_session.revision") == Some(driven.saved_async.as_u64())),
        "{loads_at:?}"
    );
    let store_restores = store_spans(spans, "restore", &driven.id);
    assert_eq!(store_restores.len(), 1, "{store_restores:?}");
    let restore = store_restores[0];
    assert_eq!(
        restore.number("agent_session.revision"),
        Some(driven.restored_in_store.as_u64())
    );
    assert!(restore
        .number("agent_session.bytes_written")
        .is_some_and(|n| n > 0));
    assert_ok(restore);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_turn_and_harness_spans_carry_ids_sizes_and_outcomes_but_no_content() {
    let recorder = global();
    let driven = drive().await;
    let spans = recorder.spans();

    check_turn(&spans, &driven.id);
    check_saves(&spans, &driven);
    check_reads_and_restores(&spans, &driven);

    // The failure: its kind, never its message.
    let failed = store_spans(&spans, "load", &driven.missing);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].field("agent_session.outcome"), Some("not_found"));
    assert_eq!(failed[0].field("error.type"), Some("not_found"));
    assert_eq!(failed[0].field("otel.status_code"), Some("ERROR"));

    // No content anywhere: not in a span of this session, not in any span or event.
    let leaks = recorder.lock().leaks(MARKER);
    assert!(
        leaks.is_empty(),
        "content leaked into spans or events: {leaks:#?}"
    );
}

/// The memory store's spans: the store's name, the bytes of the stored form, and the
/// outcome of each call, on the caller's thread.
#[test]
fn memory_store_spans_name_the_store_and_count_what_it_keeps() {
    let recorder = Recorder::default();
    let id = SessionId::parse("memory-session").expect("id");
    tracing::subscriber::with_default(recorder.clone(), || {
        let store = MemorySessionStore::new();
        let snapshot = SessionSnapshot::builder(id.clone(), MODEL)
            .system_prompt(format!("{MARKER}-system-prompt"))
            .metadata_entry(format!("{MARKER}-key"), json!(format!("{MARKER}-value")))
            .transcript(vec![Message::user(format!("{MARKER}-user-message"))])
            .build()
            .expect("snapshot");
        let revision = store.save(&snapshot).expect("save");
        assert_eq!(store.load(&id).expect("load").revision(), revision);
        store.delete(&id).expect("delete");
        assert!(store.delete(&id).is_err());
    });
    let spans = recorder.spans();
    let save = store_spans(&spans, "save", &id);
    assert_eq!(save.len(), 1, "{spans:?}");
    assert_eq!(save[0].field("agent_session.store"), Some("memory"));
    assert_eq!(save[0].number("agent_session.revision"), Some(1));
    assert!(save[0]
        .number("agent_session.bytes_written")
        .is_some_and(|n| n > 0));
    assert_ok(save[0]);
    let load = store_spans(&spans, "load", &id);
    assert_eq!(load.len(), 1, "{spans:?}");
    assert_eq!(load[0].number("agent_session.revision"), Some(1));
    assert_eq!(load[0].field("agent_session.bytes_read"), None);
    assert_ok(load[0]);
    let deletes = store_spans(&spans, "delete", &id);
    assert_eq!(deletes.len(), 2, "{spans:?}");
    assert_ok(deletes[0]);
    assert_eq!(deletes[1].field("error.type"), Some("not_found"));
    let leaks = recorder.lock().leaks(MARKER);
    assert!(leaks.is_empty(), "{leaks:#?}");
}

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod pg;

/// The PostgreSQL store's spans, through its synchronous and its async face (the async
/// one on the caller's current-thread runtime, a store made there by `connect_async`).
#[cfg(feature = "postgres")]
#[test]
fn postgres_store_spans_name_the_store_in_both_faces() {
    use agent_session::{AsyncSessionStore, PostgresSessionStore};

    let recorder = Recorder::default();
    let schemas = pg::Schemas::new();
    let schema = schemas.name();
    let id = SessionId::parse("postgres-session").expect("id");
    let missing = SessionId::parse("postgres-missing").expect("id");
    tracing::subscriber::with_default(recorder.clone(), || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let store = PostgresSessionStore::builder()
                .schema(schema.clone())
                .connect_async(&pg::url())
                .expect("connect");
            store.migrate_async().await.expect("migrate");
            let snapshot = SessionSnapshot::builder(id.clone(), MODEL)
                .system_prompt(format!("{MARKER}-system-prompt"))
                .metadata_entry(format!("{MARKER}-key"), json!(format!("{MARKER}-value")))
                .transcript(vec![Message::user(format!("{MARKER}-user-message"))])
                .build()
                .expect("snapshot");
            let revision = AsyncSessionStore::save(&store, &snapshot)
                .await
                .expect("save");
            let loaded = AsyncSessionStore::load(&store, &id).await.expect("load");
            assert_eq!(loaded.revision(), revision);
            assert!(AsyncSessionStore::load(&store, &missing).await.is_err());
        });
        // The synchronous face, from this plain thread, on a store with its own runtime.
        let store = PostgresSessionStore::builder()
            .schema(schema.clone())
            .connect(&pg::url())
            .expect("connect");
        assert_eq!(
            SessionStore::load(&store, &id).expect("load").revision(),
            Revision::from_u64(1)
        );
        SessionStore::delete(&store, &id).expect("delete");
    });
    let spans = recorder.spans();
    let save = store_spans(&spans, "save", &id);
    assert_eq!(save.len(), 1, "{spans:?}");
    assert_eq!(save[0].field("agent_session.store"), Some("postgres"));
    assert_eq!(save[0].number("agent_session.revision"), Some(1));
    // What was sent to the server: the snapshot and its summary, so more than the
    // marker-laden user message alone.
    assert!(
        save[0]
            .number("agent_session.bytes_written")
            .is_some_and(|n| n > 100),
        "{:?}",
        save[0]
    );
    assert_ok(save[0]);
    let loads = store_spans(&spans, "load", &id);
    assert_eq!(loads.len(), 2, "async and sync: {spans:?}");
    let mut read = Vec::new();
    for load in loads {
        assert_eq!(load.field("agent_session.store"), Some("postgres"));
        assert_eq!(load.number("agent_session.revision"), Some(1));
        read.push(load.number("agent_session.bytes_read"));
        assert_ok(load);
    }
    // Both faces count the same row: on the caller's runtime (async) and on the store's
    // own runtime, handed over to the calling thread (sync).
    assert!(read[0].is_some_and(|n| n > 100), "{read:?}");
    assert_eq!(read[0], read[1], "{read:?}");
    let missed = store_spans(&spans, "load", &missing);
    assert_eq!(missed.len(), 1, "{spans:?}");
    assert_eq!(missed[0].field("error.type"), Some("not_found"));
    assert_eq!(missed[0].field("otel.status_code"), Some("ERROR"));
    let deletes = store_spans(&spans, "delete", &id);
    assert_eq!(deletes.len(), 1, "{spans:?}");
    assert_ok(deletes[0]);
    let leaks = recorder.lock().leaks(MARKER);
    assert!(leaks.is_empty(), "{leaks:#?}");
}

/// The negative control: the recorder and the scan do catch a marker that reaches a span
/// field, a recorded value or an event.
#[test]
fn the_leak_scan_catches_a_planted_marker() {
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || {
        let span = tracing::info_span!("planted", later = tracing::field::Empty, clean = 1);
        assert!(recorder.lock().leaks(MARKER).is_empty());
        span.record("later", format!("x {MARKER}-recorded y").as_str());
        let _entered = span.enter();
        tracing::info!(detail = "clean", "message with {MARKER}-event inside");
        tracing::info_span!("planted-at-creation", value = ?format!("{MARKER}-debug"));
    });
    let leaks = recorder.lock().leaks(MARKER);
    assert_eq!(leaks.len(), 3, "{leaks:#?}");
    assert!(leaks.iter().any(|l| l.contains("later")), "{leaks:#?}");
    assert!(leaks.iter().any(|l| l.contains("message")), "{leaks:#?}");
    assert!(leaks.iter().any(|l| l.contains("value")), "{leaks:#?}");
    // The planted spans are children as recorded, so parents are tracked.
    let spans = recorder.spans();
    let planted = spans.iter().find(|s| s.name == "planted").map(|s| s.id);
    assert!(spans
        .iter()
        .any(|s| s.name == "planted-at-creation" && s.parent == planted));
}
