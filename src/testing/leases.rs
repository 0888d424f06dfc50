//! Contract cases for leases (see [`Lease`](crate::Lease)): for stores that lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::support::{id, simple_snapshot};
use crate::{Error, ErrorKind, LeaseHolder, LeaseRequest, Message, SessionStore, MIN_LEASE_TTL};

fn request(label: &str) -> LeaseRequest {
    LeaseRequest::new(LeaseHolder::this_process(label)).ttl(Duration::from_secs(3600))
}

pub(super) fn a_lease_is_exclusive_until_released_and_names_its_holder<S: SessionStore>(store: &S) {
    let snapshot = simple_snapshot("leased", 1);
    store.save(&snapshot).expect("save");
    let first = store
        .acquire_lease(snapshot.id(), &request("first"))
        .expect("a free session is leased");
    assert_eq!(first.session, *snapshot.id());
    assert_eq!(first.holder.label, "first");
    assert!(first.epoch >= 1);
    assert!(first.expires_at > first.acquired_at);

    match store.acquire_lease(snapshot.id(), &request("second")) {
        Err(Error::Leased {
            id, holder, since, ..
        }) => {
            assert_eq!(id, *snapshot.id());
            assert_eq!(holder, first.holder, "the refusal names the holder");
            assert_eq!(since, first.acquired_at, "and since when");
        }
        other => panic!("a second lease must be refused with Error::Leased, got {other:?}"),
    }
    assert_eq!(store.leases().expect("leases"), vec![first.clone()]);

    store.release_lease(&first).expect("release");
    assert!(store.leases().expect("leases").is_empty(), "released");
    store
        .release_lease(&first)
        .expect("releasing again does nothing");
    let second = store
        .acquire_lease(snapshot.id(), &request("second"))
        .expect("a released session is leased at once");
    assert!(
        second.epoch > first.epoch,
        "every acquisition raises the epoch"
    );
    assert_eq!(store.leases().expect("leases"), vec![second]);

    let missing = id("never-saved");
    assert_eq!(
        store
            .acquire_lease(&missing, &request("first"))
            .expect_err("no such session")
            .kind(),
        ErrorKind::NotFound
    );
}

pub(super) fn a_taken_over_lease_fences_the_old_holder_even_at_the_current_revision<
    S: SessionStore,
>(
    store: &S,
) {
    let snapshot = simple_snapshot("taken-over", 1);
    store.save(&snapshot).expect("save");
    let old = store
        .acquire_lease(snapshot.id(), &request("old"))
        .expect("lease");
    let loaded = store.load(snapshot.id()).expect("load");
    let new = store
        .acquire_lease(snapshot.id(), &request("new").take_over(true))
        .expect("take over");
    assert!(new.epoch > old.epoch);

    // The old holder's save would match the revision, and is refused all the same.
    let stale = extended(&loaded, "from the old holder").with_lease(&old);
    match store.save(&stale) {
        Err(Error::Fenced { epoch, current, .. }) => {
            assert_eq!((epoch, current), (old.epoch, new.epoch));
        }
        other => panic!("a save under a taken-over lease must be fenced, got {other:?}"),
    }
    assert_eq!(
        store.load(snapshot.id()).expect("load"),
        loaded,
        "nothing was written"
    );
    assert_fenced(
        store,
        &loaded.clone().with_lease(&old),
        "even an unchanged snapshot under a taken-over lease is refused",
    );
    assert_eq!(
        store
            .renew_lease(&old, Duration::from_secs(60))
            .expect_err("renewal of a taken-over lease")
            .kind(),
        ErrorKind::Leased
    );
    store
        .release_lease(&old)
        .expect("releasing a taken-over lease does nothing");
    assert_eq!(store.leases().expect("leases"), vec![new.clone()]);

    let current = extended(&loaded, "from the new holder").with_lease(&new);
    let revision = store.save(&current).expect("the new holder saves");
    assert_eq!(revision, loaded.revision().next());
    let renewed = store
        .renew_lease(&new, Duration::from_secs(7200))
        .expect("renew");
    assert_eq!(renewed.epoch, new.epoch, "renewal keeps the epoch");
    assert!(renewed.expires_at > new.expires_at);
}

pub(super) fn a_save_without_a_lease_is_refused_while_one_is_live<S: SessionStore>(store: &S) {
    let snapshot = simple_snapshot("unleased-writer", 1);
    store.save(&snapshot).expect("save");
    let loaded = store.load(snapshot.id()).expect("load");
    let lease = store
        .acquire_lease(snapshot.id(), &request("holder"))
        .expect("lease");
    assert_eq!(
        store
            .save(&extended(&loaded, "unleased"))
            .expect_err("another writer without a lease")
            .kind(),
        ErrorKind::Leased
    );
    // A snapshot marked with another session's lease is a mistake, not a lease.
    let other = simple_snapshot("other-session", 1);
    store.save(&other).expect("save");
    let other_loaded = store.load(other.id()).expect("load");
    assert_eq!(
        store
            .save(&extended(&other_loaded, "wrong lease").with_lease(&lease))
            .expect_err("another session's lease")
            .kind(),
        ErrorKind::InvalidInput
    );
    store.release_lease(&lease).expect("release");
    store
        .save(&extended(&loaded, "unleased"))
        .expect("no lease is live: saves need none");
}

pub(super) fn an_expired_lease_is_taken_without_take_over_and_fences_its_holder<S: SessionStore>(
    store: &S,
) {
    let snapshot = simple_snapshot("expiring", 1);
    store.save(&snapshot).expect("save");
    let too_short = request("short").ttl(MIN_LEASE_TTL / 2);
    assert_eq!(
        store
            .acquire_lease(snapshot.id(), &too_short)
            .expect_err("a lease that would end before it can be renewed")
            .kind(),
        ErrorKind::InvalidInput
    );
    let short = request("short").ttl(MIN_LEASE_TTL);
    let expired = store.acquire_lease(snapshot.id(), &short).expect("lease");
    std::thread::sleep(MIN_LEASE_TTL * 2);
    assert!(
        store.leases().expect("leases").is_empty(),
        "an expired lease is not listed"
    );
    let next = store
        .acquire_lease(snapshot.id(), &request("next"))
        .expect("an expired lease is taken without take_over");
    assert!(next.epoch > expired.epoch);
    let loaded = store.load(snapshot.id()).expect("load");
    assert_fenced(
        store,
        &extended(&loaded, "late").with_lease(&expired),
        "the expired holder is fenced",
    );
}

pub(super) fn epochs_keep_growing_when_the_id_is_used_again<S: SessionStore>(store: &S) {
    let snapshot = simple_snapshot("reused-id", 1);
    store.save(&snapshot).expect("save");
    let old = store
        .acquire_lease(snapshot.id(), &request("old"))
        .expect("lease");
    store.delete(snapshot.id()).expect("delete");
    // The lease outlives the session: while it is live, nobody else takes the id.
    assert_eq!(
        store
            .save(&simple_snapshot("reused-id", 2))
            .expect_err("the id is leased")
            .kind(),
        ErrorKind::Leased
    );
    store.release_lease(&old).expect("release");
    store
        .save(&simple_snapshot("reused-id", 2))
        .expect("a new session under the id");
    let new = store
        .acquire_lease(snapshot.id(), &request("new"))
        .expect("lease the new session");
    assert!(
        new.epoch > old.epoch,
        "epochs outlive the session's deletion"
    );
    let loaded = store.load(snapshot.id()).expect("load");
    assert_fenced(
        store,
        &extended(&loaded, "stale").with_lease(&old),
        "the old session's holder is fenced",
    );
}

pub(super) fn a_released_lease_fences_its_saves_and_a_live_one_refuses_a_restore<
    S: SessionStore,
>(
    store: &S,
) {
    let snapshot = simple_snapshot("released", 1);
    store.save(&snapshot).expect("save");
    let first = store.load(snapshot.id()).expect("load");
    let second = extended(&first, "second");
    store.save(&second).expect("a second revision");
    let lease = store
        .acquire_lease(snapshot.id(), &request("holder"))
        .expect("lease");
    let loaded = store.load(snapshot.id()).expect("load");
    // A restore is a write made without a lease: refused while one is live, nothing
    // written.
    assert_eq!(
        store
            .restore(snapshot.id(), first.revision())
            .expect_err("a restore while the session is leased")
            .kind(),
        ErrorKind::Leased
    );
    assert_eq!(store.load(snapshot.id()).expect("load"), loaded);
    // An unchanged snapshot under the lease saves as usual; the holder's own change too.
    store
        .save(&loaded.clone().with_lease(&lease))
        .expect("unchanged, under the lease");
    let mine = extended(&loaded, "mine").with_lease(&lease);
    let revision = store.save(&mine).expect("the holder saves");
    store.release_lease(&lease).expect("release");
    // After its release the lease fences what is still saved under it, even unchanged.
    let after = store.load(snapshot.id()).expect("load");
    assert_eq!(after.revision(), revision);
    assert_fenced(
        store,
        &after.clone().with_lease(&lease),
        "an unchanged save under a released lease",
    );
    assert_fenced(
        store,
        &extended(&after, "late").with_lease(&lease),
        "a save under a released lease",
    );
    store
        .restore(snapshot.id(), first.revision())
        .expect("no lease is live: a restore goes ahead");
}

/// Take-overs in the middle of the old holder's stream of saves: a save the old holder
/// starts once the take-over has returned is fenced, and the new holder's first save, made
/// from what it loaded after taking over, never conflicts with one of the old holder's.
pub(super) fn a_take_over_amid_the_holders_saves_lets_none_through_after_it<S: SessionStore>(
    store: &S,
) {
    const TAKE_OVERS: usize = 20;
    let snapshot = simple_snapshot("contended", 1);
    store.save(&snapshot).expect("save");
    let id = snapshot.id();
    let mut lease = store
        .acquire_lease(id, &request("holder-0"))
        .expect("lease");
    for round in 1..=TAKE_OVERS {
        let taken_over = AtomicBool::new(false);
        let old = lease.clone();
        lease = std::thread::scope(|scope| {
            let holder = scope.spawn(|| -> usize {
                let mut saved = 0;
                loop {
                    let current = store.load(id).expect("load");
                    let started_after = taken_over.load(Ordering::SeqCst);
                    match store.save(&extended(&current, "old holder").with_lease(&old)) {
                        Ok(_) => {
                            assert!(
                                !started_after,
                                "round {round}: a save started after the take-over went through"
                            );
                            saved += 1;
                        }
                        Err(Error::Fenced { .. }) => return saved,
                        Err(Error::Conflict { .. }) => {}
                        Err(e) => panic!("round {round}: the old holder's save failed: {e}"),
                    }
                }
            });
            std::thread::sleep(Duration::from_millis(2));
            let new = store
                .acquire_lease(id, &request("new holder").take_over(true))
                .expect("take over");
            taken_over.store(true, Ordering::SeqCst);
            let loaded = store.load(id).expect("load");
            store
                .save(&extended(&loaded, "new holder").with_lease(&new))
                .unwrap_or_else(|e| {
                    panic!("round {round}: the new holder's first save met an old holder's: {e}")
                });
            holder.join().expect("the old holder");
            new
        });
    }
}

/// Saves `snapshot` and requires [`Error::Fenced`] (not only its kind, which
/// [`Error::Leased`] shares), with `why` in the failure.
fn assert_fenced<S: SessionStore>(store: &S, snapshot: &crate::SessionSnapshot, why: &str) {
    match store.save(snapshot) {
        Err(Error::Fenced { .. }) => {}
        other => panic!("{why}: expected Error::Fenced, got {other:?}"),
    }
}

/// `loaded` with one more user message.
fn extended(loaded: &crate::SessionSnapshot, text: &str) -> crate::SessionSnapshot {
    loaded
        .clone()
        .with_appended(vec![Message::user(text)], Vec::new(), loaded.updated_at())
        .expect("a message appended")
}
