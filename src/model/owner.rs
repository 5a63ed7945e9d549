//! Owners for `budget.per`: a limit on how many of one owner's resources
//! (a MachineDeployment's Machines, a CAPI cluster's) are released or
//! remediated and not answered yet, like CAPI's MachineDeployment
//! `remediation.maxInFlight`. Pure: the owner of a resource from its view.
//!
//! The owner is a `label` of the object (`cluster.x-k8s.io/deployment-name`)
//! or a `field` (JSON pointer), which every profile projects into the view
//! under [`OWNER_LABEL`], as a field failure domain is. Names are scoped by
//! namespace: `md-0` in two namespaces are two owners.

use crate::model::view::{ResourceKey, ResourceView};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a profile puts the value of `budget.per: {field: …}` among the
/// view's labels.
pub const OWNER_LABEL: &str = "remedy.dev/owner";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PerOwner {
    /// A label naming the owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Or a JSON pointer into the object naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Releases and remediations of one owner that may be unanswered at
    /// once (released, the controller's next state not seen yet).
    pub max_in_flight: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OwnerError {
    #[error("needs exactly one of `label` or `field`")]
    NotOne,
    #[error("label must be a label key, not {0:?}")]
    BadLabel(String),
    #[error("field must be a JSON pointer such as /spec/clusterName, not {0:?}")]
    BadField(String),
    #[error("max_in_flight must be at least 1 (0 would release nothing of an owner)")]
    Zero,
}

impl PerOwner {
    pub fn validate(&self) -> Result<(), OwnerError> {
        match (&self.label, &self.field) {
            (Some(l), None) if l.is_empty() || l.chars().any(char::is_whitespace) => {
                Err(OwnerError::BadLabel(l.clone()))
            }
            (None, Some(f)) if !f.starts_with('/') || f.len() < 2 => {
                Err(OwnerError::BadField(f.clone()))
            }
            (Some(_), None) | (None, Some(_)) if self.max_in_flight == 0 => Err(OwnerError::Zero),
            (Some(_), None) | (None, Some(_)) => Ok(()),
            _ => Err(OwnerError::NotOne),
        }
    }

    /// `namespace/owner`, or `None` for a resource that names no owner: it
    /// is not limited.
    pub fn of(&self, key: &ResourceKey, view: &ResourceView) -> Option<String> {
        let name = match (&self.label, &self.field) {
            (Some(l), _) => view.label(l),
            (None, Some(_)) => view.label(OWNER_LABEL),
            (None, None) => None,
        }?;
        (!name.is_empty()).then(|| format!("{}/{name}", key.namespace))
    }

    /// A readable description for `explain` and `check-config`.
    pub fn describe(&self) -> String {
        match (&self.label, &self.field) {
            (Some(l), _) => format!("label {l}"),
            (None, Some(f)) => format!("field {f}"),
            (None, None) => "nothing".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::view::Labels;

    fn per(label: Option<&str>, field: Option<&str>, max: u32) -> PerOwner {
        PerOwner {
            label: label.map(Into::into),
            field: field.map(Into::into),
            max_in_flight: max,
        }
    }

    #[test]
    fn the_owner_is_a_label_or_a_projected_field_within_the_namespace() {
        let view = ResourceView {
            labels: Labels::from_pairs([
                ("cluster.x-k8s.io/deployment-name", "md-0"),
                (OWNER_LABEL, "prod"),
            ]),
            ..ResourceView::default()
        };
        let key = ResourceKey::new("Machine", "team-a", "m1");
        let by_label = per(Some("cluster.x-k8s.io/deployment-name"), None, 2);
        assert_eq!(by_label.of(&key, &view).as_deref(), Some("team-a/md-0"));
        let by_field = per(None, Some("/spec/clusterName"), 2);
        assert_eq!(by_field.of(&key, &view).as_deref(), Some("team-a/prod"));
        let none = per(Some("absent"), None, 2);
        assert_eq!(none.of(&key, &view), None);
    }

    #[test]
    fn exactly_one_source_and_a_positive_limit() {
        assert_eq!(per(Some("a"), None, 1).validate(), Ok(()));
        assert_eq!(per(None, Some("/spec/x"), 3).validate(), Ok(()));
        assert_eq!(per(None, None, 1).validate(), Err(OwnerError::NotOne));
        assert_eq!(
            per(Some("a"), Some("/b"), 1).validate(),
            Err(OwnerError::NotOne)
        );
        assert_eq!(per(Some("a"), None, 0).validate(), Err(OwnerError::Zero));
        assert!(matches!(
            per(Some(""), None, 1).validate(),
            Err(OwnerError::BadLabel(_))
        ));
        assert!(matches!(
            per(None, Some("spec.x"), 1).validate(),
            Err(OwnerError::BadField(_))
        ));
    }
}
