"""CLI commands that write a node's store refuse while a node runs on it (issue 30), naming that node in one
line, or go through it: none opens the store beside it.

The running node is a child process holding the data dir's lock (``DataDirLock``, as ``serve`` does) and
recording an address where nothing listens; the commands run in this process. The store file never appears:
nothing opened it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minihermes.cli.main import app
from minihermes.runtime import running_node

from .._server import free_port

HOLD = (
    "import sys\n"
    "from minihermes.runtime import DataDirLock\n"
    "lock = DataDirLock(sys.argv[1])\n"
    "lock.acquire(command='minihermes serve', http=True, auth=False, url=sys.argv[2])\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str, int]]:
    """A data dir held by another process's node: (data dir, its recorded url, its pid)."""
    data = tmp_path / "data"
    url = f"http://127.0.0.1:{free_port()}"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(data), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        assert running_node(data) is not None
        yield data, url, child.pid
    finally:
        child.kill()
        child.wait()


def one_line(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    (line,) = result.output.strip().splitlines()
    return line


@pytest.mark.parametrize(
    "args",
    [
        ["keys", "create", "--tenant", "acme", "--principal", "ann"],
        ["keys", "list"],
        ["keys", "revoke", "k-123"],
    ],
    ids=["keys create", "keys list", "keys revoke"],
)
def test_keys_commands_refuse_naming_the_running_node(served: tuple[Path, str, int], args: list[str]) -> None:
    data, url, pid = served
    line = one_line([*args, "--data-dir", str(data)])
    assert line.startswith("error: ") and f"pid {pid}" in line and url in line, line
    assert "/api/v1/api-keys" in line  # where to do it instead
    assert not (data / "minihermes.db").exists()


def test_restore_refuses_a_data_dir_a_node_runs_on(served: tuple[Path, str, int], tmp_path: Path) -> None:
    data, url, pid = served
    line = one_line(["restore", str(tmp_path / "some-backup"), "--data-dir", str(data)])
    assert f"pid {pid}" in line and url in line and "new data dir" in line, line
    assert sorted(p.name for p in data.iterdir()) == ["node.json", "node.lock"]


def test_op_commands_go_to_the_running_node_not_its_store(served: tuple[Path, str, int]) -> None:
    """A write through an actor op (``memory store``) talks to the node's address; with nothing listening
    there it fails naming it, and never opens an embedded node on the held store."""
    data, url, _ = served
    line = one_line(["memory", "store", "colour", "teal", "--data-dir", str(data)])
    assert "connection_failed" in line and url in line, line
    assert not (data / "minihermes.db").exists()
