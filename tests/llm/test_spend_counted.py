"""Without caps the gateway reuses a caller's bucket names for its next calls in the same minute: a call after
midnight still counts into the new day, and a cap set meanwhile applies to the very next call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from minihermes.runtime import ActorError, ManualClock, Node

from .support import StubServer
from .test_spend import MIDNIGHT, answer, app, clock, gateway  # noqa: F401 (fixtures)

MESSAGES = [{"role": "user", "content": "hello"}]


async def call(node: Node, session: str = "s1") -> None:
    await gateway(node, "completion", messages=MESSAGES, session_id=session, user_id="alice")


async def test_the_same_callers_calls_count_into_the_day_they_are_made(
    app: Callable[..., Awaitable[Node]],  # noqa: F811
    stub: StubServer,
    clock: ManualClock,  # noqa: F811
) -> None:
    node = await app()
    stub.reply(*(answer(f"a{i}") for i in range(4)))
    await clock.advance(MIDNIGHT - 30 - clock.time())  # 23:59:30
    await call(node)
    await call(node)  # the same caller in the same minute
    await clock.advance(40)  # 00:00:10, the next day
    await call(node)
    before = await gateway(node, "get_usage", scope="user", key="alice", period="day", limit=2)
    assert before["current"]["label"] == "2027-01-16" and before["current"]["calls"] == 1
    days = {p["label"]: p["calls"] for p in before["history"]}
    assert days["2027-01-15"] == 2

    # A cap set in the same minute applies to the caller's next call at once.
    await gateway(node, "set_budget", scope="user", key="alice", max_tokens=2000, period="day")
    with pytest.raises(ActorError) as refused:
        await call(node)
    assert refused.value.code == "budget_exceeded" and len(stub.seen) == 3
