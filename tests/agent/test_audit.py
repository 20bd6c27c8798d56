"""audit_event: append-only hash-chained trail, filtered queries, durable per-consumer cursors, scrubbing."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

from minihermes.agent.audit_event import STREAM, AuditEvent, fire_audit, scrub_secrets
from minihermes.runtime import ActorSpec, GenServer, InvalidArgument, call, cast, state
from minihermes.runtime.store._pg_testing import test_store_backend as backend_under_test

from .._proc import kill_hard, read_line, spawn_module
from .conftest import ACME, ACME_USER, ACME_VIEWER, GLOBEX, audit_trail

SQLITE_FILE = pytest.mark.skipif(
    backend_under_test() != "sqlite", reason="reads or writes the SQLite file itself"
)


class Sink(GenServer):
    got: list[Any] = state(default_factory=list)

    @cast
    def on_audit(self, event_type: str, detail: str = "", session_id: str = "", data: Any = None) -> None:
        self.got.append(event_type)

    @call
    def fire(self, event_type: str) -> bool:
        return fire_audit(self.host, event_type)


def specs() -> list[ActorSpec]:
    return [ActorSpec("audit_event", AuditEvent, per_tenant=True), ActorSpec("sink", Sink, per_tenant=True)]


async def log(node, ctx, event_type: str, **kw: Any) -> None:
    """log_event (a cast), then a call behind it in the same mailbox: the event is written when this returns."""
    assert await node.ask("audit_event", "log_event", {"event_type": event_type, **kw}, ctx=ctx) == {
        "status": "accepted"
    }
    await node.ask("audit_event", "get_stats", {}, ctx=ctx)


async def test_log_and_query_newest_last_with_filters(make_node, clock):
    node = await make_node(specs())
    for i in range(5):
        await log(
            node, ACME, "tool_executed" if i % 2 == 0 else "policy_changed", detail=f"n={i}", session_id="s1"
        )
        await clock.advance(10)
    r = await node.ask("audit_event", "query_events", {"event_type": "tool_executed"}, ctx=ACME)
    assert r["count"] == 3 and [e["detail"] for e in r["events"]] == ["n=0", "n=2", "n=4"]
    e = r["events"][0]
    assert set(e) >= {"seq", "event_type", "detail", "session_id", "data", "principal", "ts", "hash"}
    assert e["principal"] == "alice" and e["session_id"] == "s1"
    newest = await node.ask("audit_event", "query_events", {"limit": 2}, ctx=ACME)
    assert [e["detail"] for e in newest["events"]] == ["n=3", "n=4"]
    since = e["ts"] + 15
    later = await node.ask("audit_event", "query_events", {"since": since}, ctx=ACME)
    assert [e["detail"] for e in later["events"]] == ["n=2", "n=3", "n=4"]
    # some clients send milliseconds
    later_ms = await node.ask("audit_event", "query_events", {"since": since * 1000}, ctx=ACME)
    assert later_ms["events"] == later["events"]


async def test_query_pages_back_through_a_long_trail(make_node):
    node = await make_node(specs())
    for i in range(1200):
        node.send(
            "audit_event",
            "log_event",
            {"event_type": "rare" if i == 3 else "tick", "detail": str(i)},
            ctx=ACME,
        )
    r = await node.ask("audit_event", "query_events", {"event_type": "rare"}, ctx=ACME)
    assert [e["detail"] for e in r["events"]] == ["3"]
    r = await node.ask("audit_event", "query_events", {"limit": 1000}, ctx=ACME)
    assert r["count"] == 1000 and r["events"][0]["detail"] == "200" and r["events"][-1]["detail"] == "1199"


async def test_pages_of_the_trail_by_a_seq_cursor_newest_first(make_node, clock):
    """The dashboard's paging: each page's oldest seq is the next page's ``before_seq``; ``more`` says whether
    an older match exists; events appended meanwhile do not shift the pages; ``until`` bounds the newest."""
    node = await make_node(specs())
    for i in range(7):
        await log(node, ACME, "tool_executed" if i != 5 else "policy_changed", detail=f"n={i}")
        await clock.advance(10)

    async def ask(**kw: Any) -> Any:
        return await node.ask("audit_event", "query_events", {"event_type": "tool_executed", **kw}, ctx=ACME)

    first = await ask(limit=2)
    assert ([e["detail"] for e in first["events"]], first["more"]) == (["n=4", "n=6"], True)
    await log(node, ACME, "tool_executed", detail="n=7")  # appended while the reader pages back
    second = await ask(limit=2, before_seq=first["events"][0]["seq"])
    assert ([e["detail"] for e in second["events"]], second["more"]) == (["n=2", "n=3"], True)
    third = await ask(limit=2, before_seq=second["events"][0]["seq"])
    assert ([e["detail"] for e in third["events"]], third["more"]) == (["n=0", "n=1"], False)
    assert (await ask(limit=2, before_seq=1))["events"] == []
    until = first["events"][0]["ts"]  # n=4's time: nothing newer
    bounded = await ask(limit=10, until=until)
    assert [e["detail"] for e in bounded["events"]] == ["n=0", "n=1", "n=2", "n=3", "n=4"]
    assert bounded["more"] is False
    with pytest.raises(InvalidArgument):
        await ask(before_seq=-1)


async def test_trail_is_hash_chained_and_tenant_scoped(make_node):
    node = await make_node(specs())
    await log(node, ACME, "a")
    await log(node, ACME, "b")
    await log(node, GLOBEX, "c")
    v = await node.ask("audit_event", "verify", {}, ctx=ACME)
    assert v["ok"] is True and v["checked"] == 2 and v["status"] == "ok"
    assert [
        e["event_type"] for e in (await node.ask("audit_event", "query_events", {}, ctx=GLOBEX))["events"]
    ] == ["c"]
    recs = await node.store.events.read(ACME.scope, STREAM)
    assert recs[1].prev_hash == recs[0].hash
    assert (await node.ask("audit_event", "get_stats", {}, ctx=ACME))["event_count"] == 2


@SQLITE_FILE
async def test_tampering_is_detected(make_node):
    node = await make_node(specs())
    await log(node, ACME, "a", detail="original")
    await log(node, ACME, "b")
    # rewrite the stored rows behind the log's back, as someone with access to the file would: the content
    # is sealed (no 'original' to replace), so flip one bit of the first event's sealed bytes
    conn = sqlite3.connect(node.store.path, timeout=10)
    with conn:
        (body,) = conn.execute("SELECT body FROM events WHERE seq = 1").fetchone()
        forged = bytes([body[0] ^ 1]) + body[1:]
        n = conn.execute("UPDATE events SET body = ? WHERE seq = 1", (forged,)).rowcount
    conn.close()
    assert n == 1
    v = await node.ask("audit_event", "verify", {}, ctx=ACME)
    assert v["ok"] is False and v["first_bad_seq"] == 1 and v["status"] == "corrupt"


async def test_poll_events_durable_cursor_per_consumer(make_node, tmp_path):
    node = await make_node(specs(), data_dir=tmp_path / "d")
    for i in range(5):
        await log(node, ACME, "e", detail=str(i))
    r = await node.ask("audit_event", "poll_events", {"consumer_id": "siem", "limit": 3}, ctx=ACME)
    assert [e["detail"] for e in r["events"]] == ["0", "1", "2"] and r["cursor"] == 3
    other = await node.ask("audit_event", "poll_events", {"consumer_id": "other", "limit": 1}, ctx=ACME)
    assert [e["detail"] for e in other["events"]] == ["0"]
    await node.stop()
    node = await make_node(specs(), data_dir=tmp_path / "d")
    r = await node.ask("audit_event", "poll_events", {"consumer_id": "siem"}, ctx=ACME)
    assert [e["detail"] for e in r["events"]] == ["3", "4"] and r["cursor"] == 5
    r = await node.ask("audit_event", "poll_events", {"consumer_id": "siem"}, ctx=ACME)
    assert r["events"] == [] and r["cursor"] == 5


async def test_poll_without_commit_is_at_least_once(make_node):
    node = await make_node(specs())
    for i in range(3):
        await log(node, ACME, "e", detail=str(i))
    r1 = await node.ask("audit_event", "poll_events", {"consumer_id": "c", "commit": False}, ctx=ACME)
    r2 = await node.ask("audit_event", "poll_events", {"consumer_id": "c", "commit": False}, ctx=ACME)
    assert r1["events"] == r2["events"] and r1["committed"] == 0
    await node.ask("audit_event", "commit_cursor", {"consumer_id": "c", "cursor": 2}, ctx=ACME)
    r3 = await node.ask("audit_event", "poll_events", {"consumer_id": "c"}, ctx=ACME)
    assert [e["detail"] for e in r3["events"]] == ["2"]
    with pytest.raises(InvalidArgument):
        await node.ask("audit_event", "commit_cursor", {"consumer_id": "c", "cursor": 99}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("audit_event", "poll_events", {"consumer_id": "bad id!"}, ctx=ACME)


async def test_cursors_are_per_principal(make_node):
    node = await make_node(specs())
    await log(node, ACME, "e")
    await node.ask("audit_event", "poll_events", {"consumer_id": "exporter"}, ctx=ACME)
    r = await node.ask("audit_event", "poll_events", {"consumer_id": "exporter"}, ctx=ACME_VIEWER)
    assert len(r["events"]) == 1  # the viewer's "exporter" cursor is its own


async def test_users_read_only_their_own_events(make_node):
    node = await make_node(specs())
    await log(node, ACME, "admin_thing")
    await log(node, ACME_USER, "user_thing")
    mine = await node.ask("audit_event", "query_events", {}, ctx=ACME_USER)
    assert [e["event_type"] for e in mine["events"]] == ["user_thing"]
    polled = await node.ask("audit_event", "poll_events", {"consumer_id": "me"}, ctx=ACME_USER)
    assert [e["event_type"] for e in polled["events"]] == ["user_thing"]
    everything = await node.ask("audit_event", "query_events", {}, ctx=ACME_VIEWER)
    assert [e["event_type"] for e in everything["events"]] == ["admin_thing", "user_thing"]


async def test_secrets_are_scrubbed_before_they_are_written(make_node):
    node = await make_node(specs())
    key = "sk-proj-" + "A1b2C3d4" * 6
    await log(
        node,
        ACME,
        "provider_registered",
        detail=f"key={key} header=Authorization: Bearer abcdefgh12345678",
        data={"api_key": "hunter2", "nested": [{"token_value": f"x {key} y"}], "password": "pw", "n": 3},
    )
    raw = await node.store.events.read(ACME.scope, STREAM)
    text = repr(raw[0].data)
    assert key not in text and "hunter2" not in text and "abcdefgh12345678" not in text and "'pw'" not in text
    e = (await node.ask("audit_event", "query_events", {}, ctx=ACME))["events"][0]
    assert e["data"]["n"] == 3 and e["data"]["api_key"] == "[REDACTED]"
    assert "Bearer [REDACTED]" in e["detail"]


def test_scrub_keeps_ordinary_text():
    assert scrub_secrets({"detail": "calculator 42 * 17 = 714", "phantom_token": "ph-1"}) == {
        "detail": "calculator 42 * 17 = 714",
        "phantom_token": "ph-1",
    }
    assert scrub_secrets("task-list and sk-short") == "task-list and sk-short"


async def test_oversized_and_odd_events_are_bounded_not_lost(make_node):
    node = await make_node(specs())
    await log(node, ACME, "big", detail="x" * 100_000, data={"blob": "y" * 100_000})
    await log(node, ACME, "weird type with spaces/and;stuff")
    await log(node, ACME, "")
    events = (await node.ask("audit_event", "query_events", {}, ctx=ACME))["events"]
    assert len(events[0]["detail"]) < 4100 and events[0]["data"] == {"truncated": True, "size": 100_012}
    assert events[1]["event_type"] == "weird_type_with_spaces_and_stuff"
    assert events[2]["event_type"] == "unspecified"


async def test_bad_query_arguments(make_node):
    node = await make_node(specs())
    for args in ({"limit": 0}, {"limit": 5000}, {"since": -1}, {"limit": "ten"}):
        with pytest.raises(InvalidArgument):
            await node.ask("audit_event", "query_events", args, ctx=ACME)


async def test_subscribers_get_every_event(make_node):
    node = await make_node(specs())
    await node.ask("audit_event", "subscribe", {"target": "sink", "op": "on_audit"}, ctx=ACME)
    await log(node, ACME, "one")
    await log(node, ACME, "two")
    await node.ask("audit_event", "get_stats", {}, ctx=ACME)  # both events handled
    await node.ask("sink", "on_audit", {"event_type": "flush"}, ctx=ACME)
    for _ in range(10):
        cell = next(c for c in node.cells("sink"))
        if cell.instance is not None and cell.instance.got[-1:] == ["flush"]:
            break
        await asyncio.sleep(0.01)
    assert cell.instance.got == ["one", "two", "flush"]


@pytest.mark.slow
async def test_a_fired_event_is_durable_with_the_checkpoint_after_it(make_node, tmp_path):
    """SIGKILL: every action acknowledged (its checkpoint durable) has its audit event in the trail, although
    the ``audit_event`` actor was held busy the whole time: ``fire_audit`` writes the event from the sender,
    queued ahead of the sender's checkpoint (SQLite), or with the reply waiting for it (PostgreSQL), not
    through the audit actor's mailbox."""
    from .auditproc import ACTIONS, Actor, HeldAudit

    data = tmp_path / "d"
    proc = await spawn_module("tests.agent.auditproc", str(data))
    done = [int((await read_line(proc)).split()[1]) for _ in range(ACTIONS)]
    await kill_hard(proc)

    node = await make_node(
        [ActorSpec("audit_event", HeldAudit, per_tenant=True), ActorSpec("actor", Actor, per_tenant=True)],
        data_dir=data,
    )
    trail = await audit_trail(node)
    assert (
        [e["data"]["i"] for e in trail if e["event_type"] == "tool_executed"] == done == list(range(ACTIONS))
    )
    assert (await node.ask("audit_event", "verify", {}, ctx=ACME))["ok"] is True


async def test_fired_events_reach_subscribers_once_written(make_node):
    """Subscribers of ``audit_event`` get what ``fire_audit`` wrote, read back from the trail."""
    node = await make_node(specs())
    await node.ask("audit_event", "subscribe", {"target": "sink", "op": "on_audit"}, ctx=ACME)
    await node.ask("sink", "fire", {"event_type": "one"}, ctx=ACME)
    await node.ask("sink", "fire", {"event_type": "two"}, ctx=ACME)
    for _ in range(100):
        cell = next(c for c in node.cells("sink"))
        if cell.instance is not None and cell.instance.got == ["one", "two"]:
            break
        await asyncio.sleep(0.01)
    assert cell.instance.got == ["one", "two"]
    assert [e["event_type"] for e in await audit_trail(node)] == ["one", "two"]


async def test_forward_event_refuses_a_bad_seq_and_forwards_only_what_was_written(make_node):
    node = await make_node(specs())
    for bad in ("one", None, 1.5):
        with pytest.raises(InvalidArgument):
            await node.ask("audit_event", "forward_event", {"seq": bad}, ctx=ACME)
    await node.ask("audit_event", "subscribe", {"target": "sink", "op": "on_audit"}, ctx=ACME)
    # A seq out of range, or one nothing was written under: the cast is accepted, nothing is forwarded, and
    # the actor goes on (the next real event still arrives first).
    for seq in (0, -3, 99):
        assert await node.ask("audit_event", "forward_event", {"seq": seq}, ctx=ACME) == {
            "status": "accepted"
        }
    await node.ask("sink", "fire", {"event_type": "real"}, ctx=ACME)
    for _ in range(100):
        cell = next(c for c in node.cells("sink"))
        if cell.instance is not None and cell.instance.got:
            break
        await asyncio.sleep(0.01)
    assert cell.instance.got == ["real"]
