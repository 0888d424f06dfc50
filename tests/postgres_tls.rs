//! `PostgresSessionStore` over TLS (feature `postgres`), against the test server that
//! `scripts/test` starts (`scripts/postgres-server.sh`): it accepts TLS with a certificate
//! for `localhost` and 127.0.0.1 signed by a throw-away CA, whose PEM file is named by
//! `AGENT_SESSION_POSTGRES_CA`. `AGENT_SESSION_POSTGRES_URL` says `sslmode=disable`; these
//! tests put the `sslmode` they test after it (a later key wins).
//!
//! Whether a connection really is TLS is asked of the server (`pg_stat_ssl`), on a separate
//! clear-text connection, for the store's connections found by their `application_name`.

#[cfg(not(feature = "postgres"))]
#[test]
fn postgres_tls_tests_need_the_postgres_feature() {
    eprintln!(
        "skipped: the PostgreSQL TLS tests need the `postgres` feature; run scripts/test \
         (cargo test --all-features against a throw-away server it starts)"
    );
}

#[cfg(feature = "postgres")]
#[path = "common/postgres.rs"]
mod pg;

#[cfg(feature = "postgres")]
mod postgres_tls {
    use agent_session::{
        Error, Message, PostgresSessionStore, PostgresStoreBuilder, SessionId, SessionSnapshot,
        SessionStore,
    };

    use super::pg::{self, Schemas};

    /// The environment variable naming the PEM file of the test server's CA.
    const CA_ENV: &str = "AGENT_SESSION_POSTGRES_CA";

    /// A CA that signed nothing the test server holds (made once with `openssl req -x509`,
    /// P-256, valid until 2126; its key was thrown away). Not a file in tests/fixtures/,
    /// which holds only snapshot fixtures, one folder per schema version.
    const UNRELATED_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBujCCAWGgAwIBAgIUHB+hW6xCG2B+X75viky5szAAiL4wCgYIKoZIzj0EAwIw
KjEoMCYGA1UEAwwfYWdlbnQtc2Vzc2lvbiB1bnJlbGF0ZWQgdGVzdCBDQTAgFw0y
NjEyMDIwNTM2MzhaGA8yMTI2MTEwODA1MzYzOFowKjEoMCYGA1UEAwwfYWdlbnQt
c2Vzc2lvbiB1bnJlbGF0ZWQgdGVzdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEH
A0IABPb2zVjIB+uNKMZ6QBlBh89VQtDwEXJApjrPuNW/I5OlMYj3l6Z+mLRl5fgS
4xlzZvtSylJXk+jpkiLmIZ3nw5ujYzBhMB0GA1UdDgQWBBTkd7qxO8zlcvTy894S
/PkjO0L9iDAfBgNVHSMEGDAWgBTkd7qxO8zlcvTy894S/PkjO0L9iDAPBgNVHRMB
Af8EBTADAQH/MA4GA1UdDwEB/wQEAwIBBjAKBggqhkjOPQQDAgNHADBEAiAugjVL
LFIGNgZZyZ7qTpvJPXRgSYyk66lAlRmIjgkt/wIgSgDlk2cCzqX6Ry6wudM2l8Z0
ZH6QwN3a9o18K3bgj54=
-----END CERTIFICATE-----
";

    /// The test server's CA file, from [`CA_ENV`]; panics saying how to get one.
    fn ca_path() -> String {
        // The server first: without it, that is the message to see.
        let _ = pg::url();
        match std::env::var(CA_ENV) {
            Ok(path) if !path.trim().is_empty() => path,
            _ => panic!(
                "the PostgreSQL TLS tests need the test server's CA: run scripts/test, which \
                 starts a server that accepts TLS and sets {CA_ENV} to its CA's PEM file \
                 (with AGENT_SESSION_POSTGRES_URL set by hand, set {CA_ENV} too; \
                 openssl must be installed for scripts/test to make the certificate)"
            ),
        }
    }

    /// The test server's connection string with `settings` (`key=value` pairs) after it,
    /// so that they override its own.
    fn url_with(settings: &[(&str, &str)]) -> String {
        let mut url = pg::url().trim().to_owned();
        let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
        for (key, value) in settings {
            let separator = match (is_url, url.contains('?')) {
                (false, _) => ' ',
                (true, true) => '&',
                (true, false) => '?',
            };
            url = format!("{url}{separator}{key}={value}");
        }
        url
    }

    /// The test server's connection string with the name `host` in place of its host
    /// (`hostaddr` keeps it reaching the same server), then `settings`: for checking the
    /// host name against the certificate. (A later `host=` would add a host, not replace
    /// it.)
    fn url_naming(host: &str, settings: &[(&str, &str)]) -> String {
        use std::fmt::Write as _;
        let config: tokio_postgres::Config = pg::url().parse().expect("the test server's URL");
        let address = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host))
                if host.parse::<std::net::IpAddr>().is_ok() =>
            {
                host.clone()
            }
            _ => "127.0.0.1".to_owned(),
        };
        let mut url = format!("host={host} hostaddr={address}");
        if let Some(port) = config.get_ports().first() {
            let _ = write!(url, " port={port}");
        }
        if let Some(user) = config.get_user() {
            let _ = write!(url, " user={user}");
        }
        if let Some(dbname) = config.get_dbname() {
            let _ = write!(url, " dbname={dbname}");
        }
        for (key, value) in settings {
            let _ = write!(url, " {key}={value}");
        }
        url
    }

    /// A store on a fresh schema with `builder`'s TLS settings, its connections named
    /// after the schema; returns the store and the schema (the application name).
    fn store(
        schemas: &Schemas,
        builder: &PostgresStoreBuilder,
        settings: &[(&str, &str)],
    ) -> (Result<PostgresSessionStore, Error>, String) {
        store_named(schemas, builder, None, settings)
    }

    /// [`store`], reaching the server by the name `host` if given ([`url_naming`]).
    fn store_named(
        schemas: &Schemas,
        builder: &PostgresStoreBuilder,
        host: Option<&str>,
        settings: &[(&str, &str)],
    ) -> (Result<PostgresSessionStore, Error>, String) {
        let schema = schemas.name();
        let mut settings = settings.to_vec();
        settings.push(("application_name", &schema));
        let url = match host {
            Some(host) => url_naming(host, &settings),
            None => url_with(&settings),
        };
        let store = builder.clone().schema(&schema).connect(&url);
        (store, schema)
    }

    /// Saves and loads a session through `store` (migrating first).
    fn round_trip(store: &PostgresSessionStore) -> Result<(), Error> {
        store.migrate()?;
        let snapshot = SessionSnapshot::builder(SessionId::parse("tls-1")?, "model")
            .transcript(vec![Message::user("over TLS")])
            .build()?;
        let revision = store.save(&snapshot)?;
        let loaded = store.load(snapshot.id())?;
        assert_eq!(loaded.revision(), revision);
        assert_eq!(loaded.transcript(), snapshot.transcript());
        Ok(())
    }

    /// What the server says of each open connection named `application_name`: whether it
    /// uses TLS ("true" or "false").
    fn ssl_of(application_name: &str) -> Vec<String> {
        pg::query_text(&format!(
            "SELECT s.ssl::text FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = '{application_name}'"
        ))
    }

    /// Asserts that the store's connections (there is one at least, kept by its pool) use
    /// TLS, or do not.
    fn assert_tls(application_name: &str, expected: bool) {
        let found = ssl_of(application_name);
        assert!(
            !found.is_empty(),
            "no connection named {application_name} on the server"
        );
        assert!(
            found.iter().all(|ssl| ssl == &expected.to_string()),
            "connections of {application_name}: ssl {found:?}, expected {expected}"
        );
    }

    /// Asserts that `outcome` is the refusal of the server's certificate, with a message
    /// that says so and mentions `advice`.
    fn assert_untrusted(outcome: Result<(), Error>, advice: &str) {
        let error = outcome.expect_err("the server's certificate should be refused");
        assert!(matches!(error, Error::Backend { .. }), "{error:?}");
        let message = error.to_string();
        eprintln!("refused as expected: {message}");
        assert!(
            message.contains("the server's TLS certificate was not trusted"),
            "{message}"
        );
        assert!(message.contains(advice), "{message}");
    }

    #[test]
    fn require_with_the_servers_ca_uses_verified_tls() {
        let schemas = Schemas::new();
        let (store, name) = store(
            &schemas,
            PostgresSessionStore::builder().tls_root_certificates_file(ca_path()),
            &[("sslmode", "require")],
        );
        let store = store.expect("connect");
        round_trip(&store).expect("save and load over TLS");
        assert_tls(&name, true);
    }

    #[test]
    fn the_ca_may_be_given_as_pem_bytes() {
        let pem = std::fs::read(ca_path()).expect("read the test CA");
        let schemas = Schemas::new();
        let (store, name) = store(
            &schemas,
            PostgresSessionStore::builder()
                // An unrelated CA beside the right one does no harm.
                .tls_root_certificates_pem(UNRELATED_CA)
                .tls_root_certificates_pem(pem),
            &[("sslmode", "require")],
        );
        let store = store.expect("connect");
        round_trip(&store).expect("save and load over TLS");
        assert_tls(&name, true);
    }

    #[test]
    fn a_dns_name_in_the_certificate_is_accepted() {
        // hostaddr: connect to 127.0.0.1, check the certificate for the name localhost.
        let schemas = Schemas::new();
        let (store, name) = store_named(
            &schemas,
            PostgresSessionStore::builder().tls_root_certificates_file(ca_path()),
            Some("localhost"),
            &[("sslmode", "require")],
        );
        // Kept until the server is asked: dropping it closes its connections.
        let store = store.expect("connect");
        round_trip(&store).expect("save and load over TLS");
        assert_tls(&name, true);
    }

    #[test]
    fn prefer_uses_verified_tls_when_the_server_offers_it() {
        let schemas = Schemas::new();
        let (store, name) = store(
            &schemas,
            PostgresSessionStore::builder().tls_root_certificates_file(ca_path()),
            &[("sslmode", "prefer")],
        );
        // Kept until the server is asked: dropping it closes its connections.
        let store = store.expect("connect");
        round_trip(&store).expect("save and load over TLS");
        assert_tls(&name, true);
    }

    #[test]
    fn default_roots_refuse_a_private_ca() {
        let _ = ca_path();
        let schemas = Schemas::new();
        let (store, name) = store(
            &schemas,
            &PostgresSessionStore::builder(),
            &[("sslmode", "require")],
        );
        assert_untrusted(
            round_trip(&store.expect("connect")),
            "tls_root_certificates_file",
        );
        assert!(
            ssl_of(&name).is_empty(),
            "a refused store kept a connection"
        );
    }

    #[test]
    fn prefer_refuses_an_untrusted_certificate_rather_than_use_clear_text() {
        let _ = ca_path();
        let schemas = Schemas::new();
        let (store, name) = store(
            &schemas,
            &PostgresSessionStore::builder(),
            &[("sslmode", "prefer")],
        );
        assert_untrusted(
            round_trip(&store.expect("connect")),
            "tls_root_certificates_file",
        );
        assert!(
            ssl_of(&name).is_empty(),
            "a refused store kept a connection"
        );
    }

    #[test]
    fn an_unrelated_ca_is_refused() {
        let _ = ca_path();
        let schemas = Schemas::new();
        let (store, _) = store(
            &schemas,
            PostgresSessionStore::builder().tls_root_certificates_pem(UNRELATED_CA),
            &[("sslmode", "require")],
        );
        assert_untrusted(
            round_trip(&store.expect("connect")),
            "tls_root_certificates_file",
        );
    }

    #[test]
    fn a_host_name_the_certificate_does_not_hold_is_refused() {
        // The right CA, the right server (hostaddr), but a name the certificate lacks.
        let schemas = Schemas::new();
        let (store, _) = store_named(
            &schemas,
            PostgresSessionStore::builder().tls_root_certificates_file(ca_path()),
            Some("db.invalid"),
            &[("sslmode", "require")],
        );
        assert_untrusted(round_trip(&store.expect("connect")), "db.invalid");
    }

    #[test]
    fn disable_still_uses_clear_text() {
        let schemas = Schemas::new();
        // The CA is not even read with sslmode=disable.
        let (store, name) = store(
            &schemas,
            PostgresSessionStore::builder().tls_root_certificates_file("/nonexistent/ca.pem"),
            &[("sslmode", "disable")],
        );
        let store = store.expect("connect");
        round_trip(&store).expect("save and load in clear text");
        assert_tls(&name, false);
    }

    #[test]
    fn an_unreadable_ca_file_is_an_invalid_argument() {
        let schemas = Schemas::new();
        let (store, _) = store(
            &schemas,
            PostgresSessionStore::builder().tls_root_certificates_file("/nonexistent/ca.pem"),
            &[("sslmode", "require")],
        );
        let error = store.expect_err("the CA file does not exist");
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }
}
