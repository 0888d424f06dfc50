//! `PostgresSessionStore` (feature `postgres`) against a real server: the one named by
//! `AGENT_SESSION_POSTGRES_URL` (a libpq `key=value` string). `scripts/test` starts a
//! throw-away server and sets it; with the feature on and no server named, these tests
//! fail and say so. Without the feature this file is one test that prints why nothing ran.
//!
//! The store contract (`tests/store_contract.rs`) runs against the server too; this file
//! covers what is particular to PostgreSQL: schemas and `migrate`, exact bytes, damaged
//! rows, size limits, the listing index, compare-and-swap between separate connection
//! pools, calls from inside tokio runtimes and from plain threads, and several processes
//! saving the same sessions (`AGENT_SESSION_LONG=1` runs five times as many increments).
//!
//! Every test works in fresh schemas of its own (`t_<pid>_<time>_<n>`), dropped when it
//! passes and kept when it fails.

#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_tests_need_the_postgres_feature() {
    eprintln!(
        "skipped: the PostgresSessionStore tests need the `postgres` feature; run scripts/test \
         (cargo test --all-features against a throw-away server it starts)"
    );
}

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod pg;

#[cfg(feature = "postgres")]
mod postgres_store {
    use std::collections::{BTreeSet, HashSet};
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::{Child, ChildStdin, Command, Stdio};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{mpsc, Arc, Barrier};
    use std::thread::JoinHandle;
    use std::time::Instant;

    use agent_session::{
        EntryKind, Error, ErrorKind, ListCursor, ListScope, Message, PostgresSessionStore,
        Revision, SessionId, SessionSnapshot, SessionStore, DEFAULT_POSTGRES_SCHEMA,
    };
    use chrono::{DateTime, Duration, TimeZone, Utc};
    use serde_json::{json, Value};

    use super::pg::{self, Schemas};

    // -----------------------------------------------------------------------------------
    // Helpers.
    // -----------------------------------------------------------------------------------

    fn id(name: &str) -> SessionId {
        SessionId::parse(name).expect("valid test id")
    }

    /// A fixed instant plus `secs` seconds, with a sub-microsecond part (a `timestamptz`
    /// column would round it).
    fn at(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 4, 5, 6, 7)
            .single()
            .expect("valid date")
            + Duration::seconds(secs)
            + Duration::nanoseconds(123_456_789)
    }

    /// A one-message session `name` saying `text`, last updated at `updated`.
    fn snapshot_at(name: &str, text: &str, updated: DateTime<Utc>) -> SessionSnapshot {
        SessionSnapshot::builder(id(name), "pg-model")
            .transcript(vec![Message::user(text)])
            .timestamps(at(-10_000), updated)
            .build()
            .expect("build")
    }

    fn snapshot(name: &str, text: &str) -> SessionSnapshot {
        snapshot_at(name, text, at(0))
    }

    /// `snapshot` changed by one metadata entry, ready to save over its revision.
    fn changed(snapshot: &SessionSnapshot, key: &str, value: Value) -> SessionSnapshot {
        SessionSnapshot::builder(snapshot.id().clone(), snapshot.options().model.clone())
            .metadata(snapshot.metadata().clone())
            .metadata_entry(key, value)
            .transcript(snapshot.transcript().to_vec())
            .timestamps(snapshot.created_at(), snapshot.updated_at())
            .build()
            .expect("build")
            .with_revision(snapshot.revision())
    }

    fn listed_ids(store: &impl SessionStore) -> Vec<String> {
        let listing = store.list().expect("list");
        assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
        listing
            .sessions
            .into_iter()
            .map(|s| s.id.into_string())
            .collect()
    }

    /// Every id `list_page` walks to with pages of `limit`, and every unreadable entry the
    /// pages report.
    fn walk(store: &impl SessionStore, limit: usize) -> (Vec<String>, Vec<Error>) {
        let (mut walked, mut unreadable) = (Vec::new(), Vec::new());
        let mut cursor: Option<ListCursor> = None;
        for _ in 0..10_000 {
            let page = store.list_page(limit, cursor.as_ref()).expect("page");
            assert!(page.sessions.len() <= limit, "a page over its limit");
            walked.extend(page.sessions.iter().map(|s| s.id.to_string()));
            unreadable.extend(page.unreadable);
            match page.next {
                Some(next) => cursor = Some(next),
                None => return (walked, unreadable),
            }
        }
        panic!("list_page never reached the end");
    }

    // -----------------------------------------------------------------------------------
    // The server, the connection string and the pool.
    // -----------------------------------------------------------------------------------

    /// Runs one test of this binary in a child process with `AGENT_SESSION_POSTGRES_URL`
    /// removed: with the feature on, a missing server is a failure that says how to get
    /// one, never a silent pass.
    #[test]
    fn without_a_server_url_the_tests_fail_and_say_how_to_start_one() {
        let exe = std::env::current_exe().expect("current test binary");
        let output = Command::new(exe)
            .args([
                "postgres_store::stores_on_different_schemas_do_not_see_each_others_sessions",
                "--exact",
                "--test-threads=1",
            ])
            .env_remove(pg::URL_ENV)
            .output()
            .expect("run the child");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!output.status.success(), "passed without a server:\n{text}");
        assert!(text.contains("1 failed"), "{text}");
        assert!(
            text.contains(
                "run scripts/test, which starts a server, or set AGENT_SESSION_POSTGRES_URL"
            ),
            "{text}"
        );
    }

    #[test]
    fn connecting_needs_no_server_and_the_first_call_reports_an_unreachable_one() {
        // Port 1 on the loopback: nothing listens there, so the connection is refused.
        let store = PostgresSessionStore::connect("host=127.0.0.1 port=1 user=nobody dbname=x")
            .expect("connect opens no connection yet");
        let started = Instant::now();
        let err = store.load(&id("anything")).expect_err("no server");
        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.to_string().contains("reachable"), "{err}");
        for err in [
            store.save(&snapshot("s", "x")).expect_err("save"),
            store.list().map(|_| ()).expect_err("list"),
            store.migrate().expect_err("migrate"),
        ] {
            assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        }
        assert!(
            started.elapsed().as_secs() < 20,
            "a refused connection should fail fast"
        );
    }

    #[test]
    fn malformed_connection_strings_and_an_empty_pool_are_invalid_arguments() {
        for config in [
            "host=127.0.0.1 port=notaport",
            "postgresql://[::1",
            "bogus_key=1",
        ] {
            let err = PostgresSessionStore::connect(config).expect_err(config);
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
        }
        let err = PostgresSessionStore::builder()
            .pool_size(0)
            .connect(&pg::url())
            .expect_err("a pool of no connections");
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    }

    /// Connection strings carry passwords, and error messages end up in logs.
    #[test]
    fn a_malformed_connection_string_is_not_echoed_with_its_password() {
        let err = PostgresSessionStore::connect(
            "host=127.0.0.1 user=app password=hunter2-secret port=notaport",
        )
        .expect_err("malformed");
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        assert!(
            !err.to_string().contains("hunter2-secret") && !format!("{err:?}").contains("hunter2"),
            "the error repeats the password: {err}"
        );
        // A well-formed one is not shown by Debug either.
        let store = PostgresSessionStore::connect(
            "host=127.0.0.1 port=1 user=app password=hunter2-secret dbname=x",
        )
        .expect("connect");
        assert!(!format!("{store:?}").contains("hunter2"), "{store:?}");
    }

    // -----------------------------------------------------------------------------------
    // Schemas and migrate().
    // -----------------------------------------------------------------------------------

    #[test]
    fn stores_on_different_schemas_do_not_see_each_others_sessions() {
        let schemas = Schemas::new();
        let (a, b) = (schemas.store(), schemas.store());
        assert_ne!(a.schema(), b.schema());
        let in_a = snapshot("same-id", "in a");
        let in_b = snapshot("same-id", "in b");
        assert_eq!(a.save(&in_a).expect("save a"), Revision::from_u64(1));
        assert!(b.load(in_a.id()).expect_err("b sees a").is_not_found());
        assert!(listed_ids(&b).is_empty());
        // The same id is new in the other schema.
        assert_eq!(b.save(&in_b).expect("save b"), Revision::from_u64(1));
        a.save(&snapshot("only-a", "x")).expect("save");
        // Same times: ties go by id, descending.
        assert_eq!(listed_ids(&a), ["same-id", "only-a"]);
        assert_eq!(listed_ids(&b), ["same-id"]);
        assert_eq!(
            a.load(in_a.id()).expect("load").transcript(),
            in_a.transcript()
        );
        assert_eq!(
            b.load(in_b.id()).expect("load").transcript(),
            in_b.transcript()
        );
        b.delete(in_b.id()).expect("delete in b");
        assert!(a.load(in_a.id()).is_ok(), "a delete in b reached a");
        assert!(a.delete(&id("only-a")).is_ok());
        assert!(b
            .delete(&id("only-a"))
            .expect_err("not in b")
            .is_not_found());
    }

    #[test]
    fn the_default_schema_is_agent_session_and_a_set_one_is_reported() {
        let default = PostgresSessionStore::connect(&pg::url()).expect("connect");
        assert_eq!(default.schema(), DEFAULT_POSTGRES_SCHEMA);
        assert_eq!(DEFAULT_POSTGRES_SCHEMA, "agent_session");
        let set = PostgresSessionStore::builder()
            .schema("tenant_42")
            .connect(&pg::url())
            .expect("connect");
        assert_eq!(set.schema(), "tenant_42");
    }

    #[test]
    fn invalid_schema_names_are_refused_before_anything_is_sent() {
        let too_long = "a".repeat(64);
        for bad in [
            "",
            "1tenant",
            "Tenant",
            "tenant-1",
            "tenant.sessions",
            "a;drop schema public cascade",
            "a b",
            "\"quoted\"",
            "pg_catalog",
            "pg_mine",
            "tenant\u{e9}",
            too_long.as_str(),
        ] {
            let err = PostgresSessionStore::builder()
                .schema(bad)
                .connect(&pg::url())
                .expect_err(bad);
            assert!(
                matches!(err, Error::InvalidArgument { .. }),
                "{bad:?}: {err:?}"
            );
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
        }
        for good in ["_private", "tenant_42", &"a".repeat(63)] {
            PostgresSessionStore::builder()
                .schema(good)
                .connect(&pg::url())
                .unwrap_or_else(|e| panic!("{good:?}: {e:?}"));
        }
    }

    /// A name the schema check accepts must work: SQL keywords such as `user` or `order`
    /// pass the check (lowercase letters only) but are syntax errors unless quoted.
    #[test]
    fn a_schema_named_like_an_sql_keyword_is_usable_or_refused_up_front() {
        for keyword in ["user", "order", "select", "table"] {
            let built = PostgresSessionStore::builder()
                .schema(keyword)
                .connect(&pg::url());
            let Ok(store) = built else {
                // Refusing the name at connect is fine too.
                let err = built.expect_err("refused");
                assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
                continue;
            };
            // These names cannot be made unique: never touch one that is already there
            // (the server may be a shared one), and drop only what this test made.
            if pg::schema_exists(keyword) {
                eprintln!("schema {keyword:?} exists on this server already: not checked");
                continue;
            }
            let outcome = store.migrate().and_then(|()| {
                store.save(&snapshot("keyword", "x"))?;
                store.load(&id("keyword"))
            });
            if pg::schema_exists(keyword) {
                pg::execute(&format!("DROP SCHEMA \"{keyword}\" CASCADE"));
            }
            let loaded = outcome.unwrap_or_else(|e| {
                panic!(
                    "schema {keyword:?} passed the name check at connect, then failed: {e} ({e:?})"
                )
            });
            assert_eq!(loaded.id().as_str(), "keyword");
        }
    }

    #[test]
    fn a_schema_used_before_migrate_is_a_backend_error_that_says_to_call_migrate() {
        let schemas = Schemas::new();
        let name = schemas.name();
        let store = pg::connect(&name);
        let s = snapshot("early", "x");
        let errors = [
            ("save", store.save(&s).map(|_| ()).expect_err("save")),
            ("load", store.load(s.id()).map(|_| ()).expect_err("load")),
            ("list", store.list().map(|_| ()).expect_err("list")),
            (
                "list_page",
                store.list_page(5, None).map(|_| ()).expect_err("page"),
            ),
            (
                "list_scoped",
                store
                    .list_scoped(ListScope::All)
                    .map(|_| ())
                    .expect_err("scoped"),
            ),
            ("delete", store.delete(s.id()).expect_err("delete")),
            (
                "set_archived",
                store.set_archived(s.id(), true).expect_err("archive"),
            ),
            (
                "stored_bytes",
                store.stored_bytes(s.id()).map(|_| ()).expect_err("bytes"),
            ),
        ];
        for (call, err) in errors {
            assert!(matches!(err, Error::Backend { .. }), "{call}: {err:?}");
            assert_eq!(err.kind(), ErrorKind::Io, "{call}");
            assert!(
                err.to_string().contains("migrate"),
                "{call}: the message does not say to call migrate: {err}"
            );
        }
        assert!(
            !pg::schema_exists(&name),
            "a call before migrate made the schema"
        );
        store.migrate().expect("migrate");
        assert!(pg::schema_exists(&name));
        assert_eq!(
            store.save(&s).expect("save after migrate"),
            Revision::from_u64(1)
        );
    }

    #[test]
    fn migrate_twice_and_from_many_threads_at_once_succeeds_and_keeps_sessions() {
        const THREADS: usize = 8;
        let schemas = Schemas::new();
        let name = schemas.name();
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (name, barrier) = (&name, &barrier);
                    scope.spawn(move || {
                        let store = pg::connect(name);
                        barrier.wait();
                        store.migrate()
                    })
                })
                .collect();
            for handle in handles {
                handle
                    .join()
                    .expect("migrating thread")
                    .expect("a concurrent migrate failed");
            }
        });
        let store = pg::connect(&name);
        store.save(&snapshot("kept", "x")).expect("save");
        store.migrate().expect("migrate again");
        pg::connect(&name)
            .migrate()
            .expect("and from another store");
        assert_eq!(
            store.load(&id("kept")).expect("load").revision(),
            Revision::from_u64(1)
        );
        assert_eq!(
            pg::query_text(&format!("SELECT count(*)::text FROM {name}.store_version")),
            ["1"],
            "the tables' version is recorded once"
        );
    }

    #[test]
    fn migrate_refuses_tables_made_by_a_newer_release() {
        let schemas = Schemas::new();
        let store = schemas.store();
        store.save(&snapshot("old", "x")).expect("save");
        pg::execute(&format!(
            "UPDATE {}.store_version SET version = 99",
            store.schema()
        ));
        let err = store.migrate().expect_err("a newer layout");
        assert!(
            matches!(err, Error::UnsupportedSchemaVersion { found: 99, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(store.schema()), "{err}");
        // Nothing was touched.
        assert_eq!(
            pg::query_text(&format!(
                "SELECT version::text FROM {}.store_version",
                store.schema()
            )),
            ["99"]
        );
        assert!(store.load(&id("old")).is_ok());
    }

    // -----------------------------------------------------------------------------------
    // Exact bytes and strict decoding.
    // -----------------------------------------------------------------------------------

    /// Every golden fixture (`tests/fixtures/v*/`, each schema version), decoded and saved:
    /// the row holds exactly the bytes `to_json_with_revision` gives, and a load gives the
    /// same bytes back, at revision 1 and again at revision 2.
    #[test]
    fn golden_fixtures_round_trip_byte_for_byte() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut checked = 0;
        let mut dirs: Vec<_> = std::fs::read_dir(&root)
            .expect("tests/fixtures")
            .map(|e| e.expect("entry").path())
            .collect();
        dirs.sort();
        for dir in dirs {
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .expect("fixture dir")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            files.sort();
            for file in files {
                let what = file.display().to_string();
                let bytes = std::fs::read(&file).expect("read fixture");
                let decoded = SessionSnapshot::from_json(&bytes).expect(&what);
                // The same session from another schema version: start it afresh.
                let _ = store.delete(decoded.id());
                let fresh = decoded.with_revision(Revision::NEW);
                let first = store.save(&fresh).expect(&what);
                check_exact(&store, &fresh, first, &what);
                let again = store.load(fresh.id()).expect(&what);
                // Unchanged, it is not written again; decoded afresh (so it no longer
                // knows it is what is stored), it is appended as an edit that replaces
                // the whole view: the row's snapshot stays the first, exact bytes, and
                // the session loads as the same bytes at the new revision.
                assert_eq!(store.save(&again).expect(&what), first);
                let rewritten = SessionSnapshot::from_json(&again.to_json().expect(&what))
                    .expect(&what)
                    .with_revision(again.revision());
                let second = store.save(&rewritten).expect(&what);
                assert_eq!(second, Revision::from_u64(2));
                let expected = fresh.to_json_with_revision(first).expect("encode");
                assert!(
                    pg::stored_snapshot(store.schema(), fresh.id().as_str())
                        .is_some_and(|row| row == expected),
                    "{what}: the row's snapshot changed"
                );
                assert!(
                    store
                        .load(fresh.id())
                        .expect(&what)
                        .to_json()
                        .expect("encode")
                        == again.to_json_with_revision(second).expect("encode"),
                    "{what}: the edit does not load as the bytes saved"
                );
                checked += 1;
            }
        }
        assert!(
            checked >= 9,
            "only {checked} fixtures found under {}",
            root.display()
        );
    }

    fn check_exact(
        store: &PostgresSessionStore,
        saved: &SessionSnapshot,
        revision: Revision,
        what: &str,
    ) {
        let expected = saved.to_json_with_revision(revision).expect("encode");
        let stored = pg::stored_snapshot(store.schema(), saved.id().as_str()).expect("a row");
        assert!(
            stored == expected,
            "{what}: the row's bytes differ from the encoding"
        );
        let loaded = store.load(saved.id()).expect(what);
        assert_eq!(loaded.revision(), revision, "{what}");
        assert!(
            loaded.to_json().expect("encode") == expected,
            "{what}: the loaded snapshot encodes differently"
        );
        assert_eq!(
            store
                .stored_bytes(saved.id())
                .expect("bytes")
                .map(|n| n >= expected.len() as u64),
            Some(true),
            "{what}"
        );
    }

    /// Rows changed behind the store's back are refused as corrupt, naming the row; other
    /// sessions keep loading and listing.
    #[test]
    fn damaged_rows_are_refused_as_corrupt_naming_the_row() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        for name in ["intact", "victim", "other"] {
            store.save(&snapshot(name, name)).expect("save");
        }
        let victim = store.load(&id("victim")).expect("load");
        let good = victim.to_json().expect("encode");
        let other_bytes = pg::stored_snapshot(&schema, "other").expect("row");
        let as_value: Value = serde_json::from_slice(&good).expect("json");
        let with = |edit: &dyn Fn(&mut Value)| {
            let mut value = as_value.clone();
            edit(&mut value);
            serde_json::to_vec(&value).expect("encode")
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("not JSON", b"{\"schema_version\": 2, \"id\": ".to_vec()),
            ("an empty column", Vec::new()),
            ("a JSON array", b"[1, 2]".to_vec()),
            ("trailing bytes", [good.as_slice(), b" {}"].concat()),
            ("an unknown field", with(&|v| v["surprise"] = json!(1))),
            (
                "a missing field",
                with(&|v| {
                    v.as_object_mut().expect("object").remove("transcript");
                }),
            ),
            (
                "a newer schema version",
                with(&|v| v["schema_version"] = json!(99)),
            ),
            ("another session's snapshot", other_bytes),
            (
                "a revision the row does not have",
                with(&|v| v["revision"] = json!(7)),
            ),
            (
                "a broken tool call pairing",
                with(&|v| v["tool_calls"] = json!([{"call_id": "x"}])),
            ),
        ];
        for (case, bytes) in cases {
            pg::overwrite_snapshot(&schema, "victim", &bytes);
            let err = store.load(&id("victim")).expect_err(case);
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{case}: {err:?}");
            assert!(err.is_corrupt());
            let text = err.to_string();
            assert!(
                text.contains("victim"),
                "{case}: the error does not name the row: {text}"
            );
            match case {
                "another session's snapshot" => {
                    assert!(matches!(err, Error::IdMismatch { .. }), "{err:?}");
                }
                "a newer schema version" => {
                    assert!(
                        matches!(err, Error::UnsupportedSchemaVersion { found: 99, .. }),
                        "{err:?}"
                    );
                }
                _ => {}
            }
            // The others are untouched.
            assert!(store.load(&id("intact")).is_ok(), "{case}");
            // The listing reads the summary column, which is intact; ties go by id, descending.
            assert_eq!(listed_ids(&store), ["victim", "other", "intact"], "{case}");
        }
    }

    /// The listing reads the summary column alone: a damaged one is reported unreadable
    /// (corrupt, naming the row) while the other sessions are listed, and the session's
    /// own snapshot still loads.
    #[test]
    fn a_damaged_listing_entry_is_reported_unreadable_and_the_rest_are_listed() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        for (i, name) in ["s1", "s2", "s3"].iter().enumerate() {
            store
                .save(&snapshot_at(
                    name,
                    name,
                    at(i64::try_from(i).expect("small")),
                ))
                .expect("save");
        }
        let s2_summary = pg::query_text(&format!(
            "SELECT summary FROM {schema}.sessions WHERE id = 's2'"
        ));
        let s1_summary = pg::query_text(&format!(
            "SELECT summary FROM {schema}.sessions WHERE id = 's1'"
        ));
        let mut with_extra: Value = serde_json::from_str(&s2_summary[0]).expect("summary json");
        with_extra["surprise"] = json!(true);
        for (case, summary) in [
            ("not JSON", "{\"id\": ".to_owned()),
            ("an unknown field", with_extra.to_string()),
            ("another session's summary", s1_summary[0].clone()),
        ] {
            pg::overwrite_summary(&schema, "s2", &summary);
            let listing = store.list().expect("list");
            let ids: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
            assert_eq!(ids, ["s3", "s1"], "{case}");
            assert_eq!(
                listing.unreadable.len(),
                1,
                "{case}: {:?}",
                listing.unreadable
            );
            let err = &listing.unreadable[0];
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{case}: {err:?}");
            assert!(err.to_string().contains("s2"), "{case}: {err}");
            assert_eq!(store.load(&id("s2")).expect(case).id().as_str(), "s2");
        }
        // A save rewrites the summary: the session is listed again. (A changed one: an
        // unchanged snapshot is not written at all.)
        let s2 = store.load(&id("s2")).expect("load");
        store
            .save(&changed(&s2, "repaired", json!(true)))
            .expect("save");
        assert_eq!(listed_ids(&store), ["s3", "s2", "s1"]);
    }

    /// A page that meets a damaged listing entry reports it, and the walk still reaches
    /// every readable session after it.
    #[test]
    fn a_damaged_listing_entry_does_not_end_the_page_walk_early() {
        let schemas = Schemas::new();
        let store = schemas.store();
        for i in 0..10 {
            store
                .save(&snapshot_at(&format!("w{i}"), "x", at(i)))
                .expect("save");
        }
        // The second newest.
        pg::overwrite_summary(store.schema(), "w8", "{damaged");
        for limit in [1, 2, 3, 4, 9, 10] {
            let (walked, unreadable) = walk(&store, limit);
            let expected: Vec<String> = (0..10)
                .rev()
                .filter(|i| *i != 8)
                .map(|i| format!("w{i}"))
                .collect();
            assert_eq!(
                walked, expected,
                "limit {limit}: the walk lost the sessions after the damaged entry"
            );
            assert_eq!(unreadable.len(), 1, "limit {limit}: {unreadable:?}");
        }
    }

    // -----------------------------------------------------------------------------------
    // Size limits and times.
    // -----------------------------------------------------------------------------------

    #[test]
    fn a_save_over_the_size_limit_is_refused_and_stores_nothing() {
        let schemas = Schemas::new();
        let store = schemas.store_with(PostgresSessionStore::builder().max_snapshot_bytes(4096));
        let schema = store.schema().to_owned();

        // A new session over the limit is not created.
        let huge = snapshot("huge", &"z".repeat(10_000));
        let err = store.save(&huge).expect_err("new session over the limit");
        assert!(!err.is_conflict(), "{err:?}");
        assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("4096") && text.contains("huge"), "{text}");
        // Issue 12, item 16: the advice named the file store to users of this one.
        assert!(!text.contains("FileSessionStore"), "{text}");
        assert!(store
            .load(huge.id())
            .expect_err("not stored")
            .is_not_found());
        assert!(pg::stored_snapshot(&schema, "huge").is_none());
        assert!(listed_ids(&store).is_empty());

        // An existing session that grows over the limit keeps its stored revision.
        let small = snapshot("grows", "short");
        store.save(&small).expect("save small");
        let before = pg::stored_snapshot(&schema, "grows").expect("row");
        let grown = snapshot("grows", &"y".repeat(10_000)).with_revision(Revision::from_u64(1));
        let err = store.save(&grown).expect_err("grown over the limit");
        assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
        assert_eq!(pg::stored_snapshot(&schema, "grows"), Some(before));
        assert_eq!(
            store.load(small.id()).expect("load").revision(),
            Revision::from_u64(1)
        );

        // The limit is the encoded size, inclusive.
        let fits = snapshot("fits", &"w".repeat(1000));
        let encoded = fits
            .to_json_with_revision(Revision::from_u64(1))
            .expect("encode")
            .len() as u64;
        let exact = schemas.store_with(PostgresSessionStore::builder().max_snapshot_bytes(encoded));
        exact.save(&fits).expect("exactly at the limit");
        let tight =
            schemas.store_with(PostgresSessionStore::builder().max_snapshot_bytes(encoded - 1));
        assert!(tight.save(&fits).is_err(), "one byte over the limit");
        assert!(tight
            .load(fits.id())
            .expect_err("not stored")
            .is_not_found());
    }

    #[test]
    fn a_stored_row_over_the_load_limit_is_refused() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let big = snapshot("big", &"x".repeat(20_000));
        let revision = store.save(&big).expect("save under the default limit");
        let size = big.to_json_with_revision(revision).expect("encode").len() as u64;

        let limited = |limit: u64| {
            PostgresSessionStore::builder()
                .schema(store.schema())
                .max_snapshot_bytes(limit)
                .connect(&pg::url())
                .expect("connect")
        };
        let err = limited(4096).load(big.id()).expect_err("over the limit");
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        match &err {
            Error::TooLarge {
                size_bytes,
                limit_bytes,
                ..
            } => {
                assert_eq!(*size_bytes, size);
                assert_eq!(*limit_bytes, 4096);
            }
            other => panic!("expected Error::TooLarge, got {other:?}"),
        }
        assert!(err.to_string().contains("big"), "{err}");
        assert_eq!(
            limited(size)
                .load(big.id())
                .expect("at the limit")
                .revision(),
            revision
        );
        assert!(matches!(
            limited(size - 1).load(big.id()),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn a_size_limit_of_zero_is_refused_as_by_the_file_store() {
        // As the file store: a limit of 0 could store nothing, so it is refused.
        let err = PostgresSessionStore::builder()
            .max_snapshot_bytes(0)
            .connect(&pg::url())
            .expect_err("a zero limit could store nothing");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
    }

    #[test]
    fn size_limit_of_u64_max_means_no_practical_limit() {
        let schemas = Schemas::new();
        let store =
            schemas.store_with(PostgresSessionStore::builder().max_snapshot_bytes(u64::MAX));
        let s = snapshot("unbounded", "x");
        let revision = store.save(&s).expect("save");
        let loaded = store.load(s.id()).expect("load");
        assert_eq!(
            store
                .save(&changed(&loaded, "again", json!(true)))
                .expect("save again"),
            revision.next()
        );
    }

    /// The listing's order is kept in nanoseconds: a time the columns cannot hold is
    /// refused before anything is written.
    #[test]
    fn a_time_outside_the_orderable_range_is_refused_and_stores_nothing() {
        let schemas = Schemas::new();
        let store = schemas.store();
        // Before 1677 (a time after 2262, the other end, cannot be built: it lies in the
        // future).
        let far = Utc
            .with_ymd_and_hms(1600, 1, 1, 0, 0, 0)
            .single()
            .expect("date");
        let s = SessionSnapshot::builder(id("far-past"), "m")
            .timestamps(far, far)
            .build()
            .expect("the snapshot format allows it");
        let err = store.save(&s).expect_err("before 1677");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err:?}");
        assert!(store.load(s.id()).expect_err("nothing").is_not_found());
    }

    // -----------------------------------------------------------------------------------
    // Compare-and-swap, listing, delete.
    // -----------------------------------------------------------------------------------

    /// Two stores (two connection pools, as two machines would have) on one schema.
    #[test]
    fn two_stores_on_one_schema_compare_and_swap_against_each_other() {
        let schemas = Schemas::new();
        let a = schemas.store();
        let b = pg::connect(a.schema());
        let base = snapshot("shared", "x");
        a.save(&base).expect("create");
        let seen_by_a = a.load(base.id()).expect("a loads");
        let seen_by_b = b.load(base.id()).expect("b loads");
        assert_eq!(
            a.save(&changed(&seen_by_a, "writer", json!("a")))
                .expect("a saves"),
            Revision::from_u64(2)
        );
        let err = b
            .save(&changed(&seen_by_b, "writer", json!("b")))
            .expect_err("b is stale");
        assert!(
            matches!(err, Error::Conflict { expected, found: Some(found), .. }
                if expected == Revision::from_u64(1) && found == Revision::from_u64(2)),
            "{err:?}"
        );
        assert_eq!(
            b.load(base.id()).expect("load").metadata()["writer"],
            json!("a")
        );
        // A new snapshot over the id from the other store is a conflict too.
        let err = b
            .save(&snapshot("shared", "again"))
            .expect_err("NEW over it");
        assert!(
            matches!(err, Error::Conflict { found: Some(found), .. } if found == Revision::from_u64(2)),
            "{err:?}"
        );
        let current = b.load(base.id()).expect("reload");
        assert_eq!(
            b.save(&changed(&current, "writer", json!("b")))
                .expect("b saves after reloading"),
            Revision::from_u64(3)
        );
        assert_eq!(
            a.load(base.id()).expect("load").metadata()["writer"],
            json!("b")
        );
    }

    /// Writers with a store each race to save over one revision (and to create one id):
    /// every time, exactly one wins and every other is told the winner's revision.
    #[test]
    fn racing_saves_of_one_revision_let_exactly_one_win() {
        const WRITERS: usize = 6;
        const ROUNDS: u64 = 15;
        let schemas = Schemas::new();
        let schema = schemas.store().schema().to_owned();
        let stores: Vec<PostgresSessionStore> =
            (0..WRITERS).map(|_| pg::connect(&schema)).collect();
        let barrier = Barrier::new(WRITERS);
        for round in 0..=ROUNDS {
            let expected = Revision::from_u64(round);
            let outcomes: Vec<Result<Revision, Error>> = std::thread::scope(|scope| {
                let handles: Vec<_> = stores
                    .iter()
                    .enumerate()
                    .map(|(w, store)| {
                        let barrier = &barrier;
                        scope.spawn(move || {
                            let next = SessionSnapshot::builder(id("raced"), "m")
                                .metadata_entry("winner", json!(w))
                                .metadata_entry("round", json!(round))
                                .build()
                                .expect("build")
                                .with_revision(expected);
                            barrier.wait();
                            store.save(&next)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("writer"))
                    .collect()
            });
            let winners: Vec<usize> = outcomes
                .iter()
                .enumerate()
                .filter(|(_, o)| o.is_ok())
                .map(|(w, _)| w)
                .collect();
            assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
            for outcome in &outcomes {
                match outcome {
                    Ok(revision) => assert_eq!(*revision, expected.next()),
                    Err(Error::Conflict {
                        expected: e, found, ..
                    }) => {
                        assert_eq!(*e, expected);
                        assert_eq!(*found, Some(expected.next()), "round {round}");
                    }
                    Err(other) => panic!("round {round}: {other:?}"),
                }
            }
            let after = stores[0].load(&id("raced")).expect("load");
            assert_eq!(after.revision(), expected.next());
            assert_eq!(
                after.metadata()["winner"],
                json!(winners[0]),
                "round {round}"
            );
        }
    }

    /// Times a `timestamptz` column would round to the same microsecond still order.
    #[test]
    fn list_is_newest_first_to_the_nanosecond() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let base = at(0);
        // Ids in the opposite order to the times, so a tie broken by id would show.
        for (name, nanos) in [("a", 3), ("b", 2), ("c", 1), ("d", 0)] {
            store
                .save(&snapshot_at(
                    name,
                    name,
                    base + Duration::nanoseconds(nanos),
                ))
                .expect("save");
        }
        assert_eq!(listed_ids(&store), ["a", "b", "c", "d"]);
        let (walked, _) = walk(&store, 1);
        assert_eq!(walked, ["a", "b", "c", "d"]);
        let listing = store.list().expect("list");
        assert_eq!(
            listing.sessions[0].updated_at,
            base + Duration::nanoseconds(3),
            "the listing gives the exact time"
        );
    }

    /// The listing (and each page of it) is read in order from an index: with sequential
    /// scans and sorting priced out, the planner still needs no sort for the listing's
    /// order. (The queries mirror the store's: newest first, ties by id descending.)
    #[test]
    fn the_listing_is_read_from_an_index_without_sorting() {
        let schemas = Schemas::new();
        let store = schemas.store();
        for i in 0..50 {
            store
                .save(&snapshot_at(&format!("i{i:02}"), "x", at(i)))
                .expect("save");
        }
        let schema = store.schema();
        let setup = "SET enable_seqscan = off; SET enable_sort = off; SET enable_bitmapscan = off";
        for query in [
            format!(
                "EXPLAIN SELECT id, summary FROM {schema}.sessions WHERE archived = false \
                 ORDER BY updated_ns DESC, id DESC"
            ),
            format!(
                "EXPLAIN SELECT id, summary FROM {schema}.sessions WHERE archived = false \
                 AND (updated_ns, id) < (1741064767123456789, 'i20') \
                 ORDER BY updated_ns DESC, id DESC LIMIT 6"
            ),
        ] {
            let plan = pg::query_text_after(setup, &query).join("\n");
            assert!(plan.contains("Index"), "no index in the plan:\n{plan}");
            assert!(!plan.contains("Sort"), "the listing needs a sort:\n{plan}");
        }
    }

    /// `list_page` with small limits walks every active session exactly once, in the
    /// listing's order, over ties, archived sessions and a session saved mid-walk.
    #[test]
    fn pages_walk_every_session_exactly_once() {
        let schemas = Schemas::new();
        let store = schemas.store();
        for i in 0..40_i64 {
            // Four sessions share each time.
            store
                .save(&snapshot_at(&format!("p{i:02}"), "x", at(i / 4)))
                .expect("save");
        }
        for archived in ["p05", "p17", "p39"] {
            store.set_archived(&id(archived), true).expect("archive");
        }
        let listed = listed_ids(&store);
        assert_eq!(listed.len(), 37);
        for limit in [1, 3, 7, 36, 37, 38] {
            let (walked, unreadable) = walk(&store, limit);
            assert!(unreadable.is_empty(), "{unreadable:?}");
            assert_eq!(walked, listed, "limit {limit}");
            let distinct: HashSet<&String> = walked.iter().collect();
            assert_eq!(
                distinct.len(),
                walked.len(),
                "limit {limit}: a session twice"
            );
        }
        // A session saved during a walk moves to the front; the walk neither repeats nor
        // skips the others.
        let first = store.list_page(3, None).expect("page");
        let moved = store.load(&id("p20")).expect("load");
        let later = moved
            .with_appended(vec![Message::user("again")], Vec::new(), at(1_000))
            .expect("append");
        store.save(&later).expect("save");
        let mut seen: Vec<String> = first.sessions.iter().map(|s| s.id.to_string()).collect();
        let mut cursor = first.next;
        while let Some(after) = cursor {
            let page = store.list_page(3, Some(&after)).expect("page");
            seen.extend(page.sessions.iter().map(|s| s.id.to_string()));
            cursor = page.next;
        }
        let expected: Vec<String> = listed.into_iter().filter(|i| i != "p20").collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn a_delete_through_one_store_is_seen_by_another_and_frees_the_id() {
        let schemas = Schemas::new();
        let a = schemas.store();
        let b = pg::connect(a.schema());
        let s = snapshot("gone", "x");
        a.save(&s).expect("save");
        let held = b.load(s.id()).expect("b loads");
        b.delete(s.id()).expect("b deletes");
        assert!(a.load(s.id()).expect_err("deleted").is_not_found());
        assert!(a.delete(s.id()).expect_err("twice").is_not_found());
        assert!(a.stored_bytes(s.id()).expect_err("no row").is_not_found());
        assert!(listed_ids(&a).is_empty());
        assert!(pg::stored_snapshot(a.schema(), "gone").is_none());
        // A writer still holding the old revision is told the session is gone.
        let err = b.save(&held).expect_err("stale after delete");
        assert!(
            matches!(err, Error::Conflict { found: None, .. }),
            "{err:?}"
        );
        assert_eq!(
            a.save(&snapshot("gone", "new")).expect("new"),
            Revision::from_u64(1)
        );
    }

    // -----------------------------------------------------------------------------------
    // Runtimes and threads.
    // -----------------------------------------------------------------------------------

    /// Saves, loads, lists, pages and deletes session `name` through `store`, with two
    /// saves, checking each step.
    fn exercise(store: &PostgresSessionStore, name: &str) {
        let s = snapshot(name, name);
        let first = store.save(&s).expect("save");
        assert_eq!(first, Revision::from_u64(1));
        let loaded = store.load(s.id()).expect("load");
        assert_eq!(loaded.transcript(), s.transcript());
        assert_eq!(
            store
                .save(&changed(&loaded, "n", json!(2)))
                .expect("save again"),
            Revision::from_u64(2)
        );
        assert!(store
            .list()
            .expect("list")
            .sessions
            .iter()
            .any(|summary| summary.id == *s.id()));
        assert!(!store
            .list_page(100, None)
            .expect("page")
            .sessions
            .is_empty());
        assert_eq!(store.load(s.id()).expect("load").metadata()["n"], json!(2));
        store.delete(s.id()).expect("delete");
        assert!(store.load(s.id()).expect_err("deleted").is_not_found());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn calls_from_async_code_on_a_current_thread_runtime_work() {
        let schemas = Schemas::new();
        // Made, migrated and used directly on the runtime's only thread.
        let store = Arc::new(schemas.store());
        exercise(&store, "direct");
        let shared = Arc::clone(&store);
        tokio::task::spawn_blocking(move || exercise(&shared, "blocking"))
            .await
            .expect("spawn_blocking");
        let shared = Arc::clone(&store);
        tokio::spawn(async move { exercise(&shared, "task") })
            .await
            .expect("task");
        // Between awaits of the runtime's own timers.
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        exercise(&store, "after-sleep");
        drop(store); // the last reference, dropped inside the runtime
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_from_async_code_on_a_multi_thread_runtime_work_concurrently() {
        let schemas = Schemas::new();
        let store = Arc::new(schemas.store());
        exercise(&store, "direct");
        // More blocking tasks than worker threads, and blocking-pool tasks beside them.
        let mut tasks = Vec::new();
        for t in 0..4 {
            let shared = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                for i in 0..5 {
                    exercise(&shared, &format!("task-{t}-{i}"));
                }
            }));
            let shared = Arc::clone(&store);
            tasks.push(tokio::task::spawn_blocking(move || {
                for i in 0..5 {
                    exercise(&shared, &format!("blocking-{t}-{i}"));
                }
            }));
        }
        for task in tasks {
            task.await.expect("a task failed");
        }
        assert!(listed_ids(&*store).is_empty());
        drop(store);
    }

    /// A store made anywhere can be dropped anywhere: inside a current-thread or a
    /// multi-thread runtime, in a task, in `spawn_blocking`, or after the runtime it was
    /// made in has shut down (it keeps working until then).
    #[test]
    fn dropping_a_store_inside_a_runtime_does_not_panic() {
        let schemas = Schemas::new();
        let schema = schemas.store().schema().to_owned();
        let setup = pg::connect(&schema);
        setup.save(&snapshot("present", "x")).expect("save");
        let present = id("present");
        let runtimes = [
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime"),
        ];
        for runtime in runtimes {
            // Made outside, used and dropped inside.
            let outside = pg::connect(&schema);
            runtime.block_on(async {
                outside.load(&present).expect("load");
                drop(outside);
            });
            // Made, used and dropped inside.
            runtime.block_on(async {
                let inside = pg::connect(&schema);
                inside.list().expect("list");
                drop(inside);
            });
            // Dropped in a task and in the blocking pool.
            let in_task = pg::connect(&schema);
            runtime
                .block_on(runtime.spawn(async move {
                    in_task.load(&id("present")).expect("load");
                    drop(in_task);
                }))
                .expect("the task did not panic");
            let in_pool = pg::connect(&schema);
            runtime
                .block_on(runtime.spawn_blocking(move || {
                    in_pool.load(&id("present")).expect("load");
                    drop(in_pool);
                }))
                .expect("spawn_blocking did not panic");
            // Made inside, outliving the runtime.
            let kept = runtime.block_on(async {
                let kept = pg::connect(&schema);
                kept.load(&present).expect("load");
                kept
            });
            drop(runtime);
            kept.load(&present)
                .expect("a store outlives the runtime it was made in");
            drop(kept);
        }
        setup.load(&present).expect("still there");
    }

    /// Plain threads, sharing one store and each with its own, save and load their own
    /// sessions at once, and list while the others write.
    #[test]
    fn plain_threads_sharing_a_store_or_each_with_their_own_work_at_once() {
        const THREADS: usize = 6;
        const SESSIONS: usize = 10;
        let schemas = Schemas::new();
        let shared = schemas.store();
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (shared, barrier) = (&shared, &barrier);
                scope.spawn(move || {
                    let own;
                    let store = if t % 2 == 0 {
                        shared
                    } else {
                        own = pg::connect(shared.schema());
                        &own
                    };
                    barrier.wait();
                    for i in 0..SESSIONS {
                        let name = format!("t{t}-s{i}");
                        store.save(&snapshot(&name, &name)).expect("save");
                        let loaded = store.load(&id(&name)).expect("load");
                        store.save(&changed(&loaded, "t", json!(t))).expect("save");
                        let listing = store.list().expect("list");
                        assert!(listing.unreadable.is_empty(), "{:?}", listing.unreadable);
                    }
                });
            }
        });
        let listing = listed_ids(&shared);
        assert_eq!(listing.len(), THREADS * SESSIONS);
        for t in 0..THREADS {
            for i in 0..SESSIONS {
                let loaded = shared.load(&id(&format!("t{t}-s{i}"))).expect("load");
                assert_eq!(loaded.revision(), Revision::from_u64(2));
                assert_eq!(loaded.metadata()["t"], json!(t));
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Several processes.
    // -----------------------------------------------------------------------------------

    /// The schema the child works in; without it the child returns at once.
    const CHILD_SCHEMA_ENV: &str = "AGENT_SESSION_PG_CHILD_SCHEMA";
    const CHILD_COUNT_ENV: &str = "AGENT_SESSION_PG_CHILD_COUNT";
    const CHILD_WRITER_ENV: &str = "AGENT_SESSION_PG_CHILD_WRITER";
    const CHILD_TEST: &str = "postgres_store::multi_process_child_increments";
    const READY: &str = "child-ready";
    const TALLY: &str = "tally";
    const PROCESSES: usize = 3;
    /// The shared sessions; increment `i` of every writer goes to session `i % SHARED`.
    const SHARED: u64 = 3;
    const PER_PROCESS: u64 = 300;
    /// A writer needing this many attempts for one increment is starved: a bug too.
    const MAX_ATTEMPTS: u64 = 10_000;
    const MODEL: &str = "pg-processes";

    fn long_run() -> bool {
        std::env::var("AGENT_SESSION_LONG").is_ok_and(|v| v == "1")
    }

    fn shared_id(session: u64) -> SessionId {
        id(&format!("shared-{session}"))
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Mode {
        /// Correct: on a conflict, load again and redo the change.
        Cas,
        /// Broken on purpose: on a conflict, save the same change over the revision the
        /// conflict reported, overwriting the other writer's save.
        StaleRetry,
    }

    /// What one writer did to one shared session.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    struct Tally {
        attempts: u64,
        successes: u64,
        conflicts: u64,
        /// The revision each successful save returned.
        revisions: Vec<u64>,
    }

    /// Creates the shared sessions: counter 0, one message, revision 1.
    fn create_shared(store: &impl SessionStore) {
        for session in 0..SHARED {
            let s = SessionSnapshot::builder(shared_id(session), MODEL)
                .metadata_entry("counter", json!(0))
                .transcript(vec![Message::user("count with me")])
                .build()
                .expect("build");
            store.save(&s).expect("create a shared session");
        }
    }

    fn counter_of(snapshot: &SessionSnapshot) -> u64 {
        snapshot.metadata()["counter"]
            .as_u64()
            .expect("the counter is an integer")
    }

    /// `current` resumed and changed: the counter plus one, and a message `tag` appended.
    fn increment_of(current: &SessionSnapshot, tag: &str) -> SessionSnapshot {
        let mut transcript = current.transcript().to_vec();
        transcript.push(Message::user(tag));
        SessionSnapshot::builder(current.id().clone(), MODEL)
            .metadata_entry("counter", json!(counter_of(current) + 1))
            .transcript(transcript)
            .timestamps(current.created_at(), Utc::now())
            .build()
            .expect("build")
            .with_revision(current.revision())
    }

    /// Makes `increments` load → change → save increments, increment `i` on shared session
    /// `i % SHARED` with the message `<writer>-<i>`; returns a tally per shared session.
    fn increment(
        store: &impl SessionStore,
        increments: u64,
        mode: Mode,
        writer: &str,
    ) -> Vec<Tally> {
        let mut tallies = vec![Tally::default(); usize::try_from(SHARED).expect("small")];
        for i in 0..increments {
            let session = shared_id(i % SHARED);
            let tally = &mut tallies[usize::try_from(i % SHARED).expect("small")];
            let tag = format!("{writer}-{i}");
            let mut next = increment_of(&store.load(&session).expect("load"), &tag);
            let first_attempt = tally.attempts;
            loop {
                assert!(
                    tally.attempts - first_attempt < MAX_ATTEMPTS,
                    "{writer} starved"
                );
                tally.attempts += 1;
                match store.save(&next) {
                    Ok(revision) => {
                        assert_eq!(revision, next.revision().next(), "{writer}");
                        tally.successes += 1;
                        tally.revisions.push(revision.as_u64());
                        break;
                    }
                    Err(Error::Conflict { found, .. }) => {
                        tally.conflicts += 1;
                        next = match mode {
                            Mode::Cas => increment_of(&store.load(&session).expect("load"), &tag),
                            Mode::StaleRetry => {
                                next.with_revision(found.expect("the session exists"))
                            }
                        };
                    }
                    Err(e) => panic!("{writer}: unexpected error {e:?}"),
                }
            }
        }
        tallies
    }

    /// The accounting: `Ok` holds the figures, `Err` says what does not add up.
    /// `writers` holds each writer's name, increments and tallies (one per session).
    fn account(
        store: &impl SessionStore,
        writers: &[(String, u64, Vec<Tally>)],
    ) -> Result<String, String> {
        let mut figures = Vec::new();
        for session in 0..SHARED {
            let s = usize::try_from(session).expect("small");
            let (mut successes, mut conflicts, mut attempts) = (0, 0, 0);
            let mut revisions = Vec::new();
            for (writer, _, tallies) in writers {
                let t = &tallies[s];
                if t.attempts != t.successes + t.conflicts {
                    return Err(format!(
                        "{writer} on session {session}: {} attempts but {} successes + {} conflicts",
                        t.attempts, t.successes, t.conflicts
                    ));
                }
                if t.revisions.len() as u64 != t.successes {
                    return Err(format!("{writer}: successes and revisions disagree"));
                }
                successes += t.successes;
                conflicts += t.conflicts;
                attempts += t.attempts;
                revisions.extend(t.revisions.iter().copied());
            }
            let stored = store
                .load(&shared_id(session))
                .map_err(|e| format!("load: {e:?}"))?;
            let counter = counter_of(&stored);
            let revision = stored.revision().as_u64();
            if counter != successes {
                return Err(format!(
                    "lost updates on session {session}: counter {counter} after {successes} \
                     successful saves ({conflicts} conflicts)"
                ));
            }
            if revision != successes + 1 {
                return Err(format!(
                    "session {session}: revision {revision} after {successes} successful saves"
                ));
            }
            revisions.sort_unstable();
            if revisions != (2..=revision).collect::<Vec<u64>>() {
                return Err(format!(
                    "session {session}: the successes did not return revisions 2..={revision}, each once"
                ));
            }
            // Every increment's message is in the transcript exactly once.
            let tags: Vec<String> = stored.transcript()[1..].iter().map(Message::text).collect();
            let expected: BTreeSet<String> = writers
                .iter()
                .flat_map(|(writer, increments, _)| {
                    (0..*increments)
                        .filter(|i| i % SHARED == session)
                        .map(move |i| format!("{writer}-{i}"))
                })
                .collect();
            let found: BTreeSet<String> = tags.iter().cloned().collect();
            if tags.len() != found.len() || found != expected {
                return Err(format!(
                    "session {session}: the transcript does not hold each increment's message once \
                     ({} messages, {} distinct, {} expected)",
                    tags.len(),
                    found.len(),
                    expected.len()
                ));
            }
            figures.push(format!(
                "session {session}: attempts {attempts}, successes {successes}, conflicts {conflicts}"
            ));
        }
        Ok(figures.join("; "))
    }

    /// Runs in a child process started by the process test; without [`CHILD_SCHEMA_ENV`] it
    /// returns at once. Opens a store, says it is ready, waits for a line on stdin,
    /// increments, and prints a tally line per shared session.
    #[test]
    #[ignore = "run in a child process by processes_resuming_and_saving_the_same_sessions_lose_nothing"]
    fn multi_process_child_increments() {
        let Ok(schema) = std::env::var(CHILD_SCHEMA_ENV) else {
            return;
        };
        let increments: u64 = std::env::var(CHILD_COUNT_ENV)
            .expect("count")
            .parse()
            .expect("count is a number");
        let writer = std::env::var(CHILD_WRITER_ENV).expect("writer");
        let store = PostgresSessionStore::builder()
            .schema(schema)
            .pool_size(2)
            .connect(&pg::url())
            .expect("the child connects");
        // Connect before saying ready, so that the writers start together.
        store.list().expect("the child reaches the server");
        let mut out = std::io::stdout().lock();
        writeln!(out, "{READY}").expect("write");
        out.flush().expect("flush");
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).expect("wait for go");
        let tallies = increment(&store, increments, Mode::Cas, &writer);
        for (session, t) in tallies.iter().enumerate() {
            let revisions: Vec<String> = t.revisions.iter().map(u64::to_string).collect();
            writeln!(
                out,
                "{TALLY} {session} {} {} {} {}",
                t.attempts,
                t.successes,
                t.conflicts,
                revisions.join(",")
            )
            .expect("write");
        }
        out.flush().expect("flush");
    }

    struct Running {
        child: Child,
        stdin: ChildStdin,
        lines: mpsc::Receiver<String>,
        reader: JoinHandle<()>,
        stderr: JoinHandle<String>,
    }

    fn start_child(schema: &str, writer: &str, increments: u64) -> Running {
        let exe = std::env::current_exe().expect("current test binary");
        let mut child = Command::new(exe)
            .args([
                CHILD_TEST,
                "--exact",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_SCHEMA_ENV, schema)
            .env(CHILD_COUNT_ENV, increments.to_string())
            .env(CHILD_WRITER_ENV, writer)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the child");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Running {
            child,
            stdin,
            lines,
            reader,
            stderr,
        }
    }

    fn parse_tallies(lines: &[String]) -> Vec<Tally> {
        let mut tallies = vec![Tally::default(); usize::try_from(SHARED).expect("small")];
        let mut seen = 0;
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            if words.first() != Some(&TALLY) {
                continue;
            }
            let number = |i: usize| -> u64 { words[i].parse().expect("a number") };
            let session = usize::try_from(number(1)).expect("small");
            tallies[session] = Tally {
                attempts: number(2),
                successes: number(3),
                conflicts: number(4),
                revisions: words
                    .get(5)
                    .map(|w| {
                        w.split(',')
                            .filter(|r| !r.is_empty())
                            .map(|r| r.parse().expect("a revision"))
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            seen += 1;
        }
        assert_eq!(seen, SHARED, "the child printed a tally per session");
        tallies
    }

    /// Several processes resume and save the same sessions through the server in a loop
    /// (load, add one to a counter and append a message, save; on a conflict, load again):
    /// every save lands or is a conflict, and nothing is lost: each session's counter is
    /// its revision − 1 and the sum of its successes, the successes returned each revision
    /// once, and the transcript holds every increment's message exactly once.
    #[test]
    fn processes_resuming_and_saving_the_same_sessions_lose_nothing() {
        let increments = if long_run() {
            PER_PROCESS * 5
        } else {
            PER_PROCESS
        };
        let schemas = Schemas::new();
        let store = schemas.store();
        create_shared(&store);
        let writers: Vec<String> = (0..PROCESSES).map(|p| format!("p{p}")).collect();
        let mut children: Vec<Running> = writers
            .iter()
            .map(|writer| start_child(store.schema(), writer, increments))
            .collect();
        for running in &children {
            let ready = running.lines.iter().any(|line| line.ends_with(READY));
            assert!(ready, "a child ended before it was ready");
        }
        let started = Instant::now();
        for running in &mut children {
            writeln!(running.stdin, "go").expect("tell the child to go");
            running.stdin.flush().expect("flush");
        }
        let results: Vec<(String, u64, Vec<Tally>)> = children
            .into_iter()
            .zip(&writers)
            .map(|(mut running, writer)| {
                let status = running.child.wait().expect("wait for the child");
                running.reader.join().expect("stdout reader");
                let stderr = running.stderr.join().expect("stderr reader");
                let lines: Vec<String> = running.lines.try_iter().collect();
                assert!(
                    status.success(),
                    "{writer} failed ({status})\nstdout:\n{}\nstderr:\n{stderr}",
                    lines.join("\n")
                );
                (writer.clone(), increments, parse_tallies(&lines))
            })
            .collect();
        let elapsed = started.elapsed();
        for (writer, _, tallies) in &results {
            let successes: u64 = tallies.iter().map(|t| t.successes).sum();
            assert_eq!(successes, increments, "{writer}: {tallies:?}");
        }
        let figures = account(&store, &results).unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "postgres processes: {PROCESSES} x {increments} over {SHARED} sessions: {figures}, in {:.1} s",
            elapsed.as_secs_f64()
        );
        let conflicts: u64 = results
            .iter()
            .flat_map(|(_, _, t)| t.iter().map(|t| t.conflicts))
            .sum();
        assert!(
            conflicts > 0,
            "the processes never contended, so nothing was tested"
        );
    }

    /// The accounting catches lost updates: writers that retry a conflicting save over the
    /// revision the conflict reported (bypassing the compare-and-swap) are flagged.
    #[test]
    fn negative_control_a_writer_that_bypasses_the_compare_and_swap_is_caught() {
        const WRITERS: usize = 3;
        let increments = 150;
        let schemas = Schemas::new();
        let store = schemas.store();
        create_shared(&store);
        let barrier = Barrier::new(WRITERS);
        let conflicts = AtomicU64::new(0);
        let results: Vec<(String, u64, Vec<Tally>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let (schema, barrier, conflicts) = (store.schema(), &barrier, &conflicts);
                    scope.spawn(move || {
                        let own = pg::connect(schema);
                        let writer = format!("w{w}");
                        barrier.wait();
                        let tallies = increment(&own, increments, Mode::StaleRetry, &writer);
                        conflicts.fetch_add(
                            tallies.iter().map(|t| t.conflicts).sum(),
                            Ordering::Relaxed,
                        );
                        (writer, increments, tallies)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("writer"))
                .collect()
        });
        let conflicts = conflicts.load(Ordering::Relaxed);
        assert!(
            conflicts > 0,
            "the writers never contended, so nothing was tested"
        );
        let verdict = account(&store, &results);
        eprintln!("postgres negative control ({conflicts} conflicts): {verdict:?}");
        let err = verdict.expect_err("the accounting missed writers that bypass the CAS");
        assert!(err.starts_with("lost updates"), "{err}");
    }

    /// The accounting itself: a clean run adds up, and each kind of discrepancy is named.
    #[test]
    fn accounting_rejects_each_kind_of_discrepancy() {
        let schemas = Schemas::new();
        let store = schemas.store();
        create_shared(&store);
        let good = increment(&store, 6, Mode::Cas, "solo");
        let run = |tallies: Vec<Tally>| account(&store, &[("solo".to_owned(), 6, tallies)]);
        run(good.clone()).expect("a clean run adds up");

        let mut miscounted = good.clone();
        miscounted[0].attempts += 1;
        assert!(run(miscounted).expect_err("attempts").contains("attempts"));
        let mut phantom = good.clone();
        phantom[1].successes += 1;
        phantom[1].attempts += 1;
        phantom[1].revisions.push(9);
        assert!(run(phantom)
            .expect_err("phantom")
            .starts_with("lost updates"));
        let good_tallies = good.clone();
        let mut duplicate = good;
        duplicate[2].revisions[1] = duplicate[2].revisions[0];
        assert!(run(duplicate).expect_err("duplicate").contains("each once"));
        // Counters and revisions add up, but the transcripts hold other messages than the
        // increments made (here: the writer's name is not the one that wrote them).
        let renamed = account(&store, &[("other".to_owned(), 6, good_tallies)]);
        assert!(
            renamed.expect_err("messages").contains("message"),
            "the transcript check"
        );
    }

    // -----------------------------------------------------------------------------------
    // Timeouts, least privilege, revision range (from the review of the first version).
    // -----------------------------------------------------------------------------------

    #[test]
    fn a_call_blocked_by_a_lock_fails_after_the_query_timeout_instead_of_waiting() {
        let schemas = Schemas::new();
        let store = schemas.store_with(
            PostgresSessionStore::builder().query_timeout(std::time::Duration::from_millis(500)),
        );
        let schema = store.schema().to_owned();
        let saved = snapshot("locked", "hello");
        store.save(&saved).expect("save");
        // Another connection holds the table for 5 s.
        let holder = {
            let schema = schema.clone();
            std::thread::spawn(move || {
                pg::execute(&format!(
                    "BEGIN; LOCK TABLE \"{schema}\".sessions IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(5); COMMIT"
                ));
            })
        };
        let held = || {
            pg::query_text(&format!(
                "SELECT count(*)::text FROM pg_locks WHERE mode = 'AccessExclusiveLock' AND relation = '\"{schema}\".sessions'::regclass"
            )) == ["1"]
        };
        while !held() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let error = store.load(saved.id()).expect_err("the table is locked");
        assert!(matches!(error, Error::Backend { .. }), "{error:?}");
        assert_eq!(error.kind(), ErrorKind::Io);
        holder.join().expect("lock holder");
        // Once the lock is gone, the same store works again.
        assert_eq!(
            store.load(saved.id()).expect("load").transcript(),
            saved.transcript()
        );
    }

    #[test]
    fn migrate_on_current_tables_needs_no_create_right() {
        let schemas = Schemas::new();
        let owner = schemas.store();
        let schema = owner.schema().to_owned();
        let role = format!("app_{}", schema.trim_start_matches("t_"));
        pg::execute(&format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA \"{schema}\" TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \"{schema}\" TO {role};"
        ));
        let app = PostgresSessionStore::builder()
            .schema(schema.clone())
            .connect(&format!("{} user={role}", pg::url()))
            .expect("connect as the application's role");
        // Every process runs migrate at start; with the tables current it must work for a
        // role that may only read and write rows.
        let outcome = app.migrate();
        let saved = app.save(&snapshot("least-privilege", "hi"));
        drop(app);
        pg::execute(&format!("DROP OWNED BY {role}; DROP ROLE {role};"));
        outcome.expect("migrate with row rights only");
        assert_eq!(saved.expect("save"), Revision::from_u64(1));
    }

    #[test]
    fn a_revision_beyond_what_a_bigint_holds_is_refused_and_stores_nothing() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let far = snapshot("far", "x")
            .with_revision(Revision::from_u64(u64::try_from(i64::MAX).unwrap()));
        let error = store.save(&far).expect_err("beyond i64");
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
        assert!(store
            .load(far.id())
            .expect_err("nothing stored")
            .is_not_found());
    }

    #[test]
    fn a_row_whose_key_is_not_a_session_id_is_reported_not_fatal() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        for name in ["k1", "k2", "k3"] {
            store.save(&snapshot(name, name)).expect("save");
        }
        // A row written by hand under a key that is not an id.
        pg::execute(&format!(
            "INSERT INTO \"{schema}\".sessions (id, revision, created_ns, updated_ns, summary, snapshot)
             SELECT 'Not An Id', 1, created_ns, updated_ns, summary, snapshot
             FROM \"{schema}\".sessions WHERE id = 'k2'"
        ));
        let listing = store.list().expect("the listing survives");
        assert_eq!(listing.sessions.len(), 3);
        assert_eq!(listing.unreadable.len(), 1, "{:?}", listing.unreadable);
        assert!(
            listing.unreadable[0].to_string().contains("Not An Id"),
            "{}",
            listing.unreadable[0]
        );
        // A walk one session at a time still sees every readable session once.
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = store.list_page(1, after.as_ref()).expect("page");
            seen.extend(page.sessions.iter().map(|s| s.id.to_string()));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        seen.sort();
        assert_eq!(seen, ["k1", "k2", "k3"]);
    }

    // -----------------------------------------------------------------------------------
    // Appends: a turn is one row of `entries`, not a rewrite of the session.
    // -----------------------------------------------------------------------------------

    fn entry_count(schema: &str, id: &str) -> usize {
        pg::query_text(&format!(
            "SELECT count(*)::text FROM \"{schema}\".entries WHERE session_id = '{id}'"
        ))[0]
            .parse()
            .expect("a count")
    }

    /// `snapshot` with one more exchange of `text_len` bytes of text, one second later.
    fn extended(snapshot: SessionSnapshot, text_len: usize) -> SessionSnapshot {
        let later = snapshot.updated_at() + Duration::seconds(1);
        snapshot
            .with_appended(
                vec![
                    Message::user("x".repeat(text_len)),
                    Message::assistant(vec![agent_session::ContentBlock::text("ok")]),
                ],
                vec![agent_session::Usage::new("pg-model").with_tokens(10, 2)],
                later,
            )
            .expect("extend")
    }

    /// A turn saved onto a loaded session inserts one row into `entries` and leaves the
    /// row's snapshot as it was; a fresh store (another pool) loads exactly the session;
    /// once the entries would pass their bound (64 KiB here) they are folded into a new
    /// snapshot and removed, in the same transaction as the save.
    #[test]
    fn a_turn_onto_a_loaded_session_appends_one_entry_and_entries_are_never_folded() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        let first = snapshot("grows-by-entries", "first");
        store.save(&first).expect("save");
        let base = pg::stored_snapshot(&schema, "grows-by-entries").expect("row");

        let mut current = store.load(first.id()).expect("load");
        let mut saved = vec![current.clone()];
        for turn in 1..=3_usize {
            current = extended(current, 100);
            let revision = store.save(&current).expect("append");
            assert_eq!(revision.as_u64(), 1 + turn as u64);
            current = current.with_revision(revision);
            saved.push(current.clone());
            assert_eq!(entry_count(&schema, "grows-by-entries"), turn);
        }
        assert_eq!(
            pg::stored_snapshot(&schema, "grows-by-entries"),
            Some(base.clone()),
            "an append rewrote the row's snapshot"
        );
        let fresh = pg::connect(&schema);
        let loaded = fresh.load(first.id()).expect("load through another pool");
        assert_eq!(loaded, current);
        assert_eq!(loaded.transcript().len(), 7);

        // Turns of 10 KB, past 64 KiB of entries: still appended, never folded, and every
        // revision loads as it was saved.
        for turn in 0..8 {
            current = extended(current, 10_000);
            let revision = store.save(&current).expect("save a big turn");
            current = current.with_revision(revision);
            saved.push(current.clone());
            assert_eq!(entry_count(&schema, "grows-by-entries"), 4 + turn);
        }
        assert_eq!(
            pg::stored_snapshot(&schema, "grows-by-entries"),
            Some(base),
            "entries were folded into the row's snapshot"
        );
        assert_eq!(fresh.load(first.id()).expect("load"), current);
        for expected in &saved {
            assert_eq!(
                fresh
                    .load_at(first.id(), expected.revision())
                    .expect("load_at"),
                expected.clone().with_revision(expected.revision())
            );
        }
        assert_eq!(fresh.revisions(first.id()).expect("revisions").len(), 12);
        current = extended(current, 10);
        let revision = store.save(&current).expect("append once more");
        assert_eq!(entry_count(&schema, "grows-by-entries"), 12);
        assert_eq!(fresh.load(first.id()).expect("load").revision(), revision);
        let bytes = store
            .stored_bytes(first.id())
            .expect("size")
            .expect("known");
        let row = pg::stored_snapshot(&schema, "grows-by-entries").expect("row");
        assert!(
            bytes > row.len() as u64,
            "stored_bytes leaves out the entries"
        );
        store.delete(first.id()).expect("delete");
        assert_eq!(
            entry_count(&schema, "grows-by-entries"),
            0,
            "entries outlived the row"
        );
    }

    /// Two writers extend the same loaded revision: the second append is a conflict that
    /// names the winner's revision, and adds no entry.
    #[test]
    fn a_stale_append_is_a_conflict_and_adds_no_entry() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        let first = snapshot("raced", "first");
        store.save(&first).expect("save");
        let loaded = store.load(first.id()).expect("load");
        let a = extended(loaded.clone(), 10);
        let b = extended(loaded, 20);
        assert_eq!(store.save(&a).expect("a"), Revision::from_u64(2));
        let err = store.save(&b).expect_err("b is stale");
        assert!(
            matches!(
                err,
                Error::Conflict {
                    found: Some(found),
                    ..
                } if found == Revision::from_u64(2)
            ),
            "{err:?}"
        );
        assert_eq!(entry_count(&schema, "raced"), 1);
        assert_eq!(
            store.load(first.id()).expect("load"),
            a.with_revision(Revision::from_u64(2))
        );
    }

    /// A snapshot loaded from one store and extended never appends onto another store's
    /// row that only looks the same (same id, revision and times) but holds other
    /// lengths: it is written whole there, so what is stored is what was saved.
    #[test]
    fn an_append_needs_the_rows_lengths_to_be_those_the_snapshot_was_loaded_with() {
        let schemas = Schemas::new();
        let (a, b) = (schemas.store(), schemas.store());
        let short = snapshot("look-alike", "first");
        let long = SessionSnapshot::builder(id("look-alike"), "pg-model")
            .transcript(vec![Message::user("other"), Message::user("lines")])
            .timestamps(short.created_at(), short.updated_at())
            .build()
            .expect("build");
        a.save(&short).expect("save in a");
        b.save(&long).expect("save in b");
        let from_a = extended(a.load(short.id()).expect("load from a"), 10);
        assert_eq!(b.save(&from_a).expect("save into b"), Revision::from_u64(2));
        // Not a's turn appended onto b's state: an edit that replaces b's view with a's
        // whole snapshot (b's history keeps its own).
        let kinds = pg::query_text(&format!(
            "SELECT convert_from(record, 'UTF8') FROM \"{}\".entries WHERE session_id = 'look-alike'",
            b.schema()
        ));
        assert_eq!(kinds.len(), 1);
        assert!(kinds[0].contains("\"kind\":\"edit\""), "{}", kinds[0]);
        assert_eq!(
            b.load(short.id()).expect("load from b"),
            from_a.with_revision(Revision::from_u64(2))
        );
        assert_eq!(
            b.load_at(short.id(), Revision::from_u64(1))
                .expect("b's first revision"),
            long.clone().with_revision(Revision::from_u64(1))
        );
    }

    /// Tables of version 1 (release 0.1: no `entries`, `journal_bytes` or `state_counts`):
    /// before `migrate` a load says to call it; `migrate` brings them up to date, and
    /// their sessions load, save and then append.
    #[test]
    fn version_1_tables_are_upgraded_by_migrate_and_their_sessions_append() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        let first = snapshot("from-0-1", "first");
        store.save(&first).expect("save");
        // What release 0.1's migrate made.
        pg::execute(&format!(
            "DROP TABLE \"{schema}\".entries;
             ALTER TABLE \"{schema}\".sessions DROP COLUMN journal_bytes;
             ALTER TABLE \"{schema}\".sessions DROP COLUMN state_counts;
             {no_leases}
             UPDATE \"{schema}\".store_version SET version = 1;",
            no_leases = without_leases(&schema)
        ));
        let err = store.load(first.id()).expect_err("tables of version 1");
        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        assert!(
            err.to_string().contains("older release")
                && err.to_string().contains("PostgresSessionStore::migrate"),
            "{err}"
        );

        // A new session is refused too, rather than stored where loads would fail.
        let err = store
            .save(&snapshot("new-on-0-1", "x"))
            .expect_err("a new session on tables of version 1");
        assert!(err.to_string().contains("older release"), "{err}");

        store.migrate().expect("upgrade");
        assert_eq!(
            pg::query_text(&format!(
                "SELECT version::text FROM \"{schema}\".store_version"
            )),
            ["7"]
        );
        let loaded = store.load(first.id()).expect("load after the upgrade");
        assert_eq!(loaded.transcript(), first.transcript());
        // A row of version 1 does not record its lengths: its first save cannot claim to
        // follow them, so it appends an edit that replaces the whole view, and records
        // them; the next one appends a turn.
        let next = extended(loaded, 10);
        let revision = store.save(&next).expect("the first save: an edit");
        assert_eq!(entry_count(&schema, "from-0-1"), 1);
        let last = extended(next.with_revision(revision), 10);
        let revision = store.save(&last).expect("append");
        assert_eq!(entry_count(&schema, "from-0-1"), 2);
        assert_eq!(
            store.load(first.id()).expect("load"),
            last.with_revision(revision)
        );
        let kinds: Vec<_> = store
            .revisions(first.id())
            .expect("revisions")
            .iter()
            .map(|r| r.kind)
            .collect();
        assert_eq!(
            kinds,
            [EntryKind::Checkpoint, EntryKind::Edit, EntryKind::Turn]
        );
        store.migrate().expect("migrate again: nothing to do");
    }

    /// Tables of version 2 (before the log: entries hold records of journal format 1):
    /// `migrate` brings them to the current version, their records load as log entries, and later
    /// saves append entries of the current format after them.
    #[test]
    fn version_2_tables_are_upgraded_by_migrate_and_their_records_stay_history() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        let first = snapshot("from-v2", "first");
        store.save(&first).expect("save");
        let loaded = store.load(first.id()).expect("load");
        let next = extended(loaded.clone(), 10);
        // What the tables of version 2 held after one appended turn: a record of journal
        // format 1 (keep the first lengths, append), and no `format` column.
        let record = serde_json::json!({
            "revision": 2,
            "updated_at": next.updated_at(),
            "from": {"messages": 1, "tool_calls": 0, "usage": 0},
            "messages": serde_json::to_value(&next.transcript()[1..]).expect("messages"),
            "tool_calls": [],
            "usage": serde_json::to_value(next.usage()).expect("usage"),
        })
        .to_string();
        pg::execute(&format!(
            "ALTER TABLE \"{schema}\".entries DROP COLUMN format;
             {no_leases}
             UPDATE \"{schema}\".store_version SET version = 2;
             UPDATE \"{schema}\".sessions SET revision = 2, state_counts = '3,0,1',
                 updated_ns = {},
                 journal_bytes = {} WHERE id = 'from-v2';",
            next.updated_at().timestamp_nanos_opt().expect("nanos"),
            record.len(),
            no_leases = without_leases(&schema)
        ));
        pg::execute_with(
            &format!(
                "INSERT INTO \"{schema}\".entries (session_id, revision, record)
                 VALUES ('from-v2', 2, convert_to($1, 'UTF8'))"
            ),
            &[record.as_str()],
        );
        store.migrate().expect("upgrade");
        let stored = store.load(first.id()).expect("load after the upgrade");
        assert_eq!(stored, next.clone().with_revision(Revision::from_u64(2)));
        let last = extended(stored, 10);
        let revision = store.save(&last).expect("append after the record");
        assert_eq!(revision, Revision::from_u64(3));
        assert_eq!(
            store.load(first.id()).expect("load"),
            last.with_revision(revision)
        );
        assert_eq!(
            store
                .load_at(first.id(), Revision::from_u64(2))
                .expect("the record's revision"),
            next.with_revision(Revision::from_u64(2))
        );
        let formats = pg::query_text(&format!(
            "SELECT format::text FROM \"{schema}\".entries ORDER BY revision"
        ));
        assert_eq!(formats, ["1", "2"]);
    }

    /// What tables of version 3 lack: the lease table and the row's copy of the lease (and
    /// what version 4 lacks).
    fn without_leases(schema: &str) -> String {
        format!(
            "DROP TABLE \"{schema}\".leases;
             ALTER TABLE \"{schema}\".sessions DROP COLUMN lease_epoch;
             ALTER TABLE \"{schema}\".sessions DROP COLUMN lease_until_ns;
             {}",
            without_words(schema)
        )
    }

    /// What tables of version 4 lack: the words search reads, and their indexes.
    fn without_words(schema: &str) -> String {
        format!(
            "DROP TABLE \"{schema}\".checkpoint_words;
             ALTER TABLE IF EXISTS \"{schema}\".entries DROP COLUMN words;"
        )
    }

    /// Tables of version 6 from tables of the current version: the checkpoint's words in
    /// the session's row (`sessions.words`, with its indexes), no `checkpoint_words`.
    fn words_in_the_row(schema: &str) -> String {
        format!(
            "ALTER TABLE \"{schema}\".sessions ADD COLUMN words text;
             UPDATE \"{schema}\".sessions s SET words = w.words
               FROM \"{schema}\".checkpoint_words w WHERE w.session_id = s.id;
             DROP TABLE \"{schema}\".checkpoint_words;
             CREATE INDEX sessions_words
                 ON \"{schema}\".sessions USING gin (to_tsvector('simple', words));
             CREATE INDEX sessions_no_words ON \"{schema}\".sessions (id) WHERE words IS NULL;
             UPDATE \"{schema}\".store_version SET version = 6;"
        )
    }

    /// A trim folds the entries it drops into the checkpoint: the checkpoint's words are
    /// written again with it, so a word only a dropped entry held is still found.
    #[test]
    fn a_trim_writes_the_checkpoint_words_again() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        let first = snapshot("trimmed", "the start");
        store.save(&first).expect("save");
        let loaded = store.load(first.id()).expect("load");
        let later = loaded.updated_at() + Duration::seconds(1);
        let turn = loaded
            .with_appended(vec![Message::user("a zanzibar deadlock")], vec![], later)
            .expect("extend");
        let head = store.save(&turn).expect("append");
        let words = || {
            pg::query_text(&format!(
                "SELECT words FROM \"{schema}\".checkpoint_words WHERE session_id = 'trimmed'"
            ))
        };
        assert_eq!(words(), ["start the"], "an append leaves them");
        assert_eq!(store.trim_history(first.id(), head).expect("trim"), 1);
        assert_eq!(words(), ["a deadlock start the zanzibar"]);
        let query = agent_session::SearchQuery::new("zanzibar").expect("query");
        let found = store
            .search(&query, &agent_session::ListFilter::new(), 10, None)
            .expect("search");
        assert_eq!(found.hits.len(), 1);
    }

    /// Tables of version 6 (the checkpoint's words in the session's row, whose index every
    /// append made the server work out again): a whole write before `migrate` says to call
    /// it and writes nothing; `migrate` moves the words into `checkpoint_words` and drops the
    /// column; search finds a session by a word of its checkpoint only, appends and whole
    /// writes keep working, and a whole write records its checkpoint's new words.
    #[test]
    fn version_6_tables_move_the_checkpoint_words_out_of_the_row() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        let first = snapshot("from-v6", "the lock bug");
        store.save(&first).expect("save");
        let older = snapshot("before-v5", "an older lock bug");
        store.save(&older).expect("save");
        pg::execute(&words_in_the_row(&schema));
        // A row written before version 5: no words, so every search reads it.
        pg::execute(&format!(
            "UPDATE \"{schema}\".sessions SET words = NULL WHERE id = 'before-v5'"
        ));
        let err = store
            .save(&snapshot("new-on-v6", "nothing"))
            .expect_err("a whole write on version 6 tables");
        assert!(err.to_string().contains("migrate"), "{err}");
        assert!(store
            .load(&id("new-on-v6"))
            .is_err_and(|e| e.is_not_found()));

        store.migrate().expect("upgrade");
        assert_eq!(
            pg::query_text(&format!(
                "SELECT version::text FROM \"{schema}\".store_version"
            )),
            ["7"]
        );
        assert_eq!(
            pg::query_text(&format!(
                "SELECT session_id || ':' || COALESCE(words, 'NULL')
                   FROM \"{schema}\".checkpoint_words ORDER BY session_id"
            )),
            ["before-v5:NULL", "from-v6:bug lock the"]
        );
        assert_eq!(
            pg::query_text(&format!(
                "SELECT count(*)::text FROM information_schema.columns
                  WHERE table_schema = '{schema}' AND table_name = 'sessions'
                    AND column_name = 'words'"
            )),
            ["0"],
            "the row no longer holds the words"
        );
        let query = agent_session::SearchQuery::new("lock bug").expect("query");
        let all = agent_session::ListFilter::new();
        let found = store.search(&query, &all, 10, None).expect("search");
        let mut ids: Vec<&str> = found.hits.iter().map(|h| h.session.id.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["before-v5", "from-v6"]);

        // Appends (a built snapshot's edit too) leave the checkpoint's words alone; a whole
        // write (another session under the id) replaces them.
        let loaded = store.load(first.id()).expect("load");
        let appended = extended(loaded, 10);
        let revision = store.save(&appended).expect("append");
        let words_of = |name: &str| {
            pg::query_text(&format!(
                "SELECT words FROM \"{schema}\".checkpoint_words WHERE session_id = '{name}'"
            ))
        };
        assert_eq!(words_of("from-v6"), ["bug lock the"]);
        let replaced = SessionSnapshot::builder(id("from-v6"), "pg-model")
            .transcript(vec![Message::user("a deadlock instead")])
            .timestamps(at(-5_000), at(5))
            .build()
            .expect("build")
            .with_revision(revision);
        store.save(&replaced).expect("a whole write");
        assert_eq!(words_of("from-v6"), ["a deadlock instead"]);
        let found = store.search(&query, &all, 10, None).expect("search");
        assert_eq!(
            found.hits.len(),
            1,
            "only the row without words is left to match"
        );
        store.delete(first.id()).expect("delete");
        assert!(words_of("from-v6").is_empty(), "deleted with its session");
    }

    /// Tables of version 4 (before search's words): after `migrate`, their sessions are
    /// found by search all the same (rows without words are always read), and rows written
    /// since carry their words.
    #[test]
    fn version_4_tables_are_upgraded_by_migrate_and_their_sessions_are_found() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        let first = snapshot("from-v4", "the lock bug");
        store.save(&first).expect("save");
        let loaded = store.load(first.id()).expect("load");
        store.save(&extended(loaded, 10)).expect("append");
        pg::execute(&format!(
            "{}
             UPDATE \"{schema}\".store_version SET version = 4;",
            without_words(&schema)
        ));
        store.migrate().expect("upgrade");
        assert_eq!(
            pg::query_text(&format!(
                "SELECT count(*)::text FROM \"{schema}\".checkpoint_words WHERE words IS NULL"
            )),
            ["1"],
            "rows of version 4 have no words"
        );
        let query = agent_session::SearchQuery::new("lock bug").expect("query");
        let all = agent_session::ListFilter::new();
        let found = store.search(&query, &all, 10, None).expect("search");
        assert_eq!(found.hits.len(), 1, "found through its row without words");
        assert_eq!(found.hits[0].messages[0].position, 0);

        let other = snapshot("after-v4", "nothing to see");
        store.save(&other).expect("save");
        assert_eq!(
            pg::query_text(&format!(
                "SELECT words FROM \"{schema}\".checkpoint_words WHERE session_id = 'after-v4'"
            )),
            ["nothing see to"]
        );
        let found = store.search(&query, &all, 10, None).expect("search");
        assert_eq!(found.hits.len(), 1);
    }

    /// Tables of version 3 (before leases): their sessions load, a save says to call
    /// `migrate` (and writes nothing), and after it the sessions save, lease and are fenced.
    #[test]
    fn version_3_tables_are_upgraded_by_migrate_and_their_sessions_lease() {
        let schemas = Schemas::new();
        let store = schemas.store();
        let schema = store.schema().to_owned();
        let first = snapshot("from-v3", "first");
        store.save(&first).expect("save");
        pg::execute(&format!(
            "{}
             UPDATE \"{schema}\".store_version SET version = 3;",
            without_leases(&schema)
        ));
        let loaded = store.load(first.id()).expect("a load needs no lease table");
        let err = store
            .save(&extended(loaded.clone(), 10))
            .expect_err("a save on tables of version 3");
        assert!(
            err.to_string().contains("PostgresSessionStore::migrate"),
            "{err}"
        );
        assert_eq!(
            store.load(first.id()).expect("load"),
            loaded,
            "nothing written"
        );

        store.migrate().expect("upgrade");
        assert_eq!(
            pg::query_text(&format!(
                "SELECT version::text FROM \"{schema}\".store_version"
            )),
            ["7"]
        );
        let request = agent_session::LeaseRequest::new(agent_session::LeaseHolder::this_process(
            "after the upgrade",
        ));
        let lease = store.acquire_lease(first.id(), &request).expect("lease");
        assert_eq!(lease.epoch, 1);
        let revision = store
            .save(&extended(loaded.clone(), 10).with_lease(&lease))
            .expect("the holder saves");
        assert_eq!(revision, Revision::from_u64(2));
        let taken = store
            .acquire_lease(first.id(), &request.clone().take_over(true))
            .expect("take over");
        let stale = store.load(first.id()).expect("load");
        assert!(matches!(
            store.save(&extended(stale, 20).with_lease(&lease)),
            Err(Error::Fenced { .. })
        ));
        store.release_lease(&taken).expect("release");
    }
}
