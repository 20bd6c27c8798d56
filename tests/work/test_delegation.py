"""delegate_task: a child agent session with restricted tools and budgets; failures and timeouts come back
to the parent as tool errors; nested delegation stops at the depth limit."""

from __future__ import annotations

import asyncio
import json

import pytest

from minihermes.app import TOOLSETS
from minihermes.tools.catalog import Catalog
from minihermes.tools.contract import ToolFailure
from minihermes.work.delegation import CHILD_TIMEOUT, MAX_DEPTH, expand_toolsets

from . import doubles
from .conftest import ACME


def delegate(goal: str, toolsets: list[str]) -> dict:
    call = {
        "id": "c1",
        "name": "delegate_task",
        "input": {"goal": goal, "context": "ctx", "toolsets": toolsets},
    }
    return {"content": "", "stop_reason": "tool_use", "tool_calls": [call]}


def script(plan: dict[str, str]) -> None:
    """Sessions whose first user message mentions a key delegate its value; others answer. After a tool
    result, every session answers with that result."""

    def answer(session: str, messages: list[dict]) -> str | dict:
        last = messages[-1]
        if last["role"] == "tool":
            return f"parent saw: {last['content']}"
        for word, goal in plan.items():
            if word in last["content"] and (session.startswith("p") or session.startswith("delegate:")):
                return delegate(goal, ["compute", "delegation"])
        return "child summary"

    doubles.SCRIPT.answer = answer


def test_toolsets_expand_and_delegation_stops_at_the_last_level():
    toolsets = Catalog(TOOLSETS).toolsets  # what the app's tool executor hands the tool
    assert expand_toolsets(["compute", "memory_recall"], 1, toolsets) == ["calculator", "memory_recall"]
    assert expand_toolsets(["web"], 1, toolsets) == ["http_request"]
    assert "delegate_task" in expand_toolsets(["delegation"], MAX_DEPTH - 1, toolsets)
    assert "delegate_task" not in expand_toolsets(["delegation"], MAX_DEPTH, toolsets)
    with pytest.raises(ToolFailure, match="unknown toolset or tool 'nope'"):
        expand_toolsets(["nope"], 1, toolsets)


async def test_a_child_runs_with_its_own_tools_and_returns_its_summary(app_node):
    node = await app_node(scripted=True)
    script({"parent-goal": "child-goal"})
    reply = await node.ask("agent", "chat", {"message": "parent-goal", "session_id": "p"}, ctx=ACME)
    result = json.loads(reply["response"].removeprefix("parent saw: "))
    assert result["summary"] == "child summary" and result["depth"] == 1
    child = result["child_session"]
    assert doubles.SCRIPT.tools[child] == ["calculator", "delegate_task"]  # only what was delegated
    history = (await node.ask("agent", "get_history", {"session_id": child}, ctx=ACME))["messages"]
    assert history[0]["content"] == "child-goal\n\nContext:\nctx"  # its terms are the turn's instructions


async def test_nested_delegation_has_a_depth_limit(app_node):
    node = await app_node(scripted=True)
    script({"parent-goal": "level-1 goal", "level-1": "level-2 goal", "level-2": "level-3 goal"})
    reply = await node.ask("agent", "chat", {"message": "parent-goal", "session_id": "p"}, ctx=ACME)
    level1 = json.loads(reply["response"].removeprefix("parent saw: "))
    assert level1["depth"] == 1
    children = sorted(
        (s for s in doubles.SCRIPT.tools if s.startswith("delegate:")), key=doubles.SCRIPT.calls.index
    )
    assert len(children) == MAX_DEPTH
    assert "delegate_task" not in doubles.SCRIPT.tools[children[-1]]  # the last level is not offered it
    assert "delegate_task" in doubles.SCRIPT.tools[children[0]]


async def test_a_failing_or_hanging_child_is_a_tool_error_for_the_parent(app_node, clock):
    node = await app_node(scripted=True)
    script({"parent-goal": "child-goal"})

    doubles.SCRIPT.fail = _AllDelegates()  # every child's LLM call fails
    reply = await node.ask("agent", "chat", {"message": "parent-goal", "session_id": "p"}, ctx=ACME)
    err = json.loads(reply["response"].removeprefix("parent saw: "))
    assert err["error"]["code"] == "child_failed" and "llm_unavailable" in err["error"]["message"]

    doubles.SCRIPT.fail = set()
    hold = asyncio.Event()
    doubles.SCRIPT.hold = _HoldDelegates(hold)
    turn = asyncio.ensure_future(
        node.ask("agent", "chat", {"message": "parent-goal", "session_id": "p2"}, ctx=ACME, timeout=600)
    )
    await asyncio.sleep(0.2)
    await clock.advance(CHILD_TIMEOUT + 1)
    reply = await asyncio.wait_for(turn, 10)
    err = json.loads(reply["response"].removeprefix("parent saw: "))
    assert err["error"]["code"] == "child_timeout"
    hold.set()


class _AllDelegates(set):
    def __contains__(self, session: object) -> bool:
        return isinstance(session, str) and session.startswith("delegate:")


class _HoldDelegates(dict):
    def __init__(self, event: asyncio.Event) -> None:
        super().__init__()
        self.event = event

    def __contains__(self, session: object) -> bool:
        return isinstance(session, str) and session.startswith("delegate:")

    def __getitem__(self, session: str) -> asyncio.Event:
        return self.event
