//! How a profile's controller is paused, what remedy writes to hold it, and
//! whose a pause is.

use super::builtins::{CAPI_GROUP, capi_cluster_resume};
use super::{CROSSPLANE_PAUSED, HOLD_ANNOTATION, PAUSE_MARKER, Profile};
use crate::model::view::PauseState;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// How a profile's controller is paused: an annotation (CAPI, Crossplane)
/// or a spec field (CAPI `Cluster.spec.paused`), and the value that pauses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// treat it as paused: see docs/concepts/holds.md. Ownership does
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
    /// Its release makes its controller call no cloud API (CAPI's Machine
    /// and Cluster controllers leave that to the infrastructure provider's
    /// objects): its next state says nothing of the cloud. While its
    /// domain's breaker is open it is never sent out as a probe (a held
    /// Machine would fail again on its held server's status, forever), and
    /// it does not keep the domain waiting for probes: it goes once the
    /// probes have the breaker cooling and nothing that calls the cloud is
    /// held in its domain any more (its server first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_probe: bool,
    /// JSON pointers of which one is set once its controller has made the
    /// thing in the cloud (an OpenStackServer's `/status/instanceID`).
    /// Until one is, the object is new: its controller's next step is a
    /// create call. A new object that appears while its domain's breaker is
    /// open (a scale-up, a replacement; not one that was being made before)
    /// is held before that call (reason `breaker-new`, its crash count
    /// unchanged) and released with the domain's other holds, lowest crash
    /// count first: a create in a zone that fails every call only adds to the
    /// storm (CAPO main retries a failed create from 5 ms, doubling).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_until: Vec<String>,
}

/// After a hold on an object X is removed, remedy writes
/// [`RESUMED_ANNOTATION`] on each watched object of `kind` in X's namespace
/// whose label `label` is X's name, so their controller reconciles them now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeSpec {
    /// The kind of a watched profile (`Machine`).
    pub kind: String,
    /// The label naming the held object (`cluster.x-k8s.io/cluster-name`).
    pub label: String,
}

impl ResumeSpec {
    /// The `resume:` stanza as a config writes it.
    pub fn stanza(&self) -> String {
        format!("resume: {{kind: {}, label: {}}}", self.kind, self.label)
    }
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
            ..Self::default()
        }
    }

    /// A hold by a spec field (`/spec/paused`), writing `true`.
    pub fn field(pointer: &str) -> Self {
        Self {
            field: Some(pointer.into()),
            ..Self::default()
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

impl Profile {
    /// What this profile's hold will not do that a config likely expects,
    /// each naming its fix: `remedy check-config` prints them and `remedy
    /// serve` logs them. Not errors: the config may mean it.
    pub fn hold_warnings(&self) -> Vec<String> {
        let Some(hold) = &self.hold else {
            return Vec::new();
        };
        let mut out: Vec<String> = hold.mismatch().map(String::from).into_iter().collect();
        if self.group == CAPI_GROUP
            && self.kind == "Cluster"
            && hold.target() == Some(HoldTarget::Field("/spec/paused"))
            && hold.resume.is_none()
        {
            let resume = capi_cluster_resume();
            out.push(format!(
                "holds the Cluster by /spec/paused without `resume`: CAPI's Machine controller does \
                 not requeue a Cluster's Machines when spec.paused turns false, so after the release \
                 they stay Paused until their next event or the 10-minute resync. Add `{}` to its \
                 hold, and watch {}s (the capi-machine built-in)",
                resume.stanza(),
                resume.kind
            ));
        }
        out
    }

    /// Ours only when remedy's record is there and says remedy wrote exactly
    /// the value the pause has now; any other pause (set before, changed
    /// after, or with the record removed) is someone else's and is never
    /// touched. A human who wants to keep a remedy hold removes the record.
    pub(super) fn pause_state(
        &self,
        annotations: &BTreeMap<String, String>,
        data: &Value,
    ) -> PauseState {
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
