//! Hostile and malformed snapshot bytes, decoded directly with `SessionSnapshot::from_json`
//! and read from a `FileSessionStore`: every one is a typed error, never a panic, and a
//! failed read changes no stored byte. Also the golden fixtures in `tests/fixtures/v<N>/`,
//! one directory per schema version, which every future release must keep reading.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use agent_session::{
    ContentBlock, Error, ErrorKind, FileSessionStore, ForkAt, ListScope, Location, Message,
    Revision, SessionId, SessionSnapshot, SessionStore, ToolCall, ToolCallStatus, ToolResult,
    Usage, OLDEST_SCHEMA_VERSION, SCHEMA_VERSION,
};
use serde_json::{json, Value};

#[path = "common/golden.rs"]
mod golden;

use support::{
    base_json, base_snapshot, base_value, decode, encode, expect_inconsistent, expect_malformed,
    inject_raw, replace_raw,
};

/// An edit of a snapshot's JSON value.
type Edit = fn(&mut Value);
/// An edit that puts a value somewhere.
type Put = fn(&mut Value, Value);
/// Picks a place in a snapshot's JSON value.
type Locate = fn(&mut Value) -> &mut Value;

// ---------------------------------------------------------------------------------------
// Decoding bytes.
// ---------------------------------------------------------------------------------------

#[test]
fn base_snapshot_decodes_as_a_positive_control() {
    let bytes = base_json();
    let snapshot = decode(&bytes, "the base snapshot").expect("base decodes");
    assert_eq!(snapshot, base_snapshot());
    // Whitespace anywhere outside strings is fine.
    let pretty = serde_json::to_vec_pretty(&base_value()).expect("pretty");
    assert_eq!(decode(&pretty, "pretty").expect("pretty decodes"), snapshot);
    let mut padded = b" \n\t\r".to_vec();
    padded.extend_from_slice(&bytes);
    padded.extend_from_slice(b" \n\t\r ");
    assert_eq!(decode(&padded, "padded").expect("padded decodes"), snapshot);
}

#[test]
fn truncated_snapshot_is_malformed_at_every_offset() {
    let compact = base_json();
    for len in 0..compact.len() {
        expect_malformed(
            &compact[..len],
            &format!("compact truncated to {len} bytes"),
        );
    }
    // Pretty-printed: every cut that removes more than trailing whitespace.
    let pretty = serde_json::to_vec_pretty(&base_value()).expect("pretty");
    let end = pretty.trim_ascii_end().len();
    for len in 0..end {
        expect_malformed(&pretty[..len], &format!("pretty truncated to {len} bytes"));
    }
}

#[test]
fn bit_flips_never_panic_and_every_error_is_typed() {
    let bytes = base_json();
    let mut refused = 0usize;
    let mut accepted = 0usize;
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut flipped = bytes.clone();
            flipped[i] ^= 1 << bit;
            let what = format!("bit {bit} of byte {i} flipped");
            match decode(&flipped, &what) {
                // A flip inside a string can leave a valid snapshot with other text; then it
                // must be a stable, re-encodable one.
                Ok(snapshot) => {
                    accepted += 1;
                    let again = encode(&snapshot);
                    let back = decode(&again, &what).expect("re-encoded snapshot decodes");
                    assert_eq!(back, snapshot, "{what}");
                }
                Err(err) => {
                    refused += 1;
                    assert!(
                        matches!(
                            err,
                            Error::Malformed { .. }
                                | Error::Inconsistent { .. }
                                | Error::UnsupportedSchemaVersion { .. }
                        ),
                        "{what}: {err:?}"
                    );
                    assert!(
                        matches!(err.kind(), ErrorKind::Corrupt | ErrorKind::InvalidInput),
                        "{what}: {err:?}"
                    );
                }
            }
        }
    }
    assert!(
        refused > accepted,
        "most flips must be refused ({refused} refused, {accepted} accepted)"
    );
}

#[test]
fn duplicate_keys_are_malformed_at_every_level() {
    for (what, bytes) in duplicate_key_cases() {
        let err = expect_malformed(&bytes, what);
        let cause = source_text(&err);
        assert!(cause.contains("duplicate"), "{what}: {cause}");
    }
    // The injection itself is sound: distinct keys in the same places are accepted.
    for (what, bytes) in [
        (
            "metadata",
            inject_raw(|v| &mut v["metadata"], r#""a":1,"b":2"#),
        ),
        (
            "nested metadata",
            inject_raw(|v| &mut v["metadata"]["nested"], r#""k2":2"#),
        ),
        (
            "message extra",
            inject_raw(|v| &mut v["transcript"][4]["extra"], r#""other":1"#),
        ),
        (
            "tool call input",
            inject_raw(
                |v| &mut v["transcript"][1]["content"][1]["input"],
                r#""more":1"#,
            ),
        ),
    ] {
        decode(&bytes, what).unwrap_or_else(|e| panic!("control {what}: {e:?}"));
    }
}

/// The base snapshot with one key repeated, at each level of the format.
fn duplicate_key_cases() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "top-level schema_version",
            inject_raw(|v| v, r#""schema_version":1"#),
        ),
        ("top-level id", inject_raw(|v| v, r#""id":"someone-else""#)),
        ("top-level metadata", inject_raw(|v| v, r#""metadata":{}"#)),
        (
            "top-level transcript",
            inject_raw(|v| v, r#""transcript":[]"#),
        ),
        (
            "metadata",
            inject_raw(|v| &mut v["metadata"], r#""dup":1,"dup":2"#),
        ),
        (
            "metadata, same value twice",
            inject_raw(|v| &mut v["metadata"], r#""dup":1,"dup":1"#),
        ),
        (
            "metadata key already present",
            inject_raw(|v| &mut v["metadata"], r#""project":"other""#),
        ),
        (
            "nested metadata object",
            inject_raw(|v| &mut v["metadata"]["nested"], r#""k":2"#),
        ),
        (
            "object inside a metadata array",
            inject_raw(
                |v| &mut v["metadata"],
                r#""list":[1,{"x":{"deep":true,"deep":false}}]"#,
            ),
        ),
        (
            "options",
            inject_raw(|v| &mut v["options"], r#""max_turns":3"#),
        ),
        (
            "message",
            inject_raw(|v| &mut v["transcript"][0], r#""role":"assistant""#),
        ),
        (
            "message extra",
            inject_raw(|v| &mut v["transcript"][4]["extra"], r#""name":"other""#),
        ),
        (
            "text block",
            inject_raw(|v| &mut v["transcript"][0]["content"][0], r#""text":"x""#),
        ),
        (
            "tool call block",
            inject_raw(|v| &mut v["transcript"][1]["content"][1], r#""name":"x""#),
        ),
        (
            "tool call input",
            inject_raw(
                |v| &mut v["transcript"][1]["content"][1]["input"],
                r#""expr":"3+3""#,
            ),
        ),
        (
            "provider block kept verbatim",
            inject_raw(
                |v| &mut v["transcript"][1]["content"][3]["value"],
                r#""type":"other""#,
            ),
        ),
        (
            "tool result block",
            inject_raw(
                |v| &mut v["transcript"][2]["content"][0],
                r#""is_error":true"#,
            ),
        ),
        (
            "tool-call record",
            inject_raw(|v| &mut v["tool_calls"][0], r#""status":"ok""#),
        ),
        (
            "block position",
            inject_raw(|v| &mut v["tool_calls"][0]["call_at"], r#""block":1"#),
        ),
        (
            "usage",
            inject_raw(|v| &mut v["usage"][0], r#""output_tokens":0"#),
        ),
    ]
}

#[test]
fn unknown_fields_are_malformed_at_every_level() {
    // The decoder names the field, except inside an untagged enum (a tool output), where it
    // can only say that no variant matched.
    let levels: Vec<(&str, Locate)> = vec![
        ("top level", |v| v),
        ("options", |v| &mut v["options"]),
        ("message", |v| &mut v["transcript"][0]),
        ("message wire", |v| &mut v["transcript"][4]["wire"]),
        ("text block", |v| &mut v["transcript"][0]["content"][0]),
        ("tool call block", |v| &mut v["transcript"][1]["content"][1]),
        ("tool result block", |v| {
            &mut v["transcript"][2]["content"][0]
        }),
        ("text block inside a tool output", |v| {
            &mut v["transcript"][3]["content"][0]["output"][0]
        }),
        ("provider block", |v| &mut v["transcript"][1]["content"][3]),
        ("tool-call record", |v| &mut v["tool_calls"][0]),
        ("block position", |v| &mut v["tool_calls"][0]["call_at"]),
        ("usage", |v| &mut v["usage"][0]),
    ];
    // Every level is tried before failing, so one lenient level does not hide another.
    let mut accepted = Vec::new();
    for (what, locate) in levels {
        let mut value = base_value();
        let target = locate(&mut value);
        assert!(target.is_object(), "{what} is not an object in the base");
        target["unexpected_field"] = json!(1);
        match decode(&to_bytes(&value), what) {
            Ok(_) => accepted.push(what),
            Err(err) => {
                assert!(
                    matches!(err, Error::Malformed { .. }),
                    "{what}: expected Error::Malformed, got {err:?}"
                );
                let cause = source_text(&err);
                assert!(
                    cause.contains("unexpected_field")
                        || cause.contains("untagged enum ToolOutput"),
                    "{what}: {cause}"
                );
            }
        }
    }
    assert!(
        accepted.is_empty(),
        "an unknown field was accepted (and silently dropped) in: {accepted:?}"
    );

    // Wire hints where the base has none: a `wire` object with an unknown key.
    for (what, path) in [
        ("tool call wire", (1usize, 2usize)),
        ("tool result wire", (2, 0)),
    ] {
        let mut value = base_value();
        value["transcript"][path.0]["content"][path.1]["wire"] = json!({"unexpected_field": 1});
        expect_malformed(&to_bytes(&value), what);
    }

    // Unknown enum values.
    let unknown_values: [(&str, Edit); 3] = [
        ("block type", |v| {
            v["transcript"][0]["content"][0]["type"] = json!("video");
        }),
        ("role", |v| v["transcript"][0]["role"] = json!("wizard")),
        ("status", |v| {
            v["tool_calls"][0]["status"] = json!("pending");
        }),
    ];
    for (what, edit) in unknown_values {
        let mut value = base_value();
        edit(&mut value);
        expect_malformed(&to_bytes(&value), what);
    }

    // Free-form places take any key.
    let mut value = base_value();
    value["metadata"]["unexpected_field"] = json!(1);
    value["transcript"][0]["extra"] = json!({"unexpected_field": 1});
    value["transcript"][1]["content"][3]["value"]["unexpected_field"] = json!(1);
    decode(&to_bytes(&value), "free-form keys").expect("free-form keys are accepted");
}

#[test]
fn trailing_bytes_are_malformed() {
    let bytes = base_json();
    for tail in [
        &b"x"[..],
        b"{}",
        b"}",
        b",",
        b"\0",
        b" garbage",
        b"\n\n{\"schema_version\":1}",
        b"\xff",
    ] {
        let mut with_tail = bytes.clone();
        with_tail.extend_from_slice(tail);
        expect_malformed(&with_tail, &format!("trailing {tail:?}"));
    }
    // Two whole snapshots back to back.
    let mut twice = bytes.clone();
    twice.extend_from_slice(&bytes);
    expect_malformed(&twice, "two snapshots");
}

#[test]
fn nesting_past_the_depth_limit_is_malformed_without_overflowing_the_stack() {
    let deep = |n: usize, open: &str, close: &str| format!("{}{}", open.repeat(n), close.repeat(n));
    // At the top level the decoder may stop at the first wrong type before the limit.
    for (what, bytes) in [
        ("10,000 '['", "[".repeat(10_000).into_bytes()),
        ("10,000 balanced '[]'", deep(10_000, "[", "]").into_bytes()),
        ("10,000 '{\"a\":'", "{\"a\":".repeat(10_000).into_bytes()),
        (
            "10,000 '{\"metadata\":'",
            "{\"metadata\":".repeat(10_000).into_bytes(),
        ),
    ] {
        expect_malformed(&bytes, what);
    }
    let cases: Vec<(String, Vec<u8>)> = vec![
        (
            "metadata nested 10,000 deep".into(),
            inject_raw(
                |v| &mut v["metadata"],
                &format!("\"deep\":{}", deep(10_000, "[", "]")),
            ),
        ),
        (
            "metadata objects nested 10,000 deep".into(),
            inject_raw(
                |v| &mut v["metadata"],
                &format!(
                    "\"deep\":{}1{}",
                    "{\"a\":".repeat(10_000),
                    "}".repeat(10_000)
                ),
            ),
        ),
        (
            "tool input nested 200 deep".into(),
            inject_raw(
                |v| &mut v["transcript"][1]["content"][1]["input"],
                &format!("\"deep\":{}", deep(200, "[", "]")),
            ),
        ),
        (
            "provider block nested 200 deep".into(),
            inject_raw(
                |v| &mut v["transcript"][1]["content"][3]["value"],
                &format!("\"deep\":{}", deep(200, "[", "]")),
            ),
        ),
    ];
    for (what, bytes) in cases {
        let err = expect_malformed(&bytes, &what);
        let cause = source_text(&err);
        assert!(cause.contains("recursion limit"), "{what}: {cause}");
    }
    // Reasonable nesting is fine, also inside blocks that are buffered while decoding.
    for (what, bytes) in [
        (
            "metadata nested 100 deep",
            inject_raw(
                |v| &mut v["metadata"],
                &format!("\"deep\":{}", deep(100, "[", "]")),
            ),
        ),
        (
            "provider block nested 100 deep",
            inject_raw(
                |v| &mut v["transcript"][1]["content"][3]["value"],
                &format!("\"deep\":{}", deep(100, "[", "]")),
            ),
        ),
    ] {
        decode(&bytes, what).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    }
}

/// An engine never asked for anything.
struct NoEngine;

impl agent_session::Engine for NoEngine {
    async fn complete(
        &mut self,
        _: agent_session::CompletionRequest<'_>,
    ) -> Result<agent_session::Completion, agent_session::BoxError> {
        Err("not used".into())
    }
}

/// A snapshot that nests deeper than the decoder's limit must never be written: the
/// session would be saved but could not be loaded again.
#[test]
fn snapshot_too_deep_to_read_back_is_refused_at_save_and_nothing_changes() {
    let nested = |n: usize| -> Value {
        let mut value = json!(1);
        for _ in 0..n {
            value = json!([value]);
        }
        value
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FileSessionStore::open(dir.path()).expect("open");
    let shallow = base_snapshot().with_revision(Revision::NEW);
    let revision = store.save(&shallow).expect("a shallow snapshot saves");
    let path = store.path_of(shallow.id());
    let before = fs::read(&path).expect("read");

    // The builder refuses it (issue 12, item 8); a session whose metadata was made too deep
    // through `metadata_mut` gives a snapshot that refuses to be encoded.
    let err = agent_session::SessionSnapshot::builder(shallow.id().clone(), "m")
        .metadata_entry("deep", nested(200))
        .build()
        .expect_err("too deep to read back");
    assert!(
        matches!(err, Error::TooDeep { depth, limit: 126, .. } if depth > 126),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let mut session =
        agent_session::Session::restore(store.load(shallow.id()).expect("load"), NoEngine, None)
            .expect("restore");
    session
        .metadata_mut()
        .insert("deep".to_owned(), nested(200));
    let deep = session.snapshot();
    let err = store.save(&deep).expect_err("too deep to read back");
    assert!(
        matches!(err, Error::TooDeep { depth, limit: 126, .. } if depth > 126),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(deep.to_json().is_err(), "to_json refuses it too");
    let memory = agent_session::MemorySessionStore::new();
    assert!(
        matches!(
            memory.save(&deep.clone().with_revision(Revision::NEW)),
            Err(Error::TooDeep { .. })
        ),
        "the memory store refuses what the file store refuses"
    );
    assert_eq!(
        fs::read(&path).expect("read"),
        before,
        "the stored file is untouched"
    );
    assert_eq!(store.load(shallow.id()).expect("load").revision(), revision);

    // Just inside the limit: saved and read back.
    let mut depth = 100;
    let fits = loop {
        let candidate = agent_session::SessionSnapshot::builder(shallow.id().clone(), "m")
            .metadata_entry("deep", nested(depth))
            .build();
        match candidate {
            Ok(built) => {
                built.to_json().expect("what builds encodes");
                depth += 1;
            }
            Err(_) => break depth - 1,
        }
    };
    let at_limit = agent_session::SessionSnapshot::builder(shallow.id().clone(), "m")
        .metadata_entry("deep", nested(fits))
        .build()
        .expect("build")
        .with_revision(revision);
    store
        .save(&at_limit)
        .expect("the deepest encodable snapshot saves");
    assert_eq!(
        store.load(shallow.id()).expect("and loads").metadata(),
        at_limit.metadata()
    );
}

#[test]
fn invalid_utf8_is_malformed() {
    let bytes = base_json();
    let text_at = find(&bytes, b"Please add");
    let key_at = find(&bytes, b"\"project\"") + 1;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("0xff in message text", splice(&bytes, text_at, 1, b"\xff")),
        ("0xff in a metadata key", splice(&bytes, key_at, 1, b"\xff")),
        (
            "overlong '/' in text",
            splice(&bytes, text_at, 1, b"\xc0\xaf"),
        ),
        (
            "UTF-8-encoded surrogate in text",
            splice(&bytes, text_at, 1, b"\xed\xa0\x80"),
        ),
        (
            "truncated sequence in text",
            splice(&bytes, text_at, 1, b"\xe2\x82"),
        ),
        (
            "lone continuation byte",
            splice(&bytes, text_at, 1, b"\x80"),
        ),
        ("0xff outside strings", splice(&bytes, 0, 0, b"\xff")),
        (
            "UTF-8 byte-order mark",
            splice(&bytes, 0, 0, b"\xef\xbb\xbf"),
        ),
        ("UTF-16 little endian", utf16le(&bytes)),
    ];
    for (what, bad) in cases {
        expect_malformed(&bad, what);
    }
    // Real multi-byte text is fine.
    let ok = splice(&bytes, text_at, 1, "🦀é\u{202e}".as_bytes());
    decode(&ok, "valid multi-byte text").expect("valid UTF-8 decodes");
}

#[test]
fn lone_surrogate_escapes_are_malformed() {
    for escape in [
        r"\ud800",
        r"\udfff",
        r"\udc00\ud800",
        r"\ud800\u0041",
        r"\ud800\ud800",
        r"\ud83e",
    ] {
        for (place, bytes) in [
            (
                "metadata value",
                inject_raw(|v| &mut v["metadata"], &format!("\"s\":\"{escape}\"")),
            ),
            (
                "metadata key",
                inject_raw(|v| &mut v["metadata"], &format!("\"{escape}\":1")),
            ),
            (
                "message text",
                replace_raw(
                    |v| &mut v["transcript"][0]["content"][0]["text"],
                    &format!("\"Please{escape}\""),
                ),
            ),
            (
                "tool name",
                replace_raw(
                    |v| &mut v["transcript"][1]["content"][1]["name"],
                    &format!("\"calc{escape}\""),
                ),
            ),
            (
                "session id",
                replace_raw(|v| &mut v["id"], &format!("\"victim{escape}\"")),
            ),
            (
                "provider block",
                inject_raw(
                    |v| &mut v["transcript"][1]["content"][3]["value"],
                    &format!("\"s\":\"{escape}\""),
                ),
            ),
        ] {
            let what = format!("{escape} in {place}");
            let err = expect_malformed(&bytes, &what);
            let cause = source_text(&err);
            assert!(
                cause.contains("surrogate") || cause.contains("hex escape"),
                "{what}: {cause}"
            );
        }
    }
    // A proper pair is a character like any other.
    let ok = inject_raw(|v| &mut v["metadata"], r#""crab":"\ud83e\udd80""#);
    let snapshot = decode(&ok, "surrogate pair").expect("pair decodes");
    assert_eq!(snapshot.metadata()["crab"], json!("🦀"));
}

#[test]
fn out_of_range_numbers_are_malformed() {
    let huge_digits = format!("1{}", "0".repeat(400));
    let cases: Vec<(String, Vec<u8>)> = vec![
        (
            "1e400 in metadata".into(),
            inject_raw(|v| &mut v["metadata"], r#""x":1e400"#),
        ),
        (
            "-1e400 in metadata".into(),
            inject_raw(|v| &mut v["metadata"], r#""x":-1e400"#),
        ),
        (
            "400-digit integer in metadata".into(),
            inject_raw(|v| &mut v["metadata"], &format!("\"x\":{huge_digits}")),
        ),
        (
            "1e400 in a tool input".into(),
            inject_raw(
                |v| &mut v["transcript"][1]["content"][1]["input"],
                r#""x":1e400"#,
            ),
        ),
        (
            "1e400 in a provider block".into(),
            inject_raw(
                |v| &mut v["transcript"][1]["content"][3]["value"],
                r#""x":1e400"#,
            ),
        ),
    ];
    for (what, bytes) in cases {
        let err = expect_malformed(&bytes, &what);
        assert!(
            source_text(&err).contains("out of range"),
            "{what}: {err:?}"
        );
    }
    // Typed counters refuse anything but an in-range unsigned integer.
    let fields: [(&str, Put); 6] = [
        ("revision", |v, n| v["revision"] = n),
        ("max_turns", |v, n| v["options"]["max_turns"] = n),
        ("input_tokens", |v, n| v["usage"][0]["input_tokens"] = n),
        ("cost_nano_usd", |v, n| v["usage"][0]["cost_nano_usd"] = n),
        ("block position", |v, n| {
            v["tool_calls"][0]["call_at"]["message"] = n;
        }),
        ("schema_version", |v, n| v["schema_version"] = n),
    ];
    for (field, edit) in fields {
        for raw in [
            "1e400",
            "-1",
            "1.5",
            "18446744073709551616",
            "\"1\"",
            "null",
        ] {
            let mut value = base_value();
            edit(&mut value, json!("__NUMBER__"));
            let text = to_string(&value).replace("\"__NUMBER__\"", raw);
            expect_malformed(text.as_bytes(), &format!("{field} = {raw}"));
        }
    }
    // max_turns is a u32.
    let mut value = base_value();
    value["options"]["max_turns"] = json!(u64::from(u32::MAX) + 1);
    expect_malformed(&to_bytes(&value), "max_turns over u32");
    // Integers past 64 bits in free-form JSON become floats (documented), they are not lost.
    let bytes = inject_raw(|v| &mut v["metadata"], r#""x":18446744073709551616"#);
    let snapshot = decode(&bytes, "u64::MAX + 1 in metadata").expect("decodes as a float");
    assert!(snapshot.metadata()["x"].is_f64());
}

#[test]
fn unknown_schema_versions_are_unsupported_and_name_the_version() {
    for version in [0u64, u64::from(SCHEMA_VERSION) + 1, 999, u64::MAX] {
        for with_new_fields in [false, true] {
            let mut value = base_value();
            value["schema_version"] = json!(version);
            if with_new_fields {
                // What a newer release might add.
                value["branch_of"] = json!("other-session");
                value["options"]["temperature"] = json!(0.2);
            }
            let what = format!("schema_version {version}, new fields: {with_new_fields}");
            let err = decode(&to_bytes(&value), &what).expect_err(&what);
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}");
            match &err {
                Error::UnsupportedSchemaVersion {
                    location,
                    found,
                    oldest,
                    supported,
                } => {
                    assert_eq!(*found, version, "{what}");
                    assert_eq!(*oldest, OLDEST_SCHEMA_VERSION);
                    assert_eq!(*supported, SCHEMA_VERSION);
                    assert_eq!(location, &Location::Bytes);
                }
                other => panic!("{what}: expected UnsupportedSchemaVersion, got {other:?}"),
            }
            let text = err.to_string();
            assert!(text.contains(&format!("version {version}")), "{text}");
            // It says which versions this release reads, and advice that fits: a newer
            // version needs a newer release; an older one than any release wrote (issue 12,
            // item 16: version 0 was told to upgrade) is damaged or foreign.
            assert!(
                text.contains(&format!(
                    "versions {OLDEST_SCHEMA_VERSION} to {SCHEMA_VERSION}"
                )),
                "{text}"
            );
            if version > u64::from(SCHEMA_VERSION) {
                assert!(text.contains("upgrade"), "{text}");
            } else {
                assert!(!text.contains("upgrade"), "{text}");
                assert!(
                    text.contains("no release of agent-session writes"),
                    "{text}"
                );
            }
        }
    }
    // A newer version with nothing else recognisable still says "newer version".
    let newer = u64::from(SCHEMA_VERSION) + 1;
    let bare = format!(r#"{{"schema_version":{newer}}}"#);
    let err = decode(bare.as_bytes(), "bare newer version").expect_err("bare newer version");
    assert!(
        matches!(err, Error::UnsupportedSchemaVersion { found, .. } if found == newer),
        "{err:?}"
    );
    // A missing or mistyped version is just malformed.
    let mut value = base_value();
    value
        .as_object_mut()
        .expect("object")
        .remove("schema_version");
    expect_malformed(&to_bytes(&value), "no schema_version");
    value["schema_version"] = json!("1");
    expect_malformed(&to_bytes(&value), "string schema_version");
    value["schema_version"] = json!(1.0);
    expect_malformed(&to_bytes(&value), "float schema_version");
}

#[test]
fn non_snapshot_json_is_malformed() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("whitespace only", b" \n\t ".to_vec()),
        ("null", b"null".to_vec()),
        ("true", b"true".to_vec()),
        ("number", b"1".to_vec()),
        ("string", b"\"snapshot\"".to_vec()),
        ("empty object", b"{}".to_vec()),
        ("empty array", b"[]".to_vec()),
        ("NUL bytes", vec![0; 64]),
        ("single quotes", b"{'schema_version':1}".to_vec()),
        ("comment", {
            let mut b = b"/* v1 */".to_vec();
            b.extend_from_slice(&base_json());
            b
        }),
        (
            "NaN in metadata",
            inject_raw(|v| &mut v["metadata"], r#""x":NaN"#),
        ),
        (
            "trailing comma in metadata",
            inject_raw(|v| &mut v["metadata"], r#""x":1,"#),
        ),
    ];
    for (what, bytes) in cases {
        expect_malformed(&bytes, what);
    }
    // Every required top-level field, missing.
    for field in [
        "schema_version",
        "id",
        "revision",
        "created_at",
        "updated_at",
        "options",
        "metadata",
        "transcript",
        "tool_calls",
        "usage",
    ] {
        let mut value = base_value();
        value.as_object_mut().expect("object").remove(field);
        expect_malformed(&to_bytes(&value), &format!("missing {field}"));
        let mut value = base_value();
        value[field] = Value::Null;
        expect_malformed(&to_bytes(&value), &format!("{field} = null"));
    }
    // Wrong types and values in typed fields.
    let edits: [(&str, Edit); 8] = [
        ("id is a number", |v| v["id"] = json!(5)),
        ("id is not a valid id", |v| v["id"] = json!("../x")),
        ("created_at is not a time", |v| {
            v["created_at"] = json!("yesterday");
        }),
        ("created_at month 13", |v| {
            v["created_at"] = json!("2025-13-01T00:00:00Z");
        }),
        ("metadata is an array", |v| v["metadata"] = json!([])),
        ("transcript is an object", |v| v["transcript"] = json!({})),
        ("tool call has both input and arguments", |v| {
            v["transcript"][1]["content"][1]["arguments"] = json!("{}");
        }),
        ("tool call has neither input nor arguments", |v| {
            v["transcript"][1]["content"][2]
                .as_object_mut()
                .expect("object")
                .remove("arguments");
        }),
    ];
    for (what, edit) in edits {
        let mut value = base_value();
        edit(&mut value);
        expect_malformed(&to_bytes(&value), what);
    }
}

/// serde's derived decoders also accept a struct written as a JSON array of its fields.
/// This crate never writes that form, and `from_json` promises to refuse what it did not
/// write (wrong types included), so the array form must be refused like any other shape.
#[test]
fn snapshot_written_as_a_json_array_is_refused() {
    let value = base_value();
    let fields = [
        "schema_version",
        "id",
        "revision",
        "created_at",
        "updated_at",
        "options",
        "metadata",
        "transcript",
        "tool_calls",
        "usage",
    ];
    let as_array = Value::Array(fields.iter().map(|f| value[*f].clone()).collect());
    let mut nested_as_array = base_value();
    nested_as_array["options"] = json!(["gpt-test", null, 8]);
    let mut position_as_array = base_value();
    position_as_array["tool_calls"][0]["call_at"] = json!([1, 1]);

    let accepted: Vec<&str> = [
        ("snapshot as an array", as_array),
        ("options as an array", nested_as_array),
        ("block position as an array", position_as_array),
    ]
    .into_iter()
    .filter_map(|(what, value)| match decode(&to_bytes(&value), what) {
        Ok(_) => Some(what),
        Err(err) => {
            assert!(matches!(err, Error::Malformed { .. }), "{what}: {err:?}");
            None
        }
    })
    .collect();
    assert!(
        accepted.is_empty(),
        "objects written as JSON arrays were accepted: {accepted:?}"
    );
}

/// Issue 12, item 14: some servers number calls per response, so an id repeats across
/// steps; the builder must let a caller mark one of them, and records pair by position.
#[test]
fn one_call_among_several_with_the_same_id_can_be_marked_interrupted() {
    let call = || {
        Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "call_0",
            "f",
            json!({}),
        ))])
    };
    let snapshot = SessionSnapshot::builder(SessionId::parse("reused").expect("id"), "m")
        .transcript(vec![
            call(),
            Message::tool_result(ToolResult::error("call_0", "failed")),
            call(),
            Message::tool_result(ToolResult::new("call_0", "fine")),
            call(),
            Message::tool_result(ToolResult::error("call_0", "cut short")),
        ])
        .interrupted_at(agent_session::BlockPosition {
            message: 4,
            block: 0,
        })
        .build()
        .expect("build");
    let statuses: Vec<_> = snapshot.tool_calls().iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            ToolCallStatus::Error,
            ToolCallStatus::Ok,
            ToolCallStatus::Interrupted
        ]
    );
    // Each record leads to its own result.
    let outputs: Vec<_> = snapshot
        .tool_calls()
        .iter()
        .map(|r| {
            snapshot
                .tool_result(r)
                .and_then(|result| result.output.as_text())
                .expect("a text result")
        })
        .collect();
    assert_eq!(outputs, ["failed", "fine", "cut short"]);
    let back = SessionSnapshot::from_json(&snapshot.to_json().expect("encode")).expect("decode");
    assert_eq!(back, snapshot);
    // Naming a call that is not there is refused (found in review: it was ignored).
    for builder in [
        SessionSnapshot::builder(SessionId::parse("reused").expect("id"), "m")
            .transcript(snapshot.transcript().to_vec())
            .interrupted_at(agent_session::BlockPosition {
                message: 1,
                block: 0,
            }),
        SessionSnapshot::builder(SessionId::parse("reused").expect("id"), "m")
            .transcript(snapshot.transcript().to_vec())
            .interrupted("call_9"),
    ] {
        let err = builder.build().expect_err("no such call");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
    // Marking one that succeeded is refused, as for `interrupted`.
    assert!(
        SessionSnapshot::builder(SessionId::parse("reused").expect("id"), "m")
            .transcript(snapshot.transcript().to_vec())
            .interrupted_at(agent_session::BlockPosition {
                message: 2,
                block: 0,
            })
            .build()
            .is_err()
    );
}

/// Issue 12, item 16: the builder refuses the roles a load refuses.
#[test]
fn the_builder_refuses_tool_blocks_in_roles_no_provider_accepts() {
    let call = ContentBlock::tool_call(ToolCall::new("c1", "f", json!({})));
    let result = ContentBlock::tool_result(ToolResult::new("c1", "x"));
    for transcript in [
        vec![
            Message::new(agent_session::Role::User, vec![call.clone()]),
            Message::tool_result(ToolResult::new("c1", "x")),
        ],
        vec![
            Message::assistant(vec![call.clone()]),
            Message::assistant(vec![result.clone()]),
        ],
        vec![
            Message::new(agent_session::Role::System, vec![call.clone()]),
            Message::new(agent_session::Role::User, vec![result.clone()]),
        ],
    ] {
        let err = SessionSnapshot::builder(SessionId::parse("roles").expect("id"), "m")
            .transcript(transcript)
            .build()
            .expect_err("refused");
        assert!(err.to_string().contains("messages may carry"), "{err}");
    }
}

#[test]
fn inconsistent_content_is_refused_saying_what() {
    for (what, edit, says) in inconsistent_cases() {
        let mut value = base_value();
        edit(&mut value);
        expect_inconsistent(&to_bytes(&value), what, says);
    }
}

/// Edits that leave well-formed JSON describing a self-contradictory session, each with
/// what the error must say.
#[allow(
    clippy::too_many_lines,
    reason = "one flat table of cases reads better than several"
)]
fn inconsistent_cases() -> Vec<(&'static str, Edit, &'static str)> {
    vec![
        (
            "tool call without a result",
            |v| remove(&mut v["transcript"], 2),
            "tool call \"c1\" (calc) at message 1 has no result",
        ),
        (
            "result without a call",
            |v| {
                let orphan = json!({"role": "tool", "content": [
                    {"type": "tool_result", "call_id": "zz", "output": "x", "is_error": false}
                ]});
                insert(&mut v["transcript"], 0, orphan);
            },
            "answers \"zz\", which no earlier tool call has",
        ),
        (
            "result before its call",
            |v| swap(&mut v["transcript"], 1, 2),
            "which no earlier tool call has",
        ),
        // Issue 12, item 16: roles no provider accepts tool blocks in.
        (
            "a tool call in a user message",
            |v| v["transcript"][1]["role"] = json!("user"),
            "message 1 has role User but block 1 is a tool call (\"c1\")",
        ),
        (
            "a tool call in a system message",
            |v| v["transcript"][1]["role"] = json!("system"),
            "which only assistant messages may carry",
        ),
        (
            "a tool result in an assistant message",
            |v| v["transcript"][2]["role"] = json!("assistant"),
            "message 2 has role Assistant but block 0 is a tool result (\"c1\"), which only tool or user messages may carry",
        ),
        (
            "second result for one call",
            |v| {
                let again = v["transcript"][2].clone();
                insert(&mut v["transcript"], 3, again);
            },
            "tool call \"c1\" has a second result at message 3",
        ),
        (
            "call id used twice",
            |v| v["transcript"][1]["content"][2]["id"] = json!("c1"),
            "tool call id \"c1\" is used again at message 1 while the earlier call with that id has no result",
        ),
        (
            "record names another tool",
            |v| v["tool_calls"][0]["tool_name"] = json!("rm"),
            "tool-call record for \"c1\" disagrees with the transcript",
        ),
        (
            "record names another call",
            |v| v["tool_calls"][0]["call_id"] = json!("c9"),
            "tool-call record for \"c9\" disagrees with the transcript",
        ),
        (
            "record points at another block",
            |v| v["tool_calls"][0]["call_at"]["block"] = json!(0),
            "disagrees with the transcript",
        ),
        (
            "record points at another result",
            |v| v["tool_calls"][0]["result_at"]["message"] = json!(3),
            "disagrees with the transcript",
        ),
        (
            "records out of order",
            |v| swap(&mut v["tool_calls"], 0, 1),
            "disagrees with the transcript",
        ),
        (
            "record missing",
            |v| remove(&mut v["tool_calls"], 1),
            "the transcript has 2 tool calls but there are 1 tool-call records",
        ),
        (
            "record extra",
            |v| {
                let again = v["tool_calls"][0].clone();
                insert(&mut v["tool_calls"], 2, again);
            },
            "the transcript has 2 tool calls but there are 3 tool-call records",
        ),
        (
            "record says error, result says ok",
            |v| v["tool_calls"][0]["status"] = json!("error"),
            "has status Error but its result has is_error = false",
        ),
        (
            "record says interrupted, result says ok",
            |v| v["tool_calls"][0]["status"] = json!("interrupted"),
            "has status Interrupted but its result has is_error = false",
        ),
        (
            "record says ok, result says error",
            |v| v["tool_calls"][1]["status"] = json!("ok"),
            "has status Ok but its result has is_error = true",
        ),
        (
            "result flag flipped",
            |v| v["transcript"][3]["content"][0]["is_error"] = json!(false),
            "has status Error but its result has is_error = false",
        ),
        (
            "max_turns zero",
            |v| v["options"]["max_turns"] = json!(0),
            "options.max_turns is 0",
        ),
        (
            "updated before created",
            |v| v["updated_at"] = json!("2000-01-01T00:00:00Z"),
            "is before created_at",
        ),
        (
            "usage totals overflow",
            |v| {
                v["usage"][0]["cost_nano_usd"] = json!(u64::MAX);
                v["usage"][1]["cost_nano_usd"] = json!(1);
            },
            "usage totals overflow",
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// The same inputs as files in a store.
// ---------------------------------------------------------------------------------------

/// Every hostile input above, as `victim.json` among healthy sessions: the load and the
/// listing fail only for the victim, with a corrupt-kind error naming its path; no byte of
/// any file changes (the victim's included); and a save over it is refused.
#[test]
fn hostile_files_in_a_store_fail_alone_and_change_no_bytes() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("s")).expect("open");
    for name in ["healthy-a", "healthy-b", "healthy-c"] {
        store
            .save(&support::healthy(name))
            .expect("save a healthy session");
    }
    let victim_id = base_snapshot().id().clone();
    let victim = store.path_of(&victim_id);
    let others_before = support::file_bytes(store.dir());

    let corpus = support::hostile_corpus();
    assert!(corpus.len() > 100, "corpus has {} cases", corpus.len());
    for (what, bytes) in &corpus {
        support::write_private(&victim, bytes);

        let err = store.load(&victim_id).expect_err(what);
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}: {err:?}");
        assert!(
            err.to_string().contains(&victim.display().to_string()),
            "{what}: the error does not name the file: {err}"
        );
        if let Error::Malformed { location, .. }
        | Error::Inconsistent { location, .. }
        | Error::UnsupportedSchemaVersion { location, .. } = &err
        {
            assert_eq!(location, &Location::File(victim.clone()), "{what}");
        }

        let listing = store.list().expect("list");
        let mut ids: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["healthy-a", "healthy-b", "healthy-c"], "{what}");
        assert_eq!(listing.unreadable.len(), 1, "{what}");
        assert!(listing.unreadable[0].is_corrupt(), "{what}");

        // Creating the session anew does not replace the file, whatever is wrong with it.
        let err = store
            .save(&base_snapshot().with_revision(Revision::NEW))
            .expect_err(what);
        assert!(
            err.is_corrupt() || err.is_conflict(),
            "{what}: save gave {err:?}"
        );

        assert_eq!(&fs::read(&victim).expect("read victim"), bytes, "{what}");
        let mut now = support::file_bytes(store.dir());
        now.remove("victim.json");
        assert_eq!(now, others_before, "{what}: other files changed");
        fs::remove_file(&victim).expect("remove victim");
    }
    for name in ["healthy-a", "healthy-b", "healthy-c"] {
        let id = agent_session::SessionId::parse(name).expect("id");
        assert_eq!(
            store.load(&id).expect("healthy still loads"),
            support::healthy(name).with_revision(Revision::from_u64(1))
        );
    }
}

#[test]
fn unsupported_version_in_a_store_names_the_version_and_the_path() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    let id = base_snapshot().id().clone();
    let path = store.path_of(&id);
    for version in [0u64, u64::from(SCHEMA_VERSION) + 1, 999] {
        let mut value = base_value();
        value["schema_version"] = json!(version);
        support::write_private(&path, &to_bytes(&value));
        let err = store.load(&id).expect_err("newer version");
        match &err {
            Error::UnsupportedSchemaVersion {
                location, found, ..
            } => {
                assert_eq!(location, &Location::File(path.clone()));
                assert_eq!(*found, version);
            }
            other => panic!("expected UnsupportedSchemaVersion, got {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains(&format!("version {version}")), "{text}");
        fs::remove_file(&path).expect("remove");
    }
}

#[test]
fn save_never_replaces_a_file_of_another_schema_version() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    let id = base_snapshot().id().clone();
    let path = store.path_of(&id);
    for version in [0u64, u64::from(SCHEMA_VERSION) + 1, 999] {
        let mut value = base_value();
        value["schema_version"] = json!(version);
        value["revision"] = json!(4);
        let bytes = to_bytes(&value);
        support::write_private(&path, &bytes);
        // Even at the revision the file claims, an older release must not clobber it.
        for revision in [Revision::NEW, Revision::from_u64(4)] {
            let err = store
                .save(&base_snapshot().with_revision(revision))
                .expect_err("save over another schema version");
            assert!(
                matches!(err, Error::UnsupportedSchemaVersion { found, .. } if found == version),
                "version {version}, revision {revision}: {err:?}"
            );
        }
        assert_eq!(fs::read(&path).expect("read"), bytes);
        fs::remove_file(&path).expect("remove");
    }
}

#[test]
fn inconsistent_file_in_a_store_is_corrupt_and_says_what() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    let id = base_snapshot().id().clone();
    let path = store.path_of(&id);
    let mut value = base_value();
    remove(&mut value["transcript"], 2);
    support::write_private(&path, &to_bytes(&value));
    let err = store.load(&id).expect_err("dangling call");
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    match &err {
        Error::Inconsistent { location, problem } => {
            assert_eq!(location, &Location::File(path.clone()));
            assert!(problem.contains("has no result"), "{problem}");
        }
        other => panic!("expected Error::Inconsistent, got {other:?}"),
    }
    assert!(err.to_string().contains(&path.display().to_string()));
}

// ---------------------------------------------------------------------------------------
// Golden fixtures: `tests/fixtures/v<N>/`, one directory per schema version, each written
// once by the release that wrote that version (see `tests/common/golden.rs`).
// ---------------------------------------------------------------------------------------

/// Writes any golden fixture of the current schema version that does not exist yet, into
/// `tests/fixtures/v<SCHEMA_VERSION>/`. It never rewrites a file, and never writes another
/// version's directory: those hold what older releases wrote. Run once when a case or a
/// schema version is added:
/// `cargo test --test snapshot_decoding write_missing_golden_fixtures -- --ignored`.
#[test]
#[ignore = "writes tests/fixtures/v<SCHEMA_VERSION>; run by hand when adding a golden case"]
fn write_missing_golden_fixtures() {
    let dir = golden::dir(SCHEMA_VERSION);
    fs::create_dir_all(&dir).expect("create fixtures dir");
    for (name, snapshot) in golden::cases(SCHEMA_VERSION) {
        let path = dir.join(format!("{name}.json"));
        if path.exists() {
            continue;
        }
        let compact = encode(&snapshot);
        let pretty = golden::pretty(&compact);
        let reparsed: Value = serde_json::from_str(&pretty).expect("pretty output is JSON");
        let original: Value = serde_json::from_slice(&compact).expect("compact is JSON");
        assert_eq!(
            reparsed, original,
            "{name}: pretty-printing changed the value"
        );
        // `create_new`: a file that appeared meanwhile is not overwritten either.
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("create fixture");
        file.write_all((pretty + "\n").as_bytes())
            .expect("write fixture");
    }
    for (name, snapshot) in golden::cases(SCHEMA_VERSION) {
        let bytes = fs::read(dir.join(format!("{name}.json"))).expect("fixture exists");
        assert_eq!(decode(&bytes, name).expect("decodes"), snapshot, "{name}");
    }
}

#[test]
fn fixture_directories_are_exactly_the_schema_versions_this_release_reads() {
    let versions = golden::versions_on_disk();
    if let Err(problem) = golden::check_versions(&versions) {
        panic!("{problem}");
    }
    assert_eq!(
        versions,
        (OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).collect::<Vec<u32>>()
    );
}

#[test]
fn a_fixture_directory_of_a_version_outside_the_supported_range_fails_the_check() {
    let supported: Vec<u32> = (OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).collect();
    assert_eq!(golden::check_versions(&supported), Ok(()));

    let newer = SCHEMA_VERSION + 1;
    let with_newer: Vec<u32> = supported.iter().copied().chain([newer]).collect();
    let problem = golden::check_versions(&with_newer).expect_err("a newer version's fixtures");
    assert!(
        problem.contains(&format!("tests/fixtures/v{newer}")),
        "{problem}"
    );

    let older = OLDEST_SCHEMA_VERSION - 1;
    let with_older: Vec<u32> = [older].into_iter().chain(supported.clone()).collect();
    let problem = golden::check_versions(&with_older).expect_err("a version no longer read");
    assert!(
        problem.contains(&format!("tests/fixtures/v{older}")),
        "{problem}"
    );

    for missing in &supported {
        let without: Vec<u32> = supported.iter().copied().filter(|v| v != missing).collect();
        let problem = golden::check_versions(&without).expect_err("a version without fixtures");
        assert!(
            problem.contains(&format!("tests/fixtures/v{missing}")),
            "{problem}"
        );
    }
}

#[test]
fn golden_fixture_set_of_every_version_is_complete() {
    for version in golden::versions_on_disk() {
        let mut on_disk: Vec<String> = fs::read_dir(golden::dir(version))
            .expect("the fixture directory exists")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        assert_eq!(
            on_disk,
            golden::file_names(version),
            "tests/fixtures/v{version}"
        );
    }
    // Every case of an older version is still a case of the current one, so every older
    // file has a current counterpart to be compared with.
    let current = golden::file_names(SCHEMA_VERSION);
    for version in OLDEST_SCHEMA_VERSION..SCHEMA_VERSION {
        for name in golden::file_names(version) {
            assert!(
                current.contains(&name),
                "v{version}/{name} has no current case"
            );
        }
    }
    // The current version's files use what versions 2 and 3 added: a fork's lineage,
    // messages kept as provider JSON text, and wire hints.
    assert!(golden::cases(SCHEMA_VERSION)
        .iter()
        .any(|(_, snapshot)| snapshot.lineage().is_some()));
    let exact =
        String::from_utf8(golden::read(SCHEMA_VERSION, "exact_provider_messages")).expect("UTF-8");
    for key in ["openai_chat", "anthropic", "openai_responses", "gemini"] {
        assert!(exact.contains(&format!("\"{key}\": ")), "{key}");
    }
    let hinted =
        String::from_utf8(golden::read(SCHEMA_VERSION, "provider_wire_hints")).expect("UTF-8");
    for hint in ["legacy_function", "snake_case", "id_synthetic", "custom"] {
        assert!(hinted.contains(&format!("\"{hint}\"")), "{hint}");
    }
}

#[test]
fn golden_provider_messages_of_version_3_come_back_byte_for_byte() {
    for version in golden::versions_on_disk().into_iter().filter(|v| *v >= 3) {
        let what = format!("v{version}/exact_provider_messages");
        let snapshot = decode(&golden::read(version, "exact_provider_messages"), &what)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let wire = golden::exact_wire();
        assert_eq!(snapshot.transcript().len(), wire.len(), "{what}");
        for (message, (codec, text)) in snapshot.transcript().iter().zip(&wire) {
            assert_eq!(&message.to_json(*codec).expect("export"), text, "{what}");
        }
        // Through a file store and a fresh process's store too.
        let tmp = tempfile::tempdir().expect("temp dir");
        FileSessionStore::open(tmp.path())
            .expect("open")
            .save(&snapshot.clone().with_revision(Revision::NEW))
            .expect("save");
        let loaded = FileSessionStore::open(tmp.path())
            .expect("open again")
            .load(snapshot.id())
            .expect("load");
        for (message, (codec, text)) in loaded.transcript().iter().zip(&wire) {
            assert_eq!(&message.to_json(*codec).expect("export"), text, "{what}");
        }

        let what = format!("v{version}/provider_wire_hints");
        let snapshot = decode(&golden::read(version, "provider_wire_hints"), &what)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let wire = golden::hinted_wire();
        assert_eq!(snapshot.transcript().len(), wire.len(), "{what}");
        for (message, (codec, value)) in snapshot.transcript().iter().zip(&wire) {
            assert_eq!(
                &golden::to_wire(*codec, message).expect("export"),
                value,
                "{what}"
            );
        }
    }
}

#[test]
fn golden_fixtures_of_every_version_decode_to_the_snapshots_they_were_built_from() {
    for version in golden::versions_on_disk() {
        for (name, expected) in golden::cases(version) {
            let what = format!("v{version}/{name}");
            let snapshot = decode(&golden::read(version, name), &what)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(snapshot, expected, "{what}");
            assert_eq!(snapshot.schema_version(), SCHEMA_VERSION, "{what}");
            // The same snapshot as the current version's file of that name.
            let current = decode(&golden::read(SCHEMA_VERSION, name), name).expect("decodes");
            assert_eq!(snapshot, current, "{what}");
        }
    }
}

#[test]
fn golden_fixtures_of_every_version_reencode_to_the_current_version_json() {
    for version in golden::versions_on_disk() {
        for (name, _) in golden::cases(version) {
            let what = format!("v{version}/{name}");
            let bytes = golden::read(version, name);
            assert!(
                bytes.contains(&b'\n') && bytes.windows(2).any(|w| w == b"  "),
                "{what}: fixtures are pretty-printed so the decoder's whitespace handling is exercised"
            );
            let snapshot = decode(&bytes, &what).unwrap_or_else(|e| panic!("{what}: {e}"));
            let reencoded_bytes = encode(&snapshot);
            let reencoded: Value = serde_json::from_slice(&reencoded_bytes).expect("JSON");
            let current_bytes = golden::read(SCHEMA_VERSION, name);
            let current: Value = serde_json::from_slice(&current_bytes).expect("JSON");
            assert_eq!(reencoded, current, "{what}: re-encoded");
            assert_eq!(reencoded["schema_version"], json!(SCHEMA_VERSION), "{what}");
            // The file differs from the current one exactly as the version history says.
            let on_disk: Value = serde_json::from_slice(&bytes).expect("fixture is JSON");
            assert_eq!(on_disk["schema_version"], json!(version), "{what}");
            assert_eq!(golden::upgraded_json(version, on_disk), current, "{what}");
            // The current version's file is byte for byte what this release writes,
            // pretty-printed: same keys, same order, same number spelling.
            assert_eq!(
                golden::pretty(&reencoded_bytes) + "\n",
                String::from_utf8(current_bytes).expect("UTF-8"),
                "{what}"
            );
            assert_eq!(
                decode(&reencoded_bytes, &what).expect("decodes"),
                snapshot,
                "{what}"
            );
        }
    }
}

#[test]
fn version_1_fixtures_differ_from_their_version_2_files_only_in_the_version_number() {
    for (name, _) in golden::cases(1) {
        let v1 = String::from_utf8(golden::read(1, name)).expect("UTF-8");
        let v2 = String::from_utf8(golden::read(2, name)).expect("UTF-8");
        assert_eq!(v1.matches("\"schema_version\": 1,").count(), 1, "{name}");
        assert_eq!(
            v1.replacen("\"schema_version\": 1,", "\"schema_version\": 2,", 1),
            v2,
            "{name}"
        );
        assert!(!v1.contains("\"lineage\""), "{name}");
    }
}

#[test]
fn golden_fixtures_of_every_version_load_from_a_file_store_and_can_be_continued() {
    for version in golden::versions_on_disk() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let store = FileSessionStore::open(tmp.path()).expect("open");
        let cases = golden::cases(version);
        for (name, expected) in &cases {
            let what = format!("v{version}/{name}");
            support::write_private(&store.path_of(expected.id()), &golden::read(version, name));
            assert_eq!(&store.load(expected.id()).expect(&what), expected, "{what}");
        }
        let listing = store.list().expect("list");
        assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
        assert_eq!(listing.sessions.len(), cases.len(), "v{version}");
        for summary in &listing.sessions {
            let (name, expected) = cases
                .iter()
                .find(|(_, s)| s.id() == &summary.id)
                .expect("a listed golden session");
            let what = format!("v{version}/{name}");
            assert_eq!(summary.revision, expected.revision(), "{what}");
            assert_eq!(summary.message_count, expected.transcript().len(), "{what}");
            assert_eq!(summary.lineage.as_ref(), expected.lineage(), "{what}");
            assert!(!summary.archived, "{what}");
        }

        // A store continues each golden session by appending to the file as it is: an
        // older version's base stays as that release wrote it.
        for (name, expected) in &cases {
            let what = format!("v{version}/{name}");
            let base_path = store.path_of(expected.id());
            let base_before = fs::read(&base_path).expect("read base");
            let next = store
                .load(expected.id())
                .expect(&what)
                .with_appended(
                    vec![
                        Message::user("One more thing."),
                        Message::assistant(vec![ContentBlock::text("Done.")]),
                    ],
                    vec![Usage::new("m").with_tokens(5, 1)],
                    expected.updated_at() + chrono::Duration::seconds(1),
                )
                .expect(&what);
            let revision = store.save(&next).expect(&what);
            assert_eq!(revision, expected.revision().next(), "{what}");
            assert_eq!(
                fs::read(&base_path).expect("read base"),
                base_before,
                "{what}: the save appended instead of rewriting the base"
            );
            let journal = fs::metadata(base_path.with_extension("journal")).expect(&what);
            assert!(journal.len() > 0, "{what}");
            let reopened = FileSessionStore::open(tmp.path()).expect("open again");
            assert_eq!(
                reopened.load(expected.id()).expect(&what),
                next.clone().with_revision(revision),
                "{what}"
            );
        }
    }
}

#[test]
fn an_archived_version_1_base_appended_to_stays_the_checkpoint_of_a_log_that_loads_equal() {
    let name = "usage_with_costs";
    let original = golden::read(1, name);
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    let id = golden::case(1, name).id().clone();
    let base_path = store.path_of(&id);
    let journal_path = base_path.with_extension("journal");
    support::write_private(&base_path, &original);
    // Archived first: the marker is a file of its own, which no save touches.
    store.set_archived(&id, true).expect("archive");
    let marker = tmp.path().join(format!("{id}.archived"));
    let marker_stamp = fs::metadata(&marker)
        .expect("the archive marker")
        .modified()
        .expect("mtime");

    // Turns of 20 kB: each is one entry of the journal; the version 1 base stays as it
    // is, the checkpoint the log starts from (it is read, never rewritten).
    let first = store.load(&id).expect("load the v1 base");
    let mut current = first.clone();
    for turn in 0..8_u32 {
        let next = current
            .clone()
            .with_appended(
                vec![
                    Message::user(format!("{turn}: {}", "x".repeat(20_000))),
                    Message::assistant(vec![ContentBlock::text("Noted.")]),
                ],
                vec![Usage::new("claude-haiku-4-5").with_tokens(5_000, 2)],
                golden::updated() + chrono::Duration::seconds(i64::from(turn) + 1),
            )
            .expect("append a turn");
        let revision = store.save(&next).expect("save a turn");
        current = store.load(&id).expect("load after a save");
        assert_eq!(current, next.with_revision(revision), "turn {turn}");
        assert_eq!(
            fs::read(&base_path).expect("read base"),
            original,
            "turn {turn}"
        );
        assert!(fs::metadata(&journal_path).expect("journal").len() > 20_000 * u64::from(turn));
    }
    let reopened = FileSessionStore::open(tmp.path()).expect("open again");
    assert_eq!(reopened.load(&id).expect("load"), current);
    assert_eq!(
        reopened.load_at(&id, first.revision()).expect("load_at"),
        first.clone().with_revision(first.revision()),
        "the version 1 base is the log's checkpoint"
    );
    let revisions = reopened.revisions(&id).expect("revisions");
    assert_eq!(revisions.len(), 9);
    assert_eq!(revisions[0].revision, first.revision());
    // The first messages are still the golden ones.
    let golden_messages = golden::case(1, name).transcript().to_vec();
    assert_eq!(
        &current.transcript()[..golden_messages.len()],
        &golden_messages[..]
    );

    // Still archived, by the same empty private marker; a delete removes it.
    let meta = fs::metadata(&marker).expect("the archive marker survives the saves");
    assert_eq!(meta.len(), 0);
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.modified().expect("mtime"), marker_stamp);
    let archived = reopened
        .list_scoped(ListScope::Archived)
        .expect("list archived");
    assert_eq!(archived.sessions.len(), 1);
    assert!(archived.sessions[0].archived);
    assert_eq!(archived.sessions[0].revision, current.revision());
    assert!(reopened.list().expect("list").sessions.is_empty());
    reopened.delete(&id).expect("delete");
    assert!(!marker.exists(), "the marker goes with the session");
}

#[test]
fn golden_fixtures_of_every_version_keep_their_details() {
    for version in golden::versions_on_disk() {
        let load = |name: &str| {
            decode(&golden::read(version, name), name)
                .unwrap_or_else(|e| panic!("v{version}/{name}: {e}"))
        };

        let minimal = load("minimal");
        assert!(minimal.transcript().is_empty() && minimal.metadata().is_empty());
        assert_eq!(minimal.title(), None);
        assert_eq!(minimal.created_at(), golden::created());
        assert_eq!(minimal.lineage(), None);

        let interrupted = load("tool_calls_with_interrupted");
        let statuses: Vec<ToolCallStatus> =
            interrupted.tool_calls().iter().map(|r| r.status).collect();
        assert_eq!(statuses, [ToolCallStatus::Ok, ToolCallStatus::Interrupted]);
        let record = &interrupted.tool_calls()[1];
        let block = |at: agent_session::BlockPosition| {
            &interrupted.transcript()[at.message].content[at.block]
        };
        match block(record.result_at) {
            ContentBlock::ToolResult(result) => {
                assert!(result.is_error);
                assert_eq!(result.output.as_text(), Some(golden::INTERRUPTED_TEXT));
            }
            other => panic!("record points at {other:?}"),
        }
        match block(record.call_at) {
            ContentBlock::ToolCall(call) => assert_eq!(
                call.arguments,
                agent_session::ToolArguments::Text("{\"path\":  \"big.bin\"}".into()),
                "raw arguments are kept byte for byte"
            ),
            other => panic!("record points at {other:?}"),
        }

        let errors = load("tool_call_errors");
        let statuses: Vec<ToolCallStatus> = errors.tool_calls().iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                ToolCallStatus::Error,
                ToolCallStatus::Ok,
                ToolCallStatus::Error
            ]
        );

        let usage = load("usage_with_costs");
        let totals = usage.totals();
        assert_eq!(totals.completions, 3);
        assert_eq!(totals.input_tokens, 1_234 + 50_000 + 7);
        assert_eq!(totals.cache_read_tokens, 40_000);
        assert_eq!(totals.cost, golden::usage_total_cost());

        let floats = load("metadata_with_floats");
        for (key, expected) in golden::float_metadata() {
            let got = floats.metadata()[key].as_f64().expect("a number");
            assert_eq!(
                got.to_bits(),
                expected.to_bits(),
                "v{version} {key}: {got:e} != {expected:e}"
            );
            assert!(floats.metadata()[key].is_f64(), "{key} stays a float");
        }
        assert_eq!(floats.metadata()["u64_max"], json!(u64::MAX));
        assert_eq!(floats.metadata()["i64_min"], json!(i64::MIN));
    }
}

#[test]
fn golden_provider_transcripts_of_every_version_convert_back_to_the_exact_wire_json() {
    for version in golden::versions_on_disk() {
        let openai =
            decode(&golden::read(version, "openai_chat_transcript"), "openai").expect("decodes");
        let back: Vec<Value> = openai
            .transcript()
            .iter()
            .map(|m| m.to_openai_chat().expect("to OpenAI"))
            .collect();
        assert_eq!(back, golden::openai_wire(), "v{version}");

        let anthropic =
            decode(&golden::read(version, "anthropic_transcript"), "anthropic").expect("decodes");
        let back: Vec<Value> = anthropic
            .transcript()
            .iter()
            .map(|m| m.to_anthropic().expect("to Anthropic"))
            .collect();
        assert_eq!(back, golden::anthropic_wire(), "v{version}");
        assert_eq!(
            anthropic.tool_calls()[0].tool_name,
            "read_file",
            "tool_use became a tool call"
        );
    }
}

#[test]
fn golden_forks_record_their_parent_and_are_what_fork_makes() {
    let load = |version: u32, name: &str| {
        decode(&golden::read(version, name), name).unwrap_or_else(|e| panic!("{name}: {e}"))
    };

    let fork = load(SCHEMA_VERSION, "fork_of_openai_chat_transcript");
    let lineage = fork.lineage().expect("a fork has a lineage");
    assert_eq!(lineage.parent.as_str(), "golden-openai-chat-transcript");
    assert_eq!(lineage.parent_revision, Revision::from_u64(6));
    assert_eq!(lineage.fork_point, 6);
    assert_eq!(lineage.forked_at, golden::forked());
    assert_eq!(fork.created_at(), golden::forked());
    // Forked from the parent as written by every release (version 1 included), at the
    // end of its first turn and continued, it is the golden fork, times aside.
    for version in golden::versions_on_disk() {
        let parent = load(version, "openai_chat_transcript");
        let made = parent
            .fork(fork.id().clone(), ForkAt::Turns(1))
            .expect("fork at a turn boundary")
            .with_appended(
                golden::fork_of_openai_continuation(),
                golden::fork_of_openai_usage(),
                chrono::Utc::now(),
            )
            .expect("continue the fork");
        assert_same_fork(&made, &fork, &format!("a fork of v{version}"));
    }

    let fork = load(SCHEMA_VERSION, "fork_of_usage_with_costs");
    let lineage = fork.lineage().expect("a fork has a lineage");
    assert_eq!(lineage.parent.as_str(), "golden-usage-with-costs");
    assert_eq!(lineage.parent_revision, Revision::from_u64(4));
    assert_eq!(lineage.fork_point, 4);
    assert!(fork.usage().is_empty(), "a fork's usage starts empty");
    for version in golden::versions_on_disk() {
        let parent = load(version, "usage_with_costs");
        let made = parent
            .fork(fork.id().clone(), ForkAt::Turns(2))
            .expect("fork at a turn boundary");
        assert_same_fork(&made, &fork, &format!("a fork of v{version}"));
    }

    // In the file, `lineage` follows `metadata`, with its fields in the documented order;
    // a session that is not a fork has no `lineage` key at all.
    let text = String::from_utf8(golden::read(
        SCHEMA_VERSION,
        "fork_of_openai_chat_transcript",
    ))
    .expect("UTF-8");
    let at = |key: &str| {
        text.find(&format!("\"{key}\": "))
            .unwrap_or_else(|| panic!("{key} is written"))
    };
    let order = [
        "metadata",
        "lineage",
        "parent",
        "parent_revision",
        "fork_point",
        "forked_at",
        "transcript",
    ];
    for pair in order.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{} before {}", pair[0], pair[1]);
    }
    for (name, snapshot) in golden::cases(SCHEMA_VERSION) {
        let value: Value =
            serde_json::from_slice(&golden::read(SCHEMA_VERSION, name)).expect("JSON");
        assert_eq!(
            value.get("lineage").is_some(),
            snapshot.lineage().is_some(),
            "{name}"
        );
    }
}

/// Asserts `made` is the fork `golden` except for the times a fork takes from the clock.
fn assert_same_fork(made: &SessionSnapshot, golden: &SessionSnapshot, what: &str) {
    assert_eq!(made.id(), golden.id(), "{what}");
    assert_eq!(made.options(), golden.options(), "{what}");
    assert_eq!(made.metadata(), golden.metadata(), "{what}");
    assert_eq!(made.transcript(), golden.transcript(), "{what}");
    assert_eq!(made.tool_calls(), golden.tool_calls(), "{what}");
    assert_eq!(made.usage(), golden.usage(), "{what}");
    let (made, golden) = (
        made.lineage().expect("made a fork"),
        golden.lineage().expect("a golden fork"),
    );
    assert_eq!(made.parent, golden.parent, "{what}");
    assert_eq!(made.parent_revision, golden.parent_revision, "{what}");
    assert_eq!(made.fork_point, golden.fork_point, "{what}");
}

// ---------------------------------------------------------------------------------------
// Small helpers used by the tests above.
// ---------------------------------------------------------------------------------------

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("encode value")
}

fn to_string(value: &Value) -> String {
    serde_json::to_string(value).expect("encode value")
}

/// The decoder's own message, from the error's source.
fn source_text(err: &Error) -> String {
    std::error::Error::source(err).map_or_else(String::new, ToString::to_string)
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

fn splice(bytes: &[u8], at: usize, remove: usize, insert: &[u8]) -> Vec<u8> {
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(insert);
    out.extend_from_slice(&bytes[at + remove..]);
    out
}

fn utf16le(bytes: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(bytes).expect("utf-8");
    let mut out = vec![0xff, 0xfe];
    for unit in text.encode_utf16() {
        out.extend_from_slice(&unit.to_le_bytes());
    }
    out
}

fn array(value: &mut Value) -> &mut Vec<Value> {
    value.as_array_mut().expect("an array")
}

fn remove(value: &mut Value, i: usize) {
    array(value).remove(i);
}

fn insert(value: &mut Value, i: usize, item: Value) {
    array(value).insert(i, item);
}

fn swap(value: &mut Value, i: usize, j: usize) {
    array(value).swap(i, j);
}

mod support {
    use std::collections::BTreeMap;
    use std::fs;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::Path;

    use agent_session::{
        ContentBlock, Cost, Error, ErrorKind, Location, Message, Revision, SessionId,
        SessionSnapshot, ToolCall, ToolOutput, ToolResult, Usage,
    };
    use chrono::{TimeZone, Utc};
    use serde_json::{json, Map, Value};

    /// File names in a directory, with their bytes.
    pub type FileBytes = BTreeMap<String, Vec<u8>>;

    /// Decodes, turning a panic into a test failure that names the input.
    pub fn decode(bytes: &[u8], what: &str) -> Result<SessionSnapshot, Error> {
        std::panic::catch_unwind(|| SessionSnapshot::from_json(bytes))
            .unwrap_or_else(|_| panic!("SessionSnapshot::from_json panicked on: {what}"))
    }

    pub fn encode(snapshot: &SessionSnapshot) -> Vec<u8> {
        snapshot.to_json().expect("encode snapshot")
    }

    /// Asserts `bytes` are refused as malformed bytes, and returns the error.
    pub fn expect_malformed(bytes: &[u8], what: &str) -> Error {
        let err = match decode(bytes, what) {
            Ok(snapshot) => panic!("{what}: accepted as {:?}", snapshot.id()),
            Err(err) => err,
        };
        assert!(
            matches!(
                err,
                Error::Malformed {
                    location: Location::Bytes,
                    ..
                }
            ),
            "{what}: expected Error::Malformed, got {err:?}"
        );
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}");
        err
    }

    /// Asserts `bytes` are refused as inconsistent with a problem containing `says`.
    pub fn expect_inconsistent(bytes: &[u8], what: &str, says: &str) {
        let Err(err) = decode(bytes, what) else {
            panic!("{what}: accepted");
        };
        match &err {
            Error::Inconsistent { location, problem } => {
                assert_eq!(location, &Location::Bytes, "{what}");
                assert!(problem.contains(says), "{what}: {problem:?} lacks {says:?}");
            }
            other => panic!("{what}: expected Error::Inconsistent, got {other:?}"),
        }
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{what}");
        assert!(err.to_string().contains(says), "{what}: {err}");
    }

    /// The snapshot the hostile inputs are derived from. Transcript layout (the tests edit
    /// it by index):
    ///
    /// 0. user text
    /// 1. assistant: text, call c1 (JSON input), call c2 (raw arguments), provider block
    /// 2. tool result for c1 (ok)
    /// 3. tool result for c2 (error, block output)
    /// 4. an OpenAI `developer` message with a `name` (wire hints and extra fields)
    /// 5. assistant text
    pub fn base_snapshot() -> SessionSnapshot {
        let developer = Message::from_openai_chat(
            &json!({"role": "developer", "content": "be brief", "name": "ops"}),
        )
        .expect("openai message");
        let when = Utc
            .with_ymd_and_hms(2025, 2, 3, 4, 5, 6)
            .single()
            .expect("date");
        SessionSnapshot::builder(SessionId::parse("victim").expect("id"), "gpt-test")
            .system_prompt("Be exact.")
            .max_turns(8)
            .timestamps(when, when + chrono::Duration::seconds(61))
            .metadata_entry("project", json!("parser"))
            .metadata_entry("score", json!(0.5))
            .metadata_entry("tags", json!(["a", "b"]))
            .metadata_entry("nested", json!({"k": 1}))
            .transcript(vec![
                Message::user("Please add 2+2 and list files"),
                Message::assistant(vec![
                    ContentBlock::text("On it."),
                    ContentBlock::tool_call(ToolCall::new("c1", "calc", json!({"expr": "2+2"}))),
                    ContentBlock::tool_call(ToolCall::with_raw_arguments(
                        "c2",
                        "ls",
                        "{\"dir\": \".\"}",
                    )),
                    ContentBlock::Other {
                        value: json!({"type": "thinking", "thinking": "easy", "signature": "c2ln"}),
                    },
                ]),
                Message::tool_result(ToolResult::new("c1", "4")),
                Message::tool_result(ToolResult::error(
                    "c2",
                    ToolOutput::Blocks(vec![ContentBlock::text("no such dir")]),
                )),
                developer,
                Message::assistant(vec![ContentBlock::text("4; listing failed.")]),
            ])
            .usage(vec![
                Usage::new("gpt-test")
                    .with_tokens(100, 20)
                    .with_cost(Cost::from_nano_usd(1_500)),
                Usage::new("gpt-test")
                    .with_tokens(140, 9)
                    .with_cache_tokens(100, 0)
                    .with_cost(Cost::from_nano_usd(900)),
            ])
            .build()
            .expect("base snapshot builds")
            .with_revision(Revision::from_u64(1))
    }

    pub fn base_json() -> Vec<u8> {
        encode(&base_snapshot())
    }

    pub fn base_value() -> Value {
        serde_json::from_slice(&base_json()).expect("base is JSON")
    }

    const MARK_KEY: &str = "__inject_here__";

    /// The base snapshot's JSON with `raw` (one or more `"key":value` members, written
    /// verbatim, so they can repeat keys or hold what a `Value` cannot) added to the object
    /// `locate` picks.
    pub fn inject_raw(locate: impl FnOnce(&mut Value) -> &mut Value, raw: &str) -> Vec<u8> {
        let mut value = base_value();
        let target = locate(&mut value);
        if target.is_null() {
            *target = Value::Object(Map::new());
        }
        target
            .as_object_mut()
            .expect("injection target is an object")
            .insert(MARK_KEY.into(), Value::Null);
        let text = serde_json::to_string(&value).expect("encode");
        let marker = format!("\"{MARK_KEY}\":null");
        assert_eq!(text.matches(&marker).count(), 1);
        text.replacen(&marker, raw, 1).into_bytes()
    }

    /// The base snapshot's JSON with the value `locate` picks replaced by `raw`, written
    /// verbatim.
    pub fn replace_raw(locate: impl FnOnce(&mut Value) -> &mut Value, raw: &str) -> Vec<u8> {
        let mut value = base_value();
        *locate(&mut value) = json!(MARK_KEY);
        let text = serde_json::to_string(&value).expect("encode");
        let marker = format!("\"{MARK_KEY}\"");
        assert_eq!(text.matches(&marker).count(), 1);
        text.replacen(&marker, raw, 1).into_bytes()
    }

    /// A small valid session that is not the victim.
    pub fn healthy(name: &str) -> SessionSnapshot {
        let when = Utc
            .with_ymd_and_hms(2025, 2, 3, 4, 5, 6)
            .single()
            .expect("date");
        SessionSnapshot::builder(SessionId::parse(name).expect("id"), "m")
            .timestamps(when, when)
            .transcript(vec![Message::user(format!("I am {name}"))])
            .build()
            .expect("build")
    }

    /// Every file in `dir` with its bytes.
    pub fn file_bytes(dir: &Path) -> FileBytes {
        let mut out = BTreeMap::new();
        for entry in fs::read_dir(dir).expect("read dir") {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            out.insert(name, fs::read(entry.path()).expect("read file"));
        }
        out
    }

    /// Writes `bytes` to a new file `path` with mode 0600 (replacing any old file).
    pub fn write_private(path: &Path, bytes: &[u8]) {
        let _ = fs::remove_file(path);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .expect("create");
        file.write_all(bytes).expect("write");
    }

    /// Hostile variants of the base snapshot (all refused by `from_json`), for the store.
    pub fn hostile_corpus() -> Vec<(String, Vec<u8>)> {
        let base = base_json();
        let mut corpus: Vec<(String, Vec<u8>)> = Vec::new();
        for len in (0..base.len()).step_by(23) {
            corpus.push((format!("truncated to {len}"), base[..len].to_vec()));
        }
        for i in (0..base.len()).step_by(41) {
            let mut flipped = base.clone();
            flipped[i] ^= 0x20;
            corpus.push((format!("byte {i} xor 0x20"), flipped));
        }
        let mut named: Vec<(&str, Vec<u8>)> = vec![
            (
                "duplicate top-level key",
                inject_raw(|v| v, r#""schema_version":1"#),
            ),
            (
                "duplicate metadata key",
                inject_raw(|v| &mut v["metadata"], r#""d":1,"d":2"#),
            ),
            ("unknown top-level field", inject_raw(|v| v, r#""zzz":1"#)),
            (
                "unknown field in a message",
                inject_raw(|v| &mut v["transcript"][0], r#""zzz":1"#),
            ),
            ("trailing bytes", {
                let mut b = base.clone();
                b.extend_from_slice(b"xyz");
                b
            }),
            ("10,000 '['", "[".repeat(10_000).into_bytes()),
            (
                "deep metadata",
                inject_raw(
                    |v| &mut v["metadata"],
                    &format!("\"d\":{}{}", "[".repeat(5_000), "]".repeat(5_000)),
                ),
            ),
            ("invalid UTF-8", {
                let mut b = base.clone();
                let at = b.windows(6).position(|w| w == b"Please").expect("text");
                b[at] = 0xff;
                b
            }),
            (
                "lone surrogate",
                inject_raw(|v| &mut v["metadata"], r#""s":"\ud800""#),
            ),
            ("1e400", inject_raw(|v| &mut v["metadata"], r#""x":1e400"#)),
            ("empty file", Vec::new()),
            ("NUL bytes", vec![0; 4096]),
            ("snapshot id of another session", {
                let mut v = base_value();
                v["id"] = json!("healthy-a");
                serde_json::to_vec(&v).expect("json")
            }),
        ];
        for version in [0u64, u64::from(agent_session::SCHEMA_VERSION) + 1, 999] {
            let mut v = base_value();
            v["schema_version"] = json!(version);
            corpus.push((
                format!("schema_version {version}"),
                serde_json::to_vec(&v).expect("json"),
            ));
        }
        let inconsistent: [(&str, super::Edit); 4] = [
            ("tool call without result", |v| {
                v["transcript"].as_array_mut().expect("array").remove(2);
            }),
            ("record disagrees", |v| {
                v["tool_calls"][0]["tool_name"] = json!("rm");
            }),
            ("status disagrees", |v| {
                v["tool_calls"][0]["status"] = json!("error");
            }),
            ("max_turns zero", |v| v["options"]["max_turns"] = json!(0)),
        ];
        for (what, edit) in inconsistent {
            let mut v = base_value();
            edit(&mut v);
            named.push((what, serde_json::to_vec(&v).expect("json")));
        }
        corpus.extend(named.into_iter().map(|(w, b)| (w.to_owned(), b)));
        // Only inputs the decoder refuses (a flip can leave a valid file).
        corpus.retain(|(what, bytes)| {
            what.starts_with("snapshot id of") || SessionSnapshot::from_json(bytes).is_err()
        });
        corpus
    }
}
