"""Fixtures: nodes on a real SQLite store in a temp dir, with a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import ActorSpec, ManualClock, Node, NodeOptions, SupervisorSpec
from minihermes.runtime.store._pg_testing import open_test_store

NodeFactory = Callable[..., Any]


def tree(*children: ActorSpec | SupervisorSpec, strategy: str = "one_for_one", **kw: Any) -> SupervisorSpec:
    return SupervisorSpec(name="root", strategy=strategy, children=list(children), **kw)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def make_node(tmp_path: Path, clock: ManualClock) -> AsyncIterator[NodeFactory]:
    """make_node(tree, data_dir=None, clock=None, **NodeOptions) -> started Node; all stopped at teardown."""
    nodes: list[Node] = []

    async def factory(
        spec: SupervisorSpec, *, data_dir: Path | None = None, use_clock: Any = None, **opts: Any
    ) -> Node:
        c = use_clock if use_clock is not None else clock
        store = await open_test_store(data_dir or tmp_path / "data", clock=c)  # MINIHERMES_TEST_STORE
        node = Node(store, spec, options=NodeOptions(**opts), clock=c)
        await node.start()
        nodes.append(node)
        return node

    yield factory
    for n in nodes:
        await n.stop(deadline=5)


async def until(predicate: Callable[[], Any], limit: int = 100_000) -> None:
    """Yield to the event loop until an async predicate holds (progress-driven, no wall-clock sleeps)."""
    import asyncio

    for _ in range(limit):
        if await predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")
