"""The native Ollama adapter against a real local server speaking /api/chat (JSON and NDJSON)."""

from __future__ import annotations

from typing import Any

import pytest

from minihermes.llm import (
    CompletionRequest,
    Done,
    ErrorKind,
    ProviderConfig,
    ProviderError,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
    collect_stream,
    create_provider,
)
from minihermes.llm._ollama import OllamaProvider

from .support import FAKE_KEY, Reply, StubServer, assert_key_absent, closed_port_url, ndjson, tool


def provider(url: str, **overrides: Any) -> OllamaProvider:
    config = ProviderConfig(
        model="llama3.2", base_url=url, timeout=overrides.pop("timeout", 5.0), **overrides
    )
    made = create_provider("ollama", config)
    assert isinstance(made, OllamaProvider)
    return made


def conversation() -> CompletionRequest:
    return CompletionRequest(
        messages=[
            {"role": "system", "content": "You are MiniHermes."},
            {"role": "user", "content": "what is 6 * 7?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call_a", "name": "calculator", "input": {"expression": "6 * 7"}}],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": '{"result": "42"}'},
        ],
        tools=[tool("calculator", "expression")],
        max_tokens=128,
        temperature=0.5,
    )


def chat(message: dict[str, Any], done_reason: str = "stop") -> dict[str, Any]:
    return {
        "model": "llama3.2:latest",
        "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": "", **message},
        "done": True,
        "done_reason": done_reason,
        "prompt_eval_count": 61,
        "eval_count": 12,
    }


async def test_request_body_maps_messages_tools_and_options(stub: StubServer) -> None:
    stub.reply(Reply(json=chat({"content": "42"})))
    async with provider(stub.base_url, api_key=FAKE_KEY, options={"keep_alive": "10m"}) as llm:
        await llm.complete(conversation())

    seen = stub.last
    assert (seen.method, seen.path) == ("POST", "/api/chat")
    assert seen.headers["authorization"] == f"Bearer {FAKE_KEY}"
    body = seen.json()
    assert body["model"] == "llama3.2"
    assert body["stream"] is False
    assert body["keep_alive"] == "10m"
    assert body["options"] == {"num_predict": 128, "temperature": 0.5}
    assert body["messages"] == [
        {"role": "system", "content": "You are MiniHermes."},
        {"role": "user", "content": "what is 6 * 7?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}],
        },
        {"role": "tool", "content": '{"result": "42"}', "tool_name": "calculator"},
    ]
    assert body["tools"][0]["type"] == "function"
    assert body["tools"][0]["function"]["name"] == "calculator"
    assert body["tools"][0]["function"]["parameters"]["required"] == ["expression"]


async def test_no_key_means_no_authorization_header(stub: StubServer) -> None:
    stub.reply(Reply(json=chat({"content": "hi"})))
    async with provider(stub.base_url) as llm:
        await llm.complete(conversation())
    assert "authorization" not in stub.last.headers


async def test_text_and_usage_are_normalized(stub: StubServer) -> None:
    stub.reply(Reply(json=chat({"content": "6 x 7 = 42."})), Reply(json=chat({"content": "6 x"}, "length")))
    async with provider(stub.base_url) as llm:
        completion = await llm.complete(conversation())
        truncated = await llm.complete(conversation())

    assert completion.content == "6 x 7 = 42."
    assert completion.stop_reason == "end_turn"
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (61, 12)
    assert (completion.provider, completion.model) == ("ollama", "llama3.2:latest")
    assert truncated.stop_reason == "max_tokens"


async def test_tool_calls_get_stable_distinct_ids(stub: StubServer) -> None:
    calls = [
        {"function": {"name": "calculator", "arguments": {"expression": "1 + 1"}}},
        {"function": {"name": "calculator", "arguments": '{"expression": "2 + 2"}'}},
    ]
    stub.reply(Reply(json=chat({"tool_calls": calls})), Reply(json=chat({"tool_calls": calls})))
    async with provider(stub.base_url) as llm:
        first = await llm.complete(conversation())
        again = await llm.complete(conversation())

    assert first.stop_reason == "tool_use"
    assert [c.input for c in first.tool_calls] == [{"expression": "1 + 1"}, {"expression": "2 + 2"}]
    ids = [c.id for c in first.tool_calls]
    assert len(set(ids)) == 2
    assert all(i.startswith("call_") for i in ids)
    assert [c.id for c in again.tool_calls] == ids


async def test_tool_arguments_that_are_not_an_object_are_bad_response(stub: StubServer) -> None:
    stub.reply(Reply(json=chat({"tool_calls": [{"function": {"name": "calculator", "arguments": [1, 2]}}]})))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind is ErrorKind.BAD_RESPONSE


async def test_ndjson_stream_is_assembled(stub: StubServer) -> None:
    def part(content: str = "", **message: Any) -> dict[str, Any]:
        return {
            "model": "llama3.2",
            "message": {"role": "assistant", "content": content, **message},
            "done": False,
        }

    lines = ndjson(
        part("Let "),
        part("me check."),
        part(tool_calls=[{"function": {"name": "calculator", "arguments": {"expression": "6 * 7"}}}]),
        {**chat({}, "stop"), "prompt_eval_count": 40, "eval_count": 9},
    )
    stub.reply(Reply(chunks=lines, content_type="application/x-ndjson"))
    async with provider(stub.base_url) as llm:
        received = [event async for event in llm.stream(conversation())]

    assert stub.last.json()["stream"] is True
    assert [e.text for e in received if isinstance(e, TextDelta)] == ["Let ", "me check."]
    starts = [e for e in received if isinstance(e, ToolCallStart)]
    ends = [e for e in received if isinstance(e, ToolCallEnd)]
    assert [(s.index, s.name) for s in starts] == [(0, "calculator")]
    assert ends[0].tool_call.input == {"expression": "6 * 7"}
    done = received[-1]
    assert isinstance(done, Done)
    assert done.completion.content == "Let me check."
    assert done.completion.stop_reason == "tool_use"
    assert done.completion.tool_calls == [ends[0].tool_call]
    assert (done.completion.usage.input_tokens, done.completion.usage.output_tokens) == (40, 9)


@pytest.mark.parametrize(
    ("lines", "kind"),
    [
        (
            ndjson({"message": {"content": "Hel"}, "done": False}, {"error": "model runner has crashed"}),
            "unavailable",
        ),
        (ndjson({"message": {"content": "Hel"}, "done": False}), "bad_response"),
        ([b'{"message": {"content": "Hel"}, "done": false}\n', b"{not json\n"], "bad_response"),
    ],
)
async def test_broken_streams_raise(stub: StubServer, lines: list[bytes], kind: str) -> None:
    stub.reply(Reply(chunks=lines, content_type="application/x-ndjson"))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await collect_stream(llm.stream(conversation()))
    assert caught.value.kind == kind


@pytest.mark.parametrize(
    ("reply", "kind", "retry_after"),
    [
        (
            Reply(status=429, json={"error": "too many requests"}, headers={"Retry-After": "4"}),
            "rate_limited",
            4.0,
        ),
        (Reply(status=500, json={"error": "llama runner process has terminated"}), "unavailable", None),
        (Reply(status=503, json={"error": "server busy"}), "unavailable", None),
        (Reply(status=404, json={"error": "model 'llama9' not found"}), "bad_request", None),
        (Reply(status=401, json={"error": f"bad token {FAKE_KEY}"}), "auth", None),
        (Reply(body=b"{nope", content_type="application/json"), "bad_response", None),
        (Reply(json={"done": True}), "bad_response", None),
    ],
)
async def test_http_failures_map_to_error_kinds(
    stub: StubServer, reply: Reply, kind: str, retry_after: float | None
) -> None:
    stub.reply(reply)
    async with provider(stub.base_url, api_key=FAKE_KEY) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind == kind
    assert caught.value.retry_after == retry_after
    assert_key_absent(caught.value)


async def test_http_failure_before_a_stream_starts(stub: StubServer) -> None:
    stub.reply(Reply(status=503, json={"error": "server busy"}, headers={"retry-after": "2"}))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await collect_stream(llm.stream(conversation()))
    assert (caught.value.kind, caught.value.retry_after, caught.value.status_code) == (
        "unavailable",
        2.0,
        503,
    )


async def test_a_hanging_server_times_out(stub: StubServer) -> None:
    stub.reply(Reply(hang=True))
    async with provider(stub.base_url, api_key=FAKE_KEY, timeout=0.3) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert_key_absent(caught.value)


async def test_connection_refused_is_unavailable() -> None:
    async with provider(closed_port_url(), api_key=FAKE_KEY) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert_key_absent(caught.value)
