"""OpenAI-compatible Chat Completions through the official ``openai`` client.

One adapter serves every server that speaks ``/v1/chat/completions``: OpenAI, OpenRouter, vLLM, and the
``/v1`` endpoint of Ollama; ``base_url`` picks the server. Prompt caching there is automatic (prefix
based), so ``cache_prefix_messages`` needs no markup; the adapter reports ``cached_tokens`` as given.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._common import httpx2_options, parse_arguments, settle_stop_reason, stable_call_id
from ._errors import ErrorKind, ProviderError, error_for, guarded, kind_for_status, parse_retry_after
from ._provider import Provider, ProviderConfig
from ._streaming import ToolCallAssembler
from ._types import (
    Completion,
    CompletionRequest,
    Done,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.completion_usage import CompletionUsage

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# The client insists on a key; local servers (Ollama, vLLM) ignore whatever is sent.
_NO_KEY = "no-key"

_FINISH: dict[str | None, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

T = TypeVar("T")


def _import_sdk() -> None:
    """Bind the SDK's names here: importing it takes seconds, so it waits for the first client (the
    gateway imports ``OpenAIProvider.sdk_modules`` in a worker thread before it builds one)."""
    global openai, ChatCompletion, ChatCompletionChunk
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk


def to_openai_messages(request: CompletionRequest) -> list[dict[str, Any]]:
    """Neutral messages -> Chat Completions messages (tool calls carry their arguments as JSON text)."""
    out: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "tool":
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        elif message.role == "assistant" and message.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": message.content or None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": json.dumps(call.input)},
                        }
                        for call in message.tool_calls
                    ],
                }
            )
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
        }
        for t in tools
    ]


def _usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cached_tokens=(details.cached_tokens or 0) if details else 0,
        cache_write_tokens=(details.cache_write_tokens or 0) if details else 0,
    )


class OpenAIProvider(Provider):
    """Chat Completions adapter.

    Options: ``max_tokens_param`` ("max_tokens", the default every compatible server accepts, or
    "max_completion_tokens" for OpenAI's reasoning models), ``extra_body`` (merged into each request,
    e.g. OpenRouter's provider routing), ``organization`` and ``project`` (OpenAI's account headers).
    """

    kind = "openai"
    network = True
    needs_model = True
    needs_key_at_default_url = True
    default_base_url = DEFAULT_BASE_URL
    probe_path = "/models"
    sdk_modules = ("openai",)

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        _import_sdk()
        self._secret = config.secret()
        self._client = openai.AsyncOpenAI(
            api_key=self._secret or _NO_KEY,
            base_url=config.base_url or DEFAULT_BASE_URL,
            timeout=config.timeout,
            max_retries=0,
            default_headers=config.extra_headers or None,
            http_client=openai.DefaultAsyncHttpxClient(**httpx2_options(config.egress)),
        )
        # The client fills these from OPENAI_ORG_ID / OPENAI_PROJECT_ID when not given; the config decides.
        self._client.organization = _option_str(config, "organization")
        self._client.project = _option_str(config, "project")
        self._max_tokens_param = str(config.options.get("max_tokens_param", "max_tokens"))
        self._extra_body: dict[str, Any] = dict(config.options.get("extra_body", {}))

    async def aclose(self) -> None:
        await self._client.close()

    def _params(self, request: CompletionRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model_for(request),
            "messages": to_openai_messages(request),
            self._max_tokens_param: request.max_tokens,
        }
        if request.tools:
            params["tools"] = to_openai_tools(request.tools)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if self._extra_body:
            params["extra_body"] = self._extra_body
        return params

    async def complete(self, request: CompletionRequest) -> Completion:
        params = self._params(request)
        log.debug("openai request model=%s messages=%d", params["model"], len(params["messages"]))
        response = await self._guard(lambda: self._client.chat.completions.create(**params))
        return self._parse(response, request)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        params = self._params(request)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        sdk_stream = await self._guard(lambda: self._client.chat.completions.create(**params))
        assembler = ToolCallAssembler(provider=self.name, secret=self._secret)
        text: list[str] = []
        finish: str | None = None
        usage: CompletionUsage | None = None
        model = str(params["model"])
        try:
            while (chunk := await self._guard(lambda: _next_chunk(sdk_stream))) is not None:
                if not isinstance(chunk, ChatCompletionChunk):
                    raise self._bad(f"unexpected stream item {type(chunk).__name__}")
                model = chunk.model or model
                usage = chunk.usage or usage
                # Only choice 0 is ever requested (n=1); usage arrives in a last chunk with no choices.
                for choice in chunk.choices or []:
                    if choice.index != 0:
                        continue
                    finish = choice.finish_reason or finish
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        yield TextDelta(text=delta.content)
                    for part in delta.tool_calls or []:
                        name = part.function.name if part.function else None
                        if part.index not in assembler:
                            call_id = part.id or stable_call_id(request, part.index, name or "", {})
                            yield assembler.start(part.index, call_id, name or "")
                        elif name:
                            assembler.set_name(part.index, name)
                        if part.function and part.function.arguments:
                            yield assembler.add(part.index, part.function.arguments)
        finally:
            await sdk_stream.close()
        ends = assembler.finish()
        for end in ends:
            yield end
        calls = [end.tool_call for end in ends]
        yield Done(
            completion=Completion(
                content="".join(text),
                stop_reason=settle_stop_reason(_FINISH.get(finish, "end_turn"), calls),
                tool_calls=calls,
                usage=_usage(usage),
                provider=self.name,
                model=model,
            )
        )

    def _parse(self, response: object, request: CompletionRequest) -> Completion:
        # The client builds models without validation, so a server's odd JSON arrives as odd attributes.
        if not isinstance(response, ChatCompletion) or not response.choices:
            raise self._bad("response has no choices")
        choice = response.choices[0]
        message = choice.message
        if message is None or not isinstance(message.content, str | None):
            raise self._bad("response choice has no valid message")
        calls: list[ToolCall] = []
        for index, part in enumerate(message.tool_calls or []):
            function = getattr(part, "function", None)
            if function is None or not getattr(function, "name", None):
                raise self._bad(f"tool call {index} is not a function call with a name")
            arguments = parse_arguments(
                function.arguments, tool=function.name, provider=self.name, secret=self._secret
            )
            call_id = part.id or stable_call_id(request, index, function.name, arguments)
            calls.append(ToolCall(id=call_id, name=function.name, input=arguments))
        stop = _FINISH.get(choice.finish_reason, "end_turn")
        content = message.content or ""
        if not content and message.refusal:
            content, stop = message.refusal, "refusal"
        return Completion(
            content=content,
            stop_reason=settle_stop_reason(stop, calls),
            tool_calls=calls,
            usage=_usage(response.usage),
            provider=self.name,
            model=response.model or self.model_for(request),
        )

    def _bad(self, message: str) -> ProviderError:
        return error_for(ErrorKind.BAD_RESPONSE, message, provider=self.name, secret=self._secret)

    async def _guard(self, call: Callable[[], Awaitable[T]]) -> T:
        return await guarded(call, (openai.OpenAIError, json.JSONDecodeError), self._error)

    def _error(self, exc: BaseException) -> ProviderError:
        secret, name = self._secret, self.name
        if isinstance(exc, json.JSONDecodeError):
            return error_for(
                ErrorKind.BAD_RESPONSE, f"response is not valid JSON: {exc}", provider=name, secret=secret
            )
        if isinstance(exc, openai.APITimeoutError):
            return error_for(ErrorKind.TIMEOUT, "request timed out", provider=name, secret=secret)
        if isinstance(exc, openai.APIConnectionError):
            return error_for(
                ErrorKind.UNAVAILABLE, f"connection failed: {exc.message}", provider=name, secret=secret
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return error_for(ErrorKind.BAD_RESPONSE, exc.message, provider=name, secret=secret)
        if isinstance(exc, openai.APIStatusError):
            return error_for(
                kind_for_status(exc.status_code),
                _body_message(exc.body) or exc.message,
                provider=name,
                secret=secret,
                status_code=exc.status_code,
                retry_after=parse_retry_after(exc.response.headers),
            )
        if isinstance(exc, openai.APIError):
            # An error event inside a 200 stream: the upstream failed mid-answer (OpenRouter does this).
            return error_for(
                ErrorKind.UNAVAILABLE, _body_message(exc.body) or exc.message, provider=name, secret=secret
            )
        return error_for(ErrorKind.BAD_RESPONSE, str(exc), provider=name, secret=secret)


def _option_str(config: ProviderConfig, name: str) -> str | None:
    value = config.options.get(name)
    return str(value) if value is not None else None


async def _next_chunk(sdk_stream: openai.AsyncStream[ChatCompletionChunk]) -> ChatCompletionChunk | None:
    try:
        return await sdk_stream.__anext__()
    except StopAsyncIteration:
        return None


def _body_message(body: object) -> str | None:
    """The human message of an error body (``{"error": {"message": ...}}`` or ``{"error": "..."}``)."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return None
