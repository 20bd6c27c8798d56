"""The OpenAI-compatible API (/v1) through the official ``openai`` client, against the whole agent app on a
real socket with API keys: models, chat completions (plain and streamed), responses continued by
``previous_response_id``, one session for a client that resends its history, and per-principal access."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from minihermes.api import AuthConfig, create_api_key, serve_http
from minihermes.app import build_agent_node, default_config
from minihermes.llm import Completion, CompletionRequest, Provider, StreamEvent, TextDelta, register_provider
from minihermes.runtime import Node


class Holding(Provider):
    """Writes "working " and then never finishes: a turn that runs until it is stopped."""

    kind = "openai_test_hold"

    async def complete(self, request: CompletionRequest) -> Completion:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta(text="working ")
        await asyncio.Event().wait()


register_provider("openai_test_hold", Holding, replace=True)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Node, str, dict[str, str]]]:
    node = build_agent_node(default_config(tmp_path / "data"))
    await node.start()
    keys = {}
    for name, roles in (("alice", ["user"]), ("bob", ["user"]), ("vic", ["viewer"]), ("ada", ["admin"])):
        made = await create_api_key(node.store, tenant="acme", principal=name, roles=roles, name=name)
        keys[name] = made.key
    stop = asyncio.Event()
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_http(
            node,
            "127.0.0.1",
            0,
            AuthConfig(api_keys=True),
            stop=stop,
            on_started=lambda h, p: started.set_result(p),
            log_level="warning",
        )
    )
    port = await asyncio.wait_for(started, 10)
    yield node, f"http://127.0.0.1:{port}", keys
    stop.set()
    await asyncio.wait_for(task, 15)
    await node.stop(deadline=5)


def client(base: str, key: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)


async def sessions(base: str, key: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as c:
        r = await c.post("/api/v1/actors/session_manager/list_sessions", json={})
        assert r.status_code == 200, r.text
        return list(r.json()["sessions"])


async def history(base: str, key: str, session_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}) as c:
        r = await c.post("/api/v1/actors/agent/get_history", json={"session_id": session_id})
        assert r.status_code == 200, r.text
        return list(r.json()["messages"])


async def test_models_list_shows_minihermes_and_an_unknown_model_is_404(served):
    _, base, keys = served
    oa = client(base, keys["alice"])
    listed = await oa.models.list()
    assert [m.id for m in listed.data] == ["minihermes"]
    with pytest.raises(openai.NotFoundError) as e:
        await oa.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 404
    assert e.value.body["code"] == "model_not_found"  # type: ignore[index]


async def test_a_wrong_key_is_401_in_the_openai_shape(served):
    _, base, _ = served
    with pytest.raises(openai.AuthenticationError) as e:
        await client(base, "mh_000000000000_" + "x" * 43).models.list()
    assert e.value.status_code == 401
    body = e.value.response.json()
    assert (
        set(body["error"]) >= {"message", "type", "code"} and body["error"]["type"] == "authentication_error"
    )


async def test_chat_completion_returns_the_agents_answer(served):
    _, base, keys = served
    oa = client(base, keys["alice"])
    raw = await oa.chat.completions.with_raw_response.create(
        model="minihermes", messages=[{"role": "user", "content": "what is 6 * 7? use the calculator"}]
    )
    done = raw.parse()
    assert "42" in (done.choices[0].message.content or "")
    assert done.choices[0].finish_reason == "stop"
    assert not done.choices[0].message.tool_calls  # the agent's calculator ran on the server
    session_id = raw.headers["x-minihermes-session"]
    listed = {s["session_id"]: s for s in await sessions(base, keys["alice"])}
    assert listed[session_id]["channel"] == "openai"
    assert listed[session_id]["title"]


async def test_streamed_chat_yields_deltas_ending_with_stop_and_usage(served):
    _, base, keys = served
    oa = client(base, keys["alice"])
    stream = await oa.chat.completions.create(
        model="minihermes",
        messages=[{"role": "user", "content": "what is 6 * 7? use the calculator"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    texts, finishes, usage = [], [], None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                texts.append(choice.delta.content)
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    assert len(texts) > 1 and "42" in "".join(texts)
    assert finishes == ["stop"]
    assert usage is not None and usage.completion_tokens > 0


async def test_responses_continue_one_session_by_previous_response_id(served):
    _, base, keys = served
    oa = client(base, keys["alice"])
    first = await oa.responses.create(model="minihermes", input="what is 6 * 7? use the calculator")
    assert "42" in first.output_text
    second = await oa.responses.create(
        model="minihermes", input="what was the last result", previous_response_id=first.id
    )
    assert "42" in second.output_text  # a fact only the first turn of this session holds
    assert second.metadata and second.metadata["session_id"] == first.metadata["session_id"]  # type: ignore[index]
    again = await oa.responses.retrieve(second.id)
    assert again.output_text == second.output_text
    # the first is no longer the session's latest: continuing from it would fork
    with pytest.raises(openai.ConflictError) as e:
        await oa.responses.create(model="minihermes", input="hello", previous_response_id=first.id)
    assert second.id in e.value.message
    # a fresh session knows nothing of it
    fresh = await oa.responses.create(model="minihermes", input="what was the last result")
    assert "42" not in fresh.output_text


async def test_streamed_response_events_end_completed(served):
    _, base, keys = served
    oa = client(base, keys["alice"])
    kinds, text = [], ""
    async with oa.responses.stream(model="minihermes", input="what is 6 * 7? use the calculator") as stream:
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
        final = await stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "42" in text and "42" in final.output_text


async def test_a_client_resending_its_history_continues_one_session(served):
    _, base, keys = served
    oa = client(base, keys["bob"])
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    questions = [
        "what is 1 + 1",
        "what is 2 + 2",
        "what is 3 + 3",
        "what is 4 + 4",
        "what was the last result",
    ]
    answers = []
    for i, q in enumerate(questions):
        messages.append({"role": "user", "content": q})
        done = await oa.chat.completions.create(model="minihermes", messages=messages, stream=i % 2 == 1)
        if i % 2 == 1:
            text = "".join([c.choices[0].delta.content or "" async for c in done if c.choices])  # type: ignore[union-attr]
        else:
            text = done.choices[0].message.content or ""  # type: ignore[union-attr]
        answers.append(text)
        messages.append({"role": "assistant", "content": text})
    assert "8" in answers[-1]  # the last result of the same session
    listed = [s for s in await sessions(base, keys["bob"]) if s["channel"] == "openai"]
    assert len(listed) == 1
    users = [m for m in await history(base, keys["bob"], listed[0]["session_id"]) if m["role"] == "user"]
    assert [m["content"] for m in users] == questions


async def test_a_user_cannot_reach_another_users_session_and_a_viewer_cannot_chat(served):
    _, base, keys = served
    alice = client(base, keys["alice"])
    raw = await alice.chat.completions.with_raw_response.create(
        model="minihermes", messages=[{"role": "user", "content": "hello"}]
    )
    alices = raw.headers["x-minihermes-session"]
    first = await alice.responses.create(model="minihermes", input="hello")
    bob = client(base, keys["bob"])
    with pytest.raises(openai.NotFoundError):
        await bob.chat.completions.create(
            model="minihermes",
            messages=[{"role": "user", "content": "what was the last result"}],
            extra_headers={"X-MiniHermes-Session": alices},
        )
    with pytest.raises(openai.NotFoundError):
        await bob.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        await bob.responses.create(model="minihermes", input="hi", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        await bob.responses.create(model="minihermes", input="hi", conversation=alices)
    viewer = client(base, keys["vic"])
    with pytest.raises(openai.PermissionDeniedError) as e:
        await viewer.chat.completions.create(model="minihermes", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 403
    with pytest.raises(openai.PermissionDeniedError):
        await viewer.responses.create(model="minihermes", input="hi")
    assert [m.id for m in (await viewer.models.list()).data] == ["minihermes"]
    assert len(await history(base, keys["alice"], alices)) == 2  # bob's attempts reached nothing


async def test_a_paused_turn_says_where_to_approve_and_the_next_message_gets_the_answer(served):
    _, base, keys = served
    admin = {"Authorization": f"Bearer {keys['ada']}"}
    async with httpx.AsyncClient(base_url=base, headers=admin, timeout=30) as c:
        r = await c.post(
            "/api/v1/actors/guardrails/set_policy", json={"tool_name": "calculator", "decision": "review"}
        )
        assert r.status_code == 200, r.text
    oa = client(base, keys["alice"])
    messages: list[dict[str, Any]] = [{"role": "user", "content": "what is 6 * 7? use the calculator"}]
    paused = await oa.chat.completions.create(model="minihermes", messages=messages)
    text = paused.choices[0].message.content or ""
    assert "waiting for approval" in text and "/#/approvals" in text
    assert not paused.choices[0].message.tool_calls
    async with httpx.AsyncClient(base_url=base, headers=admin, timeout=30) as c:
        waiting = (await c.post("/api/v1/actors/guardrails/list_approvals", json={})).json()
        (approval,) = [a for a in waiting["approvals"] if a.get("status", "pending") == "pending"]
        assert approval["approval_id"] in text
        r = await c.post("/api/v1/actors/guardrails/approve", json={"approval_id": approval["approval_id"]})
        assert r.status_code == 200, r.text
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "done?"}]
    finished = await oa.chat.completions.create(model="minihermes", messages=messages)
    assert "42" in (finished.choices[0].message.content or "")


async def test_bad_and_oversized_bodies_answer_in_the_openai_shape(served):
    _, base, keys = served
    headers = {"Authorization": f"Bearer {keys['alice']}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as c:
        big = await c.post(
            "/v1/chat/completions",
            json={"model": "minihermes", "messages": [{"role": "user", "content": "x" * 2_000_000}]},
        )
        assert big.status_code == 413
        assert big.json()["error"]["type"] == "invalid_request_error"
        last = await c.post(
            "/v1/chat/completions",
            json={"model": "minihermes", "messages": [{"role": "assistant", "content": "hi"}]},
        )
        assert last.status_code == 400
        assert last.json()["error"] == {
            "message": "the last message must be the user's, with text",
            "type": "invalid_request_error",
            "code": "invalid_argument",
            "param": "messages",
        }
        gone = await c.get("/v1/responses/resp_nope")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "response_not_found"


async def test_cancel_stops_a_response_in_progress(served):
    _, base, keys = served
    admin = {"Authorization": f"Bearer {keys['ada']}"}
    async with httpx.AsyncClient(base_url=base, headers=admin, timeout=30) as c:
        provider = {"name": "hold", "kind": "openai_test_hold", "model": "h"}
        assert (
            await c.post("/api/v1/actors/llm_gateway/register_provider", json=provider)
        ).status_code == 200
        assert (
            await c.post("/api/v1/actors/llm_gateway/switch_provider", json={"provider": "hold"})
        ).status_code == 200
    alice = {"Authorization": f"Bearer {keys['alice']}"}
    bob = {"Authorization": f"Bearer {keys['bob']}"}
    body = {"model": "minihermes", "input": "hello", "stream": True}
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        async with c.stream("POST", "/v1/responses", json=body, headers=alice) as r:
            lines = r.aiter_lines()
            response_id = ""
            async for line in lines:
                if line.startswith("data: ") and '"response.created"' in line:
                    response_id = json.loads(line[6:])["response"]["id"]
                if line.startswith("data: ") and '"response.output_text.delta"' in line:
                    break  # the turn runs: its model is writing
            running = await c.get(f"/v1/responses/{response_id}", headers=alice)
            assert running.json()["status"] == "in_progress"
            assert (await c.post(f"/v1/responses/{response_id}/cancel", headers=bob)).status_code == 404
            stopped = await c.post(f"/v1/responses/{response_id}/cancel", headers=alice)
            assert stopped.status_code == 200, stopped.text
            assert stopped.json()["status"] == "cancelled"
            rest = [line async for line in lines]
        assert any('"response.completed"' in line for line in rest)
        after = await c.get(f"/v1/responses/{response_id}", headers=alice)
        assert after.json()["status"] == "cancelled"
