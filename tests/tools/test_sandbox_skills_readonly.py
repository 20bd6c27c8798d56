"""The workspace's ``skills/`` is read-only for sandboxed programs: a read-only bind mount in the sandbox's
mount namespace, so neither file modes nor the uid decide it (a program running as the files' owner, or as
root, cannot change them either). Scripts there still run; the rest of the workspace stays writable.

Skipped, with the reason, where this machine has no mount namespace for the sandbox (then only the file
modes protect the copy, as the isolation report says).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.skills import SKILLS_TOOLSET
from minihermes.skills._view_tool import MOUNT_DIR
from minihermes.tools import CORE_TOOLSETS
from minihermes.tools.sandbox import (
    Layer,
    SandboxError,
    SandboxPolicy,
    isolation_report,
    run_python,
    run_sandboxed,
)
from minihermes.tools.workspace import workspace_path
from tests.skills.collection import folder_archive, write_collection
from tests.skills.conftest import ACME, ACME_USER, clock, make_node, skills_tree

from .conftest import python_for, require

__all__ = ["clock", "make_node"]  # fixtures used here

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534

# Tries every kind of change under skills/<name>/ and one write at the workspace root; prints errno names.
PROBE = r"""
import ctypes, errno, json, os, sys
skill = sys.argv[1]
script = os.path.join(skill, "scripts", "check_fillable_fields.py")

def attempt(action):
    try:
        action()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def write():
    with open(script, "a") as f:
        f.write("print('tampered')\n")

def umount():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(b"skills", 2) != 0:
        raise OSError(ctypes.get_errno(), "umount2")

def at_root():
    with open("note.txt", "w") as f:
        f.write("written\n")

out = {
    "chmod": attempt(lambda: os.chmod(script, 0o777)),
    "chmod_dir": attempt(lambda: os.chmod(skill, 0o777)),
    "write": attempt(write),
    "truncate": attempt(lambda: os.truncate(script, 0)),
    "delete": attempt(lambda: os.unlink(script)),
    "create": attempt(lambda: open(os.path.join(skill, "new.py"), "x").close()),
    "mkdir": attempt(lambda: os.mkdir(os.path.join(skill, "more"))),
    "rename": attempt(lambda: os.rename(script, os.path.join(skill, "moved.py"))),
    "utime": attempt(lambda: os.utime(script, (0, 0))),
    "root": attempt(at_root),
}
if len(sys.argv) > 2:
    out["umount"] = attempt(umount)
print(json.dumps(out))
"""

CHANGES = ("chmod", "chmod_dir", "write", "truncate", "delete", "create", "mkdir", "rename", "utime")
SCRIPT = "#!/usr/bin/env python3\nimport sys\nprint('ran', *sys.argv[1:])\n"


def refused_read_only(outcome: dict[str, str]) -> None:
    for change in CHANGES:
        # EACCES where the open's permission check comes first (a 0444 file opened for writing).
        assert outcome[change] in ("EROFS", "EACCES"), (change, outcome)
    # The mount, not the modes: what only the owner (or root) could otherwise do is refused as EROFS.
    assert outcome["chmod"] == outcome["chmod_dir"] == outcome["delete"] == "EROFS", outcome
    assert outcome["create"] == outcome["mkdir"] == outcome["rename"] == "EROFS", outcome
    assert outcome["root"] == "ok", outcome


def needs_mount_namespace() -> None:
    require(Layer.MOUNT_NAMESPACE)


def put_skill(workspace: Path) -> Path:
    """A skill's files as ``skill_view`` leaves them: 0444 files in 0555 folders."""
    skill = workspace / MOUNT_DIR / "demo"
    (skill / "scripts").mkdir(parents=True)
    (skill / "scripts" / "check_fillable_fields.py").write_text(SCRIPT)
    (skill / "SKILL.md").write_text("# Demo\n")
    for path in [*sorted(skill.rglob("*"), reverse=True), skill, skill.parent]:  # children first
        path.chmod(0o555 if path.is_dir() else 0o444)
    return skill


def restore_modes(workspace: Path) -> None:
    for path in (workspace / MOUNT_DIR).rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (workspace / MOUNT_DIR).chmod(0o755)


@pytest.fixture
def ws_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mh-skill-ro-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_skills_folder_is_the_one_the_sandbox_keeps_read_only() -> None:
    assert MOUNT_DIR in SandboxPolicy().readonly_workspace_dirs
    report = isolation_report()
    expected = "read_only_bind_mount" if report["layers"]["mount_namespace"]["available"] else "file_modes"
    assert report["workspace_readonly"] == {"folders": ["skills"], "enforced_by": expected}
    assert any("skills/" in note for note in report["notes"])


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "x\0y"])
async def test_a_read_only_folder_must_be_one_plain_name(workspace: Path, bad: str) -> None:
    with pytest.raises(SandboxError) as e:
        await run_python("print(1)", workspace, policy=SandboxPolicy(readonly_workspace_dirs=(bad,)))
    assert e.value.code == "invalid_argument"


async def test_every_layer_a_program_cannot_change_the_skills_folder(workspace: Path) -> None:
    needs_mount_namespace()
    skill = put_skill(workspace)
    try:
        result = await run_python(PROBE, workspace, args=[f"{MOUNT_DIR}/demo", "umount"])
        assert result.ok, result.stderr_text
        outcome = json.loads(result.stdout)
        refused_read_only(outcome)
        assert outcome["umount"] == "EPERM"  # seccomp, and no capability: the bind cannot be undone
        ran = await run_sandboxed(
            ["python3", f"{MOUNT_DIR}/demo/scripts/check_fillable_fields.py", "form.pdf"], workspace
        )
        assert ran.ok and ran.stdout_text == "ran form.pdf\n", ran.stderr_text
    finally:
        restore_modes(workspace)
    assert (skill / "scripts" / "check_fillable_fields.py").read_text() == SCRIPT
    assert sorted(p.name for p in skill.iterdir()) == ["SKILL.md", "scripts"]
    assert (workspace / "note.txt").read_text() == "written\n"


async def test_modes_do_not_decide_it_a_program_running_as_root_is_refused_too(workspace: Path) -> None:
    """As root (or as the files' owner) 0444/0555 stop nothing; the read-only mount does."""
    needs_mount_namespace()
    layers = frozenset({Layer.MOUNT_NAMESPACE})
    skill = put_skill(workspace)
    try:
        policy = SandboxPolicy(layers=layers, python=python_for(layers))
        result = await run_python(PROBE, workspace, args=[f"{MOUNT_DIR}/demo"], policy=policy)
        assert result.ok, result.stderr_text
        refused_read_only(json.loads(result.stdout))
        assert Layer.MOUNT_NAMESPACE in result.isolation
    finally:
        restore_modes(workspace)
    assert (skill / "scripts" / "check_fillable_fields.py").read_text() == SCRIPT


async def test_a_link_named_skills_is_not_followed(workspace: Path) -> None:
    needs_mount_namespace()
    (workspace / "elsewhere").mkdir(mode=0o777)
    (workspace / "elsewhere").chmod(0o777)  # writable by the sandbox uid
    (workspace / MOUNT_DIR).symlink_to("elsewhere")
    code = "open('skills/x', 'w').write('x')\nprint('written')"
    result = await run_python(code, workspace)
    assert result.ok and result.stdout_text == "written\n", result.stderr_text
    assert (workspace / "elsewhere" / "x").read_text() == "x"  # nothing the server put there: no mount


UNPRIVILEGED = """
import asyncio, json, sys
from minihermes.tools.sandbox import run_python

async def main():
    result = await run_python(sys.argv[1], sys.argv[2], args=[sys.argv[3]])
    print(json.dumps({"stdout": result.stdout_text, "stderr": result.stderr_text,
                      "isolation": sorted(result.isolation)}))

asyncio.run(main())
"""


def test_a_server_not_running_as_root_owns_the_copy_and_still_cannot_change_it(workspace: Path) -> None:
    """The sandbox shares the server's uid then: the files are the program's own, only the mount holds."""
    if os.geteuid() != 0:
        pytest.skip("starting a server as another uid needs root")
    python = next(
        (p for p in (sys.executable, "/usr/bin/python3") if python_reachable(p)),
        None,
    )
    if python is None:
        pytest.skip("no Python >= 3.11 reachable by an unprivileged uid")
    put_skill(workspace)
    for path in [workspace, *workspace.rglob("*")]:
        os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    proc = subprocess.run(
        [python, "-c", UNPRIVILEGED, PROBE, str(workspace), f"{MOUNT_DIR}/demo"],
        user=NOBODY, group=NOBODY, extra_groups=[], env={"PYTHONPATH": str(REPO)}, cwd="/",
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout)
    if "mount_namespace" not in outcome["isolation"]:
        pytest.skip("no mount namespace for an unprivileged server here: file modes only")
    refused_read_only(json.loads(outcome["stdout"]))
    restore_modes(workspace)


def python_reachable(candidate: str) -> bool:
    real = Path(os.path.realpath(candidate))
    if not real.exists() or not all(os.stat(p).st_mode & 0o001 for p in [REPO, *REPO.parents, *real.parents]):
        return False
    version = subprocess.run(
        [str(real), "-c", "import sys; print(sys.version_info >= (3, 11))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return version.stdout.strip() == "True"


# ------------------------------------------------------------------------------- through the agent's tools


async def call(node: Any, name: str, input: dict[str, Any]) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(
        "tool_executor", "execute", {"name": name, "input": input, "session_id": "s1"}, ctx=ACME_USER
    )
    return reply


async def test_a_script_in_a_session_cannot_change_the_skill_files_skill_view_put_there(
    make_node: Any, tmp_path: Path, ws_root: Path
) -> None:
    needs_mount_namespace()
    from minihermes.agent.tool_executor import ToolExecutor
    from minihermes.runtime import ActorSpec

    executor = ActorSpec(
        "tool_executor",
        ToolExecutor,
        per_tenant=True,
        args={"workspace_root": str(ws_root), "toolsets": [*CORE_TOOLSETS, SKILLS_TOOLSET]},
    )
    node = await make_node(skills_tree(executor))
    write_collection(tmp_path / "collection")
    await node.ask(
        "skill_store",
        "import_skills",
        {"archive": folder_archive(tmp_path / "collection"), "approve": True},
        ctx=ACME,
    )
    viewed = await call(node, "skill_view", {"name": "pdf"})
    assert viewed["result"]["workspace_folder"] == "skills/pdf", viewed
    ws = workspace_path(ws_root, "acme", "default", "s1")
    script = ws / "skills" / "pdf" / "scripts" / "check_fillable_fields.py"
    original = script.read_bytes()
    (ws / "probe.py").write_text(PROBE)

    ran = await call(node, "terminal", {"command": "python3 probe.py skills/pdf"})
    out = ran["result"]["untrusted_content"]
    assert out["exit_code"] == 0, out
    refused_read_only(json.loads(out["stdout"]))
    assert script.read_bytes() == original
    assert not (ws / "skills" / "pdf" / "new.py").exists()
    assert (ws / "note.txt").read_text() == "written\n"

    # The skill's own script still runs (read and execute).
    ran = await call(
        node, "terminal", {"command": "python3 skills/pdf/scripts/check_fillable_fields.py f.pdf"}
    )
    out = ran["result"]["untrusted_content"]
    assert out["exit_code"] == 0, out
    assert json.loads(out["stdout"])["argv"] == ["f.pdf"]
