"""PostgreSQL checkpoints with group commit.

Saves requested while no commit is running go out together at the end of the current event-loop pass; saves
requested while a commit is running wait for it and go out as the next batch. One batch is one transaction
of pipelined upserts (psycopg's executemany sends them without waiting for each reply), so N actors
checkpointing at once cost about one round trip and one WAL flush. Several saves of one actor in a batch
collapse into the last. Only one batch is in flight at a time: a later save of an actor can never be
overwritten by an earlier one committing late.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from ._common import (
    check_checkpoint,
    check_fence,
    check_items,
    check_name,
    check_prefix,
    check_scope,
    item_arrays,
    merge_items,
)
from ._errors import StoreClosedError, fenced_out
from ._pg_common import Part, execute_many, prefix_clause
from ._pg_engine import Conn, logger
from .base import Checkpoint, Items, Scope

T = TypeVar("T")

_UPSERT = """
INSERT INTO checkpoints (tenant, ns, actor_id, state_version, data, updated_at)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (tenant, ns, actor_id) DO UPDATE SET state_version = excluded.state_version,
    data = excluded.data, updated_at = excluded.updated_at"""

_FENCE_OF = "SELECT fence FROM fences WHERE tenant = %s AND ns = %s AND actor_id = %s FOR SHARE"
"""A fenced save reads the actor's fence under a share lock: a claim raising it (which locks the row) commits
either before (the save sees the higher fence and is refused) or after the save (the claim reads its write)."""

_FENCE_RAISE = """
INSERT INTO fences (tenant, ns, actor_id, fence) VALUES (%s, %s, %s, %s)
ON CONFLICT (tenant, ns, actor_id) DO UPDATE SET fence = GREATEST(fences.fence, excluded.fence)
RETURNING fence"""

_ITEMS_OF = "FROM checkpoint_items i WHERE i.tenant = c.tenant AND i.ns = c.ns AND i.actor_id = c.actor_id"
_SELECT = f"""
SELECT c.state_version, c.data, c.updated_at,
    ARRAY(SELECT i.field {_ITEMS_OF} ORDER BY i.field, i.seq),
    ARRAY(SELECT i.data {_ITEMS_OF} ORDER BY i.field, i.seq)
FROM checkpoints c WHERE c.tenant = %s AND c.ns = %s AND c.actor_id = %s"""
"""The checkpoint and its items (append-only fields, in order) in one round trip."""

_ITEMS_CUT = "DELETE FROM checkpoint_items WHERE tenant = %s AND ns = %s AND actor_id = %s AND field = %s AND seq >= %s"
_ITEMS_INSERT = (
    "INSERT INTO checkpoint_items (tenant, ns, actor_id, field, seq, data) VALUES (%s, %s, %s, %s, %s, %s)"
)

_Key = tuple[str, str, str]
_Row = tuple[str, str, str, int, bytes, float, int | None, Items | None]
_Waiter = asyncio.Future[None] | Callable[[BaseException | None], None]


def _settle_each(
    waiters: list[tuple[_Key, _Waiter]], error: BaseException | None, refused: set[_Key]
) -> None:
    for key, w in waiters:
        _settle([w], fenced_out(key) if error is None and key in refused else error)


def _settle(waiters: list[_Waiter], error: BaseException | None) -> None:
    for w in waiters:
        if not isinstance(w, asyncio.Future):
            try:
                w(error)
            except Exception:  # one saver's bug must not keep the others of the batch waiting
                logger.exception("checkpoint callback failed")
        elif w.done():
            continue
        elif isinstance(error, asyncio.CancelledError):
            w.cancel()
        elif error is not None:
            w.set_exception(error)
        else:
            w.set_result(None)


class PgCheckpoints(Part):
    """Actor state snapshots; every saver returns once its save is committed."""

    _pending: dict[_Key, _Row] | None = None
    _waiters: list[tuple[_Key, _Waiter]] | None = None
    _writer: asyncio.Task[None] | None = None

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
        # One future per saver: a cancelled saver must not cancel the others' shared commit.
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._register(scope, actor_id, state_version, data, fence, fut, items)
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
        """Like ``save_nowait``, but ``callback(error)`` is called when the batch commits (error None) or
        fails, with no future of its own: the runtime's per-message checkpoint path. It must not raise."""
        self._register(scope, actor_id, state_version, data, fence, callback, items)

    def _register(
        self,
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
        loop = asyncio.get_running_loop()
        if not self._db.is_open:
            loop.call_soon(_settle, [waiter], StoreClosedError("the store is not open"))
            return
        if self._pending is None or self._waiters is None:
            self._pending, self._waiters = {}, []
            if self._writer is None:
                loop.call_soon(self._start_writer)
        key = (tenant, ns, actor_id)
        earlier = self._pending.get(key)
        if earlier is not None:  # collapsed into one save: their item changes too
            items = merge_items(earlier[7], items)
        self._pending[key] = (tenant, ns, actor_id, state_version, data, self._now(), fence, items)
        self._waiters.append((key, waiter))

    def _start_writer(self) -> None:
        if self._writer is None and self._pending:
            self._writer = asyncio.get_running_loop().create_task(self._write_batches())

    async def _write_batches(self) -> None:
        try:
            while self._pending:
                rows, waiters = list(self._pending.values()), self._waiters or []
                self._pending, self._waiters = None, None
                try:
                    refused = await self._db.transaction(partial(_write, rows=rows))
                except asyncio.CancelledError:
                    _settle_each(waiters, asyncio.CancelledError(), set())
                    raise
                except Exception as exc:
                    _settle_each(waiters, exc, set())
                else:
                    _settle_each(waiters, None, refused)
        finally:
            self._writer = None

    async def drain(self) -> None:
        """Commit every save requested so far (before close)."""
        if self._writer is None and self._pending:
            self._start_writer()
        while self._writer is not None:
            await asyncio.shield(self._writer)

    async def load(self, scope: Scope, actor_id: str) -> Checkpoint | None:
        tenant, ns = check_scope(scope)
        check_name("actor_id", actor_id)
        return _checkpoint(actor_id, await self._db.fetchone(_SELECT, (tenant, ns, actor_id)))

    async def load_with(
        self, scope: Scope, actor_id: str, reader: Callable[[], T]
    ) -> tuple[Checkpoint | None, T]:
        check_scope(scope)
        check_name("actor_id", actor_id)  # bad input is refused before the reader runs
        # The row comes over the network, not from a thread: the reader gets a worker thread beside it.
        checkpoint, extra = await asyncio.gather(self.load(scope, actor_id), asyncio.to_thread(reader))
        return checkpoint, extra

    async def claim(self, scope: Scope, actor_id: str, fence: int) -> Checkpoint | None:
        tenant, ns = check_scope(scope)
        check_name("actor_id", actor_id)
        check_fence(fence, optional=False)
        key = (tenant, ns, actor_id)
        held, row = await self._db.transaction(partial(_claim, key=key, fence=fence))
        if held > fence:
            raise fenced_out(key)
        return _checkpoint(actor_id, row)

    async def delete(self, scope: Scope, actor_id: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("actor_id", actor_id)
        deleted: bool = await self._db.transaction(partial(_delete, key=(tenant, ns, actor_id)))
        return deleted

    async def list(self, scope: Scope, prefix: str = "") -> list[str]:
        tenant, ns = check_scope(scope)
        check_prefix(prefix)
        where, bounds = prefix_clause("actor_id", prefix)
        sql = f"SELECT actor_id FROM checkpoints WHERE tenant = %s AND ns = %s{where} ORDER BY actor_id"
        return [row[0] for row in await self._db.fetchall(sql, (tenant, ns, *bounds))]


def _checkpoint(actor_id: str, row: Any) -> Checkpoint | None:
    if row is None:
        return None
    state_version, data, updated_at, fields, values = row
    items = item_arrays(zip(fields or (), values or (), strict=True))
    return Checkpoint(actor_id, int(state_version), bytes(data), float(updated_at), items)


async def _write(conn: Conn, *, rows: list[_Row]) -> set[_Key]:
    """Unfenced rows pipelined in one executemany; fenced ones one by one, to see which were refused. Then
    the item changes of every save not refused, pipelined too (cuts before inserts)."""
    await execute_many(conn, _UPSERT, [row[:6] for row in rows if row[6] is None])
    refused: set[_Key] = set()
    for row in rows:
        fence = row[6]
        if fence is None:
            continue
        key = (row[0], row[1], row[2])
        held = await (await conn.execute(_FENCE_OF, key)).fetchone()
        if held is not None and int(held[0]) > fence:
            refused.add(key)
        else:
            await conn.execute(_UPSERT, row[:6])
    cuts: list[tuple[Any, ...]] = []
    inserts: list[tuple[Any, ...]] = []
    for row in rows:
        key = (row[0], row[1], row[2])
        if not row[7] or key in refused:
            continue
        for name, start, values in row[7]:
            cuts.append((*key, name, start))
            inserts.extend((*key, name, start + i, v) for i, v in enumerate(values))
    await execute_many(conn, _ITEMS_CUT, cuts)
    await execute_many(conn, _ITEMS_INSERT, inserts)
    return refused


async def _delete(conn: Conn, *, key: _Key) -> bool:
    await conn.execute("DELETE FROM checkpoint_items WHERE tenant = %s AND ns = %s AND actor_id = %s", key)
    cur = await conn.execute("DELETE FROM checkpoints WHERE tenant = %s AND ns = %s AND actor_id = %s", key)
    return cur.rowcount > 0


async def _claim(conn: Conn, *, key: _Key, fence: int) -> tuple[int, Any]:
    cur = await conn.execute(_FENCE_RAISE, (*key, fence))
    row = await cur.fetchone()
    assert row is not None
    held = int(row[0])
    if held > fence:
        return held, None
    cur = await conn.execute(_SELECT, key)
    return held, await cur.fetchone()
