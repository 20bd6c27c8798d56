"""Storage backends by name: ``open_store("sqlite", path=...)``; an unknown name lists the known ones."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

from .._clock import Clock
from .base import Store

BackendFactory = Callable[..., Store]
"""Called as ``factory(clock=clock, **options)``; returns an unopened store."""

# Built-ins are "module:attribute" strings, imported on first use, so that a backend's driver (e.g. a
# PostgreSQL client) is only needed by programs that select that backend.
_backends: dict[str, BackendFactory | str] = {
    "sqlite": "minihermes.runtime.store.sqlite:SqliteStore",
    "postgres": "minihermes.runtime.store.postgres:PostgresStore",
}


def register_backend(name: str, factory: BackendFactory | str, *, replace: bool = False) -> None:
    """Make a backend available to ``open_store`` under name (a factory or a "module:attribute" path)."""
    if not isinstance(name, str) or not name:
        raise ValueError("backend name must be a non-empty str")
    if name in _backends and not replace:
        raise ValueError(f"store backend {name!r} is already registered (pass replace=True to override)")
    _backends[name] = factory


def backend_names() -> list[str]:
    return sorted(_backends)


def get_backend(name: str) -> BackendFactory:
    """The factory registered under name; ValueError with the known names (and a suggestion) if none."""
    entry = _backends.get(name)
    if entry is None:
        known = backend_names()
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown store backend {name!r}.{hint} Known backends: {', '.join(known)}")
    if isinstance(entry, str):
        module_name, _, attribute = entry.partition(":")
        factory: BackendFactory = getattr(importlib.import_module(module_name), attribute)
        _backends[name] = factory
        return factory
    return entry


def open_store(backend: str = "sqlite", *, clock: Clock | None = None, **options: Any) -> Store:
    """Construct a store by backend name; then ``await store.open()`` creates or migrates its schema.

        store = open_store("sqlite", path="data/minihermes.db", clock=clock)
        await store.open()
        ...
        await store.close()

    Construction validates the name and options but does no I/O, so a bad configuration fails at start-up
    before anything is touched. options are the backend's (sqlite: path or data_dir, synchronous, readers,
    busy_timeout; postgres: dsn or dsn_env, schema, password_file, pool sizes, TLS settings).
    """
    return get_backend(backend)(clock=clock, **options)
