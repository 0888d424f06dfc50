//! The `agent-session` command on a PostgreSQL store (`--store postgres://…`), run as a
//! process against a real server: the one named by `AGENT_SESSION_POSTGRES_URL` (a libpq
//! `key=value` string or a URL). `scripts/test` starts a throw-away server, sets it, and
//! turns on this package's `postgres-tests` feature (`--all-features`); with the feature
//! on and no server named, these tests fail and say so, as the library's PostgreSQL tests
//! do. Without the feature this file is one test that prints why nothing ran.
//!
//! Each test works in fresh schemas of its own (the library's test helpers,
//! `tests/common/postgres.rs`), dropped when it passes and kept when it fails, and in a
//! temporary working directory. Sessions are saved and checked through the library's
//! `PostgresSessionStore`.

#[cfg(not(feature = "postgres-tests"))]
#[test]
fn postgres_tests_need_the_postgres_tests_feature() {
    eprintln!(
        "skipped: the CLI's PostgreSQL tests need the `postgres-tests` feature; run \
         scripts/test -p agent-session-cli (cargo test --all-features against a throw-away \
         server it starts)"
    );
}

#[cfg(feature = "postgres-tests")]
#[path = "../../tests/common/postgres.rs"]
mod pg;
#[cfg(feature = "postgres-tests")]
#[path = "common/process.rs"]
mod process;

#[cfg(feature = "postgres-tests")]
mod postgres_cli {
    use std::io::Write;
    use std::path::Path;
    use std::process::{Command, Output, Stdio};

    use agent_session::{
        ContentBlock, FileSessionStore, ListScope, Message, PostgresSessionStore, SessionId,
        SessionSnapshot, SessionStore, ToolCall, ToolResult,
    };
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::pg::{self, Schemas};

    // -----------------------------------------------------------------------------------
    // The server, as the command is given it.
    // -----------------------------------------------------------------------------------

    /// `AGENT_SESSION_POSTGRES_URL` as a `postgresql://` URL (what `--store` takes),
    /// with `password` in it if given (else the one the variable holds, if any).
    fn store_url(password: Option<&str>) -> String {
        let configured = pg::url();
        let configured = configured.trim();
        if configured.starts_with("postgres://") || configured.starts_with("postgresql://") {
            return match password {
                None => configured.to_owned(),
                Some(password) => {
                    let join = if configured.contains('?') { '&' } else { '?' };
                    format!("{configured}{join}password={}", encoded(password))
                }
            };
        }
        let mut params = key_values(configured);
        let mut take = |key: &str| {
            params
                .iter()
                .position(|(k, _)| k == key)
                .map(|at| params.remove(at).1)
        };
        let host = take("host").unwrap_or_else(|| "127.0.0.1".to_owned());
        // The command names the server with its port, the default one too.
        let port = take("port").or_else(|| Some("5432".to_owned()));
        let user = take("user");
        let dbname = take("dbname");
        let password = password.map(str::to_owned).or_else(|| take("password"));
        let mut url = String::from("postgresql://");
        if let Some(user) = user {
            url.push_str(&encoded(&user));
            if let Some(password) = password {
                url.push(':');
                url.push_str(&encoded(&password));
            }
            url.push('@');
        } else if let Some(password) = password {
            params.push(("password".to_owned(), password));
        }
        url.push_str(&encoded(&host));
        if let Some(port) = port {
            url.push(':');
            url.push_str(&port);
        }
        if let Some(dbname) = dbname {
            url.push('/');
            url.push_str(&encoded(&dbname));
        }
        for (i, (key, value)) in params.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&encoded(key));
            url.push('=');
            url.push_str(&encoded(value));
        }
        url
    }

    /// The pairs of a libpq `key=value` string (values bare or in single quotes, with
    /// backslash escapes).
    fn key_values(text: &str) -> Vec<(String, String)> {
        let mut pairs = Vec::new();
        let mut chars = text.chars().peekable();
        loop {
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            let mut key = String::new();
            while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
                key.push(c);
            }
            if key.is_empty() {
                return pairs;
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            assert_eq!(
                chars.next(),
                Some('='),
                "{}: expected key=value pairs",
                pg::URL_ENV
            );
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            let mut value = String::new();
            if chars.next_if_eq(&'\'').is_some() {
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some('\\') => value.extend(chars.next()),
                        Some(c) => value.push(c),
                        None => panic!("{}: unterminated quoted value", pg::URL_ENV),
                    }
                }
            } else {
                while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                    if c == '\\' {
                        value.extend(chars.next());
                    } else {
                        value.push(c);
                    }
                }
            }
            pairs.push((key, value));
        }
    }

    /// Percent-encodes all but ASCII letters, digits and `-._~`.
    fn encoded(text: &str) -> String {
        text.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    }

    /// How the command names the store in `schema` of the test server.
    fn named(schema: &str) -> String {
        let url = store_url(None);
        let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
        let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
        let rest = match rest.split_once('@') {
            Some((credentials, server)) => {
                let user = credentials.split(':').next().unwrap_or_default();
                format!("{user}@{server}")
            }
            None => rest.to_owned(),
        };
        format!("schema {schema} of postgresql://{rest}")
    }

    // -----------------------------------------------------------------------------------
    // Running the command.
    // -----------------------------------------------------------------------------------

    use super::process::SCRUBBED_ENV;

    /// What a finished process printed.
    #[derive(Debug)]
    struct Out {
        code: Option<i32>,
        stdout: String,
        stderr: String,
    }

    impl From<Output> for Out {
        fn from(output: Output) -> Self {
            let out = Out {
                code: output.status.code(),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            };
            assert!(
                !out.stderr.contains("panicked"),
                "the agent panicked: {out:#?}"
            );
            out
        }
    }

    impl Out {
        fn assert_success(self) -> Self {
            assert_eq!(self.code, Some(0), "expected success: {self:#?}");
            self
        }

        /// Asserts a failure with exit status `code` whose stderr contains every `needle`.
        fn assert_failure(self, code: i32, needles: &[&str]) -> Self {
            assert_eq!(self.code, Some(code), "unexpected exit status: {self:#?}");
            for needle in needles {
                assert!(
                    self.stderr.contains(needle),
                    "stderr lacks {needle:?}: {self:#?}"
                );
            }
            self
        }

        fn printed(&self) -> String {
            format!("{}{}", self.stdout, self.stderr)
        }
    }

    /// A temporary working directory, and the store URL the commands get.
    struct Workspace {
        dir: tempfile::TempDir,
        url: String,
    }

    impl Workspace {
        fn new() -> Self {
            Self::with_url(store_url(None))
        }

        fn with_url(url: String) -> Self {
            Workspace {
                dir: tempfile::tempdir().expect("a temporary directory"),
                url,
            }
        }

        fn path(&self) -> &Path {
            self.dir.path()
        }

        /// The command with no store chosen, in the working directory, with no input.
        fn bare(&self, args: &[&str]) -> Command {
            let mut command = Command::new(env!("CARGO_BIN_EXE_agent-session"));
            command
                .args(args)
                .current_dir(self.path())
                .stdin(Stdio::null());
            for name in SCRUBBED_ENV {
                command.env_remove(name);
            }
            command
        }

        /// `agent-session --store URL --schema SCHEMA ARGS`.
        fn run(&self, schema: &str, args: &[&str]) -> Out {
            let mut all = vec!["--store", &self.url, "--schema", schema];
            all.extend_from_slice(args);
            self.bare(&all).output().expect("the agent starts").into()
        }

        /// As [`run`](Self::run), with `input` on stdin.
        fn run_with_input(&self, schema: &str, args: &[&str], input: &[u8]) -> Out {
            let mut all = vec!["--store", &self.url, "--schema", schema];
            all.extend_from_slice(args);
            let mut child = self
                .bare(&all)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the agent starts");
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(input)
                .expect("write stdin");
            child.wait_with_output().expect("the agent exits").into()
        }

        /// `agent-session --store DIR ARGS`, on a folder in the working directory.
        fn run_on_folder(&self, dir: &str, args: &[&str]) -> Out {
            let mut all = vec!["--store", dir];
            all.extend_from_slice(args);
            self.bare(&all).output().expect("the agent starts").into()
        }

        fn folder(&self, dir: &str) -> FileSessionStore {
            FileSessionStore::open(self.path().join(dir)).expect("the folder store opens")
        }
    }

    // -----------------------------------------------------------------------------------
    // Sessions.
    // -----------------------------------------------------------------------------------

    fn id(name: &str) -> SessionId {
        SessionId::parse(name).expect("a valid id")
    }

    /// A session with a tool call and its result, updated `minute` minutes past a fixed hour.
    fn snapshot(name: &str, title: &str, minute: u32) -> SessionSnapshot {
        let at = Utc
            .with_ymd_and_hms(2025, 6, 7, 8, minute, 0)
            .single()
            .expect("a valid time");
        let call = ToolCall::new("call_1", "calculator", json!({"expression": "6*7"}));
        SessionSnapshot::builder(id(name), "scripted")
            .metadata_entry("title", json!(title))
            .system_prompt("be brief")
            .transcript(vec![
                Message::user(format!("{title}: what is 6*7?")),
                Message::assistant(vec![ContentBlock::tool_call(call)]),
                Message::tool_result(ToolResult::new("call_1", "42")),
                Message::assistant(vec![ContentBlock::text("6*7 = 42")]),
                Message::user("thanks"),
                Message::assistant(vec![ContentBlock::text("you are welcome")]),
            ])
            .timestamps(at, at)
            .build()
            .expect("a valid snapshot")
    }

    /// A migrated fresh schema holding `sessions`, saved through the library.
    fn schema_with(
        schemas: &Schemas,
        sessions: &[SessionSnapshot],
    ) -> (String, PostgresSessionStore) {
        let store = schemas.store();
        for session in sessions {
            store.save(session).expect("save through the library");
        }
        (store.schema().to_owned(), store)
    }

    fn listed_ids(table: &str) -> Vec<String> {
        table
            .lines()
            .skip(1)
            .filter_map(|line| line.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    }

    fn assert_same_session(original: &SessionSnapshot, copy: &SessionSnapshot) {
        assert_eq!(copy.id(), original.id());
        assert_eq!(copy.transcript(), original.transcript());
        assert_eq!(copy.tool_calls(), original.tool_calls());
        assert_eq!(copy.usage(), original.usage());
        assert_eq!(copy.options(), original.options());
        assert_eq!(copy.metadata(), original.metadata());
        assert_eq!(
            (copy.created_at(), copy.updated_at()),
            (original.created_at(), original.updated_at())
        );
        assert_eq!(copy.lineage(), original.lineage());
    }

    // -----------------------------------------------------------------------------------
    // The tests.
    // -----------------------------------------------------------------------------------

    #[test]
    fn list_shows_nothing_in_a_new_schema_then_the_sessions_the_library_saved() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let (schema, store) = schema_with(&schemas, &[]);

        let empty = ws.run(&schema, &["sessions", "list"]).assert_success();
        assert_eq!(
            empty.stdout.trim(),
            format!("no saved sessions in {}", named(&schema))
        );
        let archived = ws
            .run(&schema, &["sessions", "list", "--archived"])
            .assert_success();
        assert!(
            archived
                .stdout
                .starts_with("no archived sessions in schema "),
            "{archived:#?}"
        );

        for (name, title, minute) in [("older", "first one", 1), ("newer", "second one", 2)] {
            store
                .save(&snapshot(name, title, minute))
                .expect("save through the library");
        }
        let listed = ws.run(&schema, &["sessions", "list"]).assert_success();
        assert_eq!(
            listed_ids(&listed.stdout),
            ["newer", "older"],
            "{listed:#?}"
        );
        assert!(listed.stdout.contains("second one"), "{listed:#?}");
        assert!(
            listed
                .stdout
                .lines()
                .nth(1)
                .is_some_and(|l| l.contains("  6  ")),
            "message count: {listed:#?}"
        );

        // One page at a time, from the store's index.
        let first = ws
            .run(&schema, &["sessions", "list", "--limit", "1"])
            .assert_success();
        assert_eq!(listed_ids(&first.stdout), ["newer"]);
        let more = first
            .stderr
            .lines()
            .find_map(|line| line.strip_prefix("more: agent-session "))
            .unwrap_or_else(|| panic!("no next-page command: {first:#?}"));
        let next: Vec<&str> = more.split_whitespace().collect();
        let second = ws.run(&schema, &next).assert_success();
        assert_eq!(listed_ids(&second.stdout), ["older"], "{second:#?}");
        assert!(!second.stderr.contains("more:"), "{second:#?}");

        // Another schema of the same database is another store.
        let (other, _) = schema_with(&schemas, &[]);
        let elsewhere = ws.run(&other, &["sessions", "list"]).assert_success();
        assert!(
            elsewhere.stdout.starts_with("no saved sessions"),
            "{elsewhere:#?}"
        );
    }

    #[test]
    fn show_prints_a_stored_session_with_each_tool_call_next_to_its_result() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let (schema, _store) = schema_with(&schemas, &[snapshot("shown", "a title", 3)]);

        let out = ws
            .run(&schema, &["sessions", "show", "shown"])
            .assert_success();
        assert!(out.stdout.starts_with("session shown\n"), "{out:#?}");
        assert!(
            out.stdout.contains("model scripted, revision 1"),
            "{out:#?}"
        );
        let call = out
            .stdout
            .find("[tool call call_1] calculator")
            .unwrap_or_else(|| panic!("{out:#?}"));
        let result = out
            .stdout
            .find("[result ok] 42")
            .unwrap_or_else(|| panic!("{out:#?}"));
        assert!(call < result, "{out:#?}");

        ws.run(&schema, &["sessions", "show", "missing"])
            .assert_failure(1, &["session missing not found", "sessions list"]);
        ws.run(&schema, &["sessions", "show", "NOT valid"])
            .assert_failure(1, &["NOT valid"]);
    }

    #[test]
    fn fork_archive_unarchive_and_delete_change_the_postgres_store() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let parent = snapshot("parent", "the parent", 4);
        let (schema, store) = schema_with(&schemas, std::slice::from_ref(&parent));

        let fork = ws
            .run(
                &schema,
                &[
                    "sessions", "fork", "parent", "--at", "turn:1", "--as", "child",
                ],
            )
            .assert_success();
        assert_eq!(fork.stdout, "child\n");
        assert!(
            fork.stderr.contains("forked parent (revision 1)"),
            "{fork:#?}"
        );
        let child = store.load(&id("child")).expect("the fork is stored");
        assert_eq!(child.transcript(), &parent.transcript()[..4]);
        let lineage = child.lineage().expect("the fork records its parent");
        assert_eq!(lineage.parent, id("parent"));
        assert_eq!(
            store.load(&id("parent")).expect("parent").transcript(),
            parent.transcript(),
            "the parent is not changed"
        );
        let listed = ws.run(&schema, &["sessions", "list"]).assert_success();
        assert!(listed.stdout.contains("[fork of parent@4]"), "{listed:#?}");
        ws.run(&schema, &["sessions", "fork", "parent", "--as", "child"])
            .assert_failure(1, &["already exists", "--as ID"]);

        let archived = ws
            .run(&schema, &["sessions", "archive", "child"])
            .assert_success();
        assert_eq!(archived.stdout, "archived session child\n");
        let active = store.list_scoped(ListScope::Active).expect("list");
        assert!(active.sessions.iter().all(|s| s.id != id("child")));
        let only = ws.run(&schema, &["sessions", "list"]).assert_success();
        assert_eq!(listed_ids(&only.stdout), ["parent"]);
        let all = ws
            .run(&schema, &["sessions", "list", "--all"])
            .assert_success();
        assert!(
            all.stdout
                .lines()
                .any(|l| l.starts_with("child ") && l.contains("[archived]")),
            "{all:#?}"
        );
        let hidden = ws
            .run(&schema, &["sessions", "list", "--archived"])
            .assert_success();
        assert_eq!(listed_ids(&hidden.stdout), ["child"]);

        ws.run(&schema, &["sessions", "unarchive", "child"])
            .assert_success();
        let back = store.list_scoped(ListScope::Active).expect("list");
        assert!(back.sessions.iter().any(|s| s.id == id("child")));
        ws.run(&schema, &["sessions", "archive", "nobody"])
            .assert_failure(1, &["session nobody not found"]);

        let deleted = ws
            .run(&schema, &["sessions", "delete", "child"])
            .assert_success();
        assert_eq!(deleted.stdout, "deleted session child\n");
        assert!(store.load(&id("child")).is_err_and(|e| e.is_not_found()));
        ws.run(&schema, &["sessions", "delete", "child"])
            .assert_failure(1, &["session child not found"]);
        assert!(
            store.load(&id("parent")).is_ok(),
            "only that one is deleted"
        );
    }

    #[test]
    fn rewind_and_undo_take_a_postgres_session_back_and_a_refused_point_writes_nothing() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let original = snapshot("undone", "to undo", 5);
        let (schema, store) = schema_with(&schemas, std::slice::from_ref(&original));

        // prompt, call, result, answer, "thanks", answer: splitting the call is refused.
        ws.run(
            &schema,
            &["sessions", "rewind", "undone", "--to-message", "2"],
        )
        .assert_failure(
            1,
            &[
                "cannot rewind session undone to message 2",
                "rewind to message 1 or 3 instead",
                "nothing was rewound",
            ],
        );
        let unchanged = store.load(&id("undone")).expect("load");
        assert_eq!(unchanged.revision(), original.revision().next());
        assert_eq!(unchanged.updated_at(), original.updated_at());
        ws.run(&schema, &["sessions", "rewind", "nobody"])
            .assert_failure(1, &["session nobody not found", "sessions list"]);

        let out = ws
            .run(&schema, &["sessions", "rewind", "undone"])
            .assert_success();
        assert_eq!(
            out.stdout,
            "rewound session undone (turns:1), now revision 2: dropped 2 messages (1 turn: \"thanks\"), 4 messages remain\n",
            "{out:#?}"
        );
        let rewound = store.load(&id("undone")).expect("load");
        assert_eq!(rewound.transcript(), &original.transcript()[..4]);
        assert_eq!(rewound.tool_calls(), original.tool_calls());
        let shown = ws
            .run(&schema, &["sessions", "show", "undone"])
            .assert_success();
        assert!(shown.stdout.contains("4 messages"), "{shown:#?}");
        assert!(!shown.stdout.contains("thanks"), "{shown:#?}");

        // /undo in a chat on the same store, then the chat goes on.
        let chat = ws
            .run_with_input(
                &schema,
                &["chat", "--resume", "undone"],
                b"/undo\nwhat did I ask before?\n",
            )
            .assert_success();
        assert!(
            chat.stdout.contains(
                "undone: dropped 4 messages (1 turn: \"to undo: what is 6*7?\"), 0 messages remain; saved as revision 3"
            ),
            "{chat:#?}"
        );
        assert!(
            chat.stdout.contains("You have not asked anything before"),
            "{chat:#?}"
        );
        let chatted = store.load(&id("undone")).expect("load");
        assert_eq!(chatted.transcript().len(), 2);
        assert_eq!(chatted.revision().as_u64(), 4);
    }

    #[test]
    fn history_show_at_and_restore_work_on_a_postgres_session() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let original = snapshot("hist", "time travel", 5);
        let (schema, store) = schema_with(&schemas, std::slice::from_ref(&original));
        let line = |listing: &str| {
            listing
                .lines()
                .find(|l| l.starts_with("hist "))
                .unwrap_or_else(|| panic!("hist is not listed: {listing}"))
                .to_owned()
        };

        ws.run(&schema, &["sessions", "rewind", "hist"])
            .assert_success();
        let history = ws
            .run(&schema, &["sessions", "history", "hist", "--messages"])
            .assert_success();
        assert!(
            history
                .stdout
                .starts_with("session hist: 2 revisions kept, 1 to 2; the head is revision 2\n"),
            "{history:#?}"
        );
        for needle in [
            "  1  ",
            "checkpoint      6\n",
            "rewind          4  the head\n",
            "6 messages in the history since revision 1, 4 in the view:",
            "rewound at 2      user       thanks",
            "in view #0        user       time travel: what is 6*7?",
        ] {
            assert!(history.stdout.contains(needle), "{needle:?}: {history:#?}");
        }
        let listed = ws.run(&schema, &["sessions", "list"]).assert_success();
        assert!(
            line(&listed.stdout).contains("  R     time travel"),
            "{listed:#?}"
        );

        let past = ws
            .run(&schema, &["sessions", "show", "hist", "--at", "1"])
            .assert_success();
        assert!(past.stdout.contains("user>      thanks"), "{past:#?}");
        assert!(
            past.stdout.contains(
                "as it was at revision 1; the head is revision 2 (`sessions restore hist 1` makes this state the head again)"
            ),
            "{past:#?}"
        );
        ws.run(&schema, &["sessions", "show", "hist", "--at", "5"])
            .assert_failure(
                1,
                &[
                    "session hist has no revision 5: its store keeps revisions 1 to 2",
                    "sessions history hist",
                ],
            );

        let restored = ws
            .run(&schema, &["sessions", "restore", "hist", "1"])
            .assert_success();
        assert_eq!(
            restored.stdout,
            "restored session hist to revision 1, now revision 3: the view went from 4 messages to 6\n"
        );
        let head = store.load(&id("hist")).expect("load");
        assert_eq!(head.revision().as_u64(), 3);
        assert_eq!(head.transcript(), original.transcript());
        let listed = ws.run(&schema, &["sessions", "list"]).assert_success();
        assert!(
            line(&listed.stdout).contains("  RS    time travel"),
            "{listed:#?}"
        );
        ws.run(&schema, &["sessions", "restore", "hist", "9"])
            .assert_failure(1, &["has no revision 9", "nothing was restored"]);
        ws.run(&schema, &["sessions", "restore", "nobody", "1"])
            .assert_failure(1, &["session nobody not found"]);
    }

    #[test]
    fn compact_and_restore_in_chat_work_on_a_postgres_session() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let original = snapshot("hist", "time travel", 5);
        let (schema, store) = schema_with(&schemas, std::slice::from_ref(&original));
        let line = |listing: &str| {
            listing
                .lines()
                .find(|l| l.starts_with("hist "))
                .unwrap_or_else(|| panic!("hist is not listed: {listing}"))
                .to_owned()
        };

        let compacted = ws
            .run(
                &schema,
                &["sessions", "compact", "hist", "--keep-turns", "1"],
            )
            .assert_success();
        assert!(
            compacted.stdout.starts_with(
                "compacted session hist, now revision 2: its first 4 messages became a summary of 1 message; the view went from 6 to 3 messages\nthe summary was made offline"
            ),
            "{compacted:#?}"
        );
        let head = store.load(&id("hist")).expect("load");
        assert_eq!(head.transcript().len(), 3);
        assert_eq!(&head.transcript()[1..], &original.transcript()[4..]);
        let listed = ws.run(&schema, &["sessions", "list"]).assert_success();
        assert!(
            line(&listed.stdout).contains("  C     time travel"),
            "{listed:#?}"
        );
        ws.run(
            &schema,
            &["sessions", "compact", "hist", "--keep-turns", "5"],
        )
        .assert_failure(1, &["has nothing to compact", "nothing was compacted"]);
        assert_eq!(
            store.load(&id("hist")).expect("load").revision().as_u64(),
            2,
            "a refused compaction writes nothing"
        );

        // /restore in a chat on the same store undoes the compaction.
        let chat = ws
            .run_with_input(&schema, &["chat", "--resume", "hist"], b"/restore 1\n")
            .assert_success();
        assert!(
            chat.stdout.contains(
                "restored revision 1: the view went from 3 to 6 messages; saved as revision 3"
            ),
            "{chat:#?}"
        );
        assert_eq!(
            store.load(&id("hist")).expect("load").transcript(),
            original.transcript()
        );
    }

    #[test]
    fn prune_deletes_from_the_postgres_store_what_the_limits_say() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let (schema, store) = schema_with(
            &schemas,
            &[snapshot("a-old", "a", 1), snapshot("b-new", "b", 2)],
        );
        let dry = ws
            .run(
                &schema,
                &["sessions", "prune", "--max-count", "1", "--dry-run"],
            )
            .assert_success();
        assert!(dry.stdout.contains("would delete a-old"), "{dry:#?}");
        assert_eq!(store.list().expect("list").sessions.len(), 2);
        let pruned = ws
            .run(&schema, &["sessions", "prune", "--max-count", "1"])
            .assert_success();
        assert!(pruned.stdout.contains("deleted a-old"), "{pruned:#?}");
        let left: Vec<_> = store
            .list()
            .expect("list")
            .sessions
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(left, [id("b-new")]);
    }

    /// A fresh schema holding session `trim` with 4 revisions: 1 as saved, 2 and 3 two
    /// rewinds, 4 a turn on top.
    fn schema_with_a_long_history(
        ws: &Workspace,
        schemas: &Schemas,
    ) -> (String, PostgresSessionStore) {
        let (schema, store) = schema_with(schemas, &[snapshot("trim", "long history", 5)]);
        for args in [
            &["sessions", "rewind", "trim"][..],
            &["sessions", "rewind", "trim"],
            &["run", "--resume", "trim", "hello"],
        ] {
            ws.run(&schema, args).assert_success();
        }
        assert_eq!(kept_revisions(&store), [1, 2, 3, 4]);
        (schema, store)
    }

    /// The revisions `store` keeps of session `trim`, oldest first.
    fn kept_revisions(store: &PostgresSessionStore) -> Vec<u64> {
        store
            .revisions(&id("trim"))
            .expect("revisions")
            .iter()
            .map(|r| r.revision.as_u64())
            .collect()
    }

    #[test]
    fn prune_trims_the_history_of_postgres_sessions_with_a_dry_run_first() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let (schema, store) = schema_with_a_long_history(&ws, &schemas);
        let head = ws
            .run(&schema, &["sessions", "show", "trim"])
            .assert_success()
            .stdout;
        let bytes = store
            .stored_bytes(&id("trim"))
            .expect("stored bytes")
            .expect("PostgreSQL knows its sizes");

        let dry = ws
            .run(
                &schema,
                &["sessions", "prune", "--keep-revisions", "2", "--dry-run"],
            )
            .assert_success();
        assert_eq!(
            dry.stdout,
            format!(
                "would trim trim: would drop revisions 1..2 (2 revisions), {bytes} bytes now\n\
                 would delete 0 session(s), 0 bytes; would keep 1; would trim 1 session(s), 2 revisions (dry run: nothing was deleted or dropped)\n"
            ),
            "{dry:#?}"
        );
        assert_eq!(
            kept_revisions(&store),
            [1, 2, 3, 4],
            "a dry run changes nothing"
        );

        let out = ws
            .run(&schema, &["sessions", "prune", "--keep-revisions", "2"])
            .assert_success();
        let after = store
            .stored_bytes(&id("trim"))
            .expect("stored bytes")
            .expect("PostgreSQL knows its sizes");
        assert_eq!(
            out.stdout,
            format!(
                "trimmed trim: revisions 1..2 dropped (2 revisions), {bytes} -> {after} bytes\n\
                 deleted 0 session(s), 0 bytes freed; kept 1; trimmed 1 session(s), 2 revisions dropped\n"
            ),
            "{out:#?}"
        );
        assert_eq!(kept_revisions(&store), [3, 4]);
        let history = ws
            .run(&schema, &["sessions", "history", "trim"])
            .assert_success();
        assert!(
            history
                .stdout
                .starts_with("session trim: 2 revisions kept, 3 to 4; the head is revision 4\n"),
            "{history:#?}"
        );
        // The head is shown as it was, except that the rewinds dropped with their
        // revisions are no longer in its history.
        let without_history = |shown: &str| -> String {
            shown
                .lines()
                .filter(|l| !l.starts_with("  history: "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert!(head.contains("  history: rewound 2 times"), "{head}");
        let shown = ws
            .run(&schema, &["sessions", "show", "trim"])
            .assert_success()
            .stdout;
        assert!(!shown.contains("  history: "), "{shown}");
        assert_eq!(without_history(&shown), without_history(&head));
        ws.run(&schema, &["sessions", "show", "trim", "--at", "1"])
            .assert_failure(
                1,
                &["session trim has no revision 1: its store keeps revisions 3 to 4"],
            );
    }

    #[test]
    fn prune_history_max_age_keeps_younger_revisions_and_the_head_of_a_postgres_session() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let (schema, store) = schema_with_a_long_history(&ws, &schemas);
        let head_before = store.load(&id("trim")).expect("load");

        // A cutoff a century ago drops nothing; once all are older than a second, only
        // the head stays.
        let out = ws
            .run(
                &schema,
                &["sessions", "prune", "--history-max-age", "36500d"],
            )
            .assert_success();
        assert!(
            out.stdout
                .contains("trimmed 0 session(s), 0 revisions dropped"),
            "{out:#?}"
        );
        assert_eq!(kept_revisions(&store), [1, 2, 3, 4]);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let out = ws
            .run(&schema, &["sessions", "prune", "--history-max-age", "1s"])
            .assert_success();
        assert!(
            out.stdout
                .starts_with("trimmed trim: revisions 1..3 dropped (3 revisions), "),
            "{out:#?}"
        );
        assert_eq!(kept_revisions(&store), [4]);
        let head_now = store.load(&id("trim")).expect("load");
        assert_eq!(head_now.revision(), head_before.revision());
        assert_eq!(head_now.transcript(), head_before.transcript());

        ws.run(&schema, &["sessions", "prune", "--keep-revisions", "0"])
            .assert_failure(2, &["use 1 to keep only the head"]);
    }

    #[test]
    fn export_from_postgres_import_into_a_folder_and_back_into_postgres() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let one = snapshot("one", "first", 5);
        let two = snapshot("two", "second", 6);
        let (source, _) = schema_with(&schemas, &[one.clone(), two.clone()]);

        let exported = ws
            .run(
                &source,
                &["sessions", "export", "one", "two", "-o", "pg.jsonl"],
            )
            .assert_success();
        assert!(
            exported
                .stderr
                .contains("exported 2 session(s) to pg.jsonl"),
            "{exported:#?}"
        );
        let imported = ws
            .run_on_folder("folder", &["sessions", "import", "pg.jsonl"])
            .assert_success();
        assert!(
            imported.stdout.contains("imported one as one"),
            "{imported:#?}"
        );
        let folder = ws.folder("folder");
        for original in [&one, &two] {
            assert_same_session(
                original,
                &folder.load(original.id()).expect("in the folder"),
            );
        }

        // And back, through stdout and stdin, into a new schema.
        let bundle = ws
            .run_on_folder("folder", &["sessions", "export", "one", "two"])
            .assert_success()
            .stdout;
        let (target, target_store) = schema_with(&schemas, &[]);
        let back = ws.run_with_input(&target, &["sessions", "import", "-"], bundle.as_bytes());
        let back = back.assert_success();
        assert!(
            back.stderr
                .contains(&format!("imported 2 session(s) into {}", named(&target))),
            "{back:#?}"
        );
        for original in [&one, &two] {
            let copy = target_store
                .load(original.id())
                .expect("back in PostgreSQL");
            assert_same_session(original, &copy);
        }

        // The same ids again are refused as a whole; --new-ids renames them.
        ws.run_with_input(&target, &["sessions", "import", "-"], bundle.as_bytes())
            .assert_failure(1, &["already exists", "--new-ids", "nothing was imported"]);
        ws.run_with_input(
            &target,
            &["sessions", "import", "--new-ids", "-"],
            bundle.as_bytes(),
        )
        .assert_success();
        assert_eq!(target_store.list().expect("list").sessions.len(), 4);
    }

    #[test]
    fn run_and_continue_keep_a_conversation_in_postgres() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let (schema, store) = schema_with(&schemas, &[]);

        let first = ws.run(&schema, &["run", "calc 2*(3+4)"]).assert_success();
        assert!(first.stdout.contains("14"), "{first:#?}");
        let again = ws
            .run(&schema, &["run", "--continue", "what did I ask before?"])
            .assert_success();
        assert!(again.stderr.contains("(resumed, 4 messages)"), "{again:#?}");
        let list = store.list().expect("list");
        assert_eq!(list.sessions.len(), 1);
        let saved = store.load(&list.sessions[0].id).expect("load");
        let prompts: Vec<String> = saved
            .transcript()
            .iter()
            .filter(|m| m.role == agent_session::Role::User)
            .map(Message::text)
            .collect();
        assert_eq!(prompts, ["calc 2*(3+4)", "what did I ask before?"]);

        // chat: /sessions lists this store, and the turn is saved in it.
        let id = list.sessions[0].id.to_string();
        let chat = ws
            .run_with_input(
                &schema,
                &["chat", "--resume", &id],
                b"calc 1+1\n/sessions\n/exit\n",
            )
            .assert_success();
        assert!(chat.stdout.contains("1+1 = 2"), "{chat:#?}");
        assert!(chat.stdout.contains(&id), "/sessions lists it: {chat:#?}");
        let chatted = store.load(&list.sessions[0].id).expect("load");
        assert_eq!(chatted.transcript().len(), saved.transcript().len() + 4);

        let (empty, _) = schema_with(&schemas, &[]);
        ws.run(&empty, &["run", "--continue", "hi"]).assert_failure(
            1,
            &[&format!(
                "there is no saved session to resume in {}",
                named(&empty)
            )],
        );
    }

    #[test]
    fn a_schema_never_migrated_is_a_clear_error_until_sessions_migrate_creates_it() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let schema = schemas.name();

        for args in [
            &["sessions", "list"][..],
            &["sessions", "show", "x"],
            &["sessions", "prune", "--max-count", "1"],
            &["run", "hi"],
        ] {
            ws.run(&schema, args).assert_failure(
                1,
                &[
                    &format!("{} has not been set up", named(&schema)),
                    "agent-session sessions migrate",
                ],
            );
        }
        let bundle = agent_session::Bundle::new(vec![snapshot("imported", "i", 1)])
            .and_then(|b| b.to_json())
            .expect("a bundle");
        ws.run_with_input(&schema, &["sessions", "import", "-"], &bundle)
            .assert_failure(1, &["has not been set up", "sessions migrate"]);
        assert!(
            !pg::schema_exists(&schema),
            "nothing creates the schema by itself"
        );

        let migrated = ws.run(&schema, &["sessions", "migrate"]).assert_success();
        assert_eq!(
            migrated.stdout.trim(),
            format!("the PostgreSQL session store {} is ready", named(&schema))
        );
        assert!(pg::schema_exists(&schema));
        ws.run(&schema, &["sessions", "migrate"]).assert_success();
        let listed = ws.run(&schema, &["sessions", "list"]).assert_success();
        assert!(
            listed.stdout.starts_with("no saved sessions in"),
            "{listed:#?}"
        );
        ws.run(&schema, &["run", "hi"]).assert_success();
        assert_eq!(pg::connect(&schema).list().expect("list").sessions.len(), 1);
    }

    #[test]
    fn the_password_in_the_url_is_never_printed() {
        let schemas = Schemas::new();
        // The server's own password if it has one (trust authentication ignores it).
        let password = key_values(&pg::url())
            .into_iter()
            .find(|(key, _)| key == "password")
            .map_or_else(|| "Sw0rdfish-not-shown".to_owned(), |(_, value)| value);
        let ws = Workspace::with_url(store_url(Some(&password)));
        assert!(ws.url.contains(&encoded(&password)));
        let (schema, _) = schema_with(&schemas, &[snapshot("kept", "kept", 7)]);
        let unmigrated = schemas.name();

        let mut printed = String::new();
        for out in [
            ws.run(&schema, &["sessions", "list"]).assert_success(),
            ws.run(&schema, &["sessions", "show", "kept"])
                .assert_success(),
            ws.run(&schema, &["sessions", "export", "kept", "-o", "b.jsonl"])
                .assert_success(),
            ws.run(&schema, &["sessions", "import", "--new-ids", "b.jsonl"])
                .assert_success(),
            ws.run(&schema, &["run", "--continue", "hello"])
                .assert_success(),
            ws.run(&schema, &["sessions", "show", "gone"])
                .assert_failure(1, &[]),
            ws.run(&unmigrated, &["sessions", "list"])
                .assert_failure(1, &["has not been set up"]),
            ws.run(&unmigrated, &["sessions", "migrate"])
                .assert_success(),
            ws.run(&schema, &["--help"]).assert_success(),
        ] {
            printed.push_str(&out.printed());
        }
        // The same password on a server that is not there, and in URLs that do not parse.
        let closed = closed_port();
        let bare = Workspace::with_url(String::new());
        let secret = encoded(&password);
        for url in [
            format!("postgresql://someone:{secret}@127.0.0.1:{closed}/db"),
            format!("postgresql://someone:{secret}@127.0.0.1:notaport/db"),
            format!("postgres://127.0.0.1:{closed}/db?password={secret}&bogus=1"),
            format!("postgres://someone:{secret}@/db"),
        ] {
            let out: Out = bare
                .bare(&["--store", &url, "sessions", "list"])
                .output()
                .expect("the agent starts")
                .into();
            assert_eq!(out.code, Some(1), "{out:#?}");
            printed.push_str(&out.printed());
            let mut via_env = bare.bare(&["sessions", "list"]);
            via_env.env("AGENT_SESSION_STORE", &url);
            let out: Out = via_env.output().expect("the agent starts").into();
            assert_eq!(out.code, Some(1), "{out:#?}");
            printed.push_str(&out.printed());
        }
        assert!(
            printed.contains("postgresql://"),
            "the server is named:\n{printed}"
        );
        for secret in [password.as_str(), &secret] {
            assert!(
                !printed.contains(secret),
                "the password was printed:\n{printed}"
            );
        }
    }

    /// A port on 127.0.0.1 that nothing listens on (it was free a moment ago).
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        listener.local_addr().expect("its address").port()
    }

    #[test]
    fn an_unreachable_server_or_a_malformed_url_is_a_clear_error() {
        let ws = Workspace::new();
        let port = closed_port();
        let unreachable = format!("postgresql://app@127.0.0.1:{port}/sessions");
        let out: Out = ws
            .bare(&["--store", &unreachable, "sessions", "list"])
            .output()
            .expect("the agent starts")
            .into();
        let out = out.assert_failure(
            1,
            &[
                &format!(
                    "the PostgreSQL session store schema agent_session of postgresql://app@127.0.0.1:{port}/sessions cannot be used"
                ),
                "reachable",
                "hint: check the server's host",
            ],
        );
        assert!(out.stdout.is_empty(), "{out:#?}");
        // run and migrate say the same, and nothing is created in the folder.
        for args in [&["run", "hi"][..], &["sessions", "migrate"]] {
            let mut all = vec!["--store", unreachable.as_str()];
            all.extend_from_slice(args);
            let out: Out = ws.bare(&all).output().expect("the agent starts").into();
            out.assert_failure(1, &["reachable"]);
        }
        assert!(!ws.path().join(".agent-session").exists());

        for (url, needle) in [
            ("postgresql://app@127.0.0.1:notaport/db", "malformed"),
            ("postgres://h/db?schema=x", "unknown option `schema`"),
            ("postgresql:///db", "names no server"),
        ] {
            let out: Out = ws
                .bare(&["--store", url, "sessions", "list"])
                .output()
                .expect("the agent starts")
                .into();
            out.assert_failure(1, &["the PostgreSQL URL in --store", needle]);
        }
        let mut via_env = ws.bare(&["sessions", "list"]);
        via_env.env("AGENT_SESSION_STORE", "postgresql://h:99999/db");
        let out: Out = via_env.output().expect("the agent starts").into();
        out.assert_failure(
            1,
            &["the PostgreSQL URL in AGENT_SESSION_STORE is malformed"],
        );

        let bad_schema: Out = ws
            .bare(&[
                "--store",
                &store_url(None),
                "--schema",
                "Not-A-Schema",
                "sessions",
                "list",
            ])
            .output()
            .expect("the agent starts")
            .into();
        bad_schema.assert_failure(1, &["\"Not-A-Schema\" is not a usable schema name"]);

        // --schema means nothing for a folder: a usage error.
        let folder: Out = ws
            .bare(&["--store", "here", "--schema", "x", "sessions", "list"])
            .output()
            .expect("the agent starts")
            .into();
        folder.assert_failure(2, &["--schema applies to a PostgreSQL store", "here"]);
    }

    #[test]
    fn the_environment_can_name_the_store_and_schema_and_the_flags_win() {
        let schemas = Schemas::new();
        let ws = Workspace::new();
        let (by_env, _) = schema_with(&schemas, &[snapshot("in-env", "env", 8)]);
        let (by_flag, _) = schema_with(&schemas, &[snapshot("in-flag", "flag", 9)]);

        let mut command = ws.bare(&["sessions", "list"]);
        command
            .env("AGENT_SESSION_STORE", &ws.url)
            .env("AGENT_SESSION_SCHEMA", &by_env);
        let out: Out = command.output().expect("the agent starts").into();
        assert_eq!(listed_ids(&out.assert_success().stdout), ["in-env"]);

        let mut command = ws.bare(&["--schema", &by_flag, "sessions", "list"]);
        command
            .env("AGENT_SESSION_STORE", &ws.url)
            .env("AGENT_SESSION_SCHEMA", &by_env);
        let out: Out = command.output().expect("the agent starts").into();
        assert_eq!(listed_ids(&out.assert_success().stdout), ["in-flag"]);

        // A folder --store wins over a PostgreSQL AGENT_SESSION_STORE, and
        // AGENT_SESSION_SCHEMA does not apply to it.
        let mut command = ws.bare(&["--store", "folder", "sessions", "list"]);
        command
            .env("AGENT_SESSION_STORE", &ws.url)
            .env("AGENT_SESSION_SCHEMA", &by_env);
        let out: Out = command.output().expect("the agent starts").into();
        assert_eq!(out.assert_success().stdout, "no saved sessions in folder\n");
    }
}
