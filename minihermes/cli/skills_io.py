"""``minihermes skills import PATH [--approve]`` and ``minihermes skills export DIR``: skill folders (SKILL.md
with its references, scripts and assets) between this machine and the node (embedded or remote).

``import`` takes a folder (a collection of ``<name>/SKILL.md`` folders, or one skill folder), a ``.zip`` /
``.skill`` archive or a tarball. A folder is read here (links out of it, oversized files: refused, with a
reason each) and sent one skill at a time as a zip, with a progress bar; an archive goes as it is. The node
checks everything again. Imported skills are candidates until an admin approves them (``--approve``, an
admin's import, approves at once). ``export`` writes ``DIR/<folder>/SKILL.md`` and every file, byte for
byte as imported (plus one line of our keys in the front matter).
"""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from minihermes.runtime import ActorError
from minihermes.skills import bundles

from ._backend import Backend, CommandError, Remote, reply_body
from .commands import pick_op, run_command
from .skills import _progress, import_files, skill_files, skills_app

_LIMITS = bundles.Limits()


def _local_skills(path: Path) -> tuple[list[bundles.SkillFolder], list[dict[str, str]], list[dict[str, str]]]:
    """The skill folders under ``path`` as this machine sees them, with local refusals and warnings."""
    try:
        entries, bad, runnable = bundles.read_folder("import", str(path.resolve()), _LIMITS)
    except ActorError as e:
        raise CommandError(e.code, e.message, "path") from None
    refused: list[dict[str, str]] = []
    found, stray = bundles.group(entries, bad, refused, lone_name=path.resolve().name, executable=runnable)
    for skill in found:
        refused.extend({"skill": skill.folder, **r} for r in skill.refused)
    return found, refused, [{"skill": "", "message": w} for w in stray]


async def _upload(backend: Remote, data: bytes, approve: bool) -> Any:
    import httpx

    try:
        resp = await backend.client.post(
            "/api/v1/skills/import",
            content=data,
            params={"approve": "true"} if approve else {},
            headers={"content-type": "application/octet-stream"},
        )
    except httpx.HTTPError as e:
        raise CommandError("connection_failed", f"{backend.where}: {type(e).__name__}: {e}") from None
    return reply_body(resp)


def _read(path: Path) -> bytes | None:
    """An archive's bytes; None for a folder."""
    if path.is_dir():
        return None
    if not path.is_file():
        raise CommandError("not_found", f"{path} is not a folder or an archive", "path")
    if path.stat().st_size > _LIMITS.max_archive_bytes:
        raise CommandError("invalid_argument", f"{path} is larger than {_LIMITS.max_archive_bytes} bytes")
    return path.read_bytes()


async def import_path(backend: Backend, console: Console, path: Path, approve: bool) -> dict[str, Any]:
    """Import ``path`` (folder or archive); one call per skill for a folder, with a progress bar."""
    op = await pick_op(backend, "skill_store", ("import_skills",))
    imported: list[dict[str, Any]] = []
    refused: list[dict[str, str]] = []
    warnings: list[dict[str, str]] = []
    failed: list[dict[str, Any]] = []
    errors: list[CommandError] = []

    async def send(label: str, data: bytes) -> None:
        payload = {"archive": base64.b64encode(data).decode("ascii"), "approve": approve}
        try:
            if isinstance(backend, Remote):  # the upload endpoint: the JSON op route caps bodies at 1 MiB
                reply = await _upload(backend, data, approve)
            else:
                reply = await backend.ask("skill_store", op, payload)
        except CommandError as e:
            failed.append({"skill": label, "error": f"{e.code}: {e.message}"})
            errors.append(e)
            return
        imported.extend(reply.get("imported", []))
        refused.extend(reply.get("refused", []))
        warnings.extend(reply.get("warnings", []))

    data = await asyncio.to_thread(_read, path)
    if data is not None:
        await send(path.name, data)
    else:
        found, refused, warnings = await asyncio.to_thread(_local_skills, path)
        if not found:  # a folder of plain .md files (the older layout): sent as texts
            return await import_files(backend, console, skill_files(path))
        with _progress(console) as progress:
            task = progress.add_task("importing skills", total=len(found))
            for skill in found:
                name = skill.folder.rsplit("/", 1)[-1] or path.name
                files = {f"{name}/SKILL.md": skill.skill_md}
                files.update({f"{name}/{rel}": data for rel, data in skill.files.items()})
                runnable = {f"{name}/{rel}" for rel in skill.executable}  # a script's bit goes with it
                await send(name, bundles.write_zip(files, runnable))
                progress.advance(task)
    if errors and not imported:
        raise errors[0]  # nothing went in: the node's refusal is the answer (exit code 1)
    return {
        "status": "ok" if not failed else "partial",
        "imported": imported,
        "count": len(imported),
        "refused": refused,
        "warnings": warnings,
        "failed": failed,
    }


def _write(folder: Path, docs: list[dict[str, Any]]) -> int:
    return bundles.write_folder("export", os.path.abspath(folder), docs)


async def export_path(backend: Backend, console: Console, folder: Path, status: str) -> dict[str, Any]:
    """Write every skill the node exports as ``folder/<name>/`` (SKILL.md and files), with a progress bar."""
    op = await pick_op(backend, "skill_store", ("export_skills",))
    reply = await backend.ask("skill_store", op, {"status": status, "with_files": True})
    docs = reply.get("documents", [])
    with _progress(console) as progress:
        task = progress.add_task("exporting skills", total=len(docs))
        for doc in docs:
            doc["file_bytes"] = {f["path"]: base64.b64decode(f["data"]) for f in doc.get("files") or []}
            progress.advance(task)
    try:
        written = await asyncio.to_thread(_write, folder, docs)
    except ActorError as e:
        raise CommandError(e.code, e.message, "path") from None
    return {"status": "ok", "written": written, "count": len(docs), "folder": str(folder)}


@skills_app.command("import")
def skills_import(
    path: Annotated[
        Path,
        typer.Argument(
            help="A folder of <name>/SKILL.md folders, one skill folder, or a .zip/.skill/.tar.gz."
        ),
    ],
    approve: Annotated[bool, typer.Option(help="Approve at once (admin): active, trusted.")] = False,
) -> None:
    """Import skill folders from this machine (candidates until an admin approves them)."""

    async def body(backend: Backend, console: Console) -> Any:
        return await import_path(backend, Console(stderr=True), path, approve)

    run_command(body, columns=["skill_id", "name", "version", "status", "files", "unchanged"])


@skills_app.command("export")
def skills_export(
    folder: Annotated[Path, typer.Argument(help="Where to write <name>/ skill folders.")],
    status: Annotated[str, typer.Option(help="Only skills with this status.")] = "",
) -> None:
    """Export skills as skill folders (SKILL.md and every file) on this machine."""

    async def body(backend: Backend, console: Console) -> Any:
        return await export_path(backend, Console(stderr=True), folder, status)

    run_command(body)
