"""Fixtures for the tools tests: throwaway workspaces and "data dirs" under /tmp, layer helpers."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from minihermes.tools.sandbox import Layer, SandboxPolicy, available_layers, default_python


@pytest.fixture
def workspace() -> Iterator[Path]:
    # Directly under /tmp (not pytest's 0700 tmp_path) so that a sandbox without a mount namespace, running
    # as an unprivileged uid, can still reach it.
    path = Path(tempfile.mkdtemp(prefix="mh-ws-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """Stands in for the server's data dir: 0700, owned by the server's uid, with a secret in it."""
    path = Path(tempfile.mkdtemp(prefix="mh-data-", dir="/tmp"))
    secret = path / "credentials.json"
    secret.write_text('{"api_key": "sk-test-SECRET-0123456789"}')
    secret.chmod(0o600)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A world-writable host directory outside the workspace: file permissions alone do not protect it."""
    path = Path(tempfile.mkdtemp(prefix="mh-public-", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def policy_with() -> Callable[..., SandboxPolicy]:
    """``policy_with(Layer.X, ...)``: a policy with exactly those layers, skipping when one is missing."""
    return only


def require(*layers: Layer) -> None:
    """Skip (with the reason) when this machine cannot provide a layer the test is about."""
    missing = [layer for layer in layers if layer not in available_layers()]
    if missing:
        pytest.skip(f"isolation layer not available on this machine: {', '.join(missing)}")


def only(*layers: Layer) -> SandboxPolicy:
    """A policy with exactly these layers (plus rlimits), with an interpreter those layers can reach."""
    require(*layers)
    chosen = frozenset(layers)
    return SandboxPolicy(layers=chosen, python=python_for(chosen))


def python_for(layers: frozenset[Layer]) -> str:
    python = default_python()
    if Layer.USER_DROP not in layers or Layer.MOUNT_NAMESPACE in layers:
        return python
    # As an unprivileged uid on the host tree, the interpreter must be reachable by "others".
    for candidate in (python, "/usr/bin/python3"):
        if os.path.exists(candidate) and _world_reachable(candidate):
            return candidate
    pytest.skip("no interpreter reachable by the sandbox uid without a mount namespace")


def _world_reachable(path: str) -> bool:
    real = Path(os.path.realpath(path))
    for parent in real.parents:
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
    return bool(os.stat(real).st_mode & stat.S_IXOTH)
