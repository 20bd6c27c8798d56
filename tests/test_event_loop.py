"""The loop the suite runs on (tests/conftest.py): the one `minihermes serve` runs, both where marked."""

from __future__ import annotations

import os

import pytest

from minihermes.runtime._loop import loop_factory, loop_name

from .conftest import TEST_LOOP


async def test_async_tests_run_on_the_loop_serve_runs() -> None:
    if "MINIHERMES_TEST_LOOP" not in os.environ:
        served = "asyncio" if loop_factory("auto") is None else "uvloop"
        assert TEST_LOOP == served == "uvloop"  # uvloop is a dependency on Linux and macOS
    assert loop_name() == TEST_LOOP
    assert os.environ["MINIHERMES_EVENT_LOOP"] == TEST_LOOP  # what servers and helper processes inherit


@pytest.mark.both_loops
async def test_both_loops_runs_once_per_loop(request: pytest.FixtureRequest) -> None:
    name = request.node.name
    if TEST_LOOP == "uvloop":
        assert name.endswith(f"[{loop_name()}]"), name  # [uvloop] and [asyncio]
    else:
        assert loop_name() == "asyncio" and "[" not in name, name
