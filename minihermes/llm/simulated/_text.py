"""Language helpers for the simulated model: clauses, memory keys, pronouns, and the offered tools."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from .._types import ToolSpec

# Between clauses: punctuation that ends a thought, or a conjunction. A "." only counts when followed by
# whitespace, so "notes.txt" and "3.5" stay whole; a "," between a digit and three more ("1,250") is a
# thousands separator. Leading whitespace is taken from the start of its run
# only (``(?<!\s)``): a match found from inside a run is found from its start anyway, and trying every
# position of a long run rescans the rest of it each time (quadratic).
_SEPARATOR = re.compile(
    r"((?:(?<!\s)\s+)?(?:(?<!\d),|,(?!\d{3}(?!\d))|[;!\n]|\.(?=\s)|\?(?=\s))\s*(?:(?:and|then|also)\s+)*"
    r"|(?<!\s)\s+(?:and\s+then|and|then|also)\s+)",
    re.I,
)
_POLITE = re.compile(
    r"^(?:(?:please|kindly|now|also|ok(?:ay)?|so|hey|hi|and|then)\b[\s,]*"
    r"|(?:can|could|would|will) you\b\s*(?:please\s*)?)+",
    re.I,
)
_OWNERS = {"my": "your", "our": "your", "mine": "your", "your": "my", "the": "the", "a": "the", "an": "the"}
_SWAP = {
    "i": "you", "me": "you", "my": "your", "mine": "yours", "myself": "yourself", "am": "are",
    "i'm": "you're", "we": "you", "our": "your", "us": "you", "i've": "you've", "i'd": "you'd",
}  # fmt: skip

REDACTED = "[REDACTED]"
"""What ``minihermes/context/redact.py`` leaves of a secret in a chat message or a tool result (the model never
sees the secret: a value holding this is a secret that was removed, never one to store or write)."""
SECRETS_BELONG = (
    "Secrets are kept out of memory, chat history and logs on purpose: keep a password in a password manager; "
    "an API key for a model or a service belongs in the credential vault (an admin registers it on the "
    "dashboard's Providers page)."
)

# Names a tool for each role may go by. The first offered match wins.
ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "calculator": ("calculator", "calc", "calculate", "math", "evaluate"),
    "memory_store": (
        "memory_store",
        "store_memory",
        "remember",
        "save_memory",
        "memory_save",
        "memory_write",
    ),
    "memory_recall": ("memory_recall", "recall_memory", "recall", "memory_get", "memory_read"),
    "memory_search": ("memory_search", "search_memory", "search_memories", "memory_query"),
    "memory_delete": ("memory_delete", "memory_forget", "forget_memory", "delete_memory"),
    "read_file": ("read_file", "file_read", "read", "cat"),
    "write_file": ("write_file", "file_write", "write"),
    "list_files": ("list_files", "list_dir", "list_directory", "ls", "file_list"),
    "kanban_create": ("kanban_create",),
    "kanban_list": ("kanban_list",),
    "cron_schedule": ("cron_schedule",),
    "cron_list": ("cron_list",),
    "cron_pause": ("cron_pause",),
    "cron_resume": ("cron_resume",),
    "cron_delete": ("cron_delete",),
    "goal_set": ("goal_set",),
    "goal_list": ("goal_list",),
    "goal_complete": ("goal_complete",),
    "goal_clear": ("goal_clear",),
}


FINDER = "find_tools"
"""The tool that adds toolsets to the rest of a turn (``find_tools {query?, toolsets?}``): what a turn does not
offer may still be found through it, if its description or schema lists the toolset."""
TOOLSETS: dict[str, str] = {
    "kanban_create": "kanban", "kanban_list": "kanban",
    "cron_schedule": "schedule", "cron_list": "schedule", "cron_pause": "schedule", "cron_resume": "schedule",
    "cron_delete": "schedule",
    "goal_set": "goals", "goal_list": "goals", "goal_complete": "goals", "goal_clear": "goals",
}  # fmt: skip
"""The toolset each work role's tool belongs to (``minihermes/work``: kanban, schedule, goals)."""


def count_pieces(text: str) -> int:
    """How many pieces ``split_clauses`` parses ``text`` as (each is tried against every intent)."""
    return sum(1 for _ in _SEPARATOR.finditer(text.strip())) + 1


def split_clauses(text: str, parses: Callable[[str], bool]) -> list[str]:
    """Split a request into clauses, one intent each.

    A piece that means nothing on its own ("blue" in "my favourite colours are red and blue") is glued
    back to the clause before it, so conjunctions inside a value survive; but never across "then" (a new
    step) and never a piece that reads as a request of its own ("tell me a joke"): that stays a clause, and
    a clause no intent understands makes the model say it cannot. Separators inside quotes do not split.
    """
    text = text.strip()
    quoted = _quoted_spans(text)
    clauses: list[list[str]] = []  # each clause as its parts, joined once (gluing is not quadratic)
    separator, start, span = "", 0, 0
    pieces: list[tuple[str, str]] = []  # (separator before, piece)
    for match in _SEPARATOR.finditer(text):
        while span < len(quoted) and quoted[span][1] <= match.start():
            span += 1
        if span < len(quoted) and quoted[span][0] < match.start():
            continue  # inside a quoted value
        pieces.append((separator, text[start : match.start()]))
        separator, start = match.group(0), match.end()
    pieces.append((separator, text[start:]))
    for separator, piece in pieces:
        if not piece.strip():
            continue
        if clauses and _NUMBER_AND.search(clauses[-1][-1]) and separator.strip().lower() == "and":
            clauses[-1] += (separator, piece)  # "two hundred and fifty" is one number
        elif clauses and not _THEN.search(separator) and not _REQUEST.match(piece) and not parses(piece):
            clauses[-1] += (separator, piece)
        else:
            clauses.append([piece])
    return [cleaned for parts in clauses if (cleaned := clean_clause("".join(parts)))]


_QUOTED = re.compile(r"(?<![\w])(?:'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`|\u201c[^\u201d\n]*\u201d)(?![\w])")
"""A quoted value: each scan stops at the next quote of its kind, so finding them all is linear."""
_NUMBER_AND = re.compile(r"\b(?:hundred|thousand|million)$", re.I)
_THEN = re.compile(r"\b(?:then|also)\b|;", re.I)
_REQUEST = re.compile(
    r"\s*(?:(?:please|and|so|now)\s+)*(?:tell|show|give|summari[sz]e|explain|translate|write|read|list|"
    r"what|what's|who|why|how|when|where|which|can|could|would|will|do|does|is|are|find|search|send|book|"
    r"order|call|email|open|delete|remove|play|set|create|make|calculate|compute|remember|recall|check|"
    r"look|get|fetch|draw|generate|sing|help|schedule|remind|add|put|save|store|cancel|buy)\b",
    re.I,
)
"""The start of a piece that is a request of its own, not the rest of a value."""


def _quoted_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _QUOTED.finditer(text)]


_LISTED = re.compile(r"^\s*(?:[-*\u2022]\s*)?`?[a-z][\w.-]*`?\s*(?:[:(\-\u2013\u2014]|$)")
"""A line of a listing that starts with a name: "- kanban: ...", "schedule (cron jobs)", "`goals` - ..."."""


def _starts(line: str, name: str) -> bool:
    return re.match(rf"^\s*(?:[-*\u2022]\s*)?`?{re.escape(name)}`?(?![\w.])", line) is not None


def clean_clause(clause: str) -> str:
    """Drop politeness and trailing punctuation: "Please, could you read a.txt?" -> "read a.txt"."""
    clause = _POLITE.sub("", clause.strip()).strip()
    return clause.rstrip(" .!?,;:").strip()


def strip_quotes(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return text[1:-1]
    return text


def memory_key(phrase: str) -> tuple[str, str]:
    """Split "my favourite colour" into (owner as the assistant says it, normalized key).

    ("your", "favourite colour"); "the wifi password" -> ("the", "wifi password"). The key is what is
    stored and recalled, so both directions must normalize the same way.
    """
    words = re.sub(r"[^\w\s'-]", " ", strip_quotes(phrase).lower()).split()
    if "of" in words:
        # "the name of my dog" is "my dog's name": one key however the person says it.
        at = words.index("of")
        head, tail = [w for w in words[:at] if w not in ("the", "a", "an")], words[at + 1 :]
        if 1 <= len(head) <= 2 and len(tail) >= 2 and tail[0] in ("my", "our") and "of" not in tail:
            words = [*tail[:-1], f"{tail[-1]}'s", *head]
    owner = "the"
    if words and words[0] in _OWNERS:
        owner = _OWNERS[words.pop(0)]
    return owner, " ".join(words)


def second_person(text: str) -> str:
    """Echo the user's words back from the assistant's side: "I like tea" -> "you like tea"."""
    return re.sub(
        r"\b(?:i'm|i've|i'd|i|me|my|mine|myself|am|we|our|us)\b",
        lambda m: _SWAP[m.group(0).lower()],
        text,
        flags=re.I,
    )


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class Toolbox:
    """The tools offered in this request, looked up by role and by parameter purpose."""

    def __init__(self, tools: Iterable[ToolSpec]) -> None:
        self.by_name = {tool.name: tool for tool in tools}

    def __contains__(self, name: str) -> bool:
        return name in self.by_name

    @property
    def names(self) -> list[str]:
        return list(self.by_name)

    def find(self, role: str) -> ToolSpec | None:
        """The offered tool that plays ``role`` ("calculator", "memory_store", ...), if any."""
        for name in ROLE_NAMES.get(role, (role,)):
            if name in self.by_name:
                return self.by_name[name]
        return None

    def findable(self, role: str) -> str | None:
        """The toolset to ask ``find_tools`` for when ``role`` has no offered tool, if ``find_tools`` is
        offered, takes ``toolsets`` and lists that toolset (one per line, or in its schema's enum)."""
        toolset = TOOLSETS.get(role)
        finder = self.by_name.get(FINDER)
        if toolset is None or finder is None or "toolsets" not in self.properties(finder):
            return None
        return toolset if toolset in self.listed_toolsets() else None

    def listed_toolsets(self) -> frozenset[str]:
        """The work toolsets ``find_tools`` says there are: an enum of its ``toolsets`` input, else the names
        that start a line of its description ("kanban: cards on the board ...")."""
        finder = self.by_name.get(FINDER)
        if finder is None:
            return frozenset()
        spec = self.properties(finder).get("toolsets")
        items = spec.get("items") if isinstance(spec, dict) else None
        enum = items.get("enum") if isinstance(items, dict) else None
        if isinstance(enum, list):
            return frozenset(str(name) for name in enum) & frozenset(TOOLSETS.values())
        lines = finder.description.splitlines()
        return frozenset(
            name
            for name in TOOLSETS.values()
            if any(_LISTED.match(line) and _starts(line, name) for line in lines)
        )

    def role_of(self, name: str) -> str | None:
        for role, names in ROLE_NAMES.items():
            if name in names:
                return role
        return None

    @staticmethod
    def properties(tool: ToolSpec) -> dict[str, Any]:
        props = tool.input_schema.get("properties")
        return props if isinstance(props, dict) else {}

    @staticmethod
    def required(tool: ToolSpec) -> list[str]:
        required = tool.input_schema.get("required")
        return [r for r in required if isinstance(r, str)] if isinstance(required, list) else []

    def param(self, tool: ToolSpec, preferred: tuple[str, ...]) -> str:
        """The input property to use for a purpose: a preferred name the schema has, else its first
        required string property, else the first preferred name (schemas may be empty)."""
        props = self.properties(tool)
        for name in preferred:
            if name in props:
                return name
        for name in self.required(tool):
            spec = props.get(name)
            if not isinstance(spec, dict) or spec.get("type") in (None, "string"):
                return name
        return preferred[0]

    def has_param(self, tool: ToolSpec, preferred: tuple[str, ...]) -> str | None:
        props = self.properties(tool)
        return next((name for name in preferred if name in props), None)
