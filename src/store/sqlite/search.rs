//! Search in the SQLite store: an FTS5 index narrows the sessions to read, and the crate's
//! matching ([`SearchQuery`]) decides, so the results are the other stores'.
//!
//! Every row that brings messages into a session's history (its checkpoint, each entry)
//! has the words of those messages recorded in the transaction that writes the row: in
//! `search_pending` at first, then (see below) a row in `search_rows` and the words in
//! the FTS5 table `search_words` under the same rowid.
//! The words are the crate's (letters and digits, lower case, each once), spelled so that
//! FTS5's `ascii` tokenizer reads each as exactly one token: ASCII letters and digits as
//! they are, any other character as `_` + its code point in hex + `_` (`über` is
//! `_fc_ber`). The spelling goes character by character, so a word's prefix is spelled as
//! a prefix of the word's spelling and `word*` queries stay exact; and no tokenizer's idea
//! of a letter, case or diacritic can disagree with the crate's.
//!
//! Sessions saved before the index existed (tables version 1) are listed in `unindexed`
//! until their whole log is written again, and are always read.
//!
//! # Batched into FTS5
//!
//! FTS5 writes a new segment of its index at the end of every transaction that adds to
//! it. Indexing each save's words in its own transaction made a turn's save onto 10,000
//! messages 3.9 × the raw append + fdatasync of the turn's bytes (2.2 × with no index at
//! all; `cargo bench --bench sqlite --features sqlite -- append_turn`). So a save writes
//! its row's words to the plain table `search_pending`, in its transaction as before, and
//! the save that brings it to [`PENDING_ROWS`] rows moves them all into `search_rows` and
//! `search_words` at once (about 2.5 ms for 256 rows): one segment for that many saves.
//! A search asks FTS5 and also matches the pending rows itself, on the same spelled
//! words, in the same read transaction, so nothing saved is ever missing from a search.

use std::collections::HashSet;
use std::fmt::Write as _;

use rusqlite::Connection;

use super::SqliteSessionStore;
use crate::error::Result;
use crate::id::{Revision, SessionId};
use crate::store::search::{self, SearchQuery};
use crate::store::{ListCursor, ListFilter, SearchPage};
use crate::transcript::Message;

use super::rows::revision_column;

/// The tables search adds (tables version 2). The FTS5 table is contentless (the words
/// are not stored twice) with `contentless_delete`, so a session's rows can be deleted
/// by rowid.
pub(super) const CREATE_TABLES: &str = "
CREATE TABLE IF NOT EXISTS search_rows (
    row INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    revision INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS search_rows_session ON search_rows (session_id);
CREATE VIRTUAL TABLE IF NOT EXISTS search_words USING fts5(
    words, content = '', contentless_delete = 1, tokenize = \"ascii tokenchars '_'\"
);
CREATE TABLE IF NOT EXISTS unindexed (
    session_id TEXT NOT NULL PRIMARY KEY
) STRICT;
";

/// The table that tables version 3 adds: rows whose words are not in `search_words` yet.
pub(super) const CREATE_PENDING_TABLE: &str = "
CREATE TABLE IF NOT EXISTS search_pending (
    row INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    revision INTEGER NOT NULL,
    words TEXT NOT NULL
) STRICT;
";

/// How many rows wait in `search_pending` before a save moves them into the FTS5 index.
/// A search matches each pending row itself (256 turns' words: well under a millisecond),
/// so more would slow searches; fewer, saves (64 cost a turn's save about 30 % more than
/// 256 in `cargo bench --bench sqlite -- append_turn`).
pub(super) const PENDING_ROWS: i64 = 256;

/// The words of `messages` as `search_words` holds them (see the module's docs).
pub(super) fn words_of(messages: &[Message]) -> String {
    let mut out = String::new();
    for word in search::index_words(messages) {
        if !out.is_empty() {
            out.push(' ');
        }
        spell(&word, &mut out);
    }
    out
}

/// `word` spelled for the `ascii` tokenizer: ASCII letters and digits as they are, any
/// other character as `_<hex>_`.
fn spell(word: &str, out: &mut String) {
    for c in word.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            let _ = write!(out, "_{:x}_", u32::from(c));
        }
    }
}

/// The query's words spelled as the index spells them, each with whether it is a prefix.
fn spelled_terms(query: &SearchQuery) -> Vec<(String, bool)> {
    query
        .terms()
        .map(|(word, prefix)| {
            let mut spelled = String::new();
            spell(word, &mut spelled);
            (spelled, prefix)
        })
        .collect()
}

/// `query` as an FTS5 query: every word spelled as the index spells it (a prefix word
/// with `*`). A spelled word is ASCII letters, digits and `_`, a bareword in FTS5's
/// syntax, and lower case, so never one of its operators.
fn fts_query(query: &SearchQuery) -> String {
    let mut out = String::new();
    for (word, prefix) in spelled_terms(query) {
        if !out.is_empty() {
            out.push_str(" AND ");
        }
        out.push_str(&word);
        if prefix {
            out.push('*');
        }
    }
    out
}

/// Whether `words` (a row's spelled words, separated by spaces) holds every term, as
/// FTS5 decides for the rows it indexes: a term is one of the words, or, for a prefix,
/// begins one (a word's prefix is spelled as a prefix of its spelling).
fn row_holds(words: &str, terms: &[(String, bool)]) -> bool {
    terms.iter().all(|(term, prefix)| {
        words.split(' ').any(|word| {
            if *prefix {
                word.starts_with(term.as_str())
            } else {
                word == term
            }
        })
    })
}

impl SqliteSessionStore {
    /// Records `words` ([`words_of`] the messages the row of `id` at `revision` brings
    /// into its history), in the writing transaction: as a pending row, and, when that
    /// makes [`PENDING_ROWS`], every pending row moved into the index.
    pub(super) fn index_words(
        &self,
        conn: &Connection,
        id: &SessionId,
        revision: Revision,
        words: &str,
    ) -> Result<()> {
        if words.is_empty() {
            return Ok(());
        }
        let revision = revision_column(id, revision)?;
        let fail = |e| self.db.fail("index a session's words", e);
        conn.prepare_cached(
            "INSERT INTO search_pending (session_id, revision, words) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut s| s.execute(rusqlite::params![id.as_str(), revision, words]))
        .map_err(fail)?;
        // The span of row ids, not a count, which would read every pending row: rows
        // deleted since (a session written anew) only bring the move forward.
        let pending: i64 = conn
            .prepare_cached("SELECT coalesce(max(row) - min(row) + 1, 0) FROM search_pending")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(fail)?;
        if pending >= PENDING_ROWS {
            self.index_pending(conn)?;
        }
        Ok(())
    }

    /// Moves every pending row into `search_rows` and `search_words`, in the writing
    /// transaction: one FTS5 segment for all of them.
    fn index_pending(&self, conn: &Connection) -> Result<()> {
        let fail = |e| self.db.fail("index the pending words", e);
        let rows: Vec<(String, i64, String)> = conn
            .prepare_cached("SELECT session_id, revision, words FROM search_pending ORDER BY row")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .map_err(fail)?;
        // Not `RETURNING row`: stepped once and reset (rusqlite's `query_row`), it cost
        // 75 µs a row here, against 10 µs for the insert and `last_insert_rowid`.
        let mut add_row = conn
            .prepare_cached("INSERT INTO search_rows (session_id, revision) VALUES (?1, ?2)")
            .map_err(fail)?;
        let mut add_words = conn
            .prepare_cached("INSERT INTO search_words (rowid, words) VALUES (?1, ?2)")
            .map_err(fail)?;
        for (session_id, revision, words) in &rows {
            add_row
                .execute(rusqlite::params![session_id, revision])
                .map_err(fail)?;
            let row = conn.last_insert_rowid();
            add_words
                .execute(rusqlite::params![row, words])
                .map_err(fail)?;
        }
        conn.prepare_cached("DELETE FROM search_pending")
            .and_then(|mut s| s.execute([]))
            .map_err(fail)?;
        Ok(())
    }

    /// Forgets every word recorded for `id` (its log is deleted or written anew), and
    /// that it was saved before the index, in the writing transaction.
    pub(super) fn forget_words(&self, conn: &Connection, id: &SessionId) -> Result<()> {
        let fail = |e| self.db.fail("drop a session's indexed words", e);
        conn.prepare_cached(
            "DELETE FROM search_words
             WHERE rowid IN (SELECT row FROM search_rows WHERE session_id = ?1)",
        )
        .and_then(|mut s| s.execute([id.as_str()]))
        .map_err(fail)?;
        conn.prepare_cached("DELETE FROM search_rows WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(fail)?;
        conn.prepare_cached("DELETE FROM search_pending WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(fail)?;
        conn.prepare_cached("DELETE FROM unindexed WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(fail)?;
        Ok(())
    }

    /// The sessions that may hold a message matching `query`: a row of theirs holds every
    /// word (in the index, or pending and matched here), or they were saved before the
    /// index. One read transaction, so a row moved into the index meanwhile is seen once.
    fn candidates(&self, query: &SearchQuery) -> Result<HashSet<String>> {
        let terms = spelled_terms(query);
        let fts = fts_query(query);
        self.db.read(|tx| {
            let fail = |e| self.db.fail("search the sessions' words", e);
            let mut ids = tx
                .prepare_cached(
                    "SELECT r.session_id FROM search_words w JOIN search_rows r ON r.row = w.rowid
                     WHERE search_words MATCH ?1
                     UNION
                     SELECT session_id FROM unindexed",
                )
                .and_then(|mut s| {
                    s.query_map([fts.as_str()], |r| r.get::<_, String>(0))?
                        .collect::<rusqlite::Result<HashSet<_>>>()
                })
                .map_err(fail)?;
            let mut pending = tx
                .prepare_cached("SELECT session_id, words FROM search_pending")
                .map_err(fail)?;
            let mut rows = pending.query([]).map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                let words = row.get_ref(1).and_then(|v| Ok(v.as_str()?)).map_err(fail)?;
                if row_holds(words, &terms) {
                    ids.insert(row.get(0).map_err(fail)?);
                }
            }
            Ok(ids)
        })
    }

    /// As [`SessionStore::search`](crate::SessionStore::search): the filtered listing,
    /// reading the history of the sessions the index names only. A search of metadata
    /// values (not indexed) reads every session.
    pub(super) fn search_indexed(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        let candidates = if query.searches_metadata() {
            None
        } else {
            Some(self.candidates(query)?)
        };
        search::scan_where(self, query, filter, limit, after, |id: &SessionId| {
            candidates.as_ref().is_none_or(|c| c.contains(id.as_str()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{ContentBlock, ToolResult};

    #[test]
    fn words_are_spelled_one_ascii_token_each() {
        let messages = [
            Message::user("The lock-bug, THE lock; e2e über@x.org snake_case"),
            Message::tool_result(ToolResult::new("c", "Bug report")),
            Message::assistant(vec![ContentBlock::text("ok 日本")]),
        ];
        assert_eq!(
            words_of(&messages),
            "bug case e2e lock ok org report snake the x _fc_ber _65e5__672c_"
        );
    }

    #[test]
    fn a_pending_row_is_matched_as_fts5_matches_an_indexed_one() {
        let words = words_of(&[Message::user("The lock-bug über alles")]);
        let holds = |q: &str| row_holds(&words, &spelled_terms(&SearchQuery::new(q).expect("q")));
        assert!(holds("lock bug"));
        assert!(holds("LOCK üb*"));
        assert!(holds("al*"));
        assert!(!holds("lock bugs"), "whole words");
        assert!(!holds("ock"), "no infix");
        assert!(!holds("lock fish"), "every word");
    }

    #[test]
    fn a_query_is_a_conjunction_spelled_as_the_index_with_prefixes() {
        let query = SearchQuery::new("Lock bu* Über*").expect("query");
        assert_eq!(fts_query(&query), "lock AND bu* AND _fc_ber*");
        // A prefix's spelling begins the word's.
        let (mut word, mut prefix) = (String::new(), String::new());
        spell("über", &mut word);
        spell("üb", &mut prefix);
        assert!(word.starts_with(&prefix));
    }
}
