#!/usr/bin/env bash
# Builds the real Cluster API Provider OpenStack manager (CAPO) from its Go
# module and links it into testenv/bin/capo-manager. `go install` of CAPO is
# refused by the module proxy (it lists no versions for the deprecation
# check), so this downloads the module, copies it to a writable temp dir
# and runs `go build .` there. Cached outside the clone, one folder per
# version: a warm run only links, a cold one builds once (about 8 min on 2
# cores, 90 MB). tests/it/capo_real.rs runs it against the fake OpenStack
# API (cmd/fake-openstack); crds.sh installs the CRDs of the same version
# in the `capo` CRD set.
set -euo pipefail
cd "$(dirname "$0")"

CAPO_VERSION=v0.14.7

cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/capo-$CAPO_VERSION
export CGO_ENABLED=0
if [[ ! -x $dir/capo-manager ]]; then
  echo "   building the CAPO manager $CAPO_VERSION (once; cached in $dir)"
  # Outside testenv's module so its go.mod and go.sum stay untouched.
  out=$(cd / && go mod download -json "sigs.k8s.io/cluster-api-provider-openstack@$CAPO_VERSION")
  src=$(sed -n 's/^\t"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$out")
  [[ -n $src && -d $src ]] || { echo "capo.sh: go mod download failed: $out" >&2; exit 1; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp -r "$src/." "$work/"
  chmod -R u+w "$work" # the module cache is read-only
  mkdir -p "$dir.tmp"
  (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$dir.tmp/capo-manager" .)
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
mkdir -p bin
ln -sfn "$dir/capo-manager" bin/capo-manager
