"""What a running store knows about its own health: faults seen while serving, shown instead of hidden.

``StoreHealth`` collects the storage faults the SQLite engine meets (a corrupt page, an I/O error, a full
disk: not a constraint violation or a busy lock, which are the caller's business), the result of the
``quick_check`` run when the store opens, and whether writes are refused for lack of disk space. ``report()``
is what ``/healthz``, the dashboard and ``/metrics`` show: ``{"status": "ok" | "degraded", "reason", ...}``.

A corruption or I/O fault stays until the process restarts (the file does not heal itself: doctor, then
restore); the disk fault clears as soon as there is room again.

``StorageFull`` is the structured error a write gets while the disk's free space is under the configured
minimum (``min_free_bytes``): refused before SQLite would fail mid-transaction, while reads go on.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ActorError
from ._errors import StoreError

CORRUPTION, IO, DISK, INTEGRITY = "corruption", "io", "disk", "integrity"
_TREE = re.compile(r"Tree (\d+) page (\d+)")


class StorageFull(StoreError, ActorError):
    """A write refused because the disk holding the store has less free space than the configured minimum."""

    code = "storage_full"
    http_status = 507

    def __init__(self, message: str, **details: Any) -> None:
        ActorError.__init__(self, message, **details)


class StoreFault(StoreError, ActorError):
    """A storage fault met by a read or a write (a damaged page, an I/O error): the caller's request fails
    with this structured error (an actor's reply, not a crash: its state is not what is damaged), and the
    store reports itself degraded. The SQLite error is its ``__cause__``."""

    code = "store_fault"
    http_status = 503

    def __init__(self, message: str, **details: Any) -> None:
        ActorError.__init__(self, message, **details)


def fault_kind(exc: BaseException) -> str | None:
    """Which storage fault ``exc`` is (``corruption``, ``io``, ``disk``), or None for anything else (a
    constraint, a busy lock, bad SQL: not the store's health)."""
    if isinstance(exc, StorageFull):
        return DISK
    if type(exc).__name__ not in ("DatabaseError", "OperationalError"):  # sqlite3's or SQLCipher's
        return None
    msg = str(exc).lower()
    if "malformed" in msg or "corrupt" in msg or "not a database" in msg:
        return CORRUPTION
    if "disk i/o" in msg:
        return IO
    if "disk is full" in msg:
        return DISK
    return None


@dataclass
class StoreHealth:
    """Faults by kind (each its reason and when it was first seen) and how many storage errors were met."""

    faults: dict[str, tuple[str, float]] = field(default_factory=dict)
    errors: int = 0
    checked: str | None = None
    """The open-time ``quick_check``: None until it ran, "ok", or what it found."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, exc: BaseException) -> BaseException:
        """Note ``exc`` if it is a storage fault; returns what the caller gets: a ``StoreFault`` for a
        storage fault (``StorageFull`` as it is), else ``exc`` itself."""
        kind = fault_kind(exc)
        if kind is None:
            return exc
        with self._lock:
            self.errors += 1
            if kind not in self.faults:
                self.faults[kind] = (f"{type(exc).__name__}: {exc}", time.time())
        if isinstance(exc, ActorError):
            return exc
        fault = StoreFault(
            f"the store met a storage fault ({kind}): {exc}. `minihermes doctor` names the damage; "
            "docs/operations.md says how to recover",
            kind=kind,
        )
        fault.__cause__ = exc
        return fault

    def set_fault(self, kind: str, reason: str) -> None:
        with self._lock:
            if self.faults.get(kind, ("",))[0] != reason:
                self.faults[kind] = (reason, time.time())

    def clear(self, kind: str) -> None:
        if kind in self.faults:
            with self._lock:
                self.faults.pop(kind, None)

    def integrity_checked(self, problems: list[str]) -> None:
        if problems == ["ok"]:
            self.checked = "ok"
            return
        self.checked = "; ".join(problems)
        self.set_fault(INTEGRITY, f"quick_check found: {self.checked}")

    @property
    def healthy(self) -> bool:
        return not self.faults

    def report(self) -> dict[str, Any]:
        with self._lock:
            faults = sorted(self.faults.items(), key=lambda kv: kv[1][1])
        out: dict[str, Any] = {
            "status": "degraded" if faults else "ok",
            "errors": self.errors,
            "integrity": self.checked,
            "faults": [{"kind": k, "reason": r, "since": at} for k, (r, at) in faults],
        }
        if faults:
            out["reason"] = "; ".join(f"{k}: {r}" for k, (r, _at) in faults)
        return out


def integrity_problems(
    conn: Any, plain_file: Path | None, *, full: bool = False, limit: int = 20
) -> list[str]:
    """``PRAGMA quick_check`` (``integrity_check`` with ``full``) on ``conn``: ``["ok"]``, or each problem
    with the table or index it is in, and, for a plain file (``plain_file``), the damaged pages found by
    walking its B-trees (``quick_check`` stops at the first malformed page without naming it)."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}({int(limit)})")]
    except Exception as e:  # SQLite gives up on a malformed page: name it below
        if "interrupted" in str(e):
            raise
        rows = [f"{pragma} stopped: {e}"]
    if rows == ["ok"]:
        return rows
    roots = _roots(conn)
    named = [_name_line(line, roots) for line in rows]
    if plain_file is not None and roots:
        try:
            named += scan_pages(plain_file, roots)
        except OSError as e:
            named.append(f"cannot read {plain_file}: {e}")
    return named


def _roots(conn: Any) -> dict[int, str]:
    try:
        return {
            int(root): f"{kind} {name}"
            for kind, name, root in conn.execute("SELECT type, name, rootpage FROM sqlite_schema")
            if root
        } | {1: "table sqlite_schema"}
    except Exception:  # the schema page itself is damaged: the raw lines are all there is
        return {}


def _name_line(line: str, roots: dict[int, str]) -> str:
    """``Tree 5 page 9 cell 0: ...`` becomes ``table kv, page 9: Tree 5 page 9 cell 0: ...``."""
    tree = _TREE.search(line)
    if tree:
        what = roots.get(int(tree.group(1)), f"tree {tree.group(1)}")
        return f"{what}, page {tree.group(2)}: {line}"
    return line


def scan_pages(path: Path, roots: dict[int, str], *, limit: int = 10) -> list[str]:
    """Damaged B-tree pages found by walking every tree of a plain (unencrypted) file from its root page:
    ``page 60 of table kv: cell 3 at offset 65520 is outside the page``. What ``quick_check`` cannot say when
    it stops at the first malformed page. Reads the main file only (pages still in the WAL are not seen)."""
    found: list[str] = []
    with path.open("rb") as f:
        head = f.read(100)
        if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
            return []
        page_size = int.from_bytes(head[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        usable = page_size - head[20]
        pages = path.stat().st_size // page_size
        for root, name in sorted(roots.items()):
            stack, seen = [root], set()
            while stack and len(found) < limit:
                number = stack.pop()
                if number in seen:
                    continue
                seen.add(number)
                if not 1 <= number <= pages:
                    found.append(f"{name}: a pointer to page {number}, beyond the file's {pages} pages")
                    continue
                f.seek((number - 1) * page_size)
                problem = _check_page(f.read(page_size), 100 if number == 1 else 0, usable, stack)
                if problem:
                    found.append(f"page {number} of {name}: {problem}")
    return found


def _check_page(buf: bytes, at: int, usable: int, children: list[int]) -> str | None:
    kind = buf[at]
    if kind not in (2, 5, 10, 13):
        return f"not a B-tree page (type byte {kind})"
    interior = kind in (2, 5)
    cells = int.from_bytes(buf[at + 3 : at + 5], "big")
    pointers = at + (12 if interior else 8)
    end = pointers + 2 * cells
    if end > usable:
        return f"its cell count {cells} does not fit in the page"
    for i in range(cells):
        offset = int.from_bytes(buf[pointers + 2 * i : pointers + 2 * i + 2], "big")
        if offset < end or offset + 4 > usable:
            return f"cell {i} at offset {offset} is outside the page's cell area"
        if interior:
            children.append(int.from_bytes(buf[offset : offset + 4], "big"))
    if interior:
        children.append(int.from_bytes(buf[at + 8 : at + 12], "big"))
    return None
