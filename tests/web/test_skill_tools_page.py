"""The Skills page's self-written tools (issue 23): a user sees their own tools and deletes one with the
Delete button (``skill_tools.delete_tool``); it is gone from the server too, and another user's tool is not
on their page."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

USER = ("acme", "bob", ["user"])
OTHER = ("acme", "uma", ["user"])


def _create(server: Server, who: tuple[str, str, list[str]], name: str) -> None:
    made = server.call(
        token(*who),
        "skill_tools",
        "create_tool",
        name=name,
        description="Add two numbers",
        parameters={"a": "number", "b": "number"},
        code="def run(a, b):\n    return {'sum': a + b}\n",
        test="assert run(a=2, b=3) == {'sum': 5}\n",
    )
    assert made["status"] == "ok", made


def test_a_user_deletes_their_self_written_tool_from_the_skills_page(dashboard: Any, server: Server) -> None:
    mine, theirs = f"add_{uuid.uuid4().hex[:6]}", f"add_{uuid.uuid4().hex[:6]}"
    _create(server, USER, mine)
    _create(server, OTHER, theirs)
    page = dashboard(*USER).open("skills")
    row = page.locator(f"[data-self-written-tools] tr[data-tool='{mine}']")
    expect(row).to_contain_text("bob")
    expect(page.locator(f"tr[data-tool='{theirs}']")).to_have_count(0)
    page.once("dialog", lambda d: d.accept())
    row.locator("button[data-op='skill_tools.delete_tool']").click()
    expect(page.locator(f"tr[data-tool='{mine}']")).to_have_count(0)
    listed = server.call(token(*USER), "skill_tools", "list_tools")["tools"]
    assert mine not in [t["name"] for t in listed]
    others = server.call(token(*OTHER), "skill_tools", "list_tools")["tools"]
    assert [t["name"] for t in others] == [theirs]
