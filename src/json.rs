//! Strict decoding of free-form JSON (metadata, tool arguments, provider fields).
//!
//! `serde_json::Value` keeps the last of two duplicate keys and silently drops the first. A
//! snapshot with duplicate keys was not written by this crate, and which value a reader sees
//! would depend on the reader, so these helpers refuse duplicates instead.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The deepest nesting of arrays and objects `serde_json` reads back (its recursion limit),
/// counting the snapshot's own top-level object as 1.
pub(crate) const MAX_JSON_DEPTH: usize = 127;

/// The deepest a message may nest as JSON, counting its own object as 1: a message sits
/// two levels inside the documents that hold it (a snapshot's `transcript`, a journal
/// record's `messages`), and the documents must stay within [`MAX_JSON_DEPTH`].
pub(crate) const MAX_MESSAGE_DEPTH: usize = MAX_JSON_DEPTH - 2;

/// The deepest a session's metadata may nest, counting the metadata object as 1: it sits
/// one level inside a snapshot or a journal record.
pub(crate) const MAX_METADATA_DEPTH: usize = MAX_JSON_DEPTH - 1;

/// How deep `value` nests: 0 for a number, string, boolean or null, 1 for an array or
/// object of those, and so on. Walks the value with a stack of its own, so no depth
/// overflows the thread's stack (`serde_json`'s own `Clone`, `Drop`, `PartialEq` and
/// serializer recurse, and abort the process somewhere past ten thousand levels).
pub(crate) fn value_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1)];
    while let Some((value, level)) = stack.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(level);
                stack.extend(items.iter().map(|item| (item, level + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(level);
                stack.extend(map.values().map(|item| (item, level + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// How deep `map` nests as a JSON object (1 when it holds no arrays or objects).
pub(crate) fn map_depth(map: &Map<String, Value>) -> usize {
    1 + map.values().map(value_depth).max().unwrap_or(0)
}

/// Drops `value` one container at a time instead of recursively, so a value nested far
/// too deep (which this crate refuses) can be let go of without overflowing the stack.
pub(crate) fn dismantle(value: Value) {
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, item)| item)),
            _ => {}
        }
    }
}

/// [`dismantle`] for an object's entries.
pub(crate) fn dismantle_map(map: Map<String, Value>) {
    dismantle(Value::Object(map));
}

/// Compact JSON output that also measures the deepest nesting of arrays and objects it
/// writes, for free: the depth check every encoding needs without scanning the bytes
/// again.
struct DepthFormatter<'a> {
    depth: usize,
    deepest: &'a mut usize,
}

impl DepthFormatter<'_> {
    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        byte: u8,
    ) -> std::io::Result<()> {
        self.depth += 1;
        *self.deepest = (*self.deepest).max(self.depth);
        writer.write_all(&[byte])
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        byte: u8,
    ) -> std::io::Result<()> {
        self.depth = self.depth.saturating_sub(1);
        writer.write_all(&[byte])
    }
}

impl serde_json::ser::Formatter for DepthFormatter<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b'[')
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b']')
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b'{')
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b'}')
    }
}

/// Appends `value` to `out` as compact JSON (the bytes `serde_json::to_writer` writes) and
/// returns the deepest nesting of arrays and objects in it, as [`nesting_depth`] would.
pub(crate) fn write_measuring_depth<T: serde::Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> serde_json::Result<usize> {
    let mut deepest = 0;
    value.serialize(&mut serde_json::Serializer::with_formatter(
        out,
        DepthFormatter {
            depth: 0,
            deepest: &mut deepest,
        },
    ))?;
    Ok(deepest)
}

/// A `serde_json::Value` that refused duplicate object keys while it was decoded.
pub(crate) struct StrictValue(pub(crate) Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite numbers are not valid JSON"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(d).map(|v| v.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        visit_strict_map(&mut access).map(Value::Object)
    }
}

fn visit_strict_map<'de, A: MapAccess<'de>>(
    access: &mut A,
) -> Result<Map<String, Value>, A::Error> {
    let mut map = Map::new();
    while let Some(key) = access.next_key::<String>()? {
        let StrictValue(value) = access.next_value()?;
        if map.contains_key(&key) {
            return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
        }
        map.insert(key, value);
    }
    Ok(map)
}

/// A JSON object that refused duplicate keys while it was decoded.
pub(crate) struct StrictMap(pub(crate) Map<String, Value>);

impl<'de> Deserialize<'de> for StrictMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor;
        impl<'de> Visitor<'de> for MapVisitor {
            type Value = Map<String, Value>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                visit_strict_map(&mut access)
            }
        }
        deserializer.deserialize_map(MapVisitor).map(StrictMap)
    }
}

/// A `T` that was decoded from a JSON object, never from an array of field values. Serde's
/// derived decoders also accept a struct written as an array of its field values
/// (`["gpt-4o", null, 8]`), a form this crate never writes and a reader in another language
/// would not expect; a snapshot must not be able to use it.
pub(crate) struct ObjectOnly<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(ObjectVisitor(std::marker::PhantomData))
            .map(ObjectOnly)
    }
}

/// An optional struct-typed field that remembers whether it was there at all: absent
/// (with `#[serde(default)]`), `null`, or a JSON object (never the array form).
#[derive(Debug, Default)]
pub(crate) enum Field<T> {
    #[default]
    Absent,
    Null,
    Object(T),
}

impl<T> Field<T> {
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, Field::Absent)
    }

    pub(crate) fn into_option(self) -> Option<T> {
        match self {
            Field::Object(value) => Some(value),
            Field::Absent | Field::Null => None,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Option::<ObjectOnly<T>>::deserialize(deserializer).map(|o| match o {
            Some(ObjectOnly(value)) => Field::Object(value),
            None => Field::Null,
        })
    }
}

/// `#[serde(deserialize_with)]` helpers.
pub(crate) mod strict {
    use std::fmt;

    use super::{ObjectOnly, StrictMap, StrictValue};
    use serde::de::{SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer};
    use serde_json::{Map, Value};

    /// A struct-typed field that must be a JSON object.
    pub(crate) fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        ObjectOnly::deserialize(d).map(|o| o.0)
    }

    /// A list of struct-typed items, each of which must be a JSON object, in a vector
    /// that holds no more room than it needs: serde's own vector decoding starts at room
    /// for four items, and a message's content is usually one block, so a transcript of
    /// a million small messages held three blocks' worth of unused room per message (about
    /// 400 bytes each, four times the rest of the message).
    pub(crate) fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        struct Objects<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Objects<T> {
            type Value = Vec<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of JSON objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
                let Some(ObjectOnly(first)) = seq.next_element()? else {
                    return Ok(Vec::new());
                };
                let Some(ObjectOnly(second)) = seq.next_element()? else {
                    return Ok(vec![first]);
                };
                let mut items = Vec::with_capacity(4);
                items.push(first);
                items.push(second);
                while let Some(ObjectOnly(item)) = seq.next_element()? {
                    items.push(item);
                }
                // Short lists (a message's blocks) are trimmed; a long one (a transcript)
                // wastes at most its last doubling, in pages never touched.
                if items.len() < 64 {
                    items.shrink_to_fit();
                }
                Ok(items)
            }
        }
        d.deserialize_seq(Objects(std::marker::PhantomData))
    }

    pub(crate) fn value<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(d).map(|v| v.0)
    }

    pub(crate) fn map<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
        StrictMap::deserialize(d).map(|v| v.0)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The deepest nesting of arrays and objects in a JSON document, found by scanning its
    /// bytes (brackets inside strings do not count): the reference
    /// [`write_measuring_depth`](super::write_measuring_depth) is checked against.
    pub(crate) fn nesting_depth(json: &[u8]) -> usize {
        let (mut depth, mut deepest) = (0usize, 0usize);
        let (mut in_string, mut escaped) = (false, false);
        for &byte in json {
            if in_string {
                match byte {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        deepest
    }

    #[test]
    fn refuses_duplicate_keys_at_any_depth() {
        let err = serde_json::from_str::<StrictValue>(r#"{"a":1,"a":2}"#)
            .err()
            .unwrap();
        assert!(err.to_string().contains("duplicate key \"a\""), "{err}");
        assert!(serde_json::from_str::<StrictValue>(r#"[{"x":{"b":1,"b":1}}]"#).is_err());
        assert!(serde_json::from_str::<StrictMap>(r#"{"k":[],"k":[]}"#).is_err());
    }

    #[test]
    fn nesting_depth_matches_what_the_parser_reads_back() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(nesting_depth(br#"{"a":"[[[{{","b":[{}]}"#), 3);
        assert_eq!(nesting_depth(br#"["\"[", []]"#), 2);
        let deepest = nested(MAX_JSON_DEPTH);
        assert_eq!(nesting_depth(deepest.as_bytes()), MAX_JSON_DEPTH);
        assert!(serde_json::from_str::<StrictValue>(&deepest).is_ok());
        assert!(serde_json::from_str::<StrictValue>(&nested(MAX_JSON_DEPTH + 1)).is_err());
    }

    fn nested_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            "[\\[\\]{}\"\\\\a]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(12, 64, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map("[a-z\\[{]{0,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn measuring_while_writing_agrees_with_scanning_what_was_written(value in nested_value()) {
            let mut out = Vec::new();
            let depth = write_measuring_depth(&mut out, &value).unwrap();
            proptest::prop_assert_eq!(&out, &serde_json::to_vec(&value).unwrap());
            proptest::prop_assert_eq!(depth, nesting_depth(&out));
        }
    }

    #[test]
    fn measuring_while_writing_gives_the_bytes_and_depth_of_a_scan() {
        for text in [
            r#"{"a":"[[[{{","b":[{}],"c":[[[[1]]]],"d":"\\\"{"}"#,
            "[]",
            "1",
            r#"[{"x":[{"y":{}}]},[]]"#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            let mut out = Vec::new();
            let depth = write_measuring_depth(&mut out, &value).unwrap();
            assert_eq!(out, serde_json::to_vec(&value).unwrap());
            assert_eq!(depth, nesting_depth(&out), "{text}");
        }
    }

    #[test]
    fn keeps_numbers_exactly() {
        let text = r#"{"i":-3,"u":18446744073709551615,"f":1.0,"g":0.1,"h":228.03,"e":1e-7}"#;
        let StrictValue(v) = serde_json::from_str(text).unwrap();
        let plain: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v, plain);
        assert!(v["f"].is_f64());
        assert!(v["u"].is_u64());
        let again: Value = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(again, v);
    }
}
