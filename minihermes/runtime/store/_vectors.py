"""Backend-independent rules of the vector primitive: validation, the float32 storage form, cosine.

Both backends store vectors as float32 (pgvector's ``vector`` type is float32) and score with cosine
similarity of the float32 values, so a vector searched on SQLite and on PostgreSQL gets the same score
(PostgreSQL's HNSW index may skip a few true neighbours; SQLite's exact scan never does).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

MAX_DIMENSIONS = 2000
"""pgvector's limit for an HNSW-indexed ``vector``; the same on every backend so data can move."""
FLOAT32_MAX = 3.4028234663852886e38


def check_vector(what: str, vector: object) -> list[float]:
    """A non-empty sequence of finite numbers, at most MAX_DIMENSIONS long and not all zero (cosine is
    undefined for a zero vector). Returned rounded to float32, the stored precision."""
    if isinstance(vector, str | bytes | bytearray) or not isinstance(vector, Sequence):
        raise TypeError(f"{what} must be a sequence of numbers, got {type(vector).__name__}")
    if not vector:
        raise ValueError(f"{what} must have at least one dimension")
    if len(vector) > MAX_DIMENSIONS:
        raise ValueError(f"{what} has {len(vector)} dimensions; at most {MAX_DIMENSIONS} are supported")
    for i, x in enumerate(vector):
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise TypeError(f"{what}[{i}] must be a number, got {type(x).__name__}")
        if not math.isfinite(x) or abs(x) > FLOAT32_MAX:
            raise ValueError(f"{what}[{i}] must be a finite float32 value, got {x!r}")
    values = list(struct.unpack(f"<{len(vector)}f", struct.pack(f"<{len(vector)}f", *vector)))
    if not any(values):
        raise ValueError(f"{what} must not be all zeros (its cosine similarity is undefined)")
    return values


def pack(values: Sequence[float]) -> bytes:
    """Little-endian float32 bytes."""
    return struct.pack(f"<{len(values)}f", *values)


def norm(values: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in values))
