//! TLS for [`PostgresSessionStore`](super::PostgresSessionStore) (feature `postgres`): the
//! builder's trust settings, the rustls connector the connection pool uses, and the hint
//! that turns a refused server certificate into an error that says what to do.
//!
//! What the connection string's `sslmode` means here:
//!
//! - `disable`: clear text, as before TLS was supported.
//! - `prefer` (the default, as in libpq): TLS whenever the server offers it, verified exactly
//!   as with `require`; clear text only with a server that does not offer TLS at all. A
//!   server that offers TLS with a certificate that is not trusted is refused, never used in
//!   clear text instead: falling back silently would send the sessions in clear text exactly
//!   when something is wrong.
//! - `require`: TLS or no connection, verified.
//!
//! Verification is always the full one (libpq's `verify-full`): the certificate chain up to
//! a trusted root, and the host name or IP address of `host=` against the certificate.
//! There is no switch to accept a certificate that fails either check.

use std::error::Error as StdError;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{CertificateError, RootCertStore};
use tokio_postgres::config::SslMode;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::PostgresStoreBuilder;
use crate::error::{Error, Result};

/// The trust roots a [`PostgresStoreBuilder`] was given: PEM certificates, given as bytes or
/// as files read when the store is made. None given: the Mozilla roots of `webpki-roots`.
#[derive(Clone, Default)]
pub(super) struct TlsSettings {
    roots: Vec<RootSource>,
}

/// Where some trusted root certificates come from.
#[derive(Clone)]
enum RootSource {
    Pem(Vec<u8>),
    File(PathBuf),
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the PEM bytes themselves: they would fill the output.
        let mut roots = f.debug_list();
        for root in &self.roots {
            match root {
                RootSource::Pem(pem) => roots.entry(&format_args!("<{} bytes of PEM>", pem.len())),
                RootSource::File(path) => roots.entry(path),
            };
        }
        roots.finish()
    }
}

impl PostgresStoreBuilder {
    /// Trusts the CA certificates in `pem` (one or more `-----BEGIN CERTIFICATE-----`
    /// blocks) to sign the server's TLS certificate: for a server whose certificate comes
    /// from a private or self-signed CA. May be called more than once, and combined with
    /// [`tls_root_certificates_file`](Self::tls_root_certificates_file); the certificates
    /// given *replace* the default roots (the Mozilla roots compiled into `webpki-roots`),
    /// as libpq's `sslrootcert` does.
    ///
    /// Whatever the roots, the server's certificate must also name the host the connection
    /// string's `host=` gives (a DNS name or an IP address): there is no way to turn either
    /// check off. The connection string's `sslmode` decides whether TLS is used; see
    /// [`PostgresSessionStore`](crate::PostgresSessionStore#tls).
    ///
    /// The PEM is checked by [`connect`](Self::connect), which fails with
    /// [`Error::InvalidArgument`] if it holds no certificate or a malformed one (unless
    /// `sslmode=disable`, which uses no certificate).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use agent_session::PostgresSessionStore;
    ///
    /// let ca = std::fs::read("/etc/my-app/postgres-ca.pem")?;
    /// let store = PostgresSessionStore::builder()
    ///     .tls_root_certificates_pem(ca)
    ///     .connect("host=db.internal user=app dbname=app sslmode=require")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tls_root_certificates_pem(&mut self, pem: impl Into<Vec<u8>>) -> &mut Self {
        self.tls.roots.push(RootSource::Pem(pem.into()));
        self
    }

    /// Trusts the CA certificates in the PEM file at `path`, read by
    /// [`connect`](Self::connect); otherwise as
    /// [`tls_root_certificates_pem`](Self::tls_root_certificates_pem), which says what the
    /// certificates replace and what is checked.
    ///
    /// [`connect`](Self::connect) fails with [`Error::InvalidArgument`] if the file cannot
    /// be read, or holds no certificate or a malformed one (unless `sslmode=disable`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use agent_session::PostgresSessionStore;
    ///
    /// let store = PostgresSessionStore::builder()
    ///     .tls_root_certificates_file("/etc/my-app/postgres-ca.pem")
    ///     .connect("postgresql://app@db.internal/app?sslmode=require")?;
    /// # Ok::<(), agent_session::Error>(())
    /// ```
    pub fn tls_root_certificates_file(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.tls.roots.push(RootSource::File(path.into()));
        self
    }
}

/// The pool's connection manager for `config`: clear text for `sslmode=disable`, otherwise
/// the rustls connector with `settings`' roots (TLS when the server offers it for `prefer`,
/// always for `require`; tokio-postgres decides from the mode).
pub(super) fn manager(
    config: tokio_postgres::Config,
    settings: &TlsSettings,
    manager_config: ManagerConfig,
) -> Result<Manager> {
    // SslMode is non-exhaustive: a mode added later gets verified TLS, never clear text.
    if config.get_ssl_mode() == SslMode::Disable {
        return Ok(Manager::from_config(config, NoTls, manager_config));
    }
    let connector = settings.connector()?;
    Ok(Manager::from_config(config, connector, manager_config))
}

impl TlsSettings {
    /// The connector: the trusted roots, rustls' safe defaults (TLS 1.2 and 1.3) with the
    /// `ring` provider, and ALPN `postgresql` (which PostgreSQL 17's direct TLS
    /// negotiation, `sslnegotiation=direct`, requires; older servers ignore it).
    fn connector(&self) -> Result<MakeRustlsConnect> {
        let roots = self.root_store()?;
        // Named, not the process-wide default provider: that may be unset, or ambiguous
        // when another crate enables a second one.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Backend {
                operation: "set up TLS for PostgreSQL".to_owned(),
                source: Box::new(e),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(MakeRustlsConnect::new(config))
    }

    /// The roots given, or the `webpki-roots` ones if none were.
    fn root_store(&self) -> Result<RootCertStore> {
        if self.roots.is_empty() {
            return Ok(RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            });
        }
        let mut store = RootCertStore::empty();
        for source in &self.roots {
            let (pem, origin) = match source {
                RootSource::Pem(pem) => (
                    std::borrow::Cow::Borrowed(pem.as_slice()),
                    "the PEM given to PostgresStoreBuilder::tls_root_certificates_pem".to_owned(),
                ),
                RootSource::File(path) => {
                    let bytes = std::fs::read(path).map_err(|e| Error::InvalidArgument {
                        reason: format!(
                            "could not read the PostgreSQL TLS root certificates file {} ({e})",
                            path.display()
                        ),
                    })?;
                    (
                        std::borrow::Cow::Owned(bytes),
                        format!("{}", path.display()),
                    )
                }
            };
            add_pem(&mut store, &pem, &origin)?;
        }
        Ok(store)
    }
}

/// Adds every certificate in `pem` to `store`; `origin` names where the PEM came from.
fn add_pem(store: &mut RootCertStore, pem: &[u8], origin: &str) -> Result<()> {
    let invalid = |problem: String| Error::InvalidArgument {
        reason: format!("{origin} is not usable as TLS root certificates: {problem}"),
    };
    let mut added = 0_usize;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        let certificate = certificate.map_err(|e| invalid(format!("malformed PEM ({e})")))?;
        store
            .add(certificate)
            .map_err(|e| invalid(format!("a certificate in it cannot be used ({e})")))?;
        added += 1;
    }
    if added == 0 {
        return Err(invalid(
            "it holds no \"-----BEGIN CERTIFICATE-----\" block".to_owned(),
        ));
    }
    Ok(())
}

/// What to tell the user when `error` (or an error it was caused by) is a TLS handshake
/// that refused the server's certificate; `None` for any other error.
pub(super) fn certificate_hint(error: &(dyn StdError + 'static)) -> Option<String> {
    const PASS_CA: &str = "if the server's certificate comes from a private or self-signed CA, trust that CA with PostgresStoreBuilder::tls_root_certificates_file (or tls_root_certificates_pem)";
    let problem = certificate_error(error)?;
    let hint = match problem {
        CertificateError::UnknownIssuer => format!(
            "the server's TLS certificate was not trusted (it is not signed by a trusted certificate authority): {PASS_CA}"
        ),
        CertificateError::NotValidForNameContext { expected, presented } => format!(
            "the server's TLS certificate was not trusted: it is for {}, not for the host this store connects to ({}); connect with a host name or address the certificate holds (host= in the connection string), or give the server a certificate for this one",
            if presented.is_empty() {
                "no host name".to_owned()
            } else {
                presented.iter().map(|name| bare_name(name)).collect::<Vec<_>>().join(", ")
            },
            expected.to_str(),
        ),
        CertificateError::NotValidForName => {
            "the server's TLS certificate was not trusted: it does not name the host this store connects to; connect with a host name or address the certificate holds (host= in the connection string), or give the server a certificate for this one".to_owned()
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "the server's TLS certificate was not trusted: it has expired; renew the server's certificate (or check this machine's clock)".to_owned()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "the server's TLS certificate was not trusted: it is not valid yet; check this machine's clock".to_owned()
        }
        other => format!(
            "the server's TLS certificate was not trusted ({other}): {PASS_CA}, and check the host name in the connection string"
        ),
    };
    Some(hint)
}

/// A name as rustls presents it (`DnsName("db.example")`, `IpAddress(10.0.0.1)`), bare.
fn bare_name(presented: &str) -> &str {
    presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .map_or(presented, |inner| inner.trim_matches('"'))
}

/// The certificate problem a rustls handshake reported somewhere in `error`'s chain.
fn certificate_error<'e>(error: &'e (dyn StdError + 'static)) -> Option<&'e CertificateError> {
    let mut next = Some(error);
    while let Some(error) = next {
        // tokio-rustls reports a handshake failure as an io::Error wrapping rustls' error;
        // io::Error's `source` skips the wrapped error, so look inside it.
        let inner = error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn StdError + 'static));
        for candidate in [Some(error), inner].into_iter().flatten() {
            if let Some(rustls::Error::InvalidCertificate(problem)) =
                candidate.downcast_ref::<rustls::Error>()
            {
                return Some(problem);
            }
        }
        next = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA certificate (`openssl req -x509`, P-256, valid until 2126).
    const CA: &str = "-----BEGIN CERTIFICATE-----
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

    /// The same certificate cut short.
    const MALFORMED: &str = "-----BEGIN CERTIFICATE-----
MIIBujCCAWGgAwIBAgIUHB+hW6xCG2B+X75viky5szAAiL4wCgYIKoZIzj0EAwIw
-----END CERTIFICATE-----
";

    fn roots(sources: Vec<RootSource>) -> Result<RootCertStore> {
        TlsSettings { roots: sources }.root_store()
    }

    #[test]
    fn default_roots_are_webpki_roots() {
        let store = roots(Vec::new()).expect("default roots");
        assert_eq!(store.len(), webpki_roots::TLS_SERVER_ROOTS.len());
    }

    #[test]
    fn pem_without_certificates_is_refused() {
        let error = roots(vec![RootSource::Pem(b"not a certificate".to_vec())])
            .expect_err("no certificate");
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
        assert!(error.to_string().contains("BEGIN CERTIFICATE"), "{error}");
    }

    #[test]
    fn malformed_certificate_is_refused() {
        let error =
            roots(vec![RootSource::Pem(MALFORMED.as_bytes().to_vec())]).expect_err("malformed");
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
    }

    #[test]
    fn given_roots_replace_the_default_ones() {
        let store = roots(vec![
            RootSource::Pem(CA.as_bytes().to_vec()),
            RootSource::Pem(format!("{CA}{CA}").into_bytes()),
        ])
        .expect("three copies of one CA");
        assert_eq!(store.len(), 3);
    }

    #[test]
    fn missing_file_is_refused_naming_it() {
        let path = PathBuf::from("/nonexistent/agent-session-ca.pem");
        let error = roots(vec![RootSource::File(path)]).expect_err("missing file");
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error:?}");
        assert!(
            error.to_string().contains("agent-session-ca.pem"),
            "{error}"
        );
    }

    #[test]
    fn hint_found_inside_an_io_error() {
        let handshake = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let hint = certificate_hint(&handshake).expect("a hint");
        assert!(hint.contains("not trusted"), "{hint}");
        assert!(hint.contains("tls_root_certificates_file"), "{hint}");

        let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        let hint = certificate_hint(&name).expect("a hint");
        assert!(hint.contains("host"), "{hint}");

        let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: rustls::pki_types::ServerName::try_from("db.invalid").expect("a name"),
            presented: vec![
                "DnsName(\"localhost\")".to_owned(),
                "IpAddress(127.0.0.1)".to_owned(),
            ],
        });
        let hint = certificate_hint(&name).expect("a hint");
        assert!(
            hint.contains("it is for localhost, 127.0.0.1, not"),
            "{hint}"
        );
        assert!(hint.contains("(db.invalid)"), "{hint}");

        let other = std::io::Error::other("connection refused");
        assert!(certificate_hint(&other).is_none());
    }

    #[test]
    fn debug_does_not_print_pem_bytes() {
        let settings = TlsSettings {
            roots: vec![RootSource::Pem(vec![b'x'; 1000])],
        };
        assert_eq!(format!("{settings:?}"), "[<1000 bytes of PEM>]");
    }
}
