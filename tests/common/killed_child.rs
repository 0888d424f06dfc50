//! A child process killed at a chosen moment: the kill suites start their own test binary
//! again to run one test (the child, which works on a store and prints what it
//! acknowledges), let it work, kill it with SIGKILL, and read what it printed.
//!
//! Included by `tests/sqlite_kill.rs` and `tests/kill_lifecycle.rs` with `#[path]`.
#![allow(dead_code)] // each test binary uses part of it

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What a child prints, on its standard output, once it is ready to be killed.
const STARTED: &str = "child-started";

/// What a child prints, on its standard output, when one of its threads panics.
pub const CHILD_PANIC: &str = "child-panic";

/// For the child, once it is ready to work: says so to the parent ([`run_until_killed`]
/// waits for it), and makes every later panic print [`CHILD_PANIC`] and its message on the
/// standard output, which the parent reads (its standard error is not kept), so an error
/// in the child fails the test instead of quietly stopping one of its threads.
pub fn started() {
    std::panic::set_hook(Box::new(|info| println!("{CHILD_PANIC}: {info}")));
    println!("{STARTED}");
}

/// Runs test `child_test` of this test binary in a child process with `envs` set, waits
/// for it to say it [`started`] (each line within a minute), lets it run `delay`, kills it
/// with SIGKILL and returns every line it printed after that, in order.
///
/// # Errors
///
/// If the child never started, or printed [`CHILD_PANIC`].
pub fn run_until_killed(
    child_test: &str,
    envs: &[(&str, &OsStr)],
    delay: Duration,
) -> Result<Vec<String>, String> {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([child_test, "--exact", "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in envs {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("start the child");
    let stdout = child.stdout.take().expect("stdout");
    let (lines_tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let waited = loop {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.contains(STARTED) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(format!("the child never started ({e})")),
        }
    };
    if waited.is_ok() {
        std::thread::sleep(delay);
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    reader.join().expect("reader");
    waited?;
    let lines: Vec<String> = lines.try_iter().collect();
    match lines.iter().find(|line| line.starts_with(CHILD_PANIC)) {
        Some(panic) => Err(format!("the child panicked: {panic}")),
        None => Ok(lines),
    }
}
