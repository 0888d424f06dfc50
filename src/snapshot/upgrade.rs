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
const STEPS: [Step; (SCHEMA_VERSION - OLDEST_SCHEMA_VERSION) as usize] = [v1_to_v2];

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
    // 1 -> 2 adds `lineage`, the role alias `"model"` and the flag `wire.custom`.
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
    fn versions_outside_the_supported_range_are_refused() {
        for version in [0, u64::from(SCHEMA_VERSION) + 1, u64::MAX] {
            assert!(upgrade(json!({}), version).is_err(), "{version}");
        }
        assert!(upgrade(json!([]), 1).is_err());
    }
}
