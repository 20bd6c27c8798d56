"""session_manager: KV-backed sessions with a channel+user index, tenant-scoped, per-user visibility, audited."""

from __future__ import annotations

import pytest

from minihermes.agent.audit_event import AuditEvent
from minihermes.agent.session_manager import SessionManager
from minihermes.runtime import ActorSpec, InvalidArgument, NotFound, PermissionDenied, RequestContext

from .conftest import ACME, ACME_USER, ACME_VIEWER, GLOBEX

ACME_USER2 = RequestContext(tenant="acme", principal="carol", roles=frozenset({"user"}))


def specs() -> list[ActorSpec]:
    return [
        ActorSpec("audit_event", AuditEvent, per_tenant=True),
        ActorSpec("session_manager", SessionManager, per_tenant=True),
    ]


async def test_create_get_by_id_and_by_channel_index(make_node):
    node = await make_node(specs())
    r = await node.ask(
        "session_manager", "create_session", {"channel": "telegram", "user_id": "u1"}, ctx=ACME
    )
    sid = r["session_id"]
    assert r["status"] == "ok" and sid.startswith("sess-") and len(sid) == 37
    assert r["state"] == "active" and r["channel"] == "telegram" and r["user_id"] == "u1"
    by_id = await node.ask("session_manager", "get_session", {"session_id": sid}, ctx=ACME)
    by_index = await node.ask(
        "session_manager", "get_session", {"channel": "telegram", "user_id": "u1"}, ctx=ACME
    )
    assert by_id == by_index and by_id["session_id"] == sid


async def test_session_ids_are_unguessable_and_index_points_at_newest(make_node):
    node = await make_node(specs())
    ids = [
        (await node.ask("session_manager", "create_session", {"channel": "web", "user_id": "u"}, ctx=ACME))[
            "session_id"
        ]
        for _ in range(20)
    ]
    assert len(set(ids)) == 20
    # no shared structure between consecutive ids beyond the prefix (random, not a counter or a timestamp)
    assert len({i[5:13] for i in ids}) == 20
    got = await node.ask("session_manager", "get_session", {"channel": "web", "user_id": "u"}, ctx=ACME)
    assert got["session_id"] == ids[-1]


async def test_index_keys_do_not_collide_through_separators(make_node):
    node = await make_node(specs())
    a = await node.ask("session_manager", "create_session", {"channel": "a:b", "user_id": "c"}, ctx=ACME)
    b = await node.ask("session_manager", "create_session", {"channel": "a", "user_id": "b:c"}, ctx=ACME)
    got_a = await node.ask("session_manager", "get_session", {"channel": "a:b", "user_id": "c"}, ctx=ACME)
    got_b = await node.ask("session_manager", "get_session", {"channel": "a", "user_id": "b:c"}, ctx=ACME)
    assert got_a["session_id"] == a["session_id"] and got_b["session_id"] == b["session_id"]


async def test_end_session_is_idempotent_and_unindexes(make_node):
    node = await make_node(specs())
    sid = (await node.ask("session_manager", "create_session", {"user_id": "u"}, ctx=ACME))["session_id"]
    r = await node.ask("session_manager", "end_session", {"session_id": sid}, ctx=ACME)
    assert r == {"status": "ok", "session_id": sid, "state": "ended", "already_ended": False}
    again = await node.ask("session_manager", "end_session", {"session_id": sid}, ctx=ACME)
    assert again["already_ended"] is True
    got = await node.ask("session_manager", "get_session", {"session_id": sid}, ctx=ACME)
    assert got["state"] == "ended" and got["ended_at"] is not None
    with pytest.raises(NotFound):
        await node.ask("session_manager", "get_session", {"channel": "web", "user_id": "u"}, ctx=ACME)


async def test_missing_and_malformed_lookups_are_structured(make_node):
    node = await make_node(specs())
    with pytest.raises(NotFound):
        await node.ask("session_manager", "get_session", {"session_id": "sess-nope"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "get_session", {}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "get_session", {"session_id": "../../etc"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "create_session", {"channel": "", "user_id": "u"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "create_session", {"channel": "x\n", "user_id": "u"}, ctx=ACME)
    with pytest.raises(InvalidArgument):
        await node.ask("session_manager", "list_sessions", {"state": "zombie"}, ctx=ACME)


async def test_tenants_never_see_each_others_sessions(make_node):
    node = await make_node(specs())
    sid = (await node.ask("session_manager", "create_session", {"user_id": "u"}, ctx=ACME))["session_id"]
    with pytest.raises(NotFound):
        await node.ask("session_manager", "get_session", {"session_id": sid}, ctx=GLOBEX)
    with pytest.raises(NotFound):
        await node.ask("session_manager", "end_session", {"session_id": sid}, ctx=GLOBEX)
    assert (await node.ask("session_manager", "list_sessions", {}, ctx=GLOBEX))["sessions"] == []
    assert (await node.ask("session_manager", "list_sessions", {}, ctx=ACME))["count"] == 1


async def test_users_see_only_their_own_sessions(make_node):
    node = await make_node(specs())
    mine = await node.ask("session_manager", "create_session", {"channel": "web"}, ctx=ACME_USER)
    assert mine["user_id"] == "bob"  # a user's session belongs to the user, whatever the default says
    theirs = await node.ask("session_manager", "create_session", {}, ctx=ACME_USER2)
    admin_made = await node.ask("session_manager", "create_session", {"user_id": "bob"}, ctx=ACME)
    with pytest.raises(PermissionDenied):
        await node.ask("session_manager", "create_session", {"user_id": "carol"}, ctx=ACME_USER)
    with pytest.raises(NotFound):  # same answer as a missing session: existence is not disclosed
        await node.ask("session_manager", "get_session", {"session_id": theirs["session_id"]}, ctx=ACME_USER)
    with pytest.raises(NotFound):
        await node.ask("session_manager", "end_session", {"session_id": theirs["session_id"]}, ctx=ACME_USER)
    with pytest.raises(PermissionDenied):
        await node.ask("session_manager", "list_sessions", {"user_id": "carol"}, ctx=ACME_USER)
    listed = await node.ask("session_manager", "list_sessions", {}, ctx=ACME_USER)
    assert {s["session_id"] for s in listed["sessions"]} == {mine["session_id"], admin_made["session_id"]}
    assert (await node.ask("session_manager", "list_sessions", {}, ctx=ACME))["total"] == 3
    # a viewer owns no session and sees none of the users' (their transcripts are theirs)
    assert (await node.ask("session_manager", "list_sessions", {}, ctx=ACME_VIEWER))["total"] == 0
    with pytest.raises(NotFound):
        await node.ask("session_manager", "get_session", {"session_id": mine["session_id"]}, ctx=ACME_VIEWER)
    only_carol = await node.ask("session_manager", "list_sessions", {"user_id": "carol"}, ctx=ACME)
    assert [s["session_id"] for s in only_carol["sessions"]] == [theirs["session_id"]]


async def test_list_filters_order_and_limit(make_node, clock):
    node = await make_node(specs())
    ids = []
    for ch in ("web", "cli", "web"):
        ids.append(
            (await node.ask("session_manager", "create_session", {"channel": ch, "user_id": "u"}, ctx=ACME))[
                "session_id"
            ]
        )
        await clock.advance(1)
    await node.ask("session_manager", "end_session", {"session_id": ids[0]}, ctx=ACME)
    everything = await node.ask("session_manager", "list_sessions", {}, ctx=ACME)
    assert [s["session_id"] for s in everything["sessions"]] == ids[::-1]
    active_web = await node.ask(
        "session_manager", "list_sessions", {"state": "active", "channel": "web"}, ctx=ACME
    )
    assert [s["session_id"] for s in active_web["sessions"]] == [ids[2]]
    top = await node.ask("session_manager", "list_sessions", {"limit": 1}, ctx=ACME)
    assert top["count"] == 1 and top["total"] == 3


async def test_touch_updates_last_active(make_node, clock):
    node = await make_node(specs())
    r = await node.ask("session_manager", "create_session", {}, ctx=ACME)
    await clock.advance(30)
    assert await node.ask("session_manager", "touch", {"session_id": r["session_id"]}, ctx=ACME) == {
        "status": "accepted"
    }
    got = await node.ask("session_manager", "get_session", {"session_id": r["session_id"]}, ctx=ACME)
    assert got["last_active_at"] == pytest.approx(r["created_at"] + 30)
    node.send("session_manager", "touch", {"session_id": "sess-unknown"}, ctx=ACME)  # ignored, no crash
    assert (await node.ask("session_manager", "get_stats", {}, ctx=ACME))["total_created"] == 1


async def test_sessions_survive_a_restart(make_node, tmp_path):
    node = await make_node(specs(), data_dir=tmp_path / "d")
    sid = (await node.ask("session_manager", "create_session", {"channel": "c", "user_id": "u"}, ctx=ACME))[
        "session_id"
    ]
    await node.stop()
    node2 = await make_node(specs(), data_dir=tmp_path / "d")
    got = await node2.ask("session_manager", "get_session", {"channel": "c", "user_id": "u"}, ctx=ACME)
    assert got["session_id"] == sid
    assert (await node2.ask("session_manager", "get_stats", {}, ctx=ACME))["total_created"] == 1


async def test_start_and_end_are_audited(make_node):
    node = await make_node(specs())
    sid = (await node.ask("session_manager", "create_session", {"channel": "web", "user_id": "u"}, ctx=ACME))[
        "session_id"
    ]
    await node.ask("session_manager", "end_session", {"session_id": sid}, ctx=ACME)
    events = (await node.ask("audit_event", "query_events", {"session_id": sid}, ctx=ACME))["events"]
    assert [e["event_type"] for e in events] == ["session_started", "session_ended"]
    assert events[0]["principal"] == "alice" and events[0]["data"]["channel"] == "web"


async def test_works_without_an_audit_actor(make_node):
    node = await make_node([ActorSpec("session_manager", SessionManager, per_tenant=True)])
    r = await node.ask("session_manager", "create_session", {}, ctx=ACME)
    assert r["status"] == "ok"
