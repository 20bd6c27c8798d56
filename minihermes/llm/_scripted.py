"""A provider that replays a script: the fake LLM for tests of the agent loop and the gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from ._common import estimate_tokens, request_text, settle_stop_reason
from ._provider import Provider, ProviderConfig
from ._streaming import events_from_completion
from ._types import Completion, CompletionRequest, StreamEvent, Usage

ScriptItem = Completion | dict[str, Any] | BaseException
Responder = Callable[[CompletionRequest], ScriptItem]


class ScriptExhaustedError(AssertionError):
    """The test asked the scripted provider more often than it scripted.

    An ``AssertionError`` on purpose, not a ``ProviderError``: a gateway must not mistake a broken test
    for a flaky provider and fail over to hide it.
    """


class ScriptedProvider(Provider):
    """Answers from a list, in order, or from a function of the request.

    Items are ``Completion`` objects, dicts in the same shape (``tool_calls`` may omit ``id``, ``usage``
    may be omitted and is then estimated), or exceptions, which are raised (e.g. a ``RateLimitedError``
    to drive the gateway's failover). Every request is kept in ``requests``, in order.

    Through the registry, ``create_provider("scripted", ProviderConfig(options={"script": [...]}))``.
    """

    kind = "scripted"

    def __init__(
        self,
        script: Sequence[ScriptItem] | Responder | ProviderConfig | None = None,
        config: ProviderConfig | None = None,
    ) -> None:
        if isinstance(script, ProviderConfig):
            # Built by the registry: the script travels in the config's options.
            config, script = script, list(script.options.get("script", []))
        super().__init__(config or ProviderConfig(model="scripted"))
        self._responder: Responder | None = None
        self._items: list[ScriptItem] = []
        if callable(script):
            self._responder = script
        else:
            self._items = list(script or [])
        self.requests: list[CompletionRequest] = []

    @property
    def remaining(self) -> int:
        """Scripted items not yet used (0 for a function script)."""
        return len(self._items) - len(self.requests) if self._responder is None else 0

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        call_number = len(self.requests)
        if self._responder is not None:
            item = self._responder(request)
        elif call_number <= len(self._items):
            item = self._items[call_number - 1]
        else:
            last = request.messages[-1].content[:120] if request.messages else ""
            raise ScriptExhaustedError(
                f"scripted provider {self.name!r} has {len(self._items)} responses but got call "
                f"#{call_number}; its last message was {last!r}"
            )
        if isinstance(item, BaseException):
            raise item
        return self._completion(item, request, call_number)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        completion = await self.complete(request)
        for event in events_from_completion(completion):
            yield event

    def _completion(
        self, item: Completion | dict[str, Any], request: CompletionRequest, call_number: int
    ) -> Completion:
        if isinstance(item, Completion):
            return item
        data = dict(item)
        data["tool_calls"] = [
            {"id": f"call_{call_number}_{i}", **call} if "id" not in call else call
            for i, call in enumerate(data.get("tool_calls", []))
        ]
        data.setdefault("provider", self.name)
        data.setdefault("model", self.model_for(request))
        completion = Completion.model_validate(data)
        updates: dict[str, Any] = {
            "stop_reason": settle_stop_reason(completion.stop_reason, completion.tool_calls)
        }
        if "usage" not in data:
            out = completion.content + "".join(c.name + str(c.input) for c in completion.tool_calls)
            updates["usage"] = Usage(
                input_tokens=estimate_tokens(request_text(request)), output_tokens=estimate_tokens(out)
            )
        return completion.model_copy(update=updates)
