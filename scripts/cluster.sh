#!/usr/bin/env bash
# A three-node MiniHermes cluster on loopback: nats-server (scripts/nats.sh), PostgreSQL when
# scripts/postgres.sh can start it (else one shared SQLite data dir), and three `minihermes serve` nodes
# (HTTP on 127.0.0.1:8101-8103) running the agent app with a [cluster] section. Everything lives under
# .cache/cluster; the same shape as docker-compose.yml, for machines without Docker.
#   scripts/cluster.sh up        start what is not running; prints the nodes' URLs
#   scripts/cluster.sh status    which nodes answer /readyz
#   scripts/cluster.sh down      stop the nodes (gracefully: their leases are released at once)
#   scripts/cluster.sh kill N    SIGKILL node N (1-3), to watch the others take over its sessions
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
DIR="$ROOT/.cache/cluster"
BASE_PORT="${MINIHERMES_CLUSTER_BASE_PORT:-8100}"
log() { echo "cluster.sh: $*" >&2; }

node_pid() { cat "$DIR/n$1.pid" 2>/dev/null || true; }
alive() { local p; p="$(node_pid "$1")"; [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

up() {
  mkdir -p "$DIR"
  chmod 700 "$DIR"
  eval "$(bash scripts/nats.sh)"
  local backend="sqlite"
  if [ "${MINIHERMES_CLUSTER_BACKEND:-}" != "sqlite" ] && pg="$(bash scripts/postgres.sh start 2>>"$DIR/postgres.log")"; then
    eval "$pg"
    backend="postgres"
  else
    log "PostgreSQL unavailable (see $DIR/postgres.log): the nodes share one SQLite data dir"
  fi
  export MINIHERMES_NATS_URL MINIHERMES_NATS_USER MINIHERMES_NATS_PASSWORD MINIHERMES_CLUSTER_SECRET
  [ "$backend" = "postgres" ] && export MINIHERMES_PG_DSN
  "$PY" -c 'import sys; from pathlib import Path; from minihermes.app import prepare_data_dir; prepare_data_dir(Path(sys.argv[1]))' "$DIR/data"  # once, before three nodes race for its credential key
  for i in 1 2 3; do
    "$PY" -m minihermes.cluster.nodeconfig "n$i" --data-dir "$DIR/data" --name local --schema minihermes_cluster \
      $([ "$backend" = "sqlite" ] && echo --sqlite) >"$DIR/n$i.toml"
  done
  for i in 1 2 3; do
    if alive "$i"; then log "n$i already running (pid $(node_pid "$i"))"; continue; fi
    setsid "$ROOT/.venv/bin/minihermes" serve --config "$DIR/n$i.toml" --port $((BASE_PORT + i)) \
      >>"$DIR/n$i.log" 2>&1 </dev/null &
    echo $! >"$DIR/n$i.pid"
  done
  for i in 1 2 3; do
    local deadline=$((SECONDS + 90))
    until curl -fsS "http://127.0.0.1:$((BASE_PORT + i))/readyz" >/dev/null 2>&1; do
      if ! alive "$i" || [ $SECONDS -gt $deadline ]; then log "n$i did not start; see $DIR/n$i.log"; exit 1; fi
      sleep 0.5
    done
    log "n$i ready: http://127.0.0.1:$((BASE_PORT + i)) (store: $backend)"
  done
}

status() {
  for i in 1 2 3; do
    if curl -fsS "http://127.0.0.1:$((BASE_PORT + i))/readyz" >/dev/null 2>&1; then
      echo "n$i up   http://127.0.0.1:$((BASE_PORT + i)) (pid $(node_pid "$i"))"
    else
      echo "n$i down"
    fi
  done
}

down() {
  for i in 1 2 3; do
    if alive "$i"; then kill -TERM "$(node_pid "$i")"; fi
  done
  for i in 1 2 3; do
    local deadline=$((SECONDS + 20))
    while alive "$i" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    rm -f "$DIR/n$i.pid"
  done
  log "nodes stopped (nats-server and PostgreSQL keep running: scripts/nats.sh down, scripts/postgres.sh stop)"
}

case "${1:-up}" in
  up) up ;;
  status) status ;;
  down) down ;;
  kill)
    n="${2:?which node (1-3)}"
    alive "$n" && kill -KILL "$(node_pid "$n")" && log "n$n killed" ;;
  *) echo "usage: scripts/cluster.sh up|status|down|kill N" >&2; exit 2 ;;
esac
