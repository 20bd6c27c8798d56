"""Which event loop a MiniHermes process runs on.

``run(main)`` is ``asyncio.run`` on uvloop where it is installed (a dependency on Linux and macOS): the
runtime's hot path is message hops between tasks, and libuv's loop does a loop pass, a ``call_soon`` and a
cross-thread wake-up (every SQLite commit) for a fraction of the CPU of asyncio's pure-Python loop.
``MINIHERMES_EVENT_LOOP`` chooses: ``auto`` (default: uvloop if importable), ``uvloop`` (required) or
``asyncio``. Embedding programs keep whatever loop they run: nothing here is global.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ._errors import ConfigError

T = TypeVar("T")
ENV = "MINIHERMES_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


def loop_factory(choice: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``asyncio.Runner`` (None: asyncio's default loop)."""
    choice = (choice if choice is not None else os.environ.get(ENV, "auto")).strip().lower() or "auto"
    if choice not in CHOICES:
        raise ConfigError(ENV, f"must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(ENV, "uvloop is selected but not installed") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


GC_ENV = "MINIHERMES_GC"
GC_THRESHOLDS = (20_000, 50, 100)
"""Generation thresholds for a server process: a turn allocates tens of thousands of short-lived objects
(messages, futures, dicts), nearly all freed by reference counting; asyncio's default gen-0 threshold (700)
ran a collection every few messages, each scanning everything young."""


def tune_gc() -> str:
    """Process-wide collector settings for ``serve`` and ``chat`` (not for embedding programs, whose process
    this is not). Call once the node has started: ``gc.freeze()`` moves everything built at start-up (the
    actor tree, imported modules, config) out of the collector's sight for good, and the thresholds make
    young collections rarer. ``MINIHERMES_GC=default`` leaves Python's settings alone. Returns what it did."""
    if os.environ.get(GC_ENV, "").strip().lower() == "default":
        return "default"
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return "frozen start-up objects, thresholds " + "/".join(map(str, GC_THRESHOLDS))


def loop_name(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """``uvloop`` or ``asyncio``: what the running (or given) loop is, for logs and benchmark reports."""
    loop = loop or asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], *, choice: str | None = None) -> T:
    """``asyncio.run(main)`` on the loop ``MINIHERMES_EVENT_LOOP`` (or ``choice``) selects."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)
