//! The `agent-session` command (cli/src/), run as a process the way a user runs it.
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
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

#[path = "common/process.rs"]
mod process;

use agent_session::{
    ContentBlock, FileSessionStore, Message, Role, SessionId, SessionSnapshot, SessionStore,
    SqliteSessionStore, ToolCall, ToolCallStatus, ToolOutput, ToolResult,
};
use serde_json::{json, Value};

use process::SCRUBBED_ENV;

// ---------------------------------------------------------------------------------------
// Running the command
// ---------------------------------------------------------------------------------------

/// The `agent-session` binary, which cargo builds before it runs this test.
fn agent_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_agent-session"))
}

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
        .map(Message::text)
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
        &["sessions", "fork", "no-such-session"],
        &["sessions", "rewind", "no-such-session"],
        &["sessions", "rewind", "no-such-session", "--to-message", "0"],
        &["sessions", "archive", "no-such-session"],
        &["sessions", "unarchive", "no-such-session"],
        &["sessions", "export", "no-such-session"],
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
            &["sessions", "fork", bad],
            &["sessions", "rewind", bad],
            &["sessions", "archive", bad],
            &["sessions", "unarchive", bad],
            &["sessions", "export", bad],
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
        out.stderr
            .contains("(they may have run), and they were not run again: wait"),
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

// ---------------------------------------------------------------------------------------
// Session lifecycle: fork, archive, prune, export and import
// ---------------------------------------------------------------------------------------

impl Workspace {
    /// The stored files (snapshot and journal) of session `id` only.
    fn files_of(&self, id: &str) -> BTreeMap<String, Vec<u8>> {
        self.stored_files()
            .into_iter()
            .filter(|(name, _)| name.strip_prefix(id).is_some_and(|r| r.starts_with('.')))
            .collect()
    }

    /// The bytes session `id` takes on disk, as the prune reports them (snapshot + journal).
    fn stored_bytes(&self, id: &str) -> u64 {
        self.files_of(id).values().map(|b| b.len() as u64).sum()
    }

    /// Runs the agent on the store `dir` (by `--store`).
    fn run_on(&self, dir: &Path, args: &[&str]) -> Out {
        let mut all = vec!["--store", dir.to_str().expect("utf-8 path")];
        all.extend_from_slice(args);
        self.run(&all)
    }

    /// The ids shown by `sessions list` with `flags`, in order.
    fn listed(&self, flags: &[&str]) -> Vec<String> {
        let mut args = vec!["sessions", "list"];
        args.extend_from_slice(flags);
        let out = self.run(&args).assert_success();
        listed_ids(&out.stdout)
    }
}

/// The ids of a `sessions list` table, in order (nothing for an empty listing).
fn listed_ids(table: &str) -> Vec<String> {
    table
        .lines()
        .skip_while(|l| !l.starts_with("ID "))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The line of `table` that lists session `id`.
fn listed_line<'t>(table: &'t str, id: &str) -> &'t str {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .unwrap_or_else(|| panic!("{id} is not listed in:\n{table}"))
}

/// A workspace with one session of two turns, each with a calculator call (8 messages).
fn workspace_with_two_turns() -> (Workspace, String) {
    let ws = Workspace::new();
    let id = ws.run(&["run", "calc 1+1"]).assert_success().session_id();
    ws.run(&["run", "-c", "calc 2*3"]).assert_success();
    assert_eq!(ws.load(&id).transcript().len(), 8);
    (ws, id)
}

fn file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[test]
fn fork_at_a_message_and_at_a_turn_copies_that_history_and_leaves_the_parent_unchanged() {
    let (ws, parent) = workspace_with_two_turns();
    let parent_files = ws.files_of(&parent);
    let parent_snapshot = ws.load(&parent);

    // --as names the fork; stdout is its id alone, for scripts.
    let early = ws
        .run(&[
            "sessions",
            "fork",
            &parent,
            "--at",
            "message:1",
            "--as",
            "early",
        ])
        .assert_success();
    assert_eq!(early.stdout, "early\n", "{early:#?}");
    assert!(
        early
            .stderr
            .contains(&format!("forked {parent} (revision 6) at message 1")),
        "{early:#?}"
    );

    // Without --as the id is generated; turn:1 keeps the first turn whole (4 messages).
    let by_turn = ws
        .run(&["sessions", "fork", &parent, "--at", "turn:1"])
        .assert_success();
    assert_eq!(by_turn.stdout.lines().count(), 1, "{by_turn:#?}");
    let turn_id = by_turn.stdout.trim().to_owned();
    SessionId::parse(&turn_id).expect("a valid generated id");
    assert!(
        by_turn.stderr.contains("at message 4 (turn:1)"),
        "{by_turn:#?}"
    );

    // The default point is the end: everything.
    let whole = ws
        .run(&["sessions", "fork", &parent])
        .assert_success()
        .stdout
        .trim()
        .to_owned();

    for (id, kept) in [("early", 1), (turn_id.as_str(), 4), (whole.as_str(), 8)] {
        let fork = ws.load(id);
        assert_eq!(fork.transcript(), &parent_snapshot.transcript()[..kept]);
        let lineage = fork.lineage().expect("a fork records its parent");
        assert_eq!(lineage.parent.as_str(), parent);
        assert_eq!(lineage.fork_point, kept);
        assert_eq!(lineage.parent_revision, parent_snapshot.revision());
    }
    assert_eq!(
        ws.files_of(&parent),
        parent_files,
        "forking never writes the parent"
    );

    // The listing shows each fork's parent and fork point; the parent has none.
    let list = ws.run(&["sessions", "list"]).assert_success().stdout;
    assert!(listed_line(&list, "early").contains(&format!("[fork of {parent}@1]")));
    assert!(listed_line(&list, &turn_id).contains(&format!("[fork of {parent}@4]")));
    assert!(!listed_line(&list, &parent).contains("fork of"), "{list}");
    let show = ws.run(&["sessions", "show", &turn_id]).assert_success();
    assert!(
        show.stdout
            .contains(&format!("forked from {parent} at message 4")),
        "{show:#?}"
    );

    // The fork resumes with its own history only, and the parent stays as it was.
    let resumed = ws
        .run(&["run", "--resume", &turn_id, "what did I ask before?"])
        .assert_success();
    assert!(resumed.stdout.contains("1. calc 1+1"), "{resumed:#?}");
    assert!(!resumed.stdout.contains("calc 2*3"), "{resumed:#?}");
    assert_eq!(ws.files_of(&parent), parent_files);
}

#[test]
fn fork_refuses_a_cut_between_a_tool_call_and_its_result_and_other_bad_points() {
    let (ws, id, before) = workspace_with_a_session();
    // calc 1+1: [0] prompt, [1] the calculator call, [2] its result, [3] the answer.
    ws.run(&["sessions", "fork", &id, "--at", "message:2"])
        .assert_failure(
            1,
            &[
                "cannot fork session",
                "tool call \"scripted_1\" is made in message 1 and answered in message 2",
                "fork at message 1 or 3 instead",
            ],
        );
    ws.run(&["sessions", "fork", &id, "--at", "message:9"])
        .assert_failure(1, &["it has only 4 messages"]);
    ws.run(&["sessions", "fork", &id, "--at", "turn:2"])
        .assert_failure(1, &["it has only 1 turns"]);
    ws.run(&["sessions", "fork", &id, "--at", "sideways"])
        .assert_failure(2, &["not a fork point", "message:N"]);
    ws.run(&["sessions", "fork", &id, "--as", &id])
        .assert_failure(1, &["needs an id of its own"]);
    ws.run(&["sessions", "fork", &id, "--as", "Bad/Id"])
        .assert_failure(1, &["invalid session id"]);
    assert_eq!(ws.stored_files(), before, "a refused fork writes nothing");

    // A taken --as id is refused and the session under it is untouched.
    let other = ws.run(&["run", "other"]).assert_success().session_id();
    let before = ws.stored_files();
    ws.run(&["sessions", "fork", &id, "--as", &other])
        .assert_failure(1, &["already exists", "choose another id", "hint: --as ID"]);
    assert_eq!(ws.stored_files(), before);
}

// ---------------------------------------------------------------------------------------
// sessions rewind and /undo
// ---------------------------------------------------------------------------------------

#[test]
fn rewind_drops_the_last_turn_and_show_prints_the_shorter_transcript() {
    let (ws, id) = workspace_with_two_turns();
    let before = ws.load(&id);

    let out = ws
        .run(&["sessions", "rewind", &id, "--turns", "1"])
        .assert_success();
    assert_eq!(
        out.stdout,
        format!(
            "rewound session {id} (turns:1), now revision 7: dropped 4 messages (1 turn: \"calc 2*3\"), 4 messages remain\n"
        ),
        "{out:#?}"
    );
    assert!(
        out.stderr
            .contains("usage of the dropped messages stays counted"),
        "{out:#?}"
    );
    let rewound = ws.load(&id);
    assert_eq!(rewound.transcript(), &before.transcript()[..4]);
    assert_eq!(rewound.tool_calls(), &before.tool_calls()[..1]);
    assert_eq!(rewound.usage(), before.usage(), "usage stays counted");

    let show = ws.run(&["sessions", "show", &id]).assert_success().stdout;
    assert!(show.contains("revision 7"), "{show}");
    assert!(show.contains("4 messages, 4 completions"), "{show}");
    assert!(show.contains("user>      calc 1+1"), "{show}");
    assert!(show.contains("[result ok] 2"), "{show}");
    assert!(
        !show.contains("2*3"),
        "the dropped turn is not shown: {show}"
    );

    // The session goes on from the rewound transcript; without an option the rewind
    // drops the last turn again.
    let resumed = ws
        .run(&["run", "--resume", &id, "what did I ask before?"])
        .assert_success();
    assert!(resumed.stdout.contains("1. calc 1+1"), "{resumed:#?}");
    assert!(!resumed.stdout.contains("2*3"), "{resumed:#?}");
    let again = ws.run(&["sessions", "rewind", &id]).assert_success();
    assert!(
        again.stdout.contains(
            "(turns:1), now revision 9: dropped 2 messages (1 turn: \"what did I ask before?\"), 4 messages remain"
        ),
        "{again:#?}"
    );
    assert_eq!(ws.load(&id).transcript(), &before.transcript()[..4]);
}

#[test]
fn rewind_to_a_message_keeps_that_many_and_the_end_changes_nothing() {
    let (ws, id) = workspace_with_two_turns();
    let before = ws.load(&id);

    // Keeping the whole transcript writes nothing.
    let files = ws.stored_files();
    let same = ws
        .run(&["sessions", "rewind", &id, "--to-message", "8"])
        .assert_success();
    assert!(
        same.stdout.contains(
            "already ends at message 8 (message:8): nothing to rewind; revision 6 is unchanged"
        ),
        "{same:#?}"
    );
    assert_eq!(ws.stored_files(), files);

    let out = ws
        .run(&["sessions", "rewind", &id, "--to-message", "3"])
        .assert_success();
    assert!(
        out.stdout.contains(&format!(
            "rewound session {id} (message:3), now revision 7: dropped 5 messages (1 turn: \"calc 2*3\"), 3 messages remain"
        )),
        "{out:#?}"
    );
    assert_eq!(ws.load(&id).transcript(), &before.transcript()[..3]);

    let empty = ws
        .run(&["sessions", "rewind", &id, "--to-message", "0"])
        .assert_success();
    assert!(
        empty
            .stdout
            .contains("dropped 3 messages (1 turn: \"calc 1+1\"), 0 messages remain"),
        "{empty:#?}"
    );
    let emptied = ws.load(&id);
    assert!(emptied.transcript().is_empty());
    assert_eq!(emptied.usage(), before.usage());

    // One of the two options; a rewind of no turns is refused before anything is read.
    let files = ws.stored_files();
    ws.run(&[
        "sessions",
        "rewind",
        &id,
        "--turns",
        "1",
        "--to-message",
        "2",
    ])
    .assert_failure(2, &["cannot be used with"]);
    ws.run(&["sessions", "rewind", &id, "--turns", "0"])
        .assert_failure(2, &["0 turns would drop nothing"]);
    ws.run(&["sessions", "rewind", &id, "--to-message", "many"])
        .assert_failure(2, &["invalid value 'many' for '--to-message <I>'"]);
    assert_eq!(ws.stored_files(), files);
}

#[test]
fn rewind_refuses_a_point_inside_a_tool_call_naming_the_valid_ones_and_writes_nothing() {
    let ws = Workspace::new();
    // prompt, call, result, answer, prompt, answer
    let call = ToolCall::new("call_1", "calculator", json!({"expression": "6*7"}));
    let snapshot = SessionSnapshot::builder(SessionId::parse("tooly").expect("id"), "scripted")
        .transcript(vec![
            Message::user("what is 6*7?"),
            Message::assistant(vec![ContentBlock::tool_call(call)]),
            Message::tool_result(ToolResult::new("call_1", "42")),
            Message::assistant(vec![ContentBlock::text("6*7 = 42")]),
            Message::user("thanks"),
            Message::assistant(vec![ContentBlock::text("you are welcome")]),
        ])
        .build()
        .expect("a valid snapshot");
    ws.store()
        .save(&snapshot)
        .expect("save through the library");
    let before = ws.stored_files();

    let out = ws.run(&["sessions", "rewind", "tooly", "--to-message", "2"]);
    out.assert_failure(
        1,
        &[
            "error: invalid argument: cannot rewind session tooly to message 2",
            "tool call \"call_1\" is made in message 1 and answered in message 2",
            "rewind to message 1 or 3 instead",
            "\nnothing was rewound",
        ],
    );
    assert!(out.stdout.is_empty(), "{out:#?}");
    ws.run(&["sessions", "rewind", "tooly", "--to-message", "7"])
        .assert_failure(1, &["it has only 6 messages", "nothing was rewound"]);
    ws.run(&["sessions", "rewind", "tooly", "--turns", "3"])
        .assert_failure(
            1,
            &["by 3 turns: it has only 2 turns", "nothing was rewound"],
        );
    assert_eq!(ws.stored_files(), before, "a refused rewind writes nothing");
    assert_eq!(ws.load("tooly").revision(), snapshot.revision().next());

    // The points it names are accepted.
    ws.run(&["sessions", "rewind", "tooly", "--to-message", "3"])
        .assert_success();
    assert_eq!(ws.load("tooly").transcript(), &snapshot.transcript()[..3]);
}

#[test]
fn rewind_of_a_missing_session_or_store_is_an_error_and_creates_nothing() {
    let ws = Workspace::new();
    ws.run(&["sessions", "rewind", "nobody"]).assert_failure(
        1,
        &[
            "error: session nobody not found",
            "hint: `agent-session sessions list` shows the saved sessions",
        ],
    );
    assert!(!ws.store_dir().exists(), "no store folder was created");

    let (ws, _, before) = workspace_with_a_session();
    ws.run(&["sessions", "rewind", "nobody", "--turns", "2"])
        .assert_failure(1, &["session nobody not found"]);
    assert_eq!(ws.stored_files(), before);
}

#[test]
fn undo_in_chat_drops_the_last_turn_and_the_chat_goes_on_from_there() {
    let ws = Workspace::new();
    let out = ws
        .run_with_input(
            &["chat"],
            "calc 1+1\ncalc 2*3\n/undo\nwhat did I ask before?\n/undo x\n/undo 0\n/undo 9\ncalc 3+3\n/undo 2\n/help\n",
        )
        .assert_success();
    let id = out.session_id();
    let undone = line_index(
        &out.stdout,
        "undone: dropped 4 messages (1 turn: \"calc 2*3\"), 4 messages remain; saved as revision ",
    );
    let recalled = line_index(&out.stdout, "Before this, you asked:");
    assert!(undone < recalled, "{out:#?}");
    assert!(out.stdout.contains("1. calc 1+1"), "{out:#?}");
    assert!(
        !out.stdout.contains("2. calc 2*3"),
        "the model never sees the undone turn: {out:#?}"
    );
    // Bad arguments and too many turns are said on stderr, and the chat goes on.
    assert_eq!(
        out.stderr.matches("usage: /undo [N]").count(),
        2,
        "{out:#?}"
    );
    assert!(
        out.stderr.contains(&format!(
            "error: invalid argument: cannot rewind session {id} by 9 turns: it has only 2 turns\nhint: /undo 2 drops them all\nnothing was undone"
        )),
        "{out:#?}"
    );
    assert!(out.stdout.contains("3+3 = 6"), "{out:#?}");
    assert!(
        out.stdout.contains("undone: dropped 6 messages (2 turns: \"what did I ask before?\", \"calc 3+3\"), 4 messages remain"),
        "{out:#?}"
    );
    assert!(
        out.stdout.contains("/undo [N] drops the last N turns"),
        "{out:#?}"
    );
    assert!(
        out.stderr
            .contains(&format!("saved session {id} (4 messages)")),
        "{out:#?}"
    );

    let stored = ws.load(&id);
    assert_eq!(user_prompts(&stored), ["calc 1+1"]);
    assert_eq!(stored.tool_calls().len(), 1);
    // 2 + 2 + 1 + 2: the undone turns' completions too.
    assert_eq!(stored.usage().len(), 7, "every completion stays counted");
}

#[test]
fn undo_with_nothing_to_undo_says_so_and_the_chat_goes_on() {
    let ws = Workspace::new();
    let out = ws
        .run_with_input(&["chat"], "/undo\n/undo 3\nhello there\n")
        .assert_success();
    let id = out.session_id();
    assert_eq!(
        out.stdout
            .matches(&format!("nothing to undo: session {id} has no turns"))
            .count(),
        2,
        "{out:#?}"
    );
    assert!(out.stdout.contains("hello there"), "{out:#?}");
    assert_eq!(ws.load(&id).transcript().len(), 2);

    // A resumed session undone to nothing has nothing left to undo.
    let again = ws
        .run_with_input(&["chat", "--resume", &id], "/undo\n/undo\n")
        .assert_success();
    assert!(
        again
            .stdout
            .contains("undone: dropped 2 messages (1 turn: \"hello there\"), 0 messages remain"),
        "{again:#?}"
    );
    assert!(
        again.stdout.contains("nothing to undo: session"),
        "{again:#?}"
    );
    assert!(ws.load(&id).transcript().is_empty());
}

#[test]
fn archive_hides_a_session_from_list_and_continue_until_unarchived() {
    let ws = Workspace::new();
    let active = ws
        .run(&["run", "alpha topic"])
        .assert_success()
        .session_id();
    let archived = ws.run(&["run", "beta topic"]).assert_success().session_id();
    let out = ws.run(&["sessions", "archive", &archived]).assert_success();
    assert_eq!(out.stdout, format!("archived session {archived}\n"));

    assert_eq!(ws.listed(&[]), [active.as_str()]);
    assert_eq!(ws.listed(&["--archived"]), [archived.as_str()]);
    assert_eq!(ws.listed(&["--all"]), [archived.as_str(), active.as_str()]);
    let all = ws
        .run(&["sessions", "list", "--all"])
        .assert_success()
        .stdout;
    assert!(listed_line(&all, &archived).contains("[archived]"), "{all}");
    assert!(!listed_line(&all, &active).contains("[archived]"), "{all}");
    ws.run(&["sessions", "list", "--all", "--archived"])
        .assert_failure(2, &["cannot be used with"]);

    // --continue skips it, although it is the most recent session...
    let cont = ws
        .run(&["run", "--continue", "what did I ask before?"])
        .assert_success();
    assert_eq!(cont.session_id(), active);
    // ...and --resume still continues it, which leaves it archived.
    let resumed = ws
        .run(&["run", "--resume", &archived, "what did I ask before?"])
        .assert_success();
    assert_eq!(resumed.session_id(), archived);
    assert!(resumed.stdout.contains("1. beta topic"), "{resumed:#?}");
    assert_eq!(ws.load(&archived).transcript().len(), 4);
    assert_eq!(ws.listed(&[]), [active.as_str()]);
    assert_eq!(ws.listed(&["--archived"]), [archived.as_str()]);

    // Archiving twice is harmless; unarchiving brings it back.
    ws.run(&["sessions", "archive", &archived]).assert_success();
    let out = ws
        .run(&["sessions", "unarchive", &archived])
        .assert_success();
    assert_eq!(out.stdout, format!("unarchived session {archived}\n"));
    assert_eq!(ws.listed(&[]), [archived.as_str(), active.as_str()]);
    let none = ws.run(&["sessions", "list", "--archived"]).assert_success();
    assert!(none.stdout.contains("no archived sessions"), "{none:#?}");
    let list = ws.run(&["sessions", "list"]).assert_success().stdout;
    assert!(!list.contains("[archived]"), "{list}");
}

#[test]
fn list_pages_through_archived_sessions_with_all() {
    let ws = Workspace::new();
    let ids: Vec<String> = ["one", "two", "three"]
        .iter()
        .map(|p| ws.run(&["run", p]).assert_success().session_id())
        .collect();
    ws.run(&["sessions", "archive", &ids[1]]).assert_success();

    let first = ws
        .run(&["sessions", "list", "--all", "--limit", "2"])
        .assert_success();
    assert_eq!(
        listed_ids(&first.stdout),
        [ids[2].as_str(), ids[1].as_str()]
    );
    let more = first
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("more: agent-session "))
        .unwrap_or_else(|| panic!("no next-page command: {first:#?}"));
    assert!(
        more.contains("--all"),
        "the next page keeps the scope: {more}"
    );
    let args: Vec<&str> = more.split_whitespace().collect();
    let second = ws.run(&args).assert_success();
    assert_eq!(listed_ids(&second.stdout), [ids[0].as_str()]);
    assert!(!second.stderr.contains("more:"), "{second:#?}");
}

#[test]
fn prune_dry_run_lists_what_would_go_and_deletes_nothing() {
    let ws = Workspace::new();
    let ids: Vec<String> = ["old", "middle", "new"]
        .iter()
        .map(|p| ws.run(&["run", p]).assert_success().session_id())
        .collect();
    let before = ws.stored_files();
    let out = ws
        .run(&["sessions", "prune", "--max-count", "1", "--dry-run"])
        .assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:#?}");
    // Oldest first, each with its reason, size and last update.
    for (line, id) in lines.iter().zip(&ids[..2]) {
        assert!(
            line.starts_with(&format!("would delete {id}: beyond the maximum count, ")),
            "{out:#?}"
        );
        assert!(
            line.contains(&format!("{} bytes", ws.stored_bytes(id))),
            "{out:#?}"
        );
        assert!(line.contains("updated 20"), "{out:#?}");
    }
    assert!(!out.stdout.contains(&ids[2]), "{out:#?}");
    assert!(
        lines[2].starts_with("would delete 2 session(s)")
            && lines[2].contains("nothing was deleted"),
        "{out:#?}"
    );
    assert_eq!(ws.stored_files(), before, "a dry run deletes nothing");
}

#[test]
fn prune_max_count_keeps_the_newest_and_deletes_the_rest() {
    let ws = Workspace::new();
    let ids: Vec<String> = ["first", "second", "third"]
        .iter()
        .map(|p| ws.run(&["run", p]).assert_success().session_id())
        .collect();
    // Continuing the oldest makes it the most recently updated: it is kept.
    ws.run(&["run", "--resume", &ids[0], "again"])
        .assert_success();
    let bytes = ws.stored_bytes(&ids[1]);
    let kept_files = [ws.files_of(&ids[0]), ws.files_of(&ids[2])];

    let out = ws
        .run(&["sessions", "prune", "--max-count", "2"])
        .assert_success();
    assert!(
        out.stdout.starts_with(&format!(
            "deleted {}: beyond the maximum count, {bytes} bytes",
            ids[1]
        )),
        "{out:#?}"
    );
    assert!(
        out.stdout.contains(&format!(
            "deleted 1 session(s), {bytes} bytes freed; kept 2"
        )),
        "{out:#?}"
    );
    let mut left = ws.session_ids();
    left.sort();
    let mut expected = vec![ids[0].clone(), ids[2].clone()];
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!([ws.files_of(&ids[0]), ws.files_of(&ids[2])], kept_files);

    // Nothing more to do: a second prune deletes nothing.
    let again = ws
        .run(&["sessions", "prune", "--max-count", "2"])
        .assert_success();
    assert!(again.stdout.contains("deleted 0 session(s)"), "{again:#?}");
    assert_eq!(ws.session_ids().len(), 2);
}

#[test]
fn prune_by_age_and_by_size_reads_units() {
    let ws = Workspace::new();
    let store = ws.store();
    let long_ago = chrono::Utc::now() - chrono::Duration::days(40);
    let old = SessionSnapshot::builder(SessionId::parse("forty-days-old").expect("id"), "m")
        .transcript(vec![agent_session::Message::user("long ago")])
        .timestamps(long_ago, long_ago)
        .build()
        .expect("a snapshot");
    store.save(&old).expect("save");
    // Sessions with a tool call take more than 1K on disk.
    let older = ws.run(&["run", "calc 1+1"]).assert_success().session_id();
    let newest = ws.run(&["run", "calc 2+2"]).assert_success().session_id();

    // 31 days is past 30d (so it goes); the two sessions of today are not.
    let out = ws
        .run(&["sessions", "prune", "--max-age", "30d"])
        .assert_success();
    assert!(
        out.stdout
            .starts_with("deleted forty-days-old: older than the maximum age"),
        "{out:#?}"
    );
    assert!(out.stdout.contains("deleted 1 session(s)"), "{out:#?}");
    assert_eq!(ws.session_ids().len(), 2);
    for age in ["1h", "90m", "45s"] {
        let out = ws
            .run(&["sessions", "prune", "--max-age", age, "--dry-run"])
            .assert_success();
        assert!(
            out.stdout.contains("would delete 0 session(s)"),
            "{age}: {out:#?}"
        );
    }

    // 1M holds both; 1K (1024 bytes) holds neither; exactly the newest's size keeps it.
    let out = ws
        .run(&["sessions", "prune", "--max-bytes", "1M", "--dry-run"])
        .assert_success();
    assert!(out.stdout.contains("would delete 0 session(s)"), "{out:#?}");
    assert!(ws.stored_bytes(&newest) > 1024 && ws.stored_bytes(&older) > 1024);
    let out = ws
        .run(&["sessions", "prune", "--max-bytes", "1K", "--dry-run"])
        .assert_success();
    assert!(out.stdout.contains("would delete 2 session(s)"), "{out:#?}");
    let limit = ws.stored_bytes(&newest).to_string();
    let out = ws
        .run(&["sessions", "prune", "--max-bytes", &limit])
        .assert_success();
    assert!(
        out.stdout
            .starts_with(&format!("deleted {older}: beyond the maximum total size")),
        "{out:#?}"
    );
    assert_eq!(ws.session_ids(), [newest]);

    let before = ws.stored_files();
    for (flag, bad, why) in [
        ("--max-age", "30", "not a duration"),
        ("--max-age", "3 days", "not a duration"),
        ("--max-age", "d", "not a duration"),
        ("--max-age", "99999999999999999d", "too long"),
        ("--max-bytes", "10KB", "not a size"),
        ("--max-bytes", "ten", "not a size"),
        ("--max-bytes", "-1", "not a size"),
        ("--max-bytes", "99999999999G", "too large"),
        ("--max-count", "-1", "invalid digit"),
    ] {
        ws.run(&["sessions", "prune", &format!("{flag}={bad}")])
            .assert_failure(2, &["invalid value", why]);
    }
    assert_eq!(ws.stored_files(), before);
}

#[test]
fn prune_without_a_limit_is_refused() {
    let (ws, _, before) = workspace_with_a_session();
    for args in [
        &["sessions", "prune"][..],
        &["sessions", "prune", "--dry-run"],
        &["sessions", "prune", "--archived-only"],
    ] {
        let out = ws.run(args);
        out.assert_failure(2, &["needs a limit", "--max-age", "would delete nothing"]);
        assert!(out.stdout.is_empty(), "{out:#?}");
    }
    assert_eq!(ws.stored_files(), before);
}

#[test]
fn prune_archived_only_spares_active_sessions_and_forks_outlive_their_parent() {
    let (ws, parent) = workspace_with_two_turns();
    let fork = ws
        .run(&[
            "sessions", "fork", &parent, "--at", "turn:1", "--as", "the-fork",
        ])
        .assert_success()
        .stdout
        .trim()
        .to_owned();
    let bystander = ws.run(&["run", "bystander"]).assert_success().session_id();
    ws.run(&["sessions", "archive", &parent]).assert_success();
    ws.run(&["sessions", "export", &parent, "-o", "parent.jsonl"])
        .assert_success();

    let out = ws
        .run(&["sessions", "prune", "--archived-only", "--max-count", "0"])
        .assert_success();
    assert!(
        out.stdout
            .starts_with(&format!("deleted {parent}: beyond the maximum count")),
        "{out:#?}"
    );
    assert!(out.stdout.contains("deleted 1 session(s)"), "{out:#?}");
    let mut left = ws.session_ids();
    left.sort();
    let mut expected = vec![bystander, fork.clone()];
    expected.sort();
    assert_eq!(left, expected);
    assert!(!ws.store_dir().join(format!("{parent}.archived")).exists());

    // The fork still loads, lists with its lineage and resumes.
    let list = ws.run(&["sessions", "list"]).assert_success().stdout;
    assert!(listed_line(&list, &fork).contains(&format!("[fork of {parent}@4]")));
    let resumed = ws
        .run(&["run", "--resume", &fork, "what did I ask before?"])
        .assert_success();
    assert!(resumed.stdout.contains("1. calc 1+1"), "{resumed:#?}");

    // The pruned parent's archive mark went with it: imported back, it is active.
    ws.run(&["sessions", "import", "parent.jsonl"])
        .assert_success();
    assert!(ws.listed(&[]).contains(&parent));
    assert!(ws.listed(&["--archived"]).is_empty());
}

/// The revisions the store keeps of session `id`, oldest first.
fn kept_revisions(ws: &Workspace, id: &str) -> Vec<u64> {
    ws.store()
        .revisions(&SessionId::parse(id).expect("a valid id"))
        .expect("revisions")
        .iter()
        .map(|r| r.revision.as_u64())
        .collect()
}

#[test]
fn prune_keep_revisions_dry_run_changes_nothing_then_drops_all_but_the_newest() {
    let (ws, id) = workspace_with_two_turns();
    ws.run(&["sessions", "rewind", &id]).assert_success();
    let revisions = kept_revisions(&ws, &id);
    assert_eq!(revisions, (1..=7).collect::<Vec<_>>());
    let history = ws
        .run(&["sessions", "history", &id])
        .assert_success()
        .stdout;
    let head = ws.run(&["sessions", "show", &id]).assert_success().stdout;
    let files = ws.stored_files();
    let bytes = ws.stored_bytes(&id);

    let dry = ws
        .run(&["sessions", "prune", "--keep-revisions", "2", "--dry-run"])
        .assert_success();
    assert_eq!(
        dry.stdout,
        format!(
            "would trim {id}: would drop revisions 1..5 (5 revisions), {bytes} bytes now\n\
             would delete 0 session(s), 0 bytes; would keep 1; would trim 1 session(s), 5 revisions (dry run: nothing was deleted or dropped)\n"
        ),
        "{dry:#?}"
    );
    assert_eq!(ws.stored_files(), files, "a dry run changes nothing");
    assert_eq!(
        ws.run(&["sessions", "history", &id])
            .assert_success()
            .stdout,
        history
    );

    let out = ws
        .run(&["sessions", "prune", "--keep-revisions", "2"])
        .assert_success();
    let after = ws.stored_bytes(&id);
    assert!(after < bytes, "{after} bytes, {bytes} before");
    assert_eq!(
        out.stdout,
        format!(
            "trimmed {id}: revisions 1..5 dropped (5 revisions), {bytes} -> {after} bytes\n\
             deleted 0 session(s), 0 bytes freed; kept 1; trimmed 1 session(s), 5 revisions dropped\n"
        ),
        "{out:#?}"
    );
    assert_eq!(kept_revisions(&ws, &id), [6, 7]);
    let listed = ws
        .run(&["sessions", "history", &id])
        .assert_success()
        .stdout;
    assert!(
        listed.starts_with(&format!(
            "session {id}: 2 revisions kept, 6 to 7; the head is revision 7\n"
        )),
        "{listed}"
    );
    let rows: Vec<u64> = revision_rows(&listed).iter().map(|r| r.0).collect();
    assert_eq!(rows, [6, 7], "{listed}");
    // The head, and the revision before it, load as they did.
    assert_eq!(
        ws.run(&["sessions", "show", &id]).assert_success().stdout,
        head
    );
    let before_rewind = ws
        .run(&["sessions", "show", &id, "--at", "6"])
        .assert_success()
        .stdout;
    assert!(before_rewind.contains("calc 2*3"), "{before_rewind}");
    let out = ws.run(&["sessions", "show", &id, "--at", "5"]);
    out.assert_failure(
        1,
        &[&format!(
            "error: session {id} has no revision 5: its store keeps revisions 6 to 7"
        )],
    );
    assert!(out.stdout.is_empty(), "{out:#?}");

    // Nothing more to drop: a second prune trims nothing.
    let files = ws.stored_files();
    let again = ws
        .run(&["sessions", "prune", "--keep-revisions", "2"])
        .assert_success();
    assert_eq!(
        again.stdout,
        "deleted 0 session(s), 0 bytes freed; kept 1; trimmed 0 session(s), 0 revisions dropped\n",
        "{again:#?}"
    );
    assert_eq!(ws.stored_files(), files);
}

#[test]
fn prune_history_max_age_drops_only_revisions_older_than_it_and_keeps_the_head() {
    let (ws, id) = workspace_with_two_turns();
    ws.run(&["sessions", "rewind", &id]).assert_success();
    let head = ws.load(&id);
    let files = ws.stored_files();

    // A cutoff a century ago: every revision is younger.
    for dry_run in [&["--dry-run"][..], &[]] {
        let mut args = vec!["sessions", "prune", "--history-max-age", "36500d"];
        args.extend_from_slice(dry_run);
        let out = ws.run(&args).assert_success();
        assert!(!out.stdout.contains(&id), "{out:#?}");
        assert!(
            out.stdout.contains("trimmed 0 session(s), 0 revisions")
                || out.stdout.contains("would trim 0 session(s), 0 revisions"),
            "{out:#?}"
        );
    }
    assert_eq!(ws.stored_files(), files);
    assert_eq!(kept_revisions(&ws, &id).len(), 7);

    // Once every revision is older than a second, only the head stays, however old.
    thread::sleep(Duration::from_millis(1100));
    let out = ws
        .run(&["sessions", "prune", "--history-max-age", "1s"])
        .assert_success();
    assert!(
        out.stdout.starts_with(&format!(
            "trimmed {id}: revisions 1..6 dropped (6 revisions), "
        )),
        "{out:#?}"
    );
    assert!(
        out.stdout
            .contains("trimmed 1 session(s), 6 revisions dropped"),
        "{out:#?}"
    );
    assert_eq!(kept_revisions(&ws, &id), [7]);
    let history = ws
        .run(&["sessions", "history", &id])
        .assert_success()
        .stdout;
    assert!(
        history.starts_with(&format!(
            "session {id}: 1 revision kept, 7 to 7; the head is revision 7\n"
        )),
        "{history}"
    );
    let now = ws.load(&id);
    assert_eq!(now.transcript(), head.transcript());
    assert_eq!(now.revision(), head.revision());
}

#[test]
fn prune_trims_only_the_sessions_it_keeps_and_lists_them_after_the_deleted_ones() {
    let (ws, old) = workspace_with_two_turns();
    let new = ws.run(&["run", "calc 3+4"]).assert_success().session_id();
    ws.run(&["run", "--resume", &new, "calc 5+6"])
        .assert_success();
    let (old_bytes, new_revisions) = (ws.stored_bytes(&old), kept_revisions(&ws, &new));
    let dropped = new_revisions.len() - 1;
    let head = *new_revisions.last().expect("a head");

    let out = ws
        .run(&[
            "sessions",
            "prune",
            "--max-count",
            "1",
            "--keep-revisions",
            "1",
        ])
        .assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:#?}");
    assert!(
        lines[0].starts_with(&format!(
            "deleted {old}: beyond the maximum count, {old_bytes} bytes"
        )),
        "{out:#?}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "trimmed {new}: revisions 1..{} dropped ({dropped} revisions), ",
            head - 1
        )),
        "{out:#?}"
    );
    assert_eq!(
        lines[2],
        format!(
            "deleted 1 session(s), {old_bytes} bytes freed; kept 1; trimmed 1 session(s), {dropped} revisions dropped"
        )
    );
    assert_eq!(ws.session_ids(), std::slice::from_ref(&new));
    assert_eq!(kept_revisions(&ws, &new), [head]);
}

#[test]
fn prune_keep_revisions_zero_and_bad_history_limits_are_usage_errors() {
    let (ws, _, before) = workspace_with_a_session();
    for (flag, bad, why) in [
        ("--keep-revisions", "0", "use 1 to keep only the head"),
        ("--keep-revisions", "-1", "not a number of revisions"),
        ("--keep-revisions", "two", "not a number of revisions"),
        ("--history-max-age", "30", "not a duration"),
        ("--history-max-age", "3 days", "not a duration"),
    ] {
        let out = ws.run(&["sessions", "prune", &format!("{flag}={bad}"), "--dry-run"]);
        out.assert_failure(2, &[&format!("invalid value '{bad}' for '{flag} "), why]);
        assert!(out.stdout.is_empty(), "{out:#?}");
    }
    ws.run(&["sessions", "prune", "--keep-revisions", "0"])
        .assert_failure(2, &["always keeps its head revision"]);
    ws.run(&["sessions", "prune"]).assert_failure(
        2,
        &[
            "needs a limit",
            "--keep-revisions N",
            "--history-max-age DURATION",
        ],
    );
    assert_eq!(ws.stored_files(), before);
}

/// A workspace with two sessions (the second a fork of the first), exported together to
/// `bundle.jsonl`; returns the ids and the bundle's path.
fn workspace_with_a_bundle() -> (Workspace, String, String, PathBuf) {
    let ws = Workspace::new();
    ws.write("notes.txt", "exported notes\n");
    let parent = ws.run(&["run", "calc 6*7"]).assert_success().session_id();
    ws.run(&["run", "-c", "read notes.txt"]).assert_success();
    let fork = ws
        .run(&[
            "sessions", "fork", &parent, "--at", "turn:1", "--as", "a-fork",
        ])
        .assert_success()
        .stdout
        .trim()
        .to_owned();
    let out = ws
        .run(&["sessions", "export", &parent, &fork, "-o", "bundle.jsonl"])
        .assert_success();
    assert!(
        out.stdout.is_empty(),
        "the bundle went to the file: {out:#?}"
    );
    assert!(out.stderr.contains("exported 2 session(s)"), "{out:#?}");
    let bundle = ws.path().join("bundle.jsonl");
    (ws, parent, fork, bundle)
}

/// `id` in `store` holds what `original` holds: transcript, tool calls, usage, options,
/// times and lineage.
fn assert_same_session(original: &SessionSnapshot, store: &FileSessionStore, id: &str) {
    let copy = store
        .load(&SessionId::parse(id).expect("id"))
        .expect("imported");
    assert_eq!(copy.transcript(), original.transcript());
    assert_eq!(copy.tool_calls(), original.tool_calls());
    assert_eq!(copy.usage(), original.usage());
    assert_eq!(copy.options(), original.options());
    assert_eq!(
        (copy.created_at(), copy.updated_at()),
        (original.created_at(), original.updated_at())
    );
    assert_eq!(copy.lineage(), original.lineage());
}

#[test]
fn export_then_import_into_another_store_keeps_ids_and_transcripts() {
    let (ws, parent, fork, bundle) = workspace_with_a_bundle();
    assert_eq!(file_mode(&bundle), 0o600, "transcripts are private");
    let elsewhere = ws.path().join("elsewhere");

    let out = ws
        .run_on(
            &elsewhere,
            &["sessions", "import", bundle.to_str().expect("utf-8")],
        )
        .assert_success();
    assert_eq!(
        out.stdout,
        format!("imported {parent} as {parent}\nimported {fork} as {fork}\n")
    );
    let there = FileSessionStore::open(&elsewhere).expect("the other store");
    for id in [&parent, &fork] {
        assert_same_session(&ws.load(id), &there, id);
    }
    // `sessions show` prints the same conversation (the stored revision starts over at 1).
    let strip = |text: &str| -> String {
        text.lines()
            .filter(|l| !l.contains("revision"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let here = ws
        .run(&["sessions", "show", &parent])
        .assert_success()
        .stdout;
    let there_show = ws
        .run_on(&elsewhere, &["sessions", "show", &parent])
        .assert_success()
        .stdout;
    assert_eq!(strip(&here), strip(&there_show));
    assert!(there_show.contains("exported notes"), "{there_show}");
    let listed = ws
        .run_on(&elsewhere, &["sessions", "list"])
        .assert_success()
        .stdout;
    assert!(listed_line(&listed, &fork).contains(&format!("[fork of {parent}@4]")));

    // The same ids again: refused as a whole, nothing changes.
    let stored = std::fs::read_dir(&elsewhere).expect("ls").count();
    let before: Vec<Vec<u8>> = [&parent, &fork]
        .iter()
        .map(|id| std::fs::read(elsewhere.join(format!("{id}.json"))).expect("read"))
        .collect();
    ws.run_on(&elsewhere, &["sessions", "import", "bundle.jsonl"])
        .assert_failure(
            1,
            &[
                "already exists",
                "choose another id",
                "hint: --new-ids",
                "nothing was imported",
            ],
        );
    assert_eq!(std::fs::read_dir(&elsewhere).expect("ls").count(), stored);
    for (id, bytes) in [&parent, &fork].iter().zip(&before) {
        assert_eq!(
            &std::fs::read(elsewhere.join(format!("{id}.json"))).expect("read"),
            bytes
        );
    }

    // One id of the two taken is enough: the other session is not imported either.
    ws.run_on(&elsewhere, &["sessions", "delete", &parent])
        .assert_success();
    ws.run_on(&elsewhere, &["sessions", "import", "bundle.jsonl"])
        .assert_failure(
            1,
            &[
                &format!("session {fork} already exists"),
                "nothing was imported",
            ],
        );
    assert!(!elsewhere.join(format!("{parent}.json")).exists());
    ws.run_on(&elsewhere, &["sessions", "delete", &fork])
        .assert_success();

    // --new-ids imports copies under fresh ids; the fork follows its parent's new id.
    let out = ws
        .run_on(
            &elsewhere,
            &["sessions", "import", "--new-ids", "bundle.jsonl"],
        )
        .assert_success();
    let renamed: Vec<(String, String)> = out
        .stdout
        .lines()
        .map(|l| {
            let rest = l.strip_prefix("imported ").expect("an import line");
            let (from, to) = rest.split_once(" as ").expect("FROM as TO");
            (from.to_owned(), to.to_owned())
        })
        .collect();
    assert_eq!(renamed.len(), 2, "{out:#?}");
    assert_eq!((&renamed[0].0, &renamed[1].0), (&parent, &fork));
    assert!(renamed.iter().all(|(from, to)| from != to), "{out:#?}");
    let new_fork = there
        .load(&SessionId::parse(&renamed[1].1).expect("id"))
        .expect("imported fork");
    assert_eq!(
        new_fork.lineage().map(|l| l.parent.as_str()),
        Some(renamed[0].1.as_str())
    );
    assert_eq!(new_fork.transcript(), ws.load(&fork).transcript());
    assert_eq!(there.list().expect("list").sessions.len(), 2);
}

#[test]
fn export_writes_a_private_file_never_clobbers_it_and_can_write_stdout() {
    let (ws, parent, fork, bundle) = workspace_with_a_bundle();
    let exported = std::fs::read(&bundle).expect("read");

    // An existing file is left alone unless --force is given.
    ws.run(&["sessions", "export", &parent, "-o", "bundle.jsonl"])
        .assert_failure(1, &["bundle.jsonl already exists", "--force"]);
    assert_eq!(std::fs::read(&bundle).expect("read"), exported);

    // --force replaces it, private again even if it was readable by others.
    std::fs::set_permissions(&bundle, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    ws.run(&[
        "sessions",
        "export",
        &parent,
        "-o",
        "bundle.jsonl",
        "--force",
    ])
    .assert_success();
    assert_eq!(file_mode(&bundle), 0o600);
    let replaced = agent_session::Bundle::from_json(&std::fs::read(&bundle).expect("read"))
        .expect("a valid bundle");
    assert_eq!(replaced.sessions().len(), 1);
    assert_eq!(replaced.sessions()[0].id().as_str(), parent);

    // Without -o the bundle goes to stdout, and nothing else does.
    let out = ws.run(&["sessions", "export", &fork]).assert_success();
    let from_stdout = agent_session::Bundle::from_json(out.stdout.as_bytes()).expect("a bundle");
    assert_eq!(from_stdout.sessions().len(), 1);
    assert_eq!(
        from_stdout.sessions()[0].transcript(),
        ws.load(&fork).transcript()
    );
    // Temporary files never stay behind.
    let names: Vec<String> = std::fs::read_dir(ws.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".agent-export-"))
        .collect();
    assert!(names.is_empty(), "{names:?}");

    // Unknown and malformed ids export nothing.
    ws.run(&[
        "sessions",
        "export",
        &parent,
        "no-such-session",
        "-o",
        "x.jsonl",
    ])
    .assert_failure(1, &["session no-such-session not found"]);
    ws.run(&["sessions", "export", "Bad/Id", "-o", "x.jsonl"])
        .assert_failure(1, &["invalid session id"]);
    assert!(!ws.path().join("x.jsonl").exists());
    ws.run(&["sessions", "export"])
        .assert_failure(2, &["required"]);
}

#[test]
fn a_tampered_bundle_is_refused_as_a_whole_and_imports_nothing() {
    let (ws, parent, fork, bundle) = workspace_with_a_bundle();
    let text = std::fs::read_to_string(&bundle).expect("read");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two sessions: {text}");

    // The target store already holds a session; a refused import leaves it as it was.
    let target = ws.path().join("target");
    let resident = ws
        .run_on(&target, &["run", "resident"])
        .assert_success()
        .session_id();
    let files = |dir: &Path| -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry"))
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name, std::fs::read(e.path()).expect("read"))
            })
            .collect()
    };
    let before = files(&target);

    // Each tamper hits the second session, so an import that went session by session
    // would have stored the first.
    let second = lines[2];
    let result_at = second
        .find("\"call_id\":\"scripted_1\"")
        .expect("the fork answers call scripted_1");
    let digit = result_at + "\"call_id\":\"scripted_".len();
    let mut call_id_changed = second.as_bytes().to_vec();
    call_id_changed[digit] = b'7';
    let mut brace_changed = second.as_bytes().to_vec();
    brace_changed[0] = b'[';
    let tampered: Vec<(&str, String)> = vec![
        (
            "a tool result's call id, one byte",
            format!(
                "{}\n{}\n{}\n",
                lines[0],
                lines[1],
                String::from_utf8(call_id_changed).expect("utf-8")
            ),
        ),
        (
            "the first byte of a snapshot",
            format!(
                "{}\n{}\n{}\n",
                lines[0],
                lines[1],
                String::from_utf8(brace_changed).expect("utf-8")
            ),
        ),
        ("a line removed", format!("{}\n{}\n", lines[0], lines[1])),
        (
            "cut short",
            format!(
                "{}\n{}\n{}",
                lines[0],
                lines[1],
                &second[..second.len() / 2]
            ),
        ),
    ];
    for (what, bytes) in &tampered {
        let path = ws.write("tampered.jsonl", bytes);
        let out = ws.run_on(
            &target,
            &["sessions", "import", path.to_str().expect("utf-8")],
        );
        out.assert_failure(1, &["refused as a whole", "none of its sessions can"]);
        assert!(out.stdout.is_empty(), "{what}: {out:#?}");
        assert_eq!(files(&target), before, "{what}: nothing was imported");
        // --new-ids is refused the same way.
        ws.run_on(
            &target,
            &[
                "sessions",
                "import",
                "--new-ids",
                path.to_str().expect("utf-8"),
            ],
        )
        .assert_failure(1, &["refused as a whole"]);
        assert_eq!(files(&target), before, "{what}: nothing was imported");
    }
    assert_eq!(
        ws.run_on(&target, &["sessions", "list"])
            .assert_success()
            .stdout
            .lines()
            .count(),
        2
    );
    assert!(
        !before.contains_key(&format!("{parent}.json"))
            && !before.contains_key(&format!("{fork}.json"))
    );
    assert!(before.contains_key(&format!("{resident}.json")));

    // A refused bundle does not even create a missing store.
    let fresh = ws.path().join("never-made");
    ws.run_on(&fresh, &["sessions", "import", "tampered.jsonl"])
        .assert_failure(1, &["refused as a whole"]);
    assert!(!fresh.exists());
    ws.run_on(&fresh, &["sessions", "import", "missing.jsonl"])
        .assert_failure(1, &["could not read the bundle missing.jsonl"]);
}

#[test]
fn import_reads_stdin_and_single_snapshot_files_of_older_schema_versions() {
    let (ws, parent, fork, bundle) = workspace_with_a_bundle();
    let target = ws.path().join("target");
    let text = std::fs::read_to_string(&bundle).expect("read");
    let target_str = target.to_str().expect("utf-8");
    let out = ws
        .run_with_input(&["--store", target_str, "sessions", "import", "-"], &text)
        .assert_success();
    assert_eq!(
        out.stdout,
        format!("imported {parent} as {parent}\nimported {fork} as {fork}\n")
    );

    // A bare v1 snapshot (a file of an older release's store) imports as a session of one.
    // The golden file is the library's (the workspace root's tests/fixtures/).
    let v1 = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/v1/tool_calls_with_interrupted.json");
    let out = ws
        .run_on(
            &target,
            &["sessions", "import", v1.to_str().expect("utf-8")],
        )
        .assert_success();
    let id = "golden-tool-calls-with-interrupted";
    assert_eq!(out.stdout, format!("imported {id} as {id}\n"));
    let original =
        SessionSnapshot::from_json(&std::fs::read(&v1).expect("read")).expect("v1 loads");
    let imported = FileSessionStore::open(&target)
        .expect("store")
        .load(&SessionId::parse(id).expect("id"))
        .expect("imported");
    assert_eq!(imported.transcript(), original.transcript());
    assert_eq!(imported.tool_calls(), original.tool_calls());
    assert_eq!(imported.schema_version(), agent_session::SCHEMA_VERSION);
}

#[test]
fn help_documents_the_lifecycle_commands() {
    let ws = Workspace::new();
    let help = ws.run(&["--help"]).assert_success().stdout;
    for needle in [
        "sessions fork",
        "sessions rewind",
        "sessions archive",
        "--all",
        "sessions prune --max-age 30d --dry-run",
        "sessions export",
        "sessions import",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let sessions_help = ws.run(&["sessions", "--help"]).assert_success().stdout;
    for needle in [
        "fork",
        "rewind",
        "archive",
        "unarchive",
        "prune",
        "export",
        "import",
    ] {
        assert!(sessions_help.contains(needle), "{sessions_help}");
    }
    let prune_help = ws
        .run(&["sessions", "prune", "--help"])
        .assert_success()
        .stdout;
    for needle in [
        "--max-age <DURATION>",
        "--max-count <N>",
        "--max-bytes <SIZE>",
        "--archived-only",
        "--dry-run",
        "1K = 1024",
        "30d",
        "--keep-revisions <N>",
        "--history-max-age <DURATION>",
        "the head always stays",
        "sessions prune --keep-revisions 50 --dry-run",
    ] {
        assert!(prune_help.contains(needle), "{needle:?}:\n{prune_help}");
    }
    let fork_help = ws
        .run(&["sessions", "fork", "--help"])
        .assert_success()
        .stdout;
    for needle in [
        "--at <POINT>",
        "message:N",
        "turn:N",
        "--as <NEW_ID>",
        "[default: end]",
    ] {
        assert!(fork_help.contains(needle), "{needle:?}:\n{fork_help}");
    }
    let rewind_help = ws
        .run(&["sessions", "rewind", "--help"])
        .assert_success()
        .stdout;
    for needle in [
        "--turns <N>",
        "--to-message <I>",
        "[default: 1]",
        "usage of the dropped turns stays counted",
        "it can be undone",
        "sessions restore",
        "/undo",
    ] {
        assert!(rewind_help.contains(needle), "{needle:?}:\n{rewind_help}");
    }
}

// ---------------------------------------------------------------------------------------
// Hardening (issue 12): terminal escapes, export targets, reused call ids, FIFOs, `~`
// ---------------------------------------------------------------------------------------

/// True for a character that would act on a terminal instead of being shown: C0 controls
/// other than newline and tab, DEL, C1 controls, and the bidi overrides and isolates
/// that reorder the text around them.
fn acts_on_a_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// Asserts that neither stream of `out` holds a raw control character, naming the first.
fn assert_no_raw_controls(what: &str, out: &Out) {
    for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        if let Some((at, c)) = text.char_indices().find(|(_, c)| acts_on_a_terminal(*c)) {
            panic!(
                "{what}: {stream} holds a raw {:?} at byte {at}: {:?}",
                c.escape_unicode().to_string(),
                text
            );
        }
    }
}

/// A file name, prompt and file contents that try an OSC title set, colour codes, a C1
/// CSI, DEL and bidi overrides on whoever reads the output.
const HOSTILE_NAME: &str = "evil\u{1b}[31m\u{202e}.txt";
const HOSTILE_CONTENT: &str =
    "top\u{1b}]0;pwned\u{7}\n\u{1b}[2Jcleared\u{9b}31m\u{2066}rtl\u{7f}end\u{85}\n";

#[test]
fn control_characters_from_prompts_and_tool_output_are_escaped_on_output() {
    let ws = Workspace::new();
    ws.write(HOSTILE_NAME, HOSTILE_CONTENT);
    let prompt = format!("read {HOSTILE_NAME}");
    let run = ws.run(&["run", &prompt]).assert_success();
    assert_no_raw_controls("run", &run);
    let id = run.session_id();
    // The file was read (the escaping is on output only) and shown in a visible form.
    for visible in [
        r"\u{1b}]0;pwned\u{7}",
        r"\u{1b}[2J",
        r"\u{9b}",
        r"\u{2066}",
        r"\u{7f}",
    ] {
        assert!(run.stdout.contains(visible), "{visible}: {run:#?}");
    }
    assert!(run.stderr.contains(r"\u{202e}"), "{run:#?}");
    assert_eq!(
        ws.load(&id).tool_calls()[0].status,
        ToolCallStatus::Ok,
        "the tool read the file"
    );

    let list = ws.run(&["sessions", "list"]).assert_success();
    assert_no_raw_controls("sessions list", &list);
    assert!(
        list.stdout.contains(r"read evil\u{1b}[31m\u{202e}.txt"),
        "{list:#?}"
    );

    let show = ws.run(&["sessions", "show", &id]).assert_success();
    assert_no_raw_controls("sessions show", &show);
    assert!(show.stdout.contains(r"top\u{1b}]0;pwned\u{7}"), "{show:#?}");
    // Lines are kept where a transcript has them.
    assert!(show.stdout.contains(r"cleared\u{9b}31m"), "{show:#?}");
    assert!(
        line_index(&show.stdout, "cleared") > line_index(&show.stdout, "pwned"),
        "{show:#?}"
    );

    // The script command echoes its prompts.
    ws.write("script.txt", &format!("{prompt}\nhi\u{1b}[1m there\n"));
    let script = ws.run(&["script", "script.txt"]).assert_success();
    assert_no_raw_controls("script", &script);
    assert!(
        script.stdout.contains(r"> hi\u{1b}[1m there"),
        "{script:#?}"
    );
}

/// A session whose every stored string that the CLI prints tries an escape sequence.
fn hostile_snapshot(id: &str) -> SessionSnapshot {
    let call = ToolCall::new(
        "call_1",
        "to\u{1b}[5mol",
        json!({"path": "a\u{202e}b", "n": "\u{9b}1m"}),
    );
    SessionSnapshot::builder(SessionId::parse(id).expect("id"), "gpt\u{1b}[5m-evil")
        .metadata_entry("title", json!("\u{1b}]0;pwned\u{7}"))
        .system_prompt("be \u{1b}[8mhidden\u{7f}")
        .transcript(vec![
            Message::user("hello\u{202e}dlrow"),
            Message::assistant(vec![ContentBlock::tool_call(call)]),
            Message::tool_result(ToolResult::error("call_1", "cut\u{1b}[31m short")),
        ])
        .interrupted("call_1")
        .build()
        .expect("a valid snapshot")
}

#[test]
fn control_characters_in_an_imported_session_are_escaped_on_output() {
    let ws = Workspace::new();
    let id = "imported-evil";
    let bundle = agent_session::Bundle::new(vec![hostile_snapshot(id)])
        .and_then(|b| b.to_json())
        .expect("a bundle");
    std::fs::write(ws.path().join("evil.jsonl"), bundle).expect("write the bundle");
    let import = ws
        .run(&["sessions", "import", "evil.jsonl"])
        .assert_success();
    assert_no_raw_controls("sessions import", &import);

    let list = ws.run(&["sessions", "list"]).assert_success();
    assert_no_raw_controls("sessions list", &list);
    assert!(
        listed_line(&list.stdout, id).contains(r"\u{1b}]0;pwned\u{7}"),
        "{list:#?}"
    );

    let show = ws.run(&["sessions", "show", id]).assert_success();
    assert_no_raw_controls("sessions show", &show);
    for visible in [
        r"model gpt\u{1b}[5m-evil",
        r"be \u{1b}[8mhidden\u{7f}",
        r"hello\u{202e}dlrow",
        r"to\u{1b}[5mol",
        r"a\u{202e}b",
        r"cut\u{1b}[31m short",
    ] {
        assert!(show.stdout.contains(visible), "{visible}: {show:#?}");
    }

    // A past revision, the history's messages, and a compaction's local summary.
    let at = ws
        .run(&["sessions", "show", id, "--at", "1"])
        .assert_success();
    assert_no_raw_controls("sessions show --at", &at);
    assert!(at.stdout.contains(r"hello\u{202e}dlrow"), "{at:#?}");
    let history = ws
        .run(&["sessions", "history", id, "--messages"])
        .assert_success();
    assert_no_raw_controls("sessions history --messages", &history);
    for visible in [
        r"hello\u{202e}dlrow",
        r"to\u{1b}[5mol",
        r"cut\u{1b}[31m short",
    ] {
        assert!(history.stdout.contains(visible), "{visible}: {history:#?}");
    }

    // Resuming names the stored model and the interrupted call.
    let run = ws
        .run(&["run", "--resume", id, "hi again"])
        .assert_success();
    assert_no_raw_controls("run --resume", &run);
    let compact = ws
        .run(&["sessions", "compact", id, "--keep-turns", "1"])
        .assert_success();
    assert_no_raw_controls("sessions compact", &compact);
    assert!(
        compact.stdout.contains(r"- user: hello\u{202e}dlrow"),
        "{compact:#?}"
    );
    assert!(run.stderr.contains(r"gpt\u{1b}[5m-evil"), "{run:#?}");
    assert!(run.stderr.contains(r"to\u{1b}[5mol"), "{run:#?}");

    // The chat command's listing.
    let chat = ws
        .run_with_input(&["chat"], "/sessions\n/exit\n")
        .assert_success();
    assert_no_raw_controls("chat /sessions", &chat);
    assert!(chat.stdout.contains(r"\u{1b}]0;pwned\u{7}"), "{chat:#?}");
}

#[test]
fn control_characters_in_error_messages_are_escaped() {
    let ws = Workspace::new();
    ws.run(&["run", "hi"]).assert_success();
    // A damaged snapshot whose decode error quotes what the file holds.
    let planted = ws.store_dir().join("planted.json");
    std::fs::write(
        &planted,
        r#"{"schema_version":2,"id":"planted","\u001b]0;pwned\u0007":1}"#,
    )
    .expect("write");
    let list = ws.run(&["sessions", "list"]);
    list.assert_failure(1, &["unreadable", "planted.json"]);
    assert_no_raw_controls("sessions list", &list);
    let show = ws.run(&["sessions", "show", "planted"]);
    show.assert_failure(1, &["planted.json"]);
    assert_no_raw_controls("sessions show", &show);
    assert!(show.stderr.contains(r"\u{1b}]0;pwned\u{7}"), "{show:#?}");

    // A chat line that is not a command is echoed in the complaint.
    let chat = ws
        .run_with_input(&["chat"], "/nope\u{1b}[31m\n/exit\n")
        .assert_success();
    assert_no_raw_controls("chat", &chat);
    assert!(chat.stderr.contains(r"/nope\u{1b}[31m"), "{chat:#?}");
}

#[test]
fn sessions_show_pairs_reused_tool_call_ids_by_position() {
    // Some servers number calls per response, so `call_0` comes back in every step.
    let ws = Workspace::new();
    let calc = |expression: &str| {
        Message::assistant(vec![ContentBlock::tool_call(ToolCall::new(
            "call_0",
            "calculator",
            json!({ "expression": expression }),
        ))])
    };
    let snapshot = SessionSnapshot::builder(SessionId::parse("reused-ids").expect("id"), "m")
        .transcript(vec![
            Message::user("first"),
            calc("1+1"),
            Message::tool_result(ToolResult::new("call_0", "two")),
            Message::assistant(vec![ContentBlock::text("one done")]),
            Message::user("second"),
            calc("3*3"),
            Message::tool_result(ToolResult::error("call_0", "nine went wrong")),
            Message::assistant(vec![ContentBlock::text("two done")]),
        ])
        .build()
        .expect("a snapshot reusing a call id");
    FileSessionStore::open(ws.store_dir())
        .expect("the store opens")
        .save(&snapshot)
        .expect("saved");

    let show = ws.run(&["sessions", "show", "reused-ids"]).assert_success();
    let text = &show.stdout;
    let lines: Vec<&str> = text.lines().collect();
    for (call, result) in [
        ("{\"expression\":\"1+1\"}", "[result ok] two"),
        ("{\"expression\":\"3*3\"}", "[result error] nine went wrong"),
    ] {
        let at = line_index(text, call);
        assert!(
            lines[at + 1].contains(result),
            "{call} is followed by its own result {result:?}:\n{text}"
        );
    }
}

/// Makes a FIFO at `path` with mkfifo(1) (the crate forbids the unsafe code libc would need).
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {} failed", path.display());
}

#[test]
fn the_file_reader_refuses_a_fifo_without_waiting_for_a_writer() {
    let ws = Workspace::new();
    mkfifo(&ws.path().join("pipe"));
    // Opening a FIFO for reading waits for a writer, and none will come: a reader that
    // opens before checking the type hangs here, so the agent is killed after a deadline.
    let mut child = ws
        .command(&["run", "read pipe"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the agent starts");
    let status = wait_for(&mut child, Duration::from_secs(20));
    let out: Out = child.wait_with_output().expect("the output").into();
    assert!(status.success(), "{out:#?}");
    assert!(
        out.stdout
            .contains("The read_file tool failed: refused \"pipe\""),
        "{out:#?}"
    );
    assert!(out.stdout.contains("a FIFO"), "{out:#?}");

    // A device is refused before it is opened.
    if make_null_device(&ws.path().join("null")) {
        let out = ws.run(&["run", "read null"]).assert_success();
        assert!(
            out.stdout
                .contains("refused \"null\": it is a character device"),
            "{out:#?}"
        );
    }
}

/// Makes a character device 1,3 (what /dev/null is) at `path` with mknod(1); false, with
/// the reason printed, when this process may not make one (only root may).
fn make_null_device(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // A directory this process just created belongs to its effective user.
    let parent = path.parent().expect("a parent directory");
    if std::fs::metadata(parent).expect("stat").uid() != 0 {
        println!("skipped the device node case: only root can make device nodes");
        return false;
    }
    let made = Command::new("mknod")
        .arg(path)
        .args(["c", "1", "3"])
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        println!("skipped the device node case: mknod failed (no CAP_MKNOD here?)");
    }
    made
}

#[test]
fn export_force_replaces_only_a_regular_file() {
    use std::os::unix::fs::FileTypeExt;
    let (ws, id, _) = workspace_with_a_session();
    let export_to = |name: &str| ws.run(&["sessions", "export", &id, "-o", name, "--force"]);

    // A symbolic link, even one to a regular file: neither the link nor its target change.
    let outside = tempfile::tempdir().expect("a temporary directory");
    let target = outside.path().join("target.txt");
    std::fs::write(&target, "not a bundle").expect("write");
    std::os::unix::fs::symlink(&target, ws.path().join("link.jsonl")).expect("symlink");
    export_to("link.jsonl").assert_failure(
        1,
        &[
            "refused to replace link.jsonl",
            "a symbolic link",
            "--force",
        ],
    );
    assert_eq!(
        std::fs::read_link(ws.path().join("link.jsonl")).expect("still a link"),
        target
    );
    assert_eq!(
        std::fs::read_to_string(&target).expect("read"),
        "not a bundle"
    );

    // A FIFO (a plain open would wait for a reader) and a directory.
    mkfifo(&ws.path().join("pipe.jsonl"));
    export_to("pipe.jsonl").assert_failure(1, &["refused to replace pipe.jsonl", "a FIFO"]);
    let pipe = std::fs::symlink_metadata(ws.path().join("pipe.jsonl")).expect("lstat");
    assert!(pipe.file_type().is_fifo(), "the FIFO is still there");
    std::fs::create_dir(ws.path().join("dir.jsonl")).expect("mkdir");
    export_to("dir.jsonl").assert_failure(1, &["refused to replace dir.jsonl", "a directory"]);

    // A device node: as root, `-o /dev/stdout --force` must not replace the system's.
    let device = ws.path().join("null");
    if make_null_device(&device) {
        export_to("null").assert_failure(1, &["refused to replace null", "a character device"]);
        let meta = std::fs::symlink_metadata(&device).expect("lstat");
        assert!(
            meta.file_type().is_char_device(),
            "the device is still there"
        );
    }

    // An existing regular file is still replaced.
    std::fs::write(ws.path().join("old.jsonl"), "old").expect("write");
    export_to("old.jsonl").assert_success();
    let bundle = std::fs::read(ws.path().join("old.jsonl")).expect("read");
    assert_eq!(
        agent_session::Bundle::from_json(&bundle)
            .expect("a bundle")
            .sessions()
            .len(),
        1
    );
    // Nothing was left behind by the refusals.
    let temporary: Vec<String> = std::fs::read_dir(ws.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".agent-export-"))
        .collect();
    assert!(temporary.is_empty(), "{temporary:?}");
}

#[test]
fn a_store_path_starting_with_a_tilde_means_home_and_never_a_folder_named_tilde() {
    let ws = Workspace::new();
    let home = ws.path().join("home");
    std::fs::create_dir(&home).expect("mkdir");
    let with_home = |args: &[&str]| {
        let mut command = ws.command(args);
        command.env("HOME", &home);
        command
    };

    // --store '~/s', as when the shell did not expand it (quoted, or `--store=~/s`).
    let id = run_command(with_home(&["--store", "~/s", "run", "hi"]))
        .assert_success()
        .session_id();
    assert!(home.join("s").join(format!("{id}.json")).is_file());
    let listed = run_command(with_home(&["--store=~/s", "sessions", "list"])).assert_success();
    assert!(listed.stdout.contains(&id), "{listed:#?}");

    // AGENT_SESSION_STORE='~/e', which no shell expands.
    let mut command = with_home(&["run", "hello"]);
    command.env("AGENT_SESSION_STORE", "~/e");
    let id = run_command(command).assert_success().session_id();
    assert!(home.join("e").join(format!("{id}.json")).is_file());
    assert!(!ws.path().join("~").exists(), "no folder named ~");

    // Another user's home is not guessed at, and HOME must be known.
    run_command(with_home(&["--store", "~other/s", "run", "hi"]))
        .assert_failure(1, &["~other/s", "write the path out"]);
    assert!(!ws.path().join("~other").exists());
    let mut command = ws.command(&["--store", "~/s", "run", "hi"]);
    command.env_remove("HOME");
    run_command(command).assert_failure(1, &["~/s", "HOME is not set"]);
    let mut command = ws.command(&["--store", "~", "run", "hi"]);
    command.env("HOME", "");
    run_command(command).assert_failure(1, &["HOME is not set"]);
    assert!(!ws.path().join("~").exists(), "no folder named ~");
    assert!(!ws.store_dir().exists(), "the default store was not used");

    let help = ws.run(&["--help"]).assert_success().stdout;
    assert!(help.contains("~/"), "--help says how ~ is read:\n{help}");
}

// ---------------------------------------------------------------------------------------
// Issue 12: times in the future, cursors past year 9999, a step whose save failed, a store
// path that is a link.
// ---------------------------------------------------------------------------------------

/// Saves into the workspace's store a copy of `snapshot` updated at `updated` (a time the
/// builder refuses when it is in the future, so the JSON is edited, as a stored file from
/// a machine whose clock was ahead would have it).
fn store_updated_at(ws: &Workspace, name: &str, updated: chrono::DateTime<chrono::Utc>) {
    let built = SessionSnapshot::builder(SessionId::parse(name).expect("id"), "m")
        .transcript(vec![agent_session::Message::user(format!("about {name}"))])
        .timestamps(
            chrono::DateTime::<chrono::Utc>::from_timestamp(0, 0).expect("1970"),
            chrono::Utc::now(),
        )
        .build()
        .expect("build");
    let mut value: Value = serde_json::from_slice(&built.to_json().expect("encode")).expect("json");
    value["updated_at"] = json!(updated);
    let snapshot = SessionSnapshot::from_json(value.to_string().as_bytes()).expect("decode");
    std::fs::create_dir_all(ws.store_dir()).expect("store dir");
    ws.store().save(&snapshot).expect("save");
}

#[test]
fn a_session_updated_in_the_future_is_listed_last_marked_and_never_continued_or_pruned() {
    let (ws, used, _) = workspace_with_a_session();
    store_updated_at(
        &ws,
        "clock-was-ahead",
        chrono::Utc::now() + chrono::Duration::days(2),
    );
    let list = ws.run(&["sessions", "list"]).assert_success();
    let lines: Vec<&str> = list.stdout.lines().collect();
    assert!(lines[1].starts_with(&used), "{list:#?}");
    assert!(lines[2].starts_with("clock-was-ahead"), "{list:#?}");
    assert!(lines[2].contains("[updated in the future"), "{list:#?}");
    // --continue takes the session just used.
    let out = ws.run(&["run", "--continue", "calc 2+2"]).assert_success();
    assert_eq!(out.session_id(), used);
    // prune --max-count 1 keeps the session just used, and cannot date the other.
    let out = ws
        .run(&["sessions", "prune", "--max-count", "1"])
        .assert_success();
    assert!(out.stderr.contains("kept clock-was-ahead"), "{out:#?}");
    assert_eq!(ws.session_ids().len(), 2, "nothing was deleted");
}

/// Issue 12, item 11: the cursor printed for a page must be accepted back.
#[test]
fn a_cursor_past_year_9999_is_printed_in_a_form_that_is_accepted_back() {
    let ws = Workspace::new();
    let far =
        chrono::DateTime::<chrono::Utc>::from_timestamp(253_402_300_800, 0).expect("year 10000");
    store_updated_at(&ws, "far-ahead", far);
    store_updated_at(&ws, "further-ahead", far + chrono::Duration::days(1));
    let first = ws
        .run(&["sessions", "list", "--limit", "1"])
        .assert_success();
    let more = first
        .stderr
        .lines()
        .find_map(|line| line.split("--after ").nth(1))
        .unwrap_or_else(|| panic!("no cursor printed: {first:#?}"))
        .trim()
        .to_owned();
    assert!(!more.contains("+10000"), "{more}");
    let next = ws
        .run(&["sessions", "list", "--limit", "1", "--after", &more])
        .assert_success();
    assert!(next.stdout.contains("far-ahead"), "{next:#?}");
}

/// Issue 12, item 16: when the save after a step fails (here another writer took the
/// session over and saved it while the tool ran), the message says the tool ran and how
/// it is recorded.
#[test]
fn a_step_that_could_not_be_saved_is_reported_as_run_but_not_saved() {
    let (ws, id, _) = workspace_with_a_session();
    let (mut child, rx) = spawn_until(&ws, &["run", "--continue", "wait 2"], "[tool] wait");
    // Another writer takes the session over (the agent holds it under a lease) and
    // changes it while the tool runs.
    let store = ws.store();
    let session_id = SessionId::parse(&id).expect("id");
    let lease = store
        .acquire_lease(
            &session_id,
            &agent_session::LeaseRequest::new(agent_session::LeaseHolder::this_process("other"))
                .take_over(true),
        )
        .expect("take over");
    let loaded = store.load(&session_id).expect("load");
    let mut session = agent_session::Session::restore(loaded, NoEngine, None).expect("restore");
    session
        .metadata_mut()
        .insert("elsewhere".to_owned(), json!(true));
    store
        .save(&session.snapshot().with_lease(&lease))
        .expect("the other writer saves");
    let status = wait_for(&mut child, Duration::from_secs(30));
    let stderr: Vec<String> = rx.iter().collect();
    let stderr = stderr.join("\n");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("is no longer leased to this writer"),
        "{stderr}"
    );
    assert!(
        stderr.contains("it ran, its result was not saved, and it will not be run again"),
        "{stderr}"
    );
    let stored = ws.load(&id);
    let record = stored.tool_calls().last().expect("the wait call");
    assert_eq!(record.tool_name, "wait");
    assert_eq!(record.status, ToolCallStatus::Interrupted);
    let text = stored
        .tool_result(record)
        .and_then(|r| r.output.as_text())
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("may have run"), "{text}");
}

struct NoEngine;

impl agent_session::Engine for NoEngine {
    async fn complete(
        &mut self,
        _: agent_session::CompletionRequest<'_>,
    ) -> Result<agent_session::Completion, agent_session::BoxError> {
        Err("not used".into())
    }
}

/// Issue 12, item 16: `--store` naming a link said "not a directory".
#[test]
fn a_store_path_that_is_a_symbolic_link_is_called_one() {
    let (ws, _, _) = workspace_with_a_session();
    std::os::unix::fs::symlink(ws.store_dir(), ws.path().join("link")).expect("symlink");
    let out = ws.run(&["--store", "link", "sessions", "list"]);
    assert_ne!(out.code, Some(0), "{out:#?}");
    assert!(out.stderr.contains("symbolic link"), "{out:#?}");
    assert!(!out.stderr.contains("not a directory"), "{out:#?}");
}

// ---------------------------------------------------------------------------------------
// Session history (issue 14): sessions history, show --at, restore, compact; /restore
// ---------------------------------------------------------------------------------------

/// The rows of a `sessions history` revision table: revision, kind, view length, note.
fn revision_rows(text: &str) -> Vec<(u64, String, usize, String)> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("REV "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let note = words.get(5..).unwrap_or_default().join(" ");
            (
                words[0].parse().expect("a revision number"),
                words[3].to_owned(),
                words[4].parse().expect("a view length"),
                note,
            )
        })
        .collect()
}

#[test]
fn history_lists_every_revision_and_with_messages_where_each_message_stands() {
    let (ws, id) = workspace_with_two_turns();
    ws.run(&["sessions", "rewind", &id]).assert_success();
    let files = ws.stored_files();
    let sid = SessionId::parse(&id).expect("id");

    let out = ws.run(&["sessions", "history", &id]).assert_success();
    assert_eq!(
        out.stdout.lines().next(),
        Some(format!("session {id}: 7 revisions kept, 1 to 7; the head is revision 7").as_str()),
        "{out:#?}"
    );
    assert!(
        out.stdout.lines().nth(1).is_some_and(|l| l
            .split_whitespace()
            .eq(["REV", "SAVED", "(UTC)", "KIND", "MSGS", "NOTE"])),
        "{out:#?}"
    );
    // Exactly the revisions the library keeps: number, kind, view length.
    let rows = revision_rows(&out.stdout);
    let kept: Vec<(u64, String, usize)> = ws
        .store()
        .revisions(&sid)
        .expect("revisions")
        .iter()
        .map(|r| (r.revision.as_u64(), r.kind.as_str().to_owned(), r.messages))
        .collect();
    assert_eq!(
        rows.iter()
            .map(|(r, k, m, _)| (*r, k.clone(), *m))
            .collect::<Vec<_>>(),
        kept
    );
    assert_eq!(rows[0].1, "checkpoint");
    assert_eq!(
        rows.last().expect("a head"),
        &(7, "rewind".to_owned(), 4, "the head".to_owned())
    );
    assert!(!out.stdout.contains("MESSAGE"), "messages only when asked");

    // --messages: every message the views held, the rewound turn's too, with its standing.
    let out = ws
        .run(&["sessions", "history", &id, "--messages"])
        .assert_success();
    let history = ws.store().history(&sid).expect("history");
    assert!(
        out.stdout.contains(&format!(
            "\n\n{} messages in the history since revision 1, 4 in the view:\n",
            history.messages.len()
        )),
        "{out:#?}"
    );
    let listed: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| !l.contains("STANDING"))
        .skip(1)
        .collect();
    assert_eq!(listed.len(), history.messages.len(), "{out:#?}");
    let first = line_index(&out.stdout, "calc 1+1");
    assert!(
        out.stdout
            .lines()
            .nth(first)
            .is_some_and(|l| l.contains("in view #0") && l.contains("user")),
        "{out:#?}"
    );
    let dropped = line_index(&out.stdout, "user       calc 2*3");
    assert!(
        out.stdout
            .lines()
            .nth(dropped)
            .is_some_and(|l| l.contains("rewound at 7")),
        "{out:#?}"
    );
    assert!(
        out.stdout.contains("[result scripted_2] 6"),
        "tool results are listed: {out:#?}"
    );
    assert_eq!(ws.stored_files(), files, "history reads only");
}

#[test]
fn show_at_prints_a_revision_exactly_as_it_was_and_refuses_one_not_kept() {
    let (ws, id) = workspace_with_two_turns();
    let before = ws.run(&["sessions", "show", &id]).assert_success().stdout;
    ws.run(&["sessions", "rewind", &id]).assert_success();
    let files = ws.stored_files();

    // Revision 6, before the rewind: what `show` printed then, plus a line saying so.
    let past = ws
        .run(&["sessions", "show", &id, "--at", "6"])
        .assert_success()
        .stdout;
    let note = format!(
        "  as it was at revision 6; the head is revision 7 (`sessions restore {id} 6` makes this state the head again)\n"
    );
    assert!(past.contains(&note), "{past}");
    assert_eq!(past.replace(&note, ""), before);
    assert!(past.contains("calc 2*3"), "{past}");

    let head = ws
        .run(&["sessions", "show", &id, "--at", "7"])
        .assert_success()
        .stdout;
    assert!(head.contains("revision 7 is the head"), "{head}");
    assert!(!head.contains("calc 2*3"), "{head}");
    let first = ws
        .run(&["sessions", "show", &id, "--at", "1"])
        .assert_success()
        .stdout;
    let at_one = ws
        .store()
        .load_at(
            &SessionId::parse(&id).expect("id"),
            agent_session::Revision::from_u64(1),
        )
        .expect("revision 1");
    assert!(
        first.contains(&format!("  {} messages, ", at_one.transcript().len())),
        "{first}"
    );
    // The head's own show says what its history holds.
    let now = ws.run(&["sessions", "show", &id]).assert_success().stdout;
    assert!(
        now.contains(&format!(
            "  history: rewound once (`sessions history {id}` lists its revisions)"
        )),
        "{now}"
    );

    let out = ws.run(&["sessions", "show", &id, "--at", "99"]);
    out.assert_failure(
        1,
        &[
            &format!("error: session {id} has no revision 99: its store keeps revisions 1 to 7"),
            &format!("hint: `agent-session sessions history {id}` lists the revisions it keeps"),
        ],
    );
    assert!(out.stdout.is_empty(), "{out:#?}");
    assert!(!out.stderr.contains("sessions list"), "{out:#?}");
    ws.run(&["sessions", "show", &id, "--at", "0"])
        .assert_failure(
            2,
            &["invalid value '0' for '--at <REV>'", "revisions start at 1"],
        );
    ws.run(&["sessions", "show", &id, "--at", "seven"])
        .assert_failure(2, &["\"seven\" is not a revision"]);
    ws.run(&["sessions", "show", &id, "--at", "-1"])
        .assert_failure(2, &[]);
    ws.run(&["sessions", "show", &id, "--at", "18446744073709551616"])
        .assert_failure(2, &["is not a revision"]);
    ws.run(&["sessions", "show", "nobody", "--at", "1"])
        .assert_failure(1, &["session nobody not found"]);
    assert_eq!(ws.stored_files(), files, "show writes nothing");
}

#[test]
fn restore_undoes_a_rewind_as_a_new_revision_and_list_marks_the_session() {
    let (ws, id) = workspace_with_two_turns();
    let before = ws.load(&id);
    let rewind = ws.run(&["sessions", "rewind", &id]).assert_success();
    assert!(
        rewind.stderr.contains(&format!(
            "they stay in the session's history; `sessions restore {id} 6` undoes the rewind"
        )),
        "{rewind:#?}"
    );
    let list = ws.run(&["sessions", "list"]).assert_success().stdout;
    assert!(list.starts_with("ID "), "{list}");
    assert!(
        list.lines()
            .next()
            .is_some_and(|h| h.contains("  HIST  TITLE")),
        "{list}"
    );
    assert!(
        listed_line(&list, &id).contains("  R     calc 1+1"),
        "{list}"
    );

    let out = ws.run(&["sessions", "restore", &id, "6"]).assert_success();
    assert_eq!(
        out.stdout,
        format!(
            "restored session {id} to revision 6, now revision 8: the view went from 4 messages to 8\n"
        ),
        "{out:#?}"
    );
    assert!(
        out.stderr.contains("usage stays counted") && out.stderr.contains("--resume"),
        "{out:#?}"
    );
    let restored = ws.load(&id);
    assert_eq!(restored.revision().as_u64(), 8);
    assert_eq!(restored.transcript(), before.transcript());
    assert_eq!(restored.tool_calls(), before.tool_calls());
    assert_eq!(
        restored.usage(),
        before.usage(),
        "usage is never taken back"
    );

    let list = ws.run(&["sessions", "list"]).assert_success().stdout;
    assert!(
        listed_line(&list, &id).contains("  RS    calc 1+1"),
        "{list}"
    );
    let history = ws
        .run(&["sessions", "history", &id])
        .assert_success()
        .stdout;
    assert_eq!(
        revision_rows(&history).last().expect("a head"),
        &(
            8,
            "restore".to_owned(),
            8,
            "restored revision 6, the head".to_owned()
        )
    );
    let resumed = ws
        .run(&["run", "--resume", &id, "what did I ask before?"])
        .assert_success();
    assert!(resumed.stdout.contains("2. calc 2*3"), "{resumed:#?}");

    // The head itself: nothing to do, nothing written.
    let files = ws.stored_files();
    let same = ws.run(&["sessions", "restore", &id, "9"]).assert_success();
    assert_eq!(
        same.stdout,
        format!(
            "session {id} is at revision 9 already: nothing to restore; revision 9 is unchanged\n"
        )
    );
    // Bad revisions: refused, nothing written.
    ws.run(&["sessions", "restore", &id, "10"]).assert_failure(
        1,
        &[
            &format!("session {id} has no revision 10: its store keeps revisions 1 to 9"),
            "lists the revisions it keeps",
            "\nnothing was restored",
        ],
    );
    ws.run(&["sessions", "restore", &id, "0"])
        .assert_failure(2, &["revisions start at 1"]);
    ws.run(&["sessions", "restore", &id, "six"])
        .assert_failure(2, &["\"six\" is not a revision"]);
    ws.run(&["sessions", "restore", &id])
        .assert_failure(2, &["<REV>"]);
    ws.run(&["sessions", "restore", "nobody", "1"])
        .assert_failure(1, &["session nobody not found"]);
    assert_eq!(ws.stored_files(), files);

    // A restore is a revision too, so it can itself be undone: back to the rewound state.
    let again = ws.run(&["sessions", "restore", &id, "7"]).assert_success();
    assert!(
        again
            .stdout
            .contains("now revision 10: the view went from 10 messages to 4"),
        "{again:#?}"
    );
    assert_eq!(ws.load(&id).transcript(), &before.transcript()[..4]);
}

/// A workspace with one session of three turns: two calculator turns and "hello there"
/// (10 messages).
fn workspace_with_three_turns() -> (Workspace, String) {
    let (ws, id) = workspace_with_two_turns();
    ws.run(&["run", "--resume", &id, "hello there"])
        .assert_success();
    assert_eq!(ws.load(&id).transcript().len(), 10);
    (ws, id)
}

#[test]
fn compact_offline_summarises_all_but_the_last_turns_keeps_them_in_the_history_and_restore_undoes_it(
) {
    let (ws, id) = workspace_with_three_turns();
    let before = ws.load(&id);
    let head = before.revision().as_u64();

    // By default the last 2 turns stay: the first turn (4 messages) is summarised.
    let out = ws.run(&["sessions", "compact", &id]).assert_success();
    let revision = head + 1;
    assert_eq!(
        out.stdout,
        format!(
            "compacted session {id}, now revision {revision}: its first 4 messages became a summary of 1 message; the view went from 10 to 7 messages\n\
             the summary was made offline, without a model (the scripted engine): the first line of each prompt and answer\n  \
             Summary of the 4 earlier messages (made offline, without a model: the first line of each prompt and answer):\n  \
             - user: calc 1+1\n  \
             - assistant: 1+1 = 2\n"
        ),
        "{out:#?}"
    );
    assert!(
        out.stderr.contains(&format!(
            "`sessions restore {id} {head}` undoes the compaction"
        )),
        "{out:#?}"
    );
    let compacted = ws.load(&id);
    assert_eq!(compacted.revision().as_u64(), revision);
    assert_eq!(compacted.transcript().len(), 7);
    assert!(compacted.transcript()[0]
        .text()
        .starts_with("Summary of the 4 earlier messages"));
    assert_eq!(&compacted.transcript()[1..], &before.transcript()[4..]);
    assert_eq!(compacted.usage(), before.usage(), "no model was called");
    assert_eq!(
        compacted.metadata().get("title"),
        Some(&json!("calc 1+1")),
        "the title is kept"
    );

    let list = ws.run(&["sessions", "list"]).assert_success().stdout;
    assert!(
        listed_line(&list, &id).contains("  C     calc 1+1"),
        "{list}"
    );
    let history = ws
        .run(&["sessions", "history", &id, "--messages"])
        .assert_success()
        .stdout;
    assert_eq!(
        revision_rows(&history).last().expect("a head"),
        &(revision, "compaction".to_owned(), 7, "the head".to_owned())
    );
    let compacted_away = history
        .lines()
        .filter(|l| l.contains(&format!("compacted at {revision}")))
        .count();
    assert!(compacted_away >= 4, "{history}");
    assert!(
        history
            .lines()
            .any(|l| l.contains("in view #0") && l.contains("Summary of the 4 earlier")),
        "{history}"
    );
    // The next turn's model sees the summary and the kept turns.
    let resumed = ws
        .run(&["run", "--resume", &id, "what did I ask before?"])
        .assert_success();
    assert!(
        resumed
            .stdout
            .contains("1. Summary of the 4 earlier messages"),
        "{resumed:#?}"
    );
    assert!(resumed.stdout.contains("2. calc 2*3"), "{resumed:#?}");

    // Nothing before the kept turns: refused, nothing written.
    let files = ws.stored_files();
    ws.run(&["sessions", "compact", &id, "--keep-turns", "9"])
        .assert_failure(
            1,
            &[
                &format!("session {id} has nothing to compact: its view holds 9 messages in 4 turns, and the last 9 turns stay as they are (--keep-turns 9)"),
                "hint: --keep-turns 3 compacts more of it",
                "\nnothing was compacted",
            ],
        );
    ws.run(&["sessions", "compact", &id, "--keep-turns", "many"])
        .assert_failure(2, &["invalid value 'many' for '--keep-turns <N>'"]);
    ws.run(&["sessions", "compact", "nobody"])
        .assert_failure(1, &["session nobody not found"]);
    assert_eq!(ws.stored_files(), files);

    // Restoring the revision before the compaction brings the first turn back.
    let restored = ws
        .run(&["sessions", "restore", &id, &head.to_string()])
        .assert_success();
    assert!(
        restored
            .stdout
            .contains("the view went from 9 messages to 10"),
        "{restored:#?}"
    );
    assert_eq!(ws.load(&id).transcript(), before.transcript());
}

#[test]
fn compact_with_keep_turns_zero_summarises_everything_and_an_empty_session_has_nothing() {
    let ws = Workspace::new();
    let id = ws.run(&["run", "calc 1+1"]).assert_success().session_id();
    let out = ws
        .run(&["sessions", "compact", &id, "--keep-turns", "0"])
        .assert_success();
    assert!(
        out.stdout.contains(
            "its first 4 messages became a summary of 1 message; the view went from 4 to 1 message"
        ),
        "{out:#?}"
    );
    assert_eq!(ws.load(&id).transcript().len(), 1);

    // A session with no messages has nothing to compact, whatever is kept.
    ws.run(&["sessions", "rewind", &id, "--to-message", "0"])
        .assert_success();
    let files = ws.stored_files();
    let out = ws.run(&["sessions", "compact", &id, "--keep-turns", "0"]);
    out.assert_failure(
        1,
        &[
            "its view holds 0 messages in 0 turns",
            "nothing was compacted",
        ],
    );
    assert!(!out.stderr.contains("hint: --keep-turns"), "{out:#?}");
    assert_eq!(ws.stored_files(), files);
}

#[test]
fn compact_with_the_openai_engine_asks_the_model_for_the_summary_and_counts_its_usage() {
    let (ws, id) = workspace_with_two_turns();
    let before = ws.load(&id);
    let stub = Stub::start(vec![Box::new(|_| {
        let answer = json!({"role": "assistant", "content": "The user computed 1+1 = 2."});
        (200, completion(&answer, 120, 9))
    })]);
    let out = run_command(http_command(
        &ws,
        &stub,
        &["sessions", "compact", &id, "--keep-turns", "1"],
    ))
    .assert_success();
    assert!(
        out.stdout.contains(&format!(
            "compacted session {id}, now revision 7: its first 4 messages became a summary of 1 message; the view went from 8 to 5 messages\n\
             the summary was written by the model stub-model (120 input + 9 output tokens, cost $0.000138, counted in the session's usage)\n  \
             Summary of the 4 earlier messages (written by stub-model):\n  \
             The user computed 1+1 = 2.\n"
        )),
        "{out:#?}"
    );

    // One request: the replaced messages as text, the instructions, no tools.
    let requests = stub.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["model"], "stub-model");
    assert!(body.get("tools").is_none(), "{body}");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{body}");
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .is_some_and(|s| s.contains("summary")),
        "{body}"
    );
    let asked = messages[1]["content"].as_str().expect("a text prompt");
    assert!(
        asked.starts_with("Summarise this conversation:\n\nuser: calc 1+1\n\nassistant: [calls the tool calculator with {\"expression\":\"1+1\"}]\n\ntool: [tool result: 2]\n\nassistant: 1+1 = 2"),
        "{asked}"
    );
    assert!(
        !asked.contains("2*3"),
        "only the replaced messages: {asked}"
    );

    let compacted = ws.load(&id);
    assert_eq!(
        compacted.transcript()[0].text(),
        "Summary of the 4 earlier messages (written by stub-model):\nThe user computed 1+1 = 2."
    );
    assert_eq!(&compacted.transcript()[1..], &before.transcript()[4..]);
    assert_eq!(compacted.usage().len(), before.usage().len() + 1);
    let usage = compacted.usage().last().expect("the compaction's usage");
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.model.as_str()
        ),
        (120, 9, "stub-model-2025")
    );
    assert_eq!(
        compacted.totals().cost.as_nano_usd(),
        before.totals().cost.as_nano_usd() + 138_000
    );
    assert_eq!(
        compacted.options().model,
        "scripted",
        "the session's model is not changed"
    );

    // A failed summary call changes nothing.
    let files = ws.stored_files();
    let stub = Stub::start(vec![Box::new(|_| {
        (500, json!({"error": {"message": "summariser down"}}))
    })]);
    let out = run_command(http_command(
        &ws,
        &stub,
        &["sessions", "compact", &id, "--keep-turns", "1"],
    ));
    out.assert_failure(
        1,
        &[
            &format!("error: could not write a summary for session {id}: HTTP 500"),
            "summariser down",
            "\nnothing was compacted",
        ],
    );
    assert!(out.stdout.is_empty(), "{out:#?}");
    assert_eq!(stub.requests().len(), 1);
    assert_eq!(ws.stored_files(), files);
}

#[test]
fn restore_in_chat_undoes_an_undo_and_history_lists_the_revisions() {
    let ws = Workspace::new();
    let out = ws
        .run_with_input(
            &["chat"],
            "/restore 1\n/history\ncalc 1+1\ncalc 2*3\n/undo\n/history\n/restore 6\nwhat did I ask before?\n/restore 99\n/restore x\n/restore\n/restore 1 2\n",
        )
        .assert_success();
    let id = out.session_id();
    assert!(
        out.stdout
            .contains(&format!("nothing to restore: session {id} was never saved")),
        "{out:#?}"
    );
    assert!(
        out.stdout.contains(&format!(
            "session {id} was never saved: it has no revisions yet"
        )),
        "{out:#?}"
    );
    let undone = line_index(
        &out.stdout,
        "undone: dropped 4 messages (1 turn: \"calc 2*3\"), 4 messages remain; saved as revision 7 (/restore 6 brings it back)",
    );
    let listed = line_index(&out.stdout, "rewind          4  the head");
    let restored = line_index(
        &out.stdout,
        "restored revision 6: the view went from 4 to 8 messages; saved as revision 8",
    );
    let recalled = line_index(&out.stdout, "2. calc 2*3");
    assert!(
        undone < listed && listed < restored && restored < recalled,
        "{out:#?}"
    );
    assert!(
        out.stderr.contains(&format!(
            "error: session {id} has no revision 99: its store keeps revisions 1 to 9\nhint: /history lists the revisions it keeps\nnothing was restored"
        )),
        "{out:#?}"
    );
    assert_eq!(
        out.stderr.matches("usage: /restore REV").count(),
        3,
        "{out:#?}"
    );
    let stored = ws.load(&id);
    assert_eq!(
        user_prompts(&stored),
        ["calc 1+1", "calc 2*3", "what did I ask before?"]
    );

    let help = ws.run_with_input(&["chat"], "/help\n").assert_success();
    assert!(help.stdout.contains("/restore REV"), "{help:#?}");
    assert!(help.stdout.contains("/history"), "{help:#?}");
}

#[test]
fn history_commands_on_a_missing_session_or_store_are_errors_and_create_nothing() {
    let ws = Workspace::new();
    for args in [
        &["sessions", "history", "nobody"][..],
        &["sessions", "history", "nobody", "--messages"],
        &["sessions", "show", "nobody", "--at", "1"],
        &["sessions", "restore", "nobody", "1"],
        &["sessions", "compact", "nobody"],
    ] {
        ws.run(args).assert_failure(
            1,
            &[
                "error: session nobody not found",
                "hint: `agent-session sessions list` shows the saved sessions",
            ],
        );
    }
    assert!(!ws.store_dir().exists(), "no store folder was created");

    let (ws, _, before) = workspace_with_a_session();
    for args in [
        &["sessions", "history", "Bad/Id"][..],
        &["sessions", "show", "Bad/Id", "--at", "1"],
        &["sessions", "restore", "Bad/Id", "1"],
        &["sessions", "compact", "Bad/Id"],
    ] {
        ws.run(args).assert_failure(1, &["invalid session id"]);
    }
    for args in [
        &["sessions", "history", "nobody"][..],
        &["sessions", "restore", "nobody", "1"],
        &["sessions", "compact", "nobody"],
    ] {
        ws.run(args)
            .assert_failure(1, &["session nobody not found"]);
    }
    assert_eq!(ws.stored_files(), before);
}

#[test]
fn help_documents_the_history_commands() {
    let ws = Workspace::new();
    let help = ws.run(&["--help"]).assert_success().stdout;
    for needle in [
        "sessions history",
        "sessions show 0190c3e2-... --at 6",
        "sessions restore",
        "sessions compact",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let sessions_help = ws.run(&["sessions", "--help"]).assert_success().stdout;
    for needle in ["history", "restore", "compact"] {
        assert!(sessions_help.contains(needle), "{sessions_help}");
    }
    for (args, needles) in [
        (
            &["sessions", "list", "--help"][..],
            &[
                "HIST",
                "R it was rewound",
                "C compacted",
                "S an earlier revision",
            ][..],
        ),
        (
            &["sessions", "history", "--help"],
            &["--messages", "checkpoint", "sessions show ID --at REV"],
        ),
        (&["sessions", "show", "--help"], &["--at <REV>"]),
        (
            &["sessions", "restore", "--help"],
            &["<REV>", "new revision", "/restore REV"],
        ),
        (
            &["sessions", "compact", "--help"],
            &[
                "--keep-turns <N>",
                "[default: 2]",
                "without a model",
                "usage",
            ],
        ),
        (&["chat", "--help"], &["/restore REV", "/history"]),
    ] {
        let out = ws.run(args).assert_success().stdout;
        for needle in needles {
            assert!(out.contains(needle), "{args:?} lacks {needle:?}:\n{out}");
        }
    }
}

#[test]
fn history_messages_of_a_session_saved_once_list_its_whole_view() {
    let ws = Workspace::new();
    let snapshot = SessionSnapshot::builder(SessionId::parse("once").expect("id"), "scripted")
        .transcript(vec![
            Message::user("first prompt"),
            Message::assistant(vec![ContentBlock::text("first answer")]),
        ])
        .build()
        .expect("a valid snapshot");
    ws.store()
        .save(&snapshot)
        .expect("save through the library");
    let out = ws
        .run(&["sessions", "history", "once", "--messages"])
        .assert_success();
    assert!(
        out.stdout
            .contains("2 messages in the history since revision 1, 2 in the view:\n"),
        "{out:#?}"
    );
    assert!(
        out.stdout
            .contains("    1  in view #0        user       first prompt\n    1  in view #1        assistant  first answer\n"),
        "{out:#?}"
    );
}

/// `--resume` opens the session for writing under a lease: a session another process has
/// open is refused, naming it and pointing at `--take-over`; `sessions list` shows who has
/// it open; `--take-over` takes it, and the other process's later saves are refused.
#[test]
fn resume_refuses_a_session_open_elsewhere_unless_taken_over() {
    let ws = Workspace::new();
    let id = ws.run(&["run", "calc 1+1"]).assert_success().session_id();
    let session = SessionId::parse(&id).expect("id");
    // This test's process holds the session open (its store keeps the lease's lock).
    let holder_store = ws.store();
    let holder = agent_session::LeaseHolder::this_process("other-agent");
    let lease = holder_store
        .acquire_lease(&session, &agent_session::LeaseRequest::new(holder.clone()))
        .expect("lease");
    let loaded = holder_store.load(&session).expect("load");

    let refused = ws.run(&["run", "--resume", &id, "calc 2*3"]);
    refused.assert_failure(
        1,
        &[
            &format!("session {id} is open for writing by {holder}"),
            "--take-over",
        ],
    );
    assert_eq!(ws.load(&id).transcript().len(), 4, "nothing was written");

    let listed = ws.run(&["sessions", "list"]).assert_success();
    assert!(
        listed_line(&listed.stdout, &id).contains(&format!("[open by {holder} since ")),
        "{listed:#?}"
    );

    ws.run(&["run", "--resume", &id, "--take-over", "calc 2*3"])
        .assert_success();
    assert_eq!(ws.load(&id).transcript().len(), 8);
    let stale = loaded
        .clone()
        .with_appended(vec![Message::user("late")], Vec::new(), loaded.updated_at())
        .expect("appended")
        .with_lease(&lease);
    assert!(matches!(
        holder_store.save(&stale),
        Err(agent_session::Error::Fenced { .. })
    ));
    // The agent's own lease ended with its process: the session resumes again.
    ws.run(&["run", "--resume", &id, "calc 3*4"])
        .assert_success();
    let listed = ws.run(&["sessions", "list"]).assert_success();
    assert!(
        !listed_line(&listed.stdout, &id).contains("[open by"),
        "{listed:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// Issue 18: a SQLite store, `--store sqlite:PATH`
// ---------------------------------------------------------------------------------------

impl Workspace {
    /// Runs the agent on the store `store` (by `--store`, as written).
    fn run_on_store(&self, store: &str, args: &[&str]) -> Out {
        let mut all = vec!["--store", store];
        all.extend_from_slice(args);
        self.run(&all)
    }
}

/// The session `id` of the SQLite database `db`, read through the library.
fn load_from_sqlite(db: &Path, id: &str) -> SessionSnapshot {
    SqliteSessionStore::open(db)
        .expect("the database opens")
        .load(&SessionId::parse(id).expect("a valid id"))
        .expect("the session loads")
}

#[test]
fn a_sqlite_store_keeps_the_sessions_of_every_command_in_a_private_database_file() {
    let ws = Workspace::new();
    // Relative to the working directory, in a folder the store creates.
    let store = "sqlite:db/sessions.db";
    let db = ws.path().join("db").join("sessions.db");

    // A command that only reads creates nothing.
    let out = ws
        .run_on_store(store, &["sessions", "list"])
        .assert_success();
    assert_eq!(out.stdout, "no saved sessions in sqlite:db/sessions.db\n");
    assert!(!ws.path().join("db").exists());

    let id = ws
        .run_on_store(store, &["run", "calc 1+1"])
        .assert_success()
        .session_id();
    assert_eq!(file_mode(&db), 0o600, "the database is private");
    assert_eq!(file_mode(&ws.path().join("db")), 0o700, "and its folder");
    let out = ws
        .run_with_input(
            &["--store", store, "chat", "--resume", &id],
            "calc 2*3\n/exit\n",
        )
        .assert_success();
    assert!(out.stdout.contains("2*3 = 6"), "{out:#?}");

    let out = ws
        .run_on_store(store, &["sessions", "list"])
        .assert_success();
    assert_eq!(listed_ids(&out.stdout), [id.as_str()], "{out:#?}");
    let out = ws
        .run_on_store(store, &["sessions", "show", &id])
        .assert_success();
    for needle in ["calc 1+1", "1+1 = 2", "calc 2*3", "2*3 = 6"] {
        assert!(
            out.stdout.contains(needle),
            "show lacks {needle:?}: {out:#?}"
        );
    }
    assert_eq!(
        user_prompts(&load_from_sqlite(&db, &id)),
        ["calc 1+1", "calc 2*3"]
    );

    // The history commands work on it too: a rewind is a revision the history lists.
    ws.run_on_store(store, &["sessions", "rewind", &id])
        .assert_success();
    let out = ws
        .run_on_store(store, &["sessions", "history", &id])
        .assert_success();
    let kinds: Vec<String> = revision_rows(&out.stdout)
        .into_iter()
        .map(|row| row.1)
        .collect();
    assert_eq!(kinds.last().map(String::as_str), Some("rewind"), "{out:#?}");
    assert_eq!(user_prompts(&load_from_sqlite(&db, &id)), ["calc 1+1"]);

    let out = ws
        .run_on_store(store, &["sessions", "migrate"])
        .assert_success();
    assert!(
        out.stdout.starts_with("the SQLite session store sqlite:/")
            && out.stdout.contains("db/sessions.db is ready"),
        "{out:#?}"
    );
    assert!(!ws.store_dir().exists(), "the default folder was not used");
}

#[test]
fn a_sqlite_store_can_be_named_by_the_environment_with_a_path_in_home() {
    let ws = Workspace::new();
    let home = ws.path().join("home");
    std::fs::create_dir(&home).expect("mkdir");
    let mut command = ws.command(&["run", "hello"]);
    command
        .env("AGENT_SESSION_STORE", "sqlite:~/.agent-session/s.db")
        .env("HOME", &home);
    let id = run_command(command).assert_success().session_id();
    let db = home.join(".agent-session").join("s.db");
    assert_eq!(file_mode(&db), 0o600);
    assert_eq!(user_prompts(&load_from_sqlite(&db, &id)), ["hello"]);
    assert!(!ws.path().join("~").exists(), "no folder named ~");
    assert!(!ws.store_dir().exists(), "the default folder was not used");
}

#[test]
fn a_sqlite_store_refuses_a_schema_a_missing_path_and_a_folder_open_to_others() {
    use std::os::unix::fs::PermissionsExt;

    let ws = Workspace::new();
    ws.run(&[
        "--store",
        "sqlite:s/x.db",
        "--schema",
        "team",
        "sessions",
        "list",
    ])
    .assert_failure(
        2,
        &[
            "--schema applies to a PostgreSQL store",
            "the SQLite database s/x.db",
        ],
    );
    ws.run(&["--store", "sqlite:", "run", "hi"]).assert_failure(
        2,
        &[
            "--store names a SQLite store without its path",
            "sqlite:PATH",
        ],
    );
    let mut command = ws.command(&["sessions", "list"]);
    command.env("AGENT_SESSION_STORE", "sqlite:");
    run_command(command).assert_failure(2, &["AGENT_SESSION_STORE names a SQLite store"]);
    ws.run(&["--store", "sqlite:s/", "run", "hi"])
        .assert_failure(2, &["the folder s/", "sqlite:s/sessions.db"]);
    assert!(!ws.path().join("s").exists(), "nothing was created");

    // A folder where the database file should be.
    std::fs::create_dir(ws.path().join("dir")).expect("mkdir");
    ws.run(&["--store", "sqlite:dir", "run", "hi"])
        .assert_failure(1, &["sqlite:dir is a folder, not a database file"]);

    // A folder others may write to: refused before anything is written in it.
    let open = ws.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    ws.run(&["--store", "sqlite:open/x.db", "run", "hi"])
        .assert_failure(
            1,
            &[
                "the SQLite session store sqlite:open/x.db cannot be used",
                "hint:",
            ],
        );
    assert!(!open.join("x.db").exists());
    assert!(!ws.store_dir().exists(), "the default folder was not used");
}

#[test]
fn help_says_how_to_name_a_sqlite_store() {
    let ws = Workspace::new();
    let help = ws.run(&["--help"]).assert_success().stdout;
    assert!(
        help.contains("sqlite:PATH"),
        "--help lacks sqlite:PATH:\n{help}"
    );
    let copy = ws.run(&["copy", "--help"]).assert_success().stdout;
    assert!(copy.contains("sqlite:PATH"), "{copy}");
    assert!(!copy.contains("not opened"), "{copy}");
}
