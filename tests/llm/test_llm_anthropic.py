"""The Anthropic adapter against a real local server speaking the Messages API."""

from __future__ import annotations

import json
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
from minihermes.llm._anthropic import AnthropicProvider

from .support import FAKE_KEY, Reply, StubServer, assert_key_absent, closed_port_url, sse, tool

EPHEMERAL = {"type": "ephemeral"}


def provider(url: str, **overrides: Any) -> AnthropicProvider:
    config = ProviderConfig(
        model="claude-test",
        base_url=url,
        api_key=FAKE_KEY,
        timeout=overrides.pop("timeout", 5.0),
        **overrides,
    )
    made = create_provider("anthropic", config)
    assert isinstance(made, AnthropicProvider)
    return made


def conversation(cache_prefix: int = 0) -> CompletionRequest:
    return CompletionRequest(
        messages=[
            {"role": "system", "content": "You are MiniHermes."},
            {"role": "system", "content": "## Relevant Skills\n1. calculator"},
            {"role": "user", "content": "calculate 6 * 7 and read a.txt"},
            {
                "role": "assistant",
                "content": "Let me use calculator, read_file.",
                "tool_calls": [
                    {"id": "toolu_1", "name": "calculator", "input": {"expression": "6 * 7"}},
                    {"id": "toolu_2", "name": "read_file", "input": {"path": "a.txt"}},
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": '{"result": "42"}'},
            {"role": "tool", "tool_call_id": "toolu_2", "content": "no such file", "is_error": True},
            {"role": "user", "content": "and now?"},
        ],
        tools=[tool("calculator", "expression"), tool("read_file", "path")],
        max_tokens=300,
        temperature=0.0,
        cache_prefix_messages=cache_prefix,
    )


def message(content: list[dict[str, Any]], stop: str = "end_turn", **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-2026",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 7, **usage},
    }


async def test_request_maps_system_tool_blocks_and_cache_breakpoints(stub: StubServer) -> None:
    stub.reply(Reply(json=message([{"type": "text", "text": "42."}])))
    async with provider(stub.base_url) as llm:
        await llm.complete(conversation(cache_prefix=4))

    seen = stub.last
    assert (seen.method, seen.path) == ("POST", "/v1/messages")
    assert FAKE_KEY in (
        seen.headers.get("x-api-key", ""),
        seen.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert "anthropic-version" in seen.headers
    body = seen.json()
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("claude-test", 300, 0.0)
    assert body["system"] == [
        {"type": "text", "text": "You are MiniHermes."},
        {"type": "text", "text": "## Relevant Skills\n1. calculator", "cache_control": EPHEMERAL},
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "calculate 6 * 7 and read a.txt"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me use calculator, read_file."},
                {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {"expression": "6 * 7"}},
                # Message 3 ends the stable prefix (cache_prefix_messages=4): its last block is a breakpoint.
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "read_file",
                    "input": {"path": "a.txt"},
                    "cache_control": EPHEMERAL,
                },
            ],
        },
        {
            # Consecutive tool results, and the user text after them, form one user turn.
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"result": "42"}'},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "no such file",
                    "is_error": True,
                },
                {"type": "text", "text": "and now?"},
            ],
        },
    ]
    assert [t["name"] for t in body["tools"]] == ["calculator", "read_file"]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1] == {
        "name": "read_file",
        "description": "The read_file tool.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        "cache_control": EPHEMERAL,
    }


async def test_prompt_caching_can_be_turned_off(stub: StubServer) -> None:
    stub.reply(Reply(json=message([{"type": "text", "text": "ok"}])))
    async with provider(stub.base_url, options={"prompt_caching": False}) as llm:
        await llm.complete(conversation(cache_prefix=4))
    assert "cache_control" not in stub.last.body.decode()


async def test_text_and_cache_usage_are_normalized(stub: StubServer) -> None:
    reply = message(
        [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "6 x 7 = 42."}],
        cache_read_input_tokens=900,
        cache_creation_input_tokens=100,
    )
    stub.reply(Reply(json=reply))
    async with provider(stub.base_url) as llm:
        completion = await llm.complete(conversation())

    assert completion.content == "6 x 7 = 42."
    assert completion.stop_reason == "end_turn"
    # Anthropic's input_tokens excludes the cache; the normalized count is the whole prompt.
    assert completion.usage.model_dump() == {
        "input_tokens": 1020,
        "output_tokens": 7,
        "cached_tokens": 900,
        "cache_write_tokens": 100,
    }
    assert (completion.provider, completion.model) == ("anthropic", "claude-test-2026")


async def test_tool_use_blocks_become_tool_calls(stub: StubServer) -> None:
    content = [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_9", "name": "calculator", "input": {"expression": "1 + 1"}},
    ]
    stub.reply(Reply(json=message(content, stop="tool_use")))
    async with provider(stub.base_url) as llm:
        completion = await llm.complete(conversation())
    assert completion.stop_reason == "tool_use"
    assert completion.content == "Checking."
    assert [(c.id, c.name, c.input) for c in completion.tool_calls] == [
        ("toolu_9", "calculator", {"expression": "1 + 1"})
    ]


async def test_tool_use_input_that_is_not_an_object_is_bad_response(stub: StubServer) -> None:
    content = [{"type": "tool_use", "id": "toolu_9", "name": "calculator", "input": "1 + 1"}]
    stub.reply(Reply(json=message(content, stop="tool_use")))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind is ErrorKind.BAD_RESPONSE


def stream_events(*middle: tuple[str, Any], stop: str = "tool_use") -> list[bytes]:
    start = message([], stop="", cache_read_input_tokens=64)
    start["stop_reason"] = None
    return sse(
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
        *middle,
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 31},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    )


def block_delta(index: int, delta: dict[str, Any]) -> tuple[str, Any]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


async def test_stream_assembles_text_and_tool_use(stub: StubServer) -> None:
    events = stream_events(
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        block_delta(0, {"type": "text_delta", "text": "Let me "}),
        block_delta(0, {"type": "text_delta", "text": "check."}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_5", "name": "calculator", "input": {}},
            },
        ),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"expression"'}),
        block_delta(1, {"type": "input_json_delta", "partial_json": ': "6 * 7"}'}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    )
    stub.reply(Reply(chunks=events, content_type="text/event-stream"))
    async with provider(stub.base_url) as llm:
        received = [event async for event in llm.stream(conversation())]

    assert stub.last.json()["stream"] is True
    assert [e.text for e in received if isinstance(e, TextDelta)] == ["Let me ", "check."]
    assert [(e.index, e.id, e.name) for e in received if isinstance(e, ToolCallStart)] == [
        (1, "toolu_5", "calculator")
    ]
    assert [e.arguments for e in received if isinstance(e, ToolCallDelta)] == ['{"expression"', ': "6 * 7"}']
    ends = [e for e in received if isinstance(e, ToolCallEnd)]
    assert [(e.index, e.tool_call.input) for e in ends] == [(1, {"expression": "6 * 7"})]
    done = received[-1]
    assert isinstance(done, Done)
    completion = done.completion
    assert (completion.content, completion.stop_reason) == ("Let me check.", "tool_use")
    assert completion.tool_calls == [ends[0].tool_call]
    assert completion.usage.model_dump() == {
        "input_tokens": 84,
        "output_tokens": 31,
        "cached_tokens": 64,
        "cache_write_tokens": 0,
    }


async def test_stream_with_invalid_tool_json_is_bad_response(stub: StubServer) -> None:
    events = stream_events(
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_5", "name": "calculator", "input": {}},
            },
        ),
        block_delta(0, {"type": "input_json_delta", "partial_json": '{"expression": 6 *'}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    )
    stub.reply(Reply(chunks=events, content_type="text/event-stream"))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await collect_stream(llm.stream(conversation()))
    assert caught.value.kind is ErrorKind.BAD_RESPONSE


async def test_overloaded_error_event_mid_stream_is_unavailable(stub: StubServer) -> None:
    start = message([])
    start["stop_reason"] = None
    events = sse(
        ("message_start", {"type": "message_start", "message": start}),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    stub.reply(Reply(chunks=events, content_type="text/event-stream"))
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await collect_stream(llm.stream(conversation()))
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert_key_absent(caught.value)


def api_error(kind: str, text: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": text}}


@pytest.mark.parametrize(
    ("reply", "kind", "retry_after"),
    [
        (
            Reply(status=429, json=api_error("rate_limit_error", "slow"), headers={"retry-after": "12"}),
            "rate_limited",
            12.0,
        ),
        (Reply(status=529, json=api_error("overloaded_error", "Overloaded")), "unavailable", None),
        (Reply(status=500, json=api_error("api_error", "boom")), "unavailable", None),
        (
            Reply(status=503, json=api_error("api_error", "down"), headers={"retry-after": "3"}),
            "unavailable",
            3.0,
        ),
        (
            Reply(status=401, json=api_error("authentication_error", f"invalid x-api-key {FAKE_KEY}")),
            "auth",
            None,
        ),
        (Reply(status=400, json=api_error("invalid_request_error", "messages: bad")), "bad_request", None),
        (Reply(body=b"{oops", content_type="application/json"), "bad_response", None),
    ],
)
async def test_http_failures_map_to_error_kinds(
    stub: StubServer, reply: Reply, kind: str, retry_after: float | None
) -> None:
    stub.reply(reply)
    async with provider(stub.base_url) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind == kind
    assert caught.value.retry_after == retry_after
    assert_key_absent(caught.value)
    assert len(stub.seen) == 1


async def test_a_hanging_server_times_out_in_complete_and_stream(stub: StubServer) -> None:
    stub.reply(Reply(hang=True), Reply(hang=True))
    async with provider(stub.base_url, timeout=0.3) as llm:
        with pytest.raises(ProviderError) as first:
            await llm.complete(conversation())
        with pytest.raises(ProviderError) as second:
            await collect_stream(llm.stream(conversation()))
    assert first.value.kind is ErrorKind.TIMEOUT
    assert second.value.kind is ErrorKind.TIMEOUT
    assert_key_absent(first.value)


async def test_connection_refused_is_unavailable() -> None:
    async with provider(closed_port_url()) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.complete(conversation())
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert_key_absent(caught.value)


async def test_a_per_turn_system_block_after_the_stable_prefix_is_not_cached(stub: StubServer) -> None:
    """The agent sends [stable prefix, per-turn section, *history] with cache_prefix_messages=1: the
    breakpoint must sit on the stable block, or the cache would change every turn."""
    stub.reply(Reply(json=message([{"type": "text", "text": "42."}])))
    async with provider(stub.base_url) as llm:
        await llm.complete(conversation(cache_prefix=1))
    body = stub.last.json()
    assert body["system"] == [
        {"type": "text", "text": "You are MiniHermes.", "cache_control": EPHEMERAL},
        {"type": "text", "text": "## Relevant Skills\n1. calculator"},
    ]
    assert "cache_control" not in json.dumps(body["messages"])
