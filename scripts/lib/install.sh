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
