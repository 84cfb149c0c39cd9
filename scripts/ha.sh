#!/usr/bin/env bash
# A local pg_auto_failover formation: monitor, primary, synchronous secondary.
#
#   scripts/ha.sh up     install the packages if missing, start the three nodes,
#                        create the database, print DATABASE_URL (idempotent)
#   scripts/ha.sh url    print DATABASE_URL of a running formation
#   scripts/ha.sh check-ports
#                        fail at once, naming the port, if one of the formation's
#                        ports is taken by something else (`up` runs it first)
#   scripts/ha.sh state  pg_autoctl show state
#   scripts/ha.sh down   stop every node and remove the data directories
#
# Each node runs `pg_autoctl run` as the postgres user (pg_autoctl refuses root) in
# its own data directory under $HA_DIR; the ports are HA_PORT (monitor), +1, +2.
# The default, 25432, is below Linux's ephemeral range (32768-60999 by default,
# /proc/sys/net/ipv4/ip_local_port_range): a port in that range can be held by any
# outgoing connection (a benchmark's thousands of them), and PostgreSQL then fails
# to bind it.
# The health-check settings of the monitor are shortened (HA_FAST=1, the default)
# so that a lost primary is replaced in seconds on one machine; docs/ha.md says
# which values to keep in production.
set -euo pipefail

HA_DIR=${HA_DIR:-/tmp/sendlater-ha}
HA_PORT=${HA_PORT:-25432}
HA_DB=${HA_DB:-sendlater}
HA_FAST=${HA_FAST:-1}
HA_USER=${HA_USER:-postgres}
MONITOR_PORT=$HA_PORT
NODE_PORTS=("$((HA_PORT + 1))" "$((HA_PORT + 2))")
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)

# pg_autoctl keeps its configuration, state and pid files under the XDG directories
# (by default in the user's home and /tmp): all of them under HA_DIR, so that
# `down` removes every trace and a later `up` starts clean.
as_pg() {
  local xdg=(XDG_CONFIG_HOME="$HA_DIR/xdg/config" XDG_DATA_HOME="$HA_DIR/xdg/data"
    XDG_RUNTIME_DIR="$HA_DIR/xdg/run" PATH="$PGBIN:$PATH" PG_CONFIG="$PGBIN/pg_config")
  if [ "$(id -un)" = "$HA_USER" ]; then env "${xdg[@]}" "$@"; else
    runuser -u "$HA_USER" -- env "${xdg[@]}" "$@"; fi
}

install_packages() {
  if command -v pg_autoctl >/dev/null && command -v pgbouncer >/dev/null; then return; fi
  echo "ha: installing postgresql-15-auto-failover and pgbouncer" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15-auto-failover pgbouncer >/dev/null
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
}

port_holders() { # $1 port: the sockets bound to it (listening or connected), one a line
  if command -v ss >/dev/null; then
    ss -Htan "( sport = :$1 )" | grep -v '^TIME-WAIT' || true
  else # no iproute2: whether it binds, as PostgreSQL will (SO_REUSEADDR, all addresses)
    python3 - "$1" <<'PY' || echo "bind failed"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
PY
  fi
}

check_ports() { # every port of a node not running yet must be free: stop at once if not
  local names=(monitor node1 node2) ports=("$MONITOR_PORT" "${NODE_PORTS[@]}") i holders
  local range low high
  range=$(cat /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo "32768 60999")
  read -r low high <<<"$range"
  for i in 0 1 2; do
    if running "$HA_DIR/${names[$i]}"; then continue; fi
    holders=$(port_holders "${ports[$i]}")
    if [ -n "$holders" ]; then
      echo "ha: port ${ports[$i]} (${names[$i]}) is taken; free it or set HA_PORT (the" \
        "formation uses HA_PORT .. HA_PORT+2, now ${ports[0]}-${ports[2]}):" >&2
      echo "$holders" | head -n5 | sed 's/^/ha:   /' >&2
      return 1
    fi
    if [ "${ports[$i]}" -ge "$low" ] && [ "${ports[$i]}" -le "$high" ]; then
      echo "ha: warning: port ${ports[$i]} (${names[$i]}) is inside the ephemeral range" \
        "$low-$high: an outgoing connection may take it" >&2
    fi
  done
}

url() {
  echo "postgres://postgres@127.0.0.1:${NODE_PORTS[0]},127.0.0.1:${NODE_PORTS[1]}/$HA_DB?target_session_attrs=read-write"
}

running() { # pg_autoctl run of data directory $1 is alive
  pgrep -u "$HA_USER" -f "pg_autoctl run --pgdata $1\$" >/dev/null 2>&1
}

start() { # $1 data directory
  if running "$1"; then return; fi
  # setsid: the node outlives this shell and `make`, as a service would.
  as_pg setsid pg_autoctl run --pgdata "$1" >>"$1.log" 2>&1 </dev/null &
}

wait_for() { # $1 seconds, then a command that must succeed
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "ha: timed out waiting for: $*" >&2; return 1; fi
    sleep 1
  done
}

monitor_uri() { echo "postgres://autoctl_node@127.0.0.1:$MONITOR_PORT/pg_auto_failover?sslmode=disable"; }

node_state() { # $1 port: its current state according to the monitor
  as_pg psql -qtAX -p "$MONITOR_PORT" -h 127.0.0.1 -U postgres -d pg_auto_failover \
    -c "SELECT reportedstate FROM pgautofailover.node WHERE nodeport = $1"
}

primary_ready() { # $1 port: the node accepts writes
  [[ $(node_state "$1") =~ ^(single|wait_primary|primary)$ ]]
}

formation_ready() { # one primary and one secondary
  local a b
  a=$(node_state "${NODE_PORTS[0]}"); b=$(node_state "${NODE_PORTS[1]}")
  [[ "$a $b" == "primary secondary" || "$a $b" == "secondary primary" ]]
}

up() {
  check_ports
  install_packages
  mkdir -p "$HA_DIR/xdg/config" "$HA_DIR/xdg/data" "$HA_DIR/xdg/run"
  chown -R "$HA_USER" "$HA_DIR"
  chmod 700 "$HA_DIR/xdg/run"
  if [ ! -f "$HA_DIR/monitor/PG_VERSION" ]; then
    as_pg pg_autoctl create monitor --pgdata "$HA_DIR/monitor" --pgport "$MONITOR_PORT" \
      --hostname 127.0.0.1 --auth trust --no-ssl >>"$HA_DIR/create.log" 2>&1
  fi
  start "$HA_DIR/monitor"
  wait_for 60 as_pg pg_isready -q -h 127.0.0.1 -p "$MONITOR_PORT"
  if [ "$HA_FAST" = 1 ]; then
    # One machine, no network in between: declare a silent node dead after ~3 s.
    as_pg psql -qX -h 127.0.0.1 -p "$MONITOR_PORT" -U postgres -d pg_auto_failover <<'SQL' >/dev/null
ALTER SYSTEM SET pgautofailover.health_check_period = 1000;
ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000;
ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1;
ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500;
ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 3000;
-- The secondary waits this long for a lost primary to confirm its demotion
-- before taking over (30 s by default): a killed node never confirms.
ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 3000;
SELECT pg_reload_conf();
SQL
  fi
  local i node port
  for i in 0 1; do
    node="$HA_DIR/node$((i + 1))"; port=${NODE_PORTS[$i]}
    if [ ! -f "$node/PG_VERSION" ]; then
      as_pg pg_autoctl create postgres --pgdata "$node" --pgport "$port" --hostname 127.0.0.1 \
        --name "node$((i + 1))" --dbname "$HA_DB" --monitor "$(monitor_uri)" \
        --auth trust --no-ssl --pg-hba-lan >>"$HA_DIR/create.log" 2>&1
      # The service and the tests connect as postgres over TCP (the tests also
      # create and drop their own database).
      echo "host all all 127.0.0.1/32 trust" >>"$node/pg_hba.conf"
    fi
    start "$node"
    wait_for 120 as_pg pg_isready -q -h 127.0.0.1 -p "$port"
    # Only once this node is up may the next one clone it.
    if [ "$i" = 0 ]; then
      wait_for 120 primary_ready "$port"
    fi
  done
  wait_for 180 formation_ready
  url
}

down() {
  local dir pid
  for dir in "$HA_DIR/node2" "$HA_DIR/node1" "$HA_DIR/monitor"; do
    [ -d "$dir" ] || continue
    as_pg pg_autoctl stop --pgdata "$dir" --immediate >/dev/null 2>&1 || true
  done
  sleep 1
  # Whatever is left (a node killed by the failover scenario leaves none, a stuck
  # one might): every process whose command line names our data directory.
  for pid in $(pgrep -u "$HA_USER" -f "$HA_DIR/" || true); do kill -9 "$pid" 2>/dev/null || true; done
  for dir in "$HA_DIR/node1" "$HA_DIR/node2" "$HA_DIR/monitor"; do
    if [ -f "$dir/postmaster.pid" ]; then kill -9 "$(head -n1 "$dir/postmaster.pid")" 2>/dev/null || true; fi
  done
  rm -rf "$HA_DIR"
  echo "ha: removed $HA_DIR"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  url) url ;;
  check-ports) check_ports ;;
  state) as_pg pg_autoctl show state --pgdata "$HA_DIR/monitor" ;;
  *) echo "usage: $0 up|down|url|state|check-ports" >&2; exit 2 ;;
esac
