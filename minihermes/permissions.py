"""The permission model: who may do what inside a tenant. One model for every way in.

Roles: ``admin`` (everything, including policies, credentials, providers and tools), ``user`` (chat, their own
sessions and memories, reading tools and stats), ``viewer`` (read-only ops). Every ``(actor, op)`` has an
access class; a class names the roles allowed to call it:

- ``read``: viewer, user, admin. Ops that change nothing (actors narrow what a user sees to what they own).
- ``write``: user, admin. Ops that change the caller's own data (sessions, memories, chat).
- ``observe``: viewer, admin. Tenant-wide views that end users do not get (dead letters of other users' tasks).
- ``admin``: admin only. Configuration, credentials, providers, tools, policies, and every internal op.

An op declares its class on its decorator (``@call(access="read")``); ``DEFAULT_TABLE`` holds the
classes of ops that do not declare one, and overrides (an entry wins over the handler's declaration). An op
that declares nothing and is not in the table is admin-only, so a new op is closed until someone classifies
it. ``PermissionTable.with_declared`` (or ``for_node``) merges the declarations of a node's actors under the
table, once, when an edge builds its view: the result is what every way in enforces, documented in
docs/http-api.md (a test keeps the two in sync).

The same table serves every way in: the HTTP edge (``minihermes.api``), the agent's tool calls (the tool
executor checks each call with the turn's context: a user's turn can do nothing the user cannot do
directly), and the CLI's embedded mode. ``system`` is the runtime's own role for its internal hops; no
credential can grant it (``effective_roles`` drops it), and it passes every check here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, Protocol

from minihermes.runtime import DEFAULT_TENANT, Actor, PermissionDenied, RequestContext

Role = Literal["admin", "user", "viewer"]
ROLES: Final[tuple[str, ...]] = ("admin", "user", "viewer")
"""The roles a token or API key can grant. Anything else in a credential is ignored (``system`` included)."""

Access = Literal["read", "write", "observe", "admin"]
ACCESS_ROLES: Final[Mapping[str, frozenset[str]]] = {
    "read": frozenset({"viewer", "user", "admin"}),
    "write": frozenset({"user", "admin"}),
    "observe": frozenset({"viewer", "admin"}),
    "admin": frozenset({"admin"}),
}
MUTATING: Final[frozenset[str]] = frozenset({"write", "admin"})
"""Access classes whose ops may change state (a viewer can call none of them)."""

DEFAULT_ACCESS: Final[Access] = "admin"

DEFAULT_TABLE: Final[Mapping[tuple[str, str], Access]] = {
    # The classes of ops that do not declare their own (``@call(access=...)``), and overrides of those that
    # do. Every actor of the agent app declares its ops on their handlers (tests/api/test_declared_access.py
    # pins the effective table); what is left here is what a handler cannot say for itself.
    # audit_event: the GenEvent behavior's own ops (the actor declares the others)
    ("audit_event", "subscribe"): "admin",
    ("audit_event", "unsubscribe"): "admin",
}


class PermissionTable:
    """``(actor, op) -> access class``; unknown pairs get ``default`` (admin-only)."""

    def __init__(
        self, entries: Mapping[tuple[str, str], str] | None = None, *, default: str = DEFAULT_ACCESS
    ) -> None:
        table = dict(DEFAULT_TABLE if entries is None else entries)
        for key, access in [*table.items(), (("*", "*"), default)]:
            if access not in ACCESS_ROLES:
                raise ValueError(
                    f"permission for {key}: unknown access class {access!r} (known: {list(ACCESS_ROLES)})"
                )
        self._table: dict[tuple[str, str], str] = table
        self.default = default

    def extended(self, entries: Mapping[tuple[str, str], str]) -> PermissionTable:
        """A copy with more (or overriding) entries: how an app classifies its own actors' ops."""
        return PermissionTable({**self._table, **entries}, default=self.default)

    def with_declared(self, actors: Mapping[str, type[Actor]]) -> PermissionTable:
        """The effective table for actors run under these names: each op's declared access class
        (``@call(access=...)``), overridden by this table's entries. Built once per node by each way in
        (the HTTP catalog, the tool executor, the CLI), never per message; a declared class that is not
        one of ``ACCESS_ROLES`` raises ``ValueError`` here, at start-up."""
        declared: dict[tuple[str, str], str] = {}
        for name, cls in actors.items():
            for op, info in cls.ops().items():
                if info.access is not None:
                    declared[(name, op)] = info.access
        return PermissionTable({**declared, **self._table}, default=self.default)

    def for_node(self, node: NodeActors) -> PermissionTable:
        """``with_declared`` for every actor type ``node`` runs."""
        return self.with_declared({name: node.spec(name).cls for name in node.actor_names()})

    def access(self, actor: str, op: str) -> str:
        return self._table.get((actor, op), self.default)

    def roles_for(self, actor: str, op: str) -> frozenset[str]:
        return ACCESS_ROLES[self.access(actor, op)]

    def allows(self, roles: Iterable[str], actor: str, op: str) -> bool:
        return not self.roles_for(actor, op).isdisjoint(roles)

    def is_mutating(self, actor: str, op: str) -> bool:
        return self.access(actor, op) in MUTATING

    def entries(self) -> dict[tuple[str, str], str]:
        return dict(self._table)


DEFAULT_PERMISSIONS: Final = PermissionTable()
"""The table alone (undeclared ops and overrides). What a node enforces is ``DEFAULT_PERMISSIONS.for_node(node)``."""


class NodeActors(Protocol):
    """What ``PermissionTable.for_node`` reads of a node (``minihermes.runtime.Node`` has it)."""

    def actor_names(self) -> list[str]: ...

    def spec(self, name: str) -> Any: ...


def effective_roles(roles: Iterable[str]) -> frozenset[str]:
    """The roles of a credential that mean something here (``system`` and unknown names dropped)."""
    return frozenset(r for r in roles if r in ROLES)


SYSTEM_ROLE: Final = "system"
"""The runtime's own role (timers, workflows): never granted by a credential, allowed everything."""
ADMIN_ROLES: Final[frozenset[str]] = frozenset({"admin", SYSTEM_ROLE})
WRITER_ROLES: Final[frozenset[str]] = ADMIN_ROLES | {"user"}
OWNER_ROLES: Final[frozenset[str]] = frozenset({"admin"})
"""The roles of the local owner: an embedding program or the CLI on its own data dir (one person)."""


def is_admin(ctx: RequestContext) -> bool:
    """An admin of the tenant (or the runtime itself)."""
    return not ctx.roles.isdisjoint(ADMIN_ROLES)


def provenance(ctx: RequestContext) -> tuple[str, bool]:
    """``(provenance, derived_from_untrusted)`` of what ``ctx`` writes, as the runtime stamped it on the
    request (``RequestContext.provenance``/``untrusted``): a person's own request is ``user`` (``admin`` for
    an admin or the runtime), a turn's write is ``agent`` or ``tool:<name>``. No argument can set either."""
    return ctx.provenance or ("admin" if is_admin(ctx) else "user"), ctx.untrusted


def is_writer(ctx: RequestContext) -> bool:
    """May change things at all (a viewer may not)."""
    return not ctx.roles.isdisjoint(WRITER_ROLES)


def restricted(ctx: RequestContext) -> bool:
    """An end user: role user without admin. They act only as themselves and on what they own."""
    return "user" in ctx.roles and not is_admin(ctx)


def sees_own_only(ctx: RequestContext) -> bool:
    """Every caller who is neither an admin nor the runtime (users and viewers): of other principals'
    sessions, transcripts and private data they see nothing. Viewers own nothing, so they see only what is
    shared in the tenant (and the operator views their access class grants, such as the audit trail and
    pending approvals). With ``restricted`` (users only), the two rules every ownership check uses."""
    return ctx.roles.isdisjoint(ADMIN_ROLES)


def may_access(ctx: RequestContext, access: str) -> bool:
    """Whether ``ctx`` holds a role of the access class ``access`` (``system`` holds every class)."""
    if SYSTEM_ROLE in ctx.roles:
        return True
    return not ACCESS_ROLES[access].isdisjoint(ctx.roles)


def may(ctx: RequestContext, actor: str, op: str, table: PermissionTable = DEFAULT_PERMISSIONS) -> bool:
    """Whether ``ctx`` may call ``actor.op``: exactly the HTTP edge's rule (``system`` may do anything).
    Pass the node's effective table (``DEFAULT_PERMISSIONS.for_node(node)``): the default one knows only the
    ops the table lists, not what handlers declare."""
    return may_access(ctx, table.access(actor, op))


def require(ctx: RequestContext, actor: str, op: str, table: PermissionTable = DEFAULT_PERMISSIONS) -> None:
    """Raise ``PermissionDenied`` (naming the access class and the roles it needs) unless ``may``."""
    if may(ctx, actor, op, table):
        return
    access = table.access(actor, op)
    have = ", ".join(sorted(ctx.roles)) or "no role"
    raise PermissionDenied(
        f"{have} cannot call {actor}.{op} (access '{access}': {', '.join(sorted(ACCESS_ROLES[access]))})",
        actor=actor,
        op=op,
        access=access,
        required=sorted(ACCESS_ROLES[access]),
    )


def owner_context(tenant: str = DEFAULT_TENANT, principal: str = "local") -> RequestContext:
    """The context of the local owner (an embedding program, the CLI on a data dir): an admin."""
    return RequestContext(tenant=tenant, principal=principal, roles=OWNER_ROLES)


__all__ = [
    "ACCESS_ROLES",
    "ADMIN_ROLES",
    "DEFAULT_PERMISSIONS",
    "DEFAULT_TABLE",
    "MUTATING",
    "OWNER_ROLES",
    "ROLES",
    "SYSTEM_ROLE",
    "WRITER_ROLES",
    "Access",
    "NodeActors",
    "PermissionTable",
    "Role",
    "effective_roles",
    "is_admin",
    "is_writer",
    "may",
    "may_access",
    "owner_context",
    "provenance",
    "require",
    "restricted",
    "sees_own_only",
]
