"""Tools from MCP servers (stdio and streamable HTTP, with the official ``mcp`` SDK), per tenant.

``MCPManager`` (actor ``mcp_manager``) keeps each tenant's servers and registers their tools with the
tenant's tool executor; calls go through the executor and the guardrails like any other tool. See
docs/mcp.md.
"""

from ._config import check_server, public, tool_name
from ._connection import MCPConnection, MCPTimeout, MCPToolError, MCPUnavailable
from ._tool import MCP_TOOLSET
from .mcp_manager import MCPManager

__all__ = [
    "MCP_TOOLSET",
    "MCPConnection",
    "MCPManager",
    "MCPTimeout",
    "MCPToolError",
    "MCPUnavailable",
    "check_server",
    "public",
    "tool_name",
]
