//! Who to touch after a hold goes (`hold.resume`): some controllers do not
//! requeue their objects when the pause they obey is lifted. CAPI's Machine
//! controller watches its Cluster only for ControlPlaneInitialized
//! (v1.12 `internal/controllers/machine/machine_controller.go`), so after
//! `Cluster.spec.paused` turns false its Machines stay `Paused` until their
//! next event or the 10-minute resync. Pure: the caller passes the objects.

use crate::model::profile::ResumeSpec;
use crate::model::view::{PauseState, ResourceKey, ResourceView};

/// Whether `key` is to be touched once the hold on `released` is gone: of
/// `spec.kind` in its namespace, its `spec.label` naming it, not paused (a
/// paused one would stay so: its own hold's release, or whoever paused it,
/// moves it) and not being deleted.
pub fn selects(
    spec: &ResumeSpec,
    released: &ResourceKey,
    key: &ResourceKey,
    view: &ResourceView,
) -> bool {
    *key.kind == *spec.kind
        && key.namespace == released.namespace
        && view.label(&spec.label) == Some(&*released.name)
        && matches!(view.pause, PauseState::NotPaused)
        && !view.deleting
        && !view.ignored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::view::Labels;

    fn view(cluster: Option<&str>, pause: PauseState) -> ResourceView {
        ResourceView {
            labels: Labels::from_pairs(cluster.map(|c| ("cluster.x-k8s.io/cluster-name", c))),
            pause,
            ..ResourceView::default()
        }
    }

    #[test]
    fn the_unpaused_machines_of_the_released_cluster_in_its_namespace() {
        let spec = ResumeSpec {
            kind: "Machine".into(),
            label: "cluster.x-k8s.io/cluster-name".into(),
        };
        let released = ResourceKey::new("Cluster", "team-a", "prod");
        let m = |ns: &str, name: &str| ResourceKey::new("Machine", ns, name);
        let mut deleting = view(Some("prod"), PauseState::NotPaused);
        deleting.deleting = true;
        let objects = [
            (
                m("team-a", "prod-b"),
                view(Some("prod"), PauseState::NotPaused),
            ),
            (
                m("team-a", "prod-a"),
                view(Some("prod"), PauseState::NotPaused),
            ),
            // Another cluster's, the same name in another namespace, no label.
            (
                m("team-a", "dev-a"),
                view(Some("dev"), PauseState::NotPaused),
            ),
            (
                m("team-b", "prod-a"),
                view(Some("prod"), PauseState::NotPaused),
            ),
            (m("team-a", "loose"), view(None, PauseState::NotPaused)),
            // Paused by someone else, or held by remedy: a touch moves nothing.
            (
                m("team-a", "prod-c"),
                view(Some("prod"), PauseState::Foreign),
            ),
            (
                m("team-a", "prod-d"),
                view(
                    Some("prod"),
                    PauseState::Ours {
                        since: None,
                        reason: None,
                    },
                ),
            ),
            (m("team-a", "prod-e"), deleting),
            // The right label on another kind.
            (
                ResourceKey::new("MachineSet", "team-a", "prod-ms"),
                view(Some("prod"), PauseState::NotPaused),
            ),
        ];
        let mut got: Vec<ResourceKey> = objects
            .iter()
            .filter(|(k, v)| selects(&spec, &released, k, v))
            .map(|(k, _)| k.clone())
            .collect();
        got.sort();
        assert_eq!(got, vec![m("team-a", "prod-a"), m("team-a", "prod-b")]);
    }
}
