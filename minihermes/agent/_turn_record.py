"""What a turn leaves when it ends: its reply and the ``turn_completed`` record its listeners get.

The agent runs the loop; this module says what the result of a turn is. ``reply`` is the shape every ending
shares (finished, stopped, paused), ``add_usage`` sums one LLM call into the turn's tokens and cost, and
``turn_completed`` builds the listeners' record, judging the turn's success from its tool results
(``minihermes.context.consistency``: a failed call, the status, an answer that contradicts its results, a
turn that found nothing or says it could not do the request).
"""

from __future__ import annotations

from typing import Any

from minihermes.context.consistency import ToolOutcome, contradiction, fell_short, is_correction
from minihermes.turn_event import TurnCompleted


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
