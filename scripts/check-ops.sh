#!/usr/bin/env bash
# Offline checks for the operator-facing files: alert rules and their unit
# tests, the Alertmanager example, the Grafana dashboard, the generated
# PrometheusRule and every kustomization. No cluster, Prometheus or Grafana
# needed. Exits non-zero if any check fails; every check runs regardless so
# one run shows all problems.
#
# Tools: promtool and amtool (testenv/prometheus.sh builds current ones;
# Debian: prometheus, prometheus-alertmanager; PROMTOOL_LEGACY: a second
# promtool that checks the rules and their unit tests too),
# kubectl with kustomize v5, python3 with PyYAML. Override with PROMTOOL,
# AMTOOL, KUBECTL, PYTHON; set REMEDY to also validate the configs with the binary,
# and HELM to also lint and render the chart (deploy/helm/remedy) and compare it
# with the kustomize base.
set -uo pipefail
cd "$(dirname "$0")/.."

PROMTOOL=${PROMTOOL:-promtool}
AMTOOL=${AMTOOL:-amtool}
KUBECTL=${KUBECTL:-kubectl}
PYTHON=${PYTHON:-python3}
export PROMTOOL

passed=0
failed=0
failures=()
log=$(mktemp)
trap 'rm -f "$log" "$log.rules.yml"' EXIT

# check NAME CMD...: run CMD quietly, show its output only when it fails.
check() {
  local name=$1
  shift
  if "$@" >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "FAIL $name"
    sed 's/^/     /' "$log"
  fi
}

missing=0
for tool in "$PROMTOOL" "$AMTOOL" "$KUBECTL" "$PYTHON"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "FAIL required tool not found: $tool" >&2
    missing=1
  fi
done
if ! "$PYTHON" -c 'import yaml' 2>/dev/null; then
  echo "FAIL $PYTHON has no PyYAML (pip install pyyaml / apt-get install python3-yaml)" >&2
  missing=1
fi
[[ $missing == 0 ]] || exit 2

# --- Prometheus rules -------------------------------------------------------
# --lint=all --lint-fatal: promtool's own rule linter (pint, the rule linter
# of the ecosystem, is not served here: testenv/linters.sh).
check "promtool check rules --lint=all --lint-fatal alerts/remedy.rules.yml" \
  "$PROMTOOL" check rules --lint=all --lint-fatal alerts/remedy.rules.yml
check "promtool test rules alerts/tests/remedy.test.yml" \
  "$PROMTOOL" test rules alerts/tests/remedy.test.yml
# Older installations: the same rules and unit tests with a second promtool
# (scripts/test sets Debian's 2.42 here and Prometheus 3's as PROMTOOL).
if [[ -n ${PROMTOOL_LEGACY:-} ]]; then
  legacy=$("$PROMTOOL_LEGACY" --version 2>&1 | head -1)
  check "$legacy: check rules alerts/remedy.rules.yml" \
    "$PROMTOOL_LEGACY" check rules alerts/remedy.rules.yml
  check "$legacy: test rules alerts/tests/remedy.test.yml" \
    "$PROMTOOL_LEGACY" test rules alerts/tests/remedy.test.yml
fi
check "gen-alerts.py --check (alerts/remedy.rules.yml rendered from its template)" \
  "$PYTHON" scripts/gen-alerts.py --check
# Another selector (mixin-style) must render rules promtool accepts.
check "gen-alerts.py --selector 'job=\"remedy\",cluster=\"eu-1\"' renders valid rules" \
  sh -c '"$1" scripts/gen-alerts.py --selector '"'"'job="remedy",cluster="eu-1"'"'"' --stdout >"$3" && "$2" check rules "$3"' \
  _ "$PYTHON" "$PROMTOOL" "$log.rules.yml"
check "gen-prometheusrule.py --check (deploy/base/prometheusrule.yaml up to date)" \
  "$PYTHON" scripts/gen-prometheusrule.py --check

# Every alert needs severity, summary, description and a runbook_url whose
# anchor is a section of docs/runbook.md (GitHub anchors: lower-cased heading).
check "every alert has severity, summary, description and a runbook section" \
  "$PYTHON" - alerts/remedy.rules.yml docs/runbook.md <<'PY'
import re, sys, yaml
rules = [r for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"] if "alert" in r]
anchors = {h.strip().lower() for h in re.findall(r"^## (.+)$", open(sys.argv[2]).read(), re.M)}
base = "https://github.com/remedy-dev/remedy/blob/main/docs/runbook.md#"
errors = []
for r in rules:
    a = r["alert"]
    if not r.get("labels", {}).get("severity"):
        errors.append(f"{a}: no labels.severity")
    ann = r.get("annotations", {})
    for k in ("summary", "description", "runbook_url"):
        if not ann.get(k):
            errors.append(f"{a}: no annotations.{k}")
    url = ann.get("runbook_url", "")
    if url != base + a.lower():
        errors.append(f"{a}: runbook_url {url!r}, want {base + a.lower()!r}")
    if a.lower() not in anchors:
        errors.append(f"{a}: no '## {a}' section in {sys.argv[2]}")
print("\n".join(errors) or f"{len(rules)} alerts ok")
sys.exit(1 if errors else 0)
PY

# --- Alertmanager -----------------------------------------------------------
check "amtool check-config deploy/alertmanager/alertmanager.yml" \
  "$AMTOOL" check-config deploy/alertmanager/alertmanager.yml
# The outage alert must reach remedy and humans; everything else only humans.
check "alertmanager routes CloudAPIDegraded to remedy,default" \
  "$AMTOOL" config routes test --config.file=deploy/alertmanager/alertmanager.yml \
  --verify.receivers=remedy,default alertname=CloudAPIDegraded kind=OpenStackMachine
check "alertmanager routes other alerts to default only" \
  "$AMTOOL" config routes test --config.file=deploy/alertmanager/alertmanager.yml \
  --verify.receivers=default alertname=RemedyDown

# The AlertmanagerConfig (Prometheus Operator) is the same route, receiver and
# inhibit rule as alertmanager.yml.
check "alertmanagerconfig.yaml matches the remedy route of alertmanager.yml" \
  "$PYTHON" - deploy/alertmanager/alertmanager.yml deploy/alertmanager/alertmanagerconfig.yaml <<'PY'
import sys, yaml
am = yaml.safe_load(open(sys.argv[1]))
amc = yaml.safe_load(open(sys.argv[2]))
assert amc["apiVersion"] == "monitoring.coreos.com/v1alpha1" and amc["kind"] == "AlertmanagerConfig"
route = next(r for r in am["route"]["routes"] if r["receiver"] == "remedy")
rcv = next(r for r in am["receivers"] if r["name"] == "remedy")["webhook_configs"][0]
spec = amc["spec"]
r = spec["route"]
errors = []
def matchers(ms):
    return sorted(f'{m["name"]}{m.get("matchType", "=")}"{m["value"]}"' for m in ms)
def want(what, have, expect):
    if have != expect:
        errors.append(f"{what}: {have!r} != alertmanager.yml's {expect!r}")
want("route matchers", matchers(r["matchers"]), sorted(route["matchers"]))
want("groupBy", r["groupBy"], route["group_by"])
for a, b in (("groupWait", "group_wait"), ("groupInterval", "group_interval"), ("repeatInterval", "repeat_interval"), ("continue", "continue")):
    want(a, r.get(a), route.get(b))
hook = next(x for x in spec["receivers"] if x["name"] == r["receiver"])["webhookConfigs"][0]
want("url", hook["url"], rcv["url"])
want("sendResolved", hook["sendResolved"], rcv["send_resolved"])
want("maxAlerts", hook["maxAlerts"], rcv["max_alerts"])
auth = hook["httpConfig"]["authorization"]
want("authorization type", auth["type"], rcv["http_config"]["authorization"]["type"])
secret = rcv["http_config"]["authorization"]["credentials_file"].split("/")[-2:]
want("token Secret/key", [auth["credentials"]["name"], auth["credentials"]["key"]], secret)
inh = am["inhibit_rules"][0]
ir = spec["inhibitRules"][0]
want("inhibit source", matchers(ir["sourceMatch"]), sorted(inh["source_matchers"]))
want("inhibit target", matchers(ir["targetMatch"]), sorted(inh["target_matchers"]))
want("inhibit equal", ir["equal"], inh["equal"])
print("\n".join(errors) or "in step")
sys.exit(1 if errors else 0)
PY

# --- Grafana dashboard --------------------------------------------------------
# --promtool also parses every panel expression as PromQL.
check "check-dashboard.py --promtool dashboards/remedy.json" \
  "$PYTHON" scripts/check-dashboard.py --promtool dashboards/remedy.json
check "gen-dashboard-manifests.py --check (deploy/grafana up to date)" \
  "$PYTHON" scripts/gen-dashboard-manifests.py --check

# --- Kustomize ----------------------------------------------------------------
# Every Kustomization under deploy/ must render; Components only render
# through an overlay that includes them.
render_dir=$(mktemp -d)
trap 'rm -f "$log" "$log".*; rm -rf "$render_dir"' EXIT
while IFS= read -r k; do
  dir=$(dirname "$k")
  grep -q '^kind: Component' "$k" && continue
  check "kubectl kustomize $dir" \
    sh -c '"$1" kustomize "$2" >"$3"' _ "$KUBECTL" "$dir" "$render_dir/$(echo "$dir" | tr / _).yaml"
done < <(find deploy -name kustomization.yaml | sort)

# The config, container ports, mounts, Lease and episode record RBAC are
# written in several files; keep them in agreement in the rendered output of
# both modes.
check "rendered manifests agree with config.yaml (ports, mounts, lease, episode record, secret)" \
  "$PYTHON" - "$render_dir/deploy_overlays_standalone.yaml" "$render_dir/deploy_overlays_sidecar.yaml" <<'PY'
import sys, yaml

def load(path):
    try:
        docs = [d for d in yaml.safe_load_all(open(path)) if d]
    except OSError:
        docs = []
    if not docs:
        sys.exit(f"{path}: nothing rendered (see the kustomize failure above)")
    return docs

def one(docs, kind, **meta):
    found = [d for d in docs if d["kind"] == kind and all(d["metadata"].get(k) == v for k, v in meta.items())]
    assert len(found) == 1, f"want one {kind} {meta}, found {len(found)}"
    return found[0]

errors = []
configs = {}
for path, deploy, container in ((sys.argv[1], "remedy", "remedy"), (sys.argv[2], "capo-controller-manager", "remedy")):
    docs = load(path)
    d = one(docs, "Deployment", name=deploy)
    pod = d["spec"]["template"]["spec"]
    c = next(c for c in pod["containers"] if c["name"] == container)
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    cm_name = vols[mounts["/etc/remedy"]]["configMap"]["name"]
    cm = one(docs, "ConfigMap", name=cm_name, namespace=d["metadata"]["namespace"])
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    configs[path] = cfg
    where = f"{path.rsplit('/', 1)[-1]}:"
    port = int(cfg["listen"].rsplit(":", 1)[1])
    if port not in [p["containerPort"] for p in c.get("ports", [])]:
        errors.append(f"{where} listen port {port} is not a containerPort of {container}")
    if "--config" not in c["args"] or c["args"][c["args"].index("--config") + 1] != "/etc/remedy/config.yaml":
        errors.append(f"{where} container args do not point --config at /etc/remedy/config.yaml")
    token_dir = cfg["webhook"]["token_file"].rsplit("/", 1)[0]
    secret = vols.get(mounts.get(token_dir), {}).get("secret", {})
    if secret.get("secretName") != "remedy-webhook-token":
        errors.append(f"{where} webhook.token_file dir {token_dir} is not the remedy-webhook-token mount")
    le = cfg["leader_election"]
    role = one(docs, "Role", name="remedy-leader-election")
    if role["metadata"]["namespace"] != le["namespace"]:
        errors.append(f"{where} lease namespace {le['namespace']} != Role namespace {role['metadata']['namespace']}")
    names = [n for r in role["rules"] for n in r.get("resourceNames", [])]
    if le["lease_name"] not in names:
        errors.append(f"{where} lease {le['lease_name']} not in Role resourceNames {names}")
    # Every replica records webhooks in the episode record ConfigMap:
    # get/update/patch on that name, create (not limitable by name).
    record = le.get("episode_record", "remedy-episodes")
    def grants(verb, name=None):
        return any(r.get("apiGroups") == [""] and "configmaps" in r.get("resources", [])
                   and verb in r.get("verbs", []) and (name is None or name in r.get("resourceNames", []))
                   and (name is not None or not r.get("resourceNames"))
                   for r in role["rules"])
    for verb in ("get", "update", "patch"):
        if not grants(verb, record):
            errors.append(f"{where} Role does not grant {verb} on ConfigMap {record} (leader_election.episode_record)")
    if not grants("create"):
        errors.append(f"{where} Role does not grant create on configmaps (episode record)")
    for r in role["rules"]:
        if "configmaps" in r.get("resources", []) and set(r["verbs"]) - {"create"} and record not in r.get("resourceNames", []):
            errors.append(f"{where} Role grants {r['verbs']} on configmaps beyond the episode record: {r}")
    # The admission policy checks remedy's writes field by field; its writes
    # to the episode record are data, which it must leave alone.
    for vap in (x for x in docs if x["kind"] == "ValidatingAdmissionPolicy"):
        excl = vap["spec"]["matchConstraints"].get("excludeResourceRules", [])
        if not any(r.get("apiGroups") == [""] and r.get("resources") == ["configmaps"]
                   and r.get("resourceNames") == [record] and "UPDATE" in r.get("operations", []) for r in excl):
            errors.append(f"{where} admission policy {vap['metadata']['name']} does not exclude UPDATEs of ConfigMap {record}")
    if deploy != "remedy" and any(x["kind"] == "PodDisruptionBudget" for x in docs):
        errors.append(f"{where} a PodDisruptionBudget is left over from the standalone base")
    sa = pod.get("serviceAccountName")
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        b = one(docs, kind, name="remedy" if kind == "ClusterRoleBinding" else "remedy-leader-election")
        subj = [(s["namespace"], s["name"]) for s in b["subjects"]]
        if (d["metadata"]["namespace"], sa) not in subj:
            errors.append(f"{where} {kind} does not bind the pod's ServiceAccount {sa}: {subj}")

# Sidecar config may differ from the standalone one only in `listen`.
a, b = (dict(c) for c in configs.values())
a.pop("listen"); b.pop("listen")
if a != b:
    errors.append("sidecar config.yaml differs from deploy/base/config.yaml beyond `listen`")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

# Standalone: highly available, two replicas with leader election (any
# replica accepts webhooks and records them in the episode record for the
# leader), rolled without going below two ready pods, spread over nodes, one
# eviction at a time; the Service reaches every ready replica. The
# NetworkPolicy opens the container's port to the namespace the signals URLs
# point at and lets remedy reach those ports.
check "standalone: 2 replicas, RollingUpdate, anti-affinity, PDB; NetworkPolicy matches the port and signals" \
  "$PYTHON" - "$render_dir/deploy_overlays_standalone.yaml" <<'PY'
import sys, yaml
from urllib.parse import urlsplit
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
def one(kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"want one {kind} {name}, found {len(found)}"
    return found[0]
errors = []
d = one("Deployment", "remedy")
pod = d["spec"]["template"]
if d["spec"].get("replicas") != 2:
    errors.append(f"replicas {d['spec'].get('replicas')}, want 2")
strategy = d["spec"].get("strategy", {})
if strategy != {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}:
    errors.append(f"strategy {strategy}, want RollingUpdate with maxSurge 1, maxUnavailable 0")
own = d["spec"]["selector"]["matchLabels"]
if any(pod["metadata"]["labels"].get(k) != v for k, v in own.items()):
    errors.append(f"Deployment selector {own} does not select its pods")
anti = pod["spec"].get("affinity", {}).get("podAntiAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])
if not any(t.get("weight") == 100 and t["podAffinityTerm"].get("topologyKey") == "kubernetes.io/hostname"
           and t["podAffinityTerm"].get("labelSelector") == {"matchLabels": own} for t in anti):
    errors.append(f"no preferred pod anti-affinity (weight 100, kubernetes.io/hostname, {own}): {anti}")
pdb = one("PodDisruptionBudget", "remedy")
if pdb["apiVersion"] != "policy/v1" or pdb["spec"].get("maxUnavailable") != 1 or "minAvailable" in pdb["spec"]:
    errors.append(f"PodDisruptionBudget {pdb['apiVersion']} {pdb['spec']}, want policy/v1 maxUnavailable: 1")
if pdb["spec"]["selector"] != {"matchLabels": own}:
    errors.append(f"PodDisruptionBudget selector {pdb['spec']['selector']} is not the Deployment's {own}")
svc = one("Service", "remedy")["spec"]["selector"]
if any(pod["metadata"]["labels"].get(k) != v for k, v in svc.items()) or set(svc) - set(own):
    errors.append(f"Service selector {svc} must select every remedy pod (the Deployment's labels {own} only)")
le = yaml.safe_load(one("ConfigMap", pod["spec"]["volumes"][0]["configMap"]["name"])["data"]["config.yaml"])["leader_election"]
if not le.get("enabled"):
    errors.append("two replicas without leader_election.enabled: both would write")
c = next(c for c in pod["spec"]["containers"] if c["name"] == "remedy")
cm = one("ConfigMap", pod["spec"]["volumes"][0]["configMap"]["name"])
cfg = yaml.safe_load(cm["data"]["config.yaml"])
np = one("NetworkPolicy", "remedy")
sel = np["spec"]["podSelector"]["matchLabels"]
if any(pod["metadata"]["labels"].get(k) != v for k, v in sel.items()):
    errors.append(f"NetworkPolicy podSelector {sel} does not select the pod")
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
listen = int(cfg["listen"].rsplit(":", 1)[1])
for rule in np["spec"]["ingress"]:
    for p in rule["ports"]:
        if ports.get(p["port"], p["port"]) != listen:
            errors.append(f"ingress port {p['port']} is not the listen port {listen}")
egress = [(r.get("to"), {p["port"] for p in r["ports"]}) for r in np["spec"]["egress"]]
for key in ("prometheus_url", "alertmanager_url"):
    u = urlsplit(cfg["signals"][key])
    host = u.hostname.split(".")
    ns = host[1] if len(host) > 2 else None
    ok = any(u.port in ps and (to is None or any(
        t.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") == ns for t in to))
        for to, ps in egress)
    if not ok:
        errors.append(f"no egress rule to {key} {u.geturl()} (namespace {ns}, port {u.port})")
ingress_ns = {t["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for r in np["spec"]["ingress"] for t in r["from"]}
sig_ns = {urlsplit(cfg["signals"][k]).hostname.split(".")[1] for k in ("prometheus_url", "alertmanager_url")}
if ingress_ns != sig_ns:
    errors.append(f"ingress from {ingress_ns}, but Prometheus/Alertmanager are in {sig_ns}")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

# Without the operator's CRDs nothing of monitoring.coreos.com may remain.
check "standalone-no-operator: no ServiceMonitor or PrometheusRule, the rest as standalone" \
  "$PYTHON" - "$render_dir/deploy_overlays_standalone.yaml" "$render_dir/deploy_overlays_standalone-no-operator.yaml" <<'PY'
import sys, yaml
full, cut = ([d for d in yaml.safe_load_all(open(p)) if d] for p in sys.argv[1:3])
key = lambda d: (d["apiVersion"], d["kind"], d["metadata"]["name"])
gone = sorted(set(map(key, full)) - set(map(key, cut)))
want = [("monitoring.coreos.com/v1", "PrometheusRule", "remedy"), ("monitoring.coreos.com/v1", "ServiceMonitor", "remedy")]
if gone != want or len(cut) != len(full) - 2:
    sys.exit(f"dropped {gone}, want exactly {want}")
print("ok")
PY

# HTTPS (deploy/components/tls): the certificate cert-manager issues, the
# files remedy reads, the probes and the ServiceMonitor must name each other.
check "standalone-tls: certificate, mount, probes and ServiceMonitor agree" \
  "$PYTHON" - "$render_dir/deploy_overlays_standalone-tls.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
def one(kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"want one {kind} {name}, found {len(found)}"
    return found[0]
errors = []
d = one("Deployment", "remedy")
ns = d["metadata"]["namespace"]
pod = d["spec"]["template"]["spec"]
c = next(c for c in pod["containers"] if c["name"] == "remedy")
env = {e["name"]: e.get("value") for e in c.get("env", [])}
vols = {v["name"]: v for v in pod.get("volumes", [])}
mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
cert = one("Certificate", "remedy-tls")
for var, file in (("REMEDY_TLS_CERT_FILE", "tls.crt"), ("REMEDY_TLS_KEY_FILE", "tls.key")):
    path = env.get(var) or ""
    folder, _, base = path.rpartition("/")
    secret = vols.get(mounts.get(folder), {}).get("secret", {}).get("secretName")
    if base != file or secret != cert["spec"]["secretName"]:
        errors.append(f"{var}={path!r} is not {file} of the mounted Secret {cert['spec']['secretName']}")
for probe in ("livenessProbe", "readinessProbe"):
    if c[probe]["httpGet"].get("scheme") != "HTTPS":
        errors.append(f"{probe} is not HTTPS")
ep = one("ServiceMonitor", "remedy")["spec"]["endpoints"][0]
tls = ep.get("tlsConfig", {})
svc = one("Service", "remedy")
if ep.get("scheme") != "https":
    errors.append("ServiceMonitor does not scrape https")
if tls.get("ca", {}).get("secret") != {"name": cert["spec"]["secretName"], "key": "ca.crt"}:
    errors.append(f"ServiceMonitor CA {tls.get('ca')} is not ca.crt of {cert['spec']['secretName']}")
want = f"{svc['metadata']['name']}.{ns}.svc"
if tls.get("serverName") != want or want not in cert["spec"]["dnsNames"]:
    errors.append(f"serverName {tls.get('serverName')} != {want}, or not in dnsNames {cert['spec']['dnsNames']}")
for cr in (d for d in docs if d["kind"] == "Certificate"):
    ref = cr["spec"]["issuerRef"]
    one(ref["kind"], ref["name"])
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

# Events only where remedy watches: one events RoleBinding per namespace of
# the overlay's config, and its config otherwise the base's.
check "standalone-namespaced: an events RoleBinding per configured namespace" \
  "$PYTHON" - "$render_dir/deploy_overlays_standalone-namespaced.yaml" \
  deploy/base/config.yaml deploy/overlays/standalone-namespaced/config.yaml <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
base, mine = (yaml.safe_load(open(p)) for p in sys.argv[2:4])
errors = []
want = set(mine["namespaces"])
if not want:
    errors.append("namespaces: is empty (all): use the base's cluster-wide events rule")
got = {d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding"
       and d["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "remedy-events"}}
if got != want:
    errors.append(f"events RoleBindings in {sorted(got)}, config namespaces {sorted(want)}")
for d in docs:
    if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "remedy":
        if any("events" in r.get("resources", []) for r in d["rules"]):
            errors.append("ClusterRole remedy still grants events cluster-wide")
if {k: v for k, v in base.items() if k != "namespaces"} != {k: v for k, v in mine.items() if k != "namespaces"}:
    errors.append("overlays/standalone-namespaced/config.yaml differs from the base's beyond namespaces:")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY

# The admission policy must let remedy write what the built-in profiles
# write: their pause annotations and the status fields they clear or reset.
REMEDY_BIN=${REMEDY:-target/debug/remedy}
if [[ -x $REMEDY_BIN ]]; then
  check "admission policy covers the built-in profiles' pause keys and status fields" \
    "$PYTHON" - deploy/components/admission-policy/policy.yaml <("$REMEDY_BIN" profiles) <<'PY'
import ast, sys, yaml
profiles = yaml.safe_load(open(sys.argv[2]))
if isinstance(profiles, dict):
    profiles = profiles.get("profiles", list(profiles.values()))
policy = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ValidatingAdmissionPolicy")
var = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
# The lists are CEL list/map literals of strings and ints, which Python reads too.
pause = set(ast.literal_eval(var["pauseAnnotations"]))
clearable = set(ast.literal_eval(var["baseClearableStatus"]))
by_resource = ast.literal_eval(var["clearableByResource"])
resettable = ast.literal_eval(var["resettableStatus"])
nested = {"/status/deprecated/v1beta1/failureReason", "/status/deprecated/v1beta1/failureMessage"}
skip = ast.literal_eval(var["skipKey"])
errors = []
for p in profiles:
    hold = p.get("hold") or {}
    if hold.get("annotation") and hold["annotation"] not in pause:
        errors.append(f"{p['name']}: pause annotation {hold['annotation']} not in pauseAnnotations")
    if hold.get("field") and not (hold["field"] == "/spec/paused" and p["kind"] == "Cluster"):
        errors.append(f"{p['name']}: hold field {hold['field']}: the policy allows only Cluster /spec/paused")
    rem = p.get("remediation") or {}
    s = rem.get("skip_remediation_annotation")
    if s and s != skip:
        errors.append(f"{p['name']}: skip-remediation {s} is not skipKey {skip}")
    plural = p.get("plural") or p["kind"].lower() + "s"
    allowed = clearable | set(by_resource.get(plural, []))
    for path in rem.get("clear_status", []):
        top = path.split("/")[2]
        if path not in nested and not (path.count("/") == 2 and top in allowed):
            errors.append(f"{p['name']}: clear_status {path} not allowed by the policy")
    for r in rem.get("reset_status", []):
        top = r["path"].split("/")[2]
        if r["path"].count("/") != 2 or resettable.get(top) != r["value"]:
            errors.append(f"{p['name']}: reset_status {r} not in resettableStatus")
if len(profiles) < 6:
    errors.append(f"only {len(profiles)} profiles read from `remedy profiles`")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
else
  echo "skip admission policy vs profiles (build target/debug/remedy or set REMEDY)"
fi

# --- Helm chart ---------------------------------------------------------------
check "the chart's admission policy is deploy/components/admission-policy's" \
  cmp deploy/components/admission-policy/policy.yaml deploy/helm/remedy/files/admission-policy.yaml

# Optional (HELM=path, scripts/test sets it): lint and render the chart with
# its defaults and with every switch flipped, and check that the defaults
# render what deploy/overlays/standalone does: RBAC rules, container args,
# security, probes, replicas, strategy, anti-affinity, PodDisruptionBudget,
# config, NetworkPolicy, ServiceMonitor and the PrometheusRule's rules
# (escaped `{{ }}` included).
chart=deploy/helm/remedy
if [[ -n ${HELM:-} ]]; then
  all_on=(--set tls.enabled=true --set tls.certManager.enabled=true
    --set serviceMonitor.labels.release=kube-prometheus-stack
    --set prometheusRule.labels.release=kube-prometheus-stack
    --set webhookToken.existingSecret=my-token --set replicas=3
    --set podAntiAffinity=hard --set config.leader_election.episode_record=my-episodes)
  # Without leader election every replica would write: one, replaced.
  all_off=(--set serviceMonitor.enabled=false --set prometheusRule.enabled=false
    --set networkPolicy.enabled=false --set config.leader_election.enabled=false
    --set admissionPolicy.enabled=false --set replicas=1
    --set podDisruptionBudget.enabled=false --set podAntiAffinity=none)
  check "helm lint $chart" "$HELM" lint --strict "$chart"
  # Helm 4 lints too (HELM4, scripts/test sets it), with the same switches.
  if [[ -n ${HELM4:-} ]]; then
    check "helm 4 lint $chart" "$HELM4" lint --strict "$chart"
    check "helm 4 lint $chart (switches flipped)" "$HELM4" lint --strict "$chart" "${all_on[@]}"
    check "helm 4 lint $chart (switches off)" "$HELM4" lint --strict "$chart" "${all_off[@]}"
  fi
  check "helm lint $chart (TLS, labels, existing Secret, 3 replicas, hard anti-affinity, episode record)" "$HELM" lint --strict "$chart" "${all_on[@]}"
  check "helm lint $chart (operator objects, NetworkPolicy, PDB, leader election off, 1 replica)" "$HELM" lint --strict "$chart" "${all_off[@]}"
  check "helm template $chart refuses 2 replicas without leader election" \
    sh -c '! "$1" template remedy "$2" -n remedy-system --set config.leader_election.enabled=false >/dev/null 2>&1' _ "$HELM" "$chart"
  check "helm template $chart" \
    sh -c '"$1" template remedy "$2" -n remedy-system >"$3"' _ "$HELM" "$chart" "$render_dir/helm.yaml"
  check "helm template $chart (switches flipped)" \
    sh -c 'h=$1 c=$2 o=$3; shift 3; "$h" template remedy "$c" -n remedy-system "$@" >"$o"' \
    _ "$HELM" "$chart" "$render_dir/helm-on.yaml" "${all_on[@]}"
  check "helm template $chart (switches off)" \
    sh -c 'h=$1 c=$2 o=$3; shift 3; "$h" template remedy "$c" -n remedy-system "$@" >"$o"' \
    _ "$HELM" "$chart" "$render_dir/helm-off.yaml" "${all_off[@]}"
  check "helm chart renders what kustomize renders (RBAC, args, HA, config, policy, monitoring)" \
    "$PYTHON" - "$render_dir/deploy_overlays_standalone.yaml" "$render_dir/helm.yaml" \
    "$render_dir/helm-on.yaml" "$render_dir/helm-off.yaml" <<'PY'
import sys, yaml
def load(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    if not docs:
        sys.exit(f"{path}: nothing rendered")
    return docs
k, h, on, off = (load(p) for p in sys.argv[1:5])
def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"want one {kind}, found {len(found)}"
    return found[0]
def container(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
errors = []
def same(what, a, b):
    if a != b:
        errors.append(f"{what}:\n  kustomize {a!r}\n  helm      {b!r}")
# The chart leaves the namespace to `helm install --create-namespace` and
# creates the token Secret, which kustomize leaves to the user.
# The chart ships the CRDs in crds/ (helm template leaves them out; the unit
# test crds_match_the_checked_in_yaml keeps both copies equal to the types).
same("kinds", sorted(d["kind"] for d in k if d["kind"] not in ("Namespace", "CustomResourceDefinition")), sorted(d["kind"] for d in h if d["kind"] != "Secret"))
# The ClusterRoles, by what they are for: the chart prefixes the release's name.
def clusterroles(docs, prefix):
    return {d["metadata"]["name"].removeprefix(prefix): (d["rules"], d["metadata"]["labels"].get("cluster.x-k8s.io/aggregate-to-manager")) for d in docs if d["kind"] == "ClusterRole"}
same("ClusterRole rules", clusterroles(k, "remedy"), clusterroles(h, "remedy"))
# The Roles (leader election, pause switch), matched by what they are for:
# the chart prefixes the release's name.
def roles(docs, prefix):
    return {d["metadata"]["name"].removeprefix(prefix): d["rules"] for d in docs if d["kind"] == "Role"}
same("Role rules", roles(k, "remedy-"), roles(h, "remedy-"))
kd, hd = one(k, "Deployment"), one(h, "Deployment")
kc, hc = container(k), container(h)
for key in ("args", "ports", "securityContext", "resources", "env"):
    same(f"container {key}", kc.get(key), hc.get(key))
for probe in ("livenessProbe", "readinessProbe"):
    a, b = dict(kc[probe]), dict(hc[probe])
    a["httpGet"] = {**a["httpGet"], "scheme": a["httpGet"].get("scheme", "HTTP")}
    same(probe, a, b)
same("pod securityContext", kd["spec"]["template"]["spec"]["securityContext"], hd["spec"]["template"]["spec"]["securityContext"])
same("replicas, strategy", (kd["spec"]["replicas"], kd["spec"]["strategy"]), (hd["spec"]["replicas"], hd["spec"]["strategy"]))
# Anti-affinity and the PDB select each install's own pod labels (the chart
# adds app.kubernetes.io/instance); otherwise equal.
def unlabel(v, sel):
    if isinstance(v, dict):
        return {key: ("<own pods>" if key == "labelSelector" and x == {"matchLabels": sel} else unlabel(x, sel)) for key, x in v.items()}
    if isinstance(v, list):
        return [unlabel(x, sel) for x in v]
    return v
ksel, hsel = kd["spec"]["selector"]["matchLabels"], hd["spec"]["selector"]["matchLabels"]
same("pod affinity", unlabel(kd["spec"]["template"]["spec"].get("affinity"), ksel), unlabel(hd["spec"]["template"]["spec"].get("affinity"), hsel))
kp, hp = one(k, "PodDisruptionBudget"), one(h, "PodDisruptionBudget")
same("PodDisruptionBudget", (kp["apiVersion"], {**kp["spec"], "selector": kp["spec"]["selector"] == {"matchLabels": ksel}}),
     (hp["apiVersion"], {**hp["spec"], "selector": hp["spec"]["selector"] == {"matchLabels": hsel}}))
same("Service selects the Deployment's pods", one(k, "Service")["spec"]["selector"] == ksel, one(h, "Service")["spec"]["selector"] == hsel)
same("mount paths", sorted(m["mountPath"] for m in kc["volumeMounts"]), sorted(m["mountPath"] for m in hc["volumeMounts"]))
cfg = lambda docs: yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])
same("config.yaml", cfg(k), cfg(h))
kn, hn = one(k, "NetworkPolicy")["spec"], one(h, "NetworkPolicy")["spec"]
same("NetworkPolicy ingress, egress", (kn["ingress"], kn["egress"], kn["policyTypes"]), (hn["ingress"], hn["egress"], hn["policyTypes"]))
same("ServiceMonitor endpoints", one(k, "ServiceMonitor")["spec"]["endpoints"], one(h, "ServiceMonitor")["spec"]["endpoints"])
same("PrometheusRule groups", one(k, "PrometheusRule")["spec"], one(h, "PrometheusRule")["spec"])
# kustomize re-folds the policy's multi-line CEL; whitespace means nothing there.
def squash(v):
    if isinstance(v, str):
        return " ".join(v.split())
    if isinstance(v, list):
        return [squash(x) for x in v]
    if isinstance(v, dict):
        return {key: squash(x) for key, x in v.items()}
    return v
for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
    same(f"{kind} spec", squash(one(k, kind)["spec"]), squash(one(h, kind)["spec"]))
secret = one(h, "Secret")
if len(str(secret["data"]["token"])) < 64:
    errors.append("the generated token Secret is shorter than 48 bytes")
# Switches on: TLS as components/tls does it, labels, the named Secret, RollingUpdate for 2 replicas.
c = container(on)
env = {e["name"]: e.get("value") for e in c["env"]}
if not env.get("REMEDY_TLS_CERT_FILE") or c["readinessProbe"]["httpGet"]["scheme"] != "HTTPS":
    errors.append("tls.enabled: no TLS env or HTTPS probes")
if one(on, "ServiceMonitor")["spec"]["endpoints"][0].get("scheme") != "https":
    errors.append("tls.enabled: the ServiceMonitor does not scrape https")
one(on, "Certificate")
for kind in ("ServiceMonitor", "PrometheusRule"):
    if one(on, kind)["metadata"]["labels"].get("release") != "kube-prometheus-stack":
        errors.append(f"{kind}: extra label missing")
if any(d["kind"] == "Secret" for d in on):
    errors.append("existingSecret set, yet the chart creates a Secret")
vols = one(on, "Deployment")["spec"]["template"]["spec"]["volumes"]
if not any(v.get("secret", {}).get("secretName") == "my-token" for v in vols):
    errors.append("existingSecret is not mounted")
d = one(on, "Deployment")
if d["spec"]["replicas"] != 3 or d["spec"]["strategy"]["type"] != "RollingUpdate":
    errors.append(f"replicas=3: replicas {d['spec']['replicas']}, strategy {d['spec']['strategy']}")
sel = d["spec"]["selector"]["matchLabels"]
req = d["spec"]["template"]["spec"].get("affinity", {}).get("podAntiAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
if req != [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": sel}}]:
    errors.append(f"podAntiAffinity=hard: required anti-affinity {req}")
one(on, "PodDisruptionBudget")
# A renamed episode record: the Role and the admission policy follow it.
rules = next(d for d in on if d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader-election"))["rules"]
if not any(r.get("resources") == ["configmaps"] and r.get("resourceNames") == ["my-episodes"]
           and r.get("verbs") == ["get", "update", "patch"] for r in rules):
    errors.append(f"episode_record=my-episodes: not the Role's ConfigMap resourceNames: {rules}")
excl = one(on, "ValidatingAdmissionPolicy")["spec"]["matchConstraints"]["excludeResourceRules"]
if not any(r.get("resources") == ["configmaps"] and r.get("resourceNames") == ["my-episodes"] for r in excl):
    errors.append(f"episode_record=my-episodes: not excluded from the admission policy: {excl}")
if cfg(on)["leader_election"].get("episode_record") != "my-episodes":
    errors.append("episode_record=my-episodes: not in the ConfigMap's config.yaml")
# Switches off.
# The pause switch does not depend on leader election: its Role stays.
if not any(d["kind"] == "Role" and d["metadata"]["name"].endswith("-pause-switch") for d in off):
    errors.append("leader election off: the pause switch Role is gone")
gone = {d["kind"] for d in off if not d["metadata"]["name"].endswith("-pause-switch")} & {"ServiceMonitor", "PrometheusRule", "NetworkPolicy", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "PodDisruptionBudget"}
if gone:
    errors.append(f"switched off, still rendered: {sorted(gone)}")
d = one(off, "Deployment")
if d["spec"]["replicas"] != 1 or d["spec"]["strategy"] != {"type": "Recreate"}:
    errors.append(f"leader election off: want 1 replica, Recreate; got {d['spec']['replicas']}, {d['spec']['strategy']}")
if "affinity" in d["spec"]["template"]["spec"]:
    errors.append("podAntiAffinity=none: the pod still has an affinity")
print("\n".join(errors) or "in step")
sys.exit(1 if errors else 0)
PY
else
  echo "skip helm lint/template (set HELM to a helm binary)"
fi

# --- kubeconform ---------------------------------------------------------------
# Every rendered manifest (each overlay, the chart with its switches) against
# the schemas of the Kubernetes release the test cluster runs and of the CRDs
# it installs, strictly: an unknown field or a kind without a schema is a
# finding. KUBECONFORM and KUBE_SCHEMAS come from testenv/linters.sh
# (scripts/test sets them).
if [[ -n ${KUBECONFORM:-} ]]; then
  check "kubeconform -strict ($(ls "$render_dir" | wc -l) rendered manifests, schemas of Kubernetes $(basename "$(go -C testenv list -m -f '{{.Dir}}' k8s.io/kubernetes 2>/dev/null || echo unknown)"))" \
    "$KUBECONFORM" -strict -summary -output text \
    -schema-location "$KUBE_SCHEMAS/{{ .ResourceKind }}_{{ .Group }}_{{ .ResourceAPIVersion }}.json" \
    "$render_dir"
  # The check can fail: a misspelt field and a kind without a schema are findings.
  printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicaz: 1}\n---\napiVersion: example.com/v1\nkind: Unknown\nmetadata: {name: y}\n' >"$log.bad.yaml"
  check "kubeconform -strict refuses a misspelt field and an unknown kind" \
    sh -c '! "$1" -strict -output text -schema-location "$2/{{ .ResourceKind }}_{{ .Group }}_{{ .ResourceAPIVersion }}.json" "$3" >"$3.out" 2>&1 &&
      grep -q "additional properties .replicaz. not allowed" "$3.out" && grep -q "could not find schema for Unknown" "$3.out" || { cat "$3.out"; exit 1; }' \
    _ "$KUBECONFORM" "$KUBE_SCHEMAS" "$log.bad.yaml"
else
  echo "skip kubeconform (set KUBECONFORM and KUBE_SCHEMAS, see testenv/linters.sh)"
fi

# Optional: validate both config.yaml files with the real binary when one is
# given (REMEDY=target/debug/remedy scripts/check-ops.sh); off by default so
# these checks need no Rust build.
if [[ -n ${REMEDY:-} ]]; then
  for cfg in deploy/base/config.yaml deploy/components/remedy-sidecar/config.yaml; do
    check "remedy check-config $cfg" "$REMEDY" check-config "$cfg"
  done
  # `cargo build` leaves the test faults out (feature test-faults, only
  # `cargo test` turns it on: src/daemon/fault.rs); scripts/image checks the image's.
  check "no test faults in $REMEDY" bash -c '! grep -q REMEDY_TEST_FAULT "$0"' "$REMEDY"
  # The config the chart writes into its ConfigMap.
  if [[ -s $render_dir/helm.yaml ]]; then
    "$PYTHON" -c 'import sys, yaml
cm = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap")
sys.stdout.write(cm["data"]["config.yaml"])' "$render_dir/helm.yaml" >"$render_dir/helm-config.yaml"
    check "remedy check-config (the Helm chart's ConfigMap)" "$REMEDY" check-config "$render_dir/helm-config.yaml"
  fi
else
  echo "skip remedy check-config (set REMEDY to a remedy binary)"
fi

echo
if ((failed)); then
  echo "failed: ${failures[*]}"
fi
echo "check-ops: $passed passed, $failed failed"
((failed == 0))
