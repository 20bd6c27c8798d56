"""``minihermes chat`` shows the caller's notifications (issue 24): a reminder that fired before the chat
started is shown once when it starts (then it is read), one that fires while the chat is open is shown as it
arrives, ``/notifications`` lists them, and another user's are never shown. Embedded (the node's live topic)
and against ``minihermes serve`` (the SSE stream ``GET /api/v1/notifications/stream``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.cli._backend import Backend, Embedded, Remote
from minihermes.cli.chat import ChatLoop
from minihermes.embed import MiniHermes
from minihermes.runtime import RequestContext

from ._served import TOKENS, served
from .conftest import Captured

BOB = RequestContext(principal="bob", roles=frozenset({"user"}))


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 30.0, what: str = "") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (got := await check()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return got


async def remind(backend: Backend, job_id: str, text: str) -> None:
    """A reminder owned by the backend's caller, fired now; returns once its run delivered it."""
    job = {"job_id": job_id, "prompt": text, "schedule": "0 9 * * 1", "action": "notify"}
    await backend.ask("cron_scheduler", "create_job", job)
    await backend.ask("cron_scheduler", "run_now", {"job_id": job_id})

    async def delivered() -> bool:
        runs = (await backend.ask("cron_scheduler", "job_runs", {"job_id": job_id}))["runs"]
        return bool(runs) and runs[0]["status"] == "completed" and runs[0]["delivered"]

    await until(delivered, what=f"the run of {job_id}")


def reader(steps: list[Callable[[], Awaitable[str]]]) -> Callable[[str], Awaitable[str]]:
    """A ``read_line`` that runs each step at a prompt (the chat open and waiting) and answers its line."""
    pending = list(steps)

    async def read(prompt: str) -> str:
        if not pending:
            raise EOFError
        return await pending.pop(0)()

    return read


async def unread(backend: Backend) -> list[str]:
    reply = await backend.ask("notifications", "list_notifications", {"unread_only": True})
    return [n["text"] for n in reply["notifications"]]


async def check_the_chat(owner: Backend, other: Backend, captured: Captured) -> None:
    await remind(owner, "plants", "Water the plants")
    await remind(other, "bins", "Take the bins out")  # another user's: never in the owner's chat

    async def fire_while_open() -> str:
        await remind(owner, "tea", "Brew the tea")
        await until(lambda: _shown(captured, "Brew the tea"), what="the live notification")
        return "/notifications"

    loop = ChatLoop(captured.console, owner, "notes")
    assert "/notifications" in loop.command_names()
    assert await loop.run(reader([fire_while_open, _line("/quit")])) == 0
    out = captured.text
    start = out.index("Reminders (1 new):")
    assert out.index("Water the plants", start) < out.index("Brew the tea")
    assert out.count("Water the plants") == 2 and out.count("Brew the tea") == 2  # shown, then listed
    listing = out[out.index("Reminder: Brew the tea") :]
    assert "Water the plants (cron:plants" in listing and "Brew the tea (cron:tea" in listing
    assert "Take the bins out" not in out
    assert await unread(owner) == []  # what was shown is read
    assert await unread(other) == ["Take the bins out"]

    before = len(captured.text)  # a second chat: nothing new at start
    assert await ChatLoop(captured.console, owner, "notes").run(reader([_line("/quit")])) == 0
    assert "Reminders" not in captured.text[before:] and "Water the plants" not in captured.text[before:]


def _line(text: str) -> Callable[[], Awaitable[str]]:
    async def step() -> str:
        return text

    return step


async def _shown(captured: Captured, text: str) -> bool:
    return text in captured.text


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[MiniHermes]:
    async with MiniHermes(data_dir=tmp_path / "data") as mh:
        yield mh


async def test_the_embedded_chat_shows_reminders_at_start_and_as_they_fire(
    node: MiniHermes, captured: Captured
) -> None:
    await check_the_chat(Embedded(node), Embedded(node, BOB), captured)


async def test_the_chat_against_a_server_shows_reminders_over_the_stream(
    tmp_path_factory: pytest.TempPathFactory, captured: Captured
) -> None:
    with served(tmp_path_factory, "notes") as url:

        def client(who: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=url, headers={"Authorization": f"Bearer {TOKENS[who]}"}, timeout=60
            )

        async with client("CLI_USER") as mine, client("CLI_ADMIN") as theirs:
            await check_the_chat(Remote(mine, url), Remote(theirs, url), captured)


async def test_a_notification_during_a_turn_waits_for_the_turn_to_end(
    node: MiniHermes, captured: Captured
) -> None:
    """Not printed into the turn's streamed output: after the turn, before the next prompt."""
    owner = Embedded(node)
    loop = ChatLoop(captured.console, owner, "busy")
    real_turn = loop.turn

    async def turn_with_a_reminder(message: str) -> dict[str, Any]:
        await remind(owner, "mid", "Stretch your legs")
        await until(lambda: _pending(loop), what="the notification to arrive")
        assert "Stretch your legs" not in captured.text  # held while the turn runs
        return await real_turn(message)

    loop.turn = turn_with_a_reminder  # type: ignore[method-assign]
    assert await loop.run(reader([_line("calculate 6 * 7"), _line("/quit")])) == 0
    out = captured.text
    assert out.index("42") < out.index("Reminder: Stretch your legs")
    assert await unread(owner) == []


async def _pending(loop: ChatLoop) -> bool:
    return bool(loop._pending)
