"""Moved to ``minihermes.credentials`` (the credential store sits below the agent: the LLM gateway and the MCP
manager both use it). This name stays importable."""

from minihermes.credentials import (
    MAX_API_KEY,
    MIN_KEY_MATERIAL,
    CredentialVault,
    SecretKV,
    check_api_key,
    check_phantom_token,
)

__all__ = [
    "MAX_API_KEY",
    "MIN_KEY_MATERIAL",
    "CredentialVault",
    "SecretKV",
    "check_api_key",
    "check_phantom_token",
]
