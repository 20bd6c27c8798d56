"""Issue 24, in headless Chromium against a live server: an admin's chat opens on their own session, not on the
latest session of anybody; another user's session opens read-only (its history and waiting calls, no
composer) and nothing of the admin's reaches it; a one-admin deployment (API keys only) never leaves the
admin's own paused turn stuck, while a deployment with other admins keeps four eyes without a button that
the server refuses; a refused message is a "Not sent" bubble with the reason, not in the history; the chat
names the model that answers, after a switch too; Goals and Approvals name sessions by title; the audit
log pages back and says "(redacted)" where the server redacted an event."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .._server import ROOT, serve_process
from .conftest import Dashboard, Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

ADA = ("acme", "ada", ["admin"])
ALICE = ("acme", "alice", ["user"])
VIC = ("acme", "vic", ["viewer"])
CLI = (sys.executable, "-m", "minihermes.cli.main")


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def send(page: Any, text: str) -> None:
    """Type a message and wait until its turn ended (finished or paused): the page marks that."""
    ends = page.locator(".turn-end").count()
    page.fill("textarea[name=message]", text)
    page.click("form.composer button[type=submit]")
    expect(page.locator(".turn-end")).to_have_count(ends + 1)


def history(server: Server, tok: str, session: str) -> list[dict[str, Any]]:
    return list(server.call(tok, "agent", "get_history", session_id=session)["messages"])


def session_of(server: Server, tok: str, first_message: str) -> str:
    """A session of the token's principal, titled by its first message (a finished turn)."""
    made = server.call(tok, "session_manager", "create_session", channel="web")["session_id"]
    reply = server.call(tok, "agent", "chat", message=first_message, session_id=made)
    assert reply["status"] == "ok", reply
    return str(made)


def test_an_admins_chat_opens_on_their_own_session(dashboard: Any, server: Server) -> None:
    ada, alice = token(*ADA), token(*ALICE)
    own = session_of(server, ada, f"ada's notes {uid('n')}")
    hers = session_of(server, alice, f"alice's plans {uid('p')}")  # the latest session of anybody
    board = dashboard(*ADA)
    page = board.open("chat")
    picker = page.locator("select[name=session]")
    assert picker.input_value() == own
    values = picker.locator("option").evaluate_all("(os) => os.map((o) => o.value)")
    assert hers not in values  # the picker lists ada's own sessions only
    expect(page.locator(".read-only")).to_be_hidden()
    before = len(history(server, alice, hers))
    send(page, "what is 2 + 3?")
    assert "what is 2 + 3?" in [m["content"] for m in history(server, ada, own) if m["role"] == "user"]
    assert len(history(server, alice, hers)) == before  # nothing reached alice's session


def test_an_admin_reads_another_users_session_but_posts_only_in_their_own(
    dashboard: Any, server: Server, shots: Path
) -> None:
    ada, alice = token(*ADA), token(*ALICE)
    title = f"alice's budget {uid('b')}"
    hers = session_of(server, alice, title)
    server.call(ada, "guardrails", "set_policy", tool_name="calculator", decision="review")
    try:
        paused = server.call(alice, "agent", "chat", message="calculate 6 * 7", session_id=hers)
        assert paused["status"] == "paused", paused
        board = dashboard(*ADA)
        sessions = board.open("sessions")
        sessions.locator(f"a[data-session='{hers}']").click()
        link = sessions.locator(".transcript a[data-link='chat']")
        expect(link).to_contain_text("alice's session in chat (read-only)")
        link.click()
        page = board.page
        page.wait_for_selector("#page[data-page='chat'] .view")
        notice = page.locator(".read-only")
        expect(notice).to_contain_text("This is alice's session")
        expect(page.locator("textarea[name=message]")).to_be_disabled()
        expect(page.locator("form.composer button[type=submit]")).to_be_disabled()
        expect(page.locator(".msg.user").first).to_contain_text(title)  # her history is shown
        box = page.locator(f".paused[data-approval='{paused['approval_id']}']")
        assert box.get_attribute("data-may-decide") == "true"  # and her waiting call is decidable
        page.screenshot(path=str(shots / "chat-read-only.png"))
        # Nothing the page lets ada do posts into alice's session.
        page.evaluate(
            "() => { const t = document.querySelector('textarea[name=message]');"
            " t.value = 'from ada'; t.form.requestSubmit(); }"
        )
        box.locator("button[data-op='guardrails.approve']").click()
        expect(page.locator(".msg.assistant").last).to_contain_text("42")
        mine = [m["content"] for m in history(server, alice, hers) if m["role"] == "user"]
        assert mine == [title, "calculate 6 * 7"]

        # Her own chat: alice posts there as ever.
        own_board = dashboard(*ALICE)
        own = own_board.open(f"chat?session={hers}")
        expect(own.locator(".read-only")).to_be_hidden()
        expect(own.locator("textarea[name=message]")).to_be_enabled()

        # Posting goes to a session of ada's own.
        notice.locator("button[data-action='own-session']").click()
        expect(page.locator(".read-only")).to_be_hidden()
        expect(page.locator("textarea[name=message]")).to_be_enabled()
        assert page.locator("select[name=session]").input_value() != hers
    finally:
        server.call(ada, "guardrails", "clear_policy", tool_name="calculator")


def test_with_other_admins_an_admins_own_call_waits_without_a_refused_button(
    dashboard: Any, server: Server
) -> None:
    """JWT deployment: the admins are not known, so four eyes stay. ada's own paused call shows no usable
    Approve (the server would refuse it), in the chat and on Approvals; another admin's does."""
    ada = token(*ADA)
    server.call(ada, "guardrails", "set_policy", tool_name="calculator", decision="review")
    try:
        board = dashboard(*ADA)
        page = board.open("chat")
        page.click("button[data-op='session_manager.create_session']")
        send(page, "calculate 5 * 5")
        box = page.locator(".paused")
        expect(box).to_have_attribute("data-may-decide", "false")
        expect(box.locator("button[data-op='guardrails.approve']")).to_be_disabled()
        approval = box.get_attribute("data-approval")
        approvals = board.open("approvals")
        row = approvals.locator(f"tr[data-approval='{approval}']")
        expect(row).to_have_attribute("data-may-decide", "false")
        expect(row.locator("button[data-op='guardrails.approve']")).to_be_disabled()
        other = dashboard("acme", "otto", ["admin"]).open("approvals")
        other_row = other.locator(f"tr[data-approval='{approval}']")
        expect(other_row.locator("button[data-op='guardrails.approve']")).to_be_enabled()
        other_row.locator("button[data-op='guardrails.deny']").click()
        expect(other.locator(f"tr[data-approval='{approval}']")).to_have_count(0)
    finally:
        server.call(ada, "guardrails", "clear_policy", tool_name="calculator")


def test_a_refused_message_is_not_sent_and_not_in_the_history(
    dashboard: Any, server: Server, shots: Path
) -> None:
    ada, alice = token(*ADA), token(*ALICE)
    board = dashboard(*ALICE)
    page = board.open("chat")
    page.click("button[data-op='session_manager.create_session']")
    send(page, "what is 1 + 1?")
    session = page.locator("select[name=session]").input_value()
    # Too long for the server: refused before anything is kept.
    page.fill("textarea[name=message]", "x" * 100_001)
    page.click("form.composer button[type=submit]")
    refused = page.locator(".msg.user[data-sent='false']")
    expect(refused).to_have_count(1)
    expect(refused).to_have_class("msg user not-sent")
    expect(refused.locator(".not-sent-reason")).to_contain_text("Not sent: content must be at most")
    assert len(page.input_value("textarea[name=message]")) == 100_001  # back in the box

    # A session whose turn waits for approval: not sent either, and why.
    server.call(ada, "guardrails", "set_policy", tool_name="calculator", decision="review")
    try:
        send(page, "calculate 8 * 8")
        expect(page.locator(".paused")).to_have_count(1)
        page.fill("textarea[name=message]", "hello again")
        page.click("form.composer button[type=submit]")
        waiting = page.locator(".msg.user[data-sent='false']").last
        expect(waiting).to_contain_text("Not sent: this session has a call waiting for approval")
        expect(page.locator(".waiting-notice")).to_have_count(1)
        page.screenshot(path=str(shots / "chat-not-sent.png"))
        sent = [m["content"] for m in history(server, alice, session) if m["role"] == "user"]
        assert sent == ["what is 1 + 1?", "calculate 8 * 8"]
        page.reload()
        page.wait_for_selector("#page[data-page='chat'] .view")
        expect(page.locator(".msg.user")).to_have_count(2)  # the refused ones were never in the session
        assert "hello again" not in page.locator(".chat-log").inner_text()
    finally:
        server.call(ada, "guardrails", "clear_policy", tool_name="calculator")


def test_the_chat_names_the_model_that_answers_after_a_switch(dashboard: Any, server: Server) -> None:
    ada = token(*ADA)
    name = uid("sim")
    server.call(ada, "llm_gateway", "register_provider", name=name, kind="simulated", model="offline-two")
    board = dashboard(*ADA)
    page = board.open("chat")
    shown = page.locator(".model-now")
    expect(shown).to_have_attribute("data-provider", "simulated")
    try:
        # Switched on the Providers page: the chat says so.
        providers = board.open("providers")
        switch = providers.locator("form.switch-form")
        switch.locator("select[name=provider]").select_option(name)
        switch.locator("button[data-op='llm_gateway.switch_provider']").click()
        expect(providers.locator(f"tr[data-provider='{name}'] .badge.active")).to_have_count(1)
        page = board.open("chat")
        expect(shown).to_have_attribute("data-provider", name)
        expect(shown).to_contain_text(f"{name} · offline-two")
        # Switched elsewhere while the chat is open: the next answer's header names the new one.
        server.call(ada, "llm_gateway", "switch_provider", provider="simulated")
        page.click("button[data-op='session_manager.create_session']")
        send(page, "what is 3 + 4?")
        expect(shown).to_have_attribute("data-provider", "simulated")
    finally:
        server.call(ada, "llm_gateway", "switch_provider", provider="simulated")


def test_goals_and_approvals_name_sessions_by_title(dashboard: Any, server: Server) -> None:
    ada, alice = token(*ADA), token(*ALICE)
    title = f"trip planning {uid('t')}"
    session = session_of(server, alice, title)
    server.call(alice, "goals", "set_goal", session_id=session, text="plan a trip to Lisbon")
    server.call(ada, "guardrails", "set_policy", tool_name="calculator", decision="review")
    try:
        paused = server.call(alice, "agent", "chat", message="calculate 9 * 9", session_id=session)
        board = dashboard(*ADA)
        goals = board.open("goals")
        expect(goals.locator(f"a[data-session='{session}']").first).to_have_text(title)
        approvals = board.open("approvals")
        row = approvals.locator(f"tr[data-approval='{paused['approval_id']}']")
        expect(row.locator(f"a[data-session='{session}']")).to_have_text(title)
        assert row.locator(f"a[data-session='{session}']").get_attribute("title") == session
        row.locator("button[data-op='guardrails.deny']").click()
    finally:
        server.call(ada, "guardrails", "clear_policy", tool_name="calculator")


def test_the_audit_log_pages_back_and_marks_redacted_events(dashboard: Any, server: Server) -> None:
    ada = token(*ADA)
    kind = f"page_probe_{uuid.uuid4().hex[:6]}"
    for i in range(105):
        r = httpx.post(
            f"{server.url}/api/v1/actors/audit_event/log_event",
            json={"event_type": kind, "detail": f"probe {i}"},
            headers={"Authorization": f"Bearer {ada}"},
            timeout=30,
        )
        assert r.status_code in (200, 202), r.text
    deadline = time.monotonic() + 30
    while server.call(ada, "audit_event", "query_events", event_type=kind, limit=1000)["count"] < 105:
        assert time.monotonic() < deadline, "the probe events were not written"
        time.sleep(0.1)
    board = dashboard(*ADA)
    audit = board.open("audit")
    audit.fill("input[name=event_type]", kind)
    audit.click("form.toolbar button")
    rows = audit.locator(f"tr[data-event-type='{kind}']")
    expect(rows).to_have_count(100)
    expect(rows.first).to_contain_text("probe 104")  # newest first
    audit.click("button[data-page='older']")
    expect(rows).to_have_count(5)
    expect(rows.last).to_contain_text("probe 0")
    expect(audit.locator("button[data-page='older']")).to_be_disabled()
    audit.click("button[data-page='newer']")
    expect(rows).to_have_count(100)
    expect(rows.first).to_contain_text("probe 104")

    # A viewer reads ada's events redacted: the page says so instead of an empty detail.
    viewer = dashboard(*VIC).open("audit")
    viewer.fill("input[name=event_type]", kind)
    viewer.click("form.toolbar button")
    first = viewer.locator(f"tr[data-event-type='{kind}']").first
    expect(first).to_have_attribute("data-redacted", "true")
    expect(first.locator(".redacted")).to_have_text("(redacted)")
    assert "probe 104" not in viewer.locator("#page").inner_text()


# ------------------------------------------------------------------------------- a one-admin deployment


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A node with API keys only and one admin key, made with the CLI before `serve` (as the README does)."""
    data = tmp_path_factory.mktemp("solo") / "data"
    where = ["--data-dir", str(data)]
    made = subprocess.run(
        [*CLI, "keys", "create", "--tenant", "acme", "--principal", "solo", "--roles", "admin", *where],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    key = next(line.strip() for line in made.stdout.splitlines() if line.startswith("mh_"))
    with serve_process(data, ["--api-keys"], ready_timeout=90) as url:
        yield Server(url), key


def test_a_one_admin_deployment_never_leaves_a_turn_stuck(browser: Any, solo: tuple[Server, str]) -> None:
    server, key = solo
    server.call(key, "guardrails", "set_policy", tool_name="calculator", decision="review")
    board = Dashboard(browser, server, key)
    try:
        page = board.open("chat")
        page.click("button[data-op='session_manager.create_session']")
        send(page, "calculate 6 * 7")
        box = page.locator(".paused")
        expect(box).to_contain_text("calculator")
        expect(box).to_have_attribute("data-may-decide", "true")  # nobody else could decide it
        approval = box.get_attribute("data-approval")
        page.reload()  # also as read back from the guardrails
        page.wait_for_selector("#page[data-page='chat'] .view")
        box = page.locator(f".paused[data-approval='{approval}']")
        expect(box).to_have_attribute("data-may-decide", "true")
        box.locator("button[data-op='guardrails.approve']").click()
        expect(page.locator(".paused")).to_have_count(0)
        expect(page.locator(".msg.assistant").last).to_contain_text("42")
        assert server.call(key, "guardrails", "get_approval", approval_id=approval)["status"] == "approved"
    finally:
        board.close()
        server.call(key, "guardrails", "clear_policy", tool_name="calculator")
