"""The skill page with skill folders (issue 20): a user uploads an archive of skill folders (their own
candidates; approving is an admin's), the page lists a skill's files and opens them (text as text, an image
shown), checked against the server's own state; the upload endpoint refuses what it must."""

from __future__ import annotations

import base64
import io
import uuid
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

ADMIN = ("acme", "alice", ["admin"])
USER = ("acme", "bob", ["user"])
PNG = b"\x89PNG\r\n\x1a\n" + base64.b64decode(
    "AAAADUlIRFIAAAABAAAAAQgGAAAAHxXEiQAAAA1JREFUeJxj+M/AwAAFAAH/AX3t3ekAAAAASUVORK5CYII="
)


def collection(name: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr(
            f"{name}/SKILL.md",
            f"---\nname: {name}\ndescription: {'Fill PDF forms. ' * 80}\nauthor: someone\n---\n\n"
            "Read reference.md, then run scripts/check.py.\n",
        )
        zf.writestr(f"{name}/reference.md", "# Reference\n\nUse pypdf for the fields.\n")
        zf.writestr(f"{name}/scripts/check.py", "print('fillable')\n")
        zf.writestr(f"{name}/assets/dot.png", PNG)
    return out.getvalue()


def test_a_user_uploads_skill_folders_and_reads_their_files(
    dashboard: Any, server: Server, shots: Path
) -> None:
    name = f"pdf-{uuid.uuid4().hex[:6]}"
    page = dashboard(*USER).open("skills")
    form = page.locator("form[data-form='skill-import']")
    assert form.locator("input[name=approve]").is_disabled()  # approving is an admin's
    form.locator("input[name=archive]").set_input_files(
        {"name": f"{name}.zip", "mimeType": "application/zip", "buffer": collection(name)}
    )
    form.locator("button[data-op='skill_store.import_skills']").click()
    expect(form.locator(".import-report [data-imported='1']")).to_contain_text(f"{name} (v1, candidate)")
    expect(form.locator(".import-report details")).to_contain_text("kept whole")

    admin_token = token(*ADMIN)
    [made] = [
        s
        for s in server.call(admin_token, "skill_store", "list_skills", status="candidate")["skills"]
        if s["name"] == name
    ]
    assert made["owner"] == "bob" and made["scope"] == "user"

    page.select_option("select[name=status]", "candidate")
    page.click(f"tr[data-skill='{name}'] a")
    detail = page.locator(f"[data-skill-detail='{name}']")
    expect(detail).to_be_visible()
    expect(page.locator(f"[data-untrusted='{name}']")).to_contain_text("outside content")
    for path in ("SKILL.md", "reference.md", "scripts/check.py", "assets/dot.png"):
        expect(page.locator(f"a[data-file='{path}']")).to_have_count(1)
    page.click("a[data-file='reference.md']")
    opened = page.locator(".skill-file")
    expect(opened.locator("[data-open-file='reference.md']")).to_be_visible()
    expect(opened.locator("pre")).to_contain_text("Use pypdf for the fields.")
    got = server.call(
        admin_token, "skill_store", "read_skill_file", skill_id=made["skill_id"], path="reference.md"
    )
    assert got["content"] in opened.locator("pre").inner_text()
    page.click("a[data-file='assets/dot.png']")
    expect(opened.locator("img[alt='assets/dot.png']")).to_be_visible()
    page.click("a[data-file='SKILL.md']")
    expect(opened.locator("pre")).to_contain_text("author: someone")  # kept as written
    page.screenshot(path=str(shots / "skills-files.png"))

    # An admin approves it from the same page: active, trusted.
    admin = dashboard(*ADMIN).open("skills")
    admin.select_option("select[name=status]", "candidate")
    admin.click(f"tr[data-skill='{name}'] a")
    held = admin.locator(f"[data-held='{name}']")
    expect(held).to_contain_text("It was imported")
    held.locator("button[data-op='skill_store.approve_skill']").click()
    expect(admin.locator(f"[data-skill-detail='{name}'] .badge.active")).to_have_count(1)
    assert server.call(admin_token, "skill_store", "get_skill", skill_id=made["skill_id"])["skill"]["trusted"]


def test_the_upload_endpoint_refuses_what_it_must(server: Server) -> None:
    url = f"{server.url}/api/v1/skills/import"
    user = {"Authorization": f"Bearer {token(*USER)}"}
    viewer = {"Authorization": f"Bearer {token('acme', 'vic', ['viewer'])}"}
    name = f"notes-{uuid.uuid4().hex[:6]}"
    assert httpx.post(url, content=collection(name), timeout=30).status_code == 401
    refused = httpx.post(url, content=collection(name), headers=viewer, timeout=30)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    approve = httpx.post(url + "?approve=true", content=collection(name), headers=user, timeout=30)
    assert approve.status_code == 403 and approve.json()["error"]["code"] == "permission_denied"
    junk = httpx.post(url, content=b"not an archive", headers=user, timeout=30)
    assert junk.status_code == 422 and junk.json()["error"]["code"] == "invalid_argument"
    empty = httpx.post(url, content=b"", headers=user, timeout=30)
    assert empty.status_code == 422
    ok = httpx.post(url, content=collection(name), headers=user, timeout=30)
    assert ok.status_code == 200 and ok.json()["imported"][0]["status"] == "candidate", ok.text


def test_skill_view_and_a_skill_script_on_the_served_node(server: Server) -> None:
    """The agent's tools as the served node configures them: skill_view reads a file and puts the skill in
    the session workspace, terminal runs its script in the sandbox."""
    admin_token = token(*ADMIN)
    name = f"pdf-{uuid.uuid4().hex[:6]}"
    up = httpx.post(
        f"{server.url}/api/v1/skills/import?approve=true",
        content=collection(name),
        headers={"Authorization": f"Bearer {admin_token}"},
        timeout=30,
    )
    assert up.status_code == 200 and up.json()["imported"][0]["status"] == "active", up.text
    session = server.call(admin_token, "session_manager", "create_session", channel="web")["session_id"]

    def execute(tool: str, **args: Any) -> Any:
        return server.call(admin_token, "tool_executor", "execute", name=tool, input=args, session_id=session)

    ref = execute("skill_view", name=name, path="reference.md")
    assert ref["status"] == "ok" and ref["untrusted"] is False, ref
    assert ref["result"]["content"].startswith("# Reference")
    assert ref["result"]["workspace_folder"] == f"skills/{name}"
    ran = execute("terminal", command=f"python3 skills/{name}/scripts/check.py")
    assert ran["status"] == "ok", ran
    assert ran["result"]["untrusted_content"]["stdout"].strip() == "fillable"
