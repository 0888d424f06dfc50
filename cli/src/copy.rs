//! `copy --from STORE --to STORE`: every session of one store copied into another, with
//! its whole history (the library's `copy_sessions`), between folders, SQLite databases
//! and PostgreSQL schemas in any direction.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;

use agent_session::{
    copy_sessions, CopyOptions, CopyOutcome, CopyReport, Error, ExistingSessions,
    MemorySessionStore, SessionId, SessionStore,
};

use crate::display::{escape_controls, Keep};
use crate::store::{Store, StoreAt, StoreSpec};
use crate::{chain, Failure};

/// Shown in the help of `copy`.
pub const COPY_HELP: &str = "\
STORE is written as for --store:
  DIR or file:DIR       a folder
  sqlite:PATH           a SQLite database file (created 0600 if missing, in a folder
                        closed to other users: created 0700 if missing)
  postgres:CONNINFO     a PostgreSQL store, where CONNINFO is a libpq connection string
                        such as \"host=db user=app dbname=app\" or a URL; a postgres:// or
                        postgresql:// URL may also be given as it is. Its schema is
                        --from-schema/--to-schema, else $AGENT_SESSION_SCHEMA, else
                        agent_session.
A relative path is relative to the current directory; a leading ~/ means $HOME.

Every session is copied with every revision the source keeps: `sessions history ID` and
`sessions show ID --at REV` answer the same in both stores, revision numbers included;
archived sessions stay archived, forks keep their parent. Each session is checked after
it is written, and deleted from the target again if anything failed, so an interrupted
copy leaves each session either whole or absent: run it again with --skip-existing.

The copy is refused, before anything is written, if the target already holds one of the
sessions, unless --skip-existing is given (a session already copied whole is then
reported as skipped; one that differs is reported as an error and left alone).

One line per session on stdout (copied ID: N revisions), then a summary. Exit status 1 if
any session was not copied.

Examples:
  agent-session copy --from .agent-session/sessions --to postgres:\"host=db dbname=app\"
  agent-session copy --from postgres://app@db/app --to file:backup --dry-run
  agent-session copy --from .agent-session/sessions --to sqlite:~/.agent-session/sessions.db
  agent-session copy --from old --to new --skip-existing      finish an interrupted copy
  agent-session copy --from old --to new --only ID --only ID2";

/// The arguments of `copy`.
pub struct CopyArgs {
    pub from: OsString,
    pub to: OsString,
    pub from_schema: Option<String>,
    pub to_schema: Option<String>,
    pub only: Vec<String>,
    pub skip_existing: bool,
    pub dry_run: bool,
}

/// `copy`.
pub fn copy(args: CopyArgs) -> Result<(), Failure> {
    let from = StoreSpec::from_copy_arg(&args.from, args.from_schema, "--from")?;
    let to = StoreSpec::from_copy_arg(&args.to, args.to_schema, "--to")?;
    let only = args
        .only
        .iter()
        .map(|id| SessionId::parse(id))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(source) = from.open_existing()? else {
        return Err(format!("there is no session store at {} (--from)", from.at()).into());
    };
    // A dry run creates nothing: a target folder that does not exist yet holds no session.
    let target = if args.dry_run {
        to.open_existing()?
    } else {
        Some(to.open()?)
    };
    if let Some(target) = &target {
        if same_store(source.at(), target.at()) {
            return Err(Failure::Usage(format!(
                "--from and --to name the same store ({}): copy to another one",
                source.at()
            )));
        }
    }
    let empty = MemorySessionStore::new();
    let target_sessions: &dyn SessionStore = target.as_ref().map_or(&empty, Store::sessions);

    let mut options = CopyOptions::new().dry_run(args.dry_run);
    if !only.is_empty() {
        options = options.only(only);
    }
    if args.skip_existing {
        options = options.existing(ExistingSessions::Skip);
    }
    let report = match copy_sessions(source.sessions(), target_sessions, &options) {
        Ok(report) => report,
        Err(Error::AlreadyExists { id }) => {
            return Err(Failure::Error(format!(
                "session {id} is already in {}: nothing was copied\nhint: --skip-existing copies the others and leaves the sessions the target holds as they are",
                to.at()
            )));
        }
        Err(e) => return Err(e.into()),
    };
    print_report(&report, source.at(), &to.at());
    if report.is_complete() {
        Ok(())
    } else {
        Err(Failure::Error(format!(
            "{} of {} sessions were not copied{}",
            report.failed().count() + report.unreadable.len(),
            report.sessions.len() + report.unreadable.len(),
            if args.dry_run { " (a dry run)" } else { "" }
        )))
    }
}

/// Whether two opened stores are the same: one folder, one SQLite database file, or one
/// schema of one server.
fn same_store(a: &StoreAt, b: &StoreAt) -> bool {
    match (a, b) {
        (StoreAt::Folder(a), StoreAt::Folder(b)) | (StoreAt::Sqlite(a), StoreAt::Sqlite(b)) => {
            same_path(a, b)
        }
        (
            StoreAt::Postgres { server, schema },
            StoreAt::Postgres {
                server: other_server,
                schema: other_schema,
            },
        ) => server == other_server && schema == other_schema,
        _ => false,
    }
}

/// Whether two paths name one file or folder (through links or `..` too).
fn same_path(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (a.canonicalize(), b.canonicalize()),
            (Ok(a), Ok(b)) if a == b
        )
}

/// One line per session (failures on stderr), then the summary.
fn print_report(report: &CopyReport, from: &StoreAt, to: &StoreAt) {
    let (mut copied, mut revisions, mut skipped) = (0_usize, 0_u64, 0_usize);
    for session in &report.sessions {
        let mut details = format!(
            "{} revision{}",
            session.revisions(),
            if session.revisions() == 1 { "" } else { "s" }
        );
        if session.oldest.as_u64() > 1 {
            let _ = write!(details, " ({}..{})", session.oldest, session.head);
        }
        if session.archived {
            details.push_str(", archived");
        }
        if let Some(parent) = &session.parent {
            let _ = write!(details, ", fork of {parent}");
        }
        match &session.outcome {
            CopyOutcome::Copied | CopyOutcome::WouldCopy => {
                copied += 1;
                revisions += session.revisions();
                let verb = if report.dry_run {
                    "would copy"
                } else {
                    "copied"
                };
                println!("{verb} {}: {details}", session.id);
            }
            CopyOutcome::Skipped => {
                skipped += 1;
                println!("skipped {}: already in the target", session.id);
            }
            CopyOutcome::Failed {
                error,
                left_on_target,
            } => {
                let left = if *left_on_target {
                    " (part of it is still in the target: delete it there before copying it again)"
                } else {
                    ""
                };
                let message = format!("not copied {}: {}{left}", session.id, chain(error));
                eprintln!("error: {}", escape_controls(&message, Keep::Nothing));
            }
            _ => {}
        }
    }
    for error in &report.unreadable {
        let message = format!("not copied (unreadable in the source): {}", chain(error));
        eprintln!("error: {}", escape_controls(&message, Keep::Nothing));
    }
    let failed = report.failed().count() + report.unreadable.len();
    let verb = if report.dry_run {
        "would copy"
    } else {
        "copied"
    };
    let summary = format!(
        "{verb} {copied} session{} ({revisions} revision{}) from {from} to {to}; {skipped} skipped, {failed} not copied",
        if copied == 1 { "" } else { "s" },
        if revisions == 1 { "" } else { "s" },
    );
    println!("{}", escape_controls(&summary, Keep::Nothing));
}
