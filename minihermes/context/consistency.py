"""Whether a finished turn's answer is true to what its tools returned, and whether a message corrects the
previous answer: the checks behind ``TurnCompleted.success`` (``minihermes.turn_event``).

A turn *fell short* when a tool call failed, the turn did not end ``ok`` (the step limit ended it), or the
final answer contradicts the turn's own tool results. Only contradictions that are cheap to see and sound
(no guess about meaning) are checked:

- the answer shows an internal wrapper: the ``untrusted_content`` envelope, or a tool's raw JSON result
  pasted as it came;
- the answer says nothing was found (no files, no results, nothing found) while every listing or search call
  of the turn returned entries;
- a number the answer presents as a result (``... = N``, "the result is N") that no tool returned and the
  answer's own arithmetic does not give, or an equation in the answer the calculator disagrees with (checked
  only in turns that used the calculator).

A true answer may still fall short of the request: the turn is no success either when

- every search or recall of the turn came back empty and the answer says nothing was found (a search that
  found nothing did not do what was asked; its record would only echo the miss back later);
- the answer says, in one of its sentences, that it could not do the request: "I can't ...", "I cannot
  ...", "I couldn't ...", "I don't have ...", "I'm unable to ..." (the offline model's refusals among them).

``is_correction`` tells a user's message that says the previous answer was wrong ("no, that's wrong",
"actually it's ...", "you forgot ..."): what the previous turn produced is then retracted (its episode, a
skill learned from it).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from minihermes.tools.calculator import CalculatorError, calculate

__all__ = ["ToolOutcome", "contradiction", "could_not", "fell_short", "found_nothing", "is_correction"]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool call of the turn: its name, input, whether it failed, and its whole result text."""

    name: str
    input: dict[str, Any]
    is_error: bool
    result: str


# ------------------------------------------------------------------------------------------------ the turn


def fell_short(
    status: str, response: str, calls: Iterable[ToolOutcome], request: str = "", wrong: str | None = None
) -> str:
    """Why the turn is not a success ("" when it is one): a failed tool call, a status other than ``ok``,
    an answer that contradicts the tool results (``contradiction``), searches that all found nothing
    (``found_nothing``) or an answer that says it could not do the request (``could_not``). ``wrong``:
    ``contradiction(response, calls, request)`` when the caller has it already (it is not computed twice)."""
    calls = list(calls)
    failed = [c.name for c in calls if c.is_error]
    if failed:
        return f"a tool call failed ({', '.join(dict.fromkeys(failed))})"
    if status != "ok":
        return f"the turn ended with status {status}"
    if wrong is None:
        wrong = contradiction(response, calls, request)
    return wrong or found_nothing(response, calls) or could_not(response)


def contradiction(response: str, calls: Iterable[ToolOutcome], request: str = "") -> str:
    """How the answer contradicts the turn's tool results, or "" when no check finds a contradiction."""
    calls = [c for c in calls if not c.is_error]
    return _wrapper(response, calls) or _nothing_found(response, calls) or _numbers(response, calls, request)


# --------------------------------------------------------------------------------------- internal wrappers

_ENVELOPE = re.compile(r'\{\s*"(?:untrusted_content|notice)"\s*:')
_PASTE_MIN_CHARS = 24


def _wrapper(response: str, calls: list[ToolOutcome]) -> str:
    if "untrusted_content" in response or _ENVELOPE.search(response):
        return "the answer shows an internal wrapper (untrusted_content)"
    for c in calls:
        raw = c.result.strip()
        if raw.startswith("{") and len(raw) >= _PASTE_MIN_CHARS and raw in response:
            return f"the answer pastes the raw result of {c.name}"
    return ""


# ----------------------------------------------------------------------------------------- nothing found

_LISTS = ("entries", "files", "memories", "hits", "results", "matches", "items", "skills", "sessions")
_NOTHING = re.compile(
    r"\b(?:"
    r"there\s+(?:are|were|is|was)\s+no\s+(?:files?|entries|results?|matches|memories|items|records)"
    r"|no\s+(?:files?|entries|results?|matches|memories|items|records)\s+(?:were\s+|was\s+)?"
    r"(?:found|exist|in\s+the|returned|matched)"
    r"|(?:found|returned|shows?|lists?)\s+(?:no|nothing|zero)\b(?!\s+(?:other|more|further)\b)"
    r"|nothing\s+(?:was\s+)?(?:found|matched|there)"
    r"|(?:workspace|folder|directory)\s+(?:is|was)\s+empty"
    r"|(?:could\s*n[o']?t|did\s*n[o']?t|cannot|can't|was\s+unable\s+to)\s+find\s+(?:any|anything)"
    r"|no\s+files\b(?!\s+(?:other|besides|except))"
    r")",
    re.I,
)


def _unwrap(text: str) -> Any:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    while isinstance(value, dict) and "untrusted_content" in value:
        value = value["untrusted_content"]
    return value


def _found(result: str) -> int | None:
    """How many entries a listing or search result holds; None when the result cannot be read."""
    value = _unwrap(result)
    if isinstance(value, list):
        return len(value)
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("count"), int) and not isinstance(value.get("count"), bool):
        return int(value["count"])
    for key in _LISTS:
        if isinstance(value.get(key), list):
            return len(value[key])
    return None


def _nothing_found(response: str, calls: list[ToolOutcome]) -> str:
    listings = [c for c in calls if "list" in c.name or "search" in c.name]
    if not listings or not _NOTHING.search(response):
        return ""
    counts = [_found(c.result) for c in listings]
    if all(n is not None and n > 0 for n in counts):
        names = ", ".join(dict.fromkeys(c.name for c in listings))
        return f"the answer says nothing was found, but {names} returned entries"
    return ""


def _empty(result: str) -> bool:
    """A search or recall result that holds nothing: no entries, or ``found: false``."""
    value = _unwrap(result)
    if isinstance(value, dict) and value.get("found") is False:
        return True
    return _found(result) == 0


def found_nothing(response: str, calls: Iterable[ToolOutcome]) -> str:
    """Why the turn found nothing ("" otherwise): each search or recall of the turn came back empty and the
    answer says so (nothing found, "I couldn't find", "I don't have ... stored")."""
    lookups = [c for c in calls if not c.is_error and ("search" in c.name or "recall" in c.name)]
    if not lookups or not all(_empty(c.result) for c in lookups):
        return ""
    if not (_NOTHING.search(response) or could_not(response)):
        return ""
    names = ", ".join(dict.fromkeys(c.name for c in lookups))
    return f"the turn found nothing ({names} returned no results)"


# ------------------------------------------------------------------------------------------------ could not

_COULD_NOT = re.compile(
    # A sentence opening (after an apology at most) with the assistant saying it could not.
    r"(?:(?:sorry|unfortunately|i'm\s+sorry|i\s+am\s+sorry|apologies)\s*[,.!:-]?\s*(?:but\s+)?)?"
    r"i(?:\s+(?:"
    r"can(?:['\u2019]?t|not|\s+not)\b"
    r"|could(?:n['\u2019]?t|\s+not)\b"
    r"|(?:don['\u2019]?t|do\s+not)\s+have\b"
    r"|(?:am|was)\s+(?:unable|not\s+able)\s+to\b"
    r"|did(?:n['\u2019]?t|\s+not)\s+find\b"
    r")|['\u2019]m\s+(?:unable|not\s+able)\s+to\b)",
    re.I,
)
_SENTENCES = re.compile(r"[.!?:;\n]+")
_OPENING = " \t\"'(*_>-"
"""What may stand before a sentence's first word (quotes, markdown emphasis, a list's dash)."""
_COULD_NOT_WINDOW = 20_000
"""How much of the answer is read: every check above is linear, the window bounds them on huge answers."""


def could_not(response: str) -> str:
    """Why the answer is no success ("" otherwise): one of its sentences says the assistant could not do
    the request ("I can't ...", "I cannot ...", "I couldn't ...", "I don't have ...", "I'm unable to ...",
    "Sorry, I can't ..."). Only a sentence that opens so counts: "the file I can't stand" is no refusal."""
    sentences = _SENTENCES.split(response[:_COULD_NOT_WINDOW])
    if any(_COULD_NOT.match(s.lstrip(_OPENING)) for s in sentences):
        return "the answer says it could not do the request"
    return ""


# ------------------------------------------------------------------------------------------------ numbers

_NUM = r"-?\d[\d,]*(?:\.\d+)?"
_NUMBER = re.compile(r"(?<![\w.])" + _NUM)
_OPERAND = r"(?:\(\s*)*" + _NUM + r"(?:\s*\))*"
_OPERATOR = r"\s*(?:\*\*|[-+*/^x\u00d7\u00f7])\s*"
_RHS = re.compile(rf"=\s*(?P<rhs>{_NUM})(?![\d.]*\w)")
_LHS = re.compile(rf"{_OPERAND}(?:{_OPERATOR}{_OPERAND})+\s*$")
_OPERAND_AT = re.compile(_OPERAND)
_OPERATOR_RE = re.compile(_OPERATOR)
_DIGIT = re.compile(r"\d")
_LHS_WINDOW = 120
"""How far left of an ``=`` an expression is looked for (each pattern runs over a bounded window: linear)."""
_MAX_EQUATIONS = 50
_PRESENTED = re.compile(
    r"\b(?:result|answer|total|sum|product|difference|quotient)\b[^.\n=]{0,40}?"
    rf"\b(?:is|was|equals|comes\s+to)\s*:?\s*(?P<n>{_NUM})(?![\d.]*\w)"
    rf"|\b(?:equals|comes\s+to)\s+(?P<m>{_NUM})(?![\d.]*\w)",
    re.I,
)


def _value(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _same(shown: str, value: float) -> bool:
    """``shown`` (as the answer wrote it) is ``value``, rounded to the decimals shown."""
    n = _value(shown)
    if n is None:
        return False
    decimals = len(shown.partition(".")[2])
    return abs(n - value) <= 0.5 * 10.0**-decimals + 1e-9 * max(1.0, abs(value))


def _numbers_in(text: str) -> list[float]:
    return [v for m in _NUMBER.finditer(text) if (v := _value(m.group())) is not None]


def _equation(lhs: str, rhs: str, computed: dict[str, float]) -> int | float | None:
    """The calculator's value of ``lhs`` when the answer's ``rhs`` is not it; None when they agree or the
    calculator cannot tell. A shorter tail of ``lhs`` may be the real expression ("step 2 - 391 + 100 =
    491"): the equation holds when the whole or any tail with an operator gives ``rhs``. ``computed``: the
    values the turn's calculator calls gave, by their input text (``lhs`` written as a call's input is not
    evaluated again)."""
    if (value := computed.get(" ".join(lhs.split()))) is not None and _same(rhs, value):
        return None
    first: int | float | None = None
    for start in [m.start() for m in _OPERAND_AT.finditer(lhs)]:
        tail = lhs[start:]
        if not _OPERATOR_RE.search(tail, 1):
            break
        try:
            result = calculate(tail.replace("\u00d7", "*").replace("\u00f7", "/")).result
        except CalculatorError:
            continue
        if isinstance(result, bool) or not isinstance(result, int | float):
            continue
        if _same(rhs, float(result)):
            return None
        first = result if first is None else first
    return first


def _calculated(calls: list[ToolOutcome]) -> dict[str, float]:
    """The result of each calculator call of the turn, by its input expression (whitespace collapsed)."""
    out: dict[str, float] = {}
    for c in calls:
        if c.name != "calculator" or not isinstance(expression := c.input.get("expression"), str):
            continue
        value = _unwrap(c.result)
        result = value.get("result") if isinstance(value, dict) else None
        if isinstance(result, int | float) and not isinstance(result, bool):
            try:
                number = float(result)
            except OverflowError:
                continue
            if math.isfinite(number):
                out[" ".join(expression.split())] = number
    return out


def _numbers(response: str, calls: list[ToolOutcome], request: str) -> str:
    if not any(c.name == "calculator" for c in calls) or not _DIGIT.search(response):
        return ""
    shown: list[float] = []  # the right-hand sides of the answer's equations that hold
    computed: dict[str, float] | None = None
    checked: set[tuple[str, str]] = set()
    for m in itertools.islice(_RHS.finditer(response), _MAX_EQUATIONS):
        found = _LHS.search(response[max(0, m.start() - _LHS_WINDOW) : m.start()])
        if found is None:
            continue
        lhs, rhs = found.group().strip(), m.group("rhs")
        if (lhs, rhs) not in checked:
            checked.add((lhs, rhs))
            if computed is None:
                computed = _calculated(calls)
            if (wrong := _equation(lhs, rhs, computed)) is not None:
                return f"the answer says {lhs} = {rhs}, but the calculator gives {wrong}"
        if (value := _value(rhs)) is not None:
            shown.append(value)
    known: list[float] | None = None
    for m in _PRESENTED.finditer(response):
        n = m.group("n") or m.group("m")
        if any(_same(n, v) for v in shown):
            continue
        if known is None:
            known = [v for c in calls for v in _numbers_in(c.result)] + _numbers_in(request)
        if not any(_same(n, v) for v in known):
            return f"the answer presents {n} as a result, which no tool returned"
    return ""


# ----------------------------------------------------------------------------------------------- corrections

_CORRECTION = re.compile(
    r"^\W*(?:"
    r"(?:no|nope|nah)\b[\s,.!-]*(?:(?:that|this|it)(?:'s|\s+is|\s+was)\s+)?"
    r"(?:wrong|not\s+(?:right|correct|true|what\s+i\s+(?:asked|said|meant))|incorrect|false)\b"
    r"|(?:no|nope)\b[\s,.!-]+(?:you\s+(?:forgot|missed|didn'?t|did\s+not|got)|actually|i\s+said)\b"
    r"|(?:that|this|it)(?:'s|\s+is|\s+was)\s+(?:wrong|not\s+(?:right|correct|true|what\s+i\s+(?:asked|said|meant))"
    r"|incorrect|false)\b"
    r"|(?:wrong|incorrect)\b"
    r"|actually\b[\s,]*(?:it(?:'s|\s+is|\s+was)|the\s+(?:answer|result|file|total)|that(?:'s|\s+is)|i\s+said)\b"
    r"|you\s+(?:forgot|missed|got\s+(?:it|that)\s+wrong|made\s+a\s+mistake)\b"
    r")",
    re.I,
)


def is_correction(message: str) -> bool:
    """Whether the user's message says the previous answer was wrong ("no, that's wrong", "that's not
    right", "actually it's 42", "you forgot the butter", "wrong"). Only the message's opening counts: a
    request that merely contains "wrong" ("what went wrong with the build?") is not a correction."""
    return bool(_CORRECTION.match(message.strip()[:200]))
