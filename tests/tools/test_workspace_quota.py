"""The per-session workspace quota (bytes and entries): the file tools refuse a write that would exceed it,
and a sandboxed command cannot take the workspace over it unnoticed: the call reports ``quota_exceeded``
and, while the workspace is over, every further write is refused."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.tool_executor import ToolExecutor, workspace_path
from minihermes.runtime import ActorSpec, Node, NodeOptions, RequestContext, SupervisorSpec
from minihermes.runtime.store import open_store
from minihermes.tools.sandbox import SandboxLimits, run_sandboxed
from minihermes.tools.workspace import Quota, QuotaExceeded, Workspace, measure_usage

# Subprocesses, pipes and a watcher task: the sandbox's behaviour may differ between loops.
pytestmark = pytest.mark.both_loops

KB = 1000
ACME = RequestContext(tenant="acme", principal="alice", roles=frozenset({"admin"}))


def small(**extra: Any) -> SandboxLimits:
    """1 MB and 50 entries, files of up to 600 kB each, a short wall clock."""
    limits = {"workspace_bytes": 1_000_000, "workspace_files": 50, "max_file_bytes": 600 * KB}
    return SandboxLimits(**{"wall_seconds": 20.0, **limits, **extra})


# -------------------------------------------------------------------------------------------- measuring


def test_usage_counts_bytes_and_entries_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 300)
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "b").write_bytes(b"y" * 200)
    os.link(tmp_path / "a", tmp_path / "a-again")  # one file, two names: counted once
    os.symlink("/usr", tmp_path / "usr")  # not entered
    usage = measure_usage(str(tmp_path), max_entries=1000)
    assert (usage.bytes, usage.files, usage.complete) == (500, 6, True)
    # Far more entries than the walk may visit: incomplete, which is over any quota.
    capped = measure_usage(str(tmp_path), max_entries=3)
    assert not capped.complete and Quota(10**9, 10**6).over(capped)


# ------------------------------------------------------------------------------------------- file tools


def test_write_file_over_the_byte_quota_is_refused_with_usage_and_limit(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, quota=Quota(max_bytes=1000, max_files=10))
    ws.write_file("a.txt", "x" * 600)
    ws.write_file("a.txt", "x" * 900)  # replacing a file frees its old size first
    with pytest.raises(QuotaExceeded) as err:
        ws.write_file("b.txt", "y" * 200)
    assert err.value.code == "quota_exceeded"
    assert err.value.details == {
        "usage_bytes": 1100,
        "usage_files": 2,
        "limit_bytes": 1000,
        "limit_files": 10,
    }
    assert "quota of 1000 bytes" in err.value.message
    assert not (tmp_path / "b.txt").exists()
    ws.write_file("b.txt", "y" * 100)  # what fits still goes


def test_write_file_over_the_entry_quota_is_refused(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, quota=Quota(max_bytes=10**6, max_files=3))
    for name in ("a", "b", "c"):
        ws.write_file(name, name)
    with pytest.raises(QuotaExceeded) as err:
        ws.write_file("d", "d")
    assert err.value.details["usage_files"] == 4 and err.value.details["limit_files"] == 3
    ws.write_file("a", "replaced")  # no new entry


# ---------------------------------------------------------------------------------------------- sandbox


@pytest.fixture
def workspace() -> Iterator[Path]:
    # Under /tmp: reachable by the sandbox's unprivileged uid even without a mount namespace.
    path = Path(tempfile.mkdtemp(prefix="mh-ws-quota-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# Three files under the 600 kB file cap, 1.2 MB together: only the third takes the workspace over its quota,
# so f1 and f2 are whole whether the watcher stops the command during f3 or the check after it finds it over.
WRITE_THREE = "for i in 1 2 3; do head -c 400000 /dev/zero > f$i || exit 7; done; echo done"


async def test_a_command_writing_many_files_under_the_file_cap_reports_quota_exceeded(workspace):
    result = await run_sandboxed(["/bin/sh", "-c", WRITE_THREE], workspace, small())
    assert result.quota_exceeded is True
    assert result.workspace_bytes is not None and result.workspace_bytes > 1_000_000
    # Over quota: the next command may look and delete, not write.
    again = await run_sandboxed(["/bin/sh", "-c", "echo more > g; echo rc=$?"], workspace, small())
    assert again.quota_exceeded is True and not (workspace / "g").read_bytes()
    ws = Workspace(workspace, quota=Quota(1_000_000, 50))
    with pytest.raises(QuotaExceeded):
        ws.write_file("h.txt", "x")
    freed = await run_sandboxed(["/bin/sh", "-c", "rm f3 g; ls"], workspace, small())
    assert freed.ok and not freed.quota_exceeded and freed.stdout_text.split() == ["f1", "f2"]
    ws.write_file("h.txt", "x")


async def test_a_command_that_keeps_writing_is_stopped(workspace):
    # Without the quota this writes until the wall clock (20 s): far past 1 MB.
    endless = "i=0; while true; do i=$((i+1)); head -c 100000 /dev/zero > f$i; done"
    result = await run_sandboxed(["/bin/sh", "-c", endless], workspace, small(workspace_files=10_000))
    assert result.quota_exceeded is True and result.killed_reason == "workspace_quota", result
    assert not result.timed_out


async def test_the_entry_quota_holds_for_commands(workspace):
    result = await run_sandboxed(["/bin/sh", "-c", "mkdir -p d; touch d/$(seq 1 80)"], workspace, small())
    assert result.quota_exceeded is True and result.workspace_files is not None
    assert result.workspace_files > 50  # 81 unless the watcher stopped it on the way


async def test_a_normal_command_is_unaffected(workspace):
    result = await run_sandboxed(["/bin/sh", "-c", "echo hi > a; cat a"], workspace, small())
    assert result.ok and not result.quota_exceeded and result.stdout_text == "hi\n"
    assert (result.workspace_bytes, result.workspace_files) == (3, 1)


# -------------------------------------------------------------------------------------- through the tools


@pytest.fixture
async def node(tmp_path: Path, workspace: Path) -> AsyncIterator[Node]:
    terminal = {"workspace_bytes": 1_000_000, "workspace_files": 50, "max_file_bytes": 600 * KB}
    spec = ActorSpec(
        "tool_executor",
        ToolExecutor,
        per_tenant=True,
        args={"workspace_root": str(workspace), "terminal": terminal},
    )
    tree = SupervisorSpec(name="root", children=[spec])
    n = Node(open_store("sqlite", data_dir=str(tmp_path / "data")), tree, options=NodeOptions())
    await n.start()
    yield n
    await n.stop(deadline=10)


async def _run(node: Node, name: str, input: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "tool_executor", "execute", {"name": name, "input": input, "session_id": "s1"}, ctx=ACME, timeout=60
    )
    return reply


async def test_terminal_and_write_file_report_quota_exceeded(node: Node, workspace: Path):
    ok = await _run(node, "terminal", {"command": "echo fine > a; cat a"})
    assert ok["status"] == "ok" and ok["result"]["untrusted_content"]["stdout"] == "fine\n"

    over = await _run(node, "terminal", {"command": WRITE_THREE})
    error = over["error"]
    assert over["status"] == "error" and error["code"] == "quota_exceeded", over
    assert error["limit_bytes"] == 1_000_000 and error["usage_bytes"] > 1_000_000
    # What it printed comes along (nothing here when the watcher stopped it before its last echo).
    assert error["limit_files"] == 50 and error["stdout"] in ("done\n", "")

    refused = await _run(node, "write_file", {"path": "b.txt", "content": "x"})
    assert refused["error"]["code"] == "quota_exceeded" and refused["error"]["limit_bytes"] == 1_000_000
    folder = workspace_path(workspace, "acme", "default", "s1")
    assert not (folder / "b.txt").exists()

    await _run(node, "terminal", {"command": "rm f*"})
    assert (await _run(node, "write_file", {"path": "b.txt", "content": "x"}))["status"] == "ok"
