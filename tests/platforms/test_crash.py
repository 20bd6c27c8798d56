"""SIGKILL of the node between a turn's end and its reply's delivery: the reply arrives once, after restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests._proc import kill_hard, read_line, spawn_module

from .conftest import until
from .fakes import FakeTelegram

DANA = 111


async def test_reply_delivered_once_across_sigkill_before_send(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    url = f"http://127.0.0.1:{telegram.http.port}"
    args = ("tests.platforms.crash_node", str(tmp_path / "data"), url, telegram.token)
    child = await spawn_module(*args)
    try:
        assert await read_line(child) == "ready"
        telegram.hang_sends = True  # the platform never answers this send: it is not delivered
        telegram.message(DANA, "hello before the crash")
        await asyncio.wait_for(telegram.send_started.wait(), 60)  # the turn ended, its reply is on its way
    finally:
        await kill_hard(child)
    assert telegram.texts(DANA) == []
    telegram.hang_sends = False

    child = await spawn_module(*args)
    try:
        assert await read_line(child) == "ready"
        await until(lambda: telegram.texts(DANA), timeout=60, what="the reply after the restart")
        telegram.message(
            DANA, "and after it"
        )  # any duplicate of the first would be delivered before this one
        await until(lambda: len(telegram.texts(DANA)) >= 2, timeout=60, what="the second reply")
    finally:
        await kill_hard(child)
    first, second = telegram.texts(DANA)
    assert first and second  # exactly two replies: the first was not sent twice


async def test_accepted_message_survives_sigkill_before_its_turn(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    """Killed right after the update was acknowledged to Telegram (its offset moved): still answered once."""
    url = f"http://127.0.0.1:{telegram.http.port}"
    args = ("tests.platforms.crash_node", str(tmp_path / "data"), url, telegram.token)
    child = await spawn_module(*args)
    try:
        assert await read_line(child) == "ready"
        telegram.hang_sends = True
        update = telegram.message(DANA, "accepted then killed")
        await until(lambda: telegram.acked > update, timeout=60, what="the offset past the update")
    finally:
        await kill_hard(child)
    telegram.hang_sends = False
    child = await spawn_module(*args)
    try:
        assert await read_line(child) == "ready"
        await until(lambda: telegram.texts(DANA), timeout=60, what="the reply after the restart")
        telegram.message(DANA, "next")
        await until(lambda: len(telegram.texts(DANA)) >= 2, timeout=60, what="the second reply")
    finally:
        await kill_hard(child)
    assert len(telegram.texts(DANA)) == 2
