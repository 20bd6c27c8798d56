"""``minihermes goals ...``: a session's objectives (the ``goals`` actor: ``set_goal``, ``list_goals``,
``complete_goal``, ``clear_goal``), embedded or against a server like every scripting command."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console

from ._backend import Backend, CommandError
from ._connection import ConnectedTyper
from .commands import op_command, pick_op, run_command

goals_app = ConnectedTyper(help="Goals: list, set, complete, clear.", no_args_is_help=True)
_GOAL_COLUMNS = ["goal_id", "session_id", "status", "turns_used", "text"]
_STATUSES = ("active", "completed", "exhausted", "cleared", "all")
DEFAULT_SESSION = "cli"
"""The session ``minihermes chat`` uses by default, so a goal set here is there in the next chat."""


def _status(status: str) -> str:
    if status not in _STATUSES:
        raise typer.BadParameter(f"one of {', '.join(_STATUSES)}", param_hint="--status")
    return "" if status == "all" else status


@goals_app.command("list")
def goals_list(
    status: Annotated[str, typer.Option(help="active, completed, exhausted, cleared or all.")] = "active",
    session: Annotated[str, typer.Option(help="Only this session's goals (default: every session).")] = "",
) -> None:
    """List goals, oldest first (yours and the tenant's; admins see every goal)."""
    payload = {"status": _status(status), "session_id": session}
    run_command(op_command("goals", ("list_goals",), payload), columns=_GOAL_COLUMNS)


@goals_app.command("show")
def goals_show(goal_id: str) -> None:
    """One goal, every field whole."""

    async def body(backend: Backend, console: Console) -> Any:
        op = await pick_op(backend, "goals", ("list_goals",))
        reply = await backend.ask("goals", op, {"status": ""})
        for goal in reply.get("goals", []):
            if goal.get("goal_id") == goal_id:
                return {"status": "ok", "goal": goal}
        raise CommandError("not_found", f"no goal {goal_id}", "goal_id")

    run_command(body)


@goals_app.command("set")
def goals_set(
    text: Annotated[str, typer.Argument(help="The objective, e.g. 'Plan the trip to Porto'.")],
    session: Annotated[
        str,
        typer.Option(
            help=f"The session it belongs to ('*': every session, admins). Default: {DEFAULT_SESSION}"
        ),
    ] = DEFAULT_SESSION,
    max_turns: Annotated[int, typer.Option(help="Turns it may take (0: the node's default).")] = 0,
) -> None:
    """Set a goal: the agent works toward it in every turn of the session until it is done."""
    payload = {"session_id": session, "text": text, "max_turns": max_turns}
    run_command(op_command("goals", ("set_goal",), payload))


@goals_app.command("complete")
def goals_complete(
    goal_id: str,
    reason: Annotated[str, typer.Option(help="Why it is done (kept with the goal).")] = "",
) -> None:
    """Mark an active goal done."""
    run_command(op_command("goals", ("complete_goal",), {"goal_id": goal_id, "reason": reason}))


@goals_app.command("clear")
def goals_clear(goal_id: str) -> None:
    """Drop a goal (it is no longer in any prompt)."""
    run_command(op_command("goals", ("clear_goal",), {"goal_id": goal_id}))
