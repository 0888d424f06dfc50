//! Search in the PostgreSQL store: a full-text index narrows the sessions to read, and the
//! crate's matching ([`SearchQuery`]) decides, so the results are the other stores'.
//!
//! Every row that brings messages into a session's history carries their words in a
//! `words` column: the row of `sessions` the words of its checkpoint's messages, each row
//! of `entries` those of the messages the entry adds. The words are the crate's (letters
//! and digits, lower case, each once), so PostgreSQL's parser, reading them with the
//! `simple` configuration (no stemming, no stop words), finds every word the crate would:
//! a message holding every word of a query lies in one row holding them all. A GIN index
//! on `to_tsvector('simple', words)` answers which rows do. Rows written before tables
//! version 5 have no words (`NULL`) and are always read.

use std::collections::HashSet;

use super::{backend, prepared, Inner};
use crate::error::Result;
use crate::id::SessionId;
use crate::store::{search, ListCursor, ListFilter, SearchPage, SearchQuery};
use crate::transcript::Message;

/// The tables and indexes search adds (tables version 5).
pub(super) fn create_tables(schema: &str) -> String {
    format!(
        "ALTER TABLE {schema}.sessions ADD COLUMN IF NOT EXISTS words text;
         ALTER TABLE {schema}.entries ADD COLUMN IF NOT EXISTS words text;
         CREATE INDEX IF NOT EXISTS sessions_words
             ON {schema}.sessions USING gin (to_tsvector('simple', words));
         CREATE INDEX IF NOT EXISTS entries_words
             ON {schema}.entries USING gin (to_tsvector('simple', words));
         CREATE INDEX IF NOT EXISTS sessions_no_words
             ON {schema}.sessions (id) WHERE words IS NULL;
         CREATE INDEX IF NOT EXISTS entries_no_words
             ON {schema}.entries (session_id) WHERE words IS NULL;"
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
                            "SELECT id FROM {schema}.sessions
                              WHERE to_tsvector('simple', words) @@ to_tsquery('simple', $1)
                             UNION
                             SELECT id FROM {schema}.sessions WHERE words IS NULL
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
