//! SIGKILL during saves to a `SqliteSessionStore`, and power-loss-style images of its
//! files (issue 18).
//!
//! The parent test starts this same test binary again to run only
//! [`sqlite_kill_child_saves_until_killed`], which opens the store on one database and
//! runs [`SAVERS`] threads: each appends turns to its own session and, in turn, to one
//! session shared by all of them (load, append, save; reloaded on conflict), as a
//! harness does. Each message is [`message`]`(id, position)`, a 0.5-8 KB text derived
//! from the session and its position, so a mix of two states or an entry applied to the
//! wrong base is caught; every seventh revision compacts all but the last two messages
//! into a summary naming the last position it replaced (`tests/common/positions.rs`), so
//! loads also start from view checkpoints.
//! After each `Ok` save the child prints `saved <id> <n>` (an acknowledgement).
//!
//! The parent kills the child with SIGKILL a random 0-150 ms after it reports that it
//! started, reusing the database across kills, and after every kill opens the store and
//! checks that every session loads as exactly a state (every message checked), that a
//! random earlier revision loads as its state too, that the listing reports nothing
//! unreadable and agrees with the loads, that no counter goes backwards, and that no
//! acknowledged save is lost.
//!
//! Power-loss-style images: after every fifth kill (the files quiescent, the child dead)
//! the database and its `-wal` are copied elsewhere without the `-shm` (whose contents a
//! power cut makes meaningless; SQLite rebuilds it from the log), and the copied log is
//! cut at a random byte: what a power cut leaves of a log whose last frames never reached
//! the disk. The image must open, and every session in it load as exactly a state. This
//! checks that a torn log tail leaves an older consistent state, never damage. That
//! acknowledged saves survive a power cut (SQLite's fsync of the log at each commit with
//! `synchronous = FULL`) is checked by `tests/sqlite_power_loss.rs`, which replays the
//! store's traced writes and fsyncs and drops what no fsync covered.
//!
//! Negative control: [`sqlite_kill_checks_catch_a_lost_save_and_a_mixed_state`] runs the
//! same checks on an older copy of a database (a lost acknowledged save) and on a state
//! no save makes, and requires both to be caught.
//!
//! `cargo test` runs 120 kills; `AGENT_SESSION_LONG=1` runs 1,200. `AGENT_SESSION_SEED`
//! replays a run's delays and cuts.
#![cfg(all(unix, feature = "sqlite"))]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

#[path = "common/killed_child.rs"]
mod killed_child;
#[path = "common/positions.rs"]
mod positions;
#[path = "common/seeded.rs"]
mod seeded;

use agent_session::{Message, SessionId, SessionSnapshot, SessionStore, SqliteSessionStore};

use killed_child::run_until_killed;
use positions::{check_positions, has_a_view, message, next_state};
use seeded::{run_seed, Rng};

const DB_ENV: &str = "AGENT_SESSION_SQLITE_KILL_DB";
const LONG_ENV: &str = "AGENT_SESSION_LONG";
const CHILD_TEST: &str = "sqlite_kill_child_saves_until_killed";
const SAVERS: usize = 3;
const SHARED: &str = "shared";
const DEFAULT_KILLS: usize = 120;
const LONG_KILLS: usize = 1_200;
const MAX_DELAY_MICROS: u64 = 150_000;
/// Sessions start over (a new session under the same id, written whole) once their last
/// message is at this position, so the run stays bounded.
const MAX_MESSAGES: usize = 200;

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).expect("valid id")
}

fn session_ids() -> Vec<SessionId> {
    let mut ids: Vec<SessionId> = (0..SAVERS).map(|t| sid(&format!("own-{t}"))).collect();
    ids.push(sid(SHARED));
    ids
}

/// The revision of `snapshot` if it is exactly a state (`Err` for anything else): its
/// messages in order from position 1, or a compaction's summary and the messages after
/// those it replaced. A session that starts over is saved as one message over the
/// revision it had (its revisions only grow); each save after that adds one message or
/// compacts.
fn verify(snapshot: &SessionSnapshot) -> Result<u64, String> {
    check_positions(snapshot, message)?;
    Ok(snapshot.revision().as_u64())
}

/// The child: saves until killed (or, if never killed, for a while).
#[test]
fn sqlite_kill_child_saves_until_killed() {
    let Some(db) = std::env::var_os(DB_ENV) else {
        return;
    };
    let store = std::sync::Arc::new(SqliteSessionStore::open(&db).expect("child opens"));
    killed_child::started();
    let deadline = Instant::now() + Duration::from_secs(60);
    let threads: Vec<_> = (0..SAVERS)
        .map(|t| {
            let store = std::sync::Arc::clone(&store);
            std::thread::spawn(move || {
                let own = sid(&format!("own-{t}"));
                let shared = sid(SHARED);
                let mut turn = 0usize;
                while Instant::now() < deadline {
                    turn += 1;
                    let id = if turn.is_multiple_of(3) {
                        &shared
                    } else {
                        &own
                    };
                    loop {
                        let loaded = match store.load(id) {
                            Ok(loaded) => Some(loaded),
                            Err(e) if e.is_not_found() => None,
                            Err(e) => panic!("child load {id}: {e}"),
                        };
                        let (next, _) = next_state(id, loaded, MAX_MESSAGES);
                        match store.save(&next) {
                            Ok(revision) => {
                                println!("saved {id} {revision}");
                                break;
                            }
                            Err(e) if e.is_conflict() => {}
                            Err(e) => panic!("child save {id}: {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("saver");
    }
}

/// Checks every session of the store at `db` loads as exactly a state (and a random
/// earlier revision too); returns each session's revision.
fn check_store(db: &Path, rng: &mut Rng) -> Result<BTreeMap<SessionId, u64>, String> {
    let store = SqliteSessionStore::open(db).map_err(|e| format!("open {}: {e}", db.display()))?;
    let listing = store.list().map_err(|e| format!("list: {e}"))?;
    if !listing.unreadable.is_empty() {
        return Err(format!("unreadable: {:?}", listing.unreadable));
    }
    let mut found = BTreeMap::new();
    for id in session_ids() {
        let loaded = match store.load(&id) {
            Ok(loaded) => loaded,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(format!("load {id}: {e}")),
        };
        let revision = verify(&loaded)?;
        let listed = listing
            .sessions
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| format!("{id} loads but is not listed"))?;
        if listed.revision.as_u64() != revision || listed.message_count != loaded.transcript().len()
        {
            return Err(format!("{id}: the listing disagrees with the load"));
        }
        let revisions = store
            .revisions(&id)
            .map_err(|e| format!("revisions {id}: {e}"))?;
        let pick = &revisions[rng.below(revisions.len())];
        let past = store
            .load_at(&id, pick.revision)
            .map_err(|e| format!("load_at {id} {}: {e}", pick.revision))?;
        verify(&past)?;
        found.insert(id, revision);
    }
    Ok(found)
}

/// A power-loss-style image of the database: the database and its log copied (no
/// `-shm`), the log cut at a random byte.
fn power_cut_image(db: &Path, into: &Path, rng: &mut Rng) -> std::path::PathBuf {
    let image = into.join("image.db");
    for suffix in ["", "-wal", "-shm"] {
        let mut name = image.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(&name);
    }
    std::fs::copy(db, &image).expect("copy the database");
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let mut wal_image = image.as_os_str().to_owned();
    wal_image.push("-wal");
    if std::fs::copy(&wal, &wal_image).is_ok() {
        let len = std::fs::metadata(&wal_image).expect("metadata").len();
        let cut = rng.below_u64(len + 1);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&wal_image)
            .and_then(|f| f.set_len(cut))
            .expect("cut the log");
    }
    image
}

#[test]
fn sqlite_every_acknowledged_save_survives_sigkill() {
    let kills = if std::env::var_os(LONG_ENV).is_some_and(|v| v == "1") {
        LONG_KILLS
    } else {
        DEFAULT_KILLS
    };
    let seed = run_seed();
    let mut rng = Rng::new(seed, 0);
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("store").join("sessions.db");
    let images_root = tempfile::tempdir().expect("temp dir");
    let images = images_root.path().join("images");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&images)
        .expect("a private directory for the images");
    let mut acknowledged: BTreeMap<String, u64> = BTreeMap::new();
    let mut last: BTreeMap<SessionId, u64> = BTreeMap::new();
    let (mut total_acks, mut images_checked, mut with_views) = (0usize, 0usize, 0usize);
    for kill in 0..kills {
        let delay = Duration::from_micros(rng.below_u64(MAX_DELAY_MICROS + 1));
        let lines = run_until_killed(CHILD_TEST, &[(DB_ENV, db.as_os_str())], delay)
            .unwrap_or_else(|e| panic!("{e} (seed {seed})"));
        for line in &lines {
            let mut parts = line.split_whitespace();
            if parts.next() != Some("saved") {
                continue;
            }
            let (Some(id), Some(n)) = (parts.next(), parts.next()) else {
                continue;
            };
            let n: u64 = n.parse().expect("a revision");
            total_acks += 1;
            // Per session, the last acknowledgement (the child prints them in order).
            acknowledged.insert(id.to_owned(), n);
        }
        let found = check_store(&db, &mut rng)
            .unwrap_or_else(|e| panic!("after kill {kill} (seed {seed}): {e}"));
        if has_a_view(&db) {
            with_views += 1;
        }
        for (id, n) in &acknowledged {
            let stored = found.get(&sid(id)).copied().unwrap_or(0);
            assert!(
                stored >= *n,
                "after kill {kill} (seed {seed}): {id} acknowledged at {n} but stored at {stored}"
            );
        }
        // Revisions only grow (a session that starts over is saved over its revision).
        for (id, before) in &last {
            let now = found.get(id).copied().unwrap_or(0);
            assert!(
                now >= *before,
                "after kill {kill} (seed {seed}): {id} went back from revision {before} to {now}"
            );
        }
        last = found;
        acknowledged.clear();
        if kill % 5 == 4 {
            let image = power_cut_image(&db, &images, &mut rng);
            check_store(&image, &mut rng)
                .unwrap_or_else(|e| panic!("power-cut image after kill {kill} (seed {seed}): {e}"));
            images_checked += 1;
        }
    }
    println!(
        "sqlite kill test: {kills} kills, {total_acks} acknowledged saves checked, {images_checked} power-cut images, {with_views} checks of a store holding a view checkpoint (seed {seed})"
    );
    assert!(total_acks > 0, "the child never saved (seed {seed})");
    assert!(
        with_views > 0,
        "no check met a compacted session's view checkpoint (seed {seed})"
    );
}

/// The negative control of the checks above: a store that lost an acknowledged save (an
/// older, consistent copy of the database) and one holding a state no save makes (a
/// message of another position) must both be caught by the same checks the kill loop
/// runs.
#[test]
fn sqlite_kill_checks_catch_a_lost_save_and_a_mixed_state() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("store").join("sessions.db");
    let mut rng = Rng::new(7, 0);
    let store = SqliteSessionStore::open(&db).expect("open");
    let save_next = |id: &SessionId| -> u64 {
        let loaded = store.load(id).ok();
        store
            .save(&next_state(id, loaded, MAX_MESSAGES).0)
            .expect("save")
            .as_u64()
    };
    for id in session_ids() {
        for _ in 0..3 {
            save_next(&id);
        }
    }
    // A consistent copy of the database as it is now, made private as the store wants.
    let old = dir.path().join("old").join("sessions.db");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(old.parent().expect("parent"))
        .expect("a private directory");
    rusqlite::Connection::open(&db)
        .and_then(|c| c.execute("VACUUM INTO ?1", [old.to_str().expect("utf-8 path")]))
        .expect("copy the database");
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let own = sid("own-0");
    let acknowledged = save_next(&own);
    let found = check_store(&db, &mut rng).expect("the store itself passes");
    assert_eq!(found.get(&own).copied(), Some(acknowledged));
    // The old copy passes as a store, but misses the acknowledged save.
    let found = check_store(&old, &mut rng).expect("an older state is still consistent");
    assert!(
        found.get(&own).copied().unwrap_or(0) < acknowledged,
        "the lost save must show as a revision behind the acknowledgement"
    );
    // A state no save makes: message 2 where message 3 belongs.
    let loaded = store.load(&own).expect("load");
    let mixed = loaded
        .with_appended(
            vec![Message::user(message(&own, 2))],
            vec![],
            chrono::Utc::now(),
        )
        .expect("append");
    store.save(&mixed).expect("save");
    let caught = check_store(&db, &mut rng).expect_err("a mixed state is caught");
    assert!(caught.contains("not that state's"), "{caught}");
}
