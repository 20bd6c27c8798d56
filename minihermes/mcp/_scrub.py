"""MCP server output scrubbed before it reaches a log, an error reply or the audit trail.

A server may print its own token (on stderr, as stdout noise, in an error message): everything a server says
goes through a ``Scrubber`` first, which replaces the server's configured secret values (its ``env`` and
``headers`` values, and the last word of each, the token of ``Bearer <token>``) with ``***`` and then
redacts recognisable secrets (``minihermes.context.redact``).

- stdio servers' stderr is read through a pipe by ``StderrPump`` (the SDK passes the ``errlog`` stream to the
  child as its stderr, so a plain file would get the bytes unfiltered) and written to the server's log file
  line by line, scrubbed.
- The SDK logs what it cannot parse (stdout noise, malformed JSON-RPC) with the offending text in the message
  or the exception: ``install_log_filter`` puts ``SDKLogScrubber`` on the SDK's loggers. It scrubs with the
  secrets of every live connection (a record does not say which server it is about), and renders pydantic
  validation errors without their input (which shows a secret cut in the middle, beyond any replacement).
- Error messages built from a server's words (``MCPToolError``, ``MCPUnavailable``, ``last_error``) are
  scrubbed where they are made (``_connection``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from pathlib import Path
from typing import Any, TextIO

from minihermes.context.redact import redact_text

REPLACEMENT = "***"
MIN_SECRET_CHARS = 6
"""Shorter configured values (``DEBUG=1``, ``LOG=info``) are settings, not secrets: replacing them everywhere
would make the log unreadable."""
MAX_LINE_BYTES = 16 * 1024
"""A stderr line longer than this is cut (at its last space when there is one) and scrubbed in pieces."""
_DRAIN_SECONDS = 2.0
"""After the server is stopped: how long its stderr may stay open (a surviving child of it) before we stop
reading."""
_WORD = re.compile(r"\S+")
log = logging.getLogger("minihermes.mcp")


def secret_values(record: dict[str, Any]) -> tuple[str, ...]:
    """The strings to hide of a server record (with its secret values open), longest first."""
    found: set[str] = set()
    for field in ("env", "headers"):
        for value in (record.get(field) or {}).values():
            if not isinstance(value, str):
                continue
            found.add(value)
            found.update(_WORD.findall(value))  # "Bearer tok": "tok" on its own too
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True))


def scrub_text(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REPLACEMENT)
    return redact_text(text)


class Scrubber:
    """``scrub(text)``: one server's secrets replaced, recognisable secrets redacted."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self.secrets = secrets

    def __call__(self, text: str) -> str:
        return scrub_text(text, self.secrets)


def exception_text(e: BaseException) -> str:
    """``Type: message`` of an error, without the input of a pydantic validation error (the SDK's parse
    errors quote the offending stdout line, shortened in the middle)."""
    from pydantic import ValidationError

    if isinstance(e, ValidationError):
        problems = e.errors(include_url=False, include_input=False, include_context=False)
        parts = [f"{'.'.join(map(str, p['loc'])) or '(input)'}: {p['msg']}" for p in problems[:5]]
        return f"ValidationError: {e.error_count()} validation error(s) for {e.title}: {'; '.join(parts)}"
    return f"{type(e).__name__}: {str(e) or type(e).__name__}"


# -- the SDK's log records ------------------------------------------------------------------------------


class ScrubbedError(Exception):
    """Stands in for an exception attached to an SDK log record: its text scrubbed, its traceback kept."""


_LIVE: dict[int, tuple[str, ...]] = {}
"""Connection id -> its secrets, while the connection exists (its process, its pipes, its log lines)."""


def register(owner: object, secrets: tuple[str, ...]) -> None:
    if secrets:
        _LIVE[id(owner)] = secrets


def unregister(owner: object) -> None:
    _LIVE.pop(id(owner), None)


def _all_secrets() -> tuple[str, ...]:
    every = {s for secrets in _LIVE.values() for s in secrets}
    return tuple(sorted(every, key=len, reverse=True))


def _clean_exception(e: BaseException, secrets: tuple[str, ...], depth: int = 0) -> BaseException:
    clean = ScrubbedError(scrub_text(exception_text(e), secrets))
    clean.__traceback__ = e.__traceback__
    clean.__suppress_context__ = e.__suppress_context__
    if depth < 5:
        if e.__cause__ is not None:
            clean.__cause__ = _clean_exception(e.__cause__, secrets, depth + 1)
        if e.__context__ is not None and not e.__suppress_context__:
            clean.__context__ = _clean_exception(e.__context__, secrets, depth + 1)
    return clean


class SDKLogScrubber(logging.Filter):
    """Scrubs a record of the MCP SDK in place (message and exception) before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _all_secrets()
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: keep only the format
            message = str(record.msg)
        clean = scrub_text(message, secrets)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            exc = _clean_exception(record.exc_info[1], secrets)
            record.exc_info = (ScrubbedError, exc, exc.__traceback__)
            record.exc_text = None
        elif record.exc_text:
            record.exc_text = scrub_text(record.exc_text, secrets)
        return True


_FILTER = SDKLogScrubber()
_SDK_LOGGERS = ("mcp", "mcp_types", "client")  # the SDK's session module logs as "client"


def install_log_filter() -> None:
    """Put the scrubber on every logger of the MCP SDK (call after importing it; idempotent)."""
    manager = logging.Logger.manager
    for name in list(manager.loggerDict):
        if name in _SDK_LOGGERS or name.split(".")[0] in _SDK_LOGGERS[:2]:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)


# -- stdio servers' stderr ------------------------------------------------------------------------------


class StderrPump:
    """A pipe whose write end (``errlog``) becomes a stdio server's stderr; a task reads the other end and
    appends each line, scrubbed, to ``log_file``. ``close`` waits (bounded) for the rest of the output."""

    def __init__(self, log_file: Path, scrub: Scrubber) -> None:
        self.log_file = log_file
        self.scrub = scrub
        read_fd, write_fd = os.pipe()
        os.set_inheritable(read_fd, False)
        self.errlog: TextIO = os.fdopen(write_fd, "w", encoding="utf-8")
        self._task = asyncio.ensure_future(self._pump(read_fd))

    def started(self) -> None:
        """The server process has its copy of the write end: drop ours, so EOF comes when it exits."""
        with contextlib.suppress(OSError):
            self.errlog.close()

    async def close(self) -> None:
        self.started()
        done, _ = await asyncio.wait({self._task}, timeout=_DRAIN_SECONDS)
        if not done:
            self._task.cancel()
            await asyncio.wait({self._task})
        if not self._task.cancelled() and self._task.exception() is not None:
            log.warning("reading an MCP server's stderr failed: %r", self._task.exception())

    async def _pump(self, read_fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        try:
            transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        except BaseException:
            pipe.close()
            raise
        out = self._open_log()
        try:
            pending = b""
            while chunk := await reader.read(65536):
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()
                while len(pending) > MAX_LINE_BYTES:
                    cut = pending.rfind(b" ", 0, MAX_LINE_BYTES) + 1 or MAX_LINE_BYTES
                    lines.append(pending[:cut])
                    pending = pending[cut:]
                self._write(out, lines)
            if pending:
                self._write(out, [pending])
        finally:
            transport.close()
            if out is not None:
                out.close()

    def _open_log(self) -> TextIO | None:
        """The log file, or None (the output is still read, so the server never blocks on a full pipe)."""
        try:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            return open(self.log_file, "a", encoding="utf-8")
        except OSError as e:
            log.warning("MCP server log %s cannot be written: %s", self.log_file, e.strerror)
            return None

    def _write(self, out: TextIO | None, lines: list[bytes]) -> None:
        if not lines or out is None:
            return
        try:
            out.write("".join(self.scrub(raw.decode("utf-8", "replace")) + "\n" for raw in lines))
            out.flush()
        except OSError as e:  # a full disk: the lines are dropped, the server goes on
            log.warning("MCP server log %s: %s", self.log_file, e.strerror)
