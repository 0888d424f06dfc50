//! Running the `agent-session` binary from the CLI's tests, with nothing from the
//! environment choosing its engine or store.
//!
//! Included with `#[path = "common/process.rs"] mod process;`.
#![allow(dead_code)] // each test binary uses part of it

use std::process::Command;

/// Environment variables that would change which engine, store or proxy the agent uses.
pub const SCRUBBED_ENV: &[&str] = &[
    "OPENAI_API_KEY",
    "AGENT_SESSION_API_KEY",
    "OPENAI_BASE_URL",
    "AGENT_SESSION_MODEL",
    "OPENAI_MODEL",
    "AGENT_SESSION_PRICES",
    "AGENT_SESSION_STORE",
    "AGENT_SESSION_SCHEMA",
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// `agent-session ARGS`, with [`SCRUBBED_ENV`] removed.
pub fn agent(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-session"));
    command.args(args);
    for name in SCRUBBED_ENV {
        command.env_remove(name);
    }
    command
}

/// Runs `agent-session ARGS` to its end: its exit code, stdout and stderr (which must
/// not tell of a panic).
pub fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let output = agent(args).output().expect("run agent-session");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr,
    )
}
