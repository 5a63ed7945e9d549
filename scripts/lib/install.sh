# Sourced by scripts/test and scripts/playground: installs what they need on
# a fresh machine (idempotent, quick when everything is there).

need_apt=()
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need_apt+=(prometheus-alertmanager)
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
command -v go >/dev/null || { echo "go is required to build the test cluster (testenv/)" >&2; exit 1; }
command -v cargo >/dev/null || { echo "cargo is required" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "kubectl (with kustomize) is required for the deploy checks" >&2; exit 1; }

echo "== building the test cluster (kube-apiserver, etcd) from Go modules"
_start=$(date +%s)
bash testenv/build.sh
echo "   ready in $(($(date +%s) - _start)) s"

# The deploy tools, for scripts/test only (the playground needs neither):
# podman runs the image tests/it/image.rs checks, helm renders the chart.
HELM_VERSION=v3.22.0

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

# Builds helm from its Go module into .tools/ (about 4 min on 2 cores, once;
# a stamp keeps the version) and exports HELM.
install_helm() {
  local tools=$PWD/.tools
  if [[ ! -x $tools/helm || $(cat "$tools/helm.version" 2>/dev/null) != "$HELM_VERSION" ]]; then
    echo "== building helm $HELM_VERSION from Go modules"
    local start
    start=$(date +%s)
    mkdir -p "$tools"
    GOBIN=$tools CGO_ENABLED=0 go install \
      -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
      "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    echo "$HELM_VERSION" >"$tools/helm.version"
    echo "   ready in $(($(date +%s) - start)) s"
  fi
  export HELM=$tools/helm
}
