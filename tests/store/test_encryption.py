"""Encryption at rest (issue 25): with a key, nothing a person gave MiniHermes is readable in any SQLite file.

A user puts a unique token into a chat, a memory, a workspace file, a kanban card, a cron prompt, a goal and
an inbox (``tests/security/test_erasure.seed``) on a node whose store has a key, and nobody forgets anything:
after the node stops no file under the data dir but the workspace file holds the token in any form (database,
-wal, -shm: the blobs and the full-text indexes are pages of the database). Without the key, or with a wrong
one, the store refuses to open with one line naming the key's source. ``doctor`` reports the cipher, the
key's source and the SQLite version. ``minihermes keys rotate`` re-encrypts the store of a serving node, which
keeps serving; a SIGKILL at any point of a rotation leaves a store that opens with exactly one of the two keys
and holds all its data.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.cli import doctor as dr
from minihermes.runtime import ConfigError, DataDirLock
from minihermes.runtime.store import StoreKeyError, open_store

from .._proc import kill_hard, read_line, spawn_module
from .._server import ROOT, serve_process
from ..security.test_erasure import ALICE, holders, new_token, seed

KEY = "5f" * 32
OTHER_KEY = "a7" * 32
PASSPHRASE = "a long passphrase for the tests"
SCOPE = ("acme", "main")


def provide_key() -> bytes:
    """A key-provider hook (``encryption_key_provider = "tests.store.test_encryption:provide_key"``)."""
    return bytes.fromhex(KEY)


def key_file(folder: Path, name: str, value: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(value + "\n")
    path.chmod(0o600)
    return path


async def test_with_a_key_no_sqlite_file_holds_what_a_user_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIHERMES_DB_KEY", KEY)
    data = tmp_path / "data"
    token = new_token()
    node = build_agent_node(default_config(data))
    await node.start()
    try:
        await seed(node, ALICE, token, "alice-job")  # nothing is forgotten
    finally:
        await node.stop(deadline=10)
    found = holders(data, token)
    # Workspace files are plain on purpose (sandboxed tools read them): the token is there, and only there.
    assert found and all(f.startswith("workspaces/") for f in found), found
    assert (data / "minihermes.db").stat().st_size > 100_000  # the chat, the card, ... are in there
    assert not (data / "minihermes.db").read_bytes().startswith(b"SQLite format 3")


async def test_without_the_key_or_with_a_wrong_one_the_store_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("MINIHERMES_DB_KEY", KEY)
    async with open_store("sqlite", data_dir=data) as store:
        await store.kv.put(SCOPE, "k", {"v": "secret value"})
        await store.blobs.put(SCOPE, "b", b"secret blob")

    monkeypatch.delenv("MINIHERMES_DB_KEY")
    with pytest.raises(StoreKeyError, match=r"minihermes.db is encrypted .*MINIHERMES_DB_KEY") as plain:
        await open_store("sqlite", data_dir=data).open()
    assert isinstance(plain.value, ConfigError)  # `serve` prints it as one line
    monkeypatch.setenv("MINIHERMES_DB_KEY", OTHER_KEY)
    with pytest.raises(StoreKeyError, match=r"at env MINIHERMES_DB_KEY: the key does not open .*wrong key"):
        await open_store("sqlite", data_dir=data).open()
    with pytest.raises(StoreKeyError) as wrong:
        await open_store("sqlite", data_dir=data).open()
    assert OTHER_KEY not in str(wrong.value) and KEY not in str(wrong.value)

    # The key from a file outside the data dir, and from a provider hook, open it.
    monkeypatch.delenv("MINIHERMES_DB_KEY")
    outside = key_file(tmp_path / "keys", "db.key", KEY)
    for options in (
        {"encryption_key_file": str(outside)},
        {"encryption_key_provider": "tests.store.test_encryption:provide_key"},
    ):
        async with open_store("sqlite", data_dir=data, **options) as store:
            assert await store.kv.get(SCOPE, "k") == {"v": "secret value"}
            assert await store.blobs.get(SCOPE, "b") == b"secret blob"
            assert store.key_source in (f"file {outside}", "provider tests.store.test_encryption:provide_key")  # type: ignore[attr-defined]

    # Refused before anything is opened: a key file inside the data dir, a short key, both options.
    inside = key_file(data, "db.key", KEY)
    with pytest.raises(StoreKeyError, match="inside the data directory"):
        await open_store("sqlite", data_dir=data, encryption_key_file=str(inside)).open()
    monkeypatch.setenv("MINIHERMES_DB_KEY", "short")
    with pytest.raises(StoreKeyError, match="too short"):
        await open_store("sqlite", data_dir=data).open()
    with pytest.raises(ValueError, match="not both"):
        open_store("sqlite", data_dir=data, encryption_key_file=str(outside), encryption_key_provider="a.b:c")

    # A key for a plain store is refused too, rather than used to read plain text.
    monkeypatch.delenv("MINIHERMES_DB_KEY")
    async with open_store("sqlite", data_dir=tmp_path / "plain"):
        pass
    monkeypatch.setenv("MINIHERMES_DB_KEY", KEY)
    with pytest.raises(StoreKeyError, match="is not encrypted but a key is configured"):
        await open_store("sqlite", data_dir=tmp_path / "plain").open()


async def test_doctor_reports_the_cipher_the_key_source_and_the_sqlite_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("MINIHERMES_DB_KEY", PASSPHRASE)
    async with open_store("sqlite", data_dir=data):
        pass
    (check,) = [c for c in await dr.check_storage(data) if c.name == "encryption"]
    assert check.status == "ok", check
    assert check.detail.startswith(
        "encrypted: yes (SQLCipher 4.19.0 community, key from env MINIHERMES_DB_KEY"
    )
    assert check.detail.endswith("), SQLite 3.53.4") and "passphrase" in check.detail
    schema = next(c for c in await dr.check_storage(data) if c.name == "schema")
    assert schema.status == "ok" and "(current)" in schema.detail

    monkeypatch.delenv("MINIHERMES_DB_KEY")
    (check,) = [c for c in await dr.check_storage(data) if c.name == "encryption"]
    assert check.status == "fail" and check.required and "no key is configured" in check.detail
    monkeypatch.setenv("MINIHERMES_DB_KEY", OTHER_KEY)
    (check,) = [c for c in await dr.check_storage(data) if c.name == "encryption"]
    assert check.status == "fail" and "the key does not open" in check.detail

    monkeypatch.delenv("MINIHERMES_DB_KEY")
    (check,) = [c for c in await dr.check_storage(tmp_path / "fresh") if c.name == "encryption"]
    assert (
        check.status == "ok"
        and check.detail.startswith("not encrypted (SQLite ")
        and "stdlib" in check.detail
    )


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("MINIHERMES_")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "minihermes.cli.main", *args],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def remember(url: str, key: str, value: str) -> None:
    reply = httpx.post(
        f"{url}/api/v1/actors/memory/store_memory", json={"key": key, "value": value}, timeout=30
    )
    assert reply.status_code == 200, reply.text


def recall(url: str) -> dict[str, str]:
    reply = httpx.post(f"{url}/api/v1/actors/memory/list_memories", json={"limit": 100}, timeout=30)
    assert reply.status_code == 200, reply.text
    return {m["key"]: m["value"] for m in reply.json()["memories"]}


def test_keys_rotate_re_encrypts_while_the_node_serves(tmp_path: Path) -> None:
    data = tmp_path / "data"
    new_key = key_file(tmp_path / "keys", "new.key", OTHER_KEY)
    with serve_process(data, [], env={"MINIHERMES_DB_KEY": KEY}) as url:
        remember(url, "before", "written before the rotation")
        out = run_cli("keys", "rotate", "--data-dir", str(data), "--new-key-file", str(new_key))
        assert out.returncode == 0, out.stderr
        assert "by the node serving it" in out.stdout and f"file {new_key}" in out.stdout
        # still serving, reads and writes on connections under the new key
        remember(url, "after", "written after the rotation")
        assert recall(url) == {"before": "written before the rotation", "after": "written after the rotation"}
        assert httpx.get(f"{url}/readyz", timeout=10).status_code == 200

    # Only the new key opens it now; a start with the old one says which key the file wants.
    doctor = run_cli("doctor", "--json", "--data-dir", str(data), env={"MINIHERMES_DB_KEY": OTHER_KEY})
    assert '"encrypted: yes (SQLCipher' in doctor.stdout
    old = run_cli("serve", "--data-dir", str(data), "--port", "0", env={"MINIHERMES_DB_KEY": KEY})
    assert old.returncode == 2 and "Traceback" not in old.stderr
    assert f"the key does not open {data / 'minihermes.db'}" in old.stderr
    assert "re-encrypted at" in old.stderr and f"with the key from file {new_key}" in old.stderr


async def test_keys_rotate_encrypts_a_plain_store_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with open_store("sqlite", data_dir=data) as store:
        await store.kv.put(SCOPE, "k", {"v": "Plain words 4711"})
    assert b"Plain words 4711" in (data / "minihermes.db").read_bytes()
    new_key = key_file(tmp_path / "keys", "db.key", PASSPHRASE)
    out = await asyncio.to_thread(
        run_cli, "keys", "rotate", "--data-dir", str(data), "--new-key-file", str(new_key)
    )
    assert out.returncode == 0 and "it was plain until now" in out.stdout, out.stderr
    assert holders(data, "Plain words 4711") == []

    # A process holding the data dir that takes no rotation (an embedded node, a CLI command) is not signalled.
    lock = DataDirLock(data)
    lock.acquire(command="minihermes chat")
    try:
        out = await asyncio.to_thread(
            run_cli, "keys", "rotate", "--data-dir", str(data), "--new-key-file", str(new_key)
        )
    finally:
        lock.release()
    assert out.returncode == 1 and "takes no key rotation" in out.stderr, out.stderr
    monkeypatch.setenv("MINIHERMES_DB_KEY", PASSPHRASE)
    async with open_store("sqlite", data_dir=data) as store:
        assert await store.kv.get(SCOPE, "k") == {"v": "Plain words 4711"}


# -- SIGKILL mid-rotation --------------------------------------------------------------------------------------

BLOBS = 24
BLOB_SIZE = 1_000_000
"""About 24 MB: a rotation rewrites every page, long enough to be killed in the middle."""


async def fill(data: Path) -> dict[str, str]:
    """A store under KEY with blobs and KV records; returns every blob's sha256 by name."""
    digests = {}
    async with open_store("sqlite", data_dir=data) as store:
        for i in range(BLOBS):
            body = os.urandom(BLOB_SIZE)
            digests[f"b{i}"] = hashlib.sha256(body).hexdigest()
            await store.blobs.put(SCOPE, f"b{i}", body)
        for i in range(200):
            await store.kv.put(SCOPE, f"k{i}", {"i": i})
    return digests


def wal_reaches(wal: Path, size: float, missed: threading.Event) -> None:
    """Return once ``wal`` holds ``size`` bytes (so many pages are rewritten), or ``missed`` is set."""
    while not missed.is_set():
        if wal.exists() and wal.stat().st_size >= size:
            return
        time.sleep(0.0005)  # a poll of the file's size, not a wait for something to happen


async def open_with_either(data: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    """Which of the two keys opens the store, and what it holds (exactly one key must)."""
    opened: list[tuple[str, dict[str, Any]]] = []
    for name, key in (("old", KEY), ("new", OTHER_KEY)):
        monkeypatch.setenv("MINIHERMES_DB_KEY", key)
        store = open_store("sqlite", data_dir=data)
        try:
            await store.open()
        except StoreKeyError:
            continue
        try:
            blobs = {f"b{i}": await store.blobs.get(SCOPE, f"b{i}") for i in range(BLOBS)}
            kv = {f"k{i}": await store.kv.get(SCOPE, f"k{i}") for i in range(200)}
            contents = {
                "blobs": {
                    n: hashlib.sha256(b).hexdigest() if b is not None else None for n, b in blobs.items()
                },
                "kv": kv,
            }
        finally:
            await store.close()
        opened.append((name, contents))
    assert len(opened) == 1, [name for name, _ in opened]
    return opened[0]


async def test_a_sigkill_mid_rotation_leaves_a_store_one_key_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIHERMES_DB_KEY", KEY)
    original = tmp_path / "original"
    digests = await fill(original)
    new_key = key_file(tmp_path / "keys", "new.key", OTHER_KEY)
    size = (original / "minihermes.db").stat().st_size
    outcomes = {}
    # Kill once a tenth, then half of the pages are rewritten into the WAL, once all are, and after the end.
    for point in (0.1, 0.5, 1.0, "rotated"):
        data = tmp_path / f"at-{point}"
        await asyncio.to_thread(shutil.copytree, original, data)
        monkeypatch.setenv("MINIHERMES_DB_KEY", KEY)  # the child's current key
        child = await spawn_module("tests.store._rotation_worker", str(data), str(new_key))
        try:
            assert await read_line(child) == "rotating"
            if point == "rotated":
                assert await read_line(child) == "rotated"
            else:
                missed = threading.Event()  # the child said "rotated": the point went by unseen
                done = asyncio.ensure_future(read_line(child))
                done.add_done_callback(lambda _, missed=missed: missed.set())
                await asyncio.to_thread(wal_reaches, data / "minihermes.db-wal", float(point) * size, missed)
                done.cancel()
        finally:
            await kill_hard(child)
        assert child.returncode == -signal.SIGKILL
        name, contents = await open_with_either(data, monkeypatch)
        outcomes[point] = name
        assert contents["blobs"] == digests
        assert contents["kv"] == {f"k{i}": {"i": i} for i in range(200)}
    # Killed before the commit: the old key; after it (1.0: during the checkpoint, or after): the new one.
    assert outcomes[0.1] == outcomes[0.5] == "old" and outcomes["rotated"] == "new", outcomes
