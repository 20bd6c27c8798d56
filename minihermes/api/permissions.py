"""Who may call which op over HTTP: the permission model, re-exported from ``minihermes.permissions``.

The table and its helpers live below the api layer so that the agent's tools, the CLI and the dashboard use
the same model as the HTTP edge; this module keeps the names it always exported.
"""

from __future__ import annotations

from minihermes.permissions import (
    ACCESS_ROLES,
    DEFAULT_PERMISSIONS,
    DEFAULT_TABLE,
    MUTATING,
    ROLES,
    Access,
    PermissionTable,
    Role,
    effective_roles,
)

__all__ = [
    "ACCESS_ROLES",
    "DEFAULT_PERMISSIONS",
    "DEFAULT_TABLE",
    "MUTATING",
    "ROLES",
    "Access",
    "PermissionTable",
    "Role",
    "effective_roles",
]
