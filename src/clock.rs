//! The rule for session times that lie in the future.
//!
//! A session's `updated_at` orders listings, picks the session to continue
//! ([`Harness::resume_latest`](crate::Harness::resume_latest)) and measures its age for
//! [`prune`](crate::SessionStoreExt::prune). A single time far in the future (a session
//! imported from a machine whose clock was ahead, or saved while this machine's clock was)
//! would otherwise stay "latest" for as long as the error, and make the session just used
//! look older than it. So:
//!
//! 1. A change to a session sets `updated_at` to the current time (never earlier than the
//!    creation time); an earlier stamp, even one in the future, never holds it up.
//! 2. A time later than this machine's clock plus [`CLOCK_SKEW_TOLERANCE`] is *in the
//!    future*. [`SnapshotBuilder::build`](crate::SnapshotBuilder::build) and
//!    [`SessionSnapshot::with_appended`](crate::SessionSnapshot::with_appended) refuse one;
//!    [`SessionStoreExt::import`](crate::SessionStoreExt::import) sets such times to the time of
//!    the import and says so ([`Imported::clamped_from`](crate::Imported::clamped_from)).
//! 3. Stored sessions updated in the future (written before this rule, or while this
//!    machine's clock was ahead) are listed after every other session, newest first among
//!    themselves, so they are never "latest"
//!    ([`SessionSummary::is_updated_in_the_future`](crate::SessionSummary::is_updated_in_the_future));
//!    and prune never deletes them, since their age is unknown
//!    ([`PruneReport::in_the_future`](crate::PruneReport::in_the_future)). Saving one again
//!    gives it the current time (rule 1).

use std::time::Duration;

use chrono::{DateTime, Utc};

/// How far ahead of this machine's clock a session's time may be and still count as
/// plausible: clocks of machines sharing a store differ by this much at most, in practice.
pub const CLOCK_SKEW_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The latest plausible time, seen from `now`.
pub(crate) fn horizon(now: DateTime<Utc>) -> DateTime<Utc> {
    chrono::TimeDelta::from_std(CLOCK_SKEW_TOLERANCE)
        .ok()
        .and_then(|tolerance| now.checked_add_signed(tolerance))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Whether `at` lies in the future, seen from `now` (rule 2).
pub(crate) fn is_in_the_future(at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    at > horizon(now)
}

/// The `updated_at` of a change made now to a session last stamped `previous` and created
/// at `created_at` (rule 1): the current time, never before the creation time, and always
/// a different stamp than `previous`, so a store can tell a changed session from the one
/// it holds by its stamp alone. Not simply the later of now and `previous`: one stamp in
/// the future would then keep the session "updated" in the future for ever; `previous`
/// holds the new stamp up only while it is plausible (then by a nanosecond).
pub(crate) fn next_stamp(previous: DateTime<Utc>, created_at: DateTime<Utc>) -> DateTime<Utc> {
    let now = Utc::now();
    let next = if now <= previous && !is_in_the_future(previous, now) {
        previous + chrono::TimeDelta::nanoseconds(1)
    } else {
        now.max(created_at)
    };
    if next == previous {
        previous
            .checked_add_signed(chrono::TimeDelta::nanoseconds(1))
            .unwrap_or(previous)
    } else {
        next
    }
}
