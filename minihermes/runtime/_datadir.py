"""One node per data directory: an advisory lock the node holds for its life, and what it says about itself.

``DataDirLock(data_dir)`` takes ``<data_dir>/node.lock`` with ``flock`` (exclusive, non-blocking) and writes
its facts (``pid``, ``started_at`` and whatever the starter adds: an address, whether it needs auth) to
``<data_dir>/node.json``, atomically; ``release`` removes ``node.json`` and drops the lock. The OS drops the
lock when the process dies, SIGKILL included, so a ``node.json`` left by a crash, without a held lock, is
stale and ignored. ``node.lock`` itself stays (removing it would let two processes lock two different files).

``running_node(data_dir)`` is the other side: the facts of the node holding the lock, or ``None`` when
nobody does, for a client that would rather talk to that node than start a second one on the same store.

``build_node`` gives a node on the SQLite backend without a cluster fabric a ``DataDirLock``; ``Node.start``
takes it before the store opens and ``Node.stop`` drops it after the store closes. Cluster nodes sharing one
data dir on purpose have none.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

LOCK_FILE = "node.lock"
INFO_FILE = "node.json"


class DataDirBusy(RuntimeError):
    """Another process's node holds the data dir; ``holder`` is what it recorded (may be empty while it
    starts)."""

    def __init__(self, data_dir: Path, holder: dict[str, Any]) -> None:
        self.data_dir = data_dir
        self.holder = holder
        super().__init__(f"data dir {data_dir} is in use by {describe_holder(holder)}")


def describe_holder(holder: dict[str, Any]) -> str:
    """``a node (pid 123, http://127.0.0.1:8091, started 2026-05-01 10:00:00)``: who, where, since when."""
    parts = []
    if holder.get("pid"):
        parts.append(f"pid {holder['pid']}")
    if holder.get("url"):
        parts.append(str(holder["url"]))
    started = holder.get("started_at")
    if isinstance(started, int | float):
        parts.append("started " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)))
    return f"another node ({', '.join(parts)})" if parts else "another node (starting)"


class DataDirLock:
    """The exclusive, advisory lock on a data dir and the facts beside it. ``facts`` may be filled before
    ``acquire``; ``update`` adds more while held (an address known once bound)."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.facts: dict[str, Any] = {}
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, **facts: Any) -> None:
        """Take the lock (idempotent) and record the facts; ``DataDirBusy`` when another holds it."""
        self.facts.update(facts)
        if self._fd is not None:
            self._write()
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirBusy(self.data_dir, _read_info(self.data_dir)) from None
            raise
        self._fd = fd
        self.facts.update(pid=os.getpid(), started_at=time.time(), data_dir=str(self.data_dir))
        self._write()

    def update(self, **facts: Any) -> None:
        """Add facts to ``node.json`` (kept for the next ``acquire`` when not held)."""
        self.facts.update(facts)
        if self._fd is not None:
            self._write()

    def release(self) -> None:
        """Remove ``node.json`` and drop the lock (idempotent)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir / INFO_FILE).unlink()
        fd, self._fd = self._fd, None
        os.close(fd)  # closing the descriptor drops the flock

    def _write(self) -> None:
        path = self.data_dir / INFO_FILE
        tmp = path.with_name(f".{INFO_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.facts, sort_keys=True))
        os.replace(tmp, path)


def running_node(data_dir: str | Path) -> dict[str, Any] | None:
    """The facts of the node holding ``data_dir``'s lock (``{}`` while it has not written them yet), or
    ``None`` when no process holds it (a ``node.json`` left by a crash is ignored)."""
    path = Path(data_dir).resolve()
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return _read_info(path)
            raise
        return None  # nobody holds it (our shared lock goes with the descriptor)
    finally:
        os.close(fd)


def _read_info(data_dir: Path) -> dict[str, Any]:
    """What the holder recorded; ``{}`` when it has not yet (a file naming a dead process is a crashed
    holder's, read in the instant before the new holder replaced it)."""
    try:
        info = json.loads((data_dir / INFO_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(info, dict):
        return {}
    pid = info.get("pid")
    if isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return {}
        except PermissionError:
            pass  # alive, another user's
    return info
