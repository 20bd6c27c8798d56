"""Fake platform servers on loopback, speaking the wire protocols the adapters use.

``FakeTelegram``: the Bot API's ``getMe``, ``getUpdates`` (long polling with ``offset`` acknowledgement) and
``sendMessage`` (optionally a 429 with ``retry_after`` first, or a send that never answers). ``CallbackServer``:
a webhook receiver that records signed callbacks. Both are tiny h11 servers on the test's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import h11

Handler = Callable[[str, dict[str, str], bytes], Awaitable[tuple[int, dict[str, Any], dict[str, str]]]]


class HttpServer:
    """One request per connection; ``handler(path, headers, body) -> (status, json, headers)``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = bytearray()
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(65536))
                elif isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
            assert request is not None
            headers = {k.decode().lower(): v.decode() for k, v in request.headers}
            status, reply, extra = await self.handler(request.target.decode(), headers, bytes(body))
            data = json.dumps(reply).encode()
            out = [("content-type", "application/json"), ("content-length", str(len(data))), *extra.items()]
            writer.write(conn.send(h11.Response(status_code=status, headers=out)) or b"")
            writer.write(conn.send(h11.Data(data=data)) or b"")
            writer.write(conn.send(h11.EndOfMessage()) or b"")
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


@dataclass
class Sent:
    chat_id: str
    text: str


@dataclass
class FakeTelegram:
    """A Bot API server for one bot token."""

    token: str
    updates: list[dict[str, Any]] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    acked: int = 0
    """The highest offset a getUpdates carried: updates below it are confirmed."""
    redeliver_once: bool = False
    """Ignore the next offset once (Telegram redelivering what it had handed out)."""
    throttle_next: int = 0
    """Answer the next N sendMessage calls with 429 retry_after=1."""
    hang_sends: bool = False
    """Never answer a sendMessage (the node dies while it waits): it is not recorded."""
    requests: list[str] = field(default_factory=list)
    send_started: asyncio.Event = field(default_factory=asyncio.Event)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _new: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.http = HttpServer(self._handle)

    async def start(self) -> str:
        return await self.http.start()

    def message(
        self, user: int, text: str, *, chat: int | None = None, group: bool = False, **extra: Any
    ) -> int:
        update_id = next(self._ids)
        chat_id = chat if chat is not None else user
        self.updates.append(
            {
                "update_id": update_id,
                "message": {
                    "message_id": update_id,
                    "date": 1_700_000_000,
                    "chat": {"id": chat_id, "type": "group" if group else "private"},
                    "from": {"id": user, "is_bot": False, "first_name": f"user{user}"},
                    "text": text,
                    **extra,
                },
            }
        )
        self._new.set()
        return update_id

    def texts(self, chat: int) -> list[str]:
        return [s.text for s in self.sent if s.chat_id == str(chat)]

    async def _handle(
        self, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        prefix = f"/bot{self.token}/"
        if not path.startswith(prefix):
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}, {}
        method = path[len(prefix) :]
        self.requests.append(method)
        params: dict[str, Any] = dict(parse_qsl(body.decode()))
        for key in ("offset", "timeout", "allowed_updates"):
            if key in params:
                params[key] = json.loads(params[key])
        if headers.get("content-type", "").startswith("application/json") and body:
            params = json.loads(body)
        if method == "getMe":
            return (
                200,
                {
                    "ok": True,
                    "result": {"id": 999, "is_bot": True, "first_name": "Hermes", "username": "hermes_bot"},
                },
                {},
            )
        if method == "getUpdates":
            return 200, {"ok": True, "result": await self._get_updates(params)}, {}
        if method == "sendMessage":
            self.send_started.set()
            if self.hang_sends:
                await asyncio.Event().wait()
            if self.throttle_next > 0:
                self.throttle_next -= 1
                return (
                    429,
                    {
                        "ok": False,
                        "error_code": 429,
                        "description": "Too Many Requests: retry after 1",
                        "parameters": {"retry_after": 1},
                    },
                    {},
                )
            self.sent.append(Sent(str(params["chat_id"]), str(params["text"])))
            return (
                200,
                {
                    "ok": True,
                    "result": {
                        "message_id": 10_000 + len(self.sent),
                        "date": 1_700_000_000,
                        "chat": {"id": int(params["chat_id"]), "type": "private"},
                        "text": params["text"],
                    },
                },
                {},
            )
        return 404, {"ok": False, "error_code": 404, "description": "Not Found"}, {}

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        if self.redeliver_once and offset:
            self.redeliver_once = False
            offset = 0
        else:
            self.acked = max(self.acked, offset)
        self.updates = [u for u in self.updates if u["update_id"] >= self.acked]
        pending = [u for u in self.updates if u["update_id"] >= offset]
        if not pending:
            self._new.clear()
            try:
                await asyncio.wait_for(self._new.wait(), min(float(params.get("timeout") or 0), 0.5))
            except TimeoutError:
                pass
            pending = [u for u in self.updates if u["update_id"] >= offset]
        return pending
