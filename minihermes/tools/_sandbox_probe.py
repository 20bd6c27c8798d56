"""Isolation probe: tries every sandbox layer for real, each in a throwaway child, and reports which work.

Run by ``_sandbox_report.py`` as ``python -I -S _sandbox_probe.py CONFIG_FD``, the same way as the launcher,
whose setup code it reuses (loaded by path: ``-I -S`` leaves the package off ``sys.path``). Writes one
``probe`` event on the status pipe.
"""

from __future__ import annotations

import errno
import functools
import importlib.util
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minihermes.tools import _linux
    from minihermes.tools import _sandbox_launcher as launcher
else:

    def _load_launcher() -> ModuleType:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_launcher.py")
        spec = importlib.util.spec_from_file_location("_minihermes_sandbox_launcher", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    launcher = _load_launcher()
    _linux = launcher._linux  # one copy of the ctypes module, the one the launcher loaded


def _attempt(check: Callable[[], str]) -> dict[str, Any]:
    """Run ``check`` in a throwaway child (namespaces and credentials must not stick to us)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            detail, ok = check(), True
        except BaseException as e:
            detail, ok = f"{type(e).__name__}: {e}", False
        os.write(write_fd, json.dumps({"available": ok, "detail": detail[:1000]}).encode())
        os._exit(0)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 4096):
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    try:
        result: dict[str, Any] = json.loads(b"".join(chunks))
    except ValueError:
        result = {"available": False, "detail": "probe child died"}
    return result


def _in_ns(run: launcher.Launch, flags: int) -> None:
    launcher.enter_namespaces(run, flags)


def _userns(run: launcher.Launch) -> str:
    if run.is_root:
        _linux.unshare(_linux.CLONE_NEWUSER)
        return "available (not needed: running as root)"
    launcher.enter_namespaces(run, _linux.CLONE_NEWUSER)
    return "unprivileged user namespace"


def _user_drop(run: launcher.Launch) -> str:
    if not run.is_root:
        raise PermissionError("server is not root: the sandbox shares its uid")
    os.setgroups([])
    os.setresgid(run.gid, run.gid, run.gid)
    os.setresuid(run.uid, run.uid, run.uid)
    return f"uid {run.uid} gid {run.gid}"


def _net(run: launcher.Launch) -> str:
    _in_ns(run, _linux.CLONE_NEWNET)
    with socket.socket() as s:
        try:
            s.connect(("127.0.0.1", 9))
        except OSError as e:
            return f"no interfaces up ({e.strerror})"
    raise RuntimeError("loopback reachable inside the new namespace")


def _mount_ns(run: launcher.Launch) -> str:
    _in_ns(run, _linux.CLONE_NEWNS)
    launcher.build_root(run, with_proc=False)
    try:
        os.mkdir("/.probe")  # EROFS even for root if the new root is really read-only
    except OSError as e:
        expected = {"tmp", "dev", "proc"} | {p.split("/")[1] for p in run.ro_paths}
        if e.errno == errno.EROFS and set(os.listdir("/")) <= expected:
            return "minimal read-only root, private /tmp"
    raise RuntimeError(f"root not confined: {sorted(os.listdir('/'))}")


def _pid_ns(run: launcher.Launch) -> str:
    _in_ns(run, _linux.CLONE_NEWPID | _linux.CLONE_NEWNS)
    child = os.fork()
    if child == 0:
        ok = os.getpid() == 1
        try:
            _linux.mount(None, "/", None, _linux.MS_REC | _linux.MS_PRIVATE)
            _linux.mount(
                "proc",
                "/proc",
                "proc",
                _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC,
            )
        except OSError:
            os._exit(2 if ok else 1)
        os._exit(0 if ok else 1)
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    if code == 1:
        raise RuntimeError("child is not pid 1")
    return "private pids, private /proc" if code == 0 else "private pids, no /proc mount"


def _ipc(run: launcher.Launch) -> str:
    _in_ns(run, _linux.CLONE_NEWIPC | _linux.CLONE_NEWUTS)
    _linux.sethostname("sandbox")
    return "private launcher.IPC and hostname"


def _landlock(run: launcher.Launch) -> str:
    abi = _linux.landlock_abi()
    _linux.set_no_new_privs()
    features = _linux.landlock_restrict([("/usr", _linux.LL_READ)], abi=abi)
    try:
        os.listdir("/etc")
    except PermissionError:
        return f"ABI {abi}: " + ", ".join(features)
    raise RuntimeError("restriction not enforced")


def _seccomp(run: launcher.Launch) -> str:
    _linux.set_no_new_privs()
    _linux.install_seccomp_filter()
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    except PermissionError:
        return f"deny-list filter ({_linux.ARCH})"
    raise RuntimeError("filter not enforced")


def _rlimits(run: launcher.Launch) -> str:
    launcher.apply_rlimits(run.limits)
    return "cpu, address space, processes, file size, open files, core"


def probe(run: launcher.Launch) -> dict[str, dict[str, Any]]:
    """Try every layer for real, each in its own child, and say what works on this machine."""
    checks: dict[str, Callable[[launcher.Launch], str]] = {
        launcher.RLIMITS: _rlimits,
        launcher.USER_DROP: _user_drop,
        launcher.USERNS: _userns,
        launcher.NET: _net,
        launcher.MOUNT: _mount_ns,
        launcher.PID: _pid_ns,
        launcher.IPC: _ipc,
        launcher.LANDLOCK: _landlock,
        launcher.SECCOMP: _seccomp,
    }
    return {name: _attempt(functools.partial(check, run)) for name, check in checks.items()}


def main(argv: list[str]) -> int:
    cfg = launcher.read_config(int(argv[-1]))
    run = launcher.Launch(cfg)
    launcher.start(run, cfg)
    signal.setitimer(signal.ITIMER_REAL, run.backstop_seconds)  # a wedged check must not wedge the server
    run.report({"event": "probe", "layers": probe(run), "landlock_abi": _linux.landlock_abi()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
