"""Embed MiniHermes in a program: a node with the agent tree, your functions as tools, turns, history.

    import asyncio
    from minihermes import MiniHermes

    mh = MiniHermes(data_dir="./agent-data")

    @mh.tool
    def word_count(text: str) -> int:
        "Count the words in a text."
        return len(text.split())

    async def main() -> None:
        async with mh:
            reply = await mh.chat("use word_count on: a b c", session_id="s1")
            print(reply["response"], (await mh.tool_history("s1"))[-1])

    asyncio.run(main())

One node per data directory: ``start`` raises ``minihermes.runtime.DataDirBusy`` (naming the node: pid,
address, start time) when another process's node, ``minihermes serve`` say, runs on ``data_dir``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

from minihermes.permissions import owner_context
from minihermes.runtime import AppConfig, Clock, Node

F = TypeVar("F", bound=Callable[..., Any])


class MiniHermes:
    """A node running the agent application in this process (SQLite in ``data_dir``, simulated LLM by
    default). Use as ``async with``; ``chat`` runs one durable turn. The node holds ``data_dir``'s lock while
    it runs (one node per data directory)."""

    def __init__(
        self,
        data_dir: str | Path = "./data",
        *,
        config: AppConfig | None = None,
        tenant: str = "default",
        principal: str = "local",
        clock: Clock | None = None,
    ) -> None:
        from minihermes.app import default_config, single_owner

        # An embedding program is one owner: it may approve its own agent's paused calls.
        self.config = config or single_owner(default_config())
        self.config.model.node.data_dir = str(data_dir)
        # One owner: an admin of the permission model every way in shares (minihermes.permissions).
        self.ctx = owner_context(tenant, principal)
        self._clock = clock
        self._node: Node | None = None
        self._pending: list[Any] = []

    @property
    def node(self) -> Node:
        if self._node is None:
            raise RuntimeError("MiniHermes is not started: use 'async with MiniHermes(...)' or await start()")
        return self._node

    async def start(self) -> MiniHermes:
        from minihermes.app import build_agent_node

        self._node = build_agent_node(self.config, clock=self._clock)
        await self._node.start()
        for tool in self._pending:
            await self._register(tool)
        self._pending.clear()
        return self

    async def stop(self) -> None:
        if self._node is not None:
            await self._node.stop()
            self._node = None

    async def __aenter__(self) -> MiniHermes:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- tools --------------------------------------------------------------------------------------------

    @overload
    def tool(self, fn: F, /) -> F: ...
    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        capabilities: list[str] | None = None,
        mutating: bool | None = None,
    ) -> Callable[[F], F]: ...
    def tool(
        self,
        fn: Any = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        capabilities: list[str] | None = None,
        mutating: bool | None = None,
    ) -> Any:
        """Register a plain Python function as a tool; its input schema comes from its type hints."""
        from minihermes.tools.local import register_local_tool

        def deco(f: Any) -> Any:
            tool = register_local_tool(
                f, name=name, description=description, capabilities=capabilities, mutating=mutating
            )
            self._pending.append(tool)
            return f

        return deco(fn) if fn is not None else deco

    async def register_tool(self, fn: Callable[..., Any], **kw: Any) -> None:
        """Like the ``tool`` decorator, for a started instance: registered before this returns."""
        self.tool(**kw)(fn)
        if self._node is not None:
            for tool in self._pending:
                await self._register(tool)
            self._pending.clear()

    async def _register(self, tool: Any) -> None:
        await self.ask(
            "tool_executor",
            "register_tool",
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.input_schema,
                "handler_type": "python",
                "handler_config": {
                    "function": tool.name,
                    "effects": tool.effects,
                    "capabilities": tool.capabilities,
                },
                "replace": True,
            },
        )

    # -- turns --------------------------------------------------------------------------------------------

    async def ask(
        self, actor: str, op: str, payload: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Any:
        """Call any actor op as this instance's principal (see docs/agent.md)."""
        return await self.node.ask(actor, op, payload or {}, timeout, ctx=self.ctx)

    async def chat(self, message: str, session_id: str = "default", user_id: str = "") -> dict[str, Any]:
        """One turn: status, response, session_id, tool_calls, iterations."""
        reply: dict[str, Any] = await self.ask(
            "agent",
            "chat",
            {"message": message, "session_id": session_id, "user_id": user_id or self.ctx.principal},
        )
        return reply

    async def history(self, session_id: str = "default") -> list[dict[str, Any]]:
        reply = await self.ask("agent", "get_history", {"session_id": session_id})
        return list(reply["messages"])

    async def tool_history(self, session_id: str = "default") -> list[dict[str, Any]]:
        """Every tool call of the session, oldest first: tool, input, output, is_error, duration_ms."""
        messages = await self.history(session_id)
        calls: dict[str, dict[str, Any]] = {}
        out: list[dict[str, Any]] = []
        for m in messages:
            if m["role"] == "assistant":
                for c in m.get("tool_calls") or []:
                    calls[c["id"]] = c
            elif m["role"] == "tool":
                c = calls.get(m.get("tool_call_id", ""), {})
                try:
                    output: Any = json.loads(m["content"])
                except (TypeError, ValueError):
                    output = m["content"]
                out.append(
                    {
                        "tool": c.get("name", m.get("name")),
                        "input": c.get("input", {}),
                        "output": output,
                        "is_error": bool(m.get("is_error")),
                        "duration_ms": m.get("duration_ms"),
                    }
                )
        return out
