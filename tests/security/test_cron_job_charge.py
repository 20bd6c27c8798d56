"""Issue 23, hole 5: ``agent.chat {cron_job}`` charges the turn to a cron job's budget, so it is taken only
from the job's owner (whose scheduled runs act as the owner) or an admin: bob cannot exhaust alice's job."""

from __future__ import annotations

import asyncio
from pathlib import Path

from .world import World, world


async def _session(w: World, who: str) -> str:
    return str((await w.ok(who, "session_manager", "create_session", {}))["session_id"])


async def _usage(w: World, job_id: str) -> dict[str, object]:
    stats = await w.ok("ada", "llm_gateway", "get_stats", {"cron_job": job_id})
    return dict(stats["usage_by"].get("cron_job") or {})


async def test_bob_cannot_charge_alices_cron_job_but_its_runs_and_its_owner_can(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.ok(
            "alice",
            "cron_scheduler",
            "create_job",
            {"job_id": "alice-job", "prompt": "say hi", "schedule": "0 9 * * 1"},
        )
        before = await _usage(w, "alice-job")
        bob = await _session(w, "bob")
        for job in ("alice-job", "ada-job", "no-such-job"):
            r = await w.op("bob", "agent", "chat", {"session_id": bob, "message": "hello", "cron_job": job})
            assert r.status_code == 403, (job, r.status_code, r.text)
            error = r.json()["error"]
            assert (error["code"], error.get("field")) == ("permission_denied", "cron_job"), error
        assert await _usage(w, "alice-job") == before  # nothing of bob's reached the job's budget
        # The job's owner and an admin may name it.
        alice = await _session(w, "alice")
        mine = await w.ok(
            "alice", "agent", "chat", {"session_id": alice, "message": "hi", "cron_job": "alice-job"}
        )
        assert mine["status"] == "ok"
        ada = await _session(w, "ada")
        assert (
            await w.ok("ada", "agent", "chat", {"session_id": ada, "message": "hi", "cron_job": "alice-job"})
        )["status"] == "ok"
        # The cron runner's own run of alice's job (it acts as alice, the job's owner) still runs.
        run = await w.ok("alice", "cron_scheduler", "run_now", {"job_id": "alice-job"})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            runs = (await w.ok("alice", "cron_scheduler", "job_runs", {"job_id": "alice-job"}))["runs"]
            [mine_run] = [r for r in runs if r["run_id"] == run["run_id"]]
            if mine_run["status"] in ("completed", "failed"):
                break
            assert loop.time() < deadline, mine_run
            await asyncio.sleep(0.05)
        assert mine_run["status"] == "completed", mine_run
