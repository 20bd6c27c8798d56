"""SQLite event log: hash-chained, append-only streams (chain rules in ``_chain``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from functools import partial

from ._chain import ZERO_HASH, StreamHead, chain_hash, verify_rows
from ._common import AppendMarks, check_count, check_name, check_scope, loads_json
from ._sqlite_common import Part, logger
from ._sqlite_engine import snapshot
from .base import JSON, ChainCheck, EventRecord, Scope


def _encode(data: JSON) -> str:
    """The stored form is the canonical form, so verification re-hashes exactly what was hashed."""
    try:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"event data is not JSON-serializable: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"event data is not valid JSON: {exc}") from None


_Pending = tuple[float, str, JSON, "asyncio.Future[EventRecord]"]
"""One append waiting for its batch: timestamp, canonical text, stored form, the caller's future."""


def _append_batch(
    conn: sqlite3.Connection, *, key: tuple[str, str, str], batch: list[_Pending]
) -> list[EventRecord]:
    row = conn.execute(
        "SELECT last_seq, last_hash FROM event_streams WHERE tenant = ? AND ns = ? AND stream = ?", key
    ).fetchone()
    seq, prev = (0, ZERO_HASH) if row is None else (row[0], row[1])
    records: list[EventRecord] = []
    rows = []
    for ts, text, stored, _ in batch:
        seq += 1
        digest = chain_hash(prev, seq, ts, stored)
        rows.append((*key, seq, ts, text, prev, digest))
        records.append(EventRecord(seq, ts, stored, prev, digest))
        prev = digest
    if row is None:
        conn.execute(
            "INSERT INTO event_streams (tenant, ns, stream, last_seq, last_hash, anchor_seq, anchor_hash)"
            " VALUES (?, ?, ?, ?, ?, 0, ?)",
            (*key, seq, prev, ZERO_HASH),
        )
    else:
        conn.execute(
            "UPDATE event_streams SET last_seq = ?, last_hash = ? WHERE tenant = ? AND ns = ? AND stream = ?",
            (seq, prev, *key),
        )
    conn.executemany(
        "INSERT INTO events (tenant, ns, stream, seq, ts, data, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    return records


def _settle(batch: list[_Pending], done: asyncio.Future[list[EventRecord]]) -> None:
    cancelled = done.cancelled()
    error = None if cancelled else done.exception()
    records = None if cancelled or error is not None else done.result()
    for i, item in enumerate(batch):
        fut = item[3]
        if fut.done():
            continue  # the caller gave up; its event is written all the same
        if cancelled:
            fut.cancel()
        elif error is not None:
            fut.set_exception(error)
        else:
            assert records is not None
            fut.set_result(records[i])


class SqliteEvents(Part, AppendMarks):
    """Per-(scope, stream) hash chains. The head row (last seq/hash, retention anchor) is read inside the
    write transaction, never cached, so appends from several processes extend one chain."""

    _pending: dict[tuple[str, str, str], list[_Pending]] | None = None

    async def append(self, scope: Scope, stream: str, data: JSON) -> EventRecord:
        return await self.append_nowait(scope, stream, data)

    def append_nowait(self, scope: Scope, stream: str, data: JSON) -> asyncio.Future[EventRecord]:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        text = _encode(data)
        stored = json.loads(text)  # callers get back exactly what read() will return (tuples become lists)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[EventRecord] = loop.create_future()
        # Appends requested in one pass of the event loop go to the writer together, one op per stream: the
        # chain's head is read and moved once for all of them.
        if self._pending is None:
            self._pending = {}
            loop.call_soon(self._flush)
        key = (tenant, ns, stream)
        self._pending.setdefault(key, []).append((self._now(), text, stored, fut))
        self._mark(key, fut)
        return fut

    def _flush(self) -> None:
        pending, self._pending = self._pending or {}, None
        for key, batch in pending.items():
            try:
                self._db.submit(partial(_append_batch, key=key, batch=batch)).add_done_callback(
                    partial(_settle, batch)
                )
            except Exception as exc:  # a closed store: every waiting caller gets the error
                for item in batch:
                    if not item[3].done():
                        item[3].set_exception(exc)

    async def read(
        self, scope: Scope, stream: str, after_seq: int = 0, limit: int = 100
    ) -> list[EventRecord]:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        check_count("after_seq", after_seq)
        check_count("limit", limit)
        await self._caught_up(tenant, ns, stream)
        sql = (
            "SELECT seq, ts, data, prev_hash, hash FROM events"
            " WHERE tenant = ? AND ns = ? AND stream = ? AND seq > ? ORDER BY seq LIMIT ?"
        )
        rows = await self._db.read(
            lambda c: c.execute(sql, (tenant, ns, stream, after_seq, limit)).fetchall()
        )
        out = []
        for seq, ts, raw, prev, digest in rows:
            try:
                out.append(EventRecord(seq, ts, loads_json(raw), prev, digest))
            except ValueError:
                # The log is evidence: a damaged entry stays where it is (verify() reports it) and readers
                # skip it rather than fail.
                logger.warning("skipping undecodable event %s#%s in scope (%r, %r)", stream, seq, tenant, ns)
        return out

    async def last_seq(self, scope: Scope, stream: str) -> int:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        await self._caught_up(tenant, ns, stream)
        sql = "SELECT last_seq FROM event_streams WHERE tenant = ? AND ns = ? AND stream = ?"
        row = await self._db.read(lambda c: c.execute(sql, (tenant, ns, stream)).fetchone())
        return 0 if row is None else int(row[0])

    async def verify(self, scope: Scope, stream: str) -> ChainCheck:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        key = (tenant, ns, stream)
        await self._caught_up(tenant, ns, stream)

        def check(conn: sqlite3.Connection) -> ChainCheck:
            with snapshot(conn):  # head and rows from the same commit
                row = conn.execute(
                    "SELECT last_seq, last_hash, anchor_seq, anchor_hash FROM event_streams"
                    " WHERE tenant = ? AND ns = ? AND stream = ?",
                    key,
                ).fetchone()
                head = None if row is None else StreamHead(*row)
                sql = (
                    "SELECT seq, ts, data, prev_hash, hash FROM events"
                    " WHERE tenant = ? AND ns = ? AND stream = ? ORDER BY seq"
                )
                with contextlib.closing(conn.execute(sql, key)) as cursor:
                    return verify_rows(head, cursor)

        return await self._db.read(check)

    async def streams(self, scope: Scope) -> list[str]:
        tenant, ns = check_scope(scope)
        sql = "SELECT stream FROM event_streams WHERE tenant = ? AND ns = ? ORDER BY stream"
        rows = await self._db.read(lambda c: c.execute(sql, (tenant, ns)).fetchall())
        return [row[0] for row in rows]
