"""``minihermes skills ...``: list, show, search, approve, reject, pin, unpin, archive, recover, roll back,
import, export.

Imports and exports move skill folders between this machine and the node (embedded or remote), one skill
at a time with a progress bar (``skills_io.py``): ``import PATH`` reads a folder or an archive here and sends
archives; ``export DIR`` writes ``DIR/<name>/`` here from the node's documents. Both stay inside the skills
folder root (``MINIHERMES_SKILLS_IO_ROOT``, default the current folder) and out of the data dir; the node
never reads or writes a folder for a request.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ._backend import Backend, CommandError
from ._connection import ConnectedTyper, connection
from .commands import op_command, pick_op, run_command

skills_app = ConnectedTyper(
    help="Skills: list, show, approve or reject candidates, pin, archive, roll back, import, export.",
    no_args_is_help=True,
)
_SKILL_COLUMNS = ["skill_id", "name", "status", "pinned", "version", "uses", "success_rate", "description"]
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


@skills_app.command("list")
def skills_list(
    status: Annotated[
        str, typer.Option(help="candidate, active, stale, archived or pinned (default: all)")
    ] = "",
    limit: Annotated[int, typer.Option(help="At most this many.")] = 1000,
) -> None:
    """List skills, newest first."""
    run_command(
        op_command("skill_store", ("list_skills",), {"status": status, "limit": limit}),
        columns=_SKILL_COLUMNS,
    )


@skills_app.command("show")
def skills_show(
    skill_id: str,
    version: Annotated[int, typer.Option(help="A version (default: the current one).")] = 0,
) -> None:
    """A skill with its procedure, every field whole; a candidate says what holds it back."""

    async def body(backend: Backend, console: Console) -> Any:
        reply = await op_command("skill_store", ("get_skill",), {"skill_id": skill_id, "version": version})(
            backend, console
        )
        skill = reply.get("skill") if isinstance(reply, dict) else None
        if not connection().as_json and isinstance(skill, dict) and skill.get("status") == "candidate":
            console.print(Text("Not live yet: " + " ".join(held_back(skill)), style="yellow"))
            console.print(
                Text(
                    f"Approve: minihermes skills approve {skill_id}; "
                    f"reject: minihermes skills reject {skill_id} --reason ...",
                    style="dim",
                )
            )
        return reply

    run_command(body)


def held_back(skill: dict[str, Any]) -> list[str]:
    """Why a candidate is not live yet, in words, from its record (``record_evaluation``, ``approve_skill``),
    as the dashboard says it."""
    evaluation = skill.get("evaluation") or None
    approved = set(skill.get("approved_tools") or [])
    unapproved = [t for t in skill.get("tools") or [] if t not in approved]
    reasons = []
    if not isinstance(evaluation, dict):
        reasons.append("It has not been evaluated yet (a skill goes live when its evaluation passes).")
    elif not evaluation.get("passed"):
        reasons.append(f"Its evaluation of v{evaluation.get('version')} failed (see evaluation below).")
    else:
        reasons.append(f"Its evaluation of v{evaluation.get('version')} passed.")
    if skill.get("needs_approval") and unapproved:
        reasons.append(
            f"It uses tools with outside effects ({', '.join(unapproved)}): an admin must approve it."
        )
    elif skill.get("approved_by"):
        reasons.append(f"Approved by {skill['approved_by']}.")
    found = [f for f in skill.get("secret_warnings") or [] if isinstance(f, dict)]
    if found:  # an import's secret-shaped lines: where and what kind, never the secret
        where = "; ".join(f"{f.get('path')} line {f.get('line')}: {f.get('kind')}" for f in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        reasons.append(
            f"It carries something shaped like a secret ({where}{more}): check it before approving."
        )
    return reasons


@skills_app.command("approve")
def skills_approve(skill_id: str) -> None:
    """Approve a candidate skill's tools (admins): it goes live once its evaluation has passed."""

    async def body(backend: Backend, console: Console) -> Any:
        reply = await op_command("skill_store", ("approve_skill",), {"skill_id": skill_id})(backend, console)
        if connection().as_json:
            return reply
        status = reply.get("skill_status")
        if status == "active":
            console.print(Text(f"approved {skill_id}: it is active"))
        elif status == "candidate":
            console.print(
                Text(f"approved {skill_id}: still a candidate, it goes live when its evaluation passes")
            )
        else:
            console.print(Text(f"approved {skill_id} (status {status})"))
        return None

    run_command(body)


@skills_app.command("reject")
def skills_reject(
    skill_id: str,
    reason: Annotated[str, typer.Option(help="Why (kept with the skill and in the audit log).")],
) -> None:
    """Reject a candidate skill (admins): it is archived, never used ('recover' brings it back)."""

    async def body(backend: Backend, console: Console) -> Any:
        reply = await op_command("skill_store", ("reject_skill",), {"skill_id": skill_id, "reason": reason})(
            backend, console
        )
        if connection().as_json:
            return reply
        console.print(Text(f"rejected {skill_id}: archived"))
        return None

    run_command(body)


@skills_app.command("search")
def skills_search(
    query: str,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 10,
) -> None:
    """Search skills by words."""
    run_command(
        op_command("skill_store", ("search_skills",), {"query": query, "limit": limit}),
        columns=[*_SKILL_COLUMNS, "score"],
    )


def _skill_op(name: str, op: str, doc: str) -> None:
    def command(skill_id: str) -> None:
        run_command(op_command("skill_store", (op,), {"skill_id": skill_id}))

    command.__doc__ = doc
    skills_app.command(name)(command)


_skill_op("pin", "pin", "Pin a skill (the curator never archives it).")
_skill_op("unpin", "unpin", "Unpin a skill.")
_skill_op("recover", "recover", "Bring an archived skill back.")


@skills_app.command("archive")
def skills_archive(
    skill_id: str,
    reason: Annotated[str, typer.Option(help="Why (kept with the skill).")] = "",
) -> None:
    """Archive a skill (never deleted; recover brings it back)."""
    run_command(op_command("skill_store", ("archive",), {"skill_id": skill_id, "reason": reason}))


@skills_app.command("rollback")
def skills_rollback(
    skill_id: str,
    version: int,
) -> None:
    """Make an earlier version the current one."""
    run_command(op_command("skill_store", ("rollback",), {"skill_id": skill_id, "version": version}))


def skill_files(folder: Path) -> list[Path]:
    """SKILL.md files under ``folder`` (``<name>/SKILL.md``, or ``*.md`` directly in it), sorted."""
    if not folder.is_dir():
        raise CommandError("not_found", f"{folder} is not a folder", "path")
    found = sorted(p for p in folder.glob("*/SKILL.md") if p.is_file())
    if not found:
        found = sorted(p for p in folder.glob("*.md") if p.is_file())
    return found


async def import_files(backend: Backend, console: Console, files: list[Path]) -> dict[str, Any]:
    """Send each file's text to ``import_skills``, one per call, with a progress bar. A file the node
    refuses is reported and the import goes on."""
    op = await pick_op(backend, "skill_store", ("import_skills",))
    imported: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    with _progress(console) as progress:
        task = progress.add_task("importing skills", total=len(files))
        for path in files:
            try:
                reply = await backend.ask(
                    "skill_store", op, {"documents": [path.read_text(encoding="utf-8")]}
                )
                imported.extend(reply.get("imported", []))
            except CommandError as e:
                failed.append({"file": str(path), "error": f"{e.code}: {e.message}"})
            except (OSError, UnicodeDecodeError) as e:
                failed.append({"file": str(path), "error": str(e)})
            progress.advance(task)
    return {
        "status": "ok" if not failed else "partial",
        "imported": imported,
        "count": len(imported),
        "failed": failed,
    }


async def export_files(backend: Backend, console: Console, folder: Path, status: str) -> dict[str, Any]:
    """Fetch the node's SKILL.md documents and write ``folder/<name>/SKILL.md`` for each, with a progress bar."""
    op = await pick_op(backend, "skill_store", ("export_skills",))
    reply = await backend.ask("skill_store", op, {"status": status})
    docs = reply.get("documents", [])
    written: list[str] = []
    with _progress(console) as progress:
        task = progress.add_task("exporting skills", total=len(docs))
        for doc in docs:
            name = _SAFE_NAME.sub("_", str(doc["name"])).lstrip(".") or "skill"
            target = folder / name / "SKILL.md"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(doc["skill_md"], encoding="utf-8")
            written.append(str(target))
            progress.advance(task)
    return {"status": "ok", "written": written, "count": len(written)}
