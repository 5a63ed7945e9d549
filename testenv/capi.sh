#!/usr/bin/env bash
# Builds the real Cluster API core manager (Machine, MachineSet,
# MachineDeployment, MachineHealthCheck and Cluster controllers) from its Go
# module and links it into testenv/bin/capi-manager. Cached outside the
# clone, one folder per version: a warm run does nothing, a cold one builds
# it once (about 6 min on 2 cores). tests/it/capi_real.rs runs it against
# the test apiserver; the CRDs it serves are the ones testenv/crds.sh
# installs from the same module version. `bash capi.sh v1.13.4` builds
# another version the same way and links it as bin/capi-manager-v1.13.4
# (tests/it/capo_v015.rs: CAPO v0.15.0-beta.0's go.mod wants v1.13.4).
set -euo pipefail
cd "$(dirname "$0")"

CAPI_DEFAULT=v1.12.5
CAPI_VERSION=${1:-$CAPI_DEFAULT}

cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/cluster-api-$CAPI_VERSION
export CGO_ENABLED=0
if [[ ! -x $dir/cluster-api ]]; then
  echo "   building the Cluster API manager $CAPI_VERSION (once; cached in $dir)"
  mkdir -p "$dir.tmp"
  src=$(go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  if [[ -f $src/core/main.go ]]; then
    # v1.14 moved the core manager to ./core and its API types to the
    # submodule sigs.k8s.io/cluster-api/api, which go.mod replaces with ./api
    # (not in the module's zip); `go install` refuses a replace. Build from a
    # copy with the submodule, at the same version, where the replace points.
    work=$(mktemp -d)
    cp -r "$src/." "$work/"
    api=$(go mod download -json "sigs.k8s.io/cluster-api/api@$CAPI_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    cp -r "$api" "$work/api"
    chmod -R u+w "$work" # the module cache is read-only
    (cd "$work" && go build -trimpath -ldflags "-s -w" -o "$dir.tmp/cluster-api" ./core)
    rm -rf "$work"
  else
    GOBIN=$dir.tmp go install -trimpath -ldflags "-s -w" "sigs.k8s.io/cluster-api@$CAPI_VERSION"
  fi
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
mkdir -p bin
if [[ $CAPI_VERSION == "$CAPI_DEFAULT" ]]; then
  ln -sfn "$dir/cluster-api" bin/capi-manager
else
  ln -sfn "$dir/cluster-api" "bin/capi-manager-$CAPI_VERSION"
fi
