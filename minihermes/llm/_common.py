"""Small helpers every adapter shares: tool-argument parsing, stable ids, token estimates, HTTP client options."""

from __future__ import annotations

import functools
import hashlib
import json
import ssl
from typing import Any

from ._errors import ErrorKind, error_for
from ._types import CompletionRequest, StopReason, ToolCall
from .egress import EgressPolicy, httpx2_transport, httpx_transport


def parse_arguments(raw: str | None, *, tool: str, provider: str, secret: str | None) -> dict[str, Any]:
    """Parse a tool call's JSON arguments into a dict.

    Invalid JSON, or JSON that is not an object, is a ``bad_response`` error rather than a tool call with
    made-up input: the adapter must not invent arguments, and the gateway can retry or fail over, which
    usually fixes a malformed generation. An empty string means "no arguments" (OpenAI-compatible servers
    send it for parameterless tools).
    """
    if raw is None or not raw.strip():
        return {}
    value = loads_or(raw, _INVALID)
    if value is _INVALID:
        raise error_for(
            ErrorKind.BAD_RESPONSE,
            f"tool call {tool!r} has arguments that are not valid JSON: {raw[:200]!r}",
            provider=provider,
            secret=secret,
        )
    return ensure_object(value, tool=tool, provider=provider, secret=secret)


_INVALID = object()


def loads_or(text: str | bytes, default: Any) -> Any:
    """``json.loads``, or ``default`` for invalid JSON.

    Callers raise their ``ProviderError`` outside any ``except`` block this way, so the error does not
    drag the decoder exception (which holds the whole body) along as its ``__context__``.
    """
    try:
        return json.loads(text)
    except ValueError:
        return default


def ensure_object(value: Any, *, tool: str, provider: str, secret: str | None) -> dict[str, Any]:
    """Tool input must be a JSON object; anything else is a ``bad_response``."""
    if not isinstance(value, dict):
        raise error_for(
            ErrorKind.BAD_RESPONSE,
            f"tool call {tool!r} has arguments that are not a JSON object: {json.dumps(value)[:200]}",
            provider=provider,
            secret=secret,
        )
    return value


def stable_call_id(request: CompletionRequest, index: int, name: str, arguments: dict[str, Any]) -> str:
    """A deterministic id for providers whose tool calls have none (Ollama).

    Derived from the conversation length as well as the call, so the same call in a later turn gets a
    different id (Anthropic rejects duplicate tool_use ids in one history), while a retried request gets
    the same ids back.
    """
    payload = json.dumps([len(request.messages), index, name, arguments], sort_keys=True, default=str)
    return "call_" + hashlib.sha256(payload.encode()).hexdigest()[:24]


def settle_stop_reason(stop_reason: StopReason, tool_calls: list[ToolCall]) -> StopReason:
    """Keep the invariant ``stop_reason == "tool_use"`` iff there are tool calls.

    Some OpenAI-compatible servers answer ``finish_reason="stop"`` with tool calls, or ``tool_calls`` with
    none; the agent loop must be able to trust ``stop_reason`` alone.
    """
    if tool_calls:
        return "tool_use"
    if stop_reason == "tool_use":
        return "end_turn"
    return stop_reason


def estimate_tokens(text: str) -> int:
    """A provider-free token estimate (about four characters per token), at least 1 for non-empty text."""
    return (len(text) + 3) // 4


def request_text(request: CompletionRequest, upto: int | None = None) -> str:
    """The text a prompt is made of, for token estimates: messages (the first ``upto``) and tools."""
    parts = [json.dumps([t.model_dump() for t in request.tools], sort_keys=True)] if request.tools else []
    for message in request.messages[:upto]:
        parts.append(message.content)
        parts.extend(json.dumps(c.input, sort_keys=True) + c.name for c in message.tool_calls)
    return "".join(parts)


@functools.cache
def httpx_ssl_context() -> ssl.SSLContext:
    """The default TLS context of ``httpx``, built once per process.

    Building one loads the CA bundle (about 0.1 s). Sharing it keeps provider construction cheap, which
    matters when the gateway swaps providers or builds one client per credential.
    """
    import httpx

    return httpx.create_ssl_context()


@functools.cache
def httpx2_ssl_context() -> ssl.SSLContext:
    """The same for ``httpx2``, the HTTP library of the official SDKs."""
    import httpx2

    return httpx2.create_ssl_context()


def httpx_options(egress: EgressPolicy | None) -> dict[str, Any]:
    """The TLS and transport arguments of an adapter's ``httpx.AsyncClient``: the shared TLS context, and,
    when ``egress`` restricts where the client may connect, a transport that checks every request's address
    (``minihermes.llm.egress``)."""
    if egress is None or egress.allow_all:
        return {"verify": httpx_ssl_context()}
    return {"transport": httpx_transport(egress, verify=httpx_ssl_context())}


def httpx2_options(egress: EgressPolicy | None) -> dict[str, Any]:
    """The same for an official SDK's ``httpx2`` client."""
    if egress is None or egress.allow_all:
        return {"verify": httpx2_ssl_context()}
    return {"transport": httpx2_transport(egress, verify=httpx2_ssl_context())}
