//! The `SessionStore` contract (`agent_session::testing`), checked the same way against
//! every store the crate ships: `MemorySessionStore`, `FileSessionStore`,
//! `PostgresSessionStore` (feature `postgres`, against the server in
//! `AGENT_SESSION_POSTGRES_URL`: run `scripts/test`), `SqliteSessionStore` (feature
//! `sqlite`), and each again behind
//! `Arc<dyn SessionStore>`; every case must run (the crate's stores archive, skip
//! unchanged saves and keep the history). Then the suite's own negative controls: a
//! wrapper that forgets to forward a provided method fails it, and so does one that drops
//! or mis-orders the history.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_session::testing::{self, rich_snapshot};
use agent_session::{
    FileSessionStore, History, IndexedMetadata, Lease, LeaseRequest, ListCursor, ListFilter,
    ListScope, MemorySessionStore, Result, Revision, RevisionInfo, SearchPage, SearchQuery,
    SessionId, SessionList, SessionSnapshot, SessionStore, SessionSummary,
};

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod postgres_support;

/// Runs every case of the contract, each on a fresh store from `make`, and requires that
/// none was skipped.
fn contract<S: SessionStore>(make: impl Fn() -> S) {
    let report = testing::contract(make);
    println!("{report}");
    report.assert_complete();
}

#[test]
fn memory_store_meets_the_contract() {
    contract(MemorySessionStore::new);
}

#[test]
fn file_store_meets_the_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = AtomicUsize::new(0);
    contract(|| {
        let sub = dir
            .path()
            .join(format!("store-{}", n.fetch_add(1, Ordering::Relaxed)));
        FileSessionStore::open(sub).expect("open file store")
    });
}

/// The metadata the `Arc<dyn SessionStore>` runs index, so the filtered-listing case
/// checks metadata filters there (and their refusal on the other runs).
fn indexed() -> IndexedMetadata {
    IndexedMetadata::new([testing::FILTER_KEY]).expect("a valid key")
}

#[test]
fn arc_dyn_memory_store_meets_the_contract() {
    contract(|| -> Arc<dyn SessionStore> {
        Arc::new(MemorySessionStore::with_indexed_metadata(indexed()))
    });
}

#[test]
fn arc_dyn_file_store_meets_the_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = AtomicUsize::new(0);
    contract(|| -> Arc<dyn SessionStore> {
        let sub = dir
            .path()
            .join(format!("store-{}", n.fetch_add(1, Ordering::Relaxed)));
        Arc::new(
            FileSessionStore::builder()
                .index_metadata(indexed())
                .open(sub)
                .expect("open file store"),
        )
    });
}

/// Every store `make` returns lives in a fresh schema of its own (migrated first), so no
/// case sees another's sessions; the schemas are dropped when the test passes.
#[cfg(feature = "postgres")]
#[test]
fn postgres_store_meets_the_contract() {
    let schemas = postgres_support::Schemas::new();
    contract(|| schemas.store());
}

#[cfg(feature = "postgres")]
#[test]
fn arc_dyn_postgres_store_meets_the_contract() {
    let schemas = postgres_support::Schemas::new();
    contract(|| -> Arc<dyn SessionStore> {
        Arc::new(
            schemas.store_with(
                agent_session::PostgresSessionStore::builder().index_metadata(indexed()),
            ),
        )
    });
}

/// Every store `make` returns is a fresh database file of its own.
#[cfg(feature = "sqlite")]
#[test]
fn sqlite_store_meets_the_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = AtomicUsize::new(0);
    contract(|| {
        let path = dir
            .path()
            .join(format!("store-{}.db", n.fetch_add(1, Ordering::Relaxed)));
        agent_session::SqliteSessionStore::open(path).expect("open SQLite store")
    });
}

#[cfg(feature = "sqlite")]
#[test]
fn arc_dyn_sqlite_store_meets_the_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = AtomicUsize::new(0);
    contract(|| -> Arc<dyn SessionStore> {
        let path = dir
            .path()
            .join(format!("store-{}.db", n.fetch_add(1, Ordering::Relaxed)));
        Arc::new(
            agent_session::SqliteSessionStore::builder()
                .index_metadata(indexed())
                .open(path)
                .expect("open SQLite store"),
        )
    });
}

/// The snapshot's bytes round-trip exactly: the row holds what `to_json_with_revision`
/// gives for the first save, and a load encodes to the same bytes, for a snapshot with
/// every kind of content and again after it is saved over (an entry that replaces the
/// whole view: the row keeps the first snapshot as the log's checkpoint).
#[cfg(feature = "postgres")]
#[test]
fn postgres_store_keeps_the_snapshot_bytes_exactly() {
    let schemas = postgres_support::Schemas::new();
    let store = schemas.store();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("JSON is UTF-8");
    let mut snapshot = rich_snapshot("exact-bytes");
    for expected_revision in 1..=2 {
        let revision = store.save(&snapshot).expect("save");
        assert_eq!(revision, Revision::from_u64(expected_revision));
        let expected = text(snapshot.to_json_with_revision(revision).expect("encode"));
        let row = postgres_support::stored_snapshot(store.schema(), "exact-bytes").expect("a row");
        if expected_revision == 1 {
            assert_eq!(text(row), expected, "the row's bytes");
        } else {
            let first = text(
                snapshot
                    .to_json_with_revision(Revision::from_u64(1))
                    .expect("encode"),
            );
            assert_eq!(text(row), first, "the row's checkpoint");
        }
        let loaded = store.load(snapshot.id()).expect("load");
        assert_eq!(
            text(loaded.to_json().expect("encode")),
            expected,
            "the load's bytes"
        );
        assert_eq!(loaded, snapshot.clone().with_revision(revision));
        // Decoded afresh, so the next save stores it whole (an unchanged loaded snapshot
        // would not be written at all).
        snapshot = SessionSnapshot::from_json(&loaded.to_json().expect("encode"))
            .expect("decode")
            .with_revision(revision);
    }
}

#[test]
fn file_store_round_trip_survives_reopening_the_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let snapshot = rich_snapshot("durable");
    let revision = FileSessionStore::open(dir.path())
        .expect("open")
        .save(&snapshot)
        .expect("save");
    let reopened = FileSessionStore::open(dir.path()).expect("reopen");
    let loaded = reopened.load(snapshot.id()).expect("load");
    assert_eq!(loaded, snapshot.with_revision(revision));
}

/// A wrapper that forwards the required methods and `set_archived`, but leaves
/// `list_scoped` to the trait's default, which knows no archived sessions.
struct ForgetsListScoped<S>(S);

impl<S: SessionStore> SessionStore for ForgetsListScoped<S> {
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        self.0.save(snapshot)
    }

    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        self.0.load(id)
    }

    fn list(&self) -> Result<SessionList> {
        self.0.list()
    }

    fn delete(&self, id: &SessionId) -> Result<()> {
        self.0.delete(id)
    }

    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        self.0.set_archived(id, archived)
    }

    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        self.0.delete_if_unchanged(listed)
    }
}

/// The negative control of the contract suite: a wrapper that forgets one provided method
/// (here `list_scoped`, so `ListScope::All` drops archived sessions) fails it, naming the
/// case.
#[test]
fn the_contract_catches_a_wrapper_that_forgets_list_scoped() {
    let failure = panic::catch_unwind(AssertUnwindSafe(|| {
        testing::contract(|| ForgetsListScoped(MemorySessionStore::new()))
    }))
    .expect_err("the forgetful wrapper fails the contract");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.starts_with("store contract case `archive_hides_from_list_but_keeps_loading_saving_and_forking` failed"),
        "{message}"
    );
    // The wrapped store itself passes, and so does the wrapper once it forwards it.
    let store = ForgetsListScoped(MemorySessionStore::new());
    store.save(&rich_snapshot("a")).expect("save");
    store
        .set_archived(&SessionId::parse("a").expect("id"), true)
        .expect("archive");
    assert!(store
        .list_scoped(ListScope::All)
        .expect("list")
        .sessions
        .is_empty());
    assert_eq!(
        store
            .0
            .list_scoped(ListScope::All)
            .expect("list")
            .sessions
            .len(),
        1
    );
}

/// A store with only the four required methods: the archive cases and the unchanged-save
/// case are skipped, said so in the report, and everything else passes.
#[test]
fn a_store_with_only_the_required_methods_passes_what_it_can_and_says_what_it_skipped() {
    struct Minimal(MemorySessionStore);
    impl SessionStore for Minimal {
        fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
            // Always written, as a store that cannot tell an unchanged snapshot does:
            // decoded afresh, the snapshot no longer knows it was loaded.
            let fresh = SessionSnapshot::from_json(&snapshot.to_json()?)?
                .with_revision(snapshot.revision());
            self.0.save(&fresh)
        }
        fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
            self.0.load(id)
        }
        fn list(&self) -> Result<SessionList> {
            self.0.list()
        }
        fn delete(&self, id: &SessionId) -> Result<()> {
            self.0.delete(id)
        }
    }
    let report = testing::contract(|| Minimal(MemorySessionStore::new()));
    println!("{report}");
    assert_eq!(report.skipped.len(), 26, "{report}");
    // Eight of them need a kept history: the required methods alone keep only the head.
    assert_eq!(
        report
            .skipped
            .iter()
            .filter(|s| s.needs == testing::HISTORY)
            .count(),
        8,
        "{report}"
    );
    report.assert_complete_except(&[
        testing::ARCHIVING,
        testing::UNCHANGED_SAVES,
        testing::HISTORY,
        testing::LEASES,
    ]);
    assert!(report
        .skipped
        .iter()
        .any(|s| s.case == "an_unchanged_snapshot_is_not_saved_again"));
    assert!(report
        .skipped
        .iter()
        .any(|s| s.case == "prune_by_count_keeps_the_newest"));
    assert_eq!(report.passed.len() + report.skipped.len(), 56, "{report}");
    let panicked = panic::catch_unwind(AssertUnwindSafe(|| report.assert_complete()));
    assert!(
        panicked.is_err(),
        "a report with skipped cases is not complete"
    );
}

/// A wrapper that forwards every method but one of the history's, which it leaves to the
/// trait's default (made for a store that keeps only the head).
struct ForgetsOne<S> {
    inner: S,
    forgets: &'static str,
}

impl<S: SessionStore> SessionStore for ForgetsOne<S> {
    fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> {
        if self.forgets == "fence" && snapshot.lease_epoch().is_some() {
            // The snapshot passed on through its JSON form, which leaves its lease behind.
            let bytes = snapshot.to_json()?;
            return self.inner.save(&SessionSnapshot::from_json(&bytes)?);
        }
        self.inner.save(snapshot)
    }
    fn load(&self, id: &SessionId) -> Result<SessionSnapshot> {
        self.inner.load(id)
    }
    fn list(&self) -> Result<SessionList> {
        self.inner.list()
    }
    fn delete(&self, id: &SessionId) -> Result<()> {
        self.inner.delete(id)
    }
    fn list_scoped(&self, scope: ListScope) -> Result<SessionList> {
        let mut listing = self.inner.list_scoped(scope)?;
        if self.forgets == "summary_metadata" {
            // Summaries made without the indexed values (`SessionSummary::of`).
            for summary in &mut listing.sessions {
                summary.metadata.clear();
            }
        }
        Ok(listing)
    }
    fn indexed_metadata(&self) -> IndexedMetadata {
        self.inner.indexed_metadata()
    }
    fn search(
        &self,
        query: &SearchQuery,
        filter: &ListFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<SearchPage> {
        if self.forgets == "search_history" {
            // A search of the view only, whatever the query asks.
            return self
                .inner
                .search(&query.clone().view_only(true), filter, limit, after);
        }
        self.inner.search(query, filter, limit, after)
    }
    fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
        self.inner.set_archived(id, archived)
    }
    fn delete_if_unchanged(&self, listed: &SessionSummary) -> Result<()> {
        self.inner.delete_if_unchanged(listed)
    }
    fn load_at(&self, id: &SessionId, revision: Revision) -> Result<SessionSnapshot> {
        if self.forgets == "load_at" {
            let head = self.inner.load(id)?;
            if head.revision() == revision {
                return Ok(head);
            }
            return Err(agent_session::Error::RevisionNotFound {
                id: id.clone(),
                revision,
                oldest: head.revision(),
                newest: head.revision(),
            });
        }
        self.inner.load_at(id, revision)
    }
    fn revisions(&self, id: &SessionId) -> Result<Vec<RevisionInfo>> {
        let mut revisions = self.inner.revisions(id)?;
        if self.forgets == "order" {
            // Mis-ordered: the two newest revisions swapped.
            let n = revisions.len();
            if n > 2 {
                revisions.swap(n - 1, n - 2);
            }
        }
        Ok(revisions)
    }
    fn history(&self, id: &SessionId) -> Result<History> {
        if self.forgets == "history" {
            // Only the view, as the trait's default gives it.
            let mut history = self.inner.history(id)?;
            history.messages.retain(|m| m.standing.is_in_view());
            return Ok(history);
        }
        self.inner.history(id)
    }
    fn restore(&self, id: &SessionId, revision: Revision) -> Result<Revision> {
        self.inner.restore(id, revision)
    }
    fn trim_history(&self, id: &SessionId, oldest: Revision) -> Result<u64> {
        if self.forgets == "trim_history" {
            // What a head-only store answers: nothing before the head to drop.
            let head = self.inner.load(id)?;
            return if oldest == head.revision() {
                Ok(0)
            } else {
                Err(agent_session::Error::RevisionNotFound {
                    id: id.clone(),
                    revision: oldest,
                    oldest: head.revision(),
                    newest: head.revision(),
                })
            };
        }
        self.inner.trim_history(id, oldest)
    }
    fn acquire_lease(&self, id: &SessionId, request: &LeaseRequest) -> Result<Lease> {
        self.inner.acquire_lease(id, request)
    }
    fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.renew_lease(lease, ttl)
    }
    fn release_lease(&self, lease: &Lease) -> Result<()> {
        if self.forgets == "release" {
            return Ok(());
        }
        self.inner.release_lease(lease)
    }
    fn leases(&self) -> Result<Vec<Lease>> {
        self.inner.leases()
    }
}

/// The negative control of the history, lease and listing cases: a wrapper that keeps only
/// the head for `load_at`, drops the messages out of the view from `history`, lists
/// revisions out of order, leaves `trim_history` to the head-only default, drops a
/// snapshot's lease, never releases one, lists summaries without their indexed metadata
/// or searches the view only fails the contract, naming the case that caught it.
#[test]
fn the_contract_catches_a_store_that_drops_or_misorders_history() {
    for (forgets, case) in [
        (
            "load_at",
            "every_revision_loads_as_saved_and_is_listed_with_its_kind",
        ),
        (
            "history",
            "history_tells_where_each_message_stands_and_restore_brings_them_back",
        ),
        (
            "order",
            "every_revision_loads_as_saved_and_is_listed_with_its_kind",
        ),
        (
            "trim_history",
            "trim_history_drops_the_earlier_revisions_and_keeps_the_later_ones",
        ),
        // And of the lease cases: a save that loses its lease on the way, and a release
        // that is never passed on.
        (
            "fence",
            "a_taken_over_lease_fences_the_old_holder_even_at_the_current_revision",
        ),
        (
            "release",
            "a_lease_is_exclusive_until_released_and_names_its_holder",
        ),
        // And of the listing cases: summaries without the indexed metadata, and a search
        // that leaves out what the history keeps beyond the view.
        (
            "summary_metadata",
            "filtered_listings_select_by_model_time_parent_archive_and_metadata",
        ),
        (
            "search_history",
            "search_finds_the_same_messages_in_every_store",
        ),
    ] {
        let failure = panic::catch_unwind(AssertUnwindSafe(|| {
            testing::contract(|| ForgetsOne {
                inner: MemorySessionStore::with_indexed_metadata(indexed()),
                forgets,
            })
        }))
        .expect_err("the broken wrapper fails the contract");
        let message = failure
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            message.starts_with(&format!("store contract case `{case}` failed")),
            "{forgets}: {message}"
        );
    }
    // Forwarding everything, the same wrapper passes.
    testing::contract(|| ForgetsOne {
        inner: MemorySessionStore::with_indexed_metadata(indexed()),
        forgets: "nothing",
    })
    .assert_complete();
}
