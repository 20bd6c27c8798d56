"""Key rotation of an encrypted SQLite store: while a node serves it, or offline.

While serving (``rotate_key`` with a node on the data dir): the command writes ``key-rotation.request.json``
beside the database (an id and the new key's file: never the key) and sends the node SIGUSR2; the node reads
the request, re-encrypts its open store (``SqliteStore.rotate_key``: one SQLite transaction, readers held) and
writes ``key-rotation.result.json`` with the same id. The node keeps serving with the new key; the operator
then configures that key for the next start.

Offline (no node): the command holds the data dir's lock, opens the store with its current key and does the
same; a plain store is encrypted by copying it into a new file under the new key (``sqlcipher_export``, with
the settings of a new file: ``_sqlite_keys.CURRENT``) and renaming that over the old one, so a crash leaves
either the plain file or the encrypted one, whole. A re-encryption keeps the file's salt and settings.

Each success is recorded in ``key-rotation.json`` (when, and the new key's source): a start with the old key
then says which key the file wants now.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._datadir import DataDirBusy, DataDirLock, running_node
from ._errors import StoreError
from ._sqlite_engine import connect
from ._sqlite_keys import (
    CURRENT,
    RECORD_FILE,
    Keying,
    StoreKey,
    StoreKeyError,
    check_key_file,
    cipher_module,
    file_is_plain,
    parse_key,
    resolve_key,
)

if TYPE_CHECKING:
    from .sqlite import SqliteStore

log = logging.getLogger("minihermes.runtime.store.sqlite")

REQUEST_FILE = "key-rotation.request.json"
RESULT_FILE = "key-rotation.result.json"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically (a reader sees the old file or the new one), durably."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def record_rotation(db: Path, key: StoreKey) -> None:
    """Remember that ``db`` is under the key from ``key.source`` since now (no secret is written)."""
    _write_json(db.parent / RECORD_FILE, {"rotated_at": time.time(), "key_source": key.source})


# -- the serving node's side ---------------------------------------------------------------------------------


async def serve_rotation_request(store: SqliteStore) -> None:
    """Run the request beside ``store``'s database, if any, and write its result."""
    folder = store.path.parent
    try:
        request = json.loads(await asyncio.to_thread((folder / REQUEST_FILE).read_text))
        rid, new_key_file = str(request["id"]), str(request["new_key_file"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("key rotation: no readable request in %s (%s)", folder, e)
        return
    result: dict[str, Any] = {"id": rid}
    try:
        key = await asyncio.to_thread(resolve_key, key_file=new_key_file, key_provider=None, data_dir=folder)
        if key is None:  # not reached: a file is given
            raise StoreKeyError("key rotation", "no new key")
        log.info("key rotation: re-encrypting %s with the key from %s", store.path, key.source)
        started = time.monotonic()
        await store.rotate_key(key)
        result |= {"ok": True, "key_source": key.source, "seconds": round(time.monotonic() - started, 3)}
        log.info(
            "key rotation: done in %.2fs; the store is under the key from %s", result["seconds"], key.source
        )
    except (StoreError, ValueError, OSError) as e:
        log.error("key rotation failed: %s", e)
        result |= {"ok": False, "error": str(e)}
    await asyncio.to_thread(_write_json, folder / RESULT_FILE, result)


# -- the command's side --------------------------------------------------------------------------------------


def request_rotation(
    data_dir: Path, pid: int, new_key_file: Path, *, timeout: float = 3600.0
) -> dict[str, Any]:
    """Ask the node ``pid`` serving ``data_dir`` to re-encrypt its store with the key in ``new_key_file``;
    returns its result (``ok``, ``key_source`` or ``error``). Blocking."""
    rid = uuid.uuid4().hex
    _write_json(data_dir / REQUEST_FILE, {"id": rid, "new_key_file": str(new_key_file.resolve())})
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + timeout
    result_path = data_dir / RESULT_FILE
    while time.monotonic() < deadline:
        try:
            result = json.loads(result_path.read_text())
        except (OSError, ValueError):
            result = None
        if isinstance(result, dict) and result.get("id") == rid:
            (data_dir / REQUEST_FILE).unlink(missing_ok=True)
            return result
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return {"id": rid, "ok": False, "error": f"the node (pid {pid}) stopped before answering"}
        time.sleep(0.05)
    return {"id": rid, "ok": False, "error": f"no answer from the node (pid {pid}) in {timeout:.0f}s"}


def encrypt_plain_file(db: Path, key: StoreKey) -> None:
    """Encrypt the plain store ``db`` (no connection open on it) with ``key``: a copy under the key
    (``sqlcipher_export``), made durable, then renamed over the plain file. Blocking."""
    if file_is_plain(db) is not True:
        raise StoreKeyError(key.source, f"{db} is not a plain SQLite database")
    driver = cipher_module()
    staged = db.with_name(f".{db.name}.encrypting")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{staged}{suffix}").unlink(missing_ok=True)
    keying = Keying(key, staged, CURRENT)
    conn = driver.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ATTACH DATABASE ? AS sealed KEY ?", (str(staged), keying.secret()))
        for pragma in CURRENT.pragmas():  # before the first page of it is written
            conn.execute(pragma.replace("PRAGMA ", "PRAGMA sealed.", 1))
        conn.execute("PRAGMA sealed.auto_vacuum = INCREMENTAL")  # as the store makes its files
        conn.execute("SELECT sqlcipher_export('sealed')")
        conn.execute("DETACH DATABASE sealed")
    finally:
        conn.close()  # the last connection: SQLite checkpoints and removes the WAL
    check = connect(staged, busy_timeout=5.0, keying=keying)
    try:
        check.execute("PRAGMA journal_mode = WAL")
        if check.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise StoreError(f"the encrypted copy of {db} does not check out; the plain file is unchanged")
    finally:
        check.close()
    with staged.open("rb+") as f:
        os.fsync(f.fileno())
    wal = Path(f"{db}-wal")
    if wal.exists() and wal.stat().st_size:
        raise StoreError(f"{wal} still holds commits (is another process using {db}?); nothing was changed")
    wal.unlink(missing_ok=True)
    Path(f"{db}-shm").unlink(missing_ok=True)
    os.replace(staged, db)
    _fsync_dir(db.parent)
    for suffix in ("-wal", "-shm"):
        Path(f"{staged}{suffix}").unlink(missing_ok=True)
    record_rotation(db, key)


# -- the command ----------------------------------------------------------------------------------------------


async def rotate_store_key(
    data_dir: str | os.PathLike[str], new_key_file: str | os.PathLike[str], **options: Any
) -> dict[str, Any]:
    """Re-encrypt the SQLite store in ``data_dir`` with the key in ``new_key_file`` (``minihermes keys
    rotate``): through the node serving it if one runs (it keeps serving), else offline under the data dir's
    lock; a plain store is encrypted. ``options`` are the store's (its current key's source). Returns
    ``{"ok", "mode": "served" | "offline" | "encrypted", "key_source"}`` or ``{"ok": False, "error"}``; a
    refused new key raises ``StoreKeyError``."""
    from .sqlite import SqliteStore

    folder = Path(data_dir)
    path = check_key_file(new_key_file, folder)
    try:
        new_key = parse_key(await asyncio.to_thread(path.read_bytes), f"file {path}")
    except OSError as e:
        raise StoreKeyError(f"file {path}", f"cannot read the new key: {e.strerror or e}") from None
    holder = running_node(folder)
    if holder is not None:
        pid = holder.get("pid")
        if not holder.get("key_rotation") or not isinstance(pid, int):
            return {
                "ok": False,
                "error": f"{DataDirBusy(folder, holder)} takes no key rotation (`minihermes serve` does, "
                "once started): stop it and run this again",
            }
        result = await asyncio.to_thread(request_rotation, folder, pid, path)
        return {**result, "mode": "served"}
    lock = DataDirLock(folder)
    try:
        lock.acquire(command="minihermes keys rotate")
    except DataDirBusy as e:
        return {"ok": False, "error": f"{e}: try again (the command then asks it)"}
    try:
        store = SqliteStore(data_dir=folder, **options)
        current = await asyncio.to_thread(store.resolve_key)
        plain = file_is_plain(store.path)
        if plain is None:
            return {
                "ok": False,
                "error": f"no store in {folder} yet: configure the key and start the node (it creates the store "
                "encrypted)",
            }
        if plain:
            await asyncio.to_thread(encrypt_plain_file, store.path, new_key)
            return {"ok": True, "mode": "encrypted", "key_source": new_key.source}
        if current is None:
            raise StoreKeyError(
                "encryption", f"{store.path} is encrypted: configure its current key to rotate it"
            )
        await store.open()
        try:
            await store.rotate_key(new_key)
        finally:
            await store.close()
        return {"ok": True, "mode": "offline", "key_source": new_key.source}
    finally:
        lock.release()
