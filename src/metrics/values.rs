//! Label values remedy writes, pre-set to 0 by [`super::Metrics::preset`]:
//! a counter that first appears at 1 is invisible to `increase()`/`rate()`,
//! so the first burst of failures would not alert. Tests keep these in step
//! with the code that writes them.

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
