"""The agent acts as its caller (issue 17): every tool call of a turn is authorized with the turn's principal
and roles exactly as the same op over HTTP; a refusal is a ``permission_denied`` tool result the LLM reads,
and an audit event."""

from __future__ import annotations

import json
from typing import Any

from minihermes.permissions import DEFAULT_PERMISSIONS
from minihermes.runtime import Node, RequestContext

from . import doubles
from .conftest import ACME_VIEWER

BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))


def call_tool(name: str, **inp: Any) -> None:
    """Every session's first answer calls ``name``; after the tool result it answers with that result."""

    def answer(session: str, messages: list[dict[str, Any]]) -> str | dict[str, Any]:
        last = messages[-1]
        if last["role"] == "tool":
            return f"saw: {last['content']}"
        return {
            "content": "",
            "stop_reason": "tool_use",
            "tool_calls": [{"id": "c1", "name": name, "input": inp}],
        }

    doubles.SCRIPT.answer = answer


async def chat(node: Node, ctx: RequestContext, session: str, message: str) -> dict[str, Any]:
    reply = await node.ask("agent", "chat", {"message": message, "session_id": session}, ctx=ctx)
    result: dict[str, Any] = json.loads(str(reply["response"]).removeprefix("saw: "))
    return result


async def card_exists(node: Node, task_id: str) -> bool:
    listed = await node.ask("kanban", "list", {"include_archived": True}, ctx=ADA)
    return task_id in {t["task_id"] for t in listed["tasks"]}


async def test_a_users_turn_cannot_delete_a_card_an_admins_turn_can(app_node):
    node = await app_node(scripted=True)
    assert DEFAULT_PERMISSIONS.for_node(node).access("kanban", "delete") == "admin"  # 403 for bob over HTTP
    t = (await node.ask("kanban", "create", {"title": "Alice's card"}, ctx=ALICE))["task_id"]
    call_tool("kanban_delete", task_id=t)
    refused = await chat(node, BOB, "bob-1", f"use kanban_delete task_id={t}")
    assert refused["error"]["code"] == "permission_denied", refused
    assert (refused["error"]["actor"], refused["error"]["op"], refused["error"]["access"]) == (
        "kanban",
        "delete",
        "admin",
    )
    assert await card_exists(node, t)
    # not even her own card: kanban.delete is an admin's op over HTTP, so it is in her turn too
    own = await chat(node, ALICE, "alice-1", f"use kanban_delete task_id={t}")
    assert own["error"]["code"] == "permission_denied" and await card_exists(node, t)
    events = await node.ask("audit_event", "query_events", {"event_type": "permission_denied"}, ctx=ADA)
    denied = [e for e in events["events"] if e["data"].get("tool") == "kanban_delete"]
    assert denied and denied[0]["data"]["roles"] == ["user"] and denied[0]["data"]["principal"] == "bob"
    # the same call in an admin's turn goes through
    done = await chat(node, ADA, "ada-1", f"use kanban_delete task_id={t}")
    assert "error" not in done, done
    assert not await card_exists(node, t)


async def test_a_viewers_turn_runs_read_tools_only(app_node):
    node = await app_node(scripted=True)
    await node.ask("kanban", "create", {"title": "A card"}, ctx=ADA)
    call_tool("kanban_create", title="from a viewer")
    refused = await chat(node, ACME_VIEWER, "vic-1", "make a card")
    assert refused["error"]["code"] == "permission_denied"
    call_tool("kanban_list")
    listed = await chat(node, ACME_VIEWER, "vic-2", "list the cards")
    assert [t["title"] for t in listed["tasks"]] == ["A card"]
    call_tool("calculator", expression="6 * 7")
    assert (await chat(node, ACME_VIEWER, "vic-3", "six times seven"))["result"] == 42


async def test_the_issue_repro_with_the_simulated_llm(app_node):
    """issue 17 item 4 as reported: ``agent.chat {"message": "use kanban_delete task_id=t1"}`` by a user, here
    the card's own author too (the kanban actor would let her; the permission table does not)."""
    node = await app_node()
    t = (await node.ask("kanban", "create", {"title": "Alice's card"}, ctx=ALICE))["task_id"]
    for ctx, session in ((BOB, "bob-sim"), (ALICE, "alice-sim")):
        message = {"message": f"use kanban_delete task_id={t}", "session_id": session}
        assert (await node.ask("agent", "chat", message, ctx=ctx))["status"] == "ok"
        assert await card_exists(node, t)
        history = (await node.ask("agent", "get_history", {"session_id": session}, ctx=ctx))["messages"]
        results = [m["content"] for m in history if m["role"] == "tool"]
        assert results and "permission_denied" in str(results[0]), results


async def test_a_registered_tool_on_a_built_in_kind_needs_what_the_kind_needs(app_node):
    node = await app_node(scripted=True)
    t = (await node.ask("kanban", "create", {"title": "Alice's card"}, ctx=ALICE))["task_id"]
    wrapper = {
        "name": "drop_card",
        "description": "Drop the card",
        "input_schema": {"type": "object"},
        "handler_type": "kanban_delete",
        "handler_config": {"fixed_input": {"task_id": t}},
    }
    await node.ask("tool_executor", "register_tool", wrapper, ctx=ADA)
    described = await node.ask("tool_executor", "describe_tool", {"name": "drop_card"}, ctx=BOB)
    assert described["permission"] == {"actor": "kanban", "op": "delete"}
    call_tool("drop_card")
    refused = await chat(node, BOB, "bob-wrap", "drop it")
    assert refused["error"]["code"] == "permission_denied" and await card_exists(node, t)
