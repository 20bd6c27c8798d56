"""API keys: long random secrets bound to a tenant, a principal and roles, stored hashed in the node's store.

A key reads ``mh_<key_id>_<secret>``: ``key_id`` (12 hex characters) finds the record, the secret (256 random
bits) is checked against ``HMAC-SHA256(salt, secret)``. Only the hash and salt are stored, under the system
scope ``("system", "__api_keys__")`` that no actor can reach; the key itself is shown once, when created. A
fast hash is the right tool here: the secret is random, not a password, so there is nothing to brute-force.

These functions take an opened :class:`~minihermes.runtime.store.Store`, so the admin CLI can manage keys
with or without a running node (``node.store`` works too).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from minihermes.permissions import ROLES
from minihermes.runtime.store import Store

KEY_SCOPE: tuple[str, str] = ("system", "__api_keys__")
KEY_PREFIX = "mh_"
_RECORD = "apikey:"
_KEY = re.compile(r"mh_([0-9a-f]{12})_([A-Za-z0-9_\-]{43})")
_KEY_ID = re.compile(r"[0-9a-f]{12}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
_PRINCIPAL = re.compile(r"[^\x00-\x1f\x7f]{1,128}")
RESERVED_PRINCIPALS = frozenset({"system"})
"""Principals no credential may name: the runtime acts (and owns what it wrote) as ``system``."""


class ApiKeyError(Exception):
    """A presented key is malformed, unknown, wrong, revoked or expired (``reason`` says which)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    """What is known about a key (never its secret)."""

    key_id: str
    tenant: str
    namespace: str
    principal: str
    roles: tuple[str, ...]
    name: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None

    def active(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "tenant": self.tenant,
            "namespace": self.namespace,
            "principal": self.principal,
            "roles": list(self.roles),
            "name": self.name,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True, slots=True)
class NewApiKey:
    """A freshly created key: ``key`` is the only copy of the secret, give it to its owner."""

    key: str = field(repr=False)
    info: ApiKeyInfo


async def create_api_key(
    store: Store,
    *,
    tenant: str,
    principal: str,
    roles: list[str] | tuple[str, ...],
    namespace: str = "default",
    name: str = "",
    ttl: float | None = None,
    now: float | None = None,
) -> NewApiKey:
    """Create a key for ``principal`` in ``tenant`` with ``roles`` (admin, user, viewer); ``ttl`` seconds of
    validity (None: until revoked)."""
    for label, value in (("tenant", tenant), ("namespace", namespace)):
        if not _NAME.fullmatch(value):
            raise ValueError(f"{label} must be 1-64 characters of letters, digits, '_', '.', '-'")
    if not _PRINCIPAL.fullmatch(principal):
        raise ValueError("principal must be 1-128 printable characters")
    if principal in RESERVED_PRINCIPALS:
        raise ValueError(f"principal {principal!r} is reserved for the runtime")
    unknown = sorted(set(roles) - set(ROLES))
    if unknown or not roles:
        raise ValueError(f"roles must be a non-empty subset of {list(ROLES)} (got {list(roles)})")
    if ttl is not None and ttl <= 0:
        raise ValueError("ttl must be > 0 seconds")
    at = time.time() if now is None else now
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    for _ in range(8):
        key_id = secrets.token_hex(6)
        info = ApiKeyInfo(
            key_id=key_id,
            tenant=tenant,
            namespace=namespace,
            principal=principal,
            roles=tuple(sorted(set(roles))),
            name=name[:128],
            created_at=at,
            expires_at=None if ttl is None else at + ttl,
        )
        record = {**info.to_dict(), "salt": salt, "hash": _digest(salt, secret)}
        if await store.kv.cas(KEY_SCOPE, _RECORD + key_id, None, record) is not None:
            return NewApiKey(key=f"{KEY_PREFIX}{key_id}_{secret}", info=info)
    raise RuntimeError("could not allocate a unique key id")  # 8 collisions of 48 random bits: never


async def list_api_keys(
    store: Store, *, tenant: str | None = None, include_revoked: bool = True
) -> list[ApiKeyInfo]:
    """Every key (of one tenant), oldest first."""
    infos = [_info(v) for _, v in await store.kv.list(KEY_SCOPE, _RECORD) if isinstance(v, dict)]
    return sorted(
        (
            i
            for i in infos
            if (tenant is None or i.tenant == tenant) and (include_revoked or i.revoked_at is None)
        ),
        key=lambda i: (i.created_at, i.key_id),
    )


async def get_api_key(store: Store, key_id: str) -> ApiKeyInfo | None:
    """One key's record by its id (never its secret); None for an id that is malformed or unknown."""
    if not _KEY_ID.fullmatch(key_id):
        return None
    record = await store.kv.get(KEY_SCOPE, _RECORD + key_id)
    return _info(record) if isinstance(record, dict) else None


async def revoke_api_key(store: Store, key_id: str, *, now: float | None = None) -> bool:
    """Revoke a key (by id, or the full key). True if it was active; requests with it get 401 from now on."""
    match = _KEY.fullmatch(key_id)
    kid = match.group(1) if match else key_id
    if not _KEY_ID.fullmatch(kid):
        return False
    entry = await store.kv.get_entry(KEY_SCOPE, _RECORD + kid)
    if entry is None or not isinstance(entry.value, dict) or entry.value.get("revoked_at") is not None:
        return False
    record = {**entry.value, "revoked_at": time.time() if now is None else now}
    await store.kv.put(KEY_SCOPE, _RECORD + kid, record)
    return True


async def verify_api_key(store: Store, key: str, *, now: float | None = None) -> ApiKeyInfo:
    """The key's record if ``key`` is a valid, active key; raises :class:`ApiKeyError` otherwise."""
    match = _KEY.fullmatch(key)
    if match is None:
        raise ApiKeyError("malformed API key")
    key_id, secret = match.groups()
    record = await store.kv.get(KEY_SCOPE, _RECORD + key_id)
    if not isinstance(record, dict) or not hmac.compare_digest(
        str(record.get("hash", "")), _digest(str(record.get("salt", "")), secret)
    ):
        raise ApiKeyError("invalid API key")
    info = _info(record)
    at = time.time() if now is None else now
    if info.revoked_at is not None:
        raise ApiKeyError("API key revoked")
    if not info.active(at):
        raise ApiKeyError("API key expired")
    return info


def _digest(salt: str, secret: str) -> str:
    return hmac.new(salt.encode(), secret.encode(), hashlib.sha256).hexdigest()


def _info(record: dict[str, Any]) -> ApiKeyInfo:
    return ApiKeyInfo(
        key_id=str(record["key_id"]),
        tenant=str(record["tenant"]),
        namespace=str(record.get("namespace", "default")),
        principal=str(record["principal"]),
        roles=tuple(record.get("roles", ())),
        name=str(record.get("name", "")),
        created_at=float(record.get("created_at", 0.0)),
        expires_at=record.get("expires_at"),
        revoked_at=record.get("revoked_at"),
    )


__all__ = [
    "KEY_SCOPE",
    "ApiKeyError",
    "ApiKeyInfo",
    "NewApiKey",
    "create_api_key",
    "get_api_key",
    "list_api_keys",
    "revoke_api_key",
    "verify_api_key",
]
