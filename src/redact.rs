//! Secret redaction applied to snapshots before they are written.

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::transcript::{ContentBlock, Message, ToolArguments, ToolOutput};

/// Rewrites secrets out of text before a snapshot is stored.
///
/// A [`Harness`](crate::Harness) with a redactor
/// ([`HarnessBuilder::redactor`](crate::HarnessBuilder::redactor)) applies it to every
/// string a snapshot carries (message text, tool arguments and results, provider fields,
/// metadata, the system prompt) before saving; ids, tool names, roles and the model name
/// are left alone. The session in memory is not changed: the model keeps seeing the
/// original text until the session is resumed from the store.
///
/// # Examples
///
/// ```
/// use std::borrow::Cow;
/// use agent_session::Redactor;
///
/// /// Hides one known password.
/// struct HideHunter2;
///
/// impl Redactor for HideHunter2 {
///     fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
///         if text.contains("hunter2") {
///             Cow::Owned(text.replace("hunter2", "*******"))
///         } else {
///             Cow::Borrowed(text)
///         }
///     }
/// }
///
/// assert_eq!(HideHunter2.redact("my password is hunter2"), "my password is *******");
/// ```
pub trait Redactor: Send + Sync {
    /// `text` with secrets replaced; borrow it unchanged when there is nothing to hide.
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str>;

    /// True if a JSON string value under `key` is a secret as a whole (an `"api_key"`
    /// field of tool arguments or metadata), whatever it looks like. Default: never.
    fn is_secret_key(&self, key: &str) -> bool {
        let _ = key;
        false
    }

    /// Identifies this redactor's rules, if they never change: two calls returning the same
    /// `Some` promise identical redactions. A store then knows that history it holds,
    /// redacted with these rules, needs no new redaction, and saves only what is new.
    /// Default `None`: unknown, so history that redaction changes is written again in
    /// full (correct, but a whole rewrite per save while it contains a secret).
    fn rules_id(&self) -> Option<u64> {
        None
    }
}

/// The text that replaces each secret found by [`PatternRedactor`].
pub const REDACTED: &str = "[REDACTED]";

/// Shapes of common credentials, for [`PatternRedactor::common_secrets`]. Each is specific
/// enough (a known prefix, or a keyword next to a long opaque value) that ordinary prose
/// and code rarely match.
const COMMON_SECRET_PATTERNS: &[&str] = &[
    // OpenAI and Anthropic API keys: sk-..., sk-proj-..., sk-ant-api03-...
    r"\bsk-[A-Za-z0-9_-]{20,}",
    // GitHub tokens.
    r"\bgh[pousr]_[A-Za-z0-9]{36,}",
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",
    // AWS access key ids.
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    // Slack tokens.
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    // Google API keys.
    r"\bAIza[0-9A-Za-z_-]{35}",
    // Stripe secret and restricted keys.
    r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",
    // JSON Web Tokens.
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    // HTTP bearer credentials.
    r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}",
    // PEM private keys, whole.
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    // key = value assignments of credential-named keys with a long opaque value; only the
    // value (the capture group) is replaced, so JSON text stays JSON.
    r#"(?i)\b(?:api[_-]?key|secret[_-]?key|client[_-]?secret|access[_-]?token|auth[_-]?token|password)\b["']?\s*[:=]\s*["']?([A-Za-z0-9._~+/=-]{12,})"#,
];

/// JSON keys whose string values are secrets as a whole, for
/// [`PatternRedactor::common_secrets`]: `api_key`, `OPENAI_API_KEY`, `client_secret`,
/// `auth_token`, `password`, `db_password` and the like (not `max_tokens`).
const COMMON_SECRET_KEYS: &str = r"(?i)^(?:.*[_-])?(?:api[_-]?key|apikey|secret|secret[_-]?key|client[_-]?secret|access[_-]?token|auth[_-]?token|refresh[_-]?token|token|password|passwd)$";

/// A [`Redactor`] that replaces every match of a set of regular expressions with
/// [`REDACTED`]. When a pattern has capture groups, only the first group that took part in
/// the match is replaced (so `password=(\S+)` keeps `password=`). Optionally, every JSON
/// string value under a key matching another expression is replaced whole
/// ([`with_secret_keys`](Self::with_secret_keys)).
///
/// [`PatternRedactor::common_secrets`] covers common API-key and token shapes: OpenAI and
/// Anthropic keys (`sk-…`), GitHub tokens, AWS access key ids, Slack, Google and Stripe
/// keys, JSON Web Tokens, `Bearer` credentials, PEM private keys, and `api_key = …`-style
/// assignments. No pattern list is complete: treat redaction as a safety net, not a
/// guarantee.
///
/// # Examples
///
/// ```
/// use agent_session::{PatternRedactor, Redactor};
///
/// let redactor = PatternRedactor::common_secrets();
/// let text = "export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx";
/// assert_eq!(redactor.redact(text), "export OPENAI_API_KEY=[REDACTED]");
///
/// let custom = PatternRedactor::new([r"\binternal-[0-9]{6}\b"])?;
/// assert_eq!(custom.redact("ticket internal-123456"), "ticket [REDACTED]");
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct PatternRedactor {
    /// All patterns as one alternation, so each string is scanned once.
    combined: Regex,
    /// Keys whose JSON string values are redacted whole.
    secret_keys: Option<Regex>,
}

impl PatternRedactor {
    /// A hash of the patterns: they never change once the redactor is built.
    fn rules_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.combined.as_str().hash(&mut hasher);
        self.secret_keys
            .as_ref()
            .map(Regex::as_str)
            .hash(&mut hasher);
        hasher.finish()
    }
}

impl PatternRedactor {
    /// A redactor for the given patterns ([`regex`](https://docs.rs/regex) syntax).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming the first pattern that does not compile, or if
    /// there are none.
    pub fn new<I, S>(patterns: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut alternatives = Vec::new();
        for pattern in patterns {
            let pattern = pattern.as_ref();
            Regex::new(pattern).map_err(|e| Error::InvalidArgument {
                reason: format!("redaction pattern {pattern:?} does not compile: {e}"),
            })?;
            alternatives.push(format!("(?:{pattern})"));
        }
        if alternatives.is_empty() {
            return Err(Error::InvalidArgument {
                reason: "a PatternRedactor needs at least one pattern".to_owned(),
            });
        }
        let combined = Regex::new(&alternatives.join("|")).map_err(|e| Error::InvalidArgument {
            reason: format!("redaction patterns do not compile together: {e}"),
        })?;
        Ok(PatternRedactor {
            combined,
            secret_keys: None,
        })
    }

    /// Also redacts, whole, every JSON string value whose key matches `pattern` (default:
    /// none).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `pattern` does not compile.
    pub fn with_secret_keys(mut self, pattern: &str) -> Result<Self> {
        self.secret_keys = Some(Regex::new(pattern).map_err(|e| Error::InvalidArgument {
            reason: format!("secret-key pattern {pattern:?} does not compile: {e}"),
        })?);
        Ok(self)
    }

    /// A redactor for common API-key and token shapes (see the type docs). The patterns
    /// are compiled once per process.
    ///
    /// # Panics
    ///
    /// Never in practice: the built-in patterns are constants, compiled by this crate's
    /// tests.
    #[must_use]
    pub fn common_secrets() -> Self {
        static COMMON: OnceLock<PatternRedactor> = OnceLock::new();
        COMMON
            .get_or_init(|| {
                PatternRedactor::new(COMMON_SECRET_PATTERNS)
                    .and_then(|r| r.with_secret_keys(COMMON_SECRET_KEYS))
                    .expect("the built-in redaction patterns compile")
            })
            .clone()
    }
}

impl Default for PatternRedactor {
    /// [`PatternRedactor::common_secrets`].
    fn default() -> Self {
        PatternRedactor::common_secrets()
    }
}

impl Redactor for PatternRedactor {
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.combined
            .replace_all(text, |caps: &regex::Captures<'_>| {
                let whole = caps.get(0).expect("group 0 is the whole match");
                match caps.iter().skip(1).flatten().next() {
                    // Keep what surrounds the secret (a key name, a quote).
                    Some(secret) => {
                        let start = secret.start() - whole.start();
                        let end = secret.end() - whole.start();
                        let text = whole.as_str();
                        format!("{}{REDACTED}{}", &text[..start], &text[end..])
                    }
                    None => REDACTED.to_owned(),
                }
            })
    }

    fn is_secret_key(&self, key: &str) -> bool {
        self.secret_keys
            .as_ref()
            .is_some_and(|keys| keys.is_match(key))
    }

    fn rules_id(&self) -> Option<u64> {
        Some(self.rules_hash())
    }
}

/// Redacts `text` in place, allocating only when something changed; returns whether it
/// did.
pub(crate) fn redact_string(redactor: &dyn Redactor, text: &mut String) -> bool {
    if let Cow::Owned(redacted) = redactor.redact(text) {
        let changed = redacted != *text;
        *text = redacted;
        changed
    } else {
        false
    }
}

/// Redacts every string inside a JSON value (object keys are left alone); returns whether
/// anything changed.
pub(crate) fn redact_value(redactor: &dyn Redactor, value: &mut Value) -> bool {
    match value {
        Value::String(text) => redact_string(redactor, text),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| redact_value(redactor, v) | changed),
        Value::Object(map) => redact_map(redactor, map),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// Redacts every string value in a JSON object: whole under a secret key, by pattern
/// otherwise. Values under `encrypted_*` keys are opaque provider data and left alone.
/// Returns whether anything changed.
pub(crate) fn redact_map(redactor: &dyn Redactor, map: &mut Map<String, Value>) -> bool {
    let mut changed = false;
    for (key, value) in map.iter_mut() {
        if key.starts_with("encrypted_") {
            continue;
        }
        changed |= match value {
            Value::String(text) if !text.is_empty() && redactor.is_secret_key(key) => {
                let was_redacted = text == REDACTED;
                REDACTED.clone_into(text);
                !was_redacted
            }
            _ => redact_value(redactor, value),
        };
    }
    changed
}

/// Redacts a message's text, tool arguments and outputs, and provider fields; ids, tool
/// names and roles are kept so tool calls stay paired with their results. Returns whether
/// anything changed.
pub(crate) fn redact_message(redactor: &dyn Redactor, message: &mut Message) -> bool {
    let mut changed =
        redact_map(redactor, &mut message.extra) | redact_blocks(redactor, &mut message.content);
    if let Some(items) = message.rare.as_mut().and_then(|rare| rare.items.as_mut()) {
        for envelope in items.iter_mut().filter_map(|item| item.message.as_mut()) {
            changed |= redact_map(redactor, envelope);
        }
    }
    if changed {
        // The provider's text still holds what was redacted: the message is stored in the
        // neutral form, from the redacted fields, instead.
        message.set_raw(None);
    }
    changed
}

fn redact_blocks(redactor: &dyn Redactor, blocks: &mut [ContentBlock]) -> bool {
    let mut changed = false;
    for block in blocks {
        changed |= match block {
            ContentBlock::Text(t) => {
                redact_string(redactor, &mut t.text) | redact_map(redactor, &mut t.extra)
            }
            ContentBlock::ToolCall(call) => {
                let arguments = match &mut call.arguments {
                    ToolArguments::Json(value) => redact_value(redactor, value),
                    ToolArguments::Text(text) => redact_string(redactor, text),
                };
                arguments
                    | redact_map(redactor, &mut call.extra)
                    | redact_map(redactor, &mut call.wire.function_extra)
            }
            ContentBlock::ToolResult(result) => {
                let output = match &mut result.output {
                    ToolOutput::Text(text) => redact_string(redactor, text),
                    ToolOutput::Blocks(blocks) => redact_blocks(redactor, blocks),
                };
                output
                    | redact_map(redactor, &mut result.extra)
                    | redact_map(redactor, &mut result.wire.function_extra)
            }
            // A signed block (thinking) must come back byte for byte or the provider
            // rejects the conversation, and a redacted-thinking block is opaque.
            ContentBlock::Other { value }
                if value.get("signature").is_some()
                    || value.get("type").and_then(Value::as_str) == Some("redacted_thinking") =>
            {
                false
            }
            ContentBlock::Other { value } => redact_value(redactor, value),
        };
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacts(input: &str, expected: &str) {
        assert_eq!(
            PatternRedactor::common_secrets().redact(input),
            expected,
            "{input}"
        );
    }

    #[test]
    fn common_secret_shapes_are_redacted() {
        redacts(
            "key sk-abcdefghijklmnopqrstuvwxyz012345 end",
            "key [REDACTED] end",
        );
        redacts(
            "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789-abc",
            "[REDACTED]",
        );
        redacts("sk-proj-AAAAAAAAAAAAAAAAAAAAAAAA", "[REDACTED]");
        redacts(
            "token ghp_0123456789abcdefghijABCDEFGHIJ012345",
            "token [REDACTED]",
        );
        redacts("github_pat_11ABCDEFG0123456789_abcdefghijkl", "[REDACTED]");
        redacts("aws AKIAIOSFODNN7EXAMPLE here", "aws [REDACTED] here");
        redacts("xoxb-1234567890-abcdefghij", "[REDACTED]");
        redacts("AIzaSyA-1234567890abcdefghijklmnopqrstu", "[REDACTED]");
        redacts("sk_live_0123456789abcdefABCD", "[REDACTED]");
        redacts(
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            "jwt [REDACTED]",
        );
        redacts(
            "Authorization: Bearer abcdef0123456789abcdef",
            "Authorization: [REDACTED]",
        );
        redacts(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----",
            "[REDACTED]",
        );
        redacts(
            r#"{"api_key": "0123456789abcdef"}"#,
            r#"{"api_key": "[REDACTED]"}"#,
        );
        redacts("PASSWORD=correct-horse-battery", "PASSWORD=[REDACTED]");
    }

    #[test]
    fn ordinary_text_is_left_alone_and_borrowed() {
        let redactor = PatternRedactor::common_secrets();
        for text in [
            "fn main() { let sk = 1; }",
            "ask-me-anything",
            "the password field is required",
            "Bearer short",
            "session 0193b4f2-7c1a-7d3e-9f00-1234567890ab",
        ] {
            assert!(matches!(redactor.redact(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn secret_keys_match_credential_names_only() {
        let redactor = PatternRedactor::common_secrets();
        for key in [
            "api_key",
            "OPENAI_API_KEY",
            "password",
            "db_password",
            "auth-token",
            "token",
            "client_secret",
        ] {
            assert!(redactor.is_secret_key(key), "{key}");
        }
        for key in [
            "max_tokens",
            "path",
            "tokens",
            "passwords_checked",
            "keyboard",
        ] {
            assert!(!redactor.is_secret_key(key), "{key}");
        }
    }

    #[test]
    fn json_values_under_secret_keys_are_redacted_whole_and_json_stays_json() {
        let redactor = PatternRedactor::common_secrets();
        let mut value = serde_json::json!({
            "password": "short",
            "nested": [{"api_key": "x1"}],
            "max_tokens": 5,
            "encrypted_content": "sk-abcdefghijklmnopqrstuvwxyz",
            "note": "my key is sk-abcdefghijklmnopqrstuvwxyz",
        });
        redact_value(&redactor, &mut value);
        assert_eq!(
            value,
            serde_json::json!({
                "password": REDACTED,
                "nested": [{"api_key": REDACTED}],
                "max_tokens": 5,
                "encrypted_content": "sk-abcdefghijklmnopqrstuvwxyz",
                "note": "my key is [REDACTED]",
            })
        );
        let text = r#"{"password": "correcthorsebattery", "n": 1}"#;
        let redacted = redactor.redact(text);
        let parsed: Value = serde_json::from_str(&redacted).expect("still JSON");
        assert_eq!(parsed["password"], REDACTED);
    }

    #[test]
    fn signed_provider_blocks_are_left_alone() {
        let redactor = PatternRedactor::common_secrets();
        let signed = serde_json::json!({"type": "thinking", "thinking": "sk-abcdefghijklmnopqrstuvwxyz", "signature": "EqQB"});
        let mut message = Message::assistant(vec![ContentBlock::Other {
            value: signed.clone(),
        }]);
        redact_message(&redactor, &mut message);
        assert_eq!(message.content, vec![ContentBlock::Other { value: signed }]);
    }

    #[test]
    fn invalid_patterns_are_an_error_naming_the_pattern() {
        let err = PatternRedactor::new(["(unclosed"]).unwrap_err();
        assert!(err.to_string().contains("(unclosed"), "{err}");
        assert!(PatternRedactor::new(Vec::<String>::new()).is_err());
    }
}
