"""The event-log hash chain, shared by every backend.

Format 1 (appends that name no kind and no subjects, and every entry written before format 2 existed):
``hash_n = sha256(hash_{n-1} + canonical_json([seq, ts, data]))``. Format 2: ``hash_n = sha256(hash_{n-1} +
canonical_json([2, seq, ts, kind, key_id, digest]))`` where ``digest`` is the sha256 hex of the stored content
(the sealed bytes of an entry sealed under a subject key, or the canonical JSON text of a plain one). The
chain covers the content only through its digest, so content can be made unreadable (its key deleted) or
removed (retention by kind) without rewriting anything the chain covers; a removal is legitimate only when a
chained erasure entry (kind ``~erasure``) lists it, and a format-1 entry blanked by ``forget`` is listed there
with its (seq, ts, hash), which its own hash can no longer be recomputed to prove. The first entry of a
stream chains from 64 zeros. Retention deletes a prefix of a stream and records its last (seq, hash) as the
anchor, so verification restarts from the anchor and sequence numbers never restart.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._common import canonical_json, loads_json
from .base import JSON, ChainCheck, EventRecord

ZERO_HASH = "0" * 64
ERASURE = "~erasure"
"""The kind of the entries the store itself appends to record removed content. Kinds starting with ``~`` are
the store's: appenders cannot use them."""


def chain_hash(prev_hash: str, seq: int, ts: float, data: JSON) -> str:
    """Format 1."""
    payload = prev_hash + canonical_json([seq, ts, data])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def chain_hash_v2(prev_hash: str, seq: int, ts: float, kind: str, key_id: int | None, digest: str) -> str:
    """Format 2: the content enters through ``digest`` only."""
    payload = prev_hash + canonical_json([2, seq, ts, kind, key_id, digest])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def content_digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def check_kind(kind: object) -> str:
    """A format-2 kind: a short label, not one of the store's own (``~...``)."""
    if not isinstance(kind, str):
        raise TypeError(f"event kind must be a str, got {type(kind).__name__}")
    if len(kind) > 200 or "\x00" in kind:
        raise ValueError("event kind must be at most 200 characters, without NUL")
    if kind.startswith("~"):
        raise ValueError("event kinds starting with '~' are reserved for the store")
    return kind


def check_subjects(subjects: object) -> str:
    """Canonical text of a subject set (sorted, deduplicated JSON list): one key per distinct set."""
    if isinstance(subjects, str | bytes) or not isinstance(subjects, Sequence):
        raise TypeError("subjects must be a sequence of str")
    for subject in subjects:
        if not isinstance(subject, str) or not subject or len(subject) > 512 or "\x00" in subject:
            raise ValueError("each subject must be a non-empty str of at most 512 characters, without NUL")
    return _subjects_text(tuple(subjects))


@functools.lru_cache(maxsize=4096)
def _subjects_text(subjects: tuple[str, ...]) -> str:
    """Every event of a session names the same few subjects: their canonical text is made once."""
    return canonical_json(sorted(set(subjects)))


def seq_ranges(seqs: Iterable[int]) -> list[list[int]]:
    """[[first, last], ...] of runs of consecutive numbers (what an erasure entry records)."""
    out: list[list[int]] = []
    for seq in sorted(set(seqs)):
        if out and out[-1][1] == seq - 1:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


Legacy = tuple[int, float, str, str]
"""A blanked format-1 entry as its erasure entry records it: (seq, ts, hash, kind)."""


def erasure_record(reason: str, seqs: Iterable[int], legacy: Sequence[Legacy]) -> JSON:
    """The data of an erasure entry: why, which format-2 entries lost their content, and for each blanked
    format-1 entry its (seq, ts, hash) and the kind it keeps (what the caller said it was)."""
    record: dict[str, Any] = {"reason": reason, "seqs": seq_ranges(seqs)}
    if legacy:
        record["legacy"] = [list(entry) for entry in legacy]
    return record


@dataclass(frozen=True, slots=True)
class StreamHead:
    """Per-stream bookkeeping row: the newest entry and the retention anchor."""

    last_seq: int
    last_hash: str
    anchor_seq: int
    anchor_hash: str


@dataclass(frozen=True, slots=True)
class Row:
    """One stored entry as verification reads it: ``data`` is the text column ("" when blanked), ``body``
    the sealed bytes (None for plain or blanked entries)."""

    seq: int
    ts: float
    data: object
    prev_hash: str
    hash: str
    v: int = 1
    kind: str = ""
    key_id: int | None = None
    body: bytes | None = None
    digest: str | None = None

    def content(self) -> bytes | None:
        if self.key_id is not None:
            return self.body
        if isinstance(self.data, str) and self.data:
            return self.data.encode("utf-8")
        return None

    def hash_ok(self, prev: str) -> bool:
        """The entry's own hash, recomputed from ``prev`` (format-1 content must be present)."""
        if self.v == 2:
            return (
                self.digest is not None
                and chain_hash_v2(prev, self.seq, self.ts, self.kind, self.key_id, self.digest) == self.hash
            )
        try:
            data = loads_json(self.data)
        except ValueError:
            return False
        return chain_hash(prev, self.seq, self.ts, data) == self.hash


@dataclass(slots=True)
class Erasures:
    """What the stream's erasure entries allow to be missing: format-2 seqs, format-1 (seq -> (ts, hash))."""

    seqs: set[int] = field(default_factory=set)
    legacy: dict[int, tuple[float, str, str]] = field(default_factory=dict)

    def add(self, row: Row) -> None:
        """Take an erasure entry's list, if the entry is intact in itself (its digest and hash hold for its
        own prev_hash; its place in the chain is checked by the walk)."""
        content = row.content()
        if row.v != 2 or row.kind != ERASURE or content is None or content_digest(content) != row.digest:
            return
        if not row.hash_ok(row.prev_hash):
            return
        try:
            record = loads_json(row.data)
            for first, last in record.get("seqs", []):
                self.seqs.update(range(int(first), int(last) + 1))
            for seq, ts, digest, kind in record.get("legacy", []):
                self.legacy[int(seq)] = (float(ts), str(digest), str(kind))
        except (ValueError, TypeError, AttributeError):
            return


def check_row(row: Row, prev: str, erasures: Erasures) -> str:
    """Why ``row`` (which follows an entry hashed ``prev``) breaks the chain, or "" when it does not."""
    if row.prev_hash != prev:
        return "prev_hash does not match the previous entry"
    if row.v == 1:
        if row.data == "":
            if erasures.legacy.get(row.seq) != (row.ts, row.hash, row.kind):
                return "content removed without an erasure entry recording it"
            return ""
        try:
            loads_json(row.data)
        except ValueError:
            return "stored data is not valid JSON"
        return "" if row.hash_ok(prev) else "hash does not match the entry's content"
    if row.v != 2 or row.digest is None:
        return "unknown chain format"
    if (row.key_id is not None and row.data != "") or (row.key_id is None and row.body is not None):
        return "stored data beside the entry's content"  # nothing else is ever stored there
    content = row.content()
    if content is None:
        if row.seq not in erasures.seqs:
            return "content removed without an erasure entry recording it"
    elif content_digest(content) != row.digest:
        return "content does not match its digest"
    return "" if row.hash_ok(prev) else "hash does not match the entry's content"


def verify_rows(
    head: StreamHead | None,
    rows: Iterable[Row],
    erasures: Erasures | None = None,
    pins: dict[int, str] | None = None,
) -> ChainCheck:
    """Check a stream's stored entries against the chain rules and its head row.

    Detects modified data/timestamps/hashes (hash or digest mismatch), removed content no erasure entry
    records, deleted middle entries (sequence gap), reordering (prev_hash mismatch), and a truncated tail (the
    last entry is not the recorded head). ``pins`` (seq -> hash, from a signed anchor) must be passed through.
    """
    erasures = erasures or Erasures()
    pins = pins or {}
    seq, prev = (0, ZERO_HASH) if head is None else (head.anchor_seq, head.anchor_hash)
    checked = 0
    for row in rows:
        expected = seq + 1
        if row.seq != expected:
            return ChainCheck(False, checked, expected, f"expected seq {expected}, found {row.seq}")
        reason = check_row(row, prev, erasures)
        if reason:
            return ChainCheck(False, checked, row.seq, reason)
        pinned = pins.get(row.seq)
        if pinned is not None and pinned != row.hash:
            return ChainCheck(
                False,
                checked,
                row.seq,
                "the chain was rewritten at or before this entry (anchor pin differs)",
            )
        seq, prev = row.seq, row.hash
        checked += 1
    if head is None:
        if checked:
            return ChainCheck(False, checked, 1, "entries exist but the stream head is missing")
        return ChainCheck(True, 0)
    if (seq, prev) != (head.last_seq, head.last_hash):
        return ChainCheck(
            False, checked, seq + 1, f"stream ends at seq {seq} but its head is at {head.last_seq}"
        )
    return ChainCheck(True, checked)


def rows_of(raw: Iterable[Sequence[Any]]) -> Iterator[Row]:
    """Rows from ``SELECT seq, ts, data, prev_hash, hash, v, kind, key_id, body, digest`` (either backend)."""
    for seq, ts, data, prev, digest_, v, kind, key_id, body, digest in raw:
        yield Row(
            int(seq),
            float(ts),
            data,
            prev,
            digest_,
            int(v),
            kind,
            None if key_id is None else int(key_id),
            None if body is None else bytes(body),
            digest,
        )


ROW_COLUMNS = "seq, ts, data, prev_hash, hash, v, kind, key_id, body, digest"
"""The columns ``rows_of`` reads, in order."""


@dataclass(slots=True)
class Entry:
    """One append waiting for its batch. ``kind`` None and ``subjects`` None: chain format 1."""

    ts: float
    text: str
    """The canonical JSON text (what format 1 stores and format 2 seals or stores)."""
    stored: JSON
    kind: str | None = None
    subjects: str | None = None
    """Canonical JSON list (``check_subjects``): seal under that set's key."""
    future: asyncio.Future[EventRecord] | None = field(default=None, repr=False)


def erasable(rows: Iterable[Row], kinds: dict[int, str] | None = None) -> tuple[list[int], list[Legacy], int]:
    """Which of ``rows`` may have their content removed: the intact ones (format 1: the hash holds; format 2:
    the digest), as (format-2 seqs, format-1 (seq, ts, hash, kind from ``kinds``)); and how many are not
    (left as evidence)."""
    seqs: list[int] = []
    legacy: list[Legacy] = []
    kept = 0
    for row in rows:
        content = row.content()
        if row.v == 1 and row.hash_ok(row.prev_hash):
            legacy.append((row.seq, row.ts, row.hash, (kinds or {}).get(row.seq, "")))
        elif row.v == 2 and content is not None and content_digest(content) == row.digest:
            seqs.append(row.seq)
        else:
            kept += 1
    return seqs, legacy, kept


def legacy_selection(
    legacy: Callable[[JSON], str | None] | None, rows: Sequence[Row], *, everything: bool
) -> tuple[list[Row], dict[int, str]]:
    """The plain entries ``forget`` blanks, and the kind each format-1 one keeps: with ``everything``, all
    of ``rows``; otherwise the format-1 ones for which ``legacy`` names a kind (None: not selected). A
    format-1 entry that does not decode is left for verify to report."""
    chosen: list[Row] = []
    kinds: dict[int, str] = {}
    for row in rows:
        kind: str | None = ""
        if row.v == 1 and legacy is not None:
            try:
                kind = legacy(loads_json(row.data))
            except ValueError:
                kind = "" if everything else None
        if kind is None and not everything:
            continue
        chosen.append(row)
        if row.v == 1:
            kinds[row.seq] = kind or ""
    return chosen, kinds
