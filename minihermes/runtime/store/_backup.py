"""Backups of a SQLite store's data directory, checked by a manifest, and restoring one into a new directory.

A backup is a folder: the database as SQLite's online backup API copied it (``minihermes.db``), the data
directory's other files at their own paths (workspaces, ``credential.key``, ``anchor.key``, ...), and
``manifest.json`` (format, time, reason, schema version, SQLite version, whether the database is encrypted and
the key's source, never the key; each file's size and SHA-256). It is built under a hidden sibling name and
renamed into place at the end, so a folder with the backup's name is always a whole backup.

Consistency while a node serves: the copy reads the database through its own connection inside one read
transaction, so every page comes from one snapshot (WAL keeps it while the node goes on writing; the backup
API does not restart, as it would between two snapshots), and every write committed before the copy began is
in it. The copy goes ``pages`` pages per step with a ``pause`` between steps, so the node's readers and its
writer are never held off for long. The snapshot keeps the node from checkpointing past it until the copy is
done: the WAL grows meanwhile. An encrypted store (SQLCipher) is copied page by page into a file keyed with
the same key: the backup stays ciphertext under that key. The other files are copied as they are at that
moment (a workspace file being written may be caught half-written; the database never is).

Blocking (sqlite3 and file system calls): run it in a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ._errors import StoreError
from ._health import integrity_problems
from ._sqlite_engine import connect
from ._sqlite_keys import Keying, StoreKey, db_errors
from ._sqlite_schema import DB_FILENAME, read_version

MANIFEST = "manifest.json"
FORMAT = 1
BACKUPS_DIR = "backups"
"""Inside a data dir: the pre-migration backups (and scheduled ones, when configured there)."""
PRE_MIGRATION_PREFIX = "pre-migration-"
SCHEDULED_PREFIX = "scheduled-"
_LABEL = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
NOT_COPIED = frozenset({"node.lock", "node.json", "key-rotation.request.json", "key-rotation.result.json"})
"""A data dir's files that describe the running process, not the data."""
_DB_SUFFIXES = ("", "-wal", "-shm", "-journal")
_CHUNK = 1 << 20


class BackupError(StoreError):
    """A backup could not be made, or a backup folder is not a whole, unmodified backup."""


@dataclass(frozen=True)
class Rate:
    """How fast the database is copied: ``pages`` per step, then ``pause`` seconds (0: no pause)."""

    pages: int = 256
    pause: float = 0.01

    def __post_init__(self) -> None:
        if isinstance(self.pages, bool) or not isinstance(self.pages, int) or self.pages < 1:
            raise ValueError(f"pages per step must be a positive int, got {self.pages!r}")
        if not isinstance(self.pause, int | float) or self.pause < 0:
            raise ValueError(f"pause must be >= 0 seconds, got {self.pause!r}")


def sqlite_has_wal_reset_bug(version: tuple[int, ...]) -> bool:
    """Whether this SQLite has the WAL-reset bug (two connections checkpointing and writing at once can
    corrupt the database): every release before 3.51.3, except the backports 3.50.7+ and 3.44.6+."""
    v = tuple(version[:3])
    if v >= (3, 51, 3):
        return False
    if (3, 50, 7) <= v < (3, 51, 0) or (3, 44, 6) <= v < (3, 45, 0):
        return False
    return v >= (3, 7, 0)


def library_version(key: StoreKey | None) -> str:
    """The version of the SQLite a store with ``key`` runs on (SQLCipher bundles its own)."""
    if key is None:
        return sqlite3.sqlite_version
    from ._sqlite_keys import cipher_module

    return str(cipher_module().sqlite_version)


# -- copying ---------------------------------------------------------------------------------------------


def copy_database(
    source: Any, target: Path, keying: Keying | None, rate: Rate, *, busy_timeout: float = 5.0
) -> int | None:
    """Copy the database ``source`` (an open connection, not in a transaction) into the new file
    ``target`` inside one read transaction of ``source``; returns the schema version it copied. An
    encrypted source's ``keying`` (its key and cipher settings) keys the copy the same way."""
    dest_keying = None if keying is None else Keying(keying.key, target, keying.profile)
    dest = connect(target, busy_timeout=busy_timeout, keying=dest_keying)
    try:
        source.execute("BEGIN")
        try:
            version = read_version(source)  # also starts the read snapshot the copy is taken from

            def paced(status: int, remaining: int, total: int) -> None:
                if remaining and rate.pause:
                    time.sleep(rate.pause)

            source.backup(dest, pages=rate.pages, progress=paced)
        finally:
            source.execute("COMMIT")
        dest.execute("PRAGMA journal_mode = DELETE")  # one file, no -wal beside it
    finally:
        dest.close()
    return version


def backup_store(
    db_path: Path,
    dest: Path,
    *,
    key: StoreKey | None,
    rate: Rate = Rate(),
    reason: str = "manual",
    data_dir: Path | None = None,
    exclude: Iterable[Path] = (),
    busy_timeout: float = 5.0,
    read_only: bool = True,
) -> dict[str, Any]:
    """Back the store at ``db_path`` up into the new folder ``dest`` (absent, or an empty folder); with
    ``data_dir``, that folder's other files too (except ``exclude``, the process files and its ``backups``
    folder). ``read_only`` False: the caller holds the data dir (no node on it), and the copy's connection,
    the last one to close, takes the ``-wal``/``-shm`` files it made away again. Returns the manifest."""
    if not db_path.exists():
        raise BackupError(f"no database at {db_path}")
    _check_new_folder(dest, "backup destination")
    partial = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True, mode=0o700)
    try:
        keying = None if key is None else Keying(key, db_path)
        mode = "ro" if read_only else "rw"
        conn = connect(f"file:{db_path}?mode={mode}", busy_timeout=busy_timeout, keying=keying, uri=True)
        try:
            version = copy_database(conn, partial / DB_FILENAME, keying, rate, busy_timeout=busy_timeout)
        except db_errors(key) as e:
            raise BackupError(f"cannot copy {db_path}: {e}") from e
        finally:
            conn.close()
        extra = {
            "source": str(db_path.resolve()),
            "sqlite_version": library_version(key),
            "encrypted": key is not None,
            "key_source": key.source if key is not None else None,
            "quick_check": quick_check(partial / DB_FILENAME, key),
        }
        manifest = finish_backup(
            partial,
            dest,
            data_dir,
            backend="sqlite",
            schema_version=version,
            reason=reason,
            extra=extra,
            exclude=exclude,
        )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


def finish_backup(
    partial: Path,
    dest: Path,
    data_dir: Path | None,
    *,
    backend: str,
    schema_version: int | None,
    reason: str = "manual",
    extra: dict[str, Any] | None = None,
    exclude: Iterable[Path] = (),
) -> dict[str, Any]:
    """Complete a backup whose database copy (or dump) is in the folder ``partial``: the data dir's other
    files, the manifest, then ``partial`` renamed to ``dest``. Returns the manifest."""
    if data_dir is not None:
        skip = {p.resolve() for p in exclude} | {dest.resolve(), partial.resolve()}
        _copy_files(data_dir, partial, skip)
    manifest = {
        "format": FORMAT,
        "backend": backend,
        "reason": reason,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "created_at_unix": time.time(),
        "schema_version": schema_version,
        "encrypted": False,
        **(extra or {}),
        "files": [_describe(partial, p) for p in sorted(_walk(partial))],
    }
    _write_json(partial / MANIFEST, manifest)
    _fsync_dir(partial)
    os.rename(partial, dest)  # onto an empty folder too
    _fsync_dir(dest.parent)
    return manifest


def _check_new_folder(path: Path, what: str) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BackupError(f"{what} {path} exists and is not an empty folder: name a new one")


def _copy_files(data_dir: Path, into: Path, skip: set[Path]) -> None:
    """The data dir's files other than the database, as they are now (one vanishing meanwhile is skipped)."""
    db_files = {f"{DB_FILENAME}{s}" for s in _DB_SUFFIXES}
    for root, dirs, files in os.walk(data_dir):
        here = Path(root)
        rel = here.relative_to(data_dir)
        dirs[:] = sorted(
            d
            for d in dirs
            if (here / d).resolve() not in skip and not (rel == Path(".") and d == BACKUPS_DIR)
        )
        for name in sorted(files):
            if rel == Path(".") and (name in db_files or name in NOT_COPIED or name.startswith(".")):
                continue
            src = here / name
            if src.is_symlink() or src.resolve() in skip:
                continue
            target = into / rel / name
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(src, target)


def _walk(folder: Path) -> Iterable[Path]:
    for root, _dirs, files in os.walk(folder):
        for name in files:
            if Path(root) == folder and name == MANIFEST:
                continue
            yield Path(root) / name


def _describe(folder: Path, path: Path) -> dict[str, Any]:
    return {
        "path": path.relative_to(folder).as_posix(),
        "size": path.stat().st_size,
        "sha256": _sha256(path),
    }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _write_json(path: Path, data: Any) -> None:
    with path.open("w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def quick_check(path: Path, key: StoreKey | None, *, full: bool = False) -> list[str]:
    """``PRAGMA quick_check`` (``integrity_check`` with ``full``) of the file at ``path``, read only:
    ``["ok"]`` or the problems found, each with the table and page it is in (``_health``)."""
    conn = connect(f"file:{path}?mode=ro", busy_timeout=5, key=key, uri=True)
    try:
        return integrity_problems(conn, path if key is None else None, full=full)
    finally:
        conn.close()


# -- checking and restoring --------------------------------------------------------------------------------


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of the backup in ``folder``, its shape checked (not yet its files)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(f"{folder} is not a MiniHermes backup: it has no {MANIFEST}") from None
    except (OSError, ValueError) as e:
        raise BackupError(f"{folder / MANIFEST} cannot be read: {e}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise BackupError(f"{folder / MANIFEST} is not a backup manifest")
    if manifest.get("format") != FORMAT:
        raise BackupError(
            f"{folder}: backup format {manifest.get('format')!r} is not one this MiniHermes reads"
        )
    for entry in manifest["files"]:
        _safe_path(entry)
    return manifest


def _safe_path(entry: Any) -> PurePosixPath:
    path = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(path, str) or not isinstance(entry.get("sha256"), str):
        raise BackupError(f"backup manifest: a file entry is malformed: {entry!r}")
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise BackupError(f"backup manifest: file path {path!r} leaves the backup folder")
    return pure


def verify_backup(folder: Path) -> dict[str, Any]:
    """Check every file the manifest lists (present, same size, same SHA-256) and that nothing else is
    there; returns the manifest, or raises ``BackupError`` naming the first file that differs."""
    manifest = read_manifest(folder)
    listed = set()
    for entry in manifest["files"]:
        rel = _safe_path(entry)
        listed.add(rel.as_posix())
        path = folder / rel
        if not path.is_file():
            raise BackupError(f"corrupted backup {folder}: {rel} is missing")
        if path.stat().st_size != entry.get("size") or _sha256(path) != entry["sha256"]:
            raise BackupError(f"corrupted backup {folder}: {rel} does not match its checksum in {MANIFEST}")
    if manifest.get("backend", "sqlite") == "sqlite" and DB_FILENAME not in listed:
        raise BackupError(f"{folder}: the manifest lists no {DB_FILENAME}")
    unlisted = sorted(
        p.relative_to(folder).as_posix()
        for p in _walk(folder)
        if p.relative_to(folder).as_posix() not in listed
    )
    if unlisted:
        raise BackupError(f"corrupted backup {folder}: {unlisted[0]} is not in {MANIFEST}")
    return manifest


def restore_backup(
    folder: Path, data_dir: Path, *, key_for: Callable[[dict[str, Any]], StoreKey | None] | None = None
) -> dict[str, Any]:
    """Check the backup in ``folder`` and copy it into ``data_dir`` (absent, or an empty folder), built
    under a hidden sibling name and renamed into place. ``key_for(manifest)``: the key of an encrypted
    backup, to check that the restored database opens; None skips that check. Returns the manifest."""
    manifest = verify_backup(folder)
    _check_new_folder(data_dir, "restore target")
    partial = data_dir.parent / f".{data_dir.name}.restoring-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True, mode=0o700)
    try:
        for entry in manifest["files"]:
            rel = _safe_path(entry)
            target = partial / rel
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            shutil.copy2(folder / rel, target)
            if _sha256(target) != entry["sha256"]:
                raise BackupError(f"{target}: the copy does not match its checksum (disk error?)")
        key = key_for(manifest) if key_for is not None else None
        sqlite = manifest.get("backend", "sqlite") == "sqlite"
        if sqlite and (key is not None or not manifest.get("encrypted")):
            db = partial / DB_FILENAME
            try:
                problems = quick_check(db, key)
                conn = connect(f"file:{db}?mode=ro", busy_timeout=5, key=key, uri=True)
                try:
                    version = read_version(conn)
                finally:
                    conn.close()
            except (StoreError, *db_errors(key)) as e:  # type: ignore[misc]
                raise BackupError(f"the restored database does not open: {e}") from e
            if problems != ["ok"]:
                raise BackupError(f"the restored database fails its check: {'; '.join(problems)}")
            if version != manifest.get("schema_version"):
                raise BackupError(
                    f"the restored database is at schema {version}, the manifest says "
                    f"{manifest.get('schema_version')}"
                )
        _fsync_dir(partial)
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        os.rename(partial, data_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


# -- keeping N -----------------------------------------------------------------------------------------------


def prune(folder: Path, prefix: str, keep: int) -> list[Path]:
    """Remove the oldest backups named ``prefix*`` in ``folder`` beyond the newest ``keep`` (by their
    manifests' time; a folder without a readable manifest counts as oldest). Returns what was removed."""
    found = []
    if not folder.is_dir():
        return []
    for path in folder.iterdir():
        if not path.is_dir() or not path.name.startswith(prefix):
            continue
        try:
            at = float(json.loads((path / MANIFEST).read_text()).get("created_at_unix", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            at = 0.0
        found.append((at, path.name, path))
    found.sort()
    removed = [path for _at, _name, path in found[: max(0, len(found) - keep)]]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def pre_migration_backup(
    db_path: Path, key: StoreKey | None, *, keep: int, before: int, after: int, folder: Path | None = None
) -> Path | None:
    """Before migrating the store at ``db_path`` from schema ``before`` to ``after``: a backup of the
    database in ``folder`` (default ``<its folder>/backups``) named ``pre-migration-...``, then the oldest
    beyond ``keep`` removed. ``keep`` 0 takes none. Refuses (``BackupError``) when the disk lacks room for
    the copy: the migration then does not run either."""
    if keep <= 0:
        return None
    folder = folder or db_path.parent / BACKUPS_DIR
    need = sum(p.stat().st_size for p in _db_files(db_path))
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    free = shutil.disk_usage(folder).free
    if free < need * 2:
        raise BackupError(
            f"not migrating {db_path} from schema {before} to {after}: the backup taken first needs about "
            f"{need} bytes and {folder} has {free} free; free space, or set pre_migration_backups = 0"
        )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = f"{PRE_MIGRATION_PREFIX}v{before}-to-v{after}-{stamp}"
    dest = folder / name
    n = 1
    while dest.exists():  # two in one second
        n += 1
        dest = folder / f"{name}-{n}"
    backup_store(db_path, dest, key=key, rate=Rate(pages=4096, pause=0), reason="pre-migration")
    prune(folder, PRE_MIGRATION_PREFIX, keep)
    return dest


def _db_files(db_path: Path) -> list[Path]:
    return [p for s in _DB_SUFFIXES if (p := Path(f"{db_path}{s}")).exists()]


def scheduled_backup(
    db_path: Path, key: StoreKey | None, folder: Path, *, keep: int, label: str = "", rate: Rate = Rate()
) -> dict[str, Any]:
    """A backup of the store and its data dir into ``folder`` (the configured backups folder, never a path
    from a caller), named ``scheduled-<UTC time>[-label]``, then the oldest such backups beyond ``keep``
    removed. Returns what was made: its path, size, schema version, and the names removed."""
    if label and not _LABEL.fullmatch(label):
        raise ValueError("label: 1-40 lower-case letters, digits and '-', starting with a letter or digit")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = f"{SCHEDULED_PREFIX}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}" + (
        f"-{label}" if label else ""
    )
    dest, n = folder / name, 1
    while dest.exists():
        n += 1
        dest = folder / f"{name}-{n}"
    manifest = backup_store(
        db_path, dest, key=key, rate=rate, reason="scheduled", data_dir=db_path.parent, exclude=[folder]
    )
    removed = prune(folder, SCHEDULED_PREFIX, keep)
    return {
        "path": str(dest),
        "created_at": manifest["created_at"],
        "schema_version": manifest["schema_version"],
        "files": len(manifest["files"]),
        "bytes": sum(f["size"] for f in manifest["files"]),
        "encrypted": manifest["encrypted"],
        "quick_check": manifest["quick_check"],
        "removed": [p.name for p in removed],
    }
