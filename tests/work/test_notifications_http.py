"""The notification doors over HTTP (issue 24): ``GET /api/v1/notifications``, ``POST
/api/v1/notifications/read`` and the live stream, on the whole agent app with a manual clock (the cron
reminder fires when the test moves the clock) served on a real loopback socket (an ASGI test transport
buffers a stream). The node is restarted on the same SQLite data dir between the run and the read."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest

from minihermes.api import AuthConfig, serve_http
from minihermes.runtime import Node

from .conftest import until

SECRET = "notifications-http-secret-long-enough-for-hs256"


def headers(clock: Any, sub: str, roles: list[str], tenant: str = "acme") -> dict[str, str]:
    claims = {"tenant": tenant, "sub": sub, "roles": roles, "exp": int(clock.time()) + 86400}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


@contextlib.asynccontextmanager
async def served(node: Node) -> AsyncIterator[str]:
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_http(
            node,
            "127.0.0.1",
            0,
            AuthConfig(jwt_secret=SECRET),
            stop=stop,
            on_started=lambda h, p: started.set_result(p),
            log_level="warning",
        )
    )
    try:
        yield f"http://127.0.0.1:{await asyncio.wait_for(started, 10)}"
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


class Stream:
    """A reader of ``GET /api/v1/notifications/stream``: open once the server said it is subscribed."""

    def __init__(self, client: httpx.AsyncClient, auth: dict[str, str]) -> None:
        self.client, self.auth = client, auth
        self._cm: Any = None
        self._lines: Any = None

    async def __aenter__(self) -> Stream:
        self._cm = self.client.stream("GET", "/api/v1/notifications/stream", headers=self.auth)
        response = await self._cm.__aenter__()
        assert response.status_code == 200 and response.headers["content-type"].startswith(
            "text/event-stream"
        )
        self._lines = response.aiter_lines()
        assert await anext(self._lines) == ": connected"
        return self

    async def next_event(self, timeout: float = 20) -> tuple[str, dict[str, Any]]:
        async def read() -> tuple[str, dict[str, Any]]:
            name = ""
            async for line in self._lines:
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: ") and name:
                    return name, json.loads(line[6:])
            raise AssertionError("the stream ended")

        return await asyncio.wait_for(read(), timeout)

    async def __aexit__(self, *exc: Any) -> None:
        await self._cm.__aexit__(*exc)


async def test_a_reminder_reaches_its_owner_over_http_live_and_after_a_restart(app_node, clock):
    alice = headers(clock, "alice", ["user"])
    bob = headers(clock, "bob", ["user"])
    ada = headers(clock, "ada", ["admin"])
    node = await app_node(scripted=True)
    async with served(node) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        job = {"job_id": "plants", "prompt": "Water the plants", "schedule": "every 30s", "action": "notify"}
        r = await c.post("/api/v1/actors/cron_scheduler/create_job", json=job, headers=alice)
        assert r.status_code == 200, r.text
        async with Stream(c, alice) as alice_live, Stream(c, bob) as bob_live:
            await clock.advance(31)  # the reminder fires
            name, event = await alice_live.next_event()
            assert name == "notification" and event["text"] == "Water the plants" and not event["read"]
            assert event["source"] == "cron:plants"
            # bob's stream never carried alice's: the first event he gets is his own
            note = {"user_id": "bob", "text": "for bob"}
            r = await c.post("/api/v1/actors/notifications/notify", json=note, headers=ada)
            assert r.status_code == 200, r.text
            assert (await bob_live.next_event())[1]["text"] == "for bob"
        r = await c.post("/api/v1/actors/cron_scheduler/pause_job", json={"job_id": "plants"}, headers=alice)
        assert r.status_code == 200
        # users cannot deliver into an inbox, their own or another's
        r = await c.post("/api/v1/actors/notifications/notify", json=note, headers=alice)
        assert r.status_code == 403

    await node.stop()
    node = await app_node(scripted=True)  # a real restart on the same SQLite data dir
    async with served(node) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        r = await c.get("/api/v1/notifications", headers=alice)
        assert r.status_code == 200, r.text
        got = r.json()
        assert [n["text"] for n in got["notifications"]] == ["Water the plants"] and got["unread"] == 1
        [mine] = got["notifications"]
        assert set(mine) == {"id", "text", "source", "created_at", "read"}
        theirs = (await c.get("/api/v1/notifications", headers=bob)).json()
        assert [n["text"] for n in theirs["notifications"]] == ["for bob"]
        assert (await c.get("/api/v1/notifications", headers=ada)).json()["notifications"] == []
        # bob cannot mark alice's read; alice can
        r = await c.post("/api/v1/notifications/read", json={"ids": [mine["id"]]}, headers=bob)
        assert r.status_code == 200 and r.json()["marked"] == 0
        r = await c.post("/api/v1/notifications/read", json={"ids": [mine["id"]]}, headers=alice)
        assert r.status_code == 200 and r.json()["marked"] == 1
        r = await c.get("/api/v1/notifications", params={"unread_only": "true"}, headers=alice)
        assert r.json()["notifications"] == [] and r.json()["unread"] == 0
        r = await c.get("/api/v1/notifications", params={"limit": "1"}, headers=alice)
        assert r.json()["notifications"][0]["read"] is True

        # bad input is a structured 422; a viewer reads (an empty inbox) but cannot mark
        for params in ({"limit": "0"}, {"limit": "x"}, {"unread_only": "maybe"}):
            r = await c.get("/api/v1/notifications", params=params, headers=alice)
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_argument", params
        for body in ({"ids": "x"}, {"ids": [1]}, {}, {"ids": [], "user_id": "alice"}):
            r = await c.post("/api/v1/notifications/read", json=body, headers=alice)
            assert r.status_code == 422, body
        vic = headers(clock, "vic", ["viewer"])
        assert (await c.get("/api/v1/notifications", headers=vic)).status_code == 200
        assert (await c.post("/api/v1/notifications/read", json={"ids": []}, headers=vic)).status_code == 403
        assert (await c.get("/api/v1/notifications")).status_code == 401


async def test_a_run_jobs_answer_reaches_its_owner_over_http_and_nobody_else(app_node, clock):
    alice = headers(clock, "alice", ["user"])
    bob = headers(clock, "bob", ["user"])
    node = await app_node(scripted=True)
    async with served(node) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        job = {"job_id": "digest", "prompt": "Summarize my tasks", "schedule": "every_1h"}
        assert (await c.post("/api/v1/actors/cron_scheduler/create_job", json=job, headers=alice)).is_success
        await clock.advance(3601)

        async def answered() -> Any:
            got = (await c.get("/api/v1/notifications", headers=alice)).json()["notifications"]
            return got or None

        [note] = await until(answered)
        assert note["text"] == "done: Summarize my tasks" and note["source"] == "cron:digest"
        assert (await c.get("/api/v1/notifications", headers=bob)).json()["notifications"] == []
        other = headers(clock, "alice", ["user"], tenant="globex")
        assert (await c.get("/api/v1/notifications", headers=other)).json()["notifications"] == []


async def test_an_open_stream_does_not_hold_the_servers_shutdown(app_node, clock):
    """The stream has no end of its own: it ends when the server drains, well within the graceful timeout
    (10 s), so an open dashboard never holds `minihermes serve` from stopping."""
    node = await app_node(scripted=True)
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(timeout=30) as c:
        async with served(node) as base:
            c.base_url = httpx.URL(base)
            live = await Stream(c, headers(clock, "alice", ["user"])).__aenter__()
            stopping = loop.time()
        assert loop.time() - stopping < 5
        with pytest.raises(AssertionError, match="the stream ended"):
            await live.next_event(timeout=5)
        await live.__aexit__(None, None, None)


async def test_a_browser_opens_its_stream_with_a_single_use_ticket(app_node, clock):
    """An EventSource cannot send a credential header: it presents a ticket got with the credential, once."""
    alice = headers(clock, "alice", ["user"])
    ada = headers(clock, "ada", ["admin"])
    node = await app_node(scripted=True)
    async with served(node) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
        assert (await c.post("/api/v1/notifications/stream/ticket")).status_code == 401
        r = await c.post("/api/v1/notifications/stream/ticket", headers=alice)
        assert r.status_code == 200 and r.json()["expires_in"] == 60
        ticket = r.json()["ticket"]
        async with c.stream("GET", "/api/v1/notifications/stream", params={"ticket": ticket}) as live:
            assert live.status_code == 200
            lines = live.aiter_lines()
            assert await anext(lines) == ": connected"
            note = {"user_id": "alice", "text": "by ticket"}
            assert (await c.post("/api/v1/actors/notifications/notify", json=note, headers=ada)).is_success

            async def event() -> dict[str, Any]:
                async for line in lines:
                    if line.startswith("data: "):
                        got: dict[str, Any] = json.loads(line[6:])
                        return got
                raise AssertionError("the stream ended")

            assert (await asyncio.wait_for(event(), 20))["text"] == "by ticket"  # alice's own topic
        for bad in (ticket, "", "not-a-ticket"):  # used once already, empty, made up
            r = await c.get("/api/v1/notifications/stream", params={"ticket": bad})
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated", bad
