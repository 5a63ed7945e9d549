//! Failure domains: one outage breaker per domain (`decide::breakers`), so
//! an outage in one zone, account, cluster or provider holds that domain
//! only, and the others keep being retried and released. Pure: the domain
//! of a resource from its view.
//!
//! The domain comes from `breaker.domain` in the config: the whole fleet
//! (`cluster`, the default and the old behaviour), the profile `kind`, the
//! `namespace`, a `label` (e.g. `topology.kubernetes.io/zone`, or
//! `cluster.x-k8s.io/cluster-name` for the CAPI cluster), or a `field` of
//! the object (e.g. `/spec/failureDomain`), which the profile projects into
//! the view under [`FIELD_LABEL`]. Domains are bounded: past
//! [`MAX_DOMAINS`], new ones share the breaker [`OTHER`].

use crate::model::view::{ResourceKey, ResourceView};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Breakers kept at most (and so series of `remedy_outage_breaker_open`).
pub const MAX_DOMAINS: usize = 64;
/// The breaker of domains past the bound.
pub const OTHER: &str = "other";
/// The domain of a resource that has no value for the configured label or
/// field.
pub const NONE: &str = "none";
/// The one domain of `domain: cluster`.
pub const CLUSTER: &str = "cluster";
/// Where a profile puts the value of `domain: {field: …}` among the view's
/// labels (labels are already kept; a field of its own would cost every
/// object 16 bytes whether domains are used or not).
pub const FIELD_LABEL: &str = "remedy.dev/failure-domain";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "Repr", into = "Repr")]
pub enum DomainBy {
    #[default]
    Cluster,
    Kind,
    Namespace,
    /// A label of the object.
    Label(String),
    /// A JSON pointer into the object, e.g. `/spec/failureDomain`.
    Field(String),
    /// Each profile's own zone (`fields.failure_domain`: an
    /// OpenStackServer's `/spec/availabilityZone`, a Machine's
    /// `/spec/failureDomain`); objects without one share [`NONE`]. What
    /// `deploy/base/config.yaml` ships: an outage of one zone of three
    /// fails a third of the fleet at most, under a fleet-wide open_ratio.
    Zone,
}

/// How the config spells it: `kind`, or `{label: KEY}` (a YAML map, which
/// serde_yaml's own enum form, a `!tag`, would not take).
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
enum Repr {
    Name(#[schemars(schema_with = "domain_names")] String),
    Label(LabelRepr),
    Field(FieldRepr),
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LabelRepr {
    /// A label of the object, e.g. `topology.kubernetes.io/zone`.
    label: String,
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FieldRepr {
    /// A JSON pointer into the object, e.g. `/spec/failureDomain`.
    field: String,
}

/// The names `Repr::Name` takes, for the config's JSON Schema.
fn domain_names(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": [CLUSTER, "kind", "namespace", "zone"],
    })
}

impl TryFrom<Repr> for DomainBy {
    type Error = String;

    fn try_from(r: Repr) -> Result<Self, String> {
        match r {
            Repr::Name(n) => match n.as_str() {
                "cluster" => Ok(Self::Cluster),
                "kind" => Ok(Self::Kind),
                "namespace" => Ok(Self::Namespace),
                "zone" => Ok(Self::Zone),
                _ => Err(format!(
                    "unknown failure domain {n:?}: cluster, kind, namespace, zone, {{label: KEY}} or {{field: /POINTER}}"
                )),
            },
            Repr::Label(l) => Ok(Self::Label(l.label)),
            Repr::Field(f) => Ok(Self::Field(f.field)),
        }
    }
}

impl From<DomainBy> for Repr {
    fn from(d: DomainBy) -> Self {
        match d {
            DomainBy::Cluster => Repr::Name("cluster".into()),
            DomainBy::Kind => Repr::Name("kind".into()),
            DomainBy::Namespace => Repr::Name("namespace".into()),
            DomainBy::Zone => Repr::Name("zone".into()),
            DomainBy::Label(label) => Repr::Label(LabelRepr { label }),
            DomainBy::Field(field) => Repr::Field(FieldRepr { field }),
        }
    }
}

impl DomainBy {
    /// The `scope` label of `remedy_outage_breaker_open`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Cluster => "cluster",
            Self::Kind => "kind",
            Self::Namespace => "namespace",
            Self::Label(_) => "label",
            Self::Field(_) => "field",
            Self::Zone => "zone",
        }
    }

    /// The domain a resource belongs to, before the bound.
    pub fn of<'a>(&self, key: &'a ResourceKey, view: &'a ResourceView) -> &'a str {
        let v = match self {
            Self::Cluster => return CLUSTER,
            Self::Kind => Some(key.kind.as_ref()),
            Self::Namespace => Some(key.namespace.as_ref()),
            Self::Label(l) => view.label(l),
            Self::Field(_) | Self::Zone => view.label(FIELD_LABEL),
        };
        v.filter(|s| !s.is_empty()).unwrap_or(NONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_forms_parse() {
        for (yaml, want) in [
            ("cluster", DomainBy::Cluster),
            ("kind", DomainBy::Kind),
            ("namespace", DomainBy::Namespace),
            ("zone", DomainBy::Zone),
            (
                "{label: topology.kubernetes.io/zone}",
                DomainBy::Label("topology.kubernetes.io/zone".into()),
            ),
            (
                "{field: /spec/failureDomain}",
                DomainBy::Field("/spec/failureDomain".into()),
            ),
        ] {
            let got: DomainBy = serde_yaml_ng::from_str(yaml).unwrap();
            assert_eq!(got, want, "{yaml}");
        }
        for bad in ["zones", "{label: a, field: /b}", "{zone: a}"] {
            assert!(serde_yaml_ng::from_str::<DomainBy>(bad).is_err(), "{bad}");
        }
    }
}
