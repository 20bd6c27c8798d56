"""The request context that travels with every message: who is asking, on behalf of which tenant.

The node sets it (a contextvar) before a handler runs, and every ask/send a handler makes carries it on, so a
chain of actor hops stays inside one tenant without any actor passing it by hand.
"""

from __future__ import annotations

import contextvars
import re
from dataclasses import dataclass, field, replace
from typing import Any

from ._errors import InvalidArgument

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")

SYSTEM_TENANT = "system"
DEFAULT_TENANT = "default"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Tenant, namespace and principal of one request. Immutable; derive a new one with ``replace``."""

    tenant: str = DEFAULT_TENANT
    namespace: str = DEFAULT_NAMESPACE
    principal: str = "local"
    roles: frozenset[str] = field(default_factory=lambda: frozenset({"admin"}))
    request_id: str = ""
    provenance: str = ""
    """Where content written for this request comes from, as the runtime stamps it (never a caller's or a
    model's argument): "" for a person's own request (stores record ``user``, or ``admin`` for an admin),
    ``agent`` for what the agent writes in a turn, ``tool:<name>`` when the turn saw untrusted content (the
    first such tool)."""
    untrusted: bool = False
    """Whether the request may carry content derived from untrusted output (a web page, a file, an MCP or
    tool result marked untrusted): what it writes is quarantined until its owner or an admin confirms it."""

    def __post_init__(self) -> None:
        for name in ("tenant", "namespace"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _NAME.fullmatch(value):
                raise InvalidArgument(
                    f"{name} must be 1-64 characters of letters, digits, '_', '.', '-'", field=name
                )

    @property
    def scope(self) -> tuple[str, str]:
        return (self.tenant, self.namespace)

    def stamped(self, provenance: str, untrusted: bool) -> RequestContext:
        """This context with ``provenance`` and ``untrusted`` set: ``self`` when it has them already, else
        ``replace``'s copy, the last one remembered (an agent stamps the same context for every tool call of
        a turn, and a copy checks its names again)."""
        if self.provenance == provenance and self.untrusted == untrusted:
            return self
        base, stamp, out = _last_stamp[0]  # one tuple, read and replaced whole: no torn entry
        if base is self and stamp == (provenance, untrusted):
            return out
        out = replace(self, provenance=provenance, untrusted=untrusted)
        _last_stamp[0] = (self, (provenance, untrusted), out)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "namespace": self.namespace,
            "principal": self.principal,
            "roles": sorted(self.roles),
            "request_id": self.request_id,
            **({"provenance": self.provenance} if self.provenance else {}),
            **({"untrusted": True} if self.untrusted else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestContext:
        return cls(
            tenant=str(data.get("tenant", DEFAULT_TENANT)),
            namespace=str(data.get("namespace", DEFAULT_NAMESPACE)),
            principal=str(data.get("principal", "local")),
            roles=frozenset(data.get("roles", ())),
            request_id=str(data.get("request_id", "")),
            provenance=str(data.get("provenance", "")),
            untrusted=bool(data.get("untrusted", False)),
        )


_last_stamp: list[tuple[RequestContext | None, tuple[str, bool], RequestContext]] = [
    (None, ("", False), RequestContext())
]
"""``RequestContext.stamped``'s last (context, (provenance, untrusted), copy); the context is held, so ``is``
cannot match another object at its address."""

SYSTEM_CONTEXT = RequestContext(tenant=SYSTEM_TENANT, principal="system", roles=frozenset({"system"}))

_LOCAL_OWNER = RequestContext()
_current: contextvars.ContextVar[RequestContext] = contextvars.ContextVar(
    "minihermes_request_context", default=_LOCAL_OWNER
)


def current_context() -> RequestContext:
    """The context of the message being handled (the local owner outside any message)."""
    return _current.get()


def set_context(ctx: RequestContext) -> contextvars.Token[RequestContext]:
    return _current.set(ctx)


def reset_context(token: contextvars.Token[RequestContext]) -> None:
    _current.reset(token)
