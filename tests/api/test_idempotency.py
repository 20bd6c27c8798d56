"""``Idempotency-Key``: a retry returns the first result and runs no second turn, in the same process and
after a SIGKILL of the server between accepting a turn and answering it; another body with the key is 409.

Run as ``python -m tests.api.test_idempotency <data_dir> first|again``, this module is the server of the
crash test: the whole agent app with API keys on a free port, its LLM a script that calls the calculator
and then, in the ``first`` process, blocks before answering (the test SIGKILLs it there).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.api import AuthConfig, create_api_key, serve_http
from minihermes.app import build_agent_node, default_config
from minihermes.llm import Completion, CompletionRequest, ScriptedProvider, register_provider
from minihermes.runtime import RequestContext

from .._proc import kill_hard, read_line, spawn_module
from .test_openai import served  # noqa: F401 - the fixture

BODY = {"model": "minihermes", "messages": [{"role": "user", "content": "what is 6 * 7"}]}


def respond(request: CompletionRequest) -> dict[str, Any]:
    if request.messages[-1].role == "tool":
        return {"content": "6 x 7 = 42.", "stop_reason": "end_turn"}
    return {
        "content": "",
        "stop_reason": "tool_use",
        "tool_calls": [{"id": "call-calc", "name": "calculator", "input": {"expression": "6 * 7"}}],
    }


class Blocking(ScriptedProvider):
    """The script; in the ``first`` process the answer after the tool result never comes."""

    block = False

    async def complete(self, request: CompletionRequest) -> Completion:
        if Blocking.block and request.messages[-1].role == "tool":
            print("BLOCKED", flush=True)
            await asyncio.Event().wait()
        return await super().complete(request)


register_provider("idemblock", lambda config: Blocking(respond, config), replace=True)


async def serve(data: Path, phase: str) -> None:
    Blocking.block = phase == "first"
    node = build_agent_node(default_config(data))
    await node.start()
    key = ""
    if phase == "first":
        key = (await create_api_key(node.store, tenant="acme", principal="alice", roles=["user"])).key
        admin = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
        provider = {"name": "script", "kind": "idemblock", "model": "s"}
        await node.ask("llm_gateway", "register_provider", provider, 10, ctx=admin)
        await node.ask("llm_gateway", "switch_provider", {"provider": "script"}, 10, ctx=admin)
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(
        serve_http(
            node, "127.0.0.1", 0, AuthConfig(api_keys=True), on_started=lambda h, p: started.set_result(p)
        )
    )
    print("READY", await started, key, flush=True)
    await server


async def _post(base: str, key: str, body: dict[str, Any], idem: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        return await c.post(
            "/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": idem},
        )


async def _ask(base: str, key: str, actor: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        r = await c.post(
            f"/api/v1/actors/{actor}/{op}", json=payload, headers={"Authorization": f"Bearer {key}"}
        )
        assert r.status_code == 200, r.text
        return dict(r.json())


async def _until(proc: asyncio.subprocess.Process, marker: str) -> str:
    while True:
        line = await read_line(proc)
        if line.startswith(marker):
            return line


@pytest.mark.slow
async def test_a_retry_after_a_sigkill_between_accept_and_answer_runs_one_turn(tmp_path):
    data = tmp_path / "data"
    proc = await spawn_module("tests.api.test_idempotency", str(data), "first")
    _, port, key = (await _until(proc, "READY")).split()
    base = f"http://127.0.0.1:{port}"
    first = asyncio.ensure_future(_post(base, key, BODY, "retry-1"))
    await _until(proc, "BLOCKED")  # accepted: the calculator ran, the answer is being written
    stats = await _ask(base, key, "tool_executor", "get_stats", {})
    assert stats["executions"] == 1 and stats["by_tool"]["calculator"]["calls"] == 1
    await kill_hard(proc)
    with pytest.raises(httpx.TransportError):
        await first

    proc = await spawn_module("tests.api.test_idempotency", str(data), "again")
    try:
        _, port, *_ = (await _until(proc, "READY")).split()
        base = f"http://127.0.0.1:{port}"
        retried = await _post(base, key, BODY, "retry-1")
        assert retried.status_code == 200, retried.text
        assert retried.json()["choices"][0]["message"]["content"] == "6 x 7 = 42."
        session_id = retried.headers["x-minihermes-session"]
        again = await _post(base, key, BODY, "retry-1")
        assert again.json() == retried.json()  # the same answer, the same completion id
        stats = await _ask(base, key, "tool_executor", "get_stats", {})
        assert stats["executions"] == 0  # the calculator did not run again: one run in all
        history = await _ask(base, key, "agent", "get_history", {"session_id": session_id})
        assert [m["content"] for m in history["messages"] if m["role"] == "user"] == ["what is 6 * 7"]
        agent = await _ask(base, key, "agent", "get_stats", {"session_id": session_id})
        assert agent["turns"] == 1
        listed = await _ask(base, key, "session_manager", "list_sessions", {})
        assert [s["session_id"] for s in listed["sessions"]] == [session_id]  # the retries made none
        other = {**BODY, "messages": [{"role": "user", "content": "what is 7 * 8"}]}
        reused = await _post(base, key, other, "retry-1")
        assert reused.status_code == 409
        assert reused.json()["error"]["code"] == "idempotency_key_reused"
    finally:
        await kill_hard(proc)


async def test_a_retry_returns_the_first_result_without_a_second_turn(served):  # noqa: F811
    _, base, keys = served
    key = keys["alice"]
    body = {"model": "minihermes", "input": "what is 6 * 7? use the calculator"}
    async with httpx.AsyncClient(base_url=base, timeout=60, headers={"Authorization": f"Bearer {key}"}) as c:
        headers = {"Idempotency-Key": "same-1"}
        one, two = await asyncio.gather(
            c.post("/v1/responses", json=body, headers=headers),
            c.post("/v1/responses", json=body, headers=headers),
        )
        assert one.status_code == two.status_code == 200, (one.text, two.text)
        assert one.json() == two.json()
        session_id = one.headers["x-minihermes-session"]
        stats = (await c.post("/api/v1/actors/agent/get_stats", json={"session_id": session_id})).json()
        assert stats["turns"] == 1
        listed = (await c.post("/api/v1/actors/session_manager/list_sessions", json={})).json()
        assert [s["session_id"] for s in listed["sessions"]] == [session_id]
        changed = await c.post("/v1/responses", json={**body, "input": "hello"}, headers=headers)
        assert changed.status_code == 409 and changed.json()["error"]["code"] == "idempotency_key_reused"

        # the same on /api/v1/sessions/{id}/messages, streamed or not
        path = f"/api/v1/sessions/{session_id}/messages"
        message = {"content": "what is 2 + 2"}
        first = await c.post(path, json=message, headers={"Idempotency-Key": "m-1"})
        second = await c.post(path, json=message, headers={"Idempotency-Key": "m-1"})
        assert first.status_code == 200 and first.json() == second.json()
        assert "4" in first.json()["response"]
        streamed = await c.post(path, json={**message, "stream": True}, headers={"Idempotency-Key": "m-2"})
        replayed = await c.post(path, json={**message, "stream": True}, headers={"Idempotency-Key": "m-2"})
        assert "event: final" in streamed.text and "event: final" in replayed.text
        assert first.json()["response"] in replayed.text
        stats = (await c.post("/api/v1/actors/agent/get_stats", json={"session_id": session_id})).json()
        assert stats["turns"] == 3  # one per key
        bad = await c.post(path, json=message, headers={"Idempotency-Key": "m-1\x01"})
        assert bad.status_code in (400, 422)


if __name__ == "__main__":
    from minihermes.runtime._loop import run as run_on_loop

    run_on_loop(serve(Path(sys.argv[1]), sys.argv[2]))
