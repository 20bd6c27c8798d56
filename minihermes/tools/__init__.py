"""The tool contract, the built-in tools and the boundary for untrusted code.

- ``contract``: a ``Tool`` (name, description, input schema, effects, trust, review, permission, toolset,
  handler, and the facts the catalogue, the executor and a turn's toolset selection read: ``offered``,
  ``effects_of``, ``inline``, ``timeout``), the ``ToolEnv`` a handler gets (with the calling turn's
  ``TurnInfo``) and the ``ToolFailure`` it raises.
- ``catalog``: ``Toolset`` (a named group of tools), the ``Catalog`` one tool executor runs, runtime
  registrations (``service_link``, ``python``, a built-in tool with pinned input).
- ``builtin``: the core toolsets (``compute``, ``memory``, ``web``, ``files``, ``terminal``).
- ``local``: plain Python functions an embedding program registers as tools.
- ``sandbox``: run commands and Python in an isolated child process (``run_sandboxed``, ``run_python``,
  ``isolation_report``); ``python_call``: call ``run(input) -> dict`` in an untrusted module through it.
- ``calculator``: arithmetic without eval, safe in-process.
- ``workspace``: file tools confined to a session's workspace folder.

The contract's names are importable from here (``from minihermes.tools import Tool, Toolset``), loaded on
first use so that importing ``minihermes.tools.sandbox`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .builtin import CORE_TOOLSETS
    from .catalog import Catalog, ToolDef, Toolset
    from .contract import (
        CORE,
        MUTATING,
        ON_REQUEST,
        READ,
        TRUSTED,
        UNTRUSTED,
        ExecutorEnv,
        Tool,
        ToolEnv,
        ToolFailure,
        TurnInfo,
        UntrustedResult,
    )

_LAZY = {
    "CORE_TOOLSETS": "builtin",
    "Catalog": "catalog",
    "ToolDef": "catalog",
    "Toolset": "catalog",
    "CORE": "contract",
    "MUTATING": "contract",
    "ON_REQUEST": "contract",
    "READ": "contract",
    "TRUSTED": "contract",
    "UNTRUSTED": "contract",
    "ExecutorEnv": "contract",
    "Tool": "contract",
    "ToolEnv": "contract",
    "ToolFailure": "contract",
    "TurnInfo": "contract",
    "UntrustedResult": "contract",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'minihermes.tools' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "CORE",
    "CORE_TOOLSETS",
    "MUTATING",
    "ON_REQUEST",
    "READ",
    "TRUSTED",
    "UNTRUSTED",
    "Catalog",
    "ExecutorEnv",
    "Tool",
    "ToolDef",
    "ToolEnv",
    "ToolFailure",
    "Toolset",
    "TurnInfo",
    "UntrustedResult",
]
