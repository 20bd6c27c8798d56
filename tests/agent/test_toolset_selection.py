"""Which tools a turn offers the model (``minihermes.context.toolsets``), and which memories its prompt recalls.

A plain chat turn offers the core toolsets only; a request that calls for kanban (or a schedule, a goal, a
delegation, a tool of one's own) gets those tools too; the agent, its tenant and the session can configure
more; an unknown toolset name is refused. In "Relevant memories", what the user stated comes before episodes
of past turns, and an episode of a turn that fell short is left out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.memory import Memory
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.app import TOOLSETS, build_agent_node, default_config
from minihermes.context import prompt
from minihermes.context.recall import fell_short, for_prompt
from minihermes.context.toolsets import Offering, selection
from minihermes.runtime import ActorSpec, ConfigError, InvalidArgument
from minihermes.work.kanban import Kanban
from tests.context import doubles
from tests.context.doubles import ANSWER, REQUESTS, FnGateway, end, tool_use

from .conftest import ACME, ACME_USER, GLOBEX

CORE_TOOLS = {
    "calculator",
    "memory_store",
    "memory_recall",
    "memory_delete",
    "memory_search",
    "http_request",
    "read_file",
    "write_file",
    "list_files",
    "terminal",
    "session_search",
}
"""The core tools this node lists (``skill_view`` needs a skill store, which this node does not run)."""
FINDER = {"find_tools"}
"""Offered besides whenever a toolset is not (``minihermes.context.find_tools``)."""
KANBAN = {t for ts in TOOLSETS if ts.name == "kanban" for t in ts.defs}


@pytest.fixture(autouse=True)
def _clean():
    doubles.reset()


def specs(tmp_path: Path, **agent_args: Any) -> list[ActorSpec]:
    return [
        ActorSpec("llm_gateway", FnGateway, per_tenant=True),
        ActorSpec("memory", Memory, per_tenant=True),
        ActorSpec(
            "tool_executor",
            ToolExecutor,
            per_tenant=True,
            args={"workspace_root": str(tmp_path / "ws"), "toolsets": TOOLSETS},
        ),
        ActorSpec("kanban", Kanban, per_tenant=True),
        ActorSpec(
            "agent",
            Agent,
            virtual=True,
            key_field="session_id",
            args={"episodic": False, "index_sessions": False, **agent_args},
        ),
    ]


async def chat(node, message: str, session: str = "s1", ctx=ACME, **kw: Any) -> dict[str, Any]:
    return await node.ask("agent", "chat", {"message": message, "session_id": session, **kw}, ctx=ctx)


def offered() -> set[str]:
    """The tool names the last LLM call was offered."""
    return {t["name"] for t in REQUESTS[-1]["tools"]}


async def test_a_plain_turn_offers_only_the_core_tools(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    listed = {t["name"] for t in (await node.ask("tool_executor", "list_tools", {}, ctx=ACME))["tools"]}
    assert KANBAN <= listed and "delegate_task" in listed  # the executor has them all ...
    await chat(node, "what is my favourite colour")
    assert offered() == CORE_TOOLS | FINDER  # ... a plain turn is offered the core only
    assert not offered() & KANBAN


async def test_a_kanban_request_gets_the_kanban_tools_and_a_follow_up_keeps_them(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    calls = iter([tool_use(("kanban_create", {"title": "buy milk"})), end("created")])
    ANSWER["fn"] = lambda req: next(calls, end("ok"))
    await chat(node, "add a card to the board: buy milk")
    assert KANBAN <= offered() and CORE_TOOLS <= offered()
    # the next message says nothing of kanban, but the turn before used it: still offered
    await chat(node, "now move it to done")
    assert KANBAN <= offered()
    # and once a turn without kanban came between, a plain turn is lean again
    await chat(node, "thanks, that's all")
    assert offered() == CORE_TOOLS | FINDER


async def test_an_allow_list_offers_exactly_the_allowed_tools(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    await chat(node, "look at card 1", allowed_tools=["kanban_show", "calculator"])
    assert offered() == {"kanban_show", "calculator"}
    await chat(node, "compute 2+2", session="s2", allowed_tools=["kanban_show"])
    assert offered() == {"kanban_show"}  # allowed, though neither configured nor asked for


async def test_agent_tenant_and_session_configuration_add_toolsets(make_node, tmp_path):
    node = await make_node(
        specs(tmp_path, toolsets=["core", "kanban"], tenant_toolsets={"globex": ["delegation"]})
    )
    await chat(node, "hello")
    assert offered() == CORE_TOOLS | KANBAN | FINDER  # the agent's configuration
    await chat(node, "hello", session="g1", ctx=GLOBEX)
    # globex's turns add delegation: every toolset listed here is offered, so nothing is left to find
    assert offered() == CORE_TOOLS | KANBAN | {"delegate_task"}
    await chat(node, "hello", session="a2")
    assert "delegate_task" not in offered()  # acme's do not ...
    reply = await node.ask(
        "agent", "set_toolsets", {"session_id": "a2", "toolsets": ["delegation"]}, ctx=ACME_USER
    )
    assert reply["toolsets"] == ["delegation"] and reply["configured"] == ["core", "kanban", "delegation"]
    await chat(node, "hello", session="a2")
    assert "delegate_task" in offered()  # ... unless the session says so
    await chat(node, "hello", session="a3")
    assert "delegate_task" not in offered()  # (that session only)
    await node.ask("agent", "set_toolsets", {"session_id": "a2", "toolsets": []}, ctx=ACME)
    await chat(node, "hello", session="a2")
    assert "delegate_task" not in offered()


async def test_all_offers_every_tool_and_auto_off_offers_only_the_configured(make_node, tmp_path):
    node = await make_node(specs(tmp_path, toolsets=["all"]))
    listed = {t["name"] for t in (await node.ask("tool_executor", "list_tools", {}, ctx=ACME))["tools"]}
    await chat(node, "hello")
    assert offered() == listed
    strict = await make_node(specs(tmp_path, auto_toolsets=False), data_dir=tmp_path / "strict")
    await chat(strict, "add a kanban card: buy milk")
    assert offered() == CORE_TOOLS


async def test_an_unknown_toolset_is_refused(make_node, tmp_path):
    node = await make_node(specs(tmp_path))
    with pytest.raises(InvalidArgument) as refused:
        await node.ask("agent", "set_toolsets", {"session_id": "s1", "toolsets": ["kanbna"]}, ctx=ACME)
    assert (
        refused.value.details["field"] == "toolsets" and "kanban" in refused.value.message
    )  # names the known
    cfg = default_config(tmp_path / "app")
    agent = next(s for s in cfg.tree.walk() if s.name == "agent")
    agent.args["toolsets"] = ["core", "kanbna"]
    with pytest.raises(ConfigError) as bad:
        build_agent_node(cfg)
    assert bad.value.field == "agent.args.toolsets"
    agent.args["toolsets"] = ["core"]
    agent.args["tenant_toolsets"] = {"acme": ["nope"]}
    with pytest.raises(ConfigError) as bad_tenant:
        build_agent_node(cfg)
    assert bad_tenant.value.field == "agent.args.tenant_toolsets.acme"


OFFERING = Offering.of_toolsets(TOOLSETS)
"""What the app's toolsets declare about being offered."""
wanted_by = OFFERING.wanted_by


def test_the_intent_selector():
    assert wanted_by("what is my favourite colour") == frozenset()
    assert wanted_by("Add a kanban task: write the report") == {"kanban"}
    assert wanted_by("put a card on the board") == {"kanban"}
    assert wanted_by("remind me every Monday at 9am to water the plants") == {"schedule"}
    assert wanted_by("schedule a daily summary") == {"schedule"}
    assert wanted_by("set a goal: run 5k") == {"goals"}
    assert wanted_by("delegate this to a subagent") == {"delegation"}
    assert wanted_by("create a tool that converts miles to km") == {"skills"}
    assert wanted_by("call the weather tool on my MCP server") == {"mcp"}
    assert wanted_by("my keyboard is broken") == frozenset()  # words, not substrings
    core = {"compute", "memory", "web", "files", "terminal", "session_search", "skills.skill_view"}
    assert selection(["core"], "hello", offering=OFFERING) == core
    assert selection(["all"], "hello", offering=OFFERING) is None


async def test_a_stated_fact_outranks_episodes_and_a_failed_episode_is_not_recalled(
    make_node, tmp_path, clock
):
    node = await make_node(specs(tmp_path))

    async def store(key: str, value: str, kind: str = "semantic") -> None:
        args = {"key": key, "value": value, "kind": kind}
        await node.ask("memory", "store_memory", args, ctx=ACME_USER)

    await store("favourite_colour", "teal")
    await clock.advance(90 * 86_400)  # stated long ago: the episodes since are fresher
    for i in range(6):
        await store(
            f"episode:{i}",
            f"Task: what is my favourite colour? ({i})\nTools used: none\n"
            f"Outcome: ok: I do not know your favourite colour, sorry ({i}).",
            "episodic",
        )
    await store(
        "episode:short",
        "Task: tell me my favourite colour\nTools used: memory_search\nOutcome: max_iterations: blue",
        "episodic",
    )
    await chat(node, "what is my favourite colour", session="other", ctx=ACME_USER)
    section = REQUESTS[-1]["messages"][1]["content"]
    assert "## Relevant memories" in section
    lines = section.split("## Relevant memories\n", 1)[1].split("</memories>")[0].splitlines()
    assert lines[:2] == [prompt.DATA_NOTE, "<memories>"]  # quoted as data, not instructions
    assert lines[2] == "- favourite_colour: teal"  # the stated fact, first
    assert not any("max_iterations" in line or "blue" in line for line in lines)  # fell short: not recalled


def test_for_prompt_orders_facts_first_and_drops_what_fell_short():
    fact = {"key": "colour", "value": "teal", "kind": "semantic", "score": 0.4}
    manual = {"key": "howto", "value": "steps", "kind": "declarative", "score": 0.5}
    good = {"key": "episode:a", "value": "Task: x\nOutcome: ok: done", "kind": "episodic", "score": 0.9}
    bad = {"key": "episode:b", "value": "Task: y\nOutcome: ok: done", "kind": "episodic", "score": 0.95}
    bad["success"] = False
    capped = {"key": "episode:c", "value": "Task: z\nOutcome: max_iterations: ...", "kind": "episodic"}
    assert [fell_short(m) for m in (fact, good, bad, capped)] == [False, False, True, True]
    ranked = for_prompt([good, bad, fact, capped, manual, dict(fact)], 5)
    assert [m["key"] for m in ranked] == ["howto", "colour", "episode:a"]
    assert [m["key"] for m in for_prompt([good, fact], 1)] == ["colour"]
