"""Linear-time patterns and a bounded validation for tool input schemas.

Patterns in a tool's input schema come from whoever registers the tool (an admin, an MCP server, a user's
self-written tool) and run on the event loop against input an LLM or a caller writes. Python's ``re``
backtracks: ``^(a+)+$`` against ``"a" * 40 + "!"`` pins the loop for hours. So ``pattern``,
``patternProperties``, ``additionalProperties`` (which matches names against ``patternProperties``) and
``format: regex`` run on RE2 (``google-re2``): time linear in the text, no backreferences or lookaround
(such a pattern is refused when the tool is registered).

Linear is not free: a large RE2 program on a long string, ``uniqueItems`` on a long array of objects, an
``anyOf`` of many branches over a deep input or a ``$ref`` that fans out all cost CPU in proportion to what
the schema and the input multiply to. Every keyword evaluation is charged to a meter (``metered``); a
validation that needs more than ``MAX_STEPS`` steps stops with ``TooCostly``, whatever the schema and input.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import re2  # type: ignore[import-untyped]
from jsonschema import Draft202012Validator, FormatChecker, validators  # type: ignore[import-untyped]
from jsonschema._utils import Unset  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

MAX_STEPS = 2000
"""Steps one validation may take. A step is about what jsonschema spends on one keyword (10-20 us: it
builds a validator per subschema); a ``$ref``, a long text, a long list or a long error message costs more.
So a validation stops within about 50 ms of CPU whatever the schema and input, while an ordinary tool
call takes a few dozen steps."""
PROGRAM_MEMORY = 2 << 20
"""RE2's memory budget for one schema pattern: a pattern whose program is larger is refused."""
INPUT_PROGRAM_MEMORY = 256 << 10
"""The same for a pattern that is itself input (``format: regex``)."""
_TEXT_STEP = 20_000
"""A search costs one step per ``_TEXT_STEP`` (characters x program instructions, at least 20 a
character): RE2's slowest path (no DFA, many live states) runs about that many in a step's time."""
_MIN_WEIGHT = 20
_REF_STEPS = 10
"""jsonschema resolves a reference and builds a validator for its target: ~100 us, plus a step for each
reference it is already inside."""
_REFS = frozenset({"$ref", "$dynamicRef"})
_INPUT_REGEX_STEPS = 500
_MESSAGE_STEP = 1000
"""Building an error message costs a step per this many characters (messages quote the instance)."""

Error = re2.error


def _options(max_mem: int) -> Any:
    options = re2.Options()
    options.max_mem = max_mem
    options.never_capture = True  # only "does it match" is asked
    options.log_errors = False  # a refused pattern is the caller's error, not a line on stderr
    return options


_SCHEMA_OPTIONS = _options(PROGRAM_MEMORY)
_INPUT_OPTIONS = _options(INPUT_PROGRAM_MEMORY)


@dataclass(frozen=True, slots=True)
class Pattern:
    """A compiled pattern and what one character of text costs to search with it."""

    regex: Any
    weight: int

    def search(self, text: str) -> bool:
        try:
            return self.regex.search(text) is not None
        except UnicodeEncodeError:  # a lone surrogate (valid JSON, not valid Unicode) matches nothing
            return False


def compile_pattern(pattern: str, *, user_input: bool = False) -> Pattern:
    """Compile a JSON Schema pattern (ECMA-262 dialect) on RE2. Raises ``Error`` with RE2's reason."""
    try:
        regex = re2.compile(_ecma_escapes(pattern), _INPUT_OPTIONS if user_input else _SCHEMA_OPTIONS)
    except UnicodeEncodeError:
        raise Error("the pattern is not valid Unicode (a lone surrogate)") from None
    return Pattern(regex, max(_MIN_WEIGHT, int(regex._regexp.ProgramSize())))


def reason(error: Exception) -> str:
    """RE2's message for a refused pattern, as text."""
    text = error.args[0] if error.args else str(error)
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def _ecma_escapes(pattern: str) -> str:
    r"""``\uXXXX`` (ECMA-262, common in JSON Schema) as RE2's ``\x{XXXX}``; one linear pass."""
    if "\\u" not in pattern:
        return pattern
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        hexa = pattern[i + 2 : i + 6]
        if pattern[i + 1] == "u" and len(hexa) == 4 and all(h in "0123456789abcdefABCDEF" for h in hexa):
            out.append(f"\\x{{{hexa}}}")
            i += 6
        else:
            out.append(pattern[i : i + 2])
            i += 2
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _cached(pattern: str) -> Pattern:
    return compile_pattern(pattern)


# ---------------------------------------------------------------------------------------------- the meter


class TooCostly(Exception):
    """A validation used up its steps."""


class PatternUnusable(Exception):
    """A pattern reached at validation time that RE2 refuses (registration refuses those it can see)."""

    def __init__(self, pattern: str, why: str) -> None:
        super().__init__(f"pattern {pattern!r} cannot be used: {why}")
        self.pattern = pattern


class _Meter:
    __slots__ = ("left", "patterns", "refs")

    def __init__(self, steps: int, patterns: dict[str, Pattern]) -> None:
        self.left = steps
        self.patterns = patterns
        self.refs = 0
        """References being followed right now: jsonschema's resolver keeps each one's scope, so a
        lookup costs more the deeper it is."""

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise TooCostly

    def watch(self, errors: Any) -> Iterator[ValidationError]:
        for error in errors:
            if isinstance(error.validator, Unset):  # made here, not passed up from a subschema
                self.spend(1 + len(error.message) // _MESSAGE_STEP)
            yield error

    def within_ref(self, errors: Any) -> Iterator[ValidationError]:
        self.refs += 1
        try:
            yield from self.watch(errors)
        finally:
            self.refs -= 1


_METER: contextvars.ContextVar[_Meter | None] = contextvars.ContextVar("tool_schema_meter", default=None)


@contextmanager
def metered(patterns: dict[str, Pattern], steps: int = MAX_STEPS) -> Iterator[None]:
    """Validation inside this block is charged (``TooCostly`` past ``steps``) and uses ``patterns``."""
    token = _METER.set(_Meter(steps, patterns))
    try:
        yield
    finally:
        _METER.reset(token)


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's unanchored match), on RE2."""
    meter = _METER.get()
    found = meter.patterns.get(pattern) if meter is not None else None
    if found is None:
        try:
            found = _cached(pattern)
        except Error as e:
            raise PatternUnusable(pattern, reason(e)) from None
        if meter is not None:
            meter.spend(1 + found.weight // _TEXT_STEP)  # compiling is about as costly as one pass
    if meter is not None:
        meter.spend(1 + len(text) * found.weight // _TEXT_STEP)
    return found.search(text)


# ------------------------------------------------------------------------------------------- the keywords


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for k, v in instance.items():
            if search(patrn, k):
                yield from validator.descend(v, subschema, path=k, schema_path=patrn)


def additional_names(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The names of ``instance`` that neither ``properties`` nor ``patternProperties`` cover."""
    known = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [k for k in instance if k not in known and not any(search(p, k) for p in patterns)]


def _additional_properties(
    validator: Any, extra: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    # jsonschema's own, with the names matched on RE2.
    if not validator.is_type(instance, "object"):
        return
    extras = additional_names(instance, schema)
    if validator.is_type(extra, "object"):
        for name in extras:
            yield from validator.descend(instance[name], extra, path=name)
    elif not extra and extras:
        names = ", ".join(repr(e) for e in sorted(extras))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{names} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _cost(keyword: str, value: Any, instance: Any) -> int:
    """Steps of one keyword evaluation, beyond what its subschemas and searches are charged."""
    if keyword == "uniqueItems" and value and isinstance(instance, list):
        # jsonschema sorts what it can and compares every pair of what it cannot.
        n = len(instance)
        return 1 + (n // 2 if all(_scalar(v) for v in instance) else n * n // 16)
    if keyword == "enum" and isinstance(value, list):
        return 1 + len(value) // 16
    if keyword == "format" and isinstance(instance, str):
        return 1 + len(instance) // 1000
    if isinstance(instance, list | dict):
        return 1 + len(instance) // 64
    return 1


def _metered_keyword(keyword: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        meter = _METER.get()
        if meter is None:
            return fn(validator, value, instance, schema)
        if keyword in _REFS:
            meter.spend(_REF_STEPS + meter.refs)
            return meter.within_ref(fn(validator, value, instance, schema) or ())
        meter.spend(_cost(keyword, value, instance))
        errors = fn(validator, value, instance, schema)
        return None if errors is None else meter.watch(errors)

    return run


def _is_regex(instance: Any) -> bool:
    if not isinstance(instance, str):
        return True
    meter = _METER.get()
    if meter is not None:
        meter.spend(_INPUT_REGEX_STEPS)
    compile_pattern(instance, user_input=True)
    return True


FORMATS = FormatChecker(formats=())
FORMATS.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
FORMATS.checks("regex", raises=Error)(_is_regex)

_KEYWORDS = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}

Validator = validators.extend(
    Draft202012Validator,
    validators={k: _metered_keyword(k, fn) for k, fn in _KEYWORDS.items()},
    format_checker=FORMATS,
)
"""Draft 2020-12 with RE2 patterns and metered keywords, for every subschema it reaches."""

_EVOLVE_FIELDS = [(f.name, f.alias) for f in Validator.__attrs_attrs__ if f.init]


def _evolve(self: Any, **changes: Any) -> Any:
    # jsonschema's evolve, without its switch to the stock validator of whatever dialect a subschema's
    # "$schema" names (there Python's re would run the patterns, unmetered). The meta-schema is checked
    # with this class too.
    changes.setdefault("schema", self.schema)
    for name, alias in _EVOLVE_FIELDS:
        if alias not in changes:
            changes[alias] = getattr(self, name)
    return type(self)(**changes)


Validator.evolve = _evolve
