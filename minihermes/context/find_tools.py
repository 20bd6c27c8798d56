"""``find_tools``: how a model gets a toolset its turn was not offered (``minihermes.context.toolsets``).

A turn's toolsets are chosen before the model reads the request (configuration, and patterns on the message),
so a request may need a tool that is not offered. Every turn that chooses its toolsets (``auto_toolsets``, no
tool allow-list) also offers ``find_tools {query?, toolsets?, keep?}``, whose description lists, one line
each, the toolsets of the catalogue the turn does not offer yet (what each is for: its declared ``purpose``,
else its first tool's description). A call lists the toolsets there are (name:
what it is for: its tools), those matching ``query`` when one is given, and adds the ``toolsets`` it names
to the rest of the turn; with ``keep``, to the session's own toolsets too (as ``agent.set_toolsets``). A
name that is no toolset of the catalogue is an ``invalid_input`` tool error listing the valid ones.

The agent answers it itself (no hop, no effect outside the turn's offer): offering is never permission, and
every call of an added tool is checked by guardrails and authorized by the tool executor as always. Cost:
the schema in each LLM call of the turn (its description names only the toolsets not offered); its view is
made once per (catalogue, selection), so a turn adds a dictionary look-up.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from minihermes.llm import ToolView
from minihermes.tools import ToolFailure

from .assembly import Catalogue

NAME = "find_tools"
MAX_TOOLSETS = 32
MAX_QUERY_CHARS = 200
_PURPOSE_CHARS = 60
_INTRO = "Add toolsets to this turn (keep: true, to later turns too). Not offered now:"
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "toolsets": {"type": "array", "items": {"type": "string"}},
        "keep": {"type": "boolean"},
    },
}
"""Bounds and unknown fields are checked by ``answer`` (a schema's every byte is in every call)."""
_VIEWS: OrderedDict[tuple[str, frozenset[str]], ToolView | None] = OrderedDict()
"""(catalogue digest, selection) -> the view a turn of that selection offers (None: none)."""
_CACHE_MAX = 64
_WORD = re.compile(r"[a-z0-9]{2,}")
_TODO = re.compile(r"\bto[\s-]?do\b")
_STOP = frozenset("the my me to an of for and on in it is this that with what can you do".split())


def answers(cat: Catalogue, selection: frozenset[str] | None) -> bool:
    """Whether a turn of ``selection`` answers ``find_tools`` itself: it chooses toolsets (not every tool),
    and the catalogue has no tool of that name (a registered one is offered and run as any other)."""
    return selection is not None and all(v["name"] != NAME for v in cat.views)


def widen(selection: frozenset[str] | None, found: Iterable[str] | None) -> frozenset[str] | None:
    """``selection`` with the toolsets ``find_tools`` added to the turn."""
    if selection is None or not found:
        return selection
    return selection | frozenset(found)


def view(cat: Catalogue, selection: frozenset[str] | None) -> ToolView | None:
    """The ``find_tools`` schema a turn of ``selection`` offers, or None when it offers none (every toolset
    is offered already, or the turn does not answer it). Made once per (catalogue, selection)."""
    if selection is None:
        return None
    key = (cat.digest, selection)
    if cat.digest and key in _VIEWS:
        _VIEWS.move_to_end(key)
        return _VIEWS[key]
    made: ToolView | None = None
    if answers(cat, selection):
        lines = _lines(cat)
        missing = [f"- {name}: {purpose}" for name, (purpose, _) in lines.items() if name not in selection]
        if missing:
            made = ToolView(name=NAME, description="\n".join([_INTRO, *missing]), input_schema=_SCHEMA)
    if cat.digest:
        _VIEWS[key] = made
        if len(_VIEWS) > _CACHE_MAX:
            _VIEWS.popitem(last=False)
    return made


def offer(tools: list[dict[str, Any]], found: ToolView | None) -> list[dict[str, Any]]:
    """``tools`` (in name order) with ``found``, the ``find_tools`` view, in its place by name."""
    if found is None:
        return tools
    at = next((i for i, t in enumerate(tools) if t["name"] > NAME), len(tools))
    return [*tools[:at], found, *tools[at:]]


def answer(
    cat: Catalogue, selection: frozenset[str] | None, args: Any
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The reply to one call of a turn offering ``selection`` and the toolsets it names (to add, and to keep
    with ``keep``): ``{toolsets: ["name: purpose: tools", ...], added, offered, kept}``. Raises
    ``ToolFailure`` (``invalid_input``) for input outside the schema or a name that is no toolset."""
    query, names, keep = _read(args)
    lines = _lines(cat)
    unknown = [n for n in names if n not in lines]
    if unknown:
        raise ToolFailure(
            "invalid_input",
            f"unknown toolset {unknown[0]!r}; the toolsets are: {', '.join(lines)}",
            field="toolsets",
            known=list(lines),
        )
    offered = set(lines) if selection is None else {n for n in lines if n in selection}
    added = [n for n in names if n not in offered]
    # A query alone narrows the list to the toolsets it names a word of (all of them when none matches).
    matched = _best(lines, query) if query and not names else []
    shown = matched or list(lines)
    reply: dict[str, Any] = {
        "toolsets": [f"{n}: {lines[n][0]}: {', '.join(lines[n][1])}" for n in shown],
        "added": added,
        "offered": sorted(offered | set(added)),
    }
    if query and not names:
        reply["matched"] = bool(matched)
    if keep:
        reply["kept"] = list(names)
    return reply, names


def _read(args: Any) -> tuple[str, tuple[str, ...], bool]:
    if not isinstance(args, dict):
        raise ToolFailure("invalid_input", "input must be an object")
    extra = sorted(set(args) - {"query", "toolsets", "keep"})
    if extra:
        raise ToolFailure(
            "invalid_input", f"input.{extra[0]}: unknown field (query, toolsets, keep)", field=extra[0]
        )
    query = args.get("query", "")
    if not isinstance(query, str) or len(query) > MAX_QUERY_CHARS:
        raise ToolFailure(
            "invalid_input", f"input.query: a string of at most {MAX_QUERY_CHARS} characters", field="query"
        )
    names = args.get("toolsets", [])
    if (
        not isinstance(names, list)
        or len(names) > MAX_TOOLSETS
        or not all(isinstance(n, str) and 0 < len(n) <= 64 for n in names)
    ):
        raise ToolFailure(
            "invalid_input",
            f"input.toolsets: a list of at most {MAX_TOOLSETS} toolset names",
            field="toolsets",
        )
    keep = args.get("keep", False)
    if not isinstance(keep, bool):
        raise ToolFailure("invalid_input", "input.keep: true or false", field="keep")
    return query.strip(), tuple(dict.fromkeys(names)), keep


def _lines(cat: Catalogue) -> dict[str, tuple[str, list[str]]]:
    """Each toolset of ``cat`` with at least one tool listed, in name order: (purpose, its tools)."""
    tools: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    purposes = cat.offering.purposes
    for v, ts in zip(cat.views, cat.toolsets, strict=True):
        if ts:
            tools.setdefault(ts, []).append(v["name"])
            first.setdefault(ts, str(v.get("description") or ""))
    return {
        name: (purposes.get(name) or _first_sentence(first[name], name), tools[name])
        for name in sorted(tools)
    }


def _first_sentence(text: str, name: str) -> str:
    sentence = text.strip().split("\n", 1)[0].split(". ", 1)[0].rstrip(".")
    if len(sentence) > _PURPOSE_CHARS:
        sentence = sentence[: _PURPOSE_CHARS - 1].rstrip() + "…"
    return sentence or f"the {name} tools"


def _words(text: str) -> set[str]:
    text = _TODO.sub("todo", text.lower().replace("_", " "))
    return {w.removesuffix("s") for w in _WORD.findall(text) if w not in _STOP}


def _score(line: tuple[str, list[str]], name: str, query: set[str]) -> int:
    """How many words of the query the toolset's line has (a word of 4+ letters also as the start of one:
    "remind" finds "reminders")."""
    have = _words(" ".join([name, line[0], *line[1]]))
    return sum(1 for w in query if w in have or (len(w) >= 4 and any(h.startswith(w) for h in have)))


def _best(lines: dict[str, tuple[str, list[str]]], query: str) -> list[str]:
    """The toolsets whose line has the most words of ``query`` (none when no line has any)."""
    words = _words(query)
    scores = {name: _score(line, name, words) for name, line in lines.items()}
    top = max(scores.values(), default=0)
    return [name for name, score in scores.items() if score == top] if top else []


__all__ = [
    "MAX_QUERY_CHARS",
    "MAX_TOOLSETS",
    "NAME",
    "answer",
    "answers",
    "offer",
    "view",
    "widen",
]
