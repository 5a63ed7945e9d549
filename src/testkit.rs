//! Shared test fixtures: the builders unit tests across the crate use to
//! make objects, classifiers and stores, so each test says only what is
//! particular to it.

use crate::daemon::store::Store;
use crate::metrics::Metrics;
use crate::model::backoff::BackoffPolicy;
use crate::model::classify::{Classifier, default_rules};
use crate::model::profile::builtin;
use kube::api::DynamicObject;
use serde_json::{Value, json};
use std::sync::Arc;

/// An object from its JSON.
pub fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("a Kubernetes object")
}

/// An object from a YAML document (a sample under `testenv/samples`).
pub fn sample(yaml: &str) -> DynamicObject {
    serde_yaml_ng::from_str(yaml).expect("sample parses")
}

/// The classifier with the seed rules.
pub fn classifier() -> Classifier {
    Classifier::new(&default_rules()).expect("seed rules compile")
}

/// A store of the named built-in profiles, the seed rules and the
/// default backoff.
pub fn store(profiles: &[&str], metrics: Arc<Metrics>) -> Store {
    Store::new(
        profiles
            .iter()
            .map(|p| builtin(p).expect("a built-in profile"))
            .collect(),
        classifier(),
        BackoffPolicy::default(),
        metrics,
    )
}

/// A CAPO v1beta1 OpenStackMachine `ns/name` at `rv`.
pub fn openstack_machine(name: &str, rv: u64, annotations: Value, status: Value) -> DynamicObject {
    object(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                     "resourceVersion": rv.to_string(), "annotations": annotations},
        "status": status
    }))
}
