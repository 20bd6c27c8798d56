"""``minihermes mcp ...``: the tenant's MCP servers (add, remove, refresh, list). See docs/mcp.md."""

from __future__ import annotations

from typing import Annotated

import typer

from ._connection import ConnectedTyper
from .commands import op_command, run_command

mcp_app = ConnectedTyper(help="MCP servers whose tools the agent may use.", no_args_is_help=True)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        sep = "=" if what == "env" else ":"
        if sep not in item:
            raise typer.BadParameter(f"{what} entries look like NAME{sep}VALUE, not {item!r}")
        k, v = item.split(sep, 1)
        out[k.strip()] = v.strip() if what == "header" else v
    return out


@mcp_app.command("list")
def mcp_list() -> None:
    """Servers, whether they are connected, and their tools."""
    run_command(
        op_command("mcp_manager", ("list_servers",), {}),
        columns=["name", "transport", "command", "url", "connected", "review", "tools"],
    )


@mcp_app.command("add")
def mcp_add(
    name: Annotated[str, typer.Argument(help="Server name (tools become mcp_<name>_<tool>).")],
    command: Annotated[str, typer.Option(help="stdio: the command to start.")] = "",
    arg: Annotated[list[str] | None, typer.Option("--arg", help="stdio: one argument (repeat).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="stdio: NAME=VALUE (repeat).")] = None,
    server_url: Annotated[str, typer.Option("--server-url", help="http: the streamable HTTP endpoint.")] = "",
    header: Annotated[
        list[str] | None, typer.Option("--header", help="http: 'Name: value' (repeat).")
    ] = None,
    tool: Annotated[list[str] | None, typer.Option("--tool", help="Offer only these tools (repeat).")] = None,
    review: Annotated[bool, typer.Option(help="Calls wait for a person's approval by default.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds per request to the server.")] = 30.0,
    replace: Annotated[bool, typer.Option(help="Replace a server of that name.")] = False,
) -> None:
    """Connect to an MCP server and register its tools (stdio with --command, or --server-url)."""
    if bool(command) == bool(server_url):
        raise typer.BadParameter("give either --command (stdio) or --server-url (streamable HTTP)")
    payload: dict[str, object] = {
        "name": name,
        "transport": "stdio" if command else "http",
        "timeout": timeout,
        "review": review,
        "replace": replace,
    }
    if command:
        payload |= {"command": command, "args": list(arg or []), "env": _pairs(env or [], "env")}
    else:
        payload |= {"url": server_url, "headers": _pairs(header or [], "header")}
    if tool:
        payload["tools"] = list(tool)
    run_command(op_command("mcp_manager", ("add_server",), payload))


def _server_op(name: str, op: str, doc: str) -> None:
    def command(
        server: Annotated[str, typer.Argument(help="Server name.")],
    ) -> None:
        run_command(op_command("mcp_manager", (op,), {"name": server}))

    command.__doc__ = doc
    mcp_app.command(name)(command)


_server_op("remove", "remove_server", "Unregister a server's tools and disconnect.")
_server_op(
    "refresh", "refresh_server", "List a server's tools again (new ones registered, gone ones removed)."
)
