"""The Cron page's action picker (issue 24), in headless Chromium against `minihermes serve`: a reminder made
from the form is a ``notify`` job, listed as a reminder, whose run puts its text in the owner's notifications;
an agent run is picked the same way; editing a job shows its action."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

USER = ("acme", "rosa", ["user"])


def inbox(server: Server, tok: str) -> list[dict[str, Any]]:
    r = httpx.get(
        f"{server.url}/api/v1/notifications", headers={"Authorization": f"Bearer {tok}"}, timeout=30
    )
    assert r.status_code == 200, r.text
    notes: list[dict[str, Any]] = r.json()["notifications"]
    return notes


def test_a_reminder_made_from_the_form_reaches_the_notifications(dashboard: Any, server: Server) -> None:
    tok = token(*USER)
    page = dashboard(*USER).open("cron")
    form = page.locator("form.cron-form")
    picker = form.locator("select[name=action]")
    expect(picker).to_have_value("notify")  # the everyday case first
    expect(form.locator("#action-hint")).to_contain_text("no model call")
    job = f"plants-{uuid.uuid4().hex[:6]}"
    form.locator("input[name=job_id]").fill(job)
    form.locator("textarea[name=prompt]").fill("Water the plants")
    form.locator("input[name=schedule]").fill("0 9 * * 1")
    form.locator("button[data-op='cron_scheduler.create_job']").click()
    row = page.locator(f"tr[data-job='{job}']")
    expect(row).to_have_attribute("data-action", "notify")
    expect(row).to_contain_text("reminder")
    made = server.call(tok, "cron_scheduler", "get_job", job_id=job)["job"]
    assert (made["action"], made["prompt"], made["owner"]) == ("notify", "Water the plants", "rosa")

    row.locator("button[data-op='cron_scheduler.run_now']").click()
    deadline = time.monotonic() + 60
    while not (notes := [n for n in inbox(server, tok) if n["source"] == f"cron:{job}"]):
        assert time.monotonic() < deadline, "the reminder did not reach the notifications"
        time.sleep(0.1)
    assert [n["text"] for n in notes] == ["Water the plants"]
    expect(page.locator("#unread")).to_have_text("1")  # and the dashboard says so, live

    # An agent run, picked in the form; Edit fills the picker from the job.
    other = f"digest-{uuid.uuid4().hex[:6]}"
    picker.select_option("run")
    expect(form.locator("#action-hint")).to_contain_text("asks the agent")
    form.locator("input[name=job_id]").fill(other)
    form.locator("textarea[name=prompt]").fill("Summarize my open tasks")
    form.locator("input[name=schedule]").fill("every 1d")
    form.locator("button[data-op='cron_scheduler.create_job']").click()
    expect(page.locator(f"tr[data-job='{other}']")).to_have_attribute("data-action", "run")
    assert server.call(tok, "cron_scheduler", "get_job", job_id=other)["job"]["action"] == "run"
    expect(picker).to_have_value("notify")  # the form is reset after a save
    page.locator(f"tr[data-job='{other}'] button:has-text('Edit')").click()
    expect(picker).to_have_value("run")
