"""The agent's tools for time and intent (issue 19): ``cron_*`` (toolset ``schedule``) and ``goal_*`` (toolset
``goals``), run by the real tool executor with the turn's caller's context: a user schedules, lists, pauses,
resumes and deletes their own jobs and nobody else's, an admin sees and changes every job; goals are set,
listed, completed and cleared by their owner."""

from __future__ import annotations

import json
from typing import Any

import pytest

from minihermes.app import TOOLSETS
from minihermes.runtime import ActorError, Node, RequestContext, ServiceLink, ServiceLinks

from . import doubles
from .conftest import ACME_VIEWER, until

BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
MONDAY_9 = "0 9 * * 1"


async def tool(
    node: Node, ctx: RequestContext, name: str, /, session: str = "", **inp: Any
) -> dict[str, Any]:
    """One call of ``name`` as the tool executor runs it in a turn of ``ctx`` in ``session``."""
    payload = {"name": name, "input": inp, "session_id": session or f"{ctx.principal}-chat"}
    reply: dict[str, Any] = await node.ask("tool_executor", "execute", payload, ctx=ctx)
    return reply


async def ok(node: Node, ctx: RequestContext, name: str, /, **inp: Any) -> dict[str, Any]:
    reply = await tool(node, ctx, name, **inp)
    assert reply["status"] == "ok", reply
    result: dict[str, Any] = reply["result"]
    return result


async def error(node: Node, ctx: RequestContext, name: str, /, **inp: Any) -> dict[str, Any]:
    reply = await tool(node, ctx, name, **inp)
    assert reply["status"] == "error", reply
    failure: dict[str, Any] = reply["error"]
    return failure


async def job_ids(node: Node, ctx: RequestContext) -> set[str]:
    return {j["job_id"] for j in (await ok(node, ctx, "cron_list"))["jobs"]}


def test_the_toolsets_are_the_apps_with_the_contracted_names():
    by_name = {t.name: sorted(x.name for x in t.tools) for t in TOOLSETS}
    assert by_name["schedule"] == ["cron_delete", "cron_list", "cron_pause", "cron_resume", "cron_schedule"]
    assert by_name["goals"] == ["goal_clear", "goal_complete", "goal_list", "goal_set"]


async def test_a_user_schedules_lists_pauses_resumes_and_deletes_their_own_job(app_node):
    node = await app_node(scripted=True)
    made = await ok(
        node, BOB, "cron_schedule", schedule=MONDAY_9, prompt="Remind me to water the plants", name="plants"
    )
    job = made["job"]
    assert made["scheduled"] and job["job_id"].startswith("plants-")
    assert (job["owner"], job["schedule"], job["tz"], job["status"]) == ("bob", MONDAY_9, "UTC", "active")
    assert job["next_run"].endswith("T09:00:00Z")
    stored = (await node.ask("cron_scheduler", "get_job", {"job_id": job["job_id"]}, ctx=ADA))["job"]
    assert stored["cron_session"] == f"cron:{job['job_id']}"  # its runs: a session of their own
    # the same call again (a resumed turn) finds the job it made
    again = await ok(
        node, BOB, "cron_schedule", schedule=MONDAY_9, prompt="Remind me to water the plants", name="plants"
    )
    assert again["already_scheduled"] and again["job"]["job_id"] == job["job_id"]
    assert await job_ids(node, BOB) == {job["job_id"]}

    paused = await ok(node, BOB, "cron_pause", job_id=job["job_id"])
    assert paused["job_status"] == "paused"
    assert (await ok(node, BOB, "cron_list"))["jobs"][0]["status"] == "paused"
    resumed = await ok(node, BOB, "cron_resume", job_id=job["job_id"])
    assert resumed["job_status"] == "active"
    assert (await ok(node, BOB, "cron_delete", job_id=job["job_id"]))["deleted"] is True
    assert await job_ids(node, BOB) == set()


async def test_a_timezone_is_the_schedules(app_node):
    node = await app_node(scripted=True)
    job = (
        await ok(node, BOB, "cron_schedule", schedule="30 7 * * *", prompt="stretch", timezone="Asia/Tokyo")
    )["job"]
    assert job["tz"] == "Asia/Tokyo" and job["next_run"].endswith("T22:30:00Z")  # 07:30 JST


async def test_a_users_job_runs_the_prompt_as_a_turn_of_the_user(app_node):
    node = await app_node(scripted=True)
    job_id = (await ok(node, BOB, "cron_schedule", schedule=MONDAY_9, prompt="say hello"))["job"]["job_id"]
    await node.ask("cron_scheduler", "run_now", {"job_id": job_id}, ctx=BOB)  # a user's op now

    async def finished() -> bool:
        runs = (await node.ask("cron_scheduler", "job_runs", {"job_id": job_id}, ctx=BOB))["runs"]
        return bool(runs) and runs[0]["status"] == "completed"

    await until(finished)
    assert doubles.SCRIPT.contexts[f"cron:{job_id}"] == ("bob", frozenset({"user"}))
    history = await node.ask("agent", "get_history", {"session_id": f"cron:{job_id}"}, ctx=BOB)
    assert [m["content"] for m in history["messages"] if m["role"] == "user"] == ["say hello"]
    # the run's session is bob's, listed with the cron channel and titled by the prompt
    sessions = (await node.ask("session_manager", "list_sessions", {}, ctx=BOB))["sessions"]
    assert [(s["session_id"], s["channel"], s["title"]) for s in sessions] == [
        (f"cron:{job_id}", "cron", "say hello")
    ]


async def test_a_user_cannot_touch_another_users_job_and_an_admin_sees_all(app_node):
    node = await app_node(scripted=True)
    alices = (await ok(node, ALICE, "cron_schedule", schedule=MONDAY_9, prompt="alice's reminder"))["job"]
    bobs = (await ok(node, BOB, "cron_schedule", schedule=MONDAY_9, prompt="alice's reminder"))["job"]
    assert alices["job_id"] != bobs["job_id"]  # the same words, two principals: two jobs
    assert await job_ids(node, BOB) == {bobs["job_id"]}
    for name in ("cron_pause", "cron_resume", "cron_delete"):
        failure = await error(node, BOB, name, job_id=alices["job_id"])
        assert failure["code"] == "not_found" and alices["job_id"] in failure["message"], failure
    got = (await node.ask("cron_scheduler", "get_job", {"job_id": alices["job_id"]}, ctx=ALICE))["job"]
    assert got["status"] == "active"
    # an admin lists every job of the tenant and may pause alice's
    assert await job_ids(node, ADA) == {alices["job_id"], bobs["job_id"]}
    assert (await ok(node, ADA, "cron_pause", job_id=alices["job_id"]))["job_status"] == "paused"


async def test_bad_input_is_a_clear_tool_error(app_node):
    node = await app_node(scripted=True)
    cases = [
        ({"schedule": "every monday at 9", "prompt": "p"}, "invalid_input", "5-field cron expression"),
        ({"schedule": "every_1h", "prompt": "p"}, "invalid_input", "5-field cron expression"),
        ({"schedule": "61 9 * * 1", "prompt": "p"}, "invalid_input", "5-field cron expression"),
        ({"schedule": "0 0 30 2 *", "prompt": "p"}, "invalid_argument", "never fires"),
        ({"schedule": MONDAY_9, "prompt": "p", "timezone": "Mars/Olympus"}, "invalid_input", "time zone"),
        ({"schedule": MONDAY_9, "prompt": "   "}, "invalid_input", "prompt"),
        ({"schedule": MONDAY_9}, "invalid_input", "prompt"),
    ]
    for inp, code, words in cases:
        failure = await error(node, BOB, "cron_schedule", **inp)
        assert failure["code"] == code and words in failure["message"], (inp, failure)
    assert await job_ids(node, ADA) == set()
    failure = await error(node, BOB, "cron_pause", job_id="no-such-job")
    assert failure["code"] == "not_found"
    # a viewer's turn may list but not schedule
    failure = await error(node, ACME_VIEWER, "cron_schedule", schedule=MONDAY_9, prompt="p")
    assert failure["code"] == "permission_denied"
    assert (await ok(node, ACME_VIEWER, "cron_list"))["jobs"] == []


async def test_goals_are_set_listed_completed_and_cleared_by_their_owner(app_node):
    node = await app_node(scripted=True)
    first = (await ok(node, BOB, "goal_set", session="bob-s", goal="finish the quarterly report"))["goal"]
    second = (await ok(node, BOB, "goal_set", session="bob-s", goal="book the dentist"))["goal"]
    assert first["owner"] == "bob" and first["session_id"] == "bob-s" and first["status"] == "active"
    listed = await ok(node, BOB, "goal_list", session="bob-s")
    assert sorted(g["text"] for g in listed["goals"]) == ["book the dentist", "finish the quarterly report"]
    done = (await ok(node, BOB, "goal_complete", goal_id=first["goal_id"], reason="sent it"))["goal"]
    assert (done["status"], done["reason"]) == ("completed", "sent it")
    assert [g["goal_id"] for g in (await ok(node, BOB, "goal_list", session="bob-s"))["goals"]] == [
        second["goal_id"]
    ]
    every = await ok(node, BOB, "goal_list", session="bob-s", status="all")
    assert {g["goal_id"] for g in every["goals"]} == {first["goal_id"], second["goal_id"]}
    # another session of bob's lists its own goals, or every goal of his when asked
    assert (await ok(node, BOB, "goal_list", session="bob-other"))["goals"] == []
    assert (await ok(node, BOB, "goal_list", session="bob-other", all_sessions=True))["count"] == 1
    # alice can neither see nor change bob's goals
    assert (await ok(node, ALICE, "goal_list", all_sessions=True, status="all"))["goals"] == []
    for name in ("goal_complete", "goal_clear"):
        assert (await error(node, ALICE, name, goal_id=second["goal_id"]))["code"] == "not_found"
    cleared = await ok(node, BOB, "goal_clear", goal_id=second["goal_id"])
    assert cleared["cleared"] == 1
    assert (await ok(node, BOB, "goal_list", session="bob-s"))["goals"] == []
    assert (await error(node, BOB, "goal_clear", goal_id="nope"))["code"] == "not_found"
    failure = await error(node, BOB, "goal_complete", goal_id=first["goal_id"])
    assert failure["code"] == "conflict" and "completed" in failure["message"]


def call_then_echo(name: str, /, **inp: Any) -> None:
    """Each session's first answer calls ``name``; after the tool result it answers with that result."""

    def answer(session: str, messages: list[dict[str, Any]]) -> str | dict[str, Any]:
        if messages[-1]["role"] == "tool":
            return f"saw: {messages[-1]['content']}"
        return {
            "content": "",
            "stop_reason": "tool_use",
            "tool_calls": [{"id": "c1", "name": name, "input": inp}],
        }

    doubles.SCRIPT.answer = answer


async def test_in_a_chat_turn_the_tools_act_as_the_turns_user(app_node):
    node = await app_node(scripted=True)
    call_then_echo("cron_schedule", schedule=MONDAY_9, prompt="Remind me to water the plants")
    reply = await node.ask(
        "agent",
        "chat",
        {"message": "remind me every Monday at 9am to water the plants", "session_id": "b1"},
        ctx=BOB,
    )
    assert "cron_schedule" in doubles.SCRIPT.tools["b1"]
    result = json.loads(str(reply["response"]).removeprefix("saw: "))
    jobs = (await node.ask("cron_scheduler", "list_jobs", {}, ctx=ADA))["jobs"]
    assert [(j["job_id"], j["owner"]) for j in jobs] == [(result["job"]["job_id"], "bob")]
    call_then_echo("goal_set", goal="water the plants weekly")
    await node.ask(
        "agent", "chat", {"message": "set a goal: water the plants weekly", "session_id": "b2"}, ctx=BOB
    )
    assert "goal_set" in doubles.SCRIPT.tools["b2"]
    goals = (await node.ask("goals", "list_goals", {"session_id": "b2"}, ctx=BOB))["goals"]
    assert [(g["text"], g["owner"]) for g in goals] == [("water the plants weekly", "bob")]


async def test_only_an_admin_sets_a_jobs_delivery_link(app_node):
    """A delivery is a service-link call nobody reviews: a user's job has none (an admin's may)."""
    node = await app_node(scripted=True)
    node.links = ServiceLinks({"hook": ServiceLink("hook", "http://hooks.test/")})
    job = {"job_id": "d1", "prompt": "p", "schedule": MONDAY_9, "deliver": {"link": "hook"}}
    with pytest.raises(ActorError) as e:
        await node.ask("cron_scheduler", "create_job", job, ctx=BOB)
    assert e.value.code == "permission_denied" and e.value.details["field"] == "deliver"
    made = await node.ask("cron_scheduler", "create_job", job, ctx=ADA)
    assert made["job_id"] == "d1"
