#!/usr/bin/env bash
# Installs (when missing) and starts the services inboxd needs: ActiveMQ with STOMP on
# 127.0.0.1:61613 and PostgreSQL on 127.0.0.1:5432. Idempotent: safe to run twice.
#
# ActiveMQ also listens with stomp+ssl on 127.0.0.1:61612, and with stomp+ssl requiring a
# client certificate on 127.0.0.1:61611. Each broker start makes a new CA and keystores
# (scripts/broker-tls.sh) in $AMQ_BASE/conf/tls: ca.pem, client.pem and client-key.pem
# there are what INBOXD_STOMP_CA_FILE, _CERT_FILE and _KEY_FILE take, and where the
# tests look (internal/testenv, INBOXD_TEST_BROKER_TLS_DIR).
#
#   scripts/services.sh [up|down|browser|status]   (browser: Chromium for the console tests)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
AMQ_BASE=${AMQ_BASE:-/var/lib/inboxd-activemq}
AMQ_LOG=${AMQ_LOG:-/var/log/inboxd-activemq.log}
STOMP_PORT=61613
STOMP_TLS_PORTS=(61612 61611)
PG_PORT=5432

log() { printf 'services: %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # name port seconds
  local deadline=$((SECONDS + $3))
  until port_open "$2"; do
    if ((SECONDS >= deadline)); then
      log "$1 did not answer on port $2 within $3 s"
      return 1
    fi
    sleep 0.5
  done
  log "$1 is up on 127.0.0.1:$2"
}

apt_install() {
  if [[ ! -f /var/lib/apt/periodic/inboxd-updated ]] || ! apt-cache policy "$@" 2>/dev/null | grep -q Candidate; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    mkdir -p /var/lib/apt/periodic && touch /var/lib/apt/periodic/inboxd-updated
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

postgres_up() {
  if port_open "$PG_PORT"; then log "postgresql already up on 127.0.0.1:$PG_PORT"; return; fi
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    log "installing postgresql"
    apt_install postgresql
  fi
  local ver
  ver=$(ls /etc/postgresql | sort -V | tail -1)
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  wait_port postgresql "$PG_PORT" 60
  # Trust auth on loopback is what the default INBOXD_DATABASE_URL expects; a stock install
  # uses peer/scram, so make the local cluster match when we installed it ourselves.
  if ! psql -h 127.0.0.1 -U postgres -Atc 'select 1' >/dev/null 2>&1; then
    local hba
    hba=$(su postgres -c "psql -Atc 'show hba_file'")
    sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
    su postgres -c "psql -Atc 'select pg_reload_conf()'" >/dev/null
  fi
}

activemq_up() {
  if port_open "$STOMP_PORT"; then
    if port_open "${STOMP_TLS_PORTS[0]}" && port_open "${STOMP_TLS_PORTS[1]}"; then
      log "activemq already up on 127.0.0.1:$STOMP_PORT (TLS ${STOMP_TLS_PORTS[*]})"
      return
    fi
    if ! pgrep -f "xbean:file:$AMQ_BASE/conf/activemq.xml" >/dev/null; then
      # Not ours to restart; the TLS tests will say what is missing.
      log "WARNING: something else holds 127.0.0.1:$STOMP_PORT without the stomp+ssl ports ${STOMP_TLS_PORTS[*]}; leaving it alone"
      return
    fi
    # Started from an older scripts/activemq.xml, without TLS connectors: restart it once.
    log "activemq is up without its stomp+ssl connectors (older configuration): restarting it"
    activemq_down
  fi
  if ! command -v activemq >/dev/null; then
    log "installing activemq"
    apt_install activemq
  fi
  command -v openssl >/dev/null || apt_install openssl
  mkdir -p "$AMQ_BASE/conf" "$AMQ_BASE/data/kahadb" "$AMQ_BASE/tmp"
  cp "$here/activemq.xml" "$AMQ_BASE/conf/activemq.xml"
  # keytool ships with the JRE that activemq depends on.
  "$here/broker-tls.sh" "$AMQ_BASE/conf/tls"
  cp /etc/activemq/instances-available/main/log4j2.properties "$AMQ_BASE/conf/" 2>/dev/null || true
  # The broker switches to user activemq; a data dir it cannot write makes it hang without a word.
  chown -R activemq:activemq "$AMQ_BASE"
  touch "$AMQ_LOG" && chown activemq:activemq "$AMQ_LOG"
  log "starting activemq (base $AMQ_BASE, log $AMQ_LOG)"
  (
    cd "$AMQ_BASE"
    # JVM options come from Debian's /usr/share/activemq/activemq-options (512M heap),
    # which the launcher sources after the environment; setting ACTIVEMQ_OPTS here is moot.
    export ACTIVEMQ_BASE="$AMQ_BASE" ACTIVEMQ_CONF="$AMQ_BASE/conf" ACTIVEMQ_DATA="$AMQ_BASE/data" \
      ACTIVEMQ_TMP="$AMQ_BASE/tmp"
    setsid nohup activemq console "xbean:file:$AMQ_BASE/conf/activemq.xml" >>"$AMQ_LOG" 2>&1 </dev/null &
  )
  wait_port activemq "$STOMP_PORT" 120 || { tail -30 "$AMQ_LOG" >&2; return 1; }
  for p in "${STOMP_TLS_PORTS[@]}"; do
    wait_port "activemq stomp+ssl" "$p" 30 || { tail -30 "$AMQ_LOG" >&2; return 1; }
  done
}

activemq_down() {
  local pids
  pids=$(pgrep -f "xbean:file:$AMQ_BASE/conf/activemq.xml" || true)
  [[ -z $pids ]] && { log "activemq not running"; return; }
  log "stopping activemq ($pids)"
  kill $pids 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while pgrep -f "xbean:file:$AMQ_BASE/conf/activemq.xml" >/dev/null; do
    ((SECONDS >= deadline)) && { pkill -9 -f "xbean:file:$AMQ_BASE/conf/activemq.xml" || true; break; }
    sleep 0.5
  done
}

# Chromium for the console's browser tests (internal/console); DejaVu fonts so that
# screenshots render the same everywhere.
browser_install() {
  if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
    log "chromium present: $(command -v chromium chromium-browser | head -1)"
    return
  fi
  log "installing chromium"
  apt_install chromium fonts-dejavu-core
}

# promtool comes with Debian's prometheus package. Only the binary is used: where
# systemd runs, the package also enables a Prometheus server (stop it with systemctl).
promtool_install() {
  command -v promtool >/dev/null && return
  log "installing promtool (Debian package prometheus)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
}

case "${1:-up}" in
  up) command -v curl >/dev/null || apt_install curl  # the tutorial test runs curl
    promtool_install # deploy/observe_test.go checks the alerting rules with it
    postgres_up; activemq_up ;;
  down) activemq_down ;;
  activemq-restart) activemq_down; activemq_up ;;
  # Stops the broker and empties its store; `up` then starts it clean. CI runs it first:
  # messages earlier runs left unconsumed (gigabytes, after benchmarks) would slow the
  # broker's start and crowd its 512 MB heap (a 21 MiB test publish met OutOfMemoryError).
  activemq-fresh) activemq_down; rm -rf "${AMQ_BASE:?}/data/kahadb" ;;
  browser) browser_install ;;
  status)
    port_open "$PG_PORT" && log "postgresql up" || log "postgresql down"
    port_open "$STOMP_PORT" && log "activemq up" || log "activemq down"
    port_open "${STOMP_TLS_PORTS[0]}" && log "activemq stomp+ssl up" || log "activemq stomp+ssl down" ;;
  *) echo "usage: $0 [up|down|activemq-restart|activemq-fresh|browser|status]" >&2; exit 2 ;;
esac
