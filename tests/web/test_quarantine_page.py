"""The Quarantine page (issue 25) in headless Chromium against a live server: a memory a chat turn stored
after reading a file is listed there (with where it came from, as text), Confirm makes it an ordinary memory,
Discard drops it, another user never sees it, a viewer cannot decide, and a failed read is an error, never an
empty list. Memories are held the real way: the offline model reads a file, then stores what it read."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

TENANT = "qtenant"
ADMIN = (TENANT, "ada", ["admin"])
UMA = (TENANT, "uma", ["user"])
OTTO = (TENANT, "otto", ["user"])
SKY = (TENANT, "sky", ["user"])
VIEWER = (TENANT, "vic", ["viewer"])


READ = "read {key}.txt and remember the result as {key}"
LEARN = "read {key}.txt, then calculate 17 * 23, then add 100 to it, and remember the result as {key}"
"""Four tool calls after an untrusted result: the skill learned from the turn is held too."""


def plant(
    server: Server, who: tuple[str, str, list[str]], key: str, content: str = "500 euros", request: str = READ
) -> None:
    """``who``'s turn writes a file, the next reads it and stores what it read: held for confirmation. An
    admin approves the calls that wait for review."""
    tok, admin = token(*who), token(*ADMIN)
    session = server.call(tok, "session_manager", "create_session", channel="web")["session_id"]
    for message in (f"write '{content}' to {key}.txt", request.format(key=key)):
        reply = server.call(tok, "agent", "chat", message=message, session_id=session)
        while reply.get("status") == "paused":
            reply = server.call(admin, "guardrails", "approve", approval_id=reply["approval_id"])["turn"]
        assert reply["status"] == "ok", reply


def held_skills(server: Server, who: tuple[str, str, list[str]], n: int = 1) -> list[dict[str, Any]]:
    """``who``'s held skills, once ``n`` are (a skill is learned from a turn in the background)."""
    deadline = time.monotonic() + 30
    while len(skills := server.call(token(*who), "skill_store", "list_quarantined")["skills"]) < n:
        assert time.monotonic() < deadline, skills
        time.sleep(0.05)
    return list(skills)


def held(server: Server, who: tuple[str, str, list[str]]) -> dict[str, dict[str, Any]]:
    reply = server.call(token(*who), "memory", "list_quarantined")
    return {m["key"]: m for m in reply["memories"]}


def recall(server: Server, who: tuple[str, str, list[str]], key: str) -> Any:
    return server.call(token(*who), "memory", "recall_memory", key=key)


def test_a_held_memory_is_listed_confirmed_and_discarded(dashboard: Any, server: Server) -> None:
    plant(server, UMA, "budget_note")
    plant(server, UMA, "spare_note", "<img src=x onerror=alert(1)> 20 euros")
    note, spare = held(server, UMA)["budget_note"], held(server, UMA)["spare_note"]
    assert recall(server, UMA, "budget_note")["found"] is False  # held: not recalled

    page = dashboard(*UMA).open("quarantine")
    row = page.locator("tr[data-kind='memory'][data-key='budget_note']")
    expect(row).to_be_visible()
    expect(row).to_contain_text("500 euros")
    expect(row).to_contain_text("tool:read_file")
    assert row.get_attribute("data-id") == note["id"]
    # Untrusted content is text: the markup is shown, never made into elements.
    spare_row = page.locator("tr[data-key='spare_note']")
    expect(spare_row).to_contain_text("<img src=x onerror=alert(1)> 20 euros")
    expect(spare_row.locator("img")).to_have_count(0)
    # The nav counts what waits (both notes and their turns' episodes).
    badge = page.locator("nav.side a[data-page='quarantine'] #held")
    expect(badge).to_have_text(str(len(held(server, UMA))))

    # Confirm: gone from the page, recalled from now on.
    row.locator("button[data-op='memory.confirm_memory']").click()
    expect(row).to_have_count(0)
    assert recall(server, UMA, "budget_note")["value"] == "500 euros"
    assert "budget_note" not in held(server, UMA)
    expect(badge).to_have_text(str(len(held(server, UMA))))

    # Discard: gone from the page, never stored.
    spare_row.locator("button[data-op='memory.discard_memory']").click()
    expect(spare_row).to_have_count(0)
    assert recall(server, UMA, "spare_note")["found"] is False
    assert "spare_note" not in held(server, UMA)
    assert spare["id"] not in {m["id"] for m in held(server, ADMIN).values()}


def test_a_held_skill_is_shown_as_text_and_confirmed(dashboard: Any, server: Server) -> None:
    plant(server, SKY, "sky_total", request=LEARN)
    [skill] = held_skills(server, SKY)
    page = dashboard(*SKY).open("quarantine")
    row = page.locator(f"tr[data-kind='skill'][data-id='{skill['skill_id']}']")
    expect(row).to_contain_text(skill["name"])
    expect(row.locator(".description")).to_have_text(skill["description"])
    expect(row).to_contain_text("agent after tool:read_file")
    expect(row.locator(".procedure pre")).to_have_text(skill["procedure"])  # what is confirmed, as text
    assert dashboard(*UMA).open("quarantine").locator("tr[data-kind='skill']").count() == 0

    row.locator("button[data-op='skill_store.confirm_skill']").click()
    expect(row).to_have_count(0)
    assert server.call(token(*SKY), "skill_store", "list_quarantined")["skills"] == []
    got = server.call(token(*SKY), "skill_store", "get_skill", skill_id=skill["skill_id"])["skill"]
    assert got["quarantined"] is False and got["confirmed_by"] == "sky"


def test_others_do_not_see_it_and_a_viewer_cannot_decide(dashboard: Any, server: Server) -> None:
    plant(server, UMA, "secret_note")
    otto = dashboard(*OTTO).open("quarantine")
    box = otto.locator("[data-held='memory']")
    expect(box.locator("p.empty")).to_have_text("No memories are waiting for confirmation.")
    expect(otto.locator("tr[data-key='secret_note']")).to_have_count(0)

    viewer = dashboard(*VIEWER).open("quarantine")
    expect(viewer.locator("[data-held='memory'] p.empty")).to_be_visible()  # a viewer decides on nothing

    admin = dashboard(*ADMIN).open("quarantine")
    row = admin.locator("tr[data-key='secret_note']")
    expect(row).to_contain_text("uma")  # an admin sees the tenant's, with whose it is
    expect(row.locator("button[data-op='memory.discard_memory']")).to_be_enabled()


def test_a_failed_read_is_an_error_not_an_empty_list(dashboard: Any, server: Server) -> None:
    board = dashboard(*UMA)
    board.page.route(
        "**/api/v1/actors/memory/list_quarantined",
        lambda route: route.fulfill(
            status=503,
            content_type="application/json",
            body='{"error": {"code": "unavailable", "message": "memory is restarting"}}',
        ),
    )
    page = board.open("quarantine")
    box = page.locator("[data-held='memory']")
    expect(box.locator(".error")).to_have_text("unavailable: memory is restarting")
    expect(box.locator("p.empty")).to_have_count(0)
