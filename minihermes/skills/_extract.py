"""From a finished turn to a skill: the turn's tool sequence, and the name, procedure and triggers.

Each part has an LLM prompt and a deterministic version built from the actual tool sequence. The LLM's
answer is used only when it is well-formed and true to the turn (a procedure must name the tools the turn
used, in order); otherwise the deterministic version stands. The simulated model answers prose, so offline
the deterministic versions are what gets learned, and they are written in the format the simulated model
follows (``1. calculator: ...``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ._model import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, procedure_tools
from ._text import STOPWORDS, slug

_ARG_CHARS = 60
_HIDDEN_ARGS = frozenset({"expression", "value", "content", "text", "query", "command", "json", "body"})
"""Arguments that differ with every request: the next request supplies its own."""

ACTIONS = {
    "calculator": "evaluate each arithmetic expression from the request",
    "memory_store": "store the result",
    "memory_recall": "recall the remembered fact",
    "memory_search": "search remembered facts for the request's subject",
    "read_file": "read the file",
    "write_file": "write the result to a file",
    "list_files": "list the files",
    "terminal": "run the command",
    "http_request": "call the service",
    "session_search": "search past sessions",
}


@dataclass(frozen=True, slots=True)
class TurnCall:
    name: str
    input: dict[str, Any]
    ok: bool


def turn_calls(messages: list[dict[str, Any]], user_intent: str) -> list[TurnCall]:
    """The tool calls of the turn that began with ``user_intent`` (the last user message with that text;
    the last user message if none has it), with whether each succeeded."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    exact = [i for i in users if messages[i].get("content") == user_intent]
    start = exact[-1] if exact else (users[-1] if users else None)
    if start is None:
        return []
    calls: list[tuple[str, str, dict[str, Any]]] = []
    errors: set[str] = set()
    for m in messages[start + 1 :]:
        if m.get("role") == "user":
            break
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or []:
                args = c.get("input") if isinstance(c.get("input"), dict) else {}
                calls.append((str(c.get("id", "")), str(c.get("name", "")), args))
        elif m.get("role") == "tool" and m.get("is_error"):
            errors.add(str(m.get("tool_call_id", "")))
    return [TurnCall(name, args, cid not in errors) for cid, name, args in calls if name]


def collapse(calls: list[TurnCall]) -> list[TurnCall]:
    """Successful calls, consecutive calls of one tool as one step ("each expression")."""
    out: list[TurnCall] = []
    for c in calls:
        if not c.ok:
            continue
        if out and out[-1].name == c.name:
            continue
        out.append(c)
    return out


NEUTRAL_TOOLS = frozenset({"find_tools", "skill_view"})
"""Tools that look up tools or read skills: calling them neither follows a skill nor strays from it."""


def steps(names: list[str]) -> list[str]:
    """A tool sequence as steps: neutral tools left out, consecutive calls of one tool as one step."""
    out: list[str] = []
    for name in names:
        if name not in NEUTRAL_TOOLS and (not out or out[-1] != name):
            out.append(name)
    return out


def followed(skill_tools: list[str], call_names: list[str]) -> bool:
    """Whether a turn whose tool calls were ``call_names`` (in order, failed calls included) followed a
    skill whose procedure's steps name ``skill_tools``: the skill's steps are a subsequence of the turn's
    calls (each step's tool called, in the skill's order; a step may be called several times and other
    steps' tools in between) and the turn called no tool outside the skill's tools. ``find_tools`` and
    ``skill_view`` (``NEUTRAL_TOOLS``) are left out on both sides. A skill without tool steps is followed
    by no turn's tool sequence (the store looks at ``skill_view`` for those)."""
    want = steps(skill_tools)
    got = steps(call_names)
    if not want or not set(got) <= set(want):
        return False
    calls = iter(got)
    return all(any(name == step for name in calls) for step in want)


def intent_words(intent: str, limit: int = 6) -> list[str]:
    words = [w for w in re.findall(r"[a-z]+", intent.lower()) if len(w) > 2 and w not in STOPWORDS]
    seen: list[str] = []
    for w in words:
        if w not in seen:
            seen.append(w)
    return seen[:limit]


# ------------------------------------------------------------------------------------------ what varies

_QUOTED = re.compile(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"|\u201c([^\u201d\n]{1,200})\u201d")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


def _in_request(value: str, intent: str) -> bool:
    """``value`` appears in the request as a whole word (a file name, a key, a quoted text)."""
    value = value.strip().lower()
    if not value or not any(ch.isalnum() for ch in value):
        return False
    return re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", intent.lower()) is not None


def varying(intent: str, calls: list[TurnCall]) -> dict[str, str]:
    """What differs from one request of the family to the next, as ``{value: parameter}``: the tools'
    argument values that come from the request (file names, keys, expressions, contents), quoted text and
    numbers. None of them may be written into a learned skill."""
    found: dict[str, str] = {}
    for c in calls:
        for k, v in c.input.items():
            if isinstance(v, str) and 0 < len(v) <= 2000 and _in_request(v, intent):
                found.setdefault(v.strip(), k)
    for m in _QUOTED.finditer(intent):
        text = next(g for g in m.groups() if g is not None).strip()
        if text:
            found.setdefault(text, "text")
    for m in _NUMBER.finditer(intent):
        found.setdefault(m.group(), "n")
    return found


def template(intent: str, calls: list[TurnCall]) -> str:
    """The request with what varies replaced by ``{parameters}`` ("write '{content}' to {path}, then read
    {path}"): how the family reads, with no one request's content in it."""
    out = intent.strip()[:300]
    for value, param in sorted(varying(intent, calls).items(), key=lambda kv: -len(kv[0])):
        out = re.sub(rf"(?<![\w{{-]){re.escape(value)}(?![\w}}-])", f"{{{param}}}", out, flags=re.I)
    return out


def _generic(text: str, values: dict[str, str]) -> bool:
    """``text`` names none of the values that vary (words of at least three characters)."""
    lowered = text.lower()
    return not any(
        re.search(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", lowered)
        for value in values
        for w in re.findall(r"[a-z0-9]+", value.lower())
        if len(w) >= 3 and not w.isdigit()
    )


# ---------------------------------------------------------------------------------------- deterministic

_FAMILY: dict[str, tuple[str, str]] = {
    "calculator": ("calculate", ""),
    "memory_store": ("store", "memory"),
    "memory_recall": ("recall", "memory"),
    "memory_search": ("search", "memory"),
    "read_file": ("read", "workspace-file"),
    "write_file": ("write", "workspace-file"),
    "list_files": ("list", "workspace-file"),
    "terminal": ("run", "command"),
    "http_request": ("call", "service"),
    "session_search": ("search", "sessions"),
}
"""What each tool does and to what: a family's name is its steps' verbs, then their objects."""


def fallback_name(intent: str, calls: list[TurnCall]) -> dict[str, str]:
    """The family's name from what its steps do ("write-read-list-workspace-file"), never from one
    request's words; the description shows the request as a template."""
    tools = [c.name for c in collapse(calls)]
    verbs, objects = [], []
    for tool in tools:
        verb, obj = _FAMILY.get(tool, (tool, ""))
        verbs.append(verb)
        objects.append(obj)
    parts = [*dict.fromkeys(verbs), *dict.fromkeys(o for o in objects if o)]
    name = slug(
        f"{tools[0]} steps" if len(parts) == 1 and not objects[0] else " ".join(parts), MAX_NAME_CHARS
    )
    description = (
        f'Handle requests like "{template(intent, calls)}" with {", then ".join(tools)}'
        f" ({len(calls)} tool calls when learned)."
    )
    return {"name": name, "description": description[:MAX_DESCRIPTION_CHARS]}


def fallback_procedure(calls: list[TurnCall], intent: str = "") -> str:
    """One numbered step per tool (``N. tool: what to do``). An argument that came from the request is a
    parameter the next request supplies (``path: {path}``); only what the model chose itself stays."""
    lines = []
    for n, c in enumerate(collapse(calls), start=1):
        action = ACTIONS.get(c.name, f"call {c.name}")
        fixed, params = [], []
        for k, v in sorted(c.input.items()):
            if k in _HIDDEN_ARGS or not isinstance(v, str) or not 0 < len(v) <= _ARG_CHARS or " " in v:
                continue
            if _in_request(v, intent):
                params.append(k)
            else:
                fixed.append(f"{k}={v}")
        if c.name == "write_file" and _in_request(str(c.input.get("content") or ""), intent):
            action = "write the text the request gives to the file"
        if c.name == "memory_store" and "key" in c.input:
            if "key" in params:
                action = "store the result under the key the request names"
            else:
                action = f"store the result under key {c.input['key']}"
                fixed = [a for a in fixed if not a.startswith("key=")]
        tail = " ".join(fixed)
        if params:
            tail = f"{tail} ({', '.join(f'{k}: {{{k}}}' for k in params)} from the request)".strip()
        lines.append(f"{n}. {c.name}: {action}" + (f" {tail}" if tail else ""))
    return "\n".join(lines)


def fallback_triggers(intent: str, calls: list[TurnCall]) -> dict[str, list[str]]:
    """The family's words: the request's, without what varies (no file name, key, number or quoted text)."""
    tools = [c.name for c in collapse(calls)]
    words = intent_words(_PLACEHOLDER.sub(" ", template(intent, calls)), 6)
    return {"triggers": words or tools[:6], "tags": [*dict.fromkeys(tools), "learned"]}


# ---------------------------------------------------------------------------------------------- the LLM

SYSTEM = (
    "You turn a finished task into a reusable skill for an AI agent. Answer with one JSON object only, "
    "no prose."
)


def _generalize(text: str, values: dict[str, str]) -> str:
    for value, param in sorted(values.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(value, f"{{{param}}}")
    return text


def prompt(part: str, intent: str, calls: list[TurnCall]) -> list[dict[str, Any]]:
    """The request for one part. The model sees the request and the calls with what varies already
    replaced by ``{parameters}``, so that it has no file name, key or quoted text to copy."""
    values = varying(intent, calls)
    sequence = "\n".join(
        f"- {c.name} {_generalize(json.dumps(c.input, ensure_ascii=False), values)[:200]}"
        for c in calls
        if c.ok
    )
    asks = {
        "name": 'Give {"name": kebab-case, at most 64 chars, "description": one sentence on when to use it}.',
        "procedure": 'Give {"procedure": numbered lines, one per step, each "N. tool_name: what to do"}, '
        "generalized so it fits similar requests, using exactly the tools above in that order; write what "
        "varies from request to request as the {parameters} shown, never a file name, key or text.",
        "triggers": 'Give {"triggers": up to 6 words a similar request would contain, "tags": up to 6 '
        "topic tags}.",
    }
    task = template(intent, calls) if values else intent.strip()[:2000]
    user = f"Task: {task}\nTool calls, in order:\n{sequence}\n\n{asks[part]}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _json(content: str) -> dict[str, Any] | None:
    # The first "{" to the last "}", as r"\{.*\}" (re.S) finds, without its quadratic retries on many "{".
    content = content or ""
    start, end = content.find("{"), content.rfind("}")
    if not 0 <= start < end:
        return None
    try:
        value = json.loads(content[start : end + 1])
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    return value if isinstance(value, dict) else None


def parse_name(content: str, values: dict[str, str] | None = None) -> dict[str, str] | None:
    """The model's name and description, unless malformed or naming what varies (``values``)."""
    data = _json(content)
    if not data or not isinstance(data.get("name"), str) or not isinstance(data.get("description"), str):
        return None
    name, description = slug(data["name"], MAX_NAME_CHARS), data["description"].strip()
    if not description or len(description) > MAX_DESCRIPTION_CHARS:
        return None
    if not _generic(f"{name.replace('-', ' ')} {description}", values or {}):
        return None
    return {"name": name, "description": description}


def parse_procedure(content: str, calls: list[TurnCall], values: dict[str, str] | None = None) -> str | None:
    """The model's procedure, if true to the turn (below) and naming nothing that varies (``values``)."""
    data = _json(content)
    text = data.get("procedure") if data else None
    if isinstance(text, list):
        text = "\n".join(f"{i}. {s}" for i, s in enumerate(text, 1) if isinstance(s, str))
    if not isinstance(text, str):
        return None
    # True to the turn: the same tools, in the same order (repeats of one tool may be merged).
    named = [t for i, t in enumerate(procedure_tools(text)) if i == 0 or procedure_tools(text)[i - 1] != t]
    if named != [c.name for c in collapse(calls)] or not _generic(text, values or {}):
        return None
    return text.strip()


def parse_triggers(content: str, values: dict[str, str] | None = None) -> dict[str, list[str]] | None:
    """The model's triggers and tags, without any that names what varies (``values``)."""
    data = _json(content)
    if not data:
        return None
    out: dict[str, list[str]] = {}
    for key in ("triggers", "tags"):
        value = data.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) and 0 < len(v) <= 100 for v in value):
            return None
        out[key] = [v.strip() for v in value if _generic(v, values or {})][:6]
    return out if out["triggers"] else None
