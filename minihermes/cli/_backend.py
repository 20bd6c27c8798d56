"""Where CLI commands send their ops: an embedded node on the local data dir, or a running server.

Both speak the same language, ``ask(actor, op, payload)``, so every command works either way:

- ``Embedded``: the agent app on ``--data-dir`` in this process (``minihermes.embed.MiniHermes``), as the
  local owner (tenant ``default``, admin). Live events come from ``node.subscribe``. Only when no node runs
  on that data dir: one node per data dir (``minihermes.runtime.running_node``).
- ``Remote``: ``POST /api/v1/actors/{actor}/{op}`` on ``--url``, or on the node serving ``--data-dir`` (its
  address is recorded beside the data dir's lock), with a JWT or API key (``Authorization: Bearer``), which
  decides the tenant and roles; actors from ``GET /api/v1/actors``.

An op's structured error comes back as ``CommandError`` (code, message, field) on both; so do a server that
cannot be reached and a refused credential, as one line saying what, where and what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from minihermes import permissions
from minihermes.runtime import ActorError, DataDirBusy, RequestContext, running_node


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


def unreachable(where: str, e: Exception) -> CommandError:
    """A server that does not answer, as one line: what failed, where, and what to do."""
    import httpx

    if isinstance(e, httpx.TimeoutException):
        reason = "no answer in time"
    else:
        reason = _os_reason(e) or str(e) or type(e).__name__
    reason = re.sub(r"^\[Errno -?\d+\] ", "", " ".join(reason.split())).rstrip(".")
    return CommandError(
        "connection_failed",
        f"cannot reach {where} ({reason}): is a server running there? Start one with `minihermes serve`, "
        "or check --url",
    )


def _os_reason(e: BaseException) -> str | None:
    """The operating system's words for a failed connection ("Connection refused"), from the causes."""
    seen: set[int] = set()
    todo: list[BaseException] = [e]
    while todo:
        err = todo.pop()
        if id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno:
            return os.strerror(err.errno) if err.errno > 0 else (err.strerror or str(err))
        if isinstance(err, BaseExceptionGroup):
            todo.extend(err.exceptions)
        todo.extend(x for x in (err.__cause__, err.__context__) if x is not None)
    return None


class Backend(Protocol):
    """What a command needs: call an op, and know which actors exist (subsystems may be absent)."""

    where: str

    async def ask(
        self, actor: str, op: str, payload: dict[str, Any] | None = None, timeout: float = 300
    ) -> Any: ...

    async def has_actor(self, actor: str) -> bool: ...

    async def ops(self, actor: str) -> set[str]: ...

    async def roles(self) -> frozenset[str]: ...

    async def may(self, actor: str, op: str) -> bool: ...


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
        return set(self.node.spec(actor).cls.ops())

    async def roles(self) -> frozenset[str]:
        return frozenset(self.ctx.roles)

    async def may(self, actor: str, op: str) -> bool:
        """Whether the caller may call ``actor.op`` (the actor runs here and the permission table allows it)."""
        if op not in await self.ops(actor):
            return False
        if self._permissions is None:
            self._permissions = permissions.DEFAULT_PERMISSIONS.for_node(self.node)
        return permissions.may(self.ctx, actor, op, self._permissions)


class Remote:
    """A running server's HTTP API."""

    def __init__(self, client: Any, url: str, where: str | None = None) -> None:
        self.client = client
        self.where = where or url
        self._catalog: dict[str, set[str]] | None = None
        self._allowed: set[tuple[str, str]] = set()
        self._roles: frozenset[str] | None = None

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
            raise unreachable(self.where, e) from None
        return reply_body(resp)

    async def get(self, path: str) -> Any:
        """``GET path``'s JSON body; errors as ``CommandError``."""
        import httpx

        try:
            resp = await self.client.get(path)
        except httpx.HTTPError as e:
            raise unreachable(self.where, e) from None
        return reply_body(resp)

    async def _load(self) -> dict[str, set[str]]:
        if self._catalog is None:
            body = await self.get("/api/v1/actors")
            actors = body.get("actors", body) if isinstance(body, dict) else body
            catalog: dict[str, set[str]] = {}
            for entry in actors if isinstance(actors, list) else []:
                ops = entry.get("ops", [])
                catalog[entry["name"]] = {o["op"] if isinstance(o, dict) else str(o) for o in ops}
                for o in ops:
                    if isinstance(o, dict) and o.get("allowed", True):
                        self._allowed.add((entry["name"], o["op"]))
            self._catalog = catalog
        return self._catalog

    async def has_actor(self, actor: str) -> bool:
        return actor in await self._load()

    async def ops(self, actor: str) -> set[str]:
        return (await self._load()).get(actor, set())

    async def roles(self) -> frozenset[str]:
        """The caller's roles, as the server sees the credential (``GET /api/v1/whoami``)."""
        if self._roles is None:
            body = await self.get("/api/v1/whoami")
            self._roles = frozenset(body.get("roles", []) if isinstance(body, dict) else [])
        return self._roles

    async def may(self, actor: str, op: str) -> bool:
        """Whether the server's catalog lets this caller call ``actor.op`` (absent actors: no)."""
        await self._load()
        return (actor, op) in self._allowed


def reply_body(resp: Any) -> Any:
    """An HTTP response's JSON body; an error status raises ``CommandError`` with the API's code and field."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status_code >= 400:
        err = body.get("error", {}) if isinstance(body, dict) else {}
        message = " ".join(str(err.get("message", resp.text)).split())[:1000]
        if resp.status_code == 401:
            where = f" by {resp.request.url.host}:{resp.request.url.port}" if _has_request(resp) else ""
            message += (
                f" (refused{where}): pass --token-env VAR, VAR naming an environment variable that holds a valid "
                "API key (`minihermes keys create`) or JWT"
            )
        raise CommandError(str(err.get("code", resp.status_code)), message, err.get("field"))
    return body


def _has_request(resp: Any) -> bool:
    try:
        return resp.request is not None
    except RuntimeError:  # a response built without a request (tests)
        return False


SERVED_WAIT = 5.0
"""How long to wait for a node that holds the data dir to record its address (it writes it right after
taking the lock)."""


async def served_node(data_dir: Path) -> dict[str, Any] | None:
    """What the node running on ``data_dir`` recorded (``url`` when it serves HTTP), or None when none runs."""
    holder = running_node(data_dir)
    deadline = time.monotonic() + SERVED_WAIT
    while holder is not None and (not holder or (holder.get("http") and not holder.get("url"))):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
        holder = running_node(data_dir)
    return holder


def _served_url(data_dir: Path, holder: dict[str, Any], token: str | None) -> str:
    """The running node's address for the commands on its data dir; ``CommandError`` saying what to do when it
    cannot be talked to (no HTTP API, or a credential needed and none given)."""
    busy = DataDirBusy(data_dir.resolve(), holder)
    url = holder.get("url")
    if not url:
        raise CommandError(
            "data_dir_busy",
            f"{busy} that serves no HTTP API: wait for it to finish or stop it, or run `minihermes serve "
            f"--data-dir {data_dir}` instead and commands here talk to it",
        )
    if holder.get("auth") and not token:
        raise CommandError(
            "auth_required",
            f"the node serving {data_dir} ({url}, pid {holder.get('pid')}) requires a credential: pass "
            "--token-env VAR, VAR naming an environment variable that holds an API key (`minihermes keys "
            "create`, or the dashboard) or a JWT",
        )
    return str(url)


@contextlib.asynccontextmanager
async def open_backend(
    *, url: str | None, data_dir: Path, token: str | None = None, timeout: float = 310
) -> AsyncIterator[Embedded | Remote]:
    """A backend for one command: ``url`` for a running server; else the node already running on
    ``data_dir`` (through its HTTP API), or an embedded node on it when none runs."""
    where = None
    if not url:
        holder = await served_node(data_dir)
        if holder is not None:
            url = _served_url(data_dir, holder, token)
            where = f"{url.rstrip('/')}, the node serving {data_dir}"
    if url:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout) as client:
            yield Remote(client, url.rstrip("/"), where)
        return
    from minihermes.embed import MiniHermes

    _quiet_logs()
    try:
        mh = await MiniHermes(data_dir=data_dir).start()
    except DataDirBusy as e:  # a node started there since we looked
        raise CommandError("data_dir_busy", f"{e}: try again (commands then talk to it)") from None
    try:
        yield Embedded(mh)
    finally:
        await mh.stop()


def _quiet_logs() -> None:
    """The embedded node's warnings (a timer dropped at shutdown) are not the command's output; errors
    still show. ``MINIHERMES_CLI_LOG_LEVEL=info`` shows more. A program that set up logging keeps its own."""
    root = logging.getLogger()
    if not root.handlers:
        level = os.environ.get("MINIHERMES_CLI_LOG_LEVEL", "error").upper()
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
