"""Issue 27 over HTTP, with a SIGKILL: ``POST /api/v1/sessions/{id}/cancel`` stops a turn whose terminal call
sleeps in the sandbox (the process is gone at once), another user gets 404 for it, and once the cancel is
answered the turn is durably ``cancelled``: a server SIGKILLed right after does not resume it on restart.

Run as ``python -m tests.agent.test_cancel_served <data_dir> first|again <marker>``, this module is the
server: the whole agent app with API keys on a free port, its LLM a script that runs ``sleep <marker>`` in the
terminal (allowed by policy) for any message but "hello again", which it answers in words.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from minihermes.agent.agent import STOPPED_NOTE
from minihermes.api import AuthConfig, create_api_key, serve_http
from minihermes.app import build_agent_node, default_config
from minihermes.llm import CompletionRequest, ScriptedProvider, register_provider
from minihermes.runtime import RequestContext

from .._proc import kill_hard, read_line, spawn_module
from .test_cancel_turn import sleeping, until

MARKER = {"value": ""}


def respond(request: CompletionRequest) -> dict[str, Any]:
    last = request.messages[-1]
    if last.role == "user" and "hello again" in str(last.content):
        return {"content": "hi", "stop_reason": "end_turn"}
    if last.role == "tool":
        return {"content": "slept", "stop_reason": "end_turn"}
    call = {"id": "call-sleep", "name": "terminal", "input": {"command": f"sleep {MARKER['value']}"}}
    return {"content": "", "stop_reason": "tool_use", "tool_calls": [call]}


register_provider("sleepy", lambda config: ScriptedProvider(respond, config), replace=True)


async def serve(data: Path, phase: str, marker: str) -> None:
    MARKER["value"] = marker
    node = build_agent_node(default_config(data))
    await node.start()
    keys = []
    if phase == "first":
        for who, role in (("ada", "admin"), ("bob", "user"), ("carol", "user")):
            keys.append((await create_api_key(node.store, tenant="acme", principal=who, roles=[role])).key)
        admin = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
        provider = {"name": "script", "kind": "sleepy", "model": "s"}
        await node.ask("llm_gateway", "register_provider", provider, 10, ctx=admin)
        await node.ask("llm_gateway", "switch_provider", {"provider": "script"}, 10, ctx=admin)
        policy = {"tool_name": "terminal", "decision": "allow"}
        await node.ask("guardrails", "set_policy", policy, 10, ctx=admin)
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(
        serve_http(
            node, "127.0.0.1", 0, AuthConfig(api_keys=True), on_started=lambda h, p: started.set_result(p)
        )
    )
    print("READY", await started, *keys, flush=True)
    await server


async def _ready(proc: asyncio.subprocess.Process) -> list[str]:
    while True:
        line = await read_line(proc)
        if line.startswith("READY"):
            return line.split()[1:]


class Client:
    def __init__(self, port: str) -> None:
        self.base = f"http://127.0.0.1:{port}"

    async def post(self, key: str, path: str, body: Any = None) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=60) as c:
            return await c.post(path, json=body, headers={"Authorization": f"Bearer {key}"})

    async def ask(self, key: str, actor: str, op: str, **payload: Any) -> dict[str, Any]:
        r = await self.post(key, f"/api/v1/actors/{actor}/{op}", payload)
        assert r.status_code == 200, r.text
        return dict(r.json())


@pytest.mark.slow
async def test_a_cancelled_turn_is_not_resumed_after_a_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    marker = f"30.{abs(hash(tmp_path)) % 10**9:09d}"
    proc = await spawn_module("tests.agent.test_cancel_served", str(data), "first", marker)
    try:
        port, ada, bob, carol = await _ready(proc)
        http = Client(port)
        session = (await http.ask(bob, "session_manager", "create_session", channel="api"))["session_id"]
        turn = asyncio.ensure_future(
            http.post(bob, f"/api/v1/sessions/{session}/messages", {"content": "sleep a while"})
        )
        await until(lambda: bool(sleeping(marker)) or turn.done(), 60)
        assert not turn.done(), turn.result().text

        other = await http.post(carol, f"/api/v1/sessions/{session}/cancel")
        assert other.status_code == 404, other.text
        assert sleeping(marker) and not turn.done()

        stopped = await http.post(bob, f"/api/v1/sessions/{session}/cancel")
        assert stopped.status_code == 200, stopped.text
        assert stopped.json()["cancelled"] is True
        await until(lambda: not sleeping(marker), 1)
        answered = await asyncio.wait_for(turn, 10)
        assert answered.status_code == 200 and answered.json()["status"] == "cancelled"
    finally:
        await kill_hard(proc)

    proc = await spawn_module("tests.agent.test_cancel_served", str(data), "again", marker)
    try:
        (port,) = await _ready(proc)
        http = Client(port)
        # A turn resumed at start-up would run before the next message does (``chat`` waits for it).
        hello = await http.post(bob, f"/api/v1/sessions/{session}/messages", {"content": "hello again"})
        assert hello.status_code == 200 and hello.json()["response"] == "hi", hello.text
        assert not sleeping(marker)
        assert (await http.ask(ada, "tool_executor", "get_stats"))["executions"] == 0
        last = await http.ask(bob, "agent", "get_history", session_id=session)
        roles = [(m["role"], m["content"] if m["role"] != "tool" else "") for m in last["messages"]]
        assert roles == [
            ("user", "sleep a while"),
            ("assistant", ""),
            ("tool", ""),
            ("assistant", STOPPED_NOTE),
            ("user", "hello again"),
            ("assistant", "hi"),
        ]
    finally:
        await kill_hard(proc)


if __name__ == "__main__":
    asyncio.run(serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
