"""The chat against a server: Server-Sent Events rendered as they arrive, errors in the stream, and the
fallback to ``agent.chat`` on a server without the streaming endpoint."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from minihermes.cli._backend import CommandError, Remote
from minihermes.cli.chat import ChatLoop


def _sse(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


def _server(stream: list[tuple[str, dict[str, Any]]] | None, seen: list[Any]) -> Starlette:
    async def messages(request: Request) -> Any:
        seen.append((request.path_params["sid"], await request.json()))

        async def body() -> Any:
            yield ": keep-alive\n\n"
            for chunk in _sse(stream or []).split("\n\n"):
                if chunk:
                    yield chunk + "\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    async def chat(request: Request) -> Any:
        payload = await request.json()
        seen.append(("chat", payload))
        return JSONResponse(
            {"status": "ok", "response": f"echo {payload['message']}", "tool_calls": 0, "iterations": 1}
        )

    routes = [Route("/api/v1/actors/agent/chat", chat, methods=["POST"])]
    if stream is not None:
        routes.append(Route("/api/v1/sessions/{sid}/messages", messages, methods=["POST"]))
    return Starlette(routes=routes)


async def _loop(app: Starlette, captured: Any) -> ChatLoop:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://srv")
    return ChatLoop(captured.console, Remote(client, "http://srv"), "web-1")


async def test_a_streamed_turn_renders_each_event(captured):
    seen: list[Any] = []
    app = _server(
        [
            ("turn_started", {"turn_id": "t1"}),
            ("text_delta", {"text": "Checking"}),
            ("tool_call_start", {"id": "c1", "name": "calculator", "input": {"expression": "1+1"}}),
            (
                "tool_call_end",
                {"id": "c1", "name": "calculator", "is_error": False, "result": "2", "duration_ms": 1},
            ),
            ("text_delta", {"text": "It is 2."}),
            (
                "final",
                {"reply": {"status": "ok", "response": "CheckingIt is 2.", "tool_calls": 1, "iterations": 2}},
            ),
        ],
        seen,
    )
    loop = await _loop(app, captured)
    reply = await loop.turn("what is 1+1")
    assert reply["response"] == "CheckingIt is 2."
    assert seen == [("web-1", {"content": "what is 1+1", "stream": True})]
    assert captured.text.splitlines() == [
        "agent> Checking",
        '⚙ calculator {"expression": "1+1"}',
        "  ✓ calculator 1 ms 2",
        "agent> It is 2.",
        "(1 tool calls, 2 LLM calls)",
    ]


async def test_an_error_event_or_a_stream_without_final_is_an_error(captured):
    loop = await _loop(
        _server([("error", {"error": {"code": "llm_unavailable", "message": "all down"}})], []), captured
    )
    with pytest.raises(CommandError) as e:
        await loop.turn("hi")
    assert e.value.code == "llm_unavailable"
    loop = await _loop(_server([("text_delta", {"text": "cut"})], []), captured)
    with pytest.raises(CommandError, match="without a final reply"):
        await loop.turn("hi")


async def test_a_server_without_streaming_gets_a_plain_chat_call(captured):
    seen: list[Any] = []
    loop = await _loop(_server(None, seen), captured)
    reply = await loop.turn("hello")
    assert reply["response"] == "echo hello"
    assert seen == [("chat", {"message": "hello", "session_id": "web-1"})]
    assert "agent> echo hello (0 tool calls, 1 LLM calls)" in captured.text


async def test_a_user_role_caller_chats_in_a_session_of_their_own(tmp_path, captured):
    import time

    import jwt

    from minihermes.api import AuthConfig, create_app
    from minihermes.app import build_agent_node

    from .conftest import core_config, lines

    secret = "x" * 32

    def token(sub: str, roles: list[str]) -> str:
        claims = {"tenant": "acme", "sub": sub, "roles": roles, "exp": int(time.time()) + 600}
        return jwt.encode(claims, secret, algorithm="HS256")

    cfg = core_config()
    cfg.model.node.data_dir = str(tmp_path / "srv")
    node = build_agent_node(cfg)
    await node.start()
    try:
        app = create_app(node, AuthConfig(jwt_secret=secret))

        def remote(sub: str, roles: list[str]) -> Remote:
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://127.0.0.1",
                headers={"Authorization": f"Bearer {token(sub, roles)}"},
            )
            return Remote(client, "http://127.0.0.1")

        bob = ChatLoop(captured.console, remote("bob", ["user"]), "cli")
        assert await bob.run(lines("calculate 2 + 3", "/new", "/quit")) == 0
        out = captured.text
        assert "error" not in out and "5" in out
        first = out.split("session ", 1)[1].split(" ", 1)[0]
        assert first.startswith("sess-") and bob.session.startswith("sess-") and bob.session != first
        # Another user cannot use bob's session; an explicit --session is kept as given.
        eve = ChatLoop(captured.console, remote("eve", ["user"]), first)
        await eve.run(lines("hello", "/quit"))
        assert "error not_found" in captured.text.split(f"session {first}", 2)[-1]
        admin = ChatLoop(captured.console, remote("root", ["admin"]), "cli")
        await admin.run(lines("/quit"))
        assert admin.session == "cli"
    finally:
        await node.stop()
