"""The PostgreSQL backend: every primitive in one schema of a PostgreSQL database, shared by many nodes.

    store = open_store("postgres", dsn_env="MINIHERMES_PG_DSN", schema="minihermes")
    await store.open()          # creates or migrates the schema (and the vector/unaccent extensions)
    ...
    await store.close()

Needs PostgreSQL >= 13 with pgvector >= 0.8 and unaccent (contrib), a database with a UTF-8 LC_CTYPE (the
text parser classifies letters by it), and psycopg 3 / psycopg_pool / pgvector on the client. See
docs/postgres.md. All state lives in the server, nothing is cached in the process: several nodes (or
processes) opening the same schema see one store, with the same atomicity as SQLite (row locks, atomic
upserts and ``FOR UPDATE SKIP LOCKED`` instead of SQLite's single writer).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import conninfo as pg_conninfo

from .._clock import Clock, SystemClock
from ._anchors import AnchorKey
from ._common import check_number, parse_rules
from ._errors import StoreError
from ._pg_channels import PgChannels
from ._pg_checkpoints import PgCheckpoints
from ._pg_coord import PgLocks, PgReminders
from ._pg_data import PgBlobs, PgKV, PgQuarantine
from ._pg_doctor import inspect
from ._pg_engine import Conn, Op, PgEngine
from ._pg_events import PgEvents
from ._pg_retention import apply_rules
from ._pg_schema import LATEST_VERSION, prepare
from ._pg_text import PgText
from ._pg_tuples import PgTuples
from ._pg_vectors import PgVectors
from .base import (
    BlobStore,
    ChannelStore,
    CheckpointStore,
    EventLog,
    Finding,
    KVDelete,
    KVPut,
    KVStore,
    LockStore,
    Quarantine,
    ReminderStore,
    RetentionReport,
    RetentionRule,
    Scope,
    TextIndex,
    TextRemove,
    TextUpsert,
    TupleSpace,
    TupleTakeAll,
    TupleWrite,
    VectorIndex,
    Write,
)

DEFAULT_DSN_ENV = "MINIHERMES_PG_DSN"
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


class PostgresStore:
    """All primitives on one PostgreSQL schema. Construct (no I/O), then ``await store.open()``.

    Options:
        dsn: a libpq connection string or URI. Instead, ``dsn_env`` names the environment variable that
            holds it (default ``MINIHERMES_PG_DSN`` when neither is given), so credentials stay out of
            config files. The DSN is never logged or shown (repr shows host, port, database and schema).
        password_file: a file whose content (trailing newline stripped) is the password, read at open()
            (e.g. a mounted secret); it overrides a password in the DSN.
        schema: the PostgreSQL schema holding the tables (created if missing); one database can hold
            several stores side by side.
        sslmode, sslrootcert, sslcert, sslkey: TLS settings passed to libpq as given.
        min_size, max_size: connection pool bounds. connect_timeout: seconds, for connecting and for
            waiting for a pooled connection.
        clock: every timestamp, TTL and timeout reads ``clock.time()`` (a ManualClock in tests); nodes
            sharing a store need synchronized clocks for leases and visibility timeouts.
        anchor_key_file: the node key that signs retention anchors (Ed25519 PEM, created on first use; a
            node passes ``<data_dir>/anchor.key``). Without it anchors are written unsigned.
    """

    backend = "postgres"
    commits_in_order = False
    """Checkpoints, event appends and other writes commit on pooled connections of their own, concurrently:
    a write queued first may commit after one queued later."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        dsn_env: str | None = None,
        schema: str = "minihermes",
        password_file: str | os.PathLike[str] | None = None,
        sslmode: str | None = None,
        sslrootcert: str | None = None,
        sslcert: str | None = None,
        sslkey: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
        application_name: str = "minihermes",
        clock: Clock | None = None,
        anchor_key_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if dsn is not None and dsn_env is not None:
            raise ValueError("postgres store: pass dsn= or dsn_env=, not both")
        source = "dsn="
        if dsn is None:
            env = dsn_env or DEFAULT_DSN_ENV
            if not isinstance(env, str) or not env:
                raise ValueError("postgres store: dsn_env must be a non-empty environment variable name")
            dsn = os.environ.get(env)
            source = f"environment variable {env}"
            if not dsn:
                raise ValueError(f"postgres store: {env} is not set (pass dsn= or dsn_env=)")
        if not isinstance(dsn, str):
            raise TypeError(f"postgres store: dsn must be a str, got {type(dsn).__name__}")
        try:
            params = pg_conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError:
            # libpq's message quotes parts of the string, which may be the password: say where it came from.
            raise ValueError(f"postgres store: the connection string from {source} is not valid") from None
        if not isinstance(schema, str) or not _SCHEMA.match(schema):
            raise ValueError(
                f"postgres store: schema must be a lower-case identifier ([a-z_][a-z0-9_]*), got {schema!r}"
            )
        if sslmode is not None and sslmode not in _SSLMODES:
            raise ValueError(f"postgres store: sslmode must be one of {_SSLMODES}, got {sslmode!r}")
        for name, size in (("min_size", min_size), ("max_size", max_size)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"postgres store: {name} must be a positive int, got {size!r}")
        if max_size < min_size:
            raise ValueError("postgres store: max_size must be >= min_size")
        timeout = check_number("connect_timeout", connect_timeout)
        kwargs: dict[str, Any] = {"application_name": application_name}
        tls = {"sslmode": sslmode, "sslrootcert": sslrootcert, "sslcert": sslcert, "sslkey": sslkey}
        kwargs.update({key: str(setting) for key, setting in tls.items() if setting is not None})
        self.schema = schema
        self._where = f"host={params.get('host', '')!s} port={params.get('port', '')!s} dbname={params.get('dbname', '')!s}"
        self._password_file = None if password_file is None else Path(password_file)
        self._secrets = [str(params["password"])] if params.get("password") else []
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.anchor_key = AnchorKey(anchor_key_file)
        self._engine = PgEngine(dsn, kwargs, min_size=min_size, max_size=max_size, timeout=timeout)
        self._opening = asyncio.Lock()
        engine, clk = self._engine, self.clock
        self._kv = PgKV(engine, clk)
        self.kv: KVStore = self._kv
        self._tuples = PgTuples(engine, clk)
        self.tuples: TupleSpace = self._tuples
        self.blobs: BlobStore = PgBlobs(engine, clk)
        self._events = PgEvents(engine, clk)
        self.events: EventLog = self._events
        self.channels: ChannelStore = PgChannels(engine, clk)
        self.locks: LockStore = PgLocks(engine, clk)
        self._checkpoints = PgCheckpoints(engine, clk)
        self.checkpoints: CheckpointStore = self._checkpoints
        self.reminders: ReminderStore = PgReminders(engine, clk)
        self._text = PgText(engine, clk)
        self.text: TextIndex = self._text
        self.vectors: VectorIndex = PgVectors(engine, clk)
        self.quarantine: Quarantine = PgQuarantine(engine, clk)

    def __repr__(self) -> str:
        return f"PostgresStore({self._where} schema={self.schema})"

    async def open(self) -> None:
        """Create the schema at the latest version, or migrate an older one (refusing a newer one).
        Idempotent; concurrent openers of one schema (other nodes) wait for each other."""
        async with self._opening:
            if self._engine.is_open:
                return
            if self._password_file is not None:
                password = await asyncio.to_thread(_read_secret, self._password_file)
                self._engine.set_password(password)
            await self._engine.start(lambda conn: prepare(conn, self.schema))

    async def close(self) -> None:
        """Commit every pending checkpoint and event append, then close the pool. Later calls raise
        StoreClosedError."""
        await asyncio.gather(self._checkpoints.drain(), self._events.drain())
        await self._engine.stop()

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def schema_version(self) -> int:
        row = await self._engine.fetchone("SELECT value FROM meta WHERE key = 'schema_version'")
        return LATEST_VERSION if row is None else int(row[0])

    async def doctor(self) -> list[Finding]:
        """The server answers and is recent enough, pgvector and unaccent are there (or can be created), the
        database is UTF-8, and the schema's version is one this MiniHermes opens. Read only, on a connection
        of its own; the connection string and password never appear in a finding."""
        secrets = list(self._secrets)
        if self._password_file is not None:
            try:
                password = await asyncio.to_thread(_read_secret, self._password_file)
            except StoreError as e:
                return [Finding("server", "fail", str(e))]
            self._engine.set_password(password)
            secrets.append(password)
        return await inspect(self._engine.connect, self.schema, self._where, secrets)

    async def write_batch(self, scope: Scope, writes: Sequence[Write]) -> list[Any]:
        """Every write in one transaction on one pooled connection, in order."""
        ops = [self._op(scope, w) for w in writes]  # every write checked before any runs
        if not ops:
            return []

        async def run(conn: Conn) -> list[Any]:
            return [await op(conn) for op in ops]

        return await self._engine.transaction(run)

    def _op(self, scope: Scope, write: Write) -> Op:
        if isinstance(write, KVPut):
            return self._kv.put_op(scope, write.key, write.value, write.ttl)
        if isinstance(write, KVDelete):
            return self._kv.delete_op(scope, write.key)
        if isinstance(write, TupleWrite):
            return self._tuples.write_op(scope, write.tup)
        if isinstance(write, TupleTakeAll):
            return self._tuples.take_all_op(scope, write.pattern)
        if isinstance(write, TextUpsert):
            return self._text.upsert_op(scope, write.index, write.doc_id, write.fields, write.meta)
        if isinstance(write, TextRemove):
            return self._text.remove_op(scope, write.index, write.doc_id)
        raise TypeError(f"write_batch: not a write: {type(write).__name__}")

    async def apply_retention(self, rules: Sequence[RetentionRule], now: float) -> RetentionReport:
        """Apply every rule across all scopes in one transaction and purge expired KV rows. The report
        counts deleted rows per rule kind, plus "kv_expired". (Space is reclaimed by autovacuum.)"""
        parsed = parse_rules(rules)
        now = check_number("now", now, positive=False)
        if any(rule.kind == "events" for rule in parsed):
            await asyncio.to_thread(self.anchor_key.private)  # the key file read (or made) off the loop

        async def op(conn: Conn) -> dict[str, int]:
            return await apply_rules(conn, parsed, now, self.anchor_key)

        return RetentionReport(await self._engine.transaction(op))


def _read_secret(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise StoreError(f"postgres store: cannot read password_file {str(path)!r}: {exc.strerror}") from None
