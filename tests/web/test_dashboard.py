"""The dashboard in headless Chromium against a live server: chat with streaming and live tool calls, approve a
paused tool, pin a skill, see audit events appear, a viewer who cannot change anything, tenants who see only
their own data, and every page rendering (a screenshot of each)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

PAGES = [
    "chat",
    "sessions",
    "skills",
    "memory",
    "cron",
    "kanban",
    "goals",
    "approvals",
    "guardrails",
    "providers",
    "audit",
    "health",
    "metrics",
]


def send(page: Any, text: str) -> None:
    page.fill("textarea[name=message]", text)
    page.click("form.composer button[type=submit]")
    page.wait_for_selector(".turn-end")


def test_chat_streams_the_answer_and_shows_tool_calls(dashboard: Any) -> None:
    board = dashboard("acme", "bob", ["user"])
    page = board.open("chat")
    deltas: list[str] = []
    page.on(
        "response",
        lambda r: deltas.append(r.headers.get("content-type", "")) if "/messages" in r.url else None,
    )
    before = page.locator("select[name=session] option").count()
    page.click("button[data-op='session_manager.create_session']")
    expect(page.locator("select[name=session] option")).to_have_count(before + 1)
    send(page, "what is 6 * 7? use the calculator")
    card = page.locator("details.tool[data-tool='calculator']")
    assert card.get_attribute("class") == "tool done"
    assert "done" in card.locator(".state").inner_text()
    assert "42" in page.locator(".msg.assistant").last.inner_text()
    assert page.locator(".turn-end").last.get_attribute("data-status") == "ok"
    assert any(t.startswith("text/event-stream") for t in deltas)  # it came as a stream
    page.reload()  # the transcript is the saved history
    page.wait_for_selector("details.tool[data-tool='calculator'].done")
    assert "42" in page.locator(".msg.assistant").last.inner_text()


def test_an_admin_approves_a_paused_tool_and_the_audit_log_shows_it(dashboard: Any, server: Server) -> None:
    admin = dashboard("acme", "alice", ["admin"])
    page = admin.open("guardrails")
    page.fill("input[name=tool_name]", "calculator")
    page.select_option("select[name=decision]", "review")
    page.click("button[data-op='guardrails.set_policy']")
    page.wait_for_selector("tr[data-policy='calculator']")

    bob = token("acme", "bob", ["user"])
    session = server.call(bob, "session_manager", "create_session", channel="web")["session_id"]
    user = dashboard("acme", "bob", ["user"])
    chat = user.open(f"chat?session={session}")
    send(chat, "what is 5 * 5? use the calculator")
    paused = chat.locator(".paused")
    assert "calculator" in paused.inner_text()
    assert paused.locator("button[data-op='guardrails.approve']").is_disabled()  # users do not decide
    approval_id = paused.get_attribute("data-approval")

    approvals = admin.open("approvals")
    row = approvals.locator(f"tr[data-approval='{approval_id}']")
    assert row.locator("text=pending").count() == 1
    row.locator("button[data-op='guardrails.approve']").click()
    approvals.wait_for_selector(f"tr[data-approval='{approval_id}']", state="detached")

    chat.reload()
    chat.wait_for_selector("details.tool[data-tool='calculator'].done")
    assert "25" in chat.locator(".msg.assistant").last.inner_text()

    audit = admin.open("audit")
    audit.fill("input[name=event_type]", "approval_approved")
    audit.click("form.toolbar button")
    audit.wait_for_selector("tr[data-event-type='approval_approved']")
    assert approval_id in audit.locator("tr[data-event-type='approval_approved']").first.inner_text()
    admin.open("guardrails").click("tr[data-policy='calculator'] button[data-op='guardrails.clear_policy']")


def test_pin_a_skill_and_see_its_audit_event(dashboard: Any, server: Server) -> None:
    admin_token = token("acme", "alice", ["admin"])
    assert server.has(admin_token, "skill_store"), "skill_store is part of the agent app"
    name = f"deploy-{uuid.uuid4().hex[:6]}"
    made = server.call(
        admin_token,
        "skill_store",
        "propose_skill",
        name=name,
        description="Deploy the app",
        procedure="1. build\n2. test\n3. ship",
    )
    server.call(
        admin_token, "skill_store", "set_status", skill_id=made["skill_id"], status="active", reason="test"
    )
    admin = dashboard("acme", "alice", ["admin"])
    page = admin.open("skills")
    page.click(f"tr[data-skill='{name}'] a")
    page.wait_for_selector(f"[data-skill-detail='{name}']")
    assert "3. ship" in page.locator("pre.code").first.inner_text()
    page.click("button[data-op='skill_store.pin']")
    page.wait_for_selector("button[data-op='skill_store.unpin']")
    assert page.locator(f"tr[data-skill='{name}'] .badge.pinned").count() == 1
    assert server.call(admin_token, "skill_store", "get_skill", skill_id=made["skill_id"])["skill"]["pinned"]
    audit = admin.open("audit")
    audit.fill("input[name=event_type]", "skill_pinned")
    audit.click("form.toolbar button")
    audit.wait_for_selector("tr[data-event-type='skill_pinned']")


def test_a_viewer_cannot_change_anything(dashboard: Any, server: Server) -> None:
    viewer = dashboard("acme", "vic", ["viewer"])
    for name in PAGES:
        page = viewer.open(name)
        page.wait_for_load_state("networkidle")
        for button in page.locator("button[data-op]").all():
            assert button.is_disabled(), f"{name}: {button.get_attribute('data-op')} is enabled for a viewer"
    chat = viewer.open("chat")
    assert chat.locator("form.composer button[type=submit]").is_disabled()
    # Even a hand-made request from the page is refused by the server.
    status = chat.evaluate(
        """async () => {
            const token = sessionStorage.getItem("minihermes.credential");
            const r = await fetch("/api/v1/actors/guardrails/set_policy", {
                method: "POST",
                headers: {"authorization": `Bearer ${token}`, "content-type": "application/json"},
                body: JSON.stringify({tool_name: "calculator", decision: "allow"}),
            });
            return r.status;
        }"""
    )
    assert status == 403


def test_a_tenant_sees_only_its_own_data(dashboard: Any, server: Server) -> None:
    marker = f"zebra{uuid.uuid4().hex[:8]}"
    acme = token("acme", "alice", ["admin"])
    session = server.call(acme, "session_manager", "create_session", channel="web", user_id="alice")
    server.call(acme, "agent", "chat", message=f"hello {marker}", session_id=session["session_id"])
    server.call(acme, "memory", "store_memory", key=f"fact-{marker}", value=marker)
    server.call(acme, "kanban", "create", title=f"task {marker}")

    own = dashboard("acme", "alice", ["admin"])
    assert marker in own.open("memory").inner_text("#page")
    assert marker in own.open("kanban").inner_text("#page")

    other = dashboard("globex", "gary", ["admin"])
    for name in ("sessions", "memory", "kanban", "audit", "chat"):
        page = other.open(name)
        page.wait_for_load_state("networkidle")
        assert marker not in page.inner_text("#page"), name
        assert session["session_id"] not in page.inner_text("#page"), name
    assert other.page.locator(".who .tenant").inner_text() == "globex"


def test_every_page_renders_and_is_captured(dashboard: Any, server: Server, shots: Path) -> None:
    acme = token("acme", "alice", ["admin"])
    if server.has(acme, "cron_scheduler"):
        jobs = server.call(acme, "cron_scheduler", "list_jobs")["jobs"]
        if not any(j["job_id"] == "morning-brief" for j in jobs):
            server.call(
                acme,
                "cron_scheduler",
                "create_job",
                job_id="morning-brief",
                prompt="Summarize my open kanban tasks",
                schedule="0 8 * * 1-5",
            )
    if server.has(acme, "goals"):
        session = server.call(acme, "session_manager", "create_session", channel="web", user_id="alice")
        server.call(acme, "goals", "set_goal", session_id=session["session_id"], text="Ship the dashboard")
    chat = server.call(acme, "session_manager", "create_session", channel="web", user_id="alice")[
        "session_id"
    ]
    server.call(acme, "agent", "chat", message="Remember that I deploy on Fridays", session_id=chat)
    admin = dashboard("acme", "alice", ["admin"])
    for name in PAGES:
        page = admin.open(f"chat?session={chat}" if name == "chat" else name)
        page.wait_for_load_state("networkidle")
        if name == "chat":
            send(page, "what is 17 * 23? use the calculator")
        elif name in ("skills", "sessions") and page.locator("table.grid a").count():
            page.locator("table.grid a").first.click()
            page.wait_for_load_state("networkidle")
        assert page.locator("#page .error").count() == 0, page.inner_text("#page")
        assert re.search(r"\S", page.inner_text("#page"))
        page.screenshot(path=str(shots / f"{name}.png"), full_page=False)
    login = admin.context.new_page()
    login.goto(server.url + "/")
    login.wait_for_selector("form.login-form")
    login.screenshot(path=str(shots / "login.png"))
    login.close()


def test_pages_whose_actor_is_absent_say_so(browser: Any, demo_server: Server) -> None:
    context = browser.new_context()
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(demo_server.url + "/")  # no auth: the local owner, no sign-in
    expect(page.locator(".who")).to_contain_text("local owner (no auth)")
    for name in PAGES:
        page.goto(f"{demo_server.url}/#/{name}")
        page.wait_for_selector(f"#page[data-page='{name}'] .view")
        if name != "metrics":  # the only page that needs no actor
            expect(page.locator("#page [data-disabled]").first).to_contain_text("not enabled on this node")
        assert page.locator("#page .error").count() == 0, name
    context.close()
    assert not errors, errors
