//! The listener under abuse, on the real `remedy serve` binary with the
//! default `http` limits (header timeout shortened to keep the test short):
//! 1,000 slowloris connections are held and then cut at the header timeout,
//! 1,000 unfinished 380 KiB heads cost at most `max_header_bytes` each, and
//! /healthz answers throughout.

use crate::support::{Remedy, TestCluster, sample};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CLIENTS: usize = 1_000;
/// The issue's attack: heads this big, never finished.
const BIG_HEAD: usize = 380 * 1024;
/// Peak RSS of the whole process during the attack. The shipped limit is
/// 256Mi; the load bench puts a 100k-object fleet at ~90 MiB. Half the limit
/// leaves that room: the listener's worst case is max_connections (2,048)
/// times max_header_bytes (16 KiB) = 32 MiB of head buffers, plus per
/// connection task and socket state. Without the limits the 380 KiB heads
/// alone are 371 MiB.
const RSS_BOUND_KIB: u64 = 128 * 1024;
/// What a kubelet probe allows by default.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Each side of each connection is a descriptor in this process or in
/// remedy (which inherits the limit): raise the soft limit to the hard one.
fn raise_nofile(need: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    let ok = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0
        }
    };
    assert!(
        ok && lim.rlim_cur >= need,
        "need {need} file descriptors, hard limit is {}: raise `ulimit -Hn`",
        lim.rlim_max
    );
}

async fn probe(url: &str) -> Duration {
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .expect("client");
    let t = Instant::now();
    let r = client
        .get(format!("{url}/healthz"))
        .send()
        .await
        .expect("/healthz answers within the probe timeout");
    assert_eq!(r.status(), 200);
    t.elapsed()
}

async fn metric(remedy: &Remedy, series: &str) -> f64 {
    let (code, text) = remedy.get("/metrics").await.expect("/metrics");
    assert_eq!(code, 200);
    sample(&text, series).unwrap_or(0.0)
}

/// Until the server closes the connection (EOF, reset or a refused write).
async fn until_closed(mut s: TcpStream, mut send: impl FnMut(usize) -> Option<Vec<u8>>) {
    let mut buf = [0u8; 1024];
    for i in 0.. {
        let Some(bytes) = send(i) else {
            break;
        };
        if s.write_all(&bytes).await.is_err() {
            return;
        }
        // Closed while we were pausing?
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await
        {
            return;
        }
    }
    // Nothing left to send: wait for the close.
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_slow_clients_neither_starve_probes_nor_exhaust_memory() {
    raise_nofile(3 * CLIENTS as u64 + 1_000);
    let cluster = TestCluster::shared();
    let header_timeout = Duration::from_secs(4);
    let remedy = Remedy::serve(
        cluster,
        &format!(
            "profiles: [bottlerocket-shadow]\nleader_election: {{enabled: false}}\nhttp: {{header_read_timeout: {}s}}\n",
            header_timeout.as_secs()
        ),
    );
    remedy.wait_ready().await;
    let addr = remedy.url.trim_start_matches("http://").to_string();
    let rss_before = remedy.status_kib("VmRSS");

    // 1. Slowloris: a head that never ends, one byte every 500 ms.
    let started = Instant::now();
    let mut slow = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let s = TcpStream::connect(&addr).await.expect("connect");
        slow.spawn(async move {
            until_closed(s, |i| {
                Some(if i == 0 {
                    b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ".to_vec()
                } else {
                    b"a".to_vec()
                })
            })
            .await;
            Instant::now()
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(slow.try_join_next().is_none(), "all {CLIENTS} are held");
    let p = probe(&remedy.url).await;
    assert!(
        started.elapsed() < header_timeout,
        "the probe ran while every slow connection was open"
    );
    println!("/healthz with {CLIENTS} slowloris connections open: {p:?}");
    let mut last_close = started;
    while let Some(closed) = tokio::time::timeout(header_timeout * 3, slow.join_next())
        .await
        .expect("slowloris connections are closed by remedy at the header timeout, not kept open")
    {
        last_close = last_close.max(closed.expect("task"));
    }
    let held_for = last_close - started;
    assert!(held_for < header_timeout * 2, "held for {held_for:?}");
    assert!(
        metric(
            &remedy,
            r#"remedy_http_connection_timeouts_total{timeout="header"}"#
        )
        .await
            >= CLIENTS as f64
    );

    // 2. The issue's memory attack: unfinished 380 KiB heads, kept open.
    let mut big = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let s = TcpStream::connect(&addr).await.expect("connect");
        big.spawn(until_closed(s, |i| {
            (i == 0).then(|| {
                let mut head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
                head.resize(BIG_HEAD, b'a');
                head
            })
        }));
    }
    let p = probe(&remedy.url).await;
    println!("/healthz with {CLIENTS} unfinished {BIG_HEAD}-byte heads: {p:?}");
    // Time for every head to reach remedy's socket (380 MiB over loopback).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let peak = remedy.status_kib("VmHWM");
    println!(
        "remedy RSS before {} KiB, peak {} KiB (bound {} KiB)",
        rss_before, peak, RSS_BOUND_KIB
    );
    assert!(
        peak < RSS_BOUND_KIB,
        "peak RSS {peak} KiB over {RSS_BOUND_KIB} KiB"
    );
    tokio::time::timeout(header_timeout * 3, async {
        while big.join_next().await.is_some() {}
    })
    .await
    .expect("big heads are refused (431) or cut at the header timeout");
    probe(&remedy.url).await;
}
