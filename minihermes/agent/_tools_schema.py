"""JSON Schema for tool inputs: checked at registration, compiled once, validated before every call.

``jsonschema`` (Draft 2020-12) is the authority. Validation runs on every tool call, so a compiled schema
also carries a quick checker for the subset of keywords tool schemas mostly use (types, properties,
required, additionalProperties, enum, lengths, bounds, items): when it says "valid" the input is valid; when
it says anything else, or the schema uses other keywords, jsonschema decides and explains.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError, ValidationError, best_match  # type: ignore[import-untyped]

from minihermes.runtime import InvalidArgument

MAX_SCHEMA_BYTES = 64 * 1024
_MAX_MESSAGE_CHARS = 300
_MAX_REPORTED_ERRORS = 5

Check = Callable[[Any], bool]


class CompiledSchema:
    """A checked schema, ready to validate inputs."""

    __slots__ = ("_quick", "_validator", "schema")

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        self._quick = _quick(schema)

    def input_error(self, args: Any) -> dict[str, Any] | None:
        """None when ``args`` fits, else ``{code: "invalid_input", message, field, errors}``; ``field`` is the
        path of the most relevant failure (``stops[1].name``)."""
        if self._quick is not None and self._quick(args):
            return None
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
    except (TypeError, ValueError) as e:
        raise bad("input_schema", f"input_schema is not JSON: {e}") from None
    if size > MAX_SCHEMA_BYTES:
        raise bad("input_schema", f"input_schema is over {MAX_SCHEMA_BYTES} bytes")
    if schema.get("type") != "object":
        raise bad("input_schema", 'input_schema must describe an object ("type": "object")')
    try:
        Draft202012Validator.check_schema(schema)
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
        known = set((err.schema or {}).get("properties", {}))
        patterns = [re.compile(p) for p in (err.schema or {}).get("patternProperties", {})]
        extra = [k for k in inst if k not in known and not any(p.search(k) for p in patterns)]
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
