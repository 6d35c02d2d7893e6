#!/usr/bin/env bash
# make test's runner: the whole suite, the submodules' tests and the CockroachDB-faithful
# profile. By default one group after another, so that the machine carries one group's
# load at a time (make test, CI). With INBOXD_TEST_GROUPS=parallel (make test-parallel)
# the three run side by side: most tests wait on a broker, a database or a backoff, so
# three go test processes at once keep both cores busy where one after another leaves
# them idle a fifth of the time, at the price of a heavier load on every test. There,
# each group's output is kept apart and printed whole when the group ends. Either way the
# script fails if any group failed.
# Usage: scripts/test.sh "<go test flags>" "<packages>" "<submodules>" "<profile packages>" "<profile skips>"
set -uo pipefail
flags=$1 pkgs=$2 submods=$3 profile_pkgs=$4 profile_skip=$5
GO=${GO:-go}
export CI=${CI:-true}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$SECONDS

# shellcheck disable=SC2086 # the flags and package lists are word lists
suite() { $GO test $flags $pkgs; }
submodules() {
  local m rc=0
  for m in $submods; do $GO -C "$m" test $flags ./... || rc=1; done
  return $rc
}
profile() {
  INBOXD_TEST_DEFAULT_ISOLATION=serializable INBOXD_TEST_MESSAGE_LIMIT=16777216 \
    $GO test $flags -skip "$profile_skip" $profile_pkgs
}

if [ "${INBOXD_TEST_GROUPS:-serial}" != parallel ]; then
  failed=()
  for g in suite submodules profile; do
    echo "=== $g"
    "$g" || failed+=("$g")
    echo "=== $g: done after $((SECONDS - start)) s"
  done
  echo "=== make test: $((SECONDS - start)) s"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "=== FAILED: ${failed[*]}"
    exit 1
  fi
  exit 0
fi

declare -A pids
for g in suite submodules profile; do
  "$g" >"$dir/$g.log" 2>&1 &
  pids[$g]=$!
done
failed=()
for g in suite submodules profile; do
  wait "${pids[$g]}"
  rc=$?
  echo "=== $g: $([ $rc -eq 0 ] && echo ok || echo FAILED) after $((SECONDS - start)) s"
  cat "$dir/$g.log"
  [ $rc -eq 0 ] || failed+=("$g")
done
echo "=== make test: $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "=== FAILED: ${failed[*]}"
  exit 1
fi
