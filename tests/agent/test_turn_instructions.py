"""A turn's ``instructions`` (``agent.chat``): what the door that started the turn (kanban worker, cron run,
delegation) asks of it goes to the model in the turn's system prompt, marked as the door's, never as a user
message or into the history, and a turn resumed after an approval or a restart still has it. The recording
gateway (``doubles.ScriptedGateway``) keeps every request the model got."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.agent import MAX_INSTRUCTIONS_CHARS, Agent
from minihermes.agent.guardrails import Guardrails
from minihermes.agent.memory import Memory
from minihermes.agent.tool_executor import ToolExecutor
from minihermes.runtime import ActorError, ActorSpec, InvalidArgument

from . import doubles
from .conftest import ACME, ACME_USER
from .doubles import SCRIPTS, ScriptedGateway, SmallTools, end, tool_use

PROTOCOL = "Work on card t7 only. Answer with a short summary of what was done."


@pytest.fixture(autouse=True)
def _clean() -> None:
    SCRIPTS.clear()
    doubles.REQUESTS.clear()
    doubles.EXECUTED.clear()
    doubles.GATE.clear()


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mh-ws-root-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def small() -> list[ActorSpec]:
    return [
        ActorSpec("llm_gateway", ScriptedGateway),
        ActorSpec("tool_executor", SmallTools),
        ActorSpec("agent", Agent, virtual=True, key_field="session_id"),
    ]


def system(request: dict[str, Any]) -> str:
    return "\n\n".join(m["content"] for m in request["messages"] if m["role"] == "system")


def others(request: dict[str, Any]) -> str:
    """Everything the model got besides the system prompt (the conversation)."""
    return "\n".join(str(m.get("content") or "") for m in request["messages"] if m["role"] != "system")


async def test_instructions_reach_the_system_prompt_and_never_the_conversation(make_node: Any) -> None:
    SCRIPTS["kanban:t7:1"] = [tool_use(("echo", {"x": "a"})), end("Echoed a."), end("Hello.")]
    node = await make_node(small())
    chat = {"message": "echo a", "session_id": "kanban:t7:1", "instructions": PROTOCOL}
    reply = await node.ask("agent", "chat", chat)
    assert reply["status"] == "ok" and reply["response"] == "Echoed a."
    assert len(doubles.REQUESTS) == 2
    for request in doubles.REQUESTS:  # every step of the turn
        prompt = system(request)
        assert PROTOCOL in prompt
        assert "## Instructions for this turn\nFrom the kanban worker that started this turn" in prompt
        assert PROTOCOL not in others(request)
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        assert users == ["echo a"]
        # the stable prefix (what prompt caches key on) is left alone: the instructions are per turn
        assert PROTOCOL not in request["messages"][0]["content"]
    history = (await node.ask("agent/kanban:t7:1", "get_history"))["messages"]
    assert history[0] == {"role": "user", "content": "echo a"}
    assert all(PROTOCOL not in str(m.get("content") or "") for m in history)
    # the next turn, given none, has none
    await node.ask("agent", "chat", {"message": "hello", "session_id": "kanban:t7:1"})
    assert "Instructions for this turn" not in system(doubles.REQUESTS[-1])
    assert PROTOCOL not in system(doubles.REQUESTS[-1])


async def test_the_door_that_gave_them_is_named(make_node: Any) -> None:
    SCRIPTS["cron:daily"] = [end("ok")]
    SCRIPTS["s"] = [end("ok")]
    node = await make_node(small())
    chat = {"message": "report", "session_id": "cron:daily", "cron_job": "j1", "instructions": "Scheduled."}
    await node.ask("agent", "chat", chat)
    assert "From the cron runner (job j1) that started this turn" in system(doubles.REQUESTS[-1])
    await node.ask("agent", "chat", {"message": "hi", "session_id": "s", "instructions": "Be brief."})
    assert "From the caller (channel api) that started this turn" in system(doubles.REQUESTS[-1])


async def test_instructions_are_bounded_and_redacted(make_node: Any) -> None:
    SCRIPTS["s"] = [end("ok")]
    node = await make_node(small())
    too_long = {"message": "hi", "session_id": "s", "instructions": "x" * (MAX_INSTRUCTIONS_CHARS + 1)}
    with pytest.raises(InvalidArgument) as caught:
        await node.ask("agent", "chat", too_long)
    assert caught.value.details.get("field") == "instructions"
    assert doubles.REQUESTS == []  # refused before any model call
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
    await node.ask("agent", "chat", {"message": "hi", "session_id": "s", "instructions": f"Key: {secret}"})
    assert secret not in system(doubles.REQUESTS[-1])


async def test_a_turn_resumed_after_an_approval_keeps_its_instructions(make_node: Any, root: Path) -> None:
    SCRIPTS["s2"] = [tool_use(("write_file", {"path": "report.md", "content": "# Q3\n"})), end("Wrote it.")]
    node = await make_node(
        [
            ActorSpec("memory", Memory, per_tenant=True),
            ActorSpec("tool_executor", ToolExecutor, per_tenant=True, args={"workspace_root": str(root)}),
            ActorSpec("guardrails", Guardrails, per_tenant=True),
            ActorSpec("llm_gateway", ScriptedGateway),
            ActorSpec("agent", Agent, virtual=True, key_field="session_id"),
        ]
    )
    chat = {"message": "write the Q3 report", "session_id": "s2", "instructions": PROTOCOL}
    paused = await node.ask("agent", "chat", chat, ctx=ACME_USER)
    assert paused["status"] == "paused"
    approved = await node.ask("guardrails", "approve", {"approval_id": paused["approval_id"]}, ctx=ACME)
    assert approved["turn"]["response"] == "Wrote it."
    assert len(doubles.REQUESTS) == 2
    resumed = doubles.REQUESTS[-1]  # the step after the approval
    assert resumed["messages"][-1]["role"] == "tool"
    assert PROTOCOL in system(resumed) and PROTOCOL not in others(resumed)


async def test_a_turn_resumed_after_a_restart_keeps_its_instructions(make_node: Any) -> None:
    doubles.GATE["wait"] = asyncio.Event()
    doubles.GATE["entered"] = asyncio.Event()
    SCRIPTS["s"] = [tool_use(("wait", {})), end("finished"), end("second")]
    node = await make_node(small())
    turn = asyncio.ensure_future(
        node.ask("agent", "chat", {"message": "go", "session_id": "s", "instructions": PROTOCOL})
    )
    await doubles.GATE["entered"].wait()
    (cell,) = node.cells("agent")
    await cell.kill("test", abnormal=True)  # dies while the tool call runs
    with pytest.raises(ActorError):
        await turn
    doubles.GATE["wait"].set()
    # the restarted agent finishes the turn from its saved state; a new chat waits for it first
    reply = await node.ask("agent", "chat", {"message": "next", "session_id": "s"})
    assert reply["response"] == "second"
    finished, second = doubles.REQUESTS[-2:]
    assert [m["content"] for m in finished["messages"] if m["role"] == "user"] == ["go"]
    assert PROTOCOL in system(finished) and PROTOCOL not in others(finished)
    assert PROTOCOL not in system(second)  # the next turn gave none


def test_the_offline_model_reads_no_procedure_in_the_instructions() -> None:
    """The simulated model follows procedures in a skills section of the system prompt; the instructions
    section is none, even when its lines name tools (the kanban protocol names ``kanban_block``)."""
    from minihermes.context import prompt
    from minihermes.llm.simulated._skills import parse_procedures
    from minihermes.work.kanban_worker import worker_instructions

    skill = {"skill_id": "s1", "name": "calc", "procedure": "1. calculator: evaluate it"}
    skills, _ = prompt.skills_section([skill], 1_000)
    tools = ["calculator", "kanban_block", "memory_store"]
    for protocol in (
        worker_instructions({"task_id": "t7", "title": "Compute 6 * 7"}),
        "1. memory_store key=x\n2. kanban_block the card",
    ):
        section = prompt.turn_section(prompt.instructions_section(protocol, "the kanban worker"), skills)
        assert section.index("## Instructions for this turn") < section.index("## Relevant Skills")
        found = parse_procedures(section, tools)
        assert [(p.name, [s.tool for s in p.steps]) for p in found] == [("calc", ["calculator"])]
        alone = prompt.turn_section(prompt.instructions_section(protocol, "the kanban worker"))
        assert parse_procedures(alone, tools) == []
