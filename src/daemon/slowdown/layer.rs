//! The tower layer that puts every apiserver request of one `kube::Client`
//! through a shared [`Slowdown`]: it waits at the gate, and a 429 closes the
//! gate for all. A 429 means the apiserver did not process the request, so
//! the layer sends it again once the gate opens (kube's own retry, which
//! retried each request on its own, is turned off in `daemon::client`).

use super::{Admit, LEASE_MAX_SENDS, Policy, Slowdown, is_lease, lease_wait, parse_retry_after};
use crate::sync::LockExt;
use axum::http::{Request, Response, StatusCode, header::RETRY_AFTER};
use futures::future::BoxFuture;
use kube::client::{Body, DynBody};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower::buffer::Buffer;
use tower::util::BoxService;
use tower::{BoxError, Layer, Service, ServiceExt};

/// kube's default stack (`ClientBuilder::try_from(config)`).
pub type KubeService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;
type KubeFuture = <KubeService as Service<Request<Body>>>::Future;

/// Sends of one request, the first included; then its 429 goes to the caller.
/// With waits of 1, 2, 4, 8, 10 s ... that is about a minute.
const MAX_SENDS: u32 = 10;
/// Requests queued for the inner service (as `kube::Client`'s own buffer).
const BUFFER: usize = 1024;

/// Where the layer reports: `remedy_apiserver_throttled_total` and
/// `remedy_apiserver_backoff_seconds`.
#[derive(Clone, Debug, Default)]
pub struct Observer {
    pub throttled: Counter,
    pub backoff: Gauge<f64, AtomicU64>,
}

#[derive(Clone)]
pub struct SlowdownLayer {
    state: Arc<Mutex<Slowdown>>,
    observer: Observer,
}

impl SlowdownLayer {
    pub fn new(policy: Policy, observer: Observer) -> Self {
        Self {
            state: Arc::new(Mutex::new(Slowdown::new(policy))),
            observer,
        }
    }
}

impl Layer<KubeService> for SlowdownLayer {
    type Service = SlowdownService;

    fn layer(&self, inner: KubeService) -> SlowdownService {
        SlowdownService {
            // A buffer makes the inner service cloneable, to send a request
            // again from its own future. Needs a runtime: kube_client is async.
            inner: Buffer::new(inner, BUFFER),
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct SlowdownService {
    inner: Buffer<Request<Body>, KubeFuture>,
    layer: SlowdownLayer,
}

impl Service<Request<Body>> for SlowdownService {
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each send waits for the buffer's readiness in `call`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        Box::pin(send(self.inner.clone(), self.layer.clone(), req))
    }
}

async fn send(
    mut inner: Buffer<Request<Body>, KubeFuture>,
    layer: SlowdownLayer,
    mut req: Request<Body>,
) -> Result<Response<Box<DynBody>>, BoxError> {
    let lease = is_lease(req.uri().path());
    let max_sends = if lease { LEASE_MAX_SENDS } else { MAX_SENDS };
    let mut sends = 1;
    loop {
        if !lease {
            layer.admitted().await;
        }
        let again = (sends < max_sends).then(|| copy(&req)).flatten();
        let res = inner.ready().await?.call(req).await?;
        if res.status() != StatusCode::TOO_MANY_REQUESTS {
            layer.state.locked().succeeded();
            return Ok(res);
        }
        let retry_after = res
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let wait = layer
            .state
            .locked()
            .throttled(now(), retry_after, rand::random());
        layer.observer.throttled.inc();
        layer.observer.backoff.set(wait.as_secs_f64());
        // The 429 still closes the gate for the others; a Lease request
        // waits on its own short clock (super::is_lease says why).
        if lease && again.is_some() {
            tokio::time::sleep(lease_wait(retry_after, rand::random())).await;
        }
        match again {
            Some(next) => {
                tracing::debug!(
                    ?retry_after,
                    ?wait,
                    sends,
                    "apiserver answered 429; waiting"
                );
                req = next;
                sends += 1;
            }
            None => {
                tracing::warn!(?retry_after, sends, "apiserver answered 429; giving up");
                return Ok(res);
            }
        }
    }
}

impl SlowdownLayer {
    /// Waits until the shared state lets a request go.
    async fn admitted(&self) {
        loop {
            let now = now();
            let admit = {
                let mut s = self.state.locked();
                let admit = s.admit(now);
                self.observer.backoff.set(s.backoff(now).as_secs_f64());
                admit
            };
            match admit {
                Admit::Go => return,
                Admit::Wait(d) => tokio::time::sleep(d).await,
            }
        }
    }
}

/// tokio's clock, which tests can pause and advance.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// The request again, if its body can be replayed (kube sends whole
/// bodies; a streamed one cannot be and is not sent twice).
fn copy(req: &Request<Body>) -> Option<Request<Body>> {
    let mut out = Request::new(req.body().try_clone()?);
    *out.method_mut() = req.method().clone();
    *out.uri_mut() = req.uri().clone();
    *out.version_mut() = req.version();
    *out.headers_mut() = req.headers().clone();
    *out.extensions_mut() = req.extensions().clone();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// An inner service that answers 429 (`Retry-After: 1`) to the first
    /// `refuse` requests, then 200; counts what it receives.
    fn refusing(refuse: usize, seen: Arc<AtomicUsize>) -> KubeService {
        BoxService::new(tower::service_fn(move |req: Request<Body>| {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let path = req.uri().path().to_string();
            async move {
                let b: Box<DynBody> = Box::new(http_body_util::BodyExt::map_err(
                    http_body_util::Full::new(bytes::Bytes::from(path)),
                    |never| match never {},
                ));
                let mut res = Response::new(b);
                if n < refuse {
                    *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                    res.headers_mut()
                        .insert(RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
                }
                Ok::<_, BoxError>(res)
            }
        }))
    }

    fn get(path: &str) -> Request<Body> {
        Request::builder()
            .uri(path)
            .body(Body::empty())
            .expect("request")
    }

    /// Real time, in milliseconds: `wait` after each 429, no jitter, a
    /// ramp too fast to matter.
    fn fast(wait: u64, max: u64) -> Policy {
        Policy {
            min_wait: Duration::from_millis(wait),
            max_wait: Duration::from_millis(max),
            jitter: 0.0,
            start_rate: 1000.0,
            full_rate: 2000.0,
        }
    }

    #[tokio::test]
    async fn a_429_is_sent_again_after_the_wait_and_counted() {
        let seen = Arc::new(AtomicUsize::new(0));
        let obs = Observer::default();
        let layer = SlowdownLayer::new(fast(50, 1000), obs.clone());
        let mut svc = layer.layer(refusing(2, seen.clone()));
        let t0 = std::time::Instant::now();
        let res = svc.call(get("/a")).await.expect("response");
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(seen.load(Ordering::SeqCst), 3);
        assert_eq!(obs.throttled.get(), 2);
        // Retry-After: 1 is honoured over the policy's 50 ms: 1 s after
        // each 429.
        let took = t0.elapsed();
        assert!(took >= Duration::from_secs(2), "{took:?}");
        assert!(took < Duration::from_secs(4), "{took:?}");
    }

    #[tokio::test]
    async fn every_client_waits_at_the_gate_a_429_closed() {
        let seen = Arc::new(AtomicUsize::new(0));
        let layer = SlowdownLayer::new(fast(50, 1000), Observer::default());
        let mut svc = layer.layer(refusing(1, seen.clone()));
        let first = tokio::spawn(svc.call(get("/first")));
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Another client's request, after the 429: it is not sent before
        // the gate opens (1 s, Retry-After).
        let other = tokio::spawn(svc.call(get("/other")));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(seen.load(Ordering::SeqCst), 1, "sent through a closed gate");
        assert_eq!(first.await.expect("join").expect("first").status(), 200);
        assert_eq!(other.await.expect("join").expect("other").status(), 200);
        assert_eq!(seen.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn the_caller_gets_the_429_after_max_sends() {
        let seen = Arc::new(AtomicUsize::new(0));
        let obs = Observer::default();
        let layer = SlowdownLayer::new(fast(10, 10), obs.clone());
        let mut svc = layer.layer(refusing(usize::MAX, seen.clone()));
        let res = svc.call(get("/a")).await.expect("response");
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(seen.load(Ordering::SeqCst), MAX_SENDS as usize);
        assert_eq!(obs.throttled.get(), u64::from(MAX_SENDS));
        assert!(obs.backoff.get() > 0.0);
    }

    #[tokio::test]
    async fn a_lease_request_passes_a_closed_gate_and_gives_up_early() {
        const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/remedy";
        let seen = Arc::new(AtomicUsize::new(0));
        // A long gate: 20 s after each 429, whatever Retry-After says.
        let layer = SlowdownLayer::new(fast(20_000, 30_000), Observer::default());
        let mut svc = layer.layer(refusing(1, seen.clone()));
        let other = tokio::spawn(svc.call(get("/api/v1/namespaces/ns/configmaps/x")));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            seen.load(Ordering::SeqCst),
            1,
            "the other request got the 429"
        );
        // The gate is closed for 20 s; the Lease renewal goes at once.
        let t0 = std::time::Instant::now();
        let res = svc.call(get(LEASE)).await.expect("lease");
        assert_eq!(res.status(), StatusCode::OK);
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        other.abort();

        // Refused every time: Retry-After (1 s) honoured, at most
        // LEASE_MAX_SENDS sends, then the 429 goes to the election.
        let seen = Arc::new(AtomicUsize::new(0));
        let layer = SlowdownLayer::new(fast(20_000, 30_000), Observer::default());
        let mut svc = layer.layer(refusing(usize::MAX, seen.clone()));
        let t0 = std::time::Instant::now();
        let res = svc.call(get(LEASE)).await.expect("lease");
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(seen.load(Ordering::SeqCst), LEASE_MAX_SENDS as usize);
        let took = t0.elapsed();
        assert!(took >= Duration::from_secs(2), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
}
