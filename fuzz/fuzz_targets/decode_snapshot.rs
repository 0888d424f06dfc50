//! `SessionSnapshot::from_json` on arbitrary bytes: refusals are typed decoding errors;
//! accepted snapshots encode, decode back equal and encode to the same bytes again.
//!
//! The check lives in `src/lib.rs`, shared with `tests/fuzz_regressions.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = agent_session_fuzz::decode_snapshot(data) {
        // Known open bugs are replayed by `cargo test`; here they would only stop the run.
        if agent_session_fuzz::known_issue("decode_snapshot", data).is_none() {
            panic!("decode_snapshot: {violation}");
        }
    }
});
