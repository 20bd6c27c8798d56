"""Erasure of background work (issue 25): ``memory.forget {user_id}`` leaves no byte of a user's queued tasks,
task results, delegations or orchestrations.

Alice and bob each put one unique token into a task that waits in the queue, a task the worker runs, a task
delegated to a sub-agent and an orchestrator run. After alice forgets herself and the node stops, no file under
the data directory (database, -wal, -shm, workspaces, the node's log) holds alice's token in any case form, and
on PostgreSQL neither does a ``pg_dump``; bob's records read the same before and after, and his token is
still on disk.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.runtime import Node, PermissionDenied, RequestContext

from ..store.conftest import drop_schema
from ..work.conftest import until
from .test_erasure import ADA, ALICE, BOB, PG_DSN, ask, forms, holders, new_token, node_log

SCOPE = ("acme", "default")
WORK_STORES = ("tasks", "task_results", "delegations", "orchestrations")
"""What alice's seeding reaches in the background work: each must count something cleared."""


async def seed_work(node: Node, ctx: RequestContext, token: str) -> dict[str, Any]:
    """A queued task, a finished task, a delegation and an orchestrator run of ``ctx``'s, each with ``token``."""
    sid = (await ask(node, ctx, "session_manager", "create_session"))["session_id"]
    queued = await ask(node, ctx, "task_queue", "enqueue", task_type="report", payload={"text": f"r {token}"})
    ran = await ask(
        node, ctx, "task_queue", "enqueue", task_type="agent_prompt", payload={"prompt": f"say {token}"}
    )

    async def finished() -> bool:
        reply = await ask(node, ctx, "task_queue", "get_result", msg_id=ran["msg_id"])
        return reply["status"] == "ok"

    await until(finished, what=f"{ctx.principal}'s task")
    delegated = await ask(
        node,
        ctx,
        "tool_executor",
        "execute",
        name="delegate_task",
        input={"goal": f"look up {token}", "toolsets": ["compute"]},
        session_id=sid,
    )
    assert delegated["status"] == "ok", delegated
    task_id = f"orch-{ctx.principal}"
    run = await ask(
        node,
        ctx,
        f"orchestrator/{task_id}",
        "workflow_run",
        task=f"compare {token} and oats",
        task_id=task_id,
    )
    assert run["status"] == "completed", run
    return {
        "queued": queued["msg_id"],
        "ran": ran["msg_id"],
        "child": delegated["result"]["child_session"],
        "task_id": task_id,
    }


async def bobs_work(node: Node, bob: dict[str, Any]) -> dict[str, Any]:
    """What bob's work reads as, through its ops (and the delegation record, which only the tool reads)."""
    result = await ask(node, BOB, "task_queue", "get_result", msg_id=bob["ran"])
    run = f"orchestrator/{bob['task_id']}"
    return {
        "result": result,
        "delegation": await node.store.kv.get(SCOPE, f"delegation:{bob['child']}"),
        "status": await ask(node, ADA, run, "status", task_id=bob["task_id"]),
        "outcome": await ask(node, ADA, run, "result"),
        "depth": (await ask(node, ADA, "task_queue", "get_stats"))["by_type"]["report"]["depth"],
    }


Residue = Callable[[str], Awaitable[list[str]]]
"""Where a token is still stored: the files under the data dir holding a form of it (and lines of a dump)."""


async def forget_alices_work(data: Path, residue: Residue, configure: Any = None) -> tuple[str, str]:
    """Seed bob's and alice's work, check bob's reads the same before and after alice forgets herself, and
    that her token was stored before and is nowhere after (``residue``). Returns both tokens."""
    alice, bob = new_token(), new_token()
    config = default_config(data)
    if configure is not None:
        configure(config)
    node = build_agent_node(config)
    async with node_log(data / "server.log"):
        await node.start()
        try:
            bobs = await seed_work(node, BOB, bob)
            alices = await seed_work(node, ALICE, alice)
            before = await bobs_work(node, bobs)
            assert before["depth"] == 2 and before["delegation"] and before["result"]["status"] == "ok"
            assert await residue(alice), "the token was never stored: this test would prove nothing"
            # bob may not forget alice's run, nor read what it was
            with pytest.raises(PermissionDenied):
                await ask(node, BOB, f"orchestrator/{alices['task_id']}", "forget", task_id=alices["task_id"])

            out = await ask(node, ALICE, "memory", "forget", user_id="alice")
            assert out["status"] == "ok" and out["mode"] == "user"
            assert {s for s in WORK_STORES if out["cleared"].get(s, 0) < 1} == set(), out["cleared"]

            after = await bobs_work(node, bobs)
            assert after == before
            # alice's queued task went with her: only bob's is handed out, with its payload
            got = await ask(node, ADA, "task_queue", "dequeue", task_type="report", limit=10)
            assert [(t["msg_id"], t["payload"]) for t in got["tasks"]] == [
                (bobs["queued"], {"text": f"r {bob}"})
            ]
            assert (await ask(node, ALICE, "task_queue", "get_result", msg_id=alices["ran"]))["status"] == (
                "pending"
            )
            status = await ask(node, ADA, f"orchestrator/{alices['task_id']}", "status", task_id="x")
            assert status["task"] is None and status["sub_tasks"] == []
        finally:
            await node.stop(deadline=10)
    assert await residue(alice) == []
    assert await residue(bob)  # the search sees what is there
    return alice, bob


async def test_forgetting_a_user_leaves_no_byte_of_their_background_work(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def files(token: str) -> list[str]:
        return holders(data, token)

    await forget_alices_work(data, files)


@pytest.mark.skipif(not PG_DSN, reason="MINIHERMES_PG_DSN is not set (scripts/setup.d/10-postgres.sh)")
async def test_on_postgresql_a_dump_holds_no_byte_of_their_background_work(tmp_path: Path) -> None:
    schema = f"erasure_work_{uuid.uuid4().hex[:12]}"

    def on_postgres(config: Any) -> None:
        config.model.node.backend = "postgres"
        config.model.node.backend_options = {"dsn": PG_DSN, "schema": schema}

    data = tmp_path / "data"

    async def dumped(token: str) -> list[str]:
        """The dump's lines holding a form of the token, and the data dir's files (workspaces, log)."""
        dump = (
            await asyncio.to_thread(
                subprocess.run,
                ["pg_dump", "--no-owner", f"--schema={schema}", PG_DSN],
                capture_output=True,
                check=True,
            )
        ).stdout
        lines = [line[:300] for line in dump.splitlines() if any(f.encode() in line for f in forms(token))]
        return [repr(line) for line in lines] + holders(data, token)

    try:
        await forget_alices_work(data, dumped, on_postgres)
    finally:
        await drop_schema(schema)
