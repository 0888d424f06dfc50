//! Search in the PostgreSQL store: a full-text index narrows the sessions to read, and the
//! crate's matching ([`SearchQuery`]) decides, so the results are the other stores'.
//!
//! Every row that brings messages into a session's history carries their words in a
//! `words` column: the session's row of `checkpoint_words` the words of its checkpoint's
//! messages, each row of `entries` those of the messages the entry adds. The words are the
//! crate's (letters and digits, lower case, each once), so PostgreSQL's parser, reading
//! them with the `simple` configuration (no stemming, no stop words), finds every word the
//! crate would: a message holding every word of a query lies in one row holding them all.
//! A GIN index on `to_tsvector('simple', words)` answers which rows do. Rows written
//! before tables version 5 have no words (`NULL`) and are always read.
//!
//! The checkpoint's words have a table of their own (tables version 7) because the
//! session's row is updated by every append: in that row (versions 5 and 6), each append
//! made the server work out the index entries of the whole checkpoint's words again, and a
//! turn onto 1,000 messages cost 1.8 × the same onto 10. `checkpoint_words` is written
//! only with the checkpoint (a whole write, a trim).

use std::collections::HashSet;

use super::{backend, prepared, Inner};
use crate::error::Result;
use crate::id::SessionId;
use crate::store::{search, ListCursor, ListFilter, SearchPage, SearchQuery};
use crate::transcript::Message;

/// The tables and indexes search adds (tables version 5; `checkpoint_words` version 7).
///
/// Tables of versions 5 and 6 kept the checkpoint's words in `sessions.words`: they are
/// moved into `checkpoint_words`, and the column (with its indexes) dropped. Every
/// session gets a row there, one without words (`NULL`, always read) if its row had none
/// (written before version 5). The indexes are made after the copy (one build, not an
/// insert per row, while the migration holds the tables).
pub(super) fn create_tables(schema: &str) -> String {
    format!(
        "ALTER TABLE {schema}.entries ADD COLUMN IF NOT EXISTS words text;
         CREATE INDEX IF NOT EXISTS entries_words
             ON {schema}.entries USING gin (to_tsvector('simple', words));
         CREATE INDEX IF NOT EXISTS entries_no_words
             ON {schema}.entries (session_id) WHERE words IS NULL;
         CREATE TABLE IF NOT EXISTS {schema}.checkpoint_words (
             session_id text COLLATE \"C\" PRIMARY KEY
                 REFERENCES {schema}.sessions (id) ON DELETE CASCADE,
             words text
         );
         ALTER TABLE {schema}.sessions ADD COLUMN IF NOT EXISTS words text;
         INSERT INTO {schema}.checkpoint_words (session_id, words)
             SELECT id, words FROM {schema}.sessions
             ON CONFLICT (session_id) DO NOTHING;
         ALTER TABLE {schema}.sessions DROP COLUMN words;
         CREATE INDEX IF NOT EXISTS checkpoint_words_words
             ON {schema}.checkpoint_words USING gin (to_tsvector('simple', words));
         CREATE INDEX IF NOT EXISTS checkpoint_words_no_words
             ON {schema}.checkpoint_words (session_id) WHERE words IS NULL;"
    )
}

/// The statement that records `$2` as the words of session `$1`'s checkpoint, in the
/// transaction that writes the checkpoint.
pub(super) fn set_checkpoint_words(schema: &str) -> String {
    format!(
        "INSERT INTO {schema}.checkpoint_words (session_id, words) VALUES ($1, $2)
         ON CONFLICT (session_id) DO UPDATE SET words = excluded.words"
    )
}

/// The words of `messages` as the `words` column holds them: the crate's words of their
/// searchable text, lower case, each once, separated by spaces.
pub(super) fn words_of(messages: &[Message]) -> String {
    search::index_words(messages).join(" ")
}

/// `query` as a `tsquery` for `to_tsquery('simple', …)`: every word (a prefix word with
/// `:*`). The words are letters and digits only, so nothing in them is `tsquery` syntax.
fn ts_query(query: &SearchQuery) -> String {
    query
        .terms()
        .map(|(word, prefix)| {
            if prefix {
                format!("{word}:*")
            } else {
                word.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" & ")
}

impl Inner {
    /// The sessions that may hold a message matching `query`: a row of theirs holds every
    /// word, or has no words recorded.
    async fn candidates(&self, query: &SearchQuery) -> Result<HashSet<String>> {
        let ts = ts_query(query);
        self.with_client(move |client, schema| async move {
            let rows = client
                .query(
                    &prepared(
                        &client,
                        &format!(
                            "SELECT session_id FROM {schema}.checkpoint_words
                              WHERE to_tsvector('simple', words) @@ to_tsquery('simple', $1)
                             UNION
                             SELECT session_id FROM {schema}.checkpoint_words
                              WHERE words IS NULL
                             UNION
                             SELECT session_id FROM {schema}.entries
                              WHERE to_tsvector('simple', words) @@ to_tsquery('simple', $1)
                             UNION
                             SELECT session_id FROM {schema}.entries WHERE words IS NULL"
                        ),
                    )
                    .await?,
                    &[&ts],
                )
                .await
                .map_err(|e| backend("search the sessions' words", e))?;
            Ok(rows.iter().map(|row| row.get::<_, String>(0)).collect())
        })
        .await
    }

    /// As [`SessionStore::search`](crate::SessionStore::search): the filtered listing,
    /// reading the history of the sessions the index names only. A search of metadata
    /// values (not indexed) reads every session.
    pub(super) async fn search_indexed(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        let candidates = if query.searches_metadata() {
            None
        } else {
            Some(self.candidates(query).await?)
        };
        search::scan_async_where(self, query, filter, limit, after, |id: &SessionId| {
            candidates.as_ref().is_none_or(|c| c.contains(id.as_str()))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{ContentBlock, ToolResult};

    #[test]
    fn words_are_the_crates_lower_case_and_once() {
        let messages = [
            Message::user("The lock-bug, THE lock; e2e über@x.org"),
            Message::tool_result(ToolResult::new("c", "Bug report")),
            Message::assistant(vec![ContentBlock::text("ok")]),
        ];
        assert_eq!(words_of(&messages), "bug e2e lock ok org report the x über");
    }

    #[test]
    fn a_query_becomes_a_conjunction_with_prefixes() {
        let query = SearchQuery::new("Lock bu*").expect("query");
        assert_eq!(ts_query(&query), "lock & bu:*");
    }
}
