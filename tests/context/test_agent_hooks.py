"""The agent's hooks for other subsystems: compression at the start of a turn, per-turn tool allow-lists and
iteration bounds, delegation depth and cron job, redaction of everything the session stores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.memory import Memory
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS
from minihermes.context import ContextCompressor
from minihermes.runtime import ActorSpec, InvalidArgument, call
from minihermes.tools import READ, TRUSTED, Tool, ToolEnv, Toolset, TurnInfo

from . import doubles
from .conftest import ACME
from .doubles import ANSWER, FnGateway, end, tool_use


@pytest.fixture(autouse=True)
def _clean():
    doubles.reset()


SEEN: list[TurnInfo] = []


async def _turn_probe(args: dict[str, Any], env: ToolEnv) -> Any:
    """What a tool knows of the turn that calls it."""
    SEEN.append(env.turn)
    return {"seen": True}


PROBE = Toolset(
    "probe",
    [
        Tool(
            "turn_probe",
            "Report the turn.",
            {"type": "object"},
            READ,
            TRUSTED,
            handler=_turn_probe,
            permission="read",
        )
    ],
)


def specs(tmp_path: Path, compressor: bool = False, **agent_args: Any) -> list[ActorSpec]:
    out = [
        ActorSpec("llm_gateway", FnGateway, per_tenant=True),
        ActorSpec("memory", Memory, per_tenant=True),
        ActorSpec(
            "tool_executor",
            ToolExecutor,
            per_tenant=True,
            args={"workspace_root": str(tmp_path / "ws"), "toolsets": [*TOOLSETS, PROBE]},
        ),
    ]
    if compressor:
        out.append(ActorSpec("context_compressor", ContextCompressor, per_tenant=True))
    out.append(ActorSpec("agent", Agent, virtual=True, key_field="session_id", args=agent_args))
    return out


async def chat(node, message: str, session: str = "s1", **kw: Any) -> dict[str, Any]:
    return await node.ask("agent", "chat", {"message": message, "session_id": session, **kw}, ctx=ACME)


def calculator_loop(req: dict[str, Any]) -> dict[str, Any]:
    """Calls the calculator forever (to hit the iteration bound)."""
    return tool_use(("calculator", {"expression": f"{len(req['messages'])}+1"}))


async def test_max_iterations_lowers_the_bound_but_never_raises_it(make_node, tmp_path):
    ANSWER["fn"] = calculator_loop
    node = await make_node(specs(tmp_path, max_iterations=4))
    low = await chat(node, "loop", max_iterations=2)
    assert low["status"] == "max_iterations" and low["iterations"] == 2
    high = await chat(node, "loop", session="s2", max_iterations=50)
    assert high["status"] == "max_iterations" and high["iterations"] == 4
    default = await chat(node, "loop", session="s3")
    assert default["iterations"] == 4
    with pytest.raises(InvalidArgument):
        await chat(node, "loop", session="s4", max_iterations=-1)


async def test_allowed_tools_limit_the_listing_and_other_calls_are_tool_errors(make_node, tmp_path):
    ANSWER["fn"] = lambda req: (
        tool_use(("memory_store", {"key": "k", "value": "v"}), ("calculator", {"expression": "1+1"}))
        if req["messages"][-1]["role"] == "user"
        else end("done")
    )
    node = await make_node(specs(tmp_path))
    reply = await chat(node, "go", allowed_tools=["calculator"])
    assert reply["status"] == "ok"
    assert [t["name"] for t in doubles.REQUESTS[0]["tools"]] == ["calculator"]
    history = (await node.ask("agent/s1", "get_history", {}, ctx=ACME))["messages"]
    results = {m["name"]: m for m in history if m["role"] == "tool"}
    assert results["memory_store"]["is_error"] and "tool_not_allowed" in results["memory_store"]["content"]
    assert not results["calculator"]["is_error"]
    assert (await node.ask("memory", "recall_memory", {"key": "k"}, ctx=ACME))["found"] is False
    # The next turn without a list sees every tool again.
    await chat(node, "go again")
    assert len(doubles.REQUESTS[-1]["tools"]) > 1


async def test_delegation_depth_and_cron_job_are_on_the_turn(make_node, tmp_path):
    seen: list[dict[str, Any]] = []

    def answer(req: dict[str, Any]) -> dict[str, Any]:
        seen.append({"cron_job": req["cron_job"]})
        # the probe tool once (a plain turn offers it: its toolset is core), then the answer
        return end("ok") if req["messages"][-1]["role"] == "tool" else tool_use(("turn_probe", {}))

    SEEN.clear()
    ANSWER["fn"] = answer
    node = await make_node(specs(tmp_path))
    await chat(node, "nightly report", delegation_depth=2, cron_job="job-7")
    assert seen == [{"cron_job": "job-7"}] * 2
    info = SEEN[-1]
    assert info.delegation_depth == 2 and info.cron_job == "job-7" and info.caller and info.turn_id
    await chat(node, "plain turn")
    assert len(SEEN) == 2
    info = SEEN[-1]
    assert (info.delegation_depth, info.cron_job, info.allowed_tools) == (0, "", None)
    with pytest.raises(InvalidArgument):
        await chat(node, "too deep", delegation_depth=99)


async def test_the_history_is_compressed_at_the_start_of_a_turn(make_node, tmp_path):
    ANSWER["fn"] = lambda req: end("answer " + "words " * 80)
    node = await make_node(specs(tmp_path, compressor=True, token_budget=3000))
    for i in range(12):
        await chat(node, f"question {i}: " + "tell me more " * 40)
    history = (await node.ask("agent/s1", "get_history", {}, ctx=ACME))["messages"]
    assert history[0]["content"].startswith("question 0:")  # the head stays
    summaries = [m for m in history if m.get("is_summary")]
    assert summaries and history[1] is not None and history[1].get("is_summary")
    assert history[-1]["content"].startswith("answer")
    stats = await node.ask("context_compressor", "get_stats", {}, ctx=ACME)
    assert stats["compress_count"] >= 1 and stats["tokens_saved"] > 0
    archive = await node.ask("context_compressor", "get_archive", {"session_id": "s1", "limit": 50}, ctx=ACME)
    first = archive["archives"][-1]["messages"]  # the oldest: the history before any summary
    assert len(archive["archives"]) == stats["compress_count"]
    assert not any(m.get("is_summary") for m in first) and first[1]["content"].startswith("answer")
    # What the model got never carries the agent's own markers.
    last = doubles.REQUESTS[-1]["messages"]
    assert not any("is_summary" in m for m in last)
    assert any(m["content"].startswith("[Summary of earlier conversation]") for m in last)


async def test_secrets_are_redacted_before_the_history_stores_them(make_node, tmp_path):
    ANSWER["fn"] = lambda req: (
        tool_use(("memory_store", {"key": "creds", "value": "password: hunter22"}))
        if req["messages"][-1]["role"] == "user"
        else end("stored, your key sk-abcdefghijklmnopqrstuvwx is safe")
    )
    node = await make_node(specs(tmp_path))
    await chat(node, "my api_key=sk-abcdefghijklmnopqrstuvwx remember password: hunter22")
    history = json.dumps((await node.ask("agent/s1", "get_history", {}, ctx=ACME))["messages"])
    assert "sk-abcdef" not in history and "hunter22" not in history and "[REDACTED]" in history
    stored = await node.ask("memory", "recall_memory", {"key": "creds"}, ctx=ACME)
    assert stored["found"] is False  # run redacted, memory_store refuses it: never a silent [REDACTED]
    found = await node.ask("agent/s1", "session_search", {"query": "remember password"}, ctx=ACME)
    assert found["count"] and "hunter22" not in json.dumps(found)


async def test_the_turns_start_up_writes_are_done_before_its_first_tool_call_runs(
    make_node, tmp_path, monkeypatch
):
    """The start of a turn is saved and its start-up writes (resume marker, session owner) run beside the
    first LLM call; the first tool call waits for all of them, and gets the turn's facts with it."""
    from minihermes.context import forget
    from minihermes.runtime import Node

    order: list[str] = []
    real_mark, real_owner = Node.mark_durable, forget.record_session

    async def mark(self: Node, cell: Any, active: bool) -> None:
        await real_mark(self, cell, active)
        order.append(f"marked {active}")

    async def owner(host: Any, session_id: str, user_id: str) -> None:
        await real_owner(host, session_id, user_id)
        order.append("owner")

    monkeypatch.setattr(Node, "mark_durable", mark)
    monkeypatch.setattr(forget, "record_session", owner)
    # No embedding model, and the process knows it (as after its first turn): the end of the turn has no
    # embedding to keep the session marked for (see test_session_semantic).
    monkeypatch.setattr("minihermes.context.session_indexer.embedder_if_known", lambda: (True, None))
    execute = ToolExecutor._handlers["execute"]
    real_execute = execute.fn

    turns: list[dict[str, Any]] = []

    def run(self: ToolExecutor, **kw: Any) -> Any:
        order.append(f"tool {kw['name']}")
        turns.append(kw.get("turn") or {})
        return real_execute(self, **kw)

    monkeypatch.setattr(execute, "fn", run)
    ANSWER["fn"] = lambda req: (
        end("done") if len(req["messages"]) > 3 else tool_use(("calculator", {"expression": "6*7"}))
    )
    node = await make_node(specs(tmp_path))
    reply = await chat(node, "what is 6*7", delegation_depth=1)
    assert reply["status"] == "ok" and reply["tool_calls"] == 1
    assert sorted(order[:2]) == ["marked True", "owner"] and order[2] == "tool calculator"
    assert order[3:] == ["marked False"]  # the end: unmarked before the reply
    assert turns[0]["delegation_depth"] == 1  # sent with the call: nothing of the turn is written for it
    order.clear()
    await chat(node, "again")  # not the session's first turn: no owner write
    assert order[0] == "marked True"


COMPRESSOR_CALLS: list[dict[str, Any]] = []


class CountingCompressor(ContextCompressor):
    @call
    async def check_and_compress(
        self,
        messages: list[dict[str, Any]],
        token_budget: int = 4096,
        session_id: str = "",
        user_id: str = "",
        threshold: float = 0.0,
    ) -> dict[str, Any]:
        reply = await super().check_and_compress(messages, token_budget, session_id, user_id, threshold)
        COMPRESSOR_CALLS.append(reply)
        return reply


async def test_the_compressor_is_asked_only_above_its_threshold_once_known(make_node, tmp_path):
    """The agent counts its history's tokens itself (kept up to date step by step) and learns the
    compressor's threshold from its first reply: after that, no hop while the history is below it."""
    COMPRESSOR_CALLS.clear()
    ANSWER["fn"] = lambda req: end("answer " + "words " * 80)
    out = specs(tmp_path, token_budget=8000)
    out.insert(
        -1, ActorSpec("context_compressor", CountingCompressor, per_tenant=True, args={"threshold": 0.9})
    )
    node = await make_node(out)
    for i in range(40):
        await chat(node, f"question {i}: " + "tell me more " * 40)
    assert len(COMPRESSOR_CALLS) >= 2 and COMPRESSOR_CALLS[0]["threshold"] == 0.9
    assert any(c["compressed"] for c in COMPRESSOR_CALLS)
    assert all(c["tokens_before"] > c["limit"] for c in COMPRESSOR_CALLS[1:])  # no hop for nothing
    assert not COMPRESSOR_CALLS[0]["compressed"]  # the first ask, at half the budget, learned the share
    history = (await node.ask("agent/s1", "get_history", {}, ctx=ACME))["messages"]
    assert history[1].get("is_summary") and history[-1]["content"].startswith("answer")
