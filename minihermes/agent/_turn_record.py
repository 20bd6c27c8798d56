"""What a turn leaves when it ends: its reply and the ``turn_completed`` record its listeners get.

The agent runs the loop; this module says what the result of a turn is. ``reply`` is the shape every ending
shares (finished, stopped, paused), ``add_usage`` sums one LLM call into the turn's tokens and cost, and
``turn_completed`` builds the listeners' record, judging the turn's success from its tool results
(``minihermes.context.consistency``: a failed call, the status, an answer that contradicts its results, a
turn that found nothing or says it could not do the request).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from minihermes.context.consistency import ToolOutcome, contradiction, fell_short, is_correction
from minihermes.runtime import InvalidArgument, RequestContext
from minihermes.turn_event import TurnCompleted

MAX_MESSAGE_CHARS = 100_000
MAX_INSTRUCTIONS_CHARS = 4_000
MAX_DELEGATION_DEPTH = 16


def no_usage() -> dict[str, Any]:
    """A turn's usage before its first LLM call."""
    return {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}


def reply(status: str, response: str, session_id: str, turn: dict[str, Any]) -> dict[str, Any]:
    """The reply of a turn ending with ``status``: status, response, session_id, tool_calls (count),
    iterations, turn_id, usage."""
    return {
        "status": status,
        "response": response,
        "session_id": session_id,
        "tool_calls": turn["tool_calls"],
        "iterations": turn["iterations"],
        "turn_id": turn["turn_id"],
        "usage": turn.get("usage") or no_usage(),
    }


def paused_reply(session_id: str, turn: dict[str, Any]) -> dict[str, Any]:
    """The reply of a turn waiting for a person's approval of one call."""
    paused = turn["paused"]
    name = paused["tool_call"]["name"]
    return {
        "status": "paused",
        "response": f"The call to {name} is waiting for approval ({paused['approval_id']}).",
        "session_id": session_id,
        "tool_calls": turn["tool_calls"],
        "iterations": turn["iterations"],
        "turn_id": turn["turn_id"],
        "approval_id": paused["approval_id"],
        "pending_tool": {"name": name, "input": paused["tool_call"]["input"]},
        "requester_may_decide": bool(paused.get("self_approve")),
    }


def add_usage(turn: dict[str, Any], gateway_reply: dict[str, Any]) -> None:
    """Add one ``llm_gateway.completion`` reply's tokens and cost to the turn's (cost None once a call's
    price is unknown)."""
    spent = turn.setdefault("usage", no_usage())
    used = gateway_reply.get("response", {}).get("usage") or {}
    spent["calls"] += 1
    spent["input_tokens"] += int(used.get("input_tokens") or 0)
    spent["output_tokens"] += int(used.get("output_tokens") or 0)
    cost, total = gateway_reply.get("cost_usd"), spent["cost_usd"]
    spent["cost_usd"] = None if cost is None or total is None else round(total + cost, 9)


def last_text(history: list[dict[str, Any]]) -> str:
    """The last thing the model said, for a turn the step limit ended."""
    for m in reversed(history):
        if m["role"] == "assistant" and m.get("content"):
            return str(m["content"])
    return "I stopped after reaching the step limit for one turn."


def outcomes(history: list[dict[str, Any]], start: int) -> list[ToolOutcome]:
    """The turn's tool calls (from ``start`` in the history) with their results, in order."""
    results = {m.get("tool_call_id"): m for m in history[start:] if m.get("role") == "tool"}
    return [
        ToolOutcome(
            c["name"],
            c["input"],
            bool((results.get(c["id"]) or {}).get("is_error")),
            str((results.get(c["id"]) or {}).get("content", "")),
        )
        for m in history[start:]
        for c in m.get("tool_calls") or []
    ]


def turn_completed(
    history: list[dict[str, Any]],
    turn: dict[str, Any],
    reply: dict[str, Any],
    *,
    session_id: str,
    previous: str,
    episodic: bool,
) -> TurnCompleted:
    """The record the turn listeners get (``turn_event``); ``previous``: the session's turn before it."""
    done = outcomes(history, turn["start"])
    calls = [
        {"name": o.name, "input": o.input, "is_error": o.is_error, "result": o.result[:500]} for o in done
    ]
    wrong = contradiction(reply["response"], done, turn["message"])
    short = fell_short(reply["status"], reply["response"], done, turn["message"], wrong)
    return {
        "turn_id": reply["turn_id"],
        "session_id": session_id,
        "user_id": turn["user_id"],
        "user_message": turn["message"],
        "status": reply["status"],
        "response": reply["response"],
        "tool_calls": calls,
        "skill_ids": [sid for sid in turn.get("skill_ids") or [] if sid],
        "success": not short,
        "episodic": episodic,
        "truthful": not wrong,
        "fell_short": short,
        "corrects_turn": previous if previous and is_correction(turn["message"]) else "",
        "untrusted": bool(turn["untrusted_seen"]),
        "untrusted_sources": list(turn.get("untrusted_from") or []),
    }


@dataclass(frozen=True, slots=True)
class Asked:
    """What a ``chat`` asked of its turn besides the message (see ``Agent.chat``)."""

    user_id: str = ""
    max_iterations: int = 0
    allowed_tools: list[str] | None = None
    delegation_depth: int = 0
    cron_job: str = ""
    channel: str = ""
    instructions: str = ""
    kanban_card: str = ""

    def check(self, message: str) -> None:
        """The chat's arguments within their bounds, else ``InvalidArgument`` naming the field."""
        if not message.strip():
            raise InvalidArgument("chat: message must not be empty", op="chat", field="message")
        if len(message) > MAX_MESSAGE_CHARS:
            raise InvalidArgument(
                f"chat: message longer than {MAX_MESSAGE_CHARS} characters", field="message"
            )
        if self.max_iterations < 0:
            raise InvalidArgument("chat: max_iterations must be >= 0", field="max_iterations")
        if len(self.instructions) > MAX_INSTRUCTIONS_CHARS:
            raise InvalidArgument(
                f"chat: instructions longer than {MAX_INSTRUCTIONS_CHARS} characters",
                op="chat",
                field="instructions",
            )
        if not 0 <= self.delegation_depth <= MAX_DELEGATION_DEPTH:
            raise InvalidArgument(
                f"chat: delegation_depth must be within 0..{MAX_DELEGATION_DEPTH}", field="delegation_depth"
            )


def new_turn(
    asked: Asked,
    *,
    message: str,
    user: str,
    door: str,
    instructions: str,
    start: int,
    cap: int,
    prompt: tuple[str, str],
    skill_ids: list[str],
    caller: RequestContext,
) -> dict[str, Any]:
    """A new turn as the session keeps it (durable: a resumed turn has all of it). ``cap``: the agent's
    ``max_iterations``; ``prompt``: the turn's stable prefix and per-turn section."""
    allowed = asked.allowed_tools
    return {
        "turn_id": uuid.uuid4().hex,
        "user_id": user,
        "message": message,
        "start": start,
        "iterations": 0,
        "tool_calls": 0,
        # A turn started by one that saw untrusted content (a delegated task) carries it on.
        "untrusted_seen": caller.untrusted,
        "untrusted_from": [caller.provenance] if caller.untrusted and caller.provenance else [],
        "paused": None,
        "max_iterations": min(asked.max_iterations or cap, cap),
        "allowed_tools": None if allowed is None else sorted(set(allowed)),
        "delegation_depth": asked.delegation_depth,
        "cron_job": asked.cron_job,
        "kanban_card": asked.kanban_card,
        "prefix": prompt[0],
        "section": prompt[1],
        "instructions": instructions,
        "door": door,
        "skill_ids": skill_ids,
        "context": {**caller.to_dict(), "channel": asked.channel},
    }


def completion_request(
    turn: dict[str, Any], messages: list[Any], tools: list[dict[str, Any]], session_id: str, stream: str
) -> dict[str, Any]:
    """The turn's ``llm_gateway.completion`` request (``stream``: the live topic, "" when no one watches)."""
    request: dict[str, Any] = {
        "messages": messages,
        "tools": tools,
        "session_id": session_id,
        "user_id": turn["user_id"],
        # The first message (with the tools) is the stable prefix prompt caches key on.
        "cache_prefix_messages": 1,
    }
    if turn.get("cron_job"):
        request["cron_job"] = turn["cron_job"]
    if turn.get("kanban_card"):
        request["kanban_worker"] = "kanban_worker"
    if stream:
        request["stream_topic"] = stream
    return request
