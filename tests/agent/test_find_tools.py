"""Issue 24: a model can find the tools its turn was not offered (``find_tools``, ``minihermes.context.find_tools``).

The app's whole tree with the real LLM gateway talking to a fake OpenAI-compatible model on loopback: the
model plans its steps from the user's message, asks ``find_tools`` for the toolset it needs, then calls the
tool only if the next request offers it (as a real model would: it cannot call what it is not offered). The
toolsets found join the rest of the turn, a resume after an approval in a restarted node included, and with
``keep`` the session's next turns; a name that is no toolset is a tool error listing the valid ones."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse

from minihermes.app import TOOLSETS, build_agent_node, default_config
from minihermes.context import find_tools as finder
from minihermes.context.assembly import Catalogue
from minihermes.context.toolsets import Offering
from minihermes.llm import ToolView
from minihermes.runtime import ManualClock, Node
from minihermes.tools import ToolFailure
from minihermes.work.time_tools import GOALS_TOOLSET

from ..llm.support import StubServer
from .conftest import ACME, ACME_USER

PLANS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "put renew insurance on my to-do list": [
        ("find_tools", {"toolsets": ["kanban"]}),
        ("kanban_create", {"title": "renew insurance"}),
    ],
    "my objective for this chat is to plan a trip": [
        ("find_tools", {"toolsets": ["goals"]}),
        ("goal_set", {"goal": "plan a trip"}),
    ],
    "write the packing list, then set my objective: pack for the trip": [
        ("find_tools", {"toolsets": ["goals"]}),
        ("write_file", {"path": "packing.txt", "content": "socks"}),
        ("goal_set", {"goal": "pack for the trip"}),
    ],
    "from now on I will plan trips here": [("find_tools", {"toolsets": ["goals"], "keep": True})],
    "just look": [("find_tools", {"toolsets": ["kanbna"]})],
}
"""What the fake model does for each message: its tool calls in order (a message not here: a plain answer)."""


class FakeOpenAI(StubServer):
    """A local OpenAI-compatible model (/v1/chat/completions): it follows ``PLANS`` for the last user
    message, one call per round, and stops with "not offered: <tool>" when the next call's tool is not in
    the request's tools. Every request body is kept (``bodies``)."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    def offered(self, index: int = -1) -> set[str]:
        return {t["function"]["name"] for t in self.bodies[index].get("tools") or []}

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = json.loads(await Request(scope, receive).body() or b"{}")
        self.bodies.append(body)
        assert not body.get("stream"), "these turns are not streamed"
        await JSONResponse(_completion(_next(body)))(scope, receive, send)


def _next(body: dict[str, Any]) -> dict[str, Any]:
    """The next assistant message for a request: the plan's next call, or the answer."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    made = [
        call["function"]["name"]
        for m in messages[last_user + 1 :]
        if m["role"] == "assistant"
        for call in m.get("tool_calls") or []
    ]
    plan = PLANS.get(messages[last_user]["content"], [])
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if len(made) < len(plan):
        name, args = plan[len(made)]
        if name not in offered:
            return {"role": "assistant", "content": f"not offered: {name}"}
        call = {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function"}
        call["function"] = {"name": name, "arguments": json.dumps(args)}
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    results = [m["content"] for m in messages[last_user + 1 :] if m["role"] == "tool"]
    return {"role": "assistant", "content": f"done: {results[-1] if results else 'nothing to do'}"}


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-find",
        "object": "chat.completion",
        "created": 1,
        "model": "fake-finder",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _fresh(model: FakeOpenAI) -> None:
    model.bodies.clear()


async def start(data_dir: Path, model: FakeOpenAI, *, register: bool = True) -> Node:
    """The app's tree on ``data_dir``, its tenant's model the fake one (registered once: it is durable)."""
    config = default_config(data_dir)
    for spec in config.tree.walk():
        if spec.name == "llm_gateway":
            spec.args["allowed_egress"] = ["*"]  # the fake model is on loopback
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "memory":
            spec.args["semantic"] = False
    node = build_agent_node(config, clock=ManualClock())
    await node.start()
    if register:
        provider = {
            "name": "fake",
            "kind": "openai",
            "model": "fake-finder",
            "base_url": model.base_url + "/v1",
        }
        await node.ask("llm_gateway", "register_provider", provider, ctx=ACME)
        await node.ask("llm_gateway", "switch_provider", {"provider": "fake"}, ctx=ACME)
    return node


async def chat(node: Node, message: str, session: str) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "agent", "chat", {"message": message, "session_id": session}, ctx=ACME_USER, timeout=60
    )
    return reply


async def tool_results(node: Node, session: str, name: str) -> list[dict[str, Any]]:
    history = await node.ask("agent", "get_history", {"session_id": session}, ctx=ACME_USER)
    return [m for m in history["messages"] if m["role"] == "tool" and m["name"] == name]


async def test_the_model_finds_kanban_and_creates_the_card(tmp_path: Path, model: FakeOpenAI) -> None:
    node = await start(tmp_path / "data", model)
    try:
        reply = await chat(node, "put renew insurance on my to-do list", "k1")
        assert reply["status"] == "ok" and reply["tool_calls"] == 2, reply
        assert "find_tools" in model.offered(0)
        assert "kanban_create" in model.offered(1)
        cards = await node.ask("kanban", "list", {}, ctx=ACME_USER)
        assert [c["title"] for c in cards["tasks"]] == ["renew insurance"]
        [found] = await tool_results(node, "k1", "find_tools")
        result = json.loads(found["content"])
        assert any(line.startswith("kanban: ") and "kanban_create" in line for line in result["toolsets"])
        assert "kanban" in result["offered"]
    finally:
        await node.stop(deadline=5)


async def test_the_model_finds_goals_the_message_did_not_call_for(tmp_path: Path, model: FakeOpenAI) -> None:
    node = await start(tmp_path / "data", model)
    try:
        reply = await chat(node, "my objective for this chat is to plan a trip", "g1")
        assert reply["status"] == "ok" and not reply["response"].startswith("not offered"), reply
        first, second = model.offered(0), model.offered(1)
        assert "goal_set" not in first and "find_tools" in first  # no pattern offered the goal tools ...
        names = [t["function"]["name"] for t in model.bodies[0]["tools"]]
        assert names == sorted(names)  # in name order, find_tools too (a stable prefix for prompt caches)
        assert "goal_set" in second  # ... find_tools did, for the rest of the turn
        [found] = await tool_results(node, "g1", "find_tools")
        assert json.loads(found["content"])["added"] == ["goals"]
        goals = await node.ask("goals", "list_goals", {"session_id": "g1"}, ctx=ACME_USER)
        assert [g["text"] for g in goals["goals"]] == ["plan a trip"]
        # The description lists the toolsets not offered, one line each, the way the tool's reply names them.
        spec = next(t for t in model.bodies[0]["tools"] if t["function"]["name"] == "find_tools")
        assert "\n- goals: " in spec["function"]["description"]
        assert "\n- compute: " not in spec["function"]["description"]  # offered already

        # Not kept: the next turn still offers the goal tools (the turn before called one), the one after
        # that is lean again.
        await chat(node, "thanks", "g1")
        assert "goal_set" in model.offered()
        await chat(node, "bye", "g1")
        assert "goal_set" not in model.offered()
    finally:
        await node.stop(deadline=5)


async def test_toolsets_found_survive_a_pause_and_a_restart(tmp_path: Path, model: FakeOpenAI) -> None:
    """find_tools adds goals, the next call (write_file) waits for review, the node stops; in a new node the
    approval resumes the turn, whose next request still offers the goal tools."""
    node = await start(tmp_path / "data", model)
    try:
        paused = await chat(node, "write the packing list, then set my objective: pack for the trip", "r1")
        assert paused["status"] == "paused" and paused["pending_tool"]["name"] == "write_file", paused
        assert "goal_set" in model.offered()
    finally:
        await node.stop(deadline=5)
    model.bodies.clear()
    node = await start(tmp_path / "data", model, register=False)
    try:
        done = await node.ask("guardrails", "approve", {"approval_id": paused["approval_id"]}, ctx=ACME)
        assert done["turn"]["status"] == "ok", done
        assert "goal_set" in model.offered(0)  # the resumed turn's first request
        goals = await node.ask("goals", "list_goals", {"session_id": "r1"}, ctx=ACME_USER)
        assert [g["text"] for g in goals["goals"]] == ["pack for the trip"]
    finally:
        await node.stop(deadline=5)


async def test_keep_offers_the_toolsets_in_the_sessions_next_turns(tmp_path: Path, model: FakeOpenAI) -> None:
    node = await start(tmp_path / "data", model)
    try:
        await chat(node, "from now on I will plan trips here", "p1")
        [found] = await tool_results(node, "p1", "find_tools")
        assert json.loads(found["content"])["kept"] == ["goals"]
        await chat(node, "hello", "p1")
        await chat(node, "and again", "p1")
        assert "goal_set" in model.offered()  # two turns later, no goal tool called meanwhile
        await chat(node, "hello", "p2")
        assert "goal_set" not in model.offered()  # that session only
    finally:
        await node.stop(deadline=5)


async def test_an_unknown_toolset_is_a_tool_error_naming_the_valid_ones(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    node = await start(tmp_path / "data", model)
    try:
        await chat(node, "just look", "u1")
        [found] = await tool_results(node, "u1", "find_tools")
        assert found["is_error"]
        error = json.loads(found["content"])["error"]
        assert error["code"] == "invalid_input" and "'kanbna'" in error["message"]
        assert "kanban" in error["known"] and "goals" in error["message"]
    finally:
        await node.stop(deadline=5)


# -- the tool on its own --------------------------------------------------------------------------------


def _catalogue() -> Catalogue:
    def view(name: str, description: str = "") -> ToolView:
        return ToolView(name=name, description=description or name, input_schema={"type": "object"})

    views = (view("calculator"), view("goal_set"), view("kanban_create"), view("weather", "Weather. Today."))
    offering = Offering.of_toolsets(TOOLSETS)  # the purposes the app's toolsets declare
    return Catalogue("", views, ("compute", "goals", "kanban", "acme_weather"), offering)


def test_a_query_narrows_the_list_and_adds_nothing() -> None:
    reply, names = finder.answer(_catalogue(), frozenset({"compute"}), {"query": "my to-do list"})
    assert names == () and reply["added"] == [] and reply["matched"]
    assert reply["toolsets"] == ["kanban: to-do list, task cards: kanban_create"]
    reply, _ = finder.answer(_catalogue(), frozenset({"compute"}), {"query": "zebras"})
    assert not reply["matched"] and len(reply["toolsets"]) == 4  # nothing matched: every toolset


def test_the_schema_lists_only_what_is_not_offered_and_none_when_nothing_is_left() -> None:
    cat = _catalogue()
    spec = finder.view(cat, frozenset({"compute", "kanban"}))
    assert spec is not None
    assert spec["description"].splitlines()[1:] == [
        "- acme_weather: Weather",
        "- goals: " + GOALS_TOOLSET.purpose,
    ]
    assert finder.view(cat, frozenset({"compute", "kanban", "goals", "acme_weather"})) is None
    assert finder.view(cat, None) is None  # every tool is offered


@pytest.mark.parametrize(
    "args",
    [{"toolsets": "kanban"}, {"toolsets": ["all"]}, {"keep": "yes"}, {"tools": ["kanban"]}, {"query": 3}],
)
def test_bad_input_is_an_invalid_input_error(args: dict[str, Any]) -> None:
    with pytest.raises(ToolFailure) as failed:
        finder.answer(_catalogue(), frozenset(), args)
    assert failed.value.code == "invalid_input"
