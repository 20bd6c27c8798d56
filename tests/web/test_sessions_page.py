"""The Sessions page (issue 19): sessions from every door, by title, with channel, message count and last
activity; the title box finds them; a user sees their own only."""

from __future__ import annotations

import uuid
from typing import Any

from .conftest import Server, token


def test_sessions_show_titles_and_are_found_by_title(dashboard: Any, server: Server) -> None:
    marker = uuid.uuid4().hex[:8]
    alice = token("acme", f"alice{marker}", ["user"])
    bob = token("acme", f"bob{marker}", ["user"])

    def chat(tok: str, message: str) -> str:
        """A user chats in a session of their own (made first: the edge lets users into no other)."""
        session: str = server.call(tok, "session_manager", "create_session", channel="web")["session_id"]
        server.call(tok, "agent", "chat", message=message, session_id=session)
        return session

    garden = chat(alice, f"plan the garden {marker}")
    chat(alice, f"tax return {marker}")
    chat(bob, f"bob's garden {marker}")

    page = dashboard("acme", f"alice{marker}", ["user"]).open("sessions")
    rows = page.locator("table.grid tbody tr")
    rows.first.wait_for()
    assert rows.count() == 2
    text = page.inner_text("table.grid")
    assert f"plan the garden {marker}" in text and f"tax return {marker}" in text and "bob's" not in text
    first = rows.first.inner_text()
    assert f"tax return {marker}" in first and "web" in first and "1" in first  # the most recently active
    page.fill("input[name=title]", f"GARDEN {marker}")
    page.locator("table.grid tbody tr", has_text=f"tax return {marker}").wait_for(state="detached")
    assert rows.count() == 1
    assert f"plan the garden {marker}" in page.inner_text("table.grid")
    page.locator(f"table.grid a[data-session='{garden}']").click()
    page.wait_for_selector(".transcript .turn.user")
    assert f"plan the garden {marker}" in page.inner_text(".transcript")
