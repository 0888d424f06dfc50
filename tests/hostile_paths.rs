//! Hostile ids and hostile links (issue 4, items 6 and 7), beyond the fixed cases of
//! `file_store_security.rs`:
//! - property tests: whatever string `SessionId::parse` accepts is exactly the documented
//!   allowlist, maps to one file name directly inside the store, and parsing never touches
//!   the file system; ids differing only by case cannot both exist;
//! - a racing planter that keeps replacing a snapshot (and guessing temporary-file names)
//!   with symbolic and hard links to a file outside the store while saves and loads run:
//!   nothing is ever written or read through them;
//! - links planted after the store was opened: in place of the lock file, and in place of
//!   the store directory itself.
//!
//! `AGENT_SESSION_LONG=1` runs ten times as many property cases and planter tries.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use agent_session::{
    Error, FileSessionStore, Message, Revision, SessionId, SessionSnapshot, SessionStore,
    MAX_ID_LEN,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use regex::Regex;
use serde_json::json;

const LONG_ENV: &str = "AGENT_SESSION_LONG";

fn long_run() -> bool {
    std::env::var(LONG_ENV).is_ok_and(|v| v == "1")
}

fn scaled(n: u32) -> u32 {
    if long_run() {
        n * 10
    } else {
        n
    }
}

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).expect("valid test id")
}

/// The documented id rule, written out independently of the crate.
fn allowlist() -> &'static Regex {
    static ALLOWLIST: OnceLock<Regex> = OnceLock::new();
    ALLOWLIST.get_or_init(|| Regex::new(r"^[a-z0-9][a-z0-9_-]{0,127}$").expect("regex"))
}

/// Device names the id rule refuses (see `SessionId`).
const RESERVED: &[&str] = &[
    "con", "prn", "aux", "nul", "com0", "com1", "com2", "com3", "com4", "com5", "com6", "com7",
    "com8", "com9", "lpt0", "lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        // Failures are reported with the shrunk input; nothing is written next to the tests.
        failure_persistence: None,
        ..Config::default()
    })
}

// ---------------------------------------------------------------------------------------
// Item 6: hostile ids, as properties.
// ---------------------------------------------------------------------------------------

/// Pieces an attacker would build an id from: separators, dots, percent-encodings, NUL,
/// controls, bidi and zero-width characters, look-alikes of `/` and `.`, case tricks,
/// whitespace, device names, the store's own suffixes, and plain id characters.
const DANGEROUS: &[&str] = &[
    "/", "\\", ".", "..", "%", "%2e", "%2E", "%2f", "%5c", "%00", "\0", "\n", "\r", "\t", "\u{1b}",
    "\u{7f}", "\u{85}", "\u{202e}", "\u{202d}", "\u{2066}", "\u{200f}", "\u{200b}", "\u{feff}",
    "\u{2215}", "\u{2044}", "\u{ff0f}", "\u{ff3c}", "\u{29f8}", "\u{ff0e}", "\u{2024}", "\u{fe52}",
    "\u{3002}", " ", "\u{a0}", "\u{3000}", "A", "Z", "\u{212a}", "\u{17f}", "\u{130}", "\u{131}",
    "\u{e9}", "e\u{301}", "\u{430}", "\u{b9}", "\u{2082}", "a", "z", "0", "9", "-", "_", "con",
    "nul", "com1", "lpt9", ".json", ".tmp", ".lock", "~", ":", "*", "?", "|", "$", "\"", "<", ">",
];

/// Candidate ids: random Unicode, strings built from [`DANGEROUS`], near-valid strings
/// (any length, any first character), and near-valid strings with one dangerous piece
/// spliced in.
fn candidates() -> impl Strategy<Value = String> {
    let piece = proptest::sample::select(DANGEROUS);
    let near_valid = || proptest::string::string_regex("[a-z0-9_-]{0,140}").expect("regex");
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(".*", 0..4).prop_map(|parts| parts.concat()),
        proptest::collection::vec(piece.clone(), 0..12).prop_map(|parts| parts.concat()),
        near_valid(),
        (near_valid(), piece, any::<prop::sample::Index>()).prop_map(|(base, piece, at)| {
            let at = at.index(base.len() + 1);
            format!("{}{piece}{}", &base[..at], &base[at..])
        }),
    ]
}

/// What [`fingerprint`] observes of a directory.
type Fingerprint = (Option<SystemTime>, BTreeMap<String, (u64, u32, u64)>);

/// Everything observable about `dir`: each name with its size, mode and inode, and the
/// directory's own modification time (which any entry created or removed would change).
fn fingerprint(dir: &Path) -> Fingerprint {
    let names = fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            let entry = entry.expect("entry");
            let meta = entry.metadata().expect("lstat");
            (
                entry.file_name().to_string_lossy().into_owned(),
                (meta.len(), meta.permissions().mode(), meta.ino()),
            )
        })
        .collect();
    (
        fs::symlink_metadata(dir)
            .expect("lstat dir")
            .modified()
            .ok(),
        names,
    )
}

/// The property for one candidate: accepted exactly when the documented rule allows it;
/// an accepted id names `<dir>/<id>.json` and nothing else; every way of making an id
/// agrees; and nothing on disk changes either way.
fn check_candidate(
    store: &FileSessionStore,
    watched: &[(PathBuf, Fingerprint)],
    input: &str,
) -> Result<(), TestCaseError> {
    let allowed = allowlist().is_match(input) && !RESERVED.contains(&input);
    match SessionId::parse(input) {
        Ok(id) => {
            prop_assert!(allowed, "accepted {:?}, which the rule refuses", input);
            prop_assert_eq!(id.as_str(), input);
            prop_assert!(input.len() <= MAX_ID_LEN);
            let path = store.path_of(&id);
            prop_assert_eq!(path.parent(), Some(store.dir()), "{:?}", input);
            let file_name = format!("{input}.json");
            prop_assert_eq!(path.file_name(), Some(OsStr::new(&file_name)));
            prop_assert_eq!(path, store.dir().join(&file_name));
        }
        Err(err) => {
            prop_assert!(!allowed, "refused {:?}, which the rule allows", input);
            prop_assert!(
                matches!(&err, Error::InvalidId { id, .. } if id == input),
                "{:?}: {:?}",
                input,
                err
            );
        }
    }
    // Every other way of making an id agrees with `parse`.
    prop_assert_eq!(input.parse::<SessionId>().is_ok(), allowed);
    prop_assert_eq!(SessionId::try_from(input).is_ok(), allowed);
    prop_assert_eq!(SessionId::try_from(input.to_owned()).is_ok(), allowed);
    prop_assert_eq!(
        serde_json::from_value::<SessionId>(json!(input)).is_ok(),
        allowed
    );
    for (dir, before) in watched {
        prop_assert!(
            &fingerprint(dir) == before,
            "{:?} changed {}",
            input,
            dir.display()
        );
    }
    Ok(())
}

#[test]
fn any_accepted_id_is_exactly_the_allowlist_and_names_one_file_directly_inside_the_store() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    store
        .save(
            &SessionSnapshot::builder(sid("resident"), "m")
                .build()
                .expect("build"),
        )
        .expect("save");
    // The store directory and its parent (where a traversal would land).
    let watched: Vec<_> = [store.dir().to_path_buf(), tmp.path().to_path_buf()]
        .into_iter()
        .map(|dir| {
            let before = fingerprint(&dir);
            (dir, before)
        })
        .collect();
    let accepted = AtomicU64::new(0);
    let refused = AtomicU64::new(0);
    let cases = scaled(10_000);
    runner(cases)
        .run(&candidates(), |input| {
            let result = check_candidate(&store, &watched, &input);
            if SessionId::parse(&input).is_ok() {
                accepted.fetch_add(1, Ordering::Relaxed);
            } else {
                refused.fetch_add(1, Ordering::Relaxed);
            }
            result
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    let (accepted, refused) = (accepted.into_inner(), refused.into_inner());
    eprintln!(
        "hostile ids: {cases} cases: {accepted} accepted, {refused} refused, \
         store directory and its parent unchanged"
    );
    // Both sides of the rule were exercised.
    assert!(accepted > 0 && refused > 0, "{accepted} / {refused}");
}

#[test]
fn accepted_ids_are_saved_as_id_json_and_its_summary_and_nothing_else() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    let outside_before = fingerprint(tmp.path()).1;
    let inside_before = fingerprint(store.dir()).1;
    let strategy = proptest::string::string_regex("[a-z0-9][a-z0-9_-]{0,127}").expect("regex");
    runner(scaled(200))
        .run(&strategy, |input| {
            let Ok(id) = SessionId::parse(&input) else {
                prop_assert!(RESERVED.contains(&input.as_str()), "{:?}", input);
                return Ok(());
            };
            let snapshot = SessionSnapshot::builder(id.clone(), "m")
                .build()
                .expect("build");
            store.save(&snapshot).expect("save");
            let mut expected = inside_before.keys().cloned().collect::<Vec<_>>();
            expected.push(format!("{input}.json"));
            expected.push(format!("{input}.summary"));
            expected.sort();
            let names: Vec<String> = fingerprint(store.dir()).1.into_keys().collect();
            prop_assert_eq!(names, expected);
            prop_assert_eq!(
                store.load(&id).expect("load"),
                snapshot.with_revision(Revision::from_u64(1))
            );
            store.delete(&id).expect("delete");
            prop_assert!(fingerprint(store.dir()).1.keys().eq(inside_before.keys()));
            prop_assert!(fingerprint(tmp.path()).1.keys().eq(outside_before.keys()));
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
}

#[test]
fn look_alikes_missing_from_the_fixed_list_are_refused() {
    // file_store_security.rs covers U+2215 and U+FF0E; these are the other slashes, dots and
    // invisible characters a file name could be spoofed with, and device names in
    // disguise.
    let hostile = [
        "\u{2024}\u{2024}",
        "\u{2024}\u{2024}\u{2215}etc",
        "a\u{2024}json",
        "\u{fe52}\u{fe52}",
        "a\u{3002}b",
        "a\u{2044}b",
        "a\u{ff0f}b",
        "a\u{ff3c}b",
        "a\u{29f8}b",
        "a\u{2066}b\u{2069}",
        "a\u{200f}b",
        "a\u{00ad}b",
        "com\u{b9}",
        "lpt\u{b2}",
        "con.txt",
        "nul.json",
        "%2e%2e",
        "%2fetc",
        "a%00b",
        "\u{212a}elvin",
        "\u{17f}ession",
        "\u{130}d",
        "a\u{a0}b",
        "a\u{3000}b",
    ];
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    let watched = [(store.dir().to_path_buf(), fingerprint(store.dir()))];
    for input in hostile {
        assert!(
            matches!(SessionId::parse(input), Err(Error::InvalidId { .. })),
            "{input:?} was accepted"
        );
        check_candidate(&store, &watched, input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
    }
}

/// Two sessions whose ids differ only by letter case would be one file on a
/// case-insensitive file system (APFS and NTFS by default), so a save of one would silently
/// overwrite the other. Ids are lowercase ASCII only: of all the case variants of a name,
/// at most one (the all-lowercase one) is an id, so two stored sessions can never alias,
/// whatever the file system. Unicode case tricks (KELVIN SIGN folds to `k`, LONG S to `s`,
/// dotted and dotless i) are refused too.
#[test]
fn ids_differing_only_by_case_cannot_both_exist_so_a_case_insensitive_fs_cannot_alias_two_sessions()
{
    let mixed = proptest::string::string_regex("[a-zA-Z0-9_-]{1,40}").expect("regex");
    let flips = proptest::collection::vec(any::<bool>(), 40);
    let variants_tried = AtomicU64::new(0);
    runner(scaled(5_000))
        .run(&(mixed, flips), |(name, flips)| {
            // Every case variant of `name` that is an id.
            let variant = |upper: &dyn Fn(usize) -> bool| -> String {
                name.chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if upper(i) {
                            c.to_ascii_uppercase()
                        } else {
                            c.to_ascii_lowercase()
                        }
                    })
                    .collect()
            };
            let lower = name.to_ascii_lowercase();
            let random = variant(&|i| flips[i]);
            let upper = name.to_ascii_uppercase();
            for candidate in [&name, &lower, &random, &upper] {
                variants_tried.fetch_add(1, Ordering::Relaxed);
                if SessionId::parse(candidate).is_ok() {
                    // The only variant that can be an id is the lowercase one.
                    prop_assert_eq!(candidate, &lower);
                }
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert!(variants_tried.into_inner() > 0);

    for unicode in [
        "\u{212a}ey",
        "\u{17f}ession",
        "\u{130}d",
        "\u{131}d",
        "stra\u{df}e",
        "\u{ff21}bc",
    ] {
        assert!(SessionId::parse(unicode).is_err(), "{unicode:?}");
    }

    // In a store: a session exists, and no other casing of its name can even be asked for.
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    let alpha = SessionSnapshot::builder(sid("alpha-1"), "m")
        .transcript(vec![Message::user("the real alpha")])
        .build()
        .expect("build");
    store.save(&alpha).expect("save");
    for other in ["Alpha-1", "ALPHA-1", "aLpHa-1"] {
        let err = SessionId::parse(other).expect_err(other);
        match err {
            Error::InvalidId { reason, .. } => assert!(reason.contains("uppercase"), "{reason}"),
            other => panic!("expected Error::InvalidId, got {other:?}"),
        }
    }
    // So every name the store writes is lowercase, and no two are equal ignoring case.
    let names: Vec<String> = fingerprint(store.dir()).1.into_keys().collect();
    assert!(names.iter().all(|n| *n == n.to_lowercase()), "{names:?}");
    assert_eq!(
        store.load(alpha.id()).expect("load"),
        alpha.with_revision(Revision::from_u64(1))
    );
}

// ---------------------------------------------------------------------------------------
// Item 7: links under a race.
// ---------------------------------------------------------------------------------------

/// The session the race is about.
const RACED: &str = "raced";

/// A small PRNG (splitmix64) for the planter's choices and timings.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        Rng(SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(7, |d| d.as_secs() ^ u64::from(d.subsec_nanos())))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn name(&mut self, len: usize) -> String {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        (0..len)
            .map(|_| char::from(CHARS[usize::try_from(self.below(62)).expect("fits")]))
            .collect()
    }
}

/// What the main thread saw during the race.
#[derive(Debug, Default)]
struct RaceFigures {
    loads_ok: u64,
    saves_ok: u64,
    lists: u64,
    refused_insecure: u64,
    not_found: u64,
    conflicts: u64,
    writes_through: u64,
    reads_through: u64,
    unexpected: Vec<String>,
}

/// Replaces `target` atomically with a link made by `make` at a scratch name.
fn plant(
    dir: &Path,
    scratch: &str,
    target: &Path,
    make: impl FnOnce(&Path) -> std::io::Result<()>,
) {
    let scratch = dir.join(scratch);
    let _ = fs::remove_file(&scratch);
    if make(&scratch).is_ok() {
        let _ = fs::rename(&scratch, target);
    }
}

/// Removes what is at `path` if it is still one of the planter's links (a symbolic link,
/// or a hard link to the victim), leaving a real snapshot alone.
fn unplant(path: &Path, victim_ino: u64) {
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.file_type().is_symlink() || meta.ino() == victim_ino {
            let _ = fs::remove_file(path);
        }
    }
}

/// The files a race is about: the victim outside the store, the target of a dangling
/// link, and the snapshot path the planter attacks.
struct Arena {
    dir: PathBuf,
    victim: PathBuf,
    victim_bytes: Vec<u8>,
    victim_ino: u64,
    never: PathBuf,
    target: PathBuf,
}

impl Arena {
    /// Counts (and repairs) any change to the victim or the dangling link's target.
    fn check_victim(&self, figures: &mut RaceFigures) {
        if fs::read(&self.victim).expect("read the victim") != self.victim_bytes {
            figures.writes_through += 1;
            fs::write(&self.victim, &self.victim_bytes).expect("restore the victim");
        }
        if fs::symlink_metadata(&self.never).is_ok() {
            figures.writes_through += 1;
            let _ = fs::remove_file(&self.never);
        }
    }
}

/// The planter: `tries` times, replaces the snapshot with a link (or plants links under
/// temporary-file names), right before or during a save, then removes its link.
fn planter(arena: &Arena, tries: u64, saving: &AtomicBool, temp_links: &AtomicU64) -> u64 {
    let mut rng = Rng::new();
    let (dir, victim, target) = (&arena.dir, &arena.victim, &arena.target);
    for attempt in 0..tries {
        // Half the tries wait for a save to be in progress first.
        if rng.below(2) == 0 {
            let until = Instant::now() + Duration::from_millis(20);
            while !saving.load(Ordering::Acquire) && Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        let scratch = format!("plant-{attempt}");
        match rng.below(4) {
            0 => plant(dir, &scratch, target, |p| symlink(victim, p)),
            1 => plant(dir, &scratch, target, |p| fs::hard_link(victim, p)),
            2 => plant(dir, &scratch, target, |p| symlink(&arena.never, p)),
            _ => {
                // Guesses of temporary-file names, including the bare prefix; left in place
                // until the store is reopened.
                for name in [
                    format!(".{RACED}.{}.tmp", rng.name(16)),
                    format!(".{RACED}.{}.tmp", rng.name(6)),
                    format!(".{RACED}."),
                    format!(".{RACED}..tmp"),
                ] {
                    if symlink(victim, dir.join(name)).is_ok() {
                        temp_links.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(300)));
        unplant(target, arena.victim_ino);
    }
    tries
}

/// The main thread's side of the race: save, load and list until `done`, counting what
/// happens and checking the victim after every call.
fn save_load_list_until(
    store: &FileSessionStore,
    arena: &Arena,
    saving: &AtomicBool,
    done: &AtomicBool,
) -> RaceFigures {
    let id = sid(RACED);
    let mut figures = RaceFigures::default();
    let mut revision = Revision::NEW;
    let mut counter = 0u64;
    let mut step = 0u64;
    while !done.load(Ordering::Acquire) {
        step += 1;
        match step % 3 {
            0 => {
                counter += 1;
                let next = SessionSnapshot::builder(id.clone(), "m")
                    .metadata_entry("writer", json!("main"))
                    .metadata_entry("counter", json!(counter))
                    .transcript(vec![Message::user(format!("main state {counter}"))])
                    .build()
                    .expect("build")
                    .with_revision(revision);
                saving.store(true, Ordering::Release);
                let saved = store.save(&next);
                saving.store(false, Ordering::Release);
                match saved {
                    Ok(new) => {
                        figures.saves_ok += 1;
                        revision = new;
                    }
                    Err(Error::Insecure { .. }) => figures.refused_insecure += 1,
                    Err(Error::Conflict { found, .. }) => {
                        // The planter removed (or replaced) the snapshot.
                        figures.conflicts += 1;
                        revision = found.unwrap_or(Revision::NEW);
                    }
                    Err(e) => figures.unexpected.push(format!("save: {e:?}")),
                }
            }
            1 => match store.load(&id) {
                Ok(loaded) => {
                    if loaded.metadata().contains_key("victim")
                        || loaded.metadata().get("writer") != Some(&json!("main"))
                    {
                        figures.reads_through += 1;
                    } else {
                        figures.loads_ok += 1;
                        revision = loaded.revision();
                    }
                }
                Err(Error::Insecure { .. }) => figures.refused_insecure += 1,
                Err(e) if e.is_not_found() => {
                    figures.not_found += 1;
                    revision = Revision::NEW;
                }
                Err(e) => figures.unexpected.push(format!("load: {e:?}")),
            },
            _ => match store.list() {
                Ok(listing) => {
                    figures.lists += 1;
                    if listing
                        .sessions
                        .iter()
                        .any(|s| s.title.as_deref() == Some(VICTIM_TEXT))
                    {
                        figures.reads_through += 1;
                    }
                    for e in listing.unreadable {
                        if !matches!(e, Error::Insecure { .. }) {
                            figures.unexpected.push(format!("list: {e:?}"));
                        }
                    }
                }
                Err(e) => figures.unexpected.push(format!("list: {e:?}")),
            },
        }
        arena.check_victim(&mut figures);
    }
    arena.check_victim(&mut figures);
    figures
}

/// The victim's transcript (and so its title).
const VICTIM_TEXT: &str = "VICTIM CONTENT";

/// A racing planter (1,000 tries) keeps replacing `raced.json` with a symbolic link to a
/// file outside the store, a hard link to it, or a dangling symbolic link, before and
/// during saves, and plants symbolic links under temporary-file names (`.raced.*.tmp`),
/// while the main thread saves, loads and lists. The victim's bytes never change, the
/// dangling link's target is never created, every load is refused as insecure or returns
/// a snapshot the main thread saved (never the victim's content), and reopening the store
/// removes the planted temporary-name links without touching the victim.
///
/// The victim is a valid snapshot of the same session (revision 99, marked `victim`), so
/// following a link would "work". It also has a second name outside the store, as a file
/// could in a user's home: so a hard link to it always shows more than one link. (A victim
/// with a single name is the case of
/// [`hard_link_planted_and_removed_around_a_load_is_never_read_through`].)
#[test]
fn racing_planter_of_links_gets_zero_writes_and_zero_reads_through() {
    let tries = u64::from(scaled(1_000));
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    let id = sid(RACED);
    let victim = tmp.path().join("victim.json");
    let victim_bytes = SessionSnapshot::builder(id.clone(), "m")
        .metadata_entry("victim", json!(true))
        .transcript(vec![Message::user(VICTIM_TEXT)])
        .build()
        .expect("build")
        .to_json_with_revision(Revision::from_u64(99))
        .expect("json");
    fs::write(&victim, &victim_bytes).expect("write the victim");
    fs::hard_link(&victim, tmp.path().join("victim-second-name")).expect("second name");
    let arena = Arena {
        dir: store.dir().to_path_buf(),
        victim_ino: fs::metadata(&victim).expect("stat").ino(),
        victim,
        victim_bytes,
        never: tmp.path().join("never-created.json"),
        target: store.path_of(&id),
    };

    let saving = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let temp_links = AtomicU64::new(0);
    let started = Instant::now();
    let (planted, figures) = std::thread::scope(|scope| {
        let planter = scope.spawn(|| {
            let planted = planter(&arena, tries, &saving, &temp_links);
            done.store(true, Ordering::Release);
            planted
        });
        let figures = save_load_list_until(&store, &arena, &saving, &done);
        (planter.join().expect("planter"), figures)
    });
    let elapsed = started.elapsed();
    let temp_links = temp_links.into_inner();

    // Reopening removes the planted temporary-name links (the links, not the victim).
    drop(store);
    let reopened = FileSessionStore::open(&arena.dir).expect("reopen");
    let leftovers: Vec<String> = fingerprint(&arena.dir)
        .1
        .into_keys()
        .filter(|n| Path::new(n).extension() == Some(OsStr::new("tmp")))
        .collect();
    assert_eq!(fs::read(&arena.victim).expect("victim"), arena.victim_bytes);
    assert!(!arena.never.exists());
    eprintln!(
        "hostile links race: {planted} tries ({temp_links} temp-name links planted) in \
         {:.1} s; main thread: {} saves ok, {} loads ok, {} lists, {} refused as insecure, \
         {} not found, {} conflicts; writes through {}, reads through {}",
        elapsed.as_secs_f64(),
        figures.saves_ok,
        figures.loads_ok,
        figures.lists,
        figures.refused_insecure,
        figures.not_found,
        figures.conflicts,
        figures.writes_through,
        figures.reads_through,
    );
    assert_eq!(figures.writes_through, 0, "{figures:?}");
    assert_eq!(figures.reads_through, 0, "{figures:?}");
    assert!(figures.unexpected.is_empty(), "{:?}", figures.unexpected);
    // The race was real: links were met and refused, and real saves got through.
    assert!(figures.refused_insecure > 0, "{figures:?}");
    assert!(figures.saves_ok > 0 && figures.loads_ok > 0, "{figures:?}");
    assert!(temp_links > 0);
    assert!(
        leftovers.is_empty(),
        "planted temporary-name links survive reopening: {leftovers:?}"
    );
    // The store still works on the id, and the file it writes has one name.
    unplant(&arena.target, arena.victim_ino);
    let current = match reopened.load(&id) {
        Ok(s) => s.revision(),
        Err(e) if e.is_not_found() => Revision::NEW,
        Err(e) => panic!("{e:?}"),
    };
    let last = SessionSnapshot::builder(id, "m")
        .metadata_entry("writer", json!("main"))
        .build()
        .expect("build")
        .with_revision(current);
    reopened.save(&last).expect("save after the race");
    assert_eq!(
        fs::symlink_metadata(&arena.target).expect("lstat").nlink(),
        1
    );
}

/// A hard link to another user's file outside the store, planted as `raced.json` and
/// removed again, over and over, while the main thread loads. A load that opens the link
/// and checks the link count after the planter removed it sees one link; only a check on
/// the open file itself (its owner must be the user running the store) refuses it without a
/// race. Every load must be refused or not found: never the victim. (The path checks alone
/// let 775 to 1,497 of ~300,000 loads through in the first runs of this test; a same-user
/// victim can still slip through a kernel race between a path lookup and its link count,
/// which the store documents.)
#[test]
fn hard_link_to_another_users_file_planted_and_removed_around_a_load_is_never_read_through() {
    let run_for = Duration::from_millis(if long_run() { 20_000 } else { 2_000 });
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    let id = sid(RACED);
    let victim = tmp.path().join("victim.json");
    let victim_bytes = SessionSnapshot::builder(id.clone(), "m")
        .metadata_entry("victim", json!(true))
        .transcript(vec![Message::user(VICTIM_TEXT)])
        .build()
        .expect("build")
        .to_json_with_revision(Revision::from_u64(99))
        .expect("json");
    fs::write(&victim, &victim_bytes).expect("write the victim");
    // The victim belongs to another user (`nobody`); only root can arrange that.
    if let Err(e) = std::os::unix::fs::chown(&victim, Some(65_534), Some(65_534)) {
        eprintln!(
            "SKIPPED hard-link race: cannot give the victim to another user ({e}); run as root"
        );
        return;
    }
    let target = store.path_of(&id);
    let done = AtomicBool::new(false);
    let (mut loads, mut refused, mut not_found, mut reads_through) = (0u64, 0u64, 0u64, 0u64);
    let mut unexpected = Vec::new();
    let cycles = std::thread::scope(|scope| {
        let planter = scope.spawn(|| {
            let until = Instant::now() + run_for;
            let mut cycles = 0u64;
            while Instant::now() < until {
                if fs::hard_link(&victim, &target).is_ok() {
                    let _ = fs::remove_file(&target);
                    cycles += 1;
                }
            }
            done.store(true, Ordering::Release);
            cycles
        });
        while !done.load(Ordering::Acquire) {
            loads += 1;
            match store.load(&id) {
                Ok(loaded) if loaded.metadata().contains_key("victim") => reads_through += 1,
                Ok(loaded) => unexpected.push(format!("a snapshot nobody saved: {loaded:?}")),
                Err(Error::Insecure { .. }) => refused += 1,
                Err(e) if e.is_not_found() => not_found += 1,
                Err(e) => unexpected.push(format!("{e:?}")),
            }
        }
        planter.join().expect("planter")
    });
    eprintln!(
        "hostile hard-link race: {cycles} link/unlink cycles, {loads} loads: {refused} refused \
         as insecure, {not_found} not found, {reads_through} read the victim"
    );
    assert_eq!(fs::read(&victim).expect("victim"), victim_bytes);
    assert!(refused > 0, "the planter's links were never met");
    assert!(unexpected.is_empty(), "{unexpected:?}");
    assert_eq!(
        reads_through, 0,
        "{reads_through} of {loads} loads returned a file outside the store through a hard link"
    );
}

/// A symbolic link put in place of `.lock` after the store was opened: the open store keeps
/// its own lock (the file it opened) and never follows the link; a new store on the
/// directory is refused; the link's target is neither modified nor created.
#[test]
fn symlink_planted_in_place_of_the_lock_file_after_open_is_never_followed() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    let dir = store.dir().to_path_buf();
    let alpha = SessionSnapshot::builder(sid("alpha"), "m")
        .build()
        .expect("build");
    store.save(&alpha).expect("save");

    let victim = tmp.path().join("victim");
    fs::write(&victim, b"victim bytes").expect("write the victim");
    let nowhere = tmp.path().join("nowhere");
    for target in [&victim, &nowhere] {
        let lock = dir.join(".lock");
        fs::remove_file(&lock).expect("remove the lock file");
        symlink(target, &lock).expect("plant the link");

        // The open store: saves still work (or are refused), never through the link.
        let loaded = store.load(alpha.id()).expect("load");
        match store.save(&loaded) {
            Ok(_) | Err(Error::Insecure { .. }) => {}
            Err(e) => panic!("save with a planted lock link: {e:?}"),
        }
        // A new store on the directory refuses the link.
        match FileSessionStore::open(&dir) {
            Err(Error::Insecure { path, .. }) => assert_eq!(path, lock),
            other => panic!("open with a planted lock link: {other:?}"),
        }
        assert_eq!(fs::read(&victim).expect("victim"), b"victim bytes");
        assert!(!nowhere.exists(), "the lock was created through the link");
        assert!(fs::symlink_metadata(&lock)
            .expect("lstat")
            .file_type()
            .is_symlink());
    }
    assert!(store.load(alpha.id()).expect("load").revision() >= Revision::from_u64(1));
}

/// The store directory renamed away and replaced by a symbolic link to another directory
/// after the store was opened: the open store must not write into (or read from) the
/// link's target. The issue asks that nothing be read or written through a symbolic link
/// in place of the store directory; the directory is checked when opened, and this case
/// checks it stays true afterwards.
#[test]
fn store_dir_replaced_by_a_symlink_after_open_is_not_written_or_read_through() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let store = FileSessionStore::open(tmp.path().join("store")).expect("open");
    let dir = store.dir().to_path_buf();
    let alpha = SessionSnapshot::builder(sid("alpha"), "m")
        .build()
        .expect("build");
    store.save(&alpha).expect("save");

    // Another directory, holding a planted snapshot of `planted`.
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).expect("mkdir");
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o700)).expect("chmod");
    let planted = SessionSnapshot::builder(sid("planted"), "m")
        .build()
        .expect("build");
    fs::write(
        elsewhere.join("planted.json"),
        planted
            .to_json_with_revision(Revision::from_u64(1))
            .expect("json"),
    )
    .expect("plant");
    let elsewhere_before = fingerprint(&elsewhere).1;

    fs::rename(&dir, tmp.path().join("moved")).expect("move the store away");
    symlink(&elsewhere, &dir).expect("link in place of the store");

    let fresh = SessionSnapshot::builder(sid("fresh"), "m")
        .build()
        .expect("build");
    let saved = store.save(&fresh);
    let loaded = store.load(planted.id());
    let after = fingerprint(&elsewhere).1;
    let written_through = after.keys().ne(elsewhere_before.keys());
    assert!(
        !written_through && loaded.is_err(),
        "through the directory link: save wrote {:?} (save returned {saved:?}); \
         load returned {loaded:?}",
        after.keys().collect::<Vec<_>>(),
    );
}
