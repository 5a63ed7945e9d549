use super::builtins::capi_fields;
use super::projection::MAX_MESSAGE;
use super::*;
use crate::model::classify::Verdict;
use crate::model::view::{PauseState, Projection};
use chrono::Utc;
use kube::api::DynamicObject;
use serde_json::json;
use std::collections::BTreeMap;

use crate::testkit::sample;

fn verdict(p: &Profile, v: &Projection) -> Verdict {
    crate::testkit::classifier().classify(p, v)
}

#[test]
fn capi_machine_v1beta1_failure_fields() {
    let p = builtin("capi-machine").unwrap();
    let v = p.project(&sample(include_str!(
        "../../../testenv/samples/capi-machine-v1beta1-failed.yaml"
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
        "../../../testenv/samples/capi-machine-v1beta2-failed.yaml"
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
        "../../../testenv/samples/capo-openstackmachine-error.yaml"
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
        "../../../testenv/samples/capo-openstackserver-createfailed.yaml"
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
        "../../../testenv/samples/capo-openstackserver-error.yaml"
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
        "../../../testenv/samples/capa-awsmachine-terminated.yaml"
    )));
    assert_eq!(v.failure.state.as_deref(), Some("terminated"));
    assert!(matches!(verdict(&aws, &v), Verdict::Terminal { .. }));
    let az = builtin("azure-machine").unwrap();
    let v = az.project(&sample(include_str!(
        "../../../testenv/samples/capz-azuremachine-failed.yaml"
    )));
    assert_eq!(v.failure.state.as_deref(), Some("Failed"));
    // "Failed" is not a configured terminal state for Azure: retried.
    assert!(matches!(verdict(&az, &v), Verdict::Transient { .. }));
}

#[test]
fn bottlerocket_crash_count_and_nanosecond_timestamp() {
    let p = builtin("bottlerocket-shadow").unwrap();
    let v = p.project(&sample(include_str!(
        "../../../testenv/samples/brupop-bottlerocketshadow-crashed.yaml"
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
    let neg = sample("apiVersion: v\nkind: K\nmetadata: {name: x}\nstatus: {crash_count: -1}\n");
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
            ..HoldSpec::default()
        }),
        remediation: RemediationSpec::default(),
        label_selector: None,
        backoff: None,
    }
}

fn pause_of(p: &Profile, annotations: serde_json::Value, spec: serde_json::Value) -> PauseState {
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
    p.hold = Some(HoldSpec::field("/spec/paused"));
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
        ..HoldSpec::default()
    });
    assert!(bad(&p).contains("exactly one"));
    p.hold = Some(HoldSpec {
        annotation: Some("crossplane.io/paused".into()),
        field: None,
        value: Some(Value::Bool(true)),
        ..HoldSpec::default()
    });
    assert!(bad(&p).contains("string"));
    p.hold = Some(HoldSpec {
        annotation: None,
        field: Some("/status/paused".into()),
        value: None,
        ..HoldSpec::default()
    });
    assert!(bad(&p).contains("under /spec"));
    p.hold = Some(HoldSpec {
        annotation: None,
        field: Some("/spec/paused".into()),
        value: Some(Value::Bool(false)),
        ..HoldSpec::default()
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
    let with = |annotations: BTreeMap<String, String>| p.pause_state(&annotations, &Value::Null);
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

/// #38.13: a CAPI Cluster held by `/spec/paused` without `resume` leaves its
/// Machines paused after the release (the Machine controller does not
/// requeue them): validation warns, naming the stanza docs/reference/config-example.md's
/// capi-cluster form carries.
#[test]
fn a_capi_cluster_held_by_spec_without_resume_is_warned_with_the_stanza() {
    let custom = |hold: &str| -> Profile {
        let yaml = format!(
            "name: my-cluster\ngroup: cluster.x-k8s.io\nversion: v1beta2\nkind: Cluster\nhold: {hold}\n"
        );
        let p: Profile = serde_yaml_ng::from_str(&yaml).unwrap();
        p.validate().unwrap();
        p
    };
    let stanza = "resume: {kind: Machine, label: cluster.x-k8s.io/cluster-name}";
    let warned = custom("{field: /spec/paused}").hold_warnings();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains(stanza), "{}", warned[0]);
    assert!(warned[0].contains("capi-machine"), "{}", warned[0]);
    // The built-in with the same hold, overridden as docs/reference/config-example.md shows, but
    // without its resume.
    let overridden = Profile {
        hold: Some(HoldSpec::field("/spec/paused")),
        ..builtin("capi-cluster").unwrap()
    };
    assert_eq!(overridden.hold_warnings(), warned);
    // The stanza named is the one that silences it, and the example's.
    let fixed = custom(&format!("{{field: /spec/paused, {stanza}}}"));
    assert_eq!(fixed.hold_warnings(), Vec::<String>::new());
    let example = include_str!("../../../docs/reference/config-example.md");
    assert!(
        example.contains(&format!("hold: {{field: /spec/paused, {stanza}}}")),
        "docs/reference/config-example.md's capi-cluster form"
    );
    // Nothing to say: the built-in (an annotation on the Cluster pauses
    // only the Cluster), another kind, or another group.
    assert!(builtin("capi-cluster").unwrap().hold_warnings().is_empty());
    let other_kind = Profile {
        kind: "MachineDeployment".into(),
        ..custom("{field: /spec/paused}")
    };
    assert!(other_kind.hold_warnings().is_empty());
    let other_group = Profile {
        group: "example.com".into(),
        ..custom("{field: /spec/paused}")
    };
    assert!(other_group.hold_warnings().is_empty());
    // The value mismatch is one of the warnings too.
    let mismatched = custom("{field: /spec/paused, value: 'yes'}");
    let w = mismatched.hold_warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("only true pauses"), "{w:?}");
}

/// #38.12: `clear_conditions` names conditions by type (and reason), only
/// while False, where the profile reads its conditions, under /status.
#[test]
fn clear_conditions_match_false_ones_and_need_a_status_conditions_list() {
    let parse = |extra: &str| -> Result<Profile, ProfileError> {
        let yaml = format!("name: x\ngroup: g\nversion: v1\nkind: K\n{extra}");
        let p: Profile = serde_yaml_ng::from_str(&yaml).map_err(|e| ProfileError::Empty {
            profile: e.to_string(),
            field: "yaml",
        })?;
        p.validate().map(|()| p)
    };
    let p = parse(
        "fields: {conditions: [/status/conditions]}\n\
         remediation: {clear_conditions: [{type: Ready, reason: Broken}, {type: Stuck}]}\n",
    )
    .unwrap();
    let data = |conditions: Value| json!({"status": {"conditions": conditions}});
    let clears = |conditions: Value| p.conditions_to_clear(&data(conditions));
    let broken = json!({"type": "Ready", "status": "False", "reason": "Broken"});
    assert_eq!(
        clears(json!([{"type": "Other", "status": "False"}, broken.clone()])),
        vec![("/status/conditions/1".to_string(), broken.clone())]
    );
    assert!(p.clearable(&data(json!([broken]))));
    for kept in [
        json!({"type": "Ready", "status": "False", "reason": "Building"}),
        json!({"type": "Ready", "status": "True", "reason": "Broken"}),
        json!({"type": "Stuck", "status": "Unknown"}),
        json!({"type": "Other", "status": "False", "reason": "Broken"}),
    ] {
        assert!(clears(json!([kept.clone()])).is_empty(), "{kept}");
        assert!(!p.clearable(&data(json!([kept.clone()]))), "{kept}");
    }
    // Any reason when none is named.
    let stuck = json!({"type": "Stuck", "status": "False", "reason": "Whatever"});
    assert_eq!(clears(json!([stuck.clone()])).len(), 1);
    // keep_if_set holds them back too.
    let mut kept = p.clone();
    kept.remediation.keep_if_set = vec!["/status/id".into()];
    let mut with_id = data(json!([stuck]));
    with_id["status"]["id"] = json!("b4c1");
    assert!(!kept.clearable(&with_id));

    let err = |extra: &str| parse(extra).expect_err(extra);
    assert!(matches!(
        err("remediation: {clear_conditions: [{type: Ready}]}\n"),
        ProfileError::Empty {
            field: "fields.conditions",
            ..
        }
    ));
    assert!(matches!(
        err(
            "fields: {conditions: [/spec/conditions]}\nremediation: {clear_conditions: [{type: Ready}]}\n"
        ),
        ProfileError::NotStatus { .. }
    ));
    assert!(matches!(
        err(
            "fields: {conditions: [/status/conditions]}\nremediation: {clear_conditions: [{type: ''}]}\n"
        ),
        ProfileError::Empty {
            field: "remediation.clear_conditions",
            ..
        }
    ));
    assert!(matches!(
        err(
            "fields: {conditions: [/status/conditions]}\nremediation: {clear_conditions: [{type: Ready, reason: ''}]}\n"
        ),
        ProfileError::Empty {
            field: "remediation.clear_conditions",
            ..
        }
    ));
    // The built-in names the ones CAPO v0.15 stops on (Ready, and the
    // InstanceReady it derives Ready from), and no longer clears the
    // whole list.
    let osm = builtin("openstack-machine").unwrap();
    assert_eq!(
        osm.remediation.clear_conditions,
        ["Ready", "InstanceReady"]
            .map(|t| ConditionMatch {
                type_: t.into(),
                reason: Some("InstanceStateError".into())
            })
            .to_vec()
    );
    assert!(
        !osm.remediation
            .clear_status
            .iter()
            .any(|p| p == "/status/conditions")
    );
}

/// #39: what `hold.new_until` reads on the built-ins: a server that made
/// nothing in the cloud (a failed create) and a Machine without a
/// providerID are new; ones with an instanceID or a providerID are not;
/// a profile without it never calls anything new.
#[test]
fn new_until_tells_what_is_not_made_in_the_cloud_yet() {
    let server = builtin("openstack-server").unwrap();
    let failed = sample(include_str!(
        "../../../testenv/samples/capo-openstackserver-createfailed.yaml"
    ));
    assert!(server.project(&failed).view.uncreated);
    let made = sample(include_str!(
        "../../../testenv/samples/capo-openstackserver-error.yaml"
    ));
    assert!(!server.project(&made).view.uncreated);
    let machine = builtin("capi-machine").unwrap();
    let mut m = sample(include_str!(
        "../../../testenv/samples/capi-machine-v1beta1-failed.yaml"
    ));
    assert!(!machine.project(&m).view.uncreated);
    m.data["spec"].as_object_mut().unwrap().remove("providerID");
    assert!(machine.project(&m).view.uncreated);
    m.data["spec"]["providerID"] = serde_json::Value::Null;
    assert!(machine.project(&m).view.uncreated, "null is unset");
    let osm = builtin("openstack-machine").unwrap();
    assert!(osm.hold.as_ref().unwrap().new_until.is_empty());
    assert!(!osm.project(&m).view.uncreated);
}
