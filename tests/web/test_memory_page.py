"""The Memory page (issue 19) in headless Chromium against a live server: episodes hidden unless the
checkbox asks, filters by kind, scope and tier, a page at a time with a total, and a search box that finds
"sister's name" by "sister"."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

ADMIN = ("memtenant", "mia", ["admin"])
FACTS = 30
EPISODES = 6


def seed(server: Server) -> None:
    tok = token(*ADMIN)
    server.call(tok, "memory", "store_memory", key="sister", value="My sister's name is Ana")
    server.call(
        tok, "memory", "store_memory", key="manual", value="how to run the backup", kind="declarative"
    )
    server.call(tok, "memory", "store_memory", key="rule", value="deploy on Tuesdays", tier="core")
    server.call(
        tok, "memory", "store_memory", key="draft", value="notes of s1", scope="session", session_id="s1"
    )
    for n in range(FACTS - 4):
        server.call(tok, "memory", "store_memory", key=f"fact-{n:02d}", value=f"fact number {n}")
    for n in range(EPISODES):
        server.call(
            tok,
            "memory",
            "store_memory",
            key=f"episode:{n}",
            value=f"Task: what is my sister's name ({n})\nOutcome: ok",
            kind="episodic",
            private=True,
        )


def test_memory_page_filters_pages_hides_episodes_and_searches(dashboard: Any, server: Server) -> None:
    seed(server)
    page = dashboard(*ADMIN).open("memory")
    rows = page.locator("table.grid tbody tr")
    info = page.locator(".pager-info")

    # Episodes are hidden; the facts come a page (25) at a time with the total.
    expect(info).to_have_text(f"1-25 of {FACTS}")
    expect(rows).to_have_count(25)
    expect(page.locator("tr[data-kind='episodic']")).to_have_count(0)
    assert page.locator("button[data-page='prev']").is_disabled()
    page.click("button[data-page='next']")
    expect(info).to_have_text(f"26-{FACTS} of {FACTS}")
    expect(rows).to_have_count(FACTS - 25)
    assert page.locator("button[data-page='next']").is_disabled()
    page.click("button[data-page='prev']")
    expect(info).to_have_text(f"1-25 of {FACTS}")

    # The checkbox shows the episodes (back on the first page).
    page.check("input[name=include_episodes]")
    expect(info).to_have_text(f"1-25 of {FACTS + EPISODES}")
    expect(page.locator("tr[data-kind='episodic']")).to_have_count(EPISODES)  # "episode:" sorts first
    page.uncheck("input[name=include_episodes]")
    expect(page.locator("tr[data-kind='episodic']")).to_have_count(0)

    # Filters: kind, tier, scope (and kind=episodic shows episodes without the checkbox).
    page.select_option("select[name=kind]", "declarative")
    expect(rows).to_have_count(1)
    expect(page.locator("tr[data-key='manual']")).to_be_visible()
    expect(page.locator(".pager")).to_be_hidden()
    page.select_option("select[name=kind]", "episodic")
    expect(page.locator("tr[data-kind='episodic']")).to_have_count(EPISODES)
    page.select_option("select[name=kind]", "")
    page.select_option("select[name=tier]", "core")
    expect(rows).to_have_count(1)
    expect(page.locator("tr[data-key='rule']")).to_be_visible()
    page.select_option("select[name=tier]", "")
    page.select_option("select[name=scope]", "session")
    expect(rows).to_have_count(1)
    expect(page.locator("tr[data-key='draft']")).to_be_visible()
    page.select_option("select[name=scope]", "")

    # Search: "sister" finds "My sister's name is Ana"; the episodes that mention it only when asked for.
    page.fill("input[name=query]", "sister")
    page.click("form.toolbar button:has-text('Search')")
    expect(rows).to_have_count(1)
    expect(page.locator("tr[data-key='sister']")).to_be_visible()
    page.check("input[name=include_episodes]")
    expect(rows).to_have_count(1 + EPISODES)
    page.fill("input[name=query]", "nothing like this anywhere")
    page.click("form.toolbar button:has-text('Search')")
    expect(page.locator("p.empty")).to_have_text("No memory matches.")
