"""The program's stdin on both event loops: the sandbox hands it over through the loop's pipe transport, which
on uvloop (what `minihermes serve` runs) is not an ``asyncio.WriteTransport`` (issue 17, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from minihermes.runtime._loop import loop_name
from minihermes.tools.python_call import call_python_function
from minihermes.tools.sandbox import run_sandboxed

pytestmark = pytest.mark.both_loops

BIG = bytes(range(256)) * 16384  # 4 MiB: far more than a pipe holds, so the loop must buffer and flush


async def test_stdin_larger_than_a_pipe_arrives_whole_before_eof(workspace: Path) -> None:
    result = await run_sandboxed(["wc", "-c"], workspace, stdin=BIG)
    assert result.exit_code == 0, result.stderr_text
    assert result.stdout.split() == [str(len(BIG)).encode()]


async def test_a_program_that_never_reads_its_stdin_just_exits(workspace: Path) -> None:
    result = await run_sandboxed(["true"], workspace, stdin=BIG)
    assert result.exit_code == 0 and result.killed_reason is None


async def test_a_python_call_gets_its_input_on_the_loop_serve_runs(workspace: Path) -> None:
    code = "def run(input):\n    return {'n': len(input['text'])}\n"
    result = await call_python_function(code, {"text": "x" * 200_000}, workspace)
    assert result.ok and result.output == {"n": 200_000}, (loop_name(), result.error)
