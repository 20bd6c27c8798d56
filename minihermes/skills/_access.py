"""Who may see and change a skill or a self-written tool (``minihermes.permissions`` decides the roles).

Skills and tools act with the caller's roles. A user's own skill or tool belongs to them until an admin
promotes it to the tenant. The one exception is ``as_service``: see its docstring.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from minihermes import permissions
from minihermes.runtime import PermissionDenied, current_context, reset_context, set_context


def is_admin() -> bool:
    return permissions.is_admin(current_context())


def require_admin(op: str) -> None:
    if not is_admin():
        raise PermissionDenied(f"{op} needs the admin role", op=op)


def require_writer(op: str) -> None:
    if not permissions.is_writer(current_context()):
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


# -- self-written tools --------------------------------------------------------------------------------------


def tool_owner(record: dict[str, Any]) -> str:
    return str(record.get("owner") or record.get("created_by") or "")


def tool_promoted(record: dict[str, Any]) -> bool:
    """A tenant tool: promoted by an admin, written in an admin's turn, or stored before tools had owners
    (those were registered for the whole tenant then, and stay so)."""
    return bool(record.get("promoted", "owner" not in record))


def can_use_tool(record: dict[str, Any]) -> bool:
    """See and run: a tenant tool, or one's own. Admins see every tool (to review it before promoting)."""
    return tool_promoted(record) or is_admin() or tool_owner(record) == current_context().principal


def require_tool_owner(op: str, record: dict[str, Any]) -> None:
    """Change (a new version, a rollback): the owner of an unpromoted tool, or an admin."""
    require_writer(op)
    if is_admin():
        return
    if tool_promoted(record):
        raise PermissionDenied(
            f"{op}: '{record['name']}' is a tenant tool; only an admin may change it", op=op, field="name"
        )
    if tool_owner(record) != current_context().principal:
        raise PermissionDenied(
            f"{op}: '{record['name']}' belongs to another user; pick another name", op=op, field="name"
        )


@contextlib.contextmanager
def as_service(principal: str) -> Iterator[None]:
    """Act in the current tenant with the ``system`` role, as the skill service ``principal``.

    Only for the skill services' own bookkeeping, never on a caller's behalf: the curator's schedule (a
    timer, not a request: it lists every skill and moves idle ones to stale) and the learning workflow's
    propose/evaluate steps (the verdict is the runtime's replay, which a user must not be able to give their
    own skill). Both call fixed ops with data they computed; neither passes a caller's request on.
    """
    ctx = current_context()
    token = set_context(replace(ctx, principal=principal, roles=frozenset({permissions.SYSTEM_ROLE})))
    try:
        yield
    finally:
        reset_context(token)
