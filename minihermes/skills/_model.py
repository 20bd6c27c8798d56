"""Skill records, their limits, the SKILL.md format and the prompt section the agent injects."""

from __future__ import annotations

import re
from typing import Any

import yaml  # type: ignore[import-untyped]

from minihermes.runtime import InvalidArgument

STATUSES = ("candidate", "active", "stale", "archived")
USABLE = frozenset({"active", "stale"})
MAX_NAME_CHARS = 64
"""agentskills.io: a skill's name is at most 64 characters."""
MAX_DESCRIPTION_CHARS = 1024
MAX_PROCEDURE_CHARS = 20_000
MAX_TRIGGERS = 32
MAX_TRIGGER_CHARS = 100
MAX_QUERY_CHARS = 2_000
SAFE_TOOLS = frozenset({"calculator", "memory_store", "memory_recall", "memory_search", "session_search"})
"""Tools that only compute or touch the agent's own memory. A procedure using any other tool (files,
terminal, HTTP, service links, self-written tools) acts outside the agent and needs an admin's approval."""

_STEP = re.compile(r"^\s*(?:\d+\s*[.)]|step\s*\d+\s*[:.)-]?)\s*(?P<tool>[A-Za-z][\w-]*)\s*:", re.I)
_FRONT = re.compile(r"\A---\s*\n(?P<yaml>.*?)\n---\s*\n?(?P<body>.*)\Z", re.S)


def check_text(op: str, field: str, value: str, limit: int, *, required: bool = True) -> str:
    value = value.strip()
    if required and not value:
        raise InvalidArgument(f"{op}: {field} must not be empty", op=op, field=field)
    if len(value) > limit:
        raise InvalidArgument(f"{op}: {field} is longer than {limit} characters", op=op, field=field)
    if any(ord(c) < 32 and c not in "\t\n\r" for c in value):
        raise InvalidArgument(f"{op}: {field} must not contain control characters", op=op, field=field)
    return value


def check_words(op: str, field: str, values: list[str] | None) -> list[str]:
    """Triggers or tags: trimmed, de-duplicated (case-insensitively), bounded."""
    out: list[str] = []
    seen: set[str] = set()
    for raw in values or []:
        word = check_text(op, field, raw, MAX_TRIGGER_CHARS)
        if word.lower() not in seen:
            seen.add(word.lower())
            out.append(word)
    if len(out) > MAX_TRIGGERS:
        raise InvalidArgument(f"{op}: at most {MAX_TRIGGERS} {field}", op=op, field=field)
    return out


def procedure_tools(procedure: str) -> list[str]:
    """The tools a procedure's numbered steps name (``1. calculator: ...``), in order."""
    return [m.group("tool") for line in procedure.splitlines() if (m := _STEP.match(line))]


def needs_approval(tools: list[str]) -> bool:
    return any(t not in SAFE_TOOLS for t in tools)


def format_skills(skills: list[dict[str, Any]]) -> str:
    """The "## Relevant Skills" prompt section for matched skills (what the simulated model follows)."""
    if not skills:
        return ""
    parts = ["## Relevant Skills"]
    for skill in skills:
        parts.append(f"### {skill['name']}")
        if skill.get("description"):
            parts.append(str(skill["description"]))
        parts.append(str(skill["procedure"]).strip())
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- SKILL.md


def render_skill_md(record: dict[str, Any], procedure: str) -> str:
    """A SKILL.md (agentskills.io): YAML front matter (name, description, metadata) and the procedure."""
    front: dict[str, Any] = {"name": record["name"], "description": record["description"]}
    metadata = {
        "triggers": record.get("triggers") or [],
        "tags": record.get("tags") or [],
        "version": record.get("version", 1),
        "status": record.get("status", "candidate"),
    }
    front["metadata"] = metadata
    text = yaml.safe_dump(front, sort_keys=False, allow_unicode=True)
    return f"---\n{text}---\n\n{procedure.strip()}\n"


def parse_skill_md(text: str, *, op: str = "import_skills") -> dict[str, Any]:
    """name, description, procedure, triggers, tags of a SKILL.md; InvalidArgument on a malformed one."""
    m = _FRONT.match(text.lstrip("\ufeff"))
    if m is None:
        raise InvalidArgument(f"{op}: SKILL.md must start with YAML front matter between '---' lines", op=op)
    try:
        front = yaml.safe_load(m.group("yaml"))
    except yaml.YAMLError as e:
        raise InvalidArgument(f"{op}: front matter is not valid YAML: {e}", op=op) from None
    if not isinstance(front, dict):
        raise InvalidArgument(f"{op}: front matter must be a mapping", op=op)
    name = front.get("name")
    description = front.get("description")
    if not isinstance(name, str) or not isinstance(description, str):
        raise InvalidArgument(f"{op}: front matter needs string name and description", op=op, field="name")
    meta = front.get("metadata") if isinstance(front.get("metadata"), dict) else {}
    assert isinstance(meta, dict)

    def words(key: str) -> list[str]:
        value = meta.get(key, front.get(key, []))
        return [str(v) for v in value] if isinstance(value, list) else []

    return {
        "name": check_text(op, "name", name, MAX_NAME_CHARS),
        "description": check_text(op, "description", description, MAX_DESCRIPTION_CHARS),
        "procedure": check_text(op, "procedure", m.group("body"), MAX_PROCEDURE_CHARS),
        "triggers": check_words(op, "triggers", words("triggers")),
        "tags": check_words(op, "tags", words("tags")),
    }
