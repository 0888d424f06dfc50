//! Property tests: any valid session survives save and load unchanged, and random
//! sequences of save (new sessions and edits), load, turns, rewinds, compactions,
//! restores, forks, deletes (of parents too), prunes, listings and reopening behave like
//! an in-memory model, which predicts the head, every kept revision (`load_at`), the
//! revision list's kinds and view lengths, and the history stats exactly.
//!
//! The generated sessions cover ids, text with arbitrary Unicode (control characters,
//! astral planes, combining marks), tool calls with JSON or raw-text arguments paired with
//! results (some errors, some interrupted), provider blocks kept verbatim, `extra` maps,
//! metadata with any finite `f64` (subnormals and `-0.0` included), `u64::MAX` and
//! `i64::MIN`, nested values, usage with costs, and timestamps over chrono's whole range
//! (leap seconds included).
//!
//! Case counts: `PROPTEST_CASES=<n>` sets the count of every generated property (for quick
//! runs; the negative control keeps its own); otherwise the defaults apply, and
//! `AGENT_SESSION_LONG=1` raises them (the long run):
//!
//! | property | `cargo test` | long run |
//! |---|---:|---:|
//! | `to_json` → `from_json` | 10,000 | 100,000 |
//! | save → load, file store and memory store | 500 | 10,000 |
//! | operation sequences against the model (1–39 operations each) | 200 | 2,000 |
//!
//! "Unchanged" is checked exactly: equal snapshots *and* byte-identical encodings,
//! so a float that lost its sign or an ulp, or an integer that became a float, fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use agent_session::{
    Compaction, ContentBlock, Cost, EntryKind, Error, ErrorKind, FileSessionStore, ForkAt,
    HistoryStats, MemorySessionStore, Message, PrunePolicy, Revision, RewindTo, Role, SessionId,
    SessionSnapshot, SessionStore, SessionStoreExt, SessionSummary, TextBlock, ToolCall,
    ToolOutput, ToolResult, Usage,
};
use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};

/// Set to `1` for the long run.
const LONG_ENV: &str = "AGENT_SESSION_LONG";

fn long_run() -> bool {
    std::env::var(LONG_ENV).is_ok_and(|v| v == "1")
}

/// `PROPTEST_CASES` if set, else `long` in the long run and `default` otherwise.
fn cases(default: u32, long: u32) -> u32 {
    if let Some(n) = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    if long_run() {
        long
    } else {
        default
    }
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        // Shrinking a failure of these big values can take long; the failure itself is
        // printed first.
        max_shrink_iters: 2_000,
        failure_persistence: None,
        ..Config::default()
    })
}

// ---------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------

/// Text of arbitrary Unicode scalar values, short.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..12).prop_map(String::from_iter)
}

fn id() -> impl Strategy<Value = SessionId> {
    "[a-z0-9][a-z0-9_-]{0,127}"
        .prop_filter_map("a reserved device name", |s| SessionId::parse(&s).ok())
}

/// Any finite `f64`: normal, subnormal and zero, of either sign.
fn finite_f64() -> impl Strategy<Value = f64> {
    use prop::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
}

fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        finite_f64().prop_map(Value::from),
        prop::sample::select(vec![
            json!(u64::MAX),
            json!(i64::MIN),
            json!(-0.0),
            json!(0.0),
            json!(5e-324),
            json!(-5e-324),
            json!(f64::MIN_POSITIVE),
            json!(f64::MAX),
            json!(f64::MIN),
            json!(0.1),
            json!(0.300_000_000_000_000_04),
            json!(1.0),
            json!(1e21),
            json!(228.03),
        ]),
    ]
}

/// Any JSON value, nested at most three levels (deeper nesting has its own test below).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_map(max_len: usize) -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(text(), json_value(), 0..=max_len)
        .prop_map(|m| m.into_iter().collect())
}

/// Usually empty: most provider blocks carry no unknown fields.
fn extra() -> impl Strategy<Value = Map<String, Value>> {
    prop_oneof![3 => Just(Map::new()), 1 => json_map(2)]
}

fn text_block() -> impl Strategy<Value = ContentBlock> {
    (text(), extra()).prop_map(|(text, extra)| {
        let mut block = TextBlock::new(text);
        block.extra = extra;
        ContentBlock::Text(block)
    })
}

/// A text block or a provider block kept verbatim.
fn plain_block() -> impl Strategy<Value = ContentBlock> {
    prop_oneof![
        3 => text_block(),
        1 => json_value().prop_map(|value| ContentBlock::Other { value }),
    ]
}

fn message(role: Role, blocks: Vec<ContentBlock>, extra: Map<String, Value>) -> Message {
    let mut message = Message::new(role, blocks);
    message.extra = extra;
    message
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Error,
    Interrupted,
}

/// A tool call, its result, and where the result goes.
#[derive(Debug, Clone)]
struct CallSpec {
    id_text: String,
    name: String,
    /// JSON arguments (Anthropic style) or raw text, not necessarily valid JSON (OpenAI).
    arguments: Result<Value, String>,
    call_extra: Map<String, Value>,
    output: ToolOutput,
    outcome: Outcome,
    result_extra: Map<String, Value>,
    /// Results are sorted by this key, so they may come back in any order.
    result_order: u8,
}

fn call_spec() -> impl Strategy<Value = CallSpec> {
    let arguments = prop_oneof![
        json_value().prop_map(Ok),
        text().prop_map(Err),
        json_value().prop_map(|v| Err(v.to_string())),
    ];
    let output = prop_oneof![
        3 => text().prop_map(ToolOutput::Text),
        1 => prop::collection::vec(plain_block(), 0..3).prop_map(ToolOutput::Blocks),
    ];
    let outcome = prop_oneof![
        4 => Just(Outcome::Ok),
        1 => Just(Outcome::Error),
        1 => Just(Outcome::Interrupted),
    ];
    (
        text(),
        text(),
        arguments,
        extra(),
        output,
        outcome,
        extra(),
        any::<u8>(),
    )
        .prop_map(
            |(id_text, name, arguments, call_extra, output, outcome, result_extra, order)| {
                CallSpec {
                    id_text,
                    name,
                    arguments,
                    call_extra,
                    output,
                    outcome,
                    result_extra,
                    result_order: order,
                }
            },
        )
}

/// One exchange: an optional user (or system) message, then the assistant's reply with
/// its tool calls, then their results, either one `tool` message each (OpenAI style) or
/// all in one user message (Anthropic style).
#[derive(Debug, Clone)]
struct TurnSpec {
    prompt: Option<(Role, Vec<ContentBlock>, Map<String, Value>)>,
    reply: Vec<ContentBlock>,
    reply_extra: Map<String, Value>,
    calls: Vec<CallSpec>,
    results_in_one_message: bool,
}

fn turn_spec(max_calls: usize) -> impl Strategy<Value = TurnSpec> {
    let prompt = prop::option::weighted(
        0.8,
        (
            prop_oneof![4 => Just(Role::User), 1 => Just(Role::System)],
            prop::collection::vec(plain_block(), 0..3),
            extra(),
        ),
    );
    (
        prompt,
        prop::collection::vec(plain_block(), 0..3),
        extra(),
        prop::collection::vec(call_spec(), 0..=max_calls),
        any::<bool>(),
    )
        .prop_map(
            |(prompt, reply, reply_extra, calls, results_in_one_message)| TurnSpec {
                prompt,
                reply,
                reply_extra,
                calls,
                results_in_one_message,
            },
        )
}

/// A timestamp anywhere in chrono's range up to now (sometimes a leap second), usually in
/// recent years. Not later: the builder refuses times later than this machine's clock
/// allows (issue 12, item 3); that stored later times still decode is checked in
/// `snapshot_decoding`.
fn timestamp() -> impl Strategy<Value = DateTime<Utc>> {
    let min = DateTime::<Utc>::MIN_UTC.timestamp();
    let now = Utc::now().timestamp();
    prop_oneof![
        4 => (946_684_800i64..now, 0u32..1_000_000_000),
        1 => (min..now, 0u32..1_000_000_000),
        // A leap second: the second before a minute boundary, with nanos past 10^9.
        1 => (0i64..now - 60, 1_000_000_000u32..2_000_000_000)
            .prop_map(|(s, n)| (s - s.rem_euclid(60) + 59, n)),
    ]
    .prop_filter_map("outside chrono's range", |(secs, nanos)| {
        DateTime::from_timestamp(secs, nanos)
    })
}

fn usage() -> impl Strategy<Value = Vec<Usage>> {
    // At most five records of at most u64::MAX / 8 each: the totals cannot overflow.
    let count = 0..=u64::MAX / 8;
    let one = (
        text(),
        count.clone(),
        count.clone(),
        count.clone(),
        count.clone(),
        count,
    )
        .prop_map(|(model, input, output, read, write, cost)| {
            Usage::new(model)
                .with_tokens(input, output)
                .with_cache_tokens(read, write)
                .with_cost(Cost::from_nano_usd(cost))
        });
    let small = (0u64..100_000, 0u64..10_000, 0u64..1_000_000_000).prop_map(|(i, o, cost)| {
        Usage::new("m")
            .with_tokens(i, o)
            .with_cost(Cost::from_nano_usd(cost))
    });
    let maxed = Just(vec![Usage::new("max")
        .with_tokens(u64::MAX, u64::MAX)
        .with_cache_tokens(u64::MAX, u64::MAX)
        .with_cost(Cost::from_nano_usd(u64::MAX))]);
    prop_oneof![
        4 => prop::collection::vec(prop_oneof![one, small], 0..5),
        1 => maxed,
    ]
}

/// Everything in a snapshot but its id.
#[derive(Debug, Clone)]
struct SessionSpec {
    model: String,
    system_prompt: Option<String>,
    max_turns: u32,
    metadata: Map<String, Value>,
    turns: Vec<TurnSpec>,
    usage: Vec<Usage>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

fn session_spec(max_turns: usize, max_calls: usize) -> impl Strategy<Value = SessionSpec> {
    (
        text(),
        prop::option::of(text()),
        1u32..=u32::MAX,
        json_map(5),
        prop::collection::vec(turn_spec(max_calls), 0..=max_turns),
        usage(),
        timestamp(),
        timestamp(),
    )
        .prop_map(
            |(model, system_prompt, max_turns, metadata, turns, usage, a, b)| SessionSpec {
                model,
                system_prompt,
                max_turns,
                metadata,
                turns,
                usage,
                created_at: a.min(b),
                updated_at: a.max(b),
            },
        )
}

impl SessionSpec {
    /// The snapshot of session `id`; the spec is valid by construction, so this panics if
    /// the builder refuses it.
    fn build(&self, id: SessionId) -> SessionSnapshot {
        let mut transcript = Vec::new();
        let mut interrupted = Vec::new();
        let mut serial = 0usize;
        for turn in &self.turns {
            if let Some((role, blocks, extra)) = &turn.prompt {
                transcript.push(message(*role, blocks.clone(), extra.clone()));
            }
            let mut reply = turn.reply.clone();
            let mut results = Vec::new();
            for call in &turn.calls {
                serial += 1;
                // The text is arbitrary; the suffix after the last '#' makes it unique.
                let call_id = format!("{}#{serial}", call.id_text);
                let mut tool_call = match &call.arguments {
                    Ok(value) => ToolCall::new(&call_id, &call.name, value.clone()),
                    Err(raw) => ToolCall::with_raw_arguments(&call_id, &call.name, raw.clone()),
                };
                tool_call.extra.clone_from(&call.call_extra);
                reply.push(ContentBlock::tool_call(tool_call));
                let mut result = match call.outcome {
                    Outcome::Ok => ToolResult::new(&call_id, call.output.clone()),
                    Outcome::Error | Outcome::Interrupted => {
                        ToolResult::error(&call_id, call.output.clone())
                    }
                };
                result.extra.clone_from(&call.result_extra);
                if call.outcome == Outcome::Interrupted {
                    interrupted.push(call_id);
                }
                results.push((call.result_order, result));
            }
            transcript.push(message(Role::Assistant, reply, turn.reply_extra.clone()));
            results.sort_by_key(|(order, _)| *order);
            let results = results.into_iter().map(|(_, result)| result);
            if turn.results_in_one_message {
                let blocks: Vec<ContentBlock> = results.map(ContentBlock::tool_result).collect();
                if !blocks.is_empty() {
                    transcript.push(Message::new(Role::User, blocks));
                }
            } else {
                transcript.extend(results.map(Message::tool_result));
            }
        }
        let mut builder = SessionSnapshot::builder(id, self.model.clone())
            .max_turns(self.max_turns)
            .metadata(self.metadata.clone())
            .transcript(transcript)
            .usage(self.usage.clone())
            .timestamps(self.created_at, self.updated_at);
        if let Some(prompt) = &self.system_prompt {
            builder = builder.system_prompt(prompt.clone());
        }
        for call_id in interrupted {
            builder = builder.interrupted(call_id);
        }
        builder
            .build()
            .expect("a generated session is valid by construction")
    }
}

fn snapshot() -> impl Strategy<Value = SessionSnapshot> {
    (id(), session_spec(4, 3)).prop_map(|(id, spec)| spec.build(id))
}

// ---------------------------------------------------------------------------------------
// Save -> load
// ---------------------------------------------------------------------------------------

/// Fails unless `after` is `before` exactly: equal, and encoded to the same bytes.
fn assert_unchanged(before: &SessionSnapshot, after: &SessionSnapshot, what: &str) {
    assert_eq!(after, before, "{what}: the snapshot changed");
    let before_bytes = before.to_json().expect("encode the original");
    let after_bytes = after.to_json().expect("encode the loaded snapshot");
    assert!(
        after_bytes == before_bytes,
        "{what}: the encoding changed:\nbefore {}\nafter  {}",
        String::from_utf8_lossy(&before_bytes),
        String::from_utf8_lossy(&after_bytes)
    );
}

#[test]
fn any_valid_session_survives_to_json_and_from_json_unchanged() {
    runner(cases(10_000, 100_000))
        .run(&snapshot(), |snapshot| {
            let bytes = snapshot.to_json().expect("a valid snapshot encodes");
            let back = SessionSnapshot::from_json(&bytes).expect("and decodes");
            assert_unchanged(&snapshot, &back, "to_json -> from_json");
            // The metadata, compared as JSON text, is exact too (numbers included).
            assert_eq!(
                serde_json::to_string(back.metadata()).expect("metadata"),
                serde_json::to_string(snapshot.metadata()).expect("metadata")
            );
            Ok(())
        })
        .expect("every generated session round-trips");
}

fn save_and_load(store: &dyn SessionStore, snapshot: &SessionSnapshot, what: &str) {
    let revision = store.save(snapshot).expect("save a new session");
    assert_eq!(revision, Revision::from_u64(1), "{what}");
    let loaded = store.load(snapshot.id()).expect("load it back");
    assert_eq!(loaded.revision(), revision, "{what}");
    assert_unchanged(&snapshot.clone().with_revision(revision), &loaded, what);
    let listing = store.list().expect("list");
    assert!(
        listing.unreadable.is_empty(),
        "{what}: {:?}",
        listing.unreadable
    );
    assert_eq!(
        listing.sessions,
        vec![SessionSummary::of(&loaded)],
        "{what}"
    );
    store.delete(snapshot.id()).expect("delete");
}

/// Saves and loads `cases` generated sessions through a file store and a memory store.
fn stores_keep_sessions_unchanged(cases: u32) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file_store = FileSessionStore::open(dir.path().join("sessions")).expect("open");
    let memory_store = MemorySessionStore::new();
    runner(cases)
        .run(&snapshot(), |snapshot| {
            // A failing case may have left its file behind while shrinking.
            let _ = file_store.delete(snapshot.id());
            let _ = memory_store.delete(snapshot.id());
            save_and_load(&file_store, &snapshot, "file store");
            save_and_load(&memory_store, &snapshot, "memory store");
            Ok(())
        })
        .expect("every generated session survives save and load");
}

#[test]
fn any_valid_session_survives_save_and_load_unchanged() {
    // 10,000 file-store saves took 78 s in a debug build (each save is two fsyncs), longer
    // than `cargo test` should take; the long run does them all.
    stores_keep_sessions_unchanged(cases(500, 10_000));
}

/// Metadata nested `depth` levels deep: `{"k": {"k": ... null}}`.
fn nested(depth: usize) -> Value {
    (0..depth).fold(Value::Null, |inner, _| json!({ "k": inner }))
}

#[test]
fn nesting_up_to_the_limit_round_trips_and_deeper_is_refused_before_writing() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = FileSessionStore::open(dir.path()).expect("open");
    let id = SessionId::parse("deep").expect("id");
    let mut deepest_saved = 0;
    for depth in 100..140 {
        // The builder refuses what could not be read back (issue 12, item 8), so no
        // snapshot too deep ever reaches a store.
        let built = SessionSnapshot::builder(id.clone(), "m")
            .metadata_entry("deep", nested(depth))
            .build();
        match built {
            Ok(snapshot) => {
                let bytes = snapshot.to_json().expect("what builds encodes");
                let back = SessionSnapshot::from_json(&bytes).expect("what encodes decodes");
                assert_unchanged(&snapshot, &back, &format!("depth {depth}"));
                let revision = store.save(&snapshot).expect("save");
                assert_eq!(store.load(&id).expect("load").revision(), revision);
                store.delete(&id).expect("delete");
                deepest_saved = depth;
            }
            Err(e) => {
                assert!(matches!(e, Error::TooDeep { .. }), "depth {depth}: {e}");
                assert!(store.load(&id).expect_err("nothing written").is_not_found());
            }
        }
    }
    // The snapshot object, "metadata" and "deep" add two levels around the nested value.
    assert_eq!(
        deepest_saved, 125,
        "the deepest metadata value that can be saved"
    );
}

#[test]
fn negative_zero_and_extreme_numbers_keep_their_exact_form() {
    // Pins the serde_json behaviour the properties rely on: `-0.0` keeps its sign, and a
    // JSON `-0` (an integer literal) comes back as the float `-0.0`, not as the integer 0.
    let snapshot = SessionSnapshot::builder(SessionId::parse("numbers").expect("id"), "m")
        .metadata_entry("neg_zero", json!(-0.0))
        .metadata_entry("u64_max", json!(u64::MAX))
        .metadata_entry("i64_min", json!(i64::MIN))
        .metadata_entry("tiny", json!(5e-324))
        .build()
        .expect("build");
    let bytes = snapshot.to_json().expect("encode");
    let text = String::from_utf8(bytes.clone()).expect("UTF-8");
    assert!(text.contains(r#""neg_zero":-0.0"#), "{text}");
    assert!(text.contains(r#""u64_max":18446744073709551615"#), "{text}");
    assert!(text.contains(r#""i64_min":-9223372036854775808"#), "{text}");
    let back = SessionSnapshot::from_json(&bytes).expect("decode");
    let neg_zero = back.metadata()["neg_zero"].as_f64().expect("a float");
    assert!(neg_zero == 0.0 && neg_zero.is_sign_negative());
    assert_eq!(back.metadata()["u64_max"].as_u64(), Some(u64::MAX));
    assert_eq!(back.metadata()["i64_min"].as_i64(), Some(i64::MIN));
    assert_eq!(back.metadata()["tiny"].as_f64().map(f64::to_bits), Some(1));

    let integer_minus_zero = text.replace(r#""neg_zero":-0.0"#, r#""neg_zero":-0"#);
    let back = SessionSnapshot::from_json(integer_minus_zero.as_bytes()).expect("decode");
    let value = &back.metadata()["neg_zero"];
    assert!(value.is_f64() && value.as_f64().is_some_and(f64::is_sign_negative));
}

// ---------------------------------------------------------------------------------------
// Model-based: save, load, history operations, fork, delete, prune and list against an
// in-memory model
// ---------------------------------------------------------------------------------------

/// Which revision a save claims to be based on.
#[derive(Debug, Clone, Copy)]
enum Basis {
    /// The stored revision (or new, if nothing is stored): succeeds.
    Current,
    /// Never saved: succeeds only if nothing is stored.
    New,
    /// `k` revisions behind the stored one (a stale handle): conflicts if anything is stored.
    Behind(u64),
    /// `k` revisions ahead of the stored one: always conflicts.
    Ahead(u64),
}

#[derive(Debug, Clone)]
enum Op {
    /// Save a snapshot built anew in `slot` through file-store handle `handle` (0 or 1):
    /// a new session, an edit of the stored one, or a stale or future save.
    Save {
        slot: usize,
        handle: usize,
        basis: Basis,
        spec: Box<SessionSpec>,
    },
    /// Load the session, then every revision the model keeps of it, its revisions and
    /// its history stats.
    Load {
        slot: usize,
        handle: usize,
    },
    /// Load, append a turn (a prompt and a reply, with usage) and save.
    Turn {
        slot: usize,
        handle: usize,
        text: String,
    },
    /// Rewind the last `turns` turns ([`SessionStoreExt::rewind`]).
    Rewind {
        slot: usize,
        handle: usize,
        turns: usize,
    },
    /// Load, compact all but the last `keep` turns into a summary (with usage), save.
    Compact {
        slot: usize,
        handle: usize,
        keep: usize,
    },
    /// Restore the kept revision number `pick` (mod the revisions kept; may go past the
    /// head, which must be refused).
    Restore {
        slot: usize,
        handle: usize,
        pick: usize,
    },
    /// Drop the revisions before the kept revision number `pick` (mod the revisions kept
    /// plus one: one past the head, which must be refused).
    Trim {
        slot: usize,
        handle: usize,
        pick: usize,
    },
    /// Fork the session in `from` at its end into `to` (shared in the file store).
    Fork {
        from: usize,
        to: usize,
        handle: usize,
    },
    Delete {
        slot: usize,
        handle: usize,
    },
    /// Prune to the `keep` newest sessions.
    Prune {
        keep: usize,
        handle: usize,
    },
    List {
        handle: usize,
    },
    /// Drop both file-store handles and open the directory again.
    Reopen,
}

const SLOTS: usize = 3;

/// A small session whose timestamps come from a handful of values, so listings have ties.
fn small_spec() -> impl Strategy<Value = SessionSpec> {
    let base = 1_700_000_000i64;
    let at = (0i64..4)
        .prop_map(move |k| DateTime::from_timestamp(base + k, 0).expect("a valid timestamp"));
    (session_spec(2, 2), at.clone(), at).prop_map(|(mut spec, a, b)| {
        spec.created_at = a.min(b);
        spec.updated_at = a.max(b);
        spec
    })
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    let handle = 0..2usize;
    let basis = prop_oneof![
        4 => Just(Basis::Current),
        1 => Just(Basis::New),
        1 => (1u64..3).prop_map(Basis::Behind),
        1 => (1u64..3).prop_map(Basis::Ahead),
    ];
    prop_oneof![
        4 => (slot.clone(), handle.clone(), basis, small_spec()).prop_map(
            |(slot, handle, basis, spec)| Op::Save { slot, handle, basis, spec: Box::new(spec) }
        ),
        3 => (slot.clone(), handle.clone()).prop_map(|(slot, handle)| Op::Load { slot, handle }),
        4 => (slot.clone(), handle.clone(), text())
            .prop_map(|(slot, handle, text)| Op::Turn { slot, handle, text }),
        2 => (slot.clone(), handle.clone(), 0usize..4)
            .prop_map(|(slot, handle, turns)| Op::Rewind { slot, handle, turns }),
        2 => (slot.clone(), handle.clone(), 0usize..3)
            .prop_map(|(slot, handle, keep)| Op::Compact { slot, handle, keep }),
        2 => (slot.clone(), handle.clone(), any::<usize>())
            .prop_map(|(slot, handle, pick)| Op::Restore { slot, handle, pick }),
        1 => (slot.clone(), handle.clone(), any::<usize>())
            .prop_map(|(slot, handle, pick)| Op::Trim { slot, handle, pick }),
        2 => (slot.clone(), slot.clone(), handle.clone())
            .prop_map(|(from, to, handle)| Op::Fork { from, to, handle }),
        2 => (slot, handle.clone()).prop_map(|(slot, handle)| Op::Delete { slot, handle }),
        1 => (0usize..SLOTS, handle.clone()).prop_map(|(keep, handle)| Op::Prune { keep, handle }),
        1 => handle.prop_map(|handle| Op::List { handle }),
        1 => Just(Op::Reopen),
    ]
}

/// What the model keeps of one session: every revision its store keeps, oldest first
/// (the state saved at it, and the kind of the change), from the revision that created
/// it (or replaced one created at another time).
#[derive(Debug, Clone)]
struct Kept {
    states: Vec<(SessionSnapshot, EntryKind)>,
}

impl Kept {
    fn new(state: SessionSnapshot) -> Self {
        Kept {
            states: vec![(state, EntryKind::Checkpoint)],
        }
    }

    fn head(&self) -> &SessionSnapshot {
        &self.states.last().expect("at least the checkpoint").0
    }

    fn oldest(&self) -> Revision {
        self.states[0].0.revision()
    }

    fn push(&mut self, state: SessionSnapshot, kind: EntryKind) {
        assert_eq!(state.revision(), self.head().revision().next());
        self.states.push((state, kind));
    }

    /// The history stats a store reports: the oldest revision kept, and the rewinds,
    /// compactions and restores since.
    fn stats(&self) -> HistoryStats {
        let count = |kind| self.states.iter().filter(|(_, k)| *k == kind).count() as u64;
        let mut stats = HistoryStats::default();
        stats.oldest_revision = self.oldest();
        stats.rewinds = count(EntryKind::Rewind);
        stats.compactions = count(EntryKind::Compaction);
        stats.restores = count(EntryKind::Restore);
        stats
    }
}

/// The model: what each store must hold.
type Model = BTreeMap<SessionId, Kept>;

/// The store under test: a memory store, or a directory with two file-store handles.
enum Subject {
    Memory(MemorySessionStore),
    Files(Box<[FileSessionStore; 2]>),
    /// Any other store (the negative controls' broken ones).
    Other(Box<dyn SessionStore>),
}

impl Subject {
    fn files(dir: &Path) -> Self {
        let open = || FileSessionStore::open(dir).expect("open the store");
        Subject::Files(Box::new([open(), open()]))
    }

    fn handle(&self, handle: usize) -> &dyn SessionStore {
        match self {
            Subject::Memory(store) => store,
            Subject::Files(handles) => &handles[handle],
            Subject::Other(store) => store.as_ref(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Subject::Memory(_) => "memory store",
            Subject::Files(_) => "file store",
            Subject::Other(_) => "other store",
        }
    }
}

fn expected_listing(model: &Model) -> Vec<SessionSummary> {
    let mut summaries: Vec<SessionSummary> = model
        .values()
        .map(|kept| {
            let mut summary = SessionSummary::of(kept.head());
            summary.history = kept.stats();
            summary
        })
        .collect();
    summaries.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| b.id.cmp(&a.id))
    });
    summaries
}

fn expect_kind<T: std::fmt::Debug>(result: agent_session::Result<T>, kind: ErrorKind, what: &str) {
    match result {
        Ok(value) => panic!("{what}: expected a {kind:?} error, got Ok({value:?})"),
        Err(err) => assert_eq!(err.kind(), kind, "{what}: {err}"),
    }
}

/// `predicted` stamped at `actual`'s update time, which the store's operation took from
/// the clock (after checking it did not go back).
fn stamped_like(
    predicted: SessionSnapshot,
    actual: &SessionSnapshot,
    what: &str,
) -> SessionSnapshot {
    assert!(
        actual.updated_at() >= predicted.created_at(),
        "{what}: updated before its creation"
    );
    predicted
        .with_appended(Vec::new(), Vec::new(), actual.updated_at())
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Checks everything the subject says of `id`'s history against the model: every kept
/// revision loads as saved, the one after the head and the one before the oldest do not,
/// the revisions are listed with their kinds and view lengths, and the head counts them.
fn check_history(store: &dyn SessionStore, id: &SessionId, kept: &Kept, what: &str) {
    for (state, kind) in &kept.states {
        let at = store
            .load_at(id, state.revision())
            .unwrap_or_else(|e| panic!("{what}: revision {} ({kind}): {e}", state.revision()));
        assert_unchanged(
            state,
            &at,
            &format!("{what}: revision {} ({kind})", state.revision()),
        );
    }
    let after = kept.head().revision().next();
    expect_kind(store.load_at(id, after), ErrorKind::NotFound, what);
    if kept.oldest() > Revision::from_u64(1) {
        let before = Revision::from_u64(kept.oldest().as_u64() - 1);
        expect_kind(store.load_at(id, before), ErrorKind::NotFound, what);
    }
    let listed: Vec<(Revision, EntryKind, usize)> = store
        .revisions(id)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .iter()
        .map(|r| (r.revision, r.kind, r.messages))
        .collect();
    let expected: Vec<(Revision, EntryKind, usize)> = kept
        .states
        .iter()
        .map(|(s, k)| (s.revision(), *k, s.transcript().len()))
        .collect();
    assert_eq!(listed, expected, "{what}: revisions()");
    let head = store.load(id).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(head.history_stats(), kept.stats(), "{what}: history stats");
    let history = store.history(id).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        history.view().collect::<Vec<_>>(),
        head.transcript().iter().collect::<Vec<_>>(),
        "{what}: the history's view"
    );
    assert_eq!(history.oldest_revision, kept.oldest(), "{what}");
}

/// Where `n` turns back cuts `snapshot`'s view: at the `n`-th last prompt, if there are
/// `n` prompts and no tool call is cut from its result there.
fn turns_back(snapshot: &SessionSnapshot, n: usize) -> Option<usize> {
    if n == 0 {
        return Some(snapshot.transcript().len());
    }
    let prompts: Vec<usize> = snapshot
        .transcript()
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_prompt())
        .map(|(i, _)| i)
        .collect();
    let cut = *prompts.get(prompts.len().checked_sub(n)?)?;
    let splits = snapshot
        .tool_calls()
        .iter()
        .any(|r| r.call_at.message < cut && r.result_at.message >= cut);
    (!splits).then_some(cut)
}

/// How often each outcome happened, for the figures the model test prints and checks.
static OUTCOMES: std::sync::Mutex<BTreeMap<&'static str, u64>> =
    std::sync::Mutex::new(BTreeMap::new());

fn tally(outcome: &'static str) {
    *OUTCOMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(outcome)
        .or_insert(0) += 1;
}

/// Applies `op` to the subject and to the model, checking the subject's answer.
#[allow(clippy::too_many_lines)] // one arm per operation reads best as one match
fn step(subject: &mut Subject, dir: &Path, model: &mut Model, ids: &[SessionId], op: &Op) {
    let what = format!("{}: {op:?}", subject.name());
    match op {
        Op::Save {
            slot,
            handle,
            basis,
            spec,
        } => {
            let id = &ids[*slot];
            let stored = model.get(id).map(|kept| kept.head().revision());
            let current = stored.unwrap_or(Revision::NEW).as_u64();
            let claimed = Revision::from_u64(match basis {
                Basis::Current => current,
                Basis::New => 0,
                Basis::Behind(k) => current.saturating_sub(*k),
                Basis::Ahead(k) => current + k,
            });
            let snapshot = spec.build(id.clone()).with_revision(claimed);
            let succeeds = match stored {
                None => claimed == Revision::NEW,
                Some(found) => found == claimed,
            };
            let result = subject.handle(*handle).save(&snapshot);
            if succeeds {
                let revision = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(revision, claimed.next(), "{what}");
                let saved = snapshot.clone().with_revision(revision);
                // A save over the same session (same creation time) adds an edit to its
                // history; another session under the id starts one.
                match model.get_mut(id) {
                    Some(kept) if kept.head().created_at() == snapshot.created_at() => {
                        tally("edit");
                        kept.push(saved, EntryKind::Edit);
                    }
                    _ => {
                        model.insert(id.clone(), Kept::new(saved));
                    }
                }
            } else {
                match result {
                    Err(Error::Conflict {
                        id: conflicting,
                        expected,
                        found,
                    }) => {
                        assert_eq!(&conflicting, id, "{what}");
                        assert_eq!(expected, claimed, "{what}");
                        assert_eq!(found, stored, "{what}");
                    }
                    other => panic!("{what}: expected a conflict, got {other:?}"),
                }
            }
        }
        Op::Load { slot, handle } => {
            let id = &ids[*slot];
            let store = subject.handle(*handle);
            let result = store.load(id);
            if let Some(kept) = model.get(id) {
                let loaded = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(loaded.revision(), kept.head().revision(), "{what}");
                assert_unchanged(kept.head(), &loaded, &what);
                check_history(store, id, kept, &what);
                tally("load checking every revision");
            } else {
                expect_kind(result, ErrorKind::NotFound, &what);
                expect_kind(store.revisions(id), ErrorKind::NotFound, &what);
                expect_kind(
                    store.load_at(id, Revision::from_u64(1)),
                    ErrorKind::NotFound,
                    &what,
                );
            }
        }
        Op::Turn { slot, handle, text } => {
            let id = &ids[*slot];
            let store = subject.handle(*handle);
            let Some(kept) = model.get_mut(id) else {
                expect_kind(store.load(id), ErrorKind::NotFound, &what);
                return;
            };
            let loaded = store.load(id).unwrap_or_else(|e| panic!("{what}: {e}"));
            let at = Utc::now().max(loaded.updated_at());
            let messages = vec![
                Message::user(text.clone()),
                Message::assistant(vec![ContentBlock::text(format!("re: {text}"))]),
            ];
            let usage = vec![Usage::new("m").with_tokens(text.len() as u64, 1)];
            let predicted = kept
                .head()
                .clone()
                .with_appended(messages.clone(), usage.clone(), at);
            let next = loaded.with_appended(messages, usage, at);
            let (next, predicted) = match (next, predicted) {
                (Ok(next), Ok(predicted)) => (next, predicted),
                // Usage totals that would overflow (a session with the largest usage).
                (next, predicted) => {
                    expect_kind(next, ErrorKind::InvalidInput, &what);
                    expect_kind(predicted, ErrorKind::InvalidInput, &what);
                    return;
                }
            };
            let revision = store.save(&next).unwrap_or_else(|e| panic!("{what}: {e}"));
            let predicted = predicted.with_revision(revision);
            assert_eq!(revision, kept.head().revision().next(), "{what}");
            tally("turn");
            kept.push(predicted, EntryKind::Turn);
        }
        Op::Rewind {
            slot,
            handle,
            turns,
        } => {
            let id = &ids[*slot];
            let store = subject.handle(*handle);
            let result = store.rewind(id, RewindTo::LastTurns(*turns));
            let Some(kept) = model.get_mut(id) else {
                expect_kind(result, ErrorKind::NotFound, &what);
                return;
            };
            let head = kept.head().clone();
            match turns_back(&head, *turns) {
                None => {
                    tally("rewind refused");
                    expect_kind(result, ErrorKind::InvalidInput, &what);
                }
                Some(cut) if cut == head.transcript().len() => {
                    // Nothing to drop: nothing is written.
                    let same = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(same.revision(), head.revision(), "{what}");
                }
                Some(cut) => {
                    let rewound = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                    let mut predicted = head.clone();
                    predicted
                        .rewind(RewindTo::Message(cut))
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let predicted = stamped_like(predicted, &rewound, &what)
                        .with_revision(head.revision().next());
                    assert_unchanged(&predicted, &rewound, &what);
                    assert_eq!(rewound.usage(), head.usage(), "{what}: usage kept");
                    tally("rewind");
                    kept.push(predicted, EntryKind::Rewind);
                }
            }
        }
        Op::Compact { slot, handle, keep } => {
            let id = &ids[*slot];
            let store = subject.handle(*handle);
            let Some(kept) = model.get_mut(id) else {
                expect_kind(store.load(id), ErrorKind::NotFound, &what);
                return;
            };
            let head = kept.head().clone();
            let point = if *keep == 0 {
                Some(head.transcript().len())
            } else {
                turns_back(&head, *keep)
            };
            let compaction = Compaction::new(
                point.unwrap_or(usize::MAX),
                vec![Message::user(format!("summary of {point:?}"))],
            )
            .with_usage(Usage::new("m").with_tokens(11, 2));
            let mut loaded = store.load(id).unwrap_or_else(|e| panic!("{what}: {e}"));
            let result = loaded.compact(compaction.clone());
            let mut predicted = head.clone();
            let predicted_result = predicted.compact(compaction);
            // Refused where no point splits no call, or where usage totals would overflow.
            if point.is_none() || predicted_result.is_err() {
                tally("compaction refused");
                expect_kind(result, ErrorKind::InvalidInput, &what);
                expect_kind(predicted_result, ErrorKind::InvalidInput, &what);
                return;
            }
            result.unwrap_or_else(|e| panic!("{what}: {e}"));
            predicted_result.unwrap_or_else(|e| panic!("{what}: {e}"));
            let at = Utc::now().max(loaded.updated_at());
            let next = loaded
                .with_appended(Vec::new(), Vec::new(), at)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let revision = store.save(&next).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(revision, head.revision().next(), "{what}");
            let predicted = predicted
                .with_appended(Vec::new(), Vec::new(), at)
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .with_revision(revision);
            tally("compaction");
            kept.push(predicted, EntryKind::Compaction);
        }
        Op::Restore { slot, handle, pick } => {
            let id = &ids[*slot];
            let store = subject.handle(*handle);
            let Some(kept) = model.get_mut(id) else {
                expect_kind(
                    store.restore(id, Revision::from_u64(1)),
                    ErrorKind::NotFound,
                    &what,
                );
                return;
            };
            // One past the head (refused) in every fifth pick or so.
            let count = kept.states.len() + 1;
            let k = pick % count;
            if k == kept.states.len() {
                let beyond = kept.head().revision().next();
                let err = store.restore(id, beyond).expect_err(&what);
                assert!(
                    matches!(err, Error::RevisionNotFound { .. }),
                    "{what}: {err:?}"
                );
                tally("restore refused");
                return;
            }
            let past = kept.states[k].0.clone();
            let head = kept.head().clone();
            let revision = store
                .restore(id, past.revision())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(revision, head.revision().next(), "{what}");
            let loaded = store.load(id).unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut predicted = head.clone();
            predicted
                .restore_from(&past)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let predicted = stamped_like(predicted, &loaded, &what).with_revision(revision);
            assert_unchanged(&predicted, &loaded, &what);
            assert_eq!(loaded.usage(), head.usage(), "{what}: usage kept");
            tally(if past.revision() < head.revision() {
                "restore of an earlier revision"
            } else {
                "restore of the head"
            });
            kept.push(predicted, EntryKind::Restore);
        }
        Op::Trim { slot, handle, pick } => {
            let id = &ids[*slot];
            let store = subject.handle(*handle);
            let Some(kept) = model.get_mut(id) else {
                expect_kind(
                    store.trim_history(id, Revision::from_u64(1)),
                    ErrorKind::NotFound,
                    &what,
                );
                return;
            };
            let k = pick % (kept.states.len() + 1);
            if k == kept.states.len() {
                let beyond = kept.head().revision().next();
                let err = store.trim_history(id, beyond).expect_err(&what);
                assert!(
                    matches!(err, Error::RevisionNotFound { .. }),
                    "{what}: {err:?}"
                );
                tally("trim refused");
                return;
            }
            let oldest = kept.states[k].0.revision();
            let dropped = store
                .trim_history(id, oldest)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(dropped, k as u64, "{what}: revisions dropped");
            kept.states.drain(..k);
            kept.states[0].1 = EntryKind::Checkpoint;
            tally(if k > 0 { "trim" } else { "trim of nothing" });
        }
        Op::Fork { from, to, handle } => {
            let (parent, target) = (&ids[*from], &ids[*to]);
            let store = subject.handle(*handle);
            let result = store.fork(parent, ForkAt::End, target.clone());
            match (model.get(parent), model.contains_key(target)) {
                (None, _) => expect_kind(result, ErrorKind::NotFound, &what),
                (Some(_), _) if parent == target => {
                    expect_kind(result, ErrorKind::InvalidInput, &what);
                }
                (Some(_), true) => expect_kind(result, ErrorKind::Conflict, &what),
                (Some(kept), false) => {
                    let fork = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                    let head = kept.head();
                    assert_eq!(fork.revision(), Revision::from_u64(1), "{what}");
                    assert_unchanged(
                        &SessionSnapshot::from_json(&fork.to_json().expect("encode"))
                            .expect("decode"),
                        &fork,
                        &what,
                    );
                    assert_eq!(fork.transcript(), head.transcript(), "{what}");
                    assert!(
                        fork.usage().is_empty(),
                        "{what}: a fork's usage starts empty"
                    );
                    let lineage = fork.lineage().expect("a fork has a lineage");
                    assert_eq!(
                        (&lineage.parent, lineage.parent_revision, lineage.fork_point),
                        (parent, head.revision(), head.transcript().len()),
                        "{what}"
                    );
                    tally("fork");
                    model.insert(target.clone(), Kept::new(fork));
                }
            }
        }
        Op::Delete { slot, handle } => {
            let id = &ids[*slot];
            let result = subject.handle(*handle).delete(id);
            // A parent's forks stay in the model: they must stay loadable.
            if model.remove(id).is_some() {
                let is_parent = model.values().any(|kept| {
                    kept.states
                        .iter()
                        .any(|(s, _)| s.lineage().is_some_and(|l| &l.parent == id))
                });
                tally(if is_parent {
                    "delete of a parent"
                } else {
                    "delete"
                });
                result.unwrap_or_else(|e| panic!("{what}: {e}"));
            } else {
                expect_kind(result, ErrorKind::NotFound, &what);
            }
        }
        Op::Prune { keep, handle } => {
            let report = subject
                .handle(*handle)
                .prune(&PrunePolicy::new().max_count(*keep))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let listing = expected_listing(model);
            let mut expected: Vec<SessionId> =
                listing.iter().skip(*keep).map(|s| s.id.clone()).collect();
            let mut pruned: Vec<SessionId> =
                report.pruned.iter().map(|p| p.summary.id.clone()).collect();
            expected.sort();
            pruned.sort();
            assert_eq!(pruned, expected, "{what}: {report:?}");
            assert!(report.skipped.is_empty(), "{what}: {report:?}");
            for id in &expected {
                tally("pruned");
                model.remove(id);
            }
        }
        Op::List { handle } => {
            let listing = subject
                .handle(*handle)
                .list()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(
                listing.unreadable.is_empty(),
                "{what}: {:?}",
                listing.unreadable
            );
            assert_eq!(listing.sessions, expected_listing(model), "{what}");
        }
        Op::Reopen => {
            if let Subject::Files(_) = subject {
                *subject = Subject::files(dir);
            }
        }
    }
}

/// Runs `ops` against `subject`, checking every answer against the model.
fn check_against_model(mut subject: Subject, store_dir: &Path, ids: &[SessionId], ops: &[Op]) {
    let mut model = Model::new();
    for op in ops {
        step(&mut subject, store_dir, &mut model, ids, op);
    }
    // Whatever happened, the store ends holding exactly the model, every revision of it.
    let listing = subject.handle(0).list().expect("a final listing");
    assert_eq!(listing.sessions, expected_listing(&model), "final listing");
    for (id, kept) in &model {
        check_history(
            subject.handle(1),
            id,
            kept,
            &format!("{}: at the end", subject.name()),
        );
    }
}

fn id_slots() -> impl Strategy<Value = Vec<SessionId>> {
    prop::collection::btree_set(id(), SLOTS)
        .prop_map(|ids: BTreeSet<SessionId>| ids.into_iter().collect())
}

#[test]
fn random_operation_sequences_match_an_in_memory_model() {
    let ops = prop::collection::vec(op(), 1..40);
    runner(cases(200, 2_000))
        .run(&(id_slots(), ops), |(ids, ops)| {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let store_dir = dir.path().join("sessions");
            let memory = Subject::Memory(MemorySessionStore::new());
            check_against_model(memory, &store_dir, &ids, &ops);
            check_against_model(Subject::files(&store_dir), &store_dir, &ids, &ops);
            Ok(())
        })
        .expect("every operation sequence matches the model");
    let outcomes = OUTCOMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    eprintln!("model operations that changed or checked a store (memory and file): {outcomes:?}");
    for needed in [
        "turn",
        "edit",
        "rewind",
        "rewind refused",
        "compaction",
        "restore of an earlier revision",
        "restore refused",
        "fork",
        "pruned",
        "load checking every revision",
    ] {
        assert!(
            outcomes.get(needed).copied().unwrap_or(0) > 0,
            "no {needed} in the generated sequences: {outcomes:?}"
        );
    }
}

/// A fixed sequence that forks a session after rewinds, a compaction and a restore of an
/// earlier revision, deletes the parent (and prunes), and checks the fork and every kept
/// revision against the model: what the random sequences reach only now and then.
#[test]
fn a_fork_outlives_its_deleted_parent_and_its_history_in_a_fixed_sequence() {
    let turn = |text: &str| TurnSpec {
        prompt: Some((Role::User, vec![ContentBlock::text(text)], Map::new())),
        reply: vec![ContentBlock::text(format!("re: {text}"))],
        reply_extra: Map::new(),
        calls: Vec::new(),
        results_in_one_message: false,
    };
    let at = DateTime::from_timestamp(1_700_000_000, 0).expect("a valid timestamp");
    let spec = SessionSpec {
        model: "m".to_owned(),
        system_prompt: None,
        max_turns: 8,
        metadata: Map::new(),
        turns: vec![turn("one"), turn("two"), turn("three")],
        usage: vec![Usage::new("m").with_tokens(1, 1)],
        created_at: at,
        updated_at: at,
    };
    let ids: Vec<SessionId> = ["parent", "fork", "other"]
        .iter()
        .map(|s| SessionId::parse(s).expect("id"))
        .collect();
    let ops = vec![
        Op::Save {
            slot: 0,
            handle: 0,
            basis: Basis::Current,
            spec: Box::new(spec),
        },
        Op::Turn {
            slot: 0,
            handle: 1,
            text: "four".to_owned(),
        },
        Op::Rewind {
            slot: 0,
            handle: 0,
            turns: 2,
        },
        Op::Compact {
            slot: 0,
            handle: 1,
            keep: 1,
        },
        Op::Reopen,
        Op::Restore {
            slot: 0,
            handle: 0,
            pick: 1,
        },
        Op::Load { slot: 0, handle: 1 },
        Op::Fork {
            from: 0,
            to: 1,
            handle: 0,
        },
        Op::Turn {
            slot: 1,
            handle: 1,
            text: "fork".to_owned(),
        },
        Op::Rewind {
            slot: 0,
            handle: 1,
            turns: 1,
        },
        Op::Delete { slot: 0, handle: 0 },
        Op::Load { slot: 1, handle: 0 },
        Op::Reopen,
        Op::Load { slot: 1, handle: 1 },
        Op::Fork {
            from: 1,
            to: 2,
            handle: 0,
        },
        Op::Prune { keep: 1, handle: 1 },
        Op::List { handle: 0 },
    ];
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store_dir = dir.path().join("sessions");
    check_against_model(
        Subject::Memory(MemorySessionStore::new()),
        &store_dir,
        &ids,
        &ops,
    );
    check_against_model(Subject::files(&store_dir), &store_dir, &ids, &ops);
}

/// A broken store for the negative control: it keeps history as the memory store does,
/// but saves over whatever is stored, ignoring the revision the snapshot was based on (no
/// compare-and-swap), so stale saves are lost updates.
#[derive(Default)]
struct Overwriting(MemorySessionStore);

impl SessionStore for Overwriting {
    fn save(&self, snapshot: &SessionSnapshot) -> agent_session::Result<Revision> {
        match self.0.save(snapshot) {
            Err(Error::Conflict { found, .. }) => self.0.save(
                &snapshot
                    .clone()
                    .with_revision(found.unwrap_or(Revision::NEW)),
            ),
            other => other,
        }
    }
    fn load(&self, id: &SessionId) -> agent_session::Result<SessionSnapshot> {
        self.0.load(id)
    }
    fn list(&self) -> agent_session::Result<agent_session::SessionList> {
        self.0.list()
    }
    fn delete(&self, id: &SessionId) -> agent_session::Result<()> {
        self.0.delete(id)
    }
    fn delete_if_unchanged(&self, listed: &SessionSummary) -> agent_session::Result<()> {
        self.0.delete_if_unchanged(listed)
    }
    fn load_at(
        &self,
        id: &SessionId,
        revision: Revision,
    ) -> agent_session::Result<SessionSnapshot> {
        self.0.load_at(id, revision)
    }
    fn revisions(&self, id: &SessionId) -> agent_session::Result<Vec<agent_session::RevisionInfo>> {
        self.0.revisions(id)
    }
    fn history(&self, id: &SessionId) -> agent_session::Result<agent_session::History> {
        self.0.history(id)
    }
    fn restore(&self, id: &SessionId, revision: Revision) -> agent_session::Result<Revision> {
        self.0.restore(id, revision)
    }
    fn trim_history(&self, id: &SessionId, oldest: Revision) -> agent_session::Result<u64> {
        self.0.trim_history(id, oldest)
    }
}

/// Runs 200 random sequences against the store `make` returns, and returns the failure
/// the model check reported (panicking if it found none).
fn model_check_failure(make: impl Fn() -> Box<dyn SessionStore>, what: &str) -> String {
    let ops = prop::collection::vec(op(), 1..40);
    let mut runner = TestRunner::new(Config {
        cases: 200,
        max_shrink_iters: 50,
        failure_persistence: None,
        ..Config::default()
    });
    let outcome = runner.run(&(id_slots(), ops), |(ids, ops)| {
        let subject = Subject::Other(make());
        check_against_model(subject, Path::new("/nonexistent"), &ids, &ops);
        Ok(())
    });
    let Err(failure) = outcome else {
        panic!("200 random sequences against {what} found nothing")
    };
    failure.to_string()
}

#[test]
fn the_model_check_catches_a_store_without_compare_and_swap() {
    let failure = model_check_failure(
        || Box::new(Overwriting::default()),
        "a store without compare-and-swap",
    );
    // Caught as a save that should have conflicted, or (whichever sequence proptest
    // finds first) as a fork onto a taken id that should have (`expected a Conflict
    // error`): both are the missing compare-and-swap.
    assert!(
        failure.to_lowercase().contains("expected a conflict"),
        "{failure}"
    );
}

/// A wrapper of the memory store that gets its history wrong in one way.
struct BrokenHistory {
    inner: MemorySessionStore,
    fault: HistoryFault,
}

#[derive(Debug, Clone, Copy)]
enum HistoryFault {
    /// `load_at` of any revision but the head's is not found (a store that keeps only the
    /// head, but says its revisions are kept).
    DropsRevisions,
    /// `revisions` lists the two newest revisions in the wrong order.
    MisordersEntries,
    /// `load_at` gives the revision before the one asked for (entries applied one short).
    OneBehind,
}

impl SessionStore for BrokenHistory {
    fn save(&self, snapshot: &SessionSnapshot) -> agent_session::Result<Revision> {
        self.inner.save(snapshot)
    }
    fn load(&self, id: &SessionId) -> agent_session::Result<SessionSnapshot> {
        self.inner.load(id)
    }
    fn list(&self) -> agent_session::Result<agent_session::SessionList> {
        self.inner.list()
    }
    fn delete(&self, id: &SessionId) -> agent_session::Result<()> {
        self.inner.delete(id)
    }
    fn delete_if_unchanged(&self, listed: &SessionSummary) -> agent_session::Result<()> {
        self.inner.delete_if_unchanged(listed)
    }
    fn load_at(
        &self,
        id: &SessionId,
        revision: Revision,
    ) -> agent_session::Result<SessionSnapshot> {
        let head = self.inner.load(id)?;
        match self.fault {
            HistoryFault::DropsRevisions if revision != head.revision() => {
                Err(Error::RevisionNotFound {
                    id: id.clone(),
                    revision,
                    oldest: head.revision(),
                    newest: head.revision(),
                })
            }
            HistoryFault::OneBehind
                if revision > Revision::from_u64(1) && revision <= head.revision() =>
            {
                self.inner
                    .load_at(id, Revision::from_u64(revision.as_u64() - 1))
                    .or_else(|_| self.inner.load_at(id, revision))
            }
            _ => self.inner.load_at(id, revision),
        }
    }
    fn revisions(&self, id: &SessionId) -> agent_session::Result<Vec<agent_session::RevisionInfo>> {
        let mut revisions = self.inner.revisions(id)?;
        if let HistoryFault::MisordersEntries = self.fault {
            let n = revisions.len();
            if n > 2 {
                revisions.swap(n - 1, n - 2);
            }
        }
        Ok(revisions)
    }
    fn history(&self, id: &SessionId) -> agent_session::Result<agent_session::History> {
        self.inner.history(id)
    }
    fn restore(&self, id: &SessionId, revision: Revision) -> agent_session::Result<Revision> {
        self.inner.restore(id, revision)
    }
    fn trim_history(&self, id: &SessionId, oldest: Revision) -> agent_session::Result<u64> {
        self.inner.trim_history(id, oldest)
    }
}

/// The negative control of the history part of the model: a store that drops earlier
/// revisions, lists entries out of order, or loads each revision one short, is caught.
#[test]
fn the_model_check_catches_a_store_that_drops_or_misorders_history() {
    for fault in [
        HistoryFault::DropsRevisions,
        HistoryFault::MisordersEntries,
        HistoryFault::OneBehind,
    ] {
        let failure = model_check_failure(
            || {
                Box::new(BrokenHistory {
                    inner: MemorySessionStore::new(),
                    fault,
                })
            },
            &format!("a store with {fault:?}"),
        );
        let expected = match fault {
            HistoryFault::DropsRevisions => "revision",
            HistoryFault::MisordersEntries => "revisions()",
            HistoryFault::OneBehind => "the snapshot changed",
        };
        assert!(failure.contains(expected), "{fault:?}: {failure}");
    }
}
