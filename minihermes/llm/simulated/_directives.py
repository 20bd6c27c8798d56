"""Clauses that name the tool to use: instructions about HOW, not requests of their own.

"what is 6 * 7? use the calculator", "remember my name is Bob (use the memory tool)", "using write_file,
write hi to a.txt", "calculate 2+2 with the calculator". Such a clause is accepted only when the tool it
names is offered and the plan for the rest of the request uses it; otherwise the model says it cannot
(it never claims to have used a tool it did not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._plan import Note, Plan
from ._text import ROLE_NAMES, Toolbox

_VERB = r"(?:use|using|with|via|through|by\s+using)"
_NAME = r"(?:the\s+|your\s+|a\s+|my\s+)?(?P<name>[A-Za-z][\w\- ]{0,60}?)(?P<tools>\s+(?:tools?|functions?))?"
_WHOLE = re.compile(rf"^[(\[]?\s*(?:please\s+)?{_VERB}\s+{_NAME}\s*[)\]]?$", re.I)
_TAIL = re.compile(rf"(?:^|[\s,(\[-])[(\[]?\s*(?:please\s+)?{_VERB}\s+{_NAME}\s*[)\]]?$", re.I)
_HEAD = re.compile(rf"^[(\[]?\s*(?:please\s+)?{_VERB}\s+{_NAME}(?:\s*[)\],:]\s*|\s+(?:to|and|then)\s+)", re.I)
_REACH = 100
"""How far from a clause's edge a directive is looked for: the patterns run on that much, so a long
clause costs no more than a short one."""

# Generic names for the tools of some roles ("the memory tool", "the file tools").
_GENERIC: dict[str, tuple[str, tuple[str, ...]]] = {
    "calculator": ("calculator", ("calculator",)),
    "calc": ("calculator", ("calculator",)),
    "math": ("calculator", ("calculator",)),
    "maths": ("calculator", ("calculator",)),
    "memory": ("memory tools", ("memory_store", "memory_recall", "memory_search")),
    "memories": ("memory tools", ("memory_store", "memory_recall", "memory_search")),
    "file": ("file tools", ("read_file", "write_file", "list_files")),
    "files": ("file tools", ("read_file", "write_file", "list_files")),
    "file system": ("file tools", ("read_file", "write_file", "list_files")),
    "filesystem": ("file tools", ("read_file", "write_file", "list_files")),
    "kanban": ("kanban tools", ("kanban_create", "kanban_list")),
    "kanban board": ("kanban tools", ("kanban_create", "kanban_list")),
    "cron": ("cron tools", ("cron_schedule", "cron_list", "cron_pause", "cron_resume", "cron_delete")),
    "scheduler": ("cron tools", ("cron_schedule", "cron_list", "cron_pause", "cron_resume", "cron_delete")),
    "goal": ("goal tools", ("goal_set", "goal_list", "goal_complete", "goal_clear")),
    "goals": ("goal tools", ("goal_set", "goal_list", "goal_complete", "goal_clear")),
}


@dataclass(frozen=True)
class Directive:
    """A named tool (or family of tools) to use; ``offered`` are the request's tools it may mean."""

    clause: str
    label: str
    offered: frozenset[str]

    def used_by(self, tools: set[str]) -> bool:
        return bool(self.offered & tools)


def resolve(name: str, toolbox: Toolbox) -> tuple[str, frozenset[str]] | None:
    """What a tool's name in a request refers to: (how to call it, the offered tools it may mean)."""
    key = " ".join(name.lower().replace("-", " ").split())
    if key in _GENERIC:
        label, roles = _GENERIC[key]
        return label, frozenset(t.name for role in roles if (t := toolbox.find(role)) is not None)
    for tool in toolbox.names:
        if key in (tool.lower(), tool.lower().replace("_", " ").replace("-", " ")):
            return tool, frozenset({tool})
    underscored = key.replace(" ", "_")
    for role, names in ROLE_NAMES.items():
        if "_" in underscored and underscored in names:
            found = toolbox.find(role)
            return underscored, frozenset({found.name} if found is not None else ())
    return None


def whole(clause: str, toolbox: Toolbox) -> Directive | None:
    """The directive when the whole clause is one ("use the calculator", "(use the memory tool)")."""
    match = _WHOLE.match(clause) if len(clause) <= _REACH else None
    return _directive(clause, match, toolbox)


def split(clause: str, toolbox: Toolbox) -> tuple[str, Directive] | None:
    """The rest of a clause that starts or ends with a directive, and the directive.

    "what is 6 * 7 using the calculator" -> ("what is 6 * 7", calculator); "use the memory tool to
    remember my name is Bob" -> ("remember my name is Bob", memory tools)."""
    tail = clause[-_REACH:]
    start = 0
    while (match := _TAIL.search(tail, start)) is not None:
        found = _directive(match.group(0), match, toolbox)
        if found is not None:
            rest = clause[: len(clause) - len(tail) + match.start()].rstrip(" ,;:-")
            if rest:
                return rest, found
            break
        start = match.start() + 1
    match = _HEAD.match(clause[:_REACH])
    if match is not None and (found := _directive(match.group(0), match, toolbox)) is not None:
        rest = clause[match.end() :].strip()
        if rest:
            return rest, found
    return None


def _directive(text: str, match: re.Match[str] | None, toolbox: Toolbox) -> Directive | None:
    if match is None:
        return None
    resolved = resolve(match.group("name"), toolbox)
    if resolved is None:
        return None
    label, offered = resolved
    return Directive(" ".join(text.strip(" ,;:-").split()), label, offered)


def verdicts(directives: list[Directive], plan: Plan) -> list[Note]:
    """An honest "I can't" for each directive the plan does not follow; none when all are followed."""
    used = {step.tool for step in plan.steps}
    notes = []
    for directive in directives:
        if directive.used_by(used):
            continue
        the = "" if "_" in directive.label else "the "
        if not directive.offered:
            text = f"I can't use {the}{directive.label}: it is not available in this chat."
        elif plan.items:
            text = f"I can't do \"{directive.clause}\": the rest of the request doesn't need {the}{directive.label}."
        else:
            text = (
                f'I can\'t do "{directive.clause}": the request gives {the}{directive.label} nothing to do.'
            )
        notes.append(Note(text, cannot=True))
    return notes
