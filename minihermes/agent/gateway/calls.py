"""The gateway's errors and the shapes of one call: who pays for it, why a provider gave no answer, the
``completion`` op's arguments validated into a ``CompletionRequest``, and the reply built from a
``Completion``."""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any, cast

from pydantic import ValidationError

from minihermes.llm import (
    Completion,
    CompletionRequest,
    Message,
    MessageView,
    ReadOnlyDict,
    ToolSpec,
    ToolView,
    ViewMemo,
)
from minihermes.llm.protocol import CompletionReply, ToolCallRecord, UsageRecord
from minihermes.runtime import ActorError, InvalidArgument


class LLMUnavailable(ActorError):
    """Every provider in the chain failed or was skipped. The message names providers and error kinds only."""

    code = "llm_unavailable"
    http_status = 503


class BudgetExceeded(ActorError):
    """A budget (tenant, user, session, cron job or kanban worker; tokens or money, per period) is spent, or
    the call would cross it: no provider was called."""

    code = "budget_exceeded"
    http_status = 429


class LLMInternalError(ActorError):
    """A provider raised something other than ``ProviderError``: a bug, reported instead of failed over."""

    code = "llm_internal_error"
    http_status = 500


@dataclass(frozen=True, slots=True)
class Caller:
    """Whom a call's usage is counted for (besides the tenant)."""

    user: str
    session: str
    cron_job: str
    kanban_worker: str = ""

    def keys(self) -> list[tuple[str, str]]:
        pairs = (
            ("user", self.user),
            ("session", self.session),
            ("cron_job", self.cron_job),
            ("kanban_worker", self.kanban_worker),
        )
        return [(scope, key) for scope, key in pairs if key]


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one provider of the chain gave no answer: an ``ErrorKind``, ``circuit_open`` or ``misconfigured``."""

    provider: str
    error: str
    retry_after: float | None = None
    streamed: bool = False
    """The provider failed after text had been streamed to watchers: the chain stops here."""


def unavailable(failures: Sequence[Failure]) -> LLMUnavailable:
    why = "; ".join(f"{f.provider}: {f.error}{' mid-stream' if f.streamed else ''}" for f in failures)
    waits = [f.retry_after for f in failures if f.retry_after is not None]
    return LLMUnavailable(
        f"no LLM provider could answer ({why})",
        providers=[{"provider": f.provider, "error": f.error} for f in failures],
        # Only when every provider said when to come back is there a time worth passing on.
        retry_after=min(waits) if waits and len(waits) == len(failures) else None,
    )


_VALIDATED: ViewMemo[Message | ToolSpec] = ViewMemo()
"""Read-only messages and tool specs already validated: a session's history is validated once per message,
not once per LLM call."""


_TOOL_LISTS: OrderedDict[tuple[int, ...], tuple[list[Any], list[Any]]] = OrderedDict()
"""Whole tool lists already validated, by the identities of their (read-only) specs: a turn offers the same
list on every LLM call. Each entry keeps its specs alive, so the ids in its key are not reused."""
_TOOL_LISTS_MAX = 256


def _validated_tools(tools: list[dict[str, Any]]) -> tuple[list[Any], bool]:
    if not all(type(t) is ToolView for t in tools):
        return _validated(tools, ToolView, ToolSpec)
    key = tuple(map(id, tools))
    hit = _TOOL_LISTS.get(key)
    if hit is not None:
        _TOOL_LISTS.move_to_end(key)
        return hit[1], True
    checked, complete = _validated(tools, ToolView, ToolSpec)
    if complete:
        _TOOL_LISTS[key] = (list(tools), checked)
        if len(_TOOL_LISTS) > _TOOL_LISTS_MAX:
            _TOOL_LISTS.popitem(last=False)
    return checked, complete


def _validated(
    items: list[dict[str, Any]], view: type[ReadOnlyDict], model: type[Message | ToolSpec]
) -> tuple[list[Any], bool]:
    """Each item as its model (a read-only item's remembered, anything else validated afresh), an invalid
    one as given; and whether every item came out a model."""
    out: list[Any] = []
    complete = True
    for raw in items:
        checked = _VALIDATED.get(raw) if type(raw) is view else None
        if checked is None:
            try:
                checked = model.model_validate(raw)
            except ValidationError:
                out.append(raw)  # validated again with the request, for an error that names its place
                complete = False
                continue
            _VALIDATED.put(raw, checked)  # kept only on a read-only item
        out.append(checked)
    return out, complete


def _validated_messages(messages: list[dict[str, Any]]) -> tuple[list[Any], bool]:
    """``_validated`` for messages. A message view keeps its model on itself (``MessageView._checked``), so
    a session's history (every message but the newest validated at an earlier step) is found in passes
    that run in C, and only what is new is validated."""
    out = list(map(getattr, messages, repeat("_checked"), repeat(None)))
    complete = True
    for i in compress(range(len(out)), map(operator.is_, out, repeat(None))):
        raw = messages[i]
        try:
            checked = Message.model_validate(raw)
        except ValidationError:
            out[i] = raw  # validated again with the request, for an error that names its place
            complete = False
            continue
        if type(raw) is MessageView:
            raw._checked = checked
        out[i] = checked
    return out, complete


def completion_request(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    max_tokens: int,
    temperature: float | None,
    cache_prefix_messages: int,
) -> CompletionRequest:
    """The op's arguments as a ``CompletionRequest``; ``InvalidArgument`` naming the first bad field."""
    if not messages:
        raise InvalidArgument("completion: messages must not be empty", field="messages")
    checked_messages, messages_done = _validated_messages(messages)
    checked_tools, tools_done = _validated_tools(tools)
    scalars = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "cache_prefix_messages": cache_prefix_messages,
    }
    try:
        if messages_done and tools_done:
            # Every message and tool is a validated model already: check the scalars alone and put the
            # lists in as they are (pydantic would run each message's own checks again: O(history) a call).
            base = CompletionRequest.model_validate({"messages": [], "tools": [], **scalars})
            return base.model_copy(update={"messages": checked_messages, "tools": checked_tools})
        return CompletionRequest.model_validate(
            {"messages": checked_messages, "tools": checked_tools, **scalars}
        )
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        message = f"completion: argument '{where}': {first.get('msg')}"
    raise InvalidArgument(message, field=where)


def completion_reply(name: str, model: str, completion: Completion, cost: float | None) -> CompletionReply:
    return {
        "status": "ok",
        "response": {
            "content": completion.content,
            "stop_reason": completion.stop_reason,
            # The models' dumps are these records (type-level only: no conversion at run time).
            "tool_calls": cast("list[ToolCallRecord]", [c.model_dump() for c in completion.tool_calls]),
            "usage": cast("UsageRecord", completion.usage.model_dump()),
        },
        "provider": name,
        "model": completion.model or model,
        "cost_usd": cost,
    }
