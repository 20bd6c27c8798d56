"""JSON Schema for tool inputs: checked at registration, compiled once, validated before every call.

``jsonschema`` (Draft 2020-12) is the authority. Validation runs on every tool call, so a compiled schema
also carries a quick checker for the subset of keywords tool schemas mostly use (types, properties,
required, additionalProperties, enum, lengths, bounds, items): when it says "valid" the input is valid; when
it says anything else, or the schema uses other keywords, jsonschema decides and explains.

Whoever registers a tool writes its schema, and validation runs on the event loop, so nothing in a schema
or an input may cost unbounded CPU: patterns run on RE2 and are compiled at registration (one RE2 cannot
compile is refused, naming where it is), schemas and inputs have size and depth limits, and a validation
stops after ``MAX_STEPS`` steps (see ``_patterns``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError, ValidationError, best_match  # type: ignore[import-untyped]

from minihermes.runtime import InvalidArgument

from ._patterns import (
    FORMATS,
    MAX_STEPS,
    Error,
    Pattern,
    PatternUnusable,
    TooCostly,
    Validator,
    additional_names,
    compile_pattern,
    metered,
    reason,
)

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 64
"""Nesting of objects and arrays in an input schema."""
MAX_PATTERNS = 100
"""Patterns (``pattern`` values and ``patternProperties`` names) in one input schema."""
MAX_PATTERN_PROGRAM = 100_000
"""RE2 instructions of all of a schema's patterns together (compiling costs about a microsecond each)."""
MAX_CHECK_STEPS = 20_000
"""Steps (see ``_patterns.MAX_STEPS``) checking a schema against the meta-schema may take: a schema
of a hundred-odd subschemas (the largest built-in takes 1,000), about 0.2 s of CPU at most."""
MAX_INPUT_DEPTH = 32
"""Nesting of objects and arrays in one tool call's input."""
MAX_INPUT_NODES = 10_000
"""Values (objects, arrays, strings, numbers...) in one tool call's input."""
_MAX_MESSAGE_CHARS = 300
_MAX_REPORTED_ERRORS = 5

Check = Callable[[Any], bool]
_META = Validator(Draft202012Validator.META_SCHEMA, format_checker=FORMATS)


class CompiledSchema:
    """A checked schema, ready to validate inputs."""

    __slots__ = ("_patterns", "_quick", "_validator", "schema")

    def __init__(self, schema: dict[str, Any]) -> None:
        """Raises InvalidArgument when the schema breaks a limit or has a pattern RE2 cannot compile (a
        schema stored before these checks existed)."""
        self.schema = schema
        self._patterns = scan_schema(schema)
        # Without $schema: jsonschema would switch to its stock validator (Python's re) for a schema naming
        # a dialect; scan_schema allows one only at the root.
        body = {k: v for k, v in schema.items() if k != "$schema"}
        self._validator = Validator(body, format_checker=FORMATS)
        self._quick = _quick(schema)

    def input_error(self, args: Any) -> dict[str, Any] | None:
        """None when ``args`` fits, else ``{code: "invalid_input", message, field, errors}``; ``field`` is the
        path of the most relevant failure (``stops[1].name``). Input over the size limits, or whose
        validation would take more than ``MAX_STEPS`` steps, is refused the same way."""
        too_big = _input_limits(args)
        if too_big is not None:
            return {"code": "invalid_input", "message": too_big, "field": "", "errors": []}
        if self._quick is not None and self._quick(args):
            return None
        try:
            with metered(self._patterns):
                return self._explain(args)
        except (TooCostly, RecursionError):
            message = (
                f"input: checking this input against the tool's schema takes more than {MAX_STEPS} steps;"
                " send less (shorter text, fewer items)"
            )
            return {"code": "invalid_input", "message": message, "field": "", "errors": []}
        except PatternUnusable as e:
            message = _short(f"this tool's input schema cannot be used: {e}; register the tool again")
            return {"code": "invalid_schema", "message": message, "field": "", "errors": []}

    def _explain(self, args: Any) -> dict[str, Any] | None:
        errors = list(itertools.islice(self._validator.iter_errors(args), 20))
        if not errors:
            return None
        best = best_match(errors)
        where = _error_field(best)
        listed = [
            {"field": f, "message": _message(e, f)}
            for e in errors[:_MAX_REPORTED_ERRORS]
            for f in [_error_field(e)]
        ]
        return {"code": "invalid_input", "message": _message(best, where), "field": where, "errors": listed}


# ------------------------------------------------------------------------------------------- registration


def check_schema(schema: Any, op: str = "register_tool") -> dict[str, Any]:
    """Refuse anything but a valid Draft 2020-12 object schema without remote references."""

    def bad(field: str, message: str) -> InvalidArgument:
        return InvalidArgument(_short(f"{op}: {message}"), op=op, field=field)

    if not isinstance(schema, dict):
        raise bad("input_schema", "input_schema must be a JSON Schema object")
    try:
        size = len(json.dumps(schema, allow_nan=False))
    except RecursionError:
        raise bad("input_schema", f"input_schema nests deeper than {MAX_SCHEMA_DEPTH} levels") from None
    except (TypeError, ValueError) as e:
        raise bad("input_schema", f"input_schema is not JSON: {e}") from None
    if size > MAX_SCHEMA_BYTES:
        raise bad("input_schema", f"input_schema is over {MAX_SCHEMA_BYTES} bytes")
    if schema.get("type") != "object":
        raise bad("input_schema", 'input_schema must describe an object ("type": "object")')
    scan_schema(schema, op)
    try:
        # Metered like a call's input: the 2020-12 meta-schema costs ~1 ms per subschema in jsonschema.
        # FORMATS: its "format": "regex" runs on RE2 too (Python's re would refuse \p{L}, which RE2 and
        # JSON Schema's ECMA-262 dialect accept).
        with metered({}, MAX_CHECK_STEPS):
            for error in _META.iter_errors(schema):
                raise SchemaError.create_from(error)
    except TooCostly:
        raise bad(
            "input_schema", f"input_schema takes more than {MAX_CHECK_STEPS} steps to check; make it smaller"
        ) from None
    except SchemaError as e:
        where = _field_path(e.absolute_path)
        field = f"input_schema.{where}" if where else "input_schema"
        raise bad(
            field, f"input_schema is not a valid JSON Schema{' at ' + where if where else ''}: {e.message}"
        ) from None
    remote = next(iter(_remote_refs(schema)), None)
    if remote is not None:
        raise bad("input_schema", f"input_schema may only use local references ('#/...'), not {remote!r}")
    return schema


def scan_schema(schema: dict[str, Any], op: str = "register_tool") -> dict[str, Pattern]:
    """Check what could make validating against ``schema`` costly and compile its patterns on RE2.

    Every ``"pattern": "<text>"`` and every ``patternProperties`` name anywhere in the document is compiled
    (a ``$ref`` may point anywhere); a pattern RE2 refuses (backreferences, lookaround) raises
    InvalidArgument whose ``field`` is the pattern's path (``input_schema.properties.code.pattern``)."""

    def bad(field: str, message: str) -> InvalidArgument:
        return InvalidArgument(_short(f"{op}: {message}"), op=op, field=field)

    patterns: dict[str, Pattern] = {}
    program = 0
    unevaluated = named = ""

    def add(pattern: str, field: str) -> None:
        nonlocal program
        if pattern in patterns:
            return
        if len(patterns) >= MAX_PATTERNS:
            raise bad(field, f"input_schema has more than {MAX_PATTERNS} patterns")
        try:
            compiled = compile_pattern(pattern)
        except Error as e:
            raise bad(
                field,
                f"{field} {pattern!r} is not a pattern this server runs: {reason(e)} (patterns run on RE2, "
                "in linear time: no backreferences, no lookahead or lookbehind)",
            ) from None
        program += compiled.weight
        if program > MAX_PATTERN_PROGRAM:
            raise bad(
                field,
                f"{field}: the patterns of input_schema compile to more than {MAX_PATTERN_PROGRAM} RE2 "
                "instructions (large counted repeats such as {500} multiply a pattern's size)",
            )
        patterns[pattern] = compiled

    stack: list[tuple[Any, str, int]] = [(schema, "input_schema", 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise bad(path, f"input_schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(node, list):
            stack.extend(
                (v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node) if isinstance(v, dict | list)
            )
            continue
        if not isinstance(node, dict):
            continue
        if "$schema" in node and node is not schema:
            raise bad(f"{path}.$schema", "$schema is only allowed at the top of input_schema")
        if isinstance(node.get("pattern"), str):
            add(node["pattern"], f"{path}.pattern")
        if isinstance(node.get("patternProperties"), dict):
            for name in node["patternProperties"]:
                add(name, f"{path}.patternProperties.{name}")
            named = named or f"{path}.patternProperties"
        if "unevaluatedProperties" in node:
            unevaluated = unevaluated or f"{path}.unevaluatedProperties"
        stack.extend((v, f"{path}.{k}", depth + 1) for k, v in node.items() if isinstance(v, dict | list))
    if unevaluated and named:
        # jsonschema matches patternProperties with Python's re (backtracking) when it works out which
        # properties were evaluated.
        raise bad(unevaluated, "unevaluatedProperties cannot be used together with patternProperties")
    return patterns


def _input_limits(args: Any) -> str | None:
    """Why ``args`` is too big or too deep to validate, or None. One level at a time (C-speed extends)."""
    level = [args]
    nodes = depth = 0
    while level:
        depth += 1
        nodes += len(level)
        if nodes > MAX_INPUT_NODES:
            return f"input: more than {MAX_INPUT_NODES} values"
        below: list[Any] = []
        for node in level:
            if isinstance(node, dict):
                below.extend(node.values())
            elif isinstance(node, list):
                below.extend(node)
        if below and depth >= MAX_INPUT_DEPTH:
            return f"input: nests deeper than {MAX_INPUT_DEPTH} levels"
        level = below
    return None


def _remote_refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("$ref", "$dynamicRef") and isinstance(v, str) and not v.startswith("#"):
                yield v
            else:
                yield from _remote_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _remote_refs(v)


# ------------------------------------------------------------------------------------------------ errors


def _field_path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[: _MAX_MESSAGE_CHARS - 1] + "…"


def _error_field(err: ValidationError) -> str:
    parts = list(err.absolute_path)
    inst = err.instance
    if err.validator == "required" and isinstance(inst, dict):
        missing = [p for p in err.validator_value if p not in inst]
        if missing:
            parts.append(missing[0])
    elif err.validator == "additionalProperties" and isinstance(inst, dict):
        extra = additional_names(inst, err.schema or {})
        if extra:
            parts.append(extra[0])
    return _field_path(parts)


def _message(err: ValidationError, where: str) -> str:
    if err.validator == "required":
        return f"input.{where}: required field is missing" if where else "input: a required field is missing"
    if err.validator == "additionalProperties" and where:
        return f"input.{where}: unknown field"
    return _short(f"input.{where}: {err.message}" if where else f"input: {err.message}")


# ---------------------------------------------------------------------------------------- the quick check

_ANNOTATIONS = frozenset(
    {"description", "title", "default", "examples", "deprecated", "readOnly", "writeOnly"}
)
_KEYWORDS = _ANNOTATIONS | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "items",
    "minItems",
    "maxItems",
}


def _is_number(v: Any) -> bool:
    return type(v) is int or type(v) is float


# Stricter than JSON Schema where it is cheap to be (1.0 is not an "integer" here): a "no" only sends the
# input on to jsonschema, a "yes" must be right.
_TYPES: dict[str, Check] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": _is_number,
    "boolean": lambda v: type(v) is bool,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "null": lambda v: v is None,
}


def _quick(schema: Any) -> Check | None:
    """A checker that only says True for valid input, or None when the schema uses other keywords."""
    if isinstance(schema, bool):
        return lambda v: schema
    if not isinstance(schema, dict) or not set(schema) <= _KEYWORDS:
        return None
    checks: list[Check] = []
    kind = schema.get("type")
    if kind is not None:
        names = [kind] if isinstance(kind, str) else list(kind)
        if not all(n in _TYPES for n in names):
            return None
        tests = [_TYPES[n] for n in names]
        checks.append(lambda v: any(t(v) for t in tests))
    if "enum" in schema:
        allowed = list(schema["enum"])
        checks.append(lambda v: any(type(v) is type(a) and v == a for a in allowed))
    for word, test in (
        ("minLength", lambda v, n: len(v) >= n),
        ("maxLength", lambda v, n: len(v) <= n),
    ):
        if word in schema:
            checks.append(_when(lambda v: type(v) is str, test, schema[word]))
    for word, test in (
        ("minimum", lambda v, n: v >= n),
        ("maximum", lambda v, n: v <= n),
        ("exclusiveMinimum", lambda v, n: v > n),
        ("exclusiveMaximum", lambda v, n: v < n),
    ):
        if word in schema:
            checks.append(_when(_is_number, test, schema[word]))
    for word, test in (("minItems", lambda v, n: len(v) >= n), ("maxItems", lambda v, n: len(v) <= n)):
        if word in schema:
            checks.append(_when(lambda v: type(v) is list, test, schema[word]))
    if "items" in schema:
        item = _quick(schema["items"])
        if item is None:
            return None
        checks.append(lambda v: type(v) is not list or all(item(x) for x in v))
    props: dict[str, Check] = {}
    for name, sub in schema.get("properties", {}).items():
        check = _quick(sub)
        if check is None:
            return None
        props[name] = check
    required = list(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    extra_check = _quick(extra)
    if extra_check is None:
        return None
    if props or required or extra is not True:

        def check_object(v: Any) -> bool:
            if type(v) is not dict:
                return True
            if any(r not in v for r in required):
                return False
            for k, x in v.items():
                c = props.get(k, extra_check)
                if not c(x):
                    return False
            return True

        checks.append(check_object)
    return lambda v: all(c(v) for c in checks)


def _when(applies: Check, test: Callable[[Any, Any], bool], bound: Any) -> Check:
    return lambda v: not applies(v) or test(v, bound)
