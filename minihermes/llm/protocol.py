"""The records the LLM gateway actor sends across actors on every turn, as types (no runtime cost).

``llm_gateway.completion`` replies with a ``CompletionReply`` (the provider's ``Completion`` as plain JSON,
plus who answered and what it cost); ``llm_gateway.list_providers`` lists ``ProviderListing`` rows, each a
registered ``ProviderEntry`` plus its state. They live here, below every caller (the agent, the context
compressor, skills, work), so that a caller annotates what it reads and a renamed key is a type error.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from ._types import StopReason


class UsageRecord(TypedDict):
    """``Usage`` as JSON."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int


class ToolCallRecord(TypedDict):
    """``ToolCall`` as JSON."""

    id: str
    name: str
    input: dict[str, Any]


class CompletionResponse(TypedDict):
    """``Completion`` as JSON: what the model said."""

    content: str
    stop_reason: StopReason
    tool_calls: list[ToolCallRecord]
    usage: UsageRecord


class Attempt(TypedDict):
    """A provider tried before the one that answered, and why it did not."""

    provider: str
    error: str


class CompletionReply(TypedDict):
    """The reply of ``llm_gateway.completion``."""

    status: Literal["ok"]
    response: CompletionResponse
    provider: str
    model: str
    cost_usd: float | None
    attempts: NotRequired[list[Attempt]]


class ProviderEntry(TypedDict):
    """A registered provider as the gateway keeps it (the credential is a phantom token, never a key)."""

    kind: str
    model: str
    base_url: str
    credential: str
    timeout: float
    options: dict[str, Any]
    pricing: dict[str, Any]
    slow_call_seconds: float


class ProviderListing(ProviderEntry):
    """A row of ``llm_gateway.list_providers``."""

    name: str
    active: bool
    circuit: str


class ProviderList(TypedDict):
    """The reply of ``llm_gateway.list_providers``."""

    status: Literal["ok"]
    providers: list[ProviderListing]
    active: dict[str, str]
    """``{provider, model}``: where a session without its own choice is routed."""
    failover: list[str]


__all__ = [
    "Attempt",
    "CompletionReply",
    "CompletionResponse",
    "ProviderEntry",
    "ProviderList",
    "ProviderListing",
    "ToolCallRecord",
    "UsageRecord",
]
