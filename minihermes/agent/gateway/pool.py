"""Provider clients: ``ProviderPool`` builds them lazily, shares them between concurrent calls, and closes
them once retired and idle; ``import_adapter`` first imports a provider's slow SDK in a worker thread."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from minihermes.llm import Provider, provider_class


async def import_adapter(kind: str) -> None:
    """Import what the provider declares slow to import (``Provider.sdk_modules``, an official SDK taking
    seconds) in a worker thread: imported on the event loop it would stall every actor of the node."""
    cls = provider_class(kind)
    if cls is not None and cls.sdk_modules:
        await asyncio.to_thread(_import_all, cls.sdk_modules)


def _import_all(modules: tuple[str, ...]) -> None:
    for module in modules:
        importlib.import_module(module)


class BuildFailed(Exception):
    """A provider client could not be built (``kind``: auth for a missing credential, or misconfigured)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(eq=False, slots=True)
class Lease:
    fingerprint: str
    provider: Provider
    refs: int = 0
    retired: bool = False


class ProviderPool:
    """Provider clients built lazily, shared by concurrent calls, closed once retired and no longer in use.

    A client is cached under its provider name with a fingerprint of what it was built from (registration
    and credential version): a call that finds another fingerprint builds afresh and retires the old one.
    """

    def __init__(
        self, build: Callable[[str, dict[str, Any]], Awaitable[Provider]], spawn: Callable[[Any], Any]
    ) -> None:
        self._build = build
        self._spawn = spawn
        self._leases: dict[str, Lease] = {}

    async def acquire(self, name: str, entry: dict[str, Any], fingerprint: str) -> Lease:
        lease = self._leases.get(name)
        if lease is None or lease.fingerprint != fingerprint:
            built = await self._build(name, entry)
            lease = self._leases.get(name)
            if lease is None:
                lease = self._leases[name] = Lease(fingerprint, built)
            elif lease.fingerprint == fingerprint:
                self._close(built)  # a concurrent call built the same one first
            elif lease.refs == 0:
                self.retire(name)
                lease = self._leases[name] = Lease(fingerprint, built)
            else:
                # The registration changed while this call was building: serve it once, cache nothing.
                lease = Lease(fingerprint, built, retired=True)
        lease.refs += 1
        return lease

    def release(self, lease: Lease) -> None:
        lease.refs -= 1
        if lease.retired and lease.refs == 0:
            self._close(lease.provider)

    def retire(self, name: str) -> None:
        lease = self._leases.pop(name, None)
        if lease is not None:
            lease.retired = True
            if lease.refs == 0:
                self._close(lease.provider)

    async def close_all(self) -> None:
        leases, self._leases = list(self._leases.values()), {}
        await asyncio.gather(*(_close_quietly(lease.provider) for lease in leases))

    def _close(self, provider: Provider) -> None:
        self._spawn(_close_quietly(provider))


async def _close_quietly(provider: Provider) -> None:
    # A retired client that fails to close has nothing left to serve; it must not crash the gateway.
    with contextlib.suppress(Exception):
        await provider.aclose()
