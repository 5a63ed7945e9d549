//! The built-in profiles: CAPI Machine and Cluster, CAPO's OpenStackMachine
//! and OpenStackServer, CAPA's AWSMachine, CAPZ's AzureMachine and brupop's
//! BottlerocketShadow, with the upstream facts each setting rests on.

use super::{
    CAPI_PAUSED, CAPI_SKIP_REMEDIATION, ConditionMatch, FieldPaths, HoldSpec, IgnoreConditions,
    Profile, ProfileError, RemediationSpec, ResetField, ResumeSpec, RetrySpec,
};
use serde_json::Value;

fn paths(ps: &[&str]) -> Vec<String> {
    ps.iter().map(|s| s.to_string()).collect()
}

/// CAPI-style failure fields in both status layouts.
pub(super) fn capi_fields(state: &[&str]) -> FieldPaths {
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
            // The v1beta1 infrastructure contract: failureReason is
            // terminal, the provider stops reconciling (CAPO v0.14
            // "Not reconciling machine in failed state"). Off for the CAPI
            // core kinds below, whose failure is the provider's copy.
            retry: Some(RetrySpec::default()),
            ..RemediationSpec::default()
        },
        label_selector: None,
        backoff: None,
    }
}

const INFRA: &str = "infrastructure.cluster.x-k8s.io";
/// The group of Cluster API's core kinds (Machine, Cluster).
pub(super) const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// The `resume` a hold of a CAPI Cluster by `/spec/paused` needs (docs/concepts/holds.md,
/// `{builtin: capi-cluster, hold: {field: /spec/paused, resume: …}}`): the
/// Machine controller (v1.12.5 and v1.14.2) does not requeue a Cluster's
/// Machines when `spec.paused` turns false, so untouched they stay
/// `Paused=True` until their next event or the 10-minute resync.
pub(super) fn capi_cluster_resume() -> ResumeSpec {
    ResumeSpec {
        kind: "Machine".into(),
        label: "cluster.x-k8s.io/cluster-name".into(),
    }
}

/// The built-in profiles, in a stable order.
pub fn builtins() -> Vec<Profile> {
    let mut machine = capi_profile(
        "capi-machine",
        CAPI_GROUP,
        "v1beta1",
        "Machine",
        &["/status/phase"],
    );
    machine.remediation.skip_remediation_annotation = Some(CAPI_SKIP_REMEDIATION.into());
    // Its zone (v1beta1 and v1beta2 alike), for `breaker.domain: zone`.
    machine.fields.failure_domain = paths(&["/spec/failureDomain"]);
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
        h.no_probe = true;
        // Set once its infrastructure is made. Before that, a paused
        // Machine's controller neither owns nor bootstraps its
        // infrastructure object, and CAPO's OpenStackMachine waits for both
        // ("Machine Controller has not yet set OwnerRef") before it makes
        // the OpenStackServer, whose create follows within ~30 ms (the
        // capo_outage bench, CAPO main): held there, no server is made.
        h.new_until = paths(&["/spec/providerID"]);
    }
    // A Machine's or Cluster's failure is its infrastructure's, copied:
    // retried where it is made (the provider's object), never here.
    machine.remediation.retry = None;
    let mut cluster = capi_profile(
        "capi-cluster",
        CAPI_GROUP,
        "v1beta1",
        "Cluster",
        &["/status/phase"],
    );
    cluster.remediation.retry = None;
    if let Some(h) = cluster.hold.as_mut() {
        h.no_probe = true;
    }
    let mut openstack = capi_profile(
        "openstack-machine",
        INFRA,
        "v1beta1",
        "OpenStackMachine",
        &["/status/instanceState"],
    );
    openstack.terminal_states = vec!["ERROR".into()];
    // CAPO v0.15 (v1beta2) has no failure fields: it copies its server's
    // ERROR into Ready and InstanceReady False/InstanceStateError and then
    // skips the machine while Ready says so ("Not reconciling machine in
    // failed state", v0.15.0-beta.0 openstackmachine_controller.go:358-364),
    // even once its server is ACTIVE: only that condition goes, the others
    // are CAPO's record. Released after its server (`Decisions::letting_go`),
    // or the copy comes back. CAPO v0.14 (v1beta1) stops on failureReason
    // only; its Ready summary, False/InstanceStateError beside it, goes too
    // (the v1beta1 view of a v0.15 object has no failure fields, only this
    // condition), and CAPO writes it again at the reconcile the cleared
    // failureReason lets through.
    // InstanceReady False/InstanceStateError goes too: CAPO v0.15 derives
    // the machine's Ready from it, so with it kept the cleared Ready comes
    // straight back at the next reconcile, while the new server builds
    // (capo_real::v015: held a second time with its server).
    openstack.remediation.clear_conditions = ["Ready", "InstanceReady"]
        .into_iter()
        .map(|t| ConditionMatch {
            type_: t.into(),
            reason: Some("InstanceStateError".into()),
        })
        .collect();
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
            // Set from the create's answer (v0.14 and main
            // getOrCreateServer); a failed create leaves it unset.
            new_until: paths(&["/status/instanceID"]),
            ..HoldSpec::marked(CAPI_PAUSED)
        }),
        remediation: RemediationSpec {
            // The conditions too: CAPO v0.14 rewrites InstanceReady only on
            // ACTIVE, ERROR or DELETED, so the old 503 would stay on the new
            // server while it builds and read as a fresh failure
            // (tests/it/capo_real.rs). CAPO sets them again itself.
            clear_status: paths(&["/status/instanceState", "/status/conditions"]),
            keep_if_set: paths(&["/status/instanceID"]),
            // CAPO v0.14 and v0.15 never reconcile a server in ERROR again
            // (IsServerTerminalError). CAPO main retries it (every 60 s, a
            // failed create with controller-runtime's backoff) but writes
            // nothing while the error stays the same, so `quiet` cannot see
            // it: `controller_retries: true` says so
            // (docs/upstream-behaviour.md, "Who retries a failed create").
            retry: Some(RetrySpec::default()),
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
