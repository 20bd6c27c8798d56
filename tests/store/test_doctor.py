"""``Store.doctor()``: each backend checks where it would keep its data, without creating or migrating it."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import psycopg

from minihermes.runtime.store import Finding, Store, open_store

from .conftest import PG_DSN, drop_schema, requires_postgres

SECRET = "s3cret-Passw0rd"


def _by_name(findings: list[Finding]) -> dict[str, Finding]:
    return {f.name: f for f in findings}


async def test_an_opened_store_reports_its_schema_as_current(store: Store) -> None:
    found = _by_name(await store.doctor())
    assert all(f.status == "ok" for f in found.values() if f.required), found
    assert "(current)" in found["schema"].detail
    expected = {"data dir", "sqlite", "WAL", "FTS5"} if store.backend == "sqlite" else {"server", "pgvector"}
    assert expected <= set(found)


async def test_sqlite_looks_without_creating_the_database(tmp_path: Path) -> None:
    store = open_store("sqlite", data_dir=str(tmp_path / "d"))
    found = _by_name(await store.doctor())
    assert [f.status for n, f in found.items() if n != "WAL-reset bug"] == ["ok"] * 7
    assert found["WAL-reset bug"].status == ("warn" if sqlite3.sqlite_version_info < (3, 44, 6) else "ok")
    assert found["encryption"].detail.startswith("not encrypted (SQLite ")
    assert "no database yet" in found["schema"].detail and not found["schema"].required
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == []  # no database, no scratch files

    # A newer file than this version opens is a required failure; a file that is not ours too.
    newer = tmp_path / "newer"
    async with open_store("sqlite", data_dir=str(newer)):
        pass
    with sqlite3.connect(newer / "minihermes.db") as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    schema = _by_name(await open_store("sqlite", data_dir=str(newer)).doctor())["schema"]
    assert schema.status == "fail" and schema.required and "newer than this MiniHermes" in schema.detail
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    schema = _by_name(await open_store("sqlite", path=foreign).doctor())["schema"]
    assert schema.status == "fail" and "not a MiniHermes database" in schema.detail


async def test_postgres_that_cannot_be_reached_is_a_finding_without_the_password() -> None:
    store = open_store("postgres", dsn=f"postgresql://app:{SECRET}@127.0.0.1:1/app", connect_timeout=2)
    (server,) = await store.doctor()
    assert server.name == "server" and server.status == "fail" and server.required
    assert "host=127.0.0.1 port=1 dbname=app" in server.detail and SECRET not in server.detail


@requires_postgres
async def test_postgres_reports_server_extensions_locale_and_an_empty_schema() -> None:
    schema = f"test_{uuid.uuid4().hex[:12]}"
    store = open_store("postgres", dsn=PG_DSN, schema=schema)
    try:
        found = _by_name(await store.doctor())
        assert set(found) == {"server", "pgvector", "unaccent", "locale", "schema"}
        assert found["server"].status == "ok" and found["server"].detail.startswith("PostgreSQL ")
        assert found["pgvector"].status == "ok" and found["unaccent"].status == "ok"
        assert found["schema"].status == "ok" and "no tables yet" in found["schema"].detail
        assert not found["schema"].required
        async with await psycopg.AsyncConnection.connect(PG_DSN) as conn:
            cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
            assert await cur.fetchone() is None  # looked, made nothing
    finally:
        await drop_schema(schema)
