//! Signal sources behind auth (#13): a real Prometheus (3.x; 2.42 in the
//! legacy run of scripts/test) serving HTTPS
//! with basic auth (`--web.config.file`), reached with a private CA, a
//! password file and a tenant header; a rotated password file is used at
//! once; wrong credentials are an error, never "cleared".

use crate::support::procs::{free_port, prometheus_bin, spawn};
use remedy::config::{BasicAuth, SignalsConfig, SourceClient};
use remedy::metrics::Metrics;
use remedy::signals::Verifier;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// bcrypt (cost 10) of "s1gnals-pass", made with golang.org/x/crypto/bcrypt.
const HASH: &str = "$2a$10$hARBgmCfT5er/QtiNLiIqOviF75v8t4AE6u//mOATpVlPXRUHieWy";

#[tokio::test]
async fn prometheus_behind_tls_and_basic_auth() {
    let bin = prometheus_bin();
    crate::support::procs::require_binary(&bin, "run `bash testenv/prometheus.sh`");
    let dir = tempfile::tempdir().expect("tmp");
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "signals test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("cert");
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("ca.crt"), ca.pem()).expect("ca");
    std::fs::write(p("tls.crt"), cert.pem()).expect("cert");
    std::fs::write(p("tls.key"), key.serialize_pem()).expect("key");
    std::fs::write(
        p("web.yml"),
        format!(
            "tls_server_config: {{cert_file: {}, key_file: {}}}\nbasic_auth_users: {{remedy: '{HASH}'}}\n",
            p("tls.crt").display(),
            p("tls.key").display()
        ),
    )
    .expect("web config");
    std::fs::write(p("prometheus.yml"), "global: {evaluation_interval: 1s}\n").expect("config");
    std::fs::write(p("password"), "s1gnals-pass\n").expect("password");

    let port = free_port();
    let data = tempfile::tempdir().expect("data");
    let args = vec![
        format!("--config.file={}", p("prometheus.yml").display()),
        format!("--storage.tsdb.path={}", data.path().join("tsdb").display()),
        format!("--web.listen-address=127.0.0.1:{port}"),
        format!("--web.config.file={}", p("web.yml").display()),
    ];
    let _prom = spawn("prometheus", &bin, port, data, &args);

    let verifier = |client: SourceClient| {
        let metrics = Arc::new(Metrics::new(10));
        let cfg = SignalsConfig {
            prometheus_url: Some(format!("https://127.0.0.1:{port}")),
            prometheus: client,
            timeout: Duration::from_secs(3),
            ..SignalsConfig::default()
        };
        Verifier::new(&cfg, metrics).expect("verifier")
    };
    let good = SourceClient {
        basic_auth: Some(BasicAuth {
            username: "remedy".into(),
            password_file: Some(p("password")),
        }),
        ca_file: Some(p("ca.crt")),
        headers: [("X-Scope-OrgID".to_string(), "tenant-1".to_string())].into(),
        ..SourceClient::default()
    };
    let v = verifier(good.clone());
    // Prometheus needs a moment to listen; the first queries may fail.
    let mut cleared = None;
    for _ in 0..100 {
        if let Ok(c) = v.cleared("NeverFired", &BTreeMap::new(), None).await {
            cleared = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let c = cleared.expect("verified through TLS + basic auth");
    assert!(c.cleared, "{}", c.why);

    // Rotated Secret: the new password file is read on the next request.
    std::fs::write(p("password"), "wrong").expect("password");
    let e = v
        .cleared("NeverFired", &BTreeMap::new(), None)
        .await
        .expect_err("a wrong password is an error, never cleared");
    assert!(e.to_string().contains("401"), "{e}");
    std::fs::write(p("password"), "s1gnals-pass").expect("password");
    assert!(
        v.cleared("NeverFired", &BTreeMap::new(), None)
            .await
            .expect("after rotation back")
            .cleared
    );

    // Without the CA the server is not trusted.
    let no_ca = verifier(SourceClient {
        ca_file: None,
        ..good
    });
    let e = no_ca
        .cleared("NeverFired", &BTreeMap::new(), None)
        .await
        .expect_err("untrusted certificate");
    assert_eq!(e.label(), "unreachable", "{e}");
}

/// What a query frontend (thanos-querier, Mimir) receives: the tenant
/// header, the bearer token as the file says now, remedy's User-Agent. A
/// loopback stub records the request heads (no query frontend installs
/// here); it answers like Mimir: no /api/v1/status/config, empty vectors.
#[tokio::test]
async fn a_query_frontend_gets_the_tenant_header_and_the_current_token() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let heads = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
                let body = if head.starts_with("get /api/v1/status/config") {
                    None
                } else {
                    Some(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#)
                };
                seen.lock().expect("heads").push(head);
                let reply = match body {
                    Some(b) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
                        b.len()
                    ),
                    None => {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_string()
                    }
                };
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("token");
    std::fs::write(&token, "tok-1\n").expect("token");
    let cfg = SignalsConfig {
        prometheus_url: Some(format!("http://127.0.0.1:{port}")),
        prometheus: SourceClient {
            bearer_token_file: Some(token.clone()),
            headers: [("X-Scope-OrgID".to_string(), "tenant-1".to_string())].into(),
            ..SourceClient::default()
        },
        timeout: Duration::from_secs(3),
        ..SignalsConfig::default()
    };
    let v = Verifier::new(&cfg, Arc::new(Metrics::new(10))).expect("verifier");
    assert!(
        v.cleared("A", &BTreeMap::new(), None)
            .await
            .expect("cleared")
            .cleared
    );
    std::fs::write(&token, "tok-2").expect("rotate");
    assert!(
        v.cleared("A", &BTreeMap::new(), None)
            .await
            .expect("cleared")
            .cleared
    );
    let heads = heads.lock().expect("heads").clone();
    let queries: Vec<&String> = heads
        .iter()
        .filter(|h| h.starts_with("post /api/v1/query"))
        .collect();
    assert_eq!(queries.len(), 2, "{heads:?}");
    for (q, tok) in queries.iter().zip(["tok-1", "tok-2"]) {
        assert!(q.contains("x-scope-orgid: tenant-1"), "{q}");
        assert!(q.contains(&format!("authorization: bearer {tok}")), "{q}");
        assert!(q.contains("user-agent: remedy/"), "{q}");
    }
}
