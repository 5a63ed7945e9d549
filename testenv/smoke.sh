#!/usr/bin/env bash
# End-to-end check of the harness against the real binaries: up, wait, CRDs
# served, status subresource, merge-patch null, Lease, events.k8s.io Event,
# SIGUSR1 restart on the same port, SIGTERM with no stray processes.
# Usage: testenv/smoke.sh [DIR]   (needs kubectl; run testenv/build.sh first)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$(mktemp -d /tmp/remedy-testenv-smoke.XXXXXX)}
rm -rf "$dir" && mkdir -p "$dir"
export KUBECONFIG=$dir/kubeconfig
fail() { echo "SMOKE FAIL: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

t0=$(now)
( "$here/bin/remedy-testenv" up --dir "$dir" >"$dir/up.out" 2>"$dir/up.err" & echo $! >"$dir/up.pid"; wait $!; echo $? >"$dir/up.rc" ) &
trap 'kill -TERM $(cat "$dir/up.pid" 2>/dev/null) 2>/dev/null || true' EXIT
"$here/bin/remedy-testenv" wait --dir "$dir" --timeout 180s >/dev/null
echo "up → ready (wait returned): $(since "$t0")s"
pid=$(cat "$dir/up.pid")
port=$(sed -n 's/^APISERVER=https:\/\/127.0.0.1://p' "$dir/ready")

# CRDs served, status subresource, merge patch with null.
[[ $(kubectl get crds -o name | wc -l) -ge 6 ]] || fail "CRDs missing"
kubectl create -f "$here/samples" >/dev/null
for f in "$here"/samples/[a-z]*.yaml; do kubectl replace --subresource=status -f "$f" >/dev/null; done
[[ $(kubectl get osm prod-eu1-md-0-infra-fk2lz -o jsonpath='{.status.instanceState}') == ERROR ]] || fail "status not set"
kubectl patch osm prod-eu1-md-0-infra-fk2lz --type=merge -p '{"status":{"instanceState":"ACTIVE"}}' >/dev/null
[[ $(kubectl get osm prod-eu1-md-0-infra-fk2lz -o jsonpath='{.status.instanceState}') == ERROR ]] || fail "main resource changed status"
kubectl patch osm prod-eu1-md-0-infra-fk2lz --subresource=status --type=merge -p '{"status":{"failureReason":null,"failureMessage":null}}' >/dev/null
[[ -z $(kubectl get osm prod-eu1-md-0-infra-fk2lz -o jsonpath='{.status.failureReason}{.status.failureMessage}') ]] || fail "null did not remove fields"
[[ $(kubectl get machines.v1beta2.cluster.x-k8s.io prod-us2-md-0-5c8b4-lq9tn -o jsonpath='{.status.deprecated.v1beta1.failureReason}') == UpdateError ]] || fail "v1beta2 read"
# Conversion None, storage v1beta2: v1beta1's status.failureReason is pruned (docs/evidence/tests.md).
[[ -z $(kubectl get machines.v1beta1.cluster.x-k8s.io prod-eu1-md-0-7d9f8-x2kqp -o jsonpath='{.status.failureReason}') ]] || fail "v1beta1 field kept"
[[ $(kubectl get brs -n brupop-bottlerocket-aws -o jsonpath='{.items[0].status.crash_count}') == 3 ]] || fail "brs status"
kubectl get leases -n kube-system -o name | grep -q lease || fail "no Lease"
kubectl create -f - >/dev/null <<'EOF'
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: smoke.1, namespace: default}
eventTime: "2025-01-01T00:00:00.000000Z"
reportingController: remedy.dev/remedy
reportingInstance: smoke
action: Remediate
reason: Smoke
type: Normal
note: smoke test
regarding: {apiVersion: cluster.x-k8s.io/v1beta1, kind: Machine, name: prod-eu1-md-0-7d9f8-x2kqp, namespace: default}
EOF
echo "API checks passed"

# SIGUSR1: restart on the same port while a watch is open.
kubectl get osm -w >/dev/null 2>&1 & watch=$!
sleep 1
t1=$(now)
kill -USR1 "$pid"
for _ in $(seq 600); do [[ -f $dir/restarted ]] && break; sleep 0.1; done
[[ $(cat "$dir/restarted" 2>/dev/null) == 1 ]] || fail "no restart"
echo "restart (SIGUSR1 → DIR/restarted): $(since "$t1")s"
[[ $(sed -n 's/^APISERVER=https:\/\/127.0.0.1://p' "$dir/ready") == "$port" ]] || fail "port changed"
kubectl get osm prod-eu1-md-0-infra-fk2lz >/dev/null || fail "data lost"
kill "$watch" 2>/dev/null || true

# SIGTERM: clean exit, no strays, ready removed.
t2=$(now)
kill -TERM "$pid"
for _ in $(seq 300); do [[ -f $dir/up.rc ]] && break; sleep 0.1; done
echo "SIGTERM → exit: $(since "$t2")s, rc=$(cat "$dir/up.rc")"
[[ $(cat "$dir/up.rc") == 0 ]] || fail "exit code $(cat "$dir/up.rc")"
[[ ! -e $dir/ready ]] || fail "ready not removed"
if pgrep -af -- "$dir" | grep -v smoke.sh; then fail "stray processes"; fi
trap - EXIT
echo "SMOKE OK ($dir)"
