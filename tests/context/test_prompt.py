"""Prompt assembly: SOUL.md and its overrides, project context, a byte-identical stable prefix across turns,
the per-turn section (skills the simulated model follows, memories, goals), concurrent gathering, hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.memory import Memory
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS
from minihermes.context import prompt
from minihermes.llm.simulated._skills import parse_procedures
from minihermes.runtime import ActorSpec

from . import doubles
from .conftest import ACME
from .doubles import ANSWER, BARRIER, CASTS, GOALS, SKILLS, FakeGoals, FakeSkills, FnGateway, end, tool_use


@pytest.fixture(autouse=True)
def _clean():
    doubles.reset()


def specs(tmp_path: Path, *, skills: bool = False, goals: bool = False, **agent_args: Any) -> list[ActorSpec]:
    out = [
        ActorSpec("llm_gateway", FnGateway, per_tenant=True),
        ActorSpec("memory", Memory, per_tenant=True),
        ActorSpec(
            "tool_executor",
            ToolExecutor,
            per_tenant=True,
            args={"workspace_root": str(tmp_path / "ws"), "toolsets": TOOLSETS},
        ),
    ]
    if skills:
        out.append(ActorSpec("skill_store", FakeSkills, per_tenant=True))
    if goals:
        out.append(ActorSpec("goals", FakeGoals, per_tenant=True))
    args = {"workspace_root": str(tmp_path / "ws"), **agent_args}
    out.append(ActorSpec("agent", Agent, virtual=True, key_field="session_id", args=args))
    return out


async def chat(node, message: str, session: str = "s1", **kw: Any) -> dict[str, Any]:
    return await node.ask("agent", "chat", {"message": message, "session_id": session, **kw}, ctx=ACME)


def test_the_default_soul_carries_the_function_calling_discipline():
    soul = prompt.default_soul()
    assert "# Function calling" in soul
    for rule in ("JSON objects", "end the turn", "untrusted"):
        assert rule in soul


def test_soul_overrides_and_project_context(tmp_path):
    ws, data = tmp_path / "ws", tmp_path / "data"
    ws.mkdir()
    data.mkdir()
    assert prompt.load_soul(ws, data / "SOUL.md") == prompt.default_soul()
    (data / "SOUL.md").write_text("You are the data-dir soul.")
    assert prompt.load_soul(ws, data / "SOUL.md") == "You are the data-dir soul."
    (ws / "SOUL.md").write_text("You are the workspace soul.")
    assert prompt.load_soul(ws, data / "SOUL.md") == "You are the workspace soul."
    assert prompt.project_context(ws) == ""
    (ws / "AGENTS.md").write_text("Use tabs.")
    assert prompt.project_context(ws) == "Use tabs."
    (ws / ".hermes.md").write_text("Hermes rules win.")
    assert prompt.project_context(ws) == "Hermes rules win."


async def test_the_stable_prefix_is_byte_identical_across_turns(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    await node.ask("memory", "store_memory", {"key": "name", "value": "Alice", "tier": "core"}, ctx=ACME)
    for text in ("hello", "what is 2+2", "and something else entirely"):
        await chat(node, text)
    prefixes = [r["messages"][0] for r in doubles.REQUESTS]
    assert len(prefixes) == 3 and prefixes[0] == prefixes[1] == prefixes[2]
    assert prefixes[0]["role"] == "system" and "- name: Alice" in prefixes[0]["content"]
    assert "# Function calling" in prefixes[0]["content"]
    assert all(r["cache_prefix_messages"] == 1 for r in doubles.REQUESTS)
    names = [t["name"] for t in doubles.REQUESTS[0]["tools"]]
    assert names == sorted(names) and "session_search" in names
    assert all(r["tools"] == doubles.REQUESTS[0]["tools"] for r in doubles.REQUESTS)


async def test_workspace_soul_and_project_context_reach_the_prompt(make_node, tmp_path):
    ws = tmp_path / "ws" / "acme" / "s1"
    ws.mkdir(parents=True)
    (ws / "SOUL.md").write_text("You are Pirate Hermes.")
    (ws / "AGENTS.md").write_text("Always answer in French.")
    node = await make_node(specs(tmp_path))
    await chat(node, "hi")
    system = doubles.REQUESTS[0]["messages"][0]["content"]
    assert (
        system.startswith("You are Pirate Hermes.")
        and "## Project context\nAlways answer in French." in system
    )


async def test_identity_files_are_read_again_when_the_session_activates_again(make_node, tmp_path):
    # Read once per activation, with the session's state (Agent.preload): an edit reaches the next one.
    node = await make_node(specs(tmp_path))
    await chat(node, "hi")
    assert doubles.REQUESTS[-1]["messages"][0]["content"].startswith(prompt.default_soul())
    await node.stop()
    ws = tmp_path / "ws" / "acme" / "s1"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "SOUL.md").write_text("You are Pirate Hermes.")
    (ws / ".hermes.md").write_text("Answer in verse.")
    node = await make_node(specs(tmp_path))
    await chat(node, "hi again")
    system = doubles.REQUESTS[-1]["messages"][0]["content"]
    assert system.startswith("You are Pirate Hermes.") and "## Project context\nAnswer in verse." in system


async def test_skills_are_injected_in_the_format_the_simulated_model_follows(make_node, tmp_path):
    SKILLS.append(
        {
            "skill_id": "sk-1",
            "name": "calc-and-remember",
            "description": "Compute, then store the result.",
            "procedure": "1. calculator: evaluate the expression\n2. memory_store: store the result under key last_calc",
            "score": 0.9,
        }
    )
    node = await make_node(specs(tmp_path, skills=True))
    reply = await chat(node, "calculate 6*7 and remember it")
    req = doubles.REQUESTS[0]
    assert req["messages"][1]["role"] == "system"  # the per-turn section follows the stable prefix
    section = req["messages"][1]["content"]
    assert (
        "## Relevant Skills\n### calc-and-remember\nCompute, then store the result.\n1. calculator" in section
    )
    system_text = "\n\n".join(m["content"] for m in req["messages"] if m["role"] == "system")
    procedures = parse_procedures(system_text, [t["name"] for t in req["tools"]])
    assert [p.name for p in procedures] == ["calc-and-remember"]
    assert [s.tool for s in procedures[0].steps] == ["calculator", "memory_store"]
    await node.ask("skill_store", "barrier", {}, ctx=ACME)
    match = next(c for c in CASTS if c[1] == "match_skills")
    assert match[2] == {"query": "calculate 6*7 and remember it", "limit": 3, "user_id": "alice"}
    usage = [c for c in CASTS if c[1] == "record_usage"]
    # The scripted turn answered without calling the skill's tools: matched, not followed (not a use).
    assert usage == [
        ("skill_store", "record_usage", {"skill_id": "sk-1", "success": True, "followed": False})
    ]
    learn = next(c for c in CASTS if c[1] == "evaluate_for_learning")
    assert learn[2]["user_id"] == "alice" and learn[2]["tool_calls"] == [] and reply["status"] == "ok"


async def test_skills_beyond_the_token_budget_are_left_out(make_node, tmp_path):
    for i in range(3):
        SKILLS.append(
            {"skill_id": f"k{i}", "name": f"skill-{i}", "procedure": "1. calculator: " + "x " * 300}
        )
    node = await make_node(specs(tmp_path, skills=True, skills_tokens=400))
    await chat(node, "anything")
    section = doubles.REQUESTS[0]["messages"][1]["content"]
    assert section.count("### skill-") == 1


async def test_memories_and_goals_in_the_per_turn_section(make_node, tmp_path):
    GOALS.append({"goal_id": "g1", "text": "ship the MVP", "session_id": "s1"})
    node = await make_node(specs(tmp_path, goals=True))
    await node.ask(
        "memory", "store_memory", {"key": "deploy_target", "value": "fly.io in region ams"}, ctx=ACME
    )
    await node.ask("memory", "store_memory", {"key": "pet", "value": "a cat named Miso"}, ctx=ACME)
    await chat(node, "where do we deploy the target app?")
    section = doubles.REQUESTS[0]["messages"][1]["content"]
    assert (
        "## Relevant memories\n" + prompt.DATA_NOTE + "\n<memories>\n- deploy_target: fly.io in region ams"
        in section
    )
    assert "Miso" not in section  # below the minimum score: not injected
    assert "## Active goals" in section and "ship the MVP (g1)" in section
    await node.ask("goals", "barrier", {}, ctx=ACME)
    assert (
        "goals",
        "turn_completed",
        {"session_id": "s1", "user_message": "where do we deploy the target app?"},
    ) in CASTS


async def test_skills_memory_and_goals_are_asked_concurrently(make_node, tmp_path):
    """Each fake waits until the other has been asked: sequential asks would time out."""
    BARRIER["parties"] = {"skill_store", "goals"}
    node = await make_node(specs(tmp_path, skills=True, goals=True))
    reply = await chat(node, "hello there")
    assert reply["status"] == "ok" and BARRIER["entered"] == {"skill_store", "goals"}


async def test_an_episodic_memory_records_each_turn(make_node, tmp_path):
    ANSWER["fn"] = lambda req: (
        tool_use(("calculator", {"expression": "6*7"}))
        if req["messages"][-1]["role"] == "user"
        else end("42")
    )
    node = await make_node(specs(tmp_path))
    reply = await chat(node, "what is 6*7")
    await node.ask("memory", "get_stats", {}, ctx=ACME)  # the cast was queued before; now it is done
    found = await node.ask(
        "memory", "search_memories", {"query": "6*7 calculator", "kind": "episodic"}, ctx=ACME
    )
    (episode,) = found["memories"]
    assert episode["key"].startswith("episode:") and episode["kind"] == "episodic"
    assert "Task: what is 6*7" in episode["value"] and "Tools used: calculator" in episode["value"]
    assert "Outcome: ok: 42" in episode["value"] and reply["status"] == "ok"
    # The same task done the same way again (another session too) refreshes that episode; a new one differs.
    await chat(node, "what is 6*7", session="s2")
    await chat(node, "what is 6*7 exactly", session="s2")
    await node.ask("memory", "get_stats", {}, ctx=ACME)
    found = await node.ask(
        "memory", "search_memories", {"query": "6*7 calculator", "kind": "episodic"}, ctx=ACME
    )
    assert sorted(m["value"].split("\n")[0] for m in found["memories"]) == [
        "Task: what is 6*7",
        "Task: what is 6*7 exactly",
    ]
