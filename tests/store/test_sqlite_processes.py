"""Several OS processes on one SQLite file, and a real crash (SIGKILL) of a writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import Store, open_store

SCOPE = ("acme", "main")  # the scope _proc_worker uses (not imported: it stubs the runtime package)
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store._proc_worker", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def race(*workers: tuple[str, ...]) -> list[list[str]]:
    """Start workers, wait until each has opened the store, release them together, collect their lines."""
    procs = [spawn(*args) for args in workers]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        lines = out.splitlines()
        assert lines[-1] == "done"
        outputs.append(lines[:-1])
    return outputs


async def opened(path: Path) -> Store:
    store = open_store("sqlite", path=path, clock=ManualClock())
    await store.open()
    return store


async def test_two_processes_take_each_tuple_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    store = await opened(path)
    for i in range(120):
        await store.tuples.write(SCOPE, ["job", i])
    outputs = race(("take", str(path)), ("take", str(path)))
    taken = Counter(int(line.split()[1]) for lines in outputs for line in lines)
    assert sorted(taken) == list(range(120)) and set(taken.values()) == {1}
    assert await store.tuples.read(SCOPE, ["job", None]) is None
    await store.close()


async def test_two_processes_consume_each_message_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    store = await opened(path)
    sent = {await store.channels.send(SCOPE, "q", "n", i) for i in range(120)}
    outputs = race(("consume", str(path), "p1"), ("consume", str(path), "p2"))
    got = Counter(line.split()[1] for lines in outputs for line in lines)
    assert set(got) == sent and set(got.values()) == {1}
    await store.close()


async def test_fencing_tokens_unique_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    await (await opened(path)).close()  # create the schema before the race
    outputs = race(("lock", str(path), "p1", "25"), ("lock", str(path), "p2", "25"))
    per_process = [[int(line.split()[1]) for line in lines] for lines in outputs]
    for tokens in per_process:
        assert tokens == sorted(tokens) and len(tokens) == 25
    assert sorted(per_process[0] + per_process[1]) == list(range(1, 51))


async def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    proc = spawn("crash", str(path))
    assert proc.stdout is not None
    lines: list[list[str]] = []
    kv_lines = 0
    while kv_lines < 400:
        line = proc.stdout.readline()
        assert line, "child exited early"
        lines.append(line.split())
        kv_lines += line.startswith("kv ")
    os.kill(proc.pid, signal.SIGKILL)  # mid-stream: 8 writers have group commits in flight
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    store = await opened(path)
    try:
        for kind, *rest in lines:
            if kind == "kv":
                w, i = rest[0][1:].split("-")
                assert await store.kv.get(SCOPE, rest[0]) == {"w": int(w), "i": int(i)}
            elif kind == "ckpt":
                checkpoint = await store.checkpoints.load(SCOPE, f"actor{rest[0]}")
                assert checkpoint is not None and checkpoint.state_version >= int(rest[1])
        held = {rest[0] for kind, *rest in lines if kind == "held"}
        sent = {rest[0] for kind, *rest in lines if kind == "sent"}
        assert len(held) == 5
        # the dead consumer's messages come back at once; everything sent is still queued
        assert await store.channels.release_receipt("crashy") == 5
        queued = await store.channels.receive(SCOPE, "q", max_messages=100_000)
        by_id = {m.msg_id: m for m in queued}
        assert sent <= set(by_id)
        assert all(by_id[msg_id].deliveries == 2 for msg_id in held)
    finally:
        await store.close()
