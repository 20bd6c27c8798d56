"""``SqliteStore.doctor()``: can a store live in this folder, and can this MiniHermes open the file there?

Blocking (sqlite3 and file system calls): run it in a thread. The folder is made if the store would make it
(``data_dir=``); WAL and FTS5 are tried on a scratch database that is removed again; the store's own file is
only read (``mode=ro``), never created or migrated.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from ._errors import SchemaVersionError
from ._sqlite_schema import LATEST_VERSION, MIN_SQLITE, read_version
from .base import Finding

OK, FAIL = "ok", "fail"


def inspect(path: Path, *, make_dir: bool) -> list[Finding]:
    """Findings "data dir", "sqlite", "WAL", "FTS5" and "schema" for a store on the file ``path``."""
    folder = path.parent
    try:
        if make_dir:
            folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-", delete=True) as f:
            f.write(b"x")
            f.flush()
    except OSError as e:
        return [Finding("data dir", FAIL, f"{folder}: {e.strerror or e}")]
    out = [Finding("data dir", OK, f"{folder.resolve()} is writable")]
    need = ".".join(map(str, MIN_SQLITE))
    fresh = sqlite3.sqlite_version_info >= MIN_SQLITE
    out.append(
        Finding("sqlite", OK if fresh else FAIL, f"SQLite {sqlite3.sqlite_version} (needs {need} or later)")
    )
    out += _features(folder)
    out.append(_schema(path))
    return out


def _features(folder: Path) -> list[Finding]:
    """WAL and FTS5, tried on a scratch database in ``folder`` (the file system decides whether WAL works)."""
    scratch = folder / ".doctor.db"
    out: list[Finding] = []
    try:
        conn = sqlite3.connect(scratch)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            out.append(Finding("WAL", OK if mode == "wal" else FAIL, f"journal_mode={mode}"))
            try:
                conn.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
                conn.execute("INSERT INTO t VALUES ('doctor check')")
                hits = conn.execute("SELECT count(*) FROM t WHERE t MATCH 'doctor'").fetchone()[0]
                out.append(Finding("FTS5", OK if hits == 1 else FAIL, "full-text search works"))
            except sqlite3.OperationalError as e:
                out.append(Finding("FTS5", FAIL, f"FTS5 is not available: {e}"))
        finally:
            conn.close()
    except sqlite3.Error as e:
        out.append(Finding("WAL", FAIL, f"cannot open a database in {folder}: {e}"))
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    return out


def _schema(path: Path) -> Finding:
    if not path.exists():
        return Finding(
            "schema",
            OK,
            f"no database yet (created on first start, version {LATEST_VERSION})",
            required=False,
        )
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            have = read_version(conn)
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()
    except SchemaVersionError:
        return Finding("schema", FAIL, f"{path} is not a MiniHermes database")
    except sqlite3.Error as e:
        return Finding("schema", FAIL, f"{path}: {e}")
    if have is None:
        return Finding("schema", FAIL, f"{path} is not a MiniHermes database")
    if have > LATEST_VERSION:
        return Finding(
            "schema", FAIL, f"schema version {have} is newer than this MiniHermes ({LATEST_VERSION}): upgrade"
        )
    if have < LATEST_VERSION:
        return Finding("schema", OK, f"schema version {have}; migrated to {LATEST_VERSION} on next start")
    return Finding("schema", OK, f"schema version {have} (current), journal_mode={mode}")
