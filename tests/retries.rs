//! A save retried after its acknowledgement was lost (issue 17, "idempotent retries").
//!
//! A caller whose save timed out cannot know whether it was stored. Retrying the same
//! snapshot must give back the revision it got the first time, not a conflict, and the
//! history must hold the change once; a different change made at the same stale revision
//! must still conflict. Cases: random runs of turns, metadata edits and rewinds on the
//! memory store (10,000 runs) and the file store (500), each save "losing" its
//! acknowledgement at random and being retried once or twice.

use agent_session::{
    ContentBlock, Durability, FileSessionStore, MemorySessionStore, Message, RewindTo, SessionId,
    SessionSnapshot, SessionStore,
};
use serde_json::json;

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
