//! A provider's JSON text, checked and made compact without being re-encoded.
//!
//! `serde_json::Value` sorts object keys and reads every number that does not fit 64 bits
//! as an `f64`, so a message parsed into one and written again is not the message the
//! provider sent. [`minify`] instead walks the text once: it refuses what is not one valid
//! JSON value (RFC 8259) or what a stored session could not hold (duplicate keys, unpaired
//! UTF-16 surrogate escapes, nesting deeper than a limit), and removes only insignificant
//! whitespace, so strings and number lexemes stay byte for byte and keys stay in order.
//! The walk keeps a stack of its own: no input overflows the thread's stack.

use std::borrow::Cow;
use std::collections::HashSet;

/// Checked, compact JSON text and how deep it nests (0 for a scalar, 1 for a flat array
/// or object).
#[derive(Debug)]
pub(crate) struct Minified<'a> {
    pub(crate) text: Cow<'a, str>,
    pub(crate) depth: usize,
}

/// Why a text was refused, and at which byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LexError {
    pub(crate) offset: usize,
    pub(crate) problem: String,
}

impl std::fmt::Display for LexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (at byte {})", self.problem, self.offset)
    }
}

/// An open array or object.
enum Frame {
    Array,
    /// The keys seen so far, decoded (so `"a"` and `"\u0061"` are the same key).
    Object(HashSet<String>),
}

/// Checks that `text` is one JSON value nesting at most `max_depth` levels, with no
/// duplicate object keys and no unpaired surrogate escapes, and returns it without
/// insignificant whitespace (borrowed when it had none).
pub(crate) fn minify(text: &str, max_depth: usize) -> Result<Minified<'_>, LexError> {
    Lexer {
        bytes: text.as_bytes(),
        pos: 0,
        out: None,
        copied_to: 0,
    }
    .run(text, max_depth)
}

struct Lexer<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The compact text so far, once some whitespace had to be left out.
    out: Option<String>,
    /// The end of what `out` holds of the input (what is between it and `pos` is still to
    /// be copied).
    copied_to: usize,
}

impl<'a> Lexer<'a> {
    fn fail<T>(&self, problem: impl Into<String>) -> Result<T, LexError> {
        Err(LexError {
            offset: self.pos,
            problem: problem.into(),
        })
    }

    /// Skips whitespace, leaving it out of the compact text.
    fn skip_whitespace(&mut self, text: &'a str) {
        let start = self.pos;
        while matches!(self.bytes.get(self.pos), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.pos += 1;
        }
        if self.pos > start {
            let out = self
                .out
                .get_or_insert_with(|| String::with_capacity(text.len()));
            out.push_str(&text[self.copied_to..start]);
            self.copied_to = self.pos;
        }
    }

    fn run(mut self, text: &'a str, max_depth: usize) -> Result<Minified<'a>, LexError> {
        if text.starts_with('\u{feff}') {
            return self.fail("the text starts with a byte-order mark");
        }
        let mut stack: Vec<Frame> = Vec::new();
        let mut deepest = 0;
        self.skip_whitespace(text);
        // The loop reads one value (opening a container pushes a frame and goes on with its
        // first member), then closes what ends after it.
        'value: loop {
            match self.bytes.get(self.pos) {
                Some(b'{' | b'[') => {
                    if stack.len() >= max_depth {
                        return self.fail(format!("the JSON nests deeper than {max_depth} levels"));
                    }
                    let object = self.bytes[self.pos] == b'{';
                    self.pos += 1;
                    stack.push(if object {
                        Frame::Object(HashSet::new())
                    } else {
                        Frame::Array
                    });
                    deepest = deepest.max(stack.len());
                    self.skip_whitespace(text);
                    let close = if object { b'}' } else { b']' };
                    if self.bytes.get(self.pos) == Some(&close) {
                        self.pos += 1;
                        stack.pop();
                    } else {
                        if object {
                            self.key(&mut stack, text)?;
                        }
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal("true")?,
                Some(b'f') => self.literal("false")?,
                Some(b'n') => self.literal("null")?,
                Some(_) => return self.fail("expected a JSON value"),
                None => return self.fail("the text ends where a value should be"),
            }
            // After a value: a comma and the next member, or the end of containers.
            loop {
                self.skip_whitespace(text);
                let Some(frame) = stack.last() else {
                    break 'value;
                };
                let close = match frame {
                    Frame::Array => b']',
                    Frame::Object(_) => b'}',
                };
                match self.bytes.get(self.pos) {
                    Some(b',') => {
                        self.pos += 1;
                        self.skip_whitespace(text);
                        if matches!(frame, Frame::Object(_)) {
                            self.key(&mut stack, text)?;
                        }
                        continue 'value;
                    }
                    Some(&byte) if byte == close => {
                        self.pos += 1;
                        stack.pop();
                    }
                    Some(_) => {
                        return self.fail(format!(
                            "expected `,` or `{}` after a value",
                            char::from(close)
                        ))
                    }
                    None => return self.fail("the text ends inside an array or object"),
                }
            }
        }
        if self.pos != self.bytes.len() {
            return self.fail("more text follows the JSON value");
        }
        let text = match self.out {
            None => Cow::Borrowed(text),
            Some(mut out) => {
                out.push_str(&text[self.copied_to..]);
                Cow::Owned(out)
            }
        };
        Ok(Minified {
            text,
            depth: deepest,
        })
    }

    /// An object member's key and its colon, refusing a key seen before in the object.
    fn key(&mut self, stack: &mut [Frame], text: &'a str) -> Result<(), LexError> {
        if self.bytes.get(self.pos) != Some(&b'"') {
            return self.fail("expected a string key");
        }
        let start = self.pos;
        let key = self.string()?;
        let key = key.unwrap_or_else(|| text[start + 1..self.pos - 1].to_owned());
        if let Some(Frame::Object(keys)) = stack.last_mut() {
            if keys.contains(&key) {
                self.pos = start;
                return self.fail(format!("duplicate key {key:?}"));
            }
            keys.insert(key);
        }
        self.skip_whitespace(text);
        if self.bytes.get(self.pos) != Some(&b':') {
            return self.fail("expected `:` after a key");
        }
        self.pos += 1;
        self.skip_whitespace(text);
        Ok(())
    }

    /// A string; returns its decoded value if it had escapes (`None`: the raw bytes between
    /// the quotes are the value).
    fn string(&mut self) -> Result<Option<String>, LexError> {
        let start = self.pos + 1;
        self.pos += 1;
        let mut decoded: Option<String> = None;
        let mut plain_from = start;
        loop {
            let Some(&byte) = self.bytes.get(self.pos) else {
                return self.fail("the text ends inside a string");
            };
            match byte {
                b'"' => {
                    if let Some(value) = decoded.as_mut() {
                        value.push_str(self.slice(plain_from, self.pos));
                    }
                    self.pos += 1;
                    return Ok(decoded);
                }
                b'\\' => {
                    let value = decoded.get_or_insert_with(String::new);
                    value.push_str(
                        std::str::from_utf8(&self.bytes[plain_from..self.pos]).unwrap_or(""),
                    );
                    self.pos += 1;
                    let escaped = self.escape()?;
                    if let Some(value) = decoded.as_mut() {
                        value.push(escaped);
                    }
                    plain_from = self.pos;
                }
                0x00..=0x1f => return self.fail("a control character inside a string"),
                _ => self.pos += 1,
            }
        }
    }

    fn slice(&self, from: usize, to: usize) -> &str {
        // Boundaries are ASCII bytes of a `&str`, so always char boundaries.
        std::str::from_utf8(&self.bytes[from..to]).unwrap_or("")
    }

    /// One escape after its backslash; returns the character it stands for.
    fn escape(&mut self) -> Result<char, LexError> {
        let Some(&byte) = self.bytes.get(self.pos) else {
            return self.fail("the text ends inside an escape");
        };
        self.pos += 1;
        Ok(match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                match first {
                    0xd800..=0xdbff => {
                        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return self.fail(format!(
                                "the escape \\u{first:04x} is a lone UTF-16 surrogate"
                            ));
                        }
                        self.pos += 2;
                        let second = self.hex4()?;
                        if !(0xdc00..=0xdfff).contains(&second) {
                            return self.fail(format!(
                                "the escape \\u{first:04x} is a lone UTF-16 surrogate"
                            ));
                        }
                        let code = 0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00);
                        char::from_u32(code).unwrap_or('\u{fffd}')
                    }
                    0xdc00..=0xdfff => {
                        return self.fail(format!(
                            "the escape \\u{first:04x} is a lone UTF-16 surrogate"
                        ))
                    }
                    code => char::from_u32(code).unwrap_or('\u{fffd}'),
                }
            }
            _ => return self.fail("an invalid escape in a string"),
        })
    }

    fn hex4(&mut self) -> Result<u32, LexError> {
        let Some(digits) = self.bytes.get(self.pos..self.pos + 4) else {
            return self.fail("the text ends inside a \\u escape");
        };
        let mut code = 0;
        for &digit in digits {
            let Some(value) = char::from(digit).to_digit(16) else {
                return self.fail("a \\u escape needs four hexadecimal digits");
            };
            code = code * 16 + value;
        }
        self.pos += 4;
        Ok(code)
    }

    /// A number, by the JSON grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Result<(), LexError> {
        if self.bytes.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.bytes.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return self.fail("a number needs a digit"),
        }
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if !matches!(self.bytes.get(self.pos), Some(b'0'..=b'9')) {
                return self.fail("a number needs a digit after `.`");
            }
            self.digits();
        }
        if matches!(self.bytes.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.bytes.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !matches!(self.bytes.get(self.pos), Some(b'0'..=b'9')) {
                return self.fail("a number needs a digit in its exponent");
            }
            self.digits();
        }
        Ok(())
    }

    fn digits(&mut self) {
        while matches!(self.bytes.get(self.pos), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &str) -> Result<(), LexError> {
        if self.bytes.get(self.pos..self.pos + word.len()) == Some(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            self.fail("expected a JSON value")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compact(text: &str) -> String {
        minify(text, 127).unwrap().text.into_owned()
    }

    #[test]
    fn keeps_order_numbers_and_strings_and_drops_only_whitespace() {
        let text = "{ \"z\" : 1 , \"a\" : [ 18446744073709551616 , 1.10 , -0.0 , 1E3 ] ,\n\t\"s\" : \" x  \\u00e9\\n \" , \"t\": true, \"n\": null, \"o\": {} }";
        assert_eq!(
            compact(text),
            r#"{"z":1,"a":[18446744073709551616,1.10,-0.0,1E3],"s":" x  \u00e9\n ","t":true,"n":null,"o":{}}"#
        );
        let already = r#"{"b":[1,{"c":"d"}],"a":"\ud83d\ude00"}"#;
        let minified = minify(already, 127).unwrap();
        assert!(matches!(minified.text, Cow::Borrowed(_)));
        assert_eq!(minified.depth, 3);
        assert_eq!(minify("12", 127).unwrap().depth, 0);
        assert_eq!(compact(" \"\u{e9}\" "), "\"\u{e9}\"");
    }

    #[test]
    fn refuses_what_is_not_one_valid_json_value() {
        for text in [
            "",
            " ",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{1:2}",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "tru",
            "nul",
            "\"a",
            "\"\\x\"",
            "\"\\u12\"",
            "\"a\tb\"",
            "[1] [2]",
            "{\"a\":1}x",
            "NaN",
            "Infinity",
            "[1 2]",
            "\u{feff}{}",
        ] {
            assert!(minify(text, 127).is_err(), "{text:?}");
        }
    }

    #[test]
    fn refuses_duplicate_keys_also_when_spelled_differently() {
        let err = minify(r#"{"a":1,"b":{"x":1,"x":2}}"#, 127).unwrap_err();
        assert!(err.problem.contains("duplicate key \"x\""), "{err}");
        assert!(minify(r#"{"a":1,"\u0061":2}"#, 127).is_err());
        assert!(minify(r#"[{"a":1},{"a":2}]"#, 127).is_ok());
    }

    #[test]
    fn refuses_lone_surrogates() {
        for text in [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            r#""\ud800x""#,
        ] {
            let err = minify(text, 127).unwrap_err();
            assert!(err.problem.contains("surrogate"), "{text}: {err}");
        }
    }

    #[test]
    fn refuses_nesting_beyond_the_limit_without_recursing() {
        let deep = format!("{}{}", "[".repeat(4), "]".repeat(4));
        assert_eq!(minify(&deep, 4).unwrap().depth, 4);
        assert!(minify(&deep, 3).is_err());
        let very = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
        assert!(minify(&very, 127).is_err());
        assert_eq!(minify(&very, usize::MAX).unwrap().depth, 1_000_000);
    }
}
