//! Filtered listings: [`ListFilter`] says which sessions a listing shows (by scope, model,
//! time of the last change, parent, and values of metadata keys the store indexes), and
//! [`IndexedMetadata`] the keys a store declares at open so that its summaries carry
//! their values and a filtered listing never reads a transcript.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::listing::{ListScope, SessionSummary};
use crate::error::{Error, Result};
use crate::id::SessionId;
use crate::snapshot::SessionSnapshot;

/// The largest metadata value a summary carries, as compact JSON text: a larger value is
/// not indexed (summaries stay small whatever the metadata holds), and a filter on such a
/// value is refused.
pub const MAX_INDEXED_VALUE_BYTES: usize = 1024;

/// The most metadata keys a store indexes.
pub const MAX_INDEXED_KEYS: usize = 32;

/// The metadata keys a store indexes, declared when the store is opened (for example
/// [`FileStoreBuilder::index_metadata`](crate::FileStoreBuilder::index_metadata)): each
/// session's summary carries the values of these keys (top-level keys of
/// [`SessionSnapshot::metadata`]), so listings can filter on them
/// ([`ListFilter::metadata_eq`]) without reading transcripts.
///
/// Declare the same keys in every process that opens a store: a summary made for other
/// keys is made again (by reading the session) when it is listed.
///
/// # Examples
///
/// ```
/// use agent_session::IndexedMetadata;
///
/// let keys = IndexedMetadata::new(["project", "user"])?;
/// assert_eq!(keys.keys(), ["project", "user"]);
/// assert!(IndexedMetadata::new([""]).is_err());
/// # Ok::<(), agent_session::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexedMetadata {
    keys: Vec<String>,
}

impl IndexedMetadata {
    /// The keys, sorted and without repeats.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty key, a key longer than 128 bytes, or more
    /// than [`MAX_INDEXED_KEYS`] keys.
    pub fn new<I, K>(keys: I) -> Result<Self>
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        let mut keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        keys.sort();
        keys.dedup();
        if let Some(bad) = keys.iter().find(|k| k.is_empty() || k.len() > 128) {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "{bad:?} cannot be an indexed metadata key: keys are 1 to 128 bytes"
                ),
            });
        }
        if keys.len() > MAX_INDEXED_KEYS {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "{} metadata keys to index: a store indexes at most {MAX_INDEXED_KEYS}",
                    keys.len()
                ),
            });
        }
        Ok(IndexedMetadata { keys })
    }

    /// The keys, sorted.
    #[must_use]
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Whether no key is indexed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The values of the indexed keys in `snapshot`'s metadata, those small enough to
    /// carry ([`MAX_INDEXED_VALUE_BYTES`]).
    #[must_use]
    pub fn values_in(&self, snapshot: &SessionSnapshot) -> BTreeMap<String, Value> {
        let metadata = snapshot.metadata();
        self.keys
            .iter()
            .filter_map(|key| {
                let value = metadata.get(key)?;
                fits(value).then(|| (key.clone(), value.clone()))
            })
            .collect()
    }

    /// The summary of `snapshot`, with the values of these keys.
    #[must_use]
    pub fn summary_of(&self, snapshot: &SessionSnapshot) -> SessionSummary {
        let mut summary = SessionSummary::of(snapshot);
        summary.metadata = self.values_in(snapshot);
        summary
    }
}

/// Whether `value` is small enough for a summary.
fn fits(value: &Value) -> bool {
    serde_json::to_string(value).is_ok_and(|text| text.len() <= MAX_INDEXED_VALUE_BYTES)
}

/// Which sessions a filtered listing shows
/// ([`SessionStore::list_filtered`](crate::SessionStore::list_filtered)): every condition
/// set must hold. Sessions come newest first, as in every listing.
///
/// # Examples
///
/// ```
/// use agent_session::{
///     FileSessionStore, IndexedMetadata, ListFilter, SessionId, SessionSnapshot, SessionStore,
/// };
/// use serde_json::json;
///
/// let dir = tempfile::tempdir()?;
/// let store = FileSessionStore::builder()
///     .index_metadata(IndexedMetadata::new(["project"])?)
///     .open(dir.path())?;
/// for (id, project) in [("a", "parser"), ("b", "docs")] {
///     let snapshot = SessionSnapshot::builder(SessionId::parse(id)?, "model-x")
///         .metadata_entry("project", json!(project))
///         .build()?;
///     store.save(&snapshot)?;
/// }
/// let parser = store.list_filtered(&ListFilter::new().metadata_eq("project", json!("parser")))?;
/// assert_eq!(parser.sessions.len(), 1);
/// assert_eq!(parser.sessions[0].id.as_str(), "a");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    scope: ListScope,
    model: Option<String>,
    updated_since: Option<DateTime<Utc>>,
    updated_before: Option<DateTime<Utc>>,
    forks_of: Option<SessionId>,
    metadata: BTreeMap<String, Value>,
}

impl ListFilter {
    /// Every active session (as [`SessionStore::list`](crate::SessionStore::list)).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Archived sessions too, or only them ([`ListScope`]).
    #[must_use]
    pub fn scope(mut self, scope: ListScope) -> Self {
        self.scope = scope;
        self
    }

    /// Sessions whose model is `model` exactly (as their summary holds it, cut to 256
    /// characters).
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sessions last changed at or after `since`.
    #[must_use]
    pub fn updated_since(mut self, since: DateTime<Utc>) -> Self {
        self.updated_since = Some(since);
        self
    }

    /// Sessions last changed before `before`.
    #[must_use]
    pub fn updated_before(mut self, before: DateTime<Utc>) -> Self {
        self.updated_before = Some(before);
        self
    }

    /// Forks of session `parent` (its direct forks).
    #[must_use]
    pub fn forks_of(mut self, parent: SessionId) -> Self {
        self.forks_of = Some(parent);
        self
    }

    /// Sessions whose metadata holds `value` under `key`, a key the store indexes
    /// ([`IndexedMetadata`]); JSON equality (`1` and `1.0` differ, as their text does).
    #[must_use]
    pub fn metadata_eq(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// The scope it lists.
    #[must_use]
    pub fn list_scope(&self) -> ListScope {
        self.scope
    }

    /// Whether `summary` passes every condition but the scope (a listing of the scope
    /// gives the summaries this is asked about).
    #[must_use]
    pub fn matches(&self, summary: &SessionSummary) -> bool {
        self.model.as_ref().is_none_or(|m| summary.model == *m)
            && self.updated_since.is_none_or(|t| summary.updated_at >= t)
            && self.updated_before.is_none_or(|t| summary.updated_at < t)
            && self
                .forks_of
                .as_ref()
                .is_none_or(|p| summary.lineage.as_ref().is_some_and(|l| l.parent == *p))
            && self
                .metadata
                .iter()
                .all(|(key, value)| summary.metadata.get(key) == Some(value))
    }

    /// Whether a store indexing `indexed` can apply this filter.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming a metadata key the store does not index, or a
    /// value too large to be indexed.
    pub fn check(&self, indexed: &IndexedMetadata) -> Result<()> {
        for (key, value) in &self.metadata {
            if !indexed.keys().contains(key) {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "the store does not index metadata key {key:?} (it indexes {:?}): declare it when the store is opened (index_metadata)",
                        indexed.keys()
                    ),
                });
            }
            if !fits(value) {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "the value to match under {key:?} is larger than {MAX_INDEXED_VALUE_BYTES} bytes of JSON: values that large are not indexed"
                    ),
                });
            }
        }
        Ok(())
    }
}
