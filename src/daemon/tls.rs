//! HTTPS for the listener (webhook, /metrics, probes): the certificate, its
//! reload and the rustls settings. `server::serve` accepts the connections,
//! plain or TLS, with the same limits.

use crate::config::TlsConfig;
use crate::sync::RwLockExt;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Why the TLS settings cannot be used. Messages name the config field and
/// the file, never file contents (the key is a secret).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("`{field}` {path}: cannot read: {source}")]
    Read {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{field}` {path}: {reason}")]
    Pem {
        field: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("`tls.cert_file` and `tls.key_file` cannot be used together: {0}")]
    Rejected(#[source] rustls::Error),
}

impl TlsError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::Pem { .. } => "pem",
            Self::Rejected(_) => "rejected",
        }
    }
}

const CERT_FIELD: &str = "tls.cert_file";
const KEY_FIELD: &str = "tls.key_file";

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        field,
        path: path.to_path_buf(),
        source,
    })
}

fn pem_error(field: &'static str, path: &Path, what: &str, e: pem::Error) -> TlsError {
    let reason = match e {
        pem::Error::NoItemsFound => format!("contains no PEM {what}"),
        e => format!("not valid PEM: {e}"),
    };
    TlsError::Pem {
        field,
        path: path.to_path_buf(),
        reason,
    }
}

/// The two files as read, with a digest of their contents.
struct Files {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    digest: u64,
}

fn read_files(cfg: &TlsConfig) -> Result<Files, TlsError> {
    let cert_pem = read(CERT_FIELD, &cfg.cert_file)?;
    let key_pem = read(KEY_FIELD, &cfg.key_file)?;
    let mut h = DefaultHasher::new();
    cert_pem.hash(&mut h);
    key_pem.hash(&mut h);
    Ok(Files {
        digest: h.finish(),
        cert_pem,
        key_pem,
    })
}

/// Checks the certificate chain and key, so that a bad file stops startup
/// with the reason rather than failing every handshake later.
fn parse_pair(
    cfg: &TlsConfig,
    provider: &CryptoProvider,
    files: Files,
) -> Result<Loaded, TlsError> {
    let Files {
        cert_pem,
        key_pem,
        digest,
    } = files;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(CERT_FIELD, &cfg.cert_file, "certificate", e))?;
    if certs.is_empty() {
        return Err(pem_error(
            CERT_FIELD,
            &cfg.cert_file,
            "certificate",
            pem::Error::NoItemsFound,
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        pem_error(
            KEY_FIELD,
            &cfg.key_file,
            "private key (PKCS#8, PKCS#1 or SEC1)",
            e,
        )
    })?;
    let (not_before, not_after) = validity_period(&certs[0]);
    // Also checks that the key belongs to the leaf certificate.
    let key = CertifiedKey::from_der(certs, key, provider).map_err(TlsError::Rejected)?;
    Ok(Loaded {
        key: Arc::new(key),
        digest,
        not_before,
        not_after,
    })
}

/// The leaf's notBefore and notAfter as Unix seconds; `None` if it does not
/// parse (rustls accepted it, so it is served anyway; the metrics then say 0).
fn validity_period(leaf: &CertificateDer<'_>) -> (Option<i64>, Option<i64>) {
    match x509_parser::parse_x509_certificate(leaf.as_ref()) {
        Ok((_, c)) => (
            Some(c.validity().not_before.timestamp()),
            Some(c.validity().not_after.timestamp()),
        ),
        Err(_) => (None, None),
    }
}

/// Warn this long before the certificate expires: cert-manager renews a
/// 90-day certificate 30 days ahead, so 7 days left means the renewal or its
/// reload did not happen (as the RemedyTLSCertificateExpiringSoon alert).
pub const EXPIRY_WARNING_SECONDS: i64 = 7 * 86_400;

/// Where now falls in the served certificate's validity period. rustls
/// serves whatever it is given; clients refuse an expired or not yet valid
/// certificate, so Prometheus scrapes and Alertmanager deliveries fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    Valid,
    /// Valid, but expires within `EXPIRY_WARNING_SECONDS`.
    ExpiresSoon,
    Expired,
    NotYetValid,
    /// The dates did not parse.
    Unknown,
}

impl Validity {
    pub fn label(self) -> &'static str {
        match self {
            Self::Valid => "valid",
            Self::ExpiresSoon => "expires_soon",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::Unknown => "unknown",
        }
    }

    /// Worth a warning in the log.
    pub fn is_problem(self) -> bool {
        self != Self::Valid
    }
}

/// Pure: `now` and the period in Unix seconds. notAfter is the last valid
/// second (RFC 5280 4.1.2.5: "through").
pub fn validity(not_before: Option<i64>, not_after: Option<i64>, now: i64) -> Validity {
    let (Some(nb), Some(na)) = (not_before, not_after) else {
        return Validity::Unknown;
    };
    if now < nb {
        Validity::NotYetValid
    } else if now > na {
        Validity::Expired
    } else if na - now < EXPIRY_WARNING_SECONDS {
        Validity::ExpiresSoon
    } else {
        Validity::Valid
    }
}

struct Loaded {
    key: Arc<CertifiedKey>,
    /// Of the file contents, to see a renewal without keeping the key twice.
    digest: u64,
    not_before: Option<i64>,
    not_after: Option<i64>,
}

/// The certificate being served, re-read from its files by [`reload`]
/// (cert-manager renews into the mounted Secret, kubelet swaps the files; a
/// restart is not needed). A failed re-read keeps the certificate that works.
///
/// [`reload`]: CertStore::reload
pub struct CertStore {
    cfg: TlsConfig,
    provider: Arc<CryptoProvider>,
    current: RwLock<Loaded>,
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertStore").field("cfg", &self.cfg).finish()
    }
}

impl CertStore {
    /// Re-reads the files; `Ok(true)` when a new certificate is now served,
    /// `Ok(false)` when the files did not change. On error nothing changes.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let files = read_files(&self.cfg)?;
        let unchanged = {
            let current = self.current.read_locked();
            current.digest == files.digest
        };
        // Unchanged files are not parsed again: the common case every 30 s.
        // A pair that failed to load differs from the one served, so it is
        // parsed (and counted as an error) on every attempt.
        if unchanged {
            return Ok(false);
        }
        let loaded = parse_pair(&self.cfg, &self.provider, files)?;
        *self.current.write_locked() = loaded;
        Ok(true)
    }

    /// When the served certificate expires (Unix seconds).
    pub fn not_after(&self) -> Option<i64> {
        self.current.read_locked().not_after
    }

    /// When the served certificate becomes valid (Unix seconds).
    pub fn not_before(&self) -> Option<i64> {
        self.current.read_locked().not_before
    }

    /// Where `now` (Unix seconds) falls in the served certificate's period.
    #[cfg(test)]
    pub fn validity(&self, now: i64) -> Validity {
        let current = self.current.read_locked();
        validity(current.not_before, current.not_after, now)
    }

    /// The leaf certificate being served (DER).
    #[cfg(test)]
    pub fn leaf(&self) -> Vec<u8> {
        let current = self.current.read_locked();
        current
            .key
            .end_entity_cert()
            .map(|c| c.to_vec())
            .unwrap_or_default()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read_locked();
        Some(current.key.clone())
    }
}

/// The listener's TLS settings and the store its certificate comes from.
#[derive(Debug)]
pub struct Tls {
    pub config: Arc<ServerConfig>,
    pub certs: Arc<CertStore>,
}

/// Loads the certificate and key (a bad file stops startup with the reason
/// rather than failing every handshake later) and builds the server config.
pub fn load(cfg: &TlsConfig) -> Result<Tls, TlsError> {
    // ring, the provider kube's client already links; naming it explicitly
    // avoids depending on a process-wide default being installed.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let loaded = parse_pair(cfg, &provider, read_files(cfg)?)?;
    let certs = Arc::new(CertStore {
        cfg: cfg.clone(),
        provider: provider.clone(),
        current: RwLock::new(loaded),
    });
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rejected)?
        .with_no_client_auth()
        .with_cert_resolver(certs.clone());
    // Only HTTP/1 is served; saying so lets h2-preferring clients fall back.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        config: Arc::new(config),
        certs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dir: &Path) -> TlsConfig {
        TlsConfig {
            cert_file: dir.join("tls.crt"),
            key_file: dir.join("tls.key"),
        }
    }

    fn self_signed() -> rcgen::CertifiedKey<rcgen::KeyPair> {
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("rcgen")
    }

    #[test]
    fn loads_a_matching_pair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = cfg(dir.path());
        let ck = self_signed();
        std::fs::write(&c.cert_file, ck.cert.pem()).expect("write");
        std::fs::write(&c.key_file, ck.signing_key.serialize_pem()).expect("write");
        let tls = load(&c).expect("valid pair");
        assert_eq!(tls.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(tls.certs.leaf(), ck.cert.der().to_vec());
    }

    #[test]
    fn the_served_certificates_expiry_is_known() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = cfg(dir.path());
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.not_after = rcgen::date_time_ymd(2030, 6, 1);
        let cert = params.self_signed(&key).expect("cert");
        std::fs::write(&c.cert_file, cert.pem()).expect("write");
        std::fs::write(&c.key_file, key.serialize_pem()).expect("write");
        let tls = load(&c).expect("valid pair");
        // 2030-06-01T00:00:00Z
        assert_eq!(tls.certs.not_after(), Some(1_906_502_400));
    }

    /// A pair valid from `from` through `until`.
    fn write_dated(c: &TlsConfig, from: (i32, u8, u8), until: (i32, u8, u8)) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
        params.not_after = rcgen::date_time_ymd(until.0, until.1, until.2);
        let cert = params.self_signed(&key).expect("cert");
        std::fs::write(&c.cert_file, cert.pem()).expect("write");
        std::fs::write(&c.key_file, key.serialize_pem()).expect("write");
    }

    #[test]
    fn expired_and_not_yet_valid_certificates_are_loaded_and_recognised() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = cfg(dir.path());
        let now = chrono::Utc::now().timestamp();
        // Expired: served (a restart must not take the listener down), but
        // known to be expired.
        write_dated(&c, (2020, 1, 1), (2021, 1, 1));
        let tls = load(&c).expect("an expired pair still loads");
        assert_eq!(tls.certs.validity(now), Validity::Expired);
        assert_eq!(tls.certs.not_before(), Some(1_577_836_800));
        assert_eq!(tls.certs.not_after(), Some(1_609_459_200));
        // Renewed into one that is not valid yet (a clock or issuer error).
        write_dated(&c, (2099, 1, 1), (2100, 1, 1));
        assert!(tls.certs.reload().expect("reloaded"));
        assert_eq!(tls.certs.validity(now), Validity::NotYetValid);
        write_dated(&c, (2020, 1, 1), (2099, 1, 1));
        assert!(tls.certs.reload().expect("reloaded"));
        assert_eq!(tls.certs.validity(now), Validity::Valid);
    }

    #[test]
    fn validity_boundaries() {
        let (nb, na) = (Some(1_000), Some(1_000 + 30 * 86_400));
        assert_eq!(validity(nb, na, 999), Validity::NotYetValid);
        assert_eq!(validity(nb, na, 1_000), Validity::Valid);
        let soon = 1_000 + 30 * 86_400 - EXPIRY_WARNING_SECONDS;
        assert_eq!(validity(nb, na, soon), Validity::Valid);
        assert_eq!(validity(nb, na, soon + 1), Validity::ExpiresSoon);
        assert_eq!(validity(nb, na, 1_000 + 30 * 86_400), Validity::ExpiresSoon);
        assert_eq!(validity(nb, na, 1_000 + 30 * 86_400 + 1), Validity::Expired);
        assert_eq!(validity(None, na, 5_000), Validity::Unknown);
        assert!(!Validity::Valid.is_problem() && Validity::Expired.is_problem());
    }

    #[test]
    fn reload_serves_a_renewed_pair_and_keeps_the_old_one_on_a_bad_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = cfg(dir.path());
        let first = self_signed();
        std::fs::write(&c.cert_file, first.cert.pem()).expect("write");
        std::fs::write(&c.key_file, first.signing_key.serialize_pem()).expect("write");
        let tls = load(&c).expect("valid pair");
        assert!(
            !tls.certs.reload().expect("unchanged"),
            "no change, no reload"
        );

        // Half-renewed (new certificate, old key), as a reader may see it
        // between two file writes: refused, the old pair stays.
        let second = self_signed();
        std::fs::write(&c.cert_file, second.cert.pem()).expect("write");
        let e = tls.certs.reload().expect_err("mismatched pair");
        assert_eq!(e.label(), "rejected");
        assert_eq!(tls.certs.leaf(), first.cert.der().to_vec());

        std::fs::write(&c.key_file, second.signing_key.serialize_pem()).expect("write");
        assert!(tls.certs.reload().expect("renewed"));
        assert_eq!(tls.certs.leaf(), second.cert.der().to_vec());
        assert!(!tls.certs.reload().expect("unchanged"));

        std::fs::remove_file(&c.key_file).expect("remove");
        assert_eq!(tls.certs.reload().expect_err("gone").label(), "read");
        assert_eq!(tls.certs.leaf(), second.cert.der().to_vec());
    }

    #[test]
    fn bad_files_name_the_field_and_never_echo_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = cfg(dir.path());
        let ck = self_signed();
        let key_pem = ck.signing_key.serialize_pem();

        let e = load(&c).expect_err("missing cert");
        assert_eq!(e.label(), "read");
        assert!(e.to_string().starts_with("`tls.cert_file`"), "{e}");

        std::fs::write(&c.cert_file, ck.cert.pem()).expect("write");
        let e = load(&c).expect_err("missing key");
        assert_eq!(e.label(), "read");
        assert!(e.to_string().contains("`tls.key_file`"), "{e}");
        assert!(e.to_string().contains("tls.key"), "names the file: {e}");

        // A key where the certificate should be: no certificate in it.
        std::fs::write(&c.cert_file, &key_pem).expect("write");
        std::fs::write(&c.key_file, &key_pem).expect("write");
        let e = load(&c).expect_err("key as cert");
        assert_eq!(e.label(), "pem");
        assert!(e.to_string().contains("no PEM certificate"), "{e}");

        std::fs::write(&c.cert_file, ck.cert.pem()).expect("write");
        std::fs::write(&c.key_file, ck.cert.pem()).expect("write");
        let e = load(&c).expect_err("cert as key");
        assert!(e.to_string().contains("`tls.key_file`"), "{e}");
        assert!(e.to_string().contains("no PEM private key"), "{e}");

        // A key of another certificate.
        std::fs::write(&c.key_file, self_signed().signing_key.serialize_pem()).expect("write");
        let e = load(&c).expect_err("mismatch");
        assert_eq!(e.label(), "rejected");

        // Corrupt base64 inside the key block.
        let corrupt = key_pem.replacen('A', "!", 3);
        std::fs::write(&c.key_file, &corrupt).expect("write");
        let e = load(&c).expect_err("corrupt");
        assert!(e.to_string().contains("`tls.key_file`"), "{e}");

        // Key material never appears in any of these messages.
        let body: String = key_pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        for text in [e.to_string(), format!("{e:?}")] {
            for chunk in body.as_bytes().chunks(16) {
                let chunk = String::from_utf8_lossy(chunk);
                assert!(!text.contains(chunk.as_ref()), "{text}");
            }
        }
    }
}
