//! The HTTPS listener: the real router served by `remedy::daemon::server::serve` (TLS) on a
//! loopback port, fetched by reqwest trusting a test CA (as with a
//! cert-manager issued certificate); plain HTTP to that port gets nothing,
//! and a bad certificate stops `remedy serve` before it connects anywhere.

use remedy::config::TlsConfig;
use remedy::daemon::server::{self, Http, Readiness};
use remedy::metrics::Metrics;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

struct Ready;

/// The listener as `remedy serve` runs it with TLS and default limits.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    server::serve(
        listener,
        Some(config),
        app,
        remedy::config::HttpConfig::default(),
        Arc::new(Metrics::new(10)),
        shutdown,
    )
    .await;
}

impl Readiness for Ready {
    fn check(&self) -> Result<Vec<String>, Vec<String>> {
        Ok(Vec::new())
    }
}

struct Pki {
    ca_pem: String,
    cfg: TlsConfig,
    _dir: tempfile::TempDir,
}

/// A CA and a serving certificate it signed, for localhost and 127.0.0.1.
fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "remedy test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("params");
    let cert = params.signed_by(&key, &ca).expect("cert");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = TlsConfig {
        cert_file: dir.path().join("tls.crt"),
        key_file: dir.path().join("tls.key"),
    };
    std::fs::write(&cfg.cert_file, cert.pem()).expect("write cert");
    std::fs::write(&cfg.key_file, key.serialize_pem()).expect("write key");
    Pki {
        ca_pem: ca.pem(),
        cfg,
        _dir: dir,
    }
}

/// Plain HTTP to a TLS port gets no HTTP answer at all.
async fn assert_no_plain_http(port: u16) {
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP got an answer: {plain:?}");
}

fn trusting(ca_pem: &str, addr: SocketAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("ca pem"))
        .resolve("localhost", addr)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

#[tokio::test]
async fn serves_https_with_the_configured_certificate_and_refuses_plain_http() {
    let pki = pki();
    let tls = remedy::daemon::tls::load(&pki.cfg).expect("certificate and key load");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = server::router(Http {
        metrics: Arc::new(Metrics::new(10)),
        readiness: Arc::new(Ready),
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_tls(listener, tls.config, app, async {
        let _ = stopped.await;
    }));

    // A client that connects and never says anything must not block others.
    let mut idle = tokio::net::TcpStream::connect(addr)
        .await
        .expect("idle connect");

    let client = trusting(&pki.ca_pem, addr);
    let port = addr.port();
    let r = client
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .expect("https by name");
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.expect("body"), "ok\n");
    let r = client
        .get(format!("https://127.0.0.1:{port}/metrics"))
        .header("accept", "application/openmetrics-text")
        .send()
        .await
        .expect("https by IP");
    assert_eq!(r.status(), 200);
    assert!(r.text().await.expect("body").ends_with("# EOF\n"));

    assert_no_plain_http(port).await;

    // A client that does not trust the CA refuses the server.
    let untrusting = reqwest::Client::builder()
        .resolve("localhost", addr)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let e = untrusting
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .expect_err("unknown CA");
    assert!(e.is_connect(), "{e:?}");

    // Garbage instead of a ClientHello ends that connection only.
    let mut junk = tokio::net::TcpStream::connect(addr).await.expect("connect");
    junk.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 0, 1, 2, 3])
        .await
        .expect("write");
    let r = client
        .get(format!("https://localhost:{port}/readyz"))
        .send()
        .await
        .expect("still serving after bad clients");
    assert_eq!(r.status(), 200);

    // Renewal: new files (here from another CA, to tell them apart) are
    // served to new connections after a reload, without a restart.
    let renewed = self::pki();
    std::fs::copy(&renewed.cfg.cert_file, &pki.cfg.cert_file).expect("copy cert");
    std::fs::copy(&renewed.cfg.key_file, &pki.cfg.key_file).expect("copy key");
    assert!(tls.certs.reload().expect("reload"), "new files seen");
    let r = trusting(&renewed.ca_pem, addr)
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .expect("the renewed certificate is served");
    assert_eq!(r.status(), 200);
    let e = trusting(&pki.ca_pem, addr)
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .expect_err("the old certificate is no longer served");
    assert!(e.is_connect(), "{e:?}");

    // Shutdown: stops accepting and returns once connections drained.
    idle.shutdown().await.expect("close idle");
    drop(junk);
    drop(client);
    stop.send(()).expect("server running");
    tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("server stops")
        .expect("server task");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener closed after shutdown"
    );
}

#[test]
fn serve_with_an_unreadable_certificate_fails_at_start_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("tls.key");
    std::fs::write(&key, "not a key").expect("write");
    let missing = dir.path().join("missing.crt");
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:0\nleader_election: {{enabled: false}}\ntls: {{cert_file: {}, key_file: {}}}\n",
            missing.display(),
            key.display()
        ),
    )
    .expect("config");
    // TLS is checked before Kubernetes is contacted: no cluster needed.
    let failed_start = || {
        let out = Command::new(env!("CARGO_BIN_EXE_remedy"))
            .args(["serve", "--config"])
            .arg(&cfg)
            .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
            .output()
            .expect("run remedy");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = failed_start();
    assert!(
        stderr.contains("`tls.cert_file`") && stderr.contains("missing.crt"),
        "{stderr}"
    );

    // Readable certificate, key that is not PEM: the key's field is named.
    std::fs::write(&missing, pki().ca_pem).expect("write cert");
    let stderr = failed_start();
    assert!(
        stderr.contains("`tls.key_file`") && stderr.contains("no PEM private key"),
        "{stderr}"
    );
}

/// A `MakeWriter` into a shared buffer, to read back what was logged.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// No secrets in logs: the webhook behind the TLS listener, driven with the
/// right token, a wrong one and bad bodies, logs at TRACE level (every crate)
/// without ever writing either token.
// current_thread: every task runs on this thread, under the capturing
// subscriber set below.
#[tokio::test(flavor = "current_thread")]
async fn bearer_tokens_never_reach_the_logs() {
    use remedy::signals::{Dedupe, WebhookState, router};
    const TOKEN: &str = "s3cret-webhook-TOKEN-4f9a";
    const GUESS: &str = "guessed-TOKEN-value-77c1";
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let pki = pki();
    let config = remedy::daemon::tls::load(&pki.cfg).expect("certificate and key load");
    let metrics = Arc::new(Metrics::new(10));
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let state = WebhookState::new(
        Arc::from(TOKEN.as_bytes()),
        64 * 1024,
        ["MachineStuck".to_string()],
        tx,
        Arc::new(std::sync::Mutex::new(Dedupe::new(100))),
        metrics.clone(),
    );
    let app = server::router(Http {
        metrics,
        readiness: Arc::new(Ready),
    })
    .merge(router(state));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve_tls(
        listener,
        config.config,
        app,
        std::future::pending(),
    ));
    let client = trusting(&pki.ca_pem, addr);
    let url = format!("https://localhost:{}/webhook/alertmanager", addr.port());
    let body = serde_json::json!({
        "version": "4", "status": "firing", "groupKey": "{}:{alertname=\"MachineStuck\"}",
        "receiver": "remedy", "truncatedAlerts": 1,
        "alerts": [{"status": "firing", "labels": {"alertname": "MachineStuck", "name": "m-1"},
                    "startsAt": "2026-12-02T10:00:00Z", "fingerprint": "c4f7d1a3b2e6f890"}]
    })
    .to_string();
    let cases = [
        (Some(TOKEN), "application/json", body.clone(), 200),
        (Some(GUESS), "application/json", body.clone(), 401),
        (None, "application/json", body.clone(), 401),
        (
            Some(TOKEN),
            "application/json",
            "{\"version\":".to_string(),
            400,
        ),
        // Authentication comes first: a refused request's body (which would
        // be echoed in a rejection reason) is never read.
        (
            Some(GUESS),
            "application/json",
            body.replace("\"status\":\"firing\"", &format!("\"status\":\"{GUESS}\"")),
            401,
        ),
        (Some(TOKEN), "text/plain", body.clone(), 415),
    ];
    for (token, content_type, body, want) in cases {
        let mut req = client
            .post(&url)
            .header("content-type", content_type)
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.expect("request");
        assert_eq!(r.status().as_u16(), want);
    }
    assert!(
        rx.recv().await.is_some(),
        "the valid notification was queued"
    );

    let text = String::from_utf8_lossy(
        &logs
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
    .into_owned();
    assert!(
        text.contains("alertmanager notification refused") && text.contains("truncated"),
        "the requests were logged: {text}"
    );
    for secret in [TOKEN, GUESS] {
        assert!(!text.contains(secret), "{secret} logged:\n{text}");
    }
}

/// The deployment's way (deploy/components/tls): the certificate comes from
/// REMEDY_TLS_CERT_FILE/REMEDY_TLS_KEY_FILE (a mounted Secret), not from the
/// config file, and `remedy serve` answers HTTPS only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_environment_variables_turn_on_https() {
    let cluster = crate::support::TestCluster::shared();
    let ns = crate::support::namespace(&cluster.client().await, "tls-env").await;
    let pki = pki();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = crate::support::free_port();
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        format!(
            "listen: 127.0.0.1:{port}\nnamespaces: [{ns}]\nprofiles: [bottlerocket-shadow]\nleader_election: {{enabled: false}}\n"
        ),
    )
    .expect("config");
    let run = |cert: &std::path::Path, key: Option<&std::path::Path>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_remedy"));
        c.args(["serve", "--config"])
            .arg(&cfg)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env("REMEDY_TLS_CERT_FILE", cert);
        if let Some(k) = key {
            c.env("REMEDY_TLS_KEY_FILE", k);
        }
        c
    };

    // Half a pair is refused by the argument parser, before anything starts.
    let out = run(&pki.cfg.cert_file, None).output().expect("run remedy");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tls-key-file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A missing certificate named by the variable stops startup.
    let missing = dir.path().join("missing.crt");
    let out = run(&missing, Some(&pki.cfg.key_file))
        .output()
        .expect("run remedy");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing.crt"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let _remedy = KillOnDrop(
        run(&pki.cfg.cert_file, Some(&pki.cfg.key_file))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn remedy"),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let client = trusting(&pki.ca_pem, addr);
    crate::support::eventually(Duration::from_secs(30), "ready over https", || {
        let client = &client;
        async move {
            let r = client
                .get(format!("https://localhost:{port}/readyz"))
                .send()
                .await
                .ok()?;
            (r.status() == 200).then_some(())
        }
    })
    .await;
    assert_no_plain_http(port).await;
    // The served certificate's expiry is exported (rcgen's default
    // notAfter, 4096-01-01, is far in the future).
    let metrics = client
        .get(format!("https://localhost:{port}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let expiry = crate::support::sample(&metrics, "remedy_tls_certificate_expiry_seconds")
        .expect("expiry metric");
    assert_eq!(expiry, 67_090_118_400.0, "4096-01-01T00:00:00Z");
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
