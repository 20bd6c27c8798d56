"""The OpenAI-compatible adapter against a real local server speaking Chat Completions."""

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
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    collect_stream,
    create_provider,
)
from minihermes.llm._openai import OpenAIProvider

from .support import FAKE_KEY, Reply, StubServer, assert_key_absent, closed_port_url, sse, tool


def provider(stub_url: str, **overrides: Any) -> OpenAIProvider:
    config = ProviderConfig(
        model="gpt-test",
        base_url=stub_url + "/v1",
        api_key=FAKE_KEY,
        timeout=overrides.pop("timeout", 5.0),
        extra_headers={"X-Title": "minihermes"},
        **overrides,
    )
    made = create_provider("openai", config)
    assert isinstance(made, OpenAIProvider)
    return made


def conversation() -> CompletionRequest:
    return CompletionRequest(
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "calculate 42 * 17"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call_1", "name": "calculator", "input": {"expression": "42 * 17"}}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": {"result": "714"}},
        ],
        tools=[tool("calculator", "expression")],
        max_tokens=256,
        temperature=0.2,
    )


def chat_completion(
    message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = None
) -> Any:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test-2026",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": usage
        or {
            "prompt_tokens": 120,
            "completion_tokens": 9,
            "total_tokens": 129,
            "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 4},
        },
    }


async def test_request_body_maps_messages_tools_and_settings(stub: StubServer) -> None:
    stub.reply(Reply(json=chat_completion({"content": "42 x 17 = 714"})))
    async with provider(stub.base_url) as llm:
        await llm.complete(conversation())

    seen = stub.last
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert seen.headers["x-title"] == "minihermes"
    assert seen.headers["x-stainless-retry-count"] == "0"
    body = seen.json()
    assert body["model"] == "gpt-test"
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.2
    assert "stream" not in body or body["stream"] is False
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "calculate 42 * 17"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "42 * 17"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"result": "714"}'},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "calculator",
                "description": "The calculator tool.",
                "parameters": {
                    "type": "object",
                    "properties": {"expression": {"type": "string"}},
                    "required": ["expression"],
                },
            },
        }
    ]


async def test_text_completion_is_normalized_with_cached_tokens(stub: StubServer) -> None:
    stub.reply(Reply(json=chat_completion({"content": "42 x 17 = 714"})))
    async with provider(stub.base_url, name="openrouter") as llm:
        completion = await llm.complete(conversation())

    assert completion.content == "42 x 17 = 714"
    assert completion.stop_reason == "end_turn"
    assert completion.tool_calls == []
    assert completion.usage.model_dump() == {
        "input_tokens": 120,
        "output_tokens": 9,
        "cached_tokens": 100,
        "cache_write_tokens": 4,
    }
    assert (completion.provider, completion.model) == ("openrouter", "gpt-test-2026")


async def test_tool_calls_are_parsed_from_json_arguments(stub: StubServer) -> None:
    message = {
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression":"2+2"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "list_files", "arguments": ""}},
        ],
    }
    stub.reply(Reply(json=chat_completion(message, finish="tool_calls")))
    async with provider(stub.base_url) as llm:
        completion = await llm.complete(conversation())

    assert completion.stop_reason == "tool_use"
    assert [(c.id, c.name, c.input) for c in completion.tool_calls] == [
        ("c1", "calculator", {"expression": "2+2"}),
        ("c2", "list_files", {}),
    ]


async def test_tool_calls_under_finish_reason_stop_still_mean_tool_use(stub: StubServer) -> None:
    # Ollama's and some vLLM versions' /v1 endpoints answer tool calls with finish_reason "stop".
    message = {
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
        ]
    }
    stub.reply(Reply(json=chat_completion(message, finish="stop")))
    async with provider(stub.base_url) as llm:
        completion = await llm.complete(conversation())
    assert completion.stop_reason == "tool_use"


async def test_length_finish_is_max_tokens(stub: StubServer) -> None:
    stub.reply(Reply(json=chat_completion({"content": "42 x 1"}, finish="length")))
    async with provider(stub.base_url) as llm:
        assert (await llm.complete(conversation())).stop_reason == "max_tokens"


@pytest.mark.parametrize("arguments", ['{"expression": "2+', "[1, 2]", '"2+2"'])
async def test_tool_arguments_that_are_not_a_json_object_are_bad_response(
    stub: StubServer, arguments: str
) -> None:
    message = {
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": arguments}}
        ]
    }
    stub.reply(Reply(json=chat_completion(message, finish="tool_calls")))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind is ErrorKind.BAD_RESPONSE
    assert "calculator" in caught.value.message
    assert_key_absent(caught.value)


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test-2026",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def tool_delta(
    index: int, arguments: str, call_id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    part: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        part.update(id=call_id, type="function")
        part["function"]["name"] = name
    return {"tool_calls": [part]}


async def test_stream_assembles_text_and_interleaved_tool_call_deltas(stub: StubServer) -> None:
    usage = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test-2026",
        "choices": [],
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    }
    events = sse(
        (None, chunk({"role": "assistant", "content": ""})),
        (None, chunk({"content": "Let me "})),
        (None, chunk({"content": "check."})),
        (None, chunk(tool_delta(0, "", "c1", "calculator"))),
        (None, chunk(tool_delta(1, '{"pa', "c2", "read_file"))),
        (None, chunk(tool_delta(0, '{"expression": '))),
        (None, chunk(tool_delta(1, 'th": "a.txt"}'))),
        (None, chunk(tool_delta(0, '"6 * 7"}'))),
        (None, chunk({}, finish="tool_calls")),
        (None, usage),
        (None, "[DONE]"),
    )
    stub.reply(Reply(chunks=events, content_type="text/event-stream"))
    async with provider(stub.base_url) as llm:
        received = [event async for event in llm.stream(conversation())]

    body = stub.last.json()
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert [e.text for e in received if isinstance(e, TextDelta)] == ["Let me ", "check."]
    assert [(e.index, e.id, e.name) for e in received if isinstance(e, ToolCallStart)] == [
        (0, "c1", "calculator"),
        (1, "c2", "read_file"),
    ]
    assert "".join(e.arguments for e in received if isinstance(e, ToolCallDelta) and e.index == 0) == (
        '{"expression": "6 * 7"}'
    )
    ends = [e.tool_call for e in received if isinstance(e, ToolCallEnd)]
    assert [(c.name, c.input) for c in ends] == [
        ("calculator", {"expression": "6 * 7"}),
        ("read_file", {"path": "a.txt"}),
    ]
    done = received[-1]
    assert isinstance(done, Done)
    assert done.completion.content == "Let me check."
    assert done.completion.stop_reason == "tool_use"
    assert done.completion.tool_calls == ends
    assert (done.completion.usage.input_tokens, done.completion.usage.cached_tokens) == (50, 32)


async def test_stream_with_broken_tool_arguments_raises_bad_response(stub: StubServer) -> None:
    events = sse(
        (None, chunk(tool_delta(0, '{"expression": "6 *', "c1", "calculator"))),
        (None, chunk({}, finish="tool_calls")),
        (None, "[DONE]"),
    )
    stub.reply(Reply(chunks=events, content_type="text/event-stream"))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await collect_stream(llm.stream(conversation()))
    assert caught.value.kind is ErrorKind.BAD_RESPONSE


async def test_error_event_inside_a_stream_is_unavailable(stub: StubServer) -> None:
    events = sse(
        (None, chunk({"content": "Hel"})),
        (None, {"error": {"message": "upstream provider crashed", "code": 502}}),
    )
    stub.reply(Reply(chunks=events, content_type="text/event-stream"))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await collect_stream(llm.stream(conversation()))
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert "upstream provider crashed" in caught.value.message


@pytest.mark.parametrize(
    ("reply", "kind", "retry_after"),
    [
        (
            Reply(status=429, json={"error": {"message": "slow down"}}, headers={"retry-after": "7"}),
            "rate_limited",
            7.0,
        ),
        (
            Reply(status=429, json={"error": {"message": "slow"}}, headers={"retry-after-ms": "1500"}),
            "rate_limited",
            1.5,
        ),
        (Reply(status=500, json={"error": {"message": "boom"}}), "unavailable", None),
        (Reply(status=503, body=b"<html>down</html>", content_type="text/html"), "unavailable", None),
        (
            Reply(status=401, json={"error": {"message": f"Incorrect API key provided: {FAKE_KEY}"}}),
            "auth",
            None,
        ),
        (Reply(status=403, json={"error": {"message": "not allowed"}}), "auth", None),
        (Reply(status=400, json={"error": {"message": "bad messages"}}), "bad_request", None),
        (Reply(status=404, json={"error": {"message": "no such model"}}), "bad_request", None),
        (Reply(body=b'{"choices": [', content_type="application/json"), "bad_response", None),
        (Reply(json={"object": "chat.completion", "choices": []}), "bad_response", None),
    ],
)
async def test_http_failures_map_to_error_kinds(
    stub: StubServer, reply: Reply, kind: str, retry_after: float | None
) -> None:
    stub.reply(reply)
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    error = caught.value
    assert error.kind == kind
    assert error.retry_after == retry_after
    assert error.provider == "openai"
    assert_key_absent(error)
    assert len(stub.seen) == 1, "the adapter must not retry; the gateway does"


async def test_a_hanging_server_times_out(stub: StubServer) -> None:
    stub.reply(Reply(hang=True))
    async with provider(stub.base_url, timeout=0.3) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert_key_absent(caught.value)


async def test_connection_refused_is_unavailable() -> None:
    async with provider(closed_port_url()) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert_key_absent(caught.value)


async def test_max_completion_tokens_option_and_extra_body(stub: StubServer) -> None:
    stub.reply(Reply(json=chat_completion({"content": "ok"})))
    options = {"max_tokens_param": "max_completion_tokens", "extra_body": {"provider": {"order": ["a"]}}}
    async with provider(stub.base_url, options=options) as llm:
        await llm.complete(conversation())
    body = stub.last.json()
    assert body["max_completion_tokens"] == 256
    assert "max_tokens" not in body
    assert body["provider"] == {"order": ["a"]}


async def test_account_headers_come_from_the_config_not_the_environment(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-from-env")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-from-env")
    stub.reply(Reply(json=chat_completion({"content": "ok"})), Reply(json=chat_completion({"content": "ok"})))
    async with provider(stub.base_url) as llm:
        await llm.complete(conversation())
    assert "openai-organization" not in stub.last.headers
    assert "openai-project" not in stub.last.headers
    async with provider(stub.base_url, options={"organization": "org-1", "project": "proj-1"}) as llm:
        await llm.complete(conversation())
    assert (stub.last.headers["openai-organization"], stub.last.headers["openai-project"]) == (
        "org-1",
        "proj-1",
    )
