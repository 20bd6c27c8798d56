"""PostgreSQL schema: the v1 baseline plus ordered migrations, in one schema per store.

Never edit V1_DDL or an existing migration: add one. A fresh schema is built exactly like an old one is
upgraded (baseline, then every migration), so they cannot drift apart.

Keys and names are ``TEXT COLLATE "C"``: ordering and prefix ranges compare code points (as in SQLite), not
the database's locale rules. JSON values are stored as the exact text Python wrote (``text``, not
``jsonb``, which would reorder keys and turn 1e20 into an integer). Every table leads its key or index
with (tenant, ns), and every query filters by both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

from psycopg import sql

from ._errors import SchemaVersionError, StoreError
from ._pg_engine import Conn, logger

K = 'TEXT COLLATE "C" NOT NULL'
"""A key or name column."""

V1_DDL: tuple[str, ...] = (
    f"CREATE TABLE meta (key {K} PRIMARY KEY, value TEXT NOT NULL)",
    # kv -----------------------------------------------------------------------------------------------------
    f"""CREATE TABLE kv (
        tenant {K}, ns {K}, key {K}, value TEXT NOT NULL, version BIGINT NOT NULL,
        expires_at DOUBLE PRECISION, updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (tenant, ns, key))""",
    "CREATE INDEX kv_expiry ON kv (expires_at) WHERE expires_at IS NOT NULL",
    # tuples: elems[i] is the typed encoding of element i (encode_element), so matching is SQL equality ------
    f"""CREATE TABLE tuples (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tenant {K}, ns {K},
        arity INTEGER NOT NULL, elems TEXT[] COLLATE "C" NOT NULL, body TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX tuples_first ON tuples (tenant, ns, arity, (elems[1]), id)",
    "CREATE INDEX tuples_arity ON tuples (tenant, ns, arity, id)",
    # blobs --------------------------------------------------------------------------------------------------
    f"""CREATE TABLE blobs (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tenant {K}, ns {K}, name {K},
        data BYTEA NOT NULL, size BIGINT NOT NULL, content_type TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL, UNIQUE (tenant, ns, name))""",
    # events -------------------------------------------------------------------------------------------------
    f"""CREATE TABLE event_streams (
        tenant {K}, ns {K}, stream {K}, last_seq BIGINT NOT NULL, last_hash TEXT NOT NULL,
        anchor_seq BIGINT NOT NULL, anchor_hash TEXT NOT NULL, PRIMARY KEY (tenant, ns, stream))""",
    f"""CREATE TABLE events (
        tenant {K}, ns {K}, stream {K}, seq BIGINT NOT NULL, ts DOUBLE PRECISION NOT NULL,
        data TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL,
        PRIMARY KEY (tenant, ns, stream, seq),
        FOREIGN KEY (tenant, ns, stream) REFERENCES event_streams (tenant, ns, stream))""",
    # channels: a row without a receipt is ready; a leased row is ready again once visible_at passes ---------
    f"""CREATE TABLE channels (
        tenant {K}, ns {K}, channel {K}, max_deliveries INTEGER NOT NULL,
        visibility_timeout DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, ns, channel))""",
    f"""CREATE TABLE channel_messages (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, msg_id {K} UNIQUE,
        tenant {K}, ns {K}, channel {K}, msg_type TEXT NOT NULL, payload TEXT NOT NULL,
        dedup_key TEXT COLLATE "C", deliveries INTEGER NOT NULL, sent_at DOUBLE PRECISION NOT NULL,
        visible_at DOUBLE PRECISION NOT NULL, receipt TEXT COLLATE "C")""",
    # One queue index in id order: receive() walks it with FOR UPDATE SKIP LOCKED, which hands concurrent
    # receivers different messages and never reports a ready message missing because another receiver
    # holds earlier ones (two partial indexes, as in SQLite, cannot be merged under FOR UPDATE).
    "CREATE INDEX channel_messages_queue ON channel_messages (tenant, ns, channel, id)",
    "CREATE INDEX channel_messages_receipt ON channel_messages (receipt) WHERE receipt IS NOT NULL",
    f"""CREATE TABLE channel_dedup (
        tenant {K}, ns {K}, channel {K}, dedup_key {K}, msg_id {K},
        created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, ns, channel, dedup_key))""",
    f"""CREATE TABLE channel_dead (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, msg_id {K} UNIQUE,
        tenant {K}, ns {K}, channel {K}, msg_type TEXT NOT NULL, payload TEXT NOT NULL,
        dedup_key TEXT COLLATE "C", deliveries INTEGER NOT NULL, reason TEXT NOT NULL,
        sent_at DOUBLE PRECISION NOT NULL, dead_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX channel_dead_queue ON channel_dead (tenant, ns, channel, id)",
    # locks: the row outlives the lease so the fencing token never goes back --------------------------------
    f"""CREATE TABLE locks (
        tenant {K}, ns {K}, name {K}, holder TEXT COLLATE "C", token BIGINT NOT NULL,
        expires_at DOUBLE PRECISION, PRIMARY KEY (tenant, ns, name))""",
    "CREATE INDEX locks_holder ON locks (holder) WHERE holder IS NOT NULL",
    # checkpoints --------------------------------------------------------------------------------------------
    f"""CREATE TABLE checkpoints (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tenant {K}, ns {K}, actor_id {K},
        state_version BIGINT NOT NULL, data BYTEA NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        UNIQUE (tenant, ns, actor_id))""",
    # reminders ----------------------------------------------------------------------------------------------
    f"""CREATE TABLE reminders (
        tenant {K}, ns {K}, target {K}, name {K}, op TEXT NOT NULL, payload TEXT NOT NULL,
        next_fire_at DOUBLE PRECISION NOT NULL, period DOUBLE PRECISION, context TEXT NOT NULL,
        PRIMARY KEY (tenant, ns, target, name))""",
    "CREATE INDEX reminders_due ON reminders (next_fire_at)",
    # text search: words are indexed as a tsvector (GIN); doc_len (tokens) feeds the BM25 ranking -----------
    f"""CREATE TABLE text_docs (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tenant {K}, ns {K}, idx {K}, doc_id {K},
        body TEXT NOT NULL, tsv TSVECTOR NOT NULL, doc_len INTEGER NOT NULL, meta TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL, UNIQUE (tenant, ns, idx, doc_id))""",
    "CREATE INDEX text_docs_tsv ON text_docs USING gin (tsv)",
    "CREATE INDEX text_docs_len ON text_docs (tenant, ns, idx) INCLUDE (doc_len)",
    # FTS5's unicode61 remove_diacritics: lower-case, unaccented words, no stemming and no stop words.
    "CREATE TEXT SEARCH CONFIGURATION minihermes_text (COPY = pg_catalog.simple)",
    """ALTER TEXT SEARCH CONFIGURATION minihermes_text ALTER MAPPING
        FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part, numword, numhword,
            hword_numpart
        WITH unaccent, simple""",
    # vectors: pgvector, one HNSW (cosine) partial index per dimension, created on first use ----------------
    f"""CREATE TABLE vectors (
        tenant {K}, ns {K}, idx {K}, doc_id {K}, dim INTEGER NOT NULL, embedding vector NOT NULL,
        meta TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (tenant, ns, idx, doc_id))""",
    "CREATE TABLE vector_dims (dim INTEGER PRIMARY KEY)",
    # quarantine ---------------------------------------------------------------------------------------------
    """CREATE TABLE quarantine (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind TEXT NOT NULL, tenant TEXT NOT NULL,
        ns TEXT NOT NULL, key TEXT NOT NULL, reason TEXT NOT NULL, data BYTEA NOT NULL,
        at DOUBLE PRECISION NOT NULL)""",
)


async def _v1_to_v2(conn: Conn) -> None:
    """v2: checkpoint fences. The highest lease revision that claimed each actor's checkpoint (a cluster's
    new holder); a save with a lower one is refused (``CheckpointStore.claim``)."""
    await conn.execute(
        f"""CREATE TABLE fences (
            tenant {K}, ns {K}, actor_id {K}, fence BIGINT NOT NULL, PRIMARY KEY (tenant, ns, actor_id))"""
    )


async def _v2_to_v3(conn: Conn) -> None:
    """v3: checkpoint items. An actor's append-only state fields (a session's history) are saved item by
    item beside its checkpoint, so a checkpoint writes what was appended since the last one instead of the
    whole list (``CheckpointStore.save(items=...)``)."""
    await conn.execute(
        f"""CREATE TABLE checkpoint_items (
            tenant {K}, ns {K}, actor_id {K}, field {K}, seq BIGINT NOT NULL, data BYTEA NOT NULL,
            PRIMARY KEY (tenant, ns, actor_id, field, seq))"""
    )


async def _v3_to_v4(conn: Conn) -> None:
    """v4: event chain format 2 and forgettable events, as SQLite's v8 (``_chain``, ``_sealing``): existing
    entries stay format 1; subject keys and signed retention anchors get tables of their own."""
    await conn.execute(
        """ALTER TABLE events ADD COLUMN v INTEGER NOT NULL DEFAULT 1,
            ADD COLUMN kind TEXT NOT NULL DEFAULT '', ADD COLUMN key_id BIGINT, ADD COLUMN body BYTEA,
            ADD COLUMN digest TEXT, ADD COLUMN erased TEXT NOT NULL DEFAULT ''"""
    )
    await conn.execute(
        "CREATE INDEX events_key ON events (tenant, ns, stream, key_id) WHERE key_id IS NOT NULL"
    )
    await conn.execute(
        "CREATE INDEX events_legacy ON events (tenant, ns, stream, seq) WHERE v = 1 AND data <> ''"
    )
    await conn.execute(
        f"""CREATE TABLE event_keys (
            key_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tenant {K}, ns {K}, stream {K},
            subjects TEXT COLLATE "C" NOT NULL, key BYTEA NOT NULL, UNIQUE (tenant, ns, stream, subjects))"""
    )
    await conn.execute(
        f"""CREATE TABLE event_key_subjects (
            tenant {K}, ns {K}, stream {K}, subject {K}, key_id BIGINT NOT NULL,
            PRIMARY KEY (tenant, ns, stream, subject, key_id))"""
    )
    await conn.execute(
        f"""CREATE TABLE event_anchors (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tenant {K}, ns {K}, stream {K},
            at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL)"""
    )
    await conn.execute("CREATE INDEX event_anchors_stream ON event_anchors (tenant, ns, stream, id)")


MIGRATIONS: dict[int, Callable[[Conn], Awaitable[None]]] = {2: _v1_to_v2, 3: _v2_to_v3, 4: _v3_to_v4}
"""target version -> step from the previous version; steps run inside the migration transaction."""

LATEST_VERSION = max(MIGRATIONS, default=1)
EXTENSIONS = ("vector", "unaccent")


MIN_PGVECTOR = (0, 8, 0)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _lock_key(name: str) -> int:
    """A stable 63-bit advisory lock key for name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1


async def read_version(conn: Conn, schema: str) -> int | None:
    """The stored schema version, or None if the schema has no tables. Raises for a foreign schema."""
    cur = await conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
    )
    tables = {row[0] for row in await cur.fetchall()}
    if not tables:
        return None
    if "meta" not in tables:
        raise SchemaVersionError(f"schema {schema!r} is not a MiniHermes store: it has tables but no 'meta'")
    cur = await conn.execute(
        sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(sql.Identifier(schema))
    )
    row = await cur.fetchone()
    if row is None:
        raise SchemaVersionError(f"schema {schema!r} is not a MiniHermes store: meta has no schema_version")
    return int(row[0])


async def _ensure_extensions(conn: Conn) -> dict[str, str]:
    """Create the extensions if missing (needs rights to; an operator may have done it) and return the
    schema each lives in."""
    cur = await conn.execute(
        "SELECT extname, extnamespace::regnamespace::text, extversion FROM pg_extension"
        " WHERE extname = ANY(%s)",
        (list(EXTENSIONS),),
    )
    rows = await cur.fetchall()
    found = {name: where for name, where, _ in rows}
    for name, _, version in rows:
        if name == "vector" and _version(version) < MIN_PGVECTOR:
            raise StoreError(
                f"pgvector {version} is installed; the store needs >= {'.'.join(map(str, MIN_PGVECTOR))}"
                " (iterative HNSW scans): ALTER EXTENSION vector UPDATE after upgrading the server package"
            )
    for name in EXTENSIONS:
        if name in found:
            continue
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key("minihermes-extensions"),))
                await conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name)))
        except Exception as exc:
            hint = (
                "pgvector is not installed on the server (see docs/postgres.md)"
                if name == "vector"
                else "it ships with the server's contrib package"
            )
            raise StoreError(
                f"PostgreSQL extension {name!r} is missing and could not be created ({type(exc).__name__}:"
                f" {str(exc).strip()}); {hint}, or have a superuser run CREATE EXTENSION {name}"
            ) from None
        cur = await conn.execute(
            "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = %s", (name,)
        )
        row = await cur.fetchone()
        assert row is not None
        found[name] = row[0]
    return found


async def prepare(conn: Conn, schema: str) -> list[str]:
    """Create or migrate ``schema`` to LATEST_VERSION; returns the search_path for the store's connections.

    An advisory lock per schema makes concurrent openers (several nodes starting at once) take turns: the
    first creates the tables, the others find them finished.
    """
    ext_schemas = await _ensure_extensions(conn)
    search_path = [schema, *dict.fromkeys(s for s in ext_schemas.values() if s != schema)]
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(f"minihermes-schema:{schema}"),))
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        before = await read_version(conn, schema)
        if before is not None and before > LATEST_VERSION:
            raise SchemaVersionError(
                f"store schema {schema!r} is at version {before}, newer than this MiniHermes supports "
                f"({LATEST_VERSION}); upgrade MiniHermes or restore an older backup"
            )
        await conn.execute(
            sql.SQL("SET LOCAL search_path = {}").format(sql.SQL(", ").join(map(sql.Identifier, search_path)))
        )
        if before is None:
            for statement in V1_DDL:
                await conn.execute(statement)
            await conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
        current = before or 1
        while current < LATEST_VERSION:
            current += 1
            await MIGRATIONS[current](conn)
        await conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(current),))
    if before != current:
        logger.info("store schema %r: version %s -> %d", schema, before, current)
    return search_path
