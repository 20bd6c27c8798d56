"""``SqliteStore.doctor()``: can a store live in this folder, and can this MiniHermes open the file there?

Blocking (sqlite3 and file system calls): run it in a thread. The folder is made if the store would make it
(``data_dir=``); WAL and FTS5 are tried on a scratch database that is removed again; the store's own file is
only read (``mode=ro``), never created or migrated; with a key, through SQLCipher with that key.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ._backup import library_version, sqlite_has_wal_reset_bug
from ._errors import SchemaVersionError
from ._health import integrity_problems
from ._sqlite_engine import connect
from ._sqlite_keys import (
    CURRENT,
    Keying,
    StoreKey,
    StoreKeyError,
    cipher_versions,
    db_errors,
    file_is_plain,
)
from ._sqlite_schema import LATEST_VERSION, MIN_SQLITE, read_version
from .base import Finding

OK, WARN, FAIL = "ok", "warn", "fail"


def inspect(
    path: Path,
    *,
    make_dir: bool,
    resolve: Callable[[], StoreKey | None] = lambda: None,
    full: bool = False,
    min_free_bytes: int = 0,
) -> list[Finding]:
    """Findings "data dir", "sqlite", "WAL", "FTS5", "encryption" and "schema" for a store on the file
    ``path``, its key given by ``resolve``; then, for a file this MiniHermes opens, "WAL-reset bug", "disk",
    "WAL size", "integrity" (``quick_check``, ``integrity_check`` with ``full``) and "quarantine" (each row
    kept aside)."""
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
    try:
        key = resolve()
    except StoreKeyError as e:
        return [*out, Finding("encryption", FAIL, str(e))]
    encryption, schema = _encryption(path, key), _schema(path, key)
    out += [encryption, schema]
    out.append(_wal_bug(key))
    out.append(_disk(folder, min_free_bytes))
    if path.exists() and schema.status == OK and encryption.status == OK:
        out += _storage(path, key, full)
    return out


def _wal_bug(key: StoreKey | None) -> Finding:
    try:
        version = library_version(key)
    except StoreKeyError as e:
        return Finding("WAL-reset bug", FAIL, str(e))
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    if not sqlite_has_wal_reset_bug(parts):
        return Finding("WAL-reset bug", OK, f"SQLite {version} does not have it", False)
    return Finding(
        "WAL-reset bug",
        WARN,
        f"SQLite {version} has it (fixed in 3.51.3; backports 3.50.7 and 3.44.6): harmless with one node per "
        "data dir (the default, held by node.lock); several processes writing one file (shared_data_dir, a "
        "cluster on SQLite) can corrupt it: use PostgreSQL for those",
        False,
    )


def _disk(folder: Path, min_free_bytes: int) -> Finding:
    free = shutil.disk_usage(folder).free
    detail = f"{_size(free)} free on the disk of {folder}"
    if min_free_bytes and free < min_free_bytes:
        return Finding(
            "disk",
            WARN,
            f"{detail}, under min_free_bytes ({_size(min_free_bytes)}): a node refuses writes (reads go on)",
            False,
        )
    return Finding(
        "disk",
        OK,
        detail + (f" (writes refused under {_size(min_free_bytes)})" if min_free_bytes else ""),
        False,
    )


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _storage(path: Path, key: StoreKey | None, full: bool) -> list[Finding]:
    """WAL size, integrity and quarantine of an existing file (read only)."""
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size if wal.exists() else 0
    out = [
        Finding(
            "WAL size",
            OK,
            f"{_size(size)} ({'none: no node has it open' if not wal.exists() else wal.name})",
            False,
        )
    ]
    pragma = "integrity_check" if full else "quick_check"
    try:
        conn = connect(f"file:{path}?mode=ro", busy_timeout=5, key=key, uri=True)
    except (StoreKeyError, *db_errors(key)) as e:  # type: ignore[misc]
        return [*out, Finding("integrity", FAIL, f"{path} does not open: {e}")]
    try:
        problems = integrity_problems(conn, path if key is None else None, full=full)
        if problems == ["ok"]:
            out.append(
                Finding("integrity", OK, f"{pragma}: ok" + ("" if full else " (--full: integrity_check)"))
            )
        else:
            detail = f"{pragma} found: " + "; ".join(problems)
            out.append(Finding("integrity", FAIL, detail + ". Recover: docs/operations.md#recovering"))
        out += _quarantine(conn, key)
    finally:
        conn.close()
    return out


def _quarantine(conn: sqlite3.Connection, key: StoreKey | None, limit: int = 50) -> list[Finding]:
    try:
        total = conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]
        rows = conn.execute(
            "SELECT kind, tenant, ns, key, reason, at FROM quarantine ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
    except db_errors(key) as e:
        return [Finding("quarantine", FAIL, f"cannot read the quarantine table: {e}")]
    if not total:
        return [Finding("quarantine", OK, "no quarantined rows", False)]
    out = [
        Finding(
            "quarantine",
            WARN,
            f"{total} rows kept aside as undecodable (newest first below; `minihermes doctor --json` lists "
            "them; the data is in the quarantine table)",
            False,
        )
    ]
    for kind, tenant, ns, row_key, reason, at in rows:
        what = "actor state" if kind == "checkpoint" else f"{kind} row"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
        out.append(
            Finding("quarantined", WARN, f"{what} {tenant}/{ns} {row_key!r} at {when}Z: {reason}", False)
        )
    return out


def _encryption(path: Path, key: StoreKey | None) -> Finding:
    """``encrypted: yes (SQLCipher 4.19.0 community, key from env MINIHERMES_DB_KEY, raw 256-bit key,
    HMAC-SHA256 pages), SQLite 3.53.4`` or ``not encrypted (SQLite 3.40.1, stdlib)``."""
    if key is None:
        if file_is_plain(path) is False:
            return Finding(
                "encryption", FAIL, f"{path} is encrypted, and no key is configured (MINIHERMES_DB_KEY)"
            )
        return Finding("encryption", OK, f"not encrypted (SQLite {sqlite3.sqlite_version}, stdlib)", False)
    try:
        cipher, version = cipher_versions()
    except StoreKeyError as e:
        return Finding("encryption", FAIL, str(e))
    head, tail = (
        f"encrypted: yes (SQLCipher {cipher}, key from {key.source}, {key.kind}",
        f"), SQLite {version}",
    )
    if file_is_plain(path):
        return Finding(
            "encryption",
            FAIL,
            f"{head}{tail}; but {path} is a plain file: `minihermes keys rotate` encrypts it",
        )
    keying = Keying(key, path, None if path.exists() else CURRENT)
    if path.exists():
        try:
            connect(f"file:{path}?mode=ro", busy_timeout=5, keying=keying, uri=True).close()
        except StoreKeyError as e:
            return Finding("encryption", FAIL, str(e))
    pages = keying.profile.name if keying.profile is not None else CURRENT.name
    return Finding("encryption", OK, f"{head}, {pages} pages{tail}")


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


def _schema(path: Path, key: StoreKey | None) -> Finding:
    if not path.exists():
        return Finding(
            "schema",
            OK,
            f"no database yet (created on first start, version {LATEST_VERSION})",
            required=False,
        )
    try:
        conn = connect(f"file:{path}?mode=ro", busy_timeout=5, key=key, uri=True)
        try:
            have = read_version(conn)
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            conn.close()
    except SchemaVersionError:
        return Finding("schema", FAIL, f"{path} is not a MiniHermes database")
    except StoreKeyError as e:
        return Finding("schema", FAIL, str(e))
    except db_errors(key) as e:
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
