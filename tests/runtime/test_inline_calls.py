"""A plain (not async) call or cast to an idle actor runs in its sender's task (``Cell.call_inline``): the
same contract as through the mailbox (one message at a time, the actor's context, rollback on an ActorError,
crash and restart on any other exception, reply after the checkpoint commit, events forwarded), without a
task wake-up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from minihermes.runtime import (
    ActorCrashed,
    ActorSpec,
    GenServer,
    InvalidArgument,
    InvalidTransition,
    call,
    cast,
    state,
)
from minihermes.runtime._cell import current_cell
from minihermes.runtime._context import RequestContext, current_context

from .actors import EVENTS, Audit, Door, Sink
from .conftest import tree


class Probe(GenServer):
    n: int = state(default=0)
    seen: list[Any] = state(default_factory=list)

    @call
    def where(self) -> dict[str, Any]:
        cell = current_cell.get()
        return {
            "task": asyncio.current_task(),
            "cell": cell.address if cell is not None else None,
            "tenant": current_context().tenant,
        }

    @call
    def add(self, amount: int) -> int:
        self.n += amount
        return self.n

    @call
    def add_then_refuse(self, amount: int) -> int:
        self.n += amount
        raise InvalidArgument("refused after changing state", field="amount")

    @call
    def add_then_crash(self, amount: int) -> int:
        self.n += amount
        raise RuntimeError("boom")

    @cast
    def note(self, item: str) -> None:
        self.seen.append(item)

    @cast
    async def note_async(self, item: str) -> None:
        self.seen.append(item)

    @cast
    def note_where(self, item: str) -> None:
        self.seen.append([item, asyncio.current_task() is not self.host_task()])

    @cast
    def relay(self, item: str) -> None:
        """Casts on to itself from a handler that may run inline."""
        self.seen.append(item)
        self.host.send(self.actor_id, "note_where", {"item": f"{item}-relayed"})

    @cast
    def explode(self) -> None:
        raise RuntimeError("boom in a cast")

    def host_task(self) -> asyncio.Task[Any] | None:
        cell = current_cell.get()
        return None if cell is None else cell.task

    @call
    def get(self) -> dict[str, Any]:
        return {"n": self.n, "seen": self.seen}


async def test_a_plain_call_to_an_idle_actor_runs_in_the_callers_task_as_the_actor(make_node):
    node = await make_node(tree(ActorSpec("p", Probe)))
    await node.ask("p", "get")  # started and idle
    ctx = RequestContext(tenant="acme", namespace="default", principal="u1")
    got = await node.ask("p", "where", ctx=ctx)
    assert got["task"] is asyncio.current_task()  # no hop through the actor's task
    assert got["cell"] == "p" and got["tenant"] == "acme"
    # the caller's own context is back afterwards
    assert current_cell.get() is None and current_context().tenant != "acme"


async def test_a_call_behind_queued_mail_waits_its_turn(make_node):
    node = await make_node(tree(ActorSpec("p", Probe)))
    await node.ask("p", "get")
    node.send("p", "note_async", {"item": "first"})  # queued (async: never inline): no longer idle
    got = await node.ask("p", "where")
    assert got["task"] is not asyncio.current_task()  # handled by the actor's loop, after the cast
    assert (await node.ask("p", "get"))["seen"] == ["first"]


async def test_an_actor_error_inline_rolls_the_state_back(make_node):
    node = await make_node(tree(ActorSpec("p", Probe)))
    assert await node.ask("p", "add", {"amount": 2}) == 2
    with pytest.raises(InvalidArgument) as e:
        await node.ask("p", "add_then_refuse", {"amount": 5})
    assert e.value.code == "invalid_argument" and e.value.details["field"] == "amount"
    assert (await node.ask("p", "get"))["n"] == 2


async def test_a_crash_inline_restarts_the_actor_from_its_checkpoint(make_node):
    node = await make_node(tree(ActorSpec("p", Probe)))
    assert await node.ask("p", "add", {"amount": 3}) == 3
    with pytest.raises(ActorCrashed) as e:
        await node.ask("p", "add_then_crash", {"amount": 10})
    assert "add_then_crash" in e.value.message
    # by the time the caller hears of it, the actor has exited (as for a crash in its own loop)
    assert node.metrics.counter("actor_crashes_total", actor="p") == 1
    assert (await node.ask("p", "get"))["n"] == 3  # restored: the half-done change is gone
    assert await node.ask("p", "add", {"amount": 1}) == 4


async def test_an_invalid_transition_inline_leaves_the_state_unchanged(make_node):
    node = await make_node(tree(ActorSpec("door", Door)))
    await node.ask("door", "get_state")
    with pytest.raises(InvalidTransition):
        await node.ask("door", "walk_through")
    assert (await node.ask("door", "get_state"))["state"] == "closed"


async def test_an_inline_reply_leaves_only_once_its_checkpoint_is_durable(make_node, monkeypatch):
    node = await make_node(tree(ActorSpec("p", Probe)))
    await node.ask("p", "add", {"amount": 1})
    checkpoints = node.store.checkpoints
    held: list[tuple[Any, ...]] = []
    real = checkpoints.save_callback

    def hold(*args: Any) -> None:
        held.append(args)

    monkeypatch.setattr(checkpoints, "save_callback", hold)
    reply = asyncio.ensure_future(node.ask("p", "add", {"amount": 1}))
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(held) == 1 and not reply.done()  # handled, state saved to the store, not yet durable
    real(*held[0])
    assert await reply == 2


async def test_inline_calls_off_sends_every_message_through_the_actors_loop(make_node):
    node = await make_node(tree(ActorSpec("p", Probe)), inline_calls=False)
    await node.ask("p", "get")
    got = await node.ask("p", "where")
    assert got["task"] is not asyncio.current_task() and got["cell"] == "p"


async def test_a_caller_polling_an_idle_actor_still_lets_other_tasks_run(make_node):
    """Asks answered inline need no loop pass; a loop of them must not starve the node's other tasks."""
    node = await make_node(tree(ActorSpec("p", Probe)))
    await node.ask("p", "get")
    flag = asyncio.Event()

    async def elsewhere() -> None:
        flag.set()

    task = asyncio.ensure_future(elsewhere())
    polls = 0
    while not flag.is_set():
        await node.ask("p", "get")  # unchanged state: answered at once, no commit to wait for
        polls += 1
        assert polls < 10_000, "the polling caller never yielded"
    await task


async def test_a_plain_cast_to_an_idle_actor_runs_in_the_senders_task(make_node):
    node = await make_node(tree(ActorSpec("p", Probe)))
    await node.ask("p", "get")
    node.send("p", "note_where", {"item": "a"})
    # handled before send returned, outside the actor's own task
    assert (await node.ask("p", "get"))["seen"] == [["a", True]]


async def test_a_cast_sent_by_a_handler_running_inline_goes_through_the_mailbox(make_node):
    node = await make_node(tree(ActorSpec("p", Probe)))
    await node.ask("p", "get")
    node.send("p", "relay", {"item": "r"})  # inline; the cast it sends waits in the mailbox
    seen = (await node.ask("p", "get"))["seen"]
    assert seen == ["r", ["r-relayed", False]]  # the relayed one ran in the actor's own task


async def test_a_cast_that_crashes_inline_restarts_the_receiver_not_the_sender(make_node):
    node = await make_node(tree(ActorSpec("p", Probe)))
    assert await node.ask("p", "add", {"amount": 3}) == 3
    node.send("p", "explode", {})  # returns normally: the crash happens in the actor's own loop
    assert (await node.ask("p", "get"))["n"] == 3  # restarted from its checkpoint, and answering
    assert node.metrics.counter("actor_restarts_total", actor="p") == 1


async def test_an_event_cast_inline_is_forwarded_to_subscribers(make_node):
    EVENTS.clear()
    node = await make_node(tree(ActorSpec("audit", Audit), ActorSpec("sink", Sink)))
    await node.ask("audit", "subscribe", {"target": "sink", "op": ""})
    await node.ask("sink", "get")
    node.send("audit", "log_event", {"event_type": "inline", "detail": "d"})
    assert EVENTS == [("inline", "d")]  # handled before send returned
    assert await node.ask("sink", "get") == [["event", "inline", "d"]]
