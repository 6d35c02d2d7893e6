#!/usr/bin/env bash
# The curl-driven registration demo: migrates, starts inboxd, posts registrations (one
# twice, one invalid) and shows the journal. On failure it stops what it started.
# Expects services up and bin/inboxd built (make demo does both).
# BROKER=rabbitmq runs it through the private RabbitMQ node's STOMP plugin
# (scripts/services.sh) instead of ActiveMQ: make demo BROKER=rabbitmq.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${BROKER:-activemq}" in
  activemq) ;;
  rabbitmq)
    export INBOXD_BROKER=rabbitmq INBOXD_STOMP_HOST=${INBOXD_STOMP_HOST:-/}
    export INBOXD_STOMP_ADDR=${INBOXD_STOMP_ADDR:-127.0.0.1:61623}
    export INBOXD_STOMP_LOGIN=${INBOXD_STOMP_LOGIN:-guest} INBOXD_STOMP_PASSCODE=${INBOXD_STOMP_PASSCODE:-guest}
    export INBOXD_DATABASE_URL=${INBOXD_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/inboxd_demo_rabbitmq?sslmode=disable} ;;
  *) echo "BROKER=$BROKER: want activemq or rabbitmq" >&2; exit 2 ;;
esac

export INBOXD_DATABASE_URL=${INBOXD_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/inboxd_demo?sslmode=disable}
export INBOXD_HTTP_ADDR=${INBOXD_HTTP_ADDR:-127.0.0.1:8090}
export INBOXD_WEBHOOK_ADDR=${INBOXD_WEBHOOK_ADDR:-127.0.0.1:8443}
export INBOXD_DESTINATION=${INBOXD_DESTINATION:-/queue/registrations.demo}
export INBOXD_DEMO=true # the registration handler, its customers table, POST /registration
export INBOXD_CERT_DIR=${INBOXD_CERT_DIR:-var/demo/certs}
api="http://$INBOXD_HTTP_ADDR"
state=var/demo
mkdir -p "$state"

command -v jq >/dev/null || { apt-get update -qq && apt-get install -y -qq jq >/dev/null; }

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; }

# Stop an inboxd left by an earlier demo, so the ports are ours.
if [[ -f $state/inboxd.pid ]] && kill -0 "$(cat "$state/inboxd.pid")" 2>/dev/null; then
  kill "$(cat "$state/inboxd.pid")" && while kill -0 "$(cat "$state/inboxd.pid")" 2>/dev/null; do sleep 0.2; done
fi

pid=
cleanup() {
  local rc=$?
  if ((rc != 0)) && [[ -n $pid ]]; then
    echo "demo failed (exit $rc); stopping inboxd (pid $pid). Its log: $state/inboxd.log" >&2
    tail -20 "$state/inboxd.log" >&2 || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$state/inboxd.pid"
  fi
}
trap cleanup EXIT

step "Migrate the database ($INBOXD_DATABASE_URL); broker ${BROKER:-activemq} at ${INBOXD_STOMP_ADDR:-127.0.0.1:61613}"
bin/inboxd migrate

step "Start inboxd (log: $state/inboxd.log)"
bin/inboxd serve >"$state/inboxd.log" 2>&1 &
pid=$!
echo "$pid" >"$state/inboxd.pid"
for _ in $(seq 1 100); do
  curl -fsS "$api/readyz" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "inboxd exited at start" >&2; exit 1; }
  sleep 0.2
done
curl -fsS "$api/readyz" | jq -c .

step "The changefeed (CockroachDB only; on PostgreSQL the sweeper processes the journal)"
bin/inboxd changefeed create -if-cockroachdb

step "A sample registration form"
show "curl $api/registration/form"
form=$(curl -fsS "$api/registration/form")
echo "$form" | jq .

step "Post it, with a fixed id"
id=$(cat /proc/sys/kernel/random/uuid)
body=$(echo "$form" | jq -c --arg id "$id" '. + {id: $id}')
show "curl -X POST $api/registration -d '$body'"
curl -sS -D "$state/headers" -H 'Content-Type: application/json' -d "$body" "$api/registration" | jq -c .
grep -i '^location' "$state/headers" || true

step "Post the very same registration again (a redelivery): it must collapse"
curl -sS -H 'Content-Type: application/json' -d "$body" "$api/registration" | jq -c .

step "Post two more registrations"
for _ in 1 2; do
  curl -fsS "$api/registration/form" | curl -sS -H 'Content-Type: application/json' -d @- "$api/registration" | jq -c .
done

step "The reference tutorial's inline registration, posted to /registration/ (with the slash) as it does"
show "curl -d '{\"name\":\"User\",\"email\":\"user@email.com\",\"jurisdiction\":\"mga\",\"createdAt\":\"2023-01-12T09:21:04.571+00:00\"}' -H Content-Type:application/json -X POST $api/registration/"
curl -fsS -d '{"name":"User","email":"user@email.com","jurisdiction":"mga","createdAt":"2023-01-12T09:21:04.571+00:00"}' \
  -H "Content-Type:application/json" -X POST "$api/registration/" | jq -c .

step "Post an invalid registration: it is refused with a clear error"
show "curl -X POST $api/registration -d '{\"name\":\"\",\"email\":\"not-an-email\",\"jurisdiction\":\"mga\"}'"
code=$(curl -sS -o "$state/invalid.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"name":"","email":"not-an-email","jurisdiction":"mga"}' "$api/registration")
echo "HTTP $code"; jq -c . "$state/invalid.json"
[[ $code == 400 ]] || { echo "expected 400 for the invalid registration" >&2; exit 1; }

step "Wait until the first registration is processed"
for _ in $(seq 1 100); do
  status=$(curl -fsS "$api/journal/$id" | jq -r .status 2>/dev/null || true)
  [[ $status == PROCESSED ]] && break
  sleep 0.1
done
curl -fsS "$api/journal/$id" | jq '{id, status, attempts, received_at, processed_at}'
[[ $status == PROCESSED ]] || { echo "registration $id was not processed" >&2; exit 1; }

step "The journal: registration events in jurisdiction mga"
show "curl '$api/journal/registration-events?jurisdiction=mga'"
list=$(curl -fsS "$api/journal/registration-events?jurisdiction=mga")
echo "$list" | jq -c '.items[] | {id, status, email: .payload.email}'
n=$(echo "$list" | jq --arg id "$id" '[.items[] | select(.id == $id)] | length')
echo "entries with id $id: $n (posted twice, journaled once)"
[[ $n == 1 ]] || { echo "expected the duplicate to collapse into one entry" >&2; exit 1; }

step "Ingest counters: the second post was a duplicate, collapsed by the journal's key"
curl -fsS "$api/metrics" | grep -E '^inboxd_ingest_(received|duplicates|committed|acked)_total' || true

step "The outbox: each new customer emitted customer-registered to /queue/customer-events, in its processing transaction"
for _ in $(seq 1 100); do
  sent=$(curl -fsS "$api/journal/stats" | jq '.outbox.sent')
  unsent=$(curl -fsS "$api/journal/stats" | jq '.outbox.unsent')
  ((sent >= 1 && unsent == 0)) && break
  sleep 0.1
done
show "curl $api/journal/stats | jq .outbox"
curl -fsS "$api/journal/stats" | jq -c .outbox
((sent >= 1 && unsent == 0)) || { echo "the outbox relay did not publish customer-registered" >&2; exit 1; }
curl -fsS "$api/metrics" | grep -E '^inboxd_outbox_(published_total|unsent) ' || true
if [[ $INBOXD_DATABASE_URL == postgres* ]] && command -v psql >/dev/null; then
  q="SELECT id, destination, attempts, sent_at, headers->>'event-type' AS event_type FROM outbox ORDER BY created_at DESC LIMIT 5"
  show "psql -c \"$q\""
  psql "$INBOXD_DATABASE_URL" -P pager=off -c "$q"
fi
echo "Each message carries header outbox-id and the same id in its body, so a downstream inbox drops redeliveries."

step "Stats"
curl -fsS "$api/journal/stats" | jq -c .

trap - EXIT
cat <<EOT

Demo done. inboxd is still running (pid $pid, log $state/inboxd.log); stop it with: kill $pid
Operator console: $api/ui/   (overview, journal, failures, quarantine, feed)
Where to look next:
  curl '$api/journal/registration-events?jurisdiction=mga&order=asc&limit=10'
  curl $api/journal/$id
  curl $api/journal/stats
  curl $api/                                   # links to everything
  curl $api/metrics | grep '^inboxd_'
  curl $api/openapi.json | jq '.paths | keys'
  webhook CA for the changefeed's ca_cert=: $INBOXD_CERT_DIR/ca.b64
  README.md and docs/: configuration, operator tools, the CockroachDB changefeed, and make bench
EOT
