"""``platform_gateway``: the tenant's connected messaging platforms, its pairings and its linked users.

One instance per tenant owns the registry (``register_platform`` ... ``remove_platform``) and the identity
map: which platform user speaks as which MiniHermes principal, with which roles. Each connection runs in its
own ``platform_adapter`` actor (keyed by the connection's name): a crashing adapter restarts alone.

Closed by default: a sender nobody linked gets one pairing code per window (``__identify``) and nothing else,
no model call; with ``allowed_users`` set, a sender not on the list gets nothing at all. An admin approves the
code (``approve_pairing``) or links a user directly (``link_user``): from then on the adapter runs that
user's turns as the linked principal with the stored roles, never as ``system``.

Credentials: ``credential`` names a secret registered with ``llm_gateway.register_credential``. This actor
keeps only the name; the adapter resolves it through ``llm_gateway.__resolve_credential`` (system only, in no
HTTP catalog) when it connects. Pairing and linking are audited.
"""

from __future__ import annotations

import re
import secrets
from typing import Any
from urllib.parse import quote, unquote

from minihermes.credentials import check_phantom_token
from minihermes.permissions import ROLES
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    Conflict,
    GenServer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RequestContext,
    call,
    current_context,
    reset_context,
    set_context,
    state,
)

from ._adapter import check_kind

ADAPTER = "platform_adapter"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,47}$")
_USER = re.compile(r"^[^\x00-\x1f\x7f]{1,128}$")
_CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
MAX_ALLOWED_USERS = 1000
MAX_SETTINGS_BYTES = 4096


class RateLimit(ActorArgs):
    """A per-user token bucket: ``burst`` messages at once, refilled at ``per_minute``."""

    per_minute: float = 20.0
    burst: int = 5


class PlatformGateway(GenServer):
    """Register, pause and remove messaging platform connections; pair and link their users."""

    class Args(ActorArgs):
        pairing_window: float = 3600.0
        """Seconds during which an unknown sender gets no second pairing code."""

    platforms: dict[str, dict[str, Any]] = state(default_factory=dict)
    pairings: dict[str, dict[str, Any]] = state(default_factory=dict)
    """Pending pairing code -> {name, platform_user_id, chat, display_name, created_at}."""
    links: dict[str, dict[str, Any]] = state(default_factory=dict)
    """``<name>/<platform_user_id>`` -> {user_id, roles, linked_at, linked_by}."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        self.pairing_window = float(args.get("pairing_window", 3600.0))

    # -- the registry ---------------------------------------------------------------------------------------

    @call(access="admin")
    async def register_platform(
        self,
        platform: str,
        name: str,
        credential: str,
        base_url: str = "",
        allowed_users: list[str] | None = None,
        rate_limit: dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Connect a platform: ``credential`` is a phantom token from ``llm_gateway.register_credential``
        (the bot token or signing secret); the connection starts at once. Reply: ``{name, status}``."""
        check_kind(platform)
        if not _NAME.fullmatch(name):
            raise InvalidArgument("name must be 1-48 of a-z, 0-9, '_', '-' (starting with a letter or digit)")
        if name in self.platforms:
            raise Conflict(f"platform {name!r} is registered; remove it first", name=name)
        check_phantom_token(credential, field="credential")
        if base_url and not re.match(r"^https?://[^\s]+$", base_url):
            raise InvalidArgument("base_url must be an http(s) URL", field="base_url")
        users = [str(u) for u in allowed_users or []]
        if len(users) > MAX_ALLOWED_USERS or not all(_USER.fullmatch(u) for u in users):
            raise InvalidArgument(
                f"allowed_users: at most {MAX_ALLOWED_USERS} ids of 1-128 printable characters",
                field="allowed_users",
            )
        try:
            limit = RateLimit(**(rate_limit or {}))
        except ValueError as e:
            raise InvalidArgument(f"rate_limit: {e}", field="rate_limit") from None
        if settings is not None and len(repr(settings)) > MAX_SETTINGS_BYTES:
            raise InvalidArgument(f"settings must be at most {MAX_SETTINGS_BYTES} bytes", field="settings")
        await self._check_credential(credential)
        self.platforms[name] = {
            "platform": platform,
            "name": name,
            "credential": credential,
            "base_url": base_url,
            "allowed_users": users,
            "rate_limit": limit.model_dump(),
            "settings": dict(settings or {}),
            "status": "running",
            "created_at": self.host.now(),
        }
        self._audit("platform_registered", f"platform {name} ({platform}) registered", {"name": name})
        self.host.send(ADAPTER, "__start", {"name": name})
        return {"name": name, "status": "running"}

    @call(access="observe")
    def list_platforms(self) -> dict[str, Any]:
        """Every connection with its status (never its credential's value)."""
        return {"platforms": [_public(p) for p in self.platforms.values()]}

    @call(access="observe")
    async def get_platform(self, name: str) -> dict[str, Any]:
        """One connection: status, last error and counters (messages in/out, refused, duplicates, errors)."""
        record = self._known(name)
        try:
            live = await self.host.ask(ADAPTER, "__stats", {"name": name}, timeout=5)
        except ActorError as e:
            live = {"state": "unknown", "last_error": e.code}
        live.pop("status", None)
        return {**_public(record), **live}

    @call(access="admin")
    async def pause_platform(self, name: str) -> dict[str, Any]:
        """Stop taking and sending messages; what is accepted waits in the inbox and outbox."""
        record = self._known(name)
        record["status"] = "paused"
        await self.host.ask(ADAPTER, "__stop", {"name": name})
        return {"name": name, "status": "paused"}

    @call(access="admin")
    async def resume_platform(self, name: str) -> dict[str, Any]:
        record = self._known(name)
        record["status"] = "running"
        self.host.send(ADAPTER, "__start", {"name": name})
        return {"name": name, "status": "running"}

    @call(access="admin")
    async def remove_platform(self, name: str) -> dict[str, Any]:
        """Disconnect and forget the connection, its pending pairings and its links."""
        self._known(name)
        await self.host.ask(ADAPTER, "__stop", {"name": name})
        del self.platforms[name]
        self.pairings = {c: p for c, p in self.pairings.items() if p["name"] != name}
        self.links = {k: v for k, v in self.links.items() if not k.startswith(f"{name}/")}
        self._audit("platform_removed", f"platform {name} removed", {"name": name})
        return {"status": "ok", "name": name, "removed": True}

    # -- pairing and linking --------------------------------------------------------------------------------

    @call(access="admin")
    def list_pairings(self, name: str = "") -> dict[str, Any]:
        """Pending pairing codes (of one connection), and the linked users."""
        if name:
            self._known(name)
        pending = [{"code": c, **p} for c, p in self.pairings.items() if not name or p["name"] == name]
        linked = [
            {"name": k.split("/", 1)[0], "platform_user_id": unquote(k.split("/", 1)[1]), **v}
            for k, v in self.links.items()
            if not name or k.startswith(f"{name}/")
        ]
        return {"status": "ok", "pairings": pending, "linked": linked}

    @call(access="admin")
    def approve_pairing(self, code: str, user_id: str = "", roles: list[str] | None = None) -> dict[str, Any]:
        """Link the sender of a pairing code to ``user_id`` (default ``<name>:<platform_user_id>``) with
        ``roles`` (default ``["user"]``)."""
        pairing = self.pairings.pop(code.strip().upper(), None)
        if pairing is None:
            raise NotFound("no pending pairing with this code", field="code")
        self._known(pairing["name"])
        principal = user_id or f"{pairing['name']}:{pairing['platform_user_id']}"
        return self._link(pairing["name"], pairing["platform_user_id"], principal, roles, "pairing_approved")

    @call(access="admin")
    def revoke_pairing(self, name: str, platform_user_id: str) -> dict[str, Any]:
        """Unlink a platform user (and drop their pending code): their next message is a stranger's."""
        self._known(name)
        removed = self.links.pop(_link_key(name, platform_user_id), None)
        self.pairings = {
            c: p
            for c, p in self.pairings.items()
            if not (p["name"] == name and p["platform_user_id"] == platform_user_id)
        }
        self._audit(
            "pairing_revoked",
            f"{name} user {platform_user_id} unlinked",
            {"name": name, "platform_user_id": platform_user_id, "was_linked": removed is not None},
        )
        return {"status": "ok", "revoked": removed is not None}

    @call(access="admin")
    def link_user(
        self, name: str, platform_user_id: str, user_id: str, roles: list[str] | None = None
    ) -> dict[str, Any]:
        """Link a platform user to a principal without a pairing code."""
        self._known(name)
        return self._link(name, platform_user_id, user_id, roles, "user_linked")

    # -- for the adapters (system only) ---------------------------------------------------------------------

    @call(name="__connection")
    def connection(self, name: str) -> dict[str, Any]:
        """A connection's registration for its adapter (the credential by name only)."""
        _system_only()
        record = self.platforms.get(name)
        if record is None:
            return {"status": "ok", "found": False}
        return {"status": "ok", "found": True, "record": dict(record)}

    @call(name="__identify")
    def identify(
        self, name: str, platform_user_id: str, chat: str = "", display_name: str = ""
    ) -> dict[str, Any]:
        """Whom a sender speaks as: ``linked`` (user_id, roles), ``pairing`` (a code, ``new`` when it is to
        be sent now), or ``refused`` (not on the allow-list, or the connection is gone)."""
        _system_only()
        record = self.platforms.get(name)
        if record is None:
            return {"status": "refused", "reason": "unknown_platform"}
        link = self.links.get(_link_key(name, platform_user_id))
        if link is not None:
            return {"status": "linked", "user_id": link["user_id"], "roles": list(link["roles"])}
        if record["allowed_users"] and platform_user_id not in record["allowed_users"]:
            return {"status": "refused", "reason": "not_allowed"}
        now = self.host.now()
        for code, p in list(self.pairings.items()):
            if p["name"] == name and p["platform_user_id"] == platform_user_id:
                if now - p["created_at"] < self.pairing_window:
                    return {"status": "pairing", "new": False}
                del self.pairings[code]
        code = "".join(secrets.choice(_CODE_ALPHABET) for _ in range(8))
        self.pairings[code] = {
            "name": name,
            "platform_user_id": platform_user_id,
            "chat": chat,
            "display_name": display_name[:128],
            "created_at": now,
        }
        self._audit(
            "pairing_requested",
            f"{name} user {platform_user_id} asked to pair",
            {"name": name, "platform_user_id": platform_user_id},
        )
        return {"status": "pairing", "new": True, "code": code}

    # -- helpers --------------------------------------------------------------------------------------------

    def _link(
        self, name: str, platform_user_id: str, user_id: str, roles: list[str] | None, event: str
    ) -> dict[str, Any]:
        if not _USER.fullmatch(platform_user_id):
            raise InvalidArgument(
                "platform_user_id must be 1-128 printable characters", field="platform_user_id"
            )
        if not _USER.fullmatch(user_id) or user_id == "system":
            raise InvalidArgument("user_id must be 1-128 printable characters, not 'system'", field="user_id")
        granted = sorted(set(roles or ["user"]))
        unknown = [r for r in granted if r not in ROLES]
        if unknown or not granted:
            raise InvalidArgument(f"roles must be among {', '.join(ROLES)}", field="roles")
        self.links[_link_key(name, platform_user_id)] = {
            "user_id": user_id,
            "roles": granted,
            "linked_at": self.host.now(),
            "linked_by": current_context().principal,
        }
        self._audit(
            event,
            f"{name} user {platform_user_id} linked to {user_id}",
            {"name": name, "platform_user_id": platform_user_id, "user_id": user_id, "roles": granted},
        )
        return {
            "status": "ok",
            "name": name,
            "platform_user_id": platform_user_id,
            "user_id": user_id,
            "roles": granted,
        }

    def _known(self, name: str) -> dict[str, Any]:
        record = self.platforms.get(name)
        if record is None:
            raise NotFound(f"no platform named {name!r}", name=name)
        return record

    async def _check_credential(self, credential: str) -> None:
        """The credential must be registered (resolved and dropped here: only its presence is checked)."""
        ctx = current_context()
        system = RequestContext(
            tenant=ctx.tenant,
            namespace=ctx.namespace,
            principal="platform_gateway",
            roles=frozenset({"system"}),
        )
        token = set_context(system)
        try:
            await self.host.ask("llm_gateway", "__resolve_credential", {"phantom_token": credential})
        except NotFound:
            raise InvalidArgument(
                "credential is not registered; call llm_gateway.register_credential first", field="credential"
            ) from None
        finally:
            reset_context(token)

    def _audit(self, event_type: str, detail: str, data: dict[str, Any]) -> None:
        try:
            self.host.send(
                "audit_event", "log_event", {"event_type": event_type, "detail": detail, "data": data}
            )
        except ActorError as e:  # a node without the audit actor (an embedding program's own tree)
            self.host.log.debug("platform_gateway: no audit (%s)", e.code)


def _system_only() -> None:
    if "system" not in current_context().roles:
        raise PermissionDenied("for the platform adapters only")


def _link_key(name: str, platform_user_id: str) -> str:
    return f"{name}/{quote(platform_user_id, safe='')}"


def _public(record: dict[str, Any]) -> dict[str, Any]:
    """A registration as replies show it: ``status`` is the connection's (running, paused)."""
    return dict(record)
