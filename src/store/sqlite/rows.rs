//! What the `sessions` row holds beside the log, in the columns' own types: the listing
//! summary (JSON), times as nanoseconds, revisions as integers, a state's lengths as
//! text; the encodings shared with the PostgreSQL store are in `store::columns`.

use crate::snapshot::Counts;

pub(super) use crate::store::columns::{
    nanos, nanos_saturating, revision_column, revision_of, state_counts, summary_json, summary_of,
    to_i64,
};

/// The lengths in a `state_counts` column; `None` if it does not hold three numbers.
pub(super) fn parse_counts(text: &str) -> Option<Counts> {
    let mut parts = text.split(',').map(str::parse::<usize>);
    let counts = Counts {
        messages: parts.next()?.ok()?,
        tool_calls: parts.next()?.ok()?,
        usage: parts.next()?.ok()?,
    };
    parts.next().is_none().then_some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_counts_round_trip_and_refuse_damage() {
        let counts = Counts {
            messages: 3,
            tool_calls: 1,
            usage: 2,
        };
        assert_eq!(parse_counts(&state_counts(counts)), Some(counts));
        for bad in ["", "1,2", "1,2,3,4", "a,b,c", "-1,0,0"] {
            assert_eq!(parse_counts(bad), None, "{bad:?}");
        }
    }
}
