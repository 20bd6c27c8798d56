"""SQLite KV, blobs, checkpoints and quarantine: keyed records in one scope."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from ._common import (
    check_bytes,
    check_checkpoint,
    check_count,
    check_fence,
    check_items,
    check_limit,
    check_name,
    check_prefix,
    check_scope,
    check_text,
    check_ttl,
    dumps_json,
    item_arrays,
    loads_json,
    merge_items,
)
from ._errors import fenced_out
from ._sqlite_common import Corrupt, Part, insert_quarantine, prefix_clause
from .base import JSON, BlobInfo, Checkpoint, Items, KVEntry, QuarantinedRecord, Scope

log = logging.getLogger("minihermes.store")

_LIVE = "(expires_at IS NULL OR expires_at > ?)"

_KV_PUT = """
INSERT INTO kv (tenant, ns, key, value, version, expires_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?)
ON CONFLICT (tenant, ns, key) DO UPDATE SET
    version = CASE WHEN kv.expires_at IS NULL OR kv.expires_at > excluded.updated_at
                   THEN kv.version + 1 ELSE 1 END,
    value = excluded.value, expires_at = excluded.expires_at, updated_at = excluded.updated_at
RETURNING version"""

_KV_CREATE = """
INSERT INTO kv (tenant, ns, key, value, version, expires_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?)
ON CONFLICT (tenant, ns, key) DO UPDATE SET
    version = 1, value = excluded.value, expires_at = excluded.expires_at, updated_at = excluded.updated_at
WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= excluded.updated_at
RETURNING version"""

_KV_SWAP = f"""
UPDATE kv SET value = ?, version = version + 1, expires_at = ?, updated_at = ?
WHERE tenant = ? AND ns = ? AND key = ? AND version = ? AND {_LIVE}
RETURNING version"""

_KV_DELETE_EXACT = "DELETE FROM kv WHERE tenant = ? AND ns = ? AND key = ? AND version IS ? AND value IS ?"


class SqliteKV(Part):
    """KV with versions and TTL. Expired rows are invisible at once and purged by apply_retention."""

    async def get(self, scope: Scope, key: str) -> JSON | None:
        entry = await self.get_entry(scope, key)
        return None if entry is None else entry.value

    async def get_entry(self, scope: Scope, key: str) -> KVEntry | None:
        tenant, ns = check_scope(scope)
        check_name("key", key)
        now = self._now()
        sql = f"SELECT value, version, expires_at, updated_at FROM kv WHERE tenant = ? AND ns = ? AND key = ? AND {_LIVE}"
        row = await self._db.read(lambda c: c.execute(sql, (tenant, ns, key, now)).fetchone())
        if row is None:
            return None
        raw, version, expires_at, updated_at = row
        try:
            return KVEntry(_decode_kv(raw, version), version, expires_at, updated_at)
        except ValueError as exc:
            await self._quarantine([_corrupt_kv(tenant, ns, key, raw, version, str(exc))])
            return None

    async def put(self, scope: Scope, key: str, value: JSON, ttl: float | None = None) -> int:
        return await self._db.write(self.put_op(scope, key, value, ttl))

    def put_op(
        self, scope: Scope, key: str, value: JSON, ttl: float | None = None
    ) -> Callable[[sqlite3.Connection], int]:
        """``put`` checked now, as a function of the write connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        check_name("key", key)
        text = dumps_json(f"value for key {key!r}", value)
        ttl = check_ttl(ttl)
        now = self._now()
        expires_at = None if ttl is None else now + ttl
        params = (tenant, ns, key, text, expires_at, now)
        return lambda c: int(c.execute(_KV_PUT, params).fetchone()[0])

    async def cas(
        self, scope: Scope, key: str, expected_version: int | None, value: JSON, ttl: float | None = None
    ) -> int | None:
        tenant, ns = check_scope(scope)
        check_name("key", key)
        if expected_version is not None:
            check_count("expected_version", expected_version, minimum=1)
        text = dumps_json(f"value for key {key!r}", value)
        ttl = check_ttl(ttl)
        now = self._now()
        expires_at = None if ttl is None else now + ttl
        params: tuple[object, ...]
        if expected_version is None:
            sql, params = _KV_CREATE, (tenant, ns, key, text, expires_at, now)
        else:
            sql, params = _KV_SWAP, (text, expires_at, now, tenant, ns, key, expected_version, now)

        def op(conn: sqlite3.Connection) -> int | None:
            row = conn.execute(sql, params).fetchone()
            return None if row is None else int(row[0])

        return await self._db.write(op)

    async def delete(self, scope: Scope, key: str) -> bool:
        return await self._db.write(self.delete_op(scope, key))

    def delete_op(self, scope: Scope, key: str) -> Callable[[sqlite3.Connection], bool]:
        """``delete`` checked now, as a function of the write connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        check_name("key", key)
        now = self._now()
        sql = f"DELETE FROM kv WHERE tenant = ? AND ns = ? AND key = ? AND {_LIVE}"
        return lambda c: c.execute(sql, (tenant, ns, key, now)).rowcount > 0

    async def list(self, scope: Scope, prefix: str = "", limit: int | None = None) -> list[tuple[str, JSON]]:
        tenant, ns = check_scope(scope)
        check_prefix(prefix)
        limit = check_limit(limit)
        if limit == 0:
            return []
        where, bounds = prefix_clause("key", prefix)
        sql = f"SELECT key, value, version FROM kv WHERE tenant = ? AND ns = ?{where} AND {_LIVE} ORDER BY key LIMIT ?"
        now = self._now()
        params = (tenant, ns, *bounds, now, -1 if limit is None else limit)  # LIMIT -1: no limit
        while True:  # repeat only if corrupt rows were removed from under the LIMIT
            rows = await self._db.read(lambda c: c.execute(sql, params).fetchall())
            out: list[tuple[str, JSON]] = []
            corrupt: list[Corrupt] = []
            for key, raw, version in rows:
                try:
                    out.append((key, _decode_kv(raw, version)))
                except ValueError as exc:
                    corrupt.append(_corrupt_kv(tenant, ns, key, raw, version, str(exc)))
            if not corrupt:
                return out
            await self._quarantine(corrupt)


def _decode_kv(raw: object, version: object) -> JSON:
    if type(version) is not int:
        raise ValueError(f"stored version is {type(version).__name__}, not int")
    return loads_json(raw)


def _corrupt_kv(tenant: str, ns: str, key: str, raw: object, version: object, reason: str) -> Corrupt:
    return Corrupt("kv", tenant, ns, key, reason, raw, _KV_DELETE_EXACT, (tenant, ns, key, version, raw))


class SqliteBlobs(Part):
    """Binary objects with a content type. Stored inline: suited to the KB-to-MB sizes actors keep."""

    async def put(
        self, scope: Scope, name: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> None:
        tenant, ns = check_scope(scope)
        check_name("blob name", name)
        data = check_bytes("blob data", data)
        check_text("content_type", content_type)
        params = (tenant, ns, name, data, len(data), content_type, self._now())
        sql = """
            INSERT INTO blobs (tenant, ns, name, data, size, content_type, updated_at)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (tenant, ns, name) DO UPDATE SET data = excluded.data, size = excluded.size,
                content_type = excluded.content_type, updated_at = excluded.updated_at"""
        await self._db.write(lambda c: c.execute(sql, params))

    async def get(self, scope: Scope, name: str) -> bytes | None:
        tenant, ns = check_scope(scope)
        check_name("blob name", name)
        sql = "SELECT data FROM blobs WHERE tenant = ? AND ns = ? AND name = ?"
        row = await self._db.read(lambda c: c.execute(sql, (tenant, ns, name)).fetchone())
        if row is None:
            return None
        data = row[0]
        return data if isinstance(data, bytes) else str(data).encode("utf-8")

    async def delete(self, scope: Scope, name: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("blob name", name)
        sql = "DELETE FROM blobs WHERE tenant = ? AND ns = ? AND name = ?"
        count: int = await self._db.write(lambda c: c.execute(sql, (tenant, ns, name)).rowcount)
        return count > 0

    async def list(self, scope: Scope, prefix: str = "") -> list[BlobInfo]:
        tenant, ns = check_scope(scope)
        check_prefix(prefix)
        where, bounds = prefix_clause("name", prefix)
        sql = f"SELECT name, size, content_type, updated_at FROM blobs WHERE tenant = ? AND ns = ?{where} ORDER BY name"
        rows = await self._db.read(lambda c: c.execute(sql, (tenant, ns, *bounds)).fetchall())
        return [
            BlobInfo(name, size, content_type, updated_at) for name, size, content_type, updated_at in rows
        ]


_CKPT_DELETE_EXACT = """
DELETE FROM checkpoints WHERE tenant = ? AND ns = ? AND actor_id = ? AND state_version IS ? AND data IS ?"""


_CKPT_UPSERT = """
    INSERT INTO checkpoints (tenant, ns, actor_id, state_version, data, updated_at)
    VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (tenant, ns, actor_id) DO UPDATE SET state_version = excluded.state_version,
        data = excluded.data, updated_at = excluded.updated_at"""

_CKPT_UPSERT_FENCED = """
    INSERT INTO checkpoints (tenant, ns, actor_id, state_version, data, updated_at)
    SELECT ?, ?, ?, ?, ?, ?
    WHERE NOT EXISTS (SELECT 1 FROM fences WHERE tenant = ? AND ns = ? AND actor_id = ? AND fence > ?)
    ON CONFLICT (tenant, ns, actor_id) DO UPDATE SET state_version = excluded.state_version,
        data = excluded.data, updated_at = excluded.updated_at"""

_FENCE_RAISE = """
    INSERT INTO fences (tenant, ns, actor_id, fence) VALUES (?, ?, ?, ?)
    ON CONFLICT (tenant, ns, actor_id) DO UPDATE SET fence = excluded.fence WHERE excluded.fence > fences.fence"""

_CKPT_SELECT = (
    "SELECT state_version, data, updated_at FROM checkpoints WHERE tenant = ? AND ns = ? AND actor_id = ?"
)

_ITEMS_SELECT = "SELECT field, data FROM checkpoint_items WHERE tenant = ? AND ns = ? AND actor_id = ? ORDER BY field, seq"
_ITEMS_CUT = (
    "DELETE FROM checkpoint_items WHERE tenant = ? AND ns = ? AND actor_id = ? AND field = ? AND seq >= ?"
)
_ITEMS_INSERT = (
    "INSERT INTO checkpoint_items (tenant, ns, actor_id, field, seq, data) VALUES (?, ?, ?, ?, ?, ?)"
)
_ITEMS_DELETE = "DELETE FROM checkpoint_items WHERE tenant = ? AND ns = ? AND actor_id = ?"


def _read_checkpoint(c: sqlite3.Connection, key: tuple[str, str, str]) -> Any:
    """The checkpoint row and, when there is one, its items: ``(state_version, data, updated_at, items)``."""
    row = c.execute(_CKPT_SELECT, key).fetchone()
    if row is None:
        return None
    return (*row, item_arrays(c.execute(_ITEMS_SELECT, key)))


def _write_items(c: sqlite3.Connection, key: tuple[str, str, str], items: Items) -> None:
    """Replace each field's stored items from ``start`` on. Usually they are appended after the last stored
    one: the insert alone does it. If an item is stored at one of their places (the newest changed, the
    list replaced), the insert fails there (SQLite undoes just that statement) and the field is cut at
    ``start`` first."""
    for name, start, values in items:
        if values:
            rows = [(*key, name, start + i, v) for i, v in enumerate(values)]
            try:
                if len(rows) == 1:
                    c.execute(_ITEMS_INSERT, rows[0])
                else:
                    c.executemany(_ITEMS_INSERT, rows)
                continue
            except c.IntegrityError:  # the connection's own class: sqlite3's, or SQLCipher's
                pass
        c.execute(_ITEMS_CUT, (*key, name, start))
        if values:
            c.executemany(_ITEMS_INSERT, rows)


_Key = tuple[str, str, str]
T = TypeVar("T")
_Waiter = asyncio.Future[None] | Callable[[BaseException | None], None]


def _call(callback: Callable[[BaseException | None], None], error: BaseException | None) -> None:
    try:
        callback(error)
    except Exception:  # one saver's bug must not keep the others of the commit waiting
        log.exception("checkpoint callback failed")


def _notify(w: _Waiter, error: BaseException | None, cancelled: bool) -> None:
    if type(w) is not asyncio.Future:
        _call(w, asyncio.CancelledError() if cancelled else error)  # type: ignore[arg-type]
    elif w.done():
        return
    elif cancelled:
        w.cancel()
    elif error is not None:
        w.set_exception(error)
    else:
        w.set_result(None)


def _write_checkpoints(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> set[_Key]:
    """Upsert each row and apply its item changes; a fenced row (``fence`` not None) only where no higher
    fence is recorded. Returns the keys whose fenced save was refused."""
    refused: set[_Key] = set()
    for tenant, ns, actor_id, state_version, data, at, fence, items in rows:
        if fence is None:
            conn.execute(_CKPT_UPSERT, (tenant, ns, actor_id, state_version, data, at))
        elif not conn.execute(
            _CKPT_UPSERT_FENCED, (tenant, ns, actor_id, state_version, data, at, tenant, ns, actor_id, fence)
        ).rowcount:
            refused.add((tenant, ns, actor_id))
            continue
        if items:
            _write_items(conn, (tenant, ns, actor_id), items)
    return refused


class SqliteCheckpoints(Part):
    """Actor state snapshots. Every save requested during one pass of the event loop goes to the writer as
    one op, so many actors checkpointing at once cost one queue hop and one wake-up;
    several saves of one actor in a pass collapse into the last. Each caller returns once it is durable."""

    _pending: dict[_Key, tuple[Any, ...]] | None = None
    _waiters: list[tuple[_Key, _Waiter]] | None = None

    async def save(
        self,
        scope: Scope,
        actor_id: str,
        state_version: int,
        data: bytes,
        fence: int | None = None,
        items: Items | None = None,
    ) -> None:
        await self.save_nowait(scope, actor_id, state_version, data, fence, items)

    def save_nowait(
        self,
        scope: Scope,
        actor_id: str,
        state_version: int,
        data: bytes,
        fence: int | None = None,
        items: Items | None = None,
    ) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        # One future per saver: a cancelled saver must not cancel the others' shared commit.
        fut: asyncio.Future[None] = loop.create_future()
        self._register(loop, scope, actor_id, state_version, data, fence, fut, items)
        return fut

    def save_callback(
        self,
        scope: Scope,
        actor_id: str,
        state_version: int,
        data: bytes,
        callback: Callable[[BaseException | None], None],
        fence: int | None = None,
        items: Items | None = None,
    ) -> None:
        """Like ``save_nowait``, but ``callback(error)`` is called straight from the commit's completion (no
        future, no extra loop pass): the runtime's per-message checkpoint path. ``error`` is None once the
        save is durable. The callback must not raise."""
        self._register(
            asyncio.get_running_loop(), scope, actor_id, state_version, data, fence, callback, items
        )

    def _register(
        self,
        loop: asyncio.AbstractEventLoop,
        scope: Scope,
        actor_id: str,
        state_version: int,
        data: bytes,
        fence: int | None,
        waiter: _Waiter,
        items: Items | None = None,
    ) -> None:
        tenant, ns, data = check_checkpoint(scope, actor_id, state_version, data, fence)
        items = check_items(items)
        if self._pending is None or self._waiters is None:
            self._pending = {}
            self._waiters = []
            loop.call_soon(self._flush)
        key = (tenant, ns, actor_id)
        earlier = self._pending.get(key)
        if earlier is not None:  # collapsed into one save: their item changes too
            items = merge_items(earlier[7], items)
        self._pending[key] = (tenant, ns, actor_id, state_version, data, self._now(), fence, items)
        self._waiters.append((key, waiter))

    def _flush(self) -> None:
        rows = list((self._pending or {}).values())
        waiters = self._waiters or []
        self._pending = None
        self._waiters = None

        def done(write: asyncio.Future[Any]) -> None:
            cancelled = write.cancelled()
            error = None if cancelled else write.exception()
            refused: set[_Key] = set() if cancelled or error is not None else write.result()
            for key, w in waiters:
                _notify(w, fenced_out(key) if key in refused else error, cancelled)

        try:
            self._db.submit(lambda c: _write_checkpoints(c, rows)).add_done_callback(done)
        except Exception as e:  # a closed store: every waiting saver gets the error
            for _, w in waiters:
                _notify(w, e, False)

    def flush_pending(self) -> None:
        """Hand saves waiting for the end of this loop pass to the writer now (before close)."""
        if self._pending is not None:
            self._flush()

    async def load(self, scope: Scope, actor_id: str) -> Checkpoint | None:
        tenant, ns = check_scope(scope)
        check_name("actor_id", actor_id)
        row = await self._db.read(lambda c: _read_checkpoint(c, (tenant, ns, actor_id)))
        return await self._checkpoint(tenant, ns, actor_id, row)

    async def load_with(
        self, scope: Scope, actor_id: str, reader: Callable[[], T]
    ) -> tuple[Checkpoint | None, T]:
        tenant, ns = check_scope(scope)
        check_name("actor_id", actor_id)

        def op(c: sqlite3.Connection) -> tuple[Any, T]:  # one reader thread trip for both
            return _read_checkpoint(c, (tenant, ns, actor_id)), reader()

        row, extra = await self._db.read(op)
        return await self._checkpoint(tenant, ns, actor_id, row), extra

    async def claim(self, scope: Scope, actor_id: str, fence: int) -> Checkpoint | None:
        tenant, ns = check_scope(scope)
        check_name("actor_id", actor_id)
        check_fence(fence, optional=False)
        key = (tenant, ns, actor_id)

        def op(c: sqlite3.Connection) -> tuple[int, Any]:
            c.execute(_FENCE_RAISE, (*key, fence))
            (held,) = c.execute(
                "SELECT fence FROM fences WHERE tenant = ? AND ns = ? AND actor_id = ?", key
            ).fetchone()
            return held, _read_checkpoint(c, key) if held <= fence else None

        held, row = await self._db.write(op)
        if held > fence:
            raise fenced_out(key)
        return await self._checkpoint(tenant, ns, actor_id, row)

    async def _checkpoint(self, tenant: str, ns: str, actor_id: str, row: Any) -> Checkpoint | None:
        if row is None:
            return None
        state_version, data, updated_at, items = row
        if type(state_version) is int and isinstance(data, bytes):
            return Checkpoint(actor_id, state_version, data, updated_at, items)
        reason = "stored checkpoint has a non-integer state_version or non-binary data"
        params = (tenant, ns, actor_id, state_version, data)
        await self._quarantine(
            [Corrupt("checkpoint", tenant, ns, actor_id, reason, data, _CKPT_DELETE_EXACT, params)]
        )
        return None

    async def delete(self, scope: Scope, actor_id: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("actor_id", actor_id)
        sql = "DELETE FROM checkpoints WHERE tenant = ? AND ns = ? AND actor_id = ?"

        def op(c: sqlite3.Connection) -> int:
            c.execute(_ITEMS_DELETE, (tenant, ns, actor_id))
            count: int = c.execute(sql, (tenant, ns, actor_id)).rowcount
            return count

        return await self._db.write(op) > 0

    async def list(self, scope: Scope, prefix: str = "") -> list[str]:
        tenant, ns = check_scope(scope)
        check_prefix(prefix)
        where, bounds = prefix_clause("actor_id", prefix)
        sql = f"SELECT actor_id FROM checkpoints WHERE tenant = ? AND ns = ?{where} ORDER BY actor_id"
        rows = await self._db.read(lambda c: c.execute(sql, (tenant, ns, *bounds)).fetchall())
        return [row[0] for row in rows]


class SqliteQuarantine(Part):
    """Rows that could not be decoded, kept for an operator; listed newest first, across all scopes."""

    async def put(self, kind: str, scope: Scope, key: str, reason: str, data: bytes) -> None:
        check_name("kind", kind)
        tenant, ns = check_scope(scope)
        check_text("key", key)
        check_text("reason", reason)
        data = check_bytes("data", data)
        at = self._now()
        await self._db.write(lambda c: insert_quarantine(c, kind, tenant, ns, key, reason, data, at))

    async def list(self, limit: int = 100) -> list[QuarantinedRecord]:
        check_count("limit", limit)
        sql = "SELECT kind, tenant, ns, key, reason, data, at FROM quarantine ORDER BY id DESC LIMIT ?"
        rows = await self._db.read(lambda c: c.execute(sql, (limit,)).fetchall())
        return [
            QuarantinedRecord(kind, (tenant, ns), key, reason, bytes(data), at)
            for kind, tenant, ns, key, reason, data, at in rows
        ]
