"""SIGKILL the whole process: what the runtime acknowledged survives; unacked channel messages come back."""

from __future__ import annotations

import os
import signal

import pytest

from minihermes.runtime import ActorSpec, SystemClock

from .conftest import tree
from .nodeproc import Worker
from .test_workflow import _line, _spawn


@pytest.mark.slow
async def test_acknowledged_writes_survive_and_unacked_messages_are_redelivered(make_node, tmp_path):
    data = tmp_path / "d"
    proc = await _spawn("writes", data)
    puts = [await _line(proc) for _ in range(50)]
    sent = (await _line(proc)).split()[1:]
    taken = (await _line(proc)).split()[1:]
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    assert len(sent) == 5 and len(taken) == 3

    node = await make_node(
        tree(ActorSpec("worker", Worker)), data_dir=data, use_clock=SystemClock(), node_id="crash-node"
    )
    for line in puts:
        key = line.split()[1]
        assert await node.ask("worker", "get", {"key": key}) == int(key[1:])
    # all five come back at once, the three taken-but-unacked among them (no visibility timeout to wait for)
    assert sorted(await node.ask("worker", "drain")) == sorted(sent)
    assert await node.ask("worker", "drain") == []
