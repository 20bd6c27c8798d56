"""The event-log hash chain, shared by every backend.

Entry n stores ``hash_n = sha256(hash_{n-1} + canonical_json([seq, ts, data]))``; the first entry of a stream
chains from 64 zeros. Retention deletes a prefix of a stream and records its last (seq, hash) as the anchor,
so verification restarts from the anchor and sequence numbers never restart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from ._common import canonical_json, loads_json
from .base import JSON, ChainCheck

ZERO_HASH = "0" * 64


def chain_hash(prev_hash: str, seq: int, ts: float, data: JSON) -> str:
    payload = prev_hash + canonical_json([seq, ts, data])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class StreamHead:
    """Per-stream bookkeeping row: the newest entry and the retention anchor."""

    last_seq: int
    last_hash: str
    anchor_seq: int
    anchor_hash: str


StoredEvent = tuple[int, float, object, str, str]
"""(seq, ts, raw data column, prev_hash, hash) as read from storage, oldest first."""


def verify_rows(head: StreamHead | None, rows: Iterable[StoredEvent]) -> ChainCheck:
    """Check a stream's stored entries against the chain rules and its head row.

    Detects modified data/timestamps/hashes (hash mismatch), deleted middle entries (sequence gap),
    reordering (prev_hash mismatch), and a truncated tail (the last entry is not the recorded head).
    """
    seq, prev = (0, ZERO_HASH) if head is None else (head.anchor_seq, head.anchor_hash)
    checked = 0
    for row_seq, ts, raw, row_prev, row_hash in rows:
        expected = seq + 1
        if row_seq != expected:
            return ChainCheck(False, checked, expected, f"expected seq {expected}, found {row_seq}")
        if row_prev != prev:
            return ChainCheck(False, checked, row_seq, "prev_hash does not match the previous entry")
        try:
            data = loads_json(raw)
        except ValueError:
            return ChainCheck(False, checked, row_seq, "stored data is not valid JSON")
        if chain_hash(prev, row_seq, ts, data) != row_hash:
            return ChainCheck(False, checked, row_seq, "hash does not match the entry's content")
        seq, prev = row_seq, row_hash
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
