"""``minihermes serve``'s shutdown order (issue 24): at SIGTERM the HTTP server drains first (its streams end,
requests in flight finish or are answered 503 ``shutting_down`` by the node's stop), then the node stops. Before,
the server's task was cancelled and the node stopped under it: a notification stream still open at SIGTERM
left "Exception in ASGI application ... CancelledError" in the log. ``serve_process`` sends the SIGTERM and
fails the test on any traceback in the server's log."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.app import AGENT_CONFIG
from minihermes.cli.chat import sse_events

from .._server import serve_process
from ..security.test_resume_principal import MARKER, SlowModel

pytestmark = pytest.mark.both_loops  # a child process and a signal: on uvloop and asyncio's loop


@contextlib.asynccontextmanager
async def served(data: Path, options: list[str], env: dict[str, str]) -> AsyncIterator[str]:
    """``serve_process`` from an async test: entered and left (SIGTERM, the log's check) in a thread."""
    cm = serve_process(data, options, env=env, log_level="info")
    url = await asyncio.to_thread(cm.__enter__)
    try:
        yield url
    except BaseException:
        await asyncio.to_thread(cm.__exit__, None, None, None)
        raise
    await asyncio.to_thread(cm.__exit__, None, None, None)


async def notification_stream(c: httpx.AsyncClient, opened: asyncio.Event, seen: list[str]) -> None:
    async with c.stream("GET", "/api/v1/notifications/stream") as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            seen.append(line)
            opened.set()


async def test_sigterm_with_a_notification_stream_open_leaves_no_traceback(tmp_path: Path) -> None:
    opened, seen = asyncio.Event(), []
    async with httpx.AsyncClient(timeout=60) as c:
        async with served(tmp_path / "data", [], {}) as url:
            c.base_url = httpx.URL(url)
            stream = asyncio.ensure_future(notification_stream(c, opened, seen))
            await asyncio.wait_for(opened.wait(), 30)
        # SIGTERM was sent with the stream open: the server ended it (the body completes), then stopped.
        await asyncio.wait_for(stream, 30)
    assert seen[0] == ": connected"


@pytest.fixture
def model() -> Any:
    slow = SlowModel()
    yield slow
    slow.stop()


async def test_sigterm_mid_turn_answers_the_streams_and_leaves_no_traceback(
    tmp_path: Path, model: Any
) -> None:
    config = tmp_path / "node.toml"
    config.write_text(
        AGENT_CONFIG.replace('id = "node-1"', 'id = "node-1"\nshutdown_deadline_seconds = 2', 1)
    )
    env = {"MINIHERMES_ALLOWED_EGRESS": f"127.0.0.1:{model.port}"}
    model_url = f"http://127.0.0.1:{model.port}/v1"
    opened, seen = asyncio.Event(), []
    events: list[dict[str, Any]] = []

    async def chat_stream(c: httpx.AsyncClient) -> None:
        body = {"content": f"{MARKER}: tidy up", "stream": True}
        async with c.stream("POST", "/api/v1/sessions/held/messages", json=body) as resp:
            assert resp.status_code == 200
            async for event in sse_events(resp.aiter_lines()):
                events.append(event)

    async with httpx.AsyncClient(timeout=60) as c:
        async with served(tmp_path / "data", ["--config", str(config)], env) as url:
            c.base_url = httpx.URL(url)
            provider = {"name": "slow", "kind": "openai", "model": "slow-1", "base_url": model_url}
            r = await c.post("/api/v1/actors/llm_gateway/register_provider", json=provider)
            assert r.status_code == 200, r.text
            r = await c.post("/api/v1/actors/llm_gateway/switch_provider", json={"provider": "slow"})
            assert r.status_code == 200, r.text
            notes = asyncio.ensure_future(notification_stream(c, opened, seen))
            chat = asyncio.ensure_future(chat_stream(c))
            plain = asyncio.ensure_future(
                c.post(
                    "/api/v1/actors/agent/chat?timeout=120",
                    json={"session_id": "held-too", "message": f"{MARKER}: and this"},
                )
            )
            await asyncio.wait_for(opened.wait(), 30)
            assert await asyncio.to_thread(model.entered.wait, 60), model.errors
        # SIGTERM mid-turn (the client still open): the requests cut off by the node's stop got their
        # answers before the server went, and the notification stream its end.
        await asyncio.wait_for(asyncio.gather(notes, chat), 30)
        reply = await asyncio.wait_for(plain, 30)
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "shutting_down", events
    assert reply.status_code == 503 and reply.json()["error"]["code"] == "shutting_down", reply.text
