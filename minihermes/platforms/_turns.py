"""One agent turn per inbound message, across crashes and redeliveries.

Before the turn a marker keeps the session's finished-turn count; a redelivered message whose marker exists
takes the session's ``last_turn`` if the session finished a turn since (the turn was ours: one message is
handled at a time per connection), waits while a turn runs (resumed after a restart), and only runs the
turn again if it never became durable. The same scheme as the work actors' (``minihermes.work._turns``),
kept here because sibling packages share no code.
"""

from __future__ import annotations

from typing import Any

from minihermes.runtime import ActorError, AskTimeout, Host

MARKER_TTL = 7 * 86400.0
_UNKNOWN_OUTCOME = frozenset({"node_down", AskTimeout.code})


async def _stats(host: Host, session_id: str) -> dict[str, Any]:
    stats: dict[str, Any] = await host.ask("agent", "get_stats", {"session_id": session_id})
    return stats


async def _wait_idle(host: Host, session_id: str, timeout: float) -> dict[str, Any]:
    deadline = host.clock.monotonic() + timeout
    while True:
        stats = await _stats(host, session_id)
        if not stats.get("turn_in_progress") or stats.get("paused"):
            return stats
        if host.clock.monotonic() >= deadline:
            raise AskTimeout(f"the turn of session {session_id} did not finish within {timeout:g}s")
        await host.clock.sleep(0.2)


async def _finished(
    host: Host, record: dict[str, Any], session_id: str, timeout: float
) -> dict[str, Any] | None:
    stats = await _wait_idle(host, session_id, timeout)
    if stats.get("paused"):
        return {"status": "paused", "session_id": session_id, "response": ""}
    if int(stats.get("turns", 0)) > int(record.get("turns_before", 0)):
        reply: dict[str, Any] = await host.ask("agent", "last_turn", {"session_id": session_id})
        return reply
    return None


async def run_turn_once(
    host: Host, marker: str, session_id: str, payload: dict[str, Any], *, timeout: float = 600.0
) -> dict[str, Any]:
    """The reply of the one turn ``marker`` names; ``payload`` is ``agent.chat``'s (without session_id)."""
    key = f"platform_turn:{marker}"
    record = await host.kv.get(key)
    if isinstance(record, dict) and record.get("session_id") == session_id:
        found = await _finished(host, record, session_id, timeout)
        if found is not None:
            return found
    stats = await _wait_idle(host, session_id, timeout)
    record = {"session_id": session_id, "turns_before": int(stats.get("turns", 0))}
    await host.kv.put(key, record, ttl=MARKER_TTL)
    try:
        reply: dict[str, Any] = await host.ask(
            "agent", "chat", {**payload, "session_id": session_id}, timeout=timeout
        )
    except ActorError as e:
        if e.code not in _UNKNOWN_OUTCOME:
            raise
        found = await _finished(host, record, session_id, timeout)
        if found is None:
            raise
        return found
    return reply
