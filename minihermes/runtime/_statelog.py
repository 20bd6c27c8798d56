"""Append-only state fields (``state(default_factory=list, append_only=True)``): saved by what changed.

A list that only grows (a session's history) costs O(its length) to serialize and write at every checkpoint
when it is part of the state's one JSON document, so a long session's every step slows down with it. An
append-only field longer than ``INLINE_MAX`` is kept out of that document: the store keeps its items as
rows of their own, and a checkpoint carries, beside the rest of the state, the items appended since the
previous one, in the same transaction. Replacing the list (``self.history = [...]``) rewrites its rows (or
puts it back in the document if it is short).

What the runtime relies on: items are appended, or the whole list is replaced; an item is not changed once a
later checkpoint has saved items after it. The newest saved item is serialized again at every checkpoint and
rewritten if it changed (a step that fills in its newest message after saving it); older ones are not looked
at again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import orjson

from ._actor import _ENCODER, _json_default
from .store.base import ItemChange, Items


def dump_item(item: Any) -> bytes:
    try:
        return orjson.dumps(item, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:  # integers beyond 64 bits: the stdlib encoder
        return _ENCODER.encode(item).encode()


_Saved = tuple[list[Any] | None, int, Any, bytes | None]
"""What the store holds of one field kept in rows: the list as of the last checkpoint (None: its rows are not
known to match, rewrite them all), its length then, and its last item (the object, and as saved)."""

_NOTHING: _Saved = (None, 0, None, None)

CHECK = os.environ.get("MINIHERMES_CHECK_APPEND_ONLY", "") == "1"
"""Check the contract at every checkpoint: every item saved before must serialize as it was saved (O(list) per
checkpoint: for tests and debugging; the test suite turns it on). A broken contract crashes the actor."""

INLINE_MAX = 32
"""A list this short stays in the state document: one document write is cheaper than a document and a row
(a fresh session's history). It moves to rows when it grows past this, and back when replaced by a short one."""


class LogFields:
    """A cell's bookkeeping of its actor's append-only fields: whether each is kept in rows or (short) in
    the document, what the store holds of it (``saved``), and what the last message left (``seen``, to
    roll back a failed message)."""

    __slots__ = ("_as_saved", "_rows", "_saved", "_seen", "fields")

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = tuple(fields)
        self._rows = dict.fromkeys(self.fields, False)
        self._saved: dict[str, _Saved] = dict.fromkeys(self.fields, _NOTHING)
        self._seen: dict[str, tuple[list[Any] | None, int]] = {f: (None, 0) for f in self.fields}
        self._as_saved: dict[str, list[bytes]] = {f: [] for f in self.fields}
        """With ``CHECK``: every item of each field in rows, as saved."""

    def reset(self, inst: Any, stored: Sequence[str], migrated: bool = False) -> None:
        """After a restore: the fields named in ``stored`` had rows, which hold what the field was loaded with
        (unless the state was ``migrated``: then the rows are rewritten, or deleted if the list now goes in
        the document); the others came from the document (or are new): a short one stays there, a long one
        (saved before the field was append-only) is written to rows at the next checkpoint."""
        for f in self.fields:
            lst = getattr(inst, f)
            self._rows[f] = f in stored
            if f in stored and not migrated:
                self._saved[f] = (lst, len(lst), lst[-1], dump_item(lst[-1])) if lst else (lst, 0, None, None)
            else:
                self._saved[f] = _NOTHING
            self._seen[f] = (lst, len(lst))
            if CHECK:
                self._as_saved[f] = [dump_item(x) for x in lst] if f in stored and not migrated else []

    def document(self, inst: Any) -> tuple[str, ...]:
        """The fields that go in the state document this time: the short ones (once in rows, a list stays
        there until it is replaced by a short one)."""
        out: list[str] = []
        for f in self.fields:
            lst = getattr(inst, f)
            if type(lst) is not list:
                raise TypeError(f"append-only state field {f!r} must be a list, got {type(lst).__name__}")
            if len(lst) <= INLINE_MAX and (not self._rows[f] or lst is not self._saved[f][0]):
                out.append(f)
        return tuple(out)

    def changes(self, inst: Any, document: tuple[str, ...]) -> tuple[Items, list[tuple[str, bool, _Saved]]]:
        """What changed in rows since the last checkpoint (``document``: the fields in the document this
        time), and the bookkeeping to ``commit`` once it is saved."""
        changes: list[ItemChange] = []
        pending: list[tuple[str, bool, _Saved]] = []
        for f in self.fields:
            if f in document:
                if self._rows[f]:  # back to the document: its rows go
                    changes.append((f, 0, ()))
                    pending.append((f, False, _NOTHING))
                continue
            lst: list[Any] = getattr(inst, f)
            obj, n, last, last_saved = self._saved[f]
            size = len(lst)
            if not self._rows[f] or lst is not obj or size < n or (n and lst[n - 1] is not last):
                start = 0  # new in rows, replaced, shortened or refilled: rewrite it all
            elif n and dump_item(last) != last_saved:
                start = n - 1  # the newest saved item changed since
            elif size == n:
                continue
            else:
                start = n
            new = tuple(map(dump_item, lst[start:]))
            if CHECK and start:
                self._check(f, lst, start)
            changes.append((f, start, new))
            pending.append((f, True, (lst, size, lst[-1], new[-1]) if new else (lst, 0, None, None)))
        return tuple(changes), pending

    def commit(self, pending: list[tuple[str, bool, _Saved]]) -> None:
        for f, rows, saved in pending:
            self._rows[f] = rows
            self._saved[f] = saved
            if CHECK:
                lst = saved[0]
                self._as_saved[f] = [dump_item(x) for x in lst] if rows and lst is not None else []

    def _check(self, f: str, lst: list[Any], start: int) -> None:
        """``CHECK``: the items before ``start`` are kept as stored; they must not have changed."""
        saved = self._as_saved[f]
        for i in range(min(start, len(saved))):
            if dump_item(lst[i]) != saved[i]:
                raise RuntimeError(
                    f"append-only state field {f!r}: item {i} changed after a later item was saved "
                    "(append to the list or replace it; see runtime._statelog)"
                )

    def see(self, inst: Any) -> None:
        for f in self.fields:
            lst = getattr(inst, f)
            self._seen[f] = (lst, len(lst))

    def rollback(self, inst: Any) -> None:
        """Back to what the last message left: items appended since are dropped, a replaced list is put
        back (changes made in place to older items are not undone)."""
        for f in self.fields:
            lst, n = self._seen[f]
            if lst is None:
                continue
            del lst[n:]
            setattr(inst, f, lst)
