"""Issue 23, hole 2 (and 7): a turn cut off by a crash or a graceful stop resumes as its caller, never as
``system``; a graceful stop answers the cut-off chat 503 ``shutting_down``.

The attack, replayed on ``minihermes serve`` in a child process (JWT auth, tenant ``acme``: admin ``ada``,
users ``alice`` and ``bob``): alice's turn waits on a slow model (a local OpenAI-compatible stub that holds
the request); the server is killed (SIGKILL) or stopped (SIGTERM) meanwhile and started again on the same data
dir. The resumed turn's model then asks for ``kanban_delete`` of ada's card (an admin-only op) and
``memory_store``. Before the fix both ran as ``system``: the card was deleted, the memory was tenant-shared
with owner ``system`` and bob read it, and the audit trail said ``principal=system``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse

from minihermes.app import AGENT_CONFIG
from minihermes.runtime._loop import loop_name

from .._server import ROOT, free_port

pytestmark = pytest.mark.both_loops  # child processes and signals: on uvloop and asyncio's loop

SECRET = "resume-principal-secret-long-enough-for-hs256"
MARKER = "tidy-up-QZR7"
NOTE = "alice-resumed-note-QZR8"


def bearer(sub: str, role: str) -> dict[str, str]:
    body = {"tenant": "acme", "sub": sub, "roles": [role], "exp": int(time.time()) + 3600}
    return {"Authorization": f"Bearer {jwt.encode(body, SECRET, algorithm='HS256')}"}


ADA, ALICE, BOB = bearer("ada", "admin"), bearer("alice", "user"), bearer("bob", "user")


class SlowModel:
    """An OpenAI-compatible chat-completions server on loopback, in a thread. The agent turn carrying
    ``MARKER`` is held (``entered`` is set) while ``hold`` is on; once released from holding, it asks for the
    attack's tool calls, then answers. Every other completion gets a plain answer."""

    def __init__(self, card: str = "") -> None:
        self.card = card
        self.hold = True
        self.entered = threading.Event()
        self.tool_results: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        config = uvicorn.Config(
            self._app, log_level="critical", lifespan="off", access_log=False, interface="asgi3"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self._thread.start()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._release = asyncio.Event()
        await self._server.serve(sockets=[self._sock])

    def stop(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)
        self._server.should_exit = True
        self._thread.join(10)

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self._answer(scope, receive, send)
        except Exception as e:  # shown by the test that fails on it, not lost in a 500
            self.errors.append(repr(e))
            raise

    async def _answer(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await Request(scope, receive).json()
        messages = body.get("messages") or []
        tools = {t["function"]["name"] for t in body.get("tools") or []}
        turn = "memory_store" in tools and any(MARKER in str(m.get("content")) for m in messages)
        if not turn:
            message: dict[str, Any] = {"content": "noted"}
        elif messages[-1]["role"] == "tool":
            self.tool_results = [m for m in messages if m["role"] == "tool"]
            message = {"content": f"finished {MARKER}"}
        elif self.hold:
            self.entered.set()
            assert self._release is not None
            await self._release.wait()  # until the test ends: the server that asked is gone by then
            message = {"content": "too late"}
        else:
            calls = [
                ("c-delete", "kanban_delete", {"task_id": self.card}),
                ("c-store", "memory_store", {"key": "resume-note", "value": NOTE}),
            ]
            message = {
                "content": None,
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                    for i, n, a in calls
                ],
            }
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        await JSONResponse(
            {
                "id": "chatcmpl-resume",
                "object": "chat.completion",
                "created": 1,
                "model": "slow-1",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )(scope, receive, send)


class Served:
    """``minihermes serve --config`` (shutdown deadline 2 s) with JWT auth, in a child process."""

    def __init__(self, data: Path, model_port: int) -> None:
        self.data = data
        self.model_port = model_port
        self.config = data.parent / "node.toml"
        self.config.write_text(
            AGENT_CONFIG.replace('id = "node-1"', 'id = "node-1"\nshutdown_deadline_seconds = 2', 1)
        )
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""
        self.log: list[str] = []
        self._drain: asyncio.Future[None] | None = None

    async def start(self) -> None:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIHERMES_")}
        env |= {
            "MINIHERMES_EVENT_LOOP": loop_name(),
            "RESUME_JWT": SECRET,
            "MINIHERMES_ALLOWED_EGRESS": f"127.0.0.1:{self.model_port}",
        }
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "minihermes.cli.main",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(self.data),
            "--config",
            str(self.config),
            "--jwt-secret-env",
            "RESUME_JWT",
            "--log-level",
            "info",
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self.proc.stderr is not None
        while True:
            line = (await asyncio.wait_for(self.proc.stderr.readline(), 60)).decode()
            assert line, "server exited before listening:\n" + "".join(self.log[-40:])
            self.log.append(line)
            if "HTTP API on" in line:
                break
        self.url = f"http://127.0.0.1:{port}"
        self._drain = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.log.append(line.decode())

    async def signal(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        if self._drain is not None:
            await asyncio.wait_for(self._drain, 10)
        return code


@pytest.fixture
async def model() -> AsyncIterator[SlowModel]:
    slow = SlowModel()
    yield slow
    slow.stop()


async def call(c: httpx.AsyncClient, who: dict[str, str], actor: str, op: str, **body: Any) -> Any:
    r = await c.post(f"/api/v1/actors/{actor}/{op}", json=body, headers=who)
    assert r.status_code == 200, (actor, op, r.status_code, r.text)
    return r.json()


async def finished(c: httpx.AsyncClient, session: str, timeout: float = 60) -> dict[str, Any]:
    """alice's last finished turn in ``session``, once the resumed turn has finished it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        last = await call(c, ALICE, "agent", "last_turn", session_id=session)
        if last.get("status") not in (None, "none"):
            return dict(last)
        assert loop.time() < deadline, "the interrupted turn was not resumed"
        await asyncio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
async def test_a_turn_cut_off_mid_model_call_resumes_as_its_caller(
    tmp_path: Path, model: SlowModel, sig: int
) -> None:
    data = tmp_path / "data"
    server = Served(data, model.port)
    await server.start()
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
        provider = {"name": "slow", "kind": "openai", "model": "slow-1"}
        await call(
            c,
            ADA,
            "llm_gateway",
            "register_provider",
            **provider,
            base_url=f"http://127.0.0.1:{model.port}/v1",
        )
        await call(c, ADA, "llm_gateway", "switch_provider", provider="slow")
        card = await call(c, ADA, "kanban", "create", title="ada's card")
        model.card = card.get("task_id") or card["task"]["task_id"]
        session = (await call(c, ALICE, "session_manager", "create_session"))["session_id"]
        chat = asyncio.ensure_future(
            c.post(
                "/api/v1/actors/agent/chat?timeout=120",
                json={"session_id": session, "message": f"{MARKER}: clean up the board and take a note"},
                headers=ALICE,
            )
        )
        assert await asyncio.to_thread(model.entered.wait, 60), (model.errors, "".join(server.log[-30:]))
        code = await server.signal(sig)
        if sig == signal.SIGTERM:
            # Hole 7: the graceful stop answers the request it cut off 503 shutting_down, not 500.
            assert code == 0, "".join(server.log[-40:])
            reply = await asyncio.wait_for(chat, 30)
            assert reply.status_code == 503, reply.text
            assert reply.json()["error"]["code"] == "shutting_down"
            assert reply.headers.get("retry-after")
        else:
            with pytest.raises(httpx.TransportError):
                await asyncio.wait_for(chat, 30)
    assert "Traceback" not in "".join(server.log), "".join(server.log)[-6000:]

    model.hold = False  # the restarted node's resumed turn gets the attack's tool calls
    again = Served(data, model.port)
    await again.start()
    try:
        async with httpx.AsyncClient(base_url=again.url, timeout=60) as c:
            last = await finished(c, session)
            assert last["status"] == "ok" and MARKER in last["response"], last
            results = {m["tool_call_id"]: json.loads(m["content"]) for m in model.tool_results}
            # The admin-only op is refused to alice, as without the restart; ada's card is still there.
            assert (results["c-delete"].get("error") or {}).get("code") == "permission_denied", results
            shown = await call(c, ADA, "kanban", "show", task_id=model.card)
            assert shown["task"]["title"] == "ada's card"
            # The memory is alice's and private: bob does not read it, ada's listing shows its holder.
            mine = await call(c, ALICE, "memory", "recall_memory", key="resume-note")
            assert mine["found"] and mine["value"] == NOTE
            theirs = await c.post(
                "/api/v1/actors/memory/recall_memory", json={"key": "resume-note"}, headers=BOB
            )
            assert NOTE not in theirs.text
            listed = await call(c, ADA, "memory", "list_memories", user_id="alice")
            [record] = [m for m in listed["memories"] if m["key"] == "resume-note"]
            assert record["private"] and record["user_id"] == "alice", record
            # The audit trail names alice for the resumed tool calls, and the turn, never system.
            events = (await call(c, ADA, "audit_event", "query_events", session_id=session, limit=500))[
                "events"
            ]
            kinds = ("tool_executed", "permission_denied", "memory_stored", "turn_completed")
            resumed = [e for e in events if e["event_type"] in kinds]
            tools = {e["data"].get("tool") for e in resumed if e["event_type"] == "tool_executed"}
            assert tools >= {"kanban_delete", "memory_store"}, events
            assert {e["principal"] for e in resumed} == {"alice"}, [
                (e["event_type"], e["principal"]) for e in resumed
            ]
    finally:
        assert await again.signal(signal.SIGTERM) == 0
    assert "Traceback" not in "".join(again.log), "".join(again.log)[-6000:]
