"""Reading request bodies and writing replies: bounded, strict JSON in, safe JSON out.

Bad input is always a 4xx: a body over the limit is 413 (refused from ``Content-Length`` before reading,
or as soon as a chunked body passes the limit), a content type that cannot hold JSON is 415, and bytes that
are not a JSON object (invalid UTF-8, invalid JSON, NaN, too deep, lone surrogates, a list) are 422.

``curl -d '{...}'`` sends ``application/x-www-form-urlencoded``; the curl examples in the docs are written that way, so
that type (and ``text/plain``) is read as JSON too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from ._errors import ApiError, invalid

MAX_DEPTH = 64
_JSON_TYPES = frozenset(
    {"", "application/json", "text/json", "text/plain", "application/x-www-form-urlencoded"}
)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "payload_too_large", f"request body is larger than {limit} bytes", limit=limit)


def check_content_type(content_type: str) -> None:
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _JSON_TYPES or media.endswith("+json"):
        return
    raise ApiError(
        415,
        "unsupported_media_type",
        f"send a JSON object as application/json (got {media!r})",
        media_type=media,
    )


async def read_limited(stream: AsyncIterator[bytes], content_length: str | None, limit: int) -> bytes:
    """The whole body, refusing anything over ``limit`` bytes without reading it all."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise ApiError(400, "bad_request", "invalid Content-Length header") from None
        if declared > limit:
            raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


_INT_LIMIT = 2**63 - 1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {_short(text)} is out of range")
    return value


def _bounded_int(text: str) -> int:
    value = int(text)  # over 4300 digits: ValueError from Python itself
    if abs(value) > _INT_LIMIT:
        raise ValueError("integer is out of the 64-bit range")
    return value


def parse_object(raw: bytes) -> dict[str, Any]:
    """A JSON object from raw bytes (empty body: ``{}``)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise invalid(f"body is not UTF-8 (byte {e.start})", code="invalid_json") from None
    if not text.strip():
        return {}
    try:
        value = json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int
        )
    except RecursionError:
        raise invalid(f"JSON nested deeper than {MAX_DEPTH} levels", code="invalid_json") from None
    except ValueError as e:  # JSONDecodeError, NaN/Infinity, numbers out of range
        raise invalid(f"body is not valid JSON: {_short(str(e))}", code="invalid_json") from None
    if not isinstance(value, dict):
        raise invalid(f"body must be a JSON object of arguments, not {_json_type(value)}")
    _check_tree(value)
    return value


def _check_tree(root: dict[str, Any]) -> None:
    """No deeper than MAX_DEPTH; every string (keys too) encodable as UTF-8 (no lone surrogates)."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise invalid(f"JSON nested deeper than {MAX_DEPTH} levels", code="invalid_json")
        if isinstance(value, dict):
            for k, v in value.items():
                _check_str(k)
                stack.append((v, depth + 1))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str):
            _check_str(value)


def _check_str(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(
            "strings must not contain unpaired surrogates (\\ud800-\\udfff)", code="invalid_json"
        ) from None


def dump(value: Any) -> bytes:
    """JSON bytes for a reply; raises TypeError/ValueError for what JSON cannot hold (bytes, NaN, objects)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_default)
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate made it into a reply: escape rather than fail
        return json.dumps(
            value, ensure_ascii=True, allow_nan=False, separators=(",", ":"), default=_default
        ).encode()


def _default(o: Any) -> Any:
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "..."
