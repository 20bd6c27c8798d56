"""_turns.run_turn_once after a chat ask whose outcome is unknown (``node_down``, a timeout): a turn the
session finished is taken, not run again; a turn that never became durable fails so the caller's retry runs
it. The agent is a fake with the three ops run_turn_once uses (chat, get_stats, last_turn)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.runtime import (
    ActorError,
    ActorSpec,
    AskTimeout,
    Deferred,
    GenServer,
    ManualClock,
    Node,
    SupervisorSpec,
    call,
)
from minihermes.runtime.store._pg_testing import open_test_store
from minihermes.work._turns import run_turn_once

from .conftest import ACME, until


class Agent:
    """What the fake agents did and will do: ``plan`` is how each next chat ends (``ok``, ``lost``: fails
    before the turn is durable, ``node_down`` / ``timeout``: fails after the turn finished, ``slow``: runs
    until ``finish`` is set)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.plan: list[str] = []
        self.finish = asyncio.Event()
        self.seen_running = asyncio.Event()


AGENT = Agent()


class FakeAgent(GenServer):
    """One session (virtual, keyed by ``session_id``): a turn counts once it finished, and its reply is kept
    for ``last_turn``, as the real agent's durable turn does."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.turns = 0
        self.running = False
        self.last: dict[str, Any] = {}

    @call
    def chat(self, message: str, session_id: str, user_id: str = "") -> Any:
        return Deferred(self._turn(message, session_id))  # replies later; the mailbox goes on

    async def _turn(self, message: str, session_id: str) -> dict[str, Any]:
        AGENT.prompts.append(message)
        how = AGENT.plan.pop(0) if AGENT.plan else "ok"
        if how == "lost":
            raise ActorError("the node running the turn died before it was durable", code="node_down")
        self.running = True
        try:
            if how == "slow":
                await AGENT.finish.wait()
            self.turns += 1
            n = len(AGENT.prompts)
            self.last = {"status": "ok", "session_id": session_id, "response": f"reply {n} to {message}"}
        finally:
            self.running = False
        if how == "node_down":
            raise ActorError("the node running the turn died", code="node_down")
        if how == "timeout":
            raise AskTimeout("agent.chat did not answer in time")
        return dict(self.last)

    @call
    def get_stats(self, session_id: str) -> dict[str, Any]:
        if self.running:
            AGENT.seen_running.set()
        return {"status": "ok", "turns": self.turns, "turn_in_progress": self.running, "paused": False}

    @call
    def last_turn(self, session_id: str) -> dict[str, Any]:
        return dict(self.last)


class Driver(GenServer):
    """Runs ``run_turn_once`` as the work actors do (per tenant, off the mailbox)."""

    @call
    def run(self, marker: str, session_id: str, message: str, timeout: float = 30.0) -> Any:
        return Deferred(run_turn_once(self.host, marker, session_id, message, timeout=timeout))


@pytest.fixture
async def node(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Node]:
    global AGENT
    AGENT = Agent()
    tree = SupervisorSpec(
        name="root",
        children=[
            ActorSpec("agent", FakeAgent, virtual=True, key_field="session_id"),
            ActorSpec("driver", Driver, per_tenant=True),
        ],
    )
    n = Node(await open_test_store(tmp_path / "data", clock=clock), tree, clock=clock)
    await n.start()
    yield n
    await n.stop(deadline=5)


async def run(node: Node, marker: str, message: str, session: str = "s1", timeout: float = 30.0) -> Any:
    payload = {"marker": marker, "session_id": session, "message": message, "timeout": timeout}
    return await node.ask("driver", "run", payload, ctx=ACME, timeout=600)


@pytest.mark.parametrize("unknown", ["node_down", "timeout"])
async def test_a_turn_finished_before_the_ask_failed_is_taken_not_run_again(node, unknown):
    AGENT.plan = [unknown]
    reply = await run(node, "task:m1", "summarize the inbox")
    assert reply == {"status": "ok", "session_id": "s1", "response": "reply 1 to summarize the inbox"}
    assert AGENT.prompts == ["summarize the inbox"]  # the prompt ran once
    # The reply is on the marker: a redelivery of the same work returns it and runs nothing.
    assert await run(node, "task:m1", "summarize the inbox") == reply
    assert AGENT.prompts == ["summarize the inbox"]
    marker = await node.store.kv.get(ACME.scope, "work:turn:task:m1")
    assert marker["reply"] == reply and marker["recovered"] and marker["turns_before"] == 0


async def test_an_ask_that_times_out_while_the_turn_goes_on_waits_for_it(node, clock):
    AGENT.plan = ["slow"]
    pending = asyncio.ensure_future(run(node, "cron:j@1#0", "weekly report", timeout=10))
    await until(lambda: _true(AGENT.prompts), what="the turn to start")
    await clock.advance(11)  # the chat ask times out; the turn goes on in the session
    while not AGENT.seen_running.is_set():  # run_turn_once now polls the session
        assert not pending.done(), pending.result()
        await clock.advance(0.25)
    AGENT.finish.set()

    async def answered() -> Any:
        await clock.advance(0.25)
        return pending.done()

    await until(answered, what="the finished turn's reply")
    assert pending.result()["response"] == "reply 1 to weekly report"
    assert AGENT.prompts == ["weekly report"]


async def test_a_turn_that_never_became_durable_fails_and_the_retry_runs_it(node):
    AGENT.plan = ["lost"]
    with pytest.raises(ActorError) as e:
        await run(node, "task:m2", "book the room")
    assert e.value.code == "node_down"
    assert AGENT.prompts == ["book the room"]
    # The caller retries (a redelivered task carries the same marker): the turn runs now, once more.
    reply = await run(node, "task:m2", "book the room")
    assert reply["response"] == "reply 2 to book the room"
    assert AGENT.prompts == ["book the room", "book the room"]


async def _true(value: Any) -> bool:
    return bool(value)
