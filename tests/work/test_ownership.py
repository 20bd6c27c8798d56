"""Ownership inside a tenant for the work actors (issue 17): kanban cards, cron jobs and goals act on the request
context, not the body; users change only what they own, admins everything; impossible schedules are a 4xx;
free text is stored with secrets redacted."""

from __future__ import annotations

import pytest

from minihermes.runtime import ActorError, Node, RequestContext

from . import doubles
from .conftest import until

BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))
ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
KEY = "sk-abcdefghijklmnopqrstuvwx"
"""A key-shaped string the chat redaction recognises (tests/context/test_redact_tokens.py)."""


async def ask(node: Node, actor: str, op: str, ctx: RequestContext, **payload):
    return await node.ask(actor, op, payload, ctx=ctx)


async def refused(node: Node, actor: str, op: str, ctx: RequestContext, code: str, **payload) -> ActorError:
    with pytest.raises(ActorError) as e:
        await node.ask(actor, op, payload, ctx=ctx)
    assert e.value.code == code, (op, e.value.code, e.value.message)
    return e.value


async def card(node: Node, task_id: str) -> dict:
    return (await ask(node, "kanban", "show", ADA, task_id=task_id))["task"]


# -- kanban ---------------------------------------------------------------------------------------------------


async def test_a_comment_is_written_by_the_caller_whatever_the_body_says(app_node):
    node = await app_node(scripted=True)
    t = (await ask(node, "kanban", "create", ALICE, title="Alice's card"))["task_id"]
    await ask(node, "kanban", "comment", BOB, task_id=t, text="I am alice", author="alice")
    await ask(node, "kanban", "comment", ADA, task_id=t, text="for carol", author="carol")
    comments = (await card(node, t))["comments"]
    assert [(c["author"], c["text"]) for c in comments] == [("bob", "I am alice"), ("carol", "for carol")]
    # the author of a card is the caller too; an admin may name one
    mine = (await ask(node, "kanban", "create", BOB, title="x", created_by="alice"))["task"]
    assert mine["created_by"] == "bob"
    theirs = (await ask(node, "kanban", "create", ADA, title="y", created_by="carol"))["task"]
    assert theirs["created_by"] == "carol"


async def test_only_the_author_the_assignee_or_an_admin_changes_a_card(app_node):
    node = await app_node(scripted=True)
    t = (await ask(node, "kanban", "create", ALICE, title="Alice's card", assignee="carol"))["task_id"]
    before = await card(node, t)
    attempts = [
        ("update", {"title": "bob was here"}),
        ("assign", {"assignee": "bob"}),
        ("move", {"status": "blocked"}),
        ("block", {"reason": "bob says no"}),
        ("start", {"worker": "bob"}),
        ("complete", {"summary": "done by bob"}),
        ("cancel", {"reason": "bob"}),
        ("archive", {}),
        ("delete", {}),
    ]
    for op, payload in attempts:
        e = await refused(node, "kanban", op, BOB, "permission_denied", task_id=t, **payload)
        assert t in e.message and "author" in e.message
    assert await card(node, t) == before  # nothing changed
    # the assignee may, the author may, an admin may
    await ask(node, "kanban", "update", CAROL, task_id=t, title="Carol's take")
    await ask(node, "kanban", "block", CAROL, task_id=t, reason="waiting on data")
    await refused(node, "kanban", "unblock", BOB, "permission_denied", task_id=t)
    await ask(node, "kanban", "unblock", ALICE, task_id=t)
    await ask(node, "kanban", "cancel", ADA, task_id=t, reason="not needed")
    await ask(node, "kanban", "archive", ALICE, task_id=t)
    c = await card(node, t)
    assert (c["title"], c["status"], c["archived"]) == ("Carol's take", "cancelled", True)
    # everyone still reads the shared board and may comment
    assert [
        x["task_id"] for x in (await ask(node, "kanban", "list", BOB, include_archived=True))["tasks"]
    ] == [t]
    await ask(node, "kanban", "comment", BOB, task_id=t, text="fine by me")


async def test_a_users_agent_cannot_change_another_users_card_through_the_tools(app_node):
    node = await app_node(scripted=True)
    t = (await ask(node, "kanban", "create", ALICE, title="Alice's card"))["task_id"]
    for name, args in [
        ("kanban_cancel", {"task_id": t}),
        ("kanban_update", {"task_id": t, "title": "mine now"}),
        ("kanban_delete", {"task_id": t}),
    ]:
        run = await ask(node, "tool_executor", "execute", BOB, name=name, input=args, session_id="bob-s")
        assert run["status"] == "error" and run["error"]["code"] == "permission_denied", (name, run)
    # a whole turn of bob's: the model asks for the cancel; the board refuses it
    call = {"id": "c1", "name": "kanban_cancel", "input": {"task_id": t}}

    def answer(session: str, messages: list[dict]) -> str | dict:
        if messages[-1]["role"] == "tool":
            return f"tool said: {messages[-1]['content']}"
        return {"content": "", "stop_reason": "tool_use", "tool_calls": [call]}

    doubles.SCRIPT.answer = answer
    reply = await ask(node, "agent", "chat", BOB, message="cancel alice's card", session_id="bob-s")
    assert "permission_denied" in reply["response"]
    c = await card(node, t)
    assert c["status"] == "ready" and c["title"] == "Alice's card"


async def test_the_worker_still_finishes_agent_cards_a_user_created(app_node):
    node = await app_node(scripted=True)
    doubles.SCRIPT.answer = lambda session, messages: f"summary of {session.split(':')[1]}"
    t1 = (await ask(node, "kanban", "create", ALICE, title="First", assignee="agent"))["task_id"]
    t2 = (await ask(node, "kanban", "create", BOB, title="Then", assignee="agent", depends_on=[t1]))[
        "task_id"
    ]

    async def done(task_id: str) -> bool:
        return (await card(node, task_id))["status"] == "done"

    await until(lambda: done(t1))
    # t2 became ready when the worker completed t1 (for alice): the nudge has it claimed at once, by the
    # worker, not as alice (who may not claim bob's card), with no poll of the clock needed
    await until(lambda: done(t2), timeout=10)
    assert (await card(node, t2))["summary"] == f"summary of {t2}"
    # each turn acted as the card's author with the user role
    assert doubles.SCRIPT.contexts[f"kanban:{t1}:1"] == ("alice", frozenset({"user"}))
    assert doubles.SCRIPT.contexts[f"kanban:{t2}:1"] == ("bob", frozenset({"user"}))


async def test_secrets_typed_into_a_card_are_stored_redacted(app_node):
    node = await app_node(scripted=True)
    t = (await ask(node, "kanban", "create", ALICE, title=f"rotate {KEY}", body=f"the key is {KEY}"))[
        "task_id"
    ]
    await ask(node, "kanban", "comment", ALICE, task_id=t, text=f"old one: {KEY}")
    await ask(node, "kanban", "update", ALICE, task_id=t, body=f"api_key={KEY}")
    await ask(node, "kanban", "complete", ALICE, task_id=t, summary=f"rotated {KEY}", metadata={"note": KEY})
    shown = await ask(node, "kanban", "show", ALICE, task_id=t)
    assert KEY not in repr(shown) and "[REDACTED]" in shown["task"]["title"]
    assert shown["task"]["comments"][0]["text"] == "old one: [REDACTED]"
