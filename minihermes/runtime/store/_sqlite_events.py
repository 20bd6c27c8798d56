"""SQLite event log: hash-chained, append-only streams (chain rules in ``_chain``, sealing in ``_sealing``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
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
from ._sealing import READ_COLUMNS, new_key, open_row, seal, subject_list
from ._sqlite_common import Part, logger
from ._sqlite_engine import snapshot
from .base import JSON, ChainCheck, Erasure, EventRecord, Scope

Key = tuple[str, str, str]
_IN_CHUNK = 500
"""Values per ``IN (...)``: well under SQLite's variable limit."""


def _encode(data: JSON) -> str:
    """The stored form is the canonical form, so verification re-hashes exactly what was hashed."""
    try:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"event data is not JSON-serializable: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"event data is not valid JSON: {exc}") from None


def _key_for(conn: sqlite3.Connection, key: Key, subjects: str) -> tuple[int, bytes]:
    row = conn.execute(
        "SELECT key_id, key FROM event_keys WHERE tenant = ? AND ns = ? AND stream = ? AND subjects = ?",
        (*key, subjects),
    ).fetchone()
    if row is not None:
        return int(row[0]), bytes(row[1])
    secret = new_key()
    cur = conn.execute(
        "INSERT INTO event_keys (tenant, ns, stream, subjects, key) VALUES (?, ?, ?, ?, ?)",
        (*key, subjects, secret),
    )
    key_id = cur.lastrowid
    assert key_id is not None
    conn.executemany(
        "INSERT INTO event_key_subjects (tenant, ns, stream, subject, key_id) VALUES (?, ?, ?, ?, ?)",
        [(*key, subject, key_id) for subject in subject_list(subjects)],
    )
    return key_id, secret


def append_entries(conn: sqlite3.Connection, key: Key, entries: Sequence[Entry]) -> list[EventRecord]:
    """Chain ``entries`` onto the stream in one transaction (the caller's)."""
    row = conn.execute(
        "SELECT last_seq, last_hash FROM event_streams WHERE tenant = ? AND ns = ? AND stream = ?", key
    ).fetchone()
    seq, prev = (0, ZERO_HASH) if row is None else (row[0], row[1])
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
                    keys[entry.subjects] = _key_for(conn, key, entry.subjects)
                key_id, secret = keys[entry.subjects]
                body = seal(secret, key, seq, key_id, text.encode("utf-8"))
                content, text = content_digest(body), ""
            digest = chain_hash_v2(prev, seq, entry.ts, kind, key_id, content)
            rows.append((*key, seq, entry.ts, text, prev, digest, 2, kind, key_id, body, content))
            records.append(EventRecord(seq, entry.ts, entry.stored, prev, digest, kind, 2))
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
        "INSERT INTO events (tenant, ns, stream, seq, ts, data, prev_hash, hash, v, kind, key_id, body, digest)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    return records


def append_erasure(conn: sqlite3.Connection, key: Key, ts: float, record: JSON) -> EventRecord:
    text = _encode(record)
    return append_entries(conn, key, [Entry(ts, text, json.loads(text), ERASURE)])[0]


@contextlib.contextmanager
def secure_delete(conn: sqlite3.Connection) -> Iterator[None]:
    """SQLite's secure_delete for what runs inside: freed cells and pages are overwritten with zeros, so
    deleted bytes do not linger in the file's free space (the connection's setting is restored after)."""
    (before,) = conn.execute("PRAGMA secure_delete").fetchone()
    conn.execute("PRAGMA secure_delete = ON")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA secure_delete = {int(before)}")


def _settle(batch: list[Entry], done: asyncio.Future[list[EventRecord]]) -> None:
    cancelled = done.cancelled()
    error = None if cancelled else done.exception()
    records = None if cancelled or error is not None else done.result()
    for i, item in enumerate(batch):
        fut = item.future
        if fut is None or fut.done():
            continue  # the caller gave up; its event is written all the same
        if cancelled:
            fut.cancel()
        elif error is not None:
            fut.set_exception(error)
        else:
            assert records is not None
            fut.set_result(records[i])


def _chunks(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(values), _IN_CHUNK):
        yield values[i : i + _IN_CHUNK]


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def blank_content(
    conn: sqlite3.Connection, key: Key, rows: Sequence[Row], reason: str, kinds: dict[int, str] | None = None
) -> tuple[list[int], list[Legacy], int]:
    """Blank the content of entries that are intact (format 1: their hash holds; format 2: their digest);
    returns (format-2 seqs, format-1 (seq, ts, hash)), and how many were left as they are (evidence)."""
    seqs, legacy, kept = erasable(rows, kinds)
    where = "WHERE tenant = ? AND ns = ? AND stream = ? AND seq = ?"
    conn.executemany(
        f"UPDATE events SET data = '', body = NULL, erased = ? {where}", [(reason, *key, seq) for seq in seqs]
    )
    conn.executemany(
        f"UPDATE events SET data = '', erased = ?, kind = ? {where}",
        [(reason, kind, *key, seq) for seq, _, _, kind in legacy],
    )
    return seqs, legacy, kept


def _forget(
    conn: sqlite3.Connection,
    *,
    key: Key,
    subjects: list[str] | None,
    legacy: Callable[[JSON], str | None] | None,
    now: float,
) -> Erasure:
    with secure_delete(conn):
        where = "tenant = ? AND ns = ? AND stream = ?"
        if subjects is None:
            key_ids = [r[0] for r in conn.execute(f"SELECT key_id FROM event_keys WHERE {where}", key)]
        else:
            found: set[int] = set()
            for chunk in _chunks(subjects):
                sql = f"SELECT key_id FROM event_key_subjects WHERE {where} AND subject IN ({_marks(chunk)})"
                found.update(r[0] for r in conn.execute(sql, (*key, *chunk)))
            key_ids = sorted(found)
        forgotten = 0
        for chunk in _chunks(key_ids):
            ids = _marks(chunk)
            (count,) = conn.execute(
                f"SELECT COUNT(*) FROM events WHERE {where} AND key_id IN ({ids}) AND body IS NOT NULL",
                (*key, *chunk),
            ).fetchone()
            forgotten += count
            conn.execute(
                f"DELETE FROM event_key_subjects WHERE {where} AND key_id IN ({ids})", (*key, *chunk)
            )
            conn.execute(f"DELETE FROM event_keys WHERE {where} AND key_id IN ({ids})", (*key, *chunk))
        plain: list[Row] = []
        if subjects is None:
            sql = f"SELECT {ROW_COLUMNS} FROM events WHERE {where} AND data != '' AND kind != ? ORDER BY seq"
            plain = list(rows_of(conn.execute(sql, (*key, ERASURE))))
        elif legacy is not None:
            sql = f"SELECT {ROW_COLUMNS} FROM events WHERE {where} AND v = 1 AND data != '' ORDER BY seq"
            plain = list(rows_of(conn.execute(sql, key)))
        plain, kinds = legacy_selection(legacy, plain, everything=subjects is None)
        seqs, old, kept = blank_content(conn, key, plain, "forgotten", kinds)
        if seqs or old:
            append_erasure(conn, key, now, erasure_record("forgotten", seqs, old))
    return Erasure(forgotten + len(seqs) + len(old), len(key_ids), len(old), kept)


def _truncate_wal(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the database and truncate it, so pages written before an erasure (a deleted key)
    do not linger in it. Best effort: a reader in the middle of a read makes it a partial checkpoint."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def read_head(conn: sqlite3.Connection, key: Key) -> StreamHead | None:
    row = conn.execute(
        "SELECT last_seq, last_hash, anchor_seq, anchor_hash FROM event_streams"
        " WHERE tenant = ? AND ns = ? AND stream = ?",
        key,
    ).fetchone()
    return None if row is None else StreamHead(*row)


def stored_anchors(conn: sqlite3.Connection, key: Key) -> list[dict[str, Any]]:
    sql = "SELECT body FROM event_anchors WHERE tenant = ? AND ns = ? AND stream = ? ORDER BY id"
    return [json.loads(row[0]) for row in conn.execute(sql, key)]


def write_anchor(conn: sqlite3.Connection, key: Key, signer: AnchorKey, now: float, trimmed: JSON) -> None:
    """Sign and keep the anchor of a trim of stream ``key`` that just ran in this transaction."""
    head = read_head(conn, key)
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
    conn.execute(
        "INSERT INTO event_anchors (tenant, ns, stream, at, body) VALUES (?, ?, ?, ?, ?)",
        (*key, now, json.dumps(anchor, sort_keys=True, separators=(",", ":"))),
    )


class SqliteEvents(Part, AppendMarks):
    """Per-(scope, stream) hash chains. The head row (last seq/hash, retention anchor) is read inside the
    write transaction, never cached, so appends from several processes extend one chain; so are subject keys
    (a key another process deleted is never used again)."""

    _pending: dict[Key, list[Entry]] | None = None

    async def append(
        self,
        scope: Scope,
        stream: str,
        data: JSON,
        *,
        kind: str | None = None,
        subjects: Sequence[str] | None = None,
    ) -> EventRecord:
        return await self.append_nowait(scope, stream, data, kind=kind, subjects=subjects)

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
            json.loads(text),  # callers get back exactly what read() returns (lists, not tuples)
            None if kind is None else check_kind(kind),
            None if subjects is None else check_subjects(subjects),
        )
        loop = asyncio.get_running_loop()
        entry.future = fut = loop.create_future()
        # Appends requested in one pass of the event loop go to the writer together, one op per stream: the
        # chain's head is read and moved once for all of them.
        if self._pending is None:
            self._pending = {}
            loop.call_soon(self._flush)
        key = (tenant, ns, stream)
        self._pending.setdefault(key, []).append(entry)
        self._mark(key, fut)
        return fut

    def _flush(self) -> None:
        pending, self._pending = self._pending or {}, None
        for key, batch in pending.items():
            try:
                self._db.submit(partial(append_entries, key=key, entries=batch)).add_done_callback(
                    partial(_settle, batch)
                )
            except Exception as exc:  # a closed store: every waiting caller gets the error
                for item in batch:
                    if item.future is not None and not item.future.done():
                        item.future.set_exception(exc)

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
            " WHERE e.tenant = ? AND e.ns = ? AND e.stream = ? AND e.seq > ? ORDER BY e.seq LIMIT ?"
        )
        rows = await self._db.read(
            lambda c: c.execute(sql, (tenant, ns, stream, after_seq, limit)).fetchall()
        )
        out = []
        key = (tenant, ns, stream)
        for row in rows:
            try:
                out.append(open_row(key, row))
            except ValueError:
                # The log is evidence: a damaged entry stays where it is (verify() reports it) and readers
                # skip it rather than fail.
                logger.warning(
                    "skipping undecodable event %s#%s in scope (%r, %r)", stream, row[0], tenant, ns
                )
        return out

    async def last_seq(self, scope: Scope, stream: str) -> int:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        await self._caught_up(tenant, ns, stream)
        sql = "SELECT last_seq FROM event_streams WHERE tenant = ? AND ns = ? AND stream = ?"
        row = await self._db.read(lambda c: c.execute(sql, (tenant, ns, stream)).fetchone())
        return 0 if row is None else int(row[0])

    async def verify(self, scope: Scope, stream: str, *, anchor: dict[str, Any] | None = None) -> ChainCheck:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        key = (tenant, ns, stream)
        given = None if anchor is None else check_anchor(anchor)
        if given is not None and (given["tenant"], given["ns"], given["stream"]) != key:
            raise ValueError("the anchor is for another scope or stream")
        await self._caught_up(tenant, ns, stream)

        def check(conn: sqlite3.Connection) -> ChainCheck:
            with snapshot(conn):  # head and rows from the same commit
                head = read_head(conn, key)
                pins: dict[int, str] = {}
                if given is not None:
                    pins, failed = anchor_pins(head, given, stored_anchors(conn, key))
                    if failed is not None:
                        return failed
                where = "WHERE tenant = ? AND ns = ? AND stream = ?"
                erasures = Erasures()
                sql = f"SELECT {ROW_COLUMNS} FROM events {where} AND kind = ? ORDER BY seq"
                for row in rows_of(conn.execute(sql, (*key, ERASURE))):
                    erasures.add(row)
                sql = f"SELECT {ROW_COLUMNS} FROM events {where} ORDER BY seq"
                with contextlib.closing(conn.execute(sql, key)) as cursor:
                    result = verify_rows(head, rows_of(cursor), erasures, pins)
                return result if given is None else replace(result, anchored=True)

        return await self._db.read(check)

    async def streams(self, scope: Scope) -> list[str]:
        tenant, ns = check_scope(scope)
        sql = "SELECT stream FROM event_streams WHERE tenant = ? AND ns = ? ORDER BY stream"
        rows = await self._db.read(lambda c: c.execute(sql, (tenant, ns)).fetchall())
        return [row[0] for row in rows]

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
        erasure = await self._db.write(op)
        await self._db.write(_truncate_wal, transactional=False)
        return erasure

    async def anchors(self, scope: Scope, stream: str) -> list[dict[str, Any]]:
        tenant, ns = check_scope(scope)
        check_name("stream", stream)
        return await self._db.read(lambda c: stored_anchors(c, (tenant, ns, stream)))
