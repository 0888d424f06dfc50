//! `sessions list` with filters (`--where KEY=VALUE`, `--model`, `--forks-of`) and
//! `sessions search QUERY`: finding a session among many.

use agent_session::{
    IndexedMetadata, ListCursor, ListFilter, ListScope, SearchQuery, SessionId, SessionList,
    Standing,
};
use clap::Args;
use serde_json::Value;

use crate::display::{escape_controls, Keep};
use crate::store::StoreSpec;
use crate::{chain, print_listing, Failure};

/// The filters of `sessions list`, as given.
#[derive(Args)]
pub struct ListFilters {
    /// Only sessions whose metadata holds VALUE under KEY (VALUE read as JSON if it is, a
    /// string otherwise); repeat for several
    #[arg(long = "where", value_name = "KEY=VALUE")]
    wheres: Vec<String>,
    /// Only sessions with this model
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// Only the forks of this session
    #[arg(long, value_name = "ID")]
    forks_of: Option<String>,
}

impl ListFilters {
    /// Whether any filter was given.
    pub fn any(&self) -> bool {
        !self.wheres.is_empty() || self.model.is_some() || self.forks_of.is_some()
    }

    /// The metadata keys to index, and the filter over `scope`.
    fn parse(&self, scope: ListScope) -> Result<(IndexedMetadata, ListFilter), Failure> {
        let mut filter = ListFilter::new().scope(scope);
        let mut keys = Vec::new();
        for pair in &self.wheres {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(Failure::Usage(format!(
                    "--where {pair:?} is not KEY=VALUE (for example --where project=parser)"
                )));
            };
            // JSON if it reads as JSON (numbers, true, "quoted"), a string otherwise.
            let value = serde_json::from_str::<Value>(value)
                .unwrap_or_else(|_| Value::String(value.to_owned()));
            keys.push(key.to_owned());
            filter = filter.metadata_eq(key, value);
        }
        if let Some(model) = &self.model {
            filter = filter.model(model.clone());
        }
        if let Some(parent) = &self.forks_of {
            filter = filter.forks_of(SessionId::parse(parent)?);
        }
        Ok((IndexedMetadata::new(keys)?, filter))
    }
}

/// `sessions list` with filters: the store opened indexing the `--where` keys (a summary
/// written for other keys is made again from its session, once).
pub fn list_filtered(
    spec: &StoreSpec,
    scope: ListScope,
    filters: &ListFilters,
    limit: Option<usize>,
    after: Option<String>,
) -> Result<(), Failure> {
    let (keys, filter) = filters.parse(scope)?;
    let Some(store) = spec.open_existing_indexed(&keys)? else {
        println!("no saved sessions in {}", spec.at().shown());
        return Ok(());
    };
    let leases = store.sessions().leases()?;
    let Some(limit) = limit else {
        let listing = store.sessions().list_filtered(&filter)?;
        return print_listing(&listing, &leases, store.at(), scope);
    };
    let after = after.map(|c| c.parse::<ListCursor>()).transpose()?;
    let page = store
        .sessions()
        .list_page_filtered(&filter, limit, after.as_ref())?;
    let next = page.next.clone();
    let printed = print_listing(
        &SessionList::new(page.sessions, page.unreadable),
        &leases,
        store.at(),
        scope,
    );
    if let Some(next) = next {
        eprintln!("more: repeat the command with --after {next}");
    }
    printed
}

/// What `sessions search` was asked.
#[derive(Args)]
pub struct SearchArgs {
    /// The words (`word*` for a prefix)
    query: String,
    /// Show at most N sessions; the command to see the next ones is printed on stderr
    #[arg(long, value_name = "N", default_value_t = 20)]
    limit: usize,
    /// Start after this cursor (printed with the previous page)
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
    /// Search archived sessions too
    #[arg(long)]
    all: bool,
    /// Only what the model sees now (not what was rewound or compacted away)
    #[arg(long)]
    view_only: bool,
    /// Search metadata values too
    #[arg(long)]
    metadata: bool,
}

/// `sessions search QUERY`: each session found, newest first, with its matching messages.
pub fn search(spec: &StoreSpec, args: &SearchArgs) -> Result<(), Failure> {
    let query = SearchQuery::new(&args.query)?
        .view_only(args.view_only)
        .in_metadata(args.metadata);
    let scope = if args.all {
        ListScope::All
    } else {
        ListScope::Active
    };
    let Some(store) = spec.open_existing()? else {
        println!("no saved sessions in {}", spec.at().shown());
        return Ok(());
    };
    let after = args
        .after
        .as_deref()
        .map(str::parse::<ListCursor>)
        .transpose()?;
    let page = store.sessions().search(
        &query,
        &ListFilter::new().scope(scope),
        args.limit,
        after.as_ref(),
    )?;
    if page.hits.is_empty() {
        println!("nothing matches {:?} in {}", args.query, store.at().shown());
    }
    for hit in &page.hits {
        let title = hit.session.title.as_deref().unwrap_or("(untitled)");
        println!(
            "{}  {}  {}",
            hit.session.id,
            hit.session.updated_at.format("%Y-%m-%d %H:%M:%S"),
            escape_controls(title, Keep::Nothing)
        );
        for message in &hit.messages {
            let standing = match message.standing {
                Standing::InView { index } => format!("message {index}"),
                Standing::Rewound { revision } => format!("rewound at revision {revision}"),
                Standing::Compacted { revision } => format!("compacted at revision {revision}"),
                Standing::Replaced { revision } => format!("replaced at revision {revision}"),
                _ => "in the history".to_owned(),
            };
            println!(
                "  #{} ({standing}, {:?}): {}",
                message.position,
                message.role,
                escape_controls(&message.snippet, Keep::Nothing)
            );
        }
        for key in &hit.metadata_keys {
            println!("  metadata {key:?}");
        }
    }
    for e in &page.unreadable {
        eprintln!("unreadable: {}", chain(e));
    }
    if let Some(next) = page.next {
        eprintln!("more: repeat the command with --after {next}");
    }
    Ok(())
}
