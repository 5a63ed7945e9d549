//! A TCP forwarder to put between one process and the apiserver, to cut it
//! off while everything else keeps talking. TLS passes through untouched
//! (the apiserver's certificate is for 127.0.0.1, so another port on it
//! verifies the same).
//!
//! `cut()` is a partition, not a refused port: open connections are dropped
//! and new ones are accepted and never forwarded, so requests hang the way
//! they do when packets are lost. `heal()` forwards again and drops what was
//! held during the cut (its clients retry on fresh connections).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Proxy {
    pub addr: SocketAddr,
    /// `true` while cut. Dropping the sender (with the proxy) ends every
    /// connection task.
    cut: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let (cut, _) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, upstream, cut.clone()));
        Self { addr, cut, accept }
    }

    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, cut: watch::Sender<bool>) {
    while let Ok((client, _)) = listener.accept().await {
        // Subscribed before looking at the state: a cut that lands while
        // this connection is being set up is still seen by it.
        let rx = cut.subscribe();
        if *rx.borrow() {
            tokio::spawn(blackhole(client, rx));
        } else {
            tokio::spawn(forward(client, upstream, rx));
        }
    }
}

/// Holds the connection, never reading or answering, until healed.
async fn blackhole(client: TcpStream, mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|cut| !*cut).await;
    drop(client);
}

/// Forwards both ways until either side closes or the link is cut.
async fn forward(mut client: TcpStream, upstream: SocketAddr, mut rx: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = rx.wait_for(|cut| *cut) => {}
    }
}

/// Starts a proxy in front of the apiserver of `kubeconfig` and writes a
/// copy of it into `dir` whose `server:` is the proxy (same scheme and
/// host, the proxy's port); returns both.
pub async fn in_front_of(kubeconfig: &Path, dir: &Path) -> (Proxy, PathBuf) {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("kubeconfig yaml");
    let clusters = doc["clusters"].as_sequence_mut().expect("clusters");
    assert_eq!(clusters.len(), 1, "one cluster in the test kubeconfig");
    let server = clusters[0]["cluster"]["server"]
        .as_str()
        .expect("server")
        .to_string();
    let (scheme, rest) = server.split_once("://").expect("server URL");
    let upstream: SocketAddr = rest
        .trim_end_matches('/')
        .parse()
        .expect("server is IP:port");
    let proxy = Proxy::start(upstream).await;
    clusters[0]["cluster"]["server"] =
        format!("{scheme}://{}:{}", upstream.ip(), proxy.addr.port()).into();
    let path = dir.join("kubeconfig-via-proxy");
    std::fs::write(&path, serde_yaml_ng::to_string(&doc).expect("yaml")).expect("write kubeconfig");
    (proxy, path)
}

/// A forwarder that lets `threshold` bytes through from the server, then
/// holds the rest of every response (the client sits mid-response, its
/// connection open) until [`Valve::open`]: a slow reader, frozen at a chosen
/// point of a large list, e.g. after its first page.
pub struct Valve {
    pub addr: SocketAddr,
    /// Bytes sent from the server to the client so far.
    pub sent: Arc<AtomicU64>,
    opened: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Valve {
    pub async fn start(upstream: SocketAddr, threshold: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind valve");
        let addr = listener.local_addr().expect("valve addr");
        let (opened, _) = watch::channel(false);
        let sent = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn({
            let (opened, sent) = (opened.clone(), sent.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(valve_forward(
                        client,
                        upstream,
                        threshold,
                        sent.clone(),
                        opened.subscribe(),
                    ));
                }
            }
        });
        Self {
            addr,
            sent,
            opened,
            accept,
        }
    }

    pub fn open(&self) {
        self.opened.send_replace(true);
    }
}

impl Drop for Valve {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn valve_forward(
    client: TcpStream,
    upstream: SocketAddr,
    threshold: u64,
    sent: Arc<AtomicU64>,
    mut opened: watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = tokio::io::copy(&mut cr, &mut sw);
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if sent.load(Ordering::SeqCst) >= threshold {
                let _ = opened.wait_for(|o| *o).await;
            }
            sent.fetch_add(n as u64, Ordering::SeqCst);
            if cw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        () = down => {}
    }
}

/// Rewrites `kubeconfig` into `dir` with the server's port replaced by
/// `port` (a forwarder on the same host); returns the new file.
pub fn kubeconfig_via(kubeconfig: &Path, dir: &Path, name: &str, port: u16) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("kubeconfig yaml");
    let clusters = doc["clusters"].as_sequence_mut().expect("clusters");
    let server = clusters[0]["cluster"]["server"]
        .as_str()
        .expect("server")
        .to_string();
    let (scheme, rest) = server.split_once("://").expect("server URL");
    let upstream: SocketAddr = rest.trim_end_matches('/').parse().expect("IP:port");
    clusters[0]["cluster"]["server"] = format!("{scheme}://{}:{port}", upstream.ip()).into();
    let path = dir.join(name);
    std::fs::write(&path, serde_yaml_ng::to_string(&doc).expect("yaml")).expect("write kubeconfig");
    path
}

/// The apiserver address in `kubeconfig`.
pub fn upstream_of(kubeconfig: &Path) -> SocketAddr {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("kubeconfig yaml");
    let server = doc["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("server");
    let (_, rest) = server.split_once("://").expect("server URL");
    rest.trim_end_matches('/').parse().expect("IP:port")
}

#[tokio::test]
async fn forwards_then_cut_blackholes_then_heal_forwards_again() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::timeout;

    // An echo server stands in for the apiserver.
    let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let upstream = echo.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let proxy = Proxy::start(upstream).await;
    let roundtrip = |mut s: TcpStream| async move {
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        timeout(Duration::from_millis(500), s.read_exact(&mut buf))
            .await
            .ok()?
            .ok()?;
        Some((buf == *b"ping", s))
    };
    let open = TcpStream::connect(proxy.addr).await.expect("connect");
    let (ok, mut open) = roundtrip(open).await.expect("forwarded");
    assert!(ok);

    proxy.cut();
    // The open connection is dropped...
    let mut buf = [0u8; 4];
    let n = timeout(Duration::from_secs(2), open.read(&mut buf))
        .await
        .expect("closed, not hanging");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    // ...and a new one is accepted but goes nowhere.
    let held = TcpStream::connect(proxy.addr).await.expect("still accepts");
    assert!(
        roundtrip(held).await.is_none(),
        "nothing forwarded while cut"
    );

    proxy.heal();
    let s = TcpStream::connect(proxy.addr).await.expect("connect");
    assert!(roundtrip(s).await.is_some_and(|(ok, _)| ok));
}
