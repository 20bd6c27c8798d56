"""PostgreSQL coordination primitives: fenced leases (locks) and durable reminders, safe across nodes."""

from __future__ import annotations

import builtins
import math
from typing import Any

from ._common import (
    check_count,
    check_name,
    check_number,
    check_scope,
    dumps_json,
    loads_json,
    next_periodic_fire,
)
from ._pg_common import Corrupt, Part
from ._pg_engine import Conn
from .base import LockInfo, Reminder, Scope

# ON CONFLICT DO UPDATE locks the row, so of many concurrent acquirers exactly one sees the lease free; the
# others re-check the WHERE against the winner's row and get no row back. The token survives release, so
# tokens never go back.
_ACQUIRE = """
INSERT INTO locks AS l (tenant, ns, name, holder, token, expires_at) VALUES (%s, %s, %s, %s, 1, %s)
ON CONFLICT (tenant, ns, name) DO UPDATE SET
    holder = excluded.holder, token = l.token + 1, expires_at = excluded.expires_at
WHERE l.holder IS NULL OR l.expires_at <= %s OR l.holder = excluded.holder
RETURNING token"""


class PgLocks(Part):
    """Leases with fencing tokens strictly increasing per (scope, name), across nodes and restarts."""

    async def try_acquire(self, scope: Scope, name: str, holder: str, ttl: float) -> int | None:
        tenant, ns = check_scope(scope)
        check_name("lock name", name)
        check_name("holder", holder)
        ttl = check_number("ttl", ttl)
        now = self._now()
        row = await self._db.fetchone(_ACQUIRE, (tenant, ns, name, holder, now + ttl, now))
        return None if row is None else int(row[0])

    async def renew(self, scope: Scope, name: str, holder: str, token: int, ttl: float) -> bool:
        """Extend an unexpired lease; an expired one must be re-acquired (and gets a new token)."""
        tenant, ns = check_scope(scope)
        check_name("lock name", name)
        check_name("holder", holder)
        check_count("token", token, minimum=1)
        ttl = check_number("ttl", ttl)
        now = self._now()
        sql = (
            "UPDATE locks SET expires_at = %s WHERE tenant = %s AND ns = %s AND name = %s"
            " AND holder = %s AND token = %s AND expires_at > %s"
        )
        return await self._db.rowcount(sql, (now + ttl, tenant, ns, name, holder, token, now)) > 0

    async def release(self, scope: Scope, name: str, holder: str, token: int) -> bool:
        """Release if (holder, token) is still the latest lease (expired or not: nobody else holds it)."""
        tenant, ns = check_scope(scope)
        check_name("lock name", name)
        check_name("holder", holder)
        check_count("token", token, minimum=1)
        sql = (
            "UPDATE locks SET holder = NULL, expires_at = NULL"
            " WHERE tenant = %s AND ns = %s AND name = %s AND holder = %s AND token = %s"
        )
        return await self._db.rowcount(sql, (tenant, ns, name, holder, token)) > 0

    async def get(self, scope: Scope, name: str) -> LockInfo | None:
        tenant, ns = check_scope(scope)
        check_name("lock name", name)
        sql = (
            "SELECT holder, token, expires_at FROM locks WHERE tenant = %s AND ns = %s AND name = %s"
            " AND holder IS NOT NULL AND expires_at > %s"
        )
        row = await self._db.fetchone(sql, (tenant, ns, name, self._now()))
        return None if row is None else LockInfo(name, row[0], int(row[1]), float(row[2]))

    async def release_holder(self, holder: str) -> int:
        """Counts the unexpired leases released; expired ones are cleared too but were no longer held."""
        check_name("holder", holder)
        sql = """
            WITH cleared AS (
                UPDATE locks AS l SET holder = NULL, expires_at = NULL
                FROM (SELECT tenant, ns, name, expires_at FROM locks WHERE holder = %s FOR UPDATE) AS old
                WHERE l.tenant = old.tenant AND l.ns = old.ns AND l.name = old.name AND l.holder = %s
                RETURNING old.expires_at)
            SELECT COUNT(*) FILTER (WHERE expires_at > %s) FROM cleared"""
        row = await self._db.fetchone(sql, (holder, holder, self._now()))
        return 0 if row is None else int(row[0])


_REMINDER_COLUMNS = "tenant, ns, target, name, op, payload, next_fire_at, period, context"
_REMINDER_DELETE_EXACT = """
DELETE FROM reminders WHERE tenant = %s AND ns = %s AND target = %s AND name = %s
    AND payload = %s AND context = %s AND period IS NOT DISTINCT FROM %s"""


def _decode_reminder(row: tuple[Any, ...]) -> Reminder | Corrupt:
    tenant, ns, target, name, op, payload, next_fire_at, period, context = row
    try:
        return Reminder(
            scope=(tenant, ns),
            target=target,
            name=name,
            op=str(op),
            payload=loads_json(payload),
            next_fire_at=float(next_fire_at),
            period=None if period is None else float(period),
            context=loads_json(context),
        )
    except ValueError as exc:
        params = (tenant, ns, target, name, payload, context, period)
        key = f"{target}/{name}"
        return Corrupt("reminder", tenant, ns, key, str(exc), payload, _REMINDER_DELETE_EXACT, params)


class PgReminders(Part):
    """Durable timers. due() spans all scopes; advance() is conditional on the fire time the caller saw, so
    two nodes cannot both advance (and deliver) one fire."""

    async def upsert(self, reminder: Reminder) -> None:
        if not isinstance(reminder, Reminder):
            raise TypeError(f"expected Reminder, got {type(reminder).__name__}")
        tenant, ns = check_scope(reminder.scope)
        check_name("reminder target", reminder.target)
        check_name("reminder name", reminder.name)
        check_name("reminder op", reminder.op)
        next_fire_at = check_number("next_fire_at", reminder.next_fire_at, positive=False)
        period = None if reminder.period is None else check_number("period", reminder.period)
        payload = dumps_json("reminder payload", reminder.payload)
        context = dumps_json("reminder context", reminder.context)
        params = (
            tenant,
            ns,
            reminder.target,
            reminder.name,
            reminder.op,
            payload,
            next_fire_at,
            period,
            context,
        )
        sql = f"""
            INSERT INTO reminders ({_REMINDER_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant, ns, target, name) DO UPDATE SET op = excluded.op, payload = excluded.payload,
                next_fire_at = excluded.next_fire_at, period = excluded.period, context = excluded.context"""
        await self._db.rowcount(sql, params)

    async def delete(self, scope: Scope, target: str, name: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("reminder target", target)
        check_name("reminder name", name)
        sql = "DELETE FROM reminders WHERE tenant = %s AND ns = %s AND target = %s AND name = %s"
        return await self._db.rowcount(sql, (tenant, ns, target, name)) > 0

    async def list(self, scope: Scope, target: str | None = None) -> builtins.list[Reminder]:
        tenant, ns = check_scope(scope)
        sql = f"SELECT {_REMINDER_COLUMNS} FROM reminders WHERE tenant = %s AND ns = %s"
        params: tuple[str, ...] = (tenant, ns)
        if target is not None:
            sql += " AND target = %s"
            params = (*params, check_name("reminder target", target))
        return await self._select(sql + " ORDER BY target, name", params)

    async def due(self, now: float, limit: int = 100) -> builtins.list[Reminder]:
        now = check_number("now", now, positive=False)
        check_count("limit", limit)
        sql = (
            f"SELECT {_REMINDER_COLUMNS} FROM reminders WHERE next_fire_at <= %s"
            " ORDER BY next_fire_at, tenant, ns, target, name LIMIT %s"
        )
        return await self._select(sql, (now, limit))

    async def next_fire_at(self) -> float | None:
        row = await self._db.fetchone("SELECT MIN(next_fire_at) FROM reminders")
        return None if row is None or row[0] is None else float(row[0])

    async def advance(self, reminder: Reminder, fired_at: float) -> bool:
        """True if this call advanced (or deleted) the reminder; False if the stored row no longer has
        reminder.next_fire_at. A node delivers a fire only after winning this call."""
        if not isinstance(reminder, Reminder):
            raise TypeError(f"expected Reminder, got {type(reminder).__name__}")
        tenant, ns = check_scope(reminder.scope)
        check_name("reminder target", reminder.target)
        check_name("reminder name", reminder.name)
        fired_at = check_number("fired_at", fired_at, positive=False)
        key = (tenant, ns, reminder.target, reminder.name, reminder.next_fire_at)
        where = "tenant = %s AND ns = %s AND target = %s AND name = %s AND next_fire_at = %s"

        async def op(conn: Conn) -> bool:
            # FOR UPDATE: a second node advancing the same fire waits here, then finds next_fire_at moved.
            cur = await conn.execute(f"SELECT period FROM reminders WHERE {where} FOR UPDATE", key)
            row = await cur.fetchone()
            if row is None:
                return False
            period = row[0]  # the stored period decides: it is the truth if the caller's copy is old
            if period is not None and math.isfinite(period) and period > 0:
                nxt = next_periodic_fire(reminder.next_fire_at, float(period), fired_at)
                await conn.execute(f"UPDATE reminders SET next_fire_at = %s WHERE {where}", (nxt, *key))
            else:
                await conn.execute(f"DELETE FROM reminders WHERE {where}", key)
            return True

        return await self._db.transaction(op)

    async def _select(self, sql: str, params: tuple[object, ...]) -> builtins.list[Reminder]:
        while True:
            decoded = [_decode_reminder(row) for row in await self._db.fetchall(sql, params)]
            corrupt = [item for item in decoded if isinstance(item, Corrupt)]
            if not corrupt:
                return [item for item in decoded if isinstance(item, Reminder)]
            await self._quarantine(corrupt)
