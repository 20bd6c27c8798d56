"""PostgreSQL event log: hash-chained, append-only streams (chain rules in ``_chain``).

An append locks its stream's head row (an upsert that creates it on first use), computes the next hash in
Python (the canonical JSON must be byte-for-byte what verification re-hashes) and writes the entry and the
new head in one statement, all in one transaction: appends from many connections and nodes extend one
gap-free chain.
"""

from __future__ import annotations

import json

from ._chain import ZERO_HASH, StreamHead, chain_hash, verify_rows
from ._common import check_count, check_name, check_scope, loads_json
from ._pg_common import Part
from ._pg_engine import Conn, logger
from .base import JSON, ChainCheck, EventRecord, Scope

_LOCK_HEAD = """
INSERT INTO event_streams AS s (tenant, ns, stream, last_seq, last_hash, anchor_seq, anchor_hash)
VALUES (%s, %s, %s, 0, %s, 0, %s)
ON CONFLICT (tenant, ns, stream) DO UPDATE SET last_seq = s.last_seq
RETURNING last_seq, last_hash"""

_WRITE = """
WITH entry AS (
    INSERT INTO events (tenant, ns, stream, seq, ts, data, prev_hash, hash)
    VALUES (%(tenant)s, %(ns)s, %(stream)s, %(seq)s, %(ts)s, %(data)s, %(prev)s, %(hash)s))
UPDATE event_streams SET last_seq = %(seq)s, last_hash = %(hash)s
WHERE tenant = %(tenant)s AND ns = %(ns)s AND stream = %(stream)s"""


def _encode(data: JSON) -> str:
    """The stored form is the canonical form, so verification re-hashes exactly what was hashed."""
    try:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"event data is not JSON-serializable: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"event data is not valid JSON: {exc}") from None


class PgEvents(Part):
    """Per-(scope, stream) hash chains; the head row is read under its row lock, never cached."""

    async def append(self, scope: Scope, stream: str, data: JSON) -> EventRecord:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        text = _encode(data)
        stored = json.loads(text)  # callers get back exactly what read() will return (tuples become lists)
        ts = self._now()

        async def op(conn: Conn) -> EventRecord:
            cur = await conn.execute(_LOCK_HEAD, (tenant, ns, stream, ZERO_HASH, ZERO_HASH))
            row = await cur.fetchone()
            assert row is not None
            seq, prev = int(row[0]) + 1, str(row[1])
            digest = chain_hash(prev, seq, ts, stored)
            params = {
                "tenant": tenant,
                "ns": ns,
                "stream": stream,
                "seq": seq,
                "ts": ts,
                "data": text,
                "prev": prev,
                "hash": digest,
            }
            await conn.execute(_WRITE, params)
            return EventRecord(seq, ts, stored, prev, digest)

        return await self._db.transaction(op)

    async def read(
        self, scope: Scope, stream: str, after_seq: int = 0, limit: int = 100
    ) -> list[EventRecord]:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        check_count("after_seq", after_seq)
        check_count("limit", limit)
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
        sql = "SELECT last_seq FROM event_streams WHERE tenant = %s AND ns = %s AND stream = %s"
        row = await self._db.fetchone(sql, (tenant, ns, stream))
        return 0 if row is None else int(row[0])

    async def verify(self, scope: Scope, stream: str) -> ChainCheck:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        key = (tenant, ns, stream)

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
