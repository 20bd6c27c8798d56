"""The first hour of a new user, in headless Chromium against `minihermes serve` (issue 19's journey).

One module, one fresh server: what a person does after `./scripts/serve`, in order. The offline model answers
the first chat (tool cards streamed in), then the multi-step request with the right number; a call that needs
review is approved from the chat after a reload; a candidate skill is approved; a cron job and a goal are
created from their pages; a provider is registered against a local OpenAI-compatible server, its connection
tested, and a chat is answered by it. Every step is checked against the server's own state, and the screenshots
of docs/screenshots/journey-*.png are taken here (MINIHERMES_UPDATE_SCREENSHOTS=1 writes them there).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from .conftest import Server, token

expect = pytest.importorskip("playwright.sync_api", reason="Python playwright is not installed").expect

ALICE = ("acme", "alice", ["admin"])  # who runs the server
BOB = ("acme", "bob", ["user"])  # a colleague she gave a key
LOCAL_ANSWER = "Hello from the local model: everything is wired up."


class FakeOpenAI:
    """A local OpenAI-compatible server: /v1/models and /v1/chat/completions (streamed or not) answering
    LOCAL_ANSWER; it records each request so the test can see what reached it."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.base_url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        config = uvicorn.Config(
            self._app, log_level="critical", lifespan="off", access_log=False, interface="asgi3"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])))

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        response: Response
        if request.url.path.endswith("/models"):
            response = JSONResponse({"object": "list", "data": [{"id": "local-tiny", "object": "model"}]})
        elif request.url.path.endswith("/chat/completions"):
            body = json.loads(await request.body() or b"{}")
            self.requests.append(body)
            response = self._stream() if body.get("stream") else self._whole()
        else:
            response = JSONResponse({"error": {"message": "not found"}}, status_code=404)
        await response(scope, receive, send)

    @staticmethod
    def _whole() -> Response:
        return JSONResponse(
            {
                "id": "chatcmpl-local",
                "object": "chat.completion",
                "created": 1,
                "model": "local-tiny",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": LOCAL_ANSWER},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
            }
        )

    @staticmethod
    def _stream() -> Response:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {
                "id": "chatcmpl-local",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "local-tiny",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        async def events() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            for word in LOCAL_ANSWER.split(" "):
                yield chunk({"content": word + " " if not word.endswith(".") else word})
            yield chunk({}, "stop")
            usage = {
                "id": "chatcmpl-local",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "local-tiny",
            }
            usage |= {
                "choices": [],
                "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
            }
            yield f"data: {json.dumps(usage)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def local_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def send(page: Any, text: str) -> None:
    """Type a message and wait until its turn ended (finished or paused): the page marks that."""
    ends = page.locator(".turn-end").count()
    page.fill("textarea[name=message]", text)
    page.click("form.composer button[type=submit]")
    expect(page.locator(".turn-end")).to_have_count(ends + 1)


def answer(page: Any) -> str:
    return str(page.locator(".msg.assistant").last.inner_text())


def _learned_candidate(server: Server, admin_token: str) -> dict[str, Any]:
    """The candidate skill learned from the journey's file turn, once its workflow has proposed it (polled on
    the server's own list, up to a minute: learning is durable background work after the turn)."""
    deadline = time.monotonic() + 60
    while True:
        found = server.call(admin_token, "skill_store", "list_skills", status="candidate")["skills"]
        if found:
            return dict(found[0])
        assert time.monotonic() < deadline, "no skill was learned from the file turn"
        time.sleep(0.25)


def test_the_first_hour(dashboard: Any, server: Server, local_model: FakeOpenAI, shots: Path) -> None:
    alice_token, bob_token = token(*ALICE), token(*BOB)
    alice = dashboard(*ALICE)

    # 1. The first chat: the offline model is said to be active, the calculator's card streams in.
    page = alice.open("chat")
    model_note = page.locator("#model")
    expect(model_note).to_contain_text("Offline model active")
    expect(model_note.locator("a[data-link='providers']")).to_have_count(1)
    page.click("button[data-op='session_manager.create_session']")
    expect(page.locator("select[name=session] option")).to_have_count(1)
    send(page, "what is 6 * 7? use the calculator")
    expect(page.locator("details.tool[data-tool='calculator']")).to_have_class("tool done")
    assert "42" in answer(page)
    page.screenshot(path=str(shots / "journey-1-first-chat.png"))

    # 2. The multi-step request of the report, with the right number, remembered.
    send(page, "calculate 17 * 23, then add 100 to it, and remember the result as budget")
    assert "491" in answer(page), answer(page)
    assert "491" in answer(page).split("391")[-1]  # the answer ends on the result, not the intermediate step
    budget = server.call(alice_token, "memory", "recall_memory", key="budget")
    assert "491" in json.dumps(budget), budget
    page.screenshot(path=str(shots / "journey-2-multi-step.png"))

    # 3. A call that needs review: alice makes file writes reviewed; bob's write pauses; after a reload
    # bob still sees what waits and why; alice approves it from bob's chat, after her own reload.
    rules = alice.open("guardrails")
    rules.fill("input[name=tool_name]", "write_file")
    rules.select_option("select[name=decision]", "review")
    rules.click("button[data-op='guardrails.set_policy']")
    rules.wait_for_selector("tr[data-policy='write_file']")

    bob = dashboard(*BOB)
    chat = bob.open("chat")
    chat.click("button[data-op='session_manager.create_session']")
    expect(chat.locator("select[name=session] option")).to_have_count(1)
    session = chat.locator("select[name=session]").input_value()
    send(chat, "write 'buy milk' to todo.txt, then read todo.txt, then list the files")
    expect(chat.locator(".paused")).to_contain_text("write_file")
    chat.reload()
    paused = chat.locator(".paused")
    expect(paused).to_contain_text("write_file")  # not "running…" forever
    expect(paused.locator("button[data-op='guardrails.approve']")).to_be_disabled()  # bob does not decide
    approval_id = paused.get_attribute("data-approval")
    assert approval_id

    review = alice.open(f"chat?session={session}")
    review.reload()
    review.wait_for_selector("#page[data-page='chat'] .view")
    waiting = review.locator(f".paused[data-approval='{approval_id}']")
    expect(waiting.locator("button[data-op='guardrails.approve']")).to_be_enabled()
    review.screenshot(path=str(shots / "journey-3-approve-after-reload.png"))
    waiting.locator("button[data-op='guardrails.approve']").click()
    for tool in ("write_file", "read_file", "list_files"):
        expect(review.locator(f"details.tool[data-tool='{tool}'].done")).to_have_count(1)
    chat.reload()
    final = chat.locator(".msg.assistant").last
    expect(final).to_contain_text("todo.txt")  # what list_files returned, not "no files"
    assert "untrusted_content" not in final.inner_text()  # no internal wrapper reaches a person
    assert "buy milk" in chat.locator("#page").inner_text()
    last = server.call(bob_token, "agent", "get_history", session_id=session)["messages"][-1]
    assert last["role"] == "assistant" and "todo.txt" in last["content"], last  # bob's own transcript
    rules = alice.open("guardrails")
    rules.click("tr[data-policy='write_file'] button[data-op='guardrails.clear_policy']")

    # 4. The agent learned from bob's turn; the skill writes files, so it waits for a person as a candidate:
    # alice reads why and approves it. (The learning workflow runs after the turn: wait for its result.)
    made = _learned_candidate(server, alice_token)
    name = made["name"]
    assert "buy-milk" not in name and "todo.txt" not in json.dumps(made.get("procedure", ""))  # parameterized
    skills = alice.open("skills")
    skills.select_option("select[name=status]", "candidate")
    skills.click(f"tr[data-skill='{name}'] a")
    held = skills.locator(f"[data-held='{name}']")
    expect(held).to_contain_text("outside effects (write_file")
    skills.screenshot(path=str(shots / "journey-4-candidate-skill.png"))
    held.locator("button[data-op='skill_store.approve_skill']").click()
    expect(skills.locator(f"[data-skill-detail='{name}'] .badge.active")).to_have_count(1)
    skill = server.call(alice_token, "skill_store", "get_skill", skill_id=made["skill_id"])["skill"]
    assert skill["status"] == "active"

    # 5. A cron job and a goal, from their pages.
    cron = alice.open("cron")
    form = cron.locator("form.cron-form")
    form.locator("input[name=job_id]").fill("water-plants")
    form.locator("textarea[name=prompt]").fill("Remind me to water the plants")
    form.locator("input[name=schedule]").fill("0 9 * * 1")
    form.locator("button[data-op='cron_scheduler.create_job']").click()
    expect(cron.locator("tr[data-job='water-plants']")).to_have_attribute("data-status", "active")
    cron.screenshot(path=str(shots / "journey-5-cron.png"))
    job = server.call(alice_token, "cron_scheduler", "get_job", job_id="water-plants")["job"]
    assert job["schedule"] == "0 9 * * 1"

    goals = alice.open("goals")
    goal_form = goals.locator("form.goal-form")
    first_session = server.call(alice_token, "session_manager", "list_sessions", user_id="alice")["sessions"]
    goal_form.locator("input[name=session_id]").fill(first_session[0]["session_id"])
    goal_form.locator("input[name=text]").fill("Ship the release notes by Friday")
    goal_form.locator("button[data-op='goals.set_goal']").click()
    expect(goals.locator("tr[data-goal]", has_text="Ship the release notes by Friday")).to_have_count(1)
    goals.screenshot(path=str(shots / "journey-6-goal.png"))

    # 6. A real (OpenAI-compatible) model: credential, provider, connection test, switch, a chat it answers.
    providers = alice.open("providers")
    cred = providers.locator("form.credential-form")
    cred.locator("input[name=phantom_token]").fill("local-key")
    cred.locator("input[name=api_key]").fill(f"sk-local-{uuid.uuid4().hex}")
    cred.locator("button[data-op='llm_gateway.register_credential']").click()
    prov = providers.locator("form.provider-form")
    expect(prov.locator("select[name=credential] option[value='local-key']")).to_have_count(1)
    prov.locator("input[name=name]").fill("local")
    prov.locator("select[name=kind]").select_option("openai")
    prov.locator("input[name=model]").fill("local-tiny")
    prov.locator("input[name=base_url]").fill(local_model.base_url)
    prov.locator("select[name=credential]").select_option("local-key")
    prov.locator("button[data-op='llm_gateway.register_provider']").click()
    row = providers.locator("tr[data-provider='local']")
    expect(row).to_contain_text("local-tiny")
    row.locator("button[data-op='llm_gateway.test_provider']").click()
    tested = providers.locator("[role=status][data-provider='local']")
    expect(tested).to_have_attribute("data-ok", "true")
    expect(tested).to_contain_text("connected")
    switch = providers.locator("form.switch-form")
    switch.locator("select[name=provider]").select_option("local")
    switch.locator("button[data-op='llm_gateway.switch_provider']").click()
    expect(providers.locator("tr[data-provider='local'] .badge.active")).to_have_count(1)
    expect(providers.locator("#model")).to_be_hidden()  # the offline notice is gone
    providers.screenshot(path=str(shots / "journey-7-provider.png"))

    page = alice.open("chat")
    page.click("button[data-op='session_manager.create_session']")
    before = len(local_model.requests)
    send(page, "hello, who answers now?")
    expect(page.locator(".msg.assistant").last).to_contain_text("Hello from the local model")
    assert len(local_model.requests) > before  # it really went to the local server
    page.screenshot(path=str(shots / "journey-8-real-model.png"))

    # Every session of the hour is listed, with a title, whichever door it came through.
    listed = server.call(alice_token, "session_manager", "list_sessions")["sessions"]
    assert session in {s["session_id"] for s in listed}
    sessions = alice.open("sessions")
    expect(sessions.locator(f"a[data-session='{session}']")).to_contain_text("write 'buy milk' to todo.txt")
    expect(sessions.locator("a[data-session]", has_text="hello, who answers now?")).to_have_count(1)
    sessions.screenshot(path=str(shots / "journey-9-sessions.png"))
    switch_back = alice.open("providers").locator("form.switch-form")
    switch_back.locator("select[name=provider]").select_option("simulated")
    switch_back.locator("button[data-op='llm_gateway.switch_provider']").click()
