"""PostgreSQL event log: hash-chained, append-only streams (chain rules in ``_chain``).

Appends group-commit per stream: the appends one store receives for a (scope, stream) while the previous
batch of that stream commits go out together as the next batch, in call order, so entries are chained in
the order they were appended (what the SQLite writer's FIFO gives) and a burst costs one transaction. A
batch locks the stream's head row (an upsert that creates it on first use), computes the hashes in Python
(the canonical JSON must be byte-for-byte what verification re-hashes), inserts the entries (pipelined)
and moves the head: appends from many nodes extend one gap-free chain.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from functools import partial

from ._chain import ZERO_HASH, StreamHead, chain_hash, verify_rows
from ._common import AppendMarks, check_count, check_name, check_scope, loads_json
from ._pg_common import Part, execute_many
from ._pg_engine import Conn, logger
from .base import JSON, ChainCheck, EventRecord, Scope

_LOCK_HEAD = """
INSERT INTO event_streams AS s (tenant, ns, stream, last_seq, last_hash, anchor_seq, anchor_hash)
VALUES (%s, %s, %s, 0, %s, 0, %s)
ON CONFLICT (tenant, ns, stream) DO UPDATE SET last_seq = s.last_seq
RETURNING last_seq, last_hash"""

_INSERT = """
INSERT INTO events (tenant, ns, stream, seq, ts, data, prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"""

_MOVE_HEAD = """
UPDATE event_streams SET last_seq = %s, last_hash = %s WHERE tenant = %s AND ns = %s AND stream = %s"""

MAX_BATCH = 500
"""Entries per transaction at most."""

_Key = tuple[str, str, str]


@dataclass(slots=True)
class _Pending:
    ts: float
    text: str
    stored: JSON
    future: asyncio.Future[EventRecord] = field(repr=False)


def _encode(data: JSON) -> str:
    """The stored form is the canonical form, so verification re-hashes exactly what was hashed."""
    try:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"event data is not JSON-serializable: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"event data is not valid JSON: {exc}") from None


async def _write(conn: Conn, *, key: _Key, batch: list[_Pending]) -> list[EventRecord]:
    cur = await conn.execute(_LOCK_HEAD, (*key, ZERO_HASH, ZERO_HASH))
    row = await cur.fetchone()
    assert row is not None
    seq, prev = int(row[0]), str(row[1])
    records, rows = [], []
    for item in batch:
        seq += 1
        digest = chain_hash(prev, seq, item.ts, item.stored)
        records.append(EventRecord(seq, item.ts, item.stored, prev, digest))
        rows.append((*key, seq, item.ts, item.text, prev, digest))
        prev = digest
    await execute_many(conn, _INSERT, rows)
    await conn.execute(_MOVE_HEAD, (seq, prev, *key))
    return records


class PgEvents(Part, AppendMarks):
    """Per-(scope, stream) hash chains; the head row is read under its row lock, never cached."""

    _queues: dict[_Key, list[_Pending]] | None = None
    _writers: dict[_Key, asyncio.Task[None]] | None = None

    async def append(self, scope: Scope, stream: str, data: JSON) -> EventRecord:
        # Shielded: a cancelled caller must not cancel the batch its entry is in (it may be written anyway,
        # as with any write whose caller gave up).
        return await asyncio.shield(self.append_nowait(scope, stream, data))

    def append_nowait(self, scope: Scope, stream: str, data: JSON) -> asyncio.Future[EventRecord]:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        text = _encode(data)
        stored = json.loads(text)  # callers get back exactly what read() will return (tuples become lists)
        key = (tenant, ns, stream)
        loop = asyncio.get_running_loop()
        if self._queues is None or self._writers is None:
            self._queues, self._writers = {}, {}
        pending = _Pending(self._now(), text, stored, loop.create_future())
        self._queues.setdefault(key, []).append(pending)
        if key not in self._writers:
            self._writers[key] = loop.create_task(self._write_stream(key))
        self._mark(key, pending.future)
        return pending.future

    async def _write_stream(self, key: _Key) -> None:
        queues, writers = self._queues, self._writers
        assert queues is not None and writers is not None
        try:
            while queue := queues.get(key):
                batch, rest = queue[:MAX_BATCH], queue[MAX_BATCH:]
                if rest:
                    queues[key] = rest
                else:
                    del queues[key]
                try:
                    records = await self._db.transaction(partial(_write, key=key, batch=batch))
                except BaseException as exc:
                    for item in batch:
                        if not item.future.done():
                            item.future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for item, record in zip(batch, records, strict=True):
                    if not item.future.done():
                        item.future.set_result(record)
        finally:
            del writers[key]

    async def drain(self) -> None:
        """Wait for every append requested so far (before close)."""
        while self._writers:
            await asyncio.gather(*self._writers.values(), return_exceptions=True)

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
            " WHERE tenant = %s AND ns = %s AND stream = %s AND seq > %s ORDER BY seq LIMIT %s"
        )
        out = []
        for seq, ts, raw, prev, digest in await self._db.fetchall(
            sql, (tenant, ns, stream, after_seq, limit)
        ):
            try:
                out.append(EventRecord(int(seq), float(ts), loads_json(raw), prev, digest))
            except ValueError:
                # The log is evidence: a damaged entry stays (verify() reports it); readers skip it.
                logger.warning("skipping undecodable event %s#%s in scope (%r, %r)", stream, seq, tenant, ns)
        return out

    async def last_seq(self, scope: Scope, stream: str) -> int:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        await self._caught_up(tenant, ns, stream)
        sql = "SELECT last_seq FROM event_streams WHERE tenant = %s AND ns = %s AND stream = %s"
        row = await self._db.fetchone(sql, (tenant, ns, stream))
        return 0 if row is None else int(row[0])

    async def verify(self, scope: Scope, stream: str) -> ChainCheck:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        key = (tenant, ns, stream)
        await self._caught_up(tenant, ns, stream)

        async def check(conn: Conn) -> ChainCheck:
            cur = await conn.execute(
                "SELECT last_seq, last_hash, anchor_seq, anchor_hash FROM event_streams"
                " WHERE tenant = %s AND ns = %s AND stream = %s",
                key,
            )
            row = await cur.fetchone()
            head = None if row is None else StreamHead(int(row[0]), row[1], int(row[2]), row[3])
            cur = await conn.execute(
                "SELECT seq, ts, data, prev_hash, hash FROM events"
                " WHERE tenant = %s AND ns = %s AND stream = %s ORDER BY seq",
                key,
            )
            entries = [(int(s), float(t), d, p, h) for s, t, d, p, h in await cur.fetchall()]
            return verify_rows(head, entries)

        return await self._db.snapshot(check)  # head and rows from one snapshot

    async def streams(self, scope: Scope) -> list[str]:
        tenant, ns = check_scope(scope)
        sql = "SELECT stream FROM event_streams WHERE tenant = %s AND ns = %s ORDER BY stream"
        return [row[0] for row in await self._db.fetchall(sql, (tenant, ns))]
