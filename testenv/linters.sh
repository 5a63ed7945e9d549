#!/usr/bin/env bash
# The ecosystem's manifest linter, kubeconform, built from its Go module and
# cached outside the clone (about 1 min once), and the schemas it checks
# against, written from the sources the test cluster is built from
# (scripts/kube-schemas.py: Kubernetes' own OpenAPI document at the
# apiserver's version, and the CRDs the cluster installs). No schema
# registry is reachable here, so kubeconform's default location is not used.
#
# Not served by the module proxy here (refused with 403), so not used:
# cloudflare/pint (rule linter; promtool's own `check rules --lint` runs
# instead), grafana/dashboard-linter, stackrox kube-linter.
set -euo pipefail
cd "$(dirname "$0")"
KUBECONFORM_VERSION=v0.8.0
cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/kubeconform-$KUBECONFORM_VERSION
if [[ ! -x $dir/kubeconform ]]; then
  echo "   building kubeconform $KUBECONFORM_VERSION (once; cached in $dir)"
  mkdir -p "$dir.tmp"
  GOBIN=$dir.tmp CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
mkdir -p bin
ln -sfn "$dir/kubeconform" bin/kubeconform

# The Kubernetes module the apiserver is built from (go.mod) has the OpenAPI
# document of that release.
k8s=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)
stamp=bin/schemas/.source
source="$k8s $(cat bin/crds/default/SOURCES | md5sum) $(md5sum <../scripts/kube-schemas.py)"
if [[ $(cat "$stamp" 2>/dev/null) != "$source" ]]; then
  rm -rf bin/schemas
  python3 ../scripts/kube-schemas.py "$k8s/api/openapi-spec/swagger.json" bin/crds/default bin/schemas
  echo "$source" >"$stamp"
fi
