"""SIGKILL between two tool calls of a turn: the restarted process finishes the turn without re-running the
tool call that had completed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


async def _spawn(data: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.e2e.turnproc",
        str(data),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def _until(proc: asyncio.subprocess.Process, marker: str) -> str:
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line, f"child exited before {marker}"
        if line.startswith(marker):
            return line.strip()


@pytest.mark.slow
async def test_sigkill_between_tool_calls_resumes_without_rerunning(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = await _spawn(data)
    await _until(proc, "RECORDED")
    await _until(proc, "BLOCKING")  # record's result is checkpointed before block starts
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    assert (data / "effects.log").read_text() == "record alpha\nblock beta\n"

    (data / "release").write_text("go")
    proc2 = await _spawn(data)
    finished = await _until(proc2, "FINISHED")
    assert finished == "FINISHED both steps done"
    await asyncio.wait_for(proc2.wait(), 60)
    # record ran once; block ran again (it had not completed when the process died)
    assert (data / "effects.log").read_text() == "record alpha\nblock beta\nblock beta\n"
