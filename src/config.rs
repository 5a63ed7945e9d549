//! The YAML config file (mounted from a ConfigMap). Parsed strictly: unknown
//! keys are errors, and every validation error names the field at fault.

use crate::model::backoff::BackoffPolicy;
use crate::model::classify::{Classifier, RuleSpec, default_rules};
pub use crate::model::domains::DomainBy;
use crate::model::profile::{self, Profile};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config is not valid YAML for remedy: {0}")]
    Parse(#[from] serde_yaml_ng::Error),
    #[error("config field `{field}`: {message}")]
    Invalid { field: String, message: String },
}

impl ConfigError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::Parse(_) => "parse",
            Self::Invalid { .. } => "invalid",
        }
    }

    fn invalid(field: impl Into<String>, message: impl ToString) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.to_string(),
        }
    }
}

/// A profile entry: a built-in by name, a built-in with another API version
/// (e.g. CAPI v1beta2) or a label selector, or a full custom profile for any
/// CRD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ProfileRef {
    Builtin(#[schemars(schema_with = "builtin_names")] String),
    Override(Box<BuiltinOverride>),
    Custom(Box<Profile>),
}

/// The built-in profiles' names, for the config's JSON Schema.
fn builtin_names(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<String> = profile::builtins().into_iter().map(|p| p.name).collect();
    schemars::json_schema!({
        "type": "string",
        "enum": names,
        "description": "A built-in profile (`remedy profiles`).",
    })
}

/// A built-in profile with some of its settings replaced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BuiltinOverride {
    #[schemars(schema_with = "builtin_names")]
    pub builtin: String,
    /// Another API version of the built-in's kind (e.g. CAPI `v1beta2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Only objects this label selector matches (see `Profile::label_selector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Replaces the built-in's hold, e.g. capi-cluster by `/spec/paused`
    /// (which pauses every object of the Cluster) with its `resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<profile::HoldSpec>,
    /// Whether the controller retries a transient failure by itself. The
    /// built-ins say what the released controllers do (CAPO up to
    /// v0.15.0-beta.0 gives up on a server in ERROR: remedy retries it,
    /// `remediation.retry`); `true` for a build that retries (CAPO main
    /// after PR #3300, which writes nothing on its retries, so remedy
    /// cannot see them): remedy then adds none. `false` asks remedy to
    /// retry where the built-in does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_retries: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// Tokens added per second, cluster-wide.
    pub refill_per_second: f64,
    /// Bucket size: the most releases allowed in a burst.
    pub burst: u32,
    /// Pace of all Kubernetes writes (holds included), cluster-wide: holds
    /// must be fast during an outage, but never a storm on the apiserver.
    pub writes_per_second: f64,
    /// Bucket size of the writes.
    pub write_burst: u32,
    /// At most `max_in_flight` releases and remediations of one owner
    /// unanswered at once (a MachineDeployment's, a CAPI cluster's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<crate::model::owner::PerOwner>,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            refill_per_second: 0.5,
            burst: 10,
            writes_per_second: 20.0,
            write_burst: 50,
            per: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Opens when the failing share of watched resources reaches this.
    pub open_ratio: f64,
    /// Closes (after `cooldown`) only once the share is below this.
    pub close_ratio: f64,
    /// Fewer failing resources than this never open the breaker.
    pub min_resources: u32,
    #[serde(with = "humantime_serde")]
    /// The failing share is counted over this window.
    #[schemars(with = "crate::model::DurationSchema")]
    pub window: Duration,
    /// An open breaker closes only once the share stayed below
    /// `close_ratio` this long.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub cooldown: Duration,
    /// Optional PromQL returning the fleet-wide ratio across remedy instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// One breaker per failure domain (see `domains`): `cluster` (one for
    /// the fleet), `kind`, `namespace`, `{label: KEY}` or `{field: /PTR}`.
    #[serde(default)]
    pub domain: DomainBy,
    /// The adaptive release pace of each domain (see `decide::pace`).
    #[serde(default)]
    pub release: PaceConfig,
    /// What an open breaker holds: its domain's `failing` resources (the
    /// default), or every resource of the `domain`, new ones included.
    #[serde(default)]
    pub hold: BreakerHold,
}

/// `breaker.hold`. A controller that retries only what failed (brupop,
/// CAPI's providers with failure fields) is throttled by holding the failing
/// ones. One that fails a create once and calls the cloud mostly from the
/// reconciles of everything else (CAPO v0.14: a new server's ports, create
/// and BUILD polls, each with gophercloud's version discovery) keeps calling
/// a broken cloud unless the whole domain stops: `domain` holds every
/// holdable resource of an open domain, and releases the ones held for
/// nothing of their own only once it closes (probes are the failing ones,
/// so it needs `release.probe_every`: the breaker cools only once they
/// succeed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BreakerHold {
    #[default]
    Failing,
    Domain,
}

/// How releases are paced by what they observe (AIMD per failure domain).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PaceConfig {
    /// While a domain's breaker is open, release one held resource this
    /// often to learn whether its cloud is back; its next state is the
    /// answer. While probes fail they come further apart, up to 8 times
    /// this. Unset: nothing is released until the breaker closes on calm.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<crate::model::DurationSchema>")]
    pub probe_every: Option<Duration>,
    /// Outcomes are judged, and the pace adjusted, once per window.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub window: Duration,
    /// Additive increase per window, in releases per second.
    pub step: f64,
    /// Success share of releases below which the pace halves and the
    /// breaker stays open; at or above it the pace still grows.
    pub min_success: f64,
}

impl Default for PaceConfig {
    fn default() -> Self {
        Self {
            probe_every: None,
            window: Duration::from_secs(10),
            step: 0.5,
            min_success: 0.2,
        }
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            open_ratio: 0.3,
            close_ratio: 0.1,
            min_resources: 5,
            window: Duration::from_secs(300),
            cooldown: Duration::from_secs(600),
            query: None,
            domain: DomainBy::Cluster,
            release: PaceConfig::default(),
            hold: BreakerHold::Failing,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookConfig {
    /// File holding the bearer token Alertmanager sends. Without it the
    /// webhook is disabled (remedy refuses unauthenticated writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// A larger notification is answered 413.
    pub max_body_bytes: usize,
    /// Notifications queued for processing before 503 is answered.
    pub queue: usize,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            token_file: None,
            max_body_bytes: 1 << 20,
            queue: 1024,
        }
    }
}

pub const MIN_HEADER_BYTES: usize = 8 * 1024;
pub const MAX_HEADER_BYTES: usize = 1024 * 1024;
pub const MAX_HEADERS: usize = 1000;

/// Limits of the listener (plain and TLS alike): what one client, or many,
/// may cost before remedy closes or refuses connections.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// A request's head (and the TLS handshake) must arrive within this; the
    /// same timer closes a keep-alive connection that sends no next request.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub header_read_timeout: Duration,
    /// A connection on which nothing is read or written for this long is
    /// closed (a stalled body upload, a client that stops reading).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub idle_timeout: Duration,
    /// Open connections at most; more are closed at once and counted in
    /// `remedy_http_connections_refused_total`.
    pub max_connections: usize,
    /// Request line plus headers, in bytes; more is answered 431.
    pub max_header_bytes: usize,
    /// Header fields per request; more is answered 431.
    pub max_headers: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 2048,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
        }
    }
}

/// Serve the listener (webhook, metrics, probes) over HTTPS. The files are
/// read at start, so a bad certificate fails startup, not the first request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// How to reach a signal source behind auth (thanos-querier, Mimir/Cortex
/// tenants, basic auth, a private CA). Secret files are re-read on every
/// request, so a rotated Secret works without a restart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceClient {
    /// File holding a bearer token (e.g. a projected ServiceAccount token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// PEM CA bundle to trust in addition to the system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Extra headers on every request, e.g. `X-Scope-OrgID: tenant-1`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl SourceClient {
    /// Checks settings before anything connects: bad ones stop startup with
    /// the reason (`field` names the config's section).
    pub fn check(&self, field: &str) -> Result<(), String> {
        use axum::http::{HeaderName, HeaderValue, header::AUTHORIZATION};
        if self.bearer_token_file.is_some() && self.basic_auth.is_some() {
            return Err(format!(
                "{field}: bearer_token_file and basic_auth are exclusive"
            ));
        }
        if let Some(b) = &self.basic_auth
            && b.username.is_empty()
        {
            return Err(format!("{field}.basic_auth.username: must not be empty"));
        }
        for (k, v) in &self.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("{field}.headers: {k:?} is not a header name"))?;
            if name == AUTHORIZATION {
                return Err(format!(
                    "{field}.headers: set Authorization with bearer_token_file or basic_auth"
                ));
            }
            HeaderValue::from_str(v)
                .map_err(|_| format!("{field}.headers.{k}: not a valid header value"))?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    /// File holding the password, re-read on every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SignalsConfig {
    /// Prometheus (or a query frontend): alerts are verified there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus_url: Option<String>,
    /// Alertmanager: its active alerts (silenced and inhibited too) are
    /// read there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alertmanager_url: Option<String>,
    /// Client settings for Prometheus (or a query frontend).
    #[serde(skip_serializing_if = "is_default")]
    pub prometheus: SourceClient,
    /// Client settings for Alertmanager.
    #[serde(skip_serializing_if = "is_default")]
    pub alertmanager: SourceClient,
    #[serde(with = "humantime_serde")]
    /// Each query to Prometheus or Alertmanager.
    #[schemars(with = "crate::model::DurationSchema")]
    pub timeout: Duration,
    /// How long an alert must stay resolved before remediation starts.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub settle: Duration,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl Default for SignalsConfig {
    fn default() -> Self {
        Self {
            prometheus_url: None,
            alertmanager_url: None,
            prometheus: SourceClient::default(),
            alertmanager: SourceClient::default(),
            timeout: Duration::from_secs(5),
            settle: Duration::from_secs(120),
        }
    }
}

// The alert rule types live with the scopes they make (model::scope).
pub use crate::model::scope::{AlertRule, Selector};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LeaderConfig {
    /// Off: this replica acts alone (one replica only).
    pub enabled: bool,
    /// The Lease the replicas compete for.
    pub lease_name: String,
    /// Where the Lease and the episode record are: remedy's own namespace.
    pub namespace: String,
    #[serde(with = "humantime_serde")]
    /// A leader that stops renewing is replaced after this.
    #[schemars(with = "crate::model::DurationSchema")]
    pub lease_duration: Duration,
    /// ConfigMap in `namespace` that holds alert episodes for all replicas
    /// (see `record`): any replica writes notifications there, the leader
    /// acts on them.
    pub episode_record: String,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            lease_name: "remedy".into(),
            namespace: "remedy-system".into(),
            lease_duration: Duration::from_secs(15),
            episode_record: "remedy-episodes".into(),
        }
    }
}

/// The pause switch (`remedy pause`): a ConfigMap every replica reads at
/// every tick; while its `paused` key is "true", remedy writes nothing to
/// the resources it watches (`daemon::pause`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PauseSwitchConfig {
    /// Where the ConfigMap is: remedy's own namespace, as the Lease.
    pub namespace: String,
    /// Its name; "" turns the switch off (nothing is read).
    pub configmap: String,
}

impl Default for PauseSwitchConfig {
    fn default() -> Self {
        Self {
            namespace: "remedy-system".into(),
            configmap: "remedy-pause".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClassificationConfig {
    /// First match wins; a failure no rule matches is transient
    /// (`unmatched`). Default: the seed rules, derived from the providers'
    /// source (tests/fixtures/wordings.yaml).
    pub rules: Vec<RuleSpec>,
}

impl Default for ClassificationConfig {
    fn default() -> Self {
        Self {
            rules: default_rules(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the listener: the Alertmanager webhook, `/metrics`,
    /// `/status` and the probes.
    pub listen: SocketAddr,
    /// HTTPS for the listener; plain HTTP when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Limits of the listener, plain and TLS alike.
    pub http: HttpConfig,
    /// How often the mounted secrets (TLS files, webhook token) are re-read.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub reload_interval: Duration,
    /// Decide and log, write nothing (actions are counted `dry_run`).
    pub dry_run: bool,
    /// What remedy watches: built-ins by name, a built-in with some
    /// settings replaced, or a custom profile for any CRD.
    pub profiles: Vec<ProfileRef>,
    /// Namespaces to watch; empty means all.
    pub namespaces: Vec<String>,
    /// How long a failing resource waits before its next release:
    /// min(base·2^n, cap) for a crash count n (brupop's rule by default).
    pub backoff: BackoffPolicy,
    /// The retry budget: how fast releases, remediations and writes go,
    /// cluster-wide.
    pub budget: BudgetConfig,
    /// The outage breaker: when enough of the fleet fails at once, hold
    /// instead of retrying.
    pub breaker: BreakerConfig,
    /// The Alertmanager webhook (`POST /webhook`).
    pub webhook: WebhookConfig,
    /// Where alerts are verified: remedy never remediates on a
    /// notification alone.
    pub signals: SignalsConfig,
    /// Which alerts matter and which resources each selects; needs
    /// `signals.prometheus_url`.
    pub alerts: Vec<AlertRule>,
    /// One replica acts at a time (a Lease); the others serve the webhook.
    pub leader_election: LeaderConfig,
    pub pause_switch: PauseSwitchConfig,
    /// How a failure is classified: transient, terminal or not found.
    pub classification: ClassificationConfig,
    /// Upper bound on per-resource metric series (per family).
    pub max_resource_series: usize,
    /// How often decisions are re-evaluated.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub tick: Duration,
    /// After remedy writes a resource (release, cleared failure), the
    /// failure signals it still shows (a condition the controller has not
    /// rewritten yet) are ignored until someone else writes it, or for at
    /// most this long if the controller stays silent.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub controller_grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            tls: None,
            http: HttpConfig::default(),
            // kubelet takes up to a minute or so to project an updated
            // Secret; cert-manager renews weeks ahead.
            reload_interval: Duration::from_secs(30),
            dry_run: false,
            profiles: profile::builtins()
                .into_iter()
                .map(|p| ProfileRef::Builtin(p.name))
                .collect(),
            namespaces: Vec::new(),
            backoff: BackoffPolicy::default(),
            budget: BudgetConfig::default(),
            breaker: BreakerConfig::default(),
            webhook: WebhookConfig::default(),
            signals: SignalsConfig::default(),
            alerts: Vec::new(),
            leader_election: LeaderConfig::default(),
            pause_switch: PauseSwitchConfig::default(),
            classification: ClassificationConfig::default(),
            max_resource_series: 10_000,
            tick: Duration::from_secs(5),
            controller_grace: Duration::from_secs(300),
        }
    }
}

/// A config that passed validation, with profiles resolved and rules compiled.
#[derive(Debug, Clone)]
pub struct Validated {
    pub config: Config,
    pub profiles: Vec<Profile>,
    pub classifier: Classifier,
}

impl BudgetConfig {
    /// Checks this section; errors name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.refill_per_second.is_finite() && self.refill_per_second > 0.0) {
            return Err(ConfigError::invalid(
                "budget.refill_per_second",
                "must be a positive number",
            ));
        }
        if self.burst == 0 {
            return Err(ConfigError::invalid("budget.burst", "must be at least 1"));
        }
        if !(self.writes_per_second.is_finite() && self.writes_per_second > 0.0) {
            return Err(ConfigError::invalid(
                "budget.writes_per_second",
                "must be a positive number",
            ));
        }
        if self.write_burst == 0 {
            return Err(ConfigError::invalid(
                "budget.write_burst",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

impl BreakerConfig {
    /// Checks this section; errors name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("breaker.open_ratio", self.open_ratio),
            ("breaker.close_ratio", self.close_ratio),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(ConfigError::invalid(field, "must be within (0, 1]"));
            }
        }
        if self.close_ratio > self.open_ratio {
            return Err(ConfigError::invalid(
                "breaker.close_ratio",
                "must not exceed breaker.open_ratio (hysteresis)",
            ));
        }
        if self.window.is_zero() {
            return Err(ConfigError::invalid("breaker.window", "must be positive"));
        }
        let pace = &self.release;
        if pace.window < Duration::from_secs(1) {
            return Err(ConfigError::invalid(
                "breaker.release.window",
                "must be at least 1s",
            ));
        }
        if pace.probe_every.is_some_and(|d| d < Duration::from_secs(1)) {
            return Err(ConfigError::invalid(
                "breaker.release.probe_every",
                "must be at least 1s",
            ));
        }
        // Held whole, an open domain makes no calls and so cannot fail:
        // without probes it would close on a timer, whatever the cloud.
        if self.hold == BreakerHold::Domain && pace.probe_every.is_none() {
            return Err(ConfigError::invalid(
                "breaker.hold",
                "domain needs breaker.release.probe_every: a domain held whole makes no calls, only probes tell that its cloud is back",
            ));
        }
        if !(pace.step.is_finite() && pace.step >= 0.0) {
            return Err(ConfigError::invalid(
                "breaker.release.step",
                "must be a finite number >= 0",
            ));
        }
        if !(pace.min_success.is_finite() && (0.0..=1.0).contains(&pace.min_success)) {
            return Err(ConfigError::invalid(
                "breaker.release.min_success",
                "must be within 0..=1",
            ));
        }
        Ok(())
    }
}

impl WebhookConfig {
    /// Checks this section; errors name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_body_bytes < 1024 {
            return Err(ConfigError::invalid(
                "webhook.max_body_bytes",
                "must be at least 1024",
            ));
        }
        if self.queue == 0 {
            return Err(ConfigError::invalid("webhook.queue", "must be at least 1"));
        }
        Ok(())
    }
}

impl HttpConfig {
    /// Checks this section; errors name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, d) in [
            ("http.header_read_timeout", self.header_read_timeout),
            ("http.idle_timeout", self.idle_timeout),
        ] {
            if d < Duration::from_secs(1) {
                return Err(ConfigError::invalid(field, "must be at least 1s"));
            }
        }
        if self.max_connections == 0 {
            return Err(ConfigError::invalid(
                "http.max_connections",
                "must be at least 1",
            ));
        }
        // hyper's read buffer cannot be smaller than 8 KiB; a megabyte per
        // connection would undo the point of the limit.
        if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&self.max_header_bytes) {
            return Err(ConfigError::invalid(
                "http.max_header_bytes",
                format!("must be within {MIN_HEADER_BYTES}..={MAX_HEADER_BYTES}"),
            ));
        }
        if !(1..=MAX_HEADERS).contains(&self.max_headers) {
            return Err(ConfigError::invalid(
                "http.max_headers",
                format!("must be within 1..={MAX_HEADERS}"),
            ));
        }
        Ok(())
    }
}

impl SignalsConfig {
    /// Checks this section; errors name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, url) in [
            ("signals.prometheus_url", &self.prometheus_url),
            ("signals.alertmanager_url", &self.alertmanager_url),
        ] {
            if let Some(u) = url
                && !(u.starts_with("http://") || u.starts_with("https://"))
            {
                return Err(ConfigError::invalid(field, "must be an http(s) URL"));
            }
        }
        for (field, c) in [
            ("signals.prometheus", &self.prometheus),
            ("signals.alertmanager", &self.alertmanager),
        ] {
            c.check(field)
                .map_err(|why| ConfigError::invalid(field, why))?;
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::invalid("signals.timeout", "must be positive"));
        }
        Ok(())
    }
}

impl LeaderConfig {
    /// Checks this section; errors name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.enabled && (self.lease_name.is_empty() || self.namespace.is_empty()) {
            return Err(ConfigError::invalid(
                "leader_election",
                "lease_name and namespace are required when enabled",
            ));
        }
        if self.enabled && !is_dns_subdomain(&self.episode_record) {
            return Err(ConfigError::invalid(
                "leader_election.episode_record",
                "must be a ConfigMap name (lowercase letters, digits, '-' and '.', at most 253)",
            ));
        }
        if self.enabled && self.lease_duration < Duration::from_secs(2) {
            return Err(ConfigError::invalid(
                "leader_election.lease_duration",
                "must be at least 2s",
            ));
        }
        Ok(())
    }
}

impl PauseSwitchConfig {
    /// Checks this section; errors name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.configmap.is_empty()
            && (!is_dns_subdomain(&self.configmap) || !is_dns_subdomain(&self.namespace))
        {
            return Err(ConfigError::invalid(
                "pause_switch",
                "configmap and namespace must be names (lowercase letters, digits, '-' and '.'); configmap \"\" turns the switch off",
            ));
        }
        Ok(())
    }
}

impl TlsConfig {
    /// Checks this section; errors name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, path) in [
            ("tls.cert_file", &self.cert_file),
            ("tls.key_file", &self.key_file),
        ] {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::invalid(field, "must not be empty"));
            }
        }
        Ok(())
    }
}

impl Config {
    /// The JSON Schema of the config file, from the types the parser reads
    /// (`remedy config-schema`; checked in as
    /// docs/reference/config.schema.json).
    pub fn json_schema() -> serde_json::Value {
        let mut schema = schemars::schema_for!(Config);
        schema.insert("title".into(), "remedy config".into());
        schema.to_value()
    }

    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        Ok(serde_yaml_ng::from_str(text)?)
    }

    pub fn load(path: &Path) -> Result<Validated, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_yaml(&text)?.validate()
    }

    pub fn validate(self) -> Result<Validated, ConfigError> {
        let mut profiles = self.resolve_profiles()?;
        match &self.breaker.domain {
            DomainBy::Label(l) if l.is_empty() || l.len() > 317 => {
                return Err(ConfigError::invalid(
                    "breaker.domain.label",
                    "must be a label key",
                ));
            }
            DomainBy::Field(f) if !f.starts_with('/') || f.len() < 2 => {
                return Err(ConfigError::invalid(
                    "breaker.domain.field",
                    "must be a JSON pointer, e.g. /spec/failureDomain",
                ));
            }
            DomainBy::Field(f) => {
                // The configured field first; a profile's own place for its
                // domain after it (an OpenStackServer names its zone in
                // /spec/availabilityZone, a Machine in /spec/failureDomain).
                for p in &mut profiles {
                    p.fields.failure_domain.retain(|own| own != f);
                    p.fields.failure_domain.insert(0, f.clone());
                }
            }
            _ => {}
        }
        self.backoff
            .validate()
            .map_err(|e| ConfigError::invalid("backoff", e))?;
        if let Some(per) = &self.budget.per {
            per.validate()
                .map_err(|e| ConfigError::invalid("budget.per", e))?;
            if let Some(f) = &per.field {
                for p in &mut profiles {
                    p.fields.owner = vec![f.clone()];
                }
            }
        }
        self.budget.validate()?;
        self.breaker.validate()?;
        self.webhook.validate()?;
        if let Some(t) = &self.tls {
            t.validate()?;
        }
        self.http.validate()?;
        if self.reload_interval < Duration::from_secs(1) {
            return Err(ConfigError::invalid(
                "reload_interval",
                "must be at least 1s",
            ));
        }
        self.signals.validate()?;
        if !self.alerts.is_empty() && self.signals.prometheus_url.is_none() {
            return Err(ConfigError::invalid(
                "signals.prometheus_url",
                "is required when `alerts` are configured: remedy never remediates without verifying",
            ));
        }
        for (i, a) in self.alerts.iter().enumerate() {
            if a.alertname.is_empty() {
                return Err(ConfigError::invalid(
                    format!("alerts[{i}].alertname"),
                    "must not be empty",
                ));
            }
            // Rules are looked up by alertname and the first one wins, so a
            // later rule of the same name would be silently ignored.
            if self.alerts[..i].iter().any(|o| o.alertname == a.alertname) {
                return Err(ConfigError::invalid(
                    format!("alerts[{i}].alertname"),
                    format!("duplicate alert {:?}", a.alertname),
                ));
            }
        }
        self.leader_election.validate()?;
        self.pause_switch.validate()?;
        if self.tick.is_zero() {
            return Err(ConfigError::invalid("tick", "must be positive"));
        }
        let classifier = Classifier::new(&self.classification.rules)
            .map_err(|e| ConfigError::invalid("classification.rules", e))?;
        Ok(Validated {
            config: self,
            profiles,
            classifier,
        })
    }

    fn resolve_profiles(&self) -> Result<Vec<Profile>, ConfigError> {
        if self.profiles.is_empty() {
            return Err(ConfigError::invalid("profiles", "at least one is required"));
        }
        let mut out: Vec<Profile> = Vec::new();
        for (i, r) in self.profiles.iter().enumerate() {
            let field = format!("profiles[{i}]");
            let p = match r {
                ProfileRef::Builtin(name) => {
                    profile::builtin(name).map_err(|e| ConfigError::invalid(&field, e))?
                }
                ProfileRef::Override(o) => {
                    let mut p = profile::builtin(&o.builtin)
                        .map_err(|e| ConfigError::invalid(&field, e))?;
                    if let Some(v) = &o.version {
                        p.version = v.clone();
                    }
                    p.label_selector = o.label_selector.clone().or(p.label_selector);
                    if let Some(h) = &o.hold {
                        p.hold = Some(h.clone());
                    }
                    match o.controller_retries {
                        Some(true) => p.remediation.retry = None,
                        Some(false) if p.remediation.retry.is_none() => {
                            p.remediation.retry = Some(profile::RetrySpec::default());
                        }
                        _ => {}
                    }
                    p
                }
                ProfileRef::Custom(p) => *p.clone(),
            };
            p.validate().map_err(|e| ConfigError::invalid(&field, e))?;
            if out.iter().any(|o| o.name == p.name) {
                return Err(ConfigError::invalid(
                    field,
                    format!("duplicate profile name {:?}", p.name),
                ));
            }
            if out.iter().any(|o| o.group == p.group && o.kind == p.kind) {
                return Err(ConfigError::invalid(
                    field,
                    format!(
                        "{}/{} is already watched by another profile (each object must be seen once)",
                        p.group, p.kind
                    ),
                ));
            }
            out.push(p);
        }
        // remedy can touch only what it watches (it finds them in its store).
        for (i, p) in out.iter().enumerate() {
            if let Some(r) = p.hold.as_ref().and_then(|h| h.resume.as_ref())
                && !out.iter().any(|o| o.kind == r.kind)
            {
                return Err(ConfigError::invalid(
                    format!("profiles[{i}].hold.resume.kind"),
                    format!(
                        "{:?} is not the kind of a watched profile: remedy touches only objects it watches",
                        r.kind
                    ),
                ));
            }
        }
        Ok(out)
    }
}

/// A Kubernetes object name (RFC 1123 subdomain).
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(yaml: &str) -> ConfigError {
        Config::from_yaml(yaml)
            .and_then(Config::validate)
            .expect_err("config should be rejected")
    }

    /// A Cluster held by `/spec/paused`, whose Machines remedy touches
    /// after the release (CAPI's Machine controller would wait for its
    /// resync): the override replaces the built-in's hold.
    #[test]
    fn a_cluster_hold_by_spec_with_its_machines_to_resume() {
        let v = Config::from_yaml(
            "profiles: [capi-machine, {builtin: capi-cluster, version: v1beta2, hold: {field: /spec/paused, resume: {kind: Machine, label: cluster.x-k8s.io/cluster-name}}}]\n",
        )
        .and_then(Config::validate)
        .expect("valid");
        let hold = v.profiles[1].hold.as_ref().expect("hold");
        assert_eq!(hold.field.as_deref(), Some("/spec/paused"));
        assert_eq!(hold.annotation, None);
        let resume = hold.resume.as_ref().expect("resume");
        assert_eq!(
            (resume.kind.as_str(), resume.label.as_str()),
            ("Machine", "cluster.x-k8s.io/cluster-name")
        );
        assert_eq!(v.profiles[1].version, "v1beta2");
    }

    #[test]
    fn a_field_domain_is_projected_by_every_profile() {
        let v = Config::from_yaml(
            "profiles: [capi-machine, openstack-machine]\nbreaker: {domain: {field: /spec/failureDomain}}\n",
        )
        .unwrap()
        .validate()
        .unwrap();
        let obj: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"failureDomain": "eu-1a"}
        }))
        .unwrap();
        for p in &v.profiles {
            let view = p.project(&obj).view;
            assert_eq!(
                view.label(crate::model::domains::FIELD_LABEL),
                Some("eu-1a")
            );
            assert_eq!(view.label("a"), Some("b"));
        }
        // A profile's own place for its domain stays, after the configured
        // field: an OpenStackServer's zone.
        let v = Config::from_yaml(
            "profiles: [openstack-server]\nbreaker: {domain: {field: /spec/failureDomain}}\n",
        )
        .unwrap()
        .validate()
        .unwrap();
        let server: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "OpenStackServer",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"availabilityZone": "az2"}
        }))
        .unwrap();
        assert_eq!(
            v.profiles[0].fields.failure_domain,
            ["/spec/failureDomain", "/spec/availabilityZone"]
        );
        assert_eq!(
            v.profiles[0]
                .project(&server)
                .view
                .label(crate::model::domains::FIELD_LABEL),
            Some("az2")
        );
    }

    #[test]
    fn the_config_by_example_is_a_real_config() {
        let page = include_str!("../docs/reference/config-example.md");
        let start = page
            .find("```yaml")
            .map(|i| i + "```yaml".len())
            .expect("docs/reference/config-example.md has a yaml block");
        let end = start + page[start..].find("```").expect("block ends");
        let mut cfg = Config::from_yaml(&page[start..end]).expect("the example parses");
        // The block shows `prometheus_url: null`; alerts need one to validate.
        cfg.signals.prometheus_url = Some("http://127.0.0.1:9090".into());
        let v = cfg.validate().expect("the example validates");
        let vm = v
            .profiles
            .iter()
            .find(|p| p.name == "my-vm")
            .expect("custom profile");
        assert_eq!(
            vm.hold.as_ref().map(|h| h.pause_value()),
            Some(serde_json::Value::from("true"))
        );
        assert_eq!(v.config.controller_grace, Duration::from_secs(300));
    }

    /// The configs the provider guides show (a yaml block whose first
    /// line is `# remedy config`) are real: they parse and validate.
    #[test]
    fn the_guides_configs_are_real_configs() {
        let mut seen = 0;
        for (name, page) in guides() {
            for block in page.split("```yaml\n").skip(1) {
                let block = block.split("```").next().unwrap_or_default();
                if !block.starts_with("# remedy config") {
                    continue;
                }
                seen += 1;
                Config::from_yaml(block)
                    .and_then(Config::validate)
                    .unwrap_or_else(|e| panic!("{name}: {e}\n{block}"));
            }
        }
        assert!(seen >= 5, "{seen} configs in the guides");
    }

    /// docs/guides/*.md, read at test time.
    pub fn guides() -> Vec<(String, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guides");
        let mut out: Vec<_> = std::fs::read_dir(&dir)
            .expect("docs/guides")
            .map(|e| {
                let p = e.expect("entry").path();
                let text = std::fs::read_to_string(&p).expect("read");
                (p.display().to_string(), text)
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_release_pace_is_validated() {
        let ok = Config::from_yaml(
            "breaker: {release: {probe_every: 1m, window: 5s, step: 2, min_success: 0.4}}",
        )
        .unwrap()
        .validate()
        .unwrap();
        assert_eq!(
            ok.config.breaker.release.probe_every,
            Some(Duration::from_secs(60))
        );
        for (yaml, field) in [
            ("{probe_every: 500ms}", "breaker.release.probe_every"),
            ("{window: 0s}", "breaker.release.window"),
            ("{step: -1}", "breaker.release.step"),
            ("{min_success: 1.5}", "breaker.release.min_success"),
        ] {
            let err = Config::from_yaml(&format!("breaker: {{release: {yaml}}}"))
                .unwrap()
                .validate()
                .unwrap_err();
            assert!(err.to_string().contains(field), "{yaml}: {err}");
        }
        assert!(Config::from_yaml("breaker: {release: {probes: 1}}").is_err());
        let err = Config::from_yaml("breaker: {hold: domain}")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("probe_every"), "{err}");
        Config::from_yaml("breaker: {hold: domain, release: {probe_every: 20s}}")
            .unwrap()
            .validate()
            .unwrap();
    }

    #[test]
    fn empty_file_gives_the_defaults() {
        let v = Config::from_yaml("{}").unwrap().validate().unwrap();
        assert_eq!(v.profiles.len(), 7);
        assert_eq!(v.config.backoff.base, Duration::from_secs(60));
        assert!(!v.config.dry_run);
    }

    #[test]
    fn full_example_parses() {
        let yaml = r#"
listen: 127.0.0.1:9000
dry_run: true
profiles:
  - capi-machine
  - {builtin: capi-cluster, version: v1beta2}
  - name: my-vm
    group: example.com
    version: v1
    kind: VirtualMachine
    fields:
      failure_reason: [/status/error/reason]
      state: [/status/phase]
    terminal_states: [Broken]
backoff: {base: 30s, cap: 1h, jitter: 0.2, quiet_window: 2h}
budget: {refill_per_second: 2, burst: 20}
breaker: {open_ratio: 0.5, close_ratio: 0.2, min_resources: 3, window: 1m, cooldown: 2m}
webhook: {token_file: /tmp/token, max_body_bytes: 65536, queue: 16}
signals: {prometheus_url: "http://127.0.0.1:9090", timeout: 2s, settle: 30s}
alerts:
  - alertname: RemedyTransientErrorRatioHigh
    select: {kind_label: kind, match_labels: {tier: workers}}
"#;
        let v = Config::from_yaml(yaml).unwrap().validate().unwrap();
        assert_eq!(v.config.tls, None, "plain HTTP unless tls is set");
        assert_eq!(v.profiles[1].version, "v1beta2");
        assert_eq!(v.profiles[2].plural(), "virtualmachines");
        assert_eq!(v.config.backoff.cap, Duration::from_secs(3600));
        assert_eq!(
            v.config.alerts[0].select.kind_label.as_deref(),
            Some("kind")
        );
    }

    /// #39.2: the shipped config's `breaker.domain: zone` gives each built-in
    /// that carries its zone a breaker per zone with nothing else set: an
    /// OpenStackServer by `spec.availabilityZone`, a Machine by
    /// `spec.failureDomain`; an OpenStackMachine (no zone) shares `none`.
    #[test]
    fn the_shipped_config_has_a_breaker_per_zone() {
        let text = include_str!("../deploy/base/config.yaml");
        let v = Config::from_yaml(text).unwrap().validate().unwrap();
        assert_eq!(v.config.breaker.domain, DomainBy::Zone);
        let of = |profile: &str, o: serde_json::Value| {
            let o: kube::api::DynamicObject = serde_json::from_value(o).unwrap();
            let p = v.profiles.iter().find(|p| p.name == profile).unwrap();
            let key = crate::model::view::ResourceKey::new(&p.kind, "ns", "x");
            let view = p.project(&o).view;
            DomainBy::Zone.of(&key, &view).to_string()
        };
        let server = serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "OpenStackServer",
            "metadata": {"name": "x", "namespace": "ns"}, "spec": {"availabilityZone": "az2"}});
        let machine = serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "x", "namespace": "ns"}, "spec": {"failureDomain": "fd-3"}});
        let osm = serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": "x", "namespace": "ns"}, "spec": {}});
        assert_eq!(of("openstack-server", server), "az2");
        assert_eq!(of("capi-machine", machine), "fd-3");
        assert_eq!(of("openstack-machine", osm), crate::model::domains::NONE);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("bogus: 1", "unknown field `bogus`"),
            (
                "backoff: {base: 1m, cap: 1s, jitter: 0, quiet_window: 1h}",
                "`backoff`",
            ),
            (
                "backoff: {base: soon, cap: 1s, jitter: 0, quiet_window: 1h}",
                "backoff",
            ),
            ("profiles: [nope]", "`profiles[0]`"),
            (
                "profiles: [capi-machine, capi-machine]",
                "duplicate profile",
            ),
            (
                "profiles: [capi-machine, {builtin: capi-machine, version: v1beta2}]",
                "duplicate profile",
            ),
            (
                "profiles: [{builtin: capi-cluster, hold: {field: /spec/paused, resume: {kind: Machine, label: cluster.x-k8s.io/cluster-name}}}]",
                "profiles[0].hold.resume.kind",
            ),
            (
                "profiles: [capi-machine, {builtin: capi-cluster, hold: {field: /spec/paused, resume: {kind: Machine, label: ''}}}]",
                "resume.label",
            ),
            (
                "budget: {refill_per_second: 0, burst: 1}",
                "budget.refill_per_second",
            ),
            (
                "budget: {per: {label: cluster.x-k8s.io/deployment-name, max_in_flight: 0}}",
                "budget.per",
            ),
            (
                "budget: {per: {label: a, field: /spec/b, max_in_flight: 1}}",
                "budget.per",
            ),
            (
                "breaker: {open_ratio: 0.1, close_ratio: 0.5, min_resources: 1, window: 1m, cooldown: 1m}",
                "breaker.close_ratio",
            ),
            (
                "breaker: {domain: {field: spec.zone}}",
                "breaker.domain.field",
            ),
            ("breaker: {domain: {label: ''}}", "breaker.domain.label"),
            ("breaker: {domain: zones}", "unknown failure domain"),
            (
                "leader_election: {episode_record: Remedy_Episodes}",
                "leader_election.episode_record",
            ),
            ("pause_switch: {configmap: Remedy_Pause}", "pause_switch"),
            ("pause_switch: {namespace: ''}", "pause_switch"),
            ("alerts: [{alertname: X}]", "signals.prometheus_url"),
            ("tls: {cert_file: '', key_file: k.pem}", "`tls.cert_file`"),
            ("tls: {cert_file: c.pem, key_file: ''}", "`tls.key_file`"),
            ("tls: {cert_file: c.pem}", "missing field `key_file`"),
            (
                "tls: {cert_file: c.pem, key_file: k.pem, ca: x}",
                "unknown field `ca`",
            ),
            (
                "signals: {prometheus_url: 'ftp://x', timeout: 1s, settle: 1s}",
                "signals.prometheus_url",
            ),
            (
                "classification: {rules: [{name: x, verdict: transient, text: '('}]}",
                "classification.rules",
            ),
            (
                "profiles: [{name: x, group: g, version: v1, kind: K, fields: {state: [status.phase]}}]",
                "JSON pointer",
            ),
            (
                "profiles: [{name: x, group: g, version: v1, kind: K, remediation: {clear_status: [/spec/x]}}]",
                "under /status",
            ),
            (
                "http: {header_read_timeout: 0s}",
                "http.header_read_timeout",
            ),
            ("http: {idle_timeout: 500ms}", "http.idle_timeout"),
            ("http: {max_connections: 0}", "http.max_connections"),
            ("http: {max_header_bytes: 4096}", "http.max_header_bytes"),
            ("http: {max_header_bytes: 2000000}", "http.max_header_bytes"),
            ("http: {max_headers: 0}", "http.max_headers"),
            ("http: {max_conns: 1}", "unknown field `max_conns`"),
            ("reload_interval: 100ms", "reload_interval"),
        ];
        for (yaml, want) in cases {
            let e = err(yaml).to_string();
            assert!(e.contains(want), "{yaml}: {e} does not mention {want}");
        }
    }

    #[test]
    fn a_duplicate_alertname_is_rejected_by_name() {
        // Lookups by alertname take the first rule, so a second rule of the
        // same name would be silently ignored.
        let yaml = |names: &[&str]| {
            let alerts: Vec<String> = names
                .iter()
                .map(|n| format!("{{alertname: {n}}}"))
                .collect();
            format!(
                "signals: {{prometheus_url: 'http://127.0.0.1:9090'}}\nalerts: [{}]\n",
                alerts.join(", ")
            )
        };
        let ok = Config::from_yaml(&yaml(&["A", "B", "a"]))
            .unwrap()
            .validate()
            .expect("distinct names (case matters, as in Alertmanager) are valid");
        assert_eq!(ok.config.alerts.len(), 3);
        let e = err(&yaml(&["A", "B", "A"]));
        assert_eq!(e.label(), "invalid");
        let msg = e.to_string();
        assert!(
            msg.contains("`alerts[2].alertname`") && msg.contains("duplicate alert \"A\""),
            "{msg}"
        );
    }

    #[test]
    fn tls_section_parses() {
        let v = Config::from_yaml(
            "tls: {cert_file: /etc/remedy/tls.crt, key_file: /etc/remedy/tls.key}",
        )
        .unwrap()
        .validate()
        .unwrap();
        let t = v.config.tls.expect("tls set");
        assert_eq!(t.cert_file, PathBuf::from("/etc/remedy/tls.crt"));
        assert_eq!(t.key_file, PathBuf::from("/etc/remedy/tls.key"));
    }

    #[test]
    fn load_reports_missing_file() {
        let e = Config::load(Path::new("/nonexistent/remedy.yaml")).unwrap_err();
        assert_eq!(e.label(), "read");
        assert!(e.to_string().contains("/nonexistent/remedy.yaml"));
    }
}
