#!/usr/bin/env bash
# The real Cluster API core manager as a container image, for the sidecar
# test on a real node (tests/it/node.rs): the binary testenv/capi.sh builds
# from the v1.12.5 Go module (static, CGO_ENABLED=0), put in a FROM scratch
# image as upstream lays it out (/manager, user 65532; upstream uses
# distroless/static, which no registry here can serve) and saved as an OCI
# archive for the node's containerd (`ctr images import`). Also copies the
# module's own Deployment and RBAC (config/manager, config/rbac), which the
# test deploys as clusterctl would (namespace capi-system, prefix capi-).
#
# Cached next to the binary in ~/.cache/remedy-tools/cluster-api-v1.12.5/:
# rebuilt only when the binary's sha256 changes; linked into testenv/bin/ as
# capi-manager.oci.tar, capi-manager.image (the image name) and capi-config.
# Needs podman (scripts/test installs it).
set -euo pipefail
cd "$(dirname "$0")"

CAPI_VERSION=v1.12.5
IMAGE=localhost/remedy/capi-manager:$CAPI_VERSION
cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/cluster-api-$CAPI_VERSION

bash capi.sh
bin=$dir/cluster-api
# scratch has no ld.so: refuse a binary with a program interpreter.
if readelf -lW "$bin" | grep -q 'program interpreter'; then
  echo "capi-image.sh: $bin is dynamically linked; rebuild it with CGO_ENABLED=0 (testenv/capi.sh)" >&2
  exit 1
fi

sum=$(sha256sum "$bin" | cut -d' ' -f1)
if [[ ! -s $dir/image.oci.tar || $(cat "$dir/image.sha256" 2>/dev/null) != "$sum" ]]; then
  echo "   building the image $IMAGE (FROM scratch; cached in $dir)"
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  cp "$bin" "$ctx/manager"
  printf 'FROM scratch\nCOPY manager /manager\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n' > "$ctx/Containerfile"
  podman build -q --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 -t "$IMAGE" "$ctx" >/dev/null
  podman save -q --format oci-archive -o "$dir/image.oci.tar.tmp" "$IMAGE"
  mv "$dir/image.oci.tar.tmp" "$dir/image.oci.tar"
  echo "$sum" > "$dir/image.sha256"
fi

if [[ ! -s $dir/config/manager/manager.yaml || ! -s $dir/config/rbac/role.yaml ]]; then
  mod=$(go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$dir/config.tmp" && mkdir -p "$dir/config.tmp"
  cp -r "$mod/config/manager" "$mod/config/rbac" "$dir/config.tmp/"
  chmod -R u+w "$dir/config.tmp"
  rm -rf "$dir/config" && mv "$dir/config.tmp" "$dir/config"
fi

mkdir -p bin
ln -sfn "$dir/image.oci.tar" bin/capi-manager.oci.tar
ln -sfn "$dir/config" bin/capi-config
echo "$IMAGE" > bin/capi-manager.image
