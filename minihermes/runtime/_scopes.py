"""The runtime's own scopes (tenant, namespace)."""

from __future__ import annotations

from ._context import SYSTEM_TENANT
from .store import Scope

SYSTEM_SCOPE: Scope = (SYSTEM_TENANT, "default")
"""Where shared singletons live; groups and registry entries in it are visible from every scope."""
RUNTIME_SCOPE: Scope = (SYSTEM_TENANT, "__runtime__")
"""The runtime's bookkeeping in the store (durable-active marks, incidents)."""
