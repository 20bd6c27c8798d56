"""A demo node for cluster tests, ``bench/cluster.py`` and trying a cluster by hand: the agent app (with its
real work actors: ``cron_scheduler``/``cron_runner``, ``task_queue``/``task_worker``) plus a small reminder
actor, an LLM provider with a fixed latency, and a record, in a SQLite file shared by the nodes, of every
activation of a leased actor and of every LLM call; a line protocol on stdin/stdout drives the node from
another process.

    python -m minihermes.cluster.testing NODE_ID DATA_DIR CLUSTER_NAME   # env: MINIHERMES_NATS_* and secret

Each stdin line is a JSON command ``{"id": 1, "cmd": "ask", "target": "agent", "op": "chat", "payload":
{...}, "tenant": "acme", "timeout": 30}`` (or ``"cmd": "status"``); each answer is one stdout line
``{"id": 1, "ok": ...}`` or ``{"id": 1, "err": {"code": ..., "message": ...}}``. ``READY <node>`` comes first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from minihermes.llm import (
    Completion,
    CompletionRequest,
    Provider,
    ProviderConfig,
    StreamEvent,
    Usage,
    events_from_completion,
    register_provider,
)
from minihermes.runtime import (
    ActorError,
    AppConfig,
    Cell,
    ClusterModel,
    GenServer,
    Node,
    RequestContext,
    call,
    tune_gc,
)
from minihermes.runtime import run_loop as run_main
from minihermes.runtime.store import backend_names

ECHO_KIND = "cluster_echo"
TENANT = "acme"


class EchoProvider(Provider):
    """Answers every request with the last user message after ``latency`` seconds (no tools). Each call is
    recorded in the node's :class:`NodeRecord` (when there is one) while it runs and when it ends."""

    kind = ECHO_KIND

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        self.latency = float(config.options.get("latency", 0.0))

    async def complete(self, request: CompletionRequest) -> Completion:
        last = next((m for m in reversed(request.messages) if m.role == "user"), None)
        text = last.content if last is not None and isinstance(last.content, str) else ""
        call_id = RECORD.llm_call_started(text) if RECORD is not None else None
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
        finally:
            if RECORD is not None and call_id is not None:
                RECORD.llm_call_ended(call_id)
        return Completion(
            content=f"echo: {text}", usage=Usage(input_tokens=10, output_tokens=5), provider=self.name
        )

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        for event in events_from_completion(await self.complete(request)):
            yield event


register_provider(ECHO_KIND, EchoProvider, replace=True)


class Ticker(GenServer):
    """Durable one-shot reminders; each fire records ``("tick", i, node, fired_at)``."""

    @call
    async def schedule(self, n: int, start_in: float, spacing: float, tag: str) -> dict[str, Any]:
        t0 = self.host.now() + start_in
        for i in range(n):
            await self.host.set_reminder(f"{tag}-{i}", "fire", {"i": i}, at=t0 + i * spacing)
        return {"first": t0, "last": t0 + (n - 1) * spacing}

    @call
    async def fire(self, i: int) -> None:
        await self.host.tuples.write(("tick", i, self.host.node_id, self.host.now()))

    @call
    async def pending(self) -> list[str]:
        """Names of the reminders not fired (claimed) yet."""
        return [r.name for r in await self.host.list_reminders()]

    @call
    async def fired(self) -> list[list[Any]]:
        return [list(t) for t in await self.host.tuples.read_all(("tick", None, None, None))]


DEMO_CHILDREN = """
[[supervisor.children]]
name = "ticker"
role = "minihermes.cluster.testing:Ticker"
"""


class NodeRecord:
    """What the nodes did, written synchronously to a SQLite file they share (``record.db`` in the data dir):
    every start and exit of a leased (dynamic) actor on this node, which the check that no actor was ever
    active on two nodes at once reads; and every call of the echo provider (its last user message, start and
    end), from which a test tells which turns are in flight."""

    def __init__(self, path: Path, node: Node) -> None:
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # No fsync: a SIGKILLed process loses nothing the OS has, and the writes stay cheap on the event loop.
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS activations (actor TEXT, node TEXT, boot TEXT, event TEXT, at REAL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS llm_calls (id INTEGER PRIMARY KEY, node TEXT, text TEXT,"
            " started REAL, ended REAL)"
        )
        self._node = node
        node.observe_cells(self._record)

    def _record(self, cell: Cell, event: str) -> None:
        if cell.spec.dynamic:
            actor = f"{cell.scope[0]}/{cell.scope[1]}/{cell.address}"
            n = self._node
            self._db.execute(
                "INSERT INTO activations VALUES (?, ?, ?, ?, ?)",
                (actor, n.node_id, n.boot_id, event, time.time()),
            )

    def llm_call_started(self, text: str) -> int | None:
        cur = self._db.execute(
            "INSERT INTO llm_calls (node, text, started) VALUES (?, ?, ?)",
            (self._node.node_id, text, time.time()),
        )
        return cur.lastrowid

    def llm_call_ended(self, call_id: int) -> None:
        self._db.execute("UPDATE llm_calls SET ended = ? WHERE id = ?", (time.time(), call_id))


RECORD: NodeRecord | None = None
"""This process's record (set by :func:`serve`)."""
RECORD_FILE = "record.db"


def demo_config(node_id: str, data_dir: str, cluster_name: str) -> AppConfig:
    """The agent app (its work actors included) plus the reminder actor, clustered (NATS and secret from the
    environment)."""
    from minihermes.app import AGENT_CONFIG

    cfg = AppConfig.from_toml(AGENT_CONFIG + DEMO_CHILDREN, "<cluster-demo>")
    cfg.model.node.id = node_id
    cfg.model.node.data_dir = data_dir
    cfg.model.node.shutdown_deadline_seconds = 3.0
    # A short TTL makes failover quick (tests); a busy machine needs a longer one (``MINIHERMES_DEMO_NODE_TTL``,
    # set by bench/cluster.py) or its nodes fence themselves whenever their heartbeat runs late.
    ttl = os.environ.get("MINIHERMES_DEMO_NODE_TTL", "4s")
    cfg.model.cluster = ClusterModel(enabled=True, name=cluster_name, heartbeat="0.5s", node_ttl=ttl)
    for spec in cfg.tree.walk():
        if spec.name == "memory":
            # Memory loads its embedding model on the event loop when it activates (seconds of CPU): the
            # demo keeps to BM25 recall, so what the tests time is the fabric, not model loading.
            spec.args.setdefault("semantic", False)
    if uses_postgres():
        cfg.model.node.backend = "postgres"
        cfg.model.node.backend_options = {"dsn_env": "MINIHERMES_PG_DSN", "schema": pg_schema(cluster_name)}
    return cfg


def uses_postgres() -> bool:
    """Demo nodes share PostgreSQL when ``MINIHERMES_PG_DSN`` is set (``scripts/postgres.sh``) and the backend
    is installed, unless ``MINIHERMES_CLUSTER_BACKEND=sqlite``; else one SQLite data dir."""
    return (
        bool(os.environ.get("MINIHERMES_PG_DSN"))
        and "postgres" in backend_names()
        and os.environ.get("MINIHERMES_CLUSTER_BACKEND", "postgres") != "sqlite"
    )


def pg_schema(cluster_name: str) -> str:
    """The PostgreSQL schema of a demo cluster (one per cluster name: tests and benchmarks start empty)."""
    return f"mh_{cluster_name.lower()}"


async def drop_pg_schema(cluster_name: str) -> None:
    """Remove a demo cluster's schema (after a test or benchmark)."""
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(
        os.environ["MINIHERMES_PG_DSN"], autocommit=True
    ) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(pg_schema(cluster_name)))
        )


async def serve(node_id: str, data_dir: str, cluster_name: str) -> None:
    logging.basicConfig(
        level=logging.WARNING, format=f"%(asctime)s {node_id} %(name)s %(levelname)s %(message)s"
    )
    from minihermes.app import build_agent_node

    global RECORD
    node = build_agent_node(demo_config(node_id, data_dir, cluster_name))
    RECORD = NodeRecord(Path(data_dir) / RECORD_FILE, node)
    await node.start()
    tune_gc()
    stopping = asyncio.Event()
    node.install_signal_handlers(stopping.set)
    out = sys.stdout

    def answer(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj, default=str) + "\n")
        out.flush()

    async def run(cmd: dict[str, Any]) -> None:
        cid = cmd.get("id")
        try:
            if cmd["cmd"] == "status":
                status = getattr(node.fabric, "status", None)
                answer({"id": cid, "ok": status() if status is not None else {}})
                return
            ctx = RequestContext(tenant=str(cmd.get("tenant", TENANT)), principal="driver")
            result = await node.ask(
                cmd["target"], cmd["op"], cmd.get("payload") or {}, cmd.get("timeout"), ctx=ctx
            )
            answer({"id": cid, "ok": result})
        except ActorError as e:
            answer({"id": cid, "err": e.to_dict()["error"]})

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    answer({"ready": node_id})
    tasks: set[asyncio.Task[None]] = set()

    async def read() -> None:
        while line := await reader.readline():
            cmd = json.loads(line)
            if cmd.get("cmd") == "stop":
                break
            t = asyncio.ensure_future(run(cmd))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        stopping.set()

    reading = asyncio.ensure_future(read())
    await stopping.wait()
    reading.cancel()
    await node.stop()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    # Run as ``python -m``, this file is ``__main__``; the node imports it again by name (the ticker's
    # role), and that module's provider class is the one registered last: serve from that module, so the
    # provider and ``RECORD`` are the same module's.
    from minihermes.cluster import testing

    run_main(testing.serve(*argv))  # the event loop `minihermes serve` runs on
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
