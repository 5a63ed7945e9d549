//! Checks the cluster against the profiles before anything runs. A profile
//! whose remediation writes status fields (`clear_status`, `reset_status`)
//! needs the status subresource: without one the apiserver answers 404 to
//! every status patch, which would otherwise read as "object gone" and mark
//! a remediation done that never happened.

use crate::model::profile::Profile;
use kube::Client;

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "profile {profile}: remediation writes status fields ({fields}) but {resource} in {api_version} has no status subresource: remove them from the profile or enable `subresources: {{status: {{}}}}` in the CRD"
    )]
    NoStatusSubresource {
        profile: String,
        resource: String,
        api_version: String,
        fields: String,
    },
}

impl PreflightError {
    pub fn label(&self) -> &'static str {
        match self {
            Self::NoStatusSubresource { .. } => "no_status_subresource",
        }
    }
}

/// What discovery says about a resource's status subresource.
#[derive(Debug, PartialEq, Eq)]
pub enum StatusSubresource {
    Present,
    Missing,
    /// The resource is not served (yet): the watch reports it; the executor
    /// still tells a missing subresource apart at the first write.
    Unknown,
}

/// Reads a discovery listing (`names` of an APIResourceList).
pub fn status_subresource<'a>(
    plural: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> StatusSubresource {
    let status = format!("{plural}/status");
    let (mut main, mut sub) = (false, false);
    for n in names {
        main |= n == plural;
        sub |= n == status;
    }
    match (main, sub) {
        (true, true) => StatusSubresource::Present,
        (true, false) => StatusSubresource::Missing,
        _ => StatusSubresource::Unknown,
    }
}

/// Status fields a profile's remediation writes.
fn status_fields(p: &Profile) -> Vec<&str> {
    let r = &p.remediation;
    // The conditions lists `clear_conditions` removes from.
    let conditions = (!r.clear_conditions.is_empty())
        .then_some(&p.fields.conditions)
        .into_iter()
        .flatten();
    r.clear_status
        .iter()
        .chain(r.reset_status.iter().map(|f| &f.path))
        .chain(conditions)
        .map(String::as_str)
        .collect()
}

/// Refuses a profile that writes status fields of a resource without a
/// status subresource. Discovery needs no extra RBAC; when it cannot be
/// read the check is skipped with a warning.
pub async fn check_status_subresources(
    client: &Client,
    profiles: &[Profile],
) -> Result<(), PreflightError> {
    for p in profiles {
        let fields = status_fields(p);
        if fields.is_empty() {
            continue;
        }
        let api_version = p.api_version();
        let list = if p.group.is_empty() {
            client.list_core_api_resources(&p.version).await
        } else {
            client.list_api_group_resources(&api_version).await
        };
        let list = match list {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(profile = %p.name, %api_version, error = %e, "cannot read discovery: status subresource not checked");
                continue;
            }
        };
        let plural = p.plural();
        match status_subresource(&plural, list.resources.iter().map(|r| r.name.as_str())) {
            StatusSubresource::Present => {}
            StatusSubresource::Unknown => {
                tracing::info!(profile = %p.name, %api_version, resource = %plural, "resource not served yet: status subresource not checked");
            }
            StatusSubresource::Missing => {
                let resource = if p.group.is_empty() {
                    plural
                } else {
                    format!("{plural}.{}", p.group)
                };
                return Err(PreflightError::NoStatusSubresource {
                    profile: p.name.clone(),
                    resource,
                    api_version,
                    fields: fields.join(", "),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_names_tell_present_missing_and_unknown_apart() {
        let s = |names: &[&str]| status_subresource("things", names.iter().copied());
        assert_eq!(s(&["things", "things/status"]), StatusSubresource::Present);
        assert_eq!(s(&["things", "things/scale"]), StatusSubresource::Missing);
        assert_eq!(s(&["others", "others/status"]), StatusSubresource::Unknown);
    }

    #[test]
    fn only_profiles_that_write_status_need_the_subresource() {
        let osm = crate::model::profile::builtin("openstack-machine").expect("built-in");
        assert!(!status_fields(&osm).is_empty());
        let mut bare = osm.clone();
        bare.remediation.clear_status.clear();
        bare.remediation.reset_status.clear();
        assert_eq!(
            status_fields(&bare),
            ["/status/conditions"],
            "clear_conditions"
        );
        bare.remediation.clear_conditions.clear();
        assert!(status_fields(&bare).is_empty());
    }
}
