//! Declarative resource profiles: which kind to watch and where its failure
//! signals live. Field paths are JSON pointers tried in order, so one profile
//! reads both the CAPI v1beta1 (`status.failureReason`) and v1beta2
//! (`status.deprecated.v1beta1.failureReason`) layouts.

use crate::model::view::{
    ConditionView, FailureText, Labels, Owner, PauseState, Projection, ResourceView,
};
use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Stable profile name, e.g. `capi-machine`.
    pub name: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Resource plural; defaults to the lowercased kind + "s".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plural: Option<String>,
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

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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

    fn skips(&self, type_: &str, reason: Option<&str>) -> bool {
        self.types.iter().any(|t| t == type_)
            || reason.is_some_and(|r| self.reasons.iter().any(|x| x == r))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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

/// How a profile's controller is paused: an annotation (CAPI, Crossplane)
/// or a spec field (CAPI `Cluster.spec.paused`), and the value that pauses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldSpec {
    /// Annotation the controller reads to stop reconciling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<String>,
    /// Or a field under /spec (JSON pointer) the controller reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What remedy writes. Annotation: a string (default `"true"`, which
    /// every known controller honours: Crossplane pauses only on exactly
    /// that); field: any JSON value (default `true`). The controller must
    /// treat it as paused: see README "What a hold means". Ownership does
    /// not depend on it: remedy's record says which value it wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Objects whose controller does not requeue them when this hold goes
    /// (CAPI's Machine controller ignores `Cluster.spec.paused` turning
    /// false and waits for its 10-minute resync): remedy touches them
    /// after it removes the hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeSpec>,
    /// The kind of this object's owner (its ownerReference) whose hold it
    /// follows: while remedy holds the owner it holds this object too, and
    /// releases it when the owner's hold goes. CAPO's OpenStackMachine
    /// leaves the cloud calls to its OpenStackServer, whose controller
    /// checks the pause only on itself and on the Cluster: holding the
    /// machine alone holds back no call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_owner: Option<String>,
    /// Condition types whose `False` status means the object's owner is
    /// already replacing it: remedy does not hold it then, since its pause
    /// would not stop that. CAPI's MachineSet deletes a Machine with
    /// `OwnerRemediated=False` (the MachineHealthCheck's order) without
    /// looking at its pause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_while: Vec<String>,
}

/// After a hold on an object X is removed, remedy writes
/// [`RESUMED_ANNOTATION`] on each watched object of `kind` in X's namespace
/// whose label `label` is X's name, so their controller reconciles them now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumeSpec {
    /// The kind of a watched profile (`Machine`).
    pub kind: String,
    /// The label naming the held object (`cluster.x-k8s.io/cluster-name`).
    pub label: String,
}

/// Where a hold is written, resolved from a validated [`HoldSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldTarget<'a> {
    Annotation(&'a str),
    Field(&'a str),
}

/// What an annotation hold without `value` writes.
pub const DEFAULT_ANNOTATION_VALUE: &str = "true";

impl HoldSpec {
    pub fn annotation(key: &str) -> Self {
        Self {
            annotation: Some(key.into()),
            field: None,
            value: None,
            resume: None,
            with_owner: None,
            not_while: Vec::new(),
        }
    }

    /// An annotation hold that writes [`PAUSE_MARKER`]: the built-in CAPI
    /// profiles' (CAPI honours any value), so that whoever reads the object
    /// sees at once whose pause it is.
    pub fn marked(key: &str) -> Self {
        Self {
            value: Some(Value::from(PAUSE_MARKER)),
            ..Self::annotation(key)
        }
    }

    pub fn target(&self) -> Option<HoldTarget<'_>> {
        match (&self.annotation, &self.field) {
            (Some(a), None) => Some(HoldTarget::Annotation(a)),
            (None, Some(f)) => Some(HoldTarget::Field(f)),
            _ => None,
        }
    }

    /// The value remedy writes to pause.
    pub fn pause_value(&self) -> Value {
        match (&self.value, self.target()) {
            (Some(v), _) => v.clone(),
            (None, Some(HoldTarget::Field(_))) => Value::Bool(true),
            (None, _) => Value::from(DEFAULT_ANNOTATION_VALUE),
        }
    }

    /// One line for `check-config`: where the hold goes and what it writes.
    pub fn describe(&self) -> String {
        let value = self.pause_value();
        let with = self
            .with_owner
            .as_ref()
            .map(|k| format!("; also while its {k} is held"))
            .unwrap_or_default();
        match self.target() {
            Some(HoldTarget::Annotation(k)) => format!("annotation {k}={value}{with}"),
            Some(HoldTarget::Field(f)) => format!("field {f}={value}{with}"),
            None => "invalid".to_string(),
        }
    }

    /// What a controller known to read this hold needs, when the value
    /// remedy writes would not pause it; `None` when it would, or when the
    /// key is not one remedy knows.
    pub fn mismatch(&self) -> Option<&'static str> {
        let value = self.pause_value();
        match self.target()? {
            HoldTarget::Annotation(CROSSPLANE_PAUSED) if value.as_str() != Some("true") => Some(
                "Crossplane (crossplane-runtime meta.IsPaused) pauses only on exactly \"true\"",
            ),
            HoldTarget::Field("/spec/paused") if value != Value::Bool(true) => {
                Some("CAPI reads Cluster.spec.paused as a boolean: only true pauses")
            }
            _ => None,
        }
    }

    /// The pause as it is on the object now, `None` when absent.
    pub fn current(&self, annotations: &BTreeMap<String, String>, data: &Value) -> Option<Value> {
        match self.target()? {
            HoldTarget::Annotation(k) => annotations.get(k).map(|v| Value::from(v.as_str())),
            HoldTarget::Field(p) => data.pointer(p).filter(|v| !v.is_null()).cloned(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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

    /// Projects a full object into the compact view. Never fails: fields of
    /// the wrong type are recorded in `malformed` so the resource is reported
    /// unclassifiable instead of being guessed at.
    pub fn project(&self, obj: &DynamicObject) -> Projection {
        let meta = &obj.metadata;
        let mut view = ResourceView {
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            resource_version: meta.resource_version.as_deref().unwrap_or_default().into(),
            labels: Labels::from_pairs(
                meta.labels
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .chain(
                        first(&obj.data, &self.fields.failure_domain)
                            .and_then(Value::as_str)
                            .filter(|d| !d.is_empty())
                            .map(|d| (crate::model::domains::FIELD_LABEL, d)),
                    )
                    .chain(
                        first(&obj.data, &self.fields.owner)
                            .and_then(Value::as_str)
                            .filter(|o| !o.is_empty())
                            .map(|o| (crate::model::owner::OWNER_LABEL, o)),
                    )
                    .chain(self.held_with(obj).map(|o| (HELD_WITH_LABEL, o))),
            ),
            deleting: meta.deletion_timestamp.is_some(),
            ..ResourceView::default()
        };
        let empty = BTreeMap::new();
        let annotations = meta.annotations.as_ref().unwrap_or(&empty);
        view.ignored = annotations.contains_key(IGNORE_ANNOTATION);
        view.why = annotations
            .get(WHY_ANNOTATION)
            .map_or(0, |t| crate::model::why::digest(t));
        view.pause = self.pause_state(annotations, &obj.data);
        view.clearable = self.clearable(&obj.data);
        view.skip_remediation = match self
            .remediation
            .skip_remediation_annotation
            .as_ref()
            .and_then(|k| annotations.get(k))
        {
            None => Owner::Absent,
            Some(v) if v == SKIP_MARKER => Owner::Remedy,
            Some(_) => Owner::Other,
        };

        let data = &obj.data;
        let f = &self.fields;
        if !self.has_native_counter() {
            if let Some(v) = annotations.get(CRASH_ANNOTATION) {
                match v.parse::<u32>() {
                    Ok(n) => view.crash_count = Some(n),
                    Err(_) => view.malformed.push("crash_count"),
                }
            }
            if let Some(v) = annotations.get(FAILURE_TIME_ANNOTATION) {
                match DateTime::parse_from_rfc3339(v) {
                    Ok(t) => view.failure_time = Some(t.with_timezone(&Utc)),
                    Err(_) => view.malformed.push("failure_time"),
                }
            }
        }
        let mut failure = FailureText {
            reason: text(
                data,
                &f.failure_reason,
                "failure_reason",
                &mut view.malformed,
            ),
            message: text(
                data,
                &f.failure_message,
                "failure_message",
                &mut view.malformed,
            ),
            state: text(data, &f.state, "state", &mut view.malformed),
            conditions: Vec::new(),
        };
        if let Some(v) = first(data, &f.crash_count) {
            match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => view.crash_count = Some(n),
                None => view.malformed.push("crash_count"),
            }
        }
        if let Some(v) = first(data, &f.failure_time) {
            match v
                .as_str()
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            {
                Some(t) => view.failure_time = Some(t.with_timezone(&Utc)),
                None => view.malformed.push("failure_time"),
            }
        }
        if let Some(v) = first(data, &f.conditions) {
            match conditions(v) {
                Some(c) => {
                    let not_while = self.hold.as_ref().map_or(&[][..], |h| &h.not_while[..]);
                    view.replaced = c.iter().any(|c| {
                        c.status.as_ref() == "False" && not_while.iter().any(|t| **t == *c.type_)
                    });
                    failure.conditions = c
                        .into_iter()
                        .filter(|c| !self.ignore_conditions.skips(&c.type_, c.reason.as_deref()))
                        .collect();
                }
                None => view.malformed.push("conditions"),
            }
        }
        Projection { view, failure }
    }

    /// The name of the owner whose hold this object follows
    /// (`hold.with_owner`): its first ownerReference of that kind.
    fn held_with<'a>(&self, obj: &'a DynamicObject) -> Option<&'a str> {
        let kind = self.hold.as_ref()?.with_owner.as_deref()?;
        obj.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.kind == kind && !r.name.is_empty())
            .map(|r| r.name.as_str())
    }

    /// Whether remediation may write `clear_status` on this object now:
    /// one of its fields is set and none of `keep_if_set` is.
    pub fn clearable(&self, data: &Value) -> bool {
        let set = |p: &String| data.pointer(p).is_some_and(|v| !v.is_null());
        let r = &self.remediation;
        r.clear_status.iter().any(set) && !r.keep_if_set.iter().any(set)
    }

    /// Whether the object itself counts failures (brupop); otherwise remedy
    /// keeps its own count in annotations.
    pub fn has_native_counter(&self) -> bool {
        !self.fields.crash_count.is_empty()
    }

    /// Ours only when remedy's record is there and says remedy wrote exactly
    /// the value the pause has now; any other pause (set before, changed
    /// after, or with the record removed) is someone else's and is never
    /// touched. A human who wants to keep a remedy hold removes the record.
    fn pause_state(&self, annotations: &BTreeMap<String, String>, data: &Value) -> PauseState {
        let Some(hold) = &self.hold else {
            return PauseState::NotPaused;
        };
        let Some(current) = hold.current(annotations, data) else {
            return PauseState::NotPaused;
        };
        if matches!(hold.target(), Some(HoldTarget::Field(_))) && current != hold.pause_value() {
            // A field holding something else (`paused: false`) is no pause.
            return PauseState::NotPaused;
        }
        let Some(record) = annotations
            .get(HOLD_ANNOTATION)
            .and_then(|r| HoldMark::parse(r))
        else {
            return PauseState::Foreign;
        };
        if record.wrote_value() != current {
            return PauseState::Foreign;
        }
        PauseState::Ours {
            since: Some(record.since),
            reason: Some(record.reason.into()),
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

/// The JSON remedy stores in [`HOLD_ANNOTATION`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HoldMark {
    pub since: DateTime<Utc>,
    pub reason: String,
    /// The crash count this hold records (kinds without a native counter).
    #[serde(default)]
    pub crash_count: u32,
    /// The pause value remedy wrote. Records written before this field
    /// existed wrote [`PAUSE_MARKER`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

impl HoldMark {
    pub fn parse(s: &str) -> Option<Self> {
        serde_json::from_str(s).ok()
    }

    pub fn wrote_value(&self) -> Value {
        self.value
            .clone()
            .unwrap_or_else(|| Value::from(PAUSE_MARKER))
    }
}

/// Longest failure message kept; the rest is not needed to classify and
/// would make 100k views expensive.
const MAX_MESSAGE: usize = 512;

fn first<'a>(data: &'a Value, paths: &[String]) -> Option<&'a Value> {
    paths
        .iter()
        .filter_map(|p| data.pointer(p))
        .find(|v| !v.is_null())
}

fn text(
    data: &Value,
    paths: &[String],
    field: &'static str,
    malformed: &mut Vec<&'static str>,
) -> Option<Box<str>> {
    let v = first(data, paths)?;
    match v.as_str() {
        Some("") => None,
        Some(s) => Some(truncate(s).into()),
        None => {
            malformed.push(field);
            None
        }
    }
}

fn truncate(s: &str) -> &str {
    if s.len() <= MAX_MESSAGE {
        return s;
    }
    let mut end = MAX_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn conditions(v: &Value) -> Option<Vec<ConditionView>> {
    let mut out = Vec::new();
    for c in v.as_array()? {
        let type_ = c.get("type")?.as_str()?;
        let status = c.get("status")?.as_str()?;
        if status == "True" {
            continue;
        }
        let opt = |k: &str| {
            c.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(|s| Box::from(truncate(s)))
        };
        out.push(ConditionView {
            type_: type_.into(),
            status: status.into(),
            reason: opt("reason"),
            message: opt("message"),
        });
    }
    Some(out)
}

fn paths(ps: &[&str]) -> Vec<String> {
    ps.iter().map(|s| s.to_string()).collect()
}

/// CAPI-style failure fields in both status layouts.
fn capi_fields(state: &[&str]) -> FieldPaths {
    FieldPaths {
        failure_reason: paths(&[
            "/status/failureReason",
            "/status/deprecated/v1beta1/failureReason",
        ]),
        failure_message: paths(&[
            "/status/failureMessage",
            "/status/deprecated/v1beta1/failureMessage",
        ]),
        conditions: paths(&["/status/conditions"]),
        state: paths(state),
        ..FieldPaths::default()
    }
}

fn capi_clear() -> Vec<String> {
    paths(&[
        "/status/failureReason",
        "/status/failureMessage",
        "/status/deprecated/v1beta1/failureReason",
        "/status/deprecated/v1beta1/failureMessage",
    ])
}

fn capi_profile(name: &str, group: &str, version: &str, kind: &str, state: &[&str]) -> Profile {
    Profile {
        name: name.into(),
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: None,
        fields: capi_fields(state),
        terminal_states: Vec::new(),
        unknown_conditions: Vec::new(),
        ignore_conditions: IgnoreConditions::default(),
        hold: Some(HoldSpec::marked(CAPI_PAUSED)),
        remediation: RemediationSpec {
            clear_status: capi_clear(),
            ..RemediationSpec::default()
        },
        label_selector: None,
        backoff: None,
    }
}

const INFRA: &str = "infrastructure.cluster.x-k8s.io";

/// The built-in profiles, in a stable order.
pub fn builtins() -> Vec<Profile> {
    let mut machine = capi_profile(
        "capi-machine",
        "cluster.x-k8s.io",
        "v1beta1",
        "Machine",
        &["/status/phase"],
    );
    machine.remediation.skip_remediation_annotation = Some(CAPI_SKIP_REMEDIATION.into());
    // The MachineHealthCheck's verdicts and the MachineSet's answer to them
    // (CAPI v1.12 api/core/v1beta2: machine_types.go, v1beta1_condition_consts.go):
    // about the Node, not the cloud API; the MHC acts on them itself.
    machine.ignore_conditions = IgnoreConditions {
        types: paths(&["HealthCheckSucceeded", "OwnerRemediated"]),
        reasons: paths(&[
            "NodeStartupTimeout",
            "UnhealthyNode",
            "UnhealthyMachine",
            "NodeDeleted",
            "HasRemediateAnnotation",
            "HasRemediateMachineAnnotation",
            "WaitingForRemediation",
            "RemediationInProgress",
            "RemediationFailed",
            "ExternalRemediationTemplateNotFound",
            "ExternalRemediationRequestCreationFailed",
            "TooManyUnhealthy",
        ]),
    };
    if let Some(h) = machine.hold.as_mut() {
        // The MachineSet deletes such a Machine whatever its pause
        // (`collections.IsUnhealthyAndOwnerRemediated`; tests/it/capi_mhc.rs).
        h.not_while = paths(&["OwnerRemediated"]);
    }
    let cluster = capi_profile(
        "capi-cluster",
        "cluster.x-k8s.io",
        "v1beta1",
        "Cluster",
        &["/status/phase"],
    );
    let mut openstack = capi_profile(
        "openstack-machine",
        INFRA,
        "v1beta1",
        "OpenStackMachine",
        &["/status/instanceState"],
    );
    openstack.terminal_states = vec!["ERROR".into()];
    // CAPO v0.11+: the OpenStackServer is what calls Nova and Neutron. Its
    // controller (v0.14 controllers/openstackserver_controller.go) honours
    // cluster.x-k8s.io/paused on itself, sets instanceState ERROR with
    // InstanceReady False/InstanceCreateFailed and the error text when a
    // create call fails, and then never reconciles it again; with the state
    // gone it creates the server anew. It has no failure fields.
    let server = Profile {
        name: "openstack-server".into(),
        group: INFRA.into(),
        version: "v1alpha1".into(),
        kind: "OpenStackServer".into(),
        plural: None,
        fields: FieldPaths {
            conditions: paths(&["/status/conditions"]),
            state: paths(&["/status/instanceState"]),
            failure_domain: paths(&["/spec/availabilityZone"]),
            ..FieldPaths::default()
        },
        terminal_states: vec!["ERROR".into()],
        unknown_conditions: Vec::new(),
        ignore_conditions: IgnoreConditions::default(),
        hold: Some(HoldSpec {
            with_owner: Some("OpenStackMachine".into()),
            ..HoldSpec::marked(CAPI_PAUSED)
        }),
        remediation: RemediationSpec {
            clear_status: paths(&["/status/instanceState"]),
            keep_if_set: paths(&["/status/instanceID"]),
            ..RemediationSpec::default()
        },
        label_selector: None,
        backoff: None,
    };
    let mut aws = capi_profile(
        "aws-machine",
        INFRA,
        "v1beta2",
        "AWSMachine",
        &["/status/instanceState"],
    );
    aws.terminal_states = vec!["terminated".into()];
    // findInstance: any DescribeInstances error, throttling included, is
    // only ever reported here (v2.13 controllers/awsmachine_controller.go).
    aws.unknown_conditions = vec!["InstanceReady".into()];
    let azure = capi_profile(
        "azure-machine",
        INFRA,
        "v1beta1",
        "AzureMachine",
        &["/status/vmState"],
    );
    let bottlerocket = Profile {
        name: "bottlerocket-shadow".into(),
        group: "brupop.bottlerocket.aws".into(),
        version: "v2".into(),
        kind: "BottlerocketShadow".into(),
        plural: None,
        fields: FieldPaths {
            state: paths(&["/status/current_state"]),
            crash_count: paths(&["/status/crash_count"]),
            failure_time: paths(&["/status/state_transition_failure_timestamp"]),
            ..FieldPaths::default()
        },
        terminal_states: Vec::new(),
        unknown_conditions: Vec::new(),
        ignore_conditions: IgnoreConditions::default(),
        // brupop has no pause switch: its own backoff applies, remedy only
        // resets counters once the outage is over.
        hold: None,
        remediation: RemediationSpec {
            clear_status: paths(&["/status/state_transition_failure_timestamp"]),
            reset_status: vec![ResetField {
                path: "/status/crash_count".into(),
                value: Value::from(0),
            }],
            ..RemediationSpec::default()
        },
        label_selector: None,
        // brupop retries by its own rule; what remedy exports is that rule,
        // not the configured backoff.
        backoff: Some(crate::model::backoff::BackoffModel::Brupop),
    };
    vec![
        machine,
        cluster,
        openstack,
        server,
        aws,
        azure,
        bottlerocket,
    ]
}

pub fn builtin(name: &str) -> Result<Profile, ProfileError> {
    builtins()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ProfileError::UnknownBuiltin(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::classify::{Classifier, Verdict, default_rules};

    fn sample(yaml: &str) -> DynamicObject {
        serde_yaml_ng::from_str(yaml).expect("sample parses")
    }

    fn verdict(p: &Profile, v: &Projection) -> Verdict {
        Classifier::new(&default_rules()).unwrap().classify(p, v)
    }

    #[test]
    fn capi_machine_v1beta1_failure_fields() {
        let p = builtin("capi-machine").unwrap();
        let v = p.project(&sample(include_str!(
            "../../testenv/samples/capi-machine-v1beta1-failed.yaml"
        )));
        assert!(v.failure.reason.is_some(), "{v:?}");
        assert!(v.failure.message.is_some());
        assert_eq!(v.failure.state.as_deref(), Some("Failed"));
        assert_eq!(
            v.view.label("cluster.x-k8s.io/cluster-name"),
            Some("prod-eu1")
        );
        assert!(v.view.malformed.is_empty());
    }

    #[test]
    fn capi_machine_v1beta2_reads_the_deprecated_block() {
        let p = builtin("capi-machine").unwrap();
        let v = p.project(&sample(include_str!(
            "../../testenv/samples/capi-machine-v1beta2-failed.yaml"
        )));
        assert_eq!(v.failure.reason.as_deref(), Some("UpdateError"));
        assert!(
            v.failure
                .message
                .as_deref()
                .is_some_and(|m| m.contains("terminated"))
        );
        assert!(
            !v.failure.conditions.is_empty(),
            "v1beta2 conditions are projected"
        );
    }

    #[test]
    fn openstack_error_state_is_terminal() {
        let p = builtin("openstack-machine").unwrap();
        let v = p.project(&sample(include_str!(
            "../../testenv/samples/capo-openstackmachine-error.yaml"
        )));
        assert_eq!(v.failure.state.as_deref(), Some("ERROR"));
        assert_eq!(v.failure.reason.as_deref(), Some("UpdateError"));
        assert!(
            matches!(verdict(&p, &v), Verdict::Terminal { ref reason, .. } if reason == "instance_error")
        );
    }

    #[test]
    fn openstack_server_error_from_a_failed_create_is_transient_and_clearable() {
        let p = builtin("openstack-server").unwrap();
        p.validate().unwrap();
        let obj = sample(include_str!(
            "../../testenv/samples/capo-openstackserver-createfailed.yaml"
        ));
        let v = p.project(&obj);
        assert_eq!(v.failure.state.as_deref(), Some("ERROR"));
        assert!(v.view.clearable, "no instanceID: the ERROR is the call's");
        assert_eq!(
            v.view.label(HELD_WITH_LABEL),
            Some("prod-eu1-md-0-infra-9xk2p"),
            "the owner OpenStackMachine it is held with"
        );
        assert_eq!(
            v.view.label(crate::model::domains::FIELD_LABEL),
            Some("az2")
        );
        assert_eq!(
            verdict(&p, &v),
            Verdict::Transient {
                reason: "server_error".into()
            }
        );
        // The same ERROR from a create refused for a missing image or a
        // wrong project: counted by the breaker as a not-found burst.
        let mut gone = v.clone();
        for c in &mut gone.failure.conditions {
            c.message = Some("error creating Openstack instance: Resource not found".into());
        }
        assert!(matches!(
            verdict(&p, &gone),
            Verdict::Terminal {
                not_found: true,
                ..
            }
        ));
    }

    #[test]
    fn openstack_server_error_nova_reports_is_terminal_and_kept() {
        let p = builtin("openstack-server").unwrap();
        let obj = sample(include_str!(
            "../../testenv/samples/capo-openstackserver-error.yaml"
        ));
        let v = p.project(&obj);
        assert!(!v.view.clearable, "an instanceID: Nova's own ERROR");
        assert!(!p.clearable(&obj.data));
        assert!(
            matches!(verdict(&p, &v), Verdict::Terminal { ref reason, not_found: false } if reason == "instance_error")
        );
        // Without the owner kind in its ownerReferences: no owner to follow.
        let mut orphan = obj.clone();
        orphan.metadata.owner_references = None;
        assert_eq!(p.project(&orphan).view.label(HELD_WITH_LABEL), None);
    }

    /// The MachineHealthCheck's verdicts are not cloud errors: a Node that
    /// never started (reason NodeStartupTimeout, which the `timeout` rule
    /// would match, copied into the v1beta1 Ready summary) leaves the
    /// Machine healthy for remedy, and one the MHC ordered remediated is
    /// not holdable (its MachineSet deletes it whatever its pause).
    #[test]
    fn capi_machine_leaves_the_mhcs_verdicts_to_it() {
        let p = builtin("capi-machine").unwrap();
        p.validate().unwrap();
        let machine = |conditions: Value| {
            serde_json::from_value::<DynamicObject>(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                "metadata": {"name": "m", "namespace": "d"},
                "status": {"phase": "Provisioned", "conditions": conditions}
            }))
            .unwrap()
        };
        let startup = |status: &str| {
            serde_json::json!([
                {"type": "Ready", "status": "False", "reason": "NodeStartupTimeout", "message": "Node failed to report startup in 10m0s"},
                {"type": "HealthCheckSucceeded", "status": "False", "reason": "NodeStartupTimeout", "message": "Node failed to report startup in 10m0s"},
                {"type": "OwnerRemediated", "status": status, "reason": "WaitingForRemediation", "message": "MachineSet is remediating"}
            ])
        };
        let v = p.project(&machine(startup("True")));
        assert!(
            v.failure.conditions.is_empty(),
            "{:?}",
            v.failure.conditions
        );
        assert!(!v.view.replaced);
        assert_eq!(verdict(&p, &v), Verdict::Healthy);
        let v = p.project(&machine(startup("False")));
        assert!(
            v.view.replaced,
            "OwnerRemediated=False: its MachineSet replaces it"
        );
        // Without the profile's lists, the same Machine read as a cloud timeout.
        let mut bare = p.clone();
        bare.ignore_conditions = IgnoreConditions::default();
        assert_eq!(
            verdict(&bare, &bare.project(&machine(startup("True")))),
            Verdict::Transient {
                reason: "timeout".into()
            }
        );
    }

    #[test]
    fn with_owner_must_name_another_kind() {
        let mut p = builtin("openstack-server").unwrap();
        if let Some(h) = p.hold.as_mut() {
            h.with_owner = Some("OpenStackServer".into());
        }
        assert!(matches!(p.validate(), Err(ProfileError::BadHold { .. })));
        p.hold = Some(HoldSpec::marked(CAPI_PAUSED));
        p.remediation.keep_if_set = vec!["status/instanceID".into()];
        assert!(matches!(p.validate(), Err(ProfileError::BadPointer { .. })));
    }

    #[test]
    fn aws_and_azure_samples_project() {
        let aws = builtin("aws-machine").unwrap();
        let v = aws.project(&sample(include_str!(
            "../../testenv/samples/capa-awsmachine-terminated.yaml"
        )));
        assert_eq!(v.failure.state.as_deref(), Some("terminated"));
        assert!(matches!(verdict(&aws, &v), Verdict::Terminal { .. }));
        let az = builtin("azure-machine").unwrap();
        let v = az.project(&sample(include_str!(
            "../../testenv/samples/capz-azuremachine-failed.yaml"
        )));
        assert_eq!(v.failure.state.as_deref(), Some("Failed"));
        // "Failed" is not a configured terminal state for Azure: retried.
        assert!(matches!(verdict(&az, &v), Verdict::Transient { .. }));
    }

    #[test]
    fn bottlerocket_crash_count_and_nanosecond_timestamp() {
        let p = builtin("bottlerocket-shadow").unwrap();
        let v = p.project(&sample(include_str!(
            "../../testenv/samples/brupop-bottlerocketshadow-crashed.yaml"
        )));
        assert_eq!(v.view.crash_count, Some(3));
        assert_eq!(
            v.view.failure_time,
            Some("2025-05-08T04:29:22.501337417Z".parse().unwrap())
        );
        assert_eq!(v.failure.state.as_deref(), Some("ErrorReset"));
        assert_eq!(
            verdict(&p, &v),
            Verdict::Transient {
                reason: "crash_loop".into()
            }
        );
    }

    #[test]
    fn mistyped_fields_are_malformed_not_guessed() {
        let p = builtin("bottlerocket-shadow").unwrap();
        let obj = sample(
            "apiVersion: brupop.bottlerocket.aws/v2\nkind: BottlerocketShadow\nmetadata: {name: x}\nstatus: {crash_count: \"three\", state_transition_failure_timestamp: yesterday}\n",
        );
        let v = p.project(&obj);
        assert_eq!(v.view.malformed, vec!["crash_count", "failure_time"]);
        assert_eq!(
            verdict(&p, &v),
            Verdict::Unclassifiable {
                field: "crash_count"
            }
        );
        let neg =
            sample("apiVersion: v\nkind: K\nmetadata: {name: x}\nstatus: {crash_count: -1}\n");
        assert_eq!(p.project(&neg).view.malformed, vec!["crash_count"]);
        let m = builtin("capi-machine").unwrap();
        let bad = sample(
            "apiVersion: v\nkind: K\nmetadata: {name: x}\nstatus: {failureReason: 7, conditions: {a: b}}\n",
        );
        assert_eq!(
            m.project(&bad).view.malformed,
            vec!["failure_reason", "conditions"]
        );
    }

    #[test]
    fn pause_ownership() {
        let p = builtin("capi-machine").unwrap();
        let with = |ann: &str| {
            p.project(&sample(&format!(
                "apiVersion: v\nkind: K\nmetadata: {{name: x, annotations: {ann}}}\n"
            )))
            .view
            .pause
        };
        assert_eq!(with("{}"), PauseState::NotPaused);
        assert_eq!(with("{cluster.x-k8s.io/paused: ''}"), PauseState::Foreign);
        assert_eq!(
            with("{cluster.x-k8s.io/paused: remedy.dev/hold}"),
            PauseState::Foreign,
            "our marker without our record is not ours"
        );
        let ours = with(
            r#"{cluster.x-k8s.io/paused: remedy.dev/hold, remedy.dev/hold: '{"since":"2026-12-02T10:00:00Z","reason":"breaker"}'}"#,
        );
        assert_eq!(
            ours,
            PauseState::Ours {
                since: Some("2026-12-02T10:00:00Z".parse().unwrap()),
                reason: Some("breaker".into())
            }
        );
    }

    fn crossplane_profile() -> Profile {
        Profile {
            name: "crossplane-instance".into(),
            group: "ec2.aws.crossplane.io".into(),
            version: "v1alpha1".into(),
            kind: "Instance".into(),
            plural: None,
            fields: capi_fields(&[]),
            terminal_states: Vec::new(),
            unknown_conditions: Vec::new(),
            ignore_conditions: IgnoreConditions::default(),
            hold: Some(HoldSpec {
                annotation: Some("crossplane.io/paused".into()),
                field: None,
                value: Some(Value::from("true")),
                resume: None,
                with_owner: None,
                not_while: Vec::new(),
            }),
            remediation: RemediationSpec::default(),
            label_selector: None,
            backoff: None,
        }
    }

    fn pause_of(
        p: &Profile,
        annotations: serde_json::Value,
        spec: serde_json::Value,
    ) -> PauseState {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v", "kind": "K",
            "metadata": {"name": "x", "annotations": annotations},
            "spec": spec,
        }))
        .unwrap();
        p.project(&obj).view.pause
    }

    fn record(value: Option<Value>) -> String {
        serde_json::to_string(&HoldMark {
            since: "2026-12-02T10:00:00Z".parse().unwrap(),
            reason: "breaker".into(),
            crash_count: 1,
            value,
        })
        .unwrap()
    }

    #[test]
    fn ownership_comes_from_the_record_not_the_value() {
        use serde_json::json;
        let p = crossplane_profile();
        p.validate().unwrap();
        let ours = |v: &PauseState| matches!(v, PauseState::Ours { .. });
        let rec = record(Some(Value::from("true")));
        // Crossplane pauses only on exactly "true": remedy writes that.
        assert!(ours(&pause_of(
            &p,
            json!({"crossplane.io/paused": "true", HOLD_ANNOTATION: rec}),
            json!({})
        )));
        // The same value set by a human, without remedy's record: not ours.
        assert_eq!(
            pause_of(&p, json!({"crossplane.io/paused": "true"}), json!({})),
            PauseState::Foreign
        );
        // A human changed the value after remedy's hold: not ours any more.
        assert_eq!(
            pause_of(
                &p,
                json!({"crossplane.io/paused": "false", HOLD_ANNOTATION: rec}),
                json!({})
            ),
            PauseState::Foreign
        );
        // A record saying remedy wrote another value: not ours.
        assert_eq!(
            pause_of(
                &p,
                json!({"crossplane.io/paused": "true", HOLD_ANNOTATION: record(None)}),
                json!({})
            ),
            PauseState::Foreign
        );
        // Records from before `value` existed wrote remedy's marker (CAPI).
        let capi = builtin("capi-machine").unwrap();
        assert!(ours(&pause_of(
            &capi,
            json!({CAPI_PAUSED: PAUSE_MARKER, HOLD_ANNOTATION: record(None)}),
            json!({})
        )));
        assert_eq!(
            pause_of(&capi, json!({HOLD_ANNOTATION: rec}), json!({})),
            PauseState::NotPaused,
            "a record without a pause holds nothing"
        );
    }

    #[test]
    fn a_spec_field_pause_uses_the_same_model() {
        use serde_json::json;
        let mut p = builtin("capi-cluster").unwrap();
        p.hold = Some(HoldSpec {
            annotation: None,
            field: Some("/spec/paused".into()),
            value: None,
            resume: None,
            with_owner: None,
            not_while: Vec::new(),
        });
        p.validate().unwrap();
        let rec = record(Some(Value::Bool(true)));
        assert!(matches!(
            pause_of(&p, json!({HOLD_ANNOTATION: rec}), json!({"paused": true})),
            PauseState::Ours { .. }
        ));
        assert_eq!(
            pause_of(&p, json!({}), json!({"paused": true})),
            PauseState::Foreign,
            "paused by clusterctl move or a human"
        );
        assert_eq!(
            pause_of(&p, json!({HOLD_ANNOTATION: rec}), json!({"paused": false})),
            PauseState::NotPaused
        );
        assert_eq!(pause_of(&p, json!({}), json!({})), PauseState::NotPaused);
    }

    #[test]
    fn bad_holds_are_refused_with_the_reason() {
        let mut p = crossplane_profile();
        let bad = |p: &Profile| match p.validate() {
            Err(e @ ProfileError::BadHold { .. }) => e.to_string(),
            other => panic!("{other:?}"),
        };
        p.hold = Some(HoldSpec {
            annotation: Some("a".into()),
            field: Some("/spec/paused".into()),
            value: None,
            resume: None,
            with_owner: None,
            not_while: Vec::new(),
        });
        assert!(bad(&p).contains("exactly one"));
        p.hold = Some(HoldSpec {
            annotation: Some("crossplane.io/paused".into()),
            field: None,
            value: Some(Value::Bool(true)),
            resume: None,
            with_owner: None,
            not_while: Vec::new(),
        });
        assert!(bad(&p).contains("string"));
        p.hold = Some(HoldSpec {
            annotation: None,
            field: Some("/status/paused".into()),
            value: None,
            resume: None,
            with_owner: None,
            not_while: Vec::new(),
        });
        assert!(bad(&p).contains("under /spec"));
        p.hold = Some(HoldSpec {
            annotation: None,
            field: Some("/spec/paused".into()),
            value: Some(Value::Bool(false)),
            resume: None,
            with_owner: None,
            not_while: Vec::new(),
        });
        assert!(bad(&p).contains("what pauses"));
        p.hold = Some(HoldSpec::annotation(HOLD_ANNOTATION));
        assert!(bad(&p).contains("record"));
        let yaml = "name: x\ngroup: g\nversion: v1\nkind: K\nhold: {annotation: crossplane.io/paused, value: 'true'}\n";
        let parsed: Profile = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(parsed.hold.unwrap().pause_value(), Value::from("true"));
        assert!(parsed.remediation.release_clears_failure, "on by default");
    }

    #[test]
    fn an_annotation_hold_without_a_value_writes_true_and_the_builtins_their_marker() {
        let parse = |hold: &str| -> HoldSpec {
            let yaml = format!("name: x\ngroup: g\nversion: v1\nkind: K\nhold: {hold}\n");
            let p: Profile = serde_yaml_ng::from_str(&yaml).unwrap();
            p.validate().unwrap();
            p.hold.unwrap()
        };
        // Crossplane pauses only on "true": the default must be it.
        let crossplane = parse("{annotation: crossplane.io/paused}");
        assert_eq!(crossplane.pause_value(), Value::from("true"));
        assert_eq!(
            crossplane.describe(),
            r#"annotation crossplane.io/paused="true""#
        );
        assert_eq!(crossplane.mismatch(), None);
        let wrong = parse("{annotation: crossplane.io/paused, value: 'yes'}");
        assert!(wrong.mismatch().unwrap().contains("Crossplane"));
        let field = parse("{field: /spec/paused}");
        assert_eq!(field.describe(), "field /spec/paused=true");
        assert_eq!(field.mismatch(), None);
        // The built-in CAPI profiles write remedy's marker (CAPI reads the
        // key only), and say so.
        let capi = builtin("capi-machine").unwrap().hold.unwrap();
        assert_eq!(capi.pause_value(), Value::from(PAUSE_MARKER));
        assert_eq!(
            capi.describe(),
            r#"annotation cluster.x-k8s.io/paused="remedy.dev/hold""#
        );
        assert_eq!(capi.mismatch(), None);
        // A hold remedy wrote with "true" is remedy's by its record only.
        let p = Profile {
            hold: Some(crossplane),
            ..builtin("capi-machine").unwrap()
        };
        let record = HoldMark {
            since: Utc::now(),
            reason: "breaker".into(),
            crash_count: 0,
            value: Some(Value::from("true")),
        };
        let with =
            |annotations: BTreeMap<String, String>| p.pause_state(&annotations, &Value::Null);
        let paused = BTreeMap::from([("crossplane.io/paused".to_string(), "true".to_string())]);
        assert_eq!(
            with(paused.clone()),
            PauseState::Foreign,
            "a human's \"true\""
        );
        let mut ours = paused;
        ours.insert(
            HOLD_ANNOTATION.into(),
            serde_json::to_string(&record).unwrap(),
        );
        assert!(matches!(with(ours), PauseState::Ours { .. }));
    }

    #[test]
    fn label_selectors_are_checked_as_the_apiserver_parses_them() {
        for ok in [
            "env=prod",
            "env==prod,tier!=canary",
            "!canary",
            "remedy.dev/managed",
            "cluster.x-k8s.io/cluster-name in (a, b-1,c.2)",
            "tier notin (canary),env",
            "env=",
        ] {
            assert_eq!(check_selector(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            " ",
            "env=prod,",
            "env in (a,b",
            "env in a,b)",
            "env=pro d",
            "-env=prod",
            "env in ()x",
            "env=prod;rm",
            &format!("{}=x", "k".repeat(64)),
        ] {
            assert!(check_selector(bad).is_err(), "{bad:?} accepted");
        }
        let mut p = builtin("capi-machine").unwrap();
        p.label_selector = Some("env in (a".into());
        let e = p.validate().unwrap_err();
        assert!(matches!(e, ProfileError::BadSelector { .. }), "{e}");
        assert!(e.to_string().contains("label_selector"), "{e}");
    }

    #[test]
    fn builtins_validate_and_long_messages_are_truncated() {
        for p in builtins() {
            p.validate().unwrap();
        }
        let p = builtin("capi-machine").unwrap();
        let long = "é".repeat(1000);
        let v = p.project(&sample(&format!(
            "apiVersion: v\nkind: K\nmetadata: {{name: x}}\nstatus: {{failureMessage: '{long}'}}\n"
        )));
        let m = v.failure.message.unwrap();
        assert!(m.len() <= MAX_MESSAGE && m.chars().all(|c| c == 'é'));
    }
}
