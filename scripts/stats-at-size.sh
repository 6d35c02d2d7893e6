#!/usr/bin/env bash
# Times GET /journal/stats, /journal/rates and /readyz on a journal of N settled entries
# (default 10 M) plus a little pending and failed work: the operator reads must not grow
# with the journal (issue 20). The database is filled with generate_series, its indexes
# built afterwards (much faster than maintaining them row by row), then analyzed, as
# autovacuum would have. About 25 minutes at 10 M on a busy 2-core machine, ~5 GB.
#
#   scripts/stats-at-size.sh [N]           keeps the database inboxd_stats_<N> for reruns
#   INBOXD=bin/inboxd PGURL=postgres://postgres@127.0.0.1:5432 scripts/stats-at-size.sh 3000000
set -euo pipefail
N=${1:-10000000}
INBOXD=${INBOXD:-bin/inboxd}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
DB=inboxd_stats_$N
ADDR=127.0.0.1:${PORT:-8095}
P="psql $PGURL/$DB -v ON_ERROR_STOP=1 -qAt"

if ! psql "$PGURL/postgres" -qAt -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
  psql "$PGURL/postgres" -q -c "CREATE DATABASE $DB"
  "$INBOXD" migrate -database-url "$PGURL/$DB?sslmode=disable" >/dev/null
  # An entry is two rows: journal (the event) and journal_state (its state), as ingest
  # writes them.
  tables="tablename IN ('journal', 'journal_state') AND indexname NOT IN ('journal_pkey', 'journal_state_pkey')"
  $P -c "SELECT indexdef FROM pg_indexes WHERE $tables" > "/tmp/$DB.indexes"
  for i in $($P -c "SELECT indexname FROM pg_indexes WHERE $tables"); do
    $P -c "DROP INDEX $i"
  done
  for ((s = 0; s < N; s += 1000000)); do
    $P -c "WITH j AS (
      INSERT INTO journal (id, payload, event_type, aggregate_id, tag, received_at)
      SELECT u, jsonb_build_object('id', u::TEXT, 'type', t, 'aggregateId', 'c-' || (g % 500000)::TEXT,
               'data', jsonb_build_object('email', 'user' || g::TEXT || '@example.com', 'jurisdiction', (ARRAY['mga','ukgc'])[1 + g % 2])),
             t, 'c-' || (g % 500000)::TEXT, '/queue/events', now() - (g % 500000) * INTERVAL '1 second'
      FROM (SELECT g, (ARRAY['registration','payment','deposit','withdrawal','login'])[1 + g % 5] AS t, gen_random_uuid() AS u
            FROM generate_series($s + 1, least($s + 1000000, $N)) AS g) AS x
      RETURNING id, aggregate_id, sequence_no, received_at)
      INSERT INTO journal_state (id, aggregate_id, sequence_no, status, attempts, next_attempt_at, updated_at, processed_at)
      SELECT id, aggregate_id, sequence_no, 'PROCESSED', 1, received_at, received_at, received_at FROM j"
    echo "$(date -u +%T) $((s + 1000000 < N ? s + 1000000 : N)) settled entries" >&2
  done
  # Pending and failed work, due in an hour so that serve leaves it as it is.
  # The id is given, as ingest gives it (migration 0013): the event id.
  $P -c "WITH j AS (
    INSERT INTO journal (id, payload, event_type, aggregate_id)
    SELECT u, jsonb_build_object('id', u::TEXT), 'registration', 'p-' || g::TEXT
    FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, 2000) AS g) AS x
    RETURNING id, aggregate_id, sequence_no)
    INSERT INTO journal_state (id, aggregate_id, sequence_no, status, next_attempt_at)
    SELECT id, aggregate_id, sequence_no,
           (ARRAY['RECEIVED','RECEIVED','RECEIVED','RECEIVED','FAILED','DEAD','REJECTED','REJECTED'])[1 + sequence_no % 8], now() + INTERVAL '1 hour'
    FROM j"
  while read -r def; do $P -c "$def"; done < "/tmp/$DB.indexes"
  $P -c "VACUUM ANALYZE journal"
  $P -c "VACUUM ANALYZE journal_state"
fi

# A kept database may predate this binary's migrations: serve would refuse it.
"$INBOXD" migrate -database-url "$PGURL/$DB?sslmode=disable" >/dev/null
"$INBOXD" serve -database-url "$PGURL/$DB?sslmode=disable" -destination /queue/inboxd-stats-at-size -http-addr "$ADDR" >"/tmp/$DB.serve.log" 2>&1 &
serve=$!
trap 'kill $serve' EXIT
up=
for _ in $(seq 50); do curl -sf -o /dev/null "http://$ADDR/healthz" && up=1 && break; sleep 0.2; done
if [ -z "$up" ]; then
  echo "inboxd serve did not answer on $ADDR; the end of /tmp/$DB.serve.log:" >&2
  tail -5 "/tmp/$DB.serve.log" >&2
  exit 1
fi
echo "journal: $($P -c "SELECT reltuples::INT8 FROM pg_class WHERE relname = 'journal'") entries (estimate); $(uptime | sed 's/.*load/load/')"
for ep in journal/stats 'journal/rates?minutes=10' journal readyz; do
  for _ in $(seq 30); do curl -sf -o /dev/null -w '%{time_total}\n' "http://$ADDR/$ep"; done | sort -n |
    awk -v ep="$ep" '{a[NR] = $1} END {printf "%-26s p50 %5.1f ms  p95 %5.1f ms  max %5.1f ms\n", ep, a[int(NR/2)+1]*1000, a[int(NR*0.95)]*1000, a[NR]*1000}'
done
