"""Backend-independent rules of the storage contract: argument validation, value encoding, tuple matching,
prefix ranges, reminder arithmetic, search-term extraction and retention-rule parsing.

Every backend calls these so that SQLite and PostgreSQL accept and refuse exactly the same inputs and agree
on what a stored value means.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from .base import JSON, ItemChange, Items, RetentionRule, Scalar, Scope

MAX_NAME_LENGTH = 4096
_SCALAR_TYPES = (str, int, float, bool, type(None))


# --------------------------------------------------------------------------------------------- validation


_valid_scopes: set[tuple[str, str]] = set()


def check_scope(scope: Scope) -> tuple[str, str]:
    """Return (tenant, namespace) or raise: both must be non-empty strings."""
    # A process sees few distinct scopes and a checked tuple of two str cannot change, so remember them.
    if type(scope) is tuple:
        try:
            if scope in _valid_scopes:
                return scope
        except TypeError:  # unhashable elements: let the checks below explain
            pass
    if not isinstance(scope, tuple) or len(scope) != 2:
        raise TypeError(f"scope must be a (tenant, namespace) tuple, got {scope!r}")
    tenant, namespace = scope
    check_name("tenant", tenant)
    check_name("namespace", namespace)
    if type(tenant) is str and type(namespace) is str:  # not subclasses, which could hash differently
        if len(_valid_scopes) >= 10_000:
            _valid_scopes.clear()
        _valid_scopes.add((tenant, namespace))
    return tenant, namespace


def check_name(what: str, value: object) -> str:
    """Keys and names: non-empty str, no NUL, valid Unicode (storable as UTF-8), bounded length."""
    # Fast path for the common case (it runs several times per call on every primitive): plain ASCII.
    if type(value) is str and value.isascii() and 0 < len(value) <= MAX_NAME_LENGTH and "\x00" not in value:
        return value
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} is longer than {MAX_NAME_LENGTH} characters")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    _check_utf8(what, value)
    return value


def check_prefix(value: object) -> str:
    """A list prefix: like a name but may be empty (meaning everything)."""
    if value == "":
        return ""
    return check_name("prefix", value)


def check_text(what: str, value: object) -> str:
    """Free text (content types, reasons, search queries): any valid str, possibly empty."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    _check_utf8(what, value)
    return value


def _check_utf8(what: str, value: str) -> None:
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} contains an unpaired surrogate and cannot be stored") from None


def check_number(what: str, value: object, *, positive: bool = True) -> float:
    """A finite real number, strictly positive unless positive=False (then >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ValueError(f"{what} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return number


def check_ttl(ttl: object) -> float | None:
    return None if ttl is None else check_number("ttl", ttl)


def check_count(what: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    return value


def check_limit(limit: object) -> int | None:
    return None if limit is None else check_count("limit", limit)


def check_bytes(what: str, value: object) -> bytes:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if not isinstance(value, bytes):
        raise TypeError(f"{what} must be bytes, got {type(value).__name__}")
    return value


def check_fence(fence: object, *, optional: bool = True) -> None:
    """A checkpoint fence: an int (or None where ``optional``)."""
    if fence is None and optional:
        return
    if isinstance(fence, bool) or not isinstance(fence, int):
        raise TypeError(f"fence must be an int{' or None' if optional else ''}, got {type(fence).__name__}")


def check_checkpoint(
    scope: Scope, actor_id: str, state_version: object, data: object, fence: object
) -> tuple[str, str, bytes]:
    """The arguments of a checkpoint save, checked: ``(tenant, ns, data as bytes)``."""
    tenant, ns = check_scope(scope)
    check_name("actor_id", actor_id)
    if isinstance(state_version, bool) or not isinstance(state_version, int):
        raise TypeError(f"state_version must be an int, got {type(state_version).__name__}")
    check_fence(fence)
    return tenant, ns, check_bytes("checkpoint data", data)


def check_items(items: object) -> Items | None:
    """A checkpoint's append-only field changes (``CheckpointStore.save``), checked: None or a tuple of
    ``(field, start, items)`` with a field name (an identifier), a start >= 0 and the items as bytes."""
    if items is None:
        return None
    if type(items) is tuple and all(map(_well_formed, items)):
        return items  # what the runtime hands over (the usual case): checked without copying
    if not isinstance(items, tuple | list):
        raise TypeError(f"checkpoint items must be a tuple, got {type(items).__name__}")
    out: list[ItemChange] = []
    for change in items:
        if not isinstance(change, tuple | list) or len(change) != 3:
            raise TypeError("each checkpoint item change is (field, start, items)")
        name, start, values = change
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"checkpoint item field must be an identifier, got {name!r}")
        check_count("checkpoint item start", start)
        if not isinstance(values, tuple | list):
            raise TypeError(f"checkpoint items of {name!r} must be a tuple, got {type(values).__name__}")
        out.append((name, start, tuple(check_bytes(f"checkpoint item of {name!r}", v) for v in values)))
    return tuple(out)


def _well_formed(change: object) -> bool:
    return (
        type(change) is tuple
        and len(change) == 3
        and type(change[0]) is str
        and change[0].isidentifier()
        and type(change[1]) is int
        and change[1] >= 0
        and type(change[2]) is tuple
        and all(type(v) is bytes for v in change[2])
    )


def item_arrays(rows: Iterable[tuple[str, bytes]]) -> dict[str, bytes]:
    """(field, item) rows in (field, position) order as one JSON array per field (``Checkpoint.items``)."""
    grouped: dict[str, list[bytes]] = {}
    for name, item in rows:
        grouped.setdefault(name, []).append(bytes(item))
    return {name: b"[" + b",".join(values) + b"]" for name, values in grouped.items()}


def merge_items(first: Items | None, then: Items | None) -> Items | None:
    """Two saves' item changes as one (a store collapsing one actor's saves made in the same pass)."""
    if first is None or then is None:
        return then if first is None else first
    out = {name: (start, values) for name, start, values in first}
    for name, start, values in then:
        prev = out.get(name)
        if prev is None or start <= prev[0]:
            out[name] = (start, values)
        else:  # ``then`` was made on top of ``first``: it starts within first's items or right after them
            out[name] = (prev[0], prev[1][: start - prev[0]] + values)
    return tuple((name, start, values) for name, (start, values) in out.items())


class _IdSource:
    """Ids that are unique across processes (a random 64-bit prefix per process) and increasing within a
    process (a counter), so they land next to each other in a B-tree index instead of on random pages.

    Not uuid4: random keys dirty one index page per insert, and uuid4 reads os.urandom on every call; the two
    together were the largest cost of a channel send. Ids need to be unique, not unguessable: every call that
    takes one is also filtered by scope."""

    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)  # a forked child must not repeat its parent's ids

    def reset(self) -> None:
        self.prefix = f"{random.SystemRandom().getrandbits(64):016x}"
        self.counter = itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter):016x}"


_ids = _IdSource()


def new_id() -> str:
    """A 32-hex-digit id for messages and receipts, unique across processes and scopes."""
    return _ids.next()


# ------------------------------------------------------------------------------------------------ JSON


def dumps_json(what: str, value: JSON) -> str:
    """Storage encoding of a JSON value; a clear TypeError/ValueError names what could not be stored."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except TypeError as exc:
        raise TypeError(f"{what} is not JSON-serializable: {exc}") from None
    except ValueError as exc:  # NaN/inf, circular references
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    _check_utf8(what, text)
    return text


def loads_json(raw: object) -> JSON:
    """Decode a stored JSON value. Raises ValueError for anything that is not JSON text (corruption)."""
    if not isinstance(raw, str):
        raise ValueError(f"stored value is {type(raw).__name__}, not JSON text")
    return json.loads(raw)


def canonical_json(value: JSON) -> str:
    """The hashing form: sorted keys, no whitespace, ASCII only. Must never change (it is in every hash)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def raw_bytes(raw: object) -> bytes:
    """Best-effort bytes of a stored column value, for quarantine records."""
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        return raw.encode("utf-8", "backslashreplace")
    return repr(raw).encode("utf-8")


# ---------------------------------------------------------------------------------------------- tuples


def check_tuple(tup: object, *, pattern: bool = False) -> tuple[Scalar, ...]:
    """Validate a tuple (or pattern): a non-empty sequence of str/int/float/bool/None, finite floats."""
    what = "pattern" if pattern else "tuple"
    if isinstance(tup, str | bytes) or not isinstance(tup, Sequence):
        raise TypeError(f"{what} must be a sequence of scalars, got {type(tup).__name__}")
    if not tup:
        raise ValueError(f"{what} must have at least one element")
    for i, element in enumerate(tup):
        # Exact types: a subclass (IntEnum, a str subclass) would not survive the round trip as itself.
        if type(element) not in _SCALAR_TYPES:
            raise TypeError(
                f"{what} element {i} must be str, int, float, bool or None, got {type(element).__name__}"
            )
        if isinstance(element, float) and not math.isfinite(element):
            raise ValueError(f"{what} element {i} must be a finite float, got {element!r}")
        if isinstance(element, str):
            _check_utf8(f"{what} element {i}", element)
    return tuple(tup)


class AppendMarks:
    """Mixin of the event logs: the newest append asked for per stream, until it is committed, so that a
    read can wait for it. A read (``read``, ``last_seq``, ``verify``) sees every append the same store object
    was asked for before it, whoever asked (one actor appends, another reads). Appends chain and commit in
    call order, so once the newest is settled so is every one before it. Appends by other processes are
    seen once they commit."""

    _newest: dict[tuple[str, str, str], asyncio.Future[Any]] | None = None

    def _mark(self, key: tuple[str, str, str], future: asyncio.Future[Any]) -> None:
        """``future`` is the newest append of stream ``key`` (tenant, ns, stream)."""
        if self._newest is None:
            self._newest = {}
        self._newest[key] = future
        future.add_done_callback(partial(self._settled, key))

    def _settled(self, key: tuple[str, str, str], future: asyncio.Future[Any]) -> None:
        if self._newest is not None and self._newest.get(key) is future:
            del self._newest[key]

    async def _caught_up(self, tenant: str, ns: str, stream: str) -> None:
        """Until the newest append of the stream asked for so far is committed (or failed)."""
        future = None if self._newest is None else self._newest.get((tenant, ns, stream))
        if future is not None and not future.done():
            await asyncio.wait({future})


def check_tuples(tuples: object) -> list[tuple[Scalar, ...]]:
    """Validate the argument of ``write_many``: a sequence (not a str) of tuples, each as ``check_tuple``."""
    if isinstance(tuples, str | bytes) or not isinstance(tuples, Sequence):
        raise TypeError(f"tuples must be a sequence of tuples, got {type(tuples).__name__}")
    return [check_tuple(tup) for tup in tuples]


def check_documents(docs: object) -> list[tuple[str, str, str]]:
    """Validate the argument of ``TextIndex.upsert_many``: a sequence of ``(doc_id, fields, meta)``, each
    doc id a name, ``fields`` a dict of field name to text, ``meta`` storable JSON. A doc id given twice is
    refused (which of the two would be kept is not obvious). Returns each as ``(doc_id, body, meta text)``,
    the body being the fields' texts in field-name order, one per line."""
    if isinstance(docs, str | bytes) or not isinstance(docs, Sequence):
        raise TypeError(f"docs must be a sequence of (doc_id, fields, meta), got {type(docs).__name__}")
    checked: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for i, doc in enumerate(docs):
        if not isinstance(doc, tuple | list) or len(doc) != 3:
            raise TypeError(f"docs[{i}] must be a (doc_id, fields, meta) tuple")
        doc_id, fields, meta = doc
        check_name("doc_id", doc_id)
        if doc_id in seen:
            raise ValueError(f"doc_id {doc_id!r} is given twice")
        seen.add(doc_id)
        if not isinstance(fields, dict):
            raise TypeError(f"fields must be a dict of str to str, got {type(fields).__name__}")
        for field_name, value in fields.items():
            check_name("field name", field_name)
            check_text(f"field {field_name!r}", value)
        body = "\n".join(fields[name] for name in sorted(fields))
        checked.append((doc_id, body, dumps_json("document meta", meta)))
    return checked


def encode_element(element: Scalar) -> str:
    """Typed text form of one element, used for the indexed first column: 1 -> '1', 1.0 -> '1.0',
    True -> 'true', "1" -> '"1"', None -> 'null'. Distinct types never share an encoding."""
    if isinstance(element, float) and element == 0.0:
        element = 0.0  # -0.0 == 0.0 in Python, so they must index the same
    return json.dumps(element)


def encode_tuple(tup: tuple[Scalar, ...]) -> str:
    return json.dumps(list(tup), allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def decode_tuple(raw: object, arity: object) -> tuple[Scalar, ...]:
    """Decode a stored tuple body; ValueError if it is not a well-formed tuple of the stored arity."""
    value = loads_json(raw)
    if not isinstance(value, list) or len(value) != arity:
        raise ValueError(f"stored tuple is not a list of {arity} elements")
    if any(type(element) not in _SCALAR_TYPES for element in value):
        raise ValueError("stored tuple has a non-scalar element")
    return tuple(value)


def tuple_matches(pattern: tuple[Scalar, ...], tup: tuple[Scalar, ...]) -> bool:
    """Same arity; None in the pattern is a wildcard; other elements must be equal with the same type."""
    if len(pattern) != len(tup):
        return False
    for want, have in zip(pattern, tup, strict=True):
        if want is None:
            continue
        if type(want) is not type(have) or want != have:
            return False
    return True


# ---------------------------------------------------------------------------------------------- ranges


def prefix_upper_bound(prefix: str) -> str | None:
    """Smallest string greater than every string starting with prefix (code point order, which is also
    UTF-8 byte order), or None if there is none. ``key >= prefix AND key < bound`` is then an exact,
    index-friendly prefix match (LIKE would treat ``_``/``%`` as wildcards and fold ASCII case)."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1])
        if code < 0x10FFFF:
            code += 1
            if 0xD800 <= code <= 0xDFFF:  # surrogates are not storable; skip over them
                code = 0xE000
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


# ------------------------------------------------------------------------------------------- reminders


def next_periodic_fire(scheduled: float, period: float, fired_at: float) -> float:
    """First ``scheduled + k * period`` (k >= 1) strictly after fired_at: missed fires collapse into one."""
    steps = max(1, math.floor((fired_at - scheduled) / period) + 1)
    nxt = scheduled + steps * period
    while nxt <= fired_at:  # guard against float rounding in the division
        nxt += period
    return nxt


# ---------------------------------------------------------------------------------------------- search

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_SEARCH_TERMS = 32


def search_terms(query: str) -> list[str]:
    """Words of an untrusted query, lower-cased, de-duplicated, bounded. Operators and punctuation are
    dropped so that no user text can form query syntax in any backend."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query):
        seen.setdefault(word.lower()[:128], None)
        if len(seen) >= MAX_SEARCH_TERMS:
            break
    return list(seen)


# ------------------------------------------------------------------------------------------- retention

RETENTION_KINDS = ("events", "dead_letters", "dedup", "kv", "blobs", "tuples", "quarantine", "checkpoints")
"""Rule kinds. ``max_count`` keeps the newest N per scope and, for events / dead_letters / dedup, per stream
or channel; quarantine has no scope and counts globally."""


@dataclass(frozen=True, slots=True)
class ParsedRule:
    """A validated RetentionRule, as backends apply it."""

    kind: str
    selector: str | None
    """None means "everything" (selector "*" or ""); otherwise a name, prefix or first tuple element."""
    max_age: float | None
    max_count: int | None
    event_types: tuple[str, ...] = ()
    """kind "events": the format-2 kinds whose content the rule removes (empty: trim the stream's prefix)."""

    def cutoff(self, now: float) -> float | None:
        """Entries with a timestamp strictly before this are too old."""
        return None if self.max_age is None else now - self.max_age


def parse_rules(rules: Sequence[RetentionRule]) -> list[ParsedRule]:
    """Validate every rule before any is applied, so a typo cannot half-apply a retention run."""
    parsed = []
    for rule in rules:
        if not isinstance(rule, RetentionRule):
            raise TypeError(f"expected RetentionRule, got {type(rule).__name__}")
        if rule.kind not in RETENTION_KINDS:
            raise ValueError(
                f"unknown retention kind {rule.kind!r}; known kinds: {', '.join(RETENTION_KINDS)}"
            )
        selector = check_text("retention selector", rule.selector)
        max_age = None if rule.max_age is None else check_number("max_age", rule.max_age, positive=False)
        max_count = None if rule.max_count is None else check_count("max_count", rule.max_count)
        if max_age is None and max_count is None:
            raise ValueError(f"retention rule for {rule.kind!r} needs max_age and/or max_count")
        event_types = _event_types(rule)
        scope = None if selector in ("*", "") else selector
        parsed.append(ParsedRule(rule.kind, scope, max_age, max_count, event_types))
    return parsed


def _event_types(rule: RetentionRule) -> tuple[str, ...]:
    types = rule.event_types
    if isinstance(types, str) or not isinstance(types, Sequence):
        raise TypeError("retention event_types must be a sequence of str")
    if types and rule.kind != "events":
        raise ValueError(f"retention event_types apply to kind 'events' only, not {rule.kind!r}")
    for name in types:
        if not isinstance(name, str) or not name or name.startswith("~"):
            raise ValueError(f"retention event_types: {name!r} is not an event kind")
    return tuple(dict.fromkeys(types))


def merge_counts(into: dict[str, int], kind: str, count: int) -> None:
    into[kind] = into.get(kind, 0) + count
