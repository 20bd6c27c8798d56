"""Run a test suite's nodes on PostgreSQL instead of SQLite with one environment switch.

    store = await open_test_store(tmp_path / "data", clock=clock)   # what a fixture hands to Node(...)

With ``MINIHERMES_TEST_STORE`` unset or "sqlite" this is ``open_store("sqlite", data_dir=...)``. With
"postgres" it is a PostgreSQL store (``MINIHERMES_PG_DSN``) in a schema named after the data directory, so
a test that stops a node and starts another on the same data_dir finds its data again, exactly as with a
SQLite file, and two data dirs never share anything. The first use of a data dir starts from an empty
schema (a marker file in the directory remembers that it was claimed). Schemas whose data dir no longer
exists (pytest removes old temp dirs) are dropped the first time a process opens a test store.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from .._clock import Clock
from ._registry import open_store
from .base import Store

ENV = "MINIHERMES_TEST_STORE"
MARKER = ".postgres-test-schema"
_COMMENT = "minihermes-test-store:"
_cleaned = False


def test_store_backend() -> str:
    backend = os.environ.get(ENV, "sqlite").strip() or "sqlite"
    if backend not in ("sqlite", "postgres"):
        raise ValueError(f"{ENV} must be 'sqlite' or 'postgres', got {backend!r}")
    return backend


async def open_test_store(data_dir: str | os.PathLike[str], *, clock: Clock | None = None) -> Store:
    """An unopened store for a node under test: SQLite in data_dir, or PostgreSQL (see module doc)."""
    if test_store_backend() == "sqlite":
        return open_store("sqlite", data_dir=str(data_dir), clock=clock)
    schema = await asyncio.to_thread(_claim, Path(data_dir))
    key = Path(data_dir) / "anchor.key"  # as a node's: the data dir holds the key that signs anchors
    return open_store(
        "postgres", dsn_env="MINIHERMES_PG_DSN", schema=schema, clock=clock, max_size=4, anchor_key_file=key
    )


def _claim(data_dir: Path) -> str:
    """The schema of data_dir. First use of data_dir: drop what an earlier run left in its schema and mark
    the directory claimed."""
    import psycopg
    from psycopg import sql

    global _cleaned
    directory = data_dir.resolve()
    schema = "t_" + hashlib.sha256(str(directory).encode()).hexdigest()[:24]
    marker = directory / MARKER
    if marker.exists() and _cleaned:
        return schema
    with psycopg.connect(os.environ["MINIHERMES_PG_DSN"], autocommit=True) as conn:
        if not _cleaned:
            _cleaned = True
            rows = conn.execute(
                "SELECT n.nspname, d.description FROM pg_namespace n"
                " JOIN pg_description d ON d.objoid = n.oid AND d.classoid = 'pg_namespace'::regclass"
                " WHERE d.description LIKE %s",
                (_COMMENT + "%",),
            ).fetchall()
            for name, description in rows:
                if not Path(description[len(_COMMENT) :]).exists():
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        if marker.exists():
            return schema
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("COMMENT ON SCHEMA {} IS {}").format(
                sql.Identifier(schema), sql.Literal(_COMMENT + str(directory))
            )
        )
    directory.mkdir(parents=True, exist_ok=True)
    marker.write_text(schema + "\n", encoding="utf-8")
    return schema
