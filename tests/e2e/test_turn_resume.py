"""SIGKILL between two tool calls of a turn: the restarted process finishes the turn without re-running the
tool call that had completed."""

from __future__ import annotations

import asyncio

import pytest

from .._proc import kill_hard, read_line, spawn_module


async def _until(proc: asyncio.subprocess.Process, marker: str) -> str:
    while True:
        line = await read_line(proc)
        if line.startswith(marker):
            return line


@pytest.mark.slow
async def test_sigkill_between_tool_calls_resumes_without_rerunning(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    proc = await spawn_module("tests.e2e.turnproc", str(data))
    await _until(proc, "RECORDED")
    await _until(proc, "BLOCKING")  # record's result is checkpointed before block starts
    await kill_hard(proc)
    assert (data / "effects.log").read_text() == "record alpha\nblock beta\n"

    (data / "release").write_text("go")
    proc2 = await spawn_module("tests.e2e.turnproc", str(data))
    finished = await _until(proc2, "FINISHED")
    assert finished == "FINISHED both steps done"
    await asyncio.wait_for(proc2.wait(), 60)
    # record ran once; block ran again (it had not completed when the process died)
    assert (data / "effects.log").read_text() == "record alpha\nblock beta\nblock beta\n"
