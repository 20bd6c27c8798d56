"""Ollama's native ``/api/chat`` over httpx.

Native rather than Ollama's OpenAI-compatible ``/v1`` (which the ``openai`` adapter covers) because it
reports ``done_reason`` and exact prompt/eval counts, and takes ``options`` such as ``num_predict``.
Tool calls come back with arguments as JSON objects and without ids; ids are generated deterministically.
Streaming is NDJSON: one JSON object per line, the last with ``"done": true`` and the token counts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx

from ._common import (
    ensure_object,
    httpx_options,
    loads_or,
    parse_arguments,
    settle_stop_reason,
    stable_call_id,
)
from ._errors import ErrorKind, ProviderError, error_for, guarded, kind_for_status, parse_retry_after
from ._provider import Provider, ProviderConfig
from ._types import (
    Completion,
    CompletionRequest,
    Done,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://localhost:11434"

_DONE: dict[str | None, StopReason] = {"stop": "end_turn", "length": "max_tokens"}

T = TypeVar("T")


def to_ollama_messages(request: CompletionRequest) -> list[dict[str, Any]]:
    """Neutral messages -> Ollama chat messages. Tool results name their tool (Ollama matches by name)."""
    names = {c.id: c.name for m in request.messages for c in m.tool_calls}
    out: list[dict[str, Any]] = []
    for message in request.messages:
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            entry["tool_calls"] = [
                {"function": {"name": c.name, "arguments": c.input}} for c in message.tool_calls
            ]
        if message.role == "tool" and message.tool_call_id in names:
            entry["tool_name"] = names[message.tool_call_id]
        out.append(entry)
    return out


class OllamaProvider(Provider):
    """Native Ollama chat adapter.

    Options: ``keep_alive`` (how long Ollama keeps the model loaded, e.g. "10m") and ``ollama_options``
    (merged into the request's ``options``, e.g. ``{"num_ctx": 8192}``). An ``api_key``, if given, is sent
    as a bearer token for Ollama behind an authenticating proxy.
    """

    kind = "ollama"
    network = True
    needs_model = True
    default_base_url = DEFAULT_BASE_URL
    probe_path = "/api/tags"

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(config)
        self._secret = config.secret()
        headers = dict(config.extra_headers)
        if self._secret:
            headers["Authorization"] = f"Bearer {self._secret}"
        self._client = httpx.AsyncClient(
            base_url=config.base_url or DEFAULT_BASE_URL,
            timeout=httpx.Timeout(config.timeout),
            headers=headers,
            **httpx_options(config.egress),
        )
        self._keep_alive = config.options.get("keep_alive")
        self._options: dict[str, Any] = dict(config.options.get("ollama_options", {}))

    async def aclose(self) -> None:
        await self._client.aclose()

    def _body(self, request: CompletionRequest, *, stream: bool) -> dict[str, Any]:
        options = {"num_predict": request.max_tokens, **self._options}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        body: dict[str, Any] = {
            "model": self.model_for(request),
            "messages": to_ollama_messages(request),
            "stream": stream,
            "options": options,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in request.tools
            ]
        if self._keep_alive is not None:
            body["keep_alive"] = self._keep_alive
        return body

    async def complete(self, request: CompletionRequest) -> Completion:
        body = self._body(request, stream=False)
        log.debug("ollama request model=%s messages=%d", body["model"], len(body["messages"]))
        response = await self._guard(lambda: self._client.post("/api/chat", json=body))
        if response.is_error:
            raise self._status_error(response.status_code, response.headers, response.text)
        data = loads_or(response.content, None)
        if not isinstance(data, dict) or not isinstance(data.get("message"), dict):
            raise self._bad(f"response is not a chat JSON object: {response.text[:200]!r}")
        message = data["message"]
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise self._bad("message content is not text")
        calls = self._tool_calls(request, message.get("tool_calls"), first_index=0)
        return self._completion(request, data, content, calls)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        body = self._body(request, stream=True)
        http_request = self._client.build_request("POST", "/api/chat", json=body)
        response = await self._guard(lambda: self._client.send(http_request, stream=True))
        try:
            if response.is_error:
                raw = await self._guard(response.aread)
                raise self._status_error(response.status_code, response.headers, raw.decode(errors="replace"))
            text: list[str] = []
            calls: list[ToolCall] = []
            final: dict[str, Any] | None = None
            lines = response.aiter_lines()
            while (line := await self._guard(lambda: _next_line(lines))) is not None:
                if not line.strip():
                    continue
                chunk = self._chunk(line)
                message = chunk.get("message") or {}
                piece = message.get("content") or ""
                if piece:
                    text.append(piece)
                    yield TextDelta(text=piece)
                # Ollama sends each tool call whole, in one chunk, so start/delta/end come together.
                for call in self._tool_calls(request, message.get("tool_calls"), first_index=len(calls)):
                    index = len(calls)
                    calls.append(call)
                    yield ToolCallStart(index=index, id=call.id, name=call.name)
                    yield ToolCallDelta(index=index, arguments=json.dumps(call.input))
                    yield ToolCallEnd(index=index, tool_call=call)
                if chunk.get("done"):
                    final = chunk
                    break
        finally:
            await response.aclose()
        if final is None:
            raise self._bad("stream ended before the final chunk")
        yield Done(completion=self._completion(request, final, "".join(text), calls))

    def _chunk(self, line: str) -> dict[str, Any]:
        chunk = loads_or(line, None)
        if not isinstance(chunk, dict):
            raise self._bad(f"stream line is not a JSON object: {line[:200]!r}")
        if "error" in chunk:
            # The runner failed after the 200 was sent (e.g. the model crashed or was unloaded).
            raise error_for(
                ErrorKind.UNAVAILABLE, str(chunk["error"]), provider=self.name, secret=self._secret
            )
        return chunk

    def _tool_calls(self, request: CompletionRequest, raw: object, *, first_index: int) -> list[ToolCall]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self._bad("tool_calls is not a list")
        calls = []
        for offset, item in enumerate(raw):
            function = item.get("function") if isinstance(item, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(function, dict) or not isinstance(name, str) or not name:
                raise self._bad(f"tool call {offset} has no function name")
            arguments = function.get("arguments")
            # Ollama sends an object; some models behind it emit a JSON string instead.
            if isinstance(arguments, str):
                arguments = parse_arguments(arguments, tool=name, provider=self.name, secret=self._secret)
            elif arguments is None:
                arguments = {}
            arguments = ensure_object(arguments, tool=name, provider=self.name, secret=self._secret)
            given = item.get("id")
            call_id = given if isinstance(given, str) and given else None
            calls.append(
                ToolCall(
                    id=call_id or stable_call_id(request, first_index + offset, name, arguments),
                    name=name,
                    input=arguments,
                )
            )
        return calls

    def _completion(
        self, request: CompletionRequest, data: dict[str, Any], content: str, calls: list[ToolCall]
    ) -> Completion:
        stop = _DONE.get(data.get("done_reason"), "end_turn")
        return Completion(
            content=content,
            stop_reason=settle_stop_reason(stop, calls),
            tool_calls=calls,
            usage=Usage(
                input_tokens=_count(data.get("prompt_eval_count")),
                output_tokens=_count(data.get("eval_count")),
            ),
            provider=self.name,
            model=str(data.get("model") or self.model_for(request)),
        )

    def _status_error(self, status: int, headers: httpx.Headers, text: str) -> ProviderError:
        body = loads_or(text, None)
        detail = body.get("error") if isinstance(body, dict) else None
        return error_for(
            kind_for_status(status),
            str(detail or text or f"HTTP {status}"),
            provider=self.name,
            secret=self._secret,
            status_code=status,
            retry_after=parse_retry_after(headers),
        )

    def _bad(self, message: str) -> ProviderError:
        return error_for(ErrorKind.BAD_RESPONSE, message, provider=self.name, secret=self._secret)

    async def _guard(self, call: Callable[[], Awaitable[T]]) -> T:
        return await guarded(call, (httpx.TransportError,), self._error)

    def _error(self, exc: BaseException) -> ProviderError:
        if isinstance(exc, httpx.TimeoutException):
            return error_for(ErrorKind.TIMEOUT, "request timed out", provider=self.name, secret=self._secret)
        return error_for(
            ErrorKind.UNAVAILABLE,
            f"connection failed: {type(exc).__name__}: {exc}",
            provider=self.name,
            secret=self._secret,
        )


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


async def _next_line(lines: AsyncIterator[str]) -> str | None:
    try:
        return await anext(lines)
    except StopAsyncIteration:
        return None
