"""``llm_gateway.test_provider``: one tiny real completion against a local OpenAI-compatible server, its
failures classified the way a person fixes them, and never the key in the reply, the log or the audit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from minihermes.runtime import ActorError

from ..llm.support import FAKE_KEY, Reply, closed_port_url
from . import test_llm_gateway_support as support
from .conftest import audit_trail
from .test_llm_gateway_support import ACME_USER, RecordingClock, StampedStub, ask, tree

_key_never_logged = support._key_never_logged
_loopback_only = support._loopback_only
clock = support.clock

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-probe-2026",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


@pytest.fixture(scope="module")
def _server() -> Iterator[StampedStub]:
    server = StampedStub()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server(_server: StampedStub, clock: RecordingClock) -> Iterator[StampedStub]:
    _server.reset()
    yield _server
    _server.reset()


async def gateway(make_node: Any, base_url: str) -> Any:
    node = await make_node(tree())
    await ask(node, "register_credential", phantom_token="openai-main", api_key=FAKE_KEY)
    await ask(
        node,
        "register_provider",
        name="gpt",
        kind="openai",
        model="gpt-probe",
        base_url=base_url,
        credential="openai-main",
        timeout=10,
    )
    return node


async def test_a_working_provider_answers_ok_with_its_latency(make_node: Any, server: StampedStub) -> None:
    node = await gateway(make_node, server.base_url + "/v1")
    server.reply(Reply(json=ANSWER))
    reply = await ask(node, "test_provider", provider="gpt")
    assert reply["ok"] is True and reply["provider"] == "gpt" and reply["model"] == "gpt-probe-2026"
    assert isinstance(reply["latency_ms"], int | float) and "error" not in reply
    sent = server.last.json()
    assert sent["model"] == "gpt-probe" and sent["max_tokens"] <= 16  # one tiny request
    assert server.last.headers["authorization"] == f"Bearer {FAKE_KEY}"
    # A test is not traffic: no usage, no circuit move; the audit says it happened, without the key.
    stats = await ask(node, "get_stats")
    assert stats["usage"]["calls"] == 0 and "gpt" not in stats["providers"]
    events = [e for e in await audit_trail(node) if e["event_type"] == "provider_tested"]
    assert events and events[-1]["data"] == {"provider": "gpt", "ok": True, "error": None}
    assert FAKE_KEY not in json.dumps(reply) + json.dumps(events)


@pytest.mark.parametrize(
    ("response", "kind"),
    [
        (Reply(status=401, json={"error": {"message": f"Incorrect API key provided: {FAKE_KEY}"}}), "auth"),
        (Reply(status=404, json={"error": {"message": "The model gpt-probe does not exist"}}), "not_found"),
        (Reply(status=429, json={"error": {"message": "slow down"}}), "rate_limited"),
        (Reply(status=500, json={"error": {"message": "boom"}}), "server_error"),
        (Reply(body=b"<html>not an API</html>", content_type="text/html"), "bad_response"),
    ],
)
async def test_failures_are_classified_and_the_key_never_shows(
    make_node: Any, server: StampedStub, response: Reply, kind: str
) -> None:
    node = await gateway(make_node, server.base_url + "/v1")
    server.reply(response)
    reply = await ask(node, "test_provider", provider="gpt")
    assert reply["ok"] is False and reply["error"]["kind"] == kind and reply["error"]["hint"]
    assert FAKE_KEY not in json.dumps(reply)
    assert len(server.seen) == 1  # no retries: a test asks once
    assert (await ask(node, "get_circuit", provider="gpt"))["state"] == "closed"


async def test_unreachable_and_unconfigured(make_node: Any) -> None:
    node = await gateway(make_node, closed_port_url() + "/v1")
    reply = await ask(node, "test_provider", provider="gpt")
    assert (reply["ok"], reply["error"]["kind"]) == (False, "unreachable")
    reply = await ask(node, "test_provider", provider="anthropic")  # the default entry: no credential
    assert reply["error"]["kind"] == "no_credential" and "register_credential" in reply["error"]["message"]
    assert reply["latency_ms"] is None


async def test_register_provider_may_test_at_once(make_node: Any, server: StampedStub) -> None:
    node = await make_node(tree())
    await ask(node, "register_credential", phantom_token="openai-main", api_key=FAKE_KEY)
    server.reply(Reply(json=ANSWER))
    reply = await ask(
        node,
        "register_provider",
        name="gpt",
        kind="openai",
        model="gpt-probe",
        base_url=server.base_url + "/v1",
        credential="openai-main",
        test=True,
    )
    assert reply["status"] == "ok" and reply["provider"] == "gpt" and reply["test"]["ok"] is True
    assert "gpt" in [p["name"] for p in (await ask(node, "list_providers"))["providers"]]


async def test_only_admins_test_and_unknown_names_are_404(make_node: Any) -> None:
    node = await make_node(tree())
    with pytest.raises(ActorError) as denied:
        await ask(node, "test_provider", ctx=ACME_USER, provider="simulated")
    assert denied.value.code == "permission_denied"
    with pytest.raises(ActorError) as unknown:
        await ask(node, "test_provider", provider="gtp")
    assert unknown.value.code == "not_found"
    assert (await ask(node, "test_provider", provider="simulated"))["ok"] is True
