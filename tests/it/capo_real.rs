//! The real CAPO manager (v0.14.7, `testenv/capo.sh`) and the real Cluster
//! API core manager (v1.12.5) against the fake OpenStack API
//! (`testenv/cmd/fake-openstack`): the baseline remedy's CAPO changes are
//! measured against (issue #25). No remedy here: these tests pin what CAPO
//! itself does, with the call counts read from the fake's `/metrics`.
//!
//! - A Machine with its OpenStackMachine gets an OpenStackServer, created
//!   by CAPO, and the fake sees one server create; the server goes
//!   BUILD→ACTIVE and the OpenStackMachine becomes ready.
//! - With Nova answering 503 to server creates in one zone, the
//!   OpenStackServer gets `status.instanceState: ERROR` with InstanceReady
//!   False/InstanceCreateFailed after a single create call, and CAPO never
//!   calls for it again, not even once the cloud is back.

use crate::support::openstack::{
    FLAVOR, FakeOpenstack, IMAGE_ID, NETWORK_ID, SUBNET_ID, Sample, Supervised, start_capi_manager,
    start_capo_manager, sum, wait_for,
};
use crate::support::{CrdSet, TestCluster, namespace};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const CLUSTER: &str = "c1";
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
const INFRA: &str = "infrastructure.cluster.x-k8s.io";

fn api(client: &Client, ns: &str, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

async fn create(api: &Api<DynamicObject>, v: Value) {
    let name = v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let obj: DynamicObject = serde_json::from_value(v).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

/// The objects of one CAPO cluster on the fake's pre-created network.
struct Env {
    client: Client,
    ns: String,
    servers: Api<DynamicObject>,
    osms: Api<DynamicObject>,
    machines: Api<DynamicObject>,
}

impl Env {
    async fn new(client: Client, ns: String, fake: &FakeOpenstack) -> Self {
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
        let env = Self {
            servers: api(&client, &ns, INFRA, "v1alpha1", "OpenStackServer"),
            osms: api(&client, &ns, INFRA, "v1beta1", "OpenStackMachine"),
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
        create(
            &api(&env.client, &env.ns, INFRA, "v1beta1", "OpenStackCluster"),
            json!({
                "apiVersion": format!("{INFRA}/v1beta1"), "kind": "OpenStackCluster",
                "metadata": {"name": CLUSTER, "labels": {CLUSTER_NAME_LABEL: CLUSTER}},
                "spec": {
                    "identityRef": {"cloudName": "fake", "name": "cloud-config"},
                    "network": {"id": NETWORK_ID},
                    "subnets": [{"id": SUBNET_ID}],
                    "disableExternalNetwork": true,
                    "disableAPIServerFloatingIP": true,
                    "apiServerLoadBalancer": {"enabled": false},
                    "controlPlaneEndpoint": {"host": "10.6.0.5", "port": 6443},
                },
            }),
        )
        .await;
        env
    }

    /// A worker Machine in `zone` with its OpenStackMachine and bootstrap data.
    async fn machine(&self, name: &str, zone: &str) {
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
                "apiVersion": format!("{INFRA}/v1beta1"), "kind": "OpenStackMachine",
                "metadata": {"name": name, "labels": {CLUSTER_NAME_LABEL: CLUSTER}},
                "spec": {"flavor": FLAVOR, "image": {"id": IMAGE_ID}},
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

    async fn server(&self, name: &str) -> Option<DynamicObject> {
        self.servers.get_opt(name).await.ok().flatten()
    }
}

fn condition<'a>(o: &'a DynamicObject, kind: &str) -> Option<&'a Value> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capo_creates_a_server_and_a_503_on_create_is_terminal() {
    let fake = FakeOpenstack::start(Duration::from_secs(2)).await;
    let cluster = TestCluster::start_with_crds(CrdSet::Capo, &[]);
    let client = cluster.client().await;
    let ns = namespace(&client, "capo-real").await;
    let capi = start_capi_manager(&cluster, &ns).await;
    let capo = start_capo_manager(&cluster, &ns).await;
    let procs: [&Supervised; 3] = [&fake.proc, &capi, &capo];
    let env = Env::new(client, ns, &fake).await;

    // 1. A machine in az1: CAPO creates its OpenStackServer, which creates
    // one server in the fake, and reports it ACTIVE.
    let start = Instant::now();
    env.machine("m0", "az1").await;
    let m0 = wait_for(
        &procs,
        Duration::from_secs(180),
        "OpenStackServer m0 ACTIVE and ready",
        || async {
            let s = env.server("m0").await?;
            (s.data["status"]["instanceState"] == "ACTIVE" && s.data["status"]["ready"] == true)
                .then_some(s)
        },
    )
    .await;
    let active_after = start.elapsed();
    let owner = &m0.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("OpenStackMachine", "m0")
    );
    wait_for(
        &procs,
        Duration::from_secs(60),
        "OpenStackMachine m0 ready with a providerID",
        || async {
            let o = env.osms.get("m0").await.ok()?;
            (o.data["status"]["ready"] == true && o.data["spec"]["providerID"].is_string())
                .then_some(())
        },
    )
    .await;
    let after_m0 = fake.metrics().await;
    let creates = |m: &[Sample], status: &str| {
        sum(
            m,
            &[
                ("service", "compute"),
                ("resource", "servers"),
                ("method", "POST"),
                ("status", status),
            ],
        )
    };
    assert_eq!(creates(&after_m0, "202"), 1, "one server create for m0");
    let state = fake.state().await;
    assert_eq!(
        state["servers"][0]["status"], "ACTIVE",
        "the fake's server: {state}"
    );
    eprintln!(
        "m0: ACTIVE after {active_after:?}; calls: identity {}, compute {}, network {}, image {}",
        sum(&after_m0, &[("service", "identity")]),
        sum(&after_m0, &[("service", "compute")]),
        sum(&after_m0, &[("service", "network")]),
        sum(&after_m0, &[("service", "image")]),
    );

    // 2. Nova answers 503 to every server create in az2. A machine there:
    // one create call fails, and the OpenStackServer is ERROR for good.
    fake.set_faults(json!({"rules": [{
        "service": "compute", "resource": "servers", "method": "POST", "zone": "az2", "status": 503,
    }]}))
    .await;
    let before = fake.metrics().await;
    env.machine("m1", "az2").await;
    let m1 = wait_for(
        &procs,
        Duration::from_secs(120),
        "OpenStackServer m1 ERROR",
        || async {
            let s = env.server("m1").await?;
            (s.data["status"]["instanceState"] == "ERROR").then_some(s)
        },
    )
    .await;
    let ready = condition(&m1, "InstanceReady").expect("InstanceReady condition");
    assert_eq!(ready["status"], "False", "{ready}");
    assert_eq!(ready["reason"], "InstanceCreateFailed", "{ready}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("503"), "{message}");
    assert!(m1.data["status"]["instanceID"].is_null(), "{:?}", m1.data);
    let at_error = fake.metrics().await;
    let failed = creates(&at_error, "503") - creates(&before, "503");
    assert_eq!(failed, 1, "one failed create before ERROR");

    // CAPO stops calling: nothing for 60 s with the fault on, then 30 s
    // more with the cloud back.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after_outage = fake.metrics().await;
    fake.clear_faults().await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after_return = fake.metrics().await;
    for p in procs {
        p.check();
    }
    let all = |m: &[Sample]| sum(m, &[]);
    let posts = |m: &[Sample]| creates(m, "202") + creates(m, "503");
    assert_eq!(
        posts(&after_return),
        posts(&at_error),
        "CAPO created a server again for m1"
    );
    let m1 = env.server("m1").await.expect("m1 server");
    assert_eq!(
        m1.data["status"]["instanceState"], "ERROR",
        "still ERROR after the cloud's return"
    );
    let osm = env.osms.get("m1").await.expect("osm m1");
    let machine = env.machines.get("m1").await.expect("machine m1");
    let logged = capo
        .log()
        .matches("Not reconciling server in error state")
        .count();
    eprintln!(
        "m1: calls while reaching ERROR {} (server creates failed {failed}); \
         then {} in 60 s of outage, {} in 30 s after the cloud's return; \
         'Not reconciling server in error state' logged {logged} times; \
         InstanceReady message {message:?}; \
         OpenStackMachine status {}; Machine phase {}",
        all(&at_error) - all(&before),
        all(&after_outage) - all(&at_error),
        all(&after_return) - all(&after_outage),
        osm.data["status"],
        machine.data["status"]["phase"],
    );
    // What is left after ERROR are m0's own status reads (GET
    // /servers/{m0}); nothing for m1 reaches Neutron or lists servers.
    let m1_calls = |m: &[Sample]| {
        sum(m, &[("service", "network")]) + sum(m, &[("resource", "servers"), ("method", "POST")])
    };
    assert_eq!(
        m1_calls(&after_return),
        m1_calls(&at_error),
        "CAPO called the cloud for m1 after its ERROR"
    );
}

/// CAPO v0.15.0-beta.0's v1beta2 CRDs (with Cluster API v1.13.4) install
/// and serve: the cluster starts only once every CRD is Established and
/// each served version lists.
#[tokio::test]
async fn capo_v0_15_crds_install() {
    let cluster = TestCluster::start_with_crds(CrdSet::CapoV0_15, &[]);
    let client = cluster.client().await;
    let ns = namespace(&client, "capo-v015").await;
    for kind in ["OpenStackMachine", "OpenStackCluster"] {
        api(&client, &ns, INFRA, "v1beta2", kind)
            .list(&Default::default())
            .await
            .unwrap_or_else(|e| panic!("{kind} v1beta2: {e}"));
    }
}

/// The fake's faults, straight over HTTP: what the CAPO tests rely on.
#[tokio::test]
async fn the_fake_answers_faults_as_configured() {
    let fake = FakeOpenstack::start(Duration::from_millis(300)).await;
    let http = reqwest::Client::new();
    let get = |path: &str| http.get(format!("{}{path}", fake.base)).send();

    // Keystone issues a token and a catalog pointing at the fake.
    let r = http
        .post(format!("{}/identity/v3/auth/tokens", fake.base))
        .json(&json!({}))
        .send()
        .await
        .expect("token");
    assert_eq!(r.status(), 201);
    assert!(r.headers().contains_key("x-subject-token"));
    let token: Value = r.json().await.expect("json");
    assert_eq!(token["token"]["catalog"].as_array().map(Vec::len), Some(4));

    // 429 with Retry-After, once; then the call succeeds.
    fake.set_faults(json!({"rules": [{"service": "compute", "resource": "flavors", "status": 429, "retry_after": 7, "times": 1}]}))
        .await;
    let r = get("/compute/v2.1/flavors/detail").await.expect("flavors");
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    let r = get("/compute/v2.1/flavors/detail").await.expect("flavors");
    assert_eq!(r.status(), 200);

    // A slow answer.
    fake.set_faults(json!({"rules": [{"service": "image", "delay_ms": 400}]}))
        .await;
    let t = Instant::now();
    let r = get("/image/v2/images").await.expect("images");
    assert_eq!(r.status(), 200);
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );

    // Random 500s: about half of 200 calls.
    fake.set_faults(json!({"rules": [{"service": "network", "status": 500, "probability": 0.5}]}))
        .await;
    let mut failed = 0;
    for _ in 0..200 {
        let r = get("/network/v2.0/networks").await.expect("networks");
        failed += u32::from(r.status() == 500);
    }
    assert!((60..=140).contains(&failed), "{failed} of 200 failed");

    // Wrong project: everything is not found.
    fake.set_faults(json!({"rules": [], "wrong_project": true}))
        .await;
    for path in [
        "/compute/v2.1/flavors/detail",
        "/network/v2.0/networks",
        "/image/v2/images",
    ] {
        assert_eq!(get(path).await.expect(path).status(), 404, "{path}");
    }

    // Servers going to ERROR in az2 only: BUILD, then ERROR with a fault.
    fake.set_faults(json!({"rules": [], "server_error": 1.0, "server_error_zone": "az2"}))
        .await;
    let mut ids = vec![];
    for zone in ["az1", "az2"] {
        let r: Value = http
            .post(format!("{}/compute/v2.1/servers", fake.base))
            .json(&json!({"server": {"name": zone, "imageRef": IMAGE_ID, "flavorRef": "1", "availability_zone": zone}}))
            .send()
            .await
            .expect("create")
            .json()
            .await
            .expect("json");
        ids.push(r["server"]["id"].as_str().expect("id").to_string());
    }
    assert_eq!(server_status(&fake.base, &ids[0]).await, "BUILD");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(server_status(&fake.base, &ids[0]).await, "ACTIVE");
    assert_eq!(server_status(&fake.base, &ids[1]).await, "ERROR");

    // Every call above is counted.
    let m = fake.metrics().await;
    assert_eq!(sum(&m, &[("service", "compute"), ("status", "429")]), 1);
    assert_eq!(
        sum(&m, &[("service", "network"), ("status", "500")]),
        u64::from(failed)
    );
    assert_eq!(sum(&m, &[("status", "404")]), 3);
    assert_eq!(
        sum(
            &m,
            &[
                ("resource", "servers"),
                ("method", "POST"),
                ("status", "202")
            ]
        ),
        2
    );
}

async fn server_status(base: &str, id: &str) -> String {
    let v: Value = reqwest::get(format!("{base}/compute/v2.1/servers/{id}"))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    v["server"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
