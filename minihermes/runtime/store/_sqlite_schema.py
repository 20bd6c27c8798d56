"""SQLite schema: the frozen v1 baseline plus ordered migrations; ``prepare`` opens or upgrades a file.

A fresh database is built exactly like an old one is upgraded (baseline DDL, then every migration), so a
migrated file and a new file cannot drift apart. Never edit V1_DDL or an existing migration: add one.

Every table carries (tenant, ns) as the leading columns of its key or index, and every query filters by both.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from ._common import encode_element
from ._errors import SchemaVersionError, StoreError

MIN_SQLITE = (3, 35, 0)
DB_FILENAME = "minihermes.db"
"""The file a store opened with ``data_dir=`` uses."""

V1_DDL: tuple[str, ...] = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # kv ---------------------------------------------------------------------------------------------
    """CREATE TABLE kv (
        tenant TEXT NOT NULL, ns TEXT NOT NULL, key TEXT NOT NULL,
        value TEXT NOT NULL, version INTEGER NOT NULL, expires_at REAL, updated_at REAL NOT NULL,
        PRIMARY KEY (tenant, ns, key)) WITHOUT ROWID""",
    "CREATE INDEX kv_expiry ON kv (expires_at) WHERE expires_at IS NOT NULL",
    # tuples: id gives insertion order; e0 is the typed encoding of the first element ----------------
    """CREATE TABLE tuples (
        id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, ns TEXT NOT NULL,
        arity INTEGER NOT NULL, e0 TEXT NOT NULL, body TEXT NOT NULL, created_at REAL NOT NULL)""",
    "CREATE INDEX tuples_first ON tuples (tenant, ns, arity, e0, id)",
    "CREATE INDEX tuples_arity ON tuples (tenant, ns, arity, id)",
    # blobs ------------------------------------------------------------------------------------------
    """CREATE TABLE blobs (
        id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
        data BLOB NOT NULL, size INTEGER NOT NULL, content_type TEXT NOT NULL, updated_at REAL NOT NULL,
        UNIQUE (tenant, ns, name))""",
    # events -----------------------------------------------------------------------------------------
    """CREATE TABLE event_streams (
        tenant TEXT NOT NULL, ns TEXT NOT NULL, stream TEXT NOT NULL,
        last_seq INTEGER NOT NULL, last_hash TEXT NOT NULL,
        anchor_seq INTEGER NOT NULL, anchor_hash TEXT NOT NULL,
        PRIMARY KEY (tenant, ns, stream)) WITHOUT ROWID""",
    """CREATE TABLE events (
        tenant TEXT NOT NULL, ns TEXT NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL,
        ts REAL NOT NULL, data TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL,
        PRIMARY KEY (tenant, ns, stream, seq),
        FOREIGN KEY (tenant, ns, stream) REFERENCES event_streams (tenant, ns, stream))""",
    # channels ---------------------------------------------------------------------------------------
    """CREATE TABLE channels (
        tenant TEXT NOT NULL, ns TEXT NOT NULL, channel TEXT NOT NULL,
        max_deliveries INTEGER NOT NULL, visibility_timeout REAL NOT NULL,
        PRIMARY KEY (tenant, ns, channel)) WITHOUT ROWID""",
    """CREATE TABLE channel_messages (
        id INTEGER PRIMARY KEY, msg_id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL, ns TEXT NOT NULL, channel TEXT NOT NULL,
        msg_type TEXT NOT NULL, payload TEXT NOT NULL, dedup_key TEXT,
        deliveries INTEGER NOT NULL, sent_at REAL NOT NULL, visible_at REAL NOT NULL)""",
    "CREATE INDEX channel_messages_queue ON channel_messages (tenant, ns, channel, id)",
    """CREATE TABLE channel_dedup (
        tenant TEXT NOT NULL, ns TEXT NOT NULL, channel TEXT NOT NULL, dedup_key TEXT NOT NULL,
        msg_id TEXT NOT NULL, created_at REAL NOT NULL,
        PRIMARY KEY (tenant, ns, channel, dedup_key)) WITHOUT ROWID""",
    """CREATE TABLE channel_dead (
        id INTEGER PRIMARY KEY, msg_id TEXT NOT NULL UNIQUE,
        tenant TEXT NOT NULL, ns TEXT NOT NULL, channel TEXT NOT NULL,
        msg_type TEXT NOT NULL, payload TEXT NOT NULL, dedup_key TEXT, deliveries INTEGER NOT NULL,
        reason TEXT NOT NULL, sent_at REAL NOT NULL, dead_at REAL NOT NULL)""",
    "CREATE INDEX channel_dead_queue ON channel_dead (tenant, ns, channel, id)",
    # locks: the row outlives the lease so the fencing token never goes back ------------------------
    """CREATE TABLE locks (
        tenant TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
        holder TEXT, token INTEGER NOT NULL, expires_at REAL,
        PRIMARY KEY (tenant, ns, name)) WITHOUT ROWID""",
    "CREATE INDEX locks_holder ON locks (holder) WHERE holder IS NOT NULL",
    # checkpoints ------------------------------------------------------------------------------------
    """CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, ns TEXT NOT NULL, actor_id TEXT NOT NULL,
        state_version INTEGER NOT NULL, data BLOB NOT NULL, updated_at REAL NOT NULL,
        UNIQUE (tenant, ns, actor_id))""",
    # reminders --------------------------------------------------------------------------------------
    """CREATE TABLE reminders (
        tenant TEXT NOT NULL, ns TEXT NOT NULL, target TEXT NOT NULL, name TEXT NOT NULL,
        op TEXT NOT NULL, payload TEXT NOT NULL, next_fire_at REAL NOT NULL, period REAL,
        context TEXT NOT NULL,
        PRIMARY KEY (tenant, ns, target, name)) WITHOUT ROWID""",
    "CREATE INDEX reminders_due ON reminders (next_fire_at)",
    # text search: text_docs owns identity and scope; text_fts (rowid = text_docs.id) owns the words --
    """CREATE TABLE text_docs (
        id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, ns TEXT NOT NULL, idx TEXT NOT NULL,
        doc_id TEXT NOT NULL, meta TEXT NOT NULL, updated_at REAL NOT NULL,
        UNIQUE (tenant, ns, idx, doc_id))""",
    "CREATE VIRTUAL TABLE text_fts USING fts5 (body, tokenize = 'unicode61 remove_diacritics 2')",
    # quarantine -------------------------------------------------------------------------------------
    """CREATE TABLE quarantine (
        id INTEGER PRIMARY KEY, kind TEXT NOT NULL, tenant TEXT NOT NULL, ns TEXT NOT NULL,
        key TEXT NOT NULL, reason TEXT NOT NULL, data BLOB NOT NULL, at REAL NOT NULL)""",
)


def _v1_to_v2(conn: sqlite3.Connection) -> None:
    """v2: channel receipts. v1 could not tell deliveries apart, so a consumer whose lease had expired could
    still ack a message redelivered to someone else, and a crashed consumer's messages stayed stuck until
    their visibility timeout. It also found ready messages by scanning past every in-flight one.

    A message is now ready when it has no receipt (never delivered, nacked, released, redriven) or its
    lease expired; two partial indexes keep the two cases apart so a receive never walks in-flight rows.
    Messages v1 had delivered get a placeholder receipt: they keep their lease until visible_at, and can
    still be acked without a receipt.
    """
    conn.execute("ALTER TABLE channel_messages ADD COLUMN receipt TEXT")
    conn.execute("UPDATE channel_messages SET receipt = 'v1-lease' WHERE deliveries > 0")
    conn.execute("DROP INDEX channel_messages_queue")
    conn.execute(
        "CREATE INDEX channel_messages_ready ON channel_messages (tenant, ns, channel, id) WHERE receipt IS NULL"
    )
    conn.execute(
        "CREATE INDEX channel_messages_leased ON channel_messages (tenant, ns, channel, visible_at)"
        " WHERE receipt IS NOT NULL"
    )
    conn.execute(
        "CREATE INDEX channel_messages_receipt ON channel_messages (receipt) WHERE receipt IS NOT NULL"
    )


def _v2_to_v3(conn: sqlite3.Connection) -> None:
    """v3: the vectors primitive. Vectors are little-endian float32 bytes with their norm precomputed;
    searches scan one (scope, index, dimension) exactly, so the index leads with those columns."""
    conn.execute(
        """CREATE TABLE vectors (
            tenant TEXT NOT NULL, ns TEXT NOT NULL, idx TEXT NOT NULL, doc_id TEXT NOT NULL,
            dim INTEGER NOT NULL, data BLOB NOT NULL, norm REAL NOT NULL, meta TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (tenant, ns, idx, doc_id)) WITHOUT ROWID"""
    )
    conn.execute("CREATE INDEX vectors_dim ON vectors (tenant, ns, idx, dim)")


def _v3_to_v4(conn: sqlite3.Connection) -> None:
    """v4: the second element of a tuple indexed too. Most patterns name two elements (``("session_owner",
    sid, None)``, ``("memory", scope, owner, key, None)``); with only the first indexed, each such read or take
    walked every tuple of that kind, so a new session or memory cost more the more there were. ``e1`` is the
    typed encoding of element 1 (NULL for 1-tuples), filled here for the tuples already stored."""
    conn.execute("ALTER TABLE tuples ADD COLUMN e1 TEXT")
    rows = conn.execute("SELECT id, body FROM tuples WHERE arity > 1").fetchall()
    updates = []
    for row_id, body in rows:
        try:
            value = json.loads(body)
        except (TypeError, ValueError):
            continue  # a corrupt body is quarantined when a scan meets it; it matches nothing by e1
        if isinstance(value, list) and len(value) > 1:
            updates.append((encode_element(value[1]), row_id))
    conn.executemany("UPDATE tuples SET e1 = ? WHERE id = ?", updates)
    conn.execute("CREATE INDEX tuples_second ON tuples (tenant, ns, arity, e0, e1, id)")


FTS_TOKENIZE = "tokenize = 'unicode61 remove_diacritics 2'"


def fts_table(index_id: int) -> str:
    """The FTS5 table of one (tenant, namespace, index), by its row in ``text_indexes``."""
    return f"text_fts_{int(index_id)}"


def create_fts_table(conn: sqlite3.Connection, index_id: int) -> str:
    table = fts_table(index_id)
    conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5 (body, {FTS_TOKENIZE})")
    return table


def _v4_to_v5(conn: sqlite3.Connection) -> None:
    """v5: one FTS5 table per (tenant, namespace, index), listed in ``text_indexes``. With one table for all,
    bm25 took its statistics (document count, term frequencies, lengths) from every tenant's and every
    index's documents, so one tenant's ranking moved with what other tenants stored (a side channel), and a
    search matched every index's postings for its words before keeping its own (memory search slowed with
    the session index's size). The documents move to their own tables here."""
    conn.execute(
        """CREATE TABLE text_indexes (
            id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, ns TEXT NOT NULL, idx TEXT NOT NULL,
            UNIQUE (tenant, ns, idx))"""
    )
    scopes = conn.execute(
        "SELECT DISTINCT tenant, ns, idx FROM text_docs ORDER BY tenant, ns, idx"
    ).fetchall()
    for tenant, ns, idx in scopes:
        index_id = conn.execute(
            "INSERT INTO text_indexes (tenant, ns, idx) VALUES (?, ?, ?)", (tenant, ns, idx)
        ).lastrowid
        assert index_id is not None
        table = create_fts_table(conn, index_id)
        conn.execute(
            f"INSERT INTO {table} (rowid, body) SELECT f.rowid, f.body FROM text_fts AS f"
            " JOIN text_docs AS d ON d.id = f.rowid WHERE d.tenant = ? AND d.ns = ? AND d.idx = ?",
            (tenant, ns, idx),
        )
    conn.execute("DROP TABLE text_fts")


def _v5_to_v6(conn: sqlite3.Connection) -> None:
    """v6: checkpoint fences. The highest lease revision that claimed each actor's checkpoint (a cluster's
    new holder); a save with a lower one is refused (``CheckpointStore.claim``)."""
    conn.execute(
        """CREATE TABLE fences (
            tenant TEXT NOT NULL, ns TEXT NOT NULL, actor_id TEXT NOT NULL, fence INTEGER NOT NULL,
            PRIMARY KEY (tenant, ns, actor_id)) WITHOUT ROWID"""
    )


def _v6_to_v7(conn: sqlite3.Connection) -> None:
    """v7: checkpoint items. An actor's append-only state fields (a session's history) are saved item by
    item beside its checkpoint, so a checkpoint writes what was appended since the last one instead of the
    whole list (``CheckpointStore.save(items=...)``)."""
    conn.execute(
        """CREATE TABLE checkpoint_items (
            tenant TEXT NOT NULL, ns TEXT NOT NULL, actor_id TEXT NOT NULL, field TEXT NOT NULL,
            seq INTEGER NOT NULL, data BLOB NOT NULL,
            PRIMARY KEY (tenant, ns, actor_id, field, seq)) WITHOUT ROWID"""
    )


def _v7_to_v8(conn: sqlite3.Connection) -> None:
    """v8: event chain format 2 and forgettable events (``_chain``, ``_sealing``). Existing entries stay
    format 1 (``v`` 1) and verify as before. A format-2 entry has a ``kind``, its content sealed under the
    key of its subject set (``body``, with ``key_id``) or plain (``data``), and the chain hashes its
    ``digest``; ``erased`` says why content is gone (not covered by the chain: the erasure entries are).
    Subject keys and the streams' signed retention anchors get tables of their own."""
    for column in (
        "v INTEGER NOT NULL DEFAULT 1",
        "kind TEXT NOT NULL DEFAULT ''",
        "key_id INTEGER",
        "body BLOB",
        "digest TEXT",
        "erased TEXT NOT NULL DEFAULT ''",
    ):
        conn.execute(f"ALTER TABLE events ADD COLUMN {column}")
    conn.execute("CREATE INDEX events_key ON events (tenant, ns, stream, key_id) WHERE key_id IS NOT NULL")
    # forget(legacy=...) reads the plain format-1 entries only; new entries of the audit trail are format 2.
    conn.execute("CREATE INDEX events_legacy ON events (tenant, ns, stream, seq) WHERE v = 1 AND data != ''")
    conn.execute(
        """CREATE TABLE event_keys (
            key_id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, ns TEXT NOT NULL, stream TEXT NOT NULL,
            subjects TEXT NOT NULL, key BLOB NOT NULL, UNIQUE (tenant, ns, stream, subjects))"""
    )
    conn.execute(
        """CREATE TABLE event_key_subjects (
            tenant TEXT NOT NULL, ns TEXT NOT NULL, stream TEXT NOT NULL, subject TEXT NOT NULL,
            key_id INTEGER NOT NULL, PRIMARY KEY (tenant, ns, stream, subject, key_id)) WITHOUT ROWID"""
    )
    conn.execute(
        """CREATE TABLE event_anchors (
            id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, ns TEXT NOT NULL, stream TEXT NOT NULL,
            at REAL NOT NULL, body TEXT NOT NULL)"""
    )
    conn.execute("CREATE INDEX event_anchors_stream ON event_anchors (tenant, ns, stream, id)")


MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    2: _v1_to_v2,
    3: _v2_to_v3,
    4: _v3_to_v4,
    5: _v4_to_v5,
    6: _v5_to_v6,
    7: _v6_to_v7,
    8: _v7_to_v8,
}
"""target version -> step from the previous version. Steps run inside the caller's transaction."""

LATEST_VERSION = max(MIGRATIONS)


def read_version(conn: sqlite3.Connection) -> int | None:
    """The stored schema version, or None for an empty database. Raises for a foreign database."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return None
    if "meta" not in tables:
        raise SchemaVersionError("not a MiniHermes database: it has tables but no 'meta' table")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        raise SchemaVersionError("not a MiniHermes database: meta has no schema_version")
    return int(row[0])


def create_baseline(conn: sqlite3.Connection) -> None:
    """The v1 schema, as the first release created it (used for fresh files and for test fixtures)."""
    for statement in V1_DDL:
        conn.execute(statement)
    conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")


def migrate(conn: sqlite3.Connection) -> tuple[int | None, int]:
    """Bring the schema to LATEST_VERSION inside one write transaction; returns (before, after).

    BEGIN IMMEDIATE takes the write lock first, so two processes opening the same new file do not both
    create tables: the second waits and then finds the finished schema.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        before = read_version(conn)
        if before is not None and before > LATEST_VERSION:
            raise SchemaVersionError(
                f"database schema version {before} is newer than this MiniHermes supports "
                f"({LATEST_VERSION}); upgrade MiniHermes or restore an older backup"
            )
        if before is None:
            create_baseline(conn)
        current = before or 1
        while current < LATEST_VERSION:
            current += 1
            MIGRATIONS[current](conn)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(current),))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return before, current


def prepare(
    conn: sqlite3.Connection,
    *,
    synchronous: str,
    before_migration: Callable[[sqlite3.Connection, int, int], None] | None = None,
) -> None:
    """File-level settings, then schema creation or migration. Runs on the writer's connection.

    ``before_migration(conn, before, after)`` runs first when an existing file is at an older schema (the
    store backs it up there): when it raises, nothing is migrated."""
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(
            f"SQLite {sqlite3.sqlite_version} is too old: the store needs >= {'.'.join(map(str, MIN_SQLITE))}"
            " (UPSERT ... RETURNING, FTS5)"
        )
    # auto_vacuum only takes effect before the first table exists, so it precedes everything else; on an
    # existing file it is a harmless no-op.
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise sqlite3.OperationalError(f"could not enable WAL journal mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    # What is deleted is overwritten with zeros, not left in free space (forgetting must leave no bytes of
    # it in the file). Only this connection writes; readers never free a page.
    conn.execute("PRAGMA secure_delete = ON")
    if before_migration is not None:
        conn.execute("BEGIN")
        try:
            have = read_version(conn)
        finally:
            conn.execute("COMMIT")
        if have is not None and have < LATEST_VERSION:
            before_migration(conn, have, LATEST_VERSION)
    migrate(conn)
