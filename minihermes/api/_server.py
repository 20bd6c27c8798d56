"""Serving the API with uvicorn inside the caller's event loop, next to the node."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import socket
from collections.abc import Callable, Generator
from typing import Any

import uvicorn
from fastapi import FastAPI

from minihermes.runtime import Node

from ._app import create_app
from ._auth import AuthConfig
from ._core import ApiState

log = logging.getLogger("minihermes.api")


class InsecureBindError(ValueError):
    """Serving without authentication on an address other hosts can reach."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth: AuthConfig | None) -> None:
    """Raise InsecureBindError when ``host`` is not loopback and no auth is configured."""
    if auth is None and not is_loopback(host):
        raise InsecureBindError(
            f"refusing to serve on {host!r} without authentication: every request would act as the local "
            "owner (admin). Bind 127.0.0.1, or configure auth (a JWT secret or public key, or API keys)."
        )


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the embedding program owns SIGINT/SIGTERM."""

    def __init__(self, config: uvicorn.Config, handle_signals: bool) -> None:
        super().__init__(config)
        self._handle_signals = handle_signals
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if self._handle_signals:
            with super().capture_signals():
                yield
        else:
            yield


async def serve_http(
    node: Node,
    host: str = "127.0.0.1",
    port: int = 8091,
    auth: AuthConfig | None = None,
    *,
    app: FastAPI | None = None,
    stop: asyncio.Event | None = None,
    on_started: Callable[[str, int], Any] | None = None,
    log_level: str = "info",
    access_log: bool = True,
    graceful_timeout: float = 10.0,
    handle_signals: bool = False,
    sock: socket.socket | None = None,
    **app_options: Any,
) -> None:
    """Serve the API for ``node`` on ``host:port`` until ``stop`` is set, the node's root supervisor fails,
    or this coroutine is cancelled; then shut down gracefully (in-flight requests get ``graceful_timeout``
    seconds) and return. The node itself is neither started nor stopped here.

    ``port=0`` picks a free port; ``on_started(host, port)`` is called once the socket accepts connections.
    ``sock``: a socket from :func:`bind_http` to serve on instead of binding here (``serve`` binds before the
    node starts, so a busy port fails at once); it is closed on return either way.
    Without ``auth`` only loopback addresses are allowed (:class:`InsecureBindError` otherwise). Extra
    keyword arguments go to :func:`create_app`. uvicorn's own signal handling is off unless
    ``handle_signals``: the caller (``minihermes serve``) sets ``stop`` from its handlers.
    """
    try:
        check_bind(host, auth)
    except InsecureBindError:
        if sock is not None:
            sock.close()
        raise
    if app is None:
        app = create_app(node, auth, **app_options)
    elif app_options:
        raise TypeError("give either app= or create_app options, not both")
    state: ApiState = app.state.minihermes
    if sock is None:
        sock = bind_http(host, port)
    bound_port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        log_config=None,  # keep the program's logging (and its secret redaction)
        log_level=log_level,
        access_log=access_log,
        lifespan="off",
        timeout_graceful_shutdown=max(1, math.ceil(graceful_timeout)),
        server_header=False,
        proxy_headers=False,
    )
    server = _Server(config, handle_signals)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    waits = [asyncio.ensure_future(node.failed.wait())]
    if stop is not None:
        waits.append(asyncio.ensure_future(stop.wait()))

    async def watch() -> None:
        ready = asyncio.ensure_future(server.ready.wait())
        await asyncio.wait([ready, serving], return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if server.started:
            log.info(
                "HTTP API on http://%s:%d (%s)", _display(host), bound_port, "auth" if auth else "no auth"
            )
            if on_started is not None:
                on_started(host, bound_port)
        await asyncio.wait([*waits, serving], return_when=asyncio.FIRST_COMPLETED)
        state.draining = True
        server.should_exit = True

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.shield(serving)
    finally:
        state.draining = True
        server.should_exit = True
        watcher.cancel()
        for w in waits:
            w.cancel()
        if not serving.done():
            with contextlib.suppress(Exception):
                await serving  # graceful shutdown of in-flight requests
        sock.close()


def bind_http(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` for :func:`serve_http`: a bad address or a busy port is a plain
    ``OSError`` here, before anything else starts; port 0 gets a free port (``sock.getsockname()[1]``)."""
    name = host.strip("[]")
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(name).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET
    sock = socket.create_server((name, port), family=family, backlog=2048)
    sock.setblocking(False)
    return sock


def _display(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a server bound to ``host:port`` (a wildcard address is
    reached on loopback)."""
    name = host.strip("[]")
    if name in ("", "0.0.0.0"):
        name = "127.0.0.1"
    elif name == "::":
        name = "::1"
    return f"http://{_display(name)}:{port}"
