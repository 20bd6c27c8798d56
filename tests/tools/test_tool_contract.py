"""The tool contract: a built-in tool is one ``Tool`` in one module (``word_tool.py``), given to the tool
executor by the composition root's toolsets (``minihermes/app.py``), never by being imported."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes import app
from minihermes.runtime import ConfigError, Node, RequestContext

from .word_tool import WORDS_TOOLSET

ADMIN = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))
VIEWER = RequestContext(tenant="acme", principal="vic", roles=frozenset({"viewer"}))


@pytest.fixture
async def agent_node(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await agent_node(toolsets=...)``: the agent app, its tool executor given ``toolsets`` when set."""
    nodes: list[Node] = []

    async def start(**executor_args: Any) -> Node:
        config = app.default_config(tmp_path / f"data{len(nodes)}")
        for spec in config.tree.walk():
            if spec.name == "tool_executor":
                spec.args.update(executor_args)
            elif spec.name == "memory":
                spec.args["semantic"] = False
            elif spec.name == "skill_store":
                spec.args["semantic"] = "off"
        node = app.build_agent_node(config)
        await node.start()
        nodes.append(node)
        return node

    yield start
    for node in nodes:
        await node.stop(deadline=5)


async def names(node: Node) -> list[str]:
    listing = await node.ask("tool_executor", "list_tools", {}, ctx=ADMIN)
    return [t["name"] for t in listing["tools"]]


async def execute(node: Node, payload: dict[str, Any], ctx: RequestContext = ADMIN) -> Any:
    return await node.ask("tool_executor", "execute", {"session_id": "s1", **payload}, ctx=ctx)


async def test_a_toolset_listed_in_the_composition_root_is_listed_and_run(agent_node, monkeypatch):
    monkeypatch.setattr(app, "TOOLSETS", (*app.TOOLSETS, WORDS_TOOLSET))
    node = await agent_node()
    assert "word_count" in await names(node)
    ok = await execute(node, {"name": "word_count", "input": {"text": "one two three"}})
    assert ok["status"] == "ok" and ok["result"] == {"words": 3, "session": "s1"} and not ok["untrusted"]
    failed = await execute(node, {"name": "word_count", "input": {"text": "one", "min_words": 2}})
    assert failed["status"] == "error" and failed["error"]["code"] == "too_short"
    bad = await execute(node, {"name": "word_count", "input": {"words": "x"}})
    assert bad["status"] == "error" and bad["error"]["code"] == "invalid_input"
    viewer = await execute(node, {"name": "word_count", "input": {"text": "a b"}}, ctx=VIEWER)
    assert viewer["status"] == "ok"  # a read tool: the viewer may run it
    described = await node.ask("tool_executor", "describe_tool", {"name": "word_count"}, ctx=ADMIN)
    assert described["builtin"] and described["permission"] == {"access": "read"}
    assert WORDS_TOOLSET.tools[0].toolset == "words"


async def test_without_the_toolset_there_is_no_tool(agent_node):
    node = await agent_node()  # the app's toolsets, which do not have it: importing the module is not enough
    assert "word_count" not in await names(node) and "kanban_create" in await names(node)
    missing = await execute(node, {"name": "word_count", "input": {"text": "a"}})
    assert missing["status"] == "error" and missing["error"]["code"] == "unknown_tool"


async def test_an_embedding_program_gives_its_own_toolset_in_the_config(agent_node):
    node = await agent_node(toolsets=[*app.TOOLSETS, WORDS_TOOLSET])
    ok = await execute(node, {"name": "word_count", "input": {"text": "a b"}})
    assert ok["status"] == "ok" and ok["result"]["words"] == 2


async def test_toolsets_are_chosen_by_name_in_the_config(agent_node, monkeypatch):
    monkeypatch.setattr(app, "TOOLSETS", (*app.TOOLSETS, WORDS_TOOLSET))
    node = await agent_node(toolsets=["compute", "words"])
    assert await names(node) == ["calculator", "word_count"]
    with pytest.raises(ConfigError, match=r"unknown toolset 'nope'.*known: compute, memory"):
        app.toolsets_for(["compute", "nope"])
