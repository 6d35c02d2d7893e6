#!/usr/bin/env bash
# Installs (when missing) and starts the services inboxd needs: ActiveMQ with STOMP on
# 127.0.0.1:61613, PostgreSQL on 127.0.0.1:5432, and a private RabbitMQ node with its
# STOMP plugin on 127.0.0.1:61623 (stomp+ssl 61624). Idempotent: safe to run twice.
#
# ActiveMQ also listens with stomp+ssl on 127.0.0.1:61612, and with stomp+ssl requiring a
# client certificate on 127.0.0.1:61611. Each broker start makes a new CA and keystores
# (scripts/broker-tls.sh) in $AMQ_BASE/conf/tls: ca.pem, client.pem and client-key.pem
# there are what INBOXD_STOMP_CA_FILE, _CERT_FILE and _KEY_FILE take, and where the
# tests look (internal/testenv, INBOXD_TEST_BROKER_TLS_DIR).
#
# The RabbitMQ node is inboxd's own (node inboxd-rabbit@localhost, AMQP 5682, distribution
# 25682, data, logs and Erlang cookie under $RMQ_BASE, plugins enabled for it alone through
# RABBITMQ_ENABLED_PLUGINS_FILE): a system RabbitMQ on 5672/25672 and /etc/rabbitmq are
# left alone. Its TLS material (PEM, openssl) is in $RMQ_BASE/tls, the same file names.
#
#   scripts/services.sh [up|down|browser|status|rabbitmq-up|rabbitmq-down|rabbitmq-fresh]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
AMQ_BASE=${AMQ_BASE:-/var/lib/inboxd-activemq}
AMQ_LOG=${AMQ_LOG:-/var/log/inboxd-activemq.log}
STOMP_PORT=61613
STOMP_TLS_PORTS=(61612 61611)
PG_PORT=5432
RMQ_BASE=${RMQ_BASE:-/var/lib/inboxd-rabbitmq}
RMQ_NODE=inboxd-rabbit@localhost
RMQ_AMQP_PORT=5682
RMQ_DIST_PORT=25682
RMQ_STOMP_PORT=61623
RMQ_STOMP_TLS_PORT=61624

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

# The environment of every command that talks to the private node: its own HOME (where
# its Erlang cookie lives, so that root in CI needs no other), config and directories.
rabbitmq_env() {
  export HOME="$RMQ_BASE" RABBITMQ_NODENAME="$RMQ_NODE" RABBITMQ_CONFIG_FILE="$RMQ_BASE/rabbitmq" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ_BASE/enabled_plugins" RABBITMQ_MNESIA_BASE="$RMQ_BASE/mnesia" \
    RABBITMQ_LOG_BASE="$RMQ_BASE/log" RABBITMQ_DIST_PORT="$RMQ_DIST_PORT" RABBITMQ_PID_FILE="$RMQ_BASE/pid" \
    RABBITMQ_CONF_ENV_FILE="$RMQ_BASE/rabbitmq-env.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ_BASE/advanced.config" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" # distribution on loopback only
}

# The private node's Erlang VM: the one whose home is $RMQ_BASE (the system node's is
# /var/lib/rabbitmq), so that nothing here ever matches the system RabbitMQ.
rabbitmq_pids() { pgrep -f -- "beam.smp .* -home $RMQ_BASE -- "; }

# STOMP answers when a CONNECT as guest to the virtual host / gets CONNECTED.
rabbitmq_stomp_ok() {
  local out
  out=$( (exec 3<>"/dev/tcp/127.0.0.1/$RMQ_STOMP_PORT" || exit 1
    printf 'CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0' >&3
    timeout 3 head -c 9 <&3) 2>/dev/null) || return 1
  [[ $out == CONNECTED ]]
}

# Server-authenticated TLS material for the stomp+ssl listener, made with openssl (the
# node reads PEM): ca.pem, server.pem, server-key.pem, and client.pem/client-key.pem for
# a client certificate. A new CA on every start, as for ActiveMQ.
rabbitmq_tls() {
  local d=$RMQ_BASE/tls w
  mkdir -p "$d"
  w=$(mktemp -d)
  (
    cd "$w"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca-key.pem -out ca.pem \
      -days 3650 -subj "/CN=inboxd development rabbitmq CA" -addext basicConstraints=critical,CA:true \
      -addext keyUsage=keyCertSign,cRLSign 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server-key.pem \
      -subj "/CN=inboxd rabbitmq" -out server.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 825 -extfile server.ext \
      -out server.pem 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout client-key.pem \
      -subj "/CN=inboxd-test-client" -out client.csr 2>/dev/null
    printf 'keyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 825 -extfile client.ext \
      -out client.pem 2>/dev/null
    chmod 600 ca-key.pem server-key.pem client-key.pem
    chmod 644 ca.pem server.pem client.pem
    mv -f ca.pem ca-key.pem server.pem server-key.pem client.pem client-key.pem "$d/"
  )
  rm -rf "$w"
}

rabbitmq_up() {
  if port_open "$RMQ_STOMP_PORT" && port_open "$RMQ_STOMP_TLS_PORT" && rabbitmq_stomp_ok; then
    log "rabbitmq already up on 127.0.0.1:$RMQ_STOMP_PORT (TLS $RMQ_STOMP_TLS_PORT)"
    return
  fi
  if [[ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]]; then
    log "installing rabbitmq-server"
    apt_install rabbitmq-server
    # The package starts a system node where systemd runs; that one is left alone.
  fi
  command -v openssl >/dev/null || apt_install openssl
  if rabbitmq_pids >/dev/null; then
    log "rabbitmq node $RMQ_NODE is running but STOMP does not answer yet; waiting"
  else
    mkdir -p "$RMQ_BASE/mnesia" "$RMQ_BASE/log"
    # The node's own cookie, in its own HOME: the Erlang distribution and rabbitmqctl read it there.
    if [[ ! -f $RMQ_BASE/.erlang.cookie ]]; then
      head -c 30 /dev/urandom | base64 | tr -dc 'A-Za-z' | head -c 20 >"$RMQ_BASE/.erlang.cookie"
      chmod 400 "$RMQ_BASE/.erlang.cookie"
    fi
    rabbitmq_tls
    cp "$here/rabbitmq.conf" "$RMQ_BASE/rabbitmq.conf"
    sed -i "s|@BASE@|$RMQ_BASE|g; s|@AMQP@|$RMQ_AMQP_PORT|; s|@STOMP@|$RMQ_STOMP_PORT|; s|@STOMPTLS@|$RMQ_STOMP_TLS_PORT|" \
      "$RMQ_BASE/rabbitmq.conf"
    echo '[rabbitmq_stomp].' >"$RMQ_BASE/enabled_plugins"
    : >"$RMQ_BASE/rabbitmq-env.conf"
    echo '[].' >"$RMQ_BASE/advanced.config"
    log "starting rabbitmq node $RMQ_NODE (base $RMQ_BASE, log $RMQ_BASE/log)"
    (
      rabbitmq_env
      cd "$RMQ_BASE"
      setsid nohup /usr/lib/rabbitmq/bin/rabbitmq-server >>"$RMQ_BASE/log/console.log" 2>&1 </dev/null &
    )
  fi
  wait_port rabbitmq "$RMQ_STOMP_PORT" 120 || { tail -30 "$RMQ_BASE/log/console.log" >&2; return 1; }
  wait_port "rabbitmq stomp+ssl" "$RMQ_STOMP_TLS_PORT" 30 || { tail -30 "$RMQ_BASE/log/console.log" >&2; return 1; }
  local deadline=$((SECONDS + 30))
  until rabbitmq_stomp_ok; do
    ((SECONDS >= deadline)) && { log "rabbitmq STOMP does not answer CONNECT"; return 1; }
    sleep 0.5
  done
  log "rabbitmq STOMP answers CONNECT on 127.0.0.1:$RMQ_STOMP_PORT"
}

# Stops the private node only, by its node name and cookie; the system node is not touched.
rabbitmq_down() {
  if ! rabbitmq_pids >/dev/null; then log "rabbitmq node $RMQ_NODE not running"; return; fi
  log "stopping rabbitmq node $RMQ_NODE"
  (rabbitmq_env; /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RMQ_NODE" stop >/dev/null 2>&1) || true
  local deadline=$((SECONDS + 30)) pids
  while pids=$(rabbitmq_pids); do
    if ((SECONDS >= deadline)); then kill -9 $pids 2>/dev/null || true; break; fi
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
    postgres_up; activemq_up; rabbitmq_up ;;
  down) activemq_down; rabbitmq_down ;;
  rabbitmq-up) rabbitmq_up ;;
  rabbitmq-down) rabbitmq_down ;;
  rabbitmq-restart) rabbitmq_down; rabbitmq_up ;;
  # Stops the node and empties its store (queues, durable subscriptions, messages).
  rabbitmq-fresh) rabbitmq_down; rm -rf "${RMQ_BASE:?}/mnesia" ;;
  activemq-restart) activemq_down; activemq_up ;;
  # Stops the broker and empties its store; `up` then starts it clean. CI runs it first:
  # messages earlier runs left unconsumed (gigabytes, after benchmarks) would slow the
  # broker's start and crowd its 512 MB heap (a 21 MiB test publish met OutOfMemoryError).
  activemq-fresh) activemq_down; rm -rf "${AMQ_BASE:?}/data/kahadb" ;;
  browser) browser_install ;;
  status)
    port_open "$PG_PORT" && log "postgresql up" || log "postgresql down"
    port_open "$STOMP_PORT" && log "activemq up" || log "activemq down"
    port_open "${STOMP_TLS_PORTS[0]}" && log "activemq stomp+ssl up" || log "activemq stomp+ssl down"
    rabbitmq_stomp_ok && log "rabbitmq stomp up" || log "rabbitmq stomp down" ;;
  *) echo "usage: $0 [up|down|activemq-restart|activemq-fresh|rabbitmq-up|rabbitmq-down|rabbitmq-restart|rabbitmq-fresh|browser|status]" >&2; exit 2 ;;
esac
