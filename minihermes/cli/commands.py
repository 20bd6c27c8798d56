"""Scripting commands: ``minihermes cron|kanban|memory ...`` and ``minihermes call`` (skills, goals and mcp
have their own modules).

Each command is one actor op (or a few, for imports and exports), run on the embedded node of ``--data-dir``
or on a running server (``--url``, with ``--token-env`` naming the variable that holds a JWT or API key).
``--json`` prints the op's reply as JSON; otherwise a table. A subsystem the node does not run is reported as
"not enabled" (exit code 3); an op's error as ``code: message`` (exit code 1).
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from minihermes.runtime import ConfigError

from ._backend import Backend, CommandError, open_backend
from ._connection import ConnectedTyper, connection
from ._output import show

EXIT_ERROR = 1
EXIT_NOT_ENABLED = 3


class NotEnabled(Exception):
    def __init__(self, actor: str, where: str) -> None:
        super().__init__(f"{actor} is not enabled on {where}")


async def pick_op(backend: Backend, actor: str, candidates: tuple[str, ...]) -> str:
    """The first of ``candidates`` the actor offers (subsystems name some ops differently across versions);
    ``NotEnabled`` when the actor is absent."""
    ops = await backend.ops(actor)
    if not ops:
        raise NotEnabled(actor, backend.where)
    for op in candidates:
        if op in ops:
            return op
    raise CommandError(
        "unknown_op", f"{actor} offers none of {', '.join(candidates)} (it has: {', '.join(sorted(ops))})"
    )


def run_command(
    body: Callable[[Backend, Console], Awaitable[Any]],
    *,
    columns: list[str] | None = None,
    title: str = "",
    as_json: bool | None = None,
) -> None:
    """Open the backend the shared options name, run ``body``, show its reply (as JSON with ``--json`` or
    ``as_json``); map failures to exit codes."""
    conn = connection()
    console = Console()
    err = Console(stderr=True)

    async def main() -> Any:
        async with open_backend(url=conn.url, data_dir=conn.data_dir, token=conn.token) as backend:
            return await body(backend, console)

    try:
        reply = asyncio.run(main())
    except NotEnabled as e:
        err.print(f"[yellow]not enabled[/yellow]: {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(EXIT_NOT_ENABLED) from None
    except CommandError as e:
        where = f" (field {e.field})" if e.field else ""
        err.print(f"[red]error[/red] {escape(f'{e.code}: {e.message}{where}')}", soft_wrap=True)
        raise typer.Exit(EXIT_ERROR) from None
    except (OSError, ConfigError) as e:  # the data dir cannot be used: say so, no traceback
        err.print(f"[red]error[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(EXIT_ERROR) from None
    if reply is not None:
        show(
            console, reply, as_json=conn.as_json if as_json is None else as_json, columns=columns, title=title
        )


def op_command(
    actor: str, candidates: tuple[str, ...], payload: dict[str, Any]
) -> Callable[[Backend, Console], Awaitable[Any]]:
    """A body that calls one op (the first of ``candidates`` the actor has) with ``payload``."""

    async def body(backend: Backend, console: Console) -> Any:
        op = await pick_op(backend, actor, candidates)
        return await backend.ask(actor, op, {k: v for k, v in payload.items() if v is not None})

    return body


# -- call -----------------------------------------------------------------------------------------------------


def call(
    actor: Annotated[str, typer.Argument(help="Actor name, e.g. memory")],
    op: Annotated[str, typer.Argument(help="Op name, e.g. list_memories")],
    payload: Annotated[str, typer.Argument(help="Arguments as a JSON object")] = "{}",
) -> None:
    """Call any actor op (see docs/agent.md); prints the reply as JSON."""
    try:
        args = json.loads(payload)
    except ValueError as e:
        typer.echo(f"error: the arguments are not JSON: {e}", err=True)
        raise typer.Exit(2) from None
    if not isinstance(args, dict):
        typer.echo("error: the arguments must be a JSON object", err=True)
        raise typer.Exit(2)

    async def body(backend: Backend, console: Console) -> Any:
        if not await backend.has_actor(actor):
            raise NotEnabled(actor, backend.where)
        return await backend.ask(actor, op, args)

    run_command(body, as_json=True)


# -- memory ---------------------------------------------------------------------------------------------------

memory_app = ConnectedTyper(help="Memories: list, search, store, forget.", no_args_is_help=True)
_MEMORY_COLUMNS = ["key", "value", "scope", "tier", "score", "updated_at", "expires_at"]


@memory_app.command("list")
def memory_list(
    scope: Annotated[str, typer.Option(help="global, agent or session (default: all)")] = "",
    tier: Annotated[str, typer.Option(help="core, reachable or deep (default: all)")] = "",
    kind: Annotated[str, typer.Option(help="semantic, episodic or declarative (default: all)")] = "",
    episodes: Annotated[bool, typer.Option("--episodes", help="Include the per-turn episodes.")] = False,
    offset: Annotated[int, typer.Option(help="Skip this many (paging).")] = 0,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 100,
) -> None:
    """List memories (the per-turn episodes only with --episodes or --kind episodic)."""
    args = {"scope": scope, "tier": tier, "kind": kind, "include_episodes": episodes, "offset": offset}
    run_command(op_command("memory", ("list_memories",), {**args, "limit": limit}), columns=_MEMORY_COLUMNS)


@memory_app.command("search")
def memory_search(
    query: Annotated[str, typer.Argument(help="Words to look for.")],
    limit: Annotated[int, typer.Option(help="At most this many.")] = 10,
    episodes: Annotated[bool, typer.Option("--episodes", help="Include the per-turn episodes.")] = False,
) -> None:
    """Search memories, best first (stated facts before episodes; episodes only with --episodes)."""
    args = {"query": query, "limit": limit, "include_episodes": episodes}
    run_command(op_command("memory", ("search_memories",), args), columns=_MEMORY_COLUMNS)


@memory_app.command("store")
def memory_store(
    key: Annotated[str, typer.Argument(help="Short key, e.g. favourite_colour")],
    value: Annotated[str, typer.Argument(help="The fact.")],
    scope: Annotated[str, typer.Option(help="global, agent or session")] = "global",
    tier: Annotated[str, typer.Option(help="core, reachable or deep")] = "reachable",
    ttl: Annotated[
        int,
        typer.Option(
            "--ttl",
            metavar="SECONDS",
            help="Forget it after this many seconds; 0: the kind's default (memory's ttl_defaults); -1: never.",
        ),
    ] = 0,
) -> None:
    """Remember a fact."""
    payload: dict[str, Any] = {"key": key, "value": value, "scope": scope, "tier": tier}
    if ttl:  # 0 is the op's own default: a server without expiry still takes the command
        payload["ttl_seconds"] = ttl
    run_command(op_command("memory", ("store_memory",), payload))


@memory_app.command("forget")
def memory_forget(
    key: Annotated[str, typer.Argument(help="The key to forget.")],
    scope: Annotated[str, typer.Option(help="global, agent or session")] = "global",
) -> None:
    """Forget a fact."""
    run_command(op_command("memory", ("delete_memory", "forget_memory"), {"key": key, "scope": scope}))


# -- cron -----------------------------------------------------------------------------------------------------


class Action(enum.StrEnum):
    """What a cron job's run does (``cron_scheduler.create_job``'s ``action``)."""

    run = "run"
    notify = "notify"


cron_app = ConnectedTyper(help="Cron jobs: list, create, pause, resume, run now, runs.", no_args_is_help=True)
_JOB_COLUMNS = ["job_id", "action", "schedule", "status", "next_run_at", "prompt"]


def _cron(op: tuple[str, ...], payload: dict[str, Any], **kw: Any) -> None:
    run_command(op_command("cron_scheduler", op, payload), **kw)


@cron_app.command("list")
def cron_list(status: Annotated[str, typer.Option(help="Only jobs with this status.")] = "") -> None:
    """List cron jobs."""
    _cron(("list_jobs",), {"status": status}, columns=_JOB_COLUMNS)


@cron_app.command("show")
def cron_show(job_id: str) -> None:
    """A job and its latest run."""
    _cron(("get_job",), {"job_id": job_id})


@cron_app.command("create")
def cron_create(
    job_id: Annotated[str, typer.Argument(help="Job id, e.g. daily-report")],
    schedule: Annotated[
        str, typer.Option(help="Cron expression or interval, e.g. '0 9 * * *' or 'every 1h'")
    ],
    prompt: Annotated[
        str,
        typer.Option(
            help="What the agent is asked on each run (--action run), or the reminder's text (notify)."
        ),
    ],
    action: Annotated[
        Action,
        typer.Option(
            help="run: the agent runs the prompt and its answer reaches your notifications; notify: a "
            "reminder, the prompt's text itself reaches your notifications (no model call).",
        ),
    ] = Action.run,
    session: Annotated[str, typer.Option(help="Session id (default: the job id).")] = "",
    tz: Annotated[str, typer.Option(help="Time zone of the schedule.")] = "UTC",
    replace: Annotated[bool, typer.Option(help="Redefine an existing job.")] = False,
) -> None:
    """Create a cron job: a run of the agent, or a reminder (--action notify)."""
    payload = {
        "job_id": job_id,
        "schedule": schedule,
        "prompt": prompt,
        "action": action.value,
        "session_id": session,
        "tz": tz,
        "replace": replace,
    }
    _cron(("create_job",), payload)


def _job_op(name: str, ops: tuple[str, ...], doc: str) -> None:
    def command(job_id: str) -> None:
        _cron(ops, {"job_id": job_id})

    command.__doc__ = doc
    cron_app.command(name)(command)


_job_op("pause", ("pause_job",), "Pause a job (no runs until resumed).")
_job_op("resume", ("resume_job",), "Resume a paused job.")
_job_op("run-now", ("run_now", "run_job_now"), "Run a job now, outside its schedule.")
_job_op("delete", ("delete_job",), "Delete a job.")


@cron_app.command("runs")
def cron_runs(
    job_id: str,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 20,
) -> None:
    """A job's runs and their results."""
    _cron(
        ("job_runs", "list_runs"),
        {"job_id": job_id, "limit": limit},
        columns=["run_id", "scheduled_at", "status", "attempt", "result", "error"],
    )


# -- kanban ---------------------------------------------------------------------------------------------------

kanban_app = ConnectedTyper(help="The kanban board: list, create, move, show.", no_args_is_help=True)
_TASK_COLUMNS = ["task_id", "title", "status", "assignee", "priority", "updated_at"]


@kanban_app.command("list")
def kanban_list(status: Annotated[str, typer.Option(help="Only tasks in this column.")] = "") -> None:
    """List the board's tasks."""
    run_command(
        op_command("kanban", ("list", "list_tasks"), {"status": status or None}), columns=_TASK_COLUMNS
    )


@kanban_app.command("create")
def kanban_create(
    title: Annotated[str, typer.Argument(help="The task's title.")],
    body_text: Annotated[str, typer.Option("--body", help="What is to be done.")] = "",
    assignee: Annotated[str, typer.Option(help="Who (or which profile) takes it.")] = "",
    priority: Annotated[int, typer.Option(help="Higher is picked first.")] = 0,
) -> None:
    """Create a task."""
    payload = {
        "title": title,
        "body": body_text or None,
        "assignee": assignee or None,
        "priority": priority or None,
    }
    run_command(op_command("kanban", ("create", "create_task"), payload))


@kanban_app.command("move")
def kanban_move(
    task_id: str,
    status: Annotated[str, typer.Argument(help="The column to move it to.")],
) -> None:
    """Move a task to another column."""
    run_command(op_command("kanban", ("move", "move_task"), {"task_id": task_id, "status": status}))


@kanban_app.command("show")
def kanban_show(task_id: str) -> None:
    """One task with its history."""
    run_command(op_command("kanban", ("show", "get_task"), {"task_id": task_id}))
