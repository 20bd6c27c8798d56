"""The sandbox's value types and the configuration shared by its modules (see ``sandbox`` for the API)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .errors import ToolError

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SYSTEM_RO_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
READONLY_WORKSPACE_DIRS = ("skills",)
"""Folders of the workspace the program may read and execute but not change (``skill_view`` puts skills'
files in ``skills/``): a read-only bind mount with a mount namespace, file modes only without one."""


class Layer(StrEnum):
    """One isolation mechanism. Values match the launcher's names and ``isolation_report()`` keys."""

    RLIMITS = "rlimits"
    USER_DROP = "user_drop"
    USER_NAMESPACE = "user_namespace"
    NET_NAMESPACE = "net_namespace"
    MOUNT_NAMESPACE = "mount_namespace"
    PID_NAMESPACE = "pid_namespace"
    IPC_NAMESPACE = "ipc_namespace"
    LANDLOCK = "landlock"
    SECCOMP = "seccomp"


NAMESPACE_LAYERS = frozenset(
    {Layer.NET_NAMESPACE, Layer.MOUNT_NAMESPACE, Layer.PID_NAMESPACE, Layer.IPC_NAMESPACE}
)


class SandboxError(ToolError):
    """Misuse of the sandbox by our own code (bad arguments, unavailable layer, broken setup).

    Never raised for what the sandboxed program does: that is reported in ``SandboxResult``.
    """


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource limits for one run. Sizes in bytes, times in seconds."""

    cpu_seconds: int = 10
    wall_seconds: float = 30.0
    memory_bytes: int = 512 * 1024 * 1024
    """Address space per process (RLIMIT_AS)."""
    max_processes: int = 32
    """RLIMIT_NPROC: counted per uid, so it also stops fork bombs."""
    max_file_bytes: int = 64 * 1024 * 1024
    max_open_files: int = 256
    output_bytes: int = 1024 * 1024
    """Kept per stream; the rest is dropped (``truncated``). Past 4x this the program is killed."""
    tmp_bytes: int = 64 * 1024 * 1024
    """Size of the private /tmp and /dev/shm (with a mount namespace)."""
    workspace_bytes: int = 256 * 1024 * 1024
    """Quota of the workspace: bytes in its regular files (apparent size). A run may not take the workspace
    over it: see ``run_sandboxed``; the file tools check it too."""
    workspace_files: int = 10_000
    """Quota of the workspace: entries (files, folders, links) below its root."""

    def __post_init__(self) -> None:
        for name in (
            "cpu_seconds",
            "wall_seconds",
            "memory_bytes",
            "max_processes",
            "max_file_bytes",
            "workspace_bytes",
            "workspace_files",
        ):
            if getattr(self, name) <= 0:
                raise SandboxError("invalid_argument", f"SandboxLimits.{name} must be positive")
        if self.max_open_files < 16 or self.output_bytes < 0 or self.tmp_bytes < 4096:
            raise SandboxError("invalid_argument", "SandboxLimits: max_open_files/output_bytes/tmp_bytes")


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """Which layers to apply and as whom. The default is every layer this machine supports."""

    layers: frozenset[Layer] | None = None
    """None: all available layers. An explicit set must be available, or the run is refused. (As root, a set
    without user_drop runs the program as root: meant for tests that check one layer at a time.)"""
    uid: int = 65534
    gid: int = 65534
    """The unprivileged identity used when the server runs as root (nobody/nogroup)."""
    python: str | None = None
    """Interpreter for ``run_python``/``call_python_function``; default: this one's base interpreter."""
    extra_ro_paths: tuple[str, ...] = ()
    """More host paths to expose read-only (e.g. a site-packages tree) in the mount namespace / landlock."""
    readonly_workspace_dirs: tuple[str, ...] = READONLY_WORKSPACE_DIRS
    """Top-level folders of the workspace mounted read-only for the program (with a mount namespace; see
    ``READONLY_WORKSPACE_DIRS``). Each is one plain name; one absent at the start of a run is skipped."""


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """What a sandboxed program did. ``exit_code`` is negative (-signal) when a signal ended it."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    """Ran out of wall-clock or CPU time."""
    killed_reason: str | None
    """wall_timeout, cpu_limit, output_limit, file_size_limit, workspace_quota or signal:NAME; None for a
    normal exit."""
    duration: float
    cpu_seconds: float | None = None
    isolation: frozenset[Layer] = field(default_factory=frozenset)
    """The layers that were applied to this run."""
    quota_exceeded: bool = False
    """The run took the workspace over its quota (``SandboxLimits.workspace_bytes`` / ``workspace_files``),
    or was stopped for trying (``killed_reason`` ``workspace_quota``, or ``file_size_limit`` with the file
    size cap lowered to what the quota had left)."""
    workspace_bytes: int | None = None
    workspace_files: int | None = None
    """The workspace's usage after the run (None: not measured)."""

    @property
    def truncated(self) -> bool:
        """Either stream went over ``SandboxLimits.output_bytes``."""
        return self.stdout_truncated or self.stderr_truncated

    @property
    def ok(self) -> bool:
        """Exited 0 on its own."""
        return self.exit_code == 0 and self.killed_reason is None

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8, undecodable bytes replaced."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8, undecodable bytes replaced."""
        return self.stderr.decode("utf-8", "replace")


# ------------------------------------------------------------------------------------- launcher configuration


def default_python() -> str:
    """The real interpreter behind this one (outside any venv, whose files the sandbox cannot see)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def ro_paths(policy: SandboxPolicy) -> list[str]:
    """Host paths the program may read (and execute): system dirs and the interpreter, outermost only."""
    python = policy.python or default_python()
    candidates = [*SYSTEM_RO_PATHS, os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)]
    candidates += [os.path.dirname(os.path.dirname(python)), *policy.extra_ro_paths]
    paths: list[str] = []
    for raw in candidates:
        path = os.path.normpath(raw)
        if path == "/" or not os.path.isabs(path):
            continue
        # A path below another is already exposed by the outer bind.
        if any(is_within(path, other) for other in paths):
            continue
        paths = [p for p in paths if not is_within(p, path)] + [path]
    return paths


def readonly_dirs(policy: SandboxPolicy) -> list[str]:
    """``policy.readonly_workspace_dirs``, checked: single names, no separators, dots or NUL bytes."""
    names = []
    for name in policy.readonly_workspace_dirs:
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
            raise SandboxError("invalid_argument", f"readonly_workspace_dirs: not a folder name: {name!r}")
        if name not in names:
            names.append(name)
    return names


def is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def config_fd(cfg: dict[str, Any]) -> int:
    """The launcher's configuration in an anonymous file (argv would show in the sandbox's /proc)."""
    fd = os.memfd_create("minihermes-sandbox-config", os.MFD_CLOEXEC)
    data = memoryview(json.dumps(cfg).encode())
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def limits_config(limits: SandboxLimits) -> dict[str, int]:
    """The rlimit part of the launcher configuration."""
    return {
        "cpu": limits.cpu_seconds,
        "memory": limits.memory_bytes,
        "nproc": limits.max_processes,
        "fsize": limits.max_file_bytes,
        "nofile": limits.max_open_files,
    }
