#!/usr/bin/env bash
# Offline checks for the operator-facing files: alert rules and their unit
# tests, the Alertmanager example, the Grafana dashboard, the generated
# PrometheusRule and every kustomization. No cluster, Prometheus or Grafana
# needed. Exits non-zero if any check fails; every check runs regardless so
# one run shows all problems.
#
# Tools: promtool and amtool (Debian: prometheus, prometheus-alertmanager),
# kubectl with kustomize v5, python3 with PyYAML. Override with PROMTOOL,
# AMTOOL, KUBECTL, PYTHON; set REMEDY to also validate the configs with the binary.
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
check "promtool check rules alerts/remedy.rules.yml" \
  "$PROMTOOL" check rules alerts/remedy.rules.yml
check "promtool test rules alerts/tests/remedy.test.yml" \
  "$PROMTOOL" test rules alerts/tests/remedy.test.yml
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
trap 'rm -f "$log" "$log.rules.yml"; rm -rf "$render_dir"' EXIT
while IFS= read -r k; do
  dir=$(dirname "$k")
  grep -q '^kind: Component' "$k" && continue
  check "kubectl kustomize $dir" \
    sh -c '"$1" kustomize "$2" >"$3"' _ "$KUBECTL" "$dir" "$render_dir/$(echo "$dir" | tr / _).yaml"
done < <(find deploy -name kustomization.yaml | sort)

# The config, container ports, mounts and Lease RBAC are written in several
# files; keep them in agreement in the rendered output of both modes.
check "rendered manifests agree with config.yaml (ports, mounts, lease, secret)" \
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

# Optional: validate both config.yaml files with the real binary when one is
# given (REMEDY=target/debug/remedy scripts/check-ops.sh); off by default so
# these checks need no Rust build.
if [[ -n ${REMEDY:-} ]]; then
  for cfg in deploy/base/config.yaml deploy/components/remedy-sidecar/config.yaml; do
    check "remedy check-config $cfg" "$REMEDY" check-config "$cfg"
  done
else
  echo "skip remedy check-config (set REMEDY to a remedy binary)"
fi

echo
if ((failed)); then
  echo "failed: ${failures[*]}"
fi
echo "check-ops: $passed passed, $failed failed"
((failed == 0))
