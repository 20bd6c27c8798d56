"""``minihermes tools ...``: self-written tools (the ``skill_tools`` actor: ``list_tools``, ``get_tool``,
``delete_tool``, ``promote_tool``), embedded or against a server like every scripting command."""

from __future__ import annotations

from typing import Annotated

import typer

from ._connection import ConnectedTyper
from .commands import op_command, run_command

tools_app = ConnectedTyper(help="Self-written tools: list, show, delete, promote.", no_args_is_help=True)
_TOOL_COLUMNS = ["name", "owner", "promoted", "version", "description"]


@tools_app.command("list")
def tools_list() -> None:
    """List the self-written tools you may use (an admin: every one), with owner and version."""
    run_command(op_command("skill_tools", ("list_tools",), {}), columns=_TOOL_COLUMNS)


@tools_app.command("show")
def tools_show(
    name: str,
    version: Annotated[int, typer.Option(help="A version (default: the current one).")] = 0,
) -> None:
    """A tool with its code, test and description."""
    run_command(op_command("skill_tools", ("get_tool",), {"name": name, "version": version}))


@tools_app.command("delete")
def tools_delete(name: str) -> None:
    """Delete a tool (yours, or any as an admin): it leaves the catalogue; its versions and folder go."""
    run_command(op_command("skill_tools", ("delete_tool",), {"name": name}))


@tools_app.command("promote")
def tools_promote(name: str) -> None:
    """Admin: make a user's tool the tenant's (listed to everyone)."""
    run_command(op_command("skill_tools", ("promote_tool",), {"name": name}))
