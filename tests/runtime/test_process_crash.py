"""SIGKILL the whole process: what the runtime acknowledged survives; unacked channel messages come back."""

from __future__ import annotations

import pytest

from minihermes.runtime import ActorSpec, SystemClock

from .._proc import kill_hard, read_line, spawn_module
from .conftest import tree
from .nodeproc import Worker


@pytest.mark.slow
async def test_acknowledged_writes_survive_and_unacked_messages_are_redelivered(make_node, tmp_path):
    data = tmp_path / "d"
    proc = await spawn_module("tests.runtime.nodeproc", "writes", str(data))
    puts = [await read_line(proc) for _ in range(50)]
    sent = (await read_line(proc)).split()[1:]
    taken = (await read_line(proc)).split()[1:]
    await kill_hard(proc)
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
