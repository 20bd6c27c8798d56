"""Running the launcher: capped output, wall clock, kills, and turning its status reports into a result."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from minihermes.tools._sandbox_types import Layer, SandboxError, SandboxLimits, SandboxResult, config_fd

_LAUNCHER = Path(__file__).with_name("_sandbox_launcher.py")
_STATUS_LIMIT = 1 << 16
_DRAIN_SECONDS = 2.0  # after the program exits: how long stragglers may keep its pipes open
_KILL_GRACE_SECONDS = 5.0  # for the launcher to tear the program down before the group gets SIGKILL
_FLOOD_FACTOR = 4


class _Capture:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> bool:
        """Keep what fits; True once the stream has gone far past the cap (a flood)."""
        self.total += len(chunk)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        return self.total > max(self.limit * _FLOOD_FACTOR, 65536)

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


class _LauncherProtocol(asyncio.SubprocessProtocol):
    """Collects capped output. Unlike ``asyncio.subprocess.Process``, whose ``wait()`` also waits for the
    pipes to close, process exit is observed on its own: a program's escaped children may hold the pipes."""

    def __init__(self, limits: SandboxLimits, on_flood: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self.out = _Capture(limits.output_bytes)
        self.err = _Capture(limits.output_bytes)
        self.on_flood = on_flood
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes_closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        # Keep reading past the cap (discarding), so the program never blocks on a full pipe and EOF is seen.
        if (self.out if fd == 1 else self.err).add(data):
            self.on_flood()

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.pipes_closed.done():
            self.pipes_closed.set_result(None)


async def _read_status(fd: int) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_STATUS_LIMIT)
    pipe = os.fdopen(fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        raw = bytearray()
        while chunk := await reader.read(4096):
            if len(raw) < _STATUS_LIMIT:
                raw += chunk
    finally:
        transport.close()
    events = []
    for line in bytes(raw).splitlines():
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _within(seconds: float, future: asyncio.Future[Any]) -> bool:
    """Wait for ``future`` up to ``seconds`` without cancelling it; True if it finished."""
    try:
        async with asyncio.timeout(seconds):
            await asyncio.shield(future)
    except TimeoutError:
        return False
    return True


def _feed(transport: asyncio.SubprocessTransport, data: bytes) -> None:
    """Hand ``data`` to the program's stdin and close it once written. The loop buffers it: a program that never
    reads just exits on us. The pipe is used by what it does (``write``, ``close``), not by its class: uvloop's
    pipe transports (the loop ``serve`` runs) are not subclasses of ``asyncio.WriteTransport``."""
    pipe = transport.get_pipe_transport(0)
    if pipe is None:  # stdin was asked for as a pipe, so the loop broke its own contract
        raise SandboxError("launcher_failed", "the sandbox launcher has no stdin pipe")
    writer = cast(asyncio.WriteTransport, pipe)
    writer.write(data)
    writer.close()  # after the buffer is flushed, on either loop


async def execute(
    cfg: dict[str, Any], stdin: bytes | None, limits: SandboxLimits, applied: frozenset[Layer]
) -> SandboxResult:
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    kills: list[str] = []
    transport: asyncio.SubprocessTransport | None = None

    def kill(reason: str) -> None:
        # SIGTERM asks the launcher to tear the program down; with a pid namespace it exits only once
        # nothing of the program is left. SIGKILL to the whole group is the fallback, after a grace period.
        if kills:
            return
        kills.append(reason)
        if transport is not None and transport.get_returncode() is None:
            with contextlib.suppress(ProcessLookupError):
                transport.send_signal(signal.SIGTERM)

    read_fd, write_fd = os.pipe()
    try:
        cfg_fd = config_fd({**cfg, "status_fd": write_fd, "parent_pid": os.getpid()})
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _LauncherProtocol(limits, lambda: kill("output_limit")),
                sys.executable,
                "-I",
                "-S",
                str(_LAUNCHER),
                str(cfg_fd),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd, cfg_fd),
                start_new_session=True,  # its own process group: one killpg reaches every descendant
                cwd="/",
                env={},
            )
        finally:
            os.close(cfg_fd)
    except OSError as e:
        os.close(read_fd)
        raise SandboxError("launcher_failed", f"cannot start the sandbox launcher: {e}") from e
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    pgid = transport.get_pid()
    status = asyncio.ensure_future(_read_status(read_fd))
    try:
        if stdin is not None:
            _feed(transport, stdin)
        if not await _within(limits.wall_seconds, protocol.exited):
            kill("wall_timeout")  # no-op if an output flood got it killed already
            if not await _within(_KILL_GRACE_SECONDS, protocol.exited):
                _kill_group(pgid)
                await protocol.exited
        # Anything still in the group (only possible without a pid namespace) goes with the program.
        _kill_group(pgid)
        await _within(_DRAIN_SECONDS, protocol.pipes_closed)
        await _within(_DRAIN_SECONDS, status)
    except BaseException:
        _kill_group(pgid)
        status.cancel()
        raise
    finally:
        transport.close()
    events = status.result() if status.done() and not status.cancelled() else []
    if not status.done():
        status.cancel()
    return _result(
        events,
        transport.get_returncode(),
        kills,
        protocol.out,
        protocol.err,
        limits,
        applied,
        time.monotonic() - started,
    )


def _result(
    events: list[dict[str, Any]],
    launcher_code: int | None,
    kills: list[str],
    out: _Capture,
    err: _Capture,
    limits: SandboxLimits,
    applied: frozenset[Layer],
    duration: float,
) -> SandboxResult:
    by_kind = {event.get("event"): event for event in events}
    if "setup_error" in by_kind:
        raise SandboxError("setup_failed", str(by_kind["setup_error"].get("message")))
    if "timeout" in by_kind and not kills:
        kills.append("wall_timeout")
    exit_event = by_kind.get("exit")
    cpu: float | None = None
    if exit_event is not None:
        code = int(exit_event["returncode"])
        cpu = float(exit_event["cpu_seconds"])
    elif kills:
        code = -signal.SIGKILL
    else:
        # Nobody reported the program's end and we did not kill it: the launcher itself broke.
        tail = bytes(err.data[-2000:]).decode("utf-8", "replace")
        raise SandboxError(
            "launcher_failed", f"launcher exited with {launcher_code} without a status: {tail}"
        )
    reason: str | None = kills[0] if kills else None
    if reason is None and code < 0:
        cpu_exhausted = cpu is not None and cpu >= limits.cpu_seconds
        if code == -signal.SIGXCPU or (code == -signal.SIGKILL and cpu_exhausted):
            reason = "cpu_limit"
        elif code == -signal.SIGXFSZ:
            reason = "file_size_limit"
        else:
            try:
                reason = f"signal:{signal.Signals(-code).name}"
            except ValueError:
                reason = f"signal:{-code}"
    return SandboxResult(
        exit_code=code,
        stdout=bytes(out.data),
        stderr=bytes(err.data),
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        timed_out=reason in ("wall_timeout", "cpu_limit"),
        killed_reason=reason,
        duration=duration,
        cpu_seconds=cpu,
        isolation=applied,
    )
