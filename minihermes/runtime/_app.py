"""Build a node from an app config."""

from __future__ import annotations

from ._clock import Clock
from ._config import AppConfig
from ._links import ServiceLinks
from ._node import Node
from .store import open_store


def build_node(config: AppConfig, *, clock: Clock | None = None) -> Node:
    """A node for this config with its store (not started: ``await node.start()``)."""
    n = config.model.node
    options = dict(n.backend_options)
    if n.backend == "sqlite":
        options.setdefault("data_dir", str(config.data_dir))
    store = open_store(n.backend, clock=clock, **options)
    node = Node(
        store, config.tree, options=config.node_options, clock=clock, links=ServiceLinks(config.links)
    )
    if config.model.cluster.enabled:
        # Imported only for clustered nodes: the fabric is a plug-in over the runtime (nats-py and all).
        from minihermes.cluster import Cluster, ClusterSettings

        node.fabric = Cluster(ClusterSettings.from_model(config.model.cluster))
    return node
