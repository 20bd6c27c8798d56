"""A generic signed webhook: HMAC-signed JSON in, signed JSON callbacks out (the escape hatch for any
platform without an adapter).

In: ``POST http://<listen_host>:<listen_port>/`` with body ``{"id", "chat", "user", "text", "quoted"?,
"is_group"?, "addressed"?, "display_name"?}`` and header ``X-MiniHermes-Signature: sha256=<hex HMAC-SHA256 of
the raw body with the connection's secret>``. A bad or missing signature is 401 and nothing is kept; a good
one is answered 200 only once the message is durably in the inbox (a retried ``id`` is dropped there).

Out: ``POST <base_url>`` with ``{"chat", "text", "key"}``, signed the same way, and ``X-Idempotency-Key`` (the
reply's turn and part): a receiver that dedupes by it closes the one window the outbox cannot (a part sent
again after a crash between its delivery and our record of it). 429 with ``Retry-After`` is waited out.

Settings: ``listen_host`` (default 127.0.0.1), ``listen_port`` (required).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Any

import h11
import httpx

from minihermes.runtime import InvalidArgument

from ._adapter import Adapter, Connection, Inbound, RetryLater

SIGNATURE_HEADER = "X-MiniHermes-Signature"
MAX_BODY = 256 * 1024
READ_TIMEOUT = 30.0


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookAdapter(Adapter):
    kind = "webhook"
    max_length = 8000
    hints = "Your reply is delivered as plain text to another system's webhook."

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn)
        port = conn.settings.get("listen_port")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise InvalidArgument("a webhook connection needs settings.listen_port", field="settings")
        self.host = str(conn.settings.get("listen_host", "127.0.0.1"))
        self.port = port
        self._secret = conn.secret.get_secret_value()
        self._client = httpx.AsyncClient(timeout=15.0)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        # Bound before the connection reports "running": a sender may post as soon as it does.
        self._server = await asyncio.start_server(self._connection, self.host, self.port)

    async def receive_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            request, body = await asyncio.wait_for(_read_request(conn, reader), READ_TIMEOUT)
            if request is None:
                status, reply = 413, {"error": "body too large"}
            else:
                status, reply = await self._handle(request, body)
        except (TimeoutError, h11.RemoteProtocolError, ConnectionError):
            writer.close()
            return
        data = json.dumps(reply).encode()
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(data))),
            ("connection", "close"),
        ]
        try:
            writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
            writer.write(conn.send(h11.Data(data=data)) or b"")
            writer.write(conn.send(h11.EndOfMessage()) or b"")
            await writer.drain()
        finally:
            writer.close()

    async def _handle(self, request: h11.Request, body: bytes) -> tuple[int, dict[str, Any]]:
        if request.method != b"POST":
            return 405, {"error": "POST only"}
        given = dict(request.headers).get(SIGNATURE_HEADER.lower().encode(), b"").decode(errors="replace")
        if not hmac.compare_digest(given, sign(self._secret, body)):
            return 401, {"error": "bad signature"}
        try:
            data = json.loads(body)
            message = Inbound(
                message_id=_text(data, "id"),
                chat=_text(data, "chat"),
                user=_text(data, "user"),
                text=_text(data, "text", limit=100_000),
                is_group=bool(data.get("is_group", False)),
                addressed=bool(data.get("addressed", True)),
                quoted=str(data.get("quoted") or "")[:100_000],
                display_name=str(data.get("display_name") or "")[:128],
            )
        except (ValueError, AttributeError) as e:
            return 400, {"error": f"bad message: {e}"}
        await self.conn.accept([message])
        return 200, {"accepted": True, "id": message.message_id}

    async def send(self, chat: str, text: str, key: str) -> None:
        if not self.conn.base_url:
            raise InvalidArgument("a webhook connection needs base_url to send replies", field="base_url")
        body = json.dumps({"chat": chat, "text": text, "key": key}).encode()
        response = await self._client.post(
            self.conn.base_url,
            content=body,
            headers={
                "content-type": "application/json",
                SIGNATURE_HEADER: sign(self._secret, body),
                "X-Idempotency-Key": key,
            },
        )
        if response.status_code == 429:
            raise RetryLater(_retry_after(response.headers.get("retry-after")))
        response.raise_for_status()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._client.aclose()


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request | None, bytes]:
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                return None, b""
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            raise ConnectionError("closed before the request ended")


def _text(data: Any, field: str, limit: int = 256) -> str:
    value = data.get(field)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ValueError(f"{field} must be a non-empty string of at most {limit} characters")
    return value


def _retry_after(value: str | None) -> float:
    try:
        return float(value or 1)
    except ValueError:
        return 1.0
