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
use super::{ContentBlock, Message, MessageWire, Role, WireRepr};
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
    #[serde(deserialize_with = "strict::objects")]
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
