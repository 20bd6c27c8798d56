"""`minihermes serve` in a child process for tests that need a live server (the dashboard, API fuzzing)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_process(
    data: Path,
    options: list[str],
    *,
    env: dict[str, str] | None = None,
    log_level: str = "warning",
    ready_timeout: float = 60.0,
) -> Iterator[str]:
    """Start ``minihermes serve`` on a free loopback port with its data in ``data``, wait until ``/readyz``
    answers 200, yield its URL, stop it. The process gets no MINIHERMES_* variables of the test run, plus
    ``env``, except the event loop the suite runs on (``MINIHERMES_EVENT_LOOP``). Its stderr goes to
    ``server.log`` beside ``data``; a traceback logged there fails the test (a bug the responses may have
    hidden)."""
    port = free_port()
    log_file = data.parent / "server.log"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("MINIHERMES_")}
    child_env["MINIHERMES_EVENT_LOOP"] = os.environ.get("MINIHERMES_EVENT_LOOP", "auto")
    child_env |= env or {}
    command = [sys.executable, "-m", "minihermes.cli.main", "serve", "--port", str(port)]
    with log_file.open("wb") as log:
        proc = subprocess.Popen(
            [*command, "--data-dir", str(data), "--log-level", log_level, *options],
            cwd=ROOT,
            env=child_env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            assert proc.poll() is None, log_file.read_text()[-4000:]
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    errors = log_file.read_text()
    assert "Traceback" not in errors, errors[-6000:]
