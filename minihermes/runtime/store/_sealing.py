"""Sealed event content: AES-256-GCM under one key per (stream, subject set), shared by every backend.

An entry appended with ``subjects`` is sealed under the key of exactly that set of subjects (created with the
first such entry), so forgetting one subject deletes every key whose set contains it, and no other. The
associated data binds the sealed bytes to their scope, stream, sequence number and key: moved anywhere else
they do not open. A deleted key is the erasure: the sealed bytes stay, and the chain that hashes them still
verifies.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ._common import loads_json
from .base import EventRecord

KEY_BYTES = 32
NONCE_BYTES = 12


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def _aad(key: tuple[str, str, str], seq: int, key_id: int) -> bytes:
    # Names hold no NUL (check_name), so the joined form is unambiguous; cheaper than JSON on every event.
    return f"{key[0]}\x00{key[1]}\x00{key[2]}\x00{seq}\x00{key_id}".encode()


def seal(secret: bytes, key: tuple[str, str, str], seq: int, key_id: int, plaintext: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(secret).encrypt(nonce, plaintext, _aad(key, seq, key_id))


def unseal(secret: bytes, key: tuple[str, str, str], seq: int, key_id: int, sealed: bytes) -> bytes:
    """The plaintext; ValueError when the bytes do not open under this key at this place."""
    try:
        return AESGCM(secret).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _aad(key, seq, key_id))
    except (InvalidTag, ValueError):
        raise ValueError("sealed content does not open") from None


def subject_list(subjects_text: str) -> list[str]:
    value = json.loads(subjects_text)
    assert isinstance(value, list)
    return [str(s) for s in value]


READ_COLUMNS = "e.seq, e.ts, e.data, e.prev_hash, e.hash, e.v, e.kind, e.key_id, e.body, e.erased, k.key"
"""What ``open_row`` takes, from ``events AS e LEFT JOIN event_keys AS k ON k.key_id = e.key_id``."""


def open_row(key: tuple[str, str, str], row: tuple[Any, ...]) -> EventRecord:
    """A stored entry as readers get it: sealed content opened, erased content as ``data=None`` with why.
    ValueError for an entry that cannot be decoded (damaged: ``verify`` reports it)."""
    seq, ts, data, prev, digest, v, kind, key_id, body, erased, secret = row
    seq, ts, v = int(seq), float(ts), int(v)
    kind = str(kind)
    if key_id is not None:
        if secret is None:
            return EventRecord(seq, ts, None, str(prev), str(digest), kind, v, "forgotten")
        if body is None:
            return EventRecord(seq, ts, None, str(prev), str(digest), kind, v, str(erased) or "trimmed")
        plain = unseal(bytes(secret), key, seq, int(key_id), bytes(body))
        return EventRecord(seq, ts, loads_json(plain.decode("utf-8")), str(prev), str(digest), kind, v)
    if data == "":
        return EventRecord(seq, ts, None, str(prev), str(digest), kind, v, str(erased) or "forgotten")
    return EventRecord(seq, ts, loads_json(data), str(prev), str(digest), kind, v)
