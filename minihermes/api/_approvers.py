"""Who could decide on a paused tool call, as this edge knows it (docs/security.md, Approvals).

Guardrails let an admin decide on their own paused call when nobody else could (``guardrails.set_approvers``);
only the edge, which checks the credentials, can say who the tenant's admins are:

- **API keys only**: every admin holds an admin key, so a scope's admins are the principals of its valid
  (not revoked) admin keys, each with the time its last one expires. Reported the first time this process
  serves the scope (which covers keys made with ``minihermes keys create`` while the node was down) and after
  each key created or revoked here.
- **JWTs** (alone or beside keys), and **no auth**: not known here (an identity provider mints admins this
  edge never sees; without auth the node is one owner's, ``single_owner``). Reported as ``None``, so a list
  left from an earlier keys-only run never outlives the configuration that made it.

Costs one ask per scope per process, not per request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from minihermes.runtime import ActorError
from minihermes.runtime.store import Scope

from ._keys import list_api_keys

if TYPE_CHECKING:
    from ._core import ApiState  # which calls this module: imported for the type only

log = logging.getLogger("minihermes.api")

GUARDRAILS = "guardrails"
OP = "set_approvers"
_REPORTED = "approvers_reported"


def keys_only(state: ApiState) -> bool:
    """Every principal of this edge holds an API key: keys are accepted and no JWT is."""
    config = state.auth.config
    return bool(config and config.api_keys and not (config.jwt_secret or config.jwt_public_key))


async def scope_admins(state: ApiState, scope: Scope) -> dict[str, float | None]:
    """The principals of the scope's valid admin keys -> when their last admin key expires (None: never)."""
    now = state.node.clock.time()
    admins: dict[str, float | None] = {}
    for info in await list_api_keys(state.node.store, tenant=scope[0], include_revoked=False):
        if info.namespace != scope[1] or "admin" not in info.roles or not info.active(now):
            continue
        known = admins.get(info.principal, 0.0)
        admins[info.principal] = (
            None if known is None or info.expires_at is None else max(known, info.expires_at)
        )
    return admins


async def report_admins(state: ApiState, scope: Scope, *, changed: bool = False) -> None:
    """Tell the scope's guardrails who its admins are: once per process and scope, or again when ``changed``
    (a key was created or revoked). Never fails the request that triggers it."""
    guardrails = state.catalog.get(GUARDRAILS)
    if guardrails is None or OP not in guardrails.ops:
        return
    reported: set[Scope] = state.extras.setdefault(_REPORTED, set())
    if scope in reported and not changed:
        return
    reported.add(scope)  # before the awaits: concurrent first requests of a scope report once
    admins = await scope_admins(state, scope) if keys_only(state) else None
    try:
        await state.node.ask(
            GUARDRAILS,
            OP,
            {"admins": admins},
            state.default_timeout,
            ctx=state.node.system_context_for(scope),
        )
    except ActorError as e:
        reported.discard(scope)  # tried again with the scope's next request
        log.warning("the admins of %s/%s were not reported to guardrails: %s", *scope, e.message)
