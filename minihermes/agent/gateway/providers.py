"""Provider registrations: a name and its settings validated into the JSON entry the gateway keeps in
state, and what the entries say with the facts each provider class declares (``Provider.network``,
``needs_model``, ``needs_key_at_default_url``): the entries a tenant starts with, and whether a call can
be sent at all. Nothing here names a provider kind but the offline default: a new provider is picked up
from the registry."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from minihermes.llm import Provider, UnknownProviderError, network_kinds, provider_class, provider_kinds
from minihermes.llm.protocol import ProviderEntry
from minihermes.runtime import InvalidArgument

OFFLINE_KIND = "simulated"
"""The provider every tenant starts on: the offline model, which needs nothing configured."""
MAX_TIMEOUT = 600.0
PRICE_FIELDS = ("input", "output", "cached", "cache_write")
_MAX_OPTIONS_BYTES = 16_384
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_name(value: str, field: str, what: str = "provider name") -> str:
    if not _NAME.match(value):
        raise InvalidArgument(
            f"{what} must be 1-64 characters of letters, digits, '_', '.', '-'", field=field, value=value[:64]
        )
    return value


def declared(kind: str) -> type[Provider] | None:
    """The class whose facts ``kind`` goes by; None for a kind that declares none, or that this process
    does not know (an entry saved while a plugin was loaded: building it fails as ``misconfigured``)."""
    try:
        return provider_class(kind)
    except (UnknownProviderError, ImportError):
        return None


def needs_model(kind: str) -> bool:
    """A registration of ``kind`` must name a model (``Provider.needs_model``)."""
    cls = declared(kind)
    return cls is not None and cls.needs_model


def provider_entry(
    *,
    kind: str,
    model: str,
    base_url: str,
    credential: str,
    timeout: float,
    options: dict[str, Any],
    pricing: dict[str, Any],
    slow_call_seconds: float,
) -> ProviderEntry:
    """Validate a registration into the JSON entry kept in state; raises ``InvalidArgument`` naming the field."""
    known = provider_kinds()
    if kind not in known:
        # Built from the registry's own error so the message carries its "did you mean" hint.
        raise InvalidArgument(str(UnknownProviderError(kind, known)), field="kind", known=known)
    if not model.strip() and needs_model(kind):
        raise InvalidArgument(f"a {kind} provider needs a model name", field="model")
    if base_url:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidArgument("base_url must be an http(s) URL with a host", field="base_url")
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise InvalidArgument(f"timeout must be > 0 and <= {MAX_TIMEOUT:g} seconds", field="timeout")
    if not (math.isfinite(slow_call_seconds) and slow_call_seconds >= 0):
        raise InvalidArgument(
            "slow_call_seconds must be >= 0 (0: the gateway default)", field="slow_call_seconds"
        )
    try:
        encoded = json.dumps(options)
    except (TypeError, ValueError):
        raise InvalidArgument("options must be a JSON object", field="options") from None
    if len(encoded) > _MAX_OPTIONS_BYTES:
        raise InvalidArgument(f"options must be at most {_MAX_OPTIONS_BYTES} bytes of JSON", field="options")
    return {
        "kind": kind,
        "model": model,
        "base_url": base_url,
        "credential": credential,
        "timeout": float(timeout),
        "options": json.loads(encoded),
        "pricing": check_pricing(pricing),
        "slow_call_seconds": float(slow_call_seconds),
    }


def default_providers() -> dict[str, ProviderEntry]:
    """What a tenant starts with: the offline model, active, and every network kind unconfigured.

    The names exist so that ``switch_provider("anthropic", model=...)`` works as the documented examples
    send it once a credential is registered for them (``register_credential``, then ``register_provider``
    naming it); until then ``switch_provider`` refuses them (``unusable``), and a call routed to one by the
    failover chain fails with ``auth`` (no request is sent), never answered by the simulated model instead.
    """
    entries = {OFFLINE_KIND: OFFLINE_KIND, **dict.fromkeys(network_kinds(), "")}
    return {
        kind: {
            "kind": kind,
            "model": model,
            "base_url": "",
            "credential": "",
            "timeout": 60.0,
            "options": {},
            "pricing": {},
            "slow_call_seconds": 0.0,
        }
        for kind, model in entries.items()
    }


def missing_credential(entry: Mapping[str, Any]) -> bool:
    """A hosted API (OpenAI, Anthropic at their own endpoints) called without a key: fail before sending.
    A ``base_url`` may be a local server (vLLM, Ollama's ``/v1``, a proxy) that needs none."""
    if entry["base_url"] or entry["credential"]:
        return False
    cls = declared(entry["kind"])
    return cls is not None and cls.needs_key_at_default_url


def unusable(
    name: str, entry: Mapping[str, Any], model: str, credentials: Mapping[str, Any]
) -> tuple[str, str] | None:
    """Why no call to provider ``name`` (with ``model``) could be sent: ``(kind, reason naming the fix)``
    with kind ``no_credential`` or ``misconfigured``; None when one can. ``credentials``: the registered
    phantom tokens."""
    kind = entry["kind"]
    token = entry["credential"]
    fix = (
        f"register the key with register_credential {{phantom_token, api_key}}, then register_provider "
        f"{{name: {name!r}, kind: {kind!r}, model, credential: <phantom_token>}} (docs/providers.md)"
    )
    if missing_credential(entry):
        return "no_credential", f"it has no credential and {kind} needs an API key; {fix}"
    if token and token not in credentials:
        return "no_credential", f"its credential {token!r} is not registered; {fix}"
    if not (model or entry["model"]) and needs_model(kind):
        return "misconfigured", (
            f"it has no model; pass model, or register_provider {{name: {name!r}, kind: {kind!r}, model, "
            f"...}} (docs/providers.md)"
        )
    return None


def check_pricing(pricing: Mapping[str, Any]) -> dict[str, float]:
    """USD per million tokens by kind: input, output, cached, cache_write (the last two default to input)."""
    out: dict[str, float] = {}
    for name, value in pricing.items():
        if name not in PRICE_FIELDS:
            raise InvalidArgument(f"pricing keys are {', '.join(PRICE_FIELDS)}", field=f"pricing.{name}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e6:
            raise InvalidArgument(
                "a price must be a number >= 0 (USD per million tokens)", field=f"pricing.{name}"
            )
        out[name] = float(value)
    if out and ("input" not in out or "output" not in out):
        raise InvalidArgument("pricing needs at least input and output", field="pricing")
    return out
