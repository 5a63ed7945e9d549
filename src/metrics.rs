//! Every metric remedy exports, in one registry. Names follow DESIGN.md;
//! prometheus-client appends `_total` to counters and unit suffixes itself.
//! Per-resource series are bounded by `max_resource_series`.

use crate::view::ResourceKey;
use prometheus_client::encoding::{EncodeLabelSet, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type FGauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

impl From<&ResourceKey> for ResourceLabels {
    fn from(k: &ResourceKey) -> Self {
        Self {
            namespace: k.namespace.to_string(),
            kind: k.kind.to_string(),
            name: k.name.to_string(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub namespace: String,
    pub kind: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindStateLabels {
    pub kind: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindReasonLabels {
    pub kind: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    pub scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionKindLabels {
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub status: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabels {
    pub target: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub kind: String,
    pub r#type: &'static str,
}

fn action_histogram() -> Histogram {
    // 5 ms .. ~41 s: a status patch is milliseconds, a 409 retry loop seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

pub struct Metrics {
    registry: Registry,
    pub crash_count: Family<ResourceLabels, Gauge>,
    pub backoff_delay: Family<ResourceLabels, FGauge>,
    pub resources: Family<KindStateLabels, Gauge>,
    pub transient_errors: Family<ErrorLabels, Counter>,
    pub terminal_errors: Family<ErrorLabels, Counter>,
    pub transient_ratio: Family<KindLabels, FGauge>,
    pub breaker_open: Family<ScopeLabels, Gauge>,
    pub budget_tokens: FGauge,
    pub held: Family<KindLabels, Gauge>,
    pub waiting: Family<KindReasonLabels, Gauge>,
    pub actions: Family<ActionLabels, Counter>,
    pub action_duration: Family<ActionKindLabels, Histogram, fn() -> Histogram>,
    pub webhook: Family<WebhookLabels, Counter>,
    pub signal_queries: Family<SignalLabels, Counter>,
    pub watch_events: Family<WatchLabels, Counter>,
    pub watch_synced: Family<KindLabels, Gauge>,
    pub releases: Family<KindLabels, Counter>,
    pub series_dropped: Counter,
    pub leader: Gauge,
    pub ready: Gauge,
    pub pending_actions: Gauge,
    max_resource_series: usize,
    tracked: Mutex<HashSet<ResourceKey>>,
}

impl Metrics {
    pub fn new(max_resource_series: usize) -> Self {
        let mut registry = Registry::default();
        let m = Self {
            crash_count: Family::default(),
            backoff_delay: Family::default(),
            resources: Family::default(),
            transient_errors: Family::default(),
            terminal_errors: Family::default(),
            transient_ratio: Family::default(),
            breaker_open: Family::default(),
            budget_tokens: FGauge::default(),
            held: Family::default(),
            waiting: Family::default(),
            actions: Family::default(),
            action_duration: Family::new_with_constructor(action_histogram),
            webhook: Family::default(),
            signal_queries: Family::default(),
            watch_events: Family::default(),
            watch_synced: Family::default(),
            releases: Family::default(),
            series_dropped: Counter::default(),
            leader: Gauge::default(),
            ready: Gauge::default(),
            pending_actions: Gauge::default(),
            max_resource_series,
            tracked: Mutex::new(HashSet::new()),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "remedy_resource_crash_count",
            "Crash (failure) count of a failing resource",
            m.crash_count.clone(),
        );
        r.register_with_unit(
            "remedy_resource_backoff_delay",
            "Backoff delay for the resource's crash count: min(base*2^n, cap)",
            Unit::Seconds,
            m.backoff_delay.clone(),
        );
        r.register(
            "remedy_resources",
            "Watched resources by state",
            m.resources.clone(),
        );
        r.register(
            "remedy_transient_errors",
            "Transient failures observed (new failure or changed failure)",
            m.transient_errors.clone(),
        );
        r.register(
            "remedy_terminal_errors",
            "Terminal failures observed",
            m.terminal_errors.clone(),
        );
        r.register(
            "remedy_transient_error_ratio",
            "Share of watched resources of a kind currently in a transient failure",
            m.transient_ratio.clone(),
        );
        r.register(
            "remedy_outage_breaker_open",
            "1 while the outage breaker holds failing resources",
            m.breaker_open.clone(),
        );
        r.register(
            "remedy_retry_budget_tokens",
            "Tokens left in the cluster-wide retry budget",
            m.budget_tokens.clone(),
        );
        r.register(
            "remedy_held_resources",
            "Resources remedy currently holds paused",
            m.held.clone(),
        );
        r.register(
            "remedy_waiting_resources",
            "Held resources waiting for release, by what they wait for",
            m.waiting.clone(),
        );
        r.register(
            "remedy_actions",
            "Actions taken, by result",
            m.actions.clone(),
        );
        r.register_with_unit(
            "remedy_action_duration",
            "Time to carry out an action, retries included",
            Unit::Seconds,
            m.action_duration.clone(),
        );
        r.register(
            "remedy_webhook_notifications",
            "Alertmanager notifications received, by alert status and result",
            m.webhook.clone(),
        );
        r.register(
            "remedy_signal_queries",
            "Queries to Prometheus/Alertmanager, by result",
            m.signal_queries.clone(),
        );
        r.register(
            "remedy_watch_events",
            "Kubernetes watch events, by kind and type",
            m.watch_events.clone(),
        );
        r.register(
            "remedy_watch_synced",
            "1 once the initial list of the kind is synced",
            m.watch_synced.clone(),
        );
        r.register(
            "remedy_releases",
            "Held resources released",
            m.releases.clone(),
        );
        r.register(
            "remedy_resource_series_dropped",
            "Per-resource series not created because max_resource_series was reached",
            m.series_dropped.clone(),
        );
        r.register(
            "remedy_leader",
            "1 while this instance holds the leader lease",
            m.leader.clone(),
        );
        r.register(
            "remedy_ready",
            "1 while /readyz answers 200",
            m.ready.clone(),
        );
        r.register(
            "remedy_pending_actions",
            "Actions planned and not yet carried out",
            m.pending_actions.clone(),
        );
        r.register(
            "remedy_build",
            "Build information",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Self { registry, ..m }
    }

    /// Sets the per-resource series, unless the bound is reached (then the
    /// drop is counted, so the truncation is visible).
    pub fn set_resource(&self, key: &ResourceKey, crash_count: i64, backoff_seconds: f64) {
        let Ok(mut tracked) = self.tracked.lock() else {
            return;
        };
        if !tracked.contains(key) {
            if tracked.len() >= self.max_resource_series {
                self.series_dropped.inc();
                return;
            }
            tracked.insert(key.clone());
        }
        let labels = ResourceLabels::from(key);
        self.crash_count.get_or_create(&labels).set(crash_count);
        self.backoff_delay
            .get_or_create(&labels)
            .set(backoff_seconds);
    }

    pub fn remove_resource(&self, key: &ResourceKey) {
        let Ok(mut tracked) = self.tracked.lock() else {
            return;
        };
        if tracked.remove(key) {
            let labels = ResourceLabels::from(key);
            self.crash_count.remove(&labels);
            self.backoff_delay.remove(&labels);
        }
    }

    pub fn tracked_series(&self) -> usize {
        self.tracked.lock().map(|t| t.len()).unwrap_or(0)
    }

    pub fn action(&self, action: &'static str, result: &'static str) {
        self.actions
            .get_or_create(&ActionLabels { action, result })
            .inc();
    }

    pub fn signal(&self, target: &'static str, result: &'static str) {
        self.signal_queries
            .get_or_create(&SignalLabels { target, result })
            .inc();
    }

    pub fn webhook(&self, status: &'static str, result: &'static str) {
        self.webhook
            .get_or_create(&WebhookLabels { status, result })
            .inc();
    }

    pub fn watch_event(&self, kind: &str, r#type: &'static str) {
        self.watch_events
            .get_or_create(&WatchLabels {
                kind: kind.to_string(),
                r#type,
            })
            .inc();
    }

    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        m.set_resource(&key, 3, 480.0);
        m.action("unpause", "success");
        m.watch_event("Machine", "apply");
        m.transient_errors
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
                r#"remedy_resource_crash_count{namespace="default",kind="Machine",name="m-1"}"#
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

    #[test]
    fn per_resource_series_are_bounded_and_removed() {
        let m = Metrics::new(2);
        let keys: Vec<_> = (0..3)
            .map(|i| ResourceKey::new("Machine", "ns", &format!("m-{i}")))
            .collect();
        for k in &keys {
            m.set_resource(k, 1, 60.0);
        }
        assert_eq!(m.tracked_series(), 2);
        assert_eq!(m.series_dropped.get(), 1);
        let text = m.encode().unwrap();
        assert!(!text.contains(r#"name="m-2""#));
        m.remove_resource(&keys[0]);
        let text = m.encode().unwrap();
        assert!(!text.contains(r#"name="m-0""#));
        assert!(text.contains(r#"name="m-1""#));
        // Room again after removal.
        m.set_resource(&keys[2], 1, 60.0);
        assert!(m.encode().unwrap().contains(r#"name="m-2""#));
    }
}
