//! `agent-session`: a command-line agent whose conversations continue across invocations.
//!
//! ```text
//! agent-session run "calc 2*(3+4)"
//! agent-session run --continue "what did I ask before?"
//! agent-session sessions list
//! agent-session chat --resume <ID>
//! agent-session sessions fork <ID> --at turn:1
//! agent-session sessions rewind <ID> --turns 1
//! agent-session sessions history <ID>
//! agent-session sessions restore <ID> <REV>
//! agent-session sessions compact <ID> --keep-turns 2
//! agent-session sessions prune --max-age 30d --dry-run
//! agent-session sessions prune --keep-revisions 50 --dry-run
//! agent-session sessions export <ID> -o backup.jsonl
//! agent-session copy --from .agent-session/sessions --to postgres:"host=db dbname=app"
//! agent-session --store sqlite:~/.agent-session/sessions.db sessions list
//! ```
//!
//! Installed with `cargo install --path cli` (from a checkout of the repository), or run
//! in place with `cargo run -q -p agent-session-cli -- ARGS`.
//!
//! Every conversation is a session of the `agent-session` crate, kept in a store the
//! library writes, which `--store` or `$AGENT_SESSION_STORE` names (and `copy --from/--to`,
//! written the same way):
//!
//! - a `FileSessionStore` folder: `.agent-session/sessions` under the current directory
//!   by default, or `DIR` or `file:DIR`;
//! - a `SqliteSessionStore` database file: `sqlite:PATH` (created, with its folder, if
//!   missing; the folder must be closed to other users);
//! - a `PostgresSessionStore`: a `postgres://` or `postgresql://` URL, or
//!   `postgres:CONNINFO` (a libpq connection string), as tokio-postgres reads them, in the
//!   schema `--schema` or `$AGENT_SESSION_SCHEMA` names (default `agent_session`).
//!
//! A relative path is relative to the current directory; a leading `~` or `~/` means
//! `$HOME` even where no shell expanded it, and `~NAME` is refused. Every command works on
//! any of them, through the `SessionStore` trait (see `store.rs`); messages name a SQLite
//! store as `sqlite:PATH` and a PostgreSQL store as `schema S of
//! postgresql://USER@HOST:PORT/DB`, never with its password. The PostgreSQL tables are
//! created only by `sessions migrate`; a folder and a SQLite database are created when a
//! command first writes to them. `chat`, `run` and `script`
//! start a new session, or continue one with `--resume ID` or the most recent one with
//! `--continue`; a resumed session is held under a lease while the command runs, so a
//! second process resuming it is refused unless it passes `--take-over`.
//! The session id is printed on stderr when a command starts (`session: ID (new)`).
//!
//! # A session's life
//!
//! `sessions fork ID --at message:N|turn:N|end` copies a session's first messages into a
//! new session (printing its id on stdout), recording the parent; `sessions list` shows it
//! as `fork of PARENT@N`. `sessions rewind ID` takes a session back in place: `--turns N`
//! drops its last N turns (1 without an option), `--to-message I` keeps its first I
//! messages; a point between a tool call and its result is refused, naming the valid
//! ones, and the dropped messages' usage stays counted. In `chat`, `/undo [N]` does the
//! same to the live session.
//!
//! Every save is a revision the store keeps (the library's history log): `sessions
//! history ID` lists them (time, kind of change, view length; `--messages` every message
//! with where it stands: in view, rewound, compacted or replaced), `sessions show ID --at
//! REV` prints the session as it was at one, and `sessions restore ID REV` makes that
//! state the head again as a new revision, which undoes a rewind or a compaction (in
//! `chat`, `/restore REV`; `/history` lists the revisions). `sessions compact ID
//! [--keep-turns N]` replaces the view's beginning by a summary, written by the model
//! with the OpenAI-compatible engine, or offline by a local compactor (the first line of
//! each prompt and answer); what it replaced stays in the history. `sessions list` marks
//! in its HIST column the sessions rewound (R), compacted (C) or restored (S).
//!
//! `sessions archive ID` hides a session from `sessions list` and
//! `--continue` (it still resumes by id; `--archived` and `--all` list it). `sessions prune`
//! deletes sessions past `--max-age`, beyond `--max-count` or over `--max-bytes`, and
//! drops the older revisions of the sessions it keeps beyond `--keep-revisions N` or past
//! `--history-max-age DURATION` (the head always stays; what only those revisions held
//! goes with them); with `--dry-run` it only says which. `sessions export ID... -o FILE`
//! writes a private (0600) bundle that `sessions import FILE` reads into another store,
//! all or nothing.
//!
//! # Engines
//!
//! - Offline (the default, no key or network needed): a deterministic scripted engine that
//!   calls real tools: `calculator` (a recursive-descent parser for `+ - * / ( )`),
//!   `read_file` (confined to the current directory: no absolute paths, no `..`, no
//!   symbolic links out of it) and `wait` (a slow tool). See `scripted.rs`.
//! - OpenAI-compatible HTTP, chosen when `OPENAI_API_KEY` (or `AGENT_SESSION_API_KEY`) is
//!   set: `POST $OPENAI_BASE_URL/chat/completions` (default `https://api.openai.com/v1`)
//!   with the model from `AGENT_SESSION_MODEL` or `OPENAI_MODEL` (default `gpt-4o-mini`),
//!   the transcript converted with `Message::to_openai_chat` and the tools. Optional
//!   `AGENT_SESSION_PRICES=IN,OUT` (dollars per million tokens) fills in the cost.
//!   `--engine scripted|openai` overrides the choice.
//!
//! # What is saved, and when
//!
//! The session is saved at every step of a turn (`Autosave::EveryStep`): before a step's
//! tools run, with their calls recorded as interrupted, and again once their results are
//! in. Each save appends only that step to the session's journal. **If the process is
//! killed mid-turn** (SIGKILL, a crash, a power cut), at most the step in flight is lost:
//! the completed steps are kept (the prompt is saved with the first of them), and a tool
//! that was running is recorded as interrupted. The next `--resume`/`--continue` says which calls were interrupted; they
//! are never run again by themselves (the model sees the interruption and may ask again).
//! Saves are atomic, so a kill during a save leaves the previous state whole.
//!
//! On Ctrl-C (SIGINT) or SIGTERM the agent does better than that: it drops the turn in
//! flight, which closes every tool call still running with an "interrupted" error result
//! (the call is never re-run), saves what the turn completed (the prompt, the model steps
//! that finished, the tool results that arrived), and exits with status 130. If the model
//! request fails (an HTTP error, for instance), the completed steps are saved the same way
//! and the command exits with status 1; in `chat` the conversation goes on.
//!
//! # Exit status
//!
//! 0 on success; 1 on an error (printed on stderr as `error: ...`); 2 on a usage error;
//! 130 after Ctrl-C or SIGTERM. `sessions list` exits with 1 when a stored file cannot be
//! read (a damaged snapshot, say): the readable sessions are still listed on stdout and
//! each unreadable file is named on stderr. `sessions prune` with no limit is a usage error
//! (it would delete nothing), and so is `--keep-revisions 0` (the head always stays);
//! sessions it kept because they were saved meanwhile are named on stderr and do not
//! change its status. A PostgreSQL store that cannot be reached, a malformed URL, a
//! schema whose tables were never created (`sessions migrate`), or a SQLite database in
//! a folder open to other users is an error (1) before the command does anything;
//! `--schema` with a folder or SQLite store, and `sqlite:` without a path, are usage
//! errors.

mod compaction;
mod copy;
mod display;
mod find;
mod history;
mod http;
mod lifecycle;
mod scripted;
mod store;
mod tools;

use std::fmt::Write as _;
use std::io::{self, BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agent_session::{
    Autosave, BoxError, CompactionPolicy, Completion, CompletionRequest, Engine, Error, ErrorKind,
    ForkAt, Harness, HistoryRetention, Lease, LeaseHolder, LeaseRequest, ListCursor, ListScope,
    Message, PrunePolicy, Revision, RewindTo, Role, Session, SessionId, SessionList,
    SessionOptions, SessionPage, StopReason,
};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::display::{escape_controls, Keep, Shown};
use crate::http::{HttpConfig, HttpEngine};
use crate::scripted::ScriptedEngine;
use crate::store::{Store, StoreAt, StoreSpec};
use crate::tools::Tools;

/// Exit status after Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
const INTERRUPTED_STATUS: u8 = 130;
/// Exit status of a usage error (as clap exits with for the ones it finds).
const USAGE_STATUS: u8 = 2;
const SYSTEM_PROMPT: &str = "You are a helpful agent in a terminal. Use the calculator for \
    arithmetic and read_file to look at files in the workspace. Be brief.";

const EXAMPLES: &str = "\
Examples:
  agent-session run \"calc 2*(3+4)\"                        start a session with one prompt
  agent-session run --continue \"what did I ask before?\"   continue the most recent session
  agent-session chat --resume 0190c3e2-...                continue a session interactively
  agent-session script prompts.txt                        one prompt per line, in one session
  agent-session sessions list                             newest first
  agent-session sessions list --limit 20                  one page; prints how to get the next
  agent-session sessions show 0190c3e2-...                the transcript, tool calls with results
  agent-session sessions fork 0190c3e2-... --at turn:2    a new session with its first 2 turns
  agent-session sessions rewind 0190c3e2-...              drop its last turn (--turns N, --to-message I)
  agent-session sessions history 0190c3e2-...             its revisions (--messages: every message)
  agent-session sessions show 0190c3e2-... --at 6         the session as it was at revision 6
  agent-session sessions restore 0190c3e2-... 6           make revision 6 the head again (undo a rewind)
  agent-session sessions compact 0190c3e2-...             summarise all but its last 2 turns
  agent-session sessions archive 0190c3e2-...             hide it from the list (still resumes)
  agent-session sessions list --all                       archived sessions too
  agent-session sessions list --where project=parser      sessions whose metadata says so
  agent-session sessions search \"lock bug\"              where those words were said
  agent-session sessions prune --max-age 30d --dry-run    what pruning would delete
  agent-session sessions prune --keep-revisions 50        drop all but each session's last 50 revisions
  agent-session sessions export 0190c3e2-... -o s.jsonl   a private (0600) bundle file
  agent-session sessions import s.jsonl                   into this store (--new-ids: renamed)
  agent-session copy --from DIR --to postgres:CONNINFO    every session, with its history
  agent-session copy --from DIR --to sqlite:db/s.db       the same, into a SQLite database

A SQLite store: sqlite:PATH instead of a folder, in any command. PATH is the database
file (created 0600 if missing), in a folder closed to other users (created 0700 if
missing; the current directory, which others can usually read, will not do):
  agent-session --store sqlite:~/.agent-session/sessions.db run \"calc 1+1\"

A PostgreSQL store: a postgres:// or postgresql:// URL (or postgres:CONNINFO, a libpq
connection string) instead of a folder, in any command (a password in it is never
printed; messages name the store without it):
  export AGENT_SESSION_STORE=postgresql://app@db.internal/app
  agent-session sessions migrate                          create its tables, once
  agent-session sessions list                             the sessions in schema agent_session
  agent-session --schema team_a run \"calc 1+1\"            a session in another schema

The session id is printed on stderr when a command starts. Sessions are saved at every
step of a turn; if the agent is killed or interrupted mid-turn, the tool calls that were
running are recorded as interrupted (and named on the next resume), never run again.

Environment:
  AGENT_SESSION_STORE                    the store, written as for --store (a folder,
                                         sqlite:PATH or a PostgreSQL URL; ~/ means $HOME);
                                         a URL with a password is better here than in
                                         --store, which other users see in ps
  AGENT_SESSION_SCHEMA                   the schema of a PostgreSQL store (like --schema)
  OPENAI_API_KEY, AGENT_SESSION_API_KEY  use the OpenAI-compatible engine
  OPENAI_BASE_URL                        its endpoint [default: https://api.openai.com/v1]
  AGENT_SESSION_MODEL, OPENAI_MODEL      its model [default: gpt-4o-mini]
  AGENT_SESSION_PRICES=IN,OUT            dollars per million input/output tokens";

const LIST_HELP: &str = "\
HIST says what a session's history holds beyond its view (what the model is sent), one
letter each: R it was rewound, C compacted, S an earlier revision was restored. The
messages taken out stay in the history: `sessions history ID` lists its revisions.

Other marks after the title: [archived], [fork of PARENT@N] (a fork that started with
the first N messages of PARENT), [updated in the future: ...] (a clock was ahead).";

const MIGRATE_HELP: &str = "\
A PostgreSQL store (--store postgres://...) is used only once its tables exist: run this
once per database and schema, with a user allowed to create them. It is safe to run again
(and from several machines at once); it changes no session. Other commands never create
the tables: they say so when they are missing.

For a folder store it only creates the folder if it is missing. A SQLite store
(--store sqlite:PATH) needs no migration either: opening it creates the database and its
tables, or brings older tables up to date, in any command; this only does it now.

Example:
  agent-session --store postgresql://app@db.internal/app --schema team_a sessions migrate";

const LONG_ABOUT: &str = "\
A command-line agent whose conversations continue across runs.

Chat, run one prompt or a script of prompts; pick the session up again later with
--resume ID or --continue. Runs offline with a scripted engine (calculator, file reader),
or against an OpenAI-compatible API when OPENAI_API_KEY is set.";

/// The command line.
#[derive(Parser)]
#[command(
    name = "agent-session",
    version,
    about = "A command-line agent whose conversations continue across runs",
    long_about = LONG_ABOUT,
    after_help = EXAMPLES
)]
struct Cli {
    #[arg(
        long,
        global = true,
        value_name = "STORE",
        help = "Where sessions are saved: a folder (DIR or file:DIR), a SQLite database file (sqlite:PATH), or a PostgreSQL database (a postgres:// or postgresql:// URL, or postgres:CONNINFO); a relative path is relative to the current directory, a leading ~/ means $HOME [default: $AGENT_SESSION_STORE, else .agent-session/sessions]"
    )]
    store: Option<PathBuf>,

    #[arg(
        long,
        global = true,
        value_name = "NAME",
        help = "With a PostgreSQL --store: the schema holding the sessions [default: $AGENT_SESSION_SCHEMA, else agent_session]"
    )]
    schema: Option<String>,

    /// Which engine answers (auto: openai if an API key is set, else scripted)
    #[arg(long, global = true, value_enum, default_value_t = EngineChoice::Auto)]
    engine: EngineChoice,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EngineChoice {
    Auto,
    Scripted,
    Openai,
}

#[derive(Subcommand)]
enum Command {
    /// Chat interactively: one prompt per line; /undo [N] drops the last turns, /restore REV goes back to a revision, /history lists them, /sessions lists sessions, /exit (or EOF) leaves
    Chat {
        #[command(flatten)]
        resume: ResumeArgs,
    },
    /// Send one prompt, print the reply, save and exit
    Run {
        #[command(flatten)]
        resume: ResumeArgs,
        /// The prompt
        prompt: String,
    },
    /// Send each non-empty line of FILE as a prompt, in order, in one session
    Script {
        #[command(flatten)]
        resume: ResumeArgs,
        /// A text file with one prompt per line
        file: PathBuf,
    },
    /// List, show, fork, rewind, restore, compact, archive, prune, export, import or delete saved sessions, see their history (and migrate a PostgreSQL store)
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Copy every session of one store into another (folder, SQLite, PostgreSQL), with its whole history
    #[command(after_help = copy::COPY_HELP)]
    Copy {
        #[arg(
            long,
            value_name = "STORE",
            help = "The store to copy from: DIR, file:DIR, sqlite:PATH, postgres:CONNINFO or a postgres:// URL"
        )]
        from: std::ffi::OsString,
        #[arg(
            long,
            value_name = "STORE",
            help = "The store to copy into (a folder or SQLite database is created if missing): same forms as --from"
        )]
        to: std::ffi::OsString,
        #[arg(
            long,
            value_name = "NAME",
            help = "With a PostgreSQL --from: its schema [default: $AGENT_SESSION_SCHEMA, else agent_session]"
        )]
        from_schema: Option<String>,
        #[arg(
            long,
            value_name = "NAME",
            help = "With a PostgreSQL --to: its schema [default: $AGENT_SESSION_SCHEMA, else agent_session]"
        )]
        to_schema: Option<String>,
        /// Copy only this session (repeat for more); parents still go before their forks
        #[arg(long, value_name = "ID")]
        only: Vec<String>,
        /// Leave the sessions the target already holds as they are, and copy the others
        #[arg(long)]
        skip_existing: bool,
        /// Print what would be copied, and write nothing
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Args)]
struct ResumeArgs {
    /// Continue the saved session with this id
    #[arg(long, value_name = "ID", conflicts_with = "continue_latest")]
    resume: Option<String>,

    /// Continue the most recently updated session
    #[arg(short = 'c', long = "continue")]
    continue_latest: bool,

    /// Take the session over even if another process has it open (its later saves are
    /// refused); for a process that is gone or hung
    #[arg(long)]
    take_over: bool,
}

/// The limits and options of `sessions prune`.
#[derive(Args)]
struct PruneArgs {
    /// Delete sessions not updated for this long: 45s, 90m, 12h, 30d
    #[arg(long, value_name = "DURATION", value_parser = lifecycle::parse_duration)]
    max_age: Option<std::time::Duration>,
    /// Keep at most N sessions, the most recently updated
    #[arg(long, value_name = "N")]
    max_count: Option<usize>,
    /// Keep at most SIZE bytes of sessions, the most recently updated: 500, 10K, 20M, 1G (1K = 1024)
    #[arg(long, value_name = "SIZE", value_parser = lifecycle::parse_size)]
    max_bytes: Option<u64>,
    /// Keep at most N revisions of each session that stays, the head included (at least 1)
    #[arg(long, value_name = "N", value_parser = lifecycle::parse_keep_revisions)]
    keep_revisions: Option<usize>,
    /// Drop the revisions saved longer ago than this from each session that stays (the head stays): 45s, 90m, 12h, 30d
    #[arg(long, value_name = "DURATION", value_parser = lifecycle::parse_duration)]
    history_max_age: Option<std::time::Duration>,
    /// Apply the limits to archived sessions only; active ones are neither counted, deleted nor trimmed
    #[arg(long)]
    archived_only: bool,
    /// Print what would be deleted and dropped, and change nothing
    #[arg(long)]
    dry_run: bool,
}

#[derive(Subcommand)]
enum SessionsCommand {
    /// Saved sessions, newest first: id, last update, messages, cost, history marks, title (and a fork's parent)
    #[command(after_help = LIST_HELP)]
    List {
        /// Show at most N sessions; the command to see the next ones is printed on stderr
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Start after this cursor (printed with the previous page)
        #[arg(long, value_name = "CURSOR", requires = "limit")]
        after: Option<String>,
        /// Show only archived sessions
        #[arg(long, conflicts_with = "all")]
        archived: bool,
        /// Show archived sessions too, marked [archived]
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        filters: find::ListFilters,
    },
    /// Sessions where every word of QUERY was said (their whole history), newest first
    Search(find::SearchArgs),
    /// A session's transcript, each tool call shown with its result (--at REV: as it was at that revision)
    Show {
        /// The session id
        id: String,
        /// Show the session exactly as it was at revision REV (`sessions history ID` lists them)
        #[arg(long, value_name = "REV", value_parser = history::parse_revision)]
        at: Option<Revision>,
    },
    /// A session's revisions: when each was saved, what it changed, how long the view was
    #[command(after_help = history::HISTORY_HELP)]
    History {
        /// The session id
        id: String,
        /// Also list every message of the history, with where it stands (in view, rewound, compacted, replaced)
        #[arg(long)]
        messages: bool,
    },
    /// Make an earlier revision's state the head again, as a new revision (undoes a rewind or a compaction)
    #[command(after_help = history::RESTORE_HELP)]
    Restore {
        /// The session id
        id: String,
        /// The revision to go back to (`sessions history ID` lists them)
        #[arg(value_name = "REV", value_parser = history::parse_revision)]
        revision: Revision,
    },
    /// Replace the beginning of a session's view by a summary; what it replaces stays in the history
    #[command(after_help = history::COMPACT_HELP)]
    Compact {
        /// The session id
        id: String,
        /// How many of the last turns stay as they are after the summary
        #[arg(long, value_name = "N", default_value_t = CompactionPolicy::default().keep_last_turns)]
        keep_turns: usize,
    },
    /// Delete a saved session
    Delete {
        /// The session id
        id: String,
    },
    /// Start a new session from a copy of a session's history, up to a point
    #[command(after_help = lifecycle::FORK_HELP)]
    Fork {
        /// The session to fork (it is not changed)
        id: String,
        /// Where to cut: message:N keeps the first N messages, turn:N the first N turns, end all of them
        #[arg(long, value_name = "POINT", default_value = "end", value_parser = lifecycle::parse_fork_at)]
        at: ForkAt,
        /// The new session's id [default: a generated one]
        #[arg(long = "as", value_name = "NEW_ID")]
        new_id: Option<String>,
    },
    /// Take a session back to an earlier point: drop its last turns (the /undo of `chat`)
    #[command(after_help = lifecycle::REWIND_HELP)]
    Rewind {
        /// The session to rewind
        id: String,
        /// Drop the last N turns (a turn starts at a prompt) [default: 1]
        #[arg(long, value_name = "N", value_parser = lifecycle::parse_turns, conflicts_with = "to")]
        turns: Option<usize>,
        /// Keep the first I messages and drop the rest, instead of counting turns
        #[arg(long = "to-message", value_name = "I")]
        to: Option<usize>,
    },
    /// Hide a session from `sessions list` and --continue; it still resumes with --resume ID
    Archive {
        /// The session id
        id: String,
    },
    /// Bring an archived session back into `sessions list`
    Unarchive {
        /// The session id
        id: String,
    },
    /// Delete sessions past a maximum age, beyond a maximum count or over a total size; drop old revisions of the others
    #[command(after_help = lifecycle::PRUNE_HELP)]
    Prune(PruneArgs),
    /// Write sessions to one bundle file that `sessions import` reads, here or elsewhere
    Export {
        /// The sessions to export
        #[arg(value_name = "ID", required = true)]
        ids: Vec<String>,
        /// Write the bundle to FILE, created readable by you only (0600), instead of stdout
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        /// Replace FILE if it exists (otherwise an existing FILE is an error)
        #[arg(long, requires = "output")]
        force: bool,
    },
    /// Add the sessions of a bundle (from `sessions export`), or a snapshot file, to this store
    Import {
        /// The bundle, or - to read it from stdin
        file: PathBuf,
        /// Give every imported session a new id (by default the bundle's ids are kept, and
        /// an id already in the store refuses the whole import)
        #[arg(long)]
        new_ids: bool,
    },
    /// Create a PostgreSQL store's schema and tables, or bring them up to date (a folder or SQLite store needs none)
    #[command(after_help = MIGRATE_HELP)]
    Migrate,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let status = runtime.block_on(async {
        match dispatch(cli).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(Failure::Interrupted) => ExitCode::from(INTERRUPTED_STATUS),
            // Messages quote paths, stored text and servers' replies.
            Err(Failure::Error(message)) => {
                eprintln!("error: {}", escape_controls(&message, Keep::LinesAndTabs));
                ExitCode::FAILURE
            }
            Err(Failure::Usage(message)) => {
                eprintln!("error: {}", escape_controls(&message, Keep::LinesAndTabs));
                ExitCode::from(USAGE_STATUS)
            }
        }
    });
    // After Ctrl-C a model request may still be running on a blocking thread, and the
    // stdin reader may be waiting for a line; everything is saved, so do not wait for them.
    runtime.shutdown_background();
    let _ = io::stdout().flush();
    status
}

/// Why a command did not succeed.
enum Failure {
    /// Printed as `error: ...`; exit status 1.
    Error(String),
    /// A command line that parses but makes no sense; printed as `error: ...`, exit status 2.
    Usage(String),
    /// Ctrl-C or SIGTERM, already reported; exit status 130.
    Interrupted,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let mut message = chain(&e);
        match e.kind() {
            ErrorKind::NotFound
                if !matches!(e, Error::NoSessions | Error::RevisionNotFound { .. }) =>
            {
                message.push_str("\nhint: `agent-session sessions list` shows the saved sessions");
            }
            ErrorKind::Corrupt => {
                message.push_str(
                    "\nhint: the other sessions are unaffected; `agent-session sessions delete ID` removes this one",
                );
            }
            _ => {}
        }
        if let Some(hint) = store::missing_tables_hint(&e) {
            message.push('\n');
            message.push_str(hint);
        }
        Failure::Error(message)
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Error(message)
    }
}

/// An error and its sources, joined with `: `, on one line with control characters
/// escaped: errors quote what files and servers hold (an unknown field's name, a reply's
/// body), and a newline there must not pass for a line of the agent's own.
fn chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    escape_controls(&message, Keep::Nothing).into_owned()
}

async fn dispatch(cli: Cli) -> Result<(), Failure> {
    // `copy` names its two stores itself; --store and --schema do not apply.
    if let Command::Copy {
        from,
        to,
        from_schema,
        to_schema,
        only,
        skip_existing,
        dry_run,
    } = cli.command
    {
        if cli.store.is_some() || cli.schema.is_some() {
            return Err(Failure::Usage(
                "copy takes its stores from --from and --to (and their schemas from --from-schema and --to-schema), not --store or --schema".to_owned(),
            ));
        }
        return copy::copy(copy::CopyArgs {
            from,
            to,
            from_schema,
            to_schema,
            only,
            skip_existing,
            dry_run,
        });
    }
    let spec = StoreSpec::from_command_line(cli.store, cli.schema)?;
    match cli.command {
        Command::Sessions(command) => sessions(&spec, command, cli.engine).await,
        Command::Copy { .. } => unreachable!("copy is dispatched above"),
        Command::Chat { resume } => {
            let app = App::new(&spec, cli.engine)?;
            app.chat(&resume).await
        }
        Command::Run { resume, prompt } => {
            if prompt.trim().is_empty() {
                return Err("the prompt is empty".to_owned().into());
            }
            let app = App::new(&spec, cli.engine)?;
            app.run(&resume, &[prompt], false).await
        }
        Command::Script { resume, file } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("could not read the script {}: {e}", file.display()))?;
            let prompts: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(str::to_owned)
                .collect();
            if prompts.is_empty() {
                return Err(format!("the script {} has no prompts", file.display()).into());
            }
            let app = App::new(&spec, cli.engine)?;
            app.run(&resume, &prompts, true).await
        }
    }
}

/// `sessions ...`: only `import` creates the store folder. `engine` chooses who writes
/// the summary of `sessions compact`.
async fn sessions(
    spec: &StoreSpec,
    command: SessionsCommand,
    engine: EngineChoice,
) -> Result<(), Failure> {
    match command {
        SessionsCommand::List {
            limit,
            after,
            archived,
            all,
            filters,
        } => {
            let scope = match (archived, all) {
                (true, _) => ListScope::Archived,
                (false, true) => ListScope::All,
                (false, false) => ListScope::Active,
            };
            if filters.any() {
                return find::list_filtered(spec, scope, &filters, limit, after);
            }
            list(spec.open_existing()?.as_ref(), spec, scope, limit, after)
        }
        SessionsCommand::Search(args) => find::search(spec, &args),
        SessionsCommand::Show { id, at: None } => {
            let (store, id) = existing_session(spec, &id)?;
            print!(
                "{}",
                display::transcript(&store.sessions().load(&id)?, Shown::Head)
            );
            Ok(())
        }
        SessionsCommand::Show { id, at: Some(at) } => {
            let (store, id) = existing_session(spec, &id)?;
            history::show_at(store.sessions(), &id, at)
        }
        SessionsCommand::History { id, messages } => {
            let (store, id) = existing_session(spec, &id)?;
            history::history(store.sessions(), &id, messages)
        }
        SessionsCommand::Restore { id, revision } => {
            let (store, id) = existing_session(spec, &id)?;
            history::restore(store.sessions(), &id, revision)
        }
        SessionsCommand::Compact { id, keep_turns } => {
            let engine = http_engine(engine)?;
            let (store, id) = existing_session(spec, &id)?;
            history::compact(&store, &id, keep_turns, engine).await
        }
        SessionsCommand::Delete { id } => {
            let (store, id) = existing_session(spec, &id)?;
            store.sessions().delete(&id)?;
            println!("deleted session {id}");
            Ok(())
        }
        SessionsCommand::Fork { id, at, new_id } => {
            let new_id = new_id.map(|id| SessionId::parse(&id)).transpose()?;
            let (store, id) = existing_session(spec, &id)?;
            lifecycle::fork(store.sessions(), &id, at, new_id)
        }
        SessionsCommand::Rewind { id, turns, to } => {
            let (store, id) = existing_session(spec, &id)?;
            lifecycle::rewind(store.sessions(), &id, lifecycle::rewind_to(turns, to))
        }
        SessionsCommand::Archive { id } => {
            let (store, id) = existing_session(spec, &id)?;
            lifecycle::set_archived(store.sessions(), &id, true)
        }
        SessionsCommand::Unarchive { id } => {
            let (store, id) = existing_session(spec, &id)?;
            lifecycle::set_archived(store.sessions(), &id, false)
        }
        SessionsCommand::Prune(args) => {
            let policy = prune_policy(&args)?;
            lifecycle::prune(spec.open_existing()?.as_ref(), &spec.at(), &policy)
        }
        SessionsCommand::Export { ids, output, force } => {
            let ids = ids
                .iter()
                .map(|id| SessionId::parse(id))
                .collect::<Result<Vec<_>, _>>()?;
            let Some(store) = spec.open_existing()? else {
                return Err(match ids.into_iter().next() {
                    Some(id) => Error::NotFound { id }.into(),
                    None => "name at least one session to export".to_owned().into(),
                });
            };
            lifecycle::export(store.sessions(), &ids, output.as_deref(), force)
        }
        SessionsCommand::Import { file, new_ids } => lifecycle::import(spec, &file, new_ids),
        SessionsCommand::Migrate => migrate(spec),
    }
}

/// `sessions migrate`.
fn migrate(spec: &StoreSpec) -> Result<(), Failure> {
    let at = spec.migrate()?;
    match at {
        StoreAt::Folder(_) => println!(
            "the session folder {} is ready (a folder store needs no migration)",
            at.shown()
        ),
        StoreAt::Sqlite(_) => println!(
            "the SQLite session store {} is ready (its tables are created or brought up to date whenever it is opened)",
            at.shown()
        ),
        StoreAt::Postgres { .. } => {
            println!("the PostgreSQL session store {} is ready", at.shown());
        }
    }
    Ok(())
}

/// The policy of `sessions prune`; a usage error without a limit.
fn prune_policy(args: &PruneArgs) -> Result<PrunePolicy, Failure> {
    let history = args.keep_revisions.is_some() || args.history_max_age.is_some();
    if args.max_age.is_none() && args.max_count.is_none() && args.max_bytes.is_none() && !history {
        return Err(Failure::Usage(
            "sessions prune needs a limit: --max-age DURATION, --max-count N, --max-bytes SIZE, --keep-revisions N or --history-max-age DURATION (with none it would delete nothing)\nsee `agent-session sessions prune --help`"
                .to_owned(),
        ));
    }
    let mut policy = PrunePolicy::new().dry_run(args.dry_run);
    if let Some(age) = args.max_age {
        policy = policy.max_age(age);
    }
    if let Some(count) = args.max_count {
        policy = policy.max_count(count);
    }
    if let Some(bytes) = args.max_bytes {
        policy = policy.max_total_bytes(bytes);
    }
    if history {
        let mut retention = HistoryRetention::new();
        if let Some(count) = args.keep_revisions {
            retention = retention.max_revisions(count);
        }
        if let Some(age) = args.history_max_age {
            retention = retention.max_age(age);
        }
        policy = policy.history(retention);
    }
    if args.archived_only {
        policy = policy.archived_only();
    }
    Ok(policy)
}

/// The store and the parsed id of a session that must exist already.
fn existing_session(spec: &StoreSpec, id: &str) -> Result<(Store, SessionId), Failure> {
    let id = SessionId::parse(id)?;
    let store = spec
        .open_existing()?
        .ok_or_else(|| Error::NotFound { id: id.clone() })?;
    Ok((store, id))
}

/// `sessions list`: the whole listing, or one page of it.
fn list(
    store: Option<&Store>,
    spec: &StoreSpec,
    scope: ListScope,
    limit: Option<usize>,
    after: Option<String>,
) -> Result<(), Failure> {
    let Some(store) = store else {
        println!("{} in {}", nothing_listed(scope), spec.at().shown());
        return Ok(());
    };
    let at = store.at();
    let store = store.sessions();
    let leases = store.leases()?;
    let Some(limit) = limit else {
        return print_listing(&store.list_scoped(scope)?, &leases, at, scope);
    };
    let after = after.map(|c| c.parse::<ListCursor>()).transpose()?;
    let page = if scope == ListScope::Active {
        store.list_page(limit, after.as_ref())?
    } else {
        if limit == 0 {
            return Err(Error::InvalidArgument {
                reason: "a page of sessions must hold at least one (limit 0)".to_owned(),
            }
            .into());
        }
        SessionPage::of(store.list_scoped(scope)?, limit, after.as_ref())
    };
    let next = page.next.clone();
    let listing = SessionList::new(page.sessions, page.unreadable);
    let printed = print_listing(&listing, &leases, at, scope);
    if let Some(next) = next {
        let flag = match scope {
            ListScope::Archived => " --archived",
            ListScope::All => " --all",
            _ => "",
        };
        eprintln!("more: agent-session sessions list{flag} --limit {limit} --after {next}");
    }
    printed
}

/// What an empty listing of `scope` says.
fn nothing_listed(scope: ListScope) -> &'static str {
    if scope == ListScope::Archived {
        "no archived sessions"
    } else {
        "no saved sessions"
    }
}

/// Prints the table on stdout and each unreadable file on stderr; an error if there were
/// any (the readable sessions are listed all the same).
fn print_listing(
    list: &SessionList,
    leases: &[Lease],
    at: &StoreAt,
    scope: ListScope,
) -> Result<(), Failure> {
    if list.sessions.is_empty() && list.unreadable.is_empty() {
        println!("{} in {}", nothing_listed(scope), at.shown());
        return Ok(());
    }
    if !list.sessions.is_empty() {
        print!("{}", display::session_table(list, leases));
    }
    warn_unreadable(list);
    if list.unreadable.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} stored session {}(s) could not be read (see above); the others are listed",
            list.unreadable.len(),
            at.item()
        )
        .into())
    }
}

fn warn_unreadable(list: &SessionList) {
    for e in &list.unreadable {
        eprintln!("unreadable: {}", chain(e));
    }
}

/// The engine a session runs on.
enum AnyEngine {
    Scripted(ScriptedEngine),
    Http(HttpEngine),
}

impl Engine for AnyEngine {
    async fn complete(&mut self, request: CompletionRequest<'_>) -> Result<Completion, BoxError> {
        match self {
            AnyEngine::Scripted(engine) => engine.complete(request).await,
            AnyEngine::Http(engine) => engine.complete(request).await,
        }
    }
}

type EngineFactory = Box<dyn Fn() -> AnyEngine>;

/// The OpenAI-compatible engine if `choice` (or, for `auto`, an API key in the
/// environment) asks for it; `None` for the scripted one.
fn http_engine(choice: EngineChoice) -> Result<Option<HttpEngine>, Failure> {
    match (choice, HttpConfig::api_key_from_env()) {
        (EngineChoice::Scripted, _) | (EngineChoice::Auto, None) => Ok(None),
        (EngineChoice::Openai, None) => Err(
            "--engine openai needs an API key in OPENAI_API_KEY or AGENT_SESSION_API_KEY"
                .to_owned()
                .into(),
        ),
        (_, Some(key)) => Ok(Some(HttpEngine::new(HttpConfig::from_env(key)?))),
    }
}

/// The model `engine` talks to (the scripted engine's without one), given the one a
/// session was saved with: the model asked for explicitly, else the saved one unless it is
/// the scripted engine's, else the default.
fn model_for(engine: Option<&HttpEngine>, saved: Option<&str>) -> String {
    match engine {
        None => scripted::MODEL.to_owned(),
        Some(engine) => engine
            .explicit_model()
            .or(saved.filter(|m| *m != scripted::MODEL))
            .unwrap_or(http::DEFAULT_MODEL)
            .to_owned(),
    }
}

/// The store, the engine and the tools of one invocation.
struct App {
    harness: Harness<EngineFactory>,
    /// Where the store is.
    store_at: StoreAt,
    /// The HTTP engine's settings, if that engine was chosen.
    http: Option<HttpEngine>,
}

impl App {
    fn new(spec: &StoreSpec, choice: EngineChoice) -> Result<Self, Failure> {
        let store = spec.open()?;
        let workspace = std::env::current_dir()
            .map_err(|e| format!("could not find the current directory: {e}"))?;
        let tools = Arc::new(Tools::new(&workspace).map_err(|e| {
            format!(
                "could not resolve the workspace {}: {e}",
                workspace.display()
            )
        })?);
        let http = http_engine(choice)?;
        let factory: EngineFactory = match http.clone() {
            Some(engine) => Box::new(move || AnyEngine::Http(engine.clone())),
            None => Box::new(|| AnyEngine::Scripted(ScriptedEngine)),
        };
        let harness = Harness::builder(store.shared(), factory)
            .tools(tools)
            .autosave(Autosave::EveryStep)
            .build();
        Ok(App {
            harness,
            store_at: store.into_at(),
            http,
        })
    }

    /// The model to use, given the one a resumed session was saved with.
    fn model(&self, saved: Option<&str>) -> String {
        model_for(self.http.as_ref(), saved)
    }

    /// The user's prompt as a message. For the HTTP engine it is built from the OpenAI wire
    /// form, so it goes back out as `"content": "text"`, the shape every OpenAI-compatible
    /// server accepts (a message built in Rust is sent as a list of content parts).
    fn user_message(&self, prompt: &str) -> Result<Message, Failure> {
        if self.http.is_some() {
            Ok(Message::from_openai_chat(
                &serde_json::json!({"role": "user", "content": prompt}),
            )?)
        } else {
            Ok(Message::user(prompt))
        }
    }

    /// A new session, or the one `--resume`/`--continue` names. Prints its id.
    fn start(&self, resume: &ResumeArgs) -> Result<Session<AnyEngine>, Failure> {
        let id = if let Some(id) = &resume.resume {
            Some(SessionId::parse(id)?)
        } else if resume.continue_latest {
            let list = self.harness.list_sessions()?;
            warn_unreadable(&list);
            let latest = list.sessions.into_iter().next().ok_or_else(|| {
                format!(
                    "{} in {}: start one without --continue",
                    Error::NoSessions,
                    self.store_at
                )
            })?;
            Some(latest.id)
        } else {
            None
        };
        let Some(id) = id else {
            let options = SessionOptions::new(self.model(None)).system_prompt(SYSTEM_PROMPT);
            let session = self.harness.new_session(options)?;
            eprintln!("session: {} (new)", session.id());
            return Ok(session);
        };
        let session = self.resume(&id, resume.take_over)?;
        eprintln!(
            "session: {} (resumed, {} messages)",
            session.id(),
            session.transcript().len()
        );
        report_interrupted(&session);
        Ok(session)
    }

    /// Loads session `id` with the saved options, but the model of the engine in use: a
    /// session started offline can go on with a real model, and the other way round.
    ///
    /// The session is opened for writing under a lease, so a second process resuming it
    /// is refused (naming this one) until this one ends, unless it takes it over
    /// (`take_over`). A store that cannot lease resumes it without one: saves are then
    /// protected by compare-and-swap only.
    fn resume(&self, id: &SessionId, take_over: bool) -> Result<Session<AnyEngine>, Failure> {
        let request =
            LeaseRequest::new(LeaseHolder::this_process("agent-session")).take_over(take_over);
        let adjust = |mut options: SessionOptions| {
            let model = self.model(Some(&options.model));
            if model != options.model {
                eprintln!(
                    "note: the session used model {}; it continues with {}",
                    escape_controls(&options.model, Keep::Nothing),
                    escape_controls(&model, Keep::Nothing)
                );
                options.model = model;
            }
            options
        };
        match self
            .harness
            .resume_session_leased_with(id, &request, adjust)
        {
            Err(Error::Unsupported { .. }) => Ok(self.harness.resume_session_with(id, adjust)?),
            resumed => Ok(resumed?),
        }
    }

    /// `run` and `script`: send each prompt in turn, printing replies on stdout.
    async fn run(
        &self,
        resume: &ResumeArgs,
        prompts: &[String],
        echo: bool,
    ) -> Result<(), Failure> {
        let mut signals = Signals::new()?;
        let mut session = self.start(resume)?;
        for prompt in prompts {
            if echo {
                println!("> {}", escape_controls(prompt, Keep::Nothing));
            }
            match self.turn(&mut session, prompt, &mut signals).await? {
                Turn::Replied(reply) => println!("{}", escape_controls(&reply, Keep::LinesAndTabs)),
                Turn::EngineFailed(message) => return Err(message.into()),
            }
        }
        eprintln!(
            "saved session {} ({} messages)",
            session.id(),
            session.transcript().len()
        );
        Ok(())
    }

    /// `chat`: a prompt per line until `/exit` or end of input.
    async fn chat(&self, resume: &ResumeArgs) -> Result<(), Failure> {
        let mut signals = Signals::new()?;
        let mut session = self.start(resume)?;
        let interactive = io::stdin().is_terminal();
        if interactive {
            eprintln!(
                "type a prompt; /undo drops the last turn, /restore REV goes back to a revision, /sessions lists sessions, /help, /exit to leave"
            );
        }
        let mut lines = stdin_lines();
        loop {
            if interactive {
                eprint!("> ");
                let _ = io::stderr().flush();
            }
            let input = tokio::select! {
                line = lines.recv() => line.map_or(Input::Eof, Input::Line),
                () = signals.recv() => Input::Interrupted,
            };
            let line = match input {
                Input::Eof => break,
                Input::Line(Ok(line)) => line,
                Input::Line(Err(e)) => return Err(format!("could not read stdin: {e}").into()),
                Input::Interrupted => {
                    // Idle: the last turn is already saved.
                    eprintln!();
                    report_saved(&session, "interrupted; ");
                    return Err(Failure::Interrupted);
                }
            };
            match line.trim() {
                "" => {}
                "/exit" | "/quit" => break,
                "/sessions" => {
                    let list = self.harness.list_sessions()?;
                    if list.sessions.is_empty() {
                        println!("no saved sessions yet");
                    } else {
                        let leases = self.harness.store().leases()?;
                        print!("{}", display::session_table(&list, &leases));
                    }
                    warn_unreadable(&list);
                }
                "/help" => {
                    println!("/undo [N] drops the last N turns (default 1), saved at once; /restore REV makes revision REV the session's state again (it undoes an /undo), saved at once; /history lists the session's revisions; /sessions lists saved sessions; /exit leaves (so does end of input)");
                }
                "/history" => self.print_history(&session),
                command if command.split_whitespace().next() == Some("/undo") => {
                    self.undo(&mut session, command)?;
                }
                command if command.split_whitespace().next() == Some("/restore") => {
                    self.restore(&mut session, command)?;
                }
                command if command.starts_with('/') => {
                    eprintln!(
                        "unknown command {}; try /help",
                        escape_controls(command, Keep::Nothing)
                    );
                }
                prompt => match self.turn(&mut session, prompt, &mut signals).await? {
                    Turn::Replied(reply) => {
                        println!("{}", escape_controls(&reply, Keep::LinesAndTabs));
                    }
                    // The completed steps are saved; the conversation can go on.
                    Turn::EngineFailed(message) => {
                        eprintln!("error: {}", escape_controls(&message, Keep::LinesAndTabs));
                    }
                },
            }
        }
        report_saved(&session, "");
        Ok(())
    }

    /// `/undo [N]`: drops the last N turns of the live session and saves it. A bad
    /// argument, a session with no turns or more turns than it has is said and the chat
    /// goes on; a failed save ends it, as a failed save of a turn does.
    fn undo(&self, session: &mut Session<AnyEngine>, command: &str) -> Result<(), Failure> {
        let mut words = command.split_whitespace().skip(1);
        let turns = match (words.next(), words.next()) {
            (None, _) => Some(1),
            (Some(n), None) => n.parse::<usize>().ok().filter(|n| *n > 0),
            (Some(_), Some(_)) => None,
        };
        let Some(turns) = turns else {
            eprintln!(
                "usage: /undo [N]: drops the last N turns (a whole number, at least 1; default 1)"
            );
            return Ok(());
        };
        let prompts: Vec<usize> = session
            .transcript()
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_prompt())
            .map(|(at, _)| at)
            .collect();
        if prompts.is_empty() {
            println!("nothing to undo: session {} has no turns", session.id());
            return Ok(());
        }
        // The stored revision the undo goes back from, if the session is all stored.
        let undoable = (session.revision() != Revision::NEW && !session.has_unsaved_changes())
            .then(|| session.revision());
        // What the rewind will drop, for the summary: from the prompt of the N-th last
        // turn (if there are that many; the library refuses otherwise).
        let before = session.transcript().len();
        let tail: Vec<Message> = prompts
            .len()
            .checked_sub(turns)
            .and_then(|at| prompts.get(at))
            .and_then(|&from| session.transcript().get(from..))
            .map(<[Message]>::to_vec)
            .unwrap_or_default();
        match self
            .harness
            .rewind_session(session, RewindTo::LastTurns(turns))
        {
            Ok(revision) => {
                let kept = session.transcript().len();
                let dropped = tail
                    .get(tail.len().saturating_sub(before.saturating_sub(kept))..)
                    .unwrap_or_default();
                let redo = undoable
                    .map(|from| format!(" (/restore {from} brings it back)"))
                    .unwrap_or_default();
                println!(
                    "undone: {}; saved as revision {revision}{redo}",
                    lifecycle::rewind_summary(dropped, kept)
                );
                Ok(())
            }
            // Refused (more turns than the session has, a point inside a tool call): the
            // session is as it was.
            Err(e) if session.transcript().len() == before => {
                let mut message = chain(&e);
                if turns > prompts.len() {
                    let _ = write!(message, "\nhint: /undo {} drops them all", prompts.len());
                }
                eprintln!("error: {message}\nnothing was undone");
                Ok(())
            }
            Err(e) => {
                let id = session.id();
                let mut message = format!(
                    "could not save session {id} after /undo: {}; the store may still hold it as it was before the undo",
                    chain(&e)
                );
                if e.is_conflict() {
                    let _ = write!(
                        message,
                        "\nhint: another process saved this session meanwhile; `chat --resume {id}` goes on from what it saved"
                    );
                }
                Err(message.into())
            }
        }
    }

    /// `/restore REV`: makes revision REV of the live session its state again, through
    /// the store's restore (a new revision), and goes on with the session as restored. A
    /// bad argument, a revision the store does not keep or a session never saved is said
    /// and the chat goes on as it was; a failed restore of a saved session ends it, as a
    /// failed save does.
    fn restore(&self, session: &mut Session<AnyEngine>, command: &str) -> Result<(), Failure> {
        let mut words = command.split_whitespace().skip(1);
        let revision = match (words.next(), words.next()) {
            (Some(rev), None) => history::parse_revision(rev),
            _ => Err("give one revision".to_owned()),
        };
        let revision = match revision {
            Ok(revision) => revision,
            Err(reason) => {
                eprintln!("usage: /restore REV: {reason} (/history lists the revisions)");
                return Ok(());
            }
        };
        let id = session.id().clone();
        if session.revision() == Revision::NEW {
            println!("nothing to restore: session {id} was never saved");
            return Ok(());
        }
        if session.has_unsaved_changes() {
            // Only after a save that failed and was reported; save before going back.
            self.harness.save_session(session).map_err(|e| {
                format!("could not save session {id} before /restore: {}", chain(&e))
            })?;
        }
        if revision == session.revision() {
            println!("session {id} is at revision {revision} already: nothing to restore");
            return Ok(());
        }
        let before = session.transcript().len();
        // Through the session, so the save is made under its lease (a store-level restore
        // is refused while any lease, this one included, is live).
        let restored = match self.harness.restore_session(session, revision) {
            Ok(restored) => restored,
            Err(e) => {
                let mut message = chain(&e);
                if matches!(e, Error::RevisionNotFound { .. }) {
                    message.push_str("\nhint: /history lists the revisions it keeps");
                }
                if e.is_conflict() {
                    let _ = write!(
                        message,
                        "\nhint: another process saved this session meanwhile; `chat --resume {id}` goes on from what it saved"
                    );
                    return Err(format!("{message}\nnothing was restored").into());
                }
                if session.has_unsaved_changes() {
                    // The revision was applied here, and its save failed.
                    eprintln!("error: {message}\nrevision {revision} is restored in this chat but not saved; the next turn saves it");
                } else {
                    eprintln!("error: {message}\nnothing was restored");
                }
                return Ok(());
            }
        };
        println!(
            "restored revision {revision}: the view went from {before} to {} messages; saved as revision {restored}",
            session.transcript().len()
        );
        Ok(())
    }

    /// `/history`: the live session's revisions, as `sessions history` lists them.
    fn print_history(&self, session: &Session<AnyEngine>) {
        if session.revision() == Revision::NEW {
            println!(
                "session {} was never saved: it has no revisions yet",
                session.id()
            );
            return;
        }
        match self.harness.store().revisions(session.id()) {
            Ok(revisions) => print!("{}", display::revision_table(&revisions)),
            Err(e) => eprintln!("error: {}", chain(&e)),
        }
    }

    /// One turn: send, then save whatever happened. Ctrl-C drops the send, which closes
    /// unfinished tool calls as interrupted, and the result is saved before exiting.
    async fn turn(
        &self,
        session: &mut Session<AnyEngine>,
        prompt: &str,
        signals: &mut Signals,
    ) -> Result<Turn, Failure> {
        let message = self.user_message(prompt)?;
        let outcome = tokio::select! {
            outcome = self.harness.send_message(session, message) => Some(outcome),
            () = signals.recv() => None,
        };
        // The send future is gone here, whichever branch won: the session is idle. The
        // steps saved themselves; what is left is the end of a turn cut short (the
        // interrupted results of Ctrl-C, a failed step).
        let saved = if session.has_unsaved_changes() {
            self.harness.save_session(session).map(|_| ()).map_err(|e| {
                Failure::Error(format!(
                    "could not save session {}: {}; the store keeps the state of the last saved step, where a tool call that ran after it is recorded as interrupted (it ran, its result was not saved, and it will not be run again)",
                    session.id(),
                    chain(&e)
                ))
            })
        } else {
            Ok(())
        };
        match outcome {
            None => {
                eprintln!();
                saved?;
                report_saved(session, "interrupted; the unfinished turn was ");
                Err(Failure::Interrupted)
            }
            Some(Ok(outcome)) => {
                saved?;
                Ok(Turn::Replied(match (outcome.stop, outcome.reply) {
                    (StopReason::Finished, Some(reply)) => reply,
                    _ => format!(
                        "(no final answer: the turn stopped after {} model calls and {} tool calls; send another prompt to go on)",
                        outcome.completions, outcome.tool_calls
                    ),
                }))
            }
            Some(Err(e)) => {
                saved?;
                Ok(Turn::EngineFailed(format!(
                    "{}\nthe session was saved up to the last completed step; continue it with --resume {}",
                    chain(&e),
                    session.id()
                )))
            }
        }
    }
}

/// Names the tool calls of the session's last turn that were cut short (by Ctrl-C, by a
/// crash while they ran, or by a save of their results that failed): they may have run, and
/// were not run again.
fn report_interrupted(session: &Session<AnyEngine>) {
    let last_prompt = session
        .transcript()
        .iter()
        .rposition(|m| m.role == Role::User)
        .unwrap_or(0);
    let cut: Vec<String> = session
        .interrupted_tool_calls()
        .into_iter()
        .filter(|r| r.call_at.message > last_prompt)
        .map(|r| {
            format!(
                "{} ({})",
                escape_controls(&r.tool_name, Keep::Nothing),
                escape_controls(&r.call_id, Keep::Nothing)
            )
        })
        .collect();
    if !cut.is_empty() {
        eprintln!(
            "note: the last turn was cut short; no result was saved for these tool calls (they may have run), and they were not run again: {}",
            cut.join(", ")
        );
    }
}

/// What the chat loop waited for.
enum Input {
    Line(io::Result<String>),
    Eof,
    Interrupted,
}

/// How a turn ended, short of an interruption or a failed save.
enum Turn {
    Replied(String),
    EngineFailed(String),
}

fn report_saved(session: &Session<AnyEngine>, prefix: &str) {
    if session.revision().as_u64() == 0 {
        eprintln!(
            "{prefix}nothing was sent, so session {} was not saved",
            session.id()
        );
    } else {
        eprintln!(
            "{prefix}saved session {} ({} messages); continue it with --resume {}",
            session.id(),
            session.transcript().len(),
            session.id()
        );
    }
}

/// Stdin lines, read on a plain thread (reading stdin blocks) and handed over a channel,
/// so the chat loop can wait for a line and for Ctrl-C at once.
fn stdin_lines() -> tokio::sync::mpsc::Receiver<io::Result<String>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Ctrl-C (SIGINT) and SIGTERM, installed once per command so a signal that arrives
/// between two waits is not lost.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn new() -> Result<Self, Failure> {
        let install = |kind| {
            signal(kind).map_err(|e| Failure::Error(format!("could not handle signals: {e}")))
        };
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
