"""serve_http: uvicorn in the node's event loop, on a real socket; loopback-only without auth; graceful stop."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from minihermes.api import AuthConfig, InsecureBindError, check_bind, is_loopback, serve_http

from .conftest import PERMISSIONS, SECRET, bearer, token


async def start(node, **kw):
    """serve_http in a task; returns (task, base_url, stop)."""
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    kw.setdefault("permissions", PERMISSIONS)
    task = asyncio.create_task(
        serve_http(
            node,
            kw.pop("host", "127.0.0.1"),
            0,
            kw.pop("auth", None),
            stop=stop,
            on_started=lambda h, p: started.set_result(p),
            log_level="warning",
            **kw,
        )
    )
    port = await asyncio.wait_for(started, 10)
    return task, f"http://127.0.0.1:{port}", stop


async def test_real_requests_over_a_socket(node):
    task, base, stop = await start(node)
    async with httpx.AsyncClient(base_url=base) as c:
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        r = await c.post("/api/v1/actors/echo/echo", content='{"text":"over tcp"}')
        assert r.status_code == 200 and r.json()["text"] == "over tcp"
        r = await c.post("/api/v1/actors/echo/echo", content=b"\xff garbage")
        assert r.status_code == 422
        assert "server" not in r.headers
    stop.set()
    await asyncio.wait_for(task, 10)
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(base_url=base) as c:
            await c.get("/healthz")


async def test_with_auth_over_a_socket(node):
    task, base, stop = await start(node, auth=AuthConfig(jwt_secret=SECRET))
    async with httpx.AsyncClient(base_url=base) as c:
        assert (await c.post("/api/v1/actors/echo/whoami", json={})).status_code == 401
        r = await c.post("/api/v1/actors/echo/whoami", json={}, headers=bearer(token("acme", "alice")))
        assert r.json()["tenant"] == "acme"
    stop.set()
    await task


async def test_in_flight_requests_finish_on_graceful_stop(node):
    task, base, stop = await start(node)
    async with httpx.AsyncClient(base_url=base) as c:
        slow = asyncio.create_task(c.post("/api/v1/actors/echo/hang", json={"seconds": 0.3}))
        await asyncio.sleep(0.1)
        stop.set()
        r = await slow
        assert r.status_code == 200
    await asyncio.wait_for(task, 10)


async def test_stops_when_the_node_fails_or_the_task_is_cancelled(node):
    task, _, _ = await start(node)
    node.failed.set()
    await asyncio.wait_for(task, 10)
    node.failed.clear()
    task, base, _ = await start(node)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(base_url=base) as c:
            await c.get("/healthz")


async def test_refuses_a_public_address_without_auth(node):
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com", ""):
        with pytest.raises(InsecureBindError, match="without authentication"):
            await serve_http(node, host, 0, None)
    check_bind("0.0.0.0", AuthConfig(jwt_secret=SECRET))  # fine with auth


def test_loopback_names():
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "localhost.evil.com", "my-host"):
        assert not is_loopback(host), host


async def test_busy_port_is_a_plain_os_error(node):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(OSError):
            await serve_http(node, "127.0.0.1", s.getsockname()[1], None)


async def test_ipv6_loopback(node):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_http(
            node,
            "::1",
            0,
            None,
            stop=stop,
            on_started=lambda h, p: started.set_result(p),
            log_level="warning",
        )
    )
    port = await asyncio.wait_for(started, 10)
    async with httpx.AsyncClient(base_url=f"http://[::1]:{port}") as c:
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.post("/api/v1/actors/health_monitor/get_health")).status_code == 200
    stop.set()
    await task
