//! Cluster API's external remediation (issue #36): the CRDs
//! `RemedyRemediationTemplate` and `RemedyRemediation` (group `remedy.dev`,
//! version `v1alpha1`), and the validation of a request's strategy.
//!
//! A MachineHealthCheck with `spec.remediation.templateRef` naming a
//! `RemedyRemediationTemplate` clones the template's `spec.template` into a
//! `RemedyRemediation` named and namespaced like the unhealthy Machine, owned
//! by it (docs/guides/external-remediation.md, "The contract", has what CAPI v1.14.2's
//! source does). remedy reads the request's steps and writes its status.
//!
//! The CRD YAML in deploy/ is generated from these types; the test
//! `crds_match_the_checked_in_yaml` regenerates and compares it
//! (`REMEDY_BLESS=1 cargo test --lib crds_match` writes it).

use std::time::Duration;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of remedy's own resources.
pub const GROUP: &str = "remedy.dev";
/// Their version.
pub const VERSION: &str = "v1alpha1";
/// The request's kind.
pub const KIND: &str = "RemedyRemediation";
/// The template's kind: the request's with `Template` (CAPI strips it).
pub const TEMPLATE_KIND: &str = "RemedyRemediationTemplate";
/// The request's plural, for its API path and RBAC.
pub const PLURAL: &str = "remedyremediations";

/// The Machine condition through which a remediator hands the Machine back
/// to its owner: `OwnerRemediated=False` makes the MachineSet delete (and so
/// replace) a Machine whose `HealthCheckSucceeded` is False.
pub const OWNER_REMEDIATED: &str = "OwnerRemediated";
/// The reason remedy writes with it.
pub const ESCALATED_REASON: &str = "RemedyEscalated";
/// The Machine condition the MHC sets when it created the request.
pub const EXTERNALLY_REMEDIATED: &str = "ExternallyRemediated";
/// The Machine condition the MHC sets False on an unhealthy Machine.
pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";

/// Bounds of a step's timeout: shorter than a second is a typo (remedy's tick
/// is a second or more); longer than a week is a Machine left broken.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most steps a strategy may have.
pub const MAX_STEPS: usize = 8;

/// The strategy: what remedy does for one unhealthy Machine, step by step.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "remedy.dev",
    version = "v1alpha1",
    kind = "RemedyRemediation",
    namespaced,
    status = "RemedyRemediationStatus",
    shortname = "rrem",
    category = "cluster-api",
    doc = "A remediation request for one Machine, created by a MachineHealthCheck from a RemedyRemediationTemplate and carried out by remedy.",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Step","type":"integer","jsonPath":".status.currentStep"}"#,
    printcolumn = r#"{"name":"Attempts","type":"integer","jsonPath":".status.attempts"}"#,
    printcolumn = r#"{"name":"Waiting","type":"string","jsonPath":".status.waitingFor.reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RemedyRemediationSpec {
    /// The steps, in order. remedy moves to the next only after the current
    /// one has timed out, and never while it defers for an outage.
    #[schemars(length(min = 1, max = 8))]
    pub steps: Vec<RemediationStep>,
}

/// One step of a strategy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStep {
    /// `retry`: clear what stops the provider (as remedy's own remediation
    /// does) and wait for the Machine to become healthy. `replace`: set
    /// `OwnerRemediated=False` on the Machine, so that its MachineSet
    /// deletes and replaces it.
    pub kind: StepKind,
    /// How long the step may take before remedy moves on, e.g. `5m`.
    pub timeout: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum StepKind {
    Retry,
    Replace,
}

impl StepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Retry => "retry",
            StepKind::Replace => "replace",
        }
    }
}

/// What remedy writes about a request (status subresource).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemedyRemediationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The index of the step under way; none before the first starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<u32>,
    /// When the current step started (RFC 3339); its timeout counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_at: Option<String>,
    /// Whether the current step's action (the retry, the escalation) is
    /// done; written after it, so a restart redoes at most one action.
    #[serde(default)]
    pub acted: bool,
    /// Actions taken so far (retries and the escalation).
    #[serde(default)]
    pub attempts: u32,
    /// Why remedy waits, and until when if it knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<WaitingFor>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RemediationCondition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitingFor {
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339; absent when remedy cannot say (an outage's end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// A condition, as metav1.Condition has it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub last_transition_time: String,
}

/// Where a request stands (`status.phase`, and the label of
/// `remedy_remediation_requests`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Seen, nothing done yet.
    Pending,
    /// Waits for an outage in the Machine's failure domain to end.
    Deferred,
    /// Waits for the budget (or `budget.per`) to allow the next step.
    Queued,
    /// A retry step is under way.
    Retrying,
    /// `OwnerRemediated=False` is set: the MachineSet replaces the Machine.
    Escalated,
    /// The last step timed out and it was no replace: left to a human.
    Exhausted,
    /// The Machine is healthy again; the MHC deletes the request.
    Succeeded,
    /// The spec is not a strategy remedy can carry out; nothing is done.
    Invalid,
}

impl Phase {
    pub const ALL: [Phase; 8] = [
        Phase::Pending,
        Phase::Deferred,
        Phase::Queued,
        Phase::Retrying,
        Phase::Escalated,
        Phase::Exhausted,
        Phase::Succeeded,
        Phase::Invalid,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Deferred => "Deferred",
            Phase::Queued => "Queued",
            Phase::Retrying => "Retrying",
            Phase::Escalated => "Escalated",
            Phase::Exhausted => "Exhausted",
            Phase::Succeeded => "Succeeded",
            Phase::Invalid => "Invalid",
        }
    }
}

/// The body of a template: what the MHC clones into each request.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "remedy.dev",
    version = "v1alpha1",
    kind = "RemedyRemediationTemplate",
    namespaced,
    shortname = "rremt",
    category = "cluster-api",
    doc = "The strategy a MachineHealthCheck's spec.remediation.templateRef names; the MHC clones spec.template into a RemedyRemediation per unhealthy Machine."
)]
#[serde(rename_all = "camelCase")]
pub struct RemedyRemediationTemplateSpec {
    pub template: RemediationTemplateResource,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationTemplateResource {
    /// Labels and annotations CAPI copies onto each request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: RemedyRemediationSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// A validated step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub kind: StepKind,
    pub timeout: Duration,
}

/// Why a request's spec is refused; `label` is the metric label value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("spec is malformed: {0}")]
    Malformed(String),
    #[error("spec.steps is empty: nothing to do")]
    NoSteps,
    #[error("spec.steps has {0} steps, at most {MAX_STEPS} allowed")]
    TooManySteps(usize),
    #[error("spec.steps[{index}].timeout {value:?} is not a duration (e.g. 5m): {cause}")]
    BadTimeout {
        index: usize,
        value: String,
        cause: String,
    },
    #[error("spec.steps[{index}].timeout {value:?} is outside 1s..=7d")]
    TimeoutOutOfRange { index: usize, value: String },
    #[error(
        "spec.steps[{0}] follows a replace step: the Machine is gone after a replace, so a replace must be last"
    )]
    StepAfterReplace(usize),
}

impl SpecError {
    pub const LABELS: [&'static str; 6] = [
        "malformed",
        "no_steps",
        "too_many_steps",
        "bad_timeout",
        "timeout_out_of_range",
        "step_after_replace",
    ];

    pub fn label(&self) -> &'static str {
        match self {
            SpecError::Malformed(_) => "malformed",
            SpecError::NoSteps => "no_steps",
            SpecError::TooManySteps(_) => "too_many_steps",
            SpecError::BadTimeout { .. } => "bad_timeout",
            SpecError::TimeoutOutOfRange { .. } => "timeout_out_of_range",
            SpecError::StepAfterReplace(_) => "step_after_replace",
        }
    }
}

/// The steps of a request's spec as the apiserver stored it (untrusted: an
/// older CRD, or one edited by hand, may let anything through).
pub fn parse_spec(spec: &serde_json::Value) -> Result<Vec<Step>, SpecError> {
    let spec: RemedyRemediationSpec =
        serde_json::from_value(spec.clone()).map_err(|e| SpecError::Malformed(e.to_string()))?;
    validate(&spec)
}

/// The validated steps of `spec`.
pub fn validate(spec: &RemedyRemediationSpec) -> Result<Vec<Step>, SpecError> {
    if spec.steps.is_empty() {
        return Err(SpecError::NoSteps);
    }
    if spec.steps.len() > MAX_STEPS {
        return Err(SpecError::TooManySteps(spec.steps.len()));
    }
    let mut out = Vec::with_capacity(spec.steps.len());
    for (index, s) in spec.steps.iter().enumerate() {
        if out
            .last()
            .is_some_and(|p: &Step| p.kind == StepKind::Replace)
        {
            return Err(SpecError::StepAfterReplace(index));
        }
        let timeout =
            humantime::parse_duration(s.timeout.trim()).map_err(|e| SpecError::BadTimeout {
                index,
                value: s.timeout.clone(),
                cause: e.to_string(),
            })?;
        if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout) {
            return Err(SpecError::TimeoutOutOfRange {
                index,
                value: s.timeout.clone(),
            });
        }
        out.push(Step {
            kind: s.kind,
            timeout,
        });
    }
    Ok(out)
}

/// The two CRDs as YAML, in the order deploy/ ships them.
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    use kube::CustomResourceExt;
    let template = serde_yaml_ng::to_string(&RemedyRemediationTemplate::crd())?;
    let request = serde_yaml_ng::to_string(&RemedyRemediation::crd())?;
    Ok(format!(
        "# Generated from src/model/remediation.rs (REMEDY_BLESS=1 cargo test --lib crds_match); do not edit.\n---\n{template}---\n{request}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SHIPPED: [&str; 2] = [
        "deploy/base/crds/remedy.dev.yaml",
        "deploy/helm/remedy/crds/remedy.dev.yaml",
    ];

    #[test]
    fn crds_match_the_checked_in_yaml() {
        let want = crds_yaml().expect("serialise");
        let root = env!("CARGO_MANIFEST_DIR");
        for rel in SHIPPED {
            let path = format!("{root}/{rel}");
            if std::env::var_os("REMEDY_BLESS").is_some() {
                std::fs::write(&path, &want).expect("write");
            }
            let got = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                got == want,
                "{rel} differs from the types: REMEDY_BLESS=1 cargo test --lib crds_match"
            );
        }
    }

    #[test]
    fn the_crds_have_status_printer_columns_and_names() {
        use kube::CustomResourceExt;
        let crd = RemedyRemediation::crd();
        assert_eq!(crd.spec.group, GROUP);
        assert_eq!(crd.spec.names.kind, KIND);
        assert_eq!(crd.spec.names.plural, PLURAL);
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, VERSION);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let cols: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(cols, ["Phase", "Step", "Attempts", "Waiting", "Age"]);
        // CAPI derives the request's kind from the template's.
        let t = RemedyRemediationTemplate::crd();
        assert_eq!(t.spec.names.kind, format!("{KIND}Template"));
        assert_eq!(t.spec.names.kind, TEMPLATE_KIND);
    }

    #[test]
    fn a_good_strategy_validates() {
        let steps = parse_spec(&json!({"steps": [
            {"kind": "retry", "timeout": "2m"},
            {"kind": "replace", "timeout": "10m"}
        ]}))
        .expect("valid");
        assert_eq!(
            steps,
            [
                Step {
                    kind: StepKind::Retry,
                    timeout: Duration::from_secs(120)
                },
                Step {
                    kind: StepKind::Replace,
                    timeout: Duration::from_secs(600)
                }
            ]
        );
    }

    #[test]
    fn bad_strategies_are_refused_with_their_reason() {
        let cases = [
            (json!({}), "malformed"),
            (
                json!({"steps": [{"kind": "reboot", "timeout": "1m"}]}),
                "malformed",
            ),
            (json!({"steps": []}), "no_steps"),
            (
                json!({"steps": vec![json!({"kind": "retry", "timeout": "1m"}); 9]}),
                "too_many_steps",
            ),
            (
                json!({"steps": [{"kind": "retry", "timeout": "soon"}]}),
                "bad_timeout",
            ),
            (
                json!({"steps": [{"kind": "retry", "timeout": "0s"}]}),
                "timeout_out_of_range",
            ),
            (
                json!({"steps": [{"kind": "retry", "timeout": "30d"}]}),
                "timeout_out_of_range",
            ),
            (
                json!({"steps": [{"kind": "replace", "timeout": "1m"}, {"kind": "retry", "timeout": "1m"}]}),
                "step_after_replace",
            ),
        ];
        for (spec, label) in cases {
            let err = parse_spec(&spec).expect_err(&spec.to_string());
            assert_eq!(err.label(), label, "{spec}: {err}");
            assert!(SpecError::LABELS.contains(&err.label()));
        }
    }

    #[test]
    fn phases_are_listed_once_each() {
        let mut names: Vec<_> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Phase::ALL.len());
        for p in Phase::ALL {
            assert_eq!(serde_json::to_value(p).expect("phase"), json!(p.as_str()));
        }
    }
}
