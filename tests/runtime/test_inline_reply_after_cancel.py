"""An ask answered inline whose caller is cancelled before it reads the answer (the HTTP edge cancels a
handler at its request's timeout, issue 17) leaves no "Future exception was never retrieved" behind: the
OpenAPI fuzz found one in the server log (``guardrails.request_approval`` refusing a tool name, under
``?timeout=0.001``), which the server fixture counts as a traceback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from minihermes.runtime import ActorSpec, GenServer, InvalidArgument, call
from minihermes.runtime._cell import Cell
from minihermes.runtime._node import INLINE_YIELD_EVERY

from .conftest import tree


class Refuser(GenServer):
    @call
    def refuse(self) -> None:
        raise InvalidArgument("refused", field="x")


async def test_a_refusal_answered_inline_to_a_cancelled_caller_is_not_logged(
    make_node: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await make_node(tree(ActorSpec("r", Refuser)))
    replies: list[asyncio.Future[Any]] = []
    call_inline = Cell.call_inline

    def recording(cell: Cell, handler: Any, env: Any) -> None:
        replies.append(env.reply)
        call_inline(cell, handler, env)

    monkeypatch.setattr(Cell, "call_inline", recording)
    node._inline_streak = INLINE_YIELD_EVERY - 1  # this ask is answered inline, then yields once
    asker = asyncio.create_task(node.ask("r", "refuse"))
    await asyncio.sleep(0)  # the asker ran: answered inline, now yielding before it reads the answer
    asker.cancel()
    outcome = await asyncio.gather(asker, return_exceptions=True)
    assert isinstance(outcome[0], asyncio.CancelledError)
    [reply] = replies
    # asyncio logs a future's exception when the future is freed unless somebody took it (reading it here
    # would take it): whether it will is the future's own flag.
    assert reply.done() and not reply._log_traceback
