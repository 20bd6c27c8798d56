"""cron_scheduler + cron_runner: jobs, ticks on the manual clock, the leader lock, misfires, retries, silence."""

from __future__ import annotations

import httpx
import pytest

from minihermes.runtime import ActorError, Node, ServiceLink, ServiceLinks

from . import doubles
from .conftest import ACME, ACME_VIEWER, GLOBEX, until


async def ticks(clock, seconds: float) -> None:
    """Advance past ``seconds`` by one more tick: the manual clock's float steps can leave the tick that
    falls exactly on the boundary a hair in the future."""
    await clock.advance(seconds + 1)


async def cron(node: Node, op: str, ctx=ACME, **payload):
    return await node.ask("cron_scheduler", op, payload, ctx=ctx)


async def runs_of(node: Node, job_id: str, ctx=ACME) -> list[dict]:
    return (await cron(node, "job_runs", ctx=ctx, job_id=job_id, limit=200))["runs"]


def finished(node: Node, job_id: str, n: int, status: str = "completed"):
    async def check():
        runs = await runs_of(node, job_id)
        done = [r for r in runs if r["status"] == status]
        return done if len(done) >= n else None

    return check


async def test_job_crud_and_structured_errors(app_node):
    node = await app_node(scripted=True)
    made = await cron(
        node, "create_job", job_id="digest", prompt="Summarize pending tasks", schedule="every_24h"
    )
    assert made["schedule"] == "every_86400s" and made["next_run_at"] == node.clock.time() + 86400
    with pytest.raises(ActorError) as e:
        await cron(node, "create_job", job_id="digest", prompt="x", schedule="every_1h")
    assert e.value.code == "conflict"
    with pytest.raises(ActorError) as e:
        await cron(node, "create_job", job_id="bad", prompt="x", schedule="whenever")
    assert e.value.code == "invalid_argument" and e.value.details["field"] == "schedule"
    assert "whenever" in e.value.message
    with pytest.raises(ActorError) as e:
        await cron(node, "create_job", ctx=ACME_VIEWER, job_id="v", prompt="x", schedule="every_1h")
    assert e.value.code == "permission_denied"
    jobs = (await cron(node, "list_jobs"))["jobs"]
    assert [j["job_id"] for j in jobs] == ["digest"] and jobs[0]["cron_session"] == "cron:digest"
    assert (await cron(node, "list_jobs", ctx=GLOBEX))["jobs"] == []  # another tenant sees nothing
    got = await cron(node, "get_job", job_id="digest")
    assert got["job"]["prompt"] == "Summarize pending tasks" and got["last_run"] is None
    assert (await cron(node, "pause_job", job_id="digest"))["job_status"] == "paused"
    resumed = await cron(node, "resume_job", job_id="digest")
    assert resumed["job_status"] == "active" and resumed["next_run_at"] > node.clock.time()
    await cron(node, "delete_job", job_id="digest")
    with pytest.raises(ActorError) as e:
        await cron(node, "get_job", job_id="digest")
    assert e.value.code == "not_found"


async def test_due_runs_fire_on_each_tick_in_the_cron_session(app_node, clock):
    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="j1", prompt="say hello", schedule="every 10s", session_id="main")
    await ticks(clock, 10)
    runs = await until(finished(node, "j1", 1))
    assert runs[0]["run_id"] == "j1@1800000010000" and runs[0]["scheduled_at"] == 1_800_000_010
    assert runs[0]["result"] == "done: say hello" and runs[0]["session_id"] == "cron:main"
    await ticks(clock, 10)
    await until(finished(node, "j1", 2))
    history = (await node.ask("agent", "get_history", {"session_id": "cron:main"}, ctx=ACME))["messages"]
    assert [m["content"] for m in history if m["role"] == "user"] == ["say hello", "say hello"]
    runs = await runs_of(node, "j1")
    assert runs[0]["scheduled_at"] - runs[1]["scheduled_at"] == 10  # newest first, one per fire time


async def test_only_the_lock_holder_schedules(app_node, clock):
    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="j1", prompt="p", schedule="every 5s")
    # Another node holds the tenant's leader lease: this scheduler stands by.
    store = node.store
    token = await store.locks.try_acquire(("acme", "default"), "cron_leader", "other-node", 60)
    assert token is not None
    await ticks(clock, 5)
    await ticks(clock, 5)
    assert await runs_of(node, "j1") == []
    await ticks(clock, 60)  # the other node's lease runs out: this one leads; the missed fires collapse
    runs = await until(finished(node, "j1", 1))
    assert len({r["run_id"] for r in runs}) == len(runs)


async def test_a_tick_is_led_by_whichever_scheduler_it_reaches(app_node, clock):
    """The leader lock is held for one tick, not kept: with several nodes, the tenant's tick reminder fires
    on one of them, and that node's scheduler must be able to lead it at once."""
    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="j1", prompt="p", schedule="every 5s")
    await ticks(clock, 5)
    await until(finished(node, "j1", 1))
    scope = ("acme", "default")

    async def released() -> bool:
        return await node.store.locks.get(scope, "cron_leader") is None

    await until(released)
    # Another node's scheduler gets the next tick: it leads it at once, then lets go in turn.
    token = await node.store.locks.try_acquire(scope, "cron_leader", "other-node", 60)
    assert token is not None
    assert await node.store.locks.release(scope, "cron_leader", "other-node", token)
    await ticks(clock, 5)
    runs = await until(finished(node, "j1", 2))
    assert len({r["run_id"] for r in runs}) == len(runs)


@pytest.mark.parametrize(("policy", "expected"), [("skip", 0), ("run_once", 1)])
async def test_misfire_policy_after_downtime(app_node, clock, tmp_path, policy, expected):
    grace = {"cron_scheduler": {"misfire_grace": 10}}
    node = await app_node(scripted=True, **grace)
    await cron(node, "create_job", job_id="m", prompt="p", schedule="every_1m", misfire=policy)
    await node.stop()
    await clock.advance(3630)  # an hour down: 60 fire times missed by more than the grace
    node = await app_node(scripted=True, **grace)
    await ticks(clock, 1)
    if expected:
        await until(finished(node, "m", 1))

    async def advanced():
        job = (await cron(node, "get_job", job_id="m"))["job"]
        return job if job["next_run_at"] > clock.time() else None

    job = await until(advanced)  # the tick dispatches beside the scheduler's mailbox
    assert job["missed"] == 60 - expected and job["fired"] == expected
    assert job["next_run_at"] > clock.time()
    assert len(await runs_of(node, "m")) == expected
    await ticks(clock, 60)  # and it goes on from the schedule's next time
    await until(finished(node, "m", expected + 1))


async def test_failed_runs_are_recorded_and_retried_with_backoff_up_to_the_limit(app_node, clock):
    node = await app_node(scripted=True)
    doubles.SCRIPT.fail.add("cron:f")
    await cron(
        node, "create_job", job_id="f", prompt="p", schedule="every_1h", max_retries=2, retry_backoff=10
    )
    await cron(node, "run_now", job_id="f")
    run = (await until(finished(node, "f", 1, "retrying")))[0]
    assert run["error"]["code"] == "llm_unavailable" and run["next_attempt_at"] == pytest.approx(
        run["finished_at"] + 10
    )
    await ticks(clock, 10)
    await until(lambda: _attempt(node, "f", 1, "retrying"))
    again = (await runs_of(node, "f"))[0]
    assert again["next_attempt_at"] == pytest.approx(again["finished_at"] + 20)  # backoff doubles
    await ticks(clock, 20)
    failed = (await until(finished(node, "f", 1, "failed")))[0]
    assert failed["attempt"] == 2 and failed["error"]["code"] == "llm_unavailable"
    events = await node.ask("audit_event", "query_events", {"event_type": "cron_run_failed"}, ctx=ACME)
    assert events["count"] == 1


async def _attempt(node: Node, job_id: str, attempt: int, status: str) -> bool:
    runs = await runs_of(node, job_id)
    return bool(runs) and runs[0]["attempt"] == attempt and runs[0]["status"] == status


async def test_a_retry_that_succeeds_completes_the_run(app_node, clock):
    node = await app_node(scripted=True)
    doubles.SCRIPT.fail.add("cron:r")
    await cron(node, "create_job", job_id="r", prompt="p", schedule="every_1h", retry_backoff=5)
    await cron(node, "run_now", job_id="r")
    await until(finished(node, "r", 1, "retrying"))
    doubles.SCRIPT.fail.clear()
    await ticks(clock, 5)
    run = (await until(finished(node, "r", 1)))[0]
    assert run["attempt"] == 1 and run["error"] is None


async def test_silent_responses_are_stored_not_delivered_and_delivery_errors_are_recorded(app_node, clock):
    node = await app_node(scripted=True)

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    # The link exists (a job's target is checked when it is made), but nothing answers behind it.
    hook = ServiceLink("hook", "http://hooks.test/")
    node.links = ServiceLinks({"hook": hook}, transport=httpx.MockTransport(unreachable))
    doubles.SCRIPT.answer = lambda s, m: "[SILENT] nothing new" if s == "cron:quiet" else "news!"
    deliver = {"link": "hook", "path": "/hook"}
    await cron(node, "create_job", job_id="quiet", prompt="p", schedule="every 30s", deliver=deliver)
    await cron(node, "create_job", job_id="loud", prompt="p", schedule="every 30s", deliver=deliver)
    await ticks(clock, 30)
    quiet = (await until(finished(node, "quiet", 1)))[0]
    loud = (await until(finished(node, "loud", 1)))[0]
    assert quiet["silent"] and not quiet["delivered"] and quiet["delivery_error"] is None
    assert quiet["result"] == "[SILENT] nothing new"
    # The owner got the answer; the link did not, and the run says why.
    assert not loud["silent"] and loud["delivered"] and not loud["link_delivered"]
    assert "hook" in loud["delivery_error"]
    inbox = await node.ask("notifications", "list_notifications", {}, ctx=ACME)
    assert [n["text"] for n in inbox["notifications"]] == ["news!"]


async def test_run_now_and_one_shot_jobs(app_node, clock):
    node = await app_node(scripted=True)
    at = clock.time() + 120
    iso = __import__("datetime").datetime.fromtimestamp(at, __import__("datetime").UTC).isoformat()
    made = await cron(node, "create_job", job_id="once", prompt="p", schedule=iso)
    assert made["next_run_at"] == at
    now = await cron(node, "run_now", job_id="once")
    assert now["run_id"].startswith("once@")
    await until(finished(node, "once", 1))
    await ticks(clock, 120)
    await until(finished(node, "once", 2))

    async def done():
        job = (await cron(node, "get_job", job_id="once"))["job"]
        return job if job["status"] == "done" else None

    assert (await until(done))["next_run_at"] is None
    await ticks(clock, 60)
    assert len(await runs_of(node, "once")) == 2


async def test_a_redelivered_completed_run_is_not_executed_again(app_node, clock):
    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="d", prompt="p", schedule="every_1h")
    await cron(node, "run_now", job_id="d")
    run = (await until(finished(node, "d", 1)))[0]
    calls = len(doubles.SCRIPT.calls)
    # The same run id arrives again (a node that crashed before its ack, or a second leader).
    msg = await node.store.channels.send(
        ("acme", "default"),
        "cron:pending",
        "cron_run",
        {"run_id": run["run_id"], "job_id": "d", "attempt": 0},
    )
    node.channel_event(("acme", "default"), "cron:pending").set()

    async def acked():
        depth = await node.store.channels.depth(("acme", "default"), "cron:pending")
        return depth.ready == 0 and depth.in_flight == 0

    await until(acked)
    assert len(doubles.SCRIPT.calls) == calls and msg
    stats = await node.ask("cron_runner", "get_stats", {}, ctx=ACME)
    assert stats["skipped_duplicates"] == 1


def _fail_due_list_once(node: Node, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The next ``cron:due:`` read fails (a store fault inside the tick); returns the leader lock as it was
    at that moment (appended when the fault fires)."""
    kv = node.store.kv
    real_list = kv.list
    seen: list[object] = []

    async def list_failing_once(scope, prefix="", limit=None):
        if prefix == "cron:due:" and not seen:
            seen.append(await node.store.locks.get(scope, "cron_leader"))
            raise OSError("injected store fault")
        return await real_list(scope, prefix, limit)

    monkeypatch.setattr(kv, "list", list_failing_once)
    return seen


async def test_a_tick_that_lands_while_one_is_led_is_not_lost(app_node, clock, monkeypatch):
    """The leader's pass reads what is due at its start; ticks arriving meanwhile (time moved on) make it
    pass again before it lets go, instead of waiting for a tick after the lock is free."""
    import asyncio

    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="j1", prompt="p", schedule="every 30s")
    kv = node.store.kv
    real_list = kv.list
    gate = asyncio.Event()
    held: list[bool] = []

    async def list_held_once(scope, prefix="", limit=None):
        if prefix == "cron:due:" and not held:
            held.append(True)
            rows = await real_list(scope, prefix, limit)  # what is due now: nothing yet
            await gate.wait()
            return rows
        return await real_list(scope, prefix, limit)

    monkeypatch.setattr(kv, "list", list_held_once)
    await clock.advance(1.5)  # the first tick leads, and waits in its read

    async def reading():
        return held

    await until(reading)
    await ticks(clock, 30)  # the job falls due; these ticks land while the first is still led
    gate.set()
    await until(finished(node, "j1", 1))
    assert not held[1:]


async def test_a_failed_tick_still_lets_go_of_the_leader_lock(app_node, clock, monkeypatch):
    """A tick that raises releases the lease at once: left to its TTL, no node would lead until then (the
    manual clock stands still here, so only the release can free it)."""
    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="j1", prompt="p", schedule="every 5s")
    holder = (await cron(node, "get_stats"))["holder"]
    seen = _fail_due_list_once(node, monkeypatch)
    await clock.advance(1.5)  # one tick

    async def failed():
        return seen

    lock = (await until(failed))[0]
    assert lock is not None and lock.holder == holder  # the failing tick held it

    async def released() -> bool:
        return await node.store.locks.get(("acme", "default"), "cron_leader") is None

    await until(released, timeout=5)
    await ticks(clock, 5)  # and the next tick leads as usual
    await until(finished(node, "j1", 1))


async def test_a_failed_release_is_logged_not_raised_over_the_ticks_error(
    app_node, clock, monkeypatch, caplog
):
    """The tick fails, then so does the release: the release's failure is logged, and the task's error (the
    one the node logs for a failed background task) is still the tick's own."""
    node = await app_node(scripted=True)
    await cron(node, "create_job", job_id="j1", prompt="p", schedule="every 5s")  # starts acme's scheduler
    seen = _fail_due_list_once(node, monkeypatch)

    async def release_failing(*args, **kwargs):
        raise ConnectionError("injected release fault")

    monkeypatch.setattr(node.store.locks, "release", release_failing)

    async def both_logged():
        release = [r for r in caplog.records if "release failed" in r.getMessage()]
        task = [r for r in caplog.records if r.getMessage() == "background task failed"]
        return (release, task) if release and task else None

    await clock.advance(1.5)  # one tick
    release, task = await until(both_logged, timeout=30)  # a bound, not a pace: CI may be loaded
    assert seen and isinstance(release[0].exc_info[1], ConnectionError)
    assert isinstance(task[0].exc_info[1], OSError)  # the tick's own error is the one that surfaces
