use super::*;

/// As Alertmanager 0.25 sends it (notify/webhook + template.Data).
const AM_025: &str = r#"{
  "receiver": "remedy",
  "status": "firing",
  "alerts": [
    {
      "status": "firing",
      "labels": {"alertname": "MachineStuck", "namespace": "capi", "name": "m-1",
                 "severity": "warning", "prometheus": "monitoring/k8s"},
      "annotations": {"summary": "Machine m-1 is stuck"},
      "startsAt": "2023-03-14T10:15:30.123456789Z",
      "endsAt": "0001-01-01T00:00:00Z",
      "generatorURL": "http://prometheus:9090/graph?g0.expr=remedy_resources&g0.tab=1",
      "fingerprint": "c4f7d1a3b2e6f890"
    },
    {
      "status": "resolved",
      "labels": {"alertname": "MachineStuck", "namespace": "capi", "name": "m-2"},
      "annotations": {},
      "startsAt": "2023-03-14T09:00:00+01:00",
      "endsAt": "2023-03-14T10:10:00Z",
      "generatorURL": "",
      "fingerprint": "0a1b2c3d4e5f6789"
    }
  ],
  "groupLabels": {"alertname": "MachineStuck"},
  "commonLabels": {"alertname": "MachineStuck", "namespace": "capi"},
  "commonAnnotations": {},
  "externalURL": "http://alertmanager:9093",
  "version": "4",
  "groupKey": "{}/{severity=\"warning\"}:{alertname=\"MachineStuck\"}",
  "truncatedAlerts": 0,
  "someFutureField": {"nested": [1, 2, 3]}
}"#;

fn with(f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_str(AM_025).expect("fixture");
    f(&mut v);
    serde_json::to_vec(&v).expect("serialize")
}

fn invalid(body: &[u8]) -> String {
    match parse(body) {
        Err(e @ (WebhookError::Invalid(_) | WebhookError::TooLarge(_))) => e.to_string(),
        other => panic!("expected invalid, got {other:?}"),
    }
}

#[test]
fn parses_alertmanager_025_payload() {
    let (n, alerts) = parse(AM_025.as_bytes()).expect("valid");
    assert_eq!(n.receiver, "remedy");
    assert_eq!(n.status, AlertStatus::Firing);
    assert_eq!(n.external_url, "http://alertmanager:9093");
    assert_eq!(
        n.group_labels.get("alertname").map(String::as_str),
        Some("MachineStuck")
    );
    assert_eq!(alerts.len(), 2);
    let a = &alerts[0];
    assert_eq!(a.fingerprint, "c4f7d1a3b2e6f890");
    assert_eq!(a.alertname.as_deref(), Some("MachineStuck"));
    assert_eq!(a.status, AlertStatus::Firing);
    assert_eq!(
        a.starts_at.to_rfc3339(),
        "2023-03-14T10:15:30.123456789+00:00"
    );
    assert_eq!(a.ends_at, None, "Go zero time means unset");
    let b = &alerts[1];
    assert_eq!(b.status, AlertStatus::Resolved);
    assert_eq!(b.starts_at.to_rfc3339(), "2023-03-14T08:00:00+00:00");
    assert_eq!(
        b.ends_at.map(|t| t.to_rfc3339()).as_deref(),
        Some("2023-03-14T10:10:00+00:00")
    );
}

#[test]
fn tolerates_go_nil_maps() {
    let body = with(|v| {
        v["commonAnnotations"] = serde_json::Value::Null;
        v["alerts"][0]["annotations"] = serde_json::Value::Null;
    });
    assert!(parse(&body).is_ok());
}

#[test]
fn rejects_wrong_version() {
    let body = with(|v| v["version"] = "3".into());
    assert!(invalid(&body).contains("unsupported version"));
}

#[test]
fn rejects_unknown_status() {
    let body = with(|v| v["alerts"][1]["status"] = "pending".into());
    assert!(invalid(&body).contains("unknown variant"));
    let body = with(|v| v["status"] = "".into());
    assert!(invalid(&body).contains("unknown variant"));
}

#[test]
fn rejects_missing_or_bad_fingerprint() {
    let body = with(|v| v["alerts"][0]["fingerprint"] = "".into());
    assert!(invalid(&body).contains("alerts[0].fingerprint"));
    let body = with(|v| v["alerts"][1]["fingerprint"] = "a\"b".into());
    assert!(invalid(&body).contains("alerts[1].fingerprint"));
    let body = with(|v| {
        if let Some(a) = v["alerts"][0].as_object_mut() {
            a.remove("fingerprint");
        }
    });
    assert!(invalid(&body).contains("missing field `fingerprint`"));
}

#[test]
fn rejects_bad_times() {
    let body = with(|v| v["alerts"][0]["startsAt"] = "yesterday".into());
    assert!(invalid(&body).contains("alerts[0].startsAt: not RFC 3339"));
    let body = with(|v| v["alerts"][0]["startsAt"] = "0001-01-01T00:00:00Z".into());
    assert!(invalid(&body).contains("alerts[0].startsAt: unset"));
    let body = with(|v| v["alerts"][1]["endsAt"] = "2023-13-01T00:00:00Z".into());
    assert!(invalid(&body).contains("alerts[1].endsAt"));
}

#[test]
fn rejects_oversized_and_invalid_labels() {
    let long = "x".repeat(MAX_LABEL_BYTES + 1);
    let body = with(|v| v["alerts"][0]["labels"]["name"] = long.clone().into());
    assert!(invalid(&body).contains("longer than 1024 bytes"));
    let body = with(|v| v["alerts"][0]["labels"][long.as_str()] = "v".into());
    assert!(invalid(&body).contains("longer than 1024 bytes"));
    let body = with(|v| v["alerts"][0]["labels"][""] = "v".into());
    assert!(invalid(&body).contains("invalid label name \"\""));
    // Prometheus 3 sends UTF-8 names (OpenTelemetry attributes); one
    // such label must not refuse the whole notification.
    let body = with(|v| v["alerts"][0]["labels"]["k8s.namespace.name"] = "ns".into());
    assert!(parse(&body).is_ok());
    let body = with(|v| {
        for i in 0..=MAX_LABELS {
            v["alerts"][0]["labels"][format!("l{i}")] = "v".into();
        }
    });
    assert!(invalid(&body).contains("more than 256 labels"));
}

#[test]
fn rejects_too_many_alerts() {
    let body = with(|v| {
        let one = v["alerts"][0].clone();
        v["alerts"] = serde_json::Value::Array(vec![one; MAX_ALERTS + 1]);
    });
    assert!(matches!(parse(&body), Err(WebhookError::TooLarge(_))));
}

#[test]
fn malformed_json_is_malformed_not_invalid() {
    assert!(matches!(
        parse(b"{\"version\":"),
        Err(WebhookError::Malformed(_))
    ));
    assert!(matches!(
        parse(b"not json"),
        Err(WebhookError::Malformed(_))
    ));
    // Nesting never reaches a recursive parse: every position is typed,
    // so the first wrong type rejects it, and unknown fields are skipped
    // iteratively. Either way no stack overflow and no large allocation.
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    for body in [
        deep(100_000),
        format!(r#"{{"version":{}}}"#, deep(100_000)),
        format!(
            r#"{{"version":"4","alerts":[{{"labels":{}}}]}}"#,
            deep(100_000)
        ),
    ] {
        let e = parse(body.as_bytes()).expect_err("deep nesting");
        assert_eq!(e.label(), "rejected");
    }
    let body = with(|v| v["x"] = serde_json::Value::Null);
    let body = String::from_utf8(body)
        .expect("utf8")
        .replacen("null", &deep(100_000), 1);
    assert!(
        parse(body.as_bytes()).is_ok(),
        "deep unknown field is skipped"
    );
}

#[test]
fn reasons_are_capped() {
    let body = with(|v| v["alerts"][0]["status"] = "y".repeat(10_000).into());
    assert!(invalid(&body).chars().count() < MAX_REASON_CHARS + 50);
}

#[test]
fn error_labels_and_statuses() {
    let cases = [
        (WebhookError::Unauthorized, "unauthorized", 401, "invalid"),
        (
            WebhookError::UnsupportedMediaType,
            "rejected",
            415,
            "invalid",
        ),
        (
            WebhookError::TooLarge(String::new()),
            "too_large",
            413,
            "invalid",
        ),
        (
            WebhookError::Malformed(String::new()),
            "rejected",
            400,
            "invalid",
        ),
        (
            WebhookError::Invalid(String::new()),
            "rejected",
            400,
            "invalid",
        ),
        (
            WebhookError::Overloaded(AlertStatus::Firing),
            "overloaded",
            503,
            "firing",
        ),
        (
            WebhookError::Closed(AlertStatus::Resolved),
            "overloaded",
            503,
            "resolved",
        ),
    ];
    for (e, label, code, status) in cases {
        assert_eq!(e.label(), label);
        assert_eq!(e.http_status().as_u16(), code);
        assert_eq!(e.status().label(), status);
    }
}

#[test]
fn token_file_is_trimmed_and_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("token");
    std::fs::write(&p, "s3cret\n").expect("write");
    assert_eq!(&*load_token(&p).expect("token"), b"s3cret");
    std::fs::write(&p, "\n").expect("write");
    assert_eq!(load_token(&p).expect_err("empty").label(), "token");
    std::fs::write(&p, "a b").expect("write");
    assert!(load_token(&p).is_err());
    assert!(load_token(&dir.path().join("missing")).is_err());
}

fn counts(accepted: usize, duplicate: usize, ignored: usize, unselectable: usize) -> Summary {
    Summary {
        accepted,
        duplicate,
        ignored,
        unselectable,
        unselectable_why: None,
    }
}

#[test]
fn notifications_are_summarised_once_per_period() {
    let t0 = Instant::now();
    let every = Duration::from_secs(60);
    let mut s = Summarizer::new(every, t0);
    for i in 0..1000 {
        let at = t0 + Duration::from_millis(i * 50);
        assert_eq!(
            s.add(Ok(&counts(2, 0, 0, 0)), at),
            None,
            "no line before the period"
        );
    }
    assert_eq!(s.add(Err("overloaded"), t0 + Duration::from_secs(59)), None);
    let (t, covered) = s
        .add(Ok(&counts(0, 1, 1, 3)), t0 + every)
        .expect("a summary after the period");
    assert_eq!(covered, every);
    assert_eq!(
        t,
        Tally {
            notifications: 1002,
            accepted: 2000,
            duplicate: 1,
            ignored: 1,
            unselectable: 3,
            refused: [("overloaded", 1)].into(),
        }
    );
    // Counting starts over.
    assert_eq!(
        s.add(Ok(&counts(1, 0, 0, 0)), t0 + every + Duration::from_secs(1)),
        None
    );
    let (t, _) = s
        .add(Ok(&counts(1, 0, 0, 0)), t0 + every * 2)
        .expect("second summary");
    assert_eq!((t.notifications, t.accepted), (2, 2));
}

#[test]
fn a_rotated_token_is_accepted_with_the_old_one_for_the_grace_period() {
    let t0 = Instant::now();
    let grace = Duration::from_secs(30);
    let mut t = Tokens::new(Arc::from(&b"old"[..]));
    assert!(t.accepts(b"old", t0));
    assert!(!t.accepts(b"new", t0));
    assert!(!t.rotate(Arc::from(&b"old"[..]), t0, grace), "unchanged");
    assert!(t.rotate(Arc::from(&b"new"[..]), t0, grace));
    assert!(t.accepts(b"new", t0));
    assert!(t.accepts(b"old", t0 + grace - Duration::from_millis(1)));
    assert!(!t.accepts(b"old", t0 + grace), "grace over");
    assert!(t.accepts(b"new", t0 + grace * 100));
    assert!(!t.accepts(b"ol", t0) && !t.accepts(b"", t0));
    // Rotating again drops the first token at once.
    let t1 = t0 + Duration::from_secs(1);
    assert!(t.rotate(Arc::from(&b"newer"[..]), t1, grace));
    assert!(!t.accepts(b"old", t1));
    assert!(t.accepts(b"new", t1) && t.accepts(b"newer", t1));
}

#[test]
fn token_store_reload_follows_the_file_and_keeps_the_token_on_a_bad_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("token");
    std::fs::write(&p, "first\n").expect("write");
    let store = TokenStore::from_file(&p, Duration::from_secs(60)).expect("store");
    assert!(!store.reload().expect("unchanged"));
    std::fs::write(&p, "second\n").expect("write");
    assert!(store.reload().expect("rotated"));
    assert!(store.accepts(b"second") && store.accepts(b"first"));
    std::fs::write(&p, "\n").expect("write");
    assert_eq!(store.reload().expect_err("empty").label(), "token");
    assert!(store.accepts(b"second"), "a bad file changes nothing");
}

fn state(token: &str, names: &[&str], queue: usize) -> (WebhookState, mpsc::Receiver<AlertEvent>) {
    let (tx, rx) = mpsc::channel(queue);
    let s = WebhookState::new(
        Arc::from(token.as_bytes()),
        1 << 20,
        names.iter().map(|s| s.to_string()),
        tx,
        Arc::new(Mutex::new(Dedupe::new(100))),
        Arc::new(Metrics::new(10)),
    );
    (s, rx)
}

#[tokio::test]
async fn bearer_token_check() {
    let (s, _rx) = state("s3cret", &[], 1);
    let mut h = HeaderMap::new();
    assert!(!s.authorized(&h).await);
    for (value, ok) in [
        ("Bearer s3cret", true),
        ("bearer s3cret", true),
        ("Bearer s3cre", false),
        ("Bearer s3cret2", false),
        ("Basic s3cret", false),
        ("s3cret", false),
        ("Bearer ", false),
    ] {
        h.insert(header::AUTHORIZATION, value.parse().expect("header"));
        assert_eq!(s.authorized(&h).await, ok, "{value}");
    }
}

#[test]
fn an_unknown_token_rereads_at_most_once_per_period_and_waits_share_one_read() {
    let t0 = tokio::time::Instant::now();
    let every = REREAD_EVERY;
    let ms = Duration::from_millis;
    assert_eq!(
        reread_plan(None, t0, every),
        Reread::At(t0),
        "first: at once"
    );
    // Arrived before a read began: that read covers it.
    assert_eq!(reread_plan(Some(t0), t0 - ms(1), every), Reread::Shared);
    assert_eq!(reread_plan(Some(t0), t0, every), Reread::Shared);
    // Arrived after: the next read, not before `every` has passed.
    assert_eq!(
        reread_plan(Some(t0), t0 + ms(10), every),
        Reread::At(t0 + every)
    );
    assert_eq!(
        reread_plan(Some(t0), t0 + ms(1500), every),
        Reread::At(t0 + ms(1500)),
        "long after: at once"
    );
}

#[tokio::test]
async fn an_unknown_token_rereads_the_file_and_is_accepted_if_rotated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("token");
    std::fs::write(&p, "first\n").expect("write");
    let store = Arc::new(TokenStore::from_file(&p, Duration::from_secs(60)).expect("store"));
    let known = store.check(b"first").await;
    assert!(
        known.accepted && known.reread.is_none(),
        "no read for a known token"
    );

    std::fs::write(&p, "second\n").expect("write");
    let start = tokio::time::Instant::now();
    let c = store.check(b"second").await;
    assert!(c.accepted, "rotated token accepted by the first request");
    assert!(matches!(c.reread, Some(Ok(true))), "{c:?}");
    assert!(
        start.elapsed() < REREAD_EVERY / 2,
        "no wait for the first read"
    );
    assert!(
        store.check(b"first").await.accepted,
        "previous one in grace"
    );

    // 50 concurrent wrong tokens right after: one read, a second later.
    let checks: Vec<_> = (0..50)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.check(format!("bad{i}").as_bytes()).await })
        })
        .collect();
    let mut reads = 0;
    for c in checks {
        let c = c.await.expect("check");
        assert!(!c.accepted);
        reads += usize::from(c.reread.is_some());
    }
    assert_eq!(reads, 1, "a flood shares one read");
    let took = start.elapsed();
    assert!(
        took >= REREAD_EVERY && took < REREAD_EVERY * 2,
        "the read waited for its turn: {took:?}"
    );

    // A file that does not read keeps the tokens; the error is reported.
    std::fs::write(&p, "\n").expect("write");
    tokio::time::sleep(REREAD_EVERY).await;
    let c = store.check(b"bad").await;
    assert!(!c.accepted);
    assert!(matches!(c.reread, Some(Err(_))), "{c:?}");
    assert!(store.check(b"second").await.accepted);

    let fixed = TokenStore::fixed(Arc::from(&b"t"[..]));
    let c = fixed.check(b"u").await;
    assert!(!c.accepted && c.reread.is_none(), "no file, no read");
}

#[test]
fn forwards_configured_new_alerts_only() {
    let (s, mut rx) = state("t", &["MachineStuck"], 10);
    let (n, alerts) = parse(AM_025.as_bytes()).expect("valid");
    let now = Utc::now();
    let sum = s
        .forward(&n.group_key, alerts.clone(), now)
        .expect("forward");
    assert_eq!((sum.accepted, sum.duplicate, sum.ignored), (2, 0, 0));
    let ev = rx.try_recv().expect("event");
    assert_eq!(ev.fingerprint, "c4f7d1a3b2e6f890");
    assert_eq!(ev.group_key, n.group_key);
    assert_eq!(ev.received_at, now);
    assert_eq!(ev.labels.get("name").map(String::as_str), Some("m-1"));
    assert!(rx.try_recv().is_ok());
    // The group interval re-send: nothing new.
    let sum = s.forward(&n.group_key, alerts, now).expect("forward");
    assert_eq!((sum.accepted, sum.duplicate), (0, 2));
    assert!(rx.try_recv().is_err());

    let (s, mut rx) = state("t", &["Other"], 10);
    let (_, alerts) = parse(AM_025.as_bytes()).expect("valid");
    let sum = s.forward("g", alerts, now).expect("forward");
    assert_eq!((sum.accepted, sum.ignored), (0, 2));
    assert!(rx.try_recv().is_err());
}

#[test]
fn full_queue_records_nothing_for_the_refused_alert() {
    let (s, mut rx) = state("t", &["MachineStuck"], 1);
    let (_, alerts) = parse(AM_025.as_bytes()).expect("valid");
    let now = Utc::now();
    let e = s.forward("g", alerts.clone(), now).expect_err("full");
    assert!(matches!(e, WebhookError::Overloaded(AlertStatus::Resolved)));
    assert_eq!(
        rx.try_recv().map(|e| e.fingerprint).as_deref(),
        Ok("c4f7d1a3b2e6f890")
    );
    // Retry: the first is a duplicate, the second is accepted now.
    let sum = s.forward("g", alerts, now).expect("retry");
    assert_eq!((sum.accepted, sum.duplicate), (1, 1));
    assert_eq!(
        rx.try_recv().map(|e| e.fingerprint).as_deref(),
        Ok("0a1b2c3d4e5f6789")
    );
}

#[test]
fn closed_queue_is_503() {
    let (s, rx) = state("t", &["MachineStuck"], 1);
    drop(rx);
    let (_, alerts) = parse(AM_025.as_bytes()).expect("valid");
    let e = s.forward("g", alerts, Utc::now()).expect_err("closed");
    assert_eq!(e.http_status(), StatusCode::SERVICE_UNAVAILABLE);
    // Nothing was recorded: it is new once the processor is back.
    let dedupe = s.dedupe.lock().expect("lock");
    assert!(dedupe.is_empty());
}

/// `MachineStuck`'s selector: namespace and name.
fn with_rules(s: &mut WebhookState) {
    s.rules = AlertRules::new(vec![crate::config::AlertRule {
        alertname: "MachineStuck".into(),
        select: crate::config::Selector {
            namespace_label: Some("namespace".into()),
            name_label: Some("name".into()),
            ..crate::config::Selector::default()
        },
        verify_query: None,
        allow_cluster_wide: false,
        max_resources: 200,
    }]);
}

fn notifications(m: &Metrics, status: WebhookStatus, result: WebhookResult) -> u64 {
    m.signals
        .notifications
        .get_or_create(&crate::metrics::WebhookLabels { status, result })
        .get()
}

/// #38.15: an alert whose namespace label is 1,000 bytes long names no
/// object; it was answered 200 and counted `accepted`, and never reached
/// the episode record. It is refused, counted `unselectable`, not
/// remembered (a repeat is refused again), and the rest of the
/// notification goes on.
#[test]
fn an_alert_whose_labels_can_match_no_object_is_refused_not_accepted() {
    let (mut s, mut rx) = state("t", &["MachineStuck"], 10);
    with_rules(&mut s);
    let long = "x".repeat(1000);
    let body = with(|v| v["alerts"][0]["labels"]["namespace"] = long.clone().into());
    let (_, alerts) = parse(&body).expect("valid: under the label bound");
    let sum = s.forward("g", alerts.clone(), Utc::now()).expect("forward");
    assert_eq!(
        (sum.accepted, sum.duplicate, sum.ignored, sum.unselectable),
        (1, 0, 0, 1)
    );
    let why = sum.unselectable_why.as_deref().unwrap_or_default();
    assert!(
        why.contains("MachineStuck") && why.contains("label namespace is 1000 bytes"),
        "{why}"
    );
    assert!(!why.contains(&long), "the value is not echoed");
    assert_eq!(
        rx.try_recv().map(|e| e.fingerprint).as_deref(),
        Ok("0a1b2c3d4e5f6789"),
        "only the alert that names an object goes on"
    );
    assert!(rx.try_recv().is_err());
    let m = &s.metrics;
    use WebhookResult::{Accepted, Unselectable};
    assert_eq!(notifications(m, WebhookStatus::Firing, Unselectable), 1);
    assert_eq!(notifications(m, WebhookStatus::Firing, Accepted), 0);
    assert_eq!(notifications(m, WebhookStatus::Resolved, Accepted), 1);
    // Alertmanager sends the group again: refused again, not a duplicate.
    let sum = s.forward("g", alerts, Utc::now()).expect("forward");
    assert_eq!((sum.duplicate, sum.unselectable), (1, 1));
    assert_eq!(notifications(m, WebhookStatus::Firing, Unselectable), 2);
    // Without selectors (names only) nothing is judged so.
    let (s, _rx) = state("t", &["MachineStuck"], 10);
    let (_, alerts) = parse(&body).expect("valid");
    let sum = s.forward("g", alerts, Utc::now()).expect("forward");
    assert_eq!((sum.accepted, sum.unselectable), (2, 0));
}

/// The answer says so: a 200 whose body names the refusal and its cause.
#[tokio::test]
async fn the_answer_says_which_alerts_were_refused_and_why() {
    use tower::ServiceExt;
    let (mut s, _rx) = state("t", &["MachineStuck"], 10);
    with_rules(&mut s);
    let body = with(|v| {
        for i in 0..2 {
            v["alerts"][i]["labels"]["name"] = "m".repeat(254).into();
        }
    });
    let req = axum::http::Request::post(PATH)
        .header(header::AUTHORIZATION, "Bearer t")
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body))
        .expect("request");
    let resp = router(s).oneshot(req).await.expect("answer");
    assert_eq!(resp.status(), StatusCode::OK);
    let text = axum::body::to_bytes(resp.into_body(), 1 << 16)
        .await
        .expect("body");
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.starts_with("accepted 0, duplicate 0, ignored 0, unselectable 2\n"),
        "{text}"
    );
    assert!(
        text.contains("refused 2 alert(s) whose labels can match no object")
            && text.contains("alert MachineStuck: label name is 254 bytes"),
        "{text}"
    );
    // One that names an object is answered as before, nothing more.
    let (mut s, _rx) = state("t", &["MachineStuck"], 10);
    with_rules(&mut s);
    assert_eq!(
        answer(
            &s.forward("g", parse(AM_025.as_bytes()).expect("valid").1, Utc::now())
                .expect("forward")
        ),
        "accepted 2, duplicate 0, ignored 0, unselectable 0\n"
    );
}
