"""Cron benchmark: with N jobs (10,000 by default), how many runs per second the scheduler dispatches and the
runner completes, and how late runs are dispatched (p50 / p99 / max).

    .venv/bin/python bench/scheduler.py                    # 10,000 jobs
    .venv/bin/python bench/scheduler.py --jobs 2000        # smaller
    .venv/bin/python bench/scheduler.py --concurrency 32   # more runs of different jobs at once

The whole agent app runs in-process on a temporary SQLite data dir with the real clock. Jobs are created
concurrently (64 requests in flight). Two set-ups run side by side in one go:

- ``dispatch only (burst)``: the scheduler alone (no ``cron_runner`` in the tree), every job a one-shot
  due at the same instant after all are created: leader lock, due index, the run record and the
  ``cron:pending`` send with its dedup key, for N runs at once. The scheduler's own ceiling; lateness here
  is how long the burst takes to drain.
- ``full run (spread)``: scheduler + runner, jobs ``every_<period>s`` (30 s), so first fires come due at the
  rate jobs were created, as a real job population's do; each job's first run is measured (later runs that
  fall due meanwhile queue behind them and are not counted).
  Every run is an agent turn (the simulated LLM asks for the calculator, so 2 LLM calls and a tool call,
  durable checkpoints, the run record updated twice, the channel ack). Completed/s is the end-to-end
  throughput; when it is below the rate runs fall due, the backlog shows in dispatch->done.

Lateness is ``dispatched_at - scheduled_at`` of each run (the tick interval is 1 s, so a run due just after
a tick waits up to a second by design).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from minihermes.app import build_agent_node, default_config  # noqa: E402
from minihermes.runtime import Node, RequestContext  # noqa: E402

CTX = RequestContext(tenant="bench", principal="bench", roles=frozenset({"admin"}))
SCOPE = ("bench", "default")


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def make_node(data: Path, *, runner: bool, concurrency: int) -> Node:
    config = default_config(data)
    if not runner:
        config.tree.children = [c for c in config.tree.children if getattr(c, "name", "") != "cron_runner"]
    for spec in config.tree.walk():
        if spec.name == "memory":
            spec.args["semantic"] = False  # the optional model is not what is measured here
        elif spec.name == "skill_store":
            spec.args["semantic"] = "off"
        elif spec.name == "cron_runner":
            spec.args["max_concurrent"] = concurrency
        elif spec.name == "agent":
            spec.idle_timeout = 5.0  # 10k cron sessions: let finished ones go
    node = build_agent_node(config)
    await node.start()
    return node


async def runs(node: Node) -> list[dict[str, Any]]:
    rows = await node.store.kv.list(SCOPE, "cron:run:")
    return [v for _, v in rows if isinstance(v, dict)]


def first_runs(all_runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    first: dict[str, dict[str, Any]] = {}
    for r in all_runs:
        if r["job_id"] not in first or r["scheduled_at"] < first[r["job_id"]]["scheduled_at"]:
            first[r["job_id"]] = r
    return list(first.values())


async def scenario(jobs: int, period: int, *, runner: bool, concurrency: int, lead: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        node = await make_node(Path(tmp) / "data", runner=runner, concurrency=concurrency)
        try:
            t0 = time.perf_counter()
            sem = asyncio.Semaphore(64)
            # Burst: every job's one run falls due at the same instant, after they are all created.
            burst_at = datetime.fromtimestamp(time.time() + lead, UTC).isoformat()
            schedule = f"every_{period}s" if runner else burst_at

            async def create(i: int) -> None:
                async with sem:
                    await node.ask(
                        "cron_scheduler",
                        "create_job",
                        {"job_id": f"job-{i}", "prompt": f"calculate {i} + 1", "schedule": schedule},
                        ctx=CTX,
                        timeout=120,
                    )

            await asyncio.gather(*(create(i) for i in range(jobs)))
            created_s = time.perf_counter() - t0
            if not runner and created_s > lead:
                print(f"warning: creating took {created_s:.0f}s, past the burst time; raise --lead")
            want = "completed" if runner else "pending"
            deadline = time.monotonic() + period + lead + 3600
            while True:
                got = first_runs(await runs(node))
                done = [r for r in got if r["status"] == want]
                if len(done) >= jobs or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            got = first_runs(await runs(node))
        finally:
            await node.stop(deadline=30)
    lateness = [r["lateness"] for r in got]
    dispatched = [r["dispatched_at"] for r in got]
    first_due = min(r["scheduled_at"] for r in got)
    out = {
        "setup": "full run (spread)" if runner else "dispatch only (burst)",
        "jobs": jobs,
        "created_per_s": jobs / created_s,
        "runs": len(got),
        "dispatch_per_s": len(got) / max(1e-9, max(dispatched) - first_due),
        "late_p50": pct(lateness, 50),
        "late_p99": pct(lateness, 99),
        "late_max": max(lateness),
        "completed_per_s": float("nan"),
        "run_p50": float("nan"),
    }
    if runner:
        finished = [r for r in got if r["status"] == "completed"]
        out["completed"] = len(finished)
        out["completed_per_s"] = len(finished) / max(
            1e-9, max(r["finished_at"] for r in finished) - first_due
        )
        out["run_p50"] = statistics.median(r["finished_at"] - r["dispatched_at"] for r in finished)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("setup", "setup", "{}"),
        ("jobs", "jobs", "{}"),
        ("runs", "runs", "{}"),
        ("created/s", "created_per_s", "{:.0f}"),
        ("dispatched/s", "dispatch_per_s", "{:.0f}"),
        ("completed/s", "completed_per_s", "{:.0f}"),
        ("lateness p50 s", "late_p50", "{:.3f}"),
        ("lateness p99 s", "late_p99", "{:.3f}"),
        ("lateness max s", "late_max", "{:.3f}"),
        ("dispatch->done p50 s", "run_p50", "{:.2f}"),
    ]
    cells = [[h for h, _, _ in cols]] + [
        [fmt.format(r[k]) if r[k] == r[k] else "-" for _, k, fmt in cols] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument(
        "--period",
        type=int,
        default=30,
        help="full run: seconds between a job's runs (first runs are counted)",
    )
    parser.add_argument("--full-jobs", type=int, default=0, help="jobs in the full run (default: --jobs)")
    parser.add_argument("--lead", type=float, default=0.0, help="burst: seconds from start to the due time")
    parser.add_argument("--concurrency", type=int, default=16, help="runs the runner executes at once")
    args = parser.parse_args()
    lead = args.lead or args.jobs / 60 + 5
    full_jobs = args.full_jobs or args.jobs
    rows = [await scenario(args.jobs, args.period, runner=False, concurrency=args.concurrency, lead=lead)]
    print(table(rows), flush=True)
    rows.append(await scenario(full_jobs, args.period, runner=True, concurrency=args.concurrency, lead=lead))
    print(f"\ncron, runner concurrency {args.concurrency}\n")
    print(table(rows))


if __name__ == "__main__":
    asyncio.run(main())
