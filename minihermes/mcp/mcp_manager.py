"""The MCP manager (one per tenant): the tenant's MCP servers, their connections and their tools.

- ``add_server`` checks the configuration, connects (starts the stdio command, or opens the streamable HTTP
  session), lists the server's tools and registers each one with the tenant's ``tool_executor`` (see
  ``_tool``). Nothing is stored when the server cannot be reached. ``refresh_server`` lists again and
  registers new tools, removes gone ones; ``remove_server`` unregisters its tools and disconnects.
- ``call_tool`` is what the ``mcp_call`` tool kind asks: it runs in a task of its own (the reply comes when
  the server answers), so a slow MCP server never holds up this actor's mailbox.
- Configurations are durable state; connections are not. After a restart a server is connected again on
  its first call. A server whose transport died (its process exited) is reconnected on the next call.

Args: ``log_dir`` (stdio servers' stderr goes to ``<log_dir>/<tenant>/<server>.log``; none: discarded),
``credential_key`` (encrypts the servers' env and header values at rest; the app passes the data dir's
``credential.key``), ``stdio_commands`` (the executables a tenant admin may start: ``["*"]`` any, a list
those, ``[]`` none; unset: none, except on a one-owner node (no auth: ``minihermes.app.single_owner`` sets
``["*"]``), since a stdio program runs on the node's machine outside the sandbox), ``allowed_egress``
(the internal addresses an http server's ``url`` may reach, ``minihermes.llm.egress``: unset, public ones
only, checked at ``add_server`` and at every request the client makes; ``["*"]`` on a one-owner node),
``max_servers``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from pydantic import field_validator

from minihermes.audit import fire_audit
from minihermes.llm import egress
from minihermes.runtime import (
    ActorArgs,
    ActorError,
    ConfigError,
    Conflict,
    Deferred,
    GenServer,
    NotFound,
    PermissionDenied,
    call,
    current_context,
    state,
)
from minihermes.tools.workspace import safe_component

from . import _tool
from ._config import (
    EGRESS_SETTING,
    MAX_TIMEOUT,
    MAX_TOOLS_PER_SERVER,
    RESERVED_ARGS,
    check_program,
    check_server,
    public,
    tool_name,
)
from ._connection import MCPConnection
from ._secrets import ServerSecrets

_ADMIN_ROLES = frozenset({"admin", "system"})
_CALLER_ROLES = _ADMIN_ROLES | {"user"}
MAX_SERVERS = 20
_DESCRIPTION_CHARS = 1900


async def _reply(task: Awaitable[dict[str, Any] | ActorError]) -> dict[str, Any]:
    outcome = await task
    if isinstance(outcome, ActorError):
        raise outcome
    return outcome


def _require(roles: frozenset[str], op: str) -> None:
    if not current_context().roles & roles:
        raise PermissionDenied(f"{op} needs one of the roles: {', '.join(sorted(roles))}", op=op)


class MCPManager(GenServer):
    """Per-tenant MCP servers and their tools (see the module docstring)."""

    class Args(ActorArgs):
        log_dir: str | None = None
        stdio_commands: list[str] | None = None
        """None: ``[]`` (no stdio programs), unless the composition root marks the node one owner's."""
        max_servers: int = MAX_SERVERS
        credential_key: str | None = None
        allowed_egress: list[str] | None = None
        """None: an http server's ``url`` reaches public addresses only; ``["*"]`` any (a one-owner node)."""

        @field_validator("allowed_egress")
        @classmethod
        def _egress_entries(cls, value: list[str] | None) -> list[str] | None:
            egress.EgressPolicy.parse(value, EGRESS_SETTING)  # a bad entry fails when the config loads
            return value

    state_version = 1
    servers: dict[str, dict[str, Any]] = state(default_factory=dict)
    """Server name -> its checked record plus ``registered`` (executor tool name -> MCP tool name)."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        log_dir = args.get("log_dir")
        self.log_dir: Path | None = Path(log_dir) if log_dir else None
        commands = args.get("stdio_commands")
        self.stdio_commands: list[str] = [str(c) for c in commands or []]
        self.max_servers = int(args.get("max_servers", MAX_SERVERS))
        try:
            self.egress = egress.EgressPolicy.parse(args.get("allowed_egress"), EGRESS_SETTING)
        except ValueError as e:
            raise ConfigError("mcp_manager.args.allowed_egress", str(e)) from None
        self._secrets = ServerSecrets(
            self.host.private_kv, current_context().tenant, args.get("credential_key")
        )
        self._conns: dict[str, MCPConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.host.join("svc:mcp_manager")

    async def on_stop(self, reason: str) -> None:
        for conn in list(self._conns.values()):
            await conn.close()
        self._conns.clear()

    # -- administration -----------------------------------------------------------------------------------

    @call
    async def add_server(
        self,
        name: str,
        transport: str,
        command: str = "",
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str = "",
        url: str = "",
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 60.0,
        tools: list[str] | None = None,
        review: bool = True,
        replace: bool = False,
    ) -> dict[str, Any]:
        """Connect to a server and register its tools (``tools``: only these). Admin only. Reply:
        ``{status, server, tools: [registered names], skipped: [{tool, reason}]}``."""
        _require(_ADMIN_ROLES, "add_server")
        record = check_server(
            "add_server",
            name=name,
            transport=transport,
            command=command,
            args=args,
            env=env,
            cwd=cwd,
            url=url,
            headers=headers,
            timeout=timeout,
            connect_timeout=connect_timeout,
            tools=tools,
            review=review,
            stdio_commands=self.stdio_commands,
        )
        if name in self.servers and not replace:
            raise Conflict(
                f"an MCP server named {name!r} already exists (replace=true to update it)", field="name"
            )
        if name not in self.servers and len(self.servers) >= self.max_servers:
            raise Conflict(f"this tenant already has {self.max_servers} MCP servers", code="quota_exceeded")
        return await self._sync(record, "add_server")

    @call
    async def refresh_server(self, name: str) -> dict[str, Any]:
        """Reconnect, list the tools again, register new ones and remove gone ones. Admin only."""
        _require(_ADMIN_ROLES, "refresh_server")
        record = self._server(name)
        stored = {k: v for k, v in record.items() if k not in ("registered", "added_at", "added_by")}
        return await self._sync(await self._secrets.open(stored), "refresh_server")

    @call
    async def remove_server(self, name: str) -> dict[str, Any]:
        """Unregister the server's tools and disconnect. Admin only."""
        _require(_ADMIN_ROLES, "remove_server")
        record = self._server(name)
        for exec_name in record.get("registered", {}):
            await self._unregister(exec_name)
        await self._secrets.forget(record)
        del self.servers[name]
        conn = self._conns.pop(name, None)
        if conn is not None:
            await conn.close()
        fire_audit(self.host, "mcp_server_removed", f"server={name}", data={"server": name})
        return {"status": "ok", "server": name, "removed_tools": sorted(record.get("registered", {}))}

    @call
    def list_servers(self) -> dict[str, Any]:
        """Every server (env and header values redacted), whether it is connected, and its tools."""
        out = []
        for name in sorted(self.servers):
            record = self.servers[name]
            conn = self._conns.get(name)
            shown = public({k: v for k, v in record.items() if k != "registered"})
            out.append(
                shown
                | {
                    "connected": bool(conn and conn.alive),
                    "last_error": conn.last_error if conn else "",
                    "tools": [
                        {"name": exec_name, "mcp_tool": mcp_name}
                        for exec_name, mcp_name in sorted(record.get("registered", {}).items())
                    ],
                }
            )
        return {"status": "ok", "servers": out, "count": len(out)}

    # -- calls --------------------------------------------------------------------------------------------

    @call
    def call_tool(self, server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """Run one of a server's registered tools: ``{text, structured?, other_content?}``; errors:
        ``not_found``, ``mcp_unavailable``, ``mcp_tool_error``, ``timeout``. Reached through the tool
        executor (``mcp_call``), which has validated the arguments and asked the guardrails."""
        _require(_CALLER_ROLES, "call_tool")
        record = self._server(server)
        if tool not in record.get("registered", {}).values():
            raise NotFound(f"MCP server {server!r} offers no tool {tool!r} here", field="tool")
        return Deferred(_reply(self.host.spawn(self._call(record, tool, dict(arguments or {})))))

    async def _call(
        self, record: dict[str, Any], tool: str, arguments: dict[str, Any]
    ) -> dict[str, Any] | ActorError:
        """The call's result, or its error as a value (a background task that raises is logged as a bug)."""
        try:
            conn = await self._connection(record)
            result = await conn.call_tool(tool, arguments)
        except ActorError as e:
            self.host.incr_counter("mcp_tool_calls_total", server=record["name"], status=e.code)
            return e
        self.host.incr_counter("mcp_tool_calls_total", server=record["name"], status="ok")
        return result

    async def _connection(self, record: dict[str, Any]) -> MCPConnection:
        """The server's live connection, (re)connecting when there is none; one connect at a time."""
        name = record["name"]
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.servers:  # removed while this call waited: do not connect it again
                raise NotFound(f"MCP server {name!r} was removed", field="server")
            conn = self._conns.get(name)
            if conn is not None and conn.alive:
                return conn
            if conn is not None:
                await conn.close()
            conn = self._new_connection(await self._secrets.open(record))
            await conn.open()
            self._conns[name] = conn
            return conn

    # -- helpers ------------------------------------------------------------------------------------------

    async def _sync(self, record: dict[str, Any], op: str) -> dict[str, Any]:
        """Connect with ``record``, register the tools it offers, drop the ones it no longer offers."""
        name = record["name"]
        if record["transport"] == "http":  # before connecting: the refusal names the setting
            await egress.check_url(record["url"], self.egress, op=op, field="url")
        conn = self._new_connection(record)
        await conn.open()
        try:
            listed = await conn.list_tools()
            registered, skipped = await self._register_tools(record, listed)
            previous = self.servers.get(name, {}).get("registered", {})
            for exec_name in previous:
                if exec_name not in registered:
                    await self._unregister(exec_name)
        except BaseException:
            await conn.close()
            raise
        old = self._conns.pop(name, None)
        if old is not None:
            await old.close()
        self._conns[name] = conn
        ctx = current_context()
        previous_record = self.servers.get(name)
        sealed = await self._secrets.seal(record)
        if previous_record is not None:
            await self._secrets.forget(previous_record, keep=sealed)
        self.servers[name] = sealed | {
            "registered": registered,
            "added_at": (previous_record or {}).get("added_at", self.host.now()),
            "added_by": (previous_record or {}).get("added_by", ctx.principal),
        }
        fire_audit(
            self.host,
            "mcp_server_added" if op == "add_server" else "mcp_server_refreshed",
            f"server={name} transport={record['transport']} tools={len(registered)}",
            data={"server": name, "tools": sorted(registered), "skipped": len(skipped)},
        )
        return {"status": "ok", "server": name, "tools": sorted(registered), "skipped": skipped}

    async def _register_tools(
        self, record: dict[str, Any], listed: list[dict[str, Any]]
    ) -> tuple[dict[str, str], list[dict[str, str]]]:
        allow = record["tools"]
        registered: dict[str, str] = {}
        skipped: list[dict[str, str]] = []
        for t in listed:
            mcp_name = t["name"]
            if allow is not None and mcp_name not in allow:
                continue
            if len(registered) >= MAX_TOOLS_PER_SERVER:
                skipped.append({"tool": mcp_name, "reason": f"more than {MAX_TOOLS_PER_SERVER} tools"})
                continue
            schema = t["input_schema"]
            props = schema.get("properties") if isinstance(schema, dict) else None
            clash = [a for a in RESERVED_ARGS if isinstance(props, dict) and a in props]
            if clash:
                skipped.append({"tool": mcp_name, "reason": f"argument {clash[0]!r} is reserved"})
                continue
            exec_name = tool_name(record["name"], mcp_name)
            description = f"[MCP {record['name']}] {t['description']}"[:_DESCRIPTION_CHARS]
            try:
                await self.host.ask(
                    "tool_executor",
                    "register_tool",
                    {
                        "name": exec_name,
                        "description": description,
                        "input_schema": schema,
                        "handler_type": _tool.KIND,
                        "handler_config": {
                            "fixed_input": {"mcp_server": record["name"], "mcp_tool": mcp_name},
                            "review_by_default": record["review"],
                            # A little over the server's own timeout: the server's error wins the race.
                            "timeout": min(MAX_TIMEOUT, record["timeout"] + 5),
                        },
                        "replace": True,
                    },
                )
            except ActorError as e:  # a schema the executor refuses, a quota: this tool only
                skipped.append({"tool": mcp_name, "reason": f"{e.code}: {e.message}"[:300]})
                continue
            registered[exec_name] = mcp_name
        return registered, skipped

    async def _unregister(self, exec_name: str) -> None:
        try:
            await self.host.ask("tool_executor", "unregister_tool", {"name": exec_name})
        except NotFound:
            pass  # already gone (removed by an admin directly): nothing to undo

    def _server(self, name: str) -> dict[str, Any]:
        record = self.servers.get(name)
        if record is None:
            known = ", ".join(sorted(self.servers)) or "none"
            raise NotFound(f"no MCP server named {name!r} (configured: {known})", field="name")
        return record

    def _new_connection(self, record: dict[str, Any]) -> MCPConnection:
        if record["transport"] == "stdio":  # the node's setting now, not the one it was added under
            check_program("mcp_connect", record["command"], record["env"], record["cwd"], self.stdio_commands)
        guard = None if self.egress.allow_all else self.egress
        return MCPConnection(record, self._log_file(record["name"]), spawn=self.host.spawn, egress=guard)

    def _log_file(self, server: str) -> Path | None:
        if self.log_dir is None:
            return None
        ctx = current_context()
        # The workspaces' folder naming: never '..', the namespace kept apart when it is not the default.
        tenant_dir = (
            ctx.tenant if ctx.namespace == "default" else f"{ctx.tenant}~{safe_component(ctx.namespace)}"
        )
        return self.log_dir / safe_component(tenant_dir) / f"{server}.log"
