"""The embedded SQLite backend: one database file, WAL, a group-committing writer thread and reader threads.

    store = open_store("sqlite", path="data/minihermes.db")      # or data_dir="data"
    await store.open()
    ...
    await store.close()

Several processes may open the same file: every state change runs in a ``BEGIN IMMEDIATE`` transaction
(waiting up to ``busy_timeout`` for the write lock) and nothing another process could change is cached.

With a key (``encryption_key_file``, ``encryption_key_provider`` or ``MINIHERMES_DB_KEY``; ``_sqlite_keys``)
the file is SQLCipher-encrypted, and ``rotate_key`` re-encrypts it while it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from .._clock import Clock, SystemClock
from ._anchors import ANCHOR_KEY_FILE, AnchorKey
from ._backup import BACKUPS_DIR, pre_migration_backup, scheduled_backup
from ._common import check_number, parse_rules
from ._health import integrity_problems
from ._sqlite_channels import SqliteChannels
from ._sqlite_coord import SqliteLocks, SqliteReminders
from ._sqlite_data import SqliteBlobs, SqliteCheckpoints, SqliteKV, SqliteQuarantine
from ._sqlite_doctor import inspect
from ._sqlite_engine import SqliteEngine
from ._sqlite_events import SqliteEvents
from ._sqlite_keys import StoreKey, check_options, resolve_key
from ._sqlite_retention import apply_rules, incremental_vacuum
from ._sqlite_rotation import record_rotation, serve_rotation_request
from ._sqlite_schema import DB_FILENAME, LATEST_VERSION, prepare, read_version
from ._sqlite_text import SqliteText
from ._sqlite_tuples import SqliteTuples
from ._sqlite_vectors import SqliteVectors
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

_SYNCHRONOUS = ("normal", "full")
logger = logging.getLogger("minihermes.runtime.store.sqlite")


class SqliteStore:
    """All primitives on one SQLite file. Construct, then ``await store.open()`` (or use ``open_store``).

    Options:
        path: the database file. ``data_dir`` instead means ``<data_dir>/minihermes.db`` (created if needed).
        synchronous: "normal" (default): a commit survives a process crash; the last commits before a power
            loss or OS crash may be lost. "full": fsync on every commit (group commit amortizes it).
        clock: every timestamp, TTL and timeout reads ``clock.time()`` (a ManualClock in tests).
        readers: reader threads (each with its own connection).
        busy_timeout: seconds to wait for another process's write lock before failing.
        anchor_key_file: the node key that signs retention anchors (Ed25519 PEM, created on first use);
            default ``anchor.key`` beside the database.
        pre_migration_backups: before migrating an older file, back it up into ``backups_dir`` and keep
            this many such backups (oldest removed); 0: none (docs/operations.md).
        backups_dir: where the store's own backups go (before a migration, and ``backup()``); default
            ``backups/`` beside the database.
        scheduled_backups: how many of ``backup()``'s backups are kept (oldest removed).
        min_free_bytes: refuse writes (``StorageFull``) while the disk has less free space; 0: never.
        check_at_open: run ``PRAGMA quick_check`` in the background after opening (``health()``).
        encryption_key_file: encrypt the file with the key in this file (outside the data directory).
        encryption_key_provider: or with the key this callable returns ("package.module:callable").
            Neither: the key in ``MINIHERMES_DB_KEY`` if set, else no encryption (docs/configuration.md).
    """

    backend = "sqlite"
    commits_in_order = True
    """Every write (checkpoint, event, kv, ...) commits in the order it was queued: one writer thread, one
    FIFO queue. A write queued before another is durable no later than it."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        synchronous: str = "normal",
        clock: Clock | None = None,
        readers: int = 4,
        busy_timeout: float = 5.0,
        anchor_key_file: str | os.PathLike[str] | None = None,
        encryption_key_file: str | os.PathLike[str] | None = None,
        encryption_key_provider: str | None = None,
        pre_migration_backups: int = 3,
        backups_dir: str | os.PathLike[str] | None = None,
        scheduled_backups: int = 7,
        min_free_bytes: int = 64 * 1024 * 1024,
        check_at_open: bool = True,
    ) -> None:
        if (path is None) == (data_dir is None):
            raise ValueError("sqlite store: pass exactly one of path= or data_dir=")
        if path is not None and str(path) in ("", ":memory:"):
            raise ValueError("sqlite store needs a file path (reader and writer threads share it by name)")
        if not isinstance(synchronous, str) or synchronous.lower() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
        if isinstance(readers, bool) or not isinstance(readers, int) or readers < 1:
            raise ValueError(f"readers must be a positive int, got {readers!r}")
        check_options(encryption_key_file, encryption_key_provider)
        for name, value in (
            ("pre_migration_backups", pre_migration_backups),
            ("min_free_bytes", min_free_bytes),
            ("scheduled_backups", scheduled_backups),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        self._keep_backups = pre_migration_backups
        self._keep_scheduled = scheduled_backups
        self._backups_dir = None if backups_dir is None else Path(backups_dir)
        self._backing_up = asyncio.Lock()
        self._check_at_open = bool(check_at_open)
        self._integrity: asyncio.Future[None] | None = None
        self._checking: sqlite3.Connection | None = None
        self._key_file, self._key_provider = encryption_key_file, encryption_key_provider
        self._data_dir = None if data_dir is None else Path(data_dir)
        self.path = Path(path) if path is not None else Path(data_dir or ".") / DB_FILENAME
        self._synchronous = synchronous.lower()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.anchor_key = AnchorKey(anchor_key_file or self.path.parent / ANCHOR_KEY_FILE)
        self._engine = SqliteEngine(
            self.path, busy_timeout=check_number("busy_timeout", busy_timeout), readers=readers
        )
        self._engine.min_free_bytes = min_free_bytes
        self._opening = asyncio.Lock()
        engine, clk = self._engine, self.clock
        self._kv = SqliteKV(engine, clk)
        self.kv: KVStore = self._kv
        self._tuples = SqliteTuples(engine, clk)
        self.tuples: TupleSpace = self._tuples
        self.blobs: BlobStore = SqliteBlobs(engine, clk)
        self.events: EventLog = SqliteEvents(engine, clk)
        self.channels: ChannelStore = SqliteChannels(engine, clk)
        self.locks: LockStore = SqliteLocks(engine, clk)
        self._checkpoints = SqliteCheckpoints(engine, clk)
        self.checkpoints: CheckpointStore = self._checkpoints
        self.reminders: ReminderStore = SqliteReminders(engine, clk)
        self._text = SqliteText(engine, clk)
        self.text: TextIndex = self._text
        self.vectors: VectorIndex = SqliteVectors(engine, clk)
        self.quarantine: Quarantine = SqliteQuarantine(engine, clk)

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    async def open(self) -> None:
        """Create the file at the latest schema, or migrate an older one (refusing a newer one). Idempotent."""
        async with self._opening:  # two concurrent open() calls must not start two writers
            if self._engine.is_open:
                return
            if self._data_dir is not None:
                await asyncio.to_thread(self._data_dir.mkdir, parents=True, exist_ok=True)
            self._engine.key = await asyncio.to_thread(self.resolve_key)
            await self._engine.start(
                partial(prepare, synchronous=self._synchronous, before_migration=self._backup_first)
            )
            if self._check_at_open:
                self._integrity = asyncio.ensure_future(self._check_integrity())

    def _backup_first(self, conn: sqlite3.Connection, before: int, after: int) -> None:
        """Before a migration (on the writer thread): a backup of the file as it is, N kept."""
        made = pre_migration_backup(
            self.path,
            self._engine.key,
            keep=self._keep_backups,
            before=before,
            after=after,
            folder=self.backups_dir,
        )
        if made is not None:
            logger.warning("schema %d -> %d: backed the store up first, into %s", before, after, made)

    async def _check_integrity(self) -> None:
        plain = self.path if self._engine.key is None else None

        def check() -> list[str]:  # apart from the reader pool: a long check holds none of its threads
            conn = self._checking = self._engine.open_reader()
            try:
                return integrity_problems(conn, plain)
            finally:
                self._checking = None
                conn.close()

        try:
            problems = await asyncio.to_thread(check)
        except Exception as e:  # a file too damaged to run the check is a finding, not a crash
            if "interrupted" in str(e):
                return  # the store closed first
            problems = [f"{type(e).__name__}: {e}"]
        self._engine.health.integrity_checked(problems)
        if problems != ["ok"]:
            logger.error("store %s failed its quick_check: %s", self.path, "; ".join(problems))

    @property
    def backups_dir(self) -> Path:
        """Where the store's own backups go (``backups_dir``, default ``backups/`` beside the database)."""
        return self._backups_dir or self.path.parent / BACKUPS_DIR

    async def backup(self, label: str = "") -> dict[str, Any]:
        """Back the store and its data dir up into ``backups_dir`` while it serves (paced, one snapshot), as
        ``scheduled-<time>[-label]``; the newest ``scheduled_backups`` are kept. One at a time."""
        async with self._backing_up:
            return await asyncio.to_thread(
                scheduled_backup,
                self.path,
                self._engine.key,
                self.backups_dir,
                keep=max(1, self._keep_scheduled),
                label=label,
            )

    def health(self) -> dict[str, Any]:
        """``{"status": "ok" | "degraded", "reason", "faults", ...}``: the storage faults met since the
        store opened, the open-time ``quick_check`` and whether writes are refused for lack of disk."""
        return self._engine.health.report()

    async def close(self) -> None:
        """Run and commit every queued write, then stop the threads. Later calls raise StoreClosedError."""
        self._checkpoints.flush_pending()
        # The open-time check first: its read snapshot would keep the writer's closing checkpoint from
        # moving the WAL into the database (the file would then hold last writes only in its -wal).
        if self._integrity is not None:
            if (checking := self._checking) is not None:
                checking.interrupt()  # a long check on a big file does not hold the stop up
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._integrity
        await self._engine.stop()

    async def __aenter__(self) -> SqliteStore:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def resolve_key(self) -> StoreKey | None:
        """The configured key (reads its file, calls its provider or reads the environment), or None.
        Blocking: ``open`` runs it in a thread."""
        return resolve_key(
            key_file=self._key_file, key_provider=self._key_provider, data_dir=self.path.parent
        )

    @property
    def key_source(self) -> str | None:
        """Where the open store's key came from (``env MINIHERMES_DB_KEY``, ``file ...``), None unencrypted."""
        key = self._engine.key
        return None if key is None else key.source

    async def rotate_key(self, key: StoreKey) -> None:
        """Re-encrypt the open store with ``key`` while it serves (writes and reads wait meanwhile). A crash
        during it leaves the file under exactly one of the two keys, with all its data. The store must be
        encrypted already (a plain one is encrypted offline: ``minihermes keys rotate``)."""
        await self._engine.rekey(key)
        await asyncio.to_thread(record_rotation, self.path, key)

    async def serve_key_rotation(self) -> None:
        """Run the rotation ``minihermes keys rotate`` asked for (its request file beside the database) and
        write the outcome beside it; the serving node calls this on SIGUSR2."""
        await serve_rotation_request(self)

    async def schema_version(self) -> int:
        version = await self._engine.read(read_version)
        return LATEST_VERSION if version is None else version

    async def doctor(self, *, full: bool = False) -> list[Finding]:
        """The folder is writable (made, with ``data_dir=``, as ``open`` would), SQLite is recent enough (and
        whether it has the WAL-reset bug), WAL and FTS5 work there, the file's schema version is one this
        MiniHermes opens; free disk, WAL size, ``quick_check`` (``integrity_check`` with ``full``) and each
        quarantined row (read only)."""
        return await asyncio.to_thread(
            inspect,
            self.path,
            make_dir=self._data_dir is not None,
            resolve=self.resolve_key,
            full=full,
            min_free_bytes=self._engine.min_free_bytes,
        )

    async def write_batch(self, scope: Scope, writes: Sequence[Write]) -> list[Any]:
        """Every write as one op of the writer: it commits with its group, and when it fails the engine
        undoes all of it (its savepoint), never part."""
        ops = [self._op(scope, w) for w in writes]  # every write checked before any runs
        if not ops:
            return []
        return await self._engine.write(lambda conn: [None if op is None else op(conn) for op in ops])

    def _op(self, scope: Scope, write: Write) -> Callable[[sqlite3.Connection], Any] | None:
        if isinstance(write, KVPut):
            return self._kv.put_op(scope, write.key, write.value, write.ttl)
        if isinstance(write, KVDelete):
            return self._kv.delete_op(scope, write.key)
        if isinstance(write, TupleWrite):
            return self._tuples.write_op(scope, write.tup)
        if isinstance(write, TupleTakeAll):
            return self._tuples.take_all_op(scope, write.pattern)
        if isinstance(write, TextUpsert):
            op = self._text.upsert_op(scope, write.index, [(write.doc_id, write.fields, write.meta)])
            return None if op is None else _none(op)
        if isinstance(write, TextRemove):
            return self._text.remove_op(scope, write.index, write.doc_id)
        raise TypeError(f"write_batch: not a write: {type(write).__name__}")

    async def apply_retention(self, rules: Sequence[RetentionRule], now: float) -> RetentionReport:
        """Apply every rule across all scopes in one transaction and purge expired KV rows, then return free
        pages to the file system (incremental_vacuum). The report counts deleted rows per rule kind, plus
        "kv_expired"."""
        parsed = parse_rules(rules)
        now = check_number("now", now, positive=False)
        counts = await self._engine.write(lambda conn: apply_rules(conn, parsed, now, self.anchor_key))
        await self._engine.write(incremental_vacuum, transactional=False)
        return RetentionReport(counts)


def _none(op: Callable[[sqlite3.Connection], Any]) -> Callable[[sqlite3.Connection], None]:
    def run(conn: sqlite3.Connection) -> None:
        op(conn)

    return run
