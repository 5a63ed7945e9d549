#!/usr/bin/env bash
# The real Prometheus Operator on the test node (tests/it/node_prometheus_operator.rs):
# the operator and its config reloader built from the operator's Go module,
# and the Prometheus 3.x testenv/prometheus.sh builds, each put in a FROM
# scratch image (quay.io's images cannot be pulled here) and saved as an OCI
# archive for the node's containerd. Also copies the module's own CRDs and
# example RBAC/Deployment (example/), which the test applies as a user would.
#
# v0.93.1 is the newest release whose three modules the Go module proxy
# serves (v0.95.x is refused with 403; v0.94.1's pkg/client is not served).
# Everything is cached in ~/.cache/remedy-tools/prometheus-operator-v0.93.1/: the binaries are built
# once, an image is rebuilt only when its binary's sha256 changes. Linked
# into testenv/bin/ as prometheus-operator/ (archives, image names, config).
# Needs podman (scripts/test installs it) and testenv/prometheus.sh's build.
set -euo pipefail
cd "$(dirname "$0")"

OPERATOR_VERSION=v0.93.1
cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/prometheus-operator-$OPERATOR_VERSION
module=github.com/prometheus-operator/prometheus-operator

bash prometheus.sh
prometheus=$(readlink -f bin/prometheus)
prometheus_version=$("$prometheus" --version 2>&1 | sed -n 's/^prometheus, version \([^ ]*\).*/\1/p')

if [[ ! -x $dir/bin/operator || ! -x $dir/bin/prometheus-config-reloader ]]; then
  echo "   building prometheus-operator and prometheus-config-reloader $OPERATOR_VERSION (once; cached in $dir)"
  # `go install mod@version` refuses a module whose go.mod has replace
  # directives; this one replaces its two submodules (pkg/apis/monitoring,
  # pkg/client, separate modules not in its zip) with ./ paths. Build from
  # a copy with both put where the replaces point.
  src=$(go mod download -json "$module@$OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  work=$(mktemp -d)
  cp -r "$src/." "$work/"
  chmod -R u+w "$work" # the module cache is read-only
  for sub in pkg/apis/monitoring pkg/client; do
    subdir=$(go mod download -json "$module/$sub@$OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    rm -rf "${work:?}/$sub" && mkdir -p "$(dirname "$work/$sub")"
    cp -r "$subdir" "$work/$sub" && chmod -R u+w "$work/$sub"
  done
  rm -rf "$dir/bin.tmp" && mkdir -p "$dir/bin.tmp"
  # Static: a scratch image has no ld.so. The version goes where the
  # operator's --version reads it.
  (cd "$work" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${OPERATOR_VERSION#v}" \
    -o "$dir/bin.tmp/" ./cmd/operator ./cmd/prometheus-config-reloader)
  rm -rf "$work"
  rm -rf "$dir/bin" && mv "$dir/bin.tmp" "$dir/bin"
fi

# image NAME BINARY ENTRY USER: a FROM scratch image with BINARY at /bin/ENTRY,
# saved to $dir/NAME.oci.tar unless the binary is unchanged since the last save.
image() {
  local name=$1 binary=$2 entry=$3 user=$4 tag=$5
  local ref=localhost/remedy/$name:$tag sum
  sum=$(sha256sum "$binary" | cut -d' ' -f1)
  if [[ ! -s $dir/$name.oci.tar || $(cat "$dir/$name.sha256" 2>/dev/null) != "$sum" ]]; then
    echo "   building the image $ref (FROM scratch; cached in $dir)"
    local ctx
    ctx=$(mktemp -d)
    cp "$binary" "$ctx/$entry"
    printf 'FROM scratch\nCOPY %s /bin/%s\nUSER %s\nENTRYPOINT ["/bin/%s"]\n' "$entry" "$entry" "$user" "$entry" >"$ctx/Containerfile"
    podman build -q --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 -t "$ref" "$ctx" >/dev/null
    podman save -q --format oci-archive -o "$dir/$name.oci.tar.tmp" "$ref"
    mv "$dir/$name.oci.tar.tmp" "$dir/$name.oci.tar"
    echo "$sum" >"$dir/$name.sha256"
    rm -rf "$ctx"
  fi
  echo "$ref" >"$dir/$name.image"
}

for b in "$dir/bin/operator" "$dir/bin/prometheus-config-reloader" "$prometheus"; do
  if readelf -lW "$b" | grep -q 'program interpreter'; then
    echo "prometheus-operator.sh: $b is dynamically linked; it must be built with CGO_ENABLED=0" >&2
    exit 1
  fi
done
# Users as upstream's images and example Deployment run them.
image prometheus-operator "$dir/bin/operator" operator 65534 "$OPERATOR_VERSION"
image prometheus-config-reloader "$dir/bin/prometheus-config-reloader" prometheus-config-reloader 65534 "$OPERATOR_VERSION"
image prometheus "$prometheus" prometheus 65534 "v$prometheus_version"

if [[ ! -s $dir/config/crds/monitoring.coreos.com_prometheuses.yaml || ! -s $dir/config/operator/prometheus-operator-deployment.yaml ]]; then
  src=$(go mod download -json "$module@$OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$dir/config.tmp" && mkdir -p "$dir/config.tmp"
  cp -r "$src/example/prometheus-operator-crd" "$dir/config.tmp/crds"
  cp -r "$src/example/rbac/prometheus-operator" "$dir/config.tmp/operator"
  cp -r "$src/example/rbac/prometheus" "$dir/config.tmp/prometheus"
  chmod -R u+w "$dir/config.tmp"
  rm -rf "$dir/config" && mv "$dir/config.tmp" "$dir/config"
fi

mkdir -p bin
ln -sfn "$dir" bin/prometheus-operator
