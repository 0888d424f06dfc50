//! Helpers for the tests of the file store's journal and of step-level autosave: the
//! per-session file paths, a reader of journal frames (independent of the crate's own),
//! private writes that imitate tampering or a crash, turn builders, and a store wrapper
//! that records (and can fail) every save.
//!
//! Included by `tests/journal.rs` and `tests/autosave.rs` with `#[path]`.

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agent_session::{
    Compaction, ContentBlock, Cost, Error, FileSessionStore, Message, Revision, SessionId,
    SessionList, SessionSnapshot, SessionStore, ToolCall, ToolResult, Usage,
};
use serde_json::{json, Value};

/// The three files of one session in a file store.
#[derive(Debug, Clone)]
pub struct Files {
    /// `<id>.json`, the base snapshot.
    pub base: PathBuf,
    /// `<id>.journal`.
    pub journal: PathBuf,
    /// `<id>.summary`.
    pub summary: PathBuf,
}

/// A store directory inside a fresh temporary directory (kept alive by the guard), the
/// store created in it. The parent is on the same file system, for files "outside the
/// store".
pub fn store_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("create a temporary directory");
    let dir = tmp.path().join("sessions");
    FileSessionStore::open(&dir).expect("create the store");
    (tmp, dir)
}

/// The file store in `dir`.
pub fn open(dir: &Path) -> FileSessionStore {
    FileSessionStore::open(dir).expect("open the store")
}

/// The files of session `id` in the store directory `dir`.
pub fn files(dir: &Path, id: &SessionId) -> Files {
    Files {
        base: dir.join(format!("{id}.json")),
        journal: dir.join(format!("{id}.journal")),
        summary: dir.join(format!("{id}.summary")),
    }
}

/// The bytes of `path`, or nothing if there is no such file.
pub fn bytes_or_empty(path: &Path) -> Vec<u8> {
    match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("read {}: {e}", path.display()),
    }
}

/// The length of `path`, or 0 if there is no such file.
pub fn len_or_zero(path: &Path) -> u64 {
    match fs::symlink_metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => panic!("stat {}: {e}", path.display()),
    }
}

/// The inode of `path`.
pub fn inode(path: &Path) -> u64 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .ino()
}

/// Writes `bytes` to `path` in place (same inode if it exists), as a private file (0600)
/// if it has to be created: what a crash, a disk error or a hand edit leaves.
pub fn write_private(path: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    file.write_all(bytes)
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// One frame of a journal (or summary) file, `@LLLLLLLL CCCCCCCC\n<payload>\n`.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Where the frame starts.
    pub offset: usize,
    /// Where it ends (one past its closing newline).
    pub end: usize,
    /// The JSON payload.
    pub payload: Vec<u8>,
}

impl Frame {
    /// The payload as JSON; for a log entry (a head line and a body line), its head.
    pub fn json(&self) -> Value {
        let head = self
            .payload
            .split(|&b| b == b'\n')
            .next()
            .unwrap_or_default();
        serde_json::from_slice(head).expect("a frame's payload is JSON")
    }

    /// The body of a log entry (its second line) as JSON.
    pub fn body(&self) -> Value {
        let body = self
            .payload
            .splitn(2, |&b| b == b'\n')
            .nth(1)
            .expect("a log entry has a body line");
        serde_json::from_slice(body).expect("an entry's body is JSON")
    }
}

/// The payload of a log entry whose head and body are these JSON values.
pub fn entry_payload(head: &Value, body: &Value) -> Vec<u8> {
    let mut payload = serde_json::to_vec(head).expect("encode the head");
    payload.push(b'\n');
    payload.extend(serde_json::to_vec(body).expect("encode the body"));
    payload
}

/// Frames `payload` the way the store does: 8-hex length, 8-hex CRC-32, newlines.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("@{:08x} {:08x}\n", payload.len(), crc32fast::hash(payload)).into_bytes();
    out.extend_from_slice(payload);
    out.push(b'\n');
    out
}

/// Every frame of `bytes`, which must be whole, intact frames and nothing else.
pub fn frames(bytes: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let header = std::str::from_utf8(&bytes[at..at + 19]).expect("an ASCII frame header");
        assert!(
            header.starts_with('@') && header.ends_with('\n') && &header[9..10] == " ",
            "a frame header at byte {at}: {header:?}"
        );
        let len = usize::from_str_radix(&header[1..9], 16).expect("hex length");
        let crc = u32::from_str_radix(&header[10..18], 16).expect("hex checksum");
        let payload = bytes[at + 19..at + 19 + len].to_vec();
        assert_eq!(
            crc32fast::hash(&payload),
            crc,
            "checksum of the frame at {at}"
        );
        assert_eq!(
            bytes[at + 19 + len],
            b'\n',
            "newline after the frame at {at}"
        );
        let end = at + 19 + len + 1;
        out.push(Frame {
            offset: at,
            end,
            payload,
        });
        at = end;
    }
    out
}

/// The model name the journal tests use.
pub const MODEL: &str = "journal-model-1";

/// Text of about `len` bytes that needs no JSON escaping, different for each `seed`.
pub fn filler(seed: usize, len: usize) -> String {
    const WORDS: [&str; 8] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
    ];
    let mut out = format!("[{seed}]");
    let mut i = seed;
    while out.len() < len {
        out.push(' ');
        out.push_str(WORDS[i % WORDS.len()]);
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    out.truncate(len);
    out
}

/// One turn as a session stores it: a user message, an assistant message calling a tool,
/// and the tool's result. `size` is about the JSON size of the three messages.
pub fn turn(i: usize, size: usize) -> Vec<Message> {
    let part = size.saturating_sub(330) / 3;
    let call_id = format!("call_{i}");
    vec![
        Message::user(filler(i, part)),
        Message::assistant(vec![
            ContentBlock::text(format!("Step {i}: writing the file.")),
            ContentBlock::tool_call(ToolCall::new(
                call_id.clone(),
                "write_file",
                json!({ "path": format!("src/file_{i}.rs"), "content": filler(i + 1, part) }),
            )),
        ]),
        Message::tool_result(ToolResult::new(call_id, filler(i + 2, part))),
    ]
}

/// The usage of the completion that produced turn `i`: `i + 1` micro-dollars.
pub fn turn_usage(i: usize) -> Usage {
    Usage::new(MODEL)
        .with_tokens(1_000 + i as u64, 40)
        .with_cost(Cost::from_nano_usd(1_000 * (i as u64 + 1)))
}

/// A snapshot of session `id` built from scratch (so with no provenance) holding turns
/// `0..turns` of `size` bytes each.
pub fn built(id: &SessionId, turns: usize, size: usize) -> SessionSnapshot {
    SessionSnapshot::builder(id.clone(), MODEL)
        .transcript((0..turns).flat_map(|i| turn(i, size)).collect())
        .usage((0..turns).map(turn_usage).collect())
        .build()
        .expect("a consistent snapshot")
}

/// `snapshot` with turn `i` appended (keeping what the store knows of it).
pub fn appended(snapshot: SessionSnapshot, i: usize, size: usize) -> SessionSnapshot {
    let updated_at = chrono::Utc::now().max(snapshot.updated_at());
    snapshot
        .with_appended(turn(i, size), vec![turn_usage(i)], updated_at)
        .expect("a consistent turn")
}

/// The error a [`Recorder`] fails with.
pub fn injected_error() -> Error {
    Error::Io {
        operation: "save (injected failure)",
        path: PathBuf::from("/injected"),
        source: io::Error::other("disk full"),
    }
}

/// Whether `err` is [`injected_error`].
pub fn is_injected(err: &Error) -> bool {
    matches!(err, Error::Io { operation, .. } if *operation == "save (injected failure)")
}

/// A store that records every snapshot it is asked to save (and the outcome), and fails
/// the saves whose 1-based numbers are in its failure set with [`injected_error`].
#[derive(Debug)]
pub struct Recorder<S> {
    inner: S,
    saves: Mutex<Vec<(SessionSnapshot, Result<Revision, String>)>>,
    fail: Mutex<HashSet<usize>>,
}

impl<S: SessionStore> Recorder<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Recorder {
            inner,
            saves: Mutex::new(Vec::new()),
            fail: Mutex::new(HashSet::new()),
        }
    }

    /// Makes save number `n` (counting from 1, failed saves included) fail.
    pub fn fail_save(&self, n: usize) {
        self.fail.lock().expect("lock").insert(n);
    }

    /// Makes every save fail.
    pub fn fail_all(&self) {
        self.fail.lock().expect("lock").extend(1..10_000);
    }

    /// The snapshots given to `save`, in order, with what each save returned.
    pub fn saves(&self) -> Vec<(SessionSnapshot, Result<Revision, String>)> {
        self.saves.lock().expect("lock").clone()
    }

    /// How many saves were attempted.
    pub fn save_count(&self) -> usize {
        self.saves.lock().expect("lock").len()
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: SessionStore> SessionStore for Recorder<S> {
    fn save(&self, snapshot: &SessionSnapshot) -> agent_session::Result<Revision> {
        let mut saves = self.saves.lock().expect("lock");
        let n = saves.len() + 1;
        let result = if self.fail.lock().expect("lock").contains(&n) {
            Err(injected_error())
        } else {
            self.inner.save(snapshot)
        };
        saves.push((
            snapshot.clone(),
            result.as_ref().map(|r| *r).map_err(ToString::to_string),
        ));
        result
    }

    fn load(&self, id: &SessionId) -> agent_session::Result<SessionSnapshot> {
        self.inner.load(id)
    }

    fn list(&self) -> agent_session::Result<SessionList> {
        self.inner.list()
    }

    fn delete(&self, id: &SessionId) -> agent_session::Result<()> {
        self.inner.delete(id)
    }
}

/// Session `id` saved into `store` turn by turn: a first save of one turn, then `turns - 1`
/// more, each appended to what the last save stored.
pub fn save_turn_by_turn(
    store: &dyn SessionStore,
    id: &SessionId,
    turns: usize,
    size: usize,
) -> SessionSnapshot {
    let mut head = built(id, 1, size);
    let revision = store.save(&head).expect("first save");
    head = head.with_revision(revision);
    for i in 1..turns {
        let next = appended(head, i, size);
        let revision = store.save(&next).expect("save a turn");
        head = next.with_revision(revision);
    }
    head
}

/// Compacts the stored session `id` down to its last `keep` turns and one summary
/// message, and returns the saved state.
pub fn compact(store: &dyn SessionStore, id: &SessionId, keep: usize) -> SessionSnapshot {
    let mut head = store.load(id).expect("load");
    let point = head.compaction_point(keep).expect("a point to compact at");
    head.compact(Compaction::new(
        point,
        vec![Message::user(format!(
            "Summary of the first {point} messages."
        ))],
    ))
    .expect("compact");
    let revision = store.save(&head).expect("save the compaction");
    head.with_revision(revision)
}
