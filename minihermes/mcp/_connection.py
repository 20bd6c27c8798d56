"""One live connection to an MCP server, with the official ``mcp`` SDK.

The SDK's ``Client`` is an async context manager whose transport (a child process for stdio, an HTTP session
for streamable HTTP) lives in task groups that must be entered and left by the same task. So a connection
owns one task that opens the client, signals that it is ready and holds it open until ``close``; requests
from any task of the loop go through the open client. A transport that dies (the server process exits, the
HTTP session is gone) ends that task; the next request sees ``alive`` is false and the owner reconnects.

With an ``egress`` policy, the streamable HTTP client is built on ``minihermes.llm.egress``'s guarded
transport: every request (redirects too) goes only to an address the node's operator allows.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

from minihermes.llm.egress import EgressPolicy, httpx2_transport
from minihermes.runtime import ActorError

from ._scrub import (
    Scrubber,
    StderrPump,
    exception_text,
    install_log_filter,
    register,
    secret_values,
    unregister,
)

MAX_TEXT_CHARS = 200_000


class MCPUnavailable(ActorError):
    """The MCP server could not be reached or stopped answering."""

    code = "mcp_unavailable"
    http_status = 502


class MCPToolError(ActorError):
    """The MCP server ran the tool and reported an error (``isError``)."""

    code = "mcp_tool_error"
    http_status = 502


class MCPTimeout(ActorError):
    code = "timeout"
    http_status = 504


def _describe(e: BaseException, scrub: Scrubber) -> str:
    """The innermost message of an error (anyio wraps transport failures in exception groups), scrubbed: it
    may quote what the server printed."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return scrub(exception_text(e))[:500]


def _devnull() -> TextIO:
    """Where a stdio server's stderr goes when the node keeps no MCP logs."""
    return open(os.devnull, "w")


class MCPConnection:
    """A connection to one configured server (see ``_config.check_server`` for the record)."""

    def __init__(
        self,
        record: dict[str, Any],
        log_file: Path | None = None,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Future[None]] = asyncio.ensure_future,
        egress: EgressPolicy | None = None,
    ) -> None:
        self.record = record
        self.egress = egress
        self.log_file = log_file
        # The actor passes host.spawn: a crash or stop of the actor then cancels the holder task, and leaving
        # the client ends the server process with it.
        self._spawn = spawn
        self._client: Any = None
        self._task: asyncio.Future[None] | None = None
        self._closing = asyncio.Event()
        self._error: str = ""
        # Everything the server says passes through this before a log, an error or the audit trail.
        self.scrub = Scrubber(secret_values(record))

    @property
    def alive(self) -> bool:
        return (
            self._client is not None
            and self._task is not None
            and not self._task.done()
            and not self._closing.is_set()
        )

    @property
    def last_error(self) -> str:
        return self._error

    def _target(self, errlog: TextIO) -> Any:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        install_log_filter()
        rec = self.record
        if rec["transport"] == "stdio":
            params = StdioServerParameters(
                command=rec["command"], args=rec["args"], env=rec["env"] or None, cwd=rec["cwd"] or None
            )
            return Client(stdio_client(params, errlog=errlog), read_timeout_seconds=rec["timeout"])
        if self.egress is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            # The SDK's own client's timeouts (a long read for the event stream), on the guarded transport.
            http = httpx2.AsyncClient(
                headers=rec["headers"] or None,
                timeout=httpx2.Timeout(rec["timeout"], read=max(rec["timeout"], 300.0)),
                transport=httpx2_transport(self.egress),
            )
            return Client(
                streamable_http_client(rec["url"], http_client=http), read_timeout_seconds=rec["timeout"]
            )
        if rec["headers"]:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = httpx2.AsyncClient(headers=rec["headers"], timeout=rec["timeout"])
            return Client(
                streamable_http_client(rec["url"], http_client=http), read_timeout_seconds=rec["timeout"]
            )
        return Client(rec["url"], read_timeout_seconds=rec["timeout"])

    async def open(self) -> None:
        """Connect (start the process / open the session) within the server's timeout."""
        if self.alive:
            return
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task = self._spawn(self._hold(ready))
        # Starting a stdio server (an interpreter, npx fetching a package) can take far longer than a request.
        limit = self.record.get("connect_timeout", self.record["timeout"])
        try:
            await asyncio.wait_for(asyncio.shield(ready), limit)
        except TimeoutError:
            await self.close()
            raise MCPTimeout(
                f"MCP server {self.record['name']!r} did not finish connecting within {limit:g}s",
                server=self.record["name"],
            ) from None
        except MCPUnavailable:
            await self.close()
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        register(self, self.scrub.secrets)  # for the SDK's own log lines about this server
        pump = StderrPump(self.log_file, self.scrub) if self.log_file is not None else None
        errlog = pump.errlog if pump is not None else _devnull()
        try:
            async with self._target(errlog) as client:
                if pump is not None:
                    pump.started()
                self._client = client
                if not ready.done():
                    ready.set_result(None)
                await self._closing.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # the transport's failure, whatever the SDK raised: reported to callers
            self._error = _describe(e, self.scrub)
            if not ready.done():
                ready.set_exception(
                    MCPUnavailable(
                        f"cannot connect to MCP server {self.record['name']!r}: {self._error}",
                        server=self.record["name"],
                    )
                )
        finally:
            self._client = None
            try:
                if pump is not None:
                    await pump.close()  # the server's last lines, scrubbed, before its secrets are let go
                else:
                    errlog.close()
            finally:
                unregister(self)

    async def close(self) -> None:
        """Leave the client (the SDK ends a stdio server's process) and wait for the holder task."""
        self._closing.set()
        task, self._task = self._task, None
        if task is None:
            return
        # asyncio.wait never raises: the task may already be cancelled (the actor is stopping) or failed.
        await asyncio.wait({task}, timeout=10)
        if not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=10)

    async def _request(self, what: str, coro_fn: Any) -> Any:
        if not self.alive:
            raise MCPUnavailable(
                f"MCP server {self.record['name']!r} is not connected: {self._error or 'closed'}",
                server=self.record["name"],
            )
        try:
            return await asyncio.wait_for(coro_fn(self._client), self.record["timeout"])
        except TimeoutError:
            raise MCPTimeout(
                f"MCP server {self.record['name']!r}: {what} took longer than {self.record['timeout']:g}s",
                server=self.record["name"],
            ) from None
        except ActorError:
            raise
        except Exception as e:
            from mcp import MCPError
            from mcp_types import CONNECTION_CLOSED

            if isinstance(e, MCPError) and e.code != CONNECTION_CLOSED:
                # The server answered with a JSON-RPC error: the connection is fine, this request is not.
                raise MCPToolError(
                    f"MCP server {self.record['name']!r}: {what}: {self.scrub(e.message)}"[:1000],
                    server=self.record["name"],
                    rpc_code=e.code,
                ) from None
            # The transport is gone (the process exited, the session ended): let the holder task end, so the
            # owner sees a dead connection and opens a new one for the next request.
            self._error = _describe(e, self.scrub)
            self._closing.set()
            raise MCPUnavailable(
                f"MCP server {self.record['name']!r}: {what} failed: {self._error}",
                server=self.record["name"],
            ) from None

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server offers (all pages): ``{name, description, input_schema, annotations}``."""

        async def run(client: Any) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            cursor: str | None = None
            for _ in range(100):  # a server that pages forever cannot hang us
                page = await client.list_tools(cursor=cursor)
                for t in page.tools:
                    ann = t.annotations.model_dump(exclude_none=True) if t.annotations else {}
                    out.append(
                        {
                            "name": t.name,
                            "description": t.description or t.title or t.name,
                            "input_schema": t.input_schema,
                            "annotations": ann,
                        }
                    )
                cursor = page.next_cursor
                if not cursor:
                    break
            return out

        result: list[dict[str, Any]] = await self._request("tools/list", run)
        return result

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run a tool: ``{text, structured?, content_types}``; a tool's own error is ``MCPToolError``."""

        async def run(client: Any) -> Any:
            return await client.call_tool(tool, arguments)

        result = await self._request(f"tools/call {tool}", run)
        return tool_result(self.record["name"], tool, result, self.scrub)


def tool_result(server: str, tool: str, result: Any, scrub: Scrubber | None = None) -> dict[str, Any]:
    """A ``CallToolResult`` as plain JSON data. Text blocks are joined; other blocks (images, audio,
    resources) are named by type and size but not inlined: binary data does not belong in a prompt."""
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    for block in result.content or []:
        kind = getattr(block, "type", "unknown")
        if kind == "text":
            texts.append(block.text)
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            if isinstance(text, str):
                texts.append(text)
            else:
                others.append({"type": "resource", "uri": str(res.uri)})
        else:
            data = getattr(block, "data", "")
            others.append(
                {"type": kind, "mime_type": getattr(block, "mime_type", None), "size": len(data or "")}
            )
    text = "\n".join(texts)
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS]
    if result.is_error:
        # An error message becomes an error reply (and may be logged): scrubbed. A result is the tool's
        # output, which the agent asked for; chat redaction applies to it where it is stored.
        message = (scrub or Scrubber(()))(text or "the tool reported an error")
        raise MCPToolError(f"{tool}: {message}"[:1000], server=server, tool=tool)
    out: dict[str, Any] = {"text": text}
    if result.structured_content is not None:
        out["structured"] = result.structured_content
    if others:
        out["other_content"] = others
    return out
