"""Threads that keep SQLite off the event loop: one group-committing writer and a pool of WAL readers.

Writes: callers enqueue a function of the write connection and await a future. The writer thread blocks for
the first queued op, drains whatever else is queued, runs the batch in one ``BEGIN IMMEDIATE`` transaction,
commits once, and then resolves every future of the batch with a single ``call_soon_threadsafe`` per event
loop. Under load this turns N commits into one without adding latency when idle.

A failing op must fail only its own caller. The batch first runs without savepoints (each SAVEPOINT/RELEASE
pair is two more statements per op, on the hot path); if an op raises, that attempt is rolled back and the
batch is replayed with a savepoint around each op. Ops are pure functions of the connection and of values
captured when they were submitted, so replaying them is safe.

Reads: a few reader threads, each with its own connection, draining one shared queue in the same batched way
(one loop wake-up per batch). In WAL mode each read statement sees the latest commit, so a read issued after
a write's future resolved sees that write.

Encryption (``key``, see ``_sqlite_keys``): every connection is an SQLCipher one keyed with it (through one
``Keying``: a passphrase derived once, the file's cipher settings found by the first connection). ``rekey``
re-encrypts the file in one write transaction of the writer (every page rewritten into the WAL and committed
at once: a crash before the commit leaves the file under the old key, after it under the new one), with the
readers held between two batches meanwhile; each reader then reopens its connection with the new key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future as ThreadFuture
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from ._errors import StoreClosedError
from ._health import DISK, StorageFull, StoreHealth
from ._sqlite_keys import (
    Keying,
    StoreKey,
    StoreKeyError,
    apply_key,
    cipher_module,
    file_is_plain,
    wrong_key,
)

T = TypeVar("T")
logger = logging.getLogger("minihermes.runtime.store.sqlite")

DISK_CHECK_INTERVAL = 1.0
"""Seconds a free-disk check that found room is trusted for before the writer looks again."""

MAX_WRITE_BATCH = 512
"""Ops per transaction at most, so one batch cannot hold the write lock (which other processes wait for)
for long."""
MAX_READ_BATCH = 64


@dataclass(slots=True)
class _Op:
    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    coalesce: Hashable | None = None
    transactional: bool = True
    result: Any = None
    error: BaseException | None = None
    winner: _Op | None = field(default=None, repr=False)


class _Stop:
    """Queue sentinel: finish what was queued before it, then exit."""


_STOP = _Stop()
_Item = _Op | _Stop


def connect(
    path: Path | str,
    *,
    busy_timeout: float,
    check_same_thread: bool = True,
    key: StoreKey | None = None,
    uri: bool = False,
    keying: Keying | None = None,
) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN/COMMIT ourselves) with the per-connection pragmas;
    with ``key`` (or a store's ``keying``, which remembers the file's cipher settings), an SQLCipher
    connection keyed with it (``StoreKeyError`` when the key does not open the file). Catch its errors as
    ``conn.Error`` / ``conn.IntegrityError``: the two drivers' classes differ."""
    file = Path(str(path).removeprefix("file:").partition("?")[0]) if uri else Path(path)
    if keying is None and key is not None:
        keying = Keying(key, file)
    if keying is None:
        conn: sqlite3.Connection = sqlite3.connect(
            path,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=check_same_thread,
            cached_statements=256,
            uri=uri,
        )
    else:
        conn = _open_keyed(path, keying, busy_timeout, check_same_thread, uri, file)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _open_keyed(
    path: Path | str, keying: Keying, busy_timeout: float, check_same_thread: bool, uri: bool, file: Path
) -> sqlite3.Connection:
    """An SQLCipher connection that has read page 1 under ``keying``: the file's settings tried in turn
    until one opens it (then remembered), else the key is wrong."""
    driver = cipher_module()
    for profile in keying.candidates():
        conn: sqlite3.Connection = driver.connect(
            path,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=check_same_thread,
            cached_statements=256,
            uri=uri,
        )
        try:
            apply_key(conn, keying.secret(), profile)
            conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
        except conn.DatabaseError:
            conn.close()
            continue
        keying.profile = profile
        return conn
    raise wrong_key(file, keying.key)


@contextlib.contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A read transaction: several statements see one consistent state of the database."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("COMMIT")


def _drain(q: queue.SimpleQueue[_Item], first: _Item, limit: int) -> tuple[list[_Op], int]:
    """The first item plus whatever else is queued (up to limit ops); also how many stop sentinels."""
    batch: list[_Op] = []
    stops = 0
    item = first
    while True:
        if isinstance(item, _Stop):
            stops += 1
        else:
            batch.append(item)
        if len(batch) >= limit:
            return batch, stops
        try:
            item = q.get_nowait()
        except queue.Empty:
            return batch, stops


def _settle_all(batch: list[_Op]) -> None:
    """Hand results back to each caller's loop: one thread-safe call per loop per batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Op]] = {}
    for op in batch:
        by_loop.setdefault(op.loop, []).append(op)
    for loop, ops in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, ops)
        except RuntimeError:  # the caller's loop is closed; nobody is waiting any more
            pass


def _settle(ops: list[_Op]) -> None:
    for op in ops:
        if op.future.cancelled():
            continue
        if op.error is not None:
            op.future.set_exception(op.error)
        else:
            op.future.set_result(op.result)


class SqliteEngine:
    """Owns the writer thread, the reader threads and their connections for one database file."""

    def __init__(self, path: Path, *, busy_timeout: float, readers: int) -> None:
        self.path = path
        self.key: StoreKey | None = None
        """Set before ``start``; ``rekey`` changes it."""
        self._keying: Keying | None = None
        """With a key: the raw key and cipher settings every connection is opened with (``_sqlite_keys``)."""
        self._key_generation = 0
        self._reader_gates = [threading.Lock() for _ in range(readers)]
        """Each reader holds its own while it runs a batch; ``rekey`` takes them all."""
        self._busy_timeout = busy_timeout
        self._reader_count = readers
        self._writes: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._reads: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._exited: list[ThreadFuture[None]] = []
        self._state = "new"  # new -> open -> closed
        self.health = StoreHealth()
        """Storage faults met by any thread (``_health``)."""
        self.min_free_bytes = 0
        """Writes are refused (``StorageFull``) while the disk has less free space than this; 0: never."""
        self._room_floor = 0
        self._room_until = 0.0
        """The writer's last look at the disk found room under the minimum ``_room_floor``, trusted until
        ``_room_until`` (``time.monotonic``; ``_short_of_disk``)."""

    @property
    def is_open(self) -> bool:
        return self._state == "open"

    # ---------------------------------------------------------------------------------------- lifecycle

    async def start(self, setup: Callable[[sqlite3.Connection], None]) -> None:
        """Start the writer, which opens the write connection and runs setup (pragmas, migrations) on it,
        then the readers."""
        if self._state == "closed":
            raise StoreClosedError("the store is closed; open a new one")
        if self._state == "open":
            return
        started: ThreadFuture[None] = ThreadFuture()
        self._spawn("writer", self._writer_main, setup, started)
        try:
            await asyncio.wrap_future(started)
        except BaseException:
            self._threads.clear()
            self._exited.clear()
            raise
        for i in range(self._reader_count):
            self._spawn(f"reader-{i}", self._reader_main, self._reader_gates[i])
        self._state = "open"

    def _spawn(self, role: str, target: Callable[..., None], *args: Any) -> None:
        exited: ThreadFuture[None] = ThreadFuture()

        def run() -> None:
            try:
                target(*args)
            finally:
                exited.set_result(None)

        thread = threading.Thread(target=run, name=f"minihermes-sqlite-{role}:{self.path.name}")
        thread.daemon = True  # a forgotten close() must not hang interpreter exit
        thread.start()
        self._threads.append(thread)
        self._exited.append(exited)

    async def stop(self) -> None:
        """Run every op queued so far (writes are committed), then stop the threads; idempotent."""
        if self._state != "open":
            self._state = "closed"
            return
        self._state = "closed"  # refuse new ops from here on; those already queued still run
        self._writes.put(_STOP)
        for _ in range(self._reader_count):
            self._reads.put(_STOP)
        await asyncio.gather(*(asyncio.wrap_future(f) for f in self._exited))

    def _check_open(self) -> None:
        if self._state == "new":
            raise StoreClosedError("the store is not open; await store.open() first")
        if self._state == "closed":
            raise StoreClosedError("the store is closed")

    # -------------------------------------------------------------------------------------------- calls

    async def write(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        coalesce: Hashable | None = None,
        transactional: bool = True,
    ) -> T:
        """Run fn on the write connection inside the next group commit; returns after the commit.

        coalesce: ops with the same key in one batch are replaced by the last one (it overwrites them
        anyway); every caller still resolves only after the commit, with the winner's outcome.
        transactional=False runs fn after the batch commits, outside any transaction (incremental_vacuum).
        """
        return await self.submit(fn, coalesce=coalesce, transactional=transactional)

    def submit(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        coalesce: Hashable | None = None,
        transactional: bool = True,
    ) -> asyncio.Future[T]:
        """Queue fn for the next group commit now (synchronously); the future resolves after the commit."""
        if self._state != "open":
            self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._writes.put(_Op(fn, future, loop, coalesce, transactional))
        return future

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run fn on a reader thread's own connection (no write lock, never waits for the writer)."""
        if self._state != "open":
            self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._reads.put(_Op(fn, future, loop))
        return await future

    async def rekey(self, key: StoreKey) -> None:
        """Re-encrypt the file with ``key`` (the store must be encrypted already): one transaction of the
        writer, readers held meanwhile; then the WAL is checkpointed into the file and truncated, so no page
        under the old key is left in either."""
        if self.key is None:
            raise (
                wrong_key(self.path, None)
                if file_is_plain(self.path) is False
                else StoreKeyError(
                    key.source,
                    f"{self.path} is not encrypted: a running store cannot be encrypted in place; stop the node "
                    "and run `minihermes keys rotate --new-key-file FILE`",
                )
            )
        await self.write(partial(self._rekey, key), transactional=False)

    def _rekey(self, key: StoreKey, conn: Any) -> None:
        assert self._keying is not None  # rekey() checked that the store is encrypted
        keying = self._keying.rekeyed(key)  # a passphrase is derived here, before the readers are held
        for gate in self._reader_gates:  # every reader between two batches, none in a read transaction
            gate.acquire()
        try:
            conn.reset_key(keying.secret())  # PRAGMA rekey: every page, one commit (or a rollback on failure)
            self.key, self._keying = key, keying
            self._key_generation += 1
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            for gate in self._reader_gates:
                gate.release()

    def open_reader(self) -> sqlite3.Connection:
        """A read-only connection of its own, keyed as the store's (blocking: for a thread that reads
        apart from the pool, as the open-time integrity check does). The caller closes it."""
        conn = connect(self.path, busy_timeout=self._busy_timeout, keying=self._keying)
        conn.execute("PRAGMA query_only = ON")
        return conn

    # ------------------------------------------------------------------------------------------ readers

    def _reader_main(self, gate: threading.Lock) -> None:
        conn: sqlite3.Connection | None = None
        generation = self._key_generation
        try:
            while True:
                batch, stops = _drain(self._reads, self._reads.get(), MAX_READ_BATCH)
                with gate:
                    if conn is not None and generation != self._key_generation:
                        conn.close()  # keyed with the key before a rekey: reopened with the new one
                        conn = None
                    for op in batch:
                        try:
                            if conn is None:  # opened lazily so that a failure is reported to a caller
                                generation = self._key_generation
                                conn = connect(
                                    self.path, busy_timeout=self._busy_timeout, keying=self._keying
                                )
                                conn.execute("PRAGMA query_only = ON")
                            op.result = op.fn(conn)
                        except Exception as exc:
                            op.error = self.health.record(exc)
                        if conn is not None and conn.in_transaction:
                            conn.execute(
                                "ROLLBACK"
                            )  # a failed snapshot read must not pin an old WAL snapshot
                _settle_all(batch)
                if stops:
                    for _ in range(stops - 1):  # sentinels drained here belong to the other readers
                        self._reads.put(_STOP)
                    return
        finally:
            if conn is not None:
                conn.close()

    # ------------------------------------------------------------------------------------------- writer

    def _writer_main(self, setup: Callable[[sqlite3.Connection], None], started: ThreadFuture[None]) -> None:
        try:
            if self.key is None and file_is_plain(self.path) is False:
                raise wrong_key(self.path, None)  # not "file is not a database" from deep in the schema code
            self._keying = None if self.key is None else Keying(self.key, self.path)
            conn = connect(self.path, busy_timeout=self._busy_timeout, keying=self._keying)
        except BaseException as exc:
            started.set_exception(exc)
            return
        try:
            setup(conn)
        except BaseException as exc:
            conn.close()
            started.set_exception(exc)
            return
        started.set_result(None)
        try:
            while True:
                batch, stops = _drain(self._writes, self._writes.get(), MAX_WRITE_BATCH)
                if batch:
                    self._run_batch(conn, batch)
                if stops:
                    return
        finally:
            with contextlib.suppress(conn.Error):
                conn.execute("PRAGMA optimize")
            conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        refused = self._short_of_disk()
        if refused is not None:
            for op in batch:
                op.result, op.error = None, refused
            _settle_all(batch)
            return
        tx_ops = [op for op in batch if op.transactional]
        if tx_ops:
            self._run_transaction(conn, tx_ops)
        for op in batch:
            if not op.transactional:
                try:
                    op.result = op.fn(conn)
                except Exception as exc:
                    op.error = self.health.record(exc)
        _settle_all(batch)

    def _run_transaction(self, conn: sqlite3.Connection, ops: list[_Op]) -> None:
        last: dict[Hashable, _Op] = {}
        for op in ops:
            if op.coalesce is not None:
                last[op.coalesce] = op
        runnable = []
        for op in ops:
            if op.coalesce is not None and last[op.coalesce] is not op:
                op.winner = last[op.coalesce]
            else:
                runnable.append(op)
        try:
            if self._attempt(conn, runnable, isolate=False):
                conn.execute("ROLLBACK")
                if len(runnable) > 1:
                    self._attempt(conn, runnable, isolate=True)
                    conn.execute("COMMIT")
            else:
                conn.execute("COMMIT")
        except Exception as exc:
            logger.error("sqlite write batch of %d ops failed: %r", len(runnable), exc)
            if conn.in_transaction:
                with contextlib.suppress(conn.Error):
                    conn.execute("ROLLBACK")
            error = self.health.record(exc)
            for op in runnable:
                op.result, op.error = None, error
        for op in runnable:
            if op.error is not None:  # one op's own failure (the others committed): a fault is still noted
                op.error = self.health.record(op.error)
        for op in ops:
            if op.winner is not None:
                op.result, op.error = op.winner.result, op.winner.error

    def _short_of_disk(self) -> StorageFull | None:
        """The refusal of a write batch while the disk is under ``min_free_bytes`` free, before SQLite would
        fail in the middle of it; None when there is room. Room found is trusted for ``DISK_CHECK_INTERVAL``
        seconds under the same minimum (a statvfs per batch is a cost every turn's writes pay); while the
        disk is short, every batch looks again, so writes resume with the first batch after room is made."""
        floor = self.min_free_bytes
        if not floor:
            return None
        now = time.monotonic()
        if floor == self._room_floor and now < self._room_until:
            return None
        try:
            free = shutil.disk_usage(self.path.parent).free
        except OSError:
            return None
        if free >= floor:
            self.health.clear(DISK)
            self._room_floor, self._room_until = floor, now + DISK_CHECK_INTERVAL
            return None
        self._room_floor = 0
        reason = (
            f"the disk holding {self.path.parent} has {free} bytes free, under the configured minimum of "
            f"{self.min_free_bytes} (min_free_bytes): writes are refused until there is room; reads go on"
        )
        self.health.set_fault(DISK, reason)
        return StorageFull(reason, free_bytes=free, min_free_bytes=self.min_free_bytes)

    @staticmethod
    def _attempt(conn: sqlite3.Connection, ops: list[_Op], *, isolate: bool) -> bool:
        """Run ops in a new transaction (left open). Without isolation, stop at the first failing op and
        return True; with a savepoint per op, undo only failing ops and carry on."""
        conn.execute("BEGIN IMMEDIATE")
        for op in ops:
            op.result, op.error = None, None
            if isolate:
                conn.execute("SAVEPOINT op")
            try:
                op.result = op.fn(conn)
            except Exception as exc:
                op.error = exc
                if not conn.in_transaction:
                    # SQLite rolled back the whole transaction itself (disk full, I/O error): every op of
                    # the batch is lost, so the batch fails as a whole.
                    raise
                if not isolate:
                    return True
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
            else:
                if isolate:
                    conn.execute("RELEASE op")
        return False
