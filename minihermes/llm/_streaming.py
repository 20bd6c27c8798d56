"""Stream plumbing shared by the adapters: assembling tool-call deltas and replaying a completion as events."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, Iterator
from dataclasses import dataclass, field

from ._common import parse_arguments
from ._errors import ErrorKind, error_for
from ._types import (
    Completion,
    Done,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)

_WORD = re.compile(r"\s*\S+\s*|\s+")


@dataclass
class _Pending:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class ToolCallAssembler:
    """Collects tool calls that arrive in pieces, keyed by the provider's block/choice index.

    OpenAI sends ``{index, id?, function: {name?, arguments?}}`` fragments; Anthropic sends a
    ``content_block_start`` then ``input_json_delta`` pieces. Both reduce to start/add/finish.
    """

    def __init__(self, *, provider: str, secret: str | None) -> None:
        self._provider = provider
        self._secret = secret
        self._calls: dict[int, _Pending] = {}

    def __contains__(self, index: int) -> bool:
        return index in self._calls

    def start(self, index: int, call_id: str, name: str) -> ToolCallStart:
        self._calls[index] = _Pending(call_id, name)
        return ToolCallStart(index=index, id=call_id, name=name)

    def add(self, index: int, fragment: str) -> ToolCallDelta:
        self._calls[index].arguments.append(fragment)
        return ToolCallDelta(index=index, arguments=fragment)

    def end(self, index: int) -> ToolCallEnd:
        """Parse the call at ``index``; invalid or non-object arguments raise ``bad_response``."""
        pending = self._calls.pop(index)
        if not pending.name:
            raise error_for(
                ErrorKind.BAD_RESPONSE,
                f"streamed tool call {index} has no name",
                provider=self._provider,
                secret=self._secret,
            )
        arguments = parse_arguments(
            "".join(pending.arguments), tool=pending.name, provider=self._provider, secret=self._secret
        )
        return ToolCallEnd(index=index, tool_call=ToolCall(id=pending.id, name=pending.name, input=arguments))

    def set_name(self, index: int, name: str) -> None:
        """Some servers name the function in a later fragment than the one that opened the call."""
        if not self._calls[index].name:
            self._calls[index].name = name

    def finish(self) -> list[ToolCallEnd]:
        """End every call still open, in index order."""
        return [self.end(index) for index in sorted(self._calls)]


def split_words(text: str) -> list[str]:
    """Split text into word-sized pieces that concatenate back to exactly ``text``."""
    return _WORD.findall(text)


def events_from_completion(completion: Completion) -> Iterator[StreamEvent]:
    """Replay a finished completion as a stream: text word by word, then each tool call, then ``Done``."""
    for piece in split_words(completion.content):
        yield TextDelta(text=piece)
    for index, call in enumerate(completion.tool_calls):
        yield ToolCallStart(index=index, id=call.id, name=call.name)
        yield ToolCallDelta(index=index, arguments=json.dumps(call.input))
        yield ToolCallEnd(index=index, tool_call=call)
    yield Done(completion=completion)


async def collect_stream(events: AsyncIterable[StreamEvent]) -> Completion:
    """Drain a stream and return its final completion (for callers that stream but want the whole)."""
    async for event in events:
        if isinstance(event, Done):
            return event.completion
    raise error_for(ErrorKind.BAD_RESPONSE, "stream ended without a final event", provider="", secret=None)
