//! `LogEntry::from_bytes` on arbitrary bytes, and `SessionLog` folding what it accepts:
//! refusals are typed errors; accepted entries re-encode stably; a log of them works out
//! valid states or refuses with a typed error, never a panic.
//!
//! The check lives in `src/lib.rs`, shared with `tests/fuzz_regressions.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = agent_session_fuzz::log_entry(data) {
        // Known open bugs are replayed by `cargo test`; here they would only stop the run.
        if agent_session_fuzz::known_issue("log_entry", data).is_none() {
            panic!("log_entry: {violation}");
        }
    }
});
