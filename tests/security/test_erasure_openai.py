"""Erasure of the HTTP layer's records (issue 25): what ``/v1`` and ``Idempotency-Key`` keep (stored responses,
the session map, claims with their outcomes) is forgotten with the person.

Alice sends a unique token through ``/v1/chat/completions`` (then continues by resending her history) and
``/v1/responses``, each with an ``Idempotency-Key``; bob does the same with his. After alice's
``memory.forget {user_id}`` over HTTP and a node stop, no file under the data directory holds her token in
any case form, while bob's response, his key's replay and his session map answer as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.agent.api_records import principal_part
from minihermes.api import AuthConfig, create_api_key, serve_http
from minihermes.app import build_agent_node, default_config
from minihermes.runtime import Node, PermissionDenied, RequestContext

from .test_erasure import holders, new_token


@asynccontextmanager
async def serving(data: Path) -> AsyncIterator[tuple[Node, str, dict[str, str]]]:
    """The whole app on a loopback port with API keys for alice and bob; the node is stopped on exit."""
    node = build_agent_node(default_config(data))
    await node.start()
    try:
        keys = {}
        for name in ("alice", "bob"):
            keys[name] = (await create_api_key(node.store, tenant="acme", principal=name, roles=["user"])).key
        stop = asyncio.Event()
        started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            serve_http(
                node,
                "127.0.0.1",
                0,
                AuthConfig(api_keys=True),
                stop=stop,
                on_started=lambda h, p: started.set_result(p),
                log_level="warning",
            )
        )
        try:
            yield node, f"http://127.0.0.1:{await asyncio.wait_for(started, 10)}", keys
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
    finally:
        await node.stop(deadline=10)


async def post(base: str, key: str, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        return await c.post(path, json=body, headers={"Authorization": f"Bearer {key}", **headers})


async def get(base: str, key: str, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        return await c.get(path, headers={"Authorization": f"Bearer {key}"})


async def use_v1(base: str, key: str, token: str) -> dict[str, Any]:
    """A chat (with an Idempotency-Key), its continuation by resent history, and a response (with a key)."""
    first = [{"role": "user", "content": f"remember that my passport is {token}"}]
    body = {"model": "minihermes", "messages": first}
    chat = await post(base, key, "/v1/chat/completions", body, **{"Idempotency-Key": f"chat-{token}"})
    assert chat.status_code == 200, chat.text
    answer = chat.json()["choices"][0]["message"]["content"]
    again = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": f"and {token}?"}]
    more = await post(base, key, "/v1/chat/completions", {"model": "minihermes", "messages": again})
    assert more.status_code == 200, more.text
    assert more.headers["x-minihermes-session"] == chat.headers["x-minihermes-session"]  # the fingerprint
    body = {"model": "minihermes", "input": f"my visa is {token}"}
    resp = await post(base, key, "/v1/responses", body, **{"Idempotency-Key": f"resp-{token}"})
    assert resp.status_code == 200, resp.text
    return {
        "chat_id": chat.json()["id"],
        "session": chat.headers["x-minihermes-session"],
        "history": again,
        "response_id": resp.json()["id"],
        "response_session": resp.headers["x-minihermes-session"],
        "response": resp.json(),
    }


async def record(node: Node, who: str, key: str) -> Any:
    ctx = RequestContext(tenant="acme", principal=who, roles=frozenset({"user"}))
    reply = await node.ask("api_records", "get", {"key": key}, 10, ctx=ctx)
    return reply["value"]


def idem_key(who: str, key: str) -> str:
    ctx = RequestContext(tenant="acme", principal=who, roles=frozenset({"user"}))
    return f"idem:{principal_part(ctx)}:{hashlib.sha256(key.encode()).hexdigest()}"


async def test_forgetting_a_user_erases_their_v1_records_and_keeps_anothers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    alice, bob = new_token(), new_token()
    async with serving(data) as (node, base, keys):
        bobs = await use_v1(base, keys["bob"], bob)
        alices = await use_v1(base, keys["alice"], alice)
        # the token is in alice's /v1 records: the stored response and both claims
        for key in (
            f"resp:{alices['response_id']}",
            idem_key("alice", f"chat-{alice}"),
            idem_key("alice", f"resp-{alice}"),
        ):
            assert alice in json.dumps(await record(node, "alice", key)), key
        assert await record(node, "alice", f"sess:{alices['response_session']}") is not None

        out = await post(base, keys["alice"], "/api/v1/actors/memory/forget", {"user_id": "alice"})
        assert out.status_code == 200, out.text
        # 2 claims, 1 response, 2 fingerprints, 1 session record
        assert out.json()["cleared"]["api_records"] >= 6, out.json()["cleared"]

        gone = await get(base, keys["alice"], f"/v1/responses/{alices['response_id']}")
        assert gone.status_code == 404, gone.text
        for key in (
            f"resp:{alices['response_id']}",
            f"sess:{alices['response_session']}",
            idem_key("alice", f"chat-{alice}"),
            idem_key("alice", f"resp-{alice}"),
        ):
            assert await record(node, "alice", key) is None, key

        # bob's records answer as before: his response, his key's replay, his session map
        kept = await get(base, keys["bob"], f"/v1/responses/{bobs['response_id']}")
        assert kept.status_code == 200 and kept.json()["output"] == bobs["response"]["output"]
        body = {"model": "minihermes", "input": f"my visa is {bob}"}
        replay = await post(base, keys["bob"], "/v1/responses", body, **{"Idempotency-Key": f"resp-{bob}"})
        assert replay.status_code == 200 and replay.json()["id"] == bobs["response_id"]
        first = [{"role": "user", "content": f"remember that my passport is {bob}"}]
        body = {"model": "minihermes", "messages": first}
        again = await post(
            base, keys["bob"], "/v1/chat/completions", body, **{"Idempotency-Key": f"chat-{bob}"}
        )
        assert again.status_code == 200 and again.json()["id"] == bobs["chat_id"]
        assert await record(node, "bob", f"sess:{bobs['response_session']}") is not None

    assert holders(data, alice) == []
    assert holders(data, bob), "bob's token is kept somewhere: the scan reads what the store wrote"


async def test_a_session_forget_takes_only_the_callers_records_and_the_tenant_takes_all(
    tmp_path: Path,
) -> None:
    node = build_agent_node(default_config(tmp_path / "data"))
    await node.start()
    try:
        alice = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
        bob = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
        ada = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))

        async def put(ctx: RequestContext, key: str, value: Any) -> None:
            await node.ask("api_records", "put", {"key": key, "value": value}, 10, ctx=ctx)

        a, b = principal_part(alice), principal_part(bob)
        await put(alice, "sess:s1", {"owner": a, "latest_response": "resp_1"})
        await put(alice, "resp:resp_1", {"owner": a, "session_id": "s1", "message": "x"})
        await put(alice, f"fp:{a}:h1", "s1")
        await put(bob, f"fp:{b}:h2", "s1")  # bob's record that leads to the same session id
        await put(bob, "resp:resp_2", {"owner": b, "session_id": "s2", "message": "y"})

        async def forget(ctx: RequestContext, **who: Any) -> int:
            reply = await node.ask("api_records", "forget_subject", who, 10, ctx=ctx)
            return int(reply["cleared"]["api_records"])

        with pytest.raises(PermissionDenied):
            await forget(alice, user_id="bob")
        with pytest.raises(PermissionDenied):
            await forget(alice, tenant=True)
        assert await forget(alice, session_id="s1") == 3  # hers in s1; bob's fingerprint stays
        assert await record(node, "bob", f"fp:{b}:h2") == "s1"
        assert await record(node, "alice", "resp:resp_1") is None
        assert await forget(ada, tenant=True) == 2
        assert await record(node, "bob", "resp:resp_2") is None
    finally:
        await node.stop(deadline=10)
