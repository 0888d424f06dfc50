//! A message's stored JSON form (docs/FORMAT.md, "Messages"): the neutral form (`role`,
//! `content`, `extra`, `wire`), or, for a message that keeps its provider's JSON text, a
//! one-member object naming the codec, `{"openai_chat": <the provider's message>}`, whose
//! value is that text written verbatim. The two are told apart by the first key: the
//! neutral form has no member named after a codec.

use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::exact::{Codec, Raw};
use super::{ContentBlock, Message, MessageWire, Role, TextBlock, ToolCall, ToolResult, WireRepr};
use crate::json::strict;

/// The neutral form, written.
#[derive(Serialize)]
struct NeutralRef<'a> {
    role: Role,
    content: &'a [ContentBlock],
    #[serde(skip_serializing_if = "Map::is_empty")]
    extra: &'a Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wire: Option<WireRepr>,
}

/// The neutral form, read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Neutral {
    role: Role,
    #[serde(deserialize_with = "blocks")]
    content: Vec<ContentBlock>,
    #[serde(default, deserialize_with = "strict::map")]
    extra: Map<String, Value>,
    #[serde(default, deserialize_with = "strict::object")]
    wire: WireRepr,
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if let Some(raw) = self.raw() {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry(raw.codec.stored_key(), &*raw.text)?;
            return map.end();
        }
        let wire = (!self.has_no_hints()).then(|| WireRepr {
            content: self.wire.content,
            tool_calls: self.wire.tool_calls,
            role: self.wire.role,
            codec: self.wire.codec,
            role_absent: self.wire.role_absent,
            items: self.items().map(<[_]>::to_vec),
        });
        NeutralRef {
            role: self.role,
            content: &self.content,
            extra: &self.extra,
            wire,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let Some(first) = map.next_key::<KeyName<'de>>()? else {
            return Err(de::Error::missing_field("role"));
        };
        if let Some(codec) = Codec::from_stored_key(first.as_str()) {
            let text: Box<RawValue> = map.next_value()?;
            if let Some(other) = map.next_key::<KeyName<'de>>()? {
                return Err(de::Error::custom(format_args!(
                    "a message stored as {} provider JSON has another member {:?}",
                    codec.stored_key(),
                    other.as_str()
                )));
            }
            return Raw::decode(codec, text).map_err(de::Error::custom);
        }
        let neutral = Neutral::deserialize(de::value::MapAccessDeserializer::new(Replay {
            first: Some(first),
            rest: map,
        }))?;
        let wire = neutral.wire;
        let mut message = Message {
            role: neutral.role,
            content: neutral.content,
            extra: neutral.extra,
            wire: MessageWire {
                content: wire.content,
                tool_calls: wire.tool_calls,
                role: wire.role,
                codec: wire.codec,
                role_absent: wire.role_absent,
            },
            rare: None,
        };
        message.set_items(wire.items);
        Ok(message)
    }
}

/// A key, borrowed from the input when it can be.
enum KeyName<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl KeyName<'_> {
    fn as_str(&self) -> &str {
        match self {
            KeyName::Borrowed(s) => s,
            KeyName::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for KeyName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(KeyName::Borrowed(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(KeyName::Owned(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(KeyName::Owned(v))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// The members of a map whose first key was already read: that key, then the rest.
struct Replay<'de, A> {
    first: Option<KeyName<'de>>,
    rest: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Replay<'de, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.first.take() {
            Some(KeyName::Borrowed(key)) => seed
                .deserialize(de::value::BorrowedStrDeserializer::new(key))
                .map(Some),
            Some(KeyName::Owned(key)) => seed.deserialize(key.into_deserializer()).map(Some),
            None => self.rest.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.rest.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.rest
            .size_hint()
            .map(|n| n + usize::from(self.first.is_some()))
    }
}

/// A message's content blocks: [`strict::objects`] of [`ContentBlock`], each decoded by
/// [`StoredBlock`] (collected in place: a `StoredBlock` is a `ContentBlock`).
fn blocks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ContentBlock>, D::Error> {
    strict::objects::<D, StoredBlock>(d).map(|blocks| blocks.into_iter().map(|b| b.0).collect())
}

/// A content block as stored, decoded into exactly what `ContentBlock`'s derived decoder
/// gives, faster when `type` is its first member (as this crate writes it): the derive
/// (an internally tagged enum) first copies every member of the block into a buffer to
/// find the tag, then decodes the block from that copy, which was about a third of the
/// time of loading a transcript. With the tag first, the block's members are decoded in
/// place instead; otherwise (the tag elsewhere, or none) the derived decoder is given the
/// whole block. Only ever decoded from an object ([`strict::objects`] checks).
struct StoredBlock(ContentBlock);

/// The kinds of block, as the derived decoder names and reads its tag (a variant
/// identifier, so the same values are accepted and the same errors given).
#[derive(Deserialize)]
#[serde(variant_identifier, rename_all = "snake_case")]
enum BlockTag {
    Text,
    ToolCall,
    ToolResult,
    Other,
}

/// The members of an `other` block after its tag, as the derive reads them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OtherBlock {
    #[serde(deserialize_with = "strict::value")]
    value: Value,
}

const TAG: &str = "type";

impl<'de> Deserialize<'de> for StoredBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(BlockVisitor).map(StoredBlock)
    }
}

struct BlockVisitor;

impl<'de> Visitor<'de> for BlockVisitor {
    type Value = ContentBlock;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("internally tagged enum ContentBlock")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContentBlock, A::Error> {
        let Some(first) = map.next_key::<KeyName<'de>>()? else {
            return Err(de::Error::missing_field(TAG));
        };
        if first.as_str() != TAG {
            return ContentBlock::deserialize(de::value::MapAccessDeserializer::new(Replay {
                first: Some(first),
                rest: map,
            }));
        }
        let tag: BlockTag = map.next_value()?;
        let rest = de::value::MapAccessDeserializer::new(AfterTag(map));
        Ok(match tag {
            BlockTag::Text => ContentBlock::Text(TextBlock::deserialize(rest)?),
            BlockTag::ToolCall => ContentBlock::ToolCall(Box::new(ToolCall::deserialize(rest)?)),
            BlockTag::ToolResult => {
                ContentBlock::ToolResult(Box::new(ToolResult::deserialize(rest)?))
            }
            BlockTag::Other => ContentBlock::Other {
                value: OtherBlock::deserialize(rest)?.value,
            },
        })
    }
}

/// The members of a block after its tag: a second tag is refused as the derive refuses it.
struct AfterTag<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for AfterTag<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.0.next_key::<KeyName<'de>>()? {
            None => Ok(None),
            Some(key) if key.as_str() == TAG => Err(de::Error::duplicate_field(TAG)),
            Some(KeyName::Borrowed(key)) => seed
                .deserialize(de::value::BorrowedStrDeserializer::new(key))
                .map(Some),
            Some(KeyName::Owned(key)) => seed.deserialize(key.into_deserializer()).map(Some),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.0.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of blocks decoded the fast way ([`blocks`]) and the derived way.
    #[derive(Deserialize)]
    struct Both {
        #[serde(deserialize_with = "blocks")]
        fast: Vec<ContentBlock>,
        #[serde(deserialize_with = "strict::objects")]
        derived: Vec<ContentBlock>,
    }

    /// `text` with the decoder's position cut off: a block decoded in place reports a
    /// semantic error where it is, the derive where the block ends.
    fn without_position(error: &serde_json::Error) -> String {
        let text = error.to_string();
        text.find(" at line ")
            .map_or(text.clone(), |cut| text[..cut].to_owned())
    }

    /// Every block, well formed or not, decodes to what the derived decoder gives: the
    /// same blocks, or an error with the same message.
    #[test]
    fn blocks_decode_as_the_derived_decoder_decodes_them() {
        let cases = [
            r#"{"type":"text","text":"a"}"#,
            r#"{"type":"text","text":"a","extra":{"k":[1,2.5]}}"#,
            r#"{"text":"a","type":"text"}"#,
            r#"{"type":"tool_call","id":"c","name":"f","input":{"x":1}}"#,
            r#"{"type":"tool_call","id":"c","name":"f","arguments":"{\"x\": 1}"}"#,
            r#"{"type":"tool_call","id":"c","name":"f"}"#,
            r#"{"type":"tool_call","id":"c","name":"f","input":1,"arguments":"x"}"#,
            r#"{"type":"tool_result","call_id":"c","output":"ok"}"#,
            r#"{"type":"tool_result","call_id":"c","output":[{"type":"text","text":"t"}],"is_error":true}"#,
            r#"{"type":"tool_result","call_id":"c","output":5}"#,
            r#"{"type":"other","value":{"type":"image","data":"x"}}"#,
            r#"{"value":null,"type":"other"}"#,
            r#"{"type":"other"}"#,
            r#"{"type":"other","value":1,"more":2}"#,
            "{}",
            r#"{"text":"a"}"#,
            r#"{"type":"bogus","text":"a"}"#,
            r#"{"type":0,"text":"a"}"#,
            r#"{"type":null}"#,
            r#"{"type":"text","type":"text","text":"a"}"#,
            r#"{"type":"text","text":"a","type":"other"}"#,
            r#"{"type":"text","text":"a","text":"b"}"#,
            r#"{"type":"text","text":5}"#,
            r#"{"type":"text","text":"a","unknown":1}"#,
            r#"{"type":"text","text":"a","extra":{"k":1,"k":2}}"#,
            r#"{"type":"text"}"#,
        ];
        for case in cases {
            let json = format!(r#"{{"fast":[{case}],"derived":[{case}]}}"#);
            let fast = serde_json::from_str::<Both>(
                &json.replace(&format!(r#""derived":[{case}]"#), r#""derived":[]"#),
            );
            let derived = serde_json::from_str::<Both>(
                &json.replace(&format!(r#""fast":[{case}]"#), r#""fast":[]"#),
            );
            match (fast, derived) {
                (Ok(fast), Ok(derived)) => assert_eq!(fast.fast, derived.derived, "{case}"),
                (Err(fast), Err(derived)) => {
                    assert_eq!(
                        without_position(&fast),
                        without_position(&derived),
                        "{case}"
                    );
                }
                (fast, derived) => panic!(
                    "{case}: fast {:?}, derived {:?}",
                    fast.map(|b| b.fast),
                    derived.map(|b| b.derived)
                ),
            }
        }
    }
}
