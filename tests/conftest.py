"""Suite-wide guards, and the event loop the suite runs on.

The suite runs on the loop ``minihermes serve`` runs (uvloop, see ``minihermes.runtime._loop``);
``MINIHERMES_TEST_LOOP=asyncio`` runs it on asyncio's own loop instead. Tests whose behaviour can differ between
the two (subprocesses, pipes, the sandbox, signals, HTTP servers, streaming) run on both: the modules in
``BOTH_LOOPS`` and any test marked ``both_loops``. Servers and helper processes the tests start inherit the loop
through ``MINIHERMES_EVENT_LOOP``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Every append-only state field in the suite is checked against its contract at each checkpoint (an older
# item changed in place would be lost on restore); the servers tests start inherit it.
os.environ["MINIHERMES_CHECK_APPEND_ONLY"] = "1"
from minihermes.runtime import _statelog
from minihermes.runtime._loop import CHOICES, loop_factory

_statelog.CHECK = True

TEST_LOOP_ENV = "MINIHERMES_TEST_LOOP"
TEST_LOOP = os.environ.get(TEST_LOOP_ENV, "uvloop").strip().lower() or "uvloop"
if TEST_LOOP not in CHOICES[1:]:
    raise pytest.UsageError(f"{TEST_LOOP_ENV} must be uvloop or asyncio, not {TEST_LOOP!r}")
_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
if TEST_LOOP == "uvloop":
    _uvloop = loop_factory("uvloop")  # a ConfigError (uvloop not installed) stops the run: no silent fallback
    assert _uvloop is not None
    _FACTORIES = {"uvloop": _uvloop, **_FACTORIES}
# Child processes (`minihermes serve`, node helpers) choose their loop from this.
os.environ["MINIHERMES_EVENT_LOOP"] = TEST_LOOP

# Where the loop matters: subprocesses and pipes (sandbox, terminal, self-written tools, MCP stdio servers,
# node processes), signals, real HTTP servers and streaming. Paths relative to tests/.
BOTH_LOOPS = (
    "tools/test_sandbox_isolation.py",
    "tools/test_sandbox_python_call.py",
    "skills/",
    "mcp/",
    "e2e/",
    "api/test_http_server.py",
    "api/test_sessions_stream.py",
    "agent/test_llm_gateway_streaming.py",
    "runtime/test_process_crash.py",
    "cli/",
)
_TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_loops: run this async test on uvloop and on asyncio's loop (see tests/conftest.py)"
    )


def _on_both_loops(item: pytest.Item) -> bool:
    if item.get_closest_marker("both_loops") is not None:
        return True
    path = item.path.resolve()
    return path.is_relative_to(_TESTS) and path.relative_to(_TESTS).as_posix().startswith(BOTH_LOOPS)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's loop choice per test: the shipped loop, plus asyncio's where the loop matters."""
    if _on_both_loops(item):
        return _FACTORIES
    return {TEST_LOOP: _FACTORIES[TEST_LOOP]}


def _children(pid: int) -> list[int]:
    """The live children of `pid`. /proc changes while it is read: a process that ends between the listing
    and the read is skipped (pathlib's glob would raise ProcessLookupError on it, so the listing is by hand)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path("/proc", name, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(name))
    return out


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    """Kill child processes a test left running (a failed assertion before its own kill), so that a server
    or a blocked node from one test can never outlive it and hold ports or files."""
    before = set(_children(os.getpid())) if Path("/proc").is_dir() else set()
    yield
    if not Path("/proc").is_dir():
        return
    for pid in set(_children(os.getpid())) - before:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
