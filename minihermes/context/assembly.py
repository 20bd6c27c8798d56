"""Gathering a turn's context from the services on the node, concurrently (one round of hops).

``gather_turn`` asks, at the same time, ``tool_executor.list_tools`` and every *prompt contributor*: each actor
type on the node that takes ``turn_context`` (``contributors``, as ``turn_event.listeners`` finds the turn
listeners), with the turn's message, session, user and ``limits`` (the agent's settings). Each answers with
its parts (``ContextPart``: text, token estimate, priority, place, ids): memory its core facts (stable prefix)
and the memories recalled for the message, the skill store the matched skills, goals the session's active
goals. Assembly orders the parts by priority, keeps those that fit the budget (``trim``), and builds the
stable prefix (the identity, then the prefix parts) and the per-turn section (the door's instructions, then
the turn parts). A contributor that fails or times out leaves its part out: the turn goes on without skills
or goals rather than failing. A new contributor is an actor with that op in the node's config; neither the
agent nor this module names it.

The tools offered are the turn's toolset selection (``minihermes.context.toolsets``) of the catalogue: views
made once per catalogue (its ``digest``) and filtered once per (catalogue, selection).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypedDict

from minihermes.llm import ToolView
from minihermes.runtime import ActorError, ActorNotFound, Host

from . import prompt
from .tokens import count_tokens
from .toolsets import NO_OFFERING, Offering, ToolChoice, offers


@dataclass
class TurnSettings:
    """Agent args that shape the prompt."""

    skills_limit: int = 3
    skills_tokens: int = 1_500
    memory_top_k: int = 5
    memory_min_score: float = 0.3
    core_chars: int = 4_000
    context_tokens: int = 8_000
    """The contributed parts' budget (identity and the door's instructions are not counted)."""
    timeout: float = 10.0

    def limits(self) -> TurnLimits:
        """What the contributors are told of these settings (``turn_context``'s ``limits``)."""
        return {
            "skills_limit": self.skills_limit,
            "skills_tokens": self.skills_tokens,
            "memory_top_k": self.memory_top_k,
            "memory_min_score": self.memory_min_score,
            "core_chars": self.core_chars,
        }


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
    ids: dict[str, list[str]] = field(default_factory=dict)
    """What each part shows, by the part's name (``skills``: the skill ids the prompt gives)."""


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


TURN_CONTEXT: Final = "turn_context"
"""The op a prompt contributor takes: an actor type that declares it gives a part of every turn's prompt."""


class TurnLimits(TypedDict, total=False):
    """The agent's settings that bound the parts (each contributor reads its own)."""

    skills_limit: int
    skills_tokens: int
    memory_top_k: int
    memory_min_score: float
    core_chars: int


class ContextPart(TypedDict):
    """One contributor's part of a turn's prompt (``turn_context``'s reply holds a list of them)."""

    name: str
    """What the part is (``skills``, ``memories``, ``core_memory``, ``goals``): its ``ids`` are kept under it."""
    text: str
    """Markdown, starting with its own ``## `` heading."""
    tokens: int
    priority: int
    """Higher first within its place; the lowest go first when the parts exceed the budget."""
    place: str
    """``prefix`` (the stable prefix, after the identity: only what stays the same across a session's
    turns) or ``turn`` (the per-turn section, after the door's instructions)."""
    ids: list[str]
    """What the part shows (skill ids, memory keys, goal ids)."""


def context_part(
    name: str, text: str, *, priority: int, place: str = "turn", ids: Iterable[str] = ()
) -> ContextPart:
    """A part of ``text`` (its token estimate counted here)."""
    return {
        "name": name,
        "text": text,
        "tokens": count_tokens(text),
        "priority": priority,
        "place": place,
        "ids": list(ids),
    }


def contributors(host: Host) -> tuple[str, ...]:
    """The prompt contributors on this node: the actor types that take ``turn_context``, in name order."""
    return tuple(host.actors_taking(TURN_CONTEXT))


def _parts(replies: Iterable[Any]) -> list[ContextPart]:
    """The well-formed parts of the contributors' replies, highest priority first (ties in contributor
    order)."""
    parts: list[ContextPart] = []
    for reply in replies:
        given = reply.get("parts") if isinstance(reply, dict) else None
        for part in given if isinstance(given, list) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"].strip():
                parts.append(part)  # type: ignore[arg-type]
    parts.sort(key=lambda p: -int(p.get("priority") or 0))
    return parts


def trim(parts: list[ContextPart], budget: int, log: Any = None) -> list[ContextPart]:
    """The parts that fit ``budget`` tokens, taken in priority order (a part that does not fit is left
    out, and a smaller one after it may still fit)."""
    kept, used = [], 0
    for part in parts:
        tokens = int(part.get("tokens") or 0)
        if used + tokens > budget:
            if log is not None:
                log.info("turn context: %s left out (%d tokens over the budget)", part.get("name"), tokens)
            continue
        used += tokens
        kept.append(part)
    return kept


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
    sources: Iterable[str] | None = None,
) -> TurnContext:
    """The turn's context. ``tool_choice`` decides the toolsets offered (None: every tool listed);
    ``kept_tools``: the tools the session's previous turn called (their toolsets stay offered);
    ``instructions``: what ``door`` (the kanban worker, a cron run ...) asks of this turn, first in the
    per-turn section; ``sources``: the prompt contributors to ask (None: ``contributors(host)``)."""
    s = settings
    t = s.timeout
    ask = {"message": message, "session_id": session_id, "user_id": user_id, "limits": s.limits()}
    names = contributors(host) if sources is None else tuple(sources)
    cat, *replies = await asyncio.gather(
        catalogue(host, t), *(_optional(host, name, TURN_CONTEXT, ask, t) for name in names)
    )
    selection = (
        None if tool_choice is None else tool_choice.select(message, cat.toolset_of(kept_tools), cat.offering)
    )
    parts = trim(_parts(replies), s.context_tokens, host.log)
    head = prompt.stable_prefix(soul, project, [])
    prefix = "\n\n".join([head, *(p["text"] for p in parts if p.get("place") == "prefix")])
    section = prompt.turn_section(
        prompt.instructions_section(instructions, door),
        *(p["text"] for p in parts if p.get("place") != "prefix"),
    )
    ids: dict[str, list[str]] = {}
    for p in parts:
        ids.setdefault(str(p.get("name") or ""), []).extend(str(i) for i in p.get("ids") or ())
    return TurnContext(
        prefix=prefix,
        section=section,
        tools=offered(cat, selection),
        catalogue=cat,
        toolsets=selection,
        ids=ids,
    )
