#!/usr/bin/env bash
# Runs every FuzzXxx target in the module for a short time each: scripts/fuzz.sh [duration]
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-10s}
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
    echo "fuzz $pkg $target ($dur)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$dur" "$pkg"
  done
done
