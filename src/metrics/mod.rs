//! Every metric remedy exports, in one registry that each component's
//! small metrics struct registers its own families in. Names follow
//! docs/reference/metrics.md, which the tests below check against it; prometheus-client appends `_total` to
//! counters and unit suffixes itself (docs/upstream-behaviour.md,
//! "prometheus-client 0.26 naming").

mod actions;
mod apiserver;
mod engine;
mod exposition;
mod http;
pub mod labels;
mod process;
mod record;
mod remediation;
mod series;
mod signals;
pub mod values;
mod watch;

pub use actions::ActionMetrics;
pub use apiserver::ApiserverMetrics;
pub use engine::EngineMetrics;
pub use exposition::{CONTENT_TYPE, Format};
pub use http::HttpMetrics;
pub use labels::*;
pub use process::ProcessMetrics;
pub use record::RecordMetrics;
pub use remediation::RemediationMetrics;
pub use series::ResourceSeries;
pub use signals::SignalMetrics;
pub use watch::WatchMetrics;

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

type FGauge = Gauge<f64, AtomicU64>;

/// What the configuration says remedy will export, for [`Metrics::preset`].
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// Watched kinds.
    pub kinds: Vec<String>,
    /// Configured alert names.
    pub alerts: Vec<String>,
    /// The signal sources configured.
    pub signal_targets: Vec<values::SignalTarget>,
    pub webhook: bool,
    pub tls: bool,
    /// The episode record is used (leader election on).
    pub record: bool,
    /// The pause switch is read (`pause_switch.configmap` set).
    pub pause_switch: bool,
}

impl Known {
    pub fn from_config(
        cfg: &crate::config::Config,
        profiles: &[crate::model::profile::Profile],
    ) -> Self {
        let mut kinds: Vec<String> = profiles.iter().map(|p| p.kind.clone()).collect();
        kinds.sort();
        kinds.dedup();
        // Alertmanager is only queried alongside Prometheus (signals::verify).
        let mut signal_targets = Vec::new();
        if cfg.signals.prometheus_url.is_some() {
            signal_targets.push(values::SignalTarget::Prometheus);
            if cfg.signals.alertmanager_url.is_some() {
                signal_targets.push(values::SignalTarget::Alertmanager);
            }
        }
        Self {
            kinds,
            alerts: cfg.alerts.iter().map(|a| a.alertname.clone()).collect(),
            signal_targets,
            webhook: cfg.webhook.token_file.is_some(),
            tls: cfg.tls.is_some(),
            record: cfg.leader_election.enabled,
            pause_switch: !cfg.pause_switch.configmap.is_empty(),
        }
    }
}

/// The registry and every component's metrics. Each component is handed
/// this and writes only its own part.
pub struct Metrics {
    registry: Registry,
    pub engine: EngineMetrics,
    pub actions: ActionMetrics,
    pub signals: SignalMetrics,
    pub record: RecordMetrics,
    pub watch: WatchMetrics,
    pub apiserver: ApiserverMetrics,
    pub http: HttpMetrics,
    pub process: ProcessMetrics,
    /// Cluster API external remediation requests.
    pub remediation: RemediationMetrics,
    /// Per-resource series, bounded by `max_resource_series`.
    pub series: ResourceSeries,
    /// Size of the last exposition, to allocate the next one at once.
    last_encoded: AtomicUsize,
}

impl Metrics {
    pub fn new(max_resource_series: usize) -> Self {
        let mut registry = Registry::default();
        let r = &mut registry;
        let engine = EngineMetrics::register(r);
        let actions = ActionMetrics::register(r);
        let signals = SignalMetrics::register(r);
        let record = RecordMetrics::register(r);
        let watch = WatchMetrics::register(r);
        let apiserver = ApiserverMetrics::register(r);
        let http = HttpMetrics::register(r);
        let process = ProcessMetrics::register(r);
        let remediation = RemediationMetrics::register(r);
        let series = ResourceSeries::register(r, max_resource_series);
        r.register(
            "remedy_build",
            "Build information",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Self {
            registry,
            engine,
            actions,
            signals,
            record,
            watch,
            apiserver,
            http,
            process,
            remediation,
            series,
            last_encoded: AtomicUsize::new(0),
        }
    }

    /// Creates every counter series with a known label set at 0.
    pub fn preset(&self, known: &Known) {
        self.actions.preset();
        self.signals
            .preset(known.webhook, &known.signal_targets, &known.alerts);
        self.watch.preset(&known.kinds);
        self.engine.preset(&known.kinds);
        if known.record {
            self.record.preset();
        }
        self.http.preset(known.tls);
        self.process.preset(known.pause_switch);
        self.remediation.preset();
    }

    /// OpenMetrics exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        self.encode_as(Format::OpenMetrics)
    }

    pub fn encode_as(&self, format: Format) -> Result<String, std::fmt::Error> {
        // A 20 MiB body that grows by doubling copies itself ~twice over.
        let mut out = String::with_capacity(self.last_encoded.load(Ordering::Relaxed) + 4096);
        match format {
            Format::OpenMetrics => text::encode_registry(&mut out, &self.registry)?,
            Format::Text004 => prometheus_text::encode(&mut out, &self.registry)?,
        }
        self.series.encode(&mut out, format)?;
        if format == Format::OpenMetrics {
            text::encode_eof(&mut out)?;
        }
        self.last_encoded.store(out.len(), Ordering::Relaxed);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::series::{BACKOFF_DELAY_HELP, CRASHES, CRASHES_HELP, INLINE_NAME, RELEASE_ETA_HELP};
    use super::*;
    use crate::model::view::ResourceKey;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::registry::Unit;
    use std::collections::{BTreeMap, BTreeSet};

    /// Minimal OpenMetrics text parser: sample name+labels → value.
    fn samples(text: &str) -> Vec<(String, f64)> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (name, value) = l.rsplit_once(' ').expect("sample line");
                (name.to_string(), value.parse().expect("numeric value"))
            })
            .collect()
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        samples(text)
            .into_iter()
            .find(|(n, _)| n == series)
            .map(|(_, v)| v)
    }

    #[test]
    fn exposition_uses_design_names_and_ends_with_eof() {
        let m = Metrics::new(10);
        let key = ResourceKey::new("Machine", "default", "m-1");
        m.series.set(&key, 3, 480.0);
        m.actions.count("unpause", values::ActionResult::Success);
        m.watch.event("Machine", values::WatchEvent::Apply);
        m.engine
            .transient_errors
            .get_or_create(&ErrorLabels {
                namespace: "default".into(),
                kind: "Machine".into(),
                reason: "server_error".into(),
            })
            .inc();
        let text = m.encode().unwrap();
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(
            value(
                &text,
                r#"remedy_resource_crashes{namespace="default",kind="Machine",name="m-1"}"#
            ),
            Some(3.0)
        );
        assert_eq!(
            value(
                &text,
                r#"remedy_resource_backoff_delay_seconds{namespace="default",kind="Machine",name="m-1"}"#
            ),
            Some(480.0)
        );
        assert_eq!(
            value(
                &text,
                r#"remedy_actions_total{action="unpause",result="success"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                r#"remedy_transient_errors_total{namespace="default",kind="Machine",reason="server_error"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                r#"remedy_watch_events_total{kind="Machine",type="apply"}"#
            ),
            Some(1.0)
        );
        assert!(text.contains("# TYPE remedy_resource_backoff_delay_seconds gauge"));
        assert!(text.contains("# UNIT remedy_resource_backoff_delay_seconds seconds"));
        assert!(text.contains(&format!(
            "remedy_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
    }

    /// Families split at `# HELP`, sample lines sorted (both sides write
    /// samples in hash order).
    fn families(text: &str) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = Vec::new();
        for l in text.lines() {
            if l.starts_with("# HELP") {
                out.push(Vec::new());
            }
            if let Some(f) = out.last_mut() {
                f.push(l.to_string());
            }
        }
        for f in &mut out {
            let n = f.iter().take_while(|l| l.starts_with('#')).count();
            f[n..].sort();
        }
        out
    }

    #[test]
    fn resource_series_match_prometheus_client() {
        // The reference: the same series through prometheus-client's encoder.
        let crash: Family<ResourceLabels, Gauge> = Family::default();
        let delay: Family<ResourceLabels, FGauge> = Family::default();
        let eta: Family<ResourceLabels, FGauge> = Family::default();
        let mut reference = Registry::default();
        let help = |h: &'static str| h.trim_end_matches('.');
        reference.register(CRASHES, help(CRASHES_HELP), crash.clone());
        reference.register_with_unit(
            "remedy_resource_backoff_delay",
            help(BACKOFF_DELAY_HELP),
            Unit::Seconds,
            delay.clone(),
        );
        reference.register_with_unit(
            "remedy_resource_release_eta",
            help(RELEASE_ETA_HELP),
            Unit::Seconds,
            eta.clone(),
        );
        let m = Metrics::new(10);
        let cases = [
            ("default", "Machine", "m-1", 3, 480.0),
            ("capi", "OpenStackMachine", "m-2", 0, 0.0),
            ("capi", "AWSMachine", "m-3", 1, 0.5),
            ("capi", "Machine", "m-4", 40, 86400.0),
            ("capi", "Machine", "m-5", 2, 1234.5678),
            // Not valid Kubernetes names, but escaping must hold anyway.
            ("e", "K", "quote\"back\\slash\nnewline", 7, 60.0),
            // Longer than INLINE_NAME: read through the key.
            ("capi", "Machine", &"n".repeat(INLINE_NAME + 1), 5, 1920.0),
            ("capi", "Machine", &"é".repeat(INLINE_NAME / 2), 6, 3840.0),
        ];
        for (ns, kind, name, c, d) in cases {
            m.series.set(&ResourceKey::new(kind, ns, name), c, d);
            let labels = ResourceLabels::from(&ResourceKey::new(kind, ns, name));
            crash.get_or_create(&labels).set(c);
            delay.get_or_create(&labels).set(d);
            // An estimate for those with a crash count over 2 only: the
            // others have no sample in the family.
            if c > 2 {
                eta.get_or_create(&labels).set(d / 2.0);
            }
        }
        m.series.set_release_etas(|k| {
            cases
                .iter()
                .find(|(ns, kind, name, ..)| *k == ResourceKey::new(kind, ns, name))
                .filter(|(_, _, _, c, _)| *c > 2)
                .map(|(.., d)| d / 2.0)
        });
        // Not tracked: no series is made for it.
        let untracked = ResourceKey::new("Machine", "default", "not-tracked");
        m.series.set_release_etas(|k| {
            if *k == untracked {
                Some(1.0)
            } else {
                cases
                    .iter()
                    .find(|(ns, kind, name, ..)| *k == ResourceKey::new(kind, ns, name))
                    .filter(|(_, _, _, c, _)| *c > 2)
                    .map(|(.., d)| d / 2.0)
            }
        });
        let mut want = String::new();
        text::encode_registry(&mut want, &reference).unwrap();
        let mut got = String::new();
        m.series.encode(&mut got, Format::OpenMetrics).unwrap();
        assert_eq!(families(&got), families(&want), "{got}\n---\n{want}");
        // And inside the full exposition, before the EOF marker.
        let full = m.encode().unwrap();
        assert!(full.contains(&got) && full.ends_with(&format!("{got}# EOF\n")));

        // Text 0.0.4: the same against prometheus-client's 0.0.4 encoder.
        let mut want = String::new();
        prometheus_text::encode(&mut want, &reference).unwrap();
        let mut got = String::new();
        m.series.encode(&mut got, Format::Text004).unwrap();
        assert_eq!(families(&got), families(&want), "{got}\n---\n{want}");
        let full = m.encode_as(Format::Text004).unwrap();
        assert!(full.ends_with(&got));
    }

    #[test]
    fn text_004_has_no_openmetrics_only_lines() {
        let m = Metrics::new(10);
        m.series
            .set(&ResourceKey::new("Machine", "default", "m-1"), 3, 480.0);
        m.actions.count("unpause", values::ActionResult::Success);
        let t = m.encode_as(Format::Text004).unwrap();
        assert!(!t.contains("# EOF") && !t.contains("# UNIT"), "{t}");
        // Info is a gauge in 0.0.4; counters are typed under their _total name.
        assert!(t.contains("# TYPE remedy_build_info gauge\n"), "{t}");
        assert!(t.contains("# TYPE remedy_actions_total counter\n"), "{t}");
        assert_eq!(
            value(
                &t,
                r#"remedy_actions_total{action="unpause",result="success"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &t,
                r#"remedy_resource_crashes{namespace="default",kind="Machine",name="m-1"}"#
            ),
            Some(3.0)
        );
    }

    #[test]
    fn accept_header_selects_the_format() {
        // What Prometheus 2.42 sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some(
                "text/plain;q=0.5, Application/OpenMetrics-Text ; q=0.2"
            )),
            Format::OpenMetrics
        );
        for text in [
            None,
            Some(""),
            Some("*/*"),
            Some("text/plain;version=0.0.4"),
            Some("application/openmetrics-text;q=0, text/plain"),
            Some("application/json"),
        ] {
            assert_eq!(Format::negotiate(text), Format::Text004, "{text:?}");
        }
        assert_eq!(
            Format::Text004.content_type(),
            "text/plain; version=0.0.4; charset=utf-8"
        );
    }

    #[test]
    fn preset_counters_start_at_zero_for_known_labels() {
        let m = Metrics::new(10);
        m.preset(&Known {
            kinds: vec!["Machine".into()],
            alerts: vec!["CloudAPIDegraded".into()],
            signal_targets: vec![values::SignalTarget::Prometheus],
            webhook: true,
            tls: false,
            record: true,
            pause_switch: true,
        });
        let t = m.encode_as(Format::Text004).unwrap();
        for series in [
            r#"remedy_actions_total{action="unpause",result="error"}"#,
            r#"remedy_actions_total{action="remediate",result="skipped"}"#,
            r#"remedy_webhook_notifications_total{status="firing",result="overloaded"}"#,
            r#"remedy_signal_queries_total{target="prometheus",result="timeout"}"#,
            r#"remedy_watch_events_total{kind="Machine",type="expired"}"#,
            r#"remedy_releases_total{kind="Machine"}"#,
            r#"remedy_episodes_refused_total{alert="CloudAPIDegraded",reason="over_cap"}"#,
            r#"remedy_episodes_refused_total{alert="other",reason="invalid_scope"}"#,
            r#"remedy_episode_record_writes_total{writer="webhook",result="conflict"}"#,
            r#"remedy_webhook_token_reloads_total{result="error"}"#,
            r#"remedy_http_connection_timeouts_total{timeout="handshake"}"#,
        ] {
            assert_eq!(value(&t, series), Some(0.0), "{series} in\n{t}");
        }
        // Only what is configured: no Alertmanager, no TLS.
        assert!(!t.contains(r#"target="alertmanager""#), "{t}");
        assert!(!t.contains("remedy_tls_reloads_total{"), "{t}");
        // The first event moves the pre-set series to 1: an increase.
        m.actions.count("unpause", values::ActionResult::Error);
        let t = m.encode().unwrap();
        assert_eq!(
            value(
                &t,
                r#"remedy_actions_total{action="unpause",result="error"}"#
            ),
            Some(1.0)
        );
    }

    /// The pre-set values are the ones the code writes, and the docs/reference/metrics.md
    /// lists them.
    #[test]
    fn preset_values_match_the_code_and_readme() {
        use crate::daemon::execute::ExecError;
        use crate::decide::episodes::Refusal;
        use crate::remediate::step::{Goal, Step};
        use crate::signals::AlertStatus;
        let retry = Goal::Retry(crate::remediate::step::RetryMark {
            crash_count: 1,
            at: chrono::DateTime::<chrono::Utc>::MIN_UTC,
            note: String::new(),
        });
        let goals = [Goal::Release, Goal::Remediate, retry];
        let steps = [
            Step::MarkRetry,
            Step::Hold,
            Step::SetSkipRemediation,
            Step::ClearFailure,
            Step::ClearConditions,
            Step::ResetCounters,
            Step::RemoveSkipRemediation,
            Step::Unpause,
        ];
        let mut actions: Vec<&str> = goals.iter().map(Goal::label).collect();
        for g in &goals {
            actions.extend(steps.iter().map(|s| s.action(g)));
        }
        for a in actions {
            assert!(values::ACTIONS.contains(&a), "{a}");
        }
        let key = ResourceKey::new("Machine", "ns", "m");
        for e in [
            ExecError::NotLeader { key: key.clone() },
            ExecError::Conflict { key },
        ] {
            assert!(values::ActionResult::labels().contains(&e.label()), "{e}");
        }
        let got: Vec<_> = Refusal::ALL.iter().map(Refusal::label).collect();
        assert_eq!(got, values::REFUSALS);
        for s in [AlertStatus::Firing, AlertStatus::Resolved] {
            assert!(values::WebhookStatus::labels().contains(&s.as_str()));
        }
        let readme = include_str!("../../docs/reference/metrics.md");
        let row = |metric: &str| {
            readme
                .lines()
                .find(|l| l.starts_with(&format!("| `{metric}`")))
                .unwrap_or_else(|| panic!("docs/reference/metrics.md has no row for {metric}"))
                .to_string()
        };
        for (metric, lists) in [
            (
                "remedy_actions_total",
                [values::ACTIONS, &values::ActionResult::labels()].concat(),
            ),
            (
                "remedy_webhook_notifications_total",
                [
                    values::WebhookStatus::labels(),
                    values::WebhookResult::labels(),
                ]
                .concat(),
            ),
            (
                "remedy_signal_queries_total",
                values::SignalResult::labels(),
            ),
            ("remedy_watch_events_total", values::WatchEvent::labels()),
            ("remedy_episodes_refused_total", values::REFUSALS.to_vec()),
            ("remedy_tls_reloads_total", values::Reload::labels()),
            (
                "remedy_resets_overwritten_total",
                values::OverwriteResult::labels(),
            ),
            (
                "remedy_episode_record_writes_total",
                [
                    values::RecordWriter::labels(),
                    values::RecordResult::labels(),
                ]
                .concat(),
            ),
        ] {
            let row = row(metric);
            for v in lists {
                let listed = row
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .any(|w| w == v);
                assert!(
                    listed,
                    "docs/reference/metrics.md row of {metric} does not list {v}: {row}"
                );
            }
        }
    }

    /// A documented label: its name and, when the docs/reference/metrics.md enumerates them
    /// (`label=a\|b`), its values.
    type DocLabels = BTreeMap<String, Option<BTreeSet<String>>>;

    /// The metric table of docs/reference/metrics.md: metric name → (type, labels).
    fn reference_table() -> BTreeMap<String, (String, DocLabels)> {
        let readme = include_str!("../../docs/reference/metrics.md");
        // The table above the generated "As registered" section.
        let section = readme.split(REGISTERED).next().unwrap_or(readme);
        let mut table = BTreeMap::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            // `\|` separates enumerated values inside a cell.
            let row = row.replace("\\|", "\u{1}");
            let cols: Vec<&str> = row.split('|').map(str::trim).collect();
            let [_, names, kind, labels, _] = cols[..] else {
                panic!("docs/reference/metrics.md metric row without 3 columns: {row}");
            };
            let kind = without_parentheses(kind).trim().to_string();
            let mut doc = DocLabels::new();
            for label in without_parentheses(labels).split(',').map(str::trim) {
                if label.is_empty() {
                    continue;
                }
                let (name, values) = match label.split_once('=') {
                    Some((n, v)) => (n, Some(v.split('\u{1}').map(String::from).collect())),
                    None => (label, None),
                };
                // Prose outside parentheses would be read as a label.
                assert!(
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                    "docs/reference/metrics.md row {row}: {name:?} is not a label name (explanations go in parentheses)"
                );
                doc.insert(name.to_string(), values);
            }
            let names: Vec<&str> = names.split('`').skip(1).step_by(2).collect();
            assert!(
                !names.is_empty(),
                "docs/reference/metrics.md row names no metric: {row}"
            );
            for name in names {
                let old = table.insert(name.to_string(), (kind.clone(), doc.clone()));
                assert!(
                    old.is_none(),
                    "{name} is in the docs/reference/metrics.md table twice"
                );
            }
        }
        table
    }

    fn without_parentheses(s: &str) -> String {
        let mut depth = 0usize;
        let mut out = String::new();
        for c in s.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                c if depth == 0 => out.push(c),
                _ => {}
            }
        }
        out
    }

    /// An exposed family: type, and the values seen of each label.
    #[derive(Debug, Default)]
    struct Exposed {
        kind: String,
        samples: usize,
        labels: BTreeMap<String, BTreeSet<String>>,
    }

    /// Families of an exposition, under the name the docs/reference/metrics.md uses for them
    /// (OpenMetrics types counters and infos without their sample suffix).
    fn exposed(text: &str, format: Format) -> BTreeMap<String, Exposed> {
        let mut out: BTreeMap<String, Exposed> = BTreeMap::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').expect("# TYPE name type");
                current = match (format, kind) {
                    (Format::OpenMetrics, "counter") => format!("{name}_total"),
                    (Format::OpenMetrics, "info") => format!("{name}_info"),
                    _ => name.to_string(),
                };
                let old = out.insert(
                    current.clone(),
                    Exposed {
                        kind: kind.to_string(),
                        ..Exposed::default()
                    },
                );
                assert!(old.is_none(), "{current} typed twice");
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let family = out.get_mut(&current).expect("a sample after its # TYPE");
            family.samples += 1;
            let Some((_, rest)) = line.split_once('{') else {
                continue;
            };
            let (labels, _) = rest.rsplit_once('}').expect("closed label set");
            // Label values here are plain (no `",` inside them).
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                if k == "le" && family.kind == "histogram" {
                    continue;
                }
                family
                    .labels
                    .entry(k.to_string())
                    .or_default()
                    .insert(v.trim_end_matches('"').to_string());
            }
        }
        out
    }

    /// The label values the code writes, where they are a table (or an
    /// enum's labels) and not pre-set: what the docs/reference/metrics.md must enumerate.
    fn code_values(metric: &str, label: &str) -> Option<Vec<&'static str>> {
        use crate::decide::release::WaitReason;
        use crate::model::domains::DomainBy;
        let v = match (metric, label) {
            ("remedy_outage_breaker_open", "scope") => [
                DomainBy::Cluster,
                DomainBy::Kind,
                DomainBy::Namespace,
                DomainBy::Label(String::new()),
                DomainBy::Field(String::new()),
                DomainBy::Zone,
            ]
            .iter()
            .map(DomainBy::label)
            .collect(),
            // daemon/engine/round.rs: decide's wait reasons, "settle" (held for an
            // alert not yet verified cleared) and "retry".
            ("remedy_waiting_resources", "reason") => {
                let mut v: Vec<_> = [
                    WaitReason::Breaker,
                    WaitReason::Backoff,
                    WaitReason::Budget,
                    WaitReason::Owner,
                ]
                .iter()
                .map(WaitReason::label)
                .collect();
                v.extend(["settle", "retry"]);
                v
            }
            ("remedy_actions_total", "action") => values::ACTIONS.to_vec(),
            ("remedy_actions_total", "result") => values::ActionResult::labels(),
            ("remedy_webhook_notifications_total", "status") => values::WebhookStatus::labels(),
            ("remedy_webhook_notifications_total", "result") => values::WebhookResult::labels(),
            ("remedy_episodes_refused_total", "reason") => values::REFUSALS.to_vec(),
            ("remedy_signal_queries_total", "target") => values::SignalTarget::labels(),
            ("remedy_signal_queries_total", "result") => values::SignalResult::labels(),
            ("remedy_watch_events_total", "type") => values::WatchEvent::labels(),
            ("remedy_tls_reloads_total", "result") => values::Reload::labels(),
            ("remedy_pause_switch_reads_total", "result") => values::PauseRead::labels(),
            ("remedy_episode_record_writes_total", "writer") => values::RecordWriter::labels(),
            ("remedy_episode_record_writes_total", "result") => values::RecordResult::labels(),
            ("remedy_episode_record_shed_total", "reason") => values::RECORD_SHED.to_vec(),
            _ => return None,
        };
        Some(v)
    }

    /// A registry with everything configured, so every preset is made
    /// (the store pre-sets the per-kind gauges), and what that pre-set.
    fn preset_registry() -> (std::sync::Arc<Metrics>, BTreeMap<String, Exposed>) {
        let m = std::sync::Arc::new(Metrics::new(10));
        m.preset(&Known {
            kinds: vec!["OpenStackMachine".into()],
            alerts: vec!["CloudAPIDegraded".into()],
            signal_targets: values::SignalTarget::ALL.to_vec(),
            webhook: true,
            tls: true,
            record: true,
            pause_switch: true,
        });
        // The store pre-sets the per-kind gauges (remedy_resources by state).
        let _store = crate::testkit::store(&["openstack-machine"], m.clone());
        let preset = exposed(
            &m.encode_as(Format::Text004).expect("encode"),
            Format::Text004,
        );

        (m, preset)
    }

    /// One series in every family nothing pre-sets, through the label
    /// structs the code writes with, so their label names are exposed.
    fn with_a_series_each(m: &Metrics) {
        let key = ResourceKey::new("OpenStackMachine", "ns", "m-1");
        m.series.set(&key, 1, 60.0);
        m.series.set_release_etas(|_| Some(30.0));
        let errors = ErrorLabels {
            namespace: "ns".into(),
            kind: "OpenStackMachine".into(),
            reason: "server_error".into(),
        };
        m.engine.transient_errors.get_or_create(&errors).inc();
        m.engine.terminal_errors.get_or_create(&errors).inc();
        let scope = ScopeLabels {
            scope: crate::model::domains::DomainBy::Cluster.label(),
            domain: "cluster".into(),
        };
        m.engine.breaker_open.get_or_create(&scope).set(1);
        m.engine.release_pace.get_or_create(&scope).set(1.0);
        m.engine.breaker_ratio.get_or_create(&scope).set(0.5);
        m.engine.breaker_failing.get_or_create(&scope).set(5);
        m.engine
            .waiting
            .get_or_create(&KindReasonLabels {
                kind: "OpenStackMachine".into(),
                reason: crate::decide::release::WaitReason::Budget.label(),
            })
            .set(1);
        m.actions
            .duration
            .get_or_create(&ActionKindLabels { action: "hold" })
            .observe(0.1);
        m.watch
            .synced
            .get_or_create(&KindLabels {
                kind: "OpenStackMachine".into(),
            })
            .set(1);
    }

    /// Every metric the docs/reference/metrics.md's table lists is exposed with the documented
    /// type and label names, nothing exposed is missing from it, and
    /// enumerated label values are exactly what the code pre-sets or writes.
    #[test]
    fn metric_reference_matches_the_registry() {
        let doc = reference_table();
        assert!(
            doc.len() > 20,
            "docs/reference/metrics.md table not found: {doc:?}"
        );

        let (m, preset) = preset_registry();
        with_a_series_each(&m);

        for format in [Format::OpenMetrics, Format::Text004] {
            let got = exposed(&m.encode_as(format).expect("encode"), format);
            let documented: BTreeSet<_> = doc.keys().collect();
            let exposed_names: BTreeSet<_> = got.keys().collect();
            let undocumented: Vec<_> = exposed_names.difference(&documented).collect();
            let missing: Vec<_> = documented.difference(&exposed_names).collect();
            assert!(
                undocumented.is_empty() && missing.is_empty(),
                "{format:?}: exposed, not in the docs/reference/metrics.md table: {undocumented:?}; in the table, not exposed: {missing:?}"
            );
            for (name, (kind, labels)) in &doc {
                let e = &got[name];
                // Text 0.0.4 has no info type: an info is a gauge there.
                let want = match (format, kind.as_str()) {
                    (Format::Text004, "info") => "gauge",
                    _ => kind,
                };
                assert_eq!(e.kind, want, "{format:?}: type of {name}");
                if !labels.is_empty() {
                    assert!(e.samples > 0, "{name} has no series: set one in this test");
                }
                let names: BTreeSet<_> = e.labels.keys().collect();
                assert_eq!(
                    names,
                    labels.keys().collect(),
                    "{format:?}: label names of {name}, exposed (left) and documented (right)"
                );
                for (label, seen) in &e.labels {
                    if let Some(Some(values)) = labels.get(label) {
                        let undocumented: Vec<_> = seen.difference(values).collect();
                        assert!(
                            undocumented.is_empty(),
                            "{name}{{{label}}}: {undocumented:?} exposed, not in the docs/reference/metrics.md"
                        );
                    }
                }
            }
        }

        // Enumerated values: exactly what is pre-set, or what the code's
        // table holds where nothing pre-sets them.
        for (name, (_, labels)) in &doc {
            for (label, values) in labels {
                let Some(values) = values else { continue };
                let want: BTreeSet<String> = values.clone();
                let mut checked = false;
                if let Some(seen) = preset.get(name).and_then(|e| e.labels.get(label)) {
                    assert_eq!(
                        seen, &want,
                        "{name}{{{label}}}: pre-set (left) and docs/reference/metrics.md (right) values differ"
                    );
                    checked = true;
                }
                if let Some(code) = code_values(name, label) {
                    let code: BTreeSet<String> = code.into_iter().map(String::from).collect();
                    assert_eq!(
                        code, want,
                        "{name}{{{label}}}: the code's values (left) and docs/reference/metrics.md (right) differ"
                    );
                    checked = true;
                }
                assert!(
                    checked,
                    "{name}{{{label}}}: the docs/reference/metrics.md enumerates values nothing in the code lists; add them to `values` or pre-set them"
                );
            }
        }
    }

    /// Where the generated part of docs/reference/metrics.md starts.
    const REGISTERED: &str = "## As registered\n";

    /// Every family the registry has, as a scrape of OpenMetrics names it:
    /// (name, type, help), in registration order.
    fn registered() -> Vec<(String, String, String)> {
        // Families with no series are not announced: the same registry
        // as the table's check, every family with a series.
        let (m, _) = preset_registry();
        with_a_series_each(&m);
        let text = m.encode_as(Format::OpenMetrics).expect("encode");
        let mut help = BTreeMap::new();
        let mut out = Vec::new();
        for line in text.lines() {
            if let Some(h) = line.strip_prefix("# HELP ") {
                let (name, text) = h.split_once(' ').unwrap_or((h, ""));
                help.insert(name.to_string(), text.to_string());
            } else if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').expect("# TYPE name type");
                let shown = match kind {
                    "counter" => format!("{name}_total"),
                    "info" => format!("{name}_info"),
                    _ => name.to_string(),
                };
                let text = help.get(name).cloned().unwrap_or_default();
                out.push((shown, kind.to_string(), text));
            }
        }
        out
    }

    /// The end of docs/reference/metrics.md is generated from the registry
    /// (each family's type and help text) and lists exactly the families
    /// its table documents; `REMEDY_BLESS=1 cargo test --lib metrics`
    /// rewrites it.
    #[test]
    fn the_registered_families_section_is_current() {
        let families = registered();
        let names: BTreeSet<&str> = families.iter().map(|(n, _, _)| n.as_str()).collect();
        let table = reference_table();
        assert_eq!(
            names,
            table.keys().map(String::as_str).collect(),
            "registered (left) and documented (right) families"
        );
        let mut section = format!(
            "{REGISTERED}\n<!-- Generated from the registry by src/metrics/mod.rs (the_registered_families_section_is_current):\n     `REMEDY_BLESS=1 cargo test --lib metrics` rewrites it. -->\n\n\
             Each family as `/metrics` announces it in OpenMetrics (its `# TYPE` and `# HELP`).\n\n\
             | metric | type | help |\n|---|---|---|\n"
        );
        for (name, kind, help) in &families {
            section.push_str(&format!(
                "| `{name}` | {kind} | {} |\n",
                help.replace('|', "\\|")
            ));
        }
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/metrics.md");
        let page = std::fs::read_to_string(&path).expect("docs/reference/metrics.md");
        let head = page.split(REGISTERED).next().unwrap_or(&page);
        let want = format!("{}\n{section}", head.trim_end());
        if page != want && std::env::var_os("REMEDY_BLESS").is_some() {
            std::fs::write(&path, &want).expect("write");
            return;
        }
        assert!(
            page == want,
            "docs/reference/metrics.md's \"As registered\" differs from the registry: run `REMEDY_BLESS=1 cargo test --lib metrics`"
        );
    }

    #[test]
    fn apiserver_slowdown_metrics_are_exported_and_documented() {
        let m = Metrics::new(10);
        m.apiserver.throttled.inc();
        m.apiserver.backoff.set(2.5);
        let t = m.encode_as(Format::Text004).unwrap();
        assert_eq!(
            value(&t, "remedy_apiserver_throttled_total"),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            value(&t, "remedy_apiserver_backoff_seconds"),
            Some(2.5),
            "{t}"
        );
        let readme = include_str!("../../docs/reference/metrics.md");
        for metric in [
            "remedy_apiserver_throttled_total",
            "remedy_apiserver_backoff_seconds",
        ] {
            assert!(
                readme
                    .lines()
                    .any(|l| l.starts_with(&format!("| `{metric}`"))),
                "docs/reference/metrics.md has no row for {metric}"
            );
        }
    }

    #[test]
    fn per_resource_series_are_bounded_and_removed() {
        let m = Metrics::new(2);
        let keys: Vec<_> = (0..3)
            .map(|i| ResourceKey::new("Machine", "ns", &format!("m-{i}")))
            .collect();
        for k in &keys {
            m.series.set(k, 1, 60.0);
        }
        assert_eq!(m.series.count(), 2);
        assert_eq!(m.series.dropped.get(), 1);
        let text = m.encode().unwrap();
        assert!(!text.contains(r#"name="m-2""#));
        m.series.remove(&keys[0]);
        let text = m.encode().unwrap();
        assert!(!text.contains(r#"name="m-0""#));
        assert!(text.contains(r#"name="m-1""#));
        // Room again after removal.
        m.series.set(&keys[2], 1, 60.0);
        assert!(m.encode().unwrap().contains(r#"name="m-2""#));
    }
}
