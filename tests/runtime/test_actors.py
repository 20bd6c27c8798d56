"""Handlers, argument checking, behaviors."""

from __future__ import annotations

import asyncio

import pytest

from minihermes.runtime import (
    ActorNotFound,
    ActorSpec,
    Conflict,
    GenEvent,
    GenFSM,
    GenServer,
    InvalidArgument,
    InvalidTransition,
    ManualClock,
    UnknownOp,
    call,
    state,
)

from .actors import EVENTS, Audit, Counter, Door, Echo, Recorder, Sink
from .conftest import tree


async def test_call_cast_and_init_hook(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter, args={"x": 1})))
    assert await node.ask("counter", "add", {"amount": 2}) == {"count": 2}
    node.send("counter", "bump")
    got = await node.ask("counter", "get")
    assert got == {"count": 3, "init": ["counter", {"x": 1}]}


async def test_ask_to_a_cast_op_is_accepted_without_waiting(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter)))
    assert await node.ask("counter", "bump") == {"status": "accepted"}
    assert (await node.ask("counter", "get"))["count"] == 1


@pytest.mark.parametrize(
    ("payload", "code", "field"),
    [
        ({}, "invalid_argument", "name"),
        ({"name": "a"}, "invalid_argument", "n"),
        ({"name": 3, "n": 1}, "invalid_argument", "name"),
        ({"name": "a", "n": "1"}, "invalid_argument", "n"),
        ({"name": "a", "n": True}, "invalid_argument", "n"),
        ({"name": "a", "n": 1.5}, "invalid_argument", "n"),
        ({"name": "a", "n": 1, "ratio": "x"}, "invalid_argument", "ratio"),
        ({"name": "a", "n": 1, "tags": ["x", 2]}, "invalid_argument", "tags[1]"),
        ({"name": "a", "n": 1, "mode": "c"}, "invalid_argument", "mode"),
        ({"name": "a", "n": 1, "meta": []}, "invalid_argument", "meta"),
        ({"name": "a", "n": 1, "extra": 1}, "invalid_argument", "extra"),
        ({"name": None, "n": 1}, "invalid_argument", "name"),
    ],
)
async def test_bad_arguments_get_structured_errors_naming_op_and_field(make_node, payload, code, field):
    node = await make_node(tree(ActorSpec("counter", Counter)))
    with pytest.raises(InvalidArgument) as ei:
        await node.ask("counter", "typed", payload)
    err = ei.value.to_dict()["error"]
    assert err["code"] == code
    assert err["op"] == "typed"
    assert err["field"] == field
    assert "typed" in err["message"]


async def test_good_arguments_pass_with_conversions(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter)))
    got = await node.ask(
        "counter", "typed", {"op": "typed", "name": "a", "n": 2.0, "ratio": 3, "tags": ["x"]}
    )
    assert got == {"name": "a", "n": 2, "ratio": 3, "tags": ["x"], "mode": "a", "meta": None}


async def test_unknown_op_and_actor_suggest_names(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter)))
    with pytest.raises(UnknownOp) as ei:
        await node.ask("counter", "ad", {})
    assert "did you mean 'add'" in ei.value.message
    with pytest.raises(ActorNotFound) as ei2:
        await node.ask("countr", "add", {})
    assert "did you mean 'counter'" in ei2.value.message
    with pytest.raises(InvalidArgument):
        await node.ask("counter", "add", "not an object")  # type: ignore[arg-type]
    with pytest.raises(UnknownOp):
        node.send("counter", "nope")


async def test_actor_error_is_a_reply_and_rolls_state_back(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter)))
    await node.ask("counter", "add", {"amount": 1})
    with pytest.raises(Conflict) as ei:
        await node.ask("counter", "refuse")
    assert ei.value.to_dict() == {"error": {"code": "conflict", "message": "nope", "reason": "test"}}
    assert (await node.ask("counter", "get"))["count"] == 1
    assert node.metrics.counter("actor_crashes_total") == 0


async def test_fsm_rejects_invalid_transitions_and_keeps_state(make_node):
    node = await make_node(tree(ActorSpec("door", Door)))
    assert (await node.ask("door", "get_state"))["state"] == "closed"
    with pytest.raises(InvalidTransition) as ei:
        await node.ask("door", "walk_through")
    assert ei.value.code == "invalid_transition"
    assert await node.ask("door", "transition", {"to": "open"}) == {
        "status": "ok",
        "from": "closed",
        "to": "open",
    }
    with pytest.raises(InvalidTransition) as ei2:
        await node.ask("door", "transition", {"to": "locked"})
    assert ei2.value.details == {"from_state": "open", "to": "locked"}
    with pytest.raises(InvalidArgument):
        await node.ask("door", "transition", {"to": "flying"})
    state = await node.ask("door", "get_state")
    assert state["state"] == "open" and state["transitions"] == 1
    assert await node.ask("door", "walk_through") == {"visits": 1}


def test_fsm_and_event_classes_are_checked_at_definition():
    with pytest.raises(TypeError):

        class BadFSM(GenFSM):
            states = ("a",)
            initial = "b"

    with pytest.raises(TypeError):

        class BadTable(GenFSM):
            states = ("a",)
            initial = "a"
            transitions = {"a": {"z"}}

    with pytest.raises(TypeError):

        class BadEvent(GenEvent):
            events = ("log_event",)

            @call
            def log_event(self) -> None: ...


async def test_genevent_casts_and_subscribers(make_node):
    EVENTS.clear()
    node = await make_node(
        tree(ActorSpec("audit", Audit), ActorSpec("rec", Recorder), ActorSpec("sink", Sink))
    )
    await node.ask("audit", "subscribe", {"target": "rec", "op": "note"})
    assert await node.ask("audit", "log_event", {"event_type": "tool_executed", "detail": "x"}) == {
        "status": "accepted"
    }
    node.send("audit", "log_event", {"event_type": "policy_changed"})
    assert (await node.ask("audit", "stats"))["count"] == 2
    # the runtime forwards each event to subscribers as it was sent
    await node.ask("audit", "subscribe", {"target": "sink", "op": ""})
    node.send("audit", "log_event", {"event_type": "third", "detail": "y"})
    assert (await node.ask("audit", "stats"))["count"] == 3
    assert await node.ask("rec", "get") == [
        ["note", {"event_type": "tool_executed", "detail": "x"}],
        ["note", {"event_type": "policy_changed"}],
        ["note", {"event_type": "third", "detail": "y"}],
    ]
    assert await node.ask("sink", "get") == [["event", "third", "y"]]
    assert [e[0] for e in EVENTS] == ["tool_executed", "policy_changed", "third"]


async def test_async_handler_can_ask_other_actors_and_errors_propagate(make_node):
    node = await make_node(tree(ActorSpec("counter", Counter), ActorSpec("echo", Echo)))
    got = await node.ask("echo", "relay", {"target": "counter", "op": "add", "payload": {"amount": 4}})
    assert got == {"count": 4}
    with pytest.raises(InvalidArgument) as ei:
        await node.ask("echo", "relay", {"target": "counter", "op": "add", "payload": {"amount": "x"}})
    assert ei.value.details["field"] == "amount"


async def test_ask_timeout_is_structured(make_node, clock: ManualClock):
    import asyncio

    from minihermes.runtime import AskTimeout

    from .actors import GATES, Slow

    GATES.clear()
    GATES["gate"] = asyncio.Event()
    node = await make_node(tree(ActorSpec("slow", Slow)))
    fut = asyncio.ensure_future(node.ask("slow", "work", {"n": 1}, timeout=5))
    await clock.advance(1)  # the ask is sent at t=1: due at t=6
    await clock.advance(4.9)
    assert not fut.done()  # never early
    await clock.advance(0.5)  # deadlines share 0.25 s buckets: at most that late
    with pytest.raises(AskTimeout) as ei:
        await fut
    assert ei.value.code == "timeout" and ei.value.http_status == 504
    GATES["gate"].set()
    assert await node.ask("slow", "get") == [1]


async def test_a_deferred_reply_that_fails_answers_with_a_crash_not_a_timeout(make_node):
    from minihermes.runtime import ActorCrashed, Deferred, GenServer

    class Later(GenServer):
        @call
        def soon(self) -> Deferred:
            async def boom() -> None:
                raise ValueError("bug in deferred work")

            return Deferred(boom())

    node = await make_node(tree(ActorSpec("later", Later)))
    with pytest.raises(ActorCrashed):
        await node.ask("later", "soon")  # the manual clock never moves: a timeout would hang here


def test_a_list_of_objects_is_checked_item_by_item_and_names_the_bad_one():
    from typing import Any

    from minihermes.runtime._actor import make_checker

    check = make_checker(list[dict[str, Any]])
    assert check is not None
    good = [{"a": 1}, {}, {"b": [1]}]
    assert check("op", "items", good) is good
    for bad, where in (([{}, {}, "x"], "items[2]"), ([3], "items[0]"), ([{}, None], "items[1]")):
        with pytest.raises(InvalidArgument) as ei:
            check("op", "items", bad)
        assert ei.value.to_dict()["error"]["field"] == where
    with pytest.raises(InvalidArgument):
        check("op", "items", {"a": {}})


class Holder(GenServer):
    """Writes besides its state that its replies must wait for (``host.hold``)."""

    n: int = state(default=0)

    @call
    def act(self, change: bool = True) -> int:
        write: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        HELD.append(write)
        self.host.hold(write)
        ACTED[0].set()
        if change:
            self.n += 1
        return self.n

    @call
    async def flush(self) -> int:
        await self.host.wait_saved()
        return self.n


HELD: list[asyncio.Future[None]] = []
ACTED: list[asyncio.Event] = []  # made per test: an Event belongs to the loop that first waits on it


@pytest.mark.parametrize("change", [True, False])
async def test_a_reply_waits_for_the_writes_its_handler_held(make_node, change):
    """With a checkpoint (``change``) or without, the reply leaves once the held write is done; a failed held
    write does not crash the actor."""
    HELD.clear()
    node = await make_node(tree(ActorSpec("holder", Holder)))
    for k, outcome in enumerate([None, OSError("the write failed")], start=1):
        ACTED[:] = [asyncio.Event()]
        reply = asyncio.ensure_future(node.ask("holder", "act", {"change": change}))
        await ACTED[0].wait()
        # A store write queued now commits after the act's checkpoint (on SQLite, in order): the reply
        # still waits.
        await node.store.kv.put(("default", "default"), "barrier", k)
        assert not reply.done()
        held = HELD.pop()
        if outcome is None:
            held.set_result(None)
        else:
            held.set_exception(outcome)
        assert await reply == (k if change else 0)
    assert await node.ask("holder", "flush") == (2 if change else 0)  # not crashed, nothing left in flight


class BadHolder(GenServer):
    @call
    def act(self) -> str:
        try:
            self.host.hold("not a future")  # type: ignore[arg-type]
        except TypeError as e:
            return str(e)
        return "held"


async def test_hold_refuses_what_is_not_a_future(make_node):
    node = await make_node(tree(ActorSpec("bad", BadHolder)))
    assert "asyncio.Future" in await node.ask("bad", "act")
