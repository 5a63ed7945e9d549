# Sourced by scripts/test: runs the one-time builds in two lanes at once.
# Each build spends part of its cold time fetching modules and linking on
# one core; a second lane fills those gaps on this 2-core machine. Warm,
# every build is a no-op and the lanes cost nothing.
#
#   lane NAME FUNCTION   # runs FUNCTION in the background, its lines
#                        # prefixed with [NAME]
#   wait_lanes           # waits for all; fails if one failed, naming it

_lanes=()

lane() {
  local name=$1
  shift
  (
    set -o pipefail
    ("$@") 2>&1 | sed -u "s/^/[$name] /"
  ) &
  _lanes+=("$name:$!")
}

wait_lanes() {
  local entry failed=()
  for entry in "${_lanes[@]}"; do
    wait "${entry##*:}" || failed+=("${entry%%:*}")
  done
  _lanes=()
  if ((${#failed[@]})); then
    echo "build lanes failed: ${failed[*]} (their lines are prefixed with the lane's name)" >&2
    return 1
  fi
}
