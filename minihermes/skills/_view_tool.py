"""The agent's ``skill_view`` tool: a skill's body or one of its files, loaded on demand.

The prompt carries matched skills' names and descriptions; when a skill applies, the model calls
``skill_view {name}`` for its instructions and ``skill_view {name, path}`` for a file the instructions name.
Each call also puts the skill's files in the session workspace at ``skills/<name>/`` (written by the
server, mode 0444/0555, left to root when the server runs as root; re-checked by sha256 at every call, so
a changed copy is put back), where ``terminal`` runs its scripts in the sandbox as usual: the stored skill
itself is never reachable from there. In the sandbox, ``skills/`` is a read-only bind mount (see
``SandboxPolicy.readonly_workspace_dirs``): its scripts run and read, nothing there can be changed; without
a mount namespace only the file modes protect it. Unapproved imported content comes back as outside data.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path
from typing import Any

from minihermes.tools.contract import CORE, READ, TRUSTED, Tool, ToolEnv, UntrustedResult
from minihermes.tools.sandbox import make_workspace
from minihermes.tools.workspace import Quota, Workspace, WorkspaceError, safe_component, workspace_path

MOUNT_DIR = "skills"  # one of the sandbox's READONLY_WORKSPACE_DIRS (a test keeps the two in step)


def _bytes(reply: dict[str, Any]) -> bytes:
    content = str(reply.get("content", ""))
    return base64.b64decode(content) if reply.get("encoding") == "base64" else content.encode("utf-8")


Wanted = dict[str, tuple[str, bool | None, bytes | None]]


def _sync(folder: Path, quota: Quota, base: str, wanted: Wanted) -> list[str]:
    """Files of ``wanted`` (``path -> (sha256, executable, bytes or None when unchanged)``) missing or
    different in the workspace; with bytes given, writes them read-only (0555 for a file the skill
    recorded as executable or a ``#!`` script, else 0444). Returns the paths that need bytes."""
    ws = Workspace(folder, quota=quota)
    need = []
    for rel, (digest, runnable, data) in sorted(wanted.items()):
        target = f"{base}/{rel}"
        if data is not None:
            ws.write_file(target, data, readonly=True, executable=runnable)
            continue
        try:
            current = ws.read_bytes(target, max_bytes=64 * 1024 * 1024)
        except WorkspaceError:
            need.append(rel)
            continue
        if hashlib.sha256(current).hexdigest() != digest:
            need.append(rel)
    return need


async def mount(env: ToolEnv, skill_id: str, name: str) -> str:
    """Copy the skill's files (as the caller sees them) into ``skills/<name>/`` of the session workspace,
    read-only; returns that folder. Only changed or missing files are fetched."""
    root = env.workspace_root
    assert root is not None
    folder = await asyncio.to_thread(
        make_workspace, workspace_path(root, env.tenant, env.namespace, env.session_id), env.sandbox_policy
    )
    quota = Quota(env.terminal_limits.workspace_bytes, env.terminal_limits.workspace_files)
    skill = (await env.host.ask("skill_store", "get_skill", {"skill_id": skill_id}))["skill"]
    files: Wanted = {
        str(f["path"]): (str(f["sha256"]), True if f.get("executable") else None, None)
        for f in skill.get("files") or []
    }
    base = f"{MOUNT_DIR}/{safe_component(name)}"
    if not files:
        return base
    need = await asyncio.to_thread(_sync, folder, quota, base, files)
    fetched: Wanted = {}
    for rel in need:
        reply = await env.host.ask("skill_store", "read_skill_file", {"skill_id": skill_id, "path": rel})
        fetched[rel] = (files[rel][0], files[rel][1], _bytes(reply))
    if fetched:
        await asyncio.to_thread(_sync, folder, quota, base, fetched)
    return base


async def skill_view(args: dict[str, Any], env: ToolEnv) -> Any:
    name = str(args["name"])
    path = str(args.get("path") or "")
    reply = await env.host.ask("skill_store", "view_skill", {"name": name, "path": path})
    out = {k: v for k, v in reply.items() if k not in ("status", "trusted")}
    if env.workspace_root is not None and env.session_id:
        try:
            out["workspace_folder"] = await mount(env, reply["skill_id"], reply["name"])
        except WorkspaceError as e:
            out["workspace_error"] = f"the skill's files could not be put in the workspace: {e.message}"
    if not reply.get("trusted"):
        return UntrustedResult(out)  # an imported skill no admin has approved yet: data, not instructions
    return out


SKILL_VIEW = Tool(
    "skill_view",
    "Read a skill listed under Relevant Skills: name gives its full instructions and its file list; name and "
    "path (e.g. reference.md, scripts/check.py) give one of its files. Its files are also put, read-only, in "
    "the workspace folder skills/<name>/, where the terminal tool can run its scripts.",
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 128},
            "path": {"type": "string", "maxLength": 1024},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    READ,
    # Approved skills are the tenant's own instructions; an unapproved import is marked per call.
    TRUSTED,
    handler=skill_view,
    requires="skill_store",
    permission=("skill_store", "view_skill"),
    offered=CORE,  # reading the skills the prompt lists: every turn (the rest of ``skills`` on request)
)
