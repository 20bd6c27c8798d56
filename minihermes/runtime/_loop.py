"""Which event loop a MiniHermes process runs on.

``run(main)`` is ``asyncio.run`` on uvloop where it is installed (a dependency on Linux and macOS): the
runtime's hot path is message hops between tasks, and libuv's loop does a loop pass, a ``call_soon`` and a
cross-thread wake-up (every SQLite commit) for a fraction of the CPU of asyncio's pure-Python loop.
``MINIHERMES_EVENT_LOOP`` chooses: ``auto`` (default: uvloop if importable), ``uvloop`` (required) or
``asyncio``. Embedding programs keep whatever loop they run: nothing here is global.
"""

from __future__ import annotations

import asyncio
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


def loop_name(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """``uvloop`` or ``asyncio``: what the running (or given) loop is, for logs and benchmark reports."""
    loop = loop or asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], *, choice: str | None = None) -> T:
    """``asyncio.run(main)`` on the loop ``MINIHERMES_EVENT_LOOP`` (or ``choice``) selects."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)
