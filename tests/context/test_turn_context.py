"""Turn context from declared contributors: every actor type taking ``turn_context`` gives its part of the
prompt, placed by priority and trimmed to the budget; a new contributor is an actor in the config, and the
agent names none of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import Agent
from minihermes.agent.memory import Memory
from minihermes.context.assembly import context_part
from minihermes.runtime import ActorError, ActorSpec, GenServer, call, current_context

from . import doubles
from .conftest import ACME
from .doubles import GOALS, SKILLS, FakeGoals, FakeSkills, FnGateway

ASKED: list[dict[str, Any]] = []


@pytest.fixture(autouse=True)
def _clean():
    doubles.reset()
    ASKED.clear()


class Weather(GenServer):
    """A contributor the agent has never heard of: a line of local weather for every turn."""

    @call(access="read")
    async def turn_context(
        self, message: str, session_id: str = "", user_id: str = "", limits: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        ASKED.append({"message": message, "user_id": user_id, "principal": current_context().principal})
        text = "## Local weather\nRain in Lyon."
        return {"status": "ok", "parts": [context_part("weather", text, priority=250)]}


class Broken(GenServer):
    @call(access="read")
    async def turn_context(self, message: str, **_rest: Any) -> dict[str, Any]:
        raise ActorError("down for maintenance", code="unavailable")


class Huge(GenServer):
    @call(access="read")
    async def turn_context(self, message: str, **_rest: Any) -> dict[str, Any]:
        return {"status": "ok", "parts": [context_part("huge", "## Huge\n" + "word " * 2_000, priority=1)]}


def specs(tmp_path: Path, *extra: ActorSpec, **agent_args: Any) -> list[ActorSpec]:
    return [
        ActorSpec("llm_gateway", FnGateway, per_tenant=True),
        ActorSpec("memory", Memory, per_tenant=True),
        ActorSpec("skill_store", FakeSkills, per_tenant=True),
        ActorSpec("goals", FakeGoals, per_tenant=True),
        *extra,
        ActorSpec(
            "agent",
            Agent,
            virtual=True,
            key_field="session_id",
            args={"workspace_root": str(tmp_path / "ws"), **agent_args},
        ),
    ]


async def section_of(node, message: str = "what should I wear today?") -> str:
    reply = await node.ask("agent", "chat", {"message": message, "session_id": "s1"}, ctx=ACME)
    assert reply["status"] == "ok"
    system = [m for m in doubles.REQUESTS[0]["messages"] if m["role"] == "system"]
    assert len(system) == 2
    return str(system[1]["content"])


def _seed() -> None:
    SKILLS.append(
        {"skill_id": "sk-1", "name": "dress", "description": "Pick clothes.", "procedure": "1. look outside"}
    )
    GOALS.append({"goal_id": "g-1", "text": "stay dry", "session_id": "s1"})


async def test_a_new_contributor_is_one_actor_in_the_config(make_node, tmp_path):
    _seed()
    node = await make_node(specs(tmp_path, ActorSpec("weather", Weather, per_tenant=True)))
    section = await section_of(node)
    # By priority: skills (300), the newcomer (250), then goals (100); each exactly once.
    order = [section.index(h) for h in ("## Relevant Skills", "## Local weather", "## Active goals")]
    assert order == sorted(order) and section.count("## Local weather") == 1
    # Asked as the turn's caller, with the turn's message and user.
    assert ASKED == [{"message": "what should I wear today?", "user_id": "alice", "principal": "alice"}]


async def test_a_failing_contributor_leaves_only_its_own_part_out(make_node, tmp_path):
    _seed()
    node = await make_node(specs(tmp_path, ActorSpec("broken", Broken, per_tenant=True)))
    section = await section_of(node)
    assert "## Relevant Skills" in section and "## Active goals" in section


async def test_parts_over_the_budget_go_lowest_priority_first(make_node, tmp_path):
    _seed()
    node = await make_node(specs(tmp_path, ActorSpec("huge", Huge, per_tenant=True), context_tokens=1_000))
    section = await section_of(node)
    # The huge part (lowest priority, over the budget by itself) is left out; the others fit.
    assert "## Huge" not in section
    assert "## Relevant Skills" in section and "## Active goals" in section


async def test_a_part_within_the_budget_is_kept(make_node, tmp_path):
    node = await make_node(specs(tmp_path, ActorSpec("huge", Huge, per_tenant=True)))
    assert "## Huge" in await section_of(node)


async def test_the_agent_asks_each_contributor_once_per_turn(make_node, tmp_path):
    _seed()
    node = await make_node(specs(tmp_path, ActorSpec("weather", Weather, per_tenant=True)))
    await section_of(node)
    await section_of(node, "and tomorrow?")
    assert [a["message"] for a in ASKED] == ["what should I wear today?", "and tomorrow?"]
    match = [c for c in doubles.CASTS if c[1] == "match_skills"]
    assert len(match) == 2
