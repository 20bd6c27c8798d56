"""Two server processes on one SQLite data dir: every cron job fires once per schedule, never twice, and
the survivor takes over the schedule when the leader is SIGKILLed."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from minihermes.app import AGENT_CONFIG
from minihermes.runtime._loop import loop_name

from .conftest import ROOT, Server, free_port

API = "/api/v1/actors"
JOBS = 8
PERIOD = 2.0


class ConfiguredServer(Server):
    """``minihermes serve --config`` with its own node id (two nodes on one store are two holders)."""

    def __init__(self, data_dir: Path, port: int, node_id: str) -> None:
        super().__init__(data_dir, port)
        self.config = data_dir.parent / f"{node_id}.toml"
        shared = f'id = "{node_id}"\nshared_data_dir = true'  # two nodes on one data dir on purpose
        self.config.write_text(AGENT_CONFIG.replace('id = "node-1"', shared, 1))

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIHERMES_")}
        env["MINIHERMES_EVENT_LOOP"] = loop_name()  # the server runs on the loop this test runs on
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "minihermes.cli.main",
            "serve",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--config",
            str(self.config),
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self.proc.stderr is not None
        while True:
            line = (await asyncio.wait_for(self.proc.stderr.readline(), 60)).decode()
            assert line, "server exited before listening"
            if "HTTP API on" in line:
                break
        self._drain = asyncio.ensure_future(self._drain_stderr())


async def call(c: httpx.AsyncClient, actor: str, op: str, body: dict) -> dict:
    r = await c.post(f"{API}/{actor}/{op}", json=body)
    assert r.status_code == 200, (actor, op, r.status_code, r.text)
    return r.json()


async def all_runs(c: httpx.AsyncClient, job_id: str) -> list[dict]:
    runs = (await call(c, "cron_scheduler", "job_runs", {"job_id": job_id, "limit": 200}))["runs"]
    return sorted(runs, key=lambda r: r["scheduled_at"])


async def completed_runs(c: httpx.AsyncClient, job_id: str) -> list[dict]:
    return [r for r in await all_runs(c, job_id) if r["status"] == "completed"]


async def wait_runs(c: httpx.AsyncClient, n: int, timeout: float = 90) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        counts = [len(await completed_runs(c, f"two-{i}")) for i in range(JOBS)]
        if min(counts) >= n:
            return
        assert loop.time() < deadline, f"runs so far: {counts}"
        await asyncio.sleep(0.2)


async def check_once_per_slot(c: httpx.AsyncClient) -> None:
    """Each job's runs sit on consecutive schedule slots (none skipped, none twice), and each run id was
    executed once (one cron_executed audit event). A run the killed node had in flight may still be
    running (it comes back after the channel's visibility timeout), so slots count runs in any state."""
    events = await call(c, "audit_event", "query_events", {"event_type": "cron_executed", "limit": 1000})
    executed = Counter(e["detail"].split("run_id=")[1] for e in events["events"])
    assert executed and max(executed.values()) == 1, executed.most_common(3)
    for i in range(JOBS):
        runs = await all_runs(c, f"two-{i}")
        slots = [r["scheduled_at"] for r in runs]
        assert all(abs((b - a) - PERIOD) < 1e-6 for a, b in itertools.pairwise(slots)), slots
        assert len({r["run_id"] for r in runs}) == len(runs)


@pytest.mark.slow
async def test_two_nodes_on_one_store_fire_each_job_once_per_schedule(tmp_path):
    data = tmp_path / "data"
    a = ConfiguredServer(data, free_port(), "node-a")
    b = ConfiguredServer(data, free_port(), "node-b")
    try:
        await a.start()
        await b.start()
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=60) as ca,
            httpx.AsyncClient(base_url=b.url, timeout=60) as cb,
        ):
            for i in range(JOBS):
                await call(
                    ca,
                    "cron_scheduler",
                    "create_job",
                    {
                        "job_id": f"two-{i}",
                        "prompt": f"calculate {i} + 1",
                        "schedule": f"every {int(PERIOD)}s",
                    },
                )
            # Both nodes run a scheduler and a runner for the tenant. Each firing of the tenant's durable
            # tick reminder lands on whichever node claims it first (one node may win them all), and that
            # node's scheduler competes for the leader lease: which node leads is not fixed, only that
            # someone does and that no slot fires twice.
            assert len((await call(cb, "cron_scheduler", "list_jobs", {}))["jobs"]) == JOBS
            await wait_runs(ca, 3)
            sa = await call(ca, "cron_scheduler", "get_stats", {})
            sb = await call(cb, "cron_scheduler", "get_stats", {})
            assert sa["holder"] != sb["holder"]
            assert sa["ticks"] + sb["ticks"] > 0 and sa["led"] + sb["led"] > 0, (sa, sb)
            await check_once_per_slot(ca)

            await a.kill()  # the leader (or not) dies; the other node's lease takes over after its TTL
            before = {i: len(await completed_runs(cb, f"two-{i}")) for i in range(JOBS)}
            await wait_runs(cb, max(before.values()) + 3)
            await check_once_per_slot(cb)
            assert (await call(cb, "cron_scheduler", "get_stats", {}))["led"] > 0
    finally:
        for s in (a, b):
            if s.proc is not None and s.proc.returncode is None:
                await s.kill()
