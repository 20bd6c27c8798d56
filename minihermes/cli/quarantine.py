"""``minihermes quarantine list|confirm|discard``: memories and skills held for confirmation because they came
from untrusted content (a web page, a file, an MCP or tool result), embedded or against a server.

A held memory is ``memory.list_quarantined`` / ``confirm_memory`` / ``discard_memory``; a held skill is
``skill_store.list_quarantined`` / ``confirm_skill`` / ``discard_skill`` (docs/security.md). ``confirm`` and
``discard`` take the id ``list`` shows; a memory's id says its kind (``mem:...`` or ``memp:...``), so
``--kind`` is needed only to override that. A user sees and decides on their own; an admin on the tenant's.
"""

from __future__ import annotations

import enum
import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from ._backend import Backend, CommandError
from ._connection import ConnectedTyper, connection
from .commands import NotEnabled, pick_op, run_command

quarantine_app = ConnectedTyper(
    help="Memories and skills held because they came from untrusted content: list, confirm, discard.",
    no_args_is_help=True,
)
MEMORY_ID_PREFIXES = ("mem:", "memp:")
"""How memory's held ids begin (its record keys); a skill's id is anything else (``skill-...``)."""
_SHOWN = 300
"""Characters of a held value shown in the list (``--json`` has it whole)."""


class Kind(enum.StrEnum):
    """What an id names; ``auto``: a memory when it looks like one (``MEMORY_ID_PREFIXES``), else a skill."""

    auto = "auto"
    memory = "memory"
    skill = "skill"


class Listed(enum.StrEnum):
    all = "all"
    memory = "memory"
    skill = "skill"


def kind_of(item_id: str, kind: Kind = Kind.auto) -> Kind:
    if kind is not Kind.auto:
        return kind
    return Kind.memory if item_id.startswith(MEMORY_ID_PREFIXES) else Kind.skill


async def held(backend: Backend, listed: Listed = Listed.all, user: str = "") -> dict[str, Any]:
    """What the caller may confirm: ``{memories, skills, count}``. With ``all``, a kind whose op this node
    does not run (or the caller may not call) is left out; asked for by name, its absence is an error."""
    reply: dict[str, Any] = {"status": "ok", "memories": [], "skills": []}
    args: dict[str, Any] = {"limit": 1000, **({"user_id": user} if user else {})}
    if listed is not Listed.skill:
        if listed is Listed.memory or await backend.may("memory", "list_quarantined"):
            await pick_op(backend, "memory", ("list_quarantined",))
            mem = await backend.ask("memory", "list_quarantined", args)
            reply["memories"] = mem.get("memories", [])
            reply["memories_total"] = mem.get("total", len(reply["memories"]))
    if listed is not Listed.memory:
        if listed is Listed.skill or await backend.may("skill_store", "list_quarantined"):
            await pick_op(backend, "skill_store", ("list_quarantined",))
            reply["skills"] = (await backend.ask("skill_store", "list_quarantined", args)).get("skills", [])
    reply["count"] = len(reply["memories"]) + len(reply["skills"])
    return reply


def _plain(value: Any, limit: int = 0) -> str:
    """A field as one line of text (records as JSON), cut to ``limit`` characters when given."""
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else str(value or "")
    # Untrusted text: whitespace folded, and no control character (an escape sequence) reaches the terminal.
    text = "".join(c if c.isprintable() else " " for c in " ".join(text.split()))
    return text[: limit - 1] + "…" if limit and len(text) > limit else text


def _when(at: Any) -> str:
    if not isinstance(at, int | float) or not at:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _skill_source(skill: dict[str, Any]) -> str:
    """A skill's ``provenance.source`` and the untrusted results its turn had seen: "agent after tool:read_file"."""
    prov = skill.get("provenance")
    source = str(prov.get("source") or "") if isinstance(prov, dict) else str(prov or "")
    sources = [str(x) for x in skill.get("untrusted_sources") or []]
    return f"{source or 'unknown'} after {', '.join(sources)}" if sources else source


def rows(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """Memories and skills as one table's rows, newest first."""
    out = [
        {
            "kind": "memory",
            "id": m.get("id"),
            "name": m.get("key"),
            "content": m.get("value"),
            "provenance": m.get("provenance"),
            "user": m.get("user_id"),
            "quarantined_at": m.get("quarantined_at"),
        }
        for m in reply.get("memories", [])
    ]
    out += [
        {
            "kind": "skill",
            "id": s.get("skill_id"),
            "name": s.get("name"),
            "content": s.get("procedure") or s.get("description"),
            "provenance": _skill_source(s),
            "user": s.get("owner"),
            "quarantined_at": s.get("quarantined_at") or s.get("created_at"),
        }
        for s in reply.get("skills", [])
    ]
    out.sort(key=lambda r: -float(r["quarantined_at"] or 0))
    return out


@quarantine_app.command("list")
def quarantine_list(
    kind: Annotated[Listed, typer.Option(help="memory, skill or all.")] = Listed.all,
    user: Annotated[str, typer.Option(help="Admins: only this user's.")] = "",
) -> None:
    """What waits for your confirmation (an admin: the tenant's), newest first."""

    async def body(backend: Backend, console: Console) -> Any:
        reply = await held(backend, kind, user)
        if connection().as_json:
            return reply
        found = rows(reply)
        if not found:
            console.print("[dim]nothing held for confirmation[/dim]")
            return None
        for row in found:  # a block each: ids are long, and a table would wrap them into unreadable columns
            console.print(Text(f"{row['kind']} {row['id']}", style="bold"), soft_wrap=True)
            about = [_plain(row["provenance"]) or "unknown", _when(row["quarantined_at"])]
            if row["user"]:
                about.append(f"user {row['user']}")
            console.print(Text(f"  from {', '.join(about)}", style="dim"), soft_wrap=True)
            console.print(Text(f"  {row['name']}: {_plain(row['content'], _SHOWN)}"), soft_wrap=True)
        console.print(
            Text(
                "confirm: minihermes quarantine confirm ID; discard: minihermes quarantine discard ID", "dim"
            ),
            soft_wrap=True,
        )
        return None

    run_command(body)


_OPS = {
    ("confirm", Kind.memory): ("memory", "confirm_memory", "id"),
    ("discard", Kind.memory): ("memory", "discard_memory", "id"),
    ("confirm", Kind.skill): ("skill_store", "confirm_skill", "skill_id"),
    ("discard", Kind.skill): ("skill_store", "discard_skill", "skill_id"),
}


def _decide(action: str, item_id: str, kind: Kind) -> None:
    actor, op, field = _OPS[(action, kind_of(item_id, kind))]

    async def body(backend: Backend, console: Console) -> Any:
        if not await backend.has_actor(actor):
            raise NotEnabled(actor, backend.where)
        if op not in await backend.ops(actor):
            raise CommandError("unknown_op", f"{actor} on {backend.where} has no {op}: it holds nothing")
        return await backend.ask(actor, op, {field: item_id})

    run_command(body)


_KIND_HELP = "memory or skill (default: a memory when the id begins with mem: or memp:, else a skill)."


@quarantine_app.command("confirm")
def quarantine_confirm(
    item_id: Annotated[str, typer.Argument(metavar="ID", help="The id `quarantine list` shows.")],
    kind: Annotated[Kind, typer.Option(help=_KIND_HELP)] = Kind.auto,
) -> None:
    """Confirm a held memory or skill: from now on it is recalled (a skill: matched) like any other."""
    _decide("confirm", item_id, kind)


@quarantine_app.command("discard")
def quarantine_discard(
    item_id: Annotated[str, typer.Argument(metavar="ID", help="The id `quarantine list` shows.")],
    kind: Annotated[Kind, typer.Option(help=_KIND_HELP)] = Kind.auto,
) -> None:
    """Discard a held memory (it is never stored) or skill (it is archived)."""
    _decide("discard", item_id, kind)
