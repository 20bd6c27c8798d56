"""Run untrusted programs (LLM-written tools, shell commands) in an isolated child process.

Nothing untrusted runs in the server process. ``run_sandboxed`` starts ``_sandbox_launcher.py`` in a fresh
``python -I -S`` with an empty environment and a new session; the launcher applies every isolation layer
this machine supports (see ``isolation_report``) and execs the program. The server side only pumps the
pipes, enforces the wall clock and output caps, and kills the whole process group when needed.

Layers, strongest first: a pid namespace (kill everything on exit), a network namespace (no interfaces), a
mount namespace with a minimal read-only root (the data dir does not exist in there; the workspace is
writable but for its read-only ``skills/``: ``SandboxPolicy.readonly_workspace_dirs``), an unprivileged uid
(ordinary file permissions protect the server's files), landlock (filesystem allow-list, TCP, signals),
a seccomp deny-list (no sockets but AF_UNIX, no namespaces/mounts/ptrace/bpf/io_uring) and rlimits. A
layer the kernel or container refuses is left out and reported, never silently assumed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from minihermes.tools._sandbox_process import execute
from minihermes.tools._sandbox_report import available_layers, isolation_report
from minihermes.tools._sandbox_types import (
    NAMESPACE_LAYERS,
    SANDBOX_PATH,
    Layer,
    SandboxError,
    SandboxLimits,
    SandboxPolicy,
    SandboxResult,
    default_python,
    is_within,
    limits_config,
    readonly_dirs,
    ro_paths,
)
from minihermes.tools.workspace import Quota, Usage

__all__ = [
    "Layer",
    "SandboxError",
    "SandboxLimits",
    "SandboxPolicy",
    "SandboxResult",
    "available_layers",
    "default_python",
    "isolation_report",
    "make_workspace",
    "run_python",
    "run_sandboxed",
]

_MAX_CODE_BYTES = 100_000  # `python -c` travels in argv; the kernel caps one argument at 128 KiB
_FORBIDDEN_WORKSPACE_ROOTS = ("/proc", "/dev", "/sys")


async def _resolve_layers(policy: SandboxPolicy) -> tuple[frozenset[Layer], frozenset[Layer]]:
    """(layers to request from the launcher, layers to report as applied)."""
    available = await asyncio.to_thread(available_layers)
    if policy.layers is None:
        requested = available
    else:
        requested = frozenset(policy.layers) | {Layer.RLIMITS}
        requested -= {Layer.USER_NAMESPACE}
        missing = requested - available
        if missing:
            names = ", ".join(sorted(missing))
            raise SandboxError("layer_unavailable", f"not available on this machine: {names}")
    applied = requested
    if os.geteuid() != 0 and requested & NAMESPACE_LAYERS:
        applied |= {Layer.USER_NAMESPACE}
    return requested, applied


# ----------------------------------------------------------------------------------------------- validation


def _check_workspace(workspace: Path | str, exposed: Iterable[str]) -> str:
    path = Path(workspace)
    if not path.is_absolute():
        raise SandboxError("invalid_workspace", f"workspace must be an absolute path: {workspace}")
    try:
        resolved = path.resolve(strict=True)
    except OSError as e:
        raise SandboxError("invalid_workspace", f"workspace does not exist: {workspace} ({e})") from e
    if not resolved.is_dir():
        raise SandboxError("invalid_workspace", f"workspace is not a directory: {workspace}")
    text = str(resolved)
    if text == "/" or any(is_within(text, root) for root in _FORBIDDEN_WORKSPACE_ROOTS):
        raise SandboxError("invalid_workspace", f"workspace not allowed: {text}")
    for ro in exposed:
        if is_within(text, ro) or is_within(ro, text):
            raise SandboxError("invalid_workspace", f"workspace overlaps the read-only system path {ro}")
    return text


def _check_strings(kind: str, values: Iterable[str]) -> None:
    for value in values:
        if not isinstance(value, str) or "\0" in value:
            raise SandboxError("invalid_argument", f"{kind} must be strings without NUL bytes")


# ---------------------------------------------------------------------------------------------- public API


def make_workspace(path: Path | str, policy: SandboxPolicy | None = None) -> Path:
    """Create (or adopt) a workspace directory, 0700 and, when the server runs as root, owned by the
    sandbox uid, so files the server writes into it (see ``Workspace``) stay writable by the programs."""
    policy = policy or SandboxPolicy()
    root = Path(path)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.geteuid() == 0:
            os.fchown(fd, policy.uid, policy.gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return root.resolve()


async def run_sandboxed(
    argv: Sequence[str],
    workspace: Path | str,
    limits: SandboxLimits | None = None,
    *,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    policy: SandboxPolicy | None = None,
) -> SandboxResult:
    """Run ``argv`` in the sandbox with ``workspace`` as its writable home and working directory.

    The program gets an empty environment (PATH, HOME=workspace, LANG=C.UTF-8, TMPDIR, plus ``env``),
    /dev/null as stdin unless ``stdin`` is given, and no inherited descriptors. Returns whatever the program
    did, including crashes and limit kills; raises ``SandboxError`` only for bad arguments or when the
    isolation itself cannot be set up. The workspace's quota (``limits.workspace_bytes`` and
    ``workspace_files``) holds for the run: see "the quota" below and ``SandboxResult.quota_exceeded``.
    """
    limits = limits or SandboxLimits()
    policy = policy or SandboxPolicy()
    argv = list(argv)
    if not argv:
        raise SandboxError("invalid_argument", "argv is empty")
    _check_strings("argv", argv)
    _check_strings("env", [*(env or {}).keys(), *(env or {}).values()])
    if any(not key or "=" in key for key in env or {}):
        raise SandboxError("invalid_argument", "env names must be non-empty and without '='")
    if stdin is not None and not isinstance(stdin, bytes):
        raise SandboxError("invalid_argument", "stdin must be bytes")
    exposed = ro_paths(policy)
    protected = readonly_dirs(policy)
    ws = _check_workspace(workspace, exposed)
    requested, applied = await _resolve_layers(policy)
    private_tmp = Layer.MOUNT_NAMESPACE in requested
    program_env = {
        "PATH": SANDBOX_PATH,
        "HOME": ws,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp" if private_tmp else ws,
    }
    program_env.update(env or {})
    quota = Quota(limits.workspace_bytes, limits.workspace_files)
    before = await _measure(quota, ws)
    rlimits = limits_config(limits)
    # One file cannot outgrow what the quota has left (the watcher below bounds many files together).
    room = max(0, quota.max_bytes - before.bytes) if before.complete else 0
    rlimits["fsize"] = min(rlimits["fsize"], room)
    cfg = {
        "argv": argv,
        "env": program_env,
        "workspace": ws,
        "layers": sorted(requested),
        "ro_paths": exposed,
        "workspace_ro_dirs": protected,
        "uid": policy.uid,
        "gid": policy.gid,
        "limits": rlimits,
        "tmp_bytes": limits.tmp_bytes,
        "backstop_seconds": limits.wall_seconds + 5.0,
    }
    return await _run_within_quota(cfg, stdin, limits, applied, ws, quota, before)


# -------------------------------------------------------------------------------------------- the quota
#
# No unprivileged way to give a folder a size limit exists (a tmpfs or loop mount needs privileges, and a
# tmpfs would not outlive the run), so the workspace quota is kept the way kubelet keeps an emptyDir's
# sizeLimit: by measuring. Before the run, RLIMIT_FSIZE is lowered to what the quota has left (no single
# file can take more); during the run a watcher measures the workspace every so often and stops the program
# when it goes over; after the run the usage is measured again. A run that took the workspace over its
# quota is reported (``quota_exceeded``), and the files stay (which to delete is the user's call): while the
# workspace is over, the next run gets RLIMIT_FSIZE 0 (it can read and delete, not write) and the file
# tools refuse writes.

_WATCH_FIRST = 0.1
_WATCH_MAX = 5.0
_WATCH_SHARE = 20
"""The watcher waits this many times as long as its last measurement took (at most 5 % of a core)."""


def _over(quota: Quota, usage: Usage, before: Usage) -> bool:
    """Over the quota, or (when it already was) grown since the run started."""
    if not usage.complete:
        return before.complete or usage.files > before.files
    return usage.bytes > max(quota.max_bytes, before.bytes) or usage.files > max(
        quota.max_files, before.files
    )


async def _measure(quota: Quota, ws: str) -> Usage:
    try:
        return await asyncio.to_thread(quota.measure, ws)
    except OSError:  # out of descriptors, say: unknown, which counts as over
        return Usage(0, 0, complete=False)


async def _watch(quota: Quota, ws: str, before: Usage) -> Usage:
    """Returns the usage once the run has taken the workspace over its quota."""
    loop = asyncio.get_running_loop()
    pause = _WATCH_FIRST
    while True:
        await asyncio.sleep(pause)
        started = loop.time()
        usage = await _measure(quota, ws)
        if _over(quota, usage, before):
            return usage
        pause = min(_WATCH_MAX, max(_WATCH_FIRST, _WATCH_SHARE * (loop.time() - started)))


async def _run_within_quota(
    cfg: dict[str, Any],
    stdin: bytes | None,
    limits: SandboxLimits,
    applied: frozenset[Layer],
    ws: str,
    quota: Quota,
    before: Usage,
) -> SandboxResult:
    started = time.monotonic()
    run = asyncio.ensure_future(execute(cfg, stdin, limits, applied))
    watch = asyncio.ensure_future(_watch(quota, ws, before))
    try:
        await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # cancelled (the tool's timeout): cancelling the run kills the program
        run.cancel()
        watch.cancel()
        await asyncio.wait({run, watch})
        raise
    if not run.done():
        # Over quota: cancelling ``execute`` kills the whole process group (its output is lost with it).
        run.cancel()
        await asyncio.wait({run})
        if not run.cancelled() and run.exception() is None:
            result = run.result()  # it finished meanwhile: report what it did, then the quota
        else:
            usage = await _measure(quota, ws)
            return SandboxResult(
                exit_code=-signal.SIGKILL,
                stdout=b"",
                stderr=b"",
                stdout_truncated=False,
                stderr_truncated=False,
                timed_out=False,
                killed_reason="workspace_quota",
                duration=time.monotonic() - started,
                isolation=applied,
                quota_exceeded=True,
                workspace_bytes=usage.bytes,
                workspace_files=usage.files,
            )
    else:
        watch.cancel()
        await asyncio.wait({watch})
        result = run.result()  # SandboxError raised by the run passes through
    usage = await _measure(quota, ws)
    lowered = cfg["limits"]["fsize"] < limits.max_file_bytes
    exceeded = _over(quota, usage, before) or (lowered and result.killed_reason == "file_size_limit")
    return dataclasses.replace(
        result, quota_exceeded=exceeded, workspace_bytes=usage.bytes, workspace_files=usage.files
    )


async def run_python(
    code: str,
    workspace: Path | str,
    limits: SandboxLimits | None = None,
    *,
    args: Sequence[str] = (),
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    policy: SandboxPolicy | None = None,
) -> SandboxResult:
    """Run Python source with ``python -I -B -c`` (isolated mode: no site dir, no PYTHON* variables, no
    bytecode written into the workspace) in the sandbox."""
    if not isinstance(code, str) or "\0" in code:
        raise SandboxError("invalid_argument", "code must be a string without NUL bytes")
    if len(code.encode()) > _MAX_CODE_BYTES:
        raise SandboxError("code_too_large", f"code is over {_MAX_CODE_BYTES} bytes")
    python = (policy or SandboxPolicy()).python or default_python()
    argv = [python, "-I", "-B", "-c", code, *args]
    return await run_sandboxed(argv, workspace, limits, stdin=stdin, env=env, policy=policy)
