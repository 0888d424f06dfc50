//! `SessionStore::search` benchmarks (issue 18): a word searched for in 1,000 sessions of
//! 1,000 messages, through the public API, on every store: `MemorySessionStore`,
//! `FileSessionStore`, `SqliteSessionStore` and, with `--features postgres` and
//! `AGENT_SESSION_POSTGRES_URL` set, `PostgresSessionStore`.
//!
//! ```text
//! cargo bench --bench search --features sqlite                     # memory, file, SQLite
//! cargo bench --bench search --features sqlite -- --quick          # criterion's quick mode
//! cargo bench --bench search --features sqlite -- search/sqlite    # one store (built alone)
//! AGENT_SESSION_POSTGRES_URL=... cargo bench --bench search --features sqlite,postgres
//! AGENT_SESSION_BENCH_SEARCH_SESSIONS=50 AGENT_SESSION_BENCH_SEARCH_MESSAGES=100 \
//!     cargo bench --bench search --features sqlite -- --quick      # a small check
//! ```
//!
//! # The data
//!
//! `AGENT_SESSION_BENCH_SEARCH_SESSIONS` sessions (default 1,000) of exactly
//! `AGENT_SESSION_BENCH_SEARCH_MESSAGES` messages each (default 1,000, about 1 KB a
//! message: some 1 GB of text per store). The messages are `support/workload.rs`'s (the
//! port of `shared/bench/make_transcript.py`): its transcript of twice that many messages,
//! cut into turns (a user message, tool rounds, an answer), and each session a different
//! run of those turns (starting at a different turn, wrapping around), so sessions hold the
//! same kind of text without being copies of one another.
//!
//! Each session is saved as an agent leaves it, in `AGENT_SESSION_BENCH_SEARCH_SAVES` steps
//! (default 10, each about a tenth of its messages and ending at a turn's end): its first
//! step saved new (the checkpoint), then loaded, as a harness resumes it, and every later
//! step appended and saved (an entry each). Saving every turn (about 240 saves of a session
//! of 1,000 messages, 240,000 saves a store) would take far longer to build, PostgreSQL
//! most of all, and leaves the same kind of store: a checkpoint plus entries, which every
//! store's search reads (or indexes) as it reads any history. Set the variable to the
//! message count to save turn by turn (a step is never less than one turn). The file and
//! SQLite stores are written with `Durability::Buffered`, to build them quickly (the same
//! files either way); PostgreSQL in a fresh schema (`asbench_<unix time>_<pid>_search`),
//! dropped when its measurements end. Each store is built once per run, when its first
//! measurement runs (so a filtered run builds only the stores it measures), in a
//! temporary directory (`TMPDIR`: about 1 GB each for the file and SQLite stores); the
//! build time is printed. A store is dropped before the next is built.
//!
//! One message of three sessions, spread over the listing (newest first: about a sixth,
//! half and five sixths of the way down), holds the rare word `zanzibarquux`, which the
//! workload never does: in the first save (the checkpoint) of one, a save halfway of
//! another, the last save of the third (a user message in each).
//!
//! # What is measured (group / function / parameter)
//!
//! `search/{memory_store,file_store,sqlite,postgres_store}/QUERY`: `SessionStore::search`
//! with no filter, the first page of 20 sessions (`limit` 20, no cursor), for:
//!
//! - `rare`: `zanzibarquux`. Three sessions match, so the search goes through the whole
//!   listing to fill its page: the case an index is for. **Target: ≤ 50 ms for SQLite.**
//! - `common`: `session`, a word of the workload held by most messages of every session:
//!   the 20 newest sessions fill the page (each with hundreds of matching messages).
//! - `prefix`: `zanzi*`, which finds the same three sessions as `rare`.
//!
//! `search/{memory_store,file_store,sqlite,postgres_store}_floor/rare`: what any search
//! for `rare` must still do once it knows which sessions hold the word (however an index
//! finds them): `SessionStore::history` of those three sessions and the crate's matching
//! on each (`SearchQuery::hits_in`), without the listing. An indexed search costs this
//! plus its index query and its walk of the listing; a search that reads every session
//! costs about this once per session read.
//!
//! Before a store's first measurement, each query is run once, untimed, and its page
//! checked against what the crate's matching (`SearchQuery::matches_message`) finds in the
//! data: the same sessions in the same order, the same message positions, whether a next
//! page follows, nothing unreadable. A store returning anything else stops the run.
//!
//! # Timing
//!
//! Shared, noisy 2-core machines: 10 samples, short windows. A search that reads every
//! session's history (a store without an index: memory and file) takes seconds here, so
//! criterion samples it flat and takes a few minutes per query; its "Unable to complete 10
//! samples" warnings are expected. The whole run takes about 20 minutes (`--quick`: about
//! 5, builds included). Compare stores within a run, not times across runs.

#![allow(missing_docs)] // criterion's macros generate undocumented items.

#[path = "support/sessions.rs"]
#[allow(dead_code)] // each bench uses some of the helpers
mod sessions;
#[path = "support/workload.rs"]
#[allow(dead_code)] // the file-transcript helpers are for the other benches
mod workload;

use sessions::{snapshot, to_messages, with_turn};

use std::cell::{Cell, OnceCell};
use std::time::{Duration, Instant};

use agent_session::{
    Durability, FileSessionStore, ListFilter, MemorySessionStore, Message, SearchPage, SearchQuery,
    SessionId, SessionStore, SqliteSessionStore,
};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use serde_json::Value;

/// Sessions, messages a session, and saves a session, unless the variables say otherwise.
const SESSIONS: usize = 1_000;
const MESSAGES: usize = 1_000;
const SAVES: usize = 10;

/// The page a search returns.
const PAGE: usize = 20;

/// The word planted in [`PLANTED`] sessions, and a prefix of it.
const RARE: &str = "zanzibarquux";
const PREFIX: &str = "zanzi*";
/// A word of the workload's vocabulary (`support/workload.rs`), in most messages.
const COMMON: &str = "session";
/// Sessions holding [`RARE`] (in one message each).
const PLANTED: usize = 3;

fn env_count(variable: &str, default: usize) -> usize {
    match std::env::var(variable) {
        Ok(value) => value
            .trim()
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("{variable}={value:?} is not a positive number")),
        Err(_) => default,
    }
}

/// `wire` cut into turns, each starting at a user message.
fn turns_of(wire: Vec<Value>) -> Vec<Vec<Value>> {
    let mut turns: Vec<Vec<Value>> = Vec::new();
    for message in wire {
        match turns.last_mut() {
            Some(turn) if message["role"] != "user" => turn.push(message),
            _ => turns.push(vec![message]),
        }
    }
    turns
}

/// Where [`RARE`] is planted: a session and a message of it.
#[derive(Clone, Copy)]
struct Plant {
    session: usize,
    /// Which of the session's saves holds it: the first, one halfway, or the last.
    save: Place,
}

#[derive(Clone, Copy)]
enum Place {
    First,
    Middle,
    Last,
}

/// The sessions, built the same for every store. Session `i` is saved `i`-th, so the
/// listing (newest first) shows them from the last built to the first.
struct Workload {
    sessions: usize,
    messages: usize,
    saves: usize,
    /// The workload's turns, as the wire carries them and as messages.
    wire: Vec<Vec<Value>>,
    turns: Vec<Vec<Message>>,
    plants: Vec<Plant>,
}

impl Workload {
    fn from_env() -> Self {
        let sessions = env_count("AGENT_SESSION_BENCH_SEARCH_SESSIONS", SESSIONS);
        let messages = env_count("AGENT_SESSION_BENCH_SEARCH_MESSAGES", MESSAGES);
        let saves = env_count("AGENT_SESSION_BENCH_SEARCH_SAVES", SAVES);
        assert!(
            sessions >= PLANTED,
            "AGENT_SESSION_BENCH_SEARCH_SESSIONS: at least {PLANTED} sessions (the rare word's)"
        );
        let wire = turns_of(workload::transcript(2 * messages));
        let turns = wire.iter().map(|turn| to_messages(turn)).collect();
        // A sixth, half and five sixths of the way down the listing (newest first).
        let places = [Place::First, Place::Middle, Place::Last];
        let plants = (0..PLANTED)
            .map(|k| Plant {
                session: sessions - 1 - (2 * k + 1) * sessions / (2 * PLANTED),
                save: places[k % places.len()],
            })
            .collect();
        let work = Workload {
            sessions,
            messages,
            saves,
            wire,
            turns,
            plants,
        };
        let prefix = SearchQuery::new(PREFIX).expect("query");
        assert!(
            !work
                .turns
                .iter()
                .flatten()
                .any(|m| prefix.matches_message(m)),
            "the workload itself holds a word {PREFIX}"
        );
        work
    }

    fn id(i: usize) -> SessionId {
        SessionId::parse(&format!("s{i:06}")).expect("valid id")
    }

    /// Session `i`'s turns (by index into `turns`, with how many of their messages),
    /// cut into its saves: the turns from turn `7 i` on, wrapping around, each taken if it
    /// fits in what is left of the session's message count (and, if only one message is
    /// left that no turn fits, a user message alone, as a turn cut short); then cut into
    /// saves of about equal message counts, each ending at a turn's end.
    fn layout(&self, i: usize) -> Vec<Vec<(usize, usize)>> {
        let count = self.turns.len();
        let mut picked: Vec<(usize, usize)> = Vec::new();
        let mut left = self.messages;
        let mut at = (7 * i) % count;
        let mut idle = 0;
        while left > 0 {
            let len = self.turns[at].len();
            if len <= left {
                picked.push((at, len));
                left -= len;
                idle = 0;
            } else {
                idle += 1;
                if idle == count {
                    // Every turn is longer than what is left: the user message alone.
                    picked.push((at, 1));
                    left -= 1;
                    idle = 0;
                }
            }
            at = (at + 1) % count;
        }
        let saves = self.saves.min(picked.len());
        let mut groups: Vec<Vec<(usize, usize)>> = vec![Vec::new()];
        let mut done = 0;
        for (turn, len) in picked {
            groups.last_mut().expect("a group").push((turn, len));
            done += len;
            if done * saves >= groups.len() * self.messages && groups.len() < saves {
                groups.push(Vec::new());
            }
        }
        groups.retain(|g| !g.is_empty());
        groups
    }

    /// Where session `i` holds [`RARE`], if it does: its save, and the turn in that save
    /// whose user message holds it (the save's middle turn).
    fn plant_in(&self, i: usize, layout: &[Vec<(usize, usize)>]) -> Option<(usize, usize)> {
        let plant = self.plants.iter().find(|p| p.session == i)?;
        let save = match plant.save {
            Place::First => 0,
            Place::Middle => layout.len() / 2,
            Place::Last => layout.len() - 1,
        };
        Some((save, layout[save].len() / 2))
    }

    /// `turn`'s user message with [`RARE`] added.
    fn planted(&self, turn: usize) -> Message {
        let mut user = self.wire[turn][0].clone();
        let text = user["content"].as_str().expect("user text").to_owned();
        user["content"] = Value::from(format!("{text} {RARE}"));
        Message::from_openai_chat(&user).expect("a user message")
    }

    /// Session `i`'s messages, one vector a save.
    fn saves_of(&self, i: usize) -> Vec<Vec<Message>> {
        let layout = self.layout(i);
        let plant = self.plant_in(i, &layout);
        layout
            .iter()
            .enumerate()
            .map(|(s, save)| {
                let mut messages = Vec::new();
                for (t, &(turn, len)) in save.iter().enumerate() {
                    if plant == Some((s, t)) {
                        messages.push(self.planted(turn));
                        messages.extend_from_slice(&self.turns[turn][1..len]);
                    } else {
                        messages.extend_from_slice(&self.turns[turn][..len]);
                    }
                }
                messages
            })
            .collect()
    }

    /// Saves every session into `store`, as an agent leaves it (see the module docs).
    fn fill(&self, store: &dyn SessionStore) {
        for i in 0..self.sessions {
            let id = Self::id(i);
            let mut saves = self.saves_of(i).into_iter();
            let first = snapshot(id.as_str(), saves.next().unwrap_or_default());
            store.save(&first).expect("save the first step");
            // Loaded, as a harness resumes it: a built snapshot does not know what is
            // stored, so saving it again would write it whole.
            let mut current = store.load(&id).expect("load the first step");
            for save in saves {
                current = with_turn(current, save);
                let revision = store.save(&current).expect("save a step");
                current = current.stored_at(revision);
            }
            assert_eq!(current.transcript().len(), self.messages);
        }
    }

    /// The first page `query` must find: the newest sessions holding a match, each with
    /// the positions of its matching messages, at most [`PAGE`]; and whether more follow.
    /// Each of the workload's messages is matched once, and each planted one.
    fn expected(&self, query: &SearchQuery) -> (Vec<(SessionId, Vec<usize>)>, bool) {
        let matching: Vec<Vec<bool>> = self
            .turns
            .iter()
            .map(|turn| turn.iter().map(|m| query.matches_message(m)).collect())
            .collect();
        let mut hits = Vec::new();
        for i in (0..self.sessions).rev() {
            let layout = self.layout(i);
            let plant = self.plant_in(i, &layout);
            let mut positions = Vec::new();
            let mut position = 0;
            for (s, save) in layout.iter().enumerate() {
                for (t, &(turn, len)) in save.iter().enumerate() {
                    for (k, &matches) in matching[turn][..len].iter().enumerate() {
                        let matches = if plant == Some((s, t)) && k == 0 {
                            query.matches_message(&self.planted(turn))
                        } else {
                            matches
                        };
                        if matches {
                            positions.push(position);
                        }
                        position += 1;
                    }
                }
            }
            if !positions.is_empty() {
                hits.push((Self::id(i), positions));
                // A full page always names where the next starts: the search stops
                // there, without looking for more.
                if hits.len() == PAGE {
                    return (hits, true);
                }
            }
        }
        (hits, false)
    }
}

/// One query measured on every store, with the page it must find.
struct Case {
    label: &'static str,
    query: SearchQuery,
    hits: Vec<(SessionId, Vec<usize>)>,
    more: bool,
    /// Whether its floor is measured too ([`Case::floor`]).
    floor: bool,
}

impl Case {
    fn new(label: &'static str, text: &str, work: &Workload, floor: bool) -> Self {
        let query = SearchQuery::new(text).expect("query");
        let (hits, more) = work.expected(&query);
        Case {
            label,
            query,
            hits,
            more,
            floor,
        }
    }

    /// What the search must do however it finds the sessions: the history of each
    /// session on its page read, and the crate's matching run on it
    /// (`SearchQuery::hits_in`). Returns the positions of the matching messages.
    fn floor(&self, store: &dyn SessionStore) -> Vec<(SessionId, Vec<usize>)> {
        self.hits
            .iter()
            .map(|(id, _)| {
                let history = store.history(id).expect("history");
                let hits = self.query.hits_in(&history);
                (id.clone(), hits.iter().map(|m| m.position).collect())
            })
            .collect()
    }

    fn run(&self, store: &dyn SessionStore) -> SearchPage {
        store
            .search(&self.query, &ListFilter::new(), PAGE, None)
            .expect("search")
    }

    /// Panics unless `page` is the page the data holds.
    fn check(&self, store: &str, page: &SearchPage) {
        let got: Vec<(SessionId, Vec<usize>)> = page
            .hits
            .iter()
            .map(|hit| {
                let positions = hit.messages.iter().map(|m| m.position).collect();
                (hit.session.id.clone(), positions)
            })
            .collect();
        let brief = |hits: &[(SessionId, Vec<usize>)]| -> Vec<String> {
            hits.iter()
                .map(|(id, positions)| format!("{id} ({} messages)", positions.len()))
                .collect()
        };
        assert!(
            got == self.hits,
            "{store}: search {:?} found {:?}, the data holds {:?} (or the same sessions at \
             other messages)",
            self.query.words(),
            brief(&got),
            brief(&self.hits)
        );
        assert_eq!(
            page.next.is_some(),
            self.more,
            "{store}: search {:?}: whether a next page follows",
            self.query.words()
        );
        assert!(
            page.unreadable.is_empty(),
            "{store}: search {:?}: unreadable sessions: {:?}",
            self.query.words(),
            page.unreadable
        );
    }
}

/// Measures every case on the store `build` makes, built when the first of them runs
/// (and checked then), dropped when they are done.
fn measure<S: SessionStore>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    work: &Workload,
    cases: &[Case],
    build: impl FnOnce() -> S,
) {
    let build = Cell::new(Some(build));
    let store_cell: OnceCell<S> = OnceCell::new();
    let store = || {
        store_cell.get_or_init(|| {
            let started = Instant::now();
            let store = (build.take().expect("built once"))();
            work.fill(&store);
            eprintln!(
                "search: {name}: {} sessions x {} messages ({} saves each) built in {:.1} s",
                work.sessions,
                work.messages,
                work.saves,
                started.elapsed().as_secs_f64()
            );
            let mut firsts = Vec::new();
            for case in cases {
                let started = Instant::now();
                let page = case.run(&store);
                let took = started.elapsed();
                case.check(name, &page);
                firsts.push(format!(
                    "{} {} sessions in {:.1} ms",
                    case.label,
                    page.hits.len(),
                    took.as_secs_f64() * 1e3
                ));
            }
            eprintln!("search: {name}: checked, first runs: {}", firsts.join(", "));
            for case in cases.iter().filter(|case| case.floor) {
                assert!(
                    case.floor(&store) == case.hits,
                    "{name}: the floor of search {:?} finds other messages",
                    case.query.words()
                );
            }
            store
        })
    };
    for case in cases {
        group.bench_function(BenchmarkId::new(name, case.label), |b| {
            let store = store();
            b.iter(|| case.run(store));
        });
        if case.floor {
            group.bench_function(BenchmarkId::new(format!("{name}_floor"), case.label), |b| {
                let store = store();
                b.iter(|| case.floor(store));
            });
        }
    }
}

fn search(c: &mut Criterion) {
    let work = Workload::from_env();
    let cases = [
        Case::new("rare", RARE, &work, true),
        Case::new("common", COMMON, &work, false),
        Case::new("prefix", PREFIX, &work, false),
    ];
    assert_eq!(cases[0].hits.len(), PLANTED, "the rare word's sessions");
    assert_eq!(
        cases[1].hits.len(),
        PAGE.min(work.sessions),
        "the common word"
    );
    eprintln!(
        "search: {} sessions x {} messages, {} saves each; {RARE:?} in sessions {}",
        work.sessions,
        work.messages,
        work.saves,
        cases[0]
            .hits
            .iter()
            .map(|(id, _)| id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let root = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("search");
    measure(
        &mut group,
        "memory_store",
        &work,
        &cases,
        MemorySessionStore::new,
    );
    measure(&mut group, "file_store", &work, &cases, || {
        FileSessionStore::builder()
            .durability(Durability::Buffered)
            .open(root.path().join("files"))
            .expect("open")
    });
    measure(&mut group, "sqlite", &work, &cases, || {
        SqliteSessionStore::builder()
            .durability(Durability::Buffered)
            .open(root.path().join("db").join("sessions.db"))
            .expect("open")
    });
    #[cfg(feature = "postgres")]
    postgres::measure(&mut group, &work, &cases);
    group.finish();
}

/// `PostgresSessionStore` in a schema of its own on the server `AGENT_SESSION_POSTGRES_URL`
/// names, as `support/postgres.rs` makes them for the other benches (that module's
/// server and schema helpers are private to the `store` bench, which it is part of).
#[cfg(feature = "postgres")]
mod postgres {
    use std::cell::Cell;
    use std::time::{SystemTime, UNIX_EPOCH};

    use agent_session::PostgresSessionStore;
    use criterion::measurement::WallTime;
    use criterion::BenchmarkGroup;
    use tokio_postgres::NoTls;

    use super::{Case, Workload};

    const URL_VAR: &str = "AGENT_SESSION_POSTGRES_URL";

    /// A schema named after the run, dropped (with everything in it) when this is, if it
    /// was made.
    struct Schema {
        url: String,
        name: String,
        made: Cell<bool>,
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            if !self.made.get() {
                return;
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("start a tokio runtime");
            let dropped = runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await?;
                let connection = tokio::spawn(connection);
                let dropped = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
                    .await;
                drop(client);
                let _ = connection.await;
                dropped
            });
            if let Err(e) = dropped {
                eprintln!("search: could not drop schema {}: {e}", self.name);
            }
        }
    }

    pub(super) fn measure(
        group: &mut BenchmarkGroup<'_, WallTime>,
        work: &Workload,
        cases: &[Case],
    ) {
        let Some(url) = std::env::var(URL_VAR)
            .ok()
            .filter(|url| !url.trim().is_empty())
        else {
            eprintln!(
                "search/postgres_store skipped: {URL_VAR} is not set \
                 (scripts/bench-postgres starts a throw-away server and sets it)"
            );
            return;
        };
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the clock is after 1970")
            .as_secs();
        // Declared before the store, so dropped after it.
        let schema = Schema {
            name: format!("asbench_{since_epoch}_{}_search", std::process::id()),
            url,
            made: Cell::new(false),
        };
        super::measure(group, "postgres_store", work, cases, || {
            let store = PostgresSessionStore::builder()
                .schema(schema.name.as_str())
                .connect(&schema.url)
                .expect("make the PostgreSQL store");
            schema.made.set(true);
            store.migrate().expect("migrate a fresh schema");
            store
        });
    }
}

fn config() -> Criterion {
    // Shared, noisy 2-core machines: few samples, short windows; compare stores within a
    // run, never absolute times across runs.
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = search
}
criterion_main!(benches);
