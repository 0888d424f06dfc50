//! Exact JSON comparison, shared by the integration tests (`tests/common`) and the fuzz
//! checks (`fuzz/src/lib.rs` includes this file with `#[path]`), so both mean the same
//! thing by "unchanged".

use serde_json::Value;

/// Where two JSON values differ, compared exactly: numbers must have the same kind
/// (integer or float) and the same text (so `-0.0` differs from `0.0`), strings the same
/// bytes, objects the same keys. `None` when they are identical.
#[must_use]
#[allow(dead_code)] // not every test binary compares JSON
pub fn json_difference(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for key in e.keys().chain(a.keys()) {
                let here = format!("{path}.{key}");
                match (e.get(key), a.get(key)) {
                    (Some(e), Some(a)) => {
                        if let Some(difference) = json_difference(e, a, &here) {
                            return Some(difference);
                        }
                    }
                    (Some(e), None) => return Some(format!("{here}: {e} is missing")),
                    (None, Some(a)) => return Some(format!("{here}: unexpected {a}")),
                    (None, None) => {}
                }
            }
            None
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Some(format!(
                    "{path}: {} elements expected, {} found",
                    e.len(),
                    a.len()
                ));
            }
            e.iter()
                .zip(a)
                .enumerate()
                .find_map(|(i, (e, a))| json_difference(e, a, &format!("{path}[{i}]")))
        }
        (Value::Number(e), Value::Number(a)) => {
            let same_kind =
                (e.is_u64(), e.is_i64(), e.is_f64()) == (a.is_u64(), a.is_i64(), a.is_f64());
            let same_bits = e.as_f64().map(f64::to_bits) == a.as_f64().map(f64::to_bits);
            (!same_kind || !same_bits || e.to_string() != a.to_string() || e != a)
                .then(|| format!("{path}: number {e} expected, {a} found"))
        }
        (Value::String(e), Value::String(a)) => (e.as_bytes() != a.as_bytes())
            .then(|| format!("{path}: string {e:?} expected, {a:?} found")),
        (e, a) => (e != a).then(|| format!("{path}: {e} expected, {a} found")),
    }
}
