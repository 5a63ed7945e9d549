use super::*;
use reqwest::StatusCode;

fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn promql_escaping() {
    assert_eq!(promql_quote("plain"), r#""plain""#);
    assert_eq!(promql_quote(r#"a"b\c"#), r#""a\"b\\c""#);
    assert_eq!(promql_quote("l1\nl2\r\t"), r#""l1\nl2\r\t""#);
    assert_eq!(promql_quote("\u{1}"), r#""\u0001""#);
    assert_eq!(promql_quote("ünï"), "\"ünï\"");
    // An attempt to close the matcher and add another stays one value.
    assert_eq!(
        promql_quote(r#"x"} or vector(1) or {a=""#),
        r#""x\"} or vector(1) or {a=\"""#
    );
}

#[test]
fn am_escaping() {
    assert_eq!(am_quote(r#"a"b\c"#), r#""a\"b\\c""#);
    assert_eq!(am_quote("l1\nl2"), r#""l1\nl2""#);
    // Alertmanager does not know \t: keep it literal.
    assert_eq!(am_quote("a\tb"), "\"a\tb\"");
}

#[test]
fn builds_alerts_query_and_filters() {
    let q = alerts_query(
        "Machine\"Stuck",
        &m(&[("namespace", "ns"), ("name", "m\\1")]),
    )
    .expect("query");
    assert_eq!(
        q,
        r#"ALERTS{alertname="Machine\"Stuck",alertstate=~"firing|pending",name="m\\1",namespace="ns"}"#
    );
    let f = am_filters("X", &m(&[("alertname", "X"), ("a", "1\n")])).expect("filters");
    assert_eq!(f, vec![r#"alertname="X""#, r#"a="1\n""#]);
    let q = promql_parser::parser::parse(&q);
    assert!(q.is_ok(), "{q:?}");
}

#[test]
fn utf8_label_names_are_quoted_so_they_cannot_break_out() {
    let labels = m(&[("k8s.namespace.name", "ns"), ("a}or{b", "v"), ("zone", "z")]);
    assert_eq!(
        alerts_query("X", &labels).expect("query"),
        r#"ALERTS{alertname="X",alertstate=~"firing|pending","a}or{b"="v","k8s.namespace.name"="ns",zone="z"}"#
    );
    assert_eq!(
        am_filters("X", &labels).expect("filters"),
        vec![
            r#"alertname="X""#,
            r#""a}or{b"="v""#,
            r#""k8s.namespace.name"="ns""#,
            r#"zone="z""#
        ]
    );
    let q = alerts_query("X", &m(&[("quo\"te", "v")])).expect("query");
    assert!(q.ends_with(r#","quo\"te"="v"}"#), "{q}");
}

#[test]
fn refuses_matchers_that_would_fake_clearance() {
    for bad in [
        m(&[("", "v")]),
        m(&[("alertname", "Other")]),
        m(&[("alertstate", "pending")]),
    ] {
        let e = alerts_query("X", &bad).expect_err("refused");
        assert_eq!(e.label(), "invalid_input");
        assert!(am_filters("X", &bad).is_err());
    }
    assert!(alerts_query("", &m(&[])).is_err());
}

#[test]
fn parses_prometheus_answers() {
    let ok = StatusCode::OK;
    let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
    assert!(matches!(parse_prometheus(ok, empty), Ok(PromData::Vector(v)) if v.is_empty()));
    let one = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"__name__":"ALERTS","alertname":"X"},"value":[1700000000.5,"1"]}]}}"#;
    assert!(matches!(parse_prometheus(ok, one), Ok(PromData::Vector(v)) if v.len() == 1));
    let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#;
    assert!(matches!(
        parse_prometheus(ok, scalar),
        Ok(PromData::Scalar(_))
    ));

    let err = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
    let e = parse_prometheus(StatusCode::BAD_REQUEST, err).expect_err("error");
    assert_eq!(e.label(), "query_error");
    assert!(e.to_string().contains("bad_data"));

    let cases: [(StatusCode, &[u8], &str); 6] = [
        (
            StatusCode::BAD_GATEWAY,
            b"<html>proxy</html>",
            "http_status",
        ),
        (ok, b"{", "malformed"),
        (ok, b"[]", "malformed"),
        (ok, br#"{"status":"weird","data":{}}"#, "malformed"),
        (ok, br#"{"status":"success"}"#, "malformed"),
        (
            ok,
            br#"{"status":"success","data":{"resultType":"exemplar","result":[]}}"#,
            "malformed",
        ),
    ];
    for (status, body, label) in cases {
        let e = parse_prometheus(status, body).expect_err("rejected");
        assert_eq!(e.label(), label, "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn parses_alertmanager_answers() {
    let ok = StatusCode::OK;
    assert!(parse_alertmanager(ok, b"[]").expect("empty").is_empty());
    let one = br#"[{"annotations":{},"endsAt":"2023-01-01T00:00:00Z","fingerprint":"abc",
        "receivers":[{"name":"r"}],"startsAt":"2023-01-01T00:00:00Z",
        "status":{"inhibitedBy":[],"silencedBy":["s1"],"state":"suppressed"},
        "updatedAt":"2023-01-01T00:00:00Z","labels":{"alertname":"X"}}]"#;
    let a = parse_alertmanager(ok, one).expect("one");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].status.as_ref().map(|s| s.silenced_by.len()), Some(1));
    let e =
        parse_alertmanager(StatusCode::BAD_REQUEST, b"\"bad matcher format\"").expect_err("400");
    assert_eq!(e.label(), "query_error");
    assert_eq!(
        parse_alertmanager(StatusCode::INTERNAL_SERVER_ERROR, b"")
            .expect_err("500")
            .label(),
        "http_status"
    );
    assert_eq!(
        parse_alertmanager(ok, b"{}").expect_err("object").label(),
        "malformed"
    );
}

#[test]
fn builds_recovery_queries() {
    let now = recovery_query(&["A", "B\"x"], None).expect("query");
    assert_eq!(
        now,
        r#"ALERTS{alertname="A",alertstate="firing"} or ALERTS{alertname="B\"x",alertstate="firing"}"#
    );
    let within = recovery_query(&["A"], Some(std::time::Duration::from_secs(3600))).expect("query");
    assert_eq!(
        within,
        r#"max_over_time(ALERTS{alertname="A",alertstate="firing"}[3600s])"#
    );
    for q in [now, within] {
        let parsed = promql_parser::parser::parse(&q);
        assert!(parsed.is_ok(), "{q}: {parsed:?}");
    }
    assert_eq!(
        recovery_query(&[], None).expect_err("empty").label(),
        "invalid_input"
    );
    assert!(recovery_query(&[""], None).is_err());
}

#[test]
fn recovery_answers_are_checked_and_stripped() {
    let ok = StatusCode::OK;
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"__name__":"ALERTS","alertname":"A","alertstate":"firing","kind":"K"},"value":[1,"1"]},
        {"metric":{"alertname":"A","alertstate":"firing","kind":"L"},"value":[1,"1"]}]}}"#;
    let none = BTreeMap::new();
    let sets = firing_label_sets(parse_prometheus(ok, body).expect("parse"), &["A"], &none)
        .expect("label sets");
    assert_eq!(
        sets,
        vec![
            m(&[("alertname", "A"), ("kind", "K")]),
            m(&[("alertname", "A"), ("kind", "L")])
        ]
    );
    // External labels are added as Prometheus adds them to the alerts it
    // sends: where the series lacks them, never over its own value.
    let external = m(&[("cluster", "prod"), ("kind", "ext")]);
    let sets = firing_label_sets(
        parse_prometheus(ok, body).expect("parse"),
        &["A"],
        &external,
    )
    .expect("label sets");
    assert_eq!(
        sets,
        vec![
            m(&[("alertname", "A"), ("cluster", "prod"), ("kind", "K")]),
            m(&[("alertname", "A"), ("cluster", "prod"), ("kind", "L")])
        ]
    );
    let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
    let empty = firing_label_sets(parse_prometheus(ok, empty).expect("parse"), &["A"], &none);
    assert!(empty.expect("empty is an answer").is_empty());
    for bad in [
        // Not asked for, no alertname, pending, not a vector.
        &br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"alertname":"Z"},"value":[1,"1"]}]}}"#[..],
        br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"kind":"K"},"value":[1,"1"]}]}}"#,
        br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"alertname":"A","alertstate":"pending"},"value":[1,"1"]}]}}"#,
        br#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#,
    ] {
        let e = firing_label_sets(parse_prometheus(ok, bad).expect("parse"), &["A"], &none)
            .expect_err("refused");
        assert_eq!(e.label(), "malformed", "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn prometheus_special_floats() {
    assert!(prom_float("NaN").expect("nan").is_nan());
    assert_eq!(prom_float("+Inf").expect("inf"), f64::INFINITY);
    assert_eq!(prom_float("-Inf").expect("-inf"), f64::NEG_INFINITY);
    assert_eq!(prom_float("0.25").expect("num"), 0.25);
    assert_eq!(prom_float("1e-3").expect("exp"), 0.001);
    assert_eq!(prom_float("x").expect_err("bad").label(), "malformed");
}

/// A loopback HTTP stub answering `body` to every request; returns its
/// URL and the User-Agent header of each request it saw.
async fn stub(body: &'static str) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let ua = String::from_utf8_lossy(&head)
                .lines()
                .find_map(|l| {
                    l.split_once(':')
                        .filter(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
                        .map(|(_, v)| v.trim().to_string())
                })
                .unwrap_or_default();
            record.lock().expect("lock").push(ua);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(reply.as_bytes()).await;
        }
    });
    (url, seen)
}

#[tokio::test]
async fn prometheus_and_alertmanager_requests_name_remedy_and_its_version() {
    let (prom, prom_seen) =
        stub(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#).await;
    let (am, am_seen) = stub("[]").await;
    let cfg = SignalsConfig {
        prometheus_url: Some(prom),
        alertmanager_url: Some(am),
        ..SignalsConfig::default()
    };
    let v = Verifier::new(&cfg, Arc::new(Metrics::new(1))).expect("verifier");
    assert_eq!(v.query_scalar("vector(1)").await.expect("query"), None);
    assert!(v.am_alerts(&[]).await.expect("alerts").is_empty());
    let want = format!("remedy/{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(*prom_seen.lock().expect("lock"), vec![want.clone()]);
    assert_eq!(*am_seen.lock().expect("lock"), vec![want]);
}

#[tokio::test]
async fn no_prometheus_means_no_proof() {
    let cfg = SignalsConfig::default();
    let v = Verifier::new(&cfg, Arc::new(Metrics::new(1))).expect("verifier");
    let e = v
        .cleared("X", &BTreeMap::new(), None)
        .await
        .expect_err("no proof");
    assert_eq!(e.label(), "not_configured");
    assert!(v.query_scalar("vector(1)").await.is_err());
    assert_eq!(
        v.alert_label_sets(&["X"], None)
            .await
            .expect_err("no Prometheus")
            .label(),
        "not_configured"
    );
    assert!(v.health().status().is_empty());
}

#[test]
fn health_tracks_last_error_and_success() {
    let h = SignalHealth::with_targets(&[PROMETHEUS, ALERTMANAGER]);
    assert_eq!(h.status(), vec![(ALERTMANAGER, None), (PROMETHEUS, None)]);
    h.observe(PROMETHEUS, Err("timeout"));
    assert_eq!(h.status()[1], (PROMETHEUS, Some("timeout")));
    assert_eq!(h.last_success(PROMETHEUS), None);
    h.observe(PROMETHEUS, Ok(()));
    assert_eq!(h.status()[1], (PROMETHEUS, None));
    assert!(h.last_success(PROMETHEUS).is_some());
}
