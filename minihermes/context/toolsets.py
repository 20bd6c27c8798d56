"""Which toolsets a turn offers the model: configuration, plus what the request calls for.

Every tool schema offered is sent with every LLM call of a turn, so a plain chat turn offers only the core
toolsets, and the others join when they are configured or when the turn's request calls for them. What
each toolset is, is declared on it (``minihermes.tools.Toolset``: ``offered``, ``intents``, ``purpose``; a
tool may declare its own ``offered``) and reaches a turn with the tool executor's listing: ``Offering``
reads it once per catalogue. Nothing here knows a toolset by name.

- configured: the agent's ``toolsets`` arg (default ``["core"]``), the turn's tenant's entry in the agent's
  ``tenant_toolsets`` arg, and the session's own (``agent.set_toolsets``). ``core`` names every tool
  declared ``offered="core"`` (the default of a toolset: calculator, memory, service-link HTTP, session
  files, terminal, session search, ``skill_view``); ``all`` offers every tool the executor lists;
- called for (``auto_toolsets``, on by default): a toolset declared ``offered="on_request"`` joins when the
  user's message matches one of its ``intents`` (kanban: "card", "board", "to-do list"; schedule: "remind",
  "every monday"; goals, delegation, skills, mcp; a question such as "what can you do" matches
  ``HELP_INTENT``, which the work toolsets declare), and a toolset whose tools the session called in its
  previous turn stays offered for the next one (a follow-up such as "now move it to done" keeps its tools);
- always: tools registered at run time (a tenant's service links, its MCP servers' tools, a user's own
  self-written tools): registering one is its configuration. A turn given an explicit tool allow-list (a
  delegated child, a cron job) is offered exactly those tools.
- found (with ``auto_toolsets``): every other toolset is listed by ``find_tools``, which the turn offers too
  and which adds the toolsets the model names to the rest of the turn (``minihermes.context.find_tools``):
  the intents only spare the model that call.

Offering is not permission: the tool executor runs only the tools it has, for callers who may call them, and
a call to a tool the turn was not offered is still checked the same way.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minihermes.tools.catalog import Toolset

CORE = "core"
"""The group of the tools declared ``offered="core"``."""
ALL = "all"
GROUPS: tuple[str, ...] = (CORE,)
"""Names that stand for several toolsets."""
DEFAULT: tuple[str, ...] = (CORE,)

HELP_INTENT = (
    r"^\W*(?:hi\W+|hello\W+)?(?:help(?:\s+me)?|(?:can\s+you\s+)?help\s+me|what\s+can\s+you\s+do|"
    r"what\s+do\s+you\s+understand|what\s+can\s+i\s+ask(?:\s+you)?)\W*$"
)
"""A question about what the assistant can do, for the intents of the toolsets that answer it truly (the
work toolsets: kanban, schedule, goals)."""


@dataclass(frozen=True, slots=True, eq=False)
class Offering:
    """What a catalogue's toolsets declare about being offered, read once per catalogue.

    ``core``: the entries the ``core`` group stands for (a toolset's name when all its tools are core,
    ``toolset.tool`` for a core tool of an on-request toolset); ``intents``: ``(toolset, pattern)`` pairs;
    ``purposes``: what each toolset is for (``find_tools``' lines; may be empty)."""

    core: frozenset[str] = frozenset()
    intents: tuple[tuple[str, re.Pattern[str]], ...] = ()
    purposes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tools: Iterable[Mapping[str, Any]], toolsets: Mapping[str, Mapping[str, Any]]) -> Offering:
        """From a tool executor's listing: its ``tools`` entries (``toolset``, ``name``, ``offered``) and its
        ``toolsets`` facts (``intents``, ``purpose``). A malformed intent is left out, not fatal."""
        members: dict[str, list[tuple[str, bool]]] = {}
        for t in tools:
            ts = str(t.get("toolset") or "")
            if ts:
                members.setdefault(ts, []).append((str(t.get("name")), t.get("offered", CORE) == CORE))
        core: set[str] = set()
        for ts, entries in members.items():
            if all(is_core for _, is_core in entries):
                core.add(ts)
            else:
                core.update(f"{ts}.{name}" for name, is_core in entries if is_core)
        intents: list[tuple[str, re.Pattern[str]]] = []
        purposes: dict[str, str] = {}
        for ts, facts in sorted(toolsets.items()):
            if ts not in members:
                continue
            for source in facts.get("intents") or ():
                try:
                    intents.append((ts, re.compile(str(source), re.IGNORECASE)))
                except re.error:
                    continue
            if facts.get("purpose"):
                purposes[ts] = str(facts["purpose"])
        return cls(frozenset(core), tuple(intents), purposes)

    @classmethod
    def of_toolsets(cls, toolsets: Iterable[Toolset]) -> Offering:
        """From ``Toolset`` objects (what a tool executor given them would list)."""
        given = list(toolsets)
        tools = [d.listing() for t in given for d in t.defs.values()]
        return cls.of(tools, {t.name: t.facts() for t in given})

    def wanted_by(self, message: str) -> frozenset[str]:
        """The toolsets ``message`` calls for (their ``intents``)."""
        return _wanted(self.intents, message) if self.intents else frozenset()


NO_OFFERING = Offering()


@functools.lru_cache(maxsize=128)
def _wanted(intents: tuple[tuple[str, re.Pattern[str]], ...], message: str) -> frozenset[str]:
    """Cached: each LLM call of a turn (and the context assembly) asks again for the same message, and the
    answer is a pure function of it and the catalogue's intents."""
    return frozenset(name for name, pattern in intents if pattern.search(message))


class UnknownToolset(ValueError):
    """A toolset name nobody knows (the caller turns it into a ``ConfigError`` or ``InvalidArgument``)."""

    def __init__(self, name: object, known: Iterable[str]) -> None:
        self.name = name
        self.known = sorted({*known, *GROUPS, ALL})
        super().__init__(f"unknown toolset {name!r} (known: {', '.join(self.known)})")


def check_names(names: object, known: Iterable[str] | None = None) -> tuple[str, ...]:
    """``names`` as a tuple of toolset names, each a group, ``all`` or (when ``known`` is given) one of
    ``known``; raises ``UnknownToolset`` (or ``ValueError`` for something that is not a list of names)."""
    if isinstance(names, str) or not isinstance(names, list | tuple):
        raise ValueError("toolsets must be a list of toolset names")
    known_set = None if known is None else set(known)
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise UnknownToolset(name, known_set or ())
        if name not in GROUPS and name != ALL and known_set is not None and name not in known_set:
            raise UnknownToolset(name, known_set)
        out.append(name)
    return tuple(dict.fromkeys(out))


def selection(
    configured: Iterable[str],
    message: str = "",
    *,
    offering: Offering,
    auto: bool = True,
    kept: Iterable[str] = (),
) -> frozenset[str] | None:
    """The toolsets a turn offers: ``configured`` (``core`` expanded by ``offering``), plus, with ``auto``,
    what ``message`` calls for (``offering``'s intents) and the toolsets ``kept`` from the previous turn.
    None: every tool (``all`` configured). An entry ``toolset.tool`` offers that one tool of a toolset (see
    ``offers``)."""
    chosen: set[str] = set()
    for name in configured:
        if name == ALL:
            return None
        if name == CORE:
            chosen |= offering.core
        else:
            chosen.add(name)
    if auto:
        chosen |= offering.wanted_by(message)
        chosen.update(kept)
    return frozenset(chosen)


def offers(selection: frozenset[str] | None, toolset: str, tool: str) -> bool:
    """Whether a turn of ``selection`` offers ``tool`` of ``toolset`` (empty: a registered tool, always)."""
    return selection is None or not toolset or toolset in selection or f"{toolset}.{tool}" in selection


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """What decides a turn's toolsets: the configured names (agent, tenant and session, in that order) and
    whether the request may add the toolsets it calls for."""

    configured: tuple[str, ...] = DEFAULT
    auto: bool = True

    def select(self, message: str, kept: Iterable[str], offering: Offering) -> frozenset[str] | None:
        """The toolsets of a turn of ``message``, with ``kept`` from the previous turn, in a catalogue of
        ``offering`` (``Catalogue.offering``)."""
        return selection(self.configured, message, offering=offering, auto=self.auto, kept=kept)


__all__ = [
    "ALL",
    "CORE",
    "DEFAULT",
    "GROUPS",
    "HELP_INTENT",
    "NO_OFFERING",
    "Offering",
    "ToolChoice",
    "UnknownToolset",
    "check_names",
    "offers",
    "selection",
]
