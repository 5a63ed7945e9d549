//! Which resources an alert is about. Pure: alert labels + the configured
//! selector in, a predicate over resources out.

use crate::model::view::{ResourceKey, ResourceView};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which resources an alert is about: alert labels name resource
/// coordinates, and static label selectors narrow further.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Alert label holding the resource namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_label: Option<String>,
    /// Alert label holding the resource kind (e.g. `kind` from remedy's metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind_label: Option<String>,
    /// Alert label holding the resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_label: Option<String>,
    /// Alert label holding a CAPI cluster name, matched against the
    /// resource label `cluster.x-k8s.io/cluster-name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_label: Option<String>,
    /// Resource labels that must all match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertRule {
    /// The alert's name; one rule per name.
    pub alertname: String,
    /// Which resources a notification of this alert is about, from its
    /// labels.
    #[serde(default)]
    pub select: Selector,
    /// PromQL that must return no series for the condition to count as
    /// cleared; defaults to the ALERTS series of this alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_query: Option<String>,
    /// Whether a firing alert whose labels select nothing in particular
    /// (no namespace, kind, name, cluster or label) may hold the whole
    /// fleet. Off: such a notification is refused and counted.
    #[serde(default)]
    pub allow_cluster_wide: bool,
    /// At most this many resources per episode: a scope selecting more
    /// holds and remediates nothing, and is counted
    /// (`remedy_episodes_refused_total{reason="over_cap"}`).
    #[serde(default = "default_max_resources")]
    pub max_resources: usize,
}

fn default_max_resources() -> usize {
    200
}

/// The configured alert rules, found by alert name (the config refuses a
/// name twice). Cheap to clone: the engine and the webhook's inbox share
/// one list.
#[derive(Clone, Debug, Default)]
pub struct AlertRules(std::sync::Arc<[AlertRule]>);

impl AlertRules {
    pub fn new(rules: Vec<AlertRule>) -> Self {
        Self(rules.into())
    }

    /// The rule for `alertname`, if it is configured.
    pub fn get(&self, alertname: &str) -> Option<&AlertRule> {
        self.0.iter().find(|r| r.alertname == alertname)
    }

    /// Every configured alert name, in config order.
    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|r| r.alertname.as_str()).collect()
    }
}

impl std::ops::Deref for AlertRules {
    type Target = [AlertRule];

    fn deref(&self) -> &[AlertRule] {
        &self.0
    }
}

/// Resource label CAPI puts on every object of a workload cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The longest value a scope may select on: a Kubernetes object name.
pub const MAX_VALUE_BYTES: usize = 253;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    pub alertname: String,
    pub namespace: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub cluster: Option<String>,
    pub match_labels: BTreeMap<String, String>,
    /// The alert labels the scope was built from (only those the selector
    /// names). Verification matches on exactly these, never on external
    /// labels, which the local ALERTS series does not carry.
    pub matchers: BTreeMap<String, String>,
}

impl Scope {
    pub fn from_alert(rule: &AlertRule, labels: &BTreeMap<String, String>) -> Self {
        let s: &Selector = &rule.select;
        let mut matchers = BTreeMap::new();
        let mut take = |label: &Option<String>| {
            let l = label.as_ref()?;
            let v = labels.get(l)?;
            matchers.insert(l.clone(), v.clone());
            Some(v.clone())
        };
        let namespace = take(&s.namespace_label);
        let kind = take(&s.kind_label);
        let name = take(&s.name_label);
        let cluster = take(&s.cluster_label);
        Self {
            alertname: rule.alertname.clone(),
            namespace,
            kind,
            name,
            cluster,
            match_labels: s.match_labels.clone(),
            matchers,
        }
    }

    /// Scope for a hold found on an object whose episode this process never
    /// saw (after a restart or leader change): exactly that resource's kind.
    pub fn recovered(alertname: &str, kind: &str) -> Self {
        Self {
            alertname: alertname.to_string(),
            namespace: None,
            kind: Some(kind.to_string()),
            name: None,
            cluster: None,
            match_labels: BTreeMap::new(),
            matchers: BTreeMap::new(),
        }
    }

    /// Whether every value the scope selects on could name a Kubernetes
    /// object: at most 253 bytes (a name's limit; namespaces, kinds and
    /// label values are shorter still). A longer one selects nothing, and
    /// kept in the episode record it would only take room from real ones.
    pub fn is_selectable(&self) -> bool {
        [&self.namespace, &self.kind, &self.name, &self.cluster]
            .into_iter()
            .flatten()
            .chain(self.matchers.values())
            .all(|v| v.len() <= MAX_VALUE_BYTES)
    }

    pub fn matches(&self, key: &ResourceKey, view: &ResourceView) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        eq(&self.namespace, &key.namespace)
            && eq(&self.kind, &key.kind)
            && eq(&self.name, &key.name)
            && self
                .cluster
                .as_deref()
                .is_none_or(|c| view.label(CLUSTER_NAME_LABEL) == Some(c))
            && self
                .match_labels
                .iter()
                .all(|(k, v)| view.label(k) == Some(v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(select: Selector) -> AlertRule {
        AlertRule {
            alertname: "RemedyTransientErrorRatioHigh".into(),
            select,
            verify_query: None,
            allow_cluster_wide: false,
            max_resources: 200,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn view(l: &[(&str, &str)]) -> ResourceView {
        ResourceView {
            labels: l.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect(),
            ..ResourceView::default()
        }
    }

    #[test]
    fn kind_label_narrows_and_external_labels_are_not_matchers() {
        let r = rule(Selector {
            kind_label: Some("kind".into()),
            ..Selector::default()
        });
        let s = Scope::from_alert(
            &r,
            &labels(&[
                ("alertname", "X"),
                ("kind", "OpenStackMachine"),
                ("cluster", "prod-eu"),
            ]),
        );
        assert_eq!(s.matchers, labels(&[("kind", "OpenStackMachine")]));
        assert!(s.matches(&ResourceKey::new("OpenStackMachine", "ns", "a"), &view(&[])));
        assert!(!s.matches(&ResourceKey::new("Machine", "ns", "a"), &view(&[])));
    }

    #[test]
    fn cluster_and_static_labels_must_match() {
        let r = rule(Selector {
            cluster_label: Some("cluster_name".into()),
            match_labels: labels(&[("tier", "workers")]),
            ..Selector::default()
        });
        let s = Scope::from_alert(&r, &labels(&[("cluster_name", "c1")]));
        let k = ResourceKey::new("Machine", "ns", "m");
        assert!(s.matches(
            &k,
            &view(&[(CLUSTER_NAME_LABEL, "c1"), ("tier", "workers")])
        ));
        assert!(!s.matches(
            &k,
            &view(&[(CLUSTER_NAME_LABEL, "c2"), ("tier", "workers")])
        ));
        assert!(!s.matches(&k, &view(&[(CLUSTER_NAME_LABEL, "c1")])));
    }

    #[test]
    fn a_selector_label_missing_from_the_alert_leaves_that_dimension_open() {
        let r = rule(Selector {
            namespace_label: Some("namespace".into()),
            ..Selector::default()
        });
        let s = Scope::from_alert(&r, &labels(&[]));
        assert!(s.matchers.is_empty());
        assert!(s.matches(&ResourceKey::new("Machine", "any", "m"), &view(&[])));
    }

    #[test]
    fn alert_rules_are_found_by_name_in_config_order() {
        let rule = |name: &str| AlertRule {
            alertname: name.into(),
            select: Selector::default(),
            verify_query: None,
            allow_cluster_wide: false,
            max_resources: 7,
        };
        let rules = AlertRules::new(vec![rule("B"), rule("A")]);
        assert_eq!(rules.names(), ["B", "A"]);
        assert_eq!(rules.get("A").map(|r| r.max_resources), Some(7));
        assert!(rules.get("C").is_none());
        assert_eq!(rules.len(), 2, "a slice too");
        assert!(AlertRules::default().names().is_empty());
    }
}
