"""PostgreSQL channels: durable at-least-once queues with visibility timeouts, receipts and dead letters.

A message row without a receipt is ready; receive stamps the receiver's receipt and pushes visible_at out by
the visibility timeout, and a leased row whose visible_at has passed is ready again (no sweeper). Receive is
one statement: it picks the oldest ready rows with ``FOR UPDATE SKIP LOCKED`` (concurrent receivers, on
this node or another, get different messages and never wait for each other), moves those that reached
max_deliveries to the dead-letter table and leases the rest.
"""

from __future__ import annotations

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
from ._pg_common import Corrupt, Part, check_no_nul, execute_many, prefix_clause
from ._pg_engine import Conn
from .base import JSON, ChannelDepth, ChannelMessage, DeadLetter, Scope

DEFAULT_MAX_DELIVERIES = 5
DEFAULT_VISIBILITY_TIMEOUT = 30.0

_KEY = "tenant = %(tenant)s AND ns = %(ns)s AND channel = %(channel)s"

_RECEIVE = f"""
WITH opts AS (
    SELECT COALESCE((SELECT max_deliveries FROM channels WHERE {_KEY}), {DEFAULT_MAX_DELIVERIES}) AS md,
           COALESCE(%(timeout)s::float8, (SELECT visibility_timeout FROM channels WHERE {_KEY}),
                    {DEFAULT_VISIBILITY_TIMEOUT}) AS vt
), picked AS (
    SELECT id FROM channel_messages
    WHERE {_KEY} AND (receipt IS NULL OR visible_at <= %(now)s)
    ORDER BY id LIMIT %(want)s FOR UPDATE SKIP LOCKED
), dead AS (
    DELETE FROM channel_messages m USING picked, opts
    WHERE m.id = picked.id AND m.deliveries >= opts.md
    RETURNING m.msg_id, m.tenant, m.ns, m.channel, m.msg_type, m.payload, m.dedup_key, m.deliveries,
              m.sent_at, opts.md
), buried AS (
    INSERT INTO channel_dead (msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries, reason,
                              sent_at, dead_at)
    SELECT msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries,
           format('delivered %%s times (max_deliveries=%%s)', deliveries, md), sent_at, %(now)s FROM dead
    RETURNING id
), handed AS (
    UPDATE channel_messages m
    SET deliveries = m.deliveries + 1, receipt = %(tag)s, visible_at = %(now)s + opts.vt
    FROM picked, opts WHERE m.id = picked.id AND m.deliveries < opts.md
    RETURNING m.id, m.msg_id, m.msg_type, m.payload, m.deliveries, m.sent_at
)
SELECT id, msg_id, msg_type, payload, deliveries, sent_at FROM handed
UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL FROM buried"""

_TO_DEAD = """
WITH gone AS (DELETE FROM channel_messages WHERE id = %s RETURNING *)
INSERT INTO channel_dead (msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries, reason,
                          sent_at, dead_at)
SELECT msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries, %s, sent_at, %s FROM gone"""

_INSERT = """
INSERT INTO channel_messages (msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries, sent_at,
                              visible_at, receipt)
VALUES (%s, %s, %s, %s, %s, %s, NULL, 0, %s, %s, NULL)"""

_SEND_DEDUP = """
WITH d AS (
    INSERT INTO channel_dedup (tenant, ns, channel, dedup_key, msg_id, created_at)
    VALUES (%(tenant)s, %(ns)s, %(channel)s, %(dedup)s, %(msg_id)s, %(now)s)
    ON CONFLICT DO NOTHING RETURNING msg_id
)
INSERT INTO channel_messages (msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries, sent_at,
                              visible_at, receipt)
SELECT msg_id, %(tenant)s, %(ns)s, %(channel)s, %(msg_type)s, %(payload)s, %(dedup)s, 0, %(now)s, %(now)s, NULL
FROM d RETURNING msg_id"""


async def _options(conn: Conn, tenant: str, ns: str, channel: str) -> tuple[int, float]:
    cur = await conn.execute(
        "SELECT max_deliveries, visibility_timeout FROM channels WHERE tenant = %s AND ns = %s AND channel = %s",
        (tenant, ns, channel),
    )
    row = await cur.fetchone()
    return (DEFAULT_MAX_DELIVERIES, DEFAULT_VISIBILITY_TIMEOUT) if row is None else (row[0], row[1])


def _max_reason(deliveries: int, max_deliveries: int) -> str:
    return f"delivered {deliveries} times (max_deliveries={max_deliveries})"


class PgChannels(Part):
    """Durable queues per (scope, channel); msg_ids are unique across scopes, processes and nodes."""

    async def declare(
        self, scope: Scope, channel: str, *, max_deliveries: int = 5, visibility_timeout: float = 30.0
    ) -> None:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_count("max_deliveries", max_deliveries, minimum=1)
        timeout = check_number("visibility_timeout", visibility_timeout)
        sql = """
            INSERT INTO channels (tenant, ns, channel, max_deliveries, visibility_timeout) VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (tenant, ns, channel) DO UPDATE SET max_deliveries = excluded.max_deliveries,
                visibility_timeout = excluded.visibility_timeout"""
        await self._db.rowcount(sql, (tenant, ns, channel, max_deliveries, timeout))

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
        if dedup_key is None:
            await self._db.rowcount(_INSERT, (msg_id, tenant, ns, channel, msg_type, text, now, now))
            return msg_id
        params = {
            "tenant": tenant,
            "ns": ns,
            "channel": channel,
            "dedup": dedup_key,
            "msg_id": msg_id,
            "now": now,
            "msg_type": msg_type,
            "payload": text,
        }
        lookup = "SELECT msg_id FROM channel_dedup WHERE tenant = %s AND ns = %s AND channel = %s AND dedup_key = %s"
        while True:
            # A concurrent send with the same key waits in ON CONFLICT until the first commits, then finds
            # its row; the loop only repeats if retention removed the key in between.
            row = await self._db.fetchone(_SEND_DEDUP, params)
            if row is not None:
                return str(row[0])
            row = await self._db.fetchone(lookup, (tenant, ns, channel, dedup_key))
            if row is not None:
                return str(row[0])

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
            rows.append(
                (msg_id, tenant, ns, channel, msg_type, dumps_json("message payload", payload), now, now)
            )
        if rows:
            await self._db.transaction(lambda conn: execute_many(conn, _INSERT, rows))
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
        """Hands out up to max_messages, oldest first. With receipt="" every call gets a fresh receipt."""
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_count("max_messages", max_messages, minimum=1)
        timeout = (
            None if visibility_timeout is None else check_number("visibility_timeout", visibility_timeout)
        )
        tag = new_id() if receipt == "" else check_name("receipt", receipt)
        now = self._now()
        params: dict[str, Any] = {
            "tenant": tenant,
            "ns": ns,
            "channel": channel,
            "timeout": timeout,
            "now": now,
            "tag": tag,
        }
        out: list[ChannelMessage] = []
        while len(out) < max_messages:
            params["want"] = want = max_messages - len(out)
            rows = await self._db.fetchall(_RECEIVE, params)
            handed = sorted((r for r in rows if r[0] is not None), key=lambda r: int(r[0]))
            corrupt: list[Corrupt] = []
            for row_id, msg_id, msg_type, raw, deliveries, sent_at in handed:
                try:
                    payload = loads_json(raw)
                except ValueError as exc:
                    delete = ("DELETE FROM channel_messages WHERE id = %s AND payload = %s", (row_id, raw))
                    corrupt.append(Corrupt("channel_message", tenant, ns, msg_id, str(exc), raw, *delete))
                    continue
                out.append(ChannelMessage(msg_id, channel, msg_type, payload, deliveries, sent_at, tag))
            await self._quarantine(corrupt)
            # Stop unless some picked rows were dead-lettered or quarantined instead of handed out.
            if len(rows) < want or (len(rows) == len(handed) and not corrupt):
                break
        return out

    async def ack(self, scope: Scope, channel: str, msg_id: str, receipt: str | None = None) -> bool:
        """Delete the message. With a receipt, only if it is still the latest delivery's receipt."""
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_name("msg_id", msg_id)
        sql = "DELETE FROM channel_messages WHERE tenant = %s AND ns = %s AND channel = %s AND msg_id = %s"
        params: tuple[str, ...] = (tenant, ns, channel, msg_id)
        if receipt is not None:
            sql += " AND receipt = %s"
            params = (*params, check_name("receipt", receipt))
        return await self._db.rowcount(sql, params) > 0

    async def ack_batch(
        self, scope: Scope, channel: str, msg_ids: Sequence[str], receipt: str | None = None
    ) -> int:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        ids = [check_name("msg_id", m) for m in msg_ids]
        if not ids:
            return 0
        sql = (
            "DELETE FROM channel_messages WHERE tenant = %s AND ns = %s AND channel = %s AND msg_id = ANY(%s)"
        )
        params: tuple[Any, ...] = (tenant, ns, channel, ids)
        if receipt is not None:
            sql += " AND receipt = %s"
            params = (*params, check_name("receipt", receipt))
        return await self._db.rowcount(sql, params)

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
        check_no_nul("reason", check_text("reason", reason))
        sql = "SELECT id, deliveries FROM channel_messages WHERE tenant = %s AND ns = %s AND channel = %s AND msg_id = %s"
        params: tuple[str, ...] = (tenant, ns, channel, msg_id)
        if receipt is not None:
            sql += " AND receipt = %s"
            params = (*params, check_name("receipt", receipt))
        sql += " FOR UPDATE"
        now = self._now()

        async def op(conn: Conn) -> bool:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
            if row is None:
                return False
            row_id, deliveries = row
            if not requeue:
                await conn.execute(_TO_DEAD, (row_id, reason or "rejected by consumer", now))
                return True
            max_deliveries, _ = await _options(conn, tenant, ns, channel)
            if deliveries >= max_deliveries:
                dead_reason = reason or _max_reason(deliveries, max_deliveries)
                await conn.execute(_TO_DEAD, (row_id, dead_reason, now))
            else:
                await conn.execute(
                    "UPDATE channel_messages SET visible_at = %s, receipt = NULL WHERE id = %s", (now, row_id)
                )
            return True

        return await self._db.transaction(op)

    async def release_receipt(self, receipt: str) -> int:
        check_name("receipt", receipt)
        now = self._now()
        # Clearing the receipt also makes a late ack from the presumed-dead consumer fail.
        sql = "UPDATE channel_messages SET visible_at = %s, receipt = NULL WHERE receipt = %s AND visible_at > %s"
        return await self._db.rowcount(sql, (now, receipt, now))

    async def release_receipt_prefix(self, prefix: str) -> int:
        check_name("receipt prefix", prefix)  # "" would release every consumer's messages
        where, bounds = prefix_clause("receipt", prefix)
        now = self._now()
        sql = f"UPDATE channel_messages SET visible_at = %s, receipt = NULL WHERE visible_at > %s{where}"
        return await self._db.rowcount(sql, (now, now, *bounds))

    async def depth(self, scope: Scope, channel: str) -> ChannelDepth:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        sql = """
            SELECT COUNT(*) FILTER (WHERE receipt IS NULL OR visible_at <= %(now)s),
                   COUNT(*) FILTER (WHERE receipt IS NOT NULL AND visible_at > %(now)s),
                   (SELECT COUNT(*) FROM channel_dead WHERE tenant = %(tenant)s AND ns = %(ns)s
                        AND channel = %(channel)s)
            FROM channel_messages WHERE tenant = %(tenant)s AND ns = %(ns)s AND channel = %(channel)s"""
        params = {"now": self._now(), "tenant": tenant, "ns": ns, "channel": channel}
        row = await self._db.fetchone(sql, params)  # one statement: one snapshot
        assert row is not None
        return ChannelDepth(int(row[0]), int(row[1]), int(row[2]))

    async def dead_letters(self, scope: Scope, channel: str, limit: int = 100) -> list[DeadLetter]:
        tenant, ns = check_scope(scope)
        check_name("channel", channel)
        check_count("limit", limit)
        sql = (
            "SELECT id, msg_id, msg_type, payload, deliveries, reason, sent_at, dead_at FROM channel_dead"
            " WHERE tenant = %s AND ns = %s AND channel = %s ORDER BY id LIMIT %s"
        )
        while True:
            rows = await self._db.fetchall(sql, (tenant, ns, channel, limit))
            out: list[DeadLetter] = []
            corrupt: list[Corrupt] = []
            for row_id, msg_id, msg_type, raw, deliveries, reason, sent_at, dead_at in rows:
                try:
                    payload = loads_json(raw)
                except ValueError as exc:
                    delete = ("DELETE FROM channel_dead WHERE id = %s AND payload = %s", (row_id, raw))
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
        # Same msg_id (dedup entries keep pointing at it) but a new row id: it queues at the back.
        sql = """
            WITH gone AS (
                DELETE FROM channel_dead WHERE tenant = %s AND ns = %s AND channel = %s AND msg_id = %s
                RETURNING *)
            INSERT INTO channel_messages (msg_id, tenant, ns, channel, msg_type, payload, dedup_key, deliveries,
                                          sent_at, visible_at, receipt)
            SELECT msg_id, tenant, ns, channel, msg_type, payload, dedup_key, 0, sent_at, %s, NULL FROM gone"""
        return await self._db.rowcount(sql, (tenant, ns, channel, msg_id, self._now())) > 0
