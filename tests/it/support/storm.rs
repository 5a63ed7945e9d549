//! An HTTPS proxy in front of the apiserver that can answer 429 the way
//! kube-apiserver's max-in-flight filter does (`Retry-After: 1`, a `Status`
//! body), and logs every request it receives: what one process sends to the
//! apiserver, second by second, during and after a 429 storm.
//!
//! It terminates TLS (its own CA, written next to the kubeconfig it hands
//! out) and forwards with the admin client of the real kubeconfig, without
//! kube's retries, so each request remedy makes is forwarded exactly once.

use axum::body::Body;
use axum::http::{self, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One request the proxy received.
#[derive(Clone, Debug)]
pub struct Hit {
    /// Since the proxy started.
    pub at: Duration,
    pub method: String,
    pub path: String,
    /// What the proxy answered (429 if it rejected the request).
    pub status: u16,
}

struct State {
    upstream: kube::Client,
    storm: AtomicBool,
    /// Of every `REJECT_OF` requests during a storm, all but one get 429:
    /// the apiserver still serves some, as it does under real overload.
    seen_in_storm: AtomicU64,
    hits: Mutex<Vec<Hit>>,
    start: Instant,
}

const REJECT_OF: u64 = 4;

pub struct StormProxy {
    pub kubeconfig: PathBuf,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl StormProxy {
    /// Starts the proxy in front of the apiserver of `kubeconfig` and writes
    /// into `dir` a kubeconfig (and the proxy's CA) that goes through it.
    pub async fn start(kubeconfig: &Path, dir: &Path) -> Self {
        let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
        let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
        // One forward per request received: the count is remedy's.
        cfg.default_retry = false;
        let upstream = kube::Client::try_from(cfg).expect("upstream client");

        let ca_key = rcgen::KeyPair::generate().expect("ca key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::new()).expect("ca params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
            .expect("params")
            .signed_by(&key, &ca)
            .expect("cert");
        let ca_file = dir.join("storm-proxy-ca.crt");
        std::fs::write(&ca_file, ca.pem()).expect("write ca");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("tls versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .expect("tls config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State {
            upstream,
            storm: AtomicBool::new(false),
            seen_in_storm: AtomicU64::new(0),
            hits: Mutex::default(),
            start: Instant::now(),
        });
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, state) = (acceptor.clone(), state.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let svc = hyper::service::service_fn(move |req| handle(state.clone(), req));
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), svc)
                            .await;
                    });
                }
            }
        });

        let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
        let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("yaml");
        let cluster = &mut doc["clusters"][0]["cluster"];
        let map = cluster.as_mapping_mut().expect("cluster");
        map.remove("certificate-authority-data");
        map.insert(
            "certificate-authority".into(),
            ca_file.display().to_string().into(),
        );
        map.insert("server".into(), format!("https://127.0.0.1:{port}").into());
        let path = dir.join("kubeconfig-via-storm-proxy");
        std::fs::write(&path, serde_yaml_ng::to_string(&doc).expect("yaml")).expect("write");
        Self {
            kubeconfig: path,
            state,
            accept,
        }
    }

    /// From now on most requests get 429 (see [`REJECT_OF`]).
    pub fn storm(&self, on: bool) {
        self.state.storm.store(on, Ordering::SeqCst);
    }

    /// Time since the proxy started, on the clock of [`Hit::at`].
    pub fn now(&self) -> Duration {
        self.state.start.elapsed()
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.state.hits.lock().expect("hits").clone()
    }
}

impl Drop for StormProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let at = state.start.elapsed();
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(String::new, |p| p.to_string());
    let reject = state.storm.load(Ordering::SeqCst)
        && !state
            .seen_in_storm
            .fetch_add(1, Ordering::SeqCst)
            .is_multiple_of(REJECT_OF);
    let response = if reject {
        too_many_requests()
    } else {
        forward(&state.upstream, req).await
    };
    state.hits.lock().expect("hits").push(Hit {
        at,
        method,
        path,
        status: response.status().as_u16(),
    });
    Ok(response)
}

/// What kube-apiserver's max-in-flight filter answers.
fn too_many_requests() -> Response<Body> {
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests", "details": {"retryAfterSeconds": 1}, "code": 429,
    });
    Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header("content-type", "application/json")
        .header("retry-after", "1")
        .body(Body::from(status.to_string()))
        .expect("429 response")
}

async fn forward(upstream: &kube::Client, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(Body::new(body), usize::MAX).await else {
        return bad_gateway();
    };
    let mut out = Request::builder()
        .method(parts.method)
        .uri(parts.uri.path_and_query().map_or("/", |p| p.as_str()));
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
            out = out.header(name, value);
        }
    }
    let Ok(out) = out.body(kube::client::Body::from(bytes.to_vec())) else {
        return bad_gateway();
    };
    match upstream.send(out).await {
        Ok(res) => res.map(Body::new),
        Err(_) => bad_gateway(),
    }
}

fn bad_gateway() -> Response<Body> {
    Response::builder()
        .status(StatusCode::BAD_GATEWAY)
        .body(Body::empty())
        .expect("502 response")
}

/// Requests and 429s in each whole second of `[from, to)`.
pub fn per_second(hits: &[Hit], from: Duration, to: Duration) -> Vec<(usize, usize)> {
    let secs = (to - from).as_secs() as usize;
    let mut out = vec![(0, 0); secs];
    for h in hits.iter().filter(|h| h.at >= from && h.at < to) {
        if let Some(slot) = out.get_mut(((h.at - from).as_secs()) as usize) {
            slot.0 += 1;
            slot.1 += usize::from(h.status == 429);
        }
    }
    out
}

#[tokio::test]
async fn per_second_buckets_requests_and_429s() {
    let hit = |ms: u64, status: u16| Hit {
        at: Duration::from_millis(ms),
        method: "GET".into(),
        path: "/".into(),
        status,
    };
    let hits = [
        hit(900, 200),
        hit(1000, 429),
        hit(1999, 200),
        hit(2500, 429),
        hit(3000, 200),
    ];
    assert_eq!(
        per_second(&hits, Duration::from_secs(1), Duration::from_secs(3)),
        vec![(2, 1), (1, 1)]
    );
}
