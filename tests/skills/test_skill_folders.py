"""Skill folders: a real-shaped collection imports with 0 refusals; files are listed and read; the agent
reads a referenced file through ``skill_view`` and runs a skill's script in the sandbox; a rollback
restores the files; imported content is untrusted until an admin approves it."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.tool_executor import ToolExecutor
from minihermes.runtime import ActorError, ActorSpec
from minihermes.skills import SKILLS_TOOLSET, bundles
from minihermes.skills._archive import write_zip
from minihermes.tools import CORE_TOOLSETS
from minihermes.tools.contract import UNTRUSTED_NOTE
from minihermes.tools.workspace import workspace_path

from .collection import FONT, LONG_DESCRIPTION, PNG, WEBAPP_BODY, folder_archive, read_tree, write_collection
from .conftest import ACME, ACME_USER, skills_tree


@pytest.fixture
def ws_root() -> Iterator[Path]:
    # Under /tmp: reachable by the sandbox's unprivileged uid even without a mount namespace.
    path = Path(tempfile.mkdtemp(prefix="mh-skill-ws-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def executor(root: Path) -> ActorSpec:
    return ActorSpec(
        "tool_executor",
        ToolExecutor,
        per_tenant=True,
        args={"workspace_root": str(root), "toolsets": [*CORE_TOOLSETS, SKILLS_TOOLSET]},
    )


async def run(node, name: str, input: Any, ctx=ACME, session_id: str = "s1") -> dict[str, Any]:
    return await node.ask(
        "tool_executor", "execute", {"name": name, "input": input, "session_id": session_id}, ctx=ctx
    )


async def import_collection(node, tmp_path: Path, *, approve: bool = True, ctx=ACME) -> dict[str, Any]:
    """An admin imports the folder as the CLI sends it (zipped, executable bits kept); a user uploads a zip.
    Nobody names a folder on the node (``path`` is refused: tests/security/test_host_paths.py)."""
    write_collection(tmp_path / "collection")
    if ctx is ACME:
        args: dict[str, Any] = {"archive": folder_archive(tmp_path / "collection")}
    else:
        data = write_zip(read_tree(tmp_path / "collection"))
        args = {"archive": base64.b64encode(data).decode()}
    return await node.ask("skill_store", "import_skills", {**args, "approve": approve}, ctx=ctx)


def by_name(reply: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in reply["imported"]}


async def test_a_real_shaped_collection_imports_whole_with_no_refusals(make_node, tmp_path):
    node = await make_node(skills_tree())
    out = await import_collection(node, tmp_path)
    assert out["refused"] == []
    assert sorted(by_name(out)) == ["brand-guidelines", "minimal", "pdf", "webapp-testing"]
    warned = " | ".join(f"{w['skill']}: {w['message']}" for w in out["warnings"])
    assert "pdf: description is" in warned and "kept whole" in warned
    assert "allowed-tools: no counterpart here for NotebookEdit" in warned
    assert "front-matter keys kept as written (not used here): author" in warned
    assert "brand-guidelines: front matter is not strict YAML" in warned
    assert "minimal: no name in the front matter" in warned

    pdf = by_name(out)["pdf"]
    assert pdf["status"] == "active" and pdf["files"] == 5
    got = (await node.ask("skill_store", "get_skill", {"skill_id": pdf["skill_id"]}, ctx=ACME))["skill"]
    assert [f["path"] for f in got["files"]] == [
        "LICENSE.txt",
        "assets/logo.png",
        "forms.md",
        "reference.md",
        "scripts/check_fillable_fields.py",
    ]
    logo = next(f for f in got["files"] if f["path"] == "assets/logo.png")
    assert logo == {"path": "assets/logo.png", "size": len(PNG), "sha256": hashlib.sha256(PNG).hexdigest()}
    assert len(got["description"]) <= 1024 and got["description"].endswith("…")
    assert got["allowed_tools"] == ["terminal", "read_file", "write_file"]
    assert got["trusted"] is True and got["license"].startswith("Proprietary")

    # Files read back: text as text, binaries as base64 with a media type.
    ref = await node.ask(
        "skill_store", "read_skill_file", {"skill_id": pdf["skill_id"], "path": "reference.md"}, ctx=ACME
    )
    assert ref["encoding"] == "text" and ref["content"].startswith("# PDF reference")
    png = await node.ask(
        "skill_store", "read_skill_file", {"skill_id": pdf["skill_id"], "path": "assets/logo.png"}, ctx=ACME
    )
    assert png["encoding"] == "base64" and png["media_type"] == "image/png"
    assert base64.b64decode(png["content"]) == PNG
    brand = by_name(out)["brand-guidelines"]
    font = await node.ask(
        "skill_store", "read_skill_file", {"skill_id": brand["skill_id"], "path": "assets/font.ttf"}, ctx=ACME
    )
    assert base64.b64decode(font["content"]) == FONT
    for bad in ("../pdf/SKILL.md", "/etc/passwd", "nope.md"):
        with pytest.raises(ActorError) as e:
            await node.ask(
                "skill_store", "read_skill_file", {"skill_id": pdf["skill_id"], "path": bad}, ctx=ACME
            )
        assert e.value.code == "not_found"

    # The long body is kept whole and read on demand; the prompt gets the excerpt and a pointer.
    web = await node.ask("skill_store", "view_skill", {"name": "webapp-testing"}, ctx=ACME)
    assert web["body"] == "\n" + WEBAPP_BODY and len(web["body"]) > 20_000  # verbatim
    full = await node.ask("skill_store", "view_skill", {"name": "pdf"}, ctx=ACME)
    assert full["description"] == LONG_DESCRIPTION
    matched = await node.ask(
        "skill_store", "match_skills", {"query": "fill in a PDF form", "limit": 1}, ctx=ACME_USER
    )
    [hit] = matched["skills"]
    assert hit["name"] == "pdf" and len(hit["description"]) <= 1024
    assert "skill_view" in hit["procedure"] and "PDF Processing Guide" not in hit["procedure"]


async def test_the_agent_reads_a_referenced_file_and_runs_a_skill_script_in_the_sandbox(
    make_node, tmp_path, ws_root
):
    node = await make_node(skills_tree(executor(ws_root)))
    await import_collection(node, tmp_path)
    listed = await node.ask("tool_executor", "list_tools", {}, ctx=ACME_USER)
    assert "skill_view" in {t["name"] for t in listed["tools"]}

    body = await run(node, "skill_view", {"name": "pdf"}, ctx=ACME_USER)
    assert body["status"] == "ok" and body["untrusted"] is False, body
    assert "read forms.md" in body["result"]["body"]
    assert body["result"]["workspace_folder"] == "skills/pdf"
    assert "forms.md" in {f["path"] for f in body["result"]["files"]}
    forms = await run(node, "skill_view", {"name": "pdf", "path": "forms.md"}, ctx=ACME_USER)
    assert forms["result"]["content"].startswith("# Forms") and forms["result"]["encoding"] == "text"

    ws = workspace_path(ws_root, "acme", "default", "s1")
    script = ws / "skills" / "pdf" / "scripts" / "check_fillable_fields.py"
    assert script.is_file() and not script.stat().st_mode & 0o222  # a read-only copy
    ran = await run(
        node,
        "terminal",
        {"command": "python3 skills/pdf/scripts/check_fillable_fields.py form.pdf"},
        ctx=ACME_USER,
    )
    assert ran["status"] == "ok" and ran["untrusted"] is True
    out = ran["result"]["untrusted_content"]
    assert out["exit_code"] == 0, out
    assert json.loads(out["stdout"]) == {"fillable": True, "fields": ["name", "date"], "argv": ["form.pdf"]}
    # A changed copy is put back at the next view (the stored skill never changes).
    script.chmod(0o644)
    script.write_text("print('tampered')\n")
    await run(node, "skill_view", {"name": "pdf"}, ctx=ACME_USER)
    assert script.read_text().startswith("#!/usr/bin/env python3")
    missing = await run(node, "skill_view", {"name": "no-such-skill"}, ctx=ACME_USER)
    assert missing["status"] == "error" and missing["error"]["code"] == "not_found"


async def test_an_unapproved_import_is_untrusted_until_an_admin_approves_it(make_node, tmp_path, ws_root):
    node = await make_node(skills_tree(executor(ws_root)))
    out = await import_collection(node, tmp_path, approve=False, ctx=ACME_USER)
    pdf = by_name(out)["pdf"]
    assert pdf["status"] == "candidate"
    with pytest.raises(ActorError) as e:  # users import candidates; only admins approve
        await import_collection(node, tmp_path / "again", approve=True, ctx=ACME_USER)
    assert e.value.code == "permission_denied"
    seen = await run(node, "skill_view", {"name": "pdf", "path": "reference.md"}, ctx=ACME_USER)
    assert seen["untrusted"] is True and seen["result"]["note"] == UNTRUSTED_NOTE
    assert seen["result"]["untrusted_content"]["content"].startswith("# PDF reference")
    matched = await node.ask("skill_store", "match_skills", {"query": "PDF form"}, ctx=ACME_USER)
    assert matched["skills"] == []  # a candidate is never in the prompt
    approved = await node.ask("skill_store", "approve_skill", {"skill_id": pdf["skill_id"]}, ctx=ACME)
    assert approved["skill_status"] == "active"
    seen = await run(node, "skill_view", {"name": "pdf", "path": "reference.md"}, ctx=ACME_USER)
    assert seen["untrusted"] is False and seen["result"]["content"].startswith("# PDF reference")


async def test_a_rollback_restores_the_files_of_that_version(make_node, tmp_path):
    data = tmp_path / "d"
    node = await make_node(skills_tree(), data_dir=data)
    out = await import_collection(node, tmp_path)
    pdf = by_name(out)["pdf"]
    folder = tmp_path / "collection" / "pdf"
    (folder / "reference.md").write_text("# PDF reference, second edition\n")
    (folder / "forms.md").unlink()
    (folder / "scripts" / "new_tool.py").write_text("print('new')\n")
    again = await node.ask(
        "skill_store", "import_skills", {"archive": folder_archive(folder), "approve": True}, ctx=ACME
    )
    assert again["imported"][0]["version"] == 2 and again["imported"][0]["skill_id"] == pdf["skill_id"]

    async def files(version: int = 0) -> dict[str, str]:
        got = await node.ask(
            "skill_store", "get_skill", {"skill_id": pdf["skill_id"], "version": version}, ctx=ACME
        )
        return {f["path"]: f["sha256"] for f in got["skill"]["files"]}

    v1, v2 = await files(1), await files(2)
    assert "forms.md" in v1 and "forms.md" not in v2 and "scripts/new_tool.py" in v2
    rolled = await node.ask("skill_store", "rollback", {"skill_id": pdf["skill_id"], "version": 1}, ctx=ACME)
    assert rolled["version"] == 3
    assert await files() == v1
    ref = await node.ask(
        "skill_store", "read_skill_file", {"skill_id": pdf["skill_id"], "path": "reference.md"}, ctx=ACME
    )
    assert ref["content"].startswith("# PDF reference\n")
    with pytest.raises(ActorError):
        await node.ask(
            "skill_store",
            "read_skill_file",
            {"skill_id": pdf["skill_id"], "path": "scripts/new_tool.py"},
            ctx=ACME,
        )
    # Durable: a restarted node has every version's files.
    await node.stop(deadline=5)
    node = await make_node(skills_tree(), data_dir=data)
    assert await files() == v1 and await files(2) == v2
    png = await node.ask(
        "skill_store", "read_skill_file", {"skill_id": pdf["skill_id"], "path": "assets/logo.png"}, ctx=ACME
    )
    assert base64.b64decode(png["content"]) == PNG


async def test_unsafe_files_are_refused_with_a_reason_each(make_node, tmp_path):
    node = await make_node(skills_tree(store_args={"max_file_bytes": 3000}))
    root = tmp_path / "collection"
    write_collection(root)
    secret = tmp_path / "secret.txt"
    secret.write_text("server secret")
    (root / "pdf" / "leak.txt").symlink_to(secret)
    (root / "pdf" / "inside.md").symlink_to(root / "pdf" / "forms.md")
    # The folder is read where it is (the CLI's machine): a link out is refused there, with its reason.
    _, refused, _ = bundles.read_folder("import", str(root), bundles.Limits())
    assert {"path": "pdf/leak.txt", "reason": "a link out of the folder"} in refused
    out = await node.ask(
        "skill_store", "import_skills", {"archive": folder_archive(root), "approve": True}, ctx=ACME
    )
    reasons = {(r["skill"], r["path"]): r["reason"] for r in out["refused"]}
    assert reasons[("brand-guidelines", "assets/font.ttf")].startswith("oversized")
    assert reasons[("", "webapp-testing/SKILL.md")].startswith("oversized")
    assert len(by_name(out)) == 3  # the other skills are imported, without those files
    got = await node.ask("skill_store", "view_skill", {"name": "pdf"}, ctx=ACME)
    paths = [f["path"] for f in got["files"]]
    assert "inside.md" in paths and "leak.txt" not in paths and "assets/logo.png" in paths
