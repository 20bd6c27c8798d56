"""Issue 23, hole 2: durable work carries the principal it runs for and acts as it again when it resumes after
a restart, never as the runtime (``system``) that resumes it.

Each test starts the work as a known caller, stops the node while an agent turn of it waits on the (scripted)
model, starts the node again on the same data and checks whom the model calls after the restart were made
for (``doubles.SCRIPT.contexts``: the principal and roles of the last completion asked per session), which
is whom the turn's tool calls are authorized as.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from minihermes.runtime import Node, RequestContext

from . import doubles
from .conftest import until

ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
OPS = RequestContext(tenant="acme", principal="ops", roles=frozenset({"admin"}))
AS_BOB = ("bob", frozenset({"user"}))


def hold(session: str) -> asyncio.Event:
    """The scripted model holds ``session``'s completions until the test restarts the node."""
    doubles.SCRIPT.hold[session] = asyncio.Event()
    entered = doubles.SCRIPT.entered[session] = asyncio.Event()
    return entered


class _Prefixed(dict[str, asyncio.Event]):
    """``hold`` / ``entered`` for every session starting with ``prefix`` (ids the test cannot know)."""

    def __init__(self, prefix: str, event: asyncio.Event) -> None:
        super().__init__()
        self.prefix = prefix
        self.event = event

    def __contains__(self, session: object) -> bool:
        return str(session).startswith(self.prefix)

    def __getitem__(self, session: str) -> asyncio.Event:
        return self.event


async def restart(node: Node, app_node: Any) -> Node:
    """Stop the node while a turn waits on the model (cut off at the deadline, as a SIGTERM would), release
    the model, start the node again on the same data dir: it resumes what was running."""
    await node.stop(deadline=0.5)
    doubles.SCRIPT.hold = {}
    doubles.SCRIPT.contexts.clear()
    fresh: Node = await app_node(scripted=True)
    return fresh


async def advance_until(clock: Any, check: Any, what: str) -> Any:
    """Move the manual clock (the work actors poll on it) until ``check`` holds."""

    async def step() -> Any:
        await clock.advance(0.5)
        return await check()

    return await until(step, what=what)


async def test_an_agent_turn_saved_without_its_caller_resumes_as_the_owner_with_the_user_role(
    app_node: Any,
) -> None:
    """A turn saved before turns kept their caller's context: not as system, not as the admin it may have
    been, but as the session's owner with the user role."""
    node = await app_node(scripted=True)
    entered = hold("legacy")
    chat = asyncio.ensure_future(
        node.ask("agent", "chat", {"message": "hello", "session_id": "legacy"}, ctx=ADA)
    )
    await asyncio.wait_for(entered.wait(), 10)
    [cell] = [c for c in node.cells("agent") if c.key == "legacy"]
    assert cell.instance is not None
    turn = cell.instance.turn  # type: ignore[attr-defined]
    assert turn["context"]["principal"] == "ada" and turn["context"]["roles"] == ["admin"]
    del turn["context"]  # as an older version saved it
    cell.save_soon()
    await cell.wait_saved()
    node = await restart(node, app_node)
    chat.cancel()

    async def resumed() -> Any:
        last = await node.ask("agent", "last_turn", {"session_id": "legacy"}, ctx=ADA)
        return last if last.get("status") == "ok" else None

    await until(resumed, what="the legacy turn resumed")
    assert doubles.SCRIPT.contexts["legacy"] == ("ada", frozenset({"user"}))


async def test_a_resumed_orchestration_runs_its_sub_tasks_as_whoever_started_it(
    app_node: Any, clock: Any
) -> None:
    node = await app_node(scripted=True)

    def answer(session: str, messages: list[dict[str, Any]]) -> str:
        if "Split the user's task" in messages[0]["content"]:
            return json.dumps([{"task": "step one", "after": []}, {"task": "step two", "after": [0]}])
        return f"did {messages[-1]['content'].splitlines()[0]}"

    doubles.SCRIPT.answer = answer
    entered = hold("orch:o1:0")
    await node.ask("orchestrator", "start", {"task": "two steps", "task_id": "o1"}, ctx=ADA)
    await asyncio.wait_for(entered.wait(), 10)
    node = await restart(node, app_node)  # step one is mid-turn; step two has not started

    async def completed() -> Any:
        status = await node.ask("orchestrator", "status", {"task_id": "o1"}, ctx=ADA)
        return status if status["status"] == "completed" else None

    status = await advance_until(clock, completed, "the orchestration finished after the restart")
    assert status["attempt"] == 2
    # Step two's turn was started by the resumed run: as ada, with her roles, not as system.
    assert doubles.SCRIPT.contexts["orch:o1:1"] == ("ada", frozenset({"admin"}))
    assert doubles.SCRIPT.contexts["orch:o1:0"] == ("ada", frozenset({"admin"}))


async def test_an_orchestration_saved_without_its_starter_fails_instead_of_running_as_system(
    app_node: Any,
) -> None:
    node = await app_node(scripted=True)
    doubles.SCRIPT.answer = lambda session, messages: json.dumps([{"task": "only step", "after": []}])
    entered = hold("orch:o2:0")
    await node.ask("orchestrator", "start", {"task": "one step", "task_id": "o2"}, ctx=ADA)
    await asyncio.wait_for(entered.wait(), 10)
    [cell] = [c for c in node.cells("orchestrator") if c.key == "o2"]
    cell.instance.run_as = None  # type: ignore[union-attr]  # as an older version saved it
    cell.save_soon()
    await cell.wait_saved()
    node = await restart(node, app_node)

    async def failed() -> Any:
        status = await node.ask("orchestrator", "status", {"task_id": "o2"}, ctx=ADA)
        return status if status["status"] == "failed" else None

    status = await until(failed, what="the legacy orchestration failed")
    assert status["error"]["code"] == "permission_denied", status


async def test_a_queued_task_cut_off_mid_turn_finishes_as_the_principal_that_enqueued_it(
    app_node: Any, clock: Any
) -> None:
    node = await app_node(scripted=True)
    entered = hold("t-bob")
    payload = {"prompt": "summarise my notes", "session_id": "t-bob"}
    sent = await node.ask("task_queue", "enqueue", {"task_type": "agent_prompt", "payload": payload}, ctx=BOB)
    await asyncio.wait_for(entered.wait(), 10)
    assert doubles.SCRIPT.contexts["t-bob"] == AS_BOB
    node = await restart(node, app_node)

    async def done() -> Any:
        got = await node.ask("task_queue", "get_result", {"msg_id": sent["msg_id"]}, ctx=BOB)
        return got if got["status"] == "ok" else None

    result = await advance_until(clock, done, "the task's result after the restart")
    assert result["result"]["status"] == "ok"
    assert doubles.SCRIPT.contexts["t-bob"] == AS_BOB
    history = (await node.ask("agent", "get_history", {"session_id": "t-bob"}, ctx=BOB))["messages"]
    assert sum(m["role"] == "user" for m in history) == 1  # resumed and taken by the redelivery, not rerun


async def test_a_delegated_child_and_its_parent_resume_as_the_user(app_node: Any) -> None:
    node = await app_node(scripted=True)

    def answer(session: str, messages: list[dict[str, Any]]) -> str | dict[str, Any]:
        if messages[-1]["role"] == "tool":
            return f"parent saw: {messages[-1]['content'][:200]}"
        if session == "p-bob":
            call = {
                "id": "c1",
                "name": "delegate_task",
                "input": {"goal": "look it up", "toolsets": ["compute"]},
            }
            return {"content": "", "stop_reason": "tool_use", "tool_calls": [call]}
        return "child summary"

    doubles.SCRIPT.answer = answer
    entered = asyncio.Event()
    doubles.SCRIPT.hold = _Prefixed("delegate:", asyncio.Event())
    doubles.SCRIPT.entered = _Prefixed("delegate:", entered)
    chat = asyncio.ensure_future(
        node.ask("agent", "chat", {"message": "delegate it", "session_id": "p-bob"}, ctx=BOB)
    )
    await asyncio.wait_for(entered.wait(), 10)
    [first_child] = [s for s in doubles.SCRIPT.contexts if s.startswith("delegate:")]
    assert doubles.SCRIPT.contexts[first_child] == AS_BOB
    doubles.SCRIPT.entered = {}
    node = await restart(node, app_node)
    chat.cancel()

    async def parent_done() -> Any:
        last = await node.ask("agent", "last_turn", {"session_id": "p-bob"}, ctx=BOB)
        return last if last.get("status") == "ok" else None

    async def child_done() -> Any:
        last = await node.ask("agent", "last_turn", {"session_id": first_child}, ctx=BOB)
        return last if last.get("status") == "ok" else None

    assert "child summary" in (await until(parent_done, what="the parent's resumed turn"))["response"]
    await until(child_done, what="the cut-off child's resumed turn")
    # The cut-off child finished as bob; the parent's resumed delegate_task started its new child as bob.
    children = {s: ctx for s, ctx in doubles.SCRIPT.contexts.items() if s.startswith("delegate:")}
    assert first_child in children and len(children) == 2, children
    assert set(children.values()) == {AS_BOB} and doubles.SCRIPT.contexts["p-bob"] == AS_BOB


async def test_a_kanban_card_waiting_for_approval_across_a_restart_resumes_as_its_author(
    app_node: Any, clock: Any
) -> None:
    node = await app_node(scripted=True)

    def answer(session: str, messages: list[dict[str, Any]]) -> str | dict[str, Any]:
        if messages[-1]["role"] == "tool":
            return "I wrote note.txt."
        call = {"id": "c-w", "name": "write_file", "input": {"path": "note.txt", "content": "hello"}}
        return {"content": "", "stop_reason": "tool_use", "tool_calls": [call]}

    doubles.SCRIPT.answer = answer
    made = await node.ask("kanban", "create", {"title": "Write note.txt", "assignee": "agent"}, ctx=BOB)
    task_id = made["task_id"]

    async def waiting() -> Any:
        card = (await node.ask("kanban", "show", {"task_id": task_id}, ctx=BOB))["task"]
        return card if card["status"] == "blocked" else None

    card = await until(waiting, what="the card waiting for approval")
    assert "waiting for approval" in card["blocked_reason"]
    session = f"kanban:{task_id}:1"
    assert doubles.SCRIPT.contexts[session] == AS_BOB
    node = await restart(node, app_node)
    (pending,) = (await node.ask("guardrails", "list_approvals", {}, ctx=OPS))["approvals"]
    await node.ask("guardrails", "approve", {"approval_id": pending["approval_id"]}, ctx=OPS)

    async def done() -> Any:
        got = (await node.ask("kanban", "show", {"task_id": task_id}, ctx=BOB))["task"]
        return got if got["status"] == "done" else None

    card = await advance_until(clock, done, "the card done after the approval")
    assert card["summary"] == "I wrote note.txt." and card["attempts"] == 1
    assert doubles.SCRIPT.contexts[session] == AS_BOB  # the resumed turn acted for its author
