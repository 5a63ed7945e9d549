//! Declarative resource profiles: which kind to watch and where its failure
//! signals live. Field paths are JSON pointers tried in order, so one profile
//! reads both the CAPI v1beta1 (`status.failureReason`) and v1beta2
//! (`status.deprecated.v1beta1.failureReason`) layouts.

//!
//! Split by concern: the types and their validation here, how a hold is
//! written and whose a pause is in [`hold`], how an object is projected
//! into a view in [`projection`], the built-in profiles in [`builtins`].

mod builtins;
mod hold;
mod projection;
#[cfg(test)]
mod tests;

pub use builtins::{builtin, builtins};
pub use hold::{DEFAULT_ANNOTATION_VALUE, HoldMark, HoldSpec, HoldTarget, ResumeSpec};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default value remedy writes into a pause annotation. Cluster API checks
/// only that `cluster.x-k8s.io/paused` is present (`annotations.HasPaused`),
/// so any value pauses; other controllers need a given value (Crossplane:
/// `crossplane.io/paused: "true"`), set per profile with `hold.value`.
pub const PAUSE_MARKER: &str = "remedy.dev/hold";
/// Annotation recording why and since when remedy holds a resource, and what
/// it wrote to pause it. Ownership is decided from this record, never from
/// the pause value alone (a human may write the same value).
pub const HOLD_ANNOTATION: &str = "remedy.dev/hold";
/// Value remedy writes into skip-remediation while it clears failure status.
pub const SKIP_MARKER: &str = "remedy.dev/clearing";
/// remedy's own failure counter, kept on kinds without a native one (CAPI):
/// incremented on every hold so release backoff grows like brupop's.
pub const CRASH_ANNOTATION: &str = "remedy.dev/crash-count";
pub const FAILURE_TIME_ANNOTATION: &str = "remedy.dev/failure-time";
pub const CAPI_PAUSED: &str = "cluster.x-k8s.io/paused";
/// Crossplane's pause annotation (crossplane-runtime `meta.AnnotationKeyReconciliationPaused`).
pub const CROSSPLANE_PAUSED: &str = "crossplane.io/paused";
pub const CAPI_SKIP_REMEDIATION: &str = "cluster.x-k8s.io/skip-remediation";
/// An object with this annotation (any value) is not remedy's: it is not
/// counted, held or remediated, as if it were not watched.
pub const IGNORE_ANNOTATION: &str = "remedy.dev/ignore";
/// Written by remedy on the objects of a hold's `resume` once the hold is
/// removed (the time): the update is what makes their controller reconcile.
pub const RESUMED_ANNOTATION: &str = "remedy.dev/resumed";
/// Where a profile with `hold.with_owner` keeps the name of the owner of
/// that kind (from the object's ownerReferences) among the view's labels.
pub const HELD_WITH_LABEL: &str = "remedy.dev/held-with";
/// Hold reason of an object held because remedy holds its owner
/// (`hold.with_owner`): `with:<Kind>/<name>`. Not a failure of its own:
/// such a hold leaves its crash count and failure time as they were.
pub const WITH_PREFIX: &str = "with:";
/// remedy's note on a resource it holds: why, and what it waits for
/// (`model::why`); removed with the hold.
pub const WHY_ANNOTATION: &str = "remedy.dev/why";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Stable profile name, e.g. `capi-machine`.
    pub name: String,
    /// API group of the watched kind.
    pub group: String,
    /// API version of the watched kind.
    pub version: String,
    pub kind: String,
    /// Resource plural; defaults to the lowercased kind + "s".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plural: Option<String>,
    /// Where the object keeps its failure: JSON pointers, the first
    /// present wins.
    #[serde(default)]
    pub fields: FieldPaths,
    /// States (at `fields.state`) that mean the resource itself is broken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub terminal_states: Vec<String>,
    /// Condition types whose `Unknown` status carries a cloud error: the
    /// classification rules read them as they read `False` ones, except
    /// terminal rules (unknown is never terminal). CAPA marks
    /// `InstanceReady` Unknown whenever it cannot describe the instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_conditions: Vec<String>,
    /// Conditions classification never reads, by type or by reason: what
    /// another controller concluded, not a cloud error. CAPI's
    /// MachineHealthCheck writes `HealthCheckSucceeded` and
    /// `OwnerRemediated` (reason `NodeStartupTimeout`, which the `timeout`
    /// rule would read as a transient cloud error), and the v1beta1 Ready
    /// summary copies their reasons.
    #[serde(default, skip_serializing_if = "IgnoreConditions::is_empty")]
    pub ignore_conditions: IgnoreConditions,
    /// How remedy holds the resource; `None` means it cannot be held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldSpec>,
    /// What remediation writes.
    #[serde(default)]
    pub remediation: RemediationSpec,
    /// Only objects this Kubernetes label selector matches are watched
    /// (`env=prod,!canary`, `tier in (a,b)`); the rest are not remedy's.
    /// The apiserver filters, so they cost nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// The controller's own retry rule (`brupop`), when it backs off by
    /// itself: the exported delay follows it instead of the configured
    /// `backoff`, counts are never forgotten, and remedy adds no wait of its
    /// own (remediating is what spares the controller's wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<crate::model::backoff::BackoffModel>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IgnoreConditions {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

impl IgnoreConditions {
    pub fn is_empty(&self) -> bool {
        self.types.is_empty() && self.reasons.is_empty()
    }

    pub(super) fn skips(&self, type_: &str, reason: Option<&str>) -> bool {
        self.types.iter().any(|t| t == type_)
            || reason.is_some_and(|r| self.reasons.iter().any(|x| x == r))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldPaths {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_reason: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_message: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crash_count: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_time: Vec<String>,
    /// Where the object names its failure domain (zone, region), for
    /// `breaker.domain: {field: …}`; kept among the view's labels as
    /// [`crate::model::domains::FIELD_LABEL`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domain: Vec<String>,
    /// Where the object names its owner, for `budget.per: {field: …}`;
    /// kept among the view's labels as [`crate::model::owner::OWNER_LABEL`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemediationSpec {
    /// Status fields (JSON pointers under /status) remediation sets to null.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clear_status: Vec<String>,
    /// Status fields reset to a value (e.g. crash_count to 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset_status: Vec<ResetField>,
    /// Annotation set while clearing so health checks do not delete the
    /// resource mid-way (CAPI MachineHealthCheck honours it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_remediation_annotation: Option<String>,
    /// Whether a breaker release also clears the failure fields (with the
    /// skip-remediation guard). The CAPI providers return early while
    /// failureReason is set ("Not reconciling machine in failed state"),
    /// so a release that only unpaused would probe nothing. Counters are
    /// kept either way.
    #[serde(default = "yes")]
    pub release_clears_failure: bool,
    /// `clear_status` is never written while one of these fields is set.
    /// CAPO's OpenStackServer: an `instanceID` means Nova made the server
    /// and reports it ERROR, which is real; an ERROR from a failed create
    /// call has none, and clearing it is what makes CAPO create it again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep_if_set: Vec<String>,
    /// Conditions the controller stops on (in the lists at
    /// `fields.conditions`): each one `False` with the given reason is
    /// removed alone, by a JSON patch that tests its index and content
    /// first; every other condition is kept. Also never while a
    /// `keep_if_set` field is set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clear_conditions: Vec<ConditionMatch>,
    /// The controller gives up on a transient failure and never tries
    /// again by itself (CAPO v0.14 stops on failureReason and on a server
    /// in ERROR; the CAPI v1beta1 contract calls failureReason terminal):
    /// remedy retries such a resource itself, outside any outage, once its
    /// controller has written nothing for `quiet` and its backoff has
    /// passed, through the budget, by clearing what stops the controller.
    /// Unset: the controller retries by itself (brupop, CAPO main) or the
    /// resource is not remedy's to retry (docs/upstream-behaviour.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
}

/// How remedy retries what the controller gave up on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// No write by anyone but remedy for this long: the controller has
    /// stopped (a controller that retries writes its attempts).
    #[serde(with = "humantime_serde", default = "default_retry_quiet")]
    #[schemars(with = "crate::model::DurationSchema")]
    pub quiet: std::time::Duration,
}

/// A controller that gave up writes its failure once; one still working
/// on the object writes within a minute (CAPO's BUILD polls every 10 s,
/// its ERROR polls on main every 60 s).
pub fn default_retry_quiet() -> std::time::Duration {
    std::time::Duration::from_secs(90)
}

impl Default for RetrySpec {
    fn default() -> Self {
        Self {
            quiet: default_retry_quiet(),
        }
    }
}

/// A condition remediation removes: of this type, `False`, and with this
/// reason if one is given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConditionMatch {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ConditionMatch {
    /// Whether `condition` (one item of a conditions list) is this one.
    pub fn matches(&self, condition: &Value) -> bool {
        let text = |k: &str| condition.get(k).and_then(Value::as_str);
        text("type") == Some(self.type_.as_str())
            && text("status") == Some("False")
            && self
                .reason
                .as_deref()
                .is_none_or(|r| text("reason") == Some(r))
    }
}

fn yes() -> bool {
    true
}

impl Default for RemediationSpec {
    fn default() -> Self {
        Self {
            clear_status: Vec::new(),
            reset_status: Vec::new(),
            skip_remediation_annotation: None,
            release_clears_failure: true,
            keep_if_set: Vec::new(),
            clear_conditions: Vec::new(),
            retry: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetField {
    pub path: String,
    pub value: Value,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProfileError {
    #[error("profile {profile}: {field} is empty")]
    Empty {
        profile: String,
        field: &'static str,
    },
    #[error("profile {profile}: {field} path {path:?} is not a JSON pointer (must start with '/')")]
    BadPointer {
        profile: String,
        field: &'static str,
        path: String,
    },
    #[error(
        "profile {profile}: remediation path {path:?} must be under /status (the status subresource)"
    )]
    NotStatus { profile: String, path: String },
    #[error("unknown built-in profile {0:?} (see `remedy profiles`)")]
    UnknownBuiltin(String),
    #[error("profile {profile}: hold {why}")]
    BadHold { profile: String, why: &'static str },
    #[error("profile {profile}: remediation.retry {why}")]
    BadRetry { profile: String, why: &'static str },
    #[error("profile {profile}: label_selector {selector:?}: {why}")]
    BadSelector {
        profile: String,
        selector: String,
        why: String,
    },
}

impl Profile {
    pub fn plural(&self) -> String {
        self.plural
            .clone()
            .unwrap_or_else(|| format!("{}s", self.kind.to_ascii_lowercase()))
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn validate(&self) -> Result<(), ProfileError> {
        let empty = |field| ProfileError::Empty {
            profile: self.name.clone(),
            field,
        };
        if self.name.is_empty() {
            return Err(empty("name"));
        }
        if self.version.is_empty() {
            return Err(empty("version"));
        }
        if self.kind.is_empty() {
            return Err(empty("kind"));
        }
        let f = &self.fields;
        let groups: [(&'static str, &Vec<String>); 8] = [
            ("fields.failure_reason", &f.failure_reason),
            ("fields.failure_message", &f.failure_message),
            ("fields.conditions", &f.conditions),
            ("fields.state", &f.state),
            ("fields.crash_count", &f.crash_count),
            ("fields.failure_time", &f.failure_time),
            ("fields.failure_domain", &f.failure_domain),
            ("fields.owner", &f.owner),
        ];
        for (field, paths) in groups {
            for p in paths {
                self.check_pointer(field, p)?;
            }
        }
        if self.unknown_conditions.iter().any(String::is_empty) {
            return Err(empty("unknown_conditions"));
        }
        let ig = &self.ignore_conditions;
        if ig.types.iter().chain(&ig.reasons).any(String::is_empty) {
            return Err(empty("ignore_conditions"));
        }
        if let Some(h) = &self.hold {
            self.check_hold(h)?;
        }
        if let Some(sel) = &self.label_selector {
            check_selector(sel).map_err(|why| ProfileError::BadSelector {
                profile: self.name.clone(),
                selector: sel.clone(),
                why,
            })?;
        }
        let r = &self.remediation;
        for p in &r.keep_if_set {
            self.check_pointer("remediation.keep_if_set", p)?;
        }
        if !r.clear_conditions.is_empty() {
            if r.clear_conditions
                .iter()
                .any(|c| c.type_.is_empty() || c.reason.as_deref() == Some(""))
            {
                return Err(empty("remediation.clear_conditions"));
            }
            // They are removed where they are read, with the status.
            if f.conditions.is_empty() {
                return Err(empty("fields.conditions"));
            }
            if let Some(p) = f.conditions.iter().find(|p| !p.starts_with("/status/")) {
                return Err(ProfileError::NotStatus {
                    profile: self.name.clone(),
                    path: p.clone(),
                });
            }
        }
        for p in r
            .clear_status
            .iter()
            .chain(r.reset_status.iter().map(|f| &f.path))
        {
            self.check_pointer("remediation", p)?;
            if !p.starts_with("/status/") {
                return Err(ProfileError::NotStatus {
                    profile: self.name.clone(),
                    path: p.clone(),
                });
            }
        }
        if let Some(retry) = &r.retry {
            let bad = |why| ProfileError::BadRetry {
                profile: self.name.clone(),
                why,
            };
            // A retry is clearing what stops the controller.
            if r.clear_status.is_empty() && r.clear_conditions.is_empty() {
                return Err(bad(
                    "needs remediation.clear_status or clear_conditions: what stops the controller",
                ));
            }
            // remedy counts the retries in its own annotations.
            if self.has_native_counter() {
                return Err(bad(
                    "is for controllers that give up: one that counts its own crashes retries by itself",
                ));
            }
            if retry.quiet.is_zero() {
                return Err(bad("quiet must be positive"));
            }
        }
        Ok(())
    }

    fn check_hold(&self, h: &HoldSpec) -> Result<(), ProfileError> {
        let bad = |why| ProfileError::BadHold {
            profile: self.name.clone(),
            why,
        };
        if let Some(r) = &h.resume {
            if r.kind.is_empty() {
                return Err(bad("resume.kind is empty"));
            }
            if r.label.is_empty() || r.label.chars().any(char::is_whitespace) {
                return Err(bad("resume.label must be a label key"));
            }
        }
        if h.with_owner
            .as_ref()
            .is_some_and(|k| k.is_empty() || *k == self.kind)
        {
            return Err(bad("with_owner must name another kind"));
        }
        if h.not_while.iter().any(String::is_empty) {
            return Err(bad("not_while has an empty condition type"));
        }
        for p in &h.new_until {
            self.check_pointer("hold.new_until", p)?;
        }
        match h.target() {
            None => Err(bad("needs exactly one of `annotation` or `field`")),
            Some(HoldTarget::Annotation(a)) => {
                if a.is_empty() {
                    Err(bad("annotation is empty"))
                } else if a == HOLD_ANNOTATION {
                    Err(bad("annotation cannot be remedy's own record annotation"))
                } else if h.value.as_ref().is_some_and(|v| !v.is_string()) {
                    Err(bad("value must be a string for an annotation"))
                } else if h.value.as_ref().is_some_and(|v| v.as_str() == Some("")) {
                    Err(bad("value must not be empty"))
                } else {
                    Ok(())
                }
            }
            Some(HoldTarget::Field(f)) => {
                self.check_pointer("hold.field", f)?;
                if !f.starts_with("/spec/") {
                    Err(bad(
                        "field must be under /spec (a pause the controller reads)",
                    ))
                } else if h
                    .value
                    .as_ref()
                    .is_some_and(|v| v.is_null() || *v == Value::Bool(false))
                {
                    Err(bad("value must be what pauses, not null or false"))
                } else {
                    Ok(())
                }
            }
        }
    }

    fn check_pointer(&self, field: &'static str, p: &str) -> Result<(), ProfileError> {
        if p.starts_with('/') && p.len() > 1 {
            Ok(())
        } else {
            Err(ProfileError::BadPointer {
                profile: self.name.clone(),
                field,
                path: p.to_string(),
            })
        }
    }
}

/// Checks a Kubernetes label selector as the apiserver parses it
/// (`k8s.io/apimachinery/pkg/labels`): requirements separated by commas
/// outside parentheses, each `key`, `!key`, `key=v`, `key==v`, `key!=v`,
/// `key in (v,...)` or `key notin (v,...)`. A bad one is refused at start,
/// not found later as a watch that fails forever.
pub fn check_selector(sel: &str) -> Result<(), String> {
    use std::sync::LazyLock;
    // Keys: an optional DNS-subdomain prefix and a name; values: a label value.
    static REQ: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
        let key = r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?";
        let value = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?";
        regex::Regex::new(&format!(
            r"^\s*(?:!\s*{key}|{key}\s*(?:(?:==?|!=)\s*{value}|\s(?:in|notin)\s*\(\s*{value}(?:\s*,\s*{value})*\s*\))?)\s*$"
        ))
        .ok()
    });
    let Some(req) = REQ.as_ref() else {
        return Err("selector grammar did not compile".into());
    };
    if sel.trim().is_empty() {
        return Err("is empty (leave it out to watch every object)".into());
    }
    let (mut depth, mut start) = (0i32, 0usize);
    let mut parts = Vec::new();
    for (i, c) in sel.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&sel[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced parentheses".into());
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    parts.push(&sel[start..]);
    for p in parts {
        let name = p.trim().trim_start_matches('!');
        let key = name.split(['=', '!', ' ', '(']).next().unwrap_or_default();
        if key.rsplit('/').next().is_some_and(|n| n.len() > 63) {
            return Err(format!("{p:?}: a label name has at most 63 characters"));
        }
        if !req.is_match(p) {
            return Err(format!(
                "{p:?} is not a requirement (key, !key, key=v, key!=v, key in (a,b), key notin (a,b))"
            ));
        }
    }
    Ok(())
}
