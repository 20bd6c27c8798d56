"""The kanban worker's outcome (issue 19): a card ends the way its agent turn did, and its author is told.

Done only when the turn ended ok with an answer, no tool call failed and the answer does not say it cannot;
failed (blocked with the reason) otherwise; waiting (blocked with the approval) when the turn paused; each
outcome is a comment on the card by ``kanban_worker`` and an audit event. Moving a ready card to
``in_progress`` by hand claims it, as ``start`` does.
"""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.runtime import ActorError, Node, RequestContext
from minihermes.work.kanban_worker import judge

from . import doubles
from .conftest import ACME, until

OPS = RequestContext(tenant="acme", principal="ops", roles=frozenset({"admin"}))
"""Another admin: nobody approves a call of their own turn."""


async def kb(node: Node, op: str, ctx: RequestContext = ACME, **payload: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask("kanban", op, payload, ctx=ctx)
    return reply


async def settled(node: Node, task_id: str) -> dict[str, Any]:
    """The card once the worker has left it (not ready, not claimed) and reported on it."""

    async def check() -> dict[str, Any] | None:
        card: dict[str, Any] = (await kb(node, "show", task_id=task_id))["task"]
        if card["status"] in ("ready", "in_progress") or not card["comments"]:
            return None
        return card

    found: dict[str, Any] = await until(check, what=f"card {task_id} settled")
    return found


async def outcomes(node: Node) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        reply = await node.ask(
            "audit_event", "query_events", {"event_type": "kanban_worker_outcome"}, ctx=ACME
        )
        events: list[dict[str, Any]] = reply["events"]
        return events or None

    found: list[dict[str, Any]] = await until(check, what="kanban_worker_outcome audit events")
    return found


def tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": f"Let me use {name}.",
        "stop_reason": "tool_use",
        "tool_calls": [{"id": f"c-{name}", "name": name, "input": args}],
    }


async def test_the_offline_model_computes_and_remembers_and_the_card_is_done(app_node: Any) -> None:
    """The README's example with the embedded offline model: done, with a true summary (it was a
    ``kanban_show invalid_input`` error: the worker's protocol text read as a request)."""
    node = await app_node()
    task_id = (await kb(node, "create", title="Compute 6 * 7 and remember it as answer", assignee="agent"))[
        "task_id"
    ]
    card = await settled(node, task_id)
    assert card["status"] == "done", card
    assert "42" in card["summary"] and "kanban_show" not in card["summary"]
    assert "invalid_input" not in card["summary"] and "error" not in card["summary"].lower()
    remembered = await node.ask("memory", "recall_memory", {"key": "answer"}, ctx=ACME)
    assert remembered["found"] and remembered["value"] == "42"
    history = await node.ask("agent", "get_history", {"session_id": f"kanban:{task_id}:1"}, ctx=ACME)
    called = [c["name"] for m in history["messages"] for c in m.get("tool_calls") or []]
    assert "kanban_show" not in called and "calculator" in called and "memory_store" in called
    (comment,) = card["comments"]
    assert comment["author"] == "kanban_worker" and comment["text"].startswith("Done: ")
    assert "42" in comment["text"]
    (event,) = await outcomes(node)
    assert event["data"]["outcome"] == "done" and event["data"]["created_by"] == "alice"
    assert event["data"]["task_id"] == task_id


async def test_a_failed_tool_call_fails_the_card_with_the_reason(app_node: Any) -> None:
    node = await app_node(scripted=True)

    def answer(session: str, messages: list[dict[str, Any]]) -> Any:
        if messages[-1]["role"] == "tool":
            return "All done, the file says hello."  # not true: the read failed
        return tool_call("read_file", {"path": "missing.txt"})

    doubles.SCRIPT.answer = answer
    task_id = (await kb(node, "create", title="Read missing.txt", assignee="agent"))["task_id"]
    card = await settled(node, task_id)
    assert card["status"] == "blocked" and card["summary"] == ""
    assert card["blocked_reason"].startswith("failed: a tool call failed: read_file")
    assert "missing.txt" in card["blocked_reason"] or "not_found" in card["blocked_reason"]
    assert [c["text"].split(":")[0] for c in card["comments"]] == ["Failed"]
    assert "read_file" in card["comments"][0]["text"]
    events = [e["type"] for e in (await kb(node, "show", task_id=task_id))["events"]]
    assert "completed" not in events and "blocked" in events and events[-1] == "commented"
    (event,) = await outcomes(node)
    assert event["data"]["outcome"] == "failed" and "read_file" in event["data"]["detail"]
    assert doubles.SCRIPT.calls.count(f"kanban:{task_id}:1") == 2 and f"kanban:{task_id}:2" not in (
        doubles.SCRIPT.calls
    )  # final: the same model would fail the same way again


async def test_an_answer_contradicting_its_tool_results_fails_the_card(app_node: Any) -> None:
    node = await app_node(scripted=True)

    def answer(session: str, messages: list[dict[str, Any]]) -> Any:
        if messages[-1]["role"] == "tool":
            return "6 * 7 = 41."  # the calculator said 42
        return tool_call("calculator", {"expression": "6 * 7"})

    doubles.SCRIPT.answer = answer
    task_id = (await kb(node, "create", title="Compute 6 * 7", assignee="agent"))["task_id"]
    card = await settled(node, task_id)
    assert card["status"] == "blocked" and card["summary"] == ""
    assert "contradicts the turn's tool results" in card["blocked_reason"], card["blocked_reason"]


async def test_an_answer_that_says_it_cannot_fails_the_card(app_node: Any) -> None:
    node = await app_node(scripted=True)
    doubles.SCRIPT.answer = lambda session, messages: (
        'I can\'t do "Paint the fence blue": I have no painting tool.'
    )
    task_id = (await kb(node, "create", title="Paint the fence blue", assignee="agent"))["task_id"]
    card = await settled(node, task_id)
    assert card["status"] == "blocked" and card["summary"] == ""
    assert "could not do it" in card["blocked_reason"] and "no painting tool" in card["blocked_reason"]
    assert card["comments"][0]["text"].startswith("Failed: the agent could not do it")


def write_then_answer(session: str, messages: list[dict[str, Any]]) -> Any:
    if messages[-1]["role"] == "tool":
        return "I wrote note.txt."
    return tool_call("write_file", {"path": "note.txt", "content": "hello"})


async def waiting_card(node: Node) -> tuple[str, dict[str, Any], str]:
    """A card whose turn paused for the approval of a write_file call: (task_id, card, approval_id)."""
    doubles.SCRIPT.answer = write_then_answer
    task_id = (await kb(node, "create", title="Write hello to note.txt", assignee="agent"))["task_id"]
    card = await settled(node, task_id)
    assert card["status"] == "blocked" and "waiting for approval" in card["blocked_reason"]
    assert "write_file" in card["blocked_reason"] and card["summary"] == ""
    assert card["comments"][0]["text"].startswith("Waiting: waiting for approval")
    (pending,) = (await node.ask("guardrails", "list_approvals", {}, ctx=OPS))["approvals"]
    assert pending["approval_id"] in card["blocked_reason"]
    return task_id, card, str(pending["approval_id"])


async def ended(node: Node, clock: Any, task_id: str, status: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        await clock.advance(6)  # the worker's next poll
        got: dict[str, Any] = (await kb(node, "show", task_id=task_id))["task"]
        last = got["comments"][-1]["text"] if got["comments"] else ""
        return got if got["status"] == status and not last.startswith("Waiting") else None

    found: dict[str, Any] = await until(check, what=f"{task_id} {status}")
    return found


async def test_a_card_waiting_for_approval_ends_when_it_is_approved(app_node: Any, clock: Any) -> None:
    node = await app_node(scripted=True)
    task_id, _, approval = await waiting_card(node)
    calls = len(doubles.SCRIPT.calls)
    resumed = await node.ask("guardrails", "approve", {"approval_id": approval}, ctx=OPS)
    assert resumed["status"] == "ok"
    assert len(doubles.SCRIPT.calls) == calls + 1  # the resumed turn's answer
    card = await ended(node, clock, task_id, "done")
    assert card["summary"] == "I wrote note.txt." and card["attempts"] == 1  # not run again
    assert [c["text"].split(":")[0] for c in card["comments"]] == ["Waiting", "Done"]
    assert len(doubles.SCRIPT.calls) == calls + 1


async def test_a_waiting_card_unblocked_early_is_not_run_twice_and_a_denial_fails_it(
    app_node: Any, clock: Any
) -> None:
    node = await app_node(scripted=True)
    task_id, _, approval = await waiting_card(node)
    calls = len(doubles.SCRIPT.calls)
    await kb(node, "unblock", task_id=task_id)  # before anybody decided

    async def waiting_again() -> dict[str, Any] | None:
        await clock.advance(6)
        got: dict[str, Any] = (await kb(node, "show", task_id=task_id))["task"]
        return got if got["status"] == "blocked" and len(got["comments"]) == 2 else None

    card = await until(waiting_again)
    assert card["attempts"] == 2 and "waiting for approval" in card["blocked_reason"]
    assert len(doubles.SCRIPT.calls) == calls  # the paused turn is waited for, not run again
    await node.ask("guardrails", "deny", {"approval_id": approval}, ctx=OPS)
    card = await ended(node, clock, task_id, "blocked")
    assert card["blocked_reason"].startswith("failed: "), card["blocked_reason"]
    assert card["comments"][-1]["text"].startswith("Failed: ")


async def test_an_agent_unavailable_is_retried_then_blocked_and_reported(app_node: Any, clock: Any) -> None:
    node = await app_node(scripted=True)
    task_id = (await kb(node, "create", title="Impossible", assignee="agent"))["task_id"]
    doubles.SCRIPT.fail.update({f"kanban:{task_id}:1", f"kanban:{task_id}:2"})

    async def blocked() -> dict[str, Any] | None:
        await clock.advance(6)
        got = (await kb(node, "show", task_id=task_id))["task"]
        return got if got["status"] == "blocked" and len(got["comments"]) == 2 else None

    card = await until(blocked)
    first, second = (c["text"] for c in card["comments"])
    assert first.startswith("Failed: llm_unavailable") and first.endswith("(the card will be retried)")
    assert second.startswith("Failed: llm_unavailable") and "retried" not in second


def test_judge_reads_the_turn_not_only_its_status() -> None:
    ok = {"status": "ok", "response": "6 x 7 = 42."}
    assert judge(ok, []) == ("done", "6 x 7 = 42.")
    failed_tool = {
        "role": "tool",
        "name": "kanban_show",
        "is_error": True,
        "content": '{"error": {"code": "invalid_input", "message": "input.task_id is too long"}}',
    }
    outcome, reason = judge(ok, [failed_tool])
    assert outcome == "failed" and "kanban_show: invalid_input: input.task_id is too long" in reason
    assert judge({"status": "max_iterations", "response": "x"}, [])[0] == "failed"
    assert judge({"status": "ok", "response": "  "}, [])[0] == "failed"
    assert judge({"status": "ok", "response": "6 x 7 = 42. I can't save that."}, [])[0] == "failed"
    assert judge({"status": "ok", "response": "I couldn't find any errors; all good."}, [])[0] == "done"
    paused = {"status": "paused", "approval_id": "ap1", "pending_tool": {"name": "terminal"}}
    assert judge(paused, []) == (
        "waiting",
        "waiting for approval ap1 of terminal; the card ends when it is decided",
    )


async def test_moving_a_ready_card_to_in_progress_claims_it(app_node: Any) -> None:
    node = await app_node(scripted=True)
    task_id = (await kb(node, "create", title="By hand"))["task_id"]
    moved = await kb(node, "move", task_id=task_id, status="in_progress")
    assert moved["task"]["status"] == "in_progress" and moved["task"]["claim"]["worker"] == "alice"
    assert moved["task"]["attempts"] == 1
    done = await kb(node, "complete", task_id=task_id, summary="did it", worker="alice")
    assert done["task"]["status"] == "done"
    other = (await kb(node, "create", title="Stuck"))["task_id"]
    await kb(node, "block", task_id=other, reason="waiting for bob")
    with pytest.raises(ActorError) as e:
        await kb(node, "move", task_id=other, status="in_progress")
    assert e.value.code == "conflict" and "start(" in e.value.message and "blocked" in e.value.message
