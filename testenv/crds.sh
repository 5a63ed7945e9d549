#!/usr/bin/env bash
# Builds the CRD sets the test clusters install, from the providers' own Go
# modules (the module proxy serves their source zips, which carry the
# generated CRDs), plus the committed stand-ins in crds/ for providers the
# proxy does not serve. Output (git-ignored), one directory per set:
#   bin/crds/default/    Cluster API v1.12 (stores v1beta2): the default
#   bin/crds/capi-v1.10/ the same with Cluster API v1.10 (stores v1beta1)
# Warm runs are no-ops: a set is rebuilt only when this script or a
# stand-in is newer than its stamp.
set -euo pipefail
cd "$(dirname "$0")"

CAPI_DEFAULT=v1.12.5
CAPI_OLD=v1.10.10
CAPO=v0.14.2
CAPA=v2.13.0
XP_KUBERNETES=v1.3.1 # v1.4.x needs Go >= 1.27
PROM_OPERATOR=v0.85.0
CERT_MANAGER=v1.21.2

# module@version → the extracted module directory in the module cache.
fetch() {
  local out dir
  # Run outside testenv's module so go.mod and go.sum stay untouched.
  out=$(cd / && go mod download -json "$1") || { echo "crds.sh: go mod download $1 failed:" >&2; echo "$out" >&2; return 1; }
  dir=$(sed -n 's/^\t"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$out")
  if [[ -z $dir || ! -d $dir ]] || grep -q '"Error"' <<<"$out"; then
    echo "crds.sh: go mod download $1: $out" >&2
    return 1
  fi
  echo "$dir"
}

# build SET CAPI_VERSION
build() {
  local set=$1 capi=$2 dst=bin/crds/$1 tmp m file dir
  local stamp=$dst/.stamp
  if [[ -f $stamp ]] && [[ -z $(find crds.sh crds -newer "$stamp" -print -quit) ]]; then
    return 0
  fi
  tmp=$(mktemp -d bin/crds/.tmp.XXXXXX)
  chmod 755 "$tmp"
  # module@version  file in the module  (only the CRDs remedy or its tests use;
  # all of Cluster API's, which its real manager needs: testenv/capi.sh)
  while read -r m file; do
    dir=$(fetch "$m")
    cp "$dir/$file" "$tmp/"
    echo "$m $file" >>"$tmp/SOURCES"
  done <<EOF
sigs.k8s.io/cluster-api@$capi config/crd/bases/cluster.x-k8s.io_machines.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/cluster.x-k8s.io_clusters.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/cluster.x-k8s.io_machinesets.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/cluster.x-k8s.io_machinehealthchecks.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/cluster.x-k8s.io_machinepools.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/cluster.x-k8s.io_clusterclasses.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/cluster.x-k8s.io_machinedrainrules.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/addons.cluster.x-k8s.io_clusterresourcesets.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/addons.cluster.x-k8s.io_clusterresourcesetbindings.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/ipam.cluster.x-k8s.io_ipaddressclaims.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/ipam.cluster.x-k8s.io_ipaddresses.yaml
sigs.k8s.io/cluster-api@$capi config/crd/bases/runtime.cluster.x-k8s.io_extensionconfigs.yaml
sigs.k8s.io/cluster-api-provider-openstack@$CAPO config/crd/bases/infrastructure.cluster.x-k8s.io_openstackmachines.yaml
sigs.k8s.io/cluster-api-provider-aws/v2@$CAPA config/crd/bases/infrastructure.cluster.x-k8s.io_awsmachines.yaml
github.com/crossplane-contrib/provider-kubernetes@$XP_KUBERNETES package/crds/kubernetes.m.crossplane.io_objects.yaml
github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml
github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml
github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_alertmanagerconfigs.yaml
github.com/cert-manager/cert-manager@$CERT_MANAGER deploy/crds/cert-manager.io_certificates.yaml
github.com/cert-manager/cert-manager@$CERT_MANAGER deploy/crds/cert-manager.io_issuers.yaml
EOF
  cp crds/*.yaml "$tmp/"
  chmod u+w "$tmp"/*.yaml # the module cache is read-only
  touch "$tmp/.stamp"
  rm -rf "$dst"
  mv "$tmp" "$dst"
}

mkdir -p bin/crds
rm -rf bin/crds/.tmp.* # left by a failed run
build default "$CAPI_DEFAULT"
build capi-v1.10 "$CAPI_OLD"
