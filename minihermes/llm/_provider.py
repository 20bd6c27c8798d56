"""The ``Provider`` contract, its configuration, and the registry of provider kinds by name."""

from __future__ import annotations

import difflib
import importlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ._types import Completion, CompletionRequest, StreamEvent
from .egress import EgressPolicy


class ProviderConfig(BaseModel):
    """How to reach one provider. Built by the caller (the gateway); nothing is read from the environment.

    ``api_key`` is a ``SecretStr`` so that reprs, dumps and logs of a config never show it. ``options``
    holds kind-specific settings (documented on each provider class).
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    model: str = ""
    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout: float = Field(default=60.0, gt=0)
    extra_headers: dict[str, str] = Field(default_factory=dict)
    name: str | None = None
    """A label for this provider in completions and errors (e.g. "openrouter"); defaults to the kind."""
    options: dict[str, Any] = Field(default_factory=dict)
    egress: EgressPolicy | None = None
    """Where the client may connect (``minihermes.llm.egress``; None: anywhere). An adapter builds its HTTP
    client with ``_common.httpx_options`` / ``httpx2_options``, which add the guarded transport."""

    def secret(self) -> str | None:
        """The API key in clear, for the adapter that sends it and for redaction; never log it."""
        return self.api_key.get_secret_value() if self.api_key is not None else None


class Provider(ABC):
    """One LLM backend behind the neutral request/completion shapes.

    Implementations raise only ``ProviderError`` (see ``kind``) for provider failures, never retry, and
    hold no state between calls beyond connection pools and, for fakes, what tests inspect. ``stream``
    ends with exactly one ``Done`` event carrying the same ``Completion`` ``complete`` would return; a
    failure mid-stream raises from the iterator, after which the caller must discard what it received
    (failing over is only transparent before the first event). A caller that may stop reading early
    should wrap the stream in ``contextlib.aclosing`` so the connection is released at once.
    """

    kind: str = ""
    """The registry name of this provider class."""

    # -- what the provider declares about itself: the gateway's defaults and checks and ``minihermes doctor``
    # read these from the registry (``provider_class``), so a new provider touches no other module. A module
    # that defines a provider imports its SDK on first use (see ``sdk_modules``), so reading them is cheap.

    network: ClassVar[bool] = False
    """It talks to a server: every tenant starts with an unconfigured entry of this kind (an admin gives it
    a model and a credential), and ``doctor`` probes it."""
    needs_model: ClassVar[bool] = False
    """A registration must name a model: the server has no model of its own to answer with."""
    needs_key_at_default_url: ClassVar[bool] = False
    """At ``default_base_url`` it cannot work without an API key, so the gateway fails a call with ``auth``
    before sending anything; another ``base_url`` may be a local server that needs none."""
    default_base_url: ClassVar[str] = ""
    """Where it connects when the config names no ``base_url``."""
    probe_path: ClassVar[str] = ""
    """Appended to the base URL by ``doctor``: any HTTP answer there means the server is reachable (no
    credential is sent). Empty: nothing to probe (an in-process provider)."""
    sdk_modules: ClassVar[tuple[str, ...]] = ()
    """Modules that take seconds to import (an official SDK), which the provider imports on first use: the
    gateway imports them in a worker thread before it builds a client, so the event loop never stalls."""

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config

    @property
    def name(self) -> str:
        """The label used in completions and errors."""
        return self.config.name or self.kind

    @abstractmethod
    async def complete(self, request: CompletionRequest) -> Completion:
        """Run one completion."""

    @abstractmethod
    def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        """Run one completion, yielding events as they arrive; the last one is ``Done``."""

    async def aclose(self) -> None:
        """Release connections. The gateway calls this when it swaps providers."""
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @classmethod
    async def probe(cls, base_url: str | None, timeout: float) -> tuple[bool, str] | None:
        """Whether the provider's server can be reached, for ``minihermes doctor``: ``(reachable, finding)``,
        or None when there is no server to probe. By default a GET of ``probe_path`` under ``base_url`` (else
        ``default_base_url``) where any HTTP answer counts; no credential is sent. A provider reached some
        other way overrides this."""
        if not cls.probe_path:
            return None
        import httpx  # only the doctor probes

        base = (base_url or cls.default_base_url).rstrip("/")
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
                resp = await client.get(base + cls.probe_path)
        except httpx.HTTPError as e:
            return False, f"{base}: unreachable ({type(e).__name__})"
        return True, f"{base}: answers (HTTP {resp.status_code})"

    def model_for(self, request: CompletionRequest) -> str:
        """The model to ask for: the request's, else the configured one."""
        return request.model or self.config.model

    def __repr__(self) -> str:
        # Deliberately not the config repr: keep reprs short and obviously free of credentials.
        return f"<{type(self).__name__} name={self.name!r} model={self.config.model!r}>"


ProviderFactory = Callable[[ProviderConfig], Provider]


class UnknownProviderError(ValueError):
    """Raised at start-up for a provider kind nobody registered; lists the known ones."""

    def __init__(self, kind: str, known: list[str]) -> None:
        close = difflib.get_close_matches(kind, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        super().__init__(f"unknown provider kind {kind!r}{hint} Known kinds: {', '.join(known)}")
        self.kind = kind
        self.known = known


# The built-in adapters, "module:class", imported on first use (``llm/__init__.py`` derives its lazy names
# from these). A new built-in provider is its module plus one line here; a plugin calls ``register_provider``.
_BUILTIN: dict[str, str] = {
    "simulated": "minihermes.llm.simulated:SimulatedProvider",
    "scripted": "minihermes.llm._scripted:ScriptedProvider",
    "openai": "minihermes.llm._openai:OpenAIProvider",
    "anthropic": "minihermes.llm._anthropic:AnthropicProvider",
    "ollama": "minihermes.llm._ollama:OllamaProvider",
}
_REGISTRY: dict[str, ProviderFactory | str] = dict(_BUILTIN)


def register_provider(kind: str, factory: ProviderFactory, *, replace: bool = False) -> None:
    """Make ``create_provider(kind, ...)`` build providers with ``factory``."""
    if kind in _REGISTRY and not replace:
        raise ValueError(f"provider kind {kind!r} is already registered")
    _REGISTRY[kind] = factory


def provider_kinds() -> list[str]:
    """The registered kind names, sorted."""
    return sorted(_REGISTRY)


def provider_factory(kind: str) -> ProviderFactory:
    """The factory for ``kind``; raises ``UnknownProviderError`` with suggestions for a typo."""
    try:
        entry = _REGISTRY[kind]
    except KeyError:
        raise UnknownProviderError(kind, provider_kinds()) from None
    if isinstance(entry, str):
        module_name, _, attr = entry.partition(":")
        factory: ProviderFactory = getattr(importlib.import_module(module_name), attr)
        _REGISTRY[kind] = factory
        return factory
    return entry


def provider_class(kind: str) -> type[Provider] | None:
    """The class that ``kind`` builds, for the facts it declares (``network``, ``probe_path``, ...); None
    when its factory is not a ``Provider`` class (it then declares nothing). Imports a built-in adapter's
    module, which is cheap: SDKs load on first use. Raises ``UnknownProviderError`` like
    ``provider_factory``."""
    factory = provider_factory(kind)
    return factory if isinstance(factory, type) and issubclass(factory, Provider) else None


def network_kinds() -> list[str]:
    """The registered kinds that talk to a server (``Provider.network``), sorted."""
    return [kind for kind in provider_kinds() if getattr(provider_class(kind), "network", False)]


def create_provider(kind: str, config: ProviderConfig | None = None) -> Provider:
    """Build a provider of the registered ``kind`` ("openai", "anthropic", "ollama", "simulated", ...)."""
    return provider_factory(kind)(config or ProviderConfig())
