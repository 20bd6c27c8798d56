"""The chat loop: live turn output (text as it streams, tool calls as they run) and the slash commands."""

from __future__ import annotations

import re

from minihermes.cli.chat import ChatLoop, Renderer, sse_events

from .conftest import lines


def test_the_renderer_shows_deltas_inline_and_tool_calls_on_their_own_lines(captured):
    r = Renderer(captured.console)
    for e in (
        {"type": "turn_started", "turn_id": "x"},
        {"type": "text_delta", "text": "Let me "},
        {"type": "text_delta", "text": "check."},
        {"type": "tool_call_start", "id": "1", "name": "calculator", "input": {"expression": "2+2"}},
        {
            "type": "tool_call_end",
            "id": "1",
            "name": "calculator",
            "is_error": False,
            "result": "4",
            "duration_ms": 3.2,
        },
        {"type": "tool_call_end", "id": "2", "name": "terminal", "is_error": True, "result": "denied"},
        {"type": "dropped", "count": 7},
        {"type": "text_delta", "text": "It is 4."},
    ):
        r.event(e)
    r.reply({"status": "ok", "response": "Let me check.It is 4.", "tool_calls": 1, "iterations": 2})
    out = captured.text.splitlines()
    assert out[0] == "agent> Let me check."
    assert out[1] == '⚙ calculator {"expression": "2+2"}'
    assert out[2].startswith("  ✓ calculator 3 ms 4")
    assert out[3].startswith("  ✗ terminal") and "denied" in out[3]
    assert out[4] == "(7 live events skipped)"
    assert out[5] == "agent> It is 4."
    assert out[6] == "(1 tool calls, 2 LLM calls)"  # the answer streamed: not printed a second time


def test_a_reply_without_streamed_text_is_printed_whole(captured):
    Renderer(captured.console).reply(
        {"status": "ok", "response": "[b]hi[/b]", "tool_calls": 0, "iterations": 1}
    )
    assert captured.text.startswith(
        "agent> [b]hi[/b] (0 tool calls"
    )  # markup in answers is shown, not applied


async def test_sse_events_parse_names_data_and_comments():
    async def src():
        for line in [
            ": keep-alive",
            "event: text_delta",
            'data: {"text": "he"}',
            "",
            'data: {"type": "tool_call_start", "name": "x"}',
            "",
            "event: final",
            'data: {"reply": {"response": "hello"}}',
            "",
        ]:
            yield line

    events = [e async for e in sse_events(src())]
    assert events == [
        {"text": "he", "type": "text_delta"},
        {"type": "tool_call_start", "name": "x"},
        {"reply": {"response": "hello"}, "type": "final"},
    ]


async def test_an_embedded_turn_shows_its_tool_calls_live_then_the_answer(embedded, captured):
    loop = ChatLoop(captured.console, embedded, "s1")
    reply = await loop.turn("calculate 42 * 17")
    assert reply["status"] == "ok" and "714" in reply["response"]
    out = captured.text
    start, end = out.index("⚙ calculator"), out.index("✓ calculator")
    assert start < end < out.rindex("714")
    assert '"expression": "42 * 17"' in out[start:end]
    assert "(1 tool calls" in out
    # The subscription is gone once the turn is over: nothing keeps collecting this session's events.
    from minihermes.agent.agent import session_topic

    assert not embedded.node.pubsub.has_subscribers(embedded.mh.ctx.scope, session_topic("s1"))


async def test_slash_commands(embedded, captured):
    loop = ChatLoop(captured.console, embedded, "s1")
    code = await loop.run(
        lines(
            "/memory store colour teal",
            "/memory",
            "/memory search teal",
            "/memory forget colour",
            "/memory forget colour",
            "/skills",
            "/goal ship the release",
            "/approve",
            "/model",
            "/model simulated",
            "/model nope",
            '/memory store "two words" "quoted value"',
            "/new",
            "/help",
            "/bogus",
            "/quit",
            "never read",
        )
    )
    assert code == 0
    out = captured.text
    assert "remembered colour" in out
    assert "colour = teal global/reachable" in out
    assert "forgotten" in out and "nothing to forget" in out
    assert "not enabled: skill_store is not enabled" in out
    assert "not enabled: goals is not enabled" in out
    assert "no approvals waiting" in out
    assert re.search(r"\* simulated +simulated", out)
    assert "provider simulated model simulated (this session)" in out
    assert "error not_found: unknown provider 'nope'" in out
    assert "remembered two words" in out
    assert re.search(r"new session cli-[0-9a-f]{8}", out) and loop.session.startswith("cli-")
    assert "/approve [ID]" in out
    assert "unknown command /bogus" in out
    assert "never read" not in out


async def test_approve_from_the_chat_resumes_the_paused_turn(embedded, captured):
    from minihermes.cli._backend import Embedded
    from minihermes.runtime import RequestContext

    await embedded.ask("guardrails", "set_policy", {"tool_name": "calculator", "decision": "review"})
    loop = ChatLoop(captured.console, embedded, "s2")
    paused = await loop.turn("calculate 6 * 7")
    assert paused["status"] == "paused"
    assert f"/approve {paused['approval_id']}" in captured.text
    # Nobody approves their own request (the guardrails' rule): the chat says so and who can.
    await loop.run(lines(f"/approve {paused['approval_id']}"))
    assert "nobody decides on their own request (another admin decides" in captured.text

    reviewer = Embedded(embedded.mh, RequestContext(principal="reviewer", roles=frozenset({"admin"})))
    review = ChatLoop(captured.console, reviewer, "s2")
    before = len(captured.text)
    await review.command("/approve")  # the list of what waits for a person
    listing = captured.text[before:]
    assert paused["approval_id"] in listing and "calculator" in listing and "6 * 7" in listing
    before = len(captured.text)
    await review.command(f"/approve {paused['approval_id']}")
    out = captured.text[before:]
    assert "approved" in out
    assert "42" in out.split("approved", 1)[1]  # the resumed turn's answer


async def test_the_chat_says_when_the_offline_model_answers(embedded, captured):
    await ChatLoop(captured.console, embedded, "s-offline").run(lines("/quit"))
    out = captured.text
    assert "Offline model active" in out and "docs/providers.md" in out and "docs/offline-model.md" in out

    await embedded.ask(
        "llm_gateway",
        "register_provider",
        {"name": "local", "kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"},
    )
    await embedded.ask("llm_gateway", "switch_provider", {"provider": "local"})
    before = len(captured.text)
    await ChatLoop(captured.console, embedded, "s-real").run(lines("/quit"))
    assert "Offline model active" not in captured.text[before:]
