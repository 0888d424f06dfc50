//! Leases across processes, on the file store and (feature `postgres`) the PostgreSQL
//! store (issue 17).
//!
//! The parent test starts this same test binary again to run only [`child_holds_a_lease`]:
//! the child opens the store (a directory, or a schema on the test server), takes a lease
//! on a session, prints `leased <epoch>`, then
//! saves a turn for every `save <n>` line it reads on stdin (under its lease) and answers
//! `ok <revision>` or `refused <error kind>`. The parent then:
//!
//! - checks that a second writer (itself) is refused while the child holds the lease, and
//!   that the refusal names the child's process; then kills the child with SIGKILL and
//!   takes the lease at once: a file-store lease ends with its holder's process, not
//!   after its time to live (one hour here). A PostgreSQL lease ends at its expiry by the
//!   server's clock, never earlier: the next acquisition is refused until then, and is
//!   stamped (by the server) no earlier than the killed holder's expiry;
//! - stops the child with SIGSTOP past its lease's expiry, takes the session over, saves
//!   turns of its own, resumes the child with SIGCONT and has it try to save: every one of
//!   its saves must be refused, and the session's history must hold the parent's turns
//!   and not one of the child's (run 100 times).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use agent_session::{
    Error, ErrorKind, FileSessionStore, LeaseHolder, LeaseRequest, Message, SessionId,
    SessionSnapshot, SessionStore,
};
use rustix::process::{kill_process, Pid, Signal};

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod postgres_support;

/// Where the parent and its child keep the session: a directory, or a schema on the test
/// server.
enum Place {
    Dir(tempfile::TempDir),
    #[cfg(feature = "postgres")]
    Schema {
        name: String,
        /// Dropped (with the schema) when the place is.
        _schemas: postgres_support::Schemas,
    },
}

impl Place {
    fn dir() -> Self {
        Place::Dir(tempfile::tempdir().expect("temp dir"))
    }

    /// A fresh schema, migrated.
    #[cfg(feature = "postgres")]
    fn schema() -> Self {
        let schemas = postgres_support::Schemas::new();
        let name = schemas.name();
        postgres_support::connect(&name).migrate().expect("migrate");
        Place::Schema {
            name,
            _schemas: schemas,
        }
    }

    /// A store on the place: each call a store object of its own, as another process has.
    fn store(&self) -> Box<dyn SessionStore> {
        match self {
            Place::Dir(dir) => Box::new(FileSessionStore::open(dir.path()).expect("open")),
            #[cfg(feature = "postgres")]
            Place::Schema { name, .. } => Box::new(postgres_support::connect(name)),
        }
    }

    /// Tells a child where the place is.
    fn pass_to(&self, command: &mut Command) {
        match self {
            Place::Dir(dir) => command.env(DIR_VAR, dir.path()),
            #[cfg(feature = "postgres")]
            Place::Schema { name, .. } => command.env(SCHEMA_VAR, name),
        };
    }

    /// The store of the place a parent passed to this child, if it passed one.
    fn store_in_child() -> Option<Box<dyn SessionStore>> {
        if let Ok(dir) = std::env::var(DIR_VAR) {
            return Some(Box::new(
                FileSessionStore::open(dir).expect("open the store"),
            ));
        }
        #[cfg(feature = "postgres")]
        if let Ok(name) = std::env::var(SCHEMA_VAR) {
            return Some(Box::new(postgres_support::connect(&name)));
        }
        None
    }
}

const CHILD_TEST: &str = "child_holds_a_lease";
const DIR_VAR: &str = "AGENT_SESSION_LEASE_DIR";
const SCHEMA_VAR: &str = "AGENT_SESSION_LEASE_SCHEMA";
const ID_VAR: &str = "AGENT_SESSION_LEASE_ID";
const TTL_VAR: &str = "AGENT_SESSION_LEASE_TTL_MS";
const CHILD_LABEL: &str = "child-holder";

/// The child: takes the lease, then saves on request. Run only by the tests below.
#[test]
#[ignore = "run by the lease tests in a child process"]
fn child_holds_a_lease() {
    let (Some(store), Ok(id), Ok(ttl)) = (
        Place::store_in_child(),
        std::env::var(ID_VAR),
        std::env::var(TTL_VAR),
    ) else {
        return;
    };
    let id = SessionId::parse(&id).expect("id");
    let ttl = Duration::from_millis(ttl.parse().expect("ttl"));
    let request = LeaseRequest::new(LeaseHolder::this_process(CHILD_LABEL)).ttl(ttl);
    let lease = store
        .acquire_lease(&id, &request)
        .expect("the child leases");
    let mut snapshot = store.load(&id).expect("load").with_lease(&lease);
    let mut out = std::io::stdout().lock();
    writeln!(out, "leased {}", lease.epoch).expect("write");
    out.flush().expect("flush");
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("read a request");
        let n = line.strip_prefix("save ").expect("a save request");
        let next = with_turn(&snapshot, &format!("child turn {n}")).with_lease(&lease);
        match store.save(&next) {
            Ok(revision) => {
                snapshot = next.with_revision(revision);
                writeln!(out, "ok {revision}").expect("write");
            }
            // The variant, not only the kind (Leased and Fenced share it).
            Err(e @ Error::Fenced { .. }) => writeln!(out, "refused fenced {e}").expect("write"),
            Err(e) => writeln!(out, "refused other {e}").expect("write"),
        }
        out.flush().expect("flush");
    }
}

/// A child holding a lease on `id` in `dir`, talked to through its stdin and stdout.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    epoch: u64,
}

impl Holder {
    fn start(place: &Place, id: &SessionId, ttl: Duration) -> Self {
        let exe = std::env::current_exe().expect("the test binary");
        let mut command = Command::new(exe);
        place.pass_to(&mut command);
        let mut child = command
            .args([CHILD_TEST, "--exact", "--include-ignored", "--nocapture"])
            .args(["--test-threads=1", "--quiet"])
            .env(ID_VAR, id.as_str())
            .env(TTL_VAR, ttl.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the child");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("the child's stdout"));
        let mut holder = Holder {
            child,
            stdin,
            stdout,
            epoch: 0,
        };
        let line = holder.read_reply("leased ");
        holder.epoch = line.parse().expect("an epoch");
        holder
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("a pid")).expect("a pid")
    }

    /// The first line the child prints that `wanted` accepts (the test harness prints
    /// lines of its own around the child's), trimmed.
    fn read_line_where(&mut self, what: &str, wanted: impl Fn(&str) -> bool) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let read = self.stdout.read_line(&mut line).expect("read the child");
            assert!(read > 0, "the child ended before it printed {what}");
            if wanted(line.trim_end()) {
                return line.trim_end().to_owned();
            }
        }
    }

    /// The rest of the first line the child prints that starts with `prefix`.
    fn read_reply(&mut self, prefix: &str) -> String {
        let line = self.read_line_where(prefix, |line| line.starts_with(prefix));
        line[prefix.len()..].to_owned()
    }

    /// Asks the child to save turn `n`; its answer (`ok <revision>` or `refused ...`).
    fn save(&mut self, n: usize) -> String {
        let stdin = self.stdin.as_mut().expect("the child's stdin");
        writeln!(stdin, "save {n}").expect("write to the child");
        stdin.flush().expect("flush");
        self.read_line_where("an answer", |line| {
            line.starts_with("ok ") || line.starts_with("refused ")
        })
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for the child");
        assert!(status.success(), "the child failed: {status}");
    }
}

/// `snapshot` with one more user message.
fn with_turn(snapshot: &SessionSnapshot, text: &str) -> SessionSnapshot {
    snapshot
        .clone()
        .with_appended(vec![Message::user(text)], Vec::new(), snapshot.updated_at())
        .expect("a turn appended")
}

fn new_session(store: &dyn SessionStore, name: &str) -> SessionId {
    let id = SessionId::parse(name).expect("id");
    let snapshot = SessionSnapshot::builder(id.clone(), "m")
        .transcript(vec![Message::user("first")])
        .build()
        .expect("build");
    store.save(&snapshot).expect("save");
    id
}

fn request(label: &str) -> LeaseRequest {
    LeaseRequest::new(LeaseHolder::this_process(label)).ttl(Duration::from_secs(3600))
}

#[test]
fn a_second_writer_is_refused_by_name_and_a_killed_holders_lease_ends_at_once() {
    let place = Place::dir();
    let store = place.store();
    let (id, holder) = refused_while_the_holder_lives(&place, &*store, Duration::from_secs(3600));
    kill(holder);
    // At once: the lease had an hour to run, and ended with its process.
    let lease = store
        .acquire_lease(&id, &request("parent"))
        .expect("the killed holder's lease is gone");
    the_new_holder_keeps_the_old_ones_turn(&*store, &id, &lease);
}

/// On PostgreSQL a killed holder's lease ends at its expiry by the server's clock: not
/// earlier (the next acquisition is refused until then, and the server stamps the one that
/// succeeds no earlier than the expiry), and not much later.
#[cfg(feature = "postgres")]
#[test]
fn a_killed_holders_postgres_lease_ends_at_its_expiry_by_the_servers_clock() {
    // Long enough that the refusal right after the kill is never a race with the expiry.
    const TTL: Duration = Duration::from_secs(5);
    let place = Place::schema();
    let store = place.store();
    let (id, holder) = refused_while_the_holder_lives(&place, &*store, TTL);
    let held = store.leases().expect("leases").remove(0);
    let killed_epoch = holder.epoch;
    kill(holder);
    match store.acquire_lease(&id, &request("parent")) {
        Err(Error::Leased { expires_at, .. }) => assert_eq!(expires_at, held.expires_at),
        other => panic!("the killed holder's lease lasts until its expiry, got {other:?}"),
    }
    let mut tries = 0;
    let lease = loop {
        tries += 1;
        match store.acquire_lease(&id, &request("parent")) {
            Ok(lease) => break lease,
            Err(Error::Leased { .. }) if tries < 400 => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("the lease must end at its expiry: {e}"),
        }
    };
    assert!(
        lease.acquired_at >= held.expires_at,
        "taken at {} (server clock), before the killed holder's expiry at {}",
        lease.acquired_at,
        held.expires_at
    );
    assert!(lease.epoch > killed_epoch);
    the_new_holder_keeps_the_old_ones_turn(&*store, &id, &lease);
}

/// A child holding a lease on a new session of `place` with `ttl`, after checking that a
/// second writer (this process, through `store`) is refused by name while it lives.
fn refused_while_the_holder_lives(
    place: &Place,
    store: &dyn SessionStore,
    ttl: Duration,
) -> (SessionId, Holder) {
    let id = new_session(store, "two-writers");
    let mut holder = Holder::start(place, &id, ttl);
    assert!(holder.save(1).starts_with("ok "), "the holder saves");

    match store.acquire_lease(&id, &request("parent")) {
        Err(Error::Leased { holder: named, .. }) => {
            assert_eq!(named.pid, holder.child.id(), "the refusal names the holder");
            assert_eq!(named.label, CHILD_LABEL);
        }
        other => panic!("the second writer must be refused, got {other:?}"),
    }
    let listed = store.leases().expect("leases");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].holder.pid, holder.child.id());
    // A save without a lease is refused too, while the holder lives.
    let loaded = store.load(&id).expect("a read needs no lease");
    assert_eq!(
        store
            .save(&with_turn(&loaded, "unleased"))
            .expect_err("unleased save")
            .kind(),
        ErrorKind::Leased
    );
    (id, holder)
}

fn kill(mut holder: Holder) {
    holder.child.kill().expect("SIGKILL the holder");
    holder.child.wait().expect("reap the holder");
}

/// The killed holder's acknowledged turn is kept, and the new holder saves under `lease`.
fn the_new_holder_keeps_the_old_ones_turn(
    store: &dyn SessionStore,
    id: &SessionId,
    lease: &agent_session::Lease,
) {
    let loaded = store.load(id).expect("load");
    assert_eq!(
        loaded.transcript().len(),
        2,
        "the holder's acknowledged turn is kept"
    );
    store
        .save(&with_turn(&loaded, "parent").with_lease(lease))
        .expect("the new holder saves");
}

#[test]
fn a_stopped_holder_taken_over_past_its_expiry_never_writes_again() {
    stopped_holders_never_write_again(&Place::dir());
}

#[cfg(feature = "postgres")]
#[test]
fn a_stopped_postgres_holder_taken_over_past_its_expiry_never_writes_again() {
    stopped_holders_never_write_again(&Place::schema());
}

fn stopped_holders_never_write_again(place: &Place) {
    const RUNS: usize = 100;
    const TTL: Duration = agent_session::MIN_LEASE_TTL;
    let store = place.store();
    for run in 0..RUNS {
        let id = new_session(&*store, &format!("stopped-{run}"));
        let mut holder = Holder::start(place, &id, TTL);
        assert!(
            holder.save(0).starts_with("ok "),
            "run {run}: the holder saves"
        );

        kill_process(holder.pid(), Signal::STOP).expect("SIGSTOP the holder");
        std::thread::sleep(TTL * 2);
        // Past its expiry the lease is taken without take_over (in the file store the
        // stopped process still holds its lock, so it is taken over all the same).
        let lease = store
            .acquire_lease(&id, &request("new-holder"))
            .unwrap_or_else(|e| panic!("run {run}: the expired lease is taken: {e}"));
        assert!(lease.epoch > holder.epoch);
        let mut mine = store.load(&id).expect("load").with_lease(&lease);
        for turn in 0..3 {
            let next = with_turn(&mine, &format!("new holder turn {turn}")).with_lease(&lease);
            let revision = store.save(&next).expect("the new holder saves");
            mine = next.with_revision(revision);
        }
        kill_process(holder.pid(), Signal::CONT).expect("SIGCONT the holder");

        for n in 1..=3 {
            let answer = holder.save(n);
            assert!(
                answer.starts_with("refused fenced"),
                "run {run}: the old holder's save {n} must be fenced, got `{answer}`"
            );
        }
        holder.finish();

        let history = store.history(&id).expect("history");
        let texts: Vec<String> = history.messages.iter().map(|m| m.message.text()).collect();
        assert_eq!(
            texts,
            [
                "first",
                "child turn 0",
                "new holder turn 0",
                "new holder turn 1",
                "new holder turn 2"
            ],
            "run {run}: the history holds each acknowledged turn once, and none of the fenced ones"
        );
        store.release_lease(&lease).expect("release");
    }
}

/// An engine that is never called: the harness tests below only resume and save.
struct Idle;

impl agent_session::Engine for Idle {
    async fn complete(
        &mut self,
        _: agent_session::CompletionRequest<'_>,
    ) -> Result<agent_session::Completion, agent_session::BoxError> {
        Err("not called".into())
    }
}

/// The harness keeps the lease of a session it resumed for writing renewed while the
/// session is open (long past its time to live), fences the session's saves by it, and
/// releases it when the session is dropped; on every store that leases.
#[test]
fn a_leased_session_keeps_its_lease_while_open_and_releases_it_when_dropped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = FileSessionStore::open(dir.path()).expect("open");
    check_heartbeat(&agent_session::Harness::builder(file, || Idle).build());
    let memory = agent_session::MemorySessionStore::new();
    check_heartbeat(&agent_session::Harness::builder(memory, || Idle).build());
    #[cfg(feature = "postgres")]
    {
        let schemas = postgres_support::Schemas::new();
        let postgres = schemas.store();
        check_heartbeat(&agent_session::Harness::builder(postgres, || Idle).build());
    }
}

fn check_heartbeat<F: Fn() -> Idle>(harness: &agent_session::Harness<F>) {
    // Renewed every 100 ms: a late renewal on a loaded machine does not let it lapse.
    const TTL: Duration = Duration::from_millis(300);
    let mut session = harness
        .new_session(agent_session::SessionOptions::new("m"))
        .expect("new");
    harness.save_session(&mut session).expect("save");
    let id = session.id().clone();
    let request = LeaseRequest::new(LeaseHolder::this_process("open")).ttl(TTL);
    let mut open = harness
        .resume_session_leased(&id, None, &request)
        .expect("resume for writing");
    let lease = open.lease().expect("the session holds its lease").clone();
    // Five times its time to live: only the heartbeat keeps it.
    std::thread::sleep(TTL * 5);
    let other = LeaseRequest::new(LeaseHolder::this_process("other")).ttl(TTL);
    assert_eq!(
        harness
            .resume_session_leased(&id, None, &other)
            .expect_err("still leased")
            .kind(),
        ErrorKind::Leased
    );
    assert_eq!(
        harness.store().leases().expect("leases")[0].epoch,
        lease.epoch
    );
    harness
        .save_session(&mut open)
        .expect("the holder saves under its lease");
    // A plain resume reads; its save is refused while the lease is live.
    let mut reader = harness.resume_session(&id, None).expect("read");
    assert_eq!(
        harness
            .save_session(&mut reader)
            .expect_err("not the holder")
            .kind(),
        ErrorKind::Leased
    );
    drop(open);
    assert!(harness.store().leases().expect("leases").is_empty());
    let again = harness
        .resume_session_leased(&id, None, &other)
        .expect("released on drop");
    assert!(again.lease().expect("leased").epoch > lease.epoch);
}
