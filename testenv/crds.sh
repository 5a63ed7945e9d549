#!/usr/bin/env bash
# Builds the CRD sets the test clusters install, from the providers' own Go
# modules (the module proxy serves their source zips, which carry the
# generated CRDs), plus the committed stand-ins in crds/ for providers the
# proxy does not serve. Output (git-ignored), one directory per set:
#   bin/crds/default/    Cluster API v1.14, the newest the proxy serves (stores
#                        v1beta2): the default
#   bin/crds/capi-v1.12/ the same with Cluster API v1.12 (for its real manager)
#   bin/crds/capi-v1.10/ the same with Cluster API v1.10 (stores v1beta1)
#   bin/crds/capo/       capi-v1.12 plus every CRD of CAPO v0.14.7 and ORC's
#                        Image, which the real CAPO manager (capo.sh) watches;
#                        CAPO v0.14.7 is built against Cluster API v1.12
#   bin/crds/capo-v0.15/ Cluster API v1.13.4 with CAPO v0.15.0-beta.0 (v1beta2,
#                        from ../shared/upstream: the proxy does not serve it)
#   bin/crds/capo-main/ Cluster API v1.14.2 with CAPO main (e52de58, after PR
#                        #3300; its go.mod wants v1.14.0) from ../shared/upstream
#   bin/crds/capd/       default plus CAPD v1.13.7's CRDs (the in-memory
#                        provider, testenv/capd.sh) with their contract labels
# Warm runs are no-ops: a set is rebuilt only when this script or a
# stand-in is newer than its stamp.
set -euo pipefail
cd "$(dirname "$0")"

CAPI_DEFAULT=v1.14.2
CAPI_V1_12=v1.12.5    # testenv/capi.sh's default manager
CAPI_OLD=v1.10.10
CAPO=v0.14.7          # the CAPO CRDs every set has (OpenStackMachine, OpenStackServer)
CAPA=v2.13.0
XP_KUBERNETES=v1.3.1 # v1.4.x needs Go >= 1.27
PROM_OPERATOR=v0.85.0
CERT_MANAGER=v1.21.2
CAPO_REAL=v0.14.7     # testenv/capo.sh builds the same version
ORC_REAL=v2.4.0       # the ORC module CAPO v0.14.7's go.mod requires
CAPI_NEXT=v1.13.4     # what CAPO v0.15.0-beta.0's go.mod requires
ORC_NEXT=v2.6.0
CAPO_NEXT_TGZ=../../shared/upstream/cluster-api-provider-openstack-v0.15.0-beta.0.tar.gz
CAPO_MAIN_TGZ=../../shared/upstream/cluster-api-provider-openstack-main-e52de58.tar.gz
CAPD=v1.13.7          # testenv/capd.sh builds the same version

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

# build SET CAPI_VERSION [EXTRA [LABELS]]: EXTRA is more "module@version file"
# lines (or "tgz:PATH file" for a CRD from a source tarball), copied after
# the common list so they replace a file of the same name. LABELS ("key:
# value" lines) go on EXTRA's infrastructure CRDs: the contract labels the
# provider's kustomization adds, without which the Cluster API controllers
# refuse its objects.
build() {
  local set=$1 capi=$2 extra=${3:-} labels=${4:-} dst=bin/crds/$1 tmp m file dir
  local stamp=$dst/.stamp infra=()
  if [[ -f $stamp ]] && [[ -z $(find crds.sh crds -newer "$stamp" -print -quit) ]]; then
    return 0
  fi
  tmp=$(mktemp -d bin/crds/.tmp.XXXXXX)
  chmod 755 "$tmp"
  # v1.14 moved the core manager and its CRDs under core/.
  local bases=config/crd/bases
  [[ -d $(fetch "sigs.k8s.io/cluster-api@$capi")/core/config/crd/bases ]] && bases=core/config/crd/bases
  # module@version  file in the module  (only the CRDs remedy or its tests use;
  # all of Cluster API's, which its real manager needs: testenv/capi.sh)
  while read -r m file; do
    dir=$(fetch "$m")
    cp "$dir/$file" "$tmp/"
    echo "$m $file" >>"$tmp/SOURCES"
  done <<EOF
sigs.k8s.io/cluster-api@$capi $bases/cluster.x-k8s.io_machines.yaml
sigs.k8s.io/cluster-api@$capi $bases/cluster.x-k8s.io_clusters.yaml
sigs.k8s.io/cluster-api@$capi $bases/cluster.x-k8s.io_machinesets.yaml
sigs.k8s.io/cluster-api@$capi $bases/cluster.x-k8s.io_machinedeployments.yaml
sigs.k8s.io/cluster-api@$capi $bases/cluster.x-k8s.io_machinehealthchecks.yaml
sigs.k8s.io/cluster-api@$capi $bases/cluster.x-k8s.io_machinepools.yaml
sigs.k8s.io/cluster-api@$capi $bases/cluster.x-k8s.io_clusterclasses.yaml
sigs.k8s.io/cluster-api@$capi $bases/cluster.x-k8s.io_machinedrainrules.yaml
sigs.k8s.io/cluster-api@$capi $bases/addons.cluster.x-k8s.io_clusterresourcesets.yaml
sigs.k8s.io/cluster-api@$capi $bases/addons.cluster.x-k8s.io_clusterresourcesetbindings.yaml
sigs.k8s.io/cluster-api@$capi $bases/ipam.cluster.x-k8s.io_ipaddressclaims.yaml
sigs.k8s.io/cluster-api@$capi $bases/ipam.cluster.x-k8s.io_ipaddresses.yaml
sigs.k8s.io/cluster-api@$capi $bases/runtime.cluster.x-k8s.io_extensionconfigs.yaml
sigs.k8s.io/cluster-api-provider-openstack@$CAPO config/crd/bases/infrastructure.cluster.x-k8s.io_openstackmachines.yaml
sigs.k8s.io/cluster-api-provider-openstack@$CAPO config/crd/bases/infrastructure.cluster.x-k8s.io_openstackservers.yaml
sigs.k8s.io/cluster-api-provider-aws/v2@$CAPA config/crd/bases/infrastructure.cluster.x-k8s.io_awsmachines.yaml
github.com/crossplane-contrib/provider-kubernetes@$XP_KUBERNETES package/crds/kubernetes.m.crossplane.io_objects.yaml
github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml
github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml
github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_alertmanagerconfigs.yaml
github.com/cert-manager/cert-manager@$CERT_MANAGER deploy/crds/cert-manager.io_certificates.yaml
github.com/cert-manager/cert-manager@$CERT_MANAGER deploy/crds/cert-manager.io_issuers.yaml
EOF
  while read -r m file; do
    [[ -n $m ]] || continue
    if [[ $m == tgz:* ]]; then
      tar -xzf "${m#tgz:}" -O "$file" >"$tmp/$(basename "$file")"
    else
      dir=$(fetch "$m")
      cp "$dir/$file" "$tmp/"
    fi
    echo "$m $file" >>"$tmp/SOURCES"
    infra+=("$tmp/$(basename "$file")")
  done <<<"$extra"
  cp crds/*.yaml "$tmp/"
  chmod u+w "$tmp"/*.yaml
  if [[ -n $labels ]]; then
    for file in "${infra[@]}"; do
      [[ $(basename "$file") == infrastructure.cluster.x-k8s.io_* ]] || continue
      awk -v labels="$labels" '!done && /^metadata:$/ {
          print; print "  labels:"; n = split(labels, l, "\n")
          for (i = 1; i <= n; i++) if (l[i] != "") print "    " l[i]
          done = 1; next } { print }' "$file" >"$file.new"
      mv "$file.new" "$file"
    done
  fi # the module cache is read-only
  touch "$tmp/.stamp"
  rm -rf "$dst"
  mv "$tmp" "$dst"
}

mkdir -p bin/crds
rm -rf bin/crds/.tmp.* # left by a failed run
build default "$CAPI_DEFAULT"
build capi-v1.12 "$CAPI_V1_12"
build capi-v1.10 "$CAPI_OLD"

capo_crds() { # MODULE-OR-TGZ PREFIX ORC: every CAPO CRD and ORC's Image
  local k
  for k in openstackclusteridentities openstackclusters openstackclustertemplates \
    openstackfloatingippools openstackmachines openstackmachinetemplates openstackservers; do
    echo "$1 ${2}config/crd/bases/infrastructure.cluster.x-k8s.io_$k.yaml"
  done
  echo "github.com/k-orc/openstack-resource-controller/v2@$3 config/crd/bases/openstack.k-orc.cloud_images.yaml"
}
build capo "$CAPI_V1_12" "$(capo_crds "sigs.k8s.io/cluster-api-provider-openstack@$CAPO_REAL" "" "$ORC_REAL")" \
  "cluster.x-k8s.io/v1beta1: v1beta1"
if [[ -f $CAPO_NEXT_TGZ ]]; then
  build capo-v0.15 "$CAPI_NEXT" "$(capo_crds "tgz:$CAPO_NEXT_TGZ" cluster-api-provider-openstack/ "$ORC_NEXT")" \
    "cluster.x-k8s.io/v1beta1: v1beta1
cluster.x-k8s.io/v1beta2: v1beta2"
else
  echo "crds.sh: $CAPO_NEXT_TGZ missing: CRD set capo-v0.15 not built" >&2
fi
if [[ -f $CAPO_MAIN_TGZ ]]; then
  build capo-main "$CAPI_DEFAULT" "$(capo_crds "tgz:$CAPO_MAIN_TGZ" cluster-api-provider-openstack-e52de58/ "$ORC_NEXT")" \
    "cluster.x-k8s.io/v1beta1: v1beta1
cluster.x-k8s.io/v1beta2: v1beta2"
else
  echo "crds.sh: $CAPO_MAIN_TGZ missing: CRD set capo-main not built" >&2
fi

# CAPD registers a controller for each of its kinds, Docker* included: it
# needs all of its CRDs. tests/it/capi_inmemory.rs runs it with the v1.14.2
# core manager, so the core CRDs are the default set's.
capd_crds() {
  local k
  for k in devclusters devclustertemplates devmachines devmachinetemplates devmachinepools \
    devmachinepooltemplates dockerclusters dockerclustertemplates dockermachines \
    dockermachinetemplates dockermachinepools dockermachinepooltemplates; do
    echo "sigs.k8s.io/cluster-api/test@$CAPD infrastructure/docker/config/crd/bases/infrastructure.cluster.x-k8s.io_$k.yaml"
  done
}
build capd "$CAPI_DEFAULT" "$(capd_crds)" "cluster.x-k8s.io/v1beta1: v1beta1
cluster.x-k8s.io/v1beta2: v1beta2"
