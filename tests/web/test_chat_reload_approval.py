"""Issue 19, in headless Chromium against a live server: a turn paused for approval is shown (with Approve /
Deny, why review was needed, and whether the requester may decide) after a page reload; a new message to it
links to the waiting call instead of a bare "conflict"; the Providers page refuses a switch to a provider
without a key, tests a connection against a local fake OpenAI-compatible server, and manages API keys (shown
once, listed, revoked)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..llm.support import Reply, StubServer
from .conftest import Server, _serve, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

ADMIN = ("acme", "alice", ["admin"])
BOB = ("acme", "bob", ["user"])
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "tiny-model-2026",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The agent app with JWT auth, accepting API keys too (the keys made from the page are tried)."""
    yield from _serve(tmp_path_factory, "web-k", ["--jwt-secret-env", "WEB_JWT_SECRET", "--api-keys"])


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[StubServer]:
    stub = StubServer()
    stub.start()
    yield stub
    stub.stop()


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_a_paused_turn_is_approvable_after_a_reload(dashboard: Any, server: Server, shots: Path) -> None:
    admin, bob = token(*ADMIN), token(*BOB)
    server.call(admin, "guardrails", "set_policy", tool_name="calculator", decision="review")
    try:
        session = server.call(bob, "session_manager", "create_session", channel="web")["session_id"]
        paused = server.call(bob, "agent", "chat", message="calculate 6 * 7", session_id=session)
        assert paused["status"] == "paused", paused
        approval = paused["approval_id"]

        # Bob reloads the chat: the waiting call is there, not "running…" forever.
        board = dashboard(*BOB)
        page = board.open(f"chat?session={session}")
        page.reload()
        page.wait_for_selector("#page[data-page='chat'] .view")
        box = page.locator(f".paused[data-approval='{approval}']")
        expect(box).to_be_visible()
        expect(box.locator(".why")).to_contain_text("policy is review")
        card = page.locator("details.tool[data-tool='calculator']").last
        expect(card).to_have_attribute("data-approval", approval)
        expect(card.locator(".state")).to_have_text("waiting for approval")
        # The policy does not let requesters decide: the buttons say so, and where an admin decides.
        assert box.get_attribute("data-may-decide") == "false"
        assert box.locator("button[data-op='guardrails.approve']").is_disabled()
        expect(box.locator("a[href='#/approvals']")).to_be_visible()

        # A new message is not sent; the page says why and links to the waiting call.
        page.fill("textarea[name=message]", "and what about 7 * 8?")
        page.locator("form.composer button[type=submit]").click()
        notice = page.locator(f".waiting-notice[data-approval='{approval}']")
        expect(notice).to_contain_text("waiting for approval")
        expect(notice.locator("a[href='#/approvals']")).to_be_visible()
        assert page.input_value("textarea[name=message]") == "and what about 7 * 8?"
        assert "conflict:" not in page.inner_text("#page")
        page.screenshot(path=str(shots / "chat-paused-after-reload.png"))

        # The Approvals page says why review was needed.
        alice = dashboard(*ADMIN)
        approvals = alice.open("approvals")
        row = approvals.locator(f"tr[data-approval='{approval}']")
        expect(row.locator(".why")).to_contain_text("calculator: policy is review")
        assert row.locator(".why").get_attribute("data-reason") == "policy"

        # An admin approves from the chat after a reload; the turn finishes.
        chat = alice.open(f"chat?session={session}")
        chat.reload()
        box = chat.locator(f".paused[data-approval='{approval}']")
        assert box.get_attribute("data-may-decide") == "true"
        box.locator("button[data-op='guardrails.approve']").click()
        expect(chat.locator(".paused")).to_have_count(0)
        expect(chat.locator(".msg.assistant").last).to_contain_text("42")
        assert server.call(admin, "guardrails", "get_approval", approval_id=approval)["status"] == "approved"
    finally:
        server.call(admin, "guardrails", "clear_policy", tool_name="calculator")


def test_a_requester_allowed_by_the_policy_decides_after_a_reload(dashboard: Any, server: Server) -> None:
    admin, bob = token(*ADMIN), token(*BOB)
    server.call(admin, "guardrails", "set_policy", tool_name="calculator", decision="review")
    server.call(admin, "guardrails", "set_approval_policy", tool_name="calculator", self_approve=True)
    try:
        session = server.call(bob, "session_manager", "create_session", channel="web")["session_id"]
        paused = server.call(bob, "agent", "chat", message="calculate 3 * 5", session_id=session)
        page = dashboard(*BOB).open(f"chat?session={session}")
        box = page.locator(f".paused[data-approval='{paused['approval_id']}']")
        assert box.get_attribute("data-may-decide") == "true"
        box.locator("button[data-op='guardrails.approve']").click()
        expect(page.locator(".paused")).to_have_count(0)
        expect(page.locator(".msg.assistant").last).to_contain_text("15")
    finally:
        server.call(admin, "guardrails", "set_approval_policy", tool_name="calculator", self_approve=False)
        server.call(admin, "guardrails", "clear_policy", tool_name="calculator")


def test_providers_refuse_a_switch_without_a_key_and_test_a_connection(
    dashboard: Any, server: Server, fake_openai: StubServer, shots: Path
) -> None:
    admin = token(*ADMIN)
    page = dashboard(*ADMIN).open("providers")
    switch = page.locator("form.switch-form")
    switch.locator("select[name=provider]").select_option("anthropic")
    switch.locator("button[data-op='llm_gateway.switch_provider']").click()
    refusal = page.locator(".form-errors .error", has_text="register_credential")
    expect(refusal).to_contain_text("docs/providers.md")
    assert server.call(admin, "llm_gateway", "list_providers")["active"]["provider"] == "simulated"

    secret = f"sk-test-{uuid.uuid4().hex}"
    cred = page.locator("form.credential-form")
    cred.locator("input[name=phantom_token]").fill("fake-key")
    cred.locator("input[name=api_key]").fill(secret)
    cred.locator("button[data-op='llm_gateway.register_credential']").click()
    prov = page.locator("form.provider-form")
    expect(prov.locator("select[name=credential] option[value='fake-key']")).to_have_count(1)
    name = uid("fake")
    prov.locator("input[name=name]").fill(name)
    prov.locator("select[name=kind]").select_option("openai")
    prov.locator("input[name=model]").fill("tiny-model")
    prov.locator("input[name=base_url]").fill(fake_openai.base_url + "/v1")
    prov.locator("select[name=credential]").select_option("fake-key")
    prov.locator("button[data-op='llm_gateway.register_provider']").click()
    expect(page.locator(f"tr[data-provider='{name}']")).to_contain_text("tiny-model")

    fake_openai.reset()
    fake_openai.reply(Reply(json=ANSWER))
    prov.locator("button[data-op='llm_gateway.test_provider']").click()
    result = prov.locator(f".test-result [data-provider='{name}']")
    expect(result).to_have_attribute("data-ok", "true")
    expect(result).to_contain_text("tiny-model-2026")
    assert fake_openai.last.headers["authorization"] == f"Bearer {secret}"
    page.locator(".split", has=prov).screenshot(path=str(shots / "providers-test-connection.png"))

    fake_openai.reply(Reply(status=401, json={"error": {"message": f"Incorrect API key provided: {secret}"}}))
    page.locator(f"tr[data-provider='{name}'] button[data-op='llm_gateway.test_provider']").click()
    expect(result).to_have_attribute("data-kind", "auth")
    assert secret not in page.content()


def test_api_keys_are_created_once_listed_and_revoked(dashboard: Any, server: Server, shots: Path) -> None:
    page = dashboard(*ADMIN).open("providers")
    form = page.locator("form.api-key-form")
    form.locator("input[name=name]").fill("no spaces allowed")
    form.locator("button[data-action='create-api-key']").click()
    expect(form.locator(".form-errors .error[data-field='name']")).to_be_visible()

    name = uid("ci-bot")
    form.locator("input[name=name]").fill(name)
    form.locator("select[name=roles]").select_option("viewer")
    form.locator("button[data-action='create-api-key']").click()
    shown = page.locator(".key-once code.secret")
    expect(shown).to_contain_text("mh_")
    key = shown.inner_text().strip()
    row = page.locator("tr[data-key-id]", has_text=name)
    expect(row).to_have_attribute("data-state", "active")
    me = httpx.get(f"{server.url}/api/v1/whoami", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert me.status_code == 200 and (me.json()["principal"], me.json()["roles"]) == (name, ["viewer"])

    page.reload()  # shown once: never again
    page.wait_for_selector("tr[data-key-id]")
    assert key not in page.content()

    page.once("dialog", lambda d: d.accept())
    page.locator("tr[data-key-id]", has_text=name).locator("button[data-action='revoke-api-key']").click()
    expect(page.locator("tr[data-key-id]", has_text=name)).to_have_attribute("data-state", "revoked")
    gone = httpx.get(f"{server.url}/api/v1/whoami", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert gone.status_code == 401

    # A user has no API key section (and the endpoints refuse them).
    user_page = dashboard(*BOB).open("providers")
    assert user_page.locator("form.api-key-form").count() == 0
