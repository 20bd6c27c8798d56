"""SQLite coordination primitives: fenced leases (locks) and durable reminders."""

from __future__ import annotations

import builtins
import math
import sqlite3
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
from ._sqlite_common import Corrupt, Part
from .base import LockInfo, Reminder, Scope

# The conflict branch only fires when the lease is free, expired, or already ours; otherwise no row is
# returned and the caller gets None. The token column survives release, so tokens never go back.
_ACQUIRE = """
INSERT INTO locks (tenant, ns, name, holder, token, expires_at) VALUES (?, ?, ?, ?, 1, ?)
ON CONFLICT (tenant, ns, name) DO UPDATE SET
    holder = excluded.holder, token = locks.token + 1, expires_at = excluded.expires_at
WHERE locks.holder IS NULL OR locks.expires_at <= ? OR locks.holder = excluded.holder
RETURNING token"""


class SqliteLocks(Part):
    """Leases with fencing tokens strictly increasing per (scope, name), across processes and restarts."""

    async def try_acquire(self, scope: Scope, name: str, holder: str, ttl: float) -> int | None:
        tenant, ns = check_scope(scope)
        check_name("lock name", name)
        check_name("holder", holder)
        ttl = check_number("ttl", ttl)
        now = self._now()
        params = (tenant, ns, name, holder, now + ttl, now)

        def op(conn: sqlite3.Connection) -> int | None:
            row = conn.execute(_ACQUIRE, params).fetchone()
            return None if row is None else int(row[0])

        return await self._db.write(op)

    async def renew(self, scope: Scope, name: str, holder: str, token: int, ttl: float) -> bool:
        """Extend an unexpired lease. An expired one cannot be renewed, even if nobody took it: the lock was
        observably free in between, so the holder must re-acquire (and get a new token)."""
        tenant, ns = check_scope(scope)
        check_name("lock name", name)
        check_name("holder", holder)
        check_count("token", token, minimum=1)
        ttl = check_number("ttl", ttl)
        now = self._now()
        sql = (
            "UPDATE locks SET expires_at = ? WHERE tenant = ? AND ns = ? AND name = ?"
            " AND holder = ? AND token = ? AND expires_at > ?"
        )
        params = (now + ttl, tenant, ns, name, holder, token, now)
        count: int = await self._db.write(lambda c: c.execute(sql, params).rowcount)
        return count > 0

    async def release(self, scope: Scope, name: str, holder: str, token: int) -> bool:
        """Release if (holder, token) is still the latest lease (expired or not: nobody else holds it)."""
        tenant, ns = check_scope(scope)
        check_name("lock name", name)
        check_name("holder", holder)
        check_count("token", token, minimum=1)
        sql = (
            "UPDATE locks SET holder = NULL, expires_at = NULL"
            " WHERE tenant = ? AND ns = ? AND name = ? AND holder = ? AND token = ?"
        )
        params = (tenant, ns, name, holder, token)
        count: int = await self._db.write(lambda c: c.execute(sql, params).rowcount)
        return count > 0

    async def get(self, scope: Scope, name: str) -> LockInfo | None:
        tenant, ns = check_scope(scope)
        check_name("lock name", name)
        now = self._now()
        sql = (
            "SELECT holder, token, expires_at FROM locks WHERE tenant = ? AND ns = ? AND name = ?"
            " AND holder IS NOT NULL AND expires_at > ?"
        )
        row = await self._db.read(lambda c: c.execute(sql, (tenant, ns, name, now)).fetchone())
        return None if row is None else LockInfo(name, row[0], row[1], row[2])

    async def release_holder(self, holder: str) -> int:
        """Counts the unexpired leases released; expired ones are cleared too but were no longer held."""
        check_name("holder", holder)
        now = self._now()

        def op(conn: sqlite3.Connection) -> int:
            live: int = conn.execute(
                "UPDATE locks SET holder = NULL, expires_at = NULL WHERE holder = ? AND expires_at > ?",
                (holder, now),
            ).rowcount
            conn.execute("UPDATE locks SET holder = NULL, expires_at = NULL WHERE holder = ?", (holder,))
            return live

        return await self._db.write(op)


_REMINDER_COLUMNS = "tenant, ns, target, name, op, payload, next_fire_at, period, context"
_REMINDER_DELETE_EXACT = """
DELETE FROM reminders WHERE tenant = ? AND ns = ? AND target = ? AND name = ?
    AND payload IS ? AND context IS ? AND period IS ?"""


def _decode_reminder(row: tuple[Any, ...]) -> Reminder | Corrupt:
    tenant, ns, target, name, op, payload, next_fire_at, period, context = row
    try:
        if not isinstance(next_fire_at, int | float):
            raise ValueError("stored next_fire_at is not a number")
        if period is not None and not (isinstance(period, int | float) and period > 0):
            raise ValueError("stored period is not a positive number")
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


class SqliteReminders(Part):
    """Durable timers. due() spans all scopes (the scheduler is a runtime service, not an actor); advance()
    is conditional on the fire time the caller saw, so two nodes cannot both advance one fire."""

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
            INSERT INTO reminders ({_REMINDER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (tenant, ns, target, name) DO UPDATE SET op = excluded.op, payload = excluded.payload,
                next_fire_at = excluded.next_fire_at, period = excluded.period, context = excluded.context"""
        await self._db.write(lambda c: c.execute(sql, params))

    async def delete(self, scope: Scope, target: str, name: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("reminder target", target)
        check_name("reminder name", name)
        sql = "DELETE FROM reminders WHERE tenant = ? AND ns = ? AND target = ? AND name = ?"
        count: int = await self._db.write(lambda c: c.execute(sql, (tenant, ns, target, name)).rowcount)
        return count > 0

    async def list(self, scope: Scope, target: str | None = None) -> builtins.list[Reminder]:
        tenant, ns = check_scope(scope)
        sql = f"SELECT {_REMINDER_COLUMNS} FROM reminders WHERE tenant = ? AND ns = ?"
        params: tuple[str, ...] = (tenant, ns)
        if target is not None:
            sql += " AND target = ?"
            params = (*params, check_name("reminder target", target))
        return await self._select(sql + " ORDER BY target, name", params)

    async def due(self, now: float, limit: int = 100) -> builtins.list[Reminder]:
        now = check_number("now", now, positive=False)
        check_count("limit", limit)
        sql = f"SELECT {_REMINDER_COLUMNS} FROM reminders WHERE next_fire_at <= ? ORDER BY next_fire_at, tenant, ns, target, name LIMIT ?"
        return await self._select(sql, (now, limit))

    async def next_fire_at(self) -> float | None:
        row = await self._db.read(lambda c: c.execute("SELECT MIN(next_fire_at) FROM reminders").fetchone())
        return None if row[0] is None else float(row[0])

    async def advance(self, reminder: Reminder, fired_at: float) -> bool:
        """Returns True if this call advanced (or deleted) the reminder, False if the stored row no longer
        has reminder.next_fire_at (someone else advanced it, or it was changed or deleted): a node should
        deliver a fire only after winning this call."""
        if not isinstance(reminder, Reminder):
            raise TypeError(f"expected Reminder, got {type(reminder).__name__}")
        tenant, ns = check_scope(reminder.scope)
        check_name("reminder target", reminder.target)
        check_name("reminder name", reminder.name)
        fired_at = check_number("fired_at", fired_at, positive=False)
        key = (tenant, ns, reminder.target, reminder.name, reminder.next_fire_at)
        where = "tenant = ? AND ns = ? AND target = ? AND name = ? AND next_fire_at = ?"

        def op(conn: sqlite3.Connection) -> bool:
            # The stored period decides one-shot vs periodic: it is the truth if the caller's copy is old.
            row = conn.execute(f"SELECT period FROM reminders WHERE {where}", key).fetchone()
            if row is None:
                return False
            period = row[0]
            if isinstance(period, int | float) and math.isfinite(period) and period > 0:
                nxt = next_periodic_fire(reminder.next_fire_at, float(period), fired_at)
                conn.execute(f"UPDATE reminders SET next_fire_at = ? WHERE {where}", (nxt, *key))
            else:
                conn.execute(f"DELETE FROM reminders WHERE {where}", key)
            return True

        return await self._db.write(op)

    async def _select(self, sql: str, params: tuple[object, ...]) -> builtins.list[Reminder]:
        while True:
            rows = await self._db.read(lambda c: c.execute(sql, params).fetchall())
            decoded = [_decode_reminder(row) for row in rows]
            corrupt = [item for item in decoded if isinstance(item, Corrupt)]
            if not corrupt:
                return [item for item in decoded if isinstance(item, Reminder)]
            await self._quarantine(corrupt)
