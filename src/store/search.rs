//! Search across sessions: [`SearchQuery`] (words a message must hold), and what a search
//! finds, a [`SearchPage`] of [`SessionHit`]s, each with its [`MessageHit`]s.
//!
//! Matching is the crate's, the same for every store: a message's searchable text is its
//! text blocks and its tools' outputs (text, and the text blocks of block outputs); it is
//! cut into words at every character that is not a letter or a digit
//! (`char::is_alphanumeric`) and compared in lower case (`str::to_lowercase`). A message
//! matches when every word of the query is one of its words, or, for a query word ending
//! in `*`, begins one. A store with an index of its own uses it to find candidates and this
//! matching to decide, so every store finds the same messages.

use serde_json::Value;

use super::filter::ListFilter;
use super::listing::{ListCursor, SessionSummary};
use super::{check_page_limit, ready, AsyncSessionStore, InlineStore, SessionStore};
use crate::clock;
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::snapshot::{History, Standing};
use crate::transcript::{ContentBlock, Message, Role, ToolOutput};

/// The most words a query holds.
pub const MAX_QUERY_WORDS: usize = 32;

/// The longest snippet a [`MessageHit`] carries, in characters.
const SNIPPET_CHARS: usize = 160;

/// What [`SessionStore::search`](crate::SessionStore::search) looks for: words that a
/// message must all hold.
///
/// A message's searchable text ([`searchable_text`]) is its text blocks and its tools'
/// outputs; it is cut into words at every character that is not a letter or a digit
/// (`char::is_alphanumeric`), compared in lower case. A message matches when every word
/// of the query is one of its words, or, for a query word ending in `*`, begins one. A
/// store with an index of its own may use it to find candidates, but decides with this
/// matching, so every store finds the same messages.
///
/// # Examples
///
/// ```
/// use agent_session::{Message, SearchQuery};
///
/// let query = SearchQuery::new("Lock bug")?;
/// assert!(query.matches_message(&Message::user("the lock-free queue had a bug")));
/// assert!(!query.matches_message(&Message::user("a deadlock, not a bug")));
/// assert!(SearchQuery::new("dead*")?.matches_message(&Message::user("a deadlock")));
/// assert!(SearchQuery::new("  ,;  ").is_err());
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    /// Lower-case words; a trailing `*` kept as [`Word::prefix`].
    words: Vec<Word>,
    in_metadata: bool,
    view_only: bool,
}

/// One word of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: String,
    prefix: bool,
}

impl SearchQuery {
    /// The query of the words in `text`. A word followed by `*` matches the words it
    /// begins.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `text` holds no word, or more than
    /// [`MAX_QUERY_WORDS`].
    pub fn new(text: &str) -> Result<Self> {
        let mut words = Vec::new();
        for (start, word) in word_spans(text) {
            let word = Word {
                text: word.to_lowercase(),
                prefix: text[start + word.len()..].starts_with('*'),
            };
            if !words.contains(&word) {
                words.push(word);
            }
        }
        if words.is_empty() {
            return Err(Error::InvalidArgument {
                reason: format!("the search {text:?} holds no word (letters or digits)"),
            });
        }
        if words.len() > MAX_QUERY_WORDS {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "the search holds {} words: at most {MAX_QUERY_WORDS}",
                    words.len()
                ),
            });
        }
        Ok(SearchQuery {
            words,
            in_metadata: false,
            view_only: false,
        })
    }

    /// Also match the session's metadata values (strings, and numbers as written), which
    /// are not searched otherwise; a session whose metadata matches is a hit even without
    /// a matching message ([`SessionHit::metadata_keys`]).
    #[must_use]
    pub fn in_metadata(mut self, yes: bool) -> Self {
        self.in_metadata = yes;
        self
    }

    /// Search only what the model sees now (the view), not what was rewound, compacted
    /// away or replaced (searched by default: the history keeps it).
    #[must_use]
    pub fn view_only(mut self, yes: bool) -> Self {
        self.view_only = yes;
        self
    }

    /// The query's words, lower case (a prefix word with its `*`).
    #[must_use]
    pub fn words(&self) -> Vec<String> {
        self.words
            .iter()
            .map(|w| {
                if w.prefix {
                    format!("{}*", w.text)
                } else {
                    w.text.clone()
                }
            })
            .collect()
    }

    /// Whether metadata values are searched ([`in_metadata`](Self::in_metadata)).
    #[must_use]
    pub fn searches_metadata(&self) -> bool {
        self.in_metadata
    }

    /// Whether only the view is searched ([`view_only`](Self::view_only)).
    #[must_use]
    pub fn searches_view_only(&self) -> bool {
        self.view_only
    }

    /// Whether `text` holds every word of the query.
    #[must_use]
    pub fn matches_text(&self, text: &str) -> bool {
        self.matches_pieces(std::iter::once(text))
    }

    /// Whether `pieces` together hold every word of the query (as their text joined with
    /// newlines would: a newline is never part of a word).
    ///
    /// Searches read every message of the sessions they look at, so this is the hot loop
    /// of every store's search: it allocates nothing for an ASCII word of the text (it
    /// compares it with the query's lower-case words ignoring ASCII case, which is what
    /// `to_lowercase` does to ASCII), and stops at the first word that completes the
    /// query. A word with other characters is lowered with `str::to_lowercase`, as
    /// before, so the matching is the same.
    fn matches_pieces<'t>(&self, pieces: impl IntoIterator<Item = &'t str>) -> bool {
        // At most MAX_QUERY_WORDS (32) words: one bit each.
        let all = u64::MAX >> (64 - self.words.len());
        let mut found = 0u64;
        for piece in pieces {
            for (_, word) in word_spans(piece) {
                found |= self.words_matched_by(word);
                if found == all {
                    return true;
                }
            }
        }
        false
    }

    /// The query words that `word` (of a text, any case) matches, one bit each.
    fn words_matched_by(&self, word: &str) -> u64 {
        let lowered;
        let (word, ascii) = if word.is_ascii() {
            (word, true)
        } else {
            lowered = word.to_lowercase();
            (lowered.as_str(), false)
        };
        let mut bits = 0;
        for (i, query) in self.words.iter().enumerate() {
            if query.matches(word, ascii) {
                bits |= 1 << i;
            }
        }
        bits
    }

    /// The query's words as an index is asked for them: each lower case, and whether it
    /// is a prefix.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub(crate) fn terms(&self) -> impl Iterator<Item = (&str, bool)> {
        self.words.iter().map(|w| (w.text.as_str(), w.prefix))
    }

    /// Whether `message`'s searchable text holds every word of the query.
    #[must_use]
    pub fn matches_message(&self, message: &Message) -> bool {
        self.matches_pieces(searchable_pieces(message))
    }

    /// The hits in `history` (only those in the view with
    /// [`view_only`](Self::view_only)).
    #[must_use]
    pub fn hits_in(&self, history: &History) -> Vec<MessageHit> {
        history
            .messages
            .iter()
            .enumerate()
            .filter(|(_, m)| !self.view_only || matches!(m.standing, Standing::InView { .. }))
            .filter(|(_, m)| self.matches_message(&m.message))
            .map(|(position, m)| MessageHit {
                position,
                standing: m.standing,
                role: m.message.role,
                snippet: self.snippet(&searchable_text(&m.message)),
            })
            .collect()
    }

    /// The top-level metadata keys of `metadata` whose values hold every word (strings,
    /// and numbers and booleans as written), if metadata is searched.
    #[must_use]
    pub fn metadata_hits(&self, metadata: &serde_json::Map<String, Value>) -> Vec<String> {
        if !self.in_metadata {
            return Vec::new();
        }
        metadata
            .iter()
            .filter(|(_, value)| {
                let mut text = String::new();
                collect_scalars(value, &mut text);
                self.matches_text(&text)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Up to [`SNIPPET_CHARS`] characters of `text` around the first word that matches.
    fn snippet(&self, text: &str) -> String {
        let first = word_spans(text)
            .find_map(|(start, word)| (self.words_matched_by(word) != 0).then_some(start));
        let at = first.unwrap_or(0);
        // Start a third of a snippet before the word, at a character boundary.
        let before: Vec<(usize, char)> = text[..at].char_indices().collect();
        let start = before
            .len()
            .checked_sub(SNIPPET_CHARS / 3)
            .map_or(0, |i| before[i].0);
        let snippet: String = text[start..].chars().take(SNIPPET_CHARS).collect();
        let snippet = snippet.split_whitespace().collect::<Vec<_>>().join(" ");
        if start > 0 {
            format!("…{snippet}")
        } else {
            snippet
        }
    }
}

impl Word {
    /// Whether `word` is this word, or begins with it for a prefix: `word` is lower case,
    /// or ASCII (`ascii`) in any case. This word is lower case (`str::to_lowercase`), so
    /// it holds no ASCII capital, and an ASCII word lowers to it exactly when the two are
    /// equal ignoring ASCII case.
    fn matches(&self, word: &str, ascii: bool) -> bool {
        let query = self.text.as_bytes();
        let word = word.as_bytes();
        let word = if self.prefix {
            match word.get(..query.len()) {
                Some(start) => start,
                None => return false,
            }
        } else {
            word
        };
        if ascii {
            word.eq_ignore_ascii_case(query)
        } else {
            word == query
        }
    }
}

/// The words of `text` (its maximal runs of letters and digits), each with its byte
/// offset: the one way text is cut into words, for queries, messages, snippets and
/// indexes alike.
pub(crate) fn word_spans(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = 0;
    std::iter::from_fn(move || {
        let start = find_class(text, rest, true)?;
        let end = find_class(text, start, false).unwrap_or(text.len());
        rest = end;
        Some((start, &text[start..end]))
    })
}

/// The offset of the first character of `text` from `from` (a character boundary) that
/// is alphanumeric (`alphanumeric`) or is not. ASCII bytes are classified as bytes:
/// `char::is_alphanumeric` of an ASCII character is `u8::is_ascii_alphanumeric`, and
/// decoding every character took twice as long on a 450-word turn (8.5 against 4 µs in a
/// throwaway micro-benchmark).
fn find_class(text: &str, from: usize, alphanumeric: bool) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = from;
    while let Some(&byte) = bytes.get(at) {
        if byte.is_ascii() {
            if byte.is_ascii_alphanumeric() == alphanumeric {
                return Some(at);
            }
            at += 1;
        } else {
            let c = text.get(at..)?.chars().next()?;
            if c.is_alphanumeric() == alphanumeric {
                return Some(at);
            }
            at += c.len_utf8();
        }
    }
    None
}

/// The words an index records for `messages`: the crate's words of their searchable
/// text, lower case, each once. A message holding every word of a query lies in a row of
/// an index whose words hold them all, so an index of these words never misses a match.
///
/// Sorted (by bytes) and borrowed where a word is lower case already: a save computes
/// this for every turn, so it allocates only for words it must lower.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn index_words(messages: &[Message]) -> Vec<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    // Each word once, then lowered, then sorted: text repeats its words (a turn of 450
    // words has 50 to 170 distinct ones), and lowering and sorting every occurrence took
    // 35 µs of such a turn (23 µs now; throwaway micro-benchmark, best of 20 × 2,000
    // calls). std's SipHash, not a faster hash: the text is a model's and its tools' (web
    // pages, files), and SipHash's random keys keep words crafted to collide from making a
    // save quadratic (foldhash measured 16 µs here).
    let distinct: std::collections::HashSet<&str> = messages
        .iter()
        .flat_map(searchable_pieces)
        .flat_map(word_spans)
        .map(|(_, word)| word)
        .collect();
    let mut words: Vec<Cow<'_, str>> = distinct
        .into_iter()
        .map(|word| {
            if !word.is_ascii() {
                Cow::Owned(word.to_lowercase())
            } else if word.bytes().any(|b| b.is_ascii_uppercase()) {
                Cow::Owned(word.to_ascii_lowercase())
            } else {
                Cow::Borrowed(word)
            }
        })
        .collect();
    // Words that differ in case only are one word now.
    words.sort_unstable();
    words.dedup();
    words
}

/// What search reads of `message`: its text blocks and its tools' outputs, one per line.
#[must_use]
pub fn searchable_text(message: &Message) -> String {
    let mut out = String::new();
    for piece in searchable_pieces(message) {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(piece);
    }
    out
}

/// The pieces of [`searchable_text`], in order, without joining them.
fn searchable_pieces(message: &Message) -> impl Iterator<Item = &str> {
    message.content.iter().flat_map(|block| {
        let (alone, blocks): (Option<&str>, &[ContentBlock]) = match block {
            ContentBlock::Text(t) => (Some(&t.text), &[]),
            ContentBlock::ToolResult(result) => match &result.output {
                ToolOutput::Text(text) => (Some(text), &[]),
                ToolOutput::Blocks(blocks) => (None, blocks),
            },
            _ => (None, &[]),
        };
        alone
            .into_iter()
            .chain(blocks.iter().filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            }))
    })
}

/// The strings, numbers and booleans in `value`, separated by newlines.
fn collect_scalars(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Number(n) => {
            out.push_str(&n.to_string());
            out.push('\n');
        }
        Value::Bool(b) => {
            out.push_str(if *b { "true\n" } else { "false\n" });
        }
        Value::Array(items) => items.iter().for_each(|v| collect_scalars(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_scalars(v, out)),
        Value::Null => {}
    }
}

/// A message that matched a search.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageHit {
    /// Where it is in the session's [`History::messages`] (oldest first).
    pub position: usize,
    /// Where it stands: in the view (at which index), or rewound, compacted away or
    /// replaced.
    pub standing: Standing,
    /// Who said it.
    pub role: Role,
    /// Up to 160 characters of its text around the first matching word.
    pub snippet: String,
}

/// A session a search found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionHit {
    /// The session, as a listing shows it.
    pub session: SessionSummary,
    /// Its messages that matched, oldest first.
    pub messages: Vec<MessageHit>,
    /// Its top-level metadata keys whose values matched
    /// ([`SearchQuery::in_metadata`]).
    pub metadata_keys: Vec<String>,
}

/// One page of search results: sessions newest first (as listings order them), each with
/// what matched.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SearchPage {
    /// The sessions found, at most the page's limit.
    pub hits: Vec<SessionHit>,
    /// Sessions that could not be read (they were not searched).
    pub unreadable: Vec<Error>,
    /// Where the next page starts, if the search went on past this one.
    pub next: Option<ListCursor>,
}

/// A search's span counts the sessions found, never what matched.
impl crate::telemetry::Traced for SearchPage {
    #[inline]
    fn trace(&self, span: &crate::telemetry::OpSpan) {
        span.record_count("agent_session.sessions", self.hits.len());
    }
}

/// The hit for `summary` whose history is `history`, if anything in it matched.
fn hit(
    query: &SearchQuery,
    summary: SessionSummary,
    history: &History,
    metadata: &serde_json::Map<String, Value>,
) -> Option<SessionHit> {
    let messages = query.hits_in(history);
    let metadata_keys = query.metadata_hits(metadata);
    (!messages.is_empty() || !metadata_keys.is_empty()).then_some(SessionHit {
        session: summary,
        messages,
        metadata_keys,
    })
}

/// How many sessions a scan lists at a time.
const SCAN_PAGE: usize = 100;

/// The walk a scan makes: its listing's horizon (see [`ListCursor`]), fixed by the first
/// page, and where it stands.
fn walk_start(after: Option<&ListCursor>) -> chrono::DateTime<chrono::Utc> {
    after.map_or_else(|| clock::horizon(chrono::Utc::now()), |c| c.position().2)
}

/// What a scan does with one session's outcome: a hit is kept, a session deleted meanwhile
/// is skipped, any other failure is reported as unreadable.
fn record(page: &mut SearchPage, outcome: Result<Option<SessionHit>>) {
    match outcome {
        Ok(Some(hit)) => page.hits.push(hit),
        Ok(None) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => page.unreadable.push(e),
    }
}

/// [`SessionStore::search`] by reading each listed session's history: what every store
/// without an index of its own does. Its cost is a listing plus a history read per
/// session searched. The one implementation is [`scan_async_where`]'s, run here on the
/// synchronous calls (as the lifecycle workflows are, see [`ready`]).
pub(crate) fn scan<S: SessionStore + ?Sized>(
    store: &S,
    query: &SearchQuery,
    filter: &ListFilter,
    limit: usize,
    after: Option<&ListCursor>,
) -> Result<SearchPage> {
    ready(scan_async(&InlineStore(store), query, filter, limit, after))
}

/// [`scan`], reading only the sessions `may_match` names (see [`scan_async_where`]).
#[cfg(feature = "sqlite")]
pub(crate) fn scan_where<S: SessionStore + ?Sized>(
    store: &S,
    query: &SearchQuery,
    filter: &ListFilter,
    limit: usize,
    after: Option<&ListCursor>,
    may_match: impl Fn(&SessionId) -> bool + Send + Sync,
) -> Result<SearchPage> {
    ready(scan_async_where(
        &InlineStore(store),
        query,
        filter,
        limit,
        after,
        may_match,
    ))
}

/// [`scan`] through the async calls.
pub(crate) async fn scan_async<S: AsyncSessionStore + ?Sized>(
    store: &S,
    query: &SearchQuery,
    filter: &ListFilter,
    limit: usize,
    after: Option<&ListCursor>,
) -> Result<SearchPage> {
    scan_async_where(store, query, filter, limit, after, |_| true).await
}

/// [`scan_async`], reading only the sessions `may_match` names (the others cannot match:
/// an index of the store's said so).
pub(crate) async fn scan_async_where<S: AsyncSessionStore + ?Sized>(
    store: &S,
    query: &SearchQuery,
    filter: &ListFilter,
    limit: usize,
    after: Option<&ListCursor>,
    may_match: impl Fn(&SessionId) -> bool + Send + Sync,
) -> Result<SearchPage> {
    check_page_limit(limit)?;
    filter.check(&store.indexed_metadata())?;
    let horizon = walk_start(after);
    let mut page = SearchPage::default();
    let mut after = after.cloned();
    loop {
        let listed = store
            .list_page_filtered(filter, SCAN_PAGE, after.as_ref())
            .await?;
        page.unreadable.extend(listed.unreadable);
        for summary in listed.sessions {
            let cursor = ListCursor::after_in(&summary, horizon);
            if !may_match(&summary.id) {
                continue;
            }
            record(&mut page, session_hit(store, query, summary).await);
            if page.hits.len() == limit {
                page.next = Some(cursor);
                return Ok(page);
            }
        }
        match listed.next {
            Some(next) => after = Some(next),
            None => return Ok(page),
        }
    }
}

/// The hit for the listed session `summary`, if anything of it matches: its history
/// read, and its metadata if the query searches it.
async fn session_hit<S: AsyncSessionStore + ?Sized>(
    store: &S,
    query: &SearchQuery,
    summary: SessionSummary,
) -> Result<Option<SessionHit>> {
    let history = store.history(&summary.id).await?;
    let metadata = if query.in_metadata {
        store.load(&summary.id).await?.metadata().clone()
    } else {
        serde_json::Map::new()
    };
    Ok(hit(query, summary, &history, &metadata))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_letters_and_digits_compared_in_lower_case() {
        let query = SearchQuery::new("ÜBER über, v2").expect("query");
        assert_eq!(query.words(), ["über", "v2"]);
        assert!(query.matches_text("Über alles (v2)"));
        assert!(!query.matches_text("überall v2"), "whole words only");
        assert!(SearchQuery::new("über*")
            .expect("query")
            .matches_text("ÜBERALL"));
        assert!(SearchQuery::new(" - ; ").is_err());
        let many: Vec<String> = (0..=MAX_QUERY_WORDS).map(|i| format!("w{i}")).collect();
        assert!(SearchQuery::new(&many.join(" ")).is_err());
    }

    /// The matching as it is defined (every word of the text lowered with
    /// `str::to_lowercase`, then compared), which the allocation-free loop must equal.
    fn reference_match(query: &SearchQuery, text: &str) -> bool {
        let words: Vec<String> = word_spans(text).map(|(_, w)| w.to_lowercase()).collect();
        query.words.iter().all(|q| {
            words.iter().any(|w| {
                if q.prefix {
                    w.starts_with(&q.text)
                } else {
                    *w == q.text
                }
            })
        })
    }

    /// Letters whose lower case is not what ASCII folding gives (`İ` lowers to two
    /// characters, `Σ` to `σ`, `K` (Kelvin) to ASCII `k`), with ASCII in both cases, and
    /// characters of three and four bytes, letters, digits and not (`中`, `٣`, `𝐀`, `😀`,
    /// a no-break space, an em dash), for the byte scan's steps over them.
    const ALPHABET: &[char] = &[
        'a', 'A', 'b', 'B', 'k', 'K', 'i', 'I', 'z', '1', ' ', '-', '\n', 'ü', 'Ü', 'σ', 'Σ', 'ς',
        'İ', '\u{307}', '\u{212A}', 'ß', 'ẞ', '中', '٣', '𝐀', '😀', '\u{A0}', '—',
    ];

    fn text_of(picks: &[usize]) -> String {
        picks
            .iter()
            .map(|&i| ALPHABET[i % ALPHABET.len()])
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn the_matching_loop_equals_lowering_every_word(
            text in proptest::collection::vec(0usize..64, 0..40),
            query in proptest::collection::vec(0usize..64, 1..8),
            prefix in proptest::bool::ANY,
        ) {
            let text = text_of(&text);
            let query = format!("{}{}", text_of(&query), if prefix { "*" } else { "" });
            if let Ok(query) = SearchQuery::new(&query) {
                proptest::prop_assert_eq!(
                    query.matches_text(&text),
                    reference_match(&query, &text),
                    "query {:?} text {:?}", query.words(), text
                );
            }
        }
    }

    /// The words of `text` as defined: maximal runs of `char::is_alphanumeric`, found
    /// character by character (what the byte scan of [`word_spans`] must equal).
    fn reference_spans(text: &str) -> Vec<(usize, &str)> {
        let mut spans = Vec::new();
        let mut start = None;
        for (at, c) in text.char_indices() {
            match (c.is_alphanumeric(), start) {
                (true, None) => start = Some(at),
                (false, Some(from)) => {
                    spans.push((from, &text[from..at]));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(from) = start {
            spans.push((from, &text[from..]));
        }
        spans
    }

    proptest::proptest! {
        #[test]
        fn word_spans_are_the_runs_of_alphanumeric_characters(
            text in proptest::collection::vec(0usize..64, 0..60),
        ) {
            let text = text_of(&text);
            proptest::prop_assert_eq!(word_spans(&text).collect::<Vec<_>>(), reference_spans(&text));
        }

        #[cfg(any(feature = "postgres", feature = "sqlite"))]
        #[test]
        fn index_words_are_every_word_lowered_once_in_order(
            text in proptest::collection::vec(0usize..64, 0..60),
            split in 0usize..60,
        ) {
            let text = text_of(&text);
            // Two messages: a word may repeat across them, in another case.
            let cut = text.char_indices().nth(split).map_or(text.len(), |(at, _)| at);
            let messages = [Message::user(&text[..cut]), Message::user(&text[cut..])];
            let mut expected: Vec<String> = Vec::new();
            for message in &messages {
                let text = message.text();
                expected.extend(reference_spans(&text).into_iter().map(|(_, w)| w.to_lowercase()));
            }
            expected.sort_unstable();
            expected.dedup();
            let words: Vec<String> = index_words(&messages).into_iter().map(Into::into).collect();
            proptest::prop_assert_eq!(words, expected);
        }
    }

    #[test]
    fn ascii_words_match_in_any_case_and_others_through_their_lower_case() {
        let query = SearchQuery::new("zanzibar k σ").expect("query");
        assert!(query.matches_text("ZanZIBAR: K, Σ"));
        // The Kelvin sign lowers to ASCII `k`; the loop must not compare it as ASCII.
        assert!(query.matches_text("zanzibar \u{212A} σ"));
        assert!(!query.matches_text("zanzibarx k σ"), "whole words only");
        assert!(SearchQuery::new("zan*")
            .expect("query")
            .matches_text("ZANZIBAR"));
        assert!(!SearchQuery::new("zanzibarquux*")
            .expect("query")
            .matches_text("ZANZIBAR"));
        // A message's pieces are words apart, as in its searchable text.
        let message = Message::new(
            Role::User,
            vec![ContentBlock::text("the lock"), ContentBlock::text("bug")],
        );
        let query = SearchQuery::new("lockbug").expect("query");
        assert!(!query.matches_message(&message));
        assert!(SearchQuery::new("lock bug")
            .expect("query")
            .matches_message(&message));
    }

    #[test]
    fn a_snippet_cuts_at_character_boundaries_around_the_first_match() {
        let text = format!("{} the lock bug {}", "🦀".repeat(200), "é".repeat(300));
        let query = SearchQuery::new("lock").expect("query");
        let snippet = query.snippet(&text);
        assert!(snippet.starts_with('…'), "{snippet}");
        assert!(snippet.contains("the lock bug"), "{snippet}");
        assert!(snippet.chars().count() <= SNIPPET_CHARS + 1);
        // No match (a metadata-only hit has no message): the text's start.
        assert_eq!(query.snippet("nothing  here"), "nothing here");
    }
}
