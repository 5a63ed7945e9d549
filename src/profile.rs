//! Declarative resource profiles: which kind to watch and where its failure
//! signals live. Field paths are JSON pointers tried in order, so one profile
//! reads both the CAPI v1beta1 (`status.failureReason`) and v1beta2
//! (`status.deprecated.v1beta1.failureReason`) layouts.

use crate::view::{
    ConditionView, FailureText, Labels, Owner, PauseState, Projection, ResourceView,
};
use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Value remedy writes into the pause annotation. Controllers only check the
/// key; the value lets remedy tell its own pause from a human's.
pub const PAUSE_MARKER: &str = "remedy.dev/hold";
/// Annotation recording why and since when remedy holds a resource.
pub const HOLD_ANNOTATION: &str = "remedy.dev/hold";
/// Value remedy writes into skip-remediation while it clears failure status.
pub const SKIP_MARKER: &str = "remedy.dev/clearing";
/// remedy's own failure counter, kept on kinds without a native one (CAPI):
/// incremented on every hold so release backoff grows like brupop's.
pub const CRASH_ANNOTATION: &str = "remedy.dev/crash-count";
pub const FAILURE_TIME_ANNOTATION: &str = "remedy.dev/failure-time";
pub const CAPI_PAUSED: &str = "cluster.x-k8s.io/paused";
pub const CAPI_SKIP_REMEDIATION: &str = "cluster.x-k8s.io/skip-remediation";

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
    /// How remedy holds the resource; `None` means it cannot be held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldSpec>,
    #[serde(default)]
    pub remediation: RemediationSpec,
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
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldSpec {
    /// Annotation whose presence makes the controller stop reconciling.
    pub annotation: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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
}

impl ProfileError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Empty { .. } => "empty_field",
            Self::BadPointer { .. } => "bad_pointer",
            Self::NotStatus { .. } => "not_status",
            Self::UnknownBuiltin(_) => "unknown_builtin",
        }
    }
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
        let groups: [(&'static str, &Vec<String>); 6] = [
            ("fields.failure_reason", &f.failure_reason),
            ("fields.failure_message", &f.failure_message),
            ("fields.conditions", &f.conditions),
            ("fields.state", &f.state),
            ("fields.crash_count", &f.crash_count),
            ("fields.failure_time", &f.failure_time),
        ];
        for (field, paths) in groups {
            for p in paths {
                self.check_pointer(field, p)?;
            }
        }
        let r = &self.remediation;
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
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            ),
            deleting: meta.deletion_timestamp.is_some(),
            ..ResourceView::default()
        };
        let empty = BTreeMap::new();
        let annotations = meta.annotations.as_ref().unwrap_or(&empty);
        view.pause = self.pause_state(annotations);
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
                Some(c) => failure.conditions = c,
                None => view.malformed.push("conditions"),
            }
        }
        Projection { view, failure }
    }

    /// Whether the object itself counts failures (brupop); otherwise remedy
    /// keeps its own count in annotations.
    pub fn has_native_counter(&self) -> bool {
        !self.fields.crash_count.is_empty()
    }

    fn pause_state(&self, annotations: &BTreeMap<String, String>) -> PauseState {
        let Some(hold) = &self.hold else {
            return PauseState::NotPaused;
        };
        match annotations.get(&hold.annotation) {
            None => PauseState::NotPaused,
            Some(v) if v == PAUSE_MARKER => match annotations.get(HOLD_ANNOTATION) {
                Some(record) => {
                    let r = HoldRecord::parse(record);
                    PauseState::Ours {
                        since: r.as_ref().map(|r| r.since),
                        reason: r.map(|r| r.reason.into()),
                    }
                }
                None => PauseState::Foreign,
            },
            Some(_) => PauseState::Foreign,
        }
    }
}

/// The JSON remedy stores in [`HOLD_ANNOTATION`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HoldRecord {
    pub since: DateTime<Utc>,
    pub reason: String,
    /// The crash count this hold records (kinds without a native counter).
    #[serde(default)]
    pub crash_count: u32,
}

impl HoldRecord {
    pub fn parse(s: &str) -> Option<Self> {
        serde_json::from_str(s).ok()
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
        hold: Some(HoldSpec {
            annotation: CAPI_PAUSED.into(),
        }),
        remediation: RemediationSpec {
            clear_status: capi_clear(),
            reset_status: Vec::new(),
            skip_remediation_annotation: None,
        },
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
    let mut aws = capi_profile(
        "aws-machine",
        INFRA,
        "v1beta2",
        "AWSMachine",
        &["/status/instanceState"],
    );
    aws.terminal_states = vec!["terminated".into()];
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
        // brupop has no pause switch: its own backoff applies, remedy only
        // resets counters once the outage is over.
        hold: None,
        remediation: RemediationSpec {
            clear_status: paths(&["/status/state_transition_failure_timestamp"]),
            reset_status: vec![ResetField {
                path: "/status/crash_count".into(),
                value: Value::from(0),
            }],
            skip_remediation_annotation: None,
        },
    };
    vec![machine, cluster, openstack, aws, azure, bottlerocket]
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
    use crate::classify::{Classifier, Verdict, default_rules};

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
            "../testenv/samples/capi-machine-v1beta1-failed.yaml"
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
            "../testenv/samples/capi-machine-v1beta2-failed.yaml"
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
            "../testenv/samples/capo-openstackmachine-error.yaml"
        )));
        assert_eq!(v.failure.state.as_deref(), Some("ERROR"));
        assert_eq!(v.failure.reason.as_deref(), Some("UpdateError"));
        assert!(
            matches!(verdict(&p, &v), Verdict::Terminal { ref reason, .. } if reason == "instance_error")
        );
    }

    #[test]
    fn aws_and_azure_samples_project() {
        let aws = builtin("aws-machine").unwrap();
        let v = aws.project(&sample(include_str!(
            "../testenv/samples/capa-awsmachine-terminated.yaml"
        )));
        assert_eq!(v.failure.state.as_deref(), Some("terminated"));
        assert!(matches!(verdict(&aws, &v), Verdict::Terminal { .. }));
        let az = builtin("azure-machine").unwrap();
        let v = az.project(&sample(include_str!(
            "../testenv/samples/capz-azuremachine-failed.yaml"
        )));
        assert_eq!(v.failure.state.as_deref(), Some("Failed"));
        // "Failed" is not a configured terminal state for Azure: retried.
        assert!(matches!(verdict(&az, &v), Verdict::Transient { .. }));
    }

    #[test]
    fn bottlerocket_crash_count_and_nanosecond_timestamp() {
        let p = builtin("bottlerocket-shadow").unwrap();
        let v = p.project(&sample(include_str!(
            "../testenv/samples/brupop-bottlerocketshadow-crashed.yaml"
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
