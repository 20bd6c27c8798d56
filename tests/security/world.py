"""The world the authorization suite attacks: the whole agent app behind JWT auth, two tenants with an admin,
two users and a viewer each, and resources of one user (``alice`` of ``acme``) for everybody else to aim at.

Every private thing of alice's carries a canary string; no reply to anybody else may ever contain one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt

from minihermes.api import AuthConfig, create_app
from minihermes.app import build_agent_node, default_config
from minihermes.runtime import Node, RequestContext

SECRET = "authorization-suite-secret-long-enough-for-hs256"

PRINCIPALS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # name -> (tenant, principal, roles)
    "ada": ("acme", "ada", ("admin",)),
    "alice": ("acme", "alice", ("user",)),
    "bob": ("acme", "bob", ("user",)),
    "vic": ("acme", "vic", ("viewer",)),
    "gus": ("globex", "gus", ("admin",)),
    "carol": ("globex", "carol", ("user",)),
    "dan": ("globex", "dan", ("user",)),
    "wes": ("globex", "wes", ("viewer",)),
}

CANARY_MEMORY = "alice-private-QZXJ1"
CANARY_CHAT = "alice-codeword-QZXJ3"
CANARY_FILE = "alice-file-QZXJ4"
CANARIES = (CANARY_MEMORY, CANARY_CHAT, CANARY_FILE)


def token(name: str) -> str:
    tenant, sub, roles = PRINCIPALS[name]
    body = {"tenant": tenant, "sub": sub, "roles": list(roles), "exp": int(time.time()) + 3600}
    return jwt.encode(body, SECRET, algorithm="HS256")


def context(name: str) -> RequestContext:
    tenant, sub, roles = PRINCIPALS[name]
    return RequestContext(tenant=tenant, principal=sub, roles=frozenset(roles))


@dataclass
class World:
    node: Node
    http: httpx.AsyncClient
    targets: dict[str, Any] = field(default_factory=dict)
    """Alice's resources, by the argument names that would reach them."""

    async def op(self, who: str, actor: str, op: str, payload: dict[str, Any]) -> httpx.Response:
        return await self.http.post(
            f"/api/v1/actors/{actor}/{op}",
            json=payload,
            headers={"Authorization": f"Bearer {token(who)}"},
        )

    async def ok(self, who: str, actor: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        r = await self.op(who, actor, op, payload)
        assert r.status_code < 300, (who, actor, op, r.status_code, r.text)
        return dict(r.json())

    async def catalog(self) -> list[dict[str, Any]]:
        r = await self.http.get("/api/v1/actors", headers={"Authorization": f"Bearer {token('ada')}"})
        assert r.status_code == 200, r.text
        return list(r.json()["actors"])

    async def state_of_alice(self) -> dict[str, Any]:
        """What must survive everybody else's calls, read back as alice (and ada where users cannot)."""
        t = self.targets
        memory = await self.op("alice", "memory", "recall_memory", {"key": t["key"]})
        card = await self.ok("alice", "kanban", "show", {"task_id": t["task_id"]})
        task = card.get("task", card)
        goals = await self.ok("alice", "goals", "list_goals", {"session_id": t["session_id"]})
        history = await self.ok("alice", "agent", "get_history", {"session_id": t["session_id"]})
        session = await self.ok("alice", "session_manager", "get_session", {"session_id": t["session_id"]})
        job = await self.op("ada", "cron_scheduler", "get_job", {"job_id": t["job_id"]})
        return {
            "memory": memory.json().get("value") if memory.status_code == 200 else memory.status_code,
            "card": (task.get("title"), task.get("body"), task.get("status"), bool(task.get("archived"))),
            "goals": sorted((g["goal_id"], g["status"], g["text"]) for g in goals["goals"]),
            "history": len(history.get("messages", history.get("history", []))),
            "session": session.get("state", session.get("session", {}).get("state")),
            "job": job.status_code,
        }


async def _seed(w: World) -> None:
    """Alice's session, private memory, transcript, workspace file, kanban card and goal; ada's cron job."""
    t = w.targets
    t["user_id"] = "alice"
    session = await w.ok("alice", "session_manager", "create_session", {})
    t["session_id"] = session["session_id"]
    await w.ok("alice", "memory", "store_memory", {"key": "alice_secret", "value": CANARY_MEMORY})
    t["key"] = "alice_secret"
    await w.ok(
        "alice", "agent", "chat", {"session_id": t["session_id"], "message": f"my code word is {CANARY_CHAT}"}
    )
    await w.node.ask(
        "tool_executor",
        "execute",
        {
            "name": "write_file",
            "input": {"path": "secret.txt", "content": CANARY_FILE},
            "session_id": t["session_id"],
        },
        10,
        ctx=context("alice"),
    )
    card = await w.ok("alice", "kanban", "create", {"title": "alice's card", "body": "shared board text"})
    t["task_id"] = card.get("task_id") or card["task"]["task_id"]
    goal = await w.ok(
        "alice", "goals", "set_goal", {"session_id": t["session_id"], "text": "finish the report"}
    )
    t["goal_id"] = goal["goal_id"]
    await w.ok(
        "ada",
        "cron_scheduler",
        "create_job",
        {"job_id": "ada-job", "prompt": "say hello", "schedule": "0 9 * * 1"},
    )
    t["job_id"] = "ada-job"
    # a paused tool call of alice's: approvals are aimed at too
    await w.ok("ada", "guardrails", "set_policy", {"tool_name": "calculator", "decision": "review"})
    paused = await w.ok(
        "alice", "agent", "chat", {"session_id": t["session_id"], "message": "calculate 6 * 7"}
    )
    t["approval_id"] = paused.get("approval_id", "")
    await w.ok("ada", "guardrails", "clear_policy", {"tool_name": "calculator"})


@asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[World]:
    node = build_agent_node(default_config(tmp_path / "data"))
    await node.start()
    app = create_app(node, AuthConfig(jwt_secret=SECRET, api_keys=False), dashboard=False)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=60)
    w = World(node, http)
    try:
        await _seed(w)
        yield w
    finally:
        await http.aclose()
        await node.stop(deadline=5)
