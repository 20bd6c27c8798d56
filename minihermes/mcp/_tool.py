"""The ``mcp_call`` tool kind: how MCP tools run through the tool executor and the guardrails.

Each MCP tool is registered with the tenant's ``tool_executor`` as a tool of its own (``mcp_<server>_<tool>``,
the MCP tool's description and input schema) on this kind, with ``fixed_input`` pinning ``mcp_server`` and
``mcp_tool``. The executor validates the input against the MCP tool's schema, the guardrails judge the call by
its own name (so per-tool policies work), and this handler passes the remaining fields to ``mcp_manager``.

Classification: MCP tools are ``untrusted`` (their output is outside content, wrapped as data) and
``mutating`` (a server's ``readOnlyHint`` is the server's claim, not ours to trust), reviewed by default
unless the server was added with ``review=false``; a guardrails policy can allow a tool an admin trusts.

The kind's own schema lets other fields through (``additionalProperties: true``) because they are the MCP
tool's arguments, already checked against its schema; a direct ``mcp_call`` is reviewed like any MCP tool.
"""

from __future__ import annotations

from typing import Any

from minihermes.runtime import ActorNotFound
from minihermes.tools.catalog import Toolset
from minihermes.tools.contract import MUTATING, ON_REQUEST, UNTRUSTED, Tool, ToolEnv, ToolFailure

from ._config import MAX_TIMEOUT

KIND = "mcp_call"


async def mcp_call(args: dict[str, Any], env: ToolEnv) -> Any:
    rest = dict(args)
    server = rest.pop("mcp_server")
    tool = rest.pop("mcp_tool")
    try:
        return await env.host.ask(
            "mcp_manager",
            "call_tool",
            {"server": server, "tool": tool, "arguments": rest},
            timeout=MAX_TIMEOUT,  # the executor's per-tool timer is the real limit
        )
    except ActorNotFound:
        raise ToolFailure("unavailable", "MCP servers are not enabled on this node") from None


MCP_CALL = Tool(
    KIND,
    "Call a tool of a configured MCP server: mcp_server and mcp_tool name it, the other fields are its "
    "arguments. Prefer the mcp_<server>_<tool> tools, which describe their arguments.",
    {
        "type": "object",
        "properties": {
            "mcp_server": {"type": "string", "minLength": 1, "maxLength": 32, "description": "Server name"},
            "mcp_tool": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Tool name"},
        },
        "required": ["mcp_server", "mcp_tool"],
        "additionalProperties": True,
    },
    MUTATING,
    UNTRUSTED,
    handler=mcp_call,
    review=True,
    requires="mcp_manager",
    # A tool of a server the admin added to the tenant's agent, reviewed by the guardrails like any mutating
    # tool: a write for the turn's caller (mcp_manager.call_tool over HTTP skips the review: admin only).
    permission="write",
)

MCP_TOOLSET = Toolset(
    "mcp",
    [MCP_CALL],
    offered=ON_REQUEST,
    intents=[r"\bmcp\b|\bmcp_"],
    purpose="MCP servers' tools",
)
"""The ``mcp`` toolset: the kind every MCP tool is registered on (given to the executor by the app)."""
