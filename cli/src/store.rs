//! The store a command works on, as `--store`, `AGENT_SESSION_STORE` or `copy --from/--to`
//! names it (one syntax for all of them, read by [`StoreSpec::parse`]): a folder
//! ([`FileSessionStore`], a path or `file:PATH`), a SQLite database file
//! ([`SqliteSessionStore`], `sqlite:PATH`) or a schema of a PostgreSQL database
//! ([`PostgresSessionStore`], a `postgres://` or `postgresql://` URL, or
//! `postgres:CONNINFO`), opened behind the library's [`SessionStore`] trait so that the
//! commands do not depend on which store it is; and how messages name it (a PostgreSQL
//! store never with its password).

use std::ffi::OsStr;
use std::fmt::{self, Write as _};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_session::{
    Error, FileSessionStore, IndexedMetadata, PostgresSessionStore, SessionId, SessionStore,
    SqliteSessionStore, DEFAULT_POSTGRES_SCHEMA,
};
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;

use crate::display::{escape_controls, Keep};
use crate::{chain, display, Failure};

/// Where sessions go when neither `--store` nor `AGENT_SESSION_STORE` says otherwise.
const DEFAULT_STORE: &str = ".agent-session/sessions";

/// How a store value that names a PostgreSQL server by URL starts (the prefixes
/// tokio-postgres reads as a URL): the whole value goes to the client.
const POSTGRES_URL_PREFIXES: [&str; 2] = ["postgres://", "postgresql://"];

/// The prefix of a PostgreSQL store written as a libpq connection string (or a URL):
/// `postgres:host=db dbname=app`. Checked after [`POSTGRES_URL_PREFIXES`], which it is a
/// prefix of.
const POSTGRES_PREFIX: &[u8] = b"postgres:";

/// The prefix of a SQLite store: `sqlite:PATH`, the database file.
const SQLITE_PREFIX: &[u8] = b"sqlite:";

/// The prefix that says a value is a folder, for one whose name starts like another
/// store's (`file:sqlite:x` is the folder `sqlite:x`). A value without a prefix is a
/// folder too.
const FILE_PREFIX: &[u8] = b"file:";

/// The environment variable that chooses the schema of a PostgreSQL store (as `--schema`).
const SCHEMA_ENV: &str = "AGENT_SESSION_SCHEMA";

/// Says how to create a PostgreSQL store's tables.
const MIGRATE_HINT: &str = "hint: `agent-session sessions migrate`, with the same --store and --schema, creates the schema and its tables (or brings an older release's up to date); --schema NAME chooses another schema";

/// The store the command line names, not opened yet.
pub enum StoreSpec {
    /// A [`FileSessionStore`] folder (`~` already expanded).
    Folder(PathBuf),
    /// A [`SqliteSessionStore`] database file (`~` already expanded).
    Sqlite(PathBuf),
    /// A [`PostgresSessionStore`].
    Postgres(PostgresSpec),
}

/// Where a store value came from, for messages.
struct Source<'a> {
    /// What named the store: `--store`, `AGENT_SESSION_STORE`, `--from` or `--to`.
    store: &'a str,
    /// The flag that chooses a PostgreSQL store's schema with it: `--schema`,
    /// `--from-schema` or `--to-schema`.
    schema_flag: &'a str,
}

/// What a store value names, its prefix taken off; nothing checked yet.
enum Written<'a> {
    /// A folder: a path, or `file:PATH`.
    Folder(&'a OsStr),
    /// `sqlite:PATH`: the database file.
    Sqlite(&'a OsStr),
    /// A `postgres://` or `postgresql://` URL, or the CONNINFO of `postgres:CONNINFO`.
    Postgres(&'a OsStr),
}

impl<'a> Written<'a> {
    /// Reads the prefix of `value`; anything without a known prefix is a folder.
    fn read(value: &'a OsStr) -> Self {
        if is_postgres_url(value) {
            return Written::Postgres(value);
        }
        let after = |prefix: &[u8]| value.as_bytes().strip_prefix(prefix).map(OsStr::from_bytes);
        if let Some(conninfo) = after(POSTGRES_PREFIX) {
            Written::Postgres(conninfo)
        } else if let Some(file) = after(SQLITE_PREFIX) {
            Written::Sqlite(file)
        } else {
            Written::Folder(after(FILE_PREFIX).unwrap_or(value))
        }
    }
}

/// A PostgreSQL store: a server, a database on it and a schema in that.
pub struct PostgresSpec {
    /// The URL as given, for the client only: it may hold a password, so it never goes
    /// into a message (not even a parse error's).
    url: String,
    /// The schema holding the store's tables (checked by the library when it connects).
    schema: String,
    /// The server and database, for messages: the URL without its password or parameters.
    server: String,
}

/// Where a store is, as messages name it.
pub enum StoreAt {
    /// A folder: as given before the store is opened, as resolved once it is.
    Folder(PathBuf),
    /// A SQLite database file, likewise; named `sqlite:PATH`, as it is written.
    Sqlite(PathBuf),
    /// A schema of a PostgreSQL database: `server` is a URL without password or parameters.
    Postgres { server: String, schema: String },
}

impl fmt::Display for StoreAt {
    /// Unescaped: for a message that escapes the whole of itself (every `error: ...`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreAt::Folder(dir) => write!(f, "{}", dir.display()),
            StoreAt::Sqlite(file) => write!(f, "sqlite:{}", file.display()),
            StoreAt::Postgres { server, schema } => write!(f, "schema {schema} of {server}"),
        }
    }
}

impl StoreAt {
    /// For a status line: escaped like any other text the agent did not write.
    pub fn shown(&self) -> String {
        match self {
            StoreAt::Folder(dir) => display::path(dir),
            StoreAt::Sqlite(_) | StoreAt::Postgres { .. } => {
                escape_controls(&self.to_string(), Keep::Nothing).into_owned()
            }
        }
    }

    /// What holds one stored session, for messages about unreadable ones.
    pub fn item(&self) -> &'static str {
        match self {
            StoreAt::Folder(_) => "file",
            StoreAt::Sqlite(_) | StoreAt::Postgres { .. } => "row",
        }
    }
}

/// An open store.
pub struct Store {
    sessions: Arc<dyn SessionStore>,
    at: StoreAt,
}

impl Store {
    /// The sessions, through the store abstraction (with
    /// [`SessionStoreExt`](agent_session::SessionStoreExt) for fork, prune, export and
    /// import).
    pub fn sessions(&self) -> &dyn SessionStore {
        &*self.sessions
    }

    /// The same store, to hand to a [`Harness`](agent_session::Harness).
    pub fn shared(&self) -> Arc<dyn SessionStore> {
        Arc::clone(&self.sessions)
    }

    /// Where it is.
    pub fn at(&self) -> &StoreAt {
        &self.at
    }

    /// Where it was, for a caller that keeps only the [`shared`](Self::shared) store.
    pub fn into_at(self) -> StoreAt {
        self.at
    }
}

impl StoreSpec {
    /// The store `--store` names, else `AGENT_SESSION_STORE`, else the default folder
    /// (written as [`parse`](Self::parse) reads them); for a PostgreSQL store, in the
    /// schema `--schema` names, else `AGENT_SESSION_SCHEMA`, else the library's default.
    /// `--schema` with a folder or SQLite store is a usage error.
    pub fn from_command_line(
        store: Option<PathBuf>,
        schema: Option<String>,
    ) -> Result<Self, Failure> {
        let named = match store {
            Some(value) => Some((value.into_os_string(), "--store")),
            None => std::env::var_os("AGENT_SESSION_STORE")
                .filter(|v| !v.is_empty())
                .map(|value| (value, "AGENT_SESSION_STORE")),
        };
        let (value, store) = named.unwrap_or_else(|| (DEFAULT_STORE.into(), "the default store"));
        Self::parse(
            &value,
            schema,
            &Source {
                store,
                schema_flag: "--schema",
            },
        )
    }

    /// The store `value` names in `agent-session copy` (`flag` is `--from` or `--to`),
    /// written as [`parse`](Self::parse) reads it, in the schema `schema` (the
    /// `--from-schema` or `--to-schema` given) names if it is a PostgreSQL store.
    pub fn from_copy_arg(
        value: &OsStr,
        schema: Option<String>,
        flag: &str,
    ) -> Result<Self, Failure> {
        Self::parse(
            value,
            schema,
            &Source {
                store: flag,
                schema_flag: &format!("{flag}-schema"),
            },
        )
    }

    /// The store `value` names, as every option that names one writes it:
    ///
    /// - `postgres://...` or `postgresql://...`: a PostgreSQL URL; `postgres:CONNINFO`: a
    ///   libpq connection string (`host=H dbname=D ...`) or a URL. Its schema is `schema`,
    ///   else `AGENT_SESSION_SCHEMA`, else the library's default.
    /// - `sqlite:PATH`: a SQLite database file.
    /// - `file:PATH`, or any other value: a folder.
    ///
    /// A path may start with `~/` for `$HOME`; a relative one is relative to the current
    /// directory. `schema` with a folder or a SQLite store is a usage error, and so is a
    /// value that names no path.
    fn parse(value: &OsStr, schema: Option<String>, source: &Source<'_>) -> Result<Self, Failure> {
        match Written::read(value) {
            Written::Postgres(conninfo) => {
                let conninfo = conninfo.to_str().ok_or_else(|| {
                    format!(
                        "the PostgreSQL URL or connection string in {} is not valid UTF-8 (it is not shown: it may hold a password)",
                        source.store
                    )
                })?;
                let schema = match schema {
                    Some(schema) => schema,
                    None => {
                        schema_from_env()?.unwrap_or_else(|| DEFAULT_POSTGRES_SCHEMA.to_owned())
                    }
                };
                Ok(StoreSpec::Postgres(PostgresSpec::parse(
                    conninfo.to_owned(),
                    schema,
                    source.store,
                )?))
            }
            Written::Sqlite(file) => {
                let file = local_path(file, LocalKind::Sqlite, schema.as_deref(), source)?;
                Ok(StoreSpec::Sqlite(file))
            }
            Written::Folder(dir) => {
                let dir = local_path(dir, LocalKind::Folder, schema.as_deref(), source)?;
                Ok(StoreSpec::Folder(dir))
            }
        }
    }

    /// Where the store is, before it is opened.
    pub fn at(&self) -> StoreAt {
        match self {
            StoreSpec::Folder(dir) => StoreAt::Folder(dir.clone()),
            StoreSpec::Sqlite(file) => StoreAt::Sqlite(file.clone()),
            StoreSpec::Postgres(pg) => pg.at(),
        }
    }

    /// Opens the store, creating a folder or a SQLite database (its folder too, and its
    /// tables) that does not exist. A PostgreSQL store must
    /// answer and have its tables (the library creates them only when asked:
    /// [`migrate`](Self::migrate)).
    pub fn open(&self) -> Result<Store, Failure> {
        self.open_indexed(&IndexedMetadata::default())
    }

    /// [`open`](Self::open), with summaries that carry the values of the metadata keys
    /// `keys` (for `sessions list --where`).
    pub fn open_indexed(&self, keys: &IndexedMetadata) -> Result<Store, Failure> {
        match self {
            StoreSpec::Folder(dir) => {
                let store = open_folder(dir, keys)?;
                Ok(Store {
                    at: StoreAt::Folder(store.dir().to_path_buf()),
                    sessions: Arc::new(store),
                })
            }
            StoreSpec::Sqlite(file) => {
                let store = open_sqlite(file, keys)?;
                Ok(Store {
                    at: StoreAt::Sqlite(store.path().to_path_buf()),
                    sessions: Arc::new(store),
                })
            }
            StoreSpec::Postgres(pg) => {
                let store = pg.connect(keys)?;
                // The library connects lazily: two small queries tell a server that does
                // not answer, a schema that was never migrated, and tables an older release
                // made (which lack what loads and saves use), before a command starts.
                if let Err(e) = store.list_page(1, None) {
                    return Err(pg.failure(&e));
                }
                let probe =
                    SessionId::parse("agent-session-cli-probe").map_err(|e| pg.failure(&e))?;
                match store.stored_bytes(&probe) {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(pg.failure(&e)),
                }
                Ok(Store {
                    at: pg.at(),
                    sessions: Arc::new(store),
                })
            }
        }
    }

    /// The store, if it exists: commands that only read or change stored sessions do not
    /// create a folder or a database file. A PostgreSQL store is always there to open (or
    /// fails to).
    pub fn open_existing(&self) -> Result<Option<Store>, Failure> {
        self.open_existing_indexed(&IndexedMetadata::default())
    }

    /// [`open_existing`](Self::open_existing), indexing the metadata keys `keys`.
    pub fn open_existing_indexed(&self, keys: &IndexedMetadata) -> Result<Option<Store>, Failure> {
        match self {
            // Anything at the path is opened, so that what is wrong with it (a file where
            // a folder should be, a link) is said rather than taken for no store.
            StoreSpec::Folder(path) | StoreSpec::Sqlite(path) => {
                match std::fs::symlink_metadata(path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    _ => self.open_indexed(keys).map(Some),
                }
            }
            StoreSpec::Postgres(_) => self.open_indexed(keys).map(Some),
        }
    }

    /// `sessions migrate`: makes the store ready. For PostgreSQL, the library's `migrate`
    /// (creates the schema and tables, or brings older ones up to date; safe to repeat);
    /// a folder needs no migration and is only created if missing; a SQLite database is
    /// created, or its tables brought up to date, by opening it (the library does that at
    /// every open). Returns where it is.
    pub fn migrate(&self) -> Result<StoreAt, Failure> {
        match self {
            StoreSpec::Folder(_) | StoreSpec::Sqlite(_) => self.open().map(Store::into_at),
            StoreSpec::Postgres(pg) => {
                pg.connect(&IndexedMetadata::default())?.migrate().map_err(|e| {
                    Failure::Error(format!(
                        "could not migrate the PostgreSQL session store {}: {}\nhint: the user in the URL needs the right to create the schema (or its tables, if it exists)",
                        pg.at(),
                        chain(&e)
                    ))
                })?;
                Ok(pg.at())
            }
        }
    }
}

impl PostgresSpec {
    /// Checks `url` as the client will read it, and names the server for messages.
    fn parse(url: String, schema: String, source: &str) -> Result<Self, Failure> {
        let config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
            // The parser's reasons name an option or a position, never a value.
            format!(
                "the PostgreSQL URL in {source} is malformed ({}); it is not shown here, as it may hold a password\nhint: write it as postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?OPTION=VALUE&...]; the schema is chosen with --schema or {SCHEMA_ENV}, not in the URL",
                chain(&e)
            )
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(format!(
                "the PostgreSQL URL in {source} names no server: write it as postgresql://USER@HOST[:PORT]/DATABASE (for a Unix socket, the socket's folder as host, with / written %2F)"
            )
            .into());
        }
        Ok(PostgresSpec {
            url,
            schema,
            server: server_of(&config),
        })
    }

    fn at(&self) -> StoreAt {
        StoreAt::Postgres {
            server: self.server.clone(),
            schema: self.schema.clone(),
        }
    }

    /// The store, not yet connected (the library opens connections when first needed).
    fn connect(&self, keys: &IndexedMetadata) -> Result<PostgresSessionStore, Failure> {
        PostgresSessionStore::builder()
            .schema(self.schema.as_str())
            .index_metadata(keys.clone())
            .connect(&self.url)
            .map_err(|e| {
                Failure::Error(format!(
                    "the PostgreSQL session store {} cannot be used: {}",
                    self.at(),
                    chain(&e)
                ))
            })
    }

    /// Why the store could not be opened, with what to do about it.
    fn failure(&self, e: &Error) -> Failure {
        if is_missing_tables(e) {
            return Failure::Error(format!(
                "the PostgreSQL session store {} has not been set up: the schema {} or its tables do not exist\n{MIGRATE_HINT}",
                self.at(),
                self.schema
            ));
        }
        Failure::Error(format!(
            "the PostgreSQL session store {} cannot be used: {}\nhint: check the server's host, port, user, password and database in --store or AGENT_SESSION_STORE",
            self.at(),
            chain(e)
        ))
    }
}

/// Whether `e` is a PostgreSQL store's query on tables that were never created (their
/// schema missing, or not migrated) or that an older release made (a column missing).
pub fn is_missing_tables(e: &Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(code) = cause
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::code)
        {
            return *code == SqlState::UNDEFINED_TABLE
                || *code == SqlState::INVALID_SCHEMA_NAME
                || *code == SqlState::UNDEFINED_COLUMN;
        }
        source = cause.source();
    }
    false
}

/// The hint for an error of a store that was never set up, if `e` is one.
pub fn missing_tables_hint(e: &Error) -> Option<&'static str> {
    is_missing_tables(e).then_some(MIGRATE_HINT)
}

fn is_postgres_url(value: &std::ffi::OsStr) -> bool {
    POSTGRES_URL_PREFIXES
        .iter()
        .any(|prefix| value.as_bytes().starts_with(prefix.as_bytes()))
}

/// `AGENT_SESSION_SCHEMA`, if set and not empty.
fn schema_from_env() -> Result<Option<String>, Failure> {
    match std::env::var(SCHEMA_ENV) {
        Ok(schema) if !schema.is_empty() => Ok(Some(schema)),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(format!("{SCHEMA_ENV} is not valid UTF-8").into())
        }
    }
}

/// A store that is a path on this machine.
#[derive(Clone, Copy)]
enum LocalKind {
    Folder,
    Sqlite,
}

impl LocalKind {
    /// What the path is, for messages: `the folder`, `the SQLite database`.
    fn noun(self) -> &'static str {
        match self {
            LocalKind::Folder => "the folder",
            LocalKind::Sqlite => "the SQLite database",
        }
    }

    /// What an empty path names, and how to write one: for the usage error.
    fn empty(self) -> &'static str {
        match self {
            LocalKind::Folder => "no folder: write the folder's path, DIR or file:DIR",
            LocalKind::Sqlite => {
                "a SQLite store without its path (sqlite:): write sqlite:PATH with the database file's path, such as sqlite:~/.agent-session/sessions.db"
            }
        }
    }
}

/// The path of a folder or SQLite store as written after its prefix, `~` expanded. An
/// empty one is a usage error, as is a schema: it would do nothing for a store without
/// schemas. (`AGENT_SESSION_SCHEMA` is not refused: it may be set for other commands.)
fn local_path(
    written: &OsStr,
    kind: LocalKind,
    schema: Option<&str>,
    source: &Source<'_>,
) -> Result<PathBuf, Failure> {
    if written.is_empty() {
        return Err(Failure::Usage(format!(
            "{} names {}",
            source.store,
            kind.empty()
        )));
    }
    let path = PathBuf::from(written);
    // The library would read `db/` as the file `db` in the current directory.
    if matches!(kind, LocalKind::Sqlite) && written.as_bytes().ends_with(b"/") {
        return Err(Failure::Usage(format!(
            "{} names the folder {} for a SQLite store: sqlite:PATH is the database file, such as sqlite:{}sessions.db",
            source.store,
            path.display(),
            path.display()
        )));
    }
    if schema.is_some() {
        return Err(Failure::Usage(format!(
            "{} applies to a PostgreSQL store only (a postgres:// or postgresql:// URL, or postgres:CONNINFO), and {} is {} {}: leave {} out",
            source.schema_flag,
            source.store,
            kind.noun(),
            path.display(),
            source.schema_flag
        )));
    }
    expand_home(path, source.store)
}

/// The server and database of `config` as a URL, without the password and parameters:
/// `postgresql://USER@HOST:PORT/DATABASE`.
fn server_of(config: &tokio_postgres::Config) -> String {
    let mut out = String::from("postgresql://");
    if let Some(user) = config.get_user() {
        out.push_str(&url_encoded(user.as_bytes()));
        out.push('@');
    }
    let ports = config.get_ports();
    let port = |i: usize| {
        ports
            .get(i)
            .or_else(|| ports.first().filter(|_| ports.len() == 1))
    };
    let mut hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => tcp_host(name),
            Host::Unix(dir) => url_encoded(dir.as_os_str().as_bytes()),
        })
        .collect();
    if hosts.is_empty() {
        hosts = config
            .get_hostaddrs()
            .iter()
            .map(|addr| tcp_host(&addr.to_string()))
            .collect();
    }
    for (i, host) in hosts.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(host);
        if let Some(port) = port(i) {
            let _ = write!(out, ":{port}");
        }
    }
    if let Some(dbname) = config.get_dbname() {
        out.push('/');
        out.push_str(&url_encoded(dbname.as_bytes()));
    }
    out
}

/// A TCP host for a URL: an IPv6 address in brackets, a name percent-encoded.
fn tcp_host(name: &str) -> String {
    if name.contains(':')
        && name
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    {
        format!("[{name}]")
    } else {
        url_encoded(name.as_bytes())
    }
}

/// `bytes` with every byte but ASCII letters, digits and `-._~` percent-encoded: a part of
/// a URL that reads back as it was, and shows no control character.
fn url_encoded(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn open_folder(dir: &Path, keys: &IndexedMetadata) -> Result<FileSessionStore, Failure> {
    FileSessionStore::builder()
        .index_metadata(keys.clone())
        .open(dir)
        .map_err(|e| {
        Failure::Error(format!(
            "the session store cannot be used: {}\nhint: choose another folder with --store DIR or AGENT_SESSION_STORE",
            chain(&e)
        ))
    })
}

/// The SQLite store in the database file `file`, with the library's defaults: saves
/// synced before they return (`Durability::Sync`, as the folder store's), and a wait of
/// up to 30 seconds for another process's write (another agent saving).
fn open_sqlite(file: &Path, keys: &IndexedMetadata) -> Result<SqliteSessionStore, Failure> {
    // The library would say only that the file is not a regular file.
    if std::fs::symlink_metadata(file).is_ok_and(|meta| meta.is_dir()) {
        return Err(Failure::Error(format!(
            "the SQLite session store sqlite:{} is a folder, not a database file: give the file's path, such as sqlite:{}/sessions.db (a folder store is written DIR or file:DIR)",
            file.display(),
            file.display()
        )));
    }
    SqliteSessionStore::builder()
        .index_metadata(keys.clone())
        .open(file)
        .map_err(|e| {
            Failure::Error(format!(
                "the SQLite session store sqlite:{} cannot be used: {}\nhint: its folder must be yours and closed to other users (a missing one is created so); choose another database with --store sqlite:PATH or AGENT_SESSION_STORE, such as sqlite:~/.agent-session/sessions.db",
                file.display(),
                chain(&e)
            ))
        })
}

/// A store path with a leading `~` or `~/` read as `$HOME`, as a shell would have: no shell
/// expands `--store=~/x`, a quoted `'~/x'`, or a variable set to `~/x`, and a folder
/// literally named `~` is never what was meant. `~user` is refused rather than looked up;
/// `source` names where the path came from.
fn expand_home(path: PathBuf, source: &str) -> Result<PathBuf, Failure> {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    let Some(rest) = path.as_os_str().as_bytes().strip_prefix(b"~") else {
        return Ok(path);
    };
    if !rest.is_empty() && !rest.starts_with(b"/") {
        return Err(format!(
            "the store path {} ({source}) starts with ~NAME, another user's home, which the agent does not look up: write the path out (/home/NAME/...), or write ./{} for a folder whose name starts with ~",
            path.display(),
            path.display()
        )
        .into());
    }
    let Some(home) = std::env::var_os("HOME").filter(|home| !home.is_empty()) else {
        return Err(format!(
            "the store path {} ({source}) starts with ~, but HOME is not set: write the path out in full",
            path.display()
        )
        .into());
    };
    let mut expanded = home.into_vec();
    expanded.extend_from_slice(rest);
    Ok(PathBuf::from(OsString::from_vec(expanded)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(url: &str) -> String {
        server_of(&url.parse().expect("a valid URL"))
    }

    #[test]
    fn the_server_is_named_without_password_or_parameters() {
        assert_eq!(
            server(
                "postgresql://app:s3cret@db.internal:6543/sessions?password=x&application_name=y"
            ),
            "postgresql://app@db.internal:6543/sessions"
        );
        assert_eq!(server("postgres://h"), "postgresql://h:5432");
        assert_eq!(
            server("postgres://a%40b@[::1],h2:7/d%2Fb"),
            "postgresql://a%40b@[::1]:5432,h2:7/d%2Fb"
        );
        assert_eq!(
            server("postgresql://u@%2Ftmp%2Fpg/db"),
            "postgresql://u@%2Ftmp%2Fpg:5432/db"
        );
        assert_eq!(
            server("postgresql://u@h/%1b%5d0"),
            "postgresql://u@h:5432/%1B%5D0"
        );
    }

    /// What `value` names for `--store` with `schema`: the kind and path, or the
    /// usage error's message.
    fn parsed(value: &str, schema: Option<&str>) -> Result<(&'static str, String), String> {
        let source = Source {
            store: "--store",
            schema_flag: "--schema",
        };
        match StoreSpec::parse(OsStr::new(value), schema.map(str::to_owned), &source) {
            Ok(StoreSpec::Folder(dir)) => Ok(("folder", dir.display().to_string())),
            Ok(StoreSpec::Sqlite(file)) => Ok(("sqlite", file.display().to_string())),
            Ok(StoreSpec::Postgres(pg)) => Ok(("postgres", pg.server.clone())),
            Err(Failure::Usage(message)) => Err(message),
            Err(Failure::Error(message)) => panic!("{value}: not a usage error: {message}"),
            Err(Failure::Interrupted) => panic!("{value}: interrupted"),
        }
    }

    #[test]
    fn every_option_reads_the_same_prefixes() {
        let ok = |kind: &'static str, path: &str| Ok((kind, path.to_owned()));
        assert_eq!(parsed("sqlite:s.db", None), ok("sqlite", "s.db"));
        assert_eq!(parsed("sqlite:/a/s.db", None), ok("sqlite", "/a/s.db"));
        assert_eq!(parsed("file:sqlite:x", None), ok("folder", "sqlite:x"));
        assert_eq!(parsed("file:d", None), ok("folder", "d"));
        assert_eq!(parsed("./sqlite:x", None), ok("folder", "./sqlite:x"));
        assert_eq!(parsed("SQLite:x", None), ok("folder", "SQLite:x"));
        assert_eq!(parsed("dir", None), ok("folder", "dir"));
        assert_eq!(
            parsed("postgres://u@h/db", None),
            ok("postgres", "postgresql://u@h:5432/db")
        );
        assert_eq!(
            parsed("postgres:host=h user=u dbname=db", Some("s")),
            ok("postgres", "postgresql://u@h/db")
        );
        assert_eq!(
            parsed("postgres:postgresql://h/db", None),
            ok("postgres", "postgresql://h:5432/db")
        );
    }

    #[test]
    fn a_store_without_schemas_or_a_path_is_a_usage_error() {
        let refused = |value: &str, schema: Option<&str>, needles: &[&str]| {
            let message = parsed(value, schema).expect_err(value);
            for needle in needles {
                assert!(message.contains(needle), "{value}: {message}");
            }
        };
        refused(
            "sqlite:s.db",
            Some("x"),
            &[
                "--schema applies to a PostgreSQL store",
                "the SQLite database s.db",
            ],
        );
        refused(
            "d",
            Some("x"),
            &["--schema applies to a PostgreSQL store", "the folder d"],
        );
        refused("sqlite:", None, &["without its path", "sqlite:PATH"]);
        refused("file:", None, &["names no folder"]);
        refused(
            "sqlite:db/",
            None,
            &["the folder db/", "sqlite:db/sessions.db"],
        );
    }

    #[test]
    fn only_postgres_urls_are_postgres_stores() {
        for url in ["postgres://h/db", "postgresql://h/db"] {
            assert!(is_postgres_url(std::ffi::OsStr::new(url)), "{url}");
        }
        for folder in [
            "postgres",
            "./postgres://h",
            "Postgres://h",
            "host=h dbname=d",
            "~/s",
        ] {
            assert!(!is_postgres_url(std::ffi::OsStr::new(folder)), "{folder}");
        }
    }
}
