//! Every metric remedy exports, in one registry. Names follow the README's
//! "Metrics" section; prometheus-client appends `_total` to counters and unit
//! suffixes itself (docs/upstream-behaviour.md, "prometheus-client 0.26 naming").
//! Per-resource series are bounded by `max_resource_series`.

use crate::model::view::ResourceKey;
use prometheus_client::encoding::{EncodeLabelSet, prometheus_text, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Exposition format of a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// Prometheus text 0.0.4: what `promtool check metrics`, older
    /// Prometheus and most other scrapers read.
    Text004,
}

impl Format {
    /// OpenMetrics when the `Accept` header accepts it (Prometheus asks for
    /// it first), text 0.0.4 otherwise (curl, promtool, other agents).
    pub fn negotiate(accept: Option<&str>) -> Self {
        let accepts_openmetrics = accept.unwrap_or("").split(',').any(|range| {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim();
            media.eq_ignore_ascii_case("application/openmetrics-text")
                && !parts.any(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .and_then(|q| q.trim().parse::<f32>().ok())
                        == Some(0.0)
                })
        });
        if accepts_openmetrics {
            Self::OpenMetrics
        } else {
            Self::Text004
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::OpenMetrics => CONTENT_TYPE,
            Self::Text004 => prometheus_text::CONTENT_TYPE,
        }
    }
}

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
pub struct KindResultLabels {
    pub kind: String,
    pub result: &'static str,
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
    /// How domains are keyed: cluster | kind | namespace | label | field.
    pub scope: &'static str,
    /// The failure domain (bounded, `domains::MAX_DOMAINS`).
    pub domain: String,
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
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RecordLabels {
    /// webhook | leader
    pub writer: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShedLabels {
    /// finished | unproven | corrupt
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EpisodeLabels {
    /// Not `alertname`: Prometheus would overwrite it with the name of the
    /// alert rule that fires on this metric.
    pub alert: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TimeoutLabels {
    /// handshake | header | idle
    pub timeout: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub kind: String,
    pub r#type: &'static str,
}

/// Longest resource name copied into [`ResourceValues`]; CAPI machine names
/// are ~30 bytes. Longer names are read through the key.
const INLINE_NAME: usize = 47;

/// One resource's per-resource values, inline in the map with a copy of its
/// name: a scrape then reads one table in order instead of chasing a
/// pointer per series, which at 100k resources is 5x faster
/// (benches/load.rs). Namespace and kind are shared strings (`Store::key`).
#[derive(Debug)]
struct ResourceValues {
    crash_count: AtomicI64,
    /// f64 bits.
    backoff_seconds: AtomicU64,
    /// f64 bits; NaN: no estimate, no sample.
    release_eta_seconds: AtomicU64,
    /// 0: the name is not copied.
    name_len: u8,
    name: [u8; INLINE_NAME],
}

impl ResourceValues {
    fn new(name: &str) -> Self {
        let mut v = Self {
            crash_count: AtomicI64::new(0),
            backoff_seconds: AtomicU64::new(0),
            release_eta_seconds: AtomicU64::new(f64::NAN.to_bits()),
            name_len: 0,
            name: [0; INLINE_NAME],
        };
        if let (Some(dst), Ok(len)) = (v.name.get_mut(..name.len()), u8::try_from(name.len())) {
            dst.copy_from_slice(name.as_bytes());
            v.name_len = len;
        }
        v
    }

    fn name<'a>(&'a self, key: &'a ResourceKey) -> &'a str {
        match self.name_len {
            0 => &key.name,
            // A whole str was copied, so this is valid UTF-8.
            n => std::str::from_utf8(&self.name[..usize::from(n)]).unwrap_or(&key.name),
        }
    }

    fn set(&self, crash_count: i64, backoff_seconds: f64) {
        self.crash_count.store(crash_count, Ordering::Relaxed);
        self.backoff_seconds
            .store(backoff_seconds.to_bits(), Ordering::Relaxed);
    }
}

// Not `_crash_count`: a `_count` suffix is reserved for histograms and
// summaries, and `promtool check metrics` rejects it.
const CRASHES: &str = "remedy_resource_crashes";
// prometheus-client appends a full stop to every help text; so do these.
const CRASHES_HELP: &str = "Crash (failure) count of a failing resource.";
const BACKOFF_DELAY: &str = "remedy_resource_backoff_delay_seconds";
const BACKOFF_DELAY_HELP: &str = "Backoff delay for the resource's crash count: min(base*2^n, cap), or its controller's rule (brupop: 2^n+1 whole minutes).";
const RELEASE_ETA: &str = "remedy_resource_release_eta_seconds";
const RELEASE_ETA_HELP: &str = "Estimated seconds until a held resource is released at the current pace (its backoff, its place in line over the release rate); absent while its breaker is open or remedy is paused.";

/// OpenMetrics label value escaping (as prometheus-client does it).
fn push_label_value(out: &mut String, v: &str) {
    if !v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn push_labels(out: &mut String, family: &str, k: &ResourceKey, v: &ResourceValues) {
    out.push_str(family);
    out.push_str("{namespace=\"");
    push_label_value(out, &k.namespace);
    out.push_str("\",kind=\"");
    push_label_value(out, &k.kind);
    out.push_str("\",name=\"");
    push_label_value(out, v.name(k));
    out.push_str("\"} ");
}

fn push_f64(out: &mut String, v: f64) -> std::fmt::Result {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        // Debug keeps the ".0" of whole numbers, like prometheus-client.
        write!(out, "{v:?}")?;
    }
    Ok(())
}

/// Label values remedy writes, pre-set to 0 by [`Metrics::preset`]: a
/// counter that first appears at 1 is invisible to `increase()`/`rate()`,
/// so the first burst of failures would not alert. Tests keep these in step
/// with the code that writes them.
pub mod values {
    /// The signal sources remedy queries: the `target` label.
    pub const PROMETHEUS: &str = "prometheus";
    pub const ALERTMANAGER: &str = "alertmanager";
    /// `Step::action` and `Goal::label` (a goal skipped as a whole).
    pub const ACTIONS: &[&str] = &[
        "hold",
        "release",
        "unpause",
        "clear_failure",
        "reset_counters",
        "skip_remediation",
        "remediate",
        "resume",
        "note",
    ];
    /// `execute.rs` results, including `ExecError::label`.
    pub const ACTION_RESULTS: &[&str] = &[
        "success",
        "dry_run",
        "skipped",
        "conflict",
        "error",
        "forbidden",
        "not_leader",
        "gave_up",
        "no_status_subresource",
        "paused",
    ];
    pub const WEBHOOK_STATUSES: &[&str] = &["firing", "resolved", "invalid"];
    pub const WEBHOOK_RESULTS: &[&str] = &[
        "accepted",
        "duplicate",
        "ignored",
        "rejected",
        "unauthorized",
        "too_large",
        "overloaded",
        "unrecorded",
    ];
    pub const SIGNAL_RESULTS: &[&str] = &["ok", "error", "timeout", "malformed"];
    /// What remedy did about a reset a stale write undid.
    pub const OVERWRITE_RESULTS: &[&str] = &["reapplied", "gave_up", "not_reapplied"];
    pub const WATCH_TYPES: &[&str] = &[
        "init",
        "init_apply",
        "init_done",
        "apply",
        "delete",
        "expired",
        "error",
    ];
    /// `episodes::Refusal::label`.
    /// `episodes::Refusal::label`, in `Refusal::ALL` order (a test checks).
    pub const REFUSALS: &[&str] = &[
        "cluster_wide",
        "full",
        "unproven",
        "over_cap",
        "invalid_scope",
    ];
    pub const TLS_RELOADS: &[&str] = &["reloaded", "error"];
    pub const TOKEN_RELOADS: &[&str] = &["reloaded", "error"];
    /// `daemon::pause` reads of the pause switch ConfigMap.
    pub const PAUSE_READS: &[&str] = &["set", "clear", "absent", "invalid", "error"];
    /// `server.rs` `count_timeout`.
    pub const HTTP_TIMEOUTS: &[&str] = &["handshake", "header", "idle"];
    /// `repair`: a corrupt record replaced by an empty one when read.
    pub const RECORD_WRITERS: &[&str] = &["webhook", "leader", "repair"];
    /// `record::RecordError::label` of what a write can return, and ok.
    pub const RECORD_RESULTS: &[&str] = &["ok", "conflict", "too_large", "forbidden", "error"];
    /// `record::Shed::label`: what was dropped to keep the record writable.
    pub const RECORD_SHED: &[&str] = &["finished", "unproven", "corrupt"];
}

/// What the configuration says remedy will export, for [`Metrics::preset`].
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// Watched kinds.
    pub kinds: Vec<String>,
    /// Configured alert names.
    pub alerts: Vec<String>,
    /// `signals::PROMETHEUS` / `ALERTMANAGER`, those configured.
    pub signal_targets: Vec<&'static str>,
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
            signal_targets.push(values::PROMETHEUS);
            if cfg.signals.alertmanager_url.is_some() {
                signal_targets.push(values::ALERTMANAGER);
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

fn action_histogram() -> Histogram {
    // 5 ms .. ~41 s: a status patch is milliseconds, a 409 retry loop seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

pub struct Metrics {
    registry: Registry,
    pub resources: Family<KindStateLabels, Gauge>,
    pub transient_errors: Family<ErrorLabels, Counter>,
    pub terminal_errors: Family<ErrorLabels, Counter>,
    pub transient_ratio: Family<KindLabels, FGauge>,
    pub breaker_open: Family<ScopeLabels, Gauge>,
    pub release_pace: Family<ScopeLabels, FGauge>,
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
    pub resets_overwritten: Family<KindResultLabels, Counter>,
    pub series_dropped: Counter,
    pub leader: Gauge,
    pub ready: Gauge,
    pub pending_actions: Gauge,
    pub tls_reloads: Family<ResultLabels, Counter>,
    pub tls_expiry: Gauge,
    pub tls_not_before: Gauge,
    pub episodes_refused: Family<EpisodeLabels, Counter>,
    pub token_reloads: Family<ResultLabels, Counter>,
    pub paused: Gauge,
    pub pause_reads: Family<ResultLabels, Counter>,
    pub token_rereads: Counter,
    pub record_writes: Family<RecordLabels, Counter>,
    pub record_bytes: Gauge,
    pub record_shed: Family<ShedLabels, Counter>,
    pub http_connections: Gauge,
    pub http_connections_refused: Counter,
    pub http_timeouts: Family<TimeoutLabels, Counter>,
    pub apiserver_throttled: Counter,
    pub apiserver_backoff: FGauge,
    max_resource_series: usize,
    /// Per-resource series: crash count and backoff delay.
    tracked: RwLock<HashMap<ResourceKey, ResourceValues>>,
    /// Size of the last exposition, to allocate the next one at once.
    last_encoded: AtomicUsize,
}

impl Metrics {
    pub fn new(max_resource_series: usize) -> Self {
        let mut registry = Registry::default();
        let m = Self {
            resources: Family::default(),
            transient_errors: Family::default(),
            terminal_errors: Family::default(),
            transient_ratio: Family::default(),
            breaker_open: Family::default(),
            release_pace: Family::default(),
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
            resets_overwritten: Family::default(),
            series_dropped: Counter::default(),
            leader: Gauge::default(),
            ready: Gauge::default(),
            pending_actions: Gauge::default(),
            tls_reloads: Family::default(),
            tls_expiry: Gauge::default(),
            tls_not_before: Gauge::default(),
            episodes_refused: Family::default(),
            token_reloads: Family::default(),
            paused: Gauge::default(),
            pause_reads: Family::default(),
            token_rereads: Counter::default(),
            record_writes: Family::default(),
            record_bytes: Gauge::default(),
            record_shed: Family::default(),
            http_connections: Gauge::default(),
            http_connections_refused: Counter::default(),
            http_timeouts: Family::default(),
            apiserver_throttled: Counter::default(),
            apiserver_backoff: FGauge::default(),
            max_resource_series,
            tracked: RwLock::default(),
            last_encoded: AtomicUsize::new(0),
            registry: Registry::default(),
        };
        let r = &mut registry;
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
            "remedy_release_pace",
            "Releases per second a failure domain may make now: the budget's refill unless its adaptive pace is lower",
            m.release_pace.clone(),
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
            "remedy_resets_overwritten",
            "Resets remedy wrote that a stale write undid (the old crash count and failure time back), and what remedy did",
            m.resets_overwritten.clone(),
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
            "remedy_tls_reloads",
            "Re-reads of the TLS certificate files that loaded a new pair (reloaded) or failed (error)",
            m.tls_reloads.clone(),
        );
        r.register_with_unit(
            "remedy_tls_certificate_expiry",
            "Unix time the served TLS certificate expires (0: plain HTTP)",
            Unit::Seconds,
            m.tls_expiry.clone(),
        );
        r.register_with_unit(
            "remedy_tls_certificate_not_before",
            "Unix time the served TLS certificate becomes valid (0: plain HTTP)",
            Unit::Seconds,
            m.tls_not_before.clone(),
        );
        r.register(
            "remedy_episodes_refused",
            "Alert notifications or episodes remedy refused to act on, by alert and reason",
            m.episodes_refused.clone(),
        );
        r.register(
            "remedy_paused",
            "1 while the pause switch is set: remedy writes nothing to the resources it watches",
            m.paused.clone(),
        );
        r.register(
            "remedy_pause_switch_reads",
            "Reads of the pause switch ConfigMap, by what it said (set, clear, absent, invalid: treated as set) or error",
            m.pause_reads.clone(),
        );
        r.register(
            "remedy_webhook_token_reloads",
            "Re-reads of the webhook token file that loaded a new token (reloaded) or failed (error)",
            m.token_reloads.clone(),
        );
        r.register(
            "remedy_webhook_token_rereads",
            "Reads of the webhook token file caused by a request with an unknown token (at most one a second)",
            m.token_rereads.clone(),
        );
        r.register(
            "remedy_episode_record_writes",
            "Writes of the episode record ConfigMap by writer (webhook: any replica appending notifications; leader: episodes) and result",
            m.record_writes.clone(),
        );
        r.register_with_unit(
            "remedy_episode_record",
            "Encoded size of the episode record last read or written",
            Unit::Bytes,
            m.record_bytes.clone(),
        );
        r.register(
            "remedy_episode_record_shed",
            "Entries dropped to keep the episode record writable: finished or unproven episodes over its size bound, or a corrupt record rewritten",
            m.record_shed.clone(),
        );
        r.register(
            "remedy_http_connections",
            "Open connections to the listener",
            m.http_connections.clone(),
        );
        r.register(
            "remedy_http_connections_refused",
            "Connections closed at once because http.max_connections were open",
            m.http_connections_refused.clone(),
        );
        r.register(
            "remedy_http_connection_timeouts",
            "Connections closed by a timeout: TLS handshake, request head (header) or no traffic (idle)",
            m.http_timeouts.clone(),
        );
        r.register(
            "remedy_apiserver_throttled",
            "Apiserver answers 429 Too Many Requests; every request to it then waits behind one gate",
            m.apiserver_throttled.clone(),
        );
        r.register_with_unit(
            "remedy_apiserver_backoff",
            "How long a request to the apiserver now waits after a 429",
            Unit::Seconds,
            m.apiserver_backoff.clone(),
        );
        r.register(
            "remedy_build",
            "Build information",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Self { registry, ..m }
    }

    /// Creates every counter series with a known label set at 0.
    pub fn preset(&self, known: &Known) {
        use values::*;
        for &action in ACTIONS {
            for &result in ACTION_RESULTS {
                self.actions
                    .get_or_create(&ActionLabels { action, result })
                    .inc_by(0);
            }
        }
        if known.webhook {
            for &status in WEBHOOK_STATUSES {
                for &result in WEBHOOK_RESULTS {
                    self.webhook
                        .get_or_create(&WebhookLabels { status, result })
                        .inc_by(0);
                }
            }
        }
        for &target in &known.signal_targets {
            for &result in SIGNAL_RESULTS {
                self.signal_queries
                    .get_or_create(&SignalLabels { target, result })
                    .inc_by(0);
            }
        }
        for kind in &known.kinds {
            for &r#type in WATCH_TYPES {
                self.watch_events
                    .get_or_create(&WatchLabels {
                        kind: kind.clone(),
                        r#type,
                    })
                    .inc_by(0);
            }
            self.releases
                .get_or_create(&KindLabels { kind: kind.clone() })
                .inc_by(0);
            for &result in values::OVERWRITE_RESULTS {
                self.resets_overwritten
                    .get_or_create(&KindResultLabels {
                        kind: kind.clone(),
                        result,
                    })
                    .inc_by(0);
            }
        }
        for alert in &known.alerts {
            for &reason in REFUSALS {
                self.episodes_refused
                    .get_or_create(&EpisodeLabels {
                        alert: alert.clone(),
                        reason,
                    })
                    .inc_by(0);
            }
        }
        if known.record {
            for &reason in RECORD_SHED {
                self.record_shed
                    .get_or_create(&ShedLabels { reason })
                    .inc_by(0);
            }
            for &writer in RECORD_WRITERS {
                for &result in RECORD_RESULTS {
                    self.record_writes
                        .get_or_create(&RecordLabels { writer, result })
                        .inc_by(0);
                }
            }
        }
        if known.tls {
            for &result in TLS_RELOADS {
                self.tls_reloads
                    .get_or_create(&ResultLabels { result })
                    .inc_by(0);
            }
        }
        // The token file is reloaded only when the webhook has one.
        if known.webhook {
            for &result in TOKEN_RELOADS {
                self.token_reloads
                    .get_or_create(&ResultLabels { result })
                    .inc_by(0);
            }
        }
        // The pause switch is read at every tick.
        if known.pause_switch {
            for &result in PAUSE_READS {
                self.pause_reads
                    .get_or_create(&ResultLabels { result })
                    .inc_by(0);
            }
        }
        // The listener always runs.
        for &timeout in HTTP_TIMEOUTS {
            self.http_timeouts
                .get_or_create(&TimeoutLabels { timeout })
                .inc_by(0);
        }
    }

    /// Sets the per-resource series, unless the bound is reached (then the
    /// drop is counted, so the truncation is visible).
    pub fn set_resource(&self, key: &ResourceKey, crash_count: i64, backoff_seconds: f64) {
        // An update of a known series needs only the read lock, so it does
        // not wait for a scrape in progress. Map operations cannot panic
        // midway, so a poisoned map is intact.
        if let Some(v) = self
            .tracked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            v.set(crash_count, backoff_seconds);
            return;
        }
        let mut tracked = self.tracked.write().unwrap_or_else(PoisonError::into_inner);
        if !tracked.contains_key(key) && tracked.len() >= self.max_resource_series {
            self.series_dropped.inc();
            return;
        }
        tracked
            .entry(key.clone())
            .or_insert_with(|| ResourceValues::new(&key.name))
            .set(crash_count, backoff_seconds);
    }

    /// Sets every tracked resource's release estimate (`None`: no sample).
    /// Only resources that already have series get one: the estimate never
    /// adds series past `max_resource_series`.
    pub fn set_release_etas(&self, eta: impl Fn(&ResourceKey) -> Option<f64>) {
        let tracked = self.tracked.read().unwrap_or_else(PoisonError::into_inner);
        for (k, v) in tracked.iter() {
            let bits = eta(k)
                .filter(|s| s.is_finite())
                .unwrap_or(f64::NAN)
                .to_bits();
            v.release_eta_seconds.store(bits, Ordering::Relaxed);
        }
    }

    pub fn remove_resource(&self, key: &ResourceKey) {
        // Called on every healthy update: the read lock answers "no series"
        // without waiting for a scrape in progress.
        let tracked = self.tracked.read().unwrap_or_else(PoisonError::into_inner);
        if !tracked.contains_key(key) {
            return;
        }
        drop(tracked);
        self.tracked
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    pub fn tracked_series(&self) -> usize {
        self.tracked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
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
        self.encode_resource_series(&mut out, format)?;
        if format == Format::OpenMetrics {
            text::encode_eof(&mut out)?;
        }
        self.last_encoded.store(out.len(), Ordering::Relaxed);
        Ok(out)
    }

    /// The per-resource families, written directly: prometheus-client's
    /// encoder costs ~500 ns a sample (a dynamic write per token), ~100 ms a
    /// scrape at 100k resources (benches/load.rs). Same text as it writes;
    /// `resource_series_match_prometheus_client` checks that.
    /// Sample lines are the same in both formats; 0.0.4 has no `# UNIT`.
    fn encode_resource_series(&self, out: &mut String, format: Format) -> std::fmt::Result {
        // Map operations cannot panic midway, so a poisoned map is intact.
        let series = self.tracked.read().unwrap_or_else(PoisonError::into_inner);
        writeln!(out, "# HELP {CRASHES} {CRASHES_HELP}")?;
        writeln!(out, "# TYPE {CRASHES} gauge")?;
        for (k, v) in series.iter() {
            push_labels(out, CRASHES, k, v);
            writeln!(out, "{}", v.crash_count.load(Ordering::Relaxed))?;
        }
        writeln!(out, "# HELP {BACKOFF_DELAY} {BACKOFF_DELAY_HELP}")?;
        writeln!(out, "# TYPE {BACKOFF_DELAY} gauge")?;
        if format == Format::OpenMetrics {
            writeln!(out, "# UNIT {BACKOFF_DELAY} seconds")?;
        }
        for (k, v) in series.iter() {
            push_labels(out, BACKOFF_DELAY, k, v);
            push_f64(
                out,
                f64::from_bits(v.backoff_seconds.load(Ordering::Relaxed)),
            )?;
            out.push('\n');
        }
        writeln!(out, "# HELP {RELEASE_ETA} {RELEASE_ETA_HELP}")?;
        writeln!(out, "# TYPE {RELEASE_ETA} gauge")?;
        if format == Format::OpenMetrics {
            writeln!(out, "# UNIT {RELEASE_ETA} seconds")?;
        }
        for (k, v) in series.iter() {
            let eta = f64::from_bits(v.release_eta_seconds.load(Ordering::Relaxed));
            if eta.is_nan() {
                continue;
            }
            push_labels(out, RELEASE_ETA, k, v);
            push_f64(out, eta)?;
            out.push('\n');
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            m.set_resource(&ResourceKey::new(kind, ns, name), c, d);
            let labels = ResourceLabels::from(&ResourceKey::new(kind, ns, name));
            crash.get_or_create(&labels).set(c);
            delay.get_or_create(&labels).set(d);
            // An estimate for those with a crash count over 2 only: the
            // others have no sample in the family.
            if c > 2 {
                eta.get_or_create(&labels).set(d / 2.0);
            }
        }
        m.set_release_etas(|k| {
            cases
                .iter()
                .find(|(ns, kind, name, ..)| *k == ResourceKey::new(kind, ns, name))
                .filter(|(_, _, _, c, _)| *c > 2)
                .map(|(.., d)| d / 2.0)
        });
        // Not tracked: no series is made for it.
        let untracked = ResourceKey::new("Machine", "default", "not-tracked");
        m.set_release_etas(|k| {
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
        m.encode_resource_series(&mut got, Format::OpenMetrics)
            .unwrap();
        assert_eq!(families(&got), families(&want), "{got}\n---\n{want}");
        // And inside the full exposition, before the EOF marker.
        let full = m.encode().unwrap();
        assert!(full.contains(&got) && full.ends_with(&format!("{got}# EOF\n")));

        // Text 0.0.4: the same against prometheus-client's 0.0.4 encoder.
        let mut want = String::new();
        prometheus_text::encode(&mut want, &reference).unwrap();
        let mut got = String::new();
        m.encode_resource_series(&mut got, Format::Text004).unwrap();
        assert_eq!(families(&got), families(&want), "{got}\n---\n{want}");
        let full = m.encode_as(Format::Text004).unwrap();
        assert!(full.ends_with(&got));
    }

    #[test]
    fn text_004_has_no_openmetrics_only_lines() {
        let m = Metrics::new(10);
        m.set_resource(&ResourceKey::new("Machine", "default", "m-1"), 3, 480.0);
        m.action("unpause", "success");
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
            signal_targets: vec![values::PROMETHEUS],
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
        m.action("unpause", "error");
        let t = m.encode().unwrap();
        assert_eq!(
            value(
                &t,
                r#"remedy_actions_total{action="unpause",result="error"}"#
            ),
            Some(1.0)
        );
    }

    /// The pre-set values are the ones the code writes, and the README
    /// lists them.
    #[test]
    fn preset_values_match_the_code_and_readme() {
        use crate::daemon::execute::ExecError;
        use crate::decide::episodes::Refusal;
        use crate::remediate::step::{Goal, Step};
        use crate::signals::AlertStatus;
        let goals = [Goal::Release, Goal::Remediate];
        let steps = [
            Step::Hold,
            Step::SetSkipRemediation,
            Step::ClearFailure,
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
            assert!(values::ACTION_RESULTS.contains(&e.label()), "{e}");
        }
        let got: Vec<_> = Refusal::ALL.iter().map(Refusal::label).collect();
        assert_eq!(got, values::REFUSALS);
        for s in [AlertStatus::Firing, AlertStatus::Resolved] {
            assert!(values::WEBHOOK_STATUSES.contains(&s.as_str()));
        }
        let readme = include_str!("../README.md");
        let row = |metric: &str| {
            readme
                .lines()
                .find(|l| l.starts_with(&format!("| `{metric}`")))
                .unwrap_or_else(|| panic!("README has no row for {metric}"))
                .to_string()
        };
        for (metric, lists) in [
            (
                "remedy_actions_total",
                [values::ACTIONS, values::ACTION_RESULTS].concat(),
            ),
            (
                "remedy_webhook_notifications_total",
                [values::WEBHOOK_STATUSES, values::WEBHOOK_RESULTS].concat(),
            ),
            (
                "remedy_signal_queries_total",
                values::SIGNAL_RESULTS.to_vec(),
            ),
            ("remedy_watch_events_total", values::WATCH_TYPES.to_vec()),
            ("remedy_episodes_refused_total", values::REFUSALS.to_vec()),
            ("remedy_tls_reloads_total", values::TLS_RELOADS.to_vec()),
            (
                "remedy_resets_overwritten_total",
                values::OVERWRITE_RESULTS.to_vec(),
            ),
            (
                "remedy_episode_record_writes_total",
                [values::RECORD_WRITERS, values::RECORD_RESULTS].concat(),
            ),
        ] {
            let row = row(metric);
            for v in lists {
                let listed = row
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .any(|w| w == v);
                assert!(listed, "README row of {metric} does not list {v}: {row}");
            }
        }
    }

    /// A documented label: its name and, when the README enumerates them
    /// (`label=a\|b`), its values.
    type DocLabels = BTreeMap<String, Option<BTreeSet<String>>>;

    /// The README's metric table: metric name → (type, labels).
    fn readme_table() -> BTreeMap<String, (String, DocLabels)> {
        let readme = include_str!("../README.md");
        let (_, section) = readme
            .split_once("\n## Metrics\n")
            .expect("README has a Metrics section");
        let section = section.split("\n## ").next().unwrap_or(section);
        let mut table = BTreeMap::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            // `\|` separates enumerated values inside a cell.
            let row = row.replace("\\|", "\u{1}");
            let cols: Vec<&str> = row.split('|').map(str::trim).collect();
            let [_, names, kind, labels, _] = cols[..] else {
                panic!("README metric row without 3 columns: {row}");
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
                    "README row {row}: {name:?} is not a label name (explanations go in parentheses)"
                );
                doc.insert(name.to_string(), values);
            }
            let names: Vec<&str> = names.split('`').skip(1).step_by(2).collect();
            assert!(!names.is_empty(), "README row names no metric: {row}");
            for name in names {
                let old = table.insert(name.to_string(), (kind.clone(), doc.clone()));
                assert!(old.is_none(), "{name} is in the README table twice");
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

    /// Families of an exposition, under the name the README uses for them
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
    /// enum's labels) and not pre-set: what the README must enumerate.
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
            ("remedy_actions_total", "result") => values::ACTION_RESULTS.to_vec(),
            ("remedy_webhook_notifications_total", "status") => values::WEBHOOK_STATUSES.to_vec(),
            ("remedy_webhook_notifications_total", "result") => values::WEBHOOK_RESULTS.to_vec(),
            ("remedy_episodes_refused_total", "reason") => values::REFUSALS.to_vec(),
            ("remedy_signal_queries_total", "target") => {
                vec![values::PROMETHEUS, values::ALERTMANAGER]
            }
            ("remedy_signal_queries_total", "result") => values::SIGNAL_RESULTS.to_vec(),
            ("remedy_watch_events_total", "type") => values::WATCH_TYPES.to_vec(),
            ("remedy_tls_reloads_total", "result") => values::TLS_RELOADS.to_vec(),
            ("remedy_pause_switch_reads_total", "result") => values::PAUSE_READS.to_vec(),
            ("remedy_episode_record_writes_total", "writer") => values::RECORD_WRITERS.to_vec(),
            ("remedy_episode_record_writes_total", "result") => values::RECORD_RESULTS.to_vec(),
            ("remedy_episode_record_shed_total", "reason") => values::RECORD_SHED.to_vec(),
            _ => return None,
        };
        Some(v)
    }

    /// Every metric the README's table lists is exposed with the documented
    /// type and label names, nothing exposed is missing from it, and
    /// enumerated label values are exactly what the code pre-sets or writes.
    #[test]
    fn readme_metric_table_matches_the_registry() {
        use crate::signals::{ALERTMANAGER, PROMETHEUS};
        let doc = readme_table();
        assert!(doc.len() > 20, "README table not found: {doc:?}");

        // Everything configured, so every preset is made.
        let m = std::sync::Arc::new(Metrics::new(10));
        m.preset(&Known {
            kinds: vec!["OpenStackMachine".into()],
            alerts: vec!["CloudAPIDegraded".into()],
            signal_targets: vec![PROMETHEUS, ALERTMANAGER],
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

        // One series in every family nothing pre-sets, through the label
        // structs the code writes with, so their label names are exposed.
        let key = ResourceKey::new("OpenStackMachine", "ns", "m-1");
        m.set_resource(&key, 1, 60.0);
        m.set_release_etas(|_| Some(30.0));
        let errors = ErrorLabels {
            namespace: "ns".into(),
            kind: "OpenStackMachine".into(),
            reason: "server_error".into(),
        };
        m.transient_errors.get_or_create(&errors).inc();
        m.terminal_errors.get_or_create(&errors).inc();
        let scope = ScopeLabels {
            scope: crate::model::domains::DomainBy::Cluster.label(),
            domain: "cluster".into(),
        };
        m.breaker_open.get_or_create(&scope).set(1);
        m.release_pace.get_or_create(&scope).set(1.0);
        m.waiting
            .get_or_create(&KindReasonLabels {
                kind: "OpenStackMachine".into(),
                reason: crate::decide::release::WaitReason::Budget.label(),
            })
            .set(1);
        m.action_duration
            .get_or_create(&ActionKindLabels { action: "hold" })
            .observe(0.1);
        m.watch_synced
            .get_or_create(&KindLabels {
                kind: "OpenStackMachine".into(),
            })
            .set(1);

        for format in [Format::OpenMetrics, Format::Text004] {
            let got = exposed(&m.encode_as(format).expect("encode"), format);
            let documented: BTreeSet<_> = doc.keys().collect();
            let exposed_names: BTreeSet<_> = got.keys().collect();
            let undocumented: Vec<_> = exposed_names.difference(&documented).collect();
            let missing: Vec<_> = documented.difference(&exposed_names).collect();
            assert!(
                undocumented.is_empty() && missing.is_empty(),
                "{format:?}: exposed, not in the README table: {undocumented:?}; in the table, not exposed: {missing:?}"
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
                            "{name}{{{label}}}: {undocumented:?} exposed, not in the README"
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
                        "{name}{{{label}}}: pre-set (left) and README (right) values differ"
                    );
                    checked = true;
                }
                if let Some(code) = code_values(name, label) {
                    let code: BTreeSet<String> = code.into_iter().map(String::from).collect();
                    assert_eq!(
                        code, want,
                        "{name}{{{label}}}: the code's values (left) and README (right) differ"
                    );
                    checked = true;
                }
                assert!(
                    checked,
                    "{name}{{{label}}}: the README enumerates values nothing in the code lists; add them to `values` or pre-set them"
                );
            }
        }
    }

    #[test]
    fn apiserver_slowdown_metrics_are_exported_and_in_the_readme() {
        let m = Metrics::new(10);
        m.apiserver_throttled.inc();
        m.apiserver_backoff.set(2.5);
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
        let readme = include_str!("../README.md");
        for metric in [
            "remedy_apiserver_throttled_total",
            "remedy_apiserver_backoff_seconds",
        ] {
            assert!(
                readme
                    .lines()
                    .any(|l| l.starts_with(&format!("| `{metric}`"))),
                "README has no row for {metric}"
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
