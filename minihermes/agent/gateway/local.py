"""A local model server to offer, never switched to silently: ``llm_gateway.detect_local``.

``detect_ollama`` asks ``GET <url>/api/tags`` (the models an Ollama has pulled) once, with a short timeout,
through the gateway's egress rules like any provider URL: where the node does not let tenants reach that
address (an auth node whose operator did not list it), nothing is asked and nothing is found. An answer that
is not Ollama's shape is no Ollama. Nothing here registers or switches anything: the offer is the person's
to take (``register_provider``, then ``switch_provider``, with ``registration`` as the first's arguments).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from minihermes.llm import egress
from minihermes.runtime import ConfigError, PermissionDenied

DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
"""Where Ollama listens when nobody configured it."""
OLLAMA_URL_ENV = "MINIHERMES_OLLAMA_URL"
"""The node-wide address to look at instead (the gateway's ``ollama_url`` arg wins)."""
DETECT_TIMEOUT = 2.0
MAX_MODELS = 100
MAX_BODY_BYTES = 1_000_000
PROVIDER_NAME = "ollama"


def ollama_url(configured: str | None) -> str:
    """The address to look at: the arg, else ``MINIHERMES_OLLAMA_URL``, else the default; ``ConfigError`` for
    one that is not an http(s) URL with a host."""
    url = (configured or os.environ.get(OLLAMA_URL_ENV) or DEFAULT_OLLAMA_URL).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("llm_gateway.args.ollama_url", f"{url!r} is not an http(s) URL with a host")
    return url


@dataclass
class Found:
    """What ``detect_ollama`` saw: ``models`` when an Ollama answered, else why not (``reason``)."""

    url: str
    models: list[str] | None = None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


async def detect_ollama(url: str, policy: egress.EgressPolicy) -> Found:
    """The models the Ollama at ``url`` lists, or why there is none to offer."""
    try:
        await egress.check_url(url, policy, op="detect_local", field="ollama_url")
    except PermissionDenied:
        return Found(url, reason=f"this node does not let tenants reach {url} ({policy.setting})")
    transport = None if policy.allow_all else egress.httpx_transport(policy)
    try:
        async with httpx.AsyncClient(
            transport=transport, timeout=DETECT_TIMEOUT, follow_redirects=False, trust_env=False
        ) as client:
            resp = await client.get(f"{url}/api/tags")
    except httpx.HTTPError:
        return Found(url, reason=f"nothing answers at {url}")
    models = _models(resp)
    if models is None:
        return Found(url, reason=f"{url} is not an Ollama (GET /api/tags answered {resp.status_code})")
    return Found(url, models=models)


def _models(resp: httpx.Response) -> list[str] | None:
    if resp.status_code != 200 or len(resp.content) > MAX_BODY_BYTES:
        return None
    try:
        body = resp.json()
    except ValueError:
        return None
    listed = body.get("models") if isinstance(body, dict) else None
    if not isinstance(listed, list):
        return None
    names = [m.get("name") or m.get("model") for m in listed if isinstance(m, dict)]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n.strip()))[:MAX_MODELS]


def registration(url: str, model: str, providers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``register_provider``'s arguments for the Ollama at ``url`` serving ``model``: named ``ollama``,
    unless that name holds another configured Ollama (another address), then ``ollama-local``."""
    name = PROVIDER_NAME
    taken = providers.get(name)
    if taken and taken.get("model") and (taken.get("base_url") or "").rstrip("/") not in ("", url):
        name = f"{PROVIDER_NAME}-local"
    return {"name": name, "kind": "ollama", "model": model, "base_url": url}


__all__ = ["DEFAULT_OLLAMA_URL", "OLLAMA_URL_ENV", "Found", "detect_ollama", "ollama_url", "registration"]
