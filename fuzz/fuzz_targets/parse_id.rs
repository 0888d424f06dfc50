//! `SessionId::parse` on arbitrary text: accepted exactly when the documented rules hold,
//! and an accepted id round-trips through `Display`, `FromStr`, `TryFrom` and serde.
//!
//! The check lives in `src/lib.rs`, shared with `tests/fuzz_regressions.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = agent_session_fuzz::parse_id(data) {
        // Known open bugs are replayed by `cargo test`; here they would only stop the run.
        if agent_session_fuzz::known_issue("parse_id", data).is_none() {
            panic!("parse_id: {violation}");
        }
    }
});
