#!/usr/bin/env bash
# Builds what a real node needs, for tests/it/support/node.rs:
# - kubelet, kube-controller-manager and kube-scheduler at the apiserver's
#   version, from the same k8s.io/kubernetes module and versions as
#   build.sh (a copy of go.mod/go.sum in the cache, so testenv/go.sum and
#   build.sh's stamp stay untouched; -mod=mod only adds go.sum lines for the
#   extra packages, and the build fails if go.mod moved);
# - Debian's containerd, runc and CNI plugins (apt);
# - the pause image, from build/pause/linux/pause.c of that module, as an
#   OCI archive (no registry is reachable here, the kubelet's sandbox image
#   is imported with ctr).
# Everything is cached in ~/.cache/remedy-tools/kube-node-<version>/ outside
# the clone and linked into testenv/bin/; a warm run only checks and links.
set -euo pipefail
cd "$(dirname "$0")"

K8S_VERSION=v1.36.3
cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/kube-node-$K8S_VERSION

# The runtime. Root is needed anyway to run a node (netns, mounts).
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v ip >/dev/null || need+=(iproute2)
if ((${#need[@]})); then
  echo "   apt-get install ${need[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [[ ! -x $dir/kubelet || ! -x $dir/kube-controller-manager || ! -x $dir/kube-scheduler ]]; then
  echo "   building kubelet, kube-controller-manager, kube-scheduler $K8S_VERSION (once; cached in $dir)"
  src=$dir.src
  rm -rf "$src" && mkdir -p "$src" "$dir.tmp"
  cp go.mod go.sum "$src/"
  cp -r stub "$src/"
  cat > "$src/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"
  for cmd in kubelet kube-controller-manager kube-scheduler; do
    (cd "$src" && CGO_ENABLED=0 go build -mod=mod -pgo=off -trimpath -ldflags "$ldflags" \
      -o "$dir.tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  done
  # Same versions as the apiserver: -mod=mod may add go.sum lines only.
  if ! cmp -s go.mod "$src/go.mod"; then
    echo "node.sh: the module graph moved while building the node:" >&2
    diff go.mod "$src/go.mod" >&2 || true
    exit 1
  fi
  mkdir -p "$dir"
  for f in kubelet kube-controller-manager kube-scheduler; do mv "$dir.tmp/$f" "$dir/$f"; done
  rm -rf "$dir.tmp"
fi

# The pause image: pause.c of the same module, static, FROM scratch.
if [[ ! -s $dir/pause.oci.tar ]]; then
  echo "   building the pause image (once; cached in $dir)"
  mod=$(cd "$dir.src" 2>/dev/null && go list -mod=mod -m -f '{{.Dir}}' k8s.io/kubernetes || go mod download -json k8s.io/kubernetes@$K8S_VERSION | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  gcc -Os -Wall -static -o "$ctx/pause" "$mod/build/pause/linux/pause.c" -DVERSION="${K8S_VERSION}-remedy"
  strip "$ctx/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$ctx/Containerfile"
  podman build -q --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 -t localhost/remedy/pause:$K8S_VERSION "$ctx" >/dev/null
  podman save --format oci-archive -o "$dir/pause.oci.tar.tmp" localhost/remedy/pause:$K8S_VERSION
  mv "$dir/pause.oci.tar.tmp" "$dir/pause.oci.tar"
fi

mkdir -p bin
for f in kubelet kube-controller-manager kube-scheduler; do ln -sfn "$dir/$f" "bin/$f"; done
ln -sfn "$dir/pause.oci.tar" bin/pause.oci.tar
echo "localhost/remedy/pause:$K8S_VERSION" > bin/pause.image
