//! Decoding a snapshot's `usage` array: the form this crate writes read directly, anything
//! else by `serde_json`.
//!
//! A session keeps one usage entry per completion, and a long coding session has
//! thousands: through `serde_json`'s derived decoder each entry costs six keys matched as
//! strings, six values and a check of every key for UTF-8: about 0.45 µs an entry (a
//! throwaway program decoded a 200-message snapshot in 2.50 ms with 5,000 entries and in
//! 0.16 ms without them, most of a compacted session's load). The crate writes every entry
//! the same way (its derived encoder, compact: the six fields in order, integers without
//! sign, fraction or exponent), so that form is read by [`canonical`], which accepts
//! nothing else; any other text (spaces, another key order, a missing default, an escape
//! in a model name, a number `serde_json` reads differently) goes to `serde_json`, which
//! then decides what it means and reports what is wrong. The fast path therefore never
//! accepts what the decoder would refuse, nor reads anything differently (property tests
//! hold it to that).

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::json::strict;
use crate::usage::{Cost, Usage};

/// `#[serde(deserialize_with)]` for a snapshot's `usage`: a JSON array of usage objects.
pub(crate) fn usage_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Usage>, D::Error> {
    let raw = Box::<RawValue>::deserialize(d)?;
    decode(raw.get()).map_err(|e| D::Error::custom(InUsage(e)))
}

/// The usage entries of `json`, a JSON array of usage objects.
///
/// # Errors
///
/// What `serde_json` reports for text that is not such an array.
pub(crate) fn decode(json: &str) -> serde_json::Result<Vec<Usage>> {
    if let Some(entries) = canonical(json.as_bytes()) {
        return Ok(entries);
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let entries = strict::objects(&mut de)?;
    de.end()?;
    Ok(entries)
}

/// An error inside the `usage` array, said to be there. Its position within the array
/// is said in words: a message ending in "at line L column C" would be taken by
/// `serde_json` as the document's position, which is given after it instead.
struct InUsage(serde_json::Error);

impl fmt::Display for InUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        let what = match text.rsplit_once(" at line ") {
            Some((what, _)) if self.0.line() > 0 => what,
            _ => &text,
        };
        write!(
            f,
            "{what} (in `usage`, line {} column {} of the array)",
            self.0.line(),
            self.0.column()
        )
    }
}

/// The entries of `bytes` if it is exactly the form this crate writes; `None` otherwise.
fn canonical(bytes: &[u8]) -> Option<Vec<Usage>> {
    let mut text = Cursor { bytes, at: 0 };
    text.literal(b"[")?;
    let mut entries = Vec::new();
    if text.literal(b"]").is_some() {
        return text.at_end().then_some(entries);
    }
    loop {
        let (usage, used) = entry(&bytes[text.at..], entries.last())?;
        text.at += used;
        entries.push(usage);
        if text.literal(b",").is_none() {
            break;
        }
    }
    text.literal(b"]")?;
    text.at_end().then_some(entries)
}

/// The usage entry at the start of `bytes` and its length, if it is exactly in the form
/// this crate writes (and whole: a cut entry is `None`). `last`, the entry before it,
/// lends its model name when it is the same.
pub(crate) fn entry(bytes: &[u8], last: Option<&Usage>) -> Option<(Usage, usize)> {
    let mut text = Cursor { bytes, at: 0 };
    text.literal(b"{\"model\":\"")?;
    let model = text.plain_string()?;
    text.literal(b",\"input_tokens\":")?;
    let input_tokens = text.integer()?;
    text.literal(b",\"output_tokens\":")?;
    let output_tokens = text.integer()?;
    text.literal(b",\"cache_read_tokens\":")?;
    let cache_read_tokens = text.integer()?;
    text.literal(b",\"cache_write_tokens\":")?;
    let cache_write_tokens = text.integer()?;
    text.literal(b",\"cost_nano_usd\":")?;
    let cost = text.integer()?;
    text.literal(b"}")?;
    let model = match last {
        // Sessions mostly use one model: its name is copied, not checked again.
        Some(last) if last.model.as_bytes() == model => last.model.clone(),
        _ => std::str::from_utf8(model).ok()?.to_owned(),
    };
    let usage = Usage {
        model,
        input_tokens,
        output_tokens,
        cache_read_tokens,
        cache_write_tokens,
        cost: Cost::from_nano_usd(cost),
    };
    Some((usage, text.at))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn literal(&mut self, expected: &[u8]) -> Option<()> {
        let end = self.at.checked_add(expected.len())?;
        (self.bytes.get(self.at..end)? == expected).then(|| self.at = end)
    }

    fn at_end(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// The bytes of a string up to its closing quote (consumed), if it has no escape and
    /// no control character (which JSON does not allow unescaped).
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        let rest = self.bytes.get(self.at..)?;
        let len = memchr::memchr2(b'"', b'\\', rest)?;
        if rest[len] != b'"' {
            return None;
        }
        let content = &rest[..len];
        if content.iter().any(|&b| b < 0x20) {
            return None;
        }
        self.at += len + 1;
        Some(content)
    }

    /// A non-negative integer as JSON writes it (no leading zero) that fits a `u64`.
    fn integer(&mut self) -> Option<u64> {
        let rest = self.bytes.get(self.at..)?;
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        let mut value: u64 = 0;
        for &digit in &rest[..digits] {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
        }
        self.at += digits;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `serde_json` alone makes of `json`.
    fn by_serde(json: &str) -> serde_json::Result<Vec<Usage>> {
        let mut de = serde_json::Deserializer::from_str(json);
        let entries = strict::objects(&mut de)?;
        de.end()?;
        Ok(entries)
    }

    fn usage() -> impl Strategy<Value = Usage> {
        (
            prop_oneof![
                Just("gpt-4o".to_owned()),
                Just(String::new()),
                "[a-zA-Z0-9 ./:_\\-]{0,12}",
                "\\PC{0,6}",
                "[\"\\\\\u{1}\u{7f}é€😀]{0,3}",
            ],
            prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(model, input, output, read, write, cost)| {
                Usage::new(model)
                    .with_tokens(input, output)
                    .with_cache_tokens(read, write)
                    .with_cost(Cost::from_nano_usd(cost))
            })
    }

    proptest! {
        /// Every list the crate writes is read by the fast path, as `serde_json` reads it.
        #[test]
        fn what_the_crate_writes_is_read_directly_and_as_serde_reads_it(
            entries in proptest::collection::vec(usage(), 0..6)
        ) {
            let json = serde_json::to_string(&entries).expect("encode");
            let direct = canonical(json.as_bytes());
            // A model name with an escape is left to serde_json; everything else is read.
            let escapes = entries.iter().any(|u| u.model.chars().any(|c| c == '"' || c == '\\' || c < ' '));
            prop_assert_eq!(direct.is_none(), escapes);
            prop_assert_eq!(decode(&json).expect("decode"), entries.clone());
            prop_assert_eq!(by_serde(&json).expect("serde"), entries);
        }

        /// Whatever a byte changed, inserted or removed makes of the text, the fast path
        /// reads it only if `serde_json` reads it the same, and `decode` says what serde
        /// says.
        #[test]
        fn a_changed_text_is_read_directly_only_as_serde_reads_it(
            entries in proptest::collection::vec(usage(), 1..4),
            at in any::<prop::sample::Index>(),
            byte in prop_oneof![
                Just(b' '), Just(b'0'), Just(b'9'), Just(b'-'), Just(b'.'), Just(b'e'),
                Just(b'"'), Just(b'\\'), Just(b','), Just(b'}'), Just(b']'), Just(b'{'),
                Just(0x01u8), Just(0x7fu8), Just(0xc3u8), Just(0xffu8), any::<u8>()
            ],
            how in 0..3u8,
        ) {
            let mut bytes = serde_json::to_vec(&entries).expect("encode");
            let i = at.index(bytes.len());
            match how {
                0 => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ => { bytes.remove(i); }
            }
            let serde = std::str::from_utf8(&bytes).ok().map(by_serde);
            if let Some(direct) = canonical(&bytes) {
                match &serde {
                    Some(Ok(read)) => prop_assert_eq!(&direct, read),
                    other => prop_assert!(false, "the fast path read {:?}, serde: {:?}", direct, other),
                }
            }
            if let Ok(text) = std::str::from_utf8(&bytes) {
                let decoded = decode(text).map_err(|e| e.to_string());
                let serde = by_serde(text).map_err(|e| e.to_string());
                prop_assert_eq!(decoded, serde);
            }
        }
    }

    #[test]
    fn an_error_in_usage_says_so_and_where_in_the_document() {
        let snapshot =
            crate::SessionSnapshot::builder(crate::SessionId::parse("s").expect("id"), "m")
                .usage(vec![Usage::new("m"), Usage::new("m")])
                .build()
                .expect("snapshot");
        let good = String::from_utf8(snapshot.to_json().expect("encode")).expect("utf-8");
        let bad = good.replacen("\"output_tokens\":0", "\"output_tokens\":\"0\"", 2);
        let err = crate::SessionSnapshot::from_json(bad.as_bytes()).expect_err("a string count");
        let crate::Error::Malformed { source, .. } = err else {
            panic!("not malformed: {err:?}");
        };
        let text = source.to_string();
        assert!(text.contains("(in `usage`, line 1 column "), "{text}");
        // The position given is the document's: past where `usage` starts.
        let usage_at = bad.find("\"usage\"").expect("usage");
        let column = text
            .rsplit_once(" column ")
            .and_then(|(_, c)| {
                c.trim_end_matches(|ch: char| !ch.is_ascii_digit())
                    .parse::<usize>()
                    .ok()
            })
            .expect("a column");
        assert!(column > usage_at, "{text}");
    }

    #[test]
    fn forms_the_crate_does_not_write_go_to_serde() {
        let canonical_entry = r#"{"model":"m","input_tokens":1,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4,"cost_nano_usd":5}"#;
        assert!(canonical(format!("[{canonical_entry}]").as_bytes()).is_some());
        for other in [
            // Spaces, another order, a default left out, a leading zero, a fraction, an
            // exponent, a negative number, an escape, a raw control character, trailing
            // bytes, the array form.
            format!("[ {canonical_entry}]"),
            r#"[{"input_tokens":1,"model":"m","output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4,"cost_nano_usd":5}]"#.to_owned(),
            r#"[{"model":"m","input_tokens":1,"output_tokens":2,"cost_nano_usd":5}]"#.to_owned(),
            canonical_entry.replace(":1,", ":01,"),
            canonical_entry.replace(":1,", ":1.0,"),
            canonical_entry.replace(":1,", ":1e0,"),
            canonical_entry.replace(":1,", ":-1,"),
            canonical_entry.replace("\"m\"", "\"\\u006d\""),
            // A raw control character, which JSON allows only escaped.
            canonical_entry.replace("\"m\"", "\"m\u{1}\""),
            format!("[{canonical_entry}] "),
            r#"[["m",1,2,3,4,5]]"#.to_owned(),
            // One more than u64::MAX.
            canonical_entry.replace(":5}", ":18446744073709551616}"),
        ] {
            let text = if other.starts_with('[') { other } else { format!("[{other}]") };
            assert!(canonical(text.as_bytes()).is_none(), "{text}");
            assert_eq!(
                decode(&text).map_err(|e| e.to_string()),
                by_serde(&text).map_err(|e| e.to_string()),
                "{text}"
            );
        }
        // The spaces, the order and the defaults are read (by serde); the rest refused.
        assert!(decode(&format!("[ {canonical_entry}]")).is_ok());
        assert!(decode(r#"[["m",1,2,3,4,5]]"#).is_err());
        assert!(decode(&format!("[{}]", canonical_entry.replace(":1,", ":01,"))).is_err());
        assert!(decode(&format!(
            "[{}]",
            canonical_entry.replace("\"m\"", "\"m\u{1}\"")
        ))
        .is_err());
    }
}
