"""The sandbox boundary, tested by running hostile programs for real.

Each escape is tried with the default policy (every layer the machine has) and, where a single layer is
meant to stop it on its own, with only that layer, so a layer that silently stops working fails a test.
Control runs without the layer show the probe would have noticed the escape.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from minihermes.tools import _sandbox_launcher
from minihermes.tools.sandbox import (
    Layer,
    SandboxError,
    SandboxLimits,
    SandboxPolicy,
    available_layers,
    isolation_report,
    make_workspace,
    run_python,
    run_sandboxed,
)

PolicyWith = Callable[..., SandboxPolicy]
SANDBOX_UID = SandboxPolicy().uid


def _existing(paths: list[str]) -> list[str]:
    return [path for path in paths if os.path.lexists(path)]


def _processes_with(marker: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(entry)
            except OSError:
                continue
    return found


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listening TCP socket on 127.0.0.1; a connect completes through the backlog, no accept needed."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _accepted_connection(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


# --------------------------------------------------------------------------------------------------- report


def test_layer_names_match_the_launcher() -> None:
    assert {layer.value for layer in Layer} == set(_sandbox_launcher.ALL_LAYERS)


def test_isolation_report_describes_every_layer() -> None:
    report = isolation_report()
    assert set(report["layers"]) == {layer.value for layer in Layer}
    assert report["level"] in ("full", "partial", "minimal")
    assert report["layers"]["rlimits"]["available"]
    for info in report["layers"].values():
        assert isinstance(info["available"], bool) and info["detail"]
    if report["level"] == "full":
        assert report["missing"] == [] and report["network_isolated"] and report["filesystem_confined"]


async def test_default_run_applies_every_available_layer(workspace: Path) -> None:
    result = await run_sandboxed(["true"], workspace)
    assert result.ok
    assert result.isolation >= available_layers()


async def test_unavailable_layer_is_refused_not_ignored(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from minihermes.tools import sandbox

    monkeypatch.setattr(sandbox, "available_layers", lambda: frozenset({Layer.RLIMITS}))
    with pytest.raises(SandboxError) as err:
        await run_sandboxed(
            ["true"], workspace, policy=SandboxPolicy(layers=frozenset({Layer.NET_NAMESPACE}))
        )
    assert err.value.code == "layer_unavailable"


# ------------------------------------------------------------------------------------------ files and secrets


READ_SECRET = """
import sys
try:
    print(open(sys.argv[1]).read())
except OSError as e:
    print("refused:", type(e).__name__)
"""


async def test_reading_the_data_dir_is_refused(workspace: Path, data_dir: Path) -> None:
    result = await run_python(READ_SECRET, workspace, args=[str(data_dir / "credentials.json")])
    assert "SECRET" not in result.stdout_text
    assert result.stdout_text.startswith("refused:")


@pytest.mark.parametrize("layer", [Layer.USER_DROP, Layer.MOUNT_NAMESPACE, Layer.LANDLOCK])
async def test_each_file_layer_alone_hides_the_data_dir(
    layer: Layer, workspace: Path, data_dir: Path, policy_with: PolicyWith
) -> None:
    policy = policy_with(layer)
    result = await run_python(
        READ_SECRET, workspace, args=[str(data_dir / "credentials.json")], policy=policy
    )
    assert result.exit_code == 0, result.stderr_text
    assert "SECRET" not in result.stdout_text
    assert result.stdout_text.startswith("refused:")


async def test_control_without_file_layers_the_secret_is_readable(
    workspace: Path, data_dir: Path, policy_with: PolicyWith
) -> None:
    # As root with no file layer the program could read it: proof the test above can see a leak.
    if os.geteuid() != 0:
        pytest.skip("the control needs the server's own privileges, i.e. root")
    result = await run_python(
        READ_SECRET, workspace, args=[str(data_dir / "credentials.json")], policy=policy_with(Layer.RLIMITS)
    )
    assert "SECRET" in result.stdout_text


WRITE_EVERYWHERE = """
import json, sys
results = {}
for path in sys.argv[1:]:
    try:
        with open(path, "w") as f:
            f.write("x")
        results[path] = "written"
    except OSError as e:
        results[path] = type(e).__name__
print(json.dumps(results))
"""


async def test_writes_inside_the_workspace_work_and_outside_fail(
    workspace: Path, data_dir: Path, public_dir: Path
) -> None:
    inside = workspace / "out.txt"
    outside = [str(data_dir / "evil"), str(public_dir / "evil"), "/etc/evil", "/usr/evil", "/evil"]
    result = await run_python(WRITE_EVERYWHERE, workspace, args=[str(inside), "relative.txt", *outside])
    report = json.loads(result.stdout)
    assert report[str(inside)] == "written" and inside.read_text() == "x"
    assert report["relative.txt"] == "written" and (workspace / "relative.txt").exists()
    assert all(report[path] != "written" for path in outside)
    assert _existing(outside) == []


@pytest.mark.parametrize("layer", [Layer.MOUNT_NAMESPACE, Layer.LANDLOCK])
async def test_world_writable_host_dirs_are_out_of_reach(
    layer: Layer, workspace: Path, public_dir: Path, policy_with: PolicyWith
) -> None:
    # The uid drop cannot protect a 1777 directory; these layers must.
    target = public_dir / "evil"
    result = await run_python(WRITE_EVERYWHERE, workspace, args=[str(target)], policy=policy_with(layer))
    assert json.loads(result.stdout)[str(target)] != "written"
    assert not target.exists()


async def test_parent_environment_does_not_leak(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINIHERMES_FAKE_API_KEY", "sk-fake-LEAKED-abcdef")
    code = """
import json, os
seen = dict(os.environ)
for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
    for name in ("environ", "cmdline"):
        try:
            seen[f"/proc/{pid}/{name}"] = open(f"/proc/{pid}/{name}", "rb").read().decode(errors="replace")
        except OSError:
            pass
print(json.dumps(seen))
"""
    result = await run_python(code, workspace, env={"TOOL_INPUT": "given"})
    seen = json.loads(result.stdout)
    assert "LEAKED" not in result.stdout_text
    env_keys = {k for k in seen if not k.startswith("/proc/")}
    assert env_keys <= {"PATH", "HOME", "LANG", "TMPDIR", "TOOL_INPUT", "LC_CTYPE"}
    assert seen["HOME"] == str(workspace) and seen["TOOL_INPUT"] == "given"


async def test_inherited_descriptors_are_closed(workspace: Path, data_dir: Path) -> None:
    fd = os.open(data_dir / "credentials.json", os.O_RDONLY)
    try:
        os.dup2(fd, 100, inheritable=True)
        code = """
import os
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
print([fd for fd in range(1024) if is_open(fd)])
"""
        result = await run_python(code, workspace)
    finally:
        os.close(fd)
        os.close(100)
    assert json.loads(result.stdout) == [0, 1, 2]


# ------------------------------------------------------------------------------------------------- network

CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    print("connected")
except OSError as e:
    print("refused:", e)
"""


async def test_no_network(workspace: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    result = await run_python(CONNECT, workspace, args=[str(port)])
    assert result.stdout_text.startswith("refused:")
    assert not _accepted_connection(listener)


@pytest.mark.parametrize("layer", [Layer.NET_NAMESPACE, Layer.SECCOMP, Layer.LANDLOCK])
async def test_each_network_layer_alone_blocks_tcp(
    layer: Layer, workspace: Path, listener: socket.socket, policy_with: PolicyWith
) -> None:
    if layer is Layer.LANDLOCK and isolation_report()["landlock_abi"] < 4:
        pytest.skip("landlock ABI < 4 has no TCP rules")
    result = await run_python(
        CONNECT, workspace, args=[str(listener.getsockname()[1])], policy=policy_with(layer)
    )
    assert result.stdout_text.startswith("refused:"), result.stdout_text + result.stderr_text
    assert not _accepted_connection(listener)


async def test_control_without_network_layers_connects(
    workspace: Path, listener: socket.socket, policy_with: PolicyWith
) -> None:
    result = await run_python(
        CONNECT, workspace, args=[str(listener.getsockname()[1])], policy=policy_with(Layer.RLIMITS)
    )
    assert result.stdout_text.strip() == "connected"
    assert _accepted_connection(listener)


# ------------------------------------------------------------------------------------------------ processes


async def test_fork_count_is_capped_by_nproc(workspace: Path) -> None:
    marker = f"mh-forks-{uuid.uuid4().hex}"  # in the code, so in every child's /proc cmdline
    code = f"""# {marker}
import os, time
n = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print(n)
"""
    limits = SandboxLimits(max_processes=12, wall_seconds=20)
    result = await run_python(code, workspace, limits)
    assert result.exit_code == 0, result.stderr_text
    assert 0 < int(result.stdout) < 12
    if Layer.PID_NAMESPACE in result.isolation:
        assert _processes_with(marker) == []  # the sleeping children died with the run


async def test_fork_bomb_is_contained(workspace: Path) -> None:
    marker = f"mh-bomb-{uuid.uuid4().hex}"
    bomb = (
        f"# {marker}\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    )
    limits = SandboxLimits(max_processes=16, wall_seconds=2, cpu_seconds=2)
    result = await run_python(bomb, workspace, limits)
    assert result.timed_out
    assert result.duration < 10
    if Layer.PID_NAMESPACE in result.isolation:
        assert _processes_with(marker) == []
    # The machine is fine: we can still start processes.
    probe = await asyncio.create_subprocess_exec("true")
    assert await probe.wait() == 0


def _unique_sleep() -> str:
    """An argument for sleep(1) that no other process on the machine has: its /proc cmdline is a marker."""
    return f"3600.{uuid.uuid4().int % 10**12:012d}"


async def test_daemonised_children_die_with_the_program(workspace: Path, policy_with: PolicyWith) -> None:
    marker = _unique_sleep()
    # setsid: a new session escapes the process group; the pid namespace must still catch it.
    script = f"setsid sleep {marker} & echo started"
    result = await run_sandboxed(["sh", "-c", script], workspace, policy=policy_with(Layer.PID_NAMESPACE))
    assert result.stdout_text.strip() == "started"
    assert _processes_with(marker) == []  # init's exit waits for the namespace to empty


async def test_escaped_daemon_without_pid_namespace_does_not_hang_the_run(
    workspace: Path, policy_with: PolicyWith
) -> None:
    # Degraded mode: a setsid'ed child keeps stdout open and survives; the run must still end on time.
    marker = _unique_sleep()
    policy = policy_with(Layer.USER_DROP)
    limits = SandboxLimits(wall_seconds=20)
    try:
        result = await run_sandboxed(
            ["sh", "-c", f"setsid sleep {marker} & echo done"], workspace, limits, policy=policy
        )
        assert result.exit_code == 0 and result.stdout_text == "done\n"
        assert result.killed_reason is None and result.duration < 10
    finally:
        for pid in _processes_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


async def test_program_cannot_see_or_signal_the_server(workspace: Path) -> None:
    code = f"""
import os
try:
    os.kill({os.getpid()}, 0)
    print("reachable")
except OSError as e:
    print("refused:", type(e).__name__)
"""
    result = await run_python(code, workspace)
    assert result.stdout_text.startswith("refused:")


async def test_runs_as_the_unprivileged_uid(workspace: Path, policy_with: PolicyWith) -> None:
    result = await run_sandboxed(["id", "-u"], workspace, policy=policy_with(Layer.USER_DROP))
    assert int(result.stdout) == SANDBOX_UID
    assert result.isolation >= {Layer.USER_DROP}


UNSHARE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("unshared" if libc.unshare(0x10000000) == 0 else f"refused: errno {ctypes.get_errno()}")
"""


async def test_seccomp_refuses_namespace_creation(workspace: Path, policy_with: PolicyWith) -> None:
    result = await run_python(UNSHARE, workspace, policy=policy_with(Layer.SECCOMP))
    assert result.stdout_text.strip() == "refused: errno 1"


async def test_control_without_seccomp_unshare_works(workspace: Path, policy_with: PolicyWith) -> None:
    result = await run_python(UNSHARE, workspace, policy=policy_with(Layer.RLIMITS))
    assert result.stdout_text.strip() == "unshared"


# --------------------------------------------------------------------------------------------------- limits


async def test_cpu_bound_loop_hits_the_cpu_limit(workspace: Path) -> None:
    result = await run_python("while True: pass", workspace, SandboxLimits(cpu_seconds=1, wall_seconds=30))
    assert result.killed_reason == "cpu_limit"
    assert result.timed_out and result.exit_code < 0
    assert result.duration < 10


async def test_sleeping_program_hits_the_wall_clock(workspace: Path) -> None:
    result = await run_python("import time; time.sleep(60)", workspace, SandboxLimits(wall_seconds=1))
    assert result.killed_reason == "wall_timeout"
    assert result.timed_out and result.exit_code < 0
    assert result.duration < 5


async def test_memory_hog_is_stopped(workspace: Path) -> None:
    code = "hog = []\nwhile True:\n    hog.append(bytearray(32 * 1024 * 1024))"
    result = await run_python(code, workspace, SandboxLimits(memory_bytes=256 * 1024 * 1024))
    assert result.exit_code != 0
    assert "MemoryError" in result.stderr_text


async def test_output_flood_is_capped_and_killed(workspace: Path) -> None:
    result = await run_sandboxed(["yes"], workspace, SandboxLimits(output_bytes=64 * 1024, wall_seconds=30))
    assert result.killed_reason == "output_limit"
    assert result.truncated and result.stdout_truncated
    assert len(result.stdout) == 64 * 1024
    assert result.duration < 10


async def test_output_a_little_over_the_cap_is_truncated_not_killed(workspace: Path) -> None:
    result = await run_python("print('x' * 100_000)", workspace, SandboxLimits(output_bytes=65536))
    assert result.exit_code == 0 and result.killed_reason is None
    assert result.truncated and len(result.stdout) == 65536


async def test_file_size_limit(workspace: Path) -> None:
    limits = SandboxLimits(max_file_bytes=1024 * 1024)
    result = await run_sandboxed(["sh", "-c", "exec head -c 4000000 /dev/zero > big"], workspace, limits)
    assert result.killed_reason == "file_size_limit"
    assert (workspace / "big").stat().st_size <= 1024 * 1024


# ----------------------------------------------------------------------------------------- plain behaviour


async def test_stdin_is_passed_or_empty(workspace: Path) -> None:
    given = await run_sandboxed(["cat"], workspace, stdin=b"hello\x00world")
    assert given.stdout == b"hello\x00world"
    closed = await run_sandboxed(["cat"], workspace)
    assert closed.stdout == b"" and closed.exit_code == 0


async def test_exit_codes_and_signals_are_reported(workspace: Path) -> None:
    assert (await run_sandboxed(["sh", "-c", "exit 3"], workspace)).exit_code == 3
    crashed = await run_sandboxed(["sh", "-c", "kill -SEGV $$"], workspace)
    assert crashed.exit_code == -11 and crashed.killed_reason == "signal:SIGSEGV"


async def test_missing_program_is_a_result_not_an_exception(workspace: Path) -> None:
    result = await run_sandboxed(["/no/such/program"], workspace)
    assert result.exit_code == 127
    assert "cannot execute" in result.stderr_text


async def test_workspace_and_tmp_are_usable(workspace: Path) -> None:
    script = "echo data > f.txt && cat f.txt && echo t > $TMPDIR/t && cat $TMPDIR/t && pwd"
    result = await run_sandboxed(["sh", "-c", script], workspace)
    assert result.stdout_text.split() == ["data", "t", str(workspace)]


async def test_files_written_by_the_server_stay_usable_by_the_program() -> None:
    from minihermes.tools.workspace import Workspace

    root = make_workspace(Path(tempfile.mkdtemp(prefix="mh-ws-", dir="/tmp")) / "session")
    try:
        Workspace(root).write_file("data/input.txt", "from the server\n")
        script = "echo 'and the program' >> data/input.txt && echo new > data/made.txt"
        result = await run_sandboxed(["sh", "-c", script], root)
        assert result.ok, result.stderr_text
        assert Workspace(root).read_file("data/input.txt").content == "from the server\nand the program\n"
        assert Workspace(root).read_file("data/made.txt").content == "new\n"
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)


async def test_misuse_raises_sandbox_error(workspace: Path) -> None:
    with pytest.raises(SandboxError) as err:
        await run_sandboxed([], workspace)
    assert err.value.code == "invalid_argument"
    with pytest.raises(SandboxError) as err:
        await run_sandboxed(["true"], workspace / "missing")
    assert err.value.code == "invalid_workspace"
    with pytest.raises(SandboxError) as err:
        await run_sandboxed(["true"], "/usr/share")
    assert err.value.code == "invalid_workspace"
    with pytest.raises(SandboxError) as err:
        await run_python("x" * 200_000, workspace)
    assert err.value.code == "code_too_large"


async def test_cancellation_kills_the_program(workspace: Path) -> None:
    marker = _unique_sleep()
    ready = workspace / "ready"
    os.mkfifo(ready)
    if os.geteuid() == 0:
        os.chown(ready, SANDBOX_UID, SANDBOX_UID)
    task = asyncio.create_task(
        run_sandboxed(["sh", "-c", f"echo up > ready; exec sleep {marker}"], workspace)
    )
    assert await asyncio.to_thread(ready.read_text) == "up\n"  # blocks until the program is running
    pids = _processes_with(marker)
    for _ in range(100):  # the exec right after the FIFO write may not have happened yet
        if pids:
            break
        await asyncio.to_thread(select.select, [], [], [], 0.01)
        pids = _processes_with(marker)
    assert pids
    pidfds = [os.pidfd_open(int(pid)) for pid in pids]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    try:
        readable, _, _ = select.select(pidfds, [], [], 10)  # a pidfd turns readable when its process exits
        assert len(readable) == len(pidfds)
    finally:
        for fd in pidfds:
            os.close(fd)


def test_launcher_rejects_unknown_layers() -> None:
    config = {
        "status_fd": 1,
        "layers": ["teleport"],
        "ro_paths": [],
        "uid": 1,
        "gid": 1,
        "limits": {},
        "tmp_bytes": 1,
        "backstop_seconds": 1,
    }
    with pytest.raises(ValueError, match="teleport"):
        _sandbox_launcher.Launch(config)
