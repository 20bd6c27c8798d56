"""Fixtures for the work actors: the whole agent app (simulated LLM) on SQLite with a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import ManualClock, Node, RequestContext, SupervisorSpec

from .doubles import ScriptedGateway, reset

ACME = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))
ACME_VIEWER = RequestContext(tenant="acme", principal="vic", roles=frozenset({"viewer"}))
GLOBEX = RequestContext(tenant="globex", principal="gary", roles=frozenset({"admin"}))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(autouse=True)
def _script() -> None:
    reset()


@pytest.fixture
async def app_node(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Callable[..., Awaitable[Node]]]:
    """``await app_node()`` starts the agent app on ``tmp_path/data`` (again after a stop: a restart)."""
    nodes: list[Node] = []

    async def factory(
        data_dir: Path | None = None,
        *,
        scripted: bool = False,
        node_id: str = "",
        without: tuple[str, ...] = (),
        **args: Any,
    ) -> Node:
        """``scripted``: the LLM gateway is ``doubles.ScriptedGateway``; ``node_id``: for several nodes on one
        data dir; ``without``: actors left out of the tree; ``args``: actor name -> its args."""
        config = default_config(data_dir or tmp_path / "data")
        if node_id:
            config.model.node.id = node_id
        _leave_out(config.tree, set(without))
        # The semantic extra's model takes seconds to load and is not what these tests are about.
        args = {"memory": {"semantic": False}, "skill_store": {"semantic": "off"}, **args}
        for spec in config.tree.walk():
            if scripted and spec.name == "llm_gateway":
                spec.cls = ScriptedGateway
            spec.args.update(args.get(spec.name, {}))
        node = build_agent_node(config, clock=clock)
        if node_id:
            node.data_dir_lock = None  # several nodes on one store, as a cluster's share it
        await node.start()
        nodes.append(node)
        return node

    yield factory
    for n in nodes:
        await n.stop(deadline=5)


def _leave_out(sup: SupervisorSpec, names: set[str]) -> None:
    sup.children = [c for c in sup.children if isinstance(c, SupervisorSpec) or c.name not in names]
    for c in sup.children:
        if isinstance(c, SupervisorSpec):
            _leave_out(c, names)


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 20.0, what: str = "") -> Any:
    """Poll an async check (real time) until it returns something truthy; fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await check()
        if got:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.01)
