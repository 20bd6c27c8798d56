"""SQLite backups (consistent while written, checked by their manifest, restored only into a new folder), the
backup taken before a schema migration (N kept), and the store's health: a damaged page named, a full disk
refusing writes while reads go on."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from minihermes.runtime.store import (
    BACKUPS_DIR,
    BackupError,
    Rate,
    StorageFull,
    StoreFault,
    _sqlite_schema,
    backup_store,
    open_store,
    restore_backup,
    verify_backup,
)
from minihermes.runtime.store.sqlite import SqliteStore

S = ("acme", "main")


async def test_a_backup_taken_under_writes_has_every_write_acknowledged_before_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = open_store("sqlite", data_dir=str(data))
    await store.open()
    (data / "workspaces" / "acme" / "s1").mkdir(parents=True)
    (data / "workspaces" / "acme" / "s1" / "notes.md").write_text("kept")
    acked: list[int] = []
    stop, enough = asyncio.Event(), asyncio.Event()

    async def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            n = w * 1_000_000 + i
            await store.kv.put(S, f"k{n}", {"n": n, "pad": "x" * 200})
            acked.append(n)
            if len(acked) >= 400:
                enough.set()
            i += 1

    writers = [asyncio.create_task(writer(w)) for w in range(20)]
    await enough.wait()
    before = list(acked)  # acknowledged before the backup started
    manifest = await asyncio.to_thread(
        backup_store, store.path, tmp_path / "bk", key=None, data_dir=data, rate=Rate(pages=8, pause=0.001)
    )
    stop.set()
    await asyncio.gather(*writers)
    await store.close()
    assert len(acked) > len(before)  # the writers went on during the copy
    assert manifest["schema_version"] == _sqlite_schema.LATEST_VERSION and manifest["quick_check"] == ["ok"]
    assert manifest["encrypted"] is False and manifest["sqlite_version"] == sqlite3.sqlite_version
    assert {f["path"] for f in manifest["files"]} == {"minihermes.db", "workspaces/acme/s1/notes.md"}

    restore_backup(tmp_path / "bk", tmp_path / "new")
    async with open_store("sqlite", data_dir=str(tmp_path / "new")) as restored:
        for n in before:
            assert await restored.kv.get(S, f"k{n}") == {"n": n, "pad": "x" * 200}
    assert (tmp_path / "new" / "workspaces" / "acme" / "s1" / "notes.md").read_text() == "kept"


async def test_restore_refuses_a_used_target_and_a_corrupted_backup(tmp_path: Path) -> None:
    async with open_store("sqlite", data_dir=str(tmp_path / "data")) as store:
        await store.kv.put(S, "k", 1)
        backup_store(store.path, tmp_path / "bk", key=None, data_dir=tmp_path / "data")
    with pytest.raises(BackupError, match="exists and is not an empty folder"):
        backup_store(tmp_path / "data" / "minihermes.db", tmp_path / "bk", key=None)
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("mine")
    with pytest.raises(BackupError, match="exists and is not an empty folder"):
        restore_backup(tmp_path / "bk", used)
    assert sorted(p.name for p in used.iterdir()) == ["x"]

    db = tmp_path / "bk" / "minihermes.db"
    raw = bytearray(db.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte
    db.write_bytes(bytes(raw))
    with pytest.raises(BackupError, match=r"corrupted backup .*minihermes\.db does not match its checksum"):
        restore_backup(tmp_path / "bk", tmp_path / "new")
    assert not (tmp_path / "new").exists()
    (tmp_path / "bk" / "manifest.json").unlink()
    with pytest.raises(BackupError, match="not a MiniHermes backup"):
        verify_backup(tmp_path / "bk")


async def test_an_encrypted_store_is_backed_up_encrypted_with_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sqlcipher3")
    monkeypatch.setenv("MINIHERMES_DB_KEY", "5f" * 32)
    async with open_store("sqlite", data_dir=str(tmp_path / "data")) as store:
        await store.kv.put(S, "secret", {"v": "plain words"})
        assert isinstance(store, SqliteStore)
        key = store.resolve_key()
        manifest = backup_store(store.path, tmp_path / "bk", key=key)
    assert manifest["encrypted"] is True and manifest["key_source"] == "env MINIHERMES_DB_KEY"
    copy = (tmp_path / "bk" / "minihermes.db").read_bytes()
    assert not copy.startswith(b"SQLite format 3") and b"plain words" not in copy
    restore_backup(tmp_path / "bk", tmp_path / "new", key_for=lambda m: key)
    async with open_store("sqlite", data_dir=str(tmp_path / "new")) as restored:
        assert await restored.kv.get(S, "secret") == {"v": "plain words"}
    monkeypatch.delenv("MINIHERMES_DB_KEY")
    with pytest.raises(Exception, match="encrypted"):
        await open_store("sqlite", data_dir=str(tmp_path / "new")).open()


CURRENT = _sqlite_schema.LATEST_VERSION


def _plant_migration(monkeypatch: pytest.MonkeyPatch, step: object) -> None:
    latest = CURRENT + 1
    monkeypatch.setitem(_sqlite_schema.MIGRATIONS, latest, step)
    monkeypatch.setattr(_sqlite_schema, "LATEST_VERSION", latest)


async def test_a_migration_is_preceded_by_a_backup_that_restore_brings_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with open_store("sqlite", data_dir=str(data)) as store:
        for i in range(50):
            await store.kv.put(S, f"k{i}", {"i": i})
    version = _sqlite_schema.LATEST_VERSION

    def wipes_then_fails(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM kv")
        raise RuntimeError("planted failure")

    def wipes(conn: sqlite3.Connection) -> None:  # a migration that "succeeds" and loses the data
        conn.execute("DELETE FROM kv")

    with monkeypatch.context() as m:
        _plant_migration(m, wipes_then_fails)
        with pytest.raises(RuntimeError, match="planted failure"):
            await open_store("sqlite", data_dir=str(data)).open()
        _plant_migration(m, wipes)
        async with open_store("sqlite", data_dir=str(data)) as migrated:
            assert await migrated.kv.get(S, "k1") is None  # the bad migration's damage
    backups = sorted((data / BACKUPS_DIR).iterdir())
    assert [b.name.split("-20")[0] for b in backups] == [f"pre-migration-v{version}-to-v{version + 1}"] * 2
    manifest = json.loads((backups[-1] / "manifest.json").read_text())
    assert manifest["reason"] == "pre-migration" and manifest["schema_version"] == version

    restore_backup(backups[-1], tmp_path / "restored")
    async with open_store("sqlite", data_dir=str(tmp_path / "restored")) as restored:
        assert await restored.schema_version() == version
        assert [await restored.kv.get(S, f"k{i}") for i in range(50)] == [{"i": i} for i in range(50)]


async def test_pre_migration_backups_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    async with open_store("sqlite", data_dir=str(data)):
        pass

    def fails(conn: sqlite3.Connection) -> None:
        raise RuntimeError("planted failure")

    _plant_migration(monkeypatch, fails)
    for _ in range(5):  # a start that fails again and again (a restart loop) keeps at most N backups
        with pytest.raises(RuntimeError):
            await open_store("sqlite", data_dir=str(data), pre_migration_backups=2).open()
    assert len(list((data / BACKUPS_DIR).iterdir())) == 2
    with pytest.raises(RuntimeError):
        await open_store("sqlite", data_dir=str(data), pre_migration_backups=0).open()
    assert len(list((data / BACKUPS_DIR).iterdir())) == 2


def damage_a_page(db: Path, table: str) -> int:
    """Garble the cell pointers of one leaf page of ``table``; returns its page number."""
    with sqlite3.connect(db) as conn:
        page = conn.execute(
            "SELECT max(pageno) FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,)
        ).fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    with db.open("r+b") as f:
        f.seek((page - 1) * size + 8)
        f.write(b"\xff\xf0\xff\xf0")
    return int(page)


async def test_a_damaged_page_makes_the_store_degraded_and_doctor_names_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with open_store("sqlite", data_dir=str(data)) as store:
        for i in range(300):
            await store.kv.put(S, f"k{i}", {"v": "x" * 100})
        assert store.health()["status"] == "ok"  # type: ignore[attr-defined]
    page = damage_a_page(data / "minihermes.db", "kv")

    store = open_store("sqlite", data_dir=str(data))
    await store.open()
    try:
        assert isinstance(store, SqliteStore)
        await store._integrity  # the open-time quick_check
        health = store.health()
        assert health["status"] == "degraded"
        assert f"page {page} of table kv" in health["reason"]
        findings = {f.name: f for f in await store.doctor()}
        integrity = findings["integrity"]
        assert integrity.status == "fail" and integrity.required
        assert f"page {page} of table kv" in integrity.detail
        assert findings["quarantine"].status == "ok"
        with pytest.raises(
            StoreFault
        ) as fault:  # a scan meets the page: a structured error, not a short list
            await store.kv.list(S)
        assert fault.value.code == "store_fault" and fault.value.http_status == 503
        assert "malformed" in fault.value.message and store.health()["errors"] >= 1
    finally:
        await store.close()


async def test_writes_are_refused_under_the_free_disk_minimum_and_reads_go_on(tmp_path: Path) -> None:
    async with open_store("sqlite", data_dir=str(tmp_path / "d")) as store:
        assert isinstance(store, SqliteStore)
        await store.kv.put(S, "before", 1)
        store._engine.min_free_bytes = 1 << 62  # more than any disk has
        with pytest.raises(StorageFull, match="writes are refused until there is room; reads go on") as e:
            await store.kv.put(S, "after", 2)
        assert e.value.code == "storage_full" and e.value.details["min_free_bytes"] == 1 << 62
        assert await store.kv.get(S, "before") == 1
        health = store.health()
        assert health["status"] == "degraded" and health["faults"][0]["kind"] == "disk"
        store._engine.min_free_bytes = 1
        await store.kv.put(S, "after", 2)  # room again: writes go on, the fault clears
        assert store.health()["status"] == "ok"


async def test_backups_through_the_store_keep_the_newest_n(tmp_path: Path) -> None:
    elsewhere = tmp_path / "bk"
    store = open_store(
        "sqlite", data_dir=str(tmp_path / "d"), backups_dir=str(elsewhere), scheduled_backups=2
    )
    async with store:
        assert isinstance(store, SqliteStore)
        made = [await store.backup(label=f"n{i}") for i in range(4)]
        with pytest.raises(ValueError, match="label"):
            await store.backup(label="../up")
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted(Path(m["path"]).name for m in made[-2:])
    assert made[2]["removed"] == [Path(made[0]["path"]).name]
    verify_backup(Path(made[-1]["path"]))
