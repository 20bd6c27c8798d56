"""Suite-wide guards."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

# Every append-only state field in the suite is checked against its contract at each checkpoint (an older
# item changed in place would be lost on restore); the servers tests start inherit it.
os.environ["MINIHERMES_CHECK_APPEND_ONLY"] = "1"
from minihermes.runtime import _statelog

_statelog.CHECK = True


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
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
