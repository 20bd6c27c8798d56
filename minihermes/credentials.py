"""Phantom tokens for API keys: the keys are encrypted at rest and resolved only inside the gateway.

An admin registers ``register_credential("openai-prod", "sk-...")``; providers name the phantom token
(``credential="openai-prod"``), never the key. The key is stored Fernet-encrypted in the gateway's
``private_kv`` (a namespace only ``llm_gateway`` actors reach, inside the tenant's scope), and decrypted
only when the gateway builds a provider client.

Key material, in order of preference:

1. ``args["credential_key"]``: the app reads it from ``credential.key`` in the data dir (created 0600),
   so a copy of the database alone (a backup, a support bundle) does not reveal any API key.
2. Otherwise a random key generated once per tenant and kept in the same private KV. That keeps keys out
   of plain sight in the database file, but anyone holding the whole database holds both; run with (1)
   in production.

Either way the Fernet key is derived per tenant with HKDF, so a ciphertext copied into another tenant's
rows does not decrypt there. When (1) is configured after (2) was in use, credentials stored under (2)
still decrypt (``MultiFernet``) and are re-encrypted under (1) the next time they are registered.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
from typing import Any, Protocol

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import SecretStr

from minihermes.runtime import ConfigError, InvalidArgument

MIN_KEY_MATERIAL = 32
MAX_API_KEY = 4096
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
_MASTER = "vault/master"
_PREFIX = "vault/cred/"


class SecretKV(Protocol):
    """What the vault needs of ``host.private_kv``."""

    async def get(self, key: str) -> Any: ...
    async def put(self, key: str, value: Any, ttl: float | None = None) -> int: ...
    async def cas(
        self, key: str, expected_version: int | None, value: Any, ttl: float | None = None
    ) -> int | None: ...


def check_phantom_token(token: str, field: str = "phantom_token") -> str:
    """A phantom token is a name, not a secret: 1-128 letters, digits and ``_.:-``."""
    if not _TOKEN.match(token):
        raise InvalidArgument(
            f"{field} must be a phantom token: 1-128 characters of letters, digits, '_', '.', ':', '-'",
            field=field,
        )
    return token


def check_api_key(api_key: str) -> str:
    """Reject keys that cannot be a header value. Messages never include the key itself."""
    if not api_key:
        raise InvalidArgument("api_key must not be empty", field="api_key")
    if len(api_key) > MAX_API_KEY:
        raise InvalidArgument(f"api_key must be at most {MAX_API_KEY} characters", field="api_key")
    if any(c.isspace() or not c.isprintable() for c in api_key):
        raise InvalidArgument("api_key must not contain whitespace or control characters", field="api_key")
    return api_key


def _derive(material: bytes, tenant: str) -> Fernet:
    key = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=None,
        info=b"minihermes/llm-credentials/v1/" + tenant.encode(),
    ).derive(material)
    return Fernet(base64.urlsafe_b64encode(key))


class CredentialVault:
    """Encrypted phantom-token -> API key store for one tenant (one gateway instance)."""

    def __init__(self, kv: SecretKV, tenant: str, key_material: str | bytes | None = None) -> None:
        if isinstance(key_material, str):
            key_material = key_material.encode()
        if key_material is not None and len(key_material) < MIN_KEY_MATERIAL:
            raise ConfigError("llm_gateway.args.credential_key", f"needs at least {MIN_KEY_MATERIAL} bytes")
        self._kv = kv
        self._tenant = tenant
        self._material = key_material
        self._fernet: MultiFernet | None = None
        self._lock = asyncio.Lock()

    async def put(self, token: str, api_key: str) -> None:
        fernet = await self._keys()
        ciphertext = fernet.encrypt(api_key.encode()).decode()
        await self._kv.put(_PREFIX + token, {"v": 1, "ciphertext": ciphertext})

    async def resolve(self, token: str) -> SecretStr | None:
        """The key for ``token``, or None when it is unknown or no longer decrypts (the key file changed)."""
        stored = await self._kv.get(_PREFIX + token)
        if not isinstance(stored, dict) or not isinstance(stored.get("ciphertext"), str):
            return None
        fernet = await self._keys()
        try:
            return SecretStr(fernet.decrypt(stored["ciphertext"].encode()).decode())
        except InvalidToken:
            return None

    async def _keys(self) -> MultiFernet:
        if self._fernet is not None:
            return self._fernet
        async with self._lock:
            if self._fernet is None:
                keys: list[Fernet] = []
                if self._material is not None:
                    keys.append(_derive(self._material, self._tenant))
                stored = await self._stored_material(create=not keys)
                if stored is not None:
                    keys.append(_derive(stored, self._tenant))
                self._fernet = MultiFernet(keys)
            return self._fernet

    async def _stored_material(self, *, create: bool) -> bytes | None:
        stored = await self._kv.get(_MASTER)
        if isinstance(stored, str):
            return base64.urlsafe_b64decode(stored)
        if not create:
            return None
        fresh = base64.urlsafe_b64encode(os.urandom(32)).decode()
        if await self._kv.cas(_MASTER, None, fresh) is None:
            # Another activation created it first: use theirs, or what it encrypted would not decrypt.
            stored = await self._kv.get(_MASTER)
            return base64.urlsafe_b64decode(str(stored))
        return base64.urlsafe_b64decode(fresh)
