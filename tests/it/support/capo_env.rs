//! One CAPO cluster's objects on the fake OpenStack's pre-created network,
//! and the whole stack that runs them (the fake, a private apiserver, the
//! real CAPI and CAPO managers): shared by `tests/it/capo_real.rs` and the
//! `capo_outage` bench.

use super::openstack::{
    FLAVOR, FakeOpenstack, IMAGE_ID, NETWORK_ID, SUBNET_ID, Supervised, start_capi_manager,
    start_capi_manager_v1_13, start_capi_manager_v1_14, start_capo_manager_main,
    start_capo_manager_v0_15, start_capo_manager_with, wait_for,
};
use super::{CrdSet, Remedy, TestCluster, namespace};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use remedy::model::scope::CLUSTER_NAME_LABEL;
use serde_json::{Value, json};
use std::time::Duration;

pub const CLUSTER: &str = "c1";
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io";

pub fn api(
    client: &Client,
    ns: &str,
    group: &str,
    version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

pub async fn create(api: &Api<DynamicObject>, v: Value) {
    let name = v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let obj: DynamicObject = serde_json::from_value(v).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

/// The API version CAPO's OpenStackMachine and OpenStackCluster are
/// written and read at: v0.14's v1beta1, or v0.15's v1beta2 (its storage
/// version). The test cluster has no conversion webhook, so each test
/// keeps to one. OpenStackServer is v1alpha1 in both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapoApi {
    V1beta1,
    V1beta2,
}

impl CapoApi {
    fn version(self) -> &'static str {
        match self {
            CapoApi::V1beta1 => "v1beta1",
            CapoApi::V1beta2 => "v1beta2",
        }
    }
}

/// The objects of one CAPO cluster on the fake's pre-created network.
pub struct Env {
    pub api: CapoApi,
    pub client: Client,
    pub ns: String,
    pub servers: Api<DynamicObject>,
    pub osms: Api<DynamicObject>,
    pub machines: Api<DynamicObject>,
}

impl Env {
    pub async fn new(client: Client, ns: String, fake: &FakeOpenstack) -> Self {
        Self::at(CapoApi::V1beta1, client, ns, fake).await
    }

    pub async fn at(capo: CapoApi, client: Client, ns: String, fake: &FakeOpenstack) -> Self {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "metadata": {"name": "cloud-config"},
            "stringData": {"clouds.yaml": fake.clouds_yaml()},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("identity secret");
        let v = capo.version();
        let env = Self {
            api: capo,
            servers: api(&client, &ns, INFRA, "v1alpha1", "OpenStackServer"),
            osms: api(&client, &ns, INFRA, v, "OpenStackMachine"),
            machines: api(&client, &ns, "cluster.x-k8s.io", "v1beta2", "Machine"),
            client,
            ns,
        };
        create(
            &api(&env.client, &env.ns, "cluster.x-k8s.io", "v1beta2", "Cluster"),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": CLUSTER},
                "spec": {
                    "clusterNetwork": {"serviceDomain": "cluster.local"},
                    "infrastructureRef": {"apiGroup": INFRA, "kind": "OpenStackCluster", "name": CLUSTER},
                },
            }),
        )
        .await;
        // Existing network and subnet, no external network, no load
        // balancer, a fixed endpoint: the cluster needs no cloud writes.
        // v1beta2 spells v1beta1's disableExternalNetwork and
        // disableAPIServerFloatingIP as enable* false, and has no managed
        // load balancer unless asked for.
        let mut spec = json!({
            "identityRef": {"cloudName": "fake", "name": "cloud-config"},
            "network": {"id": NETWORK_ID},
            "subnets": [{"id": SUBNET_ID}],
            "controlPlaneEndpoint": {"host": "10.6.0.5", "port": 6443},
        });
        let layout = match capo {
            CapoApi::V1beta1 => json!({
                "disableExternalNetwork": true,
                "disableAPIServerFloatingIP": true,
                "apiServerLoadBalancer": {"enabled": false},
            }),
            CapoApi::V1beta2 => json!({
                "enableExternalNetwork": false,
                "apiServer": {"enableFloatingIP": false},
            }),
        };
        if let (Some(spec), Some(layout)) = (spec.as_object_mut(), layout.as_object()) {
            spec.extend(layout.clone());
        }
        create(
            &api(&env.client, &env.ns, INFRA, v, "OpenStackCluster"),
            json!({
                "apiVersion": format!("{INFRA}/{v}"), "kind": "OpenStackCluster",
                "metadata": {"name": CLUSTER, "labels": {CLUSTER_NAME_LABEL: CLUSTER}},
                "spec": spec,
            }),
        )
        .await;
        env
    }

    /// A worker Machine in `zone` with its OpenStackMachine and bootstrap
    /// data (in v1beta2 the flavor is a FlavorParam, not a name).
    pub async fn machine(&self, name: &str, zone: &str) {
        let flavor = match self.api {
            CapoApi::V1beta1 => json!(FLAVOR),
            CapoApi::V1beta2 => json!({"filter": {"name": FLAVOR}}),
        };
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &self.ns);
        let data: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-bootstrap")},
            "stringData": {"value": "#cloud-config\n", "format": "cloud-config"},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &data)
            .await
            .expect("bootstrap secret");
        create(
            &self.osms,
            json!({
                "apiVersion": format!("{INFRA}/{}", self.api.version()), "kind": "OpenStackMachine",
                "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: CLUSTER}},
                "spec": {"flavor": flavor, "image": {"id": IMAGE_ID}},
            }),
        )
        .await;
        create(
            &self.machines,
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: CLUSTER}},
                "spec": {
                    "clusterName": CLUSTER,
                    "failureDomain": zone,
                    "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                    "infrastructureRef": {"apiGroup": INFRA, "kind": "OpenStackMachine", "name": name},
                },
            }),
        )
        .await;
    }

    pub async fn server(&self, name: &str) -> Option<DynamicObject> {
        self.servers.get_opt(name).await.ok().flatten()
    }

    /// The OpenStackServer `name` once it is ERROR (a failed create, or
    /// Nova's own ERROR), within 120 s, while `procs` keep running.
    pub async fn server_in_error(&self, procs: &[&Supervised], name: &str) -> DynamicObject {
        wait_for(
            procs,
            Duration::from_secs(120),
            &format!("OpenStackServer {name} ERROR"),
            || async {
                let s = self.server(name).await?;
                (s.data["status"]["instanceState"] == "ERROR").then_some(s)
            },
        )
        .await
    }

    /// The Nova ID of OpenStackServer `name` once CAPO has created it and
    /// reads it BUILD (the fake's `server_build_stuck` keeps it there).
    pub async fn server_building(&self, procs: &[&Supervised], name: &str) -> String {
        let id = wait_for(
            procs,
            Duration::from_secs(120),
            &format!("OpenStackServer {name} created in Nova"),
            || async {
                let s = self.server(name).await?;
                s.data["status"]["instanceID"].as_str().map(String::from)
            },
        )
        .await;
        wait_for(
            procs,
            Duration::from_secs(30),
            &format!("{name} BUILD"),
            || async {
                let s = self.server(name).await?;
                (s.data["status"]["instanceState"] == "BUILD").then_some(())
            },
        )
        .await;
        id
    }
}

pub fn condition<'a>(o: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// The fake, a private cluster with CAPO's CRDs, both real managers and one
/// CAPO cluster's objects. Fields drop in order: the managers go before the
/// cluster they talk to.
/// Which CAPO a [`Capo`] stack runs.
#[derive(Clone, Copy, Debug)]
pub enum Release<'a> {
    /// v0.14.7 (`testenv/capo.sh`) with these extra manager flags, on
    /// Cluster API v1.12.5.
    V0_14(&'a [&'a str]),
    /// v0.15.0-beta.0 (`testenv/capo-next.sh`) on Cluster API v1.13.4.
    V0_15,
    /// main e52de58 (`testenv/capo-next.sh main`) on Cluster API v1.14.2.
    Main,
}

pub struct Capo {
    pub env: Env,
    pub capo: Supervised,
    pub capi: Supervised,
    pub fake: FakeOpenstack,
    pub cluster: TestCluster,
}

impl Capo {
    pub async fn start(prefix: &str) -> Self {
        Self::start_in_zones(prefix, &["az1", "az2"]).await
    }

    /// As [`Capo::start`], with the fake serving these availability zones.
    pub async fn start_in_zones(prefix: &str, zones: &[&str]) -> Self {
        Self::start_with(prefix, zones, &[]).await
    }

    /// As [`Capo::start_in_zones`], with these extra CAPO manager flags.
    pub async fn start_with(prefix: &str, zones: &[&str], capo_flags: &[&str]) -> Self {
        Self::start_release(prefix, zones, Release::V0_14(capo_flags)).await
    }

    /// As [`Capo::start_in_zones`] with CAPO main (e52de58, which retries
    /// an ERROR server) on the Cluster API v1.14.2 manager and the
    /// `capo-main` CRD set; its OpenStackMachines are v1beta2.
    pub async fn start_main(prefix: &str, zones: &[&str]) -> Self {
        Self::start_release(prefix, zones, Release::Main).await
    }

    /// The stack of a CAPO `release`: its CRD set, the Cluster API manager
    /// its go.mod wants, its own manager and its OpenStackMachine version.
    pub async fn start_release(prefix: &str, zones: &[&str], release: Release<'_>) -> Self {
        let fake = FakeOpenstack::start_with_zones(Duration::from_secs(2), zones).await;
        let (crds, api) = match release {
            Release::V0_14(_) => (CrdSet::Capo, CapoApi::V1beta1),
            Release::V0_15 => (CrdSet::CapoV0_15, CapoApi::V1beta2),
            Release::Main => (CrdSet::CapoMain, CapoApi::V1beta2),
        };
        let cluster = TestCluster::start_with_crds(crds, &[]);
        let client = cluster.client().await;
        let ns = namespace(&client, prefix).await;
        let (capi, capo) = match release {
            Release::V0_14(flags) => (
                start_capi_manager(&cluster, &ns).await,
                start_capo_manager_with(&cluster, &ns, flags).await,
            ),
            Release::V0_15 => (
                start_capi_manager_v1_13(&cluster, &ns).await,
                start_capo_manager_v0_15(&cluster, &ns).await,
            ),
            Release::Main => (
                start_capi_manager_v1_14(&cluster, &ns).await,
                start_capo_manager_main(&cluster, &ns).await,
            ),
        };
        let env = Env::at(api, client, ns, &fake).await;
        Self {
            env,
            capo,
            capi,
            fake,
            cluster,
        }
    }

    pub fn procs(&self) -> [&Supervised; 3] {
        [&self.fake.proc, &self.capi, &self.capo]
    }

    /// `remedy serve` on this namespace with both CAPO built-ins: one
    /// outage breaker per availability zone (the server's
    /// `spec.availabilityZone`; an OpenStackMachine has none, so its domain
    /// is `none`), opened by a single failing server, closed `cooldown`
    /// after the zone went quiet; backoff of a second or two.
    pub async fn remedy(&self, cooldown: &str) -> Remedy {
        self.remedy_with(&self.remedy_config(cooldown)).await
    }

    /// The config [`Capo::remedy`] serves.
    pub fn remedy_config(&self, cooldown: &str) -> String {
        format!(
            "namespaces: [{}]\ntick: 500ms\nleader_election: {{enabled: false}}\n\
             breaker: {{open_ratio: 0.5, close_ratio: 0.1, min_resources: 1, window: 1s, \
             cooldown: {cooldown}, domain: {{field: /spec/availabilityZone}}}}\n\
             backoff: {{base: 1s, cap: 2s}}\n\
             budget: {{refill_per_second: 5, burst: 5}}\n\
             profiles: [openstack-machine, openstack-server]\n",
            self.env.ns
        )
    }

    /// `remedy serve` with `config` (no `listen`: [`Remedy::serve`] sets
    /// it), once it watches both CAPO kinds.
    pub async fn remedy_with(&self, config: &str) -> Remedy {
        serve_watching_capo(&self.cluster, config).await
    }
}

/// `remedy serve` on `cluster` with `config`, once it watches both CAPO
/// kinds.
pub async fn serve_watching_capo(cluster: &TestCluster, config: &str) -> Remedy {
    let remedy = Remedy::serve(cluster, config);
    remedy
        .wait_watching(&["OpenStackMachine", "OpenStackServer"])
        .await;
    remedy
}
