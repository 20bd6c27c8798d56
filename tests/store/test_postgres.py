"""What only the PostgreSQL backend has: options and credentials, several stores (nodes) on one schema,
schema versioning, the HNSW index, BM25 parity with SQLite, and the node config."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo, sql

from minihermes.runtime import AppConfig, build_node
from minihermes.runtime._clock import ManualClock
from minihermes.runtime.store import Reminder, SchemaVersionError, Store, StoreError, open_store
from minihermes.runtime.store import _pg_schema as pg_schema
from minihermes.runtime.store.postgres import PostgresStore

from .conftest import PG_DSN, A, B, drop_schema, postgres_store, requires_postgres

SECRET = "s3cret-Passw0rd"


# --------------------------------------------------------------------------------------------- options


def test_options_are_validated_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINIHERMES_PG_DSN", raising=False)
    with pytest.raises(ValueError, match="MINIHERMES_PG_DSN is not set"):
        open_store("postgres")
    with pytest.raises(ValueError, match="MY_DSN is not set"):
        open_store("postgres", dsn_env="MY_DSN")
    dsn = f"postgresql://app:{SECRET}@db.example:5432/app"
    with pytest.raises(ValueError, match="not both"):
        open_store("postgres", dsn=dsn, dsn_env="X")
    with pytest.raises(ValueError, match="schema must be a lower-case identifier"):
        open_store("postgres", dsn=dsn, schema="Bad-Name")
    with pytest.raises(ValueError, match="sslmode must be one of"):
        open_store("postgres", dsn=dsn, sslmode="sometimes")
    with pytest.raises(ValueError, match="max_size must be >= min_size"):
        open_store("postgres", dsn=dsn, min_size=5, max_size=2)
    with pytest.raises(TypeError):
        open_store("postgres", dsn=dsn, dsnn="typo")
    monkeypatch.setenv("MY_DSN", dsn)
    store = open_store("postgres", dsn_env="MY_DSN", schema="app_1", sslmode="verify-full")
    assert repr(store) == "PostgresStore(host=db.example port=5432 dbname=app schema=app_1)"


def test_a_bad_connection_string_is_reported_without_its_content() -> None:
    with pytest.raises(ValueError) as info:
        open_store("postgres", dsn=f"host=x password={SECRET} port")
    assert "not valid" in str(info.value) and SECRET not in str(info.value)


@requires_postgres
async def test_password_file_and_credentials_never_in_errors_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    params = conninfo.conninfo_to_dict(PG_DSN)
    password = str(params.pop("password"))
    without_password = conninfo.make_conninfo(**params)  # type: ignore[arg-type]
    secret_file = tmp_path / "pg-password"
    secret_file.write_text(password + "\n")
    caplog.set_level(logging.DEBUG)
    schema = f"test_{uuid.uuid4().hex[:12]}"
    store = open_store("postgres", dsn=without_password, password_file=secret_file, schema=schema)
    try:
        await store.open()
        await store.kv.put(A, "k", 1)
        assert await store.kv.get(A, "k") == 1
    finally:
        await store.close()
        await drop_schema(schema)
    secret_file.write_text("wrong-" + password)
    bad = open_store("postgres", dsn=without_password, password_file=secret_file, schema=schema)
    with pytest.raises(psycopg.OperationalError) as info:
        await bad.open()
    assert "password authentication failed" in str(info.value)
    assert password not in str(info.value) and password not in caplog.text
    assert password not in repr(store)
    missing = open_store("postgres", dsn=without_password, password_file=tmp_path / "nope", schema=schema)
    with pytest.raises(StoreError, match="cannot read password_file"):
        await missing.open()


@requires_postgres
async def test_nul_in_free_text_is_refused_clearly() -> None:
    async with postgres_store(ManualClock()) as store:
        with pytest.raises(ValueError, match="content_type must not contain NUL"):
            await store.blobs.put(A, "b", b"x", content_type="text/\x00plain")
        await store.text.upsert(A, "i", "d", {"body": "before\x00after"})  # NUL is no word character
        assert [h.doc_id for h in await store.text.search(A, "i", "after")] == ["d"]


# ----------------------------------------------------------------------------- several nodes, one schema


@pytest.fixture
async def two_nodes() -> tuple[Store, Store]:
    """Two stores (two pools, as two nodes would have) on one schema."""
    if not PG_DSN:
        pytest.skip("MINIHERMES_PG_DSN is not set")
    clock = ManualClock()
    schema = f"test_{uuid.uuid4().hex[:12]}"
    first = open_store("postgres", dsn=PG_DSN, schema=schema, clock=clock, max_size=6)
    second = open_store("postgres", dsn=PG_DSN, schema=schema, clock=clock, max_size=6)
    await asyncio.gather(first.open(), second.open())  # concurrent first open: one creates, one waits
    yield first, second
    await first.close()
    await second.close()
    await drop_schema(schema)


async def test_competing_consumers_on_two_nodes_get_each_message_once(two_nodes: tuple[Store, Store]) -> None:
    one, two = two_nodes
    sent = set(await one.channels.send_batch(A, "jobs", [("job", i) for i in range(300)]))
    received: list[str] = []

    async def consumer(store: Store, name: str) -> None:
        while batch := await store.channels.receive(A, "jobs", max_messages=4, receipt=name):
            received.extend(m.msg_id for m in batch)
            assert await store.channels.ack_batch(A, "jobs", [m.msg_id for m in batch], receipt=name) == len(
                batch
            )

    await asyncio.gather(*(consumer(one if i % 2 else two, f"c{i}") for i in range(12)))
    assert len(received) == 300 and set(received) == sent
    assert (await two.channels.depth(A, "jobs")).ready == 0


async def test_locks_reminders_events_are_shared(two_nodes: tuple[Store, Store]) -> None:
    one, two = two_nodes
    tokens = await asyncio.gather(
        *(
            store.locks.try_acquire(A, "cron-leader", f"node-{i}", ttl=10)
            for i, store in enumerate([one, two] * 20)
        )
    )
    assert len([t for t in tokens if t is not None]) == 1
    reminder = Reminder(A, "cron", "tick", "fire", None, 100.0, 60.0)
    await one.reminders.upsert(reminder)
    wins = await asyncio.gather(*(store.reminders.advance(reminder, 100.0) for store in [one, two] * 5))
    assert wins.count(True) == 1
    [moved] = await two.reminders.list(A)
    assert moved.next_fire_at == 160.0
    await asyncio.gather(*(store.events.append(B, "audit", i) for i, store in enumerate([one, two] * 30)))
    check = await one.events.verify(B, "audit")
    assert check.ok and check.checked == 60 and await two.events.last_seq(B, "audit") == 60


async def test_checkpoint_batches_keep_the_order_of_saves(two_nodes: tuple[Store, Store]) -> None:
    one, two = two_nodes
    futures = []
    for version in range(1, 41):
        futures.append(one.checkpoints.save_nowait(A, "agent/1", version, str(version).encode()))
        futures.extend(one.checkpoints.save_nowait(A, f"other/{i}", version, b"x") for i in range(5))
        await asyncio.sleep(0)  # new loop pass: saves land in successive batches, some while one commits
    await asyncio.gather(*futures)
    checkpoint = await two.checkpoints.load(A, "agent/1")
    assert checkpoint is not None and (checkpoint.state_version, checkpoint.data) == (40, b"40")
    assert len(await two.checkpoints.list(A, "other/")) == 5


# ------------------------------------------------------------------------------------------------ schema


@requires_postgres
async def test_schema_version_newer_and_foreign_schemas_are_refused() -> None:
    clock = ManualClock()
    async with postgres_store(clock) as store:
        assert await store.schema_version() == pg_schema.LATEST_VERSION
        schema = store.schema  # type: ignore[attr-defined]
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("UPDATE {}.meta SET value = '99' WHERE key = 'schema_version'").format(
                    sql.Identifier(schema)
                )
            )
        newer = open_store("postgres", dsn=PG_DSN, schema=schema, clock=clock)
        with pytest.raises(SchemaVersionError, match="version 99, newer than"):
            await newer.open()
    foreign = f"test_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(foreign)))
        await conn.execute(sql.SQL("CREATE TABLE {}.customers (id int)").format(sql.Identifier(foreign)))
    try:
        with pytest.raises(SchemaVersionError, match="not a MiniHermes store"):
            await open_store("postgres", dsn=PG_DSN, schema=foreign).open()
    finally:
        await drop_schema(foreign)


# ----------------------------------------------------------------------------------------------- vectors


@requires_postgres
async def test_vector_search_uses_the_hnsw_index_and_filters_by_scope() -> None:
    import random

    rng = random.Random(3)
    async with postgres_store(ManualClock()) as store:
        for i in range(300):  # another tenant's vectors crowd the neighbourhood
            await store.vectors.upsert(
                B, "memory", f"b{i}", [1.0 + rng.random() * 0.01, rng.random() * 0.01, 0.0]
            )
        for i in range(3):
            await store.vectors.upsert(A, "memory", f"a{i}", [1.0, 0.1 * (i + 1), 0.5])
        hits = await store.vectors.search(A, "memory", [1.0, 0.0, 0.0], limit=5)
        assert [h.doc_id for h in hits] == ["a0", "a1", "a2"]
        schema = store.schema  # type: ignore[attr-defined]
        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
            # The planner rightly sorts a selective tenant's few rows itself; without sorting it must use HNSW.
            await conn.execute("SET enable_sort = off")
            cur = await conn.execute(
                "EXPLAIN SELECT doc_id FROM vectors WHERE tenant = 'acme' AND ns = 'main' AND idx = 'memory'"
                " AND dim = 3 ORDER BY embedding::vector(3) <=> '[1,0,0]'::vector(3) LIMIT 5"
            )
            plan = "\n".join(row[0] for row in await cur.fetchall())
            assert "vectors_hnsw_3" in plan
            query = (
                "SELECT doc_id FROM vectors WHERE tenant = 'acme' AND ns = 'main' AND idx = 'memory'"
                " AND dim = 3 ORDER BY embedding::vector(3) <=> '[1,0,0]'::vector(3) LIMIT 5"
            )
            found = {}
            for mode in ("off", "strict_order"):  # the store's connections use strict_order
                await conn.execute(sql.SQL("SET hnsw.iterative_scan = {}").format(sql.SQL(mode)))
                found[mode] = [row[0] for row in await (await conn.execute(query)).fetchall()]
        # Without iterative scans the 40 nearest candidates are all the other tenant's, and filtered away.
        assert found == {"off": [], "strict_order": ["a0", "a1", "a2"]}


# --------------------------------------------------------------------------------------------------- text


CORPUS = {
    "deploy": "Build the container image, then deploy the container to the cluster.",
    "backup": "Nightly backups of the database to object storage; restore drills monthly.",
    "cluster": "Upgrade each cluster node; drain the node first, then upgrade the next node.",
    "cafe": "Le café near the office has the best espresso in the cluster of shops.",
    "db": "Database migrations run before deploy; back up the database first.",
}


@requires_postgres
@pytest.mark.parametrize("query", ["cluster node", "database backup deploy", "the", "cafe espresso office"])
async def test_bm25_scores_match_sqlite_fts5(tmp_path: Path, query: str) -> None:
    clock = ManualClock()
    sqlite = open_store("sqlite", path=tmp_path / "s.db", clock=clock)
    await sqlite.open()
    try:
        async with postgres_store(clock) as pg:
            for doc_id, body in CORPUS.items():
                for store in (sqlite, pg):
                    await store.text.upsert(A, "docs", doc_id, {"body": body})
            expected = await sqlite.text.search(A, "docs", query, limit=10)
            got = await pg.text.search(A, "docs", query, limit=10)
    finally:
        await sqlite.close()
    assert [h.doc_id for h in got] == [h.doc_id for h in expected]
    assert [h.score for h in got] == pytest.approx([h.score for h in expected], rel=1e-6, abs=1e-9)


# -------------------------------------------------------------------------------------------- node config


@requires_postgres
async def test_a_node_configured_for_postgres(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TEST_NODE_PG_DSN", PG_DSN)
    schema = f"test_{uuid.uuid4().hex[:12]}"
    cfg = AppConfig.from_toml(
        f"""
        [node]
        id = "pg-node"
        backend = "postgres"
        backend_options = {{ dsn_env = "TEST_NODE_PG_DSN", schema = "{schema}", max_size = 4 }}
        """
    )
    caplog.set_level(logging.DEBUG)
    node = build_node(cfg)
    assert isinstance(node.store, PostgresStore) and node.store.schema == schema
    await node.start()
    try:
        await node.store.kv.put(A, "hello", "world")
    finally:
        await node.stop()
    try:
        async with open_store("postgres", dsn=PG_DSN, schema=schema) as again:  # type: ignore[attr-defined]
            assert await again.kv.get(A, "hello") == "world"
    finally:
        await drop_schema(schema)
    password = conninfo.conninfo_to_dict(PG_DSN).get("password")
    assert password and str(password) not in caplog.text
