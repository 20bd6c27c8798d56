"""Ownership inside a tenant for the work actors (issue 17): kanban cards, cron jobs and goals act on the request
context, not the body; users change only what they own, admins everything; impossible schedules are a 4xx;
free text is stored with secrets redacted."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest

from minihermes.api import AuthConfig, create_app
from minihermes.runtime import ActorError, Node, RequestContext

from . import doubles
from .conftest import until

BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))
ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
KEY = "sk-abcdefghijklmnopqrstuvwx"
"""A key-shaped string the chat redaction recognises (tests/context/test_redact_tokens.py)."""
SECRET = "test-secret-that-is-long-enough-for-hs256!"


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


# -- cron -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        "0 0 30 2 *",
        "0 0 31 4 *",
        "59 23 31 2,4,6,9,11 *",
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59-05:00",
    ],
)
async def test_a_schedule_that_never_fires_is_an_invalid_argument(app_node, schedule):
    node = await app_node(scripted=True)
    e = await refused(
        node,
        "cron_scheduler",
        "create_job",
        ADA,
        "invalid_argument",
        job_id="j",
        prompt="p",
        schedule=schedule,
    )
    assert e.details["field"] == "schedule"
    assert (await ask(node, "cron_scheduler", "list_jobs", ADA))["jobs"] == []
    # the leap day fires (every four years): not refused
    made = await ask(
        node, "cron_scheduler", "create_job", ADA, job_id="leap", prompt="p", schedule="0 0 29 2 *"
    )
    assert made["next_run_at"] is not None


async def test_a_schedule_that_never_fires_is_a_4xx_over_http(app_node):
    node = await app_node(scripted=True)
    app = create_app(node, AuthConfig(jwt_secret=SECRET, api_keys=False), dashboard=False)
    claims = {"tenant": "acme", "sub": "ada", "roles": ["admin"], "exp": int(time.time()) + 300}
    headers = {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        r = await c.post(
            "/api/v1/actors/cron_scheduler/create_job",
            json={"job_id": "feb30", "prompt": "p", "schedule": "0 0 30 2 *"},
            headers=headers,
        )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_argument" and "never fires" in error["message"]


async def test_users_see_and_change_only_their_own_cron_jobs(app_node):
    node = await app_node(scripted=True)
    await ask(
        node, "cron_scheduler", "create_job", ALICE, job_id="alice-daily", prompt="p", schedule="every_24h"
    )
    await ask(node, "cron_scheduler", "create_job", BOB, job_id="bob-daily", prompt="p", schedule="every_24h")
    assert [j["job_id"] for j in (await ask(node, "cron_scheduler", "list_jobs", BOB))["jobs"]] == [
        "bob-daily"
    ]
    for op in ("get_job", "job_runs", "pause_job", "resume_job", "run_now", "delete_job"):
        await refused(node, "cron_scheduler", op, BOB, "not_found", job_id="alice-daily")
    await refused(
        node,
        "cron_scheduler",
        "create_job",
        BOB,
        "permission_denied",
        job_id="alice-daily",
        prompt="mine now",
        schedule="every_1h",
        replace=True,
    )
    # nor share the cron session of alice's job (its history is in every run's prompt)
    e = await refused(
        node,
        "cron_scheduler",
        "create_job",
        BOB,
        "conflict",
        job_id="bob-2",
        prompt="p",
        schedule="every_1h",
        session_id="alice-daily",
    )
    assert e.details["field"] == "session_id"
    got = await ask(node, "cron_scheduler", "get_job", ALICE, job_id="alice-daily")
    assert got["job"]["owner"] == "alice" and got["job"]["prompt"] == "p"
    listed = {j["job_id"] for j in (await ask(node, "cron_scheduler", "list_jobs", ADA))["jobs"]}
    assert listed == {"alice-daily", "bob-daily"}  # an admin sees and changes every job
    await ask(node, "cron_scheduler", "pause_job", ADA, job_id="alice-daily")
    await ask(node, "cron_scheduler", "delete_job", ALICE, job_id="alice-daily")


async def test_a_job_runs_as_its_owner_with_the_owners_roles(app_node):
    node = await app_node(scripted=True)
    await ask(node, "cron_scheduler", "create_job", BOB, job_id="bobs", prompt="hello", schedule="every_24h")
    await ask(node, "cron_scheduler", "run_now", BOB, job_id="bobs")

    async def finished():
        runs = (await ask(node, "cron_scheduler", "job_runs", BOB, job_id="bobs"))["runs"]
        return runs and runs[0]["status"] == "completed"

    await until(finished)
    assert doubles.SCRIPT.contexts["cron:bobs"] == ("bob", frozenset({"user"}))


async def test_a_key_in_a_cron_prompt_is_stored_redacted(app_node):
    node = await app_node(scripted=True)
    prompt = f"check the deploy with token {KEY}"
    await ask(
        node, "cron_scheduler", "create_job", ALICE, job_id="deploy", prompt=prompt, schedule="every_1h"
    )
    job = (await ask(node, "cron_scheduler", "get_job", ALICE, job_id="deploy"))["job"]
    assert KEY not in job["prompt"] and "[REDACTED]" in job["prompt"]


# -- goals ----------------------------------------------------------------------------------------------------


async def test_users_see_and_change_only_their_own_goals(app_node):
    node = await app_node(scripted=True)
    a = await ask(node, "goals", "set_goal", ALICE, session_id="alice-s", text="ship the report")
    await ask(node, "goals", "set_goal", ADA, session_id="*", text="keep answers short")
    assert a["goal"]["owner"] == "alice"
    seen = (await ask(node, "goals", "list_goals", BOB))["goals"]
    assert [g["text"] for g in seen] == ["keep answers short"]  # the tenant's goal, not alice's
    assert (await ask(node, "goals", "list_goals", BOB, session_id="alice-s"))["goals"] == seen
    await refused(node, "goals", "complete_goal", BOB, "not_found", goal_id=a["goal_id"])
    await refused(node, "goals", "clear_goal", BOB, "not_found", goal_id=a["goal_id"])
    assert (await ask(node, "goals", "clear_goal", BOB, session_id="alice-s"))["cleared"] == 0
    await refused(node, "goals", "set_goal", BOB, "permission_denied", session_id="*", text="obey bob")
    mine = [g["text"] for g in (await ask(node, "goals", "list_goals", ALICE, session_id="alice-s"))["goals"]]
    assert sorted(mine) == ["keep answers short", "ship the report"]
    # the tenant's goal is an admin's to clear
    star = next(g for g in seen if g["session_id"] == "*")
    await refused(node, "goals", "clear_goal", ALICE, "not_found", goal_id=star["goal_id"])
    # a session alice chats in is hers: bob sets no goal there; an admin may set one for her
    await ask(node, "agent", "chat", ALICE, message="hello", session_id="alice-s", user_id="alice")
    await refused(node, "goals", "set_goal", BOB, "permission_denied", session_id="alice-s", text="obey bob")
    made = await ask(node, "goals", "set_goal", ADA, session_id="alice-s", text="be brief", user_id="alice")
    assert made["goal"]["owner"] == "alice"
    await ask(node, "goals", "complete_goal", ALICE, goal_id=made["goal_id"])


async def test_a_key_in_a_goal_is_stored_redacted(app_node):
    node = await app_node(scripted=True)
    made = await ask(node, "goals", "set_goal", ALICE, session_id="s", text=f"use {KEY} to deploy")
    listed = (await ask(node, "goals", "list_goals", ALICE, session_id="s"))["goals"]
    assert KEY not in repr(made) and KEY not in repr(listed) and "[REDACTED]" in listed[0]["text"]
