"""The work actors tell the model their part as the turn's ``instructions`` (``agent.chat``), in its system
prompt, while the turn's message stays the request itself: the kanban worker's protocol for a card, a cron
run's context, a delegated goal's terms."""

from __future__ import annotations

import json
from typing import Any

from minihermes.runtime import Node

from . import doubles
from .conftest import ACME, until

Seen = dict[str, list[list[dict[str, Any]]]]


def recording(seen: Seen, reply: str = "") -> doubles.Answer:
    """An answer function that keeps every request's messages per session (the gateway double's default
    answer otherwise)."""

    def answer(session: str, messages: list[dict[str, Any]]) -> str:
        seen.setdefault(session, []).append(messages)
        return reply or f"done: {messages[-1]['content'][:60]}"

    return answer


def system(messages: list[dict[str, Any]]) -> str:
    return "\n\n".join(m["content"] for m in messages if m["role"] == "system")


def users(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


async def test_the_kanban_protocol_reaches_the_model_as_instructions(app_node: Any) -> None:
    node = await app_node(scripted=True)
    seen: Seen = {}
    doubles.SCRIPT.answer = recording(seen, "Computed 6 * 7 = 42 and stored it as answer.")
    made = await node.ask(
        "kanban",
        "create",
        {"title": "Compute 6 * 7", "body": "Remember it as answer.", "assignee": "agent"},
        ctx=ACME,
    )
    task_id = made["task_id"]

    async def done() -> dict[str, Any] | None:
        card: dict[str, Any] = (await node.ask("kanban", "show", {"task_id": task_id}, ctx=ACME))["task"]
        return card if card["status"] == "done" else None

    card = await until(done, what="card done")
    assert card["summary"] == "Computed 6 * 7 = 42 and stored it as answer."
    (messages,) = seen[f"kanban:{task_id}:1"]
    prompt = system(messages)
    assert "## Instructions for this turn\nFrom the kanban worker that started this turn" in prompt
    assert f"kanban card {task_id} (Compute 6 * 7)" in prompt
    assert "Done means" in prompt and "short summary of what was done" in prompt
    assert "say plainly that you cannot" in prompt
    # the message is the card itself, no protocol in it (nor in the session's history)
    assert users(messages) == ["Compute 6 * 7\n\nRemember it as answer."]
    history = await node.ask("agent", "get_history", {"session_id": f"kanban:{task_id}:1"}, ctx=ACME)
    assert [m["content"] for m in history["messages"] if m["role"] == "user"] == users(messages)
    assert all("Done means" not in str(m.get("content")) for m in history["messages"])


async def test_a_cron_run_tells_the_model_it_is_scheduled_and_unattended(app_node: Any, clock: Any) -> None:
    node = await app_node(scripted=True)
    seen: Seen = {}
    doubles.SCRIPT.answer = recording(seen)
    await node.ask(
        "cron_scheduler",
        "create_job",
        {"job_id": "j1", "prompt": "say hello", "schedule": "every 10s", "session_id": "main"},
        ctx=ACME,
    )
    await clock.advance(11)

    async def ran() -> list[dict[str, Any]] | None:
        runs = (await node.ask("cron_scheduler", "job_runs", {"job_id": "j1"}, ctx=ACME))["runs"]
        return runs if runs and runs[0]["status"] == "completed" else None

    (run,) = await until(ran, what="the cron run")
    (messages,) = seen["cron:main"]
    prompt = system(messages)
    assert "From the cron runner (job j1) that started this turn" in prompt
    assert f"scheduled run (run {run['run_id']}) of cron job j1" in prompt
    assert "No one is present" in prompt and "approval" in prompt
    assert users(messages) == ["say hello"]


async def test_a_delegated_goal_is_the_childs_message_and_its_terms_instructions(app_node: Any) -> None:
    node: Node = await app_node(scripted=True)
    seen: Seen = {}

    def answer(session: str, messages: list[dict[str, Any]]) -> Any:
        seen.setdefault(session, []).append(messages)
        if session == "p" and messages[-1]["role"] == "user":
            call = {"id": "c1", "name": "delegate_task", "input": {"goal": "find the answer", "context": "x"}}
            return {"content": "", "stop_reason": "tool_use", "tool_calls": [call]}
        return "child summary" if session != "p" else "parent done"

    doubles.SCRIPT.answer = answer
    reply = await node.ask("agent", "chat", {"message": "delegate it", "session_id": "p"}, ctx=ACME)
    assert reply["response"] == "parent done"
    (child,) = [s for s in seen if s.startswith("delegate:")]
    (messages,) = seen[child]
    assert users(messages) == ["find the answer\n\nContext:\nx"]
    prompt = system(messages)
    assert "From a delegating agent (delegate_task) that started this turn" in prompt
    assert "You are a sub-agent" in prompt
    result = json.loads(seen["p"][-1][-1]["content"])
    assert result["summary"] == "child summary"
