"""Gathering a turn's context from the services on the node, concurrently (one round of hops, not five).

``gather_turn`` asks, at the same time and only where the actor exists: ``tool_executor.list_tools``,
``memory.core_snapshot`` (stable prefix), ``skill_store.match_skills``, ``memory.search_memories`` and
``goals.list_goals`` (per-turn section, after the instructions the turn's door gave, if any). Memories are
asked for as the turn's user sees them (the tenant-shared ones and that user's own), stated facts on their
own and everything, and ranked facts first (``recall.for_prompt``). A collaborator that fails or times out
leaves its part empty: the turn goes on without skills or goals rather than failing.

The tools offered are the turn's toolset selection (``minihermes.context.toolsets``) of the catalogue: views
made once per catalogue (its ``digest``) and filtered once per (catalogue, selection).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any

from minihermes.llm import ToolView
from minihermes.runtime import ActorError, ActorNotFound, Host

from . import prompt, recall
from .toolsets import NO_OFFERING, Offering, ToolChoice, offers


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
    """What the turn offers the model (its toolset selection of the catalogue)."""
    catalogue: Catalogue | None = None
    """Every tool listed to the turn's caller."""
    toolsets: frozenset[str] | None = None
    """The toolsets offered (None: all)."""
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


@dataclass(frozen=True, slots=True, eq=False)
class Catalogue:
    """One tool executor listing as the model sees it: the views in name order, each one's toolset (empty
    for a registered tool) and what its toolsets declare about being offered. Shared, read-only."""

    digest: str
    views: tuple[ToolView, ...]
    toolsets: tuple[str, ...]
    offering: Offering = NO_OFFERING

    def toolset_of(self, names: Iterable[str]) -> set[str]:
        """The toolsets of the named tools (registered tools have none)."""
        wanted = set(names)
        return {ts for v, ts in zip(self.views, self.toolsets, strict=True) if ts and v["name"] in wanted}

    def toolset_names(self) -> set[str]:
        """The toolsets with at least one tool listed here."""
        return {ts for ts in self.toolsets if ts}


_CATALOGUES: OrderedDict[str, Catalogue] = OrderedDict()
"""Catalogue digest -> its views, least recently used first out: every session of a catalogue gets the same
read-only views, so the gateway validates each spec once per catalogue, not once per session."""
_OFFERS: OrderedDict[tuple[str, frozenset[str] | None], list[ToolView]] = OrderedDict()
"""(catalogue digest, toolset selection) -> the views offered: a turn of an already seen selection filters
nothing again."""
_CACHE_MAX = 64


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    cache[key] = value
    if len(cache) > _CACHE_MAX:
        cache.popitem(last=False)


async def catalogue(host: Host, timeout: float = 10.0) -> Catalogue:
    """The tool executor's listing for the caller (one ask; its views made once per catalogue ``digest``:
    the same bytes)."""
    if not host.has_actor("tool_executor"):
        return Catalogue("", (), ())
    reply = await host.ask("tool_executor", "list_tools", {}, timeout=timeout)
    digest = reply.get("digest")
    key = digest if isinstance(digest, str) and digest else None
    found = _CATALOGUES.get(key) if key else None
    if key and found is not None:
        _CATALOGUES.move_to_end(key)
        return found
    listed = sorted(reply.get("tools", []), key=lambda t: str(t.get("name", "")))
    views = tuple(
        ToolView(name=t["name"], description=t.get("description", ""), input_schema=t.get("input_schema", {}))
        for t in listed
    )
    facts = reply.get("toolsets")
    offering = Offering.of(listed, facts if isinstance(facts, dict) else {})
    cat = Catalogue(key or "", views, tuple(str(t.get("toolset") or "") for t in listed), offering)
    if key:
        _remember(_CATALOGUES, key, cat)
    return cat


def offered(cat: Catalogue, selection: frozenset[str] | None) -> list[dict[str, Any]]:
    """The views of ``cat`` a turn of ``selection`` offers (``minihermes.context.toolsets``): the tools of
    the selected toolsets and every registered tool; None: all of them. A new list of shared views, made
    once per (catalogue, selection)."""
    if selection is None:
        return list(cat.views)
    key = (cat.digest, selection)
    views = _OFFERS.get(key) if cat.digest else None
    if views is None:
        views = [v for v, ts in zip(cat.views, cat.toolsets, strict=True) if offers(selection, ts, v["name"])]
        if cat.digest:
            _remember(_OFFERS, key, views)
    else:
        _OFFERS.move_to_end(key)
    return list(views)


async def list_tools(
    host: Host, timeout: float = 10.0, selection: frozenset[str] | None = None
) -> list[dict[str, Any]]:
    """The tools a turn of ``selection`` offers (None: the whole catalogue) in name order, reduced to what
    the model needs (read-only views: the gateway validates each spec once, and sessions of the same
    catalogue and selection share them)."""
    return offered(await catalogue(host, timeout), selection)


async def gather_turn(
    host: Host,
    *,
    message: str,
    session_id: str,
    user_id: str,
    soul: str,
    project: str,
    settings: TurnSettings,
    tool_choice: ToolChoice | None = None,
    kept_tools: Iterable[str] = (),
    instructions: str = "",
    door: str = "",
) -> TurnContext:
    """The turn's context. ``tool_choice`` decides the toolsets offered (None: every tool listed);
    ``kept_tools``: the tools the session's previous turn called (their toolsets stay offered);
    ``instructions``: what ``door`` (the kanban worker, a cron run ...) asks of this turn, first in the
    per-turn section."""
    s = settings
    t = s.timeout
    search = {
        "query": message[:1000],
        "session_id": session_id,
        "user_id": user_id,
        "min_score": s.memory_min_score,
    }
    calls: list[Awaitable[Any]] = [
        catalogue(host, t),
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
        # Stated facts on their own, undecayed (a fact the user stated stays true until they change it, and a
        # crowd of fresh episodes must not push it out), then everything, episodes included (search leaves
        # them out unless asked); ``recall.for_prompt`` puts the facts first.
        _optional(
            host,
            "memory",
            "search_memories",
            {**search, "limit": s.memory_top_k, "kind": "semantic", "decay": False},
            t,
        )
        if s.memory_top_k > 0
        else _none(),
        _optional(
            host,
            "memory",
            "search_memories",
            {**search, "limit": min(100, s.memory_top_k * 3), "include_episodes": True},
            t,
        )
        if s.memory_top_k > 0
        else _none(),
        _optional(host, "goals", "list_goals", {"session_id": session_id, "status": "active"}, t),
    ]
    cat, core, skills, facts, memories, goals = await asyncio.gather(*calls)
    selection = (
        None if tool_choice is None else tool_choice.select(message, cat.toolset_of(kept_tools), cat.offering)
    )
    core_list = list((core or {}).get("memories") or [])
    prefix = prompt.stable_prefix(soul, project, core_list)
    core_keys = {m["key"] for m in core_list}
    skill_text, skill_ids = prompt.skills_section(list((skills or {}).get("skills") or []), s.skills_tokens)
    # Core facts are in the prefix already; do not repeat them.
    candidates = [*((facts or {}).get("memories") or []), *((memories or {}).get("memories") or [])]
    found = recall.for_prompt((m for m in candidates if m.get("key") not in core_keys), s.memory_top_k)
    goal_list = list((goals or {}).get("goals") or [])
    section = prompt.turn_section(
        prompt.instructions_section(instructions, door),
        skill_text,
        prompt.memories_section(found),
        prompt.goals_section(goal_list),
    )
    return TurnContext(
        prefix=prefix,
        section=section,
        tools=offered(cat, selection),
        catalogue=cat,
        toolsets=selection,
        skill_ids=skill_ids,
        memory_keys=[str(m.get("key")) for m in found],
        goal_ids=[str(g.get("goal_id", "")) for g in goal_list],
    )


async def _none() -> None:
    return None
