"""The dashboard does what the API can (issue 19): each form and action in headless Chromium against the
module's live server, checked against the server's own state."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

ADMIN = ("acme", "alice", ["admin"])


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_cron_create_pause_resume_run_delete_and_a_refused_schedule(dashboard: Any, server: Server) -> None:
    admin_token = token(*ADMIN)
    page = dashboard(*ADMIN).open("cron")
    form = page.locator("form.cron-form")
    assert "every 30m" in form.locator(".hint").inner_text()  # the schedule's forms are explained
    job = uid("plants")

    # An impossible schedule: the server's 422 is shown beside the form, naming the field.
    form.locator("input[name=job_id]").fill(job)
    form.locator("textarea[name=prompt]").fill("Remind me to water the plants")
    form.locator("input[name=schedule]").fill("0 0 30 2 *")
    form.locator("button[data-op='cron_scheduler.create_job']").click()
    error = form.locator(".form-errors .error[data-field='schedule']")
    expect(error).to_contain_text("never fires")
    assert form.locator("input[name=schedule]").get_attribute("aria-invalid") == "true"
    assert page.locator("#toasts .toast.bad").count() == 0  # not a generic toast

    form.locator("input[name=schedule]").fill("0 9 * * 1")
    form.locator("input[name=tz]").fill("Europe/Paris")
    form.locator("button[data-op='cron_scheduler.create_job']").click()
    row = page.locator(f"tr[data-job='{job}']")
    expect(row).to_have_attribute("data-status", "active")
    expect(form.locator(".form-errors .error")).to_have_count(0)
    made = server.call(admin_token, "cron_scheduler", "get_job", job_id=job)["job"]
    assert (made["schedule"], made["tz"], made["prompt"]) == (
        "0 9 * * 1",
        "Europe/Paris",
        "Remind me to water the plants",
    )

    row.locator("button[data-op='cron_scheduler.pause_job']").click()
    expect(page.locator(f"tr[data-job='{job}']")).to_have_attribute("data-status", "paused")
    page.locator(f"tr[data-job='{job}'] button[data-op='cron_scheduler.resume_job']").click()
    expect(page.locator(f"tr[data-job='{job}']")).to_have_attribute("data-status", "active")

    page.locator(f"tr[data-job='{job}'] button[data-op='cron_scheduler.run_now']").click()
    expect(page.locator("h3", has_text=f"Runs of {job}")).to_be_visible()
    expect(page.locator(f"tr[data-run^='{job}']")).to_have_count(1)  # recorded when dispatched

    # Edit: the form is filled from the job and saved with replace.
    page.locator(f"tr[data-job='{job}'] button:has-text('Edit')").click()
    assert form.locator("input[name=job_id]").input_value() == job
    assert form.locator("input[name=replace]").is_checked()
    form.locator("input[name=schedule]").fill("every 2h")
    form.locator("button[data-op='cron_scheduler.create_job']").click()
    expect(page.locator(f"tr[data-job='{job}']")).to_contain_text("every_7200s")

    page.once("dialog", lambda d: d.accept())
    page.locator(f"tr[data-job='{job}'] button[data-op='cron_scheduler.delete_job']").click()
    expect(page.locator(f"tr[data-job='{job}']")).to_have_count(0)
    jobs = server.call(admin_token, "cron_scheduler", "list_jobs")["jobs"]
    assert all(j["job_id"] != job for j in jobs)


def test_goals_set_complete_and_clear(dashboard: Any, server: Server) -> None:
    bob = token("acme", "bob", ["user"])
    session = server.call(bob, "session_manager", "create_session", channel="web")["session_id"]
    page = dashboard("acme", "bob", ["user"]).open("goals")
    form = page.locator("form.goal-form")
    form.locator("button[data-op='goals.set_goal']").click()  # no text: refused beside the form
    expect(form.locator(".form-errors .error[data-field='text']")).to_be_visible()

    for text in ("Water the plants", "Write the release notes"):
        form.locator("input[name=session_id]").fill(session)
        form.locator("input[name=text]").fill(text)
        form.locator("button[data-op='goals.set_goal']").click()
        expect(page.locator("tr[data-goal]", has_text=text)).to_have_count(1)
    goals = server.call(bob, "goals", "list_goals", session_id=session)["goals"]
    assert sorted(g["text"] for g in goals) == ["Water the plants", "Write the release notes"]

    page.locator("tr[data-goal]", has_text="Water the plants").locator(
        "button[data-op='goals.complete_goal']"
    ).click()
    expect(page.locator("tr[data-goal]", has_text="Water the plants")).to_have_count(
        0
    )  # the list shows active
    page.locator("tr[data-goal]", has_text="Write the release notes").locator(
        "button[data-op='goals.clear_goal']"
    ).click()
    expect(page.locator("tr[data-goal]", has_text="Write the release notes")).to_have_count(0)
    status = {
        g["text"]: g["status"]
        for g in server.call(bob, "goals", "list_goals", session_id=session, status="")["goals"]
    }
    assert status == {"Water the plants": "completed"}  # the cleared one is gone


def test_admin_registers_a_credential_and_a_provider_and_switches_to_it(
    dashboard: Any, server: Server, shots: Path
) -> None:
    admin_token = token(*ADMIN)
    board = dashboard(*ADMIN)
    page = board.open("providers")
    secret = f"sk-test-{uuid.uuid4().hex}"
    cred = page.locator("form.credential-form")
    assert cred.locator("input[name=api_key]").get_attribute("type") == "password"
    cred.locator("input[name=phantom_token]").fill("openai-key")
    cred.locator("input[name=api_key]").fill(secret)
    cred.locator("button[data-op='llm_gateway.register_credential']").click()
    prov = page.locator("form.provider-form")
    expect(prov.locator("select[name=credential] option[value='openai-key']")).to_have_count(1)
    assert cred.locator("input[name=api_key]").input_value() == ""  # the key is not kept in the page
    assert secret not in page.content()

    kinds = prov.locator("select[name=kind] option").all_inner_texts()
    assert {"openai", "anthropic", "ollama", "simulated"} <= set(kinds)
    name = uid("local")
    prov.locator("input[name=name]").fill(name)
    prov.locator("select[name=kind]").select_option("openai")
    prov.locator("input[name=model]").fill("tiny-model")
    prov.locator("input[name=base_url]").fill("ftp://127.0.0.1/v1")  # refused, beside the form
    prov.locator("button[data-op='llm_gateway.register_provider']").click()
    expect(prov.locator(".form-errors .error[data-field='base_url']")).to_contain_text("http(s)")
    prov.locator("input[name=base_url]").fill("http://127.0.0.1:9/v1")
    prov.locator("select[name=credential]").select_option("openai-key")
    page.locator(".split", has=prov).screenshot(path=str(shots / "providers-register.png"))
    prov.locator("button[data-op='llm_gateway.register_provider']").click()
    row = page.locator(f"tr[data-provider='{name}']")
    expect(row).to_contain_text("tiny-model")
    expect(row).to_contain_text("openai-key")
    entry = next(
        p for p in server.call(admin_token, "llm_gateway", "list_providers")["providers"] if p["name"] == name
    )
    assert (entry["kind"], entry["base_url"], entry["credential"]) == (
        "openai",
        "http://127.0.0.1:9/v1",
        "openai-key",
    )

    switch = page.locator("form.switch-form")
    switch.locator("select[name=provider]").select_option(name)
    switch.locator("button[data-op='llm_gateway.switch_provider']").click()
    expect(page.locator(f"tr[data-provider='{name}'] .badge.active")).to_have_count(1)
    assert server.call(admin_token, "llm_gateway", "list_providers")["active"]["provider"] == name
    switch.locator("select[name=provider]").select_option("simulated")  # back to the offline model
    switch.locator("button[data-op='llm_gateway.switch_provider']").click()
    expect(page.locator("tr[data-provider='simulated'] .badge.active")).to_have_count(1)


def test_candidate_skills_say_why_they_wait_and_are_approved_or_rejected(
    dashboard: Any, server: Server, shots: Path
) -> None:
    admin_token = token(*ADMIN)
    names: dict[str, str] = {}
    procedures = {
        "keep": ("Archive the weekly report", "1. write_file: write the weekly report to reports/week.md"),
        "drop": ("Restart the staging web server", "1. terminal: systemctl restart staging-web"),
    }
    for key, (description, procedure) in procedures.items():
        names[key] = uid(key)
        made = server.call(
            admin_token,
            "skill_store",
            "propose_skill",
            name=names[key],
            description=description,
            procedure=procedure,
        )
        assert made["created"], made
        names[key + "_id"] = made["skill_id"]
    verdict = {"baseline": {"score": 0.2}, "with_skill": {"score": 0.9}}
    server.call(
        admin_token,
        "skill_store",
        "record_evaluation",
        skill_id=names["keep_id"],
        version=1,
        passed=True,
        details=verdict,
    )

    page = dashboard(*ADMIN).open("skills")
    page.select_option("select[name=status]", "candidate")
    page.click(f"tr[data-skill='{names['keep']}'] a")
    held = page.locator(f"[data-held='{names['keep']}']")
    expect(held).to_contain_text("evaluation of v1 passed")
    expect(held).to_contain_text("outside effects (write_file)")
    expect(held).to_contain_text("with_skill")
    page.screenshot(path=str(shots / "skills-candidate.png"))
    held.locator("button[data-op='skill_store.approve_skill']").click()
    expect(page.locator(f"[data-skill-detail='{names['keep']}'] .badge.active")).to_have_count(1)
    assert (
        server.call(admin_token, "skill_store", "get_skill", skill_id=names["keep_id"])["skill"]["status"]
        == "active"
    )

    page.click(f"tr[data-skill='{names['drop']}'] a")
    held = page.locator(f"[data-held='{names['drop']}']")
    expect(held).to_contain_text("not been evaluated yet")
    # A rejection says why: without a reason the node refuses it, beside the reason field.
    held.locator("button[data-op='skill_store.reject_skill']").click()
    expect(held.locator(".form-errors .error[data-field='reason']")).to_be_visible()
    assert held.locator("input[name=reason]").get_attribute("aria-invalid") == "true"
    assert (
        server.call(admin_token, "skill_store", "get_skill", skill_id=names["drop_id"])["skill"]["status"]
        == "candidate"
    )
    held.locator("input[name=reason]").fill("restarts a server it should not")
    held.locator("button[data-op='skill_store.reject_skill']").click()
    expect(page.locator(f"[data-skill-detail='{names['drop']}'] .badge.archived")).to_have_count(1)
    skill = server.call(admin_token, "skill_store", "get_skill", skill_id=names["drop_id"])["skill"]
    assert skill["status"] == "archived"
    assert skill["rejected"]["reason"] == "restarts a server it should not"
    assert skill["rejected"]["by"] == ADMIN[1]


def test_kanban_offers_only_legal_moves_starts_a_card_and_assigns_one_to_the_agent(
    dashboard: Any, server: Server
) -> None:
    bob = token("acme", "bob", ["user"])
    first = server.call(bob, "kanban", "create", title=uid("draft the plan"))["task_id"]
    then = server.call(bob, "kanban", "create", title=uid("review the plan"), depends_on=[first])["task_id"]
    page = dashboard("acme", "bob", ["user"]).open("kanban")

    def moves(task_id: str) -> list[str]:
        options = page.locator(f".card[data-task='{task_id}'] select[name=move] option")
        return [str(v) for v in options.evaluate_all("options => options.map(o => o.value)")]

    assert "in_progress" not in moves(first)  # in progress means claimed: Start does that
    assert "ready" not in moves(then) and "in_progress" not in moves(then)  # waits for `first`
    assert page.locator(f".card[data-task='{then}'] button[data-op='kanban.start']").count() == 0

    page.locator(f".card[data-task='{first}'] button[data-op='kanban.start']").click()
    expect(page.locator(f".card[data-task='{first}']")).to_have_attribute("data-status", "in_progress")
    card = server.call(bob, "kanban", "show", task_id=first)["task"]
    assert (card["status"], card["claim"]["worker"]) == ("in_progress", "bob")

    page.locator(f".card[data-task='{then}'] button[data-op='kanban.assign']").click()
    expect(page.locator(f".card[data-task='{then}']")).to_have_attribute("data-assignee", "agent")
    assert server.call(bob, "kanban", "show", task_id=then)["task"]["assignee"] == "agent"


def test_tool_names_and_event_types_are_picked_from_lists(dashboard: Any, server: Server) -> None:
    admin_token = token(*ADMIN)
    tools = {t["name"] for t in server.call(admin_token, "tool_executor", "list_tools")["tools"]}
    server.call(admin_token, "memory", "store_memory", key=uid("picker"), value="an event of one type")
    job = uid("picker")
    server.call(admin_token, "cron_scheduler", "create_job", job_id=job, prompt="p", schedule="every 1d")
    server.call(admin_token, "cron_scheduler", "delete_job", job_id=job)  # events of other types
    board = dashboard(*ADMIN)
    page = board.open("guardrails")
    offered = page.locator("datalist#tool-names option").evaluate_all("options => options.map(o => o.value)")
    assert set(offered) == tools and "calculator" in offered
    assert page.locator("input[name=tool_name]").get_attribute("list") == "tool-names"

    audit = board.open("audit")
    audit.fill("input[name=event_type]", "memory_stored")
    audit.click("form.toolbar button")
    audit.wait_for_selector("tr[data-event-type='memory_stored']")
    types = audit.locator("datalist#event-types option")
    values = types.evaluate_all("options => options.map(o => o.value)")
    assert {"memory_stored", "cron_job_created"} <= set(values)  # filtered, yet every recent type is offered


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

# True when every word of every table cell's text sits on one line (a word broken mid-word has 2+ line boxes).
WORDS_WHOLE = """() => {
    const broken = [];
    for (const td of document.querySelectorAll("table.grid td")) {
        const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (const m of node.data.matchAll(/[A-Za-z]{4,}/g)) {
                const range = document.createRange();
                range.setStart(node, m.index);
                range.setEnd(node, m.index + m[0].length);
                const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
                if (tops.size > 1) broken.push(m[0]);
            }
        }
    }
    return broken;
}"""


def test_a_banner_says_when_the_server_is_unreachable(dashboard: Any, shots: Path) -> None:
    board = dashboard(*ADMIN)
    page = board.open("goals")
    banner = page.locator("#offline")
    assert banner.count() == 0 or banner.is_hidden()
    page.route("**/api/v1/**", lambda route: route.abort("connectionrefused"))
    page.evaluate("location.hash = '#/kanban'")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Cannot reach the MiniHermes server")
    assert "Failed to fetch" not in page.inner_text("body")
    page.screenshot(path=str(shots / "offline.png"))
    page.unroute("**/api/v1/**")
    banner.locator("button", has_text="Retry").click()
    expect(banner).to_be_hidden()
    page.wait_for_selector("#page[data-page='kanban'] .view")


def test_usable_at_phone_width_without_words_broken_mid_word(
    dashboard: Any, server: Server, shots: Path
) -> None:
    admin_token = token(*ADMIN)
    words = "remember to water the rhododendrons and the chrysanthemums every Thursday afternoon"
    server.call(admin_token, "memory", "store_memory", key=uid("plants"), value=words)
    board = dashboard(*ADMIN)
    board.page.set_viewport_size({"width": 375, "height": 740})
    for name in PAGES:
        page = board.open(name)
        page.wait_for_load_state("networkidle")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name}: the page scrolls sideways by {overflow}px at 375px"
        nav = page.locator("nav.side").bounding_box()
        main = page.locator("#page").bounding_box()
        assert nav and main and nav["x"] >= 0 and nav["x"] + nav["width"] <= 375, name
        assert main["x"] >= 0 and main["x"] + main["width"] <= 375, name
        assert page.evaluate(WORDS_WHOLE) == [], name
        if name == "cron":
            page.screenshot(path=str(shots / "phone-cron.png"))
    board.page.set_viewport_size({"width": 1360, "height": 860})
    page = board.open("memory")
    assert "rhododendrons" in page.inner_text("#page")
    assert page.evaluate(WORDS_WHOLE) == []
