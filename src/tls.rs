//! HTTPS for the listener (webhook, /metrics, probes). `axum::serve` speaks
//! plain TCP only, so TLS connections are accepted here and handed to
//! hyper's HTTP/1 server with the same router.

use crate::config::TlsConfig;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A client that connects and never finishes the handshake must not hold a
/// task (and a file descriptor) forever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Same for a client that sends its headers byte by byte.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// On shutdown, in-flight requests get this long to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors), as
/// `axum::serve` does, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

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

/// Reads and checks the certificate chain and key, so that a bad file stops
/// startup with the reason rather than failing every handshake later.
pub fn load(cfg: &TlsConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_pem = read(CERT_FIELD, &cfg.cert_file)?;
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
    let key_pem = read(KEY_FIELD, &cfg.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        pem_error(
            KEY_FIELD,
            &cfg.key_file,
            "private key (PKCS#8, PKCS#1 or SEC1)",
            e,
        )
    })?;
    // ring, the provider kube's client already links; naming it explicitly
    // avoids depending on a process-wide default being installed.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rejected)?
        .with_no_client_auth()
        // Also checks that the key belongs to the leaf certificate.
        .with_single_cert(certs, key)
        .map_err(TlsError::Rejected)?;
    // Only HTTP/1 is served; saying so lets h2-preferring clients fall back.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `app` over TLS until `shutdown` completes, then lets open
/// connections finish (bounded by a drain timeout). A failed handshake, a
/// plain-HTTP client or a broken connection affects only that connection.
pub async fn serve(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(config);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Responses leave as several TLS records; without this, Nagle holds
        // the last one until the client's delayed ACK (40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection closed with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN_TIMEOUT) => {
            tracing::warn!("connections still open after the drain timeout");
        }
    }
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
        let config = load(&c).expect("valid pair");
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
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
