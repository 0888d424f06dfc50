//! Reading older snapshot schemas.
//!
//! A snapshot written by an older release is decoded into a JSON document and upgraded one
//! schema version at a time, by pure steps (document in, document out; no I/O, no clock),
//! until it is in the current schema; only then is it decoded and validated like any other
//! snapshot. A new schema version adds one step here, and golden files of every older
//! version under `tests/fixtures/v*/` must keep loading.

use serde::de::Error as _;
use serde_json::{Map, Value};

use crate::snapshot::{OLDEST_SCHEMA_VERSION, SCHEMA_VERSION};

/// One upgrade: a document in schema version `n` to version `n + 1`.
type Step = fn(Map<String, Value>) -> serde_json::Result<Map<String, Value>>;

/// `STEPS[i]` upgrades version `OLDEST_SCHEMA_VERSION + i`.
const STEPS: [Step; (SCHEMA_VERSION - OLDEST_SCHEMA_VERSION) as usize] = [v1_to_v2, v2_to_v3];

/// Upgrades `document`, in schema version `from`, to [`SCHEMA_VERSION`].
///
/// # Errors
///
/// If `from` is not a version this release reads, or the document is not a valid
/// instance of its version in a way a step can see (such as a field that version did not
/// have).
pub(crate) fn upgrade(document: Value, from: u64) -> serde_json::Result<Value> {
    let Value::Object(mut document) = document else {
        return Err(serde_json::Error::custom(
            "a snapshot must be a JSON object",
        ));
    };
    let first = from
        .checked_sub(u64::from(OLDEST_SCHEMA_VERSION))
        .and_then(|i| usize::try_from(i).ok())
        .filter(|&i| i <= STEPS.len())
        .ok_or_else(|| {
            serde_json::Error::custom(format!("no upgrade from schema version {from}"))
        })?;
    for (i, step) in STEPS.iter().enumerate().skip(first) {
        document = step(document)?;
        let reached = u64::from(OLDEST_SCHEMA_VERSION) + i as u64 + 1;
        document.insert("schema_version".to_owned(), Value::from(reached));
    }
    Ok(Value::Object(document))
}

/// Whether every step from version `from` to the current one only adds optional fields:
/// then a document of version `from` in which none of the added fields appears decodes,
/// with the current decoder, to exactly what upgrading it would give (the decoder uses
/// this to skip the upgrade). A step that renames, moves or changes a field must make this
/// false for the versions before it.
pub(crate) fn only_adds_fields_since(from: u64) -> bool {
    // 1 -> 2 adds `lineage`, the role alias `"model"` and the flag `wire.custom`; 2 -> 3
    // adds the provider form of messages, the shape hints of the codecs added with it, and
    // a store checkpoint's `shared_prefix`.
    from >= u64::from(OLDEST_SCHEMA_VERSION)
}

/// Version 2 added `lineage` (omitted when the session is not a fork), the message role
/// alias `"model"` and the tool-call flag `wire.custom`, so a version 1 document is a
/// version 2 document as it stands; one that already has any of them was not written by a
/// version 1 release.
fn v1_to_v2(document: Map<String, Value>) -> serde_json::Result<Map<String, Value>> {
    if document.contains_key("lineage") {
        return Err(serde_json::Error::custom(
            "unknown field `lineage` in a schema version 1 snapshot (forks were added in version 2)",
        ));
    }
    let messages = document.get("transcript").and_then(Value::as_array);
    for (m, message) in messages.into_iter().flatten().enumerate() {
        if message.pointer("/wire/role") == Some(&Value::from("model")) {
            return Err(serde_json::Error::custom(format!(
                "message {m} of a schema version 1 snapshot has the role alias \"model\", which was added in version 2"
            )));
        }
        let blocks = message.get("content").and_then(Value::as_array);
        if blocks
            .into_iter()
            .flatten()
            .any(|block| block.pointer("/wire/custom").is_some())
        {
            return Err(serde_json::Error::custom(format!(
                "message {m} of a schema version 1 snapshot has a custom tool call (`wire.custom`), which was added in version 2"
            )));
        }
    }
    Ok(document)
}

/// The keys of a message's provider form, new in version 3.
const PROVIDER_FORMS: [&str; 4] = ["openai_chat", "openai_responses", "anthropic", "gemini"];
/// Shape hints new in version 3: of a message, a tool call and a tool result.
const MESSAGE_HINTS_3: [&str; 3] = ["codec", "role_absent", "items"];
const CALL_HINTS_3: [&str; 4] = [
    "legacy_function",
    "id_synthetic",
    "snake_case",
    "arguments_absent",
];
const RESULT_HINTS_3: [&str; 6] = [
    "custom",
    "name",
    "id_synthetic",
    "response_json",
    "snake_case",
    "function_extra",
];

/// Version 3 added the provider form of messages (`{"openai_chat": ...}` and the like),
/// the shape hints of the codecs added with it, and `shared_prefix` (only in a store's
/// checkpoint of a fork that shares its parent's messages), all optional: a version 2
/// document is a version 3 document as it stands; one that already has any of them was
/// not written by a version 2 release.
fn v2_to_v3(document: Map<String, Value>) -> serde_json::Result<Map<String, Value>> {
    if document.contains_key("shared_prefix") {
        return Err(serde_json::Error::custom(
            "unknown field `shared_prefix` in a schema version 2 snapshot (it was added in version 3)",
        ));
    }
    let messages = document.get("transcript").and_then(Value::as_array);
    for (m, message) in messages.into_iter().flatten().enumerate() {
        let added = |what: &str| {
            Err(serde_json::Error::custom(format!(
                "message {m} of a schema version 2 snapshot has {what}, which was added in version 3"
            )))
        };
        let Some(message) = message.as_object() else {
            continue;
        };
        if let Some(form) = PROVIDER_FORMS.iter().find(|k| message.contains_key(**k)) {
            return added(&format!("the provider form `{form}`"));
        }
        let wire = message.get("wire").and_then(Value::as_object);
        if let Some(hint) = MESSAGE_HINTS_3
            .iter()
            .find(|k| wire.is_some_and(|w| w.contains_key(**k)))
        {
            return added(&format!("the shape hint `wire.{hint}`"));
        }
        let blocks = message.get("content").and_then(Value::as_array);
        for block in blocks.into_iter().flatten() {
            let hints: &[&str] = match block.get("type").and_then(Value::as_str) {
                Some("tool_call") => &CALL_HINTS_3,
                Some("tool_result") => &RESULT_HINTS_3,
                _ => continue,
            };
            let wire = block.get("wire").and_then(Value::as_object);
            if let Some(hint) = hints
                .iter()
                .find(|k| wire.is_some_and(|w| w.contains_key(**k)))
            {
                return added(&format!("a block with the shape hint `wire.{hint}`"));
            }
        }
    }
    Ok(document)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_older_version_has_a_step() {
        assert_eq!(
            STEPS.len(),
            (SCHEMA_VERSION - OLDEST_SCHEMA_VERSION) as usize
        );
    }

    #[test]
    fn a_version_1_document_is_upgraded_to_the_current_version_unchanged_otherwise() {
        let v1 = json!({"schema_version": 1, "id": "s", "metadata": {"k": [1, 2.5]}});
        let upgraded = upgrade(v1.clone(), 1).expect("upgrade");
        let mut expected = v1;
        expected["schema_version"] = json!(SCHEMA_VERSION);
        assert_eq!(upgraded, expected);
    }

    #[test]
    fn a_version_1_document_with_a_later_field_is_refused() {
        let v1 = json!({"schema_version": 1, "id": "s", "lineage": {}});
        let error = upgrade(v1, 1).expect_err("lineage did not exist in version 1");
        assert!(error.to_string().contains("lineage"), "{error}");
    }

    #[test]
    fn a_version_1_document_with_the_model_alias_is_refused() {
        let v1 = json!({"schema_version": 1, "id": "s", "transcript": [
            {"role": "user", "content": []},
            {"role": "assistant", "content": [], "wire": {"role": "model"}}]});
        let error = upgrade(v1, 1).expect_err("\"model\" did not exist in version 1");
        assert!(error.to_string().contains("message 1"), "{error}");
        let v1 = json!({"schema_version": 1, "id": "s", "transcript": [
            {"role": "assistant", "content": [{"type": "tool_call", "id": "c", "name": "f",
                "arguments": "x", "wire": {"custom": true}}]}]});
        let error = upgrade(v1, 1).expect_err("custom calls did not exist in version 1");
        assert!(error.to_string().contains("custom"), "{error}");
    }

    #[test]
    fn a_version_2_document_with_anything_version_3_added_is_refused() {
        let mut cases = vec![(
            json!({"schema_version": 2, "id": "s", "shared_prefix": {}}),
            "shared_prefix",
        )];
        for form in PROVIDER_FORMS {
            cases.push((
                json!({"schema_version": 2, "id": "s", "transcript": [{form: {"role": "user"}}]}),
                form,
            ));
        }
        for hint in MESSAGE_HINTS_3 {
            cases.push((
                json!({"schema_version": 2, "id": "s", "transcript": [
                    {"role": "user", "content": [], "wire": {hint: true}}]}),
                hint,
            ));
        }
        for (kind, hints) in [
            ("tool_call", &CALL_HINTS_3[..]),
            ("tool_result", &RESULT_HINTS_3[..]),
        ] {
            for hint in hints {
                cases.push((
                    json!({"schema_version": 2, "id": "s", "transcript": [
                        {"role": "assistant", "content": [{"type": kind, "wire": {*hint: true}}]}]}),
                    hint,
                ));
            }
        }
        for (document, what) in cases {
            let error = upgrade(document, 2).expect_err(what);
            assert!(error.to_string().contains(what), "{what}: {error}");
        }
        // What version 2 had (a tool call's `function_extra`, the `model` alias) passes.
        let v2 = json!({"schema_version": 2, "id": "s", "lineage": null, "transcript": [
            {"role": "assistant", "content": [{"type": "tool_call", "id": "c", "name": "f",
                "arguments": "{}", "wire": {"function_extra": {"strict": true}}}],
             "wire": {"role": "model"}}]});
        let upgraded = upgrade(v2.clone(), 2).expect("a version 2 document");
        let mut expected = v2;
        expected["schema_version"] = json!(3);
        assert_eq!(upgraded, expected);
    }

    #[test]
    fn versions_outside_the_supported_range_are_refused() {
        for version in [0, u64::from(SCHEMA_VERSION) + 1, u64::MAX] {
            assert!(upgrade(json!({}), version).is_err(), "{version}");
        }
        assert!(upgrade(json!([]), 1).is_err());
    }
}
