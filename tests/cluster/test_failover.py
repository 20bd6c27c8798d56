"""Must show (issue 6): three nodes on loopback in separate processes; chats, the product's cron jobs
(``cron_scheduler`` + ``cron_runner``), queued tasks (``task_queue`` + ``task_worker``) and runtime reminders
driven through all of them; one node SIGKILLed under load, with cron turns in flight on it. Checks: sessions
continue on the other nodes within 10 s; nothing acknowledged is lost (chat turns, enqueued tasks); each cron
slot fires once (consecutive slots, every run completed, its prompt executed once in its session); every
acknowledged task is done exactly once in effect; no reminder fires twice; and no leased actor is ever active
on two nodes at once (every activation is recorded by the nodes themselves in a shared SQLite file).

Placement is part of the scenario. Tenant ``acme``'s cron scheduler and task queue are first used through the
victim ``n1``, so their runner and worker run there: the runs and tasks it holds when it dies must come back
on the survivors. Tenant ``globex``'s are first used through ``n2``, which survives, while some of the
sessions they drive live on ``n1``: a turn that dies with ``n1`` mid-way (the kill waits for one) must be
finished once, not run again. Cron and task sessions are spread over the three nodes by first touching each
through a chosen node."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import prepare_data_dir
from minihermes.cluster.testing import RECORD_FILE, drop_pg_schema, uses_postgres
from minihermes.runtime import ActorError

from .driver import NodeProc

pytestmark = pytest.mark.slow

CHAT_SESSIONS = 4
FAST_LLM = 0.2
"""acme's provider latency (s): chats, acme's cron runs and tasks."""
SLOW_LLM = 1.0
"""globex's provider latency (s): its turns are in flight long enough for the kill to land in one."""
REMINDERS = 60
SPACING = 0.25
RECOVERY_LIMIT = 10.0
VICTIM = 1
HOME = {"acme": VICTIM, "globex": 2}
"""The node through which each tenant's cron scheduler and task queue are first used (so where they, their
runner and their worker run)."""
TASK_PACE = 0.3


@dataclass(frozen=True)
class Job:
    tenant: str
    job_id: str
    period: int
    session_on: int
    """The node on which the job's cron session is activated first."""

    @property
    def prompt(self) -> str:
        return f"cron job {self.job_id}: report"

    @property
    def session(self) -> str:
        return f"cron:{self.job_id}"


JOBS = [
    Job("acme", "a0", 1, 0),
    Job("acme", "a1", 2, 1),
    Job("acme", "a2", 2, 2),
    Job("globex", "g0", 2, VICTIM),
    Job("globex", "g1", 2, 0),
]
IN_FLIGHT_AT_KILL = JOBS[3]
"""A globex job whose session is on the victim while its runner is not: the kill lands in one of its turns."""


@dataclass
class Task:
    tenant: str
    key: str
    session: str
    prompt: str
    msg_id: str = ""


class Load:
    def __init__(self, nodes: list[NodeProc]) -> None:
        self.nodes = nodes
        self.acked: dict[str, list[str]] = defaultdict(list)
        self.tasks: dict[str, Task] = {}
        self.stop = asyncio.Event()
        self.killed_at: float | None = None
        self.recovered: dict[str, float] = {}
        """Per session: first turn acknowledged after the kill (seconds after it)."""
        self.errors: Counter[str] = Counter()

    def alive(self) -> list[NodeProc]:
        return [n for n in self.nodes if not n.dead and n.proc.returncode is None]

    async def ask_any(
        self, start: int, target: str, op: str, payload: dict[str, Any], tenant: str = "acme"
    ) -> Any:
        """Ask through node ``start`` (mod the live ones), moving on to the next on failure, for 40 s."""
        deadline = time.monotonic() + 40.0
        i = start
        while True:
            live = self.alive()
            if not live:
                raise AssertionError("every node exited (see the n*.log files in the data dir)")
            node = live[i % len(live)]
            try:
                return await node.ask(target, op, payload, timeout=15.0, tenant=tenant)
            except (ActorError, TimeoutError) as e:
                self.errors[getattr(e, "code", "timeout")] += 1
                if time.monotonic() > deadline:
                    raise
                i += 1
                await asyncio.sleep(0.05)

    async def chat(self, s: int) -> None:
        sid = f"sess-{s}"
        turn = 0
        while not self.stop.is_set():
            msg = f"{sid} turn {turn}"
            reply = await self.ask_any(s + turn, "agent", "chat", {"session_id": sid, "message": msg})
            assert reply["status"] == "ok", reply
            assert reply["response"] == f"echo: {msg}", reply
            self.acked[sid].append(msg)
            if self.killed_at is not None and sid not in self.recovered:
                self.recovered[sid] = time.monotonic() - self.killed_at
            turn += 1

    async def enqueue(self) -> None:
        """Tasks for both tenants in turn, each in its own session, first touched through node k (so the
        sessions are spread over the nodes) and enqueued through node k + 1. An enqueue that fails is asked
        again through another node with the same idempotency key."""
        for k in itertools.count():
            if self.stop.is_set():
                return
            tenant = ("acme", "globex")[k % 2]
            task = Task(tenant, f"{tenant}-{k}", f"task-{tenant}-{k}", f"task {k} of {tenant}: sum up")
            await self.ask_any(k, "agent", "get_stats", {"session_id": task.session}, tenant)
            body = {
                "task_type": "agent_prompt",
                "payload": {"prompt": task.prompt, "session_id": task.session},
                "idempotency_key": task.key,
            }
            reply = await self.ask_any(k + 1, "task_queue", "enqueue", body, tenant)
            task.msg_id = reply["msg_id"]
            if reply["duplicate"]:
                self.errors["enqueue_duplicate"] += 1
            self.tasks[task.key] = task
            await asyncio.sleep(TASK_PACE)


async def until(pred: Any, deadline: float, what: str) -> None:
    end = time.monotonic() + deadline
    while not pred():
        if time.monotonic() > end:
            pytest.fail(f"{what}: not reached within {deadline:g} s")
        await asyncio.sleep(0.02)


async def eventually(check: Any, deadline: float, what: str) -> Any:
    """Poll ``check`` (True when done, else a description of what is missing) until ``deadline`` s."""
    end = time.monotonic() + deadline
    while True:
        result = await check()
        if result is True:
            return
        if time.monotonic() > end:
            pytest.fail(f"{what}: {result}")
        await asyncio.sleep(0.2)


def record(db: Path, sql: str, *args: Any) -> list[Any]:
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


def active_on(db: Path, actor: str) -> set[str]:
    """Nodes on which an actor (``tenant/namespace/address``) was started and has not exited."""
    live: Counter[tuple[str, str]] = Counter()
    for node, boot, event in record(
        db, "SELECT node, boot, event FROM activations WHERE actor = ? ORDER BY rowid", actor
    ):
        live[(node, boot)] += 1 if event == "start" else -1
    return {node for (node, _), n in live.items() if n > 0}


def started_after(db: Path, actor: str, wall: float) -> set[str]:
    rows = record(
        db, "SELECT node FROM activations WHERE actor = ? AND event = 'start' AND at > ?", actor, wall
    )
    return {r[0] for r in rows}


def llm_calls_in_flight(db: Path) -> set[str]:
    """The last user messages of the echo provider's calls that are running now."""
    return {r[0] for r in record(db, "SELECT text FROM llm_calls WHERE ended IS NULL")}


def overlaps(db: Path, killed: tuple[str, str], killed_at_wall: float) -> list[str]:
    """Pairs of activations of one actor on two node incarnations whose lifetimes intersect."""
    rows = record(db, "SELECT actor, node, boot, event, at FROM activations ORDER BY at")
    spans: dict[str, list[list[Any]]] = defaultdict(list)  # actor -> [node, boot, start, end]
    for actor, node, boot, event, at in rows:
        if event == "start":
            spans[actor].append([node, boot, at, None])
        else:
            for span in reversed(spans[actor]):
                if span[0] == node and span[1] == boot and span[3] is None:
                    span[3] = at
                    break
    bad = []
    for actor, ss in spans.items():
        for sp in ss:
            if sp[3] is None:
                sp[3] = killed_at_wall if (sp[0], sp[1]) == killed else float("inf")
        for i, a in enumerate(ss):
            for b in ss[i + 1 :]:
                if (a[0], a[1]) != (b[0], b[1]) and a[2] < b[3] and b[2] < a[3]:
                    bad.append(f"{actor}: {a} and {b}")
    return bad


async def user_messages(load: Load, tenant: str, session: str) -> list[str]:
    hist = await load.ask_any(0, "agent", "get_history", {"session_id": session}, tenant)
    return [m["content"] for m in hist["messages"] if m["role"] == "user"]


async def runs_of(load: Load, job: Job) -> list[dict[str, Any]]:
    reply = await load.ask_any(
        0, "cron_scheduler", "job_runs", {"job_id": job.job_id, "limit": 200}, job.tenant
    )
    return sorted(reply["runs"], key=lambda r: r["scheduled_at"])


async def test_three_nodes_sigkill_one_under_load(
    tmp_path: Path, nats_server: dict[str, str], cluster_name: str
) -> None:
    data = tmp_path / "data"
    db = data / RECORD_FILE
    prepare_data_dir(data)
    nodes = list(
        await asyncio.gather(*(NodeProc.start(f"n{i}", data, cluster_name, nats_server) for i in range(3)))
    )
    victim = nodes[VICTIM]
    try:
        load = Load(nodes)
        for tenant, latency in (("acme", FAST_LLM), ("globex", SLOW_LLM)):
            provider = {
                "name": "echo",
                "kind": "cluster_echo",
                "model": "echo",
                "options": {"latency": latency},
            }
            await nodes[0].ask("llm_gateway", "register_provider", provider, tenant=tenant)
            await nodes[2].ask("llm_gateway", "switch_provider", {"provider": "echo"}, tenant=tenant)
            # Each tenant's scheduler and queue are first used through its home node: they are active there,
            # and so are the runner and the worker they wake.
            home = nodes[HOME[tenant]]
            await home.ask("cron_scheduler", "list_jobs", {}, tenant=tenant)
            await home.ask("task_queue", "get_stats", {}, tenant=tenant)
        for i, job in enumerate(JOBS):
            await nodes[job.session_on].ask(
                "agent", "get_stats", {"session_id": job.session}, tenant=job.tenant
            )
            spec = {
                "job_id": job.job_id,
                "prompt": job.prompt,
                "schedule": f"every {job.period}s",
                "retry_backoff": 1.0,
            }
            await nodes[i % 3].ask("cron_scheduler", "create_job", spec, tenant=job.tenant)

        workers = [asyncio.ensure_future(load.chat(s)) for s in range(CHAT_SESSIONS)]
        workers.append(asyncio.ensure_future(load.enqueue()))

        # Under way: every session has turns acknowledged, every job has completed runs, tasks are done.
        async def under_way() -> Any:
            short = [f"sess-{s}" for s in range(CHAT_SESSIONS) if len(load.acked[f"sess-{s}"]) < 2]
            for job in JOBS:
                done = [r for r in await runs_of(load, job) if r["status"] == "completed"]
                if len(done) < 2:
                    short.append(job.job_id)
            for tenant in HOME:
                stats = await nodes[0].ask("task_queue", "get_stats", {}, tenant=tenant)
                if stats["completed"] < 2:
                    short.append(f"tasks of {tenant}")
            return True if not short else f"still starting: {short}"

        await eventually(under_way, 60.0, "load")
        sched = await nodes[2].ask(
            "ticker", "schedule", {"n": REMINDERS, "start_in": 0.5, "spacing": SPACING, "tag": "r"}
        )

        async def some_fired() -> Any:
            n = len(await nodes[0].ask("ticker", "fired"))
            return True if n >= 3 else f"{n} reminders fired"

        await eventually(some_fired, 30.0, "first reminders")
        # The scenario's placement held: acme's runner and worker on the victim, globex's on n2, the
        # in-flight job's session on the victim.
        placement = {
            "acme/default/cron_runner": {"n1"},
            "acme/default/task_worker": {"n1"},
            "globex/default/cron_runner": {"n2"},
            "globex/default/task_worker": {"n2"},
            f"globex/default/agent/{IN_FLIGHT_AT_KILL.session}": {"n1"},
        }
        assert {a: active_on(db, a) for a in placement} == placement
        # Kill when a turn of the in-flight job (its session on the victim, its runner on n2) is waiting for
        # the LLM, i.e. durable and not finished, and one of acme's cron turns (driven by the victim's
        # runner) is too.
        acme_prompts = {j.prompt for j in JOBS if j.tenant == "acme"}

        def cron_turns_in_flight() -> bool:
            running = llm_calls_in_flight(db)
            return IN_FLIGHT_AT_KILL.prompt in running and bool(running & acme_prompts)

        await until(cron_turns_in_flight, 30.0, "cron turns in flight on both tenants")
        victim.kill()
        load.killed_at = time.monotonic()
        killed_at_wall = time.time()
        await victim.proc.wait()
        pending_reminders = await nodes[0].ask("ticker", "pending")
        assert len(pending_reminders) >= 5, "the kill must land among the reminders"

        # The load goes on until every session has had a turn acknowledged after the kill (or 20 s pass),
        # and every job has completed runs scheduled well after the kill.
        await until(lambda: len(load.recovered) == CHAT_SESSIONS, 20.0, "sessions after the kill")

        async def cron_went_on() -> Any:
            behind = []
            for job in JOBS:
                runs = await runs_of(load, job)
                later = [
                    r for r in runs if r["scheduled_at"] > killed_at_wall + 6 and r["status"] == "completed"
                ]
                if len(later) < 2:
                    behind.append(job.job_id)
            return True if not behind else f"no runs completed since the kill for {behind}"

        await eventually(cron_went_on, 40.0, "cron after the kill")
        load.stop.set()
        await asyncio.gather(*workers)
        survivors = load.alive()
        assert len(survivors) == 2
        for job in JOBS:
            await load.ask_any(0, "cron_scheduler", "pause_job", {"job_id": job.job_id}, job.tenant)

        # Sessions continue on the other nodes within 10 s of the kill.
        assert set(load.recovered) == {f"sess-{s}" for s in range(CHAT_SESSIONS)}, load.recovered
        assert max(load.recovered.values()) < RECOVERY_LIMIT, load.recovered

        # Nothing acknowledged is lost: every acknowledged turn is in its session's history.
        for sid, msgs in load.acked.items():
            users = await user_messages(load, "acme", sid)
            missing = [m for m in msgs if m not in users]
            assert not missing, f"{sid} lost acknowledged turns {missing}"

        # Each cron slot fires once. Every run ends completed (a run in flight on the victim is handed out
        # again when its node is declared down; one that failed there is retried), the runs of a job sit
        # on consecutive slots of its schedule (none skipped, none twice) across the kill, and its session
        # holds its prompt exactly once per run: no slot's prompt ran twice, none was lost.
        async def runs_final() -> Any:
            open_runs = []
            for job in JOBS:
                for r in await runs_of(load, job):
                    assert r["status"] != "failed", r
                    if r["status"] != "completed":
                        open_runs.append((r["run_id"], r["status"], r.get("attempt")))
            return True if not open_runs else f"runs not completed: {open_runs}"

        await eventually(runs_final, 40.0, "cron runs")
        retried = runs_total = 0
        executed: dict[str, Counter[str]] = {}
        for tenant in HOME:
            events = await load.ask_any(
                0, "audit_event", "query_events", {"event_type": "cron_executed", "limit": 1000}, tenant
            )
            executed[tenant] = Counter(e["detail"].split("run_id=")[1] for e in events["events"])
            twice = {r: n for r, n in executed[tenant].items() if n > 1}
            assert not twice, f"cron runs executed more than once: {twice}"
        unaudited = []
        for job in JOBS:
            runs = await runs_of(load, job)
            slots = [r["scheduled_at"] for r in runs]
            assert len({r["run_id"] for r in runs}) == len(runs)
            gaps = [(a, b) for a, b in itertools.pairwise(slots) if abs((b - a) - job.period) > 1e-3]
            assert not gaps, f"{job.job_id}: slots not consecutive around {gaps}"
            assert slots[0] < killed_at_wall < slots[-1], (job.job_id, slots[0], killed_at_wall, slots[-1])
            prompts = await user_messages(load, job.tenant, job.session)
            assert prompts == [job.prompt] * len(runs), (
                f"{job.job_id}: {len(runs)} runs, its prompt ran {prompts.count(job.prompt)} times; "
                f"retried: {[r for r in runs if r.get('attempt')]}"
            )
            assert all(r["result"] == f"echo: {job.prompt}" for r in runs), runs
            retried += sum(1 for r in runs if r.get("attempt", 0) > 0)
            runs_total += len(runs)
            unaudited += [r["run_id"] for r in runs if r["run_id"] not in executed[job.tenant]]

        # Every acknowledged task is done exactly once in effect: enqueued again with its idempotency key
        # (as a client that lost the answer would), it answers its first message id and enqueues nothing;
        # it has a result; its prompt is in its session once; nothing is left queued or dead-lettered.
        tasks = list(load.tasks.values())
        for t in tasks:
            body = {"task_type": "agent_prompt", "payload": {"prompt": t.prompt}, "idempotency_key": t.key}
            again = await load.ask_any(0, "task_queue", "enqueue", body, t.tenant)
            assert again["msg_id"] == t.msg_id, (t, again)

        async def tasks_done() -> Any:
            pending = []
            for t in tasks:
                res = await load.ask_any(0, "task_queue", "get_result", {"msg_id": t.msg_id}, t.tenant)
                if res["status"] != "ok":
                    pending.append(t.key)
                else:
                    assert res["result"]["response"] == f"echo: {t.prompt}", (t, res)
            return (
                True
                if not pending
                else f"{len(pending)} of {len(tasks)} acknowledged tasks not done: {pending}"
            )

        await eventually(tasks_done, 40.0, "queued tasks")
        for t in tasks:
            assert await user_messages(load, t.tenant, t.session) == [t.prompt], t

        async def queues_empty() -> Any:
            left = {}
            for tenant in HOME:
                stats = await load.ask_any(0, "task_queue", "get_stats", {}, tenant)
                assert stats["dead_lettered"] == 0, stats
                if stats["depth"] or stats["in_flight"]:
                    left[tenant] = stats
            return True if not left else f"tasks left: {left}"

        await eventually(queues_empty, 10.0, "task queues")

        # The scenario happened: the victim's runner and worker came back on a survivor, and the in-flight
        # job's session was activated again elsewhere.
        for actor in ("acme/default/cron_runner", "acme/default/task_worker"):
            assert started_after(db, actor, killed_at_wall) - {"n1"}, f"{actor} did not move"
        moved = started_after(db, f"globex/default/agent/{IN_FLIGHT_AT_KILL.session}", killed_at_wall)
        assert moved - {"n1"}, "the in-flight cron session did not move"

        # Each reminder fires once, on whichever node claimed it: never twice, and every one not claimed by
        # the victim fires (the survivors take over its timers). A runtime reminder is at most once: one the
        # victim had claimed (the claim commits before the handler runs) and not yet handled dies with it.
        # The cron scheduler builds exactly-once runs on top (checked above).
        counts: Counter[int] = Counter()
        after_kill = [i for i in range(REMINDERS) if sched["first"] + i * SPACING > killed_at_wall + 1.0]

        async def reminders_settled() -> Any:
            # A claimed reminder leaves the pending list before its handler records it: wait for both.
            pending = await survivors[1].ask("ticker", "pending")
            fired = await survivors[0].ask("ticker", "fired")
            counts.clear()
            counts.update(row[1] for row in fired)
            assert all(c == 1 for c in counts.values()), f"fired more than once: {counts}"
            unfired = sorted(set(after_kill) - set(counts))
            if pending or unfired:
                return f"{len(pending)} reminders pending; due after the kill and not fired: {unfired}"
            return True

        await eventually(reminders_settled, 20.0, "reminders")
        lost = [i for i in range(REMINDERS) if i not in counts]
        assert len(lost) < REMINDERS // 2, f"reminders lost with the victim: {lost}"

        # No leased actor was ever active on two nodes at once.
        status = await nodes[0].status()
        boots = record(db, "SELECT DISTINCT boot FROM activations WHERE node = 'n1'")
        bad = overlaps(db, ("n1", boots[0][0] if boots else ""), killed_at_wall)
        assert not bad, bad
        assert status["peers"] == ["n2"]
        print(
            f"\nstore: {'PostgreSQL' if uses_postgres() else 'SQLite'}; turns acked: "
            f"{sum(len(m) for m in load.acked.values())}, cron runs: {runs_total} ({retried} retried, "
            f"{len(unaudited)} without a cron_executed event), tasks: {len(tasks)}, recovery: max "
            f"{max(load.recovered.values()):.2f} s, reminders lost with the victim: {lost}, "
            f"errors: {dict(load.errors)}"
        )
    finally:
        for n in nodes:
            await n.stop()
        if uses_postgres():
            await drop_pg_schema(cluster_name)
