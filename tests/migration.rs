//! Reading older snapshot schema versions, through the public API: a version 1 document is
//! upgraded by pure migration steps and then decoded exactly as strictly as a current one,
//! so it gives the same snapshot as its current equivalent, the same errors for the same
//! damage, and nothing a version 1 release could not have written. The golden files of
//! every version (`tests/fixtures/v<N>/`, see `tests/common/golden.rs`) are the inputs.

#[path = "common/golden.rs"]
mod golden;

use agent_session::{
    Bundle, Error, ErrorKind, FileSessionStore, ImportIds, Location, MemorySessionStore,
    SessionSnapshot, SessionStore, SessionStoreExt, OLDEST_SCHEMA_VERSION, SCHEMA_VERSION,
};
use serde_json::{json, Value};

/// The golden file `name` of `version`, as text.
fn text(version: u32, name: &str) -> String {
    String::from_utf8(golden::read(version, name)).expect("fixtures are UTF-8")
}

/// `document` with its (pretty-printed) `schema_version` changed to `version`, by editing
/// the text, so everything else stays byte for byte.
fn with_version(document: &str, version: u64) -> String {
    let line = |v: &dyn std::fmt::Display| format!("\n  \"schema_version\": {v},\n");
    let found = (0..=u64::from(SCHEMA_VERSION))
        .map(|v| line(&v))
        .find(|l| document.contains(l.as_str()))
        .expect("a pretty-printed schema_version line");
    document.replacen(&found, &line(&version), 1)
}

/// Decodes, turning a panic into a failure that names the input.
fn decode(bytes: &[u8], what: &str) -> Result<SessionSnapshot, Error> {
    std::panic::catch_unwind(|| SessionSnapshot::from_json(bytes))
        .unwrap_or_else(|_| panic!("SessionSnapshot::from_json panicked on: {what}"))
}

/// Asserts `bytes` are refused as malformed bytes and returns the decoder's message.
fn expect_malformed(bytes: &[u8], what: &str) -> String {
    match decode(bytes, what) {
        Ok(snapshot) => panic!("{what}: accepted as {:?}", snapshot.id()),
        Err(Error::Malformed {
            location: Location::Bytes,
            source,
        }) => source.to_string(),
        Err(other) => panic!("{what}: expected Error::Malformed, got {other:?}"),
    }
}

/// The error of decoding `document` at version 1 and at the current version, as text (its
/// variant, kind and message, but not the decoder's line and column numbers, which differ
/// between the two paths).
fn outcome(bytes: &[u8], what: &str) -> Result<SessionSnapshot, (String, ErrorKind, String)> {
    decode(bytes, what).map_err(|e| {
        let variant = format!("{e:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or_default()
            .to_owned();
        let detail = match &e {
            Error::Malformed { source, .. } => {
                let message = source.to_string();
                match message.find(" at line ") {
                    Some(cut) => message[..cut].to_owned(),
                    None => message,
                }
            }
            other => other.to_string(),
        };
        (variant, e.kind(), detail)
    })
}

// ---------------------------------------------------------------------------------------
// Versions.
// ---------------------------------------------------------------------------------------

#[test]
fn the_oldest_version_read_is_not_newer_than_the_current_and_every_version_between_has_fixtures() {
    // OLDEST_SCHEMA_VERSION <= SCHEMA_VERSION, and version 0 never existed.
    assert!(!(OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).is_empty());
    assert_ne!(OLDEST_SCHEMA_VERSION, 0, "there never was a version 0");
    for version in OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION {
        let dir = golden::dir(version);
        assert!(dir.is_dir(), "{} is missing", dir.display());
        let cases = golden::cases(version);
        assert!(!cases.is_empty(), "v{version}");
        for (name, expected) in cases {
            let what = format!("v{version}/{name}");
            let snapshot = decode(&golden::read(version, name), &what)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(snapshot, expected, "{what}");
        }
    }
    assert_eq!(
        golden::versions_on_disk(),
        (OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).collect::<Vec<u32>>()
    );
}

#[test]
fn schema_versions_0_the_next_one_and_u64_max_are_unsupported_and_name_the_version() {
    let newer = u64::from(SCHEMA_VERSION) + 1;
    for version in [0, newer, u64::MAX] {
        // From a version 1 file, a current one, and a current one with a field that no
        // version has: the version is checked first, whatever the rest holds.
        let mut with_unknown: Value =
            serde_json::from_slice(&golden::read(SCHEMA_VERSION, "minimal")).expect("JSON");
        with_unknown["field_of_a_later_version"] = json!({"x": 1});
        let documents = [
            ("v1 minimal", with_version(&text(1, "minimal"), version)),
            (
                "current fork",
                with_version(
                    &text(SCHEMA_VERSION, "fork_of_openai_chat_transcript"),
                    version,
                ),
            ),
            ("with an unknown field", {
                with_unknown["schema_version"] = json!(version);
                with_unknown.to_string()
            }),
            (
                "nothing else",
                format!("{{\"schema_version\":{version},\"id\":\"NOT AN ID\"}}"),
            ),
        ];
        for (what, document) in documents {
            let what = format!("{what} at schema version {version}");
            let err = decode(document.as_bytes(), &what).expect_err(&what);
            match &err {
                Error::UnsupportedSchemaVersion {
                    location,
                    found,
                    supported,
                    ..
                } => {
                    assert_eq!(location, &Location::Bytes, "{what}");
                    assert_eq!(*found, version, "{what}");
                    assert_eq!(*supported, SCHEMA_VERSION, "{what}");
                }
                other => panic!("{what}: expected UnsupportedSchemaVersion, got {other:?}"),
            }
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{what}");
            assert!(
                err.to_string()
                    .contains(&format!("format version {version},")),
                "{what}: {err}"
            );
        }
    }
}

#[test]
fn every_supported_version_is_read_and_its_snapshot_reports_the_current_version() {
    for version in OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION {
        let document = with_version(&text(SCHEMA_VERSION, "minimal"), u64::from(version));
        let snapshot = decode(document.as_bytes(), "minimal").expect("a supported version");
        assert_eq!(snapshot.schema_version(), SCHEMA_VERSION);
        let written: Value =
            serde_json::from_slice(&snapshot.to_json().expect("encode")).expect("JSON");
        assert_eq!(
            written["schema_version"],
            json!(SCHEMA_VERSION),
            "v{version}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Version 1 is read as version 1: nothing added later.
// ---------------------------------------------------------------------------------------

#[test]
fn a_version_1_document_with_lineage_is_malformed() {
    // The golden fork, at version 1: forks did not exist then.
    let fork = text(SCHEMA_VERSION, "fork_of_openai_chat_transcript");
    assert!(decode(fork.as_bytes(), "the current fork").is_ok());
    let message = expect_malformed(with_version(&fork, 1).as_bytes(), "a fork at v1");
    assert!(
        message.contains("lineage") && message.contains("version 1"),
        "{message}"
    );

    // Any `lineage` key, even `null` (which the current version reads as "not a fork"),
    // and even an invalid one: the key alone says a later release wrote the document.
    for lineage in [
        json!(null),
        json!({}),
        json!({"parent": "golden-minimal", "parent_revision": 1, "fork_point": 0,
               "forked_at": "2025-01-02T03:04:05Z"}),
        json!("not even an object"),
    ] {
        let mut v1: Value =
            serde_json::from_slice(&golden::read(1, "tool_call_errors")).expect("JSON");
        v1["lineage"] = lineage.clone();
        let what = format!("v1 with lineage {lineage}");
        let message = expect_malformed(v1.to_string().as_bytes(), &what);
        assert!(message.contains("lineage"), "{what}: {message}");
    }

    // At the current version `"lineage": null` is the same as no lineage.
    let mut current: Value =
        serde_json::from_slice(&golden::read(SCHEMA_VERSION, "tool_call_errors")).expect("JSON");
    current["lineage"] = json!(null);
    let snapshot = decode(current.to_string().as_bytes(), "null lineage").expect("decodes");
    assert_eq!(snapshot, golden::case(SCHEMA_VERSION, "tool_call_errors"));
    assert_eq!(snapshot.lineage(), None);
}

#[test]
fn a_version_1_file_with_lineage_is_refused_by_the_file_store() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path()).expect("open");
    let fork = golden::case(SCHEMA_VERSION, "fork_of_usage_with_costs");
    let path = store.path_of(fork.id());
    let v1 = with_version(&text(SCHEMA_VERSION, "fork_of_usage_with_costs"), 1);
    std::fs::write(&path, v1).expect("write");
    let err = store.load(fork.id()).expect_err("lineage at version 1");
    assert!(
        matches!(&err, Error::Malformed { location: Location::File(p), .. } if *p == path),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    let listing = store.list().expect("list");
    assert!(listing.sessions.is_empty());
    assert_eq!(listing.unreadable.len(), 1);
}

// ---------------------------------------------------------------------------------------
// Version 1 decodes to what its current equivalent decodes to.
// ---------------------------------------------------------------------------------------

#[test]
fn version_1_documents_with_every_kind_of_content_decode_to_their_current_equivalents() {
    for (name, expected) in golden::cases(1) {
        let v1 = text(1, name);
        let from_v1 = decode(v1.as_bytes(), name).unwrap_or_else(|e| panic!("v1/{name}: {e}"));
        // The same document at the current version number, and the current release's
        // own file of the case.
        let relabelled = with_version(&v1, u64::from(SCHEMA_VERSION));
        let from_relabelled = decode(relabelled.as_bytes(), name).expect("decodes");
        let from_current = decode(&golden::read(SCHEMA_VERSION, name), name).expect("decodes");
        assert_eq!(from_v1, from_relabelled, "{name}");
        assert_eq!(from_v1, from_current, "{name}");
        assert_eq!(from_v1, expected, "{name}");
        // Equal as values, and in everything equality does not compare: the encoding,
        // the derived title and totals, and what the tool-call records point at.
        let bytes = from_v1.to_json().expect("encode");
        assert_eq!(bytes, from_current.to_json().expect("encode"), "{name}");
        assert_eq!(from_v1.title(), from_current.title(), "{name}");
        assert_eq!(from_v1.totals(), from_current.totals(), "{name}");
        for record in from_v1.tool_calls() {
            assert_eq!(
                from_v1.tool_call(record),
                from_current.tool_call(record),
                "{name}"
            );
            assert_eq!(
                from_v1.tool_result(record),
                from_current.tool_result(record),
                "{name}"
            );
        }
        // Compact, as a version 1 release wrote it to a store.
        let compact = serde_json::to_vec(&serde_json::from_str::<Value>(&v1).expect("JSON"))
            .expect("compact");
        assert_eq!(decode(&compact, name).expect("decodes"), expected, "{name}");
    }
}

#[test]
fn version_1_documents_fail_validation_exactly_as_current_ones_do() {
    type Damage = (&'static str, fn(&mut Value));
    let damages: [Damage; 8] = [
        ("unknown top-level field", |v| v["zzz"] = json!(1)),
        ("unknown field in a message", |v| {
            v["transcript"][0]["zzz"] = json!(1);
        }),
        ("options as an array", |v| {
            v["options"] = json!(["gpt-4o", null, 8]);
        }),
        ("missing usage", |v| {
            v.as_object_mut().expect("object").remove("usage");
        }),
        ("invalid id", |v| v["id"] = json!("Not An Id")),
        ("max_turns zero", |v| v["options"]["max_turns"] = json!(0)),
        ("record disagrees", |v| {
            v["tool_calls"][0]["tool_name"] = json!("unlink");
        }),
        ("result removed", |v| {
            v["transcript"].as_array_mut().expect("array").remove(2);
        }),
    ];
    for (what, damage) in damages {
        let mut v1: Value =
            serde_json::from_slice(&golden::read(1, "tool_call_errors")).expect("JSON");
        damage(&mut v1);
        let mut current = v1.clone();
        current["schema_version"] = json!(SCHEMA_VERSION);
        let old = outcome(v1.to_string().as_bytes(), what).expect_err(what);
        let new = outcome(current.to_string().as_bytes(), what).expect_err(what);
        assert_eq!(old, new, "{what}");
    }
}

/// `Error::Malformed::source` is documented as "the decoder's description of what is
/// wrong, with line and column", and release 0.1.0 gave the position for version 1 files.
/// Through the migration path the document is decoded from a `serde_json::Value`, which
/// has no positions, so a damaged version 1 file no longer says where it is damaged.
#[test]
fn a_malformed_version_1_document_says_where_like_a_current_one() {
    let v1 = text(1, "tool_call_errors");
    let damaged = v1.replacen("\"max_turns\": 8", "\"max_turns\": \"eight\"", 1);
    let current = with_version(&damaged, u64::from(SCHEMA_VERSION));
    let message = expect_malformed(current.as_bytes(), "current");
    assert!(message.contains(" at line "), "current: {message}");
    let message = expect_malformed(damaged.as_bytes(), "v1");
    assert!(message.contains(" at line "), "v1: {message}");
}

#[test]
fn duplicate_keys_in_a_version_1_document_are_refused() {
    let v1 = text(1, "anthropic_transcript");
    assert!(decode(v1.as_bytes(), "positive control").is_ok());
    // Each edit adds a key that is already there, at a different depth.
    let edits = [
        (
            "top level",
            "\n  \"revision\": 7,\n",
            "\n  \"revision\": 7,\n  \"revision\": 7,\n",
        ),
        (
            "schema_version",
            "\n  \"schema_version\": 1,\n",
            "\n  \"schema_version\": 1,\n  \"schema_version\": 1,\n",
        ),
        (
            "options",
            "\"max_turns\": 8",
            "\"max_turns\": 8, \"max_turns\": 8",
        ),
        (
            "metadata",
            "\"batch\": 17,",
            "\"batch\": 17, \"batch\": 18,",
        ),
        (
            "tool input",
            "\"max_bytes\": 4096,",
            "\"max_bytes\": 4096, \"max_bytes\": 1,",
        ),
        (
            "provider block",
            "\"data\": \"c2VjcmV0\"",
            "\"data\": \"c2VjcmV0\", \"data\": \"eA==\"",
        ),
        (
            "usage entry",
            "\"input_tokens\": 900,",
            "\"input_tokens\": 900, \"input_tokens\": 900,",
        ),
    ];
    for (what, find, replace) in edits {
        assert_eq!(v1.matches(find).count(), 1, "{what}: {find:?}");
        let duplicated = v1.replacen(find, replace, 1);
        let message = expect_malformed(duplicated.as_bytes(), &format!("v1: {what}"));
        assert!(message.contains("duplicate"), "v1: {what}: {message}");
        // The current version refuses the same document the same way.
        let current = with_version(&duplicated, u64::from(SCHEMA_VERSION));
        let message = expect_malformed(current.as_bytes(), &format!("current: {what}"));
        assert!(message.contains("duplicate"), "current: {what}: {message}");
    }
}

/// A snapshot document whose deepest nesting is `depth` levels (counting the top-level
/// object), reached in `metadata` or in a tool call's `input`.
fn nested_to(version: u32, depth: usize, in_tool_input: bool) -> String {
    let arrays = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    if in_tool_input {
        // Top-level object, transcript, message, content, block: 5 levels above `input`.
        text(version, "tool_call_errors").replacen(
            "\"input\": null",
            &format!("\"input\": {}", arrays(depth - 5)),
            1,
        )
    } else {
        // Top-level object and metadata: 2 levels above the value.
        text(version, "minimal").replacen(
            "\"metadata\": {}",
            &format!("\"metadata\": {{\"deep\": {}}}", arrays(depth - 2)),
            1,
        )
    }
}

#[test]
fn a_version_1_document_at_the_maximum_depth_decodes_and_one_level_deeper_fails_as_a_current_one_does(
) {
    const MAX_DEPTH: usize = 127;
    for in_tool_input in [false, true] {
        let place = if in_tool_input {
            "tool input"
        } else {
            "metadata"
        };
        // At the limit: both versions decode, to the same snapshot, which can be written
        // again (at the current version) and read back.
        let v1 = nested_to(1, MAX_DEPTH, in_tool_input);
        let current = nested_to(SCHEMA_VERSION, MAX_DEPTH, in_tool_input);
        assert_eq!(v1.matches('[').count(), current.matches('[').count());
        let from_v1 = decode(v1.as_bytes(), place)
            .unwrap_or_else(|e| panic!("v1 at depth {MAX_DEPTH} in {place}: {e}"));
        let from_current = decode(current.as_bytes(), place)
            .unwrap_or_else(|e| panic!("current at depth {MAX_DEPTH} in {place}: {e}"));
        assert_eq!(from_v1, from_current, "{place}");
        let written = from_v1
            .to_json()
            .expect("the deepest readable snapshot is written");
        assert_eq!(decode(&written, place).expect("read back"), from_v1);

        // One level deeper: both are malformed, with the same message.
        let v1 = nested_to(1, MAX_DEPTH + 1, in_tool_input);
        let current = nested_to(SCHEMA_VERSION, MAX_DEPTH + 1, in_tool_input);
        let old = outcome(v1.as_bytes(), place).expect_err("v1 too deep");
        let new = outcome(current.as_bytes(), place).expect_err("current too deep");
        assert_eq!(old, new, "{place}");
        assert_eq!(old.0, "Malformed", "{place}");
        assert!(old.2.contains("recursion limit"), "{place}: {}", old.2);
    }
}

// ---------------------------------------------------------------------------------------
// Other readers of snapshots: bundles and stores.
// ---------------------------------------------------------------------------------------

#[test]
fn bundles_read_version_1_snapshot_files_and_export_them_at_the_current_version() {
    // A bare snapshot file is a bundle of one; version 1 files, pretty-printed as the
    // fixtures are or compact as a version 1 store wrote them, are upgraded as a load is.
    for (name, expected) in golden::cases(1) {
        let pretty = golden::read(1, name);
        let compact = serde_json::from_slice::<Value>(&pretty)
            .expect("JSON")
            .to_string();
        for (form, bytes) in [("pretty", &pretty[..]), ("compact", compact.as_bytes())] {
            let what = format!("v1/{name} ({form})");
            let bundle = Bundle::from_json(bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(bundle.sessions(), std::slice::from_ref(&expected), "{what}");
            // Written back at the current version, and read back the same.
            let written = bundle.to_json().expect("encode");
            let last = written
                .trim_ascii_end()
                .rsplit(|&b| b == b'\n')
                .next()
                .expect("a session line");
            assert!(
                last.starts_with(format!("{{\"schema_version\":{SCHEMA_VERSION},").as_bytes()),
                "{what}: {}",
                String::from_utf8_lossy(last)
            );
            assert_eq!(
                Bundle::from_json(&written).expect("read back").sessions(),
                bundle.sessions(),
                "{what}"
            );
        }
    }

    // Imported, it is a new session at revision 1 with its times kept.
    let original = golden::case(1, "openai_chat_transcript");
    let bare = Bundle::from_json(&golden::read(1, "openai_chat_transcript")).expect("bare v1");
    let store = MemorySessionStore::new();
    let imported = store.import(&bare, &ImportIds::Keep).expect("import");
    assert_eq!(imported[0].revision.as_u64(), 1);
    let loaded = store.load(original.id()).expect("load");
    assert_eq!(loaded, original.clone().with_revision(imported[0].revision));
    assert_eq!(loaded.created_at(), original.created_at());
    assert_eq!(loaded.updated_at(), original.updated_at());

    // A version 1 file with a lineage is refused, as a load refuses it.
    let fork = with_version(&text(SCHEMA_VERSION, "fork_of_usage_with_costs"), 1);
    match Bundle::from_json(fork.as_bytes()) {
        Err(Error::InvalidBundle {
            source: Some(source),
            ..
        }) => assert!(
            matches!(
                source.downcast_ref::<Error>(),
                Some(Error::Malformed { .. })
            ),
            "{source:?}"
        ),
        other => panic!("expected the v1 fork refused, got {other:?}"),
    }
}
