#!/usr/bin/env bash
# A local PostgreSQL server for development and tests, under .cache/postgres of the repository.
#
#   scripts/postgres.sh start    # initdb on first use, start on a free loopback port, print the export line
#   scripts/postgres.sh env      # print `export MINIHERMES_PG_DSN=...` for a running server
#   scripts/postgres.sh status   # exit 0 if it is up
#   scripts/postgres.sh stop
#
# The server runs as the postgres OS user when started by root (PostgreSQL refuses to run as root), as the
# calling user otherwise. It listens on 127.0.0.1 only and every login needs a password (scram-sha-256). The
# database "minihermes" belongs to the role "minihermes", whose random password lives in
# .cache/postgres/password (mode 600); the superuser "postgres" has its own in .cache/postgres/superuser.
# The vector and unaccent extensions are created in that database, so the application role needs no
# superuser rights. Progress goes to stderr; stdout carries only export lines.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PG_MAJOR=${MINIHERMES_PG_MAJOR:-15}
BIN=/usr/lib/postgresql/$PG_MAJOR/bin
DIR=$ROOT/.cache/postgres
mkdir -p "$ROOT/.cache"
# The socket path must stay under ~100 bytes, and a server started by root runs as postgres, which must be
# able to reach its files: if the checkout is too deep or private, keep them in /var/tmp and link them from
# .cache/postgres, so every command finds them the same way.
if [ ! -e "$DIR" ] && { [ ${#DIR} -gt 70 ] ||
     { [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$ROOT/.cache"; }; }; then
  ALT=/var/tmp/minihermes-postgres-$(echo "$ROOT" | sha256sum | cut -c1-12)
  mkdir -p "$ALT"
  ln -s "$ALT" "$DIR"
fi
[ -L "$DIR" ] && DIR=$(readlink -f "$DIR")
DATA=$DIR/data
SOCK=$DIR/sock
DB=minihermes
ROLE=minihermes

log() { echo "postgres.sh: $*" >&2; }

as_server() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

port_in_use() {
  python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)
EOF
}

is_running() {
  [ -f "$DATA/postmaster.pid" ] && as_server "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

superuser_sql() {
  # Over the unix socket in .cache; local logins need the password too (initdb --auth=scram-sha-256).
  PGOPTIONS="-c client_min_messages=warning" PGPASSWORD="$(cat "$DIR/superuser")" "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$(cat "$DIR/port")" \
    -U postgres "$@"
}

init_cluster() {
  [ -f "$DATA/PG_VERSION" ] && return 0
  [ -x "$BIN/initdb" ] || { log "PostgreSQL $PG_MAJOR is not installed (run scripts/setup.d/10-postgres.sh)"; exit 1; }
  log "initdb in $DATA"
  mkdir -p "$DIR"
  umask 077
  head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$DIR/superuser"
  head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$DIR/password"
  umask 022
  free_port > "$DIR/port"
  mkdir -p "$DATA" "$SOCK"
  if [ "$(id -u)" -eq 0 ]; then
    chown -R postgres:postgres "$DIR"
    chmod 700 "$DATA"
    # the superuser password file is read by initdb, which runs as postgres
    chmod 600 "$DIR/superuser" "$DIR/password"
  fi
  # The parents of .cache must be traversable by the server user.
  as_server "$BIN/initdb" -D "$DATA" -U postgres --pwfile="$DIR/superuser" --auth=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >/dev/null
  # A throwaway dev/test server: synchronous_commit=off acknowledges a commit before its WAL is flushed (a
  # server crash may lose the last few; a client crash loses nothing). Production servers keep the default.
  cat >> "$DATA/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCK'
max_connections = 200
shared_buffers = 128MB
synchronous_commit = off
logging_collector = off
EOF
}

start() {
  init_cluster
  if ! is_running; then
    local port
    port=$(cat "$DIR/port")
    if port_in_use "$port"; then
      port=$(free_port)
      echo "$port" > "$DIR/port"
    fi
    log "starting on 127.0.0.1:$port"
    as_server "$BIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -o "-p $port" -w -t 60 start >/dev/null
  fi
  bootstrap
  env_line
}

bootstrap() {
  # Idempotent: role, database, extensions.
  local password
  password=$(cat "$DIR/password")
  superuser_sql -d postgres <<EOF
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', '$ROLE', '$password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$ROLE') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', '$DB', '$ROLE')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$DB') \gexec
EOF
  local have_vector
  have_vector=$(ls "$("$BIN/pg_config" --sharedir)/extension/vector.control" 2>/dev/null || true)
  superuser_sql -d "$DB" <<EOF
CREATE EXTENSION IF NOT EXISTS unaccent;
$( [ -n "$have_vector" ] && echo "CREATE EXTENSION IF NOT EXISTS vector;" )
EOF
  [ -n "$have_vector" ] || log "pgvector is not installed: the store will refuse to open (run scripts/setup.d/10-postgres.sh)"
}

env_line() {
  echo "export MINIHERMES_PG_DSN=postgresql://$ROLE:$(cat "$DIR/password")@127.0.0.1:$(cat "$DIR/port")/$DB"
}

case "${1:-}" in
  start) start ;;
  stop)
    if is_running; then as_server "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; log "stopped"; fi ;;
  status)
    if is_running; then log "running on 127.0.0.1:$(cat "$DIR/port")"; else log "not running"; exit 1; fi ;;
  env)
    is_running || { log "not running (scripts/postgres.sh start)"; exit 1; }
    env_line ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
