"""Retention anchors: what a trim left behind, signed with the node key so a copy kept elsewhere can be checked.

Each trim of a stream (a prefix, or the content of some kinds) writes one anchor: the stream's retention
base after it (``base_seq``/``base_hash``: verification starts there), the head after it (``seq``/``hash``),
the time and what was trimmed, signed with the node's Ed25519 key. The anchor carries the public half, so
whoever exported it can check it without the secret (compare ``key_id`` with the node's, from
``minihermes audit anchors``). ``EventLog.verify(anchor=...)`` then requires the stored chain to pass through
both positions: a remainder rewritten after the anchor was exported, or a fake trim (entries deleted and the
base moved without a signed anchor), is reported at the first sequence number that departs from it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ._chain import StreamHead
from ._common import canonical_json
from .base import ChainCheck

ANCHOR_KEY_FILE = "anchor.key"
"""The node key's file beside a SQLite store's database (or where ``anchor_key_file`` says)."""
_DOMAIN = "minihermes-anchor-1\n"
_FIELDS = ("v", "tenant", "ns", "stream", "seq", "hash", "base_seq", "base_hash", "time", "trimmed")


class AnchorKey:
    """The node key: Ed25519, a PEM file (0600) created on first use. Without a path, anchors are written
    unsigned (``signature`` null): still pins, but nobody can tell who wrote them."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)
        self._key: Ed25519PrivateKey | None = None
        self._lock = threading.Lock()

    def private(self) -> Ed25519PrivateKey | None:
        """Load (or create) the key. Blocking file I/O: call from a thread, not the event loop."""
        if self.path is None:
            return None
        with self._lock:
            if self._key is None:
                self._key = _load_or_create(self.path)
            return self._key

    def public(self) -> dict[str, str] | None:
        key = self.private()
        return None if key is None else public_fields(key.public_key())

    def sign(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` (the anchor without its key and signature) as exported: signed when there is a key."""
        anchor = {"v": 1, **fields}
        key = self.private()
        if key is None:
            return anchor | {"key_id": None, "public_key": None, "signature": None}
        signature = key.sign(_message(anchor))
        return anchor | public_fields(key.public_key()) | {"signature": _b64(signature)}


def _load_or_create(path: Path) -> Ed25519PrivateKey:
    if not path.exists():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, pem)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic, and never replaces a key another process made meanwhile
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return loaded


def public_fields(public: Ed25519PublicKey) -> dict[str, str]:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"key_id": hashlib.sha256(raw).hexdigest()[:16], "public_key": _b64(raw)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _message(anchor: dict[str, Any]) -> bytes:
    return (_DOMAIN + canonical_json({k: anchor.get(k) for k in _FIELDS})).encode("utf-8")


def check_anchor(anchor: object) -> dict[str, Any]:
    """The anchor's fields, if it is well-formed and its signature holds for the key it carries. Unsigned
    anchors (a store without a node key) are accepted as pins; ``signed`` says which."""
    if not isinstance(anchor, dict):
        raise ValueError("anchor must be an object, as exported")
    for name in ("tenant", "ns", "stream", "hash", "base_hash"):
        if not isinstance(anchor.get(name), str):
            raise ValueError(f"anchor.{name} must be a string")
    for name in ("seq", "base_seq"):
        value = anchor.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"anchor.{name} must be a non-negative integer")
    if anchor["base_seq"] > anchor["seq"]:
        raise ValueError("anchor.base_seq must not exceed anchor.seq")
    signature, public = anchor.get("signature"), anchor.get("public_key")
    if signature is None and public is None:
        return anchor | {"signed": False}
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(str(public), validate=True))
        key.verify(base64.b64decode(str(signature), validate=True), _message(anchor))
    except (InvalidSignature, ValueError):
        raise ValueError("anchor signature does not verify: it was altered or not made by this key") from None
    return anchor | {"signed": True}


def anchor_pins(
    head: StreamHead | None, anchor: dict[str, Any], stored: list[dict[str, Any]]
) -> tuple[dict[int, str], ChainCheck | None]:
    """The positions ``anchor`` pins that the stored chain still holds (seq -> hash), or the check that fails
    before any entry is read: the stream gone, its base moved past a pin without a signed anchor of the same
    key (``stored``: the anchors the store keeps) recording that trim, or its base hash not the pinned one."""
    pairs = ((anchor["base_seq"], anchor["base_hash"]), (anchor["seq"], anchor["hash"]))
    if head is None:
        return {}, ChainCheck(False, 0, anchor["base_seq"] + 1, "the stream the anchor pins is gone", True)
    pins: dict[int, str] = {}
    for seq, digest in pairs:
        if seq > head.last_seq:
            reason = f"the stream ends at seq {head.last_seq}, before the anchor's seq {seq}"
            return {}, ChainCheck(False, 0, head.last_seq + 1, reason, True)
        if seq > head.anchor_seq:
            pins[seq] = digest
        elif seq == head.anchor_seq:
            if head.anchor_hash != digest:
                reason = "the chain does not continue from the anchor (its base was rewritten)"
                return {}, ChainCheck(False, 0, seq + 1, reason, True)
        else:
            accounted = _signed_base(head, anchor, stored, seq)
            if accounted is not None:
                reason = "entries after the anchor were removed without a signed anchor recording it"
                return {}, ChainCheck(False, 0, accounted + 1, reason, True)
    return pins, None


def _signed_base(
    head: StreamHead, anchor: dict[str, Any], stored: list[dict[str, Any]], pinned: int
) -> int | None:
    """None when a stored anchor, signed by the same key as ``anchor``, left the stream's current base (a
    later trim); otherwise the last seq that such anchors account for (the first missing entry follows)."""
    accounted = pinned
    for other in stored:
        if anchor.get("public_key") is not None and other.get("public_key") != anchor.get("public_key"):
            continue
        try:
            check_anchor(other)
        except ValueError:
            continue
        if (other.get("base_seq"), other.get("base_hash")) == (head.anchor_seq, head.anchor_hash):
            return None
        if pinned <= other["base_seq"] <= head.anchor_seq:
            accounted = max(accounted, other["base_seq"])
    return accounted
