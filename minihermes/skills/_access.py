"""Who may see and change a skill, and the system identity the skill services act under."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from minihermes.runtime import PermissionDenied, current_context, reset_context, set_context

ADMIN_ROLES = frozenset({"admin", "system"})
WRITER_ROLES = ADMIN_ROLES | {"user"}


def is_admin() -> bool:
    return bool(current_context().roles & ADMIN_ROLES)


def require_admin(op: str) -> None:
    if not is_admin():
        raise PermissionDenied(f"{op} needs the admin role", op=op)


def require_writer(op: str) -> None:
    if not current_context().roles & WRITER_ROLES:
        raise PermissionDenied(f"{op}: a read-only role cannot change skills", op=op)


def acting_user(user_id: str = "") -> str:
    """The user a request speaks for: an admin or a service may name one; anybody else is themselves."""
    if user_id and is_admin():
        return user_id
    return current_context().principal


def can_see(record: dict[str, Any], user_id: str) -> bool:
    return bool(record["scope"] == "tenant" or record["owner"] == user_id)


def require_owner(op: str, record: dict[str, Any]) -> None:
    """Changing a skill: its owner (for a user's own skill) or an admin."""
    require_writer(op)
    if is_admin():
        return
    if record["scope"] == "tenant" or record["owner"] != current_context().principal:
        raise PermissionDenied(f"{op}: only the skill's owner or an admin may change it", op=op)


@contextlib.contextmanager
def as_system(principal: str) -> Iterator[None]:
    """Act in the current tenant with the system role (a skill service doing its own bookkeeping)."""
    ctx = current_context()
    token = set_context(replace(ctx, principal=principal, roles=frozenset({"system"})))
    try:
        yield
    finally:
        reset_context(token)
