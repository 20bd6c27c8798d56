"""One node per data dir: the advisory lock a node holds while it runs, what it records beside it, and the OS
dropping it when the holder is SIGKILLed."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from minihermes.runtime import AppConfig, DataDirBusy, DataDirLock, build_node, running_node

from .._proc import kill_hard


def test_the_lock_records_its_holder_and_refuses_a_second_one(tmp_path):
    data = tmp_path / "data"
    assert running_node(data) is None
    first = DataDirLock(data)
    first.acquire(url="http://127.0.0.1:1")
    info = json.loads((data / "node.json").read_text())
    assert info["pid"] == os.getpid() and info["url"] == "http://127.0.0.1:1"
    assert info["data_dir"] == str(data.resolve()) and info["started_at"] > 0
    assert running_node(data) == info

    with pytest.raises(DataDirBusy) as e:
        DataDirLock(data).acquire()  # another descriptor conflicts, even in the same process
    assert e.value.holder == info
    assert f"pid {os.getpid()}" in str(e.value) and "http://127.0.0.1:1" in str(e.value)

    first.update(auth=True)
    assert running_node(data) == {**info, "auth": True}
    first.release()
    assert running_node(data) is None and not (data / "node.json").exists()
    DataDirLock(data).acquire()  # free again


def test_a_stale_record_without_a_held_lock_is_ignored(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "node.lock").touch()
    (data / "node.json").write_text(json.dumps({"pid": os.getpid(), "url": "http://127.0.0.1:9"}))
    assert running_node(data) is None
    lock = DataDirLock(data)
    lock.acquire()
    assert "url" not in json.loads((data / "node.json").read_text())  # replaced, not merged
    lock.release()


async def test_an_unclustered_sqlite_node_holds_its_data_dir_while_it_runs(tmp_path):
    cfg = AppConfig.from_dict({"node": {"data_dir": str(tmp_path / "data"), "id": "n1"}})
    first, second = build_node(cfg), build_node(cfg)
    assert first.data_dir_lock is not None
    await first.start()
    assert running_node(tmp_path / "data")["node_id"] == "n1"  # type: ignore[index]
    with pytest.raises(DataDirBusy):
        await second.start()
    await first.stop()
    assert running_node(tmp_path / "data") is None
    await second.start()  # the store was never opened by the refused start: it starts cleanly now
    await second.stop()

    holder = build_node(cfg)
    await holder.start()
    # Nodes sharing a dir on purpose (a cluster's, or configured so) take no lock.
    shared_cfg = AppConfig.from_dict(
        {"node": {"data_dir": str(tmp_path / "data"), "id": "n2", "shared_data_dir": True}}
    )
    shared = build_node(shared_cfg)
    assert shared.data_dir_lock is None
    await shared.start()
    await shared.stop()
    await holder.stop()


async def test_the_lock_goes_with_a_sigkilled_holder(tmp_path):
    data = tmp_path / "data"
    code = (
        "import sys; from minihermes.runtime import DataDirLock\n"
        "DataDirLock(sys.argv[1]).acquire(url='http://held')\n"
        "print('locked', flush=True); sys.stdin.read()\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, str(data), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    assert (await asyncio.wait_for(proc.stdout.readline(), 60)).strip() == b"locked"
    holder = running_node(data)
    assert holder is not None and holder["pid"] == proc.pid and holder["url"] == "http://held"
    with pytest.raises(DataDirBusy, match=f"pid {proc.pid}"):
        DataDirLock(data).acquire()
    await kill_hard(proc)
    assert (data / "node.json").exists()  # left behind by the crash, and ignored
    assert running_node(data) is None
    lock = DataDirLock(data)
    lock.acquire()
    lock.release()
