"""The HTTP layer's records (one actor per tenant): what the API keeps between requests, kept where
forgetting reaches it.

The OpenAI-compatible ``/v1`` endpoints (``minihermes.api``, docs/openai-api.md) and ``Idempotency-Key``
requests (``/v1`` and ``/api/v1``'s session messages) keep, per tenant:

- ``resp:<id>``: a stored response (the user's input and the answer; ``owner``, ``session_id``);
- ``sess:<session id>``: what ``/v1`` knows of one of its sessions (latest response, a paused answer;
  ``owner``);
- ``fp:<principal>:<hash>`` and ``conv:<principal>:<hash>``: the session a client's history fingerprint or
  conversation name leads to;
- ``idem:<principal>:<hash>``: an ``Idempotency-Key`` claim, with the request's input and its outcome.

``<principal>`` and ``owner`` are ``principal_part``: a hash of the caller's namespace and principal. The
records live in this actor type's private KV (no credential and no other actor names it); the HTTP layer reads
and writes them through ``get``, ``put``, ``cas`` and ``delete`` (admin-only over HTTP: they are the HTTP
layer's own, it sends them as the request's caller and checks ownership itself).

Forgetting (``forget_subject``, asked by ``memory.forget``): a session's records (its ``sess:`` record, the
responses and claims made in it, the fingerprints and conversation names that lead to it; a user takes only
those that are theirs), a user's (every record keyed by or owned by them, and the ``sess:`` records of their
sessions), or (admin) the tenant's: all of them. ``cleared: {api_records}``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from minihermes.context import forget as forgetting
from minihermes.runtime import ActorArgs, GenServer, InvalidArgument, RequestContext, call, current_context

ACTOR = "api_records"
"""The actor's name in the app's config."""
MAX_KEY = 300
_KINDS = ("resp", "sess", "fp", "conv", "idem")
_KEYED = ("fp", "conv", "idem")
"""Kinds whose key names the principal (``<kind>:<principal>:...``)."""


def principal_part(ctx: RequestContext, principal: str | None = None) -> str:
    """A bounded, printable stand-in for (namespace, principal) in record keys and ``owner`` fields."""
    who = ctx.principal if principal is None else principal
    return hashlib.sha256(f"{ctx.namespace}\x00{who}".encode()).hexdigest()[:32]


def _check_key(op: str, key: Any) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY or key.partition(":")[0] not in _KINDS:
        raise InvalidArgument(
            f"{op}: key must be '<kind>:...' ({', '.join(_KINDS)}), at most {MAX_KEY} characters",
            op=op,
            field="key",
        )
    return key


def _check_ttl(op: str, ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        raise InvalidArgument(f"{op}: ttl must be a number of seconds > 0", op=op, field="ttl")
    return float(ttl)


def owner_of(key: str, value: Any) -> str:
    """The ``principal_part`` a record belongs to ("" when it does not say)."""
    kind, _, rest = key.partition(":")
    if kind in _KEYED:
        return rest.partition(":")[0]
    return str(value.get("owner") or "") if isinstance(value, dict) else ""


def session_of(key: str, value: Any) -> str:
    """The session a record is about or leads to ("" when none)."""
    kind, _, rest = key.partition(":")
    if kind == "sess":
        return rest
    if isinstance(value, str):
        return value
    return str(value.get("session_id") or "") if isinstance(value, dict) else ""


class ApiRecords(GenServer):
    """The HTTP layer's records of a tenant (see the module)."""

    class Args(ActorArgs):
        """It takes none: how long records live is the caller's (``ttl``) and the HTTP config's."""

    @call(access="admin")
    async def get(self, key: str) -> dict[str, Any]:
        """``{value, version}`` of a record (both None when absent or expired)."""
        entry = await self.host.private_kv.get_entry(_check_key("get", key))
        if entry is None:
            return {"value": None, "version": None}
        return {"value": entry.value, "version": entry.version}

    @call(access="admin")
    async def put(self, key: str, value: Any, ttl: float | None = None) -> dict[str, Any]:
        version = await self.host.private_kv.put(_check_key("put", key), value, _check_ttl("put", ttl))
        return {"version": version}

    @call(access="admin")
    async def cas(
        self, key: str, expected_version: int | None, value: Any, ttl: float | None = None
    ) -> dict[str, Any]:
        """Write ``value`` if the record's version is ``expected_version`` (None: if absent); ``version``:
        the new one, None when the record had changed."""
        if expected_version is not None and (
            isinstance(expected_version, bool) or not isinstance(expected_version, int)
        ):
            raise InvalidArgument(
                "cas: expected_version must be an integer or null", op="cas", field="expected_version"
            )
        version = await self.host.private_kv.cas(
            _check_key("cas", key), expected_version, value, _check_ttl("cas", ttl)
        )
        return {"version": version}

    @call(access="admin")
    async def delete(self, key: str) -> dict[str, Any]:
        return {"deleted": await self.host.private_kv.delete(_check_key("delete", key))}

    @call(access="write")
    async def forget_subject(
        self, user_id: str = "", session_id: str = "", tenant: bool = False
    ) -> dict[str, Any]:
        """Delete a session's, a user's or (admin) the tenant's HTTP records, as far as the caller may (see
        the module): ``cleared: {api_records}``."""
        who = forgetting.subject("forget_subject", user_id=user_id, session_id=session_id, tenant=tenant)
        ctx = current_context()
        rows = await self.host.private_kv.list("")
        if who.tenant:
            doomed = [key for key, _ in rows]
        elif who.session_id:
            doomed = await self._of_session(rows, who.session_id, ctx)
        else:
            mine = principal_part(ctx, who.user_id)
            owned = [(k, v) for k, v in rows if owner_of(k, v) == mine]
            sessions = {session_of(k, v) for k, v in owned} | await forgetting.subject_sessions(
                self.host, who
            )
            sessions.discard("")
            doomed = [
                k for k, v in rows if owner_of(k, v) == mine or (k.startswith("sess:") and k[5:] in sessions)
            ]
        for key in doomed:
            await self.host.private_kv.delete(key)
        return {"status": "ok", "cleared": {"api_records": len(doomed)}}

    async def _of_session(
        self, rows: list[tuple[str, Any]], session_id: str, ctx: RequestContext
    ) -> list[str]:
        """The records of one session the caller may forget: all of them for an admin, else those that are
        theirs (a ``sess:`` record without an owner: if the session is theirs)."""
        found = [(k, v) for k, v in rows if session_of(k, v) == session_id]
        if forgetting.is_admin(ctx):
            return [k for k, _ in found]
        mine = principal_part(ctx)
        theirs = await forgetting.session_owner(self.host, session_id) == ctx.principal
        return [k for k, v in found if owner_of(k, v) == mine or (not owner_of(k, v) and theirs)]


__all__ = ["ACTOR", "ApiRecords", "principal_part"]
