"""Which toolsets a turn offers the model: configuration, plus what the request calls for.

Every tool schema offered is sent with every LLM call of a turn, so a plain chat turn offers only the core
toolsets, and the others join when they are configured or when the turn's request calls for them:

- configured: the agent's ``toolsets`` arg (default ``["core"]``), the turn's tenant's entry in the agent's
  ``tenant_toolsets`` arg, and the session's own (``agent.set_toolsets``). ``core`` names ``CORE``; ``all``
  offers every tool the executor lists (what every turn offered before toolsets were chosen);
- called for (``auto_toolsets``, on by default): ``wanted_by`` reads the user's message with a few keyword
  patterns (``INTENTS``: "kanban", "card", "board", "todo", "to-do list" -> ``kanban``; "what can you do",
  "help" -> ``kanban``, ``schedule`` and ``goals``; "remind", "every monday", "schedule",
  "cron" -> ``schedule``; "goal" -> ``goals``; "delegate", "subagent" -> ``delegation``; "create a tool",
  "skill" -> ``skills``; "mcp" -> ``mcp``), and a toolset whose tools the session called in its previous
  turn stays offered for the next one (a follow-up such as "now move it to done" keeps its tools);
- always: tools registered at run time (a tenant's service links, its MCP servers' tools, a user's own
  self-written tools): registering one is its configuration. A turn given an explicit tool allow-list (a
  delegated child, a cron job) is offered exactly those tools.
- found (with ``auto_toolsets``): every other toolset is listed by ``find_tools``, which the turn offers too
  and which adds the toolsets the model names to the rest of the turn (``minihermes.context.find_tools``):
  the patterns only spare the model that call.

Offering is not permission: the tool executor runs only the tools it has, for callers who may call them, and
a call to a tool the turn was not offered is still checked the same way.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

CORE: tuple[str, ...] = (
    "compute",
    "memory",
    "web",
    "files",
    "terminal",
    "session_search",
    "skills.skill_view",
)
"""The core: calculator, memory, service-link HTTP, session files, terminal, session search, and reading the
skills the prompt lists (``skill_view``, one tool of the ``skills`` toolset: ``toolset.tool`` names a single
tool). The rest of ``skills`` (``skill_manage``, ``run_skill_tool``) is skill management; a user's own
self-written tools are registered tools, offered always."""
ALL = "all"
GROUPS: dict[str, tuple[str, ...]] = {"core": CORE}
"""Names that stand for several toolsets."""
DEFAULT: tuple[str, ...] = ("core",)

_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)days?"
_EVERY = rf"every\s+(?:other\s+|\d+\s+)?(?:{_WEEKDAY}|day|week|month|year|hour|minute|morning|evening|night|weekday)s?"
_HELP = re.compile(
    r"^\W*(?:hi\W+|hello\W+)?(?:help(?:\s+me)?|(?:can\s+you\s+)?help\s+me|what\s+can\s+you\s+do|"
    r"what\s+do\s+you\s+understand|what\s+can\s+i\s+ask(?:\s+you)?)\W*$",
    re.IGNORECASE,
)
"""A question about what the assistant can do: answered truly only with the work toolsets offered."""
INTENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "kanban",
        re.compile(
            r"\bkanban|\bcards?\b|\bboards?\b|\bto-?do(?:s|\s+list)?\b(?!\.)|\bto\s+do\s+list\b", re.I
        ),
    ),
    ("kanban", _HELP),
    ("schedule", _HELP),
    ("goals", _HELP),
    (
        "schedule",
        re.compile(
            rf"\bremind|\b{_EVERY}\b|\bschedul|\bcron\b|\bcron_|\brecurring\b|\b(?:daily|weekly|monthly)\b",
            re.IGNORECASE,
        ),
    ),
    ("goals", re.compile(r"\bgoals?\b|\bgoal_", re.IGNORECASE)),
    ("delegation", re.compile(r"\bdelegat|\bsub-?agents?\b", re.IGNORECASE)),
    (
        "skills",
        re.compile(
            r"\b(?:create|make|write|build|add|define)\s+(?:(?:a|an|my|your|the|new|own|python)\s+)*tools?\b"
            r"|\bskills?\b|\bskill_manage\b|\bself-written\b",
            re.IGNORECASE,
        ),
    ),
    ("mcp", re.compile(r"\bmcp\b|\bmcp_", re.IGNORECASE)),
)
"""(toolset, pattern): a message matching the pattern calls for the toolset."""


@functools.lru_cache(maxsize=64)
def wanted_by(message: str) -> frozenset[str]:
    """The toolsets ``message`` calls for (``INTENTS``). Cached: each LLM call of a turn (and the context
    assembly) asks again for the same message, and the answer is a pure function of it."""
    return frozenset(name for name, pattern in INTENTS if pattern.search(message))


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
    configured: Iterable[str], message: str = "", *, auto: bool = True, kept: Iterable[str] = ()
) -> frozenset[str] | None:
    """The toolsets a turn offers: ``configured`` (groups expanded), plus, with ``auto``, what ``message``
    calls for and the toolsets ``kept`` from the previous turn. None: every tool (``all`` configured). An
    entry ``toolset.tool`` offers that one tool of a toolset (see ``offers``)."""
    chosen: set[str] = set()
    for name in configured:
        if name == ALL:
            return None
        chosen.update(GROUPS.get(name, (name,)))
    if auto:
        chosen |= wanted_by(message)
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

    def select(self, message: str, kept: Iterable[str] = ()) -> frozenset[str] | None:
        return selection(self.configured, message, auto=self.auto, kept=kept)


__all__ = [
    "ALL",
    "CORE",
    "DEFAULT",
    "GROUPS",
    "INTENTS",
    "ToolChoice",
    "UnknownToolset",
    "check_names",
    "offers",
    "selection",
    "wanted_by",
]
