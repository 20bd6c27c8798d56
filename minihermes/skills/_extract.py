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


def intent_words(intent: str, limit: int = 6) -> list[str]:
    words = [w for w in re.findall(r"[a-z]+", intent.lower()) if len(w) > 2 and w not in STOPWORDS]
    seen: list[str] = []
    for w in words:
        if w not in seen:
            seen.append(w)
    return seen[:limit]


# ---------------------------------------------------------------------------------------- deterministic


def fallback_name(intent: str, calls: list[TurnCall]) -> dict[str, str]:
    tools = [c.name for c in collapse(calls)]
    words = intent_words(intent, 3)
    name = slug(" ".join([*words, "via", *tools]) if words else " ".join([*tools, "steps"]), MAX_NAME_CHARS)
    description = (
        f'Handle requests like "{intent.strip()[:300]}" with {", then ".join(tools)}'
        f" ({len(calls)} tool calls when learned)."
    )
    return {"name": name, "description": description[:MAX_DESCRIPTION_CHARS]}


def fallback_procedure(calls: list[TurnCall]) -> str:
    lines = []
    for n, c in enumerate(collapse(calls), start=1):
        action = ACTIONS.get(c.name, f"call {c.name}")
        args = [
            f"{k}={v}"
            for k, v in sorted(c.input.items())
            if k not in _HIDDEN_ARGS and isinstance(v, str) and 0 < len(v) <= _ARG_CHARS and " " not in v
        ]
        if c.name == "memory_store" and "key" in c.input:
            action = f"store the result under key {c.input['key']}"
            args = [a for a in args if not a.startswith("key=")]
        lines.append(f"{n}. {c.name}: {action}" + (f" {' '.join(args)}" if args else ""))
    return "\n".join(lines)


def fallback_triggers(intent: str, calls: list[TurnCall]) -> dict[str, list[str]]:
    tools = [c.name for c in collapse(calls)]
    return {"triggers": intent_words(intent, 6), "tags": [*dict.fromkeys(tools), "learned"]}


# ---------------------------------------------------------------------------------------------- the LLM

SYSTEM = (
    "You turn a finished task into a reusable skill for an AI agent. Answer with one JSON object only, "
    "no prose."
)


def prompt(part: str, intent: str, calls: list[TurnCall]) -> list[dict[str, Any]]:
    sequence = "\n".join(f"- {c.name} {json.dumps(c.input)[:200]}" for c in calls if c.ok)
    asks = {
        "name": 'Give {"name": kebab-case, at most 64 chars, "description": one sentence on when to use it}.',
        "procedure": 'Give {"procedure": numbered lines, one per step, each "N. tool_name: what to do"}, '
        "generalized so it fits similar requests, using exactly the tools above in that order.",
        "triggers": 'Give {"triggers": up to 6 words a similar request would contain, "tags": up to 6 '
        "topic tags}.",
    }
    user = f"Task: {intent.strip()[:2000]}\nTool calls, in order:\n{sequence}\n\n{asks[part]}"
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


def parse_name(content: str) -> dict[str, str] | None:
    data = _json(content)
    if not data or not isinstance(data.get("name"), str) or not isinstance(data.get("description"), str):
        return None
    name, description = slug(data["name"], MAX_NAME_CHARS), data["description"].strip()
    if not description or len(description) > MAX_DESCRIPTION_CHARS:
        return None
    return {"name": name, "description": description}


def parse_procedure(content: str, calls: list[TurnCall]) -> str | None:
    data = _json(content)
    text = data.get("procedure") if data else None
    if isinstance(text, list):
        text = "\n".join(f"{i}. {s}" for i, s in enumerate(text, 1) if isinstance(s, str))
    if not isinstance(text, str):
        return None
    # True to the turn: the same tools, in the same order (repeats of one tool may be merged).
    named = [t for i, t in enumerate(procedure_tools(text)) if i == 0 or procedure_tools(text)[i - 1] != t]
    return text.strip() if named == [c.name for c in collapse(calls)] else None


def parse_triggers(content: str) -> dict[str, list[str]] | None:
    data = _json(content)
    if not data:
        return None
    out: dict[str, list[str]] = {}
    for key in ("triggers", "tags"):
        value = data.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) and 0 < len(v) <= 100 for v in value):
            return None
        out[key] = [v.strip() for v in value][:6]
    return out if out["triggers"] else None
