//! remedy names itself to the apiserver (issue #12, point 9): its requests
//! carry `User-Agent: remedy/VERSION`, from which the apiserver derives the
//! field manager of its writes, so `managedFields` (and audit logs) say who
//! paused or released an object.

use crate::support::objects::create_with_status;
use crate::support::{Remedy, TestCluster, eventually, namespace};
use crate::watch_expiry::held_osm;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use std::time::Duration;

#[tokio::test]
async fn remedys_writes_are_managed_by_remedy() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = namespace(&client, "ua").await;
    create_with_status(&client, held_osm("osm-ua", 0), &ns).await;
    let _remedy = Remedy::serve(
        cluster,
        &format!(
            "namespaces: [{ns}]\nprofiles: [openstack-machine]\ntick: 250ms\n\
             leader_election: {{enabled: false}}\nbreaker: {{min_resources: 1000, cooldown: 1s}}\n"
        ),
    );
    // remedy releases its breaker hold and records it in an Event. The
    // release only removes fields, which leaves no managedFields entry; the
    // Event is created by remedy, so its entry names remedy.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let event = eventually(Duration::from_secs(30), "the Released event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Released"))
    })
    .await;
    let managers: Vec<String> = event
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.manager.unwrap_or_default())
        .collect();
    assert_eq!(managers, vec!["remedy".to_string()]);
}
