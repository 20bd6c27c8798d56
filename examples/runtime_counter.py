"""The actor runtime on its own: a durable counter that survives a restart of the node.

python examples/runtime_counter.py
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any

from minihermes.runtime import ActorError, ActorSpec, GenServer, Node, SupervisorSpec, call, state
from minihermes.runtime.store import open_store


class Counter(GenServer):
    count: int = state(default=0)

    @call
    def add(self, amount: int = 1) -> dict[str, Any]:
        self.count += amount  # checkpointed before the reply leaves
        return {"count": self.count}


def make_node(data_dir: str) -> Node:
    tree = SupervisorSpec("root", children=[ActorSpec("counter", Counter)])
    return Node(open_store("sqlite", data_dir=data_dir), tree)


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        node = make_node(d)
        await node.start()
        print("first run:", await node.ask("counter", "add", {"amount": 2}))
        await node.stop()

        node = make_node(d)  # a new node on the same data dir: the state is back
        await node.start()
        print("after restart:", await node.ask("counter", "add", {"amount": 3}))
        try:
            await node.ask("counter", "add", {"amount": "three"})
        except ActorError as e:  # a structured error naming the op and the field
            print("bad input:", e.to_dict())
        await node.stop()


if __name__ == "__main__":
    asyncio.run(main())
