#!/usr/bin/env bash
# Builds the real brupop (Bottlerocket update operator) controller from its
# source at commit 2fcbeb12 (../shared/upstream/, `git archive` of
# github.com/bottlerocket-os/bottlerocket-update-operator; Apache-2.0 OR MIT)
# and links it into testenv/bin/brupop-controller. Crates come from
# crates.io through its Cargo.lock (`cargo build --locked -p controller`).
# Cached outside the clone with its own CARGO_TARGET_DIR: a warm run only
# links, a cold one builds once (see testenv/README.md for the time).
# It also links the upstream Helm charts (bin/brupop-charts) for
# tests/it/brupop_real.rs.
set -euo pipefail
cd "$(dirname "$0")"

BRUPOP_COMMIT=2fcbeb12
tarball=${REMEDY_BRUPOP_SOURCE:-$PWD/../../shared/upstream/bottlerocket-update-operator-$BRUPOP_COMMIT.tar.gz}

cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/brupop-$BRUPOP_COMMIT
if [[ ! -x $dir/brupop-controller ]]; then
  [[ -f $tarball ]] || { echo "brupop.sh: no brupop source at $tarball" >&2; exit 1; }
  echo "   building the brupop controller $BRUPOP_COMMIT (once; cached in $dir)"
  mkdir -p "$dir"
  rm -rf "$dir/src"
  mkdir -p "$dir/src"
  tar -xzf "$tarball" -C "$dir/src" --strip-components=1
  # Built in the copy, with its own target dir beside it (kept: a rebuild
  # after a source change compiles only what changed), never remedy's.
  # No debug info: only the test harness runs it, and a cold CI run is
  # CPU-bound (docs/evidence/tests.md).
  (cd "$dir/src" && CARGO_TARGET_DIR=$dir/target CARGO_PROFILE_DEV_DEBUG=false cargo build --locked -p controller)
  cp "$dir/target/debug/controller" "$dir/brupop-controller.tmp"
  mv "$dir/brupop-controller.tmp" "$dir/brupop-controller"
fi
mkdir -p bin
ln -sfn "$dir/brupop-controller" bin/brupop-controller
# The upstream Helm charts (controller ClusterRole, binding, ServiceAccount,
# the BottlerocketShadow CRD): tests/it/support/brupop.rs fills in their
# few `{{ .Values.* }}` and applies them.
ln -sfn "$dir/src/deploy/charts" bin/brupop-charts
