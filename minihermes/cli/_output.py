"""How the CLI shows replies: JSON for scripts (``--json``), tables and key/value panels for people.

Lists become tables whose cells are cut to ``_MAX_CELL`` characters (a row per record stays readable); a
single record (``show`` commands, an op's reply) is shown whole: every field, nested records as nested
key/value blocks, lists of records as tables, long text wrapped to the terminal, never cut. Text is printed
as text, never read as console markup (a skill's procedure may well contain ``[bold]``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

LIST_KEYS = (
    "skills",
    "jobs",
    "runs",
    "tasks",
    "cards",
    "memories",
    "servers",
    "goals",
    "approvals",
    "tools",
    "imported",
    "providers",
)
_MAX_CELL = 80


def print_json(console: Console, value: Any) -> None:
    console.print_json(json.dumps(value, default=str, ensure_ascii=False))


def _when(value: Any, column: str) -> str | None:
    """Epoch seconds, as the actors keep them in ``*_at`` (and ``at``) fields, as UTC time (0: never, "-");
    None for anything else."""
    if not (column == "at" or column.endswith("_at")):
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _text(value: Any, column: str = "") -> str:
    when = _when(value, column)
    if when is not None:
        return when
    if isinstance(value, dict | list):
        return json.dumps(value, default=str, ensure_ascii=False)
    return "" if value is None else str(value)


def _cell(value: Any, column: str = "", limit: int | None = _MAX_CELL) -> str:
    text = _text(value, column)
    if limit is None:
        return text
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(
    title: str, rows: list[dict[str, Any]], columns: list[str] | None = None, *, full: bool = False
) -> Table:
    """Rows as a table; the columns are the given ones that occur, else every key of the first rows.
    ``full``: every cell whole (wrapped), else cut to ``_MAX_CELL`` characters."""
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows[:20]:
            for k in r:
                seen.setdefault(k, None)
        columns = list(seen)
    else:
        present = {k for r in rows for k in r}
        columns = [c for c in columns if c in present] or sorted(present)
    t = Table(title=title or None, show_lines=full, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold")
    limit = None if full else _MAX_CELL
    for r in rows:
        t.add_row(*(Text(_cell(r.get(c), c, limit)) for c in columns))
    return t


def _records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _value(value: Any, key: str) -> RenderableType:
    """One field, whole: a record as a nested block, records as a table, text wrapped."""
    if isinstance(value, dict) and value:
        return fields(value)
    if _records(value):
        return table("", value, full=True)
    if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
        return Text(", ".join(_text(v) for v in value)) if value else Text("-", style="dim")
    if value is None or value == {}:
        return Text("-", style="dim")
    return Text(_text(value, key))


def fields(record: dict[str, Any], *, skip_ok: bool = False) -> Table:
    """A record as ``key  value`` lines, every field whole (long values wrap, none is cut)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for k, v in record.items():
        if skip_ok and k == "status" and v == "ok":
            continue
        grid.add_row(Text(str(k)), _value(v, str(k)))
    return grid


def detail(reply: dict[str, Any]) -> RenderableType:
    """A reply shown whole: its plain fields first, then each record or list of records under its name."""
    plain = {k: v for k, v in reply.items() if not (isinstance(v, dict) and v) and not _records(v)}
    parts: list[RenderableType] = []
    if any(not (k == "status" and v == "ok") for k, v in plain.items()):
        parts.append(fields(plain, skip_ok=True))
    for k, v in reply.items():
        if k in plain:
            continue
        parts.append(Text(""))
        parts.append(Text(k, style="bold underline"))
        parts.append(fields(v) if isinstance(v, dict) else table("", v, full=True))
    return Group(*parts)


def show(
    console: Console, reply: Any, *, as_json: bool, columns: list[str] | None = None, title: str = ""
) -> None:
    """A reply as JSON, or as a table when it holds a list of records, or whole as key/value lines."""
    if as_json:
        print_json(console, reply)
        return
    if isinstance(reply, dict):
        for key in LIST_KEYS:
            rows = reply.get(key)
            if isinstance(rows, list) and all(isinstance(r, dict) for r in rows):
                if not rows:
                    console.print(f"[dim]no {key}[/dim]")
                else:
                    console.print(table(title or key, rows, columns))
                return
        console.print(detail(reply))
        return
    console.print(Text(_text(reply)))
