//! The history cases of the store contract: every revision a store keeps loads as it was
//! saved (a turn, a rewind, a compaction, an edit, a metadata change, a restore), is
//! listed with its kind and view length, and stays loadable through restores; where each
//! message of the history stands; and bad input (a rewind past the start, a restore of a
//! revision the store does not keep, a compaction summary holding an unanswered call or a
//! compaction point splitting a call) is a typed error that changes nothing stored.
//!
//! These cases need a store that keeps its history ([`Needs::History`](super::Needs)):
//! one whose [`SessionStore::revisions`] lists every revision saved. A store that keeps
//! only the head (the trait's defaults) skips them.

use serde_json::json;

use super::cases::NoEngine;
use super::support::{at, id, rebuild};
use crate::{
    Compaction, ContentBlock, EntryKind, Error, ErrorKind, ForkAt, Message, Revision, RewindTo,
    Session, SessionId, SessionSnapshot, SessionStore, SessionStoreExt, Standing, ToolCall,
    ToolResult, Usage,
};

/// Two turns, the first with a tool round: prompts at 0 and 4, a call in 1 answered in 2.
fn two_turns(name: &str) -> SessionSnapshot {
    SessionSnapshot::builder(id(name), "history-model")
        .metadata_entry("name", json!(name))
        .transcript(vec![
            Message::user("one"),
            Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
                "h1",
                "lookup",
                json!({"q": 1}),
            ))]),
            Message::tool_result(ToolResult::new("h1", "found")),
            Message::assistant(vec![ContentBlock::text("1")]),
            Message::user("two"),
            Message::assistant(vec![ContentBlock::text("2")]),
        ])
        .usage(vec![Usage::new("history-model").with_tokens(10, 2)])
        .timestamps(at(0), at(1))
        .build()
        .expect("build")
}

/// The turn `text`: a prompt and a reply.
fn turn(text: &str) -> Vec<Message> {
    vec![
        Message::user(text),
        Message::assistant(vec![ContentBlock::text(format!("re: {text}"))]),
    ]
}

/// Loads `id`, appends `turn(text)` with one usage entry, saves it, and returns it as
/// stored.
fn save_turn<S: SessionStore>(store: &S, id: &SessionId, text: &str) -> SessionSnapshot {
    let loaded = store.load(id).expect("load");
    let next = loaded
        .with_appended(
            turn(text),
            vec![Usage::new("history-model").with_tokens(3, 1)],
            chrono::Utc::now(),
        )
        .expect("append a turn");
    let revision = store.save(&next).expect("save a turn");
    next.with_revision(revision)
}

/// Saves `changed` (a change of the stored head) and returns it as stored.
fn save_changed<S: SessionStore>(store: &S, changed: SessionSnapshot) -> SessionSnapshot {
    let revision = store.save(&changed).expect("save");
    assert_eq!(revision, changed.revision().next(), "one revision more");
    changed.with_revision(revision)
}

/// The texts of `messages`, to compare views briefly.
fn texts(messages: &[Message]) -> Vec<String> {
    messages.iter().map(Message::text).collect()
}

/// Everything a reader can ask a store about `id`'s history, to compare before and after.
fn everything<S: SessionStore>(
    store: &S,
    id: &SessionId,
) -> (SessionSnapshot, Vec<crate::RevisionInfo>, crate::History) {
    (
        store.load(id).expect("load"),
        store.revisions(id).expect("revisions"),
        store.history(id).expect("history"),
    )
}

/// Checks that the listing's history stats of `id` are those of the session as it loads.
fn assert_listed_stats<S: SessionStore>(store: &S, id: &SessionId, what: &str) {
    let loaded = store.load(id).expect("load");
    let listing = store.list().expect("list");
    let summary = listing
        .sessions
        .iter()
        .find(|s| s.id == *id)
        .expect("listed");
    assert_eq!(
        summary.history,
        loaded.history_stats(),
        "{what}: the listing's history stats"
    );
}

/// Each kind of change is one revision, and every revision loads exactly as it was saved
/// (`load_at`), is listed with its kind and view length (`revisions`), and is counted in
/// the head's and the listing's history stats.
#[allow(clippy::too_many_lines)] // one kind of change after another, then the checks
pub(super) fn every_revision_loads_as_saved_and_is_listed_with_its_kind<S: SessionStore>(
    store: &S,
) {
    let first = two_turns("every-revision");
    let sid = first.id().clone();
    let mut states = vec![save_changed(store, first)];
    let mut kinds = vec![EntryKind::Checkpoint];

    states.push(save_turn(store, &sid, "three"));
    kinds.push(EntryKind::Turn);

    states.push(
        store
            .rewind(&sid, RewindTo::LastTurns(1))
            .expect("rewind the last turn"),
    );
    kinds.push(EntryKind::Rewind);

    // The rewound snapshot as `rewind` returned it (not loaded again): a writer that keeps
    // what it saved, whose next save must still count the rewind in what it stores.
    let mut compacted = states[2].clone();
    compacted
        .compact(
            Compaction::new(4, vec![Message::user("Earlier: one, found, 1.")])
                .with_usage(Usage::new("history-model").with_tokens(40, 8)),
        )
        .expect("compact the first turn");
    states.push(save_changed(store, compacted));
    kinds.push(EntryKind::Compaction);
    assert_listed_stats(
        store,
        &sid,
        "after a compaction saved from the rewound snapshot",
    );

    // A snapshot built anew and saved over the head: an edit, not derived from it.
    let head = store.load(&sid).expect("load");
    let mut transcript = head.transcript().to_vec();
    transcript.extend(turn("edited in"));
    let edited = rebuild(&head)
        .transcript(transcript)
        .metadata_entry("edited", json!(true))
        .timestamps(head.created_at(), head.updated_at())
        .build()
        .expect("build an edit")
        .with_revision(head.revision());
    states.push(save_changed(store, edited));
    kinds.push(EntryKind::Edit);
    assert_listed_stats(store, &sid, "after an edit");

    // Only the metadata, changed through a session resumed from the store.
    let mut session =
        Session::restore(store.load(&sid).expect("load"), NoEngine, None).expect("resume");
    session
        .metadata_mut()
        .insert("label".to_owned(), json!("kept"));
    states.push(save_changed(store, session.snapshot()));
    kinds.push(EntryKind::Metadata);

    let restored = store
        .restore(&sid, states[1].revision())
        .expect("restore revision 2");
    let head = store.load(&sid).expect("load the restored head");
    assert_eq!(restored, head.revision());
    states.push(head.clone());
    kinds.push(EntryKind::Restore);

    assert_eq!(
        head.transcript(),
        states[1].transcript(),
        "the view restored"
    );
    assert_eq!(
        head.metadata(),
        states[1].metadata(),
        "the metadata restored"
    );
    assert_eq!(head.tool_calls(), states[1].tool_calls());
    assert_eq!(
        head.usage(),
        states[5].usage(),
        "usage is never taken back by a rewind, a compaction or a restore"
    );
    assert!(head.usage().len() > states[1].usage().len());

    for (k, state) in states.iter().enumerate() {
        assert_eq!(state.revision().as_u64(), k as u64 + 1);
        let at = store.load_at(&sid, state.revision()).expect("load_at");
        assert_eq!(
            &at,
            state,
            "revision {} ({}) loads as it was saved",
            state.revision(),
            kinds[k]
        );
    }
    let revisions = store.revisions(&sid).expect("revisions");
    let listed: Vec<(u64, EntryKind, usize)> = revisions
        .iter()
        .map(|r| (r.revision.as_u64(), r.kind, r.messages))
        .collect();
    let expected: Vec<(u64, EntryKind, usize)> = states
        .iter()
        .zip(&kinds)
        .map(|(s, kind)| (s.revision().as_u64(), *kind, s.transcript().len()))
        .collect();
    assert_eq!(listed, expected, "revisions(): kinds and view lengths");
    assert_eq!(
        revisions.last().and_then(|r| r.restored_from),
        Some(states[1].revision())
    );
    assert!(revisions[..revisions.len() - 1]
        .iter()
        .all(|r| r.restored_from.is_none()));
    for (r, state) in revisions.iter().zip(&states) {
        assert_eq!(r.updated_at, state.updated_at(), "revision {}", r.revision);
    }
    let counted = head.history_stats();
    assert_eq!(
        (
            counted.oldest_revision,
            counted.rewinds,
            counted.compactions,
            counted.restores
        ),
        (Revision::from_u64(1), 1, 1, 1)
    );
    let listing = store.list().expect("list");
    let summary = listing
        .sessions
        .iter()
        .find(|s| s.id == sid)
        .expect("listed");
    assert_eq!(summary.history, counted, "the listing's history stats");
}

/// `load_at` of a revision the store does not keep (before the first, after the head) is
/// `RevisionNotFound`, of the not-found kind, naming the revisions kept; of a missing
/// session, `NotFound`; and nothing stored changes.
pub(super) fn load_at_outside_the_kept_revisions_is_revision_not_found<S: SessionStore>(store: &S) {
    let first = two_turns("load-at-outside");
    let sid = first.id().clone();
    save_changed(store, first);
    save_turn(store, &sid, "three");
    let before = everything(store, &sid);
    for revision in [0, 3, 4, u64::MAX] {
        let err = store
            .load_at(&sid, Revision::from_u64(revision))
            .expect_err("a revision the store does not keep");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{revision}: {err:?}");
        match err {
            Error::RevisionNotFound {
                id,
                revision: asked,
                oldest,
                newest,
            } => {
                assert_eq!(
                    (id, asked, oldest, newest),
                    (
                        sid.clone(),
                        Revision::from_u64(revision),
                        Revision::from_u64(1),
                        Revision::from_u64(2)
                    )
                );
            }
            other => panic!("{revision}: {other:?}"),
        }
    }
    let err = store
        .load_at(&id("load-at-missing"), Revision::from_u64(1))
        .expect_err("a missing session");
    assert!(err.is_not_found(), "{err:?}");
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert_eq!(everything(store, &sid), before, "nothing changed");
}

/// `restore` makes an earlier state (its view, records, options and metadata) the head as
/// a new revision, keeps all the usage, leaves the revisions between loadable, and can
/// itself be restored away; the default implementation and the stores' own agree.
pub(super) fn restore_makes_an_earlier_state_the_head_and_can_be_restored_away<S: SessionStore>(
    store: &S,
) {
    let first = two_turns("restore");
    let sid = first.id().clone();
    let one = save_changed(store, first);
    let two = save_turn(store, &sid, "three");
    let three = store
        .rewind(&sid, RewindTo::LastTurns(3))
        .expect("rewind everything");
    assert!(three.transcript().is_empty());

    let four = store.restore(&sid, two.revision()).expect("restore 2");
    assert_eq!(four, Revision::from_u64(4));
    let head = store.load(&sid).expect("load");
    assert_eq!(head.revision(), four);
    assert_eq!(head.transcript(), two.transcript());
    assert_eq!(head.tool_calls(), two.tool_calls());
    assert_eq!(head.options(), two.options());
    assert_eq!(head.metadata(), two.metadata());
    assert_eq!(head.usage(), three.usage(), "usage stays counted");
    assert!(head.updated_at() >= three.updated_at());

    // The restore is undone by restoring the state it replaced.
    let five = store.restore(&sid, three.revision()).expect("restore 3");
    let head = store.load(&sid).expect("load");
    assert_eq!(head.revision(), five);
    assert!(head.transcript().is_empty(), "restored away");
    // A restore of a restore, and of the first revision.
    store.restore(&sid, four).expect("restore 4");
    assert_eq!(
        store.load(&sid).expect("load").transcript(),
        two.transcript()
    );
    store.restore(&sid, one.revision()).expect("restore 1");
    let head = store.load(&sid).expect("load");
    assert_eq!(head.transcript(), one.transcript());
    assert_eq!(head.revision(), Revision::from_u64(7));
    assert_eq!(head.history_stats().restores, 4);
    // Every revision in between still loads as it was.
    for state in [&one, &two, &three] {
        assert_eq!(
            &store.load_at(&sid, state.revision()).expect("load_at"),
            state
        );
    }
    // The restored head is an ordinary head: a turn appends to it.
    let eight = save_turn(store, &sid, "after the restore");
    assert_eq!(eight.revision(), Revision::from_u64(8));
    assert_eq!(
        store.load(&sid).expect("load").transcript().len(),
        one.transcript().len() + 2
    );
}

/// `history` lists every message any kept revision's view held, each once, in the order
/// saved, with the revision that saved it and where it stands: in the view, rewound,
/// compacted or replaced (by an edit or a restore). A restore brings rewound and
/// compacted messages back into the view. The history's view is always the head's
/// transcript.
#[allow(clippy::too_many_lines)] // one step of the history after another
pub(super) fn history_tells_where_each_message_stands_and_restore_brings_them_back<
    S: SessionStore,
>(
    store: &S,
) {
    let sid = id("standing");
    let first = SessionSnapshot::builder(sid.clone(), "history-model")
        .transcript([turn("one"), turn("two")].concat())
        .timestamps(at(0), at(1))
        .build()
        .expect("build");
    let r1 = save_changed(store, first).revision();
    let r2 = save_turn(store, &sid, "three").revision();
    let check = |expected: &[(&str, u64, Standing)]| {
        let history = store.history(&sid).expect("history");
        let head = store.load(&sid).expect("load");
        let found: Vec<(String, u64, Standing)> = history
            .messages
            .iter()
            .map(|m| (m.message.text(), m.added_at.as_u64(), m.standing))
            .collect();
        let expected: Vec<(String, u64, Standing)> = expected
            .iter()
            .map(|(t, r, s)| ((*t).to_owned(), *r, *s))
            .collect();
        assert_eq!(found, expected, "history at revision {}", head.revision());
        assert_eq!(history.revision, head.revision());
        assert_eq!(history.oldest_revision, r1);
        let view: Vec<&Message> = history.view().collect();
        assert_eq!(
            view,
            head.transcript().iter().collect::<Vec<_>>(),
            "the history's view is the head's transcript"
        );
        assert_eq!(
            history.removed().count(),
            history.messages.len() - head.transcript().len()
        );
    };
    let view = |index| Standing::InView { index };
    check(&[
        ("one", 1, view(0)),
        ("re: one", 1, view(1)),
        ("two", 1, view(2)),
        ("re: two", 1, view(3)),
        ("three", 2, view(4)),
        ("re: three", 2, view(5)),
    ]);

    let r3 = store
        .rewind(&sid, RewindTo::LastTurns(1))
        .expect("rewind")
        .revision();
    let rewound = Standing::Rewound { revision: r3 };
    check(&[
        ("one", 1, view(0)),
        ("re: one", 1, view(1)),
        ("two", 1, view(2)),
        ("re: two", 1, view(3)),
        ("three", 2, rewound),
        ("re: three", 2, rewound),
    ]);

    let mut compacted = store.load(&sid).expect("load");
    compacted
        .compact(Compaction::new(2, vec![Message::user("summary")]))
        .expect("compact");
    let r4 = save_changed(store, compacted).revision();
    let gone = Standing::Compacted { revision: r4 };
    check(&[
        ("one", 1, gone),
        ("re: one", 1, gone),
        ("two", 1, view(1)),
        ("re: two", 1, view(2)),
        ("three", 2, rewound),
        ("re: three", 2, rewound),
        ("summary", 4, view(0)),
    ]);

    let head = store.load(&sid).expect("load");
    let edited = rebuild(&head)
        .transcript(vec![Message::user("edited")])
        .build()
        .expect("build")
        .with_revision(head.revision());
    let r5 = save_changed(store, edited).revision();
    let replaced = Standing::Replaced { revision: r5 };
    check(&[
        ("one", 1, gone),
        ("re: one", 1, gone),
        ("two", 1, replaced),
        ("re: two", 1, replaced),
        ("three", 2, rewound),
        ("re: three", 2, rewound),
        ("summary", 4, replaced),
        ("edited", 5, view(0)),
    ]);

    let r6 = store.restore(&sid, r2).expect("restore revision 2");
    let replaced_by_restore = Standing::Replaced { revision: r6 };
    check(&[
        ("one", 1, view(0)),
        ("re: one", 1, view(1)),
        ("two", 1, view(2)),
        ("re: two", 1, view(3)),
        ("three", 2, view(4)),
        ("re: three", 2, view(5)),
        ("summary", 4, replaced),
        ("edited", 5, replaced_by_restore),
    ]);
    for (removed, revision) in [(rewound, Some(r3)), (gone, Some(r4)), (view(0), None)] {
        assert_eq!(removed.removed_at(), revision);
    }
}

/// Bad input to the history operations is a typed error, and the stored session is
/// unchanged (its head, its revisions and its history): a rewind past the start or the
/// end, or splitting a tool call; a restore of a revision the store does not keep, of a
/// missing session, or of another session's state; a compaction whose summary holds a
/// call without its result (or a result without its call), replaces more than the view
/// or splits a tool call.
pub(super) fn bad_history_input_is_a_typed_error_and_changes_nothing<S: SessionStore>(store: &S) {
    let first = two_turns("bad-input");
    let sid = first.id().clone();
    save_changed(store, first);
    save_turn(store, &sid, "three");
    let before = everything(store, &sid);
    let unchanged = |what: &str| {
        assert_eq!(
            everything(store, &sid),
            before,
            "{what}: the stored session changed"
        );
    };
    let invalid = |what: &str, err: Error| {
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{what}: {err:?}"
        );
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{what}");
    };

    for point in [
        RewindTo::LastTurns(4),
        RewindTo::Message(9),
        RewindTo::Message(2),
    ] {
        let what = format!("rewind to {point}");
        invalid(
            &what,
            store.rewind(&sid, point).expect_err("refused rewind"),
        );
        unchanged(&what);
    }

    for revision in [0, 3, 99] {
        let err = store
            .restore(&sid, Revision::from_u64(revision))
            .expect_err("a revision the store does not keep");
        assert!(
            matches!(err, Error::RevisionNotFound { .. }),
            "restore {revision}: {err:?}"
        );
        assert_eq!(err.kind(), ErrorKind::NotFound);
        unchanged(&format!("restore of revision {revision}"));
    }
    let err = store
        .restore(&id("bad-input-missing"), Revision::from_u64(1))
        .expect_err("a missing session");
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    unchanged("restore of a missing session");

    let other = two_turns("bad-input-other");
    let other_id = other.id().clone();
    save_changed(store, other);
    let mut head = store.load(&sid).expect("load");
    invalid(
        "restore from another session",
        head.restore_from(&store.load(&other_id).expect("load"))
            .expect_err("another session's state"),
    );
    assert_eq!(head, before.0, "a refused restore changed the snapshot");

    let unanswered = Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
        "never-answered",
        "f",
        json!({}),
    ))]);
    let orphan = Message::tool_result(ToolResult::new("no-such-call", "?"));
    for (what, compaction) in [
        (
            "a summary holding an unanswered call",
            Compaction::new(4, vec![Message::user("summary"), unanswered]),
        ),
        (
            "a summary holding a result without its call",
            Compaction::new(4, vec![orphan]),
        ),
        (
            "a compaction point splitting a call",
            Compaction::new(2, vec![Message::user("summary")]),
        ),
        (
            "a compaction of more than the view",
            Compaction::new(99, vec![Message::user("summary")]),
        ),
    ] {
        let mut head = store.load(&sid).expect("load");
        invalid(what, head.compact(compaction).expect_err(what));
        assert_eq!(head, before.0, "{what}: the refused compaction changed it");
        assert!(head.pending_entry().is_none(), "{what}: nothing to save");
        // Saving the refused snapshot writes nothing either.
        assert_eq!(
            store.save(&head).expect("an unchanged save"),
            before.0.revision()
        );
        unchanged(what);
    }
}

/// A fork keeps what it copied of its parent, whatever the parent's history does after:
/// a rewind, a compaction, a restore, and the parent's deletion. The fork's own history
/// starts at its first revision.
pub(super) fn a_fork_outlives_its_parents_rewind_compaction_restore_and_deletion<
    S: SessionStore,
>(
    store: &S,
) {
    let parent = two_turns("history-parent");
    let pid = parent.id().clone();
    save_changed(store, parent);
    let at_two = save_turn(store, &pid, "three");
    let fork = store
        .fork(&pid, ForkAt::End, id("history-fork"))
        .expect("fork the head");
    let fork_id = fork.id().clone();
    let before = everything(store, &fork_id);
    store
        .rewind(&pid, RewindTo::LastTurns(2))
        .expect("rewind the parent");
    let mut compacted = store.load(&pid).expect("load");
    compacted
        .compact(Compaction::new(4, vec![Message::user("parent summary")]))
        .expect("compact the parent");
    save_changed(store, compacted);
    store.restore(&pid, at_two.revision()).expect("restore");
    assert_eq!(everything(store, &fork_id), before, "the fork changed");
    store.delete(&pid).expect("delete the parent");
    let (fork_head, revisions, history) = everything(store, &fork_id);
    assert_eq!(
        fork_head, before.0,
        "the fork changed with its parent deleted"
    );
    assert_eq!(texts(fork_head.transcript()), texts(at_two.transcript()));
    assert_eq!(revisions, before.1);
    assert_eq!(revisions[0].kind, EntryKind::Checkpoint);
    assert_eq!(history, before.2);
    assert!(history.messages.iter().all(|m| m.standing.is_in_view()));
    let next = save_turn(store, &fork_id, "the fork goes on");
    assert_eq!(
        store.load_at(&fork_id, fork.revision()).expect("load_at"),
        fork_head
    );
    assert_eq!(store.load(&fork_id).expect("load"), next);
}

/// Dropping the revisions before a point (`trim_history`): the head and every revision
/// from the point on load exactly as before, the earlier ones are `RevisionNotFound`
/// naming the new oldest, the listing and the history count what is kept, a restore of a
/// dropped revision keeps the view it made, a snapshot loaded before the trim still saves,
/// and a revision not kept is refused with nothing changed.
pub(super) fn trim_history_drops_the_earlier_revisions_and_keeps_the_later_ones<S: SessionStore>(
    store: &S,
) {
    let first = two_turns("trimmed");
    let sid = first.id().clone();
    let mut states = vec![save_changed(store, first)];
    states.push(save_turn(store, &sid, "three"));
    states.push(
        store
            .rewind(&sid, RewindTo::LastTurns(1))
            .expect("rewind the last turn"),
    );
    // A restore of revision 1, which the trim below drops.
    store.restore(&sid, Revision::from_u64(1)).expect("restore");
    states.push(store.load(&sid).expect("load the restore"));
    states.push(save_turn(store, &sid, "four"));
    let stale = store.load(&sid).expect("load before the trim");
    let head = stale.clone();

    let cut = Revision::from_u64(3);
    assert_eq!(store.trim_history(&sid, cut).expect("trim"), 2);
    assert_eq!(store.load(&sid).expect("load"), head, "the head");
    for state in &states {
        match store.load_at(&sid, state.revision()) {
            Ok(loaded) => {
                assert!(
                    state.revision() >= cut,
                    "revision {} loads",
                    state.revision()
                );
                assert_eq!(&loaded, state, "revision {}", state.revision());
            }
            Err(Error::RevisionNotFound { oldest, .. }) => {
                assert!(
                    state.revision() < cut,
                    "revision {} is gone",
                    state.revision()
                );
                assert_eq!(oldest, cut);
            }
            Err(e) => panic!("load_at {}: {e}", state.revision()),
        }
    }
    let revisions = store.revisions(&sid).expect("revisions");
    let listed: Vec<u64> = revisions.iter().map(|r| r.revision.as_u64()).collect();
    assert_eq!(listed, [3, 4, 5]);
    assert_eq!(revisions[1].messages, states[0].transcript().len());
    assert_eq!(store.history(&sid).expect("history").oldest_revision, cut);
    assert_listed_stats(store, &sid, "after the trim");

    // A revision not kept: refused, nothing changed.
    let before = everything(store, &sid);
    for wrong in [Revision::from_u64(1), Revision::from_u64(9)] {
        let err = store.trim_history(&sid, wrong).expect_err("not kept");
        assert!(
            matches!(err, Error::RevisionNotFound { revision, .. } if revision == wrong),
            "{err:?}"
        );
    }
    assert_eq!(everything(store, &sid), before);

    // The snapshot loaded before the trim still saves.
    let next = stale
        .with_appended(turn("five"), vec![], chrono::Utc::now())
        .expect("append");
    let revision = store
        .save(&next)
        .expect("a snapshot from before the trim saves");
    assert_eq!(
        store.load(&sid).expect("load"),
        next.with_revision(revision)
    );
    assert_listed_stats(store, &sid, "after a save from before the trim");
}
