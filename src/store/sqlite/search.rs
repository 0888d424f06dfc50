//! Search in the SQLite store: an FTS5 index narrows the sessions to read, and the crate's
//! matching ([`SearchQuery`]) decides, so the results are the other stores'.
//!
//! Every row that brings messages into a session's history (its checkpoint, each entry)
//! has a row in `search_rows` and the words of those messages in the FTS5 table
//! `search_words` under the same rowid, written in the transaction that writes the row.
//! The words are the crate's (letters and digits, lower case, each once), spelled so that
//! FTS5's `ascii` tokenizer reads each as exactly one token: ASCII letters and digits as
//! they are, any other character as `_` + its code point in hex + `_` (`über` is
//! `_fc_ber`). The spelling goes character by character, so a word's prefix is spelled as
//! a prefix of the word's spelling and `word*` queries stay exact; and no tokenizer's idea
//! of a letter, case or diacritic can disagree with the crate's.
//!
//! Sessions saved before the index existed (tables version 1) are listed in `unindexed`
//! until their whole log is written again, and are always read.

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

/// `query` as an FTS5 query: every word spelled as the index spells it (a prefix word
/// with `*`). A spelled word is ASCII letters, digits and `_`, a bareword in FTS5's
/// syntax, and lower case, so never one of its operators.
fn fts_query(query: &SearchQuery) -> String {
    let mut out = String::new();
    for (word, prefix) in query.terms() {
        if !out.is_empty() {
            out.push_str(" AND ");
        }
        spell(word, &mut out);
        if prefix {
            out.push('*');
        }
    }
    out
}

impl SqliteSessionStore {
    /// Records `words` ([`words_of`] the messages the row of `id` at `revision` brings
    /// into its history), in the writing transaction.
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
        let row: i64 = conn
            .prepare_cached(
                "INSERT INTO search_rows (session_id, revision) VALUES (?1, ?2) RETURNING row",
            )
            .and_then(|mut s| s.query_row(rusqlite::params![id.as_str(), revision], |r| r.get(0)))
            .map_err(fail)?;
        conn.prepare_cached("INSERT INTO search_words (rowid, words) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(rusqlite::params![row, words]))
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
        conn.prepare_cached("DELETE FROM unindexed WHERE session_id = ?1")
            .and_then(|mut s| s.execute([id.as_str()]))
            .map_err(fail)?;
        Ok(())
    }

    /// The sessions that may hold a message matching `query`: a row of theirs holds every
    /// word, or they were saved before the index.
    fn candidates(&self, query: &SearchQuery) -> Result<HashSet<String>> {
        let fts = fts_query(query);
        self.db.read(|tx| {
            let fail = |e| self.db.fail("search the sessions' words", e);
            let mut statement = tx
                .prepare_cached(
                    "SELECT r.session_id FROM search_words w JOIN search_rows r ON r.row = w.rowid
                     WHERE search_words MATCH ?1
                     UNION
                     SELECT session_id FROM unindexed",
                )
                .map_err(fail)?;
            let ids = statement
                .query_map([fts.as_str()], |r| r.get::<_, String>(0))
                .map_err(fail)?
                .collect::<rusqlite::Result<HashSet<_>>>()
                .map_err(fail)?;
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
