"""Child processes for the crash tests: a test module run as ``python -m``, read line by line, SIGKILLed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from minihermes.runtime._loop import loop_name

ROOT = Path(__file__).resolve().parents[1]


async def spawn_module(module: str, *args: str) -> asyncio.subprocess.Process:
    """``python -m module args...`` from the repository root; stdout piped (the facts it acknowledges, one
    per line), stderr dropped. The child runs on the test's event loop (``MINIHERMES_EVENT_LOOP``)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        cwd=ROOT,
        env={**os.environ, "MINIHERMES_EVENT_LOOP": loop_name()},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def read_line(proc: asyncio.subprocess.Process, timeout: float = 60) -> str:
    """The child's next line, stripped; fails if it exits first."""
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    assert line, "child exited early"
    return line.decode().strip()


async def kill_hard(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL: no flush, no goodbye; returns once the child is gone."""
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
