"""Test support for the provider tests: a real HTTP server on 127.0.0.1 and wire-format builders."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

# Distinctive so that a leak is unmistakable; tests assert it appears in no error and no log record.
FAKE_KEY = "sk-test-DO-NOT-LEAK-7f3a9c1e5b"


@dataclass
class Reply:
    """One canned HTTP response. ``chunks`` streams the body piece by piece; ``hang`` never answers."""

    status: int = 200
    json: Any = None
    body: bytes | None = None
    chunks: list[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    hang: bool = False


@dataclass
class Seen:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def sse(*events: tuple[str | None, Any]) -> list[bytes]:
    """Server-sent events: (event name or None, data); data that is not a str is JSON-encoded."""
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {payload}\n\n".encode())
    return out


def ndjson(*objs: Any) -> list[bytes]:
    return [(json.dumps(o) + "\n").encode() for o in objs]


class StubServer:
    """A uvicorn server in a background thread that answers from a FIFO of ``Reply`` objects.

    The listening socket is bound before the thread starts, so clients can connect at once (the kernel
    queues them) and no test ever waits for the server to come up.
    """

    def __init__(self) -> None:
        self._replies: deque[Reply] = deque()
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            self._app, log_level="critical", lifespan="off", access_log=False, interface="asgi3"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="stub-llm-server", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._release = asyncio.Event()
        await self._server.serve(sockets=[self._sock])

    def stop(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def reply(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.seen.clear()

    @property
    def last(self) -> Seen:
        return self.seen[-1]

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        body = await request.body()
        with self._lock:
            self.seen.append(
                Seen(
                    request.method, request.url.path, {k.lower(): v for k, v in request.headers.items()}, body
                )
            )
            reply = (
                self._replies.popleft() if self._replies else Reply(status=599, json={"error": "no reply"})
            )
        response: Response
        if reply.hang:
            assert self._release is not None
            await self._release.wait()
            response = Response(status_code=504)
        elif reply.chunks is not None:
            chunks = list(reply.chunks)

            async def gen() -> AsyncIterator[bytes]:
                for chunk in chunks:
                    yield chunk

            response = StreamingResponse(
                gen(), status_code=reply.status, headers=reply.headers, media_type=reply.content_type
            )
        else:
            raw = reply.body if reply.body is not None else json.dumps(reply.json).encode()
            response = Response(
                raw, status_code=reply.status, headers=reply.headers, media_type=reply.content_type
            )
        await response(scope, receive, send)


def assert_key_absent(error: BaseException) -> None:
    """The API key must not appear in an error, its repr, its dict form or its formatted traceback."""
    import traceback

    texts = [str(error), repr(error), "".join(traceback.format_exception(error))]
    to_dict = getattr(error, "to_dict", None)
    if to_dict is not None:
        texts.append(json.dumps(to_dict()))
    for text in texts:
        assert FAKE_KEY not in text
    # Chained client exceptions hold the request and so the auth header: errors must not chain.
    assert error.__cause__ is None
    assert error.__context__ is None


def closed_port_url() -> str:
    """A loopback URL nobody listens on (connection refused)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


# -- a small agent loop for the simulated model ----------------------------------------------------------


def schema(*required: str, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    props = {name: {"type": "string"} for name in (*required, *optional)}
    return {"type": "object", "properties": props, "required": list(required)}


def tool(name: str, *required: str, optional: tuple[str, ...] = ()) -> Any:
    from minihermes.llm import ToolSpec

    return ToolSpec(
        name=name, description=f"The {name} tool.", input_schema=schema(*required, optional=optional)
    )


def default_tools() -> list[Any]:
    return [
        tool("calculator", "expression"),
        tool("memory_store", "key", "value"),
        tool("memory_recall", "key"),
        tool("memory_search", "query"),
        tool("read_file", "path"),
        tool("write_file", "path", "content"),
        tool("list_files", optional=("path",)),
    ]


class FakeTools:
    """Tool results the way the tool executor would produce them, with state kept in dicts."""

    def __init__(self, files: dict[str, str] | None = None) -> None:
        self.memory: dict[str, str] = {}
        self.files: dict[str, str] = dict(files or {})
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def run(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, dict(args)))
        if name == "calculator":
            # A demo calculator: eval without builtins (fine for a test's own inputs).
            try:
                value = eval(args["expression"], {"__builtins__": {}})
            except ZeroDivisionError:
                return {"error": "division by zero"}
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            return {"result": str(value)}
        if name == "memory_store":
            self.memory[args["key"]] = args["value"]
            return {"status": "ok", "key": args["key"], "scope": "global", "tier": "reachable"}
        if name == "memory_recall":
            value = self.memory.get(args["key"])
            return {"status": "ok", "key": args["key"], "value": value, "found": value is not None}
        if name == "memory_search":
            q = args["query"].lower()
            hits = [
                {"key": k, "value": v} for k, v in self.memory.items() if q in k.lower() or q in v.lower()
            ]
            return {"status": "ok", "results": hits}
        if name == "read_file":
            if args["path"] not in self.files:
                return {"error": f"file not found: {args['path']}"}
            return {"content": self.files[args["path"]]}
        if name == "write_file":
            self.files[args["path"]] = args["content"]
            return {"status": "ok", "bytes": len(args["content"])}
        if name == "list_files":
            return {"files": sorted(self.files)}
        return {"result": f"{name} ran with {json.dumps(args, sort_keys=True)}"}


@dataclass
class TurnResult:
    text: str
    iterations: int
    calls: list[tuple[str, dict[str, Any]]]
    completions: list[Any]


async def run_turn(
    provider: Any,
    history: list[dict[str, Any]],
    user: str,
    *,
    tools: list[Any] | None = None,
    executor: FakeTools | None = None,
    system: str = "You are a helpful assistant with access to tools.",
    max_iterations: int = 8,
) -> TurnResult:
    """One agent turn, LLM -> tools -> LLM, the way the agent actor drives it; raises if it never ends."""
    from minihermes.llm import CompletionRequest

    executor = executor or FakeTools()
    tools = default_tools() if tools is None else tools
    start = len(executor.calls)
    history.append({"role": "user", "content": user})
    completions = []
    for iteration in range(1, max_iterations + 1):
        request = CompletionRequest(messages=[{"role": "system", "content": system}, *history], tools=tools)
        completion = await provider.complete(request)
        completions.append(completion)
        history.append(
            {
                "role": "assistant",
                "content": completion.content,
                "tool_calls": [c.model_dump() for c in completion.tool_calls],
            }
        )
        if completion.stop_reason != "tool_use":
            return TurnResult(completion.content, iteration, executor.calls[start:], completions)
        for call in completion.tool_calls:
            result = executor.run(call.name, call.input)
            history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    raise AssertionError(f"the turn did not end within {max_iterations} iterations")
