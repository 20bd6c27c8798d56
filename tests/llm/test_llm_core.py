"""The neutral types, the registry, the error helpers and the scripted provider."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from minihermes.llm import (
    Completion,
    CompletionRequest,
    Done,
    ErrorKind,
    Message,
    Provider,
    ProviderConfig,
    ProviderError,
    RateLimitedError,
    ScriptedProvider,
    ScriptExhaustedError,
    StreamEvent,
    TextDelta,
    UnknownProviderError,
    collect_stream,
    create_provider,
    parse_retry_after,
    provider_kinds,
    register_provider,
)
from minihermes.llm._errors import error_for, redact

from .support import FAKE_KEY, assert_key_absent


def test_messages_accept_the_agent_transcript_shape() -> None:
    tool_result = Message.model_validate({"role": "tool", "tool_call_id": "c1", "content": {"result": "714"}})
    assert tool_result.content == '{"result": "714"}'
    assistant = Message.model_validate({"role": "assistant", "content": None, "stop_reason": "end_turn"})
    assert assistant.content == ""


def test_messages_reject_inconsistent_roles() -> None:
    with pytest.raises(ValidationError, match="tool_call_id"):
        Message(role="tool", content="x")
    with pytest.raises(ValidationError, match="only assistant"):
        Message.model_validate({"role": "user", "tool_calls": [{"id": "a", "name": "b"}]})


def test_completion_round_trips_as_the_seed_dict() -> None:
    completion = Completion(content="42 x 17 = 714", provider="simulated", model="simulated")
    dumped = completion.model_dump()
    assert {k: dumped[k] for k in ("content", "stop_reason", "tool_calls")} == {
        "content": "42 x 17 = 714",
        "stop_reason": "end_turn",
        "tool_calls": [],
    }
    assert Completion.model_validate(dumped) == completion


def test_unknown_kind_suggests_the_closest_name() -> None:
    with pytest.raises(UnknownProviderError) as caught:
        create_provider("opeanai")
    message = str(caught.value)
    assert "did you mean 'openai'?" in message
    for kind in ("anthropic", "ollama", "openai", "scripted", "simulated"):
        assert kind in message
    with pytest.raises(UnknownProviderError, match="Known kinds") as far:
        create_provider("gemini-pro-max")
    assert "did you mean" not in str(far.value)


def test_register_a_provider_kind() -> None:
    class Echo(ScriptedProvider):
        kind = "echo"

    register_provider(
        "echo-test", lambda config: Echo(lambda request: {"content": request.messages[-1].content})
    )
    assert "echo-test" in provider_kinds()
    assert isinstance(create_provider("echo-test"), Echo)
    with pytest.raises(ValueError, match="already registered"):
        register_provider("echo-test", lambda config: Echo([]))


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama", "simulated", "scripted"])
async def test_every_builtin_kind_constructs_offline_and_hides_its_key(kind: str) -> None:
    config = ProviderConfig(model="m", api_key=FAKE_KEY, base_url="http://127.0.0.1:9")
    async with create_provider(kind, config) as provider:
        assert isinstance(provider, Provider)
        assert provider.kind == kind
        assert FAKE_KEY not in repr(provider)
    assert FAKE_KEY not in repr(config)
    assert FAKE_KEY not in config.model_dump_json()
    assert config.secret() == FAKE_KEY


def test_importing_the_package_does_not_import_the_sdks() -> None:
    code = "import sys, minihermes.llm; print('openai' in sys.modules, 'anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_retry_after_headers() -> None:
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412490.0) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_errors_redact_the_key_and_serialize() -> None:
    error = error_for(
        ErrorKind.RATE_LIMITED,
        f"key {FAKE_KEY} is over quota",
        provider="openai",
        secret=FAKE_KEY,
        status_code=429,
        retry_after=2.0,
    )
    assert isinstance(error, RateLimitedError)
    assert error.retryable
    assert error.to_dict() == {
        "code": "rate_limited",
        "message": "key [REDACTED] is over quota",
        "provider": "openai",
        "status_code": 429,
        "retry_after": 2.0,
    }
    assert str(error) == "openai: rate_limited (HTTP 429): key [REDACTED] is over quota"
    rebuilt = ProviderError.from_dict(error.to_dict())
    assert type(rebuilt) is RateLimitedError
    assert rebuilt.to_dict() == error.to_dict()
    assert_key_absent(error)
    assert not error_for(ErrorKind.AUTH, "no", provider="x", secret=None).retryable
    assert len(redact("x" * 5000, None)) < 600


async def test_scripted_provider_replays_records_and_runs_out() -> None:
    script = [
        {"content": "", "tool_calls": [{"name": "calculator", "input": {"expression": "1+1"}}]},
        RateLimitedError("slow down", provider="scripted", retry_after=1.0),
        Completion(content="2"),
    ]
    provider = ScriptedProvider(script)
    request = CompletionRequest(messages=[{"role": "user", "content": "1+1?"}])

    first = await provider.complete(request)
    assert first.stop_reason == "tool_use"
    assert first.tool_calls[0].id == "call_1_0"
    assert first.usage.input_tokens > 0
    with pytest.raises(RateLimitedError):
        await provider.complete(request)
    assert (await provider.complete(request)).content == "2"
    assert provider.remaining == 0
    with pytest.raises(
        ScriptExhaustedError, match=r"3 responses but got call #4; its last message was '1\+1\?'"
    ):
        await provider.complete(request)
    assert len(provider.requests) == 4


async def test_scripted_provider_from_a_function_and_from_the_registry() -> None:
    echo = ScriptedProvider(lambda request: {"content": request.messages[-1].content.upper()})
    request = CompletionRequest(messages=[{"role": "user", "content": "hi"}])
    assert (await echo.complete(request)).content == "HI"

    configured = create_provider(
        "scripted", ProviderConfig(name="fake", options={"script": [{"content": "ok"}]})
    )
    completion = await configured.complete(request)
    assert (completion.content, completion.provider) == ("ok", "fake")


async def test_scripted_stream_and_collect() -> None:
    provider = ScriptedProvider([{"content": "one two three"}])
    events: list[StreamEvent] = [e async for e in provider.stream(CompletionRequest(messages=[]))]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["one ", "two ", "three"]
    assert isinstance(events[-1], Done)

    async def no_done():  # type: ignore[no-untyped-def]
        yield TextDelta(text="partial")

    with pytest.raises(Exception, match="without a final event"):
        await collect_stream(no_done())
