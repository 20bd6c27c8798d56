"""MCP servers' secrets (``env`` and ``headers`` values) encrypted at rest, like the LLM gateway's API keys.

The actor's durable state keeps only the names; each value lives Fernet-encrypted in the actor's
``private_kv`` (``CredentialVault``, keyed from ``<data_dir>/credential.key`` when the app passes it), so a
copy of the database alone reveals no MCP server token. Values are decrypted only to open a connection.
"""

from __future__ import annotations

import hashlib
from typing import Any

from minihermes.credentials import CredentialVault, SecretKV

from ._connection import MCPUnavailable

SECRET_FIELDS = ("env", "headers")


def _token(server: str, field: str, name: str) -> str:
    return f"mcp:{server}:{field}:{hashlib.sha256(name.encode()).hexdigest()[:24]}"


class ServerSecrets:
    """Seal a server record's secret values into the vault, and open them again for a connection."""

    def __init__(self, kv: SecretKV, tenant: str, key_material: str | None) -> None:
        self._vault = CredentialVault(kv, tenant, key_material)

    async def seal(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record to store: every secret value replaced by ``{"vault": token}`` after it is saved."""
        out = dict(record)
        for field in SECRET_FIELDS:
            if field not in record:
                continue
            sealed: dict[str, Any] = {}
            for name, value in record[field].items():
                token = _token(record["name"], field, name)
                await self._vault.put(token, value)
                sealed[name] = {"vault": token}
            out[field] = sealed
        return out

    async def open(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record with its secret values, for ``MCPConnection``."""
        out = dict(record)
        for field in SECRET_FIELDS:
            if field not in record:
                continue
            plain: dict[str, str] = {}
            for name, value in record[field].items():
                if not isinstance(value, dict):
                    plain[name] = str(value)  # a record stored before values were sealed
                    continue
                secret = await self._vault.resolve(value["vault"])
                if secret is None:
                    raise MCPUnavailable(
                        f"MCP server {record['name']!r}: the value of {field} {name!r} cannot be decrypted "
                        "(credential.key changed?); add the server again with replace=true",
                        server=record["name"],
                    )
                plain[name] = secret.get_secret_value()
            out[field] = plain
        return out

    async def forget(self, record: dict[str, Any], keep: dict[str, Any] | None = None) -> None:
        """Overwrite the vault entries of ``record`` that ``keep`` (the record replacing it) does not use."""
        kept = {
            v["vault"]
            for field in SECRET_FIELDS
            for v in (keep or {}).get(field, {}).values()
            if isinstance(v, dict)
        }
        for field in SECRET_FIELDS:
            for value in record.get(field, {}).values():
                if isinstance(value, dict) and value["vault"] not in kept:
                    await self._vault.put(value["vault"], "")
