"""Erasure (issue 25): ``memory.forget {user_id}`` removes every byte of what a user put in, from every store.

One user (alice) puts one unique token into a chat, a stored memory, a workspace file, a kanban card (and a
comment on another user's card), a cron prompt, a goal and her inbox. Another user (bob) and the tenant's
shared data (an admin's memory, card, job and tenant-wide goal) sit beside it. After alice forgets herself and
the node stops, no file under the data directory (database, -wal, -shm, blobs, workspaces, the node's log)
holds the token in any case form or in the form the full-text indexes store it, and on PostgreSQL neither does
a ``pg_dump``; the audit trail still verifies, and an edit of a remaining event is reported at its sequence
number. Bob's data and the shared data are the same before and after.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from minihermes.app import build_agent_node, default_config
from minihermes.context import search_terms
from minihermes.runtime import InvalidArgument, Node, PermissionDenied, RequestContext
from minihermes.runtime.store import open_store

from ..store.conftest import drop_schema
from ..work.conftest import until
from .world import world

ALICE = RequestContext(tenant="acme", principal="alice", roles=frozenset({"user"}))
BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
PG_DSN = os.environ.get("MINIHERMES_PG_DSN", "")
STORES = (
    "memories",
    "sessions",
    "transcripts",
    "session_index",
    "workspace_files",
    "kanban",
    "kanban_comments",
    "cron_jobs",
    "goals",
    "notifications",
    "skills",
    "kanban_events",
    "audit_events",
    "approvals",
)
"""Stores alice's seeding reaches: each must count something cleared."""


def new_token() -> str:
    """Unique per run, mixed case (so exact, lower- and upper-case forms differ), ending in a digit (no
    stemmer suffix)."""
    return f"Zq{secrets.token_hex(4)}Kv7"


def forms(token: str) -> set[str]:
    """Every form the token may be stored in: as given, lower- and upper-cased, and analysed as the
    full-text indexes hold it."""
    return {token, token.lower(), token.upper(), *search_terms(token)}


def holders(folder: Path, token: str) -> list[str]:
    """The files under ``folder`` whose bytes hold a form of ``token``."""
    needles = [f.encode() for f in forms(token)]
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            for n in needles:
                at = data.find(n)
                if at >= 0:
                    found.append(f"{path.relative_to(folder)}: {data[max(0, at - 60) : at + 30]!r}")
    return found


async def ask(node: Node, ctx: RequestContext, actor: str, op: str, **payload: Any) -> dict[str, Any]:
    reply: dict[str, Any] = await node.ask(actor, op, payload, 60, ctx=ctx)
    return reply


async def seed(node: Node, ctx: RequestContext, token: str, job: str) -> str:
    """A user's chat, memory, workspace file, kanban card, cron prompt and goal, each holding ``token``."""
    sid = (await ask(node, ctx, "session_manager", "create_session"))["session_id"]
    chat = await ask(node, ctx, "agent", "chat", session_id=sid, message=f"remember that my code is {token}")
    assert chat["status"] == "ok", chat
    # three tool calls: a skill is learned from the turn (its workflow keeps the request)
    learn = f"compute 6 * 7, then 12 + 30, then remember the result as {token}"
    chat = await ask(node, ctx, "agent", "chat", session_id=sid, message=learn)
    assert chat["status"] == "ok" and chat["tool_calls"] == 3, chat

    async def learned() -> bool:  # the skill is learned in the background, from the turn
        skills = (await ask(node, ctx, "skill_store", "list_skills"))["skills"]
        return any(k["owner"] == ctx.principal for k in skills)

    await until(learned, what=f"{ctx.principal}'s skill")
    await ask(node, ctx, "memory", "store_memory", key="passport", value=f"passport {token}")
    wrote = await ask(
        node,
        ctx,
        "tool_executor",
        "execute",
        name="write_file",
        input={"path": "notes/p.txt", "content": f"file {token}"},
        session_id=sid,
    )
    assert wrote["status"] == "ok", wrote
    await ask(node, ctx, "kanban", "create", title=f"card {token}", body=f"body {token}")
    await ask(
        node, ctx, "cron_scheduler", "create_job", job_id=job, prompt=f"cron {token}", schedule="0 9 * * 1"
    )
    await ask(node, ctx, "goals", "set_goal", session_id=sid, text=f"goal {token}")
    await ask(node, ADA, "notifications", "notify", user_id=ctx.principal, text=f"note {token}")
    return sid


async def everything_but_alices(node: Node, bob_session: str, bob_token: str) -> dict[str, Any]:
    """Bob's data and the tenant's shared data, as bob and the admin read them (alice's comments on
    others' cards left out: those are hers)."""
    memories = await ask(node, BOB, "memory", "list_memories", limit=1000, include_episodes=True)
    shared = await ask(node, ADA, "memory", "list_memories", limit=1000, user_id="ada")
    cards = (await ask(node, ADA, "kanban", "list", include_archived=True, limit=1000))["tasks"]
    jobs = (await ask(node, ADA, "cron_scheduler", "list_jobs"))["jobs"]
    goals = (await ask(node, ADA, "goals", "list_goals", status=""))["goals"]
    search = await ask(node, BOB, f"agent/{bob_session}", "session_search", query=bob_token, limit=50)
    history = await ask(node, BOB, "agent", "get_history", session_id=bob_session)
    read = await ask(
        node,
        BOB,
        "tool_executor",
        "execute",
        name="read_file",
        input={"path": "notes/p.txt"},
        session_id=bob_session,
    )
    return {
        "memories": sorted((m["key"], m["value"]) for m in memories["memories"]),
        "shared_memories": sorted((m["key"], m["value"]) for m in shared["memories"]),
        "sessions": sorted(
            (s["session_id"], s["title"])
            for s in (await ask(node, BOB, "session_manager", "list_sessions"))["sessions"]
        ),
        "history": [(m["role"], m.get("content")) for m in history["messages"]],
        "search": sorted((h["session_id"], h["snippet"]) for h in search["hits"]),
        "file": read["result"],
        "cards": sorted(
            (
                c["task_id"],
                c["title"],
                c["body"],
                c["created_by"],
                [m["text"] for m in c["comments"] if m["author"] != "alice"],
            )
            for c in cards
            if c["created_by"] != "alice"
        ),
        "jobs": sorted((j["job_id"], j["prompt"], j["owner"]) for j in jobs if j["owner"] != "alice"),
        "goals": sorted(
            (g["goal_id"], g["text"], g["session_id"]) for g in goals if g.get("owner") != "alice"
        ),
        "inbox": [
            n["text"] for n in (await ask(node, BOB, "notifications", "list_notifications"))["notifications"]
        ],
        "skills": sorted(
            (k["skill_id"], k["name"], k["owner"])
            for k in (await ask(node, BOB, "skill_store", "list_skills"))["skills"]
        ),
    }


@asynccontextmanager
async def node_log(path: Path) -> AsyncIterator[None]:
    """What the node logs (at the server's default level, info) goes to ``path``, as ``serve`` writes it."""
    handler = logging.FileHandler(path)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()


async def forget_alice(data: Path, configure: Callable[[Any], None]) -> tuple[str, str]:
    """Seed alice, bob and the shared data, check the data before and after alice forgets herself, stop the
    node. Returns alice's and bob's tokens."""
    alice, bob = new_token(), new_token()
    config = default_config(data)
    configure(config)
    node = build_agent_node(config)  # makes the data dir
    async with node_log(data / "server.log"):
        await node.start()
        try:
            bob_session = await seed(node, BOB, bob, "bob-job")
            await seed(node, ALICE, alice, "alice-job")
            # the tenant's shared data, and bob's card that alice comments on
            await ask(node, ADA, "memory", "store_memory", key="wifi", value="the office wifi is guest")
            await ask(node, ADA, "goals", "set_goal", session_id="*", text="ship the release")
            await ask(node, ADA, "kanban", "create", title="shared card", body="for everyone")
            await ask(
                node,
                ADA,
                "cron_scheduler",
                "create_job",
                job_id="ada-job",
                prompt="weekly",
                schedule="0 9 * * 1",
            )
            bobs_card = next(
                c for c in (await ask(node, ADA, "kanban", "list"))["tasks"] if c["created_by"] == "bob"
            )
            await ask(node, ALICE, "kanban", "comment", task_id=bobs_card["task_id"], text=f"me too {alice}")
            # a call of alice's waiting for approval: the approval keeps its input
            await ask(node, ADA, "guardrails", "set_policy", tool_name="memory_store", decision="review")
            paused = await ask(
                node,
                ALICE,
                "agent",
                "chat",
                session_id="alice-pin",
                message=f"remember that my pin is {alice}",
            )
            assert paused["status"] == "paused", paused
            await ask(node, ADA, "guardrails", "clear_policy", tool_name="memory_store")
            await ask(node, BOB, "kanban", "comment", task_id=bobs_card["task_id"], text="thanks")

            before = await everything_but_alices(node, bob_session, bob)
            assert all(before.values()), before  # every kind of bob's and shared data is there to compare
            assert holders(data, alice), "the token was never stored: this test would prove nothing"

            out = await ask(node, ALICE, "memory", "forget", user_id="alice")
            assert out["status"] == "ok" and out["mode"] == "user"
            assert {s for s in STORES if out["cleared"].get(s, 0) < 1} == set(), out["cleared"]

            after = await everything_but_alices(node, bob_session, bob)
            assert after == before
            card = await ask(node, ADA, "kanban", "show", task_id=bobs_card["task_id"])
            assert [m["author"] for m in card["task"]["comments"]] == ["bob"]
            verify = await ask(node, ADA, "audit_event", "verify")
            assert verify["ok"], verify
        finally:
            await node.stop(deadline=10)
    return alice, bob


def tamper(db: Path, seq: int) -> None:
    """Change audit event ``seq`` in place: its sealed bytes, or its plain content, or (content gone) its
    time."""
    key = "tenant = 'acme' AND stream = 'audit' AND seq = ?"
    with sqlite3.connect(db) as conn:
        body, data = conn.execute(f"SELECT body, data FROM events WHERE {key}", (seq,)).fetchone()
        if body:
            conn.execute(
                f"UPDATE events SET body = ? WHERE {key}", (bytes(body[:-1]) + bytes([body[-1] ^ 1]), seq)
            )
        elif data:
            conn.execute(f"UPDATE events SET data = ? WHERE {key}", (data.replace('"', "'", 1), seq))
        else:
            conn.execute(f"UPDATE events SET ts = ts + 1 WHERE {key}", (seq,))


async def first_bad_seq(data: Path) -> int | None:
    store = open_store("sqlite", data_dir=data)
    await store.open()
    try:
        check = await store.events.verify(("acme", "default"), "audit")
    finally:
        await store.close()
    assert check.ok == (check.first_bad_seq is None)
    return check.first_bad_seq


async def test_forgetting_a_user_leaves_no_byte_of_theirs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    alice, bob = await forget_alice(data, lambda config: None)
    assert holders(data, alice) == []
    assert holders(data, bob)  # bob's data is still on disk: the scan sees what is there
    assert await first_bad_seq(data) is None
    with sqlite3.connect(data / "minihermes.db") as conn:
        seqs = [r[0] for r in conn.execute("SELECT seq FROM events WHERE stream = 'audit' ORDER BY seq")]
    for seq in sorted({seqs[0], seqs[len(seqs) // 2], seqs[-1]}):  # each in a copy of the data dir
        copy = tmp_path / f"copy-{seq}"
        await asyncio.to_thread(shutil.copytree, data, copy)
        tamper(copy / "minihermes.db", seq)
        assert await first_bad_seq(copy) == seq


@pytest.mark.skipif(not PG_DSN, reason="MINIHERMES_PG_DSN is not set (scripts/setup.d/10-postgres.sh)")
async def test_forgetting_a_user_on_postgresql_leaves_nothing_in_a_dump(tmp_path: Path) -> None:
    schema = f"erasure_{uuid.uuid4().hex[:12]}"

    def on_postgres(config: Any) -> None:
        config.model.node.backend = "postgres"
        config.model.node.backend_options = {"dsn": PG_DSN, "schema": schema}

    data = tmp_path / "data"
    try:
        alice, bob = await forget_alice(data, on_postgres)
        dump = (
            await asyncio.to_thread(
                subprocess.run,
                ["pg_dump", "--no-owner", f"--schema={schema}", PG_DSN],
                capture_output=True,
                check=True,
            )
        ).stdout
        assert bob.encode() in dump  # the dump holds what is left
        left = [line[:300] for line in dump.splitlines() if any(f.encode() in line for f in forms(alice))]
        assert left == []
        assert holders(data, alice) == []  # workspaces and the log
    finally:
        await drop_schema(schema)


FORGET_STORES = (
    "session_manager",
    "kanban",
    "cron_scheduler",
    "goals",
    "notifications",
    "skill_store",
)


async def test_a_user_forgets_only_themselves_and_only_admins_the_tenant(tmp_path: Path) -> None:
    node = build_agent_node(default_config(tmp_path / "data"))
    await node.start()
    try:
        token = new_token()
        await seed(node, ALICE, token, "alice-job")
        for store in FORGET_STORES:
            with pytest.raises(PermissionDenied):
                await ask(node, BOB, store, "forget_subject", user_id="alice")
            with pytest.raises(PermissionDenied):
                await ask(node, BOB, store, "forget_subject", tenant=True)
            with pytest.raises(InvalidArgument):
                await ask(node, BOB, store, "forget_subject")
            with pytest.raises(InvalidArgument):
                await ask(node, ADA, store, "forget_subject", user_id="bob", tenant=True)
        for who, payload in ((BOB, {"user_id": "alice"}), (BOB, {"tenant": True})):
            with pytest.raises(PermissionDenied):
                await ask(node, who, "memory", "forget", **payload)
        assert holders(tmp_path / "data" / "workspaces", token)  # nothing of alice's went
        cards = (await ask(node, ADA, "kanban", "list"))["tasks"]
        assert [c["created_by"] for c in cards] == ["alice"]
    finally:
        await node.stop(deadline=10)


async def test_forgetting_a_session_takes_its_record_workspace_and_goals(tmp_path: Path) -> None:
    data = tmp_path / "data"
    node = build_agent_node(default_config(data))
    await node.start()
    try:
        kept_token, gone_token = new_token(), new_token()
        kept = await seed(node, ALICE, kept_token, "kept-job")
        gone = await seed(node, ALICE, gone_token, "gone-job")
        # bob cannot forget alice's session, through memory or a store directly
        with pytest.raises(PermissionDenied):
            await ask(node, BOB, "memory", "forget", session_id=gone)
        out = await ask(node, BOB, "session_manager", "forget_subject", session_id=gone)
        assert out["cleared"] == {"sessions": 0, "workspace_files": 0}
        assert (await ask(node, BOB, "goals", "forget_subject", session_id=gone))["cleared"] == {"goals": 0}

        out = await ask(node, ALICE, "memory", "forget", session_id=gone)
        assert out["mode"] == "session"
        cleared = out["cleared"]
        assert cleared["sessions"] == 1 and cleared["goals"] == 1 and cleared["workspace_files"] >= 2
        assert cleared["session_index"] > 0 and cleared["transcripts"] == 1
        # a person's cards, jobs and inbox are not a session's
        assert cleared["kanban"] == cleared["cron_jobs"] == cleared["notifications"] == 0
        sessions = (await ask(node, ALICE, "session_manager", "list_sessions"))["sessions"]
        assert [s["session_id"] for s in sessions] == [kept]
        goals = (await ask(node, ALICE, "goals", "list_goals", status=""))["goals"]
        assert [g["session_id"] for g in goals] == [kept]
        assert holders(data / "workspaces", gone_token) == []
        assert holders(data / "workspaces", kept_token)
        hits = await ask(node, ALICE, f"agent/{kept}", "session_search", query=gone_token, limit=10)
        assert hits["hits"] == []
        hits = await ask(node, ALICE, f"agent/{kept}", "session_search", query=kept_token, limit=10)
        assert {h["session_id"] for h in hits["hits"]} == {kept}
    finally:
        await node.stop(deadline=10)


async def test_forgetting_the_tenant_leaves_nothing_of_anybody(tmp_path: Path) -> None:
    data = tmp_path / "data"
    node = build_agent_node(default_config(data))
    await node.start()
    try:
        tokens = [new_token(), new_token()]
        await seed(node, ALICE, tokens[0], "alice-job")
        await seed(node, BOB, tokens[1], "bob-job")
        with pytest.raises(PermissionDenied):
            await ask(node, ALICE, "memory", "forget", tenant=True)
        out = await ask(node, ADA, "memory", "forget", tenant=True)
        assert out["mode"] == "tenant"
        assert out["cleared"]["sessions"] == 2 and out["cleared"]["cron_jobs"] == 2
        assert out["cleared"]["kanban"] == 2 and out["cleared"]["notifications"] == 2
        assert not (data / "workspaces" / "acme").exists()
        assert (await ask(node, ADA, "session_manager", "list_sessions"))["sessions"] == []
        assert (await ask(node, ADA, "memory", "list_memories", include_episodes=True))["memories"] == []
    finally:
        await node.stop(deadline=10)


async def test_over_http_a_user_forgets_themselves_and_nobody_else(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        denied = await w.op("bob", "memory", "forget", {"user_id": "alice"})
        assert denied.status_code == 403, denied.text
        assert (await w.op("vic", "memory", "forget", {"user_id": "vic"})).status_code == 403  # a viewer
        out = await w.ok("alice", "memory", "forget", {"user_id": "alice"})
        assert out["mode"] == "user" and out["cleared"]["sessions"] == 1 and out["cleared"]["kanban"] == 1
        assert (await w.ok("alice", "memory", "recall_memory", {"key": w.targets["key"]}))["found"] is False
        # the edge fills in alice's own user_id beside: still refused, not taken for "forget me"
        assert (await w.op("alice", "memory", "forget", {"tenant": True})).status_code == 403
        assert (await w.op("alice", "memory", "forget", {"everything": True})).status_code == 403
        for store in ("kanban", "session_manager", "audit_event"):
            assert (await w.op("alice", store, "forget_subject", {"tenant": True})).status_code == 403
