"""Several MiniHermes nodes as one system over NATS (see docs/cluster.md).

    from minihermes.cluster import Cluster, ClusterSettings

    node.fabric = Cluster(ClusterSettings(nats_url="nats://127.0.0.1:4222", secret=b"...", user=..., ...))
    await node.start()

``build_node`` does this for an app config with ``[cluster] enabled = true``.
"""

from ._fabric import Cluster, ClusterUnavailable, NodeDown
from ._settings import ClusterSettings
from ._wire import Unauthenticated

__all__ = ["Cluster", "ClusterSettings", "ClusterUnavailable", "NodeDown", "Unauthenticated"]
