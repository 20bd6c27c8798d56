"""Subsystem tools: a package adds a built-in tool (in a toolset given to the executor) that talks to its own
actor; nodes without that actor neither list nor run it, and executors not given the toolset do not have it."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.agent.tool_executor import ToolExecutor
from minihermes.runtime import ActorSpec, GenServer, call
from minihermes.tools import CORE_TOOLSETS, READ, TRUSTED, Catalog, Tool, ToolEnv, Toolset

from .conftest import ACME


class Echo(GenServer):
    @call
    def shout(self, text: str) -> dict[str, Any]:
        return {"text": text.upper()}


async def _echo_tool(args: dict[str, Any], env: ToolEnv) -> Any:
    return await env.host.ask("echo_svc", "shout", {"text": args["text"]})


ECHO = Toolset(
    "echo",
    [
        Tool(
            "echo_upper",
            "Upper-case a text (test tool).",
            {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
            READ,
            TRUSTED,
            handler=_echo_tool,
            requires="echo_svc",
        )
    ],
)
TOOLSETS = [*CORE_TOOLSETS, ECHO]


async def test_a_subsystem_tool_is_listed_and_runs_only_where_its_actor_is(make_node, tmp_path):
    bare = await make_node(
        [ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args={"toolsets": TOOLSETS})],
        data_dir=tmp_path / "a",
    )
    names = [t["name"] for t in (await bare.ask("tool_executor", "list_tools", {}, ctx=ACME))["tools"]]
    assert "echo_upper" not in names
    out = await bare.ask("tool_executor", "execute", {"name": "echo_upper", "input": {"text": "x"}}, ctx=ACME)
    assert out["status"] == "error" and out["error"]["code"] == "unknown_tool"

    full = await make_node(
        [
            ActorSpec("echo_svc", Echo),
            ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args={"toolsets": TOOLSETS}),
        ],
        data_dir=tmp_path / "b",
    )
    names = [t["name"] for t in (await full.ask("tool_executor", "list_tools", {}, ctx=ACME))["tools"]]
    assert "echo_upper" in names
    out = await full.ask(
        "tool_executor", "execute", {"name": "echo_upper", "input": {"text": "hi"}}, ctx=ACME
    )
    assert out["status"] == "ok" and out["result"] == {"text": "HI"}
    bad = await full.ask("tool_executor", "execute", {"name": "echo_upper", "input": {}}, ctx=ACME)
    assert bad["status"] == "error" and bad["error"]["code"] == "invalid_input"


async def test_an_executor_not_given_the_toolset_has_not_the_tool(make_node, tmp_path):
    node = await make_node(
        [ActorSpec("echo_svc", Echo), ActorSpec("tool_executor", ToolExecutor, per_tenant=True)],
        data_dir=tmp_path / "c",
    )
    names = [t["name"] for t in (await node.ask("tool_executor", "list_tools", {}, ctx=ACME))["tools"]]
    assert "echo_upper" not in names and "calculator" in names  # the core toolsets only


def test_a_taken_name_is_refused():
    clash = Toolset("clash", [Tool("calculator", "x", {"type": "object"}, READ, TRUSTED, handler=_echo_tool)])
    with pytest.raises(ValueError, match="both have 'calculator'"):
        Catalog([*CORE_TOOLSETS, clash])
    with pytest.raises(ValueError, match="given twice"):
        Catalog([ECHO, ECHO])
    twice = Tool("echo_upper", "x", {"type": "object"}, READ, TRUSTED, handler=_echo_tool)
    with pytest.raises(ValueError, match="two tools named"):
        Toolset("echo", [twice, twice])
