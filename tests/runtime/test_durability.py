"""Checkpoints: interval, restore across node restarts, rollback, corrupt rows, state migration."""

from __future__ import annotations

import json
from typing import Any

import pytest

from minihermes.runtime import ActorCrashed, ActorSpec, GenServer, call, state
from minihermes.runtime.store import open_store
from minihermes.runtime.store._pg_testing import test_store_backend as backend_under_test

from .actors import Counter
from .conftest import tree

SQLITE_FILE = pytest.mark.skipif(
    backend_under_test() != "sqlite", reason="reads or writes the SQLite file itself"
)


async def test_state_survives_a_node_restart(make_node, tmp_path):
    node = await make_node(tree(ActorSpec("counter", Counter)))
    await node.ask("counter", "add", {"amount": 7})
    await node.stop()
    node2 = await make_node(tree(ActorSpec("counter", Counter)))
    assert (await node2.ask("counter", "get"))["count"] == 7


async def test_checkpoint_interval_n_saves_every_nth_message(make_node, tmp_path):
    node = await make_node(tree(ActorSpec("c", Counter, checkpoint_interval=3)))
    await node.ask("c", "get")  # activation done (its on_init change is saved at once)
    base = node.metrics.counter("checkpoints_total")
    for _ in range(7):
        await node.ask("c", "add", {"amount": 1})
    assert node.metrics.counter("checkpoints_total") - base == 2
    cp = await node.store.checkpoints.load(("system", "default"), "c")
    assert json.loads(cp.data)["count"] == 5  # get + 2 adds, then 3 adds; the 7th add is not saved yet


async def test_default_interval_checkpoints_before_the_reply(make_node):
    node = await make_node(tree(ActorSpec("c", Counter)))
    await node.ask("c", "add", {"amount": 4})
    cp = await node.store.checkpoints.load(("system", "default"), "c")
    assert json.loads(cp.data)["count"] == 4


async def test_read_only_messages_do_not_write(make_node):
    node = await make_node(tree(ActorSpec("c", Counter)))
    await node.ask("c", "get")
    base = node.metrics.counter("checkpoints_total")
    for _ in range(5):
        await node.ask("c", "get")
    assert node.metrics.counter("checkpoints_total") == base


async def test_graceful_stop_flushes_interval_state(make_node):
    node = await make_node(tree(ActorSpec("c", Counter, checkpoint_interval=100)))
    for _ in range(3):
        await node.ask("c", "add", {"amount": 1})
    await node.stop()
    node2 = await make_node(tree(ActorSpec("c", Counter, checkpoint_interval=100)))
    assert (await node2.ask("c", "get"))["count"] == 3


@SQLITE_FILE
async def test_corrupt_checkpoint_is_quarantined_and_actor_starts_empty(make_node, tmp_path, clock):
    store = open_store("sqlite", data_dir=str(tmp_path / "data"), clock=clock)
    await store.open()
    await store.checkpoints.save(("system", "default"), "c", 1, b"{not json")
    await store.checkpoints.save(("system", "default"), "d", 1, json.dumps({"count": "seven"}).encode())
    await store.close()
    node = await make_node(tree(ActorSpec("c", Counter), ActorSpec("d", Counter)))
    assert (await node.ask("c", "get"))["count"] == 0
    assert (await node.ask("d", "get"))["count"] == 0
    q = await node.store.quarantine.list()
    assert {r.key for r in q} == {"c", "d"}
    assert all("corrupt checkpoint" in r.reason for r in q)
    incidents = await node.store.events.read(("system", "__runtime__"), "incidents")
    assert len(incidents) == 2
    assert node.metrics.counter("actor_restarts_total") == 0  # no restart loop
    await node.ask("c", "add", {"amount": 2})
    assert (await node.ask("c", "get"))["count"] == 2


class CounterV1(GenServer):
    total: int = state(default=0)

    @call
    def add(self, amount: int = 1) -> int:
        self.total += amount
        return self.total


class CounterV2(GenServer):
    state_version = 2
    count: int = state(default=0)
    history: list[int] = state(default_factory=list)

    @classmethod
    def migrate_state(cls, from_version: int, data: dict[str, Any]) -> dict[str, Any]:
        if from_version == 1:
            return {"count": data["total"], "history": []}
        return data

    @call
    def get(self) -> dict[str, Any]:
        return {"count": self.count, "history": self.history}


async def test_saved_state_migrates_to_the_new_state_version(make_node):
    node = await make_node(tree(ActorSpec("c", CounterV1)))
    await node.ask("c", "add", {"amount": 9})
    await node.stop()
    node2 = await make_node(tree(ActorSpec("c", CounterV2)))
    assert await node2.ask("c", "get") == {"count": 9, "history": []}
    cp = await node2.store.checkpoints.load(("system", "default"), "c")
    assert cp.state_version == 2


async def test_state_from_a_newer_version_is_quarantined_not_misread(make_node):
    node = await make_node(tree(ActorSpec("c", CounterV2)))
    await node.store.checkpoints.save(("system", "default"), "x", 3, b'{"count": 1}')
    await node.stop()
    node2 = await make_node(tree(ActorSpec("x", CounterV2)))
    assert (await node2.ask("x", "get"))["count"] == 0
    assert any("newer" in r.reason for r in await node2.store.quarantine.list())


@SQLITE_FILE
async def test_node_opens_a_data_dir_written_in_an_older_storage_format(make_node, tmp_path):
    from minihermes.runtime.store import sqlite_v1_fixture  # ships with the backend for such tests

    data = tmp_path / "old"
    await sqlite_v1_fixture(data, checkpoints={("system", "default", "c"): {"count": 11}})
    node = await make_node(tree(ActorSpec("c", Counter)), data_dir=data)
    assert (await node.ask("c", "get"))["count"] == 11
    assert await node.store.schema_version() >= 2


async def test_unserializable_state_crashes_the_message_not_the_node(make_node):
    class Bad(GenServer):
        v: Any = state(default=None)

        @call
        def set_obj(self) -> None:
            self.v = object()

        @call
        def get(self) -> Any:
            return self.v

    from minihermes.runtime import ActorCrashed

    node = await make_node(tree(ActorSpec("bad", Bad)))
    with pytest.raises(ActorCrashed):
        await node.ask("bad", "set_obj")
    assert await node.ask("bad", "get") is None


async def test_pipelined_checkpoints_release_each_reply_after_its_state_is_durable(make_node):
    import asyncio

    node = await make_node(tree(ActorSpec("c", Counter)))
    await node.ask("c", "get")
    replies = await asyncio.gather(*(node.ask("c", "add", {"amount": 1}) for _ in range(50)))
    assert sorted(r["count"] for r in replies) == list(range(1, 51))
    cp = await node.store.checkpoints.load(("system", "default"), "c")
    assert json.loads(cp.data)["count"] == 50
    # a crash right after: the restarted actor waits for the last commits before restoring
    with pytest.raises(ActorCrashed):
        await node.ask("c", "crash")
    assert (await node.ask("c", "get"))["count"] == 50


@pytest.mark.parametrize("path", ["save_callback", "save_nowait"])
async def test_a_failed_commit_fails_the_reply_and_restarts_from_disk(make_node, monkeypatch, path):
    """Both ways a store reports a commit (callback fast path; future for stores without it)."""
    node = await make_node(tree(ActorSpec("c", Counter)))
    await node.ask("c", "add", {"amount": 2})
    checkpoints = node.store.checkpoints

    def failing_future(*args, **kwargs):
        import asyncio

        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(OSError("disk full"))
        return fut

    def failing_callback(scope, actor_id, version, data, callback):
        callback(OSError("disk full"))

    with monkeypatch.context() as m:
        if path == "save_callback":
            m.setattr(checkpoints, "save_callback", failing_callback)
        else:
            m.setattr(checkpoints, "save_callback", None)
            m.setattr(checkpoints, "save_nowait", failing_future)
        with pytest.raises(ActorCrashed):
            await node.ask("c", "add", {"amount": 5})
    assert (await node.ask("c", "get"))["count"] == 2  # the unsaved +5 was never confirmed, and is gone


async def test_state_with_values_orjson_refuses_still_checkpoints(make_node):
    class Big(GenServer):
        n: int = state(default=0)
        tags: list[str] = state(default_factory=list)

        @call
        def huge(self) -> int:
            self.n = 2**80  # beyond 64 bits: JSON carries it, orjson does not
            self.tags = sorted({"b", "a"})
            return self.n

        @call
        def get(self) -> int:
            return self.n

    node = await make_node(tree(ActorSpec("big", Big)))
    assert await node.ask("big", "huge") == 2**80
    await node.stop()
    node2 = await make_node(tree(ActorSpec("big", Big)))
    assert await node2.ask("big", "get") == 2**80


async def test_save_soon_lets_the_actor_go_on_but_not_the_reply(make_node, monkeypatch):
    """``host.save_soon`` registers the checkpoint and returns at once; ``wait_saved`` and the reply wait
    until it is durable (here: until the test lets the store's commit finish)."""
    import asyncio

    steps: list[str] = []
    reached = asyncio.Event()
    registered = asyncio.Event()

    class Stepper(GenServer):
        n: int = state(default=0)

        @call
        async def step(self) -> int:
            self.n += 1
            self.host.save_soon()
            steps.append("saved-soon")  # reached before the commit finished
            reached.set()
            await self.host.wait_saved()
            steps.append("durable")
            self.n += 0  # unchanged: no second save at the end of the message
            self.host.save_soon()
            return self.n

        @call
        def bump(self) -> int:
            self.n += 1
            self.host.save_soon()
            return self.n  # the reply waits for the save started here

    node = await make_node(tree(ActorSpec("s", Stepper)))
    await node.ask("s", "bump")
    checkpoints = node.store.checkpoints
    gate: list[asyncio.Future[None]] = []
    real = checkpoints.save_nowait

    def gated(*args, **kwargs):
        inner = real(*args, **kwargs)
        outer = asyncio.get_running_loop().create_future()
        gate.append(outer)
        inner.add_done_callback(lambda f: gate.append(f))
        registered.set()
        return outer

    monkeypatch.setattr(checkpoints, "save_nowait", gated)
    pending = asyncio.ensure_future(node.ask("s", "step"))
    await reached.wait()
    assert steps == ["saved-soon"] and not pending.done()
    gate[0].set_result(None)
    assert await pending == 2 and steps == ["saved-soon", "durable"]

    registered.clear()
    reply = asyncio.ensure_future(node.ask("s", "bump"))
    await registered.wait()
    for _ in range(20):  # let the handler return and the runtime settle what it can
        await asyncio.sleep(0)
    assert not reply.done()  # the handler returned; its save is not durable yet
    for f in gate:
        if not f.done():
            f.set_result(None)
    assert await reply == 3


async def test_a_failed_save_soon_stops_the_actor_before_its_next_step(make_node, monkeypatch):
    """``wait_saved`` raises when a save started with ``save_soon`` failed (so no side effect follows it),
    and a reply waiting on such a save fails too; the actor restarts from its last durable state."""
    import asyncio

    effects: list[str] = []

    class Careful(GenServer):
        n: int = state(default=0)

        @call
        async def step(self) -> int:
            self.n += 1
            self.host.save_soon()
            await self.host.wait_saved()
            effects.append("side effect")  # never reached when the save failed
            return self.n

        @call
        def bump(self) -> int:
            self.n += 1
            self.host.save_soon()
            return self.n

        @call
        def get(self) -> int:
            return self.n

    node = await make_node(tree(ActorSpec("c", Careful)))
    assert await node.ask("c", "bump") == 1
    checkpoints = node.store.checkpoints

    def failing(*args, **kwargs):
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(OSError("disk full"))
        return fut

    with monkeypatch.context() as m:
        m.setattr(checkpoints, "save_nowait", failing)
        with pytest.raises(ActorCrashed):
            await node.ask("c", "step")
        assert effects == []
    assert await node.ask("c", "get") == 1  # restarted from the last durable state
    with monkeypatch.context() as m:
        m.setattr(checkpoints, "save_nowait", failing)
        with pytest.raises(ActorCrashed):
            await node.ask("c", "bump")
    assert await node.ask("c", "get") == 1
