"""A node in a child process for the audit crash test: an actor acts, audits and checkpoints, while the
``audit_event`` actor is held busy, so that nothing but the sender itself can have written the events.
Prints ``DONE <i>`` once action i's checkpoint is durable, then waits to be killed.

python -m tests.agent.auditproc <data_dir>
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from minihermes.agent.audit_event import AuditEvent, fire_audit
from minihermes.runtime import ActorSpec, GenServer, Node, NodeOptions, SupervisorSpec, call, state
from minihermes.runtime._loop import run as run_on_loop
from minihermes.runtime.store._pg_testing import open_test_store

from .conftest import ACME

ACTIONS = 20


class HeldAudit(AuditEvent):
    """``audit_event`` stuck in one call: every message queued behind it (a ``log_event`` cast from a sender
    that still used one) stays in the mailbox until the process dies."""

    @call
    async def hold(self) -> None:
        await asyncio.Event().wait()


class Actor(GenServer):
    done: list[int] = state(default_factory=list)

    @call
    async def act(self, i: int) -> dict[str, Any]:
        fire_audit(self.host, "tool_executed", f"action {i}", session_id="s1", data={"i": i})
        self.done.append(i)
        await self.host.checkpoint()  # the action is durable: acknowledged below
        return {"i": i}


def tree() -> SupervisorSpec:
    return SupervisorSpec(
        name="root",
        children=[
            ActorSpec("audit_event", HeldAudit, per_tenant=True),
            ActorSpec("actor", Actor, per_tenant=True),
        ],
    )


async def main(data_dir: str) -> None:
    node = Node(await open_test_store(data_dir), tree(), options=NodeOptions(node_id="audit-node"))
    await node.start()
    held = asyncio.ensure_future(node.ask("audit_event", "hold", {}, timeout=3600, ctx=ACME))
    await asyncio.sleep(0)  # the hold is in the audit actor's mailbox first
    for i in range(ACTIONS):
        await node.ask("actor", "act", {"i": i}, ctx=ACME)
        print(f"DONE {i}", flush=True)
    await held  # never: until killed


if __name__ == "__main__":
    run_on_loop(main(sys.argv[1]))
