"""The free-disk floor's check is not a statvfs per write batch: room found is trusted for a while under the
same minimum; a short disk is looked at again by every batch, and a changed minimum is checked at once."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime.store import StorageFull, _sqlite_engine, open_store
from minihermes.runtime.store.sqlite import SqliteStore

S = ("acme", "main")
GB = 1 << 30


async def test_room_is_trusted_for_the_interval_a_short_disk_is_looked_at_every_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = {"free": 10 * GB, "looks": 0}
    real = shutil.disk_usage

    def disk_usage(path: Any) -> Any:
        disk["looks"] += 1
        got = real(path)
        return type(got)(got.total, got.total - disk["free"], disk["free"])

    async with open_store("sqlite", data_dir=str(tmp_path / "d")) as store:
        assert isinstance(store, SqliteStore)
        monkeypatch.setattr(_sqlite_engine, "DISK_CHECK_INTERVAL", 3600.0)
        monkeypatch.setattr(_sqlite_engine.shutil, "disk_usage", disk_usage)
        store._engine.min_free_bytes = GB  # a new minimum: the next batch looks
        await store.kv.put(S, "a", 1)
        assert disk["looks"] == 1
        for i in range(5):
            await store.kv.put(S, f"b{i}", i)
        assert disk["looks"] == 1  # room was found a moment ago: no statvfs per batch

        store._engine.min_free_bytes = 11 * GB  # raised over what is free: refused at once
        with pytest.raises(StorageFull):
            await store.kv.put(S, "c", 1)
        assert disk["looks"] == 2
        with pytest.raises(StorageFull):  # while short, every batch looks again
            await store.kv.put(S, "c", 1)
        assert disk["looks"] == 3 and store.health()["status"] == "degraded"

        disk["free"] = 12 * GB  # room made: the first batch after it goes through
        await store.kv.put(S, "c", 1)
        assert disk["looks"] == 4 and store.health()["status"] == "ok"
        assert await store.kv.get(S, "c") == 1

        disk["free"] = 0  # the disk fills within the interval: seen once the interval is over
        await store.kv.put(S, "d", 1)
        assert disk["looks"] == 4
        monkeypatch.setattr(_sqlite_engine, "DISK_CHECK_INTERVAL", 0.0)
        await store.kv.put(S, "e", 1)  # the last look's window (3600 s) still holds
        assert disk["looks"] == 4
        store._engine._room_until = 0.0  # the window is over
        with pytest.raises(StorageFull):
            await store.kv.put(S, "f", 1)
        assert disk["looks"] == 5
