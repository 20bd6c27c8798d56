"""The typed records of the hot path (``minihermes.llm.protocol``, ``guardrails.ToolDecision``) say what the
actors really reply: every key a reply carries is declared, and every required key is there. A renamed key
then fails here, and in mypy at every caller that reads it."""

from __future__ import annotations

from typing import Any, NotRequired, get_origin, get_type_hints

from minihermes.agent.guardrails import Guardrails, ToolDecision
from minihermes.agent.llm_gateway import LLMGateway
from minihermes.llm.protocol import (
    CompletionReply,
    CompletionResponse,
    ProviderList,
    ProviderListing,
    ToolCallRecord,
    UsageRecord,
)
from minihermes.runtime import ActorSpec

from .conftest import ACME


def fits(record: Any, typed: Any) -> None:
    assert isinstance(record, dict), record
    hints = get_type_hints(typed, include_extras=True)  # (``__required_keys__`` misses string annotations)
    required = {k for k, tp in hints.items() if get_origin(tp) is not NotRequired}
    assert set(record) <= set(hints), set(record) - set(hints)
    assert required <= set(record), required - set(record)


async def test_the_gateway_replies_what_its_records_declare(make_node: Any) -> None:
    node = await make_node([ActorSpec("llm_gateway", LLMGateway, per_tenant=True)])
    reply = await node.ask(
        "llm_gateway", "completion", {"messages": [{"role": "user", "content": "what is 2 + 3?"}]}, ctx=ACME
    )
    fits(reply, CompletionReply)
    fits(reply["response"], CompletionResponse)
    fits(reply["response"]["usage"], UsageRecord)
    for call in reply["response"]["tool_calls"]:
        fits(call, ToolCallRecord)
    listing = await node.ask("llm_gateway", "list_providers", {}, ctx=ACME)
    fits(listing, ProviderList)
    assert listing["providers"]
    for row in listing["providers"]:
        fits(row, ProviderListing)


async def test_the_gate_replies_a_tool_decision(make_node: Any) -> None:
    node = await make_node([ActorSpec("guardrails", Guardrails, per_tenant=True)])
    for name in ("no such tool!", "calculator"):  # malformed, and undescribed (no executor here)
        decision = await node.ask("guardrails", "check_tool", {"tool_name": name}, ctx=ACME)
        fits(decision, ToolDecision)
        assert decision["decision"] == "deny"
