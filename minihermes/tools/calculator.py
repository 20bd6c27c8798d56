"""A calculator for the agent: arithmetic on text an LLM (or a user) wrote, without eval.

The expression is normalised ("42 x 17", "2^10", "12 plus 30", "1,000", "15% of 80"), parsed with ``ast``
and evaluated by walking a whitelist of node types. It runs in the server process, which is fine because it
never executes anything; to stay fine on hostile input every operation that could take long or allocate
much is bounded *before* it is computed: input length, AST size and depth, the bit size of powers and
products, factorial arguments, digits of the result.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ToolError

MAX_INPUT_CHARS = 500
MAX_NODES = 200
MAX_DEPTH = 40
MAX_RESULT_DIGITS = 1000
MAX_INT_BITS = int(MAX_RESULT_DIGITS * math.log2(10)) + 1
MAX_FACTORIAL = 1000  # also bounded by MAX_RESULT_DIGITS, checked with lgamma before computing
MAX_ROUND_DIGITS = 100

Number = int | float
Value = int | float | bool


class CalculatorError(ToolError):
    """A refused expression. Codes: empty_expression, input_too_long, invalid_expression, unsupported,
    unknown_name, too_complex, invalid_argument, division_by_zero, math_error, result_too_large."""


@dataclass(frozen=True, slots=True)
class Calculation:
    """``expression`` is the normalised form that was evaluated; ``display`` a short human rendering."""

    expression: str
    result: Value
    display: str

    def to_dict(self) -> dict[str, Any]:
        """The tool reply: ``{"expression", "result", "display"}``."""
        return {"expression": self.expression, "result": self.result, "display": self.display}


# ------------------------------------------------------------------------------------------- normalisation

_PHRASES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b(?:{words})\b"), symbol)
    for words, symbol in (
        (r"to\s+the\s+power\s+of", "**"),
        (r"raised\s+to", "**"),
        (r"multiplied\s+by", "*"),
        (r"divided\s+by", "/"),
        (r"plus", "+"),
        (r"minus", "-"),
        (r"times", "*"),
        (r"over", "/"),
        (r"modulo|mod", "%"),
        (r"squared", "**2"),
        (r"cubed", "**3"),
        (r"ln", "log"),
    )
]
_PREFIX = re.compile(r"^\s*(?:what\s+is|what's|calculate|compute|evaluate)\s+", re.IGNORECASE)
_TIMES_X = re.compile(r"(?<=[0-9)])\s*[x\u00d7]\s*(?=[0-9(.])")
_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")
_PERCENT_OF = re.compile(r"(\d+(?:\.\d+)?)\s*%\s*of\b")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%(?!\s*[\d(.])")
_CALL = re.compile(r"[a-z_]\w*\s*\(")


def normalize(text: str) -> str:
    """The Python-syntax expression for a calculator input (no evaluation, no validation of names)."""
    text = text.replace("²", "**2").replace("³", "**3")
    text = unicodedata.normalize("NFKC", text)  # full-width digits and operators
    text = text.replace("÷", "/").replace("\u2212", "-").replace("\u2013", "-").replace("·", "*")
    text = _PREFIX.sub("", text.strip()).strip().rstrip("?=").strip().lower()
    for pattern, symbol in _PHRASES:
        text = pattern.sub(f" {symbol} ", text)
    text = _TIMES_X.sub("*", text)
    if not _CALL.search(text):
        # "1,000" is a thousands separator unless commas separate function arguments.
        text = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)
    text = _PERCENT_OF.sub(r"(\1/100)*", text)
    text = _PERCENT.sub(r"(\1/100)", text)
    text = text.replace("^", "**")
    return " ".join(text.split())


# ------------------------------------------------------------------------------------------------ checks


def _fail(code: str, message: str) -> CalculatorError:
    return CalculatorError(code, message)


def _check(value: Value) -> Value:
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail("result_too_large" if not math.isnan(value) else "math_error", "result is not finite")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS - 8:
        # Near the bound the bit length is ambiguous about the digit count; str() is cheap at this size.
        if value.bit_length() > MAX_INT_BITS or len(str(abs(value))) > MAX_RESULT_DIGITS:
            raise _fail("result_too_large", f"result has more than {MAX_RESULT_DIGITS} digits")
    return value


def _number(value: Value, what: str) -> Number:
    if isinstance(value, bool):
        raise _fail("unsupported", f"{what} must be a number, not a comparison result")
    return value


def _as_float(value: Number) -> float:
    try:
        return float(value)
    except OverflowError:
        raise _fail("result_too_large", "number too large for floating point") from None


def _as_int(value: Number, what: str) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise _fail("invalid_argument", f"{what} must be a whole number")
        return int(value)
    return value


# -------------------------------------------------------------------------------------------- operators


def _power(base: Number, exp: Number) -> Number:
    if isinstance(base, int) and isinstance(exp, int):
        if exp < 0:
            if base == 0:
                raise _fail("division_by_zero", "zero raised to a negative power")
            return float(_as_float(base) ** exp)
        if base in (0, 1, -1) or exp <= 1:
            return int(base**exp)  # cheap whatever the exponent's size
        # Estimate the size of the result before computing it: 9**9**9 must be refused, not attempted.
        # (|base| >= 2 here, so the result has at least `exp` bits.)
        if exp > MAX_INT_BITS or exp * math.log2(abs(base)) > MAX_INT_BITS:
            raise _fail("result_too_large", f"the result would have more than {MAX_RESULT_DIGITS} digits")
        return int(base**exp)
    b, e = _as_float(base), _as_float(exp)
    if b == 0 and e < 0:
        raise _fail("division_by_zero", "zero raised to a negative power")
    if b < 0 and not e.is_integer():
        raise _fail("math_error", "a negative number raised to a fractional power is not real")
    try:
        return float(b**e)
    except OverflowError:
        raise _fail("result_too_large", "result out of floating point range") from None


def _multiply(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int) and a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
        raise _fail("result_too_large", f"the result would have more than {MAX_RESULT_DIGITS} digits")
    if isinstance(a, int) != isinstance(b, int):
        return _as_float(a) * _as_float(b)
    return a * b


def _divide(a: Number, b: Number) -> Number:
    if b == 0:
        raise _fail("division_by_zero", "division by zero")
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b  # keep exact integers exact: 10/2 is 5, not 5.0
    try:
        return a / b
    except OverflowError:
        raise _fail("result_too_large", "result out of floating point range") from None


def _floordiv(a: Number, b: Number) -> Number:
    if b == 0:
        raise _fail("division_by_zero", "division by zero")
    return a // b


def _modulo(a: Number, b: Number) -> Number:
    if b == 0:
        raise _fail("division_by_zero", "modulo by zero")
    return a % b


def _add(a: Number, b: Number) -> Number:
    if isinstance(a, int) != isinstance(b, int):
        return _as_float(a) + _as_float(b)
    return a + b


def _subtract(a: Number, b: Number) -> Number:
    if isinstance(a, int) != isinstance(b, int):
        return _as_float(a) - _as_float(b)
    return a - b


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: _add,
    ast.Sub: _subtract,
    ast.Mult: _multiply,
    ast.Div: _divide,
    ast.FloorDiv: _floordiv,
    ast.Mod: _modulo,
    ast.Pow: _power,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


# -------------------------------------------------------------------------------------------- functions


def _float_fn(fn: Callable[[float], float]) -> Callable[..., Number]:
    def call(x: Number) -> Number:
        try:
            return fn(_as_float(x))
        except ValueError:
            raise _fail("math_error", f"{fn.__name__}({x}) is undefined") from None
        except OverflowError:
            raise _fail("result_too_large", f"{fn.__name__}({x}) is out of range") from None

    return call


def _sqrt(x: Number) -> Number:
    if x < 0:
        raise _fail("math_error", "square root of a negative number")
    if isinstance(x, int):
        root = math.isqrt(x)
        if root * root == x:
            return root
    return math.sqrt(_as_float(x))


def _log(x: Number, base: Number | None = None) -> Number:
    if x <= 0 or (base is not None and (base <= 0 or base == 1)):
        raise _fail("math_error", "logarithm of a non-positive number or with an invalid base")
    return math.log(x) if base is None else math.log(x, base)


def _factorial(x: Number) -> Number:
    n = _as_int(x, "factorial's argument")
    if n < 0:
        raise _fail("invalid_argument", "factorial of a negative number")
    if n > MAX_FACTORIAL or math.lgamma(n + 1) / math.log(10) > MAX_RESULT_DIGITS:
        raise _fail("result_too_large", f"{n}! has more than {MAX_RESULT_DIGITS} digits")
    return math.factorial(n)


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    n = _as_int(ndigits, "round's digits")
    if abs(n) > MAX_ROUND_DIGITS:
        raise _fail("invalid_argument", f"round() digits must be within ±{MAX_ROUND_DIGITS}")
    return round(x, n)


def _floor(x: Number) -> Number:
    return math.floor(x)


def _ceil(x: Number) -> Number:
    return math.ceil(x)


# name -> (function, min args, max args)
_FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int]] = {
    "sqrt": (_sqrt, 1, 1),
    "sin": (_float_fn(math.sin), 1, 1),
    "cos": (_float_fn(math.cos), 1, 1),
    "tan": (_float_fn(math.tan), 1, 1),
    "asin": (_float_fn(math.asin), 1, 1),
    "acos": (_float_fn(math.acos), 1, 1),
    "atan": (_float_fn(math.atan), 1, 1),
    "exp": (_float_fn(math.exp), 1, 1),
    "log": (_log, 1, 2),
    "log10": (_float_fn(math.log10), 1, 1),
    "log2": (_float_fn(math.log2), 1, 1),
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "floor": (_floor, 1, 1),
    "ceil": (_ceil, 1, 1),
    "factorial": (_factorial, 1, 1),
    "min": (min, 1, 50),
    "max": (max, 1, 50),
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


# ------------------------------------------------------------------------------------------- evaluation


def _eval(node: ast.AST, depth: int) -> Value:
    if depth > MAX_DEPTH:
        raise _fail("too_complex", f"expression nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, ast.Constant):
        literal = node.value
        if not isinstance(literal, int | float) or isinstance(literal, bool):
            raise _fail("unsupported", f"literal {literal!r} is not a number")
        return _check(literal)
    if isinstance(node, ast.Name):
        if node.id not in _CONSTANTS:
            raise _fail("unknown_name", f"unknown name {node.id!r}")
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _number(_eval(node.operand, depth + 1), "operand")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _number(_eval(node.left, depth + 1), "operand")
        right = _number(_eval(node.right, depth + 1), "operand")
        return _check(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        values = [_number(_eval(n, depth + 1), "operand") for n in (node.left, *node.comparators)]
        return all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:], strict=False))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        name = node.func.id
        if name not in _FUNCTIONS:
            raise _fail("unknown_name", f"unknown function {name!r}")
        fn, low, high = _FUNCTIONS[name]
        if not low <= len(node.args) <= high or any(isinstance(a, ast.Starred) for a in node.args):
            raise _fail("invalid_argument", f"{name}() takes {low}..{high} arguments")
        args = [_number(_eval(a, depth + 1), f"{name}() argument") for a in node.args]
        try:
            return _check(fn(*args))
        except OverflowError:
            raise _fail("result_too_large", f"{name}() result out of range") from None
    raise _fail("unsupported", f"{type(node).__name__} is not allowed in a calculation")


def _display(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return format(value, ".15g")
    return str(value)


def calculate(text: str) -> Calculation:
    """Evaluate a calculator expression. Raises ``CalculatorError`` for anything it will not compute."""
    if not isinstance(text, str) or not text.strip():
        raise _fail("empty_expression", "nothing to calculate")
    if len(text) > MAX_INPUT_CHARS:
        raise _fail("input_too_long", f"expression is longer than {MAX_INPUT_CHARS} characters")
    expression = normalize(text)
    if not expression:
        raise _fail("empty_expression", "nothing to calculate")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _fail("invalid_expression", f"cannot parse {expression!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise _fail("too_complex", f"expression has more than {MAX_NODES} parts")
    value = _eval(tree.body, 0)
    if isinstance(value, float) and value == 0:
        value = 0.0  # no "-0"
    return Calculation(expression, value, _display(value))
