"""``@call(concurrent=True)``: while the instance runs, the call is handled at once in the caller's task,
beside a handler the actor is busy with, instead of waiting in the mailbox behind it (how a running turn is
stopped). An actor not active yet is activated through its mailbox as usual."""

from __future__ import annotations

import asyncio
from typing import Any

from minihermes.runtime import ActorCrashed, ActorSpec, GenServer, InvalidArgument, call, state
from minihermes.runtime._context import RequestContext, current_context

from .conftest import tree

ACME = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))


class Busy(GenServer):
    stops: int = state(default=0)

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.release = asyncio.Event()

    @call
    async def work(self) -> str:
        await self.release.wait()
        return "done"

    @call
    def plain(self) -> str:
        return "plain"

    @call(concurrent=True)
    async def stop(self, reason: str = "") -> dict[str, Any]:
        if reason == "bad":
            raise InvalidArgument("bad reason", field="reason")
        if reason == "bug":
            raise RuntimeError("a bug")
        self.stops += 1
        self.release.set()
        return {"principal": current_context().principal, "stops": self.stops}


async def test_a_concurrent_call_runs_beside_a_busy_handler(make_node: Any) -> None:
    node = await make_node(tree(ActorSpec("busy", Busy, per_tenant=True)))
    assert await node.ask("busy", "plain", {}, ctx=ACME) == "plain"  # active now
    work = asyncio.ensure_future(node.ask("busy", "work", {}, ctx=ACME))
    queued = asyncio.ensure_future(node.ask("busy", "plain", {}, ctx=ACME))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not work.done() and not queued.done()
    # Through the mailbox this would wait behind ``work`` forever; it releases it instead.
    reply = await asyncio.wait_for(node.ask("busy", "stop", {}, ctx=ACME), 5)
    assert reply == {"principal": "alice", "stops": 1}  # in the caller's context
    assert await asyncio.wait_for(work, 5) == "done"
    assert await asyncio.wait_for(queued, 5) == "plain"


async def test_errors_of_a_concurrent_call(make_node: Any) -> None:
    node = await make_node(tree(ActorSpec("busy", Busy, per_tenant=True)))
    try:
        await node.ask("busy", "stop", {"reason": "bad"}, ctx=ACME)
    except InvalidArgument as e:
        assert e.message == "bad reason"
    else:
        raise AssertionError("no error")
    try:
        await node.ask("busy", "stop", {"reason": "bug"}, ctx=ACME)
    except ActorCrashed:
        pass
    else:
        raise AssertionError("no crash")
    # The actor crashed in its own loop and was restarted: it answers again.
    reply = await asyncio.wait_for(node.ask("busy", "stop", {}, ctx=ACME), 5)
    assert reply["principal"] == "alice"


def test_concurrent_is_for_the_decorator_form_only() -> None:
    try:
        call(lambda self: None, concurrent=True)  # type: ignore[call-overload]
    except TypeError:
        return
    raise AssertionError("no TypeError")
