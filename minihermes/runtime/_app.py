"""Build a node from an app config."""

from __future__ import annotations

from ._clock import Clock
from ._config import AppConfig
from ._datadir import DataDirLock
from ._fabric import open_fabric
from ._links import ServiceLinks
from ._node import Node
from .store import open_store


def build_node(config: AppConfig, *, clock: Clock | None = None) -> Node:
    """A node for this config with its store (not started: ``await node.start()``); unclustered on SQLite, it
    holds its data dir's lock while it runs (``DataDirLock``)."""
    n = config.model.node
    options = dict(n.backend_options)
    if n.backend == "sqlite":
        options.setdefault("data_dir", str(config.data_dir))
    elif n.backend == "postgres":
        # The node key that signs retention anchors: on SQLite beside the database, here in the data dir.
        options.setdefault("anchor_key_file", str(config.data_dir / "anchor.key"))
    store = open_store(n.backend, clock=clock, **options)
    node = Node(
        store, config.tree, options=config.node_options, clock=clock, links=ServiceLinks(config.links)
    )
    cluster = config.model.cluster
    if cluster.enabled:
        # A fabric is a plug-in registered by name (``register_fabric``), imported only for clustered nodes.
        node.fabric = open_fabric(cluster.fabric, cluster)
    elif n.backend == "sqlite" and not n.shared_data_dir:
        # One node per SQLite data dir (two schedulers, two activations of one actor, and SQLite's multi-writer
        # WAL-reset bug otherwise). Cluster nodes share a dir on purpose, under the fabric's leases, and so do
        # nodes configured with ``shared_data_dir`` (the work actors' KV compare-and-set keeps runs single).
        node.data_dir_lock = DataDirLock(options["data_dir"])
    return node
