"""The dashboard does what the API can (issue 19): each form and action in headless Chromium against the
module's live server, checked against the server's own state."""

from __future__ import annotations

import uuid
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
