"""Arithmetic for the simulated model: find an expression in a sentence, evaluate it safely, show it.

"what is twelve plus 30" -> "12 + 30"; "calculate 42*17" -> "42 * 17"; "15% of 80" -> "15 / 100 * 80".
The model sends the calculator the expression, not the answer; it evaluates only to answer when no
calculator is offered, and to foresee a result it may pass on to a later step (see the planner).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "dozen": 12}
_NUMBER_WORD = "|".join(sorted([*_UNITS, *_TENS, *_SCALES], key=len, reverse=True))
_NUMBER_RUN = re.compile(rf"\b(?:{_NUMBER_WORD})(?:[\s-]+(?:and[\s-]+)?(?:{_NUMBER_WORD}))*\b", re.I)

# Phrasings of binary operations; applied before the symbol scan, longest phrases first.
_VERB_FORMS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(?:add|sum(?: of)?)\s+(\S+)\s+(?:and|to|plus)\s+(\S+)", re.I), r"\1 + \2"),
    (re.compile(r"\bsubtract\s+(\S+)\s+from\s+(\S+)", re.I), r"\2 - \1"),
    (re.compile(r"\bmultiply\s+(\S+)\s+(?:by|and|with)\s+(\S+)", re.I), r"\1 * \2"),
    (re.compile(r"\bdivide\s+(\S+)\s+by\s+(\S+)", re.I), r"\1 / \2"),
    (re.compile(r"\b(?:the\s+)?product of\s+(\S+)\s+and\s+(\S+)", re.I), r"\1 * \2"),
    (re.compile(r"\b(?:the\s+)?square root of\s+(\S+)", re.I), r"\1 ** 0.5"),
    (re.compile(r"\b(?:a\s+|one\s+)?half\s+of\s+(\d\S*)", re.I), r"\1 / 2"),
    (re.compile(r"\b(?:a\s+|one\s+)?third\s+of\s+(\d\S*)", re.I), r"\1 / 3"),
    (re.compile(r"\b(?:a\s+|one\s+)?quarter\s+of\s+(\d\S*)", re.I), r"\1 / 4"),
    (re.compile(r"\b(?:twice|double)\s+(\d\S*)", re.I), r"2 * \1"),
    (re.compile(r"\btriple\s+(\d\S*)", re.I), r"3 * \1"),
]
_WORD_OPS: list[tuple[re.Pattern[str], str]] = [
    # Starts at the first digit of a number only: from any later digit the scan of the rest is repeated
    # (quadratic in a long run of digits), and it finds nothing the first digit does not.
    (re.compile(r"(?<![\d.])(\d(?:[\d.]*\d)?)\s*(?:%|percent)\s+of\b", re.I), r"\1 / 100 *"),
    (re.compile(r"\bto the power of\b", re.I), " ** "),
    (re.compile(r"\bmultiplied by\b", re.I), " * "),
    (re.compile(r"\bdivided by\b", re.I), " / "),
    (re.compile(r"\b(?:times)\b", re.I), " * "),
    (re.compile(r"\b(?:plus)\b", re.I), " + "),
    (re.compile(r"\b(?:minus)\b", re.I), " - "),
    (re.compile(r"\b(?:over)\b", re.I), " / "),
    (re.compile(r"\b(?:mod|modulo)\b", re.I), " % "),
    (re.compile(r"\bsquared\b", re.I), " ** 2"),
    (re.compile(r"\bcubed\b", re.I), " ** 3"),
    (re.compile(r"(?<=\d)\s*[x\u00d7]\s*(?=[\d(])", re.I), " * "),
    (re.compile("\u00f7"), " / "),
    (re.compile(r"\^"), " ** "),
]
_CANDIDATE = re.compile(r"[\d.\s+\-*/%()]+")
_OPERATOR = re.compile(r"[+\-*/%]")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|\*\*|[-+*/%()]")
_BINARY_TOKENS = frozenset({"+", "-", "*", "/", "%", "**"})
_MAX_BITS = 10_000
"""A result larger than this (about 3,000 digits) is refused: it could not be shown anyway (Python prints
at most 4,300 digits) and its arithmetic grows with it."""

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


_MAX_SPELLED = 10**15


class ArithmeticError_(ValueError):
    """The expression cannot be evaluated (division by zero, too large, not arithmetic)."""


def words_to_numbers(text: str) -> str:
    """Replace runs of English number words with digits: "forty two" -> "42", "a hundred" -> "100", "three
    point five" -> "3.5", "1,250" -> "1250". Words that do not make one number stay apart: "five and seven"
    -> "5 and 7" ("and" joins only after hundred/thousand/million), "one two" -> "1 2"."""
    text = _THOUSANDS.sub("", text)
    if not _ANY_NUMBER_WORD.search(text):
        return text
    text = _A_SCALE.sub("one", text)
    text = _POINT.sub(
        lambda m: " point " + "".join(str(_DIGIT_WORDS[w.lower()]) for w in m.group(1).split()), text
    )
    text = _NUMBER_RUN.sub(_spelled, text)
    return _DECIMAL_POINT.sub(lambda m: f"{m.group(1) or '0'}.{m.group(2)}", text)


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
"""A thousands separator: "1,250" is one number (a list is written "1, 250")."""
_ANY_NUMBER_WORD = re.compile(rf"\b(?:{_NUMBER_WORD}|dozen|point)\b", re.I)
_A_SCALE = re.compile(r"\ban?(?=[\s-]+(?:hundred|thousand|million|dozen)\b)", re.I)
_DIGIT_WORDS = {**{w: v for w, v in _UNITS.items() if v < 10}, "oh": 0}
_POINT = re.compile(rf"\bpoint((?:[\s-]+(?:{'|'.join(_DIGIT_WORDS)})\b)+)", re.I)
_DECIMAL_POINT = re.compile(r"(?:(?<![\d.])(\d+)\s+)?\bpoint (\d+)\b")


def _spelled(match: re.Match[str]) -> str:
    """One run of number words as the numbers it spells, each a valid English number."""
    numbers: list[str] = []
    total = current = 0
    last = ""  # what the previous word was: "", "unit", "tens", "hundred", "scale"

    def flush() -> None:
        nonlocal total, current, last
        if last:
            numbers.append(str(total + current))
        total = current = 0
        last = ""

    for word in re.split(r"[\s-]+", match.group(0).lower()):
        if word == "and":
            if last not in ("hundred", "scale"):
                flush()
                numbers.append("and")
            continue
        kind = (
            "unit"
            if word in _UNITS
            else "tens"
            if word in _TENS
            else "hundred"
            if word == "hundred"
            else "scale"
        )
        if not _follows(last, kind, current, word):
            flush()
        if kind in ("unit", "tens"):
            current += _UNITS.get(word, 0) + _TENS.get(word, 0)
        elif kind == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * _SCALES[word]
            current = 0
        last = kind
        if current > _MAX_SPELLED or total > _MAX_SPELLED:
            return match.group(0)  # no number anyone wrote: left as words
    flush()
    return " ".join(numbers)


def _follows(last: str, kind: str, current: int, word: str) -> bool:
    """Whether ``word`` (of ``kind``) goes on the number so far: "twenty" "five", "five" "hundred"."""
    if not last:
        return True
    if kind == "unit":
        return last in ("hundred", "scale") or (last == "tens" and _UNITS[word] < 10)
    if kind == "tens":
        return last in ("hundred", "scale")
    if kind == "hundred":
        return last in ("unit", "tens") and current < 100
    return last in ("unit", "tens", "hundred")


def find_expression(text: str) -> str | None:
    """The longest arithmetic expression in ``text`` with at least one operator, normalized."""
    rewritten = _rewrite(text)
    best: str | None = None
    for match in _CANDIDATE.finditer(rewritten):
        if not _OPERATOR.search(match.group(0)):
            continue  # a number alone is no expression: not worth a parse (a long text has thousands)
        candidate = normalize(match.group(0))
        if candidate and _is_expression(candidate) and (best is None or len(candidate) > len(best)):
            best = candidate
    return best


def _rewrite(text: str, *, verbs: bool = True) -> str:
    rewritten = words_to_numbers(text)
    if verbs:
        for pattern, replacement in _VERB_FORMS:
            rewritten = pattern.sub(replacement, rewritten)
    for pattern, replacement in _WORD_OPS:
        rewritten = pattern.sub(replacement, rewritten)
    return rewritten


_LEAD_IN = re.compile(
    r"^(?:(?:what(?:'s|\s+is|\s+are|\s+does)|how\s+much\s+(?:is|are|does)|calculate|compute|evaluate|"
    r"work\s+out|figure\s+out|solve|tell\s+me|find|give\s+me|do|and)\b\s*)*(?:the\s+(?:result|answer|value)"
    r"\s+of\s+|the\s+)?",
    re.I,
)
_TRAILERS = ("=", "equals", "equal", "make", "come to")


def arithmetic_clause(clause: str) -> str | None:
    """The expression when the whole clause asks for arithmetic ("what is 12 plus 30"), else None.

    Nothing may be left over: "what is 2+2 and the weather in Paris" is not arithmetic (the model would
    answer half of it)."""
    rewritten = _rewrite(clause)
    lead = _LEAD_IN.match(rewritten)
    body = rewritten[lead.end() if lead else 0 :].rstrip()
    for word in _TRAILERS:
        if body.lower().endswith(word):
            body = body[: -len(word)].rstrip()
            break
    if not body.strip() or _CANDIDATE.fullmatch(body) is None or not _OPERATOR.search(body):
        return None
    candidate = normalize(body)
    if not candidate or not _is_expression(candidate):
        return None
    # Every number of the clause must be in the expression (nothing dropped at its edges).
    if len(_NUMBER.findall(candidate)) != len(_NUMBER.findall(body)):
        return None
    return candidate


_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_IT = r"(?:it|that|this|the\s+(?:result|answer|total|number|value)|them)"
_CONTINUATIONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"^(?:then\s+)?add\s+(?P<n>\d+(?:\.\d+)?)(?:\s+(?:to|onto)\s+{_IT})?$", re.I), "{} + {n}"),
    (re.compile(rf"^(?:then\s+)?add\s+{_IT}\s+to\s+(?P<n>\d+(?:\.\d+)?)$", re.I), "{} + {n}"),
    (
        re.compile(
            rf"^(?:then\s+)?(?:subtract|take\s+away|take)\s+(?P<n>\d+(?:\.\d+)?)(?:\s+from\s+{_IT})?$", re.I
        ),
        "{} - {n}",
    ),
    (
        re.compile(rf"^(?:then\s+)?multiply(?:\s+{_IT})?\s+(?:by|with)\s+(?P<n>\d+(?:\.\d+)?)$", re.I),
        "{} * {n}",
    ),
    (re.compile(rf"^(?:then\s+)?divide(?:\s+{_IT})?\s+by\s+(?P<n>\d+(?:\.\d+)?)$", re.I), "{} / {n}"),
    (re.compile(rf"^(?:then\s+)?(?:square)\s+{_IT}$", re.I), "{} ** 2"),
    (re.compile(rf"^(?:then\s+)?(?:cube)\s+{_IT}$", re.I), "{} ** 3"),
    (re.compile(rf"^(?:then\s+)?double\s+{_IT}$", re.I), "{} * 2"),
    (re.compile(rf"^(?:then\s+)?triple\s+{_IT}$", re.I), "{} * 3"),
    (re.compile(rf"^(?:then\s+)?halve\s+{_IT}$", re.I), "{} / 2"),
    (
        re.compile(
            rf"^(?:then\s+)?(?:take\s+|what\s+is\s+|calculate\s+)?(?P<n>\d+(?:\.\d+)?)\s*(?:%|percent)\s+of\s+{_IT}$",
            re.I,
        ),
        "{n} / 100 * {}",
    ),
    (re.compile(r"^(?:then\s+)?(?:and\s+)?(?P<op>\+|-|\*\*|\*|/|%)\s*(?P<n>\d+(?:\.\d+)?)$"), "{} {op} {n}"),
]
_N = r"\d+(?:\.\d+)?"


def continuation(clause: str) -> str | None:
    """A template for arithmetic on the previous result: "add 100 to it" -> "{} + 100", "times two" ->
    "{} * 2", "squared" -> "{} ** 2"; None if the clause is not one."""
    text = words_to_numbers(clause).strip()
    for pattern, template in _CONTINUATIONS:
        if (match := pattern.match(text)) is not None:
            return _fill(template, match)
    # Operator words ("times 2", "divided by 4", "squared") read as their symbols.
    text = _rewrite(text, verbs=False).strip()
    pattern, template = _CONTINUATIONS[-1]
    if (match := pattern.match(text)) is not None:
        return _fill(template, match)
    return None


def _fill(template: str, match: re.Match[str]) -> str:
    groups = match.groupdict()
    return template.replace("{n}", groups.get("n") or "").replace("{op}", groups.get("op") or "")


def normalize(expression: str) -> str:
    """Canonical spacing: binary operators spaced, unary signs and parentheses tight: "(2 + 3) * -4"."""
    tokens = _TOKEN.findall(expression)
    # A sentence's edges are not part of the sum: "is 2+2." or "= (" leave dangling tokens.
    while tokens and tokens[-1] in _BINARY_TOKENS | {"("}:
        tokens.pop()
    while tokens and tokens[0] in (_BINARY_TOKENS - {"+", "-"}) | {")"}:
        tokens.pop(0)
    parts: list[str] = []
    previous: str | None = None
    for token in tokens:
        after_operand = previous is not None and (previous == ")" or previous[0].isdigit())
        if token in _BINARY_TOKENS and after_operand:
            parts.append(f" {token} ")
        elif after_operand and (token[0].isdigit() or token == "("):
            # Two operands in a row ("12 30") is not arithmetic; keep the gap so parsing rejects it.
            parts.append(f" {token}")
        else:
            parts.append(token)
        previous = token
    return "".join(parts).strip()


def _is_expression(candidate: str) -> bool:
    try:
        tree = ast.parse(candidate, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # Not Python, a number too long to convert, or nested too deep ("1+1+...+1" by the thousand).
        return False
    return any(isinstance(node, ast.BinOp) for node in ast.walk(tree))


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression without ``eval``: numbers, + - * / // % ** and parentheses."""
    try:
        tree = ast.parse(expression, mode="eval")
        return _eval(tree.body)
    except ArithmeticError_:
        raise
    except (SyntaxError, ValueError, MemoryError):
        # Not Python, or a number too long to convert.
        raise ArithmeticError_(f"not an arithmetic expression: {expression!r}") from None
    except RecursionError:
        raise ArithmeticError_("expression nested too deeply") from None


def _eval(node: ast.expr) -> int | float:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
            raise ArithmeticError_("exponent too large")
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ArithmeticError_("division by zero") from None
        except OverflowError:  # a float cannot hold it (e.g. a 400-digit integer divided)
            raise ArithmeticError_("result too large") from None
        if isinstance(result, complex) or (isinstance(result, float) and not math.isfinite(result)):
            raise ArithmeticError_("result is not a finite real number")
        if isinstance(result, int) and result.bit_length() > _MAX_BITS:
            raise ArithmeticError_("result too large")
        return result
    raise ArithmeticError_("only numbers and + - * / % ** are allowed")


def format_number(value: int | float) -> str:
    """714 -> "714"; 2.5 -> "2.5"; 0.1 + 0.2 -> "0.3" (ten significant digits)."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.10g}"
    return str(value)


def pretty(expression: str) -> str:
    """How the model writes an expression back to the user: "42 * 17" -> "42 x 17"."""
    return expression.replace(" ** ", "^").replace("**", "^").replace(" * ", " x ")
