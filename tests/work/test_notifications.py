"""Notifications (issue 24): a reminder reaches its owner's inbox, once per run, without a model call; a run
job's answer (or its failure, in words) too; another user sees neither; a crash between delivering and marking
the run done delivers once; the inbox survives a restart, is bounded and redacted; deliver targets are
checked when a job is made (issue 23)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from minihermes.runtime import ActorError, Node, RequestContext, ServiceLink, ServiceLinks
from minihermes.work import cron_runner

from . import doubles
from .conftest import until
from .test_time_tools import ok

ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
GARY = RequestContext(tenant="globex", principal="alice", roles=frozenset({"user"}))
"""Another tenant's user who happens to have alice's name."""


async def ticks(clock, seconds: float) -> None:
    await clock.advance(seconds + 1)


async def cron(node: Node, op: str, ctx: RequestContext = ALICE, **payload: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask("cron_scheduler", op, payload, ctx=ctx)
    return reply


async def inbox(node: Node, ctx: RequestContext, **payload: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask("notifications", "list_notifications", payload, ctx=ctx)
    return reply


def texts(reply: dict[str, Any]) -> list[str]:
    return [n["text"] for n in reply["notifications"]]


def runs_done(node: Node, job_id: str, n: int, ctx: RequestContext = ALICE, status: str = "completed"):
    async def check():
        runs = (await cron(node, "job_runs", ctx, job_id=job_id, limit=200))["runs"]
        done = [r for r in runs if r["status"] == status]
        return done if len(done) >= n else None

    return check


async def test_a_reminder_fires_under_the_manual_clock_and_reaches_its_owner_once(app_node, clock):
    node = await app_node(scripted=True)
    made = await cron(
        node, "create_job", job_id="plants", prompt="Water the plants", schedule="every 30s", action="notify"
    )
    assert made["action"] == "notify"
    await ticks(clock, 30)
    [run] = await until(runs_done(node, "plants", 1))
    assert run["delivered"] is True and run["action"] == "notify" and run["result"] == "Water the plants"
    assert doubles.SCRIPT.calls == []  # a reminder is no model call
    got = await inbox(node, ALICE)
    assert texts(got) == ["Water the plants"] and got["unread"] == 1
    [note] = got["notifications"]
    assert note["source"] == "cron:plants" and note["read"] is False and note["id"] == run["notification_id"]
    assert note["created_at"] == pytest.approx(clock.time(), abs=2)
    # nobody else sees it: another user, an admin's own inbox, a user naming alice, another tenant's "alice"
    assert texts(await inbox(node, BOB)) == []
    assert texts(await inbox(node, BOB, user_id="alice")) == []
    assert texts(await inbox(node, ADA)) == []
    assert texts(await inbox(node, GARY)) == []
    assert texts(await inbox(node, ADA, user_id="alice")) == ["Water the plants"]  # an admin who asks
    # each run is one notification
    await ticks(clock, 30)
    await until(runs_done(node, "plants", 2))
    assert texts(await inbox(node, ALICE)) == ["Water the plants"] * 2
    assert doubles.SCRIPT.calls == []


async def test_the_inbox_survives_a_restart_between_the_run_and_the_read(app_node, clock):
    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="r", prompt="Call mum", schedule="every 30s", action="notify")
    await ticks(clock, 30)
    await until(runs_done(node, "r", 1))
    await cron(node, "pause_job", job_id="r")
    await node.stop()
    node = await app_node(scripted=True)  # the same SQLite data dir
    got = await inbox(node, ALICE, unread_only=True)
    assert texts(got) == ["Call mum"] and got["unread"] == 1
    marked = await node.ask("notifications", "mark_read", {"ids": [got["notifications"][0]["id"]]}, ctx=ALICE)
    assert marked["marked"] == 1
    await node.stop()
    node = await app_node(scripted=True)
    after = await inbox(node, ALICE)
    assert texts(after) == ["Call mum"] and after["unread"] == 0 and after["notifications"][0]["read"]
    assert texts(await inbox(node, ALICE, unread_only=True)) == []


async def test_a_run_jobs_answer_and_its_failure_reach_the_owner(app_node, clock):
    node = await app_node(scripted=True)
    doubles.SCRIPT.answer = lambda s, m: "[SILENT] nothing" if s == "cron:quiet" else "3 tasks are pending"
    doubles.SCRIPT.fail.add("cron:broken")
    await cron(node, "create_job", job_id="digest", prompt="Summarize my tasks", schedule="every 30s")
    await cron(node, "create_job", job_id="quiet", prompt="Anything new?", schedule="every 30s")
    await cron(node, "create_job", job_id="broken", prompt="p", schedule="every_1h", max_retries=0)
    await cron(node, "run_now", job_id="broken")
    await ticks(clock, 30)
    [run] = await until(runs_done(node, "digest", 1))
    [quiet] = await until(runs_done(node, "quiet", 1))
    [failed] = await until(runs_done(node, "broken", 1, status="failed"))
    assert run["delivered"] is True and run["action"] == "run"
    assert quiet["delivered"] is False and quiet["silent"]
    assert failed["delivered"] is True
    got = await inbox(node, ALICE)
    by_source = {n["source"]: n["text"] for n in got["notifications"]}
    assert set(by_source) == {"cron:digest", "cron:broken"}
    assert by_source["cron:digest"] == "3 tasks are pending"
    assert by_source["cron:broken"].startswith("Your scheduled job broken failed after 1 attempt(s)")
    assert "scripted failure" in by_source["cron:broken"]
    assert texts(await inbox(node, BOB)) == []


async def test_a_run_acts_as_its_owner_never_as_system(app_node, clock):
    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="mine", prompt="p", schedule="every_1h")
    await cron(node, "run_now", job_id="mine")
    await until(runs_done(node, "mine", 1))
    assert doubles.SCRIPT.contexts["cron:mine"] == ("alice", frozenset({"user"}))
    # a job made by the runtime's own hop runs as a plain user, not with the system role
    system = RequestContext(tenant="acme", principal="ops", roles=frozenset({"system"}))
    await cron(node, "create_job", system, job_id="sys", prompt="p", schedule="every_1h")
    await cron(node, "run_now", system, job_id="sys")
    await until(runs_done(node, "sys", 1, ctx=ADA))
    assert doubles.SCRIPT.contexts["cron:sys"] == ("ops", frozenset({"user"}))


async def test_a_crash_between_delivering_and_marking_the_run_done_delivers_once(
    app_node, clock, monkeypatch
):
    """The runner delivers, then dies before the run's record is final (and before the ack): the run comes
    back to its restarted incarnation, which delivers again under the same dedupe key: one notification."""
    node = await app_node(scripted=True)
    real_update = cron_runner.update_run
    delivered = asyncio.Event()
    never = asyncio.Event()
    crashed: list[str] = []

    async def update_then_hang(host, run_id, **changes):
        if changes.get("status") == "completed" and not crashed:
            crashed.append(run_id)
            delivered.set()
            await never.wait()  # the runner dies here: after the delivery, before the record
        return await real_update(host, run_id, **changes)

    monkeypatch.setattr(cron_runner, "update_run", update_then_hang)
    await cron(node, "create_job", job_id="once", prompt="Stretch", schedule="every_1h", action="notify")
    await cron(node, "create_job", job_id="turn", prompt="Say hi", schedule="every_1h")
    for job_id in ("once", "turn"):
        crashed.clear()
        delivered.clear()
        await cron(node, "run_now", job_id=job_id)
        await asyncio.wait_for(delivered.wait(), 20)
        assert len((await inbox(node, ALICE))["notifications"]) == (1 if job_id == "once" else 2)
        [runner] = [c for c in node.cells("cron_runner") if c.scope[0] == "acme"]
        await runner.kill("killed by the test", abnormal=True)
        [run] = await until(runs_done(node, job_id, 1))  # the restarted runner finished it
        assert run["delivered"] is True and run["run_id"] == crashed[0]
    got = await inbox(node, ALICE)
    assert sorted(texts(got)) == ["Stretch", "done: Say hi"]  # each once
    assert doubles.SCRIPT.calls == ["cron:turn"]  # and the turn's model call was not made again
    stats = await node.ask("cron_runner", "get_stats", {}, ctx=ADA)
    assert stats["notified"] == 0  # this incarnation's deliveries were all repeats


async def test_the_schedule_tool_makes_a_reminder_with_action_notify(app_node, clock):
    node = await app_node(scripted=True)
    got = await ok(
        node, ALICE, "cron_schedule", schedule="0 9 * * 1", prompt="Water the plants", action="notify"
    )
    job = got["job"]
    assert job["action"] == "notify" and job["owner"] == "alice"
    again = await ok(
        node, ALICE, "cron_schedule", schedule="0 9 * * 1", prompt="Water the plants", action="notify"
    )
    assert again["already_scheduled"] and again["job"]["job_id"] == job["job_id"]
    default = await ok(node, ALICE, "cron_schedule", schedule="0 9 * * 1", prompt="Water the plants")
    assert default["job"]["action"] == "run" and default["job"]["job_id"] != job["job_id"]
    await cron(node, "run_now", job_id=job["job_id"])
    await until(runs_done(node, job["job_id"], 1))
    assert texts(await inbox(node, ALICE)) == ["Water the plants"]
    described = await node.ask("tool_executor", "describe_tool", {"name": "cron_schedule"}, ctx=ALICE)
    assert "notify" in str(described)


async def test_only_the_runtime_and_admins_deliver_and_the_inbox_is_bounded_and_redacted(app_node):
    node = await app_node(scripted=True, notifications={"keep": 3})
    with pytest.raises(ActorError) as e:
        await node.ask("notifications", "notify", {"user_id": "bob", "text": "phish"}, ctx=ALICE)
    assert e.value.code == "permission_denied"
    for n in range(5):
        await node.ask("notifications", "notify", {"user_id": "bob", "text": f"n{n}"}, ctx=ADA)
    assert texts(await inbox(node, BOB)) == ["n4", "n3", "n2"]
    once = {"user_id": "bob", "text": "once", "dedupe_key": "k1"}
    first = await node.ask("notifications", "notify", once, ctx=ADA)
    second = await node.ask("notifications", "notify", once, ctx=ADA)
    assert first["created"] and not second["created"] and first["id"] == second["id"]
    assert texts(await inbox(node, BOB)).count("once") == 1
    secret = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4"
    await node.ask("notifications", "notify", {"user_id": "bob", "text": f"key {secret}"}, ctx=ADA)
    assert secret not in str(await inbox(node, BOB))
    # bob cannot mark alice's notifications read by naming their ids
    await node.ask("notifications", "notify", {"user_id": "alice", "text": "hers"}, ctx=ADA)
    [hers] = (await inbox(node, ALICE))["notifications"]
    assert (await node.ask("notifications", "mark_read", {"ids": [hers["id"]]}, ctx=BOB))["marked"] == 0
    assert (await inbox(node, ALICE))["unread"] == 1
    with pytest.raises(ActorError) as e:
        await inbox(node, ALICE, limit=0)
    assert e.value.code == "invalid_argument"
    # what the store cannot key on is refused or ignored, never a crash (found by the HTTP fuzzer)
    weird = ["\x00", "a\ud800", "../x", "x" * 5000]
    assert (await node.ask("notifications", "mark_read", {"ids": weird}, ctx=ALICE))["marked"] == 0
    for bad in ({"user_id": "a\ud800"}, {"user_id": "\x00"}, {"text": "a\x00b"}, {"dedupe_key": "\ud800"}):
        with pytest.raises(ActorError) as e:
            await node.ask("notifications", "notify", {"user_id": "bob", "text": "t", **bad}, ctx=ADA)
        assert e.value.code == "invalid_argument", bad


async def test_a_new_notification_is_published_to_its_owner_only(app_node):
    node = await app_node(scripted=True)
    alice = node.subscribe("notifications:alice", ctx=ALICE)
    bob = node.subscribe("notifications:bob", ctx=BOB)
    other = node.subscribe("notifications:alice", ctx=GARY)  # another tenant's alice
    try:
        await node.ask("notifications", "notify", {"user_id": "alice", "text": "for alice"}, ctx=ADA)
        await node.ask("notifications", "notify", {"user_id": "bob", "text": "for bob"}, ctx=ADA)
        event = await alice.get(timeout=5)
        assert event["type"] == "notification" and event["text"] == "for alice" and not event["read"]
        assert (await bob.get(timeout=5))["text"] == "for bob"  # bob's first event is his own
        assert other.get_nowait() is None and alice.get_nowait() is None
    finally:
        for sub in (alice, bob, other):
            sub.close()


# -- deliver targets (issue 23) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deliver", "field", "words"),
    [
        ({"link": "nope"}, "deliver.link", "no service link named 'nope'"),
        ({"link": "hook", "method": "DELETE"}, "deliver.method", "not allowed"),
        ({"link": "hook", "path": "https://evil.test/x"}, "deliver.path", "relative"),
        ({"link": "hook", "path": "//evil.test/x"}, "deliver.path", "relative"),
        ({"link": "hook", "path": "/a/../../admin"}, "deliver.path", ".."),
        ({"link": "hook", "path": "/%2e%2e/admin"}, "deliver.path", ".."),
        ({"link": "hook", "path": "/a b"}, "deliver.path", "control"),
        ({"link": "hook", "url": "https://evil.test/"}, "deliver.url", "not 'url'"),
        ({"path": "/x"}, "deliver.link", "needs a 'link'"),
    ],
)
async def test_deliver_targets_are_checked_when_the_job_is_made(app_node, deliver, field, words):
    node = await app_node(scripted=True)
    node.links = ServiceLinks({"hook": ServiceLink("hook", "http://hooks.test/in/", methods=("POST",))})
    with pytest.raises(ActorError) as e:
        await cron(node, "create_job", ADA, job_id="d", prompt="p", schedule="every_1h", deliver=deliver)
    assert e.value.code == "invalid_argument" and e.value.details["field"] == field
    assert words in e.value.message
    assert (await cron(node, "list_jobs", ADA))["jobs"] == []


async def test_a_good_deliver_target_is_stored_normalised(app_node):
    node = await app_node(scripted=True)
    node.links = ServiceLinks({"hook": ServiceLink("hook", "http://hooks.test/in/", methods=("POST",))})
    deliver = {"link": "hook", "path": "runs/new", "method": "post"}
    await cron(node, "create_job", ADA, job_id="d", prompt="p", schedule="every_1h", deliver=deliver)
    job = (await cron(node, "get_job", ADA, job_id="d"))["job"]
    assert job["deliver"] == {"link": "hook", "path": "runs/new", "method": "POST"}
    await cron(
        node, "create_job", ADA, job_id="d2", prompt="p", schedule="every_1h", deliver={"link": "hook"}
    )
    job = (await cron(node, "get_job", ADA, job_id="d2"))["job"]
    assert job["deliver"] == {"link": "hook", "path": "/", "method": "POST"}
