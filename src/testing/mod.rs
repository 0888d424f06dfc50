//! The store contract suite: the cases every [`SessionStore`] of this crate passes, for a
//! custom store to run in one call (feature `testing`).
//!
//! [`contract`] runs each case on a fresh store: round trips of every kind of content,
//! revisions and conflicts, deletes, listing order and pages, 8 threads of
//! read-modify-write saves, clocks ahead, then the lifecycle workflows built on the store
//! (fork, rewind, archive, the conditional delete, prune, export and import). A case that fails
//! panics, naming the case, as a test assertion does, so call it from a `#[test]`.
//!
//! Four behaviours are optional, and the cases that need them are skipped (and listed in
//! [`ContractReport::skipped`]) for a store without them: archiving
//! ([`SessionStore::set_archived`] returns [`Error::Unsupported`]);
//! not writing a snapshot that is unchanged since it was loaded
//! ([`SessionSnapshot::is_unchanged_since_stored`] tells a store which those are); and
//! keeping the session's history ([`HISTORY`]: a store whose
//! [`SessionStore::revisions`] lists one revision after two saves keeps only the head, as
//! the trait's defaults do); and leasing sessions ([`LEASES`]: [`SessionStore::acquire_lease`]
//! returns [`Error::Unsupported`]). Call [`ContractReport::assert_complete`] to require all four,
//! or [`ContractReport::assert_complete_except`] to allow some to be skipped.
//!
//! # Examples
//!
//! [`MemorySessionStore`](crate::MemorySessionStore) passes every case:
//!
//! ```
//! use agent_session::{testing, MemorySessionStore};
//!
//! let report = testing::contract(MemorySessionStore::new);
//! report.assert_complete();
//! assert!(report.passed.len() > 30);
//! ```
//!
//! In a crate with its own store, enable the feature for its tests only:
//!
//! ```toml
//! [dev-dependencies]
//! agent-session = { version = "0.1", features = ["testing"] }
//! ```

mod cases;
mod filters;
mod history;
mod leases;
mod lifecycle;
mod search;
mod support;

use std::fmt;
use std::panic::{self, AssertUnwindSafe};

use crate::error::Error;
use crate::id::SessionId;
use crate::snapshot::SessionSnapshot;
use crate::store::SessionStore;

pub use filters::FILTER_KEY;
pub use support::rich_snapshot;

/// What [`contract`] ran: the cases that passed, and those it skipped because the store
/// lacks an optional behaviour. (A failing case panics instead.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContractReport {
    /// The names of the cases that passed, in the order they ran.
    pub passed: Vec<&'static str>,
    /// The cases that were not run, each with the behaviour it needs.
    pub skipped: Vec<SkippedCase>,
}

/// A case of the contract that [`contract`] did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedCase {
    /// The case's name.
    pub case: &'static str,
    /// The optional behaviour it needs, which the store does not have.
    pub needs: &'static str,
}

impl ContractReport {
    /// Panics unless every case ran: for a store that archives, writes nothing for an
    /// unchanged snapshot and keeps its history, as the crate's own stores do.
    ///
    /// # Panics
    ///
    /// If any case was skipped, listing them.
    pub fn assert_complete(&self) {
        self.assert_complete_except(&[]);
    }

    /// Panics unless every case ran but those that need one of the optional behaviours in
    /// `allowed` ([`ARCHIVING`], [`UNCHANGED_SAVES`], [`HISTORY`], [`LEASES`]): for a store known to
    /// lack them.
    ///
    /// # Panics
    ///
    /// If a case that needs another behaviour was skipped, listing them.
    pub fn assert_complete_except(&self, allowed: &[&str]) {
        let skipped: Vec<&SkippedCase> = self
            .skipped
            .iter()
            .filter(|s| !allowed.contains(&s.needs))
            .collect();
        assert!(
            skipped.is_empty(),
            "the store contract skipped {} case(s): {}",
            skipped.len(),
            skipped
                .iter()
                .map(|s| format!("{} (needs {})", s.case, s.needs))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

impl fmt::Display for ContractReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store contract: {} cases passed, {} skipped",
            self.passed.len(),
            self.skipped.len()
        )?;
        for skipped in &self.skipped {
            write!(f, "\n  skipped {}: needs {}", skipped.case, skipped.needs)?;
        }
        Ok(())
    }
}

/// What a case needs beyond the required behaviour of a store.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    Nothing,
    Archiving,
    UnchangedSaves,
    History,
    Leases,
}

/// The optional behaviour archiving: what [`SkippedCase::needs`] says of a case skipped
/// for a store that cannot archive.
pub const ARCHIVING: &str = "archiving (set_archived, and list_scoped showing archived sessions)";
/// The optional behaviour of writing nothing for an unchanged snapshot: what
/// [`SkippedCase::needs`] says of a case skipped for a store that writes it again.
pub const UNCHANGED_SAVES: &str =
    "saves that write nothing for a snapshot unchanged since it was loaded";
/// The optional behaviour of keeping a session's history (every revision saved, for
/// [`SessionStore::load_at`], [`SessionStore::revisions`], [`SessionStore::history`] and
/// [`SessionStore::restore`]): what [`SkippedCase::needs`] says of a case skipped for a
/// store that keeps only the head.
///
/// # Examples
///
/// A store that keeps only its head (the trait's defaults) skips the history cases (and,
/// without leases, the lease cases), and says so:
///
/// ```
/// use agent_session::{testing, MemorySessionStore, Result, Revision, SessionId, SessionList,
///     SessionSnapshot, SessionStore};
///
/// struct HeadOnly(MemorySessionStore);
///
/// impl SessionStore for HeadOnly {
///     fn save(&self, snapshot: &SessionSnapshot) -> Result<Revision> { self.0.save(snapshot) }
///     fn load(&self, id: &SessionId) -> Result<SessionSnapshot> { self.0.load(id) }
///     fn list(&self) -> Result<SessionList> { self.0.list() }
///     fn delete(&self, id: &SessionId) -> Result<()> { self.0.delete(id) }
///     fn list_scoped(&self, scope: agent_session::ListScope) -> Result<SessionList> {
///         self.0.list_scoped(scope)
///     }
///     fn set_archived(&self, id: &SessionId, archived: bool) -> Result<()> {
///         self.0.set_archived(id, archived)
///     }
///     fn delete_if_unchanged(&self, listed: &agent_session::SessionSummary) -> Result<()> {
///         self.0.delete_if_unchanged(listed)
///     }
/// }
///
/// let report = testing::contract(|| HeadOnly(MemorySessionStore::new()));
/// assert!(!report.skipped.is_empty());
/// assert!(report
///     .skipped
///     .iter()
///     .all(|s| s.needs == testing::HISTORY || s.needs == testing::LEASES));
/// report.assert_complete_except(&[testing::HISTORY, testing::LEASES]);
/// ```
pub const HISTORY: &str =
    "a kept history (load_at, revisions, history and restore of every revision saved)";

/// The optional behaviour of leasing sessions ([`SessionStore::acquire_lease`] and the
/// saves it fences; see [`Lease`](crate::Lease)): what [`SkippedCase::needs`] says of a case
/// skipped for a store that protects sessions by compare-and-swap only.
pub const LEASES: &str =
    "leases (acquire_lease, renew_lease, release_lease, leases, and saves fenced by them)";

/// Runs every case of the store contract, each on a fresh store from `make`, and reports
/// what ran.
///
/// `make` must return a new, empty store at every call (a fresh directory, schema, key
/// prefix or in-memory map): cases count and list the sessions they saved.
///
/// # Panics
///
/// When a case fails: with the case's name and its assertion's message (the assertion
/// itself is printed just before, with where it failed). Also if `make` returns a store
/// that cannot save or delete a first session.
#[allow(clippy::too_many_lines)] // one line per case: the list is the suite
pub fn contract<S: SessionStore, F: Fn() -> S>(make: F) -> ContractReport {
    use Needs::{Archiving, History, Leases, Nothing, UnchangedSaves};

    let mut run = Runner {
        archives: archives(&make()),
        skips_unchanged_saves: skips_unchanged_saves(&make()),
        keeps_history: keeps_history(&make()),
        leases: leases(&make()),
        report: ContractReport::default(),
        make,
    };
    macro_rules! on_store {
        ($needs:expr, $module:ident :: $case:ident) => {
            run.case(stringify!($case), $needs, |make| $module::$case(&make()))
        };
    }
    macro_rules! with_make {
        ($needs:expr, $module:ident :: $case:ident) => {
            run.case(stringify!($case), $needs, |make| $module::$case(make))
        };
    }
    on_store!(
        Nothing,
        cases::save_then_load_round_trips_with_the_stored_revision
    );
    on_store!(
        Nothing,
        cases::first_save_is_revision_one_and_each_save_increments
    );
    on_store!(
        Nothing,
        cases::stale_revision_is_a_conflict_and_keeps_the_winner
    );
    on_store!(Nothing, cases::new_snapshot_over_existing_id_is_a_conflict);
    on_store!(Nothing, cases::missing_id_is_not_found_for_load_and_delete);
    on_store!(
        Nothing,
        cases::delete_then_save_new_starts_again_at_revision_one
    );
    on_store!(
        Nothing,
        cases::list_is_newest_first_with_ties_by_id_descending
    );
    on_store!(Nothing, cases::pages_walk_the_listing_in_order_exactly_once);
    on_store!(Nothing, cases::concurrent_read_modify_write_loses_no_update);
    on_store!(
        UnchangedSaves,
        cases::an_unchanged_snapshot_is_not_saved_again
    );
    on_store!(
        Nothing,
        cases::an_edit_between_a_save_and_mark_saved_is_never_taken_for_no_change
    );
    on_store!(
        Nothing,
        cases::a_session_updated_in_the_future_is_never_latest_and_never_pruned
    );

    on_store!(
        Nothing,
        lifecycle::fork_at_message_turn_and_end_copies_the_prefix_and_records_lineage
    );
    on_store!(
        Nothing,
        lifecycle::fork_refuses_taken_ids_missing_parents_and_split_tool_calls
    );
    on_store!(
        Nothing,
        lifecycle::fork_of_a_fork_records_its_immediate_parent
    );
    on_store!(
        Nothing,
        lifecycle::deleting_a_parent_leaves_its_forks_loadable_and_unchanged
    );
    on_store!(
        Nothing,
        lifecycle::rewind_keeps_a_prefix_and_the_usage_and_refuses_what_it_cannot_cut
    );
    on_store!(
        History,
        history::every_revision_loads_as_saved_and_is_listed_with_its_kind
    );
    on_store!(
        History,
        history::load_at_outside_the_kept_revisions_is_revision_not_found
    );
    on_store!(
        History,
        history::restore_makes_an_earlier_state_the_head_and_can_be_restored_away
    );
    on_store!(
        History,
        history::history_tells_where_each_message_stands_and_restore_brings_them_back
    );
    on_store!(
        History,
        history::bad_history_input_is_a_typed_error_and_changes_nothing
    );
    on_store!(
        History,
        history::a_fork_outlives_its_parents_rewind_compaction_restore_and_deletion
    );
    on_store!(
        History,
        history::trim_history_drops_the_earlier_revisions_and_keeps_the_later_ones
    );
    on_store!(
        Archiving,
        lifecycle::archive_hides_from_list_but_keeps_loading_saving_and_forking
    );
    on_store!(
        Archiving,
        lifecycle::archive_is_idempotent_and_missing_ids_are_not_found
    );
    on_store!(
        Archiving,
        lifecycle::deleting_an_archived_session_clears_its_archive_state
    );
    on_store!(
        Nothing,
        lifecycle::delete_if_unchanged_deletes_only_the_revision_listed
    );
    on_store!(
        Archiving,
        lifecycle::delete_if_unchanged_keeps_a_session_re_created_archived_or_restored_since
    );
    on_store!(
        Nothing,
        lifecycle::prune_by_age_deletes_sessions_older_than_the_limit
    );
    on_store!(Archiving, lifecycle::prune_by_count_keeps_the_newest);
    on_store!(
        Nothing,
        lifecycle::prune_by_size_keeps_the_newest_that_fit_and_deletes_every_older_one
    );
    on_store!(
        Nothing,
        lifecycle::prune_reports_the_first_limit_broken_oldest_first
    );
    on_store!(
        Archiving,
        lifecycle::prune_dry_run_deletes_nothing_and_reports_what_the_real_run_deletes
    );
    on_store!(
        Archiving,
        lifecycle::prune_archived_only_leaves_active_sessions_alone
    );
    on_store!(Archiving, lifecycle::prune_with_no_limits_deletes_nothing);
    on_store!(
        Nothing,
        lifecycle::prune_keeps_a_session_saved_after_the_listing
    );
    on_store!(
        Archiving,
        lifecycle::prune_keeps_a_session_archived_restored_or_re_created_after_the_listing
    );
    with_make!(
        Nothing,
        lifecycle::export_then_import_keep_stores_equal_sessions_at_revision_one
    );
    with_make!(
        Nothing,
        lifecycle::import_fresh_gives_new_ids_and_repoints_forks_at_their_parents
    );
    with_make!(
        Nothing,
        lifecycle::import_map_renames_only_the_mapped_sessions
    );
    with_make!(Archiving, lifecycle::import_into_a_taken_id_writes_nothing);
    with_make!(
        Nothing,
        lifecycle::import_refuses_a_fork_mapped_onto_its_parents_id
    );
    with_make!(
        Nothing,
        lifecycle::import_failing_midway_deletes_what_it_wrote
    );
    with_make!(
        Nothing,
        lifecycle::import_that_cannot_delete_what_it_wrote_names_what_is_left
    );
    on_store!(Nothing, lifecycle::export_refuses_missing_and_repeated_ids);
    on_store!(Nothing, lifecycle::bundle_json_round_trips_byte_for_byte);

    on_store!(
        Nothing,
        filters::filtered_listings_select_by_model_time_parent_archive_and_metadata
    );
    // It finds a rewound message: the history must keep it.
    on_store!(
        History,
        search::search_finds_the_same_messages_in_every_store
    );
    on_store!(
        Leases,
        leases::a_lease_is_exclusive_until_released_and_names_its_holder
    );
    on_store!(
        Leases,
        leases::a_taken_over_lease_fences_the_old_holder_even_at_the_current_revision
    );
    on_store!(
        Leases,
        leases::a_save_without_a_lease_is_refused_while_one_is_live
    );
    on_store!(
        Leases,
        leases::an_expired_lease_is_taken_without_take_over_and_fences_its_holder
    );
    on_store!(
        Leases,
        leases::epochs_keep_growing_when_the_id_is_used_again
    );
    on_store!(
        Leases,
        leases::a_released_lease_fences_its_saves_and_a_live_one_refuses_a_restore
    );
    on_store!(
        Leases,
        leases::a_take_over_amid_the_holders_saves_lets_none_through_after_it
    );
    run.report
}

/// Runs cases on fresh stores and records what ran.
#[allow(clippy::struct_excessive_bools)] // one flag per optional behaviour the contract probes
struct Runner<F> {
    make: F,
    archives: bool,
    skips_unchanged_saves: bool,
    keeps_history: bool,
    leases: bool,
    report: ContractReport,
}

impl<S: SessionStore, F: Fn() -> S> Runner<F> {
    fn case(&mut self, name: &'static str, needs: Needs, case: impl FnOnce(&F)) {
        let missing = match needs {
            Needs::Archiving if !self.archives => Some(ARCHIVING),
            Needs::UnchangedSaves if !self.skips_unchanged_saves => Some(UNCHANGED_SAVES),
            Needs::History if !self.keeps_history => Some(HISTORY),
            Needs::Leases if !self.leases => Some(LEASES),
            _ => None,
        };
        if let Some(needs) = missing {
            self.report.skipped.push(SkippedCase { case: name, needs });
            return;
        }
        let make = &self.make;
        if let Err(panic) = panic::catch_unwind(AssertUnwindSafe(|| case(make))) {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("store contract case `{name}` failed: {message}");
        }
        self.report.passed.push(name);
    }
}

/// A session the probes save and delete again.
fn probe() -> SessionSnapshot {
    let id = SessionId::parse("contract-probe").expect("a valid id");
    SessionSnapshot::builder(id, "m")
        .build()
        .expect("an empty snapshot builds")
}

/// Whether `store` archives: `set_archived` on a stored session is not
/// [`Error::Unsupported`].
fn archives<S: SessionStore>(store: &S) -> bool {
    let snapshot = probe();
    store
        .save(&snapshot)
        .expect("the store saves a first session");
    let archives = match store.set_archived(snapshot.id(), true) {
        Ok(()) => true,
        Err(Error::Unsupported { .. }) => false,
        Err(e) => panic!("set_archived on a stored session failed: {e}"),
    };
    store.delete(snapshot.id()).expect("the store deletes it");
    archives
}

/// Whether `store` writes nothing for a snapshot saved just as it was loaded.
fn skips_unchanged_saves<S: SessionStore>(store: &S) -> bool {
    let snapshot = probe();
    store
        .save(&snapshot)
        .expect("the store saves a first session");
    let loaded = store.load(snapshot.id()).expect("the store loads it");
    let skips = store.save(&loaded).expect("the store saves it again") == loaded.revision();
    store.delete(snapshot.id()).expect("the store deletes it");
    skips
}

/// Whether `store` leases: `acquire_lease` on a stored session is not
/// [`Error::Unsupported`].
fn leases<S: SessionStore>(store: &S) -> bool {
    let snapshot = probe();
    store
        .save(&snapshot)
        .expect("the store saves a first session");
    let request = crate::LeaseRequest::new(crate::LeaseHolder::this_process("contract-probe"));
    let leases = match store.acquire_lease(snapshot.id(), &request) {
        Ok(lease) => {
            store
                .release_lease(&lease)
                .expect("the store releases a lease");
            true
        }
        Err(Error::Unsupported { .. }) => false,
        Err(e) => panic!("acquire_lease on a stored session failed: {e}"),
    };
    store.delete(snapshot.id()).expect("the store deletes it");
    leases
}

/// Whether `store` keeps the history: after two saves, [`SessionStore::revisions`] lists
/// two revisions (a store that keeps only the head lists one).
fn keeps_history<S: SessionStore>(store: &S) -> bool {
    let snapshot = probe();
    store
        .save(&snapshot)
        .expect("the store saves a first session");
    let loaded = store.load(snapshot.id()).expect("the store loads it");
    let updated_at = loaded.updated_at();
    let next = loaded
        .with_appended(vec![crate::Message::user("probe")], Vec::new(), updated_at)
        .expect("a message appended");
    store.save(&next).expect("the store saves it again");
    let revisions = store
        .revisions(snapshot.id())
        .expect("the store lists its revisions");
    store.delete(snapshot.id()).expect("the store deletes it");
    revisions.len() > 1
}
