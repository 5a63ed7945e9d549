//! HTTP surface: /metrics, /healthz, /readyz, and the listener that serves
//! them, plain or TLS, with one set of limits (`http` in the config). The
//! webhook route is added by `signals::webhook` when configured.

use crate::config::HttpConfig;
use crate::metrics::values::HttpTimeout;
use crate::metrics::{Format, Metrics, TimeoutLabels};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

/// On shutdown, in-flight requests get this long to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors), as
/// `axum::serve` does, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Something that can say whether remedy is ready, and why not.
pub trait Readiness: Send + Sync + 'static {
    /// `Ok(notes)` when ready (notes name degraded parts, e.g. verification
    /// failing: remedy stays ready to keep taking webhooks, but says why it
    /// is not remediating); otherwise the reasons, one per line.
    fn check(&self) -> Result<Vec<String>, Vec<String>>;

    /// Liveness for /healthz: `Err(why)` when the process should be
    /// restarted (the engine loop stopped ticking).
    fn alive(&self) -> Result<(), String> {
        Ok(())
    }
}

#[derive(Clone)]
pub struct Http {
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<dyn Readiness>,
}

pub fn router(state: Http) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(s): State<Http>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    match s.metrics.encode_as(format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "metrics encoding failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "metrics encoding failed\n",
            )
                .into_response()
        }
    }
}

async fn healthz(State(s): State<Http>) -> Response {
    match s.readiness.alive() {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unhealthy: {why}\n"),
        )
            .into_response(),
    }
}

async fn readyz(State(s): State<Http>) -> Response {
    match s.readiness.check() {
        Ok(notes) => {
            s.metrics.process.ready.set(1);
            (StatusCode::OK, listing("ready", "degraded: ", notes)).into_response()
        }
        Err(reasons) => {
            s.metrics.process.ready.set(0);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                listing("not ready:", "", reasons),
            )
                .into_response()
        }
    }
}

fn listing(head: &str, prefix: &str, lines: Vec<String>) -> String {
    let mut body = format!("{head}\n");
    for l in lines {
        body.push_str("- ");
        body.push_str(prefix);
        body.push_str(&l);
        body.push('\n');
    }
    body
}

/// Serves `app` on `listener`, over TLS when `tls` is given, until
/// `shutdown` completes; then open connections get a drain timeout.
///
/// Every connection is bounded (`limits`): a TLS handshake and each request
/// head must arrive within `header_read_timeout` (hyper restarts that timer
/// while a keep-alive connection waits for its next request, so it is also
/// the keep-alive idle limit); a connection that moves no byte for
/// `idle_timeout` is closed (stalled bodies, clients that stop reading); a
/// head is at most `max_header_bytes` and `max_headers` fields (hyper answers
/// 431), and hyper's read buffer is capped at the same size, so an
/// unfinished head costs at most that much. Beyond `max_connections` a new
/// connection is closed at once and counted: memory stays bounded whatever
/// clients do, at the price of refusing some when the limit is reached.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    limits: HttpConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        // hyper's minimum; config validation keeps max_header_bytes above it.
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_headers(limits.max_headers);
    let http = Arc::new(http);
    let (header_timeout, idle_timeout) = (limits.header_read_timeout, limits.idle_timeout);
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
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            metrics.http.refused.inc();
            tracing::debug!(%peer, "connection limit reached: connection closed");
            continue;
        };
        // Responses can leave as several writes (TLS records); without
        // this, Nagle holds the last one until the client's delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let conn = Conn {
            http: http.clone(),
            service: TowerToHyperService::new(app.clone()),
            watcher: graceful.watcher(),
            metrics: metrics.clone(),
            idle_timeout,
            peer,
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _permit = permit;
            conn.metrics.http.connections.inc();
            let _open = OpenGuard(conn.metrics.clone());
            match acceptor {
                None => conn.run(tcp).await,
                Some(a) => match tokio::time::timeout(header_timeout, a.accept(tcp)).await {
                    Ok(Ok(stream)) => conn.run(stream).await,
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => {
                        count_timeout(&conn.metrics, HttpTimeout::Handshake);
                        tracing::debug!(%peer, "TLS handshake timed out");
                    }
                },
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

/// Decrements the open-connections gauge however the task ends.
struct OpenGuard(Arc<Metrics>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.http.connections.dec();
    }
}

struct Conn {
    http: Arc<hyper::server::conn::http1::Builder>,
    service: TowerToHyperService<Router>,
    watcher: hyper_util::server::graceful::Watcher,
    metrics: Arc<Metrics>,
    idle_timeout: Duration,
    peer: SocketAddr,
}

fn count_timeout(metrics: &Metrics, timeout: HttpTimeout) {
    metrics
        .http
        .timeouts
        .get_or_create(&TimeoutLabels { timeout })
        .inc();
}

impl Conn {
    /// Serves one connection until it ends, or until it has moved no byte
    /// for `idle_timeout` (then it is dropped, which closes the socket).
    async fn run<S>(self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Conn {
            http,
            service,
            watcher,
            metrics,
            idle_timeout,
            peer,
        } = self;
        let io = Tracked::new(stream);
        let activity = io.activity.clone();
        let conn = http.serve_connection(TokioIo::new(io), service);
        let mut conn = std::pin::pin!(watcher.watch(conn));
        loop {
            let quiet = activity.quiet_for();
            if quiet >= idle_timeout {
                count_timeout(&metrics, HttpTimeout::Idle);
                tracing::debug!(%peer, "connection idle: closed");
                return;
            }
            tokio::select! {
                r = &mut conn => {
                    match r {
                        Err(e) if e.is_timeout() => {
                            count_timeout(&metrics, HttpTimeout::Header);
                            tracing::debug!(%peer, "request head not received in time: closed");
                        }
                        Err(e) => tracing::debug!(%peer, error = %e, "connection closed with an error"),
                        Ok(()) => {}
                    }
                    return;
                }
                () = tokio::time::sleep(idle_timeout - quiet) => {}
            }
        }
    }
}

/// When a connection last moved a byte.
struct Activity {
    origin: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn quiet_for(&self) -> Duration {
        self.origin
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// A stream that records when it last read or wrote a byte.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Tracked<S> {
    fn new(inner: S) -> Self {
        Self {
            inner,
            activity: Arc::new(Activity {
                origin: Instant::now(),
                last_ms: AtomicU64::new(0),
            }),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            me.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            me.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            me.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    struct Ready;

    impl Readiness for Ready {
        fn check(&self) -> Result<Vec<String>, Vec<String>> {
            Ok(Vec::new())
        }
    }

    /// A plain listener with `limits` on a loopback port; an echo route
    /// reads a whole body, so a stalled upload can be tried.
    async fn start(limits: HttpConfig) -> (SocketAddr, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new(10));
        let app = router(Http {
            metrics: metrics.clone(),
            readiness: Arc::new(Ready),
        })
        .route(
            "/echo",
            axum::routing::post(|body: axum::body::Bytes| async move { body }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(
            listener,
            None,
            app,
            limits,
            metrics.clone(),
            std::future::pending(),
        ));
        (addr, metrics)
    }

    /// Reads until the server closes; `None` if it stays open for `within`.
    async fn closed_within(s: &mut TcpStream, within: Duration) -> Option<String> {
        let mut got = Vec::new();
        let read = tokio::time::timeout(within, async {
            let mut buf = [0u8; 4096];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        read.ok()
            .map(|()| String::from_utf8_lossy(&got).into_owned())
    }

    async fn healthz(addr: SocketAddr) -> String {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        closed_within(&mut s, Duration::from_secs(5))
            .await
            .expect("answered and closed")
    }

    fn timeouts(m: &Metrics, timeout: HttpTimeout) -> u64 {
        m.http
            .timeouts
            .get_or_create(&TimeoutLabels { timeout })
            .get()
    }

    #[tokio::test]
    async fn connections_beyond_the_limit_are_closed_and_counted() {
        let (addr, metrics) = start(HttpConfig {
            max_connections: 2,
            ..HttpConfig::default()
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(TcpStream::connect(addr).await.expect("connect"));
        }
        // Let the server accept both before the third arrives.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(metrics.http.connections.get(), 2);
        let mut third = TcpStream::connect(addr).await.expect("connect");
        let answer = closed_within(&mut third, Duration::from_secs(2)).await;
        assert_eq!(answer.as_deref(), Some(""), "closed without an answer");
        assert_eq!(metrics.http.refused.get(), 1);
        drop(held);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            healthz(addr).await.ends_with("ok\n"),
            "a slot is free again"
        );
        assert_eq!(metrics.http.refused.get(), 1);
    }

    #[tokio::test]
    async fn a_head_sent_byte_by_byte_is_cut_at_the_header_timeout() {
        let (addr, metrics) = start(HttpConfig {
            header_read_timeout: Duration::from_millis(500),
            ..HttpConfig::default()
        })
        .await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let started = Instant::now();
        let dribble = async {
            for b in b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
                if s.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(4), dribble)
            .await
            .expect("the server stops reading");
        assert!(
            closed_within(&mut s, Duration::from_secs(2))
                .await
                .is_some(),
            "closed"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(timeouts(&metrics, HttpTimeout::Header), 1);
    }

    #[tokio::test]
    async fn a_stalled_body_is_cut_at_the_idle_timeout_and_a_big_head_gets_431() {
        let (addr, metrics) = start(HttpConfig {
            idle_timeout: Duration::from_millis(500),
            ..HttpConfig::default()
        })
        .await;
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf")
            .await
            .expect("write");
        let answer = closed_within(&mut s, Duration::from_secs(3)).await;
        assert!(answer.is_some(), "closed while waiting for the body");
        assert_eq!(timeouts(&metrics, HttpTimeout::Idle), 1);

        // One byte over the head budget: 431, and the connection is closed.
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let pad = "a".repeat(HttpConfig::default().max_header_bytes);
        let head = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {pad}\r\n\r\n");
        let _ = s.write_all(head.as_bytes()).await;
        let answer = closed_within(&mut s, Duration::from_secs(3))
            .await
            .expect("closed");
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        // Within the budget it is served.
        assert!(healthz(addr).await.ends_with("ok\n"));
    }
}
