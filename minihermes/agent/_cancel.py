"""Stopping a session's turn (``agent.cancel_turn``): where a stop takes effect, and what it waits for.

A turn's steps run in a task of their own (``steps``), cancellable until the turn finishes, fails or pauses.
A stop cancels that task wherever it waits (an LLM call, a tool call); asked while a chat or resume gets its
turn ready, it takes effect when the steps start; asked of a paused turn, it records the turn stopped at
once. Whatever the case, the stop's reply waits until the turn is recorded ``cancelled`` (or ended
otherwise). The agent records the stopped turn; the tool executor kills its running calls (``stop_tools``)
and guardrails withdraws its pending approvals (``withdraw_approvals``), asked as the runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from minihermes.runtime import ActorError, Host, current_context, reset_context, set_context

from ._caller import as_runtime

STOPPED_NOTE = "[The user stopped this turn before it finished: the steps above ran, nothing after them.]"
"""What a stopped turn leaves at the end of the history (``cancel_turn``): the next turn's model reads it."""
STOPPED_CALL = "the user stopped the turn before this call finished"
STOP_TIMEOUT = 10.0
"""Seconds ``cancel_turn`` gives the tool executor to kill a stopped turn's running calls."""

Reply = dict[str, Any]


class TurnStop:
    """Where a session's running turn is, as far as stopping it goes."""

    __slots__ = ("by", "cancellable", "preparing", "stopping", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        """The task running the turn's steps (``steps``), what a stop cancels."""
        self.cancellable = False
        """The turn's steps may be cancelled now (not once it is finishing, failing or pausing)."""
        self.preparing = False
        """A chat or resume is getting its turn ready: a stop asked now takes effect when its steps start."""
        self.stopping: asyncio.Future[Reply | None] | None = None
        """A stop in progress: resolved with the stopped turn's reply (None if it ended otherwise)."""
        self.by = ""
        """Who asked the last stop."""

    def paused(self, turn: dict[str, Any] | None) -> bool:
        """The turn waits for an approval, with no steps running."""
        return turn is not None and bool(turn.get("paused")) and self.task is None

    def ready_done(self) -> None:
        """A chat or resume is over: a stop asked while it got ready, if its steps never started, has
        nothing left to stop."""
        self.preparing = False
        stopping = self.stopping
        if stopping is not None and not stopping.done() and self.task is None:
            stopping.set_result(None)

    async def stop(
        self, paused: bool, record: Callable[[], Awaitable[Reply]], stop_tools: Callable[[], Awaitable[None]]
    ) -> Reply | None:
        """Stop the turn: ``record`` a paused one at once, else cancel its steps (they record it) and have
        ``stop_tools`` kill its running calls. The stopped turn's reply, or None (nothing to stop, or too
        late: its own reply is the answer)."""
        stopping = self.stopping
        if stopping is not None:  # a second stop while the first is recorded
            await asyncio.wait({stopping})
            return stopping.result()
        if not (self.preparing or self.cancellable or paused):
            task = self.task  # finishing or pausing: too late to stop
            if task is not None and not task.done():
                await asyncio.wait({task})
            return None
        stopping = self.stopping = asyncio.get_running_loop().create_future()
        self.by = current_context().principal
        try:
            if paused:
                stopping.set_result(await record())
            else:
                if self.cancellable and self.task is not None:
                    self.task.cancel()  # else its steps see ``stopping`` when they start
                await stop_tools()
                await asyncio.wait({stopping})
        finally:
            self.stopping = None
            if not stopping.done():
                stopping.set_result(None)
        return stopping.result()

    async def steps(
        self,
        first: Coroutine[Any, Any, None] | None,
        loop: Callable[[], Awaitable[Reply]],
        record: Callable[[], Awaitable[Reply]],
    ) -> Reply:
        """The turn's steps (``first``, then ``loop``), in the current task, cancellable until the turn
        finishes, fails or pauses; a stop makes them ``record`` the turn as stopped instead."""
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.preparing = False
        self.cancellable = True
        reply: Reply | None = None
        try:
            if self.stopping is not None:  # asked while the turn got ready
                if first is not None:
                    first.close()
                reply = await record()
                return reply
            if first is not None:
                await first
            reply = await loop()
            return reply
        except asyncio.CancelledError:
            if self.stopping is None:
                raise  # the actor is stopping
            task.uncancel()
            reply = await record()
            return reply
        finally:
            self.cancellable = False
            if self.task is task:
                self.task = None
            stopping = self.stopping
            if stopping is not None and not stopping.done():
                stopping.set_result(reply if reply is not None and reply["status"] == "cancelled" else None)


async def stop_tools(host: Host, session_id: str) -> None:
    """Have the tool executor stop this session's running calls (killing their processes)."""
    if not host.has_actor("tool_executor"):
        return
    token = set_context(as_runtime())
    try:
        await host.ask("tool_executor", "cancel_calls", {"session_id": session_id}, timeout=STOP_TIMEOUT)
    except ActorError as e:
        host.log.warning("tool calls of stopped %s not stopped: %s", session_id, e.message)
    finally:
        reset_context(token)


async def withdraw_approvals(host: Host, session_id: str, turn_id: str) -> None:
    """Have guardrails withdraw the stopped turn's pending approvals."""
    if not host.has_actor("guardrails"):
        return
    token = set_context(as_runtime())
    try:
        await host.ask("guardrails", "withdraw_approvals", {"session_id": session_id, "turn_id": turn_id})
    except ActorError as e:
        host.log.warning("approvals of stopped %s not withdrawn: %s", session_id, e.message)
    finally:
        reset_context(token)


def stop_reply(session_id: str, stopped: Reply | None, last: Reply | None) -> Reply:
    """``cancel_turn``'s reply: whether a turn was stopped, and the stopped (or last) turn's reply."""
    shown = stopped or last
    return {
        "status": "ok",
        "session_id": session_id,
        "cancelled": stopped is not None,
        "turn_id": str((shown or {}).get("turn_id") or ""),
        "reply": shown,
    }
