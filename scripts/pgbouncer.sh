#!/usr/bin/env bash
# pgbouncer in transaction pooling mode in front of a PostgreSQL server, for the
# runs through pgbouncer (docs/postgres.md, "pgbouncer").
#
#   scripts/pgbouncer.sh up     install pgbouncer if missing, start it, print DATABASE_URL
#   scripts/pgbouncer.sh down   stop it and remove its directory
#
# PGB_SERVER_HOST/PGB_SERVER_PORT: the server behind it (default the local 5432);
# PGB_PORT: where it listens (default 55440); PGB_DB: the database in the URL.
set -euo pipefail

PGB_DIR=${PGB_DIR:-/tmp/sendlater-pgbouncer}
PGB_PORT=${PGB_PORT:-55440}
PGB_SERVER_HOST=${PGB_SERVER_HOST:-127.0.0.1}
PGB_SERVER_PORT=${PGB_SERVER_PORT:-5432}
PGB_DB=${PGB_DB:-sendlater}
PGB_USER=${PGB_USER:-postgres}  # pgbouncer refuses to run as root

as_user() { if [ "$(id -un)" = "$PGB_USER" ]; then "$@"; else runuser -u "$PGB_USER" -- "$@"; fi; }

up() {
  if ! command -v pgbouncer >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  fi
  mkdir -p "$PGB_DIR"
  cat >"$PGB_DIR/pgbouncer.ini" <<INI
[databases]
; Any database name, so the test suite's test_* databases pass through too.
* = host=$PGB_SERVER_HOST port=$PGB_SERVER_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir = $PGB_DIR
pidfile = $PGB_DIR/pgbouncer.pid
logfile = $PGB_DIR/pgbouncer.log
auth_type = trust
auth_file = $PGB_DIR/userlist.txt
admin_users = $PGB_USER
; A server connection is lent for one transaction: the service keeps no session
; state (docs/postgres.md, "pgbouncer").
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
reserve_pool_size = 5
server_reset_query =
ignore_startup_parameters = extra_float_digits
INI
  echo "\"$PGB_USER\" \"\"" >"$PGB_DIR/userlist.txt"
  chown -R "$PGB_USER" "$PGB_DIR"
  if [ -f "$PGB_DIR/pgbouncer.pid" ] && kill -0 "$(cat "$PGB_DIR/pgbouncer.pid")" 2>/dev/null; then
    as_user pgbouncer -R -d "$PGB_DIR/pgbouncer.ini" 2>/dev/null || kill -HUP "$(cat "$PGB_DIR/pgbouncer.pid")"
  else
    as_user pgbouncer -d "$PGB_DIR/pgbouncer.ini"
  fi
  for _ in $(seq 1 20); do
    pg_isready -q -h 127.0.0.1 -p "$PGB_PORT" && break
    sleep 0.5
  done
  echo "postgres://$PGB_USER@127.0.0.1:$PGB_PORT/$PGB_DB"
}

down() {
  if [ -f "$PGB_DIR/pgbouncer.pid" ]; then
    kill "$(cat "$PGB_DIR/pgbouncer.pid")" 2>/dev/null || true
    sleep 0.5
  fi
  rm -rf "$PGB_DIR"
  echo "pgbouncer: removed $PGB_DIR"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
