#!/usr/bin/env bash
# Issue 2's acceptance run: 20,000 persistent messages with 30% duplicates and 1%
# malformed bodies through a real "inboxd serve"; the journal must hold exactly the
# unique valid ids and quarantine every malformed one.
#   scripts/verify-ingest.sh [messages]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
run=$(date +%s)
export INBOXD_DATABASE_URL="postgres://postgres@127.0.0.1:5432/inboxd_verify_$run?sslmode=disable"
export INBOXD_DESTINATION="/queue/inboxd.verify.$run"
export INBOXD_HTTP_ADDR=127.0.0.1:0 INBOXD_WEBHOOK_ADDR=
export INBOXD_MIGRATE=auto # a fresh database, created and migrated by serve
# Ingest only: keep the sweeper off the fresh rows so the check sees ingest alone.
export INBOXD_SWEEP_GRACE=1h
log=$(mktemp)
bin/inboxd serve >"$log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS inboxd_verify_$run WITH (FORCE)" postgres || true
  rm -f "$log"
}
trap cleanup EXIT
for _ in $(seq 1 100); do grep -q 'subscribed' "$log" && break; sleep 0.1; done
bin/inboxd publish -n "$n" -duplicates 0.3 -malformed 0.01 -verify
psql -h 127.0.0.1 -U postgres -c "SELECT 'journal' AS tbl, count(*) FROM journal UNION ALL SELECT 'quarantine: ' || reason, count(*) FROM quarantine GROUP BY reason ORDER BY 1" "inboxd_verify_$run"
grep -E 'ERROR|WARN' "$log" | head -5 || true
