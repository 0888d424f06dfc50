//! The store a command works on, as `--store` or `AGENT_SESSION_STORE` names it, opened
//! behind the library's [`SessionStore`] trait so that the commands do not depend on
//! which store it is; and how messages name it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_session::{FileSessionStore, SessionStore};

use crate::{chain, display, Failure};

/// Where sessions go when neither `--store` nor `AGENT_SESSION_STORE` says otherwise.
const DEFAULT_STORE: &str = ".agent-session/sessions";

/// The store the command line names, not opened yet.
pub enum StoreSpec {
    /// A [`FileSessionStore`] folder (`~` already expanded).
    Folder(PathBuf),
}

/// Where a store is, as messages name it.
pub enum StoreAt {
    /// A folder: as given before the store is opened, as resolved once it is.
    Folder(PathBuf),
}

impl fmt::Display for StoreAt {
    /// Unescaped: for a message that escapes the whole of itself (every `error: ...`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreAt::Folder(dir) => write!(f, "{}", dir.display()),
        }
    }
}

impl StoreAt {
    /// For a status line: escaped like any other text the agent did not write.
    pub fn shown(&self) -> String {
        match self {
            StoreAt::Folder(dir) => display::path(dir),
        }
    }

    /// What holds one stored session, for messages about unreadable ones.
    pub fn item(&self) -> &'static str {
        match self {
            StoreAt::Folder(_) => "file",
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
    /// The store `--store` names, else `AGENT_SESSION_STORE`, else the default folder.
    pub fn from_command_line(store: Option<PathBuf>) -> Result<Self, Failure> {
        let dir = match store {
            Some(dir) => expand_home(dir, "--store")?,
            None => match std::env::var_os("AGENT_SESSION_STORE").filter(|v| !v.is_empty()) {
                Some(dir) => expand_home(PathBuf::from(dir), "AGENT_SESSION_STORE")?,
                None => PathBuf::from(DEFAULT_STORE),
            },
        };
        Ok(StoreSpec::Folder(dir))
    }

    /// Where the store is, before it is opened.
    pub fn at(&self) -> StoreAt {
        match self {
            StoreSpec::Folder(dir) => StoreAt::Folder(dir.clone()),
        }
    }

    /// Opens the store, creating a folder that does not exist.
    pub fn open(&self) -> Result<Store, Failure> {
        match self {
            StoreSpec::Folder(dir) => {
                let store = open_folder(dir)?;
                Ok(Store {
                    at: StoreAt::Folder(store.dir().to_path_buf()),
                    sessions: Arc::new(store),
                })
            }
        }
    }

    /// The store, if it exists: commands that only read or change stored sessions do not
    /// create a folder.
    pub fn open_existing(&self) -> Result<Option<Store>, Failure> {
        match self {
            StoreSpec::Folder(dir) => match std::fs::symlink_metadata(dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                _ => self.open().map(Some),
            },
        }
    }
}

fn open_folder(dir: &Path) -> Result<FileSessionStore, Failure> {
    FileSessionStore::open(dir).map_err(|e| {
        Failure::Error(format!(
            "the session store cannot be used: {}\nhint: choose another folder with --store DIR or AGENT_SESSION_STORE",
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
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

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
