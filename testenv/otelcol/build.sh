#!/usr/bin/env bash
# Builds an OpenTelemetry Collector (otlpreceiver + fileexporter) with the
# collector builder v0.165.0 from Go modules, into the tools cache outside
# the clone (one folder per builder version and config), and links it as
# testenv/bin/otelcol. Cold: ~2.5-4 min on 2 cores; warm: a link.
set -euo pipefail
cd "$(dirname "$0")"
BUILDER_VERSION=v0.165.0
cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
key=$( (cat builder-config.yaml; find stub -type f | sort | xargs cat) | sha256sum | cut -c1-12)
dir=$cache/otelcol-$BUILDER_VERSION-$key
if [[ ! -x $dir/otelcol ]]; then
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  export GOBIN=$cache/otelcol-builder-$BUILDER_VERSION CGO_ENABLED=0
  [[ -x $GOBIN/builder ]] || go install "go.opentelemetry.io/collector/cmd/builder@${BUILDER_VERSION}"
  "$GOBIN/builder" --config builder-config.yaml
  cp build/otelcol-remedy-test "$dir.tmp/otelcol"
  rm -rf build "$dir"
  mv "$dir.tmp" "$dir"
fi
mkdir -p ../bin
ln -sfn "$dir/otelcol" ../bin/otelcol
