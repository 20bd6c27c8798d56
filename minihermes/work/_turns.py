"""Run one agent turn at most once per piece of work, across crashes and redeliveries.

Cron runs, queued tasks, kanban cards and orchestrator sub-tasks all end in ``agent.chat``. Their triggers
are at-least-once (a channel redelivers what was not acked), but the turn must not run twice in effect. The
agent's turn is durable by itself: once its user message is checkpointed, a crash resumes the turn rather
than losing it. So before a turn we write a marker (the session's finished-turn count); on redelivery the
marker tells us whether our turn already began, and the session's counters tell us whether it finished:

- a reply saved on the marker: return it, run nothing;
- the session has finished more turns than the marker recorded: that turn was ours (callers keep one turn
  per session in flight): return ``last_turn``;
- a turn still running (resumed after a restart): wait for it, then as above;
- otherwise the turn never became durable (the crash came first, or it failed): run it now.

The same check follows a chat ask whose outcome is unknown: the node running the turn died (``node_down``)
or the ask timed out while the turn went on. The session finishes a durable turn wherever it is active next,
so its reply is taken rather than the prompt run again (by a retry that would carry a new marker).
"""

from __future__ import annotations

from typing import Any

from minihermes.runtime import ActorError, AskTimeout, Host

MARKER_TTL = 7 * 86400.0
"""Markers outlive any redelivery window by far, and then go."""
UNKNOWN_OUTCOME = frozenset({"node_down", AskTimeout.code})
"""Chat errors after which the turn may have run (or may still be running)."""


def _chat_params(host: Host) -> frozenset[str]:
    """The arguments of ``chat`` on the agent this node runs (asked of the node: work never imports the
    agent, the composition root gives the node both)."""
    agent = host.actor_types().get("agent")
    chat = agent.ops().get("chat") if agent is not None else None
    return frozenset(chat.params) if chat is not None else frozenset()


def agent_supports(host: Host, *args: str) -> bool:
    """Whether this node's ``agent.chat`` takes these optional arguments (budgets, tool restriction)."""
    params = _chat_params(host)
    return all(a in params for a in args)


def chat_payload(
    host: Host, message: str, session_id: str, user_id: str, extra: dict[str, Any]
) -> dict[str, Any]:
    """The chat arguments. Optional labels the agent does not know yet (``cron_job``) are left out; limits
    that matter for safety are checked by the caller with ``agent_supports`` first."""
    params = _chat_params(host)
    payload: dict[str, Any] = {"message": message, "session_id": session_id}
    if user_id:
        payload["user_id"] = user_id
    payload.update({k: v for k, v in extra.items() if k in params})
    return payload


async def _session_stats(host: Host, session_id: str) -> dict[str, Any]:
    stats: dict[str, Any] = await host.ask("agent", "get_stats", {"session_id": session_id})
    return stats


async def _wait_idle(host: Host, session_id: str, timeout: float, poll: float) -> dict[str, Any]:
    deadline = host.clock.monotonic() + timeout
    while True:
        stats = await _session_stats(host, session_id)
        if not stats.get("turn_in_progress") or stats.get("paused"):
            return stats
        if host.clock.monotonic() >= deadline:
            raise AskTimeout(f"the turn of session {session_id} did not finish within {timeout:g}s")
        await host.clock.sleep(poll)


async def run_turn_once(
    host: Host,
    marker: str,
    session_id: str,
    message: str,
    *,
    user_id: str = "",
    extra: dict[str, Any] | None = None,
    timeout: float = 600.0,
    poll: float = 0.2,
) -> dict[str, Any]:
    """The reply of the one turn that ``marker`` names (see the module docstring). ActorErrors of the turn
    (LLM unavailable, budget) propagate; the caller decides about retries."""
    key = f"work:turn:{marker}"
    record = await host.kv.get(key)
    if isinstance(record, dict):
        if isinstance(record.get("reply"), dict):
            return dict(record["reply"])
        found = await _finished(host, key, record, session_id, timeout, poll)
        if found is not None:
            return found
    stats = await _wait_idle(host, session_id, timeout, poll)
    record = {"session_id": session_id, "turns_before": int(stats.get("turns", 0))}
    await host.kv.put(key, record, ttl=MARKER_TTL)
    payload = chat_payload(host, message, session_id, user_id, extra or {})
    try:
        reply: dict[str, Any] = await host.ask("agent", "chat", payload, timeout=timeout)
    except ActorError as e:
        if e.code not in UNKNOWN_OUTCOME:
            raise
        found = await _finished(host, key, record, session_id, timeout, poll)
        if found is None:
            raise  # the turn never became durable: the caller's retry runs it
        return found
    await host.kv.put(key, {**record, "reply": reply}, ttl=MARKER_TTL)
    return reply


async def _finished(
    host: Host, key: str, record: dict[str, Any], session_id: str, timeout: float, poll: float
) -> dict[str, Any] | None:
    """The reply of the turn ``record`` marks if the session finished it (waiting for it while it runs), a
    paused reply if it waits for approval, else None (it never became durable)."""
    stats = await _wait_idle(host, session_id, timeout, poll)
    if stats.get("paused"):
        return {"status": "paused", "session_id": session_id, "response": ""}
    if int(stats.get("turns", 0)) > int(record.get("turns_before", 0)):
        reply: dict[str, Any] = await host.ask("agent", "last_turn", {"session_id": session_id})
        await host.kv.put(key, {**record, "reply": reply, "recovered": True}, ttl=MARKER_TTL)
        return reply
    return None
