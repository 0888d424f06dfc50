//! The `agent` example (examples/agent/), run as a process the way a user runs it.
//!
//! Each test works in its own temporary directory, used as the working directory (so the
//! default store `.agent-session/sessions` and the `read_file` workspace are in it). The
//! OpenAI-compatible engine is tested against a stub server on 127.0.0.1 started by the
//! test. Stored sessions are checked through the crate's public API.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use agent_session::{
    FileSessionStore, Role, SessionId, SessionSnapshot, SessionStore, ToolCallStatus, ToolOutput,
};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// Running the example
// ---------------------------------------------------------------------------------------

/// The example binary, built once per test run.
///
/// `cargo test` puts test binaries in `<target>/<profile>/deps/` and examples in
/// `<target>/<profile>/examples/`. `cargo test --test cli` does not build examples, so the
/// example is built here (a no-op when it is up to date, and never a stale binary).
fn agent_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test binaries live in <target>/<profile>/deps");
        let bin = profile_dir.join("examples").join("agent");
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--quiet", "--example", "agent"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        if let Some(target_dir) = profile_dir.parent() {
            cargo.arg("--target-dir").arg(target_dir);
        }
        // Variables cargo sets for this test would look like a changed environment to
        // build scripts (ring's tracks CARGO_MANIFEST_DIR) and force a rebuild.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy().into_owned();
            if name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_MANIFEST_")
                || [
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                ]
                .contains(&name.as_str())
            {
                cargo.env_remove(name);
            }
        }
        let status = cargo.status().expect("cargo runs");
        assert!(
            status.success() || bin.exists(),
            "cargo build --example agent failed"
        );
        assert!(bin.exists(), "{} was not built", bin.display());
        bin
    })
}

/// Environment variables that would change which engine or store the agent uses.
const SCRUBBED_ENV: &[&str] = &[
    "OPENAI_API_KEY",
    "AGENT_SESSION_API_KEY",
    "OPENAI_BASE_URL",
    "AGENT_SESSION_MODEL",
    "OPENAI_MODEL",
    "AGENT_SESSION_PRICES",
    "AGENT_SESSION_STORE",
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// A temporary working directory for one test.
struct Workspace {
    dir: tempfile::TempDir,
}

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
    /// The id from the `session: ID (...)` line printed on start.
    fn session_id(&self) -> String {
        session_id_in(&self.stderr).unwrap_or_else(|| panic!("no session line in {self:#?}"))
    }

    fn assert_success(self) -> Self {
        assert_eq!(self.code, Some(0), "expected success: {self:#?}");
        self
    }

    /// Asserts a failure with exit status `code` whose stderr contains every `needle`.
    fn assert_failure(&self, code: i32, needles: &[&str]) {
        assert_eq!(self.code, Some(code), "unexpected exit status: {self:#?}");
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "stderr lacks {needle:?}: {self:#?}"
            );
        }
    }
}

/// Runs a prepared command with no input.
fn run_command(mut command: Command) -> Out {
    command
        .stdin(Stdio::null())
        .output()
        .expect("the agent starts")
        .into()
}

fn session_id_in(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|line| {
        let rest = line.strip_prefix("session: ")?;
        Some(rest.split_whitespace().next()?.to_owned())
    })
}

impl Workspace {
    fn new() -> Self {
        Workspace {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The default store, relative to the working directory.
    fn store_dir(&self) -> PathBuf {
        self.path().join(".agent-session").join("sessions")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(agent_bin());
        command.args(args).current_dir(self.path());
        for name in SCRUBBED_ENV {
            command.env_remove(name);
        }
        command
    }

    /// Runs the agent with no input.
    fn run(&self, args: &[&str]) -> Out {
        run_command(self.command(args))
    }

    /// Runs the agent with `input` on stdin.
    fn run_with_input(&self, args: &[&str], input: &str) -> Out {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the agent starts");
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("the agent exits").into()
    }

    fn store(&self) -> FileSessionStore {
        FileSessionStore::open(self.store_dir()).expect("the store opens")
    }

    fn load(&self, id: &str) -> SessionSnapshot {
        self.store()
            .load(&SessionId::parse(id).expect("a valid id"))
            .expect("the session loads")
    }

    /// The ids of the stored sessions.
    fn session_ids(&self) -> Vec<String> {
        self.stored_files()
            .keys()
            .filter_map(|name| name.strip_suffix(".json"))
            .map(str::to_owned)
            .collect()
    }

    /// Every file of the stored sessions' state (snapshots and journals; not the lock or the
    /// listing summaries, which are caches) and its bytes.
    fn stored_files(&self) -> BTreeMap<String, Vec<u8>> {
        let Ok(entries) = std::fs::read_dir(self.store_dir()) else {
            return BTreeMap::new();
        };
        entries
            .map(|e| e.expect("a directory entry"))
            // The store writes these exact lowercase suffixes.
            .filter(|e| {
                let path = e.path();
                let extension = path.extension().and_then(|x| x.to_str());
                matches!(extension, Some("json" | "journal"))
            })
            .map(|e| {
                let bytes = std::fs::read(e.path()).expect("read a snapshot");
                (e.file_name().to_string_lossy().into_owned(), bytes)
            })
            .collect()
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        std::fs::write(&path, text).expect("write a file");
        path
    }
}

fn user_prompts(snapshot: &SessionSnapshot) -> Vec<String> {
    snapshot
        .transcript()
        .iter()
        .filter(|m| m.role == Role::User)
        .map(agent_session::Message::text)
        .collect()
}

fn line_index(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
}

// ---------------------------------------------------------------------------------------
// run, --continue, --resume, script, chat
// ---------------------------------------------------------------------------------------

#[test]
fn run_then_continue_in_a_new_process_remembers_the_earlier_turns() {
    let ws = Workspace::new();
    let first = ws.run(&["run", "calc 2*(3+4)"]).assert_success();
    assert_eq!(first.stdout.trim(), "2*(3+4) = 14");
    let id = first.session_id();
    assert!(first.stderr.contains(&format!("session: {id} (new)")));

    let second = ws
        .run(&["run", "--continue", "what did I ask before?"])
        .assert_success();
    assert_eq!(second.session_id(), id, "--continue picks the same session");
    assert!(
        second.stderr.contains("(resumed, 4 messages)"),
        "{second:#?}"
    );
    assert!(
        second.stdout.contains("1. calc 2*(3+4)"),
        "the reply proves the earlier turn was loaded: {second:#?}"
    );

    let snapshot = ws.load(&id);
    assert_eq!(
        user_prompts(&snapshot),
        ["calc 2*(3+4)", "what did I ask before?"]
    );
    assert_eq!(snapshot.transcript().len(), 6);
    assert_eq!(ws.session_ids().len(), 1, "no second session was made");
}

#[test]
fn resume_by_id_continues_that_session_and_not_the_latest() {
    let ws = Workspace::new();
    let a = ws
        .run(&["run", "alpha question"])
        .assert_success()
        .session_id();
    let b = ws
        .run(&["run", "beta question"])
        .assert_success()
        .session_id();
    assert_ne!(a, b);

    let out = ws
        .run(&["run", "--resume", &a, "what did I ask before?"])
        .assert_success();
    assert_eq!(out.session_id(), a);
    assert!(out.stdout.contains("alpha question"), "{out:#?}");
    assert!(!out.stdout.contains("beta question"), "{out:#?}");
    assert_eq!(
        ws.load(&b).transcript().len(),
        2,
        "the other session is untouched"
    );
}

#[test]
fn script_sends_every_non_empty_line_in_order_in_one_session() {
    let ws = Workspace::new();
    ws.write("notes.txt", "remember the milk\n");
    let script = ws.write(
        "prompts.txt",
        "calc 1+1\n\n   \nread notes.txt\nwhat did I ask before?\n",
    );
    let out = ws
        .run(&["script", script.to_str().expect("utf-8 path")])
        .assert_success();
    let id = out.session_id();

    let prompts = line_index(&out.stdout, "> calc 1+1");
    let sum = line_index(&out.stdout, "1+1 = 2");
    let notes = line_index(&out.stdout, "remember the milk");
    let recall = line_index(&out.stdout, "2. read notes.txt");
    assert!(prompts < sum && sum < notes && notes < recall, "{out:#?}");

    let snapshot = ws.load(&id);
    assert_eq!(
        user_prompts(&snapshot),
        ["calc 1+1", "read notes.txt", "what did I ask before?"]
    );
    assert_eq!(
        ws.session_ids().len(),
        1,
        "one session for the whole script"
    );

    // --continue appends a second script to the same session.
    let more = ws.write("more.txt", "calc 2*3\n");
    let again = ws
        .run(&["script", "--continue", more.to_str().expect("utf-8 path")])
        .assert_success();
    assert_eq!(again.session_id(), id);
    assert_eq!(user_prompts(&ws.load(&id)).len(), 4);
}

#[test]
fn chat_reads_prompts_lists_sessions_inline_and_stops_at_exit() {
    let ws = Workspace::new();
    let earlier = ws
        .run(&["run", "an earlier session"])
        .assert_success()
        .session_id();

    let out = ws
        .run_with_input(
            &["chat"],
            "calc 1+2\n\n/sessions\nwhat did I ask before?\n/exit\ncalc 9*9\n",
        )
        .assert_success();
    let id = out.session_id();
    assert!(out.stdout.contains("1+2 = 3"), "{out:#?}");
    // /sessions prints the table, which already has this chat (saved after its first turn).
    let table = line_index(&out.stdout, "UPDATED");
    assert!(line_index(&out.stdout, &id) > table, "{out:#?}");
    assert!(line_index(&out.stdout, &earlier) > table, "{out:#?}");
    assert!(out.stdout.contains("1. calc 1+2"), "{out:#?}");
    assert!(
        !out.stdout.contains("9*9"),
        "nothing after /exit runs: {out:#?}"
    );
    assert_eq!(
        user_prompts(&ws.load(&id)),
        ["calc 1+2", "what did I ask before?"]
    );
}

#[test]
fn chat_ends_at_end_of_input_and_resumes_by_id() {
    let ws = Workspace::new();
    let first = ws
        .run_with_input(&["chat"], "hello there\n")
        .assert_success();
    let id = first.session_id();
    assert!(first.stdout.contains("hello there"), "{first:#?}");

    let second = ws
        .run_with_input(&["chat", "--resume", &id], "what did I ask before?\n")
        .assert_success();
    assert_eq!(second.session_id(), id);
    assert!(second.stdout.contains("1. hello there"), "{second:#?}");
    assert_eq!(ws.load(&id).transcript().len(), 4);

    // A chat that ends before any prompt saves nothing.
    let empty = ws.run_with_input(&["chat"], "").assert_success();
    assert!(empty.stderr.contains("not saved"), "{empty:#?}");
    assert_eq!(ws.session_ids().len(), 1);
}

// ---------------------------------------------------------------------------------------
// sessions list / show / delete
// ---------------------------------------------------------------------------------------

#[test]
fn sessions_list_shows_sessions_newest_first_with_their_details() {
    let ws = Workspace::new();
    let older = ws
        .run(&["run", "first topic"])
        .assert_success()
        .session_id();
    let newer = ws.run(&["run", "calc 5*5"]).assert_success().session_id();

    let list = ws.run(&["sessions", "list"]).assert_success();
    let header = line_index(&list.stdout, "UPDATED");
    let newer_at = line_index(&list.stdout, &newer);
    let older_at = line_index(&list.stdout, &older);
    assert!(header < newer_at && newer_at < older_at, "{list:#?}");
    let newer_line = list.stdout.lines().nth(newer_at).expect("the line");
    assert!(newer_line.contains("calc 5*5"), "title: {newer_line}");
    assert!(newer_line.contains(" 4 "), "message count: {newer_line}");
    assert!(newer_line.contains('$'), "cost: {newer_line}");

    // Continuing the older one makes it the newest.
    ws.run(&["run", "--resume", &older, "more"])
        .assert_success();
    let list = ws.run(&["sessions", "list"]).assert_success();
    assert!(line_index(&list.stdout, &older) < line_index(&list.stdout, &newer));
}

#[test]
fn sessions_list_on_a_missing_store_says_so_without_creating_it() {
    let ws = Workspace::new();
    let out = ws.run(&["sessions", "list"]).assert_success();
    assert!(out.stdout.contains("no saved sessions"), "{out:#?}");
    assert!(!ws.store_dir().exists());
}

#[test]
fn sessions_show_prints_each_tool_call_next_to_its_result() {
    let ws = Workspace::new();
    ws.write("notes.txt", "line one\nline two\n");
    let id = ws.run(&["run", "calc 6*7"]).assert_success().session_id();
    ws.run(&["run", "-c", "read notes.txt"]).assert_success();
    ws.run(&["run", "-c", "calc 1/0"]).assert_success();

    let show = ws.run(&["sessions", "show", &id]).assert_success();
    let text = &show.stdout;
    let lines: Vec<&str> = text.lines().collect();
    for (call, result) in [
        ("calculator {\"expression\":\"6*7\"}", "[result ok] 42"),
        ("read_file {\"path\":\"notes.txt\"}", "[result ok] line one"),
        (
            "calculator {\"expression\":\"1/0\"}",
            "[result error] division by zero",
        ),
    ] {
        let at = line_index(text, call);
        assert!(lines[at].contains("[tool call scripted_"), "{text}");
        assert!(
            lines[at + 1].contains(result),
            "the result follows its call directly: {text}"
        );
    }
    // Results are not printed a second time as separate messages.
    assert_eq!(text.matches("[result ").count(), 3, "{text}");
    assert!(line_index(text, "6*7 = 42") > line_index(text, "[result ok] 42"));
    assert!(text.contains("The calculator tool failed: division by zero"));
}

#[test]
fn sessions_delete_removes_only_that_session() {
    let ws = Workspace::new();
    let keep = ws.run(&["run", "keep me"]).assert_success().session_id();
    let drop = ws.run(&["run", "drop me"]).assert_success().session_id();
    let kept_bytes = ws.stored_files()[&format!("{keep}.json")].clone();

    let out = ws.run(&["sessions", "delete", &drop]).assert_success();
    assert!(out.stdout.contains(&format!("deleted session {drop}")));
    let files = ws.stored_files();
    assert_eq!(files.len(), 1);
    assert_eq!(files[&format!("{keep}.json")], kept_bytes);

    let again = ws.run(&["sessions", "delete", &drop]);
    again.assert_failure(1, &["not found"]);
}

// ---------------------------------------------------------------------------------------
// Bad input: a clear message, a non-zero exit, and nothing stored is changed
// ---------------------------------------------------------------------------------------

/// A workspace with one saved session, and the bytes of its store.
fn workspace_with_a_session() -> (Workspace, String, BTreeMap<String, Vec<u8>>) {
    let ws = Workspace::new();
    let id = ws.run(&["run", "calc 1+1"]).assert_success().session_id();
    let files = ws.stored_files();
    (ws, id, files)
}

#[test]
fn an_unknown_session_id_is_reported_and_changes_nothing() {
    let (ws, _, before) = workspace_with_a_session();
    for args in [
        &["run", "--resume", "no-such-session", "hi"][..],
        &["chat", "--resume", "no-such-session"],
        &["sessions", "show", "no-such-session"],
        &["sessions", "delete", "no-such-session"],
    ] {
        let out = ws.run(args);
        out.assert_failure(1, &["session no-such-session not found", "sessions list"]);
    }
    assert_eq!(ws.stored_files(), before);
}

#[test]
fn a_malformed_session_id_is_rejected_and_changes_nothing() {
    let (ws, _, before) = workspace_with_a_session();
    for bad in ["../escape", "Upper-Case", "a/b", ""] {
        for args in [
            &["run", "--resume", bad, "hi"][..],
            &["sessions", "show", bad],
            &["sessions", "delete", bad],
        ] {
            ws.run(args).assert_failure(1, &["invalid session id"]);
        }
    }
    assert_eq!(ws.stored_files(), before);
}

#[test]
fn resume_and_continue_together_is_a_usage_error() {
    let (ws, id, before) = workspace_with_a_session();
    let script = ws.write("p.txt", "hi\n");
    let script = script.to_str().expect("utf-8 path");
    for args in [
        &["run", "--resume", &id, "--continue", "hi"][..],
        &["chat", "--continue", "--resume", &id],
        &["script", "--resume", &id, "-c", script],
    ] {
        ws.run(args).assert_failure(2, &["cannot be used with"]);
    }
    assert_eq!(ws.stored_files(), before);
}

#[test]
fn continue_with_an_empty_store_is_a_clear_error() {
    let ws = Workspace::new();
    for args in [&["run", "--continue", "hi"][..], &["chat", "--continue"]] {
        ws.run(args)
            .assert_failure(1, &["there is no saved session to resume"]);
    }
    assert!(ws.stored_files().is_empty());
}

#[test]
fn a_corrupted_snapshot_is_reported_while_the_others_still_list_and_resume() {
    let (ws, good, _) = workspace_with_a_session();
    let corrupt = ws.store_dir().join("corrupt-session.json");
    std::fs::write(&corrupt, b"{\"schema_version\": 1, \"id\": \"corr").expect("write");
    let before = ws.stored_files();

    let list = ws.run(&["sessions", "list"]);
    list.assert_failure(
        1,
        &["unreadable", "corrupt-session.json", "could not be decoded"],
    );
    assert!(
        list.stdout.contains(&good),
        "the good session still lists: {list:#?}"
    );
    assert!(!list.stdout.contains("corrupt-session"), "{list:#?}");

    for args in [
        &["run", "--resume", "corrupt-session", "hi"][..],
        &["sessions", "show", "corrupt-session"],
    ] {
        ws.run(args)
            .assert_failure(1, &["corrupt-session.json", "could not be decoded"]);
    }
    assert_eq!(ws.stored_files(), before, "nothing was rewritten");

    // --continue skips the unreadable file (with a warning) and goes on with the good one.
    let out = ws
        .run(&["run", "--continue", "still here?"])
        .assert_success();
    assert_eq!(out.session_id(), good);
    assert!(out.stderr.contains("unreadable"), "{out:#?}");
    assert_eq!(
        ws.stored_files()["corrupt-session.json"],
        before["corrupt-session.json"]
    );

    // The damaged file can be deleted like any session.
    ws.run(&["sessions", "delete", "corrupt-session"])
        .assert_success();
    ws.run(&["sessions", "list"]).assert_success();
}

#[test]
fn a_store_folder_that_cannot_be_written_is_a_clear_error() {
    // Tests may run as root, which ignores permission bits: use a path whose parent is a
    // regular file, which no user can create a folder under.
    let ws = Workspace::new();
    let file = ws.write("not-a-dir", "x");
    let under_file = file.join("sessions");
    let under = under_file.to_str().expect("utf-8 path");
    ws.run(&["--store", under, "run", "hi"]).assert_failure(
        1,
        &["the session store cannot be used", "not-a-dir", "--store"],
    );

    let mut via_env = ws.command(&["run", "hi"]);
    via_env.env("AGENT_SESSION_STORE", &under_file);
    run_command(via_env).assert_failure(1, &["the session store cannot be used", "not-a-dir"]);

    // The store path itself is a regular file.
    let file_path = file.to_str().expect("utf-8 path");
    ws.run(&["run", "--store", file_path, "hi"])
        .assert_failure(1, &["the store path is not a directory"]);
    assert_eq!(
        std::fs::read(&file).expect("read"),
        b"x",
        "the file is untouched"
    );
}

#[test]
fn other_bad_input_gets_a_clear_error() {
    let ws = Workspace::new();
    ws.run(&["run", "  "])
        .assert_failure(1, &["the prompt is empty"]);
    ws.run(&["script", "missing.txt"])
        .assert_failure(1, &["could not read the script missing.txt"]);
    ws.write("blank.txt", "\n  \n");
    ws.run(&["script", "blank.txt"])
        .assert_failure(1, &["has no prompts"]);
    ws.run(&["frobnicate"])
        .assert_failure(2, &["unrecognized subcommand"]);
    assert!(ws.stored_files().is_empty());
}

#[test]
fn the_store_can_be_chosen_by_flag_or_environment_and_the_flag_wins() {
    let ws = Workspace::new();
    let by_env = ws.path().join("env-store");
    let by_flag = ws.path().join("flag-store");

    let mut command = ws.command(&["run", "hello"]);
    command.env("AGENT_SESSION_STORE", &by_env);
    let env_id = run_command(command).assert_success().session_id();
    assert!(by_env.join(format!("{env_id}.json")).is_file());

    let mut command = ws.command(&["--store", by_flag.to_str().expect("utf-8"), "run", "hi"]);
    command.env("AGENT_SESSION_STORE", &by_env);
    let flag_id = run_command(command).assert_success().session_id();
    assert!(by_flag.join(format!("{flag_id}.json")).is_file());
    assert!(!by_env.join(format!("{flag_id}.json")).exists());
    assert!(!ws.store_dir().exists(), "the default store was not used");
}

#[test]
fn the_file_reader_refuses_paths_that_leave_the_workspace() {
    let outer = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(outer.path().join("secret.txt"), "TOP-SECRET").expect("write");
    let ws_dir = outer.path().join("ws");
    std::fs::create_dir(&ws_dir).expect("mkdir");
    std::os::unix::fs::symlink(outer.path().join("secret.txt"), ws_dir.join("link.txt"))
        .expect("symlink");
    std::fs::write(ws_dir.join("inside.txt"), "fine").expect("write");
    let secret = outer.path().join("secret.txt");
    let secret = secret.to_str().expect("utf-8 path");

    let run = |prompt: &str| -> Out {
        let mut command = Command::new(agent_bin());
        command.args(["run", prompt]).current_dir(&ws_dir);
        for name in SCRUBBED_ENV {
            command.env_remove(name);
        }
        command
            .stdin(Stdio::null())
            .output()
            .expect("the agent runs")
            .into()
    };
    for (prompt, reason) in [
        (
            "read ../secret.txt".to_owned(),
            "`..` would leave the workspace",
        ),
        ("read link.txt".to_owned(), "outside the workspace"),
        (format!("read {secret}"), "absolute paths are not allowed"),
    ] {
        let out = run(&prompt).assert_success();
        assert!(
            out.stdout.contains("The read_file tool failed: refused"),
            "{out:#?}"
        );
        assert!(out.stdout.contains(reason), "{out:#?}");
        assert!(!out.stdout.contains("TOP-SECRET"), "{out:#?}");
    }
    let out = run("read inside.txt").assert_success();
    assert!(out.stdout.contains("fine"), "{out:#?}");
}

#[test]
fn help_describes_the_commands_with_examples() {
    let ws = Workspace::new();
    let help = ws.run(&["--help"]).assert_success().stdout;
    for needle in [
        "chat",
        "run",
        "script",
        "sessions",
        "--store",
        "Examples:",
        "--continue",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let run_help = ws.run(&["run", "--help"]).assert_success().stdout;
    assert!(run_help.contains("--resume <ID>") && run_help.contains("--continue"));
    let sessions_help = ws.run(&["sessions", "--help"]).assert_success().stdout;
    for needle in ["list", "show", "delete"] {
        assert!(sessions_help.contains(needle), "{sessions_help}");
    }
}

// ---------------------------------------------------------------------------------------
// Ctrl-C and kill mid-turn
// ---------------------------------------------------------------------------------------

/// Starts `args` with stderr piped, and waits until a stderr line contains `ready`.
/// Returns the child and a receiver for the rest of stderr.
fn spawn_until(ws: &Workspace, args: &[&str], ready: &str) -> (Child, mpsc::Receiver<String>) {
    spawn_with_input_until(ws, args, None, ready)
}

/// As [`spawn_until`], writing `input` (if any) to stdin and keeping stdin open.
fn spawn_with_input_until(
    ws: &Workspace,
    args: &[&str],
    input: Option<&str>,
    ready: &str,
) -> (Child, mpsc::Receiver<String>) {
    let mut child = ws
        .command(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agent starts");
    if let (Some(input), Some(stdin)) = (input, child.stdin.as_mut()) {
        stdin.write_all(input.as_bytes()).expect("write stdin");
        stdin.flush().expect("flush stdin");
    }
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(ready) => return (child, rx),
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                panic!("the agent never printed {ready:?}: {e}");
            }
        }
    }
}

/// Waits for `child` to exit, killing it after `limit`.
fn wait_for(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent did not exit within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_during_a_tool_call_saves_the_turn_with_the_call_marked_interrupted() {
    let (ws, id, _) = workspace_with_a_session();
    let started = Instant::now();
    let (mut child, rx) = spawn_until(&ws, &["run", "--continue", "wait 30"], "[tool] wait");
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let status = wait_for(&mut child, Duration::from_secs(15));
    assert_eq!(status.code(), Some(130), "exit status after Ctrl-C");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the wait was cut short"
    );
    let rest: Vec<String> = rx.iter().collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("interrupted") && l.contains(&id)),
        "{rest:#?}"
    );

    let snapshot = ws.load(&id);
    assert_eq!(user_prompts(&snapshot), ["calc 1+1", "wait 30"]);
    let record = snapshot
        .tool_calls()
        .last()
        .expect("the wait call is recorded");
    assert_eq!(record.tool_name, "wait");
    assert_eq!(record.status, ToolCallStatus::Interrupted);
    let result = snapshot
        .tool_result(record)
        .expect("the record is from this snapshot");
    assert!(result.is_error);
    assert!(matches!(&result.output, ToolOutput::Text(t) if t.starts_with("interrupted")));

    let show = ws.run(&["sessions", "show", &id]).assert_success();
    let call = line_index(&show.stdout, "wait {\"seconds\":30}");
    assert!(
        show.stdout
            .lines()
            .nth(call + 1)
            .is_some_and(|l| l.contains("[result interrupted]")),
        "{show:#?}"
    );
    // The conversation goes on from there.
    let next = ws
        .run(&["run", "-c", "what did I ask before?"])
        .assert_success();
    assert!(next.stdout.contains("2. wait 30"), "{next:#?}");
}

#[test]
fn sigterm_while_chat_waits_for_input_exits_with_the_last_turn_saved() {
    let ws = Workspace::new();
    // The unknown command is answered only after the turn before it completed and was saved.
    let (mut child, rx) = spawn_with_input_until(
        &ws,
        &["chat"],
        Some("calc 1+1\n/nope\n"),
        "unknown command /nope",
    );
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let status = wait_for(&mut child, Duration::from_secs(15));
    assert_eq!(status.code(), Some(130));
    let rest: Vec<String> = rx.iter().collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("interrupted; saved session")),
        "{rest:#?}"
    );
    let id = ws
        .session_ids()
        .into_iter()
        .next()
        .expect("one saved session");
    let snapshot = ws.load(&id);
    assert_eq!(snapshot.transcript().len(), 4, "the completed turn, whole");
    assert!(snapshot
        .tool_calls()
        .iter()
        .all(|r| r.status == ToolCallStatus::Ok));
}

#[test]
fn a_process_killed_mid_turn_keeps_its_steps_and_reports_the_running_tool_on_resume() {
    let (ws, id, _) = workspace_with_a_session();
    let (mut child, _rx) = spawn_until(&ws, &["run", "--continue", "wait 30"], "[tool] wait");
    child.kill().expect("SIGKILL");
    let status = wait_for(&mut child, Duration::from_secs(15));
    assert_eq!(status.code(), None, "killed by a signal");

    // The step was saved before its tool ran: the prompt is kept, and the running call is
    // closed as interrupted rather than lost or left dangling.
    let snapshot = ws.load(&id);
    assert_eq!(user_prompts(&snapshot), ["calc 1+1", "wait 30"]);
    let interrupted: Vec<_> = snapshot
        .tool_calls()
        .iter()
        .filter(|r| r.status == ToolCallStatus::Interrupted)
        .collect();
    assert_eq!(interrupted.len(), 1, "{:?}", snapshot.tool_calls());
    let result = snapshot
        .tool_result(interrupted[0])
        .expect("the record points at its result");
    assert_eq!(
        result.output.as_text(),
        Some(agent_session::INTERRUPTED_OUTPUT)
    );

    // Resuming says so, and does not run the tool again.
    let out = ws.run(&["run", "-c", "calc 2+2"]).assert_success();
    assert!(
        out.stderr.contains("interrupted and not run again: wait"),
        "{out:#?}"
    );
    assert!(!out.stderr.contains("[tool] wait"), "{out:#?}");
    assert_eq!(
        user_prompts(&ws.load(&id)),
        ["calc 1+1", "wait 30", "calc 2+2"]
    );
}

// ---------------------------------------------------------------------------------------
// The OpenAI-compatible engine against a local stub server
// ---------------------------------------------------------------------------------------

/// One request the stub received.
#[derive(Debug)]
struct Received {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A stub Chat Completions server on 127.0.0.1. It answers up to `responders.len()`
/// requests, the n-th with `responders[n]` (a function of the request body returning a
/// status and a JSON body), then stops; it also stops after 20 s without a request.
struct Stub {
    base_url: String,
    handle: JoinHandle<Vec<Received>>,
}

type Responder = Box<dyn Fn(&Value) -> (u16, Value) + Send>;

impl Stub {
    fn start(responders: Vec<Responder>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
        let base_url = format!("http://{}/v1", listener.local_addr().expect("address"));
        listener.set_nonblocking(true).expect("non-blocking accept");
        let handle = thread::spawn(move || {
            let mut received = Vec::new();
            let mut deadline = Instant::now() + Duration::from_secs(20);
            while received.len() < responders.len() && Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let request = serve(stream, &responders[received.len()]);
                        received.push(request);
                        deadline = Instant::now() + Duration::from_secs(20);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => panic!("accept failed: {e}"),
                }
            }
            received
        });
        Stub { base_url, handle }
    }

    fn requests(self) -> Vec<Received> {
        self.handle.join().expect("the stub server thread")
    }
}

/// Reads one HTTP/1.1 request (with a Content-Length body) and answers it.
fn serve(mut stream: TcpStream, respond: &Responder) -> Received {
    stream.set_nonblocking(false).expect("blocking stream");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut request_line = String::new();
    reader.read_line(&mut request_line).expect("request line");
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("a header");
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().expect("a numeric Content-Length"))
        .expect("the client sends a Content-Length");
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("request body");
    let body: Value = serde_json::from_slice(&body).expect("the request body is JSON");
    let (status, reply) = respond(&body);
    let reply = reply.to_string();
    let response = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        if status == 200 { "OK" } else { "Error" },
        reply.len()
    );
    stream
        .write_all(response.as_bytes())
        .expect("write response");
    let _ = stream.flush();
    Received {
        request_line: request_line.trim_end().to_owned(),
        headers,
        body,
    }
}

fn completion(message: &Value, prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "model": "stub-model-2025",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens
        }
    })
}

/// The assistant message with a tool call that the stub sends first.
fn tool_call_message() -> Value {
    json!({
        "role": "assistant",
        "content": null,
        "refusal": null,
        "tool_calls": [{
            "id": "call_abc123",
            "type": "function",
            "function": {"name": "calculator", "arguments": "{\"expression\": \"6*7\"}"}
        }]
    })
}

/// The HTTP engine's command, pointed at `stub`.
fn http_command(ws: &Workspace, stub: &Stub, args: &[&str]) -> Command {
    let mut command = ws.command(args);
    command
        .env("OPENAI_API_KEY", "test-key")
        .env("OPENAI_BASE_URL", &stub.base_url)
        .env("AGENT_SESSION_MODEL", "stub-model")
        .env("AGENT_SESSION_PRICES", "1,2");
    command
}

/// True if `messages` ends with the tool result for `call_abc123` holding "42".
fn has_tool_result(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|messages| {
        messages.iter().any(|m| {
            m["role"] == "tool" && m["tool_call_id"] == "call_abc123" && m["content"] == "42"
        })
    })
}

/// The first request of a turn: endpoint, key, model, system prompt first, the prompt as
/// a plain string, and the tools.
fn assert_first_request(first: &Received) {
    assert_eq!(first.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(first.header("authorization"), Some("Bearer test-key"));
    assert_eq!(first.body["model"], "stub-model");
    let messages = first.body["messages"].as_array().expect("messages");
    assert_eq!(
        messages[0]["role"], "system",
        "the system prompt goes first"
    );
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "what is six times seven?"})
    );
    let tools: Vec<&str> = first.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("a name"))
        .collect();
    assert!(tools.contains(&"calculator") && tools.contains(&"read_file"));
    assert_eq!(first.body["tools"][0]["type"], "function");
}

#[test]
fn http_engine_round_trips_a_tool_call_and_continues_in_a_new_process() {
    let ws = Workspace::new();
    let stub = Stub::start(vec![
        Box::new(|_| (200, completion(&tool_call_message(), 50, 10))),
        Box::new(|body| {
            if has_tool_result(body) {
                let answer = json!({"role": "assistant", "content": "6*7 is 42."});
                (200, completion(&answer, 70, 8))
            } else {
                (
                    400,
                    json!({"error": {"message": "expected the tool result for call_abc123"}}),
                )
            }
        }),
    ]);
    let out = run_command(http_command(
        &ws,
        &stub,
        &["run", "what is six times seven?"],
    ))
    .assert_success();
    assert_eq!(out.stdout.trim(), "6*7 is 42.");
    let id = out.session_id();
    let requests = stub.requests();
    assert_eq!(requests.len(), 2);

    assert_first_request(&requests[0]);

    let second = &requests[1];
    let messages = second.body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[2],
        tool_call_message(),
        "the model's message is sent back as received"
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_abc123", "content": "42"})
    );

    let snapshot = ws.load(&id);
    assert_eq!(snapshot.transcript().len(), 4);
    assert_eq!(snapshot.options().model, "stub-model");
    let usage: Vec<(u64, u64, &str)> = snapshot
        .usage()
        .iter()
        .map(|u| (u.input_tokens, u.output_tokens, u.model.as_str()))
        .collect();
    assert_eq!(
        usage,
        [(50, 10, "stub-model-2025"), (70, 8, "stub-model-2025")]
    );
    // $1 and $2 per million tokens: 120 * 1 + 18 * 2 = 156 micro-dollars.
    assert_eq!(snapshot.totals().cost.as_nano_usd(), 156_000);
    let record = &snapshot.tool_calls()[0];
    assert_eq!(
        (record.call_id.as_str(), record.status),
        ("call_abc123", ToolCallStatus::Ok)
    );
    let show = ws.run(&["sessions", "show", &id]).assert_success();
    let call = line_index(&show.stdout, "[tool call call_abc123] calculator");
    assert!(show
        .stdout
        .lines()
        .nth(call + 1)
        .is_some_and(|l| l.contains("[result ok] 42")));

    // A new process sends the whole stored conversation, byte for byte, plus the new prompt.
    let stub = Stub::start(vec![Box::new(|_| {
        let answer = json!({"role": "assistant", "content": "You asked about 6*7."});
        (200, completion(&answer, 90, 6))
    })]);
    let out = run_command(http_command(
        &ws,
        &stub,
        &["run", "--continue", "what did I ask?"],
    ))
    .assert_success();
    assert_eq!(out.session_id(), id);
    assert_eq!(out.stdout.trim(), "You asked about 6*7.");
    let requests = stub.requests();
    let messages = requests[0].body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 6);
    assert_eq!(messages[2], tool_call_message());
    assert_eq!(
        messages[4],
        json!({"role": "assistant", "content": "6*7 is 42."})
    );
    assert_eq!(
        messages[5],
        json!({"role": "user", "content": "what did I ask?"})
    );
}

#[test]
fn http_error_is_reported_with_its_status_and_the_completed_steps_are_saved() {
    let ws = Workspace::new();
    let stub = Stub::start(vec![
        Box::new(|_| (200, completion(&tool_call_message(), 50, 10))),
        Box::new(|_| (500, json!({"error": {"message": "upstream exploded"}}))),
    ]);
    let out = run_command(http_command(
        &ws,
        &stub,
        &["run", "what is six times seven?"],
    ));
    out.assert_failure(1, &["HTTP 500", "upstream exploded", "--resume"]);
    assert!(out.stdout.is_empty(), "no reply is printed: {out:#?}");
    let id = out.session_id();
    assert_eq!(stub.requests().len(), 2);

    // Saved up to the last completed step: the prompt, the tool call and its result.
    let snapshot = ws.load(&id);
    assert_eq!(snapshot.transcript().len(), 3);
    assert_eq!(snapshot.tool_calls()[0].status, ToolCallStatus::Ok);
    assert_eq!(snapshot.usage().len(), 1);

    // An error status on the very first request still leaves a loadable session.
    let stub = Stub::start(vec![Box::new(|_| {
        (503, json!({"error": {"message": "overloaded, try later"}}))
    })]);
    let out = run_command(http_command(&ws, &stub, &["run", "--continue", "again?"]));
    out.assert_failure(1, &["HTTP 503", "overloaded, try later"]);
    assert_eq!(stub.requests().len(), 1);
    let snapshot = ws.load(&id);
    assert_eq!(
        user_prompts(&snapshot),
        ["what is six times seven?", "again?"]
    );
}

#[test]
fn the_openai_engine_without_a_key_is_a_clear_error() {
    let ws = Workspace::new();
    ws.run(&["--engine", "openai", "run", "hi"])
        .assert_failure(1, &["OPENAI_API_KEY"]);
    assert!(ws.stored_files().is_empty());
}
