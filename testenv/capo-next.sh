#!/usr/bin/env bash
# Builds a real CAPO manager the module proxy does not serve, from its source
# tarball in ../shared/upstream, and links it into testenv/bin:
#   `capo-next.sh`      v0.15.0-beta.0 (v1beta2, no failure fields; an ERROR
#                       server is terminal) -> bin/capo-manager-v0.15
#   `capo-next.sh main` main at e52de58, after PR #3300 (an ERROR server is
#                       polled every 60 s, a failed create is retried with
#                       controller-runtime's per-item backoff; Cluster API
#                       v1.14.0, ORC v2.6.0) -> bin/capo-manager-main The module proxy does not
# serve v0.15, so the source comes from the `git archive` tarball in
# ../shared/upstream (see its README.md); its go.mod wants Cluster API
# v1.13.4 and ORC v2.6.0, which the proxy serves. Extracted into a temp dir
# and built there with `go build .` (as capo.sh does for v0.14.7). Cached
# outside the clone like capo.sh, keyed by version and the tarball's sha256:
# a warm run only links, a cold one builds once (measured in
# testenv/README.md). tests/it/capo_v015.rs runs it against the fake
# OpenStack API (cmd/fake-openstack) with the `capo-v0.15` CRD set
# (crds.sh) and the Cluster API v1.13.4 core manager (capi.sh next).
set -euo pipefail
cd "$(dirname "$0")"

case ${1:-v0.15} in
v0.15) CAPO_VERSION=v0.15.0-beta.0 link=capo-manager-v0.15 ;;
main) CAPO_VERSION=main-e52de58 link=capo-manager-main ;;
*) echo "capo-next.sh: unknown version $1 (v0.15 or main)" >&2; exit 2 ;;
esac
TGZ=../../shared/upstream/cluster-api-provider-openstack-$CAPO_VERSION.tar.gz

cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/capo-$CAPO_VERSION
export CGO_ENABLED=0
[[ -f $TGZ ]] || { echo "capo-next.sh: $TGZ missing: cannot build CAPO $CAPO_VERSION" >&2; exit 1; }
sum=$(sha256sum "$TGZ" | cut -d' ' -f1)
if [[ ! -x $dir/capo-manager || $(cat "$dir/SOURCE_SHA256" 2>/dev/null) != "$sum" ]]; then
  echo "   building the CAPO manager $CAPO_VERSION from $(basename "$TGZ") (once; cached in $dir)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  tar -xzf "$TGZ" -C "$work"
  mkdir -p "$dir.tmp"
  (cd "$work"/cluster-api-provider-openstack* &&
    go build -trimpath -ldflags "-s -w" -o "$dir.tmp/capo-manager" .)
  echo "$sum" >"$dir.tmp/SOURCE_SHA256"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
mkdir -p bin
ln -sfn "$dir/capo-manager" "bin/$link"
