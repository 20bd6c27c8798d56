"""The llm_gateway against local HTTP servers speaking the OpenAI, Anthropic and Ollama protocols, its
credentials (encrypted at rest, never leaked), and its state across a SIGKILL of the process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.credentials import CredentialVault
from minihermes.runtime import ActorError, ConfigError, Node, SystemClock

from ..llm.support import FAKE_KEY, Reply
from . import test_llm_gateway_support as support
from .conftest import audit_trail
from .test_llm_gateway_support import (
    ACME,
    GLOBEX,
    RecordingClock,
    StampedStub,
    all_text,
    ask,
    db_bytes,
    settle,
    tree,
    user,
)

# The support module's fixtures (autouse guards, the recording clock), made visible to this module.
_key_never_logged = support._key_never_logged
_loopback_only = support._loopback_only
clock = support.clock

REPO_ROOT = Path(__file__).resolve().parents[2]
CALCULATOR = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "input_schema": {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "calculate 2 + 2, then double it"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "name": "calculator", "input": {"expression": "2 + 2"}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": {"result": "4"}},
]


def openai_reply(content: str = "", calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["input"])},
            }
            for c in calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-wire-2026",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 7,
            "total_tokens": 57,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    }


def anthropic_reply(*blocks: dict[str, Any]) -> dict[str, Any]:
    tool_use = any(b["type"] == "tool_use" for b in blocks)
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-wire-2026",
        "content": list(blocks),
        "stop_reason": "tool_use" if tool_use else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 9, "cache_read_input_tokens": 30},
    }


def api_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "api_error", "message": message}}


@pytest.fixture(scope="module")
def _servers() -> Iterator[tuple[StampedStub, StampedStub, StampedStub]]:
    servers = (StampedStub(), StampedStub(), StampedStub())
    for server in servers:
        server.start()
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def servers(
    _servers: tuple[StampedStub, StampedStub, StampedStub], clock: RecordingClock
) -> Iterator[tuple[StampedStub, StampedStub, StampedStub]]:
    """(OpenAI-speaking, Anthropic-speaking, Ollama-speaking) local servers, emptied for this test."""
    for server in _servers:
        server.reset()
        server.clock = clock
    yield _servers
    for server in _servers:
        server.reset()
        server.clock = None


async def wire_node(make_node: Any, servers: tuple[StampedStub, ...], **args: Any) -> Node:
    """OpenAI active (key ``FAKE_KEY``), Anthropic next in the chain, Ollama registered."""
    openai_stub, anthropic_stub, ollama_stub = servers
    node: Node = await make_node(tree(**args))
    await ask(node, "register_credential", phantom_token="openai-prod", api_key=FAKE_KEY)
    await ask(node, "register_credential", phantom_token="anthropic-prod", api_key=FAKE_KEY + "-anthropic")
    await ask(
        node,
        "register_provider",
        name="openai",
        kind="openai",
        model="gpt-wire",
        base_url=openai_stub.base_url + "/v1",
        credential="openai-prod",
        timeout=5,
    )
    await ask(
        node,
        "register_provider",
        name="claude",
        kind="anthropic",
        model="claude-wire",
        base_url=anthropic_stub.base_url,
        credential="anthropic-prod",
    )
    await ask(
        node,
        "register_provider",
        name="local",
        kind="ollama",
        model="llama3.2",
        base_url=ollama_stub.base_url,
    )
    await ask(node, "switch_provider", provider="openai")
    await ask(node, "set_failover", chain=["claude"])
    return node


# -- the protocols ----------------------------------------------------------------------------------------


async def test_openai_5xx_is_retried_then_fails_over_to_anthropic(make_node: Any, servers: Any) -> None:
    openai_stub, anthropic_stub, _ = servers
    node = await wire_node(make_node, servers, max_retries=1, backoff_base=0)
    openai_stub.reply(
        Reply(status=500, json={"error": {"message": "boom"}}), Reply(status=502, body=b"bad gateway")
    )
    tool_use = {"type": "tool_use", "id": "toolu_9", "name": "calculator", "input": {"expression": "4 * 2"}}
    anthropic_stub.reply(Reply(json=anthropic_reply({"type": "text", "text": "Doubling."}, tool_use)))

    reply = await ask(node, "completion", messages=CONVERSATION, tools=[CALCULATOR], max_tokens=200)
    assert (reply["provider"], reply["model"]) == ("claude", "claude-wire-2026")
    assert reply["attempts"] == [{"provider": "openai", "error": "unavailable"}]
    assert reply["response"] == {
        "content": "Doubling.",
        "stop_reason": "tool_use",
        "tool_calls": [{"id": "toolu_9", "name": "calculator", "input": {"expression": "4 * 2"}}],
        "usage": {"input_tokens": 70, "output_tokens": 9, "cached_tokens": 30, "cache_write_tokens": 0},
    }

    assert len(openai_stub.seen) == 2  # one retry, then failover
    seen = openai_stub.seen[0]
    assert (seen.method, seen.path, seen.headers["authorization"]) == (
        "POST",
        "/v1/chat/completions",
        f"Bearer {FAKE_KEY}",
    )
    body = seen.json()
    assert (body["model"], body["max_tokens"]) == ("gpt-wire", 200)
    assert body["messages"][2]["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": json.dumps({"expression": "2 + 2"}),
    }
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"result": "4"}'}
    assert body["tools"][0]["function"]["parameters"] == CALCULATOR["input_schema"]

    [seen] = anthropic_stub.seen
    assert seen.path == "/v1/messages"
    assert FAKE_KEY + "-anthropic" in (
        seen.headers.get("x-api-key"),
        seen.headers.get("authorization", "").removeprefix("Bearer "),
    )
    body = seen.json()
    assert body["model"] == "claude-wire" and body["system"][0]["text"] == "You are terse."
    assert body["messages"][1]["content"][0]["type"] == "tool_use"
    assert body["messages"][2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": '{"result": "4"}',
    }
    assert body["tools"][0]["input_schema"] == CALCULATOR["input_schema"]

    stats = (await ask(node, "get_stats"))["providers"]
    assert (stats["openai"]["failures"], stats["openai"]["retries"]) == (1, 1)
    assert (stats["claude"]["cached_tokens"], stats["claude"]["cache_hits"]) == (30, 1)


async def test_openai_tool_calls_are_normalized(make_node: Any, servers: Any) -> None:
    openai_stub, _, _ = servers
    node = await wire_node(make_node, servers)
    call = {"id": "call_7", "name": "calculator", "input": {"expression": "4 * 2"}}
    openai_stub.reply(Reply(json=openai_reply(calls=[call])))
    reply = await ask(node, "completion", messages=CONVERSATION, tools=[CALCULATOR])
    assert (reply["provider"], reply["model"], reply["attempts"]) == ("openai", "gpt-wire-2026", [])
    assert reply["response"]["tool_calls"] == [call] and reply["response"]["stop_reason"] == "tool_use"
    assert reply["response"]["usage"]["cached_tokens"] == 32


async def test_ollama_native_chat_through_the_gateway(make_node: Any, servers: Any) -> None:
    _, _, ollama_stub = servers
    node = await wire_node(make_node, servers)
    await ask(node, "switch_provider", provider="local", session_id="s-local")
    ollama_stub.reply(
        Reply(
            json={
                "model": "llama3.2:latest",
                "created_at": "2026-01-01T00:00:00Z",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {"function": {"name": "calculator", "arguments": {"expression": "4 * 2"}}}
                    ],
                },
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 61,
                "eval_count": 12,
            }
        )
    )
    reply = await ask(node, "completion", messages=CONVERSATION, tools=[CALCULATOR], session_id="s-local")
    assert reply["provider"] == "local"
    [tool_call] = reply["response"]["tool_calls"]
    assert (tool_call["name"], tool_call["input"]) == ("calculator", {"expression": "4 * 2"})
    assert tool_call["id"].startswith("call_")  # Ollama sends none; the adapter makes a stable one
    assert reply["response"]["usage"]["input_tokens"] == 61
    [seen] = ollama_stub.seen
    assert (seen.path, seen.json()["model"]) == ("/api/chat", "llama3.2")


async def test_a_wire_429_with_retry_after_is_waited_out(
    make_node: Any, servers: Any, clock: RecordingClock
) -> None:
    openai_stub, _, _ = servers
    node = await wire_node(make_node, servers)
    openai_stub.reply(
        Reply(status=429, json={"error": {"message": "slow down"}}, headers={"retry-after": "3"}),
        Reply(json=openai_reply("after the wait")),
    )
    task = asyncio.ensure_future(ask(node, "completion", messages=user("hi")))
    await clock.until_sleeping()
    assert clock.sleeps == [3.0] and len(openai_stub.seen) == 1
    await clock.advance(2.9)
    await settle()
    assert not task.done() and len(openai_stub.seen) == 1
    await clock.advance(0.1)
    reply = await task
    assert (reply["provider"], reply["response"]["content"]) == ("openai", "after the wait")
    assert openai_stub.stamps[1] - openai_stub.stamps[0] == pytest.approx(3.0)


async def test_persistent_429s_fail_over_and_open_the_breaker(make_node: Any, servers: Any) -> None:
    openai_stub, anthropic_stub, _ = servers
    node = await wire_node(make_node, servers, max_retries=0)
    openai_stub.reply(*[Reply(status=429, json={"error": {"message": "quota"}})] * 3)
    anthropic_stub.reply(*[Reply(json=anthropic_reply({"type": "text", "text": "here"}))] * 4)
    for _ in range(3):
        reply = await ask(node, "completion", messages=user("hi"))
        assert reply["attempts"] == [{"provider": "openai", "error": "rate_limited"}]
    circuit = await ask(node, "get_circuit", provider="openai")
    assert (circuit["state"], circuit["last_error"]) == ("open", "rate_limited")
    reply = await ask(node, "completion", messages=user("hi"))
    assert reply["attempts"] == [{"provider": "openai", "error": "circuit_open"}]
    assert (len(openai_stub.seen), len(anthropic_stub.seen)) == (3, 4)


async def test_a_hanging_server_times_out_and_fails_over(
    make_node: Any, servers: Any, clock: RecordingClock
) -> None:
    openai_stub, anthropic_stub, _ = servers
    node = await wire_node(make_node, servers)
    openai_stub.reply(Reply(json=openai_reply("warm")), Reply(hang=True))
    anthropic_stub.reply(Reply(json=anthropic_reply({"type": "text", "text": "claude here"})))
    await ask(node, "completion", messages=user("warm up"))  # the client is built: no I/O before the call
    task = asyncio.ensure_future(ask(node, "completion", messages=user("hi")))
    await settle()
    await clock.advance(5)  # openai's timeout, on the node's clock
    reply = await task
    assert (reply["provider"], reply["response"]["content"]) == ("claude", "claude here")
    assert reply["attempts"] == [{"provider": "openai", "error": "timeout"}]


# -- credentials ------------------------------------------------------------------------------------------


async def test_the_api_key_never_leaks(make_node: Any, servers: Any, tmp_path: Path) -> None:
    openai_stub, anthropic_stub, _ = servers
    node = await wire_node(make_node, servers)
    echo = f"Incorrect API key provided: {FAKE_KEY}. You can find your API key at https://example.invalid."
    openai_stub.reply(Reply(status=401, json={"error": {"message": echo, "type": "invalid_request_error"}}))
    anthropic_stub.reply(Reply(status=401, json=api_error(f"invalid x-api-key {FAKE_KEY}-anthropic")))

    with pytest.raises(ActorError) as caught:
        await ask(node, "completion", messages=user("hi"))
    error = caught.value
    assert error.code == "llm_unavailable"
    assert error.message == "no LLM provider could answer (openai: auth; claude: auth)"
    assert error.__cause__ is None and error.__context__ is None
    # The key did go out, in the header, so this is the error path of a real call.
    assert openai_stub.seen[0].headers["authorization"] == f"Bearer {FAKE_KEY}"

    replies = [
        await ask(node, "register_credential", phantom_token="spare", api_key=FAKE_KEY),
        await ask(node, "list_providers"),
        await ask(node, "get_stats"),
        await ask(node, "get_circuit"),
    ]
    assert replies[0] == {"status": "ok", "phantom_token": "spare", "replaced": False}
    trail = await audit_trail(node, ACME, GLOBEX)
    texts = all_text(error, error.to_dict(), "".join(traceback.format_exception(error)), replies, trail)
    texts += json.dumps(node.metrics.snapshot())
    assert FAKE_KEY not in texts
    assert {e["event_type"] for e in trail} >= {
        "credential_registered",
        "provider_registered",
        "failover_set",
    }
    # Encrypted at rest: the raw database (and its WAL) never holds the plaintext.
    data_dir = tmp_path / "data"
    assert FAKE_KEY.encode() not in db_bytes(data_dir)
    await node.stop()
    assert FAKE_KEY.encode() not in db_bytes(data_dir)


async def test_re_registering_a_credential_rebuilds_the_client_with_the_new_key(
    make_node: Any, servers: Any
) -> None:
    openai_stub, _, _ = servers
    node = await wire_node(make_node, servers)
    openai_stub.reply(Reply(json=openai_reply("one")), Reply(json=openai_reply("two")))
    await ask(node, "completion", messages=user("hi"))
    reply = await ask(node, "register_credential", phantom_token="openai-prod", api_key=FAKE_KEY + "-rotated")
    assert reply["replaced"] is True
    await ask(node, "completion", messages=user("hi"))
    assert [s.headers["authorization"] for s in openai_stub.seen] == [
        f"Bearer {FAKE_KEY}",
        f"Bearer {FAKE_KEY}-rotated",
    ]


class DictKV:
    """The three KV calls the vault makes, on a dict."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    async def get(self, key: str) -> Any:
        return self.data.get(key)

    async def put(self, key: str, value: Any, ttl: float | None = None) -> int:
        self.data[key] = value
        return 1

    async def cas(
        self, key: str, expected_version: int | None, value: Any, ttl: float | None = None
    ) -> int | None:
        if expected_version is None and key in self.data:
            return None
        self.data[key] = value
        return 1


async def test_the_vault_binds_ciphertexts_to_their_tenant_and_key() -> None:
    material = "m" * 44
    acme_kv, globex_kv = DictKV(), DictKV()
    await CredentialVault(acme_kv, "acme", material).put("tok", FAKE_KEY)
    assert FAKE_KEY not in json.dumps(acme_kv.data)
    resolved = await CredentialVault(acme_kv, "acme", material).resolve("tok")
    assert resolved is not None and resolved.get_secret_value() == FAKE_KEY
    assert FAKE_KEY not in repr(resolved)
    globex_kv.data.update(acme_kv.data)  # the rows copied into another tenant do not decrypt there
    assert await CredentialVault(globex_kv, "globex", material).resolve("tok") is None
    assert await CredentialVault(acme_kv, "acme", "x" * 44).resolve("tok") is None  # another key file
    assert await CredentialVault(acme_kv, "acme", material).resolve("unknown") is None
    with pytest.raises(ConfigError):
        CredentialVault(acme_kv, "acme", "short")


async def test_without_a_key_file_the_vault_keeps_a_generated_key_and_migrates_to_one_later() -> None:
    kv = DictKV()
    await CredentialVault(kv, "acme").put("old", FAKE_KEY)
    assert "vault/master" in kv.data
    resolved = await CredentialVault(kv, "acme").resolve("old")  # a new activation finds the same key
    assert resolved is not None and resolved.get_secret_value() == FAKE_KEY
    with_file = CredentialVault(kv, "acme", "k" * 44)
    old = await with_file.resolve("old")  # still readable once a key file is configured
    assert old is not None and old.get_secret_value() == FAKE_KEY
    await with_file.put("new", FAKE_KEY)
    del kv.data["vault/master"]  # new entries need only the key file
    new = await CredentialVault(kv, "acme", "k" * 44).resolve("new")
    assert new is not None and new.get_secret_value() == FAKE_KEY


# -- SIGKILL ----------------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_active_provider_circuit_usage_and_credentials_survive_sigkill(
    make_node: Any, tmp_path: Path
) -> None:
    data = tmp_path / "killed"
    root = REPO_ROOT
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.agent.test_llm_gateway_support",
        "sigkill",
        str(data),
        cwd=root,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
    assert line.strip() == b"ready"
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()

    node = await make_node(tree(max_retries=0, tick_interval=3600), data_dir=data, use_clock=SystemClock())
    stats = await ask(node, "get_stats", session_id="s0", user_id="bob")
    assert stats["active"] == {"provider": "steady", "model": "sim-3"}
    assert stats["failover"] == ["steady"]
    assert (
        stats["circuits"]["flaky"]["state"] == "open"
        and stats["circuits"]["flaky"]["consecutive_failures"] == 3
    )
    assert stats["usage"]["calls"] == 3 and stats["usage_by"]["user"]["calls"] == 3
    assert stats["usage_by"]["session"]["calls"] == 1
    assert stats["providers"]["flaky"]["failures"] == 3
    providers = {p["name"]: p for p in (await ask(node, "list_providers"))["providers"]}
    assert providers["flaky"]["credential"] == "flaky-key" and providers["flaky"]["circuit"] == "open"
    reply = await ask(node, "completion", messages=user("hi"))
    assert (reply["provider"], reply["model"]) == ("steady", "sim-3")
    assert FAKE_KEY.encode() not in db_bytes(data)
