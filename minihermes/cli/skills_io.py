"""``minihermes skills import PATH [--approve]`` and ``minihermes skills export DIR``: skill folders (SKILL.md
with its references, scripts and assets) between this machine and the node (embedded or remote).

``import`` takes a folder (a collection of ``<name>/SKILL.md`` folders, or one skill folder), a ``.zip`` /
``.skill`` archive or a tarball. A folder is read here (links out of it, oversized files: refused, with a
reason each) and sent one skill at a time as a zip, with a progress bar; an archive goes as it is. The node
checks everything again. Imported skills are candidates until an admin approves them (``--approve``, an
admin's import, approves at once). ``export`` writes ``DIR/<folder>/SKILL.md`` and every file, byte for
byte as imported (plus one line of our keys in the front matter).

Folders and archives on disk are the operator's, so both commands are confined (``confine``): the path must
be inside the skills folder root (``MINIHERMES_SKILLS_IO_ROOT``; unset: the folder the command runs in) and
never in the node's data dir (``--data-dir``: the database, ``credential.key``, every tenant's workspaces),
links resolved. A folder being read leaves the data dir out; an export writes through no link. The node
itself never reads or writes a folder for a request (``skill_store.import_skills`` takes archives only).
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
from ._connection import connection
from .commands import pick_op, run_command
from .skills import _progress, import_files, skill_files, skills_app

_LIMITS = bundles.Limits()
IO_ROOT_ENV = "MINIHERMES_SKILLS_IO_ROOT"
"""The folder under which ``skills import`` reads and ``skills export`` writes (default: the working folder)."""


def io_root() -> Path:
    """The skills folder root: ``MINIHERMES_SKILLS_IO_ROOT``, or the folder the command runs in."""
    configured = os.environ.get(IO_ROOT_ENV, "").strip()
    return Path(os.path.realpath(os.path.expanduser(configured) if configured else os.getcwd()))


def confine(op: str, path: Path, *, root: Path | None = None, protect: list[Path] | None = None) -> Path:
    """``path`` resolved (links followed), when it is inside ``root`` (``io_root()``) and not in a
    ``protect`` folder (the connection's data dir); else ``CommandError`` ``permission_denied`` naming
    the setting."""
    root = Path(os.path.realpath(root if root is not None else io_root()))
    real = Path(os.path.realpath(os.path.expanduser(str(path))))
    if os.path.commonpath([real, root]) != str(root):
        raise CommandError(
            "permission_denied",
            f"{op}: {path} is outside the skills folder root {root}; skill folders and archives are read and "
            f"written only below it (set {IO_ROOT_ENV} to choose another root)",
            "path",
        )
    try:
        bundles.check_unprotected(op, str(real), [str(p) for p in _protected(protect)])
    except ActorError as e:
        raise CommandError(e.code, e.message, "path") from None
    return real


def _protected(protect: list[Path] | None) -> list[Path]:
    return protect if protect is not None else [connection().data_dir]


def _in_any(path: Path, guarded: list[str]) -> bool:
    try:
        bundles.check_unprotected("import", str(path), guarded)
    except ActorError:
        return True
    return False


def _local_skills(
    path: Path, protect: list[Path] | None = None
) -> tuple[list[bundles.SkillFolder], list[dict[str, str]], list[dict[str, str]]]:
    """The skill folders under ``path`` as this machine sees them, with local refusals and warnings."""
    guarded = [str(p) for p in _protected(protect)]
    try:
        entries, bad, runnable = bundles.read_folder("import", str(path.resolve()), _LIMITS, protect=guarded)
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


async def import_path(
    backend: Backend,
    console: Console,
    path: Path,
    approve: bool,
    *,
    root: Path | None = None,
    protect: list[Path] | None = None,
) -> dict[str, Any]:
    """Import ``path`` (folder or archive, ``confine``d to ``root`` and out of ``protect``); one call per
    skill for a folder, with a progress bar."""
    path = confine("import", path, root=root, protect=protect)
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
        found, refused, warnings = await asyncio.to_thread(_local_skills, path, protect)
        if not found:  # a folder of plain .md files (the older layout): sent as texts
            guarded = [str(g) for g in _protected(protect)]
            texts = [f for f in skill_files(path) if not _in_any(f, guarded)]
            return await import_files(backend, console, texts)
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


def _write(folder: Path, docs: list[dict[str, Any]], protect: list[Path]) -> int:
    return bundles.write_folder("export", str(folder), docs, protect=[str(p) for p in protect])


async def export_path(
    backend: Backend,
    console: Console,
    folder: Path,
    status: str,
    *,
    root: Path | None = None,
    protect: list[Path] | None = None,
) -> dict[str, Any]:
    """Write every skill the node exports as ``folder/<name>/`` (SKILL.md and files), with a progress bar;
    ``folder`` is ``confine``d to ``root`` and out of ``protect`` (no skill folder lands in the data dir)."""
    shown = folder
    folder = confine("export", folder, root=root, protect=protect)
    op = await pick_op(backend, "skill_store", ("export_skills",))
    reply = await backend.ask("skill_store", op, {"status": status, "with_files": True})
    docs = reply.get("documents", [])
    with _progress(console) as progress:
        task = progress.add_task("exporting skills", total=len(docs))
        for doc in docs:
            doc["file_bytes"] = {f["path"]: base64.b64decode(f["data"]) for f in doc.get("files") or []}
            progress.advance(task)
    try:
        written = await asyncio.to_thread(_write, folder, docs, _protected(protect))
    except ActorError as e:
        raise CommandError(e.code, e.message, "path") from None
    return {"status": "ok", "written": written, "count": len(docs), "folder": str(shown)}


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
    """Import skill folders from this machine (candidates until an admin approves them). PATH must be
    inside MINIHERMES_SKILLS_IO_ROOT (default: the current folder) and not in the data dir."""

    async def body(backend: Backend, console: Console) -> Any:
        return await import_path(backend, Console(stderr=True), path, approve)

    run_command(body, columns=["skill_id", "name", "version", "status", "files", "unchanged"])


@skills_app.command("export")
def skills_export(
    folder: Annotated[Path, typer.Argument(help="Where to write <name>/ skill folders.")],
    status: Annotated[str, typer.Option(help="Only skills with this status.")] = "",
) -> None:
    """Export skills as skill folders (SKILL.md and every file) on this machine. FOLDER must be inside
    MINIHERMES_SKILLS_IO_ROOT (default: the current folder) and not in the data dir."""

    async def body(backend: Backend, console: Console) -> Any:
        return await export_path(backend, Console(stderr=True), folder, status)

    run_command(body)
