"""Who may act on what inside a tenant, for the work actors (kanban cards, cron jobs, goals).

The request context decides, never the body: a restricted caller (a user or a viewer: no ``admin``, no
``system`` role) acts as its own principal and changes only what it owns; admins and the runtime's own hops
(``system``) act on everything and may name another principal where an op takes one. The checks live in the
actors, so a user's agent turn (whose tool calls carry the user's context) gets exactly what the user gets.
"""

from __future__ import annotations

from typing import Any

from minihermes.context.redact import redact, redact_text
from minihermes.runtime import RequestContext, current_context

ADMIN_ROLES = frozenset({"admin", "system"})


def is_admin(ctx: RequestContext | None = None) -> bool:
    """An admin or the runtime itself: sees and changes every resource of the tenant."""
    return bool((ctx or current_context()).roles & ADMIN_ROLES)


def principal() -> str:
    return current_context().principal


def acting_principal(named: str = "") -> str:
    """Whom a request speaks for: an admin or the system may name a principal; anybody else is themselves."""
    if named and is_admin():
        return named
    return principal()


def scrub(text: str) -> str:
    """Free text before it is stored: recognisable secrets replaced, as in chat and memory."""
    return redact_text(text)


def scrub_value(value: Any) -> Any:
    """A JSON value before it is stored (strings scrubbed, secret-named keys' values dropped)."""
    return redact(value)


def system_context(ctx: RequestContext, principal_name: str) -> RequestContext:
    """The caller's tenant with the ``system`` role: a work actor doing its own bookkeeping."""
    return RequestContext(
        tenant=ctx.tenant, namespace=ctx.namespace, principal=principal_name, roles=frozenset({"system"})
    )
