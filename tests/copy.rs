//! Copying every session of a store to another one, history included
//! (`agent_session::copy_sessions`): between the memory and file stores (and, with the
//! `postgres` feature, file → PostgreSQL → file), the target must answer `load`,
//! `revisions`, `load_at` of every kept revision and `history` exactly as the source, for
//! sessions with turns, tool calls saved step by step, rewinds, compactions, restores,
//! options and metadata changes, edits, archived sessions, forks and trimmed histories.
//! A copy stopped by a failing save at any point leaves each session complete or absent,
//! and a second run with `ExistingSessions::Skip` finishes it. Public API only.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use agent_session::{
    copy_sessions, copy_sessions_async, Autosave, Compaction, ContentBlock, CopyOptions,
    CopyOutcome, EntryKind, Error, ExistingSessions, FileSessionStore, ForkAt, Harness, ImportIds,
    Lease, LeaseRequest, ListCursor, ListScope, MemorySessionStore, Message, Revision, SessionId,
    SessionList, SessionOptions, SessionPage, SessionSnapshot, SessionStore, SessionStoreExt,
    SessionSummary, ToolCall, ToolResult,
};
use common::{calculator_calls, reply, sid, usage, Calculator, ScriptedEngine};
use serde_json::json;

// ---------------------------------------------------------------------------------------
// Sessions with every kind of change
// ---------------------------------------------------------------------------------------

/// Fills `store` with sessions whose histories hold every kind of change; returns their
/// ids.
// One scenario, read top to bottom; the store is shared with the harness it builds.
#[allow(clippy::too_many_lines, clippy::needless_pass_by_value)]
fn populate(store: Arc<dyn SessionStore>) -> Vec<SessionId> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let harness = Harness::builder(Arc::clone(&store), || {
        ScriptedEngine::new([
            calculator_calls(&[("c1", "2+3")], "0.001"),
            reply("It is 5.", "0.001"),
            calculator_calls(&[("c2", "6*7"), ("c3", "1/0")], "0.002"),
            reply("42, and 1/0 fails.", "0.002"),
            reply("Back again.", "0.001"),
            reply("After the restore.", "0.001"),
        ])
    })
    .tools(Calculator::shared())
    .autosave(Autosave::EveryStep)
    .build();

    // "agent": turns saved step by step (tool calls recorded as interrupted, then their
    // results), a metadata change, an options change, a rewind, a compaction, a restore,
    // and more turns.
    let mut session = harness
        .new_session(
            SessionOptions::new("model-a")
                .system_prompt("Be brief.")
                .metadata_entry("project", json!("copy")),
        )
        .expect("new session");
    runtime
        .block_on(harness.send(&mut session, "what is 2+3?"))
        .expect("turn 1");
    runtime
        .block_on(harness.send(&mut session, "and 6*7, 1/0?"))
        .expect("turn 2");
    session
        .metadata_mut()
        .insert("title".into(), json!("Arithmetic"));
    harness.save_session(&mut session).expect("metadata");
    let id = session.id().clone();
    drop(session);
    let options = SessionOptions::from_snapshot(&store.load(&id).expect("load"))
        .max_turns(3)
        .system_prompt("Be very brief.");
    let mut session = harness
        .resume_session(&id, Some(options))
        .expect("resume with options");
    harness.save_session(&mut session).expect("options");
    let before_rewind = session.revision();
    harness
        .rewind_session(&mut session, agent_session::RewindTo::LastTurns(1))
        .expect("rewind");
    runtime
        .block_on(harness.send(&mut session, "say hi"))
        .expect("turn after the rewind");
    session
        .compact(
            Compaction::new(4, vec![Message::user("Summary: 2+3 is 5.")])
                .with_usage(usage(300, 20, "0.0005")),
        )
        .expect("compact");
    harness.save_session(&mut session).expect("compaction");
    harness
        .restore_session(&mut session, before_rewind)
        .expect("restore");
    runtime
        .block_on(harness.send(&mut session, "still there?"))
        .expect("turn after the restore");
    drop(session);

    // "edited": a snapshot saved whole over the stored one.
    let edited = sid("edited");
    let first = SessionSnapshot::builder(edited.clone(), "model-b")
        .transcript(vec![
            Message::user("draft"),
            Message::assistant(vec![ContentBlock::text("a draft")]),
        ])
        .usage(vec![usage(10, 5, "0.0001")])
        .build()
        .expect("build");
    let revision = store.save(&first).expect("save");
    let over = SessionSnapshot::builder(edited.clone(), "model-b")
        .transcript(vec![Message::user("final")])
        .timestamps(first.created_at(), first.created_at())
        .build()
        .expect("build")
        .with_revision(revision);
    store.save(&over).expect("edit");

    // "archived": a small session, archived.
    let archived = sid("archived");
    store
        .save(
            &SessionSnapshot::builder(archived.clone(), "model-c")
                .transcript(vec![Message::user("old")])
                .build()
                .expect("build"),
        )
        .expect("save");
    store.set_archived(&archived, true).expect("archive");

    // "fork" of "agent", extended; "fork-2" of "fork".
    let fork = store
        .fork(&id, ForkAt::Messages(4), sid("fork"))
        .expect("fork");
    let call = ToolCall::new("f1", "calculator", json!({"expression": "1+1"}));
    let extended = fork
        .with_appended(
            vec![
                Message::user("1+1?"),
                Message::assistant(vec![ContentBlock::tool_call(call)]),
                Message::tool_result(ToolResult::new("f1", "2")),
                Message::assistant(vec![ContentBlock::text("2")]),
            ],
            vec![usage(50, 5, "0.0002")],
            chrono::Utc::now(),
        )
        .expect("append");
    store.save(&extended).expect("fork turn");
    store
        .fork(&sid("fork"), ForkAt::Messages(3), sid("fork-2"))
        .expect("fork of a fork");

    // "trimmed": a restore of a revision the trim then drops (written out as a view).
    let trimmed = sid("trimmed");
    store
        .save(
            &SessionSnapshot::builder(trimmed.clone(), "model-d")
                .transcript(vec![Message::user("one")])
                .build()
                .expect("build"),
        )
        .expect("save");
    let mut head = store.load(&trimmed).expect("load");
    for text in ["two", "three", "four"] {
        head = head
            .with_appended(
                vec![
                    Message::assistant(vec![ContentBlock::text(format!("ok {text}"))]),
                    Message::user(text),
                ],
                vec![],
                chrono::Utc::now(),
            )
            .expect("append");
        let revision = store.save(&head).expect("save");
        head = head.with_revision(revision);
    }
    store
        .restore(&trimmed, Revision::from_u64(2))
        .expect("restore");
    store
        .rewind(&trimmed, agent_session::RewindTo::Message(1))
        .expect("rewind");
    assert_eq!(
        store
            .trim_history(&trimmed, Revision::from_u64(4))
            .expect("trim"),
        3
    );

    vec![id, edited, archived, sid("fork"), sid("fork-2"), trimmed]
}

// ---------------------------------------------------------------------------------------
// Comparing two stores
// ---------------------------------------------------------------------------------------

/// Whether `to` answers exactly as `from` for every session of `from`: the same ids and
/// archive states, and for each session the same `load`, `revisions`, `load_at` of every
/// kept revision, `history` and history counts. The first difference, if any.
fn differences(from: &dyn SessionStore, to: &dyn SessionStore) -> Result<(), String> {
    let listed = |store: &dyn SessionStore| -> BTreeMap<SessionId, SessionSummary> {
        store
            .list_scoped(ListScope::All)
            .expect("list")
            .sessions
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect()
    };
    let (source, target) = (listed(from), listed(to));
    let ids = |m: &BTreeMap<SessionId, SessionSummary>| m.keys().cloned().collect::<Vec<_>>();
    if ids(&source) != ids(&target) {
        return Err(format!(
            "sessions {:?} became {:?}",
            ids(&source),
            ids(&target)
        ));
    }
    for (id, summary) in &source {
        let copy = &target[id];
        if (summary.archived, summary.history, &summary.lineage)
            != (copy.archived, copy.history, &copy.lineage)
        {
            return Err(format!("{id}: summary {summary:?} became {copy:?}"));
        }
        let (a, b) = (from.load(id).expect("load"), to.load(id).expect("load"));
        if a != b {
            return Err(format!("{id}: load differs: {a:?} != {b:?}"));
        }
        let revisions = from.revisions(id).expect("revisions");
        let copied = to.revisions(id).expect("revisions");
        if revisions != copied {
            return Err(format!("{id}: revisions {revisions:?} became {copied:?}"));
        }
        for info in &revisions {
            let (a, b) = (
                from.load_at(id, info.revision).expect("load_at"),
                to.load_at(id, info.revision),
            );
            if b.as_ref().ok() != Some(&a) {
                return Err(format!(
                    "{id}: revision {} differs: {a:?} != {b:?}",
                    info.revision
                ));
            }
        }
        let (a, b) = (
            from.history(id).expect("history"),
            to.history(id).expect("history"),
        );
        if a != b {
            return Err(format!("{id}: history differs: {a:?} != {b:?}"));
        }
    }
    Ok(())
}

fn assert_same(from: &dyn SessionStore, to: &dyn SessionStore) {
    if let Err(difference) = differences(from, to) {
        panic!("the copy differs from its source: {difference}");
    }
}

fn file_store() -> (tempfile::TempDir, Arc<FileSessionStore>) {
    let (dir, store) = common::temp_store();
    (dir, Arc::new(store))
}

fn kinds(store: &dyn SessionStore, id: &SessionId) -> Vec<EntryKind> {
    store
        .revisions(id)
        .expect("revisions")
        .iter()
        .map(|r| r.kind)
        .collect()
}

// ---------------------------------------------------------------------------------------
// Copies
// ---------------------------------------------------------------------------------------

#[test]
fn the_populated_sessions_hold_every_kind_of_change() {
    let store = Arc::new(MemorySessionStore::new());
    let ids = populate(store.clone());
    let all: Vec<EntryKind> = ids.iter().flat_map(|id| kinds(&*store, id)).collect();
    for kind in [
        EntryKind::Checkpoint,
        EntryKind::Turn,
        EntryKind::Edit,
        EntryKind::Rewind,
        EntryKind::Compaction,
        EntryKind::Restore,
        EntryKind::Options,
        EntryKind::Metadata,
    ] {
        assert!(all.contains(&kind), "no {kind} in {all:?}");
    }
    let trimmed = store.revisions(&sid("trimmed")).expect("revisions");
    assert_eq!(trimmed[0].revision, Revision::from_u64(4));
    assert!(
        trimmed
            .iter()
            .any(|r| r.kind == EntryKind::Restore && r.restored_from.is_none()),
        "a restore of a dropped revision, written out: {trimmed:?}"
    );
}

#[test]
fn memory_to_file_to_memory_keeps_every_revision_and_the_history() {
    let source = Arc::new(MemorySessionStore::new());
    let ids = populate(source.clone());
    let (_dir, file) = file_store();
    let report = copy_sessions(&*source, &*file, &CopyOptions::new()).expect("copy");
    assert!(report.is_complete(), "{report:#?}");
    assert_eq!(report.sessions.len(), ids.len());
    assert_same(&*source, &*file);

    let back = MemorySessionStore::new();
    let report = copy_sessions(&*file, &back, &CopyOptions::new()).expect("copy back");
    assert!(report.is_complete(), "{report:#?}");
    assert_same(&*source, &back);
}

#[test]
fn file_to_file_keeps_every_revision_and_forks_follow_their_parents() {
    let (_a, source) = file_store();
    populate(source.clone());
    let (_b, target) = file_store();
    let report = copy_sessions(&*source, &*target, &CopyOptions::new()).expect("copy");
    assert!(report.is_complete(), "{report:#?}");
    assert_same(&*source, &*target);

    let order: Vec<String> = report.sessions.iter().map(|s| s.id.to_string()).collect();
    let at = |id: &str| order.iter().position(|o| o == id).expect(id);
    assert!(at("fork") > at(&agent_id(&report)), "{order:?}");
    assert!(at("fork-2") > at("fork"), "{order:?}");
    let trimmed = report
        .sessions
        .iter()
        .find(|s| s.id == sid("trimmed"))
        .expect("trimmed");
    assert_eq!(
        (trimmed.oldest, trimmed.head, trimmed.revisions()),
        (Revision::from_u64(4), Revision::from_u64(6), 3)
    );
    let archived = report
        .sessions
        .iter()
        .find(|s| s.id == sid("archived"))
        .expect("archived");
    assert!(archived.archived);
    assert!(!target
        .list()
        .expect("list")
        .sessions
        .iter()
        .any(|s| s.id == sid("archived")));

    // A resumed copy appends where the source would.
    let id = sid("fork");
    let next = target
        .load(&id)
        .expect("load")
        .with_appended(vec![Message::user("more")], vec![], chrono::Utc::now())
        .expect("append");
    assert_eq!(
        target.save(&next).expect("save"),
        source.load(&id).expect("load").revision().next()
    );
}

/// The id of the harness-made session (generated) in a report.
fn agent_id(report: &agent_session::CopyReport) -> String {
    report
        .sessions
        .iter()
        .find(|s| !["edited", "archived", "fork", "fork-2", "trimmed"].contains(&s.id.as_str()))
        .expect("the agent session")
        .id
        .to_string()
}

#[test]
fn each_revision_is_written_as_its_change_not_as_the_whole_session() {
    // 120 turns of about 1 KiB: written whole at every revision, the copy would hold about
    // 60 times the source's bytes; appended as changes, about the same.
    let (_a, source) = file_store();
    let id = sid("long");
    source
        .save(
            &SessionSnapshot::builder(id.clone(), "m")
                .build()
                .expect("build"),
        )
        .expect("save");
    let mut head = source.load(&id).expect("load");
    for turn in 0..120 {
        head = head
            .with_appended(
                vec![
                    Message::user(format!("{turn} {}", "question ".repeat(60))),
                    Message::assistant(vec![ContentBlock::text("answer ".repeat(70))]),
                ],
                vec![usage(100, 10, "0.0001")],
                chrono::Utc::now(),
            )
            .expect("append");
        let revision = source.save(&head).expect("save");
        head = head.with_revision(revision);
    }
    let (_b, target) = file_store();
    assert!(copy_sessions(&*source, &*target, &CopyOptions::new())
        .expect("copy")
        .is_complete());
    assert_same(&*source, &*target);
    let bytes = |store: &FileSessionStore| store.stored_bytes(&id).expect("bytes").expect("known");
    let (original, copied) = (bytes(&source), bytes(&target));
    assert!(
        copied <= original + original / 10,
        "the copy holds {copied} bytes, the source {original}"
    );
}

#[test]
fn the_async_copy_gives_the_same_result() {
    let source = Arc::new(MemorySessionStore::new());
    populate(source.clone());
    let (_dir, target) = file_store();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let report = runtime
        .block_on(copy_sessions_async(
            &*Arc::clone(&source).into_async(),
            &*Arc::clone(&target).into_async(),
            &CopyOptions::new(),
        ))
        .expect("copy");
    assert!(report.is_complete(), "{report:#?}");
    assert_same(&*source, &*target);
}

#[test]
fn a_copy_that_keeps_only_the_head_fails_the_comparison() {
    // The negative control of `differences`: export and import carry each session's head
    // (at revision 1), not its history, and the comparison must say so.
    let source = Arc::new(MemorySessionStore::new());
    let ids = populate(source.clone());
    let heads_only = MemorySessionStore::new();
    heads_only
        .import(&source.export(&ids).expect("export"), &ImportIds::Keep)
        .expect("import");
    for id in &ids {
        heads_only
            .set_archived(
                id,
                source
                    .list_scoped(ListScope::Archived)
                    .expect("list")
                    .sessions
                    .iter()
                    .any(|s| &s.id == id),
            )
            .expect("archive");
    }
    differences(&*source, &heads_only).expect_err("a head-only copy differs");

    // And a session whose head alone is copied, padded to the same revision number, beside
    // the others copied whole, still differs, and is the one named.
    let one = MemorySessionStore::new();
    let id = sid("trimmed");
    let others: Vec<SessionId> = ids.iter().filter(|i| **i != id).cloned().collect();
    copy_sessions(&*source, &one, &CopyOptions::new().only(others)).expect("copy the others");
    let mut head = source.load(&id).expect("load");
    let target = head.revision();
    let fresh = SessionSnapshot::builder(id.clone(), head.options().model.clone())
        .transcript(head.transcript().to_vec())
        .timestamps(head.created_at(), head.updated_at())
        .build()
        .expect("build");
    let mut revision = one.save(&fresh).expect("save");
    while revision < target {
        head = one.load(&id).expect("load");
        let next = head
            .with_appended(vec![], vec![], chrono::Utc::now())
            .expect("touch");
        revision = one.save(&next).expect("save");
    }
    let difference = differences(&*source, &one).expect_err("a padded head differs");
    assert!(difference.starts_with("trimmed:"), "{difference}");
}

#[test]
fn a_session_the_target_holds_refuses_the_copy_and_nothing_is_written() {
    let source = MemorySessionStore::new();
    for name in ["a", "b", "c"] {
        source
            .save(
                &SessionSnapshot::builder(sid(name), "m")
                    .transcript(vec![Message::user(name)])
                    .build()
                    .expect("build"),
            )
            .expect("save");
    }
    let target = MemorySessionStore::new();
    let theirs = SessionSnapshot::builder(sid("b"), "other")
        .transcript(vec![Message::user("theirs")])
        .build()
        .expect("build");
    target.save(&theirs).expect("save");

    let error = copy_sessions(&source, &target, &CopyOptions::new()).expect_err("refused");
    assert!(
        matches!(&error, Error::AlreadyExists { id } if *id == sid("b")),
        "{error:?}"
    );
    assert_eq!(
        target.list().expect("list").sessions.len(),
        1,
        "nothing written"
    );

    // A dry run says the same, per session, and writes nothing.
    let report =
        copy_sessions(&source, &target, &CopyOptions::new().dry_run(true)).expect("dry run");
    let outcomes: Vec<(String, bool)> = report
        .sessions
        .iter()
        .map(|s| {
            (
                s.id.to_string(),
                matches!(s.outcome, CopyOutcome::WouldCopy),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [("a".into(), true), ("b".into(), false), ("c".into(), true)]
    );
    assert!(report.dry_run && !report.is_complete());
    assert_eq!(target.list().expect("list").sessions.len(), 1);

    // Skipping: the others are copied, "b" is left alone and reported.
    let report = copy_sessions(
        &source,
        &target,
        &CopyOptions::new().existing(ExistingSessions::Skip),
    )
    .expect("copy");
    assert_eq!(report.copied().count(), 2);
    let b = report.failed().next().expect("b is reported");
    assert!(
        matches!(
            &b.outcome,
            CopyOutcome::Failed { error: Error::AlreadyExists { id }, left_on_target: false } if *id == sid("b")
        ),
        "{b:?}"
    );
    assert_eq!(
        target.load(&sid("b")).expect("load"),
        theirs.with_revision(Revision::from_u64(1))
    );

    // Once copied, a session is skipped as already there.
    target.delete(&sid("b")).expect("delete");
    let report = copy_sessions(
        &source,
        &target,
        &CopyOptions::new().existing(ExistingSessions::Skip),
    )
    .expect("copy");
    let outcomes: Vec<bool> = report
        .sessions
        .iter()
        .map(|s| matches!(s.outcome, CopyOutcome::Skipped))
        .collect();
    assert_eq!(outcomes, [true, false, true], "{report:#?}");
    assert!(report.is_complete());
    assert_same(&source, &target);
}

#[test]
fn only_copies_the_sessions_named_and_refuses_an_unknown_one() {
    let source = Arc::new(MemorySessionStore::new());
    populate(source.clone());
    let target = MemorySessionStore::new();
    let report = copy_sessions(
        &*source,
        &target,
        &CopyOptions::new().only(vec![sid("fork-2"), sid("edited"), sid("fork-2")]),
    )
    .expect("copy");
    assert_eq!(report.sessions.len(), 2);
    assert_eq!(target.list().expect("list").sessions.len(), 2);
    assert_eq!(
        kinds(&target, &sid("edited")),
        kinds(&*source, &sid("edited"))
    );

    let error = copy_sessions(
        &*source,
        &target,
        &CopyOptions::new().only(vec![sid("missing")]),
    )
    .expect_err("unknown");
    assert!(error.is_not_found(), "{error:?}");
}

// ---------------------------------------------------------------------------------------
// Failures midway
// ---------------------------------------------------------------------------------------

/// A store that fails its `fail_at`-th save (counting from 1), once; every other call goes
/// to the memory store inside.
struct FailingSave {
    inner: MemorySessionStore,
    saves: AtomicUsize,
    fail_at: usize,
    /// Whether `revisions` fails too (a target that cannot be read).
    unreadable: bool,
}

impl SessionStore for FailingSave {
    fn save(&self, snapshot: &SessionSnapshot) -> agent_session::Result<Revision> {
        if self.saves.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at {
            return Err(Error::Backend {
                operation: "save (an injected failure)".into(),
                source: "injected".into(),
            });
        }
        self.inner.save(snapshot)
    }
    fn load(&self, id: &SessionId) -> agent_session::Result<SessionSnapshot> {
        self.inner.load(id)
    }
    fn list(&self) -> agent_session::Result<SessionList> {
        self.inner.list()
    }
    fn list_page(
        &self,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> agent_session::Result<SessionPage> {
        self.inner.list_page(limit, after)
    }
    fn delete(&self, id: &SessionId) -> agent_session::Result<()> {
        self.inner.delete(id)
    }
    fn list_scoped(&self, scope: ListScope) -> agent_session::Result<SessionList> {
        self.inner.list_scoped(scope)
    }
    fn set_archived(&self, id: &SessionId, archived: bool) -> agent_session::Result<()> {
        self.inner.set_archived(id, archived)
    }
    fn delete_if_unchanged(&self, listed: &SessionSummary) -> agent_session::Result<()> {
        self.inner.delete_if_unchanged(listed)
    }
    fn stored_bytes(&self, id: &SessionId) -> agent_session::Result<Option<u64>> {
        self.inner.stored_bytes(id)
    }
    fn load_at(
        &self,
        id: &SessionId,
        revision: Revision,
    ) -> agent_session::Result<SessionSnapshot> {
        self.inner.load_at(id, revision)
    }
    fn revisions(&self, id: &SessionId) -> agent_session::Result<Vec<agent_session::RevisionInfo>> {
        if self.unreadable {
            return Err(Error::Backend {
                operation: "read revisions (an injected failure)".into(),
                source: "injected".into(),
            });
        }
        self.inner.revisions(id)
    }
    fn history(&self, id: &SessionId) -> agent_session::Result<agent_session::History> {
        self.inner.history(id)
    }
    fn restore(&self, id: &SessionId, revision: Revision) -> agent_session::Result<Revision> {
        self.inner.restore(id, revision)
    }
    fn trim_history(&self, id: &SessionId, oldest: Revision) -> agent_session::Result<u64> {
        self.inner.trim_history(id, oldest)
    }
    fn acquire_lease(
        &self,
        id: &SessionId,
        request: &LeaseRequest,
    ) -> agent_session::Result<Lease> {
        self.inner.acquire_lease(id, request)
    }
    fn renew_lease(&self, lease: &Lease, ttl: std::time::Duration) -> agent_session::Result<Lease> {
        self.inner.renew_lease(lease, ttl)
    }
    fn release_lease(&self, lease: &Lease) -> agent_session::Result<()> {
        self.inner.release_lease(lease)
    }
    fn leases(&self) -> agent_session::Result<Vec<Lease>> {
        self.inner.leases()
    }
}

/// A target that cannot say which sessions it holds fails the copy with its own error (not
/// `AlreadyExists`), and nothing is written.
#[test]
fn a_target_that_cannot_be_read_fails_the_copy_with_its_error() {
    let source = Arc::new(MemorySessionStore::new());
    populate(source.clone());
    for existing in [ExistingSessions::Refuse, ExistingSessions::Skip] {
        let target = FailingSave {
            inner: MemorySessionStore::new(),
            saves: AtomicUsize::new(0),
            fail_at: 0,
            unreadable: true,
        };
        let error = copy_sessions(&*source, &target, &CopyOptions::new().existing(existing))
            .expect_err("the target cannot be read");
        assert!(matches!(error, Error::Backend { .. }), "{error:?}");
        assert_eq!(target.saves.load(Ordering::SeqCst), 0, "nothing written");
    }
}

#[test]
fn a_save_failing_at_any_point_leaves_each_session_complete_or_absent() {
    let source = Arc::new(MemorySessionStore::new());
    populate(source.clone());
    // How many saves a whole copy makes.
    let counting = FailingSave {
        inner: MemorySessionStore::new(),
        saves: AtomicUsize::new(0),
        fail_at: 0,
        unreadable: false,
    };
    assert!(copy_sessions(&*source, &counting, &CopyOptions::new())
        .expect("copy")
        .is_complete());
    let saves = counting.saves.load(Ordering::SeqCst);
    assert!(saves > 20, "{saves} saves");

    for fail_at in 1..=saves {
        let target = FailingSave {
            inner: MemorySessionStore::new(),
            saves: AtomicUsize::new(0),
            fail_at,
            unreadable: false,
        };
        let report = copy_sessions(&*source, &target, &CopyOptions::new()).expect("copy");
        let failed: Vec<&agent_session::SessionCopy> = report.failed().collect();
        assert_eq!(failed.len(), 1, "save {fail_at}: {report:#?}");
        assert!(
            matches!(
                failed[0].outcome,
                CopyOutcome::Failed {
                    error: Error::Backend { .. },
                    left_on_target: false
                }
            ),
            "save {fail_at}: {:?}",
            failed[0]
        );
        // Complete or absent: every session on the target reads as the source's.
        let present = target.inner.list_scoped(ListScope::All).expect("list");
        assert!(
            !present.sessions.iter().any(|s| s.id == failed[0].id),
            "save {fail_at}: {} was left on the target",
            failed[0].id
        );
        for summary in &present.sessions {
            assert_eq!(
                target.inner.revisions(&summary.id).expect("revisions"),
                source.revisions(&summary.id).expect("revisions"),
                "save {fail_at}: {}",
                summary.id
            );
        }
        // A second run finishes it.
        let again = copy_sessions(
            &*source,
            &target,
            &CopyOptions::new().existing(ExistingSessions::Skip),
        )
        .expect("copy again");
        assert!(again.is_complete(), "save {fail_at}: {again:#?}");
        assert_eq!(again.copied().count(), 1, "save {fail_at}");
        assert_same(&*source, &target.inner);
    }
}

#[test]
fn a_session_the_target_refuses_is_reported_and_the_others_are_copied() {
    // A target whose snapshots may not exceed a small size: the big session is refused,
    // the others copied.
    let (_dir, source) = file_store();
    for (name, size) in [("small", 10), ("big", 50_000), ("tiny", 1)] {
        source
            .save(
                &SessionSnapshot::builder(sid(name), "m")
                    .transcript(vec![Message::user("x".repeat(size))])
                    .build()
                    .expect("build"),
            )
            .expect("save");
    }
    let dir = tempfile::tempdir().expect("dir");
    let target = FileSessionStore::builder()
        .max_snapshot_bytes(4_096)
        .open(dir.path().join("s"))
        .expect("open");
    let report = copy_sessions(&*source, &target, &CopyOptions::new()).expect("copy");
    let failed: Vec<String> = report.failed().map(|s| s.id.to_string()).collect();
    assert_eq!(failed, ["big"], "{report:#?}");
    assert_eq!(report.copied().count(), 2);
    assert!(target.load(&sid("big")).expect_err("absent").is_not_found());
}

// ---------------------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------------------

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod postgres_support;

#[cfg(feature = "postgres")]
#[test]
fn file_to_postgres_to_file_keeps_every_revision_and_the_history() {
    let (_a, source) = file_store();
    populate(source.clone());
    let schemas = postgres_support::Schemas::new();
    let postgres = schemas.store();
    let report = copy_sessions(&*source, &postgres, &CopyOptions::new()).expect("copy");
    assert!(report.is_complete(), "{report:#?}");
    assert_same(&*source, &postgres);

    let (_b, back) = file_store();
    let report = copy_sessions(&postgres, &*back, &CopyOptions::new()).expect("copy back");
    assert!(report.is_complete(), "{report:#?}");
    assert_same(&*source, &*back);
}
