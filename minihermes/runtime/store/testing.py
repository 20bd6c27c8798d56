"""Helpers for tests of the store and of code built on it.

``create_v1_database`` writes a database file in the frozen v1 schema with a little of everything in it, so
migration tests (here and in the runtime) start from what an old release really left on disk.

``failing_writes`` makes the database itself refuse some writes (a trigger), so a test sees what a real
failure in the middle of a transaction leaves behind, on SQLite and on PostgreSQL alike.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from ._chain import ZERO_HASH, chain_hash
from ._common import encode_element, encode_tuple
from ._sqlite_schema import DB_FILENAME, create_baseline
from .base import JSON, Scope, Store

INJECTED = "injected write failure"
"""The message of the error ``failing_writes`` raises inside the database."""
_TABLES = ("kv", "tuples", "text_docs", "vectors", "blobs", "events", "channel_messages", "checkpoints")
_EVENTS = ("INSERT", "UPDATE", "DELETE")
_triggers = itertools.count(1)


@dataclass(frozen=True, slots=True)
class V1Fixture:
    """What create_v1_database wrote (all in ``scope``)."""

    path: Path
    scope: Scope
    kv: dict[str, object]
    ready_msg_id: str
    in_flight_msg_id: str
    channel: str
    stream: str
    events: int
    lock_name: str
    lock_token: int
    actor_id: str
    checkpoint: bytes
    tuple_: tuple[str, str, int]


TEXT_DOCS: tuple[tuple[str, str, str, str, str], ...] = (
    ("legacy", "main", "notes", "n1", "the quarterly invoice is due"),
    ("legacy", "main", "notes", "n2", "lunch with the design team"),
    ("legacy", "main", "other", "o1", "an invoice in another index"),
    ("elsewhere", "main", "notes", "e1", "another tenant's invoice"),
)
"""(tenant, namespace, index, doc_id, body) of the text documents a v1 fixture holds."""


def create_v1_database(
    path: str | os.PathLike[str],
    *,
    now: float = 1_800_000_000.0,
    checkpoints: Mapping[tuple[str, str, str], JSON | bytes] | None = None,
) -> V1Fixture:
    """Create ``path`` as a schema-v1 database (as the first release wrote it) holding sample data.

    The sample data lives in scope ("legacy", "main"); its in-flight channel message has no receipt, as v1
    had none, and becomes visible again 30 s after now. ``checkpoints`` adds actor checkpoints keyed by
    (tenant, namespace, actor_id) with state_version 1: bytes are stored as given, anything else as JSON
    (the runtime's checkpoint encoding). Synchronous (plain sqlite3): call it before opening a store.
    """
    file = Path(path)
    if file.exists():
        raise FileExistsError(f"{file} already exists")
    scope: Scope = ("legacy", "main")
    tenant, ns = scope
    kv: dict[str, object] = {"greeting": {"text": "hello"}, "count": 3}
    tup = ("skill_trigger", "summarize", 1)
    conn = sqlite3.connect(file, isolation_level=None)
    try:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        create_baseline(conn)
        for key, value in kv.items():
            conn.execute(
                "INSERT INTO kv (tenant, ns, key, value, version, expires_at, updated_at) VALUES (?, ?, ?, ?, 1, NULL, ?)",
                (tenant, ns, key, _json(value), now),
            )
        conn.execute(
            "INSERT INTO tuples (tenant, ns, arity, e0, body, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (tenant, ns, len(tup), encode_element(tup[0]), encode_tuple(tup), now),
        )
        for msg_id, deliveries, visible_at in (("v1-ready", 0, now), ("v1-inflight", 1, now + 30.0)):
            conn.execute(
                "INSERT INTO channel_messages (msg_id, tenant, ns, channel, msg_type, payload, dedup_key,"
                " deliveries, sent_at, visible_at) VALUES (?, ?, ?, 'inbox', 'note', ?, NULL, ?, ?, ?)",
                (msg_id, tenant, ns, _json({"id": msg_id}), deliveries, now, visible_at),
            )
        prev, events = ZERO_HASH, 3
        conn.execute(
            "INSERT INTO event_streams VALUES (?, ?, 'audit', 0, ?, 0, ?)", (tenant, ns, ZERO_HASH, ZERO_HASH)
        )
        for seq in range(1, events + 1):
            data = {"n": seq}
            digest = chain_hash(prev, seq, now, data)
            conn.execute(
                "INSERT INTO events VALUES (?, ?, 'audit', ?, ?, ?, ?, ?)",
                (tenant, ns, seq, now, _json(data, canonical=True), prev, digest),
            )
            prev = digest
        conn.execute(
            "UPDATE event_streams SET last_seq = ?, last_hash = ? WHERE tenant = ? AND ns = ? AND stream = 'audit'",
            (events, prev, tenant, ns),
        )
        conn.execute("INSERT INTO locks VALUES (?, ?, 'leader', 'node-a', 3, ?)", (tenant, ns, now + 10.0))
        conn.execute(
            "INSERT INTO checkpoints (tenant, ns, actor_id, state_version, data, updated_at)"
            " VALUES (?, ?, 'agent/1', 2, ?, ?)",
            (tenant, ns, b"state-v2", now),
        )
        # Text documents in two scopes and two indexes of the one v1 FTS table (v5 splits them up).
        for i, (t_tenant, t_ns, idx, doc_id, body) in enumerate(TEXT_DOCS, start=1):
            conn.execute(
                "INSERT INTO text_docs (id, tenant, ns, idx, doc_id, meta, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (i, t_tenant, t_ns, idx, doc_id, _json({"n": i}), now),
            )
            conn.execute("INSERT INTO text_fts (rowid, body) VALUES (?, ?)", (i, body))
        for (c_tenant, c_ns, actor_id), state in (checkpoints or {}).items():
            blob = state if isinstance(state, bytes) else _json(state).encode("utf-8")
            conn.execute(
                "INSERT INTO checkpoints (tenant, ns, actor_id, state_version, data, updated_at)"
                " VALUES (?, ?, ?, 1, ?, ?)",
                (c_tenant, c_ns, actor_id, blob, now),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return V1Fixture(
        path=file,
        scope=scope,
        kv=kv,
        ready_msg_id="v1-ready",
        in_flight_msg_id="v1-inflight",
        channel="inbox",
        stream="audit",
        events=events,
        lock_name="leader",
        lock_token=3,
        actor_id="agent/1",
        checkpoint=b"state-v2",
        tuple_=tup,
    )


async def sqlite_v1_fixture(
    data_dir: str | os.PathLike[str],
    *,
    checkpoints: Mapping[tuple[str, str, str], JSON | bytes] | None = None,
    now: float = 1_800_000_000.0,
) -> V1Fixture:
    """``create_v1_database`` at ``<data_dir>/minihermes.db`` (what ``data_dir=`` opens), off the event loop.

    await sqlite_v1_fixture(tmp_path / "old", checkpoints={("system", "default", "c"): {"count": 11}})
    """
    directory = Path(data_dir)
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    return await asyncio.to_thread(
        create_v1_database, directory / DB_FILENAME, now=now, checkpoints=checkpoints
    )


def _json(value: object, *, canonical: bool = False) -> str:
    if canonical:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return json.dumps(value, separators=(",", ":"))


@asynccontextmanager
async def failing_writes(
    store: Store, table: str, when: str = "TRUE", events: Sequence[str] = ("INSERT",)
) -> AsyncIterator[None]:
    """While open, the database refuses every row write to ``table`` (one of the store's tables: "kv",
    "tuples", "text_docs", ...) for which the SQL condition ``when`` holds (``NEW.key LIKE 'mem:%'``; use
    ``OLD`` for deletes), with an error inside the transaction (a trigger raising ``INJECTED``). For tests
    only: ``when`` is SQL, put in the trigger as given. An open SQLite or PostgreSQL store."""
    if table not in _TABLES:
        raise ValueError(f"failing_writes: unknown table {table!r}; known: {', '.join(_TABLES)}")
    if not events or any(e not in _EVENTS for e in events):
        raise ValueError(f"failing_writes: events must be some of {_EVENTS}")
    name = f"minihermes_injected_{next(_triggers)}"
    if store.backend == "sqlite":
        path = Path(getattr(store, "path"))  # noqa: B009 - SqliteStore's file; Store does not name it
        names = [f"{name}_{e.lower()}" for e in events]
        sql = [
            f"CREATE TRIGGER {n} BEFORE {e} ON {table} FOR EACH ROW WHEN ({when})"
            f" BEGIN SELECT RAISE(ABORT, '{INJECTED}'); END"
            for n, e in zip(names, events, strict=True)
        ]
        await asyncio.to_thread(_sqlite_run, path, sql)
        try:
            yield
        finally:
            await asyncio.to_thread(_sqlite_run, path, [f"DROP TRIGGER IF EXISTS {n}" for n in names])
        return
    if store.backend != "postgres":
        raise ValueError(f"failing_writes: no injection for the {store.backend!r} backend")
    schema = str(getattr(store, "schema"))  # noqa: B009 - PostgresStore's schema
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", schema):
        raise ValueError(f"failing_writes: odd schema name {schema!r}")
    engine = getattr(store, "_engine")  # noqa: B009 - the store's own connection factory
    fn = f'"{schema}".minihermes_injected_failure'
    async with await engine.connect() as conn:
        await conn.execute(
            f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql"
            f" AS $$ BEGIN RAISE EXCEPTION '{INJECTED}'; END $$"
        )
        await conn.execute(
            f'CREATE TRIGGER {name} BEFORE {" OR ".join(events)} ON "{schema}".{table}'
            f" FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION {fn}()"
        )
    try:
        yield
    finally:
        async with await engine.connect() as conn:
            await conn.execute(f'DROP TRIGGER IF EXISTS {name} ON "{schema}".{table}')


def _sqlite_run(path: Path, statements: list[str]) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()
