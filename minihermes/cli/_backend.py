"""Where CLI commands send their ops: an embedded node on the local data dir, or a running server.

Both speak the same language, ``ask(actor, op, payload)``, so every command works either way:

- ``Embedded``: the agent app on ``--data-dir`` in this process (``minihermes.embed.MiniHermes``), as the
  local owner (tenant ``default``, admin). Live events come from ``node.subscribe``.
- ``Remote``: ``POST /api/v1/actors/{actor}/{op}`` on ``--url`` with a JWT or API key
  (``Authorization: Bearer``), which decides the tenant and roles; actors from ``GET /api/v1/actors``.

An op's structured error comes back as ``CommandError`` (code, message, field) on both.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from minihermes import permissions
from minihermes.runtime import ActorError, RequestContext


class CommandError(Exception):
    """An op's structured error, or a connection failure, as the CLI reports it."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.field = field

    @classmethod
    def from_actor_error(cls, e: ActorError) -> CommandError:
        return cls(e.code, e.message, e.details.get("field"))


class Backend(Protocol):
    """What a command needs: call an op, and know which actors exist (subsystems may be absent)."""

    where: str

    async def ask(
        self, actor: str, op: str, payload: dict[str, Any] | None = None, timeout: float = 300
    ) -> Any: ...

    async def has_actor(self, actor: str) -> bool: ...

    async def ops(self, actor: str) -> set[str]: ...


class Embedded:
    """The agent app in this process, on a data dir."""

    def __init__(self, mh: Any, ctx: RequestContext | None = None) -> None:
        self.mh = mh
        self.ctx: RequestContext = ctx or mh.ctx
        self.where = f"data dir {mh.config.data_dir}"
        self._permissions: permissions.PermissionTable | None = None

    @property
    def node(self) -> Any:
        return self.mh.node

    async def ask(
        self, actor: str, op: str, payload: dict[str, Any] | None = None, timeout: float = 300
    ) -> Any:
        try:
            # The HTTP edge's permission table, for the embedded node too (the local owner is an admin).
            if self._permissions is None:
                self._permissions = permissions.DEFAULT_PERMISSIONS.for_node(self.node)
            permissions.require(self.ctx, actor, op, self._permissions)
            return await self.node.ask(actor, op, payload or {}, timeout, ctx=self.ctx)
        except ActorError as e:
            raise CommandError.from_actor_error(e) from None

    async def has_actor(self, actor: str) -> bool:
        return actor in self.node.actor_names()

    async def ops(self, actor: str) -> set[str]:
        if not await self.has_actor(actor):
            return set()
        handlers = self.node.spec(actor).cls._handlers
        return {name for name, h in handlers.items() if not h.internal}


class Remote:
    """A running server's HTTP API."""

    def __init__(self, client: Any, url: str) -> None:
        self.client = client
        self.where = url
        self._catalog: dict[str, set[str]] | None = None

    async def ask(
        self, actor: str, op: str, payload: dict[str, Any] | None = None, timeout: float = 300
    ) -> Any:
        import httpx

        try:
            resp = await self.client.post(
                f"/api/v1/actors/{actor}/{op}",
                json=payload or {},
                params={"timeout": min(timeout, 300)},
                timeout=timeout + 10,
            )
        except httpx.HTTPError as e:
            raise CommandError("connection_failed", f"{self.where}: {type(e).__name__}: {e}") from None
        return reply_body(resp)

    async def _load(self) -> dict[str, set[str]]:
        import httpx

        if self._catalog is None:
            try:
                resp = await self.client.get("/api/v1/actors")
            except httpx.HTTPError as e:
                raise CommandError("connection_failed", f"{self.where}: {type(e).__name__}: {e}") from None
            body = reply_body(resp)
            actors = body.get("actors", body) if isinstance(body, dict) else body
            catalog: dict[str, set[str]] = {}
            for entry in actors if isinstance(actors, list) else []:
                ops = entry.get("ops", [])
                catalog[entry["name"]] = {o["op"] if isinstance(o, dict) else str(o) for o in ops}
            self._catalog = catalog
        return self._catalog

    async def has_actor(self, actor: str) -> bool:
        return actor in await self._load()

    async def ops(self, actor: str) -> set[str]:
        return (await self._load()).get(actor, set())


def reply_body(resp: Any) -> Any:
    """An HTTP response's JSON body; an error status raises ``CommandError`` with the API's code and field."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status_code >= 400:
        err = body.get("error", {}) if isinstance(body, dict) else {}
        raise CommandError(
            str(err.get("code", resp.status_code)),
            str(err.get("message", resp.text))[:1000],
            err.get("field"),
        )
    return body


@contextlib.asynccontextmanager
async def open_backend(
    *, url: str | None, data_dir: Path, token: str | None = None, timeout: float = 310
) -> AsyncIterator[Embedded | Remote]:
    """A backend for one command: ``url`` for a running server, else the embedded node on ``data_dir``."""
    if url:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout) as client:
            yield Remote(client, url.rstrip("/"))
        return
    from minihermes.embed import MiniHermes

    _quiet_logs()
    async with MiniHermes(data_dir=data_dir) as mh:
        yield Embedded(mh)


def _quiet_logs() -> None:
    """The embedded node's warnings (a timer dropped at shutdown) are not the command's output; errors
    still show. ``MINIHERMES_CLI_LOG_LEVEL=info`` shows more. A program that set up logging keeps its own."""
    root = logging.getLogger()
    if not root.handlers:
        level = os.environ.get("MINIHERMES_CLI_LOG_LEVEL", "error").upper()
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
