//! Label values remedy writes, pre-set to 0 by [`super::Metrics::preset`]:
//! a counter that first appears at 1 is invisible to `increase()`/`rate()`,
//! so the first burst of failures would not alert.
//!
//! Values the I/O layers write are enums here, and the label sets take the
//! enum, so a value that is not listed does not compile; presets, docs/reference/metrics.md
//! check and tests iterate `ALL`. The values named by a layer the metrics
//! may not import (`remediate`'s steps, `decide`'s refusals, `record`'s
//! shed reasons; scripts/check-layers.py) stay tables, kept in step with
//! their enums by tests.

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// An enum of one label's values: `ALL` in the order presets and docs list
/// them, `label()` the value written.
macro_rules! label_values {
    ($($(#[$doc:meta])* $name:ident { $($variant:ident = $label:literal),+ $(,)? })+) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            pub const fn label(self) -> &'static str {
                match self {
                    $(Self::$variant => $label),+
                }
            }

            /// Every value's label, in `ALL` order.
            pub fn labels() -> Vec<&'static str> {
                Self::ALL.iter().map(|v| v.label()).collect()
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
                std::fmt::Write::write_str(encoder, self.label())
            }
        }
    )+};
}

label_values! {
    /// The signal sources remedy queries: the `target` label.
    SignalTarget { Prometheus = "prometheus", Alertmanager = "alertmanager" }
    /// What became of an action (`daemon::execute`), `ExecError`s included.
    ActionResult {
        Success = "success",
        DryRun = "dry_run",
        Skipped = "skipped",
        Conflict = "conflict",
        Error = "error",
        Forbidden = "forbidden",
        NotLeader = "not_leader",
        GaveUp = "gave_up",
        NoStatusSubresource = "no_status_subresource",
        Paused = "paused",
    }
    /// The status of a notification's alerts; `invalid` when unreadable.
    WebhookStatus { Firing = "firing", Resolved = "resolved", Invalid = "invalid" }
    /// What the webhook did with a notification (`unselectable`: an alert
    /// whose labels no object can match, refused).
    WebhookResult {
        Accepted = "accepted",
        Duplicate = "duplicate",
        Ignored = "ignored",
        Unselectable = "unselectable",
        Rejected = "rejected",
        Unauthorized = "unauthorized",
        TooLarge = "too_large",
        Overloaded = "overloaded",
        Unrecorded = "unrecorded",
    }
    /// The answer to one query to Prometheus or Alertmanager.
    SignalResult { Ok = "ok", Error = "error", Timeout = "timeout", Malformed = "malformed" }
    /// What remedy did about a reset a stale write undid.
    OverwriteResult { Reapplied = "reapplied", GaveUp = "gave_up", NotReapplied = "not_reapplied" }
    /// A watch's events (`daemon::watch`).
    WatchEvent {
        Init = "init",
        InitApply = "init_apply",
        InitDone = "init_done",
        Apply = "apply",
        Delete = "delete",
        Expired = "expired",
        Error = "error",
    }
    /// A re-read of the TLS certificate or the webhook token.
    Reload { Reloaded = "reloaded", Error = "error" }
    /// A read of the pause switch ConfigMap (`daemon::pause`).
    PauseRead { Set = "set", Clear = "clear", Absent = "absent", Invalid = "invalid", Error = "error" }
    /// A connection closed for a timeout (`daemon::server`).
    HttpTimeout { Handshake = "handshake", Header = "header", Idle = "idle" }
    /// Who wrote the episode record; `repair`: a corrupt record replaced by
    /// an empty one when read.
    RecordWriter { Webhook = "webhook", Leader = "leader", Repair = "repair" }
    /// A write of the episode record: `record::RecordError::label`, or ok.
    RecordResult {
        Ok = "ok",
        Conflict = "conflict",
        TooLarge = "too_large",
        Forbidden = "forbidden",
        Error = "error",
    }
}

/// The signal sources' names where they are not a label (errors, logs,
/// `/status`).
pub const PROMETHEUS: &str = SignalTarget::Prometheus.label();
pub const ALERTMANAGER: &str = SignalTarget::Alertmanager.label();

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
    "retry",
    // External remediation: OwnerRemediated=False set on a Machine.
    "replace",
];
/// The `alert` of `remedy_episodes_refused_total` for an alert name that is
/// not configured (one read from the episode record): names from there are
/// not label values, or a forged record could add a series per name.
pub const OTHER_ALERT: &str = "other";
/// `episodes::Refusal::label`, in `Refusal::ALL` order (a test checks).
pub const REFUSALS: &[&str] = &[
    "cluster_wide",
    "full",
    "unproven",
    "over_cap",
    "invalid_scope",
    "stale",
];
/// `record::Shed::label`: what was dropped to keep the record writable.
pub const RECORD_SHED: &[&str] = &["finished", "unproven", "corrupt"];
