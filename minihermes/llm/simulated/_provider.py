"""``SimulatedProvider``: the default offline model, deterministic, with estimated token usage."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence

from .._common import estimate_tokens, request_text
from .._provider import Provider, ProviderConfig
from .._streaming import events_from_completion
from .._types import Completion, CompletionRequest, StopReason, StreamEvent, ToolCall, Usage
from ._intents import DEFAULT_INTENTS
from ._plan import Intent
from ._planner import PlanAdvisor, Planner
from ._skills import SkillProcedures

_CACHE_ENTRIES = 256


class SimulatedProvider(Provider):
    """An offline model that acts like a sensible one in the agent loop.

    It reads the last user message and the offered tools, plans the tool steps the request needs
    (calculations, memory store/recall/search, files, other tools it is asked for by name), takes the
    next step the conversation does not have a result for yet, and ends the turn with an answer built from
    the tool results. A tool error ends the turn with an explanation; a tool that is not offered is
    answered around. Procedures in the system prompt (``## Relevant Skills``) are followed: independent
    steps go out together. Same request, same answer.

    Usage is estimated at four characters a token. Prompt caching is simulated per instance: the first
    ``cache_prefix_messages`` messages plus tools count as written to the cache on first sight and as
    cached afterwards, so the gateway's cache accounting can be exercised offline.
    """

    kind = "simulated"

    def __init__(
        self,
        config: ProviderConfig | None = None,
        *,
        intents: Sequence[Intent] | None = None,
        advisors: Sequence[PlanAdvisor] | None = None,
    ) -> None:
        super().__init__(config or ProviderConfig(model="simulated"))
        self.planner = Planner(
            DEFAULT_INTENTS if intents is None else intents,
            (SkillProcedures(),) if advisors is None else advisors,
        )
        self._cache: OrderedDict[str, None] = OrderedDict()

    async def complete(self, request: CompletionRequest) -> Completion:
        decision = self.planner.respond(request)
        content, calls = decision.content, decision.tool_calls
        stop: StopReason = "tool_use" if calls else "end_turn"
        output_tokens = _output_tokens(content, calls)
        if not calls and output_tokens > request.max_tokens:
            content = content[: request.max_tokens * 4]
            output_tokens, stop = estimate_tokens(content), "max_tokens"
        return Completion(
            content=content,
            stop_reason=stop,
            tool_calls=calls,
            usage=self._usage(request, output_tokens),
            provider=self.name,
            model=self.model_for(request) or "simulated",
        )

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        completion = await self.complete(request)
        for event in events_from_completion(completion):
            yield event

    def _usage(self, request: CompletionRequest, output_tokens: int) -> Usage:
        cached = written = 0
        if request.cache_prefix_messages:
            prefix = request_text(request, upto=request.cache_prefix_messages)
            key = hashlib.sha256(f"{self.model_for(request)}\0{prefix}".encode()).hexdigest()
            if key in self._cache:
                self._cache.move_to_end(key)
                cached = estimate_tokens(prefix)
            else:
                self._cache[key] = None
                if len(self._cache) > _CACHE_ENTRIES:
                    self._cache.popitem(last=False)
                written = estimate_tokens(prefix)
        return Usage(
            input_tokens=estimate_tokens(request_text(request)),
            output_tokens=output_tokens,
            cached_tokens=cached,
            cache_write_tokens=written,
        )


def _output_tokens(content: str, calls: list[ToolCall]) -> int:
    text = content + "".join(call.name + json.dumps(call.input) for call in calls)
    return max(1, estimate_tokens(text))
