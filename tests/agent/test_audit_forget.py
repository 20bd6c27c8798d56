"""audit_event forgetting and retention (issue 25), on every store backend: a forgotten user's events read as
their type, time and ``forgotten: true``, their bytes are gone from the files, the chain still verifies and
every remaining event is still covered; retention by event type trims only those types and signs an anchor
that ``verify`` checks a rewritten trail against; events written before chain format 2 still verify."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from minihermes.agent.audit_event import STREAM, AuditEvent, audit_record, fire_audit
from minihermes.context import forget as forgetting
from minihermes.runtime import (
    ActorSpec,
    GenServer,
    InvalidArgument,
    ManualClock,
    Node,
    PermissionDenied,
    RequestContext,
    SupervisorSpec,
    call,
    current_context,
)
from minihermes.runtime.store import RetentionRule, Store, open_store

from ..store.conftest import drop_schema
from ..store.test_event_erasure import raw, rechain

ADA = RequestContext(tenant="acme", principal="ada", roles=frozenset({"admin"}))
BOB = RequestContext(tenant="acme", principal="bob", roles=frozenset({"user"}))
CAROL = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))
VIC = RequestContext(tenant="acme", principal="vic", roles=frozenset({"viewer"}))
PG_DSN = os.environ.get("MINIHERMES_PG_DSN", "")
BACKENDS = ["sqlite", *(["postgres"] if PG_DSN else [])]
TOKEN = "Kq81Passport-XYZ-7"
CAROLS = "Mw55Carol-ABC-3"


class Doer(GenServer):
    """Does something audited as its caller, in a session it records as the caller's."""

    @call
    async def act(self, event_type: str, session_id: str = "", data: dict[str, Any] | None = None) -> bool:
        if session_id:
            await forgetting.record_session(self.host, session_id, current_context().principal)
        return fire_audit(self.host, event_type, f"did {event_type}", session_id=session_id, data=data)


@pytest.fixture(params=BACKENDS)
async def start(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[[], Any]]:
    """A node with the audit trail and an actor that audits what it does, on the backend under test."""
    clock = ManualClock(1_000_000.0)
    schema = f"audit_{uuid.uuid4().hex[:12]}"
    nodes: list[Node] = []

    async def factory() -> Node:
        data = tmp_path / "data"
        if request.param == "sqlite":
            store = open_store("sqlite", data_dir=data, clock=clock)
        else:
            store = open_store(
                "postgres", dsn=PG_DSN, schema=schema, clock=clock, anchor_key_file=data / "anchor.key"
            )
        tree = SupervisorSpec(
            name="root",
            children=[ActorSpec("audit_event", AuditEvent, per_tenant=True), ActorSpec("doer", Doer)],
        )
        node = Node(store, tree, clock=clock)
        await node.start()
        node.test_clock = clock  # type: ignore[attr-defined]
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        await node.stop(deadline=5)
    if request.param == "postgres":
        await drop_schema(schema)


async def ask(node: Node, ctx: RequestContext, actor: str, op: str, **payload: Any) -> Any:
    return await node.ask(actor, op, payload, ctx=ctx)


async def trail(node: Node) -> list[dict[str, Any]]:
    return (await ask(node, ADA, "audit_event", "query_events", limit=1000))["events"]


async def seed(node: Node) -> None:
    """Seqs 1-6: bob twice in his session (the token in a tool input), carol, bob without a session, ada in
    bob's session (an admin acting there), carol again."""
    clock: ManualClock = node.test_clock  # type: ignore[attr-defined]
    plan = [
        (BOB, "tool_executed", "s-bob", {"tool": "memory_store", "input": f"passport {TOKEN}"}),
        (BOB, "llm_call", "s-bob", {"tokens": 10}),
        (CAROL, "tool_executed", "s-carol", {"tool": "note", "input": f"mine {CAROLS}"}),
        (BOB, "login", "", {"ok": True, "note": TOKEN}),
        (ADA, "approval", "s-bob", {"decision": "allow"}),
        (CAROL, "llm_call", "s-carol", {"tokens": 5}),
    ]
    for ctx, event_type, session, data in plan:
        assert await ask(node, ctx, "doer", "act", event_type=event_type, session_id=session, data=data)
        await clock.advance(10)


async def test_a_forgotten_user_reads_as_type_time_forgotten(start: Callable[[], Any]) -> None:
    node = await start()
    await seed(node)
    before = await trail(node)
    carols = [e for e in before if e["principal"] == "carol"]
    assert len(carols) == 2 and all(e["v"] == 2 for e in before)
    out = await ask(node, ADA, "audit_event", "forget_subject", user_id="bob")
    assert out["forgotten"] == 4 and out["cleared"] == {"audit_events": 4}  # bob's 3 and ada's in s-bob
    after = await trail(node)
    assert [e["seq"] for e in after] == [1, 2, 3, 4, 5, 6]
    for old, new in zip(before, after, strict=True):
        if old["principal"] == "carol":
            assert new == old  # untouched
            continue
        assert new["forgotten"] is True
        assert (new["event_type"], new["ts"] // 1, new["hash"]) == (
            old["event_type"],
            old["ts"] // 1,
            old["hash"],
        )
        assert (new["detail"], new["data"], new["principal"], new["session_id"]) == ("", {}, "", "")
    assert [e for e in after if e["principal"] == "carol"] == carols  # counted before and after
    verify = await ask(node, ADA, "audit_event", "verify")
    assert verify["ok"] and verify["checked"] == 6
    # Every remaining event, forgotten or not, is still covered: an edit of its stored bytes is reported.
    store = node.store
    for seq in range(1, 7):
        (saved,) = await raw(store, "SELECT body FROM events WHERE stream = 'audit' AND seq = ?", (seq,))
        body = bytes(saved[0])
        forged = body[:20] + bytes([body[20] ^ 0x40]) + body[21:]
        await raw(store, "UPDATE events SET body = ? WHERE stream = 'audit' AND seq = ?", (forged, seq))
        verify = await ask(node, ADA, "audit_event", "verify")
        assert (verify["ok"], verify["first_bad_seq"]) == (False, seq)
        await raw(store, "UPDATE events SET body = ? WHERE stream = 'audit' AND seq = ?", (body, seq))
    assert (await ask(node, ADA, "audit_event", "verify"))["ok"]


async def test_the_forgotten_token_is_in_no_file_after_a_stop(start: Callable[[], Any]) -> None:
    """Sealed events never held the token in clear; events written before sealing existed did, and forgetting
    blanks them with secure_delete: after the node stops, no byte of the token is left (exact, lower-case)."""
    node = await start()
    scope = ADA.scope
    for who, token in (("bob", TOKEN), ("carol", CAROLS)):  # format 1, as the trail was written before
        old = audit_record("tool_executed", f"old {token}", "", {"input": token}, 999_000.0) | {
            "principal": who
        }
        await node.store.events.append(scope, STREAM, old)
    await seed(node)
    assert await holders(node, TOKEN) and await holders(node, CAROLS)  # the scan sees what is stored
    out = await ask(node, ADA, "audit_event", "forget_subject", user_id="bob")
    assert (out["forgotten"], out["legacy"]) == (5, 1)
    assert (await ask(node, ADA, "audit_event", "verify"))["ok"]
    await node.stop(deadline=5)
    found = await holders(node, TOKEN)
    assert found == [] and await holders(node, CAROLS)  # carol's old event is still there, in clear


async def holders(node: Node, token: str) -> list[str]:
    """Where the token's bytes are: the SQLite files (database, -wal, -shm; the store may be closed) or, on
    PostgreSQL, any events or key row (what a dump would show)."""
    store: Store = node.store
    needles = [token.encode(), token.lower().encode()]
    if store.backend == "sqlite":
        folder = Path(store.path).parent  # type: ignore[attr-defined]
        return [
            p.name
            for p in sorted(folder.iterdir())
            if p.is_file() and any(n in p.read_bytes().lower() for n in needles)
        ]
    rows = await raw(store, "SELECT seq, data, body FROM events")
    rows += await raw(store, "SELECT key_id, subjects, key FROM event_keys")
    return [
        str(r[0])
        for r in rows
        if any(n in (str(r[1]).encode() + bytes(r[2] or b"")).lower() for n in needles)
    ]


async def test_who_may_forget_what(start: Callable[[], Any]) -> None:
    node = await start()
    await seed(node)
    with pytest.raises(PermissionDenied):
        await ask(node, BOB, "audit_event", "forget_subject", user_id="carol")
    with pytest.raises(PermissionDenied):
        await ask(node, BOB, "audit_event", "forget_subject", tenant=True)
    with pytest.raises(PermissionDenied):  # (over HTTP a viewer cannot call it at all: access "write")
        await ask(node, VIC, "audit_event", "forget_subject", user_id="bob")
    with pytest.raises(InvalidArgument):
        await ask(node, ADA, "audit_event", "forget_subject", user_id="bob", tenant=True)
    with pytest.raises(InvalidArgument):
        await ask(node, ADA, "audit_event", "forget_subject")
    # Not his session: nothing taken (the store's reply to memory.forget counts 0, no error).
    assert (await ask(node, BOB, "audit_event", "forget_subject", session_id="s-carol"))["forgotten"] == 0
    assert (await ask(node, BOB, "audit_event", "forget_subject", session_id="s-bob"))["forgotten"] == 3
    assert (await ask(node, CAROL, "audit_event", "forget_subject", user_id="carol"))["forgotten"] == 2
    left = [e for e in await trail(node) if not e.get("forgotten")]
    assert [(e["principal"], e["event_type"]) for e in left] == [("bob", "login")]
    assert (await ask(node, ADA, "audit_event", "forget_subject", tenant=True))["forgotten"] == 1
    assert all(e.get("forgotten") for e in await trail(node))
    assert (await ask(node, ADA, "audit_event", "verify"))["ok"]
    # The trail goes on: a new event of a forgotten user is readable again (a new key).
    await ask(node, BOB, "doer", "act", event_type="chat", session_id="s-bob")
    newest = (await trail(node))[-1]
    assert (newest["principal"], newest["event_type"], newest.get("forgotten")) == ("bob", "chat", None)


async def test_retention_by_event_type_signs_an_anchor_verify_checks(start: Callable[[], Any]) -> None:
    node = await start()
    await seed(node)
    clock: ManualClock = node.test_clock  # type: ignore[attr-defined]
    rule = RetentionRule("events", STREAM, max_age=15, event_types=("tool_executed",))
    report = await node.store.apply_retention([rule], clock.time())
    assert report.deleted["events"] == 2
    events = await trail(node)
    assert [e["seq"] for e in events if e.get("trimmed")] == [1, 3]
    assert all(e["event_type"] == "tool_executed" for e in events if e.get("trimmed"))
    assert [e["event_type"] for e in events if not e.get("trimmed")] == [
        "llm_call",
        "login",
        "approval",
        "llm_call",
        "audit_erasure",
    ]
    assert events[-1]["data"] == {"reason": "trimmed", "entries": 2, "event_types": ["tool_executed"]}
    exported = await ask(node, VIC, "audit_event", "export_anchors")
    (anchor,) = json.loads(json.dumps(exported["anchors"]))
    assert anchor["seq"] == 7 and anchor["trimmed"] == {"event_types": ["tool_executed"], "entries": 2}
    assert anchor["signature"] and anchor["public_key"] and anchor["key_id"]
    verify = await ask(node, ADA, "audit_event", "verify", anchor=anchor)
    assert verify["ok"] and verify["anchored"]
    with pytest.raises(InvalidArgument):
        await ask(node, ADA, "audit_event", "verify", anchor=anchor | {"seq": 6})
    # A prefix trim, then the remainder rewritten with every hash recomputed from a forged base.
    await ask(node, BOB, "doer", "act", event_type="chat", session_id="s-bob")
    await node.store.apply_retention([RetentionRule("events", STREAM, max_count=4)], clock.time())
    newest = (await ask(node, ADA, "audit_event", "export_anchors"))["anchors"][-1]
    assert (newest["base_seq"], newest["seq"]) == (4, 8)
    await rechain(node.store, 5, (4, "e" * 64))
    assert (await ask(node, ADA, "audit_event", "verify"))["ok"]  # the trail alone looks fine
    verify = await ask(node, ADA, "audit_event", "verify", anchor=newest)
    assert (verify["ok"], verify["first_bad_seq"]) == (False, 5)
    verify = await ask(node, ADA, "audit_event", "verify", anchor=anchor)  # the older anchor sees it too
    assert not verify["ok"]


async def test_events_written_before_format_2_still_verify(start: Callable[[], Any]) -> None:
    node = await start()
    for i in range(3):
        old = audit_record("policy_changed", f"n={i}", "", {}, 999_000.0 + i) | {"principal": "bob"}
        await node.store.events.append(ADA.scope, STREAM, old)
    await seed(node)
    events = await trail(node)
    assert [e["v"] for e in events] == [1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert [e["detail"] for e in events[:3]] == ["n=0", "n=1", "n=2"]
    assert (await ask(node, ADA, "audit_event", "verify"))["checked"] == 9
    await ask(node, ADA, "audit_event", "forget_subject", user_id="bob")
    events = await trail(node)
    assert [(e["event_type"], e.get("forgotten")) for e in events[:3]] == [("policy_changed", True)] * 3
    assert events[-1]["event_type"] == "audit_erasure"
    verify = await ask(node, ADA, "audit_event", "verify")
    assert verify["ok"] and verify["checked"] == 10
    await raw(node.store, "UPDATE events SET ts = ts + 1 WHERE stream = 'audit' AND seq = 2")
    verify = await ask(node, ADA, "audit_event", "verify")
    assert (verify["ok"], verify["first_bad_seq"]) == (False, 2)


@pytest.mark.skipif(not PG_DSN, reason="MINIHERMES_PG_DSN is not set (scripts/setup.d/10-postgres.sh)")
def test_a_postgres_node_signs_anchors_with_its_data_dirs_key(tmp_path: Path) -> None:
    from minihermes.runtime import AppConfig, build_node

    config = AppConfig.from_dict({"node": {"data_dir": str(tmp_path / "d"), "backend": "postgres"}})
    config.model.node.backend_options = {"dsn": PG_DSN, "schema": "never_opened"}
    node = build_node(config)  # not started: nothing is opened
    assert node.store.anchor_key.path == tmp_path / "d" / "anchor.key"  # type: ignore[attr-defined]


@pytest.mark.parametrize("session", ["s\x00nul", "x" * 600, "é" * 300], ids=["nul", "over-512", "multibyte"])
async def test_an_event_whose_ids_the_store_cannot_key_is_written_and_forgettable(
    start: Callable[[], Any], session: str
) -> None:
    # Ids come from requests: a session id with a NUL or past the store's 512-character subject limit made
    # the event go unwritten (the fuzzer's finding) and its forget crash the actor.
    node = await start()
    assert await ask(
        node, BOB, "doer", "act", event_type="tool_executed", session_id=session, data={"input": TOKEN}
    )
    events = await trail(node)
    assert len(events) == 1 and session.startswith(events[0]["session_id"]) and TOKEN in json.dumps(events)
    out = await ask(node, ADA, "audit_event", "forget_subject", session_id=session)
    assert out["forgotten"] == 1, out
    assert TOKEN not in json.dumps(await trail(node))
    assert (await ask(node, ADA, "audit_event", "verify"))["ok"]
