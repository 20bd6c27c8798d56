"""Gathering a turn's context from the services on the node, concurrently (one round of hops, not five).

``gather_turn`` asks, at the same time and only where the actor exists: ``tool_executor.list_tools``,
``memory.core_snapshot`` (stable prefix), ``skill_store.match_skills``, ``memory.search_memories`` and
``goals.list_goals`` (per-turn section). Memories are asked for as the turn's user sees them (the
tenant-shared ones and that user's own). A collaborator that fails or times out leaves its part empty: the
turn goes on without skills or goals rather than failing.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from minihermes.llm import ToolView
from minihermes.runtime import ActorError, ActorNotFound, Host

from . import prompt


@dataclass
class TurnSettings:
    """Agent args that shape the prompt."""

    skills_limit: int = 3
    skills_tokens: int = 1_500
    memory_top_k: int = 5
    memory_min_score: float = 0.3
    core_chars: int = 4_000
    timeout: float = 10.0


@dataclass
class TurnContext:
    prefix: str
    section: str
    tools: list[dict[str, Any]]
    skill_ids: list[str] = field(default_factory=list)
    memory_keys: list[str] = field(default_factory=list)
    goal_ids: list[str] = field(default_factory=list)


async def _optional(host: Host, target: str, op: str, payload: dict[str, Any], timeout: float) -> Any:
    if not host.has_actor(target):
        return None
    try:
        return await host.ask(target, op, payload, timeout=timeout)
    except (ActorError, ActorNotFound, TimeoutError) as e:
        host.log.info("turn context: %s.%s unavailable (%s)", target, op, e)
        return None


_TOOL_VIEWS: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
"""Catalogue digest -> its tool views, least recently used first out: every session of a catalogue gets the
same read-only views, so the gateway validates each spec once per catalogue, not once per session."""
_TOOL_VIEWS_MAX = 64


async def list_tools(host: Host, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The tool catalogue in name order, reduced to what the model needs (read-only: the gateway validates
    each spec once, and sessions of the same catalogue (its ``digest``: the same bytes) share the views)."""
    if not host.has_actor("tool_executor"):
        return []
    reply = await host.ask("tool_executor", "list_tools", {}, timeout=timeout)
    digest = reply.get("digest")
    key = digest if isinstance(digest, str) and digest else None
    views = _TOOL_VIEWS.get(key) if key else None
    if key and views is not None:
        _TOOL_VIEWS.move_to_end(key)
        return list(views)
    views = prompt.sort_tools(
        [
            ToolView(
                name=t["name"],
                description=t.get("description", ""),
                input_schema=t.get("input_schema", {}),
            )
            for t in reply.get("tools", [])
        ]
    )
    if key:
        _TOOL_VIEWS[key] = views
        if len(_TOOL_VIEWS) > _TOOL_VIEWS_MAX:
            _TOOL_VIEWS.popitem(last=False)
    return list(views)


async def gather_turn(
    host: Host,
    *,
    message: str,
    session_id: str,
    user_id: str,
    soul: str,
    project: str,
    settings: TurnSettings,
) -> TurnContext:
    s = settings
    t = s.timeout
    calls: list[Awaitable[Any]] = [
        list_tools(host, t),
        # The turn's user's view: tenant-shared core facts and that user's own (never another user's).
        _optional(host, "memory", "core_snapshot", {"max_chars": s.core_chars, "user_id": user_id}, t),
        _optional(
            host,
            "skill_store",
            "match_skills",
            {"query": message, "limit": s.skills_limit, "user_id": user_id, "session_id": session_id},
            t,
        )
        if s.skills_limit > 0
        else _none(),
        _optional(
            host,
            "memory",
            "search_memories",
            {
                "query": message[:1000],
                "limit": s.memory_top_k,
                "session_id": session_id,
                "user_id": user_id,
                "min_score": s.memory_min_score,
            },
            t,
        )
        if s.memory_top_k > 0
        else _none(),
        _optional(host, "goals", "list_goals", {"session_id": session_id, "status": "active"}, t),
    ]
    tools, core, skills, memories, goals = await asyncio.gather(*calls)
    core_list = list((core or {}).get("memories") or [])
    prefix = prompt.stable_prefix(soul, project, core_list)
    core_keys = {m["key"] for m in core_list}
    skill_text, skill_ids = prompt.skills_section(list((skills or {}).get("skills") or []), s.skills_tokens)
    # Core facts are in the prefix already; do not repeat them.
    found = [m for m in (memories or {}).get("memories") or [] if m.get("key") not in core_keys]
    goal_list = list((goals or {}).get("goals") or [])
    section = prompt.turn_section(skill_text, prompt.memories_section(found), prompt.goals_section(goal_list))
    return TurnContext(
        prefix=prefix,
        section=section,
        tools=tools,
        skill_ids=skill_ids,
        memory_keys=[str(m.get("key")) for m in found],
        goal_ids=[str(g.get("goal_id", "")) for g in goal_list],
    )


async def _none() -> None:
    return None


TURN_META = "turn_meta:"
"""kv key (+ session id) where the agent keeps the running turn's delegation depth, cron job and tool
allow-list when it has any."""


async def turn_info(host: Host, session_id: str) -> dict[str, Any]:
    """What a tool may know about the turn that called it: ``{delegation_depth, cron_job, allowed_tools}``
    (defaults when the turn has none of them)."""
    meta = await host.kv.get(TURN_META + session_id) if session_id else None
    out: dict[str, Any] = {"delegation_depth": 0, "cron_job": "", "allowed_tools": None}
    if isinstance(meta, dict):
        out.update({k: meta.get(k, out[k]) for k in out})
        out["turn_id"] = meta.get("turn_id", "")
    return out
