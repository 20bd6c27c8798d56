"""llm_gateway ``completion(stream_topic=...)``: text deltas published as the provider streams them, the full
reply still returned, failover only before the first delta, and the simulated provider streaming too."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from minihermes.llm import (
    Completion,
    CompletionRequest,
    Done,
    Provider,
    ProviderConfig,
    StreamEvent,
    TextDelta,
    UnavailableError,
    Usage,
    register_provider,
)
from minihermes.runtime import ActorError, Node

from . import test_llm_gateway_support as support
from .test_llm_gateway_support import ACME, GLOBEX, ask, tree, user

_key_never_logged = support._key_never_logged
_loopback_only = support._loopback_only
clock = support.clock

TOPIC = "session:s1"
SCRIPTS: dict[str, list[Any]] = {}
CALLS: dict[str, int] = {}
_ids = itertools.count(1)


class StreamTestProvider(Provider):
    """Streams a scripted list of text pieces per call; an exception item is raised at that point of the
    stream (after the pieces before it were yielded). ``complete`` is refused: streaming must be used."""

    kind = "streamtest"

    async def complete(self, request: CompletionRequest) -> Completion:
        raise AssertionError("the gateway should have streamed")

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        name = str(self.config.options["script"])
        call = CALLS[name] = CALLS.get(name, 0) + 1
        items = SCRIPTS[name][min(call, len(SCRIPTS[name])) - 1]
        text = ""
        for item in items:
            if isinstance(item, BaseException):
                raise item
            text += item
            yield TextDelta(text=item)
        yield Done(
            completion=Completion(
                content=text,
                stop_reason="end_turn",
                usage=Usage(input_tokens=3, output_tokens=len(items)),
                provider=self.name,
                model="m",
            )
        )


register_provider("streamtest", StreamTestProvider, replace=True)


async def add(node: Node, name: str, *calls: list[Any]) -> str:
    script = f"s{next(_ids)}"
    SCRIPTS[script] = list(calls)
    await ask(node, "register_provider", name=name, kind="streamtest", model="m", options={"script": script})
    return script


def drain(sub: Any) -> list[dict[str, Any]]:
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    return events


async def test_deltas_are_published_and_the_full_reply_returned(make_node: Any) -> None:
    node = await make_node(tree())
    await add(node, "p", ["Hel", "lo ", "world"])
    await ask(node, "switch_provider", provider="p")
    async with node.subscribe(TOPIC, ctx=ACME) as sub, node.subscribe(TOPIC, ctx=GLOBEX) as other:
        reply = await ask(node, "completion", messages=user("hi"), stream_topic=TOPIC)
        assert reply["response"]["content"] == "Hello world"
        assert drain(sub) == [
            {"type": "text_delta", "text": "Hel"},
            {"type": "text_delta", "text": "lo "},
            {"type": "text_delta", "text": "world"},
        ]
        assert drain(other) == []  # topics are per tenant
    assert node.metrics.counter("llm_streamed_calls_total", provider="p") == 1


async def test_without_a_topic_nothing_is_published(make_node: Any) -> None:
    node = await make_node(tree())
    async with node.subscribe(TOPIC, ctx=ACME) as sub:
        reply = await ask(node, "completion", messages=user("hello there"))
        assert reply["provider"] == "simulated" and reply["response"]["content"]
        assert drain(sub) == []


async def test_the_simulated_provider_streams_its_content_in_pieces(make_node: Any) -> None:
    node = await make_node(tree())
    async with node.subscribe(TOPIC, ctx=ACME) as sub:
        reply = await ask(node, "completion", messages=user("hello, who are you?"), stream_topic=TOPIC)
        deltas = drain(sub)
    content = reply["response"]["content"]
    assert len(deltas) > 1
    assert "".join(d["text"] for d in deltas) == content


async def test_failover_before_the_first_delta(make_node: Any) -> None:
    node = await make_node(tree(max_retries=0))  # no backoff sleeps on the manual clock
    await add(node, "primary", [UnavailableError("down", provider="primary", status_code=503)])
    await add(node, "backup", ["from ", "backup"])
    await ask(node, "switch_provider", provider="primary")
    await ask(node, "set_failover", chain=["backup"])
    async with node.subscribe(TOPIC, ctx=ACME) as sub:
        reply = await ask(node, "completion", messages=user("hi"), stream_topic=TOPIC)
        assert reply["provider"] == "backup" and reply["response"]["content"] == "from backup"
        assert [e["text"] for e in drain(sub)] == ["from ", "backup"]


async def test_no_retry_and_no_failover_after_a_delta(make_node: Any) -> None:
    node = await make_node(tree())
    primary = await add(
        node, "primary", ["partial ", UnavailableError("cut", provider="primary", status_code=503)]
    )
    backup = await add(node, "backup", ["never"])
    await ask(node, "switch_provider", provider="primary")
    await ask(node, "set_failover", chain=["backup"])
    async with node.subscribe(TOPIC, ctx=ACME) as sub:
        with pytest.raises(ActorError) as caught:
            await ask(node, "completion", messages=user("hi"), stream_topic=TOPIC)
        assert drain(sub) == [{"type": "text_delta", "text": "partial "}]
    assert caught.value.code == "llm_unavailable"
    assert "mid-stream" in caught.value.message
    assert CALLS[primary] == 1  # an unavailable error is retried on the same provider, but not mid-stream
    assert backup not in CALLS
    assert node.metrics.counter("llm_stream_aborted_total", provider="primary") == 1


async def test_a_bad_topic_is_refused(make_node: Any) -> None:
    node = await make_node(tree())
    with pytest.raises(ActorError) as caught:
        await ask(node, "completion", messages=user("hi"), stream_topic="x" * 300)
    assert caught.value.code == "invalid_argument"


async def test_a_stream_without_a_final_event_is_a_bad_response(make_node: Any) -> None:
    class NoDone(StreamTestProvider):
        kind = "nodone"

        async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
            yield TextDelta(text="")
            return

    register_provider("nodone", NoDone, replace=True)
    node = await make_node(tree(max_retries=0))
    await ask(node, "register_provider", name="nd", kind="nodone", model="m", options={"script": "x"})
    await ask(node, "switch_provider", provider="nd")
    with pytest.raises(ActorError) as caught:
        await ask(node, "completion", messages=user("hi"), stream_topic=TOPIC)
    assert "nd: bad_response" in caught.value.message


def test_provider_config_is_what_the_test_provider_reads() -> None:
    # Guards the test double itself: options reach the provider unchanged.
    provider = StreamTestProvider(ProviderConfig(options={"script": "abc"}))
    assert provider.config.options["script"] == "abc"
