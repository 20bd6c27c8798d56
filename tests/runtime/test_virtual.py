"""Virtual (keyed) actors and per-tenant instances."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import (
    ActorSpec,
    GenServer,
    InvalidArgument,
    ManualClock,
    RequestContext,
    call,
    current_context,
    state,
)
from minihermes.runtime.store._pg_testing import test_store_backend as backend_under_test

from .actors import Counter, Door
from .conftest import tree

A = RequestContext(tenant="acme")
B = RequestContext(tenant="globex")


async def test_keyed_by_address_or_key_field(make_node):
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True, key_field="amount")))
    await node.ask("nb/s1", "add", {"amount": 1})
    await node.ask("nb/s2", "add", {"amount": 5})
    assert (await node.ask("nb/s1", "get"))["count"] == 1
    assert (await node.ask("nb/s1", "get"))["init"][0] == "nb/s1"
    with pytest.raises(InvalidArgument):
        await node.ask("nb", "get")


async def test_key_field_routing(make_node):
    from .actors import Recorder

    node = await make_node(tree(ActorSpec("rec", Recorder, virtual=True, key_field="value")))
    node.send("rec", "note", {"value": "s9"})
    assert await node.ask("rec/s9", "get") == [["note", "s9"]]


async def test_idle_deactivation_and_reactivation_with_state(make_node, clock: ManualClock):
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True, idle_timeout=60)))
    await node.ask("nb/s1", "add", {"amount": 3})
    assert len(node.cells("nb")) == 1
    await clock.advance(30)
    await node.ask("nb/s1", "get")  # activity postpones deactivation
    await clock.advance(45)
    assert len(node.cells("nb")) == 1
    (cell,) = node.cells("nb")
    await clock.advance(20)
    await cell.task  # the instance flushes and ends on its own
    assert node.cells("nb") == []
    assert (await node.ask("nb/s1", "get"))["count"] == 3
    assert node.metrics.counter("actor_starts_total", actor="nb") == 2


async def test_same_key_in_two_tenants_is_two_actors(make_node):
    node = await make_node(tree(ActorSpec("nb", Counter, virtual=True)))
    await node.ask("nb/s1", "add", {"amount": 1}, ctx=A)
    await node.ask("nb/s1", "add", {"amount": 10}, ctx=B)
    assert (await node.ask("nb/s1", "get", ctx=A))["count"] == 1
    assert (await node.ask("nb/s1", "get", ctx=B))["count"] == 10


async def test_per_tenant_service_changes_never_cross_tenants(make_node):
    node = await make_node(tree(ActorSpec("policy", Door, per_tenant=True)))
    await node.ask("policy", "transition", {"to": "locked"}, ctx=A)
    assert (await node.ask("policy", "get_state", ctx=A))["state"] == "locked"
    assert (await node.ask("policy", "get_state", ctx=B))["state"] == "closed"
    await node.stop()
    node2 = await make_node(tree(ActorSpec("policy", Door, per_tenant=True)))
    assert (await node2.ask("policy", "get_state", ctx=A))["state"] == "locked"
    assert (await node2.ask("policy", "get_state", ctx=B))["state"] == "closed"


async def test_a_key_no_store_can_hold_is_refused_before_activation(make_node):
    """A NUL (or any control character) in a key used to crash-loop the activation and stop the node."""
    node = await make_node(tree(ActorSpec("v", _KeyEcho, virtual=True)))
    for bad in ("a\x00b", "line\nbreak", "x" * 600):
        with pytest.raises(InvalidArgument):
            await node.ask(f"v/{bad}", "who")
    assert await node.ask("v/fine", "who") == "v/fine"
    assert not node.failed.is_set()


class _KeyEcho(GenServer):
    @call
    def who(self) -> str:
        return self.actor_id


class _ReadsItsFile:
    """Reads ``<dir>/<key>.txt`` on every activation (``Actor.preload``); mixed into the actors below."""

    preloaded: Any

    def preload(self, actor_id: str, args: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        path = Path(args["dir"]) / f"{actor_id.partition('/')[2]}.txt"
        tenant = current_context().tenant  # preload runs in the actor's own (system) context

        def read() -> dict[str, Any]:
            if path.name.startswith("bad"):
                raise OSError(f"cannot read {path.name}")
            text = path.read_text() if path.exists() else ""
            return {"text": text, "thread": threading.current_thread().name, "tenant": tenant}

        return read

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.seen = self.preloaded or {"text": None}  # None: the read failed (and was logged)


class _Preloaded(_ReadsItsFile, GenServer):
    """With state: the file is read in the trip that reads the checkpoint."""

    count: int = state(default=0)

    @call
    def add(self, amount: int) -> int:
        self.count += amount
        return self.count

    @call
    def info(self) -> dict[str, Any]:
        return {"count": self.count, **self.seen}


class _StatelessPreloaded(_ReadsItsFile, GenServer):
    """Without state: no checkpoint to read, the function still runs off the loop."""

    @call
    def info(self) -> dict[str, Any]:
        return dict(self.seen)


async def test_preload_is_read_off_the_loop_with_the_state_on_every_activation(
    make_node, clock: ManualClock, tmp_path
):
    spec = ActorSpec("p", _Preloaded, virtual=True, idle_timeout=60, args={"dir": str(tmp_path)})
    node = await make_node(tree(spec))
    (tmp_path / "k1.txt").write_text("first")
    await node.ask("p/k1", "add", {"amount": 2}, ctx=A)
    info = await node.ask("p/k1", "info", ctx=A)
    assert info["text"] == "first" and info["tenant"] == "acme" and info["count"] == 2
    assert info["thread"] != threading.current_thread().name
    if backend_under_test() == "sqlite":  # one trip: the reader thread that read the checkpoint
        assert info["thread"].startswith("minihermes-sqlite-reader")
    (tmp_path / "k1.txt").write_text("second")
    assert (await node.ask("p/k1", "info", ctx=A))["text"] == "first"  # read once per activation
    (cell,) = node.cells("p")
    await clock.advance(61)
    await cell.task  # deactivated; the next message activates it again
    info = await node.ask("p/k1", "info", ctx=A)
    assert info["text"] == "second" and info["count"] == 2


async def test_a_failing_preload_is_logged_and_the_actor_still_activates(make_node, tmp_path, caplog):
    node = await make_node(tree(ActorSpec("p", _Preloaded, virtual=True, args={"dir": str(tmp_path)})))
    assert await node.ask("p/bad1", "add", {"amount": 3}) == 3
    assert (await node.ask("p/bad1", "info")) == {"count": 3, "text": None}
    assert "p/bad1: preload failed" in caplog.text and "cannot read bad1.txt" in caplog.text
    assert not node.failed.is_set()


async def test_an_actor_without_state_gets_its_preload_too(make_node, tmp_path):
    (tmp_path / "k2.txt").write_text("hello")
    spec = ActorSpec("p", _StatelessPreloaded, virtual=True, args={"dir": str(tmp_path)})
    node = await make_node(tree(spec))
    assert _StatelessPreloaded._state_fields == {}
    info = await node.ask("p/k2", "info")
    assert info["text"] == "hello" and info["thread"] != threading.current_thread().name
    assert not info["thread"].startswith("minihermes-sqlite")  # its own worker: no store trip to share
