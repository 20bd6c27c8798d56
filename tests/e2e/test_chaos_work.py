"""Chaos: 100 due cron runs and 50 queued agent tasks in flight, SIGKILL the server, start it again.

Every run and task completes, and each one's side effect (a memory its prompt writes) happens exactly once:
one prompt in its session, one memory_store call, one run record, one stored task result.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import httpx
import pytest

API = "/api/v1/actors"
JOBS = 100
TASKS = 50


async def call(c: httpx.AsyncClient, actor: str, op: str, body: dict) -> dict:
    r = await c.post(f"{API}/{actor}/{op}", json=body)
    assert r.status_code == 200, (actor, op, r.status_code, r.text)
    return r.json()


async def wait_for(check, timeout: float = 120.0, what: str = ""):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await check()
        if got:
            return got
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def user_turns(history: list[dict]) -> int:
    return sum(1 for m in history if m["role"] == "user")


def memory_stores(history: list[dict]) -> int:
    return sum(1 for m in history if m["role"] == "tool" and m.get("name") == "memory_store")


@pytest.mark.slow
async def test_cron_runs_and_queued_tasks_survive_sigkill_exactly_once(server_factory, tmp_path):
    data = tmp_path / "data"
    srv = await server_factory(data)
    async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
        # All 100 runs fall due at one tick a few seconds from now; created concurrently, well before.
        at = datetime.fromtimestamp(datetime.now(UTC).timestamp() + 8, UTC).isoformat()
        await asyncio.gather(
            *(
                call(
                    c,
                    "cron_scheduler",
                    "create_job",
                    {
                        "job_id": f"chaos-{i}",
                        "prompt": f"remember that cron_key_{i} is cval_{i}",
                        "schedule": at,
                    },
                )
                for i in range(JOBS)
            )
        )

        async def completed(actor: str, n: int) -> bool:
            return bool((await call(c, actor, "get_stats", {}))["completed"] >= n)

        await wait_for(lambda: completed("cron_runner", 3), what="the first cron runs")
        replies = await asyncio.gather(
            *(
                call(
                    c,
                    "task_queue",
                    "enqueue",
                    {
                        "task_type": "agent_prompt",
                        "payload": {"prompt": f"remember that task_key_{i} is tval_{i}"},
                        "idempotency_key": f"chaos-task-{i}",
                    },
                )
                for i in range(TASKS)
            )
        )
        msg_ids = [r["msg_id"] for r in replies]
        await wait_for(lambda: completed("task_worker", 2), what="the first tasks")
        cron_done = (await call(c, "cron_runner", "get_stats", {}))["completed"]
        tasks_done = (await call(c, "task_worker", "get_stats", {}))["completed"]
    await srv.kill()  # SIGKILL with runs and tasks in flight
    assert cron_done < JOBS or tasks_done < TASKS  # the kill really caught work in flight

    srv2 = await server_factory(data)
    async with httpx.AsyncClient(base_url=srv2.url, timeout=60) as c:
        # A repeated enqueue (a client retrying after the crash) is recognised, not queued again.
        again = await call(
            c,
            "task_queue",
            "enqueue",
            {"task_type": "agent_prompt", "payload": {"prompt": "x"}, "idempotency_key": "chaos-task-0"},
        )
        assert again["duplicate"] and again["msg_id"] == msg_ids[0]

        async def all_runs_completed() -> bool:
            for i in range(JOBS):
                runs = (await call(c, "cron_scheduler", "job_runs", {"job_id": f"chaos-{i}"}))["runs"]
                if [r["status"] for r in runs] != ["completed"]:
                    return False
            return True

        async def all_tasks_completed() -> bool:
            for m in msg_ids:
                if (await call(c, "task_queue", "get_result", {"msg_id": m}))["status"] != "ok":
                    return False
            return True

        await wait_for(all_runs_completed, what="every cron run")
        await wait_for(all_tasks_completed, what="every queued task")

        for i in range(JOBS):
            history = (await call(c, "agent", "get_history", {"session_id": f"cron:chaos-{i}"}))["messages"]
            assert user_turns(history) == 1 and memory_stores(history) == 1, (i, history)
            got = await call(c, "memory", "recall_memory", {"key": f"cron_key_{i}"})
            assert got["found"] and got["value"] == f"cval_{i}"
        for i, m in enumerate(msg_ids):
            result = (await call(c, "task_queue", "get_result", {"msg_id": m}))["result"]
            history = (await call(c, "agent", "get_history", {"session_id": result["session_id"]}))[
                "messages"
            ]
            assert user_turns(history) == 1 and memory_stores(history) == 1, (m, history)
            got = await call(c, "memory", "recall_memory", {"key": f"task_key_{i}"})
            assert got["found"] and got["value"] == f"tval_{i}"
        stats = await call(c, "task_queue", "get_stats", {})
        assert stats["depth"] == 0 and stats["in_flight"] == 0 and stats["dead_lettered"] == 0
        assert stats["enqueued"] == TASKS
    assert await srv2.terminate() == 0
