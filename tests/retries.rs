//! A save retried after its acknowledgement was lost (issue 17, "idempotent retries").
//!
//! A caller whose save timed out cannot know whether it was stored. Retrying the same
//! snapshot must give back the revision it got the first time, not a conflict, and the
//! history must hold the change once; a different change made at the same stale revision
//! must still conflict. Cases: random runs of turns, metadata edits and rewinds on the
//! memory store (10,000 runs), the file store (500) and the PostgreSQL store (300, feature
//! `postgres`), each save "losing" its acknowledgement at random and being retried once or
//! twice; and on PostgreSQL, acknowledgements really lost: a proxy between the store and
//! the server cuts the connection after the server committed a save and before its reply
//! reaches the store.

use agent_session::{
    ContentBlock, Durability, FileSessionStore, MemorySessionStore, Message, RewindTo, SessionId,
    SessionSnapshot, SessionStore,
};
use serde_json::json;

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod postgres_support;

/// A small deterministic generator (`SplitMix64`), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The next state of `current` (stored at its revision): a turn, an edit of the metadata
/// (a whole-view entry), or a rewind of the last turn, as `choice` says.
fn change(current: &SessionSnapshot, step: usize, choice: u64) -> SessionSnapshot {
    let later = current.updated_at() + chrono::TimeDelta::milliseconds(1);
    match choice {
        0 if current.transcript().len() >= 4 => {
            let mut rewound = current.clone();
            rewound
                .rewind(RewindTo::LastTurns(1))
                .expect("rewind the last turn");
            rewound
        }
        1 => {
            let mut builder = SessionSnapshot::builder(current.id().clone(), "m")
                .transcript(current.transcript().to_vec())
                .usage(current.usage().to_vec())
                .metadata(current.metadata().clone())
                .metadata_entry("edit", json!(step))
                .timestamps(current.created_at(), later);
            if let Some(prompt) = &current.options().system_prompt {
                builder = builder.system_prompt(prompt.clone());
            }
            builder
                .build()
                .expect("an edited snapshot")
                .with_revision(current.revision())
        }
        _ => current
            .clone()
            .with_appended(
                vec![
                    Message::user(format!("turn {step}")),
                    Message::assistant(vec![ContentBlock::text(format!("reply {step}"))]),
                ],
                Vec::new(),
                later,
            )
            .expect("a turn appended"),
    }
}

/// Runs `cases` random runs on stores from `make`; returns (saves, retries).
fn run<S: SessionStore>(make: impl Fn() -> S, cases: u64, seed: u64) -> (u64, u64) {
    let (mut saves, mut retries) = (0, 0);
    for case in 0..cases {
        let mut rng = Rng(seed ^ case.wrapping_mul(0x1000_0000_01B3));
        let store = make();
        let id = SessionId::parse(&format!("retry-{case}")).expect("id");
        let first = SessionSnapshot::builder(id.clone(), "m")
            .transcript(vec![Message::user("first")])
            .build()
            .expect("build");
        let mut revision = store.save(&first).expect("first save");
        saves += 1;
        // The first save's acknowledgement may be lost too.
        if rng.below(2) == 0 {
            retries += 1;
            assert_eq!(
                store.save(&first).expect("first save retried"),
                revision,
                "case {case}: a retried first save"
            );
        }
        let mut current = store.load(&id).expect("load");
        let steps = 1 + usize::try_from(rng.below(6)).expect("below 6");
        for step in 0..steps {
            let next = change(&current, step, rng.below(4));
            let got = store.save(&next).expect("save");
            assert_eq!(got, revision.next(), "case {case}, step {step}");
            saves += 1;
            for _ in 0..rng.below(3) {
                retries += 1;
                assert_eq!(
                    store.save(&next).unwrap_or_else(|e| panic!(
                        "case {case}, step {step}: a retried save must get its revision back, got {e}"
                    )),
                    got,
                    "case {case}, step {step}"
                );
            }
            // A different change made at the same stale revision is still a conflict.
            if rng.below(4) == 0 {
                let other = change(&current, step + 1000, 2);
                assert!(
                    store
                        .save(&other)
                        .expect_err("another change at a stale revision")
                        .is_conflict(),
                    "case {case}, step {step}"
                );
            }
            revision = got;
            current = store.load(&id).expect("load");
            assert_eq!(current.revision(), revision);
        }
        // Each change is in the log once: one revision per acknowledged save, none for the
        // retries.
        let revisions = store.revisions(&id).expect("revisions");
        assert_eq!(
            revisions.len() as u64,
            revision.as_u64(),
            "case {case}: one revision per change"
        );
        // And the view holds each turn it kept once.
        for step in 0..steps {
            let text = format!("turn {step}");
            assert!(
                current
                    .transcript()
                    .iter()
                    .filter(|m| m.text() == text)
                    .count()
                    <= 1,
                "case {case}: {text} twice in the view"
            );
        }
    }
    (saves, retries)
}

#[test]
fn a_retried_save_gets_its_revision_back_in_the_memory_store() {
    let (saves, retries) = run(MemorySessionStore::new, 10_000, 0x5EED);
    println!("memory store: {saves} saves, {retries} retries, every one idempotent");
}

#[test]
fn a_retried_save_gets_its_revision_back_in_the_file_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = std::cell::Cell::new(0);
    let (saves, retries) = run(
        || {
            n.set(n.get() + 1);
            FileSessionStore::builder()
                .durability(Durability::Buffered)
                .open(dir.path().join(format!("store-{}", n.get())))
                .expect("open")
        },
        500,
        0xF11E,
    );
    println!("file store: {saves} saves, {retries} retries, every one idempotent");
}

/// The negative control: a store that only compares revisions (the trait's contract
/// before retries were recognised) fails the same run at its first retry.
#[test]
fn the_run_catches_a_store_that_answers_a_retry_with_a_conflict() {
    struct CasOnly(MemorySessionStore);
    impl SessionStore for CasOnly {
        fn save(
            &self,
            snapshot: &SessionSnapshot,
        ) -> agent_session::Result<agent_session::Revision> {
            let stored = self.0.load(snapshot.id()).ok().map(|s| s.revision());
            if stored.is_some_and(|r| r != snapshot.revision()) {
                return Err(agent_session::Error::Conflict {
                    id: snapshot.id().clone(),
                    expected: snapshot.revision(),
                    found: stored,
                });
            }
            self.0.save(snapshot)
        }
        fn load(&self, id: &SessionId) -> agent_session::Result<SessionSnapshot> {
            self.0.load(id)
        }
        fn list(&self) -> agent_session::Result<agent_session::SessionList> {
            self.0.list()
        }
        fn delete(&self, id: &SessionId) -> agent_session::Result<()> {
            self.0.delete(id)
        }
        fn revisions(
            &self,
            id: &SessionId,
        ) -> agent_session::Result<Vec<agent_session::RevisionInfo>> {
            self.0.revisions(id)
        }
        fn history(&self, id: &SessionId) -> agent_session::Result<agent_session::History> {
            self.0.history(id)
        }
    }
    let caught = std::panic::catch_unwind(|| run(|| CasOnly(MemorySessionStore::new()), 50, 1));
    assert!(
        caught.is_err(),
        "a compare-and-swap-only store must fail the run"
    );
}

#[cfg(feature = "postgres")]
#[test]
fn a_retried_save_gets_its_revision_back_in_the_postgres_store() {
    let schemas = postgres_support::Schemas::new();
    let store = std::sync::Arc::new(schemas.store());
    let (saves, retries) = run(|| std::sync::Arc::clone(&store), 300, 0x9057);
    println!("PostgreSQL store: {saves} saves, {retries} retries, every one idempotent");
}

/// A save whose reply the connection loses after the server committed it: the store
/// reports an error, the session is at the new revision all the same, and the retry (on a
/// new connection) gets that revision back; the turn is in the history once.
#[cfg(feature = "postgres")]
#[test]
fn a_postgres_save_whose_reply_is_cut_off_is_retried_to_the_same_revision() {
    use agent_session::PostgresSessionStore;
    const CASES: usize = 20;
    let schemas = postgres_support::Schemas::new();
    let name = schemas.name();
    let proxy = cut_proxy::CutProxy::start(&postgres_support::url());
    // One connection, so the statement a save sends is the prepared one, cached.
    let store = PostgresSessionStore::builder()
        .schema(name.as_str())
        .pool_size(1)
        .connect(&proxy.url())
        .expect("connect through the proxy");
    store.migrate().expect("migrate");
    let direct = postgres_support::connect(&name);
    let id = SessionId::parse("cut-off").expect("id");
    let first = SessionSnapshot::builder(id.clone(), "m")
        .transcript(vec![Message::user("first")])
        .build()
        .expect("build");
    store.save(&first).expect("first save");
    let mut current = store.load(&id).expect("load");
    // A turn saved normally first: the append statement is then prepared on the connection.
    let warm = change(&current, 0, 2);
    store.save(&warm).expect("save");
    current = store.load(&id).expect("load");
    for case in 1..=CASES {
        let next = change(&current, case, 2);
        proxy.cut_the_next_reply();
        let lost = store
            .save(&next)
            .expect_err("the reply was cut off: the store cannot know the outcome");
        assert!(proxy.cut_happened(), "case {case}: the proxy cut a reply");
        assert_eq!(
            direct.load(&id).expect("load").revision(),
            current.revision().next(),
            "case {case}: the server committed the save before its reply was lost ({lost})"
        );
        let revision = store
            .save(&next)
            .unwrap_or_else(|e| panic!("case {case}: the retry must get its revision back: {e}"));
        assert_eq!(revision, current.revision().next(), "case {case}");
        current = store.load(&id).expect("load");
        assert_eq!(current.revision(), revision);
    }
    let texts: Vec<String> = current.transcript().iter().map(Message::text).collect();
    for case in 1..=CASES {
        let turn = format!("turn {case}");
        assert_eq!(
            texts.iter().filter(|t| **t == turn).count(),
            1,
            "{turn} once in the view"
        );
    }
    assert_eq!(
        store.revisions(&id).expect("revisions").len(),
        CASES + 2,
        "one revision per acknowledged change"
    );
}

/// A TCP proxy to the test server that can cut the connection carrying the next reply.
#[cfg(feature = "postgres")]
mod cut_proxy {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::sync::Arc;

    /// Not armed; armed (the next request's reply is cut); a request went out while armed;
    /// its reply was cut.
    const IDLE: u8 = 0;
    const ARMED: u8 = 1;
    const SENT: u8 = 2;
    const CUT: u8 = 3;

    pub struct CutProxy {
        port: u16,
        server_url: String,
        state: Arc<AtomicU8>,
    }

    impl CutProxy {
        /// Listens on a free local port and forwards each connection to the server that
        /// `url` (a libpq `key=value` string with `host` and `port`) names.
        pub fn start(url: &str) -> Self {
            let field = |key: &str| {
                url.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key))
                    .unwrap_or_else(|| panic!("the test server's URL has no {key}: {url}"))
                    .to_owned()
            };
            let upstream = format!("{}:{}", field("host="), field("port="));
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
            let port = listener.local_addr().expect("the proxy's address").port();
            let state = Arc::new(AtomicU8::new(IDLE));
            let shared = Arc::clone(&state);
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    let Ok(client) = client else { return };
                    let server = TcpStream::connect(&upstream).expect("reach the test server");
                    pipe(client, server, Arc::clone(&shared));
                }
            });
            CutProxy {
                port,
                server_url: url.to_owned(),
                state,
            }
        }

        /// The test server's URL with the proxy's port.
        pub fn url(&self) -> String {
            self.server_url
                .split_whitespace()
                .map(|kv| {
                    if kv.starts_with("port=") {
                        format!("port={}", self.port)
                    } else if kv.starts_with("host=") {
                        "host=127.0.0.1".to_owned()
                    } else {
                        kv.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        }

        /// The reply to the next request is swallowed and its connection closed.
        pub fn cut_the_next_reply(&self) {
            self.state.store(ARMED, Ordering::SeqCst);
        }

        /// Whether the last armed cut happened (and disarms).
        pub fn cut_happened(&self) -> bool {
            self.state.swap(IDLE, Ordering::SeqCst) == CUT
        }
    }

    /// Forwards both ways between `client` and `server` until either side closes.
    fn pipe(client: TcpStream, server: TcpStream, state: Arc<AtomicU8>) {
        let (mut client_in, mut server_out) = (
            client.try_clone().expect("clone"),
            server.try_clone().expect("clone"),
        );
        let up_state = Arc::clone(&state);
        std::thread::spawn(move || {
            let mut buffer = vec![0; 64 * 1024];
            while let Ok(n @ 1..) = client_in.read(&mut buffer) {
                // Marked before it is passed on: the reply can come back (and be read by
                // the other thread) before this thread runs again.
                let _ = up_state.compare_exchange(ARMED, SENT, Ordering::SeqCst, Ordering::SeqCst);
                if server_out.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            let _ = server_out.shutdown(Shutdown::Both);
        });
        let (mut server_in, mut client_out) = (server, client);
        std::thread::spawn(move || {
            let mut buffer = vec![0; 64 * 1024];
            while let Ok(n @ 1..) = server_in.read(&mut buffer) {
                if state
                    .compare_exchange(SENT, CUT, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    // The server has answered (and so committed) the request: the reply
                    // never arrives.
                    let _ = client_out.shutdown(Shutdown::Both);
                    let _ = server_in.shutdown(Shutdown::Both);
                    return;
                }
                if client_out.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            let _ = client_out.shutdown(Shutdown::Both);
        });
    }
}
