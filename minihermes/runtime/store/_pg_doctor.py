"""``PostgresStore.doctor()``: can this server hold the store, and can this MiniHermes open its schema?

Read only, on one connection of its own: nothing is created or migrated (``open`` does that). Connection
errors are reported without the connection string or the password.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ._errors import SchemaVersionError
from ._pg_engine import Conn
from ._pg_schema import EXTENSIONS, LATEST_VERSION, MIN_PGVECTOR, _version, read_version
from .base import Finding

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_SERVER = 130000
"""PostgreSQL 13 (``server_version_num``)."""


async def inspect(
    connect: Callable[[], Awaitable[Conn]], schema: str, where: str, secrets: list[str]
) -> list[Finding]:
    """Findings "server", "vector", "unaccent", "locale" and "schema" for a store in ``schema``."""
    try:
        conn = await connect()
    except Exception as e:  # any failure to connect is the finding
        return [Finding("server", FAIL, f"cannot connect ({where}): {_safe(e, secrets)}")]
    async with conn:
        cur = await conn.execute(
            "SELECT current_setting('server_version'), current_setting('server_version_num')"
        )
        row = await cur.fetchone()
        assert row is not None
        version, number = str(row[0]).split(" ")[0], int(row[1])
        out = [
            Finding(
                "server",
                OK if number >= MIN_SERVER else FAIL,
                f"PostgreSQL {version} ({where}; needs 13 or later)",
            )
        ]
        out += await _extensions(conn)
        out.append(await _locale(conn))
        out.append(await _schema(conn, schema))
    return out


async def _extensions(conn: Conn) -> list[Finding]:
    cur = await conn.execute(
        "SELECT name, default_version, installed_version FROM pg_available_extensions WHERE name = ANY(%s)",
        (list(EXTENSIONS),),
    )
    found = {name: (default, installed) for name, default, installed in await cur.fetchall()}
    out = []
    for name in EXTENSIONS:
        label = "pgvector" if name == "vector" else name
        if name not in found:
            out.append(Finding(label, FAIL, f"{label} is not installed on the server (see docs/postgres.md)"))
            continue
        default, installed = found[name]
        have = installed or default
        if name == "vector" and _version(str(have)) < MIN_PGVECTOR:
            need = ".".join(map(str, MIN_PGVECTOR))
            out.append(Finding(label, FAIL, f"pgvector {have}; the store needs {need} or later"))
        elif installed:
            out.append(Finding(label, OK, f"{label} {installed}"))
        else:
            out.append(
                Finding(
                    label,
                    WARN,
                    f"{label} {default} is available but not created: the first start creates it if the role "
                    f"may, else a superuser runs CREATE EXTENSION {name}",
                    required=False,
                )
            )
    return out


async def _locale(conn: Conn) -> Finding:
    cur = await conn.execute(
        "SELECT pg_encoding_to_char(encoding), datctype FROM pg_database WHERE datname = current_database()"
    )
    row = await cur.fetchone()
    assert row is not None
    encoding, ctype = str(row[0]), str(row[1])
    if encoding == "UTF8" and "utf8" in ctype.lower().replace("-", ""):
        return Finding("locale", OK, f"encoding {encoding}, LC_CTYPE {ctype}", required=False)
    return Finding(
        "locale",
        WARN,
        f"encoding {encoding}, LC_CTYPE {ctype}: not UTF-8, so non-ASCII words are not indexed",
        required=False,
    )


async def _schema(conn: Conn, schema: str) -> Finding:
    try:
        have = await read_version(conn, schema)
    except SchemaVersionError as e:
        return Finding("schema", FAIL, str(e))
    if have is None:
        return Finding(
            "schema",
            OK,
            f"schema {schema!r} has no tables yet (created on first start, version {LATEST_VERSION})",
            required=False,
        )
    if have > LATEST_VERSION:
        return Finding(
            "schema",
            FAIL,
            f"schema {schema!r} is at version {have}, newer than this MiniHermes ({LATEST_VERSION}): upgrade",
        )
    if have < LATEST_VERSION:
        return Finding(
            "schema", OK, f"schema {schema!r} version {have}; migrated to {LATEST_VERSION} on next start"
        )
    return Finding("schema", OK, f"schema {schema!r} version {have} (current)")


def _safe(e: Exception, secrets: list[str]) -> str:
    """The error's first line, with any secret masked (libpq does not echo passwords, but be sure)."""
    text = (str(e).strip().splitlines() or [""])[0]
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
