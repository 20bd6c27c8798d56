"""The skills page's "Download all": an admin saves every skill (of the chosen status) as one zip, fetched with
their credential (GET /api/v1/skills/export needs the Authorization header, so a plain link cannot do it);
the zip holds the skill folders the server has and imports back; a user's button is disabled."""

from __future__ import annotations

import io
import uuid
import zipfile
from typing import Any

import httpx
import pytest

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

ADMIN = ("acme", "alice", ["admin"])
USER = ("acme", "bob", ["user"])


def folder(name: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr(
            f"{name}/SKILL.md", f"---\nname: {name}\ndescription: Tidy a CSV file.\n---\n\nSort it.\n"
        )
        zf.writestr(f"{name}/reference.md", f"# {name}\n\nColumns first.\n")
    return out.getvalue()


def test_an_admin_downloads_every_skill_as_one_zip(dashboard: Any, server: Server) -> None:
    admin = token(*ADMIN)
    names = [f"csv-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for name in names:
        r = httpx.post(
            f"{server.url}/api/v1/skills/import?approve=true",
            content=folder(name),
            headers={"Authorization": f"Bearer {admin}", "content-type": "application/octet-stream"},
            timeout=60,
        )
        assert r.status_code == 200, r.text

    user_page = dashboard(*USER).open("skills")
    expect(user_page.locator("button[data-op='skill_store.export_skills']")).to_be_disabled()  # admins only

    page = dashboard(*ADMIN).open("skills")
    for name in names:
        expect(page.locator(f"tr[data-skill='{name}']")).to_have_count(1)
    with page.expect_download() as info:
        page.click("button[data-op='skill_store.export_skills']")
    download = info.value
    assert download.suggested_filename == "skills.zip"
    with open(download.path(), "rb") as f:
        got = zipfile.ZipFile(io.BytesIO(f.read()))
    expected = httpx.get(
        f"{server.url}/api/v1/skills/export", headers={"Authorization": f"Bearer {admin}"}, timeout=60
    )
    assert expected.status_code == 200
    assert sorted(got.namelist()) == sorted(zipfile.ZipFile(io.BytesIO(expected.content)).namelist())
    for name in names:
        assert f"{name}/SKILL.md" in got.namelist()
        assert got.read(f"{name}/reference.md").decode() == f"# {name}\n\nColumns first.\n"
    expect(page.locator(".toast").last).to_contain_text("skills.zip")

    # The status filter applies: no archived skill yet, so the archive of archived skills is empty.
    page.select_option("select[name=status]", "archived")
    with page.expect_download() as info:
        page.click("button[data-op='skill_store.export_skills']")
    with open(info.value.path(), "rb") as f:
        assert zipfile.ZipFile(io.BytesIO(f.read())).namelist() == []
