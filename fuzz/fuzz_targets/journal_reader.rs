//! The file store's journal reader on journals cut, torn, spliced, duplicated or made up:
//! loading gives exactly the state of the last intact record (never one that was not
//! written, never fewer than are intact) or a refusal of kind corrupt, never a panic.
//!
//! The check lives in `src/lib.rs`, shared with `tests/fuzz_regressions.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = agent_session_fuzz::journal_reader(data) {
        // Known open bugs are replayed by `cargo test`; here they would only stop the run.
        if agent_session_fuzz::known_issue("journal_reader", data).is_none() {
            panic!("journal_reader: {violation}");
        }
    }
});
