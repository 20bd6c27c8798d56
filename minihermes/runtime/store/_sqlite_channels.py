"""SQLite channels: durable at-least-once queues with visibility timeouts, receipts and dead letters.

A message row without a receipt is ready. Receive stamps the receiver's receipt and pushes visible_at out by
the visibility timeout; a leased row whose visible_at has passed is ready again, so an expired lease needs no
sweeper. Partial indexes keep fresh and leased rows apart, so finding the oldest ready message never walks
past in-flight ones. Every state change runs in the writer (one transaction per batch under the database
write lock), which is what makes a receive atomic across threads and processes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ._common import (
    check_count,
    check_name,
    check_number,
    check_scope,
    check_text,
    dumps_json,
    loads_json,
    new_id,
)
from ._sqlite_common import Corrupt, Part, execute_each, prefix_clause
from ._sqlite_engine import snapshot
from .base import JSON, ChannelDepth, ChannelMessage, DeadLetter, Scope

DEFAULT_MAX_DELIVERIES = 5
DEFAULT_VISIBILITY_TIMEOUT = 30.0

_COLUMNS = "id, msg_id, msg_type, payload, deliveries, sent_at"
# Oldest first across both kinds of ready rows: fresh ones (ready index) and expired leases (leased index).
_RECEIVE = f"""
SELECT * FROM (SELECT {_COLUMNS} FROM channel_messages
               WHERE tenant = ? AND ns = ? AND channel = ? AND receipt IS NULL ORDER BY id LIMIT ?)
UNION ALL
SELECT * FROM (SELECT {_COLUMNS} FROM channel_messages
               WHERE tenant = ? AND ns = ? AND channel = ? AND receipt IS NOT NULL AND visible_at <= ?
               ORDER BY id LIMIT ?)
ORDER BY id LIMIT ?"""

_TO_DEAD = """
INSERT INTO channel_dead (msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries, reason,
                          sent_at, dead_at)
SELECT msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries, ?, sent_at, ?
FROM channel_messages WHERE id = ?"""


def _options(conn: sqlite3.Connection, key: tuple[str, str, str]) -> tuple[int, float]:
    # Read per operation (not cached) so a declare() from another process takes effect at once.
    row = conn.execute(
        "SELECT max_deliveries, visibility_timeout FROM channels WHERE tenant = ? AND ns = ? AND channel = ?",
        key,
    ).fetchone()
    return (DEFAULT_MAX_DELIVERIES, DEFAULT_VISIBILITY_TIMEOUT) if row is None else (row[0], row[1])


def _dead_letter(conn: sqlite3.Connection, row_id: int, reason: str, now: float) -> None:
    conn.execute(_TO_DEAD, (reason, now, row_id))
    conn.execute("DELETE FROM channel_messages WHERE id = ?", (row_id,))


def _max_reason(deliveries: int, max_deliveries: int) -> str:
    return f"delivered {deliveries} times (max_deliveries={max_deliveries})"


class SqliteChannels(Part):
    """Durable queues per (scope, channel); msg_ids are random and unique across scopes and processes."""

    async def declare(
        self, scope: Scope, channel: str, *, max_deliveries: int = 5, visibility_timeout: float = 30.0
    ) -> None:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_count("max_deliveries", max_deliveries, minimum=1)
        timeout = check_number("visibility_timeout", visibility_timeout)
        params = (tenant, ns, channel, max_deliveries, timeout)
        sql = """
            INSERT INTO channels (tenant, ns, channel, max_deliveries, visibility_timeout) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (tenant, ns, channel) DO UPDATE SET max_deliveries = excluded.max_deliveries,
                visibility_timeout = excluded.visibility_timeout"""
        await self._db.write(lambda c: c.execute(sql, params))

    async def send(
        self, scope: Scope, channel: str, msg_type: str, payload: JSON, *, dedup_key: str | None = None
    ) -> str:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_name("msg_type", msg_type)
        if dedup_key is not None:
            check_name("dedup_key", dedup_key)
        text = dumps_json("message payload", payload)
        msg_id = new_id()
        now = self._now()

        def op(conn: sqlite3.Connection) -> str:
            if dedup_key is not None:
                row = conn.execute(
                    "SELECT msg_id FROM channel_dedup WHERE tenant = ? AND ns = ? AND channel = ? AND dedup_key = ?",
                    (tenant, ns, channel, dedup_key),
                ).fetchone()
                if row is not None:
                    return str(row[0])
                conn.execute(
                    "INSERT INTO channel_dedup (tenant, ns, channel, dedup_key, msg_id, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (tenant, ns, channel, dedup_key, msg_id, now),
                )
            conn.execute(
                "INSERT INTO channel_messages (msg_id, tenant, ns, channel, msg_type, payload, dedup_key,"
                " deliveries, sent_at, visible_at, receipt) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, NULL)",
                (msg_id, tenant, ns, channel, msg_type, text, dedup_key, now, now),
            )
            return msg_id

        return await self._db.write(op)

    async def send_batch(self, scope: Scope, channel: str, messages: Sequence[tuple[str, JSON]]) -> list[str]:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        now = self._now()
        rows: list[tuple[Any, ...]] = []
        ids: list[str] = []
        for i, item in enumerate(messages):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(f"messages[{i}] must be a (msg_type, payload) pair")
            msg_type, payload = item
            check_name("msg_type", msg_type)
            msg_id = new_id()
            ids.append(msg_id)
            text = dumps_json("message payload", payload)
            rows.append((msg_id, tenant, ns, channel, msg_type, text, now, now))
        if not rows:
            return []

        sql = (
            "INSERT INTO channel_messages (msg_id, tenant, ns, channel, msg_type, payload, dedup_key,"
            " deliveries, sent_at, visible_at, receipt) VALUES (?, ?, ?, ?, ?, ?, NULL, 0, ?, ?, NULL)"
        )

        def op(conn: sqlite3.Connection) -> None:
            execute_each(conn, sql, rows)

        await self._db.write(op)
        return ids

    async def receive(
        self,
        scope: Scope,
        channel: str,
        *,
        max_messages: int = 1,
        visibility_timeout: float | None = None,
        receipt: str = "",
    ) -> list[ChannelMessage]:
        """Hands out up to max_messages. With receipt="" every call gets a fresh random receipt, so a stale
        ack after redelivery is refused even for anonymous consumers; pass a stable tag (e.g. a consumer
        incarnation id) to be able to release_receipt() everything it held after a crash."""
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_count("max_messages", max_messages, minimum=1)
        timeout = (
            None if visibility_timeout is None else check_number("visibility_timeout", visibility_timeout)
        )
        tag = new_id() if receipt == "" else check_name("receipt", receipt)
        now = self._now()
        key = (tenant, ns, channel)

        def op(conn: sqlite3.Connection) -> list[ChannelMessage]:
            options: tuple[int, float] | None = None
            out: list[ChannelMessage] = []
            while len(out) < max_messages:
                want = max_messages - len(out)
                rows = conn.execute(_RECEIVE, (*key, want, *key, now, want, want)).fetchall()
                if not rows:
                    break
                if options is None:  # only when there is something to hand out: empty polls stay cheap
                    options = _options(conn, key)
                max_deliveries, default_timeout = options
                visible_at = now + (default_timeout if timeout is None else timeout)
                handed: list[tuple[float, str, int]] = []
                for row_id, msg_id, msg_type, raw, deliveries, sent_at in rows:
                    if deliveries >= max_deliveries:
                        _dead_letter(conn, row_id, _max_reason(deliveries, max_deliveries), now)
                        continue
                    try:
                        payload = loads_json(raw)
                    except ValueError as exc:
                        delete = ("DELETE FROM channel_messages WHERE id = ?", (row_id,))
                        Corrupt("channel_message", tenant, ns, msg_id, str(exc), raw, *delete).move(conn, now)
                        continue
                    handed.append((visible_at, tag, row_id))
                    out.append(
                        ChannelMessage(msg_id, channel, msg_type, payload, deliveries + 1, sent_at, tag)
                    )
                execute_each(
                    conn,
                    "UPDATE channel_messages SET deliveries = deliveries + 1, visible_at = ?, receipt = ? WHERE id = ?",
                    handed,
                )
                if len(rows) < want:
                    break
            return out

        return await self._db.write(op)

    async def ack(self, scope: Scope, channel: str, msg_id: str, receipt: str | None = None) -> bool:
        """Delete the message. With a receipt, only if it is still the latest delivery's receipt."""
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_name("msg_id", msg_id)
        sql = "DELETE FROM channel_messages WHERE tenant = ? AND ns = ? AND channel = ? AND msg_id = ?"
        params: tuple[str, ...] = (tenant, ns, channel, msg_id)
        if receipt is not None:
            sql += " AND receipt = ?"
            params = (*params, check_name("receipt", receipt))
        count: int = await self._db.write(lambda c: c.execute(sql, params).rowcount)
        return count > 0

    async def ack_batch(
        self, scope: Scope, channel: str, msg_ids: Sequence[str], receipt: str | None = None
    ) -> int:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        ids = [check_name("msg_id", m) for m in msg_ids]
        if not ids:
            return 0
        sql = "DELETE FROM channel_messages WHERE tenant = ? AND ns = ? AND channel = ? AND msg_id = ?"
        rows: list[tuple[str, ...]] = [(tenant, ns, channel, m) for m in ids]
        if receipt is not None:
            tag = check_name("receipt", receipt)
            sql += " AND receipt = ?"
            rows = [(*r, tag) for r in rows]

        def op(conn: sqlite3.Connection) -> int:
            return execute_each(conn, sql, rows)

        count: int = await self._db.write(op)
        return count

    async def nack(
        self,
        scope: Scope,
        channel: str,
        msg_id: str,
        *,
        requeue: bool = True,
        reason: str = "",
        receipt: str | None = None,
    ) -> bool:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_name("msg_id", msg_id)
        check_text("reason", reason)
        sql = "SELECT id, deliveries FROM channel_messages WHERE tenant = ? AND ns = ? AND channel = ? AND msg_id = ?"
        params: tuple[str, ...] = (tenant, ns, channel, msg_id)
        if receipt is not None:
            sql += " AND receipt = ?"
            params = (*params, check_name("receipt", receipt))
        now = self._now()

        def op(conn: sqlite3.Connection) -> bool:
            row = conn.execute(sql, params).fetchone()
            if row is None:
                return False
            row_id, deliveries = row
            if not requeue:
                _dead_letter(conn, row_id, reason or "rejected by consumer", now)
                return True
            max_deliveries, _ = _options(conn, (tenant, ns, channel))
            if deliveries >= max_deliveries:
                _dead_letter(conn, row_id, reason or _max_reason(deliveries, max_deliveries), now)
            else:
                conn.execute(
                    "UPDATE channel_messages SET visible_at = ?, receipt = NULL WHERE id = ?", (now, row_id)
                )
            return True

        return await self._db.write(op)

    async def release_receipt(self, receipt: str) -> int:
        check_name("receipt", receipt)
        now = self._now()
        # Clearing the receipt also makes a late ack from the presumed-dead consumer fail.
        sql = (
            "UPDATE channel_messages SET visible_at = ?, receipt = NULL WHERE receipt = ? AND visible_at > ?"
        )
        count: int = await self._db.write(lambda c: c.execute(sql, (now, receipt, now)).rowcount)
        return count

    async def release_receipt_prefix(self, prefix: str) -> int:
        check_name("receipt prefix", prefix)  # "" would release every consumer's messages
        where, bounds = prefix_clause("receipt", prefix)
        now = self._now()
        sql = f"UPDATE channel_messages SET visible_at = ?, receipt = NULL WHERE visible_at > ?{where}"
        count: int = await self._db.write(lambda c: c.execute(sql, (now, now, *bounds)).rowcount)
        return count

    async def depth(self, scope: Scope, channel: str) -> ChannelDepth:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        key = (tenant, ns, channel)
        now = self._now()

        def count(conn: sqlite3.Connection) -> ChannelDepth:
            with snapshot(conn):
                ready, in_flight = conn.execute(
                    "SELECT COALESCE(SUM(receipt IS NULL OR visible_at <= ?), 0),"
                    " COALESCE(SUM(receipt IS NOT NULL AND visible_at > ?), 0)"
                    " FROM channel_messages WHERE tenant = ? AND ns = ? AND channel = ?",
                    (now, now, *key),
                ).fetchone()
                (dead,) = conn.execute(
                    "SELECT COUNT(*) FROM channel_dead WHERE tenant = ? AND ns = ? AND channel = ?", key
                ).fetchone()
            return ChannelDepth(ready, in_flight, dead)

        return await self._db.read(count)

    async def dead_letters(self, scope: Scope, channel: str, limit: int = 100) -> list[DeadLetter]:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_count("limit", limit)
        sql = (
            "SELECT id, msg_id, msg_type, payload, deliveries, reason, sent_at, dead_at FROM channel_dead"
            " WHERE tenant = ? AND ns = ? AND channel = ? ORDER BY id LIMIT ?"
        )
        while True:
            rows = await self._db.read(lambda c: c.execute(sql, (tenant, ns, channel, limit)).fetchall())
            out: list[DeadLetter] = []
            corrupt: list[Corrupt] = []
            for row_id, msg_id, msg_type, raw, deliveries, reason, sent_at, dead_at in rows:
                try:
                    payload = loads_json(raw)
                except ValueError as exc:
                    delete = ("DELETE FROM channel_dead WHERE id = ? AND payload IS ?", (row_id, raw))
                    corrupt.append(Corrupt("dead_letter", tenant, ns, msg_id, str(exc), raw, *delete))
                    continue
                out.append(
                    DeadLetter(msg_id, channel, msg_type, payload, deliveries, reason, sent_at, dead_at)
                )
            if not corrupt:
                return out
            await self._quarantine(corrupt)

    async def redrive(self, scope: Scope, channel: str, msg_id: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_name("msg_id", msg_id)
        key = (tenant, ns, channel, msg_id)
        now = self._now()

        def op(conn: sqlite3.Connection) -> bool:
            # Same msg_id (dedup entries keep pointing at it) but a new row id: it queues at the back.
            moved = conn.execute(
                "INSERT INTO channel_messages (msg_id, tenant, ns, channel, msg_type, payload, dedup_key,"
                " deliveries, sent_at, visible_at, receipt)"
                " SELECT msg_id, tenant, ns, channel, msg_type, payload, dedup_key, 0, sent_at, ?, NULL"
                " FROM channel_dead WHERE tenant = ? AND ns = ? AND channel = ? AND msg_id = ?",
                (now, *key),
            ).rowcount
            if moved:
                conn.execute(
                    "DELETE FROM channel_dead WHERE tenant = ? AND ns = ? AND channel = ? AND msg_id = ?", key
                )
            return moved > 0

        return await self._db.write(op)
