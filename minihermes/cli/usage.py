"""``minihermes usage``: LLM spend per period (the ``llm_gateway``'s ``get_usage``), embedded or against a
server like every scripting command; with ``--set-usd`` / ``--set-tokens``, an admin sets a cap
(``set_budget``).

    minihermes usage                                   # today's spend (yours; an admin: the tenant's)
    minihermes usage --period month --limit 12         # the last twelve months
    minihermes usage --scope cron_job --key digest     # one cron job's (admins)
    minihermes usage --scope user --key alice --period day --set-usd 5   # alice: $5 a day (admins)
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ._backend import Backend
from ._connection import connection
from ._output import print_json
from .commands import run_command

_PERIODS = ("day", "month", "total")
_SCOPES = ("tenant", "user", "session", "cron_job", "kanban_worker")


def _usd(value: Any) -> str:
    return "-" if value is None else f"${float(value):.4f}"


def render(reply: dict[str, Any]) -> Group:
    """The usage reply as people read it: the caps, then one row per period and the current one per model."""
    parts: list[Any] = []
    who = reply["scope"] + (f" {reply['key']}" if reply.get("key") else "")
    for cap in reply.get("caps") or []:
        limit = " and ".join(
            x
            for x in (
                _usd(cap["max_usd"]) if cap["max_usd"] is not None else "",
                f"{cap['max_tokens']} tokens" if cap["max_tokens"] is not None else "",
            )
            if x
        )
        line = f"{cap['period']} cap {limit} ({cap['time_zone']}): {cap['percent']:g}% used"
        if cap.get("alerts_sent"):
            line += f"; alerts sent at {', '.join(f'{a:g}%' for a in cap['alerts_sent'])}"
        style = "bold red" if cap["percent"] >= 100 else "yellow" if cap.get("alerts_sent") else ""
        parts.append(Text(line, style=style))
    periods = Table(title=f"usage of {who} per {reply['period']}", title_justify="left")
    for column in ("period", "calls", "input_tokens", "output_tokens", "cost_usd", "unknown_cost_calls"):
        periods.add_column(column)
    for row in reply.get("history") or []:
        periods.add_row(
            row["label"],
            str(row["calls"]),
            str(row["input_tokens"]),
            str(row["output_tokens"]),
            _usd(row["cost_usd"]),
            str(row["unknown_cost_calls"]),
        )
    parts.append(periods)
    current = reply.get("current") or {}
    if current.get("models"):
        models = Table(title=f"{current['label']} per model", title_justify="left")
        for column in ("model", "calls", "input_tokens", "output_tokens", "cost_usd"):
            models.add_column(column)
        for name, row in current["models"].items():
            cost = _usd(row["cost_usd"]) + (" + unknown" if row.get("unknown_cost_calls") else "")
            models.add_row(name, str(row["calls"]), str(row["input_tokens"]), str(row["output_tokens"]), cost)
        parts.append(models)
    return Group(*parts)


def usage(
    scope: Annotated[str, typer.Option(help="tenant, user, session, cron_job or kanban_worker.")] = "",
    key: Annotated[str, typer.Option(help="The user, session, cron job (default: yourself).")] = "",
    period: Annotated[str, typer.Option(help="day, month or total.")] = "day",
    limit: Annotated[int, typer.Option(help="How many past days or months.")] = 31,
    set_usd: Annotated[
        float | None, typer.Option(help="Admins: set a money cap (USD) for this scope, key and period.")
    ] = None,
    set_tokens: Annotated[
        int | None, typer.Option(help="Admins: set a token cap for this scope, key and period.")
    ] = None,
    time_zone: Annotated[str, typer.Option(help="The cap's time zone (IANA), with --set-*.")] = "UTC",
    remove: Annotated[
        bool, typer.Option(help="Admins: remove the cap of this scope, key and period.")
    ] = False,
) -> None:
    """LLM spend per day, month or in total (tokens, USD, per model) and the caps over it. Users see their
    own; admins any scope, and set caps with --set-usd / --set-tokens (or --remove)."""
    if period not in _PERIODS:
        raise typer.BadParameter(f"one of {', '.join(_PERIODS)}", param_hint="--period")
    if scope and scope not in _SCOPES:
        raise typer.BadParameter(f"one of {', '.join(_SCOPES)}", param_hint="--scope")
    setting = set_usd is not None or set_tokens is not None or remove

    async def body(backend: Backend, console: Console) -> Any:
        if setting:
            cap = {
                "scope": scope or "tenant",
                "key": key,
                "max_usd": set_usd,
                "max_tokens": set_tokens,
                "period": period,
                "time_zone": time_zone,
            }
            await backend.ask("llm_gateway", "set_budget", cap)
        reply = await backend.ask(
            "llm_gateway", "get_usage", {"scope": scope, "key": key, "period": period, "limit": limit}
        )
        if connection().as_json:
            print_json(console, reply)
        else:
            console.print(render(reply))
        return None

    run_command(body)
