"""The tool views a turn offers the model: shared by every session of one catalogue (so the gateway
validates each spec once), and new ones as soon as the catalogue changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS
from minihermes.context.assembly import list_tools
from minihermes.llm import ToolView
from minihermes.runtime import ActorSpec, GenServer, call
from tests.agent.doubles import WEATHER

from .conftest import ACME, GLOBEX

VIEWS: list[list[dict[str, Any]]] = []


class Turn(GenServer):
    """Lists the tools as a turn does (``list_tools``), keeping the views it got."""

    @call
    async def tools(self) -> list[str]:
        views = await list_tools(self.host)
        VIEWS.append(views)
        return [v["name"] for v in views]


def specs(tmp_path: Path) -> list[ActorSpec]:
    return [
        ActorSpec(
            "tool_executor",
            ToolExecutor,
            per_tenant=True,
            args={"workspace_root": str(tmp_path), "toolsets": TOOLSETS},
        ),
        ActorSpec("turn", Turn, virtual=True),
    ]


async def test_sessions_of_one_catalogue_share_its_views_and_a_change_makes_new_ones(make_node, tmp_path):
    VIEWS.clear()
    node = await make_node(specs(tmp_path))
    first = await node.ask("turn/s1", "tools", ctx=ACME)
    assert first == sorted(first) and "calculator" in first
    await node.ask("turn/s2", "tools", ctx=ACME)
    a, b = VIEWS
    assert a is not b and all(x is y for x, y in zip(a, b, strict=True))  # the same objects, a list each
    assert all(type(v) is ToolView for v in a)
    a.clear()  # a turn's list is its own: changing it changes nobody else's
    assert await node.ask("turn/s3", "tools", ctx=ACME) == first

    await node.ask("tool_executor", "register_tool", WEATHER, ctx=ACME)
    changed = await node.ask("turn/s4", "tools", ctx=ACME)
    assert changed == sorted([*first, "weather"])
    # another tenant's catalogue is still the built-ins: the same bytes, the same views
    assert await node.ask("turn/s5", "tools", ctx=GLOBEX) == first
    assert all(x is y for x, y in zip(VIEWS[-1], b, strict=True))
