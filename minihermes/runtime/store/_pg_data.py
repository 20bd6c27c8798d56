"""PostgreSQL KV, blobs and quarantine: keyed records in one scope (checkpoints are in ``_pg_checkpoints``)."""

from __future__ import annotations

from ._common import (
    check_bytes,
    check_count,
    check_limit,
    check_name,
    check_prefix,
    check_scope,
    check_text,
    check_ttl,
    dumps_json,
    loads_json,
)
from ._pg_common import Corrupt, Part, check_no_nul, insert_quarantine, prefix_clause
from ._pg_engine import Conn, Op
from .base import JSON, BlobInfo, KVEntry, QuarantinedRecord, Scope

_LIVE = "(expires_at IS NULL OR expires_at > %s)"

# Upserts lock the row (ON CONFLICT DO UPDATE), so concurrent puts and CAS calls on one key serialize.
_KV_PUT = """
INSERT INTO kv AS k (tenant, ns, key, value, version, expires_at, updated_at) VALUES (%s, %s, %s, %s, 1, %s, %s)
ON CONFLICT (tenant, ns, key) DO UPDATE SET
    version = CASE WHEN k.expires_at IS NULL OR k.expires_at > excluded.updated_at
                   THEN k.version + 1 ELSE 1 END,
    value = excluded.value, expires_at = excluded.expires_at, updated_at = excluded.updated_at
RETURNING version"""

_KV_CREATE = """
INSERT INTO kv AS k (tenant, ns, key, value, version, expires_at, updated_at) VALUES (%s, %s, %s, %s, 1, %s, %s)
ON CONFLICT (tenant, ns, key) DO UPDATE SET
    version = 1, value = excluded.value, expires_at = excluded.expires_at, updated_at = excluded.updated_at
WHERE k.expires_at IS NOT NULL AND k.expires_at <= excluded.updated_at
RETURNING version"""

# READ COMMITTED re-checks the WHERE clause on the newest row version after waiting for a concurrent
# writer, so of two swaps from the same version exactly one succeeds.
_KV_SWAP = f"""
UPDATE kv SET value = %s, version = version + 1, expires_at = %s, updated_at = %s
WHERE tenant = %s AND ns = %s AND key = %s AND version = %s AND {_LIVE}
RETURNING version"""

_KV_DELETE_EXACT = "DELETE FROM kv WHERE tenant = %s AND ns = %s AND key = %s AND version = %s AND value = %s"


class PgKV(Part):
    """KV with versions and TTL. Expired rows are invisible at once and purged by apply_retention."""

    async def get(self, scope: Scope, key: str) -> JSON | None:
        entry = await self.get_entry(scope, key)
        return None if entry is None else entry.value

    async def get_entry(self, scope: Scope, key: str) -> KVEntry | None:
        tenant, ns = check_scope(scope)
        check_name("key", key)
        sql = f"SELECT value, version, expires_at, updated_at FROM kv WHERE tenant = %s AND ns = %s AND key = %s AND {_LIVE}"
        row = await self._db.fetchone(sql, (tenant, ns, key, self._now()))
        if row is None:
            return None
        raw, version, expires_at, updated_at = row
        try:
            return KVEntry(loads_json(raw), version, expires_at, updated_at)
        except ValueError as exc:
            await self._quarantine([_corrupt_kv(tenant, ns, key, raw, version, str(exc))])
            return None

    async def put(self, scope: Scope, key: str, value: JSON, ttl: float | None = None) -> int:
        version: int = await self._db.run(self.put_op(scope, key, value, ttl))
        return version

    def put_op(self, scope: Scope, key: str, value: JSON, ttl: float | None = None) -> Op:
        """``put`` checked now, as a function of a connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        check_name("key", key)
        text = dumps_json(f"value for key {key!r}", value)
        ttl = check_ttl(ttl)
        now = self._now()
        expires_at = None if ttl is None else now + ttl
        params = (tenant, ns, key, text, expires_at, now)

        async def op(conn: Conn) -> int:
            cur = await conn.execute(_KV_PUT, params)
            row = await cur.fetchone()
            assert row is not None
            return int(row[0])

        return op

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
        if expected_version is None:
            row = await self._db.fetchone(_KV_CREATE, (tenant, ns, key, text, expires_at, now))
        else:
            params = (text, expires_at, now, tenant, ns, key, expected_version, now)
            row = await self._db.fetchone(_KV_SWAP, params)
        return None if row is None else int(row[0])

    async def delete(self, scope: Scope, key: str) -> bool:
        deleted: bool = await self._db.run(self.delete_op(scope, key))
        return deleted

    def delete_op(self, scope: Scope, key: str) -> Op:
        """``delete`` checked now, as a function of a connection (for ``write_batch``)."""
        tenant, ns = check_scope(scope)
        check_name("key", key)
        sql = f"DELETE FROM kv WHERE tenant = %s AND ns = %s AND key = %s AND {_LIVE}"
        params = (tenant, ns, key, self._now())

        async def op(conn: Conn) -> bool:
            cur = await conn.execute(sql, params)
            return cur.rowcount > 0

        return op

    async def list(self, scope: Scope, prefix: str = "", limit: int | None = None) -> list[tuple[str, JSON]]:
        tenant, ns = check_scope(scope)
        check_prefix(prefix)
        limit = check_limit(limit)
        if limit == 0:
            return []
        where, bounds = prefix_clause("key", prefix)
        sql = f"SELECT key, value, version FROM kv WHERE tenant = %s AND ns = %s{where} AND {_LIVE} ORDER BY key LIMIT %s"
        params = (tenant, ns, *bounds, self._now(), limit)  # LIMIT NULL: no limit
        while True:  # repeat only if corrupt rows were removed from under the LIMIT
            rows = await self._db.fetchall(sql, params)
            out: list[tuple[str, JSON]] = []
            corrupt: list[Corrupt] = []
            for key, raw, version in rows:
                try:
                    out.append((key, loads_json(raw)))
                except ValueError as exc:
                    corrupt.append(_corrupt_kv(tenant, ns, key, raw, version, str(exc)))
            if not corrupt:
                return out
            await self._quarantine(corrupt)


def _corrupt_kv(tenant: str, ns: str, key: str, raw: object, version: object, reason: str) -> Corrupt:
    return Corrupt("kv", tenant, ns, key, reason, raw, _KV_DELETE_EXACT, (tenant, ns, key, version, raw))


class PgBlobs(Part):
    """Binary objects with a content type, stored inline (bytea): suited to KB-to-MB sizes."""

    async def put(
        self, scope: Scope, name: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> None:
        tenant, ns = check_scope(scope)
        check_name("blob name", name)
        data = check_bytes("blob data", data)
        check_no_nul("content_type", check_text("content_type", content_type))
        sql = """
            INSERT INTO blobs (tenant, ns, name, data, size, content_type, updated_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (tenant, ns, name) DO UPDATE SET data = excluded.data, size = excluded.size,
                content_type = excluded.content_type, updated_at = excluded.updated_at"""
        await self._db.rowcount(sql, (tenant, ns, name, data, len(data), content_type, self._now()))

    async def get(self, scope: Scope, name: str) -> bytes | None:
        tenant, ns = check_scope(scope)
        check_name("blob name", name)
        sql = "SELECT data FROM blobs WHERE tenant = %s AND ns = %s AND name = %s"
        row = await self._db.fetchone(sql, (tenant, ns, name))
        return None if row is None else bytes(row[0])

    async def delete(self, scope: Scope, name: str) -> bool:
        tenant, ns = check_scope(scope)
        check_name("blob name", name)
        sql = "DELETE FROM blobs WHERE tenant = %s AND ns = %s AND name = %s"
        return await self._db.rowcount(sql, (tenant, ns, name)) > 0

    async def list(self, scope: Scope, prefix: str = "") -> list[BlobInfo]:
        tenant, ns = check_scope(scope)
        check_prefix(prefix)
        where, bounds = prefix_clause("name", prefix)
        sql = f"SELECT name, size, content_type, updated_at FROM blobs WHERE tenant = %s AND ns = %s{where} ORDER BY name"
        rows = await self._db.fetchall(sql, (tenant, ns, *bounds))
        return [BlobInfo(name, size, ctype, updated_at) for name, size, ctype, updated_at in rows]


class PgQuarantine(Part):
    """Rows that could not be decoded, kept for an operator; listed newest first, across all scopes."""

    async def put(self, kind: str, scope: Scope, key: str, reason: str, data: bytes) -> None:
        check_name("kind", kind)
        tenant, ns = check_scope(scope)
        check_text("key", key)
        check_no_nul("reason", check_text("reason", reason))
        data = check_bytes("data", data)
        at = self._now()

        async def op(conn: Conn) -> None:
            await insert_quarantine(conn, kind, tenant, ns, key, reason, data, at)

        await self._db.transaction(op)

    async def list(self, limit: int = 100) -> list[QuarantinedRecord]:
        check_count("limit", limit)
        sql = "SELECT kind, tenant, ns, key, reason, data, at FROM quarantine ORDER BY id DESC LIMIT %s"
        rows = await self._db.fetchall(sql, (limit,))
        return [
            QuarantinedRecord(kind, (tenant, ns), key, reason, bytes(data), at)
            for kind, tenant, ns, key, reason, data, at in rows
        ]
