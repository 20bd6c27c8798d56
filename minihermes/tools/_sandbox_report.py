"""What isolation this machine offers: probed once per process by running every layer for real."""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from minihermes.tools._sandbox_types import (
    READONLY_WORKSPACE_DIRS,
    Layer,
    SandboxError,
    SandboxLimits,
    SandboxPolicy,
    config_fd,
    default_python,
    limits_config,
    ro_paths,
)

_PROBE = Path(__file__).with_name("_sandbox_probe.py")
_STATUS_LIMIT = 1 << 16


@functools.cache
def _probe() -> dict[str, Any]:
    policy, limits = SandboxPolicy(), SandboxLimits()
    read_fd, write_fd = os.pipe()
    cfg = {
        "status_fd": write_fd,
        "parent_pid": os.getpid(),
        "layers": [],
        "ro_paths": ro_paths(policy),
        "uid": policy.uid,
        "gid": policy.gid,
        "limits": limits_config(limits),
        "tmp_bytes": limits.tmp_bytes,
        "backstop_seconds": 30.0,
    }
    cfg_fd = config_fd(cfg)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_PROBE), str(cfg_fd)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd, cfg_fd),
            start_new_session=True,
            cwd="/",
            env={},
        )
    finally:
        os.close(write_fd)
        os.close(cfg_fd)
    with os.fdopen(read_fd, "rb") as status:
        raw = status.read(_STATUS_LIMIT)
    _, stderr = proc.communicate(timeout=60)
    probe: dict[str, Any] | None = None
    for line in raw.splitlines():
        event = json.loads(line)
        if event.get("event") == "probe":
            probe = event
    if probe is None:
        raise SandboxError("launcher_failed", f"isolation probe failed: {stderr.decode(errors='replace')}")
    layers: dict[str, dict[str, Any]] = probe["layers"]
    available = {Layer(name) for name, info in layers.items() if info["available"]}
    net_isolated = Layer.NET_NAMESPACE in available or Layer.SECCOMP in available
    fs_confined = bool(available & {Layer.MOUNT_NAMESPACE, Layer.LANDLOCK})
    contained = Layer.PID_NAMESPACE in available
    wanted = set(Layer) - {Layer.USER_NAMESPACE}
    if os.geteuid() != 0:
        wanted = wanted - {Layer.USER_DROP} | {Layer.USER_NAMESPACE}
    missing = sorted(wanted - available)
    if not missing:
        level = "full"
    elif net_isolated and fs_confined:
        level = "partial"
    else:
        level = "minimal"
    notes = [
        "memory_bytes is per process (RLIMIT_AS); a program may use up to max_processes times that",
        "private /tmp and /dev/shm are tmpfs of tmp_bytes each, outside RLIMIT_AS",
    ]
    folders = ", ".join(f"{name}/" for name in READONLY_WORKSPACE_DIRS)
    if Layer.MOUNT_NAMESPACE in available:
        readonly = "read_only_bind_mount"
        notes.append(f"the workspace's {folders} is a read-only bind mount for the program")
    else:
        readonly = "file_modes"
        notes.append(
            f"no mount namespace: the workspace's {folders} is kept read-only by file modes only "
            "(a program can chmod and change its copy; skill_view puts changed files back)"
        )
    if os.geteuid() == 0:
        notes.append("RLIMIT_NPROC counts all processes of the sandbox uid: concurrent runs share it")
    else:
        notes.append("the sandbox runs as the server's uid: only namespaces/landlock keep it from its files")
    return {
        "level": level,
        "notes": notes,
        "missing": missing,
        "running_as_root": os.geteuid() == 0,
        "network_isolated": net_isolated,
        "filesystem_confined": fs_confined,
        "processes_contained": contained,
        "workspace_readonly": {"folders": list(READONLY_WORKSPACE_DIRS), "enforced_by": readonly},
        "landlock_abi": probe.get("landlock_abi", 0),
        "kernel": os.uname().release,
        "arch": os.uname().machine,
        "python": policy.python or default_python(),
        "layers": layers,
    }


def isolation_report() -> dict[str, Any]:
    """Which isolation layers work on this machine, probed for real once per process (each layer tried in a
    throwaway child) and cached. ``level`` is full / partial (network and filesystem confined) / minimal.

    Blocking (~0.2 s the first time); async code should call it through ``asyncio.to_thread``.
    """
    return copy.deepcopy(_probe())


def available_layers() -> frozenset[Layer]:
    """The layers a default run applies on this machine."""
    report = _probe()
    layers = {Layer(name) for name, info in report["layers"].items() if info["available"]}
    layers.discard(Layer.USER_NAMESPACE)  # implied by the namespace layers when not root, never a step
    if not report["running_as_root"]:
        layers.discard(Layer.USER_DROP)
    return frozenset(layers)
