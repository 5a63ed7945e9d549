# Sourced by scripts/test and scripts/playground: installs what they need on
# a fresh machine (idempotent, quick when everything is there).

need_apt=()
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need_apt+=(prometheus-alertmanager)
# The real node of tests/it/node.rs (testenv/node.sh installs them too).
command -v containerd >/dev/null || need_apt+=(containerd)
command -v runc >/dev/null || need_apt+=(runc)
[[ -x /usr/lib/cni/bridge ]] || need_apt+=(containernetworking-plugins)
# tests/it/capi_inmemory.rs makes the RSA CA keys CAPD insists on.
command -v openssl >/dev/null || need_apt+=(openssl)
if ((${#need_apt[@]})); then
  echo "== installing Debian packages: ${need_apt[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "need root (or sudo) to apt-get install ${need_apt[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# Debian's packages may start their own daemons; everything here runs on
# its own ports, so they only cost CPU.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl stop prometheus prometheus-alertmanager prometheus-node-exporter 2>/dev/null || true
fi
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml
# scripts/check-schema.py (tests/it/schemas.rs) validates YAML against the JSON Schemas.
python3 -c 'import jsonschema' 2>/dev/null || python3 -m pip install -q jsonschema==4.26.0
command -v go >/dev/null || { echo "go is required to build the test cluster (testenv/)" >&2; exit 1; }
command -v cargo >/dev/null || { echo "cargo is required" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "kubectl (with kustomize) is required for the deploy checks" >&2; exit 1; }

# step TITLE COMMAND...: a build with its title and wall time.
step() {
  local title=$1 start
  shift
  echo "== $title"
  start=$(date +%s)
  "$@"
  echo "   ready in $(($(date +%s) - start)) s: $title"
}

# The test cluster (kube-apiserver, etcd) and Prometheus 3 / Alertmanager
# 0.3x, built from Go modules: called by the playground in turn, by
# scripts/test in its build lanes.
build_cluster() {
  step "building the test cluster (kube-apiserver, etcd) from Go modules" bash testenv/build.sh
}
build_signals() {
  step "building Prometheus 3 and Alertmanager 0.3x (with promtool, amtool) from Go modules" bash testenv/prometheus.sh
}

# The deploy tools, for scripts/test only (the playground needs neither):
# podman runs the image tests/it/image.rs checks, helm renders the chart.
# Helm 3 and Helm 4 both install the chart (tests/it/helm.rs, check-ops.sh).
# v3.21.4, not v3.22.0: the module proxy serves 3.22.0 but it is not approved
# for use here (env/packages/go-partial.tsv).
HELM3_VERSION=v3.21.4
HELM4_VERSION=v4.3.2

# runc too: Debian's default runtime, crun 1.8, refuses hosts with hybrid
# cgroups (v1 controllers plus v2), where runc works.
install_podman() {
  command -v podman >/dev/null && command -v runc >/dev/null && return 0
  echo "== installing Debian packages: podman runc"
  if [[ $(id -u) -ne 0 ]]; then
    echo "need root (or sudo) to apt-get install podman runc" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null
}

# Builds helm 3 and helm 4 from their Go modules into the tools cache
# outside the clone (about 4 min each on 2 cores, once per version), links
# them as testenv/bin/helm and testenv/bin/helm4, and exports HELM and HELM4.
install_helm() {
  local cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
  local major version dir start
  for major in 3 4; do
    version=HELM${major}_VERSION
    version=${!version}
    dir=$cache/helm-$version
    if [[ ! -x $dir/helm ]]; then
      echo "== building helm $version from Go modules (once; cached in $dir)"
      start=$(date +%s)
      mkdir -p "$dir.tmp"
      GOBIN=$dir.tmp CGO_ENABLED=0 go install -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v$major/internal/version.version=$version" \
        "helm.sh/helm/v$major/cmd/helm@$version"
      rm -rf "$dir"
      mv "$dir.tmp" "$dir"
      echo "   ready in $(($(date +%s) - start)) s"
    fi
  done
  mkdir -p testenv/bin
  ln -sfn "$cache/helm-$HELM3_VERSION/helm" testenv/bin/helm
  ln -sfn "$cache/helm-$HELM4_VERSION/helm" testenv/bin/helm4
  export HELM=$PWD/testenv/bin/helm HELM4=$PWD/testenv/bin/helm4
}
