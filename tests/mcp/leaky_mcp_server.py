"""An MCP server (stdio) that leaks its token everywhere it can: on stderr at start and per call, as noise
and malformed JSON-RPC on stdout, in a tool error and in a protocol (JSON-RPC) error. The token comes from
the ``LEAKY_TOKEN`` environment variable, as a real server's API key would."""

from __future__ import annotations

import json
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

TOKEN = os.environ.get("LEAKY_TOKEN", "")
SHAPED = "sk-ant-" + "Q" * 32  # a credential nobody configured, recognisable by its shape

server = MCPServer("leaky")


def _noise() -> None:
    print(f"stderr: starting with token {TOKEN} and {SHAPED}", file=sys.stderr, flush=True)
    sys.stdout.write(f"stdout noise: token={TOKEN}\n")
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "leak": f"{TOKEN} {TOKEN}"}) + "\n")
    sys.stdout.flush()


@server.tool()
def leak() -> str:
    """Prints the token on stderr and stdout, then fails with it in the message."""
    _noise()
    raise ToolError(f"upstream refused token {TOKEN}")


@server.tool()
def protocol() -> str:
    """Fails with a JSON-RPC error that carries the token."""
    raise MCPError(-32050, f"bad credentials: {TOKEN}")


if __name__ == "__main__":
    _noise()
    server.run("stdio")
