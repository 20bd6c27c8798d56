"""Graceful stop, retention/compaction, and the serve command."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from minihermes.runtime import ActorSpec, ManualClock, ShuttingDown
from minihermes.runtime._loop import loop_name
from minihermes.runtime.store import RetentionRule

from .actors import GATES, Counter, Slow
from .conftest import tree, until

ROOT = Path(__file__).resolve().parents[2]


async def entered() -> bool:
    return bool(GATES.get("entered"))


async def test_graceful_stop_finishes_running_and_queued_work_and_refuses_new(make_node, tmp_path):
    GATES.clear()
    GATES["gate"] = asyncio.Event()
    node = await make_node(tree(ActorSpec("slow", Slow), ActorSpec("c", Counter)), shutdown_deadline=30)
    running = asyncio.ensure_future(node.ask("slow", "work", {"n": 1}))
    await until(entered)
    queued = asyncio.ensure_future(node.ask("slow", "work", {"n": 2}))
    await asyncio.sleep(0)
    lock_scope = ("default", "default")
    token = await node.store.locks.try_acquire(lock_scope, "leader", node.node_id, 600)
    assert token is not None
    stopping = asyncio.ensure_future(node.stop())
    await asyncio.sleep(0)
    with pytest.raises(ShuttingDown):
        await node.ask("c", "get")
    GATES["gate"].set()
    assert await running == 1 and await queued == 2
    await stopping
    # everything flushed; the lock was released for the next node
    node2 = await make_node(tree(ActorSpec("slow", Slow), ActorSpec("c", Counter)))
    assert await node2.ask("slow", "get") == [1, 2]
    assert await node2.store.locks.get(lock_scope, "leader") is None


async def test_work_cut_off_by_a_stop_past_its_deadline_answers_shutting_down(make_node):
    """A message still running at the shutdown deadline is answered ``shutting_down`` (503: retry later),
    not ``actor_crashed``: the node stopped, nothing crashed."""
    GATES.clear()
    GATES["gate"] = asyncio.Event()  # never set: the work outlives the deadline
    node = await make_node(tree(ActorSpec("slow", Slow), ActorSpec("c", Counter)), shutdown_deadline=0.2)
    running = asyncio.ensure_future(node.ask("slow", "work", {"n": 1}, timeout=30))
    await until(entered)
    await node.stop()
    with pytest.raises(ShuttingDown) as e:
        await running
    assert e.value.code == "shutting_down" and e.value.http_status == 503


async def test_compaction_applies_retention_rules(make_node, clock: ManualClock):
    rules = [RetentionRule("events", "audit", max_age=86400), RetentionRule("kv", "run:", max_age=3600)]
    node = await make_node(tree(ActorSpec("c", Counter)), retention=rules, retention_interval=600)
    scope = ("acme", "prod")
    for i in range(5):
        await node.store.events.append(scope, "audit", {"i": i})
        await node.store.kv.put(scope, f"run:{i}", i)
    await node.store.kv.put(scope, "keep", 1)
    await clock.advance(86400 + 1)
    await node.store.events.append(scope, "audit", {"i": "fresh"})
    report = await node.compact()
    assert report.get("events") == 5 and report.get("kv") == 5
    assert [e.data for e in await node.store.events.read(scope, "audit")] == [{"i": "fresh"}]
    assert (await node.store.events.verify(scope, "audit")).ok
    assert await node.store.kv.get(scope, "keep") == 1


async def test_compaction_runs_on_its_own_timer(make_node, clock: ManualClock):
    node = await make_node(
        tree(ActorSpec("c", Counter)),
        retention=[RetentionRule("kv", "tmp:", max_age=10)],
        retention_interval=60,
    )
    await node.store.kv.put(("t", "n"), "tmp:x", 1)
    await clock.advance(61)
    for _ in range(100):  # the compaction task runs store I/O on threads
        if await node.store.kv.get(("t", "n"), "tmp:x") is None:
            break
        await asyncio.sleep(0.01)
    assert await node.store.kv.get(("t", "n"), "tmp:x") is None


@pytest.mark.slow
@pytest.mark.both_loops  # signal handling differs between the loops
async def test_serve_runs_the_demo_tree_and_stops_on_sigterm(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "minihermes.cli.main",
        "serve",
        "--app",
        "demo",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "d"),
        cwd=ROOT,
        env={**os.environ, "MINIHERMES_EVENT_LOOP": loop_name()},  # the loop this test runs on
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    try:
        lines = []
        while True:
            line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
            assert line, "serve exited early:\n" + "".join(lines)
            lines.append(line)
            if "running pipeline" in line:
                break
        os.kill(proc.pid, signal.SIGTERM)
        rest = (await asyncio.wait_for(proc.stderr.read(), 60)).decode()
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:  # a failed assertion must not leave a server running
            proc.kill()
            await proc.wait()
    text = "".join(lines) + rest
    for name in ("counter", "notebook", "lifecycle", "heartbeat", "pipeline"):
        assert f"running {name}" in text
    assert "stopping (signal)" in text and "stopped" in rest


async def test_serve_rejects_a_bad_config_naming_the_field(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[supervisor]\nstrategy = "one_for_none"\n')
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "minihermes.cli.main",
        "serve",
        "--config",
        str(bad),
        cwd=ROOT,
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert "supervisor.strategy" in err.decode()
