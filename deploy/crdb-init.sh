#!/usr/bin/env bash
# One-shot CockroachDB setup for docker compose: initialise the cluster (3-node profile;
# a start-single-node cluster is already initialised), enable rangefeeds, create the
# database. Idempotent: every step is safe to repeat on a later `docker compose up`.
set -euo pipefail

host=${CRDB_HOST:-crdb:26257}
db=${INBOXD_DB_NAME:-inboxd}
deadline=$((SECONDS + ${CRDB_WAIT_SECONDS:-180}))
crdb=/cockroach/cockroach

log() { printf 'crdb-init: %s\n' "$*" >&2; }

until out=$("$crdb" init --insecure --host="$host" 2>&1) || grep -q "already been initialized" <<<"$out"; do
  if ((SECONDS >= deadline)); then
    log "no CockroachDB node answered at $host: start compose with --profile cluster or --profile single"
    log "$out"
    exit 1
  fi
  sleep 2
done
log "cluster initialised"

until "$crdb" sql --insecure --host="$host" -e 'SELECT 1' >/dev/null 2>&1; do
  ((SECONDS >= deadline)) && { log "SQL not ready at $host"; exit 1; }
  sleep 2
done

# Changefeeds need rangefeeds:
# https://www.cockroachlabs.com/docs/stable/create-and-configure-changefeeds#enable-rangefeeds
"$crdb" sql --insecure --host="$host" -e "SET CLUSTER SETTING kv.rangefeed.enabled = true;"
# A licence key lifts the throttle of a multi-node cluster (docker-compose.yml, top):
# https://www.cockroachlabs.com/docs/stable/licensing-faqs#set-a-license
if [[ -n "${CRDB_LICENSE_KEY:-}" ]]; then
  [[ "$CRDB_LICENSE_KEY" =~ ^[A-Za-z0-9+/=_.-]+$ ]] || { log "CRDB_LICENSE_KEY has characters a licence key does not"; exit 1; }
  "$crdb" sql --insecure --host="$host" -e "SET CLUSTER SETTING enterprise.license = '${CRDB_LICENSE_KEY}';" >/dev/null
  log "licence key set"
fi
"$crdb" sql --insecure --host="$host" -e "CREATE DATABASE IF NOT EXISTS ${db};"
log "rangefeeds enabled, database ${db} ready"
