#!/usr/bin/env bash
# Builds the real CAPD manager (Cluster API's Docker provider, whose
# DevCluster/DevMachine with `spec.backend.inMemory` are the in-memory
# infrastructure provider: fake workload clusters, each with an apiserver
# and etcd simulated in the process) from the Go module
# sigs.k8s.io/cluster-api/test and links it into testenv/bin/capd-manager.
# Cached outside the clone like capi.sh: a warm run only links.
# tests/it/capi_inmemory.rs runs it with the real core manager against the
# `capd` CRD set (testenv/crds.sh).
set -euo pipefail
cd "$(dirname "$0")"

# The newest CAPD the proxy builds: test@v1.14.x needs packages it does not
# serve. test's go.mod replaces cluster-api with ../, which a dependent
# module ignores, so a wrapper module pins the main module itself; the
# proxy refuses cluster-api v1.13.7, v1.13.6 is the nearest it serves.
CAPD_VERSION=v1.13.7
CAPI_FOR_CAPD=v1.13.6

cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/capd-$CAPD_VERSION
export CGO_ENABLED=0
if [[ ! -x $dir/capd-manager ]]; then
  echo "   building the CAPD manager $CAPD_VERSION with the in-memory backend (once; cached in $dir)"
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp/wrapper"
  (
    cd "$dir.tmp/wrapper"
    cat >go.mod <<GOMOD
module remedy.test/capd

go 1.25.0
GOMOD
    go get "sigs.k8s.io/cluster-api/test/infrastructure/docker@$CAPD_VERSION" \
      "sigs.k8s.io/cluster-api@$CAPI_FOR_CAPD"
    go build -trimpath -ldflags "-s -w" -o ../capd-manager sigs.k8s.io/cluster-api/test/infrastructure/docker
  )
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
mkdir -p bin
ln -sfn "$dir/capd-manager" bin/capd-manager
