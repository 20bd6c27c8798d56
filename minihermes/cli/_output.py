"""How the CLI shows replies: JSON for scripts (``--json``), tables and key/value panels for people."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

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


def _cell(value: Any, column: str = "") -> str:
    if column.endswith("_at") and isinstance(value, int | float) and not isinstance(value, bool):
        # Epoch seconds, as the actors keep them: shown as UTC time.
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, dict | list):
        text = json.dumps(value, default=str, ensure_ascii=False)
    else:
        text = "" if value is None else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def table(title: str, rows: list[dict[str, Any]], columns: list[str] | None = None) -> Table:
    """Rows as a table; the columns are the given ones that occur, else every key of the first rows."""
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows[:20]:
            for k in r:
                seen.setdefault(k, None)
        columns = list(seen)
    else:
        present = {k for r in rows for k in r}
        columns = [c for c in columns if c in present] or sorted(present)
    t = Table(title=title, show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(_cell(r.get(c), c) for c in columns))
    return t


def show(
    console: Console, reply: Any, *, as_json: bool, columns: list[str] | None = None, title: str = ""
) -> None:
    """A reply as JSON, or as a table when it holds a list of records, or as key/value lines."""
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
        for k, v in reply.items():
            if k == "status" and v == "ok":
                continue
            console.print(f"[bold]{k}[/bold]: {_cell(v, k) if not isinstance(v, str) else v}")
        return
    console.print(reply)
