//! `Message::from_openai_chat` / `from_anthropic` on arbitrary JSON: an accepted message
//! converts back to exactly the input, also after the crate's native serde form.
//!
//! The check lives in `src/lib.rs`, shared with `tests/fuzz_regressions.rs`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = agent_session_fuzz::provider_messages(data) {
        // Known open bugs are replayed by `cargo test`; here they would only stop the run.
        if agent_session_fuzz::known_issue("provider_messages", data).is_none() {
            panic!("provider_messages: {violation}");
        }
    }
});
