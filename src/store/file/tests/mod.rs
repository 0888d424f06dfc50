//! Test machinery for the file store: a fault-injecting file system that fails any one
//! system call ([`fault_injection`]), and a crash model that replays every prefix of a
//! store's writes as a power loss could leave it ([`crash_model`]).

mod crash_model;
mod fault_injection;
mod known_state;

use std::path::Path;
use std::sync::Arc;

use super::fs::FileSystem;
use super::FileSessionStore;
use crate::error::Result;

impl FileSessionStore {
    /// Opens with default settings but the given size limit, through `fs`: the seam through
    /// which both suites put their file system under the store.
    pub(super) fn open_with(
        dir: &Path,
        max_snapshot_bytes: u64,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Self> {
        let mut settings = FileSessionStore::builder();
        settings.max_snapshot_bytes(max_snapshot_bytes);
        FileSessionStore::open_configured(dir, &settings, fs)
    }
}

/// The journal `journal` (of the current format, holding only turns) as an earlier release
/// wrote it: journal format 1, each entry a record that keeps the previous state's
/// lengths (`from`) and appends its messages, records and usage.
pub(super) fn journal_in_format_1(journal: &[u8]) -> Vec<u8> {
    use serde_json::{json, Value};
    let frames = super::journal::split(journal).expect("an intact journal");
    let mut out = Vec::new();
    let mut before: Option<Value> = None;
    for (i, (_, payload)) in frames.frames.iter().enumerate() {
        let record = if i == 0 {
            let mut header: Value = serde_json::from_slice(payload).expect("the header");
            header["journal"] = json!(1);
            before = Some(header["base"].clone());
            header
        } else {
            let (head, body) = crate::snapshot::split_entry(payload).expect("an entry");
            let head: Value = serde_json::from_slice(head).expect("a head");
            let body: Value = serde_json::from_slice(body).expect("a body");
            assert_eq!(
                head["kind"], "turn",
                "only turns have a record of format 1 here"
            );
            let record = json!({
                "revision": head["revision"],
                "updated_at": head["updated_at"],
                "from": before.take().expect("the state before"),
                "messages": body["messages"],
                "tool_calls": body["tool_calls"],
                "usage": head["usage"],
            });
            before = Some(head["state"].clone());
            record
        };
        out.extend(super::journal::frame(
            &serde_json::to_vec(&record).expect("encode"),
        ));
    }
    out
}
