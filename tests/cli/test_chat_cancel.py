"""Issue 27 in the terminal: Ctrl-C in ``minihermes chat`` stops the running turn (its sandboxed process is
killed, the turn is recorded cancelled) and the chat goes on; a second Ctrl-C while the turn is being stopped
leaves the chat; Ctrl-C at the prompt leaves it too.

The first test drives the real CLI in tmux against a served node (``tests.agent.test_cancel_served`` as the
server: its model runs ``sleep <marker>`` in the terminal); the second sends SIGINT to this process while a
scripted backend's turn and stop never end."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from minihermes.cli.chat import ChatLoop, Quit

from .._proc import ROOT, kill_hard, spawn_module
from ..agent.test_cancel_served import Client, _ready
from ..agent.test_cancel_turn import sleeping, until

TMUX = shutil.which("tmux")


class Pane:
    """A detached tmux session running a shell; keys go in, the screen comes out."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tmux = [str(TMUX), "-L", name]  # a server of its own: nothing of the user's tmux is touched
        subprocess.run(
            [*self.tmux, "new-session", "-d", "-s", name, "-x", "160", "-y", "50", "bash --norc --noprofile"],
            check=True,
            env={**os.environ, "PS1": "$ "},
        )

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def screen(self) -> str:
        out = subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-S", "-200", "-t", self.name],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    async def shows(self, text: str, timeout: float = 30) -> str:
        try:
            await until(lambda: text in self.screen(), timeout)
        except TimeoutError:
            raise AssertionError(f"{text!r} not on the screen:\n{self.screen()}") from None
        return self.screen()

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False)


@pytest.mark.slow
@pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
async def test_ctrl_c_stops_the_running_turn_and_the_chat_goes_on(tmp_path: Path) -> None:
    marker = f"30.{uuid.uuid4().int % 10**9:09d}"
    server = await spawn_module("tests.agent.test_cancel_served", str(tmp_path / "data"), "first", marker)
    pane = Pane(f"mh-cancel-{uuid.uuid4().hex[:8]}")
    try:
        port, _ada, bob, _carol = await _ready(server)
        http = Client(port)
        command = (
            f"cd {shlex.quote(str(ROOT))} && TOK={shlex.quote(bob)} {shlex.quote(sys.executable)} "
            f"-m minihermes.cli.main chat --url http://127.0.0.1:{port} --token-env TOK; "
            "echo CHAT-EXITED=$?"
        )
        pane.keys(command, "Enter")
        await pane.shows("you>", 60)
        pane.keys("sleep a while", "Enter")
        await until(lambda: bool(sleeping(marker)), 60)

        pane.keys("C-c")
        await until(lambda: not sleeping(marker), 5)  # killed as the stop is handled
        screen = await pane.shows("the turn was stopped")
        assert "stopping the turn" in screen and not re.search(r"CHAT-EXITED=\d", screen)
        sessions = (await http.ask(bob, "session_manager", "list_sessions"))["sessions"]
        (session,) = [s["session_id"] for s in sessions]
        last = await http.ask(bob, "agent", "last_turn", session_id=session)
        assert last["status"] == "cancelled" and last["cancelled_by"] == "bob"

        # The chat goes on in the same session; Ctrl-C at the prompt leaves it.
        pane.keys("hello again", "Enter")
        await pane.shows("agent> hi")
        pane.keys("C-c")
        screen = await pane.shows("CHAT-EXITED=130")
        assert "Traceback" not in screen
        history = await http.ask(bob, "agent", "get_history", session_id=session)
        assert [m["content"] for m in history["messages"] if m["role"] == "user"] == [
            "sleep a while",
            "hello again",
        ]
    finally:
        pane.close()
        await kill_hard(server)


class Stuck:
    """A backend whose turn never ends and whose stop never answers (the second Ctrl-C must still leave)."""

    where = "test"

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.entered = asyncio.Event()

    async def ask(self, actor: str, op: str, payload: Any = None, timeout: float = 300) -> Any:
        self.asked.append(f"{actor}.{op}")
        self.entered.set()
        await asyncio.Event().wait()


async def test_a_second_ctrl_c_while_stopping_leaves_the_chat(captured: Any) -> None:
    backend = Stuck()
    loop = ChatLoop(captured.console, backend, "s1")  # type: ignore[arg-type]
    turn = asyncio.ensure_future(loop.turn("think"))
    await asyncio.wait_for(backend.entered.wait(), 5)
    backend.entered.clear()
    os.kill(os.getpid(), signal.SIGINT)  # handled by the chat, not by pytest
    await asyncio.wait_for(backend.entered.wait(), 5)
    assert backend.asked == ["agent.chat", "agent.cancel_turn"] and not turn.done()
    assert "stopping the turn" in captured.text
    os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(Quit):
        await asyncio.wait_for(turn, 5)
    # The chat's handler is gone: SIGINT is Python's again.
    assert signal.getsignal(signal.SIGINT) is not None
