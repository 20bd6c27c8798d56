"""Anthropic Messages through the official ``anthropic`` client.

Differences from the neutral form that this module absorbs: the system prompt is a separate ``system``
parameter; tool calls are ``tool_use`` content blocks and their results ``tool_result`` blocks inside a
user message (consecutive results merged into one); roles must alternate, so adjacent same-role messages
are merged; and prompt caching is explicit, with ``cache_control`` breakpoints on the tools' last entry,
the last system block of the stable prefix and its last message (``cache_prefix_messages``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._common import ensure_object, httpx2_options, settle_stop_reason
from ._errors import ErrorKind, ProviderError, error_for, guarded, kind_for_status, parse_retry_after
from ._provider import Provider, ProviderConfig
from ._streaming import ToolCallAssembler
from ._types import (
    Completion,
    CompletionRequest,
    Done,
    Message,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    import anthropic
    import httpx2
    from anthropic.types import (
        InputJSONDelta,
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawContentBlockStopEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        RawMessageStreamEvent,
        TextBlock,
        ToolUseBlock,
    )
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import TextDelta as SDKTextDelta

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

_STOP: dict[str | None, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    # pause_turn (a server tool paused) has nothing for our loop to do but present what it has.
    "pause_turn": "end_turn",
}

# Error events inside a 200 stream carry only a type, no HTTP status.
_ERROR_TYPES: dict[str, ErrorKind] = {
    "rate_limit_error": ErrorKind.RATE_LIMITED,
    "overloaded_error": ErrorKind.UNAVAILABLE,
    "api_error": ErrorKind.UNAVAILABLE,
    "timeout_error": ErrorKind.TIMEOUT,
    "authentication_error": ErrorKind.AUTH,
    "permission_error": ErrorKind.AUTH,
    "invalid_request_error": ErrorKind.BAD_REQUEST,
    "not_found_error": ErrorKind.BAD_REQUEST,
    "request_too_large": ErrorKind.BAD_REQUEST,
}

T = TypeVar("T")


def _import_sdk() -> None:
    """Bind the SDK's names here: importing it takes seconds, so it waits for the first client (the
    gateway imports ``AnthropicProvider.sdk_modules`` in a worker thread before it builds one)."""
    global anthropic, httpx2, AnthropicMessage, SDKTextDelta, InputJSONDelta, TextBlock, ToolUseBlock
    global RawContentBlockDeltaEvent, RawContentBlockStartEvent, RawContentBlockStopEvent
    global RawMessageDeltaEvent, RawMessageStartEvent
    import anthropic
    import httpx2
    from anthropic.types import (
        InputJSONDelta,
        RawContentBlockDeltaEvent,
        RawContentBlockStartEvent,
        RawContentBlockStopEvent,
        RawMessageDeltaEvent,
        RawMessageStartEvent,
        TextBlock,
        ToolUseBlock,
    )
    from anthropic.types import Message as AnthropicMessage
    from anthropic.types import TextDelta as SDKTextDelta


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
        }
        if message.is_error:
            block["is_error"] = True
        return [block]
    # The API rejects empty text blocks, so an empty message contributes nothing.
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in message.tool_calls
    )
    return blocks


def to_anthropic_messages(
    request: CompletionRequest, *, cache: bool = True
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Neutral messages -> (``system`` blocks, ``messages``), with cache breakpoints when ``cache``.

    Every system message becomes a system block, wherever it stood: the Messages API has no system role
    inside the conversation.
    """
    system: list[dict[str, Any]] = []
    stable_system: dict[str, Any] | None = None
    out: list[dict[str, Any]] = []
    last_stable: dict[str, Any] | None = None
    for index, message in enumerate(request.messages):
        if message.role == "system":
            if message.content:
                system.append({"type": "text", "text": message.content})
                if index < request.cache_prefix_messages:
                    stable_system = system[-1]
            continue
        blocks = _blocks(message)
        if not blocks:
            continue
        role = "assistant" if message.role == "assistant" else "user"
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
        if index < request.cache_prefix_messages:
            last_stable = blocks[-1]
    if cache:
        # The breakpoint goes after the stable prefix: a per-turn system block after it (matched skills,
        # recalled memories) must not be part of what is cached, or nothing would ever be reused.
        if stable_system is not None:
            stable_system["cache_control"] = EPHEMERAL
        elif system and not request.cache_prefix_messages:
            system[-1]["cache_control"] = EPHEMERAL
        if last_stable is not None:
            last_stable["cache_control"] = EPHEMERAL
    return system, out


def to_anthropic_tools(tools: list[ToolSpec], *, cache: bool = True) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools
    ]
    if cache and out:
        out[-1]["cache_control"] = EPHEMERAL
    return out


def _usage(
    input_tokens: int | None, output_tokens: int | None, cache_read: int | None, cache_write: int | None
) -> Usage:
    cached, written = cache_read or 0, cache_write or 0
    return Usage(
        input_tokens=(input_tokens or 0) + cached + written,
        output_tokens=output_tokens or 0,
        cached_tokens=cached,
        cache_write_tokens=written,
    )


class AnthropicProvider(Provider):
    """Messages API adapter.

    Options: ``prompt_caching`` (default True) places the ``cache_control`` breakpoints.
    """

    kind = "anthropic"
    network = True
    needs_model = True
    needs_key_at_default_url = True
    default_base_url = DEFAULT_BASE_URL
    probe_path = "/v1/models"
    sdk_modules = ("anthropic", "httpx2")

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        _import_sdk()
        self._secret = config.secret()
        # Passing the key explicitly (even an empty one) stops the client from looking for credentials in
        # the environment or in profile files.
        self._client = anthropic.AsyncAnthropic(
            api_key=self._secret or "",
            base_url=config.base_url or DEFAULT_BASE_URL,
            timeout=config.timeout,
            max_retries=0,
            default_headers=config.extra_headers or None,
            http_client=anthropic.DefaultAsyncHttpxClient(**httpx2_options(config.egress)),
        )
        self._cache = bool(config.options.get("prompt_caching", True))

    async def aclose(self) -> None:
        await self._client.close()

    def _params(self, request: CompletionRequest) -> dict[str, Any]:
        system, messages = to_anthropic_messages(request, cache=self._cache)
        params: dict[str, Any] = {
            "model": self.model_for(request),
            "max_tokens": request.max_tokens,
            "messages": messages,
        }
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = to_anthropic_tools(request.tools, cache=self._cache)
        if request.temperature is not None:
            # The current client dropped ``temperature`` from its signature; the models that accept it
            # still get it in the body.
            params["extra_body"] = {"temperature": request.temperature}
        return params

    async def complete(self, request: CompletionRequest) -> Completion:
        params = self._params(request)
        log.debug("anthropic request model=%s messages=%d", params["model"], len(params["messages"]))
        response = await self._guard(lambda: self._client.messages.create(**params))
        if not isinstance(response, AnthropicMessage) or not isinstance(response.content, list):
            raise self._bad("response is not a message")
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in response.content:
            if isinstance(block, TextBlock):
                text.append(block.text)
            elif isinstance(block, ToolUseBlock):
                calls.append(self._tool_call(block.id, block.name, block.input))
        usage = response.usage
        if usage is None:
            raise self._bad("response has no usage")
        return Completion(
            content="".join(text),
            stop_reason=settle_stop_reason(_STOP.get(response.stop_reason, "end_turn"), calls),
            tool_calls=calls,
            usage=_usage(
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_input_tokens,
                usage.cache_creation_input_tokens,
            ),
            provider=self.name,
            model=response.model or self.model_for(request),
        )

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        params = self._params(request)
        params["stream"] = True
        sdk_stream = await self._guard(lambda: self._client.messages.create(**params))
        assembler = ToolCallAssembler(provider=self.name, secret=self._secret)
        text: list[str] = []
        calls: list[ToolCall] = []
        stop: str | None = None
        model = str(params["model"])
        counts: dict[str, int | None] = {"input": None, "output": None, "read": None, "write": None}
        try:
            while (event := await self._guard(lambda: _next_event(sdk_stream))) is not None:
                if isinstance(event, RawMessageStartEvent):
                    model = event.message.model or model
                    u = event.message.usage
                    counts.update(
                        input=u.input_tokens,
                        output=u.output_tokens,
                        read=u.cache_read_input_tokens,
                        write=u.cache_creation_input_tokens,
                    )
                elif isinstance(event, RawContentBlockStartEvent):
                    block = event.content_block
                    if isinstance(block, ToolUseBlock):
                        yield assembler.start(event.index, block.id, block.name)
                    elif isinstance(block, TextBlock) and block.text:
                        text.append(block.text)
                        yield TextDelta(text=block.text)
                elif isinstance(event, RawContentBlockDeltaEvent):
                    delta = event.delta
                    if isinstance(delta, SDKTextDelta):
                        text.append(delta.text)
                        yield TextDelta(text=delta.text)
                    elif isinstance(delta, InputJSONDelta) and event.index in assembler:
                        yield assembler.add(event.index, delta.partial_json)
                elif isinstance(event, RawContentBlockStopEvent):
                    if event.index in assembler:
                        end = assembler.end(event.index)
                        calls.append(end.tool_call)
                        yield end
                elif isinstance(event, RawMessageDeltaEvent):
                    stop = event.delta.stop_reason or stop
                    u2 = event.usage
                    # message_delta counts are cumulative and, when present, final.
                    for key, value in (
                        ("input", u2.input_tokens),
                        ("output", u2.output_tokens),
                        ("read", u2.cache_read_input_tokens),
                        ("write", u2.cache_creation_input_tokens),
                    ):
                        if value is not None:
                            counts[key] = value
        finally:
            await sdk_stream.close()
        for end in assembler.finish():
            calls.append(end.tool_call)
            yield end
        yield Done(
            completion=Completion(
                content="".join(text),
                stop_reason=settle_stop_reason(_STOP.get(stop, "end_turn"), calls),
                tool_calls=calls,
                usage=_usage(counts["input"], counts["output"], counts["read"], counts["write"]),
                provider=self.name,
                model=model,
            )
        )

    def _tool_call(self, call_id: str, name: str, raw_input: object) -> ToolCall:
        if not call_id or not name:
            raise self._bad("tool_use block without id or name")
        return ToolCall(
            id=call_id,
            name=name,
            input=ensure_object(raw_input, tool=name, provider=self.name, secret=self._secret),
        )

    def _bad(self, message: str) -> ProviderError:
        return error_for(ErrorKind.BAD_RESPONSE, message, provider=self.name, secret=self._secret)

    async def _guard(self, call: Callable[[], Awaitable[T]]) -> T:
        # httpx2 errors escape the client while a stream is being read; JSONDecodeError from bad bodies.
        catch = (anthropic.AnthropicError, httpx2.TransportError, json.JSONDecodeError)
        return await guarded(call, catch, self._error)

    def _error(self, exc: BaseException) -> ProviderError:
        secret, name = self._secret, self.name
        if isinstance(exc, json.JSONDecodeError):
            return error_for(
                ErrorKind.BAD_RESPONSE, f"response is not valid JSON: {exc}", provider=name, secret=secret
            )
        if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
            return error_for(ErrorKind.TIMEOUT, "request timed out", provider=name, secret=secret)
        if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
            return error_for(ErrorKind.UNAVAILABLE, f"connection failed: {exc}", provider=name, secret=secret)
        if isinstance(exc, anthropic.APIResponseValidationError):
            return error_for(ErrorKind.BAD_RESPONSE, exc.message, provider=name, secret=secret)
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            error_type = exc.type if isinstance(exc.type, str) else ""
            if status >= 400:
                kind = kind_for_status(status)
            else:
                kind = _ERROR_TYPES.get(error_type, ErrorKind.UNAVAILABLE)
            return error_for(
                kind,
                exc.api_message or exc.message,
                provider=name,
                secret=secret,
                status_code=status if status >= 400 else None,
                retry_after=parse_retry_after(exc.response.headers),
            )
        return error_for(ErrorKind.BAD_RESPONSE, str(exc), provider=name, secret=secret)


async def _next_event(
    sdk_stream: anthropic.AsyncStream[RawMessageStreamEvent],
) -> RawMessageStreamEvent | None:
    try:
        return await sdk_stream.__anext__()
    except StopAsyncIteration:
        return None
