"""The generic signed webhook: HMAC-signed JSON in (401 without a good signature), signed callbacks out."""

from __future__ import annotations

import json
from typing import Any

import httpx

from minihermes.platforms.webhook import SIGNATURE_HEADER, sign
from tests._server import free_port

from .conftest import ask, counters, until
from .fakes import HttpServer

SECRET = "whsec-canary-4b1d9e77c0ffee"


async def test_signed_webhook_in_and_out(app_node, caplog) -> None:
    received: list[dict[str, Any]] = []

    async def callback(
        path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        assert headers[SIGNATURE_HEADER.lower()] == sign(SECRET, body)
        received.append({**json.loads(body), "idempotency": headers["x-idempotency-key"]})
        return 200, {"ok": True}, {}

    sink = HttpServer(callback)
    sink_url = await sink.start()
    node = await app_node()
    await ask(node, "llm_gateway", "register_credential", {"phantom_token": "hook", "api_key": SECRET})
    port = free_port()
    await ask(
        node,
        "platform_gateway",
        "register_platform",
        {
            "platform": "webhook",
            "name": "hook",
            "credential": "hook",
            "base_url": sink_url,
            "settings": {"listen_port": port},
        },
    )
    await ask(
        node, "platform_gateway", "link_user", {"name": "hook", "platform_user_id": "u1", "user_id": "erin"}
    )
    url = f"http://127.0.0.1:{port}/"
    await until(lambda: _state(node, "running"), what="the listener")

    async with httpx.AsyncClient() as client:
        body = json.dumps({"id": "m1", "chat": "c1", "user": "u1", "text": "hello"}).encode()
        bad = await client.post(url, content=body, headers={SIGNATURE_HEADER: sign("wrong", body)})
        missing = await client.post(url, content=body)
        assert (bad.status_code, missing.status_code) == (401, 401)
        ok = await client.post(url, content=body, headers={SIGNATURE_HEADER: sign(SECRET, body)})
        assert ok.status_code == 200 and ok.json()["accepted"] is True
        again = await client.post(url, content=body, headers={SIGNATURE_HEADER: sign(SECRET, body)})
        assert again.status_code == 200  # a retry: accepted, dropped as a duplicate
    await until(lambda: received, what="the signed callback")
    await until(lambda: _count(node, "duplicates"), what="the duplicate counted")
    c = await counters(node, "hook")
    assert c["in"] == 1 and c["turns"] == 1 and c["out"] == 1
    assert received[0]["chat"] == "c1" and received[0]["text"] and received[0]["idempotency"]
    assert SECRET not in caplog.text and SECRET not in json.dumps(received)
    await sink.stop()


async def _state(node, state: str) -> bool:
    return (await ask(node, "platform_gateway", "get_platform", {"name": "hook"})).get("state") == state


async def _count(node, key: str) -> bool:
    return (await counters(node, "hook")).get(key, 0) >= 1
