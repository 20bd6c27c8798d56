"""A node in a child process, for crash tests that SIGKILL it. Prints one line per acknowledged fact.

python -m tests.runtime.nodeproc <scenario> <data_dir>
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from minihermes.runtime import ActorSpec, GenServer, Node, NodeOptions, SupervisorSpec, Workflow, call
from minihermes.runtime._loop import run as run_on_loop
from minihermes.runtime.store._pg_testing import open_test_store


class SideEffects(Workflow):
    async def execute(self, log: str) -> dict[str, Any]:
        await self.step("a", _effect, log, "a")
        await self.wait_signal("go")
        await self.step("b", _effect, log, "b")
        await self.step("c", _effect, log, "c")
        return {"done": True}


def _effect(log: str, name: str) -> str:
    with open(log, "a") as f:
        f.write(name + "\n")
    return name


class Worker(GenServer):
    @call
    async def put(self, key: str, value: int) -> int:
        return await self.host.kv.put(key, value)

    @call
    async def enqueue(self, n: int) -> list[str]:
        return [await self.host.channels.send("jobs", "job", {"n": i}) for i in range(n)]

    @call
    async def take(self, n: int) -> list[str]:
        got = await self.host.channels.receive("jobs", max_messages=n, visibility_timeout=3600)
        return [m.msg_id for m in got]

    @call
    async def drain(self) -> list[str]:
        got = await self.host.channels.receive("jobs", max_messages=100, visibility_timeout=3600)
        for m in got:
            await self.host.channels.ack("jobs", m.msg_id)
        return [m.msg_id for m in got]

    @call
    async def get(self, key: str) -> Any:
        return await self.host.kv.get(key)


async def build(data_dir: str) -> Node:
    """The crash node, on the test store (SQLite in data_dir, or its PostgreSQL schema: MINIHERMES_TEST_STORE
    is inherited from the test process)."""
    tree = SupervisorSpec(
        name="root",
        children=[ActorSpec("wf", SideEffects, virtual=True), ActorSpec("worker", Worker)],
    )
    return Node(await open_test_store(data_dir), tree, options=NodeOptions(node_id="crash-node"))


async def main(scenario: str, data_dir: str) -> None:
    node = await build(data_dir)
    await node.start()
    out = sys.stdout
    if scenario == "workflow":
        log = str(Path(data_dir) / "effects.log")
        await node.ask("wf/job1", "start", {"log": log})
        while (await node.ask("wf/job1", "query"))["waiting_for"] != "go":  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # the child polls its own node; the parent waits on its output
        print("A_DONE", flush=True)
    elif scenario == "writes":
        for i in range(50):
            await node.ask("worker", "put", {"key": f"k{i}", "value": i})
            print(f"PUT k{i}", flush=True)
        ids = await node.ask("worker", "enqueue", {"n": 5})
        print("SENT " + " ".join(ids), flush=True)
        taken = await node.ask("worker", "take", {"n": 3})
        print("TAKEN " + " ".join(taken), flush=True)
    elif scenario == "resume":
        print("STARTED", flush=True)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    out.flush()
    await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    run_on_loop(main(sys.argv[1], sys.argv[2]))
