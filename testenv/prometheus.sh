#!/usr/bin/env bash
# Builds the Prometheus and Alertmanager that users run today (3.x and 0.3x)
# from their Go modules, with promtool and amtool, and links them into
# testenv/bin/. The binaries are cached outside the clone, one folder per
# version, so a warm run does nothing and a cold one builds them once
# (about 8 min for Prometheus, 4 min for Alertmanager on 2 cores).
# No web UI assets are built: the tests use the HTTP APIs only.
#
# Debian's prometheus 2.42 and prometheus-alertmanager 0.25 stay installed
# (scripts/lib/install.sh): scripts/test runs the signal tests once more
# against them, for the installations that have not moved yet.
set -euo pipefail
cd "$(dirname "$0")"

# Module versions: Prometheus tags its Go module v0.3MM.P for release 3.MM.P.
PROMETHEUS_MODULE=v0.316.0
PROMETHEUS_VERSION=3.16.0
ALERTMANAGER_VERSION=v0.35.0

cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
export CGO_ENABLED=0

# build DIR VERSION PKG... : go install PKG@module-version into DIR unless
# every binary is there already. The version string goes into the binary
# (github.com/prometheus/common/version), so `--version` tells what ran.
build() {
  local dir=$1 version=$2 module_version=$3
  shift 3
  local missing=0 pkg
  for pkg in "$@"; do
    [[ -x $dir/${pkg##*/} ]] || missing=1
  done
  ((missing)) || return 0
  echo "   building ${*##*/} $version (once; cached in $dir)"
  mkdir -p "$dir.tmp"
  local targets=()
  for pkg in "$@"; do targets+=("$pkg@$module_version"); done
  GOBIN=$dir.tmp go install -trimpath -tags "$PROMETHEUS_TAGS" \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version -X github.com/prometheus/common/version.Branch=module" \
    "${targets[@]}"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
}

# Service discovery: file, HTTP (always built) and Kubernetes (the
# Prometheus Operator's ServiceMonitors, tests/it/node_prometheus_operator.rs)
# only; the tests use no other. The cloud SDKs of the other mechanisms
# (plugins/plugin_*.go: `remove_all_sd`, `enable_<name>_sd`) are most of a
# cold build. Scraping, rules, alerting and the HTTP API are the same code.
PROMETHEUS_TAGS=remove_all_sd,enable_kubernetes_sd
prom_dir=$cache/prometheus-$PROMETHEUS_MODULE-sd-kubernetes
am_dir=$cache/alertmanager-$ALERTMANAGER_VERSION
build "$prom_dir" "$PROMETHEUS_VERSION" "$PROMETHEUS_MODULE" \
  github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
# Alertmanager embeds its web UI (ui/web.go: `//go:embed app/dist`), which
# the module does not ship (it is built with npm), so `go install` fails with
# "pattern app/dist: no matching files found". Build from a copy of the
# module with a one-page placeholder UI instead; the API is unchanged.
if [[ ! -x $am_dir/alertmanager || ! -x $am_dir/amtool ]]; then
  echo "   building alertmanager amtool ${ALERTMANAGER_VERSION#v} (once; cached in $am_dir)"
  src=$(go mod download -json "github.com/prometheus/alertmanager@$ALERTMANAGER_VERSION" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  work=$(mktemp -d)
  cp -r "$src/." "$work/"
  chmod -R u+w "$work" # the module cache is read-only
  for ui in elm mantine; do
    mkdir -p "$work/ui/app/dist/$ui"
    echo '<!doctype html><title>Alertmanager</title><p>web UI not built (testenv/prometheus.sh); the API is served.' \
      >"$work/ui/app/dist/$ui/index.html"
  done
  mkdir -p "$am_dir.tmp"
  (cd "$work" && go build -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${ALERTMANAGER_VERSION#v} -X github.com/prometheus/common/version.Branch=module" \
    -o "$am_dir.tmp/" ./cmd/alertmanager ./cmd/amtool)
  rm -rf "$work" "$am_dir"
  mv "$am_dir.tmp" "$am_dir"
fi

mkdir -p bin
ln -sfn "$prom_dir/prometheus" bin/prometheus
ln -sfn "$prom_dir/promtool" bin/promtool
ln -sfn "$am_dir/alertmanager" bin/alertmanager
ln -sfn "$am_dir/amtool" bin/amtool
