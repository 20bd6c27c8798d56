"""Fixtures for the agent's actors: a node on a real SQLite store with a manual clock.

Use ``make_node(SupervisorSpec(...))`` or ``make_node([ActorSpec(...), ...])``; nodes stop at teardown.
Contexts: ``ACME`` / ``GLOBEX`` admins, ``ACME_USER`` (role user), ``ACME_VIEWER``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.audit_event import STREAM as AUDIT_STREAM
from minihermes.runtime import ActorSpec, ManualClock, Node, NodeOptions, RequestContext, SupervisorSpec
from minihermes.runtime.store._pg_testing import open_test_store

ACME = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))
ACME_USER = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ACME_VIEWER = RequestContext(tenant="acme", principal="vic", roles=frozenset({"viewer"}))
GLOBEX = RequestContext(tenant="globex", principal="gary", roles=frozenset({"admin"}))


async def audit_trail(node: Node, *contexts: RequestContext) -> list[dict[str, Any]]:
    """What ``fire_audit`` wrote to the audit trails of the contexts' tenants (ACME's when none is given),
    read from the store: oldest first per tenant, each event's stored record plus its ``tenant``. The store
    answers once every append queued before the read is committed, so nothing fired earlier is missed."""
    events: list[dict[str, Any]] = []
    for ctx in contexts or (ACME,):
        for record in await node.store.events.read(ctx.scope, AUDIT_STREAM, limit=100_000):
            assert isinstance(record.data, dict)
            events.append({**record.data, "tenant": ctx.tenant})
    return events


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def make_node(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Callable[..., Any]]:
    nodes: list[Node] = []

    async def factory(
        spec: SupervisorSpec | list[ActorSpec],
        *,
        data_dir: Path | None = None,
        use_clock: Any = None,
        **opts: Any,
    ) -> Node:
        tree = spec if isinstance(spec, SupervisorSpec) else SupervisorSpec(name="root", children=list(spec))
        c = use_clock if use_clock is not None else clock
        node = Node(
            await open_test_store(data_dir or tmp_path / "data", clock=c),  # MINIHERMES_TEST_STORE
            tree,
            options=NodeOptions(**opts),
            clock=c,
        )
        await node.start()
        nodes.append(node)
        return node

    yield factory
    for n in nodes:
        await n.stop(deadline=5)
