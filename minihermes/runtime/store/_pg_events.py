"""PostgreSQL event log: hash-chained, append-only streams (chain rules in ``_chain``, sealing in ``_sealing``).

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
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from ._anchors import AnchorKey, anchor_pins, check_anchor
from ._chain import (
    ERASURE,
    ROW_COLUMNS,
    ZERO_HASH,
    Entry,
    Erasures,
    Legacy,
    Row,
    StreamHead,
    chain_hash,
    chain_hash_v2,
    check_kind,
    check_subjects,
    content_digest,
    erasable,
    erasure_record,
    legacy_selection,
    rows_of,
    verify_rows,
)
from ._common import AppendMarks, check_count, check_name, check_scope
from ._pg_common import Part, execute_many
from ._pg_engine import Conn, logger
from ._sealing import READ_COLUMNS, new_key, open_row, seal, subject_list
from .base import JSON, ChainCheck, Erasure, EventRecord, Scope

_LOCK_HEAD = """
INSERT INTO event_streams AS s (tenant, ns, stream, last_seq, last_hash, anchor_seq, anchor_hash)
VALUES (%s, %s, %s, 0, %s, 0, %s)
ON CONFLICT (tenant, ns, stream) DO UPDATE SET last_seq = s.last_seq
RETURNING last_seq, last_hash"""

_INSERT = """
INSERT INTO events (tenant, ns, stream, seq, ts, data, prev_hash, hash, v, kind, key_id, body, digest)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"""

_MOVE_HEAD = """
UPDATE event_streams SET last_seq = %s, last_hash = %s WHERE tenant = %s AND ns = %s AND stream = %s"""

_WHERE = "tenant = %s AND ns = %s AND stream = %s"

MAX_BATCH = 500
"""Entries per transaction at most."""

Key = tuple[str, str, str]


def _encode(data: JSON) -> str:
    """The stored form is the canonical form, so verification re-hashes exactly what was hashed."""
    try:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"event data is not JSON-serializable: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"event data is not valid JSON: {exc}") from None


async def _key_for(conn: Conn, key: Key, subjects: str) -> tuple[int, bytes]:
    select = f"SELECT key_id, key FROM event_keys WHERE {_WHERE} AND subjects = %s"
    row = await (await conn.execute(select, (*key, subjects))).fetchone()
    if row is not None:
        return int(row[0]), bytes(row[1])
    cur = await conn.execute(
        "INSERT INTO event_keys (tenant, ns, stream, subjects, key) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (tenant, ns, stream, subjects) DO NOTHING RETURNING key_id, key",
        (*key, subjects, new_key()),
    )
    made = await cur.fetchone()
    if made is None:  # another node made it meanwhile
        made = await (await conn.execute(select, (*key, subjects))).fetchone()
        assert made is not None
        return int(made[0]), bytes(made[1])
    await execute_many(
        conn,
        "INSERT INTO event_key_subjects (tenant, ns, stream, subject, key_id) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        [(*key, subject, made[0]) for subject in subject_list(subjects)],
    )
    return int(made[0]), bytes(made[1])


async def append_entries(conn: Conn, key: Key, entries: Sequence[Entry]) -> list[EventRecord]:
    """Chain ``entries`` onto the stream in the caller's transaction (the head row locked first)."""
    cur = await conn.execute(_LOCK_HEAD, (*key, ZERO_HASH, ZERO_HASH))
    row = await cur.fetchone()
    assert row is not None
    seq, prev = int(row[0]), str(row[1])
    records: list[EventRecord] = []
    rows: list[tuple[Any, ...]] = []
    keys: dict[str, tuple[int, bytes]] = {}
    for entry in entries:
        seq += 1
        if entry.kind is None and entry.subjects is None:
            digest = chain_hash(prev, seq, entry.ts, entry.stored)
            rows.append((*key, seq, entry.ts, entry.text, prev, digest, 1, "", None, None, None))
            records.append(EventRecord(seq, entry.ts, entry.stored, prev, digest))
        else:
            kind, key_id, body, text = entry.kind or "", None, None, entry.text
            if entry.subjects is None:
                content = content_digest(text.encode("utf-8"))
            else:
                if entry.subjects not in keys:
                    keys[entry.subjects] = await _key_for(conn, key, entry.subjects)
                key_id, secret = keys[entry.subjects]
                body = seal(secret, key, seq, key_id, text.encode("utf-8"))
                content, text = content_digest(body), ""
            digest = chain_hash_v2(prev, seq, entry.ts, kind, key_id, content)
            rows.append((*key, seq, entry.ts, text, prev, digest, 2, kind, key_id, body, content))
            records.append(EventRecord(seq, entry.ts, entry.stored, prev, digest, kind, 2))
        prev = digest
    await execute_many(conn, _INSERT, rows)
    await conn.execute(_MOVE_HEAD, (seq, prev, *key))
    return records


async def append_erasure(conn: Conn, key: Key, ts: float, record: JSON) -> EventRecord:
    text = _encode(record)
    return (await append_entries(conn, key, [Entry(ts, text, json.loads(text), ERASURE)]))[0]


async def blank_content(
    conn: Conn, key: Key, rows: Sequence[Row], reason: str, kinds: dict[int, str] | None = None
) -> tuple[list[int], list[Legacy], int]:
    """As ``_sqlite_events.blank_content``: blank intact entries, count the rest as evidence."""
    seqs, legacy, kept = erasable(rows, kinds)
    await execute_many(
        conn,
        f"UPDATE events SET data = '', body = NULL, erased = %s WHERE {_WHERE} AND seq = %s",
        [(reason, *key, seq) for seq in seqs],
    )
    await execute_many(
        conn,
        f"UPDATE events SET data = '', erased = %s, kind = %s WHERE {_WHERE} AND seq = %s",
        [(reason, kind, *key, seq) for seq, _, _, kind in legacy],
    )
    return seqs, legacy, kept


async def _forget(
    conn: Conn,
    *,
    key: Key,
    subjects: list[str] | None,
    legacy: Callable[[JSON], str | None] | None,
    now: float,
) -> Erasure:
    # The head row first: appends of this stream wait for the forget (and see its deleted keys).
    await conn.execute(f"SELECT 1 FROM event_streams WHERE {_WHERE} FOR UPDATE", key)
    if subjects is None:
        cur = await conn.execute(f"SELECT key_id FROM event_keys WHERE {_WHERE}", key)
    else:
        cur = await conn.execute(
            f"SELECT DISTINCT key_id FROM event_key_subjects WHERE {_WHERE} AND subject = ANY(%s)",
            (*key, subjects),
        )
    key_ids = sorted(int(r[0]) for r in await cur.fetchall())
    forgotten = 0
    if key_ids:
        cur = await conn.execute(
            f"SELECT COUNT(*) FROM events WHERE {_WHERE} AND key_id = ANY(%s) AND body IS NOT NULL",
            (*key, key_ids),
        )
        count = await cur.fetchone()
        forgotten = int(count[0]) if count else 0
        await conn.execute(
            f"DELETE FROM event_key_subjects WHERE {_WHERE} AND key_id = ANY(%s)", (*key, key_ids)
        )
        await conn.execute(f"DELETE FROM event_keys WHERE {_WHERE} AND key_id = ANY(%s)", (*key, key_ids))
    plain: list[Row] = []
    if subjects is None:
        sql = f"SELECT {ROW_COLUMNS} FROM events WHERE {_WHERE} AND data <> '' AND kind <> %s ORDER BY seq"
        plain = list(rows_of(await (await conn.execute(sql, (*key, ERASURE))).fetchall()))
    elif legacy is not None:
        sql = f"SELECT {ROW_COLUMNS} FROM events WHERE {_WHERE} AND v = 1 AND data <> '' ORDER BY seq"
        plain = list(rows_of(await (await conn.execute(sql, key)).fetchall()))
    plain, kinds = legacy_selection(legacy, plain, everything=subjects is None)
    seqs, old, kept = await blank_content(conn, key, plain, "forgotten", kinds)
    if seqs or old:
        await append_erasure(conn, key, now, erasure_record("forgotten", seqs, old))
    return Erasure(forgotten + len(seqs) + len(old), len(key_ids), len(old), kept)


async def read_head(conn: Conn, key: Key) -> StreamHead | None:
    cur = await conn.execute(
        f"SELECT last_seq, last_hash, anchor_seq, anchor_hash FROM event_streams WHERE {_WHERE}", key
    )
    row = await cur.fetchone()
    return None if row is None else StreamHead(int(row[0]), row[1], int(row[2]), row[3])


async def stored_anchors(conn: Conn, key: Key) -> list[dict[str, Any]]:
    cur = await conn.execute(f"SELECT body FROM event_anchors WHERE {_WHERE} ORDER BY id", key)
    return [json.loads(row[0]) for row in await cur.fetchall()]


async def write_anchor(conn: Conn, key: Key, signer: AnchorKey, now: float, trimmed: JSON) -> None:
    """Sign and keep the anchor of a trim of stream ``key`` that just ran in this transaction (the key is
    loaded beforehand, off the event loop: ``AnchorKey.private``)."""
    head = await read_head(conn, key)
    assert head is not None
    anchor = signer.sign(
        {
            "tenant": key[0],
            "ns": key[1],
            "stream": key[2],
            "seq": head.last_seq,
            "hash": head.last_hash,
            "base_seq": head.anchor_seq,
            "base_hash": head.anchor_hash,
            "time": now,
            "trimmed": trimmed,
        }
    )
    await conn.execute(
        "INSERT INTO event_anchors (tenant, ns, stream, at, body) VALUES (%s, %s, %s, %s, %s)",
        (*key, now, json.dumps(anchor, sort_keys=True, separators=(",", ":"))),
    )


class PgEvents(Part, AppendMarks):
    """Per-(scope, stream) hash chains; the head row is read under its row lock, never cached."""

    _queues: dict[Key, list[Entry]] | None = None
    _writers: dict[Key, asyncio.Task[None]] | None = None

    async def append(
        self,
        scope: Scope,
        stream: str,
        data: JSON,
        *,
        kind: str | None = None,
        subjects: Sequence[str] | None = None,
    ) -> EventRecord:
        # Shielded: a cancelled caller must not cancel the batch its entry is in (it may be written anyway,
        # as with any write whose caller gave up).
        return await asyncio.shield(self.append_nowait(scope, stream, data, kind=kind, subjects=subjects))

    def append_nowait(
        self,
        scope: Scope,
        stream: str,
        data: JSON,
        *,
        kind: str | None = None,
        subjects: Sequence[str] | None = None,
    ) -> asyncio.Future[EventRecord]:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        text = _encode(data)
        entry = Entry(
            self._now(),
            text,
            json.loads(text),  # callers get back exactly what read() will return (tuples become lists)
            None if kind is None else check_kind(kind),
            None if subjects is None else check_subjects(subjects),
        )
        key = (tenant, ns, stream)
        loop = asyncio.get_running_loop()
        if self._queues is None or self._writers is None:
            self._queues, self._writers = {}, {}
        entry.future = future = loop.create_future()
        self._queues.setdefault(key, []).append(entry)
        if key not in self._writers:
            self._writers[key] = loop.create_task(self._write_stream(key))
        self._mark(key, future)
        return future

    async def _write_stream(self, key: Key) -> None:
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
                    records = await self._db.transaction(partial(append_entries, key=key, entries=batch))
                except BaseException as exc:
                    for item in batch:
                        if item.future is not None and not item.future.done():
                            item.future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for item, record in zip(batch, records, strict=True):
                    if item.future is not None and not item.future.done():
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
            f"SELECT {READ_COLUMNS} FROM events AS e LEFT JOIN event_keys AS k ON k.key_id = e.key_id"
            " WHERE e.tenant = %s AND e.ns = %s AND e.stream = %s AND e.seq > %s ORDER BY e.seq LIMIT %s"
        )
        out = []
        key = (tenant, ns, stream)
        for row in await self._db.fetchall(sql, (tenant, ns, stream, after_seq, limit)):
            try:
                out.append(open_row(key, row))
            except ValueError:
                # The log is evidence: a damaged entry stays (verify() reports it); readers skip it.
                logger.warning(
                    "skipping undecodable event %s#%s in scope (%r, %r)", stream, row[0], tenant, ns
                )
        return out

    async def last_seq(self, scope: Scope, stream: str) -> int:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        await self._caught_up(tenant, ns, stream)
        sql = "SELECT last_seq FROM event_streams WHERE tenant = %s AND ns = %s AND stream = %s"
        row = await self._db.fetchone(sql, (tenant, ns, stream))
        return 0 if row is None else int(row[0])

    async def verify(self, scope: Scope, stream: str, *, anchor: dict[str, Any] | None = None) -> ChainCheck:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        key = (tenant, ns, stream)
        given = None if anchor is None else check_anchor(anchor)
        if given is not None and (given["tenant"], given["ns"], given["stream"]) != key:
            raise ValueError("the anchor is for another scope or stream")
        await self._caught_up(tenant, ns, stream)

        async def check(conn: Conn) -> ChainCheck:
            head = await read_head(conn, key)
            pins: dict[int, str] = {}
            if given is not None:
                pins, failed = anchor_pins(head, given, await stored_anchors(conn, key))
                if failed is not None:
                    return failed
            erasures = Erasures()
            sql = f"SELECT {ROW_COLUMNS} FROM events WHERE {_WHERE} AND kind = %s ORDER BY seq"
            for row in rows_of(await (await conn.execute(sql, (*key, ERASURE))).fetchall()):
                erasures.add(row)
            cur = await conn.execute(f"SELECT {ROW_COLUMNS} FROM events WHERE {_WHERE} ORDER BY seq", key)
            result = verify_rows(head, rows_of(await cur.fetchall()), erasures, pins)
            return result if given is None else replace(result, anchored=True)

        return await self._db.snapshot(check)  # head and rows from one snapshot

    async def streams(self, scope: Scope) -> list[str]:
        tenant, ns = check_scope(scope)
        sql = "SELECT stream FROM event_streams WHERE tenant = %s AND ns = %s ORDER BY stream"
        return [row[0] for row in await self._db.fetchall(sql, (tenant, ns))]

    async def forget(
        self,
        scope: Scope,
        stream: str,
        subjects: Sequence[str] | None,
        *,
        legacy: Callable[[JSON], str | None] | None = None,
    ) -> Erasure:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        names = None if subjects is None else subject_list(check_subjects(subjects))
        key = (tenant, ns, stream)
        await self._caught_up(tenant, ns, stream)
        op = partial(_forget, key=key, subjects=names, legacy=legacy, now=self._now())
        return await self._db.transaction(op)

    async def anchors(self, scope: Scope, stream: str) -> list[dict[str, Any]]:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        return await self._db.run(partial(stored_anchors, key=(tenant, ns, stream)))
