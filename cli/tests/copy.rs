//! `agent-session copy`, run as a process: every session of a folder store copied into
//! another folder, into a SQLite database and back (and, with the `postgres-tests`
//! feature, into PostgreSQL and back, through SQLite too), with its history; the dry run,
//! the refusal of sessions the target holds, `--skip-existing`, and the store specs it
//! refuses. Stores are filled and checked through the library.

use std::path::Path;

#[path = "common/process.rs"]
mod process;

use agent_session::{
    Compaction, ContentBlock, EntryKind, FileSessionStore, ForkAt, ListScope, Message, Revision,
    RewindTo, SessionId, SessionSnapshot, SessionStore, SessionStoreExt, SqliteSessionStore,
    ToolCall, ToolResult, Usage,
};
use serde_json::json;

use process::run;

fn sid(id: &str) -> SessionId {
    SessionId::parse(id).expect("a valid id")
}

/// A store with a session of turns, a tool call, a rewind, a restore and a metadata
/// change; a fork of it; and an archived session.
fn populate(dir: &Path) -> FileSessionStore {
    let store = FileSessionStore::open(dir).expect("open");
    let id = sid("main");
    store
        .save(
            &SessionSnapshot::builder(id.clone(), "m")
                .transcript(vec![Message::user("2+3?")])
                .build()
                .expect("build"),
        )
        .expect("save");
    let mut head = store.load(&id).expect("load");
    let call = ToolCall::new("c1", "calculator", json!({"expression": "2+3"}));
    head = head
        .with_appended(
            vec![
                Message::assistant(vec![ContentBlock::tool_call(call)]),
                Message::tool_result(ToolResult::new("c1", "5")),
                Message::assistant(vec![ContentBlock::text("5")]),
                Message::user("thanks"),
                Message::assistant(vec![ContentBlock::text("welcome")]),
            ],
            vec![Usage::new("m").with_tokens(10, 3)],
            chrono::Utc::now(),
        )
        .expect("append");
    store.save(&head).expect("turn");
    store.rewind(&id, RewindTo::LastTurns(1)).expect("rewind");
    store.restore(&id, Revision::from_u64(2)).expect("restore");
    store
        .fork(&id, ForkAt::Messages(4), sid("branch"))
        .expect("fork");
    store
        .save(
            &SessionSnapshot::builder(sid("old"), "m")
                .transcript(vec![Message::user("old")])
                .build()
                .expect("build"),
        )
        .expect("save");
    store.set_archived(&sid("old"), true).expect("archive");
    store
}

/// [`populate`], and a session of two turns whose first was compacted away (a summary in
/// its place, the turn kept in the history): 4 sessions, 9 revisions.
fn populate_with_compaction(dir: &Path) -> FileSessionStore {
    let store = populate(dir);
    let id = sid("compacted");
    store
        .save(
            &SessionSnapshot::builder(id.clone(), "m")
                .transcript(vec![
                    Message::user("one"),
                    Message::assistant(vec![ContentBlock::text("1")]),
                ])
                .build()
                .expect("build"),
        )
        .expect("save");
    let head = store.load(&id).expect("load");
    let mut head = head
        .with_appended(
            vec![
                Message::user("two"),
                Message::assistant(vec![ContentBlock::text("2")]),
            ],
            vec![Usage::new("m").with_tokens(4, 1)],
            chrono::Utc::now(),
        )
        .expect("append");
    store.save(&head).expect("turn");
    head = store.load(&id).expect("load");
    head.compact(Compaction::new(2, vec![Message::user("Earlier: one, 1.")]))
        .expect("compact");
    store.save(&head).expect("compaction");
    assert_eq!(
        kinds(&store, "compacted").last(),
        Some(&EntryKind::Compaction)
    );
    store
}

/// The kind of each revision `store` keeps of session `id`, oldest first.
fn kinds(store: &dyn SessionStore, id: &str) -> Vec<EntryKind> {
    store
        .revisions(&sid(id))
        .expect("revisions")
        .iter()
        .map(|r| r.kind)
        .collect()
}

/// Runs `copy --from FROM --to TO EXTRA...`, asserts that it succeeded, and returns its
/// stdout.
fn copy_ok(from: &str, to: &str, extra: &[&str]) -> String {
    let mut args = vec!["copy", "--from", from, "--to", to];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run(&args);
    assert_eq!(
        code,
        Some(0),
        "copy --from {from} --to {to}: {stdout}{stderr}"
    );
    stdout
}

fn file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

/// Asserts that `to` holds every session of `from` as it is there, history included.
fn assert_same(from: &dyn SessionStore, to: &dyn SessionStore) {
    let listed = |store: &dyn SessionStore| {
        let mut sessions: Vec<(SessionId, bool)> = store
            .list_scoped(ListScope::All)
            .expect("list")
            .sessions
            .into_iter()
            .map(|s| (s.id, s.archived))
            .collect();
        sessions.sort();
        sessions
    };
    assert_eq!(listed(from), listed(to));
    for (id, _) in listed(from) {
        assert_eq!(from.load(&id).expect("load"), to.load(&id).expect("load"));
        let revisions = from.revisions(&id).expect("revisions");
        assert_eq!(revisions, to.revisions(&id).expect("revisions"), "{id}");
        for info in &revisions {
            assert_eq!(
                from.load_at(&id, info.revision).expect("load_at"),
                to.load_at(&id, info.revision).expect("load_at"),
                "{id} at {}",
                info.revision
            );
        }
        assert_eq!(
            from.history(&id).expect("history"),
            to.history(&id).expect("history")
        );
    }
}

#[test]
#[allow(clippy::too_many_lines)] // one store's story: dry run, copy, refusal, skip
fn copy_copies_every_session_with_its_history_and_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    let source = populate(&dir.path().join("source"));
    let target_dir = dir.path().join("target");
    let from = dir.path().join("source");
    let to = format!("file:{}", target_dir.display());

    // A dry run lists and writes nothing (not even the target folder).
    let (code, stdout, stderr) = run(&[
        "copy",
        "--from",
        from.to_str().expect("utf-8"),
        "--to",
        &to,
        "--dry-run",
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("would copy main: 4 revisions"), "{stdout}");
    assert!(stdout.contains("would copy 3 sessions"), "{stdout}");
    assert!(!target_dir.exists());

    let (code, stdout, stderr) =
        run(&["copy", "--from", from.to_str().expect("utf-8"), "--to", &to]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.contains(&"copied main: 4 revisions"), "{stdout}");
    assert!(
        lines.contains(&"copied branch: 1 revision, fork of main"),
        "{stdout}"
    );
    assert!(
        lines.contains(&"copied old: 1 revision, archived"),
        "{stdout}"
    );
    let main_at = lines
        .iter()
        .position(|l| l.contains(" main:"))
        .expect("main");
    let branch_at = lines
        .iter()
        .position(|l| l.contains(" branch:"))
        .expect("branch");
    assert!(main_at < branch_at, "the parent first: {stdout}");
    assert!(
        lines
            .last()
            .expect("summary")
            .starts_with("copied 3 sessions (6 revisions) from "),
        "{stdout}"
    );
    let target = FileSessionStore::open(&target_dir).expect("open");
    assert_same(&source, &target);
    let kinds: Vec<EntryKind> = target
        .revisions(&sid("main"))
        .expect("revisions")
        .iter()
        .map(|r| r.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            EntryKind::Checkpoint,
            EntryKind::Turn,
            EntryKind::Rewind,
            EntryKind::Restore
        ]
    );

    // Again: refused, nothing written, exit status 1.
    let (code, stdout, stderr) =
        run(&["copy", "--from", from.to_str().expect("utf-8"), "--to", &to]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("is already in"), "{stderr}");
    assert!(stderr.contains("--skip-existing"), "{stderr}");

    // With --skip-existing: a new session is copied, the others skipped.
    source
        .save(
            &SessionSnapshot::builder(sid("new"), "m")
                .transcript(vec![Message::user("new")])
                .build()
                .expect("build"),
        )
        .expect("save");
    let (code, stdout, stderr) = run(&[
        "copy",
        "--from",
        from.to_str().expect("utf-8"),
        "--to",
        &to,
        "--skip-existing",
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("copied new: 1 revision"), "{stdout}");
    assert!(
        stdout.contains("skipped main: already in the target"),
        "{stdout}"
    );
    assert!(stdout.contains("1 session (1 revision)"), "{stdout}");
    assert!(stdout.contains("3 skipped, 0 not copied"), "{stdout}");
    assert_same(&source, &target);

    // A session of the target that differs is an error with --skip-existing too.
    target.delete(&sid("new")).expect("delete");
    target
        .save(
            &SessionSnapshot::builder(sid("new"), "other")
                .build()
                .expect("build"),
        )
        .expect("save");
    let (code, stdout, stderr) = run(&[
        "copy",
        "--from",
        from.to_str().expect("utf-8"),
        "--to",
        &to,
        "--skip-existing",
        "--only",
        "new",
    ]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("not copied new: session new already exists"),
        "{stderr}"
    );
}

#[test]
fn copy_refuses_stores_it_cannot_use() {
    let dir = tempfile::tempdir().expect("dir");
    populate(&dir.path().join("s"));
    let from = dir.path().join("s");
    let from = from.to_str().expect("utf-8");

    // A SQLite store with no path, or with a schema (it has none): usage errors.
    let (code, _, stderr) = run(&["copy", "--from", from, "--to", "sqlite:"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--to names a SQLite store without its path"),
        "{stderr}"
    );
    let db = dir.path().join("db").join("s.db");
    let sqlite = format!("sqlite:{}", db.display());
    let (code, _, stderr) = run(&["copy", "--from", from, "--to", &sqlite, "--to-schema", "s"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--to-schema applies to a PostgreSQL store")
            && stderr.contains("the SQLite database"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&[
        "copy",
        "--from",
        &sqlite,
        "--from-schema",
        "s",
        "--to",
        from,
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--from-schema applies to a PostgreSQL store"),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing was created");

    // One database, written two ways.
    copy_ok(from, &sqlite, &[]);
    let again = format!("sqlite:{}/../db//s.db", db.parent().expect("dir").display());
    let (code, _, stderr) = run(&["copy", "--from", &sqlite, "--to", &again]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("the same store"), "{stderr}");

    let (code, _, stderr) = run(&["copy", "--from", from, "--to", &format!("file:{from}")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("the same store"), "{stderr}");

    let missing = dir.path().join("missing");
    let (code, _, stderr) = run(&[
        "copy",
        "--from",
        missing.to_str().expect("utf-8"),
        "--to",
        from,
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("there is no session store"), "{stderr}");

    let (code, _, stderr) = run(&[
        "copy",
        "--from",
        from,
        "--to",
        "elsewhere",
        "--to-schema",
        "s",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--to-schema applies to a PostgreSQL store"),
        "{stderr}"
    );

    let (code, _, stderr) = run(&["copy", "--from", from, "--to", "postgres:host="]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("PostgreSQL"), "{stderr}");
}

#[test]
fn copy_goes_from_a_folder_to_sqlite_and_back_with_the_history() {
    let dir = tempfile::tempdir().expect("dir");
    let source = populate_with_compaction(&dir.path().join("source"));
    let from = dir.path().join("source");
    let from = from.to_str().expect("utf-8");
    let db = dir.path().join("sqlite").join("sessions.db");
    let sqlite = format!("sqlite:{}", db.display());

    // A source that does not exist is said, and not created.
    let missing = dir.path().join("missing.db");
    let (code, _, stderr) = run(&[
        "copy",
        "--from",
        &format!("sqlite:{}", missing.display()),
        "--to",
        from,
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("there is no session store at sqlite:"),
        "{stderr}"
    );
    assert!(!missing.exists());

    // A dry run into a database that does not exist creates nothing.
    let stdout = copy_ok(from, &sqlite, &["--dry-run"]);
    assert!(
        stdout.contains("would copy 4 sessions (9 revisions)"),
        "{stdout}"
    );
    assert!(!db.exists() && !db.parent().expect("dir").exists());

    let stdout = copy_ok(from, &sqlite, &[]);
    assert!(stdout.contains("copied compacted: 3 revisions"), "{stdout}");
    let summary = stdout.lines().last().expect("summary");
    assert!(
        summary.starts_with("copied 4 sessions (9 revisions) from ")
            && summary.contains(" to sqlite:/"),
        "{stdout}"
    );
    assert_eq!(file_mode(&db), 0o600, "the database is private");
    let copied = SqliteSessionStore::open(&db).expect("open");
    assert_same(&source, &copied);
    assert_eq!(
        kinds(&copied, "main"),
        [
            EntryKind::Checkpoint,
            EntryKind::Turn,
            EntryKind::Rewind,
            EntryKind::Restore
        ]
    );
    assert_eq!(
        kinds(&copied, "compacted"),
        [
            EntryKind::Checkpoint,
            EntryKind::Turn,
            EntryKind::Compaction
        ]
    );

    // The sessions the database holds refuse a second copy into it.
    let (code, stdout, stderr) = run(&["copy", "--from", from, "--to", &sqlite]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("is already in sqlite:"), "{stderr}");

    let back = dir.path().join("back");
    let stdout = copy_ok(&sqlite, &format!("file:{}", back.display()), &[]);
    assert!(
        stdout.contains("copied 4 sessions (9 revisions) from sqlite:/"),
        "{stdout}"
    );
    assert_same(&source, &FileSessionStore::open(&back).expect("open"));
}

#[cfg(feature = "postgres-tests")]
#[path = "../../tests/common/postgres.rs"]
mod pg;

#[cfg(feature = "postgres-tests")]
#[test]
fn copy_goes_to_postgres_and_back() {
    let dir = tempfile::tempdir().expect("dir");
    let source = populate(&dir.path().join("source"));
    let schemas = pg::Schemas::new();
    let schema = schemas.name();
    let postgres = pg::connect(&schema);
    postgres.migrate().expect("migrate");
    let conninfo = format!("postgres:{}", pg::url());
    let from = dir.path().join("source");

    let (code, stdout, stderr) = run(&[
        "copy",
        "--from",
        from.to_str().expect("utf-8"),
        "--to",
        &conninfo,
        "--to-schema",
        &schema,
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("copied 3 sessions (6 revisions)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("schema {schema} of postgresql://")),
        "{stdout}"
    );
    assert_same(&source, &postgres);

    let back = dir.path().join("back");
    let (code, stdout, stderr) = run(&[
        "copy",
        "--from",
        &conninfo,
        "--from-schema",
        &schema,
        "--to",
        back.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_same(&source, &FileSessionStore::open(&back).expect("open"));
}

#[cfg(feature = "postgres-tests")]
#[test]
fn copy_goes_from_a_folder_through_sqlite_and_postgres_back_to_a_folder() {
    let dir = tempfile::tempdir().expect("dir");
    let source = populate_with_compaction(&dir.path().join("source"));
    let from = dir.path().join("source");
    let db = dir.path().join("sqlite").join("sessions.db");
    let sqlite = format!("sqlite:{}", db.display());
    let schemas = pg::Schemas::new();
    let schema = schemas.name();
    let postgres = pg::connect(&schema);
    postgres.migrate().expect("migrate");
    let conninfo = format!("postgres:{}", pg::url());
    let back = dir.path().join("back");

    copy_ok(from.to_str().expect("utf-8"), &sqlite, &[]);
    assert_same(&source, &SqliteSessionStore::open(&db).expect("open"));

    let stdout = copy_ok(&sqlite, &conninfo, &["--to-schema", &schema]);
    assert!(
        stdout.contains(&format!(
            "copied 4 sessions (9 revisions) from sqlite:{} to schema {schema} of postgresql://",
            db.display()
        )),
        "{stdout}"
    );
    assert_same(&source, &postgres);
    assert_eq!(
        kinds(&postgres, "compacted"),
        [
            EntryKind::Checkpoint,
            EntryKind::Turn,
            EntryKind::Compaction
        ]
    );

    copy_ok(
        &conninfo,
        &format!("file:{}", back.display()),
        &["--from-schema", &schema],
    );
    assert_same(&source, &FileSessionStore::open(&back).expect("open"));
}
