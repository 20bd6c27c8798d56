"""The app config of one clustered agent node (TOML), for scripts/cluster.sh and docker-compose.yml.

    python -m minihermes.cluster.nodeconfig NODE_ID [--data-dir DIR] [--sqlite] [--name CLUSTER] > node.toml

PostgreSQL by default (the DSN is read from ``MINIHERMES_PG_DSN`` when the node starts, never written to the
file); ``--sqlite`` shares one SQLite data dir instead (nodes on one machine only). NATS and the cluster
secret also come from the environment (``MINIHERMES_NATS_URL``, ``..._USER``, ``..._PASSWORD``,
``MINIHERMES_CLUSTER_SECRET``).
"""

from __future__ import annotations

import argparse
import sys

from minihermes.runtime import AppConfig


def node_config(
    node_id: str,
    *,
    data_dir: str = "/data",
    backend: str = "postgres",
    cluster: str = "minihermes",
    schema: str = "minihermes",
    heartbeat: str = "1s",
    node_ttl: str = "3s",
) -> str:
    """The agent app's config for one node of a cluster (validated before it is returned)."""
    from minihermes.app import AGENT_CONFIG

    store = (
        f'\nbackend = "postgres"\nbackend_options = {{ dsn_env = "MINIHERMES_PG_DSN", schema = "{schema}" }}'
    )
    head = f'id = "{node_id}"\ndata_dir = "{data_dir}"' + (store if backend == "postgres" else "")
    text = AGENT_CONFIG.replace('id = "node-1"', head, 1)
    text += f'\n[cluster]\nenabled = true\nname = "{cluster}"\nheartbeat = "{heartbeat}"\nnode_ttl = "{node_ttl}"\n'
    AppConfig.from_toml(text, f"<node {node_id}>")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("node_id")
    ap.add_argument("--data-dir", default="/data")
    ap.add_argument("--sqlite", action="store_true", help="share one SQLite data dir instead of PostgreSQL")
    ap.add_argument("--name", default="minihermes", help="cluster name (subjects and buckets)")
    ap.add_argument("--schema", default="minihermes", help="PostgreSQL schema")
    args = ap.parse_args(argv)
    sys.stdout.write(
        node_config(
            args.node_id,
            data_dir=args.data_dir,
            backend="sqlite" if args.sqlite else "postgres",
            cluster=args.name,
            schema=args.schema,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
